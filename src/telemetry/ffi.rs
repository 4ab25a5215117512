use libc::c_int;

use super::{gpurt_process_t, gpurt_telemetry_t, TELEMETRY_V1_SIZE};
use crate::boundary::{self, write_sized, Out};
use crate::error::gpurt_status_t;

/// The device's readings from NVML (utilization, memory of every process,
/// temperature, power, clocks), into a struct initialised with GPURT_TELEMETRY_INIT.
/// GPURT_ERROR_NOT_SUPPORTED, naming the reason, where NVML does not load.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param telemetry a struct initialised with GPURT_TELEMETRY_INIT
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `telemetry` is NULL or too small; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_NOT_SUPPORTED where NVML does not load; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_telemetry(device: c_int, telemetry: *mut gpurt_telemetry_t) -> gpurt_status_t {
    boundary::call("gpurt_device_telemetry", || {
        Out::new(telemetry, "telemetry")?;
        write_sized(telemetry, &super::telemetry(device)?, TELEMETRY_V1_SIZE, "telemetry")
    })
}

/// The compute processes using `device` (torch.cuda.list_gpu_processes): up to
/// `capacity` of them into `processes` (which may be NULL when `capacity` is 0),
/// and how many there are into `count`.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param processes receives up to `capacity` processes; may be NULL when `capacity` is 0
/// @param capacity entries `processes` holds
/// @param[out] count receives how many processes there are; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_NOT_SUPPORTED where NVML does not load; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_device_processes(device: c_int, processes: *mut gpurt_process_t, capacity: usize, count: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_device_processes", || {
        let out = boundary::ListOut::new(processes, capacity, count, "processes")?;
        out.write(&super::processes(device)?);
        Ok(())
    })
}
