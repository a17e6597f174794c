//! Key and value encoding.
//!
//! Owns: how a key number becomes key bytes and what a value contains. Must not touch: which
//! key numbers are chosen (see `ops` and `generator`).
//!
//! **Keys** follow YCSB's `buildKeyName` with `insertorder=hashed`: the key number is hashed
//! with [`fnvhash64`] so that consecutive inserts and zipfian hot keys are spread over the key
//! space, then written as `user<number>`. The number is zero-padded to exactly `key_size`
//! bytes (YCSB's `zeropadding = key_size - 4`), so keys of [`TEXT_KEY_MIN_SIZE`] (23) bytes or
//! more are exactly YCSB's names (`user6284781860667377211` is key number 0). Smaller keys
//! (down to [`MIN_KEY_SIZE`] = 8) cannot hold the decimal name; they are the 8-byte big-endian
//! hashed number, zero-padded, which keeps the same order and spread.
//!
//! **Values** start with an [`VALUE_HEADER_LEN`]-byte fingerprint of their key (FNV-1a, little
//! endian) followed by random filler. Reads check the fingerprint, so a store that returns the
//! wrong record is caught; the result file counts such `verify_failures`.

use crate::generator::{FNV_OFFSET_BASIS_64, FNV_PRIME_64, fnv1a64, fnvhash64};

/// The prefix of YCSB key names.
pub const YCSB_KEY_PREFIX: &[u8] = b"user";
/// Smallest key size holding every YCSB key name (`user` + 19 digits).
pub const TEXT_KEY_MIN_SIZE: usize = 23;
/// Smallest key size accepted (the binary form).
pub const MIN_KEY_SIZE: usize = 8;
/// Bytes at the start of every value used for the key fingerprint.
pub const VALUE_HEADER_LEN: usize = 8;

/// YCSB's hashed key number for `keynum` (`Utils.hash`, i.e. [`fnvhash64`]).
#[inline]
pub fn hashed_key_number(keynum: u64) -> u64 {
    fnvhash64(keynum as i64).unsigned_abs()
}

/// Writes the key for `keynum` into `out` (replacing its contents): exactly `key_size` bytes
/// when `key_size >= MIN_KEY_SIZE`.
pub fn build_key(keynum: u64, key_size: usize, out: &mut Vec<u8>) {
    out.clear();
    let number = hashed_key_number(keynum);
    if key_size >= TEXT_KEY_MIN_SIZE {
        let mut digits = [0u8; 20];
        let mut n = number;
        let mut len = 0;
        loop {
            if let Some(d) = digits.get_mut(len) {
                *d = b'0' + (n % 10) as u8;
            }
            len += 1;
            n /= 10;
            if n == 0 || len == digits.len() {
                break;
            }
        }
        out.extend_from_slice(YCSB_KEY_PREFIX);
        let pad = key_size.saturating_sub(YCSB_KEY_PREFIX.len() + len);
        out.resize(out.len() + pad, b'0');
        out.extend(digits.iter().take(len).rev());
    } else {
        out.extend_from_slice(&number.to_be_bytes());
        out.resize(key_size.max(8), 0);
    }
}

/// Builds the keys of one key size into one buffer, and their value fingerprints: the same
/// bytes as [`build_key`] and the same fingerprint as [`key_fingerprint`], for less work per
/// key — the parts every key of the size shares are written, and hashed, once:
/// - binary keys are the 8 bytes of the hashed number then zeros, so only those 8 bytes are
///   written, and FNV-1a over the zeros (each a multiplication by the FNV prime) is one
///   multiplication by the prime's power;
/// - YCSB names are `user` then the number zero-padded to the key size; a number has at most
///   19 digits, so only the last 20 bytes (or all of them, for shorter padding) change, are
///   written (two digits at a time) and hashed, from the hash state of the fixed prefix.
#[derive(Clone, Debug)]
pub struct KeyBuilder {
    key: Vec<u8>,
    text: bool,
    /// Where the bytes rewritten for each key start.
    tail: usize,
    /// FNV-1a state after `key[..tail]` (text keys).
    prefix_state: u64,
    /// FNV prime to the power of the zero bytes after the number (binary keys).
    zeros_factor: u64,
}

