use libc::{c_uint, c_void};

use super::pool::gpurt_host_memory_stats_t;
use crate::boundary::{self, write_sized, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A caching pool of pinned (page-locked) host memory.
pub struct gpurt_pinned_pool_s {
    _opaque: [u8; 0],
}
/// The handle of a pinned host memory pool: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_pinned_pool_t = *mut gpurt_pinned_pool_s;

fn h(pool: gpurt_pinned_pool_t) -> Handle {
    Handle::from_ptr(pool)
}

/// Creates a pinned pool. `flags`: `GPURT_PINNED_PORTABLE` (usable from every
/// device's context), `GPURT_PINNED_DEVICE_MAPPED` (kernels may access it; see
/// `gpurt_pinned_device_pointer`), `GPURT_PINNED_WRITE_COMBINED` (faster host-to-device
/// transfers, very slow host reads).
///
/// @param flags 0, or GPURT_PINNED_* flags or-ed
/// @param[out] pool receives the new pool; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for unknown flags; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_pool_create(flags: c_uint, pool: *mut gpurt_pinned_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_pool_create", || {
        let out = Out::new(pool, "pool")?;
        out.write(super::create(flags)?.to_ptr());
        Ok(())
    })
}

/// The process-wide pinned pool (portable), created on first use.
///
/// @param[out] pool receives the process-wide pool; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_pool_default(pool: *mut gpurt_pinned_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_pool_default", || {
        let out = Out::new(pool, "pool")?;
        out.write(super::default_pool()?.to_ptr());
        Ok(())
    })
}

/// Destroys a pool that has no blocks in use; its cached memory goes back to the
/// driver. The default pool cannot be destroyed.
///
/// @param pool a pinned pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for the default pool or one with blocks in use (nothing changes); or a status every call may give (@ref statuses).
/// @par Ordering
/// Returns wholly free cached memory to the driver, which waits for the device where that memory may still be in use (cuMemFree, cuMemUnmap); blocks whose freeing streams have not passed their recorded events stay cached. Not allowed while a stream is being captured in global mode.
#[no_mangle]
pub extern "C" fn gpurt_pinned_pool_destroy(pool: gpurt_pinned_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_pool_destroy", || super::destroy(h(pool)))
}

/// Pinned host memory of at least `size` bytes from `pool` (size 0 gives NULL).
/// Sizes are rounded to four classes per power of two (at most 25 % more).
///
/// @param pool a pinned pool
/// @param size bytes wanted; 0 gives `*ptr` NULL
/// @param[out] ptr receives the pinned block; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; GPURT_ERROR_OUT_OF_MEMORY where the driver cannot pin more; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_malloc(pool: gpurt_pinned_pool_t, size: usize, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_pinned_malloc", || {
        let out = Out::new(ptr, "ptr")?;
        out.write(super::malloc(h(pool), size as u64)? as *mut c_void);
        Ok(())
    })
}

/// Frees pinned memory from `gpurt_pinned_malloc` (NULL is a no-op). The block is
/// reused only once the work of every stream that used it (gpurt copies record
/// this themselves; see `gpurt_pinned_record_stream`) is done.
///
/// @param ptr a block from gpurt_pinned_malloc, or NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not a live pinned block; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not block: the block is reused once the events of the streams that used it have passed.
#[no_mangle]
pub extern "C" fn gpurt_pinned_free(ptr: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_pinned_free", || super::free(ptr as u64))
}

/// Declares that work queued on `stream` uses the pinned block containing `ptr`
/// (for copies and kernels not made through gpurt).
///
/// @param ptr an address inside a live pinned block
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) whose queued work uses the block
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not in a live pinned block; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Records an event on `stream` now; does not block.
#[no_mangle]
pub extern "C" fn gpurt_pinned_record_stream(ptr: *mut c_void, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_record_stream", || super::record_stream(ptr as u64, Handle::from_ptr(stream)))
}

