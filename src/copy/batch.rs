//! Many copies in one call (`gpurt_memcpy_batch_async`; vLLM's swap of KV-cache blocks
//! between device and pinned host memory): gpurt's copy kernel when the stream's device
//! reaches every byte (`batch_kernel`), else the driver's `cuMemcpyBatchAsync` where it
//! has one (CUDA 12.8 and later drivers), else one `cuMemcpyAsync` a copy. The legacy
//! stream, which the batch call refuses, takes the loop too. Every copy is checked
//! before any is queued, so that a refused batch queues nothing.

use cudarc::driver::sys;

use super::batch_kernel::{self, Copy3};
use super::{declare, note_uses, require_pointers, require_ranges};
use crate::driver::{check, has_symbol};
use crate::error::{Error, Result};
use crate::handle::Handle;

/// The most copies one gpurt_memcpy_batch_async takes (a bound on its checks and the driver's arrays).
pub const GPURT_MEMCPY_BATCH_MAX: usize = 1 << 20;

/// Queues every copy of `copies` on `stream`, in order as the stream sees them.
pub fn copy_batch_async(copies: &[Copy3], stream: Handle) -> Result<()> {
    let s = crate::stream::get(stream)?;
    if copies.len() > GPURT_MEMCPY_BATCH_MAX {
        return Err(Error::invalid_argument(format!("{} copies in one batch: at most {GPURT_MEMCPY_BATCH_MAX}", copies.len())));
    }
    let queued: Vec<Copy3> = copies.iter().copied().filter(|c| c.2 != 0).collect();
    for (i, &(dst, src, bytes)) in copies.iter().enumerate().filter(|(_, c)| c.2 != 0) {
        require_pointers(dst, src).and_then(|()| require_ranges(dst, bytes, src, bytes)).map_err(|e| e.context(&format!("copy {i}")))?;
    }
    refuse_overlaps(copies)?;
    if queued.is_empty() {
        return Ok(());
    }
    let batched = s.cu() as u64 != crate::stream::NATIVE_LEGACY && has_symbol("cuMemcpyBatchAsync");
    s.run_in_context(|cu| {
        if batch_kernel::try_launch(&queued, s.device(), cu)? {
            Ok(())
        } else if batched {
            batch(&queued, cu)
        } else {
            one_by_one(&queued, cu)
        }
    })?;
    for &(dst, src, bytes) in &queued {
        note_uses(s, &[dst, src]);
        declare(s, (dst, bytes), Some((src, bytes)), "gpurt_memcpy_batch_async");
    }
    Ok(())
}

/// Refuses copies whose destinations overlap each other or their own source: the
/// bytes left there would depend on an order the batch does not promise.
fn refuse_overlaps(copies: &[Copy3]) -> Result<()> {
    let mut by_dst: Vec<(u64, u64, usize)> = copies.iter().enumerate().filter(|(_, c)| c.2 != 0).map(|(i, c)| (c.0, c.2, i)).collect();
    by_dst.sort_unstable();
    for pair in by_dst.windows(2) {
        let ((a, a_bytes, i), (b, _, j)) = (pair[0], pair[1]);
        if b < a + a_bytes {
            return Err(Error::invalid_argument(format!("copies {i} and {j} write overlapping bytes ({a:#x} + {a_bytes} and {b:#x})")));
        }
    }
    for (i, &(dst, src, bytes)) in copies.iter().enumerate().filter(|(_, c)| c.2 != 0) {
        if dst < src + bytes && src < dst + bytes {
            return Err(Error::invalid_argument(format!("copy {i} overlaps its own source ({src:#x} to {dst:#x}, {bytes} bytes)")));
        }
    }
    Ok(())
}

/// The driver's batch call: one set of attributes for all, the sources read in stream
/// order (what a loop of copies on the stream would do).
fn batch(copies: &[Copy3], stream: sys::CUstream) -> Result<()> {
    let mut dsts: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.0).collect();
    let mut srcs: Vec<sys::CUdeviceptr> = copies.iter().map(|c| c.1).collect();
    let mut sizes: Vec<usize> = copies.iter().map(|c| c.2 as usize).collect();
    // SAFETY: a plain C struct, all zeros a valid value (no location hints, no flags).
    let mut attrs: sys::CUmemcpyAttributes = unsafe { std::mem::zeroed() };
    attrs.srcAccessOrder = sys::CUmemcpySrcAccessOrder::CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
    let (mut first_attr, mut failed) = (0usize, usize::MAX);
    // SAFETY: the arrays hold `copies.len()` entries and outlive the call.
    let code = unsafe {
        sys::cuMemcpyBatchAsync(dsts.as_mut_ptr(), srcs.as_mut_ptr(), sizes.as_mut_ptr(), copies.len(), &mut attrs, &mut first_attr, 1, &mut failed, stream)
    };
    check(code, "cuMemcpyBatchAsync").map_err(|e| match failed {
        usize::MAX => e,
        i => e.context(&format!("copy {i} of the batch's non-empty copies")),
    })
}

fn one_by_one(copies: &[Copy3], stream: sys::CUstream) -> Result<()> {
    for (i, &(dst, src, bytes)) in copies.iter().enumerate() {
        check(unsafe { sys::cuMemcpyAsync(dst, src, bytes as usize, stream) }, "cuMemcpyAsync").map_err(|e| e.context(&format!("copy {i} of the batch")))?;
    }
    Ok(())
}
