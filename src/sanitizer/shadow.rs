//! Shadow memory: for each byte range, the last write and the last read by each
//! stream since that write, as non-overlapping cells split where accesses begin and
//! end. An access is checked against the cells it covers and then recorded there.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::clock::{Epoch, VectorClock};
use super::StreamId;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// One declared access, shared by every cell it covers.
#[derive(Debug)]
pub struct AccessInfo {
    pub epoch: Epoch,
    pub stream: StreamId,
    pub access: Access,
    pub start: u64,
    pub len: u64,
    pub tag: Arc<str>,
    pub stack: Option<Arc<std::backtrace::Backtrace>>,
}

#[derive(Debug, Clone, Default)]
struct Cell {
    end: u64,
    write: Option<Arc<AccessInfo>>,
    /// At most one per stream: a later access ordered after a stream's last read is
    /// ordered after its earlier ones too.
    reads: Vec<Arc<AccessInfo>>,
}

#[derive(Debug, Default)]
pub struct Shadow {
    cells: BTreeMap<u64, Cell>,
}

impl Shadow {
    /// Makes `at` a cell boundary.
    fn split_at(&mut self, at: u64) {
        let Some((_, cell)) = self.cells.range_mut(..at).next_back() else { return };
        if cell.end > at {
            let right = cell.clone();
            cell.end = at;
            self.cells.insert(at, right);
        }
    }

    /// Checks `info` (on a stream whose clock is `clock`) against the earlier accesses
    /// to its range, records it, and returns the earlier ones it is not ordered after
    /// and conflicts with: any write, and reads when `info` writes.
    pub fn access(&mut self, info: &Arc<AccessInfo>, clock: &VectorClock) -> Vec<Arc<AccessInfo>> {
        let (start, end) = (info.start, info.start + info.len);
        self.split_at(start);
        self.split_at(end);
        let mut races: Vec<Arc<AccessInfo>> = Vec::new();
        let mut note = |earlier: &Arc<AccessInfo>| {
            if !clock.covers(earlier.epoch) && !races.iter().any(|r| Arc::ptr_eq(r, earlier)) {
                races.push(earlier.clone());
            }
        };
        let mut gaps = Vec::new();
        let mut cursor = start;
        for (&cell_start, cell) in self.cells.range_mut(start..end) {
            if cell_start > cursor {
                gaps.push((cursor, cell_start));
            }
            cursor = cell.end;
            cell.write.iter().for_each(&mut note);
            match info.access {
                Access::Write => {
                    cell.reads.iter().for_each(&mut note);
                    cell.reads.clear();
                    cell.write = Some(info.clone());
                }
                Access::Read => {
                    cell.reads.retain(|r| r.epoch.slot != info.epoch.slot);
                    cell.reads.push(info.clone());
                }
            }
        }
        if cursor < end {
            gaps.push((cursor, end));
        }
        for (gap_start, gap_end) in gaps {
            let cell = match info.access {
                Access::Write => Cell { end: gap_end, write: Some(info.clone()), reads: Vec::new() },
                Access::Read => Cell { end: gap_end, write: None, reads: vec![info.clone()] },
            };
            self.cells.insert(gap_start, cell);
        }
        races
    }

    /// Forgets `[start, end)` (memory allocated or freed), giving the distinct
    /// accesses that were recorded there.
    pub fn clear(&mut self, start: u64, end: u64) -> Vec<Arc<AccessInfo>> {
        self.split_at(start);
        self.split_at(end);
        let keys: Vec<u64> = self.cells.range(start..end).map(|(&k, _)| k).collect();
        let mut seen: Vec<Arc<AccessInfo>> = Vec::new();
        for key in keys {
            let cell = self.cells.remove(&key).expect("listed above");
            for info in cell.write.into_iter().chain(cell.reads) {
                if !seen.iter().any(|s| Arc::ptr_eq(s, &info)) {
                    seen.push(info);
                }
            }
        }
        seen
    }

