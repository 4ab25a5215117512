//! Multi-GPU communication through NCCL (loaded at run time, `nccl.rs`):
//! communicators as gpurt handles, for one process over several GPUs
//! (`init_all`) or one process per GPU on one host or many (`unique_id` +
//! `init_rank`, with a timeout so that a peer that never joins is an error, not a
//! hang), and the collectives on gpurt streams. A collective records its stream on
//! the gpurt blocks it uses (as `gpurt_record_stream`), so that a free waits for it,
//! and declares its accesses to the stream sanitizer.

pub mod ffi;
pub mod helpers;
pub mod nccl;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::device::footprint::{self, Footprint};
use crate::dtype::gpurt_dtype_t;
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, Kind, Registry};
use crate::sanitizer::{self, Access};
use nccl::{Nccl, RawComm};

/// Reduction operators, with NCCL's values.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gpurt_reduce_op_t {
    GPURT_REDUCE_SUM = 0,
    GPURT_REDUCE_PROD = 1,
    GPURT_REDUCE_MAX = 2,
    GPURT_REDUCE_MIN = 3,
    /// The sum divided by the number of ranks (floating-point types).
    GPURT_REDUCE_AVG = 4,
}

impl gpurt_reduce_op_t {
    pub fn from_raw(raw: i32) -> Result<Self> {
        use gpurt_reduce_op_t::*;
        [GPURT_REDUCE_SUM, GPURT_REDUCE_PROD, GPURT_REDUCE_MAX, GPURT_REDUCE_MIN, GPURT_REDUCE_AVG]
            .into_iter()
            .find(|op| *op as i32 == raw)
            .ok_or_else(|| Error::invalid_argument(format!("unknown reduce op {raw} (GPURT_REDUCE_SUM ... GPURT_REDUCE_AVG)")))
    }
}

/// NCCL's `ncclDataType_t` for a gpurt dtype.
pub fn nccl_dtype(dtype: gpurt_dtype_t) -> i32 {
    match dtype {
        gpurt_dtype_t::GPURT_DTYPE_I32 => 2,
        gpurt_dtype_t::GPURT_DTYPE_I64 => 4,
        gpurt_dtype_t::GPURT_DTYPE_F16 => 6,
        gpurt_dtype_t::GPURT_DTYPE_F32 => 7,
        gpurt_dtype_t::GPURT_DTYPE_F64 => 8,
        gpurt_dtype_t::GPURT_DTYPE_BF16 => 9,
    }
}

/// A communicator: one rank of a group, on one device.
pub struct Comm {
    raw: usize,
    pub device: i32,
    pub rank: i32,
    pub nranks: i32,
    aborted: AtomicBool,
}

impl Drop for Comm {
    /// The last holder destroys it (a collective in flight on another thread keeps
    /// it alive until it returns).
    fn drop(&mut self) {
        if !self.aborted.load(Ordering::Acquire) {
            if let Ok(nccl) = nccl::get() {
                let _ = crate::device::with_device(self.device, || nccl.check("ncclCommDestroy", unsafe { (nccl.comm_destroy)(self.raw as RawComm) }, std::ptr::null_mut()));
            }
        }
    }
}

static COMMS: Registry<Comm> = Registry::new(Kind::Comm);

/// A communicator. Without NCCL there can be none: the answer names the missing
/// library rather than the handle.
pub fn get(handle: Handle) -> Result<std::sync::Arc<Comm>> {
    nccl::get()?;
    COMMS.get(handle)
}

/// NCCL's version code (major × 10000 + minor × 100 + patch for 2.9 and later).
pub fn version() -> Result<i32> {
    let nccl = nccl::get()?;
    let mut v = 0;
    nccl.check("ncclGetVersion", unsafe { (nccl.get_version)(&mut v) }, std::ptr::null_mut())?;
    Ok(v)
}

/// The bytes every rank of a new group passes to `init_rank` (made by one of them).
pub fn unique_id() -> Result<[u8; 128]> {
    let nccl = nccl::get()?;
    let mut id = nccl::UniqueId { internal: [0; 128] };
    nccl.check("ncclGetUniqueId", unsafe { (nccl.get_unique_id)(&mut id) }, std::ptr::null_mut())?;
    Ok(id.internal.map(|c| c as u8))
}

