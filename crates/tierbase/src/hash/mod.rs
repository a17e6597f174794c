//! Plush (Vogel et al.; the thesis' chapter 3): a leveled, log-structured persistent hash
//! table whose DRAM use is fixed by configuration, not by the record count.
//!
//! Records enter a DRAM level of `2^dram_bits` entries (256 slots each, in two halves) after
//! a write-ahead entry in one of the recovery logs; a full half moves — in the background —
//! to PMem level 0, and a full PMem entry into its 16 children on the next level, each level
//! 16× larger. Buckets are 256 bytes (16 keys, 16 values: one media block), searched with one
//! vector compare; every bucket has a 128-bit Bloom filter, kept in DRAM for the first levels.
//! Variable-length keys and values live in payload logs. Format: docs/FORMAT-plush.md.
//!
//! Owns: the store's format ([`layout`]), its DRAM level, levels, logs, payload logs,
//! migration, recovery and collection. Must not touch: hardware — every byte goes through
//! [`crate::device::PmemRegion`] (DAX, a file on disk or tmpfs, anonymous memory, the crash
//! simulator, emulation alike).
//!
//! ```
//! use tierbase::hash::{PlushOptions, PlushStore};
//! # fn main() -> tierbase::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("tierbase-plush-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("store.plush");
//! # let _ = std::fs::remove_file(&path);
//! let opts = PlushOptions::small(); // a tiny geometry; `default()` is sized for millions
//! let store = PlushStore::create(&path, &opts)?;
//! store.put(b"hello", b"world")?; // durable when it returns
//! assert_eq!(store.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! store.close()?;
//! let store = PlushStore::open(&path, &opts)?; // replays the recovery logs
//! assert_eq!(store.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! # drop(store); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok(()) }
//! ```
//!
//! | capability | |
//! |---|---|
//! | point get / put / delete | yes; gets are optimistic (no lock; they retry while a half or entry they read is rewritten) |
//! | batched gets | [`PlushStore::get_many`]: each stage of a lookup (DRAM entry and level entries, buckets) is started for a round of keys before any is searched; not a snapshot |
//! | ordered range scans | no (hash partitioning) |
//! | unordered iteration | a cursor walk over DRAM entries and their subtrees ([`PlushStore::scan`]) |
//! | concurrent writers | yes, linearizable per key (a key's writers take its DRAM entry's lock in turn) |
//! | durability | every acknowledged write: one log entry (one persist barrier) before it is acknowledged |
//! | multi-process access | no: a second open fails with [`Error::Locked`] |

mod dram;
mod filter;
pub mod layout;
mod log;
mod payload;
mod pmem;
mod recovery;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use serde::Serialize;

pub use layout::{Partition, PlushLayout};
pub use recovery::RecoveryReport;

use self::dram::{Candidates, DramLevel, halves};
use self::layout::{Geometry, HALF_SLOTS, HEADER_LEN, LogRecord, MAX_LEVELS, TOMBSTONE};
use self::log::Log;
use self::payload::{Lookup, Payload};
use self::pmem::{BucketHint, BucketHints};
use crate::device::{Counter, DurabilityMode, KeySearch, PmemRegion, RegionOptions, ZeroedWords};
use crate::error::{Error, Result};
use crate::space::RegionBump;
use crate::store::{Change, Store, StoreDescription, WriteFailure};
use crate::sync::Background;

/// How to create or open a Plush store. Geometry fields apply at creation (an existing
/// store keeps its own); the rest at every open.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PlushOptions {
    /// Record layout (default: variable).
    pub layout: PlushLayout,
    /// How keys are spread over the DRAM entries (default: by hash; by range for ordered
    /// scans, see [`Partition::Range`]).
    pub partition: Partition,
    /// log2 of the DRAM level's entries (default 14: 16,384 entries of 256 records — 68 MiB of
    /// slots and fingerprints — plus the DRAM filters of the first PMem levels, 2 × 4 KiB per
    /// entry: about 137 MiB in all; the thesis uses 16).
    pub dram_bits: u32,
    /// Most PMem levels (default 4; each 16× the one above).
    pub max_levels: u32,
    /// Recovery logs (default 64, the thesis' sweet spot).
    pub logs: u32,
    /// Bytes per recovery-log chunk (default `None`: sized to the DRAM level, see
    /// [`PlushOptions::log_chunk_bytes`] — 1 MiB with the default 2^14 entries).
    pub log_chunk_bytes: Option<u64>,
    /// Chunks per recovery log (default: enough for twice what the DRAM level holds, plus two).
    pub log_chunks: Option<u32>,
    /// Payload logs (variable layout; default 8). A writer appends to the log of its thread
    /// ([`crate::device::thread_slot`] modulo this), so up to this many writers share none.
    pub payload_logs: u32,
    /// Bytes per payload chunk (default 4 MiB; bounds one record's key + value).
    pub payload_chunk_bytes: u64,
    /// Payload chunks at most (default 16,384: the locator's limit).
    pub payload_chunks: u32,
    /// PMem levels whose filters are also kept in DRAM (default 2, as the thesis).
    pub dram_filter_levels: u32,
    /// PMem levels whose buckets are all handed out when the level is created, in one
    /// contiguous area (entry `i`'s bucket `b` at `area + (16·i + b) · 256`), so migrations
    /// into them allocate nothing (default 1: level 0, 4 KiB per DRAM entry; the thesis
    /// pre-allocates levels 0 and 1 — here level 1 alone would be 64 KiB per DRAM entry,
    /// 1 GiB by default, taken whole when the level appears). A policy of the process that
    /// creates a level, not part of the format: the entries record every bucket's offset
    /// either way.
    pub prealloc_levels: u32,
    /// Background migrator threads (default 1; 0 = inserters migrate, as in the thesis).
    pub migrators: usize,
    /// Threads replaying the logs on open (default: available parallelism).
    pub recovery_threads: usize,
    /// Options of the region (durability mode, emulated profile, reservation).
    pub region: RegionOptions,
}

impl Default for PlushOptions {
    fn default() -> Self {
        PlushOptions {
            layout: PlushLayout::Variable,
            partition: Partition::Hash,
            dram_bits: 14,
            max_levels: 4,
            logs: 64,
            log_chunk_bytes: None,
            log_chunks: None,
            payload_logs: 8,
            payload_chunk_bytes: 4 << 20,
            payload_chunks: layout::MAX_PAYLOAD_CHUNKS,
            dram_filter_levels: 2,
            prealloc_levels: 1,
            migrators: 1,
            recovery_threads: std::thread::available_parallelism().map_or(1, usize::from),
            region: RegionOptions::default(),
        }
    }
}

impl PlushOptions {
    /// A tiny geometry (64 DRAM entries, 4 KiB log chunks, 3 levels, 8 KiB payload chunks):
    /// for tests, examples and small stores.
    pub fn small() -> Self {
        PlushOptions {
            dram_bits: 6,
            max_levels: 3,
            logs: 8,
            log_chunk_bytes: Some(16 << 10),
            payload_logs: 2,
            payload_chunk_bytes: 64 << 10,
            payload_chunks: 256,
            ..PlushOptions::default()
        }
    }

