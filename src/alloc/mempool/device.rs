//! Pool handles over the driver: what `gpurt_mem_pool_t` names. A handle holds a
//! user pool's id, a device's default pool (one handle per device, made once, so
//! that a caller can push the default pool back over an outer one), or a graph
//! pool's id (`alloc::capture`: the private pool captures share).

use std::sync::{Arc, Mutex, OnceLock};

use super::{Filter, MemPool, PoolUsage, Route};
use crate::alloc::caching::CachingAllocator;
use crate::alloc::pool::{KeepMapped, SegmentSource};
use crate::alloc::capture::CaptureSource;
use crate::alloc::config::AllocConfig;
use crate::alloc::capture;
use crate::alloc::device::{self as pools, MEM_POOLS};
use crate::alloc::upstream::{AsyncSource, DriverSource, ManagedSource, PoolSource, UserFunctions, UserSource, GPURT_MEM_ATTACH_GLOBAL};
use crate::alloc::stats::gpurt_memory_stats_t;
use crate::device::{self, PerDeviceOnce};
use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Kind};

static HANDLES: HandleTable<u64> = HandleTable::new(Kind::MemPool);
static DEFAULT_HANDLES: PerDeviceOnce<Handle> = OnceLock::new();

/// Marks a handle's value as a device's default pool (the low bits: the device).
const DEFAULT_POOL: u64 = 1 << 63;
/// Marks a handle's value as a graph pool (the low bits: its id).
const GRAPH_POOL: u64 = 1 << 62;

/// What a pool handle names.
pub(super) enum Named {
    Default(i32),
    Pool(Arc<MemPool<PoolSource>>),
    Graph(Arc<CachingAllocator<CaptureSource>>, u64),
}

pub(super) fn named(handle: Handle) -> Result<Named> {
    let value = HANDLES.get(handle)?;
    if value & DEFAULT_POOL != 0 {
        return Ok(Named::Default((value & !DEFAULT_POOL) as i32));
    }
    if value & GRAPH_POOL != 0 {
        let id = value & !GRAPH_POOL;
        // The handle holds a reference: the pool exists while the handle does.
        let pool = capture::pool(id).ok_or_else(|| Error::new(crate::error::Status::GPURT_ERROR_INTERNAL, format!("graph pool {id} is gone under its handle")))?;
        return Ok(Named::Graph(pool, id));
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

/// A new pool on `ordinal`'s device: the process's configuration as it is now, with
/// the options of `config` (`GPURT_ALLOC_CONF`'s syntax) over it for this pool alone;
/// `limit` caps the bytes it reserves (0: none).
pub fn create(ordinal: i32, config: Option<&str>, limit: u64, upstream: Upstream) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    let process = pools::config()?;
    pools::join_configured_group(d, &process)?;
    let process_share = (process.share.clone(), process.share_offer, process.share_idle_ms, process.share_headroom_mib);
    let (config, asked_expandable) = match config {
        // Asked by the pool's own text, whatever the defaults are.
        Some(text) => (process.with(text)?, AllocConfig::segmented().with(text)?.expandable_segments),
        None => (process, false),
    };
    if (config.share.clone(), config.share_offer, config.share_idle_ms, config.share_headroom_mib) != process_share {
        return Err(Error::invalid_argument(
            "`share`, `share_offer`, `share_idle_ms` and `share_headroom_mib` are the process's options (GPURT_ALLOC_CONF), not a pool's",
        ));
    }
    let source: PoolSource = match upstream {
        Upstream::Driver => Box::new(DriverSource::new(d)),
        Upstream::Async => Box::new(AsyncSource::new(d)?),
        Upstream::Managed => Box::new(ManagedSource::new(d, GPURT_MEM_ATTACH_GLOBAL)?),
        Upstream::User(functions) => Box::new(UserSource::new(functions, d, DriverSource::new(d))),
    };
    // Only the driver upstream maps memory, on a device with virtual memory management:
    // a pool over another source takes whole segments under the process's
    // configuration (the allocator falls back), and refuses its own request.
    if asked_expandable && !source.can_map() {
        return Err(Error::invalid_argument(
            "expandable_segments:True needs the driver upstream on a device that maps memory (virtual memory management): this pool's gives whole segments",
        ));
    }
    let pool = MEM_POOLS.create(d, source, config, limit);
    HANDLES.insert(pool.id()).inspect_err(|_| {
        let _ = MEM_POOLS.destroy(pool.id());
    })
}

/// A graph pool on `ordinal`'s device (`gpurt_graph_pool_create`), holding one
/// reference to it until `destroy`.
pub fn create_graph_pool(ordinal: i32) -> Result<Handle> {
    let id = capture::new_pool(device::resolve(ordinal)?, pools::config()?);
    HANDLES.insert(GRAPH_POOL | id).inspect_err(|_| capture::release_pool(id))
}

/// The graph pool a handle names, for a capture (`gpurt_stream_begin_capture`).
pub fn graph_pool_id(handle: Handle) -> Result<u64> {
    match named(handle)? {
        Named::Graph(_, id) => Ok(id),
        _ => Err(Error::invalid_argument("a capture allocates from a pool made with gpurt_graph_pool_create, not from this memory pool")),
    }
}

/// What a shared capture (`gpurt_stream_begin_capture_shared`) on a stream of
/// `stream_device` needs of the pool a handle names: its allocation, and the claim that
/// keeps its free memory mapped while the graph lives.
pub fn shared_capture_target(handle: Handle, stream_device: i32) -> Result<(capture::SharedMalloc, KeepMapped)> {
    let named = named(handle)?;
    if crate::alloc::driver_pool::is_active() {
        // `alloc::capture` hands every allocation on a capturing stream to the driver's pool then.
        return Err(Error::not_supported(
            "under backend:cudaMallocAsync a capture's gpurt allocations are the driver's memory nodes: use gpurt_stream_begin_capture",
        ));
    }
    match named {
        Named::Default(d) if d != stream_device => Err(wrong_device(stream_device, d)),
        Named::Default(d) => {
            let a = pools::allocator(d)?;
            Ok((Arc::new(move |size, key| a.malloc(size, key)), a.keep_mapped()))
        }
        Named::Pool(pool) if pool.device() != stream_device => Err(wrong_device(stream_device, pool.device())),
        Named::Pool(pool) => {
            let keep = pool.allocator().keep_mapped();
            Ok((Arc::new(move |size, key| pool.allocator().malloc(size, key)), keep))
        }
        Named::Graph(..) => Err(Error::invalid_argument(
            "a graph pool keeps its memory to its captures: pass it to gpurt_stream_begin_capture; a shared capture takes a pool made with gpurt_mem_pool_create or a default pool",
        )),
    }
}

/// Drops a graph pool handle's reference (`gpurt_graph_pool_destroy`).
pub fn destroy_graph_pool(handle: Handle) -> Result<()> {
    graph_pool_id(handle)?;
    destroy(handle)
}

/// The handle of `ordinal`'s default pool: the same handle at every call.
pub fn default_handle(ordinal: i32) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    static MAKING: Mutex<()> = Mutex::new(());
    device::per_device_try_init(&DEFAULT_HANDLES, &MAKING, d, || HANDLES.insert(DEFAULT_POOL | d as u64)).copied()
}

