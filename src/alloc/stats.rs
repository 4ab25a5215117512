//! Allocator statistics with the names and meaning of `torch.cuda.memory_stats()`.

/// One statistic: its current value, the peak since the last peak reset, and the
/// totals added and removed since the last accumulated reset.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct gpurt_stat_t {
    /// The value now.
    pub current: i64,
    /// The largest value since the last peak reset.
    pub peak: i64,
    /// The total added since the last accumulated reset.
    pub allocated: i64,
    /// The total removed since the last accumulated reset.
    pub freed: i64,
}

impl gpurt_stat_t {
    #[inline]
    pub fn add(&mut self, amount: i64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }
    pub fn sub(&mut self, amount: i64) {
        self.current -= amount;
        self.freed += amount;
    }
    pub(crate) fn reset_peak(&mut self) {
        self.peak = self.current;
    }
    pub(crate) fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
    /// Adds a shard's changes since its last flush (`now` against `last`) to these
    /// totals. The shard's peak since then, added to the totals' current value, is a
    /// candidate peak: exact when no other shard has unflushed changes.
    fn absorb(&mut self, now: &gpurt_stat_t, last: &gpurt_stat_t) {
        self.peak = self.peak.max(self.current + now.peak - last.current);
        self.current += now.current - last.current;
        self.allocated += now.allocated - last.allocated;
        self.freed += now.freed - last.freed;
    }
}

/// Which pool a statistic counts: every block, small-pool blocks, large-pool blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Small = 1,
    Large = 2,
}

/// A statistic for all pools, the small pool and the large pool (PyTorch's
/// `all`, `small_pool`, `large_pool`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct gpurt_stat_array_t {
    /// Over every pool.
    pub all: gpurt_stat_t,
    /// Over the small pool (blocks of 1 MiB and less).
    pub small_pool: gpurt_stat_t,
    /// Over the large pool.
    pub large_pool: gpurt_stat_t,
}

impl gpurt_stat_array_t {
    #[inline]
    pub fn add(&mut self, pool: PoolKind, amount: i64) {
        self.all.add(amount);
        self.pool(pool).add(amount);
    }
    #[inline]
    pub fn sub(&mut self, pool: PoolKind, amount: i64) {
        self.all.sub(amount);
        self.pool(pool).sub(amount);
    }
    /// Counts `amount` as both added and removed (uses that began and ended between
    /// two reads): the totals move, the current value does not.
    pub(crate) fn add_total(&mut self, pool: PoolKind, amount: i64) {
        self.all.allocated += amount;
        self.all.freed += amount;
        let row = self.pool(pool);
        row.allocated += amount;
        row.freed += amount;
    }
    fn pool(&mut self, pool: PoolKind) -> &mut gpurt_stat_t {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }
    fn each(&mut self) -> [&mut gpurt_stat_t; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }
}

/// `torch.cuda.memory_stats()`: counts and bytes of allocations (blocks handed out),
/// segments (driver allocations), active blocks (handed out or awaiting a
/// cross-stream free), inactive split blocks (free parts of split segments), and the
/// bytes callers requested before rounding.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct gpurt_memory_stats_t {
    /// Set by the caller to sizeof the struct it was compiled with (the _INIT macro does): gpurt fills only that much.
    pub struct_size: usize,
    /// Blocks handed out.
    pub allocation: gpurt_stat_array_t,
    /// Segments held from the driver.
    pub segment: gpurt_stat_array_t,
    /// Blocks handed out or awaiting a cross-stream free.
    pub active: gpurt_stat_array_t,
    /// Free parts of split segments.
    pub inactive_split: gpurt_stat_array_t,
    /// Bytes handed out.
    pub allocated_bytes: gpurt_stat_array_t,
    /// Bytes held from the driver.
    pub reserved_bytes: gpurt_stat_array_t,
    /// Bytes of active blocks.
    pub active_bytes: gpurt_stat_array_t,
    /// Bytes of inactive split blocks.
    pub inactive_split_bytes: gpurt_stat_array_t,
    /// Bytes callers asked for, before rounding.
    pub requested_bytes: gpurt_stat_array_t,
    /// Allocations that succeeded only after the cache was released.
    pub num_alloc_retries: i64,
    /// Allocations that failed for lack of memory.
    pub num_ooms: i64,
    /// Driver allocations made.
    pub num_device_alloc: i64,
    /// Driver frees made.
    pub num_device_free: i64,
    /// The fields the allocator cannot know, as GPURT_STATS_UNKNOWN_* bits (0 with
    /// gpurt's caching allocator; set under backend:cudaMallocAsync, whose driver
    /// pool does not report them). Unknown fields read 0.
    pub unknown: u64,
    /// Bytes of the pools' memory asleep (gpurt_mem_pool_sleep): unmapped, given back
    /// to the driver, their addresses kept.
    pub asleep_bytes: i64,
    /// Of `asleep_bytes`, those whose contents wait in pinned host memory
    /// (GPURT_SLEEP_OFFLOAD).
    pub offloaded_bytes: i64,
    /// Pinned host memory the pools hold for offloads: while they sleep, and kept after
    /// a wake for the next sleep (each pool's shard keeps at most the last sleep's
    /// need; `gpurt_mem_pool_empty_cache` gives it back).
    pub offload_host_bytes: i64,
}

