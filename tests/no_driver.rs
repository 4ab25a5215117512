//! Behaviour where no CUDA driver is installed (this machine and CI): everything
//! loads, nothing crashes, the device count is 0 and device calls say "no driver".
//! Reported as skipped where a GPU is present.

mod support;

use gpurt::device::ffi::*;
use gpurt::sync_debug::ffi::*;

fn availability_is_a_clean_no() {
    let (mut available, mut count, mut initialized) = (7, 7, 7);
    expect_status!(gpurt_is_available(&mut available), GPURT_SUCCESS);
    expect_status!(gpurt_device_count(&mut count), GPURT_SUCCESS);
    expect_status!(gpurt_is_initialized(&mut initialized), GPURT_SUCCESS);
    assert_eq!((available, count, initialized), (0, 0, 0));
    assert!(!gpurt::device::is_available());
}

fn device_calls_say_no_driver_with_a_message() {
    let mut props = gpurt::device::gpurt_device_properties_t::zeroed();
    let (mut value, mut free, mut total) = (0, 0usize, 0usize);
    let mut handle = std::ptr::null_mut();
    expect_status!(gpurt_init(), GPURT_ERROR_NO_DRIVER);
    assert!(support::last_message().starts_with("gpurt_init: the CUDA driver library (libcuda.so.1) could not be loaded"));
    expect_status!(gpurt_driver_version(&mut value), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_set_device(0), GPURT_ERROR_NO_DRIVER);
    assert!(support::last_message().starts_with("gpurt_set_device: "));
    expect_status!(gpurt_get_device(&mut value), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_get(0, &mut handle), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_get_properties(0, &mut props), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_tf32_supported(0, &mut value), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_mem_get_info(0, &mut free, &mut total), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_can_access_peer(0, 1, &mut value), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_enable_peer_access(0, 1), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_disable_peer_access(0, 1), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_device_synchronize(0), GPURT_ERROR_NO_DRIVER);
}

fn stream_and_event_creation_say_no_driver() {
    use gpurt::event::ffi::*;
    use gpurt::stream::ffi::*;
    let mut s = std::ptr::null_mut();
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_stream_create(0, 0, 0, &mut s), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_stream_from_pool(0, 1, &mut s), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_stream_default(0, &mut s), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_current_stream(0, &mut s), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_event_create(0, 0, &mut e), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_event_pool_get(0, &mut e), GPURT_ERROR_NO_DRIVER);
    assert!(s.is_null() && e.is_null(), "a failed call writes no out-parameter");
}

fn argument_checks_come_before_the_driver() {
    // A NULL out-parameter is reported as such even without a driver.
    expect_status!(gpurt_device_count(std::ptr::null_mut()), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_mem_get_info(0, std::ptr::null_mut(), std::ptr::null_mut()), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_set_sync_debug_mode(3), GPURT_ERROR_INVALID_ARGUMENT);
}

fn sync_debug_mode_round_trips_and_bad_devices_still_fail_first() {
    let mut mode = -1;
    expect_status!(gpurt_set_sync_debug_mode(2), GPURT_SUCCESS);
    expect_status!(gpurt_get_sync_debug_mode(&mut mode), GPURT_SUCCESS);
    assert_eq!(mode, 2);
    // The device is checked before the sync debug mode: no driver is the real problem.
    expect_status!(gpurt_device_synchronize(0), GPURT_ERROR_NO_DRIVER);
    expect_status!(gpurt_set_sync_debug_mode(0), GPURT_SUCCESS);
}

fn main() {
    support::run(
        "no_driver",
        support::Needs::NoGpu,
        &[
            ("availability_is_a_clean_no", availability_is_a_clean_no),
            ("device_calls_say_no_driver_with_a_message", device_calls_say_no_driver_with_a_message),
            ("argument_checks_come_before_the_driver", argument_checks_come_before_the_driver),
            ("stream_and_event_creation_say_no_driver", stream_and_event_creation_say_no_driver),
            ("sync_debug_mode_round_trips_and_bad_devices_still_fail_first", sync_debug_mode_round_trips_and_bad_devices_still_fail_first),
        ],
        &[],
    )
}
