//! Memory snapshots (`torch.cuda.memory._snapshot()`): every segment of a device's
//! pools with its blocks, and the device's memory history, in the structure
//! PyTorch's snapshots have, so that its tools (`torch.cuda._memory_viz`, the
//! drag-and-drop viewer) read gpurt's. Written as JSON, as a pickle, or as a
//! self-contained HTML page that draws it (`viewer.html`).
//!
//! The model and its encodings (this file) need no GPU; `device` gathers a device's
//! pools and writes files; `ffi` holds the C entry points.

pub mod device;
pub mod ffi;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::history::{Action, Event, Frame, Symbolizer};
use super::pool::{BlockState, SegmentView};
use super::stats::gpurt_memory_stats_t;
use crate::error::{Error, Result, Status};

/// What a memory snapshot is written as.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gpurt_snapshot_format_t {
    /// JSON with the structure of `torch.cuda.memory._snapshot()`, for any tool.
    GPURT_SNAPSHOT_JSON = 0,
    /// A pickle with the structure of `torch.cuda.memory._snapshot()`: PyTorch's
    /// `python -m torch.cuda._memory_viz` and its viewer read it.
    GPURT_SNAPSHOT_PICKLE = 1,
    /// One self-contained HTML page that draws the snapshot (no network needed).
    GPURT_SNAPSHOT_HTML = 2,
}

use gpurt_snapshot_format_t::*;

impl gpurt_snapshot_format_t {
    /// The format of a C caller's code; an unknown code is an invalid argument.
    pub fn from_raw(raw: i32) -> Result<Self> {
        [GPURT_SNAPSHOT_JSON, GPURT_SNAPSHOT_PICKLE, GPURT_SNAPSHOT_HTML].into_iter().find(|f| *f as i32 == raw).ok_or_else(|| {
            Error::invalid_argument(format!("snapshot format {raw}: give GPURT_SNAPSHOT_JSON, GPURT_SNAPSHOT_PICKLE or GPURT_SNAPSHOT_HTML"))
        })
    }
}

/// The snapshot, with PyTorch's keys; gpurt's additions are `gpurt`, each block's
/// `annotation`, and each trace entry's `seq` and `pool`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub segments: Vec<Segment>,
    /// Indexed by device ordinal: the snapshot's device holds its events.
    pub device_traces: Vec<Vec<TraceEntry>>,
    pub allocator_settings: HashMap<String, String>,
    pub gpurt: About,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub device: i32,
    pub address: u64,
    pub total_size: u64,
    pub allocated_size: u64,
    pub active_size: u64,
    pub requested_size: u64,
    pub stream: u64,
    /// "small" or "large".
    pub segment_type: String,
    /// (0, 0): the device's default pool; (1, id): a pool users created; (2, id): a
    /// graph's private pool.
    pub segment_pool_id: (i64, u64),
    pub is_expandable: bool,
    pub frames: Vec<Frame>,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    /// "active_allocated", "active_pending_free" or "inactive".
    pub state: String,
    /// Where it was allocated, when the history recorded stacks.
    pub frames: Vec<Frame>,
    /// The annotation it was allocated under, when the history recorded it.
    pub annotation: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEntry {
    pub action: String,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub time_us: u64,
    pub frames: Vec<Frame>,
    /// The annotation in force ("" when none), under PyTorch's key for it.
    pub user_metadata: String,
    /// For "oom": the driver's free bytes then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_free: Option<u64>,
    pub seq: u64,
    pub pool: (i64, u64),
}

/// What gpurt adds: the device's statistics as `gpurt_memory_stats` gives them when
/// the snapshot is taken, and the state of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct About {
    pub version: String,
    pub device: i32,
    pub allocated_bytes: i64,
    pub reserved_bytes: i64,
    pub active_bytes: i64,
    pub requested_bytes: i64,
    pub num_ooms: i64,
    /// Bytes of its pools asleep (gpurt_mem_pool_sleep), and of those offloaded.
    #[serde(default)]
    pub asleep_bytes: i64,
    #[serde(default)]
    pub offloaded_bytes: i64,
    pub history_recording: bool,
    /// Events the ring dropped for room.
    pub history_dropped: u64,
}

/// One pool's share of a device: its id in the snapshot, its allocator's id in the
/// history's events, and its segments.
pub struct PoolPart {
    pub pool_id: (i64, u64),
    pub allocator: u64,
    pub segments: Vec<SegmentView>,
}

/// The pool id of events from allocators that are gone.
const GONE: i64 = -1;

