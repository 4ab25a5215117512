//! The allocator's memory history (`torch.cuda.memory._record_memory_history`): a
//! bounded ring per device of what the device pools did, each event with its time,
//! stream, address, size and pool, the caller's annotation (`annotate_push`) and,
//! when asked, the caller's native stack: raw return addresses, symbolised only when
//! a snapshot is written (`symbolize`).
//!
//! Off, an allocator operation pays one relaxed load and a branch (`is_on`). On, each
//! pool shard writes its events into a ring of its own under the shard's lock (see
//! `Ring`); a device's `Recorder` keeps the events recorded outside any shard and
//! merges all of them by time when they are read.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::boundary::lock;
use crate::error::{Error, Result};

mod clock;
mod context;
mod stacks;
use clock::{clock, ticks};
pub use clock::unix_us;
use context::{ANNOTATING, CONTEXT};
pub use context::{annotate_pop, annotate_push, current_context};
use stacks::capture_stack;
pub use stacks::{Frame, Symbolizer};

/// `gpurt_memory_record_history` flag: capture each event's native stack.
pub const GPURT_HISTORY_STACKS: u32 = 1;
/// `gpurt_memory_record_history` flag: forget the events recorded so far.
pub const GPURT_HISTORY_CLEAR: u32 = 2;
/// Events a ring keeps when the caller gives 0 (PyTorch's default `max_entries`).
pub const GPURT_HISTORY_DEFAULT_ENTRIES: usize = 10_000;
/// The most events a ring may keep: 2^24 events are some GiB of memory.
pub const GPURT_HISTORY_MAX_ENTRIES: usize = 1 << 24;

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
    /// Position in the device's history, as `Recorder::events` merged it.
    pub seq: u64,
    /// Nanoseconds since the history's clock started.
    pub time_ns: u64,
    pub action: Action,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// The allocator (`CachingAllocator`'s id) the event happened in.
    pub allocator: u64,
    pub device_free: u64,
    /// The recording thread's annotations, outermost first, joined by " > ".
    pub context: Option<Arc<String>>,
    pub stack: Option<Arc<Vec<usize>>>,
}

/// An event's fixed fields as a ring keeps them (40 bytes, nothing to drop): the
/// time in clock ticks, the driver's free bytes of an `Oom` in `addr`.
#[derive(Clone, Copy)]
struct Core {
    ticks: u64,
    addr: u64,
    size: u64,
    stream: u64,
    allocator: u32,
    action: Action,
    /// A `FreeRequested` whose free completed at once: read back as two events.
    completed: bool,
}

/// What an event may carry beside its fields: the recording thread's annotation and
/// its stack.
#[derive(Clone, Default)]
struct Extras {
    context: Option<Arc<String>>,
    stack: Option<Arc<Vec<usize>>>,
}

/// An event taken out of a ring, to be merged with other rings' (`Recorder::events`).
#[derive(Clone)]
pub struct Slot {
    core: Core,
    extras: Extras,
}

/// A bounded ring of events. Each pool shard keeps one, written under the shard's
/// lock, which the allocator holds anyway: an event then costs a clock read and 40
/// bytes written, where a shared ring's lock cost as much again (a pair with history
/// on took 131 ns against 40 off, with one ring per device; see docs/performance.md).
/// Once full, the newest overwrites the oldest (at `head`).
#[derive(Default)]
pub struct Ring {
    cores: Vec<Core>,
    /// Each event's `Extras`, beside `cores`; empty until an event has some, so that
    /// events without them neither write nor drop any.
    extras: Vec<Extras>,
    head: usize,
    /// Events overwritten for room.
    overwritten: u64,
    /// The `GENERATION` the events belong to: an older ring was cleared meanwhile.
    generation: u64,
    /// The last event's ticks: a ring's times never go back, whichever core read them.
    last_ticks: u64,
}

