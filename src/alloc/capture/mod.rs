//! Private memory pools of captured graphs (`torch.cuda.graph_pool_handle()`):
//! gpurt allocations made while a stream captures through gpurt come from the
//! capture's pool, so that the addresses baked into a graph stay valid for every
//! replay and nobody else gets them meanwhile. A shared capture
//! (`gpurt_stream_begin_capture_shared`) instead allocates from a pool the stream
//! uses anyway, in stream order (RMM's and ggml's own pools' way): its graph holds a
//! `KeepMapped` claim on that pool rather than memory of its own. `pools` keeps the
//! bookkeeping (which capture allocates from which pool, references), tested on host memory;
//! this file runs it over the driver: the capture-mode dance around `cuMemAlloc`,
//! the device synchronisation a pool's last release needs, and the holders (graphs
//! and execs, by handle value) that keep a pool's addresses alive. `foreign` adopts
//! the captures gpurt did not begin (a framework's own), whose driver graphs hold
//! their pools instead.

pub mod foreign;
pub mod pools;

pub use foreign::StreamWaits;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use cudarc::driver::sys;

use super::caching::CachingAllocator;
use super::config::AllocConfig;
use super::pool::{HostStaging, KeepMapped, SegmentSource, StagedRange};
use super::stats::{gpurt_memory_stats_t, RetiredStats};
use crate::stream::key::{native_stream_of, stream_key};
pub(crate) use super::upstream::with_relaxed_capture;
use super::upstream::DriverSource;
use crate::boundary::lock;
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result, Status};
use pools::GraphPools;

/// Device memory for private pools: the device's driver source, with this thread's
/// capture mode relaxed around `cuMemAlloc` (a plain `cuMemAlloc` would invalidate a
/// global or thread-local capture; the allocation itself is not part of the graph).
pub struct CaptureSource {
    driver: DriverSource,
    /// Set once the pool has no graph left and the device was synchronised: blocks
    /// freed during capture with uses on other streams are then reusable.
    released: AtomicBool,
}

impl CaptureSource {
    pub fn device(&self) -> i32 {
        self.driver.device()
    }
}

/// The marker of a block freed during capture with uses on other streams: events
/// cannot be queried inside a capture, so such a block waits for the pool's release.
const AFTER_RELEASE: u64 = u64::MAX;

/// `size` bytes from `driver`'s `cuMemAlloc`, legal while this thread's stream
/// captures: the capture mode is relaxed around the call (the allocation is not part
/// of the graph; a plain `cuMemAlloc` would invalidate a global or thread-local capture).
pub(crate) fn alloc_beside_capture(driver: &DriverSource, size: u64) -> Result<u64> {
    with_relaxed_capture(|| driver.alloc_segment(size))
}

