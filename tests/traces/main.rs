//! The allocation traces recorded from PyTorch models (gpu/traces, written by
//! gpu/record_traces.py) replayed through the caching allocator on host memory: every
//! invariant holds at the end, every byte goes back, and the fragmentation (peak
//! reserved over peak live bytes) and the number of growth steps (driver mappings or
//! segments, which a cold pool's time mostly is) are the ones the H100 measured
//! (gpu/trace_replay.cpp; the pool's choices do not depend on the device), with
//! expandable segments at or below PyTorch's own (its model, `pytorch`).

use std::io::Read;

mod pytorch;

use gpurt::alloc::caching::CachingAllocator;
use gpurt::alloc::config::AllocConfig;
use gpurt::alloc::host::HostSource;

const GIB: u64 = 1 << 30;

#[derive(Clone, Copy)]
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

/// What a trace plays on: gpurt's caching allocator, or the model of PyTorch's.
trait Allocator {
    /// What a live block is known by (its address; the model's block).
    type Block: Copy + Default;
    fn malloc(&mut self, size: u64, stream: u64) -> Self::Block;
    fn free(&mut self, block: Self::Block);
}

impl Allocator for &CachingAllocator<HostSource> {
    type Block = u64;
    fn malloc(&mut self, size: u64, stream: u64) -> u64 {
        CachingAllocator::malloc(self, size, stream).expect("malloc")
    }
    fn free(&mut self, addr: u64) {
        CachingAllocator::free(self, addr).expect("free");
    }
}

impl Allocator for pytorch::PytorchExpandable {
    type Block = usize;
    fn malloc(&mut self, size: u64, stream: u64) -> usize {
        pytorch::PytorchExpandable::malloc(self, size, stream)
    }
    fn free(&mut self, block: usize) {
        pytorch::PytorchExpandable::free(self, block);
    }
}

/// Plays `ops` on `allocator`, `live` holding the trace's blocks by id and `bytes` the
/// bytes live; returns the peak of `bytes`.
fn play<A: Allocator>(allocator: &mut A, ops: &[Op], live: &mut Vec<(A::Block, u64)>, bytes: &mut u64) -> u64 {
    let mut peak = *bytes;
    for op in ops {
        match *op {
            Op::Alloc { id, size, stream } => {
                if live.len() <= id {
                    live.resize(id + 1, Default::default());
                }
                live[id] = (allocator.malloc(size, stream), size);
                *bytes += size;
                peak = peak.max(*bytes);
            }
            Op::Free { id } => {
                allocator.free(live[id].0);
                *bytes -= live[id].1;
                live[id] = Default::default();
            }
        }
    }
    peak
}

/// Frees what the traces left live and empties the cache: every byte goes back.
fn free_all(allocator: &CachingAllocator<HostSource>, lives: &[Vec<(u64, u64)>]) {
    for &(addr, _) in lives.iter().flatten().filter(|l| l.0 != 0) {
        allocator.free(addr).expect("free");
    }
    allocator.empty_cache();
    allocator.check_invariants().expect("invariants after empty_cache");
    assert_eq!(allocator.source().live_segments(), 0, "segments not returned");
}

/// Replays `ops` from an empty pool: its fragmentation and growth steps.
fn replay(ops: &[Op], config: &str) -> Replay {
    let allocator = CachingAllocator::new(HostSource::new(64 * GIB), AllocConfig::parse(config).unwrap());
    let (mut live, mut bytes) = (Vec::new(), 0);
    let peak = play(&mut &allocator, ops, &mut live, &mut bytes);
    allocator.check_invariants().expect("invariants after the trace");
    let stats = allocator.stats();
    free_all(&allocator, &[live]);
    (stats.reserved_bytes.all.peak as f64 / peak as f64, stats.num_device_alloc)
}

