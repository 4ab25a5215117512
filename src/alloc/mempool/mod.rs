//! Pools users create (torch's `MemPool`, cupy's `MemoryPool`): each a caching
//! allocator of its own, over segments of its own, with its own configuration and
//! byte limit. `MemPools` is the registry: it finds any pool's block from the pointer
//! alone without a lock, refuses to destroy a pool that still has live allocations or
//! that a thread routes to, and keeps a destroyed pool's totals in its device's.
//! `PoolStack` is one thread's stack of pushed pools (torch's `use_mem_pool`).
//! Generic over the segment source, so that all of it is tested on host memory;
//! `alloc::device` instantiates it over the driver, `ffi` holds the C entry points.

pub mod device;
pub mod ffi;
pub mod on_request;
pub mod sleep;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::caching::CachingAllocator;
use super::config::AllocConfig;
use super::pool::SegmentSource;
use super::stats::{gpurt_memory_stats_t, RetiredStats};
use crate::boundary::lock;
use crate::error::{Error, Result};

/// A pool's figures as cupy's `MemoryPool` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolUsage {
    /// Bytes in live allocations (`used_bytes`).
    pub used: u64,
    /// Bytes cached and free (`free_bytes`).
    pub free: u64,
    /// Bytes the pool holds (`total_bytes`).
    pub total: u64,
    /// Free blocks in the cache (`n_free_blocks`).
    pub free_blocks: u64,
}

/// One pool: its allocator and the device it serves.
pub struct MemPool<S: SegmentSource> {
    id: u64,
    device: i32,
    allocator: CachingAllocator<S>,
    /// Entries for it on threads' pool stacks: it is not destroyed while any remain.
    pushed: AtomicUsize,
    /// Whether allocations elsewhere on its device that run out of memory may be
    /// served from it (`use_on_oom`).
    use_on_oom: bool,
}

impl<S: SegmentSource> MemPool<S> {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    pub fn use_on_oom(&self) -> bool {
        self.use_on_oom
    }

    pub fn allocator(&self) -> &CachingAllocator<S> {
        &self.allocator
    }

    pub fn usage(&self) -> PoolUsage {
        PoolUsage::of(&self.allocator)
    }
}

impl PoolUsage {
    /// An allocator's figures (settles its deferred statistics).
    pub fn of<S: SegmentSource>(allocator: &CachingAllocator<S>) -> PoolUsage {
        PoolUsage::from_stats(&allocator.stats(), allocator.free_block_count())
    }

    /// The figures of a pool's statistics (a driver pool's free blocks: unknown, 0).
    pub fn from_stats(stats: &gpurt_memory_stats_t, free_blocks: u64) -> PoolUsage {
        let (used, total) = (stats.allocated_bytes.all.current as u64, stats.reserved_bytes.all.current as u64);
        PoolUsage { used, free: total.saturating_sub(used), total, free_blocks }
    }
}

/// The live pools of one kind of source, and the totals of the destroyed ones.
pub struct MemPools<S: SegmentSource> {
    /// Read without a lock by every pointer-only free that the device pools miss.
    live: ArcSwap<Vec<Arc<MemPool<S>>>>,
    /// Destroyed pools' statistics; held while `live` is replaced.
    update: Mutex<RetiredStats>,
    count: AtomicUsize,
    next_id: AtomicU64,
}

impl<S: SegmentSource> Default for MemPools<S> {
    fn default() -> Self {
        MemPools { live: ArcSwap::default(), update: Mutex::default(), count: AtomicUsize::new(0), next_id: AtomicU64::new(1) }
    }
}

impl<S: SegmentSource> MemPools<S> {
    /// A new pool on `device` over `source`, its reserved bytes capped at `limit`
    /// (0: no cap beyond the source's memory).
    pub fn create(&self, device: i32, source: S, config: AllocConfig, limit: u64) -> Arc<MemPool<S>> {
        let use_on_oom = config.use_on_oom;
        let allocator = CachingAllocator::new(source, config);
        if limit > 0 {
            allocator.set_limit(limit);
        }
        let pool = Arc::new(MemPool { id: self.next_id.fetch_add(1, Ordering::Relaxed), device, allocator, pushed: AtomicUsize::new(0), use_on_oom });
        let _guard = lock(&self.update);
        let mut live = Vec::clone(&self.live.load());
        live.push(pool.clone());
        self.publish(live);
        pool
    }

