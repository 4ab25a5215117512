use libc::{c_int, c_uint};

use crate::boundary::{self, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A green context: a share of a device's SMs with streams of its own.
pub struct gpurt_green_context_s {
    _opaque: [u8; 0],
}
/// The handle of a green context: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_green_context_t = *mut gpurt_green_context_s;

fn h(ctx: gpurt_green_context_t) -> Handle {
    Handle::from_ptr(ctx)
}

/// Creates a green context of `device` with at least `sm_count` SMs: the driver rounds
/// a share up to its granularity (8 SMs on Hopper), and a count whose rounded share
/// does not fit gets the whole device; `gpurt_green_context_sm_count` says how many.
/// Work on its streams runs on those SMs only (CUDA 12.4+ green contexts, as
/// `torch.cuda.green_contexts.GreenContext`). Memory stays the device's: allocations,
/// events, graphs and math-library handles take its streams as any other.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param sm_count the fewest SMs wanted, 1 to the device's SM count
/// @param[out] ctx receives the new green context; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist, or an `sm_count` of 0 or more than the device has; GPURT_ERROR_NOT_SUPPORTED where the driver predates green contexts (CUDA 12.4); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_green_context_create(device: c_int, sm_count: c_uint, ctx: *mut gpurt_green_context_t) -> gpurt_status_t {
    boundary::call("gpurt_green_context_create", || {
        let out = Out::new(ctx, "ctx")?;
        out.write(super::create(device, sm_count)?.to_ptr());
        Ok(())
    })
}

/// How many SMs a green context has (its request rounded up; see `gpurt_green_context_create`).
///
/// @param ctx a green context
/// @param[out] sm_count receives its SM count; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `ctx`; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_green_context_sm_count(ctx: gpurt_green_context_t, sm_count: *mut c_uint) -> gpurt_status_t {
    boundary::call("gpurt_green_context_sm_count", || {
        let out = Out::new(sm_count, "sm_count")?;
        out.write(super::sm_count(h(ctx))?);
        Ok(())
    })
}

/// Creates a stream whose work runs on the green context's SMs only. Its handle is a
/// stream as any other (its device is the green context's); `gpurt_stream_destroy`
/// ends it. The driver makes such streams non-blocking only.
///
/// @param ctx a green context
/// @param flags GPURT_STREAM_NON_BLOCKING (required)
/// @param priority in the device's range (gpurt_stream_priority_range)
/// @param[out] stream receives the new stream; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `ctx`; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL, for flags without GPURT_STREAM_NON_BLOCKING or unknown, or a priority out of range; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_green_context_stream_create(
    ctx: gpurt_green_context_t,
    flags: c_uint,
    priority: c_int,
    stream: *mut gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_green_context_stream_create", || {
        let out = Out::new(stream, "stream")?;
        out.write(super::stream_create(h(ctx), flags, priority)?.to_ptr());
        Ok(())
    })
}

/// Destroys a green context. Refused while any stream of it lives (destroy them
/// first): nothing changes then.
///
/// @param ctx a green context
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `ctx`; GPURT_ERROR_INVALID_ARGUMENT while a stream of it lives; or a status every call may give (@ref statuses).
/// @par Ordering
/// Waits for the work queued on its destroyed streams, which it then releases.
#[no_mangle]
pub extern "C" fn gpurt_green_context_destroy(ctx: gpurt_green_context_t) -> gpurt_status_t {
    boundary::call("gpurt_green_context_destroy", || super::destroy(h(ctx)))
}

/// The most green contexts one `gpurt_green_context_split` makes.
pub const GPURT_GREEN_CONTEXT_SPLIT_MAX: usize = 64;

/// Creates `count` green contexts of `device` on disjoint SMs, one per count of
/// `sm_counts` (each rounded up to the driver's granularity, 8 SMs on Hopper; of
/// several, the last may be 0: every SM left). Prefill and decode, say, each on SMs
/// of its own: `{16, 0}` gives decode 16 and prefill the rest. All or none are made.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param sm_counts `count` SM counts
/// @param count 1 to GPURT_GREEN_CONTEXT_SPLIT_MAX
/// @param[out] ctxs receives `count` green contexts, in the order of `sm_counts`; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an argument is NULL, for a device that does not exist, a `count` out of range, a count of 0 but the last, or counts whose groups do not fit in the device's SMs (nothing made); GPURT_ERROR_NOT_SUPPORTED where the driver predates green contexts (CUDA 12.4); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_green_context_split(
    device: c_int,
    sm_counts: *const c_uint,
    count: usize,
    ctxs: *mut gpurt_green_context_t,
) -> gpurt_status_t {
    boundary::call("gpurt_green_context_split", || {
        if count == 0 {
            return Err(crate::Error::invalid_argument("count 0: a split makes at least one green context"));
        }
        let counts = boundary::in_array(sm_counts, count, GPURT_GREEN_CONTEXT_SPLIT_MAX, "sm_counts")?;
        if ctxs.is_null() {
            return Err(boundary::null_argument("ctxs"));
        }
        let made: Vec<gpurt_green_context_t> = super::split(device, counts)?.into_iter().map(|h| h.to_ptr()).collect();
        boundary::write_array(ctxs, &made, "ctxs")
    })
}
