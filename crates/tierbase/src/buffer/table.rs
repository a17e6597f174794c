//! The page table: which frame holds which page, read without locks.
//!
//! Owns: the mapping from page id to frame index. Must not touch: frames or their latches —
//! an entry is only a hint, and every fix re-checks the frame's page id under the frame's
//! latch (see the pool's module docs), so a lookup racing an eviction costs a retry, never a
//! wrong page.
//!
//! Why not a `HashMap` behind sharded mutexes (what the pool had before): every fix locked a
//! shard, and every descent of the tree fixes the root, so two readers on two cores bounced
//! the root shard's mutex line on each lookup. Page ids are dense (offsets in the page file),
//! so a radix array of atomic slots answers a lookup with three plain loads and no write to a
//! shared line. On the 2-vCPU guest the difference in YCSB C at 2 threads was within the noise
//! (docs/BENCHMARKS.md, Figure 7 (d)); it was kept for the lock it removes from every fix.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::error::{Error, Result};

const LEAF_BITS: u32 = 12;
const MID_BITS: u32 = 12;
const TOP_BITS: u32 = 8;
/// Page ids the table can map: 2^32 (16 TiB of 4 KiB pages).
pub const MAX_PAGES: u64 = 1 << (LEAF_BITS + MID_BITS + TOP_BITS);

type Leaf = Box<[AtomicU32]>;
type Mid = Box<[OnceLock<Leaf>]>;

/// Page id → frame index. A slot holds `frame + 1`, or 0 when the page is not resident.
/// Levels are allocated on first use and live as long as the table (16 KiB per 4096 page ids
/// ever mapped, plus 64 KiB per 16 M).
#[derive(Debug)]
pub struct PageTable {
    top: Box<[OnceLock<Mid>]>,
    resident: AtomicUsize,
}

impl Default for PageTable {
    fn default() -> Self {
        PageTable {
            top: (0..1usize << TOP_BITS).map(|_| OnceLock::new()).collect(),
            resident: AtomicUsize::new(0),
        }
    }
}

fn split(pid: u64) -> Option<(usize, usize, usize)> {
    (pid < MAX_PAGES).then(|| {
        let leaf = (pid & ((1 << LEAF_BITS) - 1)) as usize;
        let mid = ((pid >> LEAF_BITS) & ((1 << MID_BITS) - 1)) as usize;
        let top = (pid >> (LEAF_BITS + MID_BITS)) as usize;
        (top, mid, leaf)
    })
}

impl PageTable {
    fn slot(&self, pid: u64) -> Option<&AtomicU32> {
        let (t, m, l) = split(pid)?;
        self.top[t].get()?[m].get()?.get(l)
    }

    fn slot_or_create(&self, pid: u64) -> Result<&AtomicU32> {
        let (t, m, l) = split(pid).ok_or_else(|| {
            Error::corrupt(
                None,
                format!("page id {pid} is beyond the page table's range ({MAX_PAGES} pages)"),
            )
        })?;
        let mid =
            self.top[t].get_or_init(|| (0..1usize << MID_BITS).map(|_| OnceLock::new()).collect());
        let leaf = mid[m].get_or_init(|| {
            (0..1usize << LEAF_BITS)
                .map(|_| AtomicU32::new(0))
                .collect()
        });
        Ok(&leaf[l])
    }

    /// The frame that holds `pid`, if any (a hint: check the frame's page id under its latch).
    #[inline]
    pub fn get(&self, pid: u64) -> Option<u32> {
        let v = self.slot(pid)?.load(Ordering::Acquire);
        v.checked_sub(1)
    }

    /// Maps `pid` to `frame` unless it is mapped already; `false` if it was (the caller lost a
    /// race to load the page and must give its frame back).
    pub fn insert(&self, pid: u64, frame: u32) -> Result<bool> {
        let inserted = self
            .slot_or_create(pid)?
            .compare_exchange(0, frame + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if inserted {
            self.resident.fetch_add(1, Ordering::Relaxed);
        }
        Ok(inserted)
    }

    /// Unmaps `pid` if it is mapped to `frame`.
    pub fn remove(&self, pid: u64, frame: u32) {
        if let Some(slot) = self.slot(pid)
            && slot
                .compare_exchange(frame + 1, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.resident.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Points `pid`'s entry from frame `old` to frame `new`; false if it did not name `old`.
    pub fn replace(&self, pid: u64, old: u32, new: u32) -> bool {
        self.slot(pid).is_some_and(|slot| {
            slot.compare_exchange(old + 1, new + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    /// Number of mapped pages.
    pub fn len(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_unmaps_and_refuses_what_it_cannot_hold() {
        let t = PageTable::default();
        assert_eq!(t.get(7), None);
        assert!(t.insert(7, 3).unwrap());
        assert!(
            !t.insert(7, 4).unwrap(),
            "a second load of the same page loses"
        );
        assert_eq!(t.get(7), Some(3));
        // Ids in other leaves and mids, including the last one the table can hold.
        for pid in [4095, 4096, 1 << 24, MAX_PAGES - 1] {
            assert!(t.insert(pid, 9).unwrap());
            assert_eq!(t.get(pid), Some(9));
        }
        assert_eq!(t.len(), 5);
        t.remove(7, 4); // not its frame: stays
        assert_eq!(t.get(7), Some(3));
        t.remove(7, 3);
        assert_eq!(t.get(7), None);
        assert_eq!(t.len(), 4);
        assert!(t.insert(MAX_PAGES, 1).is_err());
        assert_eq!(t.get(MAX_PAGES), None);
        assert_eq!(t.get(u64::MAX), None);
    }
}