/// (trace, fragmentation and growth steps with segments, with expandable segments,
/// the lowest fragmentation of the three anchors: the driver's pool, PyTorch's
/// allocator and RMM's pool), as gpu/trace_replay.cpp measured them on the H100
/// (expandable segments': this replay's since they place blocks as PyTorch's do, one
/// driver mapping a 20 MiB page, 2026-11-29; the H200 has matched this replay on every
/// trace in every call so far). With expandable segments every trace fragments as on
/// PyTorch's expandable segments, which is below the anchors' lowest on all but GPT-2
/// sampling (1.127 against the driver pool's 1.050: docs/performance.md).
const MEASURED: [(&str, Replay, Replay, f64); 8] = [
    ("cnn_train_b32", (1.273, 35), (1.031, 35), 1.244),
    ("cnn_train_b128", (1.661, 37), (1.027, 85), 1.234),
    ("cnn_train_b256", (1.746, 43), (1.018, 156), 1.205),
    ("encoder_varlen", (1.736, 90), (1.031, 221), 1.171),
    ("llm_generate", (1.288, 15), (1.223, 30), 1.253),
    ("resnet50_train_b64", (1.206, 87), (1.047, 321), 1.193),
    ("gpt2_generate_sampled", (1.164, 39), (1.127, 49), 1.050),
    ("dropin_sequence", (1.192, 84), (1.048, 322), 1.175),
];

/// `ops`' fragmentation on the model of PyTorch's expandable segments.
fn on_pytorch_fragmentation(ops: &[Op]) -> f64 {
    let mut model = pytorch::PytorchExpandable::default();
    let live_peak = play(&mut model, ops, &mut Vec::new(), &mut 0);
    model.peak() as f64 / live_peak as f64
}

#[test]
fn recorded_traces_fragment_as_measured_on_the_gpu() {
    // Every trace replayed first, so that a failure shows all of their figures.
    let replays: Vec<_> = MEASURED
        .iter()
        .map(|(name, ..)| {
            let ops = load(name);
            let (with_segments, with_expandable) = (replay(&ops, "expandable_segments:False"), replay(&ops, "expandable_segments:True"));
            let pytorch = on_pytorch_fragmentation(&ops);
            eprintln!("{name}: fragmentation and steps {with_segments:.3?} with segments, {with_expandable:.3?} expandable (PyTorch's {pytorch:.3})");
            (with_segments, with_expandable, pytorch)
        })
        .collect();
    for ((name, segments, expandable, lowest_anchor), (with_segments, with_expandable, pytorch)) in MEASURED.into_iter().zip(replays) {
        for ((frag, steps), (measured_frag, measured_steps)) in [(with_segments, segments), (with_expandable, expandable)] {
            assert!((frag - measured_frag).abs() < 0.0005, "{name}: {frag:.3}, measured {measured_frag}");
            assert_eq!(steps, measured_steps, "{name}: growth steps");
        }
        assert!(with_expandable.0 <= pytorch + 0.0005, "{name}: expandable {:.3} above PyTorch's {pytorch:.3}", with_expandable.0);
        assert!(with_expandable.0 <= lowest_anchor || name == "gpt2_generate_sampled", "{name}: above the anchors' {lowest_anchor}");
    }
}

/// `workloads` played in turn on one pool with expandable segments, an `empty_cache`
/// between them or the cache kept, as one process runs them: each one's peak reserved
/// bytes and the bytes live after it.
fn in_one_process(workloads: &[&[Op]], empty_cache: bool) -> Vec<(u64, u64)> {
    let allocator = CachingAllocator::new(HostSource::new(64 * GIB), AllocConfig::parse("expandable_segments:True").unwrap());
    let (mut lives, mut bytes, mut figures) = (Vec::new(), 0, Vec::new());
    for (n, ops) in workloads.iter().enumerate() {
        if n > 0 && empty_cache {
            allocator.empty_cache();
        }
        allocator.reset_peak();
        let mut live = Vec::new();
        play(&mut &allocator, ops, &mut live, &mut bytes);
        lives.push(live);
        figures.push((allocator.stats().reserved_bytes.all.peak as u64, bytes));
    }
    allocator.check_invariants().expect("invariants after the workloads");
    free_all(&allocator, &lives);
    figures
}

/// `workloads` played in turn on the model of PyTorch's expandable segments, as
/// `in_one_process` plays them on gpurt: each one's peak reserved bytes.
fn on_pytorch(workloads: &[&[Op]], empty_cache: bool) -> Vec<u64> {
    let mut model = pytorch::PytorchExpandable::default();
    let (mut bytes, mut peaks) = (0, Vec::new());
    for (n, ops) in workloads.iter().enumerate() {
        if n > 0 && empty_cache {
            model.empty_cache();
        }
        model.reset_peak();
        play(&mut model, ops, &mut Vec::new(), &mut bytes);
        peaks.push(model.peak());
    }
    peaks
}

