//! Private memory pools of captured graphs (`torch.cuda.graph_pool_handle()`): which
//! capture allocates from which pool, and when a pool's memory goes back. Generic
//! over the segment source, so that the bookkeeping is tested on host memory.
//!
//! A pool is referenced by its pool handle (if the caller made one), by each capture
//! running into it, and by each graph and exec holding its addresses. When the last
//! reference goes, its free segments are released; segments still holding live
//! blocks (a graph's outputs the caller has not freed) go back with the last free.

use std::collections::HashMap;
use std::sync::Arc;

use crate::alloc::caching::CachingAllocator;
use crate::alloc::config::AllocConfig;
use crate::alloc::pool::SegmentSource;
use crate::error::{Error, Result};

struct Entry<S: SegmentSource> {
    allocator: Arc<CachingAllocator<S>>,
    refs: u32,
}

pub struct GraphPools<S: SegmentSource> {
    pools: HashMap<u64, Entry<S>>,
    /// Capture sequence id (the driver's) to pool id.
    captures: HashMap<u64, u64>,
    next_id: u64,
}

impl<S: SegmentSource> Default for GraphPools<S> {
    fn default() -> Self {
        GraphPools { pools: HashMap::new(), captures: HashMap::new(), next_id: 1 }
    }
}

fn unknown(id: u64) -> Error {
    Error::invalid_handle(format!("graph pool {id} no longer exists"))
}

