//! Which shard serves a thread's allocation on a stream, and which holds a block a
//! free names: each thread's recent streams and their shards, the stream map (a
//! stream's shared shard, and the shards of threads that met contention on it), and
//! the shards themselves with their statistics last folded into the totals.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

use super::{CachingAllocator, StreamMap, FLUSH_BYTES};
use crate::alloc::pool::{Pool, SegmentSource};
use crate::alloc::stats::gpurt_memory_stats_t;
use crate::boundary::lock;
use crate::error::Result;

/// Shards per allocator; streams beyond this share shards (a pool keeps each
/// stream's blocks apart in any case).
pub(super) const MAX_SHARDS: usize = 64;

/// Streams a thread remembers the shards of (`RECENT_SHARDS`).
const RECENT: usize = 4;
/// Allocations of a thread that found its stream's shared shard locked by another
/// thread, after which the thread allocates on that stream from a shard of its own.
pub(crate) const SPLIT_AFTER: u32 = 32;

/// A thread's shard for a stream it allocated on.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Recent {
    allocator: u64,
    stream: u64,
    shard: u32,
    /// Allocations that found the shard locked; `PRIVATE` once the shard is the
    /// thread's own.
    contended: u32,
}

const PRIVATE: u32 = u32::MAX;
const NO_RECENT: Recent = Recent { allocator: 0, stream: 0, shard: 0, contended: 0 };

thread_local! {
    /// The streams this thread allocated on last, the last first. A thread's shard
    /// for a stream changes only when this thread gets its own, so an entry never
    /// goes stale, and a thread that takes turns on a few streams does not lock the
    /// stream map, which all threads share, at every allocation (as it did when the
    /// thread remembered one stream).
    static RECENT_SHARDS: [Cell<Recent>; RECENT] = const { [const { Cell::new(NO_RECENT) }; RECENT] };
    static THREAD_NUMBER: ThreadNumber = ThreadNumber::take();
}

/// Threads' numbers in the stream map's keys (0 keys a stream's shared shard); a
/// number goes back for reuse when its thread exits, so that the map holds no more
/// private shards per stream than threads were ever alive at once.
static THREAD_NUMBERS: Mutex<(Vec<u32>, u32)> = Mutex::new((Vec::new(), 0));

struct ThreadNumber(u32);

impl ThreadNumber {
    fn take() -> ThreadNumber {
        let mut numbers = lock(&THREAD_NUMBERS);
        let number = numbers.0.pop().unwrap_or_else(|| {
            numbers.1 += 1;
            numbers.1
        });
        ThreadNumber(number)
    }
}

impl Drop for ThreadNumber {
    fn drop(&mut self) {
        lock(&THREAD_NUMBERS).0.push(self.0);
    }
}

/// This thread's number; `None` while the thread exits.
fn thread_number() -> Option<u32> {
    THREAD_NUMBER.try_with(|n| n.0).ok()
}

/// A pool and the statistics last folded into the totals. Aligned so that shards
/// used by different threads never share a cache line.
#[repr(align(128))]
pub(super) struct Shard<S: SegmentSource> {
    pub(super) state: Mutex<ShardState<S>>,
}

pub(super) struct ShardState<S: SegmentSource> {
    pub(super) pool: Pool<S>,
    pub(super) flushed: gpurt_memory_stats_t,
}

impl<S: SegmentSource> ShardState<S> {
    pub(super) fn flush(&mut self, totals: &Mutex<gpurt_memory_stats_t>) {
        // Parked blocks go back first: their counts change as they coalesce.
        self.pool.flush_parked();
        let now = self.pool.stats();
        lock(totals).absorb(&now, &self.flushed);
        self.pool.restart_peaks();
        self.flushed = now;
    }

    /// Flushes when the totals would otherwise drift too far (see the module notes).
    /// The allocated bytes read first count parked blocks (see `Pool::stats`), so a
    /// large move is confirmed on the settled figure before flushing.
    #[inline(always)]
    pub(super) fn flush_if_due(&mut self, totals: &Mutex<gpurt_memory_stats_t>) {
        let last = &self.flushed;
        let drifted = |allocated: i64| (allocated - last.allocated_bytes.all.current).abs() >= FLUSH_BYTES;
        let (allocated, device_allocs, device_frees) = self.pool.flush_signals();
        if device_allocs != last.num_device_alloc
            || device_frees != last.num_device_free
            || (drifted(allocated) && drifted(self.pool.stats().allocated_bytes.all.current))
        {
            self.flush(totals);
        }
    }
}

impl<S: SegmentSource> CachingAllocator<S> {
    pub(super) fn created_shards(&self) -> impl Iterator<Item = &Shard<S>> {
        self.shards.iter().filter_map(OnceLock::get)
    }

    #[inline(always)]
    fn shard_mutex(&self, index: u32) -> &Mutex<ShardState<S>> {
        &self.shards[index as usize].get().expect("shard indices come from created shards").state
    }

