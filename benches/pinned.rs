//! Pinned host memory and copies against the raw driver, in one process (gpurt
//! through its shared library). Targets (from the pinned-memory issue):
//!   1. pinned alloc+free from the pool, 4 KiB / 1 MiB / 64 MiB: ≤ 1 µs per pair
//!      (reference: cuMemHostAlloc + cuMemFreeHost);
//!   2. H2D and D2H of 256 MiB from a pool buffer through gpurt: ≥ 95 % of the raw
//!      driver's bandwidth from a cuMemHostAlloc buffer;
//!   3. H2D of 256 MiB from pageable memory through the staged path: ≥ 1.5 × the
//!      driver's own pageable copy (D2H shown beside it, without a target).

use std::ffi::c_void;

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{ok, st, sym, time_ns, H};

struct Gpurt {
    pool_default: unsafe extern "C" fn(*mut H) -> i32,
    pinned_malloc: unsafe extern "C" fn(H, usize, *mut H) -> i32,
    pinned_free: unsafe extern "C" fn(H) -> i32,
    memcpy_async: unsafe extern "C" fn(H, *const c_void, usize, H) -> i32,
    htod_staged: unsafe extern "C" fn(H, *const c_void, usize, H) -> i32,
    dtoh_staged: unsafe extern "C" fn(H, *const c_void, usize, H) -> i32,
    host_register: unsafe extern "C" fn(H, usize, u32) -> i32,
    host_unregister: unsafe extern "C" fn(H) -> i32,
}

fn load(lib: &libloading::Library) -> Gpurt {
    unsafe {
        Gpurt {
            pool_default: sym!(lib, "gpurt_pinned_pool_default"),
            pinned_malloc: sym!(lib, "gpurt_pinned_malloc"),
            pinned_free: sym!(lib, "gpurt_pinned_free"),
            memcpy_async: sym!(lib, "gpurt_memcpy_async"),
            htod_staged: sym!(lib, "gpurt_memcpy_htod_staged"),
            dtoh_staged: sym!(lib, "gpurt_memcpy_dtoh_staged"),
            host_register: sym!(lib, "gpurt_host_register"),
            host_unregister: sym!(lib, "gpurt_host_unregister"),
        }
    }
}


