//! Streams: created, pooled, default and wrapped ones behind one handle type; the
//! per-thread current stream of each device with a push/pop scope; query,
//! synchronise, cross-stream waits, host callbacks and capture status.

pub mod ffi;
pub(crate) mod key;

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{self, CUstream, CUstreamCaptureStatus};

use crate::boundary::lock;
use crate::device::{self, per_device};
use crate::driver::check;
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, HandleTable, Kind, Packed};
use crate::sanitizer::{self, StreamKind};

/// The flag of a stream that does not synchronise with the legacy default stream.
pub const GPURT_STREAM_NON_BLOCKING: u32 = 1;
/// Streams each pool holds per device and priority, handed out round-robin (as PyTorch).
pub const GPURT_STREAM_POOL_SIZE: usize = 32;

/// The driver's values for the legacy and the per-thread default stream
/// (`CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`).
pub(crate) const NATIVE_LEGACY: u64 = 1;
pub(crate) const NATIVE_PER_THREAD: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Created by `create`; kept for a later `create` by `destroy` (see `RETIRED`).
    Owned = 0,
    /// Owned by the stream pool; `destroy` is a no-op.
    Pooled = 1,
    /// The caller's `CUstream`/`cudaStream_t`; gpurt never destroys it.
    External = 2,
    /// The legacy default stream of a device (`CU_STREAM_LEGACY`).
    LegacyDefault = 3,
    /// The per-thread default stream of a device (`CU_STREAM_PER_THREAD`).
    PerThreadDefault = 4,
    /// Made by `create_in_green_context` on a green context's SMs; kept, as owned
    /// ones, for a later stream of the same green context (see `RETIRED`).
    Green = 5,
}

/// A stream as its handle slot stores it: the native handle and packed metadata,
/// decoded on demand, so that a lookup stays two machine words in registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream {
    pub raw: usize,
    meta: u64,
}

impl Packed for Stream {
    fn pack(self) -> [u64; 2] {
        [self.raw as u64, self.meta]
    }
    fn unpack(w: [u64; 2]) -> Self {
        Stream { raw: w[0] as usize, meta: w[1] }
    }
}

impl Stream {
    pub fn new(raw: usize, device: i32, priority: i32, flags: u32, origin: Origin) -> Stream {
        let meta = (device as u16 as u64)
            | ((priority as i16 as u16 as u64) << 16)
            | ((flags as u8 as u64) << 32)
            | ((origin as u64) << 40);
        Stream { raw, meta }
    }
    pub fn device(self) -> i32 {
        self.meta as u16 as i32
    }
    pub fn priority(self) -> i32 {
        (self.meta >> 16) as u16 as i16 as i32
    }
    pub fn flags(self) -> u32 {
        (self.meta >> 32) as u8 as u32
    }
    pub fn origin(self) -> Origin {
        match (self.meta >> 40) as u8 {
            0 => Origin::Owned,
            1 => Origin::Pooled,
            2 => Origin::External,
            3 => Origin::LegacyDefault,
            4 => Origin::PerThreadDefault,
            _ => Origin::Green,
        }
    }
    pub fn cu(self) -> CUstream {
        self.raw as CUstream
    }
    fn is_default(self) -> bool {
        matches!(self.origin(), Origin::LegacyDefault | Origin::PerThreadDefault)
    }
    /// Runs a driver call on this stream. The default streams name "the current
    /// context's" stream, so their device is made current around the call; other
    /// streams carry their context and need no switch (the hot path).
    #[inline]
    pub fn run<R>(self, body: impl FnOnce(CUstream) -> Result<R>) -> Result<R> {
        if self.is_default() {
            device::with_device(self.device(), || body(self.cu()))
        } else {
            body(self.cu())
        }
    }
    /// `run`, with the stream's device current around the call whatever the stream:
    /// for copies, which the driver refuses (`CUDA_ERROR_INVALID_VALUE` for pageable
    /// host memory) on a stream of a device whose context is not current. The CUDA
    /// runtime's copies switch too.
    #[inline]
    pub fn run_in_context<R>(self, body: impl FnOnce(CUstream) -> Result<R>) -> Result<R> {
        device::with_context(device::primary_context(self.device())?, || body(self.cu()))
    }
}

