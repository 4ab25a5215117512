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
//!
//! `release_blas` destroys a device's cuBLAS and cuBLASLt handles, those threads hold
//! included, for the memory the libraries keep per handle (cuBLAS's own workspace
//! pool: 64 MiB on an H200, beside gpurt's workspace). It records each one's math
//! mode and moves the process's release generation on; a thread whose handle was
//! destroyed gets a new one, with that mode and its workspaces, at its next call.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::CUdevice_attribute;

use super::loader::{self, Api, Library, LIBRARIES};
use super::workspace;
use crate::alloc::capture::with_relaxed_capture;
use crate::boundary::lock;
use crate::device;
use crate::device::footprint::Footprint;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// A workspace a handle owns for one stream (of the handle's `workspace_size`).
struct Workspace {
    stream: usize,
    ptr: u64,
}

/// A handle and what gpurt set on it.
struct Leased {
    api: &'static Api,
    /// Names the lease across releases (a destroyed handle's address may be reused).
    id: u64,
    raw: usize,
    /// The release generation this lease was last checked against.
    generation: u64,
    /// The stream the handle was last bound to (and, for cuBLAS, whose workspace
    /// and math mode are set); None until a bind succeeds.
    bound: Option<usize>,
    /// The bound stream's workspace (0 where the library takes none).
    bound_workspace: u64,
    /// The TF32 setting's epoch the math mode was set for (cuBLAS).
    epoch: u64,
    /// The workspace size of this handle's library and device.
    workspace_size: usize,
    workspaces: Vec<Workspace>,
}

/// One library's handles of one device: the idle ones, the count made, and the bytes
/// of their workspaces (in the device's default pool); for cuBLAS and cuBLASLt every
/// live handle, and the leases whose handle a release destroyed.
#[derive(Default)]
struct Shelf {
    idle: Mutex<Vec<Leased>>,
    created: AtomicU64,
    workspace_bytes: AtomicU64,
    live: Mutex<Vec<Made>>,
    released: Mutex<Vec<Released>>,
}

/// A live handle: its lease, itself, and the device memory its creation took.
struct Made {
    id: u64,
    raw: usize,
    bytes: u64,
}

/// A lease whose handle `release_blas` destroyed, and that handle's math mode.
#[derive(Clone, Copy)]
struct Released {
    id: u64,
    math_mode: Option<std::ffi::c_int>,
}

/// Moved on by every `release_blas`: a lease of an older generation checks whether
/// its handle is gone before it is used.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static NEXT_LEASE: AtomicU64 = AtomicU64::new(0);

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

/// This thread's `library` handle for `stream`'s device, bound to `stream`. One
/// borrow of the thread's table serves every path: nothing called while it is held
/// (the library, the allocator) comes back here.
#[inline]
pub fn handle(library: Library, stream: Stream) -> Result<Bound> {
    let slot = slot(library, stream.device());
    let mine = mine()?;
    if let Some(Some(leased)) = mine.borrow().0.get(slot) {
        if leased.bound == Some(stream.raw)
            && leased.generation == GENERATION.load(Ordering::Acquire)
            && (library != Library::Blas || leased.epoch == TF32_EPOCH.load(Ordering::Acquire))
        {
            return Ok(leased.given());
        }
    }
    bind_mine(library, &mut mine.borrow_mut().0, slot, stream)
}

/// This thread's table, or an error once the thread is exiting and has dropped it.
#[inline]
fn mine() -> Result<&'static RefCell<Mine>> {
    // SAFETY: the table lives until this thread exits, and the reference never
    // leaves this thread's current call.
    MINE.try_with(|mine| unsafe { &*(mine as *const RefCell<Mine>) })
        .map_err(|_| Error::new(crate::error::Status::GPURT_ERROR_DEINITIALIZED, "this thread is exiting: its math-library handles are gone"))
}

