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

use crate::generator::{fnv1a64, fnvhash64};

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

/// The fingerprint stored at the start of a value for `key`.
#[inline]
pub fn key_fingerprint(key: &[u8]) -> [u8; VALUE_HEADER_LEN] {
    fnv1a64(key).to_le_bytes()
}

/// Writes a value of `len` bytes for `key` into `out`: the key fingerprint, then `filler`
/// bytes (repeated if shorter than needed).
pub fn build_value(key: &[u8], len: usize, filler: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let fp = key_fingerprint(key);
    out.extend_from_slice(fp.get(..len.min(VALUE_HEADER_LEN)).unwrap_or(&[]));
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
