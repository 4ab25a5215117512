//! The device allocator: one caching allocator per device over driver segments
//! (`cuMemAlloc`), with stream-ordered deferred frees on pooled events.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use once_cell::sync::Lazy;


use super::caching::{not_live, CachingAllocator};
use super::capture::CaptureRoute;
use super::config::{AllocConfig, Backend};
use super::driver_pool;
use super::mempool::{MemPool, MemPools, PoolStack, Route};
use super::upstream::{DriverSource, PoolSource};
use super::pool::{BlockPlace, SegmentSource};
use super::stats::gpurt_memory_stats_t;
use crate::boundary::lock;
use crate::device::{self, per_device};
use crate::error::{Error, Result};
use crate::sanitizer;
use crate::stream::key::{sanitizer_ref, stream_key};

static CONFIG: Mutex<Option<AllocConfig>> = Mutex::new(None);
static ALLOCATORS: device::PerDeviceOnce<CachingAllocator<DriverSource>> = OnceLock::new();

/// The configuration: set by `set_config`, else read from `GPURT_ALLOC_CONF` once.
/// A malformed environment string fails every allocation with its message.
pub(crate) fn config() -> Result<AllocConfig> {
    let mut config = lock(&CONFIG);
    if let Some(c) = &*config {
        return Ok(c.clone());
    }
    let parsed = AllocConfig::parse(&std::env::var("GPURT_ALLOC_CONF").unwrap_or_default())?;
    *config = Some(parsed.clone());
    Ok(parsed)
}

/// Replaces the configuration for all devices (validated first: on error nothing changes).
pub fn set_config(text: &str) -> Result<()> {
    let parsed = AllocConfig::parse(text)?;
    if let Some(chosen) = BACKEND.get().filter(|b| **b != parsed.backend) {
        return Err(Error::invalid_argument(format!(
            "the allocator backend is chosen once, when the allocator is first used (it is {}): \
             set backend:{} in GPURT_ALLOC_CONF, or with gpurt_alloc_set_config before the first allocation",
            chosen.name(),
            parsed.backend.name()
        )));
    }
    *lock(&CONFIG) = Some(parsed.clone());
    for allocator in created() {
        allocator.set_config(parsed.clone());
    }
    Ok(())
}

#[inline(always)]
pub(crate) fn allocator(ordinal: i32) -> Result<&'static CachingAllocator<DriverSource>> {
    // An allocator exists only for an ordinal that resolved before.
    if let Some(a) = made_allocator(ordinal) {
        return Ok(a);
    }
    let d = device::resolve(ordinal)?;
    let all = ALLOCATORS.get_or_init(|| per_device(OnceLock::new));
    let cell = &all[d as usize];
    if let Some(a) = cell.get() {
        return Ok(a);
    }
    let config = config()?;
    join_configured_group(d, &config)?;
    let backend = *BACKEND.get_or_init(|| config.backend);
    if backend == Backend::CudaMallocAsync && !driver_pool::is_active() {
        driver_pool::for_device(d)?;
        driver_pool::activate();
        LOOK_BEFORE_FREE.fetch_add(1, Ordering::Relaxed);
    }
    Ok(cell.get_or_init(|| CachingAllocator::new(DriverSource::new(d), config)))
}

/// Joins a share group with the configuration's offer: `crate::share`'s join,
/// installed when the library loads (`lib.rs`), so that this lower module calls it
/// without depending on it.
pub type ShareJoin = fn(i32, &str, &AllocConfig) -> Result<()>;
static SHARE_JOIN: OnceLock<ShareJoin> = OnceLock::new();
static SHARE_JOINED: device::PerDeviceOnce<()> = OnceLock::new();
static SHARE_JOINING: Mutex<()> = Mutex::new(());

/// Installs how a device joins the group `share:NAME` names.
pub fn set_share_join(join: ShareJoin) {
    let _ = SHARE_JOIN.set(join);
}

