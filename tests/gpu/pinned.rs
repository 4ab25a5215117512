//! Pinned pools and copies on the GPU: deferred reuse proven with data, device-mapped
//! pointers, registered memory, 2D copies and memsets, all checked byte for byte on
//! fresh random data.

use gpurt::alloc::ffi::*;
use gpurt::copy::ffi::*;
use gpurt::pinned::ffi::*;
use gpurt::stream::ffi::*;
use gpurt::sync_debug::ffi::*;

use crate::expect_status;
use crate::util::{block_stream, malloc, random_words, stream};

pub const TESTS: &[crate::support::Test] = &[
    ("pinned_block_is_not_reused_while_its_copy_runs", pinned_block_is_not_reused_while_its_copy_runs),
    ("pinned_block_freed_on_another_thread_waits_for_a_per_thread_stream_copy", pinned_block_freed_on_another_thread_waits_for_a_per_thread_stream_copy),
    ("pinned_block_used_on_a_destroyed_stream_frees_after_its_copy", pinned_block_used_on_a_destroyed_stream_frees_after_its_copy),
    ("device_mapped_pinned_memory_is_usable_by_the_device", device_mapped_pinned_memory_is_usable_by_the_device),
    ("registered_memory_round_trips", registered_memory_round_trips),
    ("copies_2d_are_byte_exact_and_leave_padding_alone", copies_2d_are_byte_exact_and_leave_padding_alone),
    ("memsets_write_8_16_32_bit_values", memsets_write_8_16_32_bit_values),
    ("blocking_copy_is_a_synchronising_call", blocking_copy_is_a_synchronising_call),
    ("staged_copies_are_byte_exact_at_sizes_off_the_chunk", staged_copies_are_byte_exact_at_sizes_off_the_chunk),
    ("staged_copy_refuses_device_memory_as_its_host_side", staged_copy_refuses_device_memory_as_its_host_side),
    ("peer_copy_within_one_device_is_byte_exact", peer_copy_within_one_device_is_byte_exact),
];

fn default_pool() -> gpurt_pinned_pool_t {
    let mut p = std::ptr::null_mut();
    expect_status!(gpurt_pinned_pool_default(&mut p), GPURT_SUCCESS);
    p
}

fn pinned(pool: gpurt_pinned_pool_t, bytes: usize) -> *mut u32 {
    let mut p = std::ptr::null_mut();
    expect_status!(gpurt_pinned_malloc(pool, bytes, &mut p), GPURT_SUCCESS);
    p.cast()
}

fn device(bytes: usize, s: gpurt_stream_t) -> *mut libc::c_void {
    malloc(bytes, s) as *mut libc::c_void
}

fn fill(dst: *mut u32, words: &[u32]) {
    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), dst, words.len()) };
}

fn read(src: *const u32, n: usize) -> Vec<u32> {
    unsafe { std::slice::from_raw_parts(src, n) }.to_vec()
}

fn sync(s: gpurt_stream_t) {
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
}

const WORDS: usize = 4 << 20; // 16 MiB

/// Fresh random words in a new block of `pool`, and a copy of them into a new device
/// buffer (for use on `d_stream`), queued on `s` behind a 300 ms host function:
/// (block, buffer, words).
fn copy_behind_a_delay(pool: gpurt_pinned_pool_t, s: gpurt_stream_t, d_stream: gpurt_stream_t) -> (*mut u32, *mut libc::c_void, Vec<u32>) {
    let original = random_words(WORDS);
    let a = pinned(pool, WORDS * 4);
    fill(a, &original);
    let d = device(WORDS * 4, d_stream);
    block_stream(s, 300);
    expect_status!(gpurt_memcpy_async(d, a.cast(), WORDS * 4, s), GPURT_SUCCESS);
    (a, d, original)
}

