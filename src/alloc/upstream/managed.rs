//! Managed memory as a pool's upstream (`cuMemAllocManaged`).

use cudarc::driver::sys;

use super::DriverSource;
use crate::alloc::pool::SegmentSource;
use crate::driver::check;
use crate::error::{Error, Result};

/// Memory any stream on any device may access (`CU_MEM_ATTACH_GLOBAL`).
pub const GPURT_MEM_ATTACH_GLOBAL: u32 = 1;
/// Memory the host may access while no stream uses it (`CU_MEM_ATTACH_HOST`).
pub const GPURT_MEM_ATTACH_HOST: u32 = 2;
/// A prefetch target or advice location meaning host memory.
pub const GPURT_DEVICE_HOST: i32 = -2;

/// Segments from `cuMemAllocManaged` with the pool's attach flag; markers, the
/// capture check and the memory figures from the device's driver source.
pub struct ManagedSource {
    driver: DriverSource,
    flags: u32,
}

impl ManagedSource {
    pub fn new(device: i32, flags: u32) -> Result<ManagedSource> {
        if flags != GPURT_MEM_ATTACH_GLOBAL && flags != GPURT_MEM_ATTACH_HOST {
            return Err(Error::invalid_argument(format!("flags {flags:#x}: give GPURT_MEM_ATTACH_GLOBAL or GPURT_MEM_ATTACH_HOST")));
        }
        Ok(ManagedSource { driver: DriverSource::new(device), flags })
    }
}

impl SegmentSource for ManagedSource {
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.driver.may_allocate(stream)?;
        crate::device::with_device(self.driver.device(), || {
            let mut ptr = 0;
            check(unsafe { sys::cuMemAllocManaged(&mut ptr, size as usize, self.flags) }, "cuMemAllocManaged")?;
            Ok(ptr)
        })
    }
    fn release(&self, addr: u64, _size: u64) {
        let freed = crate::device::with_device(self.driver.device(), || check(unsafe { sys::cuMemFree_v2(addr) }, "cuMemFree"));
        if let Err(e) = freed {
            crate::log::log(crate::log::Level::Error, &format!("releasing a cached managed segment: {e}"));
        }
    }
    markers_from!(driver);
}
