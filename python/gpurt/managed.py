"""Managed (unified) memory, cupy's malloc_managed: one address the host and every
device can use, migrated on demand or by prefetch."""
from ._handle import ordinal
from ._native import check, fetch, ffi, lib
from .memory import DeviceBuffer

_ATTACH = {"global": "GPURT_MEM_ATTACH_GLOBAL", "host": "GPURT_MEM_ATTACH_HOST"}
_ADVICE = {"read_mostly": "GPURT_MEM_ADVISE_SET_READ_MOSTLY", "unset_read_mostly": "GPURT_MEM_ADVISE_UNSET_READ_MOSTLY",
           "preferred_location": "GPURT_MEM_ADVISE_SET_PREFERRED_LOCATION",
           "unset_preferred_location": "GPURT_MEM_ADVISE_UNSET_PREFERRED_LOCATION",
           "accessed_by": "GPURT_MEM_ADVISE_SET_ACCESSED_BY", "unset_accessed_by": "GPURT_MEM_ADVISE_UNSET_ACCESSED_BY"}


def _location(device):
    """A device argument, or "host" for host memory."""
    return lib.GPURT_DEVICE_HOST if device == "host" else ordinal(device)


class ManagedBuffer(DeviceBuffer):
    """Managed memory from the current device's managed pool, for use on its current
    stream: a DeviceBuffer (copies, `__cuda_array_interface__`) whose bytes the host
    also reads and writes in place through `view()`. `attach` is "global" (any stream
    may use it) or "host" (the host may use it while no stream does)."""

    def __init__(self, nbytes=None, *, shape=None, dtype="uint8", attach="global"):
        if attach not in _ATTACH:
            raise ValueError(f"attach must be one of {sorted(_ATTACH)}, not {attach!r}")
        self._describe(nbytes, shape, dtype, None)
        self._handle = fetch("void*", lib.gpurt_malloc_managed, self.nbytes, getattr(lib, _ATTACH[attach]))

    def view(self):
        """A writable host buffer over the memory: wait for the streams using it first."""
        return ffi.buffer(self._pointer(), self.nbytes)

    def prefetch(self, device=None, stream=None):
        """Migrates the memory to `device` (default: the current one; "host": host
        memory) in `stream`'s order (default: the buffer's stream)."""
        stream = self.stream if stream is None else stream
        check(lib.gpurt_mem_prefetch_async(self._pointer(), self.nbytes, _location(device), stream.handle))

    def advise(self, advice, device=None):
        """cudaMemAdvise: `advice` is one of "read_mostly", "preferred_location",
        "accessed_by" or their "unset_" forms; `device` an ordinal or "host"."""
        if advice not in _ADVICE:
            raise ValueError(f"advice must be one of {sorted(_ADVICE)}, not {advice!r}")
        check(lib.gpurt_mem_advise(self._pointer(), self.nbytes, getattr(lib, _ADVICE[advice]), _location(device)))
