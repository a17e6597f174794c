//! A hybrid persistent key-value store in the Viper design: records in a persistent region,
//! the index in DRAM.
//!
//! Owns: the store's on-media format (see [`layout`] and docs/FORMAT-kv.md), its DRAM index,
//! clients, recovery and reclamation. Must not touch: hardware directly — every byte goes
//! through [`crate::device::PmemRegion`], so the store runs on DAX, on a file on disk or tmpfs,
//! in anonymous memory, under emulation, or in the crash simulator alike.
//!
//! ```
//! use tierbase::kv::{KvOptions, KvStore, RecordLayout};
//! # fn main() -> tierbase::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("tierbase-kv-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let path = dir.join("store.tb");
//! # let _ = std::fs::remove_file(&path);
//! let opts = KvOptions::default();
//! let store = KvStore::create(&path, &opts)?; // variable-size records by default
//! let mut client = store.client(); // one per thread
//! client.put(b"hello", b"world")?; // durable when it returns
//! assert_eq!(store.get(b"hello")?.as_deref(), Some(&b"world"[..]));
//! drop(client);
//! store.close()?;
//! let store = KvStore::open(&path, &opts)?; // recovery rebuilds the index
//! assert_eq!(store.len(), 1);
//! # drop(store); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok(()) }
//! ```
//!
//! | capability | |
//! |---|---|
//! | point get / put / update / delete | yes; gets are optimistic (never take a latch, may retry while a writer holds the page) |
//! | ordered range scans | **no** (hash index; use a B-tree store for scans) |
//! | unordered iteration | yes ([`KvStore::iter`], weakly consistent, stops when you stop) |
//! | transactions / multi-key atomicity | no |
//! | durability | every acknowledged write, in the region's [`DurabilityMode`], at the [`Durability`] level asked for (`Immediate` by default; `Eventual` and `None` defer file syncs on a disk file, see [`KvOptions::durability`]); one persist per insert (record, marker and check together) |
//! | crash safety | a torn record (marker on media, bytes not) fails its CRC32C check and recovery drops it; free space never holds a record that passes |
//! | concurrent writers | yes, linearizable per key (writers of one key take turns) |
//! | multi-process access | no: a second open (any process) fails with [`Error::Locked`] |

mod client;
mod compact;
mod index;
pub mod layout;
mod metrics;
mod recovery;
mod store;
mod verify;
mod walk;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use parking_lot::{Mutex, RwLock};
use serde::Serialize;

pub use client::Client;
pub use compact::ReclaimOptions;
pub use index::{OffsetIndex, mix as index_mix};
pub use layout::{RecordLayout, RecordOffset};
pub use metrics::KvMetrics;
pub use recovery::RecoveryReport;
pub use verify::{VerifyReport, verify, verify_region};

use self::layout::{FORMAT_VERSION, Geometry, HEADER_LEN, MAGIC, header};
use self::store::{FREE, Inner, LARGE, OWNED, SEALED};
use crate::device::{DramArena, Durability, DurabilityMode, PmemRegion, RegionOptions};
use crate::error::{Error, Result};
use crate::space::FreeExtents;
use crate::store::{Change, Store, StoreDescription, WriteFailure};
use crate::sync::{Background, KeyLocks};

/// Default pages per block: Viper's six (one 4 KiB page per DIMM of a 6-DIMM interleave set).
pub const DEFAULT_PAGES_PER_BLOCK: u32 = 6;

/// How to create or open a store. Start from `KvOptions::default()` and change what you need
/// with the builder methods (or by assigning the public fields).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct KvOptions {
    /// Record layout. On create: the layout to use (default: variable-size). On open: if set,
    /// must match the file, else [`Error::LayoutMismatch`].
    pub layout: Option<RecordLayout>,
    /// Pages per block (1..=8), used on create: one 4 KiB page per DIMM of the device's
    /// interleave set. `None` (default) = the emulated profile's `interleave_ways` when the
    /// region emulates one that states it, else Viper's 6 ([`DEFAULT_PAGES_PER_BLOCK`]).
    pub pages_per_block: Option<u32>,
    /// The largest step the region grows by (whole blocks; default 64 MiB). A new store takes
    /// a few blocks and grows by a quarter of its size each time, up to this step.
    pub chunk_size: u64,
    /// Bytes a new store starts with (rounded up to whole blocks; default 0: a few blocks).
    /// Set it to pre-size a store whose size you know, so that loading it does not grow it.
    /// The DRAM index is sized with it (for the blocks 3/4 full): it takes its DRAM at once
    /// (8–16 bytes per record the size holds) and loading needs no segment splits.
    pub initial_size: u64,
    /// Whether the region may grow. If not, inserts beyond capacity fail with
    /// [`Error::StoreFull`] and the store stays usable. A variable-layout store that cannot
    /// grow (growth off, or its device full) keeps its last block for compaction: inserts are
    /// refused when only that one is left, so that partly dead blocks can always be compacted
    /// and deleted space comes back.
    pub allow_growth: bool,
    /// Threads used to rebuild the index on open. Default: available parallelism.
    pub recovery_threads: usize,
    /// Space reclamation (default: on, Viper's 40 % threshold). `None` = off: dead space is
    /// only reclaimed by [`KvStore::compact`].
    pub reclaim: Option<ReclaimOptions>,
    /// Options of the underlying region (durability mode, emulated profile, reservation).
    pub region: RegionOptions,
    fingerprint_mask: u64,
}

