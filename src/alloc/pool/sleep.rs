//! A pool's part of a sleep and a wake. Every mapping of its expandable segments is
//! unmapped (the addresses stay reserved and the blocks keep them); with offload, only
//! the live blocks' bytes are copied to host memory first, and back after the wake
//! maps the memory again, so that free memory is neither copied nor kept. The host
//! memory stays with the pool after the wake, and blocks promised read-only
//! (`gpurt_mem_read_only`) keep their place in it: the next offload copies only what
//! may have changed (`place`).
//!
//! The allocator (`caching::sleep`) drives it in steps, so that the device's
//! synchronisation and the copies run without the pool's lock: `begin_sleep` under
//! the lock (allocations refused from then on, the memory still mapped), the copies
//! outside it, `commit_sleep` under it again to unmap; a wake likewise
//! (`begin_wake`, the mapping and copies outside, `commit_wake`). Between the steps,
//! frees go on (they move no mapping) and nothing else maps or unmaps the pool's
//! memory: allocations are refused and releases wait for the wake.

use super::super::blocks::OnSleep;
use super::super::history::Action;
use super::super::stats::PoolKind;
use super::{HostStaging, Pool, Release, SegmentSource, Segments, StagedRange, State, MIB, NO_BLOCK};
use crate::error::{Error, Result, Status};

/// Live blocks this close are copied as one range: a copy call costs about what
/// copying this many bytes does (a few microseconds at the host link's speed).
const COPY_GAP_MAX: u64 = MIB / 4;

/// A sleeping pool's memory.
pub struct Sleep {
    /// Each mapping of its expandable segments, as it was mapped.
    mappings: Vec<Mapping>,
    /// With offload, the ranges whose contents are kept (the live blocks, merged
    /// across gaps under `COPY_GAP_MAX`) and their places in `host`, in address order.
    ranges: Vec<StagedRange>,
    /// The host memory holding `ranges`' contents, once offloaded (counted in the
    /// statistics from then on, also while a wake copies from it out of the pool).
    host: Option<Staged>,
    /// Whether the mappings are unmapped: until then the pool is falling asleep
    /// (allocations refused, its memory still mapped).
    unmapped: bool,
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

/// Host memory for offloads, its size, and the ranges whose contents it holds from the
/// last offload into it (in address order; none for new memory).
pub struct Staged {
    pub bytes: u64,
    pub memory: HostStaging,
    pub holds: Vec<StagedRange>,
}

impl Staged {
    /// New host memory, holding nothing yet.
    pub fn new(bytes: u64, memory: HostStaging) -> Staged {
        Staged { bytes, memory, holds: Vec::new() }
    }
}

/// What an offload copies, worked on without the pool's lock: `ranges` into
/// `staging` (host memory kept from an earlier sleep, else new memory of `bytes`).
pub struct SleepCopy {
    pub ranges: Vec<StagedRange>,
    pub bytes: u64,
    pub staging: Option<Staged>,
}

/// What a wake maps and copies back, worked on without the pool's lock.
pub struct WakeWork {
    pub mappings: Vec<(u64, u64)>,
    pub ranges: Vec<StagedRange>,
    pub staging: Option<Staged>,
}

/// A range of live blocks an offload keeps: whether they are promised read-only, and
/// whether every one of them is, unchanged since an offload copied it.
struct LiveRange {
    addr: u64,
    len: u64,
    read_only: bool,
    unchanged: bool,
}

/// Where each of `live` goes in host memory, which of them to copy, and the bytes of
/// host memory that needs. A range that `kept` holds unchanged since the last offload
/// stays where it is, not copied; the others fill the room around those, first fit.
/// Where there is no such range or the others do not fit, every range is copied, one
/// after another from the start.
fn place(live: &[LiveRange], kept: Option<&Staged>) -> (Vec<StagedRange>, Vec<StagedRange>, u64) {
    if let Some(placed) = kept.and_then(|kept| place_around_kept(live, kept)) {
        return placed;
    }
    let ranges = StagedRange::packed(live.iter().map(|r| (r.addr, r.len)));
    let bytes = ranges.last().map_or(0, StagedRange::end);
    (ranges.clone(), ranges, bytes)
}

fn place_around_kept(live: &[LiveRange], kept: &Staged) -> Option<(Vec<StagedRange>, Vec<StagedRange>, u64)> {
    // Each live range's place in `kept`, where it may stay there.
    let held: Vec<Option<StagedRange>> = live
        .iter()
        .map(|r| {
            let i = kept.holds.binary_search_by_key(&r.addr, |h| h.addr).ok()?;
            Some(kept.holds[i]).filter(|h| r.unchanged && h.len == r.len)
        })
        .collect();
    let mut stays: Vec<StagedRange> = held.iter().flatten().copied().collect();
    if stays.is_empty() {
        return None;
    }
    stays.sort_unstable_by_key(|r| r.at);
    let mut room = Vec::with_capacity(stays.len() + 1);
    let mut end = 0;
    for r in &stays {
        if r.at > end {
            room.push((end, r.at));
        }
        end = r.end();
    }
    room.push((end, kept.bytes));
    let (mut ranges, mut copy) = (Vec::with_capacity(live.len()), Vec::new());
    for (r, stay) in live.iter().zip(held) {
        if let Some(stay) = stay {
            ranges.push(stay);
            continue;
        }
        let gap = room.iter_mut().find(|(from, to)| to - from >= r.len)?;
        let placed = StagedRange { addr: r.addr, len: r.len, at: gap.0 };
        gap.0 += r.len;
        ranges.push(placed);
        copy.push(placed);
    }
    Some((ranges, copy, kept.bytes))
}

impl Sleep {
    /// The bytes unmapped (none while it is falling asleep).
    pub(super) fn unmapped_bytes(&self) -> u64 {
        if self.unmapped {
            self.mappings.iter().map(|m| m.size).sum()
        } else {
            0
        }
    }

