//! Green contexts: a share of a device's SMs with streams of its own, so that work on
//! those streams runs only there (`torch.cuda.green_contexts.GreenContext`; CUDA 12.4+
//! `cuGreenCtxCreate`). A prefill on one green context cannot take the SMs that decode
//! on another needs. Memory is the device's: the allocator, events, graphs and the
//! math-library handles take a green context's streams as any other.

pub mod ffi;

use std::mem::MaybeUninit;
use std::sync::Mutex;

use cudarc::driver::sys::{self, CUdevResource, CUdevResourceType};

use crate::boundary::lock;
use crate::device;
use crate::driver::{check, require_symbol};
use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Kind, Packed};
use crate::stream;

/// A green context as its handle slot stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GreenContext {
    /// The driver's `CUgreenCtx`.
    raw: usize,
    device: i32,
    sm_count: u32,
}

impl Packed for GreenContext {
    fn pack(self) -> [u64; 2] {
        [self.raw as u64, (self.device as u32 as u64) | ((self.sm_count as u64) << 32)]
    }
    fn unpack(w: [u64; 2]) -> Self {
        GreenContext { raw: w[0] as usize, device: w[1] as u32 as i32, sm_count: (w[1] >> 32) as u32 }
    }
}

static CONTEXTS: HandleTable<GreenContext> = HandleTable::new(Kind::GreenContext);
/// Held while a green context gains a stream or is destroyed, so that a destroy
/// never races a stream being made in it.
static CHANGING: Mutex<()> = Mutex::new(());

/// The device's SMs as one resource, and how many there are.
fn device_sms(d: i32) -> Result<(CUdevResource, u32)> {
    let mut whole = MaybeUninit::<CUdevResource>::zeroed();
    let code = unsafe { sys::cuDeviceGetDevResource(d, whole.as_mut_ptr(), CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM) };
    check(code, "cuDeviceGetDevResource")?;
    // SAFETY: zeroed, then written by the driver; the SM variant is the one asked for.
    let whole = unsafe { whole.assume_init() };
    let count = unsafe { whole.__bindgen_anon_1.sm.smCount };
    Ok((whole, count))
}

/// Splits one group of at least `wanted` SMs off `from`: (the group, its SM count, what
/// is left), or None where the rounded group does not fit. The driver rounds a group up
/// to its granularity (8 SMs on Hopper).
fn split_off(from: &CUdevResource, wanted: u32) -> Option<(CUdevResource, u32, CUdevResource)> {
    let mut group = MaybeUninit::<CUdevResource>::zeroed();
    let mut rest = MaybeUninit::<CUdevResource>::zeroed();
    let mut groups = 1u32;
    let code = unsafe { sys::cuDevSmResourceSplitByCount(group.as_mut_ptr(), &mut groups, from, rest.as_mut_ptr(), 0, wanted) };
    if code != sys::CUresult::CUDA_SUCCESS || groups == 0 {
        return None;
    }
    // SAFETY: the driver wrote one group and the remainder.
    let (group, rest) = unsafe { (group.assume_init(), rest.assume_init()) };
    let count = sm_count_of(&group);
    (count >= wanted).then_some((group, count, rest))
}

fn sm_count_of(resource: &CUdevResource) -> u32 {
    // SAFETY: every resource gpurt holds is of the SM type.
    unsafe { resource.__bindgen_anon_1.sm.smCount }
}

/// Disjoint groups of the device's SMs, one per count, each at least its count (see
/// `split_off`); a last count of 0 takes every SM left. With `whole_if_alone`, one
/// count whose rounded group does not fit gets the whole device.
fn carve(d: i32, counts: &[u32], whole_if_alone: bool) -> Result<Vec<(CUdevResource, u32)>> {
    let (whole, total) = device_sms(d)?;
    let asked: u64 = counts.iter().map(|&c| c as u64).sum();
    let zero_before_last = counts.len() > 1 && counts[..counts.len() - 1].contains(&0);
    if counts.is_empty() || zero_before_last || asked > total as u64 || counts == [0] {
        return Err(Error::invalid_argument(format!(
            "SM counts {counts:?}: device {d} has {total} SMs (each count at least 1; of several, the last may be 0 for the rest)"
        )));
    }
    let mut left = whole;
    let mut groups = Vec::with_capacity(counts.len());
    for (i, &wanted) in counts.iter().enumerate() {
        if wanted == 0 {
            let count = sm_count_of(&left);
            if count == 0 {
                return Err(Error::invalid_argument(format!("SM counts {counts:?}: no SM is left for the last group")));
            }
            groups.push((left, count));
            break;
        }
        // The driver splits only resources it hands out (a device's, a green context's),
        // not what a split left: that becomes a temporary green context's first.
        if i > 0 {
            left = splittable(d, left)?;
        }
        match split_off(&left, wanted) {
            Some((group, count, rest)) => {
                groups.push((group, count));
                left = rest;
            }
            None if whole_if_alone && counts.len() == 1 => groups.push((whole, total)),
            None => {
                let taken: u32 = groups.iter().map(|g| g.1).sum();
                return Err(Error::invalid_argument(format!(
                    "SM counts {counts:?}: group {i} ({wanted} SMs, rounded up to the device's granularity) does not fit in \
                     the {} SMs left of device {d}'s {total}",
                    total - taken
                )));
            }
        }
    }
    Ok(groups)
}