impl Default for KvOptions {
    fn default() -> Self {
        KvOptions {
            layout: None,
            pages_per_block: None,
            chunk_size: 64 << 20,
            initial_size: 0,
            allow_growth: true,
            recovery_threads: std::thread::available_parallelism().map_or(1, usize::from),
            reclaim: Some(ReclaimOptions::default()),
            region: RegionOptions::default(),
            fingerprint_mask: u64::MAX,
        }
    }
}

impl KvOptions {
    /// Sets [`KvOptions::layout`].
    pub fn layout(mut self, layout: RecordLayout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Sets [`KvOptions::pages_per_block`].
    pub fn pages_per_block(mut self, pages: u32) -> Self {
        self.pages_per_block = Some(pages);
        self
    }

    /// Sets [`KvOptions::chunk_size`].
    pub fn chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes;
        self
    }

    /// Sets [`KvOptions::initial_size`].
    pub fn initial_size(mut self, bytes: u64) -> Self {
        self.initial_size = bytes;
        self
    }

    /// Sets [`KvOptions::allow_growth`].
    pub fn allow_growth(mut self, allow: bool) -> Self {
        self.allow_growth = allow;
        self
    }

    /// Sets [`KvOptions::recovery_threads`].
    pub fn recovery_threads(mut self, threads: usize) -> Self {
        self.recovery_threads = threads;
        self
    }

    /// Sets [`KvOptions::reclaim`].
    pub fn reclaim(mut self, reclaim: Option<ReclaimOptions>) -> Self {
        self.reclaim = reclaim;
        self
    }

    /// Sets when acknowledged writes become durable (the region's
    /// [`RegionOptions::commit`]; default `Immediate`). See [`Durability`] for what a crash may
    /// lose under each level; the store's [`KvStats::commit`] says what is in effect.
    pub fn durability(mut self, durability: Durability) -> Self {
        self.region.commit = durability;
        self
    }

    /// Sets [`KvOptions::region`].
    pub fn region(mut self, region: RegionOptions) -> Self {
        self.region = region;
        self
    }

    /// Testing aid: keeps only these bits of the 64-bit key fingerprints, to force hash
    /// collisions (which the store must survive: every match is confirmed on media). Leave
    /// alone in production.
    pub fn fingerprint_mask(mut self, mask: u64) -> Self {
        self.fingerprint_mask = mask;
        self
    }
}

/// Space and memory of a store, for operators (`tierbase kv stats`).
#[derive(Clone, Debug, Serialize)]
pub struct KvStats {
    /// Record layout.
    pub layout: RecordLayout,
    /// Live keys.
    pub records: u64,
    /// Durability mode in effect.
    pub durability: DurabilityMode,
    /// What it guarantees.
    pub guarantee: &'static str,
    /// When acknowledged writes become durable: the durability level, and whether this medium
    /// defers anything under it ("immediate" where a persist is a flush and a fence).
    pub commit: String,
    /// Persists deferred to a later sync so far.
    pub deferred_persists: u64,
    /// File syncs run so far (`msync` mode).
    pub syncs: u64,
    /// The flush instruction persists use ("none" where the medium needs none).
    pub flush: &'static str,
    /// "none" or "emulated <profile>".
    pub emulation: String,
    /// Region size in bytes.
    pub region_bytes: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Blocks mapped.
    pub blocks_allocated: u64,
    /// Blocks ever used (high-water mark).
    pub blocks_used: u64,
    /// Blocks free for reuse.
    pub blocks_free: u64,
    /// Runs of consecutive free blocks (fragmentation).
    pub free_extents: u64,
    /// Blocks owned by clients right now.
    pub blocks_owned: u64,
    /// Blocks holding records, not owned.
    pub blocks_sealed: u64,
    /// Blocks holding large records.
    pub blocks_large: u64,
    /// Bytes held by live records (fixed: slots).
    pub live_bytes: u64,
    /// Bytes of used blocks not held by live records (deleted, replaced, or never filled).
    pub dead_bytes: u64,
    /// Region bytes per live byte (0 when empty).
    pub space_amplification: f64,
    /// Why the store refuses writes, if a persist failed.
    pub read_only: Option<String>,
    /// DRAM held by the index.
    pub index_bytes: u64,
    /// DRAM held by the index and per-page/per-block metadata.
    pub dram_bytes: u64,
}

/// The store: a cheap, cloneable, `'static` handle (an `Arc` inside) — share it between
/// threads, thread pools and async tasks. Give each writing thread its own [`Client`] for
/// throughput; the store-level `put`/`update`/`delete` borrow one from a pool.
#[derive(Clone)]
pub struct KvStore {
    shared: Arc<Shared>,
}