/// The device address of a block from a `GPURT_PINNED_DEVICE_MAPPED` pool, for
/// kernels on the current device.
///
/// @param ptr an address in a block of a GPURT_PINNED_DEVICE_MAPPED pool
/// @param[out] device_ptr receives its device address; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not in such a block; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_device_pointer(ptr: *mut c_void, device_ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_pinned_device_pointer", || {
        let out = Out::new(device_ptr, "device_ptr")?;
        out.write(super::device_pointer(ptr as u64)? as *mut c_void);
        Ok(())
    })
}

/// Returns every free cached block of `pool` to the driver.
///
/// @param pool a pinned pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Returns wholly free cached memory to the driver, which waits for the device where that memory may still be in use (cuMemFree, cuMemUnmap); blocks whose freeing streams have not passed their recorded events stay cached. Not allowed while a stream is being captured in global mode.
#[no_mangle]
pub extern "C" fn gpurt_pinned_empty_cache(pool: gpurt_pinned_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_empty_cache", || super::with_pool(h(pool), |p| p.empty_cache()))
}

/// `pool`'s statistics (`torch.cuda.host_memory_stats`). Initialise `stats` with
/// `GPURT_HOST_MEMORY_STATS_INIT`.
///
/// @param pool a pinned pool
/// @param stats a struct initialised with GPURT_HOST_MEMORY_STATS_INIT
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `stats` is NULL or too small; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_stats(pool: gpurt_pinned_pool_t, stats: *mut gpurt_host_memory_stats_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_stats", || {
        let value = super::with_pool(h(pool), |p| p.stats())?;
        write_sized(stats, &value, std::mem::size_of::<gpurt_host_memory_stats_t>(), "stats")
    })
}

/// Resets every peak of `pool`'s statistics to its current value.
///
/// @param pool a pinned pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_reset_peak_stats(pool: gpurt_pinned_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_reset_peak_stats", || super::with_pool(h(pool), |p| p.reset_peak()))
}

/// Zeroes `pool`'s accumulated totals, counters and driver times.
///
/// @param pool a pinned pool
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_reset_accumulated_stats(pool: gpurt_pinned_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_pinned_reset_accumulated_stats", || super::with_pool(h(pool), |p| p.reset_accumulated()))
}

/// CuPy's `PinnedMemoryPool` queries: bytes in use (blocks waiting for streams
/// included), bytes cached free, their total, and the number of free blocks. Any
/// output may be NULL.
///
/// @param pool a pinned pool
/// @param[out] used_bytes receives bytes in use; may be NULL
/// @param[out] free_bytes receives bytes cached free; may be NULL
/// @param[out] total_bytes receives their total; may be NULL
/// @param[out] free_blocks receives free cached blocks; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_pinned_pool_usage(
    pool: gpurt_pinned_pool_t,
    used_bytes: *mut u64,
    free_bytes: *mut u64,
    total_bytes: *mut u64,
    free_blocks: *mut u64,
) -> gpurt_status_t {
    boundary::call("gpurt_pinned_pool_usage", || {
        let (used, free, total, blocks) = super::with_pool(h(pool), |p| p.usage())?;
        boundary::write_optional([(used_bytes, used), (free_bytes, free), (total_bytes, total), (free_blocks, blocks)]);
        Ok(())
    })
}

/// Page-locks `size` bytes of memory the caller owns, so that copies from and to it
/// run at pinned speed (`cuMemHostRegister`). `flags`: `GPURT_HOST_REGISTER_*`.
///
/// @param ptr host memory the caller owns
/// @param size bytes from `ptr`
/// @param flags 0, or GPURT_HOST_REGISTER_* flags or-ed
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `ptr`, a size of 0 or unknown flags; an error where the driver cannot lock the pages (already registered, too much locked memory); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_host_register(ptr: *mut c_void, size: usize, flags: c_uint) -> gpurt_status_t {
    boundary::call("gpurt_host_register", || super::host_register(ptr as u64, size as u64, flags))
}

/// Undoes `gpurt_host_register`.
///
/// @param ptr the address given to gpurt_host_register
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for memory that is not registered; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_host_unregister(ptr: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_host_unregister", || super::host_unregister(ptr as u64))
}
