//! Store internals shared by clients, recovery and reclamation: the region and its geometry,
//! DRAM page latches and block metadata, block allocation and growth, record reads, deletes and
//! invalidation.
//!
//! Owns: the rules every path follows. The key ones, so a reviewer can check each path:
//! - **One writer per key at a time.** Every write of a key (put, update, delete, a compaction
//!   move) holds the key's stripe of [`KeyLocks`] from before its new record is written until
//!   the old record is invalidated, and returns only then. So return values ("was new",
//!   "existed") agree with the state, and a key has two valid records only while a write of it
//!   is in flight — after a crash, either is a correct outcome (recovery keeps the newer version,
//!   see [`layout::stamp`]).
//! - **Durable before visible.** A new record is valid and persisted before the index points at
//!   it; a delete persists the invalidation before it removes the index entry. A reader never
//!   sees a state that a crash could take back.
//! - **One persist per record.** A record is persisted together with its validity marker; its
//!   check (CRC32C over version, key and value) lets recovery drop one that a crash tore.
//!   Invalidation zeroes the record's stamp with the marker, and recovery zeroes what lies in
//!   free space, so a stale record can never pass for a new one.
//! - **Version latches** (one per page, in DRAM): writers change bytes of a page only while
//!   holding its latch; readers copy optimistically and retry when the version moved.
//! - **Record bytes are immutable while indexed**: a slot or log range is written only while it
//!   is free (bit clear / beyond the tail) and no index entry points at it. A fixed slot is
//!   freed (bit cleared) only while its page latch is held until its index entry is gone, so a
//!   slot is never reused while a stale entry points at it.
//! - **Freed space is reused**: blocks (and multi-block runs of large records) go to one
//!   [`FreeExtents`] set and are taken from there before the region grows.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};

use super::index::OffsetIndex;
use super::layout::{self, Geometry, RecordLayout, RecordOffset, header, stamp, var};
use super::metrics::Metrics;
use super::walk::LargeHead;
use crate::device::{DramArena, DurabilityMode, PmemRegion};
use crate::error::{Error, Result};
use crate::space::FreeExtents;
use crate::store::WriteFailure;
use crate::sync::{KeyLocks, LatchGuard, LatchRun, VersionLatch, backoff};

/// Most bytes one growth of the region adds (see [`Inner::growth_unit`]).
const GROWTH_UNIT: u64 = 1 << 20;
/// Keys of a [`Inner::get_many`] round: enough misses in flight to cover the memory latency,
/// few enough (two or three lines each) for the CPU's miss buffers.
pub const GET_MANY_ROUND: usize = 8;

/// Block is unused or free for reuse.
pub(crate) const FREE: u8 = 0;
/// Block is owned by a client for inserts.
pub(crate) const OWNED: u8 = 1;
/// Block holds records and is not owned.
pub(crate) const SEALED: u8 = 2;
/// Block is being compacted.
pub(crate) const COMPACTING: u8 = 3;
/// Block is part of a large record.
pub(crate) const LARGE: u8 = 4;
/// Fixed layout: a sealed block with enough free slots, queued for a client to fill them
/// (reuse in place: no record moves).
pub(crate) const PARTIAL: u8 = 5;

/// DRAM metadata of one block, on a cache line of its own: neighbouring blocks belong to
/// different clients, which update `live` and `tail` on every insert.
#[derive(Debug, Default)]
#[repr(align(64))]
pub(crate) struct BlockMeta {
    pub state: AtomicU8,
    /// Fixed: live records. Variable: live bytes.
    pub live: AtomicU64,
    /// Variable: append position (bytes from the block start).
    pub tail: AtomicU32,
    /// Large head: blocks in the span.
    pub span: AtomicU32,
}

/// Result of trying to read one candidate record.
pub(crate) enum ReadOutcome {
    Found,
    NotThisKey,
    Retry,
}

/// What invalidating a record left to do once its index entry is gone.
#[must_use = "a large record's blocks are freed by `finish_invalidate`"]
pub(crate) enum Invalidated {
    /// The record was already invalid.
    No,
    /// Invalid now; nothing more to do.
    Yes,
    /// Invalid now; its large-record run starting at this block is to be freed.
    LargeRun(u64),
}

impl Invalidated {
    pub fn was_valid(&self) -> bool {
        !matches!(self, Invalidated::No)
    }
}

/// Everything shared behind a [`super::KvStore`].
pub(crate) struct Inner {
    pub region: PmemRegion,
    pub geo: Geometry,
    pub path: Option<PathBuf>,
    pub index: OffsetIndex,
    /// Keys of at most 8 bytes in a fixed layout are their own key word (no hashing needed;
    /// the index still keeps only a tag, so matches are always confirmed on media).
    pub short_keys: bool,
    /// Records carry a check and are written with one persist (every layout but fixed values
    /// of at most [`layout::IN_PLACE_VALUE`] bytes, which are updated in place).
    pub self_validating: bool,
    pub fingerprint_mask: u64,
    /// One version latch per page (read on every get: in a huge-page arena, like the index).
    pub pages: DramArena<VersionLatch>,
    pub blocks: DramArena<BlockMeta>,
    pub allocated_blocks: AtomicU64,
    pub next_block: AtomicU64,
    pub free: FreeExtents,
    pub grow_lock: Mutex<()>,
    pub allow_growth: bool,
    pub key_locks: KeyLocks,
    pub metrics: Metrics,
    /// Iteration holds it shared; compaction of a block tries to take it exclusively (and
    /// skips the block when an iteration runs, so neither ever waits for the other).
    pub compaction_gate: Arc<RwLock<()>>,
    /// The background grower, woken when fresh blocks run low.
    pub grower: Mutex<Option<std::thread::Thread>>,
    /// The background reclaimer, woken when dead space runs high.
    pub reclaimer: Mutex<Option<std::thread::Thread>>,
    /// Whether reclamation is on (background or by helping writers).
    pub reclaim: Option<super::compact::ReclaimOptions>,
    /// Set when dead space passed live space: writers help compact before they write.
    pub space_pressure: AtomicBool,
    /// Set when a write was refused for want of room while deleted records hold at least a
    /// block: the reclaimer's next round takes every block at least
    /// [`super::compact::FULL_FREE_THRESHOLD`] free, not only those past its threshold.
    pub full_pressure: AtomicBool,
    /// Completed reclaimer rounds, for writers that wait for one instead of growing the file.
    pub reclaim_rounds: Mutex<u64>,
    pub reclaim_done: parking_lot::Condvar,
    /// Fixed layout: blocks in state [`PARTIAL`], waiting for a client to fill their free
    /// slots.
    pub partial: crossbeam_queue::SegQueue<u64>,
    /// Set once the open completed (recovery done, clean mark cleared): only such a store may
    /// be marked cleanly closed.
    pub opened: AtomicBool,
    /// Set (once) by a failed persist: the store refuses writes from then on.
    pub failure: WriteFailure,
    /// Replaced records whose invalidation waits for a sync (deferring durability levels; see
    /// [`Inner::retire`]).
    pub retired: Mutex<Retired>,
    /// `retired`'s record count, stored under its lock after each change: every write checks
    /// it, and a mutex taken by every write of every thread is a cache line the writers pass
    /// back and forth (the list stays empty unless invalidations are deferred: see
    /// [`Inner::retire`]).
    pub retired_len: AtomicUsize,
}

