//! Blocks of expandable segments between processes, as PyTorch shares them: the
//! producer exports each physical allocation (mapping) a block lies on as a POSIX
//! file descriptor and lists them, with their sizes, in a memfd; the consumer copies
//! the list's and the allocations' descriptors out of the producer with
//! `pidfd_getfd` (Linux 5.6, and ptrace access to the producer: the same user, and
//! what Yama allows), imports each allocation, and maps them in order into an
//! address range of its own that holds just those mappings.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use cudarc::driver::sys;
use libc::{c_int, c_void};

use super::holders::Process;
use crate::device;
use crate::driver::check;
use crate::error::{Error, Result, Status};

const POSIX_FD: sys::CUmemAllocationHandleType = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

/// Bytes of one entry of the list: the producer's descriptor (i64) and the size (u64).
const ENTRY: usize = 16;

/// The seals an exported list carries: its bytes can no longer change.
const LIST_SEALS: c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

/// What the producer keeps open while a block is exported: the list and the
/// descriptor of each mapping it names (closed when the export goes).
pub struct Shared {
    list: OwnedFd,
    _mappings: Vec<OwnedFd>,
    count: u32,
}

impl Shared {
    /// The list's descriptor in this process, and how many mappings it names.
    pub fn list(&self) -> (i32, u32) {
        (self.list.as_raw_fd(), self.count)
    }
}

