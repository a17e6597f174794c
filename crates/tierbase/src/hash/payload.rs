//! Payload logs (variable layout): key and value bytes out of place, WiscKey-style; buckets
//! and the recovery log hold a 64-bit key hash and a locator (chunk, chunk epoch, offset).
//! Migrations never copy payloads.
//!
//! Owns: payload chunks (allocation, the current chunk of each payload log, sealing), entry
//! encoding, validated reads (a reader checks the chunk's epoch after reading, so a chunk
//! collected under it is noticed), dead-byte accounting, and garbage collection: the live
//! entries of a victim chunk (those some key's newest record points to) are copied to a spare
//! chunk and re-inserted under their DRAM entry's lock; then the victim's epoch is raised,
//! which makes every locator into it dangling at once, and it becomes the spare. Must not
//! touch: the levels or logs except through the store's insert path.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

use super::Inner;
use super::layout::{
    Locator, MAX_PAYLOAD_VALUE, PAYLOAD_CHUNK_HEADER, PAYLOAD_DEAD, payload_chunk,
    payload_entry_bytes, payload_header, split_payload_header,
};
use crate::device::{Counter, PmemRegion};
use crate::error::{Error, Result};

/// Second header word of a payload entry: this magic in the low half, a CRC32C of the chunk
/// epoch, the first header word and the bytes in the high half (so the collector can find
/// entries in a chunk whose writes a crash cut short).
const ENTRY_MAGIC: u32 = 0x5950_4c54; // "TLPY"
/// Bytes of a payload entry's two header words.
const HEADER: u64 = 16;
/// How much of an entry a lookup prefetches before its header says the entry's length.
const SPECULATIVE_ENTRY_BYTES: usize = 256;

/// One payload chunk (DRAM bookkeeping). A line of its own: writers appending to different
/// chunks (one per thread) would otherwise share lines through `pending`.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct PChunk {
    /// Offset in the region (0 = not allocated).
    pub off: AtomicU64,
    /// Taken by an allocation (set before `off`, so two allocations never pick one id).
    pub claimed: AtomicBool,
    /// Current epoch.
    pub epoch: AtomicU64,
    /// Holds entries (else free).
    pub in_use: AtomicBool,
    /// The current chunk of some payload log (appends may still land in it).
    pub current: AtomicBool,
    /// The last close recorded where its entries end (its resume word): every entry in it
    /// was persisted, so one that fails its check was damaged on media, not cut short by a
    /// crash.
    pub closed_cleanly: AtomicBool,
    /// An entry here was found damaged (by recovery, `verify` or a read): user reads check
    /// every entry they read here, so that damage is reported instead of served, and the
    /// collector leaves the chunk alone.
    pub suspect: AtomicBool,
    /// Bytes of entries known to be superseded.
    pub dead: AtomicU64,
    /// Appends that wrote an entry here but have not indexed it yet.
    pub pending: AtomicU32,
    /// When it was started (payload bytes written so far): the oldest sealed chunk is
    /// checked first for dead entries.
    pub started_at: AtomicU64,
    /// Payload bytes written when its live bytes were last estimated (0: never).
    pub estimated_at: AtomicU64,
    /// Bytes after its last entry, known once it is sealed or estimated: a chunk a crash
    /// left partly filled is sealed on open, and only a collection gets that space back.
    pub unused: AtomicU64,
}

impl PChunk {
    /// Bytes a collection would get back, as far as known.
    pub fn reclaimable(&self) -> u64 {
        self.dead.load(Ordering::Relaxed) + self.unused.load(Ordering::Relaxed)
    }
}

/// A payload log: its current chunk and the next free byte in it. Every append writes both,
/// so each log has its lines to itself (128 bytes: the CPU also fetches a line's neighbour).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct PayloadLog {
    pub current: RwLock<Option<u32>>,
    pub pos: AtomicU64,
}

#[derive(Debug, Default)]
struct Pool {
    free: Vec<u32>,
    /// Chunks holding a collection's copies, with room after them: (chunk, next free byte).
    partial: Vec<(u32, u64)>,
    spare: Option<u32>,
}

/// The payload logs of a store.
#[derive(Debug)]
pub(super) struct Payload {
    pub chunk_bytes: u64,
    pub chunks: Vec<PChunk>,
    pub logs: Vec<PayloadLog>,
    pool: Mutex<Pool>,
    /// Held exclusively by a collection (one at a time); shared by readers that must not see
    /// a locator dangle while they walk (ordered scans): no chunk is retired meanwhile.
    gc: RwLock<()>,
    /// Chunks a payload log may allocate before it collects instead.
    soft_limit: u32,
    /// Bytes of entries not known to be dead (written, less what migrations and collections
    /// found superseded): chunks are checked for dead entries only when the payload holds
    /// clearly more than this — an insert-only load never pays for the check.
    live: LiveBytes,
    /// Whether `live` is known. An open does not know which entries are dead and counts
    /// everything as live, which would keep the estimator from ever looking: until each
    /// sealed chunk has been estimated once, the estimator looks regardless (one chunk a
    /// rotation), and then `live` is set from what it found.
    live_known: AtomicBool,
    /// Payload bytes written after which the next `modify` looks for a chunk to collect
    /// ([`Inner::payload_relief`]): once per chunk's worth, not on every call.
    relief_due: AtomicU64,
}

/// What a payload log short of room should collect, if anything ([`Payload::collection_due`]).
enum Due {
    /// A sealed chunk at least half dead is known: collect the one with the most dead bytes.
    Collect,
    /// Estimate this sealed chunk's live bytes, and collect it if at least half is dead.
    Estimate(u32),
}

/// [`Payload::live`]: bytes added and bytes found dead in per-thread counter shards (every
/// append adds, so one shared word would move between the writers' cores on each), plus a base
/// that an open sets.
#[derive(Debug, Default)]
struct LiveBytes {
    added: Counter,
    dead: Counter,
    base: std::sync::atomic::AtomicI64,
}

impl LiveBytes {
    fn get(&self) -> u64 {
        let net = self.added.get() as i64 - self.dead.get() as i64;
        (self.base.load(Ordering::Acquire) + net).max(0) as u64
    }

    fn set(&self, bytes: u64) {
        let net = self.added.get() as i64 - self.dead.get() as i64;
        self.base.store(bytes as i64 - net, Ordering::Release);
    }
}

/// An entry written but not indexed yet: keeps the collector off its chunk.
#[derive(Debug)]
pub(super) struct Pending<'a>(&'a AtomicU32);

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A payload entry as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub tombstone: bool,
}

fn entry_crc(epoch: u64, w0: u64, key: &[u8], value: &[u8]) -> u32 {
    use crate::device::cpu::crc32c_append as append;
    append(append(entry_crc_head(epoch, w0), key), value)
}

/// [`entry_crc`] of an entry whose key and value lie one after the other in `key_value`
/// (an append assembles them so): two checksum calls instead of four.
fn entry_crc_joined(epoch: u64, w0: u64, key_value: &[u8]) -> u32 {
    crate::device::cpu::crc32c_append(entry_crc_head(epoch, w0), key_value)
}

/// The checksum of an entry's epoch and header word (its dead bit excluded), the part of
/// [`entry_crc`] before the key.
#[inline]
fn entry_crc_head(epoch: u64, w0: u64) -> u32 {
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&epoch.to_le_bytes());
    head[8..].copy_from_slice(&(w0 & !PAYLOAD_DEAD).to_le_bytes());
    crate::device::cpu::crc32c_append(0, &head)
}

