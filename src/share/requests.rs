//! Requests between a group's members: a member that needs memory asks the others to
//! give back what they offered (`Offer`), and waits, within a deadline, for each to
//! answer. No daemon and no socket: a request is a count in the asked member's slot
//! that its server thread waits on (a futex in the shared registry), and the answer the
//! count of requests it has served, which the requester waits on.
//!
//! A request carries no command: the asked member only ever does what it offered when
//! it joined, down to the level asked, so a forged request can do no more than an
//! honest one, and a stale one (already served) does nothing. A requester never waits
//! on itself, on a member that died (checked as it waits), or past its deadline; a
//! member's server runs on its own thread, so two members asking each other at once
//! each serve the other while they wait: neither waits for the other's request thread.
//! The server's work (the handler) must not wait for a lock the asking thread holds.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::registry::{prune, Offer, Registry, Slot};
use crate::error::{Error, Result};
use crate::ipc::holders::Process;

/// How long a waiting thread sleeps at most before it looks again (a member that died,
/// a server told to stop).
const LOOK_AGAIN: Duration = Duration::from_millis(10);

/// Waits while `word` holds `expected`, `timeout` at most (the futex is shared between
/// processes: no FUTEX_PRIVATE_FLAG).
fn wait_while(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: the word is a live, aligned u32 in a shared mapping; the timeout is a valid timespec.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec, 0usize, 0u32) };
}

fn wake_all(word: &AtomicU32) {
    // SAFETY: as in `wait_while`.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// A member's answer to a request: what it gave back, or `None` where it did not answer
/// before the deadline or died first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub pid: u32,
    pub released: Option<u64>,
}

/// What a member is asked, over the requests since it last served: the deepest level
/// (no deeper than it offered) and the most bytes any of them wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub level: Offer,
    pub wanted: u64,
}

/// What a member's server runs: `serve` for each request, `tick` between requests at
/// least every `period` (to watch what is idle).
pub trait Serve: Send + 'static {
    /// Gives back what `request` asks, as far as the member offered; the bytes given back.
    fn serve(&mut self, request: Request) -> u64;
    fn tick(&mut self) {}
    fn period(&self) -> Duration {
        LOOK_AGAIN * 10
    }
}

impl<F: FnMut(Request) -> u64 + Send + 'static> Serve for F {
    fn serve(&mut self, request: Request) -> u64 {
        self(request)
    }
}

/// A member's server: a thread that serves the requests made of its slot until dropped.
pub struct Server {
    stop: Arc<AtomicBool>,
    registry: Arc<Registry>,
    slot: usize,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves the requests made of `slot` (this process's, from `join`) with `server`.
    pub fn start(registry: Arc<Registry>, slot: usize, mut server: impl Serve) -> Result<Server> {
        let me = std::process::id();
        if !registry.table().slots.get(slot).is_some_and(|s| s.pid.load(Ordering::Acquire) == me) {
            return Err(Error::invalid_argument(format!("slot {slot} is not this process's")));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (thread_stop, thread_registry) = (stop.clone(), registry.clone());
        let thread = std::thread::Builder::new()
            .name("gpurt-share".into())
            .spawn(move || {
                let s = &thread_registry.table().slots[slot];
                let mut seen = s.served.load(Ordering::Acquire);
                while !thread_stop.load(Ordering::Acquire) {
                    server.tick();
                    wait_while(&s.asked, seen, server.period());
                    let now = s.asked.load(Ordering::Acquire);
                    if now == seen {
                        continue;
                    }
                    // What the member offers now (`Registry::set_offer` may raise it).
                    let offer = Offer::from_u32(s.offer.load(Ordering::Acquire));
                    let level = Offer::from_u32(s.level.swap(0, Ordering::AcqRel)).min(offer);
                    let wanted = s.wanted.swap(0, Ordering::AcqRel);
                    let released = if level == Offer::Never { 0 } else { server.serve(Request { level, wanted }) };
                    s.released.store(released, Ordering::Relaxed);
                    s.served.store(now, Ordering::Release);
                    wake_all(&s.served);
                    seen = now;
                }
            })
            .map_err(|e| Error::new(crate::error::Status::GPURT_ERROR_INTERNAL, format!("cannot start the share server thread: {e}")))?;
        Ok(Server { stop, registry, slot, thread: Some(thread) })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        wake_all(&self.registry.table().slots[self.slot].asked);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Asks every other live member on `device` that offers at least `request.level` to
/// give back what it offered down to that level (`request.wanted` bytes, where it
/// chooses what to give), and waits for their answers until `deadline`. `me`: this
/// process's slot, never asked.
pub fn ask(registry: &Registry, me: Option<usize>, device: i32, request: Request, deadline: Instant) -> Result<Vec<Answer>> {
    ask_where(registry, device, request, deadline, |i| Some(i) != me)
}

/// As `ask`, of member `slot` alone (found by `Registry::idle_members`); `None` where it
/// is no longer a member on `device` offering the level asked.
pub fn ask_one(registry: &Registry, slot: usize, device: i32, request: Request, deadline: Instant) -> Result<Option<Answer>> {
    Ok(ask_where(registry, device, request, deadline, |i| i == slot)?.pop())
}

fn ask_where(registry: &Registry, device: i32, request: Request, deadline: Instant, pick: impl Fn(usize) -> bool) -> Result<Vec<Answer>> {
    let level = request.level;
    if level == Offer::Never {
        return Ok(Vec::new());
    }
    let asked: Vec<(usize, Process, u32)> = registry.locked(|t| {
        prune(t);
        t.slots
            .iter()
            .enumerate()
            .filter(|&(i, s)| {
                pick(i)
                    && s.pid.load(Ordering::Acquire) != 0
                    && s.device.load(Ordering::Relaxed) == device
                    && Offer::from_u32(s.offer.load(Ordering::Relaxed)) >= level
            })
            .map(|(i, s)| {
                s.level.fetch_max(level as u32, Ordering::AcqRel);
                s.wanted.fetch_max(request.wanted, Ordering::AcqRel);
                let target = s.asked.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
                wake_all(&s.asked);
                (i, Process { pid: s.pid.load(Ordering::Relaxed), start: s.started.load(Ordering::Relaxed) }, target)
            })
            .collect()
    })?;
    Ok(asked
        .into_iter()
        .map(|(i, process, target)| Answer { pid: process.pid, released: await_answer(&registry.table().slots[i], process, target, deadline) })
        .collect())
}

/// The bytes the member in `slot` gave back once it has served request `target`; `None`
/// if it died (or left) first or the deadline passed.
fn await_answer(slot: &Slot, process: Process, target: u32, deadline: Instant) -> Option<u64> {
    loop {
        let served = slot.served.load(Ordering::Acquire);
        // Counts wrap: served is at or past target when their difference is "non-negative".
        if served.wrapping_sub(target) as i32 >= 0 {
            return Some(slot.released.load(Ordering::Relaxed));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || slot.pid.load(Ordering::Acquire) != process.pid || !process.is_alive() {
            return None;
        }
        wait_while(&slot.served, served, left.min(LOOK_AGAIN));
    }
}
