//! Store internals shared by clients, recovery and reclamation: the region and its geometry,
//! DRAM page locks and block metadata, block allocation and growth, record reads, deletes and
//! invalidation.
//!
//! Owns: the rules every path follows. The key ones, so a reviewer can check each path:
//! - **Version locks** (one `u32` per page, in DRAM): even = free, odd = held. Writers change
//!   bytes of a page only while holding its lock; readers copy optimistically and retry when
//!   the version moved.
//! - **Record bytes are immutable while indexed**: a slot or log range is written only while
//!   it is free (bit clear / beyond the tail) and no index entry points at it. So the index may
//!   read a candidate's key without waiting for the page lock (no lock-order cycles).
//! - **Invalidation** of an old record is an atomic bit/word update plus a persist and never
//!   waits for that page's lock. Deletes remove the index entry while holding the page lock, so
//!   a slot is never reused while a stale entry points to it.
//! - **Newest wins**: every record carries a 64-bit sequence number from one store-wide clock;
//!   recovery keeps the highest (ties: the larger offset — only compaction copies tie, and they
//!   hold identical data).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering, fence};

use crossbeam_queue::SegQueue;
use parking_lot::{Mutex, RwLock};

use super::index::OffsetIndex;
use super::layout::{self, Geometry, RecordLayout, RecordOffset, header, var};
use super::metrics::Metrics;
use crate::device::PmemRegion;
use crate::error::{Error, Result};

/// Block is unused or in the free queue.
pub(crate) const FREE: u8 = 0;
/// Block is owned by a client for inserts.
pub(crate) const OWNED: u8 = 1;
/// Block holds records and is not owned.
pub(crate) const SEALED: u8 = 2;
/// Block is being compacted.
pub(crate) const COMPACTING: u8 = 3;
/// Block is part of a large record.
pub(crate) const LARGE: u8 = 4;

/// DRAM metadata of one block.
#[derive(Debug, Default)]
pub(crate) struct BlockMeta {
    pub state: AtomicU8,
    /// Fixed: live records. Variable: live bytes.
    pub live: AtomicU64,
    /// Variable: append position (bytes from the block start).
    pub tail: AtomicU32,
    /// Large head: blocks in the span.
    pub span: AtomicU32,
}

/// A held page version lock; released on drop.
pub(crate) struct PageGuard<'a> {
    lock: &'a AtomicU32,
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        self.lock.fetch_add(1, Ordering::Release);
    }
}

/// Held version locks of consecutive pages of one block (no allocation); released on drop.
pub(crate) struct PageRun<'a> {
    inner: &'a Inner,
    block: u64,
    first: u32,
    held: u32,
}

impl Drop for PageRun<'_> {
    fn drop(&mut self) {
        for p in self.first..self.first + self.held {
            if let Ok(lock) = self.inner.page_lock(self.block, p) {
                lock.fetch_add(1, Ordering::Release);
            }
        }
    }
}

