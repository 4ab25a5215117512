//! torch.cuda.comm's helpers for one process over several GPUs: broadcast,
//! broadcast_coalesced, reduce_add, reduce_add_coalesced, scatter and gather.
//!
//! Each reads its inputs as they are once the work queued so far on their devices'
//! current streams is done (those streams then wait for the reads, so that a later
//! write or free there cannot overtake them), and allocates its outputs from gpurt's
//! pools on each destination device's current stream, where they are ready. The
//! data moves by the driver's copies over unified addresses (peer to peer where the
//! devices have it, staged by the driver otherwise); sums are a generated kernel on
//! the destination; the coalesced helpers pack their buffers into flat buckets with
//! one batched-copy kernel per bucket and device. NCCL is not needed: the helpers run
//! the same with and without it, and a device may appear more than once.
//!
//! Every output is a new buffer (freed with `gpurt_free`), the source device's
//! included. A failed call frees what it allocated.

pub mod ffi;

use crate::alloc::device as pools;
use crate::dtype::gpurt_dtype_t;
use crate::error::{Error, Result};
use crate::handle::Handle;

/// Most devices a helper takes: more than any machine has, so that a wild count is
/// refused before the caller's arrays are read.
pub(crate) const MAX_DEVICES: usize = 1024;
/// Most buffers a coalesced helper takes.
pub(crate) const MAX_BUFFERS: usize = 1 << 20;
/// torch.cuda.comm's bucket for the coalesced helpers: 10 MiB.
pub(crate) const DEFAULT_BUCKET_BYTES: u64 = 10 << 20;

/// Buffers a call allocated: freed when dropped unless kept, so that a call that
/// fails half way leaves every pool as it was, and scratch buffers go back at its end
/// (stream-ordered: reused only after the work queued on them).
#[derive(Default)]
struct Allocated(Vec<u64>);

impl Allocated {
    /// `bytes` on `device` for use on `stream`; 0 bytes is address 0 (torch's empty
    /// tensor), allocating nothing.
    fn on(&mut self, device: i32, bytes: u64, stream: Handle) -> Result<u64> {
        if bytes == 0 {
            return Ok(0);
        }
        let native = crate::stream::get(stream)?.raw as u64;
        let ptr = pools::malloc(device, bytes, native)?;
        self.0.push(ptr);
        Ok(ptr)
    }

    fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for Allocated {
    fn drop(&mut self) {
        for &ptr in &self.0 {
            let _ = pools::free(ptr);
        }
    }
}

/// Makes `stream` wait for the work queued so far on `other` (nothing when they are
/// one stream).
fn wait(stream: Handle, other: Handle) -> Result<()> {
    if stream != other {
        crate::event::stream_wait_stream(stream, other)?;
    }
    Ok(())
}

/// `device`'s current stream, made to wait for `source`.
fn stream_after(device: i32, source: Handle) -> Result<Handle> {
    let stream = crate::stream::current(device)?;
    wait(stream, source)?;
    Ok(stream)
}

/// Makes `source` (an input's stream) wait for the copies `stream` made out of the
/// input, so that what comes after on `source` (a write, a free) cannot overtake them.
fn join(source: Handle, stream: Handle) -> Result<()> {
    wait(source, stream)
}

/// Queues a copy of `bytes` from `src` to `dst` on `stream` (of `device`).
fn copy(dst: u64, src: u64, bytes: u64, device: i32, stream: Handle) -> Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    crate::device::with_device(device, || crate::copy::copy_async(dst, src, bytes, stream))
}

fn check_devices(devices: &[i32]) -> Result<()> {
    if devices.is_empty() {
        return Err(Error::invalid_argument("no devices: at least one is needed"));
    }
    devices.iter().try_for_each(|&d| crate::device::resolve(d).map(drop))
}

/// `bytes` at `src` (device memory of `src_device`) copied to each of `devices`.
pub fn broadcast(src: u64, src_device: i32, bytes: u64, devices: &[i32]) -> Result<Vec<u64>> {
    check_devices(devices)?;
    copy_out(src, src_device, devices.iter().map(|&d| (d, 0, bytes)))
}

