//! Per-thread clients: the write path (put, update) in Viper's order.
//!
//! Owns: a client's insert block (never shared with another client, so writers do not contend
//! on pages), the random start page, and the put/update protocols. Must not touch: recovery or
//! reclamation (they reuse [`Client::write_record`] with a given sequence number).
//!
//! Put, in order (each step durable before the next):
//! 1. take the page lock of the client's current page (or pages a variable record spans);
//! 2. write sequence number, key and value into free space, persist;
//! 3. make the record valid (bitset bit / header word), persist — the record is now durable;
//! 4. insert into the DRAM index, which returns the key's previous offset;
//! 5. invalidate the previous record, persist;
//! 6. release the page lock (only now can readers see the new value, which is therefore
//!    already unambiguous on media).

use std::sync::atomic::Ordering;

use super::layout::{self, RecordLayout, RecordOffset, var};
use super::store::{Inner, LARGE, PageRun, backoff};
use crate::error::{Error, Result};

/// Where a suspended client was inserting (its owned block stays owned meanwhile).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ClientState {
    block: Option<u64>,
    page: u32,
    tried: u32,
}

/// A handle for one thread's writes (and reads). Create one per thread with
/// [`super::KvStore::client`]; it owns an insert block until dropped.
pub struct Client<'a> {
    inner: &'a Inner,
    block: Option<u64>,
    page: u32,
    tried: u32,
    rng: u64,
    scratch: Vec<u8>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Client<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("block", &self.block)
            .finish()
    }
}

impl Drop for Client<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            self.inner.release_block(b);
        }
    }
}

impl<'a> Client<'a> {
    pub(crate) fn new(inner: &'a Inner) -> Self {
        // Different clients should start on different pages (different DIMMs of an
        // interleaved set), so seed from a client counter and the clock.
        static CLIENTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CLIENTS.fetch_add(1, Ordering::Relaxed);
        let seed = super::index::mix(crate::device::now_ns() ^ n.rotate_left(32));
        Client {
            inner,
            block: None,
            page: 0,
            tried: 0,
            rng: seed | 1,
            scratch: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// A client continuing where a suspended one stopped (same insert block and page).
    pub(crate) fn resume(inner: &'a Inner, state: ClientState) -> Self {
        let mut c = Client::new(inner);
        c.block = state.block;
        c.page = state.page;
        c.tried = state.tried;
        c
    }

    /// Ends this client without giving up its insert block, to be resumed later.
    pub(crate) fn suspend(mut self) -> ClientState {
        ClientState {
            block: self.block.take(),
            page: self.page,
            tried: self.tried,
        }
    }

    fn random_page(&mut self) -> u32 {
        // xorshift64
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng % u64::from(self.inner.geo.pages_per_block)) as u32
    }

    fn current_block(&mut self) -> Result<u64> {
        if let Some(b) = self.block {
            return Ok(b);
        }
        let b = self.inner.acquire_block()?;
        self.block = Some(b);
        self.page = self.random_page();
        self.tried = 0;
        Ok(b)
    }

    fn seal_block(&mut self) {
        if let Some(b) = self.block.take() {
            self.inner.release_block(b);
        }
    }

    fn check_value(&self, value: &[u8]) -> Result<()> {
        match self.inner.geo.fixed_sizes() {
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

    /// Inserts or replaces `key`. Returns `true` if the key was new. Durable when it returns.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner.check_key(key)?;
        self.check_value(value)?;
        let inner = self.inner;
        let seq = inner.next_seq();
        let (off, guards) = self.write_record(key, value, seq)?;
        let kw = inner.key_word(key);
        let scratch = &mut self.scratch;
        let old = inner.index.upsert(kw, off.0, &mut |o| {
            o != off.0 && inner.holds_key(RecordOffset(o), key, scratch)
        });
        if let Some(old) = old {
            inner.invalidate(RecordOffset(old))?;
        }
        drop(guards);
        inner.metrics.puts.incr();
        Ok(old.is_none())
    }

    /// Replaces the value of an existing key; returns `false` (and writes nothing) if the key
    /// does not exist. Values of at most 8 bytes in a fixed layout are updated atomically in
    /// place; everything else is copy-on-write. Durable when it returns.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner.check_key(key)?;
        self.check_value(value)?;
        let inner = self.inner;
        if let Some((_, vsize)) = inner.geo.fixed_sizes()
            && vsize <= 8
        {
            return self.update_in_place(key, value);
        }
        let Some(mut cur) = inner.locate(key, &mut self.scratch) else {
            inner.metrics.updates.incr();
            return Ok(false);
        };
        let seq = inner.next_seq();
        let (off, guards) = self.write_record(key, value, seq)?;
        let kw = inner.key_word(key);
        loop {
            if inner.index.compare_exchange(kw, cur.0, off.0) {
                inner.invalidate(cur)?;
                drop(guards);
                inner.metrics.updates.incr();
                return Ok(true);
            }
            match inner.locate(key, &mut self.scratch) {
                Some(c) => cur = c,
                None => {
                    // Deleted meanwhile: the update loses; take our copy back.
                    inner.invalidate(off)?;
                    drop(guards);
                    inner.metrics.updates.incr();
                    return Ok(false);
                }
            }
        }
    }

    fn update_in_place(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let inner = self.inner;
        let mut word = [0u8; 8];
        if let Some(dst) = word.get_mut(..value.len()) {
            dst.copy_from_slice(value);
        }
        let word = u64::from_le_bytes(word);
        let mut round = 0;
        loop {
            let Some(off) = inner.locate(key, &mut self.scratch) else {
                inner.metrics.updates.incr();
                return Ok(false);
            };
            let guard = inner.lock_page(off.block(), off.page())?;
            if !inner.indexed_at(key, off) || !inner.holds_key(off, key, &mut self.scratch) {
                drop(guard);
                backoff(&mut round);
                continue;
            }
            let at = inner.slot_pos(off) + layout::slot_value(key.len());
            inner.region.atomic_u64(at)?.store(word, Ordering::Release);
            inner.region.persist(at, 8)?;
            drop(guard);
            inner.metrics.updates.incr();
            inner.metrics.in_place_updates.incr();
            return Ok(true);
        }
    }

    /// Reads `key` into `value`; returns whether it exists.
    pub fn get(&mut self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        self.inner.get(key, value, &mut self.scratch)
    }

    /// Deletes `key`; returns whether it existed. Durable when it returns.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.inner.delete(key, &mut self.scratch)
    }

