//! The caching allocator's behaviour on the host segment source: splitting and
//! coalescing, stream-tagged reuse, deferred frees, the out-of-memory retry across
//! shards, the memory fraction, and exact statistics after random and
//! multi-threaded operations.

use std::sync::{Arc, Mutex};

use super::caching::{CachingAllocator, SPLIT_AFTER};
use super::config::AllocConfig;
use super::host::{HostSource, XorShift as Rng};
use crate::error::Status;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

type Allocator = CachingAllocator<HostSource>;

fn pool(capacity: u64) -> Allocator {
    Allocator::new(HostSource::new(capacity), AllocConfig::segmented())
}

fn check(p: &Allocator) {
    if let Err(e) = p.check_invariants() {
        panic!("invariant broken: {e}");
    }
}

#[test]
fn small_blocks_split_one_segment_and_coalesce_back() {
    let p = pool(GIB);
    let a = p.malloc(700 * KIB, 1).unwrap();
    let b = p.malloc(700 * KIB - 100, 1).unwrap();
    let c = p.malloc(600 * KIB, 1).unwrap();
    check(&p);
    let s = p.stats();
    assert_eq!(s.segment.all.current, 1, "all three fit one 2 MiB small segment");
    assert_eq!(s.reserved_bytes.small_pool.current, 2 * MIB as i64);
    assert_eq!(s.allocated_bytes.all.current, (2000 * KIB) as i64, "700 KiB - 100 rounds up to 700 KiB");
    assert_eq!(s.requested_bytes.all.current, (2000 * KIB - 100) as i64);
    assert_eq!((b - a, c - b), (700 * KIB, 700 * KIB));
    p.free(b).unwrap();
    check(&p);
    assert_eq!(p.stats().inactive_split.all.current, 2, "the hole and the tail are free split blocks");
    assert_eq!(p.malloc(700 * KIB, 1).unwrap(), b, "an exact-size request takes the parked block back");
    p.free(b).unwrap();
    p.free(a).unwrap();
    p.free(c).unwrap();
    check(&p);
    assert_eq!(p.stats().active.all.current, 0);
    // 1 MiB fits no parked block and not the 48 KiB tail: the parked blocks are
    // coalesced with the tail into the whole segment, which serves it.
    assert_eq!(p.malloc(MIB, 1).unwrap(), a);
    let s = p.stats();
    assert_eq!((s.segment.all.current, s.num_device_alloc), (1, 1), "no new segment was needed");
    assert_eq!(s.inactive_split_bytes.all.current, MIB as i64, "the other half of the segment");
    check(&p);
    p.free(a).unwrap();
    assert_eq!(p.stats().reserved_bytes.all.current, 2 * MIB as i64, "cached, not released");
    p.empty_cache();
    check(&p);
    assert_eq!(p.stats().reserved_bytes.all.current, 0);
    assert_eq!(p.source().live_segments(), 0);
}

#[test]
fn segment_sizes_follow_pytorch() {
    let p = pool(GIB);
    p.malloc(2 * MIB, 1).unwrap(); // large, < 10 MiB: a 20 MiB segment
    // ≥ 10 MiB: its own segment, rounded to 2 MiB (another stream, so that the first
    // segment's 18 MiB free tail does not serve it).
    p.malloc(11 * MIB + 3, 2).unwrap();
    let s = p.stats();
    assert_eq!(s.reserved_bytes.large_pool.current, (20 + 12) as i64 * MIB as i64);
    assert_eq!(s.segment.large_pool.current, 2);
    check(&p);
}

#[test]
fn exact_segments_map_what_a_request_needs() {
    // ggml's compute buffer: 9.47 MiB, a 20 MiB segment under PyTorch's rule.
    let p = Allocator::new(HostSource::new(GIB), AllocConfig::parse("exact_segments:True,expandable_segments:False").unwrap());
    let compute = p.malloc(9 * MIB + 480 * 1024, 1).unwrap();
    let small = p.malloc(4096, 1).unwrap();
    let s = p.stats();
    assert_eq!(s.reserved_bytes.large_pool.current, 10 * MIB as i64, "rounded to 2 MiB");
    assert_eq!(s.reserved_bytes.small_pool.current, 2 * MIB as i64, "small requests keep their 2 MiB segments");
    for addr in [compute, small] {
        p.free(addr).unwrap();
    }
    check(&p);
    // With expandable segments: the first mapping and every growth are what the
    // request lacks, not a step of a share of what is mapped.
    let p = Allocator::new(HostSource::new(GIB), AllocConfig::parse("expandable_segments:True,exact_segments:True").unwrap());
    let weights = p.malloc(300 * MIB + 5, 1).unwrap();
    let compute = p.malloc(9 * MIB + 480 * 1024, 1).unwrap();
    // 302 MiB, then the 8 MiB the compute buffer lacks past the weights' free tail.
    assert_eq!(p.source().mapped_bytes(), (302 + 8) * MIB);
    for addr in [weights, compute] {
        p.free(addr).unwrap();
    }
    check(&p);
}

