//! A device's snapshot: its default pool, the pools users created on it and its
//! graphs' private pools, with its memory history. The segments and the statistics
//! are read one pool after another: they agree exactly when no other thread
//! allocates meanwhile.

use super::{build, encode, gpurt_snapshot_format_t, PoolPart, Snapshot};
use crate::alloc::device::{self as alloc_device, DefaultPool, MEM_POOLS};
use crate::alloc::history::{self, Action};
use crate::error::{Error, Result, Status};

/// The snapshot of `ordinal`'s device; a "snapshot" event marks it in the history.
pub fn take(ordinal: i32) -> Result<Snapshot> {
    let default = alloc_device::default_pool(ordinal)?;
    let device = alloc_device::allocator(ordinal)?.source().device();
    let recorder = history::recorder(device);
    let recording = history::is_on();
    if recording {
        recorder.record(Action::Snapshot, 0, 0, 0, 0, 0);
    }
    let mut parts = Vec::new();
    if let DefaultPool::Caching(a) = default {
        parts.push(PoolPart { pool_id: (0, 0), allocator: a.id(), segments: a.segment_views() });
    }
    for pool in MEM_POOLS.on_device(device) {
        parts.push(PoolPart { pool_id: (1, pool.id()), allocator: pool.allocator().id(), segments: pool.allocator().segment_views() });
    }
    for (id, a) in crate::alloc::capture::private_pools(device) {
        parts.push(PoolPart { pool_id: (2, id), allocator: a.id(), segments: a.segment_views() });
    }
    let stats = alloc_device::stats(ordinal)?;
    Ok(build(device, &parts, &recorder.events(), recorder.dropped(), recording, &stats))
}

/// The snapshot of `ordinal`'s device, encoded in `format`.
pub fn bytes(ordinal: i32, format: gpurt_snapshot_format_t) -> Result<Vec<u8>> {
    encode(&take(ordinal)?, format)
}

/// Writes the snapshot of `ordinal`'s device to `path` in `format`.
pub fn write(ordinal: i32, format: gpurt_snapshot_format_t, path: &str) -> Result<()> {
    let bytes = bytes(ordinal, format)?;
    std::fs::write(path, bytes).map_err(|e| Error::new(Status::GPURT_ERROR_IO, format!("writing the snapshot to {path}: {e}")))
}
