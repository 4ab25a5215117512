//! Files to and from device memory (`torch.cuda.gds`): GPUDirect Storage through
//! cuFile where the machine has it (the `nvidia-fs` driver), else gpurt's staged path
//! (`staged.rs`). The same calls work either way; `mode` says which runs.
//!
//! The choice, made once (`GPURT_GDS_MODE`: `auto`, the default; `cufile`; `staged`):
//! with `nvidia-fs` loaded and cuFile present, cuFile (true GDS). Without
//! `nvidia-fs`, cuFile only runs in its compatibility mode, which reads through its
//! own small bounce buffers with one thread; gpurt's staged path, with several
//! threads and the copy engine overlapped, is faster there (`benches/gds.rs`), so
//! `auto` takes it. `cufile` asks for cuFile in any case (compatibility mode included).

pub mod cufile;
pub mod ffi;
pub mod staged;

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys;

use crate::boundary::{check_range, lock};
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, Kind, Registry};
use cufile::CuFile;

/// The path gpurt_gds_* calls take (gpurt_gds_mode).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gpurt_gds_mode_t {
    /// cuFile with GPUDirect Storage: the storage's DMA reaches device memory.
    GPURT_GDS_MODE_GDS = 1,
    /// cuFile in its compatibility mode (no `nvidia-fs`), asked for with `GPURT_GDS_MODE=cufile`.
    GPURT_GDS_MODE_COMPAT = 2,
    /// gpurt's staged path: the file through pinned buffers, overlapped with the copies.
    GPURT_GDS_MODE_STAGED = 3,
}
pub use gpurt_gds_mode_t as Mode;

enum Backend {
    CuFile { cufile: CuFile, mode: Mode },
    Staged,
}

fn nvidia_fs_present() -> bool {
    std::path::Path::new("/proc/driver/nvidia-fs/version").exists() || std::path::Path::new("/dev/nvidia-fs0").exists()
}

fn backend() -> &'static Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let wanted = std::env::var("GPURT_GDS_MODE").unwrap_or_default().trim().to_ascii_lowercase();
        let gds = nvidia_fs_present();
        let (backend, why) = match wanted.as_str() {
            "staged" => (Backend::Staged, "GPURT_GDS_MODE=staged".to_string()),
            "cufile" | "auto" | "" if gds || wanted == "cufile" => match cufile::load() {
                Ok(cufile) => {
                    let mode = if gds { Mode::GPURT_GDS_MODE_GDS } else { Mode::GPURT_GDS_MODE_COMPAT };
                    (Backend::CuFile { cufile, mode }, format!("cuFile ({})", if gds { "GPUDirect Storage" } else { "compatibility mode" }))
                }
                Err(why) => (Backend::Staged, format!("{why}: the staged path instead")),
            },
            "auto" | "" => (Backend::Staged, "no nvidia-fs driver (cuFile would run in compatibility mode)".to_string()),
            other => (Backend::Staged, format!("GPURT_GDS_MODE={other:?} is not auto, cufile or staged: the staged path")),
        };
        crate::log::log(crate::log::Level::Info, &format!("GDS: {why}"));
        backend
    })
}

pub fn mode() -> Mode {
    match backend() {
        Backend::CuFile { mode, .. } => *mode,
        Backend::Staged => Mode::GPURT_GDS_MODE_STAGED,
    }
}

/// An open file: its descriptor (closed when the last queued transfer is done with
/// it), how it was opened, and the first error of a queued transfer, given to the
/// next call on the file.
pub struct FileInner {
    fd: OwnedFd,
    path: String,
    readable: bool,
    writable: bool,
    direct: bool,
    deferred: Mutex<Option<Error>>,
}

impl FileInner {
    fn open(path: &str, flags: i32) -> Result<FileInner> {
        let c_path = CString::new(path).map_err(|_| Error::invalid_argument("the path holds a NUL byte"))?;
        let fd = unsafe { libc::open(c_path.as_ptr(), flags | libc::O_CLOEXEC, 0o644 as libc::c_uint) };
        if fd < 0 {
            return Err(Error::new(Status::GPURT_ERROR_IO, format!("open {path:?}: {}", std::io::Error::last_os_error())));
        }
        let access = flags & libc::O_ACCMODE;
        Ok(FileInner {
            // SAFETY: `open` just gave this descriptor, owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_string(),
            readable: access != libc::O_WRONLY,
            writable: access != libc::O_RDONLY,
            direct: flags & libc::O_DIRECT != 0,
            deferred: Mutex::new(None),
        })
    }
    fn io_error(&self, what: &str, e: std::io::Error) -> Error {
        Error::new(Status::GPURT_ERROR_IO, format!("{what} {:?}: {e}", self.path))
    }
    fn short(&self, at: u64) -> Error {
        Error::new(Status::GPURT_ERROR_IO, format!("{:?} ends at byte {at}, before the bytes asked for (was it truncated?)", self.path))
    }
    fn len(&self) -> Result<u64> {
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(self.fd.as_raw_fd(), &mut stat) } != 0 {
            return Err(self.io_error("fstat", std::io::Error::last_os_error()));
        }
        Ok(stat.st_size as u64)
    }
    fn defer(&self, e: Error) {
        lock(&self.deferred).get_or_insert(e);
    }
    /// The first error of a queued transfer since the last call, if any.
    fn take_deferred(&self) -> Result<()> {
        lock(&self.deferred).take().map_or(Ok(()), Err)
    }
}

