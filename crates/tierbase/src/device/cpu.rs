//! CPU cache-line flush, fence and non-temporal store primitives.
//!
//! Owns: the choice of flush instruction (once, by CPUID) and the few instructions that move
//! data from the CPU caches to the persistence domain. Must not touch: files, mappings, counters
//! (callers count). Everything here works on raw addresses the caller guarantees are mapped.
//!
//! On x86-64 the best instruction is `clwb` (write back, keep the line), else `clflushopt`
//! (write back and invalidate, weakly ordered), else `clflush` (strongly ordered). All three are
//! made durable by a following `sfence`. Other architectures fall back to a full memory fence;
//! stores there rely on `msync` for durability.

use std::fmt;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// Size of a CPU cache line, the unit of flushing.
pub const CACHE_LINE: usize = 64;

/// The runs of adjacent lines in `within` for which `set` holds, in order: what a caller
/// flushes, copies or charges one operation per run for (a page's changed, missing or first
/// touched lines).
pub fn line_runs(
    within: std::ops::Range<usize>,
    set: impl Fn(usize) -> bool,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let (mut l, end) = (within.start, within.end);
    std::iter::from_fn(move || {
        while l < end && !set(l) {
            l += 1;
        }
        let start = l;
        while l < end && set(l) {
            l += 1;
        }
        (start < l).then_some(start..l)
    })
}

/// A cache-line flush instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushInstruction {
    /// `clwb`: write back, line stays cached. Preferred.
    Clwb,
    /// `clflushopt`: write back and invalidate, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and invalidate, ordered with other stores (slowest).
    Clflush,
    /// No flush at all (volatile memory, or eADR/GPF platforms where caches are persistent).
    None,
}

impl FlushInstruction {
    /// Name as printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
            FlushInstruction::None => "none",
        }
    }

    /// Whether this CPU can execute the instruction.
    pub fn is_supported(self) -> bool {
        let f = features();
        match self {
            FlushInstruction::Clwb => f.clwb,
            FlushInstruction::Clflushopt => f.clflushopt,
            FlushInstruction::Clflush => f.clflush,
            FlushInstruction::None => true,
        }
    }

    /// Parses a name as printed by [`FlushInstruction::name`].
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "clwb" => Some(FlushInstruction::Clwb),
            "clflushopt" => Some(FlushInstruction::Clflushopt),
            "clflush" => Some(FlushInstruction::Clflush),
            "none" => Some(FlushInstruction::None),
            _ => None,
        }
    }
}

impl fmt::Display for FlushInstruction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What this CPU offers for persistence, read once by CPUID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CpuFeatures {
    /// `clflush` available.
    pub clflush: bool,
    /// `clflushopt` available.
    pub clflushopt: bool,
    /// `clwb` available.
    pub clwb: bool,
    /// AVX2 available (used for 32-byte non-temporal stores).
    pub avx2: bool,
    /// AVX-512F available (reported only; not required).
    pub avx512f: bool,
}

impl CpuFeatures {
    /// The best flush instruction this CPU has.
    pub fn best_flush(&self) -> FlushInstruction {
        if self.clwb {
            FlushInstruction::Clwb
        } else if self.clflushopt {
            FlushInstruction::Clflushopt
        } else if self.clflush {
            FlushInstruction::Clflush
        } else {
            FlushInstruction::None
        }
    }
}

