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
    /// the caller freed them. An expandable segment with holes shows as one segment per
    /// mapped run between them, as PyTorch shows its expandable segments.
    pub fn segment_views(&self) -> Vec<SegmentView> {
        let mut views = Vec::new();
        for (&addr, segment) in &self.segments {
            let first: &Block = &self.blocks[segment.first];
            let expandable = self.expandable.values().any(|e| e.base == addr);
            let (stream, small) = (self.stream_of(first), first.pool == PoolKind::Small);
            let mut run: Vec<BlockView> = Vec::new();
            let mut id = segment.first;
            loop {
                let b = (id != NO_BLOCK).then(|| &self.blocks[id]);
                if b.map_or(true, |b| b.state == State::Unmapped) && !run.is_empty() {
                    let (addr, size) = (run[0].addr, run.iter().map(|b| b.size).sum());
                    views.push(SegmentView { addr, size, stream, small, expandable, blocks: std::mem::take(&mut run) });
                }
                let Some(b) = b else { break };
                id = b.next;
                let state = match b.state {
                    State::Allocated => BlockState::ActiveAllocated,
                    State::PendingFree => BlockState::ActivePendingFree,
                    State::Unmapped => continue, // a hole holds no memory
                    _ => BlockState::Inactive,
                };
                let requested = if state == BlockState::ActiveAllocated { b.requested } else { 0 };
                run.push(BlockView { addr: b.addr, size: b.size, requested, state });
            }
        }
        views.sort_by_key(|v: &SegmentView| v.addr);
        views
    }
}
