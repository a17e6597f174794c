//! The store adapter contract and the registry of stores.
//!
//! Owns: the [`Store`] and [`Client`] traits every benchmarked store implements (tierbase's
//! stores and the baselines alike), [`StoreInfo`] (what a result says about the store: medium,
//! durability, emulation, capabilities), [`StoreOptions`], and [`open_store`], the registry by
//! name. Must not touch: workloads or measurement; a store knows nothing about YCSB.
//!
//! Stores registered here:
//! - `kv`: tierbase's hybrid persistent KV store (Viper design): records in a persistent
//!   region file in the run's directory, index in DRAM; fixed-size records when the workload's
//!   values have one size. `kv-var`: the same with variable-size records always.
//! - `btree`: tierbase's B+-tree store: a DRAM buffer pool (`--dram`, default 64 MiB) over
//!   a page file, write-ahead log with group commit; ordered scans (workload E).
//! - `plush`: tierbase's Plush store, a persistent hash table: a DRAM level of fixed size
//!   (from the expected records, or `--dram`) over leveled PMem hash directories in a region
//!   file; PiBench's blind upserts and removes; `fixed8` records when keys and values are
//!   8 bytes. No ordered scans. `plush-range`: the same partitioned by the keys' first
//!   8 bytes, with ordered scans (workload E); skew-prone.
//! - `memory`: the in-memory reference, a sharded concurrent hash map in anonymous DRAM; the
//!   upper bound. No ordered scans (workload E needs `memory-btree`).
//! - `memory-btree`: an ordered in-memory map (`BTreeMap` behind a read-write lock), for
//!   workload E and for checking scans.
//! - `rocksdb` (feature `rocksdb`): RocksDB through the system library, WAL on, `sync=true`,
//!   a 10-bit Bloom filter per key in every table.
//! - `rocksdb-nosync` (feature `rocksdb`): the same with `sync=false`.
//! - `redb` (feature `redb`): the pure-Rust redb database, a write transaction per write,
//!   durable per `--durability` (an fsync per commit at `immediate`); cache from `--dram`.
//! - `lmdb` (feature `lmdb`): LMDB through heed (compiled from source), a write transaction
//!   per write, durable per `--durability` (an fsync per commit at `immediate`, `NO_SYNC`
//!   otherwise); the OS page cache holds the map (no cache cap).
//!
//! Not registered: [`NullStore`], a harness-overhead probe that stores nothing, used to
//! measure what the benchmark driver itself costs per operation.
//!
//! To add a store: implement [`Store`] and [`Client`] in a module here, add a [`StoreEntry`]
//! to [`STORES`], and run [`crate::contract::run_contract_suite`] on it from a test.

mod btree;
mod common;
mod kv;
#[cfg(feature = "lmdb")]
mod lmdb;
mod memory;
mod null;
mod plush;
#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "rocksdb")]
mod rocksdb;
#[cfg(feature = "rocksdb")]
mod rocksdb_ffi;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tierbase::device::{DeviceProfile, FsKind, fs_kind, on_huge_page_tmpfs};
use tierbase::hash::Partition;

#[cfg(feature = "lmdb")]
pub use self::lmdb::LmdbStore;
#[cfg(feature = "redb")]
pub use self::redb::RedbStore;
pub use crate::error::{BenchError, Result};
pub use btree::{BTreeBenchStore, Tiers, options as btree_options};
pub use kv::KvBenchStore;
pub use memory::{MemoryBTreeStore, MemoryStore};
pub use null::NullStore;
pub use plush::PlushBenchStore;

/// A store under benchmark: shared by all worker threads, each of which takes a [`Client`].
pub trait Store: Send + Sync {
    /// What the store is and on what it runs; recorded with every result.
    fn info(&self) -> StoreInfo;

    /// A new client for one worker thread.
    fn client(&self) -> Result<Box<dyn Client + '_>>;

    /// Closes the store, flushing whatever it must. Called once, after the last client is gone.
    fn close(self: Box<Self>) -> Result<()>;
}

/// One worker thread's handle on a [`Store`].
pub trait Client: Send {
    /// Inserts `key` or replaces its value.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Reads `key` into `out` (replacing its contents); `false` when the key is absent.
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool>;