/// The CPU's persistence features (detected once, then cached).
pub fn features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let leaf1 = __cpuid(1);
    let max_leaf = __cpuid(0).eax;
    let leaf7 = if max_leaf >= 7 {
        __cpuid_count(7, 0)
    } else {
        __cpuid(0)
    };
    let has7 = max_leaf >= 7;
    CpuFeatures {
        clflush: leaf1.edx & (1 << 19) != 0,
        clflushopt: has7 && leaf7.ebx & (1 << 23) != 0,
        clwb: has7 && leaf7.ebx & (1 << 24) != 0,
        avx2: std::arch::is_x86_feature_detected!("avx2"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures {
        clflush: false,
        clflushopt: false,
        clwb: false,
        avx2: false,
        avx512f: false,
    }
}

/// Flushes every cache line overlapping `[addr, addr + len)` with `instr`. No fence.
///
/// Returns the number of lines flushed.
///
/// # Safety
/// The whole range must be mapped for the duration of the call, and `instr` must be supported
/// by this CPU ([`FlushInstruction::is_supported`]).
pub unsafe fn flush_range(instr: FlushInstruction, addr: *const u8, len: usize) -> u64 {
    if len == 0 || instr == FlushInstruction::None {
        return 0;
    }
    let start = addr as usize & !(CACHE_LINE - 1);
    let end = addr as usize + len;
    let mut line = start;
    let mut lines = 0;
    while line < end {
        // SAFETY: `line` lies within (or at the aligned start of) the caller's mapped range, and
        // the caller guarantees the instruction is supported.
        unsafe { flush_line(instr, line as *const u8) };
        line += CACHE_LINE;
        lines += 1;
    }
    lines
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn flush_line(instr: FlushInstruction, line: *const u8) {
    // The flush instructions neither read nor write memory as seen by the program.
    match instr {
        // SAFETY: the caller guarantees `line` is mapped and `clwb` is supported.
        FlushInstruction::Clwb => unsafe {
            std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags));
        },
        // SAFETY: the caller guarantees `line` is mapped and `clflushopt` is supported.
        FlushInstruction::Clflushopt => unsafe {
            std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags));
        },
        // SAFETY: the caller guarantees `line` is mapped and `clflush` is supported.
        FlushInstruction::Clflush => unsafe {
            std::arch::asm!("clflush [{0}]", in(reg) line, options(nostack, preserves_flags));
        },
        FlushInstruction::None => {}
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn flush_line(_instr: FlushInstruction, _line: *const u8) {}

/// Hints the CPU to start loading the cache line at `p` (a no-op elsewhere). Used to overlap
/// the cache misses of a batch of hash-table probes.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `prefetcht0` is a hint: it never faults, whatever the address, and SSE is part
        // of every x86-64 CPU.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Store fence: orders earlier flushes and non-temporal stores before later stores. Together
