//! The caching pinned-host pool's logic, generic over where memory comes from (the
//! driver's `cuMemHostAlloc`, or plain address ranges in tests), as PyTorch's caching
//! host allocator and CuPy's `PinnedMemoryPool`: sizes rounded to classes, freed
//! blocks cached per class, and a block that asynchronous work still uses (recorded
//! streams) reused only once markers recorded on those streams are done, checked
//! lazily on allocation, never waited for on the fast path.

use std::collections::BTreeMap;
use std::time::Instant;

use rustc_hash::FxHashMap as HashMap;

use crate::alloc::caching::GPURT_MAX_ALLOCATION_SIZE;
use crate::alloc::pool::SegmentSource;
use crate::alloc::stats::gpurt_stat_t;
use crate::error::{Error, Result, Status};

/// Smallest class: the driver pins whole pages anyway.
const MIN_CLASS: u64 = 4096;

/// `torch.cuda.host_memory_stats()`: blocks and bytes handed out, bytes and driver
/// allocations held, and the time spent in the driver's host alloc and free.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct gpurt_host_memory_stats_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt fills only that much.
    pub struct_size: usize,
    /// Blocks handed out.
    pub allocations: gpurt_stat_t,
    /// Bytes handed out.
    pub allocated_bytes: gpurt_stat_t,
    /// Bytes pinned from the driver.
    pub reserved_bytes: gpurt_stat_t,
    /// Pinned allocations held from the driver.
    pub segment: gpurt_stat_t,
    /// Pinned allocations made.
    pub num_host_alloc: i64,
    /// Pinned allocations freed.
    pub num_host_free: i64,
    /// Time spent pinning memory, in nanoseconds.
    pub host_alloc_time_ns: i64,
    /// Time spent unpinning memory, in nanoseconds.
    pub host_free_time_ns: i64,
    /// The longest single pinning, in nanoseconds (0 before the first); with the
    /// total and the count, torch's `host_alloc_time` max, min and avg.
    pub host_alloc_time_max_ns: i64,
    /// The shortest single pinning, in nanoseconds (0 before the first).
    pub host_alloc_time_min_ns: i64,
    /// The longest single unpinning, in nanoseconds (0 before the first).
    pub host_free_time_max_ns: i64,
    /// The shortest single unpinning, in nanoseconds (0 before the first).
    pub host_free_time_min_ns: i64,
}

/// Counts one driver call of `ns` nanoseconds into a count, total, maximum and minimum.
fn time_call(count: &mut i64, total: &mut i64, max: &mut i64, min: &mut i64, ns: i64) {
    *count += 1;
    *total += ns;
    *max = (*max).max(ns);
    *min = if *count == 1 { ns } else { (*min).min(ns) };
}

/// The size class of a request: at least 4 KiB, then four classes per power of two
/// (1, 1.25, 1.5, 1.75 × 2^k), so that rounding wastes at most 25 % (plain powers of
/// two waste up to 50 %; see `rounding_wastes_at_most_a_quarter`).
pub fn size_class(size: u64) -> u64 {
    let size = size.max(MIN_CLASS);
    let step = (size.next_power_of_two() / 8).max(1);
    size.div_ceil(step) * step
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    InUse,
    /// Freed; waits for the markers of the streams that used it.
    Pending,
    Free,
}

struct Block {
    size: u64,
    state: State,
    /// Streams (their keys) whose work may still touch the block.
    used_on: Vec<u64>,
}

pub struct PinnedPool<S: SegmentSource> {
    source: S,
    /// Every block by address: ordered, so that a pointer inside a block finds it.
    blocks: BTreeMap<u64, Block>,
    free: HashMap<u64, Vec<u64>>,
    pending: Vec<(u64, Vec<u64>)>,
    stats: gpurt_host_memory_stats_t,
}

