"""Memory pools of their own (torch.cuda.MemPool and use_mem_pool, cupy.cuda.MemoryPool):
each with its own segments, options, limit and statistics; its memory is freed like
any other gpurt allocation."""
import contextlib

from ._handle import Handle, ordinal
from ._native import check, fetch, ffi, lib
from .memory import _pool_usage, _stats


class MemPool(Handle):
    """A caching pool on `device` (default: the current one). `config` takes
    GPURT_ALLOC_CONF's syntax, options for this pool alone over the process's;
    `limit` caps the bytes it reserves (0: no cap; cupy's set_limit); `upstream` is
    where its segments come from: "driver" (cuMemAlloc), "async" (the driver's
    stream-ordered pool) or "managed" (cuMemAllocManaged, host-accessible). Closing it
    while it holds live allocations raises and leaves it as it was.
    `MemPool.default()` is a device's default pool, which is never destroyed."""

    _destroy = "gpurt_mem_pool_destroy"

    _UPSTREAMS = {"driver": "GPURT_UPSTREAM_DRIVER", "async": "GPURT_UPSTREAM_ASYNC", "managed": "GPURT_UPSTREAM_MANAGED"}

    def __init__(self, device=None, config=None, limit=0, upstream="driver"):
        if upstream not in self._UPSTREAMS:
            raise ValueError(f"upstream must be one of {sorted(self._UPSTREAMS)}, not {upstream!r}")
        options = ffi.new("gpurt_mem_pool_options_t*")
        check(lib.gpurt_mem_pool_options_init(options))
        options.upstream = getattr(lib, self._UPSTREAMS[upstream])
        text = ffi.new("char[]", config.encode()) if config is not None else ffi.NULL
        options.config = text
        options.limit_bytes = int(limit)
        super().__init__(fetch("gpurt_mem_pool_t", lib.gpurt_mem_pool_create, ordinal(device), options))

    @classmethod
    def default(cls, device=None):
        return cls._adopt(fetch("gpurt_mem_pool_t", lib.gpurt_mem_pool_default, ordinal(device)), owned=False)

    @property
    def device(self):
        return fetch("int", lib.gpurt_mem_pool_get_device, self._handle)

    def stats(self):
        """This pool's statistics, under torch.cuda.memory_stats' keys."""
        return _stats("gpurt_memory_stats_t", lib.gpurt_mem_pool_stats, self._handle)

    def usage(self):
        """cupy's MemoryPool figures: used, free and total bytes, free blocks."""
        return _pool_usage(lib.gpurt_mem_pool_usage, self._handle)

    def used_bytes(self):
        return self.usage()["used_bytes"]

    def total_bytes(self):
        return self.usage()["total_bytes"]

    def empty_cache(self):
        """Returns the pool's wholly free segments to the driver (cupy's free_all_blocks)."""
        check(lib.gpurt_mem_pool_empty_cache(self._handle))

    free_all_blocks = empty_cache

    def sleep(self, offload=True):
        """Gives the pool's device memory back to the driver, keeping its blocks'
        addresses (gpurt_mem_pool_sleep): with `offload` its contents wait in pinned
        host memory, else they are dropped. Needs expandable segments. While it
        sleeps, allocating from it raises and freeing works."""
        mode = lib.GPURT_SLEEP_OFFLOAD if offload else lib.GPURT_SLEEP_DISCARD
        check(lib.gpurt_mem_pool_sleep(self._handle, mode))

    def sleep_prepare(self):
        """Makes now the pinned host memory the next offloading sleep needs (so that it
        copies at once); returns its bytes (gpurt_mem_pool_sleep_prepare)."""
        return fetch("size_t", lib.gpurt_mem_pool_sleep_prepare, self._handle)

    def wake(self):
        """Maps the pool's memory back at the same addresses, with its contents if it
        slept with offload (gpurt_mem_pool_wake)."""
        check(lib.gpurt_mem_pool_wake(self._handle))

    def touch(self):
        """Before work that uses the pool's memory without allocating from it: in a
        share group the pool counts as used, and one the group's request put to sleep
        wakes first (gpurt_mem_pool_touch)."""
        check(lib.gpurt_mem_pool_touch(self._handle))

    @property
    def asleep(self):
        return bool(fetch("int", lib.gpurt_mem_pool_is_asleep, self._handle))

    @contextlib.contextmanager
    def sleeping(self, offload=True):
        """Asleep within the block, awake again after it."""
        self.sleep(offload)
        try:
            yield self
        finally:
            self.wake()


def device_sleep(device=None, offload=True):
    """Puts everything gpurt holds on `device` to sleep (gpurt_device_sleep): its
    default pool (and the cuBLAS workspaces in it), every MemPool and graph pool of
    it; with `offload` the contents wait in pinned host memory, else they are dropped.
    Pools already asleep keep their own sleep."""
    mode = lib.GPURT_SLEEP_OFFLOAD if offload else lib.GPURT_SLEEP_DISCARD
    check(lib.gpurt_device_sleep(ordinal(device), mode))


def device_sleep_prepare(device=None):
    """device_sleep's host memory made now, for every pool of `device`; its bytes
    (gpurt_device_sleep_prepare)."""
    return fetch("size_t", lib.gpurt_device_sleep_prepare, ordinal(device))


def device_wake(device=None):
    """Wakes what device_sleep put to sleep on `device` (gpurt_device_wake)."""
    check(lib.gpurt_device_wake(ordinal(device)))


def device_is_asleep(device=None):
    """Whether device_sleep put `device` to sleep and it has not been woken."""
    return bool(fetch("int", lib.gpurt_device_is_asleep, ordinal(device)))


@contextlib.contextmanager
def device_sleeping(device=None, offload=True):
    """Everything gpurt holds on `device` asleep within the block, awake after it."""
    device_sleep(device, offload)
    try:
        yield
    finally:
        device_wake(device)


@contextlib.contextmanager
def use_mem_pool(pool):
    """Within the block, this thread's allocations on the pool's device come from
    `pool` (torch.cuda.use_mem_pool): DeviceBuffer, and PyTorch and CuPy when they
    allocate through gpurt."""
    check(lib.gpurt_mem_pool_push(pool.handle))
    try:
        yield pool
    finally:
        check(lib.gpurt_mem_pool_pop())
