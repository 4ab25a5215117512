//! Copies between pageable host memory (or a file: `gds`) and the device, pipelined
//! through a few pinned staging buffers: several threads fill chunk k into a buffer
//! while the DMA engine moves chunk k−1. The driver stages pageable copies itself
//! with one thread and reaches ~8 GB/s; the pipeline is limited by host memory
//! bandwidth instead.
//!
//! The trade-off: `STAGING_BUFFERS` × `STAGING_CHUNK` bytes of pinned memory stay
//! cached in the default pinned pool, a few host threads are busy during the copy,
//! and the calling thread waits whenever the ring of buffers is full (a copy larger
//! than the ring waits for the stream's earlier work, as the driver's own pageable
//! copy does for any size).

use rayon::prelude::*;

use crate::error::Result;

/// Bytes per staging buffer: large enough that each DMA runs at the bus limit, small
/// enough that the first DMA starts early. Under Miri a 4096th of it, so that the
/// tests cross the same chunk and ring boundaries in bounded time.
pub const STAGING_CHUNK: u64 = if cfg!(miri) { 1 << 10 } else { 4 << 20 };
/// Buffers in the ring: one being filled, the others in flight.
pub const STAGING_BUFFERS: usize = 4;
/// Below this a chunk is copied by the calling thread alone.
const PARALLEL_COPY_MIN: usize = (STAGING_CHUNK / 4) as usize;

/// The device side of a staged copy, and how its progress is tracked.
pub trait ChunkTransfer {
    /// Queues the transfer of `len` bytes between `staging` and the device at
    /// `offset` (staging to device for an upload, device to staging for a download).
    fn enqueue(&mut self, staging: *mut u8, offset: u64, len: u64) -> Result<()>;
    /// A marker that is done when everything queued so far is done.
    fn mark(&mut self) -> Result<u64>;
    /// Waits for a marker, and gives it back.
    fn wait(&mut self, marker: u64);
    /// Gives a marker back without waiting for it.
    fn forget(&mut self, marker: u64);
}

/// (offset, length) of each chunk of a `bytes`-long copy.
pub fn chunks(bytes: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..bytes).step_by(STAGING_CHUNK as usize).map(move |offset| (offset, STAGING_CHUNK.min(bytes - offset)))
}

/// Runs `f(at, n)` over stripes covering `[0, len)`: one for a small `len`, else one
/// per staging thread, each starting at a multiple of 4096 (as direct I/O needs).
/// The first error is the result.
pub fn for_stripes(len: usize, f: impl Fn(usize, usize) -> Result<()> + Sync) -> Result<()> {
    if len < PARALLEL_COPY_MIN {
        return f(0, len);
    }
    // Under Miri, stripes of a cache line, run in turn: the staging threads live as
    // long as the process, which Miri reports as threads left running.
    let (threads, align) = if cfg!(miri) { (4, 64) } else { (copy_threads().current_num_threads(), 4096) };
    let stripe = len.div_ceil(threads).next_multiple_of(align);
    let run = |at: usize| f(at, stripe.min(len - at));
    if cfg!(miri) {
        (0..len).step_by(stripe).try_for_each(run)
    } else {
        copy_threads().install(|| (0..len).into_par_iter().step_by(stripe).try_for_each(run))
    }
}

/// Copies `len` bytes from `src` to `dst` (pageable memory and a staging buffer,
/// either way), with several threads for large chunks.
///
/// # Safety
/// `src` and `dst` must be valid for `len` bytes and must not overlap.
pub unsafe fn copy_host(dst: *mut u8, src: *const u8, len: usize) {
    let (dst, src) = (dst as usize, src as usize);
    let copied = for_stripes(len, |at, n| {
        std::ptr::copy_nonoverlapping((src + at) as *const u8, (dst + at) as *mut u8, n);
        Ok(())
    });
    debug_assert!(copied.is_ok());
}

/// The threads that fill and drain staging buffers: few, since host memory bandwidth
/// saturates with a handful of copying threads and the rest of the machine is the
/// caller's.
fn copy_threads() -> &'static rayon::ThreadPool {
    static POOL: once_cell::sync::OnceCell<rayon::ThreadPool> = once_cell::sync::OnceCell::new();
    POOL.get_or_init(|| {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("gpurt-staging-{i}"))
            .build()
            .expect("building the staging copy threads")
    })
}