    /// The bytes whose contents wait in host memory.
    fn offloaded_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len).sum()
    }
}

/// What an allocation from a sleeping pool (or a use of its memory) gets.
pub fn asleep_error() -> Error {
    Error::new(Status::GPURT_ERROR_INVALID_ARGUMENT, "the memory pool is asleep: wake it (gpurt_mem_pool_wake) before allocating from it or using its memory")
}

impl<S: SegmentSource> Pool<S> {
    /// Whether the pool sleeps or is falling asleep (allocations refused).
    pub fn is_asleep(&self) -> bool {
        self.asleep.is_some()
    }

    /// A shard made while its allocator sleeps: asleep with nothing to unmap, so that
    /// it refuses allocations and the wake wakes it with the others.
    pub fn start_asleep(&mut self) {
        self.asleep = Some(Sleep { mappings: Vec::new(), ranges: Vec::new(), host: None, unmapped: true });
    }

    /// A sleep's first step, after the device's work was waited for: deferred frees
    /// completed, wholly free memory released, allocations refused from now on; what
    /// an offload copies is returned. On failure the pool is as it was.
    pub fn begin_sleep(&mut self, offload: bool) -> Result<SleepCopy> {
        if self.asleep.is_some() {
            return Err(Error::invalid_argument("the memory pool is already asleep"));
        }
        self.process_pending(false);
        self.release_free_memory(Release::DeviceIdle);
        let expandable: Vec<u64> = self.expandable.values().map(|e| e.base).collect();
        if let Some((&start, _)) = self.segments.iter().find(|(start, _)| !expandable.contains(start)) {
            let live = self.by_addr.keys().copied().filter(|&a| (start..start + self.segments[&start].size).contains(&a)).min();
            return Err(Error::not_supported(format!(
                "the block at {:#x} lies in a segment of its own (expandable_segments:False), whose addresses do not outlive its memory: only a pool of expandable segments sleeps",
                live.unwrap_or(start)
            )));
        }
        let live = if offload { self.live_ranges() } else { Vec::new() };
        let kept = self.take_host_copy();
        let (ranges, copy, bytes) = place(&live, kept.as_ref());
        // The kept host memory serves if the ranges fit in it; else it goes back now,
        // before the new memory is made.
        let staging = kept.filter(|kept| kept.bytes >= bytes);
        self.asleep = Some(Sleep { mappings: self.mappings(), ranges, host: None, unmapped: false });
        Ok(SleepCopy { ranges: copy, bytes, staging })
    }

    /// Undoes a `begin_sleep` whose sleep failed before any memory was unmapped: awake
    /// again, `staging` kept for the next sleep.
    pub fn cancel_sleep(&mut self, mut staging: Option<Staged>) {
        if self.asleep.as_ref().is_some_and(|s| !s.unmapped) {
            self.asleep = None;
        }
        // A copy may have begun: what it held is in doubt.
        if let Some(staging) = &mut staging {
            staging.holds.clear();
        }
        self.keep_host_copy(staging);
    }