struct Shared {
    inner: Arc<Inner>,
    recovery: RecoveryReport,
    workers: Mutex<Vec<Background>>,
    /// The durability level asked for.
    commit: Durability,
    /// Clients lent to store-level writes, so that concurrent callers do not queue on one.
    clients: ArrayQueue<Client>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for mut w in self.workers.lock().drain(..) {
            w.stop();
        }
        *self.inner.grower.lock() = None;
        *self.inner.reclaimer.lock() = None;
        // Give the pooled clients' insert blocks back (dropping a client seals its block).
        while self.clients.pop().is_some() {}
    }
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.inner.fmt(f)
    }
}

/// Blocks a new store starts with (a few: a new store takes kilobytes, then grows).
const INITIAL_BLOCKS: u64 = 4;

fn initial_blocks(geo: &Geometry, opts: &KvOptions) -> u64 {
    opts.initial_size
        .div_ceil(geo.block_size())
        .clamp(INITIAL_BLOCKS, RecordOffset::MAX_BLOCK)
}

impl KvStore {
    /// Creates a store in a new region file at `path`.
    pub fn create(path: impl AsRef<Path>, opts: &KvOptions) -> Result<Self> {
        let layout = opts.layout.unwrap_or(RecordLayout::Variable);
        let ppb = pages_per_block(opts, opts.region.emulate.as_ref());
        let geo = Geometry::new(layout, ppb, opts.chunk_size)?;
        let len = geo.region_len_for(initial_blocks(&geo, opts));
        let region = PmemRegion::create(path.as_ref(), len, &opts.region)?;
        Self::create_in(region, opts)
    }

    /// Opens the store in the region file at `path`, running recovery.
    pub fn open(path: impl AsRef<Path>, opts: &KvOptions) -> Result<Self> {
        let region = PmemRegion::open(path.as_ref(), &opts.region)?;
        Self::open_in(region, opts)
    }

    /// Opens `path` if it exists, else creates it.
    pub fn open_or_create(path: impl AsRef<Path>, opts: &KvOptions) -> Result<Self> {
        if path.as_ref().exists() {
            Self::open(path, opts)
        } else {
            Self::create(path, opts)
        }
    }

    /// Creates a store in `region`, which must be all zeros (new).
    pub fn create_in(region: PmemRegion, opts: &KvOptions) -> Result<Self> {
        let layout = opts.layout.unwrap_or(RecordLayout::Variable);
        let ppb = pages_per_block(opts, region.emulator().map(|e| e.profile()));
        let geo = Geometry::new(layout, ppb, opts.chunk_size)?;
        region.grow(geo.region_len_for(initial_blocks(&geo, opts)))?;
        let mut hdr = [0u8; HEADER_LEN as usize];
        region.read(0, &mut hdr)?;
        if hdr.iter().any(|&b| b != 0) {
            return Err(Error::InvalidArgument(
                "create_in needs an empty region; this one already holds data".into(),
            ));
        }
        encode_header(&mut hdr, &geo);
        // Everything but the magic first, then the magic: a crash leaves either no store
        // (bad magic) or a complete header.
        region.write(8, &hdr[8..])?;
        region.persist(0, HEADER_LEN as usize)?;
        region.write(0, &hdr[..8])?;
        region.persist(0, 8)?;
        Self::open_in(region, opts)
    }

