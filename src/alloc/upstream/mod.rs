//! Upstreams of the pools: where a pool's segments come from. The driver's
//! (`DriverSource`: every device's default pool, graphs' private pools, and pools
//! users create over GPURT_UPSTREAM_DRIVER), the driver's stream-ordered pool
//! (`AsyncSource`), managed memory (`ManagedSource`, `cuMemAllocManaged`), or a
//! caller's function pair (`UserSource`: an engine's
//! arena, a NUMA-aware allocator, RMM under gpurt's cache, as cupy's
//! `MemoryPool(allocator)`). A pool holds its upstream as a
//! `Box<dyn SegmentSource>`: the source is asked only off the fast path (a new or
//! released segment, a stream-ordering marker), so the dispatch costs nothing there.
//!
//! One file per upstream (`driver`, `user`, `managed`, `stream_ordered`); the pinned
//! host memory a sleeping driver pool's contents wait in is `staging`.

use super::pool::{HostStaging, SegmentSource, StagedRange};
use crate::error::Result;

/// The methods an upstream takes from the driver's source of its device: the
/// stream-ordering markers, the memory figures, the capture check, native streams
/// and the device's context.
macro_rules! markers_from {
    ($field:ident) => {
        fn record(&self, stream: u64) -> Result<u64> {
            self.$field.record(stream)
        }
        fn is_done(&self, marker: u64) -> bool {
            self.$field.is_done(marker)
        }
        fn wait(&self, marker: u64) {
            self.$field.wait(marker)
        }
        fn memory_info(&self) -> (u64, u64) {
            self.$field.memory_info()
        }
        fn may_allocate(&self, stream: u64) -> Result<()> {
            self.$field.may_allocate(stream)
        }
        fn native_stream(&self, stream: u64) -> u64 {
            self.$field.native_stream(stream)
        }
        fn in_context(&self, f: &mut dyn FnMut()) -> Result<()> {
            self.$field.in_context(f)
        }
        fn history_device(&self) -> Option<i32> {
            self.$field.history_device()
        }
    };
}

mod driver;
mod managed;
mod staging;
mod stream_ordered;
mod user;

pub(crate) use driver::with_relaxed_capture;
pub use driver::DriverSource;
pub use managed::{ManagedSource, GPURT_DEVICE_HOST, GPURT_MEM_ATTACH_GLOBAL, GPURT_MEM_ATTACH_HOST};
pub use stream_ordered::AsyncSource;
pub use user::{gpurt_upstream_alloc_fn, gpurt_upstream_free_fn, UserFunctions, UserSource};

/// A pool's source of segments, whichever upstream it is.
pub type PoolSource = Box<dyn SegmentSource>;

/// Every method forwarded, the defaulted ones included (their overrides matter).
impl SegmentSource for Box<dyn SegmentSource> {
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        (**self).allocate(size, stream)
    }
    fn release(&self, addr: u64, size: u64) {
        (**self).release(addr, size)
    }
    fn record(&self, stream: u64) -> Result<u64> {
        (**self).record(stream)
    }
    fn is_done(&self, marker: u64) -> bool {
        (**self).is_done(marker)
    }
    fn wait(&self, marker: u64) {
        (**self).wait(marker)
    }
    fn memory_info(&self) -> (u64, u64) {
        (**self).memory_info()
    }
    fn can_map(&self) -> bool {
        (**self).can_map()
    }
    fn reserve_addresses(&self, size: u64) -> Result<u64> {
        (**self).reserve_addresses(size)
    }
    fn map(&self, addr: u64, size: u64) -> Result<()> {
        (**self).map(addr, size)
    }
    fn unmap(&self, addr: u64, size: u64) -> Result<()> {
        (**self).unmap(addr, size)
    }
    fn free_addresses(&self, addr: u64, size: u64) {
        (**self).free_addresses(addr, size)
    }
    fn map_granularity(&self) -> u64 {
        (**self).map_granularity()
    }
    fn keeps_free_memory(&self) -> bool {
        (**self).keeps_free_memory()
    }
    fn synchronize(&self) -> Result<()> {
        (**self).synchronize()
    }
    fn wait_for_stream(&self, stream: u64) -> Result<bool> {
        (**self).wait_for_stream(stream)
    }
    fn host_staging(&self, bytes: u64) -> Result<HostStaging> {
        (**self).host_staging(bytes)
    }
    fn offload(&self, ranges: &[StagedRange], host: &mut HostStaging) -> Result<()> {
        (**self).offload(ranges, host)
    }
    fn restore(&self, ranges: &[StagedRange], host: &HostStaging) -> Result<()> {
        (**self).restore(ranges, host)
    }
    fn history_device(&self) -> Option<i32> {
        (**self).history_device()
    }
    fn record_all(&self, streams: &[u64]) -> Result<Vec<u64>> {
        (**self).record_all(streams)
    }
    fn settle(&self, markers: &mut Vec<u64>, wait: bool) -> bool {
        (**self).settle(markers, wait)
    }
    fn may_allocate(&self, stream: u64) -> Result<()> {
        (**self).may_allocate(stream)
    }
    fn native_stream(&self, stream: u64) -> u64 {
        (**self).native_stream(stream)
    }
    fn in_context(&self, f: &mut dyn FnMut()) -> Result<()> {
        (**self).in_context(f)
    }
}