/// Pieces of `src` (device memory of `src_device`), each `(device, offset, bytes)`,
/// copied to new buffers on their devices.
fn copy_out(src: u64, src_device: i32, pieces: impl Iterator<Item = (i32, u64, u64)>) -> Result<Vec<u64>> {
    let source = crate::stream::current(src_device)?;
    let mut outputs = Allocated::default();
    let mut result = Vec::new();
    for (device, offset, bytes) in pieces {
        let stream = stream_after(device, source)?;
        let out = outputs.on(device, bytes, stream)?;
        copy(out, src + offset, bytes, device, stream)?;
        join(source, stream)?;
        result.push(out);
    }
    outputs.keep();
    Ok(result)
}

/// The element counts of `count` elements cut into `n` chunks: `given` (which must
/// add up to `count`), else torch's `chunk`: ceil(count / n) each, the last ones
/// smaller or empty.
pub fn chunk_counts(count: u64, n: usize, given: Option<&[u64]>) -> Result<Vec<u64>> {
    match given {
        Some(given) => {
            if given.len() != n {
                return Err(Error::invalid_argument(format!("{} chunk sizes for {n} devices", given.len())));
            }
            let total = given.iter().try_fold(0u64, |sum, &c| sum.checked_add(c));
            if total != Some(count) {
                return Err(Error::invalid_argument(format!("the chunk sizes add up to {total:?} elements, not {count}")));
            }
            Ok(given.to_vec())
        }
        None => {
            let chunk = count.div_ceil(n as u64);
            Ok((0..n as u64).map(|i| count.saturating_sub(i * chunk).min(chunk)).collect())
        }
    }
}

/// Chunk `i` of the `count` elements of `element_size` bytes at `src` copied to
/// `devices[i]`; an empty chunk is address 0.
pub fn scatter(src: u64, src_device: i32, element_size: u64, count: u64, devices: &[i32], given: Option<&[u64]>) -> Result<Vec<u64>> {
    check_devices(devices)?;
    let counts = chunk_counts(count, devices.len(), given)?;
    let mut offset = 0;
    let pieces = devices.iter().zip(&counts).map(|(&device, &chunk)| {
        let bytes = chunk * element_size;
        offset += bytes;
        (device, offset - bytes, bytes)
    });
    copy_out(src, src_device, pieces)
}

/// `inputs[i]` (`bytes[i]` on `devices[i]`) one after the other in one new buffer on
/// `destination`.
pub fn gather(inputs: &[u64], devices: &[i32], bytes: &[u64], destination: i32) -> Result<u64> {
    check_devices(devices)?;
    let total = bytes.iter().try_fold(0u64, |sum, &b| sum.checked_add(b)).ok_or_else(|| Error::invalid_argument("the inputs' sizes overflow"))?;
    let stream = crate::stream::current(destination)?;
    let mut output = Allocated::default();
    let out = output.on(destination, total, stream)?;
    let mut offset = 0;
    for ((&input, &device), &size) in inputs.iter().zip(devices).zip(bytes) {
        let source = crate::stream::current(device)?;
        wait(stream, source)?;
        copy(out + offset, input, size, destination, stream)?;
        join(source, stream)?;
        offset += size;
    }
    output.keep();
    Ok(out)
}

/// Operands one sum kernel takes: its parameters stay far below the 4 KiB limit.
const SUM_OPERANDS: usize = 32;

/// `out` = the elementwise sum of `operands` (on `stream`'s device), left to right.
fn sum_into(out: u64, operands: &[u64], dtype: gpurt_dtype_t, count: u64, stream: Handle) -> Result<()> {
    const NAMES: [&str; SUM_OPERANDS] = [
        "a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10", "a11", "a12", "a13", "a14", "a15", "a16", "a17", "a18", "a19", "a20",
        "a21", "a22", "a23", "a24", "a25", "a26", "a27", "a28", "a29", "a30", "a31",
    ];
    let mut first = true;
    for group in operands.chunks(SUM_OPERANDS - 1) {
        // After the first kernel, the sum so far is an operand of the next (a0).
        let inputs: Vec<u64> = if first { group.to_vec() } else { std::iter::once(out).chain(group.iter().copied()).collect() };
        let names = &NAMES[..inputs.len()];
        let statement = format!("sum = {}", names.join(" + "));
        crate::kernel::elementwise::launch(&statement, names, dtype, count, &inputs, &[out], stream)?;
        first = false;
    }
    Ok(())
}

