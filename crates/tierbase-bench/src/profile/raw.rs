//! The memory benchmarks' raw access loops: the one place in the bench crate that touches
//! mapped memory through pointers.
//!
//! Owns: [`RawMem`], a bounds-checked view of a [`PmemRegion`]'s data area, and the tight
//! read/write/persist operations the executor calls millions of times per second. Going through
//! `PmemRegion::read`/`persist` would add a bounds check, counter updates and a copy into a
//! buffer per operation, and a volatile region's `flush` does nothing (PerMA-Bench measures
//! flushes on DRAM too), so the loops here execute the instructions themselves, using the device
//! layer's wrappers (`cpu::flush_range`, `cpu::nt_copy`, `cpu::sfence`). Must not touch: files,
//! mappings or their life cycle (the region owns those).
//!
//! Concurrency: like the device layer, memory is accessed only by raw loads and stores (never
//! through Rust references), so benchmark threads reading and writing the same lines at once
//! is well-defined at the hardware level; the data is random anyway.

use std::marker::PhantomData;
use std::ptr::NonNull;

use tierbase::device::{FlushInstruction, PmemRegion, cpu};

use super::persist::Persist;
use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// A bounds-checked raw view of a region's data area, valid while the region lives.
#[derive(Debug, Clone, Copy)]
pub struct RawMem<'a> {
    base: NonNull<u8>,
    len: usize,
    /// Flush instruction for the unaligned head and tail of non-temporal copies.
    edge_flush: FlushInstruction,
    _region: PhantomData<&'a PmemRegion>,
}

// SAFETY: `RawMem` only hands out raw loads and stores into the region's mapping, which is
// process-wide shared memory the region keeps mapped (at a fixed address) for `'a`; the region
// itself is `Sync` and documents raw-pointer access from any thread as its access model.
unsafe impl Send for RawMem<'_> {}
// SAFETY: as above: no method takes `&mut self`, and every access is a raw load or store.
unsafe impl Sync for RawMem<'_> {}

impl<'a> RawMem<'a> {
    /// The data area of `region` (its current length; the benchmark never grows it).
    pub fn new(region: &'a PmemRegion) -> Result<Self> {
        let len = usize::try_from(region.len())
            .map_err(|_| BenchError::invalid("region too large for this platform"))?;
        if len == 0 {
            return Err(BenchError::invalid("the memory range is empty"));
        }
        // The address of data byte 0, obtained through the region's public atomic view (the
        // region maps its data area contiguously and never moves it).
        let base = NonNull::new(region.atomic_u8(0)?.as_ptr())
            .ok_or_else(|| BenchError::invalid("region base is null"))?;
        Ok(RawMem {
            base,
            len,
            edge_flush: cpu::features().best_flush(),
            _region: PhantomData,
        })
    }

