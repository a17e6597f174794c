//! Copies into and out of memory that other threads may access at the same time (a mapped
//! region), without data races under Rust's memory model: every access is a relaxed atomic
//! load or store, word-wise where aligned and byte-wise at the edges. On x86-64 these compile to
//! plain moves; what a concurrent reader sees may be torn *between* words, which stores detect
//! with their own version checks.
//!
//! [`RacyView`] is the same for a buffer-pool frame that readers read without its latch
//! while its writers change it under the latch (optimistic reads).
//!
//! Owns: the only code that turns a region's or a mapped buffer's pointer into byte copies.
//! Must not touch: anything else — callers of the raw functions check bounds and keep the
//! mapping alive (a `RacyView` checks its own bounds and holds its mapping).
//!
//! One caveat, stated honestly: stores also access some words of the same memory with 4-byte
//! atomics (record header words), and Rust's model does not define racing atomic accesses of
//! different sizes to overlapping bytes. Hardware does (each access is single-copy atomic at its
//! own size); the engine never relies on anything beyond that.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const WORD: usize = 8;

/// Bytes before `p` reaches 8-byte alignment, at most `len`.
fn head_len(p: *const u8, len: usize) -> usize {
    ((WORD - (p as usize) % WORD) % WORD).min(len)
}

/// Read access to a buffer's bytes while other threads may change them with plain stores
/// under a latch the reader does not take (a buffer-pool frame read optimistically, validated
/// against the frame's version afterwards: `buffer::RacyPage`). Every read is bounds-checked
/// and made of atomic loads of aligned words, so it happens exactly once where the code says
/// (never elided, repeated or invented by the compiler), and each returns bytes some store
/// wrote. The writers' side is plain stores through the buffer's `&mut` slices: formally a
/// data race under Rust's memory model (the seqlock problem; Rust has no atomic `memcpy` yet),
/// which is why a value read here means nothing until its reader validates it.
///
/// Made by [`super::AlignedBuf::racy_view`]; it keeps the buffer's mapping mapped.
#[derive(Clone)]
pub struct RacyView {
    ptr: NonNull<u8>,
    len: usize,
    _mapping: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for RacyView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RacyView").field("len", &self.len).finish()
    }
}

// SAFETY: a view only reads, with atomic loads, memory its `Arc` keeps mapped.
unsafe impl Send for RacyView {}
// SAFETY: as above; shared use is reads only.
unsafe impl Sync for RacyView {}

impl RacyView {
    /// A view of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` must be 8-aligned and `ptr..ptr + len` mapped for as long as `mapping` lives;
    /// `len` a multiple of 8.
    pub(super) unsafe fn new(ptr: NonNull<u8>, len: usize, mapping: Arc<dyn Send + Sync>) -> Self {
        debug_assert!((ptr.as_ptr() as usize).is_multiple_of(WORD) && len.is_multiple_of(WORD));
        RacyView {
            ptr,
            len,
            _mapping: mapping,
        }
    }

    /// Bytes viewed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The aligned word at byte `w` (a multiple of 8 below `len`, checked by callers).
    #[inline(always)]
    fn word(&self, w: usize) -> u64 {
        debug_assert!(w.is_multiple_of(WORD) && w + WORD <= self.len);
        // SAFETY: `w + 8 <= len` and `w` 8-aligned (callers), the view's base 8-aligned and
        // mapped while `_mapping` lives (`new`'s contract).
        u64::from_le(
            unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(w).cast::<u64>()) }
                .load(Ordering::Relaxed),
        )
    }

    /// The `n` bytes (1–8) at `at` as a little-endian number, from the one or two aligned
    /// words that cover them; `None` past the end (or for another `n`).
    #[inline(always)]
    pub fn le_bytes(&self, at: usize, n: usize) -> Option<u64> {
        if !(1..=WORD).contains(&n) || at.checked_add(n).is_none_or(|end| end > self.len) {
            return None;
        }
        let (first, shift) = (at & !(WORD - 1), (at % WORD) * 8);
        let mut v = self.word(first) >> shift;
        if shift + n * 8 > 64 {
            // The bytes run into the next word, which `at + n <= len` puts inside the view
            // (`len` is a multiple of 8).
            v |= self.word(first + WORD) << (64 - shift);
        }
        Some(if n == WORD {
            v
        } else {
            v & ((1 << (n * 8)) - 1)
        })
    }

    /// Bytes `at..at + len`, copied (whole covering words) into `scratch`; `None` past the
    /// end.
    pub fn copy<'s>(&self, at: usize, len: usize, scratch: &'s mut Vec<u8>) -> Option<&'s [u8]> {
        let end = at.checked_add(len).filter(|&end| end <= self.len)?;
        let (first, last) = (at & !(WORD - 1), end.next_multiple_of(WORD));
        scratch.resize(last - first, 0);
        for (i, chunk) in scratch.chunks_exact_mut(WORD).enumerate() {
            chunk.copy_from_slice(&self.word(first + i * WORD).to_le_bytes());
        }
        Some(&scratch[at - first..at - first + len])
    }
}

