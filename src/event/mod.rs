//! Events: created, pooled and interprocess ones behind one handle type; record,
//! query, synchronise, elapsed time, IPC export/import.

pub mod ffi;

use std::cell::RefCell;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::{self, CUevent, CUresult};

use crate::boundary::lock;
use crate::device::{self, per_device};
use crate::driver::check;
use crate::error::{Error, Result, Status};
use crate::handle::{Handle, HandleTable, Kind, Packed};
use crate::sanitizer;

/// Event flag: gpurt_event_synchronize sleeps instead of spinning.
pub const GPURT_EVENT_BLOCKING_SYNC: u32 = 0x1;
/// Event flag: no timing (cheaper records and waits; no gpurt_event_elapsed_time).
pub const GPURT_EVENT_DISABLE_TIMING: u32 = 0x2;
/// Event flag: exportable with gpurt_event_ipc_handle (needs GPURT_EVENT_DISABLE_TIMING).
pub const GPURT_EVENT_INTERPROCESS: u32 = 0x4;
/// Event flag: recorded or waited on inside a capture, the event becomes an event-record
/// or event-wait node of the graph (`torch.cuda.Event(external=True)`), so that each
/// replay records it, or waits for its last record, as a stream outside the graph sees.
pub const GPURT_EVENT_EXTERNAL: u32 = 0x8;
/// The flags the driver takes at creation.
const DRIVER_FLAGS: u32 = GPURT_EVENT_BLOCKING_SYNC | GPURT_EVENT_DISABLE_TIMING | GPURT_EVENT_INTERPROCESS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Owned = 0,
    /// From the event pool; `destroy` returns it there.
    Pooled = 1,
    /// Opened from another process's IPC handle.
    Ipc = 2,
}

/// An event as its handle slot stores it: the native handle and packed metadata,
/// decoded on demand, so that a lookup stays two machine words in registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub raw: usize,
    meta: u64,
}

impl Packed for Event {
    fn pack(self) -> [u64; 2] {
        [self.raw as u64, self.meta]
    }
    fn unpack(w: [u64; 2]) -> Self {
        Event { raw: w[0] as usize, meta: w[1] }
    }
}

impl Event {
    pub fn new(raw: usize, device: i32, flags: u32, origin: Origin) -> Event {
        Event { raw, meta: (device as u16 as u64) | ((flags as u8 as u64) << 16) | ((origin as u64) << 24) }
    }
    pub fn device(self) -> i32 {
        self.meta as u16 as i32
    }
    pub fn flags(self) -> u32 {
        (self.meta >> 16) as u8 as u32
    }
    pub fn origin(self) -> Origin {
        match (self.meta >> 24) as u8 {
            0 => Origin::Owned,
            1 => Origin::Pooled,
            _ => Origin::Ipc,
        }
    }
    pub fn cu(self) -> CUevent {
        self.raw as CUevent
    }
}

static EVENTS: HandleTable<Event> = HandleTable::new(Kind::Event);

/// The event pool. A pooled event keeps its handle-table slot while it is pooled
/// (retired, not freed), so getting and putting one is a generation bump: no driver
/// call, no lock. Each thread caches up to `THREAD_CACHE` slots; beyond that, and
/// when a thread exits, they go to the shared per-device lists.
const THREAD_CACHE: usize = 64;

static SHARED_POOL: OnceLock<Box<[Mutex<Vec<u32>>]>> = OnceLock::new();

fn shared_pool(d: i32) -> std::sync::MutexGuard<'static, Vec<u32>> {
    lock(&SHARED_POOL.get_or_init(|| per_device(|| Mutex::new(Vec::new())))[d as usize])
}

/// This thread's cached (device, slot) pairs; handed to the shared pool on exit.
struct ThreadCache(Vec<(i32, u32)>);

impl Drop for ThreadCache {
    fn drop(&mut self) {
        for (d, index) in self.0.drain(..) {
            shared_pool(d).push(index);
        }
    }
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = const { RefCell::new(ThreadCache(Vec::new())) };
}

fn take_pooled(d: i32) -> Option<u32> {
    let local = CACHE
        .try_with(|c| {
            let cache = &mut c.borrow_mut().0;
            let at = cache.iter().rposition(|(dev, _)| *dev == d)?;
            Some(cache.swap_remove(at).1)
        })
        .ok()
        .flatten();
    local.or_else(|| shared_pool(d).pop())
}