impl Ring {
    /// Appends one event per action, alike but for the action (a free that completes
    /// at once is two), with the calling thread's annotation and, if asked, stack.
    /// Inlined into the pools' out-of-line recorders: each event is then one call.
    #[inline(always)]
    pub fn record(&mut self, actions: &[Action], addr: u64, size: u64, stream: u64, allocator: u64, device_free: u64) {
        let capacity = CAPACITY.load(Ordering::Relaxed);
        if self.generation != GENERATION.load(Ordering::Relaxed) || self.cores.len() > capacity {
            self.renew(capacity);
        }
        let extras = (ANNOTATING.load(Ordering::Relaxed) != 0 || STACKS.load(Ordering::Relaxed)).then(thread_extras);
        let ticks = ticks().max(self.last_ticks);
        self.last_ticks = ticks;
        // A free that completes at once takes one slot for its two events.
        let (action, completed) = match *actions {
            [Action::FreeRequested, Action::FreeCompleted] => (Action::FreeRequested, true),
            [action] => (action, false),
            _ => unreachable!("one action, or a free requested and completed"),
        };
        let addr = if action == Action::Oom { device_free } else { addr };
        let core = Core { ticks, addr, size, stream, allocator: allocator as u32, action, completed };
        let at = if self.cores.len() < capacity {
            self.cores.push(core);
            self.cores.len() - 1
        } else {
            let at = self.head;
            self.overwritten += 1 + self.cores[at].completed as u64;
            self.cores[at] = core;
            // Not `%`: a division is the slowest instruction of an event.
            self.head = if at + 1 == self.cores.len() { 0 } else { at + 1 };
            at
        };
        if extras.is_some() || !self.extras.is_empty() {
            self.set_extras(at, extras.unwrap_or_default());
        }
    }

    #[cold]
    #[inline(never)]
    fn set_extras(&mut self, at: usize, extras: Extras) {
        self.extras.resize(self.cores.len(), Extras::default());
        self.extras[at] = extras;
    }

    /// Empties a ring of an older generation; cuts one over `capacity` to it.
    #[cold]
    #[inline(never)]
    fn renew(&mut self, capacity: usize) {
        let generation = GENERATION.load(Ordering::Relaxed);
        if self.generation != generation {
            *self = Ring { generation, ..Ring::default() };
        }
        if self.cores.len() > capacity {
            self.resize(capacity);
        }
    }

    /// The events of the current generation, oldest first.
    fn ordered(&self) -> impl Iterator<Item = Slot> + '_ {
        let current = self.generation == GENERATION.load(Ordering::Relaxed);
        let len = if current { self.cores.len() } else { 0 };
        (0..len).flat_map(move |i| {
            let at = (self.head + i) % len;
            let core = self.cores[at];
            let extras = self.extras.get(at).cloned().unwrap_or_default();
            let completion = core.completed.then(|| Slot { core: Core { action: Action::FreeCompleted, completed: false, ..core }, extras: extras.clone() });
            std::iter::once(Slot { core: Core { completed: false, ..core }, extras }).chain(completion)
        })
    }

    /// Makes the ring hold `slots` (oldest first), the newest `capacity` of them.
    fn refill(&mut self, slots: Vec<Slot>, capacity: usize) {
        let skip = slots.len().saturating_sub(capacity);
        self.overwritten += skip as u64;
        let kept = &slots[skip..];
        self.cores = kept.iter().map(|s| s.core).collect();
        self.extras = match kept.iter().any(|s| s.extras.context.is_some() || s.extras.stack.is_some()) {
            true => kept.iter().map(|s| s.extras.clone()).collect(),
            false => Vec::new(),
        };
        self.head = 0;
    }

    /// Keeps the newest `capacity` events.
    fn resize(&mut self, capacity: usize) {
        let slots = self.ordered().collect();
        self.refill(slots, capacity);
    }

    /// Copies the events (oldest first) into `out`; the events overwritten so far.
    pub fn collect(&self, out: &mut Vec<Slot>) -> u64 {
        out.extend(self.ordered());
        if self.generation == GENERATION.load(Ordering::Relaxed) {
            self.overwritten
        } else {
            0
        }
    }

    /// Moves the events into `other`, oldest first (a pool that goes leaves its events
    /// to its device's ring).
    fn move_into(&mut self, other: &mut Ring) {
        if self.generation != GENERATION.load(Ordering::Relaxed) || self.cores.is_empty() {
            return;
        }
        let generation = GENERATION.load(Ordering::Relaxed);
        if other.generation != generation {
            *other = Ring { generation, ..Ring::default() };
        }
        let mut all: Vec<Slot> = other.ordered().collect();
        all.extend(self.ordered());
        all.sort_by_key(|s| s.core.ticks);
        other.overwritten += self.overwritten;
        other.refill(all, CAPACITY.load(Ordering::Relaxed));
        *self = Ring::default();
    }
}

