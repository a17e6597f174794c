//! YCSB's `ScrambledZipfianGenerator`: zipfian popularity, with the popular items spread over
//! the item space by hashing.
//!
//! Owns: this one generator. Must not touch: anything outside `generator`.
//!
//! A zipfian value is drawn over a fixed space of 10^10 items and mapped into `[min, max]` by
//! `min + fnvhash64(value) % itemcount`, so the hottest keys are scattered rather than clustered
//! at the start of the key space, and the popularity of a given item does not change when the
//! item space is resized. For θ = 0.99 YCSB's precomputed zeta is used; other θ compute it (fast,
//! see `zipfian`).

use super::fnvhash64;
use super::zipfian::{YCSB_ZIPFIAN_CONSTANT, ZipfianGenerator};
use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// YCSB `ScrambledZipfianGenerator.ITEM_COUNT`: the size of the underlying zipfian space.
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB `ScrambledZipfianGenerator.ZETAN`: zeta(10^10, 0.99).
pub const SCRAMBLED_ZETAN_099: f64 = 26.469_028_201_783_02;

/// Zipfian-popular items scattered over `[min, max]` by FNV hashing.
#[derive(Clone, Debug)]
pub struct ScrambledZipfianGenerator {
    min: u64,
    item_count: u64,
    zipfian: ZipfianGenerator,
}

impl ScrambledZipfianGenerator {
    /// A generator over `[min, max]` (inclusive) with zipfian constant `theta`.
    pub fn new(min: u64, max: u64, theta: f64) -> Result<Self> {
        if max < min {
            return Err(BenchError::invalid(format!(
                "scrambled zipfian range is empty: min {min} > max {max}"
            )));
        }
        let zipfian = if theta == YCSB_ZIPFIAN_CONSTANT {
            ZipfianGenerator::with_zetan(0, SCRAMBLED_ITEM_COUNT, theta, SCRAMBLED_ZETAN_099)?
        } else {
            ZipfianGenerator::new(0, SCRAMBLED_ITEM_COUNT, theta)?
        };
        Ok(ScrambledZipfianGenerator {
            min,
            item_count: max - min + 1,
            zipfian,
        })
    }

    /// Number of items in `[min, max]`.
    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// The next item.
    #[inline]
    pub fn next_value(&mut self, rng: &mut Rng) -> u64 {
        let rank = self.zipfian.next_value(rng);
        self.min + fnvhash64(rank as i64).unsigned_abs() % self.item_count
    }
}
