use libc::{c_char, c_int, c_void};

use super::stats::{gpurt_memory_stats_t, MEMORY_STATS_V1_SIZE};
use crate::boundary::{self, in_str, write_sized, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

fn native_stream(stream: gpurt_stream_t) -> crate::Result<u64> {
    Ok(crate::stream::get(Handle::from_ptr(stream))?.raw as u64)
}

/// Allocates `size` bytes of device memory on `stream`'s device from gpurt's caching
/// pool, for use on `stream`. Size 0 gives NULL. Memory freed on the same stream is
/// reused at once; see `gpurt_record_stream` for other streams.
///
/// @param size bytes wanted; 0 succeeds with `*ptr` NULL; above GPURT_MAX_ALLOCATION_SIZE is out of memory
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) the block is for: its device is the block's
/// @param[out] ptr receives the block's device address (NULL on failure); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_OUT_OF_MEMORY when the device has no more memory even after the cache is released (or the pool's limit or memory fraction is reached); GPURT_ERROR_FORKED in a fork() child; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: enqueues nothing, and the block may be used at once by work queued on `stream`. While `stream` is being captured, the block comes from the graph's private pool (see gpurt_stream_begin_capture), also when gpurt did not begin the capture (a framework's or your own cudaStreamBeginCapture): such a capture gets a private pool at its first gpurt allocation (or the pool gpurt_graph_pool_bind_thread bound to this thread), which its driver graph holds until the graph and every executable graph made from it are destroyed and their launches done; nobody else is handed that memory meanwhile.
#[no_mangle]
pub extern "C" fn gpurt_malloc(size: usize, stream: gpurt_stream_t, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_malloc", || {
        let out = Out::new(ptr, "ptr")?;
        let s = crate::stream::get(Handle::from_ptr(stream))?;
        out.write(super::device::malloc(s.device(), size as u64, s.raw as u64)? as *mut c_void);
        Ok(())
    })
}

/// Allocates on `device` (`GPURT_CURRENT_DEVICE` for the current one) for use on
/// this thread's current stream of that device.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param size bytes wanted, as for gpurt_malloc
/// @param[out] ptr receives the block's device address; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_OUT_OF_MEMORY when the device has no more memory even after the cache is released (or the pool's limit or memory fraction is reached); GPURT_ERROR_FORKED in a fork() child; or a status every call may give (@ref statuses).
/// @par Ordering
/// As gpurt_malloc, for this thread's current stream of `device`.
#[no_mangle]
pub extern "C" fn gpurt_malloc_device(device: c_int, size: usize, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_malloc_device", || {
        let out = Out::new(ptr, "ptr")?;
        let d = crate::device::resolve(device)?;
        let stream = native_stream(crate::stream::current(d)?.to_ptr())?;
        out.write(super::device::malloc(d, size as u64, stream)? as *mut c_void);
        Ok(())
    })
}

/// Allocates on `device` for use on `native_stream`, a `CUstream`/`cudaStream_t`
/// that gpurt need not know (NULL: the legacy default stream); otherwise as
/// `gpurt_malloc`. For libraries that pass raw streams (RMM, CUTLASS, ...).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param size bytes wanted, as for gpurt_malloc
/// @param native_stream a `CUstream`/`cudaStream_t` of `device` (NULL: the legacy default stream)
/// @param[out] ptr receives the block's device address; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_OUT_OF_MEMORY when the device has no more memory even after the cache is released (or the pool's limit or memory fraction is reached); GPURT_ERROR_FORKED in a fork() child; or a status every call may give (@ref statuses).
/// @par Ordering
/// As gpurt_malloc, for `native_stream`.
#[no_mangle]
pub extern "C" fn gpurt_malloc_native(device: c_int, size: usize, native_stream: *mut c_void, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_malloc_native", || {
        let out = Out::new(ptr, "ptr")?;
        out.write(super::device::malloc(crate::device::resolve(device)?, size as u64, native_stream as u64)? as *mut c_void);
        Ok(())
    })
}

/// Frees `ptr` in the order of `native_stream` (a `CUstream`/`cudaStream_t`; NULL:
/// the legacy default stream): reusable at once on that stream when it is the one
/// the memory was allocated for, else once the work queued there so far is done
/// (`gpurt_record_stream`, then `gpurt_free`). RMM's `deallocate(stream, ...)`.
///
/// @param ptr a block from gpurt's allocator, or NULL (nothing is done)
/// @param native_stream the `CUstream`/`cudaStream_t` whose order the free follows (NULL: the legacy default stream)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer gpurt did not allocate or already freed; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not block: when `native_stream` is not the block's own stream, gpurt records an event there and reuses the block once it has passed. Allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_free_native(ptr: *mut c_void, native_stream: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_free_native", || super::device::free_on(ptr as u64, native_stream as u64))
}