    /// Opens the store held in `region`, running recovery.
    pub fn open_in(region: PmemRegion, opts: &KvOptions) -> Result<Self> {
        let path = region.path().map(Path::to_path_buf);
        if region.len() < HEADER_LEN {
            return Err(Error::Corrupt {
                path,
                detail: format!(
                    "region of {} bytes cannot hold a store header",
                    region.len()
                ),
            });
        }
        let mut hdr = [0u8; HEADER_LEN as usize];
        region.read(0, &mut hdr)?;
        let geo = decode_header(&hdr, path.as_deref(), opts.chunk_size)?;
        if let Some(requested) = opts.layout
            && requested != geo.layout
        {
            return Err(Error::LayoutMismatch {
                path,
                found: geo.layout.to_string(),
                requested: requested.to_string(),
            });
        }
        // Every header field is checked before it sizes anything.
        let mark = recovery::read_used_mark(&region, &geo)?;
        let used_blocks = mark.blocks;
        let mapped_blocks = geo.blocks_in(region.len());
        // Size the index for what the region's blocks hold when they are 3/4 full (sizing for
        // completely full blocks would waste DRAM on stores with many deletes). The mapped
        // blocks, not only the used ones: a store pre-sized for its records
        // (`KvOptions::initial_size`) then fills its index without splitting a segment, as
        // Viper sizes its index from its pool, and recovery rarely splits either. A store
        // created at its default size maps a few blocks beyond those it uses.
        let per_block = match geo.layout {
            RecordLayout::Fixed { .. } => u64::from(geo.slots) * u64::from(geo.pages_per_block),
            RecordLayout::Variable => geo.block_size() / 256,
        };
        let index = OffsetIndex::with_capacity(mapped_blocks * per_block * 3 / 4);
        let short_keys =
            matches!(geo.layout, RecordLayout::Fixed { key_size, .. } if key_size <= 8);
        // Metadata for every block the region can grow to (address space only until used).
        let max_blocks = geo.blocks_in(region.max_len()).max(used_blocks) as usize + 1;
        let max_pages = max_blocks * layout::LATCHES_PER_BLOCK as usize;
        let inner = Arc::new(Inner {
            region,
            geo,
            path,
            index,
            short_keys,
            self_validating: geo.self_validating(),
            fingerprint_mask: opts.fingerprint_mask,
            pages: DramArena::new(max_pages)?,
            blocks: DramArena::new(max_blocks)?,
            allocated_blocks: AtomicU64::new(0),
            next_block: AtomicU64::new(0),
            free: FreeExtents::new(),
            partial: crossbeam_queue::SegQueue::new(),
            grow_lock: Mutex::new(()),
            allow_growth: opts.allow_growth,
            key_locks: KeyLocks::new(KEY_STRIPES),
            metrics: metrics::Metrics::default(),
            compaction_gate: Arc::new(RwLock::new(())),
            grower: Mutex::new(None),
            reclaimer: Mutex::new(None),
            reclaim: opts.reclaim.clone(),
            space_pressure: AtomicBool::new(false),
            full_pressure: AtomicBool::new(false),
            reclaim_rounds: Mutex::new(0),
            reclaim_done: parking_lot::Condvar::new(),
            opened: AtomicBool::new(false),
            failure: WriteFailure::default(),
            retired: Mutex::new(store::Retired::default()),
            retired_len: AtomicUsize::new(0),
        });
        // A clean close means no write was cut short; whatever happens from here on must not
        // pass for one, so the mark goes before the first write can.
        let clean_word = inner.region.atomic_u64(header::CLEAN as u64)?;
        let clean = clean_word.load(Ordering::Acquire) == layout::CLEAN_MARK;
        let recovery = recovery::recover(&inner, opts.recovery_threads.max(1), clean, &mark)?;
        for d in &recovery.damage {
            let at = inner.path.as_deref().unwrap_or(Path::new("<memory>"));
            tracing::warn!("{}: {d}", at.display());
        }
        if mark.damage.is_some() && !inner.region.is_read_only() {
            // The worked-out count replaces the damaged one before any block is taken.
            let word = inner.region.atomic_u64(header::USED_BLOCKS as u64)?;
            word.store(layout::used_word(used_blocks), Ordering::Release);
            inner.region.persist(header::USED_BLOCKS as u64, 8)?;
        }
        if clean_word.load(Ordering::Acquire) != 0 {
            clean_word.store(0, Ordering::Release);
            inner.region.persist(header::CLEAN as u64, 8)?;
        }
        inner.opened.store(true, Ordering::Release);
        let mut workers = Vec::new();
        let spawn_failed = |e: std::io::Error| Error::io("start a background thread", None, e);
        // Read-only (a copy-on-write mapping: recovery's repairs stayed in this process):
        // every write is refused, and nothing runs in the background.
        let read_only = inner.region.is_read_only();
        if read_only {
            inner.failure.open_read_only();
        }
        if let Some(r) = opts.reclaim.clone().filter(|_| !read_only) {
            let w = Background::spawn(
                "tierbase-kv-reclaim",
                inner.clone(),
                r.interval,
                move |inner, ticker| compact::reclaim_loop(inner, ticker, &r),
            )
            .map_err(spawn_failed)?;
            *inner.reclaimer.lock() = w.handle();
            workers.push(w);
        }
        if opts.allow_growth && !read_only {
            let w = Background::spawn(
                "tierbase-kv-grow",
                inner.clone(),
                Duration::from_millis(100),
                |inner, ticker| store::grow_loop(inner, ticker),
            )
            .map_err(spawn_failed)?;
            *inner.grower.lock() = w.handle();
            workers.push(w);
        }
        if let Durability::Eventual(interval) = opts.region.commit
            && inner.region.defers_persists()
        {
            let w = Background::spawn(
                "tierbase-kv-flush",
                inner.clone(),
                interval,
                |inner, ticker| store::flush_loop(inner, ticker),
            )
            .map_err(spawn_failed)?;
            workers.push(w);
        }
        inner.note_space_use();
        Ok(KvStore {
            shared: Arc::new(Shared {
                inner,
                recovery,
                workers: Mutex::new(workers),
                commit: opts.region.commit,
                clients: ArrayQueue::new(64),
            }),
        })
    }

    fn inner(&self) -> &Inner {
        &self.shared.inner
    }

    /// A client for the calling thread (`'static`; it may outlive this handle).
    pub fn client(&self) -> Client {
        Client::new(self.shared.inner.clone())
    }

