//! Expandable segments on the host segment source: growth in steps and in place,
//! large frees merged, the free tail taken last, whole mappings given back, free
//! middles released and grown into, and less fragmentation than separate segments.

use super::*;

/// A freed block above 8 MiB is parked (kept for its size's next request, the most
/// recently freed first) without expandable segments. With them it is parked only for
/// the newest request's size and only with no Free neighbour (a warm pair stays on the
/// parked path), until another block is freed; beside free memory it merges at once.
#[test]
fn expandable_segments_merge_large_frees_at_once() {
    let p = pool(GIB);
    let blocks: Vec<u64> = (0..3).map(|_| p.malloc(16 * MIB, 1).unwrap()).collect();
    p.free(blocks[0]).unwrap();
    p.free(blocks[1]).unwrap();
    assert_eq!(p.malloc(16 * MIB, 1).unwrap(), blocks[1], "without expandable segments: parked, the last freed first");
    blocks[1..].iter().for_each(|&b| p.free(b).unwrap());
    check(&p);

    let p = expandable(GIB);
    let [a, b, c]: [u64; 3] = std::array::from_fn(|_| p.malloc(16 * MIB, 1).unwrap());
    // No Free neighbours, the newest request's size: parked, so the last freed comes
    // back first (merged, best fit would give the lower address, a).
    p.free(a).unwrap();
    p.free(c).unwrap();
    assert_eq!(p.malloc(16 * MIB, 1).unwrap(), c, "the warm pair's path: parked, the last freed first");
    assert_eq!(p.malloc(16 * MIB, 1).unwrap(), a);
    check(&p);
    // A parked large block goes back to the free lists when another block is freed, so
    // that its neighbours freed after it merge with it.
    p.free(b).unwrap(); // parked: no Free neighbour, the newest request's size
    p.free(c).unwrap(); // b goes back first; c, beside it, merges with it
    assert_eq!(p.malloc(16 * MIB, 1).unwrap(), b, "b and c merged (parked, c would come back first)");
    assert_eq!(p.malloc(16 * MIB, 1).unwrap(), c);
    check(&p);
    let x = p.malloc(4 * MIB, 1).unwrap();
    p.free(a).unwrap(); // not the newest request's size (4 MiB): merged, Free
    p.free(c).unwrap();
    let other = p.malloc(16 * MIB, 2).unwrap(); // the newest request is 16 MiB again
    p.free(b).unwrap(); // its neighbours a and c are Free: merged at once, not parked
    check(&p);
    assert_eq!(p.malloc(16 * MIB, 1).unwrap(), a, "b merged with a and c: the range's start, not b");
    let small = p.malloc(8 * MIB, 1).unwrap();
    let after = p.malloc(8 * MIB, 1).unwrap();
    p.free(small).unwrap();
    assert_eq!(p.malloc(8 * MIB, 1).unwrap(), small, "8 MiB is parked either way");
    for addr in [small, after, a, x, other] {
        p.free(addr).unwrap();
    }
    check(&p);
}

/// A configuration change returns the blocks parked under the old rule to the free
/// lists: a 16 MiB block parked with whole segments is above expandable segments'
/// `park_max`, which the count of large parked blocks goes by.
#[test]
fn a_configuration_change_returns_parked_blocks() {
    let p = pool(GIB);
    let [a, b] = [(); 2].map(|_| p.malloc(16 * MIB, 1).unwrap());
    p.free(a).unwrap(); // parked: whole segments park every size
    p.set_config(AllocConfig::parse("expandable_segments:True").unwrap());
    // No check before it (checking settles parked blocks): without the flush, this
    // reuse of a's block took the count below zero.
    let again = p.malloc(16 * MIB, 1).unwrap();
    check(&p);
    for addr in [again, b] {
        p.free(addr).unwrap();
    }
    check(&p);
}

