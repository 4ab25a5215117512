//! The caching allocator's pool logic, generic over where segments come from
//! (`SegmentSource`): the driver on a GPU, plain address ranges in tests. It follows
//! PyTorch's caching allocator: 512-byte rounding; a small pool (≤ 1 MiB, carved
//! from 2 MiB segments) and a large pool (20 MiB segments, or a request's own
//! segment rounded to 2 MiB above 10 MiB); best fit among the requesting stream's
//! free blocks (kept in `blocks`' size-class lists); splitting and coalescing; frees
//! deferred until other streams that used a block are done; a retry after releasing
//! the cache before out-of-memory. Two choices differ: a large block's remainder is
//! split off at any size (measured to fragment less: docs/performance.md, "Caching allocator"), and
//! equal sizes go to the oldest segment rather than the lowest address, so that the
//! pool places blocks alike whatever addresses the driver returns.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::blocks::{Arena, Block, BlockId, FreeLists, OnSleep, State, MIN_BLOCK, NO_BLOCK};
use super::config::AllocConfig;
use super::history::{self, Action};
use super::stats::{gpurt_memory_stats_t, PoolKind};
use crate::error::{Error, Result};

mod accounting;
mod expandable;
mod holes;
use holes::Release;
mod invariants;
mod parking;
mod segments;
mod sleep;
mod view;
pub use sleep::{asleep_error, Sleep, SleepCopy, Staged, WakeWork};
use accounting::{count_handed_out, count_inactive_split, uncount_use};
use expandable::Expandable;
use parking::{park_max, Parked, RECENT_SIZES};
pub use segments::{HostStaging, KeepMapped, SegmentSource, Segments, StagedRange};
pub use view::{BlockState, BlockView, SegmentView};

const MIB: u64 = 1 << 20;
const SMALL_SIZE: u64 = MIB;
const SMALL_BUFFER: u64 = 2 * MIB;
const LARGE_BUFFER: u64 = 20 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;
/// A search of free lists for `size` bytes below `limit` (`FreeLists::best_fit` or
/// `quick_fit`).
type FitFn = fn(&FreeLists, &Arena, u64, u64) -> Option<BlockId>;

/// A segment: its size (for an expandable one, up to its mapped end, holes included)
/// and its first block, which no merge removes.
#[derive(Debug, Clone, Copy)]
struct Segment {
    size: u64,
    first: BlockId,
}

/// Where a live block lies: its segment, as an IPC export names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockPlace {
    pub size: u64,
    /// The segment's start (for a driver segment, what `cuMemAlloc` returned).
    pub segment: u64,
    pub segment_size: u64,
    /// In an expandable segment, the mappings (start, size) the block lies on, in
    /// address order: each one physical allocation, which an export shares whole.
    /// Empty for a segment of its own.
    pub mappings: Vec<(u64, u64)>,
}