#[test]
fn a_block_is_reused_on_its_stream_only() {
    let p = pool(GIB);
    let a = p.malloc(64 * KIB, 1).unwrap();
    p.free(a).unwrap();
    assert_eq!(p.malloc(64 * KIB, 1).unwrap(), a, "reused at once on the same stream");
    let other = p.malloc(64 * KIB, 2).unwrap();
    assert_ne!(other, a);
    assert_eq!(p.stats().segment.all.current, 2, "stream 2 got its own segment");
    check(&p);
}

#[test]
fn record_stream_defers_reuse_until_the_other_stream_is_done() {
    let p = pool(GIB);
    let a = p.malloc(MIB, 1).unwrap();
    p.record_stream(a, 7).unwrap();
    p.record_stream(a, 1).unwrap(); // its own stream: nothing to wait for
    p.free(a).unwrap();
    check(&p);
    let s = p.stats();
    assert_eq!((s.allocated_bytes.all.current, s.active_bytes.all.current), (0, MIB as i64), "freed but still active");
    let b = p.malloc(MIB, 1).unwrap();
    assert_ne!(a, b, "not reused while stream 7 may still use it");
    assert_eq!(p.free(a).unwrap_err().status, Status::GPURT_ERROR_INVALID_ARGUMENT, "double free");
    p.source().complete_all();
    p.free(b).unwrap();
    let c = p.malloc(MIB, 1).unwrap();
    assert!(c == a || c == b, "a cached block is reused once the markers are done");
    assert_eq!(p.source().pending_markers(), 0);
    check(&p);
}

#[test]
fn out_of_memory_retries_after_releasing_the_cache_then_reports() {
    let p = pool(48 * MIB);
    let a = p.malloc(30 * MIB, 1).unwrap();
    p.free(a).unwrap(); // cached on stream 1
    // Stream 2 cannot use stream 1's block, and the source is full: the retry
    // releases the cache and succeeds.
    let b = p.malloc(30 * MIB, 2).unwrap();
    assert_eq!(p.stats().num_alloc_retries, 1);
    assert_eq!(p.stats().num_ooms, 0);
    check(&p);
    let err = p.malloc(40 * MIB, 2).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
    for needle in ["tried to allocate 40.00 MiB", "Device total 48.00 MiB", "allocated 30.00 MiB", "max_split_size_mb"] {
        assert!(err.message.contains(needle), "{needle:?} not in {}", err.message);
    }
    assert_eq!(p.stats().num_ooms, 1);
    check(&p);
    // The pool still works after the failure.
    p.free(b).unwrap();
    assert!(p.malloc(40 * MIB, 2).is_ok());
    check(&p);
}

/// Requests whose rounding would wrap (up to `u64::MAX`) are out of memory with
/// PyTorch's message, and change no statistic; the pool goes on working.
#[test]
fn requests_past_any_device_are_out_of_memory_and_change_nothing() {
    use super::caching::GPURT_MAX_ALLOCATION_SIZE;
    for p in [pool(GIB), expandable(GIB)] {
        let a = p.malloc(3 * MIB, 1).unwrap();
        let before = p.stats();
        for size in [u64::MAX, u64::MAX - 4095, u64::MAX - 2 * MIB, (1 << 63) + 1, GPURT_MAX_ALLOCATION_SIZE + 1] {
            let err = p.malloc(size, 1).unwrap_err();
            assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY, "{size}");
            assert!(err.message.contains("tried to allocate") && !err.message.contains("allocate -"), "{}", err.message);
            assert_eq!(p.stats(), before, "a refused request of {size} bytes changed a statistic");
            check(&p);
        }
        assert!(p.malloc(u64::MAX, 1).unwrap_err().message.contains("16.00 EiB"));
        p.free(a).unwrap();
        assert!(p.malloc(MIB, 1).is_ok());
        check(&p);
    }
}

