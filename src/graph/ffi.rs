use libc::{c_char, c_int, c_uint, c_ulonglong};

use crate::boundary::{self, in_str, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::alloc::mempool::ffi::gpurt_mem_pool_t;
use crate::stream::ffi::gpurt_stream_t;

/// A captured graph.
pub struct gpurt_graph_s {
    _opaque: [u8; 0],
}
/// The handle of a captured graph: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_graph_t = *mut gpurt_graph_s;

/// An instantiated graph, ready to replay.
pub struct gpurt_graph_exec_s {
    _opaque: [u8; 0],
}
/// The handle of an instantiated graph: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_graph_exec_t = *mut gpurt_graph_exec_s;

/// A private memory pool that several captures share (torch.cuda.graph_pool_handle()):
/// a memory pool handle, which gpurt_mem_pool_stats, _usage, _empty_cache,
/// _get_device and _malloc also take.
pub type gpurt_graph_pool_t = gpurt_mem_pool_t;

fn h<T>(p: *mut T) -> Handle {
    Handle::from_ptr(p)
}

/// Begins capturing `stream` into a graph; `mode` is `GPURT_CAPTURE_MODE_GLOBAL`,
/// `_THREAD_LOCAL` or `_RELAXED`. While it captures, gpurt_malloc on it (and on
/// streams joined to the capture) serves memory from `pool`, or from a new private
/// pool of the graph when `pool` is NULL: the addresses stay the graph's until the
/// graph and its execs are destroyed.
///
/// @param stream the stream to capture (not the legacy default stream)
/// @param mode GPURT_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED
/// @param pool a pool from gpurt_graph_pool_create the capture allocates from; NULL: a new private pool of the graph
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `pool`; GPURT_ERROR_INVALID_ARGUMENT for an unknown mode; GPURT_ERROR_STREAM_CAPTURE for a stream already capturing or the legacy stream; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: work queued on `stream` from now on is recorded, not run.
#[no_mangle]
pub extern "C" fn gpurt_stream_begin_capture(stream: gpurt_stream_t, mode: c_int, pool: gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_begin_capture", || {
        let pool = (!pool.is_null()).then(|| h(pool));
        super::begin_capture(h(stream), mode, pool)
    })
}

/// Begins capturing `stream` into a graph whose gpurt allocations (gpurt_malloc and
/// the pools' allocations on `stream` and on streams joined to the capture) come from
/// `pool` in stream order, as outside a capture: a block freed during the capture
/// serves the stream's next allocation, inside the capture or after it, so the graph's
/// temporary memory is shared with the stream's other work (the way RMM's pools and
/// ggml's own pool serve captures). Its replays must therefore be ordered with that
/// work: replay it on the capturing stream (or after the stream's earlier work and
/// before its later). Until the graph and every exec made from it are destroyed, the
/// pool keeps its memory mapped (its empty_cache, collection and out-of-memory release
/// give none back; a sleep maps it all back at the same addresses) and cannot be
/// destroyed. gpurt_stream_begin_capture gives a graph memory of its own instead.
///
/// @param stream the stream to capture (not the legacy default stream)
/// @param mode GPURT_CAPTURE_MODE_GLOBAL, _THREAD_LOCAL or _RELAXED
/// @param pool a pool from gpurt_mem_pool_create, or a device's default pool (gpurt_mem_pool_default), on the stream's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream` or `pool`; GPURT_ERROR_INVALID_ARGUMENT for an unknown mode, a pool on another device, or a graph pool (pass it to gpurt_stream_begin_capture); GPURT_ERROR_NOT_SUPPORTED under backend:cudaMallocAsync (a capture's allocations are then the driver's memory nodes); GPURT_ERROR_STREAM_CAPTURE for a stream already capturing or the legacy stream; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side: work queued on `stream` from now on is recorded, not run.
#[no_mangle]
pub extern "C" fn gpurt_stream_begin_capture_shared(stream: gpurt_stream_t, mode: c_int, pool: gpurt_mem_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_begin_capture_shared", || super::begin_capture_shared(h(stream), mode, h(pool)))
}

