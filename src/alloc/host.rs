//! A segment source of plain address ranges, with markers completed on command: the
//! pool's logic runs and is tested here exactly as it runs on the driver.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::pool::{HostStaging, SegmentSource, StagedRange};
use crate::boundary::lock;
use crate::error::{Error, Result, Status};

pub struct HostSource(Mutex<HostState>);

struct HostState {
    capacity: u64,
    used: u64,
    /// Where the next segment starts (its end, when addresses descend).
    next_addr: u64,
    /// Whether each segment lies below the one before, as a driver may place them.
    descending: bool,
    /// (start, size) of every segment and reservation, in the order they were made.
    made: Vec<(u64, u64)>,
    live: HashMap<u64, u64>,
    /// Address reservations (start -> size) and the mappings inside them (start ->
    /// size), which, as the driver's, are unmapped whole or not at all.
    reservations: HashMap<u64, u64>,
    mappings: std::collections::BTreeMap<u64, u64>,
    mapped: u64,
    /// Marker -> done.
    markers: HashMap<u64, bool>,
    next_marker: u64,
    /// The device its pools' memory history is recorded for (`on_device`).
    device: Option<i32>,
    /// What tests wrote into mapped memory (`write`), by address; unmapping drops it,
    /// as the driver's unmapping drops the memory.
    contents: std::collections::BTreeMap<u64, Vec<u8>>,
    /// The next call of an operation that fails (`fail_on`): (operation, calls to
    /// pass first).
    failure: Option<(&'static str, u32)>,
    /// Host memory made for offloads (`host_staging`), and the bytes of it alive.
    fresh_offloads: u64,
    staged_bytes: Arc<AtomicU64>,
    /// The bytes offloads copied, in all (`copied_out`).
    copied_out: u64,
    /// Where `synchronize` waits, if a test set one (`hold_synchronize`).
    synchronize_gate: Option<Arc<Gate>>,
    /// `synchronize` calls so far (`synchronizations`).
    synchronizations: u64,
    /// The streams `wait_for_stream` waited for, in order (`stream_waits`).
    stream_waits: Vec<u64>,
    /// Streams that capture (`set_capturing`): not waited for.
    capturing: Vec<u64>,
}

impl HostSource {
    /// A source that hands out at most `capacity` bytes at a time, at addresses no
    /// other source in the process uses (as separate driver allocations would be).
    pub fn new(capacity: u64) -> Self {
        Self::with_order(capacity, false)
    }

    /// A source whose every segment lies below the one before it.
    pub fn descending(capacity: u64) -> Self {
        Self::with_order(capacity, true)
    }

    fn with_order(capacity: u64, descending: bool) -> Self {
        const RANGE: u64 = 1 << 44;
        static NEXT_BASE: AtomicU64 = AtomicU64::new(1 << 32);
        let base = NEXT_BASE.fetch_add(RANGE, Ordering::Relaxed);
        HostSource(Mutex::new(HostState {
            capacity,
            used: 0,
            next_addr: if descending { base + RANGE } else { base },
            descending,
            made: Vec::new(),
            live: HashMap::new(),
            reservations: HashMap::new(),
            mappings: std::collections::BTreeMap::new(),
            mapped: 0,
            markers: HashMap::new(),
            next_marker: 1,
            device: None,
            contents: std::collections::BTreeMap::new(),
            failure: None,
            fresh_offloads: 0,
            copied_out: 0,
            staged_bytes: Arc::default(),
            synchronize_gate: None,
            synchronizations: 0,
            stream_waits: Vec::new(),
            capturing: Vec::new(),
        }))
    }

