//! Devices: availability, the per-thread current device (shared with the CUDA
//! runtime through each device's primary context), properties, memory info, peers.

pub mod ffi;
pub mod footprint;
pub mod local_memory;
pub(crate) mod peers;

use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{self, CUcontext, CUdevice_attribute as A, CUresult};

use crate::driver::{self, check};
use crate::error::{Error, Result, Status};

/// Pass as a device ordinal to mean "this thread's current device".
pub const CURRENT_DEVICE: i32 = -1;

/// Number of devices; 0 where there is no driver or no device.
pub fn count() -> Result<i32> {
    match driver::init() {
        Ok(()) => {}
        Err(e) if matches!(e.status, Status::GPURT_ERROR_NO_DRIVER | Status::GPURT_ERROR_NO_DEVICE) => return Ok(0),
        Err(e) => return Err(e),
    }
    static COUNT: OnceLock<i32> = OnceLock::new();
    if let Some(n) = COUNT.get() {
        return Ok(*n);
    }
    let mut n = 0;
    // SAFETY: driver initialised.
    check(unsafe { sys::cuDeviceGetCount(&mut n) }, "cuDeviceGetCount")?;
    Ok(*COUNT.get_or_init(|| n))
}

/// Whether gpurt can use a GPU here: a driver loads and reports at least one device.
pub fn is_available() -> bool {
    count().map(|n| n > 0).unwrap_or(false)
}

/// Initialises the driver and fails with `NO_DEVICE` when it reports none.
pub fn require_device() -> Result<i32> {
    driver::init()?;
    match count()? {
        0 => Err(Error::new(Status::GPURT_ERROR_NO_DEVICE, "the CUDA driver reports no device")),
        n => Ok(n),
    }
}

/// Checks an ordinal, resolving `CURRENT_DEVICE`; the error says what exists.
pub fn resolve(ordinal: i32) -> Result<i32> {
    let n = require_device()?;
    if ordinal == CURRENT_DEVICE {
        return current();
    }
    if !(0..n).contains(&ordinal) {
        return Err(Error::invalid_argument(format!(
            "device {ordinal} does not exist (this machine has {n} device{})",
            if n == 1 { "" } else { "s" }
        )));
    }
    Ok(ordinal)
}

/// Per-device state set on first use: a table made once the device count is known,
/// with one slot per device.
pub(crate) type PerDeviceOnce<T> = OnceLock<Box<[OnceLock<T>]>>;

/// A table with one entry per device, for lazily filled per-device state.
pub(crate) fn per_device<T>(make: impl Fn() -> T) -> Box<[T]> {
    (0..count().unwrap_or(0)).map(|_| make()).collect()
}

/// `table`'s entry for device `d` (a resolved ordinal), made by `make` on first use.
/// Makers hold `making`, so a `make` that can fail, or that must not run twice
/// (it creates something), runs once per entry.
pub(crate) fn per_device_try_init<T>(table: &'static PerDeviceOnce<T>, making: &Mutex<()>, d: i32, make: impl FnOnce() -> Result<T>) -> Result<&'static T> {
    let cell = &table.get_or_init(|| per_device(OnceLock::new))[d as usize];
    if let Some(value) = cell.get() {
        return Ok(value);
    }
    let _making = crate::boundary::lock(making);
    if let Some(value) = cell.get() {
        return Ok(value);
    }
    let value = make()?;
    Ok(cell.get_or_init(|| value))
}

/// The primary context of a (checked) device, retained once for the process's
/// lifetime, as the CUDA runtime does.
pub(crate) fn primary_context(ordinal: i32) -> Result<CUcontext> {
    static PRIMARY: PerDeviceOnce<usize> = OnceLock::new();
    let slots = PRIMARY.get_or_init(|| per_device(OnceLock::new));
    let slot = slots.get(ordinal as usize).ok_or_else(|| Error::invalid_argument(format!("device {ordinal} does not exist")))?;
    if let Some(ctx) = slot.get() {
        return Ok(*ctx as CUcontext);
    }
    let mut ctx = std::ptr::null_mut();
    // SAFETY: the ordinal was checked against the device count.
    check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, ordinal) }, "cuDevicePrimaryCtxRetain")?;
    // A racing thread may have retained it too; the primary context is one per device,
    // so both got the same pointer and the extra reference is harmless.
    let ctx = *slot.get_or_init(|| ctx as usize) as CUcontext;
    local_memory::record_baseline(ordinal);
    Ok(ctx)
}

