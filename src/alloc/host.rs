//! A segment source of plain address ranges, with markers completed on command: the
//! pool's logic runs and is tested here exactly as it runs on the driver.

use std::collections::HashMap;

use super::pool::SegmentSource;
use crate::error::{Error, Result, Status};

pub struct HostSource {
    capacity: u64,
    used: u64,
    next_addr: u64,
    live: HashMap<u64, u64>,
    /// Marker -> done.
    markers: HashMap<u64, bool>,
    next_marker: u64,
}

impl HostSource {
    /// A source that hands out at most `capacity` bytes at a time.
    pub fn new(capacity: u64) -> Self {
        HostSource { capacity, used: 0, next_addr: 1 << 32, live: HashMap::new(), markers: HashMap::new(), next_marker: 1 }
    }
    /// Marks every recorded marker done, as if all streams drained.
    pub fn complete_all(&mut self) {
        self.markers.values_mut().for_each(|done| *done = true);
    }
    pub fn live_segments(&self) -> usize {
        self.live.len()
    }
    pub fn pending_markers(&self) -> usize {
        self.markers.len()
    }
}

impl SegmentSource for HostSource {
    fn allocate(&mut self, size: u64, _stream: u64) -> Result<u64> {
        if self.used + size > self.capacity {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, "host source exhausted"));
        }
        let addr = self.next_addr;
        // A gap after each segment, so that no logic can get away with merging blocks
        // across segments that merely happen to be adjacent.
        self.next_addr += size + (1 << 21);
        self.used += size;
        self.live.insert(addr, size);
        Ok(addr)
    }
    fn release(&mut self, addr: u64, size: u64) {
        assert_eq!(self.live.remove(&addr), Some(size), "released a segment that is not live");
        self.used -= size;
    }
    fn record(&mut self, _stream: u64) -> Result<u64> {
        let marker = self.next_marker;
        self.next_marker += 1;
        self.markers.insert(marker, false);
        Ok(marker)
    }
    fn is_done(&mut self, marker: u64) -> bool {
        let done = self.markers[&marker];
        if done {
            self.markers.remove(&marker);
        }
        done
    }
    fn wait(&mut self, marker: u64) {
        self.markers.remove(&marker);
    }
    fn memory_info(&self) -> (u64, u64) {
        (self.capacity - self.used, self.capacity)
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
