"""gpurt for Python: the CUDA runtime layer of torch.cuda / cupy.cuda (devices,
streams, events, the caching allocator, pinned memory, graphs, the math libraries'
handles) over gpurt's C ABI.

Works where there is no CUDA driver: `device_count()` is 0, `is_available()` False,
and calls that need a device raise `gpurt.NoDriverError` with the C message.
"""
from ._native import check as _check, fetch as _fetch, lib as _lib, library_path
from .device import (Device, DeviceProperties, can_device_access_peer, clock_rate, current_device, device_count,
                     device_memory_used, driver_version, get_arch_list, get_device_capability, get_device_name,
                     get_device_properties, init, is_available, is_bf16_supported, is_initialized,
                     list_gpu_processes, mem_get_info, power_draw, set_device, synchronize, telemetry, temperature,
                     utilization)
from .blas import current_blas_handle, get_cublas_handle
from .errors import (CommError, CompilationError, CudaError, Error, FileError, ForkedError, InvalidArgumentError, InvalidHandleError,
                     NoDeviceError, NoDriverError, NotSupportedError, OutOfMemoryError, StreamCaptureError)
from .graphs import Graph, GraphPool, capture_pool, conditional, conditional_handle, conditional_set, graph, graph_pool_handle
from .kernels import elementwise
from .ipc import IpcBuffer, ipc_collect, ipc_kept
from .memory_history import annotate, dump_snapshot, memory_snapshot, record_memory_history
from .memory import (DeviceBuffer, allocator_backend, empty, empty_cache, ipc_handle, memcpy_batch_async, max_memory_allocated, max_memory_reserved,
                     memory_allocated, memory_report, memory_reserved, memory_stats, memory_summary,
                     reset_accumulated_memory_stats, reset_peak_memory_stats, set_allocator_config,
                     set_per_process_memory_fraction)
from .managed import ManagedBuffer
from .mempool import MemPool, device_is_asleep, device_sleep, device_sleep_prepare, device_sleeping, device_wake, use_mem_pool
from .pinned import PinnedBuffer, PinnedPool
from .vbuffer import VBuffer
from .streams import (Event, ExternalStream, GreenContext, Stream, current_stream, default_stream, per_thread_default_stream,
                      priority_range, set_stream, stream, stream_from_pool)

from . import blas, comm, gds, random, sanitizer, share
from . import cupy, torch  # gpurt.torch.use_as_allocator(), gpurt.cupy.use_as_allocator()

__version__ = "0.1.0"


def version():
    """The C library's version as MAJOR*10000 + MINOR*100 + PATCH."""
    return _lib.gpurt_version()


def last_cuda_error():
    """The raw CUresult of this thread's last failed driver call (0 if none)."""
    return _fetch("int", _lib.gpurt_last_cuda_error)


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def set_sync_debug_mode(mode):
    """torch.cuda.set_sync_debug_mode: "default" (0), "warn" (1) or "error" (2)."""
    _check(_lib.gpurt_set_sync_debug_mode(_SYNC_DEBUG_MODES.get(mode, mode)))


def get_sync_debug_mode():
    return _fetch("int", _lib.gpurt_get_sync_debug_mode)


__all__ = [name for name in dir() if not name.startswith("_")]