/// A caching pool: one shard of an allocator, holding the segments it took from the
/// shared source. Not thread-safe by itself: its owner locks it.
pub struct Pool<S: SegmentSource> {
    shared: Arc<Segments<S>>,
    /// This pool's index among its allocator's shards.
    shard: u32,
    config: AllocConfig,
    blocks: Arena,
    /// Blocks handed out, waiting for other streams, or parked, by address: what a
    /// free looks up. Blocks in the free lists are reached through their lists and
    /// neighbours only, so splitting and merging them hashes nothing.
    by_addr: HashMap<u64, BlockId>,
    /// Free blocks for best fit, per (stream, pool kind); a shard rarely has more
    /// than one stream. Blocks name theirs by index (`Block::lists`); lists without
    /// segments are reused for the next stream, never removed, so an index stays valid.
    free: Vec<FreeLists>,
    /// The streams other than its own that each block listed here used
    /// (`record_stream`; `Block::used_elsewhere`).
    used_on: HashMap<BlockId, Vec<u64>>,
    /// Segment start address -> segment.
    segments: HashMap<u64, Segment>,
    /// Blocks freed by the caller, with the markers they wait for.
    pending: Vec<(BlockId, Vec<u64>)>,
    /// Parked blocks, the most recently freed last: the common alloc/free ping-pong
    /// of a few sizes on one stream costs no free-list update and no coalescing. The
    /// first request that none of them serves returns them all to the free lists, so
    /// they never keep memory from a best fit.
    parked: Vec<Parked>,
    /// How many of them are above `park_max` (parked as the newest request's size).
    parked_large: usize,
    /// The rounded sizes of the last `RECENT_SIZES` requests past the parked blocks,
    /// the newest first: a freed block of another size goes straight to the free
    /// lists, as its parking would only delay its coalescing to the next request (most
    /// frees of varied sizes).
    recent_sizes: [u64; RECENT_SIZES],
    /// The largest block parked on its free (`EXPANDABLE_PARK_MAX` with expandable
    /// segments, else any), kept with the config so the free path reads one field.
    park_max: u64,
    /// This shard's statistics (exact for its blocks, once `stats` settles them);
    /// the allocator sums shards.
    ///
    /// A parked block is still counted as allocated and active here, until it leaves
    /// the parked list: a free and a reuse of a parked block then cost no update of
    /// those four statistics (`parked_reuses` counts them for the totals). That keeps
    /// every peak exact: only reuses raise these counts while blocks are parked, and
    /// each only brings back what its block counted before, because any other request
    /// returns the parked blocks first, and so does every restart of the peaks.
    stats: gpurt_memory_stats_t,
    /// Per pool kind (`pool_index`): parked blocks reused, and their bytes.
    parked_reuses: [(i64, i64); 2],
    /// Expandable segments, one per (stream, pool index).
    expandable: HashMap<(u64, usize), Expandable>,
    /// While the pool sleeps: its unmapped memory (`expandable::Sleep`).
    asleep: Option<Sleep>,
    /// Host memory of the last offload, kept after a wake for the next sleep.
    host_copy: Option<Staged>,
    /// Segments taken so far: the next segment's number in its blocks' ranks.
    segments_taken: u64,
    /// Where this pool's events go while the memory history is on.
    history: Option<history::Tag>,
    /// This shard's part of the memory history (see `history::Ring`).
    events: history::Ring,
}

impl<S: SegmentSource> Drop for Pool<S> {
    /// The history keeps the events of a pool that goes.
    fn drop(&mut self) {
        if let Some(tag) = &self.history {
            tag.recorder.absorb(&mut self.events);
        }
    }
}

fn pool_index(pool: PoolKind) -> usize {
    pool as usize - 1
}

/// The index of the free lists of `stream`'s `pool` for a new segment: created on
/// first use, in the place of lists that no segment uses any more if there are some.
fn lists_for_segment(free: &mut Vec<FreeLists>, stream: u64, pool: PoolKind) -> u32 {
    let index = match free.iter().position(|f| f.hold(stream, pool)) {
        Some(i) => i,
        None => match free.iter().position(|f| f.segments == 0) {
            Some(i) => {
                free[i].reassign(stream, pool);
                i
            }
            None => {
                free.push(FreeLists::new(stream, pool));
                free.len() - 1
            }
        },
    };
    free[index].segments += 1;
    index as u32
}

/// The size of a new segment for a rounded request: PyTorch's 2 MiB for small
/// requests and 20 MiB, shared by later ones, for those under 10 MiB; else (and
/// with `exact_segments`) the request rounded to 2 MiB.
fn segment_size(size: u64, exact: bool) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC && !exact {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE) * ROUND_LARGE
    }
}

impl<S: SegmentSource> Pool<S> {
    pub fn new(shared: Arc<Segments<S>>, shard: u32, config: AllocConfig, history: Option<history::Tag>) -> Self {
        let park_max = park_max(&config);
        Pool {
            shared,
            shard,
            config,
            blocks: Arena::default(),
            by_addr: HashMap::default(),
            free: Vec::new(),
            used_on: HashMap::default(),
            segments: HashMap::default(),
            pending: Vec::new(),
            parked: Vec::new(),
            parked_large: 0,
            recent_sizes: [0; RECENT_SIZES],
            park_max,
            stats: gpurt_memory_stats_t::new(),
            parked_reuses: [(0, 0); 2],
            expandable: HashMap::default(),
            asleep: None,
            host_copy: None,
            segments_taken: 0,
            history,
            events: history::Ring::default(),
        }
    }