/// The driver's green context of device `d` on `group`.
fn green_context_on(d: i32, mut group: CUdevResource) -> Result<sys::CUgreenCtx> {
    let mut desc = std::ptr::null_mut();
    check(unsafe { sys::cuDevResourceGenerateDesc(&mut desc, &mut group, 1) }, "cuDevResourceGenerateDesc")?;
    let mut raw = std::ptr::null_mut();
    let flags = sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32;
    check(unsafe { sys::cuGreenCtxCreate(&mut raw, desc, d, flags) }, "cuGreenCtxCreate")?;
    Ok(raw)
}

/// What a split left, as a resource the driver splits again: a temporary green
/// context's SMs (the driver refuses to split a split's output).
fn splittable(d: i32, left: CUdevResource) -> Result<CUdevResource> {
    let temporary = green_context_on(d, left)?;
    let mut resource = MaybeUninit::<CUdevResource>::zeroed();
    let sm = CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM;
    let got = check(unsafe { sys::cuGreenCtxGetDevResource(temporary, resource.as_mut_ptr(), sm) }, "cuGreenCtxGetDevResource");
    unsafe { sys::cuGreenCtxDestroy(temporary) };
    got?;
    // SAFETY: written by the driver.
    Ok(unsafe { resource.assume_init() })
}

/// A green context of device `d` on one group of SMs.
fn make(d: i32, (group, count): (CUdevResource, u32)) -> Result<Handle> {
    let raw = green_context_on(d, group)?;
    CONTEXTS.insert(GreenContext { raw: raw as usize, device: d, sm_count: count }).inspect_err(|_| unsafe {
        sys::cuGreenCtxDestroy(raw);
    })
}

/// Green contexts of device `ordinal` on the groups `carve` makes; none on failure.
fn create_groups(ordinal: i32, counts: &[u32], whole_if_alone: bool) -> Result<Vec<Handle>> {
    let d = device::resolve(ordinal)?;
    require_symbol("cuGreenCtxCreate", "green contexts", "12.4")?;
    // The driver retains the primary context for a green context: made current first,
    // it is not initialised and torn down around each one.
    device::with_device(d, || {
        let mut made = Vec::with_capacity(counts.len());
        for group in carve(d, counts, whole_if_alone)? {
            match make(d, group) {
                Ok(handle) => made.push(handle),
                Err(e) => {
                    made.into_iter().for_each(|h| drop(destroy(h)));
                    return Err(e);
                }
            }
        }
        Ok(made)
    })
}

/// A green context of device `ordinal` with at least `sm_count` SMs, carved from the
/// whole device (two such contexts may share SMs, as two `torch.cuda` green contexts
/// do; `split` makes disjoint ones); a count whose rounded group does not fit gets the
/// whole device.
pub fn create(ordinal: i32, sm_count: u32) -> Result<Handle> {
    if sm_count == 0 {
        return Err(Error::invalid_argument("sm_count 0: a green context needs at least 1 SM"));
    }
    Ok(create_groups(ordinal, &[sm_count], true)?[0])
}

/// Green contexts on disjoint SMs of device `ordinal`, one per count (each at least its
/// count, rounded up; a last count of 0 takes every SM left): prefill and decode on SMs
/// of their own. All or none are made.
pub fn split(ordinal: i32, sm_counts: &[u32]) -> Result<Vec<Handle>> {
    create_groups(ordinal, sm_counts, false)
}

/// How many SMs the green context has.
pub fn sm_count(handle: Handle) -> Result<u32> {
    Ok(CONTEXTS.get(handle)?.sm_count)
}

/// The green context's device.
pub fn device(handle: Handle) -> Result<i32> {
    Ok(CONTEXTS.get(handle)?.device)
}

/// A stream whose work runs on the green context's SMs only; `flags` must hold
/// `GPURT_STREAM_NON_BLOCKING` (the driver's rule) and `priority` is in the device's
/// range. `gpurt_stream_destroy` ends it.
pub fn stream_create(handle: Handle, flags: u32, priority: i32) -> Result<Handle> {
    let _changing = lock(&CHANGING);
    let context = CONTEXTS.get(handle)?;
    stream::create_in_green_context(context.raw, context.device, flags, priority)
}

/// Destroys a green context; refused (nothing changes) while a stream of it lives.
pub fn destroy(handle: Handle) -> Result<()> {
    let _changing = lock(&CHANGING);
    let context = CONTEXTS.get(handle)?;
    let live = stream::green_context_streams(context.raw);
    if live > 0 {
        return Err(Error::invalid_argument(format!(
            "the green context still has {live} stream(s): destroy them first (gpurt_stream_destroy)"
        )));
    }
    CONTEXTS.remove(handle)?;
    let released = stream::release_green_context(context.raw);
    check(unsafe { sys::cuGreenCtxDestroy(context.raw as sys::CUgreenCtx) }, "cuGreenCtxDestroy")?;
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn green_context_metadata_packs_losslessly() {
        let c = GreenContext { raw: 0x7f00_dead_beef, device: 7, sm_count: 132 };
        assert_eq!(GreenContext::unpack(c.pack()), c);
    }
}
