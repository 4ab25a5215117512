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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::blocks::{Arena, Block, BlockId, FreeLists, State, MIN_BLOCK, NO_BLOCK};
use super::config::AllocConfig;
use super::history::{self, Action};
use super::owners::{SegmentOwner, SegmentOwners};
use super::stats::{gpurt_memory_stats_t, PoolKind};
use crate::error::{Error, Result, Status};

mod view;
pub use view::{BlockState, BlockView, SegmentView};

const MIB: u64 = 1 << 20;
const SMALL_SIZE: u64 = MIB;
const SMALL_BUFFER: u64 = 2 * MIB;
const LARGE_BUFFER: u64 = 20 * MIB;
const MIN_LARGE_ALLOC: u64 = 10 * MIB;
const ROUND_LARGE: u64 = 2 * MIB;
/// An expandable segment grows by at least a step: while it is cold, an eighth of what
/// it has mapped up to `EXPANDABLE_SMALL_STEP_MAX`, past that a sixteenth of it up to
/// `EXPANDABLE_STEP_MAX`, and never less than `EXPANDABLE_STEP_MIN`; once quiet, less
/// (`EXPANDABLE_QUIET_ALLOCATIONS`). Each step is
/// one driver mapping, 33-70 us on the H100 at any size up to 128 MiB and
/// serialised across threads (docs/performance.md), so the steps are what growth
/// from cold costs; their shares and bounds are what the last one overshoots.
const EXPANDABLE_STEP_MIN: u64 = 8 * MIB;
const EXPANDABLE_SMALL_STEP_MAX: u64 = 32 * MIB;
const EXPANDABLE_STEP_MAX: u64 = 128 * MIB;
/// A segment that grows after this many allocations since its last step is past its
/// cold start: a step there is rare, so it costs little time and is sized for memory,
/// a thirty-second of what is mapped within these bounds (on the recorded traces, a
/// GPT-2 sampling loop's fragmentation 1.069 -> 1.043, the same steps everywhere).
const EXPANDABLE_QUIET_ALLOCATIONS: i64 = 1000;
const EXPANDABLE_QUIET_STEP_MIN: u64 = 2 * MIB;
const EXPANDABLE_QUIET_STEP_MAX: u64 = 16 * MIB;
/// A search of free lists for `size` bytes below `limit` (`FreeLists::best_fit` or
/// `quick_fit`).
type FitFn = fn(&FreeLists, &Arena, u64, u64) -> Option<BlockId>;
/// Freed blocks kept parked for a request of their exact size, at most.
const MAX_PARKED: usize = 64;
/// With expandable segments, a freed block above this size is merged at once, not
/// parked: a parked large block kept its place for a request of its exact size, and
/// the requests around it were placed as if it were taken. On the recorded traces,
/// ResNet-50 training's fragmentation 1.063 -> 1.040 and a transformer encoder's
/// 1.052 -> 1.048, the five others' unchanged, the same steps everywhere (4 MiB:
/// 1.044 on ResNet-50; 16 MiB: 1.063). Without expandable segments every such block
/// is parked: that mode keeps the fastest reuse of large blocks.
const EXPANDABLE_PARK_MAX: u64 = 8 * MIB;
/// Sizes of the last requests that no parked block served, remembered to tell which
/// freed blocks to park: a block of one of these sizes is likely asked for again.
const RECENT_SIZES: usize = 4;

/// Where segments come from, and the stream-ordering markers deferred frees wait on.
/// Shared by every shard of an allocator, so it synchronises itself.
pub trait SegmentSource: Send + Sync {
    /// A new segment of `size` bytes (its address) for use on `stream`, or an
    /// out-of-memory error. A source may refuse while `stream` is being captured.
    fn allocate(&self, size: u64, stream: u64) -> Result<u64>;
    /// Returns a segment to its source.
    fn release(&self, addr: u64, size: u64);
    /// A marker after the work queued on `stream` so far.
    fn record(&self, stream: u64) -> Result<u64>;
    /// Whether a marker's work is done; a done marker is forgotten by the source.
    fn is_done(&self, marker: u64) -> bool;
    /// Blocks until a marker's work is done, then forgets it.
    fn wait(&self, marker: u64);
    /// (free, total) memory as the source reports it, for out-of-memory messages.
    fn memory_info(&self) -> (u64, u64);
    /// Whether a segment may be taken for `stream` now (a source may refuse while
    /// `stream` is being captured).
    fn may_allocate(&self, _stream: u64) -> Result<()> {
        Ok(())
    }
    /// The native stream behind a stream key, for sources that pass it on.
    fn native_stream(&self, stream: u64) -> u64 {
        stream
    }
    /// Runs `f` with the source's device current, for sources that call out.
    fn in_context(&self, f: &mut dyn FnMut()) -> Result<()> {
        f();
        Ok(())
    }

