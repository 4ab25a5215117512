//! The stream sanitizer's cost. Off (the default), target from the sanitizer issue:
//! ≤ 2 ns a call. Measured in one run: each hook as the hooked calls run it (inlined
//! from the rlib: a load and a branch), against the same loop without it; and
//! `gpurt_sanitizer_access` through the shared library, as a C caller declares,
//! beside `gpurt_version` (a function that only returns a constant) called the same
//! way, so that what remains is the sanitizer's own cost. On, for information: one
//! declared access with and without native stacks.

use std::hint::black_box;

#[path = "common/mod.rs"]
mod common;
use common::{median, per_call, st, sym, H};
use gpurt::sanitizer::{self, StreamId, StreamRef};


fn main() {
    let lib = common::library();
    let enable: unsafe extern "C" fn(i32) -> i32 = unsafe { sym!(lib, "gpurt_sanitizer_enable") };
    let access: unsafe extern "C" fn(*const u8, usize, i32, H, *const i8) -> i32 = unsafe { sym!(lib, "gpurt_sanitizer_access") };
    let set_stacks: unsafe extern "C" fn(i32) -> i32 = unsafe { sym!(lib, "gpurt_sanitizer_set_stacks") };
    let tag = c"bench".as_ptr();
    unsafe { st(enable(0)) };
    sanitizer::set_enabled(false);

    let stream = StreamRef { id: StreamId { device: 0, key: 0x7000 }, native: 0x7000, kind: None };
    let baseline = per_call(|i| {
        black_box(i);
    });
    let hooks = per_call(|i| {
        sanitizer::event_recorded(i, stream);
        sanitizer::freed(i);
    }) - baseline;
    let version: unsafe extern "C" fn() -> i32 = unsafe { sym!(lib, "gpurt_version") };
    let declare_off = per_call(|i| unsafe {
        black_box(access(i as *const u8, 64, 1, std::ptr::null_mut(), tag));
    });
    let empty_call = per_call(|i| unsafe {
        black_box(i);
        black_box(version());
    });
    println!("sanitizer off: two hooks (event record, free) {hooks:.2} ns, so {:.2} ns a hooked call", hooks / 2.0);
    println!(
        "sanitizer off: gpurt_sanitizer_access through the shared library {declare_off:.2} ns a call; gpurt_version {empty_call:.2} ns; \
         the difference {:.2} ns",
        declare_off - empty_call
    );
    let worst = (hooks / 2.0).max(declare_off - empty_call);
    println!(
        "TARGET sanitizer off <= 2 ns a call: {} ({worst:.2} ns)",
        if worst <= 2.0 { "PASS" } else { "MISS" }
    );

    // On: the cost of one declared access (needs a stream, so a device).
    let (_lib, basics) = common::open("sanitizer (on)");
    let (s, _) = basics.stream();
    let mut buffer = std::ptr::null_mut();
    unsafe { st((basics.malloc)(1 << 20, s, &mut buffer)) };
    for stacks in [false, true] {
        unsafe { st(set_stacks(stacks as i32)) };
        let runs: Vec<f64> = (0..5)
            .map(|_| {
                unsafe { st(enable(1)) };
                let n = 20_000u64;
                let t = std::time::Instant::now();
                for i in 0..n {
                    let at = unsafe { (buffer as *const u8).add(((i * 64) % (1 << 20)) as usize) };
                    unsafe { st(access(at, 64, 2, s, tag)) };
                }
                let ns = t.elapsed().as_nanos() as f64 / n as f64;
                unsafe { st(enable(0)) };
                ns
            })
            .collect();
        println!("sanitizer on: one declared 64-byte write {:.2} us ({} stacks)", median(runs) / 1e3, if stacks { "with" } else { "without" });
    }
    unsafe { st((basics.free)(buffer)) };
}
