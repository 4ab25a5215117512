use libc::{c_int, c_uint};

use crate::boundary::{self, in_ref, Out};
use crate::error::{gpurt_status_t, Error, Status};
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// An event: created, pooled, or opened from another process.
pub struct gpurt_event_s {
    _opaque: [u8; 0],
}
/// The handle of an event: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_event_t = *mut gpurt_event_s;

/// The bytes that carry an interprocess event to another process.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_ipc_event_handle_t {
    /// The driver's IPC event handle's bytes.
    pub reserved: [u8; 64],
}

fn h(event: gpurt_event_t) -> Handle {
    Handle::from_ptr(event)
}

/// Creates an event on `device`. `flags`: `GPURT_EVENT_BLOCKING_SYNC` (synchronize
/// sleeps instead of spinning), `GPURT_EVENT_DISABLE_TIMING` (cheaper, no elapsed
/// time), `GPURT_EVENT_INTERPROCESS` (exportable; needs DISABLE_TIMING),
/// `GPURT_EVENT_EXTERNAL` (recorded or waited on in a capture, an event-record or
/// event-wait node of the graph, which each replay records or waits for: a graph
/// signals a stream outside it, or waits for one).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param flags 0, or GPURT_EVENT_BLOCKING_SYNC, GPURT_EVENT_DISABLE_TIMING, GPURT_EVENT_INTERPROCESS and GPURT_EVENT_EXTERNAL or-ed
/// @param[out] event receives the new event; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_INVALID_ARGUMENT for unknown flags, or INTERPROCESS without DISABLE_TIMING; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] event receives a timing-free event of the device's pool; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param event an event
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not wait for a pending record; allowed during a capture.
#[no_mangle]
pub extern "C" fn gpurt_event_destroy(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_destroy", || super::destroy(h(event)))
}

/// Records `event` on `stream`.
///
/// @param event an event
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) of the event's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a stream of another device; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture the record becomes a graph node.
#[no_mangle]
pub extern "C" fn gpurt_event_record(event: gpurt_event_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_event_record", || super::record(h(event), Handle::from_ptr(stream)))
}

/// Records `event` on this thread's current stream of the event's device.
///
/// @param event an event
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; or a status every call may give (@ref statuses).
/// @par Ordering
/// As gpurt_event_record, on this thread's current stream of the event's device.
#[no_mangle]
pub extern "C" fn gpurt_event_record_current(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_record_current", || super::record_on_current(h(event)))
}

/// `GPURT_SUCCESS` if the work before the last record is done (or the event was never
/// recorded), `GPURT_ERROR_NOT_READY` if not.
///
/// @param event an event
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; GPURT_ERROR_NOT_READY (no message) while the recorded work runs; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not block.
#[no_mangle]
pub extern "C" fn gpurt_event_query(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_query", || match super::query(h(event))? {
        true => Ok(()),
        false => Err(Error::new(Status::GPURT_ERROR_NOT_READY, String::new())),
    })
}

/// Blocks until the work before the last record is done. A synchronising call.
///
/// @param event an event
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks the calling thread until the work before the event's last record is done: a synchronising call for the sync debug mode (GPURT_ERROR_SYNCHRONIZING_CALL in its error mode). Not allowed while a stream of the device is being captured (GPURT_ERROR_STREAM_CAPTURE).
#[no_mangle]
pub extern "C" fn gpurt_event_synchronize(event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_event_synchronize", || super::synchronize(h(event)))
}

/// Milliseconds between two recorded timing events. An unrecorded event or one made
/// with `GPURT_EVENT_DISABLE_TIMING` is `GPURT_ERROR_INVALID_ARGUMENT`; one not yet
/// complete is `GPURT_ERROR_NOT_READY`.
///
/// @param start a timing event recorded first
/// @param end a timing event recorded after `start`
/// @param[out] milliseconds receives the time between the two records; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `start` or `end`; GPURT_ERROR_INVALID_ARGUMENT for an unrecorded or timing-free event; GPURT_ERROR_NOT_READY while one has not completed; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not block.
#[no_mangle]
pub extern "C" fn gpurt_event_elapsed_time(start: gpurt_event_t, end: gpurt_event_t, milliseconds: *mut f32) -> gpurt_status_t {
    boundary::call("gpurt_event_elapsed_time", || {
        let out = Out::new(milliseconds, "milliseconds")?;
        out.write(super::elapsed_ms(h(start), h(end))?);
        Ok(())
    })
}

/// The device an event belongs to.
///
/// @param event an event
/// @param[out] device receives the event's device ordinal; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_event_get_device(event: gpurt_event_t, device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_event_get_device", || {
        let out = Out::new(device, "device")?;
        out.write(super::get(h(event))?.device());
        Ok(())
    })
}

/// The native `CUevent` (usable as `cudaEvent_t`), for the caller's own CUDA calls.
///
/// @param event an event
/// @param[out] native receives the `CUevent`, owned by gpurt: do not destroy it; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_event_native(event: gpurt_event_t, native: *mut *mut libc::c_void) -> gpurt_status_t {
    boundary::call("gpurt_event_native", || {
        let out = Out::new(native, "native")?;
        out.write(super::get(h(event))?.raw as *mut libc::c_void);
        Ok(())
    })
}

/// Exports an interprocess event as bytes for `gpurt_event_open_ipc` in another process.
///
/// @param event an event made with GPURT_EVENT_INTERPROCESS
/// @param[out] ipc receives the bytes to send to the other process; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `event`; GPURT_ERROR_INVALID_ARGUMENT for an event without GPURT_EVENT_INTERPROCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_event_ipc_handle(event: gpurt_event_t, ipc: *mut gpurt_ipc_event_handle_t) -> gpurt_status_t {
    boundary::call("gpurt_event_ipc_handle", || {
        let out = Out::new(ipc, "ipc")?;
        out.write(gpurt_ipc_event_handle_t { reserved: super::ipc_handle(h(event))? });
        Ok(())
    })
}

/// Opens an event another process exported. Destroy it when done.
///
/// @param device the device the event was made on, as this process numbers it
/// @param ipc the bytes from gpurt_event_ipc_handle
/// @param[out] event receives an event to wait on or query; destroy it when done; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; an error where the driver refuses the bytes; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
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
///
/// @param stream the stream that waits
/// @param event the event whose last record it waits for
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream` or `event`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. The host does not wait; an event of another device works.
#[no_mangle]
pub extern "C" fn gpurt_stream_wait_event(stream: gpurt_stream_t, event: gpurt_event_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_wait_event", || super::stream_wait_event(Handle::from_ptr(stream), Handle::from_ptr(event)))
}

/// Work queued on `stream` after this waits for all work queued on `other` so far.
///
/// @param stream the stream that waits
/// @param other the stream whose work so far it waits for
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream` or `other`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. An event is recorded on `other` and waited for on `stream`; the host does not wait. Joins `stream` to `other`'s capture.
#[no_mangle]
pub extern "C" fn gpurt_stream_wait_stream(stream: gpurt_stream_t, other: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_wait_stream", || super::stream_wait_stream(Handle::from_ptr(stream), Handle::from_ptr(other)))
}
