//! Upstreams of the pools: where a pool's segments come from. The driver's
//! (`DriverSource`: every device's default pool, graphs' private pools, and pools
//! users create over GPURT_UPSTREAM_DRIVER), the driver's stream-ordered pool
//! (`AsyncSource`), managed memory (`ManagedSource`, `cuMemAllocManaged`), or a
//! caller's function pair (`UserSource`: an engine's
//! arena, a NUMA-aware allocator, RMM under gpurt's cache, as cupy's
//! `MemoryPool(allocator)`). A pool holds its upstream as a
//! `Box<dyn SegmentSource>`: the source is asked only off the fast path (a new or
//! released segment, a stream-ordering marker), so the dispatch costs nothing there.

use libc::{c_int, c_void};

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::pool::{HostStaging, SegmentSource};
use crate::stream::key::native_stream_of;
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result, Status};

/// Segments from `cuMemAlloc` on one device; markers are pooled events.
pub struct DriverSource {
    device: i32,
    /// The unit of expandable segments' mappings, asked of the driver once.
    granularity: OnceLock<u64>,
    /// Whether the device maps memory (virtual memory management), asked once.
    can_map: OnceLock<bool>,
    /// Set once the driver refused memory that another process may import: later
    /// mappings are made without, and their blocks cannot be exported.
    unshareable: AtomicBool,
}

impl DriverSource {
    pub(crate) fn new(device: i32) -> DriverSource {
        DriverSource { device, granularity: OnceLock::new(), can_map: OnceLock::new(), unshareable: AtomicBool::new(false) }
    }

    pub(crate) fn device(&self) -> i32 {
        self.device
    }

    /// A segment from `cuMemAlloc`, whatever the streams are doing.
    pub(crate) fn alloc_segment(&self, size: u64) -> Result<u64> {
        device::with_device(self.device, || {
            let mut ptr = 0;
            check(unsafe { sys::cuMemAlloc_v2(&mut ptr, size as usize) }, "cuMemAlloc")?;
            Ok(ptr)
        })
    }

    /// Device memory; `shareable`: exportable as a POSIX file descriptor (IPC of
    /// expandable segments' blocks, `crate::ipc`), as PyTorch makes its chunks.
    fn allocation_prop(&self, shareable: bool) -> sys::CUmemAllocationProp {
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.device;
        if shareable {
            prop.requestedHandleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        }
        prop
    }

    /// Physical memory for a mapping: shareable unless the driver refused that once
    /// (then, and from then on, plain).
    fn create_physical(&self, size: u64) -> Result<sys::CUmemGenericAllocationHandle> {
        let mut handle = 0;
        if !self.unshareable.load(Ordering::Relaxed) {
            let code = unsafe { sys::cuMemCreate(&mut handle, size as usize, &self.allocation_prop(true), 0) };
            match code {
                sys::CUresult::CUDA_SUCCESS => return Ok(handle),
                sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => check(code, "cuMemCreate")?,
                _ => self.unshareable.store(true, Ordering::Relaxed),
            }
        }
        check(unsafe { sys::cuMemCreate(&mut handle, size as usize, &self.allocation_prop(false), 0) }, "cuMemCreate")?;
        Ok(handle)
    }
}

fn exchange_capture_mode(mode: sys::CUstreamCaptureMode) -> Result<sys::CUstreamCaptureMode> {
    let mut m = mode;
    check(unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut m) }, "cuThreadExchangeStreamCaptureMode")?;
    Ok(m)
}

thread_local! {
    /// How deep this thread is in `with_relaxed_capture`: a segment allocated meanwhile
    /// cannot invalidate a capture.
    static RELAXED_CAPTURE: Cell<u32> = const { Cell::new(0) };
}

