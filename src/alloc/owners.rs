//! Which shard owns each segment of an allocator, for pointer-only frees from any
//! thread. Read at a free whose thread did not allocate the block last, from every
//! thread at once, so reading takes no lock and writes nothing shared: the table is an
//! immutable snapshot behind an `ArcSwap`. Segments come and go rarely (a driver call
//! each); a change publishes a new snapshot.
//!
//! Two costs shaped it:
//! - A flat sorted copy per change made taking 10 000 segments 23x slower than with
//!   a locked B-tree (19 µs a segment, next to a driver allocation's tens of µs). So
//!   entries sit in chunks of at most `CHUNK`, which successive snapshots share: a
//!   change copies one chunk and the list of chunks.
//! - A small heap block read by all threads, beside data one thread writes at every
//!   operation, cost two threads 15 % of their rate. So every part that a lookup reads
//!   fills whole cache lines (`Padded`, and 128-byte alignment).

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::boundary::lock;

/// A segment and the shard that owns it: 32 bytes, two to a cache line.
#[repr(align(32))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentOwner {
    pub start: u64,
    pub end: u64,
    pub shard: u32,
}

/// Entries per chunk, at most; a chunk that grows past it is split in two.
const CHUNK: usize = 256;

/// The owners of an allocator's segments.
pub struct SegmentOwners {
    table: ArcSwap<Table>,
    /// Writers take turns, so that no change is lost.
    update: Mutex<()>,
}

/// Chunks in order of their first segment's start.
#[repr(align(128))]
#[derive(Default)]
struct Table(Padded<ChunkRef>);

#[repr(align(16))]
#[derive(Clone, Default)]
struct ChunkRef {
    first: u64,
    /// `None` only in `Padded`'s unused entries.
    chunk: Option<Arc<Chunk>>,
}

/// Owners sorted by start; never empty.
#[repr(align(128))]
struct Chunk(Padded<SegmentOwner>);

/// Items between unused entries: with items whose size is their alignment, no other
/// heap data shares a cache line with them.
struct Padded<T>(Vec<T>);

impl<T: Clone + Default> Padded<T> {
    /// 64 bytes of entries at each end.
    const PAD: usize = 64usize.div_ceil(std::mem::size_of::<T>());

    fn new(items: impl IntoIterator<Item = T>) -> Padded<T> {
        let pad = || std::iter::repeat_with(T::default).take(Self::PAD);
        Padded(pad().chain(items).chain(pad()).collect())
    }

    fn items(&self) -> &[T] {
        &self.0[Self::PAD..self.0.len() - Self::PAD]
    }
}

impl<T: Clone + Default> Default for Padded<T> {
    fn default() -> Padded<T> {
        Padded::new([])
    }
}

impl ChunkRef {
    fn new(owners: Vec<SegmentOwner>) -> ChunkRef {
        ChunkRef { first: owners[0].start, chunk: Some(Arc::new(Chunk(Padded::new(owners)))) }
    }

    fn owners(&self) -> &[SegmentOwner] {
        self.chunk.as_ref().expect("a used entry").0.items()
    }
}

impl Default for SegmentOwners {
    fn default() -> SegmentOwners {
        SegmentOwners { table: ArcSwap::default(), update: Mutex::new(()) }
    }
}

impl SegmentOwners {
    /// The shard whose segment contains `addr`.
    pub fn owner_of(&self, addr: u64) -> Option<u32> {
        let table = self.table.load();
        let chunks = table.0.items();
        let chunk = chunks[..chunks.partition_point(|c| c.first <= addr)].last()?.owners();
        let owner = chunk[..chunk.partition_point(|o| o.start <= addr)].last()?;
        (addr < owner.end).then_some(owner.shard)
    }

    /// Every segment's owner, in order of start.
    pub fn all(&self) -> Vec<SegmentOwner> {
        self.table.load().0.items().iter().flat_map(|c| c.owners().iter().copied()).collect()
    }

    /// Records the owner of a new segment.
    pub fn insert(&self, owner: SegmentOwner) {
        let _turn = lock(&self.update);
        let chunks = self.table.load();
        let chunks = chunks.0.items();
        // The chunk whose range takes the start (the first one, for a start before all).
        let at = chunks.partition_point(|c| c.first <= owner.start).saturating_sub(1);
        let mut owners = chunks.get(at).map_or_else(Vec::new, |c| c.owners().to_vec());
        owners.insert(owners.partition_point(|o| o.start < owner.start), owner);
        let replaced = if owners.len() > CHUNK {
            let upper = owners.split_off(owners.len() / 2);
            vec![ChunkRef::new(owners), ChunkRef::new(upper)]
        } else {
            vec![ChunkRef::new(owners)]
        };
        let end = (at + 1).min(chunks.len());
        self.publish(chunks[..at].iter().cloned().chain(replaced).chain(chunks[end..].iter().cloned()));
    }