/// `share:NAME`: device `d` joins the group once, before its default pool or a pool of
/// gpurt_mem_pool_create is made; a failed join fails that call (nothing made) and is
/// tried again by the next.
pub(crate) fn join_configured_group(d: i32, config: &AllocConfig) -> Result<()> {
    match &config.share {
        Some(group) => join_share_group(d, group, config),
        None => Ok(()),
    }
}

#[cold]
fn join_share_group(d: i32, group: &str, config: &AllocConfig) -> Result<()> {
    let join = SHARE_JOIN.get().ok_or_else(|| Error::not_supported("GPURT_ALLOC_CONF share: this build of gpurt has no share groups"))?;
    device::per_device_try_init(&SHARE_JOINED, &SHARE_JOINING, d, || {
        join(d, group, config).map_err(|e| e.context(&format!("GPURT_ALLOC_CONF share:{group}: device {d} could not join")))
    })
    .map(drop)
}

/// The backend of every device's default pool, chosen at the allocator's first use.
static BACKEND: OnceLock<Backend> = OnceLock::new();

/// The backend's name, choosing it now if nothing has.
pub fn backend() -> Result<Backend> {
    if let Some(backend) = BACKEND.get() {
        return Ok(*backend);
    }
    let chosen = config()?.backend;
    Ok(*BACKEND.get_or_init(|| chosen))
}

/// What a device's default pool is: gpurt's caching allocator, or the driver's
/// pool (backend:cudaMallocAsync).
pub(crate) enum DefaultPool {
    Caching(&'static CachingAllocator<DriverSource>),
    Driver(&'static driver_pool::DriverPool),
}

/// The default pool of `ordinal`'s device.
pub(crate) fn default_pool(ordinal: i32) -> Result<DefaultPool> {
    let caching = allocator(ordinal)?;
    Ok(match driver_pool::is_active() {
        true => DefaultPool::Driver(driver_pool::for_device(caching.source().device())?),
        false => DefaultPool::Caching(caching),
    })
}

impl DefaultPool {
    pub(crate) fn stats(&self) -> gpurt_memory_stats_t {
        match self {
            DefaultPool::Caching(a) => a.stats(),
            DefaultPool::Driver(p) => p.stats(),
        }
    }

    pub(crate) fn empty_cache(&self) {
        match self {
            DefaultPool::Caching(a) => a.empty_cache(),
            DefaultPool::Driver(p) => p.empty_cache(),
        }
    }

    /// `empty_cache`, the host copy kept for a sleep (`Pool::empty_device_cache`).
    pub(crate) fn empty_device_cache(&self) {
        match self {
            DefaultPool::Caching(a) => a.empty_device_cache(),
            DefaultPool::Driver(p) => p.empty_cache(),
        }
    }
}

/// Refuses `addr` where it lies in the memory of a pool that sleeps: gpurt's copies,
/// memsets and fills would touch unmapped memory (a fault that ends the context).
/// One load while no pool sleeps.
#[inline]
pub(crate) fn require_awake(addr: u64) -> Result<()> {
    if super::caching::ASLEEP.load(Ordering::Relaxed) == 0 {
        return Ok(());
    }
    let asleep = created().any(|a| a.holds_asleep(addr))
        || MEM_POOLS.find_map(addr, |p| p.allocator().holds_asleep(addr).then_some(())).is_some()
        || super::capture::holds_asleep(addr);
    match asleep {
        true => Err(Error::invalid_argument(format!("{addr:#x} lies in a memory pool that is asleep: wake it (gpurt_mem_pool_wake) before using its memory"))),
        false => Ok(()),
    }
}

/// `ordinal`'s default pool if it was made (a resolved ordinal), without making it.
pub(crate) fn made_allocator(ordinal: i32) -> Option<&'static CachingAllocator<DriverSource>> {
    usize::try_from(ordinal).ok().and_then(|d| ALLOCATORS.get()?.get(d)?.get())
}

fn created() -> impl Iterator<Item = &'static CachingAllocator<DriverSource>> {
    ALLOCATORS.get().into_iter().flat_map(|a| a.iter().filter_map(OnceLock::get))
}

