//! Sleeps another process asked for (a share group's, `sleep_on_request`): the pool's
//! next allocation or touch wakes it, and uses racing the sleeps are all served.

use super::sleep::{assert_contents, fill, sleep};
use super::*;
use crate::error::Error;

/// A sleep another process asked for (a share group's): the pool's next allocation
/// wakes it, its contents back with offload; a refused one leaves nothing behind, and a
/// later sleep of the owner's own refuses allocations as before.
#[test]
fn a_pool_slept_on_request_wakes_at_its_next_allocation() {
    for offload in [true, false] {
        let p = expandable(64 * GIB);
        let live = fill(&p, &mut Rng(11));
        p.sleep_on_request(offload, || Ok(())).unwrap();
        assert_eq!((p.source().mapped_bytes(), p.sleep_mode()), (0, Some(offload)));
        let woken = p.malloc(4 * KIB, 1).unwrap();
        assert_eq!(p.sleep_mode(), None, "woken by the allocation");
        if offload {
            assert_contents(&p, &live);
        }
        p.free(woken).unwrap();
        check(&p);
        let refused = p.sleep_on_request(offload, || Err(crate::error::Error::invalid_argument("used meanwhile"))).unwrap_err();
        assert!(refused.message.contains("used meanwhile"), "{}", refused.message);
        assert_eq!(p.sleep_mode(), None);
        sleep(&p, offload).unwrap();
        assert!(p.malloc(4 * KIB, 1).is_err(), "the owner's own sleep refuses allocations");
        p.wake().unwrap();
        check(&p);
    }
}

/// A touch (work about to use the pool's memory) counts as a use, so that a sleep on
/// request admitted by the activity seen before it is refused, and wakes a pool slept
/// on request, its contents back with offload; a pool its owner put to sleep refuses it
/// and stays asleep.
#[test]
fn a_touch_counts_as_a_use_and_wakes_a_pool_slept_on_request() {
    for offload in [true, false] {
        let p = expandable(64 * GIB);
        let live = fill(&p, &mut Rng(13));
        let seen = p.activity();
        p.touch().unwrap();
        assert_eq!(p.activity(), seen.wrapping_add(1));
        let p = &p;
        let unused = |seen: u64| move || if p.activity() == seen { Ok(()) } else { Err(Error::invalid_argument("used since")) };
        assert!(p.sleep_on_request(offload, unused(seen)).unwrap_err().message.contains("used since"));
        assert_eq!((p.sleep_mode(), p.refuses_allocations()), (None, false), "the refused sleep left it awake");
        p.sleep_on_request(offload, unused(p.activity())).unwrap();
        assert_eq!(p.source().mapped_bytes(), 0);
        p.touch().unwrap();
        assert_eq!((p.sleep_mode(), p.refuses_allocations()), (None, false), "woken by the touch");
        if offload {
            assert_contents(p, &live);
        }
        sleep(p, offload).unwrap();
        assert!(p.touch().unwrap_err().message.contains("asleep"));
        assert_eq!(p.sleep_mode(), Some(offload), "the owner's sleep stands");
        p.wake().unwrap();
        check(p);
    }
}

/// Allocations and touches from several threads while sleeps on request come and go:
/// each one is served (waiting for a sleep under way, then waking the pool), and the
/// blocks kept through it all keep their bytes.
#[test]
fn allocations_and_touches_during_sleeps_on_request_are_all_served() {
    let p = Arc::new(expandable(64 * GIB));
    let live = fill(&p, &mut Rng(12));
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let p = p.clone();
            s.spawn(move || {
                let mut rng = Rng(100 + t);
                for _ in 0..300 {
                    if t % 2 == 0 {
                        let addr = p.malloc(rng.log_uniform(512, 8 * MIB), 1 + t).unwrap();
                        p.free(addr).unwrap();
                    } else {
                        p.touch().unwrap();
                    }
                }
            });
        }
        for _ in 0..30 {
            // Refused only as "already asleep", when no use came since the last one.
            if let Err(e) = p.sleep_on_request(true, || Ok(())) {
                assert!(e.message.contains("already asleep"), "{}", e.message);
            }
            std::thread::yield_now();
        }
    });
    if p.sleep_mode().is_some() {
        p.wake().unwrap();
    }
    assert_contents(&p, &live);
    check(&p);
}

/// A pool a share group keeps asleep gives its addresses and offloaded copy back without
/// waking, once it holds no live block (a pool destroyed meanwhile), and serves again
/// after; while it holds one, or while its owner put it to sleep, that is refused and it
/// stays asleep.
#[test]
fn a_pool_slept_on_request_gives_everything_back_without_waking() {
    for offload in [true, false] {
        let p = expandable(64 * GIB);
        let live = fill(&p, &mut Rng(14));
        p.sleep_on_request(offload, || Ok(())).unwrap();
        assert!(p.release_asleep().unwrap_err().message.contains("live blocks"));
        assert_eq!(p.sleep_mode(), Some(offload), "refused: still asleep");
        for (addr, _) in &live {
            p.free(*addr).unwrap();
        }
        p.release_asleep().unwrap();
        assert_eq!((p.sleep_mode(), p.refuses_allocations()), (None, false));
        let s = p.stats();
        assert_eq!((p.source().mapped_bytes(), p.source().live_segments(), p.source().staged_bytes()), (0, 0, 0), "nothing mapped, reserved or staged");
        assert_eq!((s.asleep_bytes, s.offloaded_bytes, s.offload_host_bytes, s.reserved_bytes.all.current), (0, 0, 0, 0));
        check(&p);
        let again = p.malloc(3 * MIB, 1).unwrap();
        p.free(again).unwrap();
        check(&p);
        sleep(&p, offload).unwrap();
        assert!(p.release_asleep().unwrap_err().message.contains("asleep"), "the owner's own sleep");
        p.wake().unwrap();
        check(&p);
    }
}

/// Random allocations, frees (at times of everything), touches, sleeps on request and
/// releases while asleep:
/// every wake brings back the offloaded bytes, and every invariant holds throughout.
#[test]
fn random_operations_with_sleeps_on_request_keep_every_invariant() {
    let p = expandable(64 * GIB);
    let mut rng = Rng(15);
    let mut live: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut released = 0;
    for step in 0..3000u32 {
        let asleep = p.sleep_mode();
        match rng.below(100) {
            0..=2 if asleep.is_none() => p.sleep_on_request(rng.below(2) == 0, || Ok(())).unwrap(),
            3..=6 => {
                let release = rng.below(2) == 0;
                match if release { p.release_asleep() } else { p.touch() } {
                    Ok(()) => released += (release && asleep.is_some()) as u32,
                    Err(e) => assert!(e.message.contains("live blocks"), "{}", e.message),
                }
            }
            7..=8 => live.drain(..).for_each(|(addr, _)| p.free(addr).unwrap()),
            9..=54 => {
                let addr = p.malloc(rng.log_uniform(512, 16 * MIB), 1 + rng.below(3)).unwrap();
                p.source().write(addr, &step.to_le_bytes());
                live.push((addr, step.to_le_bytes().to_vec()));
            }
            55..=99 if !live.is_empty() => {
                let (addr, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
                p.free(addr).unwrap();
            }
            _ => {}
        }
        match (asleep, p.sleep_mode()) {
            (Some(true), None) => assert_contents(&p, &live),
            (Some(false), None) => live.iter().for_each(|(addr, bytes)| p.source().write(*addr, bytes)),
            _ => {}
        }
        if step % 50 == 0 {
            check(&p);
        }
    }
    check(&p);
    assert!(released > 0, "no release while asleep happened");
}