    /// A sleep's last step: every mapping unmapped, its memory back to the driver, the
    /// offloaded contents in `staging`. A failed unmap leaves the pool awake, every
    /// mapping it unmapped mapped again and, where offloaded, its contents restored
    /// (with discard, the contents of the mappings unmapped before the failure are
    /// lost, as the caller asked); a failure to map one back leaves the pool asleep
    /// with just the mappings that are unmapped, for a wake to map.
    pub fn commit_sleep(&mut self, mut staging: Option<Staged>) -> Result<()> {
        self.stats.offload_host_bytes += staging.as_ref().map_or(0, |s| s.bytes as i64);
        let sleep = self.asleep.as_mut().expect("begun");
        // The copies are done: the host memory holds every range, each block promised
        // read-only among them as it is (with discard, none is held any more).
        let offloaded = !sleep.ranges.is_empty();
        if let Some(staging) = &mut staging {
            staging.holds.clone_from(&sleep.ranges);
        }
        sleep.host = staging;
        for &id in self.by_addr.values() {
            if let OnSleep::ReadOnly { kept } = &mut self.blocks[id].on_sleep {
                *kept = offloaded;
            }
        }
        let sleep = self.asleep.as_mut().expect("begun");
        let mappings = sleep.mappings.clone();
        for (i, m) in mappings.iter().enumerate() {
            if let Err(e) = self.shared.shrink(m.start, m.size) {
                let e = e.context(&format!("sleeping the pool, after {i} of its {} mappings were unmapped", mappings.len()));
                return Err(self.undo_unmapping(&mappings[..i], e));
            }
        }
        for m in &mappings {
            self.count_device_memory(m.pool, -(m.size as i64), 1);
            self.note(&[Action::SegmentUnmap], m.start, m.size, m.stream);
        }
        self.join_adjacent_mappings();
        let mappings = self.mappings();
        let sleep = self.asleep.as_mut().expect("begun");
        (sleep.mappings, sleep.unmapped) = (mappings, true);
        let (asleep, offloaded) = (sleep.unmapped_bytes(), sleep.offloaded_bytes());
        self.stats.asleep_bytes += asleep as i64;
        self.stats.offloaded_bytes += offloaded as i64;
        Ok(())
    }

    /// With every mapping unmapped, each run of adjacent ones becomes one, which a wake
    /// maps as one allocation: a mapping a page made an 8 GiB pool's wake 410 driver
    /// calls (16 ms discarded, against 0.5 for the run; restored, 0.89 of a raw copy
    /// against 0.99). Once woken, the run goes back to the driver whole.
    fn join_adjacent_mappings(&mut self) {
        for seg in self.expandable.values_mut() {
            let mut joined: Vec<(u64, u64)> = Vec::with_capacity(seg.maps.len());
            for &(start, size) in &seg.maps {
                match joined.last_mut() {
                    Some(last) if last.0 + last.1 == start => last.1 += size,
                    _ => joined.push((start, size)),
                }
            }
            seg.maps = joined;
        }
    }

    /// After an unmap failed: `unmapped` mapped again and the offloaded contents
    /// restored (all of them: the mappings not unmapped still hold theirs, rewritten
    /// alike), the pool awake; or, where that fails too, asleep with just `unmapped`
    /// unmapped, for a wake to map. The error to report.
    fn undo_unmapping(&mut self, unmapped: &[Mapping], cause: Error) -> Error {
        let sleep = self.asleep.as_ref().expect("begun");
        let spans: Vec<(u64, u64)> = unmapped.iter().map(|m| (m.start, m.size)).collect();
        let restored = self.shared.map_and_restore(&spans, &sleep.ranges, sleep.host.as_ref());
        match restored {
            Ok(()) => {
                let staging = self.asleep.take().and_then(|s| s.host);
                self.keep_counted_host_copy(staging);
                cause.context("the pool stays awake, its memory mapped again")
            }
            Err(again) => {
                // Both steps leave `spans` unmapped when they fail.
                let sleep = self.asleep.as_mut().expect("begun");
                sleep.mappings.retain(|m| spans.contains(&(m.start, m.size)));
                sleep.unmapped = true;
                let (bytes, offloaded) = (sleep.unmapped_bytes(), sleep.offloaded_bytes());
                self.stats.asleep_bytes += bytes as i64;
                self.stats.offloaded_bytes += offloaded as i64;
                for m in unmapped {
                    self.count_device_memory(m.pool, -(m.size as i64), 1);
                }
                cause.context(&format!("mapping it back failed too ({again}); the pool stays asleep with {bytes} bytes unmapped, for a wake to map"))
            }
        }
    }

