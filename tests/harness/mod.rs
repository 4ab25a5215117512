//! Operation sequences decoded from bytes, run against gpurt's core with every
//! invariant checked after each step. One harness, two drivers: the stable property
//! tests (`tests/properties.rs`, proptest's random bytes, shrunk on failure) and the
//! cargo-fuzz targets (`fuzz/`, coverage-guided bytes). A broken invariant panics.

use std::collections::HashMap;

use gpurt::alloc::caching::CachingAllocator;
use gpurt::alloc::config::AllocConfig;
use gpurt::alloc::host::HostSource;
use gpurt::handle::{Handle, HandleTable, Kind};
use gpurt::Status;

/// Reads the input a byte at a time; past its end every read is 0.
pub struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Input(bytes)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }

    pub fn below(&mut self, n: usize) -> usize {
        let wide = u16::from_le_bytes([self.byte(), self.byte()]) as usize;
        if n == 0 { 0 } else { wide % n }
    }

    /// A size spread over 0 B – 64 MiB, log-uniform-ish, with odd sizes.
    pub fn size(&mut self) -> u64 {
        let exponent = self.below(27) as u32;
        let mantissa = u32::from_le_bytes([self.byte(), self.byte(), self.byte(), 0]) as u64;
        (1u64 << exponent) - 1 + mantissa % (1u64 << exponent).max(1)
    }
}

const GIB: u64 = 1 << 30;

/// Configurations the allocator may be switched to between operations.
fn config(choice: usize) -> AllocConfig {
    let text = [
        "",
        "expandable_segments:True",
        "max_split_size_mb:64",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[1:2,4:4,>:8],expandable_segments:True",
        "garbage_collection_threshold:0.5",
    ][choice % 6];
    AllocConfig::parse(text).expect("a valid configuration")
}

struct Live {
    addr: u64,
    requested: u64,
    rounded: u64,
}

fn assert_counts(allocator: &CachingAllocator<HostSource>, live: &[Live], step: usize) {
    if let Err(broken) = allocator.check_invariants() {
        panic!("step {step}: invariant broken: {broken}");
    }
    let s = allocator.stats();
    let requested: u64 = live.iter().map(|b| b.requested).sum();
    let rounded: u64 = live.iter().map(|b| b.rounded).sum();
    let blocks = live.iter().filter(|b| b.addr != 0).count() as i64;
    assert_eq!(s.allocation.all.current, blocks, "step {step}: live allocations");
    assert_eq!(s.requested_bytes.all.current as u64, requested, "step {step}: requested bytes");
    // A block may be larger than its rounded request (an unsplit oversize or tail);
    // check_invariants holds the counts to the blocks' own sizes.
    assert!(s.allocated_bytes.all.current as u64 >= rounded, "step {step}: allocated bytes below the requests' rounding");
    assert!(s.reserved_bytes.all.current >= s.allocated_bytes.all.current, "step {step}: reserved < allocated");
    assert!(s.allocated_bytes.all.peak >= s.allocated_bytes.all.current, "step {step}: peak < current");
}