/// Runs `body` with this thread's capture mode relaxed, so that calls a capture
/// forbids (allocating, creating a library's handle) neither fail nor invalidate a
/// capture under way; the mode is restored after.
pub(crate) fn with_relaxed_capture<R>(body: impl FnOnce() -> Result<R>) -> Result<R> {
    let previous = exchange_capture_mode(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
    let result = {
        let _relaxed = RelaxedDepth::enter();
        body()
    };
    exchange_capture_mode(previous)?;
    result
}

/// One level of `RELAXED_CAPTURE`, left when dropped (a panic in the body included).
struct RelaxedDepth;

impl RelaxedDepth {
    fn enter() -> RelaxedDepth {
        RELAXED_CAPTURE.with(|depth| depth.set(depth.get() + 1));
        RelaxedDepth
    }
}

impl Drop for RelaxedDepth {
    fn drop(&mut self) {
        RELAXED_CAPTURE.with(|depth| depth.set(depth.get() - 1));
    }
}

impl SegmentSource for DriverSource {
    fn history_device(&self) -> Option<i32> {
        Some(self.device)
    }
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.may_allocate(stream)?;
        self.alloc_segment(size)
    }
    /// Only on the slow path: a capture begun outside gpurt has no private pool, and
    /// allocating a segment during it would invalidate it, unless the capture mode is
    /// relaxed around the allocation (a shared capture's, a library's workspace).
    fn may_allocate(&self, stream: u64) -> Result<()> {
        if RELAXED_CAPTURE.with(Cell::get) > 0 {
            return Ok(());
        }
        let native = native_stream_of(stream) as sys::CUstream;
        let capture = device::with_device(self.device, || crate::stream::native_capture_status(native))?;
        if capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(Error::new(
                Status::GPURT_ERROR_STREAM_CAPTURE,
                "the stream is capturing a graph that was not begun with gpurt_stream_begin_capture: \
                 gpurt has no private pool for it, and allocating a segment would invalidate the capture",
            ));
        }
        Ok(())
    }
    fn native_stream(&self, stream: u64) -> u64 {
        native_stream_of(stream)
    }
    fn in_context(&self, f: &mut dyn FnMut()) -> Result<()> {
        device::with_device(self.device, || {
            f();
            Ok(())
        })
    }
    fn release(&self, addr: u64, _size: u64) {
        let freed = device::with_device(self.device, || check(unsafe { sys::cuMemFree_v2(addr) }, "cuMemFree"));
        if let Err(e) = freed {
            crate::log::log(crate::log::Level::Error, &format!("releasing a cached segment: {e}"));
        }
    }
    fn record(&self, stream: u64) -> Result<u64> {
        crate::event::marker_record(self.device, native_stream_of(stream))
    }
    fn is_done(&self, marker: u64) -> bool {
        crate::event::marker_done(marker)
    }
    fn wait(&self, marker: u64) {
        crate::event::marker_wait(marker)
    }
    fn memory_info(&self) -> (u64, u64) {
        device::mem_get_info(self.device).map(|(f, t)| (f as u64, t as u64)).unwrap_or((0, 0))
    }
    fn reserve_addresses(&self, size: u64) -> Result<u64> {
        device::with_device(self.device, || {
            let mut addr = 0;
            check(unsafe { sys::cuMemAddressReserve(&mut addr, size as usize, 0, 0, 0) }, "cuMemAddressReserve")?;
            Ok(addr)
        })
    }
    /// A device without virtual memory management (some virtualised and older
    /// platforms) cannot map: its pools take whole segments, as PyTorch's do there.
    fn can_map(&self) -> bool {
        *self.can_map.get_or_init(|| {
            let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
            device::attribute(self.device, attr).is_ok_and(|supported| supported == 1)
        })
    }
    /// Physical memory from cuMemCreate, mapped and made accessible to this device
    /// and the peers granted access to it. The allocation handle is released at
    /// once: the mapping keeps the memory.
    fn map(&self, addr: u64, size: u64) -> Result<()> {
        device::with_device(self.device, || {
            let handle = self.create_physical(size)?;
            let mapped = check(unsafe { sys::cuMemMap(addr, size as usize, 0, handle, 0) }, "cuMemMap");
            unsafe { sys::cuMemRelease(handle) };
            mapped?;
            device::peers::mapped(self.device, addr, size).inspect_err(|_| unsafe {
                sys::cuMemUnmap(addr, size as usize);
            })
        })
    }
    fn unmap(&self, addr: u64, size: u64) -> Result<()> {
        device::with_device(self.device, || check(unsafe { sys::cuMemUnmap(addr, size as usize) }, "cuMemUnmap"))?;
        device::peers::unmapped(self.device, addr, size);
        Ok(())
    }
    fn free_addresses(&self, addr: u64, size: u64) {
        unsafe { sys::cuMemAddressFree(addr, size as usize) };
    }
    fn synchronize(&self) -> Result<()> {
        device::synchronize(self.device)
    }
    fn host_staging(&self, bytes: u64) -> Result<HostStaging> {
        device::with_device(self.device, || Ok(Box::new(PinnedStaging::new(bytes)?) as HostStaging))
    }
    /// Through the legacy stream (the device is idle: the sleep synchronised it), every
    /// copy queued before the one wait.
    fn offload(&self, ranges: &[(u64, u64)], host: &mut HostStaging) -> Result<()> {
        let staging = PinnedStaging::of(host, ranges)?;
        device::with_device(self.device, || {
            copies_on_legacy_stream("cuMemcpyDtoHAsync", ranges, |legacy, addr, offset, size| unsafe {
                sys::cuMemcpyDtoHAsync_v2(staging.host.byte_add(offset), addr, size, legacy)
            })
        })
    }
    fn restore(&self, ranges: &[(u64, u64)], host: &HostStaging) -> Result<()> {
        let staging = PinnedStaging::of(host, ranges)?;
        device::with_device(self.device, || {
            copies_on_legacy_stream("cuMemcpyHtoDAsync", ranges, |legacy, addr, offset, size| unsafe {
                sys::cuMemcpyHtoDAsync_v2(addr, staging.host.byte_add(offset), size, legacy)
            })
        })
    }
    fn map_granularity(&self) -> u64 {
        *self.granularity.get_or_init(|| {
            let prop = self.allocation_prop(false);
            let mut granularity = 0;
            let option = sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM;
            let code = unsafe { sys::cuMemGetAllocationGranularity(&mut granularity, &prop, option) };
            if code == sys::CUresult::CUDA_SUCCESS && granularity > 0 {
                granularity as u64
            } else {
                2 << 20
            }
        })
    }
}

