//! YCSB's `SkewedLatestGenerator`: the most recently inserted items are the most popular.
//!
//! Owns: this one generator. Must not touch: the insert counter itself (it only reads the
//! last value it is given) or anything outside `generator`.
//!
//! Each draw is `last - zipfian(last)`, where `last` is the newest acknowledged insert (the
//! [`AcknowledgedCounter`](super::AcknowledgedCounter)'s last value) and the zipfian grows
//! its item count incrementally as `last` grows. By default `eta` then keeps the initial item
//! count, as in YCSB ([`ZipfianEta::Ycsb`]); that is what gives YCSB's workload D its shape
//! (after growth, distances 2, 3, … are rare next to 0, 1 and 5–20).
//!
//! YCSB builds this zipfian with its constant θ = 0.99; the port takes θ from the workload
//! (0.99 unless set).

use super::zipfian::{ZipfianEta, ZipfianGenerator};
use crate::error::Result;
use crate::rng::Rng;

/// Zipfian distance back from the newest item.
#[derive(Clone, Debug)]
pub struct SkewedLatestGenerator {
    zipfian: ZipfianGenerator,
}

impl SkewedLatestGenerator {
    /// A generator whose basis currently has `last_value` as its newest item (YCSB builds the
    /// zipfian over `basis.lastValue()` items).
    pub fn new(last_value: u64, theta: f64) -> Result<Self> {
        let items = last_value.max(1);
        Ok(SkewedLatestGenerator {
            zipfian: ZipfianGenerator::new(0, items - 1, theta)?,
        })
    }

    /// The same generator with the zipfian's `eta` following growth as `mode` says.
    pub fn with_eta_mode(mut self, mode: ZipfianEta) -> Self {
        self.zipfian = self.zipfian.with_eta_mode(mode);
        self
    }

    /// The next item, given the basis's current last value. Always in `[0, last_value]`.
    #[inline]
    pub fn next_value(&mut self, last_value: u64, rng: &mut Rng) -> u64 {
        if last_value == 0 {
            return 0;
        }
        last_value - self.zipfian.next_long(last_value, rng)
    }
}