/// Bytes of the decimal number field rewritten for each text key (`u64` has at most 20 digits).
const TEXT_TAIL: usize = 20;

/// `"00" "01" … "99"`.
const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

impl KeyBuilder {
    /// A builder of keys of `key_size` bytes (as [`build_key`]: at least [`MIN_KEY_SIZE`]).
    pub fn new(key_size: usize) -> Self {
        let text = key_size >= TEXT_KEY_MIN_SIZE;
        let mut key;
        let tail;
        if text {
            key = YCSB_KEY_PREFIX.to_vec();
            key.resize(key_size, b'0');
            tail = key_size - TEXT_TAIL.min(key_size - YCSB_KEY_PREFIX.len());
        } else {
            key = vec![0; key_size.max(8)];
            tail = 0;
        }
        let zeros = key.len() as u64 - 8;
        let mut zeros_factor = 1u64;
        for _ in 0..zeros {
            zeros_factor = zeros_factor.wrapping_mul(FNV_PRIME_64);
        }
        let prefix_state = fnv1a64(key.get(..tail).unwrap_or(&[]));
        KeyBuilder {
            key,
            text,
            tail,
            prefix_state,
            zeros_factor,
        }
    }

    /// The key built last.
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Builds the key of `keynum` (see [`build_key`]); [`key`](Self::key) returns it.
    #[inline]
    pub fn build(&mut self, keynum: u64) {
        let number = hashed_key_number(keynum);
        if self.text {
            let mut digits = [b'0'; TEXT_TAIL];
            write_decimal(number, &mut digits);
            let tail = self.key.get_mut(self.tail..).unwrap_or(&mut []);
            let skip = TEXT_TAIL - tail.len();
            tail.copy_from_slice(digits.get(skip..).unwrap_or(&[]));
        } else if let Some(head) = self.key.get_mut(..8) {
            head.copy_from_slice(&number.to_be_bytes());
        }
    }

    /// The fingerprint of the key built last (see [`key_fingerprint`]).
    #[inline]
    pub fn fingerprint(&self) -> [u8; VALUE_HEADER_LEN] {
        let hash = if self.text {
            fnv1a64_from(self.prefix_state, self.key.get(self.tail..).unwrap_or(&[]))
        } else {
            fnv1a64_from(FNV_OFFSET_BASIS_64, self.key.get(..8).unwrap_or(&[]))
                .wrapping_mul(self.zeros_factor)
        };
        hash.to_le_bytes()
    }
}