/// Exports the mappings `(start, size)` of `device` a block lies on.
pub fn share(device: i32, mappings: &[(u64, u64)]) -> Result<Shared> {
    let descriptors = device::with_device(device, || mappings.iter().map(|&(start, _)| export_mapping(start)).collect::<Result<Vec<_>>>())?;
    let bytes: Vec<u8> =
        descriptors.iter().zip(mappings).flat_map(|(fd, &(_, size))| (fd.as_raw_fd() as i64).to_le_bytes().into_iter().chain(size.to_le_bytes())).collect();
    // SAFETY: a NUL-terminated name; the result is checked.
    let raw = unsafe { libc::memfd_create(c"gpurt-ipc-mappings".as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(os_error("memfd_create"));
    }
    // SAFETY: a descriptor just opened, owned by nothing else.
    let list = File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    list.write_all_at(&bytes, 0).map_err(|e| Error::new(Status::GPURT_ERROR_IO, format!("writing the IPC mapping list: {e}")))?;
    // Sealed, so that a consumer reads the list as it was exported (SECURITY.md).
    // SAFETY: fcntl on a descriptor owned here; the result is checked.
    if unsafe { libc::fcntl(list.as_raw_fd(), libc::F_ADD_SEALS, LIST_SEALS | libc::F_SEAL_SEAL) } != 0 {
        return Err(os_error("sealing the IPC mapping list"));
    }
    Ok(Shared { list: list.into(), _mappings: descriptors, count: mappings.len() as u32 })
}

fn export_mapping(start: u64) -> Result<OwnedFd> {
    let mut handle = 0;
    check(unsafe { sys::cuMemRetainAllocationHandle(&mut handle, start as *mut c_void) }, "cuMemRetainAllocationHandle")?;
    let mut fd: c_int = -1;
    let exported = check(unsafe { sys::cuMemExportToShareableHandle((&mut fd as *mut c_int).cast(), handle, POSIX_FD, 0) }, "cuMemExportToShareableHandle");
    unsafe { sys::cuMemRelease(handle) };
    exported.map_err(|e| {
        e.context(
            "exporting the block's memory as a POSIX descriptor (memory mapped while the driver refused shareable memory cannot be: \
             allocate shared blocks with expandable_segments:False)",
        )
    })?;
    // SAFETY: the driver made this descriptor for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A producer's mappings, imported and mapped here in order from `base`, in an
/// address range of `reserved` bytes.
pub struct Imported {
    pub base: u64,
    device: i32,
    pub reserved: u64,
    sizes: Vec<u64>,
}

/// Maps here, on `device`, the `count` mappings listed at descriptor `list_fd` of
/// `producer`.
pub fn import(device: i32, producer: Process, list_fd: i32, count: u32) -> Result<Imported> {
    let pidfd = pidfd_open(producer)?;
    let list = File::from(pidfd_getfd(&pidfd, list_fd)?);
    // A handle is another process's bytes (SECURITY.md): its descriptor must be a list
    // gpurt sealed, whose entries cannot change after they are checked.
    // SAFETY: fcntl on a descriptor owned here.
    let seals = unsafe { libc::fcntl(list.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & LIST_SEALS != LIST_SEALS {
        return Err(Error::invalid_handle(format!(
            "descriptor {list_fd} of process {} is not a sealed gpurt list of mappings: not a gpurt IPC handle's",
            producer.pid
        )));
    }
    // The count is the handle's (any bytes); the list's length is the exporter's.
    let length = list.metadata().map(|m| m.len()).unwrap_or(0);
    if count == 0 || length != (ENTRY as u64) * count as u64 {
        return Err(Error::invalid_handle(format!("the handle names {count} mappings, the exporter's list {}: not this export's handle", length / ENTRY as u64)));
    }
    let mut bytes = vec![0; ENTRY * count as usize];
    list.read_exact_at(&mut bytes, 0).map_err(|e| Error::invalid_handle(format!("reading the exporter's list of mappings: {e}")))?;
    let entries: Vec<(i32, u64)> =
        bytes.chunks(ENTRY).map(|e| (i64::from_le_bytes(e[..8].try_into().expect("8")) as i32, u64::from_le_bytes(e[8..].try_into().expect("8")))).collect();
    device::with_device(device, || {
        let mut handles = Vec::with_capacity(entries.len());
        let imported = entries.iter().try_for_each(|&(fd, _)| {
            let local = pidfd_getfd(&pidfd, fd)?;
            let mut handle = 0;
            check(unsafe { sys::cuMemImportFromShareableHandle(&mut handle, local.as_raw_fd() as isize as *mut c_void, POSIX_FD) }, "cuMemImportFromShareableHandle")
                .map_err(|e| {
                    Error::invalid_handle(format!(
                        "descriptor {fd} of process {} is not CUDA memory the driver imports ({}): not a gpurt IPC handle's",
                        producer.pid, e.message
                    ))
                })?;
            handles.push(handle);
            Ok(())
        });
        let mapped = imported.and_then(|()| map_in_order(device, &handles, &entries));
        // The mappings keep the memory: the handles go either way.
        handles.iter().for_each(|&h| unsafe {
            sys::cuMemRelease(h);
        });
        mapped
    })
}

/// Reserves a range for the mappings and maps each in order; on failure, undoes it.
fn map_in_order(device: i32, handles: &[sys::CUmemGenericAllocationHandle], entries: &[(i32, u64)]) -> Result<Imported> {
    let sizes: Vec<u64> = entries.iter().map(|&(_, size)| size).collect();
    let total = sizes.iter().try_fold(0u64, |sum, &size| sum.checked_add(size)).ok_or_else(|| Error::invalid_handle("the exporter's mappings add up past 2^64 bytes"))?;
    let mut base = 0;
    check(unsafe { sys::cuMemAddressReserve(&mut base, total as usize, 0, 0, 0) }, "cuMemAddressReserve")?;
    let mut imported = Imported { base, device, reserved: total, sizes: Vec::with_capacity(sizes.len()) };
    let mut at = base;
    for (&handle, &size) in handles.iter().zip(&sizes) {
        if let Err(e) = check(unsafe { sys::cuMemMap(at, size as usize, 0, handle, 0) }, "cuMemMap") {
            unmap(&imported);
            return Err(e);
        }
        imported.sizes.push(size);
        at += size;
    }
    if let Err(e) = device::peers::mapped(device, base, total) {
        unmap(&imported);
        return Err(e);
    }
    Ok(imported)
}

/// Unmaps what `import` mapped and frees its addresses (in the device's context).
pub fn unmap(imported: &Imported) {
    device::peers::unmapped(imported.device, imported.base, imported.reserved);
    let mut at = imported.base;
    for &size in &imported.sizes {
        unsafe { sys::cuMemUnmap(at, size as usize) };
        at += size;
    }
    unsafe { sys::cuMemAddressFree(imported.base, imported.reserved as usize) };
}

fn os_error(call: &str) -> Error {
    Error::new(Status::GPURT_ERROR_IO, format!("{call}: {}", std::io::Error::last_os_error()))
}

fn needs_pidfd() -> Error {
    Error::not_supported("opening a block of an expandable segment needs pidfd_open and pidfd_getfd (Linux 5.6 or newer)")
}

/// A descriptor of `producer`, checked to be the process that exported (not another
/// one that took its pid since: the descriptor pins the process it names).
fn pidfd_open(producer: Process) -> Result<OwnedFd> {
    // SAFETY: a plain syscall; the result is checked.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, producer.pid as libc::pid_t, 0) } as c_int;
    if raw < 0 {
        return Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS) => needs_pidfd(),
            _ => Error::invalid_handle("the process that exported the block has exited"),
        });
    }
    // SAFETY: a descriptor just opened, owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw) };
    if Process::read(producer.pid).ok().map(|p| p.start) != Some(producer.start) {
        return Err(Error::invalid_handle("the process that exported the block has exited"));
    }
    Ok(pidfd)
}

/// A copy here of descriptor `fd` of the process `pidfd` names.
fn pidfd_getfd(pidfd: &OwnedFd, fd: i32) -> Result<OwnedFd> {
    // SAFETY: a plain syscall; the result is checked.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) } as c_int;
    if raw < 0 {
        return Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::ENOSYS) => needs_pidfd(),
            Some(libc::EPERM) => ptrace_refused(),
            Some(libc::ESRCH) => Error::invalid_handle("the process that exported the block has exited"),
            _ => Error::invalid_handle("the exporting process no longer holds the block's descriptors: it freed the block"),
        });
    }
    // SAFETY: a descriptor just made for us.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Why the kernel refused pidfd_getfd, from what it checks: ptrace access.
fn ptrace_refused() -> Error {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").map(|s| s.trim().to_string());
    let why = match scope.as_deref() {
        Ok("1") => "Yama's kernel.yama.ptrace_scope is 1: only the exporter's ancestors may, unless the exporter names this process \
                    with prctl(PR_SET_PTRACER, pid) (or PR_SET_PTRACER_ANY)"
            .to_string(),
        Ok("0") | Err(_) => "the processes run as different users, or a security module refuses".to_string(),
        Ok(n) => format!("Yama's kernel.yama.ptrace_scope is {n}, which forbids it"),
    };
    Error::not_supported(format!(
        "the kernel refused to copy the exporting process's memory descriptors (pidfd_getfd needs ptrace access to it): {why}"
    ))
}