    /// Reads a batch of keys: `outs[i]` receives key `i`'s value and `found[i]` whether it
    /// exists (the three slices have equal lengths). Stores with a batched read overlap the
    /// keys' misses; the default reads one key after another.
    fn get_many(&mut self, keys: &[&[u8]], outs: &mut [Vec<u8>], found: &mut [bool]) -> Result<()> {
        for ((key, out), f) in keys.iter().zip(outs.iter_mut()).zip(found.iter_mut()) {
            *f = self.get(key, out)?;
        }
        Ok(())
    }

    /// Replaces the value of `key` only if present; `false` (and no change) when absent.
    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool>;

    /// Removes `key`; `false` when it was absent.
    fn delete(&mut self, key: &[u8]) -> Result<bool>;

    /// Visits up to `count` records in key order (byte-wise lexicographic), starting at the
    /// first key `>= start`, and returns how many were visited. A store without ordered scans
    /// returns [`BenchError::Unsupported`] (see [`BenchError::is_unsupported`]).
    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize>;
}

/// What a store can do beyond put/get/update/delete.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// [`Client::scan`] works (keys are kept in order).
    pub ordered_scan: bool,
    /// [`Client::update`] and [`Client::delete`] check presence and write atomically with
    /// respect to other clients (otherwise they are a read followed by a write).
    pub atomic_update: bool,
}

/// What a result says about the store it measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreInfo {
    /// Registry name (`memory`, `rocksdb`, ...).
    pub name: String,
    /// Where the data lives, truthfully: `DRAM (anonymous)`, `tmpfs file`, `disk file`, `DAX`.
    pub medium: String,
    /// What an acknowledged write survives: `none`, `process-crash`, `msync`, `wal+fsync`, ...
    pub durability: String,
    /// The device profile emulated on top of the medium, if any.
    pub emulated: Option<String>,
    /// The cache-line flush instruction its persistent-memory writes ran (`clwb`,
    /// `clflushopt`, `clflush`, `none`); `None` when it writes no persistent memory (block
    /// I/O, or DRAM only). Files written before 2026-12-03 had it in the notes only.
    #[serde(default)]
    pub flush: Option<String>,
    /// What the store supports.
    pub capabilities: Capabilities,
    /// Free-form notes: settings, caveats (shown in reports).
    pub notes: Vec<String>,
}

impl StoreInfo {
    /// Info with no emulation, no capabilities and no notes.
    pub fn new(
        name: impl Into<String>,
        medium: impl Into<String>,
        durability: impl Into<String>,
    ) -> Self {
        StoreInfo {
            name: name.into(),
            medium: medium.into(),
            durability: durability.into(),
            emulated: None,
            flush: None,
            capabilities: Capabilities::default(),
            notes: Vec::new(),
        }
    }

    /// One label naming the store, its durability, medium, flush instruction and emulation, as
    /// reports show it: `rocksdb (wal+fsync) · disk file`, `kv (process-crash) · tmpfs file ·
    /// flush clwb` or `memory (none) · DRAM (anonymous) · emulated hdd`.
    pub fn label(&self) -> String {
        let medium = match &self.flush {
            Some(f) => format!("{} · flush {f}", self.medium),
            None => self.medium.clone(),
        };
        series_label(
            &self.name,
            &self.durability,
            &medium,
            self.emulated.as_deref(),
        )
    }
}

/// The label of a (store, durability, medium, emulation) combination (see [`StoreInfo::label`]).
pub fn series_label(name: &str, durability: &str, medium: &str, emulated: Option<&str>) -> String {
    let mut s = format!("{name} ({durability}) · {medium}");
    if let Some(p) = emulated {
        s.push_str(" · emulated ");
        s.push_str(p);
    }
    s
}

/// The truthful medium label of files in `dir`: `tmpfs file` on a memory-backed file system
/// (`tmpfs file, 2 MiB pages` where the mount backs files with huge pages, so that regions
/// are mapped as DAX maps persistent memory), `disk file` otherwise (see
/// [`tierbase::device::fs_kind`]).
pub fn file_medium(dir: &Path) -> &'static str {
    match fs_kind(dir) {
        FsKind::Memory if on_huge_page_tmpfs(dir) => "tmpfs file, 2 MiB pages",
        FsKind::Memory => "tmpfs file",
        FsKind::Disk => "disk file",
    }
}

