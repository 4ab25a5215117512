use cudarc::driver::sys;
use gpurt::alloc::ffi::*;
use gpurt::alloc::stats::gpurt_memory_stats_t;
use gpurt::copy::ffi::{gpurt_memcpy, gpurt_memcpy_async, gpurt_memset_async};
use gpurt::stream::ffi::*;

use crate::expect_status;
use crate::util::{free_bytes, block_stream, malloc, native, ok, random_words, stream, ForeignCapture};

pub const TESTS: &[crate::support::Test] = &[
    ("recorded_stream_keeps_a_freed_block_from_reuse", recorded_stream_keeps_a_freed_block_from_reuse),
    ("same_stream_reuse_is_immediate", same_stream_reuse_is_immediate),
    ("impossible_request_is_out_of_memory_and_the_pool_goes_on", impossible_request_is_out_of_memory_and_the_pool_goes_on),
    ("empty_cache_returns_memory_to_the_driver", empty_cache_returns_memory_to_the_driver),
    ("statistics_track_live_allocations_exactly", statistics_track_live_allocations_exactly),
    ("allocator_misuse_is_reported", allocator_misuse_is_reported),
    ("allocations_during_a_foreign_capture_come_from_its_own_pool", allocations_during_a_foreign_capture_come_from_its_own_pool),
    ("expandable_segments_grow_keep_data_and_give_memory_back", expandable_segments_grow_keep_data_and_give_memory_back),
    ("eight_threads_reuse_and_free_across_threads_without_clobbering", eight_threads_reuse_and_free_across_threads_without_clobbering),
    ("eight_threads_on_one_stream_reuse_and_free_without_clobbering", eight_threads_on_one_stream_reuse_and_free_without_clobbering),
    ("a_destroyed_streams_blocks_wait_for_its_queued_work", a_destroyed_streams_blocks_wait_for_its_queued_work),
    ("per_thread_default_streams_of_two_threads_share_no_block", per_thread_default_streams_of_two_threads_share_no_block),
];


const WORDS: usize = 1 << 18; // 1 MiB

/// Stream B reads block X after a delay; X is freed meanwhile with B recorded, and
/// stream A allocates and overwrites at once. B must read X's original bytes.
fn recorded_stream_keeps_a_freed_block_from_reuse() {
    let (a, b) = (stream(), stream());
    let x = malloc(WORDS * 4, a);
    let y = malloc(WORDS * 4, b);
    let data = random_words(WORDS);
    unsafe { ok(sys::cuMemcpyHtoD_v2(x, data.as_ptr().cast(), WORDS * 4)) };
    block_stream(b, 100);
    unsafe { ok(sys::cuMemcpyDtoDAsync_v2(y, x, WORDS * 4, native(b))) };
    expect_status!(gpurt_record_stream(x as *mut _, b), GPURT_SUCCESS);
    expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
    let z = malloc(WORDS * 4, a);
    assert_ne!(z, x, "X was handed out again while stream B still reads it");
    unsafe { ok(sys::cuMemsetD32Async(z, 0xdead_beef, WORDS, native(a))) };
    expect_status!(gpurt_stream_synchronize(b), GPURT_SUCCESS);
    let mut back = vec![0u32; WORDS];
    unsafe { ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), y, WORDS * 4)) };
    assert!(back == data, "stream B's copy of X was clobbered");
    // Once B is done, X is reused on A.
    expect_status!(gpurt_stream_synchronize(a), GPURT_SUCCESS);
    expect_status!(gpurt_free(z as *mut _), GPURT_SUCCESS);
    let again = malloc(WORDS * 4, a);
    let again2 = malloc(WORDS * 4, a);
    assert!(again == x || again2 == x, "X returns to A's pool once B's work is done");
    for p in [y, again, again2] {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    for s in [a, b] {
        expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    }
}

/// The control for the test above: without record_stream, reuse on the same stream
/// is immediate (stream order protects it).
fn same_stream_reuse_is_immediate() {
    let a = stream();
    let x = malloc(WORDS * 4, a);
    expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
    assert_eq!(malloc(WORDS * 4, a), x);
    expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
}