fn insert(raw: RawComm, device: i32, rank: i32, nranks: i32) -> Result<Handle> {
    COMMS.insert(Comm { raw: raw as usize, device, rank, nranks, aborted: AtomicBool::new(false) })
}

/// One communicator per device of `devices`, ranks in that order, in this process.
pub fn init_all(devices: &[i32]) -> Result<Vec<Handle>> {
    let nccl = nccl::get()?;
    let resolved: Vec<i32> = devices.iter().map(|&d| crate::device::resolve(d)).collect::<Result<_>>()?;
    if let Some(d) = resolved.iter().find(|d| resolved.iter().filter(|e| e == d).count() > 1) {
        return Err(Error::invalid_argument(format!("device {d} appears twice: NCCL needs one rank per device")));
    }
    let mut raws: Vec<RawComm> = vec![std::ptr::null_mut(); resolved.len()];
    let n = resolved.len() as i32;
    footprint::measured(&resolved, Footprint::Communicators, || {
        nccl.check("ncclCommInitAll", unsafe { (nccl.comm_init_all)(raws.as_mut_ptr(), n, resolved.as_ptr()) }, std::ptr::null_mut())
    })?;
    let placed: Vec<(RawComm, i32, i32, i32)> = raws.iter().zip(&resolved).enumerate().map(|(rank, (&raw, &device))| (raw, device, rank as i32, n)).collect();
    insert_all(nccl, &placed)
}

/// Handles for new communicators `(raw, device, rank, nranks)`; if one cannot be
/// had, none (a refused `Comm` destroys its communicator as it drops; the later
/// ones are destroyed here).
fn insert_all(nccl: &Nccl, comms: &[(RawComm, i32, i32, i32)]) -> Result<Vec<Handle>> {
    let mut handles = Vec::with_capacity(comms.len());
    for (i, &(raw, device, rank, nranks)) in comms.iter().enumerate() {
        match insert(raw, device, rank, nranks) {
            Ok(h) => handles.push(h),
            Err(e) => {
                handles.into_iter().for_each(|h| drop(COMMS.remove(h)));
                for &(later, ..) in &comms[i + 1..] {
                    unsafe { (nccl.comm_destroy)(later) };
                }
                return Err(e);
            }
        }
    }
    Ok(handles)
}

/// The timeout of `init_rank`: `GPURT_COMM_INIT_TIMEOUT_MS`, else 5 minutes.
pub fn default_timeout() -> Duration {
    Duration::from_millis(std::env::var("GPURT_COMM_INIT_TIMEOUT_MS").ok().and_then(|v| parse_timeout_ms(&v)).unwrap_or(300_000))
}

/// `GPURT_COMM_INIT_TIMEOUT_MS`: whole milliseconds; None where unreadable.
pub fn parse_timeout_ms(text: &str) -> Option<u64> {
    text.trim().parse::<u64>().ok()
}

/// Rank `rank` of `nranks` on `device`, joining the group `id` names. Initialises
/// without blocking and waits at most `timeout` for the other ranks: a peer that
/// never joins is `GPURT_ERROR_COMM`, and this rank's half-made communicator is
/// aborted, so the process can go on.
pub fn init_rank(id: &[u8; 128], nranks: i32, rank: i32, device: i32, timeout: Duration) -> Result<Handle> {
    let nccl = nccl::get()?;
    if nranks < 1 || rank < 0 || rank >= nranks {
        return Err(Error::invalid_argument(format!("rank {rank} of {nranks}: ranks run from 0 to nranks - 1")));
    }
    let d = crate::device::resolve(device)?;
    let raw = footprint::measured(&[d], Footprint::Communicators, || crate::device::with_device(d, || {
        let mut config = nccl::Config::non_blocking();
        let mut raw: RawComm = std::ptr::null_mut();
        let unique = nccl::UniqueId { internal: id.map(|b| b as libc::c_char) };
        let started = unsafe { (nccl.comm_init_rank_config)(&mut raw, nranks, unique, rank, &mut config) };
        if started != nccl::SUCCESS && started != nccl::IN_PROGRESS {
            let e = nccl.error("ncclCommInitRankConfig", started, raw);
            abort_raw(nccl, raw);
            return Err(e);
        }
        wait_for_init(nccl, raw, nranks, rank, timeout, "ncclCommInitRankConfig").inspect_err(|_| abort_raw(nccl, raw))?;
        Ok(raw)
    }))?;
    // A refused handle destroys the communicator as its `Comm` drops.
    insert(raw, d, rank, nranks)
}

