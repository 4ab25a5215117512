//! Sleep and wake on the host segment source: memory unmapped and mapped again at the
//! same addresses, contents kept with offload and dropped without, allocations
//! refused and frees served while asleep, and every failure of every source call
//! leaving the allocator wholly awake or wholly asleep, nothing lost, retryable.

use super::*;

/// Blocks of varied sizes on two streams, each written with its own bytes; a third of
/// them freed again. The live blocks: (address, contents).
pub(super) fn fill(p: &Allocator, rng: &mut Rng) -> Vec<(u64, Vec<u8>)> {
    let mut live = Vec::new();
    for i in 0..60 {
        let size = rng.log_uniform(512, 48 * MIB);
        let addr = p.malloc(size, 1 + i % 2).unwrap();
        let bytes: Vec<u8> = (0..16).map(|_| rng.next_u64() as u8).collect();
        p.source().write(addr, &bytes);
        live.push((addr, bytes));
    }
    for _ in 0..20 {
        let (addr, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
        p.free(addr).unwrap();
    }
    live
}

/// A sleep with nothing of the caller's to refuse it.
pub(super) fn sleep(p: &Allocator, offload: bool) -> crate::error::Result<()> {
    p.sleep(offload, || Ok(()))
}

pub(super) fn assert_contents(p: &Allocator, live: &[(u64, Vec<u8>)]) {
    for (addr, bytes) in live {
        assert_eq!(p.source().read(*addr).as_ref(), Some(bytes), "block {addr:#x} lost its contents");
    }
}

#[test]
fn offload_unmaps_everything_and_wake_brings_back_every_byte_at_its_address() {
    let p = expandable(64 * GIB);
    let live = fill(&p, &mut Rng(7));
    let mapped = p.source().mapped_bytes();
    sleep(&p, true).unwrap();
    check(&p);
    assert_eq!(p.source().mapped_bytes(), 0, "every mapping went back");
    assert_eq!(p.stats().reserved_bytes.all.current, 0);
    assert_eq!(p.sleep_mode(), Some(true));
    let refused = p.malloc(4 * KIB, 1).unwrap_err();
    assert_eq!(refused.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert!(refused.message.contains("asleep"), "{}", refused.message);
    assert!(p.malloc(MIB, 99).is_err(), "a stream new to the pool is refused too");
    assert!(sleep(&p, true).is_err(), "a second sleep is refused");
    // Frees go on while it sleeps.
    let (freed, _) = live[0];
    p.free(freed).unwrap();
    check(&p);
    p.wake().unwrap();
    check(&p);
    assert!(p.source().mapped_bytes() > 0 && p.source().mapped_bytes() <= mapped, "the cached free memory stayed released");
    assert_eq!(p.stats().reserved_bytes.all.current as u64, p.source().mapped_bytes());
    assert_eq!(p.sleep_mode(), None);
    assert_contents(&p, &live[1..]);
    assert!(p.wake().is_err(), "a wake of an awake pool is refused");
    let again = p.malloc(MIB, 1).unwrap();
    check(&p);
    p.free(again).unwrap();
    for (addr, _) in &live[1..] {
        p.free(*addr).unwrap();
    }
    p.empty_cache();
    assert_eq!(p.source().live_segments(), 0, "every segment and reservation went back");
}

/// A segment maps a page at a time, and a sleep unmaps each page; a wake maps each run
/// of adjacent pages as one allocation (one driver call for a 100 MiB block, not five),
/// which goes back to the driver whole.
#[test]
fn a_wake_maps_each_run_of_pages_once() {
    let p = expandable(GIB);
    let block = p.malloc(100 * MIB, 1).unwrap();
    let after = p.malloc(4 * MIB, 1).unwrap(); // to the next page: [100, 120) MiB
    let before = p.stats();
    assert_eq!((before.num_device_alloc, p.source().mapped_bytes()), (6, 120 * MIB));
    sleep(&p, false).unwrap();
    assert_eq!(p.stats().num_device_free - before.num_device_free, 6, "every page unmapped");
    p.wake().unwrap();
    assert_eq!((p.stats().num_device_alloc - before.num_device_alloc, p.source().mapped_bytes()), (1, 120 * MIB), "one run, one mapping");
    let small = p.malloc(MIB, 1).unwrap();
    check(&p);
    p.free(block).unwrap();
    p.empty_cache();
    assert_eq!(p.source().mapped_bytes(), 120 * MIB + 2 * MIB, "the run goes back whole, or not at all (the small block's page is apart)");
    p.free(after).unwrap();
    p.empty_cache();
    assert_eq!(p.source().mapped_bytes(), 2 * MIB);
    p.free(small).unwrap();
    check(&p);
}

#[test]
fn discard_drops_the_contents_and_keeps_the_addresses() {
    let p = expandable(64 * GIB);
    let live = fill(&p, &mut Rng(8));
    sleep(&p, false).unwrap();
    assert_eq!(p.source().mapped_bytes(), 0);
    p.wake().unwrap();
    check(&p);
    for (addr, _) in &live {
        assert_eq!(p.source().read(*addr), None, "discarded contents came back");
        p.source().write(*addr, b"mapped again");
    }
    for (addr, _) in &live {
        p.free(*addr).unwrap();
    }
    check(&p);
}

#[test]
fn a_pool_of_whole_segments_refuses_to_sleep_while_it_holds_a_block() {
    let p = Allocator::new(HostSource::new(64 * GIB), AllocConfig::segmented());
    let addr = p.malloc(3 * MIB, 1).unwrap();
    let refused = sleep(&p, true).unwrap_err();
    assert_eq!(refused.status, Status::GPURT_ERROR_NOT_SUPPORTED);
    assert!(refused.message.contains(&format!("{addr:#x}")), "the refusal names the block: {}", refused.message);
    assert_eq!(p.sleep_mode(), None, "it stays awake");
    p.malloc(MIB, 1).unwrap();
    check(&p);
    p.free(addr).unwrap();
}

#[test]
fn every_failure_of_sleep_or_wake_leaves_the_pool_wholly_awake_or_asleep_and_retryable() {
    for offload in [true, false] {
        for (operation, in_wake) in [("synchronize", false), ("host_staging", false), ("offload", false), ("unmap", false), ("map", true), ("restore", true)] {
            if !offload && ["host_staging", "offload", "restore"].contains(&operation) {
                continue;
            }
            let mut failures = 0;
            for pass in 0..6 {
                let p = expandable(64 * GIB);
                let live = fill(&p, &mut Rng(9 + pass as u64));
                // A sleep first gives back the free memory, as empty_cache does, which
                // a failure after it does not undo.
                p.empty_cache();
                let mapped = p.source().mapped_bytes();
                if in_wake {
                    sleep(&p, offload).unwrap();
                }
                p.source().fail_on(operation, pass);
                let failed = if in_wake { p.wake() } else { sleep(&p, offload) };
                check(&p);
                let what = format!("{operation} failing after {pass} calls (offload {offload})");
                if failed.is_ok() {
                    continue; // fewer calls than `pass`: nothing failed
                }
                failures += 1;
                if in_wake {
                    assert_eq!(p.sleep_mode(), Some(offload), "{what}: still asleep");
                    assert_eq!(p.source().mapped_bytes(), 0, "{what}: wholly unmapped");
                    assert!(p.malloc(KIB, 1).is_err(), "{what}: allocations still refused");
                    p.wake().unwrap();
                } else {
                    assert_eq!(p.sleep_mode(), None, "{what}: still awake");
                    assert_eq!(p.source().mapped_bytes(), mapped, "{what}: wholly mapped");
                    if offload || operation != "unmap" {
                        assert_contents(&p, &live); // a discard that unmapped some lost their bytes, as asked
                    }
                    sleep(&p, offload).unwrap();
                    p.wake().unwrap();
                }
                check(&p);
                if offload {
                    assert_contents(&p, &live);
                }
                p.free(p.malloc(MIB, 2).unwrap()).unwrap();
            }
            assert!(failures > 1 || ["synchronize", "host_staging"].contains(&operation), "{operation}: only {failures} of its calls failed");
        }
    }
}

#[test]
fn random_operations_with_sleeps_keep_every_invariant() {
    let p = expandable(64 * GIB);
    let mut rng = Rng(10);
    let mut live: Vec<(u64, Vec<u8>)> = Vec::new();
    for step in 0..3000u32 {
        match rng.below(100) {
            0..=1 if p.sleep_mode().is_none() => sleep(&p, rng.below(2) == 0).unwrap(),
            2..=9 if p.sleep_mode().is_some() => {
                let offloaded = p.sleep_mode() == Some(true);
                p.wake().unwrap();
                if offloaded {
                    assert_contents(&p, &live);
                } else {
                    for (addr, bytes) in &live {
                        p.source().write(*addr, bytes);
                    }
                }
            }
            10..=54 if p.sleep_mode().is_none() => {
                let addr = p.malloc(rng.log_uniform(512, 16 * MIB), 1 + rng.below(3)).unwrap();
                let bytes = step.to_le_bytes().to_vec();
                p.source().write(addr, &bytes);
                live.push((addr, bytes));
            }
            55..=99 if !live.is_empty() => {
                let (addr, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
                p.free(addr).unwrap();
            }
            _ => {}
        }
        if step % 100 == 0 {
            check(&p);
        }
    }
    if p.sleep_mode().is_some() {
        p.wake().unwrap();
    }
    check(&p);
}

#[test]
fn a_repeated_offload_reuses_the_host_memory_until_empty_cache() {
    let p = expandable(64 * GIB);
    let live = fill(&p, &mut Rng(11));
    sleep(&p, true).unwrap();
    let first = p.source().fresh_offloads();
    assert!(first > 0);
    p.wake().unwrap();
    sleep(&p, true).unwrap();
    assert_eq!(p.source().fresh_offloads(), first, "the second sleep copied into the first one's host memory");
    p.wake().unwrap();
    assert_contents(&p, &live);
    p.empty_cache();
    sleep(&p, true).unwrap();
    assert_eq!(p.source().fresh_offloads(), 2 * first, "empty_cache gave the host memory back");
    p.wake().unwrap();
    assert_contents(&p, &live);
    check(&p);
}

/// A failed unmap is no memory given back: the sleep fails and the pool is awake,
/// every mapping mapped, the offloaded contents restored into those unmapped first;
/// the retry succeeds.
#[test]
fn a_failed_unmap_fails_the_sleep_and_leaves_the_pool_awake_and_whole() {
    for offload in [true, false] {
        for pass in 0..4 {
            let p = expandable(64 * GIB);
            let live = fill(&p, &mut Rng(20 + pass as u64));
            p.empty_cache();
            let mapped = p.source().mapped_bytes();
            p.source().fail_on("unmap", pass);
            let failed = sleep(&p, offload).unwrap_err();
            assert!(failed.message.contains("injected failure of unmap") && failed.message.contains("awake"), "{}", failed.message);
            check(&p);
            assert_eq!(p.sleep_mode(), None, "still awake");
            assert_eq!(p.source().mapped_bytes(), mapped, "wholly mapped");
            assert_eq!(p.stats().asleep_bytes, 0);
            if offload {
                assert_contents(&p, &live);
            }
            p.free(p.malloc(MIB, 2).unwrap()).unwrap();
            sleep(&p, offload).unwrap();
            assert_eq!(p.source().mapped_bytes(), 0);
            p.wake().unwrap();
            check(&p);
        }
    }
}

/// An offload copies the live blocks, not the free memory between them.
#[test]
fn an_offload_copies_only_the_live_bytes() {
    let p = expandable(64 * GIB);
    let blocks: Vec<u64> = (0..16).map(|_| p.malloc(16 * MIB, 1).unwrap()).collect();
    for (i, &addr) in blocks.iter().enumerate() {
        if i % 2 == 1 {
            p.free(addr).unwrap();
        } else {
            p.source().write(addr, &[i as u8; 8]);
        }
    }
    p.empty_cache(); // as the sleep does: free mappings go back
    let mapped = p.source().mapped_bytes();
    sleep(&p, true).unwrap();
    let s = p.stats();
    assert_eq!(s.offloaded_bytes, 8 * 16 * MIB as i64, "the eight live blocks, not the free ones between them");
    assert_eq!(s.asleep_bytes as u64, mapped, "all the memory is unmapped");
    assert!(s.asleep_bytes > s.offloaded_bytes, "free memory shares mappings with live blocks: {mapped} mapped");
    assert_eq!(s.offload_host_bytes, s.offloaded_bytes, "host memory of the live bytes' size");
    p.wake().unwrap();
    for (i, &addr) in blocks.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        assert_eq!(p.source().read(addr), Some(vec![i as u8; 8]));
    }
    check(&p);
}

#[test]
fn an_offload_drops_the_blocks_marked_discard_and_the_mark_ends_with_the_allocation() {
    let p = expandable(64 * GIB);
    let blocks: Vec<u64> = (0..8).map(|_| p.malloc(16 * MIB, 1).unwrap()).collect();
    for (i, &addr) in blocks.iter().enumerate() {
        p.source().write(addr, &[i as u8 + 1; 8]);
        if i % 4 == 3 {
            p.try_set_discard_on_sleep(addr, true).unwrap().unwrap(); // a cache, rebuilt after wake
        }
    }
    p.try_set_discard_on_sleep(blocks[0], true).unwrap().unwrap();
    p.try_set_discard_on_sleep(blocks[0], false).unwrap().unwrap(); // taken back: kept
    assert!(p.try_set_discard_on_sleep(blocks[0] + 8, true).is_none(), "not a block's start");
    sleep(&p, true).unwrap();
    assert_eq!(p.stats().offloaded_bytes, 6 * 16 * MIB as i64, "the two marked blocks are not copied");
    p.wake().unwrap();
    check(&p);
    for (i, &addr) in blocks.iter().enumerate().filter(|(i, _)| i % 4 != 3) {
        assert_eq!(p.source().read(addr), Some(vec![i as u8 + 1; 8]), "kept block {i}");
    }
    // The mark ends with the allocation: the same address allocated again is kept.
    p.free(blocks[3]).unwrap();
    let again = p.malloc(16 * MIB, 1).unwrap();
    assert_eq!(again, blocks[3]);
    sleep(&p, true).unwrap();
    assert_eq!(p.stats().offloaded_bytes, 7 * 16 * MIB as i64);
    p.wake().unwrap();
    check(&p);
}

/// #60's loop: a block growing by 2 MiB a round, the last one freed, an offload and a
/// wake each round. The host memory kept never exceeds one offload's need per shard,
/// and the statistics count it to the byte.
#[test]
fn host_memory_of_offloads_stays_bounded_and_counted() {
    let p = expandable(64 * GIB);
    let mut previous = None;
    for i in 0..20u64 {
        let block = p.malloc((64 + 2 * i) * MIB, 1).unwrap();
        p.source().write(block, &i.to_le_bytes());
        if let Some(old) = previous.replace(block) {
            p.free(old).unwrap();
        }
        sleep(&p, true).unwrap();
        assert_eq!(p.stats().offload_host_bytes as u64, p.source().staged_bytes(), "round {i}: counted while asleep");
        p.wake().unwrap();
        assert_eq!(p.source().read(block), Some(i.to_le_bytes().to_vec()));
        let (staged, reserved) = (p.source().staged_bytes(), p.stats().reserved_bytes.all.current as u64);
        assert!(staged <= reserved, "round {i}: {staged} bytes of host memory kept for a pool reserving {reserved}");
        assert_eq!(p.stats().offload_host_bytes as u64, staged, "round {i}: counted after the wake");
        check(&p);
    }
    p.empty_cache();
    assert_eq!((p.source().staged_bytes(), p.stats().offload_host_bytes), (0, 0), "empty_cache gave it back");
}

/// What asks for device memory (an out-of-memory retry; a share group's request,
/// `empty_device_cache`) keeps the host copy a wake left, so the next sleep makes no
/// host memory (~70 ms a GiB on the GPU, most of a share group's switch); only
/// `empty_cache` gives it back.
#[test]
fn requests_for_device_memory_keep_the_host_copy_for_the_next_sleep() {
    let p = expandable(256 * MIB);
    let block = p.malloc(64 * MIB, 1).unwrap();
    p.source().write(block, b"kept");
    sleep(&p, true).unwrap();
    p.wake().unwrap();
    let kept = p.source().staged_bytes();
    assert!(kept >= 64 * MIB, "{kept} bytes kept after the wake");
    assert!(p.malloc(512 * MIB, 1).is_err(), "past the device: refused after the retry");
    p.empty_device_cache();
    assert_eq!((p.source().staged_bytes(), p.stats().offload_host_bytes as u64), (kept, kept), "the host copy stays, counted");
    sleep(&p, true).unwrap();
    assert_eq!(p.source().staged_bytes(), kept, "the sleep copied into the kept memory, making none");
    p.wake().unwrap();
    assert_eq!(p.source().read(block), Some(b"kept".to_vec()));
    p.free(block).unwrap();
    p.empty_cache();
    assert_eq!((p.source().staged_bytes(), p.stats().offload_host_bytes), (0, 0), "empty_cache gave it back");
    check(&p);
}

/// #60's race: a sleep of a fresh pool and an allocation on a stream new to it, at
/// once. Whatever wins, a pool that says it sleeps maps nothing.
#[test]
fn an_allocation_on_a_new_stream_never_slips_through_a_sleep() {
    use std::sync::Barrier;
    let rounds = 1500;
    let start = Barrier::new(2);
    let current: Mutex<Option<Arc<Allocator>>> = Mutex::default();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for round in 0..rounds {
                start.wait();
                let p = current.lock().unwrap().clone().unwrap();
                let _ = p.malloc(MIB, 1000 + round);
                start.wait();
            }
        });
        for _ in 0..rounds {
            let p = Arc::new(expandable(64 * GIB));
            *current.lock().unwrap() = Some(p.clone());
            start.wait();
            sleep(&p, false).expect("a sleep with nothing exported succeeds");
            start.wait();
            check(&p);
            assert_eq!(p.source().mapped_bytes(), 0, "asleep with memory mapped");
            assert_eq!(p.stats().reserved_bytes.all.current, 0);
            p.wake().unwrap();
            check(&p);
        }
    });
}

