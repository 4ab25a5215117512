//! A pool's statistics: the counts a block's changes of state move (PyTorch's
//! `memory_stats`, per pool kind), and the view of them that counts parked blocks as
//! freed (a parked block stays counted as in use, so that the fast path touches no
//! counter; see `stats`).

use super::{Pool, SegmentSource};
use crate::alloc::blocks::{Block, OnSleep, State};
use crate::alloc::stats::{gpurt_memory_stats_t, PoolKind};

/// Marks a block allocated for a request of `requested` bytes and counts it.
pub(super) fn count_handed_out(stats: &mut gpurt_memory_stats_t, block: &mut Block, requested: u64) {
    block.state = State::Allocated;
    block.requested = requested;
    block.on_sleep = OnSleep::Copy;
    let (pool, size) = (block.pool, block.size as i64);
    stats.allocation.add(pool, 1);
    stats.allocated_bytes.add(pool, size);
    stats.active.add(pool, 1);
    stats.active_bytes.add(pool, size);
    stats.requested_bytes.add(pool, requested as i64);
}

/// Uncounts `blocks` allocations of `bytes` in all that leave use: freed, and not
/// active.
pub(super) fn uncount_use(stats: &mut gpurt_memory_stats_t, pool: PoolKind, blocks: i64, bytes: i64) {
    stats.allocation.sub(pool, blocks);
    stats.allocated_bytes.sub(pool, bytes);
    stats.active.sub(pool, blocks);
    stats.active_bytes.sub(pool, bytes);
}

/// Counts a block entering (`+1`) or leaving (`-1`) the free blocks of a split
/// segment: PyTorch's inactive_split statistics.
#[inline(always)]
pub(super) fn count_inactive_split(stats: &mut gpurt_memory_stats_t, b: &Block, sign: i64) {
    match (b.is_split(), sign > 0) {
        (false, _) => {}
        (true, true) => {
            stats.inactive_split.add(b.pool, 1);
            stats.inactive_split_bytes.add(b.pool, b.size as i64);
        }
        (true, false) => {
            stats.inactive_split.sub(b.pool, 1);
            stats.inactive_split_bytes.sub(b.pool, b.size as i64);
        }
    }
}

impl<S: SegmentSource> Pool<S> {
    /// The statistics, with parked blocks counted as freed and their reuses as
    /// allocations and frees (see `stats`).
    pub fn stats(&self) -> gpurt_memory_stats_t {
        let mut s = self.stats;
        for p in &self.parked {
            let pool = self.blocks[p.id].pool;
            uncount_use(&mut s, pool, 1, p.size as i64);
        }
        for (pool, (reuses, bytes)) in [PoolKind::Small, PoolKind::Large].into_iter().zip(self.parked_reuses) {
            for (array, amount) in [(&mut s.allocation, reuses), (&mut s.active, reuses), (&mut s.allocated_bytes, bytes), (&mut s.active_bytes, bytes)] {
                array.add_total(pool, amount);
            }
        }
        s
    }

    /// The allocated bytes, counting parked blocks, and the driver allocations and
    /// frees so far: what tells the allocator to fold this shard's statistics into
    /// its totals, read at every operation without settling (`stats`).
    pub fn flush_signals(&self) -> (i64, i64, i64) {
        (self.stats.allocated_bytes.all.current, self.stats.num_device_alloc, self.stats.num_device_free)
    }

    /// Peaks restart from the current values: the allocator folds each shard's peak
    /// since its last flush into the totals. Only with no block parked, as the
    /// counts parked blocks keep (see `stats`) must not enter the peaks.
    pub fn restart_peaks(&mut self) {
        debug_assert!(self.parked.is_empty(), "peaks restart with parked blocks counted");
        self.stats.reset_peak();
    }

    /// Counts device memory taken (`bytes` > 0) or given back in `calls` driver
    /// allocations or frees: a segment, or mappings of an expandable segment.
    pub(super) fn count_device_memory(&mut self, pool: PoolKind, bytes: i64, calls: usize) {
        if bytes > 0 {
            self.stats.reserved_bytes.add(pool, bytes);
            self.stats.num_device_alloc += calls as i64;
        } else {
            self.stats.reserved_bytes.sub(pool, -bytes);
            self.stats.num_device_free += calls as i64;
        }
    }
}