impl<S: SegmentSource> GraphPools<S> {
    /// A new pool with one reference, for its creator.
    pub fn create(&mut self, source: S, config: AllocConfig) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.pools.insert(id, Entry { allocator: Arc::new(CachingAllocator::new(source, config)), refs: 1 });
        id
    }

    pub fn retain(&mut self, id: u64) -> Result<()> {
        self.pools.get_mut(&id).ok_or_else(|| unknown(id))?.refs += 1;
        Ok(())
    }

    /// Drops a reference. Gives the allocator when it was the last, for the caller
    /// to wait until no replay uses the memory and then `collect`.
    pub fn release(&mut self, id: u64) -> Result<Option<Arc<CachingAllocator<S>>>> {
        let entry = self.pools.get_mut(&id).ok_or_else(|| unknown(id))?;
        entry.refs -= 1;
        Ok((entry.refs == 0).then(|| entry.allocator.clone()))
    }

    /// Releases an unreferenced pool's free memory, and drops the pool when empty:
    /// gives the dropped pool's allocator, for its final statistics.
    pub fn collect(&mut self, id: u64) -> Option<Arc<CachingAllocator<S>>> {
        let entry = self.pools.get(&id)?;
        // A sleeping pool is collected when it wakes (`capture::collect_woken`).
        if entry.refs > 0 || entry.allocator.refuses_allocations() {
            return None;
        }
        entry.allocator.empty_cache();
        if entry.allocator.stats().reserved_bytes.all.current != 0 {
            return None;
        }
        self.pools.remove(&id).map(|e| e.allocator)
    }

    /// The pools nothing references any more (kept for their live blocks, or for
    /// free memory a collection could not release yet).
    pub fn unreferenced(&self) -> Vec<u64> {
        self.pools.iter().filter(|(_, e)| e.refs == 0).map(|(&id, _)| id).collect()
    }

    /// Every pool's allocator.
    pub fn allocators(&self) -> impl Iterator<Item = &Arc<CachingAllocator<S>>> {
        self.by_id().map(|(_, a)| a)
    }

    /// Every pool's id and allocator.
    pub fn by_id(&self) -> impl Iterator<Item = (u64, &Arc<CachingAllocator<S>>)> {
        self.pools.iter().map(|(&id, e)| (id, &e.allocator))
    }

    /// A capture sequence allocates from pool `id` until `end_capture`; the capture
    /// holds a reference.
    pub fn begin_capture(&mut self, capture: u64, id: u64) -> Result<()> {
        self.retain(id)?;
        self.captures.insert(capture, id);
        Ok(())
    }

    /// The pool a capture allocated from; its reference passes to the caller.
    pub fn end_capture(&mut self, capture: u64) -> Option<u64> {
        self.captures.remove(&capture)
    }

    /// The ids of the captures in progress, in order.
    pub fn capture_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.captures.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The pool a capture in progress allocates from.
    pub fn pool_of_capture(&self, capture: u64) -> Option<u64> {
        self.captures.get(&capture).copied()
    }

    pub fn for_capture(&self, capture: u64) -> Option<Arc<CachingAllocator<S>>> {
        self.pools.get(self.captures.get(&capture)?).map(|e| e.allocator.clone())
    }

    pub fn allocator(&self, id: u64) -> Option<Arc<CachingAllocator<S>>> {
        self.pools.get(&id).map(|e| e.allocator.clone())
    }

    /// The pool whose segments hold `ptr`.
    pub fn owner(&self, ptr: u64) -> Option<(u64, Arc<CachingAllocator<S>>)> {
        self.pools.iter().find(|(_, e)| e.allocator.holds(ptr)).map(|(&id, e)| (id, e.allocator.clone()))
    }

    pub fn len(&self) -> usize {
        self.pools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::host::HostSource;

    const MIB: u64 = 1 << 20;

    fn pools() -> GraphPools<HostSource> {
        GraphPools::default()
    }

    fn source() -> HostSource {
        HostSource::new(1 << 40)
    }

    #[test]
    fn a_capture_allocates_from_its_pool_and_the_graph_keeps_it() {
        let mut p = pools();
        let id = p.create(source(), AllocConfig::default());
        p.begin_capture(77, id).unwrap();
        p.release(id).unwrap(); // the creator's handle goes; the capture holds the pool
        let a = p.for_capture(77).unwrap();
        let x = a.malloc(3 * MIB, 5).unwrap();
        let y = a.malloc(100, 5).unwrap();
        a.free(y).unwrap();
        assert_eq!(p.owner(x).map(|o| o.0), Some(id));
        assert!(p.for_capture(78).is_none(), "another capture has no pool");
        assert_eq!(p.end_capture(77), Some(id), "the capture's reference passes to its graph");
        assert!(p.for_capture(77).is_none());
        p.retain(id).unwrap(); // an exec of the graph
        assert!(p.release(id).unwrap().is_none(), "the exec still holds it");
        assert_eq!(p.len(), 1);
        let last = p.release(id).unwrap().expect("the last reference");
        p.collect(id);
        assert_eq!(p.len(), 1, "x is still live: its segment stays");
        assert!(last.stats().reserved_bytes.all.current > 0);
        last.free(x).unwrap();
        let gone = p.collect(id).expect("the pool is dropped");
        assert_eq!(gone.stats().allocation.all.allocated, 2, "its statistics stay readable");
        assert!(p.is_empty(), "freed and unreferenced: the pool is gone");
        assert_eq!(last.source().live_segments(), 0, "every segment went back to the source");
        assert!(p.release(id).is_err() && p.retain(id).is_err(), "a gone pool is an error, not a panic");
    }

    /// A pool whose last reference goes while its segment's stream captures (the next
    /// capture on it, as cycles of PyTorch captures run) keeps its free memory mapped, as
    /// its release may not wait for that stream, and stays, unreferenced; collected
    /// again once the capture ended, it goes with every segment.
    #[test]
    fn an_unreferenced_pool_whose_stream_captured_is_collected_again() {
        let mut p = pools();
        let id = p.create(source(), AllocConfig::parse("expandable_segments:True").unwrap());
        p.begin_capture(1, id).unwrap();
        let a = p.for_capture(1).unwrap();
        a.free(a.malloc(3 * MIB, 9).unwrap()).unwrap();
        p.end_capture(1);
        assert!(p.release(id).unwrap().is_none(), "the graph holds it");
        let last = p.release(id).unwrap().expect("the graph's was the last reference");
        last.source().set_capturing(9, true);
        assert!(p.collect(id).is_none(), "its stream captures: nothing released");
        assert!(last.stats().reserved_bytes.all.current > 0);
        assert_eq!(p.unreferenced(), [id]);
        last.source().set_capturing(9, false);
        let gone: Vec<_> = p.unreferenced().into_iter().filter_map(|id| p.collect(id)).collect();
        assert_eq!(gone.len(), 1);
        assert!(p.is_empty() && p.unreferenced().is_empty());
        assert_eq!(last.source().live_segments(), 0, "every segment went back to the source");
        assert_eq!(last.source().stream_waits(), [9], "its stream waited for once, after its capture");
    }

    #[test]
    fn captures_sharing_a_pool_reuse_its_blocks_and_others_do_not_see_them() {
        let mut p = pools();
        let shared = p.create(source(), AllocConfig::default());
        let other = p.create(source(), AllocConfig::default());
        p.begin_capture(1, shared).unwrap();
        let a = p.for_capture(1).unwrap();
        let x = a.malloc(MIB, 9).unwrap();
        a.free(x).unwrap();
        p.end_capture(1);
        p.begin_capture(2, shared).unwrap();
        assert_eq!(p.for_capture(2).unwrap().malloc(MIB, 9).unwrap(), x, "the second graph reuses the first's free block");
        p.begin_capture(3, other).unwrap();
        let z = p.for_capture(3).unwrap().malloc(MIB, 9).unwrap();
        assert_ne!(z, x);
        assert_eq!(p.owner(z).map(|o| o.0), Some(other));
        assert!(p.owner(12345).is_none());
    }
}
