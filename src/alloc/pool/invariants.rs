//! The pool's invariants, checked after every step of the allocator's tests: the free
//! lists, each segment's chain of blocks, the expandable segments' mappings and holes,
//! and the statistics against what the blocks add up to.

use super::super::blocks::{State, NO_BLOCK};
use super::sleep::Sleep;
use super::{Pool, SegmentSource};

impl<S: SegmentSource> Pool<S> {
    /// Checks every structural and statistical invariant; for tests.
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.check_expandable_invariants()?;
        let mut listed = std::collections::HashSet::new();
        for (index, lists) in self.free.iter().enumerate() {
            let entries = lists.entries(&self.blocks);
            if entries.len() != lists.len() {
                return Err(format!("free lists {index} count {} blocks and hold {}", lists.len(), entries.len()));
            }
            for (id, ok) in entries {
                let b = &self.blocks[id];
                if !ok || b.lists as usize != index || b.pool != lists.pool() || !listed.insert(id) {
                    return Err(format!("free block {:#x} is misfiled in the free lists", b.addr));
                }
            }
        }
        let (mut allocated, mut active, mut requested, mut blocks_seen) = (0i64, 0i64, 0i64, 0);
        let (mut inactive_split, mut inactive_split_blocks) = (0i64, 0i64);
        let (mut parked, mut in_use, mut unmapped, mut unmapped_bytes) = (0, 0, 0, 0);
        let mut segments_per_lists = vec![0; self.free.len()];
        for (&start, seg) in &self.segments {
            let mut at = seg.first;
            let (mut expected_addr, mut prev) = (start, NO_BLOCK);
            let lists = self.blocks[at].lists;
            segments_per_lists[lists as usize] += 1;
            while at != NO_BLOCK {
                let b = &self.blocks[at];
                if b.state == State::Vacant || b.addr != expected_addr || b.prev != prev {
                    return Err(format!("segment {start:#x}: block {:#x} breaks the chain", b.addr));
                }
                if b.lists != lists {
                    return Err(format!("segment {start:#x}: block {:#x} names another stream's lists", b.addr));
                }
                if b.state == State::Free {
                    if !listed.contains(&at) {
                        return Err(format!("free block {:#x} missing from the free lists", b.addr));
                    }
                    for n in [b.prev, b.next] {
                        if self.is_free(n) {
                            return Err(format!("free blocks {:#x} and {:#x} were not coalesced", b.addr, self.blocks[n].addr));
                        }
                    }
                } else if b.state == State::Unmapped {
                    unmapped += 1;
                    unmapped_bytes += b.size;
                } else if self.by_addr.get(&b.addr) != Some(&at) {
                    return Err(format!("block {:#x} in use or parked is missing from the address map", b.addr));
                } else {
                    in_use += 1;
                }
                match b.state {
                    State::Free | State::Parked if b.is_split() => {
                        inactive_split += b.size as i64;
                        inactive_split_blocks += 1;
                    }
                    State::Allocated | State::PendingFree => active += b.size as i64,
                    _ => {}
                }
                if b.state == State::Parked {
                    if !self.parked.iter().any(|p| p.id == at && p.size == b.size && p.stream == self.stream_of(b)) {
                        return Err(format!("parked block {:#x} missing from the parked list", b.addr));
                    }
                    parked += 1;
                }
                if b.state == State::Allocated {
                    allocated += b.size as i64;
                    requested += b.requested as i64;
                }
                blocks_seen += 1;
                expected_addr += b.size;
                prev = at;
                at = b.next;
            }
            if expected_addr != start + seg.size {
                return Err(format!("segment {start:#x}: blocks cover {} of {} bytes", expected_addr - start, seg.size));
            }
        }
        if segments_per_lists.iter().zip(&self.free).any(|(&n, lists)| lists.segments != n) {
            return Err("free lists miscount their segments".into());
        }
        if self.used_on.keys().any(|&id| self.blocks[id].state != State::Allocated || !self.blocks[id].used_elsewhere) {
            return Err("streams recorded for a block that is not allocated".into());
        }
        if parked != self.parked.len() {
            return Err(format!("{} blocks listed as parked for {parked} parked", self.parked.len()));
        }
        let large = self.parked.iter().filter(|p| p.size > self.park_max).count();
        if large != self.parked_large {
            return Err(format!("{} parked blocks counted above park_max for {large}", self.parked_large));
        }
        if blocks_seen != self.blocks.len() || listed.len() + in_use + unmapped != self.blocks.len() || in_use != self.by_addr.len() {
            return Err("blocks outside any segment, stale free-list entries or stale addresses".into());
        }
        let s = &self.stats();
        let reserved = self.segments.values().map(|seg| seg.size).sum::<u64>() - unmapped_bytes - self.asleep.as_ref().map_or(0, Sleep::unmapped_bytes);
        let checks = [
            ("allocated_bytes", s.allocated_bytes.all.current, allocated),
            ("active_bytes", s.active_bytes.all.current, active),
            ("inactive_split_bytes", s.inactive_split_bytes.all.current, inactive_split),
            ("inactive_split", s.inactive_split.all.current, inactive_split_blocks),
            ("requested_bytes", s.requested_bytes.all.current, requested),
            ("reserved_bytes", s.reserved_bytes.all.current, reserved as i64),
            ("asleep_bytes", s.asleep_bytes, self.asleep.as_ref().map_or(0, Sleep::unmapped_bytes) as i64),
        ];
        for (name, stat, truth) in checks {
            if stat != truth {
                return Err(format!("{name} is {stat}, the blocks add up to {truth}"));
            }
        }
        Ok(())
    }

    /// The expandable segments' invariants, for `check_invariants`: each tail ends its
    /// segment's mapped bytes; mappings and holes, in address order, do not overlap and
    /// together cover the segment; the holes listed are its Unmapped blocks, never two
    /// side by side nor at its end.
    pub(super) fn check_expandable_invariants(&self) -> std::result::Result<(), String> {
        for seg in self.expandable.values() {
            let extent = self.segments.get(&seg.base).ok_or("an expandable segment is missing from the segments")?.size;
            let tail = &self.blocks[seg.tail];
            if matches!(tail.state, State::Vacant | State::Unmapped) || tail.addr + tail.size != seg.base + extent || tail.next != NO_BLOCK || extent > seg.reserved {
                return Err(format!("expandable segment {:#x}: its tail block does not end its {extent} mapped bytes", seg.base));
            }
            let ordered = seg.maps.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0);
            if !ordered || seg.maps.first().map_or(true, |m| m.0 < seg.base) || seg.maps.last().map_or(true, |m| m.0 + m.1 != seg.base + extent) {
                return Err(format!("expandable segment {:#x}: its mappings {:x?} do not end at its {extent} bytes in order", seg.base, seg.maps));
            }
            let (mut holes, mut hole_bytes, mut id, mut prev_hole) = (Vec::new(), 0, self.segments[&seg.base].first, false);
            while id != NO_BLOCK {
                let b = &self.blocks[id];
                let hole = b.state == State::Unmapped;
                if hole {
                    let overlaps = seg.maps.iter().any(|&(start, len)| start < b.addr + b.size && b.addr < start + len);
                    if overlaps || prev_hole {
                        return Err(format!("expandable segment {:#x}: hole {:#x} overlaps a mapping or another hole", seg.base, b.addr));
                    }
                    holes.push(id);
                    hole_bytes += b.size;
                }
                prev_hole = hole;
                id = b.next;
            }
            let mut listed = seg.holes.clone();
            listed.sort_unstable();
            holes.sort_unstable();
            let mapped: u64 = seg.maps.iter().map(|m| m.1).sum();
            if listed != holes || mapped + hole_bytes != extent {
                return Err(format!("expandable segment {:#x}: holes {listed:?} listed for {holes:?}, {mapped} bytes mapped and {hole_bytes} unmapped of {extent}", seg.base));
            }
        }
        Ok(())
    }
}