/// A host-to-device copy waits behind a 300 ms host function; its pinned source is
/// freed at once. The next allocation of that size must not get the block (the copy
/// has not read it yet); the device must receive the original bytes.
fn pinned_block_is_not_reused_while_its_copy_runs() {
    let (pool, s) = (default_pool(), stream());
    let bytes = WORDS * 4;
    let (a, d, original) = copy_behind_a_delay(pool, s, s);
    expect_status!(gpurt_pinned_free(a.cast()), GPURT_SUCCESS);
    let b = pinned(pool, bytes);
    assert_ne!(a, b, "a block whose copy is still queued was handed out again");
    fill(b, &random_words(WORDS)); // would clobber the copy's source if b were a
    sync(s);
    let back = pinned(pool, bytes);
    expect_status!(gpurt_memcpy_async(back.cast(), d, bytes, s), GPURT_SUCCESS);
    sync(s);
    assert!(read(back, WORDS) == original, "the device did not receive the original bytes");
    assert!(back == a, "once the copy was done, the block was reused");
    for p in [b, back] {
        expect_status!(gpurt_pinned_free(p.cast()), GPURT_SUCCESS);
    }
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// The same on a thread's per-thread default stream, with the block freed by another
/// thread: the free's marker must cover the first thread's stream, not the freeing
/// thread's own per-thread stream (the handle is one for every thread).
fn pinned_block_freed_on_another_thread_waits_for_a_per_thread_stream_copy() {
    let pool = default_pool() as usize;
    let bytes = WORDS * 4;
    let (to_freer, freer_gets) = std::sync::mpsc::channel::<usize>();
    let (reused, wait_reused) = std::sync::mpsc::channel::<usize>();
    let copier = std::thread::spawn(move || {
        expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS);
        let mut s = std::ptr::null_mut();
        expect_status!(gpurt_stream_per_thread(0, &mut s), GPURT_SUCCESS);
        let (a, d, original) = copy_behind_a_delay(pool as gpurt_pinned_pool_t, s, s);
        to_freer.send(a as usize).unwrap();
        let b = wait_reused.recv().unwrap();
        assert_ne!(a as usize, b, "a block whose copy is still queued on another thread was handed out again");
        sync(s);
        let mut back = vec![0u32; WORDS];
        expect_status!(gpurt_memcpy(back.as_mut_ptr().cast(), d, bytes, s), GPURT_SUCCESS);
        assert!(back == original, "the device did not receive the original bytes");
        expect_status!(gpurt_free(d), GPURT_SUCCESS);
    });
    let freer = std::thread::spawn(move || {
        let a = freer_gets.recv().unwrap();
        expect_status!(gpurt_pinned_free(a as *mut _), GPURT_SUCCESS);
        let b = pinned(pool as gpurt_pinned_pool_t, bytes);
        fill(b, &random_words(WORDS)); // would clobber the copy's source if b were a
        reused.send(b as usize).unwrap();
        b as usize
    });
    let b = freer.join().expect("the freeing thread failed");
    copier.join().expect("the copying thread failed");
    expect_status!(gpurt_pinned_free(b as *mut _), GPURT_SUCCESS);
}

/// A block whose copy is still queued on a stream that has been destroyed since: its
/// free succeeds, and the block is not handed out again before the copy read it.
fn pinned_block_used_on_a_destroyed_stream_frees_after_its_copy() {
    let (pool, s, keeper) = (default_pool(), stream(), stream());
    let bytes = WORDS * 4;
    let (a, d, original) = copy_behind_a_delay(pool, s, keeper);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    expect_status!(gpurt_pinned_free(a.cast()), GPURT_SUCCESS);
    let b = pinned(pool, bytes);
    fill(b, &random_words(WORDS)); // would clobber the copy's source if b were a
    expect_status!(gpurt::device::ffi::gpurt_device_synchronize(0), GPURT_SUCCESS);
    let mut back = vec![0u32; WORDS];
    expect_status!(gpurt_memcpy(back.as_mut_ptr().cast(), d, bytes, keeper), GPURT_SUCCESS);
    assert!(back == original, "the device did not receive the original bytes");
    expect_status!(gpurt_pinned_free(b.cast()), GPURT_SUCCESS);
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(keeper), GPURT_SUCCESS);
}

