use libc::{c_int, c_uint, c_void};

use crate::boundary::{self, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// Advice for gpurt_mem_advise: the range is mostly read (copies may live on each reader).
pub const GPURT_MEM_ADVISE_SET_READ_MOSTLY: c_int = 1;
pub const GPURT_MEM_ADVISE_UNSET_READ_MOSTLY: c_int = 2;
/// Advice: the range prefers to live on `device` (or the host).
pub const GPURT_MEM_ADVISE_SET_PREFERRED_LOCATION: c_int = 3;
pub const GPURT_MEM_ADVISE_UNSET_PREFERRED_LOCATION: c_int = 4;
/// Advice: `device` will access the range (kept mapped there).
pub const GPURT_MEM_ADVISE_SET_ACCESSED_BY: c_int = 5;
pub const GPURT_MEM_ADVISE_UNSET_ACCESSED_BY: c_int = 6;

/// Allocates `size` bytes of managed (unified) memory, accessible from the host and
/// every device (cupy's malloc_managed), for use on this thread's current stream of
/// the current device. `flags`: GPURT_MEM_ATTACH_GLOBAL or GPURT_MEM_ATTACH_HOST.
/// Cached like device memory in a pool of its own; freed with gpurt_free.
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
#[no_mangle]
pub extern "C" fn gpurt_mem_advise(ptr: *const c_void, size: usize, advice: c_int, device: c_int) -> gpurt_status_t {
    boundary::call("gpurt_mem_advise", || super::advise(ptr as u64, size as u64, advice, device))
}
