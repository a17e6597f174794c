//! Walking one block's records as they lie on media — the single parser of the block format,
//! shared by recovery, compaction, iteration and `verify`.
//!
//! Owns: reading bitsets, record logs and large-record markers of a block. Must not touch: the
//! index or any metadata; callers decide what a record means to them. It reads without page
//! locks: callers that race writers (iteration) re-read each record consistently afterwards.

use std::sync::atomic::Ordering;

use super::layout::{self, Geometry, RecordLayout, RecordOffset, stamp, var};
use crate::device::PmemRegion;
use crate::error::Result;

/// One thing found in a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Fixed layout: an occupied slot.
    Slot(RecordOffset),
    /// Variable layout: an inline record (valid or deleted) of `size` bytes at `off`.
    Inline {
        off: RecordOffset,
        valid: bool,
        size: u64,
    },
    /// Variable layout: the head of a large record spanning `span` blocks.
    LargeHead { valid: bool, span: u64 },
    /// Variable layout: a continuation block, `distance` blocks after its head.
    Continuation { distance: u64 },
}

/// Why a block could not be parsed (media corruption; a crash never produces these).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub String);

/// Calls `visit` for every entry of block `b`; returns the log tail (variable layout; 0 for
/// fixed). `limit` bounds the log walk (the DRAM tail during iteration, the block size else).
/// `used` is the number of blocks in use, to check large-record spans.
pub(crate) fn walk_block(
    region: &PmemRegion,
    geo: &Geometry,
    b: u64,
    used: u64,
    limit: u64,
    visit: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<std::result::Result<u64, Malformed>> {
    match geo.layout {
        RecordLayout::Fixed { .. } => {
            for p in 0..geo.pages_per_block {
                let page = geo.page_offset(b, p);
                for w in 0..geo.bitset_words {
                    let bits = region
                        .atomic_u64(page + u64::from(w) * 8)?
                        .load(Ordering::Acquire);
                    if bits & !geo.bitset_mask(w) != 0 {
                        return Ok(Err(Malformed(format!(
                            "block {b} page {p}: bitset marks slots beyond the {} the page holds",
                            geo.slots
                        ))));
                    }
                    let mut set = bits;
                    while set != 0 {
                        let s = w * 64 + set.trailing_zeros();
                        set &= set - 1;
                        visit(Entry::Slot(RecordOffset::new(b, p, s)))?;
                    }
                }
            }
            Ok(Ok(0))
        }
        RecordLayout::Variable => walk_log(region, geo, b, used, limit, visit),
    }
}

fn walk_log(
    region: &PmemRegion,
    geo: &Geometry,
    b: u64,
    used: u64,
    limit: u64,
    visit: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<std::result::Result<u64, Malformed>> {
    let base = geo.block_offset(b);
    let bs = geo.block_size();
    let limit = limit.min(bs);
    let mut pos = 0u64;
    while pos + 4 <= limit {
        let word = region.atomic_u32(base + pos)?.load(Ordering::Acquire);
        if word == 0 {
            break;
        }
        if word & var::LARGE != 0 {
            if pos != 0 {
                return Ok(Err(Malformed(format!(
                    "block {b}: large-record marker in the middle of a log (byte {pos})"
                ))));
            }
            if word & var::CONT != 0 {
                visit(Entry::Continuation {
                    distance: u64::from(word >> 3),
                })?;
                return Ok(Ok(0));
            }
            let head = LargeHead::read(region, geo, b)?;
            let Some((klen, vlen, _)) = head.lengths() else {
                return Ok(Err(Malformed(format!(
                    "block {b}: large record with impossible lengths (key {}, value {})",
                    head.word(0),
                    head.value_len()
                ))));
            };
            let span = layout::large_blocks(bs, klen, vlen);
            if b + span > used {
                return Ok(Err(Malformed(format!(
                    "block {b}: large record spans {span} blocks, beyond the {used} in use"
                ))));
            }
            visit(Entry::LargeHead {
                valid: word & var::VALID != 0,
                span,
            })?;
            return Ok(Ok(0));
        }
        let Some((klen, vlen)) = var::inline_lengths(word) else {
            return Ok(Err(Malformed(format!(
                "block {b}: bad record header at byte {pos}"
            ))));
        };
        let size = var::inline_size(klen, vlen);
        if pos + size > bs {
            return Ok(Err(Malformed(format!(
                "block {b}: record at byte {pos} ({size} bytes) runs past the block end"
            ))));
        }
        visit(Entry::Inline {
            off: RecordOffset::new(b, (pos / layout::PAGE) as u32, (pos % layout::PAGE) as u32),
            valid: word & var::VALID != 0,
            size,
        })?;
        pos += size;
    }
    Ok(Ok(pos))
}

/// A block a valid large record claims after its head ([`claimed_by_large_heads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The record's head block.
    pub head: u64,
    /// The block's distance from the head.
    pub distance: u64,
    /// Whether the block's first word is its continuation marker (if not: media damage, and
    /// the block is claimed only because the record passes its check).
    pub marked: bool,
}

/// The blocks that valid large records claim after their heads, found from every block's
/// first word (and each valid head's lengths) before any block is walked: a walk of such a
/// block must not read its bytes as a log, whatever its first word says (the record's check
/// covers its payload, not its markers, and damage to a marker made the block look empty or
/// like inline records).
pub(crate) fn claimed_by_large_heads(
    region: &PmemRegion,
    geo: &Geometry,
    used: u64,
    threads: usize,
) -> Result<std::collections::HashMap<u64, Claim>> {
    let mut claimed = std::collections::HashMap::new();
    if geo.layout != RecordLayout::Variable || used == 0 {
        return Ok(claimed);
    }
    // One word per block, most of them a first touch of a page of the mapping (a page
    // fault): split over the recovery's threads like the walk itself.
    let threads = threads.clamp(1, used as usize) as u64;
    let per = used.div_ceil(threads);
    let found: Vec<Result<Vec<(u64, u64)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    valid_large_heads(region, geo, t * per..((t + 1) * per).min(used), used)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut heads = Vec::new();
    for f in found {
        heads.extend(f?);
    }
    // Another valid head inside a span (damaged lengths) is walked as itself, so that its
    // record is not hidden behind the damaged one.
    let is_head: std::collections::HashSet<u64> = heads.iter().map(|&(b, _)| b).collect();
    for (b, span) in heads {
        let mut marks = Vec::with_capacity(span as usize);
        for distance in 1..span {
            let word = region
                .atomic_u32(geo.block_offset(b + distance))?
                .load(Ordering::Acquire);
            marks.push(word == var::cont_word(distance));
        }
        // A block without its marker is the record's only if the record passes its check:
        // damaged lengths would otherwise claim the next blocks, live records' among them.
        let whole = marks.iter().all(|&m| m) || large_record_is_whole(region, geo, b)?;
        for (distance, marked) in (1..span).zip(marks) {
            let f = b + distance;
            if !is_head.contains(&f) && (whole || marked) {
                let claim = Claim {
                    head: b,
                    distance,
                    marked,
                };
                claimed.insert(f, claim);
            }
        }
    }
    Ok(claimed)
}

/// The valid large heads among `blocks` whose span fits the `used` blocks, with their spans.
fn valid_large_heads(
    region: &PmemRegion,
    geo: &Geometry,
    blocks: std::ops::Range<u64>,
    used: u64,
) -> Result<Vec<(u64, u64)>> {
    let mut heads = Vec::new();
    for b in blocks {
        let word = region
            .atomic_u32(geo.block_offset(b))?
            .load(Ordering::Acquire);
        if word & var::LARGE == 0 || word & var::CONT != 0 || word & var::VALID == 0 {
            continue;
        }
        let Some((klen, vlen, _)) = LargeHead::read(region, geo, b)?.lengths() else {
            continue; // the walk of the head reports it
        };
        let span = layout::large_blocks(geo.block_size(), klen, vlen);
        if b + span <= used {
            heads.push((b, span));
        }
    }
    Ok(heads)
}

/// Whether the marked record at `off` (a set bit, or a valid inline header) is whole: version
/// not 0 and, where records carry one, the check matches its bytes. A crash may leave a marked
/// record that is not (an unacknowledged write, see [`layout::stamp`]). `buf` is scratch space.
/// Large records are written in ordered steps: whole when the version is not 0.
pub(crate) fn record_is_whole(
    region: &PmemRegion,
    geo: &Geometry,
    off: RecordOffset,
    buf: &mut Vec<u8>,
) -> Result<bool> {
    match geo.layout {
        RecordLayout::Fixed { .. } => {
            let at = geo.slot_offset(off.block(), off.page(), off.pos());
            let (version, _) = stamp::unpack(region.read_u64(at + layout::SLOT_STAMP)?);
            if version == 0 || !geo.self_validating() {
                return Ok(version != 0);
            }
            buf.resize(geo.slot_size as usize, 0);
            region.read(at, buf)?;
            Ok(stamp::is_sealed(buf))
        }
        RecordLayout::Variable => {
            let pos = geo.page_offset(off.block(), off.page()) + u64::from(off.pos());
            let version = region.read_u64(pos + var::INLINE_VERSION)? as u32;
            let word = region.atomic_u32(pos)?.load(Ordering::Acquire);
            let Some((k, v)) = var::inline_lengths(word) else {
                return Ok(version != 0);
            };
            if version == 0 {
                return Ok(false);
            }
            buf.resize(var::INLINE_HEADER as usize + k + v, 0);
            region.read(pos, buf)?;
            // The checked range starts after the header word.
            Ok(stamp::is_sealed(buf.get(4..).unwrap_or_default()))
        }
    }
}

/// A large record's head: bytes 4..32 of its first block (key length, version, value length,
/// check, check marker) — the one reading of it, for recovery, reads and `verify`.
pub(crate) struct LargeHead([u8; 28]);

impl LargeHead {
    /// Reads the head of the large record in block `b`.
    pub(crate) fn read(region: &PmemRegion, geo: &Geometry, b: u64) -> Result<Self> {
        let mut head = [0u8; 28];
        region.read(geo.block_offset(b) + 4, &mut head)?;
        Ok(LargeHead(head))
    }

    /// The u32 at byte `at` of these 28 bytes (head byte `4 + at`).
    fn word(&self, at: usize) -> u32 {
        let h = &self.0;
        u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
    }

    fn value_len(&self) -> u64 {
        u64::from(self.word(12)) | (u64::from(self.word(16)) << 32)
    }

    /// (key length, value length, version), or `None` if the lengths are impossible (a torn
    /// read or damage; callers decide which).
    pub(crate) fn lengths(&self) -> Option<(usize, usize, u32)> {
        let (klen, vlen) = (self.word(0) as usize, self.value_len());
        if klen == 0 || klen > layout::MAX_VAR_KEY || vlen > layout::MAX_LARGE_VALUE as u64 {
            return None;
        }
        Some((klen, vlen as usize, self.word(4)))
    }

    /// What the head says about its check ([`var::large_head_check`]).
    pub(crate) fn check(&self) -> var::LargeCheck {
        var::large_head_check(&self.0)
    }

    /// Whether `key` and `value` match the head's check (a head written before large records
    /// had checks has none to fail).
    pub(crate) fn matches(&self, key: &[u8], value: &[u8]) -> bool {
        match self.check() {
            var::LargeCheck::Checked(check) => {
                check == var::large_check(self.checked_fields(), key, value)
            }
            var::LargeCheck::Unchecked => true,
            var::LargeCheck::Damaged => false,
        }
    }

    /// The head bytes its check covers (key length, version, value length).
    fn checked_fields(&self) -> &[u8] {
        &self.0[..20]
    }
}

/// Whether the large record whose head is block `b` matches its check, reading its key and
/// value piece by piece (a value may take 1 GiB). Large records are written in ordered steps
/// (the head's valid bit last), so a valid one that fails is media damage.
pub(crate) fn large_record_is_whole(region: &PmemRegion, geo: &Geometry, b: u64) -> Result<bool> {
    let head = LargeHead::read(region, geo, b)?;
    let check = match head.check() {
        var::LargeCheck::Checked(check) => check,
        var::LargeCheck::Unchecked => return Ok(true),
        var::LargeCheck::Damaged => return Ok(false),
    };
    let Some((klen, vlen, _)) = head.lengths() else {
        return Ok(false);
    };
    let mut crc = crc32c::crc32c(head.checked_fields());
    let mut buf = vec![0u8; 64 << 10];
    let (mut at, end) = (var::LARGE_HEADER, var::LARGE_HEADER + (klen + vlen) as u64);
    while at < end {
        let (pos, avail) = geo.large_locate(b, at);
        let n = avail.min(end - at).min(buf.len() as u64) as usize;
        let piece = buf.get_mut(..n).unwrap_or_default();
        region.read(pos, piece)?;
        crc = crc32c::crc32c_append(crc, piece);
        at += n as u64;
    }
    Ok(crc == check)
}

/// Calls `visit(offset, page, slot)` for each slot of fixed block `b` that its page's bitset marks free
/// but whose stamp is not zero (what an unacknowledged write may leave; after a clean close,
/// media damage). Each bitset word is read once.
pub(crate) fn stamped_free_slots(
    region: &PmemRegion,
    geo: &Geometry,
    b: u64,
    visit: &mut dyn FnMut(u64, u32, u32) -> Result<()>,
) -> Result<()> {
    for p in 0..geo.pages_per_block {
        let page = geo.page_offset(b, p);
        for w in 0..geo.bitset_words {
            let bits = region
                .atomic_u64(page + u64::from(w) * 8)?
                .load(Ordering::Acquire);
            for s in w * 64..(w * 64 + 64).min(geo.slots) {
                if bits & (1 << (s % 64)) != 0 {
                    continue;
                }
                let at = geo.slot_offset(b, p, s);
                if region
                    .atomic_u64(at + layout::SLOT_STAMP)?
                    .load(Ordering::Acquire)
                    != 0
                {
                    visit(at, p, s)?;
                }
            }
        }
    }
    Ok(())
}