/// `second`'s peak reserved bytes played after `first` (none: from an empty pool) in
/// one process (`in_one_process`); the bytes `first` left live; `first`'s own peak.
fn peak_after(first: &[Op], second: &[Op], empty_cache: bool) -> (u64, u64, u64) {
    let figures = in_one_process(&[first, second], empty_cache);
    (figures[1].0, figures[0].1, figures[0].0)
}

/// Two recorded workloads in one process with `empty_cache` between them, as a server
/// runs one model after another: the first one's free ranges go back wherever they lie
/// (in a segment's middle too) and growth maps into the holes, so the second peaks near
/// its peak alone plus what the first left live, and no higher than on PyTorch's
/// expandable segments. Releasing free ends only, ResNet-50's leftovers kept 5.5 GiB
/// mapped under every workload after it.
#[test]
fn a_second_workload_after_empty_cache_peaks_near_its_peak_alone() {
    const MIB: u64 = 1 << 20;
    let names = ["cnn_train_b32", "encoder_varlen", "llm_generate", "resnet50_train_b64", "gpt2_generate_sampled"];
    let traces: Vec<Vec<Op>> = names.iter().map(|name| load(name)).collect();
    let alone: Vec<u64> = traces.iter().map(|ops| peak_after(&[], ops, true).0).collect();
    let mut worst = 0.0f64;
    for (i, first) in traces.iter().enumerate() {
        for (j, second) in traces.iter().enumerate().filter(|&(j, _)| j != i) {
            let (peak, left, _) = peak_after(first, second, true);
            let ratio = (peak - left) as f64 / alone[j] as f64;
            let pytorch = on_pytorch(&[first, second], true)[1];
            eprintln!("{} after {}: {} MiB ({} left live), alone {} MiB: {ratio:.3}; PyTorch {} MiB", names[j], names[i], peak / MIB, left / MIB, alone[j] / MIB, pytorch / MIB);
            assert!(peak <= pytorch, "{} after {}: above PyTorch", names[j], names[i]);
            worst = worst.max(ratio);
        }
    }
    // Measured: 1.030 at worst (the LLM after ResNet-50); with free ends released
    // only, 9.3 (the CNN after ResNet-50).
    assert!(worst <= 1.035, "a second workload at {worst:.3} of its peak alone");
}

/// gpu/dropin_peak.py's workload recorded as one trace (`dropin_peak.py record`): its
/// first operations are GPT-2's generation, down to the 33 MiB it leaves live; the rest
/// is ResNet-50's training, which frees none of GPT-2's blocks.
const DROPIN_GPT2_OPS: usize = 117_304;

/// The drop-in workload peaks no higher on gpurt's expandable segments than on
/// PyTorch's (H100, 2026-11-27: GPT-2 622 MiB; ResNet-50 after it 5 936 MiB with an
/// `empty_cache` between, 5 916 MiB with the cache kept, the latter also replayed from
/// this trace by gpu/trace_replay.cpp).
#[test]
fn the_drop_in_workload_peaks_no_higher_than_on_pytorchs_expandable_segments() {
    const MIB: u64 = 1 << 20;
    let ops = load("dropin_sequence");
    let (gpt2, resnet) = ops.split_at(DROPIN_GPT2_OPS);
    for (empty_cache, pytorch_resnet) in [(true, 5936), (false, 5916)] {
        let (resnet_peak, _, gpt2_peak) = peak_after(gpt2, resnet, empty_cache);
        let (resnet_peak, gpt2_peak) = (resnet_peak / MIB, gpt2_peak / MIB);
        eprintln!("empty_cache {empty_cache}: GPT-2 {gpt2_peak} MiB (PyTorch 622), ResNet-50 {resnet_peak} MiB (PyTorch {pytorch_resnet})");
        let model: Vec<u64> = on_pytorch(&[gpt2, resnet], empty_cache).iter().map(|peak| peak / MIB).collect();
        assert_eq!(model, [622, pytorch_resnet], "the model of PyTorch's allocator no longer gives its GPU figures");
        assert!(gpt2_peak <= 622, "GPT-2 at {gpt2_peak} MiB");
        assert!(resnet_peak <= pytorch_resnet, "ResNet-50 at {resnet_peak} MiB, empty_cache {empty_cache}");
    }
}