/// Entries up to this many bytes are assembled on the stack (larger ones in a `Vec`).
const STACK_ENTRY: usize = 512;

impl Payload {
    pub fn new(logs: u32, chunks: u32, chunk_bytes: u64) -> Self {
        Payload {
            chunk_bytes,
            chunks: (0..chunks).map(|_| PChunk::default()).collect(),
            logs: (0..logs).map(|_| PayloadLog::default()).collect(),
            pool: Mutex::new(Pool::default()),
            gc: RwLock::new(()),
            soft_limit: chunks.saturating_sub(logs + 1).max(logs + 1),
            live: LiveBytes::default(),
            live_known: AtomicBool::new(true),
            relief_due: AtomicU64::new(0),
        }
    }

    /// Largest key + value one entry can hold.
    pub fn max_entry(&self) -> u64 {
        (self.chunk_bytes - PAYLOAD_CHUNK_HEADER - HEADER).min(MAX_PAYLOAD_VALUE as u64)
    }

    /// Refuses an entry of `key_len + value_len` bytes over [`Payload::max_entry`]: a key
    /// longer than an entry is too large itself; else the value is, named
    /// by its own length and the most this key leaves room for.
    pub fn check_entry(&self, key_len: usize, value_len: usize) -> Result<()> {
        let max = self.max_entry() as usize;
        if key_len > max {
            return Err(Error::KeyTooLarge { len: key_len, max });
        }
        if key_len + value_len > max {
            return Err(Error::ValueTooLarge {
                len: value_len,
                max: max.saturating_sub(key_len),
            });
        }
        Ok(())
    }

    /// Whether the locator `word` points into its chunk's current epoch.
    #[inline]
    pub fn is_current(&self, word: u64) -> bool {
        let l = Locator::decode(word);
        self.chunks
            .get(l.chunk as usize)
            .is_some_and(|c| l.current(c.epoch.load(Ordering::Acquire)))
    }

    /// Keeps collections from retiring chunks while the guard lives: a locator that reads as
    /// live stays live (a dangling one is then an older version's, or a dead record's).
    pub fn pin(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.gc.read()
    }