/// The sum of `inputs[i]` (`count` elements of `dtype` on `devices[i]`) in a new
/// buffer on `destination`, allocated through `outputs`.
fn reduce_into(inputs: &[u64], devices: &[i32], count: u64, dtype: gpurt_dtype_t, destination: i32, outputs: &mut Allocated) -> Result<u64> {
    check_devices(devices)?;
    let bytes = crate::boundary::checked_bytes(count, dtype.size(), "count")?;
    let stream = crate::stream::current(destination)?;
    let mut scratch = Allocated::default();
    let mut operands = Vec::with_capacity(inputs.len());
    let sources: Vec<Handle> = devices.iter().map(|&d| crate::stream::current(d)).collect::<Result<_>>()?;
    for ((&input, &device), &source) in inputs.iter().zip(devices).zip(&sources) {
        wait(stream, source)?;
        if crate::device::resolve(device)? == crate::device::resolve(destination)? {
            operands.push(input);
        } else {
            let local = scratch.on(destination, bytes, stream)?;
            copy(local, input, bytes, destination, stream)?;
            operands.push(local);
        }
    }
    let out = outputs.on(destination, bytes, stream)?;
    if count > 0 {
        crate::device::with_device(destination, || sum_into(out, &operands, dtype, count, stream))?;
    }
    sources.iter().try_for_each(|&source| join(source, stream))?;
    Ok(out)
}

/// The elementwise sum of `inputs[i]` (`count` elements of `dtype` on `devices[i]`)
/// in a new buffer on `destination`.
pub fn reduce_add(inputs: &[u64], devices: &[i32], count: u64, dtype: gpurt_dtype_t, destination: i32) -> Result<u64> {
    let mut outputs = Allocated::default();
    let out = reduce_into(inputs, devices, count, dtype, destination, &mut outputs)?;
    outputs.keep();
    Ok(out)
}

/// Consecutive runs of buffers (by index) of at most `limit` bytes together; a buffer
/// larger than `limit` is a run of its own (torch's `_take_tensors`).
pub fn buckets(sizes: &[u64], limit: u64) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && bytes.saturating_add(size) > limit {
            runs.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(size);
    }
    if start < sizes.len() {
        runs.push(start..sizes.len());
    }
    runs
}

/// `broadcast` of several buffers (`srcs[j]`, `bytes[j]`, all on `src_device`),
/// packed into buckets of up to `bucket_bytes`: one copy per bucket and device
/// instead of one per buffer. Output `i * srcs.len() + j` is buffer j on `devices[i]`.
pub fn broadcast_coalesced(srcs: &[u64], bytes: &[u64], src_device: i32, devices: &[i32], bucket_bytes: u64) -> Result<Vec<u64>> {
    check_devices(devices)?;
    let source = crate::stream::current(src_device)?;
    let mut outputs = Allocated::default();
    let mut result = vec![0u64; devices.len() * srcs.len()];
    for run in buckets(bytes, bucket_bytes) {
        let (offsets, total) = packed_offsets(&bytes[run.clone()]);
        let mut scratch = Allocated::default();
        let flat = scratch.on(src_device, total, source)?;
        pack(flat, &run, &offsets, bytes, |j| srcs[j], src_device, source)?;
        for (i, &device) in devices.iter().enumerate() {
            let stream = stream_after(device, source)?;
            let local = scratch.on(device, total, stream)?;
            copy(local, flat, total, device, stream)?;
            join(source, stream)?;
            let unpacked = unpack(local, &run, &offsets, bytes, device, stream, &mut outputs)?;
            result[i * srcs.len() + run.start..i * srcs.len() + run.end].copy_from_slice(&unpacked);
        }
    }
    outputs.keep();
    Ok(result)
}

