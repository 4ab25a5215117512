//! Helpers shared by the GPU test files.

use cudarc::driver::sys;
use gpurt::stream::ffi::*;

use crate::expect_status;

pub fn ok(code: sys::CUresult) {
    assert_eq!(code, sys::CUresult::CUDA_SUCCESS);
}

/// A new non-blocking stream on device 0.
pub fn stream() -> gpurt_stream_t {
    let mut s = std::ptr::null_mut();
    expect_status!(gpurt_stream_create(0, gpurt::stream::GPURT_STREAM_NON_BLOCKING, 0, &mut s), GPURT_SUCCESS);
    s
}

/// `size` bytes from gpurt's caching allocator for use on `s`.
pub fn malloc(size: usize, s: gpurt_stream_t) -> u64 {
    let mut p = std::ptr::null_mut();
    expect_status!(gpurt::alloc::ffi::gpurt_malloc(size, s, &mut p), GPURT_SUCCESS);
    p as u64
}

pub fn native(s: gpurt_stream_t) -> sys::CUstream {
    let mut n = std::ptr::null_mut();
    expect_status!(gpurt_stream_native(s, &mut n), GPURT_SUCCESS);
    n.cast()
}

/// A capture begun on a gpurt stream with the driver's own call (thread-local mode),
/// ended when dropped: a test that fails inside it leaves no capture open, which
/// would refuse the unsafe calls of every test after it on this thread.
pub struct ForeignCapture(sys::CUstream);

impl ForeignCapture {
    pub fn begin(s: gpurt_stream_t) -> ForeignCapture {
        let native = native(s);
        unsafe { ok(sys::cuStreamBeginCapture_v2(native, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) };
        ForeignCapture(native)
    }

    /// Ends the capture: the driver's status and the graph (null if none), now the
    /// caller's to destroy.
    pub fn end(self) -> (sys::CUresult, sys::CUgraph) {
        let mut graph = std::ptr::null_mut();
        let status = unsafe { sys::cuStreamEndCapture(self.0, &mut graph) };
        std::mem::forget(self);
        (status, graph)
    }
}

impl Drop for ForeignCapture {
    fn drop(&mut self) {
        let mut graph = std::ptr::null_mut();
        unsafe {
            sys::cuStreamEndCapture(self.0, &mut graph);
            if !graph.is_null() {
                sys::cuGraphDestroy(graph);
            }
        }
    }
}

/// A capture begun through gpurt (`gpurt_stream_begin_capture`), ended when dropped
/// as `ForeignCapture` is: in global mode a capture left open would refuse the unsafe
/// calls of every thread.
pub struct Capture(gpurt_stream_t);

impl Capture {
    pub fn begin(s: gpurt_stream_t, mode: i32) -> Capture {
        expect_status!(gpurt::graph::ffi::gpurt_stream_begin_capture(s, mode, std::ptr::null_mut()), GPURT_SUCCESS);
        Capture(s)
    }

    /// Ends the capture: its graph.
    pub fn end(self) -> gpurt::graph::ffi::gpurt_graph_t {
        let s = self.0;
        std::mem::forget(self);
        let mut g = std::ptr::null_mut();
        expect_status!(gpurt::graph::ffi::gpurt_stream_end_capture(s, &mut g), GPURT_SUCCESS);
        g
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        let mut g = std::ptr::null_mut();
        if gpurt::graph::ffi::gpurt_stream_end_capture(self.0, &mut g) == gpurt::Status::GPURT_SUCCESS && !g.is_null() {
            gpurt::graph::ffi::gpurt_graph_destroy(g);
        }
    }
}

unsafe extern "C" fn sleep_ms(user: *mut libc::c_void) {
    std::thread::sleep(std::time::Duration::from_millis(user as u64));
}

unsafe extern "C" fn wait_for_gate(user: *mut libc::c_void) {
    let gate = &*(user as *const std::sync::atomic::AtomicBool);
    while !gate.load(std::sync::atomic::Ordering::Acquire) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Holds `s` (a host function waiting) until the returned gate is set: work queued
/// after it stays pending exactly as long as the test needs, however slow the
/// machine or a checker running it (a fixed sleep races with them).
pub fn gate_stream(s: gpurt_stream_t) -> &'static std::sync::atomic::AtomicBool {
    let gate: &'static std::sync::atomic::AtomicBool = Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false)));
    let user = gate as *const std::sync::atomic::AtomicBool as *mut libc::c_void;
    expect_status!(gpurt_stream_launch_host_func(s, Some(wait_for_gate), user), GPURT_SUCCESS);
    gate
}

/// Blocks `s` on the device timeline for `ms` milliseconds (a host function sleeping).
pub fn block_stream(s: gpurt_stream_t, ms: u64) {
    expect_status!(gpurt_stream_launch_host_func(s, Some(sleep_ms), ms as *mut libc::c_void), GPURT_SUCCESS);
}

/// `n` fresh random words: different in every run.
pub fn random_words(n: usize) -> Vec<u32> {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    (0..n)
        .map(|i| {
            h.write_usize(i);
            h.finish() as u32
        })
        .collect()
}

/// Device 0's free memory as the driver reports it.
pub fn free_bytes() -> usize {
    let (mut free, mut total) = (0, 0);
    expect_status!(gpurt::device::ffi::gpurt_mem_get_info(0, &mut free, &mut total), GPURT_SUCCESS);
    free
}
