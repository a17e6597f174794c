//! Recovery: rebuild the DRAM index and block metadata by scanning the used blocks in parallel.
//!
//! Owns: the scan, the newest-wins resolution of duplicate keys, and the classification of
//! blocks (free, sealed, large). Must not touch: the write path. A clean open and an open after
//! a crash run the same code.
//!
//! Duplicates exist on media only while a write of their key was in flight (a put or a
//! compaction move between "new record valid" and "old record invalidated"; writers of one key
//! take turns and return only after the invalidation). Either copy is then a correct outcome;
//! recovery keeps the newer version (see [`super::layout::stamp`]; on a tie, the one it met
//! first) and invalidates every loser on media, so the next recovery does not meet it again.
//! The key locks are then seeded past the largest version found, so versions keep growing.
//!
//! Records are written with one persist (see [`super::layout::stamp`]), so a crash may leave a
//! marked record whose bytes did not all reach media: its version is 0 or its check fails. Such
//! a record was never acknowledged; recovery unmarks it. Recovery also zeroes what an
//! unacknowledged write may have left in free space (stamps of unmarked slots, bytes after a
//! log's tail), so that a later torn write over the same space can never pass for a record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::layout::{self, Geometry, RecordLayout, RecordOffset, header, var};
use super::store::{FREE, Inner, LARGE, SEALED};
use super::walk::{
    Claim, Entry, Malformed, claimed_by_large_heads, stamped_free_slots, walk_block,
};
use crate::device::PmemRegion;
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
    /// Records a crash tore (unacknowledged writes), unmarked on media.
    pub torn_records: u64,
    /// The store had been closed cleanly, so no write can have been cut short: records were
    /// not checked against their checks, nor free space cleared (a crash means both are done).
    pub after_clean_close: bool,
    /// Media damage the open found and worked around, one sentence each (also logged as
    /// warnings); `verify` reports the same as problems.
    pub damage: Vec<String>,
}

/// The used-block count an open works with.
pub(crate) struct UsedMark {
    /// Blocks `0..blocks` may hold records; the blocks above have never been written.
    pub blocks: u64,
    /// Why the header's count was not taken as it is (media damage), if it was not.
    pub damage: Option<String>,
}

/// Reads the header's used-block count. A damaged word, or a count below a block that holds
/// data (which no write order produces), is media damage: the count is then worked out from
/// the blocks themselves — one past the last that holds a nonzero byte, as blocks above the
/// count are never written — so that no record is hidden and no block in use is handed out
/// again. A whole count beyond the region is a truncated file: refused.
pub(crate) fn read_used_mark(region: &PmemRegion, geo: &Geometry) -> Result<UsedMark> {
    let mapped = geo.blocks_in(region.len());
    let word = region
        .atomic_u64(header::USED_BLOCKS as u64)?
        .load(Ordering::Acquire);
    // A word written before the complement was (zero high half) has nothing to check it by.
    let checked = word >> 32 != 0;
    let damage = match layout::used_from_word(word) {
        Some(used) if used > mapped && checked => {
            return Err(Error::corrupt(
                region.path(),
                format!(
                    "store header claims {used} used blocks but the region holds only {mapped}"
                ),
            ));
        }
        Some(used) if used == mapped || (used < mapped && block_is_empty(region, geo, used)?) => {
            return Ok(UsedMark {
                blocks: used,
                damage: None,
            });
        }
        Some(used) if used > mapped => format!(
            "the header's used-block count {used} (written without its complement) is beyond \
             the region's {mapped} blocks"
        ),
        Some(used) => {
            format!("the header's used-block count {used} is below block {used}, which holds data")
        }
        None => {
            format!("the header's used-block word {word:#018x} is damaged (its halves disagree)")
        }
    };
    let mut blocks = mapped;
    while blocks > 0 && block_is_empty(region, geo, blocks - 1)? {
        blocks -= 1;
    }
    Ok(UsedMark {
        blocks,
        damage: Some(format!(
            "{damage}: media damage; taken as {blocks}, one past the last block holding data"
        )),
    })
}

/// Whether every byte of block `b` is zero (never written).
fn block_is_empty(region: &PmemRegion, geo: &Geometry, b: u64) -> Result<bool> {
    let mut buf = vec![0u8; geo.block_size() as usize];
    region.read(geo.block_offset(b), &mut buf)?;
    Ok(buf.iter().all(|&x| x == 0))
}

const CHUNK: u64 = 16;

#[derive(Default)]
struct ThreadResult {
    records: u64,
    torn: u64,
    damage: Vec<String>,
    max_version: u32,
    losers: Vec<RecordOffset>,
}

