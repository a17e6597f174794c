//! The KV store's on-media format: store header, blocks, pages, fixed slots, variable records,
//! large records, and the 64-bit record offset. Pure arithmetic and encoding; no I/O.
//!
//! Owns: every constant and byte position of the format (docs/FORMAT-kv.md mirrors this file).
//! Must not touch: regions, locks, the index.

use crate::error::{Error, Result};

/// Magic number at byte 0 of the store header.
pub const MAGIC: &[u8; 8] = b"TBKVSTR1";
/// Format version this build reads and writes (2: per-key record versions and checksummed,
/// self-validating records, written with one persist).
pub const FORMAT_VERSION: u32 = 2;
/// Bytes reserved for the store header at the start of the region's data area.
pub const HEADER_LEN: u64 = 4096;
/// Base page size.
pub const PAGE: u64 = 4096;
/// Most pages per block (the offset has 3 page bits).
pub const MAX_PAGES_PER_BLOCK: u32 = 8;
/// Latch slots per block in DRAM: one 64-byte line of 4-byte latches (at least
/// [`MAX_PAGES_PER_BLOCK`]).
pub const LATCHES_PER_BLOCK: u64 = 16;
/// Longest key of a variable-size store (14 length bits).
pub const MAX_VAR_KEY: usize = (1 << 14) - 1;
/// Longest value stored inline in a block log (16 length bits); longer values become large
/// records.
pub const MAX_INLINE_VALUE: usize = (1 << 16) - 1;
/// Longest value of a large record (bounded so sizes stay far from overflow).
pub const MAX_LARGE_VALUE: usize = 1 << 30;

/// Byte positions in the store header.
pub mod header {
    /// Magic, 8 bytes.
    pub const MAGIC: usize = 0;
    /// Format version, u32.
    pub const VERSION: usize = 8;
    /// Layout kind, u32: 1 fixed, 2 variable.
    pub const KIND: usize = 12;
    /// Fixed key size, u32 (0 for variable).
    pub const KEY_SIZE: usize = 16;
    /// Fixed value size, u32 (0 for variable).
    pub const VALUE_SIZE: usize = 20;
    /// Page size in bytes, u32.
    pub const PAGE_SIZE: usize = 24;
    /// Pages per block, u32.
    pub const PAGES_PER_BLOCK: usize = 28;
    /// Slots per page (fixed), u32.
    pub const SLOTS: usize = 32;
    /// Blocks per allocation chunk, u32.
    pub const CHUNK_BLOCKS: usize = 36;
    /// CRC32C of bytes 0..40, u32.
    pub const CRC: usize = 40;
    /// End of the checksummed part.
    pub const CRC_COVERS: usize = 40;
    /// Used-block high-water mark, u64 (8-byte aligned; updated atomically and persisted
    /// before a block beyond it is first written): the count in the low half, its bitwise
    /// complement in the high half ([`super::used_word`]).
    pub const USED_BLOCKS: usize = 48;
    /// Clean-close mark, u64: [`CLEAN_MARK`](super::CLEAN_MARK) when the store was closed with
    /// every write complete; zeroed, durably, at open before any write.
    pub const CLEAN: usize = 56;
}

/// The header's used-block word for `blocks` (below 2^29): the count in the low half and its
/// bitwise complement in the high half, so that one 8-byte store changes both and a flipped bit
/// anywhere in the word shows (a count that media damage lowered would hide every record of
/// the blocks above it, and the next writes would reuse them).
pub fn used_word(blocks: u64) -> u64 {
    let low = blocks & 0xFFFF_FFFF;
    low | (u64::from(!(low as u32)) << 32)
}

/// The used-block count a header word holds, `None` if the word is damaged. A word whose high
/// half is zero was written before the complement was (stores made before 2026-12-03): its
/// count is taken as it is.
pub fn used_from_word(word: u64) -> Option<u64> {
    let (low, high) = (word as u32, (word >> 32) as u32);
    (high == 0 || high == !low).then_some(u64::from(low))
}