    /// Records events in this shard's ring of the memory history, if it is on: off,
    /// a load and a branch.
    #[inline(always)]
    fn note(&mut self, actions: &[Action], addr: u64, size: u64, stream: u64) {
        if history::is_on() {
            self.record_events(actions, addr, size, stream);
        }
    }

    /// `note` for block `id` (its address and stream), with `size` bytes.
    #[inline]
    fn note_block(&mut self, actions: &[Action], id: BlockId, size: u64) {
        if history::is_on() {
            self.record_block_events(actions, id, size);
        }
    }

    #[cold]
    #[inline(never)]
    fn record_block_events(&mut self, actions: &[Action], id: BlockId, size: u64) {
        let block = &self.blocks[id];
        let (addr, stream) = (block.addr, self.stream_of(block));
        self.write_events(actions, addr, size, stream);
    }

    #[cold]
    #[inline(never)]
    fn record_events(&mut self, actions: &[Action], addr: u64, size: u64, stream: u64) {
        self.write_events(actions, addr, size, stream);
    }

    /// The body of both `record_*`, inlined into each so that an event costs one
    /// call (a chain of out-of-line calls cost ~20 instructions each).
    #[inline(always)]
    fn write_events(&mut self, actions: &[Action], addr: u64, size: u64, stream: u64) {
        if let Some(tag) = &self.history {
            self.events.record(actions, addr, size, stream, tag.allocator, 0);
        }
    }

    /// This shard's history events, oldest first, into `out`; the events it
    /// overwrote for room.
    pub fn history_events(&self, out: &mut Vec<history::Slot>) -> u64 {
        self.events.collect(out)
    }

    pub fn set_config(&mut self, config: AllocConfig) {
        // Blocks parked under the old `park_max` go back first: `parked_large` counts
        // those above the current one.
        self.flush_parked();
        self.park_max = park_max(&config);
        self.config = config;
    }

    /// Free blocks in the free lists (parked blocks count as allocated until flushed).
    pub fn free_block_count(&self) -> u64 {
        self.free.iter().map(|lists| lists.entries(&self.blocks).len() as u64).sum()
    }

    /// Whether this pool holds the segment (or expandable segment) starting at `start`.
    pub fn owns_segment(&self, start: u64) -> bool {
        self.segments.contains_key(&start)
    }

    // ---- the free lists, with inactive-split accounting kept next to them ----

    fn insert_free(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        count_inactive_split(&mut self.stats, b, 1);
        self.free[b.lists as usize].insert(&mut self.blocks, id);
    }

    fn remove_free(&mut self, id: BlockId) {
        let b = &self.blocks[id];
        debug_assert_eq!(b.state, State::Free, "block {:#x} is not free", b.addr);
        count_inactive_split(&mut self.stats, b, -1);
        self.free[b.lists as usize].remove(&mut self.blocks, id);
    }

    /// The stream a block belongs to.
    fn stream_of(&self, b: &Block) -> u64 {
        self.free[b.lists as usize].stream()
    }

    /// The allocated block at `addr`; `None` when no block starts there.
    #[inline(always)]
    fn allocated_block(&self, addr: u64) -> Option<Result<BlockId>> {
        let id = *self.by_addr.get(&addr)?;
        Some(match self.blocks[id].state {
            State::Allocated => Ok(id),
            _ => Err(Error::invalid_argument(format!("{addr:#x} was already freed"))),
        })
    }

    /// Best fit among `stream`'s free blocks of `pool`, with PyTorch's rules for
    /// oversize blocks (never split for a smaller request; not used when far larger).
    /// In an expandable segment, a free block counts as large as it could grow in place
    /// (`growable_size`: over a hole after it, or the segment's unmapped end), as
    /// PyTorch's expandable segments count it: the next fit in (size, rank) order is
    /// taken while it could grow to less, so that a request that fits elsewhere leaves
    /// such a block for a larger one. The look past the best fit is bounded (missing a
    /// block there only means taking the one in hand).
    fn find_free(&mut self, pool: PoolKind, stream: u64, size: u64) -> Option<BlockId> {
        let mut id = self.fit_free(pool, stream, size, FreeLists::best_fit)?;
        // Blocks passed over leave the lists while the next fit is sought; a segment has
        // one end and few holes, so a walk is short (and bounded here).
        let (mut passed, mut count) = ([NO_BLOCK; 8], 0);
        while count < passed.len() {
            let growable = self.growable_size(id);
            if growable == self.blocks[id].size {
                break;
            }
            let lists = self.blocks[id].lists as usize;
            self.free[lists].remove(&mut self.blocks, id);
            (passed[count], count) = (id, count + 1);
            match self.fit_free(pool, stream, size, FreeLists::quick_fit) {
                Some(next) if self.growable_size(next) < growable => id = next,
                _ => break,
            }
        }
        for &passed in &passed[..count] {
            let lists = self.blocks[passed].lists as usize;
            self.free[lists].insert(&mut self.blocks, passed);
        }
        Some(id)
    }

