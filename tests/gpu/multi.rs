//! Tests that need two GPUs (reported as skipped, with the reason, on one): each
//! device's caching pool keeps its own memory and statistics, a pointer-only free
//! finds the right device's pool from any thread, peer copies move bytes exactly
//! with and without peer access, and a kernel on one device computes exactly on the
//! other's expandable segments once granted access.

use cudarc::driver::sys;
use gpurt::alloc::ffi::*;
use gpurt::alloc::mempool::ffi::*;
use gpurt::copy::ffi::*;
use gpurt::device::ffi::*;
use gpurt::kernel::ffi::*;
use gpurt::stream::ffi::*;

use crate::expect_status;
use crate::kernels::{args, download, kernel};
use crate::util::{malloc, ok, random_words};

pub const TESTS: &[crate::support::Test] = &[
    ("each_device_has_its_own_pool_and_statistics", each_device_has_its_own_pool_and_statistics),
    ("peer_copies_between_two_devices_are_byte_exact", peer_copies_between_two_devices_are_byte_exact),
    ("a_peer_computes_on_expandable_blocks_mapped_before_and_after_its_grant", a_peer_computes_on_expandable_blocks_mapped_before_and_after_its_grant),
];

const MIB: usize = 1 << 20;

fn stream_on(device: i32) -> gpurt_stream_t {
    let mut s = std::ptr::null_mut();
    expect_status!(gpurt_stream_create(device, gpurt::stream::GPURT_STREAM_NON_BLOCKING, 0, &mut s), GPURT_SUCCESS);
    s
}

/// The device whose memory `ptr` is, as the driver sees it.
fn device_of(ptr: u64) -> i32 {
    let mut ordinal = -1i32;
    let attribute = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    ok(unsafe { sys::cuPointerGetAttribute((&mut ordinal as *mut i32).cast(), attribute, ptr) });
    ordinal
}

/// (allocated, reserved) bytes of `device` by gpurt's statistics.
fn usage(device: i32) -> (u64, u64) {
    let (mut allocated, mut reserved) = (0, 0);
    let none = std::ptr::null_mut();
    expect_status!(gpurt_memory_usage(device, &mut allocated, none, &mut reserved, none), GPURT_SUCCESS);
    (allocated, reserved)
}

