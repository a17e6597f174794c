//! The persistent levels: directories of 512-byte entries (size and epoch, 16 bucket
//! offsets, 16 bucket filters), each level 16× the one above; lookups across the levels, and
//! migration of a DRAM half into level 0 and of a full entry into the next level.
//!
//! Owns: directory and bucket placement, the persist order of a migration (records and
//! filters, then size and epoch, then clearing the source) and the optimistic read protocol
//! of an entry (its size-and-epoch word, which never repeats: epochs only grow). Must not
//! touch: the DRAM level's halves (only their records, handed in) or the logs.

use std::sync::atomic::Ordering;

use super::Inner;
use super::dram::Candidates;
use super::filter;
use super::layout::{
    BUCKET_BYTES, ENTRY_BYTES, ENTRY_FILTER, ENTRY_RECORDS, FANOUT, MAX_LEVELS, PlushLayout, SLOTS,
    header, size_epoch, split_size_epoch,
};
use crate::device::match_16;
use crate::error::{Error, Result};

/// A record on its way between levels: key word, value word, and the key's hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Rec {
    pub key: u64,
    pub value: u64,
    pub hash: u64,
}

/// The buckets of one level's entry a lookup's filter line let through (bit `b`: bucket
/// `b`), and the entry's size word they were chosen at; `word` 0 (no entry with records has
/// it) when nothing was chosen.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BucketHint {
    word: u64,
    maybe: u16,
}

/// [`BucketHint`]s of every level, from [`Inner::prefetch_buckets`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BucketHints([BucketHint; MAX_LEVELS as usize]);

impl BucketHints {
    /// Level `level`'s hint.
    #[inline]
    pub fn level(&self, level: u32) -> BucketHint {
        self.0.get(level as usize).copied().unwrap_or_default()
    }
}

/// Words of the DRAM copy of one entry's filter block (64 lanes of 32 bits).
const FILTER_WORDS: usize = 32;

/// At most one entry's records, on the stack (migrations run beside the writers; heap
/// allocations per migration showed in their profiles).
pub(super) type RecList = smallvec::SmallVec<[Rec; ENTRY_RECORDS]>;

/// Slots of [`Inner::dedup`]'s table: a power of two, at least twice [`ENTRY_RECORDS`].
const DEDUP_TABLE: usize = 2 * ENTRY_RECORDS;

/// Where key word `key` starts probing [`Inner::dedup`]'s table. Records of one entry share
/// their hash's low bits (the level index), so the slot comes from a multiplicative mix's top
/// bits.
#[inline]
fn dedup_slot(key: u64) -> usize {
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - DEDUP_TABLE.trailing_zeros())) as usize
}

impl Inner {
    /// Offset of PMem level `level`'s directory, if it exists.
    #[inline]
    pub(super) fn level_dir(&self, level: u32) -> Option<u64> {
        let d = self.dirs[level as usize].load(Ordering::Acquire);
        (d != 0).then_some(d)
    }

    /// Creates level `level`'s directory if it does not exist yet (zeros: every entry empty).
    fn ensure_level(&self, level: u32) -> Result<u64> {
        if let Some(d) = self.level_dir(level) {
            return Ok(d);
        }
        let _g = self.level_create.lock();
        if let Some(d) = self.level_dir(level) {
            return Ok(d);
        }
        let dir = self
            .space
            .alloc(&self.region, self.geo.level_bytes(level), 4096)?;
        if level < self.prealloc_levels {
            self.preallocate_buckets(level, dir)?;
        }
        let word = (header::LEVELS + 8 * level as usize) as u64;
        self.region.atomic_u64(word)?.store(dir, Ordering::Release);
        self.region.persist(word, 8)?;
        self.dirs[level as usize].store(dir, Ordering::Release);
        self.counters.levels_created.incr();
        Ok(dir)
    }

