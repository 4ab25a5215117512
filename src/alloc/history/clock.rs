//! The events' clock: ticks at record time, nanoseconds and wall-clock time when the
//! events are read.

use std::sync::OnceLock;
use std::time::Instant;

/// The events' clock: the CPU's time-stamp counter on x86-64 (invariant there: one
/// rate on every core, in every power state), read in ~7 ns where the system's
/// monotonic clock takes ~30, which was more than half of an event's cost; the
/// system clock elsewhere. Ticks become nanoseconds only when events are read.
#[inline(always)]
pub(super) fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: every x86-64 CPU has rdtsc. (It may run a little ahead of the ring's
    // lock: `record` keeps times from going back.)
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static BASE: OnceLock<Instant> = OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Ticks to nanoseconds since the clock's first use.
pub(super) struct Clock {
    ticks: u64,
    ns_per_tick: f64,
}

impl Clock {
    pub(super) fn ns(&self, ticks: u64) -> u64 {
        (ticks.saturating_sub(self.ticks) as f64 * self.ns_per_tick) as u64
    }
}

/// The clock, its rate measured over 2 ms at its first use (when history is turned
/// on, not inside an allocation).
pub(super) fn clock() -> &'static Clock {
    static CLOCK: OnceLock<Clock> = OnceLock::new();
    CLOCK.get_or_init(|| {
        let (start, first) = (Instant::now(), ticks());
        epoch();
        while start.elapsed().as_micros() < 2000 {
            std::hint::spin_loop();
        }
        let (elapsed, last) = (start.elapsed().as_nanos() as f64, ticks());
        Clock { ticks: first, ns_per_tick: elapsed / (last - first).max(1) as f64 }
    })
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The wall-clock time of `time_ns`, in microseconds since 1970 (PyTorch's
/// `time_us`).
pub fn unix_us(time_ns: u64) -> u64 {
    static UNIX_EPOCH_US: OnceLock<i128> = OnceLock::new();
    let base = *UNIX_EPOCH_US.get_or_init(|| {
        let since_unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        since_unix.as_micros() as i128 - (epoch().elapsed().as_micros() as i128)
    });
    (base + (time_ns / 1000) as i128).max(0) as u64
}