/// The calling thread's annotation and, if asked, its stack: looked up only while
/// some thread annotates or stacks are on.
#[cold]
#[inline(never)]
fn thread_extras() -> Extras {
    // A thread-local read from a shared library is a call (`__tls_get_addr`):
    // skipped while no thread has an annotation.
    let context = match ANNOTATING.load(Ordering::Relaxed) {
        0 => None,
        _ => CONTEXT.try_with(|c| c.borrow().last().cloned()).ok().flatten(),
    };
    Extras { context, stack: STACKS.load(Ordering::Relaxed).then(capture_stack) }
}

/// A device's history: the events recorded outside any pool (out of memory,
/// snapshots) and those of pools that are gone; the live pools' rings are merged
/// with it when it is read.
pub struct Recorder {
    device: i32,
    ring: Mutex<Ring>,
}

impl Recorder {
    fn new(device: i32) -> Recorder {
        Recorder { device, ring: Mutex::new(Ring::default()) }
    }

    pub fn record(&self, actions: &[Action], addr: u64, size: u64, stream: u64, allocator: u64, device_free: u64) {
        lock(&self.ring).record(actions, addr, size, stream, allocator, device_free)
    }

    /// Takes in the events of a pool that goes.
    pub fn absorb(&self, ring: &mut Ring) {
        ring.move_into(&mut lock(&self.ring));
    }

    /// The device's events: this ring's and `more` (the live pools' events, each
    /// pool's oldest first, and the events they overwrote), merged by time and cut
    /// to the newest `max_entries`; and how many were dropped for room.
    pub fn events(&self, more: Vec<Slot>, overwritten: u64) -> (Vec<Event>, u64) {
        let mut all = more;
        let dropped = overwritten + lock(&self.ring).collect(&mut all);
        // Stable: events of one pool at one tick keep their order.
        all.sort_by_key(|s| s.core.ticks);
        let skip = all.len().saturating_sub(CAPACITY.load(Ordering::Relaxed));
        let clock = clock();
        let events = all
            .into_iter()
            .skip(skip)
            .enumerate()
            .map(|(i, Slot { core, extras })| Event {
                seq: i as u64,
                time_ns: clock.ns(core.ticks),
                action: core.action,
                addr: if core.action == Action::Oom { 0 } else { core.addr },
                size: core.size,
                stream: core.stream,
                allocator: core.allocator as u64,
                device_free: if core.action == Action::Oom { core.addr } else { 0 },
                context: extras.context,
                stack: extras.stack,
            })
            .collect();
        (events, dropped + skip as u64)
    }
}

/// Where one allocator's events go: its device's history, with the allocator's id.
#[derive(Clone)]
pub struct Tag {
    pub recorder: Arc<Recorder>,
    pub allocator: u64,
}

impl Tag {
    pub fn new(device: i32, allocator: u64) -> Tag {
        Tag { recorder: recorder(device), allocator }
    }
}

static ON: AtomicBool = AtomicBool::new(false);
static STACKS: AtomicBool = AtomicBool::new(false);
static CAPACITY: AtomicUsize = AtomicUsize::new(GPURT_HISTORY_DEFAULT_ENTRIES);
/// Bumped by each clear: rings of an older generation are empty.
static GENERATION: AtomicU64 = AtomicU64::new(0);
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
        clock();
        CAPACITY.store(capacity, Ordering::Relaxed);
        STACKS.store(flags & GPURT_HISTORY_STACKS != 0, Ordering::Relaxed);
    }
    if flags & GPURT_HISTORY_CLEAR != 0 {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    ON.store(enabled, Ordering::Relaxed);
    Ok(())
}

