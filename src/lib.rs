//! gpurt: the CUDA runtime layer that `torch.cuda` and `cupy.cuda` give Python, for
//! C, C++ and any language with a C FFI: devices and their properties and telemetry
//! (`device`, `telemetry`); streams, green contexts, events and graphs (`stream`,
//! `green`, `event`, `graph`);
//! the caching device allocator with its pools, backends, statistics, history and
//! snapshots (`alloc`), pinned and managed memory (`pinned`, `managed`), copies
//! (`copy`) and IPC (`ipc`); run-time compiled kernels (`kernel`), random numbers
//! (`rng`), TunableOp (`tunable`); the math libraries' handles (`mathlib`), NCCL
//! communicators and torch.cuda.comm's helpers (`comm`), GPUDirect Storage (`gds`);
//! the stream sanitizer (`sanitizer`), NVTX (`nvtx`), logging (`log`) and the sync
//! debug mode (`sync_debug`).
//!
//! Layout: one module per concept, each a safe core (`mod.rs`) and a thin `ffi`
//! counterpart holding its `extern "C"` functions. `boundary` is the one panic
//! boundary every exported function goes through; `handle` holds the generational
//! handle tables; `files` writes and reads gpurt's own files safely; `driver` loads libcuda at run time, and `dylib` the optional CUDA
//! libraries (NVRTC, cuBLAS, cuDNN, ...), so that the library loads where CUDA is
//! absent; `process` keeps fork and exit safe.

#![allow(non_camel_case_types)]
// The C ABI takes its callers' pointers on trust, as any C library does: each is
// checked for NULL, and its contract is in the header. Raw CUDA handles go to the
// driver, which checks them.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("gpurt packs handles into 64-bit pointers and supports only 64-bit targets");

/// Hooks of higher modules into lower ones that must hold before any call, set when
/// the library is loaded (an ELF constructor: it only stores function pointers).
#[used]
#[link_section = ".init_array"]
static INSTALL_HOOKS: extern "C" fn() = {
    extern "C" fn install() {
        alloc::device::set_share_join(share::join_configured);
    }
    install
};

pub mod alloc;
pub mod boundary;
pub mod comm;
pub mod copy;
pub mod device;
pub mod driver;
pub(crate) mod dylib;
pub mod dtype;
pub mod error;
pub mod event;
pub mod files;
pub mod gds;
pub mod graph;
pub mod green;
pub mod handle;
pub mod ipc;
pub mod kernel;
pub mod log;
pub mod nvtx;
pub mod managed;
pub mod mathlib;
pub mod memory_report;
pub mod pinned;
pub mod process;
pub mod rng;
pub mod sanitizer;
pub mod share;
pub mod stream;
pub mod sync_debug;
pub mod telemetry;
pub mod tunable;
pub mod vbuffer;

pub use error::{Error, Result, Status};

// A unit test keeps these equal to Cargo.toml's version.
/// The header's version: major, minor, patch.
pub const GPURT_VERSION_MAJOR: i32 = 0;
/// The header's minor version: releases that only add to the ABI.
pub const GPURT_VERSION_MINOR: i32 = 1;
/// The header's patch version: releases that change no interface.
pub const GPURT_VERSION_PATCH: i32 = 0;

pub(crate) const VERSION_NUMBER: i32 = GPURT_VERSION_MAJOR * 10000 + GPURT_VERSION_MINOR * 100 + GPURT_VERSION_PATCH;

/// A test's iteration count: in full natively, a hundredth (at least 10) under Miri,
/// which interprets every step and would take hours over the full counts.
#[cfg(test)]
pub(crate) const fn test_iterations(n: u64) -> u64 {
    if cfg!(miri) {
        if n / 100 > 10 { n / 100 } else { 10 }
    } else {
        n
    }
}

/// `n` bytes of a seed's xorshift stream: tests' fresh data that another side can
/// check from the seed alone.
#[cfg(test)]
pub(crate) fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn header_version_matches_cargo_version() {
        let cargo = env!("CARGO_PKG_VERSION");
        let header = format!("{}.{}.{}", super::GPURT_VERSION_MAJOR, super::GPURT_VERSION_MINOR, super::GPURT_VERSION_PATCH);
        assert_eq!(header, cargo, "update GPURT_VERSION_* in src/lib.rs to match Cargo.toml");
    }
}
