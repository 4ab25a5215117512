//! The caching allocator: pools sharded by stream over one shared segment source.
//!
//! A segment and every block split from it belong to one stream (as in PyTorch), so
//! each stream's blocks can live in their own shard with its own lock: threads that
//! allocate on different streams share no lock and no written cache line. Threads
//! that allocate on one stream at once would all meet on its shard's lock, so a
//! thread that keeps finding it taken gets a shard of its own for that stream
//! (`SPLIT_AFTER`). Each thread remembers its shards for the last few streams it
//! allocated on. Pointer-only frees try the shards of the thread's two last streams
//! that no other thread holds, then the one the segment map names (read without a
//! lock). Out of memory releases every shard's cache before the one retry.
//!
//! The common case of `malloc` and `free` (the stream's shard free, a parked block)
//! is inlined into the C entry points (`#[inline(always)]` down to the pool): each
//! call it made cost ten to fifteen instructions of register saves and restores.
//!
//! Statistics: each shard counts its own blocks exactly; the totals are the shards'
//! changes folded in ("flushed") when a segment is taken or released, when a shard's
//! allocated bytes have moved by `FLUSH_BYTES`, and on every read. Current values and
//! totals are therefore exact whenever they are read. Peaks are exact when one shard
//! at a time allocates; with several shards allocating at once, a shard's peak since
//! its last flush is added to the totals as they are when it flushes, so a peak can be
//! off by up to (active shards + 1) × `FLUSH_BYTES`. An exact peak of a sum would
//! need one shared counter written by every operation, which is what stops other
//! allocators from scaling.

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rustc_hash::FxHashMap as HashMap;

use super::config::AllocConfig;
use super::history::{self, Action};
use super::reclaim;
use super::owners::SegmentOwner;
use super::pool::{BlockPlace, KeepMapped, Pool, SegmentSource, SegmentView, Segments};
use super::stats::{format_bytes, gpurt_memory_stats_t};
use crate::boundary::lock;
use crate::error::{Error, Result, Status};

mod shards;
mod sleep;
use shards::{Shard, ShardState, MAX_SHARDS};
#[cfg(test)]
pub(crate) use shards::SPLIT_AFTER;

/// The largest allocation served (device or pinned): 256 TiB, past the memory of any
/// device, and small enough that rounding a request and adding it to an address
/// cannot wrap. A larger request is out of memory at once, with no statistic changed.
pub const GPURT_MAX_ALLOCATION_SIZE: u64 = 281_474_976_710_656; // 2^48, spelled out for C

/// A shard's unflushed change in allocated bytes that triggers a flush.
pub(crate) const FLUSH_BYTES: i64 = 256 << 20;

static NEXT_ALLOCATOR_ID: AtomicU64 = AtomicU64::new(1);
/// Allocators asleep in the process: while none is, a copy's check that its memory is
/// awake (`alloc::device::require_awake`) costs one load.
pub static ASLEEP: AtomicUsize = AtomicUsize::new(0);

/// `config` as a source can serve it: whole segments where expandable ones are asked
/// of a source that cannot map memory (a device without virtual memory management, as
/// PyTorch falls back there; a pool's own explicit request is refused before this).
fn fit<S: SegmentSource>(mut config: AllocConfig, source: &S) -> AllocConfig {
    config.expandable_segments &= source.can_map();
    config
}

