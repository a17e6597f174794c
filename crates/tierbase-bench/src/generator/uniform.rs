//! YCSB's `UniformLongGenerator`: every integer in `[lb, ub]` equally likely.
//!
//! Owns: this one generator. Must not touch: anything outside `generator`.

use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// Uniform integers in `[lb, ub]` (inclusive).
#[derive(Clone, Debug)]
pub struct UniformGenerator {
    lb: u64,
    interval: u64,
}

impl UniformGenerator {
    /// A generator over `[lb, ub]`.
    pub fn new(lb: u64, ub: u64) -> Result<Self> {
        if ub < lb {
            return Err(BenchError::invalid(format!(
                "uniform range is empty: {lb} > {ub}"
            )));
        }
        let interval = (ub - lb)
            .checked_add(1)
            .ok_or_else(|| BenchError::invalid("uniform range too large"))?;
        Ok(UniformGenerator { lb, interval })
    }

    /// The next value.
    #[inline]
    pub fn next_value(&mut self, rng: &mut Rng) -> u64 {
        self.lb + rng.below(self.interval)
    }
}
