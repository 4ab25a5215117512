//! Conditional nodes in captures (CUDA 12.4+; SWITCH and IF's else 12.8+): a node whose
//! bodies run, once (IF, SWITCH) or while its handle's value is non-zero (WHILE), as the
//! device decides at each replay: `torch.cond` and `torch.while_loop` captured, a decode
//! loop whose trip count the device picks inside one graph.
//!
//! A body is captured on the same stream handle as the graph around it: between
//! `begin` and `end`, the handle names an internal stream that captures into the body's
//! graph, so every gpurt call on the handle (and its native stream, for the caller's
//! own kernels) lands in the body; gpurt allocations there come from the enclosing
//! capture's private pool. Bodies nest.

use std::sync::{Arc, Mutex};

use cudarc::driver::sys::{self, CUgraphConditionalNodeType as Cond};

use super::replay;
use crate::alloc::capture;
use crate::boundary::lock;
use crate::device;
use crate::driver::{check, load_embedded, require_symbol};
use crate::error::{Error, Result, Status};
use crate::handle::Handle;
use crate::stream::{self, Stream};

/// A conditional node that runs its body once when its handle's value is non-zero, or
/// its second body (an else, two bodies) when zero.
pub const GPURT_GRAPH_CONDITIONAL_IF: i32 = 0;
/// A conditional node that runs its body again and again while its handle's value is non-zero.
pub const GPURT_GRAPH_CONDITIONAL_WHILE: i32 = 1;
/// A conditional node that runs body number `value` of its bodies, or none when past the last.
pub const GPURT_GRAPH_CONDITIONAL_SWITCH: i32 = 2;
/// Handle flag: the handle takes its default value at every launch of the graph.
pub const GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT: u32 = 1;
/// The most bodies a SWITCH node has.
pub const GPURT_GRAPH_CONDITIONAL_MAX_BODIES: u32 = 1024;

/// gpurt's kernel that sets a handle from a device value: `cudaGraphSetConditional`
/// is a device runtime builtin that the driver's PTX compiler resolves (no relocatable
/// code needed); PTX 8.4 is what CUDA 12.4 drivers, the first with conditional nodes, read.
const SET_KERNEL_PTX: &str = "\
.version 8.4
.target sm_52
.address_size 64
.extern .func cudaGraphSetConditional (.param .b64 handle, .param .b32 value);
.visible .entry gpurt_set_conditional(.param .u64 handle_param, .param .u64 value_param)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [handle_param];
    ld.param.u64 %rd2, [value_param];
    cvta.to.global.u64 %rd3, %rd2;
    ld.global.u32 %r1, [%rd3];
    {
        .param .b64 p0;
        .param .b32 p1;
        st.param.b64 [p0], %rd1;
        st.param.b32 [p1], %r1;
        call.uni cudaGraphSetConditional, (p0, p1);
    }
    ret;
}
\0";

fn require() -> Result<()> {
    require_symbol("cuGraphConditionalHandleCreate", "conditional graph nodes", "12.4")
}

/// What the driver says of a capture in progress.
struct Capturing {
    id: u64,
    graph: sys::CUgraph,
    dependencies: *const sys::CUgraphNode,
    edges: *const sys::CUgraphEdgeData,
    count: usize,
}

/// The capture `stream`'s native stream is part of; `GPURT_ERROR_STREAM_CAPTURE` unless one is active.
fn capturing(stream: Stream) -> Result<Capturing> {
    stream.run(|cu| {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        let mut c = Capturing { id: 0, graph: std::ptr::null_mut(), dependencies: std::ptr::null(), edges: std::ptr::null(), count: 0 };
        let code = unsafe {
            sys::cuStreamGetCaptureInfo_v3(cu, &mut status, &mut c.id, &mut c.graph, &mut c.dependencies, &mut c.edges, &mut c.count)
        };
        check(code, "cuStreamGetCaptureInfo")?;
        match status {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => Ok(c),
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => Err(Error::new(
                Status::GPURT_ERROR_STREAM_CAPTURE,
                "the stream is not capturing: conditional nodes are made inside a capture (gpurt_stream_begin_capture)",
            )),
            _ => Err(Error::new(Status::GPURT_ERROR_STREAM_CAPTURE, "the stream's capture was invalidated")),
        }
    })
}

/// A conditional handle for the graph `stream` captures into now (the graph that will
/// hold the node using it), with `default_value`, set at each launch with
/// `GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT`.
pub fn handle_create(stream: Handle, default_value: u32, flags: u32) -> Result<u64> {
    require()?;
    if flags & !GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT != 0 {
        return Err(Error::invalid_argument(format!("conditional handle flags {flags:#x} are not 0 or GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT")));
    }
    let s = stream::get(stream)?;
    let c = capturing(s)?;
    let ctx = device::primary_context(s.device())?;
    let mut handle = 0;
    let code = unsafe { sys::cuGraphConditionalHandleCreate(&mut handle, c.graph, ctx, default_value, flags) };
    check(code, "cuGraphConditionalHandleCreate")?;
    Ok(handle)
}

