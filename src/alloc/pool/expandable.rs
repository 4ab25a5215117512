//! Expandable segments: per stream and pool kind, one reserved address range whose
//! first bytes are mapped, grown by driver mappings as requests need
//! (`expandable_segments:True`); `holes` releases their free ranges anywhere and maps
//! into the holes again. The pool logic (free lists, splitting, coalescing) treats one
//! as an ordinary segment up to its mapped end, whose holes are Unmapped blocks.
//!
//! A segment grows as PyTorch's expandable segments do: past what a request lacks, to
//! the next multiple of a page from its start (`SMALL_BUFFER` for the small pool,
//! `LARGE_BUFFER` for the large one), one driver mapping a page (`map_pages`; 32-85 us
//! each on the H100). Placing blocks as PyTorch places them is what keeps gpurt's peak
//! at or below its expandable segments' on workloads nobody tuned for: on 100 scenarios
//! of the recorded workloads, 100 at or below, where gpurt's earlier policy (growth
//! steps of an eighth of what was mapped, one arena for all sizes, parking by size)
//! gave 75, max +4.9 % (docs/performance.md, "PyTorch models on gpurt"). A segment's
//! first mapping is only what its first request needs: a side stream holding a cuBLAS
//! workspace (PyTorch's warm-ups before a CUDA graph capture) keeps 32 MiB mapped, as
//! a segment of PyTorch's default allocator does, not a 40 MiB page multiple. On a side
//! stream (any but the first that grew a segment), a request of 10 MiB or more always
//! gets mappings of its own (`grow_expandable`), as it gets a segment of its own there.

use super::super::blocks::{Block, BlockId, State, NO_BLOCK};
use super::super::history::Action;
use super::super::stats::PoolKind;
use super::{pool_index, Pool, Segment, SegmentSource, LARGE_BUFFER, MIN_LARGE_ALLOC, SMALL_BUFFER};
use crate::error::{Error, Result, Status};

/// An expandable segment: a reserved address range whose first bytes are backed by
/// memory. It is also in `segments`, with its mapped size.
#[derive(Debug, Clone)]
pub(super) struct Expandable {
    pub(super) base: u64,
    pub(super) reserved: u64,
    /// The block that ends the mapped bytes (never a hole).
    pub(super) tail: BlockId,
    /// Its mappings (start, size), in address order, the last at the mapped end; the
    /// ranges between them are holes. The driver unmaps whole mappings only, so memory
    /// goes back a mapping at a time.
    pub(super) maps: Vec<(u64, u64)>,
    /// Its holes: the Unmapped blocks, which growth maps into before it extends.
    pub(super) holes: Vec<BlockId>,
}

impl<S: SegmentSource> Pool<S> {
    /// Records that block `id` now ends its segment, if that segment is an
    /// expandable one.
    pub(super) fn note_tail(&mut self, id: BlockId) {
        if self.expandable.is_empty() {
            return;
        }
        let b = &self.blocks[id];
        let (key, addr) = ((self.stream_of(b), pool_index(b.pool)), b.addr);
        if let Some(seg) = self.expandable.get_mut(&key) {
            if (seg.base..seg.base + seg.reserved).contains(&addr) {
                seg.tail = id;
            }
        }
    }

