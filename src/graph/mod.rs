//! CUDA graphs: stream capture into a graph, instantiation, upload, replay, update
//! of an instantiated graph, DOT dumps. The private pools that serve gpurt
//! allocations during a capture are the allocator's (`alloc::capture`); a graph or
//! exec holds the pools whose addresses it bakes in, by its handle's value.

pub mod conditional;
pub mod ffi;
mod replay;

use std::ffi::CString;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::alloc::capture;
use crate::device;
use crate::driver::{check, has_symbol};
use crate::error::{Error, Result, Status};
use crate::handle::{DeviceObject, Handle, HandleTable, Kind};
pub use replay::{add_replay_hook, ReplayHook};

/// Capture mode: unsafe calls (allocation, synchronisation) by any thread are illegal while the capture runs (cudaStreamCaptureModeGlobal).
pub const GPURT_CAPTURE_MODE_GLOBAL: i32 = 0;
/// Capture mode: only the capturing thread's unsafe calls are illegal.
pub const GPURT_CAPTURE_MODE_THREAD_LOCAL: i32 = 1;
/// Capture mode: no call is made illegal by the capture.
pub const GPURT_CAPTURE_MODE_RELAXED: i32 = 2;

/// Instantiation flag: memory the graph allocates and does not free is freed at its next launch.
pub const GPURT_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH: u64 = 1;
/// Instantiation flag: upload the graph on the given stream as part of instantiating it.
pub const GPURT_GRAPH_INSTANTIATE_UPLOAD: u64 = 2;
/// Instantiation flag: the exec can also be launched from the device (`cudaGraphLaunch` in a kernel,
/// with `gpurt_graph_exec_native`); the driver refuses graphs that cannot (several devices, host nodes, ...).
pub const GPURT_GRAPH_INSTANTIATE_DEVICE_LAUNCH: u64 = 4;
/// Instantiation flag: kernel nodes keep the priorities of the streams they were captured from.
pub const GPURT_GRAPH_INSTANTIATE_USE_NODE_PRIORITY: u64 = 8;

static GRAPHS: HandleTable<DeviceObject> = HandleTable::new(Kind::Graph);
static EXECS: HandleTable<DeviceObject> = HandleTable::new(Kind::GraphExec);

fn capture_mode(mode: i32) -> Result<sys::CUstreamCaptureMode> {
    use sys::CUstreamCaptureMode::*;
    Ok(match mode {
        GPURT_CAPTURE_MODE_GLOBAL => CU_STREAM_CAPTURE_MODE_GLOBAL,
        GPURT_CAPTURE_MODE_THREAD_LOCAL => CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        GPURT_CAPTURE_MODE_RELAXED => CU_STREAM_CAPTURE_MODE_RELAXED,
        other => return Err(Error::invalid_argument(format!("unknown capture mode {other}"))),
    })
}

/// Starts capturing `stream` into a graph. gpurt allocations on it (and on streams
/// that join the capture) come from `pool` (a handle from
/// `create_pool_handle`), or from a new private pool when `pool` is NULL.
pub fn begin_capture(stream: Handle, mode: i32, pool: Option<Handle>) -> Result<()> {
    let s = capturable(stream)?;
    let mode = capture_mode(mode)?;
    let id = match pool {
        Some(handle) => {
            let id = crate::alloc::mempool::device::graph_pool_id(handle)?;
            capture::retain_for(id, s.device())?;
            id
        }
        None => capture::new_pool(s.device(), crate::alloc::device::config()?),
    };
    capture::begin(id, || start_capture(&s, mode))
}

/// Starts capturing `stream` into a graph whose gpurt allocations (on it and on
/// streams that join the capture) come from `pool` (a user's pool or a default pool)
/// in stream order: blocks freed during the capture serve the stream's later work
/// too, as they do outside one. The graph holds the pool, keeping its memory mapped.
pub fn begin_capture_shared(stream: Handle, mode: i32, pool: Handle) -> Result<()> {
    let s = capturable(stream)?;
    let mode = capture_mode(mode)?;
    let (malloc, keep) = crate::alloc::mempool::device::shared_capture_target(pool, s.device())?;
    capture::begin_shared(malloc, keep, || start_capture(&s, mode))
}

/// Binds graph pool `pool` (None: unbinds) to this thread's foreign captures
/// (`capture::foreign`).
pub fn bind_thread_pool(pool: Option<Handle>) -> Result<()> {
    let id = pool.map(crate::alloc::mempool::device::graph_pool_id).transpose()?;
    capture::foreign::bind_thread(id.unwrap_or(0), pool.map_or(0, |h| h.0));
    Ok(())
}

/// The graph pool bound to this thread, if one is.
pub fn bound_thread_pool() -> Option<Handle> {
    capture::foreign::bound_pool().map(Handle)
}

