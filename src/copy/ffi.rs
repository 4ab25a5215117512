use libc::{c_int, c_uint, c_void};

use crate::boundary;
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// Copies `bytes` from `src` to `dst` on `stream`, asynchronously. Either side may be
/// device memory, pinned or plain host memory (from pageable memory the driver
/// stages the copy and returns once the source was read).
///
/// @param dst where the bytes go: device, pinned or pageable host memory
/// @param src where they come from: any of the same
/// @param bytes how many; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL pointer with a non-zero size, or a range that runs past the address space; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. From pageable host memory the driver stages the copy and returns once `src` was read; to pageable host memory it returns once the bytes are there. Pinned blocks of gpurt's pools are kept from reuse until the copy is done.
#[no_mangle]
pub extern "C" fn gpurt_memcpy_async(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_async", || super::copy_async(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// Queues `count` copies on `stream` in one call: `sizes[i]` bytes from `srcs[i]` to
/// `dsts[i]`, each side device, pinned or pageable host memory as for
/// gpurt_memcpy_async (vLLM's swap of KV-cache blocks). Small copies (128 KiB or less
/// on average) that the stream's device reaches (its own memory, pinned host memory)
/// run as gpurt's copy kernel, 1 360 copies a launch; others through the driver's
/// `cuMemcpyBatchAsync` where it has one (CUDA 12.8 and later), else, and on the
/// legacy default stream, which the batch call refuses, one copy at a time; the sources
/// are read in stream order either way. Every copy is checked before any is queued: a
/// refused batch queues nothing, and the message names the copy.
///
/// @param dsts `count` destinations
/// @param srcs `count` sources
/// @param sizes `count` byte counts; a copy of 0 bytes is skipped (its pointers may be NULL)
/// @param count how many copies; 0 does nothing; at most GPURT_MEMCPY_BATCH_MAX (1 048 576)
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL array with a non-zero `count`, more than 1 048 576 copies, a NULL pointer or a range past the address space in a copy, copies whose destinations overlap each other or their own source, or memory of a sleeping pool; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the copies are recorded into the graph instead.
#[no_mangle]
pub extern "C" fn gpurt_memcpy_batch_async(
    dsts: *const *mut c_void,
    srcs: *const *const c_void,
    sizes: *const usize,
    count: usize,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_batch_async", || {
        if count == 0 {
            return crate::stream::get(Handle::from_ptr(stream)).map(drop);
        }
        if dsts.is_null() || srcs.is_null() || sizes.is_null() {
            return Err(crate::Error::invalid_argument("dsts, srcs and sizes must not be NULL when count is not 0"));
        }
        if count > super::batch::GPURT_MEMCPY_BATCH_MAX {
            return Err(crate::Error::invalid_argument(format!("{count} copies in one batch: at most {}", super::batch::GPURT_MEMCPY_BATCH_MAX)));
        }
        // SAFETY: the caller passes `count` entries in each array (checked non-NULL).
        let (dsts, srcs, sizes) = unsafe { (std::slice::from_raw_parts(dsts, count), std::slice::from_raw_parts(srcs, count), std::slice::from_raw_parts(sizes, count)) };
        let copies: Vec<(u64, u64, u64)> = (0..count).map(|i| (dsts[i] as u64, srcs[i] as u64, sizes[i] as u64)).collect();
        super::batch::copy_batch_async(&copies, Handle::from_ptr(stream))
    })
}

/// As `gpurt_memcpy_async`, then waits until the copy is done (a synchronising call
/// for the sync debug mode).
///
/// @param dst where the bytes go
/// @param src where they come from
/// @param bytes how many; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL pointer with a non-zero size, or a range that runs past the address space; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks the calling thread until the copy, and the work queued on `stream` before it, are done: a synchronising call for the sync debug mode (GPURT_ERROR_SYNCHRONIZING_CALL in its error mode). Not allowed while a stream of the device is being captured (GPURT_ERROR_STREAM_CAPTURE).
#[no_mangle]
pub extern "C" fn gpurt_memcpy(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy", || super::copy_blocking(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// Copies `bytes` of device memory from `src_device` to `dst_device` on `stream`.
///
/// @param dst device memory of `dst_device`
/// @param dst_device the destination's device
/// @param src device memory of `src_device`
/// @param src_device the source's device
/// @param bytes how many; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL pointer with a non-zero size, or a range that runs past the address space; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead.
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
///
/// @param dst device memory
/// @param value the value, of which the low `element_size` bytes are written
/// @param element_size 1, 2 or 4 bytes
/// @param count elements; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for another element size, a NULL `dst` with a non-zero count, or a count × size that overflows; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead.
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
///
/// @param dst the first destination row
/// @param dst_pitch bytes between destination rows (at least `width`)
/// @param src the first source row
/// @param src_pitch bytes between source rows (at least `width`)
/// @param width bytes per row
/// @param height rows; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pitch below `width`, NULL pointers with a non-zero area, or an area past the address space; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead.
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
///
/// @param dst device memory
/// @param src pageable host memory
/// @param bytes how many; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL pointer with a non-zero size, or a range that runs past the address space; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_OUT_OF_MEMORY where pinned staging buffers cannot be had; or a status every call may give (@ref statuses).
/// @par Ordering
/// Returns once `src` may be reused; the data arrives in `stream`'s order. Above 16 MiB it waits for `stream`'s earlier work. Not for use during a capture (host threads copy).
#[no_mangle]
pub extern "C" fn gpurt_memcpy_htod_staged(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_htod_staged", || super::upload_staged(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}

/// Copies `bytes` from device memory at `src` to pageable host memory at `dst`, after
/// `stream`'s earlier work, through pinned staging buffers. Returns once `dst` holds
/// the data (a synchronising call for the sync debug mode).
///
/// @param dst pageable host memory
/// @param src device memory
/// @param bytes how many; 0 does nothing
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL pointer with a non-zero size, or a range that runs past the address space; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_OUT_OF_MEMORY where pinned staging buffers cannot be had; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks the calling thread until `dst` holds the data (after `stream`'s earlier work): a synchronising call for the sync debug mode (GPURT_ERROR_SYNCHRONIZING_CALL in its error mode). Not allowed while a stream of the device is being captured (GPURT_ERROR_STREAM_CAPTURE).
#[no_mangle]
pub extern "C" fn gpurt_memcpy_dtoh_staged(dst: *mut c_void, src: *const c_void, bytes: usize, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_memcpy_dtoh_staged", || super::download_staged(dst as u64, src as u64, bytes as u64, Handle::from_ptr(stream)))
}
