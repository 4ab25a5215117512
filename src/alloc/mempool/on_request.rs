//! Pools another process may put to sleep (a share group's request, `crate::share`):
//! a device's default pool and the pools made with `gpurt_mem_pool_create` on it.
//! Graph pools never: a replay allocates nothing, so they would look idle while their
//! graphs use them. A pool is idle while its activity (its count of allocations,
//! frees and touches: `CachingAllocator::activity`) stays the same; the sleep is
//! refused if the pool was used after its owner read that count, or while a capture
//! runs, and the pool's next allocation or touch wakes it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::device::{named, Named};
use super::sleep::{no_exports, touch_sleeper};
use super::MemPool;
use crate::alloc::caching::CachingAllocator;
use crate::alloc::capture;
use crate::alloc::device::{self as pools, MEM_POOLS};
use crate::alloc::pool::SegmentSource;
use crate::alloc::upstream::{DriverSource, PoolSource};
use crate::error::{Error, Result};
use crate::handle::Handle;

/// Set once this process offers a pool asleep to a share group (`offers_sleep`).
static OFFERS_SLEEP: AtomicBool = AtomicBool::new(false);

/// From now on, a share group may put pools of this process to sleep: the math
/// libraries' handles touch their workspaces' pool (`touch_default`). Set when the
/// offer is made, long before a request can come.
pub fn offers_sleep() {
    OFFERS_SLEEP.store(true, Ordering::SeqCst);
}

/// Before work that uses device `device`'s default pool without allocating from it (a
/// math library's handle, whose workspace that pool holds): a touch
/// (`CachingAllocator::touch`) where a share group may put the pool to sleep; else
/// nothing but a load.
#[inline]
pub fn touch_default(device: i32) -> Result<()> {
    if !OFFERS_SLEEP.load(Ordering::Relaxed) {
        return Ok(());
    }
    touch_made_default(device)
}

#[cold]
fn touch_made_default(device: i32) -> Result<()> {
    match pools::made_allocator(device) {
        Some(a) => touch_sleeper(a),
        None => Ok(()),
    }
}

/// A pool another process may put to sleep.
pub enum Reclaimable {
    Default(&'static CachingAllocator<DriverSource>),
    Pool(Arc<MemPool<PoolSource>>),
}

/// `device`'s default pool (if it was made: listing makes none) and its users' pools.
pub fn reclaimable(device: i32) -> Vec<Reclaimable> {
    let default = pools::made_allocator(device).map(Reclaimable::Default);
    default.into_iter().chain(MEM_POOLS.on_device(device).into_iter().map(Reclaimable::Pool)).collect()
}

/// The pool a handle names and its device; refused for a graph pool.
pub fn of_handle(handle: Handle) -> Result<(i32, Reclaimable)> {
    match named(handle)? {
        Named::Default(d) => Ok((d, Reclaimable::Default(pools::allocator(d)?))),
        Named::Pool(pool) => Ok((pool.device(), Reclaimable::Pool(pool))),
        Named::Graph(..) => Err(Error::invalid_argument("a graph pool is never given to other processes: its graphs use it without allocating")),
    }
}

/// Empties the device caches of `device`'s pools that `offered` picks, their host
/// copies kept (captures gpurt did not begin settled first, as `gpurt_empty_cache`
/// does); the reserved bytes that went back.
pub fn empty_device_caches(device: i32, offered: impl Fn(&Reclaimable) -> bool) -> u64 {
    capture::foreign::settle(capture::StreamWaits::Any);
    reclaimable(device).iter().filter(|pool| offered(pool)).map(Reclaimable::empty_device_cache).sum()
}

/// Puts `a` to sleep unless its activity moved from `seen`; the bytes given back.
fn sleep<S: SegmentSource>(a: &CachingAllocator<S>, offload: bool, seen: u64) -> Result<u64> {
    let unused = || {
        no_exports(a)?;
        if a.activity() == seen {
            Ok(())
        } else {
            Err(Error::invalid_argument("the pool was used since it was found idle"))
        }
    };
    capture::outside_captures_now("a sleep another process asked for", || a.sleep_on_request(offload, unused))?;
    Ok(a.stats().asleep_bytes.max(0) as u64)
}

impl Reclaimable {
    /// The pool's allocator id: the same pool keeps it for its lifetime.
    pub fn id(&self) -> u64 {
        match self {
            Reclaimable::Default(a) => a.id(),
            Reclaimable::Pool(p) => p.allocator().id(),
        }
    }

    /// What changes with each allocation, free and touch of the pool.
    pub fn activity(&self) -> u64 {
        match self {
            Reclaimable::Default(a) => a.activity(),
            Reclaimable::Pool(p) => p.allocator().activity(),
        }
    }

    /// Releases the pool's wholly free cached device memory (its host copy kept for a
    /// sleep stays); the reserved bytes that went back.
    pub fn empty_device_cache(&self) -> u64 {
        fn release<S: SegmentSource>(a: &CachingAllocator<S>) -> u64 {
            let reserved = || a.stats().reserved_bytes.all.current.max(0) as u64;
            let before = reserved();
            a.empty_device_cache();
            before.saturating_sub(reserved())
        }
        match self {
            Reclaimable::Default(a) => release(*a),
            Reclaimable::Pool(p) => release(p.allocator()),
        }
    }

    pub fn is_asleep(&self) -> bool {
        match self {
            Reclaimable::Default(a) => a.sleep_mode().is_some(),
            Reclaimable::Pool(p) => p.allocator().sleep_mode().is_some(),
        }
    }

    /// Puts the pool to sleep for another process, unless it was used since its
    /// activity read `seen`: its next allocation wakes it. The bytes given back.
    pub fn sleep_on_request(&self, offload: bool, seen: u64) -> Result<u64> {
        match self {
            Reclaimable::Default(a) => sleep(*a, offload, seen),
            Reclaimable::Pool(p) => sleep(p.allocator(), offload, seen),
        }
    }
}