impl SegmentSource for CaptureSource {
    fn allocate(&self, size: u64, _stream: u64) -> Result<u64> {
        alloc_beside_capture(&self.driver, size)
    }
    fn release(&self, addr: u64, size: u64) {
        self.driver.release(addr, size)
    }
    fn record(&self, stream: u64) -> Result<u64> {
        let native = native_stream_of(stream) as sys::CUstream;
        let capture = device::with_device(self.device(), || crate::stream::native_capture_status(native))?;
        if capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Ok(AFTER_RELEASE);
        }
        self.driver.record(stream)
    }
    fn is_done(&self, marker: u64) -> bool {
        match marker {
            AFTER_RELEASE => self.released.load(Ordering::Acquire),
            m => self.driver.is_done(m),
        }
    }
    fn wait(&self, marker: u64) {
        if marker != AFTER_RELEASE {
            self.driver.wait(marker)
        }
    }
    fn memory_info(&self) -> (u64, u64) {
        self.driver.memory_info()
    }
    fn history_device(&self) -> Option<i32> {
        self.driver.history_device()
    }
    // Expandable segments, as the driver's (so that a graph pool can sleep); reserving
    // and mapping happen during a capture, with the capture mode relaxed as for
    // `allocate`.
    fn can_map(&self) -> bool {
        self.driver.can_map()
    }
    fn reserve_addresses(&self, size: u64) -> Result<u64> {
        with_relaxed_capture(|| self.driver.reserve_addresses(size))
    }
    fn map(&self, addr: u64, size: u64) -> Result<()> {
        with_relaxed_capture(|| self.driver.map(addr, size))
    }
    fn unmap(&self, addr: u64, size: u64) -> Result<()> {
        with_relaxed_capture(|| self.driver.unmap(addr, size))
    }
    fn free_addresses(&self, addr: u64, size: u64) {
        self.driver.free_addresses(addr, size)
    }
    fn map_granularity(&self) -> u64 {
        self.driver.map_granularity()
    }
    /// Until the pool is released, its graphs replay into the blocks freed during
    /// their capture: no collection, out-of-memory retry or sleep may unmap them.
    fn keeps_free_memory(&self) -> bool {
        !self.released.load(Ordering::Acquire)
    }
    fn synchronize(&self) -> Result<()> {
        self.driver.synchronize()
    }
    fn wait_for_stream(&self, stream: u64) -> Result<bool> {
        if !foreign::may_wait_for(stream) {
            return Ok(false);
        }
        self.driver.wait_for_stream(stream)
    }
    fn host_staging(&self, bytes: u64) -> Result<HostStaging> {
        self.driver.host_staging(bytes)
    }
    fn offload(&self, ranges: &[StagedRange], host: &mut HostStaging) -> Result<()> {
        self.driver.offload(ranges, host)
    }
    fn restore(&self, ranges: &[StagedRange], host: &HostStaging) -> Result<()> {
        self.driver.restore(ranges, host)
    }
    /// As the default, except that no wait makes an `AFTER_RELEASE` marker done.
    fn settle(&self, markers: &mut Vec<u64>, wait: bool) -> bool {
        markers.retain(|&m| {
            if wait && m != AFTER_RELEASE {
                self.wait(m);
                return false;
            }
            !self.is_done(m)
        });
        markers.is_empty()
    }
}

/// Allocates `size` bytes for a stream key from the pool a shared capture shares.
pub type SharedMalloc = Arc<dyn Fn(u64, u64) -> Result<u64> + Send + Sync>;

/// Where gpurt allocations on a stream that captures through gpurt come from.
pub enum CaptureRoute {
    /// The capture's private pool.
    Private(Arc<CachingAllocator<CaptureSource>>),
    /// The pool a shared capture allocates from in stream order; the caller relaxes
    /// the capture mode around the call (the pool may map memory).
    Shared(SharedMalloc),
}

/// What a capture's graph, and each exec made from it, holds.
pub enum Held {
    /// A reference to private pool (id).
    Private(u64),
    /// A claim on a shared capture's pool.
    Shared(KeepMapped),
}

impl Held {
    /// Gives it up: a private pool's last reference collects the pool.
    pub fn release(self) {
        if let Held::Private(id) = self {
            release_pool(id);
        }
    }
}

/// The pools, and which graph or exec holds which pool.
struct Registry {
    pools: GraphPools<CaptureSource>,
    /// Shared captures in progress (the driver's capture id): the pool's allocation
    /// and the claim their graph will hold.
    shared: HashMap<u64, (SharedMalloc, KeepMapped)>,
    /// Graph or exec handle value to what it holds.
    holders: HashMap<u64, Vec<Held>>,
    /// Captures gpurt did not begin (the driver's id) to their private pool, until
    /// their driver graph is gone (`foreign`).
    foreign: HashMap<u64, u64>,
    /// Per device, the statistics of pools that are gone.
    retired: RetiredStats,
}

impl Registry {
    /// Where capture `capture`'s allocations come from, if it is gpurt's.
    fn route(&self, capture: u64) -> Option<CaptureRoute> {
        if let Some(private) = self.pools.for_capture(capture) {
            return Some(CaptureRoute::Private(private));
        }
        if let Some(private) = self.foreign.get(&capture).and_then(|&id| self.pools.allocator(id)) {
            return Some(CaptureRoute::Private(private));
        }
        self.shared.get(&capture).map(|(malloc, _)| CaptureRoute::Shared(malloc.clone()))
    }