    /// The same source, its pools' events recorded in `device`'s memory history.
    pub fn on_device(self, device: i32) -> Self {
        self.state().device = Some(device);
        self
    }
    fn state(&self) -> std::sync::MutexGuard<'_, HostState> {
        lock(&self.0)
    }
    /// Marks every recorded marker done, as if all streams drained.
    pub fn complete_all(&self) {
        self.state().markers.values_mut().for_each(|done| *done = true);
    }
    /// Segments and expandable reservations still held.
    pub fn live_segments(&self) -> usize {
        let s = self.state();
        s.live.len() + s.reservations.len()
    }
    pub fn mapped_bytes(&self) -> u64 {
        self.state().mapped
    }
    pub fn pending_markers(&self) -> usize {
        self.state().markers.len()
    }
    /// Writes `bytes` at `addr`, which must lie in mapped memory (expandable segments).
    pub fn write(&self, addr: u64, bytes: &[u8]) {
        let mut s = self.state();
        assert!(s.is_mapped(addr, bytes.len() as u64), "wrote to memory that is not mapped");
        s.contents.insert(addr, bytes.to_vec());
    }
    /// What `write` put at `addr`, if its memory has stayed mapped since (or came back
    /// with its contents).
    pub fn read(&self, addr: u64) -> Option<Vec<u8>> {
        self.state().contents.get(&addr).cloned()
    }
    /// Host memory made for offloads so far (an offload into kept memory makes none).
    pub fn fresh_offloads(&self) -> u64 {
        self.state().fresh_offloads
    }
    /// The bytes offloads copied to host memory so far.
    pub fn copied_out(&self) -> u64 {
        self.state().copied_out
    }
    /// The bytes of host memory made for offloads that are alive.
    pub fn staged_bytes(&self) -> u64 {
        self.state().staged_bytes.load(Ordering::Relaxed)
    }
    /// The waits for the device so far (`synchronize` calls).
    pub fn synchronizations(&self) -> u64 {
        self.state().synchronizations
    }
    /// The streams waited for so far (`wait_for_stream` calls that waited).
    pub fn stream_waits(&self) -> Vec<u64> {
        self.state().stream_waits.clone()
    }
    /// Makes `stream` capture (`wait_for_stream` then does not wait for it), or not.
    pub fn set_capturing(&self, stream: u64, capturing: bool) {
        let mut s = self.state();
        s.capturing.retain(|&c| c != stream);
        if capturing {
            s.capturing.push(stream);
        }
    }
    /// Makes every `synchronize` wait at `gate` until it opens.
    pub fn hold_synchronize(&self, gate: Arc<Gate>) {
        self.state().synchronize_gate = Some(gate);
    }
    /// Fails the call of `operation` ("map", "unmap", "host_staging", "offload",
    /// "restore", "synchronize", "wait_for_stream"; an offload or restore fails per
    /// range) that comes after `pass` more calls of it, once: for fault-injection tests.
    pub fn fail_on(&self, operation: &'static str, pass: u32) {
        self.state().failure = Some((operation, pass));
    }
    /// Disarms a `fail_on` that has not struck.
    pub fn fail_nothing(&self) {
        self.state().failure = None;
    }
    /// Where `addr` lies: (the number of the segment or reservation holding it, in
    /// the order they were made; the offset in it).
    pub fn placement(&self, addr: u64) -> Option<(usize, u64)> {
        let s = self.state();
        s.made.iter().position(|&(start, size)| (start..start + size).contains(&addr)).map(|i| (i, addr - s.made[i].0))
    }
}

impl HostState {
    /// Addresses for a new segment of `size`, with a gap after it, so that no logic
    /// can get away with merging blocks across segments that merely happen to be
    /// adjacent.
    fn place(&mut self, size: u64) -> u64 {
        let step = size + (1 << 21);
        let addr = if self.descending {
            self.next_addr -= step;
            self.next_addr
        } else {
            self.next_addr += step;
            self.next_addr - step
        };
        self.made.push((addr, size));
        addr
    }
    /// Whether mappings cover `[addr, addr + size)`, one or several side by side.
    fn is_mapped(&self, addr: u64, size: u64) -> bool {
        let mut covered = addr;
        while covered < addr + size {
            match self.mappings.range(..=covered).next_back() {
                Some((&start, &len)) if start + len > covered => covered = start + len,
                _ => return false,
            }
        }
        true
    }
    /// Whether this call of `operation` is the one `fail_on` chose.
    fn fails(&mut self, operation: &'static str) -> Result<()> {
        match &mut self.failure {
            Some((op, 0)) if *op == operation => {
                self.failure = None;
                Err(Error::new(Status::GPURT_ERROR_CUDA, format!("injected failure of {operation}")))
            }
            Some((op, pass)) if *op == operation => {
                *pass -= 1;
                Ok(())
            }
            _ => Ok(()),
        }
    }
    fn reservation_holds(&self, addr: u64, size: u64) -> bool {
        self.reservations.iter().any(|(&start, &len)| start <= addr && addr + size <= start + len)
    }
}

