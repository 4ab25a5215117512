//! Expandable segments: per stream and pool kind, one reserved address range whose
//! first bytes are mapped, grown by driver mappings as requests need and released
//! from its free end (`expandable_segments:True`). The pool logic (free lists,
//! splitting, coalescing) treats one as an ordinary segment of its mapped size.

use std::any::Any;

use super::super::blocks::{Block, BlockId, State, NO_BLOCK};
use super::super::history::Action;
use super::super::stats::PoolKind;
use super::{pool_index, Pool, Segment, SegmentSource, MIB};
use crate::error::{Error, Result, Status};

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

/// An expandable segment: a reserved address range whose first bytes are backed by
/// memory. It is also in `segments`, with its mapped size.
#[derive(Debug, Clone)]
pub(super) struct Expandable {
    pub(super) base: u64,
    pub(super) reserved: u64,
    /// The block that ends the mapped bytes.
    pub(super) tail: BlockId,
    /// Where each mapping starts, in order (each ends where the next starts, the last
    /// at the mapped end): the driver unmaps whole mappings only, so memory goes back
    /// from a mapping's start.
    pub(super) maps: Vec<u64>,
    /// The pool's allocation count when this segment last grew.
    pub(super) allocations_at_growth: i64,
}

impl<S: SegmentSource> Pool<S> {
    /// Records that block `id` now ends its segment, if that segment is an
    /// expandable one.
    pub(super) fn note_tail(&mut self, id: BlockId) {
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

    /// A free block of at least `rounded` bytes at the end of `stream`'s expandable
    /// segment of `pool`: the segment is created, or grown by what its free tail
    /// block lacks or, if more, a share of what it has mapped (granularity multiples).
    pub(super) fn grow_expandable(&mut self, pool: PoolKind, stream: u64, rounded: u64) -> Result<BlockId> {
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
        let step = if self.config.exact_segments {
            needed
        } else if allocations - allocations_at_growth >= EXPANDABLE_QUIET_ALLOCATIONS {
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
    pub(super) fn release_expandable_tails(&mut self) {
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

    /// The expandable segments' invariants, for `check_invariants`.
    pub(super) fn check_expandable_invariants(&self) -> std::result::Result<(), String> {
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
        Ok(())
    }
}

/// A sleeping pool's memory: every mapping of its expandable segments, unmapped (the
/// addresses stay reserved and the blocks keep them), and with offload each one's
/// contents in host memory.
pub struct Sleep {
    /// Each mapping, as it was mapped.
    mappings: Vec<Mapping>,
    /// Each mapping's contents, in the same order, where the sleep offloaded them.
    copies: Vec<Box<dyn Any + Send>>,
}

/// One driver mapping of an expandable segment.
#[derive(Clone, Copy)]
struct Mapping {
    start: u64,
    size: u64,
    pool: PoolKind,
    /// The stream whose segment it is.
    stream: u64,
}

impl Sleep {
    /// The bytes the sleep unmapped.
    pub(super) fn bytes(&self) -> u64 {
        self.mappings.iter().map(|m| m.size).sum()
    }

    /// (bytes asleep, bytes offloaded), as the statistics count them.
    fn counted(&self) -> (i64, i64) {
        let bytes = self.bytes() as i64;
        (bytes, if self.copies.is_empty() { 0 } else { bytes })
    }
}

/// What an allocation from a sleeping pool gets.
pub fn asleep_error() -> Error {
    Error::new(Status::GPURT_ERROR_INVALID_ARGUMENT, "the memory pool is asleep: wake it before allocating from it")
}

impl<S: SegmentSource> Pool<S> {
    pub fn is_asleep(&self) -> bool {
        self.asleep.is_some()
    }

    /// A sleep's fallible first half: deferred frees are waited for and wholly free
    /// memory released, the device's work is waited for and, with `offload`, every
    /// mapping's contents copied to host memory. Nothing is unmapped yet: on failure
    /// the pool is as it was, its memory mapped.
    pub fn prepare_sleep(&mut self, offload: bool) -> Result<Sleep> {
        if self.asleep.is_some() {
            return Err(Error::invalid_argument("the memory pool is already asleep"));
        }
        self.process_pending(true);
        self.release_free_segments();
        let expandable: Vec<u64> = self.expandable.values().map(|e| e.base).collect();
        if let Some((&start, _)) = self.segments.iter().find(|(start, _)| !expandable.contains(start)) {
            let live = self.by_addr.keys().copied().filter(|&a| (start..start + self.segments[&start].size).contains(&a)).min();
            return Err(Error::not_supported(format!(
                "the block at {:#x} lies in a segment of its own (expandable_segments:False), whose addresses do not outlive its memory: only a pool of expandable segments sleeps",
                live.unwrap_or(start)
            )));
        }
        let mappings = self.mappings();
        self.shared.source.synchronize()?;
        let mut copies = Vec::new();
        for m in mappings.iter().filter(|_| offload) {
            let reuse = self.host_copies.iter().position(|c| c.0 == m.size).map(|i| self.host_copies.swap_remove(i).1);
            match self.shared.source.offload(m.start, m.size, reuse) {
                Ok(copy) => copies.push(copy),
                Err(e) => {
                    self.host_copies.extend(mappings.iter().map(|m| m.size).zip(copies));
                    return Err(e);
                }
            }
        }
        Ok(Sleep { mappings, copies })
    }

    /// A sleep's second half, which cannot fail: every mapping unmapped, its memory
    /// back to the driver; the blocks keep their addresses.
    pub fn commit_sleep(&mut self, sleep: Sleep) {
        let (asleep, offloaded) = sleep.counted();
        self.stats.asleep_bytes += asleep;
        self.stats.offloaded_bytes += offloaded;
        for &m in &sleep.mappings {
            self.shared.shrink(m.start, m.size);
            self.count_device_memory(m.pool, -(m.size as i64));
            self.note(&[Action::SegmentUnmap], m.start, m.size, m.stream);
        }
        self.asleep = Some(sleep);
    }

    /// A wake's fallible first half: every mapping mapped again at its address and,
    /// where the sleep offloaded them, its contents copied back. On failure the pool
    /// is as it was, asleep and unmapped.
    pub fn map_for_wake(&mut self) -> Result<()> {
        let sleep = self.asleep.as_ref().ok_or_else(|| Error::invalid_argument("the memory pool is not asleep"))?;
        for (i, m) in sleep.mappings.iter().enumerate() {
            if let Err(e) = self.shared.grow(m.start, m.size) {
                self.unmap_mappings(i);
                return Err(e);
            }
        }
        let sleep = self.asleep.as_ref().expect("asleep");
        for (m, copy) in sleep.mappings.iter().zip(&sleep.copies) {
            if let Err(e) = self.shared.source.restore(m.start, m.size, copy.as_ref()) {
                self.unmap_mappings(sleep.mappings.len());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Undoes a `map_for_wake` that succeeded (another shard's failed): unmapped
    /// again, still asleep, its host copies kept.
    pub fn unmap_after_wake(&mut self) {
        let n = self.asleep.as_ref().map_or(0, |s| s.mappings.len());
        self.unmap_mappings(n);
    }

    /// A wake's second half, after `map_for_wake`: counted as mapped, awake, the host
    /// copies freed.
    pub fn commit_wake(&mut self) {
        let Some(sleep) = self.asleep.take() else { return };
        let (asleep, offloaded) = sleep.counted();
        self.stats.asleep_bytes -= asleep;
        self.stats.offloaded_bytes -= offloaded;
        for &m in &sleep.mappings {
            self.count_device_memory(m.pool, m.size as i64);
            self.note(&[Action::SegmentMap], m.start, m.size, m.stream);
        }
        // Kept for the next sleep, which then copies at once (the pinned memory's
        // allocation is most of a first offload's time); `empty_cache` frees them.
        self.host_copies.extend(sleep.mappings.iter().map(|m| m.size).zip(sleep.copies));
    }

    /// Unmaps the first `n` mappings of the sleep (mapped by a wake that is undone).
    fn unmap_mappings(&self, n: usize) {
        for m in &self.asleep.as_ref().expect("asleep").mappings[..n] {
            self.shared.shrink(m.start, m.size);
        }
    }

    /// Every mapping of the expandable segments.
    fn mappings(&self) -> Vec<Mapping> {
        let mut all = Vec::new();
        for (&(stream, _), seg) in &self.expandable {
            let segment = &self.segments[&seg.base];
            let (end, pool) = (seg.base + segment.size, self.blocks[segment.first].pool);
            let ends = seg.maps.iter().skip(1).copied().chain([end]);
            all.extend(seg.maps.iter().zip(ends).map(|(&start, end)| Mapping { start, size: end - start, pool, stream }));
        }
        all
    }
}