    /// Sets [`PlushOptions::layout`].
    pub fn layout(mut self, layout: PlushLayout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets [`PlushOptions::partition`].
    pub fn partition(mut self, partition: Partition) -> Self {
        self.partition = partition;
        self
    }

    /// Sets [`PlushOptions::dram_bits`].
    pub fn dram_bits(mut self, bits: u32) -> Self {
        self.dram_bits = bits;
        self
    }

    /// Sets [`PlushOptions::max_levels`].
    pub fn max_levels(mut self, levels: u32) -> Self {
        self.max_levels = levels;
        self
    }

    /// Sets [`PlushOptions::migrators`].
    pub fn migrators(mut self, threads: usize) -> Self {
        self.migrators = threads;
        self
    }

    /// Sets [`PlushOptions::region`].
    pub fn region(mut self, region: RegionOptions) -> Self {
        self.region = region;
        self
    }

    /// The recovery logs' chunk size: [`PlushOptions::log_chunk_bytes`] if set, else a log's
    /// share of what the DRAM level holds (32 bytes per record) in two chunks, a power of two
    /// within 16 KiB..=1 MiB — 1 MiB for the default 2^14 DRAM entries over 64 logs, 16 KiB
    /// for a small level, whose 64 logs would otherwise take 64 MiB with their first entries
    /// (docs/BENCHMARKS.md, Figure 41). (A large DRAM level may still double it, to bound the
    /// per-chunk epoch tables.)
    pub fn log_chunk_bytes(&self) -> u64 {
        self.log_chunk_bytes.unwrap_or_else(|| {
            let logs = u64::from(self.logs.clamp(1, 1 << self.dram_bits.min(31)));
            let records = (1u64 << self.dram_bits.min(40)) * layout::ENTRY_RECORDS as u64;
            (records * layout::LOG_ENTRY_BYTES / logs / 2)
                .next_power_of_two()
                .clamp(16 << 10, 1 << 20)
        })
    }

    fn geometry(&self) -> Result<Geometry> {
        // A chunk size given is checked as given (the search below may double it).
        if let Some(c) = self.log_chunk_bytes {
            layout::check_log_chunk_bytes(c).map_err(Error::InvalidArgument)?;
        }
        let logs = self.logs.min(1 << self.dram_bits.min(31));
        let entries_per_log = (1u64 << self.dram_bits.min(40)) / u64::from(logs.max(1));
        let live = entries_per_log * layout::ENTRY_RECORDS as u64;
        let mut log_chunk_bytes = self.log_chunk_bytes();
        let log_chunks = match self.log_chunks {
            Some(n) => n,
            None => loop {
                // Enough chunks for twice what the DRAM entries hold, plus two; larger chunks
                // when a large DRAM level would make the per-chunk epoch tables too big.
                let per_chunk = (log_chunk_bytes.saturating_sub(layout::LOG_CHUNK_HEADER))
                    / layout::LOG_ENTRY_BYTES;
                let needed = ((2 * live + 1).div_ceil(per_chunk.max(1)) + 2).max(3);
                if needed << self.dram_bits.min(40) <= layout::MAX_LOG_EPOCHS
                    || log_chunk_bytes >= 1 << 30
                {
                    break u32::try_from(needed).unwrap_or(u32::MAX);
                }
                log_chunk_bytes *= 2;
            },
        };
        let (payload_logs, payload_chunks) = match self.layout {
            PlushLayout::Fixed8 => (0, 0),
            PlushLayout::Variable => (self.payload_logs, self.payload_chunks),
        };
        let geo = Geometry {
            layout: self.layout,
            partition: self.partition,
            dram_bits: self.dram_bits,
            max_levels: self.max_levels,
            logs,
            log_chunks,
            log_chunk_bytes,
            payload_logs,
            payload_chunks,
            payload_chunk_bytes: self.payload_chunk_bytes,
        };
        geo.validate(None)?;
        Ok(geo)
    }
}

/// DRAM a store holds per DRAM entry with the default geometry, rounded up: 4 KiB of record
/// slots (256) and their fingerprints, 4.25 KiB of the Bloom filters of PMem levels 0 and 1
/// kept in DRAM (17 entries' blocks), recovery-log bookkeeping and the entry's locks (8.6 KiB
/// measured: `tierbase plush stats`).
pub const DRAM_BYTES_PER_ENTRY: u64 = 9 << 10;

/// DRAM a store holds whatever its DRAM level, with the default geometry, rounded up: the
/// payload's chunk table (16,384 chunks of 64 bytes: 1 MiB) and the 64 recovery logs' and 8
/// payload logs' structs and chunk tables.
pub const DRAM_BYTES_FIXED: u64 = 1088 << 10;

/// The smallest DRAM budget a store keeps to: 2^4 entries beside [`DRAM_BYTES_FIXED`].
pub const MIN_DRAM_BUDGET: u64 = DRAM_BYTES_FIXED + 16 * DRAM_BYTES_PER_ENTRY;

/// `dram_bits` for a DRAM budget: the most entries (`2^bits`) whose DRAM
/// ([`DRAM_BYTES_PER_ENTRY`] each) fits `budget` beside [`DRAM_BYTES_FIXED`], at most 2^20
/// (the limit with the default four levels). A budget below [`MIN_DRAM_BUDGET`] is refused:
/// no store keeps to it.
pub fn dram_bits_for_budget(budget: u64) -> Result<u32> {
    if budget < MIN_DRAM_BUDGET {
        return Err(Error::InvalidArgument(format!(
            "a DRAM budget of {budget} bytes is below Plush's smallest DRAM level, 2^4 entries \
             beside its fixed part ({} KiB)",
            MIN_DRAM_BUDGET >> 10
        )));
    }
    let entries = (budget - DRAM_BYTES_FIXED) / DRAM_BYTES_PER_ENTRY;
    Ok((63 - entries.leading_zeros()).min(20))
}

/// Always-on counters of a store.
#[derive(Debug, Default)]
struct Counters {
    puts: Counter,
    gets: Counter,
    deletes: Counter,
    log_entries: Counter,
    log_compactions: Counter,
    log_compactions_skipped: Counter,
    log_entries_copied: Counter,
    half_migrations: Counter,
    migrations: Counter,
    migrated_records: Counter,
    levels_created: Counter,
    buckets: Counter,
    filter_probes: Counter,
    filter_false_positives: Counter,
    media_reads: Counter,
    migration_media_bytes: Counter,
    duplicates_dropped: Counter,
    dangling_dropped: Counter,
    back_pressure: Counter,
    payload_bytes: Counter,
    payload_chunks: Counter,
    payload_collections: Counter,
    payload_chunks_damaged: Counter,
    payload_moved: Counter,
}

/// Records `pos` in the resume word at `at` (a payload chunk's or a log chunk's, see
/// docs/FORMAT-plush.md), durably: a clean close says where the chunk takes its next entry.
fn record_resume(region: &PmemRegion, at: u64, pos: u64) -> Result<()> {
    region.atomic_u64(at)?.store(pos, Ordering::Release);
    region.persist(at, 8)
}

/// The resume word at `at` (0: none), cleared durably when set, before anything is appended:
/// a crash after later appends must not be taken for a clean close.
fn take_resume(region: &PmemRegion, at: u64) -> Result<u64> {
    let word = region.atomic_u64(at)?;
    let pos = word.load(Ordering::Acquire);
    if pos != 0 {
        word.store(0, Ordering::Release);
        region.persist(at, 8)?;
    }
    Ok(pos)
}

/// Regions from this size on are grown ahead in the background (smaller growth steps are
/// quick; test stores stay below it, so their files stay as small as their structures).
const GROW_AHEAD_FROM: u64 = 256 << 20;

/// The store's state, shared by handles and background threads.
struct Inner {
    region: PmemRegion,
    geo: Geometry,
    path: Option<PathBuf>,
    failure: WriteFailure,
    space: RegionBump,
    dram: DramLevel,
    dirs: [AtomicU64; MAX_LEVELS as usize],
    level_create: Mutex<()>,
    /// See [`PlushOptions::prealloc_levels`].
    prealloc_levels: u32,
    dram_filters: Vec<ZeroedWords>,
    logs: Vec<Log>,
    payload: Option<Payload>,
    counters: Counters,
    /// DRAM entries with a frozen half, for the migrators.
    queue: SegQueue<u32>,
    migrators: Mutex<Vec<std::thread::Thread>>,
    sync_migration: bool,
    /// Live keys, counted by the writes that know (put and delete); `known` false after an
    /// open or a blind write until counted.
    count: AtomicI64,
    count_known: AtomicBool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlushStore")
            .field("path", &self.path)
            .field("layout", &self.geo.layout)
            .field("dram_bits", &self.geo.dram_bits)
            .finish()
    }
}

/// Most keys a batched lookup ([`Inner::get_many`]) moves through its stages together: about
/// as many misses as a core keeps in flight (each key starts several).
const GET_MANY_ROUND: usize = 8;

/// The key as the store handles it: its hash, the word the buckets hold, and (variable
/// layout) its bytes.
struct Probe<'a> {
    hash: u64,
    word: u64,
    bytes: &'a [u8],
    /// A user's read: a damaged entry met on the way is reported (`Err(Corrupt)`) rather
    /// than passed over. Writers, migrations and the collector pass over it as before (an
    /// error there would refuse writes of the key, or of every key, for one bad entry).
    report_damage: bool,
}

/// One record an ordered walk of a subtree met ([`Inner::subtree_live`]).
struct Sighting {
    /// The key's first 8 bytes as a number (sorts most keys without touching their bytes).
    prefix: u64,
    /// Where the key lies in the walk's key buffer, and its length.
    at: usize,
    len: usize,
    /// Age: 0 for the newest record the walk met.
    rank: usize,
    /// The record's value word (the value, or its payload locator).
    word: u64,
    tombstone: bool,
}

/// What one record says about a probed key.
enum Resolved {
    /// It is the key's record.
    Found(Found),
    /// It holds another key with the same hash.
    Other,
    /// Its payload was collected: it cannot say.
    Dangling,
}

/// The newest record of a key.
enum Found {
    /// A value: its word (its bytes are in the buffer the lookup was given, if any).
    Value(u64),
    /// A deletion (its word).
    Deleted(u64),
}

impl Found {
    /// The record's value word, a deletion's too.
    fn word(&self) -> u64 {
        match *self {
            Found::Value(w) | Found::Deleted(w) => w,
        }
    }
}