fn put_pooled(d: i32, index: u32) {
    let kept = CACHE
        .try_with(|c| {
            let cache = &mut c.borrow_mut().0;
            (cache.len() < THREAD_CACHE).then(|| cache.push((d, index))).is_some()
        })
        .unwrap_or(false);
    if !kept {
        shared_pool(d).push(index);
    }
}

#[inline]
pub fn get(handle: Handle) -> Result<Event> {
    EVENTS.get(handle)
}

pub fn live_count() -> usize {
    EVENTS.live_count()
}

pub fn validate_flags(flags: u32) -> Result<()> {
    if flags & !(DRIVER_FLAGS | GPURT_EVENT_EXTERNAL) != 0 {
        return Err(Error::invalid_argument(format!(
            "event flags {flags:#x} have bits other than GPURT_EVENT_BLOCKING_SYNC, GPURT_EVENT_DISABLE_TIMING, GPURT_EVENT_INTERPROCESS, \
             GPURT_EVENT_EXTERNAL"
        )));
    }
    if flags & GPURT_EVENT_INTERPROCESS != 0 && flags & GPURT_EVENT_DISABLE_TIMING == 0 {
        return Err(Error::invalid_argument("interprocess events must also have GPURT_EVENT_DISABLE_TIMING"));
    }
    Ok(())
}

fn create_raw(d: i32, flags: u32) -> Result<usize> {
    device::with_device(d, || {
        let mut raw = std::ptr::null_mut();
        check(unsafe { sys::cuEventCreate(&mut raw, flags & DRIVER_FLAGS) }, "cuEventCreate")?;
        Ok(raw as usize)
    })
}

fn insert_or_destroy(event: Event) -> Result<Handle> {
    EVENTS.insert(event).inspect_err(|_| unsafe {
        sys::cuEventDestroy_v2(event.cu());
    })
}

pub fn create(ordinal: i32, flags: u32) -> Result<Handle> {
    validate_flags(flags)?;
    let d = device::resolve(ordinal)?;
    let raw = create_raw(d, flags)?;
    insert_or_destroy(Event::new(raw, d, flags, Origin::Owned))
}

/// A timing-free event from the device's pool: no driver call when one is cached.
/// `destroy` returns it to the pool.
#[inline]
pub fn pool_get(ordinal: i32) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    if let Some(index) = take_pooled(d) {
        return Ok(EVENTS.revive(index).0);
    }
    let raw = create_raw(d, GPURT_EVENT_DISABLE_TIMING)?;
    insert_or_destroy(Event::new(raw, d, GPURT_EVENT_DISABLE_TIMING, Origin::Pooled))
}

/// Destroys an event (a pooled one goes back to its pool). An event still pending
/// is safe to destroy: the driver completes the record first.
pub fn destroy(handle: Handle) -> Result<()> {
    let event = get(handle)?;
    match event.origin() {
        Origin::Pooled => {
            let (index, event) = EVENTS.retire(handle)?;
            put_pooled(event.device(), index);
            Ok(())
        }
        Origin::Owned | Origin::Ipc => {
            let event = EVENTS.remove(handle)?;
            check(unsafe { sys::cuEventDestroy_v2(event.cu()) }, "cuEventDestroy")
        }
    }
}

/// Records `event` on `stream`.
#[inline]
pub fn record(event: Handle, stream: Handle) -> Result<()> {
    let e = get(event)?;
    let s = crate::stream::get(stream)?;
    // Told before the driver call, so that nothing stays live across it (the hook
    // cost 7 instructions after it); a record that then fails is a rare error path.
    sanitizer::event_recorded(e.raw as u64, s);
    if e.flags() & GPURT_EVENT_EXTERNAL != 0 && capturing(s)? {
        let external = sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL as u32;
        return s.run(|cu| check(unsafe { sys::cuEventRecordWithFlags(e.cu(), cu, external) }, "cuEventRecordWithFlags"));
    }
    s.run(|cu| check(unsafe { sys::cuEventRecord(e.cu(), cu) }, "cuEventRecord"))
}