pub struct GdsFile {
    inner: Arc<FileInner>,
    /// cuFile's handle of the descriptor, in the cuFile modes.
    cufile: Option<usize>,
}

impl Drop for GdsFile {
    fn drop(&mut self) {
        if let (Some(handle), Backend::CuFile { cufile, .. }) = (self.cufile, backend()) {
            cufile.deregister_fd(handle as cufile::FileHandle);
        }
    }
}

static FILES: Registry<GdsFile> = Registry::new(Kind::GdsFile);

/// Opens `path` with POSIX `open` flags (`O_RDONLY`, `O_WRONLY`, `O_RDWR`, with
/// `O_CREAT`, `O_TRUNC`, `O_DIRECT`, ...); a created file gets mode 0644.
pub fn open(path: &str, flags: i32) -> Result<Handle> {
    let inner = FileInner::open(path, flags)?;
    // A file cuFile refuses (a file system it does not support, with its
    // compatibility mode off) takes the staged path: the calls still work.
    let cufile = match backend() {
        Backend::CuFile { cufile, .. } => match cufile.register_fd(inner.fd.as_raw_fd()) {
            Ok(handle) => Some(handle as usize),
            Err(why) => {
                crate::log::log(crate::log::Level::Info, &format!("GDS: {path:?} takes the staged path: {why}"));
                None
            }
        },
        Backend::Staged => None,
    };
    FILES.insert(GdsFile { inner: Arc::new(inner), cufile })
}

/// Closes a file's handle. Transfers still queued on streams keep the descriptor
/// open until they have run.
pub fn close(handle: Handle) -> Result<()> {
    let file = FILES.get(handle)?;
    FILES.remove(handle)?;
    file.inner.take_deferred()
}

/// Device buffers registered for GDS (by start: size).
static REGISTERED: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);

/// Registers a device buffer for transfers (cuFile pins it for the storage's DMA;
/// on the staged path registration only records it). Unregistered buffers work too.
pub fn register_buffer(ptr: u64, size: u64) -> Result<()> {
    if ptr == 0 || size == 0 {
        return Err(Error::invalid_argument("a registered buffer needs a non-NULL pointer and a size"));
    }
    check_range(ptr, size, "ptr")?;
    device_of(ptr)?;
    let mut registered = lock(&REGISTERED);
    let registered = registered.get_or_insert_with(HashMap::new);
    if registered.contains_key(&ptr) {
        return Err(Error::invalid_argument(format!("{ptr:#x} is registered already")));
    }
    if let Backend::CuFile { cufile, .. } = backend() {
        cufile.register_buffer(ptr, size).map_err(|e| Error::new(Status::GPURT_ERROR_IO, e))?;
    }
    registered.insert(ptr, size);
    Ok(())
}

pub fn deregister_buffer(ptr: u64) -> Result<()> {
    let mut registered = lock(&REGISTERED);
    if registered.as_mut().and_then(|r| r.remove(&ptr)).is_none() {
        return Err(Error::invalid_argument(format!("{ptr:#x} is not a registered buffer")));
    }
    if let Backend::CuFile { cufile, .. } = backend() {
        cufile.deregister_buffer(ptr).map_err(|e| Error::new(Status::GPURT_ERROR_IO, e))?;
    }
    Ok(())
}

/// The device whose memory `ptr` is (device memory only).
fn device_of(ptr: u64) -> Result<i32> {
    crate::device::require_device()?;
    let (mut kind, mut ordinal) = (0u32, 0i32);
    let attribute = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    let known = unsafe { sys::cuPointerGetAttribute((&mut kind as *mut u32).cast(), attribute, ptr) };
    if known != sys::CUresult::CUDA_SUCCESS || kind != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
        return Err(Error::invalid_argument(format!("{ptr:#x} is not device memory")));
    }
    let attribute = sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
    crate::driver::check(unsafe { sys::cuPointerGetAttribute((&mut ordinal as *mut i32).cast(), attribute, ptr) }, "cuPointerGetAttribute")?;
    Ok(ordinal)
}

/// A transfer's checks: the file open the right way, no error left from a queued
/// transfer, the ranges sound. Gives the file and the buffer's device.
fn prepare(handle: Handle, ptr: u64, size: u64, offset: i64, write: bool) -> Result<(Arc<GdsFile>, i32)> {
    let file = FILES.get(handle)?;
    let inner = &file.inner;
    match write {
        false if !inner.readable => return Err(Error::invalid_argument(format!("{:?} was opened write-only (O_WRONLY): it cannot be read", inner.path))),
        true if !inner.writable => return Err(Error::invalid_argument(format!("{:?} was opened read-only (O_RDONLY): it cannot be written", inner.path))),
        _ => {}
    }
    inner.take_deferred()?;
    let offset = u64::try_from(offset).map_err(|_| Error::invalid_argument(format!("file offset {offset} is negative")))?;
    check_range(offset, size, "file_offset")?;
    if ptr == 0 {
        return Err(Error::invalid_argument("the device pointer is NULL"));
    }
    check_range(ptr, size, "dev_ptr")?;
    crate::alloc::device::require_awake(ptr)?;
    Ok((file, device_of(ptr)?))
}