    /// Where the entry at `word` is, from its header (its bytes not read yet); `None` if its
    /// chunk was collected (the locator dangles).
    fn locate(&self, region: &PmemRegion, word: u64) -> Result<Option<Located<'_>>> {
        let loc = Locator::decode(word);
        let Some(chunk) = self.chunks.get(loc.chunk as usize) else {
            return Ok(None);
        };
        let epoch = chunk.epoch.load(Ordering::Acquire);
        let off = chunk.off.load(Ordering::Acquire);
        if !loc.current(epoch) || off == 0 || u64::from(loc.offset) + HEADER > self.chunk_bytes {
            return Ok(None);
        }
        let at = off + u64::from(loc.offset);
        // The header's miss and the bytes' misses overlap: most entries of small records end
        // within a few lines of their header.
        region.prefetch(at, SPECULATIVE_ENTRY_BYTES);
        let w0 = region.read_u64(at)?;
        let (kl, vl, tombstone) = split_payload_header(w0);
        let valid = (kl + vl) as u64 <= self.max_entry()
            && u64::from(loc.offset) + HEADER + (kl + vl) as u64 <= self.chunk_bytes;
        Ok(Some(Located {
            loc,
            chunk,
            epoch,
            w0,
            bytes: at + HEADER,
            kl: if valid { kl } else { 0 },
            vl: if valid { vl } else { 0 },
            claimed: (kl, vl),
            tombstone,
            valid,
        }))
    }

    /// The entry at `word` as a lookup of `key` needs it: the key compared in place and (if
    /// it is `key`'s, live, and `value` is given) only the value read, into `value`, by one
    /// region read — one copy of the value, none of a different key's, and no allocation when
    /// `value` has room. For a different key `value` keeps the entry's length but nothing
    /// meaningful.
    pub fn read_for(
        &self,
        region: &PmemRegion,
        word: u64,
        key: &[u8],
        value: Option<&mut Vec<u8>>,
        report_damage: bool,
    ) -> Result<Lookup> {
        let Some(e) = self.locate(region, word)? else {
            return Ok(Lookup::Dangling);
        };
        let mut same = false;
        // A user's read of the key's entry checks it (`None`: not computed).
        let mut passes = None;
        if e.kl == key.len() && e.valid {
            // The key compared in place and, if it is `key`'s live value that is wanted, the
            // value copied in the same call. Resized without clearing first: a buffer reused
            // for values of one size is not zeroed before each copy.
            let value = match value {
                Some(value) if !e.tombstone => {
                    value.resize(e.vl, 0);
                    &mut value[..]
                }
                _ => &mut [][..],
            };
            same = region.read_if_key(e.bytes, key, e.kl as u64, value)?;
            // The check of what is returned: a value damaged on media is reported, never
            // served (a user's trial, 2026-12-04: 33 of 80 one-byte flips of a cleanly closed
            // store were served as values never written). A deletion's check covers its
            // header and key; a read that copies no value leaves the check to the paths below.
            if same && report_damage && (value.len() == e.vl || e.tombstone) {
                let w1 = region.read_u64(e.bytes - 8)?;
                passes = Some((w1 >> 32) as u32 == entry_crc(e.epoch, e.w0, key, value));
            }
        }
        // Another key's entry (a 64-bit hash collision) is rare; so is a damaged one, which
        // must not pass for another key's in a user's read: the search would go on to an
        // older version of this key. Entries of a chunk known to hold damage are checked
        // whatever they say.
        if report_damage
            && (passes == Some(false)
                || (passes.is_none() && (!same || e.chunk.suspect.load(Ordering::Relaxed))))
            && !self.is_whole(region, word)?
        {
            // A chunk collected and reused meanwhile is a dangling locator, not damage.
            if e.collected() {
                return Ok(Lookup::Dangling);
            }
            e.chunk.suspect.store(true, Ordering::Relaxed);
            return Err(Error::corrupt(
                None,
                format!(
                    "the payload entry at chunk {} offset {} fails its check (media damage): \
                     the key's newest record cannot be read",
                    e.loc.chunk, e.loc.offset
                ),
            ));
        }
        if !report_damage && !e.valid {
            // Lengths a damaged header claims: passed over as another key's (see
            // `Probe::report_damage`), unless the chunk was collected meanwhile.
            return Ok(if e.collected() {
                Lookup::Dangling
            } else {
                Lookup::Other
            });
        }
        if !e.settle()? {
            return Ok(Lookup::Dangling);
        }
        Ok(match (same, e.tombstone) {
            (false, _) => Lookup::Other,
            (true, tombstone) => Lookup::Key { live: !tombstone },
        })
    }

    /// Appends the key of the entry at `word` to `out` and returns whether the entry is a
    /// deletion; `None` (and `out` unchanged) if its chunk was collected. For walks that choose
    /// by key first: one buffer for every key, no allocation per entry.
    pub fn read_key_into(
        &self,
        region: &PmemRegion,
        word: u64,
        out: &mut Vec<u8>,
    ) -> Result<Option<bool>> {
        let Some(e) = self.locate(region, word)? else {
            return Ok(None);
        };
        let start = out.len();
        out.resize(start + e.kl, 0);
        region.read(e.bytes, &mut out[start..])?;
        if !e.settle()? {
            out.truncate(start);
            return Ok(None);
        }
        Ok(Some(e.tombstone))
    }

    /// The entry at `word`, or `None` if its chunk was collected (the locator dangles).
    pub fn read(&self, region: &PmemRegion, word: u64) -> Result<Option<Entry>> {
        self.read_entry(region, word, false)
    }

    /// [`Payload::read`] of an entry a user's read returns: checked, and damage is an error
    /// (the chunk is marked suspect), never a value.
    pub fn read_checked(&self, region: &PmemRegion, word: u64) -> Result<Option<Entry>> {
        self.read_entry(region, word, true)
    }

    fn read_entry(&self, region: &PmemRegion, word: u64, check: bool) -> Result<Option<Entry>> {
        let Some(e) = self.locate(region, word)? else {
            return Ok(None);
        };
        let mut bytes = vec![0u8; e.kl + e.vl];
        region.read(e.bytes, &mut bytes)?;
        let w1 = if check {
            region.read_u64(e.bytes - 8)?
        } else {
            0
        };
        if !e.settle()? {
            return Ok(None);
        }
        if check && (w1 >> 32) as u32 != entry_crc_joined(e.epoch, e.w0, &bytes) {
            e.chunk.suspect.store(true, Ordering::Relaxed);
            return Err(Error::corrupt(
                None,
                format!(
                    "the payload entry at chunk {} offset {} fails its check (media damage)",
                    e.loc.chunk, e.loc.offset
                ),
            ));
        }
        let value = bytes.split_off(e.kl);
        Ok(Some(Entry {
            key: bytes,
            value,
            tombstone: e.tombstone,
        }))
    }

    /// Whether the entry at `word` is whole: its magic and check match (recovery keeps a log
    /// entry only then, as the two were made durable by one fence).
    pub fn is_whole(&self, region: &PmemRegion, word: u64) -> Result<bool> {
        let l = Locator::decode(word);
        let Some(c) = self.chunks.get(l.chunk as usize) else {
            return Ok(false);
        };
        let epoch = c.epoch.load(Ordering::Acquire);
        let off = c.off.load(Ordering::Acquire);
        if off == 0 || !l.current(epoch) || u64::from(l.offset) + HEADER > self.chunk_bytes {
            return Ok(false);
        }
        let at = off + u64::from(l.offset);
        let w0 = region.read_u64(at)?;
        let w1 = region.read_u64(at + 8)?;
        let (kl, vl, _) = split_payload_header(w0);
        if w1 as u32 != ENTRY_MAGIC
            || u64::from(l.offset) + HEADER + (kl + vl) as u64 > self.chunk_bytes
        {
            return Ok(false);
        }
        let mut bytes = vec![0u8; kl + vl];
        region.read(at + HEADER, &mut bytes)?;
        Ok((w1 >> 32) as u32 == entry_crc_joined(epoch, w0, &bytes))
    }

    /// For an entry that is not [`Payload::is_whole`]: whether it was damaged on media —
    /// its locator names its chunk's current epoch (it is not a stale locator of a collected
    /// chunk), and the last close left that chunk cleanly ([`PChunk::closed_cleanly`]), so no
    /// crash can have cut the entry short.
    pub fn damaged_in_clean_chunk(&self, word: u64) -> bool {
        let l = Locator::decode(word);
        self.chunks.get(l.chunk as usize).is_some_and(|c| {
            c.closed_cleanly.load(Ordering::Acquire) && l.current(c.epoch.load(Ordering::Acquire))
        })
    }

    /// Marks the chunk of the entry at `word` as holding damage (see [`PChunk::suspect`]).
    pub fn mark_suspect(&self, word: u64) {
        if let Some(c) = self.chunks.get(Locator::decode(word).chunk as usize) {
            c.suspect.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the entries at `a` and `b` (records with the same 64-bit key hash) hold the
    /// same key (a dangling one matches nothing). A damaged entry is taken for the same key:
    /// its key cannot be read, and the hash says it is all but surely the same — so that a
    /// newer write of the key supersedes its damaged record instead of failing the migration.
    pub fn same_key(&self, region: &PmemRegion, a: u64, b: u64) -> Result<bool> {
        if a == b {
            return Ok(true);
        }
        match (self.read(region, a), self.read(region, b)) {
            (Ok(Some(x)), Ok(Some(y))) => Ok(x.key == y.key),
            (Ok(None), _) | (_, Ok(None)) => Ok(false),
            (Err(Error::Corrupt { .. }), _) | (_, Err(Error::Corrupt { .. })) => Ok(true),
            (Err(e), _) | (_, Err(e)) => Err(e),
        }
    }

    /// Counts the entry at `word` as superseded (once: its header's dead bit says whether it
    /// was counted — a write that knew what it replaced and a later migration that drops the
    /// same record must not both count it).
    pub fn mark_dead(&self, region: &PmemRegion, word: u64) {
        let l = Locator::decode(word);
        if let Some(c) = self.chunks.get(l.chunk as usize) {
            let off = c.off.load(Ordering::Acquire);
            if off != 0
                && l.current(c.epoch.load(Ordering::Acquire))
                && u64::from(l.offset) + HEADER <= self.chunk_bytes
                && let Ok(w) = region.atomic_u64(off + u64::from(l.offset))
                && w.fetch_or(PAYLOAD_DEAD, Ordering::AcqRel) & PAYLOAD_DEAD == 0
            {
                let (kl, vl, _) = split_payload_header(w.load(Ordering::Acquire));
                let bytes = HEADER + payload_entry_bytes(kl, vl) - 8;
                c.dead.fetch_add(bytes, Ordering::Relaxed);
                self.live.dead.add(bytes);
            }
        }
    }

    /// Bytes in use and known dead, over all chunks.
    pub fn usage(&self) -> (u64, u64) {
        let mut used = 0;
        let mut dead = 0;
        for c in &self.chunks {
            if c.in_use.load(Ordering::Acquire) {
                used += self.chunk_bytes;
                dead += c.dead.load(Ordering::Relaxed).min(self.chunk_bytes);
            }
        }
        (used, dead)
    }

    /// Whether `c` holds entries and takes no more (a candidate for collection).
    fn sealed(&self, c: &PChunk) -> bool {
        // Not a chunk known to hold damage: the collector copies only entries that pass
        // their check, so collecting it would leave its damaged record dangling, and a read
        // of the key would go on to an older version instead of reporting the damage.
        c.in_use.load(Ordering::Acquire)
            && !c.current.load(Ordering::Acquire)
            && !c.suspect.load(Ordering::Relaxed)
    }

    /// What to collect before a chunk is allocated (`allocated` chunks are, `written` payload
    /// bytes were written so far): a sealed chunk known to be at least half dead, else one
    /// whose live bytes are worth estimating; `None` if allocating is the way.
    fn collection_due(&self, allocated: u32, written: u64) -> Option<Due> {
        if self
            .chunks
            .iter()
            .any(|c| self.sealed(c) && c.reclaimable() >= self.chunk_bytes / 2)
        {
            return Some(Due::Collect);
        }
        self.estimate_candidate(allocated, written)
            .map(Due::Estimate)
    }

    /// The oldest sealed chunk whose live bytes were not estimated since each payload log wrote
    /// another chunk's worth — once the payload has more than a few chunks per log.
    fn estimate_candidate(&self, allocated: u32, written: u64) -> Option<u32> {
        if allocated < 2 * self.logs.len() as u32 + 2 {
            return None;
        }
        if !self.live_known.load(Ordering::Acquire) {
            // After an open: every sealed chunk once, oldest first; then what they were found
            // to hold is what is live (the chunks that take entries count as live whole).
            let never = (0..self.chunks.len() as u32)
                .filter(|&c| {
                    let ch = &self.chunks[c as usize];
                    self.sealed(ch) && ch.estimated_at.load(Ordering::Acquire) == 0
                })
                .min_by_key(|&c| self.chunks[c as usize].started_at.load(Ordering::Acquire));
            if never.is_some() {
                return never;
            }
            let reclaimable: u64 = self
                .chunks
                .iter()
                .filter(|c| self.sealed(c))
                .map(|c| c.reclaimable().min(self.chunk_bytes))
                .sum();
            self.live.set(self.usage().0.saturating_sub(reclaimable));
            self.live_known.store(true, Ordering::Release);
        }
        let (used, _) = self.usage();
        let slack = (2 * self.logs.len() as u64 + 2) * self.chunk_bytes;
        let live = self.live.get();
        if used <= 2 * live + slack {
            return None; // not clearly more than twice what is live: nothing to look for
        }
        self.stale_candidate(written)
    }

    /// The oldest sealed chunk whose live bytes were not estimated since each payload log
    /// wrote another chunk's worth.
    fn stale_candidate(&self, written: u64) -> Option<u32> {
        let fresh = self.chunk_bytes * self.logs.len() as u64;
        (0..self.chunks.len() as u32)
            .filter(|&c| {
                let ch = &self.chunks[c as usize];
                let at = ch.estimated_at.load(Ordering::Acquire);
                self.sealed(ch) && (at == 0 || written.saturating_sub(at) >= fresh)
            })
            .min_by_key(|&c| self.chunks[c as usize].started_at.load(Ordering::Acquire))
    }

    /// DRAM of the chunk table and the logs' positions (fixed by the configuration).
    pub fn bookkeeping_bytes(&self) -> u64 {
        (self.chunks.len() * std::mem::size_of::<PChunk>()
            + self.logs.len() * std::mem::size_of::<PayloadLog>()) as u64
    }

    /// Bytes not known to be superseded.
    pub fn live_bytes(&self) -> u64 {
        self.live.get()
    }

    /// Restores the pool after an open: `free` chunks are allocated and hold nothing;
    /// `resumed` ones (chunk, next free byte) take entries again from there (a clean close
    /// recorded where); what the others hold counts as live until migrations or collections
    /// find otherwise.
    pub fn restore(&self, free: Vec<u32>, resumed: Vec<(u32, u64)>) {
        let mut p = self.pool.lock();
        p.free = free;
        p.spare = p.free.pop();
        p.partial = resumed;
        self.live.set(self.usage().0);
        self.live_known.store(false, Ordering::Release);
    }

    /// For a clean close: where each chunk that takes more entries — a payload log's current
    /// one, or one with room after a collection's copies — has its next free byte.
    fn resumable(&self) -> Vec<(u32, u64)> {
        let mut out: Vec<(u32, u64)> = self.pool.lock().partial.clone();
        for log in &self.logs {
            let st = log.current.read();
            if let Some(c) = *st {
                out.push((c, log.pos.load(Ordering::Acquire)));
            }
        }
        out.retain(|&(_, pos)| (PAYLOAD_CHUNK_HEADER..self.chunk_bytes).contains(&pos));
        out
    }
}

impl Inner {
    /// A clean close (no writer left): records in each chunk that takes more entries where
    /// the next one goes, so that the next open appends there instead of starting new chunks
    /// (each open of a small store took a 4 MiB chunk per log it wrote to).
    pub(super) fn record_payload_resume(&self) -> Result<()> {
        let Some(p) = &self.payload else {
            return Ok(());
        };
        for (c, pos) in p.resumable() {
            let off = p.chunks[c as usize].off.load(Ordering::Acquire);
            super::record_resume(&self.region, off + payload_chunk::RESUME, pos)?;
        }
        Ok(())
    }

    fn payload(&self) -> Result<&Payload> {
        self.payload
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("a fixed-layout store has no payload".into()))
    }

    /// Writes a payload entry to the calling thread's payload log and, if `persist`, makes it
    /// durable; else returns its range for the caller to persist with its log entry. The
    /// returned guard keeps the collector away until the caller has indexed the locator.
    /// `may_collect`: whether this call may run a collection (not while holding a DRAM entry's
    /// lock).
    pub(super) fn payload_append(
        &self,
        key: &[u8],
        value: &[u8],
        tombstone: bool,
        may_collect: bool,
        persist: bool,
    ) -> Result<Appended<'_>> {
        let p = self.payload()?;
        let bytes = HEADER - 8 + payload_entry_bytes(key.len(), value.len());
        p.check_entry(key.len(), value.len())?;
        // By thread, not by key: concurrent writers then append to different logs and share
        // none of a log's lines (its lock word, position and current chunk's pending count,
        // which every append writes). A key's versions may lie in different logs: the index
        // orders them, not the logs (docs/BENCHMARKS.md, Figure 32).
        let log = &p.logs[crate::device::thread_slot() % p.logs.len()];
        // Each rotation starts a chunk with room for this entry, which only another writer
        // of the same log can take first: a bound on rotations turns a rotation that cannot
        // make room into an error instead of a loop.
        let mut rotations = 0usize;
        loop {
            let st = log.current.read();
            if let Some(c) = *st {
                let chunk = &p.chunks[c as usize];
                chunk.pending.fetch_add(1, Ordering::AcqRel);
                let guard = Pending(&chunk.pending);
                let start = log.pos.fetch_add(bytes, Ordering::AcqRel);
                if start + bytes <= p.chunk_bytes {
                    let epoch = chunk.epoch.load(Ordering::Acquire);
                    let at = chunk.off.load(Ordering::Acquire) + start;
                    // Small entries are assembled on the stack (no allocation per insert),
                    // key and value first, so that one checksum call covers both.
                    let mut stack = [0u8; STACK_ENTRY];
                    let mut heap = Vec::new();
                    let raw: &mut [u8] = if bytes as usize <= STACK_ENTRY {
                        &mut stack[..bytes as usize]
                    } else {
                        heap.resize(bytes as usize, 0);
                        &mut heap
                    };
                    let body = HEADER as usize;
                    let split = body + key.len();
                    let end = split + value.len();
                    raw[body..split].copy_from_slice(key);
                    raw[split..end].copy_from_slice(value);
                    let w0 = payload_header(key.len(), value.len(), tombstone);
                    let w1 = u64::from(ENTRY_MAGIC)
                        | (u64::from(entry_crc_joined(epoch, w0, &raw[body..end])) << 32);
                    raw[..8].copy_from_slice(&w0.to_le_bytes());
                    raw[8..body].copy_from_slice(&w1.to_le_bytes());
                    let raw = &*raw;
                    // (Non-temporal stores here — no read of the fresh lines, no flush — were
                    // tried: 1.95 -> 1.10 M inserts/s of 16/200 on tmpfs; docs/BENCHMARKS.md.)
                    self.region.write(at, raw)?;
                    let range = (at, raw.len());
                    if persist {
                        self.region.persist(at, raw.len())?;
                    }
                    // The log's next entry most likely has this one's size: load its lines
                    // now, so that its stores find them in cache instead of waiting for them
                    // (as the KV store's writers do for their next slot).
                    let next_end = start + 2 * bytes;
                    if next_end <= p.chunk_bytes {
                        self.region.prefetch(at + bytes, bytes as usize);
                    }
                    self.counters.payload_bytes.add(bytes);
                    p.live.added.add(bytes);
                    let loc = Locator {
                        chunk: c,
                        epoch: epoch as u32,
                        offset: start as u32,
                    };
                    return Ok(Appended {
                        word: loc.encode(),
                        pending: guard,
                        unpersisted: (!persist).then_some(range),
                    });
                }
                drop(guard);
            }
            let seen = *st;
            drop(st);
            rotations += 1;
            if rotations > 64 {
                return Err(Error::StoreFull {
                    used: p.usage().0,
                    capacity: p.chunks.len() as u64 * p.chunk_bytes,
                    reason: format!(
                        "the payload found no room for an entry of {bytes} bytes after \
                         {rotations} chunk rotations"
                    ),
                });
            }
            self.rotate_payload(p, log, seen, may_collect, bytes)?;
        }
    }

    /// Gives `log` a new current chunk with room for an entry of `need` bytes (`seen`: the
    /// current chunk the caller found too full; another writer may have rotated since).
    fn rotate_payload(
        &self,
        p: &Payload,
        log: &PayloadLog,
        seen: Option<u32>,
        may_collect: bool,
        need: u64,
    ) -> Result<()> {
        /// What a rotation does next, decided under the log's and the pool's locks.
        enum Next {
            Start(u32, u64),
            Collect(Due),
            Full,
        }
        // A collection that got nothing back lets this rotation grow into the chunks kept for
        // collection; one that did goes on (another log may have taken what it freed), a
        // bounded number of times.
        let mut fruitless = false;
        let mut collections = 0;
        loop {
            let next = {
                let mut st = log.current.write();
                if *st != seen {
                    return Ok(());
                }
                let mut pool = p.pool.lock();
                let allocated = p
                    .chunks
                    .iter()
                    .filter(|c| c.off.load(Ordering::Acquire) != 0)
                    .count() as u32;
                let collect = may_collect && !fruitless;
                let written = self.counters.payload_bytes.get();
                // A partial chunk (a collection's copies) only if the entry fits in what it
                // has left: taking one that is too small sealed it at once, and its free
                // tail made it the next collection's victim, whose copies made another
                // partial chunk too small — a writer of a large entry looped for good.
                let fitting = pool
                    .partial
                    .iter()
                    .rposition(|&(_, pos)| pos + need <= p.chunk_bytes);
                let next = if let Some(i) = fitting {
                    let (c, pos) = pool.partial.swap_remove(i);
                    Next::Start(c, pos)
                } else if let Some(c) = pool.free.pop() {
                    Next::Start(c, PAYLOAD_CHUNK_HEADER)
                } else if let Some(due) = collect
                    .then(|| p.collection_due(allocated, written))
                    .flatten()
                {
                    // Known to be at least half dead, or worth a look: before growing.
                    Next::Collect(due)
                } else if allocated
                    < if collect {
                        p.soft_limit
                    } else {
                        p.chunks.len() as u32 - 1
                    }
                {
                    // (One chunk always stays for the collector's copies.)
                    Next::Start(self.alloc_payload_chunk(p)?, PAYLOAD_CHUNK_HEADER)
                } else if collect {
                    Next::Collect(Due::Collect)
                } else {
                    Next::Full
                };
                if let Next::Start(c, pos) = next {
                    // Current before the pool lock goes: a collector choosing a victim under
                    // that lock must never see the chunk as sealed.
                    let chunk = &p.chunks[c as usize];
                    chunk.current.store(true, Ordering::Release);
                    drop(pool);
                    self.start_payload_chunk(p, c)?;
                    if let Some(old) = *st {
                        let old = &p.chunks[old as usize];
                        let end = log.pos.load(Ordering::Acquire).min(p.chunk_bytes);
                        old.unused.store(p.chunk_bytes - end, Ordering::Relaxed);
                        old.current.store(false, Ordering::Release);
                    }
                    chunk.started_at.store(written, Ordering::Release);
                    log.pos.store(pos, Ordering::Release);
                    *st = Some(c);
                    return Ok(());
                }
                next
            };
            // Outside the log's lock: the collector takes DRAM entries' locks, and a writer
            // holding one of those may be waiting for this log.
            match next {
                Next::Start(..) => unreachable!("handled above"),
                Next::Collect(due @ Due::Estimate(_)) => {
                    self.collect_due(p, due)?;
                }
                Next::Collect(due) => {
                    let got = self.collect_due(p, due)?;
                    collections += 1;
                    fruitless = got == 0 || collections > p.chunks.len();
                }
                Next::Full => {
                    return Err(Error::StoreFull {
                        used: p.usage().0,
                        capacity: p.chunks.len() as u64 * p.chunk_bytes,
                        reason: "every payload chunk holds live entries".into(),
                    });
                }
            }
        }
    }

    fn alloc_payload_chunk(&self, p: &Payload) -> Result<u32> {
        let c = p
            .chunks
            .iter()
            .position(|c| {
                c.off.load(Ordering::Acquire) == 0
                    && c.claimed
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
            })
            .ok_or_else(|| Error::StoreFull {
                used: p.usage().0,
                capacity: p.chunks.len() as u64 * p.chunk_bytes,
                reason: "every payload chunk is allocated".into(),
            })? as u32;
        let off = match self.space.alloc(&self.region, p.chunk_bytes, 4096) {
            Ok(off) => off,
            Err(e) => {
                // Nothing was written: the slot is free for a later try (a refusal on a full
                // device is retried once space is freed).
                p.chunks[c as usize].claimed.store(false, Ordering::Release);
                return Err(e);
            }
        };
        self.region.write(off, payload_chunk::MAGIC)?;
        self.region.persist(off, 8)?;
        let word = self.geo.payload_table_word(c);
        self.region.atomic_u64(word)?.store(off, Ordering::Release);
        self.region.persist(word, 8)?;
        p.chunks[c as usize].off.store(off, Ordering::Release);
        self.counters.payload_chunks.incr();
        Ok(c)
    }

    /// Makes room in the payload before a write that cannot collect (a `modify`, which
    /// writes its payload under its DRAM entry's lock): when fewer chunks are free than there
    /// are payload logs (each could need one) and the payload has reached its collection
    /// threshold, collects until enough are (the caller holds no lock).
    pub(super) fn payload_relief(&self) -> Result<()> {
        let p = self.payload()?;
        // Looked at once per chunk's worth of payload written (walking the chunk table on
        // every call would cost a modify more than its write), as often as a log rotates.
        let written = self.counters.payload_bytes.get();
        let due = p.relief_due.load(Ordering::Acquire);
        if written < due
            || p.relief_due
                .compare_exchange(
                    due,
                    written + p.chunk_bytes,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_err()
        {
            return Ok(());
        }
        for _ in 0..2 * p.logs.len() + 2 {
            let next = {
                let pool = p.pool.lock();
                let allocated = p
                    .chunks
                    .iter()
                    .filter(|c| c.off.load(Ordering::Acquire) != 0)
                    .count() as u32;
                if pool.free.len() + pool.partial.len() > p.logs.len() {
                    None
                } else if allocated + p.logs.len() as u32 >= p.soft_limit {
                    Some(Due::Collect)
                } else {
                    // What a write's rotation would collect (a modify's cannot).
                    p.collection_due(allocated, written)
                }
            };
            let Some(due) = next else {
                break;
            };
            if self.collect_due(p, due)? == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Does what `due` says; returns the bytes reclaimed.
    fn collect_due(&self, p: &Payload, due: Due) -> Result<u64> {
        match due {
            Due::Collect => self.collect_best(p),
            Due::Estimate(c) => {
                let live = self.estimate_chunk(p, c)?;
                if 2 * live <= p.chunk_bytes - PAYLOAD_CHUNK_HEADER {
                    self.collect_payload(p, Some(c))
                } else {
                    Ok(0)
                }
            }
        }
    }

    /// Collects one chunk now ([`Inner::collect_best`]); returns the bytes reclaimed.
    pub(super) fn payload_relief_now(&self) -> Result<u64> {
        let p = self.payload()?;
        self.collect_best(p)
    }

    /// Collects the chunk with the most dead bytes, after estimating the live bytes of the
    /// oldest sealed chunks not estimated lately (a few per call): dead bytes known only from
    /// migrations miss records superseded long ago, and right after an open nothing is known.
    /// Returns the bytes reclaimed; 0 if no chunk is known to hold anything dead.
    pub(super) fn collect_best(&self, p: &Payload) -> Result<u64> {
        for _ in 0..4 {
            let Some(c) = p.stale_candidate(self.counters.payload_bytes.get()) else {
                break;
            };
            self.estimate_chunk(p, c)?;
        }
        // Chosen under the collector's lock: another collector cannot take it first.
        let _gc = p.gc.write();
        let (spare, partial) = {
            let pool = p.pool.lock();
            (
                pool.spare,
                pool.partial.iter().map(|x| x.0).collect::<Vec<_>>(),
            )
        };
        let best = (0..p.chunks.len() as u32)
            .filter(|&c| {
                p.sealed(&p.chunks[c as usize]) && Some(c) != spare && !partial.contains(&c)
            })
            .max_by_key(|&c| p.chunks[c as usize].reclaimable());
        match best {
            // (Copying a chunk to get back a few bytes is not worth its writes.)
            Some(c) if p.chunks[c as usize].reclaimable() >= p.chunk_bytes / 16 => {
                self.collect_locked(p, Some(c))
            }
            _ => Ok(0),
        }
    }

    /// Estimates the live bytes of sealed chunk `c` and records what it would give back;
    /// returns the live bytes.
    fn estimate_chunk(&self, p: &Payload, c: u32) -> Result<u64> {
        let written = self.counters.payload_bytes.get();
        let (total, live) = self.estimate_live(p, c)?;
        let chunk = &p.chunks[c as usize];
        chunk.estimated_at.store(written.max(1), Ordering::Release);
        chunk
            .dead
            .fetch_max(total.saturating_sub(live), Ordering::Relaxed);
        let usable = p.chunk_bytes - PAYLOAD_CHUNK_HEADER;
        chunk
            .unused
            .store(usable.saturating_sub(total), Ordering::Relaxed);
        Ok(live)
    }

    /// Marks chunk `c` in use (persisted before any entry in it is indexed).
    fn start_payload_chunk(&self, p: &Payload, c: u32) -> Result<()> {
        let chunk = &p.chunks[c as usize];
        if !chunk.in_use.swap(true, Ordering::AcqRel) {
            let off = chunk.off.load(Ordering::Acquire);
            self.set_chunk_state(off, payload_chunk::IN_USE)?;
        }
        Ok(())
    }

    /// Points each key whose newest record is still the old entry at its copy (under the
    /// key's DRAM entry lock): `moves` are (hash, key, old locator, new locator).
    fn repoint(&self, moves: &[(u64, Vec<u8>, u64, u64)]) -> Result<()> {
        for (hash, key, old, new) in moves {
            let entry = (hash & (self.geo.dram_entries() as u64 - 1)) as usize;
            let _g = self.dram.entries[entry].insert.lock();
            if self.newest_word(*hash, key)? == Some(*old) {
                self.append_locked(entry, *hash, *new, true, None)?;
                self.counters.payload_moved.incr();
            }
        }
        Ok(())
    }

    /// Every live entry of `victim` has a newer copy in `spare`: raise the victim's epoch (its
    /// locators dangle from now on), mark it free, and clear the spare's collection mark.
    fn retire_victim(&self, p: &Payload, victim: u32, spare: u32) -> Result<()> {
        let v = &p.chunks[victim as usize];
        let v_off = v.off.load(Ordering::Acquire);
        let epoch = v.epoch.load(Ordering::Acquire).wrapping_add(1);
        // The epoch first (its locators dangle from then on, whatever else a crash keeps),
        // then the victim is free, then the spare is an ordinary chunk.
        self.region
            .atomic_u64(v_off + payload_chunk::EPOCH)?
            .store(epoch, Ordering::Release);
        self.region.persist(v_off + payload_chunk::EPOCH, 8)?;
        v.epoch.store(epoch, Ordering::Release);
        self.set_chunk_state(v_off, 0)?;
        v.in_use.store(false, Ordering::Release);
        v.dead.store(0, Ordering::Relaxed);
        v.unused.store(0, Ordering::Relaxed);
        v.estimated_at.store(0, Ordering::Release);
        v.suspect.store(false, Ordering::Relaxed);
        let s_off = p.chunks[spare as usize].off.load(Ordering::Acquire);
        self.set_chunk_state(s_off, payload_chunk::IN_USE)?;
        Ok(())
    }

    /// Stores and persists a chunk's state word.
    fn set_chunk_state(&self, chunk_off: u64, state: u64) -> Result<()> {
        self.region
            .atomic_u64(chunk_off + payload_chunk::STATE)?
            .store(state, Ordering::Release);
        self.region.persist(chunk_off + payload_chunk::STATE, 8)
    }

    /// After an open: finishes a collection a crash cut short once its copies were complete
    /// (points the victim's live keys at the copies, frees the victim), or frees its spare if
    /// they were not (nothing refers to it). Either way a chunk is free again, so collection
    /// has a spare.
    pub(super) fn finish_collections(&self) -> Result<()> {
        let Some(p) = &self.payload else {
            return Ok(());
        };
        for s in 0..p.chunks.len() as u32 {
            let ch = &p.chunks[s as usize];
            let s_off = ch.off.load(Ordering::Acquire);
            if s_off == 0 {
                continue;
            }
            let state = self
                .region
                .atomic_u64(s_off + payload_chunk::STATE)?
                .load(Ordering::Acquire);
            let Some((victim, complete)) = payload_chunk::collection(state) else {
                continue;
            };
            let v_in_use = p
                .chunks
                .get(victim as usize)
                .is_some_and(|v| v.in_use.load(Ordering::Acquire));
            if !v_in_use {
                // Finished before the crash but for the spare's state.
                self.set_chunk_state(s_off, payload_chunk::IN_USE)?;
                continue;
            }
            if complete {
                let (copies, s_epoch) = self.read_sealed(p, s)?;
                let mut by_key = std::collections::HashMap::new();
                for e in entries(&copies, s_epoch) {
                    by_key.insert(e.key.to_vec(), e.locator(s, s_epoch));
                }
                let (image, v_epoch) = self.read_sealed(p, victim)?;
                let mut moves = Vec::new();
                for e in entries(&image, v_epoch) {
                    if let Some(&new) = by_key.get(e.key) {
                        moves.push((
                            self.geo.hash_key(e.key),
                            e.key.to_vec(),
                            e.locator(victim, v_epoch),
                            new,
                        ));
                    }
                }
                self.repoint(&moves)?;
                self.retire_victim(p, victim, s)?;
                p.pool.lock().free.push(victim);
            } else {
                // Copies incomplete: no key was pointed at them. Free the spare (epoch first).
                let epoch = ch.epoch.load(Ordering::Acquire).wrapping_add(1);
                self.region
                    .atomic_u64(s_off + payload_chunk::EPOCH)?
                    .store(epoch, Ordering::Release);
                self.region.persist(s_off + payload_chunk::EPOCH, 8)?;
                ch.epoch.store(epoch, Ordering::Release);
                self.set_chunk_state(s_off, 0)?;
                ch.in_use.store(false, Ordering::Release);
                p.pool.lock().free.push(s);
            }
        }
        let mut pool = p.pool.lock();
        if pool.spare.is_none() {
            pool.spare = pool.free.pop();
        }
        Ok(())
    }

    /// Reads chunk `c` whole once every append pending in it is indexed (it is sealed, so no
    /// new ones come): an entry written but not indexed yet would look dead.
    fn read_sealed(&self, p: &Payload, c: u32) -> Result<(Vec<u8>, u64)> {
        let ch = &p.chunks[c as usize];
        let mut round = 0;
        while ch.pending.load(Ordering::Acquire) != 0 {
            crate::sync::backoff(&mut round);
        }
        let mut image = vec![0u8; p.chunk_bytes as usize];
        self.region
            .read(ch.off.load(Ordering::Acquire), &mut image)?;
        Ok((image, ch.epoch.load(Ordering::Acquire)))
    }

    /// Live and total entry bytes of sealed chunk `c`: an entry is live if it is its key's
    /// newest record.
    fn estimate_live(&self, p: &Payload, c: u32) -> Result<(u64, u64)> {
        let (image, epoch) = self.read_sealed(p, c)?;
        let (mut total, mut live) = (0, 0);
        for e in entries(&image, epoch) {
            total += e.bytes as u64;
            if !e.dead
                && self.newest_word(self.geo.hash_key(e.key), e.key)? == Some(e.locator(c, epoch))
            {
                live += e.bytes as u64;
            }
        }
        Ok((total, live))
    }

    /// Where the image of sealed chunk `c` (epoch `epoch`) shows an entry that fails its check
    /// and may still be some key's newest record — which a collection, copying only the
    /// entries that pass, would lose. Two signs, either enough:
    /// - bytes other than zeros between two entries that pass, in a chunk no crash cut writes
    ///   short in (not [`payload_chunk::CRASHED`]): entries are appended back to back (padding
    ///   written as zeros), so only damage leaves them;
    /// - an entry with the magic whose key, as its header gives it, has this entry as its
    ///   newest record (covers a crashed chunk, and a chunk's last entry, after which the
    ///   bytes of earlier epochs may follow).
    ///
    /// Left undetected: damage to both the header or key and the position (the last entry of
    /// a chunk, or any entry of a crashed chunk) — see docs/FORMAT-plush.md.
    fn damaged_entry(&self, p: &Payload, c: u32, image: &[u8], epoch: u64) -> Result<Option<u64>> {
        let off = p.chunks[c as usize].off.load(Ordering::Acquire);
        let state = self
            .region
            .atomic_u64(off + payload_chunk::STATE)?
            .load(Ordering::Acquire);
        let crashed = state & payload_chunk::CRASHED != 0;
        let indexed_here = |from: usize, to: usize| -> Result<Option<u64>> {
            for pos in (from..to.min(image.len())).step_by(8) {
                let Some(w) = image.get(pos..pos + HEADER as usize) else {
                    break;
                };
                let w0 = u64::from_le_bytes(w[..8].try_into().expect("8"));
                let w1 = u64::from_le_bytes(w[8..].try_into().expect("8"));
                let (kl, _, _) = split_payload_header(w0);
                let Some(key) = image.get(pos + HEADER as usize..pos + HEADER as usize + kl) else {
                    continue;
                };
                if w1 as u32 != ENTRY_MAGIC || key.is_empty() {
                    continue;
                }
                let here = Locator {
                    chunk: c,
                    epoch: epoch as u32,
                    offset: pos as u32,
                }
                .encode();
                if self.newest_word(self.geo.hash_key(key), key)? == Some(here) {
                    return Ok(Some(pos as u64));
                }
            }
            Ok(None)
        };
        let mut end = PAYLOAD_CHUNK_HEADER as usize;
        for e in entries(image, epoch) {
            if e.pos > end {
                if !crashed && image[end..e.pos].iter().any(|&b| b != 0) {
                    return Ok(Some(end as u64));
                }
                if let Some(at) = indexed_here(end, e.pos)? {
                    return Ok(Some(at));
                }
            }
            end = e.pos + e.bytes;
        }
        indexed_here(end, image.len())
    }

    /// Collects `victim` (default: the sealed chunk with the most known-dead bytes): copies the
    /// entries that are their key's newest record into the spare, points those keys at the
    /// copies, then raises the victim's epoch and makes it the spare. Returns the bytes
    /// reclaimed (0 if nothing could be collected).
    pub(super) fn collect_payload(&self, p: &Payload, victim: Option<u32>) -> Result<u64> {
        let _gc = p.gc.write();
        self.collect_locked(p, victim)
    }

    /// [`Inner::collect_payload`] with the collector's lock held.
    fn collect_locked(&self, p: &Payload, victim: Option<u32>) -> Result<u64> {
        let (victim, spare) = {
            let mut pool = p.pool.lock();
            let partial: Vec<u32> = pool.partial.iter().map(|x| x.0).collect();
            let eligible = |c: u32| {
                p.sealed(&p.chunks[c as usize]) && Some(c) != pool.spare && !partial.contains(&c)
            };
            let victim = match victim {
                Some(c) => eligible(c).then_some(c),
                None => (0..p.chunks.len() as u32)
                    .filter(|&c| eligible(c))
                    .max_by_key(|&c| p.chunks[c as usize].reclaimable()),
            };
            let Some(victim) = victim else {
                return Ok(0);
            };
            let spare = match pool.spare.take() {
                Some(s) => s,
                None => match pool.free.pop() {
                    Some(s) => s,
                    None => {
                        drop(pool);
                        self.alloc_payload_chunk(p)?
                    }
                },
            };
            (victim, spare)
        };
        let (image, v_epoch) = self.read_sealed(p, victim)?;
        if let Some(at) = self.damaged_entry(p, victim, &image, v_epoch)? {
            // Copying only the entries that pass their check would leave the damaged one's
            // record dangling once the victim's epoch moves: its key's reads would go on to
            // an older version. Left alone, as a chunk recovery found damage in; its reads
            // report the damage.
            p.chunks[victim as usize]
                .suspect
                .store(true, Ordering::Relaxed);
            p.pool.lock().spare = Some(spare);
            self.counters.payload_chunks_damaged.incr();
            tracing::warn!(
                "plush {:?}: payload chunk {victim} holds an entry that fails its check at \
                 offset {at} (media damage); the chunk is not collected and reads of its \
                 entries check them",
                self.path
            );
            return Ok(0);
        }
        let s = &p.chunks[spare as usize];
        let s_off = s.off.load(Ordering::Acquire);
        let s_epoch = s.epoch.load(Ordering::Acquire);
        // The spare says whose copies it receives, in its state word: a crash before the copies
        // are complete leaves it unreferenced, after it recovery finishes the collection.
        self.set_chunk_state(s_off, payload_chunk::collecting(victim, false))?;
        s.in_use.store(true, Ordering::Release);
        let mut s_pos = PAYLOAD_CHUNK_HEADER;
        let mut moves = Vec::new();
        let mut total = 0u64;
        for e in entries(&image, v_epoch) {
            total += e.bytes as u64;
            let old = e.locator(victim, v_epoch);
            let hash = self.geo.hash_key(e.key);
            if e.dead || self.newest_word(hash, e.key)? != Some(old) {
                continue;
            }
            // The copy carries the spare's epoch in its check.
            let new_w1 = u64::from(ENTRY_MAGIC)
                | (u64::from(entry_crc(s_epoch, e.w0, e.key, e.value)) << 32);
            let mut raw = image[e.pos..e.pos + e.bytes].to_vec();
            raw[8..16].copy_from_slice(&new_w1.to_le_bytes());
            // Same sizes: the live entries of one chunk always fit another.
            self.region.write(s_off + s_pos, &raw)?;
            let new = Locator {
                chunk: spare,
                epoch: s_epoch as u32,
                offset: s_pos as u32,
            }
            .encode();
            moves.push((hash, e.key.to_vec(), old, new));
            s_pos += raw.len() as u64;
        }
        self.region.persist(s_off, s_pos as usize)?;
        self.set_chunk_state(s_off, payload_chunk::collecting(victim, true))?;
        self.repoint(&moves)?;
        // The entries not moved were dead; those not yet counted dead stop counting as live.
        let moved = s_pos - PAYLOAD_CHUNK_HEADER;
        let marked = p.chunks[victim as usize].dead.load(Ordering::Relaxed);
        let newly_dead = total.saturating_sub(moved).saturating_sub(marked);
        p.live.dead.add(newly_dead);
        self.retire_victim(p, victim, spare)?;
        let mut pool = p.pool.lock();
        pool.spare = Some(victim);
        pool.partial.push((spare, s_pos));
        self.counters.payload_collections.incr();
        Ok(p.chunk_bytes - s_pos)
    }
}

/// A payload entry just written.
pub(super) struct Appended<'a> {
    /// Its locator (the value word its log record carries).
    pub word: u64,
    /// Keeps the collector away until the locator is indexed.
    pub pending: Pending<'a>,
    /// Its range, if the caller is to persist it (with its log entry).
    pub unpersisted: Option<(u64, usize)>,
}

/// An entry a locator points at, as its header describes it.
struct Located<'a> {
    loc: Locator,
    chunk: &'a PChunk,
    /// The chunk's epoch when the header was read.
    epoch: u64,
    /// The header's first word, as read.
    w0: u64,
    /// Where the key (then the value) starts.
    bytes: u64,
    /// Key and value lengths (0 when the header's are impossible).
    kl: usize,
    vl: usize,
    /// The lengths the header claims.
    claimed: (usize, usize),
    tombstone: bool,
    /// The claimed lengths fit the chunk and the largest entry.
    valid: bool,
}

