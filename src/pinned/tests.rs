//! The pinned pool's logic on the host source: size classes, reuse, deferred reuse
//! while markers pend, statistics and CuPy's queries.

use super::pool::{size_class, PinnedPool};
use crate::alloc::host::{HostSource, XorShift};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

fn pool() -> PinnedPool<HostSource> {
    PinnedPool::new(HostSource::new(1 << 40))
}

#[test]
fn rounding_wastes_at_most_a_quarter() {
    assert_eq!(size_class(1), 4 * KIB);
    assert_eq!(size_class(4 * KIB), 4 * KIB);
    assert_eq!(size_class(4 * KIB + 1), 5 * KIB);
    assert_eq!(size_class(MIB), MIB);
    assert_eq!(size_class(MIB + 1), MIB + MIB / 4);
    assert_eq!(size_class(3 * MIB), 3 * MIB);
    let mut rng = XorShift(42);
    let (mut asked, mut given) = (0u128, 0u128);
    for _ in 0..crate::test_iterations(100_000) {
        let size = rng.log_uniform(4 * KIB, 256 * MIB);
        let class = size_class(size);
        assert!(class >= size && (class - size) * 4 <= size, "{size} -> {class}");
        assert_eq!(size_class(class), class, "classes are fixed points");
        (asked, given) = (asked + size as u128, given + class as u128);
    }
    let waste = given as f64 / asked as f64 - 1.0;
    // Log-uniform sizes: ~11 % average waste (powers of two would waste ~38 %).
    assert!(waste < 0.15, "average waste {waste}");
}

#[test]
fn freed_blocks_are_reused_by_class() {
    let mut p = pool();
    let a = p.malloc(100 * KIB).unwrap();
    assert_eq!(p.block_containing(a + 50 * KIB), Some((a, size_class(100 * KIB))));
    p.free(a).unwrap().unwrap();
    assert_eq!(p.block_containing(a), None, "a free block is no longer in use");
    assert_eq!(p.malloc(size_class(100 * KIB) - 5).unwrap(), a, "same class: reused");
    let b = p.malloc(200 * KIB).unwrap();
    assert_ne!(a, b);
    let s = p.stats();
    assert_eq!((s.num_host_alloc, s.allocations.current, s.segment.current), (2, 2, 2));
    assert_eq!(s.allocated_bytes.current as u64, size_class(100 * KIB) + size_class(200 * KIB));
    assert_eq!(p.malloc(0).unwrap(), 0);
    assert!(p.free(12345).is_none(), "not a block of this pool");
    p.free(b).unwrap().unwrap();
    assert!(p.free(b).unwrap().is_err(), "double free");
}

#[test]
fn a_block_used_by_a_stream_waits_for_its_marker() {
    let mut p = pool();
    let a = p.malloc(MIB).unwrap();
    p.record_stream(a + 10, 7).unwrap();
    p.free(a).unwrap().unwrap();
    let (used, free, total, blocks) = p.usage();
    assert_eq!((used, free, total, blocks), (MIB, 0, MIB, 0), "pending counts as used");
    let b = p.malloc(MIB).unwrap();
    assert_ne!(a, b, "not reused while stream 7's copy may still run");
    assert_eq!(p.in_use(), 1, "a freed block waiting for its stream is not in use: destroy may wait for it");
    p.source().complete_all();
    let c = p.malloc(MIB).unwrap();
    assert_eq!(c, a, "reused once the marker is done");
    assert_eq!(p.source().pending_markers(), 0);
    p.free(b).unwrap().unwrap();
    p.free(c).unwrap().unwrap();
    assert_eq!(p.usage(), (0, 2 * MIB, 2 * MIB, 2));
    p.empty_cache();
    assert_eq!(p.usage(), (0, 0, 0, 0));
    assert_eq!(p.source().live_segments(), 0);
    let s = p.stats();
    assert_eq!((s.num_host_free, s.reserved_bytes.peak), (2, 2 * MIB as i64));
    for (total, max, min) in [
        (s.host_alloc_time_ns, s.host_alloc_time_max_ns, s.host_alloc_time_min_ns),
        (s.host_free_time_ns, s.host_free_time_max_ns, s.host_free_time_min_ns),
    ] {
        assert!(min <= max && max <= total && total >= min + max, "two timed calls: {min} <= {max}, total {total}");
    }
    p.reset_peak();
    p.reset_accumulated();
    let s = p.stats();
    assert_eq!((s.reserved_bytes.peak, s.num_host_alloc, s.allocations.allocated), (0, 0, 0));
    assert_eq!((s.host_alloc_time_max_ns, s.host_alloc_time_min_ns, s.host_free_time_max_ns, s.host_free_time_min_ns), (0, 0, 0, 0));
}

/// Random operations: every live block is distinct and disjoint, and the statistics
/// match the blocks.
#[test]
fn random_operations_keep_blocks_disjoint_and_counted() {
    let mut p = pool();
    let mut rng = XorShift(7);
    let mut live: Vec<(u64, u64)> = Vec::new();
    for _ in 0..crate::test_iterations(20_000) {
        if rng.below(2) == 0 || live.is_empty() {
            let size = rng.log_uniform(1, 8 * MIB);
            let a = p.malloc(size).unwrap();
            live.push((a, size_class(size)));
            if rng.below(4) == 0 {
                p.record_stream(a, rng.below(3)).unwrap();
            }
        } else {
            let (a, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
            p.free(a).unwrap().unwrap();
        }
        if rng.below(10) == 0 {
            p.source().complete_all();
        }
    }
    let mut sorted = live.clone();
    sorted.sort();
    assert!(sorted.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "live blocks overlap");
    let s = p.stats();
    assert_eq!(s.allocated_bytes.current as u64, live.iter().map(|l| l.1).sum::<u64>());
    assert_eq!(s.allocations.current as usize, live.len());
}
