//! The driver's stream-ordered pool as a pool's upstream (`GPURT_UPSTREAM_ASYNC`).

use cudarc::driver::sys;

use super::DriverSource;
use crate::alloc::pool::SegmentSource;
use crate::driver::check;
use crate::error::Result;

/// Segments from the driver's stream-ordered pool (`cuMemAllocFromPoolAsync` on the
/// device's current memory pool, `cuDeviceGetMemPool`): gpurt's cache over a pool
/// that other libraries in the process may share. A segment is taken in its
/// stream's order and stays that stream's, as every segment of a gpurt pool does;
/// it goes back idle, in the legacy default stream's order.
pub struct AsyncSource {
    driver: DriverSource,
    pool: usize,
}

impl AsyncSource {
    pub fn new(device: i32) -> Result<AsyncSource> {
        for symbol in ["cuDeviceGetMemPool", "cuMemAllocFromPoolAsync", "cuMemFreeAsync"] {
            crate::driver::require_symbol(symbol, "GPURT_UPSTREAM_ASYNC", "11.2")?;
        }
        let mut pool = std::ptr::null_mut();
        check(unsafe { sys::cuDeviceGetMemPool(&mut pool, device) }, "cuDeviceGetMemPool")?;
        Ok(AsyncSource { driver: DriverSource::new(device), pool: pool as usize })
    }
}

impl SegmentSource for AsyncSource {
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.driver.may_allocate(stream)?;
        let native = self.driver.native_stream(stream) as sys::CUstream;
        crate::device::with_device(self.driver.device(), || {
            let mut ptr = 0;
            let pool = self.pool as sys::CUmemoryPool;
            check(unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, size as usize, pool, native) }, "cuMemAllocFromPoolAsync")?;
            Ok(ptr)
        })
    }
    fn release(&self, addr: u64, _size: u64) {
        let legacy = crate::stream::NATIVE_LEGACY as sys::CUstream;
        let freed = crate::device::with_device(self.driver.device(), || check(unsafe { sys::cuMemFreeAsync(addr, legacy) }, "cuMemFreeAsync"));
        if let Err(e) = freed {
            crate::log::log(crate::log::Level::Error, &format!("releasing a cached segment to the driver's pool: {e}"));
        }
    }
    markers_from!(driver);
}
