//! gpurt's copy kernel for batches whose every copy the stream's device can reach
//! (its own memory, pinned host memory): one launch moves up to `PER_LAUNCH` copies,
//! their descriptors in the launch's parameters (no upload, no allocation), so small
//! copies cost a few bytes of a launch instead of a DMA request each. Measured against
//! the driver's batch call in docs/performance.md ("Batched copies").

use std::sync::Mutex;

use cudarc::driver::sys;

use crate::device;
use crate::driver::{check, load_embedded};
use crate::error::Result;

/// One copy of a batch: destination, source, bytes.
pub(super) type Copy3 = (u64, u64, u64);

/// Copies one launch carries: 1 360 descriptors of 24 bytes fill 32 640 of the 32 764
/// bytes of parameters a kernel may take (CUDA 12.1 drivers, compute capability 7.0).
const PER_LAUNCH: usize = 1360;
const _: () = assert!(PER_LAUNCH * 24 + 4 <= 32764, "the descriptors and the count fit the parameter limit");
/// Threads of a block, which takes one copy at a time.
const BLOCK: u32 = 256;
/// Blocks per SM: enough 16-byte moves in flight to fill the host link (4 beat 16 on
/// an H200 at 16 KiB a copy).
const BLOCKS_PER_SM: u32 = 4;
/// The largest mean copy the kernel takes: from 256 KiB a copy the DMA engines match it
/// (H200, both directions) without taking SMs from the stream's other work.
const MAX_MEAN_BYTES: u64 = 128 << 10;

/// `gpurt_copy_batch(copies[PER_LAUNCH], count)`: block b takes copies b, b + grid, ...;
/// 16-byte moves where a copy's addresses and size allow, else bytes. NVVM's output for
///
/// ```cuda
/// struct Copy { unsigned long long dst, src, bytes; };
/// struct Copies { Copy c[1360]; };
/// extern "C" __global__ void gpurt_copy_batch(const __grid_constant__ Copies copies, unsigned count) {
///     for (unsigned i = blockIdx.x; i < count; i += gridDim.x) {
///         const Copy c = copies.c[i];
///         if (((c.dst | c.src | c.bytes) & 15) == 0)
///             for (unsigned long long j = threadIdx.x; j < c.bytes / 16; j += blockDim.x) ((uint4 *)c.dst)[j] = ((const uint4 *)c.src)[j];
///         else
///             for (unsigned long long j = threadIdx.x; j < c.bytes; j += blockDim.x) ((char *)c.dst)[j] = ((const char *)c.src)[j];
///     }
/// }
/// ```
///
/// (`nvcc -ptx -arch=compute_75 -O3`), declared PTX 8.1 for sm_70: parameters past
/// 4 KiB need PTX 8.1 and a CUDA 12.1 driver; the instructions are older.
const KERNEL_PTX: &str = "\
.version 8.1
.target sm_70
.address_size 64
.visible .entry gpurt_copy_batch(.param .align 8 .b8 copies[32640], .param .u32 count)
{
    .reg .pred %p<8>;
    .reg .b16 %rs<2>;
    .reg .b32 %r<17>;
    .reg .b64 %rd<29>;
    mov.b64 %rd16, copies;
    ld.param.u32 %r5, [count];
    mov.u32 %r16, %ctaid.x;
    setp.ge.u32 %p1, %r16, %r5;
    @%p1 bra DONE;
    mov.u32 %r6, %tid.x;
    cvt.u64.u32 %rd1, %r6;
    mov.u32 %r2, %nctaid.x;
    mov.u32 %r7, %ntid.x;
    cvt.u64.u32 %rd2, %r7;
NEXT_COPY:
    mul.wide.u32 %rd17, %r16, 24;
    add.s64 %rd18, %rd16, %rd17;
    ld.param.u64 %rd4, [%rd18+8];
    ld.param.u64 %rd5, [%rd18];
    or.b64 %rd19, %rd4, %rd5;
    ld.param.u64 %rd6, [%rd18+16];
    or.b64 %rd20, %rd19, %rd6;
    and.b64 %rd21, %rd20, 15;
    setp.eq.s64 %p2, %rd21, 0;
    @%p2 bra WIDE;
    setp.le.u64 %p3, %rd6, %rd1;
    @%p3 bra COPY_DONE;
    cvta.to.global.u64 %rd7, %rd4;
    cvta.to.global.u64 %rd8, %rd5;
    mov.u64 %rd27, %rd1;
BYTES:
    add.s64 %rd22, %rd7, %rd27;
    ld.global.u8 %rs1, [%rd22];
    add.s64 %rd23, %rd8, %rd27;
    st.global.u8 [%rd23], %rs1;
    add.s64 %rd27, %rd27, %rd2;
    setp.lt.u64 %p4, %rd27, %rd6;
    @%p4 bra BYTES;
    bra.uni COPY_DONE;
WIDE:
    shr.u64 %rd11, %rd6, 4;
    setp.le.u64 %p5, %rd11, %rd1;
    @%p5 bra COPY_DONE;
    cvta.to.global.u64 %rd12, %rd4;
    cvta.to.global.u64 %rd13, %rd5;
    mov.u64 %rd28, %rd1;
VECTORS:
    shl.b64 %rd24, %rd28, 4;
    add.s64 %rd25, %rd12, %rd24;
    add.s64 %rd26, %rd13, %rd24;
    ld.global.v4.u32 {%r8, %r9, %r10, %r11}, [%rd25];
    st.global.v4.u32 [%rd26], {%r8, %r9, %r10, %r11};
    add.s64 %rd28, %rd28, %rd2;
    setp.lt.u64 %p6, %rd28, %rd11;
    @%p6 bra VECTORS;
COPY_DONE:
    add.s32 %r16, %r16, %r2;
    setp.lt.u32 %p7, %r16, %r5;
    @%p7 bra NEXT_COPY;
DONE:
    ret;
}
\0";