    fn publish(&self, live: Vec<Arc<MemPool<S>>>) {
        self.count.store(live.len(), Ordering::Release);
        self.live.store(Arc::new(live));
    }

    /// Whether no pool is live: one atomic load, for the paths that would ask.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    pub fn get(&self, id: u64) -> Option<Arc<MemPool<S>>> {
        self.live.load().iter().find(|p| p.id == id).cloned()
    }

    /// Destroys pool `id`: refused, changing nothing, while it has live allocations,
    /// a thread has it pushed or its owner put it to sleep (one a share group keeps
    /// asleep goes without a wake: `CachingAllocator::release_asleep`). Its cache goes
    /// back to the source first (waiting for deferred frees), and its totals stay part
    /// of its device's statistics.
    pub fn destroy(&self, id: u64) -> Result<()> {
        let mut retired = lock(&self.update);
        let live = self.live.load_full();
        let pool = live.iter().find(|p| p.id == id).ok_or_else(|| Error::invalid_handle(format!("memory pool {id} was destroyed")))?;
        let pushed = pool.pushed.load(Ordering::Acquire);
        if pushed > 0 {
            return Err(Error::invalid_argument(format!("the memory pool is pushed {pushed} time(s) on some thread: pop it first")));
        }
        let graphs = pool.allocator.graph_holds();
        if graphs > 0 {
            return Err(Error::invalid_argument(format!(
                "{graphs} graph(s) or exec(s) captured into the memory pool (gpurt_stream_begin_capture_shared) still replay into its memory: destroy them first"
            )));
        }
        let stats = pool.allocator.stats();
        let blocks = stats.allocation.all.current;
        if blocks > 0 {
            return Err(Error::invalid_argument(format!(
                "the memory pool has {blocks} live allocation(s) ({} bytes): free them first; nothing was freed",
                stats.allocated_bytes.all.current
            )));
        }
        if pool.allocator.refuses_allocations() {
            // One a share group put to sleep gives its addresses and copies back without
            // waking; one its owner put to sleep is refused.
            pool.allocator.release_asleep().map_err(|e| e.context("the memory pool is asleep or falling asleep: not destroyed"))?;
        }
        pool.allocator.empty_cache();
        retired.retire(pool.device, &pool.allocator.stats());
        self.publish(live.iter().filter(|p| p.id != id).cloned().collect());
        Ok(())
    }

    /// `f`'s first answer among the pools whose span may hold `ptr` (`f` gives
    /// `None` for a pool that does not hold it).
    #[inline]
    pub fn find_map<T>(&self, ptr: u64, f: impl Fn(&MemPool<S>) -> Option<T>) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        self.live.load().iter().filter(|p| p.allocator.may_hold(ptr)).find_map(|p| f(p))
    }

    /// The live pools of `device`.
    pub fn on_device(&self, device: i32) -> Vec<Arc<MemPool<S>>> {
        self.live.load().iter().filter(|p| p.device == device).cloned().collect()
    }

    /// Adds the statistics of `device`'s pools, live and destroyed, to `stats`. Current
    /// values and totals are exact; a live pool's peak is added to the current values,
    /// an upper bound of the true peak of the sum.
    pub fn add_stats(&self, device: i32, stats: &mut gpurt_memory_stats_t) {
        lock(&self.update).add_to(device, stats);
        for pool in self.live.load().iter().filter(|p| p.device == device) {
            stats.absorb(&pool.allocator.stats(), &gpurt_memory_stats_t::new());
        }
    }

    /// Resets the peaks (`accumulated`: the totals) of `device`'s pools.
    pub fn reset_stats(&self, device: i32, accumulated: bool) {
        lock(&self.update).reset(device, accumulated);
        self.live.load().iter().filter(|p| p.device == device).for_each(|p| p.allocator.reset_stats(accumulated));
    }

    /// Releases the free cached segments of every pool.
    pub fn empty_cache(&self) {
        self.live.load().iter().for_each(|p| p.allocator.empty_cache());
    }
}