/// A pool's source of segments, whichever upstream it is.
pub type PoolSource = Box<dyn SegmentSource>;

/// `void *alloc(size_t size, int device, void *stream, void *context)`: NULL for no memory.
pub type gpurt_upstream_alloc_fn = Option<unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> *mut c_void>;
/// `void free(void *ptr, size_t size, int device, void *stream, void *context)`.
pub type gpurt_upstream_free_fn = Option<unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void, *mut c_void)>;

/// The methods an upstream takes from the driver's source of its device: the
/// stream-ordering markers, the memory figures, the capture check, native streams
/// and the device's context.
macro_rules! markers_from {
    ($field:ident) => {
        fn record(&self, stream: u64) -> Result<u64> {
            self.$field.record(stream)
        }
        fn is_done(&self, marker: u64) -> bool {
            self.$field.is_done(marker)
        }
        fn wait(&self, marker: u64) {
            self.$field.wait(marker)
        }
        fn memory_info(&self) -> (u64, u64) {
            self.$field.memory_info()
        }
        fn may_allocate(&self, stream: u64) -> Result<()> {
            self.$field.may_allocate(stream)
        }
        fn native_stream(&self, stream: u64) -> u64 {
            self.$field.native_stream(stream)
        }
        fn in_context(&self, f: &mut dyn FnMut()) -> Result<()> {
            self.$field.in_context(f)
        }
        fn history_device(&self) -> Option<i32> {
            self.$field.history_device()
        }
    };
}

/// A caller's allocation functions and their context.
#[derive(Clone, Copy)]
pub struct UserFunctions {
    pub alloc: unsafe extern "C" fn(usize, c_int, *mut c_void, *mut c_void) -> *mut c_void,
    pub free: unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void, *mut c_void),
    pub context: usize,
}

/// Segments from a caller's functions; stream-ordering markers, the memory figures
/// and the capture check from `markers` (the driver's source for the same device).
pub struct UserSource<M: SegmentSource> {
    functions: UserFunctions,
    device: i32,
    markers: M,
}

impl<M: SegmentSource> UserSource<M> {
    pub fn new(functions: UserFunctions, device: i32, markers: M) -> Self {
        UserSource { functions, device, markers }
    }
}