#[test]
fn memory_fraction_caps_reserved_memory() {
    let p = pool(100 * MIB);
    assert!(p.set_memory_fraction(0.0).is_err());
    assert!(p.set_memory_fraction(1.5).is_err());
    p.set_memory_fraction(0.3).unwrap();
    p.malloc(20 * MIB, 1).unwrap();
    let err = p.malloc(20 * MIB, 1).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
    assert!(err.message.contains("memory fraction"), "{}", err.message);
    p.set_memory_fraction(1.0).unwrap();
    p.malloc(20 * MIB, 1).unwrap();
    check(&p);
}

#[test]
fn garbage_collection_threshold_releases_idle_segments_early() {
    let p = Allocator::new(HostSource::new(GIB), AllocConfig::parse("garbage_collection_threshold:0.5").unwrap());
    p.set_memory_fraction(0.1).unwrap(); // cap ~102 MiB; collect past ~51 MiB
    let a = p.malloc(40 * MIB, 1).unwrap();
    p.free(a).unwrap(); // 40 MiB cached on stream 1
    p.malloc(20 * MIB, 2).unwrap(); // 40 + 20 > 51: the idle segment goes first
    let s = p.stats();
    assert_eq!(s.reserved_bytes.all.current, 20 * MIB as i64);
    assert_eq!(s.num_alloc_retries, 0, "collected before, not after, a failure");
    check(&p);
}

#[test]
fn oversize_blocks_are_not_split_for_small_requests() {
    let p = Allocator::new(HostSource::new(GIB), AllocConfig::parse("max_split_size_mb:64,expandable_segments:False").unwrap());
    let big = p.malloc(100 * MIB, 1).unwrap();
    p.free(big).unwrap();
    let small = p.malloc(2 * MIB, 1).unwrap();
    assert_ne!(small, big, "a 100 MiB cached block is not carved for 2 MiB");
    assert_eq!(p.malloc(90 * MIB, 1).unwrap(), big, "but serves a request within 20 MiB of its size, unsplit");
    check(&p);
}

