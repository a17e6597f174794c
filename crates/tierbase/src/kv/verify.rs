//! Offline verification (`tierbase kv verify`) and the record walk used by iteration.
//!
//! Owns: checking a store file against its format without changing a byte. Must not touch:
//! recovery (verify never builds the index, never invalidates duplicates).

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::layout::{self, Geometry, HEADER_LEN, RecordOffset, header};
use super::store::{FREE, Inner, LARGE};
use super::walk::{
    Entry, Malformed, claimed_by_large_heads, large_record_is_whole, record_is_whole,
    stamped_free_slots, walk_block,
};
use crate::device::{PmemRegion, RegionOptions};
use crate::error::Result;

/// Offsets of the records in block `b` that may be live (for iteration; lock-free).
pub(crate) fn candidate_offsets(inner: &Inner, b: u64) -> Result<Vec<RecordOffset>> {
    let m = inner.block_meta(b)?;
    let state = m.state.load(Ordering::Acquire);
    if state == FREE {
        return Ok(Vec::new());
    }
    if state == LARGE {
        let is_head = m.span.load(Ordering::Acquire) > 0;
        return Ok(if is_head {
            vec![RecordOffset::new(b, 0, 0)]
        } else {
            Vec::new()
        });
    }
    let used = inner.next_block.load(Ordering::Acquire);
    let limit = if inner.geo.fixed_sizes().is_some() {
        inner.geo.block_size()
    } else {
        u64::from(m.tail.load(Ordering::Acquire))
    };
    let mut out = Vec::new();
    let walked = walk_block(&inner.region, &inner.geo, b, used, limit, &mut |e| {
        if let Entry::Slot(off)
        | Entry::Inline {
            off, valid: true, ..
        } = e
        {
            out.push(off);
        }
        Ok(())
    })?;
    match walked {
        Ok(_) => Ok(out),
        // A read-only open met this damage and reported it (`RecoveryReport::damage`): it
        // reads the records before it, as recovery indexed them. (A variable block's walk
        // stops short of its damage anyway: its tail is where recovery stopped.)
        Err(Malformed(_)) if inner.region.is_read_only() => Ok(out),
        // Anywhere else (a read-write open refuses a damaged block) it is corruption.
        Err(Malformed(d)) => Err(inner.corrupt(d)),
    }
}

/// What `verify` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// The record layout from the header.
    pub layout: Option<layout::RecordLayout>,
    /// Blocks checked (the used-block high-water mark).
    pub blocks_checked: u64,
    /// Valid records.
    pub valid_records: u64,
    /// Deleted (invalid) records still occupying space.
    pub deleted_records: u64,
    /// Keys with more than one valid copy (legal only transiently: recovery keeps the newest).
    pub duplicate_keys: u64,
    /// Marked records that fail their check: after a crash, writes it tore (unacknowledged;
    /// legal: the next open unmarks them); after a clean close, media damage (a problem).
    pub torn_records: u64,
    /// Whether the store's last close was clean (no write was in flight): a record failing
    /// its check is then damage, which an open keeps (checking no record), not a torn write
    /// it drops.
    pub closed_cleanly: bool,
    /// Format violations (media corruption or a bug); empty means the store is well-formed.
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

const MAX_PROBLEMS: usize = 1000;

/// Checks the store file at `path` page by page and record by record against the format,
/// changing nothing. Errors only if the file cannot be read at all (missing, not a region);
/// everything wrong inside it is listed in the report.
pub fn verify(path: &Path) -> Result<VerifyReport> {
    // Reserve no room to grow, and open read-only: verify only reads what is there (also on a
    // read-only mount; other read-only opens may run beside it).
    let opts = RegionOptions {
        reserve: 0,
        read_only: true,
        ..RegionOptions::default()
    };
    let region = PmemRegion::open(path, &opts)?;
    verify_region(&region)
}

/// [`verify`] on an open region (for example a crash-simulated image).
pub fn verify_region(region: &PmemRegion) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    if region.len() < HEADER_LEN {
        report.problems.push(format!(
            "region of {} bytes has no room for a store header",
            region.len()
        ));
        return Ok(report);
    }
    let mut hdr = [0u8; HEADER_LEN as usize];
    region.read(0, &mut hdr)?;
    let geo = match super::decode_header(&hdr, region.path(), 1 << 30) {
        Ok(g) => g,
        Err(e) => {
            report.problems.push(e.to_string());
            return Ok(report);
        }
    };
    report.layout = Some(geo.layout);
    // Bytes the format keeps zero (an open ignores them).
    let stray = (header::CRC + 4..header::USED_BLOCKS)
        .chain(header::CLEAN + 8..HEADER_LEN as usize)
        .filter(|&i| hdr.get(i).is_some_and(|&b| b != 0))
        .count();
    if stray > 0 {
        report.problems.push(format!(
            "{stray} header bytes the format keeps zero are not (bytes 44..48, 64..4096): media damage"
        ));
    }
    let mark = match super::recovery::read_used_mark(region, &geo) {
        Ok(m) => m,
        Err(e) => {
            report.problems.push(e.to_string());
            return Ok(report);
        }
    };
    // A damaged count is worked out from the blocks, as an open does; the rest is checked.
    report.problems.extend(mark.damage);
    let used = mark.blocks;
    report.blocks_checked = used;
    let torn_at = check_blocks(region, &geo, used, &mut report)?;
    // A record that fails its check is a write a crash cut short — unless the store was
    // closed cleanly, when no write was in flight: then it is damage (a flipped bit in a
    // record the store would otherwise serve as it is, as a clean open checks no record).
    let clean = region.read_u64(header::CLEAN as u64)? == layout::CLEAN_MARK;
    report.closed_cleanly = clean;
    if clean && geo.fixed_sizes().is_some() {
        check_free_slots(region, &geo, used, &mut report)?;
    }
    if clean && report.torn_records > 0 {
        report.problems.push(format!(
            "{} records fail their check although the store was closed cleanly (no write was \
             cut short): media damage",
            report.torn_records
        ));
        for off in torn_at {
            if report.problems.len() < MAX_PROBLEMS {
                report.problems.push(format!(
                    "block {} page {} {} {}: the record fails its check: media damage",
                    off.block(),
                    off.page(),
                    if geo.fixed_sizes().is_some() {
                        "slot"
                    } else {
                        "byte"
                    },
                    off.pos()
                ));
            }
        }
    }
    Ok(report)
}