/// Copies `dst.len()` bytes from `src` into `dst`.
///
/// # Safety
/// `src..src + dst.len()` must be mapped, readable memory for the duration of the call, only
/// ever accessed atomically or through this module by others.
#[inline]
pub(crate) unsafe fn load(src: *const u8, dst: &mut [u8]) {
    if (src as usize).is_multiple_of(WORD) && dst.len().is_multiple_of(WORD) {
        // The common case (stores keep their records 8-aligned): whole words only.
        // SAFETY: as the caller promised, and `src` is 8-aligned.
        unsafe { load_words(src, dst) };
        return;
    }
    let head = head_len(src, dst.len());
    let (head_bytes, rest) = dst.split_at_mut(head);
    for (i, d) in head_bytes.iter_mut().enumerate() {
        // SAFETY: inside the caller's range (i < head <= len).
        *d = unsafe { AtomicU8::from_ptr(src.add(i).cast_mut()) }.load(Ordering::Relaxed);
    }
    // SAFETY: head <= len: still inside (or at the end of) the caller's range.
    let mut p = unsafe { src.add(head) };
    let mut words = rest.chunks_exact_mut(WORD);
    for chunk in &mut words {
        // SAFETY: 8 bytes inside the caller's range, 8-aligned (`head` aligned it).
        let v = unsafe { AtomicU64::from_ptr(p.cast_mut().cast::<u64>()) }.load(Ordering::Relaxed);
        chunk.copy_from_slice(&v.to_ne_bytes());
        // SAFETY: at most one past the caller's range.
        p = unsafe { p.add(WORD) };
    }
    for (i, d) in words.into_remainder().iter_mut().enumerate() {
        // SAFETY: inside the caller's range (the tail after the last whole word).
        *d = unsafe { AtomicU8::from_ptr(p.add(i).cast_mut()) }.load(Ordering::Relaxed);
    }
}

/// Copies whole words: `src` 8-aligned, `dst.len()` a multiple of 8. Four words a round, so
/// that a record's copy is about two instructions a word (a get's copy is on its critical
/// path: the shorter it is, the sooner the next get's misses can start).
///
/// # Safety
/// As for [`load`], and `src` must be 8-aligned.
#[inline]
pub(crate) unsafe fn load_words(src: *const u8, dst: &mut [u8]) {
    debug_assert!((src as usize).is_multiple_of(WORD) && dst.len().is_multiple_of(WORD));
    let words = src.cast_mut().cast::<u64>();
    let word = |i: usize| {
        // SAFETY: every `i` passed below is below `dst.len() / 8`, so word `i` lies inside
        // the caller's range; `src` is 8-aligned.
        unsafe { AtomicU64::from_ptr(words.add(i)) }.load(Ordering::Relaxed)
    };
    let (rounds, tail) = dst.as_chunks_mut::<{ 4 * WORD }>();
    for (r, out) in rounds.iter_mut().enumerate() {
        let i = 4 * r;
        let (a, b, c, d) = (word(i), word(i + 1), word(i + 2), word(i + 3));
        out[..8].copy_from_slice(&a.to_ne_bytes());
        out[8..16].copy_from_slice(&b.to_ne_bytes());
        out[16..24].copy_from_slice(&c.to_ne_bytes());
        out[24..].copy_from_slice(&d.to_ne_bytes());
    }
    let first = 4 * rounds.len();
    for (i, w) in tail.as_chunks_mut::<WORD>().0.iter_mut().enumerate() {
        *w = word(first + i).to_ne_bytes();
    }
}

