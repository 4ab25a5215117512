//! Holes in expandable segments: `empty_cache` unmaps every mapping that lies wholly in
//! a free block, at a segment's end or in its middle (PyTorch unmaps free pages
//! anywhere), and growth maps memory into such holes before it extends a segment. A
//! hole is an Unmapped block in its segment's chain, between blocks that stay mapped.

use super::super::blocks::{Block, BlockId, State, NO_BLOCK};
use super::super::history::Action;
use super::super::stats::PoolKind;
use super::{Pool, SegmentSource};
use crate::error::Result;

/// How `release_expandable_free_ranges` gives memory back.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Release {
    /// Unmapped after waiting for the work queued on each segment's stream, once per
    /// stream: a block freed in stream order may still be read or written by work
    /// queued before its free, and cuMemUnmap does not wait for it (PyTorch
    /// synchronises the segment's stream before it unmaps too). Not the whole
    /// device: that would invalidate every capture under way, a framework's on
    /// another thread included. Where a stream's wait fails or must not happen now
    /// (it captures), its segments' memory stays mapped for a later release.
    AfterWaiting,
    /// Unmapped at once: the caller waited for the device (a sleep).
    DeviceIdle,
    /// Unmapped already (a sleep given up without a wake): the holes and addresses only.
    Unmapped,
}

impl<S: SegmentSource> Pool<S> {
    /// Unmaps every mapping that lies wholly in a free block of an expandable segment
    /// (as `how` says): the block keeps what is still mapped and the rest becomes a
    /// hole. A hole at a segment's end shortens it, and a segment with nothing mapped
    /// left gives its addresses back.
    pub(super) fn release_expandable_free_ranges(&mut self, how: Release) {
        let keys: Vec<(u64, usize)> = self.expandable.keys().copied().collect();
        let mut work: Vec<((u64, usize), Vec<BlockId>)> = Vec::new();
        for key in keys {
            let mut free = Vec::new();
            let mut id = self.segments[&self.expandable[&key].base].first;
            while id != NO_BLOCK {
                if self.blocks[id].state == State::Free && self.holds_a_mapping(key, id) {
                    free.push(id);
                }
                id = self.blocks[id].next;
            }
            work.push((key, free));
        }
        if how == Release::AfterWaiting {
            self.wait_for_streams(&mut work);
        }
        for (key, free) in work {
            // Unmapping splits a free block and merges holes, but never another free
            // block: the ids collected stay valid.
            for id in free {
                self.unmap_inside(key, id, how == Release::Unmapped);
            }
            self.trim_end(key);
        }
    }

    /// Waits for the streams of the segments in `work` with memory to unmap, each
    /// once; a segment whose stream was not waited for keeps its memory.
    fn wait_for_streams(&self, work: &mut [((u64, usize), Vec<BlockId>)]) {
        let mut waited: Vec<(u64, bool)> = Vec::new();
        for ((stream, _), free) in work.iter_mut().filter(|(_, free)| !free.is_empty()) {
            let done = match waited.iter().find(|(s, _)| s == stream) {
                Some(&(_, done)) => done,
                None => {
                    let done = self.shared.source.wait_for_stream(*stream).unwrap_or_else(|e| {
                        crate::log::log(crate::log::Level::Error, &format!("releasing free memory: waiting for its stream: {e}"));
                        false
                    });
                    waited.push((*stream, done));
                    done
                }
            };
            if !done {
                free.clear();
            }
        }
    }

    /// Whether free block `id` of `key`'s segment wholly holds one of its mappings.
    fn holds_a_mapping(&self, key: (u64, usize), id: BlockId) -> bool {
        let Block { addr, size, .. } = self.blocks[id];
        let maps = &self.expandable[&key].maps;
        maps.partition_point(|&(start, len)| start + len <= addr + size) > maps.partition_point(|&(start, _)| start < addr)
    }

    /// Unmaps the mappings that lie wholly in free block `id` of `key`'s segment
    /// (`unmapped`: a sleep unmapped and counted them already); what they spanned
    /// becomes a hole, merged with the holes beside it.
    fn unmap_inside(&mut self, key: (u64, usize), id: BlockId, unmapped: bool) {
        let Block { addr, size, pool, .. } = self.blocks[id];
        let seg = &self.expandable[&key];
        let first = seg.maps.partition_point(|&(start, _)| start < addr);
        let inside = seg.maps.partition_point(|&(start, len)| start + len <= addr + size);
        // The mappings in one free block follow each other: those unmapped before a
        // failure make the hole, and the rest stay mapped, counted as reserved.
        let mut last = if unmapped { inside } else { first };
        while last < inside {
            let (start, len) = self.expandable[&key].maps[last];
            if let Err(e) = self.shared.shrink(start, len) {
                crate::log::log(crate::log::Level::Error, &format!("releasing free memory: {e}"));
                break;
            }
            last += 1;
        }
        if first >= last {
            return;
        }
        let maps = &mut self.expandable.get_mut(&key).expect("segment").maps;
        let (from, to) = (maps[first].0, maps[last - 1].0 + maps[last - 1].1);
        maps.drain(first..last);
        if !unmapped {
            self.note(&[Action::SegmentUnmap], from, to - from, key.0);
            self.count_device_memory(pool, -((to - from) as i64), last - first);
        }
        self.remove_free(id);
        let hole = if from > addr { self.split_block(id, from - addr) } else { id };
        let rest = (to < addr + size).then(|| self.split_block(hole, to - from));
        self.blocks[hole].state = State::Unmapped;
        for part in [(hole != id).then_some(id), rest].into_iter().flatten() {
            self.insert_free(part);
        }
        self.join_holes(key, hole);
    }