/// How to open a store.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct StoreOptions {
    /// Directory the store may use (created if missing; in-memory stores ignore it).
    pub dir: PathBuf,
    /// Records the store is expected to hold at the end of the run: those loaded plus the
    /// inserts of the run (a sizing hint).
    pub records: u64,
    /// Key size in bytes (a hint).
    pub key_size: usize,
    /// Largest value size in bytes (a hint).
    pub value_size: usize,
    /// Every value has exactly `value_size` bytes (lets a store use fixed-size records).
    pub value_size_fixed: bool,
    /// Worker threads that will use the store (a hint).
    pub threads: usize,
    /// Make the store behave like this device profile, if it can.
    pub emulate: Option<DeviceProfile>,
    /// Cache-line flush instruction for stores on persistent regions (`kv`, `plush`); `None` = the
    /// region's default for its medium. Other stores ignore it.
    pub flush: Option<tierbase::device::FlushInstruction>,
    /// Whether a store may pre-size itself for `records` (default); `false` starts it at its
    /// minimum size, so that the run includes its growth.
    pub presize: bool,
    /// When acknowledged writes become durable, for stores that offer levels (`kv`: deferred
    /// syncs on a disk file). Others run their one level and say so.
    pub durability: tierbase::device::Durability,
    /// DRAM budget in bytes for stores with a buffer pool or block cache (`btree`, `redb`,
    /// `rocksdb`), or a DRAM level (`plush`); `None`: the store's default (`plush`: sized from
    /// `records`).
    pub dram_budget: Option<u64>,
    /// Dirty pages written per eviction of a dirty victim for stores with a buffer pool
    /// (`btree`: ACE's `n_w`); `None`: the store's default (`k_w` of an emulated profile,
    /// else 1).
    pub write_back_batch: Option<usize>,
    /// NVM budget in bytes of stores with an NVM tier (`btree-3tier`, `btree-nvm`); `None`:
    /// the store's default.
    pub nvm_budget: Option<u64>,
    /// Directory of the NVM tier's region file (e.g. a DAX mount); `None`: the run's
    /// directory.
    pub nvm_dir: Option<PathBuf>,
    /// Make the NVM tier behave like this memory profile (latency and bandwidth charged to
    /// its loads and persists).
    pub nvm_emulate: Option<DeviceProfile>,
    /// Keep the log of stores with an NVM tier in files (group commit with `fdatasync`)
    /// instead of on NVM (a persist per commit, the default).
    pub wal_files: bool,
    /// Load NVM pages of `btree-3tier` whole on every DRAM miss instead of a cache line at
    /// a time on point reads (`btree-nvm`, the basic NVM buffer manager, always does).
    pub nvm_pages: bool,
    /// Percent of the DRAM budget of `btree-3tier` given to mini pages (`None`: the store's
    /// default).
    pub mini_page_percent: Option<u8>,
    /// Page size in bytes of the B-tree stores (`None`: the store's default, 16 KiB).
    pub page_size: Option<usize>,
    /// B-tree stores: point reads pass the inner pages without latching them
    /// (`BTreeOptions::optimistic_reads`). Others ignore it.
    pub optimistic_reads: bool,
    /// B-tree stores: pointer swizzling (`BTreeOptions::swizzle`; `None`: the store's
    /// default). Others ignore it.
    pub swizzle: Option<bool>,
    /// RocksDB with a DRAM budget: charge its memtables to the budget (two write buffers of
    /// an eighth of it; the block cache gets the other three quarters and holds the index
    /// blocks too), so that its caches and write buffers together are the budget (table
    /// readers and compaction buffers stay outside it). Otherwise the block cache is the whole
    /// budget and the memtables (64 MiB each by default) come on top. Others ignore it.
    pub memtables_in_budget: bool,
}

impl StoreOptions {
    /// Options for a store in `dir`, with small sizing hints and no emulation.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StoreOptions {
            dir: dir.into(),
            records: 1_000,
            key_size: 24,
            value_size: 100,
            value_size_fixed: false,
            threads: 1,
            emulate: None,
            flush: None,
            presize: true,
            durability: tierbase::device::Durability::Immediate,
            dram_budget: None,
            write_back_batch: None,
            nvm_budget: None,
            nvm_dir: None,
            nvm_emulate: None,
            wal_files: false,
            nvm_pages: false,
            mini_page_percent: None,
            page_size: None,
            optimistic_reads: false,
            swizzle: None,
            memtables_in_budget: false,
        }
    }
}