    /// Hands out every bucket of the new directory at `dir` (not yet published) from one
    /// area and records the offsets in its entries, durable before the header points at the
    /// directory: a crash before that leaves both unreachable (space past the published
    /// allocations is handed out again after a restart).
    fn preallocate_buckets(&self, level: u32, dir: u64) -> Result<()> {
        let entries = self.geo.level_entries(level);
        let per_entry = FANOUT as u64 * BUCKET_BYTES;
        let area = self.space.alloc(&self.region, entries * per_entry, 4096)?;
        let mut offsets = [0u8; 8 * FANOUT];
        for i in 0..entries {
            for (b, word) in offsets.chunks_exact_mut(8).enumerate() {
                let bucket = area + i * per_entry + b as u64 * BUCKET_BYTES;
                word.copy_from_slice(&bucket.to_le_bytes());
            }
            self.region.write(dir + i * ENTRY_BYTES + 16, &offsets)?;
        }
        self.region
            .persist(dir, self.geo.level_bytes(level) as usize)?;
        self.counters.buckets.add(entries * FANOUT as u64);
        Ok(())
    }

    /// The key's hash from a key word (variable layout: the word is the hash).
    #[inline]
    pub(super) fn hash_of(&self, key_word: u64) -> u64 {
        match self.geo.layout {
            PlushLayout::Fixed8 => self.geo.hash_fixed(key_word),
            PlushLayout::Variable => key_word,
        }
    }

    #[inline]
    fn level_index(&self, level: u32, hash: u64) -> u64 {
        hash & (self.geo.level_entries(level) - 1)
    }

    /// Line `line` of the filter block of entry `idx` at `level`, as eight words of two lanes
    /// each (DRAM copy for the first levels, else one 64-byte read of the entry's block).
    pub(super) fn filter_line(
        &self,
        level: u32,
        idx: u64,
        entry: u64,
        line: usize,
    ) -> Result<[u64; 8]> {
        if self.dram_filters.get(level as usize).is_some() {
            return self
                .dram_filter_line(level, idx, line)
                .ok_or_else(|| Error::corrupt(self.path.as_deref(), "filter out of range"));
        }
        let line = self
            .region
            .read_words(entry + ENTRY_FILTER + 64 * line as u64)?;
        self.counters.media_reads.incr();
        Ok(line)
    }