    /// What free block `id` could serve by growing in place: its size, and the hole
    /// after it or, at its expandable segment's mapped end, the unmapped rest.
    fn growable_size(&self, id: BlockId) -> u64 {
        let b = &self.blocks[id];
        b.size
            + match b.next {
                NO_BLOCK if !self.expandable.is_empty() => self
                    .expandable
                    .get(&(self.stream_of(b), pool_index(b.pool)))
                    .filter(|e| e.tail == id)
                    .map_or(0, |e| e.base + e.reserved - (b.addr + b.size)),
                NO_BLOCK => 0,
                next if self.blocks[next].state == State::Unmapped => self.blocks[next].size,
                _ => 0,
            }
    }

    fn fit_free(&self, pool: PoolKind, stream: u64, size: u64, fit: FitFn) -> Option<BlockId> {
        let max_split = self.config.max_split_size;
        let limit = if size < max_split { max_split } else { size.saturating_add(LARGE_BUFFER) };
        let lists = self.free.iter().find(|f| f.hold(stream, pool))?;
        fit(lists, &self.blocks, size, limit)
    }

    /// Whether to split off the rest of a block: at any remainder for a request under
    /// `max_split_size` (every small one: the key takes no size under 21 MiB), never
    /// for an oversize one, nor with `no_split` (`max_split_size` 0). (PyTorch keeps
    /// large remainders of up to 1 MiB unsplit; splitting them too lets them coalesce
    /// back, and measured less fragmentation: see docs/performance.md.)
    fn should_split(&self, block_size: u64, size: u64) -> bool {
        block_size - size >= MIN_BLOCK && size < self.config.max_split_size
    }

    /// Completes deferred frees whose markers are done; with `wait`, waits for all.
    fn process_pending(&mut self, wait: bool) {
        let settled = self.pending.len();
        let mut i = 0;
        while i < self.pending.len() {
            if self.shared.source.settle(&mut self.pending[i].1, wait) {
                let (id, _) = self.pending.swap_remove(i);
                self.note_block(&[Action::FreeCompleted], id, self.blocks[id].size);
                let block = &self.blocks[id];
                self.stats.active.sub(block.pool, 1);
                self.stats.active_bytes.sub(block.pool, block.size as i64);
                self.coalesce_into_free(id);
            } else {
                i += 1;
            }
        }
        // A block that became free may lie beside a parked one (`parking`).
        if self.pending.len() < settled && self.config.expandable_segments {
            self.flush_parked();
        }
    }

    /// Allocates `size` bytes for use on `stream`. Size 0 gives address 0. `None`:
    /// no cached block fits and reserved memory is past the garbage-collection
    /// threshold; the caller collects idle segments (of every shard), then calls again
    /// with `collected`.
    #[inline(always)]
    pub fn malloc(&mut self, size: u64, stream: u64, collected: bool) -> Result<Option<u64>> {
        if size == 0 {
            return Ok(Some(0));
        }
        if self.asleep.is_some() {
            return Err(sleep::asleep_error());
        }
        if !self.pending.is_empty() {
            self.process_pending(false);
        }
        let rounded = self.config.round_size(size);
        if let Some(addr) = self.unpark(stream, rounded, size) {
            self.note(&[Action::Alloc], addr, size, stream);
            return Ok(Some(addr));
        }
        self.malloc_from_free_lists(size, rounded, stream, collected)
    }