    /// Writes a new, valid, durable record and returns its offset with its page lock(s) held.
    pub(crate) fn write_record(
        &mut self,
        key: &[u8],
        value: &[u8],
        seq: u64,
    ) -> Result<(RecordOffset, PageRun<'a>)> {
        match self.inner.geo.layout {
            RecordLayout::Fixed { .. } => self.write_fixed(key, value, seq),
            RecordLayout::Variable => {
                let size = var::inline_size(key.len(), value.len());
                if value.len() > layout::MAX_INLINE_VALUE || size > self.inner.geo.block_size() {
                    self.write_large(key, value, seq)
                } else {
                    self.write_inline(key, value, seq, size)
                }
            }
        }
    }

    fn write_fixed(
        &mut self,
        key: &[u8],
        value: &[u8],
        seq: u64,
    ) -> Result<(RecordOffset, PageRun<'a>)> {
        let inner = self.inner;
        let geo = inner.geo;
        loop {
            let b = self.current_block()?;
            let guard = inner.lock_pages(b, self.page, self.page)?;
            let page_off = geo.page_offset(b, self.page);
            let mut free_slot = None;
            for w in 0..geo.bitset_words {
                let bits = inner
                    .region
                    .atomic_u64(page_off + u64::from(w) * 8)?
                    .load(Ordering::Acquire);
                let free = !bits & geo.bitset_mask(w);
                if free != 0 {
                    free_slot = Some(w * 64 + free.trailing_zeros());
                    break;
                }
            }
            let Some(slot) = free_slot else {
                drop(guard);
                self.page = (self.page + 1) % geo.pages_per_block;
                self.tried += 1;
                if self.tried >= geo.pages_per_block {
                    self.seal_block();
                }
                continue;
            };
            let off = RecordOffset::new(b, self.page, slot);
            // Slot: [seq][key, padded][value, padded].
            let buf = &mut self.buf;
            buf.clear();
            buf.extend_from_slice(&seq.to_le_bytes());
            buf.extend_from_slice(key);
            buf.resize(layout::slot_value(key.len()) as usize, 0);
            buf.extend_from_slice(value);
            buf.resize(geo.slot_size as usize, 0);
            let at = inner.slot_pos(off);
            // Regular stores + write-back (clwb): measured faster here than non-temporal
            // stores for 224-byte slots (docs/BENCHMARKS.md).
            inner.region.write(at, buf)?;
            inner.region.persist(at, buf.len())?;
            let (word, bit) = inner.bit_of(off);
            inner
                .region
                .atomic_u64(word)?
                .fetch_or(bit, Ordering::AcqRel);
            inner.region.persist(word, 8)?;
            inner.block_meta(b)?.live.fetch_add(1, Ordering::Relaxed);
            return Ok((off, guard));
        }
    }