    /// Level, index and offset of the entry `hash` maps to on each existing level, top down.
    fn entries_of(&self, hash: u64) -> impl Iterator<Item = (u32, u64, u64)> + '_ {
        (0..self.geo.max_levels).map_while(move |level| {
            let idx = self.level_index(level, hash);
            Some((level, idx, self.level_dir(level)? + idx * ENTRY_BYTES))
        })
    }

    /// Starts loading what a lookup of `hash` will read on every existing level — each
    /// entry's size word and the filter line of the hash — so that the cache misses of the
    /// levels overlap instead of following one another.
    pub(super) fn prefetch_levels(&self, hash: u64) {
        let (line, _) = filter::line_and_bits(hash);
        for (level, idx, entry) in self.entries_of(hash) {
            // The size word and the bucket pointers (three lines): a hit's pointer is then no
            // miss of its own.
            self.region.prefetch(entry, 16 + 8 * FANOUT);
            match self.dram_filters.get(level as usize) {
                Some(f) => {
                    if let Some(w) = f.get(idx as usize * FILTER_WORDS + 8 * line) {
                        crate::device::cpu::prefetch(std::ptr::from_ref(w));
                    }
                }
                None => self
                    .region
                    .prefetch(entry + ENTRY_FILTER + 64 * line as u64, 64),
            }
        }
    }

    /// Line `line` of the DRAM copy of entry `idx`'s filter block at `level`; `None` if the
    /// level's filters are not kept in DRAM (or `idx` is out of range).
    fn dram_filter_line(&self, level: u32, idx: u64, line: usize) -> Option<[u64; 8]> {
        let f = self.dram_filters.get(level as usize)?;
        let words: &[_; 8] = f
            .get(idx as usize * FILTER_WORDS + 8 * line..)?
            .first_chunk()?;
        let mut out = [0u64; 8];
        for (out, w) in out.iter_mut().zip(words) {
            *out = w.load(Ordering::Acquire);
        }
        Some(out)
    }

    /// Starts loading the buckets a lookup of hash `hash` will read on the levels whose filters
    /// are in DRAM: the ones its filter line lets through. Called once the lines
    /// [`Self::prefetch_levels`] asked for have had time to arrive, before the DRAM level is
    /// searched, so that the buckets' misses overlap that search and one another instead of
    /// each following its level's filter check. Returns, per level, the size word the choice
    /// was made at and the buckets chosen, so that [`Self::level_candidates`] does not work
    /// them out again while that word stands. Only a hint: a concurrent migration may move
    /// the records, and the search reads and validates everything again.
    pub(super) fn prefetch_buckets(&self, hash: u64) -> BucketHints {
        let mut hints = BucketHints::default();
        let (line, bits) = filter::line_and_bits(hash);
        for (level, idx, entry) in self.entries_of(hash) {
            let Ok(word) = self.region.atomic_u64(entry) else {
                break;
            };
            // Acquire: the filter line below is read after the word, as the search reads it.
            let w = word.load(Ordering::Acquire);
            let (size, _) = split_size_epoch(w);
            let buckets = (size as usize).min(ENTRY_RECORDS).div_ceil(SLOTS);
            if buckets == 0 {
                continue;
            }
            // Levels whose filters are on the medium are left alone: reading their filter
            // line here would be a media read of its own (and counted as one).
            let Some(lanes) = self.dram_filter_line(level, idx, line) else {
                break;
            };
            let maybe = filter::candidate_mask(&lanes, bits, buckets);
            hints.0[level as usize] = BucketHint { word: w, maybe };
            for b in filter::buckets_of(maybe) {
                if let Ok(bucket) = self.bucket_ptr(entry, b)
                    && bucket != 0
                {
                    self.region.prefetch(bucket, BUCKET_BYTES as usize);
                }
            }
        }
        hints
    }

    /// The whole filter block of entry `idx` at `level`.
    fn filter_block(&self, level: u32, idx: u64, entry: u64) -> Result<[u32; filter::LANES]> {
        let mut block = [0u32; filter::LANES];
        for line in 0..4 {
            for (k, w) in self
                .filter_line(level, idx, entry, line)?
                .into_iter()
                .enumerate()
            {
                block[16 * line + 2 * k] = w as u32;
                block[16 * line + 2 * k + 1] = (w >> 32) as u32;
            }
        }
        Ok(block)
    }

    fn bucket_ptr(&self, entry: u64, b: usize) -> Result<u64> {
        Ok(self
            .region
            .atomic_u64(entry + 16 + 8 * b as u64)?
            .load(Ordering::Acquire))
    }

    /// Value words of the records whose key word is `key` at `level`, newest first, from a
    /// consistent view of the entry; `None` if the level does not exist. `hint`: the buckets
    /// [`Self::prefetch_buckets`] chose, used while the entry's size word is the one they were
    /// chosen at (size words never repeat, and a migration changes the word before a filter
    /// loses bits, so the filter still lets through at least those buckets).
    pub(super) fn level_candidates(
        &self,
        level: u32,
        key: u64,
        hash: u64,
        hint: BucketHint,
        out: &mut Candidates,
    ) -> Result<Option<()>> {
        let Some(dir) = self.level_dir(level) else {
            return Ok(None);
        };
        let idx = self.level_index(level, hash);
        let entry = dir + idx * ENTRY_BYTES;
        let word = self.region.atomic_u64(entry)?;
        let (line, bits) = filter::line_and_bits(hash);
        let mut round = 0;
        loop {
            out.clear();
            let w = word.load(Ordering::Acquire);
            self.counters.media_reads.incr();
            let (size, _) = split_size_epoch(w);
            let size = (size as usize).min(ENTRY_RECORDS);
            if size > 0 {
                self.counters.filter_probes.incr();
                let maybe = if w == hint.word {
                    hint.maybe
                } else {
                    let lanes = self.filter_line(level, idx, entry, line)?;
                    filter::candidate_mask(&lanes, bits, size.div_ceil(SLOTS))
                };
                for b in filter::buckets_of(maybe) {
                    let bucket = self.bucket_ptr(entry, b)?;
                    if bucket == 0 {
                        break; // a concurrent clear and refill: validation below retries
                    }
                    // Keys and values at once: a hit's value word is then no second miss.
                    self.region.prefetch(bucket, BUCKET_BYTES as usize);
                    let keys: [u64; SLOTS] = self.region.read_words(bucket)?;
                    self.counters.media_reads.incr();
                    let filled = (size - b * SLOTS).min(SLOTS);
                    let mut hits = match_16(&keys, key) & ((1u32 << filled) - 1) as u16;
                    if hits == 0 {
                        self.counters.filter_false_positives.incr();
                        continue;
                    }
                    while hits != 0 {
                        let s = 15 - hits.leading_zeros() as u64;
                        hits &= !(1 << s);
                        let v = self
                            .region
                            .atomic_u64(bucket + 128 + 8 * s)?
                            .load(Ordering::Acquire);
                        out.push(v);
                    }
                }
            }
            if word.load(Ordering::Acquire) == w {
                return Ok(Some(()));
            }
            crate::sync::backoff(&mut round);
        }
    }

    /// Every record of entry `idx` at `level`, oldest first (the caller holds the subtree
    /// lock, so nothing changes it), and its epoch.
    pub(super) fn entry_records(&self, level: u32, idx: u64) -> Result<(RecList, u32)> {
        let dir = self
            .level_dir(level)
            .ok_or_else(|| Error::corrupt(self.path.as_deref(), "level vanished"))?;
        let entry = dir + idx * ENTRY_BYTES;
        let (size, epoch) =
            split_size_epoch(self.region.atomic_u64(entry)?.load(Ordering::Acquire));
        let size = size as usize;
        if size > ENTRY_RECORDS {
            return Err(Error::corrupt(
                self.path.as_deref(),
                format!(
                    "level {level} entry {idx} claims {size} records (at most {ENTRY_RECORDS})"
                ),
            ));
        }
        let mut recs = RecList::new();
        for b in 0..size.div_ceil(SLOTS) {
            let bucket = self.bucket_ptr(entry, b)?;
            if bucket == 0 || !bucket.is_multiple_of(BUCKET_BYTES) {
                return Err(Error::corrupt(
                    self.path.as_deref(),
                    format!("level {level} entry {idx} bucket {b} has offset {bucket}"),
                ));
            }
            let words: [u64; 2 * SLOTS] = {
                let mut raw = [0u8; 256];
                self.region.read(bucket, &mut raw)?;
                let mut w = [0u64; 2 * SLOTS];
                for (i, x) in w.iter_mut().enumerate() {
                    *x = u64::from_le_bytes(raw[8 * i..8 * i + 8].try_into().expect("8"));
                }
                w
            };
            self.counters.media_reads.incr();
            let filled = (size - b * SLOTS).min(SLOTS);
            for s in 0..filled {
                let key = words[s];
                recs.push(Rec {
                    key,
                    value: words[SLOTS + s],
                    hash: self.hash_of(key),
                });
            }
        }
        Ok((recs, epoch))
    }

    /// Newest-wins de-duplication of `recs` (oldest first): keeps each key's newest record —
    /// a deletion too, which still has to cancel older records further down — and drops
    /// records whose payload was collected (a newer copy exists). Survivors stay oldest first.
    pub(super) fn dedup(&self, recs: &[Rec]) -> Result<RecList> {
        // Newest first, each kept record's position goes into a small open-addressing table
        // keyed by its key word, so a record meets only the kept records of its own key word:
        // linear work on the stack. (Sorting (key word, position) pairs instead took 46 % of
        // a migration's instructions under callgrind, docs/BENCHMARKS.md Figure 30.)
        if recs.len() > ENTRY_RECORDS {
            // Callers pass one entry's records (or a DRAM half's); the table needs free slots.
            return Err(Error::corrupt(
                self.path.as_deref(),
                format!(
                    "{} records in one migration (at most {ENTRY_RECORDS})",
                    recs.len()
                ),
            ));
        }
        let mut table = [u16::MAX; DEDUP_TABLE];
        let mut keep: smallvec::SmallVec<[bool; ENTRY_RECORDS]> =
            smallvec::smallvec![false; recs.len()];
        for (i, r) in recs.iter().enumerate().rev() {
            if self.geo.layout == PlushLayout::Variable
                && let Some(p) = &self.payload
                && !p.is_current(r.value)
            {
                self.counters.dangling_dropped.incr();
                continue;
            }
            // A newer record of the same key kept already? (The very same record twice — a
            // migration a crash cut short copies records it does not clear — is dropped but
            // not dead: the kept copy points at the same payload.)
            let mut at = dedup_slot(r.key);
            let mut newer = None;
            while table[at] != u16::MAX {
                let j = usize::from(table[at]);
                if recs[j].key == r.key && self.same_key(&recs[j], r)? {
                    newer = Some(recs[j]);
                    break;
                }
                at = (at + 1) & (DEDUP_TABLE - 1);
            }
            match newer {
                Some(n) => {
                    self.counters.duplicates_dropped.incr();
                    if let Some(p) = &self.payload
                        && n.value != r.value
                    {
                        p.mark_dead(&self.region, r.value);
                    }
                }
                None => {
                    // `at` is the empty slot the probe ended on (the table is at least twice
                    // the records, so one exists).
                    table[at] = i as u16;
                    keep[i] = true;
                }
            }
        }
        Ok(recs
            .iter()
            .zip(keep)
            .filter_map(|(r, k)| k.then_some(*r))
            .collect())
    }

    /// Whether two records with equal key words hold the same key (variable layout: equal
    /// hashes, compared byte by byte).
    fn same_key(&self, a: &Rec, b: &Rec) -> Result<bool> {
        if a.key != b.key {
            return Ok(false);
        }
        match &self.payload {
            None => Ok(true),
            Some(p) => p.same_key(&self.region, a.value, b.value),
        }
    }

    /// Appends each target's records (oldest first) to entry `idx` of `level`, migrating a
    /// target that would overflow first; all records and filters persist with one fence, then
    /// all sizes (and `epoch`) with a second. `targets` never names an entry twice.
    pub(super) fn append_batch(
        &self,
        level: u32,
        targets: &[(u64, &[Rec])],
        epoch: u32,
    ) -> Result<()> {
        let dir = self.ensure_level(level)?;
        let mut plans: smallvec::SmallVec<[_; FANOUT]> = smallvec::SmallVec::new();
        for &(idx, recs) in targets {
            if recs.is_empty() {
                continue;
            }
            let entry = dir + idx * ENTRY_BYTES;
            let word = self.region.atomic_u64(entry)?;
            let (mut size, _) = split_size_epoch(word.load(Ordering::Acquire));
            if size as usize + recs.len() > ENTRY_RECORDS {
                if level + 1 >= self.geo.max_levels {
                    return Err(Error::StoreFull {
                        used: self.space.used(),
                        capacity: self.region.max_len(),
                        reason: format!(
                            "level {level} entry {idx} is full and the store has no level \
                             beyond it (max_levels {}){}",
                            self.geo.max_levels,
                            if self.geo.partition == super::Partition::Range {
                                "; the store is range-partitioned, so keys sharing their \
                                 first bytes crowd one DRAM entry's levels"
                            } else {
                                ""
                            }
                        ),
                    });
                }
                self.migrate_entry(level, idx)?;
                size = split_size_epoch(word.load(Ordering::Acquire)).0;
            }
            plans.push((idx, entry, size, recs));
        }
        let mut ranges: smallvec::SmallVec<[(u64, usize); 4 * FANOUT]> = smallvec::SmallVec::new();
        for &(idx, entry, size, recs) in &plans {
            let mut filters = if size > 0 {
                self.filter_block(level, idx, entry)?
            } else {
                [0u32; filter::LANES]
            };
            // Bucket by bucket: the new keys of a bucket are one contiguous write, its new
            // values another.
            let mut k = 0;
            while k < recs.len() {
                let slot = size as usize + k;
                let (b, s0) = (slot / SLOTS, slot % SLOTS);
                let n = (SLOTS - s0).min(recs.len() - k);
                let mut bucket = self.bucket_ptr(entry, b)?;
                if bucket == 0 {
                    bucket = self.space.alloc(&self.region, BUCKET_BYTES, BUCKET_BYTES)?;
                    let ptr = entry + 16 + 8 * b as u64;
                    self.region
                        .atomic_u64(ptr)?
                        .store(bucket, Ordering::Release);
                    ranges.push((ptr, 8));
                    self.counters.buckets.incr();
                }
                let mut keys = [0u8; 128];
                let mut values = [0u8; 128];
                for (i, r) in recs[k..k + n].iter().enumerate() {
                    keys[8 * i..8 * i + 8].copy_from_slice(&r.key.to_le_bytes());
                    values[8 * i..8 * i + 8].copy_from_slice(&r.value.to_le_bytes());
                    filter::insert(&mut filters, b, r.hash);
                }
                self.region.write(bucket + 8 * s0 as u64, &keys[..8 * n])?;
                self.region
                    .write(bucket + 128 + 8 * s0 as u64, &values[..8 * n])?;
                ranges.push((bucket, BUCKET_BYTES as usize));
                k += n;
            }
            let mut raw = [0u8; 256];
            for (k, lane) in filters.iter().enumerate() {
                raw[4 * k..4 * k + 4].copy_from_slice(&lane.to_le_bytes());
            }
            self.region.write(entry + ENTRY_FILTER, &raw)?;
            ranges.push((entry + ENTRY_FILTER, 256));
            if let Some(df) = self.dram_filters.get(level as usize) {
                let base = idx as usize * FILTER_WORDS;
                for k in 0..FILTER_WORDS {
                    let w = u64::from(filters[2 * k]) | (u64::from(filters[2 * k + 1]) << 32);
                    df[base + k].store(w, Ordering::Release);
                }
            }
        }
        // Records, bucket offsets and filters first; sizes only once those are durable.
        self.region.persist_all(&ranges)?;
        self.count_media_writes(&ranges);
        let mut words: smallvec::SmallVec<[_; FANOUT]> = smallvec::SmallVec::new();
        for &(_, entry, size, recs) in &plans {
            let new_size = size + recs.len() as u32;
            self.region
                .atomic_u64(entry)?
                .store(size_epoch(new_size, epoch), Ordering::Release);
            words.push((entry, 8));
            self.counters.migrated_records.add(recs.len() as u64);
        }
        self.region.persist_all(&words)?;
        self.count_media_writes(&words);
        Ok(())
    }

    /// Counts the 256-byte media blocks a migration's persisted ranges touch (each range on
    /// its own: ranges of one migration are not adjacent).
    fn count_media_writes(&self, ranges: &[(u64, usize)]) {
        let blocks: u64 = ranges
            .iter()
            .map(|&(off, len)| (off + len as u64 - 1) / BUCKET_BYTES - off / BUCKET_BYTES + 1)
            .sum();
        self.counters
            .migration_media_bytes
            .add(blocks * BUCKET_BYTES);
    }

    /// Migrates entry `idx` of `level` into its 16 children on `level + 1`, then empties it.
    /// The caller holds the subtree lock of the DRAM entry above it.
    pub(super) fn migrate_entry(&self, level: u32, idx: u64) -> Result<()> {
        let (recs, epoch) = self.entry_records(level, idx)?;
        if recs.is_empty() {
            return Ok(());
        }
        let survivors = self.dedup(&recs)?;
        // Grouped by child entry, oldest first within each: a counting sort by child digit,
        // on the stack. The children are this entry's: `idx` plus the next hash digit (a
        // damaged record's hash cannot send it outside the locked subtree).
        let bits = self.geo.level_bits(level);
        let digits: smallvec::SmallVec<[u8; ENTRY_RECORDS]> = survivors
            .iter()
            .map(|r| ((self.level_index(level + 1, r.hash) >> bits) as usize % FANOUT) as u8)
            .collect();
        let mut starts = [0usize; FANOUT + 1];
        for &d in &digits {
            starts[usize::from(d) + 1] += 1;
        }
        for t in 0..FANOUT {
            starts[t + 1] += starts[t];
        }
        let mut next = starts;
        let mut grouped: RecList = smallvec::smallvec![Rec::default(); survivors.len()];
        for (r, &d) in survivors.iter().zip(&digits) {
            grouped[next[usize::from(d)]] = *r;
            next[usize::from(d)] += 1;
        }
        let groups: smallvec::SmallVec<[(u64, &[Rec]); FANOUT]> = (0..FANOUT)
            .filter(|&t| starts[t + 1] > starts[t])
            .map(|t| {
                (
                    idx | ((t as u64) << bits),
                    &grouped[starts[t]..starts[t + 1]],
                )
            })
            .collect();
        self.append_batch(level + 1, &groups, epoch)?;
        // Only now empty the source: until here its records live on two levels, which is
        // harmless (the copies shadow each other; the next migration merges them).
        let entry = self
            .level_dir(level)
            .ok_or_else(|| Error::corrupt(self.path.as_deref(), "level vanished"))?
            + idx * ENTRY_BYTES;
        self.region
            .atomic_u64(entry)?
            .store(size_epoch(0, epoch), Ordering::Release);
        self.region.persist(entry, 8)?;
        self.count_media_writes(&[(entry, 8)]);
        self.counters.migrations.incr();
        Ok(())
    }

    /// Migrates a frozen DRAM half of entry `entry` into PMem level 0 (the caller holds the
    /// entry's subtree lock), stamps the entry with the half's epoch and empties the half.
    pub(super) fn migrate_half(&self, entry: usize, half: usize) -> Result<()> {
        let h = &self.dram.entries[entry].halves[half];
        let epoch = h.epoch.load(Ordering::Acquire);
        let recs: RecList = self
            .dram
            .records(entry, half)
            .into_iter()
            .map(|(key, value)| Rec {
                key,
                value,
                hash: self.hash_of(key),
            })
            .collect();
        let survivors = self.dedup(&recs)?;
        self.append_batch(0, &[(entry as u64, &survivors)], epoch)?;
        // A level-0 entry's epoch was set even if nothing survived (all duplicates): write it.
        let dir = self.ensure_level(0)?;
        let l0 = dir + entry as u64 * ENTRY_BYTES;
        let word = self.region.atomic_u64(l0)?;
        let (size, old) = split_size_epoch(word.load(Ordering::Acquire));
        if old != epoch {
            word.store(size_epoch(size, epoch), Ordering::Release);
            self.region.persist(l0, 8)?;
        }
        self.dram.entries[entry]
            .stamp
            .store(epoch, Ordering::Release);
        self.dram.clear(entry, half);
        self.counters.half_migrations.incr();
        Ok(())
    }
}