/// `second`'s operations less the allocations it would not make after `first` in one
/// process: each workload was recorded in a process of its own, and the blocks `first`
/// leaves live (cuBLAS's workspaces, made on a stream's first matrix product) are the
/// ones `second` makes first and never frees, which in one process it reuses.
fn after(first: &[Op], second: &[Op]) -> Vec<Op> {
    let never_freed = |ops: &[Op]| {
        let freed: std::collections::HashSet<usize> = ops.iter().filter_map(|op| if let Op::Free { id } = *op { Some(id) } else { None }).collect();
        ops.iter().filter_map(|op| match *op { Op::Alloc { id, size, .. } if !freed.contains(&id) => Some((id, size)), _ => None }).collect::<Vec<_>>()
    };
    let mut kept = never_freed(second);
    let reused: Vec<usize> = never_freed(first)
        .into_iter()
        .filter_map(|(_, size)| {
            let at = kept.iter().position(|&(_, s)| s == size)?;
            Some(kept.remove(at).0)
        })
        .collect();
    second
        .iter()
        .filter(|op| !matches!(op, Op::Alloc { id, .. } if reused.contains(id)))
        .copied()
        .collect()
}

/// Issue #56's second sizes (gpu/dropin_orders.py's sizes B: GPT-2 32 prompts of 64,
/// ResNet-50 at batch 96), each workload recorded alone (`record-dropin-b-*` in
/// gpu/run.sh) and played in every order, with `empty_cache` between or the cache kept:
/// the process's peak reserved bytes at or below what PyTorch's expandable segments
/// reserved in the same order (H200, 2026-11-28: 8 856 MiB for ResNet-50 after GPT-2
/// and `empty_cache`, 8 876 in the three other orders).
#[test]
fn the_drop_in_orders_at_the_second_sizes_peak_no_higher_than_pytorchs() {
    const MIB: u64 = 1 << 20;
    let (gpt2, resnet) = (load("dropin-b/gpt2_generate"), load("dropin-b/resnet50_train"));
    let orders = [("GPT-2, then ResNet-50", &gpt2, &resnet, [8856, 8876]), ("ResNet-50, then GPT-2", &resnet, &gpt2, [8876, 8876])];
    for (order, first, second, pytorch) in orders {
        for (empty_cache, pytorch) in [true, false].into_iter().zip(pytorch) {
            let (second_peak, _, first_peak) = peak_after(first, &after(first, second), empty_cache);
            let peak = second_peak.max(first_peak) / MIB;
            let model = on_pytorch(&[first, &after(first, second)], empty_cache).into_iter().max().unwrap_or(0) / MIB;
            assert_eq!(model, pytorch, "{order}, empty_cache {empty_cache}: the model of PyTorch's allocator no longer gives its GPU figure");
            eprintln!("{order}, empty_cache {empty_cache}: {peak} MiB (PyTorch {pytorch})");
            assert!(peak <= pytorch, "{order}, empty_cache {empty_cache}: {peak} MiB, PyTorch {pytorch}");
        }
    }
}

/// Scenarios of gpu/scenarios.py recorded on the H200 (2026-11-28 and -29) where an
/// earlier policy of gpurt's peaked above PyTorch's expandable segments, each workload
/// recorded on PyTorch's allocator as the scenario ran it
/// (`gpu/traces/scenarios/s<SEED>_<N>_<FAMILY>`): (seed, its workloads in order,
/// `empty_cache` between them, PyTorch's peak reserved MiB on the GPU). The losses were
/// placement: growth steps past 20 MiB pages (864924120), a large block parked and
/// reused in place between neighbours freed after it (2041598439, 1417194950), one
/// arena for small and large blocks (1266599957, 262133418). Only a process's first
/// recorded workload holds PyTorch's cuBLAS workspace (allocated once, at the first
/// GEMM, and kept), so a scenario is recorded first in its process: others recorded
/// after it in the same process replayed 164 MiB below their GPU figures.
const RECORDED_SCENARIOS: [(u64, &[&str], bool, u64); 5] = [
    (864924120, &["llama_generate", "moe_train"], true, 2276),
    (2041598439, &["moe_train", "resnet50_train", "llama_generate"], false, 7556),
    (1417194950, &["moe_train", "resnet50_train"], false, 4834),
    (1266599957, &["llama_generate", "moe_train"], true, 2248),
    (262133418, &["resnet50_train", "moe_train", "llama_generate"], true, 4992),
];

