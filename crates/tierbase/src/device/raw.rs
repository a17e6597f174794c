//! Raw access to a region's mapping for measuring the memory itself: the loads, stores,
//! non-temporal stores and cache-line flushes of the memory profiler (`tierbase profile
//! memory`), safe and bounds-checked, without the region's counters, emulation or copies.
//!
//! Owns: [`RawAccess`], a view of a [`PmemRegion`]'s data area valid while the region lives,
//! whose methods execute exactly the instructions being measured (one bounds check per call, no
//! counters, no allocation); and [`precise_timer_slack`], the measuring thread's timer slack.
//! Must not touch: files, mappings or their life cycle (the region owns those), durability
//! (a flush here is an instruction being measured, not a persist point; stores use
//! [`PmemRegion::persist`]).
//!
//! # Memory model
//!
//! Benchmark threads read and write the same lines at the same time, and the region's own API
//! may be used on the same bytes, so every access here must be well-defined when it races:
//!
//! - Loads and stores are **relaxed atomic 8-byte word accesses** of naturally aligned words
//!   (`AtomicU64`), never plain or volatile loads and stores (those would be data races, which
//!   are undefined behaviour even when the hardware does not mind). Every byte is always accessed
//!   with the same size: bytes of the whole aligned words of the view always as part of their
//!   word — a partial word at an unaligned start or end of an access is read whole and masked,
//!   or written with a compare-and-swap that merges the new bytes into the word — and the up to
//!   seven bytes after the last whole word (views whose length is not a multiple of 8; regions
//!   are whole pages, so in practice none) always as `AtomicU8`. So there are no mixed-size
//!   accesses either.
//! - **Non-temporal stores** ([`RawAccess::write_nt`], through [`cpu::nt_copy`]) are the one
//!   exception, demanded by the hardware: there is no atomic non-temporal store in Rust, and a
//!   `movntdq` is a plain 16-byte store as far as the language is concerned, so one racing
//!   with another thread's access to the same bytes is a data race in Rust's model. They are
//!   confined to this module: only the 16-byte-aligned body of a [`RawAccess::write_nt`] uses
//!   them (its unaligned head and tail are atomic stores like [`RawAccess::write`]), and the
//!   profiler's data is random, so no result depends on which store wins. The instructions do
//!   exactly what the hardware promises for racing stores (each 16-byte store lands whole or
//!   not at all; no other bytes are touched).
//! - **Flushes** (`clwb`, `clflushopt`, `clflush`, through [`cpu::flush_range`]) neither read
//!   nor write memory as seen by the program, so they cannot race.
//!
//! Relaxed atomic loads and stores compile to the same `mov`s as plain ones on x86-64, but the
//! compiler may not merge them into wider vector instructions: a 64-byte line takes eight loads
//! or stores instead of four 16-byte loads or two 32-byte `memcpy` stores, so fewer missing
//! lines fit in the load and store buffers at once. Measured against that vector code on a
//! busy 2-core AMD EPYC VM (medians of 9 interleaved runs): unflushed writes 10–30% lower,
//! reads up to ~10% lower, flushed and non-temporal writes and access chains within the noise.

use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};

use super::cpu::{self, FlushInstruction};
use super::region::PmemRegion;
use crate::error::{Error, Result};

/// Bytes per word: the unit of the atomic accesses.
const WORD: usize = 8;

/// A bounds-checked view of a region's data area for raw loads, stores and flushes (see the
/// [module documentation](self) for how racing accesses stay well-defined).
///
/// Created with [`RawAccess::new`]; valid while the region lives (the region maps its data area
/// at a fixed address and only grows it). Every method panics if its range is not inside the
/// view — an access outside is a bug in the caller, and it never touches memory.
#[derive(Clone, Copy)]
pub struct RawAccess<'a> {
    /// The view's whole aligned words: bytes `[0, 8 * words.len())`.
    words: &'a [AtomicU64],
    /// The bytes after the last whole word (at most 7; none for whole-page regions).
    tail: &'a [AtomicU8],
    /// The flush instructions this CPU supports, one bit each (see [`flush_bit`]).
    flushes: u8,
    /// The CPU's best flush instruction, for the unaligned edges of non-temporal writes.
    edge_flush: FlushInstruction,
    _region: PhantomData<&'a PmemRegion>,
}

impl fmt::Debug for RawAccess<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawAccess")
            .field("base", &self.words.as_ptr())
            .field("len", &self.len())
            .field("edge_flush", &self.edge_flush)
            .finish()
    }
}

