use libc::{c_int, c_uint, c_void};

use crate::boundary::{self, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// Advice for gpurt_mem_advise: the range is mostly read (copies may live on each reader).
pub const GPURT_MEM_ADVISE_SET_READ_MOSTLY: c_int = 1;
/// gpurt_mem_advise: undoes GPURT_MEM_ADVISE_SET_READ_MOSTLY.
pub const GPURT_MEM_ADVISE_UNSET_READ_MOSTLY: c_int = 2;
/// Advice: the range prefers to live on `device` (or the host).
pub const GPURT_MEM_ADVISE_SET_PREFERRED_LOCATION: c_int = 3;
/// gpurt_mem_advise: undoes GPURT_MEM_ADVISE_SET_PREFERRED_LOCATION.
pub const GPURT_MEM_ADVISE_UNSET_PREFERRED_LOCATION: c_int = 4;
/// Advice: `device` will access the range (kept mapped there).
pub const GPURT_MEM_ADVISE_SET_ACCESSED_BY: c_int = 5;
/// gpurt_mem_advise: undoes GPURT_MEM_ADVISE_SET_ACCESSED_BY.
pub const GPURT_MEM_ADVISE_UNSET_ACCESSED_BY: c_int = 6;

/// Allocates `size` bytes of managed (unified) memory, accessible from the host and
/// every device (cupy's malloc_managed), for use on this thread's current stream of
/// the current device. `flags`: GPURT_MEM_ATTACH_GLOBAL or GPURT_MEM_ATTACH_HOST.
/// Cached like device memory in a pool of its own; freed with gpurt_free.
///
/// @param size bytes wanted; 0 gives `*ptr` NULL
/// @param flags GPURT_MEM_ATTACH_GLOBAL or GPURT_MEM_ATTACH_HOST
/// @param[out] ptr receives the managed block; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for other flags; GPURT_ERROR_OUT_OF_MEMORY; GPURT_ERROR_NOT_SUPPORTED on a device without managed memory; or a status every call may give (@ref statuses).
/// @par Ordering
/// As gpurt_malloc, for this thread's current stream.
#[no_mangle]
pub extern "C" fn gpurt_malloc_managed(size: usize, flags: c_uint, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_malloc_managed", || {
        let out = Out::new(ptr, "ptr")?;
        out.write(super::malloc(size as u64, flags)? as *mut c_void);
        Ok(())
    })
}

/// Migrates `size` bytes of managed memory at `ptr` to `device` (an ordinal,
/// GPURT_CURRENT_DEVICE, or GPURT_DEVICE_HOST for host memory), in `stream`'s order.
///
/// @param ptr managed memory
/// @param size bytes from `ptr`
/// @param device a device ordinal, GPURT_CURRENT_DEVICE, or GPURT_DEVICE_HOST for host memory
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `ptr` or memory that is not managed; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead.
#[no_mangle]
pub extern "C" fn gpurt_mem_prefetch_async(ptr: *const c_void, size: usize, device: c_int, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_mem_prefetch_async", || {
        let s = crate::stream::get(Handle::from_ptr(stream))?;
        super::prefetch(ptr as u64, size as u64, device, s)
    })
}

/// Gives the driver `advice` (GPURT_MEM_ADVISE_*) about `size` bytes of managed
/// memory at `ptr` and `device` (an ordinal, GPURT_CURRENT_DEVICE, or
/// GPURT_DEVICE_HOST).
///
/// @param ptr managed memory
/// @param size bytes from `ptr`
/// @param advice a GPURT_MEM_ADVISE_* value
/// @param device a device ordinal, GPURT_CURRENT_DEVICE, or GPURT_DEVICE_HOST for host memory
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `ptr`, an unknown advice or memory that is not managed; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_mem_advise(ptr: *const c_void, size: usize, advice: c_int, device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_mem_advise", || super::advise(ptr as u64, size as u64, advice, device))
}
