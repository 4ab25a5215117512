//! A pool's blocks and its free-block index, kept apart from the pool's policy.
//!
//! Blocks live in an arena and name each other by index: a segment's neighbours
//! and a free list's links are followed without hashing, and a split or a merge
//! allocates nothing once the arena has grown. Free blocks of one stream and pool
//! kind sit in size-class lists (two-level classes: powers of two, each cut into 32
//! equal ranges) with one bit per non-empty class, so that a best-fit search reads
//! a bitmap and one or two short lists instead of walking an ordered tree.

use super::stats::PoolKind;

pub(crate) type BlockId = u32;
/// No block: the end of a segment or of a list.
pub(crate) const NO_BLOCK: BlockId = BlockId::MAX;

/// Blocks are multiples of this; sizes are classed in these units.
pub(crate) const MIN_BLOCK: u64 = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Allocated,
    /// Freed by the caller; waits for other streams' markers before reuse.
    PendingFree,
    /// In its stream's free lists, coalesced with its neighbours.
    Free,
    /// Free, parked uncoalesced in an exact-size bin for the next request of its size.
    Parked,
    /// A hole in an expandable segment: addresses whose memory went back to the driver
    /// (`empty_cache`), reserved still, mapped again by a later growth.
    Unmapped,
    /// An arena slot with no block in it.
    Vacant,
}

/// A block: 64 bytes, one cache line. Its stream is its free lists' (`lists`), and
/// the streams that used it (`record_stream`) are kept by the pool, so that the
/// blocks that every operation reads stay small.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
pub struct Block {
    pub addr: u64,
    pub size: u64,
    pub requested: u64,
    /// Best fit's tie-break among equal sizes: the segment's number (in the order
    /// segments were taken), then the offset in it. Unlike the address, it does not
    /// depend on where the driver put a segment, so the pool makes the same choices
    /// on every device and on the host source its tests run on.
    pub rank: u64,
    /// Neighbours in the segment; `NO_BLOCK` at its ends.
    pub prev: BlockId,
    pub next: BlockId,
    /// Neighbours in its free list, while free.
    list_prev: BlockId,
    list_next: BlockId,
    /// The index, in its pool, of the free lists of its stream and pool kind.
    pub lists: u32,
    /// Its size class, while in a free list.
    class: u16,
    pub pool: PoolKind,
    pub state: State,
    /// Whether other streams used it (`record_stream`).
    pub used_elsewhere: bool,
    /// While allocated: what an offloading sleep does with its contents.
    pub on_sleep: OnSleep,
}

/// What an offloading sleep does with a live block's contents.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum OnSleep {
    /// Copied to host memory and back (how every allocation starts).
    Copy,
    /// Dropped (`gpurt_mem_discard_on_sleep`): a cache its owner rebuilds.
    Discard,
    /// Copied, and its owner promises not to change them (`gpurt_mem_read_only`):
    /// `kept` once an offload copied them, so that a later offload whose host memory
    /// still holds that copy need not copy them again.
    ReadOnly { kept: bool },
}

impl Block {
    /// A free block in free lists `lists` (of its stream's `pool`), between `prev`
    /// and `next`.
    pub fn free(addr: u64, size: u64, rank: u64, lists: u32, pool: PoolKind, prev: BlockId, next: BlockId) -> Block {
        Block {
            addr,
            size,
            requested: 0,
            rank,
            prev,
            next,
            list_prev: NO_BLOCK,
            list_next: NO_BLOCK,
            lists,
            class: 0,
            pool,
            state: State::Free,
            used_elsewhere: false,
            on_sleep: OnSleep::Copy,
        }
    }

    pub fn is_split(&self) -> bool {
        self.prev != NO_BLOCK || self.next != NO_BLOCK
    }
}

/// Blocks by index; removed blocks leave their slot for the next one.
#[derive(Default)]
pub struct Arena {
    slots: Vec<Block>,
    vacant: Vec<BlockId>,
}

impl Arena {
    pub fn insert(&mut self, block: Block) -> BlockId {
        match self.vacant.pop() {
            Some(id) => {
                self.slots[id as usize] = block;
                id
            }
            None => {
                self.slots.push(block);
                (self.slots.len() - 1) as BlockId
            }
        }
    }

    pub fn remove(&mut self, id: BlockId) {
        self.slots[id as usize].state = State::Vacant;
        self.vacant.push(id);
    }

    /// Blocks in the arena.
    pub fn len(&self) -> usize {
        self.slots.len() - self.vacant.len()
    }
}

impl std::ops::Index<BlockId> for Arena {
    type Output = Block;
    fn index(&self, id: BlockId) -> &Block {
        &self.slots[id as usize]
    }
}

impl std::ops::IndexMut<BlockId> for Arena {
    fn index_mut(&mut self, id: BlockId) -> &mut Block {
        &mut self.slots[id as usize]
    }
}

const SUB_BITS: u32 = 5;
const SUBS: usize = 1 << SUB_BITS;
/// A best-fit search looks at no more than this many blocks of one list: past it,
/// the best seen is taken (lists are short unless many blocks share a size range).
/// Only a search that sees no fit at all reads on.
const SCAN_LIMIT: usize = 32;