/// `reduce_add` of several buffers: `inputs[i * counts.len() + j]` is buffer j on
/// `devices[i]` (`counts[j]` elements of `dtype`); output j, on `destination`, sums
/// buffer j over the devices. Packed into buckets of up to `bucket_bytes`: one copy
/// and one sum per bucket and device instead of one per buffer.
pub fn reduce_add_coalesced(inputs: &[u64], devices: &[i32], counts: &[u64], dtype: gpurt_dtype_t, destination: i32, bucket_bytes: u64) -> Result<Vec<u64>> {
    check_devices(devices)?;
    let m = counts.len();
    let bytes: Vec<u64> = counts.iter().map(|&c| crate::boundary::checked_bytes(c, dtype.size(), "counts")).collect::<Result<_>>()?;
    let stream = crate::stream::current(destination)?;
    let mut outputs = Allocated::default();
    let mut result = vec![0u64; m];
    for run in buckets(&bytes, bucket_bytes) {
        let (offsets, total) = packed_offsets(&bytes[run.clone()]);
        let mut scratch = Allocated::default();
        let mut flats = Vec::with_capacity(devices.len());
        for (i, &device) in devices.iter().enumerate() {
            let own = crate::stream::current(device)?;
            let flat = scratch.on(device, total, own)?;
            pack(flat, &run, &offsets, &bytes, |j| inputs[i * m + j], device, own)?;
            flats.push(flat);
        }
        let sum = reduce_into(&flats, devices, total / dtype.size(), dtype, destination, &mut scratch)?;
        let unpacked = unpack(sum, &run, &offsets, &bytes, destination, stream, &mut outputs)?;
        result[run].copy_from_slice(&unpacked);
    }
    outputs.keep();
    Ok(result)
}

/// Copies buffer j of the bucket `run` (`src_of(j)`, `bytes[j]` bytes) to `flat` at
/// its offset, on `stream` (of `device`).
fn pack(flat: u64, run: &std::ops::Range<usize>, offsets: &[u64], bytes: &[u64], src_of: impl Fn(usize) -> u64, device: i32, stream: Handle) -> Result<()> {
    let copies: Vec<CopyOp> = run.clone().zip(offsets).map(|(j, &off)| CopyOp { dst: flat + off, src: src_of(j), bytes: bytes[j] }).collect();
    batched_copy(&copies, device, stream)
}

/// New buffers on `device` (through `outputs`) for the bucket `run`, copied out of
/// `flat` at their offsets on `stream`; in the run's order.
fn unpack(flat: u64, run: &std::ops::Range<usize>, offsets: &[u64], bytes: &[u64], device: i32, stream: Handle, outputs: &mut Allocated) -> Result<Vec<u64>> {
    let mut copies = Vec::with_capacity(run.len());
    for (j, &off) in run.clone().zip(offsets) {
        copies.push(CopyOp { dst: outputs.on(device, bytes[j], stream)?, src: flat + off, bytes: bytes[j] });
    }
    batched_copy(&copies, device, stream)?;
    Ok(copies.iter().map(|c| c.dst).collect())
}

/// Offsets of buffers packed one after the other (dtype-aligned, so that a sum over
/// the flat buffer reads only packed bytes), and the total.
fn packed_offsets(bytes: &[u64]) -> (Vec<u64>, u64) {
    let mut total = 0u64;
    let offsets = bytes
        .iter()
        .map(|&b| {
            let offset = total;
            total = total.saturating_add(b);
            offset
        })
        .collect();
    (offsets, total)
}

/// One copy of a batched-copy kernel's table.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CopyOp {
    dst: u64,
    src: u64,
    bytes: u64,
}

/// Copies one kernel launch does: its table (a by-value parameter of 24 bytes a
/// copy) stays below the 4 KiB parameter limit.
const BATCH: usize = 64;

