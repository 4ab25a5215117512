//! Graphs and kernels against direct launches and the raw driver, in one process
//! (gpurt through its shared library). Targets (from the graphs issue):
//!   1. a captured sequence of 10 / 100 / 1000 small kernels: µs per replay against
//!      µs per direct sequence on a stream (reported);
//!   2. gpurt_graph_launch against cuGraphLaunch of the same exec: within 5 %;
//!   3. NVRTC: compiling once against a cached kernel lookup, which must be < 1 µs;
//!   4. an elementwise call on a cached expression against a plain launch of a
//!      cached kernel, host time per call (reported).

use std::ffi::{c_char, c_void, CString};
use std::time::Instant;

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{median, ok, st, sym, time_ns, H};

struct Graphs {
    rtc_get_kernel: unsafe extern "C" fn(*const c_char, *const c_char, *const *const c_char, usize, *mut H) -> i32,
    rtc_compile: unsafe extern "C" fn(*const c_char, *const *const c_char, usize, *mut H) -> i32,
    launch_kernel: unsafe extern "C" fn(H, u32, u32, u32, u32, u32, u32, u32, H, *mut *mut c_void) -> i32,
    begin_capture: unsafe extern "C" fn(H, i32, H) -> i32,
    end_capture: unsafe extern "C" fn(H, *mut H) -> i32,
    instantiate: unsafe extern "C" fn(H, u64, H, *mut H) -> i32,
    graph_launch: unsafe extern "C" fn(H, H) -> i32,
    exec_native: unsafe extern "C" fn(H, *mut H) -> i32,
    elementwise: unsafe extern "C" fn(*const c_char, *const *const c_char, *const H, usize, i32, usize, H, H) -> i32,
}

fn load(lib: &libloading::Library) -> Graphs {
    unsafe {
        Graphs {
            rtc_get_kernel: sym!(lib, "gpurt_rtc_get_kernel"),
            rtc_compile: sym!(lib, "gpurt_rtc_compile"),
            launch_kernel: sym!(lib, "gpurt_launch_kernel"),
            begin_capture: sym!(lib, "gpurt_stream_begin_capture"),
            end_capture: sym!(lib, "gpurt_stream_end_capture"),
            instantiate: sym!(lib, "gpurt_graph_instantiate"),
            graph_launch: sym!(lib, "gpurt_graph_launch"),
            exec_native: sym!(lib, "gpurt_graph_exec_native"),
            elementwise: sym!(lib, "gpurt_elementwise"),
        }
    }
}

const SOURCE: &str = "extern \"C\" __global__ void bump(unsigned* x) { if (threadIdx.x == 0) atomicAdd(x + blockIdx.x, 1u); }";