/// with a preceding flush this makes data durable on a DAX mapping.
#[inline]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `sfence` has no memory operands and is available on every x86-64 CPU.
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Load fence: every earlier instruction completes before any later one starts — so a
/// time-stamp reading that follows is taken after the work before it (including its cache
/// misses), as a latency measurement needs.
#[inline]
pub fn lfence() {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `lfence` has no operands and is available on every x86-64 CPU (SSE2).
        unsafe { std::arch::x86_64::_mm_lfence() };
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Copies `src` to `dst` with non-temporal (cache-bypassing) stores where alignment allows,
/// regular stores for the unaligned head and tail, and flushes those with `head_tail_flush`.
/// Does not fence; call [`sfence`] afterwards. Returns the number of lines flushed.
///
/// # Safety
/// `dst..dst + src.len()` must be mapped, writable, not overlap `src`, and `head_tail_flush`
/// must be supported by this CPU.
pub unsafe fn nt_copy(dst: *mut u8, src: &[u8], head_tail_flush: FlushInstruction) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let len = src.len();
        let addr = dst as usize;
        let head = ((16 - (addr & 15)) & 15).min(len);
        let body = (len - head) & !15;
        let tail = len - head - body;
        let mut flushed = 0;
        if head > 0 {
            // SAFETY: `dst..dst+head` is within the caller's writable range; src has `len` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
                flushed += flush_range(head_tail_flush, dst, head);
            }
        }
        let mut i = head;
        while i < head + body {
            // SAFETY: `dst + i` is 16-byte aligned (head aligned it) and `i + 16 <= len`; the
            // unaligned load reads 16 bytes inside `src`. SSE2 is part of x86-64.
            unsafe {
                let v = _mm_loadu_si128(src.as_ptr().add(i).cast::<__m128i>());
                _mm_stream_si128(dst.add(i).cast::<__m128i>(), v);
            }
            i += 16;
        }
        if tail > 0 {
            // SAFETY: the tail lies inside both ranges, as above.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr().add(head + body),
                    dst.add(head + body),
                    tail,
                );
                flushed += flush_range(head_tail_flush, dst.add(head + body), tail);
            }
        }
        flushed
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        // SAFETY: the caller guarantees the ranges are valid and disjoint.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        let _ = head_tail_flush;
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_flush_is_supported_and_ordered() {
        let f = features();
        let best = f.best_flush();
        assert!(best.is_supported());
        if f.clwb {
            assert_eq!(best, FlushInstruction::Clwb);
        } else if f.clflushopt {
            assert_eq!(best, FlushInstruction::Clflushopt);
        }
        for i in [
            FlushInstruction::Clwb,
            FlushInstruction::Clflushopt,
            FlushInstruction::Clflush,
            FlushInstruction::None,
        ] {
            assert_eq!(FlushInstruction::parse(i.name()), Some(i));
        }
    }

    #[test]
    fn flush_range_counts_every_touched_line() {
        let buf = vec![0u8; 1024];
        let base = buf.as_ptr();
        let offset = (64 - (base as usize % 64)) % 64; // first line boundary in the buffer
        let instr = features().best_flush();
        // SAFETY: every range below lies inside `buf`, and `instr` is supported.
        unsafe {
            // 1 byte before a boundary + 1 after = 2 lines.
            let expect = if instr == FlushInstruction::None {
                0
            } else {
                2
            };
            assert_eq!(flush_range(instr, base.add(offset + 63), 2), expect);
            let expect = if instr == FlushInstruction::None {
                0
            } else {
                1
            };
            assert_eq!(flush_range(instr, base.add(offset), 64), expect);
            let expect = if instr == FlushInstruction::None {
                0
            } else {
                3
            };
            assert_eq!(flush_range(instr, base.add(offset + 1), 128), expect);
            assert_eq!(flush_range(instr, base, 0), 0);
        }
    }

    #[test]
    fn nt_copy_copies_every_byte_at_odd_alignments() {
        let instr = features().best_flush();
        for (dst_off, len) in [(0, 0), (1, 1), (3, 17), (5, 100), (16, 64), (7, 1000)] {
            let mut dst = vec![0u8; 1100];
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            // SAFETY: dst has room for dst_off + len bytes; src and dst are distinct vectors.
            unsafe { nt_copy(dst.as_mut_ptr().add(dst_off), &src, instr) };
            sfence();
            assert_eq!(&dst[dst_off..dst_off + len], &src[..]);
            assert!(dst[..dst_off].iter().all(|&b| b == 0));
            assert!(dst[dst_off + len..].iter().all(|&b| b == 0));
        }
    }
}

/// Which 16-wide key search [`match_16`] uses on this CPU (detected once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeySearch {
    /// Two 512-bit compares (AVX-512F).
    Avx512,
    /// Four 256-bit compares (AVX2).
    Avx2,
    /// Sixteen scalar compares.
    Scalar,
}

impl KeySearch {
    /// The search this CPU runs.
    pub fn detected() -> Self {
        static SEARCH: OnceLock<KeySearch> = OnceLock::new();
        *SEARCH.get_or_init(|| {
            let f = features();
            if f.avx512f {
                KeySearch::Avx512
            } else if f.avx2 {
                KeySearch::Avx2
            } else {
                KeySearch::Scalar
            }
        })
    }

    /// `avx512`, `avx2` or `scalar`.
    pub fn name(self) -> &'static str {
        match self {
            KeySearch::Avx512 => "avx512",
            KeySearch::Avx2 => "avx2",
            KeySearch::Scalar => "scalar",
        }
    }
}

/// Bit `i` is set where `keys[i] == needle`: the 16 keys of a hash bucket compared at once
/// with the widest vector compare this CPU has (AVX-512F, AVX2, else scalar).
#[inline]
pub fn match_16(keys: &[u64; 16], needle: u64) -> u16 {
    match_16_with(KeySearch::detected(), keys, needle)
}