impl Located<'_> {
    /// After the entry's bytes were read: whether its chunk was collected meanwhile (then
    /// they may be anything). The fence orders those reads before the epoch's.
    fn collected(&self) -> bool {
        std::sync::atomic::fence(Ordering::Acquire);
        self.chunk.epoch.load(Ordering::Acquire) != self.epoch
    }

    /// After the entry's bytes were read: `false` if its chunk was collected meanwhile (then
    /// they may be anything, and the header too); an error if the header was impossible.
    fn settle(&self) -> Result<bool> {
        if self.collected() {
            return Ok(false);
        }
        if !self.valid {
            let (kl, vl) = self.claimed;
            return Err(Error::corrupt(
                None,
                format!(
                    "payload entry at chunk {} offset {} claims {kl} + {vl} bytes",
                    self.loc.chunk, self.loc.offset
                ),
            ));
        }
        Ok(true)
    }
}

/// What [`Payload::read_for`] found at a locator.
pub(super) enum Lookup {
    /// The chunk was collected: the locator dangles.
    Dangling,
    /// Another key's entry (the same 64-bit hash).
    Other,
    /// The key's entry: a value (read into the caller's buffer if one was given), or a
    /// deletion (`live` false).
    Key { live: bool },
}

/// An entry found in a chunk's image.
struct Walked<'a> {
    pos: usize,
    bytes: usize,
    /// Header word (without the dead bit).
    w0: u64,
    /// Known to be superseded.
    dead: bool,
    key: &'a [u8],
    value: &'a [u8],
}

