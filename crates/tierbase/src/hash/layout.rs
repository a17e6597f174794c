//! The Plush store's on-media format (byte by byte in docs/FORMAT-plush.md): the store header,
//! the chunk tables, directory entries, buckets, recovery-log entries (RAWL), payload entries
//! and locators, and the geometry every offset is computed from.
//!
//! Owns: encoding and decoding, and checking a header before anything is sized from it. Must
//! not touch: the region (callers read and write the bytes) or any in-memory state.

use std::path::Path;

use crate::error::{Error, Result};

/// First 8 bytes of the store header.
pub const MAGIC: &[u8; 8] = b"TBPLUSH1";
/// Format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The store header: one 4 KiB page at offset 0 of the region's data area.
pub const HEADER_LEN: u64 = 4096;

/// Buckets per directory entry, and entries one entry migrates into (fanout).
pub const FANOUT: usize = 16;
/// log2 of [`FANOUT`]: each level has 16× the entries of the one above.
pub const FANOUT_BITS: u32 = 4;
/// Records (slots) per bucket.
pub const SLOTS: usize = 16;
/// A bucket: 16 keys, then 16 values, 8 bytes each — one 256-byte media block.
pub const BUCKET_BYTES: u64 = 256;
/// Records a directory entry holds (16 buckets of 16).
pub const ENTRY_RECORDS: usize = FANOUT * SLOTS;
/// A directory entry on media: a 256-byte header (size and epoch, bucket offsets) and a
/// 256-byte filter block (four lines of one 32-bit lane per bucket).
pub const ENTRY_BYTES: u64 = 512;
/// Where an entry's filter block starts.
pub const ENTRY_FILTER: u64 = 256;
/// Records a DRAM half-entry holds: the DRAM level's 256 slots per entry are two halves, one
/// taking inserts while the other (full, frozen) migrates in the background.
pub const HALF_SLOTS: usize = ENTRY_RECORDS / 2;
/// Most PMem levels a store may have (the header has a directory offset for each).
pub const MAX_LEVELS: u32 = 8;

/// A recovery-log chunk's header.
pub const LOG_CHUNK_HEADER: u64 = 64;
/// One recovery-log entry: three RAWL words and a check word, 32-byte aligned (two per cache
/// line, never split across lines).
pub const LOG_ENTRY_BYTES: u64 = 32;
/// A payload chunk's header.
pub const PAYLOAD_CHUNK_HEADER: u64 = 64;
/// A payload entry's header word.
pub const PAYLOAD_ENTRY_HEADER: u64 = 8;

/// Value of a deletion in fixed mode (the thesis' marker); a fixed-mode store refuses to store
/// it as a value.
pub const TOMBSTONE: u64 = 0xFEED_C0FF_EE22_AA77;

/// Space handed out in steps of this many bytes past the persisted high-water mark (a crash
/// leaks at most one step; recovery needs no allocator scan).
pub const RESERVE_STEP: u64 = 256 << 10;

/// Byte offsets of the store header's fields.
pub mod header {
    /// `TBPLUSH1`.
    pub const MAGIC: usize = 0;
    /// Format version (u32).
    pub const VERSION: usize = 8;
    /// Record layout in bits 0..8: 0 = fixed 8-byte keys and values, 1 = variable; key
    /// partitioning in bits 8..16: 0 = by hash, 1 = by range; the rest zero (u32).
    pub const LAYOUT: usize = 12;
    /// log2 of the DRAM level's entries (u32).
    pub const DRAM_BITS: usize = 16;
    /// Most PMem levels (u32).
    pub const MAX_LEVELS: usize = 20;
    /// Recovery logs (u32).
    pub const LOGS: usize = 24;
    /// Chunks per recovery log at most (u32).
    pub const LOG_CHUNKS: usize = 28;
    /// Bytes per recovery-log chunk (u64).
    pub const LOG_CHUNK_BYTES: usize = 32;
    /// Payload logs (u32).
    pub const PAYLOAD_LOGS: usize = 40;
    /// Payload chunks at most, over all payload logs (u32).
    pub const PAYLOAD_CHUNKS: usize = 44;
    /// Bytes per payload chunk (u64).
    pub const PAYLOAD_CHUNK_BYTES: usize = 48;
    /// CRC32C of bytes 0..56 (u32).
    pub const CRC: usize = 56;
    /// End of the checksummed, never-changing part.
    pub const FIXED_END: usize = 56;
    /// Persisted high-water mark of handed-out space (u64, mutable).
    pub const RESERVED_END: usize = 64;
    /// Opens so far (u64, mutable; informational).
    pub const OPENS: usize = 72;
    /// Directory offset of each PMem level, 0 = not created (u64 × `MAX_LEVELS`, mutable).
    pub const LEVELS: usize = 128;
}

