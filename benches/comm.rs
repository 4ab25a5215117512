//! Collectives: gpurt's `gpurt_comm_all_reduce` beside raw `ncclAllReduce` on the
//! same buffers and stream, in one run (targets from the NCCL issue: per-call
//! overhead ≤ 1 µs at 4 KiB; bandwidth ≥ 97 % of raw at ≥ 4 MiB). Each side has its
//! own communicator over the same devices: one rank per GPU of this machine, all
//! driven from this thread in a group. On a one-GPU machine a communicator has one
//! rank and an all-reduce is a device copy: the overhead figure holds, the
//! bandwidth figure is the copy's, not the network's.

use std::ffi::{c_int, c_void};
use std::time::Instant;

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{median, ok, st, sym, H};

type NcclComm = *mut c_void;

struct RawNccl {
    _lib: libloading::Library,
    init_all: unsafe extern "C" fn(*mut NcclComm, c_int, *const c_int) -> c_int,
    all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, *mut c_void) -> c_int,
    group_start: unsafe extern "C" fn() -> c_int,
    group_end: unsafe extern "C" fn() -> c_int,
}

fn main() {
    let (lib, basics) = common::open("comm");
    let nccl = match unsafe { libloading::Library::new("libnccl.so.2") } {
        Ok(l) => l,
        Err(e) => {
            println!("comm benchmark SKIPPED: no NCCL ({e})");
            return;
        }
    };
    let raw = unsafe {
        RawNccl {
            init_all: *nccl.get(b"ncclCommInitAll").unwrap(),
            all_reduce: *nccl.get(b"ncclAllReduce").unwrap(),
            group_start: *nccl.get(b"ncclGroupStart").unwrap(),
            group_end: *nccl.get(b"ncclGroupEnd").unwrap(),
            _lib: nccl,
        }
    };
    type Comm = *mut c_void;
    let init_all: unsafe extern "C" fn(*const c_int, c_int, *mut Comm) -> i32 = unsafe { sym!(lib, "gpurt_comm_init_all") };
    let all_reduce: unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, Comm, H) -> i32 = unsafe { sym!(lib, "gpurt_comm_all_reduce") };
    let group_start: unsafe extern "C" fn() -> i32 = unsafe { sym!(lib, "gpurt_comm_group_start") };
    let group_end: unsafe extern "C" fn() -> i32 = unsafe { sym!(lib, "gpurt_comm_group_end") };
    let device_count: unsafe extern "C" fn(*mut c_int) -> i32 = unsafe { sym!(lib, "gpurt_device_count") };
    let set_device: unsafe extern "C" fn(c_int) -> i32 = unsafe { sym!(lib, "gpurt_set_device") };
    let mut n = 0;
    unsafe { st(device_count(&mut n)) };
    let devices: Vec<c_int> = (0..n).collect();
    let mut raw_comms = vec![std::ptr::null_mut(); n as usize];
    let mut comms = vec![std::ptr::null_mut(); n as usize];
    unsafe {
        assert_eq!((raw.init_all)(raw_comms.as_mut_ptr(), n, devices.as_ptr()), 0, "ncclCommInitAll");
        st(init_all(devices.as_ptr(), n, comms.as_mut_ptr()));
    }
    println!("{n} rank(s), one per GPU, driven from one thread");
    // One stream and two buffers per device.
    let mut streams = Vec::new();
    let mut buffers = Vec::new();
    const MAX: usize = 256 << 20;
    for d in 0..n {
        unsafe { st(set_device(d)) };
        let (s, native) = basics.stream_on(d);
        let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
        unsafe {
            st((basics.malloc)(MAX, s, &mut a));
            st((basics.malloc)(MAX, s, &mut b));
        }
        streams.push((s, native));
        buffers.push((a, b));
    }
    unsafe { st(set_device(0)) };
    let sync_all = || streams.iter().for_each(|&(s, _)| unsafe { st((basics.stream_synchronize)(s)) });
    let float = 7; // ncclFloat32 / GPURT_DTYPE_F32 = 0
    let issue_raw = |count: usize| unsafe {
        (raw.group_start)();
        for d in 0..n as usize {
            let (a, b) = buffers[d];
            assert_eq!((raw.all_reduce)(a, b, count, float, 0, raw_comms[d], streams[d].1), 0);
        }
        (raw.group_end)();
    };
    let issue_gpurt = |count: usize| unsafe {
        st(group_start());
        for d in 0..n as usize {
            let (a, b) = buffers[d];
            st(all_reduce(a, b, count, 0, 0, comms[d], streams[d].0));
        }
        st(group_end());
    };

    // Per-call overhead at 4 KiB: host time to issue, in alternation, medians.
    let calls = 500;
    let (mut raw_ns, mut ours_ns) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        for (samples, issue) in [(&mut raw_ns, &issue_raw as &dyn Fn(usize)), (&mut ours_ns, &issue_gpurt)] {
            sync_all();
            let t = Instant::now();
            (0..calls).for_each(|_| issue(1024));
            samples.push(t.elapsed().as_nanos() as f64 / calls as f64);
        }
    }
    sync_all();
    let (r, o) = (median(raw_ns), median(ours_ns));
    println!("all_reduce 4 KiB, host ns per call: raw {r:.0}, gpurt {o:.0}");
    println!("TARGET per-call overhead at 4 KiB <= 1 us: {} (+{:.0} ns)", if o - r <= 1000.0 { "PASS" } else { "MISS" }, o - r);

    // Bandwidth: device time of 20 calls, timed with events on device 0's stream.
    for bytes in [4usize << 20, 64 << 20, MAX] {
        let count = bytes / 4;
        let mut start = std::ptr::null_mut();
        let mut end = std::ptr::null_mut();
        unsafe {
            ok(sys::cuEventCreate(&mut start, 0));
            ok(sys::cuEventCreate(&mut end, 0));
        }
        let time = |issue: &dyn Fn(usize)| {
            sync_all();
            unsafe { ok(sys::cuEventRecord(start, streams[0].1 as sys::CUstream)) };
            (0..20).for_each(|_| issue(count));
            unsafe { ok(sys::cuEventRecord(end, streams[0].1 as sys::CUstream)) };
            sync_all();
            let mut ms = 0f32;
            unsafe { ok(sys::cuEventElapsedTime(&mut ms, start, end)) };
            bytes as f64 * 20.0 / (ms as f64 / 1e3) / 1e9
        };
        let (mut rs, mut os) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            rs.push(time(&issue_raw));
            os.push(time(&issue_gpurt));
        }
        let (r, o) = (median(rs), median(os));
        println!(
            "all_reduce {} MiB, GB/s (algorithm bandwidth): raw {r:.1}, gpurt {o:.1}\nTARGET bandwidth >= 97 % of raw at {} MiB: {} ({:.1} %)",
            bytes >> 20,
            bytes >> 20,
            if o >= 0.97 * r { "PASS" } else { "MISS" },
            100.0 * o / r
        );
    }
}