    /// A wake's first step: what to map and copy back (`None`: not asleep, or only
    /// falling asleep). The host memory leaves the pool until `commit_wake` or
    /// `abort_wake`.
    pub fn begin_wake(&mut self) -> Option<WakeWork> {
        let sleep = self.asleep.as_mut().filter(|s| s.unmapped)?;
        Some(WakeWork { mappings: sleep.mappings.iter().map(|m| (m.start, m.size)).collect(), ranges: sleep.ranges.clone(), staging: sleep.host.take() })
    }

    /// Undoes a `begin_wake` whose wake failed (its memory unmapped again): still
    /// asleep, its contents in `staging`.
    pub fn abort_wake(&mut self, staging: Option<Staged>) {
        if let Some(sleep) = self.asleep.as_mut() {
            sleep.host = staging;
        }
    }

    /// A wake's last step, once its memory is mapped and restored: counted as mapped,
    /// awake, `staging` kept for the next sleep.
    pub fn commit_wake(&mut self, staging: Option<Staged>) {
        let Some(sleep) = self.asleep.take() else { return };
        self.stats.asleep_bytes -= sleep.unmapped_bytes() as i64;
        self.stats.offloaded_bytes -= if sleep.unmapped { sleep.offloaded_bytes() as i64 } else { 0 };
        if sleep.unmapped {
            for m in &sleep.mappings {
                self.count_device_memory(m.pool, m.size as i64, 1);
                self.note(&[Action::SegmentMap], m.start, m.size, m.stream);
            }
        }
        // Kept for the next sleep, which then copies at once (making pinned memory is
        // most of a first offload's time); `empty_cache` gives it back.
        self.keep_counted_host_copy(staging.or(sleep.host));
    }

    /// Whether the shard holds a live block (or a free whose markers cannot be waited
    /// for), its deferred frees completed first: `release_asleep` needs none.
    pub fn holds_live_blocks(&mut self) -> bool {
        self.process_pending(true);
        !self.by_addr.is_empty() || !self.pending.is_empty()
    }

    /// Ends the sleep of a shard that holds no live block (`holds_live_blocks`) without
    /// mapping anything (a pool destroyed while a share group keeps it asleep): its
    /// mappings, unmapped already, become holes, each segment gives its addresses back,
    /// and its offloaded copy goes.
    pub fn release_asleep(&mut self) {
        if !self.asleep.as_ref().is_some_and(|s| s.unmapped) {
            return;
        }
        debug_assert!(self.by_addr.is_empty() && self.pending.is_empty(), "a live block in a sleep given up");
        self.flush_parked();
        let sleep = self.asleep.take().expect("asleep");
        self.stats.asleep_bytes -= sleep.unmapped_bytes() as i64;
        self.stats.offloaded_bytes -= sleep.offloaded_bytes() as i64;
        self.stats.offload_host_bytes -= sleep.host.as_ref().map_or(0, |s| s.bytes as i64);
        self.release_expandable_free_ranges(Release::Unmapped);
    }

    /// A whole wake under the pool's lock, for undoing a sleep that other shards failed.
    pub fn wake_here(&mut self) -> Result<()> {
        let Some(mut work) = self.begin_wake() else {
            self.commit_wake(None);
            return Ok(());
        };
        let woken = self.shared.map_and_restore(&work.mappings, &work.ranges, work.staging.as_ref());
        match woken {
            Ok(()) => {
                self.commit_wake(work.staging.take());
                Ok(())
            }
            Err(e) => {
                self.abort_wake(work.staging.take());
                Err(e)
            }
        }
    }

    /// The host memory an offload of this pool would need now and what it keeps: (live
    /// bytes, kept bytes); none while it sleeps.
    pub fn offload_needs(&self) -> Option<(u64, u64)> {
        if self.asleep.is_some() {
            return None;
        }
        let live = self.live_ranges().iter().map(|r| r.len).sum();
        Some((live, self.host_copy.as_ref().map_or(0, |k| k.bytes)))
    }

    /// Keeps `staging` for the next offload in place of smaller kept memory: whether it
    /// was kept, and what to free without the pool's lock (the memory it replaced, or,
    /// for a sleeping pool or one keeping as much already, `staging` itself).
    pub fn offer_host_copy(&mut self, staging: Staged) -> (bool, Option<Staged>) {
        let kept = self.host_copy.as_ref().map_or(0, |k| k.bytes);
        if self.asleep.is_some() || kept >= staging.bytes {
            return (false, Some(staging));
        }
        let old = self.take_host_copy();
        self.keep_host_copy(Some(staging));
        (true, old)
    }