fn main() {
    let (lib, b) = common::open("pinned");
    let g = load(&lib);
    let (stream, native) = b.stream();
    let mut pool = std::ptr::null_mut();
    unsafe { st((g.pool_default)(&mut pool)) };
    println!("\n| workload | gpurt | raw driver | target | result |");
    println!("| --- | ---: | ---: | --- | --- |");
    for (label, size, n) in [("4 KiB", 4usize << 10, 2000), ("1 MiB", 1 << 20, 200), ("64 MiB", 64 << 20, 5)] {
        let ours = time_ns(11, n, || unsafe {
            let mut p = std::ptr::null_mut();
            st((g.pinned_malloc)(pool, size, &mut p));
            st((g.pinned_free)(p));
        });
        let raw = time_ns(3, n.min(20), || unsafe {
            let mut p = std::ptr::null_mut();
            ok(sys::cuMemHostAlloc(&mut p, size, 0));
            ok(sys::cuMemFreeHost(p));
        });
        let pass = if ours <= 1000.0 { "PASS" } else { "MISS" };
        println!("| pinned alloc+free, {label} (ns) | {ours:.1} | {raw:.1} (cuMemHostAlloc+cuMemFreeHost) | <= 1000 | {pass} |");
    }
    let bytes = 256usize << 20;
    let mut ours_host = std::ptr::null_mut();
    let mut raw_host = std::ptr::null_mut();
    let mut dev = std::ptr::null_mut();
    unsafe {
        st((g.pinned_malloc)(pool, bytes, &mut ours_host));
        ok(sys::cuMemHostAlloc(&mut raw_host, bytes, 0));
        st((b.malloc)(bytes, stream, &mut dev));
        std::ptr::write_bytes(ours_host.cast::<u8>(), 0x5a, bytes);
        std::ptr::write_bytes(raw_host.cast::<u8>(), 0x5a, bytes);
    }
    let mut pageable = vec![0x5au8; bytes];
    let gbps = |ns: f64| bytes as f64 / ns;
    let ours_copy = |dst: H, src: *const c_void| {
        move || unsafe {
            st((g.memcpy_async)(dst, src, bytes, stream));
            st((b.stream_synchronize)(stream));
        }
    };
    let raw_h2d = |src: *const c_void| {
        move || unsafe {
            ok(sys::cuMemcpyHtoDAsync_v2(dev as u64, src, bytes, native.cast()));
            ok(sys::cuStreamSynchronize(native.cast()));
        }
    };
    let (h2d_ours, h2d_raw) = (time_ns(9, 3, ours_copy(dev, ours_host)), time_ns(9, 3, raw_h2d(raw_host)));
    let d2h_ours = time_ns(9, 3, ours_copy(ours_host, dev));
    let mut registered = vec![0x5au8; bytes];
    let reg = registered.as_mut_ptr().cast::<c_void>();
    unsafe { st((g.host_register)(reg, bytes, 0)) };
    let h2d_registered = time_ns(9, 3, ours_copy(dev, reg));
    unsafe { st((g.host_unregister)(reg)) };
    let d2h_raw = time_ns(9, 3, || unsafe {
        ok(sys::cuMemcpyDtoHAsync_v2(raw_host, dev as u64, bytes, native.cast()));
        ok(sys::cuStreamSynchronize(native.cast()));
    });
    for (label, ours, raw) in [
        ("H2D 256 MiB, pool buffer", h2d_ours, h2d_raw),
        ("D2H 256 MiB, pool buffer", d2h_ours, d2h_raw),
        ("H2D 256 MiB, gpurt_host_register'ed buffer", h2d_registered, h2d_raw),
    ] {
        let ratio = raw / ours;
        let pass = if ratio >= 0.95 { "PASS" } else { "MISS" };
        println!("| {label} vs cuMemHostAlloc buffer (GB/s) | {:.1} | {:.1} | >= 95 % of raw ({:.1} %) | {pass} |", gbps(ours), gbps(raw), ratio * 100.0);
    }
    let h2d_pageable_raw = time_ns(7, 2, raw_h2d(pageable.as_ptr().cast()));
    let h2d_staged = time_ns(7, 2, || unsafe {
        st((g.htod_staged)(dev, pageable.as_ptr().cast(), bytes, stream));
        st((b.stream_synchronize)(stream));
    });
    let d2h_pageable_raw = time_ns(7, 2, || unsafe {
        ok(sys::cuMemcpyDtoHAsync_v2(pageable.as_mut_ptr().cast(), dev as u64, bytes, native.cast()));
        ok(sys::cuStreamSynchronize(native.cast()));
    });
    let d2h_staged = time_ns(7, 2, || unsafe { st((g.dtoh_staged)(pageable.as_mut_ptr().cast(), dev, bytes, stream)) });
    let speedup = h2d_pageable_raw / h2d_staged;
    let pass = if speedup >= 1.5 { "PASS" } else { "MISS" };
    println!(
        "| H2D 256 MiB from pageable memory, staged vs driver (GB/s) | {:.1} | {:.1} | >= 1.5 x ({speedup:.2} x) | {pass} |",
        gbps(h2d_staged),
        gbps(h2d_pageable_raw)
    );
    println!(
        "| D2H 256 MiB to pageable memory, staged vs driver (GB/s) | {:.1} | {:.1} | ({:.2} x) | info |",
        gbps(d2h_staged),
        gbps(d2h_pageable_raw),
        d2h_pageable_raw / d2h_staged
    );
    unsafe {
        st((g.pinned_free)(ours_host));
        ok(sys::cuMemFreeHost(raw_host));
    }
}
