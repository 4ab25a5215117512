//! Snapshots of host-memory allocators, recorded as device 7's history: the
//! structure, its agreement with the statistics, and the three encodings.

use super::*;
use crate::alloc::caching::CachingAllocator;
use crate::alloc::config::AllocConfig;
use crate::alloc::history::{self, annotate_pop, annotate_push, record_history, GPURT_HISTORY_CLEAR, GPURT_HISTORY_STACKS};
use crate::alloc::host::{HostSource, XorShift};
use crate::boundary::lock;

const DEVICE: i32 = 7;
const GIB: u64 = 1 << 30;

/// An allocator of whole segments, with `config`'s options over them.
fn allocator(config: &str) -> CachingAllocator<HostSource> {
    CachingAllocator::new(HostSource::new(4 * GIB).on_device(DEVICE), AllocConfig::segmented().with(config).unwrap())
}

fn snapshot_of(a: &CachingAllocator<HostSource>) -> Snapshot {
    let mut slots = Vec::new();
    let (segments, overwritten) = a.segment_views(&mut slots);
    let (events, dropped) = history::recorder(DEVICE).events(slots, overwritten);
    build(DEVICE, &[PoolPart { pool_id: (0, 0), allocator: a.id(), segments }], &events, dropped, history::is_on(), &a.stats())
}

fn actions(s: &Snapshot) -> Vec<&str> {
    s.device_traces[DEVICE as usize].iter().map(|e| e.action.as_str()).collect()
}

#[test]
fn a_pair_records_alloc_free_and_the_segment() {
    let _serial = lock(&history::TEST_SERIAL);
    let a = allocator("");
    record_history(true, 100, GPURT_HISTORY_CLEAR).unwrap();
    let p = a.malloc(1000, 5).unwrap();
    a.free(p).unwrap();
    a.empty_cache();
    record_history(false, 0, 0).unwrap();
    let s = snapshot_of(&a);
    assert_eq!(actions(&s), ["segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"]);
    let trace = &s.device_traces[DEVICE as usize];
    assert_eq!((trace[1].addr, trace[1].size, trace[1].stream), (p, 1000, 5));
    assert_eq!(trace[0].size, 2 << 20, "a small segment is 2 MiB");
    assert!(trace.windows(2).all(|w| w[1].seq == w[0].seq + 1 && w[1].time_us >= w[0].time_us));
    assert!(s.device_traces[..DEVICE as usize].iter().all(Vec::is_empty), "traces are indexed by device");
    assert!(s.segments.is_empty());
}

/// 8 threads on streams of their own (so on shards of their own): the merged
/// history is the newest `max_entries` events by time, each thread's in its order.
#[test]
fn shards_merge_into_one_ordered_bounded_history() {
    let _serial = lock(&history::TEST_SERIAL);
    let a = allocator("");
    record_history(true, 1000, GPURT_HISTORY_CLEAR).unwrap();
    std::thread::scope(|s| {
        for t in 1..=8u64 {
            let a = &a;
            s.spawn(move || {
                for i in 1..=2000u64 {
                    let p = a.malloc(512 * i, t).unwrap();
                    a.free(p).unwrap();
                }
            });
        }
    });
    record_history(false, 0, 0).unwrap();
    let s = snapshot_of(&a);
    let trace = &s.device_traces[DEVICE as usize];
    assert_eq!(trace.len(), 1000);
    assert!(s.gpurt.history_dropped > 8 * 2000 * 3 - 1000, "the older events are counted as dropped");
    assert!(trace.windows(2).all(|w| w[1].time_us >= w[0].time_us && w[1].seq == w[0].seq + 1));
    for t in 1..=8 {
        let allocs: Vec<u64> = trace.iter().filter(|e| e.stream == t && e.action == "alloc").map(|e| e.size).collect();
        assert!(allocs.windows(2).all(|w| w[1] > w[0]), "stream {t}'s allocations keep their order");
    }
}

#[test]
fn history_off_records_nothing() {
    let _serial = lock(&history::TEST_SERIAL);
    record_history(false, 0, GPURT_HISTORY_CLEAR).unwrap();
    let a = allocator("");
    let p = a.malloc(4096, 0).unwrap();
    a.free(p).unwrap();
    assert!(snapshot_of(&a).device_traces[DEVICE as usize].is_empty());
}