/// Polls a non-blocking communicator until NCCL no longer reports its work in
/// progress: its final state, or None once `timeout` has passed (None: no limit).
/// Waits for peers (with a timeout) sleep between polls; waits for NCCL to finish
/// enqueuing work of its own (none) only yield.
fn settled_state(nccl: &Nccl, raw: RawComm, timeout: Option<Duration>) -> Result<Option<nccl::NcclResult>> {
    let start = Instant::now();
    loop {
        let mut state = nccl::IN_PROGRESS;
        nccl.check("ncclCommGetAsyncError", unsafe { (nccl.comm_get_async_error)(raw, &mut state) }, raw)?;
        match (state, timeout) {
            (nccl::IN_PROGRESS, None) => std::thread::yield_now(),
            (nccl::IN_PROGRESS, Some(t)) if start.elapsed() < t => std::thread::sleep(Duration::from_millis(1)),
            (nccl::IN_PROGRESS, Some(_)) => return Ok(None),
            (state, _) => return Ok(Some(state)),
        }
    }
}

/// Waits at most `timeout` for a new communicator (from `call`) to be made with its
/// peers; the caller aborts it on failure.
fn wait_for_init(nccl: &Nccl, raw: RawComm, nranks: i32, rank: i32, timeout: Duration, call: &str) -> Result<()> {
    match settled_state(nccl, raw, Some(timeout))? {
        Some(state) => nccl.check(call, state, raw),
        None => Err(Error::new(
            Status::GPURT_ERROR_COMM,
            format!("rank {rank} of {nranks}: the other ranks did not join within {} ms; this rank's communicator was aborted", timeout.as_millis()),
        )),
    }
}

fn abort_raw(nccl: &Nccl, raw: RawComm) {
    if !raw.is_null() {
        unsafe { (nccl.comm_abort)(raw) };
    }
}

/// Waits until NCCL has finished enqueuing the work a call on a non-blocking
/// communicator (one from `init_rank`) left in progress, then gives its outcome.
fn settle(nccl: &Nccl, raw: RawComm, call: &str) -> Result<()> {
    let state = settled_state(nccl, raw, None)?.unwrap_or(nccl::IN_PROGRESS);
    nccl.check(call, state, raw)
}

/// This thread's open groups: their depth and the communicators used in them, which
/// `group_end` settles when NCCL leaves the group's work in progress.
#[derive(Default)]
struct Group {
    depth: u32,
    comms: Vec<usize>,
}

thread_local! {
    static GROUP: std::cell::RefCell<Group> = std::cell::RefCell::new(Group::default());
}

/// Opens a group: the calls until `group_end` are issued together.
pub fn group_start() -> Result<()> {
    let nccl = nccl::get()?;
    nccl.check("ncclGroupStart", unsafe { (nccl.group_start)() }, std::ptr::null_mut())?;
    GROUP.with(|g| g.borrow_mut().depth += 1);
    Ok(())
}

/// Closes a group; the outermost one issues its calls.
pub fn group_end() -> Result<()> {
    let nccl = nccl::get()?;
    if GROUP.with(|g| g.borrow().depth) == 0 {
        return Err(Error::invalid_argument("no group is open on this thread (gpurt_comm_group_end without gpurt_comm_group_start)"));
    }
    let code = unsafe { (nccl.group_end)() };
    let comms = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth -= 1;
        if g.depth == 0 { std::mem::take(&mut g.comms) } else { Vec::new() }
    });
    match code {
        nccl::IN_PROGRESS => comms.iter().try_for_each(|&raw| settle(nccl, raw as RawComm, "ncclGroupEnd")),
        code => nccl.check("ncclGroupEnd", code, std::ptr::null_mut()),
    }
}

/// `ncclCommSplit`'s color for a rank that joins no new communicator.
pub const GPURT_COMM_SPLIT_NOCOLOR: i32 = -1;