impl Walked<'_> {
    fn locator(&self, chunk: u32, epoch: u64) -> u64 {
        Locator {
            chunk,
            epoch: epoch as u32,
            offset: self.pos as u32,
        }
        .encode()
    }
}

/// The valid entries of a chunk image of epoch `epoch`, found by their magic and check (a
/// crash may have left holes: reserved space never written), in order.
fn entries(image: &[u8], epoch: u64) -> impl Iterator<Item = Walked<'_>> {
    let mut pos = PAYLOAD_CHUNK_HEADER as usize;
    std::iter::from_fn(move || {
        while pos + HEADER as usize <= image.len() {
            let w0 = u64::from_le_bytes(image[pos..pos + 8].try_into().expect("8"));
            let w1 = u64::from_le_bytes(image[pos + 8..pos + 16].try_into().expect("8"));
            let (kl, vl, _) = split_payload_header(w0);
            let end = pos + HEADER as usize + kl + vl;
            if w1 as u32 != ENTRY_MAGIC || end > image.len() {
                pos += 8;
                continue;
            }
            let key = &image[pos + 16..pos + 16 + kl];
            let value = &image[pos + 16 + kl..end];
            if (w1 >> 32) as u32 != entry_crc(epoch, w0, key, value) {
                pos += 8;
                continue;
            }
            let at = pos;
            pos = end.next_multiple_of(8);
            return Some(Walked {
                pos: at,
                bytes: pos - at,
                w0: w0 & !PAYLOAD_DEAD,
                dead: w0 & PAYLOAD_DEAD != 0,
                key,
                value,
            });
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::{LiveBytes, PAYLOAD_DEAD, entry_crc, entry_crc_joined};

    /// An append checksums key and value in one call, readers and recovery in two: both must
    /// give the format's checksum, whatever the lengths (word boundaries fall anywhere).
    #[test]
    fn joined_checksum_is_the_entry_checksum() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for key_len in [0, 1, 7, 8, 16, 23] {
            for value_len in [0, 1, 9, 200, 277] {
                let (key, value) = bytes[..key_len + value_len].split_at(key_len);
                let w0 = (key_len as u64) | ((value_len as u64) << 32);
                let joined = entry_crc_joined(7, w0, &bytes[..key_len + value_len]);
                assert_eq!(
                    joined,
                    entry_crc(7, w0, key, value),
                    "{key_len}/{value_len}"
                );
                // The dead bit is not covered.
                assert_eq!(joined, entry_crc(7, w0 | PAYLOAD_DEAD, key, value));
                assert_ne!(joined, entry_crc(8, w0, key, value));
            }
        }
    }

    #[test]
    fn live_bytes_add_retire_and_reset() {
        let live = LiveBytes::default();
        live.added.add(1000);
        live.dead.add(300);
        assert_eq!(live.get(), 700);
        // An open sets what the chunks hold; later appends and deaths move it from there.
        live.set(5000);
        assert_eq!(live.get(), 5000);
        live.added.add(10);
        assert_eq!(live.get(), 5010);
        live.dead.add(4010);
        assert_eq!(live.get(), 1000);
        // More found dead than known live (estimates are approximate): never below zero.
        live.dead.add(6000);
        assert_eq!(live.get(), 0);
    }
}
