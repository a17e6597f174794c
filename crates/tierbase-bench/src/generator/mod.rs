//! YCSB's number generators, reproduced from the original Java (`site.ycsb.generator`).
//!
//! Owns: [`ZipfianGenerator`] (Gray et al.'s method with YCSB's incremental zeta; how `eta`
//! follows a growing item count is a [`ZipfianEta`], YCSB's own by default),
//! [`ScrambledZipfianGenerator`] (zipfian over 10^10 items, FNV-hashed into the item space),
//! [`SkewedLatestGenerator`] (zipfian distance from the newest insert), [`UniformGenerator`],
//! [`DiscreteGenerator`] (operation chooser), the insert counters ([`CounterGenerator`],
//! [`AcknowledgedCounter`]) and YCSB's [`fnvhash64`]. Must not touch: keys, values or stores
//! (see `workload`).
//!
//! Every generator takes the random source as an argument, so a worker thread owns its
//! generators and its [`Rng`](crate::rng::Rng) and the sequence is a function of the seed.

mod counter;
mod discrete;
mod latest;
mod scrambled;
mod uniform;
mod zipfian;

pub use counter::{AcknowledgedCounter, CounterGenerator};
pub use discrete::DiscreteGenerator;
pub use latest::SkewedLatestGenerator;
pub use scrambled::{SCRAMBLED_ITEM_COUNT, SCRAMBLED_ZETAN_099, ScrambledZipfianGenerator};
pub use uniform::UniformGenerator;
pub use zipfian::{YCSB_ZIPFIAN_CONSTANT, ZipfianEta, ZipfianGenerator, zeta, zeta_range};

/// FNV-1a 64-bit offset basis (YCSB `Utils.FNV_OFFSET_BASIS_64`).
pub const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
/// FNV 64-bit prime (YCSB `Utils.FNV_PRIME_64`).
pub const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64(long)`: FNV-1a over the eight low-to-high bytes of `val`, then
/// `Math.abs` of the signed result (which, as in Java, leaves `i64::MIN` negative).
pub fn fnvhash64(val: i64) -> i64 {
    let mut v = val;
    let mut hash = FNV_OFFSET_BASIS_64 as i64;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8; // arithmetic shift, as Java's `>>`
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64 as i64);
    }
    hash.wrapping_abs()
}

/// Plain FNV-1a 64 over bytes (used for value fingerprints and tests).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS_64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_constants_match_the_reference_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn fnvhash64_is_fnv1a_of_the_little_endian_bytes() {
        for v in [0i64, 1, 2, 255, 1 << 40, 123_456_789] {
            let expect = (fnv1a64(&v.to_le_bytes()) as i64).wrapping_abs();
            assert_eq!(fnvhash64(v), expect);
        }
        // The first YCSB key, "user6284781860667377211", is fnvhash64(0).
        assert_eq!(fnvhash64(0), 6_284_781_860_667_377_211);
        assert_eq!(fnvhash64(1), 8_517_097_267_634_966_620);
        assert_eq!(fnvhash64(2), 1_820_151_046_732_198_393);
    }
}
