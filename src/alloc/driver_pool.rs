//! `backend:cudaMallocAsync`: each device's default pool hands out memory straight
//! from the device's stream-ordered driver pool (`cuMemAllocFromPoolAsync` /
//! `cuMemFreeAsync`), uncached by gpurt, as torch's backend of that name does. The
//! driver caches (its release threshold is raised to keep everything, as torch
//! does), and a graph capture records memory nodes instead of taking a private pool.
//!
//! gpurt keeps each live block's size and stream: for the statistics, and for a free
//! after use on other streams (`record_stream`), which makes the block's stream wait
//! for their work before the driver may reuse it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use rustc_hash::FxHashMap as HashMap;

use cudarc::driver::sys;

use super::caching::{out_of_memory_error, GPURT_MAX_ALLOCATION_SIZE};
use super::stats::{format_bytes, gpurt_memory_stats_t, gpurt_stat_t, GPURT_STATS_UNKNOWN_WITH_DRIVER_POOL};
use crate::stream::key::native_stream_of;
use crate::boundary::lock;
use crate::device::{self, PerDeviceOnce};
use crate::driver::check;
use crate::error::{Error, Result, Status};

struct Live {
    size: u64,
    /// The key of the stream it was allocated on (its free goes there).
    stream: u64,
    /// The keys of other streams it was used on.
    used_on: Vec<u64>,
}

/// The live blocks and their statistics, under one lock: a pair takes it twice,
/// and no atomic operation besides (atomic counters cost more than the lock).
#[derive(Default)]
struct State {
    live: HashMap<u64, Live>,
    blocks: gpurt_stat_t,
    bytes: gpurt_stat_t,
    ooms: i64,
}

/// One device's backend.
pub struct DriverPool {
    device: i32,
    /// The device's primary context (retained for the process's life).
    context: usize,
    pool: usize,
    state: Mutex<State>,
    /// The most bytes it may hand out (`set_memory_fraction`); `u64::MAX`: no limit,
    /// and no lock taken to check it.
    limit: AtomicU64,
}

impl DriverPool {
    /// The backend on `device`: the device's current driver pool, set to keep what
    /// it frees (release threshold: all).
    pub fn new(device: i32) -> Result<DriverPool> {
        for symbol in ["cuDeviceGetMemPool", "cuMemAllocFromPoolAsync", "cuMemFreeAsync", "cuMemPoolSetAttribute"] {
            crate::driver::require_symbol(symbol, "backend:cudaMallocAsync", "11.2")?;
        }
        let mut pool = std::ptr::null_mut();
        check(unsafe { sys::cuDeviceGetMemPool(&mut pool, device) }, "cuDeviceGetMemPool")?;
        let mut keep_all = u64::MAX;
        let threshold = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD;
        check(unsafe { sys::cuMemPoolSetAttribute(pool, threshold, &mut keep_all as *mut u64 as *mut _) }, "cuMemPoolSetAttribute")?;
        Ok(DriverPool {
            device,
            context: device::primary_context(device)? as usize,
            pool: pool as usize,
            state: Mutex::new(State::default()),
            limit: AtomicU64::new(u64::MAX),
        })
    }

    pub fn device(&self) -> i32 {
        self.device
    }

    /// `body` with the device's context current.
    fn in_context<R>(&self, body: impl FnOnce() -> Result<R>) -> Result<R> {
        device::with_context(self.context as sys::CUcontext, body)
    }

    fn raw_pool(&self) -> sys::CUmemoryPool {
        self.pool as sys::CUmemoryPool
    }