/// The stream a capture may begin on: not the legacy default stream, not one that
/// captures already.
fn capturable(stream: Handle) -> Result<crate::stream::Stream> {
    let s = crate::stream::get(stream)?;
    if s.raw == 0 {
        return Err(Error::invalid_argument("the legacy default stream cannot be captured; use a created stream"));
    }
    crate::stream::ensure_not_capturing(stream, "beginning a capture")?;
    Ok(s)
}

/// Begins the driver's capture of `s`; its capture id.
fn start_capture(s: &crate::stream::Stream, mode: sys::CUstreamCaptureMode) -> Result<u64> {
    s.run(|cu| check(unsafe { sys::cuStreamBeginCapture_v2(cu, mode) }, "cuStreamBeginCapture"))?;
    Ok(crate::stream::native_capture_info(s.raw as u64)?.id)
}

/// Ends the capture on `stream`, giving the graph. The graph holds the capture's
/// pool. An invalidated capture gives its error and no graph.
pub fn end_capture(stream: Handle) -> Result<Handle> {
    let s = crate::stream::get(stream)?;
    if crate::stream::captures_a_body(stream) {
        return Err(Error::new(
            Status::GPURT_ERROR_STREAM_CAPTURE,
            "the stream is capturing a conditional node's body: gpurt_graph_conditional_end first",
        ));
    }
    let crate::stream::CaptureInfo { status, id: capture, .. } = crate::stream::native_capture_info(s.raw as u64)?;
    if status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Err(Error::invalid_argument("the stream is not capturing"));
    }
    let mut graph = std::ptr::null_mut();
    let ended = s.run(|cu| check(unsafe { sys::cuStreamEndCapture(cu, &mut graph) }, "cuStreamEndCapture"));
    let pool = capture::end(capture);
    let mut hooks = replay::capture_ended(capture);
    let accesses = crate::sanitizer::take_captured(capture);
    if !accesses.is_empty() {
        hooks.push(Arc::new(accesses));
    }
    let graph = ended.and_then(|()| GRAPHS.insert(DeviceObject { raw: graph as usize, device: s.device() }).inspect_err(|_| unsafe {
        sys::cuGraphDestroy(graph);
    }));
    match (graph, pool) {
        (Ok(g), Some(held)) => {
            capture::give_to(g.0, held);
            replay::give_to(g.0, hooks);
            Ok(g)
        }
        (Ok(g), None) => {
            replay::give_to(g.0, hooks);
            Ok(g)
        }
        (Err(e), pool) => {
            pool.into_iter().for_each(capture::Held::release);
            Err(e)
        }
    }
}

pub fn destroy_graph(graph: Handle) -> Result<()> {
    let g = GRAPHS.remove(graph)?;
    let destroyed = check(unsafe { sys::cuGraphDestroy(g.raw as sys::CUgraph) }, "cuGraphDestroy");
    capture::release_holder(graph.0);
    replay::forget(graph.0);
    destroyed
}

/// Instantiates a graph. `flags`: `GPURT_GRAPH_INSTANTIATE_*`; with `..._UPLOAD`,
/// `upload_stream` receives the upload. The exec keeps the graph's pool alive.
pub fn instantiate(graph: Handle, flags: u64, upload_stream: Option<Handle>) -> Result<Handle> {
    let g = GRAPHS.get(graph)?;
    let known = GPURT_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH
        | GPURT_GRAPH_INSTANTIATE_UPLOAD
        | GPURT_GRAPH_INSTANTIATE_DEVICE_LAUNCH
        | GPURT_GRAPH_INSTANTIATE_USE_NODE_PRIORITY;
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
    capture::hold_as(handle.0, graph.0)?;
    replay::copy(graph.0, handle.0);
    Ok(handle)
}

/// The driver's `CUgraph` (usable as `cudaGraph_t`), still owned by the handle.
pub fn graph_native(graph: Handle) -> Result<usize> {
    Ok(GRAPHS.get(graph)?.raw)
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
    let s = crate::stream::get(stream)?;
    replay::before_replay(exec.0, s.raw as u64, s.device())?;
    s.run(|cu| check(unsafe { sys::cuGraphLaunch(e.raw as sys::CUgraphExec, cu) }, "cuGraphLaunch"))
}

pub fn destroy_exec(exec: Handle) -> Result<()> {
    let e = EXECS.remove(exec)?;
    let destroyed = check(unsafe { sys::cuGraphExecDestroy(e.raw as sys::CUgraphExec) }, "cuGraphExecDestroy");
    capture::release_holder(exec.0);
    replay::forget(exec.0);
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
    replay::copy(graph.0, exec.0);
    capture::hold_as(exec.0, graph.0)
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
