//! What the shards of one allocator share: where segments come from (`SegmentSource`:
//! the driver on a GPU, plain address ranges in tests), the cap on the bytes they
//! reserve together, and which shard owns each segment.

use std::any::Any;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::super::owners::{SegmentOwner, SegmentOwners};
use super::MIB;
use crate::error::{Error, Result, Status};

/// Host memory a source copies a sleeping pool's contents into (`offload`), of the
/// source's own kind.
pub type HostStaging = Box<dyn Any + Send>;

/// A range of device memory, `len` bytes at `addr`, whose contents lie at byte `at` of
/// host staging.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct StagedRange {
    pub addr: u64,
    pub len: u64,
    pub at: u64,
}

impl StagedRange {
    /// The staging bytes it takes up to, from the staging's start.
    pub fn end(&self) -> u64 {
        self.at + self.len
    }

    /// `(address, bytes)` ranges, placed one after another from the staging's start.
    pub fn packed(ranges: impl IntoIterator<Item = (u64, u64)>) -> Vec<StagedRange> {
        let mut at = 0;
        ranges
            .into_iter()
            .map(|(addr, len)| {
                at += len;
                StagedRange { addr, len, at: at - len }
            })
            .collect()
    }
}

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

    /// Whether `map` can back reserved addresses with memory: a pool over a source
    /// that cannot takes whole segments instead.
    fn can_map(&self) -> bool {
        false
    }
    /// Reserves `size` bytes of addresses, backed by nothing yet.
    fn reserve_addresses(&self, _size: u64) -> Result<u64> {
        Err(Error::not_supported("this memory source has no expandable segments"))
    }
    /// Backs `[addr, addr + size)`, inside a reservation, with memory.
    fn map(&self, _addr: u64, _size: u64) -> Result<()> {
        Err(Error::not_supported("this memory source has no expandable segments"))
    }
    /// Returns the memory behind `[addr, addr + size)`, one whole mapping; the
    /// addresses stay reserved. On failure the memory stays mapped.
    fn unmap(&self, _addr: u64, _size: u64) -> Result<()> {
        Ok(())
    }
    /// Returns a reservation, wholly unmapped.
    fn free_addresses(&self, _addr: u64, _size: u64) {}
    /// Waits for all work queued on the source's device (a pool's sleep, before it
    /// unmaps the memory that work may use).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    /// Waits for the work queued on `stream` so far, before a release unmaps free
    /// memory of that stream's segments which the work may still use (a block freed
    /// in stream order). `Ok(false)`: it cannot be waited for now (the stream
    /// captures, or waiting would join a capture under way); the memory then stays
    /// mapped for a later release.
    fn wait_for_stream(&self, _stream: u64) -> Result<bool> {
        Ok(true)
    }
    /// Host memory of `bytes` bytes for `offload` to copy into (pinned on the driver,
    /// so that the copies run at the link's speed).
    fn host_staging(&self, _bytes: u64) -> Result<HostStaging> {
        Err(Error::not_supported("this memory source cannot offload its memory"))
    }
    /// Copies each of `ranges`, all mapped, into `host` at its place there, and waits
    /// for the copies (a pool's sleep with offload).
    fn offload(&self, _ranges: &[StagedRange], _host: &mut HostStaging) -> Result<()> {
        Err(Error::not_supported("this memory source cannot offload its memory"))
    }
    /// Copies `ranges` back from their places in `host` into their memory, mapped again.
    fn restore(&self, _ranges: &[StagedRange], _host: &HostStaging) -> Result<()> {
        Err(Error::not_supported("this memory source cannot offload its memory"))
    }
    /// Whether the pool's free memory must stay mapped: a graph pool's, whose graphs
    /// replay into the blocks freed during their capture (as PyTorch keeps a private
    /// pool whole while graphs use it). Its free memory then goes back only when the
    /// pool is released.
    fn keeps_free_memory(&self) -> bool {
        false
    }
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
    /// Graphs captured into the allocator's memory in stream order
    /// (`gpurt_stream_begin_capture_shared`): while any lives, free memory stays mapped.
    graph_holds: Arc<AtomicUsize>,
    /// The first stream that grew an expandable segment here (`NO_MAIN_STREAM` until
    /// then): the process's main stream; the others are side streams (`is_side_stream`).
    main_stream: AtomicU64,
}

