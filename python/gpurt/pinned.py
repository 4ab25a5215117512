"""Pinned (page-locked) host memory from gpurt's caching host pools
(torch's pin_memory, cupy.cuda.alloc_pinned_memory)."""
from ._handle import Allocation, Handle, address
from ._native import check, fetch, ffi, lib
from .memory import _pool_usage, _stats


class PinnedPool(Handle):
    """A caching pool of pinned host memory. `PinnedPool.default()` is the
    process-wide one; a new pool may be `portable` (usable from every context),
    `mapped` (with a device address) or `write_combined`."""

    _destroy = "gpurt_pinned_pool_destroy"

    def __init__(self, portable=False, mapped=False, write_combined=False):
        flags = (lib.GPURT_PINNED_PORTABLE if portable else 0) | (lib.GPURT_PINNED_DEVICE_MAPPED if mapped else 0) \
            | (lib.GPURT_PINNED_WRITE_COMBINED if write_combined else 0)
        super().__init__(fetch("gpurt_pinned_pool_t", lib.gpurt_pinned_pool_create, flags))

    @classmethod
    def default(cls):
        return cls._adopt(fetch("gpurt_pinned_pool_t", lib.gpurt_pinned_pool_default), owned=False)

    def malloc(self, nbytes):
        return PinnedBuffer(nbytes, pool=self)

    def empty_cache(self):
        """Returns cached, unused blocks to the system."""
        check(lib.gpurt_pinned_empty_cache(self._handle))

    def stats(self):
        return _stats("gpurt_host_memory_stats_t", lib.gpurt_pinned_stats, self._handle)

    def usage(self):
        """cupy's PinnedMemoryPool figures: used, free and total bytes, free blocks."""
        return _pool_usage(lib.gpurt_pinned_pool_usage, self._handle)

    def reset_peak_stats(self):
        check(lib.gpurt_pinned_reset_peak_stats(self._handle))


class PinnedBuffer(Allocation):
    """`nbytes` of pinned host memory from `pool` (default: the process-wide pool).
    `numpy.frombuffer(buf.view(), ...)` or `memoryview(buf.view())` reads and writes
    it in place; it is freed with the object (or by `free()`), and its reuse waits
    for the streams given to `record_stream`."""

    _destroy = "gpurt_pinned_free"

    def __init__(self, nbytes, pool=None):
        super().__init__(ffi.NULL)
        pool = PinnedPool.default() if pool is None else pool
        self.nbytes = int(nbytes)
        self._handle = fetch("void*", lib.gpurt_pinned_malloc, pool.handle, self.nbytes)

    def view(self):
        """A writable buffer over the memory (valid until the buffer is freed)."""
        return ffi.buffer(self._pointer(), self.nbytes)

    def device_pointer(self):
        """The device address of the memory (pools made with `mapped=True`)."""
        return address(fetch("void*", lib.gpurt_pinned_device_pointer, self._pointer()))

    def record_stream(self, stream):
        check(lib.gpurt_pinned_record_stream(self._pointer(), stream.handle))
