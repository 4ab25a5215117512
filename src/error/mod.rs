//! Status codes, the crate's error type, and the thread-local "last error" that
//! the C ABI exposes as `gpurt_last_error_message`.

pub mod ffi;

use std::cell::RefCell;
use std::ffi::CString;

use cudarc::driver::sys::CUresult;

/// The status every gpurt function returns. Zero is success; every other value
/// is an error whose detail is in `gpurt_last_error_message()`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum gpurt_status_t {
    /// The call succeeded.
    GPURT_SUCCESS = 0,
    /// An argument was out of range, NULL where a pointer is required, or malformed.
    GPURT_ERROR_INVALID_ARGUMENT = 1,
    /// A handle was NULL, already destroyed, or of another kind.
    GPURT_ERROR_INVALID_HANDLE = 2,
    /// The CUDA driver (libcuda) could not be loaded.
    GPURT_ERROR_NO_DRIVER = 3,
    /// The driver is present but reports no CUDA device.
    GPURT_ERROR_NO_DEVICE = 4,
    /// Device or host memory could not be allocated.
    GPURT_ERROR_OUT_OF_MEMORY = 5,
    /// A query found work still pending; not a failure.
    GPURT_ERROR_NOT_READY = 6,
    /// The driver is too old, a symbol is missing, or the feature is absent.
    GPURT_ERROR_NOT_SUPPORTED = 7,
    /// The operation is illegal while a stream is being captured.
    GPURT_ERROR_STREAM_CAPTURE = 8,
    /// The process is tearing down and the driver has been unloaded.
    GPURT_ERROR_DEINITIALIZED = 9,
    /// A CUDA error with no closer mapping; `gpurt_last_cuda_error` gives the raw CUresult.
    GPURT_ERROR_CUDA = 10,
    /// A bug in gpurt (a caught panic); the message says where.
    GPURT_ERROR_INTERNAL = 11,
    /// A call that blocks the host on the device, refused because the sync debug mode
    /// is "error" (see `gpurt_set_sync_debug_mode`).
    GPURT_ERROR_SYNCHRONIZING_CALL = 12,
    /// Run-time compilation failed; the message holds the compiler's log.
    GPURT_ERROR_COMPILATION = 13,
    /// An instantiated graph could not be updated from the new graph (topology or
    /// node kinds differ); the message says why. Re-instantiate instead.
    GPURT_ERROR_GRAPH_UPDATE = 14,
    /// The process is a `fork()` child of a process that had initialised CUDA, which
    /// cannot be used there (start workers with spawn, or fork before using gpurt).
    GPURT_ERROR_FORKED = 15,
    /// A file could not be read or written (`gpurt_gds_*`); the message holds the
    /// path, the operation and the system's reason.
    GPURT_ERROR_IO = 16,
    /// A collective or communicator failed because of a peer, the network or NCCL,
    /// or a peer did not join in time (`gpurt_comm_*`); the message says which.
    GPURT_ERROR_COMM = 17,
}

pub use gpurt_status_t as Status;

impl Status {
    const ALL: [Status; 18] = [
        Status::GPURT_SUCCESS,
        Status::GPURT_ERROR_INVALID_ARGUMENT,
        Status::GPURT_ERROR_INVALID_HANDLE,
        Status::GPURT_ERROR_NO_DRIVER,
        Status::GPURT_ERROR_NO_DEVICE,
        Status::GPURT_ERROR_OUT_OF_MEMORY,
        Status::GPURT_ERROR_NOT_READY,
        Status::GPURT_ERROR_NOT_SUPPORTED,
        Status::GPURT_ERROR_STREAM_CAPTURE,
        Status::GPURT_ERROR_DEINITIALIZED,
        Status::GPURT_ERROR_CUDA,
        Status::GPURT_ERROR_INTERNAL,
        Status::GPURT_ERROR_SYNCHRONIZING_CALL,
        Status::GPURT_ERROR_COMPILATION,
        Status::GPURT_ERROR_GRAPH_UPDATE,
        Status::GPURT_ERROR_FORKED,
        Status::GPURT_ERROR_IO,
        Status::GPURT_ERROR_COMM,
    ];