/// The value of the header's clean-close word after a clean close ("CLEANKV1").
pub const CLEAN_MARK: u64 = u64::from_le_bytes(*b"CLEANKV1");

/// How records are laid out, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordLayout {
    /// Every key and every value has exactly these sizes (slots with a bitset per page).
    Fixed {
        /// Key size in bytes (1..=65536).
        key_size: u32,
        /// Value size in bytes (0..=1 GiB).
        value_size: u32,
    },
    /// Keys and values of any size (a log per block; large records span blocks).
    Variable,
}

impl std::fmt::Display for RecordLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordLayout::Fixed {
                key_size,
                value_size,
            } => write!(f, "fixed {key_size}-byte keys / {value_size}-byte values"),
            RecordLayout::Variable => f.write_str("variable-size records"),
        }
    }
}

/// Rounds `v` up to a multiple of 8.
#[inline]
pub const fn pad8(v: u64) -> u64 {
    (v + 7) & !7
}

/// Geometry derived from the layout: everything needed to find a byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Layout.
    pub layout: RecordLayout,
    /// Page size (4 KiB, or a multiple for fixed records that do not fit one).
    pub page_size: u64,
    /// Pages per block.
    pub pages_per_block: u32,
    /// Fixed layout: slots per page.
    pub slots: u32,
    /// Fixed layout: bytes per slot.
    pub slot_size: u64,
    /// Fixed layout: u64 words of the bitset at the start of each page.
    pub bitset_words: u32,
    /// Blocks per allocation chunk.
    pub chunk_blocks: u32,
}

impl Geometry {
    /// Computes the geometry for a new store.
    pub fn new(layout: RecordLayout, pages_per_block: u32, chunk_bytes: u64) -> Result<Self> {
        if chunk_bytes == 0 {
            // It was taken as one block: a store that grew a block at a time.
            return Err(Error::InvalidArgument(
                "the largest growth step (chunk size) must be at least one block, not 0".into(),
            ));
        }
        if pages_per_block == 0 || pages_per_block > MAX_PAGES_PER_BLOCK {
            return Err(Error::InvalidArgument(format!(
                "pages per block must be 1..={MAX_PAGES_PER_BLOCK}, got {pages_per_block}"
            )));
        }
        let (page_size, slots, slot_size, words) = match layout {
            RecordLayout::Fixed {
                key_size,
                value_size,
            } => {
                if key_size == 0 || key_size > 65536 {
                    return Err(Error::InvalidArgument(format!(
                        "fixed key size must be 1..=65536 bytes, got {key_size}"
                    )));
                }
                if value_size as usize > MAX_LARGE_VALUE {
                    return Err(Error::InvalidArgument(format!(
                        "fixed value size must be at most {MAX_LARGE_VALUE} bytes, got {value_size}"
                    )));
                }
                let slot = slot_size(key_size, value_size);
                let page = if 8 + slot <= PAGE {
                    PAGE
                } else {
                    (8 + slot).div_ceil(PAGE) * PAGE
                };
                let (n, words) = slots_per_page(page, slot);
                (page, n, slot, words)
            }
            RecordLayout::Variable => (PAGE, 0, 0, 0),
        };
        let block = page_size * u64::from(pages_per_block);
        let chunk_blocks = (chunk_bytes / block).clamp(1, u64::from(u32::MAX)) as u32;
        Ok(Geometry {
            layout,
            page_size,
            pages_per_block,
            slots,
            slot_size,
            bitset_words: words,
            chunk_blocks,
        })
    }

    /// Bytes per block.
    #[inline]
    pub fn block_size(&self) -> u64 {
        self.page_size * u64::from(self.pages_per_block)
    }

    /// Region offset of block `b`.
    #[inline]
    pub fn block_offset(&self, b: u64) -> u64 {
        HEADER_LEN + b * self.block_size()
    }

