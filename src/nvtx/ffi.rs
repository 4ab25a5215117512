use std::ffi::{c_char, c_int, CStr};

use super::{Attributes, Message};
use crate::boundary::{self, in_ref, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;

/// An NVTX domain (`nvtxDomainHandle_t`); NULL is NVTX's default domain.
pub struct gpurt_nvtx_domain_s {
    _opaque: [u8; 0],
}
/// The handle of an NVTX domain: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_nvtx_domain_t = *mut gpurt_nvtx_domain_s;

/// A checked, non-NULL C string, passed on as it is (NVTX takes ASCII).
fn text<'a>(ptr: *const c_char, name: &str) -> crate::Result<&'a CStr> {
    // SAFETY: the caller's contract is a NUL-terminated string.
    Ok(unsafe { CStr::from_ptr(in_ref(ptr, name)?) })
}

fn event<'a>(message: *const c_char, argb: u32, category: u32) -> crate::Result<Attributes<'a>> {
    let ptr = std::ptr::NonNull::new(message.cast_mut()).ok_or_else(|| crate::boundary::null_argument("message"))?;
    // SAFETY: the caller's contract is a NUL-terminated string, alive for the call.
    Ok(Attributes { message: unsafe { Message::from_ptr(ptr) }, argb, category })
}

/// Writes `value` where `ptr` is not NULL (the depth out-parameters are optional).
fn give(ptr: *mut c_int, value: i32) {
    if let Ok(out) = Out::new(ptr, "depth") {
        out.write(value);
    }
}

/// A domain for a library's or a component's events (`nvtxDomainCreateA`).
///
/// @param name the domain's name
/// @param[out] domain receives the domain; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL `name`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_domain_create(name: *const c_char, domain: *mut gpurt_nvtx_domain_t) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_domain_create", || {
        let out = Out::new(domain, "domain")?;
        out.write(super::domain_create(text(name, "name")?)?.to_ptr());
        Ok(())
    })
}

/// Destroys a domain (nvtxDomainDestroy).
/// @param domain a domain from gpurt_nvtx_domain_create
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_domain_destroy(domain: gpurt_nvtx_domain_t) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_domain_destroy", || super::domain_destroy(Handle::from_ptr(domain)))
}

/// Names category `category` of `domain` (NULL: the default domain) for tools.
///
/// @param domain a domain from gpurt_nvtx_domain_create, or NULL for the default domain
/// @param category the category's number
/// @param name its name
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `name`; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_name_category(domain: gpurt_nvtx_domain_t, category: u32, name: *const c_char) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_name_category", || super::name_category(Handle::from_ptr(domain), category, text(name, "name")?))
}

/// An instantaneous event in the default domain (`torch.cuda.nvtx.mark`).
///
/// @param message the text, NUL-terminated
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `message`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_mark(message: *const c_char) -> gpurt_status_t {
    gpurt_nvtx_mark_ex(std::ptr::null_mut(), message, 0, 0)
}

/// Opens a range on this thread's stack in the default domain
/// (`torch.cuda.nvtx.range_push`); `*depth` (may be NULL) gets NVTX's answer: the
/// new range's 0-based depth, or GPURT_NVTX_NO_TRACKING (-2) when no tool tracks
/// ranges.
///
/// @param message the text, NUL-terminated
/// @param[out] depth receives the new range's 0-based depth, or GPURT_NVTX_NO_TRACKING; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `message`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_push(message: *const c_char, depth: *mut c_int) -> gpurt_status_t {
    gpurt_nvtx_range_push_ex(std::ptr::null_mut(), message, 0, 0, depth)
}

/// Closes this thread's innermost range of the default domain; `*depth` (may be
/// NULL) as for the push.
///
/// @param[out] depth receives the closed range's depth, or GPURT_NVTX_NO_TRACKING; may be NULL
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_pop(depth: *mut c_int) -> gpurt_status_t {
    gpurt_nvtx_range_pop_ex(std::ptr::null_mut(), depth)
}

/// Opens a range that any thread may end (`torch.cuda.nvtx.range_start`): its id.
///
/// @param message the text, NUL-terminated
/// @param[out] id receives the range's id, for gpurt_nvtx_range_end; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL `message`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_start(message: *const c_char, id: *mut u64) -> gpurt_status_t {
    gpurt_nvtx_range_start_ex(std::ptr::null_mut(), message, 0, 0, id)
}

/// Ends a range from gpurt_nvtx_range_start, on any thread (torch.cuda.nvtx.range_end).
/// @param id the range's id
/// @return GPURT_SUCCESS; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_end(id: u64) -> gpurt_status_t {
    gpurt_nvtx_range_end_ex(std::ptr::null_mut(), id)
}

/// `gpurt_nvtx_mark` in `domain` (NULL: the default one), with a colour (`argb`,
/// 0xAARRGGBB; 0: none) and a category (0: none).
///
/// @param domain a domain from gpurt_nvtx_domain_create, or NULL for the default domain
/// @param message the text, NUL-terminated
/// @param argb the colour, 0xAARRGGBB; 0: none
/// @param category the category; 0: none
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `message`; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_mark_ex(domain: gpurt_nvtx_domain_t, message: *const c_char, argb: u32, category: u32) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_mark", || super::mark(Handle::from_ptr(domain), event(message, argb, category)?))
}

/// gpurt_nvtx_range_push in `domain`, with a colour and a category.
/// @param domain a domain from gpurt_nvtx_domain_create, or NULL for the default domain
/// @param message the text, NUL-terminated
/// @param argb the colour, 0xAARRGGBB; 0: none
/// @param category the category; 0: none
/// @param[out] depth receives as for gpurt_nvtx_range_push; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `message`; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_push_ex(domain: gpurt_nvtx_domain_t, message: *const c_char, argb: u32, category: u32, depth: *mut c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_range_push", || {
        give(depth, super::range_push(Handle::from_ptr(domain), event(message, argb, category)?)?);
        Ok(())
    })
}

/// gpurt_nvtx_range_pop in `domain`.
/// @param domain a domain from gpurt_nvtx_domain_create, or NULL for the default domain
/// @param[out] depth receives as for gpurt_nvtx_range_pop; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_pop_ex(domain: gpurt_nvtx_domain_t, depth: *mut c_int) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_range_pop", || {
        give(depth, super::range_pop(Handle::from_ptr(domain))?);
        Ok(())
    })
}

/// gpurt_nvtx_range_start in `domain`, with a colour and a category.
/// @param domain a domain from gpurt_nvtx_domain_create, or NULL for the default domain
/// @param message the text, NUL-terminated
/// @param argb the colour, 0xAARRGGBB; 0: none
/// @param category the category; 0: none
/// @param[out] id receives the range's id; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL `message`; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_start_ex(domain: gpurt_nvtx_domain_t, message: *const c_char, argb: u32, category: u32, id: *mut u64) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_range_start", || {
        let out = Out::new(id, "id")?;
        out.write(super::range_start(Handle::from_ptr(domain), event(message, argb, category)?)?);
        Ok(())
    })
}

/// gpurt_nvtx_range_end in `domain`.
/// @param domain a domain from gpurt_nvtx_domain_create, or NULL for the default domain
/// @param id the range's id
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a bad non-NULL `domain`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side, a few nanoseconds when no tool is attached; allowed during a capture. NVTX marks the host timeline, not a stream's.
#[no_mangle]
pub extern "C" fn gpurt_nvtx_range_end_ex(domain: gpurt_nvtx_domain_t, id: u64) -> gpurt_status_t {
    boundary::call_anywhere("gpurt_nvtx_range_end", || super::range_end(Handle::from_ptr(domain), id))
}