fn stats() -> gpurt_memory_stats_t {
    let mut s = gpurt_memory_stats_t { struct_size: std::mem::size_of::<gpurt_memory_stats_t>(), ..Default::default() };
    expect_status!(gpurt_memory_stats(0, &mut s), GPURT_SUCCESS);
    s
}

fn impossible_request_is_out_of_memory_and_the_pool_goes_on() {
    let a = stream();
    let before = stats();
    let mut p = std::ptr::null_mut();
    // Asked of the driver, which refuses: the retry, then the out-of-memory count.
    expect_status!(gpurt_malloc(1 << 45, a, &mut p), GPURT_ERROR_OUT_OF_MEMORY);
    let message = crate::support::last_message();
    eprintln!("{message}");
    for needle in ["tried to allocate 32.00 TiB", "Device total", "driver-reported free", "reserved"] {
        assert!(message.contains(needle), "{needle:?} missing from: {message}");
    }
    let after = stats();
    assert_eq!(after.num_ooms, before.num_ooms + 1);
    assert_eq!(after.allocated_bytes.all.current, before.allocated_bytes.all.current);
    // Past GPURT_MAX_ALLOCATION_SIZE, up to SIZE_MAX: refused before the driver, no statistic changed.
    for size in [1usize << 50, usize::MAX - 4095, usize::MAX] {
        expect_status!(gpurt_malloc(size, a, &mut p), GPURT_ERROR_OUT_OF_MEMORY);
        assert!(crate::support::last_message().contains("tried to allocate"), "{}", crate::support::last_message());
        assert_eq!(stats(), after, "a refused request of {size} bytes changed a statistic");
    }
    let x = malloc(3 << 20, a);
    expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
}

fn empty_cache_returns_memory_to_the_driver() {
    let a = stream();
    let x = malloc(1 << 30, a);
    expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
    let (mut free_before, mut free_after, mut total) = (0usize, 0usize, 0usize);
    expect_status!(gpurt::device::ffi::gpurt_mem_get_info(0, &mut free_before, &mut total), GPURT_SUCCESS);
    assert!(stats().reserved_bytes.all.current >= 1 << 30);
    expect_status!(gpurt_empty_cache(), GPURT_SUCCESS);
    expect_status!(gpurt::device::ffi::gpurt_mem_get_info(0, &mut free_after, &mut total), GPURT_SUCCESS);
    eprintln!("free before empty_cache {free_before}, after {free_after}");
    assert!(free_after >= free_before + (1 << 30) - (64 << 20), "empty_cache did not return the 1 GiB segment");
    assert_eq!(stats().reserved_bytes.all.current, 0);
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
}