/// [`match_16`] with a chosen search (a search the CPU lacks falls back to scalar); for tests
/// and benchmarks that compare them.
#[inline]
pub fn match_16_with(search: KeySearch, keys: &[u64; 16], needle: u64) -> u16 {
    #[cfg(target_arch = "x86_64")]
    {
        let f = features();
        if search == KeySearch::Avx512 && f.avx512f {
            // SAFETY: AVX-512F was detected on this CPU at run time.
            return unsafe { match_16_avx512(keys, needle) };
        }
        if search != KeySearch::Scalar && f.avx2 {
            // SAFETY: AVX2 was detected on this CPU at run time.
            return unsafe { match_16_avx2(keys, needle) };
        }
    }
    let _ = search;
    keys.iter()
        .enumerate()
        .fold(0u16, |m, (i, &k)| m | (u16::from(k == needle) << i))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn match_16_avx512(keys: &[u64; 16], needle: u64) -> u16 {
    use std::arch::x86_64::{_mm512_cmpeq_epi64_mask, _mm512_loadu_si512, _mm512_set1_epi64};
    let n = _mm512_set1_epi64(needle as i64);
    let p = keys.as_ptr();
    // SAFETY: `keys` holds 16 u64 = two 64-byte vectors; unaligned loads accept any address.
    let (lo, hi) = unsafe {
        (
            _mm512_loadu_si512(p.cast()),
            _mm512_loadu_si512(p.add(8).cast()),
        )
    };
    u16::from(_mm512_cmpeq_epi64_mask(lo, n)) | (u16::from(_mm512_cmpeq_epi64_mask(hi, n)) << 8)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn match_16_avx2(keys: &[u64; 16], needle: u64) -> u16 {
    use std::arch::x86_64::{
        __m256i, _mm256_castsi256_pd, _mm256_cmpeq_epi64, _mm256_loadu_si256, _mm256_movemask_pd,
        _mm256_set1_epi64x,
    };
    let n = _mm256_set1_epi64x(needle as i64);
    let p = keys.as_ptr();
    let mut mask = 0u16;
    for q in 0..4 {
        // SAFETY: `keys` holds 16 u64 = four 32-byte vectors; unaligned loads accept any
        // address.
        let v = unsafe { _mm256_loadu_si256(p.add(4 * q).cast::<__m256i>()) };
        let eq = _mm256_castsi256_pd(_mm256_cmpeq_epi64(v, n));
        mask |= (_mm256_movemask_pd(eq) as u16) << (4 * q);
    }
    mask
}

/// Bit `i` is set where byte `i` of `bytes` (128 bytes as 16 little-endian words) equals
/// `needle`: a DRAM half's one-byte key fingerprints compared at once (AVX2 where the CPU has
/// it: four 32-byte compares; else eight bytes at a time, SWAR).
#[inline]
pub fn match_bytes_128(bytes: &[u64; 16], needle: u8) -> u128 {
    match_bytes_128_with(KeySearch::detected(), bytes, needle)
}

/// [`match_bytes_128`] with a chosen search (for tests that compare them).
#[inline]
pub fn match_bytes_128_with(search: KeySearch, bytes: &[u64; 16], needle: u8) -> u128 {
    #[cfg(target_arch = "x86_64")]
    if search != KeySearch::Scalar && features().avx2 {
        // SAFETY: AVX2 was detected on this CPU at run time.
        return unsafe { match_bytes_128_avx2(bytes, needle) };
    }
    let _ = search;
    let spread = u64::from(needle) * 0x0101_0101_0101_0101;
    let mut mask = 0u128;
    for (w, &word) in bytes.iter().enumerate() {
        // Bytes equal to the needle become zero; exact zero-byte test (no borrow across bytes).
        let x = word ^ spread;
        let high =
            !(((x & 0x7f7f_7f7f_7f7f_7f7f) + 0x7f7f_7f7f_7f7f_7f7f) | x) & 0x8080_8080_8080_8080;
        // Gather each byte's top bit into 8 consecutive bits.
        let bits = (high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        mask |= u128::from(bits as u8) << (8 * w);
    }
    mask
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn match_bytes_128_avx2(bytes: &[u64; 16], needle: u8) -> u128 {
    use std::arch::x86_64::{
        __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_set1_epi8,
    };
    let n = _mm256_set1_epi8(needle as i8);
    let p = bytes.as_ptr();
    let mut mask = 0u128;
    for q in 0..4 {
        // SAFETY: `bytes` is 128 bytes = four 32-byte vectors; unaligned loads accept any
        // address.
        let v = unsafe { _mm256_loadu_si256(p.add(4 * q).cast::<__m256i>()) };
        let m = _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, n)) as u32;
        mask |= u128::from(m) << (32 * q);
    }
    mask
}

/// Inputs shorter than this take one `crc32` instruction per 8 bytes in
/// [`crc32c_append`]; longer ones the crate's three-way interleaved loop, whose set-up pays
/// for itself once the serial chain (8 bytes per 3-cycle `crc32`) grows longer than it.
const CRC_SHORT: usize = 256;

/// `data`'s CRC-32C appended to `crc` — the same value as `crc32c::crc32c_append` — for the
/// hot paths (a record's check on every insert, a log frame's under the log's tail lock).
/// Short inputs take one `crc32` instruction per 8 bytes where the CPU has SSE4.2: the
/// crate's per-call set-up (alignment, three-way interleaving and its combination) cost about
/// 150 instructions a call on 8–200-byte inputs (docs/BENCHMARKS.md, Figure 9). Long inputs
/// (page images) and CPUs without SSE4.2 use the crate.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < CRC_SHORT && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: SSE4.2 was detected on this CPU at run time.
        return unsafe { crc32c_sse42(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u8, _mm_crc32_u64};
    let (words, tail) = data.as_chunks::<8>();
    let mut state = u64::from(!crc);
    for w in words {
        state = _mm_crc32_u64(state, u64::from_le_bytes(*w));
    }
    let mut state = state as u32;
    for &b in tail {
        state = _mm_crc32_u8(state, b);
    }
    !state
}

/// Bit `b` is set where 32-bit lane `b` of `line` (lane `2k` the low half of word `k`, `2k+1`
/// the high half) has every bit of `bits` set: a Bloom filter line of 16 per-bucket lanes
/// probed at once (AVX2 where the CPU has it: two 256-bit tests; else scalar).
#[inline]
pub fn lanes_containing(line: &[u64; 8], bits: u32) -> u16 {
    lanes_containing_with(KeySearch::detected(), line, bits)
}

/// [`lanes_containing`] with a chosen search (for tests that compare them).
#[inline]
pub fn lanes_containing_with(search: KeySearch, line: &[u64; 8], bits: u32) -> u16 {
    #[cfg(target_arch = "x86_64")]
    if search != KeySearch::Scalar && features().avx2 {
        // SAFETY: AVX2 was detected on this CPU at run time.
        return unsafe { lanes_containing_avx2(line, bits) };
    }
    let _ = search;
    line.iter().enumerate().fold(0u16, |m, (k, &w)| {
        let (lo, hi) = (w as u32, (w >> 32) as u32);
        m | (u16::from(lo & bits == bits) << (2 * k))
            | (u16::from(hi & bits == bits) << (2 * k + 1))
    })
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lanes_containing_avx2(line: &[u64; 8], bits: u32) -> u16 {
    use std::arch::x86_64::{
        __m256i, _mm256_and_si256, _mm256_castsi256_ps, _mm256_cmpeq_epi32, _mm256_loadu_si256,
        _mm256_movemask_ps, _mm256_set1_epi32,
    };
    let b = _mm256_set1_epi32(bits as i32);
    let p = line.as_ptr();
    let mut mask = 0u16;
    for half in 0..2 {
        // SAFETY: `line` is 64 bytes = two 32-byte vectors; unaligned loads accept any address.
        let v = unsafe { _mm256_loadu_si256(p.add(4 * half).cast::<__m256i>()) };
        let all = _mm256_cmpeq_epi32(_mm256_and_si256(v, b), b);
        mask |= (_mm256_movemask_ps(_mm256_castsi256_ps(all)) as u16) << (8 * half);
    }
    mask
}

#[cfg(test)]
mod search_tests {
    use super::*;

    #[test]
    fn every_search_finds_the_same_slots() {
        let mut keys = [0u64; 16];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = (i as u64 % 5).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let step = 0x9e37_79b9_7f4a_7c15u64;
        for needle in [0, step, step.wrapping_mul(2), 7] {
            let want = keys
                .iter()
                .enumerate()
                .fold(0u16, |m, (i, &k)| m | (u16::from(k == needle) << i));
            for s in [KeySearch::Avx512, KeySearch::Avx2, KeySearch::Scalar] {
                assert_eq!(match_16_with(s, &keys, needle), want, "{s:?} {needle:#x}");
            }
        }
        assert_eq!(match_16(&[u64::MAX; 16], u64::MAX), u16::MAX);
    }

    #[test]
    fn the_crc_is_the_crates_on_either_side_of_the_short_limit() {
        let data: Vec<u8> = (0..600u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for start in 0..9 {
            for len in [
                0,
                1,
                7,
                8,
                9,
                15,
                16,
                17,
                200,
                216,
                255,
                256,
                257,
                591 - start,
            ] {
                let part = &data[start..start + len];
                for seed in [0u32, 1, 0xdead_beef] {
                    let want = crc32c::crc32c_append(seed, part);
                    let what = format!("start {start} len {len} seed {seed:#x}");
                    assert_eq!(crc32c_append(seed, part), want, "{what}");
                    #[cfg(target_arch = "x86_64")]
                    if std::arch::is_x86_feature_detected!("sse4.2") {
                        // SAFETY: SSE4.2 was detected on this CPU at run time.
                        assert_eq!(unsafe { crc32c_sse42(seed, part) }, want, "{what}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_lane_test_finds_the_same_lanes() {
        let mut line = [0u64; 8];
        for (k, w) in line.iter_mut().enumerate() {
            *w = (k as u64 + 3).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        line[2] = u64::MAX;
        line[5] = 0x0000_0007_ffff_fff8;
        for bits in [
            0u32,
            7,
            0x8000_0001,
            0x10_0100,
            u32::MAX,
            line[1] as u32 & 0x0f0f,
        ] {
            let want = (0..16).fold(0u16, |m, lane| {
                let v = (line[lane / 2] >> (32 * (lane % 2))) as u32;
                m | (u16::from(v & bits == bits) << lane)
            });
            for s in [KeySearch::Avx512, KeySearch::Avx2, KeySearch::Scalar] {
                assert_eq!(
                    lanes_containing_with(s, &line, bits),
                    want,
                    "{s:?} {bits:#x}"
                );
            }
        }
    }

    #[test]
    fn every_byte_search_finds_the_same_bytes() {
        let mut words = [0u64; 16];
        for (i, w) in words.iter_mut().enumerate() {
            *w = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        // Neighbouring bytes that differ by one bit, and runs of equal bytes, catch the
        // borrow a careless zero-byte test propagates.
        words[3] = 0x0101_0001_0100_0101;
        words[7] = 0x8080_8080_8080_8080;
        for needle in [0u8, 1, 0x80, 0x81, 0xff, 0x15, (words[5] >> 8) as u8] {
            let want = (0..128).fold(0u128, |m, i| {
                let byte = (words[i / 8] >> (8 * (i % 8))) as u8;
                m | (u128::from(byte == needle) << i)
            });
            for s in [KeySearch::Avx512, KeySearch::Avx2, KeySearch::Scalar] {
                assert_eq!(
                    match_bytes_128_with(s, &words, needle),
                    want,
                    "{s:?} {needle:#x}"
                );
            }
        }
    }
}
