//! Space reclamation: compact sealed blocks whose free share passed a threshold, and hand the
//! emptied blocks to the free-block queue.
//!
//! Owns: choosing victims, moving their live records, and the background reclaimer thread.
//! Must not touch: owned blocks (a client is inserting there) or large-record blocks (they are
//! freed as a whole when their record goes).
//!
//! Moving a record: with all pages of the victim locked (readers of it wait), each live record is
//! rewritten through a client into another block *with its original sequence number*, the index
//! entry is switched with a compare-and-swap, and the old copy is invalidated. If the CAS fails
//! (a concurrent put or delete got there first), the copy is invalidated instead. A crash at any
//! point leaves either one copy, or two identical copies with the same sequence number.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::background::Ticker;
use super::client::Client;
use super::layout::{self, RecordLayout, RecordOffset, var};
use super::store::{COMPACTING, FREE, Inner, SEALED};
use super::walk::{Entry, Malformed, walk_block};
use crate::error::Result;

/// Background reclamation settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ReclaimOptions {
    /// Compact a sealed block once this share of it is free (0..1). Viper's default: 0.4.
    pub free_threshold: f64,
    /// How often the reclaimer looks for victims.
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

/// Compacts block `b` using `client` for the copies. Returns records moved, or `None` if the
/// block was not sealed (owned, free, or being compacted by someone else).
pub(crate) fn compact_block(inner: &Inner, b: u64, client: &mut Client<'_>) -> Result<Option<u64>> {
    let _gate = inner.compaction_gate.write();
    let meta = inner.block_meta(b)?;
    if meta
        .state
        .compare_exchange(SEALED, COMPACTING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return Ok(None);
    }
    let guards = inner.lock_pages(b, 0, inner.geo.pages_per_block - 1)?;
    let mut key = Vec::new();
    let mut value = Vec::new();
    let mut moved = 0;
    for off in live_records(inner, b)? {
        let seq = inner.seq_at(off)?;
        read_record_locked(inner, off, &mut key, &mut value)?;
        let (copy, copy_guards) = client.write_record(&key, &value, seq)?;
        if inner
            .index
            .compare_exchange(inner.key_word(&key), off.0, copy.0)
        {
            moved += 1;
        } else {
            inner.invalidate(copy)?;
        }
        drop(copy_guards);
        inner.invalidate(off)?;
    }
    meta.live.store(0, Ordering::Release);
    meta.tail.store(0, Ordering::Release);
    drop(guards);
    meta.state.store(FREE, Ordering::Release);
    inner.free_blocks.push(b);
    inner.metrics.compactions.incr();
    inner.metrics.records_moved.add(moved);
    Ok(Some(moved))
}

/// Offsets of the valid records in block `b` (caller holds its page locks).
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

fn read_record_locked(
    inner: &Inner,
    off: RecordOffset,
    key: &mut Vec<u8>,
    value: &mut Vec<u8>,
) -> Result<()> {
    match inner.geo.fixed_sizes() {
        Some((k, v)) => {
            let slot = inner.slot_pos(off);
            key.resize(k, 0);
            inner.region.read(slot + layout::SLOT_KEY, key)?;
            value.resize(v, 0);
            inner.region.read(slot + layout::slot_value(k), value)?;
        }
        None => {
            let pos = inner.var_pos(off);
            let word = inner.region.atomic_u32(pos)?.load(Ordering::Acquire);
            let (k, v) = var::inline_lengths(word)
                .ok_or_else(|| inner.corrupt(format!("bad record header at {off}")))?;
            key.resize(k, 0);
            inner.region.read(pos + var::INLINE_HEADER, key)?;
            value.resize(v, 0);
            inner
                .region
                .read(pos + var::INLINE_HEADER + k as u64, value)?;
        }
    }
    Ok(())
}

/// Compacts every candidate block once, copying live records through `client` (keep one
/// client across rounds, so that its partly filled block is not itself a victim next time).
/// Returns (blocks compacted, records moved).
pub(crate) fn compact_all(
    inner: &Inner,
    threshold: f64,
    client: &mut Client<'_>,
) -> Result<(u64, u64)> {
    let mut blocks = 0;
    let mut moved = 0;
    for b in candidates(inner, threshold) {
        if let Some(m) = compact_block(inner, b, client)? {
            blocks += 1;
            moved += m;
        }
    }
    Ok((blocks, moved))
}

/// The reclaimer's body: every `interval`, compact the candidates, through one client kept
/// for the thread's lifetime.
pub(crate) fn reclaim_loop(inner: &Inner, ticker: &Ticker, opts: &ReclaimOptions) {
    let mut client = Client::new(inner);
    while ticker.next() {
        if let Err(e) = compact_all(inner, opts.free_threshold, &mut client) {
            tracing::error!("kv reclamation failed: {e}");
            inner.metrics.reclaim_errors.incr();
        }
    }
}