fn statistics_track_live_allocations_exactly() {
    let a = stream();
    let base = stats();
    let sizes: Vec<usize> = random_words(64).iter().map(|w| 1 + (*w as usize % (8 << 20))).collect();
    let ptrs: Vec<u64> = sizes.iter().map(|s| malloc(*s, a)).collect();
    let s = stats();
    let requested: i64 = sizes.iter().map(|s| *s as i64).sum();
    assert_eq!(s.requested_bytes.all.current - base.requested_bytes.all.current, requested);
    assert_eq!(s.allocation.all.current - base.allocation.all.current, 64);
    let (mut allocated, mut reserved) = (0u64, 0u64);
    expect_status!(gpurt_memory_usage(0, &mut allocated, std::ptr::null_mut(), &mut reserved, std::ptr::null_mut()), GPURT_SUCCESS);
    assert!(allocated as i64 >= requested && reserved >= allocated);
    let mut needed = 0usize;
    expect_status!(gpurt_memory_summary(0, std::ptr::null_mut(), 0, &mut needed), GPURT_SUCCESS);
    let mut text = vec![0 as libc::c_char; needed];
    expect_status!(gpurt_memory_summary(0, text.as_mut_ptr(), needed, &mut needed), GPURT_SUCCESS);
    let text = unsafe { std::ffi::CStr::from_ptr(text.as_ptr()) }.to_string_lossy().into_owned();
    assert!(text.contains("Allocated memory"));
    eprintln!("{text}");
    for p in ptrs {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    let end = stats();
    assert_eq!(end.allocated_bytes.all.current, base.allocated_bytes.all.current);
    assert_eq!(end.requested_bytes.all.current, base.requested_bytes.all.current);
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
}

fn allocator_misuse_is_reported() {
    let a = stream();
    let x = malloc(4096, a);
    expect_status!(gpurt_free((x + 8) as *mut _), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_free(x as *mut _), GPURT_ERROR_INVALID_ARGUMENT);
    let message = crate::support::last_message();
    assert!(message.contains("already freed") || message.contains("not a live gpurt allocation"), "{message}");
    expect_status!(gpurt_record_stream(x as *mut _, a), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_malloc(16, std::ptr::null_mut(), &mut std::ptr::null_mut()), GPURT_ERROR_INVALID_HANDLE);
    let mut p = std::ptr::null_mut();
    expect_status!(gpurt_malloc(0, a, &mut p), GPURT_SUCCESS);
    assert!(p.is_null());
    expect_status!(gpurt_malloc_device(-1, 100, &mut p), GPURT_SUCCESS);
    expect_status!(gpurt_free(p), GPURT_SUCCESS);
    expect_status!(gpurt_alloc_set_config(c"max_split_size_mb:5".as_ptr()), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_alloc_set_config(c"garbage_collection_threshold:0.8".as_ptr()), GPURT_SUCCESS);
    expect_status!(gpurt_set_per_process_memory_fraction(2.0, 0), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
}

/// During a capture begun with the driver's own cuStreamBeginCapture, allocations come
/// from the capture's private pool, never the cache (the graph's replays write them):
/// a small one, one that needs new device memory, frees inside the capture, and an
/// empty_cache of the other pools meanwhile, none of which invalidates the capture.
/// After it, the cached block serves again and the graph's blocks stay out of reach.
fn allocations_during_a_foreign_capture_come_from_its_own_pool() {
    let a = stream();
    let cached = malloc(2 << 20, a);
    expect_status!(gpurt_free(cached as *mut _), GPURT_SUCCESS);
    let spare = stream();
    expect_status!(gpurt_free(malloc(64 << 20, spare) as *mut _), GPURT_SUCCESS); // free memory for empty_cache to give back
    let capture = ForeignCapture::begin(a);
    let small = malloc(2 << 20, a);
    assert_ne!(small, cached, "served from the cache during capture");
    let large = malloc(1 << 30, a);
    expect_status!(gpurt_memset_async(large as *mut _, 7, 1, 1 << 30, a), GPURT_SUCCESS);
    expect_status!(gpurt_free(large as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_empty_cache(), GPURT_SUCCESS);
    let (status, graph) = capture.end();
    ok(status);
    assert!(!graph.is_null(), "the capture was not invalidated");
    let after = malloc(2 << 20, a);
    assert_ne!(after, small, "a block of the graph's pool handed out while the graph exists");
    unsafe { ok(sys::cuGraphDestroy(graph)) };
    for p in [after, small] {
        expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(spare), GPURT_SUCCESS);
}


/// With expandable segments, blocks of one stream follow each other in one address
/// range; data written before the range grew is intact after; empty_cache unmaps the
/// free end and the driver sees the memory again.
fn expandable_segments_grow_keep_data_and_give_memory_back() {
    let s = stream();
    expect_status!(gpurt_empty_cache(), GPURT_SUCCESS);
    expect_status!(gpurt_alloc_set_config(c"expandable_segments:True".as_ptr()), GPURT_SUCCESS);
    let before = free_bytes();
    let words = 3 << 20; // 12 MiB blocks
    let (blocks, data): (Vec<u64>, Vec<Vec<u32>>) = (0..8)
        .map(|_| {
            let d = malloc(words * 4, s);
            let w = random_words(words);
            unsafe { ok(sys::cuMemcpyHtoD_v2(d, w.as_ptr().cast(), words * 4)) };
            (d, w)
        })
        .unzip();
    for pair in blocks.windows(2) {
        assert_eq!(pair[1], pair[0] + (words * 4) as u64, "blocks of one stream are contiguous");
    }
    assert!(free_bytes() + 90 * (1 << 20) <= before, "the segment grew with the blocks");
    for (d, w) in blocks.iter().zip(&data) {
        let mut back = vec![0u32; words];
        unsafe { ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), *d, words * 4)) };
        assert!(&back == w, "data written before the segment grew changed");
    }
    blocks.iter().for_each(|&d| expect_status!(gpurt_free(d as *mut _), GPURT_SUCCESS));
    expect_status!(gpurt_empty_cache(), GPURT_SUCCESS);
    assert!(free_bytes() + (8 << 20) >= before, "empty_cache unmapped the segment");
    expect_status!(gpurt_alloc_set_config(c"".as_ptr()), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// Eight threads, each on its own stream: see `reuse_and_free_across_threads`.
fn eight_threads_reuse_and_free_across_threads_without_clobbering() {
    reuse_and_free_across_threads(None);
}

/// Eight threads on one stream, with bursts of small pairs between the copies so
/// that they contend for the stream's shard and move to shards of their own: see
/// `reuse_and_free_across_threads`.
fn eight_threads_on_one_stream_reuse_and_free_without_clobbering() {
    let shared = stream();
    reuse_and_free_across_threads(Some(shared));
    expect_status!(gpurt_stream_destroy(shared), GPURT_SUCCESS);
}

/// Eight threads (each on its own stream, or all on `shared`), 150 rounds each: fresh
/// random words go into a block, are copied asynchronously into a second block, and
/// the first is freed at once and its memory (usually the same block, reused on the
/// same stream) is overwritten asynchronously. Every second block must still hold its
/// words when read back later. Half the overwritten blocks are freed by a different
/// thread than the one that allocated them (pointer-only frees into another shard).
/// At the end every byte is given back.
fn reuse_and_free_across_threads(shared: Option<gpurt_stream_t>) {
    let shared = shared.map(|s| s as usize);
    let base = stats().allocated_bytes.all.current;
    let (to_free, freed_elsewhere) = std::sync::mpsc::channel::<u64>();
    let freer = std::thread::spawn(move || {
        for p in freed_elsewhere {
            expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
        }
    });
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let to_free = to_free.clone();
            std::thread::spawn(move || {
                let s = shared.map_or_else(stream, |s| s as gpurt_stream_t);
                let sizes = random_words(150);
                let mut live: Vec<(u64, Vec<u32>)> = Vec::new();
                for (round, size) in sizes.iter().enumerate() {
                    let n = 64 + (*size as usize % (1 << 18)); // 256 B to 1 MiB of words
                    let words = random_words(n);
                    let a = malloc(n * 4, s);
                    expect_status!(gpurt_memcpy(a as *mut _, words.as_ptr().cast(), n * 4, s), GPURT_SUCCESS);
                    let b = malloc(n * 4, s);
                    expect_status!(gpurt_memcpy_async(b as *mut _, a as *const _, n * 4, s), GPURT_SUCCESS);
                    expect_status!(gpurt_free(a as *mut _), GPURT_SUCCESS);
                    let c = malloc(n * 4, s);
                    expect_status!(gpurt_memset_async(c as *mut _, 0xdead_beef, 4, n, s), GPURT_SUCCESS);
                    if shared.is_some() {
                        for _ in 0..200 {
                            expect_status!(gpurt_free(malloc(512, s) as *mut _), GPURT_SUCCESS);
                        }
                    }
                    if round % 2 == t % 2 {
                        to_free.send(c).unwrap();
                    } else {
                        expect_status!(gpurt_free(c as *mut _), GPURT_SUCCESS);
                    }
                    live.push((b, words));
                    if live.len() > 8 || round + 1 == sizes.len() {
                        for (b, words) in live.drain(..) {
                            let mut back = vec![0u32; words.len()];
                            expect_status!(gpurt_memcpy(back.as_mut_ptr().cast(), b as *const _, words.len() * 4, s), GPURT_SUCCESS);
                            assert!(back == words, "thread {t}, round {round}: a block was clobbered by a reuse");
                            expect_status!(gpurt_free(b as *mut _), GPURT_SUCCESS);
                        }
                    }
                }
                expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
                if shared.is_none() {
                    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
                }
            })
        })
        .collect();
    drop(to_free);
    for w in workers {
        w.join().expect("a worker failed");
    }
    freer.join().expect("the freeing thread failed");
    assert_eq!(stats().allocated_bytes.all.current, base, "every allocation is given back");
}

