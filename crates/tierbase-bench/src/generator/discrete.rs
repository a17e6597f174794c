//! YCSB's `DiscreteGenerator`: picks one of several values with given weights (the operation
//! chooser of a workload).
//!
//! Owns: this one generator. Must not touch: anything outside `generator`.

use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// Weighted choice among values of type `T`.
#[derive(Clone, Debug)]
pub struct DiscreteGenerator<T> {
    /// `(weight / sum of weights, value)`: YCSB divides on every draw; the quotients are the
    /// same computed once.
    choices: Vec<(f64, T)>,
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
            choices: kept.into_iter().map(|(w, v)| (w / sum, v)).collect(),
            last,
        })
    }

    /// The next value: YCSB walks the list subtracting normalised weights from a uniform draw.
    #[inline]
    pub fn next_value(&self, rng: &mut Rng) -> T {
        let mut val = rng.next_f64();
        for &(p, v) in &self.choices {
            if val < p {
                return v;
            }
            val -= p;
        }
        // Rounding can leave `val` a hair above the last weight: the last value, as in YCSB.
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// YCSB's loop as written: divide by the sum on every draw.
    fn ycsb_next<T: Copy>(choices: &[(f64, T)], rng: &mut Rng) -> T {
        let sum: f64 = choices.iter().map(|c| c.0).sum();
        let mut val = rng.next_f64();
        for &(w, v) in choices {
            let p = w / sum;
            if val < p {
                return v;
            }
            val -= p;
        }
        choices[choices.len() - 1].1
    }

    #[test]
    fn draws_as_ycsb_does() {
        let choices = [(0.3, 0u8), (0.1, 1), (1.0 / 3.0, 2), (0.05, 3), (0.2166, 4)];
        let g = DiscreteGenerator::new(choices).unwrap();
        let (mut a, mut b) = (Rng::from_seed(11), Rng::from_seed(11));
        for _ in 0..200_000 {
            assert_eq!(g.next_value(&mut a), ycsb_next(&choices, &mut b));
        }
    }
}
