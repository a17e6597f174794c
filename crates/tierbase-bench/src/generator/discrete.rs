//! YCSB's `DiscreteGenerator`: picks one of several values with given weights (the operation
//! chooser of a workload).
//!
//! Owns: this one generator. Must not touch: anything outside `generator`.

use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// Weighted choice among values of type `T`.
#[derive(Clone, Debug)]
pub struct DiscreteGenerator<T> {
    choices: Vec<(f64, T)>,
    sum: f64,
    last: T,
}

impl<T: Copy> DiscreteGenerator<T> {
    /// A chooser over `(weight, value)` pairs; zero weights are dropped. Fails when no weight
    /// is positive or any is negative or not finite.
    pub fn new(choices: impl IntoIterator<Item = (f64, T)>) -> Result<Self> {
        let mut kept = Vec::new();
        let mut sum = 0.0;
        for (w, v) in choices {
            if !w.is_finite() || w < 0.0 {
                return Err(BenchError::invalid(format!(
                    "weights must be finite and not negative, got {w}"
                )));
            }
            if w > 0.0 {
                kept.push((w, v));
                sum += w;
            }
        }
        let Some(&(_, last)) = kept.last() else {
            return Err(BenchError::invalid(
                "at least one operation proportion must be positive",
            ));
        };
        Ok(DiscreteGenerator {
            choices: kept,
            sum,
            last,
        })
    }

    /// The next value: YCSB walks the list subtracting normalised weights from a uniform draw.
    #[inline]
    pub fn next_value(&self, rng: &mut Rng) -> T {
        let mut val = rng.next_f64();
        for (w, v) in &self.choices {
            let p = w / self.sum;
            if val < p {
                return *v;
            }
            val -= p;
        }
        // Rounding can leave `val` a hair above the last weight: the last value, as in YCSB.
        self.last
    }
}