/// The struct's size up to `unknown`, its first version: callers compiled against it
/// are served the fields they know (the sleep figures came after).
pub const MEMORY_STATS_V1_SIZE: usize = std::mem::offset_of!(gpurt_memory_stats_t, asleep_bytes);

/// `gpurt_memory_stats_t.unknown`: `segment` is not known.
pub const GPURT_STATS_UNKNOWN_SEGMENT: u64 = 1 << 1;
/// `inactive_split` and `inactive_split_bytes` are not known.
pub const GPURT_STATS_UNKNOWN_INACTIVE_SPLIT: u64 = 1 << 3;
/// `reserved_bytes` holds its current and peak values only (no totals).
pub const GPURT_STATS_UNKNOWN_RESERVED_TOTALS: u64 = 1 << 5;
/// `num_alloc_retries` is not known.
pub const GPURT_STATS_UNKNOWN_ALLOC_RETRIES: u64 = 1 << 9;
/// `num_device_alloc` and `num_device_free` are not known.
pub const GPURT_STATS_UNKNOWN_DEVICE_CALLS: u64 = 1 << 11;
/// The small_pool / large_pool parts of every statistic are not known (`all` is).
pub const GPURT_STATS_UNKNOWN_POOL_PARTS: u64 = 1 << 13;
/// What backend:cudaMallocAsync cannot know.
pub(crate) const GPURT_STATS_UNKNOWN_WITH_DRIVER_POOL: u64 = GPURT_STATS_UNKNOWN_SEGMENT
    | GPURT_STATS_UNKNOWN_INACTIVE_SPLIT
    | GPURT_STATS_UNKNOWN_RESERVED_TOTALS
    | GPURT_STATS_UNKNOWN_ALLOC_RETRIES
    | GPURT_STATS_UNKNOWN_DEVICE_CALLS
    | GPURT_STATS_UNKNOWN_POOL_PARTS;

impl gpurt_memory_stats_t {
    pub fn new() -> Self {
        gpurt_memory_stats_t { struct_size: std::mem::size_of::<Self>(), ..Default::default() }
    }

