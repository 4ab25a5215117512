//! Parking: a freed block kept uncoalesced, still counted as in use, for the next
//! request of its exact size on its stream. The common alloc/free ping-pong of a few
//! sizes then costs no free-list update and no coalescing; the first request that no
//! parked block serves returns them all to the free lists (`flush_parked`), so they
//! never keep memory from a best fit.
//!
//! With expandable segments, parking places nothing differently from freeing and best
//! fit: a block is parked only where its neighbours hold still (`parks_in_place`), the
//! parked blocks go back when a neighbour of one is freed, and one is handed out only
//! where best fit would have chosen it (`unpark_is_best_fit`). Placing every block as
//! PyTorch's expandable segments do is what keeps gpurt's peak at or below theirs on
//! workloads nobody tuned for (`expandable`); a parking that moved blocks (a large one
//! reused in place while its neighbours were freed) cost up to +4.9 %.

use super::{count_inactive_split, pool_index, uncount_use, Pool, SegmentSource, MIB, SMALL_SIZE};
use crate::alloc::blocks::{Block, BlockId, OnSleep, State, NO_BLOCK};
use crate::alloc::config::AllocConfig;

/// Freed blocks kept parked for a request of their exact size, at most.
const MAX_PARKED: usize = 64;
/// With expandable segments, a freed block above this size is parked only as the newest
/// request's size (`Pool::parks`), and goes back to the free lists at the next free of
/// any other block (`flush_parked_large`); none above `EXPANDABLE_PARK_NEWEST_MAX` is
/// parked. Where blocks are placed does not depend on these bounds (a parked block is
/// handed out only where best fit would place it): they keep the parked list, which
/// every miss flushes and every check walks, to the sizes whose reuse a kernel can
/// notice (a warm pair of 64 MiB blocks stays on the parked path). Without expandable
/// segments every size is parked.
const EXPANDABLE_PARK_MAX: u64 = 8 * MIB;
const EXPANDABLE_PARK_NEWEST_MAX: u64 = 64 * MIB;
/// Sizes of the last requests that no parked block served, remembered to tell which
/// freed blocks to park: a block of one of these sizes is likely asked for again.
pub(super) const RECENT_SIZES: usize = 4;

/// A freed block parked uncoalesced for the next request of its exact size on its
/// stream. Its size, stream and rank are copied from the block, so that the search
/// for a match reads this one small array and not the arena.
#[derive(Debug, Clone, Copy)]
pub(super) struct Parked {
    pub(super) stream: u64,
    pub(super) size: u64,
    pub(super) rank: u64,
    pub(super) id: BlockId,
}

/// The largest block parked on its free: `EXPANDABLE_PARK_MAX` with expandable
/// segments, else any.
pub(super) fn park_max(config: &AllocConfig) -> u64 {
    if config.expandable_segments {
        EXPANDABLE_PARK_MAX
    } else {
        u64::MAX
    }
}

impl<S: SegmentSource> Pool<S> {
    /// Hands out a parked block of exactly `size` for `stream`, if there is one: the
    /// fast path, which hashes nothing.
    #[inline(always)]
    pub(super) fn unpark(&mut self, stream: u64, size: u64, requested: u64) -> Option<u64> {
        let i = if self.config.expandable_segments {
            self.parked_best_fit(stream, size)?
        } else {
            self.parked.iter().rposition(|p| p.size == size && p.stream == stream)?
        };
        // Usually the last one: `pop` spares `remove`'s copy call.
        let id = if i + 1 == self.parked.len() { self.parked.pop() } else { Some(self.parked.remove(i)) }?.id;
        self.parked_large -= (size > self.park_max) as usize;
        let block = &mut self.blocks[id];
        count_inactive_split(&mut self.stats, block, -1);
        // Still counted as allocated and active (see `stats`): only the request is new.
        block.state = State::Allocated;
        block.requested = requested;
        block.on_sleep = OnSleep::Copy;
        self.stats.requested_bytes.add(block.pool, requested as i64);
        let reuses = &mut self.parked_reuses[pool_index(block.pool)];
        *reuses = (reuses.0 + 1, reuses.1 + block.size as i64);
        Some(block.addr)
    }

    /// With expandable segments, the parked block of exactly `size` on `stream` that
    /// best fit would have chosen had every parked block been freed and merged: the
    /// lowest-ranked one, if it starts its run of parked blocks and best fit takes the
    /// free block that run would be (`unpark_is_best_fit`).
    fn parked_best_fit(&self, stream: u64, size: u64) -> Option<usize> {
        let small = size <= SMALL_SIZE;
        let (mut best, mut parked_here) = (None::<(u64, usize)>, 0);
        for (i, p) in self.parked.iter().enumerate() {
            if p.stream != stream || (p.size <= SMALL_SIZE) != small {
                continue;
            }
            parked_here += 1;
            if p.size == size && best.map_or(true, |(rank, _)| p.rank < rank) {
                best = Some((p.rank, i));
            }
        }
        let (_, i) = best?;
        self.unpark_is_best_fit(self.parked[i].id, size, parked_here).then_some(i)
    }

