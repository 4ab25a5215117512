//! The C entry points of torch.cuda.comm's helpers (`gpurt_comm_broadcast` ...).

use libc::{c_int, c_void};

use super::MAX_DEVICES;
use crate::boundary::{self, in_array};
use crate::dtype::gpurt_dtype_t;
use crate::error::{gpurt_status_t, Result};

fn devices_arg<'a>(devices: *const c_int, n: c_int) -> Result<&'a [i32]> {
    if n < 1 {
        return Err(crate::Error::invalid_argument(format!("n is {n}: at least one device")));
    }
    in_array(devices, n as usize, MAX_DEVICES, "devices")
}

fn pointers(ptrs: *const *const c_void, count: usize, max: usize, name: &str) -> Result<Vec<u64>> {
    let ptrs = in_array(ptrs, count, max, name)?;
    Ok(ptrs.iter().map(|&p| p as u64).collect())
}

fn write_pointers(out: *mut *mut c_void, values: &[u64], name: &str) -> Result<()> {
    let values: Vec<*mut c_void> = values.iter().map(|&p| p as *mut c_void).collect();
    boundary::write_array(out, &values, name)
}

/// Bytes of `counts[i]` elements of `dtype` each, refused where one overflows.
fn sizes(counts: &[usize], dtype: gpurt_dtype_t) -> Result<Vec<u64>> {
    counts.iter().map(|&c| crate::comm::bytes(c as u64, dtype)).collect()
}

fn bucket(bucket_bytes: usize) -> u64 {
    match bucket_bytes {
        0 => super::DEFAULT_BUCKET_BYTES,
        b => b as u64,
    }
}

/// torch.cuda.comm.broadcast: `count` elements of `dtype` at `src` (memory of
/// `src_device`) copied to each of `devices[0..n]`. `outputs[i]` receives a new
/// buffer on `devices[i]` (the source's device included), allocated from its pools
/// and ready on its current stream; free each with gpurt_free. The source is read
/// after the work queued on `src_device`'s current stream, which then waits for the
/// copies. Needs no NCCL; a device may appear twice.
///
/// @param src `count` elements on `src_device`
/// @param src_device the source's device
/// @param count elements
/// @param dtype the elements' gpurt_dtype_t
/// @param devices the `n` destination devices
/// @param n how many destinations
/// @param[out] outputs receives `n` new buffers, one per destination; free each with gpurt_free; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, `n` < 1, an unknown dtype, a device that does not exist or a byte count that overflows; GPURT_ERROR_OUT_OF_MEMORY where an output cannot be allocated (outputs made so far are freed); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued: reads each source after the work queued on its device's current stream, and the outputs are ready on their devices' current streams; returns without waiting for the copies. Not for use during a capture.
#[no_mangle]
pub extern "C" fn gpurt_comm_broadcast(src: *const c_void, src_device: c_int, count: usize, dtype: c_int, devices: *const c_int, n: c_int, outputs: *mut *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_comm_broadcast", || {
        let bytes = crate::comm::bytes(count as u64, gpurt_dtype_t::from_raw(dtype)?)?;
        let devices = devices_arg(devices, n)?;
        boundary::in_ref(outputs, "outputs")?;
        write_pointers(outputs, &super::broadcast(src as u64, src_device, bytes, devices)?, "outputs")
    })
}

/// torch.cuda.comm.broadcast_coalesced: `srcs[j]` (`counts[j]` elements of `dtype`,
/// all on `src_device`) to each of `devices[0..n]`, packed into buckets of up to
/// `bucket_bytes` (0: 10 MiB) so that each bucket is one copy per device.
/// `outputs[i * num_buffers + j]` receives buffer j's copy on `devices[i]`, a buffer of
/// its own (as gpurt_comm_broadcast's).
///
/// @param srcs `num_buffers` source buffers on `src_device`
/// @param counts each buffer's element count
/// @param num_buffers how many buffers
/// @param dtype the elements' gpurt_dtype_t
/// @param src_device the sources' device
/// @param devices the `n` destination devices
/// @param n how many destinations
/// @param bucket_bytes the largest bucket (0: 10 MiB)
/// @param[out] outputs receives `n` × `num_buffers` new buffers, destination-major; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, `n` < 1, an unknown dtype, a device that does not exist or a byte count that overflows; GPURT_ERROR_OUT_OF_MEMORY where an output cannot be allocated (outputs made so far are freed); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued: reads each source after the work queued on its device's current stream, and the outputs are ready on their devices' current streams; returns without waiting for the copies. Not for use during a capture.
#[no_mangle]
pub extern "C" fn gpurt_comm_broadcast_coalesced(
    srcs: *const *const c_void,
    counts: *const usize,
    num_buffers: usize,
    dtype: c_int,
    src_device: c_int,
    devices: *const c_int,
    n: c_int,
    bucket_bytes: usize,
    outputs: *mut *mut c_void,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_broadcast_coalesced", || {
        let dtype = gpurt_dtype_t::from_raw(dtype)?;
        let srcs = pointers(srcs, num_buffers, super::MAX_BUFFERS, "srcs")?;
        let bytes = sizes(in_array(counts, num_buffers, super::MAX_BUFFERS, "counts")?, dtype)?;
        let devices = devices_arg(devices, n)?;
        boundary::in_ref(outputs, "outputs")?;
        let copies = super::broadcast_coalesced(&srcs, &bytes, src_device, devices, bucket(bucket_bytes))?;
        write_pointers(outputs, &copies, "outputs")
    })
}