/// Splits communicators: each rank `parents[i]` joins the new communicator of the
/// ranks with its color `colors[i]` (or none, with `GPURT_COMM_SPLIT_NOCOLOR`),
/// ranked by `keys[i]` and then by the old rank. A split is collective over
/// every rank of the parent: one process with several ranks of it gives them all
/// here (they are split in one group); one process per rank gives its own, and
/// waits at most `timeout` for the others (a parent from `init_rank`).
pub fn split(parents: &[Handle], colors: &[i32], keys: &[i32], timeout: Duration) -> Result<Vec<Option<Handle>>> {
    let nccl = nccl::get()?;
    let split = nccl.comm_split.ok_or_else(|| Error::not_supported("this NCCL has no ncclCommSplit: splitting needs NCCL 2.18 or later"))?;
    if GROUP.with(|g| g.borrow().depth) > 0 {
        return Err(Error::invalid_argument("a split cannot be inside gpurt_comm_group_start/_end: give all of this process's ranks to one split call"));
    }
    let comms: Vec<std::sync::Arc<Comm>> = parents.iter().map(|&h| get(h)).collect::<Result<_>>()?;
    if let Some(&color) = colors.iter().find(|&&c| c < GPURT_COMM_SPLIT_NOCOLOR) {
        return Err(Error::invalid_argument(format!("color {color}: a color is 0 or more, or GPURT_COMM_SPLIT_NOCOLOR")));
    }
    if let Some((i, c)) = comms.iter().enumerate().find(|(i, c)| comms[..*i].iter().any(|d| d.raw == c.raw)) {
        return Err(Error::invalid_argument(format!("communicator {i} (rank {}) is given twice", c.rank)));
    }
    // NCCL writes each new communicator here when its split completes, which for a
    // non-blocking parent is after ncclCommSplit returns: the slots must outlive
    // that, so they are leaked if the wait for it gives up.
    let slots: *mut [RawComm] = Box::into_raw(vec![std::ptr::null_mut(); comms.len()].into_boxed_slice());
    let grouped = comms.len() > 1;
    if grouped {
        nccl.check("ncclGroupStart", unsafe { (nccl.group_start)() }, std::ptr::null_mut())?;
    }
    let mut failure = None;
    for (i, c) in comms.iter().enumerate() {
        let code = crate::device::with_device(c.device, || Ok(unsafe { split(c.raw as RawComm, colors[i], keys[i], slots.cast::<RawComm>().add(i), std::ptr::null_mut()) }))?;
        if code != nccl::SUCCESS && code != nccl::IN_PROGRESS {
            failure = Some(nccl.error("ncclCommSplit", code, c.raw as RawComm));
            break;
        }
    }
    if grouped {
        let code = unsafe { (nccl.group_end)() };
        if failure.is_none() && code != nccl::SUCCESS && code != nccl::IN_PROGRESS {
            failure = Some(nccl.error("ncclGroupEnd", code, std::ptr::null_mut()));
        }
    }
    // A split is complete once its parent is no longer in progress; then its new
    // communicator (NULL for no color) is in its slot.
    let settled = failure.map_or(Ok(()), Err).and_then(|()| {
        comms.iter().try_for_each(|c| {
            crate::device::with_device(c.device, || match settled_state(nccl, c.raw as RawComm, Some(timeout))? {
                Some(state) => nccl.check("ncclCommSplit", state, c.raw as RawComm),
                None => Err(Error::new(
                    Status::GPURT_ERROR_COMM,
                    format!("rank {} of {}: the other ranks did not take part in the split within {} ms", c.rank, c.nranks, timeout.as_millis()),
                )),
            })
        })
    });
    // On failure NCCL may still write the slots: they stay leaked, what it made lost.
    settled?;
    // SAFETY: every split has completed, so NCCL writes the slots no more.
    let raws: Vec<RawComm> = unsafe { Box::from_raw(slots) }.into_vec();
    let made = || raws.iter().zip(&comms).filter(|(r, _)| !r.is_null());
    let result = made().try_for_each(|(&raw, c)| crate::device::with_device(c.device, || wait_for_init(nccl, raw, c.nranks, c.rank, timeout, "ncclCommSplit")));
    let placed = result.and_then(|()| {
        made()
            .map(|(&raw, c)| {
                let (mut rank, mut nranks) = (0, 0);
                nccl.check("ncclCommUserRank", unsafe { (nccl.comm_user_rank)(raw, &mut rank) }, raw)?;
                nccl.check("ncclCommCount", unsafe { (nccl.comm_count)(raw, &mut nranks) }, raw)?;
                Ok((raw, c.device, rank, nranks))
            })
            .collect::<Result<Vec<_>>>()
    });
    let placed = match placed {
        Ok(p) => p,
        Err(e) => {
            made().for_each(|(&raw, _)| abort_raw(nccl, raw));
            return Err(e);
        }
    };
    let mut handles = insert_all(nccl, &placed)?.into_iter();
    Ok(raws.iter().map(|r| if r.is_null() { None } else { handles.next() }).collect())
}

