//! Graphs on the GPU: replays equal eager launches, allocation during capture from a
//! private pool that others never get and that is returned with the graph, exec
//! update for new arguments and its refusal for a new topology, DOT dumps.

use gpurt::graph::ffi::*;
use gpurt::graph::*;
use gpurt::kernel::ffi::*;
use gpurt::stream::ffi::*;

use crate::expect_status;
use crate::kernels::{args, cstr, download, kernel, upload};
use crate::util::{free_bytes, malloc, random_words, stream, Capture};

pub const TESTS: &[crate::support::Test] = &[
    ("replaying_a_captured_graph_1000_times_equals_eager_launches", replaying_a_captured_graph_1000_times_equals_eager_launches),
    ("allocations_during_capture_come_from_a_private_pool_returned_with_the_graph", allocations_during_capture_come_from_a_private_pool_returned_with_the_graph),
    ("exec_update_takes_new_arguments_and_refuses_a_new_topology", exec_update_takes_new_arguments_and_refuses_a_new_topology),
    ("instantiate_with_upload_and_dot_dump", instantiate_with_upload_and_dot_dump),
];

const N: u32 = 1 << 16;

/// x = x * mul + add over `N` words: exact, and order-sensitive.
fn affine(s: gpurt_stream_t, x: u64, mul: u32, add: u32) {
    let k = kernel("affine_u32");
    let (mut p, mut m, mut a, mut n) = (x, mul, add, N);
    let mut argv = args(&mut [&mut p, &mut m, &mut a, &mut n]);
    expect_status!(gpurt_launch_kernel(k, N / 256, 1, 1, 256, 1, 1, 0, s, argv.as_mut_ptr()), GPURT_SUCCESS);
}

fn capture(s: gpurt_stream_t, body: impl FnOnce()) -> gpurt_graph_t {
    let capture = Capture::begin(s, GPURT_CAPTURE_MODE_GLOBAL);
    body();
    capture.end()
}

fn instantiate(g: gpurt_graph_t) -> gpurt_graph_exec_t {
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_graph_instantiate(g, 0, std::ptr::null_mut(), &mut e), GPURT_SUCCESS);
    e
}

