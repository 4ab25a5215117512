"""The caching device allocator: statistics (torch.cuda.memory_stats and friends)
and device buffers that other libraries can use without a copy."""
import math

from ._handle import Allocation, address, ordinal
from ._native import check, fetch, ffi, lib
from .streams import Stream, current_stream


def _stat_fields(value, prefix, out):
    """Flattens a C stats struct into torch's dotted keys ("allocated_bytes.all.peak")."""
    for name, field in ffi.typeof(value).fields:
        if name == "struct_size":
            continue
        key = f"{prefix}.{name}" if prefix else name
        item = getattr(value, name)
        if field.type.kind == "struct":
            _stat_fields(item, key, out)
        else:
            out[key] = item
    return out


def _stats(ctype, c_function, *args):
    """The statistics struct `ctype` that `c_function(*args, &stats)` fills, under
    torch's dotted keys."""
    stats = ffi.new(f"{ctype}*", {"struct_size": ffi.sizeof(ctype)})
    check(c_function(*args, stats))
    return dict(sorted(_stat_fields(stats[0], "", {}).items()))


def _four(c_function, *args):
    """The four uint64 figures `c_function(*args, &a, &b, &c, &d)` gives."""
    values = [ffi.new("uint64_t*") for _ in range(4)]
    check(c_function(*args, *values))
    return [v[0] for v in values]


def _pool_usage(c_function, handle):
    """cupy's pool figures (used, free and total bytes, free blocks) of a pool."""
    return dict(zip(("used_bytes", "free_bytes", "total_bytes", "free_blocks"), _four(c_function, handle)))


def memory_stats(device=None):
    """The allocator's statistics for a device, under torch.cuda.memory_stats' keys."""
    return _stats("gpurt_memory_stats_t", lib.gpurt_memory_stats, ordinal(device))


def memory_report(device=None):
    """Where this process's memory on a device is, in bytes (gpurt_memory_report): the
    driver's free and total, NVML's figure for the process, the context's local memory,
    each kind of gpurt pool, math-library workspaces and handles, modules, NCCL
    communicators, growable buffers, and the rest of the process's figure
    (`unattributed`). A figure gpurt cannot have (no NVML) is None."""
    unknown = (1 << 64) - 1  # GPURT_MEMORY_UNKNOWN
    report = _stats("gpurt_memory_report_t", lib.gpurt_memory_report, ordinal(device))
    return {name: None if value == unknown else value for name, value in report.items()}


def _usage(device):
    return _four(lib.gpurt_memory_usage, ordinal(device))


def memory_allocated(device=None):
    """Bytes in live allocations."""
    return _usage(device)[0]


def max_memory_allocated(device=None):
    return _usage(device)[1]


def memory_reserved(device=None):
    """Bytes held by the cache (allocated or free for reuse)."""
    return _usage(device)[2]


def max_memory_reserved(device=None):
    return _usage(device)[3]


def reset_peak_memory_stats(device=None):
    check(lib.gpurt_reset_peak_memory_stats(ordinal(device)))


def reset_accumulated_memory_stats(device=None):
    check(lib.gpurt_reset_accumulated_memory_stats(ordinal(device)))


def memory_summary(device=None):
    """torch.cuda.memory_summary's table for a device."""
    needed = ffi.new("size_t*")
    check(lib.gpurt_memory_summary(ordinal(device), ffi.NULL, 0, needed))
    text = ffi.new("char[]", needed[0])
    check(lib.gpurt_memory_summary(ordinal(device), text, needed[0], needed))
    return ffi.string(text).decode("utf-8", "replace")


def empty_cache():
    """Returns every cached, unused segment to the driver."""
    check(lib.gpurt_empty_cache())


def set_per_process_memory_fraction(fraction, device=None):
    check(lib.gpurt_set_per_process_memory_fraction(float(fraction), ordinal(device)))


