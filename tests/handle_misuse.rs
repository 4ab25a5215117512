//! Misuse of stream and event handles through the C ABI, without a GPU: NULL,
//! forged, wrong-kind handles and NULL out-parameters are all reported (handles are
//! checked before the driver is touched), and nothing crashes.

use gpurt::event::ffi::*;
use gpurt::handle::{Handle, Kind};
use gpurt::stream::ffi::*;
use gpurt::Status;

fn message() -> String {
    unsafe { std::ffi::CStr::from_ptr(gpurt::error::ffi::gpurt_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

fn forged(kind: Kind, generation: u32, index: u32) -> *mut libc::c_void {
    Handle::new(kind, generation, index).to_ptr()
}

#[test]
fn null_stream_and_event_handles_are_invalid_handles() {
    let null_s: gpurt_stream_t = std::ptr::null_mut();
    let null_e: gpurt_event_t = std::ptr::null_mut();
    let mut value = 0;
    let mut ms = 0f32;
    let mut native = std::ptr::null_mut();
    for status in [
        gpurt_stream_query(null_s),
        gpurt_stream_synchronize(null_s),
        gpurt_stream_destroy(null_s),
        gpurt_stream_wait_event(null_s, null_e),
        gpurt_stream_wait_stream(null_s, null_s),
        gpurt_stream_get_device(null_s, &mut value),
        gpurt_stream_native(null_s, &mut native),
        gpurt_stream_push(null_s),
        gpurt_set_stream(null_s),
        gpurt_event_query(null_e),
        gpurt_event_record(null_e, null_s),
        gpurt_event_synchronize(null_e),
        gpurt_event_destroy(null_e),
        gpurt_event_elapsed_time(null_e, null_e, &mut ms),
    ] {
        assert_eq!(status, Status::GPURT_ERROR_INVALID_HANDLE, "{}", message());
    }
    assert!(message().contains("handle is NULL"), "{}", message());
}

#[test]
fn forged_and_wrong_kind_handles_are_invalid_handles() {
    // Never-issued handles of the right kind (a slot far past any allocation).
    let stream: gpurt_stream_t = forged(Kind::Stream, 1, 5_000_000).cast();
    let event: gpurt_event_t = forged(Kind::Event, 1, 5_000_000).cast();
    assert_eq!(gpurt_stream_query(stream), Status::GPURT_ERROR_INVALID_HANDLE);
    assert!(message().contains("destroyed or never created"), "{}", message());
    assert_eq!(gpurt_event_destroy(event), Status::GPURT_ERROR_INVALID_HANDLE);
    // Wrong kind: an event passed as a stream and a device as an event.
    assert_eq!(gpurt_stream_query(event.cast()), Status::GPURT_ERROR_INVALID_HANDLE);
    assert!(message().contains("expected a stream handle, got a event handle"), "{}", message());
    assert_eq!(gpurt_event_query(forged(Kind::Device, 1, 0).cast()), Status::GPURT_ERROR_INVALID_HANDLE);
    // Garbage pointers, e.g. a real address or a small integer.
    let local = 5u64;
    assert_eq!(gpurt_stream_query((&local as *const u64).cast_mut().cast()), Status::GPURT_ERROR_INVALID_HANDLE);
    assert_eq!(gpurt_event_query(0x10 as gpurt_event_t), Status::GPURT_ERROR_INVALID_HANDLE);
}

#[test]
fn null_out_parameters_are_invalid_arguments() {
    assert_eq!(gpurt_stream_create(0, 0, 0, std::ptr::null_mut()), Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(gpurt_stream_from_pool(0, 0, std::ptr::null_mut()), Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(gpurt_current_stream(0, std::ptr::null_mut()), Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(gpurt_event_create(0, 0, std::ptr::null_mut()), Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(gpurt_event_pool_get(0, std::ptr::null_mut()), Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(
        gpurt_event_open_ipc(0, std::ptr::null(), &mut std::ptr::null_mut()),
        Status::GPURT_ERROR_INVALID_ARGUMENT
    );
    assert!(message().contains("`ipc` is NULL"), "{}", message());
    assert_eq!(gpurt_stream_pop(), Status::GPURT_ERROR_INVALID_ARGUMENT);
}
