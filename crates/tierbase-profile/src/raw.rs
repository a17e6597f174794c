//! The memory benchmarks' access operations: what one read or one write of the executor does.
//!
//! Owns: [`RawMem`], which maps a benchmark operation (a read; a write with its [`Persist`]
//! instruction) onto the device layer's raw access ([`RawAccess`]), and filling memory with
//! random data. Going through `PmemRegion::read`/`persist` would add counter updates and a copy
//! into a buffer per operation, and a volatile region's `flush` does nothing (PerMA-Bench
//! measures flushes on DRAM too), so the operations execute the instructions themselves —
//! bounds-checked, race-free loads and stores, flushes and non-temporal stores that
//! `tierbase::device::raw` implements (this crate has no `unsafe`). Must not touch: files,
//! mappings or their life cycle (the region owns those).

use tierbase::device::{PmemRegion, RawAccess, cpu};
use tierbase_bench::rng::Rng;
use tierbase_bench::{BenchError, Result};

use crate::persist::Persist;

/// Bytes of random data generated per store while filling.
const FILL_CHUNK: usize = 4096;

/// A bounds-checked view of a region's data area for the benchmark operations, valid while the
/// region lives.
#[derive(Debug, Clone, Copy)]
pub struct RawMem<'a> {
    mem: RawAccess<'a>,
}

impl<'a> RawMem<'a> {
    /// The data area of `region` (its current length; the benchmark never grows it).
    pub fn new(region: &'a PmemRegion) -> Result<Self> {
        if region.is_empty() {
            return Err(BenchError::invalid("the memory range is empty"));
        }
        Ok(RawMem {
            mem: RawAccess::new(region)?,
        })
    }

    /// Bytes in the view.
    pub fn len(&self) -> u64 {
        self.mem.len()
    }

    /// Whether the view is empty (never: [`RawMem::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// Loads `len` bytes at `off` and returns their 8-byte words XORed together (so the loads
    /// cannot be optimised away and a dependent operation can use the data).
    #[inline]
    pub fn read(&self, off: u64, len: usize) -> u64 {
        self.mem.read_xor(off, len)
    }

    /// Stores `src` at `off` and persists it with `persist` (see [`Persist`]). The executor
    /// checks at set-up that the CPU supports the flush instruction
    /// ([`Persist::check_supported`]); an unsupported one panics here.
    #[inline]
    pub fn write(&self, off: u64, src: &[u8], persist: Persist) {
        match persist {
            Persist::None => self.mem.write(off, src),
            Persist::Cache | Persist::CacheInv => {
                self.mem.write_flush(off, src, persist.flush_instruction());
                cpu::sfence();
            }
            Persist::NoCache => {
                self.mem.write_nt(off, src);
                cpu::sfence();
            }
        }
    }

    /// Fills `[off, off + len)` with random words from `rng` (the "prepare data" step; it also
    /// faults every page in): word `i` of the range is the `i`-th `next_u64()`, a trailing
    /// partial word one `next_u64()` per byte.
    pub fn fill_random(&self, off: u64, len: usize, rng: &mut Rng) {
        let mut buf = [0u8; FILL_CHUNK];
        let mut done = 0;
        while done < len {
            let n = FILL_CHUNK.min(len - done);
            let mut words = buf[..n].chunks_exact_mut(8);
            for w in &mut words {
                w.copy_from_slice(&rng.next_u64().to_ne_bytes());
            }
            for b in words.into_remainder() {
                *b = rng.next_u64() as u8;
            }
            self.mem.write(off + done as u64, &buf[..n]);
            done += n;
        }
    }

    /// Asks the kernel for transparent huge pages on the whole range (before first touch).
    /// Returns whether the kernel accepted the advice.
    pub fn advise_huge_pages(&self) -> bool {
        self.mem.advise_huge_pages()
    }
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
    fn fill_writes_the_random_words_in_order() {
        let region = PmemRegion::anonymous(1 << 16, &RegionOptions::default()).unwrap();
        let m = RawMem::new(&region).unwrap();
        let (off, len) = (13u64, 2 * FILL_CHUNK + 21);
        m.fill_random(off, len, &mut Rng::from_seed(7));
        let mut rng = Rng::from_seed(7);
        let mut expect = Vec::with_capacity(len);
        for _ in 0..2 {
            for _ in 0..FILL_CHUNK / 8 {
                expect.extend_from_slice(&rng.next_u64().to_ne_bytes());
            }
        }
        expect.extend_from_slice(&rng.next_u64().to_ne_bytes());
        expect.extend_from_slice(&rng.next_u64().to_ne_bytes());
        for _ in 0..5 {
            expect.push(rng.next_u64() as u8);
        }
        let mut back = vec![0u8; len];
        region.read(off, &mut back).unwrap();
        assert_eq!(back, expect);
    }
}