impl Inner {
    fn probe<'a>(&self, key: &'a [u8]) -> Result<Probe<'a>> {
        match self.geo.layout {
            PlushLayout::Fixed8 => {
                let word = u64::from_le_bytes(key.try_into().map_err(|_| Error::WrongSize {
                    what: "key",
                    len: key.len(),
                    expected: 8,
                })?);
                Ok(Probe {
                    hash: self.geo.hash_fixed(word),
                    word,
                    bytes: key,
                    report_damage: false,
                })
            }
            PlushLayout::Variable => {
                if key.is_empty() {
                    return Err(Error::EmptyKey);
                }
                let hash = self.geo.hash_key(key);
                Ok(Probe {
                    hash,
                    word: hash,
                    bytes: key,
                    report_damage: false,
                })
            }
        }
    }

    #[inline]
    fn dram_index(&self, hash: u64) -> usize {
        (hash & (self.geo.dram_entries() as u64 - 1)) as usize
    }

    /// What the record with value word `value` says about `probe`'s key; a value's bytes go
    /// into `out` if given.
    fn resolve(
        &self,
        probe: &Probe<'_>,
        value: u64,
        out: Option<&mut Vec<u8>>,
    ) -> Result<Resolved> {
        match &self.payload {
            None if value == TOMBSTONE => Ok(Resolved::Found(Found::Deleted(value))),
            None => {
                if let Some(out) = out {
                    out.clear();
                    out.extend_from_slice(&value.to_le_bytes());
                }
                Ok(Resolved::Found(Found::Value(value)))
            }
            Some(p) => Ok(
                match p.read_for(&self.region, value, probe.bytes, out, probe.report_damage)? {
                    Lookup::Key { live: true } => Resolved::Found(Found::Value(value)),
                    Lookup::Key { live: false } => Resolved::Found(Found::Deleted(value)),
                    Lookup::Other => Resolved::Other,
                    Lookup::Dangling => Resolved::Dangling,
                },
            ),
        }
    }

    /// The newest record of `probe`'s key: DRAM halves (active, then frozen), then the PMem
    /// levels top-down, each newest first.
    ///
    /// A candidate whose payload was collected meanwhile (its locator dangles) restarts the
    /// search: the collector put a newer record pointing at the copy first, which the restart
    /// finds; skipping the dangling one would return an older version. (A dangling record of
    /// another key with the same 64-bit hash would restart every time; after a few restarts
    /// such records are skipped.)
    ///
    /// `value`: where a found value's bytes go (`None`: the variable layout reads none).
    fn find(&self, probe: &Probe<'_>, value: Option<&mut Vec<u8>>) -> Result<Option<Found>> {
        self.dram.prefetch(self.dram_index(probe.hash));
        self.prefetch_levels(probe.hash);
        let hints = self.prefetch_buckets(probe.hash);
        self.search(probe, &hints, value)
    }

    /// [`Self::find`] without its prefetches (a batched lookup made them for every key first;
    /// `hints` are what its [`Self::prefetch_buckets`] returned).
    fn search(
        &self,
        probe: &Probe<'_>,
        hints: &BucketHints,
        mut value: Option<&mut Vec<u8>>,
    ) -> Result<Option<Found>> {
        let idx = self.dram_index(probe.hash);
        let mut restarts = 0;
        'search: loop {
            let skip_dangling = restarts >= 4;
            let e = &self.dram.entries[idx];
            let (a, b) = halves(e);
            let mut values = Candidates::new();
            let mut level = 0;
            let mut half = 0;
            loop {
                if half < 2 {
                    let h = if half == 0 { a } else { b };
                    self.dram
                        .candidates(idx, h, probe.word, probe.hash, &mut values);
                    half += 1;
                } else if level < self.geo.max_levels {
                    let exists = self.level_candidates(
                        level,
                        probe.word,
                        probe.hash,
                        hints.level(level),
                        &mut values,
                    )?;
                    level += 1;
                    if exists.is_none() {
                        return Ok(None);
                    }
                } else {
                    return Ok(None);
                }
                for &word in &values {
                    match self.resolve(probe, word, value.as_deref_mut())? {
                        Resolved::Found(f) => return Ok(Some(f)),
                        Resolved::Other => {}
                        Resolved::Dangling if skip_dangling => {}
                        Resolved::Dangling => {
                            restarts += 1;
                            continue 'search;
                        }
                    }
                }
            }
        }
    }

    /// The value word of `key`'s newest record (variable layout), deletions included.
    pub(super) fn newest_word(&self, hash: u64, key: &[u8]) -> Result<Option<u64>> {
        let probe = Probe {
            hash,
            word: hash,
            bytes: key,
            report_damage: false,
        };
        Ok(self.find(&probe, None)?.as_ref().map(Found::word))
    }

    /// Appends a record to DRAM entry `entry` (the caller holds its `insert` lock), logging
    /// it first unless `logged` is false. Freezes a full half and starts its migration.
    pub(super) fn append_locked(
        &self,
        entry: usize,
        key: u64,
        value: u64,
        logged: bool,
        with: Option<(u64, usize)>,
    ) -> Result<()> {
        let e = &self.dram.entries[entry];
        let (mut a, _) = halves(e);
        if e.halves[a].size.load(Ordering::Acquire) as usize >= HALF_SLOTS {
            self.switch_halves(entry)?;
            a = halves(e).0;
        }
        let h = &e.halves[a];
        let slot = h.size.load(Ordering::Acquire);
        let epoch = h.epoch.load(Ordering::Acquire);
        if logged {
            self.log_append(
                entry,
                &LogRecord {
                    key,
                    value,
                    epoch,
                    slot: slot as u8,
                },
                with,
            )?;
        }
        self.dram
            .write(entry, a, slot as usize, key, value, self.hash_of(key));
        h.size.store(slot + 1, Ordering::Release);
        Ok(())
    }

    /// The active half is full: freeze it and activate the other (migrating that one first if
    /// it is still frozen — the back-pressure that bounds DRAM), then hand the frozen half to
    /// a migrator (or migrate it here without migrators).
    fn switch_halves(&self, entry: usize) -> Result<()> {
        let e = &self.dram.entries[entry];
        let (a, b) = halves(e);
        if e.halves[b].frozen.load(Ordering::Acquire) {
            self.counters.back_pressure.incr();
            let _s = e.subtree.lock();
            if e.halves[b].frozen.load(Ordering::Acquire) {
                self.migrate_half(entry, b)?;
            }
        }
        let next = e.halves[a].epoch.load(Ordering::Acquire) + 1;
        e.halves[b].epoch.store(next, Ordering::Release);
        e.halves[a].frozen.store(true, Ordering::Release);
        e.active.store(b as u8, Ordering::Release);
        if self.sync_migration {
            let _s = e.subtree.lock();
            if e.halves[a].frozen.load(Ordering::Acquire) {
                self.migrate_half(entry, a)?;
            }
        } else if !e.queued.swap(true, Ordering::AcqRel) {
            self.queue.push(entry as u32);
            let m = self.migrators.lock();
            if !m.is_empty() {
                m[entry % m.len()].unpark();
            }
        }
        Ok(())
    }

    /// Migrates every frozen half waiting in the queue (a migrator's round).
    fn drain_queue(&self) {
        while let Some(entry) = self.queue.pop() {
            let e = &self.dram.entries[entry as usize];
            e.queued.store(false, Ordering::Release);
            let _s = e.subtree.lock();
            for half in 0..2 {
                if e.halves[half].frozen.load(Ordering::Acquire) {
                    let r = self.migrate_half(entry as usize, half);
                    if let Err(err) = self.failure.record("plush", r) {
                        tracing::warn!("plush migration of DRAM entry {entry}: {err}");
                    }
                }
            }
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.failure.check(self.path.as_deref())
    }

    fn check_value(&self, value: &[u8]) -> Result<u64> {
        match self.geo.layout {
            PlushLayout::Fixed8 => {
                let v = u64::from_le_bytes(value.try_into().map_err(|_| Error::WrongSize {
                    what: "value",
                    len: value.len(),
                    expected: 8,
                })?);
                if v == TOMBSTONE {
                    return Err(Error::InvalidArgument(format!(
                        "{TOMBSTONE:#x} is the deletion marker of a fixed-layout store and \
                         cannot be stored as a value"
                    )));
                }
                Ok(v)
            }
            PlushLayout::Variable => Ok(0),
        }
    }

    /// Refuses a record this store cannot hold (the checks a write makes before writing).
    fn check_record(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.probe(key)?;
        self.check_value(value)?;
        match &self.payload {
            Some(p) => p.check_entry(key.len(), value.len()),
            None => Ok(()),
        }
    }

    /// Writes `key` → `value` (`None`: a deletion). `check`: answer whether the key existed
    /// (a lookup under the key's lock); `logged`: write the recovery-log entry.
    fn write(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        check: bool,
        logged: bool,
    ) -> Result<Option<bool>> {
        self.check_writable()?;
        // Whatever it supersedes is only counted and marked dead: no value bytes needed.
        let probe = self.probe(key)?;
        let fixed_value = match value {
            Some(v) => self.check_value(v)?,
            None => TOMBSTONE,
        };
        let idx = self.dram_index(probe.hash);
        // The entry's lock word and fingerprints load while the payload is written.
        self.dram.prefetch(idx);
        // Variable layout: the payload first, outside the entry's lock (it may collect).
        let payload = match &self.payload {
            Some(_) => Some(self.failure.record(
                "plush",
                self.payload_append(key, value.unwrap_or(&[]), value.is_none(), true, !logged),
            )?),
            None => None,
        };
        // The entry's line has had the payload's time to arrive: the slot lines next.
        self.dram.prefetch_next_slot(idx);
        let value_word = payload.as_ref().map_or(fixed_value, |p| p.word);
        // A logged write persists its payload with its log entry (one fence).
        let with = payload.as_ref().and_then(|p| p.unpersisted);
        let e = &self.dram.entries[idx];
        let _g = e.insert.lock();
        // The record this write supersedes, if known: a checked write finds it anywhere. A
        // blind one of the variable layout looks in the active DRAM half only, so that a hot
        // key's overwrites count as dead payload at once (the collector starts by that count);
        // an older record elsewhere is marked by the migration that first meets both
        // (`Inner::dedup`). Searching both halves took 15 % of an insert's instructions
        // (docs/BENCHMARKS.md, Figure 41).
        let (existed, superseded) = if check {
            match self.find(&probe, None)? {
                Some(Found::Value(w)) => (Some(true), Some(w)),
                Some(Found::Deleted(w)) => (Some(false), Some(w)),
                None => (Some(false), None),
            }
        } else if self.payload.is_some() {
            let newest = self
                .dram
                .newest_in_active(idx, probe.word, probe.hash, |value| {
                    Ok(matches!(
                        self.resolve(&probe, value, None)?,
                        Resolved::Found(_)
                    ))
                })?;
            (None, newest)
        } else {
            (None, None)
        };
        if value.is_none() && existed == Some(false) {
            // Deleting an absent key writes nothing (its payload entry is dead weight).
            if let (Some(appended), Some(p)) = (&payload, &self.payload) {
                p.mark_dead(&self.region, appended.word);
            }
            return Ok(existed);
        }
        let r = self.append_locked(idx, probe.word, value_word, logged, with);
        if let Err(e) = self.failure.record("plush", r) {
            // A refusal (no room to migrate or for a log chunk) came before the log entry was
            // written: nothing will index the payload entry, which is dead weight. After a
            // media error the entry may have reached media and recovery would index it.
            if let (Error::StoreFull { .. }, Some(appended), Some(p)) =
                (&e, &payload, &self.payload)
            {
                p.mark_dead(&self.region, appended.word);
            }
            return Err(e);
        }
        drop(payload);
        if let (Some(old), Some(p)) = (superseded, &self.payload) {
            p.mark_dead(&self.region, old);
        }
        match (existed, value.is_some()) {
            (Some(false), true) => {
                self.count.fetch_add(1, Ordering::AcqRel);
            }
            (Some(true), false) => {
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
            // Read first: a store on every blind write would take the line from the other
            // writers' cores each time, though it only changes once.
            (None, _) if self.count_known.load(Ordering::Acquire) => {
                self.count_known.store(false, Ordering::Release);
            }
            _ => {}
        }
        Ok(existed)
    }

    /// [`Self::probe`] for a user's read, which reports damage it meets
    /// ([`Probe::report_damage`]).
    fn read_probe<'a>(&self, key: &'a [u8]) -> Result<Probe<'a>> {
        Ok(Probe {
            report_damage: true,
            ..self.probe(key)?
        })
    }

    fn get_into(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        let probe = self.read_probe(key)?;
        self.counters.gets.incr();
        Ok(matches!(
            self.find(&probe, Some(value))?,
            Some(Found::Value(_))
        ))
    }

    /// Batched lookups: `values[i]` receives key `i`'s value and `found[i]` whether it exists.
    /// A lookup waits for three misses one after another (a level's entry and filter line, its
    /// bucket, the payload); here the first two stages are started for a round of keys before
    /// any key takes the next, so the keys' misses overlap. The payload's miss is left to the
    /// search: prefetching it as a third stage measured slower (docs/BENCHMARKS.md, Figure
    /// 36). Each key is then searched exactly as [`Self::get_into`] searches it (the batch is
    /// not a snapshot).
    fn get_many(&self, keys: &[&[u8]], values: &mut [Vec<u8>], found: &mut [bool]) -> Result<()> {
        crate::store::check_batch(keys, values, found)?;
        let mut probes: smallvec::SmallVec<[Probe<'_>; GET_MANY_ROUND]> = smallvec::SmallVec::new();
        let mut hints: smallvec::SmallVec<[BucketHints; GET_MANY_ROUND]> =
            smallvec::SmallVec::new();
        for (start, round) in (0..)
            .step_by(GET_MANY_ROUND)
            .zip(keys.chunks(GET_MANY_ROUND))
        {
            probes.clear();
            for key in round {
                probes.push(self.read_probe(key)?);
            }
            // Each key's DRAM entry, level entries and (DRAM) filter lines.
            for p in &probes {
                self.dram.prefetch(self.dram_index(p.hash));
                self.prefetch_levels(p.hash);
            }
            // The buckets the filters let through, now that the filter lines are in.
            hints.clear();
            for p in &probes {
                hints.push(self.prefetch_buckets(p.hash));
            }
            for (i, (p, h)) in probes.iter().zip(&hints).enumerate() {
                self.counters.gets.incr();
                let value = &mut values[start + i];
                found[start + i] = matches!(self.search(p, h, Some(value))?, Some(Found::Value(_)));
            }
        }
        Ok(())
    }

    /// Migrates every DRAM half to PMem (the recovery logs then hold nothing live).
    fn checkpoint(&self) -> Result<()> {
        self.check_writable()?;
        for idx in 0..self.dram.entries.len() {
            let r = self.checkpoint_entry(idx);
            self.failure.record("plush", r)?;
        }
        Ok(())
    }

    /// Migrates both halves of DRAM entry `idx` to PMem.
    fn checkpoint_entry(&self, idx: usize) -> Result<()> {
        let e = &self.dram.entries[idx];
        let _g = e.insert.lock();
        let _s = e.subtree.lock();
        let (a, b) = halves(e);
        if e.halves[b].frozen.load(Ordering::Acquire) {
            self.migrate_half(idx, b)?;
        }
        if e.halves[a].size.load(Ordering::Acquire) > 0 {
            // Freeze the active half and migrate it; the other becomes active.
            let next = e.halves[a].epoch.load(Ordering::Acquire) + 1;
            e.halves[b].epoch.store(next, Ordering::Release);
            e.halves[a].frozen.store(true, Ordering::Release);
            e.active.store(b as u8, Ordering::Release);
            self.migrate_half(idx, a)?;
        }
        Ok(())
    }

    /// Every live key of DRAM entry `idx`'s subtree (the subtree is locked while its key words
    /// are read; the collector is kept away until their keys are resolved, so a key's newest
    /// locator cannot dangle meanwhile).
    fn subtree_keys(&self, idx: usize, out: &mut Vec<Vec<u8>>) -> Result<()> {
        let _pinned = self.payload.as_ref().map(Payload::pin);
        let e = &self.dram.entries[idx];
        let _s = e.subtree.lock();
        let mut words: Vec<u64> = Vec::new();
        let (a, b) = halves(e);
        for half in [a, b] {
            let recs = self.dram.records(idx, half);
            words.extend(recs.iter().rev().map(|r| r.0));
        }
        let mut stack = vec![(0u32, idx as u64)];
        while let Some((level, i)) = stack.pop() {
            if self.level_dir(level).is_none() {
                continue;
            }
            let (recs, _) = self.entry_records(level, i)?;
            words.extend(recs.iter().map(|r| r.key));
            if level + 1 < self.geo.max_levels {
                let bits = self.geo.level_bits(level);
                for t in 0..layout::FANOUT as u64 {
                    stack.push((level + 1, i | (t << bits)));
                }
            }
        }
        drop(_s);
        // Each distinct key word once, then its newest record decides.
        words.sort_unstable();
        words.dedup();
        for w in words {
            match &self.payload {
                None => {
                    let key = w.to_le_bytes();
                    if let Some(Found::Value(..)) = self.find(&self.probe(&key)?, None)? {
                        out.push(key.to_vec());
                    }
                }
                Some(_) => {
                    for key in self.keys_with_hash(idx, w)? {
                        if let Some(Found::Value(..)) = self.find(&self.probe(&key)?, None)? {
                            out.push(key);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The `room` smallest live keys in `start..end` of DRAM entry `idx`'s subtree, in key
    /// order, with their newest value words (deletions left out). The subtree is read under
    /// its lock, newest first (the DRAM halves, then each PMem entry before the entries below
    /// it, each entry's records last slot first); keys outside the range are dropped as they
    /// are read (variable layout: from the payload, keys only, into one buffer), the rest
    /// sorted by key and, among equal keys, by that order, so each key's first is its newest.
    /// The caller holds [`Payload::pin`] (taken before the subtree lock, as collections take
    /// theirs) until it has read the values: a newest version's locator cannot dangle then,
    /// so a dangling one is an older version's whose payload was collected, and is skipped.
    fn subtree_live(
        &self,
        idx: usize,
        start: &[u8],
        end: Option<&[u8]>,
        room: usize,
    ) -> Result<Vec<(Vec<u8>, u64)>> {
        let e = &self.dram.entries[idx];
        let mut words: Vec<(u64, u64)> = Vec::new();
        {
            let _s = e.subtree.lock();
            let (a, b) = halves(e);
            for half in [a, b] {
                words.extend(self.dram.records(idx, half).into_iter().rev());
            }
            let mut stack = vec![(0u32, idx as u64)];
            while let Some((level, i)) = stack.pop() {
                if self.level_dir(level).is_none() {
                    continue;
                }
                let (recs, _) = self.entry_records(level, i)?;
                words.extend(recs.iter().rev().map(|r| (r.key, r.value)));
                if level + 1 < self.geo.max_levels {
                    let bits = self.geo.level_bits(level);
                    for t in 0..layout::FANOUT as u64 {
                        stack.push((level + 1, i | (t << bits)));
                    }
                }
            }
        }
        let mut keys: Vec<u8> = Vec::new();
        let mut found: Vec<Sighting> = Vec::with_capacity(words.len());
        for (rank, (k, v)) in words.into_iter().enumerate() {
            let at = keys.len();
            let tombstone = match &self.payload {
                None => {
                    keys.extend_from_slice(&k.to_le_bytes());
                    v == TOMBSTONE
                }
                Some(p) => match p.read_key_into(&self.region, v, &mut keys)? {
                    Some(t) => t,
                    None => continue,
                },
            };
            let key = &keys[at..];
            if key < start || end.is_some_and(|e| key >= e) {
                keys.truncate(at);
                continue;
            }
            found.push(Sighting {
                prefix: layout::key_prefix(key),
                at,
                len: keys.len() - at,
                rank,
                word: v,
                tombstone,
            });
        }
        let key = |r: &Sighting| &keys[r.at..r.at + r.len];
        // By key (the number first: most keys differ in their first 8 bytes), then newest
        // first.
        found.sort_unstable_by(|a, b| {
            a.prefix
                .cmp(&b.prefix)
                .then_with(|| key(a).cmp(key(b)))
                .then(a.rank.cmp(&b.rank))
        });
        found.dedup_by(|later, first| key(later) == key(first));
        Ok(found
            .iter()
            .filter(|r| !r.tombstone)
            .take(room)
            .map(|r| (key(r).to_vec(), r.word))
            .collect())
    }

    /// The value a live record's value word stands for (the caller holds [`Payload::pin`]
    /// since the word was read, so its payload is still there).
    fn value_of(&self, word: u64) -> Result<Vec<u8>> {
        match &self.payload {
            None => Ok(word.to_le_bytes().to_vec()),
            Some(p) => p
                .read_checked(&self.region, word)?
                .map(|e| e.value)
                .ok_or_else(|| {
                    Error::corrupt(
                        self.path.as_deref(),
                        "a payload entry vanished while an ordered scan held off collection",
                    )
                }),
        }
    }

    /// The distinct keys (bytes) of records whose hash is `hash` in DRAM entry `idx`'s subtree.
    fn keys_with_hash(&self, idx: usize, hash: u64) -> Result<Vec<Vec<u8>>> {
        let p = self.payload.as_ref().expect("variable layout");
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values = Vec::new();
        let mut cands = Candidates::new();
        for half in 0..2 {
            self.dram.candidates(idx, half, hash, hash, &mut cands);
            values.extend_from_slice(&cands);
        }
        let mut level_values = Candidates::new();
        for level in 0..self.geo.max_levels {
            if self
                .level_candidates(level, hash, hash, BucketHint::default(), &mut level_values)?
                .is_none()
            {
                break;
            }
            values.extend_from_slice(&level_values);
        }
        for v in values {
            if let Some(e) = p.read(&self.region, v)?
                && !keys.contains(&e.key)
            {
                keys.push(e.key);
            }
        }
        Ok(keys)
    }
}

/// A Plush store: a cheap, cloneable, `'static` handle (an `Arc` inside).
#[derive(Clone)]
pub struct PlushStore {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Arc<Inner>,
    workers: Mutex<Vec<Background>>,
    recovery: RecoveryReport,
    count_lock: Mutex<()>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for mut w in self.workers.lock().drain(..) {
            w.stop();
        }
        self.inner.migrators.lock().clear();
    }
}

impl std::fmt::Debug for PlushStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.inner.fmt(f)
    }
}

/// Space, memory and work of a store (`tierbase plush stats`).
#[derive(Clone, Debug, Serialize)]
pub struct PlushStats {
    /// Record layout.
    pub layout: PlushLayout,
    /// How keys are spread over the DRAM entries.
    pub partition: Partition,
    /// Live keys, if counted (a blind write makes the count unknown until [`PlushStore::len`]).
    pub records: Option<u64>,
    /// Durability mode of the region.
    pub durability: DurabilityMode,
    /// What an acknowledged write survives.
    pub guarantee: &'static str,
    /// The flush instruction persists use.
    pub flush: &'static str,
    /// The vector search of buckets (`avx512`, `avx2`, `scalar`).
    pub key_search: &'static str,
    /// "none" or "emulated <profile>".
    pub emulation: String,
    /// DRAM entries, and PMem levels created (of the most allowed).
    pub dram_entries: usize,
    /// PMem levels created.
    pub levels: u32,
    /// Most PMem levels.
    pub max_levels: u32,
    /// Region bytes.
    pub region_bytes: u64,
    /// Bytes handed out (directories, buckets, chunks).
    pub space_used: u64,
    /// Payload bytes in use and known dead (variable layout).
    pub payload_bytes: u64,
    /// Payload bytes known to be superseded.
    pub payload_dead_bytes: u64,
    /// Payload bytes not known to be superseded (what collection works from).
    pub payload_live_bytes: u64,
    /// DRAM held by the store (fixed by configuration).
    pub dram_bytes: u64,
    /// Records waiting in DRAM (both halves of every entry).
    pub dram_records: u64,
    /// Counters as (name, value).
    pub counters: Vec<(String, u64)>,
    /// Why the store refuses writes, if a write failed.
    pub read_only: Option<String>,
}

impl PlushStore {
    /// Creates a store in a new region file at `path`.
    pub fn create(path: impl AsRef<Path>, opts: &PlushOptions) -> Result<Self> {
        let geo = opts.geometry()?;
        let region = PmemRegion::create(
            path.as_ref(),
            geo.space_offset() + layout::RESERVE_STEP,
            &opts.region,
        )?;
        Self::create_in(region, opts)
    }

    /// Opens the store in the region file at `path`, replaying its recovery logs.
    pub fn open(path: impl AsRef<Path>, opts: &PlushOptions) -> Result<Self> {
        let region = PmemRegion::open(path.as_ref(), &opts.region)?;
        Self::open_in(region, opts)
    }

    /// Creates a store in `region`, which must be all zeros.
    pub fn create_in(region: PmemRegion, opts: &PlushOptions) -> Result<Self> {
        let geo = opts.geometry()?;
        let need = geo.space_offset() + layout::RESERVE_STEP;
        if region.len() < need {
            region.grow(need)?;
        }
        let mut hdr = vec![0u8; HEADER_LEN as usize];
        region.read(0, &mut hdr)?;
        if hdr.iter().any(|&b| b != 0) {
            return Err(Error::InvalidArgument(
                "create_in needs an empty region; this one already holds data".into(),
            ));
        }
        geo.encode(&mut hdr);
        hdr[layout::header::RESERVED_END..layout::header::RESERVED_END + 8]
            .copy_from_slice(&geo.space_offset().to_le_bytes());
        // Everything but the magic first, then the magic: a crash leaves no store or a whole
        // header.
        region.write(8, &hdr[8..])?;
        region.persist(0, HEADER_LEN as usize)?;
        region.write(0, &hdr[..8])?;
        region.persist(0, 8)?;
        Self::open_in(region, opts)
    }

    /// Opens the store held in `region`, replaying its recovery logs.
    pub fn open_in(region: PmemRegion, opts: &PlushOptions) -> Result<Self> {
        let started = Instant::now();
        let (inner, mut report, reseal) = recovery::open(region, opts)?;
        let inner = Arc::new(inner);
        let mut workers = Vec::new();
        // Read-only (a copy-on-write mapping: recovery's repairs stayed in this process):
        // every write is refused; no migrator, grower or open-time migration runs (lookups
        // search frozen halves as they are).
        let read_only = inner.region.is_read_only();
        if read_only {
            inner.failure.open_read_only();
        }
        for i in 0..if read_only { 0 } else { opts.migrators } {
            let w = Background::spawn(
                &format!("plush-migrate-{i}"),
                inner.clone(),
                Duration::from_millis(5),
                |inner, ticker| {
                    loop {
                        inner.drain_queue();
                        if !ticker.next() {
                            break;
                        }
                    }
                },
            )
            .map_err(|e| Error::io("spawn migrator", None, e))?;
            if let Some(t) = w.handle() {
                inner.migrators.lock().push(t);
            }
            workers.push(w);
        }
        // A large region grows ahead of the writers, off their path (an allocation that has
        // to grow it by a quarter holds the allocator meanwhile: seconds at gigabytes). Not
        // under the crash simulator, whose persist points must be the store's own.
        if !inner.region.info().crash_simulated && !read_only {
            let w = Background::spawn(
                "plush-grow",
                inner.clone(),
                Duration::from_millis(10),
                |inner, ticker| {
                    while ticker.next() {
                        if inner.region.len() < GROW_AHEAD_FROM {
                            continue;
                        }
                        if let Err(e) = inner.space.grow_ahead(&inner.region) {
                            // Writers grow the region themselves and report what fails there.
                            tracing::warn!("plush: growing the region ahead failed: {e}");
                            break;
                        }
                    }
                },
            )
            .map_err(|e| Error::io("spawn grower", None, e))?;
            workers.push(w);
        }
        // Halves recovery found frozen migrate now, and every log gets its spare back.
        if !read_only {
            inner.drain_queue();
            for idx in reseal {
                inner.checkpoint_entry(idx)?;
            }
            inner.finish_collections()?;
            for l in 0..inner.logs.len() {
                inner.settle_log(l)?;
            }
        }
        report.total = started.elapsed();
        Ok(PlushStore {
            shared: Arc::new(Shared {
                inner,
                workers: Mutex::new(workers),
                recovery: report,
                count_lock: Mutex::new(()),
            }),
        })
    }

    /// Opens `path` if it exists, else creates it.
    pub fn open_or_create(path: impl AsRef<Path>, opts: &PlushOptions) -> Result<Self> {
        if path.as_ref().exists() {
            Self::open(path, opts)
        } else {
            Self::create(path, opts)
        }
    }

    fn inner(&self) -> &Inner {
        &self.shared.inner
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// Reads `key`'s value into `value`; returns whether it exists (reuses `value`'s
    /// allocation: a loop of lookups allocates nothing). When it returns `false`, `value`
    /// holds nothing meaningful.
    pub fn get_into(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        self.inner().get_into(key, value)
    }

    /// Reads a batch of keys: `values[i]` receives key `i`'s value (reusing its allocation)
    /// and `found[i]` whether it exists (the three slices have equal lengths). Part of the
    /// keys' cache misses overlap, so scattered keys read somewhat faster than one
    /// [`Self::get_into`] after another (1.08× in Figure 36); each key is read as `get_into`
    /// reads it (the batch is not a snapshot).
    pub fn get_many(
        &self,
        keys: &[&[u8]],
        values: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<()> {
        self.inner().get_many(keys, values, found)
    }

    /// Inserts or replaces `key`; returns whether it was new. Durable when it returns.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.inner().counters.puts.incr();
        Ok(self.inner().write(key, Some(value), true, true)? == Some(false))
    }

    /// Removes `key`; returns whether it existed. Durable when it returns.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        self.inner().counters.deletes.incr();
        Ok(self.inner().write(key, None, true, true)? == Some(true))
    }

    /// Inserts or replaces `key` without looking it up first (the thesis' upsert: no answer
    /// whether it existed, so [`PlushStore::len`] counts afresh afterwards). Durable when it
    /// returns.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner().counters.puts.incr();
        self.inner()
            .write(key, Some(value), false, true)
            .map(|_| ())
    }

    /// Deletes `key` without looking it up first (a tombstone whether or not it existed).
    pub fn remove(&self, key: &[u8]) -> Result<()> {
        self.inner().counters.deletes.incr();
        self.inner().write(key, None, false, true).map(|_| ())
    }

    /// Bulk load: inserts without a recovery-log entry. **Not durable** until
    /// [`PlushStore::checkpoint`] returns; a crash before loses what such inserts left in DRAM.
    pub fn upsert_unlogged(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner().counters.puts.incr();
        self.inner()
            .write(key, Some(value), false, false)
            .map(|_| ())
    }

    /// Moves everything in DRAM to PMem: afterwards the recovery logs hold nothing live (the
    /// next open replays nothing) and unlogged inserts are durable.
    pub fn checkpoint(&self) -> Result<()> {
        self.inner().checkpoint()
    }

    /// Reads `key` and applies `decide`'s answer atomically (no other writer of the key acts
    /// in between); `decide` is called exactly once, holding the key's DRAM entry, and must
    /// not write to this store (a key of the same entry would wait for it forever).
    pub fn modify(
        &self,
        key: &[u8],
        decide: &mut dyn FnMut(Option<&[u8]>) -> Change,
    ) -> Result<()> {
        let inner = self.inner();
        inner.check_writable()?;
        let probe = inner.probe(key)?;
        if inner.payload.is_some() {
            // The payload is written under the entry's lock, where it cannot be collected:
            // make room first if the payload is short of it.
            let r = inner.payload_relief();
            inner.failure.record("plush", r)?;
        }
        let idx = inner.dram_index(probe.hash);
        let e = &inner.dram.entries[idx];
        let mut guard = e.insert.lock();
        let mut bytes = Vec::new();
        let found = inner.find(&probe, Some(&mut bytes))?;
        // The record this one supersedes: its payload entry is dead once the new one is
        // indexed (as a write marks it), which is what collection starts from.
        let mut superseded = found.as_ref().map(Found::word);
        let current = match found {
            Some(Found::Value(_)) => Some(bytes),
            _ => None,
        };
        let existed = current.is_some();
        let change = decide(current.as_deref());
        let (new_value, deleting) = match change {
            Change::Keep => return Ok(()),
            Change::Delete if !existed => return Ok(()),
            Change::Delete => (Vec::new(), true),
            Change::Put(v) => (v, false),
        };
        let (value_word, pending) = match &inner.payload {
            None if deleting => (TOMBSTONE, None),
            None => (inner.check_value(&new_value)?, None),
            Some(_) => {
                let mut attempt = inner.payload_append(key, &new_value, deleting, false, true);
                if matches!(attempt, Err(Error::StoreFull { .. })) {
                    // The payload filled up under the lock. Collect without it, then apply the
                    // same decision if nothing changed the key meanwhile (decide runs once).
                    drop(guard);
                    let r = inner.payload_relief_now();
                    inner.failure.record("plush", r)?;
                    guard = e.insert.lock();
                    let mut bytes = Vec::new();
                    let found = inner.find(&probe, Some(&mut bytes))?;
                    // The collection may have moved the record: the one now indexed is the
                    // one this write supersedes.
                    superseded = found.as_ref().map(Found::word);
                    let now = match found {
                        Some(Found::Value(_)) => Some(bytes),
                        _ => None,
                    };
                    if now != current {
                        return Err(Error::StoreFull {
                            used: inner.payload.as_ref().map_or(0, |p| p.usage().0),
                            capacity: 0,
                            reason: "the payload was full, and the key changed while room was \
                                     made: modify did not apply"
                                .into(),
                        });
                    }
                    attempt = inner.payload_append(key, &new_value, deleting, false, true);
                }
                let appended = inner.failure.record("plush", attempt)?;
                (appended.word, Some(appended.pending))
            }
        };
        let r = inner.append_locked(idx, probe.word, value_word, true, None);
        if let Err(e) = inner.failure.record("plush", r) {
            // As in `Inner::write`: only a refusal leaves the payload entry unindexed for sure.
            if let (Error::StoreFull { .. }, Some(p), Some(_)) = (&e, &inner.payload, &pending) {
                p.mark_dead(&inner.region, value_word);
            }
            return Err(e);
        }
        drop(pending);
        if let (Some(old), Some(p)) = (superseded, &inner.payload) {
            p.mark_dead(&inner.region, old);
        }
        drop(guard);
        match (existed, deleting) {
            (false, false) => {
                inner.count.fetch_add(1, Ordering::AcqRel);
            }
            (true, true) => {
                inner.count.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
        Ok(())
    }

    /// Live keys. Counted by `put`/`delete` as they go; after an open or a blind write, counted
    /// by a walk of the whole store (exact when no write runs meanwhile).
    pub fn len(&self) -> Result<u64> {
        let inner = self.inner();
        if inner.count_known.load(Ordering::Acquire) {
            return Ok(inner.count.load(Ordering::Acquire).max(0) as u64);
        }
        let _g = self.shared.count_lock.lock();
        if inner.count_known.load(Ordering::Acquire) {
            return Ok(inner.count.load(Ordering::Acquire).max(0) as u64);
        }
        let mut keys = Vec::new();
        let mut n = 0u64;
        for idx in 0..inner.dram.entries.len() {
            keys.clear();
            inner.subtree_keys(idx, &mut keys)?;
            n += keys.len() as u64;
        }
        inner.count.store(n as i64, Ordering::Release);
        inner.count_known.store(true, Ordering::Release);
        Ok(n)
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Appends the live keys of the DRAM entries from `cursor` on (and everything below them)
    /// to `out`, until at least `count` were added; returns the cursor to go on from (0: done).
    /// A key present for the whole walk is returned exactly once (its subtree is read under
    /// the subtree's lock); keys written meanwhile may or may not appear.
    pub fn scan(&self, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> Result<u64> {
        let inner = self.inner();
        let n = inner.dram.entries.len() as u64;
        let mut idx = cursor;
        let start = out.len();
        while idx < n {
            inner.subtree_keys(idx as usize, out)?;
            idx += 1;
            if out.len() - start >= count {
                break;
            }
        }
        Ok(if idx >= n { 0 } else { idx })
    }

    /// Appends to `out` the live records with keys in `start..end` (`end` exclusive; `None`:
    /// to the last key) in byte-wise key order, at most `limit` of them, and returns where
    /// to go on from (`Some(key)`: call again with it as `start`; `None`: the range is done).
    /// Needs a range-partitioned store ([`Partition::Range`]): it reads only the DRAM entries
    /// whose key slice meets the range, each with everything below it, and sorts each one's
    /// records. Weakly consistent, like [`PlushStore::scan`]: each entry is read under its
    /// subtree's lock, so a key present for the whole call is returned exactly once with a
    /// value it held during the call; keys written meanwhile may or may not appear.
    pub fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Option<Vec<u8>>> {
        let inner = self.inner();
        if inner.geo.partition != Partition::Range {
            return Err(Error::InvalidArgument(
                "ordered scans need a range-partitioned Plush store (created with partition range); \
                 this one is partitioned by hash"
                    .into(),
            ));
        }
        if limit == 0 {
            return Err(Error::InvalidArgument(
                "an ordered scan needs a limit of at least 1".into(),
            ));
        }
        if end.is_some_and(|e| e <= start) {
            return Ok(None);
        }
        let last = end.map_or(inner.dram.entries.len() - 1, |e| inner.geo.range_entry(e));
        let begin = out.len();
        let mut idx = inner.geo.range_entry(start);
        while idx <= last {
            let _pinned = inner.payload.as_ref().map(Payload::pin);
            let room = limit - (out.len() - begin);
            for (k, word) in inner.subtree_live(idx, start, end, room)? {
                out.push((k, inner.value_of(word)?));
            }
            idx += 1;
            if out.len() - begin == limit {
                // Go on from the smallest key after the last one returned.
                let mut next = out.last().map(|r| r.0.clone()).unwrap_or_default();
                next.push(0);
                return Ok(Some(next));
            }
        }
        Ok(None)
    }

    /// What recovery found and did when this handle's store was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.shared.recovery
    }

    /// How keys are spread over the DRAM entries (fixed when the store is created).
    pub fn partition(&self) -> Partition {
        self.inner().geo.partition
    }

    /// Space, memory and counters.
    pub fn stats(&self) -> PlushStats {
        let inner = self.inner();
        let c = &inner.counters;
        let (payload_bytes, payload_dead_bytes) =
            inner.payload.as_ref().map_or((0, 0), Payload::usage);
        let dram_filter_bytes: u64 = inner
            .dram_filters
            .iter()
            .map(|f| f.reserved_bytes() as u64)
            .sum();
        // Each recovery log: its epoch table, its struct and its two chunk tables (offsets and
        // generations, one word per chunk, sized by the geometry); the payload's chunk table
        // (1 MiB with the default 16,384 chunks) and its logs' positions.
        let log_tables = std::mem::size_of::<log::Log>() + 2 * 8 * inner.geo.log_chunks as usize;
        let log_bytes: u64 = inner
            .logs
            .iter()
            .map(|l| (l.max_epoch.len() * 4 + log_tables) as u64)
            .sum::<u64>()
            + inner.payload.as_ref().map_or(0, Payload::bookkeeping_bytes);
        let info = inner.region.info();
        let counters = [
            ("puts", c.puts.get()),
            ("gets", c.gets.get()),
            ("deletes", c.deletes.get()),
            ("log_entries", c.log_entries.get()),
            ("log_compactions", c.log_compactions.get()),
            ("log_compactions_skipped", c.log_compactions_skipped.get()),
            ("log_entries_copied", c.log_entries_copied.get()),
            ("half_migrations", c.half_migrations.get()),
            ("migrations", c.migrations.get()),
            ("migrated_records", c.migrated_records.get()),
            ("buckets", c.buckets.get()),
            ("filter_probes", c.filter_probes.get()),
            ("filter_false_positives", c.filter_false_positives.get()),
            ("media_blocks_read", c.media_reads.get()),
            (
                "media_blocks_written",
                inner.region.counters().media_lines_written,
            ),
            ("migration_media_bytes", c.migration_media_bytes.get()),
            ("duplicates_dropped", c.duplicates_dropped.get()),
            ("dangling_dropped", c.dangling_dropped.get()),
            ("back_pressure", c.back_pressure.get()),
            ("payload_bytes_written", c.payload_bytes.get()),
            ("payload_collections", c.payload_collections.get()),
            ("payload_chunks_damaged", c.payload_chunks_damaged.get()),
            ("payload_entries_moved", c.payload_moved.get()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        PlushStats {
            layout: inner.geo.layout,
            partition: inner.geo.partition,
            records: inner
                .count_known
                .load(Ordering::Acquire)
                .then(|| inner.count.load(Ordering::Acquire).max(0) as u64),
            durability: info.durability,
            guarantee: inner.region.guarantee_label(),
            flush: inner.region.flush_instruction().name(),
            key_search: KeySearch::detected().name(),
            emulation: info.emulation,
            dram_entries: inner.geo.dram_entries(),
            levels: (0..inner.geo.max_levels)
                .filter(|&l| inner.level_dir(l).is_some())
                .count() as u32,
            max_levels: inner.geo.max_levels,
            region_bytes: inner.region.len(),
            space_used: inner.space.used(),
            payload_bytes,
            payload_dead_bytes,
            payload_live_bytes: inner.payload.as_ref().map_or(0, Payload::live_bytes),
            dram_bytes: inner.dram.bytes() + dram_filter_bytes + log_bytes,
            dram_records: inner.dram.entries.iter().map(dram::held).sum(),
            counters,
            read_only: inner.failure.reason(),
        }
    }

    /// Stops the migrators after they finish what is queued, and releases the store. Every
    /// acknowledged write was durable already; the next open replays the logs.
    pub fn close(self) -> Result<()> {
        for mut w in self.shared.workers.lock().drain(..) {
            w.stop();
        }
        self.inner().migrators.lock().clear();
        if self.inner().failure.opened_read_only() {
            // Nothing was written, and nothing may be.
            return Ok(());
        }
        self.inner().drain_queue();
        if !self.inner().failure.failed() && Arc::strong_count(&self.shared) == 1 {
            // The last handle: hand the space reserved ahead back (nothing else allocates),
            // and say where the payload logs' chunks take their next entries.
            let r = self.inner().space.release(&self.inner().region);
            self.inner().failure.record("plush", r)?;
            // The logs' resume slots first: the payload's resume words are what the next open
            // takes for a clean close, so they go last — a crash between the two must read as
            // a crash (after a clean close, recovery takes a log slot that fails its check
            // before the resume slot for media damage).
            let r = self.inner().record_log_resume();
            self.inner().failure.record("plush", r)?;
            let r = self.inner().record_payload_resume();
            self.inner().failure.record("plush", r)?;
        }
        match self.inner().failure.reason() {
            Some(reason) => Err(Error::ReadOnly {
                path: self.inner().path.clone(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// The region the store lives in (for its counters, and for crash tests that take the
    /// region's image).
    pub fn region(&self) -> &PmemRegion {
        &self.inner().region
    }

    /// The region's path.
    pub fn path(&self) -> Option<&Path> {
        self.inner().path.as_deref()
    }

    /// Checks every structure without changing anything: each PMem entry's size, bucket
    /// offsets (in the store's space, aligned, not shared by two entries) and filters (every
    /// record's hash must pass its bucket's filter), each record's level placement (its hash
    /// selects the entry), payload locators (variable layout: current or dangling — a dangling
    /// one must have a newer record) and the DRAM halves. Run it on a store no one writes to.
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut report = self.inner().verify()?;
        // What this open's recovery dropped is no longer in the store to be found.
        if let Some(d) = self.recovery_damage() {
            report.problems.insert(0, d);
        }
        Ok(report)
    }

    /// What this open's recovery found damaged ([`RecoveryReport::damaged_payloads`]), if
    /// anything: said once, by the open that met it (the records are dropped).
    pub fn recovery_damage(&self) -> Option<String> {
        self.recovery_report().damage()
    }
}

/// What [`PlushStore::verify`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VerifyReport {
    /// Records (all versions, deletions included) per PMem level.
    pub level_records: Vec<u64>,
    /// Entries holding records, per PMem level.
    pub level_entries: Vec<u64>,
    /// Records in DRAM.
    pub dram_records: u64,
    /// Records whose payload was collected (superseded; dropped at their next migration).
    pub dangling: u64,
    /// Live keys.
    pub live_keys: u64,
    /// What is wrong (empty: nothing).
    pub problems: Vec<String>,
}

impl Inner {
    fn verify(&self) -> Result<VerifyReport> {
        let mut r = VerifyReport {
            level_records: vec![0; self.geo.max_levels as usize],
            level_entries: vec![0; self.geo.max_levels as usize],
            ..VerifyReport::default()
        };
        let mut seen_buckets = std::collections::HashSet::new();
        for root in 0..self.dram.entries.len() {
            // One subtree at a time, under its lock: no migration changes it meanwhile.
            let _s = self.dram.entries[root].subtree.lock();
            let mut stack = vec![(0u32, root as u64)];
            while let Some((level, idx)) = stack.pop() {
                let Some(dir) = self.level_dir(level) else {
                    continue;
                };
                if level + 1 < self.geo.max_levels {
                    let bits = self.geo.level_bits(level);
                    stack
                        .extend((0..layout::FANOUT as u64).map(|t| (level + 1, idx | (t << bits))));
                }
                self.verify_entry(level, idx, dir, &mut seen_buckets, &mut r)?;
            }
        }
        r.level_records.truncate(
            (0..self.geo.max_levels)
                .take_while(|&l| self.level_dir(l).is_some())
                .count(),
        );
        r.level_entries.truncate(r.level_records.len());
        r.dram_records = self.dram.entries.iter().map(dram::held).sum();
        if let Some(p) = &self.payload {
            // DRAM's records too: recovery keeps one whose payload a clean close left damaged.
            for idx in 0..self.dram.entries.len() {
                let _s = self.dram.entries[idx].subtree.lock();
                let (a, b) = halves(&self.dram.entries[idx]);
                for half in [a, b] {
                    for (slot, (_, value)) in self.dram.records(idx, half).into_iter().enumerate() {
                        if p.is_current(value) && !p.is_whole(&self.region, value)? {
                            p.mark_suspect(value);
                            let loc = layout::Locator::decode(value);
                            r.problems.push(format!(
                                "DRAM entry {idx} half {half} slot {slot}: its payload entry \
                                 (chunk {}, offset {}) fails its check: media damage",
                                loc.chunk, loc.offset
                            ));
                        }
                    }
                }
            }
        }
        let mut keys = Vec::new();
        for idx in 0..self.dram.entries.len() {
            keys.clear();
            match self.subtree_keys(idx, &mut keys) {
                Ok(()) => r.live_keys += keys.len() as u64,
                // Damage already reported above: the subtree's keys are not all countable.
                Err(e @ Error::Corrupt { .. }) if !r.problems.is_empty() => {
                    r.problems.push(format!(
                        "DRAM entry {idx}'s keys could not all be counted: {e}"
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(r)
    }

    fn verify_entry(
        &self,
        level: u32,
        idx: u64,
        dir: u64,
        seen_buckets: &mut std::collections::HashSet<u64>,
        r: &mut VerifyReport,
    ) -> Result<()> {
        let entry = dir + idx * layout::ENTRY_BYTES;
        let (size, _) =
            layout::split_size_epoch(self.region.atomic_u64(entry)?.load(Ordering::Acquire));
        for b in 0..layout::FANOUT {
            let ptr = self
                .region
                .atomic_u64(entry + 16 + 8 * b as u64)?
                .load(Ordering::Acquire);
            if ptr == 0 {
                continue;
            }
            if !ptr.is_multiple_of(layout::BUCKET_BYTES)
                || ptr < self.geo.space_offset()
                || ptr + layout::BUCKET_BYTES > self.space.used()
            {
                r.problems.push(format!(
                    "level {level} entry {idx} bucket {b}: offset {ptr} outside the store's space"
                ));
            } else if !seen_buckets.insert(ptr) {
                r.problems.push(format!(
                    "level {level} entry {idx} bucket {b}: offset {ptr} belongs to another entry too"
                ));
            }
        }
        if size == 0 {
            return Ok(());
        }
        r.level_entries[level as usize] += 1;
        let recs = match self.entry_records(level, idx) {
            Ok((recs, _)) => recs,
            Err(e) => {
                r.problems.push(e.to_string());
                return Ok(());
            }
        };
        let mask = self.geo.level_entries(level) - 1;
        for (i, rec) in recs.iter().enumerate() {
            if rec.hash & mask != idx {
                r.problems.push(format!(
                    "level {level} entry {idx} slot {i}: the key belongs to entry {}",
                    rec.hash & mask
                ));
            }
            let (line, bits) = filter::line_and_bits(rec.hash);
            let lanes = self.filter_line(level, idx, entry, line)?;
            if filter::probe(&lanes, bits) & (1 << (i / layout::SLOTS)) == 0 {
                r.problems.push(format!(
                    "level {level} entry {idx} slot {i}: its bucket's filter misses it"
                ));
            }
            if let Some(p) = &self.payload {
                if !p.is_current(rec.value) {
                    r.dangling += 1;
                } else if !p.is_whole(&self.region, rec.value)? {
                    // Only whole payload entries are ever indexed (a write a crash cut short
                    // never reaches a level): this one was damaged since. Lookups check its
                    // chunk's entries from now on.
                    p.mark_suspect(rec.value);
                    let loc = layout::Locator::decode(rec.value);
                    r.problems.push(format!(
                        "level {level} entry {idx} slot {i}: its payload entry (chunk {}, \
                         offset {}) fails its check: media damage",
                        loc.chunk, loc.offset
                    ));
                }
            }
        }
        r.level_records[level as usize] += recs.len() as u64;
        Ok(())
    }
}

impl Store for PlushStore {
    fn describe(&self) -> StoreDescription {
        StoreDescription {
            store: "plush".into(),
            medium: match &self.inner().path {
                Some(p) => format!("{} {}", self.inner().region.medium_label(), p.display()),
                None => self.inner().region.medium_label().to_string(),
            },
            guarantee: self.inner().region.survives_label().into(),
            commit: "immediate".into(),
            ordered: false,
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        PlushStore::get(self, key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        crate::store::get_many_into(keys, |values, found| {
            PlushStore::get_many(self, keys, values, found)
        })
    }

    fn check_record(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner().check_record(key, value)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        PlushStore::put(self, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        PlushStore::delete(self, key)
    }

    fn modify(&self, key: &[u8], decide: &mut dyn FnMut(Option<&[u8]>) -> Change) -> Result<()> {
        PlushStore::modify(self, key, decide)
    }

    fn len(&self) -> u64 {
        PlushStore::len(self).unwrap_or(0)
    }

    fn scan(&self, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> Result<u64> {
        PlushStore::scan(self, cursor, count, out)
    }

    fn defers_sync(&self) -> bool {
        false
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }

    fn metrics(&self) -> Vec<(String, String)> {
        let s = self.stats();
        let mut m = vec![
            ("plush_layout".into(), s.layout.to_string()),
            ("plush_levels".into(), s.levels.to_string()),
            ("plush_dram_bytes".into(), s.dram_bytes.to_string()),
            ("plush_dram_records".into(), s.dram_records.to_string()),
            ("plush_region_bytes".into(), s.region_bytes.to_string()),
            ("plush_key_search".into(), s.key_search.to_string()),
            (
                "plush_durability_mode".into(),
                format!("{:?}", s.durability),
            ),
            ("plush_flush".into(), s.flush.to_string()),
            ("plush_emulation".into(), s.emulation.clone()),
            ("plush_space_used_bytes".into(), s.space_used.to_string()),
        ];
        if let Some(r) = &s.read_only {
            m.push(("plush_read_only".into(), r.clone()));
        }
        if s.layout == PlushLayout::Variable {
            // Live is "not known dead": an open counts every payload byte as live until its
            // collector has looked at each chunk.
            m.extend([
                ("plush_payload_bytes".into(), s.payload_bytes.to_string()),
                (
                    "plush_payload_live_bytes".into(),
                    s.payload_live_bytes.to_string(),
                ),
                (
                    "plush_payload_dead_bytes".into(),
                    s.payload_dead_bytes.to_string(),
                ),
                (
                    "plush_payload_space_amplification".into(),
                    format!(
                        "{:.2}",
                        s.payload_bytes as f64 / s.payload_live_bytes.max(1) as f64
                    ),
                ),
            ]);
        }
        if let Some(d) = self.recovery_damage() {
            m.push(("plush_recovery_damage".into(), d));
        }
        m.extend(
            s.counters
                .into_iter()
                .map(|(k, v)| (format!("plush_{k}"), v.to_string())),
        );
        m
    }

    fn close(self: Box<Self>) -> Result<()> {
        PlushStore::close(*self)
    }
}