fn cufile_result(file: &FileInner, what: &str, answer: isize) -> Result<u64> {
    match answer {
        n if n >= 0 => Ok(n as u64),
        -1 => Err(file.io_error(what, std::io::Error::last_os_error())),
        code => Err(Error::new(Status::GPURT_ERROR_IO, format!("{what} {:?}: cuFile error {}", file.path, -code))),
    }
}

/// Reads `size` bytes at `offset` of the file into device memory at `ptr`; gives the
/// bytes read (fewer at the end of the file). Returns when they are there.
pub fn read(handle: Handle, ptr: u64, size: u64, offset: i64) -> Result<u64> {
    let (file, device) = prepare(handle, ptr, size, offset, false)?;
    match (backend(), file.cufile) {
        (Backend::CuFile { cufile, .. }, Some(fh)) => crate::device::with_device(device, || {
            cufile_result(&file.inner, "cuFileRead", cufile.read(fh as cufile::FileHandle, ptr, size, offset as u64))
        }),
        _ => staged::read(&file.inner, device, ptr, size, offset as u64),
    }
}

/// Writes `size` bytes of device memory at `ptr` to the file at `offset`.
pub fn write(handle: Handle, ptr: u64, size: u64, offset: i64) -> Result<u64> {
    let (file, device) = prepare(handle, ptr, size, offset, true)?;
    match (backend(), file.cufile) {
        (Backend::CuFile { cufile, .. }, Some(fh)) => crate::device::with_device(device, || {
            cufile_result(&file.inner, "cuFileWrite", cufile.write(fh as cufile::FileHandle, ptr, size, offset as u64))
        }),
        _ => staged::write(&file.inner, device, ptr, size, offset as u64),
    }
}

/// A queued cuFile transfer's parameters and file, kept until the stream has run it.
struct Queued {
    params: cufile::AsyncParams,
    file: Arc<GdsFile>,
    what: &'static str,
}

unsafe extern "C" fn cufile_done(data: *mut libc::c_void) {
    // SAFETY: the box `queue` leaked for this one call.
    let queued = unsafe { Box::from_raw(data.cast::<Queued>()) };
    let inner = &queued.file.inner;
    match cufile_result(inner, queued.what, queued.params.done) {
        Ok(n) if n < queued.params.size as u64 => inner.defer(inner.short(queued.params.file_offset as u64 + n)),
        Ok(_) => {}
        Err(e) => inner.defer(e),
    }
}

/// Queues a read (or write) on `stream`: it runs after the work queued there before
/// it, and work queued after it sees its bytes. A read past the end of the file is
/// refused at once; an error found when the stream runs it is given by the next call
/// on the file (or its close).
pub fn queue(handle: Handle, ptr: u64, size: u64, offset: i64, stream: Handle, write: bool) -> Result<()> {
    let (file, device) = prepare(handle, ptr, size, offset, write)?;
    let s = crate::stream::get(stream)?;
    if s.device() != device {
        return Err(Error::invalid_argument(format!("the stream is on device {}, the buffer on device {device}", s.device())));
    }
    let offset = offset as u64;
    if !write {
        let len = file.inner.len()?;
        if offset + size > len {
            return Err(file.inner.short(len));
        }
    }
    if size == 0 {
        return Ok(());
    }
    let access = if write { crate::sanitizer::Access::Read } else { crate::sanitizer::Access::Write };
    crate::sanitizer::access(s, ptr, size, access, if write { "gpurt_gds_write_async" } else { "gpurt_gds_read_async" });
    match (backend(), file.cufile) {
        (Backend::CuFile { cufile, .. }, Some(fh)) if cufile.has_async() => {
            let what = if write { "cuFileWriteAsync" } else { "cuFileReadAsync" };
            let params = cufile::AsyncParams { size: size as usize, file_offset: offset as i64, buffer_offset: 0, done: 0 };
            let queued = Box::into_raw(Box::new(Queued { params, file: file.clone(), what }));
            let run = |cu: sys::CUstream| {
                let params = unsafe { &mut (*queued).params };
                if let Err(e) = cufile.queue(write, fh as cufile::FileHandle, ptr, params, cu.cast()) {
                    drop(unsafe { Box::from_raw(queued) });
                    return Err(Error::new(Status::GPURT_ERROR_IO, e));
                }
                // Where the host function cannot be queued, the box stays with the
                // process (cuFile will still read its parameters): a few bytes, once.
                crate::driver::check(unsafe { sys::cuLaunchHostFunc(cu, Some(cufile_done), queued.cast()) }, "cuLaunchHostFunc")
            };
            crate::device::with_device(device, || s.run(run))
        }
        _ => staged::queue(&file.inner, ptr, size, offset, stream, write),
    }
}
