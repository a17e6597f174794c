//! The DRAM level: a fixed number of entries (`2^dram_bits`), each with 256 slots in two
//! halves of 128. Inserts go to the active half; a full half is frozen and migrated to PMem
//! level 0 (by a background migrator, or by the inserter when the other half is still
//! frozen), while the other half takes inserts. Its size is set by configuration and never
//! grows with the record count.
//!
//! Owns: the halves' slots, sizes, epochs and latches, and each entry's two locks: `insert`
//! (writers of the entry's keys, in turn) and `subtree` (migrations and scans of the PMem
//! entries below it — every PMem entry receives records from exactly one entry above, so one
//! DRAM entry's `subtree` lock guards its whole subtree). Must not touch: media.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

use parking_lot::Mutex;

use super::layout::HALF_SLOTS;
use crate::device::{ZeroedWords, match_bytes_128};
use crate::error::Result;
use crate::sync::{VersionLatch, backoff};

/// One half of a DRAM entry.
#[derive(Debug, Default)]
pub(super) struct Half {
    /// Changed when the half is cleared, so optimistic readers of a cleared half retry
    /// (appends need no latch: a reader reads the size first and only slots below it).
    pub latch: VersionLatch,
    /// Slots filled.
    pub size: AtomicU32,
    /// The half's epoch: every record logged into it carries it.
    pub epoch: AtomicU32,
    /// Full and waiting for (or in) migration.
    pub frozen: AtomicBool,
}

/// A DRAM entry. One cache line each, so writers of neighbouring entries do not share lines.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct DramEntry {
    /// Held by a writer of one of the entry's keys (inserts are linearizable per key).
    pub insert: Mutex<()>,
    /// Held while the entry's PMem subtree changes (migrations) or is scanned as a whole.
    pub subtree: Mutex<()>,
    /// The two halves.
    pub halves: [Half; 2],
    /// Which half takes inserts.
    pub active: AtomicU8,
    /// Epoch of the last half migrated to PMem (= the PMem level-0 entry's epoch): log
    /// entries with this epoch or an older one are migrated.
    pub stamp: AtomicU32,
    /// Queued for a background migrator.
    pub queued: AtomicBool,
}

/// The DRAM level.
#[derive(Debug)]
pub(super) struct DramLevel {
    pub entries: Box<[DramEntry]>,
    keys: ZeroedWords,
    values: ZeroedWords,
    /// One byte of each slot's key hash, eight to a word: a lookup compares these (two cache
    /// lines per half) and reads only the keys they match, instead of 1 KiB of keys.
    fingerprints: ZeroedWords,
}

/// Words of fingerprints per half (a half's 128 fingerprint bytes are one vector compare).
const FP_WORDS: usize = HALF_SLOTS / 8;
const _: () = assert!(
    HALF_SLOTS == 128,
    "match_bytes_128 compares one half's fingerprints"
);

#[inline]
fn fingerprint(hash: u64) -> u64 {
    hash >> 56
}

/// The value words a search of one half or one level found for a key, newest first: almost
/// always none or one, so no allocation.
pub(super) type Candidates = smallvec::SmallVec<[u64; 2]>;

impl DramLevel {
    pub fn new(entries: usize) -> Result<Self> {
        let slots = entries * 2 * HALF_SLOTS;
        Ok(DramLevel {
            entries: (0..entries).map(|_| DramEntry::default()).collect(),
            keys: ZeroedWords::new(slots)?,
            values: ZeroedWords::new(slots)?,
            fingerprints: ZeroedWords::new(entries * 2 * FP_WORDS)?,
        })
    }

    /// Bytes of DRAM the level holds at most (slots and entries).
    pub fn bytes(&self) -> u64 {
        (self.keys.len() * 16
            + self.fingerprints.len() * 8
            + self.entries.len() * std::mem::size_of::<DramEntry>()) as u64
    }

    #[inline]
    fn slot(entry: usize, half: usize, slot: usize) -> usize {
        (entry * 2 + half) * HALF_SLOTS + slot
    }

    /// Writes a record into `slot` of a half (the caller holds the entry's `insert` lock and
    /// publishes it by raising the half's size).
    #[inline]
    pub fn write(&self, entry: usize, half: usize, slot: usize, key: u64, value: u64, hash: u64) {
        let i = Self::slot(entry, half, slot);
        self.keys[i].store(key, Ordering::Relaxed);
        self.values[i].store(value, Ordering::Relaxed);
        // One writer per entry (its insert lock); readers look only below the half's size, so
        // rewriting the word's other bytes is invisible to them.
        let w = &self.fingerprints[(entry * 2 + half) * FP_WORDS + slot / 8];
        let shift = 8 * (slot % 8);
        let old = w.load(Ordering::Relaxed);
        w.store(
            (old & !(0xff << shift)) | (fingerprint(hash) << shift),
            Ordering::Relaxed,
        );
    }

    /// The record in `slot` of a half.
    #[inline]
    pub fn read(&self, entry: usize, half: usize, slot: usize) -> (u64, u64) {
        let i = Self::slot(entry, half, slot);
        (
            self.keys[i].load(Ordering::Relaxed),
            self.values[i].load(Ordering::Relaxed),
        )
    }

    /// Starts loading what a search of `entry` reads first (its latches and both halves'
    /// fingerprints), so those misses overlap the PMem levels' own.
    #[inline]
    pub fn prefetch(&self, entry: usize) {
        crate::device::cpu::prefetch(std::ptr::from_ref(&self.entries[entry]));
        let fps = &self.fingerprints[entry * 2 * FP_WORDS..(entry + 1) * 2 * FP_WORDS];
        for line in fps.chunks(8) {
            crate::device::cpu::prefetch(std::ptr::from_ref(&line[0]));
        }
    }

