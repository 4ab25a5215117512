//! Handles per thread, kept in pools per library and device (PyTorch's
//! `DeviceThreadHandlePool`): a thread leases one handle per library and device on
//! first use and keeps it until it exits, when the handle goes back to its pool for
//! the next thread. Creating a handle costs milliseconds; a leased one is given out
//! again for a thread-local lookup, or, on another stream, for the library's own
//! bind calls.
//!
//! cuBLAS and cuBLASLt handles own a workspace per stream, from the device's default
//! pool on that stream (stream order makes it safe to reuse there), allocated under
//! the annotation "cuBLAS workspace" / "cuBLASLt workspace". A workspace stays with
//! its handle, through thread exits, until `clear_workspaces` frees those of idle
//! handles. Creating a handle and its workspace relaxes the thread's capture mode,
//! so that a handle first asked for inside a capture works and the capture goes on.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;

use super::loader::{self, Api, Library, LIBRARIES};
use super::workspace;
use crate::alloc::capture::with_relaxed_capture;
use crate::boundary::lock;
use crate::device;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// A workspace a handle owns for one stream.
struct Workspace {
    stream: usize,
    ptr: u64,
    size: usize,
}

/// A handle and what gpurt set on it.
struct Leased {
    raw: usize,
    /// The stream the handle was last bound to (and, for cuBLAS, whose workspace
    /// and math mode are set); None until a bind succeeds.
    bound: Option<usize>,
    /// The bound stream's workspace.
    bound_workspace: (u64, usize),
    /// The TF32 setting's epoch the math mode was set for (cuBLAS).
    epoch: u64,
    /// The workspace size of this handle's library and device.
    workspace_size: usize,
    workspaces: Vec<Workspace>,
}

/// One library's handles of one device: the idle ones and the counts.
#[derive(Default)]
struct Shelf {
    idle: Mutex<Vec<Leased>>,
    created: AtomicU64,
}

fn shelf(library: Library, device: i32) -> Result<&'static Shelf> {
    static SHELVES: OnceLock<Box<[Shelf]>> = OnceLock::new();
    let shelves = SHELVES.get_or_init(|| device::per_device(|| LIBRARIES.map(|_| Shelf::default())).into_vec().into_iter().flatten().collect());
    shelves.get(slot(library, device)).ok_or_else(|| Error::invalid_argument(format!("device {device} has no {} handles", library.name())))
}

fn slot(library: Library, device: i32) -> usize {
    device as usize * LIBRARIES.len() + library as usize
}

/// This thread's leased handles by `slot`; returned to their shelves at thread exit.
struct Mine(Vec<Option<Leased>>);

impl Drop for Mine {
    fn drop(&mut self) {
        for (i, leased) in self.0.drain(..).enumerate() {
            if let Some(leased) = leased {
                let (library, device) = (LIBRARIES[i % LIBRARIES.len()], (i / LIBRARIES.len()) as i32);
                if let Ok(shelf) = shelf(library, device) {
                    lock(&shelf.idle).push(leased);
                }
            }
        }
    }
}

thread_local! {
    static MINE: RefCell<Mine> = const { RefCell::new(Mine(Vec::new())) };
}

static ALLOW_TF32: AtomicBool = AtomicBool::new(false);
/// Raised by every `set_allow_tf32`, so that a cached handle's math mode is set
/// again when next given out. Starts at 1: a new handle's epoch is 0.
static TF32_EPOCH: AtomicU64 = AtomicU64::new(1);

pub fn set_allow_tf32(allow: bool) {
    ALLOW_TF32.store(allow, Ordering::Relaxed);
    TF32_EPOCH.fetch_add(1, Ordering::Release);
}

pub fn allow_tf32() -> bool {
    ALLOW_TF32.load(Ordering::Relaxed)
}

/// A handle given out: the library's handle, and its workspace on the stream
/// (cuBLAS and cuBLASLt; NULL and 0 for the others).
#[derive(Clone, Copy, Debug)]
pub struct Bound {
    pub handle: usize,
    pub workspace: u64,
    pub workspace_size: usize,
}

/// This thread's `library` handle for `stream`'s device, bound to `stream`.
#[inline]
pub fn handle(library: Library, stream: Stream) -> Result<Bound> {
    let slot = slot(library, stream.device());
    let epoch = if library == Library::Blas { TF32_EPOCH.load(Ordering::Acquire) } else { 0 };
    let ready = MINE.with(|mine| {
        let mine = mine.borrow();
        match mine.0.get(slot) {
            Some(Some(l)) if l.bound == Some(stream.raw) && (library != Library::Blas || l.epoch == epoch) => {
                Some(Bound { handle: l.raw, workspace: l.bound_workspace.0, workspace_size: l.bound_workspace.1 })
            }
            _ => None,
        }
    });
    match ready {
        Some(bound) => Ok(bound),
        None => bind(library, stream, slot),
    }
}

