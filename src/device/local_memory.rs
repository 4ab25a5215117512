//! The context's local-memory reservation: the driver reserves the stack size limit
//! (`CU_LIMIT_STACK_SIZE`) for every thread the device can hold resident, grows the
//! limit for any launch whose frame needs more, and never shrinks it by itself: a frame
//! 256 bytes past the default 1 KiB keeps 66 MiB of an H200 (132 SMs of 2 048 threads)
//! reserved for the process's life. A device sleep gives that back (`shrink`) and its
//! wake restores the limit the process had (`restore`): a kernel whose recursion
//! relies on a limit set by hand finds it again.

use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{self, CUdevice_attribute as A};

use super::{attribute, per_device, with_device, PerDeviceOnce};
use crate::driver::check;
use crate::error::Result;

/// Each device's stack size when gpurt first saw its primary context, before any
/// launch of the process could grow it.
static BASELINE: PerDeviceOnce<usize> = OnceLock::new();
static MAKING: Mutex<()> = Mutex::new(());

/// The stack size limit of `d`'s primary context (a resolved ordinal).
pub fn stack_size(d: i32) -> Result<usize> {
    with_device(d, || {
        let mut size = 0usize;
        // SAFETY: a context of the device is current; `size` is writable.
        check(unsafe { sys::cuCtxGetLimit(&mut size, sys::CUlimit::CU_LIMIT_STACK_SIZE) }, "cuCtxGetLimit")?;
        Ok(size)
    })
}

fn set_stack_size(d: i32, size: usize) -> Result<()> {
    // SAFETY: a context of the device is current. The driver waits for the device's
    // work before it resizes the reservation.
    with_device(d, || check(unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_STACK_SIZE, size) }, "cuCtxSetLimit"))
}

/// Records `d`'s stack size the first time; called when gpurt first retains the
/// device's primary context.
pub(super) fn record_baseline(d: i32) {
    let _ = super::per_device_try_init(&BASELINE, &MAKING, d, || stack_size(d));
}

/// The bytes the driver reserves at `d`'s current stack size.
pub fn reserved(d: i32) -> Result<u64> {
    let threads = attribute(d, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u64
        * attribute(d, A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)? as u64;
    Ok(stack_size(d)? as u64 * threads)
}

/// Sets `d`'s stack size back to its baseline where launches grew it: the stack size
/// before, for `restore`; None where there was nothing to give back.
pub fn shrink(d: i32) -> Result<Option<usize>> {
    let Some(&baseline) = BASELINE.get_or_init(|| per_device(OnceLock::new)).get(d as usize).and_then(OnceLock::get) else {
        return Ok(None);
    };
    let now = stack_size(d)?;
    if now <= baseline {
        return Ok(None);
    }
    set_stack_size(d, baseline)?;
    Ok(Some(now))
}

/// Sets `d`'s stack size to `size` again (what `shrink` returned), unless a launch
/// has grown it past that since.
pub fn restore(d: i32, size: usize) -> Result<()> {
    if stack_size(d)? < size {
        set_stack_size(d, size)?;
    }
    Ok(())
}