const NO_MAIN_STREAM: u64 = u64::MAX;

/// A graph's claim on the memory of an allocator it was captured into in stream order:
/// its replays use blocks that were freed during the capture, so while any claim lives
/// the allocator unmaps none of its free memory (no `empty_cache`, collection or
/// out-of-memory release; a sleep maps it all back). Cloned for each exec of the graph.
pub struct KeepMapped(Arc<AtomicUsize>);

impl KeepMapped {
    fn new(count: &Arc<AtomicUsize>) -> KeepMapped {
        count.fetch_add(1, Ordering::AcqRel);
        KeepMapped(count.clone())
    }
}

impl Clone for KeepMapped {
    fn clone(&self) -> KeepMapped {
        KeepMapped::new(&self.0)
    }
}

impl Drop for KeepMapped {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<S: SegmentSource> Segments<S> {
    pub fn new(source: S) -> Arc<Self> {
        Arc::new(Segments {
            source,
            reserved: AtomicU64::new(0),
            limit: AtomicU64::new(u64::MAX),
            owners: SegmentOwners::default(),
            span: (AtomicU64::new(u64::MAX), AtomicU64::new(0)),
            graph_holds: Arc::default(),
            main_stream: AtomicU64::new(NO_MAIN_STREAM),
        })
    }

    /// Whether `stream` is a side stream: not the first one asked about (the first
    /// growth's). A side stream of a PyTorch program warms a model up before a CUDA
    /// graph capture, or copies, and keeps little but its cuBLAS workspace.
    pub(super) fn is_side_stream(&self, stream: u64) -> bool {
        match self.main_stream.compare_exchange(NO_MAIN_STREAM, stream, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => false,
            Err(main) => main != stream,
        }
    }

    /// A claim that keeps the free memory mapped (see `KeepMapped`).
    pub fn keep_mapped(&self) -> KeepMapped {
        KeepMapped::new(&self.graph_holds)
    }

    /// The graphs that keep the free memory mapped.
    pub fn graph_holds(&self) -> usize {
        self.graph_holds.load(Ordering::Acquire)
    }

    /// Whether free memory must stay mapped: the source's own rule (a graph pool's) or
    /// a graph captured in stream order.
    pub fn keeps_free_memory(&self) -> bool {
        self.source.keeps_free_memory() || self.graph_holds() > 0
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

    pub(super) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Counts `size` more reserved bytes, unless that passes the cap.
    pub(super) fn within_cap(&self, size: u64) -> Result<()> {
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
    pub(super) fn take(&self, size: u64, stream: u64, shard: u32) -> Result<u64> {
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
    pub(super) fn give_back(&self, segments: &[(u64, u64)]) {
        self.owners.remove(segments.iter().map(|&(start, _)| start).collect());
        for &(addr, size) in segments {
            self.source.release(addr, size);
            self.reserved.fetch_sub(size, Ordering::Relaxed);
        }
    }

    /// Reserves the addresses of an expandable segment for `shard`.
    pub(super) fn reserve_expandable(&self, size: u64, shard: u32) -> Result<u64> {
        let addr = self.source.reserve_addresses(size)?;
        self.own(addr, size, shard);
        Ok(addr)
    }

    /// Backs `size` more bytes of an expandable segment at `addr`, within the cap.
    pub(crate) fn grow(&self, addr: u64, size: u64) -> Result<()> {
        self.within_cap(size)?;
        self.source.map(addr, size).inspect_err(|_| {
            self.reserved.fetch_sub(size, Ordering::Relaxed);
        })
    }

    /// Unmaps one whole mapping of an expandable segment; counted as given back only
    /// when the driver unmapped it.
    pub(crate) fn shrink(&self, addr: u64, size: u64) -> Result<()> {
        self.source.unmap(addr, size)?;
        self.reserved.fetch_sub(size, Ordering::Relaxed);
        Ok(())
    }

    pub(super) fn free_expandable(&self, addr: u64, size: u64) {
        self.owners.remove(vec![addr]);
        self.source.free_addresses(addr, size);
    }

    /// Records `shard` as the owner of the segment `[addr, addr + size)`.
    pub(super) fn own(&self, addr: u64, size: u64, shard: u32) {
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