fn device_mapped_pinned_memory_is_usable_by_the_device() {
    let s = stream();
    let mut pool = std::ptr::null_mut();
    expect_status!(gpurt_pinned_pool_create(gpurt::pinned::GPURT_PINNED_DEVICE_MAPPED, &mut pool), GPURT_SUCCESS);
    let n = 1 << 16;
    let words = random_words(n);
    let host = pinned(pool, n * 4);
    fill(host, &words);
    let mut mapped = std::ptr::null_mut();
    expect_status!(gpurt_pinned_device_pointer(host.cast(), &mut mapped), GPURT_SUCCESS);
    // Device-to-device from the mapped address: the device reads host memory itself.
    let d = device(n * 4, s);
    expect_status!(gpurt_memcpy_async(d, mapped, n * 4, s), GPURT_SUCCESS);
    let back = pinned(default_pool(), n * 4);
    expect_status!(gpurt_memcpy_async(back.cast(), d, n * 4, s), GPURT_SUCCESS);
    sync(s);
    let got = read(back, n);
    if got != words {
        let wrong = got.iter().zip(&words).filter(|(a, b)| a != b).count();
        let first = got.iter().zip(&words).position(|(a, b)| a != b).unwrap();
        panic!(
            "{wrong} of {n} words differ, first at {first} (got {:#x}, want {:#x}); host {host:p}, mapped {mapped:p}, device {d:p}",
            got[first], words[first]
        );
    }
    for p in [host, back] {
        expect_status!(gpurt_pinned_free(p.cast()), GPURT_SUCCESS);
    }
    expect_status!(gpurt_pinned_pool_destroy(pool), GPURT_SUCCESS);
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// Page-aligned host memory the test owns, registered, copied there and back.
fn registered_memory_round_trips() {
    let s = stream();
    let n = 1 << 20;
    let layout = std::alloc::Layout::from_size_align(n * 4, 4096).unwrap();
    let (src, dst) = unsafe { (std::alloc::alloc(layout).cast::<u32>(), std::alloc::alloc_zeroed(layout).cast::<u32>()) };
    let words = random_words(n);
    fill(src, &words);
    for p in [src, dst] {
        expect_status!(gpurt_host_register(p.cast(), n * 4, 0), GPURT_SUCCESS);
    }
    let d = device(n * 4, s);
    expect_status!(gpurt_memcpy_async(d, src.cast(), n * 4, s), GPURT_SUCCESS);
    expect_status!(gpurt_memcpy_async(dst.cast(), d, n * 4, s), GPURT_SUCCESS);
    sync(s);
    assert!(read(dst, n) == words);
    for p in [src, dst] {
        expect_status!(gpurt_host_unregister(p.cast()), GPURT_SUCCESS);
        unsafe { std::alloc::dealloc(p.cast(), layout) };
    }
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// Rows of 1000 bytes at pitch 1024 (host) to pitch 1536 (device) and back to pitch
/// 1100: every row exact, and the destination's padding keeps its 0xAB.
fn copies_2d_are_byte_exact_and_leave_padding_alone() {
    let s = stream();
    let (width, height, src_pitch, dev_pitch, dst_pitch) = (1000usize, 300usize, 1024usize, 1536usize, 1100usize);
    let src: Vec<u8> = random_words(src_pitch * height / 4).iter().flat_map(|w| w.to_le_bytes()).collect();
    let mut dst = vec![0xABu8; dst_pitch * height];
    let d = device(dev_pitch * height, s);
    expect_status!(gpurt_memcpy_2d_async(d, dev_pitch, src.as_ptr().cast(), src_pitch, width, height, s), GPURT_SUCCESS);
    expect_status!(gpurt_memcpy_2d_async(dst.as_mut_ptr().cast(), dst_pitch, d, dev_pitch, width, height, s), GPURT_SUCCESS);
    sync(s);
    for row in 0..height {
        let got = &dst[row * dst_pitch..row * dst_pitch + width];
        assert!(got == &src[row * src_pitch..row * src_pitch + width], "row {row} differs");
        assert!(dst[row * dst_pitch + width..(row + 1) * dst_pitch].iter().all(|&b| b == 0xAB), "row {row}'s padding was written");
    }
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn memsets_write_8_16_32_bit_values() {
    let s = stream();
    let value = random_words(1)[0];
    let d = device(3 * 4096, s);
    let at = |offset: usize| (d as usize + offset) as *mut libc::c_void;
    expect_status!(gpurt_memset_async(at(0), value & 0xff, 1, 4096, s), GPURT_SUCCESS);
    expect_status!(gpurt_memset_async(at(4096), value & 0xffff, 2, 2048, s), GPURT_SUCCESS);
    expect_status!(gpurt_memset_async(at(8192), value, 4, 1024, s), GPURT_SUCCESS);
    let mut back = vec![0u8; 3 * 4096];
    expect_status!(gpurt_memcpy(back.as_mut_ptr().cast(), d, back.len(), s), GPURT_SUCCESS);
    assert!(back[..4096].iter().all(|&b| b == value as u8));
    assert!(back[4096..8192].chunks(2).all(|c| u16::from_le_bytes([c[0], c[1]]) == value as u16));
    assert!(back[8192..].chunks(4).all(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) == value));
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn blocking_copy_is_a_synchronising_call() {
    let s = stream();
    let d = device(64, s);
    let mut host = [0u8; 64];
    expect_status!(gpurt_set_sync_debug_mode(gpurt::sync_debug::Mode::GPURT_SYNC_DEBUG_ERROR as i32), GPURT_SUCCESS);
    expect_status!(gpurt_memcpy(host.as_mut_ptr().cast(), d, 64, s), GPURT_ERROR_SYNCHRONIZING_CALL);
    expect_status!(gpurt_memcpy_async(host.as_mut_ptr().cast(), d, 64, s), GPURT_SUCCESS);
    expect_status!(gpurt_set_sync_debug_mode(gpurt::sync_debug::Mode::GPURT_SYNC_DEBUG_OFF as i32), GPURT_SUCCESS);
    sync(s);
    expect_status!(gpurt_free(d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn bytes_of(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Uploads from pageable memory at sizes around the staging chunk (4 MiB) and beyond
/// the ring, from an odd offset; the source is overwritten as soon as the upload
/// returns (it promised the source may be reused); staged downloads to an odd offset
/// and plain blocking copies must both give back the original bytes.
fn staged_copies_are_byte_exact_at_sizes_off_the_chunk() {
    let s = stream();
    let chunk = gpurt::copy::staged::STAGING_CHUNK as usize;
    for size in [1, 4095, chunk - 1, chunk + 1, 3 * chunk + 12345, 17 * chunk - 3] {
        let original = bytes_of(&random_words(size / 4 + 2));
        let mut src = original.clone();
        let d = device(size, s);
        expect_status!(gpurt_memcpy_htod_staged(d, src[1..].as_ptr().cast(), size, s), GPURT_SUCCESS);
        src.iter_mut().for_each(|b| *b = !*b);
        let mut staged_back = vec![0u8; size + 3];
        expect_status!(gpurt_memcpy_dtoh_staged(staged_back[3..].as_mut_ptr().cast(), d, size, s), GPURT_SUCCESS);
        let mut plain_back = vec![0u8; size];
        expect_status!(gpurt_memcpy(plain_back.as_mut_ptr().cast(), d, size, s), GPURT_SUCCESS);
        let want = &original[1..1 + size];
        assert!(plain_back == want, "size {size}: the device did not receive the source's bytes");
        assert!(&staged_back[3..] == want, "size {size}: the staged download differs");
        assert!(staged_back[..3] == [0, 0, 0], "size {size}: the download wrote before its destination");
        expect_status!(gpurt_free(d), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn staged_copy_refuses_device_memory_as_its_host_side() {
    let s = stream();
    let (a, b) = (device(1 << 20, s), device(1 << 20, s));
    expect_status!(gpurt_memcpy_htod_staged(a, b, 1 << 20, s), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_memcpy_dtoh_staged(a, b, 1 << 20, s), GPURT_ERROR_INVALID_ARGUMENT);
    for p in [a, b] {
        expect_status!(gpurt_free(p), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

/// The peer path with both sides on device 0 (the machine has one GPU): the driver
/// still runs the peer copy entry point end to end.
fn peer_copy_within_one_device_is_byte_exact() {
    let s = stream();
    let n = 3 << 18;
    let words = random_words(n);
    let (a, b) = (device(n * 4, s), device(n * 4, s));
    expect_status!(gpurt_memcpy(a, words.as_ptr().cast(), n * 4, s), GPURT_SUCCESS);
    expect_status!(gpurt_memcpy_peer_async(b, 0, a, 0, n * 4, s), GPURT_SUCCESS);
    let mut back = vec![0u32; n];
    expect_status!(gpurt_memcpy(back.as_mut_ptr().cast(), b, n * 4, s), GPURT_SUCCESS);
    assert!(back == words);
    expect_status!(gpurt_memcpy_peer_async(b, 0, a, 7, n * 4, s), GPURT_ERROR_INVALID_ARGUMENT);
    for p in [a, b] {
        expect_status!(gpurt_free(p), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}