/// A registered store.
#[derive(Clone, Copy, Debug)]
pub struct StoreEntry {
    /// Registry name.
    pub name: &'static str,
    /// One line for `tierbase bench stores`.
    pub summary: &'static str,
    /// The cargo feature it needs, if any.
    pub feature: Option<&'static str>,
    /// Whether this build includes it.
    pub built: bool,
    open: fn(&StoreOptions) -> Result<Box<dyn Store>>,
}

#[cfg(feature = "rocksdb")]
const ROCKSDB_BUILT: bool = true;
#[cfg(not(feature = "rocksdb"))]
const ROCKSDB_BUILT: bool = false;
const REDB_BUILT: bool = cfg!(feature = "redb");
const LMDB_BUILT: bool = cfg!(feature = "lmdb");

/// Every store this crate knows, built or not.
pub const STORES: &[StoreEntry] = &[
    StoreEntry {
        name: "kv",
        summary: "tierbase hybrid KV (Viper): records in a persistent region file, DRAM index; \
                  durable per the medium (process-crash on tmpfs, msync on disk, dax on DAX)",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(KvBenchStore::open(o, false)?)),
    },
    StoreEntry {
        name: "kv-var",
        summary: "tierbase hybrid KV with variable-size records always",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(KvBenchStore::open(o, true)?)),
    },
    StoreEntry {
        name: "btree",
        summary: "tierbase B+-tree: DRAM buffer pool (--dram) over a page file, WAL with group \
                  commit; ordered scans; durable per --durability (fdatasync of the log)",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(BTreeBenchStore::open(o, Tiers::DramSsd)?)),
    },
    StoreEntry {
        name: "btree-3tier",
        summary: "tierbase B+-tree, three tiers: DRAM pool (--dram) over an NVM tier (--nvm, a \
                  region file in --nvm-dir; default 4x the DRAM budget) over the page file; \
                  pages enter NVM through the admission set",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(BTreeBenchStore::open(o, Tiers::ThreeTier)?)),
    },
    StoreEntry {
        name: "btree-nvm",
        summary: "tierbase B+-tree, DRAM pool over NVM holding every page (the basic NVM buffer \
                  manager; --nvm default: room for the records); the page file takes only NVM \
                  victims",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(BTreeBenchStore::open(o, Tiers::DramNvm)?)),
    },
    StoreEntry {
        name: "btree-nvm-direct",
        summary: "tierbase B+-tree, NVM direct: the pages in NVM (--nvm, a region file in \
                  --nvm-dir; default room for the records plus the undo log), searched and \
                  changed in place under an undo log; no DRAM pool, no redo log; every batch \
                  persisted when it returns",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(BTreeBenchStore::open(o, Tiers::NvmDirect)?)),
    },
    StoreEntry {
        name: "plush",
        summary: "tierbase Plush: persistent hash table, fixed-size DRAM level over leveled PMem \
                  hash directories in a region file; PiBench semantics (blind upsert/remove); \
                  every write durable per the medium (one log entry, one persist)",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(PlushBenchStore::open(o, Partition::Hash)?)),
    },
    StoreEntry {
        name: "plush-range",
        summary: "tierbase Plush partitioned by range (the keys' first 8 bytes): ordered scans \
                  (workload E), otherwise as plush; skew-prone (keys sharing a prefix crowd \
                  one DRAM entry)",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(PlushBenchStore::open(o, Partition::Range)?)),
    },
    StoreEntry {
        name: "memory",
        summary: "in-memory reference: sharded concurrent hash map in DRAM, no durability, no scans",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(MemoryStore::open(o)?)),
    },
    StoreEntry {
        name: "memory-btree",
        summary: "in-memory ordered map (BTreeMap behind a read-write lock), no durability",
        feature: None,
        built: true,
        open: |o| Ok(Box::new(MemoryBTreeStore::open(o)?)),
    },
    StoreEntry {
        name: "rocksdb",
        summary: "RocksDB (system librocksdb), WAL on, sync=true: every write is fsynced; \
                  10-bit Bloom filters",
        feature: Some("rocksdb"),
        built: ROCKSDB_BUILT,
        open: open_rocksdb_sync,
    },
    StoreEntry {
        name: "rocksdb-nosync",
        summary: "RocksDB (system librocksdb), WAL on, sync=false: survives a process crash only; \
                  10-bit Bloom filters",
        feature: Some("rocksdb"),
        built: ROCKSDB_BUILT,
        open: open_rocksdb_nosync,
    },
    StoreEntry {
        name: "redb",
        summary: "redb (pure Rust, compiled in): copy-on-write B-tree file, a write transaction \
                  per write, fsync per commit (per --durability); cache from --dram",
        feature: Some("redb"),
        built: REDB_BUILT,
        open: open_redb,
    },
    StoreEntry {
        name: "lmdb",
        summary: "LMDB via heed (compiled in): memory-mapped B+-tree, a write transaction per \
                  write, fsync per commit (NO_SYNC per --durability); OS page cache, no cap",
        feature: Some("lmdb"),
        built: LMDB_BUILT,
        open: open_lmdb,
    },
];

