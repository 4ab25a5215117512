//! A share group's registry: a file in shared memory (`/dev/shm/gpurt-share-UID-NAME`,
//! or under `GPURT_SHARE_DIR`) that the group's processes map, with a slot per member.
//! No daemon keeps it: each member prunes the slots of processes that died, and a lock
//! whose holder died is taken over, so a SIGKILL blocks no one. Members are processes
//! of one PID namespace: a member is its pid and start time.
//!
//! Its security boundary is the user: the file is made mode 0600 by its first member,
//! and a process opens it only if it is a regular file (never through a symbolic link)
//! that it owns, with no permission for group or others, of the registry's size and
//! layout; anything else is refused, naming what is wrong.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result, Status};
use crate::ipc::holders::Process;

/// Members a group holds at most (not `pub`: cbindgen would put it in the C header).
const MAX_MEMBERS: usize = 64;
const MAGIC: u64 = u64::from_le_bytes(*b"gpurtSHR");
const VERSION: u32 = 3;
/// How long a lock or a newly made registry is waited for before the call gives up.
const PATIENCE: Duration = Duration::from_secs(2);

#[repr(C)]
pub(super) struct Slot {
    /// The member's process id; 0: the slot is free. Written last on join, first on leave.
    pub(super) pid: AtomicU32,
    pub(super) device: AtomicI32,
    /// The process's start time (clock ticks after boot, /proc/PID/stat): a pid reused
    /// by another process is not the member.
    pub(super) started: AtomicU64,
    /// What the member lets others reclaim (`Offer`), set on join.
    pub(super) offer: AtomicU32,
    /// Requests made of the member so far (a futex word its server waits on).
    pub(super) asked: AtomicU32,
    /// The deepest `Offer` asked for since the member last served.
    pub(super) level: AtomicU32,
    /// The most bytes a request wanted since the member last served.
    pub(super) wanted: AtomicU64,
    /// The count of requests the member has served (a futex word requesters wait on).
    pub(super) served: AtomicU32,
    /// Bytes the member gave back serving its last request.
    pub(super) released: AtomicU64,
    /// Since when (CLOCK_MONOTONIC ns) its longest idle pool that it offers asleep has
    /// been idle; `NOT_IDLE`: none. Requests for pools go to the longest idle first.
    pub(super) idle_since: AtomicU64,
}

/// `Slot::idle_since` of a member with no idle pool on offer (not `pub`: cbindgen would
/// put it in the C header).
const NOT_IDLE: u64 = u64::MAX;

#[repr(C)]
pub(super) struct Table {
    magic: AtomicU64,
    version: AtomicU32,
    /// The pid holding the lock; 0: free.
    lock: AtomicU32,
    pub(super) slots: [Slot; MAX_MEMBERS],
}

const SIZE: usize = std::mem::size_of::<Table>();

/// A group's registry, mapped.
pub struct Registry {
    table: *const Table,
    path: String,
}

// SAFETY: the table is shared memory touched only through atomics.
unsafe impl Send for Registry {}
unsafe impl Sync for Registry {}

pub use crate::alloc::config::ShareOffer as Offer;

/// A member of the group, as (pid, device, what it offers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub pid: u32,
    pub device: i32,
    pub offer: Offer,
}

fn check_name(name: &str) -> Result<()> {
    let fine = !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if fine && !name.starts_with('.') {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!("share group name {name:?}: 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'")))
    }
}

/// The path of group `name`'s registry for this user.
pub fn path_of(name: &str) -> Result<String> {
    check_name(name)?;
    let dir = std::env::var("GPURT_SHARE_DIR").unwrap_or_else(|_| "/dev/shm".into());
    // SAFETY: geteuid cannot fail.
    Ok(format!("{dir}/gpurt-share-{}-{name}", unsafe { libc::geteuid() }))
}

fn os_error(what: &str, path: &str) -> Error {
    Error::new(Status::GPURT_ERROR_IO, format!("{what} {path}: {}", std::io::Error::last_os_error()))
}

impl Registry {
    /// Members a group holds at most.
    pub fn capacity() -> usize {
        MAX_MEMBERS
    }