/// How records are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PlushLayout {
    /// Keys and values of exactly 8 bytes, in the buckets themselves (the thesis' default).
    Fixed8,
    /// Keys and values of any length: buckets hold a 64-bit key hash and a locator into a
    /// payload log, where the key and value bytes live (WiscKey-style).
    Variable,
}

impl PlushLayout {
    fn code(self) -> u32 {
        match self {
            PlushLayout::Fixed8 => 0,
            PlushLayout::Variable => 1,
        }
    }

    /// `fixed8` or `variable`.
    pub fn name(self) -> &'static str {
        match self {
            PlushLayout::Fixed8 => "fixed8",
            PlushLayout::Variable => "variable",
        }
    }
}

impl std::fmt::Display for PlushLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How keys are spread over the DRAM entries (and so over the PMem levels below them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Partition {
    /// By a hash of the key (the thesis' default): an even load whatever the keys, no order.
    #[default]
    Hash,
    /// By the key's first bytes (§3.6.6 of the thesis): DRAM entry `e` holds the keys whose
    /// first 8 bytes (big-endian, zero-padded) have `e` as their top `dram_bits` bits, so
    /// entries follow key order and an ordered scan reads only the entries its range touches.
    /// Below an entry records are still placed by hash. The load is even only if the keys'
    /// first bytes are spread (binary or hashed ids); keys sharing a prefix crowd one entry,
    /// whose subtree then fills (a clear `StoreFull` error) — the mode is skew-prone.
    Range,
}

impl Partition {
    fn code(self) -> u32 {
        match self {
            Partition::Hash => 0,
            Partition::Range => 1,
        }
    }

    /// `hash` or `range`.
    pub fn name(self) -> &'static str {
        match self {
            Partition::Hash => "hash",
            Partition::Range => "range",
        }
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Partition {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "hash" => Ok(Partition::Hash),
            "range" => Ok(Partition::Range),
            other => Err(Error::InvalidArgument(format!(
                "unknown partitioning {other:?} (hash or range)"
            ))),
        }
    }
}

/// A key's first 8 bytes as a big-endian number, zero-padded: keys in byte order have these
/// in numeric order (padding with the smallest byte keeps a shorter key first).
#[inline]
pub fn key_prefix(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// The store's shape: everything an offset is computed from. Written once at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Record layout.
    pub layout: PlushLayout,
    /// How keys are spread over the DRAM entries.
    pub partition: Partition,
    /// log2 of the DRAM level's entries (PMem level 0 has as many).
    pub dram_bits: u32,
    /// Most PMem levels.
    pub max_levels: u32,
    /// Recovery logs (a power of two, at most the DRAM entries).
    pub logs: u32,
    /// Chunks per recovery log at most.
    pub log_chunks: u32,
    /// Bytes per recovery-log chunk.
    pub log_chunk_bytes: u64,
    /// Payload logs (variable layout; 0 in fixed).
    pub payload_logs: u32,
    /// Payload chunks at most.
    pub payload_chunks: u32,
    /// Bytes per payload chunk.
    pub payload_chunk_bytes: u64,
}

/// Most DRAM entries: 2^20 (about 9 GiB of DRAM level and filters).
pub const MAX_DRAM_BITS: u32 = 20;
/// Most per-chunk epochs the logs keep in DRAM (4 bytes each, 64 MiB): chunks per log × DRAM
/// entries.
pub const MAX_LOG_EPOCHS: u64 = 1 << 24;

