//! Blocks promised read-only (`gpurt_mem_read_only`): an offload copies them once, and
//! later offloads keep that copy while the promise holds, copying only the other live
//! blocks; every way the promise ends (taken back, a new allocation, a discarding sleep,
//! host memory given back or too small) makes the next offload copy them again.

use super::sleep::{assert_contents, sleep};
use super::*;

/// A block of `size` on stream 1 holding `contents`.
fn written(p: &Allocator, size: u64, contents: &[u8]) -> u64 {
    let addr = p.malloc(size, 1).unwrap();
    p.source().write(addr, contents);
    addr
}

fn read_only(p: &Allocator, addr: u64, promise: bool) {
    p.try_set_read_only(addr, promise).expect("a block of the pool").unwrap();
}

/// Sleeps with offload and wakes: the bytes the sleep copied.
fn offload_and_wake(p: &Allocator) -> u64 {
    let before = p.source().copied_out();
    sleep(p, true).unwrap();
    let copied = p.source().copied_out() - before;
    p.wake().unwrap();
    check(p);
    copied
}

#[test]
fn later_offloads_keep_the_copy_of_read_only_blocks_and_copy_the_rest() {
    let p = expandable(64 * GIB);
    let weights = written(&p, 100 * MIB, b"weights");
    read_only(&p, weights, true);
    let cache = written(&p, 20 * MIB, b"cache 1");
    assert_eq!(offload_and_wake(&p), 120 * MIB, "the first offload copies everything");
    for round in 2..5u8 {
        let bytes = [b'c', round];
        p.source().write(cache, &bytes);
        read_only(&p, weights, true); // a repeated promise keeps the copy
        assert_eq!(offload_and_wake(&p), 20 * MIB, "round {round}: the weights stay in host memory");
        assert_contents(&p, &[(weights, b"weights".to_vec()), (cache, bytes.to_vec())]);
        assert_eq!(p.stats().offload_host_bytes as u64, 120 * MIB, "one host copy of both");
    }
}

/// A promise taken back before a write, and given again, is copied again; so is the
/// promise on a block allocated where a promised one was freed.
#[test]
fn a_new_promise_is_copied_again() {
    let p = expandable(64 * GIB);
    let weights = written(&p, 64 * MIB, b"v1");
    read_only(&p, weights, true);
    let other = written(&p, 8 * MIB, b"other");
    assert_eq!(offload_and_wake(&p), 72 * MIB);
    read_only(&p, weights, false);
    p.source().write(weights, b"v2");
    read_only(&p, weights, true);
    assert_eq!(offload_and_wake(&p), 72 * MIB, "a new promise: copied");
    assert_contents(&p, &[(weights, b"v2".to_vec()), (other, b"other".to_vec())]);
    assert_eq!(offload_and_wake(&p), 8 * MIB, "and kept from then on");
    assert_contents(&p, &[(weights, b"v2".to_vec())]);

    p.free(weights).unwrap();
    let again = p.malloc(64 * MIB, 1).unwrap();
    assert_eq!(again, weights, "the same range, a new allocation");
    p.source().write(again, b"v3");
    assert_eq!(offload_and_wake(&p), 72 * MIB, "the promise ended with the allocation");
    read_only(&p, again, true);
    assert_eq!(offload_and_wake(&p), 72 * MIB, "promised after the last offload: copied once more");
    assert_eq!(offload_and_wake(&p), 8 * MIB);
    assert_contents(&p, &[(again, b"v3".to_vec()), (other, b"other".to_vec())]);
}

/// A discarding sleep drops the contents, so the owner writes them again after the
/// wake; an `empty_cache` gives the host copy back; a discard mark replaces the promise.
#[test]
fn a_discarding_sleep_empty_cache_or_a_discard_mark_end_the_copy() {
    let p = expandable(64 * GIB);
    let weights = written(&p, 32 * MIB, b"v1");
    read_only(&p, weights, true);
    assert_eq!(offload_and_wake(&p), 32 * MIB);
    sleep(&p, false).unwrap();
    p.wake().unwrap();
    assert_eq!(p.source().read(weights), None, "dropped");
    p.source().write(weights, b"v2");
    assert_eq!(offload_and_wake(&p), 32 * MIB, "copied again after the discarding sleep");
    assert_contents(&p, &[(weights, b"v2".to_vec())]);
    assert_eq!(offload_and_wake(&p), 0, "kept");
    p.empty_cache();
    assert_eq!(offload_and_wake(&p), 32 * MIB, "empty_cache gave the copy back");
    p.try_set_discard_on_sleep(weights, true).unwrap().unwrap();
    sleep(&p, true).unwrap();
    p.wake().unwrap();
    assert_eq!(p.source().read(weights), None, "the discard mark replaced the promise");
    check(&p);
}

/// Ranges that do not fit in the room around the kept copies are all copied again, into
/// the kept host memory where the total fits, else into new memory.
#[test]
fn ranges_that_do_not_fit_around_the_kept_copies_are_all_copied_again() {
    let p = expandable(64 * GIB);
    let a = p.malloc(20 * MIB, 1).unwrap();
    let b = p.malloc(10 * MIB, 1).unwrap();
    let c = p.malloc(20 * MIB, 1).unwrap();
    let d = p.malloc(10 * MIB, 1).unwrap();
    for (addr, bytes) in [(a, b"a"), (b, b"b"), (c, b"c"), (d, b"d")] {
        p.source().write(addr, bytes);
    }
    read_only(&p, a, true);
    read_only(&p, c, true);
    assert_eq!(offload_and_wake(&p), 60 * MIB);
    let fresh = p.source().fresh_offloads();
    // Room of 10 MiB after a and after c: a 16 MiB block fits in neither.
    p.free(b).unwrap();
    p.free(d).unwrap();
    let e = written(&p, 16 * MIB, b"e");
    assert_eq!(offload_and_wake(&p), 56 * MIB, "everything copied again");
    assert_eq!(p.source().fresh_offloads(), fresh, "into the kept host memory");
    assert_contents(&p, &[(a, b"a".to_vec()), (c, b"c".to_vec()), (e, b"e".to_vec())]);
    assert_eq!(offload_and_wake(&p), 16 * MIB, "a and c kept again");
    // More than the kept memory holds: new memory, everything copied.
    let f = written(&p, 40 * MIB, b"f");
    assert_eq!(offload_and_wake(&p), 96 * MIB);
    assert_eq!(p.source().fresh_offloads(), fresh + 1);
    assert_contents(&p, &[(a, b"a".to_vec()), (c, b"c".to_vec()), (e, b"e".to_vec()), (f, b"f".to_vec())]);
}