/// gpurt's set kernel, loaded once per device.
fn set_kernel(d: i32) -> Result<sys::CUfunction> {
    static KERNELS: device::PerDeviceOnce<usize> = std::sync::OnceLock::new();
    static LOADING: Mutex<()> = Mutex::new(());
    let function = device::per_device_try_init(&KERNELS, &LOADING, d, || {
        device::with_device(d, || Ok(load_embedded(SET_KERNEL_PTX, c"gpurt_set_conditional")? as usize))
    })?;
    Ok(*function as sys::CUfunction)
}

/// Queues gpurt's kernel that sets `handle` to the `u32` at device address `value`, on
/// `stream`, which must be capturing the graph (or a body of the graph) the handle is for.
pub fn set_from_device(stream: Handle, handle: u64, value: u64) -> Result<()> {
    require()?;
    if value == 0 {
        return Err(Error::invalid_argument("argument `value` is NULL: a device address of an unsigned int"));
    }
    let s = stream::get(stream)?;
    capturing(s)?;
    let function = set_kernel(s.device())?;
    let (mut handle, mut value) = (handle, value);
    let mut params = [(&mut handle as *mut u64).cast::<libc::c_void>(), (&mut value as *mut u64).cast()];
    s.run(|cu| {
        let code = unsafe { sys::cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, cu, params.as_mut_ptr(), std::ptr::null_mut()) };
        check(code, "cuLaunchKernel")
    })
}

/// A conditional node whose bodies are being captured on a stream handle.
struct Node {
    /// The stream handle's value.
    stream: u64,
    device: i32,
    /// The capture that holds the node (a body's, for a nested node).
    outer_capture: u64,
    /// The bodies' graphs, owned by the node.
    bodies: Vec<usize>,
    /// How many bodies have begun.
    begun: usize,
    body: Option<Body>,
}

/// A body being captured: its internal stream and its capture.
struct Body {
    native: Stream,
    capture: u64,
}

/// Nodes whose bodies are being captured, innermost last.
static NODES: Mutex<Vec<Node>> = Mutex::new(Vec::new());
/// Internal streams that captured a body and wait for the next.
static IDLE: Mutex<Vec<Stream>> = Mutex::new(Vec::new());

fn body_stream(d: i32) -> Result<Stream> {
    let mut idle = lock(&IDLE);
    match idle.iter().position(|s| s.device() == d) {
        Some(i) => Ok(idle.swap_remove(i)),
        None => stream::create_internal(d),
    }
}

fn node_type(kind: i32, bodies: u32) -> Result<Cond> {
    let (cond, most) = match kind {
        GPURT_GRAPH_CONDITIONAL_IF => (Cond::CU_GRAPH_COND_TYPE_IF, 2),
        GPURT_GRAPH_CONDITIONAL_WHILE => (Cond::CU_GRAPH_COND_TYPE_WHILE, 1),
        GPURT_GRAPH_CONDITIONAL_SWITCH => (Cond::CU_GRAPH_COND_TYPE_SWITCH, GPURT_GRAPH_CONDITIONAL_MAX_BODIES),
        other => return Err(Error::invalid_argument(format!("unknown conditional node type {other}"))),
    };
    if bodies == 0 || bodies > most {
        return Err(Error::invalid_argument(format!("a node of type {kind} has 1 to {most} bodies, not {bodies}")));
    }
    Ok(cond)
}

/// Adds a conditional node of `kind` with `bodies` bodies, deciding on `handle`, after the
/// work `stream` captured so far, and begins capturing its first body on `stream`.
pub fn begin(stream: Handle, handle: u64, kind: i32, bodies: u32) -> Result<()> {
    require()?;
    let cond = node_type(kind, bodies)?;
    let s = stream::get(stream)?;
    let c = capturing(s)?;
    let mut params: sys::CUgraphNodeParams = unsafe { std::mem::zeroed() };
    params.type_ = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_CONDITIONAL;
    params.__bindgen_anon_1.conditional = sys::CUDA_CONDITIONAL_NODE_PARAMS {
        handle,
        type_: cond,
        size: bodies,
        phGraph_out: std::ptr::null_mut(),
        ctx: device::primary_context(s.device())?,
    };
    let mut node = std::ptr::null_mut();
    let code = unsafe { sys::cuGraphAddNode_v2(&mut node, c.graph, c.dependencies, c.edges, c.count, &mut params) };
    check(code, "cuGraphAddNode")?;
    // SAFETY: the driver wrote `bodies` graphs, owned by the node.
    let graphs = unsafe { std::slice::from_raw_parts(params.__bindgen_anon_1.conditional.phGraph_out, bodies as usize) };
    let flags = sys::CUstreamUpdateCaptureDependencies_flags::CU_STREAM_SET_CAPTURE_DEPENDENCIES as u32;
    s.run(|cu| {
        let code = unsafe { sys::cuStreamUpdateCaptureDependencies_v2(cu, &mut node, std::ptr::null(), 1, flags) };
        check(code, "cuStreamUpdateCaptureDependencies")
    })?;
    let mut node = Node {
        stream: stream.0,
        device: s.device(),
        outer_capture: c.id,
        bodies: graphs.iter().map(|&g| g as usize).collect(),
        begun: 0,
        body: None,
    };
    // A failure leaves the node in the graph with empty bodies: a valid graph.
    begin_body(stream, &mut node)?;
    lock(&NODES).push(node);
    Ok(())
}