/// Frees memory from `gpurt_malloc` (NULL is a no-op). Found from the pointer alone.
///
/// @param ptr a block from gpurt's allocator (any device, any pool), or NULL (nothing is done)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer gpurt did not allocate or already freed (nothing changes); or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not block: the block is reusable at once on its own stream, and after the events of streams named by gpurt_record_stream have passed. A block of a graph's private pool freed during capture stays the graph's.
#[no_mangle]
pub extern "C" fn gpurt_free(ptr: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_free", || super::device::free(ptr as u64))
}

/// Declares that `ptr` is also used on `stream`: its free then waits (without
/// blocking the caller) until the work queued there so far is done.
///
/// @param ptr a live block from gpurt's allocator
/// @param stream another a gpurt stream (gpurt_current_stream gives this thread's current one) that uses the block
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not a live gpurt block; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side bookkeeping: an event is recorded on `stream` when the block is freed, not now; does not block.
#[no_mangle]
pub extern "C" fn gpurt_record_stream(ptr: *mut c_void, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_record_stream", || super::device::record_stream(ptr as u64, native_stream(stream)?))
}

/// gpurt_record_stream for a `CUstream`/`cudaStream_t`: what PyTorch's
/// `Tensor.record_stream` passes (gpurt's Python package forwards it, since PyTorch does
/// not tell a pluggable allocator), so a block freed on its own stream waits for the
/// other stream's work before it is reused.
///
/// @param ptr a live block from gpurt's allocator
/// @param native_stream the `CUstream`/`cudaStream_t` that uses the block (NULL: the legacy default stream)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not a live gpurt block; or a status every call may give (@ref statuses).
/// @par Ordering
/// As gpurt_record_stream.
#[no_mangle]
pub extern "C" fn gpurt_record_stream_native(ptr: *mut c_void, native_stream: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_record_stream_native", || super::device::record_stream(ptr as u64, native_stream as u64))
}

/// Marks what a sleep with GPURT_SLEEP_OFFLOAD does with a live block's contents:
/// with `discard` non-zero they are dropped, not copied (a KV cache or scratch buffer
/// its owner rebuilds), as with GPURT_SLEEP_DISCARD; with 0 (how every allocation
/// starts) they are kept. The block keeps its address either way. vLLM's sleep tags
/// ("weights" kept, "kv_cache" dropped), per allocation.
///
/// @param ptr a live block from gpurt's allocator (any device; a default, user or graph pool)
/// @param discard non-zero: drop its contents in an offloading sleep; 0: keep them
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not a live block of gpurt's pools (the driver's pool of backend:cudaMallocAsync included; nothing changes); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side bookkeeping, read when the block's pool next falls asleep; does not block. The mark ends with the allocation.
#[no_mangle]
pub extern "C" fn gpurt_mem_discard_on_sleep(ptr: *const c_void, discard: c_int) -> gpurt_status_t {
    boundary::call("gpurt_mem_discard_on_sleep", || super::device::set_discard_on_sleep(ptr as u64, discard != 0))
}

/// Promises that a live block's contents do not change from now on (a model's
/// weights), or takes the promise back. An offloading sleep copies such a block to host
/// memory as any other; later offloads of its pool keep that copy instead of copying the
/// block again while the promise holds, so that a pool whose weights went to host memory
/// once sleeps again at the cost of its other blocks only (the kept host memory is the
/// pool's until gpurt_mem_pool_empty_cache or gpurt_empty_cache). Writing the block
/// while the promise holds is the caller's error: a later sleep and wake bring back the
/// contents it had when an offload last copied it. Take the promise back (`read_only`
/// 0) before writing; a new promise is copied by the next offload again. A sleep with
/// GPURT_SLEEP_DISCARD ends what the host memory holds, so the block may be written
/// again after its wake.
///
/// @param ptr a live block from gpurt's allocator (any device; a default, user or graph pool)
/// @param read_only non-zero: promise its contents do not change; 0: take the promise back (how every allocation starts)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not a live block of gpurt's pools (the driver's pool of backend:cudaMallocAsync included; nothing changes); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side bookkeeping, read when the block's pool next falls asleep; does not block. The promise ends with the allocation; it replaces a gpurt_mem_discard_on_sleep mark (and that mark replaces it).
#[no_mangle]
pub extern "C" fn gpurt_mem_read_only(ptr: *const c_void, read_only: c_int) -> gpurt_status_t {
    boundary::call("gpurt_mem_read_only", || super::device::set_read_only(ptr as u64, read_only != 0))
}