    /// Collects pool `id`; a pool that goes leaves its statistics to its device.
    fn collect(&mut self, id: u64) {
        if let Some(gone) = self.pools.collect(id) {
            self.retired.retire(gone.source().device(), &gone.stats());
        }
    }
}

/// Collects again the graph pools nothing references: a collection leaves free
/// memory mapped while its stream captures (see `Release::AfterWaiting`).
pub fn collect_unreferenced() {
    with_registry(|r| r.pools.unreferenced().into_iter().for_each(|id| r.collect(id)));
}

/// Collects graph pool `id` after a wake: its last graph may have gone while it slept.
pub fn collect_woken(id: u64) {
    with_registry(|r| r.collect(id));
}

/// Whether `addr` lies in a graph pool that sleeps or falls asleep.
pub fn holds_asleep(addr: u64) -> bool {
    with_registry(|r| r.pools.allocators().any(|a| a.holds_asleep(addr)))
}

/// Adds the statistics of `device`'s private pools, live and gone, to `stats` (the
/// device allocator's): gpurt_malloc during capture counts like any other. Current
/// values and totals are exact; a live pool's peak is added to the totals' current
/// value, an upper bound of the true peak.
pub fn add_private_stats(device: i32, stats: &mut gpurt_memory_stats_t) {
    foreign::settle(StreamWaits::Only(None));
    with_registry(|r| {
        r.retired.add_to(device, stats);
        for a in r.pools.allocators().filter(|a| a.source().device() == device) {
            stats.absorb(&a.stats(), &gpurt_memory_stats_t::new());
        }
    })
}

/// The live private pools of `device`, with their ids.
pub fn private_pools(device: i32) -> Vec<(u64, Arc<CachingAllocator<CaptureSource>>)> {
    with_registry(|r| r.pools.by_id().filter(|(_, a)| a.source().device() == device).map(|(id, a)| (id, a.clone())).collect())
}

/// Resets the peaks (`accumulated`: the totals) of `device`'s private pools.
pub fn reset_private_stats(device: i32, accumulated: bool) {
    with_registry(|r| {
        r.pools.allocators().filter(|a| a.source().device() == device).for_each(|a| a.reset_stats(accumulated));
        r.retired.reset(device, accumulated);
    })
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
/// Pools alive: while zero, a free that misses the device allocator asks no further.
static LIVE_POOLS: AtomicUsize = AtomicUsize::new(0);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard = lock(&REGISTRY);
    let registry = guard.get_or_insert_with(|| Registry {
        pools: GraphPools::default(),
        shared: HashMap::new(),
        holders: HashMap::new(),
        foreign: HashMap::new(),
        retired: RetiredStats::default(),
    });
    let result = f(registry);
    LIVE_POOLS.store(registry.pools.len(), Ordering::Release);
    result
}

/// A new pool on `device` (a resolved ordinal) with `config`, with one reference
/// for the caller.
pub fn new_pool(device: i32, config: AllocConfig) -> u64 {
    // Under the process's configuration, expandable segments too (the default), so
    // that the pool can sleep: the source maps with the capture mode relaxed. Mapped
    // exactly as requests need (`exact_segments`): a graph pool grows once, while its
    // graphs are captured, so a growth step's speed buys nothing there and its
    // overshoot would stay mapped for the graphs' lifetime.
    let config = AllocConfig { exact_segments: true, ..config };
    with_registry(|r| r.pools.create(CaptureSource { driver: DriverSource::new(device), released: AtomicBool::new(false) }, config))
}

/// Another reference to pool `id`, for a capture on `device`.
pub fn retain_for(id: u64, device: i32) -> Result<()> {
    with_registry(|r| match r.pools.allocator(id).map(|a| a.source().device()) {
        Some(d) if d == device => r.pools.retain(id),
        Some(d) => Err(Error::invalid_argument(format!("the graph pool is on device {d}, the stream on device {device}"))),
        None => Err(Error::invalid_handle("the graph pool no longer exists")),
    })
}

