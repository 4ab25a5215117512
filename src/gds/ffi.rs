use libc::{c_char, c_int, c_void};

use super::gpurt_gds_mode_t;
use crate::boundary::{self, in_str, Out};
use crate::error::gpurt_status_t;
use crate::handle::Handle;
use crate::stream::ffi::gpurt_stream_t;

/// A file opened for transfers to and from device memory (`torch.cuda.gds.GdsFile`).
pub struct gpurt_gds_file_s {
    _opaque: [u8; 0],
}
/// The handle of a file opened for GPUDirect Storage transfers: opaque; NULL, destroyed or wrong-kind handles give GPURT_ERROR_INVALID_HANDLE.
pub type gpurt_gds_file_t = *mut gpurt_gds_file_s;

fn handle_of(file: gpurt_gds_file_t) -> Handle {
    Handle::from_ptr(file)
}

/// Opens `path` with POSIX `open` flags (`O_RDONLY`, `O_WRONLY` or `O_RDWR`, with
/// `O_CREAT`, `O_TRUNC`, `O_DIRECT` as wanted; a created file gets mode 0644).
/// `GPURT_ERROR_IO` with the system's reason where the file cannot be opened.
///
/// @param path the file's path
/// @param flags POSIX open flags: O_RDONLY, O_WRONLY or O_RDWR, with O_CREAT, O_TRUNC, O_DIRECT as wanted
/// @param[out] file receives the open file; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; GPURT_ERROR_INVALID_ARGUMENT for a NULL `path`; GPURT_ERROR_IO where the file cannot be opened; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_gds_file_open(path: *const c_char, flags: c_int, file: *mut gpurt_gds_file_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_file_open", || {
        let out = Out::new(file, "file")?;
        out.write(super::open(in_str(path, "path")?, flags)?.to_ptr());
        Ok(())
    })
}

/// Closes the file's handle; transfers still queued on streams keep the file open
/// until they have run. Gives the error of a queued transfer not reported yet.
///
/// @param file a file from gpurt_gds_file_open
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `file`; the error of a queued transfer not yet reported; or a status every call may give (@ref statuses).
/// @par Ordering
/// Does not wait for queued transfers: they keep the file open until they have run.
#[no_mangle]
pub extern "C" fn gpurt_gds_file_close(file: gpurt_gds_file_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_file_close", || super::close(handle_of(file)))
}

/// Registers `size` bytes of device memory at `ptr` for transfers (cuFile pins it
/// for the storage's DMA). Optional: unregistered device memory works too.
///
/// @param ptr device memory
/// @param size bytes from `ptr`
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL `ptr`; GPURT_ERROR_IO with the path, the operation and the system's reason where the transfer fails; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_gds_register_buffer(ptr: *mut c_void, size: usize) -> gpurt_status_t {
    boundary::call("gpurt_gds_register_buffer", || super::register_buffer(ptr as u64, size as u64))
}

/// Undoes gpurt_gds_register_buffer.
/// @param ptr the address that was registered
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT for a NULL or unregistered `ptr`; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_gds_deregister_buffer(ptr: *mut c_void) -> gpurt_status_t {
    boundary::call("gpurt_gds_deregister_buffer", || super::deregister_buffer(ptr as u64))
}

fn transferred(bytes: *mut usize, wanted: usize, done: u64, what: &str) -> crate::Result<()> {
    match bytes.is_null() {
        false => Out::new(bytes, "bytes")?.write(done as usize),
        true if (done as usize) < wanted => {
            return Err(crate::Error::new(
                crate::Status::GPURT_ERROR_IO,
                format!("{what} {done} of {wanted} bytes (the file ends there): pass `bytes` to accept a short read"),
            ))
        }
        true => {}
    }
    Ok(())
}

/// Reads `size` bytes of the file at `file_offset` into device memory at `dev_ptr`,
/// and returns when they are there (as cuFileRead: not ordered after work queued on
/// streams; see gpurt_gds_read_async). `bytes` (may be NULL) receives the bytes
/// read, fewer at the end of the file; with NULL a short read is `GPURT_ERROR_IO`.
///
/// @param file a file from gpurt_gds_file_open
/// @param dev_ptr device memory that receives the bytes
/// @param size bytes to read
/// @param file_offset where in the file (not negative)
/// @param[out] bytes receives the bytes read (fewer at the end of the file); may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `file`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `dev_ptr` or a negative offset; GPURT_ERROR_IO with the path, the operation and the system's reason where the transfer fails; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks until the bytes are in device memory; not ordered after work queued on streams (see gpurt_gds_read_async).
#[no_mangle]
pub extern "C" fn gpurt_gds_read(file: gpurt_gds_file_t, dev_ptr: *mut c_void, size: usize, file_offset: i64, bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_gds_read", || {
        let done = super::read(handle_of(file), dev_ptr as u64, size as u64, file_offset)?;
        transferred(bytes, size, done, "read")
    })
}