const BATCHED_COPY_NAME: &str = "gpurt_batched_copy";
const BATCHED_COPY: &str = r#"
struct gpurt_copy { unsigned long long dst, src, bytes; };
struct gpurt_copies { gpurt_copy c[64]; };
extern "C" __global__ void gpurt_batched_copy(gpurt_copies table, unsigned int n) {
    if (blockIdx.y >= n) return;
    const gpurt_copy c = table.c[blockIdx.y];
    const unsigned long long start = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long done = 0;
    if (((c.dst | c.src) & 15) == 0) {
        const unsigned long long words = c.bytes / 16;
        uint4 *d = (uint4 *)c.dst;
        const uint4 *s = (const uint4 *)c.src;
        for (unsigned long long i = start; i < words; i += stride) d[i] = s[i];
        done = words * 16;
    }
    unsigned char *d = (unsigned char *)c.dst;
    const unsigned char *s = (const unsigned char *)c.src;
    for (unsigned long long i = done + start; i < c.bytes; i += stride) d[i] = s[i];
}
"#;

/// Queues `copies` on `stream` (of `device`) as batched-copy kernels: one launch per
/// `BATCH` copies instead of one driver call each.
fn batched_copy(copies: &[CopyOp], device: i32, stream: Handle) -> Result<()> {
    crate::device::with_device(device, || {
        let kernel = crate::kernel::rtc::get_kernel_by_recipe(device, BATCHED_COPY_NAME, BATCHED_COPY_NAME, || Ok(BATCHED_COPY.to_string()))?;
        for batch in copies.chunks(BATCH).filter(|b| b.iter().any(|c| c.bytes > 0)) {
            let mut table = [CopyOp::default(); BATCH];
            table[..batch.len()].copy_from_slice(batch);
            let mut n = batch.len() as u32;
            let largest = batch.iter().map(|c| c.bytes).max().unwrap_or(0);
            let blocks = largest.div_ceil(16 * 256).clamp(1, 1024) as u32;
            let shape = crate::kernel::LaunchShape::plain([blocks, n, 1], [256, 1, 1]);
            let mut args: [*mut libc::c_void; 2] = [(&mut table as *mut [CopyOp; BATCH]).cast(), (&mut n as *mut u32).cast()];
            // SAFETY: the kernel's two parameters: a table of BATCH copies (three u64
            // each, as `gpurt_copies`) and their number, both alive until the launch returns.
            unsafe { crate::kernel::launch(kernel, &shape, stream, args.as_mut_ptr()) }?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_torch_chunk_or_the_given_sizes() {
        assert_eq!(chunk_counts(10, 3, None).unwrap(), vec![4, 4, 2]);
        assert_eq!(chunk_counts(1, 3, None).unwrap(), vec![1, 0, 0]);
        assert_eq!(chunk_counts(0, 2, None).unwrap(), vec![0, 0]);
        assert_eq!(chunk_counts(9, 3, None).unwrap(), vec![3, 3, 3]);
        assert_eq!(chunk_counts(5, 2, Some(&[1, 4])).unwrap(), vec![1, 4]);
        assert!(chunk_counts(5, 2, Some(&[1, 3])).unwrap_err().message.contains("add up"));
        assert!(chunk_counts(5, 2, Some(&[5])).is_err());
        assert!(chunk_counts(u64::MAX, 2, Some(&[u64::MAX, 1])).is_err(), "an overflowing sum is refused");
    }

    #[test]
    fn buckets_are_runs_up_to_the_limit_and_large_buffers_alone() {
        assert_eq!(buckets(&[4, 4, 4, 4], 8), vec![0..2, 2..4]);
        assert_eq!(buckets(&[4, 20, 4], 8), vec![0..1, 1..2, 2..3]);
        assert_eq!(buckets(&[1; 5], 100), vec![0..5]);
        assert!(buckets(&[], 8).is_empty());
        assert_eq!(buckets(&[u64::MAX, 1], 8), vec![0..1, 1..2]);
    }

    #[test]
    fn packing_is_dense() {
        assert_eq!(packed_offsets(&[4, 12, 0, 8]), (vec![0, 4, 16, 16], 24));
    }
}