impl From<Stream> for sanitizer::StreamRef {
    /// The stream as the sanitizer names it, keyed as the allocators key it.
    fn from(stream: Stream) -> Self {
        let kind = match stream.origin() {
            Origin::LegacyDefault => StreamKind::Legacy,
            _ if stream.flags() & GPURT_STREAM_NON_BLOCKING != 0 => StreamKind::NonBlocking,
            _ => StreamKind::Blocking,
        };
        key::sanitizer_ref(stream.device(), stream.raw as u64, Some(kind))
    }
}

static STREAMS: HandleTable<Stream> = HandleTable::new(Kind::Stream);

/// Stream handles that capture a conditional node's body (`graph::conditional`): the
/// handle's value and the body's native stream, innermost last. While a body is being
/// captured, every gpurt call on the handle goes to the body's stream.
static BODIES: Mutex<Vec<(u64, usize)>> = Mutex::new(Vec::new());
/// How many entries `BODIES` has: while zero, a lookup reads nothing more.
static BODY_COUNT: AtomicUsize = AtomicUsize::new(0);

#[inline]
pub fn get(handle: Handle) -> Result<Stream> {
    let stream = STREAMS.get(handle)?;
    if BODY_COUNT.load(Ordering::Acquire) == 0 {
        return Ok(stream);
    }
    Ok(capturing_body(handle, stream))
}

#[cold]
fn capturing_body(handle: Handle, stream: Stream) -> Stream {
    match lock(&BODIES).iter().rev().find(|&&(h, _)| h == handle.0) {
        Some(&(_, raw)) => Stream { raw, ..stream },
        None => stream,
    }
}

/// From now on `handle` names native stream `raw` (a conditional body's), until
/// `end_body_redirect`.
pub(crate) fn redirect_to_body(handle: Handle, raw: usize) {
    let mut bodies = lock(&BODIES);
    bodies.push((handle.0, raw));
    BODY_COUNT.store(bodies.len(), Ordering::Release);
}

/// Ends `handle`'s innermost redirection: the native stream it named before.
pub(crate) fn end_body_redirect(handle: Handle) {
    let mut bodies = lock(&BODIES);
    if let Some(i) = bodies.iter().rposition(|&(h, _)| h == handle.0) {
        bodies.remove(i);
    }
    BODY_COUNT.store(bodies.len(), Ordering::Release);
}

/// Whether `handle` is capturing a conditional body now.
pub(crate) fn captures_a_body(handle: Handle) -> bool {
    BODY_COUNT.load(Ordering::Acquire) > 0 && lock(&BODIES).iter().any(|&(h, _)| h == handle.0)
}

/// A new non-blocking stream of device `d` that gpurt keeps for itself (no handle).
pub(crate) fn create_internal(d: i32) -> Result<Stream> {
    create_raw(d, GPURT_STREAM_NON_BLOCKING, 0)
}

pub fn live_count() -> usize {
    STREAMS.live_count()
}

/// (least, greatest) priority of a device; numerically lower is higher priority.
pub fn priority_range(ordinal: i32) -> Result<(i32, i32)> {
    let d = device::resolve(ordinal)?;
    static RANGES: device::PerDeviceOnce<(i32, i32)> = OnceLock::new();
    let ranges = RANGES.get_or_init(|| per_device(OnceLock::new));
    if let Some(r) = ranges[d as usize].get() {
        return Ok(*r);
    }
    let range = device::with_device(d, || {
        let (mut least, mut greatest) = (0, 0);
        check(unsafe { sys::cuCtxGetStreamPriorityRange(&mut least, &mut greatest) }, "cuCtxGetStreamPriorityRange")?;
        Ok((least, greatest))
    })?;
    Ok(*ranges[d as usize].get_or_init(|| range))
}