/// Replaced records still valid on media, by key word: their invalidation is written only
/// once the record that replaced them is on media (after the next sync), and forgotten once
/// that invalidation is on media too (after the sync after that).
#[derive(Debug, Default)]
pub struct Retired {
    by_key: std::collections::HashMap<u64, Vec<RetiredRecord>>,
    count: usize,
    /// Ids of retirements: an offset may be retired, invalidated, reused by the same key and
    /// retired again while a sync still works from an older list, so entries are named by id.
    next_id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RetiredRecord {
    id: u64,
    off: u64,
    /// Its invalidation is written (durable at the next sync).
    invalidated: bool,
}

/// Retired records beyond which a writer syncs itself (bounds DRAM and the dead space they
/// keep counted as live under a level that rarely syncs).
const RETIRED_LIMIT: usize = 1 << 14;

impl Drop for Inner {
    /// The last handle or client is gone, so no write is in flight: make deferred writes
    /// durable and mark the store cleanly closed (the next open then skips checking records for
    /// torn writes). Not after a failed persist (media may hold a write of unknown fate), nor
    /// while unwinding a panic, nor in durability mode `None` (nothing is persisted).
    fn drop(&mut self) {
        if !self.opened.load(Ordering::Acquire)
            || self.failure.failed()
            || std::thread::panicking()
            // Without persists the mark could reach media before the data it vouches for.
            || self.region.durability() == DurabilityMode::None
        {
            return;
        }
        // Deferred writes first, and every replaced record durably invalid: the mark vouches
        // for them.
        if self.settle().is_err() {
            return;
        }
        if let Ok(w) = self.region.atomic_u64(header::CLEAN as u64) {
            w.store(layout::CLEAN_MARK, Ordering::Release);
            // A failure leaves the mark off: the next open checks everything, which is safe.
            let _ = self.region.persist(header::CLEAN as u64, 8);
        }
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore")
            .field("path", &self.path)
            .field("layout", &self.geo.layout)
            .field("records", &self.index.len())
            .finish()
    }
}

/// The flusher's body under `Durability::Eventual`: every interval, make the deferred writes
/// durable. A failed sync makes the store read-only (as a failed persist does) and ends it.
pub(crate) fn flush_loop(inner: &Inner, ticker: &crate::sync::Ticker) {
    while ticker.next() {
        if inner.fail_on_error(inner.sync()).is_err() {
            return;
        }
    }
}

/// The grower's body: whenever woken (or every interval), add growth steps until enough fresh
/// blocks are ahead of the writers. A failure here is not reported: the client that really
/// runs out of blocks grows (or fails with a clear error) itself.
pub(crate) fn grow_loop(inner: &Inner, ticker: &crate::sync::Ticker) {
    while ticker.next() {
        while inner.growth_due() && !ticker.stopping() {
            let allocated = inner.allocated_blocks.load(Ordering::Acquire);
            if inner.ensure_allocated(allocated + 1).is_err() {
                break;
            }
        }
    }
}

impl Inner {
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn corrupt(&self, detail: impl Into<String>) -> Error {
        Error::corrupt(self.path(), detail)
    }

    /// The index key word for `key`.
    #[inline]
    pub fn key_word(&self, key: &[u8]) -> u64 {
        if self.short_keys {
            let mut b = [0u8; 8];
            if let Some(dst) = b.get_mut(..key.len()) {
                dst.copy_from_slice(key);
            }
            u64::from_le_bytes(b)
        } else {
            xxhash_rust::xxh3::xxh3_64(key) & self.fingerprint_mask
        }
    }

    /// Serialises writers of `key` (see the module docs).
    #[inline]
    pub fn lock_key(&self, key_word: u64) -> LatchGuard<'_> {
        // Short keys are their own word: mix it so neighbouring keys use different stripes.
        self.key_locks.lock(super::index::mix(key_word))
    }