    /// Runs `f` with a pooled client.
    fn with_client<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let mut client = self.shared.clients.pop().unwrap_or_else(|| self.client());
        let result = f(&mut client);
        // A full pool drops the client, which seals its block.
        let _ = self.shared.clients.push(client);
        result
    }

    /// Reads `key`'s value. Optimistic: never takes a latch (it may retry while a writer
    /// holds the record's page).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// Reads `key` into `value` (reusing its allocation); returns whether it exists.
    pub fn get_into(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        let mut scratch = Vec::new();
        self.inner().get(key, value, &mut scratch)
    }

    /// Reads a batch of keys with their cache misses overlapped (see [`Client::get_many`]).
    pub fn get_many(
        &self,
        keys: &[&[u8]],
        values: &mut [Vec<u8>],
        found: &mut [bool],
    ) -> Result<()> {
        let mut scratch = Vec::new();
        self.inner().get_many(keys, values, found, &mut scratch)
    }

    /// Inserts or replaces `key` through a pooled client. Returns whether the key was new.
    /// Durable when it returns (at the `Immediate` level; see [`KvOptions::durability`]).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.with_client(|c| c.put(key, value))
    }

    /// Replaces the value of an existing key; returns whether it existed. Durable when it
    /// returns (at the `Immediate` level).
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.with_client(|c| c.update(key, value))
    }

    /// Deletes `key`; returns whether it existed. Durable when it returns (at the `Immediate`
    /// level).
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut scratch = Vec::new();
        self.inner().delete(key, &mut scratch)
    }

    /// Reads `key` and applies what `decide` returns, atomically per key (see
    /// [`Client::modify`]). Durable when it returns (at the `Immediate` level).
    pub fn modify(
        &self,
        key: &[u8],
        decide: &mut dyn FnMut(Option<&[u8]>) -> Change,
    ) -> Result<()> {
        self.with_client(|c| c.modify(key, decide))
    }

    /// A cursor walk over the keys, in the index's hash order (not byte order): appends the
    /// keys of the next stretch of the 2^16 hash positions, sized so that about `count` keys
    /// come back, and returns the cursor to continue from (0 when the walk is done; start
    /// with 0). Every key present for the whole walk is returned at least once, whatever
    /// splits, moves or compactions happen meanwhile (a key keeps its hash position for
    /// life); keys written or deleted during the walk may or may not appear. Two limits, both
    /// under concurrent writes only: a key can be missed if, between a snapshot of its entry
    /// and the read of its record, it moves and another key with the same 16-bit hash tag is
    /// written at exactly its old offset; and a stretch whose records keep moving through 64
    /// snapshots in a row is returned as the last one saw it.
    pub fn scan(&self, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> Result<u64> {
        const POSITIONS: u64 = 1 << 16;
        let Ok(lo) = u16::try_from(cursor) else {
            return Ok(0);
        };
        let inner = self.inner();
        let per_position = inner.index.len() as f64 / POSITIONS as f64;
        let span = if per_position <= 0.0 {
            POSITIONS
        } else {
            ((count.max(1) as f64 / per_position).ceil() as u64).clamp(1, POSITIONS)
        };
        let hi_wide = (u64::from(lo) + span - 1).min(POSITIONS - 1);
        let hi = u16::try_from(hi_wide).unwrap_or(u16::MAX);
        // Entries are snapshots: by the time one is read, its key may have moved on and the
        // offset may hold another key's record. So the walk repeats with fresh snapshots until
        // a whole pass reads, at every entry, a key that has the entry's tag and was already
        // collected (or no longer exists): then every entry of that snapshot — among them one
        // for each key present throughout — is accounted for. (The one blind spot:
        // between the snapshot and the read, a key moves away and another key with the same
        // 16-bit tag is written at exactly its old offset.)
        let mut keys = std::collections::BTreeSet::new();
        let (mut entries, mut key, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        for pass in 0..64 {
            entries.clear();
            inner.index.entries_in_tags(lo, hi, &mut entries);
            let mut complete = true;
            for &(tag, off) in &entries {
                let at = RecordOffset(off);
                match inner.read_key_at(at, &mut key) {
                    // The entry's key (or, in the blind spot, a same-tag key): collected if it
                    // exists now, whether this record is still its current one or not.
                    Ok(true) if OffsetIndex::tag(inner.key_word(&key)) == tag => {
                        if !keys.contains(&key)
                            && (inner.indexed_at(&key, at)
                                || inner.locate(&key, &mut scratch).is_some())
                        {
                            keys.insert(key.clone());
                            complete = false;
                        }
                    }
                    Ok(_) => complete = false,
                    // A record replaced under the reader can look malformed; an entry that
                    // still reads so after many passes is corruption.
                    Err(e) if pass == 63 => return Err(e),
                    Err(_) => complete = false,
                }
            }
            if complete {
                break;
            }
        }
        out.extend(keys);
        Ok(if hi_wide + 1 >= POSITIONS {
            0
        } else {
            hi_wide + 1
        })
    }

    /// Number of live keys.
    pub fn len(&self) -> usize {
        self.inner().index.len()
    }

    /// Whether the store has no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record layout.
    pub fn layout(&self) -> RecordLayout {
        self.inner().geo.layout
    }

    /// Pages per block of this store.
    pub fn pages_per_block(&self) -> u32 {
        self.inner().geo.pages_per_block
    }

    /// Durability mode of the region.
    pub fn durability(&self) -> DurabilityMode {
        self.inner().region.durability()
    }

    /// The underlying region (for inspection, counters and crash simulation).
    pub fn region(&self) -> &PmemRegion {
        &self.inner().region
    }

    /// What recovery did when this store was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.shared.recovery
    }

    /// Counter snapshot.
    pub fn metrics(&self) -> KvMetrics {
        let inner = self.inner();
        inner.metrics.snapshot(inner.region.counters())
    }

    /// Makes every write acknowledged so far durable: one file sync under a deferring
    /// durability level ([`KvOptions::durability`]), nothing under `Immediate` (each write
    /// already is).
    pub fn sync(&self) -> Result<()> {
        let inner = self.inner();
        inner.check_writable()?;
        inner.fail_on_error(inner.sync())
    }

    /// Why the store refuses writes, if a persist failed (see [`Error::ReadOnly`]).
    pub fn read_only_reason(&self) -> Option<String> {
        self.inner().failure.reason()
    }

    /// Compacts every sealed block at least `free_threshold` free (0..1). Returns
    /// (blocks compacted, records moved). Safe to call while other threads use the store;
    /// blocks are skipped while an iteration runs. A threshold outside 0..=1 (or NaN) is
    /// refused with [`Error::InvalidArgument`].
    pub fn compact(&self, free_threshold: f64) -> Result<(u64, u64)> {
        if !(0.0..=1.0).contains(&free_threshold) {
            return Err(Error::InvalidArgument(format!(
                "compaction threshold {free_threshold}: give the free fraction of a block that \
                 makes it worth compacting, from 0 to 1"
            )));
        }
        let mut client = self.client();
        let inner = self.shared.inner.clone();
        compact::compact_all(&inner, free_threshold, &mut client.writer(), true)
    }

    /// Runs one full round of the background reclaimer now (one that starts after this call)
    /// and waits for it; other threads may go on using the store. Returns `false` when the
    /// store has no reclaimer ([`KvOptions::reclaim`] is `None`).
    pub fn reclaim_round(&self) -> bool {
        self.shared.inner.wake_reclaimer_and_wait(2)
    }

    /// Every live record, in no particular order. Weakly consistent: a record written or
    /// deleted during the walk may or may not be seen, and so may a key overwritten during
    /// the walk — or it may be seen twice, old and new value (the walk goes by where records
    /// lie, and an overwrite writes the key elsewhere); a record neither written nor deleted
    /// during the walk is seen exactly once, and nothing is torn. For every key present
    /// throughout, whatever happens to it, use the cursor walk [`KvStore::scan`]. While an
    /// iterator lives, compaction skips its work (so do not keep one for long). Drop it to
    /// stop early.
    pub fn iter(&self) -> Iter {
        let inner = self.shared.inner.clone();
        let gate = inner.compaction_gate.read_arc();
        let used = inner.next_block.load(Ordering::Acquire);
        Iter {
            inner,
            _gate: gate,
            next_block: 0,
            used,
            pending: std::collections::VecDeque::new(),
            failed: false,
        }
    }

    /// Calls `f` with every live record (see [`KvStore::iter`]).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<()> {
        for record in self.iter() {
            let (k, v) = record?;
            f(&k, &v);
        }
        Ok(())
    }

    /// Space and memory figures.
    pub fn stats(&self) -> KvStats {
        let inner = self.inner();
        let geo = inner.geo;
        let used = inner.next_block.load(Ordering::Acquire);
        let (mut free, mut owned, mut sealed, mut large, mut live) = (0, 0, 0, 0, 0u64);
        for b in 0..used {
            let Ok(m) = inner.block_meta(b) else { continue };
            match m.state.load(Ordering::Acquire) {
                FREE => free += 1,
                OWNED => owned += 1,
                LARGE => large += 1,
                SEALED | store::PARTIAL => sealed += 1,
                _ => {}
            }
            live += m.live.load(Ordering::Acquire);
        }
        let live_bytes = match geo.layout {
            RecordLayout::Fixed { .. } => live * geo.slot_size,
            RecordLayout::Variable => live,
        };
        let in_use = (used - free) * geo.block_size();
        let index_bytes = inner.index.memory_bytes() as u64;
        let meta_bytes = inner.pages.bytes_used() as u64
            + inner.blocks.bytes_used() as u64
            + inner.key_locks.memory_bytes() as u64;
        KvStats {
            layout: geo.layout,
            records: inner.index.len() as u64,
            durability: inner.region.durability(),
            guarantee: inner.region.guarantee_label(),
            commit: if inner.region.defers_persists() || !self.shared.commit.defers() {
                self.shared.commit.name()
            } else {
                format!(
                    "immediate (asked: {}; a persist on this medium is a flush and a fence)",
                    self.shared.commit.name()
                )
            },
            deferred_persists: inner.region.counters().deferred_persists,
            syncs: inner.region.counters().syncs,
            flush: inner.region.flush_instruction().name(),
            emulation: inner.region.info().emulation,
            region_bytes: inner.region.len(),
            block_bytes: geo.block_size(),
            blocks_allocated: inner.allocated_blocks.load(Ordering::Acquire),
            blocks_used: used,
            blocks_free: free,
            free_extents: inner.free.extents() as u64,
            blocks_owned: owned,
            blocks_sealed: sealed,
            blocks_large: large,
            live_bytes,
            dead_bytes: in_use.saturating_sub(live_bytes),
            space_amplification: if live_bytes == 0 {
                0.0
            } else {
                inner.region.len() as f64 / live_bytes as f64
            },
            read_only: inner.failure.reason(),
            index_bytes,
            dram_bytes: index_bytes + meta_bytes,
        }
    }

    /// Path of the backing file, if any.
    pub fn path(&self) -> Option<PathBuf> {
        self.inner().path.clone()
    }

    /// Closes this handle. First makes every acknowledged write durable (a no-op at the
    /// `Immediate` level, where each already is; one sync under `Eventual` and `None`) and
    /// returns that sync's error, if any. The last handle to close stops background work;
    /// clones and clients still alive keep the store open.
    pub fn close(self) -> Result<()> {
        let inner = self.inner();
        if !inner.failure.failed() {
            inner.fail_on_error(inner.settle())?;
        }
        drop(self);
        Ok(())
    }
}

