//! Native stacks of the allocator's callers: raw return addresses captured with each
//! event, symbolised only when a snapshot is written, the capture's and the
//! allocator's own frames left out.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

/// Return addresses kept per stack.
const STACK_DEPTH: usize = 48;

pub(super) fn capture_stack() -> Arc<Vec<usize>> {
    let mut ips = Vec::with_capacity(STACK_DEPTH);
    backtrace::trace(|frame| {
        ips.push(frame.ip() as usize);
        ips.len() < STACK_DEPTH
    });
    Arc::new(ips)
}

/// A symbolised stack frame, as PyTorch's snapshots give them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    pub name: String,
    pub filename: String,
    pub line: u32,
}

/// Where the frames of the capture and the allocator's internals begin their names
/// (after a `<`, for methods: `<gpurt::alloc::pool::Pool<..>>::malloc`).
const ALLOCATOR_FRAMES: [&str; 9] = [
    "backtrace::",
    "gpurt::alloc::history",
    "gpurt::alloc::pool",
    "gpurt::alloc::caching",
    "gpurt::alloc::device",
    "gpurt::alloc::mempool",
    "gpurt::alloc::capture",
    "gpurt::alloc::ffi",
    "gpurt::boundary",
];

fn is_allocator_frame(frame: &Frame) -> bool {
    let name = frame.name.strip_prefix('<').unwrap_or(&frame.name);
    ALLOCATOR_FRAMES.iter().any(|p| name.starts_with(p))
}

/// Symbolises stacks, each address once.
#[derive(Default)]
pub struct Symbolizer {
    known: HashMap<usize, Vec<Frame>>,
}

impl Symbolizer {
    /// The caller's frames of `stack`, from the C entry point down: the capture's and
    /// the allocator's own frames above it are left out.
    pub fn frames(&mut self, stack: &[usize]) -> Vec<Frame> {
        let frames: Vec<Frame> = stack.iter().flat_map(|&ip| self.frames_at(ip).to_vec()).collect();
        let first = frames.iter().rposition(is_allocator_frame).map_or(0, |i| i + 1);
        frames[first..].to_vec()
    }

    /// The frames at one return address: the functions inlined there, innermost
    /// first, then the function that holds them (an allocator function inlined into
    /// its caller shares the caller's address).
    fn frames_at(&mut self, ip: usize) -> &[Frame] {
        self.known.entry(ip).or_insert_with(|| {
            let mut found = Vec::new();
            // The address is a return address: look up the call before it.
            backtrace::resolve(ip.saturating_sub(1) as *mut std::ffi::c_void, |symbol| {
                found.push(Frame {
                    name: symbol.name().map(|n| format!("{n:#}")).unwrap_or_else(|| format!("{ip:#x}")),
                    filename: symbol.filename().map(|p| p.display().to_string()).unwrap_or_else(|| "??".into()),
                    line: symbol.lineno().unwrap_or(0),
                });
            });
            if found.is_empty() {
                found.push(Frame { name: format!("{ip:#x}"), filename: "??".into(), line: 0 });
            }
            found
        })
    }
}
