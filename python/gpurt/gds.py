"""Files to and from device memory (torch.cuda.gds): GPUDirect Storage through cuFile
where the machine has it, else gpurt's staged path; `mode()` says which."""
import os

from ._handle import Handle
from ._native import check, ffi, fetch, lib
from .streams import current_stream

_MODES = {1: "gds", 2: "cufile-compat", 3: "staged"}


def mode():
    """'gds', 'cufile-compat' or 'staged': the path transfers take (chosen once)."""
    return _MODES[int(fetch("gpurt_gds_mode_t", lib.gpurt_gds_mode))]


def _ptr(buffer):
    return ffi.cast("void*", int(buffer))


def register_buffer(buffer, nbytes=None):
    """Registers device memory (a DeviceBuffer, or an address with `nbytes`) for
    transfers (torch.cuda.gds.gds_register_buffer). Optional."""
    size = buffer.nbytes if nbytes is None else nbytes
    check(lib.gpurt_gds_register_buffer(_ptr(buffer), size))


def deregister_buffer(buffer):
    check(lib.gpurt_gds_deregister_buffer(_ptr(buffer)))


class GdsFile(Handle):
    """A file opened with `os` open flags (`os.O_RDONLY`, `os.O_RDWR | os.O_CREAT`),
    as torch.cuda.gds.GdsFile. `read`/`write` return when done and give the byte
    count; `read_async`/`write_async` run in the order of `stream` (the current
    stream by default)."""

    _destroy = "gpurt_gds_file_close"

    def __init__(self, path, flags=os.O_RDONLY):
        super().__init__(fetch("gpurt_gds_file_t", lib.gpurt_gds_file_open, os.fsencode(path), int(flags)))

    def read(self, buffer, nbytes=None, offset=0):
        """Reads up to `nbytes` (default: the buffer's size) at `offset` into `buffer`."""
        size = buffer.nbytes if nbytes is None else nbytes
        return fetch("size_t", lib.gpurt_gds_read, self._handle, _ptr(buffer), size, int(offset))

    def write(self, buffer, nbytes=None, offset=0):
        size = buffer.nbytes if nbytes is None else nbytes
        return fetch("size_t", lib.gpurt_gds_write, self._handle, _ptr(buffer), size, int(offset))

    def read_async(self, buffer, nbytes=None, offset=0, stream=None):
        size = buffer.nbytes if nbytes is None else nbytes
        stream = stream or current_stream()
        check(lib.gpurt_gds_read_async(self._handle, _ptr(buffer), size, int(offset), stream.handle))

    def write_async(self, buffer, nbytes=None, offset=0, stream=None):
        size = buffer.nbytes if nbytes is None else nbytes
        stream = stream or current_stream()
        check(lib.gpurt_gds_write_async(self._handle, _ptr(buffer), size, int(offset), stream.handle))