/// Largest recovery-log chunk (entries are numbered within 32 bits of slots).
const MAX_LOG_CHUNK: u64 = 1 << 30;
/// Largest payload chunk (locator offsets have 32 bits).
const MAX_PAYLOAD_CHUNK: u64 = 1 << 31;
/// Payload chunk ids have 14 bits in a locator.
pub const MAX_PAYLOAD_CHUNKS: u32 = 1 << 14;

/// The rule for a recovery-log chunk's size (options and headers alike): a multiple of 4 KiB
/// up to [`MAX_LOG_CHUNK`]; `Err` says so.
pub fn check_log_chunk_bytes(bytes: u64) -> std::result::Result<(), String> {
    if (4096..=MAX_LOG_CHUNK).contains(&bytes) && bytes.is_multiple_of(4096) {
        Ok(())
    } else {
        Err(format!(
            "recovery-log chunks of {bytes} bytes: must be a multiple of 4 KiB up to 1 GiB"
        ))
    }
}

impl Geometry {
    /// Checks every field; `what` names the source in errors (a path, or "options").
    pub fn validate(&self, path: Option<&Path>) -> Result<()> {
        let bad = |detail: String| -> Error {
            match path {
                Some(p) => Error::corrupt(Some(p), detail),
                None => Error::InvalidArgument(detail),
            }
        };
        // DRAM is sized from these fields before anything else is read: bound it (2^20
        // entries take about 9 GiB, most of it only as records arrive; the logs' epoch tables
        // at most 64 MiB).
        if !(4..=MAX_DRAM_BITS).contains(&self.dram_bits) {
            return Err(bad(format!(
                "DRAM level of 2^{} entries: must be 2^4 to 2^{MAX_DRAM_BITS}",
                self.dram_bits
            )));
        }
        if u64::from(self.log_chunks) << self.dram_bits > MAX_LOG_EPOCHS {
            return Err(bad(format!(
                "{} chunks per recovery log with 2^{} DRAM entries: the logs' epoch tables \
                 would take more than {} MiB of DRAM",
                self.log_chunks,
                self.dram_bits,
                (MAX_LOG_EPOCHS * 4) >> 20
            )));
        }
        if self.max_levels == 0 || self.max_levels > MAX_LEVELS {
            return Err(bad(format!(
                "{} PMem levels: must be 1 to {MAX_LEVELS}",
                self.max_levels
            )));
        }
        // Level indexes use the hash's low bits, filters its high 32.
        if self.dram_bits + FANOUT_BITS * (self.max_levels - 1) > 32 {
            return Err(bad(format!(
                "2^{} DRAM entries with {} levels need more than 32 hash bits for the last \
                 level's index",
                self.dram_bits, self.max_levels
            )));
        }
        if !self.logs.is_power_of_two() || u64::from(self.logs) > 1u64 << self.dram_bits {
            return Err(bad(format!(
                "{} recovery logs: must be a power of two, at most the DRAM entries",
                self.logs
            )));
        }
        if self.log_chunks < 3 || self.log_chunks > 1 << 16 {
            return Err(bad(format!(
                "{} chunks per recovery log: must be 3 to 65536",
                self.log_chunks
            )));
        }
        check_log_chunk_bytes(self.log_chunk_bytes).map_err(bad)?;
        if self.log_capacity() <= 2 * self.live_records_per_log() {
            return Err(bad(format!(
                "recovery logs of {} entries each cannot hold twice the {} records their DRAM \
                 entries may hold (more or larger chunks)",
                self.log_capacity(),
                self.live_records_per_log()
            )));
        }
        match self.layout {
            PlushLayout::Fixed8 => {
                if self.payload_logs != 0 || self.payload_chunks != 0 {
                    return Err(bad("a fixed-layout store has no payload logs".into()));
                }
            }
            PlushLayout::Variable => {
                if self.payload_logs == 0 || self.payload_logs > 256 {
                    return Err(bad(format!(
                        "{} payload logs: must be 1 to 256",
                        self.payload_logs
                    )));
                }
                if self.payload_chunks < 2 * self.payload_logs
                    || self.payload_chunks > MAX_PAYLOAD_CHUNKS
                {
                    return Err(bad(format!(
                        "{} payload chunks: must be at least two per payload log and at most \
                         {MAX_PAYLOAD_CHUNKS}",
                        self.payload_chunks
                    )));
                }
                if !(4096..=MAX_PAYLOAD_CHUNK).contains(&self.payload_chunk_bytes)
                    || !self.payload_chunk_bytes.is_multiple_of(4096)
                {
                    return Err(bad(format!(
                        "payload chunks of {} bytes: must be a multiple of 4 KiB up to 2 GiB",
                        self.payload_chunk_bytes
                    )));
                }
            }
        }
        Ok(())
    }