fn current_context() -> Result<CUcontext> {
    let mut ctx = std::ptr::null_mut();
    // SAFETY: driver initialised by the callers.
    check(unsafe { sys::cuCtxGetCurrent(&mut ctx) }, "cuCtxGetCurrent")?;
    Ok(ctx)
}

/// This thread's current device, as `cudaGetDevice` sees it: the device of the
/// current context, or 0 when no context is current.
pub fn current() -> Result<i32> {
    require_device()?;
    let ctx = current_context()?;
    if ctx.is_null() {
        return Ok(0);
    }
    let mut device = 0;
    // SAFETY: a context is current.
    check(unsafe { sys::cuCtxGetDevice(&mut device) }, "cuCtxGetDevice")?;
    Ok(device)
}

/// Makes `ordinal` this thread's current device (its primary context current), as
/// `cudaSetDevice` does, so cudart, cuBLAS and the caller's kernels see the same device.
pub fn set_current(ordinal: i32) -> Result<()> {
    let ordinal = resolve(ordinal)?;
    let ctx = primary_context(ordinal)?;
    // SAFETY: ctx is a retained primary context.
    check(unsafe { sys::cuCtxSetCurrent(ctx) }, "cuCtxSetCurrent")
}

/// Runs `body` with `ordinal`'s primary context current on this thread and restores
/// the previous context afterwards (PyTorch's device guard).
pub fn with_device<R>(ordinal: i32, body: impl FnOnce() -> Result<R>) -> Result<R> {
    let ordinal = resolve(ordinal)?;
    with_context(primary_context(ordinal)?, body)
}

/// Runs `body` with `wanted` (a retained context) current on this thread and restores
/// the previous context afterwards: `with_device` for callers that keep their
/// device's context, sparing the ordinal's checks on a hot path.
#[inline]
pub(crate) fn with_context<R>(wanted: CUcontext, body: impl FnOnce() -> Result<R>) -> Result<R> {
    let previous = current_context()?;
    if previous == wanted {
        return body();
    }
    // SAFETY: wanted is a retained primary context; previous was current a moment ago.
    check(unsafe { sys::cuCtxSetCurrent(wanted) }, "cuCtxSetCurrent")?;
    let result = body();
    let restored = check(unsafe { sys::cuCtxSetCurrent(previous) }, "cuCtxSetCurrent");
    let value = result?;
    restored?;
    Ok(value)
}

/// Device properties. Extensible: `struct_size` comes first and must be set by the
/// caller (`GPURT_DEVICE_PROPERTIES_INIT` or `gpurt_device_properties_init`); new
/// fields are only ever added at the end. Flags are 0 or 1; sizes are bytes; clock
/// rates are kHz and 0 where the driver no longer reports them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct gpurt_device_properties_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt fills only that much.
    pub struct_size: usize,
    /// The device's name, NUL-terminated.
    pub name: [libc::c_char; 256],
    /// The device's UUID.
    pub uuid: [u8; 16],
    /// Its PCI domain.
    pub pci_domain_id: i32,
    /// Its PCI bus.
    pub pci_bus_id: i32,
    /// Its PCI device.
    pub pci_device_id: i32,
    /// Compute capability, major.
    pub major: i32,
    /// Compute capability, minor.
    pub minor: i32,
    /// Device memory, in bytes.
    pub total_memory: u64,
    /// Streaming multiprocessors.
    pub multiprocessor_count: i32,
    /// The most threads a block may have.
    pub max_threads_per_block: i32,
    /// The most threads resident on a multiprocessor.
    pub max_threads_per_multiprocessor: i32,
    /// Threads per warp.
    pub warp_size: i32,
    /// The largest block in x, y and z.
    pub max_block_dim: [i32; 3],
    /// The largest grid in x, y and z.
    pub max_grid_dim: [i32; 3],
    /// Shared memory a block may use by default, in bytes.
    pub shared_memory_per_block: i32,
    /// Shared memory a block may use when its kernel opts in, in bytes.
    pub shared_memory_per_block_optin: i32,
    /// Shared memory per multiprocessor, in bytes.
    pub shared_memory_per_multiprocessor: i32,
    /// Registers a block may use.
    pub registers_per_block: i32,
    /// Registers per multiprocessor.
    pub registers_per_multiprocessor: i32,
    /// L2 cache, in bytes.
    pub l2_cache_size: i32,
    /// The most L2 that may be set aside for persisting accesses, in bytes.
    pub persisting_l2_cache_max_size: i32,
    /// Memory bus width, in bits.
    pub memory_bus_width: i32,
    /// The SM clock, in kHz.
    pub clock_rate_khz: i32,
    /// The memory clock, in kHz.
    pub memory_clock_rate_khz: i32,
    /// 1 for an integrated GPU.
    pub integrated: i32,
    /// 1 if host memory can be mapped into the device.
    pub can_map_host_memory: i32,
    /// 1 with unified addressing.
    pub unified_addressing: i32,
    /// 1 if managed memory is supported.
    pub managed_memory: i32,
    /// 1 if the host and device may access managed memory at once.
    pub concurrent_managed_access: i32,
    /// 1 if the device can access pageable host memory.
    pub pageable_memory_access: i32,
    /// Copy engines.
    pub async_engine_count: i32,
    /// The driver's compute mode.
    pub compute_mode: i32,
    /// 1 with ECC on.
    pub ecc_enabled: i32,
    /// 1 if stream-ordered memory pools are supported.
    pub memory_pools_supported: i32,
    /// 1 if the virtual memory calls (expandable segments) are supported.
    pub virtual_memory_management_supported: i32,
    /// 1 if cooperative launches are supported.
    pub cooperative_launch: i32,
    /// 1 if stream priorities are supported.
    pub stream_priorities_supported: i32,
    /// 1 with TF32 tensor cores.
    pub tf32_supported: i32,
}

