//! NVML (`libnvidia-ml.so.1`), loaded at run time the first time telemetry is
//! asked for, as the driver is: without it the library works and telemetry calls
//! say NVML is missing. Only the functions gpurt uses, with NVML's C types.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};
use std::sync::OnceLock;

use crate::error::{Error, Result, Status};

pub type Device = *mut c_void;

const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const NVML_ERROR_INSUFFICIENT_SIZE: c_int = 7;

#[repr(C)]
#[derive(Default)]
pub struct Utilization {
    pub gpu: c_uint,
    pub memory: c_uint,
}

#[repr(C)]
#[derive(Default)]
pub struct Memory {
    pub total: c_ulonglong,
    pub free: c_ulonglong,
    pub used: c_ulonglong,
}

/// `nvmlProcessInfo_t` (the v2 and v3 layouts agree).
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct ProcessInfo {
    pub pid: c_uint,
    pub used_gpu_memory: c_ulonglong,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

pub(crate) const TEMPERATURE_GPU: c_int = 0;
pub(crate) const CLOCK_SM: c_int = 1;
pub(crate) const CLOCK_MEM: c_int = 2;

/// The entry points, resolved once.
pub struct Nvml {
    _lib: libloading::Library,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    by_uuid: unsafe extern "C" fn(*const c_char, *mut Device) -> c_int,
    utilization: unsafe extern "C" fn(Device, *mut Utilization) -> c_int,
    memory: unsafe extern "C" fn(Device, *mut Memory) -> c_int,
    temperature: unsafe extern "C" fn(Device, c_int, *mut c_uint) -> c_int,
    power_usage: unsafe extern "C" fn(Device, *mut c_uint) -> c_int,
    power_limit: unsafe extern "C" fn(Device, *mut c_uint) -> c_int,
    clock: unsafe extern "C" fn(Device, c_int, *mut c_uint) -> c_int,
    throttle_reasons: unsafe extern "C" fn(Device, *mut c_ulonglong) -> c_int,
    processes: unsafe extern "C" fn(Device, *mut c_uint, *mut ProcessInfo) -> c_int,
}

// The entry points are plain functions; NVML is thread-safe after nvmlInit.
unsafe impl Send for Nvml {}
unsafe impl Sync for Nvml {}

/// The library's name, in the message a caller sees where it is missing.
const LIBRARY: &str = "libnvidia-ml.so.1";

fn load() -> std::result::Result<Nvml, String> {
    let lib = unsafe { libloading::Library::new(LIBRARY) }.map_err(|e| format!("{LIBRARY} does not load ({e})"))?;
    macro_rules! symbol {
        ($($name:literal)|+) => {{
            let mut found = None;
            $(if found.is_none() {
                found = unsafe { lib.get($name.as_bytes()) }.ok().map(|s: libloading::Symbol<_>| *s);
            })+
            found.ok_or_else(|| format!("{LIBRARY} lacks {}", [$($name),+].join(" / ")))?
        }};
    }
    let init: unsafe extern "C" fn() -> c_int = symbol!("nvmlInit_v2");
    let nvml = Nvml {
        error_string: symbol!("nvmlErrorString"),
        by_uuid: symbol!("nvmlDeviceGetHandleByUUID"),
        utilization: symbol!("nvmlDeviceGetUtilizationRates"),
        memory: symbol!("nvmlDeviceGetMemoryInfo"),
        temperature: symbol!("nvmlDeviceGetTemperature"),
        power_usage: symbol!("nvmlDeviceGetPowerUsage"),
        power_limit: symbol!("nvmlDeviceGetEnforcedPowerLimit"),
        clock: symbol!("nvmlDeviceGetClockInfo"),
        throttle_reasons: symbol!("nvmlDeviceGetCurrentClocksEventReasons" | "nvmlDeviceGetCurrentClocksThrottleReasons"),
        processes: symbol!("nvmlDeviceGetComputeRunningProcesses_v3" | "nvmlDeviceGetComputeRunningProcesses_v2"),
        _lib: lib,
    };
    let code = unsafe { init() };
    if code != NVML_SUCCESS {
        return Err(format!("nvmlInit failed: {}", nvml.describe(code)));
    }
    Ok(nvml)
}

/// NVML, initialised once; an error saying why not where it cannot be.
pub fn get() -> Result<&'static Nvml> {
    static NVML: OnceLock<std::result::Result<Nvml, String>> = OnceLock::new();
    NVML.get_or_init(load).as_ref().map_err(|why| Error::new(Status::GPURT_ERROR_NOT_SUPPORTED, format!("no NVML telemetry: {why}")))
}