fn replaying_a_captured_graph_1000_times_equals_eager_launches() {
    let s = stream();
    let start = random_words(N as usize);
    let (replayed, eager) = (upload(&start, s), upload(&start, s));
    let steps: Vec<(u32, u32)> = random_words(20).chunks(2).map(|c| (c[0] | 1, c[1])).collect();
    let graph = capture(s, || steps.iter().for_each(|&(m, a)| affine(s, replayed, m, a)));
    let exec = instantiate(graph);
    for _ in 0..1000 {
        expect_status!(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
        steps.iter().for_each(|&(m, a)| affine(s, eager, m, a));
    }
    let (got, want) = (download(replayed, N as usize, s), download(eager, N as usize, s));
    let mut cpu = start.clone();
    for _ in 0..1000 {
        for &(m, a) in &steps {
            cpu.iter_mut().for_each(|x| *x = x.wrapping_mul(m).wrapping_add(a));
        }
    }
    assert!(want == cpu, "eager launches differ from the CPU");
    assert!(got == want, "1000 replays differ from 1000 eager sequences");
    expect_status!(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    expect_status!(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}


/// The graph allocates a 256 MiB scratch buffer, works through it and frees it.
/// Allocations outside never overlap the scratch; each replay on fresh input is
/// exact; destroying the graph and its exec gives the memory back to the driver.
fn allocations_during_capture_come_from_a_private_pool_returned_with_the_graph() {
    let s = stream();
    let scratch_bytes = 256usize << 20;
    let (input, output) = (upload(&random_words(N as usize), s), upload(&vec![0; N as usize], s));
    let mut scratch = 0;
    let graph = capture(s, || {
        scratch = malloc(scratch_bytes, s);
        expect_status!(gpurt::copy::ffi::gpurt_memcpy_async(scratch as *mut _, input as *const _, N as usize * 4, s), GPURT_SUCCESS);
        affine(s, scratch, 3, 1);
        expect_status!(gpurt::copy::ffi::gpurt_memcpy_async(output as *mut _, scratch as *const _, N as usize * 4, s), GPURT_SUCCESS);
        expect_status!(gpurt::alloc::ffi::gpurt_free(scratch as *mut _), GPURT_SUCCESS);
    });
    let exec = instantiate(graph);
    let before_destroy_reference = free_bytes();
    for round in 0..5 {
        let outside: Vec<u64> = (0..4).map(|_| malloc(scratch_bytes / 2, s)).collect();
        for &o in &outside {
            assert!(o + (scratch_bytes / 2) as u64 <= scratch || o >= scratch + scratch_bytes as u64, "round {round}: an outside allocation overlaps the graph's scratch");
            expect_status!(gpurt::copy::ffi::gpurt_memset_async(o as *mut _, 0xdeadbeef, 4, scratch_bytes / 8, s), GPURT_SUCCESS);
        }
        let fresh = random_words(N as usize);
        expect_status!(gpurt::copy::ffi::gpurt_memcpy(input as *mut _, fresh.as_ptr().cast(), N as usize * 4, s), GPURT_SUCCESS);
        expect_status!(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
        let want: Vec<u32> = fresh.iter().map(|x| x.wrapping_mul(3).wrapping_add(1)).collect();
        assert!(download(output, N as usize, s) == want, "round {round}: the replay's result is wrong");
        outside.into_iter().for_each(|o| expect_status!(gpurt::alloc::ffi::gpurt_free(o as *mut _), GPURT_SUCCESS));
    }
    expect_status!(gpurt::alloc::ffi::gpurt_empty_cache(), GPURT_SUCCESS);
    let with_graph = free_bytes();
    expect_status!(gpurt_graph_destroy(graph), GPURT_SUCCESS);
    assert!(free_bytes() <= with_graph + (8 << 20), "the exec still holds the pool");
    expect_status!(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    let after = free_bytes();
    assert!(after >= with_graph + scratch_bytes, "destroying the graph returned {} MiB, not the 256 MiB scratch (free before the replays: {} MiB)", (after - with_graph) >> 20, before_destroy_reference >> 20);
    for p in [input, output] {
        expect_status!(gpurt::alloc::ffi::gpurt_free(p as *mut _), GPURT_SUCCESS);
    }
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn exec_update_takes_new_arguments_and_refuses_a_new_topology() {
    let s = stream();
    let start = random_words(N as usize);
    let x = upload(&start, s);
    let g1 = capture(s, || affine(s, x, 5, 7));
    let exec = instantiate(g1);
    let g2 = capture(s, || affine(s, x, 9, 11));
    expect_status!(gpurt_graph_exec_update(exec, g2), GPURT_SUCCESS);
    expect_status!(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
    let once: Vec<u32> = start.iter().map(|v| v.wrapping_mul(9).wrapping_add(11)).collect();
    assert!(download(x, N as usize, s) == once, "the updated exec did not use the new arguments");
    let g3 = capture(s, || {
        affine(s, x, 1, 1);
        affine(s, x, 1, 1);
    });
    let refused = gpurt_graph_exec_update(exec, g3);
    assert_eq!(refused, gpurt::Status::GPURT_ERROR_GRAPH_UPDATE);
    let message = crate::support::last_message();
    assert!(message.contains("topology") || message.contains("node"), "{message}");
    expect_status!(gpurt_graph_launch(exec, s), GPURT_SUCCESS);
    let twice: Vec<u32> = once.iter().map(|v| v.wrapping_mul(9).wrapping_add(11)).collect();
    assert!(download(x, N as usize, s) == twice, "after a refused update the exec still runs its graph");
    expect_status!(gpurt_graph_exec_destroy(exec), GPURT_SUCCESS);
    for g in [g1, g2, g3] {
        expect_status!(gpurt_graph_destroy(g), GPURT_SUCCESS);
    }
    expect_status!(gpurt::alloc::ffi::gpurt_free(x as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}

fn instantiate_with_upload_and_dot_dump() {
    let s = stream();
    let x = upload(&random_words(N as usize), s);
    let g = capture(s, || affine(s, x, 3, 3));
    let mut e = std::ptr::null_mut();
    expect_status!(gpurt_graph_instantiate(g, GPURT_GRAPH_INSTANTIATE_UPLOAD, s, &mut e), GPURT_SUCCESS);
    expect_status!(gpurt_graph_launch(e, s), GPURT_SUCCESS);
    expect_status!(gpurt_stream_synchronize(s), GPURT_SUCCESS);
    let path = std::env::temp_dir().join(format!("gpurt-graph-{}.dot", std::process::id()));
    let path_c = cstr(path.to_str().unwrap());
    expect_status!(gpurt_graph_debug_dot_print(g, path_c.as_ptr(), 1), GPURT_SUCCESS);
    let dot = std::fs::read_to_string(&path).unwrap();
    assert!(dot.contains("digraph") && dot.contains("affine_u32"), "{dot}");
    let _ = std::fs::remove_file(&path);
    expect_status!(gpurt_graph_exec_destroy(e), GPURT_SUCCESS);
    expect_status!(gpurt_graph_destroy(g), GPURT_SUCCESS);
    expect_status!(gpurt::alloc::ffi::gpurt_free(x as *mut _), GPURT_SUCCESS);
    expect_status!(gpurt_stream_destroy(s), GPURT_SUCCESS);
}