    /// Maps a logical offset inside the large record whose head is block `head` (0 = the
    /// head block's start) to a region offset and the bytes available before the next block
    /// boundary (where a continuation prefix interrupts the payload).
    pub fn large_locate(&self, head: u64, logical: u64) -> (u64, u64) {
        let bs = self.block_size();
        if logical < bs {
            return (self.block_offset(head) + logical, bs - logical);
        }
        let per = bs - var::CONT_PREFIX;
        let rest = logical - bs;
        let i = rest / per;
        let within = rest % per;
        (
            self.block_offset(head + 1 + i) + var::CONT_PREFIX + within,
            per - within,
        )
    }

    /// Region offset of page `p` of block `b`.
    #[inline]
    pub fn page_offset(&self, b: u64, p: u32) -> u64 {
        self.block_offset(b) + u64::from(p) * self.page_size
    }

    /// Index of page `p` of block `b` in the DRAM latch table: each block's latches take one
    /// cache line of their own ([`LATCHES_PER_BLOCK`] slots), so clients inserting into
    /// neighbouring blocks never share a latch line (false sharing cost a third of the
    /// two-thread insert rate).
    #[inline]
    pub fn page_number(&self, b: u64, p: u32) -> u64 {
        b * LATCHES_PER_BLOCK + u64::from(p)
    }

    /// Fixed layout: region offset of slot `s` of page `p` of block `b`.
    #[inline]
    pub fn slot_offset(&self, b: u64, p: u32, s: u32) -> u64 {
        self.page_offset(b, p) + u64::from(self.bitset_words) * 8 + u64::from(s) * self.slot_size
    }

    /// Fixed layout: the bits of bitset word `w` that stand for real slots.
    #[inline]
    pub fn bitset_mask(&self, w: u32) -> u64 {
        match self.slots.saturating_sub(w * 64) {
            n if n >= 64 => u64::MAX,
            n => (1u64 << n) - 1,
        }
    }

    /// Region size needed for `blocks` blocks.
    #[inline]
    pub fn region_len_for(&self, blocks: u64) -> u64 {
        HEADER_LEN + blocks * self.block_size()
    }

    /// Whole blocks that fit in a region of `len` data bytes.
    #[inline]
    pub fn blocks_in(&self, len: u64) -> u64 {
        len.saturating_sub(HEADER_LEN) / self.block_size()
    }

    /// Whether records carry a check and are written with one persist: every layout but fixed
    /// values of at most [`IN_PLACE_VALUE`] bytes, which are updated in place (see [`stamp`]).
    pub fn self_validating(&self) -> bool {
        !matches!(self.layout, RecordLayout::Fixed { value_size, .. } if value_size as usize <= IN_PLACE_VALUE)
    }

    /// Fixed layout: (key size, value size).
    pub fn fixed_sizes(&self) -> Option<(usize, usize)> {
        match self.layout {
            RecordLayout::Fixed {
                key_size,
                value_size,
            } => Some((key_size as usize, value_size as usize)),
            RecordLayout::Variable => None,
        }
    }
}

/// Fixed slot: `[stamp u64][key, padded to 8][value, padded to 8]`. The stamp (see [`stamp`])
/// and the key share the slot's first cache line, and the value starts 8-aligned, so values of
/// at most 8 bytes are one word and can be updated atomically in place.
pub fn slot_size(key_size: u32, value_size: u32) -> u64 {
    8 + pad8(u64::from(key_size)) + pad8(u64::from(value_size))
}

/// Byte position of the stamp inside a fixed slot.
pub const SLOT_STAMP: u64 = 0;

/// Byte position of the key inside a fixed slot.
pub const SLOT_KEY: u64 = 8;

/// Byte position of the value inside a fixed slot with keys of `key_size` bytes.
pub fn slot_value(key_size: usize) -> u64 {
    SLOT_KEY + pad8(key_size as u64)
}

