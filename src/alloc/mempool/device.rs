//! Pool handles over the driver: what `gpurt_mem_pool_t` names. A handle holds a
//! user pool's id, or a device's default pool (one handle per device, made once), so
//! that a caller can push the default pool back over an outer one.

use std::sync::{Mutex, OnceLock};

use super::{Filter, MemPool, PoolUsage, Route};
use crate::alloc::config::AllocConfig;
use crate::alloc::device::{self as pools, DriverSource, MEM_POOLS};
use crate::alloc::upstream::{AsyncSource, ManagedSource, PoolSource, UserFunctions, UserSource, GPURT_MEM_ATTACH_GLOBAL};
use crate::alloc::stats::gpurt_memory_stats_t;
use crate::boundary::lock;
use crate::device::{self, per_device, PerDeviceOnce};
use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Kind};

static HANDLES: HandleTable<u64> = HandleTable::new(Kind::MemPool);
static DEFAULT_HANDLES: PerDeviceOnce<Handle> = OnceLock::new();

/// Marks a handle's value as a device's default pool (the low bits: the device).
const DEFAULT_POOL: u64 = 1 << 63;

/// What a pool handle names.
enum Named {
    Default(i32),
    Pool(std::sync::Arc<MemPool<PoolSource>>),
}

fn named(handle: Handle) -> Result<Named> {
    let value = HANDLES.get(handle)?;
    if value & DEFAULT_POOL != 0 {
        return Ok(Named::Default((value & !DEFAULT_POOL) as i32));
    }
    MEM_POOLS.get(value).map(Named::Pool).ok_or_else(|| Error::invalid_handle("the memory pool was destroyed"))
}

/// Where a new pool's segments come from.
pub enum Upstream {
    Driver,
    /// `cuMemAllocFromPoolAsync` on the device's current memory pool.
    Async,
    /// `cuMemAllocManaged` with GPURT_MEM_ATTACH_GLOBAL.
    Managed,
    User(UserFunctions),
}

/// A new pool on `ordinal`'s device: `config` in `GPURT_ALLOC_CONF`'s syntax applies
/// to it alone (`None`: the process's configuration as it is now); `limit` caps the
/// bytes it reserves (0: none).
pub fn create(ordinal: i32, config: Option<&str>, limit: u64, upstream: Upstream) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    let config = match config {
        Some(text) => AllocConfig::parse(text)?,
        None => pools::config()?,
    };
    let source: PoolSource = match upstream {
        Upstream::Driver => Box::new(DriverSource::new(d)),
        _ if config.expandable_segments => {
            return Err(Error::invalid_argument("expandable_segments:True needs the driver upstream: the others give whole segments"))
        }
        Upstream::Async => Box::new(AsyncSource::new(d)?),
        Upstream::Managed => Box::new(ManagedSource::new(d, GPURT_MEM_ATTACH_GLOBAL)?),
        Upstream::User(functions) => Box::new(UserSource::new(functions, d, DriverSource::new(d))),
    };
    let pool = MEM_POOLS.create(d, source, config, limit);
    HANDLES.insert(pool.id()).inspect_err(|_| {
        let _ = MEM_POOLS.destroy(pool.id());
    })
}

/// The handle of `ordinal`'s default pool: the same handle at every call.
pub fn default_handle(ordinal: i32) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    let handles = DEFAULT_HANDLES.get_or_init(|| per_device(OnceLock::new));
    let cell = &handles[d as usize];
    if let Some(handle) = cell.get() {
        return Ok(*handle);
    }
    static MAKING: Mutex<()> = Mutex::new(());
    let _making = lock(&MAKING);
    if let Some(handle) = cell.get() {
        return Ok(*handle);
    }
    let handle = HANDLES.insert(DEFAULT_POOL | d as u64)?;
    Ok(*cell.get_or_init(|| handle))
}

/// Destroys a user pool (see `MemPools::destroy`: refused while it is in use).
pub fn destroy(handle: Handle) -> Result<()> {
    match named(handle)? {
        Named::Default(_) => Err(Error::invalid_argument("a device's default memory pool cannot be destroyed")),
        Named::Pool(pool) => {
            MEM_POOLS.destroy(pool.id())?;
            HANDLES.remove(handle).map(drop)
        }
    }
}

/// Allocates from the pool for `native_stream` on `stream_device`, which must be
/// the pool's device.
pub fn malloc(handle: Handle, size: u64, stream_device: i32, native_stream: u64) -> Result<u64> {
    let wrong_device = |pool_device: i32| {
        Error::invalid_argument(format!("the stream is on device {stream_device}, the memory pool on device {pool_device}"))
    };
    match named(handle)? {
        Named::Default(d) if d != stream_device => Err(wrong_device(d)),
        Named::Default(d) => pools::malloc_from_default(d, size, native_stream),
        Named::Pool(pool) if pool.device() != stream_device => Err(wrong_device(pool.device())),
        Named::Pool(pool) => pools::malloc_from(pool.allocator(), size, native_stream),
    }
}

/// Routes this thread's allocations on the pool's device to it until `pop`: all of
/// them, or those `filter` accepts.
pub fn push(handle: Handle, filter: Option<Filter>) -> Result<()> {
    pools::push_route(match (named(handle)?, filter) {
        (Named::Default(_), Some(_)) => return Err(Error::invalid_argument("a filter applies to a pool made with gpurt_mem_pool_create")),
        (Named::Default(d), None) => Route::Default(d),
        (Named::Pool(pool), None) => Route::Pool(pool),
        (Named::Pool(pool), Some(filter)) => Route::Filtered(pool, filter),
    });
    Ok(())
}

pub fn pop() -> Result<()> {
    pools::pop_route()
}

/// The pool's own statistics (a default pool's without the other pools').
pub fn stats(handle: Handle) -> Result<gpurt_memory_stats_t> {
    Ok(match named(handle)? {
        Named::Default(d) => pools::default_pool(d)?.stats(),
        Named::Pool(pool) => pool.allocator().stats(),
    })
}

pub fn usage(handle: Handle) -> Result<PoolUsage> {
    match named(handle)? {
        Named::Default(d) => Ok(match pools::default_pool(d)? {
            pools::DefaultPool::Caching(a) => PoolUsage::of(a),
            pools::DefaultPool::Driver(p) => PoolUsage::from_stats(&p.stats(), 0),
        }),
        Named::Pool(pool) => Ok(pool.usage()),
    }
}

/// Releases the pool's free cached segments (cupy's `free_all_blocks`).
pub fn empty_cache(handle: Handle) -> Result<()> {
    match named(handle)? {
        Named::Default(d) => pools::default_pool(d)?.empty_cache(),
        Named::Pool(pool) => pool.allocator().empty_cache(),
    }
    Ok(())
}

pub fn device_of(handle: Handle) -> Result<i32> {
    Ok(match named(handle)? {
        Named::Default(d) => d,
        Named::Pool(pool) => pool.device(),
    })
}