/// Destroys a communicator's handle; NCCL's communicator goes once no collective
/// call holds it.
pub fn destroy(handle: Handle) -> Result<()> {
    get(handle)?;
    COMMS.remove(handle)
}

/// Aborts a communicator (its pending work is cancelled) and releases the handle:
/// for a group whose peer failed.
pub fn abort(handle: Handle) -> Result<()> {
    let comm = get(handle)?;
    let nccl = nccl::get()?;
    if !comm.aborted.swap(true, Ordering::AcqRel) {
        abort_raw(nccl, comm.raw as RawComm);
    }
    COMMS.remove(handle)
}

/// A failure NCCL found while running this communicator's work (a peer lost, the
/// network): its error, else success.
pub fn async_error(handle: Handle) -> Result<()> {
    let comm = get(handle)?;
    let nccl = nccl::get()?;
    let mut state = nccl::SUCCESS;
    let raw = comm.raw as RawComm;
    nccl.check("ncclCommGetAsyncError", unsafe { (nccl.comm_get_async_error)(raw, &mut state) }, raw)?;
    nccl.check("the communicator's work", state, raw)
}

/// One buffer of a collective: where, how many bytes, and how it is used.
pub struct Buffer {
    pub ptr: u64,
    pub bytes: u64,
    pub access: Access,
}

/// Runs a collective call of `c` on `stream` over `buffers`, then records the
/// stream on the gpurt blocks among them and declares their use to the sanitizer.
pub fn run(
    c: &Comm,
    stream: Handle,
    buffers: &[Buffer],
    call: &str,
    f: impl FnOnce(&Nccl, RawComm, *mut libc::c_void) -> nccl::NcclResult,
) -> Result<()> {
    let s = crate::stream::get(stream)?;
    if s.device() != c.device {
        return Err(Error::invalid_argument(format!("the stream is on device {}, the communicator on device {}", s.device(), c.device)));
    }
    for b in buffers.iter().filter(|b| b.bytes > 0) {
        if b.ptr == 0 {
            return Err(Error::invalid_argument("a buffer is NULL"));
        }
        crate::boundary::check_range(b.ptr, b.bytes, "buffer")?;
    }
    let nccl = nccl::get()?;
    let raw = c.raw as RawComm;
    crate::device::with_device(c.device, || match f(nccl, raw, s.cu().cast()) {
        nccl::IN_PROGRESS => settle(nccl, raw, call),
        code => nccl.check(call, code, raw),
    })?;
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && !g.comms.contains(&c.raw) {
            g.comms.push(c.raw);
        }
    });
    for b in buffers.iter().filter(|b| b.bytes > 0) {
        // Only blocks of gpurt's pools are recorded; other memory is the caller's.
        let _ = crate::alloc::device::record_stream(b.ptr, s.raw as u64);
        sanitizer::access(s, b.ptr, b.bytes, b.access, call);
    }
    Ok(())
}

/// Bytes of `count` elements of `dtype`.
pub fn bytes(count: u64, dtype: gpurt_dtype_t) -> Result<u64> {
    crate::boundary::checked_bytes(count, dtype.size(), "count")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_and_ops_have_ncclls_codes() {
        use gpurt_dtype_t::*;
        let codes: Vec<i32> = [GPURT_DTYPE_F32, GPURT_DTYPE_F16, GPURT_DTYPE_BF16, GPURT_DTYPE_I32, GPURT_DTYPE_F64, GPURT_DTYPE_I64].map(nccl_dtype).to_vec();
        assert_eq!(codes, vec![7, 6, 9, 2, 8, 4]);
        assert_eq!(gpurt_reduce_op_t::from_raw(4).unwrap(), gpurt_reduce_op_t::GPURT_REDUCE_AVG);
        assert!(gpurt_reduce_op_t::from_raw(5).is_err() && gpurt_reduce_op_t::from_raw(-1).is_err());
        assert_eq!(std::mem::size_of::<nccl::Config>(), 48, "NCCL 2.14's ncclConfig_t");
    }
}