/// Large blocks of one stream follow each other in one address range; it grows by
/// what its free end lacks, and `empty_cache` unmaps the free end, then the rest.
#[test]
fn expandable_segments_grow_in_place_and_unmap_their_free_end() {
    let p = expandable(GIB);
    let a = p.malloc(5 * MIB, 1).unwrap();
    let b = p.malloc(5 * MIB, 1).unwrap();
    let c = p.malloc(3 * MIB, 1).unwrap();
    assert_eq!((b, c), (a + 5 * MIB, a + 10 * MIB), "one contiguous range");
    check(&p);
    let s = p.stats();
    assert_eq!(s.segment.large_pool.current, 1);
    assert_eq!(s.reserved_bytes.large_pool.current, 26 * MIB as i64, "a's 6 MiB, the 4 b lacks (a first growth), then a step of 16 for c");
    assert_eq!(p.source().mapped_bytes(), 26 * MIB);
    let other = p.malloc(5 * MIB, 2).unwrap();
    assert!(other < a || other >= a + GIB, "another stream has its own range");
    p.free(other).unwrap();
    p.free(c).unwrap();
    p.free(b).unwrap();
    p.empty_cache();
    check(&p);
    assert_eq!(p.stats().reserved_bytes.large_pool.current, 6 * MIB as i64, "b and c's pages went back; a's stay");
    assert_eq!(p.malloc(9 * MIB, 1).unwrap(), a + 5 * MIB, "regrown at the end");
    check(&p);
    p.free(a + 5 * MIB).unwrap();
    p.free(a).unwrap();
    p.empty_cache();
    check(&p);
    assert_eq!((p.stats().reserved_bytes.all.current, p.source().live_segments()), (0, 0));
}

/// A free tail that the request fits but may not split (`max_split_size`: an
/// oversize block serves no smaller request) leaves nothing to map: the segment grows
/// by nothing, and the tail serves the request, for a request of two steps or more
/// and with exact segments alike (where a zero-sized mapping was made before).
#[test]
fn expandable_segments_map_nothing_where_the_free_tail_fits() {
    for text in ["expandable_segments:True,max_split_size_mb:40", "expandable_segments:True,exact_segments:True,max_split_size_mb:40"] {
        let p = Allocator::new(HostSource::new(GIB), AllocConfig::parse(text).unwrap());
        let first = p.malloc(100 * MIB, 1).unwrap();
        p.free(first).unwrap();
        let mapped = p.source().mapped_bytes();
        let mappings = p.stats().num_device_alloc;
        let a = p.malloc(30 * MIB, 1).unwrap();
        check(&p);
        assert_eq!((p.source().mapped_bytes(), p.stats().num_device_alloc), (mapped, mappings), "{text}: nothing mapped");
        assert_eq!(a, first, "{text}: the tail serves the request");
        p.free(a).unwrap();
        p.empty_cache();
        check(&p);
        assert_eq!((p.stats().reserved_bytes.all.current, p.source().live_segments()), (0, 0), "{text}");
    }
}

