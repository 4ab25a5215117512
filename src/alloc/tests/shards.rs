//! Shards and threads on the host segment source: threads freeing each other's
//! blocks, statistics folded across shards, the span check that finds a pointer's
//! allocator, streams sharing and handing on shards, and a contending thread moved to
//! a shard of its own.

use super::*;

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
            assert!((peak - true_peak).abs() <= 5 * crate::alloc::caching::FLUSH_BYTES, "peak {peak}, truth {true_peak}");
        }
    }
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