/// History state is process-wide: tests that turn it on run one at a time.
#[cfg(test)]
pub(crate) static TEST_SERIAL: Mutex<()> = Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;
    use super::TEST_SERIAL as SERIAL;

    /// The events of a device ring alone, merged as a snapshot does.
    fn events_of(r: &Recorder) -> (Vec<Event>, u64) {
        r.events(Vec::new(), 0)
    }

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
                        r.record(&[Action::Alloc], t, i, 0, 0, 0);
                    }
                });
            }
        });
        record_history(false, 0, 0).unwrap();
        let (events, dropped) = events_of(&r);
        assert_eq!(events.len(), 1000);
        assert_eq!(dropped, 8 * 5000 - 1000);
        for pair in events.windows(2) {
            assert_eq!(pair[1].seq, pair[0].seq + 1, "sequence numbers are consecutive");
            assert!(pair[1].time_ns >= pair[0].time_ns, "times follow the sequence");
        }
        for t in 0..8 {
            let mine: Vec<u64> = events.iter().filter(|e| e.addr == t).map(|e| e.size).collect();
            assert!(mine.windows(2).all(|w| w[1] > w[0]), "thread {t}'s events keep its order");
        }
        assert!(events.iter().any(|e| e.size == 4999), "the newest events are kept");
    }

    #[test]
    fn shrinking_and_clearing_keep_the_newest() {
        let _serial = lock(&SERIAL);
        let r = Recorder::new(901);
        record_history(true, 10, GPURT_HISTORY_CLEAR).unwrap();
        (0..10).for_each(|i| r.record(&[Action::Alloc], i, 1, 0, 0, 0));
        record_history(true, 4, 0).unwrap();
        assert_eq!(events_of(&r).0.iter().map(|e| e.addr).collect::<Vec<_>>(), [6, 7, 8, 9]);
        r.record(&[Action::Alloc], 10, 1, 0, 0, 0);
        let (events, dropped) = events_of(&r);
        assert_eq!(events.iter().map(|e| e.addr).collect::<Vec<_>>(), [7, 8, 9, 10]);
        assert_eq!(dropped, 7);
        record_history(true, 4, GPURT_HISTORY_CLEAR).unwrap();
        let (events, dropped) = events_of(&r);
        assert!(events.is_empty() && dropped == 0, "a clear forgets the events");
        record_history(false, 0, 0).unwrap();
    }

    #[test]
    fn a_pool_that_goes_leaves_its_events_to_the_device() {
        let _serial = lock(&SERIAL);
        let r = Recorder::new(903);
        record_history(true, 100, GPURT_HISTORY_CLEAR).unwrap();
        let mut pool_ring = Ring::default();
        pool_ring.record(&[Action::Alloc], 1, 1, 0, 0, 0);
        r.record(&[Action::Oom], 0, 5, 0, 0, 77);
        pool_ring.record(&[Action::FreeRequested, Action::FreeCompleted], 1, 1, 0, 0, 0);
        r.absorb(&mut pool_ring);
        record_history(false, 0, 0).unwrap();
        let (events, _) = events_of(&r);
        let actions: Vec<Action> = events.iter().map(|e| e.action).collect();
        assert_eq!(actions, [Action::Alloc, Action::Oom, Action::FreeRequested, Action::FreeCompleted], "merged by time");
        assert_eq!((events[1].device_free, events[1].addr), (77, 0));
    }

    #[test]
    fn a_free_completed_at_once_is_two_events_in_one_slot() {
        let _serial = lock(&SERIAL);
        let r = Recorder::new(904);
        record_history(true, 4, GPURT_HISTORY_CLEAR).unwrap();
        let mut ring = Ring::default();
        for i in 0..5 {
            ring.record(&[Action::Alloc], i, 1, 0, 0, 0);
            ring.record(&[Action::FreeRequested, Action::FreeCompleted], i, 1, 0, 0, 0);
        }
        record_history(false, 0, 0).unwrap();
        let mut slots = Vec::new();
        let overwritten = ring.collect(&mut slots);
        // Four slots keep the last four records (six events); the six before were nine.
        assert_eq!((slots.len(), overwritten), (6, 9));
        let (events, dropped) = r.events(slots, overwritten);
        let kept: Vec<(Action, u64)> = events.iter().map(|e| (e.action, e.addr)).collect();
        assert_eq!(kept, [(Action::FreeCompleted, 3), (Action::Alloc, 4), (Action::FreeRequested, 4), (Action::FreeCompleted, 4)]);
        assert_eq!(dropped, 11, "every event not kept is counted once");
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
        assert_eq!(current_context().as_deref().map(String::as_str), Some("request 7 > layer 3"));
        std::thread::spawn(|| {
            assert_eq!(current_context(), None, "another thread sees none of this thread's annotations");
            annotate_push("other");
            assert_eq!(current_context().as_deref().map(String::as_str), Some("other"));
        })
        .join()
        .unwrap();
        assert_eq!(annotate_pop().unwrap(), 1);
        assert_eq!(current_context().as_deref().map(String::as_str), Some("request 7"));
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
        r.record(&[Action::Alloc], 1, 2, 3, 4, 0);
        annotate_pop().unwrap();
        r.record(&[Action::FreeRequested], 1, 2, 3, 4, 0);
        record_history(false, 0, 0).unwrap();
        let (events, _) = events_of(&r);
        assert_eq!(events[0].context.as_deref().map(String::as_str), Some("decode"));
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
