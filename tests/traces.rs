//! The allocation traces recorded from PyTorch models (gpu/traces, written by
//! gpu/record_traces.py) replayed through the caching allocator on host memory: every
//! invariant holds at the end, every byte goes back, and the fragmentation (peak
//! reserved over peak live bytes) and the number of growth steps (driver mappings or
//! segments, which a cold pool's time mostly is) are the ones the H100 measured
//! (gpu/trace_replay.cpp; the pool's choices do not depend on the device), with
//! expandable segments below the lowest fragmentation of the driver's pool,
//! PyTorch's allocator and RMM's pool.

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

/// A replay's fragmentation (peak reserved / peak live bytes) and growth steps
/// (segments or mappings taken from the source).
type Replay = (f64, i64);

/// Replays `ops` from an empty pool.
fn replay(ops: &[Op], config: &str) -> Replay {
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
    let stats = allocator.stats();
    for &(addr, _) in live.iter().filter(|l| l.0 != 0) {
        allocator.free(addr).expect("free");
    }
    allocator.empty_cache();
    allocator.check_invariants().expect("invariants after empty_cache");
    assert_eq!(allocator.source().live_segments(), 0, "segments not returned");
    (stats.reserved_bytes.all.peak as f64 / peak as f64, stats.num_device_alloc)
}

/// (trace, fragmentation and growth steps with segments, with expandable segments,
/// the lowest fragmentation of the three anchors), as gpu/trace_replay.cpp measured
/// them on the H100.
const MEASURED: [(&str, Replay, Replay, f64); 7] = [
    ("cnn_train_b32", (1.273, 35), (1.060, 23), 1.244),
    ("cnn_train_b128", (1.661, 37), (1.038, 22), 1.234),
    ("cnn_train_b256", (1.746, 43), (1.042, 23), 1.205),
    ("encoder_varlen", (1.736, 90), (1.047, 50), 1.171),
    ("llm_generate", (1.288, 15), (1.205, 9), 1.253),
    ("resnet50_train_b64", (1.206, 87), (1.040, 55), 1.193),
    ("gpt2_generate_sampled", (1.164, 39), (1.043, 15), 1.050),
];

#[test]
fn recorded_traces_fragment_as_measured_on_the_gpu() {
    // Every trace replayed first, so that a failure shows all of their figures.
    let replays: Vec<_> = MEASURED
        .iter()
        .map(|(name, ..)| {
            let ops = load(name);
            let (with_segments, with_expandable) = (replay(&ops, ""), replay(&ops, "expandable_segments:True"));
            eprintln!("{name}: fragmentation and steps {with_segments:.3?} with segments, {with_expandable:.3?} expandable");
            (with_segments, with_expandable)
        })
        .collect();
    for ((name, segments, expandable, lowest_anchor), (with_segments, with_expandable)) in MEASURED.into_iter().zip(replays) {
        for ((frag, steps), (measured_frag, measured_steps)) in [(with_segments, segments), (with_expandable, expandable)] {
            assert!((frag - measured_frag).abs() < 0.0005, "{name}: {frag:.3}, measured {measured_frag}");
            assert_eq!(steps, measured_steps, "{name}: growth steps");
        }
        assert!(with_expandable.0 <= lowest_anchor, "{name}: expandable {:.3} above the anchors' {lowest_anchor}", with_expandable.0);
    }
}
