use libc::{c_int, c_uint, c_void};

use crate::boundary::{self, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;

/// A stream: created, pooled, a device's default stream, or a wrapped native one.
pub struct gpurt_stream_s {
    _opaque: [u8; 0],
}
/// The handle of a stream: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_stream_t = *mut gpurt_stream_s;

/// A host function for `gpurt_stream_launch_host_func`; it must not call CUDA.
pub type gpurt_host_fn_t = Option<unsafe extern "C" fn(user: *mut c_void)>;

/// A stream's capture status, from `gpurt_stream_capture_status`.
#[repr(C)]
pub enum gpurt_capture_status_t {
    GPURT_CAPTURE_STATUS_NONE = 0,
    GPURT_CAPTURE_STATUS_ACTIVE = 1,
    GPURT_CAPTURE_STATUS_INVALIDATED = 2,
}

fn h(stream: gpurt_stream_t) -> Handle {
    Handle::from_ptr(stream)
}

fn write_handle(out: Out<gpurt_stream_t>, handle: Handle) {
    out.write(handle.to_ptr())
}

/// Creates a stream on `device` with `flags` (0 or `GPURT_STREAM_NON_BLOCKING`) and
/// `priority` in the device's range (see `gpurt_stream_priority_range`; out of range
/// is `GPURT_ERROR_INVALID_ARGUMENT`). Costs a driver call (about 6 µs with destroy);
/// `gpurt_stream_from_pool` does not.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param flags 0 or GPURT_STREAM_NON_BLOCKING
/// @param priority in the device's range (gpurt_stream_priority_range)
/// @param[out] stream receives the new stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_INVALID_ARGUMENT for unknown flags or a priority out of range; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_create(device: c_int, flags: c_uint, priority: c_int, stream: *mut gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_create", || {
        let out = Out::new(stream, "stream")?;
        write_handle(out, super::create(device, flags, priority)?);
        Ok(())
    })
}

/// Destroys a created stream's handle. Work already queued still runs and this call
/// does not wait. The driver stream is kept for a later `gpurt_stream_create` of the
/// same device, flags and priority, so that memory cached for it is never handed to a
/// new stream while that work runs (the driver would reuse the stream's value).
/// Pooled and default streams are left alone (success); a wrapped native stream is
/// released, never destroyed.
///
/// @param stream a stream
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not wait for the stream's queued work, which still runs.
#[no_mangle]
pub extern "C" fn gpurt_stream_destroy(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_destroy", || super::destroy(h(stream)))
}

/// The device's stream priorities: `least` (the default, numerically largest) and
/// `greatest` (highest priority, numerically smallest).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] least receives the lowest priority (the default); must not be NULL
/// @param[out] greatest receives the highest priority; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_priority_range(device: c_int, least: *mut c_int, greatest: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_stream_priority_range", || {
        let (least, greatest) = (Out::new(least, "least")?, Out::new(greatest, "greatest")?);
        let (l, g) = super::priority_range(device)?;
        least.write(l);
        greatest.write(g);
        Ok(())
    })
}

/// The legacy default stream of `device` (`cudaStreamLegacy`).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] stream receives the device's legacy default stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_default(device: c_int, stream: *mut gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_default", || {
        let out = Out::new(stream, "stream")?;
        write_handle(out, super::legacy_default(device)?);
        Ok(())
    })
}

/// The per-thread default stream of `device` (`cudaStreamPerThread`).
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] stream receives the device's per-thread default stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_per_thread(device: c_int, stream: *mut gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_per_thread", || {
        let out = Out::new(stream, "stream")?;
        write_handle(out, super::per_thread_default(device)?);
        Ok(())
    })
}

/// Wraps a native `cudaStream_t`/`CUstream` of `device`'s context. gpurt never
/// destroys it; `gpurt_stream_destroy` releases only the handle.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param native a `CUstream` of `device`'s primary context
/// @param[out] stream receives a handle for it; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_INVALID_ARGUMENT for a NULL `native`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_wrap(device: c_int, native: *mut c_void, stream: *mut gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_wrap", || {
        let out = Out::new(stream, "stream")?;
        write_handle(out, super::wrap(device, native.cast())?);
        Ok(())
    })
}

/// The native `CUstream` (usable as `cudaStream_t`) for cuBLAS, cuDNN, kernels.
///
/// @param stream a stream
/// @param[out] native receives the `CUstream`, owned by gpurt (or by the caller, for a wrapped one); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_native(stream: gpurt_stream_t, native: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_stream_native", || {
        let out = Out::new(native, "native")?;
        out.write(super::get(h(stream))?.raw as *mut c_void);
        Ok(())
    })
}

/// A non-blocking stream from `device`'s pool (32 per priority, handed out
/// round-robin as PyTorch does); `high_priority` picks the greatest priority. No
/// driver call after the first; destroying it is a no-op.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param high_priority non-zero: from the highest-priority pool
/// @param[out] stream receives a pooled stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_from_pool(device: c_int, high_priority: c_int, stream: *mut gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_from_pool", || {
        let out = Out::new(stream, "stream")?;
        write_handle(out, super::from_pool(device, high_priority != 0)?);
        Ok(())
    })
}

/// Makes `stream` this thread's current stream of its device (the current device is
/// unchanged, as `torch.cuda.set_stream`).
///
/// @param stream a stream
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_set_stream(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_set_stream", || super::set_current(h(stream)))
}