/// Releases every wholly free cached segment to the driver (`torch.cuda.empty_cache`).
///
/// @return GPURT_SUCCESS; GPURT_ERROR_NO_DRIVER / GPURT_ERROR_NO_DEVICE where there is no device; or a status every call may give (@ref statuses).
/// @par Ordering
/// Returns wholly free cached memory to the driver, which waits for the device where that memory may still be in use (cuMemFree, cuMemUnmap); blocks whose freeing streams have not passed their recorded events stay cached. Not allowed while a stream is being captured in global mode.
/// Every device's default pool and the pools of gpurt_mem_pool_create are emptied; graphs' private pools keep their memory.
#[no_mangle]
pub extern "C" fn gpurt_empty_cache() -> gpurt_status_t {
    boundary::call("gpurt_empty_cache", super::device::empty_cache)
}

/// Sets the allocator options, with `PYTORCH_CUDA_ALLOC_CONF`'s syntax (as the
/// `GPURT_ALLOC_CONF` environment variable). A malformed string changes nothing.
///
/// @param config comma-separated `key:value` options (max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, expandable_segments, exact_segments, backend); NULL or empty: the defaults (expandable segments, where the device maps memory)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for an unknown key or a value out of range, naming it (nothing changes); GPURT_ERROR_NOT_SUPPORTED for a backend change after the allocator was first used; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_alloc_set_config(config: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_alloc_set_config", || super::device::set_config(in_str(config, "config")?))
}

/// The allocator behind every device's default pool, as a static string: "native"
/// (gpurt's caching allocator) or "cudaMallocAsync" (each allocation straight from
/// the device's stream-ordered driver pool: `backend:cudaMallocAsync` in
/// GPURT_ALLOC_CONF). Chosen when the allocator is first used (asking chooses it);
/// gpurt_alloc_set_config may choose it before that, and cannot change it after.
///
/// @param[out] name receives a static string, "native" or "cudaMallocAsync", valid for the life of the process; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_allocator_backend(name: *mut *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_allocator_backend", || {
        let out = Out::new(name, "name")?;
        out.write(match super::device::backend()? {
            super::config::Backend::Native => c"native".as_ptr(),
            super::config::Backend::CudaMallocAsync => c"cudaMallocAsync".as_ptr(),
        });
        Ok(())
    })
}

/// Caps the memory gpurt reserves on `device` at `fraction` of its total.
///
/// @param fraction of the device's total memory gpurt may reserve, in [0, 1]
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a fraction outside [0, 1] or NaN; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_set_per_process_memory_fraction(fraction: f64, device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_set_per_process_memory_fraction", || super::device::set_memory_fraction(fraction, device))
}

/// `torch.cuda.memory_stats()` for `device`, into a struct the caller initialised
/// (`GPURT_MEMORY_STATS_INIT`).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param stats a struct initialised with GPURT_MEMORY_STATS_INIT; gpurt fills as many fields as its `struct_size` holds
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `stats` is NULL or its `struct_size` is smaller than the first version's; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_stats(device: c_int, stats: *mut gpurt_memory_stats_t) -> gpurt_status_t {
    boundary::call("gpurt_memory_stats", || {
        let value = super::device::stats(device)?;
        write_sized(stats, &value, MEMORY_STATS_V1_SIZE, "stats")
    })
}

/// Bytes currently allocated (`torch.cuda.memory_allocated`), its peak, bytes
/// reserved (`memory_reserved`) and its peak, for `device`; any may be NULL.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] allocated receives bytes in live allocations; may be NULL
/// @param[out] max_allocated receives the peak of `allocated`; may be NULL
/// @param[out] reserved receives bytes held from the driver; may be NULL
/// @param[out] max_reserved receives the peak of `reserved`; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_usage(
    device: c_int,
    allocated: *mut u64,
    max_allocated: *mut u64,
    reserved: *mut u64,
    max_reserved: *mut u64,
) -> gpurt_status_t {
    boundary::call("gpurt_memory_usage", || {
        let s = super::device::stats(device)?;
        boundary::write_optional([
            (allocated, s.allocated_bytes.all.current as u64),
            (max_allocated, s.allocated_bytes.all.peak as u64),
            (reserved, s.reserved_bytes.all.current as u64),
            (max_reserved, s.reserved_bytes.all.peak as u64),
        ]);
        Ok(())
    })
}

/// Resets every peak of `device`'s statistics to its current value.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_reset_peak_memory_stats(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_reset_peak_memory_stats", || super::device::reset_peak(device))
}

/// Resets `device`'s accumulated totals and event counters.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_reset_accumulated_memory_stats(device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_reset_accumulated_memory_stats", || super::device::reset_accumulated(device))
}