/// Ends the capture on `stream` and gives the graph.
///
/// @param stream the capturing stream
/// @param[out] graph receives the captured graph; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_STREAM_CAPTURE for a stream not capturing, or a capture invalidated by an illegal call (the message names it); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_end_capture(stream: gpurt_stream_t, graph: *mut gpurt_graph_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_end_capture", || {
        let out = Out::new(graph, "graph")?;
        out.write(super::end_capture(h(stream))?.to_ptr());
        Ok(())
    })
}

/// A private pool on `device` for captures to share.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] pool receives a pool for captures to share; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_pool_create(device: c_int, pool: *mut gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_pool_create", || {
        let out = Out::new(pool, "pool")?;
        out.write(crate::alloc::mempool::device::create_graph_pool(device)?.to_ptr());
        Ok(())
    })
}

/// Drops the caller's reference to a pool (as gpurt_mem_pool_destroy does for a
/// graph pool); graphs captured into it keep it alive.
///
/// @param pool a pool from gpurt_graph_pool_create
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `pool`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_pool_destroy(pool: gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_pool_destroy", || crate::alloc::mempool::device::destroy_graph_pool(h(pool)))
}

/// Makes the captures this thread did not begin through gpurt (a framework's own
/// `cudaStreamBeginCapture`, as `torch.cuda.graph` and CuPy's graphs make) allocate
/// from `pool`, so that several graphs share one pool's memory as captures into one
/// gpurt_graph_pool_t do (vLLM's graphs of many batch sizes). A capture takes the pool
/// bound to the thread of its first gpurt allocation; without one, each such capture
/// gets a private pool of its own. Either way its memory stays the graph's until the
/// driver destroys the graph and every executable graph made from it (after their
/// launches complete), and nobody else is handed it meanwhile. The binding holds no
/// reference: a pool destroyed while bound is refused at the next capture's first allocation.
///
/// @param pool a pool from gpurt_graph_pool_create; NULL unbinds (each capture its own pool again)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a destroyed or wrong-kind `pool`; GPURT_ERROR_INVALID_ARGUMENT for a memory pool that is not a graph pool; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_pool_bind_thread(pool: gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_pool_bind_thread", || super::bind_thread_pool((!pool.is_null()).then(|| h(pool))))
}

/// The graph pool bound to this thread by gpurt_graph_pool_bind_thread.
///
/// @param[out] pool receives the bound pool, or NULL when none is bound; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_pool_bound_thread(pool: *mut gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_pool_bound_thread", || {
        let out = Out::new(pool, "pool")?;
        out.write(super::bound_thread_pool().map_or(std::ptr::null_mut(), |h| h.to_ptr()));
        Ok(())
    })
}

/// Instantiates `graph`. `flags`: `GPURT_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH`,
/// `_UPLOAD` (uploads on `upload_stream`, else ignored and may be NULL),
/// `_USE_NODE_PRIORITY`.
///
/// @param graph a captured graph
/// @param flags 0, or GPURT_GRAPH_INSTANTIATE_* flags or-ed
/// @param upload_stream with GPURT_GRAPH_INSTANTIATE_UPLOAD, the stream the upload runs on; else ignored and may be NULL
/// @param[out] exec receives the instantiated graph; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `graph`; GPURT_ERROR_INVALID_ARGUMENT for unknown flags, or UPLOAD without a stream; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not wait for the device (an upload is enqueued on `upload_stream`).
#[no_mangle]
pub extern "C" fn gpurt_graph_instantiate(
    graph: gpurt_graph_t,
    flags: c_ulonglong,
    upload_stream: gpurt_stream_t,
    exec: *mut gpurt_graph_exec_t,
) -> gpurt_status_t {
    boundary::call("gpurt_graph_instantiate", || {
        let out = Out::new(exec, "exec")?;
        let upload = (!upload_stream.is_null()).then(|| h(upload_stream));
        out.write(super::instantiate(h(graph), flags, upload)?.to_ptr());
        Ok(())
    })
}

/// The native `CUgraph` (usable as `cudaGraph_t`) of a captured graph, for code that
/// instantiates, updates or inspects graphs with the driver's or the runtime's own
/// calls (ggml's CUDA backend). gpurt_graph_destroy still destroys it. An exec the
/// caller instantiates from it does not hold the graph's private pool: capture into a
/// pool of gpurt_graph_pool_create and keep that pool while such execs live.
///
/// @param graph a captured graph
/// @param[out] native receives the `CUgraph`, owned by gpurt; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `graph`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_native(graph: gpurt_graph_t, native: *mut *mut libc::c_void) -> gpurt_status_t {
    boundary::call("gpurt_graph_native", || {
        let out = Out::new(native, "native")?;
        out.write(super::graph_native(h(graph))? as *mut libc::c_void);
        Ok(())
    })
}