/// After a clean close a free fixed slot's stamp is zero (an invalidation zeroes it before it
/// clears the slot's bit; an insert sets the bit before its stamp is durable): a free slot
/// with a stamp is media damage — a bitset bit lost (a record the store no longer sees) or a
/// stamp changed.
fn check_free_slots(
    region: &PmemRegion,
    geo: &Geometry,
    used: u64,
    report: &mut VerifyReport,
) -> Result<()> {
    let (mut found, mut first) = (0u64, None);
    for b in 0..used {
        stamped_free_slots(region, geo, b, &mut |_, p, s| {
            found += 1;
            first.get_or_insert((b, p, s));
            Ok(())
        })?;
    }
    if let Some((b, p, s)) = first {
        report.problems.push(format!(
            "{found} free slots hold a record stamp although the store was closed cleanly \
             (the first: block {b} page {p} slot {s}): media damage — a page's bitset lost the \
             slot's bit (a record the store no longer sees) or the stamp changed"
        ));
    }
    Ok(())
}

fn check_blocks(
    region: &PmemRegion,
    geo: &Geometry,
    used: u64,
    report: &mut VerifyReport,
) -> Result<Vec<RecordOffset>> {
    // Where the records failing their check are (the first MAX_PROBLEMS), to name them.
    let mut torn_at = Vec::new();
    // Fingerprint -> valid copies, to find duplicate keys without holding every key in memory.
    let mut copies: HashMap<u64, u32> = HashMap::new();
    let mut continuations = Vec::new();
    // The blocks valid large records claim, found as recovery finds them: such a block is
    // the record's whatever it reads as, and is not walked as a log of its own.
    let claimed = claimed_by_large_heads(region, geo, used, 1)?;
    let (mut key, mut value) = (Vec::new(), Vec::new());
    for b in 0..used {
        if let Some(claim) = claimed.get(&b) {
            // Marked before the head became valid: any other first word is damage (the
            // value's check covers the bytes after each marker, not the marker).
            let (head, i) = (claim.head, claim.distance);
            if !claim.marked && report.problems.len() < MAX_PROBLEMS {
                report.problems.push(format!(
                    "block {b}: not marked as block {i} of the large record at block {head}: \
                     media damage"
                ));
            }
            continue;
        }
        let mut problems = Vec::new();
        let walked = walk_block(region, geo, b, used, geo.block_size(), &mut |e| {
            match e {
                Entry::Slot(off) => {
                    if !record_is_whole(region, geo, off, &mut value)? {
                        report.torn_records += 1;
                        if torn_at.len() < MAX_PROBLEMS {
                            torn_at.push(off);
                        }
                        return Ok(());
                    }
                    if let Some((k, _)) = geo.fixed_sizes() {
                        let slot = geo.slot_offset(off.block(), off.page(), off.pos());
                        key.resize(k, 0);
                        region.read(slot + layout::SLOT_KEY, &mut key)?;
                        *copies.entry(xxhash_rust::xxh3::xxh3_64(&key)).or_default() += 1;
                    }
                    report.valid_records += 1;
                }
                Entry::Inline { off, valid, .. } => {
                    if !valid {
                        report.deleted_records += 1;
                        return Ok(());
                    }
                    if !record_is_whole(region, geo, off, &mut value)? {
                        report.torn_records += 1;
                        if torn_at.len() < MAX_PROBLEMS {
                            torn_at.push(off);
                        }
                        return Ok(());
                    }
                    let pos = geo.page_offset(off.block(), off.page()) + u64::from(off.pos());
                    let word = region.atomic_u32(pos)?.load(Ordering::Acquire);
                    if let Some((k, _)) = layout::var::inline_lengths(word) {
                        key.resize(k, 0);
                        region.read(pos + layout::var::INLINE_HEADER, &mut key)?;
                        *copies.entry(xxhash_rust::xxh3::xxh3_64(&key)).or_default() += 1;
                    }
                    report.valid_records += 1;
                }
                Entry::LargeHead { valid, .. } => {
                    if valid {
                        report.valid_records += 1;
                        if !large_record_is_whole(region, geo, b)? {
                            problems.push(format!(
                                "block {b}: the large record fails its check: media damage"
                            ));
                        }
                    } else {
                        report.deleted_records += 1;
                    }
                }
                Entry::Continuation { distance } => continuations.push((b, distance)),
            }
            Ok(())
        })?;
        if let Err(Malformed(detail)) = walked {
            problems.push(detail);
        }
        for p in problems {
            if report.problems.len() < MAX_PROBLEMS {
                report.problems.push(p);
            }
        }
    }
    for &(b, distance) in &continuations {
        // Orphan continuation blocks are legal (a crash before the head became valid; distance
        // 0 marks a head still being written), but a continuation never points before block 0.
        if distance > b {
            report.problems.push(format!(
                "block {b}: continuation marker with impossible distance {distance}"
            ));
        }
    }
    report.duplicate_keys = copies.values().filter(|&&n| n > 1).count() as u64;
    Ok(torn_at)
}