/// Largest fixed value that is updated in place (one atomic word). Stores with such values
/// write records in two ordered persists (record, then bit) and leave the check at 0, because
/// an in-place update changes the value without changing a checksum over it.
pub const IN_PLACE_VALUE: usize = 8;

/// Record versions and the record check.
///
/// Every record carries a 32-bit **version**: the value of its key's lock stripe while the
/// writer held it (odd, growing with every write of any key of the stripe; recovery seeds the
/// stripes past the largest version on media). Writers of a key take turns and return only
/// after the key's previous record is invalidated, so a key has two valid records only while a
/// write of it is in flight — and then either is a correct outcome. Recovery keeps the newer
/// one by [`newer`] (modulo 2^32: exact unless the stripe saw 2^31 writes between the two, when
/// it may keep the older — still correct, as the write was not acknowledged). Version 0 is
/// never written: a zero stamp marks a record that is not (or no longer) valid.
///
/// The **check** is CRC32C over the record's bytes that follow it: in a fixed slot, everything
/// after the check word's 4 bytes (version, key, value, padding); in an inline variable record,
/// the version field, key and value. A record is written with one persist: its validity marker
/// (bit or header word) is stored before or with its bytes, and recovery accepts a marked record
/// only if version and check agree with its bytes — a record whose lines did not all reach media
/// in a crash is dropped (it was never acknowledged). Invalidation zeroes the stamp in the same
/// persist that clears the marker, so a slot's previous record can never pass for a new one.
pub mod stamp {
    /// Whether version `a` is newer than version `b` (modulo 2^32).
    #[inline]
    pub fn newer(a: u32, b: u32) -> bool {
        (a.wrapping_sub(b) as i32) > 0
    }

    /// The check of a record: CRC32C of the bytes it covers (see the module docs).
    #[inline]
    pub fn check(covered: &[u8]) -> u32 {
        crate::device::cpu::crc32c_append(0, covered)
    }

    /// A fixed slot's stamp word: the check in the low half (bytes 0..4), the version in the
    /// high half (bytes 4..8) — so the check covers one contiguous range, from byte 4 on.
    #[inline]
    pub fn pack(version: u32, check: u32) -> u64 {
        u64::from(check) | (u64::from(version) << 32)
    }

    /// (version, check) of a stamp word.
    #[inline]
    pub fn unpack(word: u64) -> (u32, u32) {
        ((word >> 32) as u32, word as u32)
    }

    /// Writes into `checked[..4]` the check of `checked[4..]`: a record's checked range starts
    /// with its check (a fixed slot from byte 0, where the stamp's low half is the check; a
    /// variable record from byte 4, after its header word).
    #[inline]
    pub fn seal(checked: &mut [u8]) {
        if let Some((c, covered)) = checked.split_first_chunk_mut::<4>() {
            *c = check(covered).to_le_bytes();
        }
    }

    /// The check of a fixed slot holding `key` and `value` with `version`, computed from the
    /// pieces a reader has (not a copy of the slot): CRC32C of the slot's bytes after the
    /// check — version, then key and value each zero-padded to 8 bytes.
    #[inline]
    pub fn slot_check(
        version: u32,
        key: &[u8],
        key_size: usize,
        value: &[u8],
        value_size: usize,
    ) -> u32 {
        const ZEROS: [u8; 8] = [0; 8];
        let pad = |n: usize| &ZEROS[..n.next_multiple_of(8) - n];
        let append = crate::device::cpu::crc32c_append;
        let crc = check(&version.to_le_bytes());
        let crc = append(append(crc, key), pad(key_size));
        append(append(crc, value), pad(value_size))
    }

    /// The check of an inline variable-layout record from its pieces: CRC32C of its version
    /// field (8 bytes), key and value.
    #[inline]
    pub fn inline_check(version_field: &[u8], key: &[u8], value: &[u8]) -> u32 {
        let append = crate::device::cpu::crc32c_append;
        append(append(check(version_field), key), value)
    }

