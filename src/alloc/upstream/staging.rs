//! Pinned host memory a sleeping pool's contents wait in (the driver source's
//! `host_staging`).

use libc::c_void;

use cudarc::driver::sys;

use crate::alloc::pool::{HostStaging, StagedRange};
use crate::driver::check;
use crate::error::{Error, Result, Status};

/// Pinned host memory a sleeping pool's contents wait in.
pub(super) struct PinnedStaging {
    pub(super) host: *mut c_void,
    bytes: u64,
}

// SAFETY: the memory is the staging's alone, and pinned memory may be freed from any thread.
unsafe impl Send for PinnedStaging {}

/// Bytes of staging from which its first touch is spread over threads.
const TOUCH_IN_PARALLEL: usize = 64 << 20;

impl PinnedStaging {
    /// Anonymous memory advised into huge pages, first touched by several threads (the
    /// kernel zeroes the pages), then registered with the driver: on the H100 host,
    /// 8 GiB in 0.55 s where `cuMemHostAlloc` took 5.2 s, copied at the same 49-50 GiB/s
    /// (`gpu/pin_bench.c`; registering untouched memory took 2.2 s). This is most of a
    /// first offload's time.
    pub(super) fn new(bytes: u64) -> Result<PinnedStaging> {
        let len = bytes as usize;
        let out_of_memory = |what: &str| Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("{what} of {bytes} bytes of host memory for an offload failed"));
        // SAFETY: a fresh private anonymous mapping; checked below.
        let host = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if host == libc::MAP_FAILED {
            return Err(out_of_memory("mmap"));
        }
        // Advice only: where transparent huge pages are off, the pages are 4 KiB.
        unsafe { libc::madvise(host, len, libc::MADV_HUGEPAGE) };
        touch(host as usize, len);
        if let Err(e) = check(unsafe { sys::cuMemHostRegister_v2(host, len, 0) }, "cuMemHostRegister") {
            unsafe { libc::munmap(host, len) };
            return Err(e);
        }
        Ok(PinnedStaging { host, bytes })
    }

    /// The driver's staging behind `host`, checked to hold `ranges`.
    pub(super) fn of<'a>(host: &'a HostStaging, ranges: &[StagedRange]) -> Result<&'a PinnedStaging> {
        let staging = host.downcast_ref::<PinnedStaging>().ok_or_else(|| Error::new(Status::GPURT_ERROR_INTERNAL, "host memory of another memory source"))?;
        let needed = ranges.iter().map(StagedRange::end).max().unwrap_or(0);
        if needed > staging.bytes {
            return Err(Error::new(Status::GPURT_ERROR_INTERNAL, format!("copies up to byte {needed} of {} bytes of host memory", staging.bytes)));
        }
        Ok(staging)
    }
}

impl Drop for PinnedStaging {
    fn drop(&mut self) {
        unsafe {
            sys::cuMemHostUnregister(self.host);
            libc::munmap(self.host, self.bytes as usize);
        }
    }
}

/// Writes a byte in each page of `[addr, addr + len)`, so that the kernel backs it
/// with memory, large ranges with one thread a share (zeroing pages is what costs).
fn touch(addr: usize, len: usize) {
    let page = |from: usize, to: usize| {
        for at in (from..to).step_by(4096) {
            // SAFETY: inside the caller's fresh writable mapping, each page by one thread.
            unsafe { std::ptr::write_volatile(at as *mut u8, 0) };
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(16);
    if len < TOUCH_IN_PARALLEL || threads == 1 {
        return page(addr, addr + len);
    }
    let share = len.div_ceil(threads).next_multiple_of(2 << 20);
    std::thread::scope(|scope| {
        for start in (addr..addr + len).step_by(share) {
            scope.spawn(move || page(start, (start + share).min(addr + len)));
        }
    });
}
