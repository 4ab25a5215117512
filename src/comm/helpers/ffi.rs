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
