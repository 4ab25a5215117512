//! Copies and memsets on streams. Pointers may be device memory (gpurt's or the
//! caller's own), pinned or plain host memory: with unified addressing the driver
//! tells them apart. A host pointer inside a gpurt pinned block gets the stream
//! recorded on that block, so that the block is not reused while the copy runs.

pub mod batch;
mod batch_kernel;
pub mod ffi;
pub mod staged;

use cudarc::driver::sys;

use crate::boundary::{check_range, checked_bytes};
use crate::driver::check;
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::sanitizer::{self, Access};
use crate::stream::Stream;
use staged::{ChunkTransfer, STAGING_BUFFERS, STAGING_CHUNK};

fn note_uses(stream: Stream, pointers: &[u64]) {
    pointers.iter().for_each(|&p| crate::pinned::note_use(p, stream));
}

/// Declares a copy's (or memset's, with no source) accesses to the stream sanitizer.
#[inline]
fn declare(stream: Stream, dst: (u64, u64), src: Option<(u64, u64)>, what: &str) {
    if sanitizer::enabled() {
        if let Some((src, bytes)) = src {
            sanitizer::access(stream, src, bytes, Access::Read, what);
        }
        sanitizer::access(stream, dst.0, dst.1, Access::Write, what);
    }
}

/// `bytes` from `src` to `dst`, queued on `stream`.
pub fn copy_async(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<()> {
    enqueue_copy(dst, src, bytes, stream).map(drop)
}

/// As `copy_async`, then waits for the stream: a synchronising call.
pub fn copy_blocking(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<()> {
    crate::sync_debug::on_blocking_call("gpurt_memcpy")?;
    let s = enqueue_copy(dst, src, bytes, stream)?;
    s.run(|cu| check(unsafe { sys::cuStreamSynchronize(cu) }, "cuStreamSynchronize"))?;
    sanitizer::stream_synchronized(s);
    Ok(())
}

/// Queues the copy; gives the stream, looked up once.
fn enqueue_copy(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<Stream> {
    let s = crate::stream::get(stream)?;
    if bytes == 0 {
        return Ok(s);
    }
    require_pointers(dst, src)?;
    require_ranges(dst, bytes, src, bytes)?;
    s.run_in_context(|cu| check(unsafe { sys::cuMemcpyAsync(dst, src, bytes as usize, cu) }, "cuMemcpyAsync"))?;
    note_uses(s, &[dst, src]);
    declare(s, (dst, bytes), Some((src, bytes)), "gpurt_memcpy");
    Ok(s)
}

fn require_pointers(dst: u64, src: u64) -> Result<()> {
    if dst == 0 || src == 0 {
        return Err(Error::invalid_argument("a copy needs non-NULL source and destination"));
    }
    crate::alloc::device::require_awake(dst)?;
    crate::alloc::device::require_awake(src)
}

/// Both sides of a copy, `dst_bytes` at `dst` and `src_bytes` at `src`, must be
/// ranges that fit the address space: the driver is never handed a wrapped one.
fn require_ranges(dst: u64, dst_bytes: u64, src: u64, src_bytes: u64) -> Result<()> {
    check_range(dst, dst_bytes, "dst")?;
    check_range(src, src_bytes, "src")
}

/// `bytes` from `src` on `src_device` to `dst` on `dst_device` (device memory of
/// two GPUs; staged by the driver when peer access is off), queued on `stream`.
pub fn copy_peer_async(dst: u64, dst_device: i32, src: u64, src_device: i32, bytes: u64, stream: Handle) -> Result<()> {
    let s = crate::stream::get(stream)?;
    let context = |ordinal| crate::device::resolve(ordinal).and_then(crate::device::primary_context);
    let (dst_ctx, src_ctx) = (context(dst_device)?, context(src_device)?);
    if bytes == 0 {
        return Ok(());
    }
    require_pointers(dst, src)?;
    require_ranges(dst, bytes, src, bytes)?;
    s.run(|cu| {
        check(unsafe { sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, bytes as usize, cu) }, "cuMemcpyPeerAsync")
    })?;
    declare(s, (dst, bytes), Some((src, bytes)), "gpurt_memcpy_peer");
    Ok(())
}

/// Sets `count` elements of `element_size` bytes (1, 2 or 4) at `dst` to `value`.
pub fn memset_async(dst: u64, value: u32, element_size: u32, count: u64, stream: Handle) -> Result<()> {
    let s = crate::stream::get(stream)?;
    if ![1, 2, 4].contains(&element_size) {
        return Err(Error::invalid_argument(format!("element size {element_size} is not 1, 2 or 4")));
    }
    if element_size < 4 && value >> (8 * element_size) != 0 {
        return Err(Error::invalid_argument(format!("value {value:#x} does not fit {element_size} byte(s)")));
    }
    if count == 0 {
        return Ok(());
    }
    if dst == 0 {
        return Err(Error::invalid_argument("memset needs a non-NULL destination"));
    }
    crate::alloc::device::require_awake(dst)?;
    check_range(dst, checked_bytes(count, element_size.into(), "count")?, "dst")?;
    let n = count as usize;
    s.run(|cu| match element_size {
        1 => check(unsafe { sys::cuMemsetD8Async(dst, value as u8, n, cu) }, "cuMemsetD8Async"),
        2 => check(unsafe { sys::cuMemsetD16Async(dst, value as u16, n, cu) }, "cuMemsetD16Async"),
        _ => check(unsafe { sys::cuMemsetD32Async(dst, value, n, cu) }, "cuMemsetD32Async"),
    })?;
    declare(s, (dst, count * u64::from(element_size)), None, "gpurt_memset");
    Ok(())
}

/// A 2D copy: `height` rows of `width` bytes, rows `src_pitch` / `dst_pitch` bytes
/// apart (images, slices of a KV cache), queued on `stream`.
pub fn copy_2d_async(dst: u64, dst_pitch: u64, src: u64, src_pitch: u64, width: u64, height: u64, stream: Handle) -> Result<()> {
    let s = crate::stream::get(stream)?;
    if width > dst_pitch || width > src_pitch {
        return Err(Error::invalid_argument(format!(
            "width {width} exceeds a pitch (source {src_pitch}, destination {dst_pitch})"
        )));
    }
    if width == 0 || height == 0 {
        return Ok(());
    }
    require_pointers(dst, src)?;
    // The last row ends `pitch × (height − 1) + width` bytes past the start.
    let span = |pitch: u64, name| checked_bytes(pitch, height - 1, name).and_then(|rows| rows.checked_add(width).ok_or_else(|| overflow(name)));
    let (dst_span, src_span) = (span(dst_pitch, "dst_pitch")?, span(src_pitch, "src_pitch")?);
    require_ranges(dst, dst_span, src, src_span)?;
    let unified = sys::CUmemorytype::CU_MEMORYTYPE_UNIFIED;
    let params = sys::CUDA_MEMCPY2D_st {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: unified,
        srcHost: std::ptr::null(),
        srcDevice: src,
        srcArray: std::ptr::null_mut(),
        srcPitch: src_pitch as usize,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: unified,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: dst_pitch as usize,
        WidthInBytes: width as usize,
        Height: height as usize,
    };
    s.run_in_context(|cu| check(unsafe { sys::cuMemcpy2DAsync_v2(&params, cu) }, "cuMemcpy2DAsync"))?;
    note_uses(s, &[dst, src]);
    // Each side as one range from its first row to its last: the gaps between rows too.
    declare(s, (dst, dst_span), Some((src, src_span)), "gpurt_memcpy_2d");
    Ok(())
}

#[cold]
fn overflow(name: &str) -> Error {
    Error::invalid_argument(format!("`{name}` × height overflows a size"))
}

/// Uploads `bytes` from pageable host memory at `src` to the device at `dst` on
/// `stream`, through pinned staging buffers (see `staged`). Returns once `src` may be
/// reused; the transfer completes in stream order.
pub fn upload_staged(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<()> {
    require_host_side(dst, src, bytes)?;
    // SAFETY: the caller gives `bytes` readable bytes at `src`; require_host_memory
    // refused device addresses.
    upload_filled(dst, bytes, stream, |buffer, offset, len| unsafe {
        staged::copy_host(buffer, (src + offset) as *const u8, len as usize);
        Ok(())
    })
}

/// Uploads `bytes` to the device at `dst` on `stream` through pinned staging
/// buffers, each chunk filled by `fill(buffer, offset, len)` (a file's bytes for
/// `gds`). Returns once the last chunk is filled; the transfers complete in stream order.
pub(crate) fn upload_filled(dst: u64, bytes: u64, stream: Handle, fill: impl FnMut(*mut u8, u64, u64) -> Result<()>) -> Result<()> {
    let mut transfer = StreamTransfer::new(stream, dst, bytes, true)?;
    // SAFETY: with_staging gives buffers of STAGING_CHUNK bytes.
    with_staging(&mut transfer, bytes, |t, buffers| unsafe { staged::upload_filled(t, buffers, bytes, fill) })
}

/// Downloads `bytes` from the device at `src` into pageable host memory at `dst`,
/// in stream order, through pinned staging buffers. Returns once `dst` holds the
/// data: a synchronising call.
pub fn download_staged(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<()> {
    crate::sync_debug::on_blocking_call("gpurt_memcpy_dtoh_staged")?;
    require_host_side(src, dst, bytes)?;
    // SAFETY: as in upload_staged, for `bytes` writable bytes at `dst`.
    download_drained(src, bytes, stream, |buffer, offset, len| unsafe {
        staged::copy_host((dst + offset) as *mut u8, buffer, len as usize);
        Ok(())
    })
}

/// Downloads `bytes` from the device at `src` on `stream` through pinned staging
/// buffers, each chunk handed to `drain(buffer, offset, len)` once it has arrived.
/// Returns once the last chunk is drained.
pub(crate) fn download_drained(src: u64, bytes: u64, stream: Handle, drain: impl FnMut(*const u8, u64, u64) -> Result<()>) -> Result<()> {
    let mut transfer = StreamTransfer::new(stream, src, bytes, false)?;
    // SAFETY: with_staging gives buffers of STAGING_CHUNK bytes.
    with_staging(&mut transfer, bytes, |t, buffers| unsafe { staged::download_drained(t, buffers, bytes, drain) })
}

/// A staged copy's two sides: non-NULL, in the address space, the host side host memory.
fn require_host_side(device_ptr: u64, host_ptr: u64, bytes: u64) -> Result<()> {
    if bytes > 0 {
        require_pointers(device_ptr, host_ptr)?;
        require_ranges(device_ptr, bytes, host_ptr, bytes)?;
        require_host_memory(host_ptr)?;
    }
    Ok(())
}

/// A staged copy's DMA side: chunks between pinned buffers and `device_ptr` on one
/// stream, tracked with pooled event markers.
struct StreamTransfer {
    handle: Handle,
    stream: Stream,
    device_ptr: u64,
    upload: bool,
}

impl StreamTransfer {
    fn new(handle: Handle, device_ptr: u64, bytes: u64, upload: bool) -> Result<StreamTransfer> {
        let stream = crate::stream::get(handle)?;
        if bytes > 0 {
            if device_ptr == 0 {
                return Err(Error::invalid_argument("a staged copy needs a non-NULL device pointer"));
            }
            check_range(device_ptr, bytes, "device pointer")?;
            crate::stream::ensure_not_capturing(handle, "a staged copy")?;
            let access = if upload { Access::Write } else { Access::Read };
            sanitizer::access(stream, device_ptr, bytes, access, "gpurt staged copy");
        }
        Ok(StreamTransfer { handle, stream, device_ptr, upload })
    }
}

impl ChunkTransfer for StreamTransfer {
    fn enqueue(&mut self, staging: *mut u8, offset: u64, len: u64) -> Result<()> {
        let (device, n) = (self.device_ptr + offset, len as usize);
        self.stream.run(|cu| match self.upload {
            true => check(unsafe { sys::cuMemcpyHtoDAsync_v2(device, staging.cast(), n, cu) }, "cuMemcpyHtoDAsync"),
            false => check(unsafe { sys::cuMemcpyDtoHAsync_v2(staging.cast(), device, n, cu) }, "cuMemcpyDtoHAsync"),
        })
    }
    fn mark(&mut self) -> Result<u64> {
        crate::event::marker_record(self.stream.device(), self.stream.raw as u64)
    }
    fn wait(&mut self, marker: u64) {
        crate::event::marker_wait(marker)
    }
    fn forget(&mut self, marker: u64) {
        crate::event::marker_forget(marker)
    }
}

/// Refuses device memory where host memory is expected: the staging threads would
/// read or write it from the CPU.
fn require_host_memory(ptr: u64) -> Result<()> {
    let mut kind = 0u32;
    let attribute = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    let known = unsafe { sys::cuPointerGetAttribute((&mut kind as *mut u32).cast(), attribute, ptr) };
    if known == sys::CUresult::CUDA_SUCCESS && kind == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        return Err(Error::invalid_argument(format!("{ptr:#x} is device memory; a staged copy's host side must be host memory")));
    }
    Ok(())
}

/// Runs a staged copy with a ring of buffers from the default pinned pool. The
/// buffers go back with the stream recorded on them, so that transfers still queued
/// keep them from reuse.
fn with_staging(
    transfer: &mut StreamTransfer,
    bytes: u64,
    copy: impl FnOnce(&mut StreamTransfer, &[*mut u8]) -> Result<()>,
) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let pool = crate::pinned::default_pool()?;
    let wanted = staged::chunks(bytes).take(STAGING_BUFFERS).count();
    let mut buffers = Vec::with_capacity(wanted);
    let mut result = Ok(());
    for _ in 0..wanted {
        match crate::pinned::malloc(pool, STAGING_CHUNK) {
            Ok(p) => buffers.push(p as *mut u8),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    if result.is_ok() {
        result = copy(transfer, &buffers);
    }
    for b in buffers {
        let _ = crate::pinned::record_stream(b as u64, transfer.handle);
        let _ = crate::pinned::free(b as u64);
    }
    result
}