/// Checks stream flags and a priority against a device's range (greatest ≤ p ≤ least).
pub fn validate(flags: u32, priority: i32, (least, greatest): (i32, i32)) -> Result<()> {
    if flags & !GPURT_STREAM_NON_BLOCKING != 0 {
        return Err(Error::invalid_argument(format!(
            "stream flags {flags:#x} are not 0 or GPURT_STREAM_NON_BLOCKING"
        )));
    }
    if priority > least || priority < greatest {
        return Err(Error::invalid_argument(format!(
            "stream priority {priority} is outside this device's range [{greatest}, {least}] (lower is higher priority)"
        )));
    }
    Ok(())
}

fn create_raw(d: i32, flags: u32, priority: i32) -> Result<Stream> {
    device::with_device(d, || {
        let mut raw = std::ptr::null_mut();
        check(unsafe { sys::cuStreamCreateWithPriority(&mut raw, flags, priority) }, "cuStreamCreateWithPriority")?;
        created_raw(raw as usize);
        Ok(Stream::new(raw as usize, d, priority, flags, Origin::Owned))
    })
}

/// Owned and green-context streams that callers destroyed, kept for the next `create`
/// with the same device (or green context), flags and priority rather than destroyed.
/// The driver hands a destroyed stream's value to the next new stream at once, and
/// anything keyed by stream, the caching allocator first, would then give the new
/// stream memory that the old stream's queued work still uses (a GPU test saw the data
/// change). A kept stream runs its queued work before anything its next owner queues,
/// so stream order protects that memory. At most as many as were ever alive at once
/// are kept; a green context's go when it is destroyed (`release_green_context`).
static RETIRED: Mutex<Vec<Retired>> = Mutex::new(Vec::new());

/// Native streams gpurt destroyed (a green context's, and one destroyed while it
/// captured), until the driver hands the value to a new stream: an allocator that
/// releases memory of their segments must not ask the driver about a stream that is
/// gone, and does not wait for them. A green context's were waited for before they
/// went; one destroyed while capturing cannot be (synchronising a capturing stream is
/// refused), so work queued on it before its capture began is not waited for.
static DESTROYED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// Whether `native` names a stream gpurt destroyed (see `DESTROYED`).
pub(crate) fn destroyed_by_gpurt(native: u64) -> bool {
    lock(&DESTROYED).contains(&(native as usize))
}

/// Destroys a stream gpurt made, noting it in `DESTROYED`.
fn destroy_raw(stream: Stream) -> Result<()> {
    lock(&DESTROYED).push(stream.raw);
    check(unsafe { sys::cuStreamDestroy_v2(stream.cu()) }, "cuStreamDestroy")
}

/// A new stream's value, no longer a destroyed one.
fn created_raw(raw: usize) {
    lock(&DESTROYED).retain(|&gone| gone != raw);
}

/// Green-context streams alive and retired: (stream value, its `CUgreenCtx`).
static GREEN_OWNERS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

#[derive(Clone, Copy)]
struct Retired {
    stream: Stream,
    /// The `CUgreenCtx` that made it; 0 for a stream of the device's primary context.
    green: usize,
}

fn take_retired(d: i32, flags: u32, priority: i32, green: usize) -> Option<Stream> {
    let mut retired = lock(&RETIRED);
    let i = retired
        .iter()
        .position(|r| (r.stream.device(), r.stream.flags(), r.stream.priority(), r.green) == (d, flags, priority, green))?;
    Some(retired.swap_remove(i).stream)
}

/// A new stream on `ordinal` with `flags` (0 or `GPURT_STREAM_NON_BLOCKING`) and
/// `priority`: a destroyed one of the same kind if there is one (see `RETIRED`).
pub fn create(ordinal: i32, flags: u32, priority: i32) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    validate(flags, priority, priority_range(d)?)?;
    let stream = match take_retired(d, flags, priority, 0) {
        Some(kept) => kept,
        None => create_raw(d, flags, priority)?,
    };
    STREAMS.insert(stream).inspect_err(|_| drop(retire(stream)))
}

