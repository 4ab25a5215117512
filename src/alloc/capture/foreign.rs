//! Captures gpurt did not begin: a framework's own `cudaStreamBeginCapture`
//! (PyTorch's `torch.cuda.graph`, CuPy's, a C++ engine's). The first gpurt allocation
//! on such a capture adopts it: the capture gets a private pool (the one bound to the
//! allocating thread, else a new one), as a capture through gpurt does, and the
//! driver's graph holds a user object whose destructor gives the pool's reference
//! back. The driver runs that destructor once the graph and every executable graph
//! made from it are destroyed and their launches have completed, so the pool's
//! memory is never handed to work outside the graph while a replay may still write it.
//!
//! Destructors run on a driver thread where no CUDA call is allowed: they only queue
//! the capture; the next gpurt call that allocates, frees into a graph pool, empties
//! the cache or reads statistics releases the queued pools, waiting only for the
//! streams that call may wait for (`StreamWaits`).

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use cudarc::driver::sys;

use super::{new_pool, retain_for, route_of, with_registry, with_relaxed_capture, CaptureRoute};
use crate::boundary::lock;
use crate::driver::check;
use crate::error::{Error, Result};

/// Captures whose graphs are gone, queued by the driver's destructor thread.
static GONE: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// `GONE`'s length, read without its lock on every allocation.
static GONE_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Serialises adoptions, so that two threads allocating in one relaxed-mode capture
/// at once adopt it once. Never held by a destructor.
static ADOPTING: Mutex<()> = Mutex::new(());

thread_local! {
    /// The graph pool this thread's foreign captures allocate from, as (pool id, the
    /// caller's handle value); id 0: each capture its own pool.
    static BOUND_POOL: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Makes captures this thread did not begin through gpurt allocate from graph pool
/// `id` (0: each from a new pool of its own), from their first gpurt allocation on
/// this thread; `handle` is the value `bound_pool` gives back. The binding holds no
/// reference: a pool destroyed while bound is refused at the next adoption, naming it.
pub fn bind_thread(id: u64, handle: u64) {
    BOUND_POOL.set((id, handle));
}

/// The handle value of the graph pool bound to this thread, if one is.
pub fn bound_pool() -> Option<u64> {
    let (id, handle) = BOUND_POOL.get();
    (id != 0).then_some(handle)
}

/// Where capture `capture` (of graph `graph`, on `device`) allocates, adopting it if
/// nobody has: from here until its graph and execs are gone, its allocations come
/// from its pool.
#[cold]
pub(super) fn adopt(capture: u64, graph: sys::CUgraph, device: i32) -> Result<CaptureRoute> {
    let _adopting = lock(&ADOPTING);
    if let Some(route) = route_of(capture) {
        return Ok(route); // another thread adopted it meanwhile
    }
    let id = match BOUND_POOL.get().0 {
        0 => new_pool(device, crate::alloc::device::config()?),
        bound => {
            retain_for(bound, device).map_err(|e| e.context("the graph pool bound to this thread (gpurt_graph_pool_bind_thread)"))?;
            bound
        }
    };
    with_registry(|r| r.foreign.insert(capture, id));
    if let Err(e) = with_relaxed_capture(|| hold_until_graph_gone(graph, capture)) {
        // Nothing holds the pool: give its reference back now (no replay can use it).
        if let Some(id) = with_registry(|r| r.foreign.remove(&capture)) {
            super::release_pool_after_work(id);
        }
        return Err(e.context("attaching gpurt's graph pool to a capture gpurt did not begin"));
    }
    route_of(capture).ok_or_else(|| Error::invalid_handle("the capture's graph pool is gone"))
}

/// Makes `graph` hold a user object that queues `capture` when the driver destroys it.
fn hold_until_graph_gone(graph: sys::CUgraph, capture: u64) -> Result<()> {
    keep_library_loaded();
    let mut object = std::ptr::null_mut();
    let payload = capture as usize as *mut c_void;
    let flags = sys::CUuserObject_flags::CU_USER_OBJECT_NO_DESTRUCTOR_SYNC as u32;
    // SAFETY: the destructor reads nothing through its argument (an integer in a pointer).
    check(unsafe { sys::cuUserObjectCreate(&mut object, payload, Some(graph_gone), 1, flags) }, "cuUserObjectCreate")?;
    let moved = sys::CUuserObjectRetain_flags::CU_GRAPH_USER_OBJECT_MOVE as u32;
    // SAFETY: `graph` is the capture's, from the driver; `object` is ours, its one reference moved to the graph.
    let retained = check(unsafe { sys::cuGraphRetainUserObject(graph, object, 1, moved) }, "cuGraphRetainUserObject");
    if retained.is_err() {
        // Our reference was not moved: dropping it runs the destructor, which queues `capture`.
        // SAFETY: `object` holds the one reference this thread created.
        unsafe { sys::cuUserObjectRelease(object, 1) };
    }
    retained
}

/// The user object's destructor, on a driver thread: queues its capture.
unsafe extern "C" fn graph_gone(payload: *mut c_void) {
    let capture = payload as usize as u64;
    if let Ok(mut gone) = GONE.lock() {
        gone.push(capture);
        GONE_COUNT.store(gone.len(), Ordering::Release);
    }
}

/// Which streams a collection of graph pools may wait for before it unmaps their free
/// memory (work queued on a stream may still use a block freed there in stream order).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StreamWaits {
    /// Any: the caller asked for the memory (`gpurt_empty_cache`, an out-of-memory
    /// retry, a share group's request), as PyTorch frees a dead graph's pool then.
    Any,
    /// Only the stream (key) the gpurt call that noticed the pools works on, or none.
    /// A collection in passing, on whatever thread, must not wait for another thread's
    /// stream: a capture that thread begins between the check and the wait would be
    /// invalidated. The memory of other streams stays mapped until a call on its
    /// stream, or one that asks for memory, collects it.
    Only(Option<u64>),
}