    /// `size` bytes (at least one) in `native_stream`'s order (`key`: its stream
    /// key). Out of memory, the driver's pool gives back what it caches and the
    /// request is tried once more.
    pub fn malloc(&self, size: u64, native_stream: u64, key: u64) -> Result<u64> {
        if size > GPURT_MAX_ALLOCATION_SIZE {
            let why = format!("more than any device holds: gpurt refuses requests above {}", format_bytes(GPURT_MAX_ALLOCATION_SIZE));
            return Err(self.out_of_memory(size, &why));
        }
        let limit = self.limit.load(Relaxed);
        if limit != u64::MAX {
            self.check_limit(size, limit)?;
        }
        let stream = native_stream as sys::CUstream;
        let ptr = self.in_context(|| {
            let mut ptr = 0;
            let mut code = unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, size.max(1) as usize, self.raw_pool(), stream) };
            if code == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
                unsafe {
                    sys::cuStreamSynchronize(stream);
                    sys::cuMemPoolTrimTo(self.raw_pool(), 0);
                }
                code = unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, size.max(1) as usize, self.raw_pool(), stream) };
            }
            check(code, "cuMemAllocFromPoolAsync").map(|()| ptr)
        });
        let ptr = match ptr {
            Ok(ptr) => ptr,
            Err(e) if e.status == Status::GPURT_ERROR_OUT_OF_MEMORY => {
                lock(&self.state).ooms += 1;
                return Err(self.out_of_memory(size, &e.to_string()));
            }
            Err(e) => return Err(e),
        };
        let mut state = lock(&self.state);
        state.live.insert(ptr, Live { size, stream: key, used_on: Vec::new() });
        state.blocks.add(1);
        state.bytes.add(size as i64);
        Ok(ptr)
    }

    #[cold]
    fn check_limit(&self, size: u64, limit: u64) -> Result<()> {
        let mut state = lock(&self.state);
        if (state.bytes.current as u64).saturating_add(size) <= limit {
            return Ok(());
        }
        state.ooms += 1;
        drop(state);
        Err(self.out_of_memory(size, &format!("the memory fraction allows {}", format_bytes(limit))))
    }

    fn out_of_memory(&self, requested: u64, cause: &str) -> Error {
        out_of_memory_error(requested, cause, &self.stats(), self.memory_info())
    }

    fn memory_info(&self) -> (u64, u64) {
        device::mem_get_info(self.device).map(|(f, t)| (f as u64, t as u64)).unwrap_or((0, 0))
    }

    /// Frees `ptr` if this backend handed it out (`None`: it did not): in its
    /// stream's order, after the work queued so far on the other streams it was
    /// used on. On failure the block stays live.
    pub fn try_free(&self, ptr: u64) -> Option<Result<()>> {
        let mut state = lock(&self.state);
        let block = state.live.get(&ptr)?;
        let stream = native_stream_of(block.stream);
        let freed = self.in_context(|| {
            for &other in &block.used_on {
                crate::event::native_stream_wait(self.device, stream as sys::CUstream, native_stream_of(other) as sys::CUstream)?;
            }
            check(unsafe { sys::cuMemFreeAsync(ptr, stream as sys::CUstream) }, "cuMemFreeAsync")
        });
        if freed.is_ok() {
            let size = state.live.remove(&ptr).expect("found above").size;
            state.blocks.sub(1);
            state.bytes.sub(size as i64);
        }
        Some(freed)
    }

    /// `record_stream`: `ptr`'s free will wait for the work queued by then on the
    /// stream of key `stream` (`None`: not this backend's block).
    pub fn try_record_stream(&self, ptr: u64, stream: u64) -> Option<Result<()>> {
        let mut state = lock(&self.state);
        let block = state.live.get_mut(&ptr)?;
        if stream != block.stream && !block.used_on.contains(&stream) {
            block.used_on.push(stream);
        }
        Some(Ok(()))
    }

    /// Caps the bytes handed out at `fraction` of the device's memory.
    pub fn set_memory_fraction(&self, fraction: f64) -> Result<()> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::invalid_argument(format!("memory fraction {fraction} is not between 0 and 1")));
        }
        let total = self.memory_info().1;
        self.limit.store(if fraction < 1.0 { (total as f64 * fraction) as u64 } else { u64::MAX }, Relaxed);
        Ok(())
    }

    pub fn holds(&self, ptr: u64) -> bool {
        lock(&self.state).live.contains_key(&ptr)
    }

    /// Waits for the device, then gives the driver pool's cached memory back.
    pub fn empty_cache(&self) {
        let trimmed = device::with_device(self.device, || {
            check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize")?;
            check(unsafe { sys::cuMemPoolTrimTo(self.raw_pool(), 0) }, "cuMemPoolTrimTo")
        });
        if let Err(e) = trimmed {
            crate::log::log(crate::log::Level::Error, &format!("emptying the driver pool's cache: {e}"));
        }
    }

    fn pool_attribute(&self, attribute: sys::CUmemPool_attribute) -> i64 {
        let mut value = 0u64;
        let code = unsafe { sys::cuMemPoolGetAttribute(self.raw_pool(), attribute, &mut value as *mut u64 as *mut _) };
        if code == sys::CUresult::CUDA_SUCCESS { value as i64 } else { 0 }
    }

    /// The statistics gpurt can know: allocations and their bytes exactly (counted
    /// here: allocated = active, requested = allocated), reserved bytes now and at
    /// their peak from the driver's pool. The rest is marked unknown.
    pub fn stats(&self) -> gpurt_memory_stats_t {
        let mut stats = gpurt_memory_stats_t::new();
        let state = lock(&self.state);
        let (blocks, bytes) = (state.blocks, state.bytes);
        stats.allocation.all = blocks;
        stats.active.all = blocks;
        stats.allocated_bytes.all = bytes;
        stats.active_bytes.all = bytes;
        stats.requested_bytes.all = bytes;
        use sys::CUmemPool_attribute as A;
        stats.reserved_bytes.all.current = self.pool_attribute(A::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        let peak = self.pool_attribute(A::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH);
        stats.reserved_bytes.all.peak = peak.max(stats.reserved_bytes.all.current);
        stats.num_ooms = state.ooms;
        stats.unknown = GPURT_STATS_UNKNOWN_WITH_DRIVER_POOL;
        stats
    }

    /// Resets the peaks (`accumulated`: the totals too); the driver pool's reserved
    /// peak restarts from its current value.
    pub fn reset_stats(&self, accumulated: bool) {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        for stat in [&mut state.blocks, &mut state.bytes] {
            stat.reset_peak();
            if accumulated {
                stat.reset_accumulated();
            }
        }
        let mut zero = 0u64;
        let high = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH;
        unsafe { sys::cuMemPoolSetAttribute(self.raw_pool(), high, &mut zero as *mut u64 as *mut _) };
        if accumulated {
            state.ooms = 0;
        }
    }
}

/// Whether the process chose this backend: set once, before its first allocation.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static POOLS: PerDeviceOnce<DriverPool> = OnceLock::new();

pub(crate) fn activate() {
    ACTIVE.store(true, Relaxed);
}

#[inline(always)]
pub(crate) fn is_active() -> bool {
    ACTIVE.load(Relaxed)
}

/// The backend of device `d` (a resolved ordinal), made on first use.
pub(crate) fn for_device(d: i32) -> Result<&'static DriverPool> {
    static MAKING: Mutex<()> = Mutex::new(());
    device::per_device_try_init(&POOLS, &MAKING, d, || device::with_device(d, || DriverPool::new(d)))
}

/// Every device's backend made so far.
pub(crate) fn created() -> impl Iterator<Item = &'static DriverPool> {
    POOLS.get().into_iter().flat_map(|p| p.iter().filter_map(OnceLock::get))
}
