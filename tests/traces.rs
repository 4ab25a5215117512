//! The allocation traces recorded from PyTorch models (gpu/traces, written by
//! gpu/record_traces.py) replayed through the caching allocator on host memory: every
//! invariant holds at the end, every byte goes back, and the fragmentation (peak
//! reserved over peak live bytes) is the one the H100 measured (gpu/trace_replay.cpp;
//! the pool's choices do not depend on the device), below the lowest of the driver's
//! pool, PyTorch's allocator and RMM's pool with expandable segments.

use std::io::Read;

use gpurt::alloc::caching::CachingAllocator;
use gpurt::alloc::config::AllocConfig;
use gpurt::alloc::host::HostSource;

const GIB: u64 = 1 << 30;

enum Op {
    Alloc { id: usize, size: u64, stream: u64 },
    Free { id: usize },
}

fn load(name: &str) -> Vec<Op> {
    let path = format!("{}/gpu/traces/{name}.trace.gz", env!("CARGO_MANIFEST_DIR"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).expect("a recorded trace"))
        .read_to_string(&mut text)
        .expect("a gzip trace");
    let field = |f: Option<&str>| f.and_then(|v| v.parse::<u64>().ok()).expect("a number");
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            match fields.next() {
                Some("a") => {
                    let (id, size, stream) = (field(fields.next()), field(fields.next()), field(fields.next()));
                    // Stream 0 is the allocator's "no stream"; trace streams count from 0.
                    Some(Op::Alloc { id: id as usize, size, stream: stream + 1 })
                }
                Some("f") => Some(Op::Free { id: field(fields.next()) as usize }),
                _ => None,
            }
        })
        .collect()
}

/// Replays `ops` from an empty pool; returns peak reserved / peak live bytes.
fn fragmentation(ops: &[Op], config: &str) -> f64 {
    let allocator = CachingAllocator::new(HostSource::new(64 * GIB), AllocConfig::parse(config).unwrap());
    let mut live: Vec<(u64, u64)> = Vec::new();
    let (mut bytes, mut peak) = (0u64, 0u64);
    for op in ops {
        match *op {
            Op::Alloc { id, size, stream } => {
                if live.len() <= id {
                    live.resize(id + 1, (0, 0));
                }
                live[id] = (allocator.malloc(size, stream).expect("malloc"), size);
                bytes += size;
                peak = peak.max(bytes);
            }
            Op::Free { id } => {
                allocator.free(live[id].0).expect("free");
                bytes -= live[id].1;
                live[id] = (0, 0);
            }
        }
    }
    allocator.check_invariants().expect("invariants after the trace");
    let reserved_peak = allocator.stats().reserved_bytes.all.peak as f64;
    for &(addr, _) in live.iter().filter(|l| l.0 != 0) {
        allocator.free(addr).expect("free");
    }
    allocator.empty_cache();
    allocator.check_invariants().expect("invariants after empty_cache");
    assert_eq!(allocator.source().live_segments(), 0, "segments not returned");
    reserved_peak / peak as f64
}

/// (trace, fragmentation with segments, with expandable segments, the lowest of the
/// three anchors), as gpu/trace_replay.cpp measured them on the H100.
const MEASURED: [(&str, f64, f64, f64); 5] = [
    ("cnn_train_b32", 1.273, 1.064, 1.244),
    ("cnn_train_b128", 1.661, 1.038, 1.234),
    ("cnn_train_b256", 1.746, 1.036, 1.205),
    ("encoder_varlen", 1.736, 1.048, 1.171),
    ("llm_generate", 1.288, 1.218, 1.253),
];

#[test]
fn recorded_traces_fragment_as_measured_on_the_gpu() {
    for (name, segments, expandable, lowest_anchor) in MEASURED {
        let ops = load(name);
        let with_segments = fragmentation(&ops, "");
        let with_expandable = fragmentation(&ops, "expandable_segments:True");
        eprintln!("{name}: fragmentation {with_segments:.3} with segments, {with_expandable:.3} expandable");
        assert!((with_segments - segments).abs() < 0.0005, "{name}: {with_segments:.3}, measured {segments}");
        assert!((with_expandable - expandable).abs() < 0.0005, "{name}: {with_expandable:.3}, measured {expandable}");
        assert!(with_expandable <= lowest_anchor, "{name}: expandable {with_expandable:.3} above the anchors' {lowest_anchor}");
    }
}