/// Levels of size classes: enough for any `u64` size, and a power of two, so that a
/// level's index needs no bounds check.
const LEVELS: usize = 64;

/// (level, sub-class) of a size: sizes below 32 units have a class each; above,
/// each power of two is cut into 32 ranges.
fn class_of(size: u64) -> (usize, usize) {
    let units = size / MIN_BLOCK;
    if units < SUBS as u64 {
        return (0, units as usize);
    }
    let top = 63 - units.leading_zeros();
    ((top - SUB_BITS + 1) as usize & (LEVELS - 1), ((units >> (top - SUB_BITS)) as usize) & (SUBS - 1))
}

/// The free blocks of one stream and pool kind, by size class.
pub struct FreeLists {
    stream: u64,
    pool: PoolKind,
    /// Segments of this stream and pool kind: none, and no block refers to these
    /// lists, so they may be reassigned.
    pub segments: u32,
    /// How many blocks the lists hold.
    len: u32,
    /// Bit l: level l has a non-empty class.
    levels: u64,
    /// Per level, bit s: class (l, s) is non-empty.
    subs: [u32; LEVELS],
    /// Per level, the first block of each class.
    heads: Box<[[BlockId; SUBS]; LEVELS]>,
}

impl FreeLists {
    pub fn new(stream: u64, pool: PoolKind) -> FreeLists {
        FreeLists { stream, pool, segments: 0, len: 0, levels: 0, subs: [0; LEVELS], heads: Box::new([[NO_BLOCK; SUBS]; LEVELS]) }
    }

    pub fn is_empty(&self) -> bool {
        self.levels == 0
    }

    /// How many blocks the lists hold.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether these are the lists of `stream`'s `pool`.
    pub fn hold(&self, stream: u64, pool: PoolKind) -> bool {
        self.stream == stream && self.pool == pool
    }

    pub fn stream(&self) -> u64 {
        self.stream
    }

    pub fn pool(&self) -> PoolKind {
        self.pool
    }

    /// Lists with no segment, taken over for another stream or pool kind.
    pub fn reassign(&mut self, stream: u64, pool: PoolKind) {
        debug_assert!(self.segments == 0 && self.is_empty(), "lists that blocks refer to are reassigned");
        (self.stream, self.pool) = (stream, pool);
    }

    pub fn insert(&mut self, arena: &mut Arena, id: BlockId) {
        let (level, sub) = class_of(arena[id].size);
        let head = self.heads[level][sub];
        let block = &mut arena[id];
        (block.list_prev, block.list_next, block.class) = (NO_BLOCK, head, (level << SUB_BITS | sub) as u16);
        if head != NO_BLOCK {
            arena[head].list_prev = id;
        }
        self.heads[level][sub] = id;
        self.len += 1;
        self.subs[level] |= 1 << sub;
        self.levels |= 1 << level;
    }

    pub fn remove(&mut self, arena: &mut Arena, id: BlockId) {
        let Block { list_prev: prev, list_next: next, class, .. } = arena[id];
        let (level, sub) = ((class >> SUB_BITS) as usize & (LEVELS - 1), class as usize & (SUBS - 1));
        match prev {
            NO_BLOCK => self.heads[level][sub] = next,
            prev => arena[prev].list_next = next,
        }
        if next != NO_BLOCK {
            arena[next].list_prev = prev;
        }
        self.len -= 1;
        if self.heads[level][sub] == NO_BLOCK {
            self.subs[level] &= !(1 << sub);
            if self.subs[level] == 0 {
                self.levels &= !(1 << level);
            }
        }
    }

    /// The smallest block of at least `size` and less than `limit` bytes (lowest
    /// rank among equals), looking at no more than `SCAN_LIMIT` blocks per list.
    /// Where that finds nothing, the lists are read whole, so that a fitting block is
    /// never missed (a miss would take a new segment, or report out of memory).
    pub fn best_fit(&self, arena: &Arena, size: u64, limit: u64) -> Option<BlockId> {
        self.fit(arena, size, limit, SCAN_LIMIT).or_else(|| self.fit(arena, size, limit, usize::MAX))
    }

    /// `best_fit` within `SCAN_LIMIT` blocks per list: it may miss a fitting block,
    /// for a caller that has one in hand.
    pub fn quick_fit(&self, arena: &Arena, size: u64, limit: u64) -> Option<BlockId> {
        self.fit(arena, size, limit, SCAN_LIMIT)
    }