/// A new stream of green context `green` (a `CUgreenCtx` of device `d`), limited to its
/// SMs: non-blocking, as the driver requires of them; a retired one if there is one.
pub fn create_in_green_context(green: usize, d: i32, flags: u32, priority: i32) -> Result<Handle> {
    validate(flags, priority, priority_range(d)?)?;
    if flags & GPURT_STREAM_NON_BLOCKING == 0 {
        return Err(Error::invalid_argument(
            "a green context's streams do not synchronise with the default stream: pass GPURT_STREAM_NON_BLOCKING",
        ));
    }
    let stream = match take_retired(d, flags, priority, green) {
        Some(kept) => kept,
        None => {
            let mut raw = std::ptr::null_mut();
            let code = unsafe { sys::cuGreenCtxStreamCreate(&mut raw, green as sys::CUgreenCtx, flags, priority) };
            check(code, "cuGreenCtxStreamCreate")?;
            created_raw(raw as usize);
            lock(&GREEN_OWNERS).push((raw as usize, green));
            Stream::new(raw as usize, d, priority, flags, Origin::Green)
        }
    };
    STREAMS.insert(stream).inspect_err(|_| drop(retire(stream)))
}

/// How many streams of green context `green` have live handles.
pub fn green_context_streams(green: usize) -> usize {
    let retired: Vec<usize> = lock(&RETIRED).iter().filter(|r| r.green == green).map(|r| r.stream.raw).collect();
    lock(&GREEN_OWNERS).iter().filter(|&&(raw, owner)| owner == green && !retired.contains(&raw)).count()
}

/// Destroys the retired streams of green context `green`, once their queued work is
/// done (the allocator may hand their cached memory to a stream that reuses a value).
pub fn release_green_context(green: usize) -> Result<()> {
    let mine: Vec<Stream> = {
        let mut retired = lock(&RETIRED);
        let (mine, others) = retired.drain(..).partition(|r| r.green == green);
        *retired = others;
        mine.into_iter().map(|r: Retired| r.stream).collect()
    };
    lock(&GREEN_OWNERS).retain(|&(_, owner)| owner != green);
    let mut result = Ok(());
    for stream in mine {
        let synced = check(unsafe { sys::cuStreamSynchronize(stream.cu()) }, "cuStreamSynchronize");
        let destroyed = destroy_raw(stream);
        result = result.and(synced).and(destroyed);
    }
    result
}

/// Keeps an owned or green-context stream for reuse (see `RETIRED`). One that is
/// capturing a graph is destroyed instead, with the driver's answer, as before there
/// was reuse.
fn retire(stream: Stream) -> Result<()> {
    if stream.run(native_capture_status)? == CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        let green = match stream.origin() {
            Origin::Green => lock(&GREEN_OWNERS).iter().find(|&&(raw, _)| raw == stream.raw).map_or(0, |&(_, g)| g),
            _ => 0,
        };
        lock(&RETIRED).push(Retired { stream, green });
        return Ok(());
    }
    lock(&GREEN_OWNERS).retain(|&(raw, _)| raw != stream.raw);
    destroy_raw(stream)
}

/// Destroys a stream's handle. Work already queued on it still runs to completion,
/// and the call does not wait. An owned or green-context stream is kept for a later
/// stream of its kind (see `RETIRED`); pooled and default streams are not destroyed (a
/// no-op); for a wrapped external stream only the handle is released.
pub fn destroy(handle: Handle) -> Result<()> {
    let stream = get(handle)?;
    match stream.origin() {
        Origin::Pooled | Origin::LegacyDefault | Origin::PerThreadDefault => Ok(()),
        Origin::External => STREAMS.remove(handle).map(sanitizer::stream_forgotten),
        Origin::Owned | Origin::Green => {
            let stream = STREAMS.remove(handle)?;
            sanitizer::stream_forgotten(stream);
            retire(stream)
        }
    }
}

/// Wraps a caller's `CUstream`/`cudaStream_t` (not owned: never destroyed by gpurt).
/// `ordinal` is the device whose context the stream belongs to.
pub fn wrap(ordinal: i32, raw: CUstream) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    let (mut flags, mut priority) = (0u32, 0i32);
    device::with_device(d, || {
        check(unsafe { sys::cuStreamGetFlags(raw, &mut flags) }, "cuStreamGetFlags")?;
        check(unsafe { sys::cuStreamGetPriority(raw, &mut priority) }, "cuStreamGetPriority")
    })?;
    let origin = match raw as usize {
        0 | 1 => Origin::LegacyDefault,
        2 => Origin::PerThreadDefault,
        _ => Origin::External,
    };
    STREAMS.insert(Stream::new(raw as usize, d, priority, flags & GPURT_STREAM_NON_BLOCKING, origin))
}

