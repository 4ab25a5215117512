//! The one panic boundary and the argument helpers every `extern "C"` function uses.
//!
//! Each exported function is `boundary::call("name", || { ... })`: errors become a
//! status plus a thread-local message prefixed with the function's name, and a panic
//! becomes `GPURT_ERROR_INTERNAL` instead of unwinding into C.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use crate::error::{set_last_error, Error, Result, Status};

#[inline(always)]
pub(crate) fn call(function: &'static str, body: impl FnOnce() -> Result<()>) -> Status {
    if crate::process::is_forked_child() {
        return record(function, crate::process::forked_child_error());
    }
    call_anywhere(function, body)
}

/// `call` for the few functions that never reach the driver or a pool (logging, the
/// sync debug mode, the last error): they work in a forked child too.
#[inline(always)]
pub(crate) fn call_anywhere(function: &'static str, body: impl FnOnce() -> Result<()>) -> Status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Status::GPURT_SUCCESS,
        Ok(Err(err)) => record(function, err),
        Err(payload) => record(function, panic_error(payload)),
    }
}

/// Locks a mutex, poisoned or not: a panic is caught at this boundary and reported,
/// so one panicking call must not fail every later call that takes the same lock.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cold]
#[inline(never)]
fn record(function: &'static str, err: Error) -> Status {
    // "Not ready" is an answer, not a failure: polling loops must not pay for a message.
    let status = err.status;
    if status != Status::GPURT_ERROR_NOT_READY {
        set_last_error(&err.context(function));
    }
    status
}

#[cold]
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    Error::new(Status::GPURT_ERROR_INTERNAL, format!("internal error (please report): {what}"))
}

/// A checked, non-NULL out-parameter. Take every out-parameter with `Out::new`
/// before doing any work, so that a NULL one fails the call with nothing done.
pub(crate) struct Out<T>(NonNull<T>);

impl<T> Out<T> {
    #[inline(always)]
    pub(crate) fn new(ptr: *mut T, name: &str) -> Result<Out<T>> {
        match NonNull::new(ptr) {
            Some(p) => Ok(Out(p)),
            None => Err(null_argument(name)),
        }
    }
    #[inline(always)]
    pub(crate) fn write(self, value: T) {
        // SAFETY: non-NULL was checked; the caller's contract is that it points to a writable T.
        unsafe { self.0.as_ptr().write(value) }
    }
}

/// A checked, non-NULL input pointer read as a reference.
#[inline(always)]
pub(crate) fn in_ref<'a, T>(ptr: *const T, name: &str) -> Result<&'a T> {
    // SAFETY: the caller's contract is that a non-NULL pointer points to a valid T.
    unsafe { ptr.as_ref() }.ok_or_else(|| null_argument(name))
}

/// The caller's extensible struct (its first field a `size_t struct_size`), refused
/// before the rest is read where the caller's struct is smaller than this version's:
/// `init` names the initialiser the message points to.
pub(crate) fn in_sized<'a, T>(ptr: *const T, name: &str, init: &str) -> Result<&'a T> {
    if *in_ref(ptr.cast::<usize>(), name)? < std::mem::size_of::<T>() {
        return Err(Error::invalid_argument(format!("`{name}->struct_size` is too small: initialise it with {init}")));
    }
    in_ref(ptr, name)
}

/// As `in_sized` for a struct that grew: a caller's struct of at least `minimum` bytes
/// (the fields every version has) is read by its `struct_size`, and the fields past
/// it read as zero (their "not asked for").
///
/// # Safety
/// `T` is plain data whose all-zero bytes are a valid value (integers, raw pointers).
pub(crate) unsafe fn in_extended<T: Copy>(ptr: *const T, minimum: usize, name: &str, init: &str) -> Result<T> {
    let caller_size = *in_ref(ptr.cast::<usize>(), name)?;
    if caller_size < minimum {
        return Err(Error::invalid_argument(format!("`{name}->struct_size` is too small: initialise it with {init}")));
    }
    // SAFETY: all-zero bytes are a T (this function's contract); the caller's struct
    // holds `caller_size` readable bytes, of which at most our size are copied.
    let mut value: T = unsafe { std::mem::zeroed() };
    unsafe {
        std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&mut value as *mut T).cast::<u8>(), caller_size.min(std::mem::size_of::<T>()));
    }
    Ok(value)
}

/// `n` slots of `value`: in `stack` when they fit, else in `heap` (arrays a call
/// builds from its arguments, so that the usual few allocate nothing).
pub(crate) fn slots<'a, T: Copy, const N: usize>(n: usize, value: T, stack: &'a mut [T; N], heap: &'a mut Vec<T>) -> &'a mut [T] {
    if n <= N {
        return &mut stack[..n];
    }
    heap.resize(n, value);
    heap
}

