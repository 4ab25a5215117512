use std::ffi::CString;
use std::sync::atomic::{AtomicI64, Ordering};

use libc::{c_int, c_void};

use cudarc::driver::sys;
use gpurt::alloc::ffi::*;
use gpurt::alloc::mempool::ffi::*;
use gpurt::alloc::upstream::GPURT_MEM_ATTACH_GLOBAL;
use gpurt::managed::ffi::*;
use gpurt::managed::GPURT_DEVICE_HOST;
use gpurt::alloc::stats::gpurt_memory_stats_t;
use gpurt::stream::ffi::*;

use crate::expect_status;
use crate::util::{gate_stream, malloc, native, ok, random_words, stream};

pub const TESTS: &[crate::support::Test] = &[
    ("user_pool_blocks_stay_exact_under_cross_stream_reuse", user_pool_blocks_stay_exact_under_cross_stream_reuse),
    ("threads_route_through_their_own_pushed_pools", threads_route_through_their_own_pushed_pools),
    ("managed_memory_moves_between_host_and_device_exactly", managed_memory_moves_between_host_and_device_exactly),
];

const WORDS: usize = 1 << 18; // 1 MiB

/// Segments a user upstream handed out and took back, by the test's own cuMemAlloc.
static USER_SEGMENTS: [AtomicI64; 2] = [AtomicI64::new(0), AtomicI64::new(0)];

unsafe extern "C" fn user_alloc(size: usize, device: c_int, _stream: *mut c_void, ctx: *mut c_void) -> *mut c_void {
    assert_eq!((device, ctx as usize), (0, 0x5eed), "the device and context are passed on");
    let mut ptr = 0;
    if sys::cuMemAlloc_v2(&mut ptr, size) != sys::CUresult::CUDA_SUCCESS {
        return std::ptr::null_mut();
    }
    USER_SEGMENTS[0].fetch_add(1, Ordering::Relaxed);
    ptr as *mut c_void
}

unsafe extern "C" fn user_free(ptr: *mut c_void, _size: usize, _device: c_int, _stream: *mut c_void, _ctx: *mut c_void) {
    ok(sys::cuMemFree_v2(ptr as u64));
    USER_SEGMENTS[1].fetch_add(1, Ordering::Relaxed);
}

/// A pool with `upstream` and `config`; GPURT_UPSTREAM_USER takes the functions above.
fn create(config: Option<&str>, upstream: c_int) -> gpurt_mem_pool_t {
    let text = config.map(|c| CString::new(c).unwrap());
    // SAFETY: all-zero is a valid value of the C struct; the init call fills it in.
    let mut options: gpurt_mem_pool_options_t = unsafe { std::mem::zeroed() };
    expect_status!(gpurt_mem_pool_options_init(&mut options), GPURT_SUCCESS);
    options.config = text.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    options.upstream = upstream;
    if upstream == GPURT_UPSTREAM_USER {
        options.user_alloc = Some(user_alloc);
        options.user_free = Some(user_free);
        options.user_context = 0x5eed as *mut c_void;
    }
    let mut pool = std::ptr::null_mut();
    expect_status!(gpurt_mem_pool_create(0, &options, &mut pool), GPURT_SUCCESS);
    pool
}

fn pool_stats(pool: gpurt_mem_pool_t) -> gpurt_memory_stats_t {
    let mut s = gpurt_memory_stats_t { struct_size: std::mem::size_of::<gpurt_memory_stats_t>(), ..Default::default() };
    expect_status!(gpurt_mem_pool_stats(pool, &mut s), GPURT_SUCCESS);
    s
}

fn device_allocated() -> u64 {
    let mut allocated = 0;
    let null = std::ptr::null_mut();
    expect_status!(gpurt_memory_usage(0, &mut allocated, null, null, null), GPURT_SUCCESS);
    allocated
}

fn read(ptr: u64, words: usize) -> Vec<u32> {
    let mut back = vec![0u32; words];
    unsafe { ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), ptr, words * 4)) };
    back
}

/// For whole and expandable (the default) segments and the user, async and managed upstreams:
/// stream B reads block X of a user pool while X is freed with B recorded and stream
/// A allocates from the pool (pushed) and overwrites what it gets. B must read X's bytes; the device's figures
/// are the sum; the user upstream gets every segment back.
fn user_pool_blocks_stay_exact_under_cross_stream_reuse() {
    let upstreams = [GPURT_UPSTREAM_DRIVER, GPURT_UPSTREAM_DRIVER, GPURT_UPSTREAM_USER, GPURT_UPSTREAM_ASYNC, GPURT_UPSTREAM_MANAGED];
    for (config, upstream) in [Some("expandable_segments:False"), None, None, None, None].into_iter().zip(upstreams) {
        let before = device_allocated();
        let pool = create(config, upstream);
        let (a, b) = (stream(), stream());
        let mut x = std::ptr::null_mut();
        expect_status!(gpurt_mem_pool_malloc(pool, WORDS * 4, a, &mut x), GPURT_SUCCESS);
        let x = x as u64;
        let y = malloc(WORDS * 4, b); // from the default pool
        let data = random_words(WORDS);
        unsafe { ok(sys::cuMemcpyHtoD_v2(x, data.as_ptr().cast(), WORDS * 4)) };
        let gate = gate_stream(b);
        unsafe { ok(sys::cuMemcpyDtoDAsync_v2(y, x, WORDS * 4, native(b))) };
        expect_status!(gpurt_record_stream(x as *mut _, b), GPURT_SUCCESS);
        expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
        expect_status!(gpurt_mem_pool_push(pool), GPURT_SUCCESS);
        let z = malloc(WORDS * 4, a);
        expect_status!(gpurt_mem_pool_pop(), GPURT_SUCCESS);
        assert_ne!(z, x, "{config:?} {upstream}: X was handed out again while stream B still reads it");
        assert_eq!(pool_stats(pool).allocation.all.current, 1, "{config:?} {upstream}: the pushed pool served z");
        assert_eq!(device_allocated(), before + 2 * (WORDS as u64 * 4), "{config:?} {upstream}: the device counts both pools");
        unsafe { ok(sys::cuMemsetD32Async(z, 0xdead_beef, WORDS, native(a))) };
        gate.store(true, std::sync::atomic::Ordering::Release);
        expect_status!(gpurt_stream_synchronize(b), GPURT_SUCCESS);
        assert!(read(y, WORDS) == data, "{config:?} {upstream}: stream B's copy of X was clobbered");
        expect_status!(gpurt_stream_synchronize(a), GPURT_SUCCESS);
        assert!(read(z, WORDS).iter().all(|&w| w == 0xdead_beef));
        expect_status!(gpurt_mem_pool_destroy(pool), GPURT_ERROR_INVALID_ARGUMENT);
        for p in [y, z] {
            expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
        }
        expect_status!(gpurt_mem_pool_destroy(pool), GPURT_SUCCESS);
        assert_eq!(device_allocated(), before);
        if upstream == GPURT_UPSTREAM_USER {
            let [made, returned] = [0, 1].map(|i| USER_SEGMENTS[i].load(Ordering::Relaxed));
            assert!(made > 0 && made == returned, "the user upstream made {made} segments and got {returned} back");
        }
        for s in [a, b] {
            expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
        }
    }
}