    fn arrays(&mut self) -> [&mut gpurt_stat_array_t; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// `torch.cuda.reset_peak_memory_stats`: every peak becomes its current value.
    pub fn reset_peak(&mut self) {
        for array in self.arrays() {
            array.each().into_iter().for_each(gpurt_stat_t::reset_peak);
        }
    }

    /// Adds a shard's changes since its last flush (`now` against `last`, see
    /// `gpurt_stat_t::absorb`) to these totals.
    pub fn absorb(&mut self, now: &Self, last: &Self) {
        let (mut now, mut last) = (*now, *last);
        for ((total, n), l) in self.arrays().into_iter().zip(now.arrays()).zip(last.arrays()) {
            for ((t, n), l) in total.each().into_iter().zip(n.each()).zip(l.each()) {
                t.absorb(n, l);
            }
        }
        self.num_alloc_retries += now.num_alloc_retries - last.num_alloc_retries;
        self.num_ooms += now.num_ooms - last.num_ooms;
        self.num_device_alloc += now.num_device_alloc - last.num_device_alloc;
        self.num_device_free += now.num_device_free - last.num_device_free;
        self.unknown |= now.unknown;
        self.asleep_bytes += now.asleep_bytes - last.asleep_bytes;
        self.offloaded_bytes += now.offloaded_bytes - last.offloaded_bytes;
        self.offload_host_bytes += now.offload_host_bytes - last.offload_host_bytes;
    }

    /// `torch.cuda.reset_accumulated_memory_stats`: totals and event counters to zero.
    pub fn reset_accumulated(&mut self) {
        for array in self.arrays() {
            array.each().into_iter().for_each(gpurt_stat_t::reset_accumulated);
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }
}

/// Per device, the statistics of pools that are gone (graph-private pools, pools
/// users destroyed): their totals stay part of the device's, as in PyTorch, where
/// every pool shares the device's allocator; their peaks do not outlive them.
#[derive(Default)]
pub struct RetiredStats(std::collections::HashMap<i32, gpurt_memory_stats_t>);

impl RetiredStats {
    /// Keeps the totals of a pool of `device` that is gone.
    pub fn retire(&mut self, device: i32, gone: &gpurt_memory_stats_t) {
        // Not `or_default`: `new` also sets `struct_size`.
        #[allow(clippy::unwrap_or_default)]
        let retired = self.0.entry(device).or_insert_with(gpurt_memory_stats_t::new);
        // Its host memory went with it.
        let gone = gpurt_memory_stats_t { offload_host_bytes: 0, ..*gone };
        retired.absorb(&gone, &gpurt_memory_stats_t::new());
        retired.reset_peak();
    }

    /// Adds `device`'s retired totals to `stats`.
    pub fn add_to(&self, device: i32, stats: &mut gpurt_memory_stats_t) {
        if let Some(retired) = self.0.get(&device) {
            stats.absorb(retired, &gpurt_memory_stats_t::new());
        }
    }

    /// Resets the peaks (`accumulated`: the totals) of `device`'s retired totals.
    pub fn reset(&mut self, device: i32, accumulated: bool) {
        if let Some(retired) = self.0.get_mut(&device) {
            if accumulated {
                retired.reset_accumulated()
            } else {
                retired.reset_peak()
            }
        }
    }
}

/// Bytes for people: "512 B", "40.00 MiB".
pub fn format_bytes(v: impl Into<i128>) -> String {
    let v = v.into();
    let (mut value, mut unit) = (v as f64, 0);
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    while value.abs() >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// A human-readable table of `stats`, laid out like `torch.cuda.memory_summary()`.
pub fn summary(device: i32, stats: &gpurt_memory_stats_t) -> String {
    let rule = format!("|{}|\n", "=".repeat(82));
    let thin = format!("|{}|\n", "-".repeat(82));
    let mut out = String::new();
    out += &rule;
    out += &format!("| {:<80} |\n", format!("gpurt memory summary, device {device}"));
    out += &format!("| {:<80} |\n", format!("CUDA OOMs: {:<12} | cudaMalloc retries: {}", stats.num_ooms, stats.num_alloc_retries));
    out += &rule;
    out += &format!("| {:<24} | {:>11} | {:>11} | {:>11} | {:>11} |\n", "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
    let rows: [(&str, &gpurt_stat_array_t, bool); 9] = [
        ("Allocated memory", &stats.allocated_bytes, true),
        ("Active memory", &stats.active_bytes, true),
        ("Requested memory", &stats.requested_bytes, true),
        ("GPU reserved memory", &stats.reserved_bytes, true),
        ("Non-releasable memory", &stats.inactive_split_bytes, true),
        ("Allocations", &stats.allocation, false),
        ("Active allocs", &stats.active, false),
        ("GPU reserved segments", &stats.segment, false),
        ("Non-releasable allocs", &stats.inactive_split, false),
    ];
    for (name, array, in_bytes) in rows {
        out += &thin;
        let show = |v: i64| if in_bytes { format_bytes(v) } else { v.to_string() };
        for (label, s) in [(name.to_string(), &array.all), ("      from large pool".to_string(), &array.large_pool), ("      from small pool".to_string(), &array.small_pool)] {
            out += &format!("| {:<24} | {:>11} | {:>11} | {:>11} | {:>11} |\n", label, show(s.current), show(s.peak), show(s.allocated), show(s.freed));
        }
    }
    out += &rule;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peaks_and_totals_follow_pytorch() {
        let mut s = gpurt_memory_stats_t::default();
        s.allocated_bytes.add(PoolKind::Small, 512);
        s.allocated_bytes.add(PoolKind::Large, 4096);
        s.allocated_bytes.sub(PoolKind::Large, 4096);
        assert_eq!(s.allocated_bytes.all, gpurt_stat_t { current: 512, peak: 4608, allocated: 4608, freed: 4096 });
        assert_eq!(s.allocated_bytes.large_pool.current, 0);
        s.reset_peak();
        assert_eq!(s.allocated_bytes.all.peak, 512);
        s.num_ooms = 3;
        s.reset_accumulated();
        assert_eq!(s.allocated_bytes.all, gpurt_stat_t { current: 512, peak: 512, allocated: 0, freed: 0 });
        assert_eq!(s.num_ooms, 0);
    }

    #[test]
    fn summary_lists_every_metric_per_pool() {
        let mut s = gpurt_memory_stats_t::default();
        s.allocated_bytes.add(PoolKind::Large, 3 << 20);
        s.allocation.add(PoolKind::Large, 1);
        let text = summary(0, &s);
        for needle in ["Allocated memory", "3.00 MiB", "GPU reserved segments", "from small pool", "Non-releasable allocs"] {
            assert!(text.contains(needle), "{needle:?} missing from\n{text}");
        }
        assert!(text.lines().all(|l| l.chars().count() == 84), "ragged table:\n{text}");
    }
}