fn flush_bit(instr: FlushInstruction) -> u8 {
    match instr {
        FlushInstruction::None => 1,
        FlushInstruction::Clwb => 2,
        FlushInstruction::Clflushopt => 4,
        FlushInstruction::Clflush => 8,
    }
}

#[cold]
#[inline(never)]
fn out_of_range(off: u64, len: usize, size: usize) -> ! {
    panic!("raw access [{off}, +{len}) outside the {size} byte range")
}

#[cold]
#[inline(never)]
fn unsupported(instr: FlushInstruction) -> ! {
    panic!("flush instruction {instr} is not supported by this CPU")
}

/// The low `n` bytes of a word set (`n` < 8).
#[inline(always)]
fn low_bytes(n: usize) -> u64 {
    (1u64 << (8 * n)) - 1
}

impl<'a> RawAccess<'a> {
    /// The data area of `region`, at its current length (growth later is not seen). Errors if
    /// the region is empty.
    pub fn new(region: &'a PmemRegion) -> Result<Self> {
        let len = usize::try_from(region.len()).map_err(|_| {
            Error::InvalidArgument("region too large for this platform".to_string())
        })?;
        // The address of data byte 0, through the region's public atomic view (the region maps
        // its data area contiguously, at a fixed address, for its whole lifetime). Fails for an
        // empty region. (Once `region.rs` has a crate-internal accessor for its data pointer,
        // this should use it: a pointer derived from a one-byte view is narrower, in
        // provenance terms, than the mapping it is used for.)
        let base = region.atomic_u8(0)?.as_ptr();
        if !base.addr().is_multiple_of(WORD) {
            return Err(Error::InvalidArgument(format!(
                "region data area at {base:p} is not 8-byte aligned"
            )));
        }
        // SAFETY: `base` is the 8-aligned start of the region's data area, which is mapped
        // read-write for `len` bytes for as long as `region` (borrowed for `'a`) lives and is
        // only ever accessed through raw copies and atomics.
        Ok(unsafe { Self::from_raw(base, len) })
    }

    /// A view of `len` bytes at `base`.
    ///
    /// # Safety
    /// `base` must be 8-aligned, and `[base, base + len)` one allocation, readable and writable,
    /// valid for `'a`, and accessed by others only atomically or by raw copies.
    unsafe fn from_raw(base: *mut u8, len: usize) -> Self {
        let whole = len / WORD;
        // SAFETY: the caller guarantees `[base, base + len)` is valid, 8-aligned memory for
        // `'a`; `AtomicU64` has the size and alignment of `u64`, and shared references to
        // atomics allow concurrent atomic access from every thread.
        let words = unsafe { std::slice::from_raw_parts(base.cast::<AtomicU64>(), whole) };
        // SAFETY: the remaining `len % 8` bytes lie inside the same valid range; `AtomicU8` has
        // the layout of `u8`.
        let tail = unsafe {
            std::slice::from_raw_parts(base.add(whole * WORD).cast::<AtomicU8>(), len % WORD)
        };
        let f = cpu::features();
        let supported = [
            FlushInstruction::None,
            FlushInstruction::Clwb,
            FlushInstruction::Clflushopt,
            FlushInstruction::Clflush,
        ]
        .into_iter()
        .filter(|i| i.is_supported())
        .fold(0, |m, i| m | flush_bit(i));
        RawAccess {
            words,
            tail,
            flushes: supported,
            edge_flush: f.best_flush(),
            _region: PhantomData,
        }
    }