    /// `malloc` past the parked blocks: best fit, else a new segment.
    #[inline(never)]
    fn malloc_from_free_lists(&mut self, size: u64, rounded: u64, stream: u64, collected: bool) -> Result<Option<u64>> {
        // Small requests apart, as PyTorch keeps them, with expandable segments too (one
        // arena a stream for all sizes: 80 of 100 scenarios at or below PyTorch's peak,
        // max +2.8 %, against 100; a GPT-2 sampling loop's fragmentation 1.058 against
        // 1.127).
        let pool = if rounded <= SMALL_SIZE { PoolKind::Small } else { PoolKind::Large };
        self.flush_parked();
        let id = match self.find_free(pool, stream, rounded) {
            Some(id) => id,
            None if !collected && self.past_collection_threshold(rounded) => return Ok(None),
            None => self.new_segment(pool, stream, rounded)?,
        };
        // Served: remembered once, though a request may come here again after a
        // collection or the out-of-memory release.
        self.remember_request(rounded);
        self.remove_free(id);
        let Block { addr, size: block_size, .. } = self.blocks[id];
        if self.should_split(block_size, rounded) {
            let rest = self.split_block(id, rounded);
            self.insert_free(rest);
        }
        count_handed_out(&mut self.stats, &mut self.blocks[id], size);
        self.by_addr.insert(addr, id);
        self.note(&[Action::Alloc], addr, size, stream);
        Ok(Some(addr))
    }

    /// garbage_collection_threshold: whether a new segment for `rounded` bytes would
    /// take reserved memory past that share of the memory fraction's cap.
    fn past_collection_threshold(&self, rounded: u64) -> bool {
        let threshold = self.config.garbage_collection_threshold;
        let limit = self.shared.limit();
        threshold > 0.0
            && limit != u64::MAX
            && (self.shared.reserved() + segment_size(rounded, self.config.exact_segments)) as f64 > threshold * limit as f64
    }

    /// A new segment holding one free block. Out of memory is the caller's to handle
    /// (the allocator releases every shard's cache and retries).
    fn new_segment(&mut self, pool: PoolKind, stream: u64, rounded: u64) -> Result<BlockId> {
        if self.config.expandable_segments {
            return self.grow_expandable(pool, stream, rounded);
        }
        let size = segment_size(rounded, self.config.exact_segments);
        let addr = self.shared.take(size, stream, self.shard)?;
        self.note(&[Action::SegmentAlloc], addr, size, stream);
        Ok(self.add_segment(pool, stream, addr, size, 1))
    }

    /// Counts a new segment of `size` bytes at `addr` (`mappings` driver allocations),
    /// holding one free block.
    fn add_segment(&mut self, pool: PoolKind, stream: u64, addr: u64, size: u64, mappings: usize) -> BlockId {
        let rank = self.segments_taken << 40; // segments stay below 1 TiB
        self.segments_taken += 1;
        let lists = lists_for_segment(&mut self.free, stream, pool);
        let id = self.blocks.insert(Block::free(addr, size, rank, lists, pool, NO_BLOCK, NO_BLOCK));
        self.segments.insert(addr, Segment { size, first: id });
        self.stats.segment.add(pool, 1);
        self.count_device_memory(pool, size as i64, mappings);
        self.insert_free(id);
        id
    }

    /// Declares that the block at `addr` is also used on `stream` (PyTorch's
    /// `record_stream`): its free will wait for the work queued there. `None`: `addr`
    /// is not a block of this pool.
    pub fn record_stream(&mut self, addr: u64, stream: u64) -> Option<Result<()>> {
        Some(self.allocated_block(addr)?.map(|id| {
            if stream == self.stream_of(&self.blocks[id]) {
                return;
            }
            self.blocks[id].used_elsewhere = true;
            let streams = self.used_on.entry(id).or_default();
            if !streams.contains(&stream) {
                streams.push(stream);
            }
        }))
    }

    /// Marks whether an offloading sleep drops the contents of the live block at
    /// `addr` (`true`: a cache its owner rebuilds) or copies them (`false`, as every
    /// allocation starts). `None`: `addr` is not a block of this pool.
    pub fn set_discard_on_sleep(&mut self, addr: u64, discard: bool) -> Option<Result<()>> {
        self.mark_on_sleep(addr, |now| match (now, discard) {
            (_, true) => OnSleep::Discard,
            (OnSleep::Discard, false) => OnSleep::Copy,
            (kept, false) => kept,
        })
    }