/// Key-lock stripes (see [`crate::sync::KeyLocks`]).
const KEY_STRIPES: usize = 4096;

/// An iterator over a store's live records (see [`KvStore::iter`]). Yields owned
/// `(key, value)` pairs; an error (media corruption) ends it.
pub struct Iter {
    inner: Arc<Inner>,
    _gate: parking_lot::ArcRwLockReadGuard<parking_lot::RawRwLock, ()>,
    next_block: u64,
    used: u64,
    pending: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    failed: bool,
}

impl std::fmt::Debug for Iter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iter")
            .field("next_block", &self.next_block)
            .field("used", &self.used)
            .finish()
    }
}

impl Iter {
    /// Reads the live records of the next block into `pending`.
    fn fill(&mut self) -> Result<()> {
        let inner = &*self.inner;
        let b = self.next_block;
        self.next_block += 1;
        let (mut key, mut value, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        for off in verify::candidate_offsets(inner, b)? {
            if !inner.read_key_at(off, &mut key)? {
                continue;
            }
            let mut round = 0;
            loop {
                match inner.read_record(off, &key, &mut value, &mut scratch)? {
                    store::ReadOutcome::Found => {
                        if inner.indexed_at(&key, off) {
                            self.pending.push_back((key.clone(), value.clone()));
                        }
                        break;
                    }
                    store::ReadOutcome::NotThisKey => break,
                    // Not the key's record (any more): it would be skipped once read, and a
                    // stale one whose bytes fail their check reads as `Retry` for ever.
                    store::ReadOutcome::Retry if !inner.indexed_at(&key, off) => break,
                    store::ReadOutcome::Retry => crate::sync::backoff(&mut round),
                }
            }
        }
        Ok(())
    }
}

impl Iterator for Iter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(r) = self.pending.pop_front() {
                return Some(Ok(r));
            }
            if self.failed || self.next_block >= self.used {
                return None;
            }
            if let Err(e) = self.fill() {
                self.failed = true;
                return Some(Err(e));
            }
        }
    }
}