    /// Forgets the segments starting at `starts`, in one change.
    pub fn remove(&self, mut starts: Vec<u64>) {
        starts.sort_unstable();
        let _turn = lock(&self.update);
        let chunks = self.table.load();
        let kept = chunks.0.items().iter().filter_map(|c| {
            let owners = c.owners();
            let last = owners[owners.len() - 1].start;
            let (from, to) = (starts.partition_point(|&s| s < c.first), starts.partition_point(|&s| s <= last));
            if from == to {
                return Some(c.clone()); // none of its segments goes
            }
            let left: Vec<SegmentOwner> = owners.iter().filter(|o| starts[from..to].binary_search(&o.start).is_err()).copied().collect();
            (!left.is_empty()).then(|| ChunkRef::new(left))
        });
        self.publish(kept);
    }

    fn publish(&self, chunks: impl IntoIterator<Item = ChunkRef>) {
        self.table.store(Arc::new(Table(Padded::new(chunks))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::host::XorShift;
    use std::collections::BTreeMap;

    /// Random inserts, batched removes and lookups against a B-tree, through chunk
    /// splits and chunks emptied: every lookup agrees, and the entries stay sorted.
    #[test]
    fn lookups_match_a_btree_through_splits_and_removals() {
        let (owners, mut model) = (SegmentOwners::default(), BTreeMap::new());
        let mut rng = XorShift(11);
        for step in 0..crate::test_iterations(6_000) {
            // Segments of 1-4 units of 2^21 at distinct unit-aligned starts, so none overlap.
            if rng.below(4) > 0 || model.is_empty() {
                let start = rng.below(1 << 16) << 23;
                if model.contains_key(&start) {
                    continue;
                }
                let end = start + ((1 + rng.below(4)) << 21);
                owners.insert(SegmentOwner { start, end, shard: step as u32 });
                model.insert(start, (end, step as u32));
            } else {
                let keys: Vec<u64> = model.keys().copied().collect();
                let gone: Vec<u64> = (0..1 + rng.below(4)).map(|_| keys[rng.below(keys.len() as u64) as usize]).collect();
                for start in &gone {
                    model.remove(start);
                }
                owners.remove(gone);
            }
            for _ in 0..8 {
                let addr = rng.below(1 << 16) << 23 | rng.below(1 << 23);
                let expected = model.range(..=addr).next_back().and_then(|(_, &(end, shard))| (addr < end).then_some(shard));
                assert_eq!(owners.owner_of(addr), expected, "step {step}, address {addr:#x}");
            }
        }
        let all = owners.all();
        assert_eq!(all.len(), model.len());
        assert!(all.iter().zip(&model).all(|(o, (&start, &(end, shard)))| (o.start, o.end, o.shard) == (start, end, shard)));
        let table = owners.table.load();
        // Miri runs a hundredth of the steps: too few entries to split a chunk.
        assert!(cfg!(miri) || table.0.items().len() > 2, "the test went through chunk splits");
        assert!(table.0.items().iter().all(|c| c.owners().len() <= CHUNK), "a change copies at most one chunk's entries");
        // Everything goes, in batches that empty whole chunks.
        let keys: Vec<u64> = model.keys().copied().collect();
        for batch in keys.chunks(100) {
            owners.remove(batch.to_vec());
            assert!(batch.iter().all(|&start| owners.owner_of(start).is_none()));
        }
        assert!(owners.all().is_empty() && owners.table.load().0.items().is_empty());
    }

    #[test]
    fn padding_keeps_items_off_shared_lines() {
        assert_eq!((std::mem::size_of::<SegmentOwner>(), std::mem::align_of::<SegmentOwner>()), (32, 32));
        assert_eq!((std::mem::size_of::<ChunkRef>(), std::mem::align_of::<ChunkRef>()), (16, 16));
        assert_eq!((Padded::<SegmentOwner>::PAD, Padded::<ChunkRef>::PAD), (2, 4));
    }
}