    /// Marks whether its owner promises not to change the live block at `addr` (`true`),
    /// so that an offload may keep an earlier offload's copy of it, or takes the
    /// promise back (`false`: copied by every offload again). A repeated promise keeps
    /// the copy; a new one needs an offload to copy it first. `None`: `addr` is not a
    /// block of this pool.
    pub fn set_read_only(&mut self, addr: u64, read_only: bool) -> Option<Result<()>> {
        self.mark_on_sleep(addr, |now| match (now, read_only) {
            (OnSleep::ReadOnly { kept }, true) => OnSleep::ReadOnly { kept },
            (_, true) => OnSleep::ReadOnly { kept: false },
            (OnSleep::ReadOnly { .. }, false) => OnSleep::Copy,
            (other, false) => other,
        })
    }

    fn mark_on_sleep(&mut self, addr: u64, mark: impl FnOnce(OnSleep) -> OnSleep) -> Option<Result<()>> {
        Some(self.allocated_block(addr)?.map(|id| self.blocks[id].on_sleep = mark(self.blocks[id].on_sleep)))
    }

    /// Where the live block at `addr` lies. `None`: `addr` is not a block of this pool.
    pub fn place(&self, addr: u64) -> Option<Result<BlockPlace>> {
        Some(self.allocated_block(addr)?.map(|id| {
            let mut first = id;
            while self.blocks[first].prev != NO_BLOCK {
                first = self.blocks[first].prev;
            }
            let (segment, addr, size) = (self.blocks[first].addr, self.blocks[id].addr, self.blocks[id].size);
            let segment_size = self.segments[&segment].size;
            let mappings = self.expandable.values().find(|e| e.base == segment).map_or_else(Vec::new, |e| {
                e.maps.iter().filter(|&&(start, len)| start < addr + size && addr < start + len).copied().collect()
            });
            BlockPlace { size, segment, segment_size, mappings }
        }))
    }

    /// Frees the block at `addr`. It is reusable at once on its own stream; if other
    /// streams used it, only once their work queued so far is done. `None`: `addr` is
    /// not a block of this pool.
    #[inline(always)]
    pub fn free(&mut self, addr: u64) -> Option<Result<()>> {
        let id = match self.allocated_block(addr)? {
            Ok(id) => id,
            Err(e) => return Some(Err(e)),
        };
        let block = &self.blocks[id];
        if block.used_elsewhere {
            return Some(self.free_after_other_streams(id));
        }
        let (pool, size, requested) = (block.pool, block.size, block.requested);
        self.note_block(&[Action::FreeRequested, Action::FreeCompleted], id, requested);
        if self.parked_large > 0 {
            self.flush_parked_large();
        }
        if self.parks(id, size) {
            self.park(id);
        } else {
            if !self.parked.is_empty() && self.beside_parked(id) {
                self.flush_parked();
            }
            uncount_use(&mut self.stats, pool, 1, size as i64);
            self.stats.requested_bytes.sub(pool, requested as i64);
            self.coalesce_into_free(id);
        }
        Some(Ok(()))
    }

    /// Whether `id` names a neighbour that is Free (`NO_BLOCK`: none).
    #[inline(always)]
    fn is_free(&self, id: BlockId) -> bool {
        id != NO_BLOCK && self.blocks[id].state == State::Free
    }

    /// A free of a block that other streams used: it waits for markers recorded
    /// there. On failure the block stays allocated and intact, so that the caller may
    /// retry.
    fn free_after_other_streams(&mut self, id: BlockId) -> Result<()> {
        let markers = self.shared.source.record_all(&self.used_on[&id])?;
        self.used_on.remove(&id);
        self.note_block(&[Action::FreeRequested], id, self.blocks[id].requested);
        let block = &mut self.blocks[id];
        block.used_elsewhere = false;
        block.state = State::PendingFree;
        let (pool, size, requested) = (block.pool, block.size as i64, block.requested as i64);
        block.requested = 0;
        self.stats.allocation.sub(pool, 1);
        self.stats.allocated_bytes.sub(pool, size);
        self.stats.requested_bytes.sub(pool, requested);
        self.pending.push((id, markers));
        Ok(())
    }