/// Pools users create (`gpurt_mem_pool_create`), over the driver.
pub(crate) static MEM_POOLS: Lazy<MemPools<PoolSource>> = Lazy::new(MemPools::default);
/// Entries on every thread's pool stack: while zero, an allocation reads no
/// thread-local state to route itself.
static ROUTED: AtomicUsize = AtomicUsize::new(0);

/// A thread's pool stack; when it goes (the thread exits), so does the fast copy of
/// its top (`TOP_POOL`), before the stack lets its pools go.
struct ThreadRoutes(RefCell<PoolStack<PoolSource>>);

impl Drop for ThreadRoutes {
    fn drop(&mut self) {
        TOP_POOL.set(NO_POOL);
    }
}

const NO_POOL: (*const MemPool<PoolSource>, i32) = (std::ptr::null(), -1);

thread_local! {
    /// This thread's pushed pools (`gpurt_mem_pool_push`).
    static POOL_STACK: ThreadRoutes = const { ThreadRoutes(RefCell::new(PoolStack::new(&ROUTED))) };
    /// The pool on top of this thread's stack and its device, when it is a plain
    /// pool (no filter): the stack holds it (an `Arc`), so the pointer stays valid
    /// while it is here. Every malloc and free reads it while anything is pushed;
    /// without a destructor or a `RefCell`, the read is one thread-local load (the
    /// stack's cost a pushed pair 7-14 ns more).
    static TOP_POOL: Cell<(*const MemPool<PoolSource>, i32)> = const { Cell::new(NO_POOL) };
}

/// Changes this thread's pool stack, then its fast copy of the top.
fn with_stack<T>(change: impl FnOnce(&mut PoolStack<PoolSource>) -> T) -> T {
    POOL_STACK.with(|routes| {
        let mut stack = routes.0.borrow_mut();
        let result = change(&mut stack);
        TOP_POOL.set(stack.top_plain().map_or(NO_POOL, |pool| (Arc::as_ptr(pool), pool.device())));
        result
    })
}

/// Pushes a route for this thread's allocations (`gpurt_mem_pool_push`).
pub(crate) fn push_route(route: Route<PoolSource>) {
    with_stack(|stack| stack.push(route))
}

pub(crate) fn pop_route() -> Result<()> {
    with_stack(PoolStack::pop)
}

/// This thread's top plain pool, if it serves `device`.
#[inline(always)]
fn top_pool(device: Option<i32>) -> Option<&'static MemPool<PoolSource>> {
    let (pool, pool_device) = TOP_POOL.get();
    // SAFETY: TOP_POOL names a pool this thread's stack holds (see TOP_POOL), and only
    // this thread reads it; the reference does not outlive this call's caller.
    (!pool.is_null() && device.map_or(true, |d| d == pool_device)).then(|| unsafe { &*pool })
}

/// Allocates for `native_stream`: from the graph's private pool while the stream
/// captures, through gpurt or not (with the native backend; the driver's pool records
/// memory nodes instead), else from the pool this thread has pushed for the device,
/// else from the device's default pool.
pub fn malloc(ordinal: i32, size: u64, native_stream: u64) -> Result<u64> {
    let ptr = match malloc_routed(ordinal, size, native_stream) {
        Ok(ptr) => ptr,
        Err(error) => last_resort(ordinal, size, native_stream, None, error)?,
    };
    if sanitizer::enabled() {
        tell_sanitizer(ordinal, ptr, size, native_stream);
    }
    Ok(ptr)
}

#[cold]
#[inline(never)]
fn tell_sanitizer(ordinal: i32, ptr: u64, size: u64, native_stream: u64) {
    if let Ok(device) = crate::device::resolve(ordinal) {
        sanitizer::allocated(ptr, size, sanitizer_ref(device, native_stream, None));
    }
}