    /// Whether `checked[..4]` holds the check of `checked[4..]` (see [`seal`]).
    #[inline]
    pub fn is_sealed(checked: &[u8]) -> bool {
        checked
            .split_first_chunk::<4>()
            .is_some_and(|(c, covered)| u32::from_le_bytes(*c) == check(covered))
    }
}

/// Largest `n` with `8 * ceil(n / 64) + n * slot <= page`, and the bitset words it needs.
pub fn slots_per_page(page: u64, slot: u64) -> (u32, u32) {
    let mut n = (page - 8) / slot;
    while n > 0 && n.div_ceil(64) * 8 + n * slot > page {
        n -= 1;
    }
    let n = n.min(u64::from(u16::MAX)) as u32;
    (n, n.div_ceil(64).max(1))
}

/// A record's location: block (45 bits, of which a store uses at most 29) | page (3 bits) |
/// position (16 bits). The position is
/// the slot index (fixed) or the byte offset of the record header in the page (variable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordOffset(pub u64);

impl RecordOffset {
    /// Largest block id a store may use: offsets must fit the DRAM index's 48-bit slots
    /// (2^29 blocks: 2 TiB of 1-page blocks, 12 TiB of Viper's 6-page blocks).
    pub const MAX_BLOCK: u64 = (1 << 29) - 2;

    /// Packs the three fields.
    #[inline]
    pub fn new(block: u64, page: u32, pos: u32) -> Self {
        debug_assert!(block <= Self::MAX_BLOCK && page < 8 && pos <= 0xFFFF);
        RecordOffset((block << 19) | (u64::from(page & 7) << 16) | u64::from(pos & 0xFFFF))
    }

    /// Block id.
    #[inline]
    pub fn block(self) -> u64 {
        self.0 >> 19
    }

    /// Page within the block.
    #[inline]
    pub fn page(self) -> u32 {
        ((self.0 >> 16) & 7) as u32
    }

    /// Slot (fixed) or byte position in the page (variable).
    #[inline]
    pub fn pos(self) -> u32 {
        (self.0 & 0xFFFF) as u32
    }
}

impl std::fmt::Display for RecordOffset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.block(), self.page(), self.pos())
    }
}

/// Variable-record header word (u32, 4-byte aligned, so it is written failure-atomically).
///
/// Bit 0: valid. Bit 1: 0 = inline record, 1 = large-record marker. Inline: bits 2..16 key
/// length (1..16383), bits 16..32 value length. Large: bit 2 = 0 head, 1 continuation; head
/// lengths follow in the record body; continuation: bits 3..32 = distance to the head block.
pub mod var {
    /// Valid bit.
    pub const VALID: u32 = 1;
    /// Large-record bit.
    pub const LARGE: u32 = 2;
    /// Continuation bit (with LARGE).
    pub const CONT: u32 = 4;
    /// Inline record: header (u32) + check (u32) + version (u64, high half zero), then key,
    /// value.
    pub const INLINE_HEADER: u64 = 16;
    /// Byte position of an inline record's check (u32).
    pub const INLINE_CHECK: u64 = 4;
    /// Byte position of an inline record's version (u64 with the u32 version in its low half).
    pub const INLINE_VERSION: u64 = 8;
    /// Large head: header (u32) + key length (u32) + version (u64) + value length (u64) +
    /// check (u32) + check marker (u32), then key, value — spanning blocks.
    pub const LARGE_HEADER: u64 = 32;
    /// Byte position of a large head's check: CRC32C of head bytes 4..24 (key length, version,
    /// value length), the key and the value.
    pub const LARGE_CHECK: u64 = 24;
    /// [`LARGE_CHECK_MARK`] at byte 28 of a large head says its check is there; a head written
    /// before checks were (2026-12-03) has zero in both words.
    pub const LARGE_CHECK_MARK: u32 = u32::from_le_bytes(*b"CHK1");

