#![allow(dead_code)] // each benchmark uses part of this
//! What the benchmarks share: loading gpurt's shared library as a C caller does,
//! status checks, medians.

use cudarc::driver::sys;

/// gpurt's shared library: `$GPURT_LIB`, else the bundle's `lib/libgpurt.so.0`.
pub fn library() -> libloading::Library {
    let path = std::env::var("GPURT_LIB").unwrap_or_else(|_| "lib/libgpurt.so.0".into());
    unsafe { libloading::Library::new(&path) }.unwrap_or_else(|e| panic!("load {path}: {e}"))
}

/// A function from the loaded library, by its literal name.
macro_rules! sym {
    ($lib:expr, $name:literal) => {
        *$lib.get($name.as_bytes()).unwrap_or_else(|e| panic!("{}: {e}", $name))
    };
}
pub(crate) use sym;

pub type H = *mut std::ffi::c_void;

/// The calls every benchmark makes.
pub struct Basics {
    pub stream_create: unsafe extern "C" fn(i32, u32, i32, *mut H) -> i32,
    pub stream_native: unsafe extern "C" fn(H, *mut H) -> i32,
    pub stream_synchronize: unsafe extern "C" fn(H) -> i32,
    pub malloc: unsafe extern "C" fn(usize, H, *mut H) -> i32,
    pub free: unsafe extern "C" fn(H) -> i32,
}

/// Loads gpurt, exits (skipped) where there is no GPU, makes device 0 current.
pub fn open(name: &str) -> (libloading::Library, Basics) {
    let lib = library();
    unsafe {
        let device_count: unsafe extern "C" fn(*mut i32) -> i32 = sym!(lib, "gpurt_device_count");
        let set_device: unsafe extern "C" fn(i32) -> i32 = sym!(lib, "gpurt_set_device");
        let mut count = 0;
        st(device_count(&mut count));
        require_gpu(name, count);
        st(set_device(0));
        let basics = Basics {
            stream_create: sym!(lib, "gpurt_stream_create"),
            stream_native: sym!(lib, "gpurt_stream_native"),
            stream_synchronize: sym!(lib, "gpurt_stream_synchronize"),
            malloc: sym!(lib, "gpurt_malloc"),
            free: sym!(lib, "gpurt_free"),
        };
        (lib, basics)
    }
}

impl Basics {
    /// A new non-blocking gpurt stream on device 0, and its native CUstream.
    /// A non-blocking stream on device 0: (gpurt handle, native stream).
    pub fn stream(&self) -> (H, H) {
        self.stream_on(0)
    }

    pub fn stream_on(&self, device: i32) -> (H, H) {
        let (mut s, mut native) = (std::ptr::null_mut(), std::ptr::null_mut());
        unsafe {
            st((self.stream_create)(device, 1, 0, &mut s));
            st((self.stream_native)(s, &mut native));
        }
        (s, native)
    }
}

pub fn ok(code: sys::CUresult) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
}

pub fn st(s: i32) {
    assert_eq!(s, 0, "gpurt call failed with status {s}");
}

/// Median ns per call of `f` over 31 runs of 2 000 000 calls: a library call's cost.
pub fn per_call(mut f: impl FnMut(u64)) -> f64 {
    median(
        (0..31)
            .map(|_| {
                let t = std::time::Instant::now();
                (0..2_000_000u64).for_each(|i| f(std::hint::black_box(i)));
                t.elapsed().as_nanos() as f64 / 2_000_000.0
            })
            .collect(),
    )
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The core's throughput now, in M steps/s: eight independent xorshift chains on this
/// thread, bound by how many instructions a cycle the core gives it (one chain is
/// bound by latency). A core whose other hardware thread is busy (another tenant of a
/// lent host) loses much of this and little of the latency, and CPU-bound code of
/// high throughput, such as the allocator's, slows alike (docs/performance.md,
/// "Method"). Every reading is kept for `full_core_rate`.
pub fn core_rate(iters: u64) -> f64 {
    let mut chains: [gpurt::alloc::host::XorShift; 8] = std::array::from_fn(|i| gpurt::alloc::host::XorShift(0x9e37_79b9 + i as u64));
    let t = std::time::Instant::now();
    let mut sum = 0u64;
    for _ in 0..iters {
        for c in &mut chains {
            sum = sum.wrapping_add(c.next_u64());
        }
    }
    std::hint::black_box(sum);
    let rate = (8 * iters) as f64 / t.elapsed().as_secs_f64() / 1e6;
    CORE_RATES.lock().unwrap().push(rate);
    rate
}

static CORE_RATES: std::sync::Mutex<Vec<f64>> = std::sync::Mutex::new(Vec::new());

/// The core at full speed: the 90th percentile of this process's readings so far. A
/// percentile, as a maximum would follow one lucky reading; in a process that rarely
/// saw its core quiet, it is lower, and judges more timings as at full speed.
pub fn full_core_rate() -> f64 {
    let mut rates = CORE_RATES.lock().unwrap().clone();
    rates.sort_by(|a, b| a.partial_cmp(b).unwrap());
    rates.get(rates.len() * 9 / 10).copied().unwrap_or(0.0)
}

/// A timing (ns per operation) and the core's rate measured just before it.
#[derive(Clone, Copy)]
pub struct Timed {
    pub core: f64,
    pub ns: f64,
}

/// Times `n` runs of `f` (ns per run) after a short core-rate reading (~0.2 ms).
pub fn timed(n: usize, mut f: impl FnMut()) -> Timed {
    let core = core_rate(40_000);
    let t = std::time::Instant::now();
    (0..n).for_each(|_| f());
    Timed { core, ns: t.elapsed().as_nanos() as f64 / n as f64 }
}

/// The timings taken while the core ran at 90 % of its full speed or more: the
/// code's own cost, without what another tenant of the core took.
pub fn at_full_speed(samples: &[Timed]) -> Vec<f64> {
    let floor = 0.9 * full_core_rate();
    samples.iter().filter(|s| s.core >= floor).map(|s| s.ns).collect()
}

/// Median over `samples` of the mean time of `n` runs of `f`, in ns.
pub fn time_ns(samples: usize, n: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..samples)
            .map(|_| {
                let t = std::time::Instant::now();
                (0..n).for_each(|_| f());
                t.elapsed().as_nanos() as f64 / n as f64
            })
            .collect(),
    )
}

/// Exits when the machine has no GPU: 0 (skipped, with the reason), or 1 when
/// GPURT_REQUIRE_GPU=1.
pub fn require_gpu(name: &str, device_count: i32) {
    if device_count == 0 {
        println!("{name} benchmark SKIPPED: no CUDA device (gpurt_device_count = 0)");
        std::process::exit(if std::env::var("GPURT_REQUIRE_GPU").as_deref() == Ok("1") { 1 } else { 0 });
    }
}
