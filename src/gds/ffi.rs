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
pub type gpurt_gds_file_t = *mut gpurt_gds_file_s;

fn handle_of(file: gpurt_gds_file_t) -> Handle {
    Handle::from_ptr(file)
}

/// Opens `path` with POSIX `open` flags (`O_RDONLY`, `O_WRONLY` or `O_RDWR`, with
/// `O_CREAT`, `O_TRUNC`, `O_DIRECT` as wanted; a created file gets mode 0644).
/// `GPURT_ERROR_IO` with the system's reason where the file cannot be opened.
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
#[no_mangle]
pub extern "C" fn gpurt_gds_file_close(file: gpurt_gds_file_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_file_close", || super::close(handle_of(file)))
}

/// Registers `size` bytes of device memory at `ptr` for transfers (cuFile pins it
/// for the storage's DMA). Optional: unregistered device memory works too.
#[no_mangle]
pub extern "C" fn gpurt_gds_register_buffer(ptr: *mut c_void, size: usize) -> gpurt_status_t {
    boundary::call("gpurt_gds_register_buffer", || super::register_buffer(ptr as u64, size as u64))
}

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
#[no_mangle]
pub extern "C" fn gpurt_gds_read(file: gpurt_gds_file_t, dev_ptr: *mut c_void, size: usize, file_offset: i64, bytes: *mut usize) -> gpurt_status_t {
    boundary::call("gpurt_gds_read", || {
        let done = super::read(handle_of(file), dev_ptr as u64, size as u64, file_offset)?;
        transferred(bytes, size, done, "read")
    })
}

/// Writes `size` bytes of device memory at `dev_ptr` to the file at `file_offset`,
/// and returns when they are written. `bytes` (may be NULL) receives the count.
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
#[no_mangle]
pub extern "C" fn gpurt_gds_read_async(file: gpurt_gds_file_t, dev_ptr: *mut c_void, size: usize, file_offset: i64, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_read_async", || super::queue(handle_of(file), dev_ptr as u64, size as u64, file_offset, Handle::from_ptr(stream), false))
}

/// Queues a write of `size` bytes from `dev_ptr` to the file at `file_offset` on
/// `stream`, in stream order (see gpurt_gds_read_async).
#[no_mangle]
pub extern "C" fn gpurt_gds_write_async(file: gpurt_gds_file_t, dev_ptr: *const c_void, size: usize, file_offset: i64, stream: gpurt_stream_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_write_async", || super::queue(handle_of(file), dev_ptr as u64, size as u64, file_offset, Handle::from_ptr(stream), true))
}

/// Which path the GDS calls take (chosen once, see `GPURT_GDS_MODE`): cuFile with
/// GPUDirect Storage, cuFile's compatibility mode, or gpurt's staged path.
#[no_mangle]
pub extern "C" fn gpurt_gds_mode(mode: *mut gpurt_gds_mode_t) -> gpurt_status_t {
    boundary::call("gpurt_gds_mode", || {
        Out::new(mode, "mode")?.write(super::mode());
        Ok(())
    })
}