    /// Opens group `name`'s registry, making it if there is none.
    pub fn open(name: &str) -> Result<Registry> {
        let path = path_of(name)?;
        let c_path = CString::new(path.clone()).map_err(|_| Error::invalid_argument("a share directory with a NUL byte"))?;
        let flags = libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a valid C string; the returned descriptor is owned by `File`.
        let (file, made) = unsafe {
            let fd = libc::open(c_path.as_ptr(), flags | libc::O_CREAT | libc::O_EXCL, 0o600 as libc::c_uint);
            if fd >= 0 {
                (File::from_raw_fd(fd), true)
            } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                let fd = libc::open(c_path.as_ptr(), flags);
                if fd < 0 {
                    return Err(os_error("cannot open the share registry", &path));
                }
                (File::from_raw_fd(fd), false)
            } else {
                return Err(os_error("cannot make the share registry", &path));
            }
        };
        if made {
            file.set_len(SIZE as u64).map_err(|e| Error::new(Status::GPURT_ERROR_IO, format!("cannot size the share registry {path}: {e}")))?;
        } else {
            // Another process made it a moment ago: empty until its maker sizes it.
            let start = Instant::now();
            while file.metadata().is_ok_and(|m| m.len() == 0) && start.elapsed() < PATIENCE {
                std::thread::sleep(Duration::from_millis(1));
            }
            check_owner(&file, &path)?;
        }
        let table = map(&file, &path)?;
        let registry = Registry { table, path };
        if made {
            let t = registry.table();
            t.version.store(VERSION, Ordering::Relaxed);
            t.magic.store(MAGIC, Ordering::Release);
        } else {
            registry.wait_until_made()?;
        }
        Ok(registry)
    }

    pub(super) fn table(&self) -> &Table {
        // SAFETY: mapped for SIZE bytes for as long as `self` lives.
        unsafe { &*self.table }
    }

    /// A registry another process is making has its magic once made: waited for
    /// within PATIENCE; one that never gets it, or has another version, is refused.
    fn wait_until_made(&self) -> Result<()> {
        let start = Instant::now();
        while self.table().magic.load(Ordering::Acquire) != MAGIC {
            if start.elapsed() > PATIENCE {
                return Err(Error::invalid_argument(format!("{} is not a gpurt share registry", self.path)));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let version = self.table().version.load(Ordering::Relaxed);
        if version != VERSION {
            return Err(Error::not_supported(format!("{} is a share registry of version {version}; this gpurt reads version {VERSION}", self.path)));
        }
        Ok(())
    }

    /// Runs `body` holding the registry's lock. A holder that died is replaced; a live
    /// one is waited for within PATIENCE.
    pub(super) fn locked<R>(&self, body: impl FnOnce(&Table) -> R) -> Result<R> {
        let t = self.table();
        let me = std::process::id();
        let start = Instant::now();
        loop {
            let holder = t.lock.load(Ordering::Relaxed);
            let free = holder == 0 || Process::read(holder).is_err();
            if free && t.lock.compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                let result = body(t);
                t.lock.store(0, Ordering::Release);
                return Ok(result);
            }
            if start.elapsed() > PATIENCE {
                return Err(Error::new(Status::GPURT_ERROR_NOT_READY, format!("the share registry {} stayed locked by process {holder}", self.path)));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// Takes a slot for this process on `device`, offering the group `offer`; `leave`
    /// gives it back.
    pub fn join(&self, device: i32, offer: Offer) -> Result<usize> {
        let me = Process::read(std::process::id())
            .map_err(|_| Error::not_supported("a share group needs /proc/self/stat to name this process"))?;
        self.locked(|t| {
            prune(t);
            let free = t.slots.iter().position(|s| s.pid.load(Ordering::Relaxed) == 0)?;
            let slot = &t.slots[free];
            slot.device.store(device, Ordering::Relaxed);
            slot.started.store(me.start, Ordering::Relaxed);
            slot.offer.store(offer as u32, Ordering::Relaxed);
            slot.level.store(0, Ordering::Relaxed);
            slot.wanted.store(0, Ordering::Relaxed);
            slot.idle_since.store(NOT_IDLE, Ordering::Relaxed);
            // A new member has served every request made of the slot before it.
            slot.served.store(slot.asked.load(Ordering::Relaxed), Ordering::Relaxed);
            slot.pid.store(me.pid, Ordering::Release);
            Some(free)
        })?
        .ok_or_else(|| Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, format!("the share group at {} has {MAX_MEMBERS} members already", self.path)))
    }

    /// Raises what this process's slot `slot` offers to at least `offer` (a pool of it
    /// offered more than the device did).
    pub fn raise_offer(&self, slot: usize, offer: Offer) -> Result<()> {
        let me = std::process::id();
        self.locked(|t| {
            if let Some(s) = t.slots.get(slot).filter(|s| s.pid.load(Ordering::Relaxed) == me) {
                s.offer.fetch_max(offer as u32, Ordering::AcqRel);
            }
        })
    }

    /// Says since when this process's longest idle pool on offer has been idle
    /// (CLOCK_MONOTONIC ns; `None`: none is); read without the lock.
    pub fn publish_idle(&self, slot: usize, since: Option<u64>) {
        let me = std::process::id();
        if let Some(s) = self.table().slots.get(slot).filter(|s| s.pid.load(Ordering::Relaxed) == me) {
            s.idle_since.store(since.unwrap_or(NOT_IDLE), Ordering::Relaxed);
        }
    }

    /// The live members on `device` other than slot `me` that offer at least `level`
    /// and have an idle pool on offer: (slot, idle since), longest idle first.
    pub fn idle_members(&self, me: Option<usize>, device: i32, level: Offer) -> Result<Vec<(usize, u64)>> {
        self.locked(|t| {
            prune(t);
            let mut idle: Vec<(usize, u64)> = t
                .slots
                .iter()
                .enumerate()
                .filter(|&(i, s)| {
                    Some(i) != me
                        && s.pid.load(Ordering::Acquire) != 0
                        && s.device.load(Ordering::Relaxed) == device
                        && Offer::from_u32(s.offer.load(Ordering::Relaxed)) >= level
                })
                .map(|(i, s)| (i, s.idle_since.load(Ordering::Relaxed)))
                .filter(|&(_, since)| since != NOT_IDLE)
                .collect();
            idle.sort_by_key(|&(_, since)| since);
            idle
        })
    }

    /// Gives back slot `slot`, if this process holds it.
    pub fn leave(&self, slot: usize) -> Result<()> {
        let me = std::process::id();
        self.locked(|t| {
            if let Some(s) = t.slots.get(slot).filter(|s| s.pid.load(Ordering::Relaxed) == me) {
                s.pid.store(0, Ordering::Release);
            }
        })
    }

    /// The live members, after freeing the slots of processes that are gone.
    pub fn members(&self) -> Result<Vec<Member>> {
        self.locked(|t| {
            prune(t);
            t.slots
                .iter()
                .filter(|s| s.pid.load(Ordering::Acquire) != 0)
                .map(|s| Member {
                    pid: s.pid.load(Ordering::Relaxed),
                    device: s.device.load(Ordering::Relaxed),
                    offer: Offer::from_u32(s.offer.load(Ordering::Relaxed)),
                })
                .collect()
        })
    }

    /// Runs `body` holding the lock (tests: a holder killed while holding it).
    #[doc(hidden)]
    pub fn with_lock<R>(&self, body: impl FnOnce() -> R) -> Result<R> {
        self.locked(|_| body())
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // SAFETY: mapped by `map` for SIZE bytes; nothing borrows it past `self`.
        unsafe { libc::munmap(self.table as *mut libc::c_void, SIZE) };
    }
}

/// Frees the slots of members that are gone (their pid absent, or another process's).
pub(super) fn prune(t: &Table) {
    for s in &t.slots {
        let pid = s.pid.load(Ordering::Acquire);
        if pid != 0 && !(Process { pid, start: s.started.load(Ordering::Relaxed) }).is_alive() {
            s.pid.store(0, Ordering::Release);
        }
    }
}

/// The registry file must be ours, regular, 0600 at most, and of the registry's size.
fn check_owner(file: &File, path: &str) -> Result<()> {
    // SAFETY: a zeroed stat is a valid out-parameter; the descriptor is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return Err(os_error("cannot stat the share registry", path));
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let refuse = |why: String| Err(Error::invalid_argument(format!("refusing the share registry {path}: {why}")));
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return refuse("not a regular file".into());
    }
    if st.st_uid != me {
        return refuse(format!("owned by user {}, not this process's user {me}", st.st_uid));
    }
    if st.st_mode & 0o077 != 0 {
        return refuse(format!("mode {:o}: group or others may use it (a registry is 0600)", st.st_mode & 0o777));
    }
    if st.st_size as usize != SIZE {
        return refuse(format!("{} bytes, a registry has {SIZE}", st.st_size));
    }
    Ok(())
}

fn map(file: &File, path: &str) -> Result<*const Table> {
    // SAFETY: a shared read-write mapping of a descriptor sized SIZE (set or checked).
    let p = unsafe { libc::mmap(std::ptr::null_mut(), SIZE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, file.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED {
        return Err(os_error("cannot map the share registry", path));
    }
    Ok(p as *const Table)
}