/// The model of PyTorch's allocator, written before the last two were recorded, gives
/// PyTorch's GPU figure for each; gpurt, placing blocks as PyTorch does, peaks at it.
#[test]
fn recorded_scenarios_peak_as_on_pytorch() {
    const MIB: u64 = 1 << 20;
    for (seed, families, empty_cache, pytorch) in RECORDED_SCENARIOS {
        let traces: Vec<Vec<Op>> = families.iter().enumerate().map(|(n, family)| load(&format!("scenarios/s{seed}_{n}_{family}"))).collect();
        let workloads: Vec<&[Op]> = traces.iter().map(Vec::as_slice).collect();
        let peak = in_one_process(&workloads, empty_cache).iter().map(|&(peak, _)| peak).max().unwrap_or(0) / MIB;
        let model = on_pytorch(&workloads, empty_cache).into_iter().max().unwrap_or(0) / MIB;
        eprintln!("scenario {seed}: {peak} MiB (PyTorch's expandable segments on the H200 {pytorch}; its model {model})");
        assert_eq!(model, pytorch, "scenario {seed}: the model of PyTorch's allocator no longer gives its GPU figure");
        assert!(peak <= pytorch, "scenario {seed}: {peak} MiB, above PyTorch's {pytorch}");
    }
}

/// Every recorded trace, by name under gpu/traces.
fn all_traces() -> Vec<String> {
    let mut names = Vec::new();
    for dir in ["", "dropin-b/", "scenarios/"] {
        let path = format!("{}/gpu/traces/{dir}", env!("CARGO_MANIFEST_DIR"));
        for entry in std::fs::read_dir(&path).expect("gpu/traces") {
            let file = entry.expect("an entry").file_name().into_string().expect("a name");
            if let Some(name) = file.strip_suffix(".trace.gz") {
                names.push(format!("{dir}{name}"));
            }
        }
    }
    names.sort();
    names
}

/// Scenarios no GPU ran: two or three recorded workloads (every trace under gpu/traces)
/// in one process, in seeded random orders, with `empty_cache` between them or the cache
/// kept, as gpu/scenarios.py draws them; gpurt's peak reserved bytes against the model
/// of PyTorch's expandable segments. These 100 (of 31 workloads): every one at
/// PyTorch's peak (min, median and max 1.000), where growth steps of an eighth of what
/// was mapped and one arena for all sizes gave 75 at or below, max 1.049. The bounds
/// keep a policy change from making them worse unseen; docs/performance.md has the
/// distribution on fresh seeds on the GPU.
#[test]
fn scenarios_of_recorded_workloads_against_pytorchs_model() {
    const SCENARIOS: usize = 100;
    const AT_OR_BELOW: usize = 100;
    const MAX: f64 = 1.0;
    let names = all_traces();
    let traces: Vec<Vec<Op>> = names.iter().map(|name| load(name)).collect();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut draw = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let mut ratios = Vec::new();
    for _ in 0..SCENARIOS {
        let count = 2 + draw(2);
        let mut picks: Vec<usize> = Vec::new();
        while picks.len() < count {
            let pick = draw(names.len());
            if !picks.contains(&pick) {
                picks.push(pick);
            }
        }
        let empty_cache = draw(2) == 0;
        let workloads: Vec<&[Op]> = picks.iter().map(|&p| traces[p].as_slice()).collect();
        let ours = in_one_process(&workloads, empty_cache).iter().map(|&(peak, _)| peak).max().unwrap_or(0);
        let theirs = on_pytorch(&workloads, empty_cache).into_iter().max().unwrap_or(0);
        ratios.push(ours as f64 / theirs as f64);
    }
    ratios.sort_by(f64::total_cmp);
    let at_or_below = ratios.iter().filter(|&&r| r <= 1.0).count();
    let above = ratios.iter().filter(|&&r| r > 1.005).count();
    let (min, median, max) = (ratios[0], ratios[SCENARIOS / 2], ratios[SCENARIOS - 1]);
    eprintln!("{SCENARIOS} scenarios: gpurt / PyTorch's model min {min:.3}, median {median:.3}, max {max:.3}; {at_or_below} at or below, {above} above +0.5 %");
    assert!(at_or_below >= AT_OR_BELOW && max <= MAX, "{at_or_below} at or below (was {AT_OR_BELOW}), max {max:.3} (was {MAX})");
}