thread_local! {
    /// The waits allowed to the collection running on this thread.
    static WAITS: Cell<StreamWaits> = const { Cell::new(StreamWaits::Any) };
}

/// Whether the collection running on this thread may wait for `stream` (a key).
pub(super) fn may_wait_for(stream: u64) -> bool {
    match WAITS.get() {
        StreamWaits::Any => true,
        StreamWaits::Only(only) => only == Some(stream),
    }
}

/// Releases the pools of foreign captures whose graphs are gone, waiting only for the
/// streams `waits` allows. One load while none are.
#[inline]
pub fn settle(waits: StreamWaits) {
    if GONE_COUNT.load(Ordering::Acquire) > 0 {
        settle_gone(waits);
    }
}

/// Puts back the waits allowed before a settle, also if it unwinds.
struct RestoreWaits(StreamWaits);

impl Drop for RestoreWaits {
    fn drop(&mut self) {
        WAITS.set(self.0);
    }
}

#[cold]
#[inline(never)]
fn settle_gone(waits: StreamWaits) {
    let _restore = RestoreWaits(WAITS.replace(waits));
    let gone = {
        let mut gone = lock(&GONE);
        GONE_COUNT.store(0, Ordering::Release);
        std::mem::take(&mut *gone)
    };
    for capture in gone {
        if let Some(id) = with_registry(|r| r.foreign.remove(&capture)) {
            super::release_pool_after_work(id);
        }
    }
    // Those whose memory an earlier settle left mapped (their stream captured then).
    let _ = with_relaxed_capture(|| {
        super::collect_unreferenced();
        Ok(())
    });
}

/// A driver thread may call `graph_gone` after the program has dlclose'd gpurt (a
/// graph outliving it): the first user object pins the library in the process.
fn keep_library_loaded() {
    static PINNED: Once = Once::new();
    PINNED.call_once(|| {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr fills `info` for an address of this library's code.
        if unsafe { libc::dladdr(graph_gone as *const c_void, &mut info) } != 0 && !info.dli_fname.is_null() {
            // SAFETY: a path dladdr gave; NOLOAD takes one more reference to the loaded object, never unloaded.
            unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
        }
    });
}
