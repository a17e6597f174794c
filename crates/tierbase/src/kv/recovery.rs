//! Recovery: rebuild the DRAM index and block metadata by scanning the used blocks in parallel.
//!
//! Owns: the scan, the newest-wins resolution of duplicate keys, and the classification of
//! blocks (free, sealed, large). Must not touch: the write path. A clean open and an open after
//! a crash run the same code.
//!
//! Duplicates exist on media only transiently (a put or a compaction move between "new record
//! valid" and "old record invalidated"); the record with the larger sequence number wins —
//! writers of one key take turns, so sequence numbers order a key's versions exactly and never
//! tie (a tie would be a damaged store and is reported as such) — and every loser is
//! invalidated on media so the next recovery does not meet it again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::layout::{RecordOffset, header, var};
use super::store::{FREE, Inner, LARGE, SEALED};
use super::walk::{Entry, Malformed, walk_block};
use crate::error::{Error, Result};

/// What the last open's recovery did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RecoveryReport {
    /// Wall time of the scan and index rebuild.
    pub duration: Duration,
    /// Threads used.
    pub threads: usize,
    /// Blocks scanned.
    pub blocks_scanned: u64,
    /// Valid records found (including duplicates).
    pub records_found: u64,
    /// Duplicate copies resolved (and invalidated on media).
    pub duplicates_resolved: u64,
}

const CHUNK: u64 = 16;

#[derive(Default)]
struct ThreadResult {
    records: u64,
    max_seq: u64,
    losers: Vec<RecordOffset>,
}

