//! NVTX marks and ranges (`torch.cuda.nvtx`), through NVTX v3's own implementation
//! (`shim.c`, compiled from `third_party/nvtx3`): a tool named by
//! `NVTX_INJECTION64_PATH` (Nsight Systems, Nsight Compute, or any other) sees them
//! as it sees any NVTX user's; with none attached, a call of the default domain is
//! a load and a branch here, before any call into C (`no_tool`). Domains are gpurt
//! handles, so that a stale one is refused rather than passed to a tool. `ffi` holds
//! the C entry points.

pub mod ffi;

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::error::{Error, Result};
use crate::handle::{Handle, HandleTable, Kind};

extern "C" {
    fn gpurt_nvtx_c_domain_create(name: *const c_char) -> *mut c_void;
    fn gpurt_nvtx_c_domain_destroy(domain: *mut c_void);
    fn gpurt_nvtx_c_name_category(domain: *mut c_void, category: u32, name: *const c_char);
    fn gpurt_nvtx_c_mark(domain: *mut c_void, message: *const c_char, argb: u32, category: u32);
    fn gpurt_nvtx_c_range_push(domain: *mut c_void, message: *const c_char, argb: u32, category: u32) -> i32;
    fn gpurt_nvtx_c_range_pop(domain: *mut c_void) -> i32;
    fn gpurt_nvtx_c_range_start(domain: *mut c_void, message: *const c_char, argb: u32, category: u32) -> u64;
    fn gpurt_nvtx_c_range_end(domain: *mut c_void, id: u64);
    static gpurt_nvtx_c_default_slots: [*const *const c_void; 3];
}

/// The default domain's entry points whose NVTX slot `no_tool` reads (shim.c's order).
#[derive(Clone, Copy)]
enum Slot {
    Mark = 0,
    Push = 1,
    Pop = 2,
}

/// Whether a call of `slot` in domain `d` would do nothing: the default domain, and
/// NVTX found no tool (its slot is NULL; before NVTX's first call it holds NVTX's
/// initialiser, so that call goes through and looks for one). Another thread's first
/// call may be writing the slot: it is read atomically.
#[inline(always)]
fn no_tool(d: *mut c_void, slot: Slot) -> bool {
    // SAFETY: the slots point into NVTX's globals, alive for the process; a pointer is
    // read as an AtomicPtr of the same size and alignment.
    d.is_null() && unsafe { (*gpurt_nvtx_c_default_slots[slot as usize].cast::<AtomicPtr<c_void>>()).load(Ordering::Relaxed).is_null() }
}

/// What NVTX returns for a push or pop when no tool tracks the ranges.
pub const GPURT_NVTX_NO_TRACKING: i32 = -2;

static DOMAINS: HandleTable<u64> = HandleTable::new(Kind::NvtxDomain);

/// An event's description: its message, colour (ARGB; 0: none) and category (0:
/// none).
#[derive(Clone, Copy)]
pub struct Attributes<'a> {
    pub message: Message<'a>,
    pub argb: u32,
    pub category: u32,
}

/// A NUL-terminated message, passed to NVTX as it is: a C caller's string is not
/// measured (its `strlen` was a tenth of a call).
#[derive(Clone, Copy)]
pub struct Message<'a>(*const c_char, std::marker::PhantomData<&'a CStr>);

impl<'a> Message<'a> {
    pub fn new(text: &'a CStr) -> Message<'a> {
        Message(text.as_ptr(), std::marker::PhantomData)
    }

    /// # Safety
    /// `ptr` is a NUL-terminated string that outlives `'a`.
    pub unsafe fn from_ptr(ptr: std::ptr::NonNull<c_char>) -> Message<'a> {
        Message(ptr.as_ptr(), std::marker::PhantomData)
    }
}

/// The NVTX domain behind a handle; the null handle is NVTX's default domain.
#[inline]
fn domain(handle: Handle) -> Result<*mut c_void> {
    if handle.0 == 0 {
        return Ok(std::ptr::null_mut());
    }
    Ok(DOMAINS.get(handle.expect_kind(Kind::NvtxDomain)?)? as *mut c_void)
}