impl Nvml {
    fn describe(&self, code: c_int) -> String {
        let text = unsafe { (self.error_string)(code) };
        let text = if text.is_null() { "unknown".into() } else { unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned() };
        format!("NVML error {code}: {text}")
    }

    fn check(&self, code: c_int, call: &str) -> Result<()> {
        match code {
            NVML_SUCCESS => Ok(()),
            NVML_ERROR_NOT_SUPPORTED => Err(Error::not_supported(format!("{call}: not supported on this GPU"))),
            _ => Err(Error::new(Status::GPURT_ERROR_INTERNAL, format!("{call}: {}", self.describe(code)))),
        }
    }

    /// A reading that NVML may not support on a GPU: `None` then.
    fn optional(&self, code: c_int, call: &str) -> Result<bool> {
        match self.check(code, call) {
            Ok(()) => Ok(true),
            Err(e) if e.status == Status::GPURT_ERROR_NOT_SUPPORTED => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The NVML device with the CUDA UUID `uuid`.
    pub fn device(&self, uuid: &[u8; 16]) -> Result<Device> {
        let u = uuid;
        let text = format!(
            "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}\0",
            u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]
        );
        let mut device = std::ptr::null_mut();
        self.check(unsafe { (self.by_uuid)(text.as_ptr().cast(), &mut device) }, "nvmlDeviceGetHandleByUUID")?;
        Ok(device)
    }

    pub fn utilization(&self, d: Device) -> Result<Option<Utilization>> {
        let mut u = Utilization::default();
        Ok(self.optional(unsafe { (self.utilization)(d, &mut u) }, "nvmlDeviceGetUtilizationRates")?.then_some(u))
    }

    pub fn memory(&self, d: Device) -> Result<Memory> {
        let mut m = Memory::default();
        self.check(unsafe { (self.memory)(d, &mut m) }, "nvmlDeviceGetMemoryInfo")?;
        Ok(m)
    }

    /// A `c_uint` reading by `f(device, &value)`; `None` where not supported.
    fn reading(&self, call: &str, f: impl FnOnce(*mut c_uint) -> c_int) -> Result<Option<u32>> {
        let mut value = 0;
        Ok(self.optional(f(&mut value), call)?.then_some(value))
    }

    pub fn temperature(&self, d: Device) -> Result<Option<u32>> {
        self.reading("nvmlDeviceGetTemperature", |v| unsafe { (self.temperature)(d, TEMPERATURE_GPU, v) })
    }

    pub fn power_usage(&self, d: Device) -> Result<Option<u32>> {
        self.reading("nvmlDeviceGetPowerUsage", |v| unsafe { (self.power_usage)(d, v) })
    }

    pub fn power_limit(&self, d: Device) -> Result<Option<u32>> {
        self.reading("nvmlDeviceGetEnforcedPowerLimit", |v| unsafe { (self.power_limit)(d, v) })
    }

    pub fn clock(&self, d: Device, which: c_int) -> Result<Option<u32>> {
        self.reading("nvmlDeviceGetClockInfo", |v| unsafe { (self.clock)(d, which, v) })
    }

    pub fn throttle_reasons(&self, d: Device) -> Result<Option<u64>> {
        let mut reasons = 0;
        Ok(self.optional(unsafe { (self.throttle_reasons)(d, &mut reasons) }, "nvmlDeviceGetCurrentClocksEventReasons")?.then_some(reasons))
    }

    /// The compute processes on the device, with their memory.
    pub fn processes(&self, d: Device) -> Result<Vec<ProcessInfo>> {
        let mut capacity: c_uint = 16;
        loop {
            let mut infos = vec![ProcessInfo::default(); capacity as usize];
            let mut count = capacity;
            match unsafe { (self.processes)(d, &mut count, infos.as_mut_ptr()) } {
                NVML_ERROR_INSUFFICIENT_SIZE if capacity < 1 << 16 => capacity = count.max(capacity * 2),
                code => {
                    self.check(code, "nvmlDeviceGetComputeRunningProcesses")?;
                    infos.truncate(count as usize);
                    return Ok(infos);
                }
            }
        }
    }
}