impl<S: SegmentSource> PinnedPool<S> {
    pub fn new(source: S) -> Self {
        PinnedPool {
            source,
            blocks: BTreeMap::new(),
            free: HashMap::default(),
            pending: Vec::new(),
            stats: gpurt_host_memory_stats_t { struct_size: std::mem::size_of::<gpurt_host_memory_stats_t>(), ..Default::default() },
        }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// Makes blocks whose markers are done free again; with `wait`, waits for all.
    fn process_pending(&mut self, wait: bool) {
        let source = &self.source;
        let blocks = &mut self.blocks;
        let free = &mut self.free;
        self.pending.retain_mut(|(addr, markers)| {
            if !source.settle(markers, wait) {
                return true;
            }
            let block = blocks.get_mut(addr).expect("pending block");
            block.state = State::Free;
            free.entry(block.size).or_default().push(*addr);
            false
        });
    }

    /// A pinned block of at least `size` bytes (0 gives address 0).
    pub fn malloc(&mut self, size: u64) -> Result<u64> {
        if size == 0 {
            return Ok(0);
        }
        if size > GPURT_MAX_ALLOCATION_SIZE {
            return Err(Error::new(
                Status::GPURT_ERROR_OUT_OF_MEMORY,
                format!("out of memory: tried to pin {size} bytes; gpurt refuses requests above {GPURT_MAX_ALLOCATION_SIZE} bytes"),
            ));
        }
        if !self.pending.is_empty() {
            self.process_pending(false);
        }
        let class = size_class(size);
        let addr = match self.free.get_mut(&class).and_then(Vec::pop) {
            Some(addr) => addr,
            None => {
                let started = Instant::now();
                let addr = self.source.allocate(class, 0)?;
                let st = &mut self.stats;
                let ns = started.elapsed().as_nanos() as i64;
                time_call(&mut st.num_host_alloc, &mut st.host_alloc_time_ns, &mut st.host_alloc_time_max_ns, &mut st.host_alloc_time_min_ns, ns);
                self.stats.segment.add(1);
                self.stats.reserved_bytes.add(class as i64);
                self.blocks.insert(addr, Block { size: class, state: State::Free, used_on: Vec::new() });
                addr
            }
        };
        self.blocks.get_mut(&addr).expect("block").state = State::InUse;
        self.stats.allocations.add(1);
        self.stats.allocated_bytes.add(class as i64);
        Ok(addr)
    }

    /// The in-use block containing `ptr`: (start, size).
    pub fn block_containing(&self, ptr: u64) -> Option<(u64, u64)> {
        let (&start, block) = self.blocks.range(..=ptr).next_back()?;
        (ptr < start + block.size && block.state == State::InUse).then_some((start, block.size))
    }

    /// Declares that the block containing `ptr` is used by work on `stream`: its
    /// reuse after a free waits for that work. `None`: not a block of this pool.
    pub fn record_stream(&mut self, ptr: u64, stream: u64) -> Option<()> {
        let (start, _) = self.block_containing(ptr)?;
        let block = self.blocks.get_mut(&start).expect("block");
        if !block.used_on.contains(&stream) {
            block.used_on.push(stream);
        }
        Some(())
    }

    /// Frees the block at `addr`. `None`: `addr` is not a block of this pool.
    pub fn free(&mut self, addr: u64) -> Option<Result<()>> {
        let block = self.blocks.get_mut(&addr)?;
        if block.state != State::InUse {
            return Some(Err(Error::invalid_argument(format!("pinned block {addr:#x} was already freed"))));
        }
        let markers = match self.source.record_all(&block.used_on) {
            Ok(markers) => markers,
            // The block stays in use and intact, so that the caller may retry.
            Err(e) => return Some(Err(e)),
        };
        block.used_on.clear();
        let size = block.size;
        self.stats.allocations.sub(1);
        self.stats.allocated_bytes.sub(size as i64);
        if markers.is_empty() {
            block.state = State::Free;
            self.free.entry(size).or_default().push(addr);
        } else {
            block.state = State::Pending;
            self.pending.push((addr, markers));
        }
        Some(Ok(()))
    }

    /// Returns every free cached block to the source; blocks still pending stay.
    pub fn empty_cache(&mut self) {
        self.process_pending(false);
        for (_, addrs) in self.free.drain() {
            for addr in addrs {
                let block = self.blocks.remove(&addr).expect("free block");
                let started = Instant::now();
                self.source.release(addr, block.size);
                let st = &mut self.stats;
                let ns = started.elapsed().as_nanos() as i64;
                time_call(&mut st.num_host_free, &mut st.host_free_time_ns, &mut st.host_free_time_max_ns, &mut st.host_free_time_min_ns, ns);
                self.stats.segment.sub(1);
                self.stats.reserved_bytes.sub(block.size as i64);
            }
        }
    }

    /// Blocks allocated and not freed: a pool with any is not destroyed (freed blocks
    /// still waiting for their streams are waited for by `drain`).
    pub fn in_use(&self) -> usize {
        self.blocks.values().filter(|b| b.state == State::InUse).count()
    }

    /// Waits for pending blocks, then releases everything cached.
    pub fn drain(&mut self) {
        self.process_pending(true);
        self.empty_cache();
    }

    pub fn stats(&self) -> gpurt_host_memory_stats_t {
        self.stats
    }

    fn each_stat(&mut self) -> [&mut gpurt_stat_t; 4] {
        let s = &mut self.stats;
        [&mut s.allocations, &mut s.allocated_bytes, &mut s.reserved_bytes, &mut s.segment]
    }

    pub fn reset_peak(&mut self) {
        self.each_stat().into_iter().for_each(gpurt_stat_t::reset_peak);
    }

    pub fn reset_accumulated(&mut self) {
        self.each_stat().into_iter().for_each(gpurt_stat_t::reset_accumulated);
        let st = &mut self.stats;
        (st.num_host_alloc, st.num_host_free, st.host_alloc_time_ns, st.host_free_time_ns) = (0, 0, 0, 0);
        (st.host_alloc_time_max_ns, st.host_alloc_time_min_ns, st.host_free_time_max_ns, st.host_free_time_min_ns) = (0, 0, 0, 0);
    }

    /// CuPy's `PinnedMemoryPool` queries: (used bytes, free bytes, total bytes, free
    /// blocks). Pending blocks count as used until their streams are done.
    pub fn usage(&mut self) -> (u64, u64, u64, u64) {
        self.process_pending(false);
        let total = self.stats.reserved_bytes.current as u64;
        let free_blocks: u64 = self.free.values().map(|v| v.len() as u64).sum();
        let free_bytes: u64 = self.free.iter().map(|(size, v)| size * v.len() as u64).sum();
        (total - free_bytes, free_bytes, total, free_blocks)
    }
}