/// Four threads, each with its own pool pushed and its own stream, allocate through
/// gpurt_malloc, write fresh random data and check it; each pool counts exactly its
/// thread's blocks, and the blocks are freed from the pointer alone by another thread.
fn threads_route_through_their_own_pushed_pools() {
    let before = device_allocated();
    let handoff: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..4)
            .map(|t| {
                scope.spawn(move || {
                    expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS); // for the raw driver calls
                    let pool = create(None, GPURT_UPSTREAM_DRIVER);
                    let s = stream();
                    expect_status!(gpurt_mem_pool_push(pool), GPURT_SUCCESS);
                    let mut live = Vec::new();
                    for i in 0..64usize {
                        let words = 1 + (i * 7919 + t * 104_729) % (WORDS / 4);
                        let p = malloc(words * 4, s);
                        let data = random_words(words);
                        unsafe { ok(sys::cuMemcpyHtoD_v2(p, data.as_ptr().cast(), words * 4)) };
                        live.push((p, data));
                        if i % 3 == 0 {
                            let (p, data) = live.swap_remove(i % live.len());
                            assert!(read(p, data.len()) == data, "thread {t}: a block's bytes changed");
                            expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
                        }
                    }
                    expect_status!(gpurt_mem_pool_pop(), GPURT_SUCCESS);
                    assert_eq!(pool_stats(pool).allocation.all.current, live.len() as i64, "thread {t}: its pool holds its blocks");
                    for (p, data) in &live {
                        assert!(read(*p, data.len()) == *data, "thread {t}: a block's bytes changed");
                    }
                    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
                    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
                    let mut handed = vec![pool as u64];
                    handed.extend(live.iter().map(|(p, _)| *p));
                    handed
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    // This thread frees every block, each from its pointer alone, then destroys the pools.
    for handed in handoff {
        for &p in &handed[1..] {
            expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
        }
        expect_status!(gpurt_mem_pool_destroy(handed[0] as gpurt_mem_pool_t), GPURT_SUCCESS);
    }
    assert_eq!(device_allocated(), before);
}

/// The host writes fresh random data straight into managed memory, prefetched to the
/// device a copy reads it exactly; the device writes it, prefetched back the host
/// reads it exactly. Small: asking for more managed memory than is free can hang a GPU.
fn managed_memory_moves_between_host_and_device_exactly() {
    let before = device_allocated();
    let s = stream();
    let bytes = WORDS * 4;
    let mut m = std::ptr::null_mut();
    expect_status!(gpurt_malloc_managed(bytes, GPURT_MEM_ATTACH_GLOBAL, &mut m), GPURT_SUCCESS);
    let data = random_words(WORDS);
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), m.cast::<u32>(), WORDS) };
    expect_status!(gpurt_mem_advise(m, bytes, GPURT_MEM_ADVISE_SET_PREFERRED_LOCATION, 0), GPURT_SUCCESS);
    expect_status!(gpurt_mem_prefetch_async(m, bytes, 0, s), GPURT_SUCCESS);
    let d = malloc(bytes, s);
    unsafe { ok(sys::cuMemcpyDtoDAsync_v2(d, m as u64, bytes, native(s))) };
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    assert!(read(d, WORDS) == data, "the device read other bytes than the host wrote");
    unsafe { ok(sys::cuMemsetD32Async(m as u64, 0x1234_5678, WORDS, native(s))) };
    expect_status!(gpurt_mem_advise(m, bytes, GPURT_MEM_ADVISE_UNSET_PREFERRED_LOCATION, 0), GPURT_SUCCESS);
    expect_status!(gpurt_mem_prefetch_async(m, bytes, GPURT_DEVICE_HOST, s), GPURT_SUCCESS);
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    let host = unsafe { std::slice::from_raw_parts(m.cast::<u32>(), WORDS) };
    assert!(host.iter().all(|&w| w == 0x1234_5678), "the host read other bytes than the device wrote");
    assert_eq!(device_allocated(), before + 2 * bytes as u64, "managed memory counts in the device's figures");
    for p in [d, m as u64] {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    assert_eq!(device_allocated(), before);
}