    fn write_inline(
        &mut self,
        key: &[u8],
        value: &[u8],
        seq: u64,
        size: u64,
    ) -> Result<(RecordOffset, PageRun<'a>)> {
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
            // Body after the header word: [reserved u32][seq][key][value][zero padding].
            let buf = &mut self.buf;
            buf.clear();
            buf.extend_from_slice(&0u32.to_le_bytes());
            buf.extend_from_slice(&seq.to_le_bytes());
            buf.extend_from_slice(key);
            buf.extend_from_slice(value);
            buf.resize(size as usize - 4, 0);
            inner.region.write(pos + 4, buf)?;
            inner.region.persist(pos + 4, buf.len())?;
            inner
                .region
                .atomic_u32(pos)?
                .store(var::inline_word(key.len(), value.len()), Ordering::Release);
            inner.region.persist(pos, 4)?;
            meta.tail.store((tail + size) as u32, Ordering::Release);
            meta.live.fetch_add(size, Ordering::Relaxed);
            return Ok((inner.var_offset(b, tail), guards));
        }
    }

    fn write_large(
        &mut self,
        key: &[u8],
        value: &[u8],
        seq: u64,
    ) -> Result<(RecordOffset, PageRun<'a>)> {
        let inner = self.inner;
        let geo = inner.geo;
        let n = layout::large_blocks(geo.block_size(), key.len(), value.len());
        let head = inner.take_fresh_blocks(n)?;
        for b in head..head + n {
            inner.block_meta(b)?.state.store(LARGE, Ordering::Release);
        }
        let head_meta = inner.block_meta(head)?;
        head_meta.span.store(n as u32, Ordering::Release);
        head_meta
            .live
            .store(n * geo.block_size(), Ordering::Relaxed);
        let mut hdr = Vec::with_capacity(28);
        hdr.extend_from_slice(&(key.len() as u32).to_le_bytes());
        hdr.extend_from_slice(&seq.to_le_bytes());
        hdr.extend_from_slice(&(value.len() as u64).to_le_bytes());
        hdr.extend_from_slice(&0u64.to_le_bytes());
        inner.write_large(head, 4, &hdr)?;
        inner.write_large(head, var::LARGE_HEADER, key)?;
        inner.write_large(head, var::LARGE_HEADER + key.len() as u64, value)?;
        for i in 1..n {
            let mut prefix = [0u8; 8];
            prefix[..4].copy_from_slice(&var::cont_word(i).to_le_bytes());
            inner.region.write(geo.block_offset(head + i), &prefix)?;
        }
        inner
            .region
            .persist(geo.block_offset(head), (n * geo.block_size()) as usize)?;
        let guard = inner.lock_pages(head, 0, 0)?;
        let pos = geo.block_offset(head);
        inner
            .region
            .atomic_u32(pos)?
            .store(var::VALID | var::LARGE, Ordering::Release);
        inner.region.persist(pos, 4)?;
        inner.metrics.large_records.incr();
        Ok((RecordOffset::new(head, 0, 0), guard))
    }
}
