//! Region space handed out from a high-water mark that is persisted ahead of use, in steps: a
//! store that only ever adds structures (directories, chunks, buckets) allocates with one atomic
//! add, persists the mark once per step, and after a crash starts at the persisted mark — no
//! allocator scan, and at most one step leaked per crash. Space beyond the mark was never handed
//! out, so it is still the zeros the region grew with.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::device::PmemRegion;
use crate::error::{Error, Result};

/// A bump allocator over a region, its mark at a fixed 8-byte-aligned header word.
#[derive(Debug)]
pub struct RegionBump {
    /// Next free byte (DRAM only).
    next: AtomicU64,
    /// The persisted mark: nothing at or beyond it was handed out before.
    reserved: Mutex<u64>,
    /// The mark, for allocations that stay below it without taking the lock.
    reserved_fast: AtomicU64,
    /// Where the mark lives in the region.
    mark_word: u64,
    /// How far past a request the mark moves.
    step: u64,
}

impl RegionBump {
    /// An allocator whose persisted mark (at `mark_word` of `region`) is `mark`, never below
    /// `floor` (the start of the space).
    pub fn new(mark_word: u64, mark: u64, floor: u64, step: u64) -> Self {
        let start = mark.max(floor);
        RegionBump {
            next: AtomicU64::new(start),
            reserved: Mutex::new(start),
            reserved_fast: AtomicU64::new(start),
            mark_word,
            step: step.max(4096),
        }
    }

    /// `bytes` bytes aligned to `align` (a power of two): zeros never handed out before. Grows
    /// the region as needed (in steps of a quarter of its size, at least `bytes`).
    pub fn alloc(&self, region: &PmemRegion, bytes: u64, align: u64) -> Result<u64> {
        let mut cur = self.next.load(Ordering::Relaxed);
        let (start, end) = loop {
            let start = cur.next_multiple_of(align);
            let end = start.checked_add(bytes).ok_or_else(|| {
                Error::InvalidArgument(format!("allocation of {bytes} bytes overflows"))
            })?;
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break (start, end),
                Err(actual) => cur = actual,
            }
        };
        if end > self.reserved_fast.load(Ordering::Acquire) {
            self.reserve(region, end)?;
        }
        Ok(start)
    }

    fn reserve(&self, region: &PmemRegion, end: u64) -> Result<()> {
        let mut reserved = self.reserved.lock();
        if end <= *reserved {
            return Ok(());
        }
        let mark = end.max(*reserved + self.step).next_multiple_of(4096);
        if region.len() < mark {
            let grown = mark
                .max(region.len() + region.len() / 4)
                .min(region.max_len());
            if grown < mark {
                return Err(Error::StoreFull {
                    used: *reserved,
                    capacity: region.max_len(),
                    reason: "the region's reservation is used up".into(),
                });
            }
            region.grow(grown.next_multiple_of(4096))?;
        }
        region
            .atomic_u64(self.mark_word)?
            .store(mark, Ordering::Release);
        region.persist(self.mark_word, 8)?;
        *reserved = mark;
        self.reserved_fast.store(mark, Ordering::Release);
        Ok(())
    }

    /// Persists the mark at the next free byte (a clean close): the next open hands out
    /// space from there instead of from the step reserved ahead, so clean closes leak nothing.
    pub fn release(&self, region: &PmemRegion) -> Result<()> {
        let mut reserved = self.reserved.lock();
        let next = self.next.load(Ordering::Acquire);
        if next < *reserved {
            region
                .atomic_u64(self.mark_word)?
                .store(next, Ordering::Release);
            region.persist(self.mark_word, 8)?;
            *reserved = next;
            self.reserved_fast.store(next, Ordering::Release);
        }
        Ok(())
    }

    /// The next byte that would be handed out.
    pub fn used(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }
}