    /// Bytes in the view.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len_usize() as u64
    }

    /// Whether the view is empty (never for a view of a region: [`RawAccess::new`] refuses
    /// empty regions).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len_usize() == 0
    }

    #[inline(always)]
    fn len_usize(&self) -> usize {
        self.words.len() * WORD + self.tail.len()
    }

    /// Bytes covered by whole words.
    #[inline(always)]
    fn word_bytes(&self) -> usize {
        self.words.len() * WORD
    }

    /// The one bounds check of an operation: `[off, off + len)` inside the view.
    #[inline(always)]
    fn check(&self, off: u64, len: usize) -> usize {
        let size = self.len_usize();
        match usize::try_from(off) {
            Ok(o) if len <= size && o <= size - len => o,
            _ => out_of_range(off, len, size),
        }
    }

    /// Whether this CPU executes `instr` (checked once, when the view was created).
    #[inline]
    pub fn supports(&self, instr: FlushInstruction) -> bool {
        self.flushes & flush_bit(instr) != 0
    }

    /// The address of view byte `o` (`o` ≤ the view's length) as a pointer for the flush and
    /// non-temporal instructions, derived from the view's memory.
    #[inline(always)]
    fn addr(&self, o: usize) -> *mut u8 {
        self.words.as_ptr().cast::<u8>().cast_mut().wrapping_add(o)
    }

    /// Loads the `len` bytes at `off` and returns them XOR-folded into one word: byte `k` of the
    /// range (counting from `off`) is XORed into bits `8 * (k % 8)` — for a range of whole
    /// words, the XOR of its little-endian 8-byte words. The loads cannot be optimised away,
    /// and a dependent operation can use the value.
    #[inline]
    pub fn read_xor(&self, off: u64, len: usize) -> u64 {
        let o = self.check(off, len);
        let end = o + len;
        // The benchmarks' case: whole aligned words.
        if (o | len).is_multiple_of(WORD) && end <= self.word_bytes() {
            return xor_words(&self.words[o / WORD..end / WORD]);
        }
        self.read_xor_unaligned(o, end)
    }

    /// [`RawAccess::read_xor`] of a checked range that starts or ends inside a word (or in the
    /// tail bytes).
    #[inline(never)]
    fn read_xor_unaligned(&self, o: usize, end: usize) -> u64 {
        let wb = self.word_bytes();
        // `acc` holds bytes in the lane of their address (byte at address a in bits
        // 8 * (a % 8)); rotated into the lanes of their position in the range at the end.
        let mut acc = 0u64;
        let wend = end.min(wb);
        if o < wend {
            let (first, last) = (o / WORD, (wend - 1) / WORD);
            let words = &self.words[first..=last];
            if first == last {
                let mut m = u64::MAX << (8 * (o % WORD));
                if !wend.is_multiple_of(WORD) {
                    m &= low_bytes(wend % WORD);
                }
                acc = u64::from_le(words[0].load(Relaxed)) & m;
            } else {
                let n = words.len();
                let h = u64::from_le(words[0].load(Relaxed)) & (u64::MAX << (8 * (o % WORD)));
                let mut t = u64::from_le(words[n - 1].load(Relaxed));
                if !wend.is_multiple_of(WORD) {
                    t &= low_bytes(wend % WORD);
                }
                acc = h ^ t ^ xor_words(&words[1..n - 1]);
            }
        }
        for (i, b) in self.tail_range(o.max(wb), end) {
            acc ^= u64::from(b.load(Relaxed)) << (8 * (i % WORD));
        }
        acc.rotate_right(8 * (o % WORD) as u32)
    }

    /// The tail bytes of view range `[from, end)` (`from` ≥ the whole words' end), with their
    /// view offsets.
    #[inline(always)]
    fn tail_range(
        &self,
        from: usize,
        end: usize,
    ) -> impl Iterator<Item = (usize, &'a AtomicU8)> + use<'a> {
        let wb = self.word_bytes();
        let bytes: &'a [AtomicU8] = if from < end {
            &self.tail[from - wb..end - wb]
        } else {
            &[]
        };
        bytes.iter().enumerate().map(move |(k, b)| (from + k, b))
    }

    /// Stores `src` at `off` (relaxed atomic stores; not flushed, not fenced).
    #[inline]
    pub fn write(&self, off: u64, src: &[u8]) {
        let o = self.check(off, src.len());
        self.store(o, src);
    }

    /// Stores `src` at `off`, then flushes every cache line it touched with `instr` (no fence:
    /// follow with [`cpu::sfence`] to order the flushes). Panics if this CPU does not support
    /// `instr` (check [`RawAccess::supports`] first).
    #[inline]
    pub fn write_flush(&self, off: u64, src: &[u8], instr: FlushInstruction) {
        let o = self.check(off, src.len());
        if !self.supports(instr) {
            unsupported(instr);
        }
        self.store(o, src);
        self.flush_checked(o, src.len(), instr);
    }

    /// Flushes every cache line overlapping `[off, off + len)` with `instr` (no fence). Panics
    /// if this CPU does not support `instr`.
    #[inline]
    pub fn flush(&self, off: u64, len: usize, instr: FlushInstruction) {
        let o = self.check(off, len);
        if !self.supports(instr) {
            unsupported(instr);
        }
        self.flush_checked(o, len, instr);
    }

    /// Flushes `[o, o + len)`, already checked to be inside the view, with `instr`, already
    /// checked to be supported.
    #[inline(always)]
    fn flush_checked(&self, o: usize, len: usize, instr: FlushInstruction) {
        // SAFETY: `[o, o + len)` is inside the view (checked by the caller), which is mapped
        // while `'a` lasts; the caller checked that the CPU supports `instr`. Flush
        // instructions neither read nor write memory as the program sees it, so they cannot
        // race with other threads' accesses.
        unsafe { cpu::flush_range(instr, self.addr(o), len) };
    }

    /// Stores `src` at `off` with non-temporal (cache-bypassing) stores where the address is
    /// 16-byte aligned, and atomic stores flushed with the CPU's best flush instruction for the
    /// unaligned head and tail (like [`cpu::nt_copy`]). No fence: follow with [`cpu::sfence`].
    ///
    /// The non-temporal stores are the one access in this module that is not atomic (see the
    /// [module documentation](self)).
    #[inline]
    pub fn write_nt(&self, off: u64, src: &[u8]) {
        let o = self.check(off, src.len());
        let end = o + src.len();
        // The 16-byte-aligned body, inside the whole words (the tail bytes are only ever
        // accessed as bytes).
        let base = self.addr(0).addr();
        let body_start = (base + o).next_multiple_of(16) - base;
        let body_end =
            (((base + end.min(self.word_bytes())) & !15).saturating_sub(base)).max(body_start);
        if body_start >= body_end {
            self.store(o, src);
            self.flush_checked(o, src.len(), self.edge_flush);
            return;
        }
        let (head, rest) = src.split_at(body_start - o);
        let (body, tail) = rest.split_at(body_end - body_start);
        if !head.is_empty() {
            self.store(o, head);
            self.flush_checked(o, head.len(), self.edge_flush);
        }
        // SAFETY: `[body_start, body_end)` is inside the view (between `o` and `end`, checked
        // above) and mapped for `'a`; `body` is the caller's slice, a different allocation, so
        // the ranges do not overlap; the destination is 16-byte aligned and the length a
        // multiple of 16, so `nt_copy` issues only non-temporal stores (no head or tail of its
        // own) and flushes nothing, and `edge_flush` is this CPU's best, hence supported,
        // flush instruction. Racing accesses: the documented exception above.
        unsafe { cpu::nt_copy(self.addr(body_start), body, self.edge_flush) };
        if !tail.is_empty() {
            self.store(body_end, tail);
            self.flush_checked(body_end, tail.len(), self.edge_flush);
        }
    }

    /// Stores `src` at view offset `o` (`[o, o + src.len())` already checked).
    #[inline(always)]
    fn store(&self, o: usize, src: &[u8]) {
        let end = o + src.len();
        // The benchmarks' case: whole aligned words.
        if (o | src.len()).is_multiple_of(WORD) && end <= self.word_bytes() {
            store_words(&self.words[o / WORD..end / WORD], src);
            return;
        }
        self.store_unaligned(o, src);
    }

    /// [`RawAccess::store`] of a checked range that starts or ends inside a word (or in the tail
    /// bytes).
    #[inline(never)]
    fn store_unaligned(&self, o: usize, src: &[u8]) {
        let end = o + src.len();
        let wend = end.min(self.word_bytes());
        let mut at = o;
        let mut rest = src;
        if at < wend {
            // An unaligned head: part of one word.
            if !at.is_multiple_of(WORD) {
                let n = (WORD - at % WORD).min(wend - at);
                let (part, r) = rest.split_at(n);
                self.store_part(at, part);
                at += n;
                rest = r;
            }
            // Whole words.
            let n = (wend - at) / WORD;
            let (whole, r) = rest.split_at(n * WORD);
            store_words(&self.words[at / WORD..at / WORD + n], whole);
            at += n * WORD;
            rest = r;
            // An unaligned end: the start of one word.
            if at < wend {
                let (part, r) = rest.split_at(wend - at);
                self.store_part(at, part);
                at = wend;
                rest = r;
            }
        }
        for ((_, b), v) in self.tail_range(at.max(self.word_bytes()), end).zip(rest) {
            b.store(*v, Relaxed);
        }
    }

    /// Stores `part` (fewer than 8 bytes, inside one whole word) at view offset `o`, merging it
    /// into the word with a compare-and-swap so that concurrent stores to the word's other bytes
    /// are not lost.
    fn store_part(&self, o: usize, part: &[u8]) {
        let shift = 8 * (o % WORD);
        let mask = low_bytes(part.len()) << shift;
        let mut v = [0u8; WORD];
        v[..part.len()].copy_from_slice(part);
        let bits = u64::from_le_bytes(v) << shift;
        let w = &self.words[o / WORD];
        let _ = w.fetch_update(Relaxed, Relaxed, |cur| {
            Some(((u64::from_le(cur) & !mask) | bits).to_le())
        });
    }

    /// Asks the kernel for transparent huge pages on the whole view (before first touch).
    /// Returns whether the kernel accepted the advice.
    pub fn advise_huge_pages(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: madvise on the view's own mapping, which the region keeps mapped for
            // `'a`; MADV_HUGEPAGE only changes how future faults are served, not the contents
            // (an unaligned start is refused with EINVAL, reported as `false`).
            let rc = unsafe {
                libc::madvise(self.addr(0).cast(), self.len_usize(), libc::MADV_HUGEPAGE)
            };
            rc == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}