/// Scans blocks `0..used` with `threads` threads and fills the index and metadata.
pub(crate) fn recover(inner: &Inner, threads: usize) -> Result<RecoveryReport> {
    let start = Instant::now();
    let used = inner
        .region
        .atomic_u64(header::USED_BLOCKS as u64)?
        .load(Ordering::Acquire);
    let allocated = inner.geo.blocks_in(inner.region.len());
    if used > allocated {
        return Err(inner.corrupt(format!(
            "store header claims {used} used blocks but the region holds only {allocated}"
        )));
    }
    inner.add_metas(allocated)?;
    inner.allocated_blocks.store(allocated, Ordering::Release);
    inner.next_block.store(used, Ordering::Release);

    let threads = threads.clamp(1, (used / CHUNK + 1) as usize);
    let next = AtomicU64::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let results: Vec<ThreadResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut r = ThreadResult::default();
                    let mut key = Vec::new();
                    let mut scratch = Vec::new();
                    let mut batch = Batch::default();
                    loop {
                        let from = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if from >= used || first_error.lock().is_some() {
                            break;
                        }
                        for b in from..(from + CHUNK).min(used) {
                            if let Err(e) = scan_block(
                                inner,
                                b,
                                used,
                                &mut r,
                                &mut batch,
                                &mut key,
                                &mut scratch,
                            ) {
                                first_error.lock().get_or_insert(e);
                                return r;
                            }
                        }
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    if let Some(e) = first_error.into_inner() {
        return Err(e);
    }

    let mut report = RecoveryReport {
        threads,
        blocks_scanned: used,
        ..RecoveryReport::default()
    };
    let mut max_seq = 0;
    let mut losers = Vec::new();
    for r in results {
        report.records_found += r.records;
        max_seq = max_seq.max(r.max_seq);
        losers.extend(r.losers);
    }
    inner.clock.observe(max_seq);

    // Classify blocks before invalidating losers, so a large loser's span is freed once.
    for b in 0..used {
        let m = inner.block_meta(b)?;
        if m.state.load(Ordering::Acquire) == LARGE {
            continue;
        }
        if m.live.load(Ordering::Acquire) == 0 {
            m.tail.store(0, Ordering::Release);
            m.state.store(FREE, Ordering::Release);
            inner.free.free(b, 1);
        } else {
            m.state.store(SEALED, Ordering::Release);
        }
    }
    report.duplicates_resolved = losers.len() as u64;
    for off in losers {
        let done = inner.invalidate(off)?;
        inner.finish_invalidate(done)?;
        let m = inner.block_meta(off.block())?;
        if m.live.load(Ordering::Acquire) == 0
            && m.state
                .compare_exchange(SEALED, FREE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            m.tail.store(0, Ordering::Release);
            inner.free.free(off.block(), 1);
        }
    }
    let live: u64 = (0..used)
        .filter_map(|b| inner.block_meta(b).ok())
        .map(|m| m.live.load(Ordering::Acquire))
        .sum();
    let live_bytes = match inner.geo.layout {
        super::layout::RecordLayout::Fixed { .. } => live * inner.geo.slot_size,
        super::layout::RecordLayout::Variable => live,
    };
    // Counted as written what is live now plus what the loser invalidations counted as freed.
    inner
        .metrics
        .live_bytes_written
        .add(live_bytes + inner.metrics.live_bytes_freed.get());
    report.duration = start.elapsed();
    Ok(report)
}

/// Records found in one block, inserted after their index buckets have been prefetched.
#[derive(Default)]
pub(crate) struct Batch {
    keys: Vec<u8>,
    found: Vec<(u64, RecordOffset, u64, std::ops::Range<usize>)>,
}

impl Batch {
    fn push(&mut self, inner: &Inner, off: RecordOffset, seq: u64, key: &[u8]) {
        let at = self.keys.len();
        self.keys.extend_from_slice(key);
        self.found
            .push((inner.key_word(key), off, seq, at..self.keys.len()));
    }

    /// Inserts everything found: first touch every bucket the batch needs (the misses overlap),
    /// then insert — recovery is bound by DRAM misses in the index, not by the scan.
    fn flush(&mut self, inner: &Inner, r: &mut ThreadResult, scratch: &mut Vec<u8>) -> Result<()> {
        for &(kw, ..) in &self.found {
            inner.index.prefetch(kw);
        }
        for (kw, off, seq, range) in self.found.drain(..) {
            let key = self.keys.get(range).unwrap_or_default();
            insert(inner, key, kw, off, seq, r, scratch)?;
        }
        self.keys.clear();
        Ok(())
    }
}

fn scan_block(
    inner: &Inner,
    b: u64,
    used: u64,
    r: &mut ThreadResult,
    batch: &mut Batch,
    key: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    let geo = inner.geo;
    let bs = geo.block_size();
    let mut live = 0u64;
    let walked = walk_block(&inner.region, &geo, b, used, bs, &mut |entry| {
        match entry {
            Entry::Slot(off) => {
                let seq = valid_seq(inner, off)?;
                inner.read_key_at(off, key)?;
                batch.push(inner, off, seq, key);
                live += 1;
            }
            Entry::Inline {
                off,
                valid: true,
                size,
            } => {
                let seq = valid_seq(inner, off)?;
                inner.read_key_at(off, key)?;
                batch.push(inner, off, seq, key);
                live += size;
            }
            Entry::LargeHead { valid: true, span } => {
                let (klen, _, seq) = inner.large_lengths(b)?;
                key.resize(klen, 0);
                inner.read_large(b, var::LARGE_HEADER, key)?;
                for i in 0..span {
                    inner
                        .block_meta(b + i)?
                        .state
                        .store(LARGE, Ordering::Release);
                }
                let head = inner.block_meta(b)?;
                head.span.store(span as u32, Ordering::Release);
                head.live.store(span * bs, Ordering::Release);
                batch.push(inner, RecordOffset::new(b, 0, 0), seq, key);
            }
            // Deleted records, dead large heads and continuation blocks (claimed by their head,
            // if it is valid) hold nothing to index.
            Entry::Inline { valid: false, .. }
            | Entry::LargeHead { valid: false, .. }
            | Entry::Continuation { .. } => {}
        }
        Ok(())
    })?;
    let tail = walked.map_err(|Malformed(detail)| inner.corrupt(detail))?;
    batch.flush(inner, r, scratch)?;
    let m = inner.block_meta(b)?;
    m.tail.store(tail as u32, Ordering::Release);
    m.live.fetch_add(live, Ordering::AcqRel);
    Ok(())
}

/// The sequence number of a valid record; 0 is never written, so it means damage.
fn valid_seq(inner: &Inner, off: RecordOffset) -> Result<u64> {
    let seq = inner.seq_at(off)?;
    if seq == 0 {
        return Err(inner.corrupt(format!(
            "block {} page {} position {}: valid record with sequence number 0",
            off.block(),
            off.page(),
            off.pos()
        )));
    }
    Ok(seq)
}

/// Inserts a found record, resolving a duplicate key by sequence number.
fn insert(
    inner: &Inner,
    key: &[u8],
    kw: u64,
    off: RecordOffset,
    seq: u64,
    r: &mut ThreadResult,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    r.records += 1;
    r.max_seq = r.max_seq.max(seq);
    loop {
        let existing = inner.index.insert_if_absent(kw, off.0, &mut |o| {
            inner.holds_key(RecordOffset(o), key, scratch)
        });
        let Err(existing) = existing else {
            return Ok(());
        };
        let ex = RecordOffset(existing);
        let ex_seq = inner.seq_at(ex)?;
        if seq == ex_seq {
            return Err(inner.corrupt(format!(
                "two valid copies of one key with sequence number {seq} (at {ex} and {off})"
            )));
        }
        if seq > ex_seq {
            if inner.index.compare_exchange(kw, existing, off.0) {
                r.losers.push(ex);
                return Ok(());
            }
            // Another thread replaced it meanwhile; compare again.
        } else {
            r.losers.push(off);
            return Ok(());
        }
    }
}