fn each_device_has_its_own_pool_and_statistics() {
    let (s0, s1) = (stream_on(0), stream_on(1));
    let (base0, base1) = (usage(0).0, usage(1).0);
    let a = malloc(3 * MIB, s0);
    let b = malloc(5 * MIB, s1);
    let mut c = std::ptr::null_mut();
    expect_status!(gpurt_malloc_device(1, MIB / 2, &mut c), GPURT_SUCCESS);
    let c = c as u64;
    assert_eq!([device_of(a), device_of(b), device_of(c)], [0, 1, 1], "each block comes from its stream's device");
    assert_eq!(usage(0).0, base0 + 3 * MIB as u64);
    assert_eq!(usage(1).0, base1 + (5 * MIB + MIB / 2) as u64);

    // A pointer-only free from another thread finds device 1's pool.
    let freed = std::thread::spawn(move || gpurt_free(b as *mut _)).join().unwrap();
    assert_eq!(freed, gpurt::Status::GPURT_SUCCESS);
    assert_eq!(usage(1).0, base1 + (MIB / 2) as u64);
    assert_eq!(usage(0).0, base0 + 3 * MIB as u64, "device 0 is untouched by device 1's free");
    expect_status!(gpurt_free(b as *mut _), GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(malloc(5 * MIB, s1), b, "freed on its stream, reused at once on it");

    for p in [a, b, c] {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    assert_eq!((usage(0).0, usage(1).0), (base0, base1));
    for s in [s0, s1] {
        expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    }
    expect_status!(gpurt_empty_cache(), GPURT_SUCCESS);
    assert_eq!(usage(1).1, 0, "device 1's cache is released");
}

/// Device 0 -> 1 -> 0 through gpurt_memcpy_peer_async, first without peer access
/// (the driver stages through the host), then with it where the devices allow it.
fn peer_copies_between_two_devices_are_byte_exact() {
    let (s0, s1) = (stream_on(0), stream_on(1));
    let n = 3 * MIB / 4 + 17;
    let words = random_words(n);
    let (a, b, back) = (malloc(n * 4, s0), malloc(n * 4, s1), malloc(n * 4, s0));
    let mut can_access = 0;
    expect_status!(gpurt_device_can_access_peer(1, 0, &mut can_access), GPURT_SUCCESS);
    for with_peer_access in [false, true] {
        if with_peer_access {
            if can_access == 0 {
                println!("devices 0 and 1 cannot access each other: the copy with peer access is not tried");
                break;
            }
            expect_status!(gpurt_device_enable_peer_access(0, 1), GPURT_SUCCESS);
            expect_status!(gpurt_device_enable_peer_access(1, 0), GPURT_SUCCESS);
        }
        expect_status!(gpurt_memcpy(a as *mut _, words.as_ptr().cast(), n * 4, s0), GPURT_SUCCESS);
        expect_status!(gpurt_memcpy_peer_async(b as *mut _, 1, a as *const _, 0, n * 4, s0), GPURT_SUCCESS);
        expect_status!(gpurt_stream_synchronize(s0), GPURT_SUCCESS);
        expect_status!(gpurt_memcpy_peer_async(back as *mut _, 0, b as *const _, 1, n * 4, s1), GPURT_SUCCESS);
        expect_status!(gpurt_stream_synchronize(s1), GPURT_SUCCESS);
        let mut host = vec![0u32; n];
        expect_status!(gpurt_memcpy(host.as_mut_ptr().cast(), back as *const _, n * 4, s0), GPURT_SUCCESS);
        assert!(host == words, "bytes changed on the way 0 -> 1 -> 0 (peer access: {with_peer_access})");
        // The next round must not pass on this round's bytes.
        expect_status!(gpurt_memset_async(back as *mut _, 0, 1, n * 4, s0), GPURT_SUCCESS);
    }
    if can_access != 0 {
        expect_status!(gpurt_device_disable_peer_access(0, 1), GPURT_SUCCESS);
        expect_status!(gpurt_device_disable_peer_access(1, 0), GPURT_SUCCESS);
    }
    for p in [a, b, back] {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    for s in [s0, s1] {
        expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    }
}

/// Expandable segments' memory is open to a peer only where cuMemSetAccess names it
/// (cuCtxEnablePeerAccess does not reach it): a kernel on device 0 computes exactly
/// on device 1's blocks, one on a mapping made before device 0 was granted access,
/// one on a mapping made after. Device 0 stays current: the copies into device 1's
/// blocks from pageable memory, on device 1's stream, switch to its context.
fn a_peer_computes_on_expandable_blocks_mapped_before_and_after_its_grant() {
    expect_status!(gpurt_set_device(0), GPURT_SUCCESS);
    let mut can_access = 0;
    expect_status!(gpurt_device_can_access_peer(0, 1, &mut can_access), GPURT_SUCCESS);
    if can_access == 0 {
        println!("devices 0 and 1 cannot access each other: a kernel on one cannot read the other's memory, not tried");
        return;
    }
    let (s0, s1) = (stream_on(0), stream_on(1));
    let mut options: gpurt_mem_pool_options_t = unsafe { std::mem::zeroed() };
    expect_status!(gpurt_mem_pool_options_init(&mut options), GPURT_SUCCESS);
    options.config = c"expandable_segments:True".as_ptr();
    let mut pool = std::ptr::null_mut();
    expect_status!(gpurt_mem_pool_create(1, &options, &mut pool), GPURT_SUCCESS);
    let n = MIB; // 4 MiB a block: the second outgrows the first mapping
    let block = |words: &[u32]| {
        let mut p = std::ptr::null_mut();
        expect_status!(gpurt_mem_pool_malloc(pool, n * 4, s1, &mut p), GPURT_SUCCESS);
        expect_status!(gpurt_memcpy(p, words.as_ptr().cast(), n * 4, s1), GPURT_SUCCESS);
        p as u64
    };
    let (words_before, words_after) = (random_words(n), random_words(n));
    let before = block(&words_before);
    expect_status!(gpurt_device_enable_peer_access(0, 1), GPURT_SUCCESS);
    let after = block(&words_after);
    assert_eq!(device_of(after), 1);
    let affine = kernel("affine_u32");
    for (p, words) in [(before, &words_before), (after, &words_after)] {
        let (mut x, mut mul, mut add, mut count) = (p, 2_654_435_761u32, 12_345u32, n as u32);
        let mut argv = args(&mut [&mut x, &mut mul, &mut add, &mut count]);
        expect_status!(gpurt_launch_kernel(affine, (n as u32).div_ceil(256), 1, 1, 256, 1, 1, 0, s0, argv.as_mut_ptr()), GPURT_SUCCESS);
        expect_status!(gpurt_stream_synchronize(s0), GPURT_SUCCESS);
        let want: Vec<u32> = words.iter().map(|w| w.wrapping_mul(mul).wrapping_add(add)).collect();
        assert!(download(p, n, s1) == want, "device 0's kernel on device 1's expandable block {p:#x}");
    }
    expect_status!(gpurt_device_disable_peer_access(0, 1), GPURT_SUCCESS);
    for p in [before, after] {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    expect_status!(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
    for s in [s0, s1] {
        expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    }
}
