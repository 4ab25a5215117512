use libc::{c_int, c_uint, c_void};

use crate::boundary;
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// Copies `bytes` from `src` to `dst` on `stream`, asynchronously. Either side may be
/// device memory, pinned or plain host memory (from pageable memory the driver
/// stages the copy and returns once the source was read).
#[no_mangle]
pub extern "C" fn gpurt_memcpy_async(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_async", || super::copy_async(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// As `gpurt_memcpy_async`, then waits until the copy is done (a synchronising call
/// for the sync debug mode).
#[no_mangle]
pub extern "C" fn gpurt_memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy", || super::copy_blocking(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// Copies `bytes` of device memory from `src_device` to `dst_device` on `stream`.
#[no_mangle]
pub extern "C" fn gpurt_memcpy_peer_async(
    dst: *mut c_void,
    dst_device: c_int,
    src: *const c_void,
    src_device: c_int,
    bytes: usize,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_peer_async", || {
        super::copy_peer_async(dst as u64, dst_device, src as u64, src_device, bytes as u64, Handle::from_ptr(stream))
    })
}

/// Sets `count` elements of `element_size` bytes (1, 2 or 4) at `dst` to `value` on
/// `stream`.
#[no_mangle]
pub extern "C" fn gpurt_memset_async(
    dst: *mut c_void,
    value: c_uint,
    element_size: c_uint,
    count: usize,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_memset_async", || super::memset_async(dst as u64, value, element_size, count as u64, Handle::from_ptr(stream)))
}

/// Copies `height` rows of `width` bytes from `src` (rows `src_pitch` bytes apart) to
/// `dst` (rows `dst_pitch` bytes apart) on `stream`.
#[no_mangle]
pub extern "C" fn gpurt_memcpy_2d_async(
    dst: *mut c_void,
    dst_pitch: usize,
    src: *const c_void,
    src_pitch: usize,
    width: usize,
    height: usize,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_2d_async", || {
        let stream = Handle::from_ptr(stream);
        super::copy_2d_async(dst as u64, dst_pitch as u64, src as u64, src_pitch as u64, width as u64, height as u64, stream)
    })
}

/// Copies `bytes` from pageable host memory at `src` to device memory at `dst` on
/// `stream`, pipelined through pinned staging buffers by a few host threads: faster
/// than the driver's own pageable copy. Returns once `src` may be reused; the data
/// arrives in stream order. Waits for the stream's earlier work when the copy is
/// larger than the staging ring (16 MiB).
#[no_mangle]
pub extern "C" fn gpurt_memcpy_htod_staged(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_htod_staged", || super::upload_staged(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// Copies `bytes` from device memory at `src` to pageable host memory at `dst`, after
/// `stream`'s earlier work, through pinned staging buffers. Returns once `dst` holds
/// the data (a synchronising call for the sync debug mode).
#[no_mangle]
pub extern "C" fn gpurt_memcpy_dtoh_staged(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_dtoh_staged", || super::download_staged(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}
