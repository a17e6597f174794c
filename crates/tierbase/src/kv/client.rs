//! Per-thread clients: the write path (put, update) in Viper's order.
//!
//! Owns: a client's insert block (never shared with another client, so writers do not contend
//! on pages), the random start page, and the put/update protocols. Must not touch: recovery or
//! reclamation (compaction reuses [`Client::write_record`]).
//!
//! Put, in order, holding the key's lock throughout (its version is the record's version, see
//! [`layout::stamp`]):
//! 1. start loading the key's index buckets (the miss overlaps step 2);
//! 2. latch the client's current page (or the pages a variable record spans) and write the
//!    record into free space together with its validity marker (bitset bit / header word) and
//!    its check, then persist it all with **one** fence — a record whose bytes did not all reach
//!    media fails its check and recovery drops it (it was never acknowledged). Stores whose
//!    fixed values are updated in place (at most 8 bytes) keep the older order instead: record
//!    persisted, then the marker persisted;
//! 3. point the DRAM index at the new record, learning the previous one — the new value is
//!    visible from here, and durable already;
//! 4. invalidate the previous record (marker cleared, stamp zeroed, one persist), then return.
//!    A crash before this leaves two valid copies of an unacknowledged write; recovery keeps
//!    one (the newer version), and either is a correct outcome.
//!
//! Under a deferring durability level (`Eventual`, `None` on a disk file) the persist of
//! step 2 waits for the next sync, and step 4 waits too: the previous record is *retired*
//! (still valid on media) and the next sync, once the new record is on media, writes its
//! invalidation (see `Inner::retire`): a power loss must never find the old record's
//! invalidation on media without the new record.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::layout::{self, RecordLayout, RecordOffset, stamp, var};
use super::store::{Inner, LARGE};
use crate::error::Result;
use crate::store::Change;

/// A handle for one thread's writes (and reads). Create one per thread with
/// [`super::KvStore::client`]; it owns an insert block until dropped. `'static` and `Send`:
/// keep it in a thread-local, a pool or an async task.
pub struct Client {
    inner: Arc<Inner>,
    state: ClientState,
}

/// A client's insert position and buffers.
#[derive(Debug)]
pub(crate) struct ClientState {
    block: Option<u64>,
    page: u32,
    tried: u32,
    rng: u64,
    scratch: Vec<u8>,
    buf: Vec<u8>,
    /// The reclaimer's own client never waits for the reclaimer.
    may_wait: bool,
    /// Moving records for compaction: may take the last block (see `Inner::acquire_block`).
    compacting: bool,
}

/// A client's state with the store borrowed (not cloned: a shared `Arc` count bumped on every
/// write would be one more cache line all writers fight over).
pub(crate) struct Writer<'a> {
    inner: &'a Inner,
    st: &'a mut ClientState,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("block", &self.state.block)
            .finish()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.writer().seal_block();
    }
}