    /// A free block of at least `rounded` bytes in `stream`'s expandable segment of
    /// `pool`: the segment is created, or memory mapped into one of its holes, or it
    /// grows at its end past what its free tail block lacks, to a page multiple.
    pub(super) fn grow_expandable(&mut self, pool: PoolKind, stream: u64, rounded: u64) -> Result<BlockId> {
        // As for a new segment: a capture gpurt does not route to a graph pool refuses
        // new memory (the graph would use memory no private pool keeps for it).
        self.shared.source.may_allocate(stream)?;
        let side_stream = self.shared.is_side_stream(stream);
        let granularity = self.shared.source.map_granularity();
        let key = (stream, pool_index(pool));
        let Some((base, reserved, last)) = self.expandable.get(&key).map(|e| (e.base, e.reserved, e.tail)) else {
            // Room for the whole device: a segment never needs a second range.
            let total = self.shared.source.memory_info().1;
            let reserved = total.max(rounded).max(1 << 30).next_multiple_of(granularity);
            let base = self.shared.reserve_expandable(reserved, self.shard)?;
            let size = rounded.next_multiple_of(granularity);
            let maps = match self.map_pages(base, pool, base, size) {
                Ok(maps) => maps,
                Err(e) => {
                    self.shared.free_expandable(base, reserved);
                    return Err(e);
                }
            };
            self.note(&[Action::SegmentMap], base, size, stream);
            let id = self.add_segment(pool, stream, base, size, maps.len());
            self.expandable.insert(key, Expandable { base, reserved, tail: id, maps, holes: Vec::new() });
            return Ok(id);
        };
        if let Some(id) = self.grow_into_hole(key, pool, rounded, stream)? {
            return Ok(id);
        }
        let mapped = self.segments[&base].size;
        let end = base + mapped;
        let tail = &self.blocks[last];
        let (tail_free, rank) = (tail.state == State::Free, tail.rank + tail.size);
        // On a side stream, a request of MIN_LARGE_ALLOC or more gets mappings of its
        // own, as PyTorch's default allocator gives it a segment of its own: it starts
        // at a mapping's start (the free tail's part before stays free) and growth maps
        // what it lacks. A side stream's cuBLAS workspace, made beside a warm-up's
        // first activation, then keeps its 32 MiB mapped, not the 40-60 MiB of pages
        // it shared (20 CUDA graphs, each warmed up on a stream of its own: 2 344 MiB
        // against PyTorch's 2 418, where page-grid growth gave 2 698). The main
        // stream's segments grow to the page grid, as PyTorch's expandable segments
        // do: that placement holds every recorded single-stream workload at or below
        // PyTorch's peak (own mappings there too: 37 of 100 scenarios, max +6.3 %).
        let own_mappings = rounded >= MIN_LARGE_ALLOC && side_stream;
        let start = match (tail_free, own_mappings) {
            (false, _) => end,
            (true, false) => tail.addr,
            (true, true) => {
                let maps = &self.expandable[&key].maps;
                maps.get(maps.partition_point(|&(at, _)| at < tail.addr)).map_or(end, |&(at, _)| at)
            }
        };
        let needed = rounded.saturating_sub(end - start).next_multiple_of(granularity);
        if needed == 0 {
            // The free tail fits, but the free lists passed it over (an oversize block
            // under max_split_size): it serves the request, with nothing to map.
            return Ok(self.free_from(last, start));
        }
        if mapped + needed > reserved {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, "the expandable segment's address range is full"));
        }
        // Where the page multiple is refused (the cap, the driver), what is needed is
        // enough.
        let step = if own_mappings { needed } else { self.to_map(base, pool, end, needed).min(reserved - mapped) };
        let pages = match (step > needed).then(|| self.map_pages(base, pool, end, step)) {
            Some(Ok(pages)) => pages,
            _ => self.map_pages(base, pool, end, needed)?,
        };
        let grow = pages.iter().map(|&(_, len)| len).sum::<u64>();
        self.note(&[Action::SegmentMap], end, grow, stream);
        self.count_device_memory(pool, grow as i64, pages.len());
        self.segment_mut(base).size = mapped + grow;
        self.expandable.get_mut(&key).expect("segment").maps.extend(pages);
        if tail_free {
            self.remove_free(last);
            self.blocks[last].size += grow;
            self.insert_free(last);
            return Ok(self.free_from(last, start));
        }
        let id = self.blocks.insert(Block::free(end, grow, rank, self.blocks[last].lists, pool, last, NO_BLOCK));
        self.blocks[last].next = id;
        self.expandable.get_mut(&key).expect("segment").tail = id;
        self.insert_free(id);
        Ok(id)
    }

    /// Free block `id` from `start` on, split there where `start` lies inside it: both
    /// parts stay in the free lists until the caller takes the returned one.
    fn free_from(&mut self, id: BlockId, start: u64) -> BlockId {
        let offset = start - self.blocks[id].addr;
        if offset == 0 {
            return id;
        }
        self.remove_free(id);
        let rest = self.split_block(id, offset);
        self.insert_free(id);
        self.insert_free(rest);
        rest
    }

    /// Maps `[at, at + len)` of the segment at `base` one physical allocation per page
    /// (`page`: on the grid from `base`), as PyTorch's expandable segments do, so that
    /// `empty_cache` gives back every whole free page (one mapping a growth kept a
    /// request's whole first mapping while any block of it lived: 20 MiB above PyTorch
    /// on a drop-in order). The mappings, in address order; none where one fails.
    pub(super) fn map_pages(&self, base: u64, pool: PoolKind, at: u64, len: u64) -> Result<Vec<(u64, u64)>> {
        let page = self.page(pool);
        let mut pages = Vec::with_capacity(len.div_ceil(page) as usize + 1);
        let mut start = at;
        while start < at + len {
            let end = (base + (start - base + 1).next_multiple_of(page)).min(at + len);
            if let Err(e) = self.shared.grow(start, end - start) {
                for &(start, len) in &pages {
                    // Just mapped, unused: the driver unmapping it fails only on a
                    // broken context, and the error above is the one to report.
                    let _ = self.shared.shrink(start, len);
                }
                return Err(e);
            }
            pages.push((start, end - start));
            start = end;
        }
        Ok(pages)
    }

    /// An expandable segment of `pool`'s page: one driver mapping each, and what
    /// growth rounds its mapped end to (unless `exact_segments`), on the grid from the
    /// segment's start.
    pub(super) fn page(&self, pool: PoolKind) -> u64 {
        let page = if pool == PoolKind::Small { SMALL_BUFFER } else { LARGE_BUFFER };
        page.next_multiple_of(self.shared.source.map_granularity())
    }

    /// The bytes to map at `at` in the segment at `base` for `lacking` more: to the
    /// next page boundary, or (with `exact_segments`) what is lacking in granules.
    pub(super) fn to_map(&self, base: u64, pool: PoolKind, at: u64, lacking: u64) -> u64 {
        if self.config.exact_segments {
            return lacking.next_multiple_of(self.shared.source.map_granularity());
        }
        (at - base + lacking).next_multiple_of(self.page(pool)) - (at - base)
    }

    pub(super) fn segment_mut(&mut self, start: u64) -> &mut Segment {
        self.segments.get_mut(&start).expect("a held segment")
    }
}