/// Pages per block for a new store: as asked, else the profile's interleave set (at most 8
/// pages: the offset has 3 page bits), else Viper's default.
fn pages_per_block(opts: &KvOptions, profile: Option<&crate::device::DeviceProfile>) -> u32 {
    opts.pages_per_block.unwrap_or_else(|| {
        profile
            .and_then(|p| p.interleave_ways)
            .map_or(DEFAULT_PAGES_PER_BLOCK, |w| {
                w.clamp(1, layout::MAX_PAGES_PER_BLOCK)
            })
    })
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(d) = b.get_mut(at..at + 4) {
        d.copy_from_slice(&v.to_le_bytes());
    }
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        w.copy_from_slice(s);
    }
    u32::from_le_bytes(w)
}

fn encode_header(hdr: &mut [u8], geo: &Geometry) {
    if let Some(m) = hdr.get_mut(header::MAGIC..header::MAGIC + 8) {
        m.copy_from_slice(MAGIC);
    }
    put_u32(hdr, header::VERSION, FORMAT_VERSION);
    let (kind, k, v) = match geo.layout {
        RecordLayout::Fixed {
            key_size,
            value_size,
        } => (1, key_size, value_size),
        RecordLayout::Variable => (2, 0, 0),
    };
    put_u32(hdr, header::KIND, kind);
    put_u32(hdr, header::KEY_SIZE, k);
    put_u32(hdr, header::VALUE_SIZE, v);
    put_u32(hdr, header::PAGE_SIZE, geo.page_size as u32);
    put_u32(hdr, header::PAGES_PER_BLOCK, geo.pages_per_block);
    put_u32(hdr, header::SLOTS, geo.slots);
    put_u32(hdr, header::CHUNK_BLOCKS, geo.chunk_blocks);
    let crc = crc32c::crc32c(hdr.get(..header::CRC_COVERS).unwrap_or_default());
    put_u32(hdr, header::CRC, crc);
}