/// Starts capture `body` (a conditional node's body, which the driver already
/// captures) allocating as capture `outer` does: from its private pool or its shared
/// pool; nothing is registered when `outer` is not gpurt's (`end` then finds nothing).
pub fn begin_body(outer: u64, device: i32, body: u64) -> Result<()> {
    let (private, shared) = with_registry(|r| (r.pools.pool_of_capture(outer), r.shared.get(&outer).map(|(m, k)| (m.clone(), k.clone()))));
    match (private, shared) {
        (Some(id), _) => {
            retain_for(id, device)?;
            begin(id, || Ok(body))
        }
        (None, Some((malloc, keep))) => begin_shared(malloc, keep, || Ok(body)),
        (None, None) => Ok(()),
    }
}

/// Pool `id`'s allocator and device, while it exists.
pub fn pool(id: u64) -> Option<Arc<CachingAllocator<CaptureSource>>> {
    with_registry(|r| r.pools.allocator(id))
}

/// Starts a capture into pool `id`, which the caller holds a reference to and gives
/// up: `start` begins the driver's capture and gives its id. Until the capture
/// ends, gpurt allocations on its streams come from the pool.
pub fn begin(id: u64, start: impl FnOnce() -> Result<u64>) -> Result<()> {
    capture_starting(); // before the capture starts, so no pool release synchronises under it
    let registered = start().and_then(|capture| with_registry(|r| r.pools.begin_capture(capture, id)));
    // The capture holds its own reference from here; drop the caller's.
    release_pool(id);
    count_capture(registered)
}

/// Starts a shared capture: `start` begins the driver's capture and gives its id.
/// Until the capture ends, gpurt allocations on its streams come from `malloc`'s
/// pool, whose `keep` claim the graph will hold.
pub fn begin_shared(malloc: SharedMalloc, keep: KeepMapped, start: impl FnOnce() -> Result<u64>) -> Result<()> {
    capture_starting();
    let registered = start().map(|capture| with_registry(|r| drop(r.shared.insert(capture, (malloc, keep)))));
    count_capture(registered)
}

/// Ends the gate's count of a capture that did not begin.
fn count_capture(registered: Result<()>) -> Result<()> {
    if registered.is_err() {
        capture_finished();
    }
    registered
}

/// Ends capture `capture`: what its graph holds (the private pool's reference or the
/// shared pool's claim), which passes to the caller (`give_to` a graph, or `release`).
pub fn end(capture: u64) -> Option<Held> {
    let held = with_registry(|r| {
        let private = r.pools.end_capture(capture).map(Held::Private);
        private.or_else(|| r.shared.remove(&capture).map(|(_, keep)| Held::Shared(keep)))
    });
    if held.is_some() {
        capture_finished();
    }
    held
}

/// Orders gpurt's captures against the device-wide synchronisation that a pool's
/// last release needs: `cuCtxSynchronize` while another thread captures invalidates
/// that capture (and crashed the driver inside `cuCtxSynchronize` when they raced:
/// tests/c/soak.c, 8 threads on an H100). `active` counts captures begun through
/// gpurt and not yet ended; while any is, released pools wait in `deferred`, and the
/// last capture to end synchronises and collects them. Holding the gate during the
/// synchronisation keeps new captures from starting under it.
struct CaptureGate {
    active: usize,
    deferred: Vec<(u64, Arc<CachingAllocator<CaptureSource>>)>,
}

static CAPTURE_GATE: Mutex<CaptureGate> = Mutex::new(CaptureGate { active: 0, deferred: Vec::new() });

fn capture_starting() {
    lock(&CAPTURE_GATE).active += 1;
}

fn capture_finished() {
    let mut gate = lock(&CAPTURE_GATE);
    gate.active -= 1;
    if gate.active == 0 {
        for (id, allocator) in std::mem::take(&mut gate.deferred) {
            synchronize_and_collect(id, &allocator);
        }
    }
}