/// #60: while a sleep waits for the device, the pool's statistics, whether it sleeps
/// and frees of its blocks answer at once (a host function the device runs may call
/// them), and the sleep then completes with every byte kept.
#[test]
fn a_sleep_waiting_for_the_device_blocks_no_statistics_or_free() {
    use super::super::host::Gate;
    use std::sync::mpsc;
    use std::time::Duration;
    let p = Arc::new(expandable(64 * GIB));
    let live = fill(&p, &mut Rng(30));
    let gate = Gate::shut();
    p.source().hold_synchronize(gate.clone());
    let sleeper = {
        let p = p.clone();
        std::thread::spawn(move || sleep(&p, true))
    };
    while gate.waiting() == 0 {
        std::thread::yield_now();
    }
    assert!(p.malloc(KIB, 1).is_err(), "allocations are refused from the sleep's start");
    let (done, answered) = mpsc::channel();
    let (freed, _) = live[0];
    {
        let p = p.clone();
        std::thread::spawn(move || {
            let stats = p.stats();
            let mode = p.sleep_mode();
            let free = p.free(freed);
            done.send((stats.allocated_bytes.all.current, mode, free.is_ok())).unwrap();
        });
    }
    let (allocated, mode, free) = answered.recv_timeout(Duration::from_secs(10)).expect("statistics, sleep_mode and free waited for the sleep");
    assert!(allocated > 0 && mode.is_none() && free, "during the sleep: {allocated} bytes allocated, mode {mode:?}, free {free}");
    gate.open();
    sleeper.join().unwrap().unwrap();
    assert_eq!(p.sleep_mode(), Some(true));
    assert_eq!(p.source().mapped_bytes(), 0);
    p.wake().unwrap();
    check(&p);
    assert_contents(&p, &live[1..]);
}

