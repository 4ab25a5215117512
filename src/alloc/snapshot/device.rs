//! A device's snapshot: its default pool, the pools users created on it and its
//! graphs' private pools, with its memory history. The segments and the statistics
//! are read one pool after another: they agree exactly when no other thread
//! allocates meanwhile.

use super::{build, encode, gpurt_snapshot_format_t, PoolPart, Snapshot};
use crate::alloc::device::{self as alloc_device, DefaultPool, MEM_POOLS};
use crate::alloc::caching::CachingAllocator;
use crate::alloc::history::{self, Action, Slot};
use crate::alloc::pool::SegmentSource;
use crate::error::{Error, Result, Status};

/// One pool's part, its history events added to `slots` and the events it
/// overwrote to `overwritten`.
fn part<S: SegmentSource>(pool_id: (i64, u64), pool: &CachingAllocator<S>, slots: &mut Vec<Slot>, overwritten: &mut u64) -> PoolPart {
    let (segments, dropped) = pool.segment_views(slots);
    *overwritten += dropped;
    PoolPart { pool_id, allocator: pool.id(), segments }
}

/// The snapshot of `ordinal`'s device; a "snapshot" event marks it in the history.
pub fn take(ordinal: i32) -> Result<Snapshot> {
    let default = alloc_device::default_pool(ordinal)?;
    let device = alloc_device::allocator(ordinal)?.source().device();
    let recorder = history::recorder(device);
    let recording = history::is_on();
    if recording {
        recorder.record(&[Action::Snapshot], 0, 0, 0, 0, 0);
    }
    let (mut parts, mut slots, mut overwritten) = (Vec::new(), Vec::new(), 0);
    if let DefaultPool::Caching(a) = default {
        parts.push(part((0, 0), a, &mut slots, &mut overwritten));
    }
    for pool in MEM_POOLS.on_device(device) {
        parts.push(part((1, pool.id()), pool.allocator(), &mut slots, &mut overwritten));
    }
    for (id, a) in crate::alloc::capture::private_pools(device) {
        parts.push(part((2, id), &a, &mut slots, &mut overwritten));
    }
    let stats = alloc_device::stats(ordinal)?;
    let (events, dropped) = recorder.events(slots, overwritten);
    Ok(build(device, &parts, &events, dropped, recording, &stats))
}

/// The snapshot of `ordinal`'s device, encoded in `format`.
pub fn bytes(ordinal: i32, format: gpurt_snapshot_format_t) -> Result<Vec<u8>> {
    encode(&take(ordinal)?, format)
}

/// Writes the snapshot of `ordinal`'s device to `path` in `format`, atomically
/// (`files::write_atomically`: a reader never sees half a snapshot, and a link planted
/// at the temporary name is not followed).
pub fn write(ordinal: i32, format: gpurt_snapshot_format_t, path: &str) -> Result<()> {
    let bytes = bytes(ordinal, format)?;
    crate::files::write_atomically(std::path::Path::new(path), &bytes, 0o644)
        .map_err(|e| Error::new(Status::GPURT_ERROR_IO, format!("writing the snapshot to {path}: {e}")))
}