#[inline(always)]
fn malloc_routed(ordinal: i32, size: u64, native_stream: u64) -> Result<u64> {
    let key = stream_key(native_stream);
    if let Some(route) = super::capture::capture_allocator(native_stream, ordinal)? {
        return malloc_in_capture(route, size, key);
    }
    let default = allocator(ordinal)?;
    if ROUTED.load(Ordering::Relaxed) > 0 {
        // A resolved ordinal is the device; reading the allocator's costs a load on the hot path.
        let device = if ordinal >= 0 { ordinal } else { default.source().device() };
        if let Some(pool) = top_pool(Some(device)) {
            return pool.allocator().malloc(size, key);
        }
        let routed = POOL_STACK.try_with(|routes| routes.0.borrow().route(device, size, native_stream).map(|pool| pool.allocator().malloc(size, key)));
        if let Ok(Some(result)) = routed {
            return result;
        }
    }
    if driver_pool::is_active() {
        return malloc_from_driver_pool(default.source().device(), size, native_stream, key);
    }
    default.malloc(size, key)
}

/// An allocation on a stream that captures through gpurt: from the capture's private
/// pool, or from the pool a shared capture shares, with the capture mode relaxed
/// around it (a growth maps memory, which a global capture forbids).
#[cold]
#[inline(never)]
fn malloc_in_capture(route: CaptureRoute, size: u64, key: u64) -> Result<u64> {
    match route {
        CaptureRoute::Private(pool) => pool.malloc(size, key),
        CaptureRoute::Shared(malloc) => super::capture::with_relaxed_capture(|| malloc(size, key)),
    }
}

#[cold]
#[inline(never)]
fn malloc_from_driver_pool(device: i32, size: u64, native_stream: u64, key: u64) -> Result<u64> {
    driver_pool::for_device(device)?.malloc(size, native_stream, key)
}

/// Allocates from `ordinal`'s default pool for `native_stream` (a capture through
/// gpurt with the native backend still takes its private pool).
pub fn malloc_from_default(ordinal: i32, size: u64, native_stream: u64) -> Result<u64> {
    match default_pool(ordinal)? {
        DefaultPool::Caching(a) => malloc_from(ordinal, a, size, native_stream),
        DefaultPool::Driver(p) => {
            let ptr = p.malloc(size, native_stream, stream_key(native_stream))?;
            if sanitizer::enabled() {
                tell_sanitizer(ordinal, ptr, size, native_stream);
            }
            Ok(ptr)
        }
    }
}

/// Allocates from `pool` (of `device`) for `native_stream`, which must be on that
/// device (`gpurt_mem_pool_malloc`). A capture through gpurt still takes its private pool.
pub fn malloc_from<S: SegmentSource>(device: i32, pool: &CachingAllocator<S>, size: u64, native_stream: u64) -> Result<u64> {
    let key = stream_key(native_stream);
    let ptr = match super::capture::capture_allocator(native_stream, device)? {
        Some(route) => malloc_in_capture(route, size, key)?,
        None => match pool.malloc(size, key) {
            Ok(ptr) => ptr,
            Err(error) => last_resort(device, size, native_stream, Some(pool.id()), error)?,
        },
    };
    if sanitizer::enabled() {
        tell_sanitizer(device, ptr, size, native_stream);
    }
    Ok(ptr)
}

/// An allocation that ran out of memory, served from a pool of its device made with
/// `use_on_oom` (but `failed`, the allocator that refused) that has room:
/// torch.cuda.MemPool's last resort. Any other error, or no such pool with room, is
/// `error` as it was. Not during a capture: its allocations belong to the graph.
#[cold]
#[inline(never)]
fn last_resort(ordinal: i32, size: u64, native_stream: u64, failed: Option<u64>, error: Error) -> Result<u64> {
    let capturing = || !matches!(super::capture::capture_allocator(native_stream, ordinal), Ok(None));
    if !super::caching::is_oom(&error) || MEM_POOLS.is_empty() || capturing() {
        return Err(error);
    }
    let device = crate::device::resolve(ordinal)?;
    let key = stream_key(native_stream);
    MEM_POOLS
        .on_device(device)
        .iter()
        .filter(|pool| pool.use_on_oom() && failed != Some(pool.allocator().id()))
        .find_map(|pool| pool.allocator().malloc(size, key).ok())
        .ok_or(error)
}