/// Writes `size` bytes of device memory at `dev_ptr` to the file at `file_offset`,
/// and returns when they are written. `bytes` (may be NULL) receives the count.
///
/// @param file a file from gpurt_gds_file_open
/// @param dev_ptr device memory to write
/// @param size bytes to write
/// @param file_offset where in the file (not negative)
/// @param[out] bytes receives the bytes written; may be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `file`; GPURT_ERROR_INVALID_ARGUMENT for a NULL `dev_ptr` or a negative offset; GPURT_ERROR_IO with the path, the operation and the system's reason where the transfer fails; or a status every call may give (@ref statuses).
/// @par Ordering
/// Blocks until the bytes are written; not ordered after work queued on streams.
#[no_mangle]
pub extern "C" fn gpurt_gds_write(file: gpurt_gds_file_t, dev_ptr: *const c_void, size: usize, file_offset: i64, bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_gds_write", || {
        let done = super::write(handle_of(file), dev_ptr as u64, size as u64, file_offset)?;
        transferred(bytes, size, done, "wrote")
    })
}

/// Queues a read of `size` bytes at `file_offset` into `dev_ptr` on `stream`: it
/// starts after the work queued there before it, and work queued after it sees the
/// bytes. A read past the end of the file is refused at once; an error found when
/// the stream runs it is given by the next call on the file (or its close).
///
/// @param file a file from gpurt_gds_file_open
/// @param dev_ptr device memory that receives the bytes
/// @param size bytes to read
/// @param file_offset where in the file
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `file` or `stream`; GPURT_ERROR_INVALID_ARGUMENT for a read past the end of the file; GPURT_ERROR_IO with the path, the operation and the system's reason where the transfer fails; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Not capturable: the transfer runs from a host function.
#[no_mangle]
pub extern "C" fn gpurt_gds_read_async(file: gpurt_gds_file_t, dev_ptr: *mut c_void, size: usize, file_offset: i64, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_read_async", || super::queue(handle_of(file), dev_ptr as u64, size as u64, file_offset, Handle::from_ptr(stream), false))
}

/// Queues a write of `size` bytes from `dev_ptr` to the file at `file_offset` on
/// `stream`, in stream order (see gpurt_gds_read_async).
///
/// @param file a file from gpurt_gds_file_open
/// @param dev_ptr device memory to write
/// @param size bytes to write
/// @param file_offset where in the file
/// @param stream a gpurt stream (gpurt_current_stream gives this thread's current one)
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_HANDLE for a NULL, destroyed or wrong-kind `file` or `stream`; GPURT_ERROR_IO with the path, the operation and the system's reason where the transfer fails; or a status every call may give (@ref statuses).
/// @par Ordering
/// Enqueued on `stream`; returns without waiting for the device. While `stream` is being captured, the work is recorded into the graph instead. Not capturable: the transfer runs from a host function.
#[no_mangle]
pub extern "C" fn gpurt_gds_write_async(file: gpurt_gds_file_t, dev_ptr: *const c_void, size: usize, file_offset: i64, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_write_async", || super::queue(handle_of(file), dev_ptr as u64, size as u64, file_offset, Handle::from_ptr(stream), true))
}

/// Which path the GDS calls take (chosen once, see `GPURT_GDS_MODE`): cuFile with
/// GPUDirect Storage, cuFile's compatibility mode, or gpurt's staged path.
///
/// @param[out] mode receives the path the GDS calls take; must not be NULL
/// @return GPURT_SUCCESS; GPURT_ERROR_INVALID_ARGUMENT if an out-parameter is NULL; or a status every call may give (@ref statuses).
/// @par Ordering
/// Host-side only: does not wait for the device, enqueues no work, and may be called while a stream is being captured.
#[no_mangle]
pub extern "C" fn gpurt_gds_mode(mode: *mut gpurt_gds_mode_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_mode", || {
        Out::new(mode, "mode")?.write(super::mode());
        Ok(())
    })
}
