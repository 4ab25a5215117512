//! The synchronisation debug mode (`torch.cuda.set_sync_debug_mode`): every gpurt
//! call that blocks the host on the device reports itself when it is on.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{Error, Result, Status};
use crate::log;

/// What happens at a call that blocks the host on the device (gpurt_set_sync_debug_mode, torch.cuda.set_sync_debug_mode).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gpurt_sync_debug_mode_t {
    /// Synchronising calls run silently (the default).
    GPURT_SYNC_DEBUG_OFF = 0,
    /// Synchronising calls run and log a warning naming the call, whatever the log level.
    GPURT_SYNC_DEBUG_WARN = 1,
    /// Synchronising calls fail with `GPURT_ERROR_SYNCHRONIZING_CALL` and do nothing.
    GPURT_SYNC_DEBUG_ERROR = 2,
}

pub use gpurt_sync_debug_mode_t as Mode;

impl Mode {
    pub fn from_raw(raw: i32) -> Option<Mode> {
        [Mode::GPURT_SYNC_DEBUG_OFF, Mode::GPURT_SYNC_DEBUG_WARN, Mode::GPURT_SYNC_DEBUG_ERROR]
            .into_iter()
            .find(|m| *m as i32 == raw)
    }
}

static MODE: AtomicU8 = AtomicU8::new(Mode::GPURT_SYNC_DEBUG_OFF as u8);

pub fn set_mode(mode: Mode) {
    MODE.store(mode as u8, Ordering::Relaxed);
}

pub fn mode() -> Mode {
    Mode::from_raw(MODE.load(Ordering::Relaxed) as i32).unwrap_or(Mode::GPURT_SYNC_DEBUG_OFF)
}

/// Called first by every synchronising operation, before it does anything.
#[inline]
pub fn on_blocking_call(what: &str) -> Result<()> {
    match MODE.load(Ordering::Relaxed) {
        0 => Ok(()),
        1 => {
            log::force(log::Level::Warn, &format!("synchronizing call: {what} blocks the host on the device"));
            Ok(())
        }
        _ => Err(Error::new(
            Status::GPURT_ERROR_SYNCHRONIZING_CALL,
            format!("{what} would block the host on the device and the sync debug mode is \"error\""),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_treats_a_blocking_call_as_documented() {
        assert_eq!(Mode::from_raw(3), None);
        set_mode(Mode::GPURT_SYNC_DEBUG_OFF);
        assert!(on_blocking_call("stream synchronize").is_ok());
        set_mode(Mode::GPURT_SYNC_DEBUG_WARN);
        assert!(on_blocking_call("stream synchronize").is_ok(), "warn mode lets the call run");
        set_mode(Mode::GPURT_SYNC_DEBUG_ERROR);
        let err = on_blocking_call("stream synchronize").unwrap_err();
        assert_eq!(err.status, Status::GPURT_ERROR_SYNCHRONIZING_CALL);
        assert!(err.message.contains("stream synchronize"));
        assert_eq!(mode(), Mode::GPURT_SYNC_DEBUG_ERROR);
        set_mode(Mode::GPURT_SYNC_DEBUG_OFF);
        assert!(on_blocking_call("event synchronize").is_ok());
    }
}

pub mod ffi {
    use libc::c_int;

    use super::Mode;
    use crate::boundary::{self, Out};
    use crate::error::{gpurt_status_t, Error};

    /// Sets the process-wide sync debug mode (see `gpurt_sync_debug_mode_t`).
    ///
    /// @param mode a gpurt_sync_debug_mode_t
    /// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for another value; or a status every call may give (@ref statuses).
    /// @par Ordering
    /// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
    #[no_mangle]
    pub extern "C" fn gpurt_set_sync_debug_mode(mode: c_int) -> gpurt_status_t {
        boundary::call_anywhere("gpurt_set_sync_debug_mode", || {
            let mode = Mode::from_raw(mode)
                .ok_or_else(|| Error::invalid_argument(format!("sync debug mode {mode} is not 0 (off), 1 (warn) or 2 (error)")))?;
            super::set_mode(mode);
            Ok(())
        })
    }

    /// The current sync debug mode.
    ///
    /// @param[out] mode receives the gpurt_sync_debug_mode_t in force; must not be NULL
    /// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
    /// @par Ordering
    /// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
    #[no_mangle]
    pub extern "C" fn gpurt_get_sync_debug_mode(mode: *mut c_int) -> gpurt_status_t {
        boundary::call_anywhere("gpurt_get_sync_debug_mode", || {
            Out::new(mode, "mode")?.write(super::mode() as c_int);
            Ok(())
        })
    }
}