/// A segment's first growth maps what it lacks (a stream that allocates twice, as a
/// side stream holding a cuBLAS workspace and a block beside it, maps no step); later
/// ones 1/8 of what it has mapped, 16 MiB at least (fewer driver calls from cold) and
/// 32 MiB at most (a last step's overshoot near PyTorch's 20 MiB pages); by what it
/// lacks where the source refuses the step.
#[test]
fn expandable_segments_grow_in_steps_of_a_share_of_what_is_mapped() {
    for (capacity, after_step) in [(GIB, 82 * MIB), (68 * MIB, 68 * MIB)] {
        let p = expandable(capacity);
        let big = p.malloc(64 * MIB, 1).unwrap();
        let first = p.malloc(2 * MIB, 1).unwrap();
        assert_eq!(p.source().mapped_bytes(), 66 * MIB, "the first growth: what it lacks");
        let next = p.malloc(2 * MIB, 1).unwrap();
        assert_eq!((first, next), (big + 64 * MIB, big + 66 * MIB));
        assert_eq!(p.source().mapped_bytes(), after_step, "capacity {capacity}");
        check(&p);
        if after_step > 68 * MIB {
            assert_eq!(p.malloc(2 * MIB, 1).unwrap(), next + 2 * MIB, "served from the step's rest");
            assert_eq!(p.source().mapped_bytes(), after_step, "no new mapping");
            p.free(next + 2 * MIB).unwrap();
        }
        assert_eq!(p.stats().reserved_bytes.all.current, after_step as i64);
        for addr in [next, first, big] {
            p.free(addr).unwrap();
        }
        p.empty_cache();
        check(&p);
        assert_eq!((p.stats().reserved_bytes.all.current, p.source().mapped_bytes()), (0, 0));
    }
    for (first, after_step) in [(2 * MIB, 20 * MIB), (512 * MIB, 546 * MIB), (1024 * MIB, 1058 * MIB), (4096 * MIB, 4130 * MIB)] {
        let p = expandable(8 * GIB);
        let a = p.malloc(first, 1).unwrap();
        let b = p.malloc(2 * MIB, 1).unwrap();
        let c = p.malloc(2 * MIB, 1).unwrap();
        assert_eq!(p.source().mapped_bytes(), after_step, "16 MiB at least, 32 MiB at most, however much is mapped");
        for addr in [c, b, a] {
            p.free(addr).unwrap();
        }
        check(&p);
    }
}

/// A segment's free tail is taken last: a request that fits in a hole leaves the
/// tail (the one block that grows in place) whole; one that fits nowhere else takes it.
#[test]
fn expandable_segments_take_their_free_tail_last() {
    let p = expandable(GIB);
    let a = p.malloc(64 * MIB, 1).unwrap();
    let separator = p.malloc(2 * MIB, 1).unwrap(); // the first growth: what it lacks
    let b = p.malloc(4 * MIB, 1).unwrap(); // maps a step of 16 MiB: 12 MiB left at the tail
    assert_eq!((separator, b, p.source().mapped_bytes()), (a + 64 * MIB, a + 66 * MIB, 82 * MIB));
    p.free(a).unwrap(); // a 64 MiB hole, larger than the tail
    let small = p.malloc(2 * MIB, 1).unwrap();
    assert_eq!(small, a, "from the hole, though the tail fits it best");
    p.free(b).unwrap(); // b merges into the tail: 16 MiB free at the end
    let large = p.malloc(68 * MIB, 1).unwrap();
    assert_eq!((large, p.source().mapped_bytes()), (b, b - a + 68 * MIB), "the whole tail, grown in place");
    check(&p);
    let last = p.malloc(2 * MIB, 1).unwrap();
    assert_eq!(last, a + 2 * MIB, "from the hole's rest");
    for addr in [small, separator, large, last] {
        p.free(addr).unwrap();
    }
    p.empty_cache();
    check(&p);
    assert_eq!(p.source().mapped_bytes(), 0);
}

/// The driver unmaps whole mappings only: emptying the cache gives back the mappings
/// that lie wholly in a segment's free end and keeps the one a live block shares
/// (the host source refuses a partial unmap, as cuMemUnmap does); growth after it
/// maps past what is kept, and every byte comes back in the end.
#[test]
fn expandable_segments_give_back_whole_mappings_only() {
    let p = expandable(GIB);
    let big = p.malloc(64 * MIB, 1).unwrap();
    let first = p.malloc(2 * MIB, 1).unwrap(); // the first growth maps what it lacks
    let step = p.malloc(2 * MIB, 1).unwrap(); // maps a step of 16 MiB at 66 MiB
    let rest = p.malloc(4 * MIB, 1).unwrap(); // from the step's rest
    let beyond = p.malloc(14 * MIB, 1).unwrap(); // past the rest's 10 MiB: a fourth mapping, a step of 16
    assert_eq!(p.source().mapped_bytes(), 98 * MIB);
    p.free(rest).unwrap();
    p.free(beyond).unwrap();
    p.empty_cache(); // the free tail starts inside the step's mapping, which stays
    check(&p);
    assert_eq!((p.source().mapped_bytes(), p.stats().reserved_bytes.all.current), (82 * MIB, 82 * MIB as i64));
    let again = p.malloc(20 * MIB, 1).unwrap();
    assert_eq!(again, step + 2 * MIB, "the kept mapping's free part, then new mappings");
    check(&p);
    for ptr in [big, first, step, again] {
        p.free(ptr).unwrap();
    }
    p.empty_cache();
    check(&p);
    assert_eq!((p.source().mapped_bytes(), p.stats().reserved_bytes.all.current), (0, 0));
}

