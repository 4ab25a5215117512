//! NVTX with no tool attached, through the shared library as a C caller declares
//! it. Target from the observability issue: ≤ 5 ns a call. Measured in one run: a
//! mark, and a range push + pop (two calls), beside `gpurt_version` (a function that
//! only returns a constant) called the same way, so that what remains is NVTX's and
//! gpurt's cost above any call into a shared library.

use std::hint::black_box;

#[path = "common/mod.rs"]
mod common;
use common::{per_call, sym};


fn main() {
    if std::env::var_os("NVTX_INJECTION64_PATH").is_some() {
        println!("skipped: NVTX_INJECTION64_PATH is set, and this measures calls with no tool attached");
        return;
    }
    let lib = common::library();
    let mark: unsafe extern "C" fn(*const i8) -> i32 = unsafe { sym!(lib, "gpurt_nvtx_mark") };
    let push: unsafe extern "C" fn(*const i8, *mut i32) -> i32 = unsafe { sym!(lib, "gpurt_nvtx_range_push") };
    let pop: unsafe extern "C" fn(*mut i32) -> i32 = unsafe { sym!(lib, "gpurt_nvtx_range_pop") };
    let version: unsafe extern "C" fn() -> i32 = unsafe { sym!(lib, "gpurt_version") };
    let message = c"decode step".as_ptr();
    let empty_call = per_call(|i| unsafe {
        black_box(i);
        black_box(version());
    });
    let marks = per_call(|i| unsafe {
        black_box(i);
        black_box(mark(message));
    });
    let ranges = per_call(|i| unsafe {
        black_box(i);
        let mut depth = 0;
        black_box(push(message, &mut depth));
        black_box(pop(&mut depth));
    }) / 2.0;
    println!("NVTX, no tool: gpurt_nvtx_mark {marks:.2} ns; gpurt_nvtx_range_push / _pop {ranges:.2} ns a call; gpurt_version {empty_call:.2} ns");
    let worst = marks.max(ranges);
    println!("TARGET NVTX call with no tool <= 5 ns: {} ({worst:.2} ns a call, {:.2} ns above an empty call)", if worst <= 5.0 { "PASS" } else { "MISS" }, worst - empty_call);
}