/// The snapshot of `device`: `parts` are its pools, `events` its history (oldest
/// first), `stats` its statistics taken with the parts.
pub fn build(device: i32, parts: &[PoolPart], events: &[Event], dropped: u64, recording: bool, stats: &gpurt_memory_stats_t) -> Snapshot {
    let mut symbols = Symbolizer::default();
    let mut frames = |stack: &Option<std::sync::Arc<Vec<usize>>>| stack.as_ref().map(|s| symbols.frames(s)).unwrap_or_default();
    let pool_of: HashMap<u64, (i64, u64)> = parts.iter().map(|p| (p.allocator, p.pool_id)).collect();
    // The event that made each live block and each segment: its stack and annotation.
    let mut origin: HashMap<(u64, u64), &Event> = HashMap::new();
    for e in events {
        match e.action {
            Action::Alloc | Action::SegmentAlloc | Action::SegmentMap => {
                origin.insert((e.allocator, e.addr), e);
            }
            Action::FreeRequested | Action::SegmentFree => {
                origin.remove(&(e.allocator, e.addr));
            }
            _ => {}
        }
    }
    let trace = events
        .iter()
        .map(|e| TraceEntry {
            action: e.action.name().into(),
            addr: e.addr,
            size: e.size,
            stream: e.stream,
            time_us: super::history::unix_us(e.time_ns),
            frames: frames(&e.stack),
            user_metadata: e.context.as_deref().cloned().unwrap_or_default(),
            device_free: (e.action == Action::Oom).then_some(e.device_free),
            seq: e.seq,
            pool: pool_of.get(&e.allocator).copied().unwrap_or((GONE, e.allocator)),
        })
        .collect();
    let mut segments = Vec::new();
    for part in parts {
        for view in &part.segments {
            let origin_of = |addr: u64| origin.get(&(part.allocator, addr)).copied();
            let blocks: Vec<Block> = view
                .blocks
                .iter()
                .map(|b| {
                    let made = origin_of(b.addr).filter(|e| e.action == Action::Alloc && b.requested > 0);
                    Block {
                        address: b.addr,
                        size: b.size,
                        requested_size: b.requested,
                        state: b.state.name().into(),
                        frames: made.map(|e| frames(&e.stack)).unwrap_or_default(),
                        annotation: made.and_then(|e| e.context.as_deref().cloned()),
                    }
                })
                .collect();
            let bytes = |counted: fn(BlockState) -> bool| view.blocks.iter().filter(|b| counted(b.state)).map(|b| b.size).sum();
            segments.push(Segment {
                device,
                address: view.addr,
                total_size: view.size,
                allocated_size: bytes(|s| s == BlockState::ActiveAllocated),
                active_size: bytes(|s| s != BlockState::Inactive),
                requested_size: view.blocks.iter().map(|b| b.requested).sum(),
                stream: view.stream,
                segment_type: if view.small { "small" } else { "large" }.into(),
                segment_pool_id: part.pool_id,
                is_expandable: view.expandable,
                frames: origin_of(view.addr).filter(|e| e.action != Action::Alloc).map(|e| frames(&e.stack)).unwrap_or_default(),
                blocks,
            });
        }
    }
    let mut device_traces = vec![Vec::new(); device.max(0) as usize];
    device_traces.push(trace);
    Snapshot {
        segments,
        device_traces,
        allocator_settings: HashMap::new(),
        gpurt: About {
            version: env!("CARGO_PKG_VERSION").into(),
            device,
            allocated_bytes: stats.allocated_bytes.all.current,
            reserved_bytes: stats.reserved_bytes.all.current,
            active_bytes: stats.active_bytes.all.current,
            requested_bytes: stats.requested_bytes.all.current,
            num_ooms: stats.num_ooms,
            asleep_bytes: stats.asleep_bytes,
            offloaded_bytes: stats.offloaded_bytes,
            history_recording: recording,
            history_dropped: dropped,
        },
    }
}

/// The snapshot in `format`.
pub fn encode(snapshot: &Snapshot, format: gpurt_snapshot_format_t) -> Result<Vec<u8>> {
    let failed = |what: &str, e: &dyn std::fmt::Display| Error::new(Status::GPURT_ERROR_INTERNAL, format!("encoding the snapshot as {what}: {e}"));
    match format {
        GPURT_SNAPSHOT_JSON => serde_json::to_vec(snapshot).map_err(|e| failed("JSON", &e)),
        GPURT_SNAPSHOT_PICKLE => serde_pickle::to_vec(snapshot, serde_pickle::SerOptions::new()).map_err(|e| failed("a pickle", &e)),
        GPURT_SNAPSHOT_HTML => {
            let json = serde_json::to_string(snapshot).map_err(|e| failed("JSON", &e))?;
            Ok(html_page(&json).into_bytes())
        }
    }
}

/// The viewer page with `json` in it. A `<` can only be inside a JSON string (an
/// annotation, a frame's name): as `\u003c` it is the same string to JSON, and no
/// "</script>" or "<!--" in the data can end or change the script element.
fn html_page(json: &str) -> String {
    const VIEWER: &str = include_str!("viewer.html");
    const SLOT: &str = "\"__GPURT_SNAPSHOT__\"";
    VIEWER.replacen(SLOT, &json.replace('<', "\\u003c"), 1)
}

#[cfg(test)]
mod tests;