/// torch.cuda.comm.reduce_add: the elementwise sum of `inputs[i]` (`count` elements
/// of `dtype` on `devices[i]`, i < n) in a new buffer on `destination`, ready on its
/// current stream (`*output`; free it with gpurt_free). Each input is read after the
/// work queued on its device's current stream, which then waits for the read. Half
/// and bfloat16 are added in float, left to right.
///
/// @param inputs `n` buffers, `inputs[i]` on `devices[i]`
/// @param devices the inputs' devices
/// @param n how many inputs
/// @param count elements per input
/// @param dtype the elements' gpurt_dtype_t
/// @param destination the device of the sum
/// @param[out] output receives a new buffer on `destination` holding the sum; free it with gpurt_free; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, `n` < 1, an unknown dtype, a device that does not exist or a byte count that overflows; GPURT_ERROR_OUT_OF_MEMORY where an output cannot be allocated (outputs made so far are freed); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued: reads each source after the work queued on its device's current stream, and the outputs are ready on their devices' current streams; returns without waiting for the copies. Not for use during a capture.
#[no_mangle]
pub extern "C" fn gpurt_comm_reduce_add(
    inputs: *const *const c_void,
    devices: *const c_int,
    n: c_int,
    count: usize,
    dtype: c_int,
    destination: c_int,
    output: *mut *mut c_void,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_reduce_add", || {
        let dtype = gpurt_dtype_t::from_raw(dtype)?;
        let devices = devices_arg(devices, n)?;
        let inputs = pointers(inputs, devices.len(), MAX_DEVICES, "inputs")?;
        boundary::in_ref(output, "output")?;
        write_pointers(output, &[super::reduce_add(&inputs, devices, count as u64, dtype, destination)?], "output")
    })
}

/// torch.cuda.comm.reduce_add_coalesced: `inputs[i * num_buffers + j]` is buffer j
/// on `devices[i]` (`counts[j]` elements of `dtype`); `outputs[j]` receives the sum
/// of buffer j over the devices, on `destination`. Packed into buckets of up to
/// `bucket_bytes` (0: 10 MiB): one copy and one sum per bucket and device.
///
/// @param inputs `n` × `num_buffers` buffers, device-major
/// @param devices the `n` devices
/// @param n how many devices
/// @param counts each buffer's element count
/// @param num_buffers buffers per device
/// @param dtype the elements' gpurt_dtype_t
/// @param destination the device of the sums
/// @param bucket_bytes the largest bucket (0: 10 MiB)
/// @param[out] outputs receives `num_buffers` new buffers on `destination`; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, `n` < 1, an unknown dtype, a device that does not exist or a byte count that overflows; GPURT_ERROR_OUT_OF_MEMORY where an output cannot be allocated (outputs made so far are freed); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued: reads each source after the work queued on its device's current stream, and the outputs are ready on their devices' current streams; returns without waiting for the copies. Not for use during a capture.
#[no_mangle]
pub extern "C" fn gpurt_comm_reduce_add_coalesced(
    inputs: *const *const c_void,
    devices: *const c_int,
    n: c_int,
    counts: *const usize,
    num_buffers: usize,
    dtype: c_int,
    destination: c_int,
    bucket_bytes: usize,
    outputs: *mut *mut c_void,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_reduce_add_coalesced", || {
        let dtype = gpurt_dtype_t::from_raw(dtype)?;
        let devices = devices_arg(devices, n)?;
        let counts = in_array(counts, num_buffers, super::MAX_BUFFERS, "counts")?;
        let all = num_buffers.checked_mul(devices.len()).ok_or_else(|| crate::Error::invalid_argument("num_buffers × n overflows"))?;
        let inputs = pointers(inputs, all, MAX_DEVICES * super::MAX_BUFFERS, "inputs")?;
        boundary::in_ref(outputs, "outputs")?;
        let counts: Vec<u64> = counts.iter().map(|&c| c as u64).collect();
        let sums = super::reduce_add_coalesced(&inputs, devices, &counts, dtype, destination, bucket(bucket_bytes))?;
        write_pointers(outputs, &sums, "outputs")
    })
}