#[cfg(feature = "rocksdb")]
fn open_rocksdb_sync(o: &StoreOptions) -> Result<Box<dyn Store>> {
    Ok(Box::new(rocksdb::RocksDbStore::open(o, true)?))
}
#[cfg(feature = "rocksdb")]
fn open_rocksdb_nosync(o: &StoreOptions) -> Result<Box<dyn Store>> {
    Ok(Box::new(rocksdb::RocksDbStore::open(o, false)?))
}
#[cfg(not(feature = "rocksdb"))]
fn open_rocksdb_sync(_: &StoreOptions) -> Result<Box<dyn Store>> {
    Err(not_built("rocksdb", "rocksdb", ROCKSDB_HINT))
}
#[cfg(not(feature = "rocksdb"))]
fn open_rocksdb_nosync(_: &StoreOptions) -> Result<Box<dyn Store>> {
    Err(not_built("rocksdb-nosync", "rocksdb", ROCKSDB_HINT))
}
#[cfg(not(feature = "rocksdb"))]
const ROCKSDB_HINT: &str = "needs librocksdb-dev; see docs/BENCHMARKS.md";

#[cfg(feature = "redb")]
fn open_redb(o: &StoreOptions) -> Result<Box<dyn Store>> {
    Ok(Box::new(RedbStore::open(o)?))
}
#[cfg(not(feature = "redb"))]
fn open_redb(_: &StoreOptions) -> Result<Box<dyn Store>> {
    Err(not_built(
        "redb",
        "redb",
        "pure Rust, no system library; see docs/BENCHMARKS.md",
    ))
}

#[cfg(feature = "lmdb")]
fn open_lmdb(o: &StoreOptions) -> Result<Box<dyn Store>> {
    Ok(Box::new(LmdbStore::open(o)?))
}
#[cfg(not(feature = "lmdb"))]
fn open_lmdb(_: &StoreOptions) -> Result<Box<dyn Store>> {
    Err(not_built(
        "lmdb",
        "lmdb",
        "compiles LMDB from source, needs a C compiler; see docs/BENCHMARKS.md",
    ))
}

#[cfg(any(not(feature = "rocksdb"), not(feature = "redb"), not(feature = "lmdb")))]
fn not_built(name: &str, feature: &'static str, hint: &'static str) -> BenchError {
    BenchError::StoreNotBuilt {
        name: name.to_string(),
        feature,
        hint,
    }
}

/// The stores of this build that serve ordered scans (workload E), the tierbase ones first;
/// what an error suggests, so it never names a store the user would have to rebuild for.
pub fn built_stores_with_scans() -> Vec<&'static str> {
    const WITH_SCANS: [&str; 8] = [
        "btree",
        "btree-3tier",
        "plush-range",
        "memory-btree",
        "rocksdb",
        "rocksdb-nosync",
        "redb",
        "lmdb",
    ];
    WITH_SCANS
        .into_iter()
        .filter(|name| find_store(name).is_ok_and(|e| e.built))
        .collect()
}

/// Looks a store up by name (case-insensitive).
pub fn find_store(name: &str) -> Result<&'static StoreEntry> {
    STORES
        .iter()
        .find(|e| e.name.eq_ignore_ascii_case(name.trim()))
        .ok_or_else(|| BenchError::UnknownStore {
            name: name.to_string(),
            known: STORES.iter().map(|e| e.name).collect::<Vec<_>>().join(", "),
        })
}

/// Opens the store registered as `name` with `opts`. Unknown names list the known ones; a
/// store whose cargo feature is off says which feature to enable.
pub fn open_store(name: &str, opts: &StoreOptions) -> Result<Box<dyn Store>> {
    let entry = find_store(name)?;
    (entry.open)(opts)
}