impl Client {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        // Different clients should start on different pages (different DIMMs of an
        // interleaved set), so seed from a client counter and the clock.
        static CLIENTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CLIENTS.fetch_add(1, Ordering::Relaxed);
        let seed = super::index::mix(crate::device::now_ns() ^ n.rotate_left(32));
        Client {
            inner,
            state: ClientState {
                block: None,
                page: 0,
                tried: 0,
                rng: seed | 1,
                scratch: Vec::new(),
                buf: Vec::new(),
                may_wait: true,
                compacting: false,
            },
        }
    }

    /// A client for the reclaimer itself (it must never wait for its own rounds).
    pub(crate) fn for_reclaimer(inner: Arc<Inner>) -> Self {
        let mut c = Client::new(inner);
        c.state.may_wait = false;
        c
    }

    pub(crate) fn writer(&mut self) -> Writer<'_> {
        Writer {
            inner: &self.inner,
            st: &mut self.state,
        }
    }

    /// Before a write: if dead space outweighs live space, compact one block first (writers
    /// help the reclaimer instead of growing the file).
    fn help_reclaim(&mut self) {
        if self.inner.space_pressure.load(Ordering::Acquire) {
            let inner = self.inner.clone();
            super::compact::help(&inner, &mut self.writer());
        }
    }

    /// Inserts or replaces `key`. Returns `true` if the key was new. Durable when it returns
    /// (in the region's durability mode).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.help_reclaim();
        self.writer().put(key, value)
    }

    /// Replaces the value of an existing key; returns `false` (and writes nothing) if the key
    /// does not exist. In a fixed layout with values of at most 8 bytes the value is updated
    /// atomically in place; everything else (every variable-layout value) is copy-on-write.
    /// Durable when it returns.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.help_reclaim();
        self.writer().update(key, value)
    }

    /// Reads `key` and applies what `decide` returns (keep, put a value, delete) while
    /// holding the key's lock, so no other write of `key` comes between the read and the
    /// write: the base of atomic read-modify-write (counters, appends, conditional puts).
    /// `decide` runs exactly once; it should be quick (writers of keys sharing the lock's
    /// stripe wait for it), and must not write to this store (a key of the same stripe
    /// would wait for the lock `decide` runs under, forever). Durable when it returns, like
    /// [`Client::put`].
    pub fn modify(
        &mut self,
        key: &[u8],
        decide: &mut dyn FnMut(Option<&[u8]>) -> Change,
    ) -> Result<()> {
        self.help_reclaim();
        self.writer().modify(key, decide)
    }

    /// Reads `key` into `value`; returns whether it exists (reuses `value`'s allocation).
    pub fn get_into(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        self.inner.get(key, value, &mut self.state.scratch)
    }

    /// Reads a batch of keys: `values[i]` receives key `i`'s value (reusing its allocation;
    /// cleared when absent) and `found[i]` whether it exists. The keys' cache misses overlap,
    /// so a batch of scattered keys reads faster than one get after another (1.7× at one
    /// thread in docs/BENCHMARKS.md, Figure 5);
    /// each key is read as [`Client::get_into`] reads it (the batch is not a snapshot).
    pub fn get_many(
        &mut self,
        keys: &[&[u8]],
        values: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<()> {
        self.inner
            .get_many(keys, values, found, &mut self.state.scratch)
    }

    /// Reads `key`'s value.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// Deletes `key`; returns whether it existed. Durable when it returns.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.inner.delete(key, &mut self.state.scratch)
    }
}