/// Read at every operation by every thread: aligned, as `Segments` is, so that no
/// data written elsewhere shares its cache lines.
#[repr(align(128))]
pub struct CachingAllocator<S: SegmentSource> {
    id: u64,
    shared: Arc<Segments<S>>,
    config: Mutex<AllocConfig>,
    shards: Box<[OnceLock<Shard<S>>]>,
    /// (stream, 0) -> the stream's shared shard; (stream, thread number) -> the shard
    /// of a thread that met contention on the shared one (`SPLIT_AFTER`).
    streams: Mutex<StreamMap>,
    totals: Mutex<gpurt_memory_stats_t>,
    /// Where its pools' events go while the memory history is on (`None`: host memory).
    history: Option<history::Tag>,
    /// Whether allocations are refused, and why: `SERVING`, or from a sleep's start to
    /// its wake's end (or the sleep's failure) `REFUSING_OWNER` or, for a sleep another
    /// process asked for, `REFUSING_ON_REQUEST` (its next allocation wakes it). One
    /// atomic, so that the two are never seen apart. Read by every allocation; written
    /// under `streams`, so that a shard made meanwhile starts asleep (`sleep`).
    refusing: AtomicU8,
    /// How it sleeps once a sleep succeeded: `SLEEP_NONE`, `SLEEP_DISCARD` or
    /// `SLEEP_OFFLOAD`; read without a lock.
    sleep_mode: AtomicU8,
    /// Held through a sleep or a wake, so that they run one at a time.
    transition: Mutex<()>,
    /// Uses of its memory that allocate nothing (`touch`), counted in `activity`.
    touches: AtomicU64,
}

/// (stream, 0) -> the stream's shared shard; (stream, thread number) -> a thread's own.
type StreamMap = HashMap<(u64, u32), u32>;

pub(crate) fn is_oom(e: &Error) -> bool {
    e.status == Status::GPURT_ERROR_OUT_OF_MEMORY
}