/// A caller's per-allocation choice for a pushed pool (torch's `MemPool` with an
/// allocator that routes): `accepts(size, device, native stream, context)` returns
/// nonzero when the pool should serve; otherwise the entries below it decide.
#[derive(Clone, Copy)]
pub struct Filter {
    pub accepts: unsafe extern "C" fn(usize, libc::c_int, *mut libc::c_void, *mut libc::c_void) -> libc::c_int,
    pub context: usize,
}

impl Filter {
    fn accepts(&self, size: u64, device: i32, stream: u64) -> bool {
        // SAFETY: the caller gave this function for this use, with this context.
        unsafe { (self.accepts)(size as usize, device, stream as *mut libc::c_void, self.context as *mut libc::c_void) != 0 }
    }
}

/// Where a thread's allocations on a device go while an entry is pushed.
pub enum Route<S: SegmentSource> {
    /// The device's default pool (pushed to leave an outer pool for a while).
    Default(i32),
    Pool(Arc<MemPool<S>>),
    /// The pool, for the allocations its filter accepts.
    Filtered(Arc<MemPool<S>>, Filter),
}

impl<S: SegmentSource> Route<S> {
    fn device(&self) -> i32 {
        match self {
            Route::Default(device) => *device,
            Route::Pool(pool) | Route::Filtered(pool, _) => pool.device,
        }
    }

    fn pool(&self) -> Option<&Arc<MemPool<S>>> {
        match self {
            Route::Default(_) => None,
            Route::Pool(pool) | Route::Filtered(pool, _) => Some(pool),
        }
    }
}

/// One thread's pushed pools, the last pushed on top. An allocation on a device goes
/// to the topmost entry for that device; allocations on devices with none go to the
/// default pools, as torch's `use_mem_pool(pool, device)` does.
pub struct PoolStack<S: SegmentSource> {
    routes: Vec<Route<S>>,
    /// Entries on every thread's stack together: while zero, allocations skip routing.
    all_threads: &'static AtomicUsize,
}

impl<S: SegmentSource> PoolStack<S> {
    pub const fn new(all_threads: &'static AtomicUsize) -> Self {
        PoolStack { routes: Vec::new(), all_threads }
    }

    pub fn push(&mut self, route: Route<S>) {
        if let Some(pool) = route.pool() {
            pool.pushed.fetch_add(1, Ordering::AcqRel);
        }
        self.routes.push(route);
        self.all_threads.fetch_add(1, Ordering::Relaxed);
    }

    pub fn pop(&mut self) -> Result<()> {
        let route = self.routes.pop().ok_or_else(|| Error::invalid_argument("no memory pool is pushed on this thread"))?;
        if let Some(pool) = route.pool() {
            pool.pushed.fetch_sub(1, Ordering::AcqRel);
        }
        self.all_threads.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The top entry's pool when it takes every allocation (no filter).
    #[inline]
    pub fn top_plain(&self) -> Option<&Arc<MemPool<S>>> {
        match self.routes.last()? {
            Route::Pool(pool) => Some(pool),
            _ => None,
        }
    }

    /// The pool serving this thread's allocation of `size` bytes on `device` for
    /// `stream`: the topmost entry for the device whose filter, if any, accepts it;
    /// `None` for the default pool.
    #[inline]
    pub fn route(&self, device: i32, size: u64, stream: u64) -> Option<&MemPool<S>> {
        for route in self.routes.iter().rev().filter(|r| r.device() == device) {
            match route {
                Route::Default(_) => return None,
                Route::Pool(pool) => return Some(pool),
                Route::Filtered(pool, filter) if filter.accepts(size, device, stream) => return Some(pool),
                Route::Filtered(..) => {}
            }
        }
        None
    }
}

impl<S: SegmentSource> Drop for PoolStack<S> {
    /// A thread that exits with pools pushed leaves them destroyable.
    fn drop(&mut self) {
        while self.pop().is_ok() {}
    }
}
