//! CUDA graphs: stream capture into a graph, instantiation, upload, replay, update
//! of an instantiated graph, DOT dumps; and the private pools (`pool`) that serve
//! gpurt allocations made while a stream captures, so that the addresses baked into
//! a graph stay valid for every replay and nobody else gets them meanwhile.

pub mod ffi;
pub mod pool;

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use crate::alloc::caching::CachingAllocator;
use crate::alloc::config::AllocConfig;
use crate::alloc::device::DriverSource;
use crate::alloc::pool::SegmentSource;
use crate::alloc::stats::{gpurt_memory_stats_t, RetiredStats};
use crate::boundary::lock;
use crate::device;
use crate::driver::{check, has_symbol};
use crate::error::{Error, Result, Status};
use crate::handle::{DeviceObject, Handle, HandleTable, Kind};
use pool::GraphPools;

pub const GPURT_CAPTURE_MODE_GLOBAL: i32 = 0;
pub const GPURT_CAPTURE_MODE_THREAD_LOCAL: i32 = 1;
pub const GPURT_CAPTURE_MODE_RELAXED: i32 = 2;

pub const GPURT_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH: u64 = 1;
pub const GPURT_GRAPH_INSTANTIATE_UPLOAD: u64 = 2;
pub const GPURT_GRAPH_INSTANTIATE_USE_NODE_PRIORITY: u64 = 8;

static GRAPHS: HandleTable<DeviceObject> = HandleTable::new(Kind::Graph);
static EXECS: HandleTable<DeviceObject> = HandleTable::new(Kind::GraphExec);
static POOL_HANDLES: HandleTable<u64> = HandleTable::new(Kind::GraphPool);

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
    fn device(&self) -> i32 {
        self.driver.device()
    }
}

/// The marker of a block freed during capture with uses on other streams: events
/// cannot be queried inside a capture, so such a block waits for the pool's release.
const AFTER_RELEASE: u64 = u64::MAX;

fn exchange_capture_mode(mode: sys::CUstreamCaptureMode) -> Result<sys::CUstreamCaptureMode> {
    let mut m = mode;
    check(unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut m) }, "cuThreadExchangeStreamCaptureMode")?;
    Ok(m)
}

