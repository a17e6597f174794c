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
//! let opts = KvOptions { chunk_size: 1 << 20, ..KvOptions::default() };
//! let store = KvStore::create(&path, &opts)?; // variable-size records by default
//! let mut client = store.client(); // one per thread
//! client.put(b"hello", b"world")?; // durable when it returns
//! let mut value = Vec::new();
//! assert!(store.get(b"hello", &mut value)?);
//! assert_eq!(value, b"world");
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
//! | point get / put / update / delete | yes (gets are lock-free) |
//! | ordered range scans | **no** (hash index; use a B-tree store for scans) |
//! | unordered iteration | yes ([`KvStore::for_each`], weakly consistent) |
//! | transactions / multi-key atomicity | no |
//! | durability | every acknowledged write, in the region's [`DurabilityMode`] |
//! | multi-process access | no (one process opens a store) |

mod background;
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
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::SegQueue;
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
use crate::device::{DurabilityMode, PmemRegion, RegionOptions};
use crate::error::{Error, Result};

/// Default pages per block: Viper's six (one 4 KiB page per DIMM of a 6-DIMM interleave set).
pub const DEFAULT_PAGES_PER_BLOCK: u32 = 6;

/// How to create or open a store.
#[derive(Clone, Debug)]
pub struct KvOptions {
    /// Record layout. On create: the layout to use (default: variable-size). On open: if set,
    /// must match the file, else [`Error::LayoutMismatch`].
    pub layout: Option<RecordLayout>,
    /// Pages per block (1..=8), used on create: one 4 KiB page per DIMM of the device's
    /// interleave set. `None` (default) = the emulated profile's `interleave_ways` when the
    /// region emulates one that states it, else Viper's 6 ([`DEFAULT_PAGES_PER_BLOCK`]).
    pub pages_per_block: Option<u32>,
    /// Bytes the region grows by when blocks run out (whole blocks). Default 1 GiB.
    pub chunk_size: u64,
    /// Whether the region may grow. If not, inserts beyond capacity fail with
    /// [`Error::StoreFull`] and the store stays usable.
    pub allow_growth: bool,
    /// Threads used to rebuild the index on open. Default: available parallelism.
    pub recovery_threads: usize,
    /// Background reclamation; `None` (default) = off, call [`KvStore::compact`] yourself.
    pub reclaim: Option<ReclaimOptions>,
    /// Options of the underlying region (durability mode, emulated profile, reservation).
    pub region: RegionOptions,
    /// Testing aid: masks key fingerprints to force collisions. Leave at `u64::MAX`.
    #[doc(hidden)]
    pub fingerprint_mask: u64,
}

