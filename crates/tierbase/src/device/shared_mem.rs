//! Copies into and out of memory that other threads may access at the same time (a mapped
//! region), without data races under Rust's memory model: every access is a relaxed atomic
//! load or store, word-wise where aligned and byte-wise at the edges. On x86-64 these compile to
//! plain moves; what a concurrent reader sees may be torn *between* words, which stores detect
//! with their own version checks.
//!
//! Owns: the only code that turns a region pointer into byte copies. Must not touch: anything
//! else — callers check bounds and keep the mapping alive.
//!
//! One caveat, stated honestly: stores also access some words of the same memory with 4-byte
//! atomics (record header words), and Rust's model does not define racing atomic accesses of
//! different sizes to overlapping bytes. Hardware does (each access is single-copy atomic at its
//! own size); the engine never relies on anything beyond that.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

const WORD: usize = 8;

/// Bytes before `p` reaches 8-byte alignment, at most `len`.
fn head_len(p: *const u8, len: usize) -> usize {
    ((WORD - (p as usize) % WORD) % WORD).min(len)
}

/// Copies `dst.len()` bytes from `src` into `dst`.
///
/// # Safety
/// `src..src + dst.len()` must be mapped, readable memory for the duration of the call, only
/// ever accessed atomically or through this module by others.
#[inline]
pub(crate) unsafe fn load(src: *const u8, dst: &mut [u8]) {
    if (src as usize).is_multiple_of(WORD) && dst.len().is_multiple_of(WORD) {
        // The common case (stores keep their records 8-aligned): whole words only, as one
        // load and one store each (a record read is on every get's path).
        let words = src.cast_mut().cast::<u64>();
        for (i, w) in dst.as_chunks_mut::<WORD>().0.iter_mut().enumerate() {
            // SAFETY: word `i` lies inside the caller's range (`dst.len()` bytes from `src`),
            // and `src` is 8-aligned.
            *w = unsafe { AtomicU64::from_ptr(words.add(i)) }
                .load(Ordering::Relaxed)
                .to_ne_bytes();
        }
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

/// Copies `src` to `dst`.
///
/// # Safety
/// `dst..dst + src.len()` must be mapped, writable memory for the duration of the call, only
/// ever accessed atomically or through this module by others.
#[inline]
pub(crate) unsafe fn store(dst: *mut u8, src: &[u8]) {
    if (dst as usize).is_multiple_of(WORD) && src.len().is_multiple_of(WORD) {
        let mut p = dst;
        for chunk in src.chunks_exact(WORD) {
            let mut v = [0u8; WORD];
            v.copy_from_slice(chunk);
            // SAFETY: 8 aligned bytes inside the caller's range.
            unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
                .store(u64::from_ne_bytes(v), Ordering::Relaxed);
            // SAFETY: at most one past the caller's range.
            p = unsafe { p.add(WORD) };
        }
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
}
