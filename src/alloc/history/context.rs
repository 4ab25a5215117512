//! Annotations (`gpurt_memory_annotate_push` / `_pop`): each thread's stack of names,
//! attached to what the thread allocates while they stand.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

thread_local! {
    /// This thread's annotations: each entry is the whole path so far, so that an
    /// event copies one pointer.
    pub(super) static CONTEXT: RefCell<Vec<Arc<String>>> = const { RefCell::new(Vec::new()) };
}

/// Threads whose annotation stack is not empty.
pub(super) static ANNOTATING: AtomicUsize = AtomicUsize::new(0);

/// Separates nested annotations in an event's context.
const CONTEXT_SEPARATOR: &str = " > ";

/// Attaches `name` to what this thread allocates until the matching `annotate_pop`.
pub fn annotate_push(name: &str) -> usize {
    CONTEXT.with(|c| {
        let mut stack = c.borrow_mut();
        let path = Arc::new(match stack.last() {
            Some(outer) => format!("{outer}{CONTEXT_SEPARATOR}{name}"),
            None => name.to_string(),
        });
        stack.push(path);
        if stack.len() == 1 {
            ANNOTATING.fetch_add(1, Ordering::Relaxed);
        }
        stack.len()
    })
}

/// Removes this thread's innermost annotation; its depth after.
pub fn annotate_pop() -> Result<usize> {
    CONTEXT.with(|c| {
        let mut stack = c.borrow_mut();
        stack.pop().ok_or_else(|| Error::invalid_argument("this thread has no annotation to pop (gpurt_memory_annotate_pop without a push)"))?;
        if stack.is_empty() {
            ANNOTATING.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(stack.len())
    })
}

/// This thread's current annotation path.
pub fn current_context() -> Option<Arc<String>> {
    CONTEXT.with(|c| c.borrow().last().cloned())
}