/// Runs `body`, which waits for the device (`what` does), while no capture begun
/// through gpurt is in progress, and keeps captures from beginning until it returns:
/// the wait would invalidate them. Refused, naming the captures, while any is.
pub fn outside_captures<R>(what: &str, body: impl FnOnce() -> Result<R>) -> Result<R> {
    within_gate(lock(&CAPTURE_GATE), what, body)
}

/// `outside_captures` without waiting for the gate: where another call holds it (a
/// sleep or wake of this process under way, which may itself wait for the process
/// asking; a capture beginning), refused at once. For a sleep another process asked for,
/// which passes the pool over instead of keeping the asker waiting.
pub fn outside_captures_now<R>(what: &str, body: impl FnOnce() -> Result<R>) -> Result<R> {
    match CAPTURE_GATE.try_lock() {
        Ok(gate) => within_gate(gate, what, body),
        Err(TryLockError::Poisoned(poisoned)) => within_gate(poisoned.into_inner(), what, body),
        Err(TryLockError::WouldBlock) => Err(Error::invalid_argument(format!("{what}: this process is sleeping or waking a pool, or beginning a capture"))),
    }
}

fn within_gate<R>(gate: MutexGuard<'_, CaptureGate>, what: &str, body: impl FnOnce() -> Result<R>) -> Result<R> {
    if gate.active > 0 {
        let ids = with_registry(|r| {
            let mut ids = r.pools.capture_ids();
            ids.extend(r.shared.keys());
            ids.sort_unstable();
            ids
        });
        return Err(Error::new(
            Status::GPURT_ERROR_STREAM_CAPTURE,
            format!("stream capture {ids:?} (gpurt_stream_begin_capture) is in progress: {what} waits for the device, which would invalidate it; end the capture first"),
        ));
    }
    body()
}

