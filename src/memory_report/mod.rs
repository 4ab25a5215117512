//! Where a process's device memory is: the driver's and NVML's figures beside every
//! part gpurt made — its pools (default, users', graphs'), the math-library workspaces
//! and growable buffers in the default pool, math-library handles, modules,
//! communicators — and the context's
//! local-memory reservation; what is left is the context itself and other libraries'
//! memory. `gpurt_memory_report`; `gpurt-info --memory` prints it.

pub mod ffi;

use crate::alloc::capture;
use crate::alloc::device::{default_pool, MEM_POOLS};
use crate::alloc::stats::gpurt_memory_stats_t;
use crate::device::footprint::{self, Footprint};
use crate::device;
use crate::error::Result;

/// A figure gpurt cannot have: the process's NVML figure where NVML does not load or
/// does not list the process (another PID namespace), and what depends on it.
pub const GPURT_MEMORY_UNKNOWN: u64 = u64::MAX;

/// A device's memory as one process holds it, in bytes (`gpurt_memory_report`).
/// Pools count what they hold from the driver (`reserved`: their memory asleep is
/// given back and not counted there), of which `live` is handed out.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct gpurt_memory_report_t {
    /// Set by the caller to sizeof the struct it was compiled with (GPURT_MEMORY_REPORT_INIT does): gpurt fills only that much.
    pub struct_size: usize,
    /// The device's memory (cuMemGetInfo's total).
    pub device_total: u64,
    /// The device's free memory, every process's use taken (cuMemGetInfo's free).
    pub device_free: u64,
    /// This process's memory on the device as NVML counts it; GPURT_MEMORY_UNKNOWN where NVML does not load or does not list the process.
    pub process: u64,
    /// The context's local-memory reservation, by the driver's rule: the stack size limit (cuCtxGetLimit) times the threads the device holds resident.
    pub local_memory: u64,
    /// The device's default pool: bytes held from the driver.
    pub default_pool_reserved: u64,
    /// Of `default_pool_reserved`, bytes handed out.
    pub default_pool_live: u64,
    /// The default pool's memory asleep: given back to the driver, its addresses kept.
    pub default_pool_asleep: u64,
    /// Of `default_pool_live`, the workspaces of gpurt's cuBLAS and cuBLASLt handles.
    pub math_workspaces: u64,
    /// Of `default_pool_live`, the bytes mapped in growable virtual buffers (the default pool counts them).
    pub vbuffers_mapped: u64,
    /// Pools users made (gpurt_mem_pool_create): bytes held from the driver.
    pub user_pools_reserved: u64,
    /// Of `user_pools_reserved`, bytes handed out.
    pub user_pools_live: u64,
    /// The user pools' memory asleep.
    pub user_pools_asleep: u64,
    /// Graph pools and the private pools of captures: bytes held from the driver.
    pub graph_pools_reserved: u64,
    /// Of `graph_pools_reserved`, bytes handed out.
    pub graph_pools_live: u64,
    /// Math-library handles gpurt created and has not destroyed (gpurt_blas_handles_release): the drop in the device's free memory across their creation (the libraries' own memory, beside their workspaces).
    pub math_handles: u64,
    /// Modules gpurt loaded: the drop in free memory across their loads.
    pub modules: u64,
    /// NCCL communicators gpurt made: the drop in free memory across their creation.
    pub communicators: u64,
    /// `process` less every figure above it that holds memory: the context (less its local memory), and what other libraries took from the driver themselves; GPURT_MEMORY_UNKNOWN with `process`.
    pub unattributed: u64,
}

impl gpurt_memory_report_t {
    /// The figures that hold device memory, which `unattributed` leaves out of `process`.
    fn attributed(&self) -> u64 {
        [
            self.local_memory,
            self.default_pool_reserved,
            self.user_pools_reserved,
            self.graph_pools_reserved,
            self.math_handles,
            self.modules,
            self.communicators,
        ]
        .iter()
        .sum()
    }
}

/// The report of device `ordinal` for this process.
pub fn report(ordinal: i32) -> Result<gpurt_memory_report_t> {
    let d = device::resolve(ordinal)?;
    let (free, total) = device::mem_get_info(d)?;
    let default = default_pool(d)?.stats();
    let mut users = gpurt_memory_stats_t::new();
    MEM_POOLS.add_stats(d, &mut users);
    let mut graphs = gpurt_memory_stats_t::new();
    capture::add_private_stats(d, &mut graphs);
    let bytes = |v: i64| v.max(0) as u64;
    let mut report = gpurt_memory_report_t {
        struct_size: std::mem::size_of::<gpurt_memory_report_t>(),
        device_total: total as u64,
        device_free: free as u64,
        process: process_bytes(d),
        local_memory: device::local_memory::reserved(d)?,
        default_pool_reserved: bytes(default.reserved_bytes.all.current),
        default_pool_live: bytes(default.allocated_bytes.all.current),
        default_pool_asleep: bytes(default.asleep_bytes),
        math_workspaces: crate::mathlib::workspace_bytes(d),
        vbuffers_mapped: crate::vbuffer::mapped_on(d),
        user_pools_reserved: bytes(users.reserved_bytes.all.current),
        user_pools_live: bytes(users.allocated_bytes.all.current),
        user_pools_asleep: bytes(users.asleep_bytes),
        graph_pools_reserved: bytes(graphs.reserved_bytes.all.current),
        graph_pools_live: bytes(graphs.allocated_bytes.all.current),
        math_handles: footprint::of(d, Footprint::MathHandles),
        modules: footprint::of(d, Footprint::Modules),
        communicators: footprint::of(d, Footprint::Communicators),
        unattributed: GPURT_MEMORY_UNKNOWN,
    };
    if report.process != GPURT_MEMORY_UNKNOWN {
        report.unattributed = report.process.saturating_sub(report.attributed());
    }
    Ok(report)
}

/// This process's memory on device `d` by NVML, or GPURT_MEMORY_UNKNOWN.
fn process_bytes(d: i32) -> u64 {
    let me = std::process::id();
    crate::telemetry::processes(d).ok().and_then(|all| all.into_iter().find(|p| p.pid == me)).map_or(GPURT_MEMORY_UNKNOWN, |p| p.used_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unattributed_is_the_process_less_what_holds_memory() {
        let r = gpurt_memory_report_t {
            process: 1000,
            local_memory: 100,
            default_pool_reserved: 200,
            default_pool_live: 150,
            math_workspaces: 50,
            user_pools_reserved: 100,
            graph_pools_reserved: 50,
            vbuffers_mapped: 25,
            math_handles: 10,
            modules: 5,
            communicators: 10,
            ..Default::default()
        };
        // Live bytes, workspaces and vbuffers are parts of the default pool's reserved
        // bytes, not beside them.
        assert_eq!(r.attributed(), 475);
    }
}
