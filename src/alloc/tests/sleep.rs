//! Sleep and wake on the host segment source: memory unmapped and mapped again at the
//! same addresses, contents kept with offload and dropped without, allocations
//! refused and frees served while asleep, and every failure of every source call
//! leaving the allocator wholly awake or wholly asleep, nothing lost, retryable.

use super::*;

/// Blocks of varied sizes on two streams, each written with its own bytes; a third of
/// them freed again. The live blocks: (address, contents).
fn fill(p: &Allocator, rng: &mut Rng) -> Vec<(u64, Vec<u8>)> {
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

fn assert_contents(p: &Allocator, live: &[(u64, Vec<u8>)]) {
    for (addr, bytes) in live {
        assert_eq!(p.source().read(*addr).as_ref(), Some(bytes), "block {addr:#x} lost its contents");
    }
}

#[test]
fn offload_unmaps_everything_and_wake_brings_back_every_byte_at_its_address() {
    let p = expandable(64 * GIB);
    let live = fill(&p, &mut Rng(7));
    let mapped = p.source().mapped_bytes();
    p.sleep(true).unwrap();
    check(&p);
    assert_eq!(p.source().mapped_bytes(), 0, "every mapping went back");
    assert_eq!(p.stats().reserved_bytes.all.current, 0);
    assert_eq!(p.sleep_mode(), Some(true));
    let refused = p.malloc(4 * KIB, 1).unwrap_err();
    assert_eq!(refused.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert!(refused.message.contains("asleep"), "{}", refused.message);
    assert!(p.malloc(MIB, 99).is_err(), "a stream new to the pool is refused too");
    assert!(p.sleep(true).is_err(), "a second sleep is refused");
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

#[test]
fn discard_drops_the_contents_and_keeps_the_addresses() {
    let p = expandable(64 * GIB);
    let live = fill(&p, &mut Rng(8));
    p.sleep(false).unwrap();
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
    let refused = p.sleep(true).unwrap_err();
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
        for (operation, in_wake) in [("synchronize", false), ("offload", false), ("map", true), ("restore", true)] {
            if !offload && ["offload", "restore"].contains(&operation) {
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
                    p.sleep(offload).unwrap();
                }
                p.source().fail_on(operation, pass);
                let failed = if in_wake { p.wake() } else { p.sleep(offload) };
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
                    assert_contents(&p, &live);
                    p.sleep(offload).unwrap();
                    p.wake().unwrap();
                }
                check(&p);
                if offload {
                    assert_contents(&p, &live);
                }
                p.free(p.malloc(MIB, 2).unwrap()).unwrap();
            }
            assert!(failures > 1 || operation == "synchronize", "{operation}: only {failures} of its calls failed");
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
            0..=1 if p.sleep_mode().is_none() => p.sleep(rng.below(2) == 0).unwrap(),
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
    p.sleep(true).unwrap();
    let first = p.source().fresh_offloads();
    assert!(first > 0);
    p.wake().unwrap();
    p.sleep(true).unwrap();
    assert_eq!(p.source().fresh_offloads(), first, "the second sleep copied into the first one's host memory");
    p.wake().unwrap();
    assert_contents(&p, &live);
    p.empty_cache();
    p.sleep(true).unwrap();
    assert_eq!(p.source().fresh_offloads(), 2 * first, "empty_cache gave the host memory back");
    p.wake().unwrap();
    assert_contents(&p, &live);
    check(&p);
}
