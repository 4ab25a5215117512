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
#[no_mangle]
pub extern "C" fn gpurt_memory_record_history(enabled: c_int, max_entries: usize, flags: c_uint) -> gpurt_status_t {
    boundary::call("gpurt_memory_record_history", || history::record_history(enabled != 0, max_entries, flags))
}

/// Attaches `name` to the history events of what this thread does next, until the
/// matching `gpurt_memory_annotate_pop`; nested names join as "outer > inner".
#[no_mangle]
pub extern "C" fn gpurt_memory_annotate_push(name: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_memory_annotate_push", || {
        history::annotate_push(in_str(name, "name")?);
        Ok(())
    })
}

/// Removes this thread's innermost annotation.
#[no_mangle]
pub extern "C" fn gpurt_memory_annotate_pop() -> gpurt_status_t {
    boundary::call("gpurt_memory_annotate_pop", || history::annotate_pop().map(drop))
}

/// Writes a snapshot of `device`'s memory (`GPURT_CURRENT_DEVICE`: the current one)
/// to the file `path` as `format`: every segment of its pools with its blocks
/// (address, size, requested size, state, pool, stream, and where history recorded
/// them, the allocating stack and annotation) and the device's history.
#[no_mangle]
pub extern "C" fn gpurt_memory_snapshot(device: c_int, format: c_int, path: *const c_char) -> gpurt_status_t {
    boundary::call("gpurt_memory_snapshot", || super::device::write(device, gpurt_snapshot_format_t::from_raw(format)?, in_str(path, "path")?))
}

/// `gpurt_memory_snapshot` into a caller's buffer: `*size` gets the snapshot's
/// bytes; a `buffer` too small (or NULL with `capacity` 0, to ask the size) is
/// filled with nothing and gives GPURT_ERROR_INVALID_ARGUMENT.
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
