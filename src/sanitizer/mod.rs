//! The stream sanitizer (`torch.cuda._sanitizer` for C and C++ engines): finds
//! accesses on two streams that nothing orders, and frees of memory another stream
//! may still use.
//!
//! Off by default: each hook below costs one load and one branch. On
//! (`GPURT_SANITIZER=1` or `gpurt_sanitizer_enable`), streams, events, synchronises,
//! host functions, graph launches, gpurt's allocations and frees, its copies, memsets
//! and random fills, and the caller's declared accesses (`gpurt_sanitizer_access`)
//! feed the happens-before model in `tracker.rs`. A race is logged at error level
//! (whatever the log level) with both accesses' streams, tags, ranges and native
//! stacks, counted, and with `GPURT_SANITIZER_ABORT=1` aborts the process.
//!
//! This core sits low (under `device`), so that the modules it watches call it; it
//! names streams by `StreamId` and events by their native handle. `ffi.rs`, which
//! resolves gpurt handles, sits above `stream`.

pub mod clock;
pub mod ffi;
pub mod shadow;
pub mod tracker;

use std::backtrace::Backtrace;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys;

use crate::boundary::lock;
use crate::log;
pub use clock::VectorClock;
pub use shadow::{Access, AccessInfo};
use tracker::{Declared, Finding, Tracker};

/// A stream as the sanitizer names it: its device and its stream key (see
/// `stream::key`: the legacy stream is 1, each thread's per-thread stream its own key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId {
    pub device: i32,
    pub key: u64,
}

/// How a stream orders itself against the legacy default stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Legacy,
    /// Waits for the legacy stream's work and is waited for by it.
    Blocking,
    NonBlocking,
}

impl StreamKind {
    /// The kind of a stream seen only by its key (a raw stream passed to the
    /// allocator): the legacy and per-thread keys are known; a created stream is taken
    /// as non-blocking until a gpurt handle says otherwise.
    pub fn guess(key: u64) -> StreamKind {
        match key {
            1 => StreamKind::Legacy,
            k if k & 1 == 1 => StreamKind::Blocking,
            _ => StreamKind::NonBlocking,
        }
    }
}

/// A stream at a hook: its identity, the native handle (to ask about capture), and
/// its kind when the caller knows it.
#[derive(Debug, Clone, Copy)]
pub struct StreamRef {
    pub id: StreamId,
    pub native: u64,
    pub kind: Option<StreamKind>,
}

const UNREAD: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNREAD);
static ABORT: AtomicBool = AtomicBool::new(false);
static STACKS: AtomicBool = AtomicBool::new(true);
static REPORTS: AtomicU64 = AtomicU64::new(0);
static TRACKER: Mutex<Option<Tracker>> = Mutex::new(None);

fn env_flag(name: &str) -> Option<bool> {
    std::env::var(name).ok().map(|v| !matches!(v.trim(), "" | "0" | "off" | "false" | "no"))
}

/// Whether the sanitizer is on: the one branch each hook costs when it is off.
#[inline(always)]
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        OFF => false,
        ON => true,
        _ => read_env(),
    }
}

/// Off, and the environment read: no call needed to know it (the declaration
/// entry point's fast path, which must not even save registers).
#[inline(always)]
pub fn known_off() -> bool {
    STATE.load(Ordering::Relaxed) == OFF
}

#[cold]
fn read_env() -> bool {
    let on = env_flag("GPURT_SANITIZER").unwrap_or(false);
    ABORT.store(env_flag("GPURT_SANITIZER_ABORT").unwrap_or(false), Ordering::Relaxed);
    STACKS.store(env_flag("GPURT_SANITIZER_STACKS").unwrap_or(true), Ordering::Relaxed);
    let _ = STATE.compare_exchange(UNREAD, if on { ON } else { OFF }, Ordering::Relaxed, Ordering::Relaxed);
    STATE.load(Ordering::Relaxed) == ON
}

