use libc::{c_int, c_void};

use super::{bytes, gpurt_reduce_op_t, nccl_dtype, Buffer};
use crate::boundary::{self, in_array, in_ref, Out};
use crate::dtype::gpurt_dtype_t;
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::sanitizer::Access;
use crate::stream::ffi::gpurt_stream_t;

/// A communicator: one rank of a group of GPUs (NCCL's `ncclComm_t`).
pub struct gpurt_comm_s {
    _opaque: [u8; 0],
}
/// The handle of a communicator: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_comm_t = *mut gpurt_comm_s;

/// The bytes that name a group: made by one rank with gpurt_comm_unique_id and
/// shipped to the others by any means (a file, a socket, MPI, a key-value store).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct gpurt_comm_id_t {
    /// NCCL's unique id's bytes: send them to every rank as they are.
    pub internal: [u8; 128],
}

fn handle_of(comm: gpurt_comm_t) -> Handle {
    Handle::from_ptr(comm)
}

/// NCCL's version (`major*10000 + minor*100 + patch`). Without NCCL:
/// `GPURT_ERROR_NOT_SUPPORTED`, naming libnccl.so.2; every comm call answers so.
///
/// @param[out] version receives NCCL's version, major × 10000 + minor × 100 + patch; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_comm_version(version: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_comm_version", || {
        let out = Out::new(version, "version")?;
        out.write(super::version()?);
        Ok(())
    })
}

/// One communicator per device of `devices[0..n]` (ranks in that order), for one
/// process over several GPUs; `comms` receives `n` handles.
///
/// @param devices `n` device ordinals, one rank each, in rank order
/// @param n how many devices (at least 1)
/// @param[out] comms receives `n` communicators (an array of `n` handles); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for `n` < 1, a NULL `devices` or a device that does not exist; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks until every rank's communicator is made (NCCL's ncclCommInitAll); no stream work.
#[no_mangle]
pub extern "C" fn gpurt_comm_init_all(devices: *const c_int, n: c_int, comms: *mut gpurt_comm_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_init_all", || {
        if n < 1 {
            return Err(crate::Error::invalid_argument(format!("n is {n}: at least one device")));
        }
        let devices = in_array(devices, n as usize, 4096, "devices")?;
        if comms.is_null() {
            return Err(boundary::null_argument("comms"));
        }
        let handles: Vec<gpurt_comm_t> = super::init_all(devices)?.into_iter().map(|h| h.to_ptr()).collect();
        boundary::write_array(comms, &handles, "comms")
    })
}

/// A new group's id, for gpurt_comm_init_rank on every rank.
///
/// @param[out] id receives a new group id, to pass to every rank (any way: it is plain bytes); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_comm_unique_id(id: *mut gpurt_comm_id_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_unique_id", || {
        let out = Out::new(id, "id")?;
        out.write(gpurt_comm_id_t { internal: super::unique_id()? });
        Ok(())
    })
}

/// Joins the group `id` names as rank `rank` of `nranks`, on `device`: one process
/// per GPU, on one machine or many. Waits for the other ranks at most
/// `GPURT_COMM_INIT_TIMEOUT_MS` (5 minutes by default; see
/// gpurt_comm_init_rank_timeout): a rank that never joins is `GPURT_ERROR_COMM`,
/// and this rank can go on.
///
/// @param id the group's id from gpurt_comm_unique_id on one rank
/// @param nranks the number of ranks in the group
/// @param rank this rank, in [0, nranks)
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param[out] comm receives this rank's communicator; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a rank out of range; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when a peer does not join within the timeout (this rank's half-made communicator is aborted); or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks until every rank has joined, or the timeout.
#[no_mangle]
pub extern "C" fn gpurt_comm_init_rank(id: *const gpurt_comm_id_t, nranks: c_int, rank: c_int, device: c_int, comm: *mut gpurt_comm_t) -> gpurt_status_t {
    gpurt_comm_init_rank_timeout(id, nranks, rank, device, super::default_timeout().as_millis().min(u64::MAX as u128) as u64, comm)
}