    /// Bytes in the view.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Whether the view is empty (never: [`RawMem::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn ptr(&self, off: u64, len: usize) -> *mut u8 {
        let end = (off as usize).checked_add(len);
        assert!(
            off <= self.len as u64 && end.is_some_and(|e| e <= self.len),
            "benchmark access [{off}, +{len}) outside the {} byte range",
            self.len
        );
        // SAFETY: `off + len <= self.len` was just checked, so the pointer stays inside the
        // mapped data area.
        unsafe { self.base.as_ptr().add(off as usize) }
    }

    /// Loads `len` bytes at `off` and returns their 8-byte words XORed together (so the loads
    /// cannot be optimised away and a dependent operation can use the data).
    #[inline]
    pub fn read(&self, off: u64, len: usize) -> u64 {
        let p = self.ptr(off, len);
        // SAFETY: `[p, p + len)` is inside the mapping (checked by `ptr`).
        unsafe { load_xor(p, len) }
    }

    /// Stores `src` at `off` and persists it with `persist` (see [`Persist`]).
    #[inline]
    pub fn write(&self, off: u64, src: &[u8], persist: Persist) {
        let len = src.len();
        let p = self.ptr(off, len);
        match persist {
            Persist::None => {
                // SAFETY: `[p, p + len)` is inside the writable mapping; `src` is a separate
                // allocation (a thread-local buffer), so the ranges do not overlap.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, len) };
            }
            Persist::Cache | Persist::CacheInv => {
                // SAFETY: as above; the executor checked at set-up that the CPU supports the
                // flush instruction (`Persist::check_supported`), and the range is mapped.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), p, len);
                    cpu::flush_range(persist.flush_instruction(), p, len);
                }
                cpu::sfence();
            }
            Persist::NoCache => {
                // SAFETY: `[p, p + len)` is inside the writable mapping and does not overlap
                // `src`; `edge_flush` is the CPU's best flush instruction, hence supported.
                unsafe { cpu::nt_copy(p, src, self.edge_flush) };
                cpu::sfence();
            }
        }
    }

    /// Fills `[off, off + len)` with random words from `rng` (the "prepare data" step; it also
    /// faults every page in).
    pub fn fill_random(&self, off: u64, len: usize, rng: &mut Rng) {
        let p = self.ptr(off, len);
        let mut i = 0;
        while i + 8 <= len {
            // SAFETY: `i + 8 <= len`, so the unaligned 8-byte store is inside the range.
            unsafe { p.add(i).cast::<u64>().write_unaligned(rng.next_u64()) };
            i += 8;
        }
        while i < len {
            // SAFETY: `i < len`, inside the range.
            unsafe { p.add(i).write(rng.next_u64() as u8) };
            i += 1;
        }
    }

    /// Asks the kernel for transparent huge pages on the whole range (before first touch).
    /// Returns whether the kernel accepted the advice.
    pub fn advise_huge_pages(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: madvise on the region's own page-aligned mapping; MADV_HUGEPAGE only
            // changes how future faults are served, not the contents.
            let rc =
                unsafe { libc::madvise(self.base.as_ptr().cast(), self.len, libc::MADV_HUGEPAGE) };
            rc == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
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

/// XOR of the 8-byte words of `[p, p + len)` (trailing bytes folded in one by one).
///
/// # Safety
/// `[p, p + len)` must be mapped and readable.
#[inline(always)]
unsafe fn load_xor(p: *const u8, len: usize) -> u64 {
    let mut i = 0usize;
    #[cfg(not(target_arch = "x86_64"))]
    let mut acc = 0u64;
    #[cfg(target_arch = "x86_64")]
    let mut acc = {
        use std::arch::x86_64::{
            __m128i, _mm_cvtsi128_si64, _mm_loadu_si128, _mm_setzero_si128, _mm_unpackhi_epi64,
            _mm_xor_si128,
        };
        // SAFETY: every load below reads 16 bytes at `p + i` with `i + 16 <= len` (or
        // `i + 64 <= len` for the four of an unrolled line), inside the caller's range. SSE2
        // is part of x86-64.
        unsafe {
            let (mut a0, mut a1, mut a2, mut a3) = (
                _mm_setzero_si128(),
                _mm_setzero_si128(),
                _mm_setzero_si128(),
                _mm_setzero_si128(),
            );
            while i + 64 <= len {
                let q = p.add(i).cast::<__m128i>();
                a0 = _mm_xor_si128(a0, _mm_loadu_si128(q));
                a1 = _mm_xor_si128(a1, _mm_loadu_si128(q.add(1)));
                a2 = _mm_xor_si128(a2, _mm_loadu_si128(q.add(2)));
                a3 = _mm_xor_si128(a3, _mm_loadu_si128(q.add(3)));
                i += 64;
            }
            while i + 16 <= len {
                a0 = _mm_xor_si128(a0, _mm_loadu_si128(p.add(i).cast::<__m128i>()));
                i += 16;
            }
            let v = _mm_xor_si128(_mm_xor_si128(a0, a1), _mm_xor_si128(a2, a3));
            (_mm_cvtsi128_si64(v) ^ _mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v))) as u64
        }
    };
    while i + 8 <= len {
        // SAFETY: `i + 8 <= len`, inside the caller's range.
        acc ^= unsafe { p.add(i).cast::<u64>().read_unaligned() };
        i += 8;
    }
    while i < len {
        // SAFETY: `i < len`, inside the caller's range.
        acc ^= u64::from(unsafe { p.add(i).read() }) << ((i % 8) * 8);
        i += 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierbase::device::RegionOptions;

    #[test]
    fn read_xors_words_and_write_persists_every_way() {
        let region = PmemRegion::anonymous(1 << 16, &RegionOptions::default()).unwrap();
        let m = RawMem::new(&region).unwrap();
        let mut src = vec![0u8; 200];
        for (i, b) in src.iter_mut().enumerate() {
            *b = i as u8;
        }
        for (k, p) in Persist::ALL.into_iter().enumerate() {
            if p.check_supported().is_err() {
                continue;
            }
            let off = 1000 + k as u64 * 300 + 3;
            m.write(off, &src, p);
            let mut back = vec![0u8; 200];
            region.read(off, &mut back).unwrap();
            assert_eq!(back, src, "{p}");
            let mut expect = 0u64;
            for c in src.chunks(8) {
                let mut w = [0u8; 8];
                w[..c.len()].copy_from_slice(c);
                expect ^= u64::from_le_bytes(w);
            }
            assert_eq!(m.read(off, 200), expect);
        }
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_range_access_panics_instead_of_touching_memory() {
        let region = PmemRegion::anonymous(4096, &RegionOptions::default()).unwrap();
        let m = RawMem::new(&region).unwrap();
        m.read(4090, 64);
    }
}