/// A stream is destroyed while its queued work still reads a block freed on it; the
/// next streams created (the driver may hand out the same stream value again) take
/// blocks of that size at once and overwrite them. The queued read must still see
/// the block's original words.
fn a_destroyed_streams_blocks_wait_for_its_queued_work() {
    expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS); // for the raw driver calls
    let keeper = stream();
    let words = random_words(WORDS);
    for round in 0..4 {
        let old = stream();
        let x = malloc(WORDS * 4, old);
        let y = malloc(WORDS * 4, keeper);
        expect_status!(gpurt_memcpy(x as *mut _, words.as_ptr().cast(), WORDS * 4, old), GPURT_SUCCESS);
        block_stream(old, 100);
        unsafe { ok(sys::cuMemcpyDtoDAsync_v2(y, x, WORDS * 4, native(old))) };
        let old_native = native(old);
        expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
        expect_status!(gpurt_stream_destroy(old), GPURT_SUCCESS);
        let new = stream();
        let z = malloc(WORDS * 4, new);
        eprintln!("round {round}: new stream is the old one's value: {}; block reused: {}", native(new) == old_native, z == x);
        unsafe { ok(sys::cuMemsetD32Async(z, 0xdead_beef, WORDS, native(new))) };
        expect_status!(gpurt_stream_synchronize(new), GPURT_SUCCESS);
        expect_status!(gpurt::device::ffi::gpurt_device_synchronize(0), GPURT_SUCCESS);
        let mut back = vec![0u32; WORDS];
        unsafe { ok(sys::cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), y, WORDS * 4)) };
        assert!(back == words, "round {round}: the destroyed stream's queued copy read a block already reused");
        for p in [y, z] {
            expect_status!(gpurt_free(p as *mut _), GPURT_SUCCESS);
        }
        expect_status!(gpurt_stream_destroy(new), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(keeper), GPURT_SUCCESS);
}

