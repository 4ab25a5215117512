//! Copies and memsets on streams. Pointers may be device memory (gpurt's or the
//! caller's own), pinned or plain host memory: with unified addressing the driver
//! tells them apart. A host pointer inside a gpurt pinned block gets the stream
//! recorded on that block, so that the block is not reused while the copy runs.

pub mod ffi;

use cudarc::driver::sys;

use crate::driver::check;
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::stream::Stream;

fn note_uses(stream: Handle, pointers: &[u64]) {
    pointers.iter().for_each(|&p| crate::pinned::note_use(p, stream));
}

/// `bytes` from `src` to `dst`, queued on `stream`.
pub fn copy_async(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<()> {
    enqueue_copy(dst, src, bytes, stream).map(drop)
}

/// As `copy_async`, then waits for the stream: a synchronising call.
pub fn copy_blocking(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<()> {
    crate::sync_debug::on_blocking_call("gpurt_memcpy")?;
    let s = enqueue_copy(dst, src, bytes, stream)?;
    s.run(|cu| check(unsafe { sys::cuStreamSynchronize(cu) }, "cuStreamSynchronize"))
}

/// Queues the copy; gives the stream, looked up once.
fn enqueue_copy(dst: u64, src: u64, bytes: u64, stream: Handle) -> Result<Stream> {
    let s = crate::stream::get(stream)?;
    if bytes == 0 {
        return Ok(s);
    }
    require_pointers(dst, src)?;
    s.run(|cu| check(unsafe { sys::cuMemcpyAsync(dst, src, bytes as usize, cu) }, "cuMemcpyAsync"))?;
    note_uses(stream, &[dst, src]);
    Ok(s)
}

fn require_pointers(dst: u64, src: u64) -> Result<()> {
    if dst == 0 || src == 0 {
        return Err(Error::invalid_argument("a copy needs non-NULL source and destination"));
    }
    Ok(())
}

/// `bytes` from `src` on `src_device` to `dst` on `dst_device` (device memory of
/// two GPUs; staged by the driver when peer access is off), queued on `stream`.
pub fn copy_peer_async(dst: u64, dst_device: i32, src: u64, src_device: i32, bytes: u64, stream: Handle) -> Result<()> {
    let s = crate::stream::get(stream)?;
    let (dst_ctx, src_ctx) = (crate::device::primary_context(dst_device)?, crate::device::primary_context(src_device)?);
    if bytes == 0 {
        return Ok(());
    }
    require_pointers(dst, src)?;
    s.run(|cu| {
        check(unsafe { sys::cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, bytes as usize, cu) }, "cuMemcpyPeerAsync")
    })
}

/// Sets `count` elements of `element_size` bytes (1, 2 or 4) at `dst` to `value`.
pub fn memset_async(dst: u64, value: u32, element_size: u32, count: u64, stream: Handle) -> Result<()> {
    let s = crate::stream::get(stream)?;
    if element_size < 4 && value >> (8 * element_size) != 0 {
        return Err(Error::invalid_argument(format!("value {value:#x} does not fit {element_size} byte(s)")));
    }
    if count == 0 {
        return Ok(());
    }
    if dst == 0 {
        return Err(Error::invalid_argument("memset needs a non-NULL destination"));
    }
    let n = count as usize;
    s.run(|cu| match element_size {
        1 => check(unsafe { sys::cuMemsetD8Async(dst, value as u8, n, cu) }, "cuMemsetD8Async"),
        2 => check(unsafe { sys::cuMemsetD16Async(dst, value as u16, n, cu) }, "cuMemsetD16Async"),
        4 => check(unsafe { sys::cuMemsetD32Async(dst, value, n, cu) }, "cuMemsetD32Async"),
        other => Err(Error::invalid_argument(format!("element size {other} is not 1, 2 or 4"))),
    })
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
    s.run(|cu| check(unsafe { sys::cuMemcpy2DAsync_v2(&params, cu) }, "cuMemcpy2DAsync"))?;
    note_uses(stream, &[dst, src]);
    Ok(())
}