/// Emptying the cache unmaps the mappings that lie wholly in free blocks anywhere in
/// a segment, its middle too; growth maps into such a hole before it extends the
/// segment, only what a free neighbour lacks where one is beside it; a snapshot shows
/// the mapped runs between holes as segments.
#[test]
fn expandable_segments_release_free_middles_and_grow_into_the_holes() {
    // exact_segments: each growth maps what it lacks, so the mappings are known.
    let p = Allocator::new(HostSource::new(GIB), AllocConfig::parse("expandable_segments:True,exact_segments:True").unwrap());
    let a = p.malloc(8 * MIB, 1).unwrap(); // mappings [0, 8), [8, 12), [12, 28), [28, 30) MiB
    let b = p.malloc(4 * MIB, 1).unwrap();
    let c = p.malloc(16 * MIB, 1).unwrap();
    let d = p.malloc(2 * MIB, 1).unwrap();
    assert_eq!((b, c, d, p.source().mapped_bytes()), (a + 8 * MIB, a + 12 * MIB, a + 28 * MIB, 30 * MIB));
    p.free(b).unwrap();
    p.free(c).unwrap();
    p.empty_cache();
    check(&p);
    assert_eq!((p.source().mapped_bytes(), p.stats().reserved_bytes.all.current), (10 * MIB, 10 * MIB as i64), "the middle went back");
    let views = p.segment_views(&mut Vec::new()).0;
    let runs: Vec<(u64, u64)> = views.iter().map(|v| (v.addr - a, v.size)).collect();
    assert_eq!(runs, [(0, 8 * MIB), (28 * MIB, 2 * MIB)], "one segment per mapped run");

    p.source().fail_on("map", 0);
    assert_eq!(p.malloc(6 * MIB, 1).unwrap_err().status, Status::GPURT_ERROR_CUDA, "the driver refuses the mapping");
    check(&p);
    assert_eq!(p.source().mapped_bytes(), 10 * MIB, "a refused growth into a hole changes nothing");
    let e = p.malloc(6 * MIB, 1).unwrap();
    assert_eq!((e, p.source().mapped_bytes()), (a + 8 * MIB, 16 * MIB), "into the hole, not past the end");
    p.free(a).unwrap();
    p.free(e).unwrap(); // [0, 14) free beside the hole [14, 28)
    let f = p.malloc(20 * MIB, 1).unwrap();
    assert_eq!((f, p.source().mapped_bytes()), (a, 22 * MIB), "the free neighbour, and the 6 MiB it lacks mapped after it");
    check(&p);
    let g = p.malloc(8 * MIB, 1).unwrap();
    assert_eq!((g, p.source().mapped_bytes()), (a + 20 * MIB, 30 * MIB), "the rest of the hole, whole");
    check(&p);
    for addr in [f, g, d] {
        p.free(addr).unwrap();
    }
    p.empty_cache();
    check(&p);
    assert_eq!((p.source().mapped_bytes(), p.source().live_segments(), p.stats().reserved_bytes.all.current), (0, 0, 0));
}