/// XOR of the little-endian values of `words`, with four independent accumulators so that the
/// loads are not serialised behind one dependency chain.
#[inline(always)]
fn xor_words(words: &[AtomicU64]) -> u64 {
    let load = |w: &AtomicU64| u64::from_le(w.load(Relaxed));
    let mut lines = words.chunks_exact(8);
    let (mut a0, mut a1, mut a2, mut a3) = (0u64, 0u64, 0u64, 0u64);
    for l in &mut lines {
        a0 ^= load(&l[0]) ^ load(&l[4]);
        a1 ^= load(&l[1]) ^ load(&l[5]);
        a2 ^= load(&l[2]) ^ load(&l[6]);
        a3 ^= load(&l[3]) ^ load(&l[7]);
    }
    for w in lines.remainder() {
        a0 ^= load(w);
    }
    a0 ^ a1 ^ a2 ^ a3
}

/// Stores `src` (as many bytes as `words` has) into `words`, in order.
#[inline(always)]
fn store_words(words: &[AtomicU64], src: &[u8]) {
    for (w, c) in words.iter().zip(src.chunks_exact(WORD)) {
        let mut v = [0u8; WORD];
        v.copy_from_slice(c);
        w.store(u64::from_ne_bytes(v), Relaxed);
    }
}