impl Default for KvOptions {
    fn default() -> Self {
        KvOptions {
            layout: None,
            pages_per_block: None,
            chunk_size: 1 << 30,
            allow_growth: true,
            recovery_threads: std::thread::available_parallelism().map_or(1, usize::from),
            reclaim: None,
            region: RegionOptions::default(),
            fingerprint_mask: u64::MAX,
        }
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
    /// DRAM held by the index.
    pub index_bytes: u64,
    /// DRAM held by the index and per-page/per-block metadata.
    pub dram_bytes: u64,
}

/// The store. Share it between threads (`&KvStore` is `Send + Sync`); give each thread its own
/// [`Client`] for writes.
pub struct KvStore {
    inner: Arc<Inner>,
    recovery: RecoveryReport,
    reclaimer: Mutex<Option<background::Background>>,
    grower: Mutex<Option<background::Background>>,
    /// The insert position of [`KvStore::put`]'s store-wide client, kept between calls so
    /// that each call does not take (and seal) a block of its own.
    shared_client: Mutex<client::ClientState>,
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl KvStore {
    /// Creates a store in a new region file at `path`.
    pub fn create(path: &Path, opts: &KvOptions) -> Result<Self> {
        let layout = opts.layout.unwrap_or(RecordLayout::Variable);
        let ppb = pages_per_block(opts, opts.region.emulate.as_ref());
        let geo = Geometry::new(layout, ppb, opts.chunk_size)?;
        let len = geo.region_len_for(u64::from(geo.chunk_blocks));
        let region = PmemRegion::create(path, len, &opts.region)?;
        Self::create_in(region, opts)
    }

    /// Opens the store in the region file at `path`, running recovery.
    pub fn open(path: &Path, opts: &KvOptions) -> Result<Self> {
        let region = PmemRegion::open(path, &opts.region)?;
        Self::open_in(region, opts)
    }

    /// Opens `path` if it exists, else creates it.
    pub fn open_or_create(path: &Path, opts: &KvOptions) -> Result<Self> {
        if path.exists() {
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
        region.grow(geo.region_len_for(u64::from(geo.chunk_blocks)))?;
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
        // Size the index for what the used blocks hold when they are 3/4 full, so that
        // recovery rarely splits segments (sizing for completely full blocks would waste DRAM
        // on stores with many deletes).
        let used_blocks = region
            .atomic_u64(header::USED_BLOCKS as u64)?
            .load(std::sync::atomic::Ordering::Acquire);
        let per_block = match geo.layout {
            RecordLayout::Fixed { .. } => u64::from(geo.slots) * u64::from(geo.pages_per_block),
            RecordLayout::Variable => geo.block_size() / 256,
        };
        let index = OffsetIndex::with_capacity(used_blocks.saturating_mul(per_block) * 3 / 4);
        let short_keys =
            matches!(geo.layout, RecordLayout::Fixed { key_size, .. } if key_size <= 8);
        let inner = Arc::new(Inner {
            region,
            geo,
            path,
            index,
            short_keys,
            fingerprint_mask: opts.fingerprint_mask,
            pages: boxcar::Vec::new(),
            blocks: boxcar::Vec::new(),
            allocated_blocks: AtomicU64::new(0),
            next_block: AtomicU64::new(0),
            free_blocks: SegQueue::new(),
            grow_lock: Mutex::new(()),
            allow_growth: opts.allow_growth,
            clock: AtomicU64::new(0),
            metrics: metrics::Metrics::default(),
            compaction_gate: RwLock::new(()),
            grower: Mutex::new(None),
        });
        let recovery = recovery::recover(&inner, opts.recovery_threads.max(1))?;
        let reclaimer = opts.reclaim.clone().map(|r| {
            background::Background::spawn(
                "tierbase-kv-reclaim",
                inner.clone(),
                r.interval,
                move |inner, ticker| compact::reclaim_loop(inner, ticker, &r),
            )
        });
        let grower = opts.allow_growth.then(|| {
            background::Background::spawn(
                "tierbase-kv-grow",
                inner.clone(),
                std::time::Duration::from_millis(100),
                store::grow_loop,
            )
        });
        *inner.grower.lock() = grower.as_ref().and_then(background::Background::handle);
        Ok(KvStore {
            inner,
            recovery,
            reclaimer: Mutex::new(reclaimer),
            grower: Mutex::new(grower),
            shared_client: Mutex::new(client::ClientState::default()),
        })
    }

    /// A client for the calling thread.
    pub fn client(&self) -> Client<'_> {
        Client::new(&self.inner)
    }

    /// Reads `key` into `value`; returns whether it exists. Lock-free.
    pub fn get(&self, key: &[u8], value: &mut Vec<u8>) -> Result<bool> {
        let mut scratch = Vec::new();
        self.inner.get(key, value, &mut scratch)
    }

    /// Inserts or replaces `key` through a store-wide client (serialised; for convenience —
    /// use one [`Client`] per thread for throughput). Returns whether the key was new.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let mut state = self.shared_client.lock();
        let mut client = Client::resume(&self.inner, *state);
        let result = client.put(key, value);
        *state = client.suspend();
        result
    }

    /// Deletes `key`; returns whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        let mut scratch = Vec::new();
        self.inner.delete(key, &mut scratch)
    }

    /// Number of live keys.
    pub fn len(&self) -> usize {
        self.inner.index.len()
    }

    /// Whether the store has no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record layout.
    pub fn layout(&self) -> RecordLayout {
        self.inner.geo.layout
    }

    /// Pages per block of this store.
    pub fn pages_per_block(&self) -> u32 {
        self.inner.geo.pages_per_block
    }

    /// Durability mode of the region.
    pub fn durability(&self) -> DurabilityMode {
        self.inner.region.durability()
    }

    /// The underlying region (for inspection, counters and crash simulation).
    pub fn region(&self) -> &PmemRegion {
        &self.inner.region
    }

    /// What recovery did when this store was opened.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Counter snapshot.
    pub fn metrics(&self) -> KvMetrics {
        self.inner.metrics.snapshot(self.inner.region.counters())
    }