impl SegmentSource for HostSource {
    fn allocate(&self, size: u64, _stream: u64) -> Result<u64> {
        let mut s = self.state();
        if s.used + size > s.capacity {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, "host source exhausted"));
        }
        let addr = s.place(size);
        s.used += size;
        s.live.insert(addr, size);
        Ok(addr)
    }
    fn release(&self, addr: u64, size: u64) {
        let mut s = self.state();
        assert_eq!(s.live.remove(&addr), Some(size), "released a segment that is not live");
        s.used -= size;
    }
    fn record(&self, _stream: u64) -> Result<u64> {
        let mut s = self.state();
        let marker = s.next_marker;
        s.next_marker += 1;
        s.markers.insert(marker, false);
        Ok(marker)
    }
    fn is_done(&self, marker: u64) -> bool {
        let mut s = self.state();
        let done = s.markers[&marker];
        if done {
            s.markers.remove(&marker);
        }
        done
    }
    fn wait(&self, marker: u64) {
        self.state().markers.remove(&marker);
    }
    fn memory_info(&self) -> (u64, u64) {
        let s = self.state();
        (s.capacity - s.used, s.capacity)
    }
    fn can_map(&self) -> bool {
        true
    }
    fn reserve_addresses(&self, size: u64) -> Result<u64> {
        let mut s = self.state();
        let addr = s.place(size);
        s.reservations.insert(addr, size);
        Ok(addr)
    }
    fn map(&self, addr: u64, size: u64) -> Result<()> {
        let mut s = self.state();
        assert!(s.reservation_holds(addr, size), "mapped outside a reservation");
        assert!(size > 0, "mapped nothing (cuMemMap refuses a size of 0)");
        let before = s.mappings.range(..addr + size).next_back().map(|(&start, &len)| start + len > addr);
        assert!(before != Some(true), "mapped over a mapping");
        s.fails("map")?;
        if s.used + size > s.capacity {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, "host source exhausted"));
        }
        s.used += size;
        s.mapped += size;
        s.mappings.insert(addr, size);
        Ok(())
    }
    /// As `cuMemUnmap`: exactly one whole mapping.
    fn unmap(&self, addr: u64, size: u64) -> Result<()> {
        let mut s = self.state();
        assert_eq!(s.mappings.get(&addr), Some(&size), "unmapped what is not one whole mapping");
        s.fails("unmap")?;
        s.mappings.remove(&addr);
        s.used -= size;
        s.mapped -= size;
        let dropped: Vec<u64> = s.contents.range(addr..addr + size).map(|(&a, _)| a).collect();
        for a in dropped {
            s.contents.remove(&a);
        }
        Ok(())
    }
    fn synchronize(&self) -> Result<()> {
        let gate = self.state().synchronize_gate.clone();
        if let Some(gate) = gate {
            gate.pass();
        }
        let mut s = self.state();
        s.synchronizations += 1;
        s.fails("synchronize")
    }
    fn wait_for_stream(&self, stream: u64) -> Result<bool> {
        let mut s = self.state();
        if s.capturing.contains(&stream) {
            return Ok(false);
        }
        s.fails("wait_for_stream")?;
        s.stream_waits.push(stream);
        Ok(true)
    }
    fn host_staging(&self, bytes: u64) -> Result<HostStaging> {
        let mut s = self.state();
        s.fails("host_staging")?;
        s.fresh_offloads += 1;
        s.staged_bytes.fetch_add(bytes, Ordering::Relaxed);
        Ok(Box::new(Staging { bytes, contents: Default::default(), staged: s.staged_bytes.clone() }))
    }
    /// Copies what `write` put in each range to its place in the staging (what was
    /// there goes); each range is a call that `fail_on` may fail.
    fn offload(&self, ranges: &[StagedRange], host: &mut HostStaging) -> Result<()> {
        let mut s = self.state();
        let staging = host.downcast_mut::<Staging>().expect("a host source's staging");
        for r in ranges {
            assert!(r.end() <= staging.bytes, "offloaded past the staging's end");
            assert!(s.is_mapped(r.addr, r.len), "offloaded memory that is not mapped");
            s.fails("offload")?;
            s.copied_out += r.len;
            staging.contents.retain(|&at, _| !(r.at..r.end()).contains(&at));
            staging.contents.extend(s.contents.range(r.addr..r.addr + r.len).map(|(&a, b)| (a - r.addr + r.at, b.clone())));
        }
        Ok(())
    }
    fn restore(&self, ranges: &[StagedRange], host: &HostStaging) -> Result<()> {
        let mut s = self.state();
        let staging = host.downcast_ref::<Staging>().expect("a host source's staging");
        for r in ranges {
            assert!(s.is_mapped(r.addr, r.len), "restored into memory that is not mapped");
            s.fails("restore")?;
            s.contents.extend(staging.contents.range(r.at..r.end()).map(|(&at, b)| (at - r.at + r.addr, b.clone())));
        }
        Ok(())
    }
    fn free_addresses(&self, addr: u64, size: u64) {
        assert_eq!(self.state().reservations.remove(&addr), Some(size), "freed addresses that were not reserved");
    }
    fn history_device(&self) -> Option<i32> {
        self.state().device
    }
}

/// A host source's offload: what `write` put in the ranges copied, by place in it.
struct Staging {
    bytes: u64,
    /// What `offload` copied, by offset in the staging.
    contents: std::collections::BTreeMap<u64, Vec<u8>>,
    /// Its source's count of the staged bytes alive, which it leaves when dropped.
    staged: Arc<AtomicU64>,
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.staged.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// A gate that a test holds shut to keep `synchronize` waiting (a device busy for as
/// long as the test likes), and that counts the callers it held.
#[derive(Default)]
pub struct Gate {
    shut: Mutex<bool>,
    opened: std::sync::Condvar,
    waiting: AtomicU64,
}

impl Gate {
    pub fn shut() -> Arc<Gate> {
        Arc::new(Gate { shut: Mutex::new(true), ..Gate::default() })
    }
    pub fn open(&self) {
        *lock(&self.shut) = false;
        self.opened.notify_all();
    }
    /// Callers waiting at the gate now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::SeqCst)
    }
    fn pass(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut shut = lock(&self.shut);
        while *shut {
            shut = self.opened.wait(shut).unwrap_or_else(|e| e.into_inner());
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A small deterministic generator (xorshift64) for the allocator's randomised tests
/// and benchmarks: the same seed gives the same operations on every machine.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Log-uniform in [lo, hi].
    pub fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (a + u * (b - a)).exp() as u64
    }
}
