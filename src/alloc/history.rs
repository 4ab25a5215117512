//! The allocator's memory history (`torch.cuda.memory._record_memory_history`): a
//! bounded ring per device of what the device pools did, each event with its time,
//! stream, address, size and pool, the caller's annotation (`annotate_push`) and,
//! when asked, the caller's native stack: raw return addresses, symbolised only when
//! a snapshot is written (`symbolize`).
//!
//! Off, an allocator operation pays one relaxed load and a branch (`is_on`). On, an
//! event takes the device ring's lock once: the pools call in with their shard
//! locked, and the ring's lock is taken last, never held while another is taken.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use rustc_hash::FxHashMap as HashMap;

use crate::boundary::lock;
use crate::error::{Error, Result};

/// `gpurt_memory_record_history` flag: capture each event's native stack.
pub const GPURT_HISTORY_STACKS: u32 = 1;
/// `gpurt_memory_record_history` flag: forget the events recorded so far.
pub const GPURT_HISTORY_CLEAR: u32 = 2;
/// Events a ring keeps when the caller gives 0 (PyTorch's default `max_entries`).
pub const GPURT_HISTORY_DEFAULT_ENTRIES: usize = 10_000;
/// The most events a ring may keep: 2^24 events are some GiB of memory.
pub const GPURT_HISTORY_MAX_ENTRIES: usize = 1 << 24;
/// Return addresses kept per stack.
const STACK_DEPTH: usize = 48;

/// What the allocator did; names as in PyTorch's trace entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    Snapshot,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
        }
    }
}

/// One event. `size` is the caller's request for blocks, the bytes for segments and
/// mappings, the request that failed for `Oom` (`device_free`: the driver's free
/// bytes then).
#[derive(Debug, Clone)]
pub struct Event {
    /// Position in its ring's history: consecutive, whatever the ring dropped.
    pub seq: u64,
    /// Nanoseconds since the process's first event.
    pub time_ns: u64,
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// The allocator (`CachingAllocator`'s id) the event happened in.
    pub allocator: u64,
    pub device_free: u64,
    /// The recording thread's annotations, outermost first, joined by " > ".
    pub context: Option<Arc<str>>,
    pub stack: Option<Arc<[usize]>>,
}

/// A device's ring.
pub struct Recorder {
    device: i32,
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    events: VecDeque<Event>,
    next_seq: u64,
}

impl Recorder {
    fn new(device: i32) -> Recorder {
        Recorder { device, ring: Mutex::new(Ring::default()) }
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    /// Appends an event, the oldest dropped past the ring's capacity.
    #[cold]
    #[inline(never)]
    pub fn record(&self, action: Action, addr: u64, size: u64, stream: u64, allocator: u64, device_free: u64) {
        let context = CONTEXT.try_with(|c| c.borrow().last().cloned()).ok().flatten();
        let stack = STACKS.load(Ordering::Relaxed).then(capture_stack);
        let capacity = CAPACITY.load(Ordering::Relaxed);
        let mut ring = lock(&self.ring);
        let event = Event { seq: ring.next_seq, time_ns: now_ns(), action, addr, size, stream, allocator, device_free, context, stack };
        ring.next_seq += 1;
        while ring.events.len() >= capacity {
            ring.events.pop_front();
        }
        ring.events.push_back(event);
    }

    /// The events kept, oldest first.
    pub fn events(&self) -> Vec<Event> {
        lock(&self.ring).events.iter().cloned().collect()
    }

    /// Events dropped for room since the last clear.
    pub fn dropped(&self) -> u64 {
        let ring = lock(&self.ring);
        ring.next_seq - ring.events.len() as u64
    }

    fn trim(&self, capacity: usize, clear: bool) {
        let mut ring = lock(&self.ring);
        if clear {
            *ring = Ring::default();
        }
        while ring.events.len() > capacity {
            ring.events.pop_front();
        }
    }
}

/// Where one allocator's events go: its device's ring, with the allocator's id.
#[derive(Clone)]
pub struct Tag {
    recorder: Arc<Recorder>,
    allocator: u64,
}

impl Tag {
    pub fn new(device: i32, allocator: u64) -> Tag {
        Tag { recorder: recorder(device), allocator }
    }