    /// The status with this numeric value, if there is one.
    pub fn from_raw(raw: i32) -> Option<Status> {
        Status::ALL.into_iter().find(|s| *s as i32 == raw)
    }

    /// A short, static description of a status, as `gpurt_status_string` returns it.
    pub fn description(self) -> &'static std::ffi::CStr {
        match self {
            Status::GPURT_SUCCESS => c"success",
            Status::GPURT_ERROR_INVALID_ARGUMENT => c"invalid argument",
            Status::GPURT_ERROR_INVALID_HANDLE => c"invalid handle",
            Status::GPURT_ERROR_NO_DRIVER => c"no CUDA driver",
            Status::GPURT_ERROR_NO_DEVICE => c"no CUDA device",
            Status::GPURT_ERROR_OUT_OF_MEMORY => c"out of memory",
            Status::GPURT_ERROR_NOT_READY => c"not ready",
            Status::GPURT_ERROR_NOT_SUPPORTED => c"not supported",
            Status::GPURT_ERROR_STREAM_CAPTURE => c"illegal during stream capture",
            Status::GPURT_ERROR_DEINITIALIZED => c"deinitialized",
            Status::GPURT_ERROR_CUDA => c"CUDA error",
            Status::GPURT_ERROR_INTERNAL => c"internal error",
            Status::GPURT_ERROR_SYNCHRONIZING_CALL => c"synchronizing call refused by sync debug mode",
            Status::GPURT_ERROR_COMPILATION => c"compilation failed",
            Status::GPURT_ERROR_GRAPH_UPDATE => c"graph update not possible",
            Status::GPURT_ERROR_FORKED => c"CUDA cannot be used in a forked child",
            Status::GPURT_ERROR_IO => c"file I/O error",
            Status::GPURT_ERROR_COMM => c"communication error",
        }
    }

    /// The status for a raw driver result. `CUDA_SUCCESS` must not be passed.
    pub fn from_cuda(code: i32) -> Status {
        match code {
            1 => Status::GPURT_ERROR_INVALID_ARGUMENT,            // INVALID_VALUE
            2 => Status::GPURT_ERROR_OUT_OF_MEMORY,               // OUT_OF_MEMORY
            4 => Status::GPURT_ERROR_DEINITIALIZED,               // DEINITIALIZED
            34 | 35 => Status::GPURT_ERROR_NO_DRIVER,             // STUB_LIBRARY, INSUFFICIENT_DRIVER
            100 => Status::GPURT_ERROR_NO_DEVICE,                 // NO_DEVICE
            101 => Status::GPURT_ERROR_INVALID_ARGUMENT,          // INVALID_DEVICE
            400 => Status::GPURT_ERROR_INVALID_HANDLE,            // INVALID_HANDLE
            600 => Status::GPURT_ERROR_NOT_READY,                 // NOT_READY
            500 | 801 => Status::GPURT_ERROR_NOT_SUPPORTED,       // NOT_FOUND, NOT_SUPPORTED
            900..=908 => Status::GPURT_ERROR_STREAM_CAPTURE,      // STREAM_CAPTURE_*, CAPTURED_EVENT
            910 => Status::GPURT_ERROR_GRAPH_UPDATE,              // GRAPH_EXEC_UPDATE_FAILURE
            _ => Status::GPURT_ERROR_CUDA,
        }
    }
}

/// An error: a status, a message for a person, and the raw CUresult when the
/// driver produced it. Boxed, so that a `Result` of a word or less is returned in
/// registers: every hot call passes its `Result` up through several layers.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.message)]
pub struct Error(Box<ErrorDetail>);

#[derive(Debug, Clone)]
pub struct ErrorDetail {
    pub status: Status,
    pub message: String,
    pub cuda_code: Option<i32>,
}