/// One handle per device and kind of default stream, made on first use.
fn default_handle(ordinal: i32, origin: Origin) -> Result<Handle> {
    static DEFAULTS: OnceLock<Box<[[OnceLock<u64>; 2]]>> = OnceLock::new();
    let d = device::resolve(ordinal)?;
    let all = DEFAULTS.get_or_init(|| per_device(|| [OnceLock::new(), OnceLock::new()]));
    let (slot, raw) = match origin {
        Origin::PerThreadDefault => (&all[d as usize][1], 2usize),
        _ => (&all[d as usize][0], 1usize),
    };
    if let Some(h) = slot.get() {
        return Ok(Handle(*h));
    }
    let handle = STREAMS.insert(Stream::new(raw, d, 0, 0, origin))?;
    if slot.set(handle.0).is_err() {
        // Another thread made it first: use that one.
        STREAMS.remove(handle)?;
    }
    Ok(Handle(*slot.get().expect("set above")))
}

pub fn legacy_default(ordinal: i32) -> Result<Handle> {
    default_handle(ordinal, Origin::LegacyDefault)
}

pub fn per_thread_default(ordinal: i32) -> Result<Handle> {
    default_handle(ordinal, Origin::PerThreadDefault)
}

struct Pool {
    streams: Box<[Handle]>,
    next: AtomicUsize,
}

/// A stream from the device's pool, round-robin, created on first use: no driver call
/// after that. `high_priority` picks the pool at the device's greatest priority.
pub fn from_pool(ordinal: i32, high_priority: bool) -> Result<Handle> {
    static POOLS: OnceLock<Box<[[OnceLock<Pool>; 2]]>> = OnceLock::new();
    let d = device::resolve(ordinal)?;
    let pools = POOLS.get_or_init(|| per_device(|| [OnceLock::new(), OnceLock::new()]));
    let cell = &pools[d as usize][high_priority as usize];
    let pool = match cell.get() {
        Some(pool) => pool,
        None => {
            static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
            let _one_builder = lock(&BUILDING);
            match cell.get() {
                Some(pool) => pool,
                None => {
                    let pool = build_pool(d, high_priority)?;
                    cell.get_or_init(|| pool)
                }
            }
        }
    };
    let i = pool.next.fetch_add(1, Ordering::Relaxed) % GPURT_STREAM_POOL_SIZE;
    Ok(pool.streams[i])
}

fn build_pool(d: i32, high_priority: bool) -> Result<Pool> {
    let (least, greatest) = priority_range(d)?;
    let priority = if high_priority { greatest } else { least };
    let mut streams = Vec::with_capacity(GPURT_STREAM_POOL_SIZE);
    let built = (0..GPURT_STREAM_POOL_SIZE).try_for_each(|_| {
        let s = Stream::new(create_raw(d, GPURT_STREAM_NON_BLOCKING, priority)?.raw, d, priority, GPURT_STREAM_NON_BLOCKING, Origin::Pooled);
        let h = STREAMS.insert(s).inspect_err(|_| unsafe {
            sys::cuStreamDestroy_v2(s.cu());
        })?;
        streams.push(h);
        Ok(())
    });
    if let Err(e) = built {
        // Leave nothing half-built behind.
        for h in streams {
            if let Ok(s) = STREAMS.remove(h) {
                unsafe { sys::cuStreamDestroy_v2(s.cu()) };
            }
        }
        return Err(e);
    }
    Ok(Pool { streams: streams.into(), next: AtomicUsize::new(0) })
}

pub fn query(handle: Handle) -> Result<bool> {
    let stream = get(handle)?;
    let idle = stream.run(|s| match unsafe { sys::cuStreamQuery(s) } {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(crate::driver::error("cuStreamQuery", code)),
    })?;
    if idle {
        sanitizer::stream_synchronized(stream);
    }
    Ok(idle)
}

