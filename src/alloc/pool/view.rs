//! What a snapshot shows of a pool: its segments, each with its blocks in address
//! order.

use super::{Block, Pool, SegmentSource, State, NO_BLOCK};
use crate::alloc::stats::PoolKind;

/// A block's state, as PyTorch's snapshots name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Handed out.
    ActiveAllocated,
    /// Freed, waiting for other streams' work before reuse.
    ActivePendingFree,
    /// Free in the cache.
    Inactive,
}

impl BlockState {
    pub fn name(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "active_allocated",
            BlockState::ActivePendingFree => "active_pending_free",
            BlockState::Inactive => "inactive",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockView {
    pub addr: u64,
    pub size: u64,
    /// The caller's request (0 for a block not handed out).
    pub requested: u64,
    pub state: BlockState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentView {
    pub addr: u64,
    /// Its bytes (for an expandable segment, those mapped).
    pub size: u64,
    pub stream: u64,
    /// Whether it serves the small pool (blocks up to 1 MiB).
    pub small: bool,
    pub expandable: bool,
    pub blocks: Vec<BlockView>,
}

impl<S: SegmentSource> Pool<S> {
    /// Every segment with its blocks, by address. Parked blocks show as inactive:
    /// the caller freed them.
    pub fn segment_views(&self) -> Vec<SegmentView> {
        let mut views: Vec<SegmentView> = self
            .segments
            .iter()
            .map(|(&addr, segment)| {
                let first: &Block = &self.blocks[segment.first];
                let mut blocks = Vec::new();
                let mut id = segment.first;
                while id != NO_BLOCK {
                    let b = &self.blocks[id];
                    let state = match b.state {
                        State::Allocated => BlockState::ActiveAllocated,
                        State::PendingFree => BlockState::ActivePendingFree,
                        _ => BlockState::Inactive,
                    };
                    let requested = if state == BlockState::ActiveAllocated { b.requested } else { 0 };
                    blocks.push(BlockView { addr: b.addr, size: b.size, requested, state });
                    id = b.next;
                }
                SegmentView {
                    addr,
                    size: segment.size,
                    stream: self.stream_of(first),
                    small: first.pool == PoolKind::Small,
                    expandable: self.expandable.values().any(|e| e.base == addr),
                    blocks,
                }
            })
            .collect();
        views.sort_by_key(|v| v.addr);
        views
    }
}