/// A checked, non-NULL, UTF-8 C string argument.
pub(crate) fn in_str<'a>(ptr: *const libc::c_char, name: &str) -> Result<&'a str> {
    let ptr = in_ref(ptr, name)?;
    // SAFETY: the caller's contract is a NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(ptr) }
        .to_str()
        .map_err(|_| Error::invalid_argument(format!("argument `{name}` is not valid UTF-8")))
}

/// The end of the user address space of any 64-bit Linux process (57 bits, with
/// five-level page tables). Host memory and unified device addresses lie below it.
const ADDRESS_SPACE_END: u64 = 1 << 57;

/// Checks that `[ptr, ptr + bytes)` is a range a caller can own: it ends inside the
/// user address space (so it neither wraps nor exceeds `isize::MAX`, the largest
/// object C and Rust allow). Sizes from callers reach rounding, pointer arithmetic
/// and the driver only after this.
pub(crate) fn check_range(ptr: u64, bytes: u64, name: &str) -> Result<()> {
    if ptr.checked_add(bytes).map_or(true, |end| end > ADDRESS_SPACE_END) {
        return Err(Error::invalid_argument(format!(
            "`{name}` at {ptr:#x} with {bytes} bytes runs past the end of the address space"
        )));
    }
    Ok(())
}

/// `count` × `size` bytes, refused where the product overflows.
pub(crate) fn checked_bytes(count: u64, size: u64, name: &str) -> Result<u64> {
    count
        .checked_mul(size)
        .ok_or_else(|| Error::invalid_argument(format!("`{name}`: {count} elements of {size} bytes overflow a size")))
}

/// The caller's array of `count` items at `ptr`, refused before anything is read when
/// `count` is past `max`: a count that large is a bug, and trusting it would read far
/// past the caller's array. `count` 0 gives an empty slice (`ptr` may be NULL).
pub(crate) fn in_array<'a, T>(ptr: *const T, count: usize, max: usize, name: &str) -> Result<&'a [T]> {
    if count > max {
        return Err(Error::invalid_argument(format!("`{name}` has {count} entries; at most {max} are accepted")));
    }
    if count == 0 {
        return Ok(&[]);
    }
    in_ref(ptr, name)?;
    check_range(ptr as u64, checked_bytes(count as u64, std::mem::size_of::<T>() as u64, name)?, name)?;
    // SAFETY: non-NULL, within the address space; the caller gives `count` items.
    Ok(unsafe { std::slice::from_raw_parts(ptr, count) })
}

/// The caller's `size` bytes at `ptr` (non-NULL, a range that fits the address space).
pub(crate) fn in_bytes<'a>(ptr: *const libc::c_void, size: usize, name: &str) -> Result<&'a [u8]> {
    in_array(ptr.cast::<u8>(), size, isize::MAX as usize, name)
}

/// A copy of `bytes` that reports an allocation failure as out of memory instead of
/// aborting the process (Rust's default for a failed allocation).
pub(crate) fn try_copy(bytes: &[u8], extra: usize) -> Result<Vec<u8>> {
    let mut v = Vec::new();
    v.try_reserve_exact(bytes.len().saturating_add(extra)).map_err(|_| {
        Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("out of host memory copying {} bytes", bytes.len()))
    })?;
    v.extend_from_slice(bytes);
    Ok(v)
}

#[cold]
pub(crate) fn null_argument(name: &str) -> Error {
    Error::invalid_argument(format!("argument `{name}` is NULL"))
}

/// Copies `value` into a caller's extensible struct whose first field is its size.
/// Only the bytes the caller's version of the struct has are written, so an older
/// caller with a smaller struct keeps working; `minimum` is the size of version 1.
pub(crate) fn write_sized<T: Copy>(out: *mut T, value: &T, minimum: usize, name: &str) -> Result<()> {
    let out = Out::new(out, name)?;
    // SAFETY: the first field of every extensible struct is a size_t.
    let caller_size = unsafe { out.0.cast::<usize>().read() };
    if caller_size < minimum {
        return Err(Error::invalid_argument(format!(
            "`{name}->struct_size` is {caller_size}; initialise the struct with its _INIT macro or init function (at least {minimum} bytes)"
        )));
    }
    let n = caller_size.min(std::mem::size_of::<T>());
    // SAFETY: the caller promises `caller_size` writable bytes; we write at most that many
    // and leave its struct_size (the first usize) as the caller set it.
    unsafe {
        let src = (value as *const T).cast::<u8>();
        let dst = out.0.as_ptr().cast::<u8>();
        let skip = std::mem::size_of::<usize>();
        std::ptr::copy_nonoverlapping(src.add(skip), dst.add(skip), n - skip);
    }
    Ok(())
}