/// What a pointer-only call does to its block, in whichever allocator holds it.
#[derive(Clone, Copy)]
enum BlockOp {
    Free,
    /// `record_stream` with this stream key.
    UsedOn(u64),
    /// `set_discard_on_sleep` with this value.
    DiscardOnSleep(bool),
    /// `set_read_only` with this value.
    ReadOnly(bool),
}

impl BlockOp {
    /// The operation on `ptr` if `allocator` holds it (`None`: it does not).
    #[inline(always)]
    fn apply<S: SegmentSource>(self, allocator: &CachingAllocator<S>, ptr: u64) -> Option<Result<()>> {
        match self {
            BlockOp::Free => allocator.try_free(ptr),
            BlockOp::UsedOn(stream) => allocator.try_record_stream(ptr, stream),
            BlockOp::DiscardOnSleep(discard) => allocator.try_set_discard_on_sleep(ptr, discard),
            BlockOp::ReadOnly(read_only) => allocator.try_set_read_only(ptr, read_only),
        }
    }
}

/// Applies `op` to `ptr` in the allocator that holds it, asking until one answers:
/// first the pool this thread has pushed last, then the devices' default pools, then
/// the pools users created. The lock-free span check passes over allocators that
/// surely do not hold it; each allocator asks this thread's recent shards before its
/// segment map, and answers "not mine" without building an error, so the common
/// free costs one allocator's lookup however many pools exist. (Asking every
/// device's segment map, under its lock, made every free on a two-GPU machine
/// contend on one lock: 8 threads ran 0.38x one thread's rate.)
#[inline(always)]
fn on_owner(ptr: u64, op: BlockOp) -> Result<()> {
    if ROUTED.load(Ordering::Relaxed) > 0 {
        if let Some(result) = top_pool(None).filter(|p| p.allocator().may_hold(ptr)).and_then(|p| op.apply(p.allocator(), ptr)) {
            return result;
        }
    }
    let mut candidates = created().filter(|a| a.may_hold(ptr));
    let only = match (candidates.next(), candidates.next()) {
        (Some(only), None) => match op.apply(only, ptr) {
            Some(result) => return result,
            None => Some(only),
        },
        _ => None,
    };
    on_owner_among_pools(ptr, op, only)
}

/// `on_owner` past its fast path: every default pool whose span may hold `ptr` but
/// `asked` (which answered "not mine"), then every user pool.
#[inline(never)]
fn on_owner_among_pools(ptr: u64, op: BlockOp, asked: Option<&CachingAllocator<DriverSource>>) -> Result<()> {
    created()
        .filter(|a| a.may_hold(ptr) && !asked.is_some_and(|asked| std::ptr::eq(*a, asked)))
        .find_map(|a| op.apply(a, ptr))
        .or_else(|| MEM_POOLS.find_map(ptr, |pool| op.apply(pool.allocator(), ptr)))
        .unwrap_or_else(|| Err(not_live(ptr)))
}

/// Decides, for a freed pointer, whether its block stays allocated for now because
/// something outside the allocator still holds it (another process's IPC mapping):
/// `None`, not such a block; `Some(Ok)`, kept; `Some(Err)`, a second free of a kept
/// block.
pub(crate) type Keeper = fn(u64) -> Option<Result<()>>;
static KEEPER: OnceLock<Keeper> = OnceLock::new();
/// Reasons for a free to look elsewhere before the pools: each block the keeper may
/// keep, and the cudaMallocAsync backend. While zero (the common case), a free pays
/// one load for both.
static LOOK_BEFORE_FREE: AtomicUsize = AtomicUsize::new(0);

/// Finds a block exported to other processes (IPC) for which the predicate holds:
/// its address. A pool with such a block does not sleep.
pub(crate) type ExportFinder = fn(&dyn Fn(u64) -> bool) -> Option<u64>;
static EXPORTS: OnceLock<ExportFinder> = OnceLock::new();

