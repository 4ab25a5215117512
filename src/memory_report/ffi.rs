use libc::c_int;

use super::gpurt_memory_report_t;
use crate::boundary::{self, write_sized, Out};
use crate::error::gpurt_status_t;

/// Where this process's memory on `device` is, in bytes, into a struct initialised
/// with GPURT_MEMORY_REPORT_INIT: the driver's free and total, NVML's figure for the
/// process, the context's local-memory reservation, each kind of gpurt pool (reserved,
/// live, asleep), math-library workspaces and handles, modules, NCCL communicators,
/// growable buffers, and what is left of the process's figure (the context, other
/// libraries' own memory). Handles, modules and communicators are measured as the drop
/// in the device's free memory across their creation: another process allocating at
/// that moment is counted too. Makes the device's primary context current if none is.
///
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param report a struct initialised with GPURT_MEMORY_REPORT_INIT; gpurt fills as many fields as its `struct_size` holds
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if `report` is NULL or its `struct_size` is smaller than the first version's; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_memory_report(device: c_int, report: *mut gpurt_memory_report_t) -> gpurt_status_t {
    boundary::call("gpurt_memory_report", || {
        Out::new(report, "report")?;
        write_sized(report, &super::report(device)?, std::mem::size_of::<gpurt_memory_report_t>(), "report")
    })
}