#[test]
fn zero_size_and_bad_pointers() {
    let p = pool(GIB);
    assert_eq!(p.malloc(0, 1).unwrap(), 0);
    p.free(0).unwrap();
    let a = p.malloc(512, 1).unwrap();
    assert_eq!(p.free(a + 1).unwrap_err().status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert_eq!(p.record_stream(12345, 2).unwrap_err().status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    check(&p);
    assert_eq!(p.stats().allocation.all.current, 1);
}

/// 20 000 random operations (log-uniform sizes 256 B – 32 MiB, three streams,
/// cross-stream uses, markers completing at random), every invariant checked after
/// each; at the end everything is freed and the cache emptied.
#[test]
fn random_operations_keep_every_invariant() {
    random_operations(AllocConfig::segmented());
}

#[test]
fn random_operations_keep_every_invariant_with_expandable_segments() {
    random_operations(AllocConfig::default());
}

/// Mappings of exactly what each growth lacks: many small ones, so that emptying the
/// cache leaves holes in segments' middles and growth maps into them.
#[test]
fn random_operations_keep_every_invariant_with_exact_expandable_segments() {
    random_operations(AllocConfig::parse("expandable_segments:True,exact_segments:True").unwrap());
}

fn random_operations(config: AllocConfig) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let expandable = config.expandable_segments;
    let p = Allocator::new(HostSource::new(2 * GIB), config);
    let mut live: Vec<u64> = Vec::new();
    for i in 0..crate::test_iterations(20_000) {
        match rng.below(10) {
            0..=4 => {
                let size = rng.log_uniform(256, 32 * MIB);
                match p.malloc(size, 1 + rng.below(3)) {
                    Ok(addr) => live.push(addr),
                    Err(e) => assert_eq!(e.status, Status::GPURT_ERROR_OUT_OF_MEMORY),
                }
            }
            5..=8 if !live.is_empty() => {
                let addr = live.swap_remove(rng.below(live.len() as u64) as usize);
                if rng.below(4) == 0 {
                    p.record_stream(addr, 1 + rng.below(3)).unwrap();
                }
                p.free(addr).unwrap();
            }
            _ => {
                if rng.below(3) == 0 {
                    p.source().complete_all();
                }
                if rng.below(50) == 0 {
                    p.empty_cache();
                }
            }
        }
        if i % 7 == 0 || live.is_empty() {
            check(&p);
        }
    }
    check(&p);
    for addr in live.drain(..) {
        p.free(addr).unwrap();
    }
    p.empty_cache();
    check(&p);
    let s = p.stats();
    assert_eq!(
        (s.allocated_bytes.all.current, s.reserved_bytes.all.current, s.active.all.current, s.requested_bytes.all.current),
        (0, 0, 0, 0)
    );
    if !expandable {
        // (An expandable segment maps in many steps and may unmap them in one.)
        assert_eq!(s.num_device_alloc, s.num_device_free);
    }
    assert_eq!((p.source().live_segments(), p.source().mapped_bytes()), (0, 0));
}

/// Options changed between operations (`gpurt_alloc_set_config` at any time),
/// expandable segments switched on and off included, under a memory cap that some
/// requests hit: every invariant holds throughout, and everything is given back at
/// the end.
#[test]
fn options_changed_midway_keep_every_invariant() {
    let configs = [
        "",
        "max_split_size_mb:40",
        "roundup_power2_divisions:4",
        "expandable_segments:True",
        "garbage_collection_threshold:0.5",
        "exact_segments:True",
        "expandable_segments:True,exact_segments:True",
    ]
        .map(|text| AllocConfig::parse(text).unwrap());
    let mut rng = Rng(0x2f0b_7a1c_55d3_9e61);
    let p = Allocator::new(HostSource::new(2 * GIB), AllocConfig::default());
    p.set_memory_fraction(0.75).unwrap();
    let mut live: Vec<u64> = Vec::new();
    for i in 0..crate::test_iterations(30_000) {
        if i % 1_000 == 0 {
            p.set_config(configs[rng.below(configs.len() as u64) as usize].clone());
            check(&p);
        }
        if (rng.below(2) == 0 && live.len() < 300) || live.is_empty() {
            match p.malloc(rng.log_uniform(256, 64 * MIB), 1 + rng.below(2)) {
                Ok(addr) => live.push(addr),
                Err(e) => assert_eq!(e.status, Status::GPURT_ERROR_OUT_OF_MEMORY),
            }
        } else {
            p.free(live.swap_remove(rng.below(live.len() as u64) as usize)).unwrap();
        }
        if i % 97 == 0 {
            check(&p);
        }
        if i % 5_000 == 4_999 {
            p.empty_cache();
            check(&p);
        }
    }
    let s = p.stats();
    assert!(s.num_device_alloc > 100 && s.num_ooms > 0, "the run should take many segments and hit its cap");
    live.drain(..).for_each(|addr| p.free(addr).unwrap());
    p.empty_cache();
    check(&p);
    assert_eq!((p.stats().reserved_bytes.all.current, p.source().live_segments(), p.source().mapped_bytes()), (0, 0, 0));
}

fn expandable(capacity: u64) -> Allocator {
    Allocator::new(HostSource::new(capacity), AllocConfig::default())
}

/// A freed block above 8 MiB is parked (kept for its size's next request, the most
/// recently freed first) without expandable segments. With them it is parked only for
/// the newest request's size and only with no Free neighbour (a warm pair stays on the
/// parked path); beside free memory it merges at once.
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
    assert_eq!(s.reserved_bytes.large_pool.current, 14 * MIB as i64, "mapped in 2 MiB steps: 6 + 4 + 4");
    assert_eq!(p.source().mapped_bytes(), 14 * MIB);
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

/// A segment grows by 1/8 of what it has mapped up to 32 MiB, past 512 MiB by 1/16
/// of it up to 128 MiB, and by 8 MiB at least (fewer driver calls from cold); by
/// what it lacks where the source refuses the step.
#[test]
fn expandable_segments_grow_in_steps_of_a_share_of_what_is_mapped() {
    for (capacity, after_step) in [(GIB, 72 * MIB), (66 * MIB, 66 * MIB)] {
        let p = expandable(capacity);
        let big = p.malloc(64 * MIB, 1).unwrap();
        let next = p.malloc(2 * MIB, 1).unwrap();
        assert_eq!(next, big + 64 * MIB);
        assert_eq!(p.source().mapped_bytes(), after_step, "capacity {capacity}");
        check(&p);
        if after_step > 66 * MIB {
            assert_eq!(p.malloc(2 * MIB, 1).unwrap(), next + 2 * MIB, "served from the step's rest");
            assert_eq!(p.source().mapped_bytes(), after_step, "no new mapping");
            p.free(next + 2 * MIB).unwrap();
        }
        assert_eq!(p.stats().reserved_bytes.all.current, after_step as i64);
        p.free(next).unwrap();
        p.free(big).unwrap();
        p.empty_cache();
        check(&p);
        assert_eq!((p.stats().reserved_bytes.all.current, p.source().mapped_bytes()), (0, 0));
    }
    let p = expandable(2 * GIB);
    let big = p.malloc(512 * MIB, 1).unwrap();
    p.malloc(2 * MIB, 1).unwrap();
    assert_eq!(p.source().mapped_bytes(), 544 * MIB, "a step is at most 32 MiB up to 512 MiB mapped");
    p.free(big + 512 * MIB).unwrap();
    p.free(big).unwrap();
    check(&p);
    for (first, after_step) in [(2 * MIB, 10 * MIB), (1024 * MIB, 1088 * MIB), (4096 * MIB, 4224 * MIB)] {
        let p = expandable(8 * GIB);
        let a = p.malloc(first, 1).unwrap();
        let b = p.malloc(2 * MIB, 1).unwrap();
        assert_eq!(p.source().mapped_bytes(), after_step, "8 MiB at least; 1/16 past 512 MiB, 128 MiB at most");
        p.free(b).unwrap();
        p.free(a).unwrap();
        check(&p);
    }
}

/// A segment's free tail is taken last: a request that fits in a hole leaves the
/// tail (the one block that grows in place) whole; one that fits nowhere else takes it.
#[test]
fn expandable_segments_take_their_free_tail_last() {
    let p = expandable(GIB);
    let a = p.malloc(64 * MIB, 1).unwrap();
    let separator = p.malloc(2 * MIB, 1).unwrap(); // maps a step of 8 MiB
    let b = p.malloc(4 * MIB, 1).unwrap(); // from the tail, which only it fits: 2 MiB left
    assert_eq!((separator, b, p.source().mapped_bytes()), (a + 64 * MIB, a + 66 * MIB, 72 * MIB));
    p.free(a).unwrap(); // a 64 MiB hole, larger than the tail
    let small = p.malloc(2 * MIB, 1).unwrap();
    assert_eq!(small, a, "from the hole, though the tail fits it best");
    p.free(b).unwrap(); // b merges into the tail: 6 MiB free at the end
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
    let step = p.malloc(2 * MIB, 1).unwrap(); // maps a step of 8 MiB at 64 MiB
    let rest = p.malloc(4 * MIB, 1).unwrap(); // from the step's rest
    let beyond = p.malloc(6 * MIB, 1).unwrap(); // a third mapping, of 72 / 8 -> 10 MiB
    assert_eq!(p.source().mapped_bytes(), 82 * MIB);
    p.free(rest).unwrap();
    p.free(beyond).unwrap();
    p.empty_cache(); // the free tail starts inside the step's mapping, which stays
    check(&p);
    assert_eq!((p.source().mapped_bytes(), p.stats().reserved_bytes.all.current), (72 * MIB, 72 * MIB as i64));
    let again = p.malloc(12 * MIB, 1).unwrap();
    assert_eq!(again, step + 2 * MIB, "the kept mapping's free part, then new mappings");
    check(&p);
    for ptr in [big, step, again] {
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

/// The pool's choices do not depend on where the source puts segments: the same
/// operations on a source whose segments ascend and on one whose segments descend
/// give every allocation the same place (segment number, offset), so the GPU makes
/// the choices measured on the host.
#[test]
fn placement_does_not_depend_on_segment_addresses() {
    for config in [AllocConfig::segmented(), AllocConfig::default()] {
        let places = |source: HostSource| {
            let p = Allocator::new(source, config.clone());
            let mut rng = Rng(0x5851_f42d_4c95_7f2d);
            let (mut live, mut places) = (Vec::new(), Vec::new());
            for _ in 0..crate::test_iterations(20_000) {
                if (rng.below(2) == 0 && live.len() < 500) || live.is_empty() {
                    let addr = p.malloc(rng.log_uniform(256, 32 * MIB), 1).unwrap();
                    places.push(p.source().placement(addr).expect("inside a segment"));
                    live.push(addr);
                } else {
                    p.free(live.swap_remove(rng.below(live.len() as u64) as usize)).unwrap();
                }
            }
            check(&p);
            places
        };
        let (up, down) = (places(HostSource::new(64 * GIB)), places(HostSource::descending(64 * GIB)));
        assert_eq!(up, down, "expandable: {}", config.expandable_segments);
    }
}

/// 8 threads share one pool; a quarter of the blocks are freed by another thread
/// than the one that allocated them. The invariants hold at the end.
#[test]
fn eight_threads_with_cross_thread_frees() {
    let shared = Arc::new(pool(4 * GIB));
    let handoff: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let (shared, handoff) = (shared.clone(), handoff.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x1234_5678 + t * 7919);
                let mut mine = Vec::new();
                for _ in 0..crate::test_iterations(3_000) {
                    if rng.below(2) == 0 || mine.is_empty() {
                        let size = rng.log_uniform(256, 4 * MIB);
                        let addr = shared.malloc(size, t).unwrap();
                        mine.push(addr);
                    } else {
                        let addr = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                        if rng.below(4) == 0 {
                            handoff.lock().unwrap().push(addr);
                        } else {
                            shared.free(addr).unwrap();
                        }
                    }
                    if let Some(addr) = (rng.below(3) == 0).then(|| handoff.lock().unwrap().pop()).flatten() {
                        shared.free(addr).unwrap();
                    }
                }
                mine
            })
        })
        .collect();
    let leftovers: Vec<u64> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let p = shared;
    check(&p);
    for addr in leftovers.into_iter().chain(handoff.lock().unwrap().drain(..)) {
        p.free(addr).unwrap();
    }
    p.empty_cache();
    check(&p);
    assert_eq!(p.stats().reserved_bytes.all.current, 0);
}