/// The size of the first version of `gpurt_device_properties_t`; older callers
/// pass at least this much.
pub const PROPERTIES_V1_SIZE: usize = std::mem::size_of::<gpurt_device_properties_t>();

impl gpurt_device_properties_t {
    pub fn zeroed() -> Self {
        // SAFETY: every field is an integer or an array of integers.
        let mut props: Self = unsafe { std::mem::zeroed() };
        props.struct_size = std::mem::size_of::<Self>();
        props
    }
    pub fn name(&self) -> String {
        let bytes: Vec<u8> = self.name.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

pub(crate) fn attribute(ordinal: i32, attr: A) -> Result<i32> {
    let mut value = 0;
    // SAFETY: ordinal checked by the caller.
    check(unsafe { sys::cuDeviceGetAttribute(&mut value, attr, ordinal) }, "cuDeviceGetAttribute")?;
    Ok(value)
}

/// An attribute a newer or older driver may not know: 0 when it is not reported.
fn optional_attribute(ordinal: i32, attr: A) -> i32 {
    attribute(ordinal, attr).unwrap_or(0)
}

/// The device's UUID: the same in every process, whatever devices each one sees.
pub fn uuid(ordinal: i32) -> Result<[u8; 16]> {
    let d = resolve(ordinal)?;
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    check(unsafe { sys::cuDeviceGetUuid(&mut uuid, d) }, "cuDeviceGetUuid")?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// The ordinal, in this process, of the device with `uuid`.
pub fn by_uuid(wanted: &[u8; 16]) -> Result<i32> {
    (0..count()?)
        .find(|&d| uuid(d).is_ok_and(|u| u == *wanted))
        .ok_or_else(|| Error::new(Status::GPURT_ERROR_NO_DEVICE, "the device of the IPC handle is not visible to this process (CUDA_VISIBLE_DEVICES?)"))
}

pub fn properties(ordinal: i32) -> Result<gpurt_device_properties_t> {
    let d = resolve(ordinal)?;
    let mut p = gpurt_device_properties_t::zeroed();
    // SAFETY: d is a valid ordinal; the buffer holds 256 bytes and the driver NUL-terminates.
    check(unsafe { sys::cuDeviceGetName(p.name.as_mut_ptr(), p.name.len() as i32 - 1, d) }, "cuDeviceGetName")?;
    p.uuid = uuid(d)?;
    let mut total = 0usize;
    check(unsafe { sys::cuDeviceTotalMem_v2(&mut total, d) }, "cuDeviceTotalMem")?;
    p.total_memory = total as u64;
    p.pci_domain_id = attribute(d, A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?;
    p.pci_bus_id = attribute(d, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?;
    p.pci_device_id = attribute(d, A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?;
    p.major = attribute(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    p.minor = attribute(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    p.multiprocessor_count = attribute(d, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    p.max_threads_per_block = attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
    p.max_threads_per_multiprocessor = attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?;
    p.warp_size = attribute(d, A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?;
    p.max_block_dim = [
        attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
        attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
        attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
    ];
    p.max_grid_dim = [
        attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
        attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
        attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
    ];
    p.shared_memory_per_block = attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?;
    p.shared_memory_per_block_optin = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    p.shared_memory_per_multiprocessor = attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?;
    p.registers_per_block = attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?;
    p.registers_per_multiprocessor = attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?;
    p.l2_cache_size = attribute(d, A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?;
    p.persisting_l2_cache_max_size = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE);
    p.memory_bus_width = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    p.clock_rate_khz = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    p.memory_clock_rate_khz = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    p.integrated = attribute(d, A::CU_DEVICE_ATTRIBUTE_INTEGRATED)?;
    p.can_map_host_memory = attribute(d, A::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?;
    p.unified_addressing = attribute(d, A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?;
    p.managed_memory = attribute(d, A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)?;
    p.concurrent_managed_access = attribute(d, A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?;
    p.pageable_memory_access = attribute(d, A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS)?;
    p.async_engine_count = attribute(d, A::CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT)?;
    p.compute_mode = attribute(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)?;
    p.ecc_enabled = attribute(d, A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED)?;
    p.memory_pools_supported = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
    p.virtual_memory_management_supported =
        optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED);
    p.cooperative_launch = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
    p.stream_priorities_supported = optional_attribute(d, A::CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
    p.tf32_supported = (p.major >= 8) as i32;
    Ok(p)
}

/// TF32 tensor-core math needs compute capability 8.0 or newer.
pub fn tf32_supported(ordinal: i32) -> Result<bool> {
    capability_at_least(ordinal, 8)
}

/// Native bfloat16 arithmetic: Ampere (8.0) and later, as torch.cuda.is_bf16_supported.
pub fn bf16_supported(ordinal: i32) -> Result<bool> {
    capability_at_least(ordinal, 8)
}

fn capability_at_least(ordinal: i32, major: i32) -> Result<bool> {
    let d = resolve(ordinal)?;
    Ok(attribute(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? >= major)
}

/// (free, total) device memory in bytes, as `cudaMemGetInfo` reports it.
pub fn mem_get_info(ordinal: i32) -> Result<(usize, usize)> {
    with_device(ordinal, || {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: a context of the device is current.
        check(unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) }, "cuMemGetInfo")?;
        Ok((free, total))
    })
}

pub fn can_access_peer(ordinal: i32, peer: i32) -> Result<bool> {
    let (d, p) = (resolve(ordinal)?, resolve(peer)?);
    if d == p {
        return Ok(false);
    }
    let mut can = 0;
    // SAFETY: both ordinals checked.
    check(unsafe { sys::cuDeviceCanAccessPeer(&mut can, d, p) }, "cuDeviceCanAccessPeer")?;
    Ok(can != 0)
}

/// Grants (`enable`) or revokes `ordinal`'s access to `peer`'s memory: its
/// `cuMemAlloc` memory through the contexts, its expandable segments' mappings
/// through `peers`. Idempotent: enabling access that is enabled, or disabling access
/// that is not, succeeds. A grant that fails leaves access as it was.
pub fn set_peer_access(ordinal: i32, peer: i32, enable: bool) -> Result<()> {
    let (d, p) = (resolve(ordinal)?, resolve(peer)?);
    if d == p {
        return Err(Error::invalid_argument(format!("device {d} cannot be its own peer")));
    }
    let peer_ctx = primary_context(p)?;
    // Whether the contexts' access changed (it may have been so already).
    let set_context = |enable: bool| {
        with_device(d, || {
            // SAFETY: peer_ctx is a retained primary context; d's context is current.
            let (code, call, already) = if enable {
                (unsafe { sys::cuCtxEnablePeerAccess(peer_ctx, 0) }, "cuCtxEnablePeerAccess", CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
            } else {
                (unsafe { sys::cuCtxDisablePeerAccess(peer_ctx) }, "cuCtxDisablePeerAccess", CUresult::CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
            };
            if code == already {
                return Ok(false);
            }
            check(code, call).map(|()| true)
        })
    };
    let changed = set_context(enable)?;
    let granted = with_device(p, || peers::set_granted(p, d, enable));
    if granted.is_err() && enable && changed {
        let _ = set_context(false);
    }
    granted
}

/// Blocks until all work on the device has finished.
pub fn synchronize(ordinal: i32) -> Result<()> {
    let ordinal = resolve(ordinal)?;
    crate::sync_debug::on_blocking_call("device synchronize")?;
    with_device(ordinal, || check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize"))?;
    crate::sanitizer::device_synchronized(ordinal);
    Ok(())
}