    // Expandable segments (`expandable_segments:True`): address ranges reserved once
    // and backed with memory as they grow, so that a stream's blocks stay contiguous.

    /// Reserves `size` bytes of addresses, backed by nothing yet.
    fn reserve_addresses(&self, _size: u64) -> Result<u64> {
        Err(Error::not_supported("this memory source has no expandable segments"))
    }
    /// Backs `[addr, addr + size)`, inside a reservation, with memory.
    fn map(&self, _addr: u64, _size: u64) -> Result<()> {
        Err(Error::not_supported("this memory source has no expandable segments"))
    }
    /// Returns the memory behind `[addr, addr + size)`; the addresses stay reserved.
    fn unmap(&self, _addr: u64, _size: u64) {}
    /// Returns a reservation, wholly unmapped.
    fn free_addresses(&self, _addr: u64, _size: u64) {}
    /// The unit of `map` and `unmap`.
    fn map_granularity(&self) -> u64 {
        2 * MIB
    }
    /// The device whose memory this source gives, for the memory history; `None`
    /// (host memory) keeps its pools out of it.
    fn history_device(&self) -> Option<i32> {
        None
    }

    /// A marker on each of `streams`. On failure, the markers already recorded are
    /// waited for and forgotten, so that the caller can leave its block as it was.
    fn record_all(&self, streams: &[u64]) -> Result<Vec<u64>> {
        let mut markers = Vec::with_capacity(streams.len());
        for &stream in streams {
            match self.record(stream) {
                Ok(m) => markers.push(m),
                Err(e) => {
                    markers.into_iter().for_each(|m| self.wait(m));
                    return Err(e);
                }
            }
        }
        Ok(markers)
    }

    /// Forgets the markers whose work is done (with `wait`, waits for all first);
    /// whether none remain.
    fn settle(&self, markers: &mut Vec<u64>, wait: bool) -> bool {
        if wait {
            markers.drain(..).for_each(|m| self.wait(m));
        } else {
            markers.retain(|m| !self.is_done(*m));
        }
        markers.is_empty()
    }
}

/// What the pools (shards) of one allocator share: the source, the cap on the bytes
/// they reserve together, and which shard owns each segment (for pointer-only frees).
///
/// Every free on every thread reads it, so it is aligned to keep other data off its
/// cache lines (see `owners`).
#[repr(align(128))]
pub struct Segments<S> {
    pub source: S,
    reserved: AtomicU64,
    /// Reserved bytes may not exceed this (`set_per_process_memory_fraction`).
    limit: AtomicU64,
    owners: SegmentOwners,
    /// The lowest start and highest end of any segment so far (never narrowed): lets
    /// a pointer-only free pass over other devices' allocators without a lock.
    span: (AtomicU64, AtomicU64),
}

impl<S: SegmentSource> Segments<S> {
    pub fn new(source: S) -> Arc<Self> {
        Arc::new(Segments {
            source,
            reserved: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            owners: SegmentOwners::default(),
            span: (AtomicU64::new(u64::MAX), AtomicU64::new(0)),
        })
    }

    pub fn reserved(&self) -> u64 {
        self.reserved.load(Ordering::Relaxed)
    }

