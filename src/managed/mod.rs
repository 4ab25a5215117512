//! Managed (unified) memory, cupy's `malloc_managed`: segments from
//! `cuMemAllocManaged`, cached like device memory in pools of their own (one per
//! device and attach flag, kept among the user pools, so `gpurt_free` finds their
//! blocks and the device's statistics count them), and the prefetches and advice
//! that place them.

pub mod ffi;

use std::sync::{Arc, OnceLock};

use cudarc::driver::sys;

use crate::alloc::config::AllocConfig;
use crate::alloc::device::{self as pools, MEM_POOLS};
use crate::alloc::mempool::MemPool;
use crate::alloc::upstream::{ManagedSource, PoolSource, GPURT_MEM_ATTACH_GLOBAL};
use crate::device::{self, per_device};
use crate::driver::{check, require_symbol};
use crate::error::{Error, Result};
use crate::stream::Stream;

/// A device's managed pools: for GPURT_MEM_ATTACH_GLOBAL and _HOST, made on first use.
type ManagedPools = [OnceLock<Arc<MemPool<PoolSource>>>; 2];
static MANAGED_POOLS: OnceLock<Box<[ManagedPools]>> = OnceLock::new();

/// `size` bytes of managed memory from the current device's managed pool for
/// `flags`, for use on this thread's current stream of that device. Freed with
/// `gpurt_free`.
pub fn malloc(size: u64, flags: u32) -> Result<u64> {
    let d = device::resolve(crate::device::CURRENT_DEVICE)?;
    let source = ManagedSource::new(d, flags)?; // checks the flags
    let pools_of_device = &MANAGED_POOLS.get_or_init(|| per_device(Default::default))[d as usize];
    let slot = &pools_of_device[if flags == GPURT_MEM_ATTACH_GLOBAL { 0 } else { 1 }];
    let pool = match slot.get() {
        Some(pool) => pool,
        None => {
            let config = AllocConfig { expandable_segments: false, ..pools::config()? };
            slot.get_or_init(|| MEM_POOLS.create(d, Box::new(source), config, 0))
        }
    };
    let stream = crate::stream::get(crate::stream::current(d)?)?;
    pools::malloc_from(d, pool.allocator(), size, stream.raw as u64)
}

/// A prefetch target or advice location meaning host memory.
pub const GPURT_DEVICE_HOST: i32 = -2;

/// Where a prefetch goes or advice points: a device, or host memory.
fn location(target: i32) -> Result<sys::CUmemLocation> {
    Ok(match target {
        GPURT_DEVICE_HOST => sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST, id: 0 },
        ordinal => sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: device::resolve(ordinal)? },
    })
}

fn require(symbol: &str, what: &str) -> Result<()> {
    device::require_device()?;
    require_symbol(symbol, what, "12.2")
}

/// A range of the caller's that is not empty and that it can own.
fn check_managed_range(ptr: u64, size: u64) -> Result<()> {
    if ptr == 0 || size == 0 {
        return Err(Error::invalid_argument(format!("the range ({ptr:#x}, {size} bytes) is empty")));
    }
    crate::boundary::check_range(ptr, size, "ptr")
}

/// Moves `[ptr, ptr + size)` of managed memory to `target` (a device or
/// `GPURT_DEVICE_HOST`) in `stream`'s order.
pub fn prefetch(ptr: u64, size: u64, target: i32, stream: Stream) -> Result<()> {
    require("cuMemPrefetchAsync_v2", "prefetching managed memory")?;
    check_managed_range(ptr, size)?;
    let location = location(target)?;
    stream.run(|cu| check(unsafe { sys::cuMemPrefetchAsync_v2(ptr, size as usize, location, 0, cu) }, "cuMemPrefetchAsync"))
}

/// `cuMemAdvise` with `advice` (GPURT_MEM_ADVISE_*) about `target`.
pub fn advise(ptr: u64, size: u64, advice: i32, target: i32) -> Result<()> {
    use sys::CUmem_advise::*;
    require("cuMemAdvise_v2", "advice on managed memory")?;
    check_managed_range(ptr, size)?;
    let advice = match advice {
        1 => CU_MEM_ADVISE_SET_READ_MOSTLY,
        2 => CU_MEM_ADVISE_UNSET_READ_MOSTLY,
        3 => CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
        4 => CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION,
        5 => CU_MEM_ADVISE_SET_ACCESSED_BY,
        6 => CU_MEM_ADVISE_UNSET_ACCESSED_BY,
        other => return Err(Error::invalid_argument(format!("advice {other} is not a GPURT_MEM_ADVISE_* value"))),
    };
    let location = location(target)?;
    let d = device::resolve(crate::device::CURRENT_DEVICE)?;
    device::with_device(d, || check(unsafe { sys::cuMemAdvise_v2(ptr, size as usize, advice, location) }, "cuMemAdvise"))
}
