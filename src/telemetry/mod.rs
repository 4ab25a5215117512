//! What the card is doing, as NVML reports it (torch.cuda's `utilization`,
//! `memory_usage`, `temperature`, `power_draw`, `clock_rate`, `list_gpu_processes`,
//! `device_memory_used`). gpurt devices map to NVML's by UUID, so the mapping
//! follows `CUDA_VISIBLE_DEVICES`. `nvml.rs` loads NVML at run time.

pub mod ffi;
mod nvml;

use crate::device;
use crate::error::Result;

/// A device's readings. Extensible: `struct_size` first, fields only added at the
/// end; initialise with GPURT_TELEMETRY_INIT. A reading this GPU does not report is
/// -1 (`clock_event_reasons`: UINT64_MAX).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct gpurt_telemetry_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt fills only that much.
    pub struct_size: usize,
    /// Device memory in use, free and in all, by every process (bytes).
    pub memory_used: u64,
    /// Free device memory, in bytes.
    pub memory_free: u64,
    /// The device's memory, in bytes.
    pub memory_total: u64,
    /// Power draw and the enforced limit (milliwatts).
    pub power_draw_mw: i64,
    /// The power limit, in milliwatts.
    pub power_limit_mw: i64,
    /// Why the clocks are below their maximum now (NVML's clocks event reasons bits).
    pub clock_event_reasons: u64,
    /// Percent of the last sample period in which a kernel ran / memory was read or written.
    pub gpu_utilization: i32,
    /// Percent of the last sample period the memory was read or written.
    pub memory_utilization: i32,
    /// GPU core temperature (°C).
    pub temperature_c: i32,
    /// SM and memory clocks now (MHz).
    pub sm_clock_mhz: i32,
    /// The memory clock, in MHz.
    pub memory_clock_mhz: i32,
}

/// The size of the first version of `gpurt_telemetry_t`.
pub(crate) const TELEMETRY_V1_SIZE: usize = std::mem::size_of::<gpurt_telemetry_t>();

/// A process using a device, and its device memory (bytes; UINT64_MAX where the
/// driver does not say, as under some virtualisation).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct gpurt_process_t {
    /// The process id.
    pub pid: u32,
    /// Device memory it uses, in bytes.
    pub used_bytes: u64,
}

fn nvml_device(ordinal: i32) -> Result<(&'static nvml::Nvml, nvml::Device)> {
    let uuid = device::uuid(device::resolve(ordinal)?)?;
    let nvml = nvml::get()?;
    Ok((nvml, nvml.device(&uuid)?))
}

fn or_minus_one<T: Into<i64>>(reading: Option<T>) -> i64 {
    reading.map_or(-1, Into::into)
}

pub fn telemetry(ordinal: i32) -> Result<gpurt_telemetry_t> {
    let (nvml, d) = nvml_device(ordinal)?;
    let memory = nvml.memory(d)?;
    let utilization = nvml.utilization(d)?;
    Ok(gpurt_telemetry_t {
        struct_size: TELEMETRY_V1_SIZE,
        memory_used: memory.used,
        memory_free: memory.free,
        memory_total: memory.total,
        power_draw_mw: or_minus_one(nvml.power_usage(d)?),
        power_limit_mw: or_minus_one(nvml.power_limit(d)?),
        clock_event_reasons: nvml.throttle_reasons(d)?.unwrap_or(u64::MAX),
        gpu_utilization: utilization.as_ref().map_or(-1, |u| u.gpu as i32),
        memory_utilization: utilization.as_ref().map_or(-1, |u| u.memory as i32),
        temperature_c: or_minus_one(nvml.temperature(d)?) as i32,
        sm_clock_mhz: or_minus_one(nvml.clock(d, nvml::CLOCK_SM)?) as i32,
        memory_clock_mhz: or_minus_one(nvml.clock(d, nvml::CLOCK_MEM)?) as i32,
    })
}

/// The compute processes on a device.
pub fn processes(ordinal: i32) -> Result<Vec<gpurt_process_t>> {
    let (nvml, d) = nvml_device(ordinal)?;
    Ok(nvml.processes(d)?.into_iter().map(|p| gpurt_process_t { pid: p.pid, used_bytes: p.used_gpu_memory }).collect())
}