/// A domain of its own for a library's or a component's events.
pub fn domain_create(name: &CStr) -> Result<Handle> {
    // SAFETY: `name` is NUL-terminated; NVTX copies what it keeps.
    let raw = unsafe { gpurt_nvtx_c_domain_create(name.as_ptr()) };
    DOMAINS.insert(raw as u64)
}

pub fn domain_destroy(handle: Handle) -> Result<()> {
    if handle.0 == 0 {
        return Err(Error::invalid_argument("the default domain (NULL) cannot be destroyed"));
    }
    let raw = DOMAINS.remove(handle.expect_kind(Kind::NvtxDomain)?)?;
    // SAFETY: the handle held this domain, and no other handle does.
    unsafe { gpurt_nvtx_c_domain_destroy(raw as *mut c_void) };
    Ok(())
}

/// Names a category of `domain` for tools to show.
pub fn name_category(handle: Handle, category: u32, name: &CStr) -> Result<()> {
    let d = domain(handle)?;
    // SAFETY: `name` is NUL-terminated.
    unsafe { gpurt_nvtx_c_name_category(d, category, name.as_ptr()) };
    Ok(())
}

/// An instantaneous event.
#[inline]
pub fn mark(handle: Handle, event: Attributes) -> Result<()> {
    let d = domain(handle)?;
    if no_tool(d, Slot::Mark) {
        return Ok(());
    }
    // SAFETY: the message is NUL-terminated and outlives the call.
    unsafe { gpurt_nvtx_c_mark(d, event.message.0, event.argb, event.category) };
    Ok(())
}

/// Opens a range on this thread's stack: NVTX's depth of the new range (0-based),
/// or `GPURT_NVTX_NO_TRACKING`.
#[inline]
pub fn range_push(handle: Handle, event: Attributes) -> Result<i32> {
    let d = domain(handle)?;
    if no_tool(d, Slot::Push) {
        return Ok(GPURT_NVTX_NO_TRACKING);
    }
    // SAFETY: as `mark`.
    Ok(unsafe { gpurt_nvtx_c_range_push(d, event.message.0, event.argb, event.category) })
}

/// Closes this thread's innermost range: the depth of the range closed, or
/// `GPURT_NVTX_NO_TRACKING`.
#[inline]
pub fn range_pop(handle: Handle) -> Result<i32> {
    let d = domain(handle)?;
    if no_tool(d, Slot::Pop) {
        return Ok(GPURT_NVTX_NO_TRACKING);
    }
    // SAFETY: no pointer is passed but the domain, which the handle holds.
    Ok(unsafe { gpurt_nvtx_c_range_pop(d) })
}

/// Opens a range that any thread may end: its id.
#[inline]
pub fn range_start(handle: Handle, event: Attributes) -> Result<u64> {
    let d = domain(handle)?;
    // SAFETY: as `mark`.
    Ok(unsafe { gpurt_nvtx_c_range_start(d, event.message.0, event.argb, event.category) })
}

#[inline]
pub fn range_end(handle: Handle, id: u64) -> Result<()> {
    let d = domain(handle)?;
    // SAFETY: as `range_pop`.
    unsafe { gpurt_nvtx_c_range_end(d, id) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_tool_calls_succeed_and_track_nothing() {
        let event = Attributes { message: Message::new(c"step"), argb: 0xff00_ff00, category: 2 };
        mark(Handle(0), event).unwrap();
        assert_eq!(range_push(Handle(0), event).unwrap(), GPURT_NVTX_NO_TRACKING);
        assert_eq!(range_pop(Handle(0)).unwrap(), GPURT_NVTX_NO_TRACKING);
        let d = domain_create(c"gpurt-test").unwrap();
        name_category(d, 2, c"decode").unwrap();
        let id = range_start(d, event).unwrap();
        range_end(d, id).unwrap();
        domain_destroy(d).unwrap();
        assert_eq!(mark(d, event).unwrap_err().status, crate::Status::GPURT_ERROR_INVALID_HANDLE, "a destroyed domain is refused");
        assert!(domain_destroy(Handle(0)).is_err());
    }
}