/// Threads allocating, writing, freeing and reading statistics on several streams
/// while another sleeps and wakes the pool (offload and discard in turn): every
/// invariant holds at the end, each offload brings back every live block's bytes, and
/// nothing is left mapped while the pool sleeps.
#[test]
fn sleep_and_wake_under_threads_keep_every_block_and_figure() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let p = Arc::new(expandable(64 * GIB));
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let (p, stop) = (p.clone(), &stop);
            scope.spawn(move || {
                let mut rng = Rng(40 + t);
                let mut mine: Vec<u64> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if rng.below(2) == 0 || mine.is_empty() {
                        if let Ok(addr) = p.malloc(rng.log_uniform(512, 8 * MIB), 1 + rng.below(6)) {
                            mine.push(addr);
                        }
                    } else {
                        let addr = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                        p.free(addr).unwrap();
                    }
                    if rng.below(50) == 0 {
                        let s = p.stats();
                        assert!(s.allocated_bytes.all.current >= 0 && s.asleep_bytes >= 0);
                    }
                }
                for addr in mine {
                    p.free(addr).unwrap();
                }
            });
        }
        let mut rng = Rng(50);
        for cycle in 0..300 {
            let offload = cycle % 2 == 0;
            sleep(&p, offload).unwrap();
            assert_eq!(p.sleep_mode(), Some(offload));
            assert_eq!(p.source().mapped_bytes(), 0, "cycle {cycle}: memory mapped while asleep");
            if rng.below(4) == 0 {
                std::thread::yield_now();
            }
            p.wake().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    check(&p);
    assert_eq!(p.stats().allocated_bytes.all.current, 0);
    p.empty_cache();
    assert_eq!(p.source().mapped_bytes(), 0);
    assert_eq!(p.source().staged_bytes(), 0);
}

