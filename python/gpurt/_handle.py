"""Ownership of a C handle by a Python object, shared by every handle type."""
from ._native import check, ffi, lib
from .errors import InvalidHandleError


def ordinal(device):
    """A device argument as the C API takes it: None is the current device."""
    if device is None:
        return lib.GPURT_CURRENT_DEVICE
    return int(device)


def address(cdata):
    """A pointer or handle as a Python int (0 for NULL)."""
    return int(ffi.cast("uintptr_t", cdata))


class Handle:
    """Owns (or borrows) one gpurt handle. `close()`, leaving a `with` block or
    garbage collection destroys an owned handle once; afterwards the handle is NULL,
    so a further call reports GPURT_ERROR_INVALID_HANDLE from the C library."""

    _destroy = None  # name of the C function that destroys this kind of handle

    def __init__(self, handle, owned=True):
        self._handle, self._owned = handle, owned

    @classmethod
    def _adopt(cls, handle, owned):
        """An object of this class for a handle made by another C call."""
        obj = cls.__new__(cls)
        Handle.__init__(obj, handle, owned)
        return obj

    @property
    def handle(self):
        """The C handle (a cffi pointer), for passing to gpurt's C functions."""
        return self._handle

    def close(self):
        """Destroys an owned handle. If the C library refuses (a pool still in use),
        this raises and the object keeps its handle, as the C side keeps the object."""
        if self._owned and self._handle != ffi.NULL:
            check(getattr(lib, self._destroy)(self._handle))
        self._handle = ffi.NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # never raise from the collector; the C side keeps its pools consistent
            pass

    def __eq__(self, other):
        return type(other) is type(self) and address(other._handle) == address(self._handle)

    def __hash__(self):
        return address(self._handle)


class Allocation(Handle):
    """Owns one block of memory (`_destroy` names its C free function); `free()`
    returns it, as do leaving a `with` block and garbage collection."""

    nbytes = 0

    def _pointer(self):
        """The pointer, refused once the memory was freed."""
        if self._handle == ffi.NULL and self.nbytes:
            raise InvalidHandleError(lib.GPURT_ERROR_INVALID_HANDLE, "GPURT_ERROR_INVALID_HANDLE",
                                     f"this {type(self).__name__} was freed")
        return self._handle

    @property
    def ptr(self):
        """The address as an int."""
        return address(self._pointer())

    def __int__(self):
        return self.ptr

    def __len__(self):
        return self.nbytes

    def free(self):
        self.close()