/// Copies `text` into a caller's buffer of `capacity` bytes, truncated and
/// NUL-terminated (nothing when `capacity` is 0). `buffer` is not NULL where
/// `capacity` is above 0: the caller checked it.
pub(crate) fn write_c_string(buffer: *mut libc::c_char, capacity: usize, text: &str) {
    if capacity == 0 {
        return;
    }
    let n = text.len().min(capacity - 1);
    // SAFETY: the caller provides `capacity` writable bytes at `buffer`.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<libc::c_char>(), buffer, n);
        *buffer.add(n) = 0;
    }
}

/// A caller's array of `capacity` items and the count of items there are: the C
/// convention of the listing calls (ask with capacity 0 for the count, then again).
/// Checked when made, before the list is computed.
pub(crate) struct ListOut<T> {
    items: *mut T,
    capacity: usize,
    count: Out<usize>,
}

impl<T: Copy> ListOut<T> {
    pub(crate) fn new(items: *mut T, capacity: usize, count: *mut usize, name: &str) -> Result<ListOut<T>> {
        let count = Out::new(count, "count")?;
        if capacity > 0 && items.is_null() {
            return Err(Error::invalid_argument(format!("`{name}` is NULL with a capacity above 0")));
        }
        Ok(ListOut { items, capacity, count })
    }

    /// Writes the first `capacity` of `all`, and how many there are.
    pub(crate) fn write(self, all: &[T]) {
        for (i, item) in all.iter().take(self.capacity).enumerate() {
            // SAFETY: the caller gives `capacity` writable items (checked non-NULL).
            unsafe { self.items.add(i).write(*item) };
        }
        self.count.write(all.len());
    }
}

/// Writes `values` into the caller's array at `out`, which holds room for them.
pub(crate) fn write_array<T: Copy>(out: *mut T, values: &[T], name: &str) -> Result<()> {
    if out.is_null() {
        return Err(null_argument(name));
    }
    for (i, &value) in values.iter().enumerate() {
        // SAFETY: non-NULL; the caller gives room for `values.len()` items.
        unsafe { out.add(i).write(value) };
    }
    Ok(())
}

/// Writes each value through its out-parameter; NULL ones are skipped (outputs the
/// caller may not want).
pub(crate) fn write_optional<const N: usize>(values: [(*mut u64, u64); N]) {
    for (out, value) in values {
        if let Ok(out) = Out::new(out, "") {
            out.write(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn panic_becomes_internal_status_with_message() {
        let status = call("gpurt_test", || panic!("boom"));
        assert_eq!(status, Status::GPURT_ERROR_INTERNAL);
        let msg = unsafe { CStr::from_ptr(crate::error::last_error_message_ptr()) };
        assert!(msg.to_str().unwrap().contains("gpurt_test: internal error (please report): boom"));
    }

    #[test]
    fn null_out_parameter_is_invalid_argument() {
        let status = call("gpurt_test", || {
            Out::<i32>::new(std::ptr::null_mut(), "count")?.write(1);
            Ok(())
        });
        assert_eq!(status, Status::GPURT_ERROR_INVALID_ARGUMENT);
        let msg = unsafe { CStr::from_ptr(crate::error::last_error_message_ptr()) };
        assert_eq!(msg.to_str().unwrap(), "gpurt_test: argument `count` is NULL");
    }

    #[derive(Clone, Copy)]
    #[repr(C)]
    struct V2 {
        struct_size: usize,
        a: u32,
        b: u32,
    }

    #[test]
    fn sized_write_respects_older_callers() {
        let value = V2 { struct_size: 0, a: 7, b: 9 };
        // A version-1 caller knows only `a`: `b` (its neighbour's memory) must stay untouched.
        let mut old = V2 { struct_size: 12, a: 0, b: 0xdead };
        write_sized(&mut old, &value, 12, "props").unwrap();
        assert_eq!((old.struct_size, old.a, old.b), (12, 7, 0xdead));
        let mut new = V2 { struct_size: std::mem::size_of::<V2>(), a: 0, b: 0 };
        write_sized(&mut new, &value, 12, "props").unwrap();
        assert_eq!((new.a, new.b), (7, 9));
        let mut bad = V2 { struct_size: 3, a: 0, b: 0 };
        assert_eq!(
            write_sized(&mut bad, &value, 12, "props").unwrap_err().status,
            Status::GPURT_ERROR_INVALID_ARGUMENT
        );
    }
}
