//! A directory entry's filters: per-bucket Bloom filters in one 256-byte block, split so that
//! a probe reads one cache line. The block is four 64-byte lines; each line has a 32-bit lane
//! per bucket (16 lanes). A key hash `h` picks a line with the top two bits of `x = h >> 32`
//! and sets three bits in its bucket's lane of that line, each chosen by the top five bits of
//! `x` times an odd salt (FastFilter's `simd-block` `MakeMask`). A probe loads the one line and
//! tests all 16 buckets at once; a bucket of 16 keys has about 4 in each line, so about
//! (1 − (31/32)^12)^3 ≈ 3 % false positives per bucket.
//!
//! Why not the thesis' 128 bits per bucket: a negative probe of an entry then reads all 16
//! filters — four cache lines — and every lookup makes one such probe on each level above the
//! key's (measured: 13 % of a lookup's cycles in filter reads, before this layout).
//!
//! Owns: the bit arithmetic. Must not touch: where filters are stored.

/// Lanes (32-bit words) of a filter block: 4 lines × 16 buckets.
pub const LANES: usize = 64;

const SALTS: [u32; 3] = [0x47b6_137b, 0x4497_4d91, 0x8824_ad5b];

/// The line (0..4) and the lane bits of `hash`.
#[inline]
pub fn line_and_bits(hash: u64) -> (usize, u32) {
    let x = (hash >> 32) as u32;
    let bits = SALTS
        .iter()
        .fold(0u32, |m, &s| m | (1u32 << (x.wrapping_mul(s) >> 27)));
    ((x >> 30) as usize, bits)
}

/// Adds `hash`, kept in bucket `bucket`, to the block `lanes` (lane `16·line + bucket`).
#[inline]
pub fn insert(lanes: &mut [u32; LANES], bucket: usize, hash: u64) {
    let (line, bits) = line_and_bits(hash);
    lanes[16 * line + bucket] |= bits;
}

/// Bit `b` set where bucket `b` may hold `hash`, from `hash`'s line as eight words (lane `b`
/// is half `b % 2` of word `b / 2`, as the line lies in memory).
#[inline]
pub fn probe(line: &[u64; 8], bits: u32) -> u16 {
    crate::device::lanes_containing(line, bits)
}

/// The buckets among an entry's first `buckets` (at most 16) that may hold the hash whose
/// filter line is `line`, as a mask (bit `b`: bucket `b`).
#[inline]
pub fn candidate_mask(line: &[u64; 8], bits: u32, buckets: usize) -> u16 {
    probe(line, bits) & ((1u32 << buckets) - 1) as u16
}

/// The buckets of mask `maybe`, highest (newest records) first.
#[inline]
pub fn buckets_of(mut maybe: u16) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (maybe != 0).then(|| {
            let b = 15 - maybe.leading_zeros() as usize;
            maybe &= !(1 << b);
            b
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::layout::hash_word;

    /// A line of a block as [`probe`] takes it.
    fn line_words(lanes: &[u32; LANES], line: usize) -> [u64; 8] {
        std::array::from_fn(|k| {
            u64::from(lanes[16 * line + 2 * k]) | (u64::from(lanes[16 * line + 2 * k + 1]) << 32)
        })
    }

    #[test]
    fn no_false_negatives_and_about_the_expected_false_positives() {
        let mut false_pos = 0u64;
        let mut probes = 0u64;
        let trials = 500u64;
        for t in 0..trials {
            let mut block = [0u32; LANES];
            // A full entry: 16 buckets of 16 keys.
            let keys: Vec<u64> = (0..256).map(|i| hash_word(t * 1000 + i)).collect();
            for (i, &k) in keys.iter().enumerate() {
                insert(&mut block, i / 16, k);
            }
            for (i, &k) in keys.iter().enumerate() {
                let (line, bits) = line_and_bits(k);
                assert!(
                    probe(&line_words(&block, line), bits) & (1 << (i / 16)) != 0,
                    "false negative"
                );
            }
            for p in 0..50 {
                let (line, bits) = line_and_bits(hash_word(1 << 40 | (t * 50 + p)));
                false_pos += u64::from(probe(&line_words(&block, line), bits).count_ones());
                probes += 16;
            }
        }
        let rate = false_pos as f64 / probes as f64;
        assert!(
            rate > 0.01 && rate < 0.06,
            "false-positive rate per bucket {rate}"
        );
        assert_eq!(probe(&[0; 8], line_and_bits(hash_word(1)).1), 0);
    }
}