pub fn synchronize(handle: Handle) -> Result<()> {
    let stream = get(handle)?;
    crate::sync_debug::on_blocking_call("stream synchronize")?;
    stream.run(|s| check(unsafe { sys::cuStreamSynchronize(s) }, "cuStreamSynchronize"))?;
    sanitizer::stream_synchronized(stream);
    Ok(())
}

/// A host function queued on a stream, called once with `user` when the work before
/// it is done. It must not call CUDA (the driver's rule for host functions).
pub fn launch_host_func(handle: Handle, func: sys::CUhostFn, user: *mut libc::c_void) -> Result<()> {
    let Some(callback) = func else {
        return Err(Error::invalid_argument("argument `func` is NULL"));
    };
    let stream = get(handle)?;
    match sanitizer::host_function_queued(stream) {
        None => stream.run(|s| check(unsafe { sys::cuLaunchHostFunc(s, func, user) }, "cuLaunchHostFunc")),
        Some(finished) => {
            let told = Box::into_raw(Box::new(TellingHostFn { callback, user: user as usize, finished }));
            stream
                .run(|s| check(unsafe { sys::cuLaunchHostFunc(s, Some(tell_then_call), told.cast()) }, "cuLaunchHostFunc"))
                .inspect_err(|_| drop(unsafe { Box::from_raw(told) }))
        }
    }
}

/// A host function queued while the sanitizer is on: when it runs, the sanitizer
/// learns that the work queued before it finished.
struct TellingHostFn {
    callback: unsafe extern "C" fn(*mut libc::c_void),
    user: usize,
    finished: Box<sanitizer::VectorClock>,
}

unsafe extern "C" fn tell_then_call(data: *mut libc::c_void) {
    // SAFETY: `data` is the box `launch_host_func` leaked for this one call.
    let told = unsafe { Box::from_raw(data.cast::<TellingHostFn>()) };
    let _ = std::panic::catch_unwind(|| sanitizer::host_function_ran(&told.finished));
    unsafe { (told.callback)(told.user as *mut libc::c_void) }
}

/// The driver's unique id of a stream (CUDA 12.0+).
pub fn id(handle: Handle) -> Result<u64> {
    let stream = get(handle)?;
    if !crate::driver::has_symbol("cuStreamGetId") {
        return Err(Error::not_supported("stream ids need a CUDA 12.0 driver (cuStreamGetId)"));
    }
    stream.run(|s| {
        let mut id = 0u64;
        check(unsafe { sys::cuStreamGetId(s, &mut id as *mut u64 as *mut _) }, "cuStreamGetId")?;
        Ok(id)
    })
}

/// Whether a stream is capturing: 0 none, 1 active, 2 invalidated.
pub fn capture_status(handle: Handle) -> Result<i32> {
    get(handle)?.run(|s| Ok(native_capture_status(s)? as i32))
}

/// The capture status of a native stream (whose context is current or implied).
pub(crate) fn native_capture_status(stream: CUstream) -> Result<CUstreamCaptureStatus> {
    let mut status = CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    check(unsafe { sys::cuStreamIsCapturing(stream, &mut status) }, "cuStreamIsCapturing")?;
    Ok(status)
}

/// A native stream's capture state, as the driver reports it.
pub(crate) struct CaptureInfo {
    pub status: CUstreamCaptureStatus,
    /// The capture sequence's id (each capture has its own).
    pub id: u64,
    /// The graph being captured into (null when the stream does not capture).
    pub graph: sys::CUgraph,
}

/// The capture state of a native stream.
pub(crate) fn native_capture_info(native: u64) -> Result<CaptureInfo> {
    let mut info = CaptureInfo { status: CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE, id: 0, graph: std::ptr::null_mut() };
    let (deps, count) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the out-parameters are valid; the dependencies are not asked for.
    let code = unsafe { sys::cuStreamGetCaptureInfo_v2(native as CUstream, &mut info.status, &mut info.id, &mut info.graph, deps, count) };
    check(code, "cuStreamGetCaptureInfo")?;
    Ok(info)
}