    /// Compacts every sealed block at least `free_threshold` free (0..1). Returns
    /// (blocks compacted, records moved). Safe to call while other threads use the store.
    pub fn compact(&self, free_threshold: f64) -> Result<(u64, u64)> {
        compact::compact_all(&self.inner, free_threshold, &mut self.client())
    }

    /// Calls `f` with every live record, in no particular order. Weakly consistent: a record
    /// written or deleted during the walk may or may not be seen; each record is seen at most
    /// once and never torn. Compaction waits while a walk is running.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<()> {
        let inner = &self.inner;
        let _gate = inner.compaction_gate.read();
        let used = inner.next_block.load(Ordering::Acquire);
        let (mut key, mut value, mut scratch) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..used {
            for off in verify::candidate_offsets(inner, b)? {
                if !inner.read_key_at(off, &mut key)? {
                    continue;
                }
                let mut round = 0;
                loop {
                    match inner.read_record(off, &key, &mut value, &mut scratch)? {
                        store::ReadOutcome::Found => {
                            if inner.indexed_at(&key, off) {
                                f(&key, &value);
                            }
                            break;
                        }
                        store::ReadOutcome::NotThisKey => break,
                        store::ReadOutcome::Retry => store::backoff(&mut round),
                    }
                }
            }
        }
        Ok(())
    }

    /// Space and memory figures.
    pub fn stats(&self) -> KvStats {
        let inner = &self.inner;
        let geo = inner.geo;
        let used = inner.next_block.load(Ordering::Acquire);
        let (mut free, mut owned, mut sealed, mut large, mut live) = (0, 0, 0, 0, 0u64);
        for b in 0..used {
            let Ok(m) = inner.block_meta(b) else { continue };
            match m.state.load(Ordering::Acquire) {
                FREE => free += 1,
                OWNED => owned += 1,
                LARGE => large += 1,
                SEALED => sealed += 1,
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
        let meta_bytes = inner.pages.count() as u64 * 4
            + inner.blocks.count() as u64 * std::mem::size_of::<store::BlockMeta>() as u64;
        KvStats {
            layout: geo.layout,
            records: inner.index.len() as u64,
            durability: inner.region.durability(),
            guarantee: inner.region.durability().guarantee(),
            emulation: inner.region.info().emulation,
            region_bytes: inner.region.len(),
            block_bytes: geo.block_size(),
            blocks_allocated: inner.allocated_blocks.load(Ordering::Acquire),
            blocks_used: used,
            blocks_free: free,
            blocks_owned: owned,
            blocks_sealed: sealed,
            blocks_large: large,
            live_bytes,
            dead_bytes: in_use.saturating_sub(live_bytes),
            index_bytes,
            dram_bytes: index_bytes + meta_bytes,
        }
    }

    /// Path of the backing file, if any.
    pub fn path(&self) -> Option<PathBuf> {
        self.inner.path.clone()
    }

    /// Stops background work and closes the store. Every acknowledged write is already
    /// durable; closing adds nothing to durability, it only ends the reclaimer cleanly.
    pub fn close(self) -> Result<()> {
        self.shutdown();
        Ok(())
    }

    fn shutdown(&self) {
        for worker in [&self.reclaimer, &self.grower] {
            if let Some(mut w) = worker.lock().take() {
                w.stop();
            }
        }
        *self.inner.grower.lock() = None;
        // Give the store-wide client's insert block back (dropping a client seals it).
        let state = std::mem::take(&mut *self.shared_client.lock());
        drop(Client::resume(&self.inner, state));
    }
}

impl Drop for KvStore {
    fn drop(&mut self) {
        self.shutdown();
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
    let mut geo = Geometry::new(layout, ppb, chunk_size)
        .map_err(|e| Error::corrupt(path, format!("kv store header: {e}")))?;
    if u64::from(get_u32(hdr, header::PAGE_SIZE)) != geo.page_size
        || get_u32(hdr, header::SLOTS) != geo.slots
    {
        return Err(Error::corrupt(
            path,
            "kv store header geometry is inconsistent",
        ));
    }
    if stored_chunk > 0 {
        geo.chunk_blocks = stored_chunk.min(u64::from(u32::MAX)) as u32;
    }
    Ok(geo)
}