    pub(super) fn shard(&self, index: u32) -> MutexGuard<'_, ShardState<S>> {
        lock(self.shard_mutex(index))
    }

    /// This thread's shard for `stream`, created on first use; the stream becomes
    /// this thread's most recent one.
    #[inline]
    pub(super) fn shard_of_stream(&self, stream: u64) -> u32 {
        RECENT_SHARDS.with(|recent| {
            let first = recent[0].get();
            if first.allocator == self.id && first.stream == stream {
                return first.shard;
            }
            let seen = recent.iter().position(|r| r.get().allocator == self.id && r.get().stream == stream);
            let entry = match seen {
                Some(i) => recent[i].get(),
                None => self.shard_in_map(stream),
            };
            // The entries before it (or all but the oldest) move down one.
            for i in (1..=seen.unwrap_or(RECENT - 1)).rev() {
                recent[i].set(recent[i - 1].get());
            }
            recent[0].set(entry);
            entry.shard
        })
    }

    /// This thread's shard for `stream` in the stream map: its own if it has one,
    /// else the stream's shared one, created on first use.
    #[cold]
    fn shard_in_map(&self, stream: u64) -> Recent {
        let mut streams = lock(&self.streams);
        let own = thread_number().and_then(|n| streams.get(&(stream, n)).copied());
        let (shard, contended) = match own {
            Some(shard) => (shard, PRIVATE),
            None => (self.shard_for(&mut streams, (stream, 0)), 0),
        };
        Recent { allocator: self.id, stream, shard, contended }
    }

    /// The shard of a stream map key, created on first use. Past `MAX_SHARDS`, keys
    /// share shards (a pool keeps each stream's blocks apart in any case).
    fn shard_for(&self, streams: &mut StreamMap, key: (u64, u32)) -> u32 {
        let count = streams.len();
        let index = *streams.entry(key).or_insert((count % MAX_SHARDS) as u32);
        self.shards[index as usize].get_or_init(|| {
            let mut pool = Pool::new(self.shared.clone(), index, lock(&self.config).clone(), self.history.clone());
            // Read under the stream map's lock, as a sleep and a wake write it.
            if self.refuses_allocations() {
                pool.start_asleep();
            }
            Shard { state: Mutex::new(ShardState { flushed: pool.stats(), pool }) }
        });
        index
    }

    /// Shard `index`, locked for an allocation on `stream`: a wait for another
    /// thread is noted against this thread's entry for the stream, which
    /// `shard_of_stream` has just put first.
    #[inline]
    pub(super) fn shard_to_allocate(&self, index: u32, stream: u64) -> MutexGuard<'_, ShardState<S>> {
        let state = self.shard_mutex(index);
        match state.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.note_contention(stream);
                lock(state)
            }
        }
    }

    /// Counts a wait on `stream`'s shared shard; at `SPLIT_AFTER`, this thread's
    /// later allocations on the stream go to a shard of its own (PyTorch's one lock
    /// per device is what stops its allocator from scaling). Blocks freed there are
    /// reused by this thread only, so a split stream may cache more memory: only
    /// threads that met contention pay that.
    #[cold]
    fn note_contention(&self, stream: u64) {
        RECENT_SHARDS.with(|recent| {
            let mut entry = recent[0].get();
            if entry.allocator != self.id || entry.stream != stream || entry.contended == PRIVATE {
                return;
            }
            entry.contended += 1;
            if entry.contended >= SPLIT_AFTER {
                if let Some(n) = thread_number() {
                    entry.shard = self.shard_for(&mut lock(&self.streams), (stream, n));
                    entry.contended = PRIVATE;
                }
            }
            recent[0].set(entry);
        })
    }

    /// Runs `f` on the pool holding the block at `addr` (`f` answers `None` when its
    /// pool has no such block): first this allocator's shards among the two streams
    /// this thread last allocated on (a thread taking turns on two streams, or on two
    /// devices, frees blocks of both), each only if no other thread holds it, then
    /// the shard that the segment map names. A shard that has answered is not asked
    /// again: its answer stands. The first shard is asked inline, the others out of
    /// line, so that the common case makes no call.
    /// `None`: no shard of this allocator holds the block.
    #[inline(always)]
    pub(super) fn on_owner<T>(&self, addr: u64, f: impl Fn(&mut Pool<S>) -> Option<Result<T>>) -> Option<Result<T>> {
        match self.ask_recent(RECENT_SHARDS.with(|recent| recent[0].get()), &f) {
            Ok(result) => Some(result),
            Err(asked) => self.on_other_owner(addr, asked, &f),
        }
    }

    /// `on_owner` past the first shard (`first`, if it was asked).
    #[inline(never)]
    fn on_other_owner<T>(&self, addr: u64, first: Option<u32>, f: &impl Fn(&mut Pool<S>) -> Option<Result<T>>) -> Option<Result<T>> {
        let second = RECENT_SHARDS.with(|recent| recent[1].get());
        let mut asked = [first, None];
        if first != Some(second.shard) {
            match self.ask_recent(second, f) {
                Ok(result) => return Some(result),
                Err(shard) => asked[1] = shard,
            }
        }
        let index = self.shared.owner_of(addr).filter(|i| !asked.contains(&Some(*i)))?;
        let mut state = self.shard(index);
        let result = f(&mut state.pool);
        state.flush_if_due(&self.totals);
        result
    }

    /// Asks the shard of one of this thread's recent streams, if it is this
    /// allocator's and no other thread holds it: `f`'s answer where that shard holds
    /// the block, else the shard if it was asked.
    #[inline(always)]
    fn ask_recent<T>(&self, recent: Recent, f: &impl Fn(&mut Pool<S>) -> Option<Result<T>>) -> std::result::Result<Result<T>, Option<u32>> {
        if recent.allocator != self.id {
            return Err(None);
        }
        let Ok(mut state) = self.shard_mutex(recent.shard).try_lock() else {
            return Err(None);
        };
        let result = f(&mut state.pool).ok_or(Some(recent.shard))?;
        state.flush_if_due(&self.totals);
        Ok(result)
    }
}