    fn fit(&self, arena: &Arena, size: u64, limit: u64, max_scan: usize) -> Option<BlockId> {
        let (level, sub) = class_of(size);
        // The request's own class may hold blocks too small for it.
        if self.subs[level] & (1 << sub) != 0 {
            if let Some(id) = self.scan(arena, self.heads[level][sub], size, limit, max_scan) {
                return Some(id);
            }
        }
        // Every block of a higher class is large enough: the first non-empty one holds
        // the best fit.
        let above_in_level = self.subs[level] & (!0u32 << sub << 1);
        let (level, sub) = if above_in_level != 0 {
            (level, above_in_level.trailing_zeros() as usize)
        } else {
            let above = self.levels & (!0u64 << level << 1);
            if above == 0 {
                return None;
            }
            let level = above.trailing_zeros() as usize;
            (level, self.subs[level].trailing_zeros() as usize)
        };
        self.scan(arena, self.heads[level][sub], size, limit, max_scan)
    }

    fn scan(&self, arena: &Arena, mut at: BlockId, size: u64, limit: u64, max_scan: usize) -> Option<BlockId> {
        let mut best: Option<(u64, u64, BlockId)> = None;
        for _ in 0..max_scan {
            if at == NO_BLOCK {
                break;
            }
            let b = &arena[at];
            let better = best.map_or(true, |(s, r, _)| (b.size, b.rank) < (s, r));
            if b.size >= size && b.size < limit && better {
                best = Some((b.size, b.rank, at));
            }
            at = b.list_next;
        }
        best.map(|(_, _, id)| id)
    }

    /// Every block in the lists, each with whether it sits in its size's class and
    /// its back link holds; for invariant checks.
    pub fn entries(&self, arena: &Arena) -> Vec<(BlockId, bool)> {
        let mut all = Vec::new();
        for (level, heads) in self.heads.iter().enumerate() {
            for (sub, &head) in heads.iter().enumerate() {
                let (mut at, mut prev) = (head, NO_BLOCK);
                while at != NO_BLOCK {
                    let b = &arena[at];
                    let filed = class_of(b.size) == (level, sub) && b.class as usize == level << SUB_BITS | sub;
                    all.push((at, filed && b.list_prev == prev && b.state == State::Free));
                    (prev, at) = (at, b.list_next);
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_ordered_and_exact_below_32_units() {
        let mut last = (0, 0);
        for units in 1..100_000u64 {
            let class = class_of(units * MIN_BLOCK);
            assert!(class >= last, "{units} units");
            if units < 64 {
                assert!(class > last || units == 1, "sizes below 64 units each have a class");
            }
            last = class;
        }
        assert_eq!(class_of(!(MIN_BLOCK - 1)).0, 50);
    }

    /// A class holding more blocks than one scan reads, the only fitting one deepest:
    /// it is still found.
    #[test]
    fn a_fitting_block_deep_in_a_long_list_is_found() {
        let mut arena = Arena::default();
        let mut lists = FreeLists::new(1, PoolKind::Large);
        // 200 to 203 units of 512 B: one class. The fitting block goes in first, so it
        // ends last.
        let size = |units: u64| units * MIN_BLOCK;
        let fitting = arena.insert(Block::free(0, size(203), 0, 0, PoolKind::Large, NO_BLOCK, NO_BLOCK));
        lists.insert(&mut arena, fitting);
        for i in 1..=3 * SCAN_LIMIT as u64 {
            let id = arena.insert(Block::free(i << 32, size(200), i, 0, PoolKind::Large, NO_BLOCK, NO_BLOCK));
            lists.insert(&mut arena, id);
        }
        assert_eq!(class_of(size(200)), class_of(size(203)));
        assert_eq!(lists.best_fit(&arena, size(202), u64::MAX), Some(fitting));
        assert_eq!(lists.best_fit(&arena, size(204), u64::MAX), None);
    }

    /// Random inserts and removes against a plain list: the best fit is always the
    /// smallest fitting size, lowest rank first.
    #[test]
    fn best_fit_matches_a_linear_search() {
        let mut rng = crate::alloc::host::XorShift(7);
        let mut arena = Arena::default();
        let mut lists = FreeLists::new(1, PoolKind::Large);
        let mut free: Vec<BlockId> = Vec::new();
        for i in 0..crate::test_iterations(20_000) {
            if (rng.below(2) == 0 && free.len() < 300) || free.is_empty() {
                let size = rng.log_uniform(512, 64 << 20).next_multiple_of(MIN_BLOCK);
                let id = arena.insert(Block::free(i << 32, size, u64::MAX - i, 0, PoolKind::Large, NO_BLOCK, NO_BLOCK));
                lists.insert(&mut arena, id);
                free.push(id);
            } else {
                let id = free.swap_remove(rng.below(free.len() as u64) as usize);
                lists.remove(&mut arena, id);
                arena.remove(id);
            }
            let want = rng.log_uniform(512, 64 << 20).next_multiple_of(MIN_BLOCK);
            let limit = if rng.below(4) == 0 { want * 2 } else { u64::MAX };
            let expected = free
                .iter()
                .filter(|&&id| arena[id].size >= want && arena[id].size < limit)
                .min_by_key(|&&id| (arena[id].size, arena[id].rank))
                .copied();
            assert_eq!(lists.best_fit(&arena, want, limit), expected, "step {i}");
        }
        assert_eq!(lists.entries(&arena).len(), free.len());
        assert!(lists.entries(&arena).iter().all(|&(_, ok)| ok));
    }
}