/// Statistics folded from several shards: currents exact at every read (requested
/// bytes, which follow the requests exactly, are checked here); a peak reached
/// while one stream at a time allocates is exact; with streams whose changes overlap
/// between flushes, within (streams + 1) × `FLUSH_BYTES` of the truth.
#[test]
fn statistics_across_shards() {
    let p = pool(1 << 50);
    let a = p.malloc(10 * MIB, 1).unwrap();
    let b = p.malloc(10 * MIB, 2).unwrap();
    p.free(a).unwrap();
    let s = p.stats();
    assert_eq!((s.allocated_bytes.all.current, s.allocated_bytes.all.peak), (10 * MIB as i64, 20 * MIB as i64));
    p.free(b).unwrap();
    p.reset_peak();
    assert_eq!(p.stats().allocated_bytes.all.peak, 0);

    let mut rng = Rng(0x5eed);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let (mut bytes, mut true_peak) = (0i64, 0i64);
    for i in 0..crate::test_iterations(20_000) {
        if rng.below(2) == 0 || live.is_empty() {
            let size = rng.log_uniform(256, 256 * MIB);
            live.push((p.malloc(size, 1 + rng.below(4)).unwrap(), size));
            bytes += size as i64;
            true_peak = true_peak.max(bytes);
        } else {
            let (addr, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
            p.free(addr).unwrap();
            bytes -= size as i64;
        }
        if i % 1000 == 0 {
            let s = p.stats();
            assert_eq!(s.requested_bytes.all.current, bytes, "current is exact at every read");
            let peak = s.requested_bytes.all.peak;
            assert!((peak - true_peak).abs() <= 5 * super::caching::FLUSH_BYTES, "peak {peak}, truth {true_peak}");
        }
    }
    check(&p);
}

/// Statistics on one stream against a model, at random reads: every current value,
/// peak and total of the allocations, allocated, active and requested bytes is exact,
/// with many frees and reuses served by parked blocks (a few repeated sizes), and
/// with peaks and totals reset in between.
#[test]
fn statistics_are_exact_on_one_stream() {
    #[derive(Default, Debug, PartialEq, Eq, Clone, Copy)]
    struct Model {
        count: [i64; 4],
        bytes: [i64; 4],
        requested: [i64; 2],
    }
    let p = pool(1 << 50);
    let mut rng = Rng(0x0dd5_eed5);
    let mut live: Vec<(u64, u64)> = Vec::new();
    let mut m = Model::default(); // [current, peak, allocated, freed]; requested [current, peak]
    let (mut reuse_sizes, mut reads) = ([0u64; 4], 0);
    for slot in &mut reuse_sizes {
        *slot = rng.log_uniform(256, 64 * MIB);
    }
    for i in 0..crate::test_iterations(30_000) {
        if rng.below(2) == 0 || live.is_empty() {
            let size = if rng.below(3) == 0 { rng.log_uniform(256, 64 * MIB) } else { reuse_sizes[rng.below(4) as usize] };
            live.push((p.malloc(size, 7).unwrap(), size));
            let block = size.div_ceil(512) as i64 * 512;
            m.count = [m.count[0] + 1, m.count[1].max(m.count[0] + 1), m.count[2] + 1, m.count[3]];
            m.bytes = [m.bytes[0] + block, m.bytes[1].max(m.bytes[0] + block), m.bytes[2] + block, m.bytes[3]];
            m.requested = [m.requested[0] + size as i64, m.requested[1].max(m.requested[0] + size as i64)];
        } else {
            let (addr, size) = live.swap_remove(rng.below(live.len() as u64) as usize);
            p.free(addr).unwrap();
            let block = size.div_ceil(512) as i64 * 512;
            m.count = [m.count[0] - 1, m.count[1], m.count[2], m.count[3] + 1];
            m.bytes = [m.bytes[0] - block, m.bytes[1], m.bytes[2], m.bytes[3] + block];
            m.requested[0] -= size as i64;
        }
        match rng.below(100) {
            0 => {
                p.reset_peak();
                (m.count[1], m.bytes[1], m.requested[1]) = (m.count[0], m.bytes[0], m.requested[0]);
            }
            1 => {
                p.reset_accumulated();
                (m.count[2], m.count[3], m.bytes[2], m.bytes[3]) = (0, 0, 0, 0);
            }
            2..=11 => {
                let s = p.stats();
                let four = |a: &super::stats::gpurt_stat_array_t| [a.all.current, a.all.peak, a.all.allocated, a.all.freed];
                let got = Model {
                    count: four(&s.allocation),
                    bytes: four(&s.allocated_bytes),
                    requested: [s.requested_bytes.all.current, s.requested_bytes.all.peak],
                };
                assert_eq!(got, m, "after operation {i}");
                assert_eq!((four(&s.active), four(&s.active_bytes)), (m.count, m.bytes), "active after operation {i}");
                reads += 1;
            }
            _ => {}
        }
    }
    assert!(reads > 2000);
    check(&p);
}

/// The lock-free span check that picks a device's allocator for a pointer-only free:
/// true for every live block, false for another allocator's blocks (as on two
/// devices), expandable segments included, and before any segment.
#[test]
fn span_check_tells_allocators_apart() {
    let (a, b) = (pool(64 * GIB), expandable(64 * GIB));
    assert!(!a.may_hold(1 << 40) && !b.may_hold(1 << 40), "no segment yet");
    let mut rng = Rng(0x5a5a);
    let blocks: Vec<(u64, bool)> = (0..400)
        .map(|i| {
            let size = rng.log_uniform(256, 64 * MIB);
            if i % 2 == 0 { (a.malloc(size, 1).unwrap(), true) } else { (b.malloc(size, 1).unwrap(), false) }
        })
        .collect();
    for &(addr, in_a) in &blocks {
        assert_eq!((a.may_hold(addr), b.may_hold(addr)), (in_a, !in_a), "{addr:#x}");
        assert_eq!((a.holds(addr), b.holds(addr)), (in_a, !in_a), "{addr:#x}");
    }
    for (addr, in_a) in blocks {
        if in_a { a.free(addr) } else { b.free(addr) }.unwrap();
    }
}

/// More streams than shards: streams share shards, each stream's blocks stay its own.
#[test]
fn more_streams_than_shards() {
    let p = pool(64 * GIB);
    let first: Vec<u64> = (1..=200).map(|stream| p.malloc(4 * KIB, stream).unwrap()).collect();
    first.iter().for_each(|&a| p.free(a).unwrap());
    for (stream, &a) in (1..=200).zip(&first) {
        assert_eq!(p.malloc(4 * KIB, stream).unwrap(), a, "stream {stream} gets its own block back");
    }
    check(&p);
}

/// Streams come and go: a shard hands the free lists of a stream whose segments all
/// went back to its next new stream, while the streams still alive keep theirs, even
/// with no free block in them, and every stream gets only its own blocks back.
#[test]
fn free_lists_of_departed_streams_serve_new_ones() {
    let p = pool(64 * GIB);
    // 12 MiB: a segment of its own, which the block fills.
    let size = 12 * MIB;
    let own_blocks_back = |streams: &mut dyn Iterator<Item = u64>, blocks: &[u64]| {
        for (stream, &a) in streams.zip(blocks) {
            assert_eq!(p.malloc(size, stream).unwrap(), a, "stream {stream} gets its own block back");
        }
    };
    // 200 streams over 64 shards: each shard holds several streams' lists.
    let old: Vec<u64> = (1..=200).map(|stream| p.malloc(size, stream).unwrap()).collect();
    // The even streams leave; the odd ones keep their block, and no free one.
    (2..=200).step_by(2).for_each(|stream| p.free(old[stream - 1]).unwrap());
    p.empty_cache();
    let new: Vec<u64> = (201..=400).map(|stream| p.malloc(size, stream).unwrap()).collect();
    check(&p);
    let odd: Vec<u64> = old.iter().step_by(2).copied().collect();
    new.iter().chain(&odd).for_each(|&a| p.free(a).unwrap());
    check(&p);
    own_blocks_back(&mut (201..=400), &new);
    own_blocks_back(&mut (1..=200).step_by(2), &odd);
    check(&p);
}

/// A thread that takes turns on a few streams, or on more than it remembers
/// (`RECENT`), finds each stream's own shard: every stream's segment sits in a shard
/// of its own, and frees of blocks from streams other than the last one find theirs.
#[test]
fn streams_taken_in_turns_keep_their_own_shards() {
    let p = pool(64 * GIB);
    let streams: Vec<u64> = (1..=6).map(|s| s * 16).collect();
    let mut live = Vec::new();
    for round in 0..60 {
        let taken = if round % 3 == 0 { &streams[..] } else { &streams[..3] };
        for &stream in taken {
            live.push(p.malloc(4 * KIB, stream).unwrap());
        }
        // Every other round, free all but the newest block: most are of other streams.
        if round % 2 == 1 {
            let newest = live.pop().unwrap();
            live.drain(..).for_each(|a| p.free(a).unwrap());
            live.push(newest);
        }
    }
    let mut shards: Vec<u32> = p.segment_owners().iter().map(|o| o.shard).collect();
    shards.sort();
    shards.dedup();
    assert_eq!((p.segment_owners().len(), shards.len()), (streams.len(), streams.len()), "one segment and one shard per stream");
    live.into_iter().for_each(|a| p.free(a).unwrap());
    check(&p);
}

/// Threads that allocate on one stream at once: a thread that keeps finding the
/// stream's shard locked by another moves to a shard of its own, and frees from any
/// thread still find each block's shard.
#[test]
fn a_thread_that_waits_on_a_shared_stream_gets_its_own_shard() {
    use std::sync::mpsc::channel;
    let p = pool(64 * GIB);
    let stream = 7;
    let mut blocks = vec![p.malloc(4 * KIB, stream).unwrap()];
    let shards = |p: &Allocator| {
        let mut owners: Vec<u32> = p.segment_owners().iter().map(|o| o.shard).collect();
        owners.sort();
        owners.dedup();
        owners.len()
    };
    let ((held_tx, held_rx), (done_tx, done_rx)) = (channel::<bool>(), channel::<u64>());
    std::thread::scope(|scope| {
        let p = &p;
        scope.spawn(move || {
            // Each allocation starts while the main thread holds the shared shard.
            while held_rx.recv() == Ok(true) {
                done_tx.send(p.malloc(4 * KIB, stream).unwrap()).unwrap();
            }
        });
        let mut rounds = 0;
        while shards(p) == 1 && rounds < 4 * SPLIT_AFTER {
            let held = p.hold_shared_shard(stream);
            held_tx.send(true).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(3));
            drop(held);
            blocks.push(done_rx.recv().unwrap());
            rounds += 1;
        }
        held_tx.send(false).unwrap();
        assert_eq!(shards(p), 2, "after {rounds} contended allocations, the waiting thread has a shard of its own");
        assert!(rounds >= SPLIT_AFTER, "split after {rounds} waits, before {SPLIT_AFTER}");
    });
    // The main thread's allocations stay in the shared shard's segment.
    blocks.push(p.malloc(4 * KIB, stream).unwrap());
    assert_eq!(shards(&p), 2);
    check(&p);
    blocks.into_iter().for_each(|a| p.free(a).unwrap());
    assert_eq!(p.stats().allocated_bytes.all.current, 0);
    check(&p);
}

/// A free does not wait for a shard that it only guessed (one of the thread's recent
/// streams) while another thread holds it: it looks elsewhere, and completes.
#[test]
fn a_free_passes_over_a_guessed_shard_that_another_thread_holds() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let p = pool(64 * GIB);
    let (x, y) = (16, 32);
    let mine = p.malloc(4 * KIB, y).unwrap();
    let theirs = p.malloc(4 * KIB, x).unwrap(); // stream x's shard is now this thread's first guess
    let ((held_tx, held_rx), (freed_tx, freed_rx)) = (channel(), channel());
    std::thread::scope(|scope| {
        let p = &p;
        let holder = scope.spawn(move || {
            let held = p.hold_shared_shard(x);
            held_tx.send(()).unwrap();
            let freed_in_time = freed_rx.recv_timeout(Duration::from_secs(5)).is_ok();
            drop(held);
            freed_in_time
        });
        held_rx.recv().unwrap();
        p.free(mine).unwrap();
        freed_tx.send(()).unwrap();
        assert!(holder.join().unwrap(), "the free waited for the shard another thread held");
    });
    p.free(theirs).unwrap();
    check(&p);
}