/// Binds this thread's handle to another stream, leasing one first if it has none.
/// Out of line, so that the bound-stream lookup stays small; `bind` is inlined here.
#[inline(never)]
fn bind_mine(library: Library, mine: &mut Vec<Option<Leased>>, slot: usize, stream: Stream) -> Result<Bound> {
    match mine.get_mut(slot) {
        Some(Some(leased)) => bind(library, leased, stream),
        _ => lease_and_bind(library, mine, slot, stream),
    }
}

impl Leased {
    fn given(&self) -> Bound {
        Bound { handle: self.raw, workspace: self.bound_workspace, workspace_size: self.workspace_size }
    }
}

/// The first call of this thread for `library` on the device: a handle from the
/// pool, or a new one.
#[cold]
#[inline(never)]
fn lease_and_bind(library: Library, mine: &mut Vec<Option<Leased>>, slot: usize, stream: Stream) -> Result<Bound> {
    let leased = lease(library, stream.device())?;
    if mine.len() <= slot {
        mine.resize_with(slot + 1, || None);
    }
    bind(library, mine[slot].insert(leased), stream)
}

fn lease(library: Library, device: i32) -> Result<Leased> {
    let api = loader::get(library)?;
    let shelf = shelf(library, device)?;
    if let Some(idle) = lock(&shelf.idle).pop() {
        return Ok(idle);
    }
    let workspace_size = match library {
        Library::Blas => workspace::blas_size(device::attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?),
        Library::BlasLt => workspace::blaslt_size(),
        _ => 0,
    };
    let id = NEXT_LEASE.fetch_add(1, Ordering::Relaxed);
    let generation = GENERATION.load(Ordering::Acquire);
    let raw = create(api, shelf, device, id)?;
    Ok(Leased { api, id, raw, generation, bound: None, bound_workspace: 0, epoch: 0, workspace_size, workspaces: Vec::new() })
}

/// A new handle for lease `id`, counted in the device's footprint (and, where gpurt
/// may destroy it, among the shelf's live handles).
fn create(api: &'static Api, shelf: &Shelf, device: i32, id: u64) -> Result<usize> {
    let created = || device::with_device(device, || api.create());
    let (raw, bytes) = with_relaxed_capture(|| device::footprint::measured_each(&[device], Footprint::MathHandles, created))?;
    shelf.created.fetch_add(1, Ordering::Relaxed);
    if api.can_destroy() {
        lock(&shelf.live).push(Made { id, raw: raw as usize, bytes: bytes[0] });
    }
    Ok(raw as usize)
}

/// Brings `leased` up to the release generation: where a release destroyed its
/// handle, a new one with the old one's math mode (its workspaces stay).
#[cold]
#[inline(never)]
fn renew(library: Library, leased: &mut Leased, device: i32) -> Result<()> {
    let generation = GENERATION.load(Ordering::Acquire);
    let shelf = shelf(library, device)?;
    let gone = {
        let mut released = lock(&shelf.released);
        released.iter().position(|r| r.id == leased.id).map(|at| released.swap_remove(at))
    };
    if let Some(gone) = gone {
        let raw = create(leased.api, shelf, device, leased.id).inspect_err(|_| lock(&shelf.released).push(gone))?;
        leased.raw = raw;
        leased.bound = None;
        if let Some(mode) = gone.math_mode {
            leased.api.set_math_mode(raw as loader::RawHandle, mode)?;
        }
    }
    leased.generation = generation;
    Ok(())
}

/// `gpurt_blas_handles_release`: destroys every cuBLAS and cuBLASLt handle of
/// `device`, recording each one's math mode for the lease that held it. The handles
/// destroyed before a failure stay released; the rest stay live.
pub fn release_blas(device: i32) -> Result<()> {
    crate::alloc::capture::outside_captures("releasing math-library handles", || release_blas_now(device))
}