/// The IPC producer's hooks: its keeper of freed exported blocks, and the finder of
/// its exported blocks.
pub(crate) fn install_keeper(keeper: Keeper, exports: ExportFinder) {
    let _ = KEEPER.set(keeper);
    let _ = EXPORTS.set(exports);
}

/// An exported block for which `inside` holds, if any.
pub(crate) fn exported_block(inside: &dyn Fn(u64) -> bool) -> Option<u64> {
    EXPORTS.get().and_then(|find| find(inside))
}

/// One block more (`true`) or less that the keeper may keep.
pub(crate) fn keeping(more: bool) {
    match more {
        true => LOOK_BEFORE_FREE.fetch_add(1, Ordering::Relaxed),
        false => LOOK_BEFORE_FREE.fetch_sub(1, Ordering::Relaxed),
    };
}

/// A free's answer from before the pools: the keeper's, or the driver pool's.
#[cold]
#[inline(never)]
fn free_elsewhere(ptr: u64) -> Option<Result<()>> {
    if let Some(kept) = KEEPER.get().and_then(|keep| keep(ptr)) {
        return Some(kept);
    }
    driver_pool::is_active().then(|| driver_pool::created().find_map(|p| p.try_free(ptr))).flatten()
}

#[inline(always)]
pub fn free(ptr: u64) -> Result<()> {
    free_in_pools(ptr)?;
    sanitizer::freed(ptr);
    Ok(())
}

#[inline]
fn free_in_pools(ptr: u64) -> Result<()> {
    if ptr == 0 {
        return Ok(());
    }
    if LOOK_BEFORE_FREE.load(Ordering::Relaxed) > 0 {
        if let Some(answer) = free_elsewhere(ptr) {
            return answer;
        }
    }
    match on_owner(ptr, BlockOp::Free) {
        Err(missed) => super::capture::free_private(ptr).unwrap_or(Err(missed)),
        freed => freed,
    }
}

/// The device and place of the live block at `ptr` (of a default or user pool).
/// Not a fast path: it asks every allocator whose span may hold it.
pub fn place(ptr: u64) -> Result<(i32, BlockPlace)> {
    if driver_pool::is_active() && driver_pool::created().any(|p| p.holds(ptr)) {
        return Err(Error::not_supported(format!(
            "{ptr:#x} comes from the driver's pool (backend:cudaMallocAsync), which gpurt does not export: \
             allocate shared blocks from a pool made with gpurt_mem_pool_create"
        )));
    }
    let on = |device: i32| move |place: Result<BlockPlace>| place.map(|place| (device, place));
    created()
        .filter(|a| a.may_hold(ptr))
        .find_map(|a| a.try_place(ptr).map(on(a.source().device())))
        .or_else(|| MEM_POOLS.find_map(ptr, |pool| pool.allocator().try_place(ptr).map(on(pool.device()))))
        .unwrap_or_else(|| Err(not_live(ptr)))
}

pub fn record_stream(ptr: u64, native_stream: u64) -> Result<()> {
    record_stream_in_pools(ptr, native_stream)?;
    if sanitizer::enabled() {
        let device = place(ptr).map(|(device, _)| device).unwrap_or_else(|_| crate::device::current().unwrap_or(0));
        sanitizer::recorded_on(ptr, sanitizer_ref(device, native_stream, None));
    }
    Ok(())
}

fn record_stream_in_pools(ptr: u64, native_stream: u64) -> Result<()> {
    if driver_pool::is_active() {
        if let Some(recorded) = driver_pool::created().find_map(|p| p.try_record_stream(ptr, stream_key(native_stream))) {
            return recorded;
        }
    }
    on_owner_or_graph_pool(ptr, BlockOp::UsedOn(stream_key(native_stream)))
}

/// Marks whether an offloading sleep of its pool drops the contents of the live block
/// at `ptr` (any device, any pool, graph pools included) instead of copying them.
pub fn set_discard_on_sleep(ptr: u64, discard: bool) -> Result<()> {
    on_owner_or_graph_pool(ptr, BlockOp::DiscardOnSleep(discard))
}

