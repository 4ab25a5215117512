//! What an allocation the device refused may still try before it fails: asking other
//! processes to give memory back. A higher module installs the asking (a share group,
//! `crate::share`); the allocator only calls it, after its own cache is released and
//! holding none of its locks, so that the asking may wait and this process may serve
//! the others' requests meanwhile. The hook gets the device (`None`: a pool of host
//! memory, in tests) and the bytes wanted, and says whether anything was given back
//! (the allocation is then retried once) and how the asking went, for the
//! out-of-memory message when the retry fails too.

use std::sync::{Arc, RwLock};

/// What asking others came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    pub given_back: bool,
    /// Who was asked and what each gave, said in a message.
    pub account: String,
}

/// `None`: the device is not shared, nobody was asked.
pub type Hook = Arc<dyn Fn(Option<i32>, u64) -> Option<Asked> + Send + Sync>;

static HOOK: RwLock<Option<Hook>> = RwLock::new(None);

/// Installs `hook` (or, `None`, removes it) for every pool of the process.
pub fn set_out_of_memory_hook(hook: Option<Hook>) {
    *HOOK.write().unwrap_or_else(|e| e.into_inner()) = hook;
}

/// Asks through the installed hook; `None` where there is none.
pub(crate) fn ask_others(device: Option<i32>, bytes: u64) -> Option<Asked> {
    let hook = HOOK.read().unwrap_or_else(|e| e.into_inner()).clone();
    hook.and_then(|ask| ask(device, bytes))
}