    pub fn record(&self, action: Action, addr: u64, size: u64, stream: u64, device_free: u64) {
        self.recorder.record(action, addr, size, stream, self.allocator, device_free)
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static STACKS: AtomicBool = AtomicBool::new(false);
static CAPACITY: AtomicUsize = AtomicUsize::new(GPURT_HISTORY_DEFAULT_ENTRIES);
static RECORDERS: Mutex<Vec<Arc<Recorder>>> = Mutex::new(Vec::new());

/// Whether events are recorded: what every allocator operation asks first.
#[inline(always)]
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The ring of `device`, made on first use (rings are made whether or not history
/// is on, so that turning it on needs no pool to change).
pub fn recorder(device: i32) -> Arc<Recorder> {
    let mut all = lock(&RECORDERS);
    if let Some(r) = all.iter().find(|r| r.device == device) {
        return r.clone();
    }
    let r = Arc::new(Recorder::new(device));
    all.push(r.clone());
    r
}

/// The rings made so far.
pub fn recorders() -> Vec<Arc<Recorder>> {
    lock(&RECORDERS).clone()
}

/// Turns recording on (keeping at most `max_entries` events per device; 0: the
/// default) or off (the events stay, for a snapshot). Flags: `GPURT_HISTORY_STACKS`,
/// `GPURT_HISTORY_CLEAR`.
pub fn record_history(enabled: bool, max_entries: usize, flags: u32) -> Result<()> {
    if flags & !(GPURT_HISTORY_STACKS | GPURT_HISTORY_CLEAR) != 0 {
        return Err(Error::invalid_argument(format!("history flags {flags:#x}: give GPURT_HISTORY_STACKS and GPURT_HISTORY_CLEAR only")));
    }
    if max_entries > GPURT_HISTORY_MAX_ENTRIES {
        return Err(Error::invalid_argument(format!("max_entries {max_entries} is above {GPURT_HISTORY_MAX_ENTRIES}")));
    }
    let capacity = if max_entries == 0 { GPURT_HISTORY_DEFAULT_ENTRIES } else { max_entries };
    if enabled {
        CAPACITY.store(capacity, Ordering::Relaxed);
        STACKS.store(flags & GPURT_HISTORY_STACKS != 0, Ordering::Relaxed);
    }
    for r in recorders() {
        r.trim(CAPACITY.load(Ordering::Relaxed), flags & GPURT_HISTORY_CLEAR != 0);
    }
    ON.store(enabled, Ordering::Relaxed);
    Ok(())
}

/// Whether stacks are captured.
pub fn stacks_on() -> bool {
    STACKS.load(Ordering::Relaxed)
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since the process's first event (or snapshot).
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// The wall-clock time of `time_ns`, in microseconds since 1970 (PyTorch's
/// `time_us`).
pub fn unix_us(time_ns: u64) -> u64 {
    static UNIX_EPOCH_US: OnceLock<i128> = OnceLock::new();
    let base = *UNIX_EPOCH_US.get_or_init(|| {
        let since_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        since_unix.as_micros() as i128 - (epoch().elapsed().as_micros() as i128)
    });
    (base + (time_ns / 1000) as i128).max(0) as u64
}

// ---- annotations ------------------------------------------------------------------

thread_local! {
    /// This thread's annotations: each entry is the whole path so far, so that an
    /// event copies one pointer.
    static CONTEXT: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
}

/// Separates nested annotations in an event's context.
pub const CONTEXT_SEPARATOR: &str = " > ";

/// Attaches `name` to what this thread allocates until the matching `annotate_pop`.
pub fn annotate_push(name: &str) -> usize {
    CONTEXT.with(|c| {
        let mut stack = c.borrow_mut();
        let path: Arc<str> = match stack.last() {
            Some(outer) => format!("{outer}{CONTEXT_SEPARATOR}{name}").into(),
            None => name.into(),
        };
        stack.push(path);
        stack.len()
    })
}

/// Removes this thread's innermost annotation; its depth after.
pub fn annotate_pop() -> Result<usize> {
    CONTEXT.with(|c| {
        let mut stack = c.borrow_mut();
        stack.pop().ok_or_else(|| Error::invalid_argument("this thread has no annotation to pop (gpurt_memory_annotate_pop without a push)"))?;
        Ok(stack.len())
    })
}

/// This thread's current annotation path.
pub fn current_context() -> Option<Arc<str>> {
    CONTEXT.with(|c| c.borrow().last().cloned())
}

// ---- stacks -----------------------------------------------------------------------

fn capture_stack() -> Arc<[usize]> {
    let mut ips = Vec::with_capacity(STACK_DEPTH);
    backtrace::trace(|frame| {
        ips.push(frame.ip() as usize);
        ips.len() < STACK_DEPTH
    });
    ips.into()
}

/// A symbolised stack frame, as PyTorch's snapshots give them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    pub name: String,
    pub filename: String,
    pub line: u32,
}

/// Where the frames of the capture and the allocator's internals begin their names.
const ALLOCATOR_FRAMES: [&str; 10] = [
    "backtrace::",
    "gpurt::alloc::history",
    "gpurt::alloc::pool",
    "gpurt::alloc::caching",
    "gpurt::alloc::device",
    "gpurt::alloc::mempool",
    "gpurt::alloc::capture",
    "gpurt::alloc::ffi",
    "gpurt::boundary",
    "<gpurt::alloc::",
];

/// Symbolises stacks, each address once.
#[derive(Default)]
pub struct Symbolizer {
    known: HashMap<usize, Option<Frame>>,
}

impl Symbolizer {
    /// The caller's frames of `stack`, from the C entry point down: the capture's and
    /// the allocator's own frames above it are left out.
    pub fn frames(&mut self, stack: &[usize]) -> Vec<Frame> {
        let frames: Vec<Frame> = stack.iter().filter_map(|&ip| self.frame(ip)).collect();
        let first = frames.iter().rposition(|f| ALLOCATOR_FRAMES.iter().any(|p| f.name.starts_with(p))).map_or(0, |i| i + 1);
        frames[first..].to_vec()
    }

    fn frame(&mut self, ip: usize) -> Option<Frame> {
        self.known
            .entry(ip)
            .or_insert_with(|| {
                let mut found = None;
                // The address is a return address: look up the call before it.
                backtrace::resolve(ip.saturating_sub(1) as *mut std::ffi::c_void, |symbol| {
                    if found.is_none() {
                        found = Some(Frame {
                            name: symbol.name().map(|n| format!("{n:#}")).unwrap_or_else(|| format!("{ip:#x}")),
                            filename: symbol.filename().map(|p| p.display().to_string()).unwrap_or_else(|| "??".into()),
                            line: symbol.lineno().unwrap_or(0),
                        });
                    }
                });
                found.or(Some(Frame { name: format!("{ip:#x}"), filename: "??".into(), line: 0 }))
            })
            .clone()
    }
}

/// History state is process-wide: tests that turn it on run one at a time.
#[cfg(test)]
pub(crate) static TEST_SERIAL: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use super::TEST_SERIAL as SERIAL;

    #[test]
    fn ring_keeps_the_newest_in_order_under_8_threads() {
        let _serial = lock(&SERIAL);
        let r = Recorder::new(900);
        record_history(true, 1000, GPURT_HISTORY_CLEAR).unwrap();
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..5000u64 {
                        r.record(Action::Alloc, t, i, 0, 0, 0);
                    }
                });
            }
        });
        record_history(false, 0, 0).unwrap();
        let events = r.events();
        assert_eq!(events.len(), 1000);
        assert_eq!(r.dropped(), 8 * 5000 - 1000);
        for pair in events.windows(2) {
            assert_eq!(pair[1].seq, pair[0].seq + 1, "sequence numbers are consecutive");
            assert!(pair[1].time_ns >= pair[0].time_ns, "times follow the sequence");
        }
        assert_eq!(events.last().unwrap().seq, 8 * 5000 - 1);
        for t in 0..8 {
            let mine: Vec<u64> = events.iter().filter(|e| e.addr == t).map(|e| e.size).collect();
            assert!(mine.windows(2).all(|w| w[1] > w[0]), "thread {t}'s events keep its order");
            if let Some(&last) = mine.last() {
                assert_eq!(last, 4999, "a thread's newest event is kept");
            }
        }
    }

    #[test]
    fn shrinking_and_clearing_keep_the_newest() {
        let _serial = lock(&SERIAL);
        let r = Recorder::new(901);
        record_history(true, 10, 0).unwrap();
        (0..10).for_each(|i| r.record(Action::Alloc, i, 1, 0, 0, 0));
        r.trim(4, false);
        assert_eq!(r.events().iter().map(|e| e.addr).collect::<Vec<_>>(), [6, 7, 8, 9]);
        r.trim(4, true);
        assert!(r.events().is_empty());
        assert_eq!(r.dropped(), 0);
        record_history(false, 0, 0).unwrap();
    }

    #[test]
    fn bad_arguments_change_nothing() {
        let _serial = lock(&SERIAL);
        assert!(record_history(true, GPURT_HISTORY_MAX_ENTRIES + 1, 0).is_err());
        assert!(record_history(true, 10, 4).is_err());
        assert!(!is_on());
    }

    #[test]
    fn annotations_nest_per_thread() {
        assert_eq!(annotate_push("request 7"), 1);
        assert_eq!(annotate_push("layer 3"), 2);
        assert_eq!(current_context().as_deref(), Some("request 7 > layer 3"));
        std::thread::spawn(|| {
            assert_eq!(current_context(), None, "another thread sees none of this thread's annotations");
            annotate_push("other");
            assert_eq!(current_context().as_deref(), Some("other"));
        })
        .join()
        .unwrap();
        assert_eq!(annotate_pop().unwrap(), 1);
        assert_eq!(current_context().as_deref(), Some("request 7"));
        assert_eq!(annotate_pop().unwrap(), 0);
        assert!(annotate_pop().is_err());
        assert_eq!(current_context(), None);
    }

    #[test]
    fn events_carry_the_annotation_and_a_stack_that_names_the_caller() {
        let _serial = lock(&SERIAL);
        let r = Recorder::new(902);
        record_history(true, 16, GPURT_HISTORY_STACKS | GPURT_HISTORY_CLEAR).unwrap();
        annotate_push("decode");
        r.record(Action::Alloc, 1, 2, 3, 4, 0);
        annotate_pop().unwrap();
        r.record(Action::FreeRequested, 1, 2, 3, 4, 0);
        record_history(false, 0, 0).unwrap();
        let events = r.events();
        assert_eq!(events[0].context.as_deref(), Some("decode"));
        assert_eq!(events[1].context, None);
        let stack = events[0].stack.clone().expect("stacks were asked for");
        assert!(!stack.is_empty());
        let frames = Symbolizer::default().frames(&stack);
        assert!(!frames.is_empty());
        assert!(
            frames.iter().all(|f| !f.name.starts_with("backtrace::")),
            "the capture's own frames are left out: {frames:?}"
        );
    }
}