/// Marks whether the owner of the live block at `ptr` (any device, any pool) promises
/// not to change its contents, so that offloads may keep one copy of them.
pub fn set_read_only(ptr: u64, read_only: bool) -> Result<()> {
    on_owner_or_graph_pool(ptr, BlockOp::ReadOnly(read_only))
}

/// `op` on the block at `ptr` in whichever default, user or graph pool holds it.
fn on_owner_or_graph_pool(ptr: u64, op: BlockOp) -> Result<()> {
    match on_owner(ptr, op) {
        Err(missed) => super::capture::on_private_block(ptr, |allocator| op.apply(allocator, ptr)).unwrap_or(Err(missed)),
        done => done,
    }
}

/// Frees `ptr` in `native_stream`'s order: where that is not the stream it was
/// allocated for, its reuse first waits for the work queued there so far.
pub fn free_on(ptr: u64, native_stream: u64) -> Result<()> {
    if ptr == 0 {
        return Ok(());
    }
    record_stream(ptr, native_stream)?;
    free(ptr)
}

/// Releases every wholly free cached segment on every device, user pools' included.
pub fn empty_cache() -> Result<()> {
    device::require_device()?;
    super::capture::foreign::settle(super::capture::StreamWaits::Any);
    super::capture::collect_unreferenced();
    created().for_each(CachingAllocator::empty_cache);
    driver_pool::created().for_each(driver_pool::DriverPool::empty_cache);
    MEM_POOLS.empty_cache();
    Ok(())
}

/// Releases the wholly free cached device memory of `ordinal`'s device alone (its
/// default pool and the pools users created on it; host copies kept for a sleep stay,
/// `Pool::empty_device_cache`): the reserved bytes that went back.
pub fn empty_device_cache_of(ordinal: i32) -> Result<u64> {
    let reserved = || stats(ordinal).map(|s| s.reserved_bytes.all.current.max(0) as u64);
    let before = reserved()?;
    super::capture::foreign::settle(super::capture::StreamWaits::Any);
    super::capture::collect_unreferenced();
    default_pool(ordinal)?.empty_device_cache();
    MEM_POOLS.on_device(allocator(ordinal)?.source().device()).iter().for_each(|pool| pool.allocator().empty_device_cache());
    Ok(before.saturating_sub(reserved()?))
}

/// The device's statistics: the sum over its default pool, the pools users created
/// (live and destroyed) and graph-private pools.
pub fn stats(ordinal: i32) -> Result<gpurt_memory_stats_t> {
    let allocator = allocator(ordinal)?;
    let mut stats = default_pool(ordinal)?.stats();
    MEM_POOLS.add_stats(allocator.source().device(), &mut stats);
    super::capture::add_private_stats(allocator.source().device(), &mut stats);
    Ok(stats)
}

pub fn reset_peak(ordinal: i32) -> Result<()> {
    let allocator = allocator(ordinal)?;
    allocator.reset_peak();
    driver_pool::created().filter(|p| p.device() == allocator.source().device()).for_each(|p| p.reset_stats(false));
    MEM_POOLS.reset_stats(allocator.source().device(), false);
    super::capture::reset_private_stats(allocator.source().device(), false);
    Ok(())
}

pub fn reset_accumulated(ordinal: i32) -> Result<()> {
    let allocator = allocator(ordinal)?;
    allocator.reset_accumulated();
    driver_pool::created().filter(|p| p.device() == allocator.source().device()).for_each(|p| p.reset_stats(true));
    MEM_POOLS.reset_stats(allocator.source().device(), true);
    super::capture::reset_private_stats(allocator.source().device(), true);
    Ok(())
}

pub fn set_memory_fraction(fraction: f64, ordinal: i32) -> Result<()> {
    match default_pool(ordinal)? {
        DefaultPool::Caching(a) => a.set_memory_fraction(fraction),
        DefaultPool::Driver(p) => p.set_memory_fraction(fraction),
    }
}