    /// Whether best fit, had the parked blocks been freed, would take parked block `id`
    /// for a request of its exact `size`: freed, it would start a free block (it and
    /// the parked blocks after it, then a free block after those if there is one). One
    /// that can grow, or takes in a free block, only where no other free block, and no
    /// parked block outside it (`parked_here` counts them all), could serve; else where
    /// no free block fits better (smaller, or as large and lower), and none parked
    /// elsewhere could merge into one (unless `id` is that free block alone).
    fn unpark_is_best_fit(&self, id: BlockId, size: u64, parked_here: usize) -> bool {
        let block = &self.blocks[id];
        if block.prev != NO_BLOCK && matches!(self.blocks[block.prev].state, State::Parked | State::Free) {
            return false; // not the start of the free block it would be part of
        }
        let (mut last, mut in_run, mut merged) = (id, 1, block.size);
        while self.blocks[last].next != NO_BLOCK && self.blocks[self.blocks[last].next].state == State::Parked {
            last = self.blocks[last].next;
            (in_run, merged) = (in_run + 1, merged + self.blocks[last].size);
        }
        let lists = &self.free[block.lists as usize];
        let trailing_free = self.is_free(self.blocks[last].next);
        if trailing_free || self.growable_size(last) > self.blocks[last].size {
            return parked_here == in_run && lists.len() == trailing_free as usize;
        }
        let better = lists.best_fit(&self.blocks, size, merged + 1).is_some_and(|other| {
            let other = &self.blocks[other];
            other.size < merged || other.rank < block.rank
        });
        (in_run == 1 || parked_here == in_run) && !better
    }

    /// With expandable segments, whether block `id` may be parked: freed, it would
    /// merge only with parked blocks and, after it, a free one, so that it starts the
    /// free block it would be part of or lies in a run of parked blocks.
    fn parks_in_place(&self, id: BlockId) -> bool {
        let Block { prev, next, .. } = self.blocks[id];
        let still = |b: BlockId, free_too: bool| {
            b == NO_BLOCK
                || match self.blocks[b].state {
                    State::Allocated | State::Unmapped | State::Parked => true,
                    State::Free => free_too,
                    State::PendingFree | State::Vacant => false,
                }
        };
        still(prev, false) && still(next, true)
    }

    /// Whether a neighbour of block `id` is parked: freeing `id` without parking it
    /// would merge with it, so parked blocks go back to the free lists first (with
    /// expandable segments).
    #[inline(always)]
    pub(super) fn beside_parked(&self, id: BlockId) -> bool {
        let Block { prev, next, .. } = self.blocks[id];
        self.config.expandable_segments
            && [prev, next].into_iter().any(|b| b != NO_BLOCK && self.blocks[b].state == State::Parked)
    }

    /// Returns every parked block to the free lists, coalesced, and uncounts its use
    /// (see `stats`).
    pub fn flush_parked(&mut self) {
        while let Some(parked) = self.parked.pop() {
            self.release_parked(parked);
        }
        self.parked_large = 0;
    }

    /// Returns the blocks parked above `park_max` to the free lists: another block is
    /// freed, so the warm pair they were kept for is over, and its neighbours may merge
    /// with them.
    #[cold]
    pub(super) fn flush_parked_large(&mut self) {
        for i in (0..self.parked.len()).rev() {
            if self.parked[i].size > self.park_max {
                let parked = self.parked.remove(i);
                self.release_parked(parked);
            }
        }
        self.parked_large = 0;
    }

    fn release_parked(&mut self, Parked { id, size, .. }: Parked) {
        let block = &self.blocks[id];
        uncount_use(&mut self.stats, block.pool, 1, size as i64);
        count_inactive_split(&mut self.stats, block, -1);
        self.coalesce_into_free(id);
    }

    /// Whether a freed block of `size` is parked: one of a size asked for lately; with
    /// expandable segments, one above `park_max` only if it is no larger than
    /// `EXPANDABLE_PARK_NEWEST_MAX` and its size is the newest request's (kept until
    /// another block is freed), and only where its neighbours hold still
    /// (`parks_in_place`). That keeps a warm pair of large blocks on the parked path
    /// (64 MiB: 62.2 -> 29.8 ns on the host source).
    #[inline(always)]
    pub(super) fn parks(&self, id: BlockId, size: u64) -> bool {
        let recent = if size <= self.park_max {
            self.recent_sizes.contains(&size)
        } else {
            size <= EXPANDABLE_PARK_NEWEST_MAX && size == self.recent_sizes[0]
        };
        recent && (!self.config.expandable_segments || self.parks_in_place(id))
    }

    /// Parks a freed block, still counted as allocated and active (see `stats`);
    /// past `MAX_PARKED`, the others are returned to the free lists first.
    #[inline(always)]
    pub(super) fn park(&mut self, id: BlockId) {
        if self.parked.len() == MAX_PARKED {
            self.flush_parked();
        }
        let stream = self.stream_of(&self.blocks[id]);
        let block = &mut self.blocks[id];
        let rank = block.rank;
        block.state = State::Parked;
        let (pool, size, requested) = (block.pool, block.size, block.requested);
        block.requested = 0;
        self.stats.requested_bytes.sub(pool, requested as i64);
        count_inactive_split(&mut self.stats, block, 1);
        self.parked.push(Parked { stream, size, rank, id });
        self.parked_large += (size > self.park_max) as usize;
    }

    /// Remembers a request's rounded size among the last `RECENT_SIZES` that no parked
    /// block served (what `parks` asks), the newest first: `parks` then reads it
    /// without index arithmetic on the free of every large block.
    #[inline(always)]
    pub(super) fn remember_request(&mut self, rounded: u64) {
        self.recent_sizes.copy_within(..RECENT_SIZES - 1, 1);
        self.recent_sizes[0] = rounded;
    }
}