/// Destroys a user pool (see `MemPools::destroy`: refused while it is in use).
pub fn destroy(handle: Handle) -> Result<()> {
    match named(handle)? {
        Named::Default(_) => Err(Error::invalid_argument("a device's default memory pool cannot be destroyed")),
        Named::Pool(pool) => {
            MEM_POOLS.destroy(pool.id())?;
            HANDLES.remove(handle).map(drop)
        }
        // Graphs captured into it keep it; it goes with the last of them.
        Named::Graph(_, id) => {
            HANDLES.remove(handle)?;
            capture::release_pool(id);
            Ok(())
        }
    }
}

/// Allocates from the pool for `native_stream` on `stream_device`, which must be
/// the pool's device.
pub fn malloc(handle: Handle, size: u64, stream_device: i32, native_stream: u64) -> Result<u64> {
    match named(handle)? {
        Named::Default(d) if d != stream_device => Err(wrong_device(stream_device, d)),
        Named::Default(d) => pools::malloc_from_default(d, size, native_stream),
        Named::Pool(pool) if pool.device() != stream_device => Err(wrong_device(stream_device, pool.device())),
        Named::Pool(pool) => pools::malloc_from(stream_device, pool.allocator(), size, native_stream),
        Named::Graph(pool, _) if pool.source().device() != stream_device => Err(wrong_device(stream_device, pool.source().device())),
        Named::Graph(pool, _) => pools::malloc_from(stream_device, &*pool, size, native_stream),
    }
}

fn wrong_device(stream_device: i32, pool_device: i32) -> Error {
    Error::invalid_argument(format!("the stream is on device {stream_device}, the memory pool on device {pool_device}"))
}

/// Routes this thread's allocations on the pool's device to it until `pop`: all of
/// them, or those `filter` accepts.
pub fn push(handle: Handle, filter: Option<Filter>) -> Result<()> {
    pools::push_route(match (named(handle)?, filter) {
        (Named::Default(_), Some(_)) => return Err(Error::invalid_argument("a filter applies to a pool made with gpurt_mem_pool_create")),
        (Named::Default(d), None) => Route::Default(d),
        (Named::Pool(pool), None) => Route::Pool(pool),
        (Named::Pool(pool), Some(filter)) => Route::Filtered(pool, filter),
        (Named::Graph(..), _) => {
            return Err(Error::invalid_argument("a graph pool serves captures (gpurt_stream_begin_capture): push a pool made with gpurt_mem_pool_create"))
        }
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
        Named::Graph(pool, _) => pool.stats(),
    })
}

pub fn usage(handle: Handle) -> Result<PoolUsage> {
    match named(handle)? {
        Named::Default(d) => Ok(match pools::default_pool(d)? {
            pools::DefaultPool::Caching(a) => PoolUsage::of(a),
            pools::DefaultPool::Driver(p) => PoolUsage::from_stats(&p.stats(), 0),
        }),
        Named::Pool(pool) => Ok(pool.usage()),
        Named::Graph(pool, _) => Ok(PoolUsage::of(&*pool)),
    }
}

/// Releases the pool's free cached segments (cupy's `free_all_blocks`).
pub fn empty_cache(handle: Handle) -> Result<()> {
    match named(handle)? {
        Named::Default(d) => pools::default_pool(d)?.empty_cache(),
        Named::Pool(pool) => pool.allocator().empty_cache(),
        Named::Graph(pool, _) => pool.empty_cache(),
    }
    Ok(())
}

pub fn device_of(handle: Handle) -> Result<i32> {
    Ok(match named(handle)? {
        Named::Default(d) => d,
        Named::Pool(pool) => pool.device(),
        Named::Graph(pool, _) => pool.source().device(),
    })
}