/// Waits for the device (a replay may still use the pool's memory), then makes the
/// blocks freed during capture reusable and gives the free segments back.
fn synchronize_and_collect(id: u64, allocator: &CachingAllocator<CaptureSource>) {
    let _ = device::with_device(allocator.source().device(), || check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize"));
    collect_released(id, allocator);
}

/// Makes the blocks of pool `id`, which no replay uses any more, reusable (those freed
/// during capture too) and gives its free segments back.
fn collect_released(id: u64, allocator: &CachingAllocator<CaptureSource>) {
    allocator.source().released.store(true, Ordering::Release);
    with_registry(|r| r.collect(id));
}

/// Drops a reference to a pool. The last one synchronises and collects it, at once
/// or, while gpurt captures, when the last capture ends (see `CaptureGate`).
pub fn release_pool(id: u64) {
    if let Ok(Some(allocator)) = with_registry(|r| r.pools.release(id)) {
        let mut gate = lock(&CAPTURE_GATE);
        if gate.active > 0 {
            gate.deferred.push((id, allocator));
        } else {
            synchronize_and_collect(id, &allocator);
        }
    }
}

/// Drops a reference to a pool whose holder the driver destroyed after the holder's
/// work completed (a foreign capture's graph): no replay can use the memory, so the
/// last reference collects at once, with no device-wide wait (which would invalidate
/// captures under way on other threads).
fn release_pool_after_work(id: u64) {
    if let Ok(Some(allocator)) = with_registry(|r| r.pools.release(id)) {
        // A capture another thread runs may forbid the frees: relaxed for this thread.
        let _ = with_relaxed_capture(|| {
            collect_released(id, &allocator);
            Ok(())
        });
    }
}

/// Where capture `capture`'s gpurt allocations come from, if anyone's registered it.
fn route_of(capture: u64) -> Option<CaptureRoute> {
    with_registry(|r| r.route(capture))
}

/// The native streams that never capture: the legacy default stream (0 or `CU_STREAM_LEGACY`).
const LEGACY_STREAMS: u64 = 1;

/// Where a gpurt allocation on a native stream comes from when that stream captures
/// (`None`: it does not): a capture through gpurt takes its pool, and a capture
/// anyone else began is adopted (`foreign`). Costs the driver's capture query on every
/// stream but the legacy one, which cannot capture: the query is what keeps a graph's
/// memory from being handed to others.
#[inline]
pub fn capture_allocator(native: u64, ordinal: i32) -> Result<Option<CaptureRoute>> {
    if native <= LEGACY_STREAMS {
        return Ok(None);
    }
    foreign::settle(StreamWaits::Only(Some(stream_key(native))));
    if super::driver_pool::is_active() {
        return Ok(None); // the driver's pool records memory nodes in the graph
    }
    let capture = match native {
        // The per-thread stream is the current context's: ask in the device's.
        crate::stream::NATIVE_PER_THREAD => device::with_device(device::resolve(ordinal)?, || crate::stream::native_capture_info(native))?,
        _ => crate::stream::native_capture_info(native)?,
    };
    match capture.status {
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Ok(None),
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => in_capture(ordinal, capture.id, capture.graph).map(Some),
        _ => Err(Error::new(Status::GPURT_ERROR_STREAM_CAPTURE, "the stream's capture was invalidated")),
    }
}

#[cold]
#[inline(never)]
fn in_capture(ordinal: i32, capture: u64, graph: sys::CUgraph) -> Result<CaptureRoute> {
    if let Some(route) = route_of(capture) {
        return Ok(route);
    }
    foreign::adopt(capture, graph, device::resolve(ordinal)?)
}

/// Frees `ptr` if a private pool holds it (`None`: none does).
pub fn free_private(ptr: u64) -> Option<Result<()>> {
    foreign::settle(StreamWaits::Only(None));
    if LIVE_POOLS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let (id, allocator) = with_registry(|r| r.pools.owner(ptr))?;
    let result = allocator.free(ptr);
    with_registry(|r| r.collect(id));
    Some(result)
}

/// `op` on the private pool that holds `ptr`, if one does.
pub fn on_private_block<T>(ptr: u64, op: impl FnOnce(&CachingAllocator<CaptureSource>) -> Option<T>) -> Option<T> {
    if LIVE_POOLS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let (_, allocator) = with_registry(|r| r.pools.owner(ptr))?;
    op(&allocator)
}

/// Drops everything `holder` (a graph's or exec's handle value) holds.
pub fn release_holder(holder: u64) {
    let held = with_registry(|r| r.holders.remove(&holder)).unwrap_or_default();
    held.into_iter().for_each(Held::release);
}

/// `holder` (an exec) takes a reference to everything `from` (its graph) holds.
pub fn hold_as(holder: u64, from: u64) -> Result<()> {
    with_registry(|r| {
        let mut copies = Vec::new();
        for held in r.holders.get(&from).map_or(&[][..], Vec::as_slice) {
            copies.push(match held {
                Held::Private(id) => {
                    r.pools.retain(*id)?;
                    Held::Private(*id)
                }
                Held::Shared(keep) => Held::Shared(keep.clone()),
            });
        }
        r.holders.entry(holder).or_default().extend(copies);
        Ok(())
    })
}

/// `holder` takes over what its caller held (a capture's, at its end).
pub fn give_to(holder: u64, held: Held) {
    with_registry(|r| r.holders.entry(holder).or_default().push(held));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sleep another process asked for does not wait while this process holds the
    /// gate (its own sleep or wake, which may be waiting for that process): refused at
    /// once; with the gate free it runs.
    #[test]
    fn a_held_gate_refuses_at_once_what_must_not_wait() {
        let (held, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                outside_captures("a wake", || {
                    held.wait();
                    release.wait();
                    Ok(())
                })
                .unwrap()
            });
            held.wait();
            let refused = outside_captures_now("a sleep another process asked for", || Ok(())).unwrap_err();
            assert!(refused.message.contains("this process is sleeping or waking a pool"), "{}", refused.message);
            release.wait();
        });
        assert_eq!(outside_captures_now("a sleep another process asked for", || Ok(7)).unwrap(), 7);
    }
}