/// The slow path: lease a handle if this thread has none, then bind it.
#[cold]
#[inline(never)]
fn bind(library: Library, stream: Stream, slot: usize) -> Result<Bound> {
    let api = loader::get(library)?;
    // The handle leaves the thread's table while the library and the allocator run,
    // so that nothing they call back into finds it borrowed.
    let mine = MINE.with(|mine| mine.borrow_mut().0.get_mut(slot).and_then(Option::take));
    let mut leased = match mine {
        Some(leased) => leased,
        None => lease(api, library, stream.device())?,
    };
    let bound = bind_leased(api, library, &mut leased, stream);
    MINE.with(|mine| {
        let mut mine = mine.borrow_mut();
        if mine.0.len() <= slot {
            mine.0.resize_with(slot + 1, || None);
        }
        mine.0[slot] = Some(leased);
    });
    bound
}

fn lease(api: &Api, library: Library, device: i32) -> Result<Leased> {
    let shelf = shelf(library, device)?;
    if let Some(idle) = lock(&shelf.idle).pop() {
        return Ok(idle);
    }
    let workspace_size = match library {
        Library::Blas => workspace::blas_size(device::attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?),
        Library::BlasLt => workspace::blaslt_size(),
        _ => 0,
    };
    let raw = with_relaxed_capture(|| device::with_device(device, || api.create()))? as usize;
    shelf.created.fetch_add(1, Ordering::Relaxed);
    Ok(Leased { raw, bound: None, bound_workspace: (0, 0), epoch: 0, workspace_size, workspaces: Vec::new() })
}

/// Binds `leased` to `stream`: its workspace there (allocated on first use), the
/// stream, and for cuBLAS the workspace and the math mode. Unbound if a step fails.
fn bind_leased(api: &Api, library: Library, leased: &mut Leased, stream: Stream) -> Result<Bound> {
    leased.bound = None;
    let workspace = workspace_for(library, leased, stream)?;
    let raw = leased.raw as loader::RawHandle;
    api.set_stream(raw, stream.cu())?;
    if library == Library::Blas {
        api.set_workspace(raw, workspace.0, workspace.1)?;
        let epoch = TF32_EPOCH.load(Ordering::Acquire);
        if leased.epoch != epoch {
            api.set_allow_tf32(raw, allow_tf32())?;
            leased.epoch = epoch;
        }
    }
    leased.bound = Some(stream.raw);
    leased.bound_workspace = workspace;
    Ok(Bound { handle: leased.raw, workspace: workspace.0, workspace_size: workspace.1 })
}

/// `leased`'s workspace on `stream`: the one it has, or a new one from the device's
/// default pool on that stream.
fn workspace_for(library: Library, leased: &mut Leased, stream: Stream) -> Result<(u64, usize)> {
    let size = leased.workspace_size;
    if size == 0 {
        return Ok((0, 0));
    }
    if let Some(w) = leased.workspaces.iter().find(|w| w.stream == stream.raw) {
        return Ok((w.ptr, w.size));
    }
    let annotation = if library == Library::Blas { "cuBLAS workspace" } else { "cuBLASLt workspace" };
    crate::alloc::history::annotate_push(annotation);
    let ptr = with_relaxed_capture(|| crate::alloc::device::malloc_from_default(stream.device(), size as u64, stream.raw as u64));
    // The push above made a non-empty stack: the pop cannot fail.
    let _ = crate::alloc::history::annotate_pop();
    let ptr = ptr?;
    leased.workspaces.push(Workspace { stream: stream.raw, ptr, size });
    Ok((ptr, size))
}

/// Frees the workspaces of `device`'s idle cuBLAS and cuBLASLt handles (those no
/// thread holds) back to the device's pool; their next lease allocates anew.
pub fn clear_workspaces(device: i32) -> Result<()> {
    let mut first_error = None;
    for library in [Library::Blas, Library::BlasLt] {
        let shelf = shelf(library, device)?;
        for leased in lock(&shelf.idle).iter_mut() {
            leased.bound = None;
            for w in leased.workspaces.drain(..) {
                if let Err(e) = crate::alloc::device::free(w.ptr) {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// (handles created, handles idle) of `library` on `device`.
pub fn counts(library: Library, device: i32) -> Result<(u64, u64)> {
    let shelf = shelf(library, device)?;
    let idle = lock(&shelf.idle).len() as u64;
    Ok((shelf.created.load(Ordering::Relaxed), idle))
}