/// The kernel on device `d` and the grid that fills it; None where the driver cannot
/// load it (parameters past 4 KiB need a CUDA 12.1 driver): the driver's batch call then.
/// Another failure (memory, say) is not kept: the next batch tries again.
fn kernel(d: i32) -> Result<Option<(sys::CUfunction, u32)>> {
    static KERNELS: device::PerDeviceOnce<Option<(usize, u32)>> = std::sync::OnceLock::new();
    static LOADING: Mutex<()> = Mutex::new(());
    use sys::CUresult as R;
    let unloadable = [R::CUDA_ERROR_UNSUPPORTED_PTX_VERSION, R::CUDA_ERROR_INVALID_PTX, R::CUDA_ERROR_NO_BINARY_FOR_GPU, R::CUDA_ERROR_JIT_COMPILER_NOT_FOUND];
    let loaded = device::per_device_try_init(&KERNELS, &LOADING, d, || {
        device::with_device(d, || {
            let function = match load_embedded(KERNEL_PTX, c"gpurt_copy_batch") {
                Ok(function) => function,
                Err(e) if unloadable.iter().any(|&code| e.cuda_code == Some(code as i32)) => return Ok(None),
                Err(e) => return Err(e),
            };
            let sms = device::attribute(d, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            Ok(Some((function as usize, sms.max(1) as u32 * BLOCKS_PER_SM)))
        })
    })?;
    Ok(loaded.map(|(f, grid)| (f as sys::CUfunction, grid)))
}

/// Whether device `d`'s kernels reach `bytes` at `address`: `d`'s own device memory
/// (not managed), or host memory pinned and mapped at the same address. `known` keeps
/// the allocations asked about already, as (start, end, reachable), sorted by start.
fn reachable(address: u64, bytes: u64, d: i32, known: &mut Vec<(u64, u64, bool)>) -> bool {
    let end = address + bytes;
    let at = known.partition_point(|&(start, _, _)| start <= address);
    if let Some(&(_, stop, ok)) = at.checked_sub(1).map(|i| &known[i]) {
        if address < stop {
            // A copy past its allocation's end (into the next mapping) goes on from there.
            return ok && (end <= stop || reachable(stop, end - stop, d, known));
        }
    }
    use sys::CUpointer_attribute as A;
    let mut attributes = [
        A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        A::CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
        A::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        A::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    ];
    let (mut memory_type, mut ordinal, mut managed, mut device_pointer, mut start, mut size) = (0u32, -1i32, 0u32, 0u64, 0u64, 0usize);
    let mut data: [*mut libc::c_void; 6] = [
        (&mut memory_type as *mut u32).cast(),
        (&mut ordinal as *mut i32).cast(),
        (&mut managed as *mut u32).cast(),
        (&mut device_pointer as *mut u64).cast(),
        (&mut start as *mut u64).cast(),
        (&mut size as *mut usize).cast(),
    ];
    // SAFETY: each data pointer holds its attribute's type; memory the driver does not
    // know (pageable) gets zeros rather than an error.
    let code = unsafe { sys::cuPointerGetAttributes(attributes.len() as u32, attributes.as_mut_ptr(), data.as_mut_ptr(), address) };
    let ok = code == sys::CUresult::CUDA_SUCCESS
        && managed == 0
        && match memory_type {
            t if t == sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 => ordinal == d,
            t if t == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32 => device_pointer == address,
            _ => false,
        };
    let stop = start.saturating_add(size as u64);
    if size == 0 || address < start || stop <= address {
        // No range from the driver: each end of the copy asked apart, nothing kept.
        return ok && (bytes <= 1 || reachable(end - 1, 1, d, known));
    }
    known.insert(known.partition_point(|&(s, _, _)| s < start), (start, stop, ok));
    ok && (end <= stop || reachable(stop, end - stop, d, known))
}

/// Queues `copies` as gpurt's kernel on `stream` (device `d`, its context current) when
/// they are small and the kernel can reach every byte; false (nothing queued) when not.
pub(super) fn try_launch(copies: &[Copy3], d: i32, stream: sys::CUstream) -> Result<bool> {
    // Saturating: a caller's sizes may sum past u64 (each one is only bounded by the address space).
    let total = copies.iter().fold(0u64, |sum, c| sum.saturating_add(c.2));
    if total > MAX_MEAN_BYTES * copies.len() as u64 {
        return Ok(false);
    }
    let mut known = Vec::new();
    if !copies.iter().all(|&(dst, src, bytes)| reachable(dst, bytes, d, &mut known) && reachable(src, bytes, d, &mut known)) {
        return Ok(false);
    }
    // A kernel that cannot load now leaves the batch to the driver's call.
    let Ok(Some((function, grid))) = kernel(d) else { return Ok(false) };
    let mut descriptors = vec![0u64; 3 * PER_LAUNCH];
    for chunk in copies.chunks(PER_LAUNCH) {
        for (slot, &(dst, src, bytes)) in descriptors.chunks_exact_mut(3).zip(chunk) {
            slot.copy_from_slice(&[dst, src, bytes]);
        }
        let mut count = chunk.len() as u32;
        let mut params = [descriptors.as_mut_ptr().cast::<libc::c_void>(), (&mut count as *mut u32).cast()];
        // SAFETY: the parameters match the kernel's: 32 640 bytes of descriptors, a u32.
        let code = unsafe { sys::cuLaunchKernel(function, grid.min(count), 1, 1, BLOCK, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()) };
        check(code, "cuLaunchKernel (gpurt's batch copy)")?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_is_nul_terminated_ptx_with_its_parameters() {
        assert!(KERNEL_PTX.ends_with('\0') && KERNEL_PTX.contains(".entry gpurt_copy_batch"));
        assert!(KERNEL_PTX.contains(&format!(".b8 copies[{}]", PER_LAUNCH * 24)));
    }
}
