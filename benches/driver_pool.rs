//! The driver's stream-ordered pool behind gpurt, against the raw driver in one run
//! (targets from the memory-pools issue): an alloc+free pair through
//!   1. `backend:cudaMallocAsync` (gpurt_malloc / gpurt_free straight to
//!      `cuMemAllocFromPoolAsync` / `cuMemFreeAsync`): ≤ 1.10 × the raw pair;
//!   2. a pool over GPURT_UPSTREAM_ASYNC (gpurt's cache over the same driver pool):
//!      ≤ 1.10 × the raw pair;
//!
//! beside the raw pair on the same pool and stream (the device's current memory
//! pool, release threshold: keep all, as the backend sets it). The backend is chosen
//! per process, so the benchmark measures the pool with the native backend, then
//! runs itself again with `backend:cudaMallocAsync`. Samples of gpurt and of the raw
//! driver are taken in turns, so that a slow spell of a shared host falls on both;
//! each figure is the median of the samples' means. gpurt is loaded as C callers do.

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{median, ok, st, sym, H};

const PAIRS: usize = 2000;
const SAMPLES: usize = 31;

const BACKEND_RUN: &str = "GPURT_DRIVER_POOL_BENCH_BACKEND";

type Pair<'a> = &'a mut dyn FnMut(usize);

/// Times pairs of `ours` against the raw driver's pair on `native`, in turns: a row
/// per size; whether every ratio is within 10 %.
fn compare(what: &str, native: H, ours: Pair) -> bool {
    let mut driver_pool = std::ptr::null_mut();
    unsafe { ok(sys::cuDeviceGetMemPool(&mut driver_pool, 0)) };
    let mut raw = |size: usize| unsafe {
        let mut p = 0;
        ok(sys::cuMemAllocFromPoolAsync(&mut p, size, driver_pool, native as sys::CUstream));
        ok(sys::cuMemFreeAsync(p, native as sys::CUstream));
    };
    println!("{what}: alloc+free pair, ns (median of {SAMPLES} samples of {PAIRS} pairs, in turns with the raw driver)");
    println!("{:>10} {:>10} {:>10} {:>8}", "size", "raw", "gpurt", "ratio");
    let mut within = true;
    for size in [512usize, 64 << 10, 1 << 20, 64 << 20] {
        let (mut raw_ns, mut our_ns) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            for (f, into) in [(&mut raw as Pair, &mut raw_ns), (&mut *ours, &mut our_ns)] {
                let t = std::time::Instant::now();
                (0..PAIRS).for_each(|_| f(size));
                into.push(t.elapsed().as_nanos() as f64 / PAIRS as f64);
            }
        }
        let (raw_ns, our_ns) = (median(raw_ns), median(our_ns));
        println!("{size:>10} {raw_ns:>10.0} {our_ns:>10.0} {:>8.2}", our_ns / raw_ns);
        within &= our_ns <= 1.10 * raw_ns;
    }
    let verdict = if within { "PASS" } else { "MISS" };
    println!("{verdict}  {what} within 10 % of the raw pair");
    within
}

fn main() {
    let backend_run = std::env::var_os(BACKEND_RUN).is_some();
    if backend_run {
        std::env::set_var("GPURT_ALLOC_CONF", "backend:cudaMallocAsync");
    }
    let (lib, basics) = common::open("driver_pool");
    let (stream, native) = basics.stream();
    let backend: unsafe extern "C" fn(*mut *const std::ffi::c_char) -> i32 = unsafe { sym!(lib, "gpurt_allocator_backend") };
    let mut name = std::ptr::null();
    unsafe { st(backend(&mut name)) };
    let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_str().unwrap();
    if backend_run {
        assert_eq!(name, "cudaMallocAsync");
        let within = compare("backend:cudaMallocAsync (gpurt_malloc + gpurt_free)", native, &mut |size| unsafe {
            let mut p = std::ptr::null_mut();
            st((basics.malloc)(size, stream, &mut p));
            st((basics.free)(p));
        });
        std::process::exit(if within { 0 } else { 3 });
    }
    assert_eq!(name, "native");
    let options_init: unsafe extern "C" fn(*mut u8) -> i32 = unsafe { sym!(lib, "gpurt_mem_pool_options_init") };
    let pool_create: unsafe extern "C" fn(i32, *const u8, *mut H) -> i32 = unsafe { sym!(lib, "gpurt_mem_pool_create") };
    let pool_malloc: unsafe extern "C" fn(H, usize, H, *mut H) -> i32 = unsafe { sym!(lib, "gpurt_mem_pool_malloc") };
    // gpurt_mem_pool_options_t: struct_size, then `int upstream` (GPURT_UPSTREAM_ASYNC = 3).
    let mut options = [0u8; 256];
    let mut pool = std::ptr::null_mut();
    unsafe {
        st(options_init(options.as_mut_ptr()));
        options[8..12].copy_from_slice(&3i32.to_ne_bytes());
        st(pool_create(0, options.as_ptr(), &mut pool));
    }
    compare("a GPURT_UPSTREAM_ASYNC pool (gpurt_mem_pool_malloc + gpurt_free)", native, &mut |size| unsafe {
        let mut p = std::ptr::null_mut();
        st(pool_malloc(pool, size, stream, &mut p));
        st((basics.free)(p));
    });
    println!();
    let status = std::process::Command::new(std::env::current_exe().unwrap()).env(BACKEND_RUN, "1").status().expect("the backend run");
    assert!(status.code().is_some(), "the backend run ended by a signal");
}