/// Scans blocks `0..used` with `threads` threads and fills the index and metadata. `clean`:
/// the store was closed cleanly (no torn record can exist; see [`RecoveryReport`]).
/// `mark`: what [`read_used_mark`] found.
pub(crate) fn recover(
    inner: &Inner,
    threads: usize,
    clean: bool,
    mark: &UsedMark,
) -> Result<RecoveryReport> {
    let start = Instant::now();
    let used = mark.blocks;
    let allocated = inner.geo.blocks_in(inner.region.len());
    inner.add_metas(allocated)?;
    inner.allocated_blocks.store(allocated, Ordering::Release);
    inner.next_block.store(used, Ordering::Release);

    let threads = threads.clamp(1, (used / CHUNK + 1) as usize);
    // Blocks of valid large records, claimed before any block is walked (a damaged marker
    // made such a block look like free space, which a walk after a crash zeroed).
    let claimed = claimed_by_large_heads(&inner.region, &inner.geo, used, threads)?;
    let next = AtomicU64::new(0);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let results: Vec<ThreadResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut w = Scanner::default();
                    loop {
                        let from = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if from >= used || first_error.lock().is_some() {
                            break;
                        }
                        for b in from..(from + CHUNK).min(used) {
                            let scanned = match claimed.get(&b) {
                                Some(&claim) => claimed_block(inner, b, claim, &mut w),
                                None => scan_block(inner, b, used, !clean, &claimed, &mut w),
                            };
                            if let Err(e) = scanned {
                                first_error.lock().get_or_insert(e);
                                return w.result;
                            }
                        }
                    }
                    w.result
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
        after_clean_close: clean,
        damage: mark.damage.iter().cloned().collect(),
        ..RecoveryReport::default()
    };
    let mut losers = Vec::new();
    let mut max_version = 0;
    for r in results {
        report.records_found += r.records;
        report.torn_records += r.torn;
        report.damage.extend(r.damage);
        max_version = max_version.max(r.max_version);
        losers.extend(r.losers);
    }
    inner.key_locks.seed(max_version);

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
    // Under a deferring level those invalidations were deferred: make them durable before any
    // write (a delete of the winner, a reuse of a freed block) can reach media ahead of them.
    inner.region.sync_deferred()?;
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
    found: Vec<(u64, RecordOffset, u32, std::ops::Range<usize>)>,
}

impl Batch {
    fn push(&mut self, inner: &Inner, off: RecordOffset, version: u32, key: &[u8]) {
        let at = self.keys.len();
        self.keys.extend_from_slice(key);
        self.found
            .push((inner.key_word(key), off, version, at..self.keys.len()));
    }

    /// Inserts everything found: first touch every bucket the batch needs (the misses overlap),
    /// then insert — recovery is bound by DRAM misses in the index, not by the scan.
    fn flush(&mut self, inner: &Inner, r: &mut ThreadResult, scratch: &mut Vec<u8>) -> Result<()> {
        for &(kw, ..) in &self.found {
            inner.index.prefetch(kw);
        }
        for (kw, off, version, range) in self.found.drain(..) {
            let key = self.keys.get(range).unwrap_or_default();
            insert(inner, key, kw, off, version, r, scratch)?;
        }
        self.keys.clear();
        Ok(())
    }
}

/// One recovery thread's result so far and the buffers it reuses from block to block.
#[derive(Default)]
struct Scanner {
    result: ThreadResult,
    batch: Batch,
    key: Vec<u8>,
    scratch: Vec<u8>,
}

/// Block `b`, claimed by a valid large record: the record's, whatever its first word says.
/// A first word other than its continuation marker is media damage, reported; the record's
/// check covers its payload, and reads go by it.
fn claimed_block(inner: &Inner, b: u64, claim: Claim, w: &mut Scanner) -> Result<()> {
    if !claim.marked {
        let Claim {
            head, distance: i, ..
        } = claim;
        let word = inner
            .region
            .atomic_u32(inner.geo.block_offset(b))?
            .load(Ordering::Acquire);
        w.result.damage.push(format!(
            "block {b}: block {i} of the large record at block {head}, but its first word reads \
             {word:#010x}, not that record's marker: media damage; the block is kept as the \
             record's (its check covers the value)"
        ));
    }
    inner.block_meta(b)?.tail.store(0, Ordering::Release);
    Ok(())
}