fn release_blas_now(device: i32) -> Result<()> {
    let result = [Library::Blas, Library::BlasLt].into_iter().try_for_each(|library| {
        let shelf = shelf(library, device)?;
        let mut live = lock(&shelf.live);
        if live.is_empty() {
            return Ok(()); // nothing made: the library need not even be loaded
        }
        let api = loader::get(library)?;
        device::with_device(device, || {
            while let Some(made) = live.last() {
                let raw = made.raw as loader::RawHandle;
                let math_mode = api.math_mode(raw)?;
                api.destroy(raw)?;
                device::footprint::given_back(device, Footprint::MathHandles, made.bytes);
                lock(&shelf.released).push(Released { id: made.id, math_mode });
                live.pop();
            }
            Ok(())
        })
    });
    GENERATION.fetch_add(1, Ordering::AcqRel);
    result
}

/// Binds `leased` to `stream`: its workspace there (allocated on first use), the
/// stream, and for cuBLAS the workspace and the math mode. Unbound if a step fails.
#[inline]
fn bind(library: Library, leased: &mut Leased, stream: Stream) -> Result<Bound> {
    leased.bound = None;
    if leased.generation != GENERATION.load(Ordering::Acquire) {
        renew(library, leased, stream.device())?;
    }
    let api = leased.api;
    let workspace = workspace_for(library, leased, stream)?;
    let raw = leased.raw as loader::RawHandle;
    api.set_stream(raw, stream.cu())?;
    if library == Library::Blas {
        api.set_workspace(raw, workspace, leased.workspace_size)?;
        let epoch = TF32_EPOCH.load(Ordering::Acquire);
        if leased.epoch != epoch {
            api.set_allow_tf32(raw, allow_tf32())?;
            leased.epoch = epoch;
        }
    }
    leased.bound = Some(stream.raw);
    leased.bound_workspace = workspace;
    Ok(leased.given())
}

/// `leased`'s workspace on `stream`: the one it has, or a new one (0 where the
/// library takes none).
#[inline]
fn workspace_for(library: Library, leased: &mut Leased, stream: Stream) -> Result<u64> {
    if leased.workspace_size == 0 {
        return Ok(0);
    }
    match leased.workspaces.iter().find(|w| w.stream == stream.raw) {
        Some(w) => Ok(w.ptr),
        None => new_workspace(library, leased, stream),
    }
}

/// A workspace for `stream` from the device's default pool on that stream.
#[cold]
#[inline(never)]
fn new_workspace(library: Library, leased: &mut Leased, stream: Stream) -> Result<u64> {
    let (size, shelf) = (leased.workspace_size, shelf(library, stream.device())?);
    let annotation = if library == Library::Blas { "cuBLAS workspace" } else { "cuBLASLt workspace" };
    crate::alloc::history::annotate_push(annotation);
    let ptr = with_relaxed_capture(|| crate::alloc::device::malloc_from_default(stream.device(), size as u64, stream.raw as u64));
    // The push above made a non-empty stack: the pop cannot fail.
    let _ = crate::alloc::history::annotate_pop();
    let ptr = ptr?;
    leased.workspaces.push(Workspace { stream: stream.raw, ptr });
    shelf.workspace_bytes.fetch_add(size as u64, Ordering::Relaxed);
    Ok(ptr)
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
                match crate::alloc::device::free(w.ptr) {
                    Ok(()) => _ = shelf.workspace_bytes.fetch_sub(leased.workspace_size as u64, Ordering::Relaxed),
                    Err(e) => _ = first_error.get_or_insert(e),
                }
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Bytes of the workspaces `device`'s cuBLAS and cuBLASLt handles hold.
pub fn workspace_bytes(device: i32) -> u64 {
    [Library::Blas, Library::BlasLt].iter().filter_map(|&l| shelf(l, device).ok()).map(|s| s.workspace_bytes.load(Ordering::Relaxed)).sum()
}

/// (handles created, handles idle) of `library` on `device`.
pub fn counts(library: Library, device: i32) -> Result<(u64, u64)> {
    let shelf = shelf(library, device)?;
    let idle = lock(&shelf.idle).len() as u64;
    Ok((shelf.created.load(Ordering::Relaxed), idle))
}