/// Mallocs, frees, cross-stream uses, marker completions, cache empties,
/// configuration and memory-fraction changes, double frees and peak resets, on a
/// 2 GiB host source. After each: the allocator's own invariants, and its counts
/// against a model of the live blocks. A refused request or double free changes no
/// count. At the end everything is returned to the source.
pub fn allocator_operations(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let mut current = config(input.below(6));
    let allocator = CachingAllocator::new(HostSource::new(2 * GIB), current.clone());
    let mut live: Vec<Live> = Vec::new();
    let mut freed: Vec<u64> = Vec::new();
    let mut step = 0;
    while !input.is_empty() {
        step += 1;
        match input.below(16) {
            0..=5 => {
                let (size, stream) = (input.size(), 1 + input.below(3) as u64);
                let before = allocator.stats();
                match allocator.malloc(size, stream) {
                    Ok(addr) => {
                        let rounded = if addr == 0 { 0 } else { allocator_rounding(&current, size) };
                        live.push(Live { addr, requested: if addr == 0 { 0 } else { size }, rounded });
                    }
                    Err(e) => {
                        assert_eq!(e.status, Status::GPURT_ERROR_OUT_OF_MEMORY, "step {step}: {e}");
                        assert_eq!(allocator.stats().allocated_bytes.all.current, before.allocated_bytes.all.current);
                    }
                }
            }
            6..=9 if !live.is_empty() => {
                let block = live.swap_remove(input.below(live.len()));
                allocator.free(block.addr).unwrap_or_else(|e| panic!("step {step}: free: {e}"));
                if block.addr != 0 {
                    freed.push(block.addr);
                }
            }
            10 if !live.is_empty() => {
                let addr = live[input.below(live.len())].addr;
                if addr != 0 {
                    allocator.record_stream(addr, 1 + input.below(4) as u64).unwrap();
                }
            }
            11 => allocator.source().complete_all(),
            12 => allocator.empty_cache(),
            13 => {
                current = config(input.below(6));
                allocator.set_config(current.clone());
            }
            14 if !freed.is_empty() => {
                let addr = freed[input.below(freed.len())];
                if !live.iter().any(|b| b.addr == addr) {
                    let before = allocator.stats();
                    assert!(allocator.free(addr).is_err(), "step {step}: double free of {addr:#x} accepted");
                    assert_eq!(allocator.stats().allocated_bytes.all.current, before.allocated_bytes.all.current);
                }
            }
            15 => {
                if input.byte() % 2 == 0 {
                    allocator.reset_peak();
                } else {
                    allocator.set_memory_fraction([0.25, 0.5, 1.0][input.below(3)]).unwrap();
                }
            }
            _ => {}
        }
        assert_counts(&allocator, &live, step);
    }
    for block in live.drain(..) {
        allocator.free(block.addr).unwrap();
    }
    allocator.source().complete_all();
    allocator.empty_cache();
    assert_counts(&allocator, &live, step + 1);
    let s = allocator.stats();
    assert_eq!((s.reserved_bytes.all.current, s.active.all.current), (0, 0), "cache not empty at the end");
    assert_eq!(allocator.source().live_segments(), 0, "segments not returned to the source");
}

/// The rounding a live block is counted with: the configuration's, as the
/// allocator applies it to requests of its pool kinds.
fn allocator_rounding(config: &AllocConfig, size: u64) -> u64 {
    config.round_size(size)
}

/// Any text through the configuration parser: never a panic; an accepted string
/// gives a configuration whose rounding never shrinks a request.
pub fn config_text(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(config) = AllocConfig::parse(&text) {
        for size in [0u64, 1, 511, 512, 513, 1 << 20, (1 << 20) + 1, 3 << 30, (1 << 40) + 7] {
            let rounded = config.round_size(size);
            assert!(rounded >= size && rounded % 512 == 0, "{text:?}: {size} rounds to {rounded}");
        }
        assert!(config.max_split_size > 20 << 20, "{text:?}: max_split_size {}", config.max_split_size);
    }
}