/// `cudaStreamPerThread` is one value but a different stream on every thread: a block
/// freed on one thread's per-thread stream, whose queued work still reads it, must
/// not go to another thread's per-thread stream, which would overwrite it at once.
fn per_thread_default_streams_of_two_threads_share_no_block() {
    let words = random_words(WORDS);
    let keeper = stream();
    let y = malloc(WORDS * 4, keeper);
    let (freed, wait_freed) = std::sync::mpsc::channel::<u64>();
    let (reused, wait_reused) = std::sync::mpsc::channel::<()>();
    let words_a = words.clone();
    let a = std::thread::spawn(move || {
        expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS);
        let mut s = std::ptr::null_mut();
        expect_status!(gpurt_stream_per_thread(0, &mut s), GPURT_SUCCESS);
        let x = malloc(WORDS * 4, s);
        expect_status!(gpurt::copy::ffi::gpurt_memcpy(x as *mut _, words_a.as_ptr().cast(), WORDS * 4, s), GPURT_SUCCESS);
        block_stream(s, 100);
        expect_status!(gpurt::copy::ffi::gpurt_memcpy_async(y as *mut _, x as *const _, WORDS * 4, s), GPURT_SUCCESS);
        expect_status!(gpurt_free(x as *mut _), GPURT_SUCCESS);
        freed.send(x).unwrap();
        wait_reused.recv().unwrap();
        expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    });
    let x = wait_freed.recv().unwrap();
    let b = std::thread::spawn(move || {
        expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS);
        let mut s = std::ptr::null_mut();
        expect_status!(gpurt_stream_per_thread(0, &mut s), GPURT_SUCCESS);
        let z = malloc(WORDS * 4, s);
        eprintln!("another thread's per-thread stream got the freed block: {}", z == x);
        expect_status!(gpurt_memset_async(z as *mut _, 0xdead_beef, 4, WORDS, s), GPURT_SUCCESS);
        expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
        expect_status!(gpurt_free(z as *mut _), GPURT_SUCCESS);
        reused.send(()).unwrap();
    });
    b.join().expect("thread B failed");
    a.join().expect("thread A failed");
    let mut back = vec![0u32; WORDS];
    expect_status!(gpurt::copy::ffi::gpurt_memcpy(back.as_mut_ptr().cast(), y as *const _, WORDS * 4, keeper), GPURT_SUCCESS);
    assert!(back == words, "thread A's queued copy read a block that thread B's per-thread stream had reused");
    expect_status!(gpurt_free(y as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(keeper), GPURT_SUCCESS);
}