impl SegmentSource for CaptureSource {
    fn allocate(&self, size: u64, _stream: u64) -> Result<u64> {
        let previous = exchange_capture_mode(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let result = self.driver.alloc_segment(size);
        exchange_capture_mode(previous)?;
        result
    }
    fn release(&self, addr: u64, size: u64) {
        self.driver.release(addr, size)
    }
    fn record(&self, stream: u64) -> Result<u64> {
        let native = crate::alloc::device::native_stream_of(stream) as sys::CUstream;
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

/// The pools, and which graph or exec holds which pool.
struct Registry {
    pools: GraphPools<CaptureSource>,
    /// Graph or exec handle value to the pools whose addresses it holds.
    holders: HashMap<u64, Vec<u64>>,
    /// Per device, the statistics of pools that are gone.
    retired: RetiredStats,
}

impl Registry {
    /// Collects pool `id`; a pool that goes leaves its statistics to its device.
    fn collect(&mut self, id: u64) {
        if let Some(gone) = self.pools.collect(id) {
            self.retired.retire(gone.source().device(), &gone.stats());
        }
    }
}

/// Adds the statistics of `device`'s private pools, live and gone, to `stats` (the
/// device allocator's): gpurt_malloc during capture counts like any other. Current
/// values and totals are exact; a live pool's peak is added to the totals' current
/// value, an upper bound of the true peak.
pub fn add_private_stats(device: i32, stats: &mut gpurt_memory_stats_t) {
    with_registry(|r| {
        r.retired.add_to(device, stats);
        for a in r.pools.allocators().filter(|a| a.source().device() == device) {
            stats.absorb(&a.stats(), &gpurt_memory_stats_t::new());
        }
    })
}

/// Resets the peaks (`accumulated`: the totals) of `device`'s private pools.
pub fn reset_private_stats(device: i32, accumulated: bool) {
    with_registry(|r| {
        r.pools.allocators().filter(|a| a.source().device() == device).for_each(|a| a.reset_stats(accumulated));
        r.retired.reset(device, accumulated);
    })
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
/// Captures running through gpurt: while zero, `gpurt_malloc` asks the driver nothing.
static ACTIVE_CAPTURES: AtomicUsize = AtomicUsize::new(0);
/// Pools alive: while zero, a free that misses the device allocator asks no further.
static LIVE_POOLS: AtomicUsize = AtomicUsize::new(0);

fn with_registry<T>(f: impl FnOnce(&mut Registry) -> T) -> T {
    let mut guard = lock(&REGISTRY);
    let registry = guard.get_or_insert_with(|| Registry { pools: GraphPools::default(), holders: HashMap::new(), retired: RetiredStats::default() });
    let result = f(registry);
    LIVE_POOLS.store(registry.pools.len(), Ordering::Release);
    result
}

fn new_pool(device: i32) -> Result<u64> {
    // Private pools keep plain segments: mapping memory inside a capture is untested.
    let config = AllocConfig { expandable_segments: false, ..crate::alloc::device::config()? };
    Ok(with_registry(|r| r.pools.create(CaptureSource { driver: DriverSource::new(device), released: AtomicBool::new(false) }, config)))
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

/// Waits for the device (a replay may still use the pool's memory), then makes the
/// blocks freed during capture reusable and gives the free segments back.
fn synchronize_and_collect(id: u64, allocator: &CachingAllocator<CaptureSource>) {
    let _ = device::with_device(allocator.source().device(), || check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize"));
    allocator.source().released.store(true, Ordering::Release);
    with_registry(|r| r.collect(id));
}

/// Drops a reference to a pool. The last one synchronises and collects it, at once
/// or, while gpurt captures, when the last capture ends (see `CaptureGate`).
fn release_pool(id: u64) {
    if let Ok(Some(allocator)) = with_registry(|r| r.pools.release(id)) {
        let mut gate = lock(&CAPTURE_GATE);
        if gate.active > 0 {
            gate.deferred.push((id, allocator));
        } else {
            synchronize_and_collect(id, &allocator);
        }
    }
}

/// A private pool for several captures to share (`torch.cuda.graph_pool_handle()`),
/// on `device`. Destroy the handle when no further capture will use it.
pub fn create_pool_handle(ordinal: i32) -> Result<Handle> {
    let id = new_pool(device::resolve(ordinal)?)?;
    POOL_HANDLES.insert(id).inspect_err(|_| release_pool(id))
}

pub fn destroy_pool_handle(handle: Handle) -> Result<()> {
    release_pool(POOL_HANDLES.remove(handle)?);
    Ok(())
}

fn capture_mode(mode: i32) -> Result<sys::CUstreamCaptureMode> {
    use sys::CUstreamCaptureMode::*;
    Ok(match mode {
        GPURT_CAPTURE_MODE_GLOBAL => CU_STREAM_CAPTURE_MODE_GLOBAL,
        GPURT_CAPTURE_MODE_THREAD_LOCAL => CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        GPURT_CAPTURE_MODE_RELAXED => CU_STREAM_CAPTURE_MODE_RELAXED,
        other => return Err(Error::invalid_argument(format!("unknown capture mode {other}"))),
    })
}

/// (status, capture id) of a native stream.
fn capture_info(native: u64) -> Result<(sys::CUstreamCaptureStatus, u64)> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0;
    let (graph, deps, count) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let code = unsafe { sys::cuStreamGetCaptureInfo_v2(native as sys::CUstream, &mut status, &mut id, graph, deps, count) };
    check(code, "cuStreamGetCaptureInfo")?;
    Ok((status, id))
}

/// Starts capturing `stream` into a graph. gpurt allocations on it (and on streams
/// that join the capture) come from `pool` (a handle from
/// `create_pool_handle`), or from a new private pool when `pool` is NULL.
pub fn begin_capture(stream: Handle, mode: i32, pool: Option<Handle>) -> Result<()> {
    let s = crate::stream::get(stream)?;
    let mode = capture_mode(mode)?;
    if s.raw == 0 {
        return Err(Error::invalid_argument("the legacy default stream cannot be captured; use a created stream"));
    }
    let id = match pool {
        Some(h) => {
            let id = POOL_HANDLES.get(h)?;
            with_registry(|r| match r.pools.allocator(id).map(|a| a.source().device()) {
                Some(d) if d == s.device() => r.pools.retain(id),
                _ => Err(Error::invalid_argument(format!("the graph pool belongs to another device than the stream ({})", s.device()))),
            })?;
            id
        }
        None => new_pool(s.device())?,
    };
    capture_starting(); // before the capture starts, so no pool release synchronises under it
    let started = s.run(|cu| check(unsafe { sys::cuStreamBeginCapture_v2(cu, mode) }, "cuStreamBeginCapture"));
    let registered = started.and_then(|()| {
        let (_, capture) = capture_info(s.raw as u64)?;
        with_registry(|r| r.pools.begin_capture(capture, id))
    });
    // The capture holds its own reference from here; drop the one taken above.
    release_pool(id);
    if registered.is_ok() {
        ACTIVE_CAPTURES.fetch_add(1, Ordering::AcqRel);
    } else {
        capture_finished();
    }
    registered
}

/// Ends the capture on `stream`, giving the graph. The graph holds the capture's
/// pool. An invalidated capture gives its error and no graph.
pub fn end_capture(stream: Handle) -> Result<Handle> {
    let s = crate::stream::get(stream)?;
    let (status, capture) = capture_info(s.raw as u64)?;
    if status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err(Error::invalid_argument("the stream is not capturing"));
    }
    let mut graph = std::ptr::null_mut();
    let ended = s.run(|cu| check(unsafe { sys::cuStreamEndCapture(cu, &mut graph) }, "cuStreamEndCapture"));
    let pool = with_registry(|r| r.pools.end_capture(capture));
    if pool.is_some() {
        ACTIVE_CAPTURES.fetch_sub(1, Ordering::AcqRel);
        capture_finished();
    }
    let graph = ended.and_then(|()| GRAPHS.insert(DeviceObject { raw: graph as usize, device: s.device() }).inspect_err(|_| unsafe {
        sys::cuGraphDestroy(graph);
    }));
    match (graph, pool) {
        (Ok(g), Some(id)) => {
            with_registry(|r| r.holders.insert(g.0, vec![id]));
            Ok(g)
        }
        (Ok(g), None) => Ok(g),
        (Err(e), pool) => {
            pool.into_iter().for_each(release_pool);
            Err(e)
        }
    }
}

/// The private pool serving a gpurt allocation on a native stream, when that stream
/// is capturing through gpurt. Costs one atomic load while nothing captures.
#[inline]
pub fn capture_allocator(native: u64) -> Result<Option<Arc<CachingAllocator<CaptureSource>>>> {
    if ACTIVE_CAPTURES.load(Ordering::Acquire) == 0 {
        return Ok(None);
    }
    capture_allocator_slow(native)
}

#[cold]
fn capture_allocator_slow(native: u64) -> Result<Option<Arc<CachingAllocator<CaptureSource>>>> {
    if crate::alloc::driver_pool::is_active() {
        return Ok(None); // the driver's pool records memory nodes in the graph
    }
    let (status, capture) = capture_info(native)?;
    match status {
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Ok(None),
        sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => with_registry(|r| r.pools.for_capture(capture))
            .map(Some)
            .ok_or_else(|| {
                Error::new(
                    Status::GPURT_ERROR_STREAM_CAPTURE,
                    "the stream is capturing a graph that was not begun with gpurt_stream_begin_capture, so gpurt has no \
                     private pool for it; allocating from the shared cache would hand the graph's memory to others",
                )
            }),
        _ => Err(Error::new(Status::GPURT_ERROR_STREAM_CAPTURE, "the stream's capture was invalidated")),
    }
}

/// Frees `ptr` if a private pool holds it (`None`: none does).
pub fn free_private(ptr: u64) -> Option<Result<()>> {
    if LIVE_POOLS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let (id, allocator) = with_registry(|r| r.pools.owner(ptr))?;
    let result = allocator.free(ptr);
    with_registry(|r| r.collect(id));
    Some(result)
}

/// Records `native` on a private pool's block, if one holds `ptr`.
pub fn record_stream_private(ptr: u64, native: u64) -> Option<Result<()>> {
    if LIVE_POOLS.load(Ordering::Acquire) == 0 {
        return None;
    }
    let (_, allocator) = with_registry(|r| r.pools.owner(ptr))?;
    Some(allocator.record_stream(ptr, native))
}

fn release_holder(handle: Handle) {
    let pools = with_registry(|r| r.holders.remove(&handle.0)).unwrap_or_default();
    pools.into_iter().for_each(release_pool);
}

fn hold(holder: Handle, pools: &[u64]) -> Result<()> {
    with_registry(|r| {
        for &id in pools {
            r.pools.retain(id)?;
            r.holders.entry(holder.0).or_default().push(id);
        }
        Ok(())
    })
}

fn pools_of(holder: Handle) -> Vec<u64> {
    with_registry(|r| r.holders.get(&holder.0).cloned().unwrap_or_default())
}

pub fn destroy_graph(graph: Handle) -> Result<()> {
    let g = GRAPHS.remove(graph)?;
    let destroyed = check(unsafe { sys::cuGraphDestroy(g.raw as sys::CUgraph) }, "cuGraphDestroy");
    release_holder(graph);
    destroyed
}

/// Instantiates a graph. `flags`: `GPURT_GRAPH_INSTANTIATE_*`; with `..._UPLOAD`,
/// `upload_stream` receives the upload. The exec keeps the graph's pool alive.
pub fn instantiate(graph: Handle, flags: u64, upload_stream: Option<Handle>) -> Result<Handle> {
    let g = GRAPHS.get(graph)?;
    let known = GPURT_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | GPURT_GRAPH_INSTANTIATE_UPLOAD | GPURT_GRAPH_INSTANTIATE_USE_NODE_PRIORITY;
    if flags & !known != 0 {
        return Err(Error::invalid_argument(format!("unknown instantiate flags {:#x}", flags & !known)));
    }
    let upload = flags & GPURT_GRAPH_INSTANTIATE_UPLOAD != 0;
    let mut exec = std::ptr::null_mut();
    device::with_device(g.device, || {
        if !upload {
            return check(unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, g.raw as sys::CUgraph, flags) }, "cuGraphInstantiateWithFlags");
        }
        let stream = upload_stream.ok_or_else(|| Error::invalid_argument("GPURT_GRAPH_INSTANTIATE_UPLOAD needs an upload stream"))?;
        let s = crate::stream::get(stream)?;
        if !has_symbol("cuGraphInstantiateWithParams") {
            return Err(Error::not_supported("instantiating with upload needs CUDA 12"));
        }
        let mut params: sys::CUDA_GRAPH_INSTANTIATE_PARAMS = unsafe { std::mem::zeroed() };
        params.flags = flags;
        params.hUploadStream = s.cu();
        check(unsafe { sys::cuGraphInstantiateWithParams(&mut exec, g.raw as sys::CUgraph, &mut params) }, "cuGraphInstantiateWithParams")
    })?;
    let handle = EXECS.insert(DeviceObject { raw: exec as usize, device: g.device }).inspect_err(|_| unsafe {
        sys::cuGraphExecDestroy(exec);
    })?;
    hold(handle, &pools_of(graph))?;
    Ok(handle)
}

/// The driver's `CUgraphExec` (usable as `cudaGraphExec_t`).
pub fn exec_native(exec: Handle) -> Result<usize> {
    Ok(EXECS.get(exec)?.raw)
}

pub fn upload(exec: Handle, stream: Handle) -> Result<()> {
    let e = EXECS.get(exec)?;
    crate::stream::get(stream)?.run(|cu| check(unsafe { sys::cuGraphUpload(e.raw as sys::CUgraphExec, cu) }, "cuGraphUpload"))
}

/// Replays an instantiated graph on `stream`.
#[inline]
pub fn launch(exec: Handle, stream: Handle) -> Result<()> {
    let e = EXECS.get(exec)?;
    crate::stream::get(stream)?.run(|cu| check(unsafe { sys::cuGraphLaunch(e.raw as sys::CUgraphExec, cu) }, "cuGraphLaunch"))
}

pub fn destroy_exec(exec: Handle) -> Result<()> {
    let e = EXECS.remove(exec)?;
    let destroyed = check(unsafe { sys::cuGraphExecDestroy(e.raw as sys::CUgraphExec) }, "cuGraphExecDestroy");
    release_holder(exec);
    destroyed
}

/// Why an update was refused, from `CUgraphExecUpdateResult`.
fn update_refusal(result: sys::CUgraphExecUpdateResult) -> &'static str {
    use sys::CUgraphExecUpdateResult::*;
    match result {
        CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED => "the graph's topology changed (nodes or edges differ)",
        CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED => "a node's type changed",
        CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED => "a kernel node's function changed",
        CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED => "a node's parameters changed in a way that cannot be updated",
        CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED => "something in the graph cannot be updated",
        CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE => "a kernel node's function changed in an unsupported way",
        CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED => "a node's attributes changed",
        _ => "the driver refused the update",
    }
}

/// Updates an instantiated graph in place from `graph` (same topology, changed
/// parameters). Refused: `GPURT_ERROR_GRAPH_UPDATE` with the reason; re-instantiate.
pub fn update(exec: Handle, graph: Handle) -> Result<()> {
    let (e, g) = (EXECS.get(exec)?, GRAPHS.get(graph)?);
    if !has_symbol("cuGraphExecUpdate_v2") {
        return Err(Error::not_supported("graph update needs CUDA 12"));
    }
    let mut info: sys::CUgraphExecUpdateResultInfo = unsafe { std::mem::zeroed() };
    let code = device::with_device(e.device, || {
        Ok(unsafe { sys::cuGraphExecUpdate_v2(e.raw as sys::CUgraphExec, g.raw as sys::CUgraph, &mut info) })
    })?;
    if code == sys::CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE {
        return Err(Error::new(Status::GPURT_ERROR_GRAPH_UPDATE, format!("graph update refused: {}; instantiate the new graph instead", update_refusal(info.result))));
    }
    check(code, "cuGraphExecUpdate")?;
    // The exec now holds the new graph's addresses too.
    hold(exec, &pools_of(graph))
}

/// Writes the graph as a DOT file (`verbose`: every node's parameters).
pub fn debug_dot(graph: Handle, path: &str, verbose: bool) -> Result<()> {
    let g = GRAPHS.get(graph)?;
    let path = CString::new(path).map_err(|_| Error::invalid_argument("the path contains a NUL byte"))?;
    let flags = if verbose { sys::CUgraphDebugDot_flags::CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE as u32 } else { 0 };
    check(unsafe { sys::cuGraphDebugDotPrint(g.raw as sys::CUgraph, path.as_ptr(), flags) }, "cuGraphDebugDotPrint")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_modes_and_refusals_are_named() {
        assert!(capture_mode(GPURT_CAPTURE_MODE_RELAXED).is_ok());
        assert!(capture_mode(3).unwrap_err().message.contains("capture mode 3"));
        use sys::CUgraphExecUpdateResult::*;
        assert!(update_refusal(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED).contains("topology"));
        assert!(update_refusal(CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED).contains("function"));
    }
}