    /// Moves a block that left use into the free lists, merged with free neighbours;
    /// the merged block is returned.
    fn coalesce_into_free(&mut self, id: BlockId) -> BlockId {
        let block = &mut self.blocks[id];
        block.state = State::Free;
        let (addr, prev, next) = (block.addr, block.prev, block.next);
        self.by_addr.remove(&addr);
        let mut start = id;
        if self.is_free(prev) {
            self.remove_free(prev);
            self.absorb_right(prev, id);
            start = prev;
        }
        // `start` now ends where `id` ended: its right neighbour is `next`.
        if self.is_free(next) {
            self.remove_free(next);
            self.absorb_right(start, next);
        }
        self.insert_free(start);
        start
    }

    /// Splits block `id` (in no free list) at `offset`: the second part, in the same
    /// state, is returned.
    #[inline(always)]
    fn split_block(&mut self, id: BlockId, offset: u64) -> BlockId {
        let Block { addr, size, rank, lists, pool, next, state, .. } = self.blocks[id];
        let right = self.blocks.insert(Block::free(addr + offset, size - offset, rank + offset, lists, pool, id, next));
        self.blocks[right].state = state;
        self.blocks[id].size = offset;
        self.blocks[id].next = right;
        match next {
            NO_BLOCK => self.note_tail(right),
            next => self.blocks[next].prev = right,
        }
        right
    }

    /// Merges the block `right` into its left neighbour `left`.
    fn absorb_right(&mut self, left: BlockId, right: BlockId) {
        let Block { size, next, .. } = self.blocks[right];
        self.blocks.remove(right);
        let l = &mut self.blocks[left];
        l.size += size;
        l.next = next;
        match next {
            NO_BLOCK => self.note_tail(left),
            next => self.blocks[next].prev = left,
        }
    }

    /// Releases every cached segment that is wholly free (waiting for deferred
    /// frees first), as `torch.cuda.empty_cache`, and the host copy kept for a sleep.
    pub fn empty_cache(&mut self) {
        self.take_host_copy();
        self.empty_device_cache();
    }

    /// `empty_cache`'s device memory only, the host copy kept: what a request for
    /// device memory (an out-of-memory retry, a share group's) releases. The next sleep
    /// then copies at once, where making pinned memory costs ~70 ms a GiB.
    pub fn empty_device_cache(&mut self) {
        self.process_pending(true);
        self.release_free_segments();
    }

    /// Releases the wholly free segments, without waiting for deferred frees (garbage
    /// collection).
    pub fn release_free_segments(&mut self) {
        self.release_free_memory(Release::AfterWaiting);
    }

    /// `release_free_segments`, the expandable segments' free memory unmapped as `how`
    /// says (a sleep, which waited for the device, need not wait again).
    fn release_free_memory(&mut self, how: Release) {
        self.flush_parked();
        // Asleep, its memory went back when it fell asleep (what is free now is
        // unmapped); a graph pool's free memory is its graphs', as is that of a pool
        // graphs were captured into in stream order.
        if self.asleep.is_some() || self.shared.keeps_free_memory() {
            return;
        }
        self.release_expandable_free_ranges(how);
        let expandable: Vec<u64> = self.expandable.values().map(|e| e.base).collect();
        let whole: Vec<(u64, BlockId)> = self
            .segments
            .iter()
            .filter(|(start, seg)| {
                let b = &self.blocks[seg.first];
                b.state == State::Free && b.next == NO_BLOCK && !expandable.contains(start)
            })
            .map(|(&start, seg)| (start, seg.first))
            .collect();
        let mut released = Vec::with_capacity(whole.len());
        for (start, id) in whole {
            let Block { size, pool, .. } = self.blocks[id];
            // The segment's one block starts at the segment.
            self.note_block(&[Action::SegmentFree], id, size);
            self.remove_free(id);
            self.forget_segment(start, id);
            released.push((start, size));
            self.count_device_memory(pool, -(size as i64), 1);
        }
        self.shared.give_back(&released);
    }

    /// Forgets a released segment and its one block, `id`, which is in no free list.
    fn forget_segment(&mut self, start: u64, id: BlockId) {
        let Block { pool, lists, .. } = self.blocks[id];
        self.blocks.remove(id);
        self.segments.remove(&start);
        // Lists without segments go to the next new stream: streams come and go.
        self.free[lists as usize].segments -= 1;
        self.stats.segment.sub(pool, 1);
    }
}