/// Uploads `bytes` from `src` through the staging `buffers` (each `STAGING_CHUNK`
/// bytes). Returns once `src` may be reused; the last transfers may still be queued.
///
/// # Safety
/// `src` must be valid for `bytes` bytes, each buffer for `STAGING_CHUNK` bytes.
#[cfg(test)]
unsafe fn upload(t: &mut impl ChunkTransfer, buffers: &[*mut u8], src: *const u8, bytes: u64) -> Result<()> {
    upload_filled(t, buffers, bytes, |buffer, offset, len| {
        copy_host(buffer, src.add(offset as usize), len as usize);
        Ok(())
    })
}

/// Uploads `bytes` through the staging `buffers`, each chunk filled by
/// `fill(buffer, offset, len)` before its transfer is queued.
///
/// # Safety
/// Each buffer must be valid for `STAGING_CHUNK` bytes.
pub unsafe fn upload_filled(
    t: &mut impl ChunkTransfer,
    buffers: &[*mut u8],
    bytes: u64,
    mut fill: impl FnMut(*mut u8, u64, u64) -> Result<()>,
) -> Result<()> {
    let mut pending: Vec<Option<u64>> = vec![None; buffers.len()];
    let result = (|| {
        for (k, (offset, len)) in chunks(bytes).enumerate() {
            let b = k % buffers.len();
            if let Some(m) = pending[b].take() {
                t.wait(m);
            }
            fill(buffers[b], offset, len)?;
            t.enqueue(buffers[b], offset, len)?;
            pending[b] = Some(t.mark()?);
        }
        Ok(())
    })();
    pending.into_iter().flatten().for_each(|m| t.forget(m));
    result
}

/// Downloads `bytes` into `dst` through the staging `buffers`. Returns once all of
/// `dst` has arrived.
///
/// # Safety
/// `dst` must be valid for `bytes` bytes, each buffer for `STAGING_CHUNK` bytes.
#[cfg(test)]
unsafe fn download(t: &mut impl ChunkTransfer, buffers: &[*mut u8], dst: *mut u8, bytes: u64) -> Result<()> {
    download_drained(t, buffers, bytes, |buffer, offset, len| {
        copy_host(dst.add(offset as usize), buffer, len as usize);
        Ok(())
    })
}

