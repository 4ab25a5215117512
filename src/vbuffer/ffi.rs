use libc::{c_int, c_void};

use crate::boundary::{self, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A growable virtual buffer: an address range reserved once, memory mapped into it on demand.
pub struct gpurt_vbuffer_s {
    _opaque: [u8; 0],
}
/// The handle of a vbuffer: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_vbuffer_t = *mut gpurt_vbuffer_s;

fn h(vb: gpurt_vbuffer_t) -> Handle {
    Handle::from_ptr(vb)
}

/// Reserves `max_bytes` of addresses on `device` (rounded up to its mapping
/// granularity), with nothing mapped: `gpurt_vbuffer_map` backs parts of it with
/// memory as it grows, at the same addresses (a KV cache that follows its context).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param max_bytes the most bytes it may ever map
/// @param[out] vb receives the vbuffer; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL, for a device that does not exist or a `max_bytes` of 0; GPURT_ERROR_OUT_OF_MEMORY when the addresses cannot be reserved; GPURT_ERROR_NOT_SUPPORTED on a device without virtual memory management; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_create(device: c_int, max_bytes: usize, vb: *mut gpurt_vbuffer_t) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_create", || {
        let out = Out::new(vb, "vb")?;
        out.write(super::create(device, max_bytes as u64)?.to_ptr());
        Ok(())
    })
}

/// The vbuffer's base address: byte `offset` of it is at `base + offset`, always.
///
/// @param vb a vbuffer
/// @param[out] base receives the base address; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `vb`; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_address(vb: gpurt_vbuffer_t, base: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_address", || {
        let out = Out::new(base, "base")?;
        out.write(super::layout(h(vb))?.0 as *mut c_void);
        Ok(())
    })
}

/// The unit of mapping: offsets and sizes given to `gpurt_vbuffer_map` and `_unmap`
/// are multiples of it (2 MiB on current GPUs).
///
/// @param vb a vbuffer
/// @param[out] bytes receives the granularity in bytes; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `vb`; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_granularity(vb: gpurt_vbuffer_t, bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_granularity", || {
        let out = Out::new(bytes, "bytes")?;
        out.write(super::layout(h(vb))?.1 as usize);
        Ok(())
    })
}

/// Backs `[offset, offset + bytes)` with new device memory (contents undefined), usable
/// at once by any stream. The bytes count in the device's statistics (one segment and
/// one allocation each map) and under its per-process memory fraction. Refused, with
/// nothing changed, for a range not aligned to the granularity, past the reserved size,
/// or overlapping one already mapped.
///
/// @param vb a vbuffer
/// @param offset where the range starts; a multiple of the granularity
/// @param bytes how many bytes; a non-zero multiple of the granularity
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `vb`; GPURT_ERROR_INVALID_ARGUMENT for a range not aligned, past the end or overlapping a mapped one; GPURT_ERROR_OUT_OF_MEMORY when the device or the memory fraction has no room; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: maps at once; enqueues no work.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_map(vb: gpurt_vbuffer_t, offset: usize, bytes: usize) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_map", || super::map(h(vb), offset as u64, bytes as u64))
}

/// Gives back the memory of `[offset, offset + bytes)`, after the work queued on
/// `stream` before this call (the call waits for it). The range must be made of whole
/// mappings as `gpurt_vbuffer_map` made them; its addresses stay reserved.
///
/// @param vb a vbuffer
/// @param offset where the range starts; a multiple of the granularity
/// @param bytes how many bytes; a non-zero multiple of the granularity
/// @param stream the stream whose queued work may still use the range
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `vb` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a range not aligned, past the end, not mapped, or cutting a mapping (nothing changes); or a status every call may give (@ref statuses).
/// @par Ordering
/// Waits for `stream`'s work queued before it, then unmaps.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_unmap(vb: gpurt_vbuffer_t, offset: usize, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_unmap", || super::unmap(h(vb), offset as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// How many bytes of the vbuffer are mapped now.
///
/// @param vb a vbuffer
/// @param[out] bytes receives the mapped bytes; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `vb`; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_mapped_bytes(vb: gpurt_vbuffer_t, bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_mapped_bytes", || {
        let out = Out::new(bytes, "bytes")?;
        out.write(super::mapped_bytes(h(vb))? as usize);
        Ok(())
    })
}

/// Waits for the device, unmaps everything mapped and gives the addresses back.
///
/// @param vb a vbuffer
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `vb`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Waits for the whole device (its work may still use the memory), which invalidates a
/// capture under way on any thread; with nothing mapped (never grown, shrunk to nothing,
/// or asleep), host-side only: no wait, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_vbuffer_destroy(vb: gpurt_vbuffer_t) -> gpurt_status_t {
    boundary::call("gpurt_vbuffer_destroy", || super::destroy(h(vb)))
}