/// gpurt_comm_init_rank with its own timeout, in milliseconds.
///
/// @param id the group's id
/// @param nranks the number of ranks
/// @param rank this rank
/// @param device a device ordinal; GPURT_CURRENT_DEVICE (-1): this thread's current device
/// @param timeout_ms the longest wait for the other ranks, in milliseconds
/// @param[out] comm receives this rank's communicator; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a rank out of range; GPURT_ERROR_INVALID_ARGUMENT for a device that does not exist; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when a peer does not join in time; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks until every rank has joined, or `timeout_ms`.
#[no_mangle]
pub extern "C" fn gpurt_comm_init_rank_timeout(
    id: *const gpurt_comm_id_t,
    nranks: c_int,
    rank: c_int,
    device: c_int,
    timeout_ms: u64,
    comm: *mut gpurt_comm_t,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_init_rank", || {
        let out = Out::new(comm, "comm")?;
        let id = in_ref(id, "id")?;
        out.write(super::init_rank(&id.internal, nranks, rank, device, std::time::Duration::from_millis(timeout_ms))?.to_ptr());
        Ok(())
    })
}

/// Destroys a communicator (NCCL's resources go once no call on it is running).
///
/// @param comm a communicator of this process
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not wait for the communicator's queued work: NCCL's resources go once it is done.
#[no_mangle]
pub extern "C" fn gpurt_comm_destroy(comm: gpurt_comm_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_destroy", || super::destroy(handle_of(comm)))
}

/// Aborts a communicator, cancelling its pending work, and destroys the handle:
/// after a peer failed (see gpurt_comm_get_async_error).
///
/// @param comm a communicator of this process
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Cancels the communicator's pending work without waiting for it; the handle is invalid afterwards.
#[no_mangle]
pub extern "C" fn gpurt_comm_abort(comm: gpurt_comm_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_abort", || super::abort(handle_of(comm)))
}