/// A sleep prepared ahead makes no host memory of its own: the prepared memory (the
/// live bytes and an eighth more) serves it, counted from the preparation on, and a
/// second preparation with enough kept makes none.
#[test]
fn a_prepared_sleep_uses_the_host_memory_made_ahead() {
    let p = expandable(64 * GIB);
    let blocks: Vec<u64> = (0..4).map(|_| p.malloc(32 * MIB, 1).unwrap()).collect();
    for (i, &addr) in blocks.iter().enumerate() {
        p.source().write(addr, &[i as u8 + 7; 8]);
    }
    let made = p.prepare_sleep().unwrap();
    assert_eq!(made, (128 * MIB + 16 * MIB).next_multiple_of(2 * MIB), "the live bytes and an eighth more");
    assert_eq!((p.source().staged_bytes(), p.stats().offload_host_bytes as u64), (made, made), "made and counted");
    assert_eq!(p.prepare_sleep().unwrap(), 0, "enough is kept already");
    sleep(&p, true).unwrap();
    assert_eq!(p.source().staged_bytes(), made, "the sleep made none of its own");
    assert!(p.prepare_sleep().unwrap_err().message.contains("asleep"));
    p.wake().unwrap();
    for (i, &addr) in blocks.iter().enumerate() {
        assert_eq!(p.source().read(addr), Some(vec![i as u8 + 7; 8]));
    }
    check(&p);
}