    /// The 64-bit hash of a fixed-layout key (`word`: its 8 bytes, little-endian).
    #[inline]
    pub fn hash_fixed(&self, word: u64) -> u64 {
        self.place(hash_word(word), word.swap_bytes())
    }

    /// The 64-bit hash of a variable-length key (what its bucket slots hold).
    #[inline]
    pub fn hash_key(&self, key: &[u8]) -> u64 {
        let mixed = hash_bytes(key);
        match self.partition {
            Partition::Hash => mixed,
            Partition::Range => self.place(mixed, key_prefix(key)),
        }
    }

    /// Range partition: the DRAM index bits (the hash's low `dram_bits`) become the key
    /// prefix's top bits; every other bit stays the key's mixed hash (level indexes below the
    /// entry, recovery log, filters, fingerprints).
    #[inline]
    fn place(&self, mixed: u64, prefix: u64) -> u64 {
        match self.partition {
            Partition::Hash => mixed,
            Partition::Range => {
                let mask = (1u64 << self.dram_bits) - 1;
                (mixed & !mask) | (prefix >> (64 - self.dram_bits))
            }
        }
    }

    /// Range partition: the DRAM entry of keys starting like `key` (its first 8 bytes).
    #[inline]
    pub fn range_entry(&self, key: &[u8]) -> usize {
        (key_prefix(key) >> (64 - self.dram_bits)) as usize
    }

    /// DRAM entries (= PMem level-0 entries).
    pub fn dram_entries(&self) -> usize {
        1 << self.dram_bits
    }

    /// Index bits of PMem level `level`.
    pub fn level_bits(&self, level: u32) -> u32 {
        self.dram_bits + FANOUT_BITS * level
    }

    /// Entries of PMem level `level`.
    pub fn level_entries(&self, level: u32) -> u64 {
        1 << self.level_bits(level)
    }

    /// Directory bytes of PMem level `level`.
    pub fn level_bytes(&self, level: u32) -> u64 {
        self.level_entries(level) * ENTRY_BYTES
    }

    /// Entries of one recovery log's chunk.
    pub fn log_chunk_entries(&self) -> u64 {
        (self.log_chunk_bytes - LOG_CHUNK_HEADER) / LOG_ENTRY_BYTES
    }

    /// Entries one recovery log holds.
    pub fn log_capacity(&self) -> u64 {
        self.log_chunk_entries() * u64::from(self.log_chunks)
    }

    /// DRAM entries one recovery log serves.
    pub fn entries_per_log(&self) -> usize {
        self.dram_entries() / self.logs as usize
    }

    /// Records the DRAM entries one log serves can hold unmigrated (both halves full).
    pub fn live_records_per_log(&self) -> u64 {
        (self.entries_per_log() * ENTRY_RECORDS) as u64
    }

    /// Where the chunk tables start (right after the header).
    pub fn tables_offset(&self) -> u64 {
        HEADER_LEN
    }

    /// Offset of the table word of recovery log `log`'s chunk `chunk`.
    pub fn log_table_word(&self, log: u32, chunk: u32) -> u64 {
        self.tables_offset() + 8 * (u64::from(log) * u64::from(self.log_chunks) + u64::from(chunk))
    }

    /// Offset of the table word of payload chunk `chunk`.
    pub fn payload_table_word(&self, chunk: u32) -> u64 {
        self.tables_offset()
            + 8 * (u64::from(self.logs) * u64::from(self.log_chunks) + u64::from(chunk))
    }