def set_allocator_config(config):
    """Applies a GPURT_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF string
    ("expandable_segments:True,max_split_size_mb:256")."""
    check(lib.gpurt_alloc_set_config(config.encode()))


_TYPESTRS = {"bool": "|b1", "int8": "|i1", "uint8": "|u1", "int16": "<i2", "uint16": "<u2",
             "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
             "float16": "<f2", "float32": "<f4", "float64": "<f8"}


def allocator_backend():
    """The allocator behind every device's default pool: "native" or
    "cudaMallocAsync" (torch.cuda.get_allocator_backend)."""
    name = ffi.new("const char**")
    check(lib.gpurt_allocator_backend(name))
    return ffi.string(name[0]).decode()


def _typestr(dtype):
    """The array-interface type string of a dtype name, typestr or numpy dtype."""
    try:
        import numpy
        return numpy.dtype(dtype).str
    except ImportError:
        name = getattr(dtype, "name", dtype)
        if name in _TYPESTRS or name in _TYPESTRS.values():
            return _TYPESTRS.get(name, name)
        raise TypeError(f"unknown dtype {dtype!r} (install numpy for every numpy dtype)") from None


class DeviceBuffer(Allocation):
    """Device memory from gpurt's caching allocator (from `pool`, a gpurt.MemPool,
    where given), for use on `stream` (default:
    the current stream of the current device, or of `device`), freed when the object
    is (or by `free()`). `shape` and `dtype` describe it to other libraries through
    `__cuda_array_interface__`: `torch.as_tensor(buf, device="cuda")` and
    `cupy.asarray(buf)` use the memory without copying."""

    _destroy = "gpurt_free"

    def __init__(self, nbytes=None, *, shape=None, dtype="uint8", stream=None, device=None, pool=None):
        self._describe(nbytes, shape, dtype, stream, device)
        if pool is None:
            self._handle = fetch("void*", lib.gpurt_malloc, self.nbytes, self.stream.handle)
        else:
            self._handle = fetch("void*", lib.gpurt_mem_pool_malloc, pool.handle, self.nbytes, self.stream.handle)

    def _describe(self, nbytes, shape, dtype, stream, device=None):
        """Sets the shape, type, size and stream (None: the current stream of
        `device`), the memory not yet allocated."""
        super().__init__(ffi.NULL)
        self.typestr = _typestr(dtype)
        itemsize = int(self.typestr[2:])
        if shape is None:
            if nbytes is None:
                raise TypeError("give nbytes or shape")
            shape = (int(nbytes) // itemsize,)
        self.shape = tuple(int(n) for n in shape) if not isinstance(shape, int) else (int(shape),)
        self.nbytes = math.prod(self.shape) * itemsize if nbytes is None else int(nbytes)
        self.stream = current_stream(device) if stream is None else stream
        if not isinstance(self.stream, Stream):
            raise TypeError(f"stream must be a gpurt.Stream, got {type(self.stream).__name__}")

    def __repr__(self):
        state = f"ptr={address(self._handle):#x}" if self._handle != ffi.NULL else "freed"
        return f"<gpurt.{type(self).__name__} {self.nbytes} bytes {state} shape={self.shape} {self.typestr}>"

    @property
    def __cuda_array_interface__(self):
        native = self.stream.native
        return {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False),
                "strides": None, "version": 3,
                # The interface's value for the legacy default stream is 1, never 0.
                "stream": native if native else 1}

    def ipc_handle(self):
        """The bytes another process opens this buffer with (gpurt.IpcBuffer)."""
        return ipc_handle(self)

    def record_stream(self, stream):
        """Marks the memory as used on `stream` too: on free, its reuse waits for the
        work queued there so far (torch's Tensor.record_stream)."""
        check(lib.gpurt_record_stream(self._pointer(), stream.handle))

    def discard_on_sleep(self, discard=True):
        """Whether an offloading sleep of the buffer's pool drops its contents (a
        cache rebuilt after wake) instead of copying them; every buffer starts kept."""
        check(lib.gpurt_mem_discard_on_sleep(self._pointer(), 1 if discard else 0))

    def read_only(self, read_only=True):
        """Promises the buffer's contents do not change (a model's weights): later
        offloading sleeps of its pool keep one host copy of it instead of copying it
        again. Take the promise back (read_only=False) before writing it."""
        check(lib.gpurt_mem_read_only(self._pointer(), 1 if read_only else 0))

    def copy_from_host(self, data):
        """Copies a bytes-like object (bytes, bytearray, a numpy array, ...) into the
        start of the buffer, ordered on the buffer's stream; returns when done."""
        source = ffi.from_buffer(data)
        if len(source) > self.nbytes:
            raise ValueError(f"{len(source)} bytes do not fit in a buffer of {self.nbytes}")
        check(lib.gpurt_memcpy(self._pointer(), source, len(source), self.stream.handle))

    def copy_to_host(self, out=None):
        """The buffer's bytes, in a new bytearray or in the writable `out`, copied on
        the buffer's stream; returns when done."""
        out = bytearray(self.nbytes) if out is None else out
        target = ffi.from_buffer(out, require_writable=True)
        if len(target) > self.nbytes:
            raise ValueError(f"{len(target)} bytes asked of a buffer of {self.nbytes}")
        check(lib.gpurt_memcpy(target, self._pointer(), len(target), self.stream.handle))
        return out

    def copy_from_device(self, other, nbytes=None):
        """Copies `nbytes` (default: as many as both hold) from another device buffer,
        or from any device address given as an int, ordered on this buffer's stream."""
        if nbytes is None:
            nbytes = min(self.nbytes, len(other)) if hasattr(other, "__len__") else self.nbytes
        check(lib.gpurt_memcpy_async(self._pointer(), ffi.cast("void*", int(other)),
                                     nbytes, self.stream.handle))

    def fill_bytes(self, value):
        """Sets every byte to `value`, ordered on the buffer's stream."""
        check(lib.gpurt_memset_async(self._pointer(), int(value), 1, self.nbytes, self.stream.handle))

    def to_numpy(self):
        import numpy
        return numpy.frombuffer(self.copy_to_host(), dtype=self.typestr).reshape(self.shape)


