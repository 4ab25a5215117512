use libc::{c_char, c_int, c_ulonglong};

use crate::boundary::{self, in_str, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::alloc::mempool::ffi::gpurt_mem_pool_t;
use crate::stream::ffi::gpurt_stream_t;

/// A captured graph.
pub struct gpurt_graph_s {
    _opaque: [u8; 0],
}
pub type gpurt_graph_t = *mut gpurt_graph_s;

/// An instantiated graph, ready to replay.
pub struct gpurt_graph_exec_s {
    _opaque: [u8; 0],
}
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
#[no_mangle]
pub extern "C" fn gpurt_stream_begin_capture(stream: gpurt_stream_t, mode: c_int, pool: gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_begin_capture", || {
        let pool = (!pool.is_null()).then(|| h(pool));
        super::begin_capture(h(stream), mode, pool)
    })
}

/// Ends the capture on `stream` and gives the graph.
#[no_mangle]
pub extern "C" fn gpurt_stream_end_capture(stream: gpurt_stream_t, graph: *mut gpurt_graph_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_end_capture", || {
        let out = Out::new(graph, "graph")?;
        out.write(super::end_capture(h(stream))?.to_ptr());
        Ok(())
    })
}

/// A private pool on `device` for captures to share.
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
#[no_mangle]
pub extern "C" fn gpurt_graph_pool_destroy(pool: gpurt_graph_pool_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_pool_destroy", || crate::alloc::mempool::device::destroy_graph_pool(h(pool)))
}

/// Instantiates `graph`. `flags`: `GPURT_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH`,
/// `_UPLOAD` (uploads on `upload_stream`, else ignored and may be NULL),
/// `_USE_NODE_PRIORITY`.
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

/// The native `CUgraphExec` (usable as `cudaGraphExec_t`) of an instantiated graph.
#[no_mangle]
pub extern "C" fn gpurt_graph_exec_native(exec: gpurt_graph_exec_t, native: *mut *mut libc::c_void) -> gpurt_status_t {
    boundary::call("gpurt_graph_exec_native", || {
        let out = Out::new(native, "native")?;
        out.write(super::exec_native(h(exec))? as *mut libc::c_void);
        Ok(())
    })
}

/// Uploads an instantiated graph's work to the device ahead of its first launch.
#[no_mangle]
pub extern "C" fn gpurt_graph_upload(exec: gpurt_graph_exec_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_upload", || super::upload(h(exec), h(stream)))
}

/// Replays an instantiated graph on `stream`.
#[no_mangle]
pub extern "C" fn gpurt_graph_launch(exec: gpurt_graph_exec_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_launch", || super::launch(h(exec), h(stream)))
}

/// Updates `exec` in place from `graph` (same topology, new parameters such as
/// kernel arguments). `GPURT_ERROR_GRAPH_UPDATE` with the reason when it cannot:
/// instantiate `graph` instead.
#[no_mangle]
pub extern "C" fn gpurt_graph_exec_update(exec: gpurt_graph_exec_t, graph: gpurt_graph_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_exec_update", || super::update(h(exec), h(graph)))
}

/// Writes `graph` as a Graphviz DOT file at `path` (`verbose` != 0: with each node's
/// parameters).
#[no_mangle]
pub extern "C" fn gpurt_graph_debug_dot_print(graph: gpurt_graph_t, path: *const c_char, verbose: c_int) -> gpurt_status_t {
    boundary::call("gpurt_graph_debug_dot_print", || super::debug_dot(h(graph), in_str(path, "path")?, verbose != 0))
}

/// Destroys a graph. Its private pool lives on while an exec of it does.
#[no_mangle]
pub extern "C" fn gpurt_graph_destroy(graph: gpurt_graph_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_destroy", || super::destroy_graph(h(graph)))
}

/// Destroys an instantiated graph. When the last graph or exec of a private pool
/// goes, gpurt waits for the device (a replay may still use the memory) and then
/// returns the pool's free memory to the driver.
#[no_mangle]
pub extern "C" fn gpurt_graph_exec_destroy(exec: gpurt_graph_exec_t) -> gpurt_status_t {
    boundary::call("gpurt_graph_exec_destroy", || super::destroy_exec(h(exec)))
}