/// Restores the calling thread's timer slack when dropped (see [`precise_timer_slack`]).
#[derive(Debug)]
pub struct TimerSlackGuard {
    previous: Option<u64>,
}

/// Sets the calling thread's timer slack to 1 ns until the guard is dropped.
///
/// Linux lets a sleeping thread wake up to `timer_slack` (50 µs by default) late. The
/// emulator sleeps through waits longer than 200 µs, so with the default slack a batch that
/// should take 212 µs takes ~260 µs, a per-batch overhead that deeper (multi-wave) batches
/// amortise — which would tilt an emulated curve upwards past k. One nanosecond of slack
/// makes the sleeps as precise as the scheduler allows. Elsewhere than Linux this does nothing.
pub fn precise_timer_slack() -> TimerSlackGuard {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_GET_TIMERSLACK takes no pointer arguments and only reads the calling
        // thread's setting.
        let previous = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
        // SAFETY: PR_SET_TIMERSLACK with an integer argument changes only the calling
        // thread's timer slack.
        let set = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        TimerSlackGuard {
            previous: (previous > 0 && set == 0).then_some(previous as u64),
        }
    }
    #[cfg(not(target_os = "linux"))]
    TimerSlackGuard { previous: None }
}

impl Drop for TimerSlackGuard {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(v) = self.previous {
            // SAFETY: as in `precise_timer_slack`: an integer argument, the calling thread only.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, v as libc::c_ulong, 0, 0, 0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::RegionOptions;

    /// The specification of `read_xor`: byte k of the range into bits 8 * (k % 8).
    fn xor_fold(bytes: &[u8]) -> u64 {
        bytes
            .iter()
            .enumerate()
            .fold(0, |a, (k, &b)| a ^ (u64::from(b) << (8 * (k % 8))))
    }

    /// A view of `len` bytes over `buf` (which must hold at least `len` bytes).
    fn view(buf: &[AtomicU64], len: usize) -> RawAccess<'_> {
        assert!(len <= buf.len() * 8);
        // SAFETY: `buf` is 8-aligned, valid for `len` bytes while borrowed, and only accessed
        // atomically.
        unsafe { RawAccess::from_raw(buf.as_ptr().cast::<u8>().cast_mut(), len) }
    }

