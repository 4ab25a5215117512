//! Which processes hold each exported block: a table in a shared-memory file that
//! the producer creates and every consumer maps (torch's `CudaIPCRefCounter` file).
//!
//! A slot per exported block: a state word (the export's generation, and whether it
//! is still open to new holders) and up to `HOLDERS` holder words, each naming one
//! consumer process by pid and start time, so that a pid the kernel reuses is never
//! taken for the process that died. A consumer claims a word, then checks that the
//! export is still open; the producer closes the export, then reads the words. Both
//! sides use sequentially consistent operations, so at least one of them sees the
//! other: a consumer never keeps a hold that the producer did not see.

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;

use crate::error::{Error, Result, Status};

/// Consumer processes that may hold one exported block at once.
pub(crate) const HOLDERS: usize = 15;
/// Exported blocks a producer may have at once (the file is sparse: only the pages of
/// slots in use take memory).
pub(crate) const SLOTS: u32 = 1 << 16;

const MAGIC: u64 = u64::from_le_bytes(*b"gpurtHLD");
const HEADER: usize = 128;
const PID_BITS: u32 = 22;
const START_BITS: u32 = 64 - PID_BITS;

#[repr(C, align(128))]
struct Slot {
    /// `generation << 1 | open`.
    state: AtomicU64,
    holders: [AtomicU64; HOLDERS],
}

/// A process, as a holder word: its pid and its start time (clock ticks since boot),
/// which together never name two processes during one boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Process {
    pub pid: u32,
    pub start: u64,
}

impl Process {
    /// This process (read once).
    pub fn current() -> Result<Process> {
        static CURRENT: OnceLock<Option<Process>> = OnceLock::new();
        let pid = std::process::id();
        CURRENT
            .get_or_init(|| Process::read(pid).ok())
            .ok_or_else(|| Error::new(Status::GPURT_ERROR_NOT_SUPPORTED, "IPC needs /proc/self/stat to name this process"))
    }

    /// The process `pid` as it runs now; an error where none does (or a zombie).
    pub fn read(pid: u32) -> Result<Process> {
        let gone = || Error::invalid_argument(format!("no process {pid}"));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|_| gone())?;
        // "pid (comm) state ... starttime(22nd)": comm may hold spaces and parentheses.
        let fields: Vec<&str> = stat.get(stat.rfind(')').ok_or_else(gone)? + 1..).unwrap_or("").split_whitespace().collect();
        if matches!(fields.first(), None | Some(&"Z") | Some(&"X")) {
            return Err(gone());
        }
        let start = fields.get(19).and_then(|f| f.parse::<u64>().ok()).ok_or_else(gone)?;
        Ok(Process { pid, start })
    }

    fn word(self) -> u64 {
        (self.pid as u64) << START_BITS | (self.start & ((1 << START_BITS) - 1))
    }

    fn from_word(word: u64) -> Process {
        Process { pid: (word >> START_BITS) as u32, start: word & ((1 << START_BITS) - 1) }
    }

    /// Whether this process still runs (not a zombie, and not another process that
    /// took its pid).
    pub fn is_alive(self) -> bool {
        Process::read(self.pid).is_ok_and(|now| now.word() == self.word())
    }
}

/// Why a consumer's claim failed.
#[derive(Debug, PartialEq, Eq)]
pub enum ClaimError {
    /// The producer freed the block (or the slot serves another export now).
    Closed,
    /// `HOLDERS` processes hold it already.
    Full,
}

/// One producer's table, mapped into this process.
#[derive(Debug)]
pub struct HolderTable {
    base: *mut u8,
    len: usize,
    slots: u32,
    /// Set in the producer, which removes the file when it goes.
    name_to_unlink: Option<CString>,
}

// The mapping is shared memory read and written only through atomics.
unsafe impl Send for HolderTable {}
unsafe impl Sync for HolderTable {}

