//! Free blocks as coalesced extents, so that multi-block runs (large records) are reused as
//! readily as single blocks and freed neighbours merge back into long runs.

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::Mutex;

#[derive(Debug, Default)]
struct Extents {
    /// start -> length.
    by_start: BTreeMap<u64, u64>,
    /// (length, start), for best fit.
    by_len: BTreeSet<(u64, u64)>,
    blocks: u64,
}

impl Extents {
    fn insert(&mut self, start: u64, len: u64) {
        self.by_start.insert(start, len);
        self.by_len.insert((len, start));
    }

    fn remove(&mut self, start: u64, len: u64) {
        self.by_start.remove(&start);
        self.by_len.remove(&(len, start));
    }
}

/// A thread-safe set of free blocks, kept as coalesced extents.
///
/// Single blocks come from the shortest extent (so long runs stay whole for large records);
/// runs come from the shortest extent that fits (best fit).
#[derive(Debug, Default)]
pub struct FreeExtents {
    inner: Mutex<Extents>,
}

impl FreeExtents {
    /// An empty set.
    pub fn new() -> Self {
        FreeExtents::default()
    }

    /// Adds blocks `start..start + len` (which must not be free already; a double free is
    /// ignored, so bookkeeping stays consistent).
    pub fn free(&self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut ex = self.inner.lock();
        let (mut s, mut l) = (start, len);
        // Overlap with the extent before or after means a double free: ignore it.
        if let Some((&ps, &pl)) = ex.by_start.range(..=start).next_back()
            && ps + pl > start
        {
            return;
        }
        if let Some((&ns, _)) = ex.by_start.range(start..).next()
            && ns < start + len
        {
            return;
        }
        if let Some((&ps, &pl)) = ex.by_start.range(..start).next_back()
            && ps + pl == start
        {
            ex.remove(ps, pl);
            s = ps;
            l += pl;
        }
        if let Some(&nl) = ex.by_start.get(&(start + len)) {
            ex.remove(start + len, nl);
            l += nl;
        }
        ex.insert(s, l);
        ex.blocks += len;
    }

    /// Takes one free block.
    pub fn take_one(&self) -> Option<u64> {
        self.take_run(1)
    }

    /// Takes `n` consecutive free blocks (best fit); returns the first.
    pub fn take_run(&self, n: u64) -> Option<u64> {
        if n == 0 {
            return None;
        }
        let mut ex = self.inner.lock();
        let &(len, start) = ex.by_len.range((n, 0)..).next()?;
        ex.remove(start, len);
        if len > n {
            ex.insert(start + n, len - n);
        }
        ex.blocks -= n;
        Some(start)
    }

    /// Takes block `b` if it is free (for callers that need a particular block).
    pub fn take_exact(&self, b: u64) -> bool {
        let mut ex = self.inner.lock();
        let Some((&s, &l)) = ex.by_start.range(..=b).next_back() else {
            return false;
        };
        if s + l <= b {
            return false;
        }
        ex.remove(s, l);
        if b > s {
            ex.insert(s, b - s);
        }
        if s + l > b + 1 {
            ex.insert(b + 1, s + l - b - 1);
        }
        ex.blocks -= 1;
        true
    }

    /// Free blocks in all.
    pub fn blocks(&self) -> u64 {
        self.inner.lock().blocks
    }

    /// Number of extents (a fragmentation figure).
    pub fn extents(&self) -> usize {
        self.inner.lock().by_start.len()
    }

    /// The longest free run.
    pub fn longest(&self) -> u64 {
        self.inner
            .lock()
            .by_len
            .iter()
            .next_back()
            .map_or(0, |&(l, _)| l)
    }

    /// Forgets every free block.
    pub fn clear(&self) {
        *self.inner.lock() = Extents::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn coalesces_and_fits_best() {
        let f = FreeExtents::new();
        f.free(10, 2);
        f.free(14, 1);
        f.free(12, 2); // joins 10..12 and 14..15 into 10..15
        assert_eq!(f.extents(), 1);
        assert_eq!(f.longest(), 5);
        f.free(30, 3);
        assert_eq!(f.take_run(3), Some(30)); // best fit: the 3-run, not the 5-run
        assert_eq!(f.take_one(), Some(10));
        assert_eq!(f.blocks(), 4);
        assert_eq!(f.take_run(5), None);
        assert!(f.take_exact(13));
        assert!(!f.take_exact(13));
        assert_eq!(f.blocks(), 3);
        f.free(11, 1); // double free: ignored
        assert_eq!(f.blocks(), 3);
    }

    proptest! {
        /// Against a model set of blocks: every taken block was free, runs are consecutive,
        /// and counts agree.
        #[test]
        fn matches_a_set(ops in proptest::collection::vec((0u8..4, 0u64..64, 1u64..6), 1..200)) {
            let f = FreeExtents::new();
            let mut model = BTreeSet::new();
            for (op, at, n) in ops {
                match op {
                    0 | 1 => {
                        let range: Vec<u64> = (at..at + n).collect();
                        let overlaps = range.iter().any(|b| model.contains(b));
                        f.free(at, n);
                        if !overlaps {
                            model.extend(range);
                        }
                    }
                    2 => {
                        if let Some(s) = f.take_run(n) {
                            for b in s..s + n {
                                prop_assert!(model.remove(&b), "block {} taken but not free", b);
                            }
                        } else {
                            let fits = model.iter().any(|&b| (b..b + n).all(|x| model.contains(&x)));
                            prop_assert!(!fits, "a run of {} was free but not found", n);
                        }
                    }
                    _ => {
                        prop_assert_eq!(f.take_exact(at), model.remove(&at));
                    }
                }
                prop_assert_eq!(f.blocks(), model.len() as u64);
            }
        }
    }
}