impl Writer<'_> {
    fn random_page(&mut self) -> u32 {
        // xorshift64
        self.st.rng ^= self.st.rng << 13;
        self.st.rng ^= self.st.rng >> 7;
        self.st.rng ^= self.st.rng << 17;
        (self.st.rng % u64::from(self.inner.geo.pages_per_block)) as u32
    }

    fn current_block(&mut self) -> Result<u64> {
        if let Some(b) = self.st.block {
            return Ok(b);
        }
        let b = self
            .inner
            .acquire_block(self.st.may_wait, self.st.compacting)?;
        self.st.block = Some(b);
        self.st.page = self.random_page();
        self.st.tried = 0;
        Ok(b)
    }

    /// Marks the writes that follow as compaction's record moves (or ends that).
    pub(crate) fn set_compacting(&mut self, compacting: bool) {
        self.st.compacting = compacting;
    }

    /// Gives up the insert block (it becomes a compaction candidate).
    pub(crate) fn seal_block(&mut self) {
        if let Some(b) = self.st.block.take() {
            self.inner.release_block(b);
        }
    }

    /// Inserts or replaces `key`. Returns `true` if the key was new. Durable when it returns
    /// (in the region's durability mode).
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner.check_record(key, value)?;
        self.inner.check_writable()?;
        let inner = self.inner;
        let kw = inner.key_word(key);
        // The index buckets' misses overlap the record's write and persist.
        inner.index.prefetch(kw);
        let key_lock = inner.lock_key(kw);
        let result = self.put_locked(key, value, kw, key_lock.version());
        drop(key_lock);
        let result = inner.fail_on_error(result)?;
        self.sync_if_retired_over_limit()?;
        Ok(result)
    }

    /// Syncs (with no key lock held) when too many replaced records wait for their
    /// invalidation (see [`Inner::retire`]).
    fn sync_if_retired_over_limit(&self) -> Result<()> {
        if self.inner.retired_over_limit() {
            self.inner.fail_on_error(self.inner.sync())?;
        }
        Ok(())
    }

    fn put_locked(&mut self, key: &[u8], value: &[u8], kw: u64, version: u32) -> Result<bool> {
        let inner = self.inner;
        let off = self.write_record(key, value, version)?;
        let scratch = &mut self.st.scratch;
        let old = inner.index.upsert(kw, off.0, &mut |o| {
            o != off.0 && {
                inner.prefetch_invalidation(RecordOffset(o));
                inner.holds_key(RecordOffset(o), key, scratch)
            }
        });
        if let Some(old) = old {
            // The new record reaches media before the old one's invalidation can.
            inner.retire(kw, RecordOffset(old))?;
        }
        inner.metrics.puts.incr();
        Ok(old.is_none())
    }

    /// See [`Client::modify`].
    pub(crate) fn modify(
        &mut self,
        key: &[u8],
        decide: &mut dyn FnMut(Option<&[u8]>) -> Change,
    ) -> Result<()> {
        self.inner.check_key(key)?;
        self.inner.check_writable()?;
        let inner = self.inner;
        let kw = inner.key_word(key);
        let key_lock = inner.lock_key(kw);
        // Writers of this key wait for the lock, so the value read is the one replaced.
        let mut current = Vec::new();
        let found = inner.get(key, &mut current, &mut self.st.scratch)?;
        let outcome = match decide(found.then_some(current.as_slice())) {
            Change::Keep => return Ok(()),
            Change::Put(value) => {
                self.inner.check_value(&value)?;
                let result = self.put_locked(key, &value, kw, key_lock.version());
                inner.fail_on_error(result).map(drop)
            }
            Change::Delete => {
                let result = inner.delete_locked(key, kw, &mut self.st.scratch);
                inner.metrics.deletes.incr();
                inner.fail_on_error(result).map(drop)
            }
        };
        drop(key_lock);
        outcome?;
        self.sync_if_retired_over_limit()
    }

    /// Replaces the value of an existing key; returns `false` (and writes nothing) if the key
    /// does not exist. In a fixed layout with values of at most 8 bytes the value is updated
    /// atomically in place; everything else (every variable-layout value) is copy-on-write.
    /// Durable when it returns.
    pub(crate) fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner.check_record(key, value)?;
        self.inner.check_writable()?;
        let inner = self.inner;
        let kw = inner.key_word(key);
        // The index buckets' miss overlaps the key lock's (and, for a copy, the record's
        // write), as in `put`.
        inner.index.prefetch(kw);
        let key_lock = inner.lock_key(kw);
        let result = match inner.geo.fixed_sizes() {
            Some((_, vsize)) if vsize <= 8 => self.update_in_place(key, value),
            _ => self.update_copy(key, value, kw, key_lock.version()),
        };
        drop(key_lock);
        inner.metrics.updates.incr();
        let result = inner.fail_on_error(result)?;
        self.sync_if_retired_over_limit()?;
        Ok(result)
    }

    fn update_copy(&mut self, key: &[u8], value: &[u8], kw: u64, version: u32) -> Result<bool> {
        let inner = self.inner;
        let Some(cur) = inner.locate_to_replace(key, &mut self.st.scratch) else {
            return Ok(false);
        };
        let off = self.write_record(key, value, version)?;
        if !inner.index.compare_exchange(kw, cur.0, off.0) {
            return Err(inner.corrupt(format!(
                "index entry of a key at {cur} changed while its key was locked"
            )));
        }
        inner.retire(kw, cur)?;
        Ok(true)
    }

    fn update_in_place(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let inner = self.inner;
        let mut word = [0u8; 8];
        if let Some(dst) = word.get_mut(..value.len()) {
            dst.copy_from_slice(value);
        }
        let word = u64::from_le_bytes(word);
        let Some(off) = inner.locate(key, &mut self.st.scratch) else {
            return Ok(false);
        };
        // The page latch makes optimistic readers of the page retry, so none sees a value
        // whose persist is still under way.
        let page = inner.lock_page(off.block(), off.page())?;
        let at = inner.slot_pos(off) + layout::slot_value(key.len());
        inner.region.atomic_u64(at)?.store(word, Ordering::Release);
        inner.region.persist(at, 8)?;
        drop(page);
        inner.metrics.in_place_updates.incr();
        Ok(true)
    }

    /// Writes a new, valid, durable record with `version` and returns its offset. The caller
    /// holds the key's lock and points the index at the record.
    pub(crate) fn write_record(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: u32,
    ) -> Result<RecordOffset> {
        match self.inner.geo.layout {
            RecordLayout::Fixed { .. } => self.write_fixed(key, value, version),
            RecordLayout::Variable => {
                let size = var::inline_size(key.len(), value.len());
                if value.len() > layout::MAX_INLINE_VALUE || size > self.inner.geo.block_size() {
                    self.write_large(key, value, version)
                } else {
                    self.write_inline(key, value, version, size)
                }
            }
        }
    }

    fn write_fixed(&mut self, key: &[u8], value: &[u8], version: u32) -> Result<RecordOffset> {
        let inner = self.inner;
        let geo = inner.geo;
        loop {
            let b = self.current_block()?;
            let guard = inner.lock_page(b, self.st.page)?;
            let Some(slot) = self.first_free_slot(b, self.st.page)? else {
                drop(guard);
                self.st.page = (self.st.page + 1) % geo.pages_per_block;
                self.st.tried += 1;
                if self.st.tried >= geo.pages_per_block {
                    self.seal_block();
                }
                continue;
            };
            let off = RecordOffset::new(b, self.st.page, slot);
            let at = inner.slot_pos(off);
            let (word, bit) = inner.bit_of(off);
            let bits = inner.region.atomic_u64(word)?;
            let len = geo.slot_size as usize;
            if inner.self_validating {
                // Marker first (a locked instruction orders like a fence: done while nothing
                // is in flight), then the bytes, then one persist of both (see layout::stamp).
                bits.fetch_or(bit, Ordering::AcqRel);
                self.write_slot(at, key, value, version, true)?;
                inner.persist_ack(&[(at, len), (word, 8)])?;
            } else {
                self.write_slot(at, key, value, version, false)?;
                inner.region.persist(at, len)?;
                bits.fetch_or(bit, Ordering::AcqRel);
                inner.region.persist(word, 8)?;
            }
            inner.block_meta(b)?.live.fetch_add(1, Ordering::Relaxed);
            inner.metrics.live_bytes_written.add(geo.slot_size);
            self.prefetch_next_slot(b, self.st.page);
            drop(guard);
            return Ok(off);
        }
    }

    /// Starts loading the lines of the first free slot of page `page` of block `b`: this
    /// writer's next record most likely goes there (no other writer inserts into the page,
    /// though an invalidation may free an earlier slot meanwhile). Their misses then overlap
    /// the next operation's lookups instead of adding to its persist, which waits for every
    /// line it writes back (docs/BENCHMARKS.md, Figure 26). A hint: the record is written by
    /// now, so nothing here may fail the write.
    fn prefetch_next_slot(&self, b: u64, page: u32) {
        let geo = self.inner.geo;
        if let Ok(Some(slot)) = self.first_free_slot(b, page) {
            let at = geo.slot_offset(b, page, slot);
            self.inner.region.prefetch(at, geo.slot_size as usize);
        }
    }

    /// Fixed layout: the first free slot of page `page` of block `b` by its bitset.
    fn first_free_slot(&self, b: u64, page: u32) -> Result<Option<u32>> {
        let geo = self.inner.geo;
        let page_off = geo.page_offset(b, page);
        for w in 0..geo.bitset_words {
            let bits = self
                .inner
                .region
                .atomic_u64(page_off + u64::from(w) * 8)?
                .load(Ordering::Acquire);
            let free = !bits & geo.bitset_mask(w);
            if free != 0 {
                return Ok(Some(w * 64 + free.trailing_zeros()));
            }
        }
        Ok(None)
    }

    /// Slot bytes: `[check u32][version u32][key, zero-padded][value, zero-padded]`, the check
    /// computed if `checked` (else 0), no persist.
    fn write_slot(
        &mut self,
        at: u64,
        key: &[u8],
        value: &[u8],
        version: u32,
        checked: bool,
    ) -> Result<()> {
        let geo = self.inner.geo;
        let buf = &mut self.st.buf;
        buf.clear();
        buf.extend_from_slice(&stamp::pack(version, 0).to_le_bytes());
        buf.extend_from_slice(key);
        buf.resize(layout::slot_value(key.len()) as usize, 0);
        buf.extend_from_slice(value);
        buf.resize(geo.slot_size as usize, 0);
        if checked {
            stamp::seal(buf);
        }
        self.inner.region.write(at, buf)
    }

    fn write_inline(
        &mut self,
        key: &[u8],
        value: &[u8],
        version: u32,
        size: u64,
    ) -> Result<RecordOffset> {
        let inner = self.inner;
        let geo = inner.geo;
        loop {
            let b = self.current_block()?;
            let meta = inner.block_meta(b)?;
            let tail = u64::from(meta.tail.load(Ordering::Acquire));
            if tail + size > geo.block_size() {
                self.seal_block();
                continue;
            }
            let first = (tail / layout::PAGE) as u32;
            let last = ((tail + size - 1) / layout::PAGE) as u32;
            let guards = inner.lock_pages(b, first, last)?;
            let pos = geo.block_offset(b) + tail;
            // Body after the header word: [check u32][version u64][key][value][zero padding];
            // the check covers version, key and value.
            let buf = &mut self.st.buf;
            buf.clear();
            buf.extend_from_slice(&0u32.to_le_bytes());
            buf.extend_from_slice(&u64::from(version).to_le_bytes());
            buf.extend_from_slice(key);
            buf.extend_from_slice(value);
            stamp::seal(buf);
            buf.resize(size as usize - 4, 0);
            inner.region.write(pos + 4, buf)?;
            // Header word with the body, one persist: a crash that tears the record leaves a
            // check that fails (the space after the log tail is zero; see layout::stamp).
            inner
                .region
                .atomic_u32(pos)?
                .store(var::inline_word(key.len(), value.len()), Ordering::Release);
            inner.persist_ack(&[(pos, size as usize)])?;
            meta.tail.store((tail + size) as u32, Ordering::Release);
            meta.live.fetch_add(size, Ordering::Relaxed);
            inner.metrics.live_bytes_written.add(size);
            drop(guards);
            return Ok(inner.var_offset(b, tail));
        }
    }

    /// A large record over `n` blocks, taken from a freed run when one fits. Order: (1) the
    /// first word of every block becomes a continuation marker, durably — so that a crash
    /// mid-write leaves blocks recovery skips, whatever they held before; (2) header, key,
    /// value and continuation prefixes, persisted; (3) the head's first word becomes "valid
    /// large head", persisted.
    fn write_large(&mut self, key: &[u8], value: &[u8], version: u32) -> Result<RecordOffset> {
        let inner = self.inner;
        let geo = inner.geo;
        let n = layout::large_blocks(geo.block_size(), key.len(), value.len());
        let head = inner.acquire_run(n, self.st.may_wait)?;
        for b in head..head + n {
            inner.block_meta(b)?.state.store(LARGE, Ordering::Release);
            let at = geo.block_offset(b);
            inner
                .region
                .atomic_u32(at)?
                .store(var::cont_word(b - head), Ordering::Release);
            inner.region.flush(at, 4)?;
        }
        inner.region.drain();
        let head_meta = inner.block_meta(head)?;
        head_meta.span.store(n as u32, Ordering::Release);
        head_meta
            .live
            .store(n * geo.block_size(), Ordering::Relaxed);
        let mut hdr = Vec::with_capacity(28);
        hdr.extend_from_slice(&(key.len() as u32).to_le_bytes());
        hdr.extend_from_slice(&u64::from(version).to_le_bytes());
        hdr.extend_from_slice(&(value.len() as u64).to_le_bytes());
        let check = var::large_check(&hdr, key, value);
        hdr.extend_from_slice(&check.to_le_bytes());
        hdr.extend_from_slice(&var::LARGE_CHECK_MARK.to_le_bytes());
        inner.write_large(head, 4, &hdr)?;
        inner.write_large(head, var::LARGE_HEADER, key)?;
        inner.write_large(head, var::LARGE_HEADER + key.len() as u64, value)?;
        for i in 1..n {
            inner
                .region
                .write(geo.block_offset(head + i) + 4, &0u32.to_le_bytes())?;
        }
        inner
            .region
            .persist(geo.block_offset(head), (n * geo.block_size()) as usize)?;
        let guard = inner.lock_page(head, 0)?;
        let pos = geo.block_offset(head);
        inner
            .region
            .atomic_u32(pos)?
            .store(var::VALID | var::LARGE, Ordering::Release);
        inner.region.persist(pos, 4)?;
        drop(guard);
        inner.metrics.large_records.incr();
        inner.metrics.live_bytes_written.add(n * geo.block_size());
        Ok(RecordOffset::new(head, 0, 0))
    }
}