/// Result of trying to read one candidate record.
pub(crate) enum ReadOutcome {
    Found,
    NotThisKey,
    Retry,
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
    pub fingerprint_mask: u64,
    pub pages: boxcar::Vec<AtomicU32>,
    pub blocks: boxcar::Vec<BlockMeta>,
    pub allocated_blocks: AtomicU64,
    pub next_block: AtomicU64,
    pub free_blocks: SegQueue<u64>,
    pub grow_lock: Mutex<()>,
    pub allow_growth: bool,
    pub clock: AtomicU64,
    pub metrics: Metrics,
    /// Iteration holds it shared; compaction of a block holds it exclusively.
    pub compaction_gate: RwLock<()>,
    /// The background grower, woken when fresh blocks run low.
    pub grower: Mutex<Option<std::thread::Thread>>,
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

/// The grower's body: whenever woken (or every interval), add a chunk if three quarters of
/// the mapped blocks are in use. A failure here is not reported: the client that really runs
/// out of blocks grows (or fails with a clear error) itself.
pub(crate) fn grow_loop(inner: &Inner, ticker: &super::background::Ticker) {
    while ticker.next() {
        if inner.growth_due() {
            let allocated = inner.allocated_blocks.load(Ordering::Acquire);
            let _ = inner.ensure_allocated(allocated + u64::from(inner.geo.chunk_blocks));
        }
    }
}

/// Spins politely: a pause hint, and a yield after a while so a preempted lock holder on an
/// oversubscribed machine can run.
#[inline]
pub(crate) fn backoff(round: &mut u32) {
    *round += 1;
    if *round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
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

    #[inline]
    pub fn page_lock(&self, block: u64, page: u32) -> Result<&AtomicU32> {
        let n = self.geo.page_number(block, page);
        self.pages
            .get(n as usize)
            .ok_or_else(|| self.corrupt(format!("page {block}:{page} beyond the mapped region")))
    }

    #[inline]
    pub fn block_meta(&self, block: u64) -> Result<&BlockMeta> {
        self.blocks
            .get(block as usize)
            .ok_or_else(|| self.corrupt(format!("block {block} beyond the mapped region")))
    }

    /// Takes a page's version lock.
    pub fn lock_page(&self, block: u64, page: u32) -> Result<PageGuard<'_>> {
        let lock = self.page_lock(block, page)?;
        let mut round = 0;
        loop {
            let v = lock.load(Ordering::Relaxed);
            if v & 1 == 0
                && lock
                    .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                // Order the odd version before any byte written under the lock.
                fence(Ordering::Release);
                return Ok(PageGuard { lock });
            }
            backoff(&mut round);
        }
    }

    /// Locks pages `first..=last` of `block` in ascending order.
    pub fn lock_pages(&self, block: u64, first: u32, last: u32) -> Result<PageRun<'_>> {
        let mut run = PageRun {
            inner: self,
            block,
            first,
            held: 0,
        };
        for p in first..=last {
            // On error the pages locked so far are released by the run's drop.
            std::mem::forget(self.lock_page(block, p)?);
            run.held += 1;
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

    /// Reads the key stored at `off` into `buf` (without the page lock: record bytes are
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

    /// Sequence number of the record at `off`.
    pub fn seq_at(&self, off: RecordOffset) -> Result<u64> {
        match self.geo.layout {
            RecordLayout::Fixed { .. } => self.region.read_u64(self.slot_pos(off)),
            RecordLayout::Variable => self.region.read_u64(self.var_pos(off) + 8),
        }
    }

    /// Large head in block `b`: (key length, value length, seq).
    pub fn large_lengths(&self, b: u64) -> Result<(usize, usize, u64)> {
        let base = self.geo.block_offset(b);
        let mut hdr = [0u8; 32];
        self.region.read(base, &mut hdr)?;
        let u32_at = |i: usize| u32::from_le_bytes([hdr[i], hdr[i + 1], hdr[i + 2], hdr[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&hdr[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let klen = u32_at(4) as usize;
        let vlen = u64_at(16);
        if klen == 0 || klen > layout::MAX_VAR_KEY || vlen > layout::MAX_LARGE_VALUE as u64 {
            return Err(self.corrupt(format!("large record in block {b} has impossible lengths")));
        }
        Ok((klen, vlen as usize, u64_at(8)))
    }

    /// Maps a logical offset inside a large record (0 = head block start) to a region offset
    /// and the bytes available before the next block boundary.
    fn large_locate(&self, head: u64, logical: u64) -> (u64, u64) {
        let bs = self.geo.block_size();
        if logical < bs {
            return (self.geo.block_offset(head) + logical, bs - logical);
        }
        let per = bs - var::CONT_PREFIX;
        let rest = logical - bs;
        let i = rest / per;
        let within = rest % per;
        (
            self.geo.block_offset(head + 1 + i) + var::CONT_PREFIX + within,
            per - within,
        )
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
            let (at, avail) = self.large_locate(head, from + done as u64);
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
                let lock = self.page_lock(off.block(), off.page())?;
                let v1 = lock.load(Ordering::Acquire);
                if v1 & 1 == 1 {
                    return Ok(ReadOutcome::Retry);
                }
                let slot = self.slot_pos(off);
                scratch.resize(k, 0);
                self.region.read(slot + layout::SLOT_KEY, scratch)?;
                value.resize(v, 0);
                self.region.read(slot + layout::slot_value(k), value)?;
                fence(Ordering::Acquire);
                if lock.load(Ordering::Relaxed) != v1 {
                    return Ok(ReadOutcome::Retry);
                }
                Ok(if scratch.as_slice() == key {
                    ReadOutcome::Found
                } else {
                    ReadOutcome::NotThisKey
                })
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
        let head_lock = self.page_lock(b, first)?;
        let v1 = head_lock.load(Ordering::Acquire);
        if v1 & 1 == 1 {
            return Ok(ReadOutcome::Retry);
        }
        let pos = self.var_pos(off);
        let word = self.region.atomic_u32(pos)?.load(Ordering::Acquire);
        if word & var::VALID == 0 {
            // Being deleted or replaced: the index entry is on its way out.
            return Ok(if head_lock.load(Ordering::Acquire) == v1 {
                ReadOutcome::NotThisKey
            } else {
                ReadOutcome::Retry
            });
        }
        if word & var::LARGE != 0 {
            if word & var::CONT != 0 || off.page() != 0 || off.pos() != 0 {
                return Err(self.corrupt(format!("index points into a large record at {off}")));
            }
            let (klen, vlen, _) = self.large_lengths(b)?;
            scratch.resize(klen, 0);
            self.read_large(b, var::LARGE_HEADER, scratch)?;
            if scratch.as_slice() != key {
                return Ok(ReadOutcome::NotThisKey);
            }
            value.resize(vlen, 0);
            self.read_large(b, var::LARGE_HEADER + klen as u64, value)?;
            fence(Ordering::Acquire);
            return Ok(if head_lock.load(Ordering::Relaxed) == v1 {
                ReadOutcome::Found
            } else {
                ReadOutcome::Retry
            });
        }
        let Some((klen, vlen)) = var::inline_lengths(word) else {
            return Err(self.corrupt(format!("bad record header at {off}")));
        };
        let start = (pos - self.geo.block_offset(b)) + var::INLINE_HEADER;
        let end_page = ((start + (klen + vlen) as u64).saturating_sub(1) / layout::PAGE) as u32;
        // Versions of the other pages the record spans.
        let mut others = [(0u32, 0u32); layout::MAX_PAGES_PER_BLOCK as usize];
        let mut n_others = 0;
        for p in first + 1..=end_page.max(first) {
            let l = self.page_lock(b, p)?;
            let v = l.load(Ordering::Acquire);
            if v & 1 == 1 {
                return Ok(ReadOutcome::Retry);
            }
            if let Some(slot) = others.get_mut(n_others) {
                *slot = (p, v);
                n_others += 1;
            }
        }
        scratch.resize(klen, 0);
        self.region.read(pos + var::INLINE_HEADER, scratch)?;
        let is_key = scratch.as_slice() == key;
        if is_key {
            value.resize(vlen, 0);
            self.region
                .read(pos + var::INLINE_HEADER + klen as u64, value)?;
        }
        fence(Ordering::Acquire);
        if head_lock.load(Ordering::Relaxed) != v1 {
            return Ok(ReadOutcome::Retry);
        }
        for &(p, v) in others.iter().take(n_others) {
            if self.page_lock(b, p)?.load(Ordering::Relaxed) != v {
                return Ok(ReadOutcome::Retry);
            }
        }
        Ok(if is_key {
            ReadOutcome::Found
        } else {
            ReadOutcome::NotThisKey
        })
    }

    /// Point lookup. Lock-free: retries while a writer holds the record's page.
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

    /// Finds the offset of `key`'s current record.
    pub fn locate(&self, key: &[u8], scratch: &mut Vec<u8>) -> Option<RecordOffset> {
        let kw = self.key_word(key);
        let mut found = None;
        self.index.find(kw, &mut |o| {
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

    // ----- invalidation and delete ----------------------------------------------------------

    /// Marks the record at `off` invalid on media and persists that (atomic; does not wait for
    /// the page lock). Frees a large record's blocks. Returns whether it was valid.
    pub fn invalidate(&self, off: RecordOffset) -> Result<bool> {
        match self.geo.layout {
            RecordLayout::Fixed { .. } => {
                let (word, bit) = self.bit_of(off);
                let prev = self
                    .region
                    .atomic_u64(word)?
                    .fetch_and(!bit, Ordering::AcqRel);
                self.region.persist(word, 8)?;
                if prev & bit != 0 {
                    self.block_meta(off.block())?
                        .live
                        .fetch_sub(1, Ordering::Relaxed);
                }
                Ok(prev & bit != 0)
            }
            RecordLayout::Variable => {
                let pos = self.var_pos(off);
                let w = self.region.atomic_u32(pos)?;
                let prev = w.fetch_and(!var::VALID, Ordering::AcqRel);
                self.region.persist(pos, 4)?;
                if prev & var::VALID == 0 {
                    return Ok(false);
                }
                if prev & var::LARGE != 0 {
                    self.free_large(off.block())?;
                } else if let Some((k, v)) = var::inline_lengths(prev) {
                    self.block_meta(off.block())?
                        .live
                        .fetch_sub(var::inline_size(k, v), Ordering::Relaxed);
                }
                Ok(true)
            }
        }
    }

    /// Returns a (now invalid) large record's blocks to the free queue, after moving the head
    /// page's version on by two (parity kept, so it works whether or not the caller holds that
    /// lock) so that a reader still copying the record notices and retries.
    fn free_large(&self, head: u64) -> Result<()> {
        self.page_lock(head, 0)?.fetch_add(2, Ordering::AcqRel);
        let span = u64::from(self.block_meta(head)?.span.load(Ordering::Acquire)).max(1);
        for b in head..head + span {
            let m = self.block_meta(b)?;
            m.live.store(0, Ordering::Relaxed);
            m.tail.store(0, Ordering::Relaxed);
            m.span.store(0, Ordering::Relaxed);
            m.state.store(FREE, Ordering::Release);
            self.free_blocks.push(b);
        }
        Ok(())
    }

    /// Deletes `key`. Viper's order: lock the record's page, check it is still the indexed
    /// copy, invalidate and persist, remove the index entry, unlock.
    pub fn delete(&self, key: &[u8], scratch: &mut Vec<u8>) -> Result<bool> {
        self.check_key(key)?;
        let kw = self.key_word(key);
        let mut round = 0;
        loop {
            let Some(off) = self.locate(key, scratch) else {
                self.metrics.deletes.incr();
                return Ok(false);
            };
            let guard = self.lock_page(off.block(), off.page())?;
            if !self.indexed_at(key, off) || !self.holds_key(off, key, scratch) {
                drop(guard);
                backoff(&mut round);
                continue;
            }
            self.invalidate(off)?;
            self.index.remove_exact(kw, off.0);
            drop(guard);
            self.metrics.deletes.incr();
            return Ok(true);
        }
    }

    // ----- blocks ---------------------------------------------------------------------------

    /// Makes sure at least `blocks` blocks are mapped, growing the region by whole chunks.
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
            reason,
        };
        if !self.allow_growth {
            return Err(full("growth is disabled".into()));
        }
        if blocks > RecordOffset::MAX_BLOCK {
            return Err(full("block ids exhausted".into()));
        }
        let chunk = u64::from(self.geo.chunk_blocks);
        let target = blocks.div_ceil(chunk) * chunk;
        match self.region.grow(self.geo.region_len_for(target)) {
            Ok(()) => {}
            Err(e @ (Error::RegionLimit { .. } | Error::DeviceFull { .. })) => {
                return Err(full(e.to_string()));
            }
            Err(e) => return Err(e),
        }
        self.add_metas(target)?;
        self.allocated_blocks.store(target, Ordering::Release);
        Ok(())
    }

    /// Appends DRAM metadata up to `blocks` blocks.
    pub fn add_metas(&self, blocks: u64) -> Result<()> {
        while (self.blocks.count() as u64) < blocks {
            self.blocks.push(BlockMeta::default());
        }
        let pages = blocks * u64::from(self.geo.pages_per_block);
        while (self.pages.count() as u64) < pages {
            self.pages.push(AtomicU32::new(0));
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
        let used = self.region.atomic_u64(header::USED_BLOCKS as u64)?;
        used.fetch_max(cur + n, Ordering::AcqRel);
        self.region.persist(header::USED_BLOCKS as u64, 8)?;
        if self.growth_due()
            && let Some(t) = self.grower.lock().as_ref()
        {
            t.unpark();
        }
        Ok(cur)
    }

    /// Whether three quarters of the mapped blocks are in use (Viper grows at a fill degree
    /// too), so the grower should add a chunk before clients run out.
    fn growth_due(&self) -> bool {
        let allocated = self.allocated_blocks.load(Ordering::Acquire);
        self.allow_growth && self.next_block.load(Ordering::Acquire) * 4 >= allocated * 3
    }

    /// A block for a client's inserts: a reclaimed one if available, else a fresh one.
    pub fn acquire_block(&self) -> Result<u64> {
        while let Some(b) = self.free_blocks.pop() {
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

    /// Next record sequence number.
    #[inline]
    pub fn next_seq(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::AcqRel) + 1
    }
}