    /// The host memory kept from the last offload, out of the pool and its count.
    pub(super) fn take_host_copy(&mut self) -> Option<Staged> {
        let kept = self.host_copy.take()?;
        self.stats.offload_host_bytes -= kept.bytes as i64;
        Some(kept)
    }

    /// Keeps host memory the statistics do not count yet (new, or taken out of them).
    fn keep_host_copy(&mut self, staging: Option<Staged>) {
        self.stats.offload_host_bytes += staging.as_ref().map_or(0, |s| s.bytes as i64);
        self.keep_counted_host_copy(staging);
    }

    /// Keeps host memory counted since the sleep that filled it (`commit_sleep`).
    fn keep_counted_host_copy(&mut self, staging: Option<Staged>) {
        debug_assert!(self.host_copy.is_none(), "one kept host copy at a time");
        self.host_copy = staging;
    }

    /// Every mapping of the expandable segments.
    fn mappings(&self) -> Vec<Mapping> {
        let mut all = Vec::new();
        for (&(stream, _), seg) in &self.expandable {
            let pool = self.blocks[seg.tail].pool;
            all.extend(seg.maps.iter().map(|&(start, size)| Mapping { start, size, pool, stream }));
        }
        all
    }

    /// The bytes an offload keeps: every block not free (allocated, or freed but still
    /// in use on other streams) and not marked `discard_on_sleep`, blocks closer than
    /// `COPY_GAP_MAX` in one range where no hole lies between them and both or neither
    /// are promised read-only (so that a range of them may stay in host memory as it
    /// is); in address order.
    fn live_ranges(&self) -> Vec<LiveRange> {
        let mut ranges: Vec<LiveRange> = Vec::new();
        for seg in self.expandable.values() {
            let mut id = self.segments[&seg.base].first;
            let mut joinable = false; // whether the last range may grow to the next live block
            while id != NO_BLOCK {
                let b = &self.blocks[id];
                match b.state {
                    State::Free | State::Parked => {}
                    State::Unmapped => joinable = false,
                    _ if b.on_sleep == OnSleep::Discard => {}
                    _ => {
                        let read_only = matches!(b.on_sleep, OnSleep::ReadOnly { .. });
                        let unchanged = b.state == State::Allocated && b.on_sleep == OnSleep::ReadOnly { kept: true };
                        match ranges.last_mut() {
                            Some(r) if joinable && r.read_only == read_only && b.addr - (r.addr + r.len) <= COPY_GAP_MAX => {
                                r.len = b.addr + b.size - r.addr;
                                r.unchanged &= unchanged;
                            }
                            _ => {
                                ranges.push(LiveRange { addr: b.addr, len: b.size, read_only, unchanged });
                                joinable = true;
                            }
                        }
                    }
                }
                id = b.next;
            }
        }
        ranges.sort_unstable_by_key(|r| r.addr);
        ranges
    }
}

/// The steps of a wake that touch only the source, run without a pool's lock.
impl<S: SegmentSource> Segments<S> {
    /// Maps each of `mappings` again at its address: all, or none on failure.
    pub fn map_again(&self, mappings: &[(u64, u64)]) -> Result<()> {
        for (i, &(start, size)) in mappings.iter().enumerate() {
            if let Err(e) = self.grow(start, size) {
                self.unmap_again(&mappings[..i]);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Unmaps `mappings` that a wake mapped, to undo it. The driver refusing to unmap
    /// memory it just mapped leaves it mapped and counted as reserved, which the
    /// next wake's map then refuses: logged, as nothing better can be done.
    pub fn unmap_again(&self, mappings: &[(u64, u64)]) {
        for &(start, size) in mappings {
            if let Err(e) = self.shrink(start, size) {
                crate::log::log(crate::log::Level::Error, &format!("undoing a wake: {e}"));
            }
        }
    }

    /// Maps `mappings` again and copies `ranges` back from `staging` into them: all
    /// done, or on failure all unmapped again.
    pub fn map_and_restore(&self, mappings: &[(u64, u64)], ranges: &[StagedRange], staging: Option<&Staged>) -> Result<()> {
        self.map_again(mappings)?;
        let Some(staging) = staging.filter(|_| !ranges.is_empty()) else { return Ok(()) };
        self.source.restore(ranges, &staging.memory).inspect_err(|_| self.unmap_again(mappings))
    }
}