    /// What a large head's bytes 4..32 say about its check.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum LargeCheck {
        /// The check to compare.
        Checked(u32),
        /// A head written before checks (both words zero).
        Unchecked,
        /// Neither: damage.
        Damaged,
    }

    /// Reads [`LargeCheck`] from a large head's bytes 4..32 (`head`).
    pub fn large_head_check(head: &[u8; 28]) -> LargeCheck {
        let word =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        // `head` starts at byte 4 of the block.
        let check_at = LARGE_CHECK as usize - 4;
        match (word(check_at), word(check_at + 4)) {
            (check, LARGE_CHECK_MARK) => LargeCheck::Checked(check),
            (0, 0) => LargeCheck::Unchecked,
            _ => LargeCheck::Damaged,
        }
    }

    /// The check of a large record whose head bytes 4..24 are `fields`.
    pub fn large_check(fields: &[u8], key: &[u8], value: &[u8]) -> u32 {
        let crc = crc32c::crc32c(fields);
        crc32c::crc32c_append(crc32c::crc32c_append(crc, key), value)
    }

    /// Each continuation block of a large record starts with an 8-byte prefix.
    pub const CONT_PREFIX: u64 = 8;

    /// Header word of a valid inline record.
    #[inline]
    pub fn inline_word(key_len: usize, value_len: usize) -> u32 {
        VALID | ((key_len as u32 & 0x3FFF) << 2) | ((value_len as u32 & 0xFFFF) << 16)
    }

    /// Inline record lengths, `None` if the word is not an inline header.
    #[inline]
    pub fn inline_lengths(word: u32) -> Option<(usize, usize)> {
        if word & LARGE != 0 {
            return None;
        }
        let key = ((word >> 2) & 0x3FFF) as usize;
        if key == 0 {
            return None;
        }
        Some((key, (word >> 16) as usize))
    }

    /// Bytes an inline record occupies in the log (8-aligned).
    #[inline]
    pub fn inline_size(key_len: usize, value_len: usize) -> u64 {
        super::pad8(INLINE_HEADER + key_len as u64 + value_len as u64)
    }

    /// Continuation prefix word for a block `distance` blocks after the head.
    #[inline]
    pub fn cont_word(distance: u64) -> u32 {
        LARGE | CONT | ((distance.min((1 << 29) - 1) as u32) << 3)
    }
}