/// The shared-memory name of the table of `producer`.
pub fn table_name(producer: Process) -> String {
    format!("/gpurt-ipc-{}-{}", producer.pid, producer.start)
}

fn os_error(what: &str, name: &str) -> Error {
    Error::new(Status::GPURT_ERROR_INTERNAL, format!("{what} {name}: {}", std::io::Error::last_os_error()))
}

fn c_name(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::invalid_argument("a shared-memory name holds a NUL byte"))
}

impl HolderTable {
    /// Creates the table `name` with `slots` slots (the producer); a file of a former
    /// process with the same name is replaced.
    pub fn create(name: &str, slots: u32) -> Result<HolderTable> {
        let c = c_name(name)?;
        let len = HEADER + slots as usize * std::mem::size_of::<Slot>();
        unsafe { libc::shm_unlink(c.as_ptr()) };
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600) };
        if fd < 0 {
            return Err(os_error("creating the IPC holder table", name));
        }
        let sized = unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0;
        let table = if sized { Self::map(fd, len, slots) } else { Err(os_error("sizing the IPC holder table", name)) };
        unsafe { libc::close(fd) };
        match table {
            Ok(mut table) => {
                table.word(0).store(MAGIC, SeqCst);
                table.word(1).store(slots as u64, SeqCst);
                table.name_to_unlink = Some(c);
                Ok(table)
            }
            Err(e) => {
                unsafe { libc::shm_unlink(c.as_ptr()) };
                Err(e)
            }
        }
    }

    /// Maps the table `name` that a producer created (a consumer).
    pub fn open(name: &str) -> Result<HolderTable> {
        let c = c_name(name)?;
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(Error::invalid_handle(format!(
                "the process that exported the block is gone (its IPC holder table {name} does not exist)"
            )));
        }
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        let len = if unsafe { libc::fstat(fd, &mut stat) } == 0 { stat.st_size as usize } else { 0 };
        let slots = (len.saturating_sub(HEADER) / std::mem::size_of::<Slot>()) as u32;
        let table = Self::map(fd, len, slots);
        unsafe { libc::close(fd) };
        let table = table?;
        if len < HEADER || table.word(0).load(SeqCst) != MAGIC || table.word(1).load(SeqCst) != slots as u64 {
            return Err(Error::invalid_handle(format!("{name} is not a gpurt IPC holder table")));
        }
        Ok(table)
    }

    fn map(fd: libc::c_int, len: usize, slots: u32) -> Result<HolderTable> {
        if len == 0 {
            return Err(Error::invalid_handle("an empty IPC holder table"));
        }
        let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if base == libc::MAP_FAILED {
            return Err(os_error("mapping the IPC holder table of", &format!("{len} bytes")));
        }
        Ok(HolderTable { base: base as *mut u8, len, slots, name_to_unlink: None })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        debug_assert!(index < HEADER / 8);
        unsafe { &*(self.base as *const AtomicU64).add(index) }
    }

    fn slot(&self, index: u32) -> Result<&Slot> {
        if index >= self.slots {
            return Err(Error::invalid_handle(format!("IPC slot {index} is past the table's {} slots", self.slots)));
        }
        Ok(unsafe { &*(self.base.add(HEADER) as *const Slot).add(index as usize) })
    }

    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Opens slot `index` for a new export (the producer, on a slot no one holds):
    /// its generation, which the handle carries.
    pub fn export(&self, index: u32) -> Result<u64> {
        let slot = self.slot(index)?;
        let generation = (slot.state.load(SeqCst) >> 1) + 1;
        slot.state.store(generation << 1 | 1, SeqCst);
        Ok(generation)
    }

    /// Marks `holder` as holding export `generation` of slot `index` (a consumer). A
    /// process that holds it already keeps its one word.
    pub fn claim(&self, index: u32, generation: u64, holder: Process) -> Result<std::result::Result<(), ClaimError>> {
        let slot = self.slot(index)?;
        let word = holder.word();
        let open = || slot.state.load(SeqCst) == generation << 1 | 1;
        if slot.holders.iter().any(|h| h.load(SeqCst) == word) {
            return Ok(if open() { Ok(()) } else { Err(ClaimError::Closed) });
        }
        let Some(claimed) = slot.holders.iter().find(|h| h.compare_exchange(0, word, SeqCst, SeqCst).is_ok()) else {
            return Ok(Err(ClaimError::Full));
        };
        if !open() {
            let _ = claimed.compare_exchange(word, 0, SeqCst, SeqCst);
            return Ok(Err(ClaimError::Closed));
        }
        Ok(Ok(()))
    }

    /// Drops `holder`'s hold on slot `index` (a consumer).
    pub fn release(&self, index: u32, holder: Process) -> Result<()> {
        let word = holder.word();
        for h in &self.slot(index)?.holders {
            let _ = h.compare_exchange(word, 0, SeqCst, SeqCst);
        }
        Ok(())
    }

    /// Closes export `generation` of slot `index` to new holders (the producer, when
    /// it frees the block); idempotent.
    pub fn close(&self, index: u32, generation: u64) -> Result<()> {
        let slot = self.slot(index)?;
        let _ = slot.state.compare_exchange(generation << 1 | 1, generation << 1, SeqCst, SeqCst);
        Ok(())
    }

    /// The processes holding slot `index` that still run; the words of those that do
    /// not are cleared (a consumer that died without closing).
    pub fn live_holders(&self, index: u32) -> Result<usize> {
        let mut live = 0;
        for h in &self.slot(index)?.holders {
            let word = h.load(SeqCst);
            if word == 0 {
                continue;
            }
            if Process::from_word(word).is_alive() {
                live += 1;
            } else {
                let _ = h.compare_exchange(word, 0, SeqCst, SeqCst);
            }
        }
        Ok(live)
    }
}