/// Downloads `bytes` through the staging `buffers`, each chunk handed to
/// `drain(buffer, offset, len)` once it has arrived.
///
/// # Safety
/// Each buffer must be valid for `STAGING_CHUNK` bytes.
pub unsafe fn download_drained(
    t: &mut impl ChunkTransfer,
    buffers: &[*mut u8],
    bytes: u64,
    mut drain: impl FnMut(*const u8, u64, u64) -> Result<()>,
) -> Result<()> {
    let count = bytes.div_ceil(STAGING_CHUNK);
    let chunk = |k: u64| (k * STAGING_CHUNK, STAGING_CHUNK.min(bytes - k * STAGING_CHUNK));
    let mut pending: Vec<Option<u64>> = vec![None; buffers.len()];
    let result = (|| {
        for (k, &buffer) in buffers.iter().enumerate().take(count as usize) {
            let (offset, len) = chunk(k as u64);
            t.enqueue(buffer, offset, len)?;
            pending[k] = Some(t.mark()?);
        }
        for k in 0..count {
            let b = (k % buffers.len() as u64) as usize;
            if let Some(m) = pending[b].take() {
                t.wait(m);
            }
            let (offset, len) = chunk(k);
            drain(buffers[b], offset, len)?;
            let next = k + buffers.len() as u64;
            if next < count {
                let (next_offset, next_len) = chunk(next);
                t.enqueue(buffers[b], next_offset, next_len)?;
                pending[b] = Some(t.mark()?);
            }
        }
        Ok(())
    })();
    pending.into_iter().flatten().for_each(|m| t.forget(m));
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, Status};
    use crate::random_bytes;

    /// A device that runs transfers only when a marker is waited for (or at the end),
    /// so that a buffer overwritten before its transfer ran shows up as wrong data.
    struct LazyDevice {
        memory: Vec<u8>,
        upload: bool,
        queued: Vec<(usize, u64, u64)>,
        ran: usize,
        fail_at_enqueue: Option<usize>,
        live_markers: usize,
    }

    impl LazyDevice {
        fn new(memory: Vec<u8>, upload: bool) -> Self {
            LazyDevice { memory, upload, queued: Vec::new(), ran: 0, fail_at_enqueue: None, live_markers: 0 }
        }
        fn run_until(&mut self, end: usize) {
            while self.ran < end {
                let (staging, offset, len) = self.queued[self.ran];
                let (o, n) = (offset as usize, len as usize);
                unsafe {
                    if self.upload {
                        std::ptr::copy_nonoverlapping(staging as *const u8, self.memory[o..].as_mut_ptr(), n);
                    } else {
                        std::ptr::copy_nonoverlapping(self.memory[o..].as_ptr(), staging as *mut u8, n);
                    }
                }
                self.ran += 1;
            }
        }
    }

    impl ChunkTransfer for LazyDevice {
        fn enqueue(&mut self, staging: *mut u8, offset: u64, len: u64) -> Result<()> {
            if self.fail_at_enqueue == Some(self.queued.len()) {
                return Err(Error::new(Status::GPURT_ERROR_CUDA, "injected"));
            }
            assert!(len <= STAGING_CHUNK && offset + len <= self.memory.len() as u64);
            self.queued.push((staging as usize, offset, len));
            Ok(())
        }
        fn mark(&mut self) -> Result<u64> {
            self.live_markers += 1;
            Ok(self.queued.len() as u64)
        }
        fn wait(&mut self, marker: u64) {
            self.live_markers -= 1;
            self.run_until(marker as usize);
        }
        fn forget(&mut self, _marker: u64) {
            self.live_markers -= 1;
        }
    }

    fn ring(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|_| vec![0u8; STAGING_CHUNK as usize]).collect()
    }

    const CHUNK: usize = STAGING_CHUNK as usize;
    /// Sizes around chunk and ring boundaries, none a multiple of the chunk but some.
    const SIZES: [usize; 9] = [1, 4095, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 12345, 4 * CHUNK, 5 * CHUNK + 7, 9 * CHUNK - 3];

    #[test]
    fn chunks_cover_every_byte_once() {
        for bytes in SIZES.map(|s| s as u64).into_iter().chain([0]) {
            let mut next = 0;
            for (offset, len) in chunks(bytes) {
                assert_eq!(offset, next);
                assert!(len > 0 && len <= STAGING_CHUNK);
                next += len;
            }
            assert_eq!(next, bytes);
        }
    }

    #[test]
    fn uploads_are_byte_exact_and_never_overwrite_a_queued_buffer() {
        for (i, &size) in SIZES.iter().enumerate() {
            for buffers in [1, 2, STAGING_BUFFERS] {
                let src = random_bytes(size, i as u64 + 1);
                let mut ring = ring(buffers);
                let ptrs: Vec<*mut u8> = ring.iter_mut().map(|b| b.as_mut_ptr()).collect();
                let mut dev = LazyDevice::new(vec![0xA5; size], true);
                unsafe { upload(&mut dev, &ptrs, src.as_ptr(), size as u64) }.unwrap();
                assert_eq!(dev.live_markers, 0, "every marker is given back");
                let queued = dev.queued.len();
                dev.run_until(queued); // the stream finishes the rest later
                assert!(dev.memory == src, "size {size}, {buffers} buffers");
            }
        }
    }

    #[test]
    fn downloads_are_byte_exact() {
        for (i, &size) in SIZES.iter().enumerate() {
            for buffers in [1, 3, STAGING_BUFFERS] {
                let data = random_bytes(size, 100 + i as u64);
                let mut ring = ring(buffers);
                let ptrs: Vec<*mut u8> = ring.iter_mut().map(|b| b.as_mut_ptr()).collect();
                let mut dev = LazyDevice::new(data.clone(), false);
                let mut dst = vec![0x5Au8; size];
                unsafe { download(&mut dev, &ptrs, dst.as_mut_ptr(), size as u64) }.unwrap();
                assert_eq!(dev.live_markers, 0);
                assert!(dst == data, "size {size}, {buffers} buffers");
            }
        }
    }

    #[test]
    fn a_failed_transfer_gives_every_marker_back() {
        for fail_at in [0, 1, 5] {
            let size = 7 * CHUNK + 1;
            let data = random_bytes(size, 7);
            let mut ring = ring(STAGING_BUFFERS);
            let ptrs: Vec<*mut u8> = ring.iter_mut().map(|b| b.as_mut_ptr()).collect();
            let mut dev = LazyDevice::new(vec![0; size], true);
            dev.fail_at_enqueue = Some(fail_at);
            let err = unsafe { upload(&mut dev, &ptrs, data.as_ptr(), size as u64) }.unwrap_err();
            assert_eq!(err.status, Status::GPURT_ERROR_CUDA);
            assert_eq!(dev.live_markers, 0);
            let mut dev = LazyDevice::new(data.clone(), false);
            dev.fail_at_enqueue = Some(fail_at);
            let mut dst = vec![0; size];
            assert!(unsafe { download(&mut dev, &ptrs, dst.as_mut_ptr(), size as u64) }.is_err());
            assert_eq!(dev.live_markers, 0);
        }
    }
}