/// Random allocations, frees, promises given and taken back (a write in between),
/// writes and sleeps of both kinds: after every offload's wake each live block holds
/// what was last written to it, and the offloads that keep copies copy less.
#[test]
fn random_promises_writes_and_sleeps_keep_every_block_s_contents() {
    let p = expandable(64 * GIB);
    let mut rng = Rng(std::env::var("GPURT_TEST_SEED").map_or(31, |s| s.parse().unwrap()));
    // (address, contents, promised)
    let mut live: Vec<(u64, Vec<u8>, bool)> = Vec::new();
    let (mut offloads, mut partial) = (0, 0);
    for step in 0..4000u32 {
        let contents = step.to_le_bytes().to_vec();
        match rng.below(100) {
            0..=3 => {
                let offload = rng.below(4) != 0;
                let before = p.source().copied_out();
                if offload && rng.below(4) == 0 {
                    // A copy fails part way: the pool stays awake, whole, and what its
                    // host memory holds is in doubt from then on.
                    p.source().fail_on("offload", rng.below(4) as u32);
                    let failed = sleep(&p, true).is_err();
                    p.source().fail_nothing();
                    assert_eq!(p.sleep_mode().is_none(), failed);
                    if !failed {
                        p.wake().unwrap();
                    }
                    let expected: Vec<(u64, Vec<u8>)> = live.iter().map(|(a, c, _)| (*a, c.clone())).collect();
                    assert_contents(&p, &expected);
                    continue;
                }
                sleep(&p, offload).unwrap();
                let (copied, kept) = (p.source().copied_out() - before, p.stats().offloaded_bytes as u64);
                p.wake().unwrap();
                if offload {
                    let expected: Vec<(u64, Vec<u8>)> = live.iter().map(|(a, c, _)| (*a, c.clone())).collect();
                    assert_contents(&p, &expected);
                    offloads += 1;
                    partial += (copied < kept) as u32;
                } else {
                    for (addr, bytes, _) in &live {
                        p.source().write(*addr, bytes);
                    }
                }
            }
            4..=39 => {
                let addr = p.malloc(rng.log_uniform(512, 24 * MIB), 1 + rng.below(2)).unwrap();
                p.source().write(addr, &contents);
                let promised = rng.below(2) == 0;
                if promised {
                    read_only(&p, addr, true);
                }
                live.push((addr, contents, promised));
            }
            40..=59 if !live.is_empty() => {
                let (addr, _, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
                p.free(addr).unwrap();
            }
            60..=99 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                let (addr, old, promised) = &mut live[i];
                if *promised {
                    read_only(&p, *addr, false);
                }
                p.source().write(*addr, &contents);
                *old = contents;
                *promised = rng.below(2) == 0;
                if *promised {
                    read_only(&p, *addr, true);
                }
            }
            _ => {}
        }
        if step % 200 == 0 {
            check(&p);
        }
    }
    assert!(offloads > 50 && partial > offloads / 4, "{partial} of {offloads} offloads kept a copy");
}

/// An offload that fails part way may have copied over a kept copy whose range it did
/// not keep (a promised block joined by a promised neighbour): once the neighbour is
/// freed, the next offload must copy the block again, not trust the kept place.
#[test]
fn a_failed_offload_leaves_no_doubtful_copy_behind() {
    let p = expandable(64 * GIB);
    let v = p.malloc(8 * MIB, 1).unwrap();
    let x = p.malloc(8 * MIB, 1).unwrap();
    let hole = p.malloc(8 * MIB, 1).unwrap();
    let u = p.malloc(8 * MIB, 1).unwrap();
    let t = p.malloc(8 * MIB, 1).unwrap();
    p.free(hole).unwrap();
    for (addr, bytes) in [(v, b"v"), (x, b"x"), (u, b"u"), (t, b"t")] {
        p.source().write(addr, bytes);
    }
    read_only(&p, x, true);
    assert_eq!(offload_and_wake(&p), 32 * MIB, "v, x, u and t, one after another");
    // v shrinks, t goes, and y fills the hole after x: x and y are one range now,
    // placed over x's kept copy, and the copy of u after them fails.
    p.free(v).unwrap();
    let v = p.malloc(4 * MIB, 1).unwrap();
    p.free(t).unwrap();
    let y = p.malloc(8 * MIB, 1).unwrap();
    assert_eq!(y, hole, "y lies right after x");
    read_only(&p, y, true);
    for (addr, bytes) in [(v, b"V"), (y, b"y")] {
        p.source().write(addr, bytes);
    }
    p.source().fail_on("offload", 2);
    sleep(&p, true).unwrap_err();
    check(&p);
    p.free(y).unwrap();
    offload_and_wake(&p);
    assert_contents(&p, &[(v, b"V".to_vec()), (x, b"x".to_vec()), (u, b"u".to_vec())]);
}
