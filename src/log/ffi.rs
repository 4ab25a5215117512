use libc::{c_int, c_void};

use super::Level;
use crate::boundary;
use crate::error::{gpurt_status_t, Error};

/// Sets the log level: 0 off, 1 error, 2 warn, 3 info, 4 debug. Overrides `GPURT_LOG`.
///
/// @param level 0 off, 1 error, 2 warn, 3 info, 4 debug
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for another value; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_set_log_level(level: c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_set_log_level", || {
        let level = Level::from_raw(level)
            .ok_or_else(|| Error::invalid_argument(format!("log level {level} is not in 0..=4")))?;
        super::set_level(level);
        Ok(())
    })
}

/// A log sink: `(level, NUL-terminated message, user pointer)`; NULL means stderr.
pub type gpurt_log_callback_t =
    Option<unsafe extern "C" fn(level: c_int, message: *const libc::c_char, user: *mut c_void)>;

/// Routes log messages to `callback(level, message, user)` instead of stderr; NULL
/// restores stderr. The callback may run on any thread and must not call gpurt's
/// logging functions. Messages are still filtered by the log level.
///
/// @param callback `void callback(int level, const char *message, void *user)`, or NULL for stderr
/// @param user passed to `callback` unchanged
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_set_log_callback(callback: gpurt_log_callback_t, user: *mut c_void) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_set_log_callback", || {
        super::set_callback(callback, user);
        Ok(())
    })
}