impl Drop for HolderTable {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        if let Some(name) = &self.name_to_unlink {
            unsafe { libc::shm_unlink(name.as_ptr()) };
        }
    }
}

/// Removes the tables of producers that are gone (killed before they could remove
/// their own): `/dev/shm/gpurt-ipc-<pid>-<start>` whose process no longer runs.
pub fn remove_stale_tables() {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("gpurt-ipc-")) else { continue };
        let Some((pid, start)) = rest.split_once('-') else { continue };
        let (Ok(pid), Ok(start)) = (pid.parse(), start.parse()) else { continue };
        if !(Process { pid, start }).is_alive() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    fn unique_name(tag: &str) -> String {
        format!("/gpurt-test-{tag}-{}-{:?}", std::process::id(), std::thread::current().id()).replace(['(', ')'], "")
    }

    fn sleeper() -> (std::process::Child, Process) {
        let child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let process = Process::read(child.id()).expect("the child runs");
        (child, process)
    }

    #[test]
    fn this_process_is_alive_and_a_pid_alone_is_not_enough() {
        let me = Process::current().unwrap();
        assert!(me.is_alive());
        assert_eq!(Process::from_word(me.word()), me);
        assert!(!Process { start: me.start + 1, ..me }.is_alive(), "the same pid with another start time is another process");
        assert!(Process::read(u32::MAX >> 10).is_err());
    }

    #[test]
    fn a_claim_holds_until_released_and_a_closed_export_takes_none() {
        let name = unique_name("claim");
        let producer = HolderTable::create(&name, 8).unwrap();
        let consumer = HolderTable::open(&name).unwrap();
        let me = Process::current().unwrap();
        let generation = producer.export(3).unwrap();
        assert_eq!(consumer.claim(3, generation, me).unwrap(), Ok(()));
        assert_eq!(consumer.claim(3, generation, me).unwrap(), Ok(()), "a second claim of the same process keeps its word");
        assert_eq!(producer.live_holders(3).unwrap(), 1);
        assert_eq!(consumer.claim(3, generation + 1, me).unwrap(), Err(ClaimError::Closed), "a stale handle's generation");
        producer.close(3, generation).unwrap();
        assert_eq!(producer.live_holders(3).unwrap(), 1, "closing keeps the holds there are");
        consumer.release(3, me).unwrap();
        assert_eq!(producer.live_holders(3).unwrap(), 0);
        assert_eq!(consumer.claim(3, generation, me).unwrap(), Err(ClaimError::Closed));
        assert_eq!(producer.live_holders(3).unwrap(), 0, "a refused claim leaves no word");
        let next = producer.export(3).unwrap();
        assert!(next > generation, "a reused slot gets a new generation");
        assert!(consumer.claim(8, next, me).is_err(), "past the table's slots");
    }

    #[test]
    fn a_dead_consumer_holds_nothing_and_the_holders_are_bounded() {
        let name = unique_name("dead");
        let table = HolderTable::create(&name, 2).unwrap();
        let generation = table.export(0).unwrap();
        let (mut child, process) = sleeper();
        assert_eq!(table.claim(0, generation, process).unwrap(), Ok(()));
        assert_eq!(table.live_holders(0).unwrap(), 1);
        child.kill().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while table.live_holders(0).unwrap() != 0 {
            assert!(std::time::Instant::now() < deadline, "a killed holder is dead, even before it is reaped (a zombie)");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        child.wait().unwrap();
        for pid in 1..=HOLDERS as u32 {
            assert_eq!(table.claim(0, generation, Process { pid, start: 1 }).unwrap(), Ok(()));
        }
        assert_eq!(table.claim(0, generation, Process::current().unwrap()).unwrap(), Err(ClaimError::Full));
        assert_eq!(table.live_holders(0).unwrap(), 0, "none of those fake processes runs: every word is cleared");
    }

    #[test]
    fn claims_race_a_close_and_every_claim_that_stays_is_seen() {
        let name = unique_name("race");
        let table = std::sync::Arc::new(HolderTable::create(&name, 1).unwrap());
        let me = Process::current().unwrap();
        for _ in 0..crate::test_iterations(200) {
            let generation = table.export(0).unwrap();
            let claimer = {
                let table = table.clone();
                std::thread::spawn(move || table.claim(0, generation, me).unwrap())
            };
            table.close(0, generation).unwrap();
            let live = table.live_holders(0).unwrap();
            let claimed = claimer.join().unwrap();
            if claimed.is_ok() {
                assert_eq!(live, 1, "a claim that succeeded was seen by the producer's count");
            }
            table.release(0, me).unwrap();
        }
    }

    #[test]
    fn opening_checks_the_file_and_the_producer_removes_it() {
        let name = unique_name("file");
        assert!(HolderTable::open(&name).unwrap_err().to_string().contains("gone"));
        let table = HolderTable::create(&name, 4).unwrap();
        assert_eq!(HolderTable::open(&name).unwrap().slots(), 4);
        drop(table);
        assert!(HolderTable::open(&name).is_err(), "the producer's table goes with it");
        let c = c_name(&name).unwrap();
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600) };
        assert!(fd >= 0 && unsafe { libc::ftruncate(fd, 4096) } == 0);
        unsafe { libc::close(fd) };
        assert!(HolderTable::open(&name).unwrap_err().to_string().contains("not a gpurt IPC holder table"));
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }

    #[test]
    fn stale_tables_of_dead_producers_are_removed() {
        let (mut child, process) = sleeper();
        let name = table_name(process);
        let table = HolderTable::create(&name, 1).unwrap();
        std::mem::forget(table); // as if the producer were killed
        let path = format!("/dev/shm{name}");
        remove_stale_tables();
        assert!(std::path::Path::new(&path).exists(), "its producer still runs");
        child.kill().unwrap();
        child.wait().unwrap();
        remove_stale_tables();
        assert!(!std::path::Path::new(&path).exists());
    }
}
