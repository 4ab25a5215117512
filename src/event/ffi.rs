use libc::{c_int, c_uint};

use crate::boundary::{self, in_ref, Out};
use crate::error::{gpurt_status_t, Error, Status};
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// An event: created, pooled, or opened from another process.
pub struct gpurt_event_s {
    _opaque: [u8; 0],
}
pub type gpurt_event_t = *mut gpurt_event_s;

/// The bytes that carry an interprocess event to another process.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_ipc_event_handle_t {
    pub reserved: [u8; 64],
}

fn h(event: gpurt_event_t) -> Handle {
    Handle::from_ptr(event)
}

/// Creates an event on `device`. `flags`: `GPURT_EVENT_BLOCKING_SYNC` (synchronize
/// sleeps instead of spinning), `GPURT_EVENT_DISABLE_TIMING` (cheaper, no elapsed
/// time), `GPURT_EVENT_INTERPROCESS` (exportable; needs DISABLE_TIMING).
#[no_mangle]
pub extern "C" fn gpurt_event_create(device: c_int, flags: c_uint, event: *mut gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_create", || {
        let out = Out::new(event, "event")?;
        out.write(super::create(device, flags)?.to_ptr());
        Ok(())
    })
}

/// A timing-free event from `device`'s pool: no driver call when one is cached.
/// `gpurt_event_destroy` returns it to the pool.
#[no_mangle]
pub extern "C" fn gpurt_event_pool_get(device: c_int, event: *mut gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_pool_get", || {
        let out = Out::new(event, "event")?;
        out.write(super::pool_get(device)?.to_ptr());
        Ok(())
    })
}

/// Destroys an event, or returns a pooled one to its pool. Safe while a record is
/// still pending.
#[no_mangle]
pub extern "C" fn gpurt_event_destroy(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_destroy", || super::destroy(h(event)))
}

/// Records `event` on `stream`.
#[no_mangle]
pub extern "C" fn gpurt_event_record(event: gpurt_event_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_event_record", || super::record(h(event), Handle::from_ptr(stream)))
}

/// Records `event` on this thread's current stream of the event's device.
#[no_mangle]
pub extern "C" fn gpurt_event_record_current(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_record_current", || super::record_on_current(h(event)))
}

/// `GPURT_SUCCESS` if the work before the last record is done (or the event was never
/// recorded), `GPURT_ERROR_NOT_READY` if not.
#[no_mangle]
pub extern "C" fn gpurt_event_query(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_query", || match super::query(h(event))? {
        true => Ok(()),
        false => Err(Error::new(Status::GPURT_ERROR_NOT_READY, String::new())),
    })
}

/// Blocks until the work before the last record is done. A synchronising call.
#[no_mangle]
pub extern "C" fn gpurt_event_synchronize(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_synchronize", || super::synchronize(h(event)))
}

/// Milliseconds between two recorded timing events. An unrecorded event or one made
/// with `GPURT_EVENT_DISABLE_TIMING` is `GPURT_ERROR_INVALID_ARGUMENT`; one not yet
/// complete is `GPURT_ERROR_NOT_READY`.
#[no_mangle]
pub extern "C" fn gpurt_event_elapsed_time(start: gpurt_event_t, end: gpurt_event_t, milliseconds: *mut f32) -> gpurt_status_t {
    boundary::call("gpurt_event_elapsed_time", || {
        let out = Out::new(milliseconds, "milliseconds")?;
        out.write(super::elapsed_ms(h(start), h(end))?);
        Ok(())
    })
}

/// The device an event belongs to.
#[no_mangle]
pub extern "C" fn gpurt_event_get_device(event: gpurt_event_t, device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_event_get_device", || {
        let out = Out::new(device, "device")?;
        out.write(super::get(h(event))?.device());
        Ok(())
    })
}

/// The native `CUevent` (usable as `cudaEvent_t`), for the caller's own CUDA calls.
#[no_mangle]
pub extern "C" fn gpurt_event_native(event: gpurt_event_t, native: *mut *mut libc::c_void) -> gpurt_status_t {
    boundary::call("gpurt_event_native", || {
        let out = Out::new(native, "native")?;
        out.write(super::get(h(event))?.raw as *mut libc::c_void);
        Ok(())
    })
}

/// Exports an interprocess event as bytes for `gpurt_event_open_ipc` in another process.
#[no_mangle]
pub extern "C" fn gpurt_event_ipc_handle(event: gpurt_event_t, ipc: *mut gpurt_ipc_event_handle_t) -> gpurt_status_t {
    boundary::call("gpurt_event_ipc_handle", || {
        let out = Out::new(ipc, "ipc")?;
        out.write(gpurt_ipc_event_handle_t { reserved: super::ipc_handle(h(event))? });
        Ok(())
    })
}

/// Opens an event another process exported. Destroy it when done.
#[no_mangle]
pub extern "C" fn gpurt_event_open_ipc(device: c_int, ipc: *const gpurt_ipc_event_handle_t, event: *mut gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_open_ipc", || {
        let out = Out::new(event, "event")?;
        let ipc = in_ref(ipc, "ipc")?;
        out.write(super::open_ipc(device, &ipc.reserved)?.to_ptr());
        Ok(())
    })
}

/// Work queued on `stream` after this waits for `event`'s last record.
#[no_mangle]
pub extern "C" fn gpurt_stream_wait_event(stream: gpurt_stream_t, event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_wait_event", || super::stream_wait_event(Handle::from_ptr(stream), Handle::from_ptr(event)))
}

/// Work queued on `stream` after this waits for all work queued on `other` so far.
#[no_mangle]
pub extern "C" fn gpurt_stream_wait_stream(stream: gpurt_stream_t, other: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_wait_stream", || super::stream_wait_stream(Handle::from_ptr(stream), Handle::from_ptr(other)))
}