    /// Starts loading the key and value words of the slot the next append to `entry` fills
    /// (once the entry's own line is there, [`Self::prefetch`]): their stores then find the
    /// lines in cache instead of waiting for them under the entry's lock. A hint: the slot
    /// read here may be taken or the half switched by the time the append comes.
    #[inline]
    pub fn prefetch_next_slot(&self, entry: usize) {
        let e = &self.entries[entry];
        let half = halves(e).0;
        let slot = e.halves[half].size.load(Ordering::Relaxed) as usize;
        if slot < HALF_SLOTS {
            let i = Self::slot(entry, half, slot);
            crate::device::cpu::prefetch(std::ptr::from_ref(&self.keys[i]));
            crate::device::cpu::prefetch(std::ptr::from_ref(&self.values[i]));
        }
    }

    /// The records of a half whose key word is `key` (hash `hash`), newest first, read
    /// optimistically (consistent: retried while the half is cleared under the reader).
    pub fn candidates(&self, entry: usize, half: usize, key: u64, hash: u64, out: &mut Candidates) {
        let h = &self.entries[entry].halves[half];
        let mut round = 0;
        loop {
            out.clear();
            let Some(v) = h.latch.optimistic() else {
                backoff(&mut round);
                continue;
            };
            let size = (h.size.load(Ordering::Acquire) as usize).min(HALF_SLOTS);
            if size == 0 {
                // Nothing published (the frozen half, mostly, once migrated): the half held
                // no record when its size was read, whatever happened since.
                return;
            }
            let base = Self::slot(entry, half, 0);
            let mut hits = self.fingerprint_hits(entry, half, size, hash);
            while hits != 0 {
                let s = 127 - hits.leading_zeros() as usize;
                hits &= !(1 << s);
                if self.keys[base + s].load(Ordering::Relaxed) == key {
                    out.push(self.values[base + s].load(Ordering::Relaxed));
                }
            }
            if h.latch.validate(v) {
                return;
            }
            backoff(&mut round);
        }
    }

    /// Bit `s` set for each of the first `size` slots of a half whose fingerprint is `hash`'s
    /// (one vector compare of the half's 128 fingerprint bytes); the caller compares the keys
    /// of those slots, newest (highest bit) first, and makes the read consistent (a latch, or
    /// the entry's lock).
    #[inline]
    fn fingerprint_hits(&self, entry: usize, half: usize, size: usize, hash: u64) -> u128 {
        let fps: &[_; FP_WORDS] = self.fingerprints[(entry * 2 + half) * FP_WORDS..]
            .first_chunk()
            .expect("every half has its fingerprint words");
        let mut words = [0u64; FP_WORDS];
        for (out, word) in words.iter_mut().zip(fps) {
            *out = word.load(Ordering::Relaxed);
        }
        // Only slots below the size are published.
        let filled = u128::MAX
            .checked_shr(HALF_SLOTS as u32 - size as u32)
            .unwrap_or(0);
        match_bytes_128(&words, fingerprint(hash) as u8) & filled
    }

    /// The value word of the newest record in the active half whose key word is `key` (hash
    /// `hash`) and that `accept` takes, trying matches newest first. For the entry's writer:
    /// the caller holds the entry's `insert` lock, under which nothing else fills, freezes or
    /// clears the active half, so no latch is read (cheaper than [`Self::candidates`] on
    /// every blind write; docs/BENCHMARKS.md, Figure 41).
    pub fn newest_in_active(
        &self,
        entry: usize,
        key: u64,
        hash: u64,
        mut accept: impl FnMut(u64) -> Result<bool>,
    ) -> Result<Option<u64>> {
        let half = halves(&self.entries[entry]).0;
        let size = (self.entries[entry].halves[half]
            .size
            .load(Ordering::Acquire) as usize)
            .min(HALF_SLOTS);
        if size == 0 {
            return Ok(None);
        }
        let base = Self::slot(entry, half, 0);
        let mut hits = self.fingerprint_hits(entry, half, size, hash);
        while hits != 0 {
            let s = 127 - hits.leading_zeros() as usize;
            hits &= !(1 << s);
            if self.keys[base + s].load(Ordering::Relaxed) == key {
                let value = self.values[base + s].load(Ordering::Relaxed);
                if accept(value)? {
                    return Ok(Some(value));
                }
            }
        }
        Ok(None)
    }

    /// The records of a half, oldest first (the half is frozen: nothing changes it).
    pub fn records(
        &self,
        entry: usize,
        half: usize,
    ) -> smallvec::SmallVec<[(u64, u64); HALF_SLOTS]> {
        let size = (self.entries[entry].halves[half]
            .size
            .load(Ordering::Acquire) as usize)
            .min(HALF_SLOTS);
        (0..size).map(|s| self.read(entry, half, s)).collect()
    }

    /// Empties a half (its records are on PMem now); readers in it retry.
    pub fn clear(&self, entry: usize, half: usize) {
        let h = &self.entries[entry].halves[half];
        let _g = h.latch.lock();
        h.size.store(0, Ordering::Release);
        h.frozen.store(false, Ordering::Release);
    }
}

/// The half that takes inserts, and the other one.
#[inline]
pub(super) fn halves(e: &DramEntry) -> (usize, usize) {
    let a = usize::from(e.active.load(Ordering::Acquire) & 1);
    (a, 1 - a)
}

/// Stamps are read by log compaction from any thread.
pub(super) fn stamp(e: &DramEntry) -> u32 {
    e.stamp.load(Ordering::Acquire)
}

/// Counts how many records a DRAM entry holds unmigrated (both halves).
pub(super) fn held(e: &DramEntry) -> u64 {
    e.halves
        .iter()
        .map(|h| u64::from(h.size.load(Ordering::Acquire)))
        .sum()
}
