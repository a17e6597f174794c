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
        if end > self.reserved_fast.load(Ordering::Acquire)
            && let Err(e) = self.reserve(region, end)
        {
            // Hand the range back unless a later allocation took space after it already: a
            // refused allocation must not move the high-water mark, or every retry on a full
            // device would push it further.
            let _ = self
                .next
                .compare_exchange(end, cur, Ordering::AcqRel, Ordering::Relaxed);
            return Err(e);
        }
        Ok(start)
    }

    /// Whether less than an eighth of the region's mapped length is left beyond the space
    /// handed out, and the region may still grow: time for [`RegionBump::grow_ahead`].
    pub fn headroom_low(&self, region: &PmemRegion) -> bool {
        let len = region.len();
        let used = self.reserved_fast.load(Ordering::Acquire);
        len < region.max_len() && len.saturating_sub(used) < len / 8
    }

    /// Grows the region by a quarter (at most to its limit) when [`RegionBump::headroom_low`],
    /// without this allocator's lock — for a background runner, so that writers find the
    /// space mapped instead of waiting while an allocation grows (and pre-faults) a large
    /// step. Allocations still grow the region themselves if it runs short.
    pub fn grow_ahead(&self, region: &PmemRegion) -> Result<bool> {
        if !self.headroom_low(region) {
            return Ok(false);
        }
        let len = region.len();
        region.grow((len + len / 4).min(region.max_len()))?;
        Ok(true)
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
                    reason: "the region may not grow: its reservation is used up".into(),
                });
            }
            // A full device refuses the allocation like a used-up reservation: nothing changed,
            // and the store goes on (a store that must stop decides so itself).
            crate::device::grow_toward(mark, grown.next_multiple_of(4096), |len| region.grow(len))
                .map_err(|e| match e {
                    Error::DeviceFull { .. } => Error::StoreFull {
                        used: *reserved,
                        capacity: region.len(),
                        reason: format!("the region may not grow: {e}"),
                    },
                    e => e,
                })?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::RegionOptions;

    #[test]
    fn grows_ahead_only_when_headroom_is_low() {
        let dir = tempfile::tempdir().unwrap();
        let opts = RegionOptions {
            reserve: 64 << 20,
            ..RegionOptions::default()
        };
        let region = PmemRegion::create(&dir.path().join("r"), 1 << 20, &opts).unwrap();
        let len = region.len();
        let bump = RegionBump::new(0, 4096, 4096, 4096);
        // Plenty of room: nothing to do.
        assert!(!bump.headroom_low(&region));
        assert!(!bump.grow_ahead(&region).unwrap());
        assert_eq!(region.len(), len);
        // Handed out up to within an eighth of the end: grown by a quarter.
        bump.alloc(&region, len - 4096 - len / 16, 8).unwrap();
        assert!(bump.headroom_low(&region));
        assert!(bump.grow_ahead(&region).unwrap());
        assert_eq!(region.len(), len + len / 4);
        assert!(!bump.headroom_low(&region));
        // Never past the region's limit: fill and grow ahead until it is reached.
        for _ in 0..64 {
            let free = region.len() - bump.reserved_fast.load(Ordering::Acquire);
            bump.alloc(&region, free - free / 16, 8).unwrap();
            if !bump.grow_ahead(&region).unwrap() {
                break;
            }
        }
        assert_eq!(region.len(), region.max_len());
        assert!(!bump.grow_ahead(&region).unwrap());
    }

    /// A refused allocation hands its range back: retries on a full region do not move the
    /// next free byte, and what still fits is handed out where it would have been.
    #[test]
    fn a_refused_allocation_leaves_the_mark_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let opts = RegionOptions {
            reserve: 4 << 20,
            ..RegionOptions::default()
        };
        let region = PmemRegion::create(&dir.path().join("r"), 1 << 20, &opts).unwrap();
        let bump = RegionBump::new(0, 4096, 4096, 4096);
        let first = bump.alloc(&region, 4096, 4096).unwrap();
        let next = bump.used();
        for _ in 0..10 {
            let refused = bump.alloc(&region, 8 << 20, 4096);
            assert!(
                matches!(refused, Err(Error::StoreFull { .. })),
                "{refused:?}"
            );
            assert_eq!(bump.used(), next);
        }
        assert_eq!(bump.alloc(&region, 4096, 4096).unwrap(), first + 4096);
    }
}
