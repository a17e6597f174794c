//! Split-block Bloom filters of 128 bits, one per bucket (16 keys): the thesis' per-bucket
//! partitioned filter, after FastFilter's `simd-block` `MakeMask`. The upper 32 bits of a key's
//! hash are multiplied by four odd constants; the top five bits of each product choose one bit
//! in each of the four 32-bit lanes. With 16 keys per bucket the false-positive rate is about
//! (1 − (31/32)^16)^4 ≈ 2.5 %.
//!
//! Owns: the bit arithmetic. Must not touch: where filters are stored.

const SALTS: [u32; 4] = [0x47b6_137b, 0x4497_4d91, 0x8824_ad5b, 0xa2b7_289d];

/// The four lane bits of `hash`, as two words (lanes 0–1 in the first, 2–3 in the second).
#[inline]
pub fn mask(hash: u64) -> [u64; 2] {
    let h = (hash >> 32) as u32;
    let lane = |i: usize| 1u32 << (h.wrapping_mul(SALTS[i]) >> 27);
    [
        u64::from(lane(0)) | (u64::from(lane(1)) << 32),
        u64::from(lane(2)) | (u64::from(lane(3)) << 32),
    ]
}

/// Whether `filter` may contain `hash` (no false negatives).
#[inline]
pub fn may_contain(filter: [u64; 2], hash: u64) -> bool {
    let m = mask(hash);
    filter[0] & m[0] == m[0] && filter[1] & m[1] == m[1]
}

/// Adds `hash` to `filter`.
#[inline]
pub fn insert(filter: &mut [u64; 2], hash: u64) {
    let m = mask(hash);
    filter[0] |= m[0];
    filter[1] |= m[1];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::layout::hash_word;

    #[test]
    fn no_false_negatives_and_about_the_expected_false_positives() {
        let mut false_pos = 0u64;
        let trials = 2000u64;
        for t in 0..trials {
            let mut f = [0u64; 2];
            let keys: Vec<u64> = (0..16).map(|i| hash_word(t * 1000 + i)).collect();
            for &k in &keys {
                insert(&mut f, k);
            }
            for &k in &keys {
                assert!(may_contain(f, k));
            }
            for probe in 0..50 {
                if may_contain(f, hash_word(1 << 40 | (t * 50 + probe))) {
                    false_pos += 1;
                }
            }
        }
        let rate = false_pos as f64 / (trials * 50) as f64;
        assert!(rate > 0.01 && rate < 0.045, "false-positive rate {rate}");
        assert!(
            !may_contain([0, 0], hash_word(1)),
            "an empty filter holds nothing"
        );
    }
}