/// Writes `torch.cuda.memory_summary()`'s table for `device` into `buffer` (NUL-
/// terminated, truncated to `capacity`); `*needed` gets the full size with the NUL.
/// `buffer` may be NULL with `capacity` 0 to ask for the size.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param buffer receives the table, NUL-terminated and truncated to `capacity` bytes; may be NULL when `capacity` is 0
/// @param capacity bytes `buffer` holds
/// @param[out] needed receives the table's full size with its NUL; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT if `buffer` is NULL with a non-zero `capacity`; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_summary(device: c_int, buffer: *mut c_char, capacity: usize, needed: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_memory_summary", || {
        let needed = Out::new(needed, "needed")?;
        if capacity > 0 && buffer.is_null() {
            return Err(crate::Error::invalid_argument(format!("argument `buffer` is NULL but `capacity` is {capacity}")));
        }
        let text = super::stats::summary(crate::device::resolve(device)?, &super::device::stats(device)?);
        needed.write(text.len() + 1);
        boundary::write_c_string(buffer, capacity, &text);
        Ok(())
    })
}

// ---- drop-in allocators for PyTorch and CuPy -----------------------------------
// Their signatures are fixed by the frameworks, so these four return no status: a
// failed allocation returns 0/NULL and sets gpurt_last_error_message().

/// PyTorch's `CUDAPluggableAllocator` alloc: `void* alloc(ssize_t size, int device,
/// cudaStream_t stream)`.
///
/// @param size bytes wanted (negative: nothing is allocated)
/// @param device the device ordinal PyTorch passes
/// @param stream the `cudaStream_t` the block is for
/// @return the block's device address, or NULL where it could not be allocated (PyTorch then raises its out-of-memory error).
/// @par Errors
/// This entry point has PyTorch's signature, so it returns no status: failures are logged, and gpurt_last_error_message() holds the detail.
/// @par Ordering
/// As gpurt_malloc_native.
#[no_mangle]
pub extern "C" fn gpurt_torch_alloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    let mut ptr = 0u64;
    boundary::call("gpurt_torch_alloc", || {
        let size = u64::try_from(size).map_err(|_| crate::Error::invalid_argument(format!("size {size} is negative")))?;
        ptr = super::device::malloc(device, size, stream as u64)?;
        Ok(())
    });
    ptr as *mut c_void
}

/// PyTorch's `CUDAPluggableAllocator` free: `void free(void* ptr, ssize_t size, int
/// device, cudaStream_t stream)`.
///
/// @param ptr a block from gpurt_torch_alloc
/// @param size the size PyTorch allocated (unused: gpurt knows it)
/// @param device the block's device (unused)
/// @param stream the `cudaStream_t` PyTorch frees it on
/// @par Errors
/// This entry point has PyTorch's signature, so it returns no status: failures are logged, and gpurt_last_error_message() holds the detail.
/// @par Ordering
/// As gpurt_free_native.
#[no_mangle]
pub extern "C" fn gpurt_torch_free(ptr: *mut c_void, size: isize, device: c_int, stream: *mut c_void) {
    let _ = (size, device, stream); // the pointer alone identifies the block
    boundary::call("gpurt_torch_free", || super::device::free(ptr as u64));
}

/// CuPy's `CFunctionAllocator` malloc: `intptr_t malloc(intptr_t param, size_t size,
/// int device)`. CuPy passes no stream: blocks are tagged with the legacy default
/// stream, so use it with CuPy's default stream.
///
/// @param param CuPy's opaque parameter (unused)
/// @param size bytes wanted
/// @param device the device ordinal CuPy passes
/// @return the block's device address as an integer, or 0 where it could not be allocated.
/// @par Errors
/// CuPy's signature: no status; failures are logged and gpurt_last_error_message() holds the detail.
/// @par Ordering
/// As gpurt_malloc_native on the legacy default stream.
#[no_mangle]
pub extern "C" fn gpurt_cupy_malloc(param: isize, size: usize, device: c_int) -> isize {
    let _ = param;
    let mut ptr = 0u64;
    boundary::call("gpurt_cupy_malloc", || {
        ptr = super::device::malloc(device, size as u64, 0)?;
        Ok(())
    });
    ptr as isize
}

/// CuPy's `CFunctionAllocator` free: `void free(intptr_t param, intptr_t ptr, int device)`.
///
/// @param param CuPy's opaque parameter (unused)
/// @param ptr a block from gpurt_cupy_malloc, as an integer
/// @param device the block's device (unused)
/// @par Errors
/// CuPy's signature: no status; a failure is logged.
/// @par Ordering
/// As gpurt_free.
#[no_mangle]
pub extern "C" fn gpurt_cupy_free(param: isize, ptr: isize, device: c_int) {
    let _ = (param, device); // the pointer alone identifies the block
    boundary::call("gpurt_cupy_free", || super::device::free(ptr as u64));
}
