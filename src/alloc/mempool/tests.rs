use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::*;
use crate::alloc::host::{HostSource, XorShift};
use crate::error::Status;

const MIB: u64 = 1 << 20;

fn config(text: &str) -> AllocConfig {
    AllocConfig::parse(text).unwrap()
}

fn current(stats: &gpurt_memory_stats_t) -> [i64; 4] {
    [stats.allocation.all.current, stats.allocated_bytes.all.current, stats.reserved_bytes.all.current, stats.segment.all.current]
}

/// An allocation as `alloc::device::malloc` routes it: the topmost pushed pool for
/// the device, else the default pool.
fn routed_malloc(stack: &PoolStack<HostSource>, default: &CachingAllocator<HostSource>, device: i32, size: u64, stream: u64) -> u64 {
    match stack.route(device, size, stream) {
        Some(pool) => pool.allocator().malloc(size, stream).unwrap(),
        None => default.malloc(size, stream).unwrap(),
    }
}

#[test]
fn pushed_pools_route_each_threads_allocations_and_frees_find_them_from_the_pointer() {
    static ROUTED: AtomicUsize = AtomicUsize::new(0);
    let pools = Arc::new(MemPools::<HostSource>::default());
    let defaults: Arc<[CachingAllocator<HostSource>; 2]> =
        Arc::new([(); 2].map(|_| CachingAllocator::new(HostSource::new(1 << 40), AllocConfig::default())));
    let shared = pools.create(0, HostSource::new(1 << 40), AllocConfig::default(), 0);
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (pools, defaults, shared) = (pools.clone(), defaults.clone(), shared.clone());
            std::thread::spawn(move || {
                let own = pools.create(0, HostSource::new(1 << 40), AllocConfig::default(), 0);
                let other_device = pools.create(1, HostSource::new(1 << 40), AllocConfig::default(), 0);
                let mut stack = PoolStack::new(&ROUTED);
                let mut rng = XorShift(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                let mut live: Vec<(u64, i32, u64)> = Vec::new(); // (address, device, id of the pool expected: 0 default)
                for i in 0..crate::test_iterations(3000) {
                    match rng.below(10) {
                        0 if stack.routes.len() < 6 => {
                            let route = match rng.below(4) {
                                0 => Route::Default(0),
                                1 => Route::Pool(shared.clone()),
                                2 => Route::Pool(other_device.clone()),
                                _ => Route::Pool(own.clone()),
                            };
                            stack.push(route);
                        }
                        1 if !stack.is_empty() => stack.pop().unwrap(),
                        2..=5 if !live.is_empty() => {
                            let (addr, device, expected) = live.swap_remove(rng.below(live.len() as u64) as usize);
                            let found = pools.find_map(addr, |p| {
                                p.allocator().try_free(addr).map(|freed| {
                                    freed.unwrap();
                                    p.id()
                                })
                            });
                            match found {
                                Some(id) => assert_eq!(id, expected, "the block was found in another pool"),
                                None => {
                                    assert_eq!(expected, 0, "a pool's block was not found from its pointer");
                                    defaults[device as usize].free(addr).unwrap();
                                }
                            }
                        }
                        _ => {
                            let device = rng.below(2) as i32;
                            let (size, stream) = (rng.log_uniform(1, 4 * MIB), 7 + t * 2 + i % 2 * 64);
                            let expected = stack.route(device, size, stream).map_or(0, MemPool::id);
                            let addr = routed_malloc(&stack, &defaults[device as usize], device, size, stream);
                            live.push((addr, device, expected));
                        }
                    }
                }
                for (addr, device, expected) in live {
                    pools.find_map(addr, |p| p.allocator().try_free(addr)).map(Result::unwrap).unwrap_or_else(|| {
                        assert_eq!(expected, 0);
                        defaults[device as usize].free(addr).unwrap();
                    });
                }
                drop(stack); // a thread's stack goes with it: its pools are no longer pushed
                for pool in [own, other_device] {
                    assert_eq!(pool.allocator().stats().allocation.all.current, 0);
                    pools.destroy(pool.id()).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(ROUTED.load(Ordering::Relaxed), 0, "every thread's entries were counted out");
    for default in defaults.iter() {
        assert_eq!(default.stats().allocation.all.current, 0);
        default.check_invariants().unwrap();
    }
    shared.allocator().check_invariants().unwrap();
    assert!(shared.allocator().stats().allocation.all.allocated > 0, "the shared pool served allocations");
    let mut device0 = gpurt_memory_stats_t::new();
    pools.add_stats(0, &mut device0);
    let mut device1 = gpurt_memory_stats_t::new();
    pools.add_stats(1, &mut device1);
    assert_eq!(device0.allocation.all.current + device1.allocation.all.current, 0);
    assert!(device1.allocation.all.allocated > 0, "destroyed pools' totals stay with their device");
    pools.destroy(shared.id()).unwrap();
    assert!(pools.is_empty());
}

#[test]
fn a_pools_limit_refuses_past_it_and_changes_nothing() {
    let pools = MemPools::<HostSource>::default();
    // Requests of 10 MiB and more take segments of their own size (rounded to 2 MiB).
    let pool = pools.create(0, HostSource::new(1 << 40), AllocConfig::default(), 64 * MIB);
    let a = pool.allocator().malloc(30 * MIB, 1).unwrap();
    let before = pool.allocator().stats();
    let err = pool.allocator().malloc(40 * MIB, 1).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
    assert!(err.message.contains("limit"), "{}", err.message);
    let after = pool.allocator().stats();
    assert_eq!(current(&after), current(&before), "a refused allocation changes no current figure");
    assert_eq!(after.num_ooms, before.num_ooms + 1);
    let b = pool.allocator().malloc(34 * MIB, 1).unwrap();
    assert_eq!(pool.usage(), PoolUsage { used: 64 * MIB, free: 0, total: 64 * MIB, free_blocks: 0 });
    pool.allocator().free(b).unwrap();
    assert_eq!(pool.usage(), PoolUsage { used: 30 * MIB, free: 34 * MIB, total: 64 * MIB, free_blocks: 1 });
    pool.allocator().free(a).unwrap();
    pool.allocator().check_invariants().unwrap();
}

#[test]
fn a_pool_with_live_allocations_pushed_or_kept_by_graphs_is_not_destroyed() {
    static ROUTED: AtomicUsize = AtomicUsize::new(0);
    let pools = MemPools::<HostSource>::default();
    let pool = pools.create(0, HostSource::new(1 << 40), AllocConfig::default(), 0);
    let blocks: Vec<u64> = (0..3).map(|i| pool.allocator().malloc((i + 1) * 1000, 1).unwrap()).collect();
    let err = pools.destroy(pool.id()).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    assert!(err.message.contains("3 live allocation"), "{}", err.message);
    for &b in &blocks {
        assert!(pools.find_map(b, |p| p.allocator().holds(b).then_some(())).is_some(), "a refused destroy leaves every block findable");
    }
    blocks.into_iter().for_each(|b| pool.allocator().free(b).unwrap());
    let claim = pool.allocator().keep_mapped(); // a graph captured into it in stream order
    let err = pools.destroy(pool.id()).unwrap_err();
    assert!(err.message.contains("1 graph(s) or exec(s)"), "{}", err.message);
    drop(claim);
    let mut stack = PoolStack::new(&ROUTED);
    stack.push(Route::Pool(pool.clone()));
    assert!(pools.destroy(pool.id()).unwrap_err().message.contains("pushed"));
    stack.pop().unwrap();
    assert!(stack.pop().is_err(), "a pop with nothing pushed is an error");
    pools.destroy(pool.id()).unwrap();
    assert_eq!(pool.allocator().source().live_segments(), 0, "a destroyed pool's segments went back");
    assert_eq!(pools.destroy(pool.id()).unwrap_err().status, Status::GPURT_ERROR_INVALID_HANDLE);
    assert!(pools.get(pool.id()).is_none());
}

#[test]
fn each_pool_keeps_its_own_configuration_and_out_of_memory_is_clean() {
    let pools = MemPools::<HostSource>::default();
    let expandable = pools.create(0, HostSource::new(1 << 40), config("expandable_segments:True"), 0);
    let plain = pools.create(0, HostSource::new(64 * MIB), AllocConfig::segmented(), 0);
    let a = expandable.allocator().malloc(3 * MIB, 1).unwrap();
    let b = expandable.allocator().malloc(3 * MIB, 1).unwrap();
    assert_eq!(b, a + 3 * MIB, "an expandable pool's blocks are contiguous");
    assert_eq!(expandable.allocator().source().mapped_bytes(), 20 * MIB, "the first block's granules, then to the page's end");
    let c = plain.allocator().malloc(3 * MIB, 1).unwrap();
    assert_eq!(plain.allocator().source().mapped_bytes(), 0, "the other pool keeps plain segments");
    let mappings = |pool: &Arc<MemPool<HostSource>>, addr| pool.allocator().try_place(addr).unwrap().unwrap().mappings;
    assert_eq!(mappings(&expandable, a), [(a, 4 * MIB)], "an IPC export shares the mappings a block lies on");
    assert_eq!(mappings(&expandable, b), [(a, 4 * MIB), (a + 4 * MIB, 16 * MIB)], "a block across two mappings lies on both");
    assert!(mappings(&plain, c).is_empty(), "a plain segment has no mappings");
    let before = plain.allocator().stats();
    let err = plain.allocator().malloc(100 * MIB, 1).unwrap_err();
    assert_eq!(err.status, Status::GPURT_ERROR_OUT_OF_MEMORY);
    assert_eq!(current(&plain.allocator().stats()), current(&before));
    assert_eq!(current(&expandable.allocator().stats())[0], 2, "another pool's failure touches nothing of this one");
    for (pool, addr) in [(&expandable, a), (&expandable, b), (&plain, c)] {
        pool.allocator().free(addr).unwrap();
        pool.allocator().check_invariants().unwrap();
    }
}

unsafe extern "C" fn large_only(size: usize, _device: libc::c_int, _stream: *mut libc::c_void, threshold: *mut libc::c_void) -> libc::c_int {
    (size >= threshold as usize) as libc::c_int
}

#[test]
fn a_filtered_entry_takes_what_its_filter_accepts_and_passes_the_rest_down() {
    static ROUTED: AtomicUsize = AtomicUsize::new(0);
    let pools = MemPools::<HostSource>::default();
    let (outer, large) = (pools.create(0, HostSource::new(1 << 40), AllocConfig::default(), 0), pools.create(0, HostSource::new(1 << 40), AllocConfig::default(), 0));
    let mut stack = PoolStack::new(&ROUTED);
    stack.push(Route::Pool(outer.clone()));
    assert_eq!(stack.top_plain().map(|p| p.id()), Some(outer.id()), "a plain top is the fast path's pool");
    stack.push(Route::Filtered(large.clone(), Filter { accepts: large_only, context: MIB as usize }));
    assert_eq!(stack.route(0, 2 * MIB, 1).map(MemPool::id), Some(large.id()), "accepted: the filtered pool");
    assert_eq!(stack.route(0, 4096, 1).map(MemPool::id), Some(outer.id()), "declined: the entry below");
    assert!(stack.top_plain().is_none(), "a filtered top is not the fast path's pool: frees find its blocks through the pool list");
    assert!(pools.destroy(large.id()).unwrap_err().message.contains("pushed"), "a filtered entry counts as pushed");
    stack.push(Route::Default(0));
    assert!(stack.route(0, 2 * MIB, 1).is_none(), "a pushed default pool ends the search");
    assert!(stack.route(1, 2 * MIB, 1).is_none(), "another device: the default pool");
    for _ in 0..3 {
        stack.pop().unwrap();
    }
    assert_eq!(ROUTED.load(Ordering::Relaxed), 0);
    pools.destroy(large.id()).unwrap();
    pools.destroy(outer.id()).unwrap();
}