/// A configuration built from the input, written out and parsed back: every key
/// reads back as written.
pub fn config_round_trip(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let split_mb = 21 + input.below(100_000) as u64;
    let divisions = 1u32 << input.below(6);
    let threshold = (1 + input.below(98)) as f64 / 100.0;
    let expandable = input.byte() % 2 == 1;
    let mut parts = [
        format!("max_split_size_mb:{split_mb}"),
        format!("roundup_power2_divisions:{divisions}"),
        format!("garbage_collection_threshold:{threshold}"),
        format!("expandable_segments:{}", if expandable { "True" } else { "False" }),
    ];
    parts.rotate_left(input.below(4));
    let text = parts.join(if input.byte() % 2 == 0 { "," } else { " , " });
    let config = AllocConfig::parse(&text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_eq!(config.max_split_size, split_mb << 20, "{text:?}");
    // One number applies to every interval from 1 MiB up; smaller requests round to 512 B.
    assert!(config.roundup_power2_divisions[20..].iter().all(|&d| d == divisions), "{text:?}");
    assert!(config.roundup_power2_divisions[..20].iter().all(|&d| d == 0), "{text:?}");
    assert_eq!(config.garbage_collection_threshold, threshold, "{text:?}");
    assert_eq!(config.expandable_segments, expandable, "{text:?}");
}

/// Any text as the value of each environment variable gpurt reads (SECURITY.md:
/// environment values are untrusted): every parser returns, never panics, and what it
/// accepts is within its bounds.
pub fn env_values(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    config_text(bytes); // GPURT_ALLOC_CONF
    let _ = gpurt::log::Level::parse(&text); // GPURT_LOG
    if let Some(size) = gpurt::mathlib::workspace::parse_blas_config(&text) {
        // CUBLAS_WORKSPACE_CONFIG: ":SIZE_KiB:COUNT" pairs, summed without wrapping.
        assert!(size % 1024 == 0, "{text:?}: {size}");
    }
    if let Some(size) = gpurt::mathlib::workspace::parse_blaslt_size(&text) {
        assert!(size % 1024 == 0, "{text:?}: {size}"); // CUBLASLT_WORKSPACE_SIZE, KiB
    }
    if let Some(ms) = gpurt::tunable::tuner::parse_duration_ms(&text) {
        assert!(ms.is_finite() && ms > 0.0 && ms <= 3_600_000.0, "{text:?}: {ms}");
    }
    if let Some(n) = gpurt::tunable::tuner::parse_iterations(&text) {
        assert!(n > 0, "{text:?}");
    }
    if let Some(ms) = gpurt::comm::parse_timeout_ms(&text) {
        // Waiting that long is safe: the wait compares elapsed time, never adds to now.
        let _ = std::time::Duration::from_millis(ms);
    }
}

/// One table for every run: its chunks live as long as the process, as the
/// library's tables do.
static TABLE: HandleTable<u64> = HandleTable::new(Kind::Event);

/// Inserts, lookups, removals, retires and revives against a model map: a live
/// handle always reads its value, a removed or retired one is always refused, a
/// handle of another kind is refused, and the live count moves exactly.
pub fn handle_table_operations(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let mut live: HashMap<u64, u64> = HashMap::new();
    let mut dead: Vec<Handle> = Vec::new();
    let mut retired: Vec<u32> = Vec::new();
    let base = TABLE.live_count();
    let mut next_value = 0u64;
    while !input.is_empty() {
        match input.below(7) {
            0 | 1 => {
                next_value += 1;
                let handle = TABLE.insert(next_value).unwrap();
                assert!(live.insert(handle.0, next_value).is_none(), "handle {:#x} handed out twice", handle.0);
            }
            2 if !live.is_empty() => {
                let key = *live.keys().nth(input.below(live.len())).unwrap();
                assert_eq!(TABLE.remove(Handle(key)).unwrap(), live.remove(&key).unwrap());
                dead.push(Handle(key));
            }
            3 if !live.is_empty() => {
                let key = *live.keys().nth(input.below(live.len())).unwrap();
                let (index, value) = TABLE.retire(Handle(key)).unwrap();
                assert_eq!(value, live.remove(&key).unwrap());
                dead.push(Handle(key));
                retired.push(index);
            }
            4 if !retired.is_empty() => {
                let index = retired.swap_remove(input.below(retired.len()));
                let (handle, value) = TABLE.revive(index);
                assert!(live.insert(handle.0, value).is_none());
            }
            5 if !dead.is_empty() => {
                let stale = dead[input.below(dead.len())];
                assert!(TABLE.get(stale).is_err() && TABLE.remove(stale).is_err() && TABLE.retire(stale).is_err());
            }
            6 if !live.is_empty() => {
                let key = *live.keys().nth(input.below(live.len())).unwrap();
                let other_kind = Handle::new(Kind::Stream, Handle(key).generation(), Handle(key).index());
                assert!(TABLE.get(other_kind).is_err(), "a stream handle read an event slot");
            }
            _ => {}
        }
        for (&key, &value) in &live {
            assert_eq!(TABLE.get(Handle(key)).unwrap(), value);
        }
    }
    for key in live.keys() {
        TABLE.remove(Handle(*key)).unwrap();
    }
    // Retired slots stay with their owner (a pool); give them back the same way.
    for index in retired {
        let (handle, _) = TABLE.revive(index);
        TABLE.remove(handle).unwrap();
    }
    assert_eq!(TABLE.live_count(), base, "live count drifted");
}