/// Whether `stream` is capturing: the driver takes the external flags only then.
fn capturing(stream: crate::stream::Stream) -> Result<bool> {
    Ok(stream.run(crate::stream::native_capture_status)? != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

/// Records `event` on this thread's current stream of the event's device.
pub fn record_on_current(event: Handle) -> Result<()> {
    let e = get(event)?;
    record(event, crate::stream::current(e.device())?)
}

/// True when the work captured by the last record is done (or it was never recorded).
#[inline(always)]
pub fn query(event: Handle) -> Result<bool> {
    let e = get(event)?;
    let done = native_query(e)?;
    if done {
        sanitizer::event_synchronized(e.raw as u64);
    }
    Ok(done)
}

#[inline(always)]
fn native_query(e: Event) -> Result<bool> {
    match unsafe { sys::cuEventQuery(e.cu()) } {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        code => Err(crate::driver::error("cuEventQuery", code)),
    }
}

pub fn synchronize(event: Handle) -> Result<()> {
    let e = get(event)?;
    crate::sync_debug::on_blocking_call("event synchronize")?;
    check(unsafe { sys::cuEventSynchronize(e.cu()) }, "cuEventSynchronize")?;
    sanitizer::event_synchronized(e.raw as u64);
    Ok(())
}

/// Milliseconds between two recorded, completed timing events.
pub fn elapsed_ms(start: Handle, end: Handle) -> Result<f32> {
    let (s, e) = (get(start)?, get(end)?);
    for (name, ev) in [("start", s), ("end", e)] {
        if ev.flags() & GPURT_EVENT_DISABLE_TIMING != 0 {
            return Err(Error::invalid_argument(format!(
                "the {name} event was created with GPURT_EVENT_DISABLE_TIMING (pooled and interprocess events are)"
            )));
        }
    }
    let mut ms = 0f32;
    match unsafe { sys::cuEventElapsedTime(&mut ms, s.cu(), e.cu()) } {
        CUresult::CUDA_SUCCESS => Ok(ms),
        CUresult::CUDA_ERROR_INVALID_HANDLE => {
            Err(Error::invalid_argument("the start or end event has not been recorded"))
        }
        CUresult::CUDA_ERROR_NOT_READY => Err(Error::new(Status::GPURT_ERROR_NOT_READY, "an event has not completed")),
        code => Err(crate::driver::error("cuEventElapsedTime", code)),
    }
}

/// The bytes another process passes to `open_ipc`.
pub fn ipc_handle(event: Handle) -> Result<[u8; 64]> {
    let e = get(event)?;
    if e.flags() & GPURT_EVENT_INTERPROCESS == 0 {
        return Err(Error::invalid_argument("the event was not created with GPURT_EVENT_INTERPROCESS"));
    }
    let mut h = sys::CUipcEventHandle { reserved: [0; 64] };
    check(unsafe { sys::cuIpcGetEventHandle(&mut h, e.cu()) }, "cuIpcGetEventHandle")?;
    Ok(h.reserved.map(|c| c as u8))
}

/// Opens an event exported by another process. Such an event can be recorded,
/// waited on and queried; it has no timing.
pub fn open_ipc(ordinal: i32, bytes: &[u8; 64]) -> Result<Handle> {
    let d = device::resolve(ordinal)?;
    let raw = device::with_device(d, || {
        let h = sys::CUipcEventHandle { reserved: bytes.map(|b| b as libc::c_char) };
        let mut raw = std::ptr::null_mut();
        check(unsafe { sys::cuIpcOpenEventHandle(&mut raw, h) }, "cuIpcOpenEventHandle")?;
        Ok(raw as usize)
    })?;
    insert_or_destroy(Event::new(raw, d, GPURT_EVENT_INTERPROCESS | GPURT_EVENT_DISABLE_TIMING, Origin::Ipc))
}

/// Makes future work on `handle` wait for the work captured by `event`'s last record.
pub fn stream_wait_event(handle: Handle, event: Handle) -> Result<()> {
    let stream = crate::stream::get(handle)?;
    let event = get(event)?;
    sanitizer::stream_waited(stream, event.raw as u64); // before the call, as in `record`
    let flags = match event.flags() & GPURT_EVENT_EXTERNAL != 0 && capturing(stream)? {
        false => 0,
        true => sys::CUevent_wait_flags::CU_EVENT_WAIT_EXTERNAL as u32,
    };
    stream.run(|s| check(unsafe { sys::cuStreamWaitEvent(s, event.cu(), flags) }, "cuStreamWaitEvent"))
}

/// Makes future work on `handle` wait for all work queued on `other` so far, through
/// a pooled event (as `torch.cuda.Stream.wait_stream`).
pub fn stream_wait_stream(handle: Handle, other: Handle) -> Result<()> {
    crate::stream::get(handle)?; // checked before an event is taken
    let source = crate::stream::get(other)?;
    with_pooled_event(source.device(), |event| record(event, other).and_then(|()| stream_wait_event(handle, event)))
}

/// `stream_wait_stream` for native streams of `device` (whose context is current):
/// the allocators' cross-stream frees.
pub(crate) fn native_stream_wait(device: i32, waiting: sys::CUstream, other: sys::CUstream) -> Result<()> {
    with_pooled_event(device, |event| {
        let raw = get(event)?.cu();
        check(unsafe { sys::cuEventRecord(raw, other) }, "cuEventRecord")?;
        check(unsafe { sys::cuStreamWaitEvent(waiting, raw, 0) }, "cuStreamWaitEvent")
    })
}

/// Runs `f` with a pooled event of `device`, then gives the event back. A wait is
/// bound to the record made before it, so the event can go back to the pool (and be
/// recorded again) at once.
fn with_pooled_event<R>(device: i32, f: impl FnOnce(Handle) -> Result<R>) -> Result<R> {
    let event = pool_get(device)?;
    let result = f(event);
    destroy(event)?;
    result
}

/// The marker of work already done: no event (the NULL handle's value).
pub(crate) const DONE_MARKER: u64 = 0;

/// Stream-ordering markers for the caching pools' deferred reuse: a pooled event
/// recorded on a raw stream of `device`, as its handle's value. Where no event can
/// be had or recorded, the stream is synchronised instead and `DONE_MARKER` returned:
/// a free must not fail, or leak its block, because an event could not be recorded.
/// Only when that fails too (a broken context, a capturing stream) is it an error.
pub fn marker_record(device: i32, raw_stream: u64) -> Result<u64> {
    let recorded = pool_get(device).and_then(|event| {
        let raw = get(event)?.cu();
        device::with_device(device, || check(unsafe { sys::cuEventRecord(raw, raw_stream as sys::CUstream) }, "cuEventRecord"))
            .map(|()| event.0)
            .inspect_err(|_| {
                let _ = destroy(event);
            })
    });
    let Err(e) = recorded else { return recorded };
    let synced = device::with_device(device, || {
        check(unsafe { sys::cuStreamSynchronize(raw_stream as sys::CUstream) }, "cuStreamSynchronize")
    });
    if synced.is_err() {
        return Err(e);
    }
    crate::log::log(crate::log::Level::Warn, &format!("no stream-ordering marker ({e}): waited for the stream instead"));
    Ok(DONE_MARKER)
}

/// Whether a marker's work is done; a done marker goes back to the event pool.
pub fn marker_done(marker: u64) -> bool {
    if marker == DONE_MARKER {
        return true;
    }
    let event = Handle(marker);
    let done = query(event).unwrap_or(true);
    if done {
        marker_forget(marker);
    }
    done
}

/// Waits for a marker's work, then returns it to the event pool. The pools' own
/// wait (out of memory, empty_cache): not a caller's synchronising call.
pub fn marker_wait(marker: u64) {
    let event = Handle(marker);
    if let Ok(e) = get(event) {
        unsafe { sys::cuEventSynchronize(e.cu()) };
    }
    marker_forget(marker);
}

/// Gives a marker back to the event pool without waiting for its work (re-recording
/// a pooled event later is legal while this record is pending).
pub fn marker_forget(marker: u64) {
    let _ = destroy(Handle(marker));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_metadata_packs_losslessly() {
        for origin in [Origin::Owned, Origin::Pooled, Origin::Ipc] {
            let e = Event::new(0x5555_0000_1234, 3, GPURT_EVENT_INTERPROCESS | GPURT_EVENT_DISABLE_TIMING, origin);
            assert_eq!(Event::unpack(e.pack()), e);
            assert_eq!((e.device(), e.flags(), e.origin()), (3, 6, origin));
        }
    }

    #[test]
    fn flag_validation() {
        assert!(validate_flags(0).is_ok());
        assert!(validate_flags(GPURT_EVENT_BLOCKING_SYNC | GPURT_EVENT_DISABLE_TIMING).is_ok());
        assert!(validate_flags(GPURT_EVENT_INTERPROCESS | GPURT_EVENT_DISABLE_TIMING).is_ok());
        assert!(validate_flags(GPURT_EVENT_INTERPROCESS).unwrap_err().message.contains("GPURT_EVENT_DISABLE_TIMING"));
        assert_eq!(validate_flags(0x80).unwrap_err().status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    }
}
