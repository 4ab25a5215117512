//! Allocator statistics with the names and meaning of `torch.cuda.memory_stats()`.

/// One statistic: its current value, the peak since the last peak reset, and the
/// totals added and removed since the last accumulated reset.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct gpurt_stat_t {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64,
    pub freed: i64,
}

impl gpurt_stat_t {
    pub fn add(&mut self, amount: i64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }
    pub fn sub(&mut self, amount: i64) {
        self.current -= amount;
        self.freed += amount;
    }
    fn reset_peak(&mut self) {
        self.peak = self.current;
    }
    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
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
    pub all: gpurt_stat_t,
    pub small_pool: gpurt_stat_t,
    pub large_pool: gpurt_stat_t,
}

impl gpurt_stat_array_t {
    pub fn add(&mut self, pool: PoolKind, amount: i64) {
        self.all.add(amount);
        self.pool(pool).add(amount);
    }
    pub fn sub(&mut self, pool: PoolKind, amount: i64) {
        self.all.sub(amount);
        self.pool(pool).sub(amount);
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
    pub struct_size: usize,
    pub allocation: gpurt_stat_array_t,
    pub segment: gpurt_stat_array_t,
    pub active: gpurt_stat_array_t,
    pub inactive_split: gpurt_stat_array_t,
    pub allocated_bytes: gpurt_stat_array_t,
    pub reserved_bytes: gpurt_stat_array_t,
    pub active_bytes: gpurt_stat_array_t,
    pub inactive_split_bytes: gpurt_stat_array_t,
    pub requested_bytes: gpurt_stat_array_t,
    pub num_alloc_retries: i64,
    pub num_ooms: i64,
    pub num_device_alloc: i64,
    pub num_device_free: i64,
}

impl gpurt_memory_stats_t {
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
}