fn decode_header(hdr: &[u8], path: Option<&Path>, chunk_size: u64) -> Result<Geometry> {
    let p = || path.map(Path::to_path_buf);
    if hdr.get(header::MAGIC..header::MAGIC + 8) != Some(&MAGIC[..]) {
        return Err(Error::BadMagic {
            path: p(),
            expected: "tierbase kv store",
        });
    }
    let crc = crc32c::crc32c(hdr.get(..header::CRC_COVERS).unwrap_or_default());
    if crc != get_u32(hdr, header::CRC) {
        return Err(Error::corrupt(path, "kv store header checksum mismatch"));
    }
    let version = get_u32(hdr, header::VERSION);
    if version != FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            path: p(),
            what: "kv store",
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let layout = match get_u32(hdr, header::KIND) {
        1 => RecordLayout::Fixed {
            key_size: get_u32(hdr, header::KEY_SIZE),
            value_size: get_u32(hdr, header::VALUE_SIZE),
        },
        2 => RecordLayout::Variable,
        other => {
            return Err(Error::corrupt(
                path,
                format!("unknown record layout kind {other}"),
            ));
        }
    };
    let ppb = get_u32(hdr, header::PAGES_PER_BLOCK);
    let stored_chunk = u64::from(get_u32(hdr, header::CHUNK_BLOCKS));
    let geo = Geometry::new(layout, ppb, chunk_size)
        .map_err(|e| Error::corrupt(path, format!("kv store header: {e}")))?;
    if u64::from(get_u32(hdr, header::PAGE_SIZE)) != geo.page_size
        || get_u32(hdr, header::SLOTS) != geo.slots
    {
        return Err(Error::corrupt(
            path,
            "kv store header geometry is inconsistent",
        ));
    }
    // The growth step is an open-time choice; the creating one is kept in the header only
    // for reference.
    let _ = stored_chunk;
    Ok(geo)
}

impl Store for KvStore {
    fn describe(&self) -> StoreDescription {
        let inner = self.inner();
        let label = inner.region.medium_label();
        let medium = match inner.path() {
            Some(p) => format!("{label} {}", p.display()),
            None => label.to_string(),
        };
        let guarantee = inner.region.survives_label();
        StoreDescription {
            store: "kv".into(),
            medium,
            guarantee: guarantee.into(),
            commit: self.shared.commit.name(),
            ordered: false,
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        KvStore::get(self, key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        crate::store::get_many_into(keys, |values, found| {
            KvStore::get_many(self, keys, values, found)
        })
    }

    fn check_record(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner().check_record(key, value)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        KvStore::put(self, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        KvStore::delete(self, key)
    }

    fn modify(&self, key: &[u8], decide: &mut dyn FnMut(Option<&[u8]>) -> Change) -> Result<()> {
        KvStore::modify(self, key, decide)
    }

    fn len(&self) -> u64 {
        KvStore::len(self) as u64
    }

    fn scan(&self, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> Result<u64> {
        KvStore::scan(self, cursor, count, out)
    }

    fn defers_sync(&self) -> bool {
        self.inner().region.defers_persists() && self.shared.commit.defers()
    }

    fn sync(&self) -> Result<()> {
        KvStore::sync(self)
    }

    fn metrics(&self) -> Vec<(String, String)> {
        let stats = self.stats();
        let m = self.metrics();
        let mut lines = vec![
            ("kv_records".to_string(), stats.records.to_string()),
            ("kv_layout".to_string(), format!("{:?}", stats.layout)),
            (
                "kv_durability_mode".to_string(),
                stats.durability.name().to_string(),
            ),
            ("kv_commit".to_string(), stats.commit.clone()),
            ("kv_flush".to_string(), stats.flush.to_string()),
            ("kv_emulation".to_string(), stats.emulation.clone()),
            (
                "kv_region_bytes".to_string(),
                stats.region_bytes.to_string(),
            ),
            ("kv_live_bytes".to_string(), stats.live_bytes.to_string()),
            ("kv_dead_bytes".to_string(), stats.dead_bytes.to_string()),
            (
                "kv_space_amplification".to_string(),
                format!("{:.2}", stats.space_amplification),
            ),
            ("kv_dram_bytes".to_string(), stats.dram_bytes.to_string()),
            ("kv_syncs".to_string(), stats.syncs.to_string()),
            (
                "kv_deferred_persists".to_string(),
                stats.deferred_persists.to_string(),
            ),
        ];
        // Media damage the open worked around (`serve` prints it at start).
        let damage = &self.recovery().damage;
        if !damage.is_empty() {
            lines.push(("kv_open_damage".to_string(), damage.join("; ")));
        }
        let counters = [
            ("puts", m.puts),
            ("updates", m.updates),
            ("deletes", m.deletes),
            ("gets", m.gets),
            ("get_hits", m.get_hits),
            ("read_retries", m.read_retries),
            ("damaged_reads", m.damaged_reads),
            ("compactions", m.compactions),
            ("records_moved", m.records_moved),
            ("large_records", m.large_records),
            ("reclaim_errors", m.reclaim_errors),
            ("fences", m.region.fences),
            ("flushes", m.region.flushes),
            ("bytes_written", m.region.bytes_written),
            ("io_errors", m.region.errors),
        ];
        for (name, value) in counters {
            lines.push((format!("kv_{name}"), value.to_string()));
        }
        if let Some(reason) = stats.read_only {
            lines.push(("kv_read_only".to_string(), reason));
        }
        lines
    }

    fn close(self: Box<Self>) -> Result<()> {
        KvStore::close(*self)
    }
}
