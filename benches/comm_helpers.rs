//! torch.cuda.comm's coalesced broadcast against one broadcast per buffer (target
//! from the NCCL issue: `gpurt_comm_broadcast_coalesced` of 100 small buffers at
//! least 3× faster than 100 `gpurt_comm_broadcast` calls). Each round queues the
//! helper calls and waits for every device; the outputs are freed outside the
//! timing. Devices: every GPU of the machine, and device 0 twice where there is one
//! (the helpers need no NCCL and take a device more than once).

use std::ffi::{c_int, c_void};
use std::time::Instant;

#[path = "common/mod.rs"]
mod common;
use common::{median, st, sym, H};

const BUFFERS: usize = 100;
const ROUNDS: usize = 51;

fn main() {
    let (lib, basics) = common::open("comm_helpers");
    type Broadcast = unsafe extern "C" fn(*const c_void, c_int, usize, c_int, *const c_int, c_int, *mut H) -> i32;
    type Coalesced = unsafe extern "C" fn(*const *const c_void, *const usize, usize, c_int, c_int, *const c_int, c_int, usize, *mut H) -> i32;
    let broadcast: Broadcast = unsafe { sym!(lib, "gpurt_comm_broadcast") };
    let coalesced: Coalesced = unsafe { sym!(lib, "gpurt_comm_broadcast_coalesced") };
    let device_count: unsafe extern "C" fn(*mut c_int) -> i32 = unsafe { sym!(lib, "gpurt_device_count") };
    let device_synchronize: unsafe extern "C" fn(c_int) -> i32 = unsafe { sym!(lib, "gpurt_device_synchronize") };
    let mut n = 0;
    unsafe { st(device_count(&mut n)) };
    let devices: Vec<c_int> = if n > 1 { (0..n).collect() } else { vec![0, 0] };
    let (stream, _) = basics.stream();
    // 100 buffers of 1–16 KiB of floats (sizes a model's biases and norms have).
    let counts: Vec<usize> = (0..BUFFERS).map(|j| 256 + (j * 997) % 3840).collect();
    let srcs: Vec<*const c_void> = counts
        .iter()
        .map(|&c| {
            let mut p = std::ptr::null_mut();
            unsafe { st((basics.malloc)(c * 4, stream, &mut p)) };
            p as *const c_void
        })
        .collect();
    unsafe { st((basics.stream_synchronize)(stream)) };
    let mut outputs = vec![std::ptr::null_mut(); BUFFERS * devices.len()];
    let free_outputs = |outputs: &mut Vec<H>| outputs.iter().for_each(|&p| unsafe { st((basics.free)(p)) });
    let nd = devices.len() as c_int;
    let round = |coalesce: bool, outputs: &mut Vec<H>| -> f64 {
        let t = Instant::now();
        unsafe {
            if coalesce {
                st(coalesced(srcs.as_ptr(), counts.as_ptr(), BUFFERS, 0, 0, devices.as_ptr(), nd, 0, outputs.as_mut_ptr()));
            } else {
                for (j, (&src, &count)) in srcs.iter().zip(&counts).enumerate() {
                    let mut outs = vec![std::ptr::null_mut(); devices.len()];
                    st(broadcast(src, 0, count, 0, devices.as_ptr(), nd, outs.as_mut_ptr()));
                    outs.iter().enumerate().for_each(|(i, &p)| outputs[i * BUFFERS + j] = p);
                }
            }
            devices.iter().for_each(|&d| st(device_synchronize(d)));
        }
        let us = t.elapsed().as_nanos() as f64 / 1e3;
        free_outputs(outputs);
        us
    };
    // Warm-up: the batched-copy kernel is compiled on first use; the pools fill.
    round(true, &mut outputs);
    round(false, &mut outputs);
    let (mut separate, mut packed) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        separate.push(round(false, &mut outputs));
        packed.push(round(true, &mut outputs));
    }
    let (separate, packed) = (median(separate), median(packed));
    println!("comm helpers: {BUFFERS} buffers of 1-16 KiB to devices {devices:?} (median of {ROUNDS} rounds, us per round incl. the wait)");
    println!("  {BUFFERS} x gpurt_comm_broadcast           {separate:>10.1}");
    println!("  gpurt_comm_broadcast_coalesced          {packed:>10.1}");
    let speedup = separate / packed;
    println!("  speedup {speedup:.2}x (target >= 3x): {}", if speedup >= 3.0 { "PASS" } else { "MISS" });
    srcs.iter().for_each(|&p| unsafe { st((basics.free)(p as H)) });
}