/// Random operations over two streams, deferred frees and expandable segments; the
/// snapshot's blocks must add up to the statistics, and every live block must carry
/// the annotation it was allocated under.
#[test]
fn segments_and_blocks_agree_with_the_statistics() {
    let _serial = lock(&history::TEST_SERIAL);
    for config in ["", "expandable_segments:True"] {
        let a = allocator(config);
        record_history(true, 100_000, GPURT_HISTORY_CLEAR).unwrap();
        let mut rng = XorShift(0x5eed_1234_abcd);
        let mut live: Vec<(u64, u64, String)> = Vec::new();
        for i in 0..3000 {
            if live.is_empty() || rng.below(5) < 3 {
                let size = rng.log_uniform(1, 64 << 20);
                let name = format!("step {}", i % 7);
                annotate_push(&name);
                let stream = 1 + rng.below(2);
                let p = a.malloc(size, stream).unwrap();
                annotate_pop().unwrap();
                if rng.below(10) == 0 {
                    a.record_stream(p, 9).unwrap();
                }
                live.push((p, size, name));
            } else {
                let (p, ..) = live.swap_remove(rng.below(live.len() as u64) as usize);
                a.free(p).unwrap();
            }
        }
        record_history(false, 0, 0).unwrap();
        let s = snapshot_of(&a);
        let stats = a.stats();
        let blocks = || s.segments.iter().flat_map(|seg| seg.blocks.iter());
        let sum = |state: &str| blocks().filter(|b| b.state == state).map(|b| b.size as i64).sum::<i64>();
        assert_eq!(sum("active_allocated"), stats.allocated_bytes.all.current, "{config}");
        assert_eq!(sum("active_allocated") + sum("active_pending_free"), stats.active_bytes.all.current, "{config}");
        assert_eq!(s.segments.iter().map(|seg| seg.total_size as i64).sum::<i64>(), stats.reserved_bytes.all.current, "{config}");
        assert_eq!(blocks().map(|b| b.requested_size as i64).sum::<i64>(), stats.requested_bytes.all.current, "{config}");
        assert_eq!((s.gpurt.allocated_bytes, s.gpurt.reserved_bytes), (stats.allocated_bytes.all.current, stats.reserved_bytes.all.current));
        for seg in &s.segments {
            assert_eq!(seg.blocks.iter().map(|b| b.size).sum::<u64>(), seg.total_size, "blocks tile their segment");
            assert!(seg.blocks.windows(2).all(|w| w[0].address + w[0].size == w[1].address));
            assert_eq!(seg.is_expandable, !config.is_empty());
        }
        assert!(blocks().any(|b| b.state == "active_pending_free"), "record_stream left frees waiting");
        for (p, size, name) in &live {
            let b = blocks().find(|b| b.address == *p).expect("a live block is in the snapshot");
            assert_eq!((b.state.as_str(), b.requested_size, b.annotation.as_deref()), ("active_allocated", *size, Some(name.as_str())));
        }
        let trace = &s.device_traces[DEVICE as usize];
        let maps = trace.iter().filter(|e| e.action == "segment_map").count();
        assert_eq!(maps > 0, !config.is_empty(), "expandable segments grow by mapping");
        assert_eq!(trace.iter().filter(|e| e.action == "alloc").count(), trace.iter().filter(|e| e.action == "free_requested").count() + live.len());
    }
}

#[test]
fn out_of_memory_is_in_the_history() {
    let _serial = lock(&history::TEST_SERIAL);
    let a = allocator("");
    record_history(true, 100, GPURT_HISTORY_CLEAR).unwrap();
    annotate_push("too big");
    assert!(a.malloc(8 * GIB, 0).is_err());
    annotate_pop().unwrap();
    record_history(false, 0, 0).unwrap();
    let s = snapshot_of(&a);
    let oom = s.device_traces[DEVICE as usize].iter().find(|e| e.action == "oom").expect("an oom event");
    assert_eq!((oom.size, oom.device_free, oom.user_metadata.as_str()), (8 * GIB, Some(4 * GIB), "too big"));
}

#[test]
fn stacks_name_the_allocating_function() {
    let _serial = lock(&history::TEST_SERIAL);
    let a = allocator("");
    record_history(true, 100, GPURT_HISTORY_CLEAR | GPURT_HISTORY_STACKS).unwrap();
    let p = a.malloc(512, 0).unwrap();
    record_history(false, 0, 0).unwrap();
    let s = snapshot_of(&a);
    let block = s.segments[0].blocks.iter().find(|b| b.address == p).unwrap();
    assert!(!block.frames.is_empty());
    let allocator_frame = |f: &crate::alloc::history::Frame| f.name.starts_with("gpurt::alloc::caching") || f.name.starts_with("gpurt::alloc::pool");
    assert!(!block.frames.iter().any(allocator_frame), "the allocator's own frames are left out: {:?}", block.frames);
    if cfg!(debug_assertions) {
        // Debug builds carry line tables, with the functions inlined into the test's
        // (release builds here have neither).
        let first = &block.frames[0];
        assert!(first.name.starts_with("gpurt::alloc::snapshot::tests::stacks_name_the_allocating_function"), "{:?}", block.frames);
        assert!(first.filename.ends_with("tests.rs") && first.line > 0, "{first:?}");
    }
    a.free(p).unwrap();
}