/// The native `CUgraphExec` (usable as `cudaGraphExec_t`) of an instantiated graph.
///
/// @param exec an instantiated graph
/// @param[out] native receives the `CUgraphExec`, owned by gpurt; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `exec`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_exec_native(exec: gpurt_graph_exec_t, native: *mut *mut libc::c_void) -> gpurt_status_t {
    boundary::call("gpurt_graph_exec_native", || {
        let out = Out::new(native, "native")?;
        out.write(super::exec_native(h(exec))? as *mut libc::c_void);
        Ok(())
    })
}

/// Uploads an instantiated graph's work to the device ahead of its first launch.
///
/// @param exec an instantiated graph
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `exec` or `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead.
#[no_mangle]
pub extern "C" fn gpurt_graph_upload(exec: gpurt_graph_exec_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_upload", || super::upload(h(exec), h(stream)))
}

/// Replays an instantiated graph on `stream`.
///
/// @param exec an instantiated graph
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `exec` or `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Launching inside another capture adds the graph as a child node.
#[no_mangle]
pub extern "C" fn gpurt_graph_launch(exec: gpurt_graph_exec_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_launch", || super::launch(h(exec), h(stream)))
}

/// Updates `exec` in place from `graph` (same topology, new parameters such as
/// kernel arguments). `GPURT_ERROR_GRAPH_UPDATE` with the reason when it cannot:
/// instantiate `graph` instead.
///
/// @param exec the instantiated graph to update
/// @param graph a graph of the same topology
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `exec` or `graph`; GPURT_ERROR_GRAPH_UPDATE with the reason where the graphs differ (`exec` is unchanged); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_exec_update(exec: gpurt_graph_exec_t, graph: gpurt_graph_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_exec_update", || super::update(h(exec), h(graph)))
}

/// Writes `graph` as a Graphviz DOT file at `path` (`verbose` != 0: with each node's
/// parameters).
///
/// @param graph a graph
/// @param path the file to write
/// @param verbose non-zero: each node's parameters too
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `graph`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `path`; an error where the file cannot be written; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_debug_dot_print(graph: gpurt_graph_t, path: *const c_char, verbose: c_int) -> gpurt_status_t {
    boundary::call("gpurt_graph_debug_dot_print", || super::debug_dot(h(graph), in_str(path, "path")?, verbose != 0))
}

/// Destroys a graph. Its private pool lives on while an exec of it does.
///
/// @param graph a graph
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `graph`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_graph_destroy(graph: gpurt_graph_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_destroy", || super::destroy_graph(h(graph)))
}

/// Destroys an instantiated graph. When the last graph or exec of a private pool
/// goes, gpurt waits for the device (a replay may still use the memory) and then
/// returns the pool's free memory to the driver.
///
/// @param exec an instantiated graph
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `exec`; or a status every call may give (@ref statuses).
/// @par Ordering
/// The last graph or exec of a private pool waits for the device before the pool's memory goes back to the driver; otherwise host-side.
#[no_mangle]
pub extern "C" fn gpurt_graph_exec_destroy(exec: gpurt_graph_exec_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_exec_destroy", || super::destroy_exec(h(exec)))
}

/// Makes a conditional handle for the graph `stream` is capturing into now: the graph
/// that will hold the conditional node deciding on it (a body's graph inside another
/// node's body). A kernel sets it with `cudaGraphSetConditional(handle, value)` (the
/// handle is a `cudaGraphConditionalHandle`), or `gpurt_graph_conditional_set` from a
/// value in device memory. CUDA 12.4+.
///
/// @param stream a capturing stream
/// @param default_value the value at each launch, with GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT
/// @param flags 0 or GPURT_GRAPH_CONDITIONAL_ASSIGN_DEFAULT
/// @param[out] handle receives the handle; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL or for unknown flags; GPURT_ERROR_STREAM_CAPTURE when `stream` is not capturing; GPURT_ERROR_NOT_SUPPORTED where the driver predates conditional nodes (CUDA 12.4); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: adds nothing to the graph.
#[no_mangle]
pub extern "C" fn gpurt_graph_conditional_handle_create(
    stream: gpurt_stream_t,
    default_value: c_uint,
    flags: c_uint,
    handle: *mut c_ulonglong,
) -> gpurt_status_t {
    boundary::call("gpurt_graph_conditional_handle_create", || {
        let out = Out::new(handle, "handle")?;
        out.write(super::conditional::handle_create(h(stream), default_value, flags)?);
        Ok(())
    })
}