    /// Takes `key`'s lock if no other writer holds it.
    #[inline]
    pub fn try_lock_key(&self, key_word: u64) -> Option<LatchGuard<'_>> {
        self.key_locks.try_lock(super::index::mix(key_word))
    }

    // ----- failure handling -----------------------------------------------------------------

    /// Refuses writes once a persist has failed.
    #[inline]
    pub fn check_writable(&self) -> Result<()> {
        self.failure.check(self.path.as_deref())
    }

    /// Passes `r` through; an error other than a full store (which changes nothing on media)
    /// makes the store read-only ([`WriteFailure::record`]).
    pub fn fail_on_error<T>(&self, r: Result<T>) -> Result<T> {
        self.failure.record("kv", r)
    }

    // ----- latches and metadata -------------------------------------------------------------

    #[inline]
    pub fn page_latch(&self, block: u64, page: u32) -> Result<&VersionLatch> {
        let n = self.geo.page_number(block, page);
        self.pages
            .get(n as usize, 1)
            .and_then(<[_]>::first)
            .ok_or_else(|| self.corrupt(format!("page {block}:{page} beyond the mapped region")))
    }

    #[inline]
    pub fn block_meta(&self, block: u64) -> Result<&BlockMeta> {
        self.blocks
            .get(block as usize, 1)
            .and_then(<[_]>::first)
            .ok_or_else(|| self.corrupt(format!("block {block} beyond the mapped region")))
    }

    /// Takes a page's latch.
    pub fn lock_page(&self, block: u64, page: u32) -> Result<LatchGuard<'_>> {
        Ok(self.page_latch(block, page)?.lock())
    }

    /// Latches pages `first..=last` of `block` in ascending order.
    pub fn lock_pages(&self, block: u64, first: u32, last: u32) -> Result<LatchRun<'_>> {
        let mut run = LatchRun::new();
        for p in first..=last {
            // On error the pages latched so far are released by the run's drop.
            if !run.push(self.page_latch(block, p)?) {
                return Err(self.corrupt("a record spans more pages than a block has"));
            }
        }
        Ok(run)
    }

    // ----- byte positions -------------------------------------------------------------------

    /// Region offset of a variable record's header.
    #[inline]
    pub fn var_pos(&self, off: RecordOffset) -> u64 {
        self.geo.page_offset(off.block(), off.page()) + u64::from(off.pos())
    }

    /// Region offset of a fixed slot.
    #[inline]
    pub fn slot_pos(&self, off: RecordOffset) -> u64 {
        self.geo.slot_offset(off.block(), off.page(), off.pos())
    }

    /// Starts loading the line that invalidating the record at `off` changes besides the
    /// record's own first line: a fixed slot's bitset word, at the start of its page. (A
    /// variable record's invalidation is its header word, on the line its key starts on.)
    #[inline]
    pub fn prefetch_invalidation(&self, off: RecordOffset) {
        if self.geo.fixed_sizes().is_some() {
            self.region.prefetch(self.bit_of(off).0, 8);
        }
    }

    /// Fixed: region offset and bit of the slot's bitset word.
    #[inline]
    pub fn bit_of(&self, off: RecordOffset) -> (u64, u64) {
        let word = self.geo.page_offset(off.block(), off.page()) + u64::from(off.pos() / 64) * 8;
        (word, 1u64 << (off.pos() % 64))
    }

    /// Offset of the variable record whose header is `pos` bytes into block `b`.
    #[inline]
    pub fn var_offset(&self, b: u64, pos: u64) -> RecordOffset {
        RecordOffset::new(b, (pos / layout::PAGE) as u32, (pos % layout::PAGE) as u32)
    }

    // ----- reading records ------------------------------------------------------------------

    /// Reads the key stored at `off` into `buf` (without the page latch: record bytes are
    /// immutable while indexed). Returns false if `off` holds no readable record.
    pub fn read_key_at(&self, off: RecordOffset, buf: &mut Vec<u8>) -> Result<bool> {
        match self.geo.fixed_sizes() {
            Some((k, _)) => {
                buf.resize(k, 0);
                self.region
                    .read(self.slot_pos(off) + layout::SLOT_KEY, buf)?;
                Ok(true)
            }
            None => {
                let pos = self.var_pos(off);
                let word = self.region.atomic_u32(pos)?.load(Ordering::Acquire);
                if let Some((k, _)) = var::inline_lengths(word) {
                    buf.resize(k, 0);
                    self.region.read(pos + var::INLINE_HEADER, buf)?;
                    return Ok(true);
                }
                if word & var::LARGE != 0 && word & var::CONT == 0 {
                    let (klen, _, _) = self.large_lengths(off.block())?;
                    buf.resize(klen, 0);
                    self.read_large(off.block(), var::LARGE_HEADER, buf)?;
                    return Ok(true);
                }
                Ok(false)
            }
        }
    }

    /// Whether the record at `off` holds `key` (lock-free; see [`Inner::read_key_at`]).
    pub fn holds_key(&self, off: RecordOffset, key: &[u8], scratch: &mut Vec<u8>) -> bool {
        matches!(self.read_key_at(off, scratch), Ok(true)) && scratch.as_slice() == key
    }

    /// Version of the record at `off` (0: not a valid record).
    pub fn version_at(&self, off: RecordOffset) -> Result<u32> {
        Ok(match self.geo.layout {
            RecordLayout::Fixed { .. } => {
                stamp::unpack(
                    self.region
                        .read_u64(self.slot_pos(off) + layout::SLOT_STAMP)?,
                )
                .0
            }
            RecordLayout::Variable => {
                self.region
                    .read_u64(self.var_pos(off) + var::INLINE_VERSION)? as u32
            }
        })
    }

    /// Whether the record at `off`, whose validity marker is set, is whole (see
    /// [`super::walk::record_is_whole`]).
    pub fn record_is_whole(&self, off: RecordOffset, buf: &mut Vec<u8>) -> Result<bool> {
        super::walk::record_is_whole(&self.region, &self.geo, off, buf)
    }

    /// Large head in block `b`: (key length, value length, version), or `None` if the lengths
    /// are impossible (a torn read or damage; callers decide which).
    pub fn large_lengths_checked(&self, b: u64) -> Result<Option<(usize, usize, u32)>> {
        Ok(LargeHead::read(&self.region, &self.geo, b)?.lengths())
    }

    /// Large head in block `b`: (key length, value length, version).
    pub fn large_lengths(&self, b: u64) -> Result<(usize, usize, u32)> {
        self.large_lengths_checked(b)?.ok_or_else(|| {
            self.corrupt(format!("large record in block {b} has impossible lengths"))
        })
    }

    /// The pieces of `len` bytes of a large record from logical offset `from`: each a region
    /// offset and the matching range of the caller's buffer (pieces end at block boundaries,
    /// where continuation prefixes interrupt the payload).
    fn large_pieces(
        &self,
        head: u64,
        from: u64,
        len: usize,
    ) -> impl Iterator<Item = (u64, std::ops::Range<usize>)> + '_ {
        let mut done = 0usize;
        std::iter::from_fn(move || {
            if done >= len {
                return None;
            }
            let (at, avail) = self.geo.large_locate(head, from + done as u64);
            let n = (avail as usize).min(len - done);
            let piece = (at, done..done + n);
            done += n;
            Some(piece)
        })
    }

    /// Reads `buf.len()` bytes of a large record starting at logical offset `from`.
    pub fn read_large(&self, head: u64, from: u64, buf: &mut [u8]) -> Result<()> {
        for (at, range) in self.large_pieces(head, from, buf.len()) {
            let dst = buf
                .get_mut(range)
                .ok_or_else(|| self.corrupt("large record read out of bounds"))?;
            self.region.read(at, dst)?;
        }
        Ok(())
    }

    /// Writes `data` into a large record at logical offset `from` (no persist).
    pub fn write_large(&self, head: u64, from: u64, data: &[u8]) -> Result<()> {
        for (at, range) in self.large_pieces(head, from, data.len()) {
            let src = data
                .get(range)
                .ok_or_else(|| self.corrupt("large record write out of bounds"))?;
            self.region.write(at, src)?;
        }
        Ok(())
    }

    /// Copies the record at `off` into `value` if it holds `key`, consistently with respect to
    /// concurrent writers of its page(s).
    pub fn read_record(
        &self,
        off: RecordOffset,
        key: &[u8],
        value: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> Result<ReadOutcome> {
        match self.geo.fixed_sizes() {
            Some((k, v)) => {
                let slot = self.slot_pos(off);
                let value_at = (layout::slot_value(k) - layout::SLOT_KEY) as usize;
                // No software prefetch of the record's lines here: the loads below start them
                // at once anyway, and on the 2-vCPU guest the prefetch made gets slower
                // (`kv_quick` on tmpfs: 1.41–1.43 against 1.59–1.65 M/s without it at 5 M
                // records, 1.30 against 1.39 at 10 M; `perf` put two thirds of the record read
                // on the prefetch of a line whose page missed the TLB). [`Inner::get_many`]
                // still prefetches, a round of keys ahead.
                let latch = self.page_latch(off.block(), off.page())?;
                let Some(v1) = latch.optimistic() else {
                    return Ok(ReadOutcome::Retry);
                };
                // The key checked in place and the value copied straight into the caller's
                // buffer: the shorter this copy, the sooner the next get's misses can start.
                value.resize(v, 0);
                let stamp_word = if self.self_validating {
                    self.region.atomic_u64(slot)?.load(Ordering::Acquire)
                } else {
                    0
                };
                let is_key = self.region.read_if_key(
                    slot + layout::SLOT_KEY,
                    key,
                    value_at as u64,
                    value,
                )?;
                if !latch.validate(v1) {
                    return Ok(ReadOutcome::Retry);
                }
                if !is_key {
                    return Ok(ReadOutcome::NotThisKey);
                }
                // A zero stamp: invalidated since the index was read (the value is still the
                // one the key had), nothing to check.
                if stamp_word != 0 {
                    let (version, check) = stamp::unpack(stamp_word);
                    if stamp::slot_check(version, key, k, value, v) != check {
                        return self.damaged_record(key, off);
                    }
                }
                Ok(ReadOutcome::Found)
            }
            None => self.read_var_record(off, key, value, scratch),
        }
    }

    fn read_var_record(
        &self,
        off: RecordOffset,
        key: &[u8],
        value: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> Result<ReadOutcome> {
        let (b, first) = (off.block(), off.page());
        let head_latch = self.page_latch(b, first)?;
        let Some(v1) = head_latch.optimistic() else {
            return Ok(ReadOutcome::Retry);
        };
        // Whatever looks wrong below is a stale index entry whose record was replaced and its
        // space reused meanwhile (retry if the page moved) — never an error for the reader.
        let stale = |outcome_if_unchanged| {
            if head_latch.validate(v1) {
                outcome_if_unchanged
            } else {
                ReadOutcome::Retry
            }
        };
        let pos = self.var_pos(off);
        let word = self.region.atomic_u32(pos)?.load(Ordering::Acquire);
        if word & var::LARGE != 0 {
            if word & var::CONT != 0 || word & var::VALID == 0 || off.page() != 0 || off.pos() != 0
            {
                return Ok(stale(ReadOutcome::NotThisKey));
            }
            // One read of the head: its lengths now, its check once key and value are read.
            let head = LargeHead::read(&self.region, &self.geo, b)?;
            let Some((klen, vlen, _)) = head.lengths() else {
                return Ok(stale(ReadOutcome::NotThisKey));
            };
            // Validate the lengths before allocating for them.
            if !head_latch.validate(v1) {
                return Ok(ReadOutcome::Retry);
            }
            scratch.resize(klen, 0);
            self.read_large(b, var::LARGE_HEADER, scratch)?;
            if scratch.as_slice() != key {
                return Ok(stale(ReadOutcome::NotThisKey));
            }
            value.resize(vlen, 0);
            self.read_large(b, var::LARGE_HEADER + klen as u64, value)?;
            let whole = head.matches(scratch, value);
            if !head_latch.validate(v1) {
                return Ok(ReadOutcome::Retry);
            }
            if !whole {
                // Read consistently (the page did not move): damage, not a race.
                return Err(self.corrupt(format!(
                    "the large record of block {b} fails its check: media damage"
                )));
            }
            return Ok(ReadOutcome::Found);
        }
        // An inline record is read whether or not its valid bit is still set: a delete clears
        // it (durably) before it removes the index entry, and until then the key exists.
        let Some((klen, vlen)) = var::inline_lengths(word) else {
            return Ok(stale(ReadOutcome::NotThisKey));
        };
        let start = (pos - self.geo.block_offset(b)) + var::INLINE_HEADER;
        let end = start + (klen + vlen) as u64;
        if end > self.geo.block_size() {
            return Ok(stale(ReadOutcome::NotThisKey));
        }
        let end_page = (end.saturating_sub(1) / layout::PAGE) as u32;
        // Versions of the other pages the record spans.
        let mut others = [(0u32, 0u32); layout::MAX_PAGES_PER_BLOCK as usize];
        let mut n_others = 0;
        for p in first + 1..=end_page.max(first) {
            let Some(v) = self.page_latch(b, p)?.optimistic() else {
                return Ok(ReadOutcome::Retry);
            };
            if let Some(slot) = others.get_mut(n_others) {
                *slot = (p, v);
                n_others += 1;
            }
        }
        scratch.resize(klen, 0);
        self.region.read(pos + var::INLINE_HEADER, scratch)?;
        let is_key = scratch.as_slice() == key;
        // Check and version (bytes 4..16 of the record, on its first line).
        let mut sealed = [0u8; 12];
        if is_key {
            value.resize(vlen, 0);
            self.region
                .read(pos + var::INLINE_HEADER + klen as u64, value)?;
            self.region.read(pos + var::INLINE_CHECK, &mut sealed)?;
        }
        if !head_latch.validate(v1) {
            return Ok(ReadOutcome::Retry);
        }
        for &(p, v) in others.iter().take(n_others) {
            if !self.page_latch(b, p)?.validate(v) {
                return Ok(ReadOutcome::Retry);
            }
        }
        if !is_key {
            return Ok(ReadOutcome::NotThisKey);
        }
        // Read consistently (no page moved): a record whose check fails is damaged on media.
        // A delete clears only the valid bit, so an invalidated record still passes.
        let (check, version) = sealed.split_at(4);
        let crc = stamp::inline_check(version, key, value);
        if crc != u32::from_le_bytes(check.try_into().unwrap_or_default()) {
            return self.damaged_record(key, off);
        }
        Ok(ReadOutcome::Found)
    }

    /// A record of `key` read consistently whose check fails: media damage, reported, never
    /// served — if the index still names it (else the entry was stale, and the bytes there
    /// belong to whatever reused the space since: read again).
    fn damaged_record(&self, key: &[u8], off: RecordOffset) -> Result<ReadOutcome> {
        if !self.indexed_at(key, off) {
            return Ok(ReadOutcome::Retry);
        }
        self.metrics.damaged_reads.incr();
        Err(self.corrupt(format!(
            "the record at {off} fails its check: media damage (`kv verify` lists every \
             damaged record; writing the key again replaces it)"
        )))
    }

    /// Point lookup. Optimistic: never takes a latch, but retries while a writer holds the
    /// record's page (so a reader can wait for a writer; it never blocks one).
    pub fn get(&self, key: &[u8], value: &mut Vec<u8>, scratch: &mut Vec<u8>) -> Result<bool> {
        self.check_key(key)?;
        let kw = self.key_word(key);
        let mut round = 0;
        loop {
            let mut outcome: Result<Option<bool>> = Ok(Some(false));
            self.index.find(kw, &mut |o| match self.read_record(
                RecordOffset(o),
                key,
                value,
                scratch,
            ) {
                Ok(ReadOutcome::Found) => {
                    outcome = Ok(Some(true));
                    true
                }
                Ok(ReadOutcome::NotThisKey) => false,
                Ok(ReadOutcome::Retry) => {
                    outcome = Ok(None);
                    true
                }
                Err(e) => {
                    outcome = Err(e);
                    true
                }
            });
            match outcome? {
                Some(found) => {
                    self.metrics.gets.incr();
                    if found {
                        self.metrics.get_hits.incr();
                    } else {
                        // A record with another key may have left its length here.
                        value.clear();
                    }
                    return Ok(found);
                }
                None => {
                    self.metrics.read_retries.incr();
                    backoff(&mut round);
                }
            }
        }
    }

    /// Looks up a batch of keys with their cache misses overlapped: first every key's index
    /// buckets are prefetched, then every candidate record and its page latch, and only then
    /// is each key read by [`Inner::get`] (from cache by then). One get after another waits
    /// for two dependent misses each (index, then record); here a round of
    /// [`GET_MANY_ROUND`] keys waits for about two in all. `values[i]` and `found[i]` receive
    /// key `i`'s value and whether it exists.
    pub fn get_many(
        &self,
        keys: &[&[u8]],
        values: &mut [Vec<u8>],
        found: &mut [bool],
        scratch: &mut Vec<u8>,
    ) -> Result<()> {
        crate::store::check_batch(keys, values, found)?;
        // Every key is checked before any is read: a bad key fails the call as a whole.
        for key in keys {
            self.check_key(key)?;
        }
        let mut words = [0u64; GET_MANY_ROUND];
        for (start, round) in (0..)
            .step_by(GET_MANY_ROUND)
            .zip(keys.chunks(GET_MANY_ROUND))
        {
            for (w, key) in words.iter_mut().zip(round) {
                *w = self.key_word(key);
                self.index.prefetch(*w);
            }
            for &w in &words[..round.len()] {
                self.index.find(w, &mut |o| {
                    self.prefetch_record(RecordOffset(o));
                    false
                });
            }
            for (i, key) in round.iter().enumerate() {
                found[start + i] = self.get(key, &mut values[start + i], scratch)?;
            }
        }
        Ok(())
    }

    /// Starts loading the first lines of the record at `off` and its page latch (a hint: an
    /// offset that is stale by now only costs a wasted prefetch).
    fn prefetch_record(&self, off: RecordOffset) {
        match self.geo.fixed_sizes() {
            Some((k, v)) => {
                let value_at = (layout::slot_value(k) - layout::SLOT_KEY) as usize;
                self.region
                    .prefetch(self.slot_pos(off) + layout::SLOT_KEY, value_at + v);
            }
            None => self.region.prefetch(self.var_pos(off), 64),
        }
        if let Ok(latch) = self.page_latch(off.block(), off.page()) {
            crate::device::cpu::prefetch(latch as *const VersionLatch);
        }
    }

    /// Finds the offset of `key`'s current record. Exact when the caller holds the key's lock.
    pub fn locate(&self, key: &[u8], scratch: &mut Vec<u8>) -> Option<RecordOffset> {
        self.locate_with(key, scratch, false)
    }

    /// [`Inner::locate`] for a writer about to invalidate the record it finds: in the fixed
    /// layout each candidate's bitset line is requested before its key is read, so the two
    /// misses overlap (a candidate is a tag match: rarely, a line is loaded for nothing).
    pub fn locate_to_replace(&self, key: &[u8], scratch: &mut Vec<u8>) -> Option<RecordOffset> {
        self.locate_with(key, scratch, true)
    }

    #[inline]
    fn locate_with(
        &self,
        key: &[u8],
        scratch: &mut Vec<u8>,
        to_replace: bool,
    ) -> Option<RecordOffset> {
        let kw = self.key_word(key);
        let mut found = None;
        self.index.find(kw, &mut |o| {
            if to_replace {
                self.prefetch_invalidation(RecordOffset(o));
            }
            if self.holds_key(RecordOffset(o), key, scratch) {
                found = Some(RecordOffset(o));
                true
            } else {
                false
            }
        });
        found
    }

    /// Whether the index currently has the entry `(key, off)`.
    pub fn indexed_at(&self, key: &[u8], off: RecordOffset) -> bool {
        let kw = self.key_word(key);
        self.index.find(kw, &mut |o| o == off.0)
    }

    pub fn check_key(&self, key: &[u8]) -> Result<()> {
        if key.is_empty() {
            return Err(Error::EmptyKey);
        }
        match self.geo.fixed_sizes() {
            Some((k, _)) if key.len() != k => Err(Error::WrongSize {
                what: "key",
                len: key.len(),
                expected: k,
            }),
            Some(_) => Ok(()),
            None if key.len() > layout::MAX_VAR_KEY => Err(Error::KeyTooLarge {
                len: key.len(),
                max: layout::MAX_VAR_KEY,
            }),
            None => Ok(()),
        }
    }

    /// Refuses a value this store cannot hold: the wrong size for a fixed layout, or over
    /// the largest.
    pub fn check_value(&self, value: &[u8]) -> Result<()> {
        match self.geo.fixed_sizes() {
            Some((_, v)) if value.len() != v => Err(Error::WrongSize {
                what: "value",
                len: value.len(),
                expected: v,
            }),
            Some(_) => Ok(()),
            None if value.len() > layout::MAX_LARGE_VALUE => Err(Error::ValueTooLarge {
                len: value.len(),
                max: layout::MAX_LARGE_VALUE,
            }),
            None => Ok(()),
        }
    }

    /// Refuses a record this store cannot hold (the checks a put makes before writing).
    pub fn check_record(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_key(key)?;
        self.check_value(value)
    }

    // ----- invalidation and delete ----------------------------------------------------------

    /// The persist that acknowledges a record or an invalidation: deferred to the next sync
    /// under a deferring durability level — only where records carry a check, so that a record
    /// reaching media in pieces, or over a slot whose invalidation did not, can be told apart.
    #[inline]
    pub fn persist_ack(&self, ranges: &[(u64, usize)]) -> Result<()> {
        if self.self_validating {
            self.region.persist_deferred(ranges)
        } else {
            self.region.persist_all(ranges)
        }
    }

    /// Marks the record at `off` invalid on media and persists that (atomic; does not wait for
    /// the page latch). A large record's blocks are freed by [`Inner::finish_invalidate`] once
    /// no index entry points at it any more.
    pub fn invalidate(&self, off: RecordOffset) -> Result<Invalidated> {
        match self.geo.layout {
            RecordLayout::Fixed { .. } => {
                let (was_marked, touched) = self.unmark_slot(off)?;
                self.persist_ack(&touched)?;
                if !was_marked {
                    return Ok(Invalidated::No);
                }
                self.block_meta(off.block())?
                    .live
                    .fetch_sub(1, Ordering::Relaxed);
                self.metrics.live_bytes_freed.add(self.geo.slot_size);
                Ok(Invalidated::Yes)
            }
            RecordLayout::Variable => {
                let pos = self.var_pos(off);
                let w = self.region.atomic_u32(pos)?;
                let prev = w.fetch_and(!var::VALID, Ordering::AcqRel);
                if prev & var::LARGE != 0 {
                    // The run is freed next and may be rewritten at once: the head's
                    // invalidation must be on media first, whatever the durability level.
                    self.region.persist(pos, 4)?;
                } else {
                    self.persist_ack(&[(pos, 4)])?;
                }
                if prev & var::VALID == 0 {
                    return Ok(Invalidated::No);
                }
                if prev & var::LARGE != 0 {
                    return Ok(Invalidated::LargeRun(off.block()));
                }
                if let Some((k, v)) = var::inline_lengths(prev) {
                    let size = var::inline_size(k, v);
                    self.block_meta(off.block())?
                        .live
                        .fetch_sub(size, Ordering::Relaxed);
                    self.metrics.live_bytes_freed.add(size);
                }
                Ok(Invalidated::Yes)
            }
        }
    }

    /// Zeroes the stamp of the fixed slot at `off` and clears its bit (not persisted). Returns
    /// whether the bit was set, and the two words touched. The stamp goes first, while the slot
    /// is still taken (once the bit is clear, an inserter may claim the slot), and with it the
    /// slot's bytes can never pass for a record again (see layout::stamp); a crash between the
    /// two leaves a marked slot with a zero stamp: invalid.
    fn unmark_slot(&self, off: RecordOffset) -> Result<(bool, [(u64, usize); 2])> {
        let (word, bit) = self.bit_of(off);
        let at = self.slot_pos(off) + layout::SLOT_STAMP;
        self.region.atomic_u64(at)?.store(0, Ordering::Release);
        let prev = self
            .region
            .atomic_u64(word)?
            .fetch_and(!bit, Ordering::AcqRel);
        Ok((prev & bit != 0, [(at, 8), (word, 8)]))
    }

    /// Recovery: unmarks a record that a crash tore (marker set, check failed) and zeroes its
    /// stamp, durably. It was never acknowledged and was never counted live.
    pub fn discard_torn(&self, off: RecordOffset) -> Result<()> {
        match self.geo.layout {
            RecordLayout::Fixed { .. } => {
                let (_, touched) = self.unmark_slot(off)?;
                self.region.persist_all(&touched)
            }
            RecordLayout::Variable => {
                let pos = self.var_pos(off);
                self.region
                    .atomic_u32(pos)?
                    .fetch_and(!var::VALID, Ordering::AcqRel);
                self.region.persist(pos, 4)
            }
        }
    }

    /// Completes an invalidation: frees a large record's run.
    pub fn finish_invalidate(&self, done: Invalidated) -> Result<bool> {
        let was_valid = done.was_valid();
        if let Invalidated::LargeRun(head) = done {
            self.free_large(head)?;
        }
        Ok(was_valid)
    }

    /// Returns a (now invalid and unindexed) large record's blocks to the free set, after moving
    /// the head page's version on so that a reader still copying the record notices and
    /// retries.
    fn free_large(&self, head: u64) -> Result<()> {
        self.page_latch(head, 0)?.invalidate_readers();
        let head_meta = self.block_meta(head)?;
        let span = u64::from(head_meta.span.load(Ordering::Acquire)).max(1);
        self.metrics
            .live_bytes_freed
            .add(head_meta.live.load(Ordering::Acquire));
        for b in head..head + span {
            let m = self.block_meta(b)?;
            m.live.store(0, Ordering::Relaxed);
            m.tail.store(0, Ordering::Relaxed);
            m.span.store(0, Ordering::Relaxed);
            m.state.store(FREE, Ordering::Release);
        }
        self.free.free(head, span);
        Ok(())
    }

    // ----- deferred invalidation of replaced records ----------------------------------------

    /// Retires `old`, the record a write of key word `kw` just replaced (the caller holds the
    /// key's lock and the index points at the new record). The new record must reach media
    /// before `old`'s invalidation can, or a power loss could leave neither. Immediately: one
    /// sync, then the invalidation. Under a deferring level the record instead stays valid
    /// (still counted live, so its space is not reused) and [`Inner::sync`] invalidates it
    /// after the sync that covers its replacement: a replacing write then costs no sync of
    /// its own. A crash meanwhile leaves both records valid, and recovery keeps the newer.
    pub fn retire(&self, kw: u64, old: RecordOffset) -> Result<()> {
        if self.defers_invalidation(old)? {
            let mut retired = self.retired.lock();
            retired.next_id += 1;
            let id = retired.next_id;
            retired.by_key.entry(kw).or_default().push(RetiredRecord {
                id,
                off: old.0,
                invalidated: false,
            });
            retired.count += 1;
            self.retired_len.store(retired.count, Ordering::Release);
            return Ok(());
        }
        self.region.sync_deferred()?;
        let done = self.invalidate(old)?;
        self.finish_invalidate(done)?;
        Ok(())
    }

    /// Whether `old`'s invalidation may wait (see [`Inner::retire`]): the region defers
    /// persists, records carry checks, and `old` is not a large record (whose run is freed,
    /// and may be rewritten, as soon as it is invalid).
    fn defers_invalidation(&self, old: RecordOffset) -> Result<bool> {
        if !self.self_validating || !self.region.defers_persists() {
            return Ok(false);
        }
        Ok(match self.geo.layout {
            RecordLayout::Fixed { .. } => true,
            RecordLayout::Variable => {
                let word = self
                    .region
                    .atomic_u32(self.var_pos(old))?
                    .load(Ordering::Acquire);
                word & var::LARGE == 0
            }
        })
    }

    /// Whether so many records wait for their invalidation that the writer should sync.
    pub fn retired_over_limit(&self) -> bool {
        self.retired_len.load(Ordering::Acquire) > RETIRED_LIMIT
    }

    /// Before the key's current record is invalidated (a delete; the caller holds the key's
    /// lock): every older record of the key must be durably invalid first, or a power loss
    /// could bring one back in place of the delete. Costs two syncs when the key has retired
    /// records, none otherwise.
    pub fn settle_key(&self, kw: u64) -> Result<()> {
        // None at all (always so unless invalidations are deferred). Had an earlier holder of
        // this key's lock retired a record (every retire holds the key's lock), the lock
        // orders that store before this load; and the count drops only when records leave
        // the list (durably invalid, or settled under this lock).
        if self.retired_len.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let records = {
            let mut retired = self.retired.lock();
            match retired.by_key.remove(&kw) {
                Some(records) => {
                    retired.count -= records.len();
                    self.retired_len.store(retired.count, Ordering::Release);
                    records
                }
                None => return Ok(()),
            }
        };
        // Their replacements (the current record among them) on media first…
        self.region.sync_deferred()?;
        for r in records.iter().filter(|r| !r.invalidated) {
            let done = self.invalidate(RecordOffset(r.off))?;
            self.finish_invalidate(done)?;
        }
        // …then their invalidations.
        self.region.sync_deferred()
    }

    /// Makes every write so far durable, forgets retired records whose invalidation that made
    /// durable, and writes the invalidation of those whose replacement it made durable (they
    /// become durable at the next sync). A key whose lock is busy keeps its records for the
    /// next round (a writer of that key may be settling it).
    pub fn sync(&self) -> Result<()> {
        let (to_invalidate, to_forget) = {
            let retired = self.retired.lock();
            let mut to_invalidate = Vec::new();
            let mut to_forget = Vec::new();
            for (&kw, records) in &retired.by_key {
                for r in records {
                    if r.invalidated {
                        to_forget.push((kw, r.id));
                    } else {
                        to_invalidate.push((kw, r.id, r.off));
                    }
                }
            }
            (to_invalidate, to_forget)
        };
        self.region.sync_deferred()?;
        if !to_forget.is_empty() {
            let mut retired = self.retired.lock();
            for (kw, id) in to_forget {
                retired.forget(kw, id);
            }
            self.retired_len.store(retired.count, Ordering::Release);
        }
        for (kw, id, off) in to_invalidate {
            // Under the key's lock: no writer of the key retires or settles meanwhile, and
            // no other sync invalidates this entry twice.
            let Some(_key) = self.try_lock_key(kw) else {
                continue;
            };
            let still_waiting = {
                let retired = self.retired.lock();
                retired
                    .by_key
                    .get(&kw)
                    .is_some_and(|rs| rs.iter().any(|r| r.id == id && !r.invalidated))
            };
            if !still_waiting {
                continue;
            }
            let done = self.invalidate(RecordOffset(off))?;
            self.finish_invalidate(done)?;
            let mut retired = self.retired.lock();
            if let Some(r) = retired
                .by_key
                .get_mut(&kw)
                .and_then(|rs| rs.iter_mut().find(|r| r.id == id))
            {
                r.invalidated = true;
            }
        }
        Ok(())
    }

    /// Syncs until no retired record is left valid or unsynced (close and drop: the clean
    /// mark vouches that media holds one valid record per key).
    pub fn settle(&self) -> Result<()> {
        for _ in 0..3 {
            self.sync()?;
            if self.retired_len.load(Ordering::Acquire) == 0 {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Deletes `key`: under the key's lock, invalidate the record durably (holding its page
    /// latch, so that a fixed slot cannot be reused while its entry is indexed), then remove
    /// the index entry.
    pub fn delete(&self, key: &[u8], scratch: &mut Vec<u8>) -> Result<bool> {
        self.check_key(key)?;
        self.check_writable()?;
        let kw = self.key_word(key);
        let _key = self.lock_key(kw);
        let result = self.delete_locked(key, kw, scratch);
        self.metrics.deletes.incr();
        self.fail_on_error(result)
    }

    pub fn delete_locked(&self, key: &[u8], kw: u64, scratch: &mut Vec<u8>) -> Result<bool> {
        let Some(off) = self.locate_to_replace(key, scratch) else {
            return Ok(false);
        };
        self.settle_key(kw)?;
        let page = self.lock_page(off.block(), off.page())?;
        let done = self.invalidate(off)?;
        if !self.index.remove_exact(kw, off.0) {
            return Err(self.corrupt(format!(
                "index entry of a key at {off} vanished while its key was locked"
            )));
        }
        drop(page);
        self.finish_invalidate(done)?;
        Ok(true)
    }

    // ----- blocks ---------------------------------------------------------------------------

    /// Makes sure at least `blocks` blocks are mapped, growing the region by at least one
    /// growth unit (see [`Inner::growth_unit`]).
    pub fn ensure_allocated(&self, blocks: u64) -> Result<()> {
        if blocks <= self.allocated_blocks.load(Ordering::Acquire) {
            return Ok(());
        }
        let _g = self.grow_lock.lock();
        let have = self.allocated_blocks.load(Ordering::Acquire);
        if blocks <= have {
            return Ok(());
        }
        let full = |reason: String| Error::StoreFull {
            used: self.geo.region_len_for(have),
            capacity: self.region.len(),
            reason: format!("the region may not grow: {reason}"),
        };
        if !self.allow_growth {
            return Err(full("growth is disabled".into()));
        }
        if blocks > RecordOffset::MAX_BLOCK {
            return Err(full("block ids exhausted".into()));
        }
        let ahead = blocks
            .max(have + self.growth_unit(have))
            .min(RecordOffset::MAX_BLOCK);
        // On a device without room for the unit ahead, the blocks asked for alone.
        let target = match crate::device::grow_toward(blocks, ahead, |b| {
            self.region.grow(self.geo.region_len_for(b))
        }) {
            Ok(target) => target,
            Err(e @ (Error::RegionLimit { .. } | Error::DeviceFull { .. })) => {
                return Err(full(e.to_string()));
            }
            Err(e) => return Err(e),
        };
        self.add_metas(target)?;
        self.allocated_blocks.store(target, Ordering::Release);
        Ok(())
    }

    /// Fresh blocks the grower keeps ahead of the writers: a quarter of what is mapped (so a
    /// small store stays small), at most half a chunk — the region stays within one chunk of
    /// what is used.
    fn growth_lead(&self, have: u64) -> u64 {
        (have / 4).clamp(1, (u64::from(self.geo.chunk_blocks) / 2).max(1))
    }

    /// Blocks one growth adds: the lead, in units of at most [`GROWTH_UNIT`] bytes, so that
    /// the growth lock is held briefly — a writer that runs out of fresh blocks while the
    /// grower is busy waits for one unit, not for a whole lead (measured: a 32 MiB step kept a
    /// writer waiting 30–80 ms on tmpfs; docs/BENCHMARKS.md).
    fn growth_unit(&self, have: u64) -> u64 {
        let unit = (GROWTH_UNIT / self.geo.block_size()).max(1);
        self.growth_lead(have).min(unit)
    }

    /// Appends DRAM metadata up to `blocks` blocks.
    pub fn add_metas(&self, blocks: u64) -> Result<()> {
        let have = self.blocks.len() as u64;
        if have < blocks {
            self.blocks
                .push((blocks - have) as usize, |_| BlockMeta::default())?;
        }
        let pages = blocks * layout::LATCHES_PER_BLOCK;
        let have = self.pages.len() as u64;
        if have < pages {
            self.pages
                .push((pages - have) as usize, |_| VersionLatch::new())?;
        }
        Ok(())
    }

    /// Reserves `n` never-used consecutive blocks; the used-block high-water mark is durable
    /// before this returns, so recovery will scan them.
    pub fn take_fresh_blocks(&self, n: u64) -> Result<u64> {
        let mut cur = self.next_block.load(Ordering::Acquire);
        loop {
            self.ensure_allocated(cur + n)?;
            match self.next_block.compare_exchange_weak(
                cur,
                cur + n,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        // The count rises to `cur + n` (unless another taker raised it further), with its
        // complement in the same word (`layout::used_word`).
        let used = self.region.atomic_u64(header::USED_BLOCKS as u64)?;
        let mut word = used.load(Ordering::Acquire);
        while layout::used_from_word(word).is_none_or(|have| have < cur + n) {
            match used.compare_exchange_weak(
                word,
                layout::used_word(cur + n),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(w) => word = w,
            }
        }
        self.region.persist(header::USED_BLOCKS as u64, 8)?;
        if self.growth_due()
            && let Some(t) = self.grower.lock().as_ref()
        {
            t.unpark();
        }
        self.note_space_use();
        Ok(cur)
    }

    /// Whether the fresh blocks ahead of the writers ran below the lead, so the grower should
    /// add units before clients run out.
    pub fn growth_due(&self) -> bool {
        let allocated = self.allocated_blocks.load(Ordering::Acquire);
        let ahead = allocated.saturating_sub(self.next_block.load(Ordering::Acquire));
        self.allow_growth && ahead < self.growth_lead(allocated)
    }

    /// Bytes of live records (sum over all blocks, from always-on counters).
    pub fn live_bytes(&self) -> u64 {
        self.metrics
            .live_bytes_written
            .get()
            .saturating_sub(self.metrics.live_bytes_freed.get())
    }

    /// Called when the store takes fresh blocks: if dead bytes outweigh live ones, ask the
    /// reclaimer (and writers, see [`Inner::space_pressure`]) to compact.
    pub fn note_space_use(&self) {
        if self.reclaim.is_none() {
            return;
        }
        let pressure = self.under_pressure();
        self.space_pressure.store(pressure, Ordering::Release);
        if pressure && let Some(t) = self.reclaimer.lock().as_ref() {
            t.unpark();
        }
    }

    /// Whether dead space outweighs live space (used blocks beyond twice the live bytes and
    /// a little slack).
    pub fn under_pressure(&self) -> bool {
        self.used_bytes() > 2 * self.live_bytes() + 4 * self.geo.block_size()
    }

    /// Bytes of the blocks in use (taken and not freed), live or dead.
    fn used_bytes(&self) -> u64 {
        self.next_block
            .load(Ordering::Acquire)
            .saturating_sub(self.free.blocks())
            * self.geo.block_size()
    }

    /// Writers back off instead of growing the file: when no freed block is left and dead space
    /// outweighs live space, wake the reclaimer and wait for one round of it. The reclaimer
    /// never waits for a key a writer holds (it skips such records) except in a round for a
    /// full store ([`Inner::full_pressure`]); a writer's wait is bounded (100 ms without a
    /// finished round), so a reclaimer waiting for the writer's key gets it then.
    fn wait_for_reclaimer(&self, run: u64) {
        if self.reclaim.is_none()
            || self.free.longest() >= run
            || (run == 1 && !self.partial.is_empty())
            || !self.under_pressure()
        {
            return;
        }
        if self.wake_reclaimer_and_wait(1) {
            self.metrics.reclaim_waits.incr();
        }
    }

    /// Wakes the background reclaimer and waits until `rounds` more of its rounds have ended
    /// (two guarantee one that started after the call). Returns `false` at once without a
    /// reclaimer. Each wait is bounded (100 ms) as a safety net for a reclaimer that stopped.
    pub fn wake_reclaimer_and_wait(&self, rounds: u64) -> bool {
        let Some(reclaimer) = self.reclaimer.lock().clone() else {
            return false;
        };
        let mut done = self.reclaim_rounds.lock();
        let target = *done + rounds;
        reclaimer.unpark();
        while *done < target {
            if self
                .reclaim_done
                .wait_for(&mut done, std::time::Duration::from_millis(100))
                .timed_out()
            {
                break;
            }
            // A round that ended may have begun before the wake-up: wake it again.
            reclaimer.unpark();
        }
        true
    }

    /// The reclaimer finished a round.
    pub fn reclaim_round_done(&self) {
        *self.reclaim_rounds.lock() += 1;
        self.reclaim_done.notify_all();
    }

    /// A block for a client's inserts: a partly free one queued for reuse (fixed layout), else
    /// a reclaimed one, else a fresh one. A client that `may_wait` (not the reclaimer's own)
    /// first waits for the reclaimer when dead space outweighs live space. Only a client moving
    /// records for compaction may take the variable layout's last block (see
    /// [`Inner::keep_spare_block`]).
    pub fn acquire_block(&self, may_wait: bool, for_compaction: bool) -> Result<u64> {
        if may_wait {
            self.wait_for_reclaimer(1);
        }
        let take = || {
            let b = self.take_block()?;
            self.keep_spare_block(b, 1, for_compaction)?;
            Ok(b)
        };
        match take() {
            Err(Error::StoreFull { .. }) if may_wait && self.reclaimer_may_make_room() => take(),
            taken => taken,
        }
    }

    /// Variable layout: compacting a partly dead block needs an empty block to move its live
    /// records to, so a store that may not grow keeps its last block for compaction. After a
    /// client (not a compaction) took blocks `head..head + n`: if neither a freed block nor
    /// room for a fresh one is left, the blocks go back to the free set and the take is
    /// refused as `StoreFull`. Without the spare, a full store whose blocks are all partly dead
    /// could never compact one, and would refuse writes for good. Takers racing for the last
    /// blocks may both give theirs back (one spare too many for a moment), never both keep
    /// them: the later check sees both takes.
    fn keep_spare_block(&self, head: u64, n: u64, for_compaction: bool) -> Result<()> {
        if for_compaction || self.geo.layout != RecordLayout::Variable || self.free.blocks() > 0 {
            return Ok(());
        }
        let full = match self.ensure_allocated(self.next_block.load(Ordering::Acquire) + 1) {
            Ok(()) => return Ok(()),
            Err(Error::StoreFull {
                used,
                capacity,
                reason,
            }) => Error::StoreFull {
                used,
                capacity,
                reason: format!("{reason}; its last block is kept for compaction"),
            },
            Err(e) => e,
        };
        for b in head..head + n {
            let meta = self.block_meta(b)?;
            meta.tail.store(0, Ordering::Release);
            meta.state.store(FREE, Ordering::Release);
        }
        self.free.free(head, n);
        Err(full)
    }

    /// After a refusal for want of space: if deleted records hold at least a block's worth of
    /// it and there is a reclaimer, has it run (two rounds, so one starts after the call) and
    /// says so; the caller tries again once. A store that may not grow reports `StoreFull`
    /// only when even that found nothing, not while its dead space waits for a round.
    fn reclaimer_may_make_room(&self) -> bool {
        if self.reclaim.is_none() || self.used_bytes() < self.live_bytes() + self.geo.block_size() {
            return false;
        }
        self.full_pressure.store(true, Ordering::Release);
        let waited = self.wake_reclaimer_and_wait(2);
        if waited {
            self.metrics.reclaim_waits.incr();
        }
        waited
    }

    /// [`Inner::acquire_block`]'s search: a partly free block, a freed one, a fresh one.
    fn take_block(&self) -> Result<u64> {
        while let Some(b) = self.partial.pop() {
            if self
                .block_meta(b)?
                .state
                .compare_exchange(PARTIAL, OWNED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(b);
            }
        }
        while let Some(b) = self.free.take_one() {
            let meta = self.block_meta(b)?;
            if meta
                .state
                .compare_exchange(FREE, OWNED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                if self.geo.layout == RecordLayout::Variable {
                    self.zero_block(b)?;
                }
                meta.tail.store(0, Ordering::Release);
                return Ok(b);
            }
        }
        let b = self.take_fresh_blocks(1)?;
        self.block_meta(b)?.state.store(OWNED, Ordering::Release);
        Ok(b)
    }

    /// `n` consecutive blocks for a large record: a freed run if one fits, else fresh blocks.
    /// Like [`Inner::acquire_block`], the run leaves a spare block (never taken for compaction:
    /// large records are not moved).
    pub fn acquire_run(&self, n: u64, may_wait: bool) -> Result<u64> {
        if may_wait {
            self.wait_for_reclaimer(n);
        }
        let take = || {
            let head = match self.free.take_run(n) {
                Some(head) => head,
                None => self.take_fresh_blocks(n)?,
            };
            self.keep_spare_block(head, n, false)?;
            Ok(head)
        };
        match take() {
            Err(Error::StoreFull { .. }) if may_wait && self.reclaimer_may_make_room() => take(),
            taken => taken,
        }
    }

    /// Zeroes a reclaimed variable-layout block (durably), so that its log reads as empty and
    /// no stale header can be mistaken for a new record after a crash.
    fn zero_block(&self, b: u64) -> Result<()> {
        let guards = self.lock_pages(b, 0, self.geo.pages_per_block - 1)?;
        let zeros = vec![0u8; self.geo.block_size() as usize];
        self.region
            .write_nt_persist(self.geo.block_offset(b), &zeros)?;
        drop(guards);
        Ok(())
    }

    /// A client stops inserting into `b`.
    pub fn release_block(&self, b: u64) {
        if let Ok(m) = self.block_meta(b) {
            let _ = m
                .state
                .compare_exchange(OWNED, SEALED, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

impl Retired {
    /// Drops retirement `id` of key word `kw` (its invalidation is durable).
    fn forget(&mut self, kw: u64, id: u64) {
        if let Some(records) = self.by_key.get_mut(&kw) {
            let before = records.len();
            records.retain(|r| !(r.id == id && r.invalidated));
            self.count -= before - records.len();
            if records.is_empty() {
                self.by_key.remove(&kw);
            }
        }
    }
}
