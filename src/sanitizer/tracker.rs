//! The happens-before model: a vector clock per stream and for the host, event
//! clocks, the shadow memory and gpurt's live allocations. Every call here is one
//! thing the program did, in the order it did it; what conflicts comes back as
//! findings for `mod.rs` to report.
//!
//! The rules (as PyTorch's CSAN, plus the legacy stream and frees):
//! - Work is issued after everything the host knows finished: each stream's clock
//!   learns the host's before each step.
//! - Event record copies the stream's clock; a wait joins it into the waiting stream;
//!   an event or stream synchronize (or a query that answers "done") joins it into
//!   the host's; a device synchronize joins every stream of the device.
//! - The legacy default stream waits for every blocking stream of its device, and
//!   each blocking stream waits for it.
//! - A host function, when it runs, tells the host what its stream had finished.
//! - A free of a gpurt allocation is on the stream it was allocated for: an access on
//!   another stream must be ordered before it or that stream recorded on the block.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::clock::{Epoch, VectorClock};
use super::shadow::{Access, AccessInfo, Shadow};
use super::{StreamId, StreamKind};

/// An access as declared, before it has a point in a stream's order (kept by a
/// capture until its graph replays).
#[derive(Debug, Clone)]
pub struct Declared {
    pub start: u64,
    pub len: u64,
    pub access: Access,
    pub tag: Arc<str>,
    pub stack: Option<Arc<std::backtrace::Backtrace>>,
}

#[derive(Debug)]
pub enum Finding {
    /// `later` is not ordered after `earlier`, and one of them writes.
    Race { later: Arc<AccessInfo>, earlier: Arc<AccessInfo> },
    /// The block at `start` was freed (on `freeing`) while `earlier`, on a stream the
    /// block was not recorded on, may still use it.
    FreeWhileInUse { start: u64, len: u64, freeing: StreamId, earlier: Arc<AccessInfo> },
}

struct StreamEntry {
    id: StreamId,
    kind: StreamKind,
    clock: VectorClock,
}

struct Allocation {
    len: u64,
    slot: usize,
    recorded_on: Vec<usize>,
}

#[derive(Default)]
pub struct Tracker {
    /// Every stream seen, by slot; a forgotten stream keeps its slot (old accesses
    /// name it), and its id gets a new slot when seen again.
    streams: Vec<StreamEntry>,
    slots: HashMap<StreamId, usize>,
    host: VectorClock,
    events: HashMap<u64, VectorClock>,
    shadow: Shadow,
    allocations: BTreeMap<u64, Allocation>,
    captured: HashMap<u64, Vec<Declared>>,
}

impl Tracker {
    fn slot(&mut self, id: StreamId, kind: Option<StreamKind>) -> usize {
        if let Some(&slot) = self.slots.get(&id) {
            if let Some(kind) = kind {
                self.streams[slot].kind = kind;
            }
            return slot;
        }
        let slot = self.streams.len();
        let kind = kind.unwrap_or_else(|| StreamKind::guess(id.key));
        self.streams.push(StreamEntry { id, kind, clock: self.host.clone() });
        self.slots.insert(id, slot);
        slot
    }

    /// Brings a stream's clock up to the moment the host issues work on it.
    fn issue(&mut self, slot: usize) {
        let mut learned = self.host.clone();
        let StreamEntry { id, kind, .. } = self.streams[slot];
        // The legacy stream and the blocking streams of its device wait for each other.
        let waits_for = match kind {
            StreamKind::Legacy => Some(StreamKind::Blocking),
            StreamKind::Blocking => Some(StreamKind::Legacy),
            StreamKind::NonBlocking => None,
        };
        if let Some(waits_for) = waits_for {
            let live = |slot: usize, e: &StreamEntry| self.slots.get(&e.id) == Some(&slot);
            self.streams
                .iter()
                .enumerate()
                .filter(|&(s, e)| e.kind == waits_for && e.id.device == id.device && live(s, e))
                .for_each(|(_, e)| learned.join(&e.clock));
        }
        self.streams[slot].clock.join(&learned);
    }

    /// A stream's clock as of now, for work issued on it.
    fn issued(&mut self, id: StreamId, kind: Option<StreamKind>) -> usize {
        let slot = self.slot(id, kind);
        self.issue(slot);
        slot
    }

    pub fn access(&mut self, id: StreamId, kind: Option<StreamKind>, declared: Declared) -> Vec<Finding> {
        if declared.len == 0 {
            return Vec::new();
        }
        let slot = self.issued(id, kind);
        let epoch = self.streams[slot].clock.tick(slot);
        self.record(slot, epoch, declared)
    }

    fn record(&mut self, slot: usize, epoch: Epoch, d: Declared) -> Vec<Finding> {
        let stream = self.streams[slot].id;
        let info = Arc::new(AccessInfo { epoch, stream, access: d.access, start: d.start, len: d.len, tag: d.tag, stack: d.stack });
        let clock = &self.streams[slot].clock;
        self.shadow.access(&info, clock).into_iter().map(|earlier| Finding::Race { later: info.clone(), earlier }).collect()
    }

