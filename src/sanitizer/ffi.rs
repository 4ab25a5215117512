use libc::{c_char, c_int, c_void};

use super::Access;
use crate::boundary::{self, check_range, in_str, Out};
use crate::error::{gpurt_status_t, Error, Status};
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// `gpurt_sanitizer_access`: the work reads the range.
pub const GPURT_ACCESS_READ: c_int = 1;
/// `gpurt_sanitizer_access`: the work writes the range (`READ | WRITE`: both, checked as a write).
pub const GPURT_ACCESS_WRITE: c_int = 2;

/// Turns the stream sanitizer on (non-zero) or off. Off (the default, unless
/// `GPURT_SANITIZER=1`), every hook costs one branch. Turning it off forgets what it
/// tracked; turning it on again starts afresh.
///
/// @param on non-zero turns it on
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_sanitizer_enable(on: c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_sanitizer_enable", || {
        super::set_enabled(on != 0);
        Ok(())
    })
}

/// Whether the sanitizer is on: 1 or 0.
///
/// @param[out] on receives 1 or 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_sanitizer_is_enabled(on: *mut c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_sanitizer_is_enabled", || {
        Out::new(on, "on")?.write(super::enabled() as c_int);
        Ok(())
    })
}

/// With non-zero, a report aborts the process after it is logged (also
/// `GPURT_SANITIZER_ABORT=1`): for test suites that must stop at the first race.
///
/// @param abort non-zero: a report aborts the process
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_sanitizer_set_abort(abort: c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_sanitizer_set_abort", || {
        super::set_abort_on_race(abort != 0);
        Ok(())
    })
}

/// With zero, accesses no longer keep their native stacks (reports then name the
/// streams, tags and ranges only); non-zero keeps them again (the default; also
/// `GPURT_SANITIZER_STACKS=0`). A stack costs microseconds an access.
///
/// @param keep non-zero keeps each access's native stack
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_sanitizer_set_stacks(keep: c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_sanitizer_set_stacks", || {
        super::set_stacks(keep != 0);
        Ok(())
    })
}

/// Races and unsafe frees reported since the process started.
///
/// @param[out] n receives the reports so far; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_sanitizer_report_count(n: *mut u64) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_sanitizer_report_count", || {
        Out::new(n, "n")?.write(super::report_count());
        Ok(())
    })
}

/// Declares that work just queued (or about to be queued) on `stream` reads or
/// writes `size` bytes at `ptr` (`access`: `GPURT_ACCESS_READ`, `GPURT_ACCESS_WRITE`
/// or both). `tag` (may be NULL) names the work in reports. A race with an earlier
/// access on another stream that nothing orders is reported through the log
/// callback at error level, with the word "race", and counted. On a capturing
/// stream, the access counts at each replay of the graph. While the sanitizer is
/// off, only `access` is checked and the call returns at once.
///
/// @param ptr the memory accessed
/// @param size bytes from `ptr`
/// @param access GPURT_ACCESS_READ, GPURT_ACCESS_WRITE or both
/// @param stream the stream whose work accesses it
/// @param tag names the work in reports; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for an unknown `access`; GPURT_ERROR_INVALID_HANDLE for a bad `stream` while the sanitizer is on; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_sanitizer_access(ptr: *const c_void, size: usize, access: c_int, stream: gpurt_stream_t, tag: *const c_char) -> gpurt_status_t {
    if super::known_off() && VALID_ACCESS.contains(&access) {
        return Status::GPURT_SUCCESS;
    }
    declare_access(ptr, size, access, stream, tag)
}

const VALID_ACCESS: std::ops::RangeInclusive<c_int> = GPURT_ACCESS_READ..=GPURT_ACCESS_READ | GPURT_ACCESS_WRITE;

#[cold]
#[inline(never)]
fn declare_access(ptr: *const c_void, size: usize, access: c_int, stream: gpurt_stream_t, tag: *const c_char) -> gpurt_status_t {
    if VALID_ACCESS.contains(&access) && !super::enabled() {
        return Status::GPURT_SUCCESS;
    }
    boundary::call("gpurt_sanitizer_access", || {
        let access = match access {
            GPURT_ACCESS_READ => Access::Read,
            GPURT_ACCESS_WRITE | 3 => Access::Write,
            _ => {
                return Err(Error::invalid_argument(format!(
                    "access {access} is not GPURT_ACCESS_READ (1), GPURT_ACCESS_WRITE (2) or both (3)"
                )))
            }
        };
        check_range(ptr as u64, size as u64, "ptr")?;
        let s = crate::stream::get(Handle::from_ptr(stream))?;
        let tag = if tag.is_null() { "" } else { in_str(tag, "tag")? };
        super::access(s, ptr as u64, size as u64, access, tag);
        Ok(())
    })
}
