//! Expandable segments: per stream and pool kind, one reserved address range whose
//! first bytes are mapped, grown by driver mappings as requests need
//! (`expandable_segments:True`); `holes` releases their free ranges anywhere and maps
//! into the holes again. The pool logic (free lists, splitting, coalescing) treats one
//! as an ordinary segment up to its mapped end, whose holes are Unmapped blocks.

use super::super::blocks::{Block, BlockId, State, NO_BLOCK};
use super::super::history::Action;
use super::super::stats::PoolKind;
use super::{pool_index, Pool, Segment, SegmentSource, MIB};
use crate::error::{Error, Result, Status};

/// An expandable segment grows by at least a step: while it is cold, an eighth of what
/// it has mapped within `EXPANDABLE_STEP_MIN..=EXPANDABLE_STEP_MAX`; once quiet, less
/// (`EXPANDABLE_QUIET_ALLOCATIONS`). Each step is one driver mapping, 32-85 us on the
/// H100 at any size up to 512 MiB and serialised across threads (docs/performance.md),
/// so the steps are what growth from cold costs, and the last one's overshoot is on top
/// of the peak. PyTorch's expandable segments map what a request lacks in 20 MiB pages;
/// steps of up to 32 MiB keep gpurt's peak at or below theirs on scenarios nobody tuned
/// (docs/performance.md, "Workloads nobody tuned for"), for more driver calls from cold
/// (ResNet-50's trace 43 -> 67). Steps up to 192 MiB, a sixteenth of what is mapped,
/// overshot by up to 140 MiB: 10 of 48 such scenarios above PyTorch by 1.5-3.4 %.
/// A segment of one mapping (new, or emptied back to one) grows by only what it lacks:
/// a side stream that holds a cuBLAS workspace and one block beside it (PyTorch's
/// warm-ups before a CUDA graph capture) kept a 16 MiB step 14 MiB short of use, on
/// each such stream (one more driver mapping a segment on the recorded traces, their
/// fragmentation unchanged).
const EXPANDABLE_STEP_MIN: u64 = 16 * MIB;
const EXPANDABLE_STEP_MAX: u64 = 32 * MIB;
/// A segment that grows after this many allocations since its last step is past its
/// cold start: a step there is rare, so it costs little time and is sized for memory,
/// a thirty-second of what is mapped within these bounds (on the recorded traces, a
/// GPT-2 sampling loop's fragmentation 1.069 -> 1.043, the same steps everywhere).
const EXPANDABLE_QUIET_ALLOCATIONS: i64 = 1000;
const EXPANDABLE_QUIET_STEP_MIN: u64 = 2 * MIB;
const EXPANDABLE_QUIET_STEP_MAX: u64 = 16 * MIB;
/// A request of this many steps or more is a step of its own: the segment maps exactly
/// what it lacks. Its one driver call already serves hundreds of MiB, so a step's
/// overshoot on top of it buys no speed and only raises the peak (the drop-in workload,
/// ResNet-50 after GPT-2: 5 968 -> 5 908 MiB; every recorded trace alone unchanged).
const EXPANDABLE_OWN_STEP: u64 = 2;

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
    /// The pool's allocation count when this segment last grew.
    pub(super) allocations_at_growth: i64,
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
    /// grows at its end by what its free tail block lacks or, if more, a share of what
    /// it has mapped (granularity multiples).
    pub(super) fn grow_expandable(&mut self, pool: PoolKind, stream: u64, rounded: u64) -> Result<BlockId> {
        // As for a new segment: a capture gpurt does not route to a graph pool refuses
        // new memory (the graph would use memory no private pool keeps for it).
        self.shared.source.may_allocate(stream)?;
        let granularity = self.shared.source.map_granularity();
        let key = (stream, pool_index(pool));
        let Some((base, reserved, last, allocations_at_growth, one_mapping)) =
            self.expandable.get(&key).map(|e| (e.base, e.reserved, e.tail, e.allocations_at_growth, e.maps.len() <= 1))
        else {
            // Room for the whole device: a segment never needs a second range.
            let total = self.shared.source.memory_info().1;
            let reserved = total.max(rounded).max(1 << 30).next_multiple_of(granularity);
            let base = self.shared.reserve_expandable(reserved, self.shard)?;
            let size = rounded.next_multiple_of(granularity);
            if let Err(e) = self.shared.grow(base, size) {
                self.shared.free_expandable(base, reserved);
                return Err(e);
            }
            self.note(&[Action::SegmentMap], base, size, stream);
            let id = self.add_segment(pool, stream, base, size);
            let allocations_at_growth = self.allocations_so_far();
            let maps = vec![(base, size)];
            self.expandable.insert(key, Expandable { base, reserved, tail: id, maps, holes: Vec::new(), allocations_at_growth });
            return Ok(id);
        };
        if let Some(id) = self.grow_into_hole(key, rounded, stream)? {
            return Ok(id);
        }
        let mapped = self.segments[&base].size;
        let tail = &self.blocks[last];
        let (tail_free, rank) = (tail.state == State::Free, tail.rank + tail.size);
        let missing = if tail_free { rounded.saturating_sub(tail.size) } else { rounded };
        let needed = missing.next_multiple_of(granularity);
        if needed == 0 {
            // The free tail fits, but the free lists passed it over (an oversize block
            // under max_split_size): it serves the request, with nothing to map.
            return Ok(last);
        }
        if mapped + needed > reserved {
            return Err(Error::new(Status::GPURT_ERROR_OUT_OF_MEMORY, "the expandable segment's address range is full"));
        }
        let end = base + mapped;
        // A step of a share of what is mapped: a pool growing from cold makes fewer
        // driver calls (measured on recorded traces: docs/performance.md) for a
        // bounded overshoot; where the step is refused (the cap, the driver), what is
        // needed is enough.
        let allocations = self.allocations_so_far();
        let share = if self.config.exact_segments || one_mapping {
            0
        } else if allocations - allocations_at_growth >= EXPANDABLE_QUIET_ALLOCATIONS {
            (mapped / 32).clamp(EXPANDABLE_QUIET_STEP_MIN, EXPANDABLE_QUIET_STEP_MAX)
        } else {
            (mapped / 8).clamp(EXPANDABLE_STEP_MIN, EXPANDABLE_STEP_MAX)
        };
        let step = if rounded >= EXPANDABLE_OWN_STEP * share { needed } else { share }
            .next_multiple_of(granularity)
            .min(reserved - mapped);
        self.expandable.get_mut(&key).expect("segment").allocations_at_growth = allocations;
        let grow = if step > needed && self.shared.grow(end, step).is_ok() {
            step
        } else {
            self.shared.grow(end, needed)?;
            needed
        };
        self.note(&[Action::SegmentMap], end, grow, stream);
        self.count_device_memory(pool, grow as i64);
        self.segment_mut(base).size = mapped + grow;
        self.expandable.get_mut(&key).expect("segment").maps.push((end, grow));
        if tail_free {
            self.remove_free(last);
            self.blocks[last].size += grow;
            self.insert_free(last);
            return Ok(last);
        }
        let id = self.blocks.insert(Block::free(end, grow, rank, self.blocks[last].lists, pool, last, NO_BLOCK));
        self.blocks[last].next = id;
        self.expandable.get_mut(&key).expect("segment").tail = id;
        self.insert_free(id);
        Ok(id)
    }

    pub(super) fn segment_mut(&mut self, start: u64) -> &mut Segment {
        self.segments.get_mut(&start).expect("a held segment")
    }
}
