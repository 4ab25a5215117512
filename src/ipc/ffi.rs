use libc::c_void;

use super::{consumer, producer, ExportedBlock, GPURT_IPC_HANDLE_SIZE};
use crate::boundary::{self, in_ref, write_optional, Out};
use crate::error::gpurt_status_t;

/// A block of device memory exported to other processes of this machine: plain
/// bytes, to send by any means (a pipe, a socket, shared memory, a file).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_ipc_mem_handle_t {
    /// The handle's bytes: send them to the other process as they are.
    pub bytes: [u8; GPURT_IPC_HANDLE_SIZE],
}

/// Exports the live gpurt allocation at `ptr` (of a device's default pool, or of a
/// pool over the driver or a user upstream whose memory cuIpcGetMemHandle accepts)
/// for gpurt_ipc_open_mem_handle in another process. Exporting it again gives the
/// same handle. While another process has it open, gpurt_free of it keeps the memory
/// from reuse until gpurt_ipc_collect finds every such process closed it or exited.
/// Synchronise the work that writes the block before the other process reads it.
/// GPURT_ERROR_NOT_SUPPORTED for a block of an expandable segment.
///
/// @param ptr the start of a live gpurt block
/// @param[out] handle receives the block's handle, bytes for another process; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a pointer that is not the start of a live block, or a block of a pool that is asleep; GPURT_ERROR_NOT_SUPPORTED for memory the driver cannot share (a block of an expandable segment mapped while the driver refused shareable memory, managed memory); or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_ipc_mem_handle(ptr: *mut c_void, handle: *mut gpurt_ipc_mem_handle_t) -> gpurt_status_t {
    boundary::call("gpurt_ipc_mem_handle", || {
        let out = Out::new(handle, "handle")?;
        out.write(gpurt_ipc_mem_handle_t { bytes: producer::export(ptr as u64)?.encode() });
        Ok(())
    })
}

/// Opens a block another process of this machine exported, on the device it lies
/// on (found by UUID, whatever CUDA_VISIBLE_DEVICES says here). Each segment is
/// mapped once per process; opening the same handle again gives the same pointer
/// and needs as many closes. GPURT_ERROR_INVALID_HANDLE for bytes that are not a
/// gpurt handle, a handle of another boot or machine, or a block its producer freed.
///
/// @param handle a handle another process of this machine exported (untrusted bytes: see SECURITY.md)
/// @param[out] ptr receives the block's address in this process (unchanged on failure); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for bytes that are not a gpurt handle, another boot's handle, a freed block, a forged field (a process, a device no visible device's UUID names, an offset or size outside the memory, a descriptor that is not gpurt's list or not CUDA memory); GPURT_ERROR_INVALID_ARGUMENT for a handle this process exported; GPURT_ERROR_NOT_SUPPORTED without pidfd_getfd (Linux < 5.6) or ptrace access to the exporter, for an expandable segment's block; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_ipc_open_mem_handle(handle: *const gpurt_ipc_mem_handle_t, ptr: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_ipc_open_mem_handle", || {
        let out = Out::new(ptr, "ptr")?;
        let block = ExportedBlock::decode(&in_ref(handle, "handle")?.bytes)?;
        out.write(consumer::open(&block)? as *mut c_void);
        Ok(())
    })
}

/// Closes a pointer from gpurt_ipc_open_mem_handle. The last close of a block waits
/// for the work queued on its device, then lets its producer reuse it.
///
/// @param ptr a pointer from gpurt_ipc_open_mem_handle
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a pointer not open here; or a status every call may give (@ref statuses).
/// @par Ordering
/// The last close of a block blocks until the work queued on its device is done, so that the exporter may reuse it.
#[no_mangle]
pub extern "C" fn gpurt_ipc_close_mem_handle(ptr: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_ipc_close_mem_handle", || consumer::close(ptr as u64))
}

/// Frees the exported blocks this process freed whose consumers have all closed
/// them or exited (torch.cuda.ipc_collect).
///
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_ipc_collect() -> gpurt_status_t {
    boundary::call("gpurt_ipc_collect", producer::collect)
}

/// The blocks this process freed that other processes still hold open, and their
/// bytes (either pointer may be NULL).
///
/// @param[out] blocks receives the number of freed blocks other processes still hold; may be NULL
/// @param[out] bytes receives their bytes; may be NULL
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_ipc_kept(blocks: *mut u64, bytes: *mut u64) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_ipc_kept", || {
        let (count, size) = producer::kept();
        write_optional([(blocks, count), (bytes, size)]);
        Ok(())
    })
}