/// Whether the `key.len()` bytes at `src` equal `key`; only if they do, copies the
/// `dst.len()` bytes at `src + value_at` into `dst` (a record's key checked in place and its
/// value copied straight out, with no staging copy).
///
/// # Safety
/// `src..src + max(key.len(), value_at + dst.len())` must be mapped, readable memory for the
/// duration of the call, only ever accessed atomically or through this module by others.
#[inline]
pub(crate) unsafe fn load_if_equal(
    src: *const u8,
    key: &[u8],
    value_at: usize,
    dst: &mut [u8],
) -> bool {
    let aligned = (src as usize).is_multiple_of(WORD)
        && key.len().is_multiple_of(WORD)
        && value_at.is_multiple_of(WORD)
        && dst.len().is_multiple_of(WORD);
    if aligned {
        let words = src.cast_mut().cast::<u64>();
        for (i, k) in key.as_chunks::<WORD>().0.iter().enumerate() {
            // SAFETY: word `i` lies inside the key's range, 8-aligned.
            let w = unsafe { AtomicU64::from_ptr(words.add(i)) }.load(Ordering::Relaxed);
            if w != u64::from_ne_bytes(*k) {
                return false;
            }
        }
        // SAFETY: the value's range is inside the caller's and 8-aligned.
        unsafe { load_words(src.add(value_at), dst) };
        return true;
    }
    let mut chunk = [0u8; 64];
    let mut at = 0;
    while at < key.len() {
        let n = (key.len() - at).min(chunk.len());
        // SAFETY: inside the key's range.
        unsafe { load(src.add(at), &mut chunk[..n]) };
        if chunk[..n] != key[at..at + n] {
            return false;
        }
        at += n;
    }
    // SAFETY: inside the caller's range.
    unsafe { load(src.add(value_at), dst) };
    true
}

/// Copies `src` to `dst`.
///
/// # Safety
/// `dst..dst + src.len()` must be mapped, writable memory for the duration of the call, only
/// ever accessed atomically or through this module by others.
#[inline]
pub(crate) unsafe fn store(dst: *mut u8, src: &[u8]) {
    if (dst as usize).is_multiple_of(WORD) && src.len().is_multiple_of(WORD) {
        // The common case (stores keep their records 8-aligned): whole words only.
        // SAFETY: as the caller promised, and `dst` is 8-aligned.
        unsafe { store_words(dst, src) };
        return;
    }
    let head = head_len(dst, src.len());
    let (head_bytes, rest) = src.split_at(head);
    for (i, &b) in head_bytes.iter().enumerate() {
        // SAFETY: inside the caller's range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(b, Ordering::Relaxed);
    }
    // SAFETY: head <= len: still inside (or at the end of) the caller's range.
    let mut p = unsafe { dst.add(head) };
    let mut words = rest.chunks_exact(WORD);
    for chunk in &mut words {
        let mut v = [0u8; WORD];
        v.copy_from_slice(chunk);
        // SAFETY: 8 bytes inside the caller's range, 8-aligned.
        unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
            .store(u64::from_ne_bytes(v), Ordering::Relaxed);
        // SAFETY: at most one past the caller's range.
        p = unsafe { p.add(WORD) };
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        // SAFETY: inside the caller's range.
        unsafe { AtomicU8::from_ptr(p.add(i)) }.store(b, Ordering::Relaxed);
    }
}

/// Copies whole words: `dst` 8-aligned, `src.len()` a multiple of 8. Four words a round, as
/// [`load_words`] (a record's copy is on every insert's path).
///
/// # Safety
/// As for [`store`], with `dst` 8-aligned.
#[inline]
unsafe fn store_words(dst: *mut u8, src: &[u8]) {
    debug_assert!((dst as usize).is_multiple_of(WORD) && src.len().is_multiple_of(WORD));
    let words = dst.cast::<u64>();
    let put = |i: usize, bytes: &[u8; WORD]| {
        // SAFETY: every `i` passed below is below `src.len() / 8`, so word `i` lies inside
        // the caller's range; `dst` is 8-aligned.
        unsafe { AtomicU64::from_ptr(words.add(i)) }
            .store(u64::from_ne_bytes(*bytes), Ordering::Relaxed);
    };
    let (rounds, tail) = src.as_chunks::<{ 4 * WORD }>();
    for (r, round) in rounds.iter().enumerate() {
        let (w, _) = round.as_chunks::<WORD>();
        let i = 4 * r;
        put(i, &w[0]);
        put(i + 1, &w[1]);
        put(i + 2, &w[2]);
        put(i + 3, &w[3]);
    }
    let first = 4 * rounds.len();
    for (i, w) in tail.as_chunks::<WORD>().0.iter().enumerate() {
        put(first + i, w);
    }
}

