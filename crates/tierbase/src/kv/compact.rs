//! Space reclamation: sealed blocks whose free share passed a threshold are recycled (fixed
//! layout: queued for inserts to fill their free slots in place, as Viper does — no record
//! moves) or compacted (variable layout, and on request: live records moved out, the emptied
//! block handed to the free set).
//!
//! Owns: choosing victims, moving their live records, the background reclaimer's body, and
//! writers' help when dead space outweighs live space. Must not touch: owned blocks (a client
//! is inserting there) or large-record blocks (they are freed as a whole when their record
//! goes).
//!
//! Moving a record is a write of its key like any other: under the key's lock, the record is
//! rewritten into another block with a newer version, the index entry is switched from the
//! original to the copy, and the original is invalidated. A crash at any point leaves the
//! original, or both (same bytes: either is right; recovery keeps one), or the copy.
//! A compaction that fails part-way puts its block back as sealed, so a later round retries it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::client::Writer;
use super::layout::{self, RecordLayout, RecordOffset, var};
use super::store::{COMPACTING, FREE, Inner, PARTIAL, SEALED};
use super::walk::{Entry, Malformed, walk_block};
use crate::error::Result;
use crate::sync::Ticker;

/// Background reclamation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ReclaimOptions {
    /// Compact a sealed block once this share of it is free (0..1). Viper's default: 0.4.
    /// After a write was refused for want of room, one round goes down to
    /// 5 % free.
    pub free_threshold: f64,
    /// How often the reclaimer looks for victims (it is also woken when dead space outweighs
    /// live space).
    pub interval: Duration,
}

impl Default for ReclaimOptions {
    fn default() -> Self {
        ReclaimOptions {
            free_threshold: 0.4,
            interval: Duration::from_millis(200),
        }
    }
}

/// The threshold of a round run because a write found the store full (it may not grow) while
/// deleted records hold at least a block: blocks this free are reclaimed too, so that deletes
/// spread thinly over every block (a third of the keys, each block a third free) still make
/// room. Before, only blocks past the usual threshold (40 %) were, and such a store refused
/// writes for good.
pub(crate) const FULL_FREE_THRESHOLD: f64 = 0.05;

/// Free share of a sealed block, or `None` if it is not a candidate.
fn free_share(inner: &Inner, b: u64) -> Option<f64> {
    let m = inner.block_meta(b).ok()?;
    if m.state.load(Ordering::Acquire) != SEALED {
        return None;
    }
    let live = m.live.load(Ordering::Acquire) as f64;
    let capacity = match inner.geo.layout {
        RecordLayout::Fixed { .. } => {
            f64::from(inner.geo.slots) * f64::from(inner.geo.pages_per_block)
        }
        RecordLayout::Variable => inner.geo.block_size() as f64,
    };
    Some(1.0 - live / capacity)
}

/// Sealed blocks whose free share is at least `threshold`, emptiest first.
pub(crate) fn candidates(inner: &Inner, threshold: f64) -> Vec<u64> {
    let used = inner.next_block.load(Ordering::Acquire);
    let mut v: Vec<(u64, f64)> = (0..used)
        .filter_map(|b| free_share(inner, b).map(|f| (b, f)))
        .filter(|&(_, f)| f >= threshold)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.into_iter().map(|(b, _)| b).collect()
}

/// Puts a block being compacted back to sealed unless compaction finished with it.
struct CompactingBlock<'a> {
    inner: &'a Inner,
    block: u64,
    done: bool,
}