impl<S: SegmentSource> CachingAllocator<S> {
    pub fn new(source: S, config: AllocConfig) -> Self {
        let id = NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed);
        let config = fit(config, &source);
        CachingAllocator {
            id,
            history: source.history_device().map(|device| history::Tag::new(device, id)),
            shared: Segments::new(source),
            config: Mutex::new(config),
            shards: (0..MAX_SHARDS).map(|_| OnceLock::new()).collect(),
            streams: Mutex::default(),
            totals: Mutex::new(gpurt_memory_stats_t::new()),
            refusing: AtomicU8::new(sleep::SERVING),
            sleep_mode: AtomicU8::new(sleep::SLEEP_NONE),
            transition: Mutex::new(()),
            touches: AtomicU64::new(0),
        }
    }

    /// This allocator's id in the memory history's events.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn source(&self) -> &S {
        &self.shared.source
    }

    /// Allocates `size` bytes for `stream`. Past the garbage-collection threshold,
    /// idle segments of every shard go back first; out of memory releases every
    /// shard's cache (after waiting for deferred frees) and retries once.
    #[inline]
    pub fn malloc(&self, size: u64, stream: u64) -> Result<u64> {
        if size > GPURT_MAX_ALLOCATION_SIZE {
            return Err(self.too_large(size));
        }
        if self.refusing.load(Ordering::Relaxed) == sleep::SERVING {
            match self.malloc_awake(size, stream) {
                // A sleep began after the check: the shard refused.
                Err(_) if self.refuses_allocations() => {}
                done => return done,
            }
        }
        self.malloc_asleep(size, stream)
    }

    #[inline(always)]
    fn malloc_awake(&self, size: u64, stream: u64) -> Result<u64> {
        let index = self.shard_of_stream(stream);
        match self.attempt(self.shard_to_allocate(index, stream), size, stream, false) {
            Ok(Some(addr)) => Ok(addr),
            first => self.collect_and_retry(index, size, stream, first),
        }
    }

    /// One allocation from a locked shard (see `Pool::malloc`).
    #[inline(always)]
    fn attempt(&self, mut state: MutexGuard<'_, ShardState<S>>, size: u64, stream: u64, collected: bool) -> Result<Option<u64>> {
        let result = state.pool.malloc(size, stream, collected);
        state.flush_if_due(&self.totals);
        result
    }

    /// `malloc` after a `first` attempt that found no memory: garbage collection,
    /// then the out-of-memory retry, then (where a hook is installed: `reclaim`) other
    /// processes asked to give memory back and one more retry. Kept out of line, so
    /// that the common case stays short.
    #[inline(never)]
    fn collect_and_retry(&self, index: u32, size: u64, stream: u64, first: Result<Option<u64>>) -> Result<u64> {
        let retry = || self.attempt(self.shard(index), size, stream, true).map(|addr| addr.expect("served after a collection"));
        let first = match first {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => {
                self.for_each_shard(Pool::release_free_segments);
                retry()
            }
            Err(e) => Err(e),
        };
        match first {
            Err(e) if is_oom(&e) => {}
            done => return done,
        }
        lock(&self.totals).num_alloc_retries += 1;
        self.empty_device_cache();
        let cause = match retry() {
            Err(cause) if is_oom(&cause) => cause,
            done => return done,
        };
        // No lock is held here: the asking may wait while this process serves others.
        let asked = reclaim::ask_others(self.shared.source.history_device(), size);
        let last = if asked.as_ref().is_some_and(|a| a.given_back) { retry() } else { Err(cause) };
        match last {
            Err(cause) if is_oom(&cause) => Err(self.out_of_memory(size, cause, asked)),
            done => done,
        }
    }

    /// The error of a request the device refused, with what asking others came to.
    #[cold]
    fn out_of_memory(&self, requested: u64, cause: Error, asked: Option<reclaim::Asked>) -> Error {
        lock(&self.totals).num_ooms += 1;
        let cause = match asked {
            Some(asked) => format!("{cause}; {}", asked.account),
            None => cause.to_string(),
        };
        self.out_of_memory_error(requested, &cause)
    }

    /// A request past `GPURT_MAX_ALLOCATION_SIZE`: out of memory at once, before any rounding (which
    /// would wrap) and with no statistic changed: nothing was attempted.
    #[cold]
    fn too_large(&self, requested: u64) -> Error {
        let why = format!("more than any device holds: gpurt refuses requests above {}", format_bytes(GPURT_MAX_ALLOCATION_SIZE));
        self.out_of_memory_error(requested, &why)
    }

    fn out_of_memory_error(&self, requested: u64, cause: &str) -> Error {
        let memory = self.shared.source.memory_info();
        if let Some(tag) = self.history.as_ref().filter(|_| history::is_on()) {
            tag.recorder.record(&[Action::Oom], 0, requested, 0, tag.allocator, memory.0);
        }
        out_of_memory_error(requested, cause, &self.stats(), memory)
    }

    /// Holds the lock of `stream`'s shared shard until the result is dropped; for
    /// tests of contention.
    #[cfg(test)]
    pub(crate) fn hold_shared_shard(&self, stream: u64) -> impl Sized + '_ {
        let index = lock(&self.streams)[&(stream, 0)];
        self.shard(index)
    }

    /// Every segment of every shard with its blocks, by address (parked blocks are
    /// returned to the free lists first, as for `stats`, so the two agree); and the
    /// shards' history events (each shard's oldest first) into `events`, with the
    /// number they overwrote for room.
    pub fn segment_views(&self, events: &mut Vec<history::Slot>) -> (Vec<SegmentView>, u64) {
        let (mut views, mut overwritten) = (Vec::new(), 0);
        self.for_each_shard(|pool| {
            pool.flush_parked();
            views.extend(pool.segment_views());
            overwritten += pool.history_events(events);
        });
        views.sort_by_key(|v| v.addr);
        (views, overwritten)
    }

    /// Every segment and the shard that owns it.
    pub fn segment_owners(&self) -> Vec<SegmentOwner> {
        self.shared.owners()
    }

    /// Whether `addr` lies in one of this allocator's segments.
    pub fn holds(&self, addr: u64) -> bool {
        self.shared.owner_of(addr).is_some()
    }

    /// Whether `addr` may lie in one of this allocator's segments (`false`: surely
    /// not), read without a lock.
    pub fn may_hold(&self, addr: u64) -> bool {
        self.shared.may_hold(addr)
    }

    /// Frees a live allocation (0 is a no-op), found from its address alone.
    #[inline(always)]
    pub fn free(&self, addr: u64) -> Result<()> {
        if addr == 0 {
            return Ok(());
        }
        self.try_free(addr).unwrap_or_else(|| Err(not_live(addr)))
    }

    /// Frees `addr` if this allocator holds it (`None`: it does not; no error is
    /// made, as a free tries several allocators).
    #[inline(always)]
    pub fn try_free(&self, addr: u64) -> Option<Result<()>> {
        self.on_owner(addr, |pool| pool.free(addr))
    }

    /// Where the live block at `addr` lies, if this allocator holds it.
    pub fn try_place(&self, addr: u64) -> Option<Result<BlockPlace>> {
        self.on_owner(addr, |pool| pool.place(addr))
    }

    /// `Pool::set_discard_on_sleep` if this allocator holds `addr`.
    pub fn try_set_discard_on_sleep(&self, addr: u64, discard: bool) -> Option<Result<()>> {
        self.on_owner(addr, |pool| pool.set_discard_on_sleep(addr, discard))
    }

    /// `Pool::set_read_only` if this allocator holds `addr`.
    pub fn try_set_read_only(&self, addr: u64, read_only: bool) -> Option<Result<()>> {
        self.on_owner(addr, |pool| pool.set_read_only(addr, read_only))
    }

    /// Declares that `addr` is also used on `stream` (PyTorch's `record_stream`).
    pub fn record_stream(&self, addr: u64, stream: u64) -> Result<()> {
        self.try_record_stream(addr, stream).unwrap_or_else(|| Err(not_live(addr)))
    }

    /// `record_stream` if this allocator holds `addr`.
    pub fn try_record_stream(&self, addr: u64, stream: u64) -> Option<Result<()>> {
        self.on_owner(addr, |pool| pool.record_stream(addr, stream))
    }

    /// A claim of a graph captured into this allocator in stream order: its free
    /// memory stays mapped while the claim lives (see `KeepMapped`).
    pub fn keep_mapped(&self) -> KeepMapped {
        self.shared.keep_mapped()
    }

    /// The graphs that keep this allocator's free memory mapped.
    pub fn graph_holds(&self) -> usize {
        self.shared.graph_holds()
    }

    /// Releases every wholly free cached segment of every shard, waiting for deferred
    /// frees first (`torch.cuda.empty_cache`).
    pub fn empty_cache(&self) {
        self.for_each_shard(Pool::empty_cache);
    }

    /// `empty_cache`, the host copies kept for a sleep (`Pool::empty_device_cache`).
    pub fn empty_device_cache(&self) {
        self.for_each_shard(Pool::empty_device_cache);
    }

    /// Runs `f` on every shard's pool in turn, flushing its statistics after.
    fn for_each_shard(&self, mut f: impl FnMut(&mut Pool<S>)) {
        for shard in self.created_shards() {
            let mut state = lock(&shard.state);
            f(&mut state.pool);
            state.flush(&self.totals);
        }
    }

    /// The statistics, every shard flushed first.
    /// Maps `size` bytes at `addr`, in addresses its caller reserved outside the pools
    /// (a growable buffer's), within this allocator's cap (its per-process memory
    /// fraction), counted as one segment and one allocation of the large pool.
    pub(crate) fn map_outside(&self, addr: u64, size: u64) -> Result<()> {
        self.shared.grow(addr, size)?;
        self.count_outside(size as i64, 1);
        Ok(())
    }

    /// Unmaps what `map_outside` mapped (one whole mapping).
    pub(crate) fn unmap_outside(&self, addr: u64, size: u64) -> Result<()> {
        self.shared.shrink(addr, size)?;
        self.count_outside(-(size as i64), -1);
        Ok(())
    }

    fn count_outside(&self, bytes: i64, count: i64) {
        use crate::alloc::stats::PoolKind::Large;
        let mut totals = lock(&self.totals);
        let t = &mut *totals;
        if count > 0 {
            t.num_device_alloc += count;
        } else {
            t.num_device_free -= count;
        }
        let rows = [
            (&mut t.segment, count),
            (&mut t.allocation, count),
            (&mut t.active, count),
            (&mut t.reserved_bytes, bytes),
            (&mut t.allocated_bytes, bytes),
            (&mut t.active_bytes, bytes),
            (&mut t.requested_bytes, bytes),
        ];
        for (row, amount) in rows {
            if amount >= 0 {
                row.add(Large, amount);
            } else {
                row.sub(Large, -amount);
            }
        }
    }

    pub fn stats(&self) -> gpurt_memory_stats_t {
        self.for_each_shard(|_| ());
        *lock(&self.totals)
    }

    pub fn reset_peak(&self) {
        self.stats();
        lock(&self.totals).reset_peak();
    }

    pub fn reset_accumulated(&self) {
        self.stats();
        lock(&self.totals).reset_accumulated();
    }

    /// `reset_accumulated` where `accumulated`, else `reset_peak`.
    pub fn reset_stats(&self, accumulated: bool) {
        if accumulated {
            self.reset_accumulated()
        } else {
            self.reset_peak()
        }
    }

    pub fn set_config(&self, config: AllocConfig) {
        let config = fit(config, self.source());
        *lock(&self.config) = config.clone();
        for shard in self.created_shards() {
            lock(&shard.state).pool.set_config(config.clone());
        }
    }

    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        self.shared.set_memory_fraction(fraction)
    }

    /// Caps the bytes this allocator reserves.
    pub fn set_limit(&self, bytes: u64) {
        self.shared.set_limit(bytes)
    }

    /// Free blocks cached in every shard, parked blocks flushed first.
    pub fn free_block_count(&self) -> u64 {
        let mut count = 0;
        self.for_each_shard(|pool| {
            pool.flush_parked();
            count += pool.free_block_count();
        });
        count
    }

    /// Every shard's invariants, the segment map against the shards' segments, and
    /// the totals against the sum of the shards; for tests.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        let totals = self.stats();
        let owners = self.segment_owners();
        let mut sum = gpurt_memory_stats_t::new();
        for (index, shard) in self.shards.iter().enumerate() {
            let Some(shard) = shard.get() else { continue };
            let state = lock(&shard.state);
            state.pool.check_invariants().map_err(|e| format!("shard {index}: {e}"))?;
            for &SegmentOwner { start, shard: owner, .. } in &owners {
                if (owner as usize == index) != state.pool.owns_segment(start) {
                    return Err(format!("segment {start:#x} is mapped to shard {owner}, held by another"));
                }
            }
            sum.absorb(&state.pool.stats(), &gpurt_memory_stats_t::new());
        }
        let (segments, reserved) = (sum.segment.all.current, sum.reserved_bytes.all.current as u64);
        if owners.len() as i64 != segments || reserved != self.shared.reserved() {
            return Err(format!("{} mapped segments ({} bytes) for {segments} held ({reserved} bytes)", owners.len(), self.shared.reserved()));
        }
        let current = |s: &gpurt_memory_stats_t| {
            [s.allocated_bytes.all.current, s.reserved_bytes.all.current, s.active_bytes.all.current, s.requested_bytes.all.current]
        };
        if current(&totals) != current(&sum) {
            return Err(format!("totals {:?} differ from the shards' sum {:?}", current(&totals), current(&sum)));
        }
        Ok(())
    }
}

/// PyTorch's out-of-memory message: the request, the device (`memory`: the driver's
/// free and total bytes), and gpurt's share of it.
pub fn out_of_memory_error(requested: u64, cause: &str, stats: &gpurt_memory_stats_t, memory: (u64, u64)) -> Error {
    let (free, total) = memory;
    let allocated = stats.allocated_bytes.all.current;
    let reserved = stats.reserved_bytes.all.current;
    Error::new(
        Status::GPURT_ERROR_OUT_OF_MEMORY,
        format!(
            "out of memory: tried to allocate {} ({cause}). Device total {}, driver-reported free {}; \
             gpurt has allocated {} and reserved {} ({} reserved but unallocated). If reserved but \
             unallocated memory is large, try GPURT_ALLOC_CONF=max_split_size_mb:N to avoid fragmentation.",
            format_bytes(requested),
            format_bytes(total),
            format_bytes(free),
            format_bytes(allocated),
            format_bytes(reserved),
            format_bytes(reserved - allocated)
        ),
    )
}

pub fn not_live(addr: u64) -> Error {
    Error::invalid_argument(format!("{addr:#x} is not a live gpurt allocation (double free, or not from gpurt)"))
}