/// Captures, on `stream`, gpurt's one-thread kernel that sets `handle` to the unsigned
/// int at device address `value` when it runs: a loop's condition that the caller's
/// kernels compute into device memory.
///
/// @param stream a stream capturing the graph `handle` was made for, or a body of it
/// @param handle a conditional handle (gpurt_graph_conditional_handle_create)
/// @param value a device address of an unsigned int, read when the kernel runs
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `value`; GPURT_ERROR_STREAM_CAPTURE when `stream` is not capturing; GPURT_ERROR_NOT_SUPPORTED where the driver predates conditional nodes (CUDA 12.4); or a status every call may give (@ref statuses).
/// @par Ordering
/// Captured: runs in stream order at each replay.
#[no_mangle]
pub extern "C" fn gpurt_graph_conditional_set(stream: gpurt_stream_t, handle: c_ulonglong, value: *const c_uint) -> gpurt_status_t {
    boundary::call("gpurt_graph_conditional_set", || super::conditional::set_from_device(h(stream), handle, value as u64))
}

/// Adds a conditional node to the graph `stream` captures, after the work captured on
/// it so far, and begins capturing the node's first body on `stream`: until
/// `gpurt_graph_conditional_next` or `_end`, everything queued on `stream` through gpurt
/// (and on the native stream `gpurt_stream_native` gives meanwhile, for your own
/// kernels) goes into that body; gpurt allocations come from the capture's private
/// pool. `type`: GPURT_GRAPH_CONDITIONAL_IF (1 body, or 2: the second runs when the
/// value is 0; CUDA 12.8+), _WHILE (1 body, run while the value is non-zero, checked
/// before each run) or _SWITCH (1 to GPURT_GRAPH_CONDITIONAL_MAX_BODIES bodies: body
/// `value` runs; CUDA 12.8+). Nodes nest. Forked streams must rejoin `stream`
/// before each begin, next and end.
///
/// @param stream a capturing stream
/// @param handle a conditional handle made for the graph `stream` captures into
/// @param type GPURT_GRAPH_CONDITIONAL_IF, _WHILE or _SWITCH
/// @param bodies how many bodies the node has (see `type`)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_ARGUMENT for an unknown type or a number of bodies it cannot have; GPURT_ERROR_STREAM_CAPTURE when `stream` is not capturing; GPURT_ERROR_NOT_SUPPORTED where the driver predates conditional nodes (CUDA 12.4); or a status every call may give (@ref statuses).
/// @par Ordering
/// Captured: the node runs in stream order at each replay.
#[no_mangle]
pub extern "C" fn gpurt_graph_conditional_begin(stream: gpurt_stream_t, handle: c_ulonglong, r#type: c_int, bodies: c_uint) -> gpurt_status_t {
    boundary::call("gpurt_graph_conditional_begin", || super::conditional::begin(h(stream), handle, r#type, bodies))
}

/// Ends the body being captured on `stream` and begins its node's next body (an IF's
/// else, a SWITCH's next case).
///
/// @param stream a stream capturing a conditional node's body
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_ARGUMENT when `stream` captures no body, or its node's bodies are all begun; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only.
#[no_mangle]
pub extern "C" fn gpurt_graph_conditional_next(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_conditional_next", || super::conditional::next(h(stream)))
}

/// Ends the body being captured on `stream`, and with it the node begun by
/// `gpurt_graph_conditional_begin` (bodies never begun stay empty): `stream` captures
/// into the graph around the node again, after it.
///
/// @param stream a stream capturing a conditional node's body
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_ARGUMENT when `stream` captures no body; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only.
#[no_mangle]
pub extern "C" fn gpurt_graph_conditional_end(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_conditional_end", || super::conditional::end(h(stream)))
}
