use libc::{c_char, c_int, c_uint, c_void};

use super::gpurt_snapshot_format_t;
use crate::alloc::history;
use crate::boundary::{self, in_str, Out};
use crate::error::{gpurt_status_t, Error};

/// Starts (`enabled` non-zero) or stops recording the allocator's memory history: a
/// ring per device of its allocations, frees, segment and mapping changes, and
/// out-of-memory failures, keeping the newest `max_entries` (0: 10 000). Flags:
/// `GPURT_HISTORY_STACKS` (each event keeps the caller's native stack, symbolised when
/// a snapshot is written), `GPURT_HISTORY_CLEAR` (forget the events so far).
/// Stopping keeps the events for a snapshot. (`torch.cuda.memory._record_memory_history`.)
///
/// @param enabled non-zero starts recording, zero stops
/// @param max_entries events kept per device (0: 10 000; at most GPURT_HISTORY_MAX_ENTRIES)
/// @param flags GPURT_HISTORY_STACKS, GPURT_HISTORY_CLEAR, or 0
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for unknown flags or too many entries; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_record_history(enabled: c_int, max_entries: usize, flags: c_uint) -> gpurt_status_t {
    boundary::call("gpurt_memory_record_history", || history::record_history(enabled != 0, max_entries, flags))
}

/// Attaches `name` to the history events of what this thread does next, until the
/// matching `gpurt_memory_annotate_pop`; nested names join as "outer > inner".
///
/// @param name the annotation, NUL-terminated
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `name` is NULL or not UTF-8; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_annotate_push(name: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_memory_annotate_push", || {
        history::annotate_push(in_str(name, "name")?);
        Ok(())
    })
}

/// Removes this thread's innermost annotation.
///
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT when this thread has no annotation open; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_annotate_pop() -> gpurt_status_t {
    boundary::call("gpurt_memory_annotate_pop", || history::annotate_pop().map(drop))
}

/// Writes a snapshot of `device`'s memory (`GPURT_CURRENT_DEVICE`: the current one)
/// to the file `path` as `format`: every segment of its pools with its blocks
/// (address, size, requested size, state, pool, stream, and where history recorded
/// them, the allocating stack and annotation) and the device's history.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param format a gpurt_snapshot_format_t: JSON, pickle or HTML
/// @param path the file to write; replaced atomically (a link there is replaced, not followed; a device such as /dev/stdout is written to)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `path` or an unknown format; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_IO where the file cannot be written, with the system's reason; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_snapshot(device: c_int, format: c_int, path: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_memory_snapshot", || super::device::write(device, gpurt_snapshot_format_t::from_raw(format)?, in_str(path, "path")?))
}

/// `gpurt_memory_snapshot` into a caller's buffer: `*size` gets the snapshot's
/// bytes; a `buffer` too small (or NULL with `capacity` 0, to ask the size) is
/// filled with nothing and gives GPURT_ERROR_INVALID_ARGUMENT.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param format a gpurt_snapshot_format_t
/// @param buffer receives the snapshot; may be NULL when `capacity` is 0
/// @param capacity bytes `buffer` holds
/// @param[out] size receives the snapshot's size in bytes; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for an unknown format or a buffer too small (`*size` still says how large); GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_snapshot_buffer(device: c_int, format: c_int, buffer: *mut c_void, capacity: usize, size: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_memory_snapshot_buffer", || {
        let size = Out::new(size, "size")?;
        if capacity > 0 && buffer.is_null() {
            return Err(Error::invalid_argument(format!("argument `buffer` is NULL but `capacity` is {capacity}")));
        }
        let bytes = super::device::bytes(device, gpurt_snapshot_format_t::from_raw(format)?)?;
        size.write(bytes.len());
        if bytes.len() > capacity {
            return Err(Error::invalid_argument(format!("the snapshot takes {} bytes; the buffer holds {capacity}", bytes.len())));
        }
        // SAFETY: the caller gives `capacity` writable bytes at `buffer` (not NULL here:
        // `capacity` ≥ the length, and a NULL buffer has capacity 0).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), bytes.len()) };
        Ok(())
    })
}