/// A snapshot with live, pending and free blocks, an annotation that would end a
/// script element, and an out-of-memory event.
fn varied_snapshot() -> Snapshot {
    let _serial = lock(&history::TEST_SERIAL);
    let a = allocator("");
    record_history(true, 1000, GPURT_HISTORY_CLEAR).unwrap();
    annotate_push("</script><!-- \"quoted\" é");
    let kept: Vec<u64> = (1..40).map(|i| a.malloc(i * 40_000, 1).unwrap()).collect();
    annotate_pop().unwrap();
    let pending = a.malloc(3 << 20, 1).unwrap();
    a.record_stream(pending, 2).unwrap();
    a.free(pending).unwrap();
    for p in kept.iter().step_by(3) {
        a.free(*p).unwrap();
    }
    assert!(a.malloc(16 * GIB, 1).is_err());
    record_history(false, 0, 0).unwrap();
    snapshot_of(&a)
}

#[test]
fn json_round_trips_with_pytorchs_keys() {
    let s = varied_snapshot();
    let bytes = encode(&s, GPURT_SNAPSHOT_JSON).unwrap();
    let back: Snapshot = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(back, s);
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    for key in ["segments", "device_traces", "allocator_settings", "gpurt"] {
        assert!(value.get(key).is_some(), "{key}");
    }
    let segment = &value["segments"][0];
    for key in ["device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"] {
        assert!(segment.get(key).is_some(), "segment key {key} in {:?}", keys(segment));
    }
    for key in ["address", "size", "requested_size", "state", "frames"] {
        assert!(segment["blocks"][0].get(key).is_some(), "block key {key}");
    }
    for entry in value["device_traces"][DEVICE as usize].as_array().unwrap() {
        for key in ["action", "addr", "size", "stream", "time_us", "frames", "user_metadata"] {
            assert!(entry.get(key).is_some(), "trace key {key}");
        }
        assert_eq!(entry.get("device_free").is_some(), entry["action"] == "oom");
    }
}

#[test]
fn pickle_holds_dicts_lists_and_tuples_as_pytorchs() {
    use serde_pickle::{HashableValue as Key, Value};
    let s = varied_snapshot();
    let bytes = encode(&s, GPURT_SNAPSHOT_PICKLE).unwrap();
    let value = serde_pickle::value_from_slice(&bytes, serde_pickle::DeOptions::new()).unwrap();
    let Value::Dict(top) = value else { panic!("the snapshot is a dict") };
    let get = |d: &std::collections::BTreeMap<Key, Value>, k: &str| d.get(&Key::String(k.into())).cloned().unwrap_or_else(|| panic!("key {k}"));
    let Value::List(segments) = get(&top, "segments") else { panic!("segments is a list") };
    assert_eq!(segments.len(), s.segments.len());
    let Value::Dict(segment) = &segments[0] else { panic!("a segment is a dict") };
    assert_eq!(get(segment, "segment_pool_id"), Value::Tuple(vec![Value::I64(0), Value::I64(0)]));
    assert!(matches!(get(segment, "segment_type"), Value::String(t) if t == "large" || t == "small"));
    let Value::List(traces) = get(&top, "device_traces") else { panic!("device_traces is a list") };
    assert_eq!(traces.len(), DEVICE as usize + 1);
    let back: Snapshot = serde_pickle::from_slice(&bytes, serde_pickle::DeOptions::new()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn html_holds_the_snapshot_where_no_data_can_end_the_script() {
    let s = varied_snapshot();
    let page = String::from_utf8(encode(&s, GPURT_SNAPSHOT_HTML).unwrap()).unwrap();
    assert_eq!(page.matches("</script>").count(), 2, "only the page's own two script elements end");
    assert!(!page.contains("__GPURT_SNAPSHOT__"));
    let start = page.find("type=\"application/json\">").unwrap() + "type=\"application/json\">".len();
    let end = start + page[start..].find("</script>").unwrap();
    let back: Snapshot = serde_json::from_str(&page[start..end]).unwrap();
    assert_eq!(back, s);
    assert!(!page.contains("http://") && !page.contains("https://"), "the page needs no network");
}

#[test]
fn unknown_formats_are_refused() {
    for format in [-1, 3, 1000] {
        assert_eq!(gpurt_snapshot_format_t::from_raw(format).unwrap_err().status, Status::GPURT_ERROR_INVALID_ARGUMENT);
    }
    for format in 0..3 {
        assert_eq!(gpurt_snapshot_format_t::from_raw(format).unwrap() as i32, format);
    }
}
