//! Sleep and wake of the pools a handle names, and of everything gpurt holds on a
//! device (`gpurt_device_sleep`): the default pool (and with it the math libraries'
//! workspaces, which come from it), every pool made with `gpurt_mem_pool_create` and
//! every graph pool of the device. A device sleep remembers the pools it put to
//! sleep, and its wake wakes those: a pool the caller put to sleep before keeps its
//! own sleep, and one the caller woke meanwhile is left as it is. Modules above the
//! allocator add what they hold on a device (growable buffers) with
//! `add_device_sleepers`.

use std::sync::{Arc, Mutex};

use super::device::{named, Named};
use super::MemPool;
use crate::alloc::caching::CachingAllocator;
use crate::alloc::capture::{self, CaptureSource};
use crate::alloc::device::{self as pools, MEM_POOLS};
use crate::alloc::pool::SegmentSource;
use crate::alloc::upstream::{DriverSource, PoolSource};
use crate::boundary::lock;
use crate::device;
use crate::error::{Error, Result, Status};
use crate::handle::Handle;

/// Sleep and wake over an allocator of any source, or anything else a device sleep
/// takes (`add_device_sleepers`).
pub(crate) trait Sleeper: Send + Sync {
    fn holds(&self, addr: u64) -> bool;
    fn sleep(&self, offload: bool, admit: &dyn Fn() -> Result<()>) -> Result<()>;
    fn wake(&self) -> Result<()>;
    fn sleep_mode(&self) -> Option<bool>;
    fn refuses_allocations(&self) -> bool;
    /// Counts a use of its memory, waking it where another process's request put it to
    /// sleep (`CachingAllocator::touch`); what no request puts to sleep has nothing to do.
    fn touch(&self) -> Result<()> {
        Ok(())
    }
    /// Makes the host memory the next offload needs now; the bytes made.
    fn prepare_sleep(&self) -> Result<u64> {
        Ok(0)
    }
}

impl<S: SegmentSource> Sleeper for CachingAllocator<S> {
    fn holds(&self, addr: u64) -> bool {
        CachingAllocator::holds(self, addr)
    }
    fn sleep(&self, offload: bool, admit: &dyn Fn() -> Result<()>) -> Result<()> {
        CachingAllocator::sleep(self, offload, admit)
    }
    fn wake(&self) -> Result<()> {
        CachingAllocator::wake(self)
    }
    fn sleep_mode(&self) -> Option<bool> {
        CachingAllocator::sleep_mode(self)
    }
    fn refuses_allocations(&self) -> bool {
        CachingAllocator::refuses_allocations(self)
    }
    fn touch(&self) -> Result<()> {
        CachingAllocator::touch(self)
    }
    fn prepare_sleep(&self) -> Result<u64> {
        CachingAllocator::prepare_sleep(self)
    }
}

/// A pool that can sleep, held for as long as a device sleep keeps it asleep.
enum Sleeping {
    Default(&'static CachingAllocator<DriverSource>),
    Pool(Arc<MemPool<PoolSource>>),
    /// A graph pool and its id.
    Graph(Arc<CachingAllocator<CaptureSource>>, u64),
    /// What a module above the allocator holds, and its name.
    Other(Arc<dyn Sleeper>, String),
}

/// Makes what modules above the allocator hold on a device, each with its name.
pub(crate) type DeviceSleepers = fn(i32) -> Vec<(Arc<dyn Sleeper>, String)>;

static OTHER_SLEEPERS: Mutex<Vec<DeviceSleepers>> = Mutex::new(Vec::new());

/// From now on a device sleep also puts to sleep what `sleepers` names on the device,
/// after its pools (once per function).
pub(crate) fn add_device_sleepers(sleepers: DeviceSleepers) {
    let mut all = lock(&OTHER_SLEEPERS);
    if !all.iter().any(|&f| f as usize == sleepers as usize) {
        all.push(sleepers);
    }
}

impl Sleeping {
    fn sleeper(&self) -> &dyn Sleeper {
        match self {
            Sleeping::Default(a) => *a,
            Sleeping::Pool(p) => p.allocator(),
            Sleeping::Graph(a, _) => &**a,
            Sleeping::Other(s, _) => &**s,
        }
    }

