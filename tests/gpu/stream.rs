use std::sync::atomic::{AtomicUsize, Ordering};

use cudarc::driver::sys;
use gpurt::event::ffi::*;
use gpurt::event::{GPURT_EVENT_BLOCKING_SYNC, GPURT_EVENT_DISABLE_TIMING, GPURT_EVENT_INTERPROCESS};
use gpurt::stream::GPURT_STREAM_NON_BLOCKING;
use gpurt::stream::ffi::*;
use gpurt::sync_debug::ffi::*;

use crate::expect_status;
use crate::util::{block_stream, gate_stream, native, ok, random_words, stream, ForeignCapture};

pub const TESTS: &[crate::support::Test] = &[
    ("wait_event_orders_work_across_streams", wait_event_orders_work_across_streams),
    ("wait_stream_orders_work_across_streams", wait_stream_orders_work_across_streams),
    ("host_callback_runs_once_with_its_pointer", host_callback_runs_once_with_its_pointer),
    ("elapsed_time_of_a_known_delay_is_plausible", elapsed_time_of_a_known_delay_is_plausible),
    ("elapsed_time_errors_are_clear", elapsed_time_errors_are_clear),
    ("external_stream_round_trip", external_stream_round_trip),
    ("stream_scopes_nest_per_thread", stream_scopes_nest_per_thread),
    ("interprocess_event_crosses_processes", interprocess_event_crosses_processes),
    ("sync_debug_error_mode_refuses_stream_and_event_sync", sync_debug_error_mode_refuses_stream_and_event_sync),
    ("pools_reuse_driver_objects", pools_reuse_driver_objects),
    ("priorities_are_checked_against_the_device_range", priorities_are_checked_against_the_device_range),
    ("capture_status_is_reported", capture_status_is_reported),
    ("misuse_of_live_and_destroyed_handles", misuse_of_live_and_destroyed_handles),
    ("destroying_a_busy_stream_is_safe", destroying_a_busy_stream_is_safe),
];

fn random_u32() -> u32 {
    random_words(1)[0] | 1
}

const WORDS: usize = 1 << 20;

struct Buffers {
    x: sys::CUdeviceptr,
    y: sys::CUdeviceptr,
}

impl Buffers {
    fn new() -> Buffers {
        expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS);
        let (mut x, mut y) = (0, 0);
        unsafe {
            ok(sys::cuMemAlloc_v2(&mut x, WORDS * 4));
            ok(sys::cuMemAlloc_v2(&mut y, WORDS * 4));
        }
        Buffers { x, y }
    }
    fn read_y(&self) -> Vec<u32> {
        let mut host = vec![0u32; WORDS];
        unsafe { ok(sys::cuMemcpyDtoH_v2(host.as_mut_ptr().cast(), self.y, WORDS * 4)) };
        host
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        unsafe {
            sys::cuMemFree_v2(self.x);
            sys::cuMemFree_v2(self.y);
        }
    }
}

/// Stream A is held up, then writes X; stream B copies X to Y after a cross-stream
/// dependency. Y must hold A's value, not the old one.
fn check_cross_stream_order(make_b_wait: impl Fn(gpurt_stream_t, gpurt_stream_t)) {
    let buf = Buffers::new();
    let (a, b) = (stream(), stream());
    let (old, new) = (random_u32(), random_u32() ^ 0x5a5a_5a5a);
    unsafe {
        ok(sys::cuMemsetD32_v2(buf.x, old, WORDS));
        ok(sys::cuCtxSynchronize());
    }
    block_stream(a, 100);
    unsafe { ok(sys::cuMemsetD32Async(buf.x, new, WORDS, native(a))) };
    make_b_wait(b, a);
    unsafe { ok(sys::cuMemcpyDtoDAsync_v2(buf.y, buf.x, WORDS * 4, native(b))) };
    expect_status!(gpurt_stream_synchronize(b), GPURT_SUCCESS);
    let y = buf.read_y();
    assert!(y.iter().all(|v| *v == new), "stream B saw {:#x}, expected {new:#x} (old {old:#x})", y[0]);
    expect_status!(gpurt_stream_destroy(a), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(b), GPURT_SUCCESS);
}

