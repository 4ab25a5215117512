//! IPC memory: the cost of opening an exported block (target from the memory-pools
//! issue: ≤ 1 µs to open a block whose segment this process has mapped already),
//! beside the raw driver's `cuIpcOpenMemHandle` + `cuIpcCloseMemHandle` of a segment,
//! in one run. The benchmark exports 1000 blocks of one segment and runs itself
//! again as the consumer, which opens them (gpurt through its shared library).
//! Whole segments (`expandable_segments:False`): the raw driver's legacy IPC opens
//! those only; expandable segments' IPC is checked by the GPU suite's ipc tests.

use std::io::{Read, Write};
use std::time::Instant;

use cudarc::driver::sys;

#[path = "common/mod.rs"]
mod common;
use common::{median, ok, st, sym, H};

const BLOCKS: usize = 1000;
const HANDLE: usize = 256;
/// Where a gpurt handle holds the segment's driver handle (see `src/ipc/mod.rs`):
/// after the mark, version, boot, process, device and the memory's kind byte.
const DRIVER_HANDLE_AT: usize = 57;
const CONSUMER: &str = "GPURT_IPC_BENCH_CONSUMER";

fn main() {
    // Before the library reads it; the consumer inherits it.
    std::env::set_var("GPURT_ALLOC_CONF", "expandable_segments:False");
    let (lib, basics) = common::open("ipc");
    let export: unsafe extern "C" fn(H, *mut [u8; HANDLE]) -> i32 = unsafe { sym!(lib, "gpurt_ipc_mem_handle") };
    let open: unsafe extern "C" fn(*const [u8; HANDLE], *mut H) -> i32 = unsafe { sym!(lib, "gpurt_ipc_open_mem_handle") };
    let close: unsafe extern "C" fn(H) -> i32 = unsafe { sym!(lib, "gpurt_ipc_close_mem_handle") };
    if std::env::var_os(CONSUMER).is_some() {
        let mut bytes = vec![0u8; BLOCKS * HANDLE];
        std::io::stdin().read_exact(&mut bytes).expect("the producer's handles");
        let handles: Vec<[u8; HANDLE]> = bytes.chunks(HANDLE).map(|c| c.try_into().unwrap()).collect();
        consume(&handles, open, close);
        return;
    }
    let (stream, _) = basics.stream();
    let mut blocks = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..BLOCKS {
        let mut p = std::ptr::null_mut();
        let mut h = [0u8; HANDLE];
        unsafe {
            st((basics.malloc)(1024, stream, &mut p));
            st(export(p, &mut h));
        }
        blocks.push(p);
        handles.push(h);
    }
    assert_eq!(handles[0][DRIVER_HANDLE_AT - 1], 0, "the memory is a whole segment");
    let same_segment = handles.iter().all(|h| h[DRIVER_HANDLE_AT..DRIVER_HANDLE_AT + 64] == handles[0][DRIVER_HANDLE_AT..DRIVER_HANDLE_AT + 64]);
    assert!(same_segment, "the blocks share one segment");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CONSUMER, "1")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("the consumer starts");
    child.stdin.take().unwrap().write_all(&handles.concat()).unwrap();
    assert!(child.wait().unwrap().success(), "the consumer ran");
    for p in blocks {
        unsafe { st((basics.free)(p)) };
    }
}

fn consume(handles: &[[u8; HANDLE]], open: unsafe extern "C" fn(*const [u8; HANDLE], *mut H) -> i32, close: unsafe extern "C" fn(H) -> i32) {
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        t.elapsed().as_nanos() as f64
    };
    let mut ptrs = vec![std::ptr::null_mut(); handles.len()];
    let first = time(&mut || unsafe { st(open(&handles[0], &mut ptrs[0])) });
    let mapped: Vec<f64> = (1..handles.len()).map(|i| time(&mut || unsafe { st(open(&handles[i], &mut ptrs[i])) })).collect();
    let mut again = std::ptr::null_mut();
    let reopen: Vec<f64> = (0..handles.len()).map(|i| time(&mut || unsafe { st(open(&handles[i], &mut again)) })).collect();
    for &p in &ptrs {
        unsafe {
            st(close(p));
            st(close(p));
        }
    }
    // The raw driver maps and unmaps the segment each time.
    let segment = sys::CUipcMemHandle { reserved: handles[0][DRIVER_HANDLE_AT..DRIVER_HANDLE_AT + 64].iter().map(|&b| b as _).collect::<Vec<_>>().try_into().unwrap() };
    let raw: Vec<f64> = (0..50)
        .map(|_| {
            time(&mut || unsafe {
                let mut base = 0;
                ok(sys::cuIpcOpenMemHandle_v2(&mut base, segment, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32));
                ok(sys::cuIpcCloseMemHandle(base));
            })
        })
        .collect();
    let (mapped, reopen, raw) = (median(mapped), median(reopen), median(raw));
    println!("IPC open, first block of a segment (maps it):  {:>10.0} ns (one sample)", first);
    println!("IPC open, a block of a mapped segment:         {:>10.0} ns median of {}", mapped, handles.len() - 1);
    println!("IPC open, a block open already (counted):      {:>10.0} ns median of {}", reopen, handles.len());
    println!("raw cuIpcOpenMemHandle + cuIpcCloseMemHandle:  {:>10.0} ns median of 50", raw);
    let verdict = if mapped <= 1000.0 { "PASS" } else { "MISS" };
    println!("{verdict}  open of a block in a mapped segment: {mapped:.0} ns (target ≤ 1000 ns)");
}
