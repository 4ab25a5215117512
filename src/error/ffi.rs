use libc::{c_char, c_int};

use crate::boundary::{self, Out};
use crate::error::{gpurt_status_t, Status};

/// A static, human-readable name for a status; never NULL, also for unknown values.
///
/// @param status any value, a gpurt_status_t or not
/// @return a static string naming the status (unknown values get one too); never NULL.
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_status_string(status: c_int) -> *const c_char {
    Status::from_raw(status).map_or(c"unknown status", Status::description).as_ptr()
}

/// The detail of the most recent failing gpurt call on this thread: which call, which
/// argument, the CUDA error's name and text. Empty if none failed. Valid until the
/// next failing call on this thread; never NULL. Successful calls leave it unchanged.
///
/// @return this thread's last failure's detail, or an empty string; never NULL. Valid until this thread's next failing call.
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_last_error_message() -> *const c_char {
    crate::error::last_error_message_ptr()
}

/// The raw CUresult of the most recent failing call on this thread, 0 if it did not
/// come from the driver.
///
/// @param[out] cuda_result receives the raw CUresult of this thread's last failing call, 0 if it was not the driver's; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_last_cuda_error(cuda_result: *mut c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_last_cuda_error", || {
        Out::new(cuda_result, "cuda_result")?.write(crate::error::last_cuda_code());
        Ok(())
    })
}

/// gpurt's version as `major * 10000 + minor * 100 + patch`, matching the header's
/// `GPURT_VERSION` for the header the caller compiled against.
///
/// @return gpurt's version as major × 10000 + minor × 100 + patch (compare with GPURT_VERSION).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_version() -> c_int {
    crate::VERSION_NUMBER
}
