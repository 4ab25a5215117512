//! Work that runs on the launch stream before each replay of a graph: what a module
//! above `graph` captured needs refreshed per replay (a random fill's base offset,
//! so that each replay draws new numbers). Hooks are added while a stream captures,
//! pass to the graph at the end of the capture, and to each exec made from it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::boundary::lock;
use crate::error::Result;

pub trait ReplayHook: Send + Sync {
    /// Enqueues the hook's work on `native_stream` (of `device`) before a replay.
    fn before_replay(&self, native_stream: u64, device: i32) -> Result<()>;
    /// The capture that added the hook ended (or failed).
    fn capture_ended(&self) {}
}

#[derive(Default)]
struct Hooks {
    /// By the driver's capture id, while capturing.
    captures: HashMap<u64, Vec<Arc<dyn ReplayHook>>>,
    /// By graph or exec handle value.
    holders: HashMap<u64, Vec<Arc<dyn ReplayHook>>>,
}

static HOOKS: Mutex<Option<Hooks>> = Mutex::new(None);
/// Graphs and execs with hooks: while zero, a launch reads nothing more.
static HOLDERS: AtomicUsize = AtomicUsize::new(0);

fn with_hooks<T>(f: impl FnOnce(&mut Hooks) -> T) -> T {
    let mut guard = lock(&HOOKS);
    let hooks = guard.get_or_insert_with(Hooks::default);
    let result = f(hooks);
    HOLDERS.store(hooks.holders.len(), Ordering::Release);
    result
}

/// Runs `hook` before each replay of the graph capture `capture` makes.
pub fn add_replay_hook(capture: u64, hook: Arc<dyn ReplayHook>) {
    with_hooks(|h| h.captures.entry(capture).or_default().push(hook));
}

/// The hooks of an ended capture, told so.
pub(super) fn capture_ended(capture: u64) -> Vec<Arc<dyn ReplayHook>> {
    let hooks = with_hooks(|h| h.captures.remove(&capture)).unwrap_or_default();
    hooks.iter().for_each(|hook| hook.capture_ended());
    hooks
}

/// The hooks of capture `from` (a conditional body's, ended) belong to capture `to`
/// (the graph the body is part of) from now on.
pub(super) fn move_hooks(from: u64, to: u64) {
    with_hooks(|h| {
        if let Some(hooks) = h.captures.remove(&from) {
            h.captures.entry(to).or_default().extend(hooks);
        }
    });
}

pub(super) fn give_to(holder: u64, hooks: Vec<Arc<dyn ReplayHook>>) {
    if !hooks.is_empty() {
        with_hooks(|h| h.holders.insert(holder, hooks));
    }
}

/// `to` (an exec) runs the hooks of `from` (its graph) from now on.
pub(super) fn copy(from: u64, to: u64) {
    with_hooks(|h| match h.holders.get(&from).cloned() {
        Some(hooks) => h.holders.insert(to, hooks),
        None => h.holders.remove(&to),
    });
}

pub(super) fn forget(holder: u64) {
    if HOLDERS.load(Ordering::Acquire) > 0 {
        with_hooks(|h| h.holders.remove(&holder));
    }
}

/// A capture's accesses declared to the stream sanitizer, declared again on the
/// launch stream at each replay.
impl ReplayHook for crate::sanitizer::CapturedAccesses {
    fn before_replay(&self, native_stream: u64, device: i32) -> Result<()> {
        crate::sanitizer::replayed(self, crate::stream::key::sanitizer_ref(device, native_stream, None));
        Ok(())
    }
}

pub(super) fn before_replay(exec: u64, native_stream: u64, device: i32) -> Result<()> {
    if HOLDERS.load(Ordering::Acquire) == 0 {
        return Ok(());
    }
    let hooks = with_hooks(|h| h.holders.get(&exec).cloned()).unwrap_or_default();
    hooks.iter().try_for_each(|hook| hook.before_replay(native_stream, device))
}