fn wait_event_orders_work_across_streams() {
    check_cross_stream_order(|b, a| {
        let mut e = std::ptr::null_mut();
        expect_status!(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &mut e), GPURT_SUCCESS);
        expect_status!(gpurt_event_record(e, a), GPURT_SUCCESS);
        expect_status!(gpurt_event_query(e), GPURT_ERROR_NOT_READY);
        expect_status!(gpurt_stream_query(a), GPURT_ERROR_NOT_READY);
        expect_status!(gpurt_stream_wait_event(b, e), GPURT_SUCCESS);
        expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    });
}

fn wait_stream_orders_work_across_streams() {
    check_cross_stream_order(|b, a| expect_status!(gpurt_stream_wait_stream(b, a), GPURT_SUCCESS));
}

unsafe extern "C" fn count_call(user: *mut libc::c_void) {
    (*(user as *const AtomicUsize)).fetch_add(1, Ordering::SeqCst);
}

fn host_callback_runs_once_with_its_pointer() {
    let s = stream();
    let counters: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
    block_stream(s, 20);
    for c in &counters[1..3] {
        expect_status!(gpurt_stream_launch_host_func(s, Some(count_call), c as *const _ as *mut _), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_launch_host_func(s, None, std::ptr::null_mut()), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    let seen: Vec<usize> = counters.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(seen, vec![0, 1, 1, 0]);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn elapsed_time_of_a_known_delay_is_plausible() {
    let s = stream();
    let (mut start, mut end) = (std::ptr::null_mut(), std::ptr::null_mut());
    expect_status!(gpurt_event_create(0, 0, &mut start), GPURT_SUCCESS);
    expect_status!(gpurt_event_create(0, GPURT_EVENT_BLOCKING_SYNC, &mut end), GPURT_SUCCESS);
    expect_status!(gpurt_event_record(start, s), GPURT_SUCCESS);
    block_stream(s, 50);
    expect_status!(gpurt_event_record(end, s), GPURT_SUCCESS);
    expect_status!(gpurt_event_synchronize(end), GPURT_SUCCESS);
    let mut ms = 0f32;
    expect_status!(gpurt_event_elapsed_time(start, end, &mut ms), GPURT_SUCCESS);
    assert!((45.0..1000.0).contains(&ms), "elapsed {ms} ms for a 50 ms delay");
    eprintln!("elapsed across a 50 ms host delay: {ms:.3} ms");
    for e in [start, end] {
        expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn elapsed_time_errors_are_clear() {
    let s = stream();
    let (mut a, mut b, mut untimed) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
    expect_status!(gpurt_event_create(0, 0, &mut a), GPURT_SUCCESS);
    expect_status!(gpurt_event_create(0, 0, &mut b), GPURT_SUCCESS);
    expect_status!(gpurt_event_pool_get(0, &mut untimed), GPURT_SUCCESS);
    let mut ms = 0f32;
    expect_status!(gpurt_event_record(a, s), GPURT_SUCCESS);
    expect_status!(gpurt_event_elapsed_time(a, b, &mut ms), GPURT_ERROR_INVALID_ARGUMENT);
    assert!(crate::support::last_message().contains("not been recorded"));
    expect_status!(gpurt_event_record(untimed, s), GPURT_SUCCESS);
    expect_status!(gpurt_event_elapsed_time(a, untimed, &mut ms), GPURT_ERROR_INVALID_ARGUMENT);
    assert!(crate::support::last_message().contains("DISABLE_TIMING"));
    expect_status!(gpurt_event_elapsed_time(a, a, std::ptr::null_mut()), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    for e in [a, b, untimed] {
        expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn external_stream_round_trip() {
    expect_status!(gpurt::device::ffi::gpurt_set_device(0), GPURT_SUCCESS);
    let mut raw = std::ptr::null_mut();
    unsafe { ok(sys::cuStreamCreateWithPriority(&mut raw, 1, 0)) };
    let mut wrapped = std::ptr::null_mut();
    expect_status!(gpurt_stream_wrap(0, raw.cast(), &mut wrapped), GPURT_SUCCESS);
    assert_eq!(native(wrapped), raw);
    let mut flags = 0;
    expect_status!(gpurt_stream_get_flags(wrapped, &mut flags), GPURT_SUCCESS);
    assert_eq!(flags, GPURT_STREAM_NON_BLOCKING);
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_event_pool_get(0, &mut e), GPURT_SUCCESS);
    expect_status!(gpurt_event_record(e, wrapped), GPURT_SUCCESS);
    expect_status!(gpurt_event_synchronize(e), GPURT_SUCCESS);
    expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(wrapped), GPURT_SUCCESS);
    expect_status!(gpurt_stream_query(wrapped), GPURT_ERROR_INVALID_HANDLE);
    // The caller's stream is still alive and still the caller's to destroy.
    unsafe {
        ok(sys::cuStreamQuery(raw));
        ok(sys::cuStreamDestroy_v2(raw));
    }
}

fn stream_scopes_nest_per_thread() {
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                let mut default = std::ptr::null_mut();
                let mut cur = std::ptr::null_mut();
                expect_status!(gpurt_stream_default(0, &mut default), GPURT_SUCCESS);
                expect_status!(gpurt_current_stream(0, &mut cur), GPURT_SUCCESS);
                assert_eq!(cur, default);
                let (s1, s2) = (stream(), stream());
                for _ in 0..100 {
                    expect_status!(gpurt_stream_push(s1), GPURT_SUCCESS);
                    expect_status!(gpurt_current_stream(-1, &mut cur), GPURT_SUCCESS);
                    assert_eq!(cur, s1);
                    expect_status!(gpurt_stream_push(s2), GPURT_SUCCESS);
                    expect_status!(gpurt_current_stream(0, &mut cur), GPURT_SUCCESS);
                    assert_eq!(cur, s2);
                    expect_status!(gpurt_stream_pop(), GPURT_SUCCESS);
                    expect_status!(gpurt_current_stream(0, &mut cur), GPURT_SUCCESS);
                    assert_eq!(cur, s1);
                    expect_status!(gpurt_stream_pop(), GPURT_SUCCESS);
                    expect_status!(gpurt_current_stream(0, &mut cur), GPURT_SUCCESS);
                    assert_eq!(cur, default);
                }
                expect_status!(gpurt_stream_pop(), GPURT_ERROR_INVALID_ARGUMENT);
                // A destroyed current stream falls back to the default.
                expect_status!(gpurt_set_stream(s1), GPURT_SUCCESS);
                expect_status!(gpurt_stream_destroy(s1), GPURT_SUCCESS);
                expect_status!(gpurt_current_stream(0, &mut cur), GPURT_SUCCESS);
                assert_eq!(cur, default);
                expect_status!(gpurt_stream_destroy(s2), GPURT_SUCCESS);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// The child side of the IPC test: opens the event and reports its query at once
/// (the parent holds the event's stream until it has read that line), then waits
/// for it and reports again.
pub fn ipc_child(hex: &str) -> ! {
    let mut ipc = gpurt_ipc_event_handle_t { reserved: [0; 64] };
    for (i, byte) in ipc.reserved.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    let mut e = std::ptr::null_mut();
    let mut status = gpurt_event_open_ipc(0, &ipc, &mut e);
    let pending = gpurt_event_query(e);
    println!("ipc-child open={status:?} query-before={pending:?}");
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    if status == gpurt::Status::GPURT_SUCCESS {
        status = gpurt_event_synchronize(e);
    }
    let done = gpurt_event_query(e);
    println!("ipc-child sync={status:?} query-after={done:?}");
    gpurt_event_destroy(e);
    std::process::exit(if status == gpurt::Status::GPURT_SUCCESS && done == gpurt::Status::GPURT_SUCCESS { 0 } else { 1 });
}

fn interprocess_event_crosses_processes() {
    let s = stream();
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_event_create(0, GPURT_EVENT_INTERPROCESS, &mut e), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_event_create(0, GPURT_EVENT_INTERPROCESS | GPURT_EVENT_DISABLE_TIMING, &mut e), GPURT_SUCCESS);
    let gate = gate_stream(s);
    expect_status!(gpurt_event_record(e, s), GPURT_SUCCESS);
    let mut ipc = gpurt_ipc_event_handle_t { reserved: [0; 64] };
    expect_status!(gpurt_event_ipc_handle(e, &mut ipc), GPURT_SUCCESS);
    let hex: String = ipc.reserved.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("GPURT_IPC_CHILD", hex)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The event stays pending until the child has reported its first query.
    let mut first = String::new();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut reader, &mut first).unwrap();
    gate.store(true, std::sync::atomic::Ordering::Release);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = format!("{first}{rest}");
    eprintln!("{}", stdout.trim());
    assert!(out.status.success(), "child failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("query-before=GPURT_ERROR_NOT_READY"), "the child should have seen the parent's pending work: {stdout}");
    expect_status!(gpurt_event_query(e), GPURT_SUCCESS);
    expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn sync_debug_error_mode_refuses_stream_and_event_sync() {
    let s = stream();
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_event_pool_get(0, &mut e), GPURT_SUCCESS);
    expect_status!(gpurt_event_record(e, s), GPURT_SUCCESS);
    expect_status!(gpurt_set_sync_debug_mode(2), GPURT_SUCCESS);
    expect_status!(gpurt_stream_synchronize(s), GPURT_ERROR_SYNCHRONIZING_CALL);
    assert!(crate::support::last_message().contains("stream synchronize"));
    expect_status!(gpurt_event_synchronize(e), GPURT_ERROR_SYNCHRONIZING_CALL);
    // Non-blocking calls are unaffected.
    expect_status!(gpurt_event_record(e, s), GPURT_SUCCESS);
    expect_status!(gpurt_set_sync_debug_mode(0), GPURT_SUCCESS);
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn pools_reuse_driver_objects() {
    let mut e1 = std::ptr::null_mut();
    let mut e2 = std::ptr::null_mut();
    expect_status!(gpurt_event_pool_get(0, &mut e1), GPURT_SUCCESS);
    let raw1 = gpurt::event::get(gpurt::handle::Handle::from_ptr(e1)).unwrap().raw;
    expect_status!(gpurt_event_destroy(e1), GPURT_SUCCESS);
    expect_status!(gpurt_event_pool_get(0, &mut e2), GPURT_SUCCESS);
    let raw2 = gpurt::event::get(gpurt::handle::Handle::from_ptr(e2)).unwrap().raw;
    assert_eq!(raw1, raw2, "the pooled driver event is reused");
    assert_ne!(e1, e2, "but under a new handle");
    expect_status!(gpurt_event_record(e1, e1.cast()), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_event_destroy(e2), GPURT_SUCCESS);

    for high in [0, 1] {
        let mut seen = Vec::new();
        for _ in 0..2 * gpurt::stream::GPURT_STREAM_POOL_SIZE {
            let mut s = std::ptr::null_mut();
            expect_status!(gpurt_stream_from_pool(0, high, &mut s), GPURT_SUCCESS);
            seen.push(s);
        }
        let distinct: std::collections::HashSet<_> = seen.iter().collect();
        assert_eq!(distinct.len(), gpurt::stream::GPURT_STREAM_POOL_SIZE);
        let (mut p, mut least, mut greatest) = (0, 0, 0);
        expect_status!(gpurt_stream_get_priority(seen[0], &mut p), GPURT_SUCCESS);
        expect_status!(gpurt_stream_priority_range(0, &mut least, &mut greatest), GPURT_SUCCESS);
        assert_eq!(p, if high == 1 { greatest } else { least });
        // Destroying a pooled stream leaves it in the pool, usable.
        expect_status!(gpurt_stream_destroy(seen[0]), GPURT_SUCCESS);
        expect_status!(gpurt_stream_query(seen[0]), GPURT_SUCCESS);
    }
}

fn priorities_are_checked_against_the_device_range() {
    let (mut least, mut greatest) = (0, 0);
    expect_status!(gpurt_stream_priority_range(0, &mut least, &mut greatest), GPURT_SUCCESS);
    assert!(greatest < least, "range [{greatest}, {least}]");
    let mut s = std::ptr::null_mut();
    expect_status!(gpurt_stream_create(0, 0, greatest - 1, &mut s), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_stream_create(0, 0, least + 1, &mut s), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_stream_create(0, 8, 0, &mut s), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_stream_create(0, 0, greatest, &mut s), GPURT_SUCCESS);
    let (mut p, mut d, mut id) = (0, -1, 0u64);
    expect_status!(gpurt_stream_get_priority(s, &mut p), GPURT_SUCCESS);
    expect_status!(gpurt_stream_get_device(s, &mut d), GPURT_SUCCESS);
    expect_status!(gpurt_stream_get_id(s, &mut id), GPURT_SUCCESS);
    assert_eq!((p, d), (greatest, 0));
    assert!(id > 0);
    let mut raw_p = 0;
    unsafe { ok(sys::cuStreamGetPriority(native(s), &mut raw_p)) };
    assert_eq!(raw_p, greatest);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn capture_status_is_reported() {
    let s = stream();
    let mut capturing = -1;
    expect_status!(gpurt_stream_is_capturing(s, &mut capturing), GPURT_SUCCESS);
    assert_eq!(capturing, 0);
    let capture = ForeignCapture::begin(s);
    expect_status!(gpurt_stream_is_capturing(s, &mut capturing), GPURT_SUCCESS);
    assert_eq!(capturing, 1);
    let mut status = -1;
    expect_status!(gpurt_stream_capture_status(s, &mut status), GPURT_SUCCESS);
    assert_eq!(status, 1);
    expect_status!(gpurt_set_stream(s), GPURT_SUCCESS);
    expect_status!(gpurt_is_current_stream_capturing(&mut capturing), GPURT_SUCCESS);
    assert_eq!(capturing, 1);
    assert_eq!(
        gpurt::stream::ensure_not_capturing(gpurt::handle::Handle::from_ptr(s), "allocating").unwrap_err().status,
        gpurt::Status::GPURT_ERROR_STREAM_CAPTURE
    );
    // Synchronising a capturing stream is illegal: the status says so.
    expect_status!(gpurt_stream_synchronize(s), GPURT_ERROR_STREAM_CAPTURE);
    let (end, graph) = capture.end();
    if !graph.is_null() {
        unsafe { sys::cuGraphDestroy(graph) };
    }
    eprintln!("end capture after the illegal sync: {end:?}");
    let mut def = std::ptr::null_mut();
    expect_status!(gpurt_stream_default(0, &mut def), GPURT_SUCCESS);
    expect_status!(gpurt_set_stream(def), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn misuse_of_live_and_destroyed_handles() {
    let s = stream();
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_event_create(0, 0, &mut e), GPURT_SUCCESS);
    // wrong kind both ways
    expect_status!(gpurt_stream_query(e.cast()), GPURT_ERROR_INVALID_HANDLE);
    assert!(crate::support::last_message().contains("expected a stream handle, got a event handle"));
    expect_status!(gpurt_event_query(s.cast()), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_event_record(e, e.cast()), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_stream_wait_event(s, s.cast()), GPURT_ERROR_INVALID_HANDLE);
    // destroyed and double destroyed
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_stream_query(s), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_event_record(e, s), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
    expect_status!(gpurt_event_destroy(e), GPURT_ERROR_INVALID_HANDLE);
    expect_status!(gpurt_event_synchronize(e), GPURT_ERROR_INVALID_HANDLE);
    // bad device ordinals
    let mut s2 = std::ptr::null_mut();
    expect_status!(gpurt_stream_create(99, 0, 0, &mut s2), GPURT_ERROR_INVALID_ARGUMENT);
    expect_status!(gpurt_event_pool_get(-7, &mut e), GPURT_ERROR_INVALID_ARGUMENT);
}

fn destroying_a_busy_stream_is_safe() {
    let buf = Buffers::new();
    let s = stream();
    let value = random_u32();
    block_stream(s, 50);
    unsafe { ok(sys::cuMemsetD32Async(buf.y, value, WORDS, native(s))) };
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_event_create(0, GPURT_EVENT_DISABLE_TIMING, &mut e), GPURT_SUCCESS);
    expect_status!(gpurt_event_record(e, s), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
    // The queued work still completes after the destroy.
    expect_status!(gpurt_event_synchronize(e), GPURT_SUCCESS);
    assert!(buf.read_y().iter().all(|v| *v == value));
    expect_status!(gpurt_event_destroy(e), GPURT_SUCCESS);
}