    /// What an error says the pool is.
    fn name(&self) -> String {
        match self {
            Sleeping::Default(_) => "the default pool".into(),
            Sleeping::Pool(p) => format!("memory pool {}", p.id()),
            Sleeping::Graph(_, id) => format!("graph pool {id}"),
            Sleeping::Other(_, name) => name.clone(),
        }
    }
}

/// The pool a handle names, if it can sleep.
fn sleeping(handle: Handle) -> Result<Sleeping> {
    match named(handle)? {
        Named::Default(d) => default_sleeping(d),
        Named::Pool(pool) => Ok(Sleeping::Pool(pool)),
        Named::Graph(pool, id) => Ok(Sleeping::Graph(pool, id)),
    }
}

fn default_sleeping(device: i32) -> Result<Sleeping> {
    match pools::default_pool(device)? {
        pools::DefaultPool::Caching(a) => Ok(Sleeping::Default(a)),
        pools::DefaultPool::Driver(_) => Err(Error::not_supported("the driver's pool (backend:cudaMallocAsync) cannot sleep: its memory is the driver's")),
    }
}

/// Puts `pool` to sleep, unless it holds a block exported to other processes, whose
/// memory they map. The export check comes after the pool refuses new exports
/// (`ipc::producer::export` checks under the same lock), so that an export and a
/// sleep at once cannot both succeed.
fn sleep_pool(pool: &dyn Sleeper, offload: bool) -> Result<()> {
    pool.sleep(offload, &|| no_exports(pool))
}

/// Refuses the sleep of a pool that holds a block exported to other processes.
pub(super) fn no_exports(pool: &dyn Sleeper) -> Result<()> {
    match pools::exported_block(&|addr| pool.holds(addr)) {
        Some(ptr) => Err(Error::not_supported(format!(
            "the block at {ptr:#x} is exported to other processes (gpurt_ipc_mem_handle), which map its memory: free it and let them close it before the pool sleeps"
        ))),
        None => Ok(()),
    }
}

/// `gpurt_mem_pool_sleep`: refused while a capture runs (the sleep waits for the device).
pub fn sleep(handle: Handle, offload: bool) -> Result<()> {
    let pool = sleeping(handle)?;
    capture::outside_captures("a sleep", || sleep_pool(pool.sleeper(), offload))
}

/// `gpurt_mem_pool_wake`: a wake the device refuses asks a share group, if there is
/// one (`CachingAllocator::wake_asking`).
pub fn wake(handle: Handle) -> Result<()> {
    let pool = sleeping(handle)?;
    capture::outside_captures("a wake", || match &pool {
        Sleeping::Default(a) => a.wake_asking(),
        Sleeping::Pool(p) => p.allocator().wake_asking(),
        other => other.sleeper().wake(),
    })
}

/// `gpurt_mem_pool_sleep_prepare`: the host memory the pool's next offload needs, made now.
pub fn prepare(handle: Handle) -> Result<u64> {
    sleeping(handle)?.sleeper().prepare_sleep()
}

/// `gpurt_device_sleep_prepare`: `prepare` of every pool of the device that is awake.
pub fn prepare_device(ordinal: i32) -> Result<u64> {
    let d = device::resolve(ordinal)?;
    let mut made = 0;
    for pool in device_pools(d)? {
        if pool.sleeper().sleep_mode().is_none() {
            made += pool.sleeper().prepare_sleep().map_err(|e| e.context(&format!("preparing {}", pool.name())))?;
        }
    }
    Ok(made)
}

/// `gpurt_mem_pool_touch` (a pool that cannot sleep has nothing to wake).
pub fn touch(handle: Handle) -> Result<()> {
    match sleeping(handle) {
        Ok(pool) => touch_sleeper(pool.sleeper()),
        Err(e) if e.status == Status::GPURT_ERROR_NOT_SUPPORTED => Ok(()),
        Err(e) => Err(e),
    }
}

/// A touch of `pool`: one that sleeps wakes as gpurt_mem_pool_wake wakes it, outside
/// captures.
pub(super) fn touch_sleeper(pool: &dyn Sleeper) -> Result<()> {
    if pool.refuses_allocations() {
        capture::outside_captures("a wake", || pool.touch())
    } else {
        pool.touch()
    }
}

/// Whether the pool sleeps (a pool that cannot sleep never does).
pub fn is_asleep(handle: Handle) -> Result<bool> {
    match sleeping(handle) {
        Ok(pool) => Ok(pool.sleeper().sleep_mode().is_some()),
        Err(e) if e.status == Status::GPURT_ERROR_NOT_SUPPORTED => Ok(false),
        Err(e) => Err(e),
    }
}

/// A device's sleep: the pools it put to sleep, in the order it did, and the stack
/// size it gave back local memory from (restored by the wake).
struct DeviceSleep {
    device: i32,
    pools: Vec<Sleeping>,
    stack: Option<usize>,
}

static DEVICE_SLEEPS: Mutex<Vec<DeviceSleep>> = Mutex::new(Vec::new());

/// Every pool of `device` that can sleep: the default pool, the pools users made, the
/// graph pools; then what modules above hold there.
fn device_pools(device: i32) -> Result<Vec<Sleeping>> {
    let mut all = vec![default_sleeping(device)?];
    all.extend(MEM_POOLS.on_device(device).into_iter().map(Sleeping::Pool));
    all.extend(capture::private_pools(device).into_iter().map(|(id, a)| Sleeping::Graph(a, id)));
    let others: Vec<DeviceSleepers> = lock(&OTHER_SLEEPERS).clone();
    all.extend(others.into_iter().flat_map(|f| f(device)).map(|(s, name)| Sleeping::Other(s, name)));
    Ok(all)
}

/// `gpurt_device_sleep`: every pool of the device that is awake, in `offload`'s mode.
/// A pool's failure wakes the pools this call put to sleep before it, so that the
/// device is as it was.
pub fn sleep_device(ordinal: i32, offload: bool) -> Result<()> {
    let d = device::resolve(ordinal)?;
    let mut sleeps = lock(&DEVICE_SLEEPS);
    if sleeps.iter().any(|s| s.device == d) {
        return Err(Error::invalid_argument(format!("device {d} is asleep already (gpurt_device_sleep): wake it first")));
    }
    let all = device_pools(d)?;
    capture::outside_captures("a device sleep", || {
        let mut slept: Vec<Sleeping> = Vec::new();
        for pool in all {
            // A pool the caller put to sleep keeps its own sleep.
            if pool.sleeper().refuses_allocations() {
                continue;
            }
            if let Err(e) = sleep_pool(pool.sleeper(), offload) {
                let woken = wake_pools(&mut slept);
                let state = match woken {
                    Ok(()) => "every pool it had put to sleep is awake again".to_string(),
                    Err(again) => format!("waking the pools it had put to sleep failed too ({again}): gpurt_device_wake retries"),
                };
                if !slept.is_empty() {
                    sleeps.push(DeviceSleep { device: d, pools: slept, stack: None });
                }
                return Err(e.context(&format!("device {d}'s sleep failed at {}; {state}", pool.name())));
            }
            slept.push(pool);
        }
        sleeps.push(DeviceSleep { device: d, pools: slept, stack: give_back_local_memory(d) });
        Ok(())
    })
}

/// The local memory launches grew, given back with the pools: the stack size to
/// restore at the wake. A driver that refuses leaves the reservation as it was, and
/// the sleep stands.
fn give_back_local_memory(d: i32) -> Option<usize> {
    device::local_memory::shrink(d).unwrap_or_else(|e| {
        crate::log::log(crate::log::Level::Warn, &format!("device {d}'s sleep keeps its local memory: {e}"));
        None
    })
}

/// Wakes `pools` that still sleep, the last put to sleep first; each woken leaves the
/// list, so that a failure leaves just the pools still asleep, for a retry.
fn wake_pools(pools: &mut Vec<Sleeping>) -> Result<()> {
    while let Some(pool) = pools.last() {
        if pool.sleeper().sleep_mode().is_some() {
            pool.sleeper().wake().map_err(|e| e.context(&format!("waking {}", pool.name())))?;
        }
        if let Some(Sleeping::Graph(_, id)) = pools.pop() {
            capture::collect_woken(id);
        }
    }
    Ok(())
}

/// `gpurt_device_wake`: wakes what `sleep_device` put to sleep. A failure leaves the
/// pools not yet woken asleep and the device asleep, for a retry.
pub fn wake_device(ordinal: i32) -> Result<()> {
    let d = device::resolve(ordinal)?;
    let mut sleeps = lock(&DEVICE_SLEEPS);
    let at = sleeps
        .iter()
        .position(|s| s.device == d)
        .ok_or_else(|| Error::invalid_argument(format!("device {d} is not asleep (gpurt_device_sleep)")))?;
    let sleep = &mut sleeps[at];
    capture::outside_captures("a device wake", || wake_pools(&mut sleep.pools))?;
    if let Some(stack) = sleep.stack {
        device::local_memory::restore(d, stack).map_err(|e| e.context(&format!("restoring device {d}'s stack size of {stack} bytes")))?;
    }
    sleeps.swap_remove(at);
    Ok(())
}

/// Whether `gpurt_device_sleep` put the device to sleep and no wake has woken it yet.
pub fn device_is_asleep(ordinal: i32) -> Result<bool> {
    let d = device::resolve(ordinal)?;
    Ok(lock(&DEVICE_SLEEPS).iter().any(|s| s.device == d))
}
