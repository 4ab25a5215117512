//! GPU tests: run on a machine with an NVIDIA driver and GPU, reported as skipped
//! (with the reason) elsewhere, failed instead with GPURT_REQUIRE_GPU=1.

#[path = "../support/mod.rs"]
mod support;

mod alloc;
mod device;
mod graphs;
mod kernels;
mod mempool;
mod multi;
mod pinned;
mod rng;
mod stream;
mod util;

fn main() {
    if let Ok(hex) = std::env::var("GPURT_IPC_CHILD") {
        stream::ipc_child(&hex);
    }
    let mut tests = Vec::new();
    tests.extend_from_slice(device::TESTS);
    tests.extend_from_slice(stream::TESTS);
    tests.extend_from_slice(alloc::TESTS);
    tests.extend_from_slice(mempool::TESTS);
    tests.extend_from_slice(pinned::TESTS);
    tests.extend_from_slice(kernels::TESTS);
    tests.extend_from_slice(graphs::TESTS);
    tests.extend_from_slice(rng::TESTS);
    support::run("gpu", support::Needs::Gpu, &tests, multi::TESTS)
}
