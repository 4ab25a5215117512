//! The caching allocator's behaviour on the host segment source: splitting and
//! coalescing, stream-tagged reuse, deferred frees, the out-of-memory retry, the
//! memory fraction, invariants after random operations and exact statistics. The
//! helpers here serve the files beside it: expandable segments, shards and threads,
//! sleep and wake.

use std::sync::{Arc, Mutex};

use super::caching::{CachingAllocator, SPLIT_AFTER};
use super::config::AllocConfig;
use super::host::{HostSource, XorShift as Rng};
use super::reclaim;
use crate::error::Status;

mod expandable;
mod on_request;
mod read_only;
mod shards;
mod sleep;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

type Allocator = CachingAllocator<HostSource>;

fn pool(capacity: u64) -> Allocator {
    Allocator::new(HostSource::new(capacity), AllocConfig::segmented())
}

/// An allocator with expandable segments asked for (the default, but the tests of
/// them should not depend on it).
fn expandable(capacity: u64) -> Allocator {
    Allocator::new(HostSource::new(capacity), AllocConfig::parse("expandable_segments:True").unwrap())
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
fn no_split_gives_each_allocation_a_segment_of_its_own_and_reuses_blocks_whole() {
    let p = Allocator::new(HostSource::new(GIB), AllocConfig::default().with("no_split:True,expandable_segments:True").unwrap());
    let addrs: Vec<u64> = [512, 64 * KIB, 3 * MIB, 30 * MIB].iter().map(|&size| p.malloc(size, 1).unwrap()).collect();
    check(&p);
    let place = |addr: u64| p.try_place(addr).unwrap().unwrap();
    for &addr in &addrs {
        let at = place(addr);
        assert_eq!((at.segment, at.size), (addr, at.segment_size), "a whole segment of its own, never split");
    }
    assert_eq!(place(addrs[2]).size, 4 * MIB, "mapped in the size it needs, rounded to 2 MiB");
    p.free(addrs[3]).unwrap();
    let whole = p.malloc(12 * MIB, 1).unwrap();
    assert_eq!((whole, place(whole).size), (addrs[3], 30 * MIB), "a freed block serves a smaller request whole");
    p.free(whole).unwrap();
    let far_smaller = p.malloc(4 * MIB, 1).unwrap();
    assert_ne!(far_smaller, addrs[3], "not a block over 20 MiB larger than the request");
    check(&p);
    for addr in [addrs[0], addrs[1], addrs[2], far_smaller] {
        p.free(addr).unwrap();
    }
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

/// Out of memory after the cache is released asks the installed hook (the process's
/// share group) holding no lock: memory given back meanwhile serves one more retry; a
/// hook that got nothing leaves the error as before. Device 77: the hook answers no
/// other test's pools (the hook is the process's, and tests run at once).
#[test]
fn out_of_memory_asks_the_hook_holding_no_lock_then_retries_once() {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    const DEVICE: i32 = 77;
    let p = Arc::new(Allocator::new(HostSource::new(48 * MIB).on_device(DEVICE), AllocConfig::segmented()));
    let given = Arc::new(Mutex::new(Some(p.malloc(30 * MIB, 1).unwrap())));
    let asked = Arc::new(AtomicU32::new(0));
    let (hook_pool, hook_given, hook_asked) = (p.clone(), given.clone(), asked.clone());
    reclaim::set_out_of_memory_hook(Some(Arc::new(move |device, bytes| {
        if device != Some(DEVICE) {
            return None;
        }
        hook_asked.fetch_add(1, SeqCst);
        assert_eq!(bytes, 30 * MIB);
        // Through the pool itself: a lock held by the failing allocation would deadlock here.
        let Some(addr) = hook_given.lock().unwrap().take() else {
            return Some(reclaim::Asked { given_back: false, account: "the test's group gave nothing".into() });
        };
        hook_pool.free(addr).unwrap();
        hook_pool.empty_cache();
        Some(reclaim::Asked { given_back: true, account: "the test's group gave 30 MiB".into() })
    })));
    let b = p.malloc(30 * MIB, 2).unwrap();
    assert_eq!((asked.load(SeqCst), p.stats().num_ooms), (1, 0), "served after the hook gave memory back");
    check(&p);
    let err = p.malloc(30 * MIB, 2).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
    assert!(err.message.contains("the test's group gave nothing"), "the message says how the asking went: {}", err.message);
    assert_eq!((asked.load(SeqCst), p.stats().num_ooms), (2, 1), "asked again, nothing given: out of memory");
    reclaim::set_out_of_memory_hook(None);
    check(&p);
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