impl<M: SegmentSource> SegmentSource for UserSource<M> {
    /// The caller's `alloc`, with the pool's device current and the native stream
    /// the segment is first for.
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.markers.may_allocate(stream)?;
        let native = self.markers.native_stream(stream) as *mut c_void;
        let (f, ctx) = (self.functions, self.functions.context as *mut c_void);
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the caller gave these functions for this use, with this context.
        self.markers.in_context(&mut || ptr = unsafe { (f.alloc)(size as usize, self.device, native, ctx) })?;
        if ptr.is_null() {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("the pool's user upstream returned NULL for {size} bytes")));
        }
        if ptr as u64 % 512 != 0 {
            self.release(ptr as u64, size);
            return Err(Error::invalid_argument(format!("the pool's user upstream returned {ptr:p}, not aligned to 512 bytes")));
        }
        Ok(ptr as u64)
    }
    /// The caller's `free`, with the pool's device current and a NULL stream: a
    /// released segment is idle.
    fn release(&self, addr: u64, size: u64) {
        let f = self.functions;
        // SAFETY: `addr` came from `f.alloc` with this size and context.
        let call = &mut || unsafe { (f.free)(addr as *mut c_void, size as usize, self.device, std::ptr::null_mut(), f.context as *mut c_void) };
        if let Err(e) = self.markers.in_context(call) {
            crate::log::log(crate::log::Level::Error, &format!("giving a segment back to the pool's user upstream: {e}"));
        }
    }
    markers_from!(markers);
}

/// Memory any stream on any device may access (`CU_MEM_ATTACH_GLOBAL`).
pub const GPURT_MEM_ATTACH_GLOBAL: u32 = 1;
/// Memory the host may access while no stream uses it (`CU_MEM_ATTACH_HOST`).
pub const GPURT_MEM_ATTACH_HOST: u32 = 2;
/// A prefetch target or advice location meaning host memory.
pub const GPURT_DEVICE_HOST: i32 = -2;

/// Segments from `cuMemAllocManaged` with the pool's attach flag; markers, the
/// capture check and the memory figures from the device's driver source.
pub struct ManagedSource {
    driver: DriverSource,
    flags: u32,
}

impl ManagedSource {
    pub fn new(device: i32, flags: u32) -> Result<ManagedSource> {
        if flags != GPURT_MEM_ATTACH_GLOBAL && flags != GPURT_MEM_ATTACH_HOST {
            return Err(Error::invalid_argument(format!("flags {flags:#x}: give GPURT_MEM_ATTACH_GLOBAL or GPURT_MEM_ATTACH_HOST")));
        }
        Ok(ManagedSource { driver: DriverSource::new(device), flags })
    }
}

impl SegmentSource for ManagedSource {
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.driver.may_allocate(stream)?;
        crate::device::with_device(self.driver.device(), || {
            let mut ptr = 0;
            check(unsafe { sys::cuMemAllocManaged(&mut ptr, size as usize, self.flags) }, "cuMemAllocManaged")?;
            Ok(ptr)
        })
    }
    fn release(&self, addr: u64, _size: u64) {
        let freed = crate::device::with_device(self.driver.device(), || check(unsafe { sys::cuMemFree_v2(addr) }, "cuMemFree"));
        if let Err(e) = freed {
            crate::log::log(crate::log::Level::Error, &format!("releasing a cached managed segment: {e}"));
        }
    }
    markers_from!(driver);
}

/// Segments from the driver's stream-ordered pool (`cuMemAllocFromPoolAsync` on the
/// device's current memory pool, `cuDeviceGetMemPool`): gpurt's cache over a pool
/// that other libraries in the process may share. A segment is taken in its
/// stream's order and stays that stream's, as every segment of a gpurt pool does;
/// it goes back idle, in the legacy default stream's order.
pub struct AsyncSource {
    driver: DriverSource,
    pool: usize,
}

impl AsyncSource {
    pub fn new(device: i32) -> Result<AsyncSource> {
        for symbol in ["cuDeviceGetMemPool", "cuMemAllocFromPoolAsync", "cuMemFreeAsync"] {
            crate::driver::require_symbol(symbol, "GPURT_UPSTREAM_ASYNC", "11.2")?;
        }
        let mut pool = std::ptr::null_mut();
        check(unsafe { sys::cuDeviceGetMemPool(&mut pool, device) }, "cuDeviceGetMemPool")?;
        Ok(AsyncSource { driver: DriverSource::new(device), pool: pool as usize })
    }
}

