//! What an allocation the device refused may still try before it fails: asking other
//! processes to give memory back. A higher module installs the asking (a share group,
//! `crate::share`); the allocator only calls it, after its own cache is released and
//! holding none of its locks, so that the asking may wait and this process may serve
//! the others' requests meanwhile. The hook gets the device (`None`: a pool of host
//! memory, in tests) and the bytes wanted, and says whether anything was given back
//! (the allocation is then retried once).

use std::sync::{Arc, RwLock};

pub type Hook = Arc<dyn Fn(Option<i32>, u64) -> bool + Send + Sync>;

static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Installs `hook` (or, `None`, removes it) for every pool of the process.
pub fn set_out_of_memory_hook(hook: Option<Hook>) {
    *HOOK.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// Asks through the installed hook; false where there is none.
pub(crate) fn ask_others(device: Option<i32>, bytes: u64) -> bool {
    let hook = HOOK.read().unwrap_or_else(|e| e.into_inner()).clone();
    hook.is_some_and(|ask| ask(device, bytes))
}