    /// Records `hole` in its segment's holes, merged with a hole on either side.
    fn join_holes(&mut self, key: (u64, usize), mut hole: BlockId) {
        let prev = self.blocks[hole].prev;
        if prev != NO_BLOCK && self.blocks[prev].state == State::Unmapped {
            self.absorb_right(prev, hole);
            hole = prev;
        } else {
            self.expandable.get_mut(&key).expect("segment").holes.push(hole);
        }
        let next = self.blocks[hole].next;
        if next != NO_BLOCK && self.blocks[next].state == State::Unmapped {
            self.absorb_right(hole, next);
            self.expandable.get_mut(&key).expect("segment").holes.retain(|&h| h != next);
        }
    }

    /// A hole at the end of `key`'s segment goes: the segment ends where its mapped
    /// memory does, or, with none left, gives its address range back.
    fn trim_end(&mut self, key: (u64, usize)) {
        let seg = &self.expandable[&key];
        let (base, reserved, tail) = (seg.base, seg.reserved, seg.tail);
        if self.blocks[tail].state != State::Unmapped {
            return;
        }
        let Block { addr, prev, .. } = self.blocks[tail];
        if prev == NO_BLOCK {
            self.forget_segment(base, tail);
            self.expandable.remove(&key);
            self.shared.free_expandable(base, reserved);
            return;
        }
        let seg = self.expandable.get_mut(&key).expect("segment");
        seg.holes.retain(|&h| h != tail);
        seg.tail = prev;
        // A free neighbour leaves its lists while its neighbours change (split accounting).
        let prev_free = self.is_free(prev);
        if prev_free {
            self.remove_free(prev);
        }
        self.blocks.remove(tail);
        self.blocks[prev].next = NO_BLOCK;
        if prev_free {
            self.insert_free(prev);
        }
        self.segment_mut(base).size = addr - base;
    }

    /// A free block of at least `rounded` bytes made by mapping memory into a hole of
    /// `key`'s segment, as PyTorch's expandable segments do: the lowest hole that,
    /// with its free neighbours, fits, mapped from its start to the page that the free
    /// block before it lacks. `None`: no hole fits.
    pub(super) fn grow_into_hole(&mut self, key: (u64, usize), pool: PoolKind, rounded: u64, stream: u64) -> Result<Option<BlockId>> {
        let base = self.expandable[&key].base;
        let beside = |id: BlockId| if self.is_free(id) { self.blocks[id].size } else { 0 };
        let best = self.expandable[&key]
            .holes
            .iter()
            .map(|&hole| (hole, &self.blocks[hole]))
            .filter(|(_, b)| beside(b.prev) + b.size + beside(b.next) >= rounded)
            .min_by_key(|(_, b)| b.addr)
            .map(|(hole, b)| {
                let lacking = rounded.saturating_sub(beside(b.prev)).max(1);
                (self.to_map(base, pool, b.addr, lacking).min(b.size), b.addr, hole)
            });
        let Some((need, at, hole)) = best else { return Ok(None) };
        let pages = self.map_pages(base, pool, at, need)?;
        let Block { addr, size, .. } = self.blocks[hole];
        self.note(&[Action::SegmentMap], at, need, stream);
        self.count_device_memory(pool, need as i64, pages.len());
        let seg = self.expandable.get_mut(&key).expect("segment");
        let place = seg.maps.partition_point(|&(start, _)| start < at);
        seg.maps.splice(place..place, pages);
        let mapped = if at > addr {
            self.split_block(hole, at - addr)
        } else {
            self.expandable.get_mut(&key).expect("segment").holes.retain(|&h| h != hole);
            hole
        };
        if at + need < addr + size {
            let rest = self.split_block(mapped, need);
            self.expandable.get_mut(&key).expect("segment").holes.push(rest);
        }
        Ok(Some(self.coalesce_into_free(mapped)))
    }
}