    pub fn cell_count(&self) -> usize {
        self.cells.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(slot: usize, tick: u64, access: Access, start: u64, len: u64) -> Arc<AccessInfo> {
        let stream = StreamId { device: 0, key: 0x1000 + slot as u64 * 0x10 };
        Arc::new(AccessInfo { epoch: Epoch { slot, tick }, stream, access, start, len, tag: "t".into(), stack: None })
    }

    fn clock(known: &[(usize, u64)]) -> VectorClock {
        let mut c = VectorClock::default();
        for &(slot, tick) in known {
            for _ in 0..tick {
                c.tick(slot);
            }
        }
        c
    }

    #[test]
    fn overlapping_unordered_accesses_conflict_and_disjoint_ones_do_not() {
        let mut shadow = Shadow::default();
        assert!(shadow.access(&info(0, 1, Access::Write, 100, 50), &clock(&[(0, 1)])).is_empty());
        // Another stream reads [140, 160): overlaps the write by 10 bytes.
        let races = shadow.access(&info(1, 1, Access::Read, 140, 20), &clock(&[(1, 1)]));
        assert_eq!(races.len(), 1);
        assert_eq!((races[0].start, races[0].access), (100, Access::Write));
        // A read of disjoint bytes, and a read ordered after the write, are fine.
        assert!(shadow.access(&info(2, 1, Access::Read, 150, 10), &clock(&[(2, 1)])).is_empty());
        assert!(shadow.access(&info(3, 1, Access::Read, 100, 10), &clock(&[(3, 1), (0, 1)])).is_empty());
        // Reads never conflict with reads.
        assert!(shadow.access(&info(4, 1, Access::Read, 100, 60), &clock(&[(4, 1), (0, 1)])).is_empty());
        // A write ordered after the first write but not after the reads of 1, 3, 4 (2 read other bytes).
        let races = shadow.access(&info(5, 1, Access::Write, 0, 1000), &clock(&[(5, 1), (0, 1), (2, 1)]));
        let mut slots: Vec<usize> = races.iter().map(|r| r.epoch.slot).collect();
        slots.sort();
        assert_eq!(slots, vec![1, 3, 4], "each unordered read once, however many cells it covers");
    }

    #[test]
    fn same_stream_accesses_are_ordered_by_the_stream() {
        let mut shadow = Shadow::default();
        shadow.access(&info(0, 1, Access::Write, 0, 8), &clock(&[(0, 1)]));
        assert!(shadow.access(&info(0, 2, Access::Write, 0, 8), &clock(&[(0, 2)])).is_empty());
    }

    #[test]
    fn cells_split_exactly_and_clear_returns_each_access_once() {
        let mut shadow = Shadow::default();
        let everything = clock(&[(0, 9), (1, 9), (2, 9)]);
        shadow.access(&info(0, 1, Access::Write, 0, 100), &everything);
        shadow.access(&info(1, 1, Access::Read, 25, 50), &everything);
        assert_eq!(shadow.cell_count(), 3, "[0,25) [25,75) [75,100)");
        shadow.access(&info(2, 1, Access::Read, 90, 20), &everything);
        assert_eq!(shadow.cell_count(), 5, "[75,90) [90,100) and the gap [100,110)");
        let cleared = shadow.clear(20, 95);
        let mut slots: Vec<usize> = cleared.iter().map(|a| a.epoch.slot).collect();
        slots.sort();
        assert_eq!(slots, vec![0, 1, 2]);
        // What stays: [0,20) written by 0 and [95,110) read by 2 (and written by 0 up to 100).
        let late_write = shadow.access(&info(1, 2, Access::Write, 0, 200), &clock(&[(1, 2)]));
        let mut slots: Vec<usize> = late_write.iter().map(|a| a.epoch.slot).collect();
        slots.sort();
        assert_eq!(slots, vec![0, 2]);
        assert!(shadow.clear(0, u64::MAX).len() == 1 && shadow.cell_count() == 0);
    }
}