impl Drop for CompactingBlock<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Ok(m) = self.inner.block_meta(self.block)
        {
            let _ =
                m.state
                    .compare_exchange(COMPACTING, SEALED, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// Compacts block `b`, copying through `writer`. Returns records moved, or `None` if the block
/// was not sealed (owned, free, or being compacted by someone else) or an iteration is running.
pub(crate) fn compact_block(
    inner: &Inner,
    b: u64,
    writer: &mut Writer<'_>,
    wait_for_keys: bool,
) -> Result<Option<u64>> {
    let Some(_gate) = inner.compaction_gate.try_write() else {
        return Ok(None);
    };
    let meta = inner.block_meta(b)?;
    if meta
        .state
        .compare_exchange(SEALED, COMPACTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(None);
    }
    let mut claim = CompactingBlock {
        inner,
        block: b,
        done: false,
    };
    writer.set_compacting(true);
    let moved = move_records(inner, b, writer, wait_for_keys);
    writer.set_compacting(false);
    let moved = inner.fail_on_error(moved)?;
    if meta.live.load(Ordering::Acquire) != 0 {
        // Something still valid that was not indexed: leave the block sealed.
        return Ok(Some(moved));
    }
    // Readers still holding an old offset into this block retry (reuse also latches pages).
    for p in 0..inner.geo.pages_per_block {
        inner.page_latch(b, p)?.invalidate_readers();
    }
    meta.tail.store(0, Ordering::Release);
    meta.state.store(FREE, Ordering::Release);
    claim.done = true;
    inner.free.free(b, 1);
    inner.metrics.compactions.incr();
    inner.metrics.records_moved.add(moved);
    Ok(Some(moved))
}

/// Moves the live records of `b`. `wait_for_keys`: take each key's lock even if a writer holds
/// it; otherwise skip records whose key is busy (the background reclaimer, which writers may
/// wait for, must never wait for them).
fn move_records(
    inner: &Inner,
    b: u64,
    writer: &mut Writer<'_>,
    wait_for_keys: bool,
) -> Result<u64> {
    let (mut key, mut value, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
    let mut moved = 0;
    for off in live_records(inner, b)? {
        if !inner.read_key_at(off, &mut key)? {
            continue;
        }
        let kw = inner.key_word(&key);
        let key_lock = if wait_for_keys {
            inner.lock_key(kw)
        } else {
            match inner.try_lock_key(kw) {
                Some(g) => g,
                None => continue,
            }
        };
        // Deleted or replaced since the walk: nothing to move (its writer invalidated it).
        if !inner.indexed_at(&key, off) || !inner.holds_key(off, &key, &mut scratch) {
            continue;
        }
        read_record_locked(inner, off, &key, &mut value)?;
        let copy = writer.write_record(&key, &value, key_lock.version())?;
        if !inner.index.compare_exchange(kw, off.0, copy.0) {
            return Err(inner.corrupt(format!(
                "index entry at {off} changed while its key was locked"
            )));
        }
        // As a replacing put: invalidated at once after a sync, or under a deferring level
        // retired until the next sync (one sync for the whole block, below).
        inner.retire(kw, off)?;
        moved += 1;
    }
    if moved > 0 && inner.region.defers_persists() {
        // The copies on media, then the originals' invalidations written (they count live
        // until then, so the block is freed only once they are).
        inner.sync()?;
    }
    Ok(moved)
}

/// Offsets of the valid records in block `b` (a compacting block: nobody inserts there).
fn live_records(inner: &Inner, b: u64) -> Result<Vec<RecordOffset>> {
    let mut out = Vec::new();
    let used = inner.next_block.load(Ordering::Acquire);
    let tail = u64::from(inner.block_meta(b)?.tail.load(Ordering::Acquire));
    let limit = match inner.geo.layout {
        RecordLayout::Fixed { .. } => inner.geo.block_size(),
        RecordLayout::Variable => tail,
    };
    let walked = walk_block(&inner.region, &inner.geo, b, used, limit, &mut |e| {
        match e {
            Entry::Slot(off)
            | Entry::Inline {
                off, valid: true, ..
            } => out.push(off),
            _ => {}
        }
        Ok(())
    })?;
    walked.map_err(|Malformed(detail)| inner.corrupt(detail))?;
    Ok(out)
}

/// Reads the value of the record at `off` holding `key` (the caller holds the key's lock, so
/// the record cannot change).
fn read_record_locked(
    inner: &Inner,
    off: RecordOffset,
    key: &[u8],
    value: &mut Vec<u8>,
) -> Result<()> {
    match inner.geo.fixed_sizes() {
        Some((k, v)) => {
            value.resize(v, 0);
            inner
                .region
                .read(inner.slot_pos(off) + layout::slot_value(k), value)?;
        }
        None => {
            let pos = inner.var_pos(off);
            let word = inner.region.atomic_u32(pos)?.load(Ordering::Acquire);
            let (_, v) = var::inline_lengths(word)
                .ok_or_else(|| inner.corrupt(format!("bad record header at {off}")))?;
            value.resize(v, 0);
            inner
                .region
                .read(pos + var::INLINE_HEADER + key.len() as u64, value)?;
        }
    }
    Ok(())
}

/// Compacts every candidate block once, copying live records through `writer` (keep one
/// client across rounds, so that its partly filled block is not itself a victim next time).
/// Returns (blocks compacted, records moved).
pub(crate) fn compact_all(
    inner: &Inner,
    threshold: f64,
    writer: &mut Writer<'_>,
    wait_for_keys: bool,
) -> Result<(u64, u64)> {
    inner.check_writable()?;
    let mut blocks = 0;
    let mut moved = 0;
    for b in candidates(inner, threshold) {
        if let Some(m) = compact_block(inner, b, writer, wait_for_keys)? {
            blocks += 1;
            moved += m;
        }
    }
    Ok((blocks, moved))
}

/// Reclaims candidate block `b` the cheapest way: an empty block is freed (compaction with
/// nothing to move); in the fixed layout a partly free one is queued for inserts to fill in
/// place; otherwise it is compacted. Returns whether the block was reclaimed.
fn reclaim_block(
    inner: &Inner,
    b: u64,
    writer: &mut Writer<'_>,
    wait_for_keys: bool,
) -> Result<bool> {
    let meta = inner.block_meta(b)?;
    let fixed = inner.geo.fixed_sizes().is_some();
    if fixed && meta.live.load(Ordering::Acquire) > 0 {
        if meta
            .state
            .compare_exchange(SEALED, PARTIAL, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(false);
        }
        inner.partial.push(b);
        inner.metrics.blocks_recycled.incr();
        return Ok(true);
    }
    Ok(compact_block(inner, b, writer, wait_for_keys)?.is_some())
}

/// One reclamation pass over every candidate (see [`reclaim_block`]). Returns blocks
/// reclaimed.
pub(crate) fn reclaim_all(
    inner: &Inner,
    threshold: f64,
    writer: &mut Writer<'_>,
    wait_for_keys: bool,
) -> Result<u64> {
    inner.check_writable()?;
    let mut n = 0;
    for b in candidates(inner, threshold) {
        n += u64::from(reclaim_block(inner, b, writer, wait_for_keys)?);
    }
    Ok(n)
}

/// A writer's help: compact the emptiest candidate, if any. Errors make the store read-only
/// (inside `compact_block`) and surface on the writer's own write.
pub(crate) fn help(inner: &Inner, writer: &mut Writer<'_>) {
    if inner.check_writable().is_err() {
        return;
    }
    let threshold = inner.reclaim.as_ref().map_or(0.4, |r| r.free_threshold);
    if let Some(&b) = candidates(inner, threshold).first() {
        if let Ok(true) = reclaim_block(inner, b, writer, true) {
            inner.metrics.helped_compactions.incr();
        }
        inner.note_space_use();
    } else {
        // Nothing to compact: the pressure was a false alarm (e.g. owned blocks).
        inner.space_pressure.store(false, Ordering::Release);
    }
}

/// The reclaimer's body: every `interval` (or when woken), compact the candidates, through one
/// client kept for the thread's lifetime.
pub(crate) fn reclaim_loop(inner: &std::sync::Arc<Inner>, ticker: &Ticker, opts: &ReclaimOptions) {
    let mut client = super::client::Client::for_reclaimer(inner.clone());
    while ticker.next() {
        let full = inner.full_pressure.swap(false, Ordering::AcqRel);
        let threshold = if full {
            opts.free_threshold.min(FULL_FREE_THRESHOLD)
        } else {
            opts.free_threshold
        };
        // A round for a full store waits for busy keys: a victim left half-moved (a record
        // skipped) would keep the block its records went to and free none, and with the last
        // block gone no later round could move anything. Every other round skips them.
        if inner.check_writable().is_ok()
            && let Err(e) = reclaim_all(inner, threshold, &mut client.writer(), full)
        {
            tracing::error!("kv reclamation failed: {e}");
            inner.metrics.reclaim_errors.incr();
        }
        inner.reclaim_round_done();
    }
    inner.reclaim_round_done();
}