    /// Where handed-out space starts (after the tables, 4 KiB aligned).
    pub fn space_offset(&self) -> u64 {
        let words =
            u64::from(self.logs) * u64::from(self.log_chunks) + u64::from(self.payload_chunks);
        (self.tables_offset() + 8 * words).next_multiple_of(4096)
    }

    /// Encodes the header's fixed part (and zeros for the rest) into `hdr`.
    pub fn encode(&self, hdr: &mut [u8]) {
        hdr.fill(0);
        hdr[header::MAGIC..header::MAGIC + 8].copy_from_slice(MAGIC);
        put32(hdr, header::VERSION, FORMAT_VERSION);
        put32(
            hdr,
            header::LAYOUT,
            self.layout.code() | self.partition.code() << 8,
        );
        put32(hdr, header::DRAM_BITS, self.dram_bits);
        put32(hdr, header::MAX_LEVELS, self.max_levels);
        put32(hdr, header::LOGS, self.logs);
        put32(hdr, header::LOG_CHUNKS, self.log_chunks);
        put64(hdr, header::LOG_CHUNK_BYTES, self.log_chunk_bytes);
        put32(hdr, header::PAYLOAD_LOGS, self.payload_logs);
        put32(hdr, header::PAYLOAD_CHUNKS, self.payload_chunks);
        put64(hdr, header::PAYLOAD_CHUNK_BYTES, self.payload_chunk_bytes);
        let crc = crc32c::crc32c(&hdr[..header::FIXED_END]);
        put32(hdr, header::CRC, crc);
    }