/// The error NCCL found running this communicator's work, if any (success
/// otherwise): poll it while waiting on a collective that may never finish.
///
/// @param comm a communicator of this process
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm`; GPURT_ERROR_COMM with NCCL's reason when the communicator's work failed; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_comm_get_async_error(comm: gpurt_comm_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_get_async_error", || super::async_error(handle_of(comm)))
}

/// The communicator's rank, number of ranks and device (each may be NULL).
///
/// @param comm a communicator of this process
/// @param[out] rank receives this communicator's rank; may be NULL
/// @param[out] nranks receives the number of ranks; may be NULL
/// @param[out] device receives its device ordinal; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_comm_info(comm: gpurt_comm_t, rank: *mut c_int, nranks: *mut c_int, device: *mut c_int) -> gpurt_status_t {
    boundary::call("gpurt_comm_info", || {
        let c = super::get(handle_of(comm))?;
        for (out, value) in [(rank, c.rank), (nranks, c.nranks), (device, c.device)] {
            if !out.is_null() {
                // SAFETY: a non-NULL out-parameter points to an int.
                unsafe { *out = value };
            }
        }
        Ok(())
    })
}

fn dtype_and_bytes(dtype: c_int, count: usize) -> crate::Result<(gpurt_dtype_t, u64)> {
    let dtype = gpurt_dtype_t::from_raw(dtype)?;
    Ok((dtype, bytes(count as u64, dtype)?))
}

fn read(ptr: *const c_void, bytes: u64) -> Buffer {
    Buffer { ptr: ptr as u64, bytes, access: Access::Read }
}

fn write(ptr: *mut c_void, bytes: u64) -> Buffer {
    Buffer { ptr: ptr as u64, bytes, access: Access::Write }
}

/// Reduces `count` elements of `send` over all ranks with `op`; every rank gets the
/// result in `recv` (may be `send`). Stream-ordered on `stream` (of the
/// communicator's device), and capturable into graphs.
///
/// @param send `count` elements on the communicator's device
/// @param recv receives the `count` reduced elements; may be `send`
/// @param count elements per rank
/// @param dtype the elements' gpurt_dtype_t
/// @param op a gpurt_reduce_op_t
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_all_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    comm: gpurt_comm_t,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_all_reduce", || {
        let (dtype, n) = dtype_and_bytes(dtype, count)?;
        let op = gpurt_reduce_op_t::from_raw(op)?;
        let c = super::get(handle_of(comm))?;
        super::run(&c, Handle::from_ptr(stream), &[read(send, n), write(recv, n)], "ncclAllReduce", |nccl, raw, s| unsafe {
            (nccl.all_reduce)(send, recv, count, nccl_dtype(dtype), op as c_int, raw, s)
        })
    })
}

/// Copies `count` elements of rank `root`'s `send` to every rank's `recv` (NCCL's
/// broadcast collective; gpurt_comm_broadcast is torch.cuda.comm's helper).
///
/// @param send on rank `root`, the `count` elements to send (ignored elsewhere)
/// @param recv receives the elements on every rank
/// @param count elements
/// @param dtype the elements' gpurt_dtype_t
/// @param root the rank that sends
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_bcast(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    root: c_int,
    comm: gpurt_comm_t,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_bcast", || {
        let (dtype, n) = dtype_and_bytes(dtype, count)?;
        let c = super::get(handle_of(comm))?;
        check_rank(root, c.nranks, "root")?;
        let sent = if c.rank == root { n } else { 0 };
        super::run(&c, Handle::from_ptr(stream), &[read(send, sent), write(recv, n)], "ncclBroadcast", |nccl, raw, s| unsafe {
            (nccl.broadcast)(send, recv, count, nccl_dtype(dtype), root, raw, s)
        })
    })
}

/// Reduces `count` elements of `send` over all ranks into rank `root`'s `recv`.
///
/// @param send `count` elements
/// @param recv on rank `root`, receives the result (ignored elsewhere)
/// @param count elements
/// @param dtype the elements' gpurt_dtype_t
/// @param op a gpurt_reduce_op_t
/// @param root the rank that receives
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_reduce(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: c_int,
    root: c_int,
    comm: gpurt_comm_t,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_reduce", || {
        let (dtype, n) = dtype_and_bytes(dtype, count)?;
        let op = gpurt_reduce_op_t::from_raw(op)?;
        let c = super::get(handle_of(comm))?;
        check_rank(root, c.nranks, "root")?;
        let received = if c.rank == root { n } else { 0 };
        super::run(&c, Handle::from_ptr(stream), &[read(send, n), write(recv, received)], "ncclReduce", |nccl, raw, s| unsafe {
            (nccl.reduce)(send, recv, count, nccl_dtype(dtype), op as c_int, root, raw, s)
        })
    })
}

/// Gathers `send_count` elements from every rank into `recv` (nranks × send_count,
/// in rank order) on every rank.
///
/// @param send `send_count` elements
/// @param recv receives nranks × `send_count` elements, in rank order
/// @param send_count elements each rank sends
/// @param dtype the elements' gpurt_dtype_t
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_all_gather(
    send: *const c_void,
    recv: *mut c_void,
    send_count: usize,
    dtype: c_int,
    comm: gpurt_comm_t,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_all_gather", || {
        let (dtype, n) = dtype_and_bytes(dtype, send_count)?;
        let c = super::get(handle_of(comm))?;
        let all = n.checked_mul(c.nranks as u64).ok_or_else(|| crate::Error::invalid_argument("send_count × nranks overflows"))?;
        super::run(&c, Handle::from_ptr(stream), &[read(send, n), write(recv, all)], "ncclAllGather", |nccl, raw, s| unsafe {
            (nccl.all_gather)(send, recv, send_count, nccl_dtype(dtype), raw, s)
        })
    })
}

/// Reduces `send` (nranks × recv_count elements) over all ranks with `op`; rank i
/// gets block i of the result in `recv`.
///
/// @param send nranks × `recv_count` elements
/// @param recv receives this rank's block of the result
/// @param recv_count elements each rank receives
/// @param dtype the elements' gpurt_dtype_t
/// @param op a gpurt_reduce_op_t
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_reduce_scatter(
    send: *const c_void,
    recv: *mut c_void,
    recv_count: usize,
    dtype: c_int,
    op: c_int,
    comm: gpurt_comm_t,
    stream: gpurt_stream_t,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_reduce_scatter", || {
        let (dtype, n) = dtype_and_bytes(dtype, recv_count)?;
        let op = gpurt_reduce_op_t::from_raw(op)?;
        let c = super::get(handle_of(comm))?;
        let all = n.checked_mul(c.nranks as u64).ok_or_else(|| crate::Error::invalid_argument("recv_count × nranks overflows"))?;
        super::run(&c, Handle::from_ptr(stream), &[read(send, all), write(recv, n)], "ncclReduceScatter", |nccl, raw, s| unsafe {
            (nccl.reduce_scatter)(send, recv, recv_count, nccl_dtype(dtype), op as c_int, raw, s)
        })
    })
}

/// Sends `count` elements to rank `peer` (which calls gpurt_comm_recv); pair them
/// in gpurt_comm_group_start/_end for exchanges in both directions.
///
/// @param buffer `count` elements to send
/// @param count elements
/// @param dtype the elements' gpurt_dtype_t
/// @param peer the receiving rank
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_send(buffer: *const c_void, count: usize, dtype: c_int, peer: c_int, comm: gpurt_comm_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_send", || {
        let (dtype, n) = dtype_and_bytes(dtype, count)?;
        let c = super::get(handle_of(comm))?;
        check_rank(peer, c.nranks, "peer")?;
        super::run(&c, Handle::from_ptr(stream), &[read(buffer, n)], "ncclSend", |nccl, raw, s| unsafe {
            (nccl.send)(buffer, count, nccl_dtype(dtype), peer, raw, s)
        })
    })
}

/// Receives `count` elements from rank `peer`.
///
/// @param buffer receives `count` elements
/// @param count elements
/// @param dtype the elements' gpurt_dtype_t
/// @param peer the sending rank
/// @param comm a communicator of this process
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one) on the communicator's device
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a NULL buffer with a non-zero count, an unknown dtype or op, a rank out of range, or a stream of another device; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Capturable into a CUDA graph. Inside gpurt_comm_group_start/_end, the call is only collected and is issued by the outermost gpurt_comm_group_end.
#[no_mangle]
pub extern "C" fn gpurt_comm_recv(buffer: *mut c_void, count: usize, dtype: c_int, peer: c_int, comm: gpurt_comm_t, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_recv", || {
        let (dtype, n) = dtype_and_bytes(dtype, count)?;
        let c = super::get(handle_of(comm))?;
        check_rank(peer, c.nranks, "peer")?;
        super::run(&c, Handle::from_ptr(stream), &[write(buffer, n)], "ncclRecv", |nccl, raw, s| unsafe {
            (nccl.recv)(buffer, count, nccl_dtype(dtype), peer, raw, s)
        })
    })
}

/// Opens a group: the collectives and sends/receives until gpurt_comm_group_end
/// are issued together (one process driving several GPUs must group them).
///
/// @return GPURT_SUCCESS; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_comm_group_start() -> gpurt_status_t {
    boundary::call("gpurt_comm_group_start", super::group_start)
}

/// Closes a group opened by gpurt_comm_group_start on this thread; the outermost
/// issues the group's calls.
///
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT when this thread has no group open; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// The outermost end issues the group's calls on their streams; it does not wait for them.
#[no_mangle]
pub extern "C" fn gpurt_comm_group_end() -> gpurt_status_t {
    boundary::call("gpurt_comm_group_end", super::group_end)
}

/// Splits a communicator (torch's `new_group`, NCCL's `ncclCommSplit`): the ranks
/// that give the same `color` form a new communicator, ranked by `key` and then by
/// their old rank; with GPURT_COMM_SPLIT_NOCOLOR this rank joins none and
/// `*newcomm` is NULL. Collective over every rank of `comm`, for one process per
/// rank; waits for the others at most as long as gpurt_comm_init_rank. A process
/// holding several ranks of `comm` splits them with gpurt_comm_split_all. Needs NCCL
/// 2.18 or later.
///
/// @param comm a communicator of this process
/// @param color ranks giving the same colour form a communicator; GPURT_COMM_SPLIT_NOCOLOR: this rank joins none
/// @param key orders the ranks of the new communicator (ties: by old rank)
/// @param[out] newcomm receives the new communicator, or NULL with GPURT_COMM_SPLIT_NOCOLOR; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `comm`; GPURT_ERROR_NOT_SUPPORTED for an NCCL older than 2.18; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Collective: blocks until every rank of `comm` has called it, or the timeout.
#[no_mangle]
pub extern "C" fn gpurt_comm_split(comm: gpurt_comm_t, color: c_int, key: c_int, newcomm: *mut gpurt_comm_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_split", || split(&comm, 1, &color, &key, newcomm))
}

/// gpurt_comm_split for several ranks of one communicator held by this process
/// (`comms[0..n]`, from gpurt_comm_init_all): they are split together, rank `i`
/// with `colors[i]` and `keys[i]`; `newcomms[i]` receives rank `i`'s new
/// communicator (NULL for GPURT_COMM_SPLIT_NOCOLOR).
///
/// @param comms `n` communicators of one group held by this process
/// @param n how many
/// @param colors `n` colours, one per rank
/// @param keys `n` keys, one per rank
/// @param[out] newcomms receives `n` new communicators (NULL where the colour is GPURT_COMM_SPLIT_NOCOLOR); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for `n` < 1 or NULL arrays; GPURT_ERROR_INVALID_HANDLE for a bad communicator; GPURT_ERROR_NOT_SUPPORTED where NCCL (libnccl.so.2) cannot be loaded; GPURT_ERROR_COMM when NCCL, the network or a peer fails (gpurt_comm_get_async_error then says more); or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks until the split is made.
#[no_mangle]
pub extern "C" fn gpurt_comm_split_all(comms: *const gpurt_comm_t, n: c_int, colors: *const c_int, keys: *const c_int, newcomms: *mut gpurt_comm_t) -> gpurt_status_t {
    boundary::call("gpurt_comm_split_all", || split(comms, n, colors, keys, newcomms))
}

fn split(comms: *const gpurt_comm_t, n: c_int, colors: *const c_int, keys: *const c_int, newcomms: *mut gpurt_comm_t) -> crate::Result<()> {
    if n < 1 {
        return Err(crate::Error::invalid_argument(format!("n is {n}: at least one communicator")));
    }
    let comms = in_array(comms, n as usize, 4096, "comms")?;
    let colors = in_array(colors, n as usize, 4096, "colors")?;
    let keys = in_array(keys, n as usize, 4096, "keys")?;
    if newcomms.is_null() {
        return Err(boundary::null_argument("newcomms"));
    }
    let parents: Vec<Handle> = comms.iter().map(|&c| handle_of(c)).collect();
    let made = super::split(&parents, colors, keys, super::default_timeout())?;
    let out: Vec<gpurt_comm_t> = made.into_iter().map(|h| h.map_or(std::ptr::null_mut(), |h| h.to_ptr())).collect();
    boundary::write_array(newcomms, &out, "newcomms")
}

fn check_rank(rank: c_int, nranks: i32, name: &str) -> crate::Result<()> {
    if rank < 0 || rank >= nranks {
        return Err(crate::Error::invalid_argument(format!("{name} {rank} is not a rank of this communicator (0..{nranks})")));
    }
    Ok(())
}