    /// Keeps an access declared while its stream captured `capture`, for replays.
    pub fn capture(&mut self, capture: u64, declared: Declared) {
        self.captured.entry(capture).or_default().push(declared);
    }

    pub fn take_captured(&mut self, capture: u64) -> Vec<Declared> {
        self.captured.remove(&capture).unwrap_or_default()
    }

    /// One replay of a graph on `id`: its accesses in capture order, one tick for all
    /// (a graph's nodes may run in any order the graph allows).
    pub fn replay(&mut self, id: StreamId, declared: &[Declared]) -> Vec<Finding> {
        let slot = self.issued(id, None);
        let epoch = self.streams[slot].clock.tick(slot);
        declared.iter().filter(|d| d.len > 0).flat_map(|d| self.record(slot, epoch, d.clone())).collect()
    }

    pub fn event_recorded(&mut self, event: u64, id: StreamId, kind: Option<StreamKind>) {
        let slot = self.issued(id, kind);
        self.events.insert(event, self.streams[slot].clock.clone());
    }

    pub fn stream_waited(&mut self, id: StreamId, kind: Option<StreamKind>, event: u64) {
        let slot = self.slot(id, kind);
        if let Some(recorded) = self.events.get(&event) {
            self.streams[slot].clock.join(recorded);
        }
    }

    pub fn stream_synchronized(&mut self, id: StreamId) {
        if let Some(&slot) = self.slots.get(&id) {
            self.issue(slot);
            self.host.join(&self.streams[slot].clock);
        }
    }

    pub fn event_synchronized(&mut self, event: u64) {
        if let Some(recorded) = self.events.get(&event) {
            self.host.join(recorded);
        }
    }

    pub fn device_synchronized(&mut self, device: i32) {
        let live: Vec<usize> = self.slots.iter().filter(|(id, _)| id.device == device).map(|(_, &slot)| slot).collect();
        live.into_iter().for_each(|slot| self.host.join(&self.streams[slot].clock));
    }

    pub fn stream_forgotten(&mut self, id: StreamId) {
        self.slots.remove(&id);
    }

    /// What a host function queued now on `id` will tell the host when it runs.
    pub fn host_function_queued(&mut self, id: StreamId, kind: Option<StreamKind>) -> VectorClock {
        let slot = self.issued(id, kind);
        self.streams[slot].clock.clone()
    }

    pub fn host_function_ran(&mut self, finished: &VectorClock) {
        self.host.join(finished);
    }

    pub fn allocated(&mut self, start: u64, len: u64, id: StreamId) {
        let slot = self.slot(id, None);
        self.shadow.clear(start, start.saturating_add(len));
        self.allocations.insert(start, Allocation { len, slot, recorded_on: Vec::new() });
    }

    pub fn recorded_on(&mut self, ptr: u64, id: StreamId) {
        let slot = self.slot(id, None);
        let Some((_, allocation)) = self.allocations.range_mut(..=ptr).next_back().filter(|(&start, a)| ptr < start + a.len.max(1)) else {
            return;
        };
        if !allocation.recorded_on.contains(&slot) {
            allocation.recorded_on.push(slot);
        }
    }

    pub fn freed(&mut self, start: u64) -> Vec<Finding> {
        let Some(allocation) = self.allocations.remove(&start) else { return Vec::new() };
        self.issue(allocation.slot);
        let StreamEntry { id: freeing, ref clock, .. } = self.streams[allocation.slot];
        let waited_for = |earlier: &AccessInfo| {
            earlier.epoch.slot == allocation.slot || allocation.recorded_on.contains(&earlier.epoch.slot) || clock.covers(earlier.epoch)
        };
        let accesses = self.shadow.clear(start, start.saturating_add(allocation.len));
        accesses
            .into_iter()
            .filter(|earlier| !waited_for(earlier))
            .map(|earlier| Finding::FreeWhileInUse { start, len: allocation.len, freeing, earlier })
            .collect()
    }

    pub fn allocation_count(&self) -> usize {
        self.allocations.len()
    }