    /// Caps reserved memory at `fraction` of the source's total (PyTorch's per-process
    /// memory fraction); 1.0 removes the cap.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        if !(fraction > 0.0 && fraction <= 1.0) {
            return Err(Error::invalid_argument(format!("memory fraction {fraction} is not in (0, 1]")));
        }
        let total = self.source.memory_info().1;
        let limit = if fraction >= 1.0 { u64::MAX } else { (total as f64 * fraction) as u64 };
        self.limit.store(limit, Ordering::Relaxed);
        Ok(())
    }

    /// Caps reserved memory at `bytes` (a pool's limit, cupy's `set_limit`).
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Counts `size` more reserved bytes, unless that passes the cap.
    fn within_cap(&self, size: u64) -> Result<()> {
        let limit = self.limit();
        if self.reserved.fetch_add(size, Ordering::Relaxed) + size > limit {
            self.reserved.fetch_sub(size, Ordering::Relaxed);
            return Err(Error::new(
                Status::GPURT_ERROR_OUT_OF_MEMORY,
                format!("the pool's limit (its own, or the per-process memory fraction) allows {limit} bytes"),
            ));
        }
        Ok(())
    }

    /// A new segment for `shard`, within the cap.
    fn take(&self, size: u64, stream: u64, shard: u32) -> Result<u64> {
        self.within_cap(size)?;
        match self.source.allocate(size, stream) {
            Ok(addr) => {
                self.own(addr, size, shard);
                Ok(addr)
            }
            Err(e) => {
                self.reserved.fetch_sub(size, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Returns segments, given as (start, size), to the source.
    fn give_back(&self, segments: &[(u64, u64)]) {
        self.owners.remove(segments.iter().map(|&(start, _)| start).collect());
        for &(addr, size) in segments {
            self.source.release(addr, size);
            self.reserved.fetch_sub(size, Ordering::Relaxed);
        }
    }

    /// Reserves the addresses of an expandable segment for `shard`.
    fn reserve_expandable(&self, size: u64, shard: u32) -> Result<u64> {
        let addr = self.source.reserve_addresses(size)?;
        self.own(addr, size, shard);
        Ok(addr)
    }

    /// Backs `size` more bytes of an expandable segment at `addr`, within the cap.
    fn grow(&self, addr: u64, size: u64) -> Result<()> {
        self.within_cap(size)?;
        self.source.map(addr, size).inspect_err(|_| {
            self.reserved.fetch_sub(size, Ordering::Relaxed);
        })
    }

    fn shrink(&self, addr: u64, size: u64) {
        self.source.unmap(addr, size);
        self.reserved.fetch_sub(size, Ordering::Relaxed);
    }

    fn free_expandable(&self, addr: u64, size: u64) {
        self.owners.remove(vec![addr]);
        self.source.free_addresses(addr, size);
    }

    /// Records `shard` as the owner of the segment `[addr, addr + size)`.
    fn own(&self, addr: u64, size: u64, shard: u32) {
        self.owners.insert(SegmentOwner { start: addr, end: addr + size, shard });
        self.span.0.fetch_min(addr, Ordering::Relaxed);
        self.span.1.fetch_max(addr + size, Ordering::Relaxed);
    }

    /// Whether `addr` lies within the span of every segment so far: false means it
    /// is surely not this allocator's, without taking a lock.
    pub fn may_hold(&self, addr: u64) -> bool {
        self.span.0.load(Ordering::Relaxed) <= addr && addr < self.span.1.load(Ordering::Relaxed)
    }

    /// The shard whose segment contains `addr`.
    pub fn owner_of(&self, addr: u64) -> Option<u32> {
        self.owners.owner_of(addr)
    }

    /// Segments and their owners, for invariant checks.
    pub fn owners(&self) -> Vec<SegmentOwner> {
        self.owners.all()
    }
}

/// A freed block parked uncoalesced for the next request of its exact size on its
/// stream. Its size and stream are copied from the block, so that the search for a
/// match reads this one small array and not the arena.
#[derive(Debug, Clone, Copy)]
struct Parked {
    stream: u64,
    size: u64,
    id: BlockId,
}

/// A segment: its size (for an expandable one, the bytes mapped) and its first
/// block, which no merge removes.
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
    /// The rounded sizes of the last `RECENT_SIZES` requests past the parked blocks,
    /// the newest at `recent_sizes_next - 1`: a freed block of another size goes
    /// straight to the free lists, as its parking would only delay its coalescing to
    /// the next request (most frees of varied sizes).
    recent_sizes: [u64; RECENT_SIZES],
    recent_sizes_next: usize,
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

/// An expandable segment: a reserved address range whose first bytes are backed by
/// memory. It is also in `segments`, with its mapped size.
#[derive(Debug, Clone)]
struct Expandable {
    base: u64,
    reserved: u64,
    /// The block that ends the mapped bytes.
    tail: BlockId,
    /// Where each mapping starts, in order (each ends where the next starts, the last
    /// at the mapped end): the driver unmaps whole mappings only, so memory goes back
    /// from a mapping's start.
    maps: Vec<u64>,
    /// The pool's allocation count when this segment last grew.
    allocations_at_growth: i64,
}

fn park_max(config: &AllocConfig) -> u64 {
    if config.expandable_segments {
        EXPANDABLE_PARK_MAX
    } else {
        u64::MAX
    }
}

fn pool_index(pool: PoolKind) -> usize {
    pool as usize - 1
}

/// Marks a block allocated for a request of `requested` bytes and counts it.
fn count_handed_out(stats: &mut gpurt_memory_stats_t, block: &mut Block, requested: u64) {
    block.state = State::Allocated;
    block.requested = requested;
    let (pool, size) = (block.pool, block.size as i64);
    stats.allocation.add(pool, 1);
    stats.allocated_bytes.add(pool, size);
    stats.active.add(pool, 1);
    stats.active_bytes.add(pool, size);
    stats.requested_bytes.add(pool, requested as i64);
}

/// Uncounts `blocks` allocations of `bytes` in all that leave use: freed, and not
/// active.
fn uncount_use(stats: &mut gpurt_memory_stats_t, pool: PoolKind, blocks: i64, bytes: i64) {
    stats.allocation.sub(pool, blocks);
    stats.allocated_bytes.sub(pool, bytes);
    stats.active.sub(pool, blocks);
    stats.active_bytes.sub(pool, bytes);
}

/// Counts a block entering (`+1`) or leaving (`-1`) the free blocks of a split
/// segment: PyTorch's inactive_split statistics.
#[inline(always)]
fn count_inactive_split(stats: &mut gpurt_memory_stats_t, b: &Block, sign: i64) {
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

/// The size of a new segment for a rounded request.
fn segment_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
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
            recent_sizes: [0; RECENT_SIZES],
            recent_sizes_next: 0,
            park_max,
            stats: gpurt_memory_stats_t::new(),
            parked_reuses: [(0, 0); 2],
            expandable: HashMap::default(),
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

    /// Allocations served so far, parked reuses included.
    fn allocations_so_far(&self) -> i64 {
        self.stats.allocation.all.allocated + self.parked_reuses.iter().map(|&(reuses, _)| reuses).sum::<i64>()
    }

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

    /// Hands out a parked block of exactly `size` for `stream`, if there is one: the
    /// fast path, which hashes nothing.
    #[inline(always)]
    fn unpark(&mut self, stream: u64, size: u64, requested: u64) -> Option<u64> {
        let i = self.parked.iter().rposition(|p| p.size == size && p.stream == stream)?;
        // Usually the last one: `pop` spares `remove`'s copy call.
        let id = if i + 1 == self.parked.len() { self.parked.pop() } else { Some(self.parked.remove(i)) }?.id;
        let block = &mut self.blocks[id];
        count_inactive_split(&mut self.stats, block, -1);
        // Still counted as allocated and active (see `stats`): only the request is new.
        block.state = State::Allocated;
        block.requested = requested;
        self.stats.requested_bytes.add(block.pool, requested as i64);
        let reuses = &mut self.parked_reuses[pool_index(block.pool)];
        *reuses = (reuses.0 + 1, reuses.1 + block.size as i64);
        Some(block.addr)
    }

    /// Returns every parked block to the free lists, coalesced, and uncounts its use
    /// (see `stats`).
    pub fn flush_parked(&mut self) {
        while let Some(Parked { id, size, .. }) = self.parked.pop() {
            let block = &self.blocks[id];
            uncount_use(&mut self.stats, block.pool, 1, size as i64);
            count_inactive_split(&mut self.stats, block, -1);
            self.coalesce_into_free(id);
        }
    }

    /// Best fit among `stream`'s free blocks of `pool`, with PyTorch's rules for
    /// oversize blocks (never split for a smaller request; not used when far larger).
    /// An expandable segment's free tail is taken last: it alone grows in place, so
    /// a request that fits elsewhere leaves it whole for a larger one (without this,
    /// a small block left at the very end made the next large request map anew:
    /// docs/performance.md). The look elsewhere is bounded: missing a block there
    /// only means taking the tail.
    fn find_free(&mut self, pool: PoolKind, stream: u64, size: u64) -> Option<BlockId> {
        let id = self.fit_free(pool, stream, size, FreeLists::best_fit)?;
        let key = (stream, pool_index(pool));
        if self.expandable.is_empty()
            || self.blocks[id].next != NO_BLOCK
            || self.expandable.get(&key).map_or(true, |e| e.tail != id)
        {
            return Some(id);
        }
        let lists = self.blocks[id].lists as usize;
        self.free[lists].remove(&mut self.blocks, id);
        let elsewhere = self.fit_free(pool, stream, size, FreeLists::quick_fit);
        self.free[lists].insert(&mut self.blocks, id);
        Some(elsewhere.unwrap_or(id))
    }

    fn fit_free(&self, pool: PoolKind, stream: u64, size: u64, fit: FitFn) -> Option<BlockId> {
        let max_split = self.config.max_split_size;
        let limit = if size < max_split { max_split } else { size.saturating_add(LARGE_BUFFER) };
        let lists = self.free.iter().find(|f| f.hold(stream, pool))?;
        fit(lists, &self.blocks, size, limit)
    }

    /// Whether to split off the rest of a block: small blocks at any remainder;
    /// large ones unless they are oversize. (PyTorch keeps large remainders of up to
    /// 1 MiB unsplit; splitting them too lets them coalesce back, and measured less
    /// fragmentation: see docs/performance.md.)
    fn should_split(&self, pool: PoolKind, block_size: u64, size: u64) -> bool {
        let remaining = block_size - size;
        remaining >= MIN_BLOCK && (pool == PoolKind::Small || size < self.config.max_split_size)
    }

    /// Completes deferred frees whose markers are done; with `wait`, waits for all.
    fn process_pending(&mut self, wait: bool) {
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
        // With expandable segments, one arena a stream for all sizes: a small pool's
        // segment of its own grew, and overshot, apart from the large one's (on the
        // recorded traces, fragmentation 1.142 -> 1.069 on a GPT-2 sampling loop, and
        // lower or equal on five of the six others: docs/performance.md).
        let pool = if rounded <= SMALL_SIZE && !self.config.expandable_segments { PoolKind::Small } else { PoolKind::Large };
        self.flush_parked();
        let id = match self.find_free(pool, stream, rounded) {
            Some(id) => id,
            None if !collected && self.past_collection_threshold(rounded) => return Ok(None),
            None => self.new_segment(pool, stream, rounded)?,
        };
        // Served: remembered once, though a request may come here again after a
        // collection or the out-of-memory release.
        self.recent_sizes[self.recent_sizes_next] = rounded;
        self.recent_sizes_next = (self.recent_sizes_next + 1) % RECENT_SIZES;
        self.remove_free(id);
        let Block { addr, size: block_size, rank, next, lists, .. } = self.blocks[id];
        if self.should_split(pool, block_size, rounded) {
            let rest = self.blocks.insert(Block::free(addr + rounded, block_size - rounded, rank + rounded, lists, pool, id, next));
            match next {
                NO_BLOCK => self.note_tail(rest),
                next => self.blocks[next].prev = rest,
            }
            let block = &mut self.blocks[id];
            (block.next, block.size) = (rest, rounded);
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
            && (self.shared.reserved() + segment_size(rounded)) as f64 > threshold * limit as f64
    }

    /// A new segment holding one free block. Out of memory is the caller's to handle
    /// (the allocator releases every shard's cache and retries).
    fn new_segment(&mut self, pool: PoolKind, stream: u64, rounded: u64) -> Result<BlockId> {
        if self.config.expandable_segments {
            return self.grow_expandable(pool, stream, rounded);
        }
        let size = segment_size(rounded);
        let addr = self.shared.take(size, stream, self.shard)?;
        self.note(&[Action::SegmentAlloc], addr, size, stream);
        Ok(self.add_segment(pool, stream, addr, size))
    }

    /// Counts a new segment of `size` bytes at `addr`, holding one free block.
    fn add_segment(&mut self, pool: PoolKind, stream: u64, addr: u64, size: u64) -> BlockId {
        let rank = self.segments_taken << 40; // segments stay below 1 TiB
        self.segments_taken += 1;
        let lists = lists_for_segment(&mut self.free, stream, pool);
        let id = self.blocks.insert(Block::free(addr, size, rank, lists, pool, NO_BLOCK, NO_BLOCK));
        self.segments.insert(addr, Segment { size, first: id });
        self.stats.segment.add(pool, 1);
        self.count_device_memory(pool, size as i64);
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
                let ends = e.maps.iter().skip(1).copied().chain([segment + segment_size]);
                e.maps.iter().zip(ends).filter(|&(&start, end)| start < addr + size && addr < end).map(|(&start, end)| (start, end - start)).collect()
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
        if self.recent_sizes.contains(&size) && size <= self.park_max {
            self.park(id);
        } else {
            uncount_use(&mut self.stats, pool, 1, size as i64);
            self.stats.requested_bytes.sub(pool, requested as i64);
            self.coalesce_into_free(id);
        }
        Some(Ok(()))
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

    /// Parks a freed block, still counted as allocated and active (see `stats`);
    /// past `MAX_PARKED`, the others are returned to the free lists first.
    #[inline(always)]
    fn park(&mut self, id: BlockId) {
        if self.parked.len() == MAX_PARKED {
            self.flush_parked();
        }
        let stream = self.stream_of(&self.blocks[id]);
        let block = &mut self.blocks[id];
        block.state = State::Parked;
        let (pool, size, requested) = (block.pool, block.size, block.requested);
        block.requested = 0;
        self.stats.requested_bytes.sub(pool, requested as i64);
        count_inactive_split(&mut self.stats, block, 1);
        self.parked.push(Parked { stream, size, id });
    }

    /// Moves a block that left use into the free lists, merged with free neighbours.
    fn coalesce_into_free(&mut self, id: BlockId) {
        let block = &mut self.blocks[id];
        block.state = State::Free;
        let (addr, prev, next) = (block.addr, block.prev, block.next);
        self.by_addr.remove(&addr);
        let mut start = id;
        if prev != NO_BLOCK && self.blocks[prev].state == State::Free {
            self.remove_free(prev);
            self.absorb_right(prev, id);
            start = prev;
        }
        // `start` now ends where `id` ended: its right neighbour is `next`.
        if next != NO_BLOCK && self.blocks[next].state == State::Free {
            self.remove_free(next);
            self.absorb_right(start, next);
        }
        self.insert_free(start);
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

    /// Records that block `id` now ends its segment, if that segment is an
    /// expandable one.
    fn note_tail(&mut self, id: BlockId) {
        if self.expandable.is_empty() {
            return;
        }
        let b = &self.blocks[id];
        let (key, addr) = ((self.stream_of(b), pool_index(b.pool)), b.addr);
        if let Some(seg) = self.expandable.get_mut(&key) {
            if (seg.base..seg.base + seg.reserved).contains(&addr) {
                seg.tail = id;
            }
        }
    }

    /// Counts device memory taken (`bytes` > 0) or given back: a segment, or a part
    /// of an expandable segment mapped or unmapped.
    fn count_device_memory(&mut self, pool: PoolKind, bytes: i64) {
        if bytes > 0 {
            self.stats.reserved_bytes.add(pool, bytes);
            self.stats.num_device_alloc += 1;
        } else {
            self.stats.reserved_bytes.sub(pool, -bytes);
            self.stats.num_device_free += 1;
        }
    }

    /// A free block of at least `rounded` bytes at the end of `stream`'s expandable
    /// segment of `pool`: the segment is created, or grown by what its free tail
    /// block lacks or, if more, a share of what it has mapped (granularity multiples).
    fn grow_expandable(&mut self, pool: PoolKind, stream: u64, rounded: u64) -> Result<BlockId> {
        let granularity = self.shared.source.map_granularity();
        let key = (stream, pool_index(pool));
        let Some((base, reserved, last, allocations_at_growth)) =
            self.expandable.get(&key).map(|e| (e.base, e.reserved, e.tail, e.allocations_at_growth))
        else {
            // Room for the whole device: a segment never needs a second range.
            let total = self.shared.source.memory_info().1;
            let reserved = total.max(rounded).max(1 << 30).next_multiple_of(granularity);
            let base = self.shared.reserve_expandable(reserved, self.shard)?;
            let size = rounded.next_multiple_of(granularity);
            if let Err(e) = self.shared.grow(base, size) {
                self.shared.free_expandable(base, reserved);
                return Err(e);
            }
            self.note(&[Action::SegmentMap], base, size, stream);
            let id = self.add_segment(pool, stream, base, size);
            let allocations_at_growth = self.allocations_so_far();
            self.expandable.insert(key, Expandable { base, reserved, tail: id, maps: vec![base], allocations_at_growth });
            return Ok(id);
        };
        let mapped = self.segments[&base].size;
        let tail = &self.blocks[last];
        let (tail_free, rank) = (tail.state == State::Free, tail.rank + tail.size);
        let missing = if tail_free { rounded.saturating_sub(tail.size) } else { rounded };
        let needed = missing.next_multiple_of(granularity);
        if mapped + needed > reserved {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, "the expandable segment's address range is full"));
        }
        let end = base + mapped;
        // A step of a share of what is mapped: a pool growing from cold makes fewer
        // driver calls (measured on recorded traces: docs/performance.md) for a
        // bounded overshoot; where the step is refused (the cap, the driver), what is
        // needed is enough.
        let allocations = self.allocations_so_far();
        let step = if allocations - allocations_at_growth >= EXPANDABLE_QUIET_ALLOCATIONS {
            (mapped / 32).clamp(EXPANDABLE_QUIET_STEP_MIN, EXPANDABLE_QUIET_STEP_MAX)
        } else {
            (mapped / 8).min(EXPANDABLE_SMALL_STEP_MAX).max((mapped / 16).min(EXPANDABLE_STEP_MAX)).max(EXPANDABLE_STEP_MIN)
        }
        .next_multiple_of(granularity)
        .min(reserved - mapped);
        self.expandable.get_mut(&key).expect("segment").allocations_at_growth = allocations;
        let grow = if step > needed && self.shared.grow(end, step).is_ok() {
            step
        } else {
            self.shared.grow(end, needed)?;
            needed
        };
        self.note(&[Action::SegmentMap], end, grow, stream);
        self.count_device_memory(pool, grow as i64);
        self.segment_mut(base).size = mapped + grow;
        self.expandable.get_mut(&key).expect("segment").maps.push(end);
        if tail_free {
            self.remove_free(last);
            self.blocks[last].size += grow;
            self.insert_free(last);
            return Ok(last);
        }
        let id = self.blocks.insert(Block::free(end, grow, rank, self.blocks[last].lists, pool, last, NO_BLOCK));
        self.blocks[last].next = id;
        self.expandable.get_mut(&key).expect("segment").tail = id;
        self.insert_free(id);
        Ok(id)
    }

    fn segment_mut(&mut self, start: u64) -> &mut Segment {
        self.segments.get_mut(&start).expect("a held segment")
    }

    /// Unmaps the mappings that lie wholly in the free end of every expandable
    /// segment; a wholly free one gives its addresses back too.
    fn release_expandable_tails(&mut self) {
        let keys: Vec<(u64, usize)> = self.expandable.keys().copied().collect();
        for key in keys {
            let seg = &self.expandable[&key];
            let (base, reserved, tail) = (seg.base, seg.reserved, seg.tail);
            let Block { addr: tail_addr, pool, prev, state, .. } = self.blocks[tail];
            // The first mapping that starts in the free tail block: it and those after
            // it go (the driver cannot unmap part of a mapping).
            let first = seg.maps.partition_point(|&start| start < tail_addr);
            if state != State::Free || first == seg.maps.len() {
                continue;
            }
            let end = base + self.segments[&base].size;
            let keep_end = seg.maps[first];
            let mut released = self.expandable.get_mut(&key).expect("segment").maps.split_off(first);
            released.push(end);
            for span in released.windows(2) {
                self.shared.shrink(span[0], span[1] - span[0]);
            }
            let release = end - keep_end;
            self.remove_free(tail);
            self.note(&[Action::SegmentUnmap], keep_end, release, key.0);
            self.count_device_memory(pool, -(release as i64));
            if keep_end > tail_addr {
                self.blocks[tail].size -= release;
                self.insert_free(tail);
            } else if prev != NO_BLOCK {
                // The tail block was all unmapped; its neighbour (in use) ends the segment.
                self.blocks.remove(tail);
                self.blocks[prev].next = NO_BLOCK;
                self.expandable.get_mut(&key).expect("segment").tail = prev;
            } else {
                self.forget_segment(base, tail);
                self.expandable.remove(&key);
                self.shared.free_expandable(base, reserved);
                continue;
            }
            self.segment_mut(base).size = keep_end - base;
        }
    }

    /// Releases every cached segment that is wholly free (waiting for deferred
    /// frees first), as `torch.cuda.empty_cache`.
    pub fn empty_cache(&mut self) {
        self.process_pending(true);
        self.release_free_segments();
    }

    /// Releases the wholly free segments, without waiting for deferred frees (garbage
    /// collection).
    pub fn release_free_segments(&mut self) {
        self.flush_parked();
        self.release_expandable_tails();
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
            self.count_device_memory(pool, -(size as i64));
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

    /// Checks every structural and statistical invariant; for tests.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        for seg in self.expandable.values() {
            let tail = &self.blocks[seg.tail];
            let mapped = self.segments.get(&seg.base).ok_or("an expandable segment is missing from the segments")?.size;
            if tail.state == State::Vacant || tail.addr + tail.size != seg.base + mapped || tail.next != NO_BLOCK || mapped > seg.reserved {
                return Err(format!("expandable segment {:#x}: its tail block does not end its {mapped} mapped bytes", seg.base));
            }
            if seg.maps.first() != Some(&seg.base) || seg.maps.windows(2).any(|w| w[0] >= w[1]) || seg.maps.last().is_some_and(|&m| m >= seg.base + mapped) {
                return Err(format!("expandable segment {:#x}: its mappings {:x?} do not tile its {mapped} mapped bytes", seg.base, seg.maps));
            }
        }
        let mut listed = std::collections::HashSet::new();
        for (index, lists) in self.free.iter().enumerate() {
            for (id, ok) in lists.entries(&self.blocks) {
                let b = &self.blocks[id];
                if !ok || b.lists as usize != index || b.pool != lists.pool() || !listed.insert(id) {
                    return Err(format!("free block {:#x} is misfiled in the free lists", b.addr));
                }
            }
        }
        let (mut allocated, mut active, mut requested, mut blocks_seen) = (0i64, 0i64, 0i64, 0);
        let (mut inactive_split, mut inactive_split_blocks) = (0i64, 0i64);
        let (mut parked, mut in_use) = (0, 0);
        let mut segments_per_lists = vec![0; self.free.len()];
        for (&start, seg) in &self.segments {
            let mut at = seg.first;
            let (mut expected_addr, mut prev) = (start, NO_BLOCK);
            let lists = self.blocks[at].lists;
            segments_per_lists[lists as usize] += 1;
            while at != NO_BLOCK {
                let b = &self.blocks[at];
                if b.state == State::Vacant || b.addr != expected_addr || b.prev != prev {
                    return Err(format!("segment {start:#x}: block {:#x} breaks the chain", b.addr));
                }
                if b.lists != lists {
                    return Err(format!("segment {start:#x}: block {:#x} names another stream's lists", b.addr));
                }
                if b.state == State::Free {
                    if !listed.contains(&at) {
                        return Err(format!("free block {:#x} missing from the free lists", b.addr));
                    }
                    for n in [b.prev, b.next] {
                        if n != NO_BLOCK && self.blocks[n].state == State::Free {
                            return Err(format!("free blocks {:#x} and {:#x} were not coalesced", b.addr, self.blocks[n].addr));
                        }
                    }
                } else if self.by_addr.get(&b.addr) != Some(&at) {
                    return Err(format!("block {:#x} in use or parked is missing from the address map", b.addr));
                } else {
                    in_use += 1;
                }
                match b.state {
                    State::Free | State::Parked if b.is_split() => {
                        inactive_split += b.size as i64;
                        inactive_split_blocks += 1;
                    }
                    State::Allocated | State::PendingFree => active += b.size as i64,
                    _ => {}
                }
                if b.state == State::Parked {
                    if !self.parked.iter().any(|p| p.id == at && p.size == b.size && p.stream == self.stream_of(b)) {
                        return Err(format!("parked block {:#x} missing from the parked list", b.addr));
                    }
                    parked += 1;
                }
                if b.state == State::Allocated {
                    allocated += b.size as i64;
                    requested += b.requested as i64;
                }
                blocks_seen += 1;
                expected_addr += b.size;
                prev = at;
                at = b.next;
            }
            if expected_addr != start + seg.size {
                return Err(format!("segment {start:#x}: blocks cover {} of {} bytes", expected_addr - start, seg.size));
            }
        }
        if segments_per_lists.iter().zip(&self.free).any(|(&n, lists)| lists.segments != n) {
            return Err("free lists miscount their segments".into());
        }
        if self.used_on.keys().any(|&id| self.blocks[id].state != State::Allocated || !self.blocks[id].used_elsewhere) {
            return Err("streams recorded for a block that is not allocated".into());
        }
        if parked != self.parked.len() {
            return Err(format!("{} blocks listed as parked for {parked} parked", self.parked.len()));
        }
        if blocks_seen != self.blocks.len() || listed.len() + in_use != self.blocks.len() || in_use != self.by_addr.len() {
            return Err("blocks outside any segment, stale free-list entries or stale addresses".into());
        }
        let s = &self.stats();
        let reserved: u64 = self.segments.values().map(|seg| seg.size).sum();
        let checks = [
            ("allocated_bytes", s.allocated_bytes.all.current, allocated),
            ("active_bytes", s.active_bytes.all.current, active),
            ("inactive_split_bytes", s.inactive_split_bytes.all.current, inactive_split),
            ("inactive_split", s.inactive_split.all.current, inactive_split_blocks),
            ("requested_bytes", s.requested_bytes.all.current, requested),
            ("reserved_bytes", s.reserved_bytes.all.current, reserved as i64),
        ];
        for (name, stat, truth) in checks {
            if stat != truth {
                return Err(format!("{name} is {stat}, the blocks add up to {truth}"));
            }
        }
        Ok(())
    }
}