/// Writes `n` in decimal, right-aligned and zero-padded, into `out` (20 digits fit any `u64`).
#[inline]
fn write_decimal(n: u64, out: &mut [u8; TEXT_TAIL]) {
    // Three independent chunks (4 + 8 + 8 digits), two digits at a time.
    let chunks = [
        (n / 10_000_000_000_000_000) as u32,
        ((n / 100_000_000) % 100_000_000) as u32,
        (n % 100_000_000) as u32,
    ];
    let mut pos = TEXT_TAIL;
    for (i, &chunk) in chunks.iter().enumerate().rev() {
        let mut c = chunk;
        for _ in 0..if i == 0 { 2 } else { 4 } {
            let pair = (c % 100) as usize * 2;
            c /= 100;
            pos -= 2;
            if let (Some(dst), Some(src)) =
                (out.get_mut(pos..pos + 2), DIGIT_PAIRS.get(pair..pair + 2))
            {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// FNV-1a over `bytes`, continuing from `state`.
#[inline]
fn fnv1a64_from(state: u64, bytes: &[u8]) -> u64 {
    let mut hash = state;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    hash
}

/// The fingerprint stored at the start of a value for `key`.
#[inline]
pub fn key_fingerprint(key: &[u8]) -> [u8; VALUE_HEADER_LEN] {
    fnv1a64(key).to_le_bytes()
}

/// Writes a value of `len` bytes for `key` into `out`: the key fingerprint, then `filler`
/// bytes (repeated if shorter than needed).
pub fn build_value(key: &[u8], len: usize, filler: &[u8], out: &mut Vec<u8>) {
    build_value_with_fingerprint(key_fingerprint(key), len, filler, out);
}

/// [`build_value`] for a key whose fingerprint is `fingerprint`.
#[inline]
pub fn build_value_with_fingerprint(
    fingerprint: [u8; VALUE_HEADER_LEN],
    len: usize,
    filler: &[u8],
    out: &mut Vec<u8>,
) {
    out.clear();
    let head = len.min(VALUE_HEADER_LEN);
    out.extend_from_slice(fingerprint.get(..head).unwrap_or(&[]));
    if let Some(body) = filler.get(..len - head) {
        out.extend_from_slice(body); // the usual case: the filler is long enough
        return;
    }
    while out.len() < len {
        if filler.is_empty() {
            out.resize(len, 0);
            break;
        }
        let take = (len - out.len()).min(filler.len());
        out.extend_from_slice(filler.get(..take).unwrap_or(&[]));
    }
}

/// Whether `value` carries the fingerprint of `key`.
#[inline]
pub fn value_matches_key(key: &[u8], value: &[u8]) -> bool {
    value.get(..VALUE_HEADER_LEN) == Some(&key_fingerprint(key)[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycsb_key_names() {
        let mut k = Vec::new();
        build_key(0, 23, &mut k);
        assert_eq!(k, b"user6284781860667377211");
        build_key(1, 23, &mut k);
        assert_eq!(k, b"user8517097267634966620");
        build_key(2, 24, &mut k);
        assert_eq!(k, b"user01820151046732198393");
    }

    #[test]
    fn binary_keys_have_the_size_and_order_of_the_hash() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        build_key(0, 16, &mut a);
        build_key(2, 16, &mut b);
        assert_eq!(a.len(), 16);
        assert_eq!(
            a.get(..8),
            Some(&6_284_781_860_667_377_211u64.to_be_bytes()[..])
        );
        assert!(b < a, "1820… sorts before 6284…");
    }

    #[test]
    fn key_builder_matches_build_key_and_key_fingerprint() {
        let mut rng = crate::rng::Rng::from_seed(5);
        let mut expected = Vec::new();
        for key_size in (1..=48).chain([64, 100, 1000]) {
            let mut b = KeyBuilder::new(key_size);
            let special = [0, 1, 2, 9, 10, 99, 100, u64::MAX, 1 << 63];
            for keynum in special
                .into_iter()
                .chain((0..300).map(|_| rng.next_u64() >> (rng.next_u64() % 64)))
            {
                b.build(keynum);
                let fp = b.fingerprint();
                build_key(keynum, key_size, &mut expected);
                assert_eq!(b.key(), &expected[..], "size {key_size}, keynum {keynum}");
                assert_eq!(
                    fp,
                    key_fingerprint(&expected),
                    "size {key_size}, keynum {keynum}"
                );
            }
        }
    }

    #[test]
    fn decimal_digits_are_zero_padded() {
        let mut d = [0u8; TEXT_TAIL];
        write_decimal(0, &mut d);
        assert_eq!(&d, b"00000000000000000000");
        write_decimal(1_234_567_890_123, &mut d);
        assert_eq!(&d, b"00000001234567890123");
        write_decimal(u64::MAX, &mut d);
        assert_eq!(&d, b"18446744073709551615");
    }

    #[test]
    fn values_carry_the_fingerprint() {
        let mut v = Vec::new();
        build_value(b"user1", 100, b"xyz", &mut v);
        assert_eq!(v.len(), 100);
        assert!(value_matches_key(b"user1", &v));
        assert!(!value_matches_key(b"user2", &v));
        build_value(b"k", 8, &[], &mut v);
        assert_eq!(v.len(), 8);
        assert!(value_matches_key(b"k", &v));
    }
}