/// Payload bytes of a large record split over `n` blocks of `block` bytes.
pub fn large_blocks(block: u64, key_len: usize, value_len: usize) -> u64 {
    let total = var::LARGE_HEADER + key_len as u64 + value_len as u64;
    if total <= block {
        return 1;
    }
    let rest = total - block;
    1 + rest.div_ceil(block - var::CONT_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_used_block_word_shows_any_flipped_bit() {
        for blocks in [0, 1, 11, 2730, RecordOffset::MAX_BLOCK] {
            let w = used_word(blocks);
            assert_eq!(used_from_word(w), Some(blocks));
            for bit in 0..64 {
                assert_eq!(used_from_word(w ^ (1 << bit)), None, "{blocks}, bit {bit}");
            }
        }
        // A word written before the complement.
        assert_eq!(used_from_word(11), Some(11));
    }

    #[test]
    fn viper_216_byte_records_fit_18_per_page() {
        let g = Geometry::new(
            RecordLayout::Fixed {
                key_size: 16,
                value_size: 200,
            },
            6,
            1 << 30,
        )
        .unwrap();
        assert_eq!(g.slot_size, 224);
        assert_eq!(g.slots, 18);
        assert_eq!(g.bitset_words, 1);
        assert_eq!(g.page_size, 4096);
        assert_eq!(g.block_size(), 6 * 4096);
        assert!(g.bitset_words as u64 * 8 + g.slots as u64 * g.slot_size <= g.page_size);
    }

    #[test]
    fn slot_math_is_tight() {
        for (k, v) in [
            (8, 8),
            (1, 0),
            (16, 100),
            (32, 500),
            (100, 900),
            (8, 4000),
            (16, 9000),
        ] {
            let g = Geometry::new(
                RecordLayout::Fixed {
                    key_size: k,
                    value_size: v,
                },
                4,
                1 << 20,
            )
            .unwrap();
            let used = g.bitset_words as u64 * 8 + g.slots as u64 * g.slot_size;
            assert!(used <= g.page_size, "{k}/{v}");
            assert!(g.slots >= 1);
            // One more slot would not fit.
            let more = (g.slots as u64 + 1).div_ceil(64) * 8 + (g.slots as u64 + 1) * g.slot_size;
            assert!(more > g.page_size, "{k}/{v} not tight");
        }
    }

    #[test]
    fn offsets_round_trip() {
        for (b, p, s) in [
            (0, 0, 0),
            (1, 7, 65535),
            (RecordOffset::MAX_BLOCK, 7, 65535),
        ] {
            let o = RecordOffset::new(b, p, s);
            assert_eq!((o.block(), o.page(), o.pos()), (b, p, s));
            assert!(o.0 <= crate::kv::index::MAX_OFFSET);
        }
        assert!(RecordOffset::new(1, 0, 0) > RecordOffset::new(0, 7, 65535));
    }

    #[test]
    fn var_header_round_trip() {
        let w = var::inline_word(16, 200);
        assert_eq!(w & var::VALID, 1);
        assert_eq!(var::inline_lengths(w), Some((16, 200)));
        assert_eq!(var::inline_lengths(w & !var::VALID), Some((16, 200)));
        assert_eq!(var::inline_lengths(0), None);
        assert_eq!(var::inline_lengths(var::cont_word(3)), None);
        assert_eq!(var::inline_size(16, 200), 232);
    }

    #[test]
    fn versions_compare_across_the_wrap() {
        use super::stamp::{newer, pack, unpack};
        for v in [1u32, 2, 77, u32::MAX - 1, u32::MAX] {
            let n = v.wrapping_add(2);
            assert!(newer(n, v), "{n} after {v}");
            assert!(!newer(v, n), "{v} before {n}");
            assert!(!newer(v, v));
        }
        assert_eq!(unpack(pack(7, 0xDEAD_BEEF)), (7, 0xDEAD_BEEF));
    }

    #[test]
    fn the_stamp_packs_check_below_version() {
        use super::stamp::{pack, unpack};
        let w = pack(7, 0xDEAD_BEEF);
        assert_eq!(&w.to_le_bytes()[..4], &0xDEAD_BEEFu32.to_le_bytes());
        assert_eq!(&w.to_le_bytes()[4..], &7u32.to_le_bytes());
        assert_eq!(unpack(0), (0, 0));
    }

    #[test]
    fn large_block_count() {
        let block = 4096;
        assert_eq!(large_blocks(block, 10, 100), 1);
        assert_eq!(large_blocks(block, 10, 4096 - 32 - 10), 1);
        assert_eq!(large_blocks(block, 10, 4096 - 32 - 10 + 1), 2);
        assert_eq!(large_blocks(block, 10, 4096 - 42 + 4088), 2);
        assert_eq!(large_blocks(block, 10, 4096 - 42 + 4088 + 1), 3);
    }

    #[test]
    fn bad_geometry_is_an_error() {
        assert!(Geometry::new(RecordLayout::Variable, 0, 1 << 20).is_err());
        assert!(Geometry::new(RecordLayout::Variable, 9, 1 << 20).is_err());
        assert!(
            Geometry::new(
                RecordLayout::Fixed {
                    key_size: 0,
                    value_size: 8
                },
                4,
                1 << 20
            )
            .is_err()
        );
    }
}