def memcpy_batch_async(dsts, srcs, sizes, stream=None):
    """Queues `len(sizes)` copies on `stream` in one call (gpurt_memcpy_batch_async):
    `sizes[i]` bytes from `srcs[i]` to `dsts[i]`, each an address (an int, a buffer)
    of device, pinned or host memory. Every copy is checked before any is queued."""
    if not len(dsts) == len(srcs) == len(sizes):
        raise ValueError(f"{len(dsts)} destinations, {len(srcs)} sources and {len(sizes)} sizes")
    stream = stream or current_stream()
    d = ffi.new("void*[]", [ffi.cast("void*", int(x)) for x in dsts])
    s = ffi.new("void*[]", [ffi.cast("void*", int(x)) for x in srcs])
    n = ffi.new("size_t[]", [int(x) for x in sizes])
    check(lib.gpurt_memcpy_batch_async(d, s, n, len(sizes), stream.handle))


def empty(shape, dtype="float32", *, stream=None, device=None):
    """An uninitialised DeviceBuffer of `shape` and `dtype` (cupy.empty)."""
    return DeviceBuffer(shape=shape, dtype=dtype, stream=stream, device=device)


def ipc_handle(buffer):
    """The 256 bytes another process gives `IpcBuffer` to open `buffer` (a
    DeviceBuffer, or any gpurt allocation's address as an int). While another
    process has it open, freeing it here keeps the memory from reuse until
    `ipc_collect()` finds every such process closed it or exited."""
    handle = ffi.new("gpurt_ipc_mem_handle_t*")
    check(lib.gpurt_ipc_mem_handle(ffi.cast("void*", int(buffer)), handle))
    return bytes(ffi.buffer(handle.bytes))