    pub fn shadow_cells(&self) -> usize {
        self.shadow.cell_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: StreamId = StreamId { device: 0, key: 0xa000 };
    const B: StreamId = StreamId { device: 0, key: 0xb000 };
    const LEGACY: StreamId = StreamId { device: 0, key: 1 };
    const NB: Option<StreamKind> = Some(StreamKind::NonBlocking);

    fn declared(start: u64, len: u64, access: Access) -> Declared {
        Declared { start, len, access, tag: "t".into(), stack: None }
    }

    fn races(findings: &[Finding]) -> usize {
        findings.iter().filter(|f| matches!(f, Finding::Race { .. })).count()
    }

    #[test]
    fn write_write_and_read_write_race_unless_ordered() {
        let mut t = Tracker::default();
        assert_eq!(races(&t.access(A, NB, declared(0, 64, Access::Write))), 0);
        assert_eq!(races(&t.access(B, NB, declared(0, 64, Access::Write))), 1, "write/write");
        assert_eq!(races(&t.access(A, NB, declared(0, 64, Access::Read))), 1, "read after B's unordered write");
        assert_eq!(races(&t.access(B, NB, declared(0, 64, Access::Read))), 0, "read/read and B's own write");
        assert_eq!(races(&t.access(A, NB, declared(32, 8, Access::Write))), 2, "A overwrites B's write and B's read");
    }

    #[test]
    fn an_event_wait_orders_and_a_record_taken_before_the_access_does_not() {
        let mut t = Tracker::default();
        t.event_recorded(7, A, NB); // before the write: orders nothing of it
        t.access(A, NB, declared(0, 16, Access::Write));
        t.stream_waited(B, NB, 7);
        assert_eq!(races(&t.access(B, NB, declared(0, 16, Access::Read))), 1);
        t.event_recorded(7, A, NB);
        t.stream_waited(B, NB, 7);
        assert_eq!(races(&t.access(B, NB, declared(0, 16, Access::Write))), 0, "ordered after A's write, and after its own read");
    }

    #[test]
    fn stream_event_and_device_synchronize_order_later_work() {
        for sync in 0..4 {
            let mut t = Tracker::default();
            t.access(A, NB, declared(0, 16, Access::Write));
            match sync {
                0 => t.stream_synchronized(A),
                1 => {
                    t.event_recorded(3, A, NB);
                    t.event_synchronized(3);
                }
                2 => t.device_synchronized(0),
                _ => t.device_synchronized(1), // another device: no order
            }
            let expected = if sync == 3 { 1 } else { 0 };
            assert_eq!(races(&t.access(B, NB, declared(0, 16, Access::Read))), expected, "sync kind {sync}");
        }
    }

    #[test]
    fn the_legacy_stream_orders_blocking_streams_but_not_non_blocking_ones() {
        let mut t = Tracker::default();
        let blocking = Some(StreamKind::Blocking);
        t.access(A, blocking, declared(0, 8, Access::Write));
        assert_eq!(races(&t.access(LEGACY, None, declared(0, 8, Access::Read))), 0, "legacy waits for blocking A");
        assert_eq!(races(&t.access(B, blocking, declared(0, 8, Access::Write))), 0, "blocking B waits for legacy (and so for A)");
        t.access(A, NB, declared(64, 8, Access::Write));
        assert_eq!(races(&t.access(LEGACY, None, declared(64, 8, Access::Read))), 1, "A is non-blocking now");
    }

    #[test]
    fn a_free_needs_other_streams_ordered_before_it_or_recorded() {
        let mut t = Tracker::default();
        t.allocated(0x1000, 256, A);
        t.access(B, NB, declared(0x1000, 256, Access::Read));
        let found = t.freed(0x1000);
        assert!(matches!(&found[..], [Finding::FreeWhileInUse { freeing, earlier, .. }] if *freeing == A && earlier.stream == B));
        assert_eq!((t.allocation_count(), t.shadow_cells()), (0, 0), "a free forgets the block and its accesses");

        t.allocated(0x1000, 256, A);
        t.access(B, NB, declared(0x1000, 256, Access::Read));
        t.recorded_on(0x1080, B);
        assert!(t.freed(0x1000).is_empty(), "recorded on B: the allocator waits for it");

        t.allocated(0x1000, 256, A);
        t.access(A, NB, declared(0x1000, 16, Access::Write));
        t.access(B, NB, declared(0x1000, 256, Access::Read));
        t.event_recorded(9, B, NB);
        t.stream_waited(A, NB, 9);
        assert!(t.freed(0x1000).is_empty(), "B's use is ordered before the free on A");
        assert!(t.freed(0x1000).is_empty(), "an unknown block is not a finding");
    }

    #[test]
    fn host_functions_and_forgotten_streams() {
        let mut t = Tracker::default();
        t.access(A, NB, declared(0, 8, Access::Write));
        let finished = t.host_function_queued(A, NB);
        assert_eq!(races(&t.access(B, NB, declared(0, 8, Access::Read))), 1, "the host function has not run yet");
        t.host_function_ran(&finished);
        assert_eq!(races(&t.access(B, NB, declared(0, 8, Access::Write))), 0, "after it ran, the host knows A's write finished");
        // A stream destroyed and its native handle reused is a new stream.
        t.stream_synchronized(B);
        t.access(A, NB, declared(0, 8, Access::Write));
        t.stream_forgotten(A);
        assert_eq!(races(&t.access(A, NB, declared(0, 8, Access::Write))), 1);
    }

    #[test]
    fn captured_accesses_replay_on_the_launch_stream() {
        let mut t = Tracker::default();
        t.capture(42, declared(0, 32, Access::Write));
        let graph = t.take_captured(42);
        assert!(t.take_captured(42).is_empty());
        assert_eq!(races(&t.replay(A, &graph)), 0);
        assert_eq!(races(&t.replay(A, &graph)), 0, "replays on one stream are ordered");
        assert_eq!(races(&t.replay(B, &graph)), 1, "a replay on another stream, unordered, races");
    }
}
