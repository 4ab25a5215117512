//! The driver's source: segments from `cuMemAlloc`, expandable segments' mappings
//! from `cuMemCreate` and `cuMemMap`, stream-ordering markers from pooled events, a
//! sleeping pool's copies through pinned host memory; and the relaxed capture mode
//! under which a segment may be allocated while a stream captures.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use cudarc::driver::sys;

use super::staging::PinnedStaging;
use crate::alloc::pool::{HostStaging, SegmentSource, StagedRange};
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result, Status};
use crate::stream::key::native_stream_of;

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
    /// Asks first whether the stream captures: synchronising a capturing stream, or
    /// the legacy stream while a blocking stream captures, invalidates the capture
    /// (and cuCtxSynchronize would invalidate every capture under way, a framework's
    /// on another thread included). A capture another thread begins on the stream
    /// between the question and the wait is invalidated still: collections in passing
    /// wait only for their own call's stream (`capture::StreamWaits`). Rejected: waiting through an event
    /// recorded on the stream, which the capture would take in: on the H200 the
    /// driver invalidated such captures more often (7 of 25 runs failed, 0 of 25 with
    /// the synchronisation).
    fn wait_for_stream(&self, stream: u64) -> Result<bool> {
        let native = native_stream_of(stream) as sys::CUstream;
        if crate::stream::destroyed_by_gpurt(native as u64) {
            return Ok(true);
        }
        device::with_device(self.device, || {
            let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: `status` is a valid out-parameter; `native` is a stream of this device.
            match unsafe { sys::cuStreamIsCapturing(native, &mut status) } {
                sys::CUresult::CUDA_SUCCESS if status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => {}
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_IMPLICIT => return Ok(false),
                code => check(code, "cuStreamIsCapturing")?,
            }
            // Relaxed: another thread's global-mode capture forbids this thread's unsafe calls.
            with_relaxed_capture(|| check(unsafe { sys::cuStreamSynchronize(native) }, "cuStreamSynchronize"))?;
            Ok(true)
        })
    }
    fn host_staging(&self, bytes: u64) -> Result<HostStaging> {
        device::with_device(self.device, || Ok(Box::new(PinnedStaging::new(bytes)?) as HostStaging))
    }
    /// Through the legacy stream (the device is idle: the sleep synchronised it), every
    /// copy queued before the one wait.
    fn offload(&self, ranges: &[StagedRange], host: &mut HostStaging) -> Result<()> {
        let staging = PinnedStaging::of(host, ranges)?;
        device::with_device(self.device, || {
            copies_on_legacy_stream("cuMemcpyDtoHAsync", ranges, |legacy, r| unsafe {
                sys::cuMemcpyDtoHAsync_v2(staging.host.byte_add(r.at as usize), r.addr, r.len as usize, legacy)
            })
        })
    }
    fn restore(&self, ranges: &[StagedRange], host: &HostStaging) -> Result<()> {
        let staging = PinnedStaging::of(host, ranges)?;
        device::with_device(self.device, || {
            copies_on_legacy_stream("cuMemcpyHtoDAsync", ranges, |legacy, r| unsafe {
                sys::cuMemcpyHtoDAsync_v2(r.addr, staging.host.byte_add(r.at as usize), r.len as usize, legacy)
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

/// Queues `copy(legacy stream, range)` for each of `ranges` (each at its own place in
/// the host memory), then waits for them all: a sleep's offload and a wake's restore,
/// while the device is otherwise idle.
fn copies_on_legacy_stream(what: &str, ranges: &[StagedRange], copy: impl Fn(sys::CUstream, &StagedRange) -> sys::CUresult) -> Result<()> {
    let legacy = crate::stream::NATIVE_LEGACY as sys::CUstream;
    for r in ranges {
        // A failed copy leaves the earlier ones queued: they are waited for all the same.
        if let Err(e) = check(copy(legacy, r), what) {
            let _ = check(unsafe { sys::cuStreamSynchronize(legacy) }, "cuStreamSynchronize");
            return Err(e);
        }
    }
    check(unsafe { sys::cuStreamSynchronize(legacy) }, "cuStreamSynchronize")
}
