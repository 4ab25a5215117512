//! cuFile (`libcufile.so.0`, GPUDirect Storage), loaded at run time the first time a
//! GDS call needs it: without it gpurt's own staged path serves every call. Only the
//! functions gpurt uses, with cuFile's C types.

use std::ffi::{c_int, c_void};

/// `CUfileError_t`: cuFile's status and, for `CU_FILE_CUDA_DRIVER_ERROR`, the CUresult.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CuFileError {
    pub err: c_int,
    pub cu_err: c_int,
}

#[repr(C)]
union FdOrHandle {
    fd: c_int,
    handle: *mut c_void,
}

/// `CUfileDescr_t` for a POSIX file descriptor.
#[repr(C)]
struct Descr {
    kind: c_int,
    handle: FdOrHandle,
    fs_ops: *const c_void,
}

const CU_FILE_HANDLE_TYPE_OPAQUE_FD: c_int = 1;
const CU_FILE_SUCCESS: c_int = 0;

pub type FileHandle = *mut c_void;

type ReadAsync = unsafe extern "C" fn(FileHandle, *mut c_void, *mut usize, *mut i64, *mut i64, *mut isize, *mut c_void) -> CuFileError;

pub struct CuFile {
    _lib: libloading::Library,
    handle_register: unsafe extern "C" fn(*mut FileHandle, *mut Descr) -> CuFileError,
    handle_deregister: unsafe extern "C" fn(FileHandle),
    buf_register: unsafe extern "C" fn(*const c_void, usize, c_int) -> CuFileError,
    buf_deregister: unsafe extern "C" fn(*const c_void) -> CuFileError,
    read: unsafe extern "C" fn(FileHandle, *mut c_void, usize, i64, i64) -> isize,
    write: unsafe extern "C" fn(FileHandle, *const c_void, usize, i64, i64) -> isize,
    /// `cuFileReadAsync` / `cuFileWriteAsync` (CUDA 12.2+), where present.
    read_async: Option<ReadAsync>,
    write_async: Option<ReadAsync>,
}

// cuFile's entry points are thread-safe after cuFileDriverOpen.
unsafe impl Send for CuFile {}
unsafe impl Sync for CuFile {}

pub const LIBRARY: &str = "libcufile.so.0";

/// What a failed cuFile call said.
pub fn describe(e: CuFileError) -> String {
    match e.err {
        5011 => format!("a CUDA driver error ({})", e.cu_err),
        code => format!("cuFile error {code}"),
    }
}

fn status(e: CuFileError, call: &str) -> Result<(), String> {
    match e.err {
        CU_FILE_SUCCESS => Ok(()),
        _ => Err(format!("{call} failed: {}", describe(e))),
    }
}

/// Loads cuFile and opens its driver.
pub fn load() -> Result<CuFile, String> {
    let lib = unsafe { libloading::Library::new(LIBRARY) }.map_err(|e| format!("{LIBRARY} does not load ({e})"))?;
    macro_rules! symbol {
        ($name:literal) => {
            unsafe { lib.get($name.as_bytes()) }.map(|s: libloading::Symbol<_>| *s).map_err(|_| format!("{LIBRARY} lacks {}", $name))?
        };
    }
    let driver_open: unsafe extern "C" fn() -> CuFileError = symbol!("cuFileDriverOpen");
    let optional = |name: &str| unsafe { lib.get::<ReadAsync>(name.as_bytes()) }.ok().map(|s| *s);
    let cufile = CuFile {
        handle_register: symbol!("cuFileHandleRegister"),
        handle_deregister: symbol!("cuFileHandleDeregister"),
        buf_register: symbol!("cuFileBufRegister"),
        buf_deregister: symbol!("cuFileBufDeregister"),
        read: symbol!("cuFileRead"),
        write: symbol!("cuFileWrite"),
        read_async: optional("cuFileReadAsync"),
        write_async: optional("cuFileWriteAsync"),
        _lib: lib,
    };
    status(unsafe { driver_open() }, "cuFileDriverOpen")?;
    Ok(cufile)
}

impl CuFile {
    pub fn register_fd(&self, fd: c_int) -> Result<FileHandle, String> {
        let mut descr = Descr { kind: CU_FILE_HANDLE_TYPE_OPAQUE_FD, handle: FdOrHandle { fd }, fs_ops: std::ptr::null() };
        let mut handle = std::ptr::null_mut();
        status(unsafe { (self.handle_register)(&mut handle, &mut descr) }, "cuFileHandleRegister")?;
        Ok(handle)
    }
    pub fn deregister_fd(&self, handle: FileHandle) {
        unsafe { (self.handle_deregister)(handle) }
    }
    pub fn register_buffer(&self, ptr: u64, size: u64) -> Result<(), String> {
        status(unsafe { (self.buf_register)(ptr as *const c_void, size as usize, 0) }, "cuFileBufRegister")
    }
    pub fn deregister_buffer(&self, ptr: u64) -> Result<(), String> {
        status(unsafe { (self.buf_deregister)(ptr as *const c_void) }, "cuFileBufDeregister")
    }
    /// Bytes read (fewer at the end of the file), or cuFile's negative answer.
    pub fn read(&self, handle: FileHandle, ptr: u64, size: u64, offset: u64) -> isize {
        unsafe { (self.read)(handle, ptr as *mut c_void, size as usize, offset as i64, 0) }
    }
    pub fn write(&self, handle: FileHandle, ptr: u64, size: u64, offset: u64) -> isize {
        unsafe { (self.write)(handle, ptr as *const c_void, size as usize, offset as i64, 0) }
    }
    /// Queues a read (`write == false`) or write on `stream`. The parameters must stay
    /// where they are until the stream has run it.
    pub fn queue(&self, write: bool, handle: FileHandle, ptr: u64, p: &mut AsyncParams, stream: *mut c_void) -> Result<(), String> {
        let (call, name) = match write {
            false => (self.read_async, "cuFileReadAsync"),
            true => (self.write_async, "cuFileWriteAsync"),
        };
        let call = call.ok_or_else(|| format!("{LIBRARY} lacks {name}"))?;
        status(unsafe { call(handle, ptr as *mut c_void, &mut p.size, &mut p.file_offset, &mut p.buffer_offset, &mut p.done, stream) }, name)
    }
    pub fn has_async(&self) -> bool {
        self.read_async.is_some() && self.write_async.is_some()
    }
}

/// The parameters of a queued cuFile read or write, read by cuFile when the stream
/// reaches it.
#[derive(Debug, Default)]
pub struct AsyncParams {
    pub size: usize,
    pub file_offset: i64,
    pub buffer_offset: i64,
    pub done: isize,
}