    fn contents(m: &RawAccess<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        for w in m.words {
            out.extend_from_slice(&u64::from_le(w.load(Relaxed)).to_le_bytes());
        }
        out.extend(m.tail.iter().map(|b| b.load(Relaxed)));
        out
    }

    #[test]
    fn every_range_reads_and_writes_exactly_its_bytes() {
        // Lengths with and without tail bytes; every offset and length up to 40 bytes, every
        // write flavour, against a byte-array model.
        for len in [0usize, 5, 8, 13, 40, 47] {
            let buf: Vec<AtomicU64> = (0..6).map(|_| AtomicU64::new(0)).collect();
            let m = view(&buf, len);
            assert_eq!(m.len(), len as u64);
            let mut model: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            m.write(0, &model);
            assert_eq!(contents(&m), model);
            let mut seq = 0u8;
            for off in 0..=len {
                for n in 0..=(len - off) {
                    assert_eq!(
                        m.read_xor(off as u64, n),
                        xor_fold(&model[off..off + n]),
                        "read len {len} off {off} n {n}"
                    );
                    let src: Vec<u8> = (0..n)
                        .map(|_| {
                            seq = seq.wrapping_add(101);
                            seq
                        })
                        .collect();
                    match (off + n) % 3 {
                        0 => m.write(off as u64, &src),
                        1 => m.write_flush(off as u64, &src, cpu::features().best_flush()),
                        _ => m.write_nt(off as u64, &src),
                    }
                    model[off..off + n].copy_from_slice(&src);
                    assert_eq!(contents(&m), model, "write len {len} off {off} n {n}");
                }
            }
        }
    }

    #[test]
    fn region_view_matches_the_region_api() {
        let region = PmemRegion::anonymous(1 << 16, &RegionOptions::default()).unwrap();
        let m = RawAccess::new(&region).unwrap();
        assert_eq!(m.len(), region.len());
        assert!(!m.is_empty());
        assert!(m.supports(FlushInstruction::None));
        assert!(m.supports(cpu::features().best_flush()));
        let src: Vec<u8> = (0..4099u32).map(|i| (i * 7 + 3) as u8).collect();
        for (k, off) in [0u64, 3, 64, 1000, 4096 * 3 + 5].into_iter().enumerate() {
            match k % 3 {
                0 => m.write(off, &src),
                1 => m.write_flush(off, &src, cpu::features().best_flush()),
                _ => m.write_nt(off, &src),
            }
            cpu::sfence();
            let mut back = vec![0u8; src.len()];
            region.read(off, &mut back).unwrap();
            assert_eq!(back, src);
            assert_eq!(m.read_xor(off, src.len()), xor_fold(&src));
            m.flush(off, src.len(), FlushInstruction::None);
        }
        let _ = m.advise_huge_pages();
        if let Ok(empty) = PmemRegion::anonymous(0, &RegionOptions::default()) {
            assert!(RawAccess::new(&empty).is_err());
        }
    }

    #[test]
    fn racing_writers_never_lose_a_neighbours_bytes() {
        // Two threads write alternate bytes of the same words with unaligned single-byte
        // stores (merged by compare-and-swap) while a third reads.
        let buf: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
        let m = view(&buf, 32);
        std::thread::scope(|s| {
            for t in 0..2u8 {
                s.spawn(move || {
                    for round in 1..=2000u32 {
                        for i in (t as u64..32).step_by(2) {
                            m.write(i, &[(round % 251) as u8 + 1]);
                        }
                    }
                });
            }
            s.spawn(move || {
                for _ in 0..2000 {
                    std::hint::black_box(m.read_xor(0, 32));
                }
            });
        });
        assert_eq!(contents(&m), vec![(2000 % 251) as u8 + 1; 32]);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_range_access_panics_instead_of_touching_memory() {
        let region = PmemRegion::anonymous(4096, &RegionOptions::default()).unwrap();
        let m = RawAccess::new(&region).unwrap();
        m.read_xor(4090, 64);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn offsets_beyond_the_address_space_panic() {
        let region = PmemRegion::anonymous(4096, &RegionOptions::default()).unwrap();
        let m = RawAccess::new(&region).unwrap();
        m.write(u64::MAX, &[1]);
    }

    #[test]
    fn timer_slack_is_restored() {
        let g = precise_timer_slack();
        drop(g);
    }
}