impl SegmentSource for AsyncSource {
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        self.driver.may_allocate(stream)?;
        let native = self.driver.native_stream(stream) as sys::CUstream;
        crate::device::with_device(self.driver.device(), || {
            let mut ptr = 0;
            let pool = self.pool as sys::CUmemoryPool;
            check(unsafe { sys::cuMemAllocFromPoolAsync(&mut ptr, size as usize, pool, native) }, "cuMemAllocFromPoolAsync")?;
            Ok(ptr)
        })
    }
    fn release(&self, addr: u64, _size: u64) {
        let legacy = crate::stream::NATIVE_LEGACY as sys::CUstream;
        let freed = crate::device::with_device(self.driver.device(), || check(unsafe { sys::cuMemFreeAsync(addr, legacy) }, "cuMemFreeAsync"));
        if let Err(e) = freed {
            crate::log::log(crate::log::Level::Error, &format!("releasing a cached segment to the driver's pool: {e}"));
        }
    }
    markers_from!(driver);
}

/// Runs a copy on the legacy stream and waits for it (a sleep's offload and a wake's
/// restore: the device is otherwise idle).
/// Queues `copy(legacy stream, address, offset in the host memory, size)` for each of
/// `ranges`, packed from the host memory's start, then waits for them all.
fn copies_on_legacy_stream(what: &str, ranges: &[(u64, u64)], copy: impl Fn(sys::CUstream, u64, usize, usize) -> sys::CUresult) -> Result<()> {
    let legacy = crate::stream::NATIVE_LEGACY as sys::CUstream;
    let mut offset = 0;
    for &(addr, size) in ranges {
        // A failed copy leaves the earlier ones queued: they are waited for all the same.
        if let Err(e) = check(copy(legacy, addr, offset, size as usize), what) {
            let _ = check(unsafe { sys::cuStreamSynchronize(legacy) }, "cuStreamSynchronize");
            return Err(e);
        }
        offset += size as usize;
    }
    check(unsafe { sys::cuStreamSynchronize(legacy) }, "cuStreamSynchronize")
}

/// Pinned host memory a sleeping pool's contents wait in.
struct PinnedStaging {
    host: *mut c_void,
    bytes: u64,
}

// SAFETY: the memory is the staging's alone, and pinned memory may be freed from any thread.
unsafe impl Send for PinnedStaging {}

/// Bytes of staging from which its first touch is spread over threads.
const TOUCH_IN_PARALLEL: usize = 64 << 20;

impl PinnedStaging {
    /// Anonymous memory advised into huge pages, first touched by several threads (the
    /// kernel zeroes the pages), then registered with the driver: on the H100 host,
    /// 8 GiB in 0.55 s where `cuMemHostAlloc` took 5.2 s, copied at the same 49-50 GiB/s
    /// (`gpu/pin_bench.c`; registering untouched memory took 2.2 s). This is most of a
    /// first offload's time.
    fn new(bytes: u64) -> Result<PinnedStaging> {
        let len = bytes as usize;
        let out_of_memory = |what: &str| Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("{what} of {bytes} bytes of host memory for an offload failed"));
        // SAFETY: a fresh private anonymous mapping; checked below.
        let host = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if host == libc::MAP_FAILED {
            return Err(out_of_memory("mmap"));
        }
        // Advice only: where transparent huge pages are off, the pages are 4 KiB.
        unsafe { libc::madvise(host, len, libc::MADV_HUGEPAGE) };
        touch(host as usize, len);
        if let Err(e) = check(unsafe { sys::cuMemHostRegister_v2(host, len, 0) }, "cuMemHostRegister") {
            unsafe { libc::munmap(host, len) };
            return Err(e);
        }
        Ok(PinnedStaging { host, bytes })
    }

    /// The driver's staging behind `host`, checked to hold `ranges`.
    fn of<'a>(host: &'a HostStaging, ranges: &[(u64, u64)]) -> Result<&'a PinnedStaging> {
        let staging = host.downcast_ref::<PinnedStaging>().ok_or_else(|| Error::new(Status::GPURT_ERROR_INTERNAL, "host memory of another memory source"))?;
        let needed: u64 = ranges.iter().map(|r| r.1).sum();
        if needed > staging.bytes {
            return Err(Error::new(Status::GPURT_ERROR_INTERNAL, format!("{needed} bytes to copy through {} bytes of host memory", staging.bytes)));
        }
        Ok(staging)
    }
}