/// Fails with `GPURT_ERROR_STREAM_CAPTURE` when `handle` is capturing: for callers that
/// must refuse operations that are illegal during capture.
pub fn ensure_not_capturing(handle: Handle, what: &str) -> Result<()> {
    match capture_status(handle)? {
        0 => Ok(()),
        _ => Err(Error::new(Status::GPURT_ERROR_STREAM_CAPTURE, format!("{what} is illegal while the stream is capturing"))),
    }
}

// ---- the per-thread current stream ------------------------------------------------

thread_local! {
    /// Current stream per device on this thread (None: the device's default stream).
    static CURRENT: RefCell<Vec<Option<Handle>>> = const { RefCell::new(Vec::new()) };
    /// Saved (device, previous current stream of that device, previous current device).
    static SCOPES: RefCell<Vec<(i32, Option<Handle>, i32)>> = const { RefCell::new(Vec::new()) };
}

fn tls_error() -> Error {
    Error::new(Status::GPURT_ERROR_DEINITIALIZED, "this thread is exiting: its current-stream state is gone")
}

fn swap_current(d: i32, new: Option<Handle>) -> Result<Option<Handle>> {
    CURRENT
        .try_with(|cur| {
            let mut cur = cur.borrow_mut();
            if cur.len() <= d as usize {
                cur.resize(d as usize + 1, None);
            }
            std::mem::replace(&mut cur[d as usize], new)
        })
        .map_err(|_| tls_error())
}

/// This thread's current stream of `ordinal`: the last one set, or the legacy default
/// stream. A current stream destroyed since it was set falls back to the default.
pub fn current(ordinal: i32) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    let set = CURRENT.try_with(|cur| cur.borrow().get(d as usize).copied().flatten()).map_err(|_| tls_error())?;
    match set {
        Some(h) if get(h).is_ok() => Ok(h),
        _ => legacy_default(d),
    }
}

/// Makes `handle` the current stream of its device on this thread (the device itself
/// stays current as it was, as `torch.cuda.set_stream`).
pub fn set_current(handle: Handle) -> Result<()> {
    let stream = get(handle)?;
    swap_current(stream.device(), Some(handle)).map(drop)
}

/// Enters a stream scope (`with torch.cuda.stream(s)`): makes `handle`'s device and
/// `handle` current until the matching `pop`.
pub fn push(handle: Handle) -> Result<()> {
    let stream = get(handle)?;
    let previous_device = device::current()?;
    device::set_current(stream.device())?;
    let previous = swap_current(stream.device(), Some(handle))?;
    SCOPES.try_with(|s| s.borrow_mut().push((stream.device(), previous, previous_device))).map_err(|_| tls_error())
}

/// Leaves the innermost stream scope, restoring its device's stream and the device.
pub fn pop() -> Result<()> {
    let scope = SCOPES.try_with(|s| s.borrow_mut().pop()).map_err(|_| tls_error())?;
    let (d, previous, previous_device) =
        scope.ok_or_else(|| Error::invalid_argument("gpurt_stream_pop without a matching gpurt_stream_push"))?;
    swap_current(d, previous)?;
    device::set_current(previous_device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_metadata_packs_losslessly() {
        for origin in [Origin::Owned, Origin::Pooled, Origin::External, Origin::LegacyDefault, Origin::PerThreadDefault, Origin::Green] {
            let s = Stream::new(0x7f00_dead_beef, 7, -5, GPURT_STREAM_NON_BLOCKING, origin);
            assert_eq!(Stream::unpack(s.pack()), s);
            assert_eq!((s.raw, s.device(), s.priority(), s.flags(), s.origin()), (0x7f00_dead_beef, 7, -5, 1, origin));
        }
    }

    #[test]
    fn priority_and_flag_validation() {
        let range = (0, -5); // least 0, greatest -5, as on recent GPUs
        assert!(validate(0, 0, range).is_ok());
        assert!(validate(GPURT_STREAM_NON_BLOCKING, -5, range).is_ok());
        let err = validate(0, -6, range).unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
        assert!(err.message.contains("[-5, 0]"), "{}", err.message);
        assert!(validate(0, 1, range).is_err());
        assert!(validate(4, 0, range).unwrap_err().message.contains("flags"));
    }

    #[test]
    fn scope_pop_without_push_is_an_error_not_a_crash() {
        let err = pop().unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    }
}