/// torch.cuda.comm.scatter: the `count` elements of `dtype` at `src` (on
/// `src_device`) cut into n chunks, chunk i copied to a new buffer on `devices[i]`
/// (`outputs[i]`, NULL for an empty chunk). `chunk_counts` (n element counts adding
/// up to `count`) sets the chunks; NULL: torch's `chunk`, ceil(count / n) each, the
/// last ones smaller. Streams as gpurt_comm_broadcast's.
///
/// @param src `count` elements on `src_device`
/// @param src_device the source's device
/// @param count elements in all
/// @param dtype the elements' gpurt_dtype_t
/// @param devices the `n` destination devices
/// @param n how many chunks
/// @param chunk_counts `n` element counts adding up to `count`; NULL: torch's chunk
/// @param[out] outputs receives `n` new buffers (NULL for an empty chunk); must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, `n` < 1, an unknown dtype, a device that does not exist or a byte count that overflows; GPURT_ERROR_OUT_OF_MEMORY where an output cannot be allocated (outputs made so far are freed); GPURT_ERROR_INVALID_ARGUMENT for chunk counts that do not add up to `count`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued: reads each source after the work queued on its device's current stream, and the outputs are ready on their devices' current streams; returns without waiting for the copies. Not for use during a capture.
#[no_mangle]
pub extern "C" fn gpurt_comm_scatter(
    src: *const c_void,
    src_device: c_int,
    count: usize,
    dtype: c_int,
    devices: *const c_int,
    n: c_int,
    chunk_counts: *const usize,
    outputs: *mut *mut c_void,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_scatter", || {
        let dtype = gpurt_dtype_t::from_raw(dtype)?;
        crate::comm::bytes(count as u64, dtype)?;
        let devices = devices_arg(devices, n)?;
        let given: Option<Vec<u64>> = match chunk_counts.is_null() {
            true => None,
            false => Some(in_array(chunk_counts, devices.len(), MAX_DEVICES, "chunk_counts")?.iter().map(|&c| c as u64).collect()),
        };
        boundary::in_ref(outputs, "outputs")?;
        let chunks = super::scatter(src as u64, src_device, dtype.size(), count as u64, devices, given.as_deref())?;
        write_pointers(outputs, &chunks, "outputs")
    })
}

/// torch.cuda.comm.gather: `inputs[i]` (`counts[i]` elements of `dtype` on
/// `devices[i]`, i < n) one after the other in a new buffer on `destination`
/// (`*output`), ready on its current stream. Streams as gpurt_comm_reduce_add's.
///
/// @param inputs `n` buffers, `inputs[i]` on `devices[i]`
/// @param devices the inputs' devices
/// @param counts each input's element count
/// @param n how many inputs
/// @param dtype the elements' gpurt_dtype_t
/// @param destination the device of the result
/// @param[out] output receives a new buffer on `destination` holding the inputs one after the other; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for NULL arrays, `n` < 1, an unknown dtype, a device that does not exist or a byte count that overflows; GPURT_ERROR_OUT_OF_MEMORY where an output cannot be allocated (outputs made so far are freed); or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued: reads each source after the work queued on its device's current stream, and the outputs are ready on their devices' current streams; returns without waiting for the copies. Not for use during a capture.
#[no_mangle]
pub extern "C" fn gpurt_comm_gather(
    inputs: *const *const c_void,
    devices: *const c_int,
    counts: *const usize,
    n: c_int,
    dtype: c_int,
    destination: c_int,
    output: *mut *mut c_void,
) -> gpurt_status_t {
    boundary::call("gpurt_comm_gather", || {
        let dtype = gpurt_dtype_t::from_raw(dtype)?;
        let devices = devices_arg(devices, n)?;
        let inputs = pointers(inputs, devices.len(), MAX_DEVICES, "inputs")?;
        let bytes = sizes(in_array(counts, devices.len(), MAX_DEVICES, "counts")?, dtype)?;
        boundary::in_ref(output, "output")?;
        write_pointers(output, &[super::gather(&inputs, devices, &bytes, destination)?], "output")
    })
}