fn main() {
    let (lib, b) = common::open("graphs");
    let g = load(&lib);
    let (stream, native) = b.stream();
    let (mut counter, mut kernel) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (src, name) = (CString::new(SOURCE).unwrap(), CString::new("bump").unwrap());
    unsafe { st((b.malloc)(4096, stream, &mut counter)) };
    // NVRTC: a source no cache has seen, then the cached lookup.
    let fresh = CString::new(format!("{SOURCE}\n// {}\n", std::process::id() as u128 * 7919 + Instant::now().elapsed().as_nanos())).unwrap();
    let t = Instant::now();
    let mut program = std::ptr::null_mut();
    unsafe { st((g.rtc_compile)(fresh.as_ptr(), std::ptr::null(), 0, &mut program)) };
    let compile_ns = t.elapsed().as_nanos() as f64;
    unsafe { st((g.rtc_get_kernel)(src.as_ptr(), name.as_ptr(), std::ptr::null(), 0, &mut kernel)) };
    let lookup_ns = time_ns(21, 10_000, || unsafe {
        let mut k = std::ptr::null_mut();
        st((g.rtc_get_kernel)(src.as_ptr(), name.as_ptr(), std::ptr::null(), 0, &mut k));
    });
    let mut arg = counter;
    let args = [(&mut arg as *mut H).cast::<c_void>()];
    let launch = |blocks: u32| unsafe { st((g.launch_kernel)(kernel, blocks, 1, 1, 32, 1, 1, 0, stream, args.as_ptr() as *mut _)) };
    let sync = || unsafe { st((b.stream_synchronize)(stream)) };

    println!("\n| workload | gpurt | reference | target | result |");
    println!("| --- | ---: | ---: | --- | --- |");
    let mut execs = Vec::new();
    for len in [10usize, 100, 1000] {
        let mut graph = std::ptr::null_mut();
        let mut exec = std::ptr::null_mut();
        unsafe {
            st((g.begin_capture)(stream, 0, std::ptr::null_mut()));
            (0..len).for_each(|_| launch(1));
            st((g.end_capture)(stream, &mut graph));
            st((g.instantiate)(graph, 0, std::ptr::null_mut(), &mut exec));
            st((g.graph_launch)(exec, stream));
        }
        sync();
        let reps = (2000 / len).max(3);
        let replay = median((0..15).map(|_| per_run(reps, &|| unsafe { st((g.graph_launch)(exec, stream)) }, &sync)).collect());
        let direct = median((0..15).map(|_| per_run(reps, &|| (0..len).for_each(|_| launch(1)), &sync)).collect());
        println!(
            "| {len} kernels: graph replay vs direct launches (µs per sequence) | {:.1} | {:.1} | report ({:.2}x) | info |",
            replay / 1e3,
            direct / 1e3,
            direct / replay
        );
        execs.push(exec);
    }
    // The same exec through gpurt and through the driver, batches interleaved.
    let exec = execs[0];
    let mut raw_exec = std::ptr::null_mut();
    unsafe { st((g.exec_native)(exec, &mut raw_exec)) };
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..21 {
        ours.push(per_run(200, &|| unsafe { st((g.graph_launch)(exec, stream)) }, &sync));
        raw.push(per_run(200, &|| unsafe { ok(sys::cuGraphLaunch(raw_exec.cast(), native.cast())) }, &sync));
    }
    let (ours, raw) = (median(ours), median(raw));
    let pass = if ours <= raw * 1.05 { "PASS" } else { "MISS" };
    println!("| graph launch, 10 kernels (ns per launch) | {ours:.0} | {raw:.0} (cuGraphLaunch) | <= raw + 5 % ({:+.1} %) | {pass} |", (ours / raw - 1.0) * 100.0);
    println!("| NVRTC compile, first time (µs) | {:.0} | | info | info |", compile_ns / 1e3);
    let pass = if lookup_ns < 1000.0 { "PASS" } else { "MISS" };
    println!("| cached kernel lookup, gpurt_rtc_get_kernel (ns) | {lookup_ns:.0} | | < 1000 | {pass} |");

    // `out = a * b + c` over 1024 floats: the host's time per call, batches of 100
    // calls (the stream drained between batches, untimed), against plain launches.
    let n = 1024;
    let mut bufs = [std::ptr::null_mut(); 4];
    bufs.iter_mut().for_each(|p| unsafe { st((b.malloc)(n * 4, stream, p)) });
    let expression = CString::new("out = a * b + c").unwrap();
    let names = ["a", "b", "c"].map(|n| CString::new(n).unwrap());
    let name_ptrs = names.each_ref().map(|n| n.as_ptr());
    let elementwise = || unsafe {
        st((g.elementwise)(expression.as_ptr(), name_ptrs.as_ptr(), bufs.as_ptr(), 3, 0, n, bufs[3], stream));
    };
    elementwise();
    let host_ns = |f: &dyn Fn()| {
        let samples = (0..21)
            .map(|_| {
                sync();
                let t = Instant::now();
                (0..100).for_each(|_| f());
                t.elapsed().as_nanos() as f64 / 100.0
            })
            .collect();
        median(samples)
    };
    let (ew, plain) = (host_ns(&elementwise), host_ns(&|| launch(1)));
    println!("| elementwise call, cached expression, vs gpurt_launch_kernel (host ns per call) | {ew:.0} | {plain:.0} | report (+{:.0} ns) | info |", ew - plain);
    sync();
}

/// ns per run of `f`, over `reps` runs and the stream sync that ends them (the
/// device's time counts, not only the host's).
fn per_run(reps: usize, f: &dyn Fn(), sync: &dyn Fn()) -> f64 {
    let t = Instant::now();
    (0..reps).for_each(|_| f());
    sync();
    t.elapsed().as_nanos() as f64 / reps as f64
}
