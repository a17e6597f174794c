//! Deterministic pseudo-random numbers for workloads.
//!
//! Owns: [`Rng`] (xoshiro256**) and the derivation of independent per-thread, per-phase streams
//! from one user seed ([`Rng::derive`], via SplitMix64). Written here rather than taken from a
//! crate so that a seed gives the same operation sequence in every future build: the algorithm
//! is part of the result file's meaning. Must not touch: anything about workloads.

/// SplitMix64 step: the standard seeder for the xoshiro family.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** generator (Blackman & Vigna): fast, 256-bit state, good statistical quality.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// A generator seeded from `seed` through SplitMix64.
    pub fn from_seed(seed: u64) -> Self {
        let mut sm = seed;
        let mut state = [0u64; 4];
        for word in &mut state {
            *word = splitmix64(&mut sm);
        }
        if state == [0; 4] {
            state[0] = 1; // the all-zero state is a fixed point
        }
        Rng { state }
    }

    /// An independent stream for (`stream`, `index`) derived from the user `seed`: for example
    /// stream "run phase", index = worker thread. Different inputs give unrelated sequences.
    pub fn derive(seed: u64, stream: u64, index: u64) -> Self {
        let mut sm = seed;
        let a = splitmix64(&mut sm);
        let mut sm = a ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let b = splitmix64(&mut sm);
        let mut sm = b ^ index.wrapping_mul(0xABC9_8388_FB8F_AC03);
        Rng::from_seed(splitmix64(&mut sm))
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// A uniform double in `[0, 1)` with 53 random bits (like Java's `nextDouble`).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `[0, n)` (Lemire's multiply-shift; bias below 2^-64 · n). Returns 0
    /// when `n` is 0.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Fills `buf` with random bytes.
    pub fn fill_bytes(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            let n = chunk.len();
            chunk.copy_from_slice(bytes.get(..n).unwrap_or(&[]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values_are_stable() {
        // xoshiro256** seeded with state {1, 2, 3, 4} gives 11520, 0, 1509978240, ...
        let mut r = Rng {
            state: [1, 2, 3, 4],
        };
        assert_eq!(r.next_u64(), 11520);
        assert_eq!(r.next_u64(), 0);
        assert_eq!(r.next_u64(), 1_509_978_240);
        assert_eq!(r.next_u64(), 1_215_971_899_390_074_240);
    }

    #[test]
    fn derived_streams_differ_and_repeat() {
        let a: Vec<u64> = {
            let mut r = Rng::derive(7, 1, 0);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Rng::derive(7, 1, 1);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let a2: Vec<u64> = {
            let mut r = Rng::derive(7, 1, 0);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_ne!(a, b);
        assert_eq!(a, a2);
    }

    #[test]
    fn below_and_f64_stay_in_range() {
        let mut r = Rng::from_seed(3);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            let f = r.next_f64();
            assert!((0.0..1.0).contains(&f));
        }
        assert_eq!(r.below(0), 0);
        let mut buf = [0u8; 13];
        r.fill_bytes(&mut buf);
        assert!(buf.iter().any(|&b| b != 0));
    }
}
