//! Process events gpurt must survive: `fork()` after CUDA was initialised.
//!
//! CUDA cannot be used in the child of a `fork()` made after the driver was
//! initialised: the child's copy of the driver's state is not a working context, and
//! a driver call there may fail or hang. The parent's pools, copied into the child,
//! name memory the child cannot reach. So once gpurt has initialised the driver it
//! marks every child it forks, and in such a child every call that needs the driver
//! fails at the panic boundary with `GPURT_ERROR_FORKED` before it touches anything
//! (PyTorch answers the same case with "Cannot re-initialize CUDA in forked
//! subprocess"). A child of a process that never initialised the driver is not
//! marked, and may use CUDA.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crate::error::{Error, Status};

static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn mark_child() {
    // Only an atomic store: a fork handler may run nothing that is not
    // async-signal-safe.
    FORKED.store(true, Ordering::Relaxed);
}

/// Marks the children of every later `fork()`; called once the driver is initialised.
pub(crate) fn watch_forks() {
    static WATCH: Once = Once::new();
    WATCH.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic. glibc removes
        // handlers registered by a shared library when it is unloaded.
        let registered = unsafe { libc::pthread_atfork(None, None, Some(mark_child)) };
        if registered != 0 {
            crate::log::log(crate::log::Level::Warn, "pthread_atfork failed: forked children are not detected");
        }
    });
}

/// Whether this process is a child forked after the driver was initialised.
#[inline(always)]
pub(crate) fn is_forked_child() -> bool {
    FORKED.load(Ordering::Relaxed)
}

#[cold]
pub(crate) fn forked_child_error() -> Error {
    Error::new(
        Status::GPURT_ERROR_FORKED,
        "CUDA cannot be used in a forked child; use spawn (this process was forked after its parent \
         initialised CUDA through gpurt, and the parent's devices, streams and pools are not usable here)",
    )
}