/// This thread's current stream of `device`: the last one set, or the legacy default.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] stream receives this thread's current stream of `device`; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_current_stream(device: c_int, stream: *mut gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_current_stream", || {
        let out = Out::new(stream, "stream")?;
        write_handle(out, super::current(device)?);
        Ok(())
    })
}

/// Enters a stream scope, like `with torch.cuda.stream(s)`: `stream` and its device
/// become current on this thread until the matching `gpurt_stream_pop`. Scopes nest.
///
/// @param stream a stream
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_push(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_push", || super::push(h(stream)))
}

/// Leaves the innermost stream scope, restoring the previous stream and device.
///
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT when this thread has no scope open; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_pop() -> gpurt_status_t {
    boundary::call("gpurt_stream_pop", super::pop)
}

/// `GPURT_SUCCESS` if all work on `stream` is done, `GPURT_ERROR_NOT_READY` if not.
///
/// @param stream a stream
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_READY (no message) while work is pending; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not block. Not allowed on a capturing stream (GPURT_ERROR_STREAM_CAPTURE).
#[no_mangle]
pub extern "C" fn gpurt_stream_query(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_query", || match super::query(h(stream))? {
        true => Ok(()),
        false => Err(crate::error::Error::new(crate::Status::GPURT_ERROR_NOT_READY, String::new())),
    })
}

/// Blocks until all work on `stream` is done. A synchronising call.
///
/// @param stream a stream
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks the calling thread until all work queued on `stream` is done: a synchronising call for the sync debug mode (GPURT_ERROR_SYNCHRONIZING_CALL in its error mode). Not allowed while a stream of the device is being captured (GPURT_ERROR_STREAM_CAPTURE).
#[no_mangle]
pub extern "C" fn gpurt_stream_synchronize(stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_stream_synchronize", || super::synchronize(h(stream)))
}

// gpurt_stream_wait_event and gpurt_stream_wait_stream are in event/ffi.rs: they need events.

/// Queues `func(user)` on `stream`, called once on a driver thread after the work
/// before it. `func` must not call CUDA or gpurt functions that touch the GPU.
///
/// @param stream a stream
/// @param func the function; must not be NULL, and must not call CUDA
/// @param user passed to `func`
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `func`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. In a capture it becomes a host node.
#[no_mangle]
pub extern "C" fn gpurt_stream_launch_host_func(stream: gpurt_stream_t, func: gpurt_host_fn_t, user: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_stream_launch_host_func", || super::launch_host_func(h(stream), func, user))
}

/// The device a stream belongs to.
///
/// @param stream a stream
/// @param[out] device receives its device ordinal; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_get_device(stream: gpurt_stream_t, device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_stream_get_device", || {
        let out = Out::new(device, "device")?;
        out.write(super::get(h(stream))?.device());
        Ok(())
    })
}

/// A stream's flags (0 or `GPURT_STREAM_NON_BLOCKING`).
///
/// @param stream a stream
/// @param[out] flags receives 0 or GPURT_STREAM_NON_BLOCKING; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_get_flags(stream: gpurt_stream_t, flags: *mut c_uint) -> gpurt_status_t {
    boundary::call("gpurt_stream_get_flags", || {
        let out = Out::new(flags, "flags")?;
        out.write(super::get(h(stream))?.flags());
        Ok(())
    })
}

/// A stream's priority.
///
/// @param stream a stream
/// @param[out] priority receives its priority; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_get_priority(stream: gpurt_stream_t, priority: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_stream_get_priority", || {
        let out = Out::new(priority, "priority")?;
        out.write(super::get(h(stream))?.priority());
        Ok(())
    })
}

/// The driver's unique id of a stream (needs a CUDA 12.0 driver, else not supported).
///
/// @param stream a stream
/// @param[out] id receives the driver's id of the stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; GPURT_ERROR_NOT_SUPPORTED on a driver older than CUDA 12.0; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_get_id(stream: gpurt_stream_t, id: *mut u64) -> gpurt_status_t {
    boundary::call("gpurt_stream_get_id", || {
        let out = Out::new(id, "id")?;
        out.write(super::id(h(stream))?);
        Ok(())
    })
}

/// A stream's capture status (`gpurt_capture_status_t`).
///
/// @param stream a stream
/// @param[out] status receives a gpurt_capture_status_t; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_capture_status(stream: gpurt_stream_t, status: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_stream_capture_status", || {
        let out = Out::new(status, "status")?;
        out.write(super::capture_status(h(stream))?);
        Ok(())
    })
}

/// 1 if `stream` is capturing (active or invalidated capture), else 0.
///
/// @param stream a stream
/// @param[out] capturing receives 1 or 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `stream`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_stream_is_capturing(stream: gpurt_stream_t, capturing: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_stream_is_capturing", || {
        let out = Out::new(capturing, "capturing")?;
        out.write((super::capture_status(h(stream))? != 0) as c_int);
        Ok(())
    })
}

/// 1 if this thread's current stream of its current device is capturing
/// (`torch.cuda.is_current_stream_capturing`).
///
/// @param[out] capturing receives 1 or 0; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_is_current_stream_capturing(capturing: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_is_current_stream_capturing", || {
        let out = Out::new(capturing, "capturing")?;
        let current = super::current(crate::device::CURRENT_DEVICE)?;
        out.write((super::capture_status(current)? != 0) as c_int);
        Ok(())
    })
}
