//! Choosing among candidates: each is run once (warm-up, and the validator's
//! check), then timed over as many runs as fit its time budget (at most the
//! iteration budget), and the fastest valid one wins. Generic over how runs are
//! timed, so the choice is tested with fake clocks.

use crate::error::{Error, Result};

/// How a tuning runs and times candidates: the GPU's events, or a test's clock.
pub trait Bench {
    fn candidates(&self) -> usize;
    /// A name for messages.
    fn name(&self, candidate: usize) -> String;
    /// Runs `candidate` once (enqueues it).
    fn run(&self, candidate: usize) -> Result<()>;
    /// Whether `candidate`'s result (of the run just made) is acceptable.
    fn valid(&self, candidate: usize) -> Result<bool>;
    /// The mean milliseconds of `iterations` runs of `candidate`.
    fn time(&self, candidate: usize, iterations: u32) -> Result<f64>;
}

#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Time to spend timing each candidate (milliseconds).
    pub duration_ms: f64,
    pub max_iterations: u32,
}

/// `GPURT_TUNABLEOP_MAX_TUNING_DURATION_MS`: a finite number of milliseconds in
/// (0, one hour]; None for anything else (the default is used).
pub fn parse_duration_ms(text: &str) -> Option<f64> {
    text.trim().parse::<f64>().ok().filter(|ms| ms.is_finite() && *ms > 0.0 && *ms <= 3_600_000.0)
}

/// `GPURT_TUNABLEOP_MAX_TUNING_ITERATIONS`: a whole number from 1 to 2^32 - 1.
pub fn parse_iterations(text: &str) -> Option<u32> {
    text.trim().parse::<u32>().ok().filter(|&n| n > 0)
}

/// The fastest valid candidate and its mean time in microseconds. Candidates that
/// fail or are rejected by the validator are passed over, with a log line.
pub fn tune(bench: &dyn Bench, budget: Budget) -> Result<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    let mut refusals = Vec::new();
    for c in 0..bench.candidates() {
        let measured = (|| {
            bench.run(c)?;
            if !bench.valid(c)? {
                return Err(Error::invalid_argument("the validator rejected its result"));
            }
            let probe = bench.time(c, 1)?;
            let iterations = (budget.duration_ms / probe.max(1e-6)).clamp(1.0, budget.max_iterations.max(1) as f64) as u32;
            bench.time(c, iterations)
        })();
        match measured {
            Ok(ms) if best.map_or(true, |(_, fastest)| ms < fastest) => best = Some((c, ms)),
            Ok(_) => {}
            Err(e) => {
                crate::log::log(crate::log::Level::Warn, &format!("TunableOp candidate {} passed over: {e}", bench.name(c)));
                refusals.push(format!("{}: {e}", bench.name(c)));
            }
        }
    }
    best.map(|(c, ms)| (c, ms * 1000.0))
        .ok_or_else(|| Error::invalid_argument(format!("no TunableOp candidate could run: {}", refusals.join("; "))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Candidates with fixed times; some fail or are invalid; counts the runs.
    struct Fake {
        ms: Vec<f64>,
        failing: Vec<usize>,
        invalid: Vec<usize>,
        runs: RefCell<Vec<u32>>,
    }

    impl Bench for Fake {
        fn candidates(&self) -> usize {
            self.ms.len()
        }
        fn name(&self, c: usize) -> String {
            format!("c{c}")
        }
        fn run(&self, c: usize) -> Result<()> {
            if self.failing.contains(&c) {
                return Err(Error::invalid_argument("launch failed"));
            }
            self.runs.borrow_mut()[c] += 1;
            Ok(())
        }
        fn valid(&self, c: usize) -> Result<bool> {
            Ok(!self.invalid.contains(&c))
        }
        fn time(&self, c: usize, iterations: u32) -> Result<f64> {
            self.runs.borrow_mut()[c] += iterations;
            Ok(self.ms[c])
        }
    }

    fn fake(ms: &[f64], failing: &[usize], invalid: &[usize]) -> Fake {
        Fake { ms: ms.to_vec(), failing: failing.to_vec(), invalid: invalid.to_vec(), runs: RefCell::new(vec![0; ms.len()]) }
    }

    #[test]
    fn the_fastest_valid_candidate_wins_within_its_budget() {
        let bench = fake(&[2.0, 0.5, 0.1, 0.05], &[3], &[2]);
        let (chosen, micros) = tune(&bench, Budget { duration_ms: 10.0, max_iterations: 100 }).unwrap();
        assert_eq!((chosen, micros), (1, 500.0), "3 fails and 2 is rejected: 1 is the fastest that works");
        let runs = bench.runs.borrow();
        assert_eq!(runs[0], 1 + 1 + 5, "warm-up, probe, then 10 ms / 2 ms");
        assert_eq!(runs[1], 1 + 1 + 20);
        assert_eq!(runs[3], 0);
        let capped = fake(&[0.001], &[], &[]);
        tune(&capped, Budget { duration_ms: 10.0, max_iterations: 7 }).unwrap();
        assert_eq!(capped.runs.borrow()[0], 1 + 1 + 7, "the iteration budget caps a fast candidate");
    }

    #[test]
    fn with_no_working_candidate_the_reasons_are_given() {
        let bench = fake(&[1.0, 1.0], &[0], &[1]);
        let e = tune(&bench, Budget { duration_ms: 1.0, max_iterations: 1 }).unwrap_err();
        assert!(e.message.contains("c0: launch failed") && e.message.contains("c1: the validator rejected"), "{}", e.message);
    }
}