/// Walks block `b` and indexes what it holds; `claimed`: the blocks of valid large records
/// ([`claimed_by_large_heads`]).
fn scan_block(
    inner: &Inner,
    b: u64,
    used: u64,
    check: bool,
    claimed: &HashMap<u64, Claim>,
    w: &mut Scanner,
) -> Result<()> {
    let Scanner {
        result: r,
        batch,
        key,
        scratch,
    } = w;
    let geo = inner.geo;
    let bs = geo.block_size();
    let mut live = 0u64;
    let mut torn = Vec::new();
    // Part of a large record (head or continuation, whatever another thread has classified
    // so far): its bytes are the record's, not free space.
    let mut large = false;
    // Where the last whole inline entry ends: a read-only open of a block whose log is
    // damaged reads up to there.
    let mut parsed_to = 0u64;
    let walked = walk_block(&inner.region, &geo, b, used, bs, &mut |entry| {
        // An inline record (fixed slot or variable log entry): what it adds to the block's
        // live count (records or bytes), if it is whole.
        let inline = match entry {
            Entry::Slot(off) => Some((off, 1)),
            Entry::Inline {
                off,
                valid: true,
                size,
            } => Some((off, size)),
            _ => None,
        };
        if let Entry::Inline { off, size, .. } = entry {
            parsed_to = u64::from(off.page()) * layout::PAGE + u64::from(off.pos()) + size;
        }
        if let Some((off, weight)) = inline {
            // `scratch` is free while the walk runs (the batch uses it after).
            if check && !inner.record_is_whole(off, scratch)? {
                torn.push(off);
                return Ok(());
            }
            let version = inner.version_at(off)?;
            inner.read_key_at(off, key)?;
            batch.push(inner, off, version, key);
            live += weight;
            return Ok(());
        }
        match entry {
            Entry::LargeHead { valid: true, span } => {
                large = true;
                // The blocks the record holds: those claimed for it (lengths that damage
                // made larger reach blocks of other records, which are not the record's).
                let claims = |i: &u64| {
                    claimed
                        .get(&(b + i))
                        .is_some_and(|c| (c.head, c.distance) == (b, *i))
                };
                let span = 1 + (1..span).take_while(claims).count() as u64;
                let (klen, _, version) = inner.large_lengths(b)?;
                if version == 0 {
                    return Err(
                        inner.corrupt(format!("block {b}: valid large record with version 0"))
                    );
                }
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
                batch.push(inner, RecordOffset::new(b, 0, 0), version, key);
            }
            // Deleted records, dead large heads and continuation blocks (claimed by their head,
            // if it is valid) hold nothing to index.
            Entry::LargeHead { valid: false, .. } | Entry::Continuation { .. } => large = true,
            // Deleted inline records hold nothing; live ones were taken above.
            Entry::Slot(_) | Entry::Inline { .. } => {}
        }
        Ok(())
    })?;
    let (tail, damaged) = match walked {
        Ok(tail) => (tail, false),
        // Media damage (no write order produces it). A read-only open reads the block's
        // records before it and reports the rest as lost to it; a read-write open is refused,
        // so that no write lands on the damaged block before someone looks at it.
        Err(Malformed(detail)) if inner.region.is_read_only() => {
            let before = match geo.layout {
                RecordLayout::Variable => format!(" (up to byte {parsed_to})"),
                RecordLayout::Fixed { .. } => String::new(),
            };
            r.damage.push(format!(
                "{detail}: media damage; this read-only open reads the block's records before \
                 it{before}, not those after it"
            ));
            (parsed_to, true)
        }
        Err(Malformed(detail)) => {
            return Err(inner.corrupt(format!(
                "{detail}: media damage. A read-only open (`tierbase kv get` or `scan`, \
                 `tierbase serve --read-only`) reads the other records; a read-write open is \
                 refused so that no write lands on the damaged block"
            )));
        }
    };
    r.torn += torn.len() as u64;
    for off in torn {
        inner.discard_torn(off)?;
    }
    // Every layout, in-place fixed ones too: their free slots' stamps are zero after a clean
    // close as well (`verify` reports one that is not), though no check relies on it there.
    if check && !large && !damaged {
        clear_free_space(inner, b, tail)?;
    }
    batch.flush(inner, r, scratch)?;
    let m = inner.block_meta(b)?;
    m.tail.store(tail as u32, Ordering::Release);
    m.live.fetch_add(live, Ordering::AcqRel);
    Ok(())
}

/// Zeroes, durably, what an unacknowledged write may have left in block `b`'s free space: the
/// stamps of unmarked fixed slots, the bytes after a variable log's `tail`.
fn clear_free_space(inner: &Inner, b: u64, tail: u64) -> Result<()> {
    let geo = inner.geo;
    match geo.layout {
        RecordLayout::Fixed { .. } => {
            let mut dirty = Vec::new();
            stamped_free_slots(&inner.region, &geo, b, &mut |at, _, _| {
                inner
                    .region
                    .atomic_u64(at + layout::SLOT_STAMP)?
                    .store(0, Ordering::Release);
                dirty.push((at + layout::SLOT_STAMP, 8));
                Ok(())
            })?;
            if !dirty.is_empty() {
                inner.region.persist_all(&dirty)?;
            }
        }
        RecordLayout::Variable => {
            let start = geo.block_offset(b) + tail;
            let len = (geo.block_size() - tail) as usize;
            let mut rest = vec![0u8; len];
            inner.region.read(start, &mut rest)?;
            if rest.iter().any(|&x| x != 0) {
                rest.fill(0);
                inner.region.write_nt_persist(start, &rest)?;
            }
        }
    }
    Ok(())
}

/// Inserts a found record, resolving a duplicate key by sequence number.
fn insert(
    inner: &Inner,
    key: &[u8],
    kw: u64,
    off: RecordOffset,
    version: u32,
    r: &mut ThreadResult,
    scratch: &mut Vec<u8>,
) -> Result<()> {
    r.records += 1;
    r.max_version = r.max_version.max(version);
    loop {
        let existing = inner.index.insert_if_absent(kw, off.0, &mut |o| {
            inner.holds_key(RecordOffset(o), key, scratch)
        });
        let Err(existing) = existing else {
            return Ok(());
        };
        let ex = RecordOffset(existing);
        let ex_version = inner.version_at(ex)?;
        if super::layout::stamp::newer(version, ex_version) {
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