/// Sets `len` bytes at `dst` to `byte`.
///
/// # Safety
/// As for [`store`].
pub(crate) unsafe fn fill(dst: *mut u8, len: usize, byte: u8) {
    let head = head_len(dst, len);
    let words = (len - head) / WORD;
    let word = u64::from_ne_bytes([byte; WORD]);
    for i in 0..head {
        // SAFETY: inside the caller's range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Ordering::Relaxed);
    }
    for w in 0..words {
        // SAFETY: inside the caller's range and 8-aligned.
        unsafe { AtomicU64::from_ptr(dst.add(head + w * WORD).cast::<u64>()) }
            .store(word, Ordering::Relaxed);
    }
    for i in head + words * WORD..len {
        // SAFETY: inside the caller's range.
        unsafe { AtomicU8::from_ptr(dst.add(i)) }.store(byte, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view reads a carved buffer's bytes across word boundaries, never past its end, and
    /// keeps the mapping alive after the buffers are gone; a heap buffer has no view.
    #[test]
    fn racy_views_read_within_their_buffer_only() {
        use crate::device::AlignedBuf;
        let mut bufs = AlignedBuf::carve(4096, 2, false).unwrap();
        bufs[1][4090..].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        let v = bufs[1].racy_view().expect("a carved buffer has a view");
        assert_eq!(v.len(), 4096);
        assert_eq!(v.le_bytes(4094, 2), Some(0x0605));
        assert_eq!(
            v.le_bytes(4087, 5),
            Some(0x02_0100_0000),
            "across two words"
        );
        assert_eq!(v.le_bytes(4088, 8), Some(0x0605_0403_0201_0000));
        assert_eq!(v.le_bytes(4090, 8), None);
        assert_eq!(v.le_bytes(usize::MAX, 1), None);
        assert_eq!(v.le_bytes(4080, 9), None, "more than a word");
        assert_eq!(v.le_bytes(0, 0), None);
        let mut scratch = Vec::new();
        assert_eq!(v.copy(4091, 5, &mut scratch), Some(&[2, 3, 4, 5, 6][..]));
        assert_eq!(v.copy(4091, 6, &mut scratch), None);
        drop(bufs);
        assert_eq!(
            v.le_bytes(4094, 2),
            Some(0x0605),
            "the view keeps the mapping"
        );
        assert!(AlignedBuf::new(4096).unwrap().racy_view().is_none());
    }

    #[test]
    fn copies_every_alignment_and_length() {
        let mut mem = vec![0u64; 16]; // 128 aligned bytes
        let base = mem.as_mut_ptr().cast::<u8>();
        for start in 0..9 {
            for len in 0..40 {
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + start + 1) as u8).collect();
                // SAFETY: start + len <= 48 < 128 bytes of `mem`, which nothing else touches.
                unsafe {
                    fill(base, 128, 0xEE);
                    store(base.add(start), &src);
                }
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { load(base.add(start), &mut back) };
                assert_eq!(back, src, "start {start} len {len}");
                let mut around = vec![0u8; 128];
                // SAFETY: the whole buffer.
                unsafe { load(base, &mut around) };
                assert!(around[..start].iter().all(|&b| b == 0xEE));
                assert!(around[start + len..].iter().all(|&b| b == 0xEE));
            }
        }
    }

    #[test]
    fn a_value_is_copied_only_behind_its_key() {
        let mut mem = vec![0u64; 64]; // 512 aligned bytes
        let base = mem.as_mut_ptr().cast::<u8>();
        let bytes: Vec<u8> = (0..512).map(|i| (i * 13 + 5) as u8).collect();
        // SAFETY: the whole buffer, which nothing else touches.
        unsafe { store(base, &bytes) };
        for start in [0usize, 3, 8] {
            for klen in [1usize, 8, 16, 20, 100] {
                for (value_at, vlen) in [(klen, 3), (klen.next_multiple_of(8), 200), (128, 96)] {
                    let vat = value_at.max(klen);
                    let key = &bytes[start..start + klen];
                    let mut out = vec![0u8; vlen];
                    // SAFETY: start + vat + vlen < 512.
                    assert!(unsafe { load_if_equal(base.add(start), key, vat, &mut out) });
                    assert_eq!(out, &bytes[start + vat..start + vat + vlen]);
                    let mut other = key.to_vec();
                    *other.last_mut().unwrap() ^= 1;
                    let mut untouched = vec![0xAAu8; vlen];
                    // SAFETY: as above.
                    assert!(!unsafe {
                        load_if_equal(base.add(start), &other, vat, &mut untouched)
                    });
                    assert!(
                        untouched.iter().all(|&b| b == 0xAA),
                        "copied behind a wrong key"
                    );
                }
            }
        }
    }
}