impl std::ops::Deref for Error {
    type Target = ErrorDetail;
    fn deref(&self) -> &ErrorDetail {
        &self.0
    }
}

impl std::ops::DerefMut for Error {
    fn deref_mut(&mut self) -> &mut ErrorDetail {
        &mut self.0
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error(Box::new(ErrorDetail { status, message: message.into(), cuda_code: None }))
    }
    pub fn invalid_argument(message: impl Into<String>) -> Error {
        Error::new(Status::GPURT_ERROR_INVALID_ARGUMENT, message)
    }
    pub fn invalid_handle(message: impl Into<String>) -> Error {
        Error::new(Status::GPURT_ERROR_INVALID_HANDLE, message)
    }
    pub fn not_supported(message: impl Into<String>) -> Error {
        Error::new(Status::GPURT_ERROR_NOT_SUPPORTED, message)
    }
    /// An error from a driver call: names the call, the CUDA error's name and text
    /// (which `driver::error` asks the driver for).
    pub fn cuda(call: &str, code: CUresult, name: &str, text: &str) -> Error {
        let raw = code as i32;
        Error(Box::new(ErrorDetail {
            status: Status::from_cuda(raw),
            message: format!("{call} failed: {name} ({raw}): {text}"),
            cuda_code: Some(raw),
        }))
    }
    /// Prefix the message with the context of the caller (the C function, an argument).
    pub fn context(mut self, what: &str) -> Error {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

struct LastError {
    message: CString,
    cuda_code: i32,
}

thread_local! {
    static LAST_ERROR: RefCell<LastError> = RefCell::new(LastError {
        message: CString::default(),
        cuda_code: 0,
    });
}

/// Store `err` as this thread's last error. Interior NULs are replaced so that the
/// message always survives as a C string.
pub(crate) fn set_last_error(err: &Error) {
    let message = CString::new(err.message.replace('\0', "\\0")).unwrap_or_default();
    // try_with: during thread teardown the slot may be gone; the status still reaches the caller.
    let _ = LAST_ERROR.try_with(|slot| {
        let mut slot = slot.borrow_mut();
        slot.message = message;
        slot.cuda_code = err.cuda_code.unwrap_or(0);
    });
    crate::log::log(crate::log::Level::Debug, &err.message);
}

/// This thread's last error message as a pointer valid until the next failing
/// call on this thread.
pub(crate) fn last_error_message_ptr() -> *const libc::c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().message.as_ptr())
        .unwrap_or(c"".as_ptr())
}

pub(crate) fn last_cuda_code() -> i32 {
    LAST_ERROR.try_with(|slot| slot.borrow().cuda_code).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_errors_map_to_capture_status() {
        for code in 900..=908 {
            assert_eq!(Status::from_cuda(code), Status::GPURT_ERROR_STREAM_CAPTURE);
        }
        assert_eq!(Status::from_cuda(600), Status::GPURT_ERROR_NOT_READY);
        assert_eq!(Status::from_cuda(719), Status::GPURT_ERROR_CUDA);
    }

    #[test]
    fn every_status_round_trips_and_has_a_description() {
        for (i, status) in Status::ALL.iter().enumerate() {
            assert_eq!(*status as i32, i as i32);
            assert_eq!(Status::from_raw(i as i32), Some(*status));
            assert!(!status.description().to_bytes().is_empty());
        }
        assert_eq!(Status::from_raw(Status::ALL.len() as i32), None);
        assert_eq!(Status::from_raw(-1), None);
    }

    #[test]
    fn last_error_is_per_thread_and_survives_interior_nul() {
        set_last_error(&Error::invalid_argument("bad\0value"));
        let msg = unsafe { std::ffi::CStr::from_ptr(last_error_message_ptr()) };
        assert_eq!(msg.to_str().unwrap(), "bad\\0value");
        std::thread::spawn(|| {
            let msg = unsafe { std::ffi::CStr::from_ptr(last_error_message_ptr()) };
            assert_eq!(msg.to_bytes(), b"");
        })
        .join()
        .unwrap();
    }
}