    /// Decodes and checks the header in `hdr` (read from the store at `path`).
    pub fn decode(hdr: &[u8], path: Option<&Path>) -> Result<Self> {
        if hdr.len() < HEADER_LEN as usize || &hdr[..8] != MAGIC {
            return Err(Error::BadMagic {
                path: path.map(Path::to_path_buf),
                expected: "tierbase Plush store",
            });
        }
        let version = get32(hdr, header::VERSION);
        if version != FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                path: path.map(Path::to_path_buf),
                what: "Plush store",
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let crc = crc32c::crc32c(&hdr[..header::FIXED_END]);
        if crc != get32(hdr, header::CRC) {
            return Err(Error::corrupt(
                path,
                "Plush store header fails its checksum",
            ));
        }
        let code = get32(hdr, header::LAYOUT);
        let layout = match code & 0xff {
            0 => PlushLayout::Fixed8,
            1 => PlushLayout::Variable,
            other => {
                return Err(Error::corrupt(
                    path,
                    format!("unknown record layout {other} in the Plush store header"),
                ));
            }
        };
        let partition = match code >> 8 {
            0 => Partition::Hash,
            1 => Partition::Range,
            other => {
                return Err(Error::corrupt(
                    path,
                    format!("unknown key partitioning {other} in the Plush store header"),
                ));
            }
        };
        let geo = Geometry {
            layout,
            partition,
            dram_bits: get32(hdr, header::DRAM_BITS),
            max_levels: get32(hdr, header::MAX_LEVELS),
            logs: get32(hdr, header::LOGS),
            log_chunks: get32(hdr, header::LOG_CHUNKS),
            log_chunk_bytes: get64(hdr, header::LOG_CHUNK_BYTES),
            payload_logs: get32(hdr, header::PAYLOAD_LOGS),
            payload_chunks: get32(hdr, header::PAYLOAD_CHUNKS),
            payload_chunk_bytes: get64(hdr, header::PAYLOAD_CHUNK_BYTES),
        };
        geo.validate(Some(path.unwrap_or(Path::new("(region)"))))?;
        Ok(geo)
    }
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// A directory entry's first word: `epoch << 32 | size`. One 8-byte store, so size and epoch
/// reach media together.
#[inline]
pub fn size_epoch(size: u32, epoch: u32) -> u64 {
    (u64::from(epoch) << 32) | u64::from(size)
}

/// `(size, epoch)` of a directory entry's first word.
#[inline]
pub fn split_size_epoch(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

/// The 64-bit hash every placement uses: the DRAM entry (low bits), the entry at each level
/// (more low bits), the recovery log, and the filters (high 32 bits).
#[inline]
pub fn hash_word(key: u64) -> u64 {
    // splitmix64's finaliser: every input bit moves every output bit.
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of a variable-length key (stored in the bucket in place of the key).
#[inline]
pub fn hash_bytes(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

// ----- recovery-log entries (RAWL) -------------------------------------------------------------

/// A recovery-log entry: the record (key word and value word: the key itself and the value in
/// fixed mode; the key hash and the payload locator in variable mode), the DRAM half-entry's
/// epoch and the record's slot in that half.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// Key word.
    pub key: u64,
    /// Value word.
    pub value: u64,
    /// Epoch of the DRAM half the record went to.
    pub epoch: u32,
    /// Its slot in that half (below [`HALF_SLOTS`]).
    pub slot: u8,
}

fn check_word(w0: u64, w1: u64, w2: u64, generation: u64) -> u64 {
    hash_word(w0 ^ hash_word(w1 ^ hash_word(w2 ^ generation.wrapping_mul(0xff51_afd7_ed55_8ccd))))
}

/// The four words of `r` in a chunk of generation `generation`: RAWL's three words carry 63 payload
/// bits and the chunk's flag bit (`generation & 1`) each — `w0 = key << 1 | b`, `w1 = value << 1 |
/// b`, `w2 = key.msb << 63 | value.msb << 62 | epoch << 30 | slot << 22 | b` — and `w3` checks
/// all three against the chunk's whole generation.
pub fn encode_log(r: &LogRecord, generation: u64) -> [u64; 4] {
    let b = generation & 1;
    let w0 = (r.key << 1) | b;
    let w1 = (r.value << 1) | b;
    let w2 = ((r.key >> 63) << 63)
        | ((r.value >> 63) << 62)
        | (u64::from(r.epoch) << 30)
        | (u64::from(r.slot) << 22)
        | b;
    [w0, w1, w2, check_word(w0, w1, w2, generation)]
}

/// The record in `w`, if it is a whole entry written in a chunk of generation `generation`. The flag
/// bits reject words left from the previous generation (RAWL: one persist barrier per entry);
/// the check word also rejects words left from older generations, which a crash-abandoned,
/// partly filled chunk can still hold when it is reused.
pub fn decode_log(w: &[u64; 4], generation: u64) -> Option<LogRecord> {
    let b = generation & 1;
    if w[0] & 1 != b || w[1] & 1 != b || w[2] & 1 != b || (w[2] >> 1) & 0x1f_ffff != 0 {
        return None;
    }
    if w[3] != check_word(w[0], w[1], w[2], generation) {
        return None;
    }
    let slot = ((w[2] >> 22) & 0xff) as u8;
    if usize::from(slot) >= HALF_SLOTS {
        return None;
    }
    Some(LogRecord {
        key: (w[0] >> 1) | ((w[2] >> 63) << 63),
        value: (w[1] >> 1) | (((w[2] >> 62) & 1) << 63),
        epoch: ((w[2] >> 30) & 0xffff_ffff) as u32,
        slot,
    })
}

/// Offsets within a recovery-log chunk's header.
pub mod log_chunk {
    /// `TBPLLOG1`.
    pub const MAGIC: &[u8; 8] = b"TBPLLOG1";
    /// Generation (u64): 0 = never used; raised (so the flag `generation & 1` flips) each time the
    /// chunk is (re)started, which invalidates every entry it held.
    pub const GEN: u64 = 8;
    /// Position of the chunk in its log's order (u64), set with the generation.
    pub const SEQ: u64 = 16;
    /// The slot of the next entry (u64), written by a clean close for the chunk its log was
    /// appending to and cleared (persisted) by the next open before anything is appended
    /// there; 0: not known (after a crash, or in files from before 2026-12-03) — the log
    /// starts its next entry in another chunk.
    pub const RESUME: u64 = 24;
    /// The generation (u64) in which a crash may have cut entries short: set (persisted) to
    /// the chunk's generation by the open after a crash (variable layout), stale once the
    /// chunk is restarted. After a clean close, a slot that fails its check before the
    /// chunk's end (the resume slot of the log's newest chunk, else its last valid entry), in
    /// a chunk whose generation is not this one, was damaged on media. 0 in files from before
    /// 2026-12-04.
    pub const CRASHED_GEN: u64 = 32;
}

// ----- payload entries and locators ------------------------------------------------------------

/// Offsets within a payload chunk's header.
pub mod payload_chunk {
    /// `TBPLPAY1`.
    pub const MAGIC: &[u8; 8] = b"TBPLPAY1";
    /// Epoch (u64): raised when the chunk is collected, which makes every locator into it
    /// dangling.
    pub const EPOCH: u64 = 8;
    /// State (u64, one word so that no crash can leave half of a change): bit 0 set while the
    /// chunk holds entries (0 = free); bits 32..64 the victim's chunk id + 1 while the chunk
    /// receives a collection's copies, and bit 1 once all of them are durable; bit 2
    /// ([`CRASHED`]).
    pub const STATE: u64 = 16;
    /// Where the next entry goes (u64), written by a clean close for the chunk a payload log
    /// was appending to and cleared (persisted) by the next open before anything is appended
    /// there; 0: not known (after a crash, or in files from before 2026-12-03) — the chunk
    /// takes no more entries.
    pub const RESUME: u64 = 24;
    /// [`STATE`] bit: in use.
    pub const IN_USE: u64 = 1;
    /// [`STATE`] bit: the collection's copies are complete.
    pub const GC_COMPLETE: u64 = 2;
    /// [`STATE`] bit: the chunk held entries when the store crashed (set, persisted, by the
    /// open after the crash; cleared when the chunk is freed): an entry in it that fails its
    /// check may have been cut short by that crash, whatever later clean closes record.
    pub const CRASHED: u64 = 4;

    /// The state of a chunk in use that receives copies from `victim`.
    pub fn collecting(victim: u32, complete: bool) -> u64 {
        IN_USE | if complete { GC_COMPLETE } else { 0 } | ((u64::from(victim) + 1) << 32)
    }

    /// The victim of the collection a state names, and whether its copies are complete.
    pub fn collection(state: u64) -> Option<(u32, bool)> {
        let source = state >> 32;
        (state & IN_USE != 0 && source != 0)
            .then(|| ((source - 1) as u32, state & GC_COMPLETE != 0))
    }
}

/// Bits of a payload chunk's epoch kept in a locator.
pub const LOCATOR_EPOCH_BITS: u32 = 18;

/// A pointer into a payload log: chunk id (14 bits), the chunk's epoch (low 18 bits) and the
/// entry's byte offset in the chunk (32 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locator {
    /// Payload chunk id.
    pub chunk: u32,
    /// The chunk's epoch when the entry was written (low 18 bits).
    pub epoch: u32,
    /// Byte offset of the entry in the chunk.
    pub offset: u32,
}

impl Locator {
    /// As a value word.
    pub fn encode(self) -> u64 {
        (u64::from(self.chunk) << 50)
            | (u64::from(self.epoch & ((1 << LOCATOR_EPOCH_BITS) - 1)) << 32)
            | u64::from(self.offset)
    }

    /// From a value word.
    pub fn decode(word: u64) -> Self {
        Locator {
            chunk: (word >> 50) as u32,
            epoch: ((word >> 32) & ((1 << LOCATOR_EPOCH_BITS) - 1)) as u32,
            offset: word as u32,
        }
    }

    /// Whether the locator names the chunk in its epoch `epoch`.
    pub fn current(self, epoch: u64) -> bool {
        u64::from(self.epoch) == epoch & ((1 << LOCATOR_EPOCH_BITS) - 1)
    }
}

/// A payload entry's header word: key length (bits 0..32), value length (bits 32..63), and
/// bit 63 set for a deletion (whose value is empty). Zero ends a chunk's entries.
pub fn payload_header(key_len: usize, value_len: usize, tombstone: bool) -> u64 {
    (key_len as u64) | ((value_len as u64) << 32) | (u64::from(tombstone) << 63)
}

/// Bit of a payload header word set (without a persist: a hint for collection) once the entry
/// is known to be superseded. Not covered by the entry's check.
pub const PAYLOAD_DEAD: u64 = 1 << 62;

/// Longest value a payload entry can describe (30 bits of length).
pub const MAX_PAYLOAD_VALUE: usize = (1 << 30) - 1;

/// `(key length, value length, tombstone)` of a payload header word.
pub fn split_payload_header(word: u64) -> (usize, usize, bool) {
    (
        (word & 0xffff_ffff) as usize,
        ((word >> 32) & MAX_PAYLOAD_VALUE as u64) as usize,
        word >> 63 == 1,
    )
}

/// Bytes a payload entry takes (8-aligned).
pub fn payload_entry_bytes(key_len: usize, value_len: usize) -> u64 {
    (PAYLOAD_ENTRY_HEADER + key_len as u64 + value_len as u64).next_multiple_of(8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry {
            layout: PlushLayout::Variable,
            partition: Partition::Hash,
            dram_bits: 6,
            max_levels: 3,
            logs: 8,
            log_chunks: 10,
            log_chunk_bytes: 16384,
            payload_logs: 2,
            payload_chunks: 8,
            payload_chunk_bytes: 8192,
        }
    }

    #[test]
    fn header_round_trips_and_every_field_is_checked() {
        let g = geo();
        g.validate(None).unwrap();
        let mut hdr = vec![0u8; HEADER_LEN as usize];
        g.encode(&mut hdr);
        assert_eq!(Geometry::decode(&hdr, None).unwrap(), g);
        let mut bad = hdr.clone();
        bad[header::DRAM_BITS] = 40;
        assert!(
            Geometry::decode(&bad, None)
                .unwrap_err()
                .to_string()
                .contains("checksum")
        );
        let mut wrong = g;
        wrong.log_chunks = 2;
        assert!(wrong.validate(None).is_err());
        wrong = g;
        wrong.dram_bits = 20;
        wrong.max_levels = 5;
        wrong.log_chunks = 3;
        wrong.log_chunk_bytes = 1 << 30;
        assert!(
            wrong
                .validate(None)
                .unwrap_err()
                .to_string()
                .contains("hash bits")
        );
        wrong.dram_bits = 24;
        wrong.max_levels = 2;
        assert!(
            wrong
                .validate(None)
                .unwrap_err()
                .to_string()
                .contains("2^20")
        );
        hdr[0] = b'X';
        assert!(matches!(
            Geometry::decode(&hdr, None),
            Err(Error::BadMagic { .. })
        ));
    }

    #[test]
    fn log_entries_round_trip_and_reject_other_generations_and_tears() {
        let r = LogRecord {
            key: u64::MAX,
            value: 1 << 63 | 5,
            epoch: u32::MAX,
            slot: 127,
        };
        for generation in [1u64, 2, 77] {
            let w = encode_log(&r, generation);
            assert_eq!(decode_log(&w, generation), Some(r));
            assert_eq!(decode_log(&w, generation + 1), None, "previous generation");
            assert_eq!(
                decode_log(&w, generation + 2),
                None,
                "same flag, older generation"
            );
            for torn in 0..4 {
                let mut t = w;
                t[torn] ^= 1 << 9;
                assert_eq!(decode_log(&t, generation), None, "torn word {torn}");
            }
        }
        assert_eq!(decode_log(&[0; 4], 2), None, "zeroed space");
    }

    #[test]
    fn locators_and_payload_headers_round_trip() {
        let l = Locator {
            chunk: (1 << 14) - 1,
            epoch: 5,
            offset: u32::MAX - 7,
        };
        assert_eq!(Locator::decode(l.encode()), l);
        assert!(l.current(5) && l.current(5 + (1 << LOCATOR_EPOCH_BITS)) && !l.current(6));
        let h = payload_header(17, MAX_PAYLOAD_VALUE, true);
        assert_eq!(split_payload_header(h), (17, MAX_PAYLOAD_VALUE, true));
        assert_eq!(
            split_payload_header(h | PAYLOAD_DEAD),
            (17, MAX_PAYLOAD_VALUE, true)
        );
        assert_eq!(payload_entry_bytes(3, 4), 16);
    }
}