/// The benchmark's random workload on host memory, over several seeds (one seed's
/// figure swings with small policy changes): expandable segments keep the peak
/// reserved memory closer to the peak in use than separate segments do.
#[test]
fn expandable_segments_fragment_less_on_random_sizes() {
    let run = |p: Allocator, seed: u64| {
        let mut rng = Rng(seed);
        let (mut live, mut live_bytes, mut peak) = (Vec::new(), 0, 0);
        for _ in 0..crate::test_iterations(50_000) {
            if (rng.below(2) == 0 && live.len() < 2000) || live.is_empty() {
                let size = rng.log_uniform(256, 32 * MIB);
                live.push((p.malloc(size, 1).unwrap(), size));
                live_bytes += size;
                peak = peak.max(live_bytes);
            } else {
                let (addr, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
                p.free(addr).unwrap();
                live_bytes -= size;
            }
        }
        check(&p);
        p.stats().reserved_bytes.all.peak as f64 / peak as f64
    };
    let seeds = [0x2545_f491_4f6c_dd1d, 0x9e37_79b9_7f4a_7c15, 0xbf58_476d_1ce4_e5b9, 0x94d0_49bb_1331_11eb];
    let mean = |make: fn(u64) -> Allocator| seeds.iter().map(|&seed| run(make(64 * GIB), seed)).sum::<f64>() / seeds.len() as f64;
    let (segments, expandable) = (mean(pool), mean(expandable));
    eprintln!("mean fragmentation: expandable {expandable:.3}, segments {segments:.3}");
    // Measured: 1.218 and 1.284 at 50 000 operations (growth steps of up to 128 MiB
    // overshoot more at this workload's 1 GiB than 32 MiB ones did: 1.160); over 12
    // seeds at the benchmark's 200 000, 1.157 (1.118 with steps of at most 32 MiB).
    assert!(expandable < segments - 0.05 && expandable < 1.25, "mean fragmentation: expandable {expandable:.3}, segments {segments:.3}");
}

/// A graph captured into the pool in stream order replays into blocks freed during
/// its capture: while a claim (`keep_mapped`) lives, no empty_cache, garbage collection
/// or out-of-memory release unmaps free memory, and a discarding sleep maps it all back
/// at the same addresses; the last claim gone, the cache goes back as usual.
#[test]
fn a_kept_pool_unmaps_no_free_memory_until_its_last_claim_goes() {
    let p = Allocator::new(HostSource::new(64 * MIB), AllocConfig::parse("expandable_segments:True,garbage_collection_threshold:0.5").unwrap());
    let temporary = p.malloc(24 * MIB, 1).unwrap();
    let live = p.malloc(4 * MIB, 1).unwrap();
    p.free(temporary).unwrap(); // freed during the capture: the graph's replays use it
    let mapped = p.source().mapped_bytes();
    let claim = p.keep_mapped();
    let exec_claim = claim.clone();
    assert_eq!(p.graph_holds(), 2);
    p.empty_cache();
    assert_eq!(p.source().mapped_bytes(), mapped, "empty_cache keeps a kept pool's free memory mapped");
    // Past the collection threshold, and then out of memory on another stream: neither
    // the collection nor the retry's release may unmap the kept free block.
    let err = p.malloc(48 * MIB, 2).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
    assert_eq!(p.source().mapped_bytes(), mapped, "the out-of-memory release keeps it too");
    assert_eq!(p.malloc(24 * MIB, 1).unwrap(), temporary, "the stream's next allocation shares the freed block");
    p.free(temporary).unwrap();
    p.sleep(false, || Ok(())).unwrap();
    p.wake().unwrap();
    assert_eq!(p.source().mapped_bytes(), mapped, "a discarding sleep maps the free memory back at its addresses");
    check(&p);
    drop(claim);
    p.empty_cache();
    assert_eq!(p.source().mapped_bytes(), mapped, "an exec's claim still keeps it");
    drop(exec_claim);
    assert_eq!(p.graph_holds(), 0);
    p.empty_cache();
    assert!(p.source().mapped_bytes() < mapped, "the last claim gone, empty_cache gives the free memory back");
    p.free(live).unwrap();
    p.empty_cache();
    assert_eq!(p.source().mapped_bytes(), 0);
    check(&p);
}