fn begin_body(stream: Handle, node: &mut Node) -> Result<()> {
    let native = body_stream(node.device)?;
    let graph = node.bodies[node.begun] as sys::CUgraph;
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    let begun = check(
        unsafe { sys::cuStreamBeginCaptureToGraph(native.cu(), graph, std::ptr::null(), std::ptr::null(), 0, mode) },
        "cuStreamBeginCaptureToGraph",
    )
    .and_then(|()| Ok(stream::native_capture_info(native.raw as u64)?.id));
    let body_capture = match begun {
        Ok(id) => id,
        Err(e) => {
            lock(&IDLE).push(native);
            return Err(e);
        }
    };
    if let Err(e) = capture::begin_body(node.outer_capture, node.device, body_capture) {
        let mut graph = std::ptr::null_mut();
        unsafe { sys::cuStreamEndCapture(native.cu(), &mut graph) };
        lock(&IDLE).push(native);
        return Err(e);
    }
    stream::redirect_to_body(stream, native.raw);
    node.body = Some(Body { native, capture: body_capture });
    node.begun += 1;
    Ok(())
}

fn end_body(stream: Handle, node: &mut Node) -> Result<()> {
    let Some(body) = node.body.take() else { return Ok(()) };
    stream::end_body_redirect(stream);
    let mut graph = std::ptr::null_mut();
    let ended = check(unsafe { sys::cuStreamEndCapture(body.native.cu(), &mut graph) }, "cuStreamEndCapture");
    // What the body's capture held as the enclosing gpurt capture's (nothing if not gpurt's).
    capture::end(body.capture).into_iter().for_each(capture::Held::release);
    // What the body's capture asked to run before each replay runs before the graph's.
    replay::move_hooks(body.capture, node.outer_capture);
    let accesses = crate::sanitizer::take_captured(body.capture);
    if !accesses.is_empty() {
        replay::add_replay_hook(node.outer_capture, Arc::new(accesses));
    }
    lock(&IDLE).push(body.native);
    ended
}

/// The innermost node whose bodies `stream` captures.
fn innermost(nodes: &[Node], stream: Handle) -> Result<usize> {
    stream::get(stream)?;
    nodes
        .iter()
        .rposition(|n| n.stream == stream.0)
        .ok_or_else(|| Error::invalid_argument("the stream is not capturing a conditional node's body (gpurt_graph_conditional_begin)"))
}

/// Ends the body being captured on `stream` and begins its node's next one (an IF's
/// else, a SWITCH's next case).
pub fn next(stream: Handle) -> Result<()> {
    let mut nodes = lock(&NODES);
    let i = innermost(&nodes, stream)?;
    let node = &mut nodes[i];
    if node.begun == node.bodies.len() {
        return Err(Error::invalid_argument(format!(
            "the node's {} bodies are all begun: gpurt_graph_conditional_end ends the last",
            node.bodies.len()
        )));
    }
    end_body(stream, node)?;
    begin_body(stream, node)
}

/// Ends the body being captured on `stream`, and its node: `stream` captures into the
/// graph around the node again, after it. Bodies never begun stay empty.
pub fn end(stream: Handle) -> Result<()> {
    let mut nodes = lock(&NODES);
    let i = innermost(&nodes, stream)?;
    let mut node = nodes.remove(i);
    end_body(stream, &mut node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_types_take_their_number_of_bodies() {
        assert!(node_type(GPURT_GRAPH_CONDITIONAL_IF, 1).is_ok() && node_type(GPURT_GRAPH_CONDITIONAL_IF, 2).is_ok());
        assert!(node_type(GPURT_GRAPH_CONDITIONAL_IF, 3).is_err());
        assert!(node_type(GPURT_GRAPH_CONDITIONAL_WHILE, 1).is_ok() && node_type(GPURT_GRAPH_CONDITIONAL_WHILE, 2).is_err());
        assert!(node_type(GPURT_GRAPH_CONDITIONAL_SWITCH, GPURT_GRAPH_CONDITIONAL_MAX_BODIES).is_ok());
        assert!(node_type(GPURT_GRAPH_CONDITIONAL_SWITCH, 0).is_err());
        assert!(node_type(3, 1).unwrap_err().message.contains("unknown"));
    }

    #[test]
    fn the_set_kernel_is_nul_terminated_ptx() {
        assert!(SET_KERNEL_PTX.ends_with('\0') && SET_KERNEL_PTX.contains(".entry gpurt_set_conditional"));
    }
}
