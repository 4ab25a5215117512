"""Growable virtual buffers (cuda.core's VirtualMemoryResource): addresses reserved once,
memory mapped into them on demand."""
from ._handle import Handle, address, ordinal
from ._native import check, fetch, lib
from .streams import current_stream


class VBuffer(Handle):
    """`VBuffer(max_bytes, device)` reserves addresses; `map(offset, nbytes)` backs part
    of them with memory (multiples of `granularity`), `unmap(offset, nbytes, stream)`
    gives whole mappings back after `stream`'s queued work. `ptr` never moves."""

    _destroy = "gpurt_vbuffer_destroy"

    def __init__(self, max_bytes, device=None):
        super().__init__(fetch("gpurt_vbuffer_t", lib.gpurt_vbuffer_create, ordinal(device), int(max_bytes)))

    @property
    def ptr(self):
        return address(fetch("void*", lib.gpurt_vbuffer_address, self._handle))

    @property
    def granularity(self):
        return fetch("size_t", lib.gpurt_vbuffer_granularity, self._handle)

    @property
    def mapped_bytes(self):
        return fetch("size_t", lib.gpurt_vbuffer_mapped_bytes, self._handle)

    def map(self, offset, nbytes):
        check(lib.gpurt_vbuffer_map(self._handle, int(offset), int(nbytes)))

    def unmap(self, offset, nbytes, stream=None):
        stream = current_stream() if stream is None else stream
        check(lib.gpurt_vbuffer_unmap(self._handle, int(offset), int(nbytes), stream.handle))