impl Drop for PinnedStaging {
    fn drop(&mut self) {
        unsafe {
            sys::cuMemHostUnregister(self.host);
            libc::munmap(self.host, self.bytes as usize);
        }
    }
}

/// Writes a byte in each page of `[addr, addr + len)`, so that the kernel backs it
/// with memory, large ranges with one thread a share (zeroing pages is what costs).
fn touch(addr: usize, len: usize) {
    let page = |from: usize, to: usize| {
        for at in (from..to).step_by(4096) {
            // SAFETY: inside the caller's fresh writable mapping, each page by one thread.
            unsafe { std::ptr::write_volatile(at as *mut u8, 0) };
        }
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(16);
    if len < TOUCH_IN_PARALLEL || threads == 1 {
        return page(addr, addr + len);
    }
    let share = len.div_ceil(threads).next_multiple_of(2 << 20);
    std::thread::scope(|scope| {
        for start in (addr..addr + len).step_by(share) {
            scope.spawn(move || page(start, (start + share).min(addr + len)));
        }
    });
}

/// Every method forwarded, the defaulted ones included (their overrides matter).
impl SegmentSource for Box<dyn SegmentSource> {
    fn allocate(&self, size: u64, stream: u64) -> Result<u64> {
        (**self).allocate(size, stream)
    }
    fn release(&self, addr: u64, size: u64) {
        (**self).release(addr, size)
    }
    fn record(&self, stream: u64) -> Result<u64> {
        (**self).record(stream)
    }
    fn is_done(&self, marker: u64) -> bool {
        (**self).is_done(marker)
    }
    fn wait(&self, marker: u64) {
        (**self).wait(marker)
    }
    fn memory_info(&self) -> (u64, u64) {
        (**self).memory_info()
    }
    fn can_map(&self) -> bool {
        (**self).can_map()
    }
    fn reserve_addresses(&self, size: u64) -> Result<u64> {
        (**self).reserve_addresses(size)
    }
    fn map(&self, addr: u64, size: u64) -> Result<()> {
        (**self).map(addr, size)
    }
    fn unmap(&self, addr: u64, size: u64) -> Result<()> {
        (**self).unmap(addr, size)
    }
    fn free_addresses(&self, addr: u64, size: u64) {
        (**self).free_addresses(addr, size)
    }
    fn map_granularity(&self) -> u64 {
        (**self).map_granularity()
    }
    fn keeps_free_memory(&self) -> bool {
        (**self).keeps_free_memory()
    }
    fn synchronize(&self) -> Result<()> {
        (**self).synchronize()
    }
    fn host_staging(&self, bytes: u64) -> Result<HostStaging> {
        (**self).host_staging(bytes)
    }
    fn offload(&self, ranges: &[(u64, u64)], host: &mut HostStaging) -> Result<()> {
        (**self).offload(ranges, host)
    }
    fn restore(&self, ranges: &[(u64, u64)], host: &HostStaging) -> Result<()> {
        (**self).restore(ranges, host)
    }
    fn history_device(&self) -> Option<i32> {
        (**self).history_device()
    }
    fn record_all(&self, streams: &[u64]) -> Result<Vec<u64>> {
        (**self).record_all(streams)
    }
    fn settle(&self, markers: &mut Vec<u64>, wait: bool) -> bool {
        (**self).settle(markers, wait)
    }
    fn may_allocate(&self, stream: u64) -> Result<()> {
        (**self).may_allocate(stream)
    }
    fn native_stream(&self, stream: u64) -> u64 {
        (**self).native_stream(stream)
    }
    fn in_context(&self, f: &mut dyn FnMut()) -> Result<()> {
        (**self).in_context(f)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::alloc::caching::CachingAllocator;
    use crate::alloc::config::AllocConfig;
    use crate::alloc::host::HostSource;

    const MIB: u64 = 1 << 20;

    /// A caller's arena: bump allocation in a range of fake addresses, a byte budget,
    /// and counts of what was asked.
    struct Arena {
        next: AtomicU64,
        budget: AtomicU64,
        live: AtomicU64,
        calls: AtomicU64,
    }

    unsafe extern "C" fn arena_alloc(size: usize, device: c_int, _stream: *mut c_void, ctx: *mut c_void) -> *mut c_void {
        let arena = &*(ctx as *const Arena);
        arena.calls.fetch_add(1, Ordering::Relaxed);
        assert_eq!(device, 3, "the pool's device is passed on");
        if arena.live.load(Ordering::Relaxed) + size as u64 > arena.budget.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        arena.live.fetch_add(size as u64, Ordering::Relaxed);
        arena.next.fetch_add(size as u64, Ordering::Relaxed) as *mut c_void
    }

    unsafe extern "C" fn arena_free(_ptr: *mut c_void, size: usize, _device: c_int, stream: *mut c_void, ctx: *mut c_void) {
        assert!(stream.is_null(), "a released segment is idle");
        (*(ctx as *const Arena)).live.fetch_sub(size as u64, Ordering::Relaxed);
    }

    #[test]
    fn a_user_upstream_serves_segments_and_its_failure_is_a_clean_out_of_memory() {
        let arena = Box::new(Arena { next: AtomicU64::new(1 << 40), budget: AtomicU64::new(64 * MIB), live: AtomicU64::new(0), calls: AtomicU64::new(0) });
        let functions = UserFunctions { alloc: arena_alloc, free: arena_free, context: &*arena as *const Arena as usize };
        let source: PoolSource = Box::new(UserSource::new(functions, 3, HostSource::new(1 << 40)));
        let allocator = CachingAllocator::new(source, AllocConfig::default());
        let a = allocator.malloc(30 * MIB, 1).unwrap();
        let b = allocator.malloc(1000, 1).unwrap();
        assert_eq!(arena.live.load(Ordering::Relaxed), 32 * MIB, "a large segment and a small one from the upstream");
        let before = allocator.stats();
        let err = allocator.malloc(40 * MIB, 1).unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
        assert!(err.message.contains("user upstream returned NULL"), "{}", err.message);
        let after = allocator.stats();
        assert_eq!(after.allocated_bytes.all.current, before.allocated_bytes.all.current, "nothing was counted for the failure");
        assert_eq!((after.num_alloc_retries, after.num_ooms), (before.num_alloc_retries + 1, before.num_ooms + 1));
        assert_eq!(arena.live.load(Ordering::Relaxed), 32 * MIB, "the retry released no live segment");
        allocator.free(a).unwrap();
        let c = allocator.malloc(40 * MIB, 1).unwrap(); // the retry releases a's free segment first
        assert_eq!(arena.live.load(Ordering::Relaxed), 42 * MIB);
        allocator.free(b).unwrap();
        allocator.free(c).unwrap();
        allocator.empty_cache();
        allocator.check_invariants().unwrap();
        assert_eq!(arena.live.load(Ordering::Relaxed), 0, "every segment went back through the user's free");
        assert!(arena.calls.load(Ordering::Relaxed) >= 4);
    }

    unsafe extern "C" fn misaligned_alloc(_size: usize, _device: c_int, _stream: *mut c_void, ctx: *mut c_void) -> *mut c_void {
        (*(ctx as *const Arena)).calls.fetch_add(1, Ordering::Relaxed);
        0x1000_0010 as *mut c_void
    }

    unsafe extern "C" fn count_free(_ptr: *mut c_void, _size: usize, _device: c_int, _stream: *mut c_void, ctx: *mut c_void) {
        (*(ctx as *const Arena)).live.fetch_add(1, Ordering::Relaxed);
    }

    #[test]
    fn a_misaligned_user_segment_is_refused_and_given_back() {
        let arena = Box::new(Arena { next: AtomicU64::new(0), budget: AtomicU64::new(0), live: AtomicU64::new(0), calls: AtomicU64::new(0) });
        let functions = UserFunctions { alloc: misaligned_alloc, free: count_free, context: &*arena as *const Arena as usize };
        let allocator = CachingAllocator::new(UserSource::new(functions, 0, HostSource::new(1 << 40)), AllocConfig::default());
        let err = allocator.malloc(4096, 1).unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
        assert!(err.message.contains("not aligned"), "{}", err.message);
        assert_eq!(arena.live.load(Ordering::Relaxed), arena.calls.load(Ordering::Relaxed), "each refused segment was freed");
        assert_eq!(allocator.stats().reserved_bytes.all.current, 0);
    }
}