/// Turns the sanitizer on or off. Turning it off forgets everything it tracked, so
/// turning it on again starts afresh (work issued before counts as ordered).
pub fn set_enabled(on: bool) {
    enabled(); // the environment's other settings are read first
    let mut tracker = lock(&TRACKER);
    *tracker = None;
    STATE.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

pub fn set_abort_on_race(abort: bool) {
    enabled();
    ABORT.store(abort, Ordering::Relaxed);
}

/// Whether accesses keep their native stacks for reports (the default; a few
/// microseconds an access).
pub fn set_stacks(keep: bool) {
    enabled();
    STACKS.store(keep, Ordering::Relaxed);
}

/// Races and unsafe frees reported since the process started.
pub fn report_count() -> u64 {
    REPORTS.load(Ordering::Relaxed)
}

/// Runs `f` on the tracker (made on first use) and reports what it found, after
/// the lock is released (a log callback may call gpurt).
fn with_tracker(f: impl FnOnce(&mut Tracker) -> Vec<Finding>) {
    let findings = {
        let mut guard = lock(&TRACKER);
        if STATE.load(Ordering::Relaxed) != ON {
            return; // turned off meanwhile
        }
        f(guard.get_or_insert_with(Tracker::default))
    };
    findings.iter().for_each(report);
}

fn stack() -> Option<Arc<Backtrace>> {
    STACKS.load(Ordering::Relaxed).then(|| Arc::new(Backtrace::force_capture()))
}

/// The capture a native stream is in, if any (a stream the driver cannot answer
/// about is taken as not capturing).
fn capture_of(native: u64) -> Option<u64> {
    // The legacy stream cannot capture; a per-thread stream's capture is not asked
    // about (that needs its context current): its accesses count as run at once.
    if native <= 2 || !crate::driver::is_initialized() {
        return None;
    }
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id = 0u64;
    let (graph, dependencies, count) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    let code = unsafe { sys::cuStreamGetCaptureInfo_v2(native as sys::CUstream, &mut status, &mut id, graph, dependencies, count) };
    (code == sys::CUresult::CUDA_SUCCESS && status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE).then_some(id)
}

// ---- hooks: each a load and a branch while off -------------------------------------

/// Declares an access of `len` bytes at `start` by work queued on `stream`. On a
/// capturing stream, the access is kept for each replay of the captured graph.
#[inline]
pub fn access(stream: impl Into<StreamRef>, start: u64, len: u64, access: Access, tag: &str) {
    if enabled() {
        declare(stream.into(), Declared { start, len, access, tag: tag.into(), stack: None });
    }
}

#[cold]
#[inline(never)]
fn declare(stream: StreamRef, mut declared: Declared) {
    declared.stack = stack();
    match capture_of(stream.native) {
        Some(capture) => with_tracker(|t| {
            t.capture(capture, declared);
            Vec::new()
        }),
        None => with_tracker(|t| t.access(stream.id, stream.kind, declared)),
    }
}

/// The accesses a capture declared, for its graph to replay (see `graph::replay`).
#[derive(Debug, Default)]
pub struct CapturedAccesses(Vec<Declared>);

impl CapturedAccesses {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub fn take_captured(capture: u64) -> CapturedAccesses {
    if !enabled() {
        return CapturedAccesses::default();
    }
    let mut taken = Vec::new();
    with_tracker(|t| {
        taken = t.take_captured(capture);
        Vec::new()
    });
    CapturedAccesses(taken)
}

/// One replay of a graph whose capture declared `accesses`, on `stream`.
pub fn replayed(accesses: &CapturedAccesses, stream: impl Into<StreamRef>) {
    if enabled() && !accesses.is_empty() {
        let stream = stream.into();
        with_tracker(|t| t.replay(stream.id, &accesses.0));
    }
}

/// Runs a hook's model update: cold, so that the hooks stay one branch while off.
#[cold]
#[inline(never)]
fn update(f: impl FnOnce(&mut Tracker)) {
    with_tracker(|t| {
        f(t);
        Vec::new()
    });
}

/// `event` (native) was recorded on `stream`.
#[inline]
pub fn event_recorded(event: u64, stream: impl Into<StreamRef>) {
    if enabled() {
        update(|t| {
            let s = stream.into();
            t.event_recorded(event, s.id, s.kind)
        });
    }
}

/// `stream` waits for `event`'s last record.
#[inline]
pub fn stream_waited(stream: impl Into<StreamRef>, event: u64) {
    if enabled() {
        update(|t| {
            let s = stream.into();
            t.stream_waited(s.id, s.kind, event)
        });
    }
}

/// The host waited for `stream` (or a query found it idle).
#[inline]
pub fn stream_synchronized(stream: impl Into<StreamRef>) {
    if enabled() {
        update(|t| t.stream_synchronized(stream.into().id));
    }
}

/// The host waited for `event` (or a query found it done).
#[inline]
pub fn event_synchronized(event: u64) {
    if enabled() {
        update(|t| t.event_synchronized(event));
    }
}

/// The host waited for every stream of `device`.
#[inline]
pub fn device_synchronized(device: i32) {
    if enabled() {
        update(|t| t.device_synchronized(device));
    }
}

/// `stream` was destroyed: its handle may name a new stream later.
#[inline]
pub fn stream_forgotten(stream: impl Into<StreamRef>) {
    if enabled() {
        update(|t| t.stream_forgotten(stream.into().id));
    }
}

/// gpurt allocated `len` bytes at `start` for `stream`.
#[inline]
pub fn allocated(start: u64, len: u64, stream: impl Into<StreamRef>) {
    if enabled() {
        update(|t| t.allocated(start, len, stream.into().id));
    }
}

/// The block holding `ptr` is also used on `stream` (`gpurt_record_stream`).
#[inline]
pub fn recorded_on(ptr: u64, stream: impl Into<StreamRef>) {
    if enabled() {
        update(|t| t.recorded_on(ptr, stream.into().id));
    }
}

/// gpurt freed the block at `start`.
#[inline]
pub fn freed(start: u64) {
    if enabled() {
        freed_slow(start);
    }
}

#[cold]
#[inline(never)]
fn freed_slow(start: u64) {
    with_tracker(|t| t.freed(start));
}

/// What the host learns when a host function queued now on `stream` runs: `None`
/// while the sanitizer is off.
#[inline]
pub fn host_function_queued(stream: impl Into<StreamRef>) -> Option<Box<VectorClock>> {
    if !enabled() {
        return None;
    }
    let stream = stream.into();
    let mut finished = None;
    with_tracker(|t| {
        finished = Some(Box::new(t.host_function_queued(stream.id, stream.kind)));
        Vec::new()
    });
    finished
}

/// A host function ran: the host knows what its stream had finished when it was queued.
pub fn host_function_ran(finished: &VectorClock) {
    with_tracker(|t| {
        t.host_function_ran(finished);
        Vec::new()
    });
}

// ---- reports ---------------------------------------------------------------------

fn describe(info: &AccessInfo) -> String {
    let what = match info.access {
        Access::Read => "read",
        Access::Write => "write",
    };
    let tag = if info.tag.is_empty() { String::new() } else { format!(" {:?}", &*info.tag) };
    format!(
        "{what}{tag} of [{:#x}, {:#x}) on stream {} of device {}",
        info.start,
        info.start + info.len,
        stream_name(info.stream),
        info.stream.device
    )
}

fn stream_name(id: StreamId) -> String {
    match id.key {
        1 => "legacy-default".into(),
        k if k & 1 == 1 => format!("per-thread-default#{}", k >> 1),
        k => format!("{k:#x}"),
    }
}

fn stacks(pairs: &[(&str, &AccessInfo)]) -> String {
    pairs
        .iter()
        .filter_map(|(label, info)| info.stack.as_ref().map(|s| format!("\n{label}:\n{s}")))
        .collect()
}

fn report(finding: &Finding) {
    let message = match finding {
        Finding::Race { later, earlier } => format!(
            "stream sanitizer: data race: {} is not ordered after {} (no event wait, stream wait or synchronize between them){}",
            describe(later),
            describe(earlier),
            stacks(&[("this access", later), ("the earlier access", earlier)])
        ),
        Finding::FreeWhileInUse { start, len, freeing, earlier } => format!(
            "stream sanitizer: data race: the block [{start:#x}, {:#x}) was freed for reuse on stream {} of device {} \
             while the {} may still run: call gpurt_record_stream for that stream before the free, or make the \
             freeing stream wait for it{}",
            start + len,
            stream_name(*freeing),
            freeing.device,
            describe(earlier),
            stacks(&[("the access", earlier)])
        ),
    };
    REPORTS.fetch_add(1, Ordering::Relaxed);
    log::force(log::Level::Error, &message);
    if ABORT.load(Ordering::Relaxed) {
        log::force(log::Level::Error, "stream sanitizer: aborting (GPURT_SANITIZER_ABORT)");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tests that turn the process-wide switch take this lock.
    pub(crate) static SWITCH: Mutex<()> = Mutex::new(());

    fn on(key: u64) -> StreamRef {
        StreamRef { id: StreamId { device: 0, key }, native: 0, kind: Some(StreamKind::NonBlocking) }
    }

    #[test]
    fn off_means_nothing_is_tracked_and_on_reports_and_counts() {
        let _one = lock(&SWITCH);
        set_enabled(false);
        access(on(0x10), 0, 8, Access::Write, "a");
        access(on(0x20), 0, 8, Access::Write, "b");
        assert!(lock(&TRACKER).is_none(), "nothing was tracked while off");
        set_stacks(false);
        set_enabled(true);
        let before = report_count();
        access(on(0x10), 0, 8, Access::Write, "a");
        access(on(0x20), 4, 8, Access::Read, "b");
        assert_eq!(report_count(), before + 1);
        set_enabled(false);
        set_stacks(true);
    }

    #[test]
    fn reports_name_both_accesses() {
        let a = Arc::new(AccessInfo {
            epoch: clock::Epoch { slot: 0, tick: 1 },
            stream: StreamId { device: 1, key: 0x7f00 },
            access: Access::Write,
            start: 0x1000,
            len: 16,
            tag: "producer".into(),
            stack: None,
        });
        let text = describe(&a);
        assert_eq!(text, "write \"producer\" of [0x1000, 0x1010) on stream 0x7f00 of device 1");
        assert_eq!(stream_name(StreamId { device: 0, key: 1 }), "legacy-default");
        assert!(stream_name(StreamId { device: 0, key: 7 }).starts_with("per-thread-default#"));
    }
}
