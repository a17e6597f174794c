//! The B+-tree store: an ordered key-value store of slotted pages in a buffer pool over a page
//! file, with a write-ahead log, group commit, atomic write batches, fuzzy checkpoints and
//! restart.
//!
//! Owns: the store's files (a directory holding `pages.tb`, `wal-0.tb` and `wal-1.tb`), the
//! superblock, creating, opening (restart: redo from the last checkpoint), checkpoints, the
//! durability levels, the background thread that flushes the log and checkpoints (and the
//! log's write-behind thread, [`crate::wal::Wal::spawn_write_behind`]), the
//! store's counters, and its [`crate::store::Store`] adapter. Must not touch: the page layout
//! ([`node`]), the tree's algorithms (`tree`), frames and eviction ([`crate::buffer`]) or the
//! log's framing ([`crate::wal`]).
//!
//! Durability: a batch is one log frame. With [`Durability::Immediate`] a write returns once
//! the log holds it durably (concurrent writers share the `fdatasync`); with `Eventual` a
//! background flush makes it durable within the interval; with `None` at [`BTreeStore::sync`],
//! a checkpoint or close. At `Eventual` a write returns once its frame is written to the log
//! file (unsynced), so a crash of the process keeps it; at `None` the log's tail may wait in
//! the process until a sync. Pages reach the page file only after the log (WAL rule), and only
//! with complete batches (no steal), so restart needs redo only. The format is described in
//! docs/FORMAT-btree.md and docs/FORMAT-wal.md.

pub mod node;
mod tree;

use std::collections::{HashMap, VecDeque};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::buffer::nvm::{Admission, NvmTier, StoreTie};
use crate::buffer::{BufferPool, MINI_PAGE_BYTES, PoolOptions, WalRule};
use crate::device::{
    AlignedBuf, BlockDevice, BlockOptions, Counter, Durability, DurabilityMode, FsKind,
    PagedRegion, PmemRegion, RegionOptions, SimPower, fs_kind,
};
use crate::error::{Error, Result};
use crate::store::{Change, Store, StoreDescription};
use crate::sync::Background;
use crate::wal::{DEFAULT_TAIL_LIMIT, LogFile, Wal};
use tree::{FIRST_ROOT, META_PID, Tree};
pub use tree::{Limits, Meta};

const SUPER_MAGIC: &[u8; 8] = b"TBBTREE1";
/// The newest format: version 3 is version 2 with a flags word in the superblock (bit 0: the
/// store has an NVM tier, whose pages may be newer than the page file's); version 4 adds
/// bit 1: the log files are NVM regions; version 5 adds bit 2: the NVM-direct design (the
/// pages live in the NVM region, with its undo log; the page file holds the superblocks).
/// Each store is written in the oldest version that describes it — version 5 only for NVM
/// direct, 4 only with its log on NVM, 3 only with an NVM tier, else 2 — so that code which
/// does not know a feature refuses the store instead of misreading it.
const FORMAT_VERSION: u32 = 5;
/// The version written for a store with its log on NVM.
const NVM_LOG_VERSION: u32 = 4;
/// The version written for a store with an NVM tier and its log in files.
const NVM_TIER_VERSION: u32 = 3;
/// The version written for a store without an NVM tier.
const PLAIN_VERSION: u32 = 2;
/// The oldest format this code opens (version 1's log lacks `Truncate` and separator `Put`s,
/// which are all version 2 adds; opening writes version 2, so older code then refuses it).
const OLDEST_READABLE_VERSION: u32 = 1;
/// Superblock flag: the store has an NVM tier.
const FLAG_NVM: u32 = 1;
/// Superblock flag (version 4): the log's two files are NVM regions.
const FLAG_NVM_LOG: u32 = 2;
/// Superblock flag (version 5): NVM direct — the pages are in the NVM region, changed in
/// place under its undo log (`buffer::direct`); the log files stay empty.
const FLAG_NVM_DIRECT: u32 = 4;
/// LSN of the first log frame of a new store.
const FIRST_LSN: u64 = 4096;
const SUPER_LEN: usize = 4096;
/// Where a superblock holds the store's id (then its check, to byte 60).
const SUPER_ID_AT: usize = 48;
/// Share of the DRAM budget in mini pages by default, and the full frames the default leaves
/// at least (see [`BTreeOptions::mini_page_percent`]).
const DEFAULT_MINI_PERCENT: u64 = 25;
const MIN_FULL_FRAMES: u64 = 256;
/// The log's tail limit is this share of the DRAM budget (between 64 KiB and
/// [`DEFAULT_TAIL_LIMIT`]); its buffers hold up to four times the limit plus two blocks.
const LOG_TAIL_SHARE: u64 = 128;

/// How a DRAM budget divides into the log's buffers, mini pages and full frames: the open's
/// arithmetic, also run backwards to name the budget that gives a pool of a given size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DramSizing {
    page_size: u64,
    log_on_nvm: bool,
    /// The pool keeps mini pages (an NVM tier with line-grained pages).
    mini_pages: bool,
    mini_page_percent: Option<u8>,
}

impl DramSizing {
    /// Bytes of `pool_bytes` (the budget less the log's buffers) given to mini pages.
    fn mini_bytes(&self, pool_bytes: u64) -> u64 {
        match self.mini_page_percent {
            _ if !self.mini_pages => 0,
            Some(p) => pool_bytes / 100 * u64::from(p.min(90)),
            None => (pool_bytes / 100 * DEFAULT_MINI_PERCENT)
                .min(pool_bytes.saturating_sub(MIN_FULL_FRAMES * self.page_size)),
        }
    }

    /// Full frames of a pool opened with a budget of `dram_bytes`.
    fn frames_for(&self, dram_bytes: u64) -> u64 {
        let (_, _, inside) = log_budget(dram_bytes, self.log_on_nvm);
        let pool_bytes = dram_bytes.saturating_sub(inside);
        (pool_bytes - self.mini_bytes(pool_bytes)) / self.page_size
    }

    /// The smallest budget in whole MiB whose pool has at least `frames` full frames.
    pub(crate) fn mib_for_frames(&self, frames: u64) -> u64 {
        let mut mib = (frames * self.page_size).div_ceil(1 << 20).max(1);
        while self.frames_for(mib << 20) < frames {
            mib += 1;
        }
        mib
    }
}

/// The log's tail limit for a DRAM budget, and the DRAM its buffers may hold when the log is
/// in files: 264 KiB up to a budget of 8 MiB (the limit's 64 KiB floor), 1/32 of the budget
/// up to 512 MiB, 16 MiB + 8 KiB above. They are taken out of the budget when they are at
/// most 1/8 of it (budgets from 2112 KiB on); in a smaller one they would crowd out the pool,
/// and come on top.
/// Returns the limit, the buffers' bound, and the part of the bound taken out of the budget.
fn log_budget(dram_bytes: u64, log_on_nvm: bool) -> (usize, u64, u64) {
    let limit = (dram_bytes / LOG_TAIL_SHARE).clamp(64 << 10, DEFAULT_TAIL_LIMIT as u64) as usize;
    let buffers = Wal::buffer_bytes(limit, log_on_nvm);
    let inside = if buffers <= dram_bytes / 8 {
        buffers
    } else {
        0
    };
    (limit, buffers, inside)
}
/// Cursors of [`Store::scan`] kept at once, and the most bytes of keys they may hold.
const MAX_CURSORS: usize = 16_384;
const MAX_CURSOR_BYTES: usize = 4 << 20;

/// Options for creating or opening a B+-tree store.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct BTreeOptions {
    /// Page size in bytes for a new store (a power of two, 4–64 KiB; default 16 KiB). An
    /// existing store keeps the size it was created with.
    pub page_size: usize,
    /// DRAM budget in bytes (default 64 MiB): the buffer pool's frames and mini pages, and,
    /// from 2112 KiB on, the log's buffers when the log is in files (264 KiB up to an 8 MiB
    /// budget, then 1/32 of it, 16 MiB + 8 KiB at most; below 2112 KiB they come on top).
    /// Frames larger than the log's tail limit (1/128 of the budget, at least 64 KiB) get a
    /// buffer of their own until they are written out.
    pub dram_bytes: u64,
    /// When a write is durable (default `Immediate`). At `Eventual` a write is written to the
    /// log file before it returns, unsynced, so it survives a crash of the process (the log
    /// files are then opened buffered, not `O_DIRECT`); at `None` the log's tail may wait in
    /// the process until [`BTreeStore::sync`], a checkpoint or close, so a crash of the
    /// process may take what was written since (a bulk load's level: a write costs no
    /// system call).
    pub durability: Durability,
    /// Log bytes after which a checkpoint starts a new log generation (default 512 MiB: each generation logs an image of every page it changes first, so short generations multiply log volume).
    pub checkpoint_bytes: u64,
    /// How the files are opened (`O_DIRECT`, I/O engine, emulated profile).
    pub block: BlockOptions,
    /// Dirty pages written together when an eviction meets a dirty victim (ACE's `n_w`,
    /// see [`BufferPool::with_write_back_batch`]). 0 (the default) takes `k_w` of the
    /// emulated device profile when one is set; else, for a page file on a disk's file system
    /// or a raw device, opened with `O_DIRECT`, and no NVM tier, [`DISK_WRITE_BACK_BATCH`] (at
    /// most an eighth of the pool); else (tmpfs, an NVM tier, simulated devices) 1, plain Clock.
    pub write_back_batch: usize,
    /// Bytes of persistent memory for the NVM tier of a new store, or of a store opened
    /// without one (0, the default: no NVM tier, the DRAM-over-SSD design). A store that has
    /// an NVM tier (`nvm.tb` in its directory) always opens it: it may hold the newest pages.
    pub nvm_bytes: u64,
    /// Where the NVM tier's region file goes when one is made (default `nvm.tb` in the
    /// store's directory; elsewhere, e.g. on a DAX file system, `nvm.tb` becomes a symbolic
    /// link to it).
    pub nvm_path: Option<PathBuf>,
    /// Which pages leaving DRAM enter NVM (default: the admission set, as many entries as
    /// the tier has slots).
    pub nvm_admission: Option<Admission>,
    /// How the NVM region is mapped and flushed (flush instruction, emulated profile); the
    /// log's regions too when it is on NVM.
    pub nvm_region: RegionOptions,
    /// Whether a new store with an NVM tier keeps its log on NVM too (default true): each
    /// commit persists its frame's cache lines, with no file sync. The log's two region files
    /// go next to the tier's (`wal-0.tb` and `wal-1.tb`, or links to `<tier file>.wal-0` and
    /// `.wal-1` when the tier is elsewhere). An existing store keeps where its log is.
    pub nvm_log: bool,
    /// Whether point reads load a leaf from the NVM tier a cache line at a time, copying
    /// only the lines the lookup touches (default true, the three-tier design; false loads
    /// every page whole, the basic NVM buffer manager). See `buffer::lines`.
    pub nvm_lines: bool,
    /// Debug mode: lines of a leaf not loaded yet hold `0xA5` bytes, so that code reading
    /// them without loading them reads garbage (default false; for tests).
    pub poison_lines: bool,
    /// Percent of the DRAM budget given to mini pages (16 lines of a page each, 1088 bytes)
    /// for point reads of leaves in NVM, when there is an NVM tier and `nvm_lines` is on; the
    /// full frames get the rest. `None` (the default): 25 %, but never leaving fewer than
    /// 256 full frames (a small pool needs its frames for writers and batches, whose pages
    /// stay in DRAM until they complete). 25 % cut the NVM lines loaded per read from 4.7 to
    /// 3.3 at the same throughput in docs/BENCHMARKS.md Figure 12 (b).
    pub mini_page_percent: Option<u8>,
    /// Whether a clean close hands the pages in DRAM to free NVM slots (default true), so
    /// the next open finds them in NVM rather than in the page file: a warm restart, for a
    /// close that copies up to the DRAM budget into NVM.
    pub nvm_hand_over: bool,
    /// The NVM-direct design for a new store (default false): the tree's pages live in the
    /// NVM region of `nvm_bytes` (which must be given) and are read and changed in place,
    /// with no DRAM buffer and no redo log; each batch is atomic through an undo log in the
    /// region and durable when it returns, whatever the durability level. The region holds
    /// the undo log (an eighth of it, 64 pages to 16 MiB) and the pages: a store that
    /// outgrows it refuses writes with [`Error::StoreFull`]. An existing store keeps its design.
    pub nvm_direct: bool,
    /// Whether point reads pass the inner pages without latching them (default false):
    /// optimistic lock coupling over the frames' hybrid latches (the page's version read
    /// before and validated after; see `buffer::RacyPage`), so that readers write nothing to
    /// the latches every descent shares. Off by default because on the 2-vCPU machines it was
    /// measured on it is slower (YCSB C in DRAM 0.89× latch coupling with one thread, 0.88×
    /// with two, docs/BENCHMARKS.md Figure 37): a latch nobody else holds costs less there
    /// than reading a page through version-checked loads. It is meant for many cores, where
    /// every reader's write to the root's latch moves that line between them — not measured
    /// here. NVM direct always couples latches.
    pub optimistic_reads: bool,
    /// Pointer swizzling (the three-tier paper's, LeanStore's): a reference in an inner page
    /// whose child is in a DRAM frame is rewritten, in DRAM only, to name the frame, so a
    /// descent reaches the child without the page table (see `buffer`'s module docs for the
    /// rules that keep swizzled references out of every byte that leaves DRAM). On by
    /// default, the paper's design: each step down skips a page-table lookup, which on the
    /// 2-vCPU machines measured was as cheap as what replaces it (BENCHMARKS Figure 38:
    /// instructions per get within 1 % of the build before, throughput within noise; off, 3 %
    /// more instructions). Ignored by NVM direct, whose
    /// frames are persistent. The on-media format is the same either way.
    pub swizzle: bool,
    /// Open an existing store for reading only (default false): its files opened read-only
    /// with shared locks (read-only opens side by side, no writer meanwhile), the NVM tier
    /// and an NVM log mapped copy-on-write; restart redoes the log into DRAM and writes
    /// nothing (no checkpoint, no new log generation), so redo's pages must fit the DRAM
    /// budget; every write is refused with [`Error::OpenedReadOnly`]. Works on a read-only
    /// mount.
    pub read_only: bool,
}

/// Why a B+-tree refuses writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Opened read-only: nothing failed, and nothing may be written.
    OpenedReadOnly,
    /// A write failed (its reason): the store went read-only.
    Failed(String),
}

impl Refusal {
    /// The error a refused write gets: [`Error::OpenedReadOnly`] for a store opened
    /// read-only, else [`Error::ReadOnly`] with the failure's reason.
    pub(crate) fn error(&self, path: Option<PathBuf>) -> Error {
        match self {
            Refusal::OpenedReadOnly => Error::OpenedReadOnly { path },
            Refusal::Failed(reason) => Error::ReadOnly {
                path,
                reason: reason.clone(),
            },
        }
    }

    /// The reason, as `stats` gives it.
    pub(crate) fn reason(&self) -> &str {
        match self {
            Refusal::OpenedReadOnly => "opened read-only",
            Refusal::Failed(reason) => reason,
        }
    }
}

impl Default for BTreeOptions {
    fn default() -> Self {
        BTreeOptions {
            page_size: 16 * 1024,
            dram_bytes: 64 << 20,
            durability: Durability::Immediate,
            checkpoint_bytes: 512 << 20,
            block: BlockOptions::default(),
            write_back_batch: 0,
            nvm_bytes: 0,
            nvm_path: None,
            nvm_admission: None,
            nvm_region: RegionOptions::default(),
            nvm_log: true,
            nvm_lines: true,
            poison_lines: false,
            nvm_hand_over: true,
            mini_page_percent: None,
            nvm_direct: false,
            optimistic_reads: false,
            swizzle: true,
            read_only: false,
        }
    }
}

impl BTreeOptions {
    /// Sets the page size (for a new store).
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = bytes;
        self
    }
    /// Sets the DRAM budget.
    pub fn dram_bytes(mut self, bytes: u64) -> Self {
        self.dram_bytes = bytes;
        self
    }
    /// Sets the ACE write-back batch (see [`BTreeOptions::write_back_batch`]).
    pub fn write_back_batch(mut self, n_w: usize) -> Self {
        self.write_back_batch = n_w;
        self
    }
    /// Sets the durability level.
    pub fn durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }
    /// Sets the checkpoint threshold.
    pub fn checkpoint_bytes(mut self, bytes: u64) -> Self {
        self.checkpoint_bytes = bytes;
        self
    }
    /// Gives the store an NVM tier of `bytes` (see [`BTreeOptions::nvm_bytes`]).
    pub fn nvm_bytes(mut self, bytes: u64) -> Self {
        self.nvm_bytes = bytes;
        self
    }
    /// Sets the NVM tier's admission rule.
    pub fn nvm_admission(mut self, admission: Admission) -> Self {
        self.nvm_admission = Some(admission);
        self
    }
    /// Sets whether a new store with an NVM tier keeps its log on NVM (see
    /// [`BTreeOptions::nvm_log`]).
    pub fn nvm_log(mut self, on_nvm: bool) -> Self {
        self.nvm_log = on_nvm;
        self
    }

    /// Whether point reads load NVM leaves a cache line at a time (see
    /// [`BTreeOptions::nvm_lines`]).
    pub fn nvm_lines(mut self, by_line: bool) -> Self {
        self.nvm_lines = by_line;
        self
    }

    /// Percent of the DRAM budget for mini pages (see [`BTreeOptions::mini_page_percent`]).
    pub fn mini_page_percent(mut self, percent: u8) -> Self {
        self.mini_page_percent = Some(percent);
        self
    }

    /// Sets whether a clean close hands DRAM's pages to NVM (see
    /// [`BTreeOptions::nvm_hand_over`]).
    pub fn nvm_hand_over(mut self, on: bool) -> Self {
        self.nvm_hand_over = on;
        self
    }

    /// Sets whether point reads pass inner pages optimistically (see
    /// [`BTreeOptions::optimistic_reads`]).
    pub fn optimistic_reads(mut self, on: bool) -> Self {
        self.optimistic_reads = on;
        self
    }

    /// Sets whether inner pages' child references are swizzled (see
    /// [`BTreeOptions::swizzle`]).
    pub fn swizzle(mut self, on: bool) -> Self {
        self.swizzle = on;
        self
    }

    /// Chooses the NVM-direct design for a new store (see [`BTreeOptions::nvm_direct`]).
    pub fn nvm_direct(mut self, on: bool) -> Self {
        self.nvm_direct = on;
        self
    }

    /// Poisons lines not loaded yet (see [`BTreeOptions::poison_lines`]).
    pub fn poison_lines(mut self, on: bool) -> Self {
        self.poison_lines = on;
        self
    }
}

/// The three block devices of a store.
#[derive(Debug)]
pub struct BTreeDevices {
    /// Superblocks, the meta page and the tree's pages.
    pub pages: BlockDevice,
    /// The two log files: on block devices, or NVM regions (the log on NVM).
    pub logs: [LogFile; 2],
    /// The NVM tier's region, if the store has one (with `nvm_direct`, the region the
    /// pages live in).
    pub nvm: Option<PmemRegion>,
    /// Whether `nvm` holds the pages themselves (the NVM-direct design). Read by
    /// [`BTreeStore::create_on`]; an existing store's superblock says which design it is.
    pub nvm_direct: bool,
}

impl BTreeDevices {
    /// New, empty in-memory devices on a simulated power source (tests: power loss and
    /// injected I/O errors at every sync).
    pub fn simulated(power: &Arc<SimPower>) -> Result<Self> {
        Ok(BTreeDevices {
            pages: BlockDevice::simulated("pages", 64 * 1024, 4096, power)?,
            logs: [
                BlockDevice::simulated("wal-0", 4096, 4096, power)?.into(),
                BlockDevice::simulated("wal-1", 4096, 4096, power)?.into(),
            ],
            nvm: None,
            nvm_direct: false,
        })
    }

    /// Makes these the devices of the NVM-direct design, whose pages live in `region` (a
    /// crash-simulated one in tests, sharing the block devices' power source).
    pub fn with_nvm_direct(mut self, region: PmemRegion) -> Self {
        self.nvm = Some(region);
        self.nvm_direct = true;
        self
    }

    /// Adds an NVM tier's region (a crash-simulated one in tests: give it
    /// [`PmemRegion::share_power`] with the block devices' power source so one power loss
    /// hits all of them at once).
    pub fn with_nvm(mut self, region: PmemRegion) -> Self {
        self.nvm = Some(region);
        self
    }

    /// Puts the log on NVM: `regions` replace the log files (crash-simulated ones in tests,
    /// sharing the block devices' power source like the tier's region).
    pub fn with_nvm_log(mut self, regions: [PmemRegion; 2]) -> Self {
        self.logs = regions.map(LogFile::Pmem);
        self
    }

    /// Whether the log's files are NVM regions.
    fn log_on_nvm(&self) -> bool {
        self.logs.iter().all(|l| l.region().is_some())
    }

    /// The superblock's flags for these devices.
    fn flags(&self) -> u32 {
        let mut flags = 0;
        if self.nvm.is_some() {
            flags |= FLAG_NVM;
        }
        if self.log_on_nvm() {
            flags |= FLAG_NVM_LOG;
        }
        if self.nvm_direct {
            flags |= FLAG_NVM_DIRECT;
        }
        flags
    }

    /// In-memory devices holding `images` (pages, log 0, log 1), e.g. what media held when a
    /// simulated power loss struck.
    pub fn simulated_from(images: [Vec<u8>; 3], power: &Arc<SimPower>) -> Result<Self> {
        let [p, l0, l1] = images;
        Ok(BTreeDevices {
            pages: BlockDevice::simulated_from("pages", p, 4096, power)?,
            logs: [
                BlockDevice::simulated_from("wal-0", l0, 4096, power)?.into(),
                BlockDevice::simulated_from("wal-1", l1, 4096, power)?.into(),
            ],
            nvm: None,
            nvm_direct: false,
        })
    }
}

/// What a restart did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestartReport {
    /// Log frames replayed.
    pub frames: u64,
    /// Log records replayed.
    pub records: u64,
    /// Log bytes from the redo start to the end.
    pub log_bytes: u64,
    /// Pages written by the restart's checkpoint.
    pub pages_written: u64,
    /// Wall time of the whole open, in microseconds.
    pub micros: u64,
    /// Pages found in the NVM tier's directory (the NVM scan).
    pub nvm_pages: u64,
    /// Wall time of the NVM scan, in microseconds.
    pub nvm_scan_micros: u64,
    /// NVM direct: lines of the batch in flight at a crash restored from the undo log.
    pub undone_lines: u64,
    /// Replay stopped at a damaged log frame that valid frames follow. A read-write open
    /// then starts a new log generation after it (a later replay no longer meets it), so it
    /// also appends the description to [`LOG_DAMAGE_FILE`] in the store's directory.
    pub log_damage: Option<crate::wal::LogDamage>,
    /// What [`LOG_DAMAGE_FILE`] holds: the log damage this open and earlier read-write opens
    /// met, one line each, until an operator who has accepted the loss removes the file
    /// (`verify` fails while it is there).
    pub recorded_log_damage: Option<String>,
}

/// The file in a B+-tree store's directory that keeps the log damage read-write opens met
/// (one line each): each such open starts a new log generation after the damage, after which
/// no replay meets it again, and `verify` would say OK while the writes after the damage are
/// gone. Removed by hand once the loss is accepted.
pub const LOG_DAMAGE_FILE: &str = "log-damage.txt";

/// Appends `found` (if any, and the open writes) to the store's [`LOG_DAMAGE_FILE`],
/// durably, and returns what the file holds.
fn record_log_damage(
    dir: &Path,
    found: Option<&crate::wal::LogDamage>,
    read_only: bool,
) -> Result<Option<String>> {
    let file = dir.join(LOG_DAMAGE_FILE);
    if let (Some(d), false) = (found, read_only) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .map_err(|e| Error::io("open", Some(&file), e))?;
        writeln!(f, "{d}")
            .and_then(|()| f.sync_all())
            .map_err(|e| Error::io("write", Some(&file), e))?;
        sync_dir(dir)?;
    }
    match std::fs::read_to_string(&file) {
        Ok(text) => Ok(Some(text.trim_end().to_string()).filter(|t| !t.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", Some(&file), e)),
    }
}

/// ACE's `n_w` for a page file on a disk's file system when no device profile says more: the
/// disk writes a batch of dirty pages concurrently (the virtual disk here takes 64–128 writes
/// at once, NVMe SSDs 8–32 in the catalogue, and a batch beyond a device's `k_w` costs only
/// more rounds: BENCHMARKS Figure 8 (b)). Measured in Figure 18 (d): 1.2–1.5× on updates and
/// loads with the data 4× beyond DRAM.
pub const DISK_WRITE_BACK_BATCH: usize = 32;

/// Store counters beyond the pool's and the log's.
#[derive(Debug, Default)]
struct StoreCounters {
    checkpoints: Counter,
    batches: Counter,
    gets: Counter,
}

/// The log as the buffer pool and the tree reach it: absent while restart replays (pages
/// replayed from a durable log may be written at any time).
#[derive(Debug, Default)]
pub(crate) struct LogLink(OnceLock<Arc<Wal>>);

impl LogLink {
    pub(crate) fn get(&self) -> Option<&Arc<Wal>> {
        self.0.get()
    }
}

impl WalRule for LogLink {
    fn committed_lsn(&self) -> u64 {
        self.0.get().map_or(u64::MAX, |w| w.next_lsn())
    }
    fn flush_to(&self, lsn: u64) -> Result<()> {
        self.0.get().map_or(Ok(()), |w| w.flush_to(lsn))
    }
}

struct Inner {
    tree: Tree,
    log: Arc<LogLink>,
    path: Option<PathBuf>,
    medium: String,
    guarantee: &'static str,
    durability: Durability,
    checkpoint_bytes: u64,
    /// Serialises checkpoints; holds the superblock sequence number.
    superblock: Mutex<u64>,
    /// The superblock's flags (what the store's media are).
    flags: u32,
    /// The store's id, in its superblocks and its NVM tier's header; whether the media hold
    /// it yet (not when a read-only open met a superblock from before ids).
    store_id: u64,
    store_id_on_media: bool,
    restart: RestartReport,
    counters: StoreCounters,
    cursors: Mutex<Cursors>,
    /// A clean close hands DRAM's pages to free NVM slots.
    hand_over: bool,
    /// The DRAM budget asked for, and the most the log's buffers hold (0 with the log on
    /// NVM; inside the budget from 2112 KiB on, see [`log_budget`]).
    dram_budget: u64,
    log_buffers: u64,
}

struct Cursors {
    next: u32,
    keys: HashMap<u32, Vec<u8>>,
    order: VecDeque<u32>,
    /// Bytes of the keys kept.
    bytes: usize,
}

impl Cursors {
    /// Ids start at a random value, not at 1: a cursor from before a restart must not name a
    /// key the new process keeps under the same id (it would resume there, past keys it never
    /// returned), but fall back to its prefix. (The wall clock's nanoseconds through the
    /// standard library's randomly keyed hasher: a process-relative clock started near zero
    /// in every process.)
    fn new() -> Self {
        use std::hash::BuildHasher;
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let seed = std::collections::hash_map::RandomState::new().hash_one(wall);
        Cursors {
            next: (seed ^ (seed >> 32)) as u32,
            keys: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Keeps `key` and returns its id (31 bits, never 0); forgets the oldest beyond the
    /// limits.
    fn keep(&mut self, key: Vec<u8>) -> u32 {
        self.next = (self.next.wrapping_add(1) & !FELL_BACK).max(1);
        let id = self.next;
        // The id is not kept already: only the last MAX_CURSORS are, of 2^31 ids.
        self.bytes += key.len();
        self.keys.insert(id, key);
        self.order.push_back(id);
        while self.order.len() > MAX_CURSORS || self.bytes > MAX_CURSOR_BYTES {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(k) = self.keys.remove(&old) {
                self.bytes -= k.len();
            }
        }
        id
    }
}

/// A scan cursor: the resume key's first 4 bytes (zero-padded) in the high half, the id under
/// which [`Cursors`] keeps the whole key in the low half (never 0, so the cursor is never 0),
/// with [`FELL_BACK`] set when the call that handed it out had resumed at a prefix.
fn scan_cursor(key: &[u8], id: u32) -> u64 {
    (u64::from(cursor_prefix(key)) << 32) | u64::from(id)
}

/// Cursor flag (the low half's top bit): the call that handed this cursor out resumed at the
/// prefix of a cursor the store no longer kept. A walk whose every cursor expires before its
/// next call would otherwise start again at the same prefix for ever when more than COUNT
/// keys share it; a second fallback in a row is an error instead.
const FELL_BACK: u32 = 1 << 31;

fn cursor_prefix(key: &[u8]) -> u32 {
    let mut p = [0u8; 4];
    let n = key.len().min(4);
    p[..n].copy_from_slice(&key[..n]);
    u32::from_be_bytes(p)
}

/// Where a scan resumes for `cursor`: the key it kept, or, for a cursor it no longer keeps
/// (expired, or from before a restart), the smallest key with the cursor's 4-byte prefix
/// (trailing zero bytes dropped, so that a shorter key padded with them is not passed over):
/// keys between it and the kept key come back again, none is missed.
///
/// Returns the key and whether it is the kept one; an error for a cursor handed out by a
/// fallback that would fall back again ([`FELL_BACK`]).
fn scan_resume(cursors: &Cursors, cursor: u64) -> Result<(Vec<u8>, bool)> {
    let (prefix, id) = ((cursor >> 32) as u32, cursor as u32);
    if let Some(key) = cursors.keys.get(&(id & !FELL_BACK))
        && cursor_prefix(key) == prefix
    {
        return Ok((key.clone(), true));
    }
    if id & FELL_BACK != 0 {
        return Err(Error::InvalidArgument(format!(
            "scan cursor {cursor} expired again right after a walk resumed from an expired one \
             (the store keeps the last {MAX_CURSORS} cursors, and more scans ran between two \
             calls): start again from 0, with a larger count"
        )));
    }
    let bytes = prefix.to_be_bytes();
    let len = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    Ok((bytes[..len].to_vec(), false))
}

/// An ordered, durable key-value store on a B+-tree. Cheap to share: clone the handle or
/// wrap it in an `Arc`; the last handle dropped closes the store cleanly (a checkpoint).
#[derive(Clone)]
pub struct BTreeStore {
    inner: Arc<Inner>,
    _background: Arc<BackgroundGuard>,
}

struct BackgroundGuard {
    /// The store's background thread and the log's write-behind thread.
    threads: Mutex<Vec<Background>>,
    inner: Arc<Inner>,
    closed: AtomicBool,
}

impl BackgroundGuard {
    fn stop_threads(&self) {
        for mut thread in self.threads.lock().drain(..) {
            thread.stop();
        }
    }
}

impl Drop for BackgroundGuard {
    fn drop(&mut self) {
        self.stop_threads();
        // While unwinding from a panic, no checkpoint: the log holds every acknowledged write,
        // and I/O during an unwind must not start (the next open replays instead).
        if !self.closed.swap(true, Ordering::AcqRel)
            && !std::thread::panicking()
            && let Err(e) = self.inner.shut_down()
        {
            tracing::warn!("closing the B-tree store: {e}");
        }
    }
}

impl std::fmt::Debug for BTreeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BTreeStore")
            .field("path", &self.inner.path)
            .field("len", &self.inner.tree.len())
            .finish()
    }
}

/// The page file's name in a store's directory (its presence marks a B+-tree store).
pub const PAGES_FILE: &str = "pages.tb";

fn file_names(dir: &Path) -> [PathBuf; 3] {
    [
        dir.join(PAGES_FILE),
        dir.join("wal-0.tb"),
        dir.join("wal-1.tb"),
    ]
}

/// Where redo starts and what the store is made of, as the newest superblock says.
#[derive(Clone, Copy, Debug)]
struct Super {
    page_size: usize,
    seq: u64,
    generation: u32,
    lsn: u64,
    flags: u32,
    /// The store's id (`None` in a superblock written before ids: the store's tier, if any,
    /// is then not checked against it, and the next read-write open gives it one).
    id: Option<u64>,
}

/// A new store's id: random, never zero (zero means "none").
fn new_store_id() -> u64 {
    loop {
        let id = rand::random::<u64>();
        if id != 0 {
            return id;
        }
    }
}

fn superblock(
    page_size: usize,
    seq: u64,
    (generation, lsn): (u32, u64),
    flags: u32,
    id: u64,
) -> Result<AlignedBuf> {
    let mut b = AlignedBuf::new(SUPER_LEN)?;
    b[..8].copy_from_slice(SUPER_MAGIC);
    let version = if flags & FLAG_NVM_DIRECT != 0 {
        FORMAT_VERSION
    } else if flags & FLAG_NVM_LOG != 0 {
        NVM_LOG_VERSION
    } else if flags != 0 {
        NVM_TIER_VERSION
    } else {
        PLAIN_VERSION
    };
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[28..32].copy_from_slice(&flags.to_le_bytes());
    b[12..16].copy_from_slice(&(page_size as u32).to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    b[24..28].copy_from_slice(&generation.to_le_bytes());
    b[32..40].copy_from_slice(&lsn.to_le_bytes());
    let c = crc32c::crc32c(&b[..40]);
    b[40..44].copy_from_slice(&c.to_le_bytes());
    // The id with a check of its own over bytes 0..56: code that predates it reads 0..44 only.
    crate::wal::seal_store_id(&mut b, SUPER_ID_AT, id);
    Ok(b)
}

/// The newest valid superblock.
fn read_superblock(dev: &BlockDevice, path: Option<&Path>) -> Result<Super> {
    let mut best: Option<Super> = None;
    let mut any_id = None;
    let mut version = None;
    let mut b = AlignedBuf::new(SUPER_LEN)?;
    for slot in 0..2u64 {
        // Slot 0 sits at offset 0; slot 1 at the second page, whose size the first valid
        // copy tells (both copies at 4 KiB granularity, the smallest page size).
        for offset in [
            slot * 4096,
            slot * 65536,
            slot * 16384,
            slot * 8192,
            slot * 32768,
        ] {
            if offset + SUPER_LEN as u64 > dev.len() {
                continue;
            }
            dev.read_at(offset, &mut b)?;
            if &b[..8] != SUPER_MAGIC || crc32c::crc32c(&b[..40]).to_le_bytes() != b[40..44] {
                continue;
            }
            let v = u32::from_le_bytes(b[8..12].try_into().expect("4"));
            if !(OLDEST_READABLE_VERSION..=FORMAT_VERSION).contains(&v) {
                version = Some(v);
                continue;
            }
            let ps = u32::from_le_bytes(b[12..16].try_into().expect("4")) as usize;
            if offset != slot * ps as u64 {
                continue;
            }
            let seq = u64::from_le_bytes(b[16..24].try_into().expect("8"));
            if seq > u64::MAX / 2 {
                // Each checkpoint and open advances the sequence by one or two: no store
                // reaches 2^63 of them, so this copy is damaged (and the open's `seq + 2`
                // below could not be written after it).
                continue;
            }
            let g = u32::from_le_bytes(b[24..28].try_into().expect("4"));
            let lsn = u64::from_le_bytes(b[32..40].try_into().expect("8"));
            let flags = u32::from_le_bytes(b[28..32].try_into().expect("4"));
            let known = match v {
                ..NVM_TIER_VERSION => 0,
                NVM_TIER_VERSION => FLAG_NVM,
                NVM_LOG_VERSION => FLAG_NVM | FLAG_NVM_LOG,
                _ => FLAG_NVM | FLAG_NVM_LOG | FLAG_NVM_DIRECT,
            };
            if flags & !known != 0 {
                continue; // bits its version never sets
            }
            let id = crate::wal::sealed_store_id(&b, SUPER_ID_AT);
            // Every valid copy names the same store: one whose id check is damaged takes the
            // other's (a store given a new id would refuse its own log and tier).
            any_id = any_id.or(id);
            if best.is_none_or(|b| seq > b.seq) {
                best = Some(Super {
                    page_size: ps,
                    seq,
                    generation: g,
                    lsn,
                    flags,
                    id,
                });
            }
        }
    }
    if let Some(found) = version
        && best.is_none()
    {
        return Err(Error::UnsupportedVersion {
            path: path.map(Path::to_path_buf),
            what: "B-tree store",
            found,
            supported: FORMAT_VERSION,
        });
    }
    let mut best = best.ok_or_else(|| {
        Error::corrupt(
            path,
            "not a tierbase B-tree store: no valid superblock (both copies missing or damaged)",
        )
    })?;
    best.id = best.id.or(any_id);
    Ok(best)
}

/// Writes superblock `seq` of store `id` and syncs it; with an NVM tier, ties the tier to it
/// first ([`NvmTier::tie`]: the tier's checkpoint word is then the newest superblock's or
/// the next, after any crash).
fn write_superblock(
    dev: &BlockDevice,
    tier: Option<&NvmTier>,
    id: u64,
    page_size: usize,
    seq: u64,
    redo: (u32, u64),
    flags: u32,
) -> Result<()> {
    if let Some(tier) = tier {
        tier.tie(id, seq)?;
    }
    let slot = seq % 2;
    dev.write_at(
        slot * page_size as u64,
        &superblock(page_size, seq, redo, flags, id)?,
    )?;
    dev.sync()
}

/// Writes the initial pages, log and superblock onto empty devices.
fn format(devs: &BTreeDevices, page_size: usize) -> Result<()> {
    crate::buffer::check_page_size(page_size)?;
    let id = new_store_id();
    if devs.nvm_direct {
        return format_direct(devs, page_size, id);
    }
    let need = (FIRST_ROOT + 1) * page_size as u64;
    if devs.pages.len() < need {
        devs.pages.grow(need)?;
    }
    let (mut meta, mut root) = first_pages(page_size)?;
    crate::buffer::seal(&mut meta);
    devs.pages.write_at(META_PID * page_size as u64, &meta)?;
    crate::buffer::seal(&mut root);
    devs.pages.write_at(FIRST_ROOT * page_size as u64, &root)?;
    devs.pages.sync()?;
    format_log_and_superblock(devs, page_size, id)
}

/// A new store's last steps, once its pages are durable: an empty log, then the first
/// superblock, both naming store `id` (its tier, if any, is tied by the first open).
fn format_log_and_superblock(devs: &BTreeDevices, page_size: usize, id: u64) -> Result<()> {
    Wal::format_owned(&devs.logs, FIRST_LSN, id)?;
    let first = (1, FIRST_LSN);
    write_superblock(&devs.pages, None, id, page_size, 1, first, devs.flags())
}

/// The id of the NVM-direct store whose region is `region` and whose superblock names
/// `superblock_id`: a region naming another store, or whose owner field is damaged, is
/// refused (its pages would be served as this store's). A region whose owner field was never
/// written (made before ids) is tied by a read-write open: to the superblock's id, or to a
/// new one a store from before ids takes next (the region first, the superblocks after).
fn direct_store_id(
    region: &PmemRegion,
    superblock_id: Option<u64>,
    read_only: bool,
) -> Result<Option<u64>> {
    use crate::buffer::direct::{self, Owner};
    let refuse = |what: String| {
        Err(Error::corrupt(
            region.path(),
            format!(
                "the NVM-direct region {what}: its pages would be served as this store's; \
                 restore the region written with the store (a directory's files are restored \
                 together)"
            ),
        ))
    };
    match (superblock_id, direct::owner(region)?) {
        (Some(want), Owner::Store(is)) if want != is => refuse(format!(
            "belongs to another store ({is:016x}, not {want:016x})"
        )),
        (Some(want), Owner::Damaged) => refuse(format!(
            "has a damaged owner field (bytes 40..52 of its undo log header), and the store is \
             {want:016x}"
        )),
        (Some(id), Owner::Store(_)) | (None, Owner::Store(id)) => Ok(Some(id)),
        (id, Owner::Untied | Owner::Damaged) if read_only => Ok(id),
        (id, Owner::Untied | Owner::Damaged) => {
            let id = id.unwrap_or_else(new_store_id);
            direct::tie(region, id)?;
            Ok(Some(id))
        }
    }
}

/// The first meta page and root leaf of a new store.
fn first_pages(page_size: usize) -> Result<(AlignedBuf, AlignedBuf)> {
    let mut meta = AlignedBuf::new(page_size)?;
    let mut n = node::NodeMut::new(&mut meta);
    n.init(node::Kind::Meta, 0, META_PID, 0);
    Meta {
        root: FIRST_ROOT,
        next_pid: FIRST_ROOT + 1,
        free_head: 0,
        count: 0,
    }
    .write(&mut n);
    let mut root = AlignedBuf::new(page_size)?;
    node::NodeMut::new(&mut root).init(node::Kind::Leaf, 0, FIRST_ROOT, 0);
    Ok((meta, root))
}

/// [`format`] for NVM direct: the undo log, meta page and root leaf into the NVM region
/// (persisted), then the log files' headers and the superblock into the page file.
fn format_direct(devs: &BTreeDevices, page_size: usize, id: u64) -> Result<()> {
    let Some(region) = &devs.nvm else {
        return Err(Error::InvalidArgument(
            "the NVM-direct design needs an NVM region (give it a size)".into(),
        ));
    };
    let head = crate::buffer::direct::head_len_for(region.len(), page_size);
    let need = head + (FIRST_ROOT + 1) * page_size as u64;
    if region.len() < need {
        return Err(Error::InvalidArgument(format!(
            "an NVM-direct store with {page_size}-byte pages needs an NVM region of at least \
             {need} bytes (its undo log takes {head}); the region holds {}",
            region.len()
        )));
    }
    let (meta, root) = first_pages(page_size)?;
    for (pid, page) in [(META_PID, &meta), (FIRST_ROOT, &root)] {
        region.write(head + pid * page_size as u64, page)?;
        region.flush(head + pid * page_size as u64, page_size)?;
    }
    region.drain();
    crate::buffer::direct::format(region, page_size, head)?;
    crate::buffer::direct::tie(region, id)?;
    let need = 2 * page_size as u64;
    if devs.pages.len() < need {
        devs.pages.grow(need)?;
    }
    format_log_and_superblock(devs, page_size, id)
}

impl BTreeStore {
    /// Creates a store in directory `dir` (created if missing; must not hold a store).
    pub fn create(dir: impl AsRef<Path>, opts: &BTreeOptions) -> Result<Self> {
        crate::buffer::check_page_size(opts.page_size)?;
        let dir = dir.as_ref();
        let dir_made = !dir.exists();
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create directory", Some(dir), e))?;
        let names = file_names(dir);
        if names[0].exists() {
            return Err(Error::InvalidArgument(format!(
                "{}: a store exists here already (open it instead)",
                dir.display()
            )));
        }
        // A leftover NVM tier would lend its pages (newer than any page file) to the new store.
        if std::fs::symlink_metadata(dir.join("nvm.tb")).is_ok() {
            return Err(Error::InvalidArgument(format!(
                "{}: holds an NVM tier (nvm.tb) but no page file: remove it, or restore the \
                 store it belongs to",
                dir.display()
            )));
        }
        // A create that fails part-way removes the files (and directory) it made, so that it
        // can be retried.
        let mut made: Vec<&Path> = Vec::new();
        let mut made_nvm: Vec<PathBuf> = Vec::new();
        let result = (|| {
            let pages =
                BlockDevice::create(&names[0], 4 * opts.page_size.max(4096) as u64, &opts.block)?;
            made.push(&names[0]);
            pages.lock_exclusive()?;
            if opts.nvm_direct && opts.nvm_bytes == 0 {
                return Err(Error::InvalidArgument(
                    "the NVM-direct design needs an NVM region: give its size (nvm_bytes)".into(),
                ));
            }
            let nvm = open_nvm(dir, opts, &mut made_nvm)?;
            let logs = if nvm.is_some() && opts.nvm_log && !opts.nvm_direct {
                create_nvm_logs(dir, opts, &mut made_nvm)?
            } else {
                let log_opts = log_block_options(opts);
                let log0 = BlockDevice::create(&names[1], 4096, &log_opts)?;
                made.push(&names[1]);
                let log1 = BlockDevice::create(&names[2], 4096, &log_opts)?;
                made.push(&names[2]);
                [log0.into(), log1.into()]
            };
            let devs = BTreeDevices {
                pages,
                logs,
                nvm,
                nvm_direct: opts.nvm_direct,
            };
            // The links to files elsewhere (NVM tier, NVM log) are names in this directory.
            sync_dir(dir)?;
            format(&devs, opts.page_size)?;
            Self::open_on(devs, Some(dir), opts)
        })();
        if result.is_err() {
            for f in made {
                let _ = std::fs::remove_file(f);
            }
            for f in made_nvm {
                let _ = std::fs::remove_file(f);
            }
            if dir_made {
                // Only if empty: nothing but what this create made.
                let _ = std::fs::remove_dir(dir);
            }
        }
        result
    }

    /// Opens the store in directory `dir`, replaying its log.
    pub fn open(dir: impl AsRef<Path>, opts: &BTreeOptions) -> Result<Self> {
        let dir = dir.as_ref();
        let mut read_only_opts;
        let opts = if opts.read_only {
            read_only_opts = opts.clone();
            read_only_opts.block.read_only = true;
            read_only_opts.nvm_region.read_only = true;
            // An NVM tier is opened if there is one, never made.
            read_only_opts.nvm_bytes = 0;
            &read_only_opts
        } else {
            opts
        };
        if dir.is_file() {
            return Err(Error::InvalidArgument(format!(
                "{}: is a file, not a B+-tree store's directory (a kv or Plush store is one \
                 file)",
                dir.display()
            )));
        }
        let names = file_names(dir);
        for n in &names {
            if !n.exists() {
                // A link whose target is gone: name the target, which is what to restore.
                let missing = std::fs::read_link(n).unwrap_or_else(|_| n.clone());
                return Err(Error::io(
                    "open",
                    Some(&missing),
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
        }
        let pages = BlockDevice::open(&names[0], &opts.block)?;
        pages.lock_exclusive()?;
        // An NVM tier made here (the options ask for one and the store has none) is removed
        // again if the open fails: e.g. an NVM-direct store whose region is missing.
        let mut made = Vec::new();
        let devs = BTreeDevices {
            pages,
            logs: [open_log(&names[1], opts)?, open_log(&names[2], opts)?],
            nvm: open_nvm(dir, opts, &mut made)?,
            // The superblock says (see `open_on`).
            nvm_direct: false,
        };
        let opened = Self::open_on(devs, Some(dir), opts);
        if opened.is_err() {
            for f in made {
                let _ = std::fs::remove_file(f);
            }
        }
        opened
    }

    /// Opens the store in `dir`, creating it if there is none.
    pub fn open_or_create(dir: impl AsRef<Path>, opts: &BTreeOptions) -> Result<Self> {
        if file_names(dir.as_ref())[0].exists() {
            Self::open(dir, opts)
        } else {
            Self::create(dir, opts)
        }
    }

    /// Creates a store on empty devices (simulated ones in tests).
    pub fn create_on(devs: BTreeDevices, opts: &BTreeOptions) -> Result<Self> {
        format(&devs, opts.page_size)?;
        Self::open_on(devs, None, opts)
    }

    /// Opens a store on `devs`: restart from the last checkpoint, then a checkpoint.
    pub fn open_on(
        mut devs: BTreeDevices,
        dir: Option<&Path>,
        opts: &BTreeOptions,
    ) -> Result<Self> {
        let started = Instant::now();
        let path = dir.map(Path::to_path_buf);
        let sb = read_superblock(
            &devs.pages,
            path.as_deref().map(|d| d.join(PAGES_FILE)).as_deref(),
        )?;
        let (page_size, seq, redo_gen, redo_lsn) = (sb.page_size, sb.seq, sb.generation, sb.lsn);
        let log_on_nvm = devs.log_on_nvm();
        if (sb.flags & FLAG_NVM_LOG != 0) != log_on_nvm
            || devs.logs.iter().any(|l| l.region().is_some() != log_on_nvm)
        {
            return Err(Error::corrupt(
                path.as_deref().map(|d| d.join("wal-0.tb")).as_deref(),
                if sb.flags & FLAG_NVM_LOG != 0 {
                    "the store keeps its log on NVM, and wal-0.tb and wal-1.tb are not both NVM \
                     region files (restore them, or their links' targets, before opening)"
                } else {
                    "the store keeps its log in files, and wal-0.tb or wal-1.tb is an NVM \
                     region file"
                },
            ));
        }
        devs.nvm_direct = sb.flags & FLAG_NVM_DIRECT != 0;
        if sb.flags & FLAG_NVM != 0 && devs.nvm.is_none() {
            return Err(Error::corrupt(
                path.as_deref().map(|d| d.join("nvm.tb")).as_deref(),
                "the store has an NVM tier holding its newest pages, and it is missing \
                 (restore nvm.tb, or its link's target, before opening)",
            ));
        }
        let flags = devs.flags();
        let log = Arc::new(LogLink::default());
        let (medium, guarantee) = describe_medium(&devs, dir);
        let guarantee = if opts.read_only {
            "read-only"
        } else {
            guarantee
        };
        // The budget holds the log's buffers too (none when the log is on NVM).
        // NVM direct writes no log records: its log keeps the smallest buffers.
        let (tail_limit, log_buffers, log_in_budget) = if devs.nvm_direct {
            log_budget(0, log_on_nvm)
        } else {
            log_budget(opts.dram_bytes, log_on_nvm)
        };
        let min_dram = crate::buffer::MIN_FRAMES * page_size as u64;
        if !devs.nvm_direct && opts.dram_bytes < min_dram {
            return Err(Error::InvalidArgument(format!(
                "a DRAM budget of {} bytes is below the buffer pool's smallest, {} pages of \
                 {} KiB ({} KiB)",
                opts.dram_bytes,
                crate::buffer::MIN_FRAMES,
                page_size >> 10,
                min_dram >> 10
            )));
        }
        let sizing = DramSizing {
            page_size: page_size as u64,
            log_on_nvm,
            mini_pages: devs.nvm.is_some() && opts.nvm_lines,
            mini_page_percent: opts.mini_page_percent,
        };
        let pool_bytes = opts.dram_bytes - log_in_budget;
        let mini_bytes = sizing.mini_bytes(pool_bytes);
        let mut nvm_report = (0, 0);
        let mut undone_lines = 0;
        // NVM direct's region names its store as a tier does (None: not yet).
        let mut direct_id = None;
        let mut pool = if devs.nvm_direct {
            let region = devs.nvm.take().ok_or_else(|| {
                Error::corrupt(
                    path.as_deref().map(|d| d.join("nvm.tb")).as_deref(),
                    "the store keeps its pages in NVM (NVM direct), and nvm.tb is missing \
                     (restore it, or its link's target, before opening)",
                )
            })?;
            let scan = Instant::now();
            let undone = crate::buffer::direct::recover(&region, page_size)
                .map_err(|e| with_path(e, path.as_deref()))?;
            direct_id = direct_store_id(&region, sb.id, opts.read_only)?;
            undone_lines = undone.lines;
            let (paged, pages) = region.into_paged(undone.head, page_size)?;
            nvm_report = (pages.len() as u64, scan.elapsed().as_micros() as u64);
            BufferPool::new_direct(
                devs.pages,
                paged,
                pages,
                |page, pid| node::check(page, Some(pid)),
                log.clone(),
            )?
        } else {
            let pool = BufferPool::new(
                devs.pages,
                PoolOptions {
                    page_size,
                    dram_bytes: pool_bytes - mini_bytes,
                    check: |page, pid| node::check(page, Some(pid)),
                },
                log.clone(),
            )?;
            let device = pool.device();
            // Asked of the open file, not its path: a raw device under /dev is a disk.
            let on_disk = devs.nvm.is_none() && device.is_direct() && !device.on_memory_fs();
            let n_w = match (opts.write_back_batch, device.emulator()) {
                (0, Some(e)) => e.profile().k_w as usize,
                (0, None) if on_disk => DISK_WRITE_BACK_BATCH.min(pool.frames() / 8).max(1),
                (0, None) => 1,
                (n, _) => n,
            };
            pool.with_write_back_batch(n_w)
        };
        if let Some(region) = devs.nvm {
            let scan = Instant::now();
            // Only the superblock a create writes (sequence 1) may precede the tier's header: any
            // later one was written by an open that had formatted the tier first.
            // A store whose superblock says it had no tier is given one now (`nvm_bytes` at
            // open): its blank header is a new tier, not a wiped one. Tied to the real
            // sequence, so that a copy of it kept from before a later checkpoint is refused.
            let tie = StoreTie {
                id: sb.id,
                seq,
                adding: sb.flags & FLAG_NVM == 0,
            };
            let tier = NvmTier::open_in_store(region, page_size, opts.nvm_admission, tie)
                .map_err(|e| with_path(e, path.as_deref()))?;
            nvm_report = (tier.found_at_open, scan.elapsed().as_micros() as u64);
            pool = pool
                .with_nvm(tier)
                .with_line_grained_nvm(opts.nvm_lines)
                .with_mini_pages((mini_bytes / MINI_PAGE_BYTES) as usize)
                .with_line_poison(opts.poison_lines);
        }
        let placeholder = Meta {
            root: FIRST_ROOT,
            next_pid: FIRST_ROOT + 1,
            free_head: 0,
            count: 0,
        };
        if opts.swizzle {
            pool = pool.with_swizzling(node::child_refs);
        }
        let mut tree = Tree::new(pool, placeholder, redo_gen, log.clone(), sizing);
        tree.optimistic_reads = opts.optimistic_reads && tree.pool.direct().is_none();
        let logs = devs.logs;
        let mut restart = RestartReport {
            nvm_pages: nvm_report.0,
            nvm_scan_micros: nvm_report.1,
            undone_lines,
            ..RestartReport::default()
        };
        if opts.read_only {
            // Redo's pages stay in DRAM: nothing may be written to the read-only files.
            tree.pool.freeze();
        }
        let end = Wal::replay_owned(&logs, redo_gen, redo_lsn, sb.id, |lsn, payload| {
            restart.frames += 1;
            restart.records += tree.redo(lsn, payload)?;
            Ok(())
        })
        .map_err(|e| match e {
            // The frozen pool ran out of frames for redo's pages (nothing failed).
            Error::ReadOnly { .. } if opts.read_only => Error::InvalidArgument(format!(
                "{}: opened read-only, restart keeps the pages its redo changes in DRAM, and \
                 they do not fit the DRAM budget of {} bytes: give a larger one (--dram)",
                path.as_deref()
                    .map_or_else(|| "<memory>".into(), |p| p.display().to_string()),
                opts.dram_bytes
            )),
            e => with_path(e, path.as_deref()),
        })?;
        restart.log_bytes = end.lsn - redo_lsn;
        restart.log_damage = end.damage;
        if let Some(d) = &end.damage {
            tracing::warn!("B-tree store in {:?}: {d}", path.as_deref());
        }
        if let Some(dir) = path.as_deref() {
            restart.recorded_log_damage =
                record_log_damage(dir, restart.log_damage.as_ref(), opts.read_only)?;
        }
        // Redo leaves the meta page at its newest state (a page on media is never newer than
        // the log, and every meta change is logged).
        let meta = {
            let page = tree
                .pool
                .fix_shared(META_PID)
                .map_err(|e| with_path(e, path.as_deref()))?;
            if node::Node(page.bytes()).kind() != Some(node::Kind::Meta) {
                return Err(Error::corrupt(
                    path.as_deref(),
                    "page 2 is not the meta page",
                ));
            }
            Meta::read(page.bytes())
        };
        if meta.root < FIRST_ROOT || meta.root >= meta.next_pid {
            return Err(Error::corrupt(
                path.as_deref(),
                format!(
                    "meta page names root {} of {} pages",
                    meta.root, meta.next_pid
                ),
            ));
        }
        // Every page below the high-water mark was written to the page file or the NVM tier,
        // or is named by a record of the log replayed since (a new page's first change logs
        // its image; an image leaves out a page's free middle, and every record names its page
        // in 8 bytes at least). A mark beyond them all is damage, and the first allocation
        // would size the writer's tables and the page file by it.
        let held = (tree.pool.device().len() / page_size as u64)
            .saturating_add(nvm_report.0)
            .saturating_add(restart.log_bytes / 8)
            .saturating_add(FIRST_ROOT + 1);
        if meta.next_pid > held {
            return Err(Error::corrupt(
                path.as_deref(),
                format!(
                    "the meta page's high-water mark, page {}, is beyond the {held} pages the \
                     page file, the NVM tier and the log can hold",
                    meta.next_pid
                ),
            ));
        }
        tree.adopt_meta(meta);
        // A superblock from before ids takes its tier's (or NVM direct's region's), if an
        // interrupted first tie left one there.
        let store_id = sb
            .id
            .or(direct_id)
            .or_else(|| tree.pool.nvm().and_then(NvmTier::store_id))
            .unwrap_or_else(new_store_id);
        // Opened read-only: the pages redo changed stay in DRAM; no checkpoint, no new log
        // generation (a later open redoes from the same checkpoint).
        let flushed = (!opts.read_only).then(|| tree.pool.flush_dirty());
        // Whether this open wrote superblocks (with the store's id, which a store from before
        // ids has on media only then).
        let (wal, seq, wrote_superblocks) = match flushed {
            None => {
                let refusal = Refusal::OpenedReadOnly;
                let wal = Wal::read_only(logs, end, refusal.reason().into());
                tree.writer.write().failed = Some(refusal);
                (wal, seq, false)
            }
            Some(Ok(written)) => {
                restart.pages_written = written;
                let pages = tree.pool.device();
                let tier = tree.pool.nvm();
                // Redo now starts at the last generation read (its file stays untouched),
                // then the log continues in a new generation, then redo starts there.
                write_superblock(
                    pages,
                    tier,
                    store_id,
                    page_size,
                    seq + 1,
                    (end.generation, end.generation_start),
                    flags,
                )?;
                let wal = Wal::resume_owned(logs, end, store_id)?;
                write_superblock(
                    pages,
                    tier,
                    store_id,
                    page_size,
                    seq + 2,
                    (end.generation + 1, end.lsn),
                    flags,
                )?;
                tree.writer.write().generation = end.generation + 1;
                (wal, seq + 2, true)
            }
            // No room on the device for the pages redo changed: open read-only, the pages in
            // DRAM and media as they are (a later restart redoes from the same checkpoint), so
            // that the data can be read before space is freed.
            Some(Err(e @ Error::DeviceFull { .. })) => {
                let reason = format!(
                    "{e}; opened read-only, as restart could not write the pages it redid \
                     (free space and reopen)"
                );
                let at = path.as_deref().map(Path::display);
                tracing::warn!("B-tree store in {at:?}: {reason}");
                tree.writer.write().failed = Some(Refusal::Failed(reason.clone()));
                (Wal::read_only(logs, end, reason), seq, false)
            }
            Some(Err(e)) => return Err(e),
        };
        let wal = Arc::new(wal.with_tail_limit(tail_limit));
        let write_behind = if opts.read_only {
            None
        } else {
            wal.spawn_write_behind()?
        };
        log.0.set(wal).expect("log set once");
        restart.micros = started.elapsed().as_micros() as u64;
        let inner = Arc::new(Inner {
            tree,
            log,
            path,
            medium,
            guarantee,
            // NVM direct persists every batch before it returns, whatever was asked.
            durability: if flags & FLAG_NVM_DIRECT != 0 {
                Durability::Immediate
            } else {
                opts.durability
            },
            checkpoint_bytes: opts.checkpoint_bytes.max(1 << 20),
            superblock: Mutex::new(seq),
            flags,
            store_id,
            store_id_on_media: sb.id.is_some() || wrote_superblocks,
            restart,
            counters: StoreCounters::default(),
            cursors: Mutex::new(Cursors::new()),
            hand_over: opts.nvm_hand_over,
            dram_budget: opts.dram_bytes,
            log_buffers,
        });
        let interval = match opts.durability {
            Durability::Eventual(d) => d.min(Duration::from_millis(100)),
            _ => Duration::from_millis(100),
        };
        // A read-only store has nothing to flush, grow or checkpoint.
        let bg = (!opts.read_only)
            .then(|| {
                Background::spawn(
                    "tierbase-btree",
                    inner.clone(),
                    interval,
                    |inner, ticker| {
                        let mut last_flush = Instant::now();
                        while ticker.next() {
                            if let Durability::Eventual(d) = inner.durability
                                && last_flush.elapsed() >= d
                            {
                                last_flush = Instant::now();
                                if let Err(e) = inner.sync() {
                                    tracing::warn!("B-tree log flush: {e}");
                                }
                            }
                            if let Some(w) = inner.log.get()
                                && let Err(e) = w.prepare_ahead()
                            {
                                // Not fatal: a commit that needs the space grows the log itself.
                                tracing::warn!("B-tree log zero-fill ahead: {e}");
                            }
                            let due = inner
                                .log
                                .get()
                                .is_some_and(|w| w.generation_bytes() >= inner.checkpoint_bytes);
                            if due && let Err(e) = inner.checkpoint() {
                                tracing::warn!("B-tree checkpoint: {e}");
                            }
                        }
                    },
                )
                .map_err(|e| Error::io("spawn the B-tree background thread", None, e))
            })
            .transpose()?;
        Ok(BTreeStore {
            _background: Arc::new(BackgroundGuard {
                threads: Mutex::new([bg, write_behind].into_iter().flatten().collect()),
                inner: inner.clone(),
                closed: AtomicBool::new(false),
            }),
            inner,
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.counters.gets.incr();
        self.inner.tree.get(key)
    }

    /// The values of `keys`, in order: each read as [`BTreeStore::get`] reads it (the batch
    /// is not a snapshot), with the leaves' cache misses overlapped.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        self.inner.counters.gets.add(keys.len() as u64);
        self.inner.tree.get_many(keys)
    }

    /// Inserts or replaces `key`; whether it was new.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(!self.write_batch(&[(key, Some(value))])?[0])
    }

    /// Replaces the value of `key` if it has one (a missing key stays missing); whether it
    /// had.
    pub fn update(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let (existed, lsn) = (self.inner.tree.update(key, value))
            .map_err(|e| with_path(e, self.inner.path.as_deref()))?;
        self.inner.counters.batches.incr();
        self.inner.wait(lsn)?;
        Ok(existed)
    }

    /// Removes `key`; whether it existed.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        Ok(self.write_batch(&[(key, None)])?[0])
    }

    /// Applies every op (value `None`: delete) atomically: after any crash, all of them or
    /// none. Returns, per op, whether its key existed before. Readers may see a batch
    /// partly applied while it is being applied (no snapshot isolation).
    ///
    /// A batch may change at most half the buffer pool, reckoned at `2 × height + 2` pages
    /// an op whatever the value sizes (a batch's pages stay in DRAM until it commits): about
    /// 250–340 ops with the default 64 MiB pool, by the tree's height (a user measured 82
    /// with 16 MiB, 330 with 64 MiB and 1,322 with 256 MiB). A larger
    /// batch — also a [`crate::store::Store::put_many`] — is refused with
    /// `Error::InvalidArgument` before anything changes; split it, or give the pool more
    /// DRAM.
    pub fn write_batch(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<Vec<bool>> {
        let (existed, lsn) =
            (self.inner.tree.apply(ops)).map_err(|e| with_path(e, self.inner.path.as_deref()))?;
        self.inner.counters.batches.incr();
        self.inner.wait(lsn)?;
        Ok(existed)
    }

    /// Calls `f(key, value)` for the keys in the range, in order (or reverse order), until it
    /// returns false. A key present for the whole scan is seen exactly once.
    pub fn range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.inner.tree.range(from, to, !reverse, None, &mut f)
    }

    /// [`BTreeStore::range`] for a caller that expects to stop after about `expected` keys
    /// (a scan of `n` records, a page of results): the scan copies that many out of a leaf at
    /// once, instead of starting small and re-entering the leaf by a new descent when the
    /// caller goes on. Only a hint: `f` still decides where the scan ends.
    pub fn range_expecting(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        reverse: bool,
        expected: usize,
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        self.inner
            .tree
            .range(from, to, !reverse, Some(expected), &mut f)
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.inner.tree.len()
    }

    /// Whether the store holds no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes every acknowledged write durable.
    pub fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    /// Writes every changed page and starts a new log generation (the old one is then free).
    pub fn checkpoint(&self) -> Result<()> {
        self.inner.checkpoint()
    }

    /// Checks the whole tree (levels, key order across pages, key count); returns (pages,
    /// keys). Writers wait until it is done; readers do not.
    pub fn verify(&self) -> Result<(u64, u64)> {
        self.inner.tree.verify()
    }

    /// What the open's restart did.
    pub fn restart_report(&self) -> &RestartReport {
        &self.inner.restart
    }

    /// Size limits of keys and values.
    pub fn limits(&self) -> Limits {
        self.inner.tree.limits
    }

    /// The store's figures as (name, value) pairs (`stats`, `INFO`).
    pub fn stats(&self) -> Vec<(String, String)> {
        self.inner.stats()
    }

    /// What media hold now: (pages, log 0, log 1), for simulated devices. A log on NVM
    /// gives empty images here: its regions' [`PmemRegion::power_loss`] gives what they hold
    /// (see [`BTreeStore::log_regions`]).
    pub fn durable_images(&self) -> Option<[Vec<u8>; 3]> {
        let t = &self.inner.tree;
        let wal = self.inner.log.get()?;
        let log = |f: &LogFile| match f.block() {
            Some(d) => d.durable_image(),
            None => Some(Vec::new()),
        };
        Some([
            t.pool.device().durable_image()?,
            log(&wal.files()[0])?,
            log(&wal.files()[1])?,
        ])
    }

    /// The log's two regions, if the log is on NVM (for [`BTreeDevices::with_nvm_log`] after
    /// a simulated power loss).
    pub fn log_regions(&self) -> Option<[&PmemRegion; 2]> {
        let files = self.inner.log.get()?.files();
        Some([files[0].region()?, files[1].region()?])
    }

    /// The NVM tier's region, if the store has one (a crash-simulated region's
    /// [`PmemRegion::power_loss`] gives what it holds, for a reopen with
    /// [`BTreeDevices::with_nvm`]).
    pub fn nvm_region(&self) -> Option<&PmemRegion> {
        self.inner.tree.pool.nvm().map(NvmTier::region)
    }

    /// The NVM-direct design's region (its pages and undo log), if this is that design (a
    /// crash-simulated region's [`PagedRegion::power_loss`] gives what it holds, for a reopen
    /// with [`BTreeDevices::with_nvm_direct`]).
    pub fn nvm_direct_region(&self) -> Option<&PagedRegion> {
        self.inner.tree.pool.direct().map(|d| d.region())
    }

    /// Closes the store cleanly: stops the background threads and checkpoints, so the next
    /// open replays nothing. Dropping the last handle does the same, logging any error.
    pub fn close(self) -> Result<()> {
        let guard = &self._background;
        guard.stop_threads();
        if guard.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.shut_down()
    }

    /// Abandons the store without the closing checkpoint, as a crash would (tests).
    pub fn abandon(self) {
        let guard = &self._background;
        guard.stop_threads();
        guard.closed.store(true, Ordering::Release);
    }
}

fn with_path(e: Error, path: Option<&Path>) -> Error {
    match (e, path) {
        (Error::Corrupt { path: None, detail }, Some(p)) => Error::Corrupt {
            path: Some(p.to_path_buf()),
            detail,
        },
        (Error::ReadOnly { path: None, reason }, Some(p)) => Error::ReadOnly {
            path: Some(p.to_path_buf()),
            reason,
        },
        (Error::OpenedReadOnly { path: None }, Some(p)) => Error::OpenedReadOnly {
            path: Some(p.to_path_buf()),
        },
        (e, _) => e,
    }
}

fn describe_medium(devs: &BTreeDevices, dir: Option<&Path>) -> (String, &'static str) {
    let (mut medium, mut guarantee) = match dir {
        None => ("simulated block devices".to_string(), "power loss"),
        Some(d) => {
            // The logs are opened buffered at `Eventual` (`log_block_options`).
            let pages = devs.pages.is_direct();
            let log = devs.logs[0].block().map_or(pages, BlockDevice::is_direct);
            let direct = match (pages, log) {
                (true, true) => "O_DIRECT",
                (false, false) => "buffered",
                (true, false) => "O_DIRECT pages, buffered log",
                (false, true) => "buffered pages, O_DIRECT log",
            };
            match fs_kind(d) {
                FsKind::Memory => (
                    format!("tmpfs-backed files ({direct}) in {}", d.display()),
                    "process crash",
                ),
                FsKind::Disk => (
                    format!("disk files ({direct}, fdatasync) in {}", d.display()),
                    "power loss",
                ),
            }
        }
    };
    if let Some(r) = &devs.nvm {
        let info = r.info();
        let place = info.path.as_ref().map_or_else(
            || "a simulated region".to_string(),
            |p| p.display().to_string(),
        );
        medium.push_str(&format!(
            "; {} {} in {place} ({}, flush {}, emulation {})",
            if devs.nvm_direct {
                "NVM-direct pages and undo log"
            } else {
                "NVM tier"
            },
            if info.len >= 1 << 20 {
                format!("{} MiB", info.len >> 20)
            } else {
                format!("{} KiB", info.len >> 10)
            },
            info.durability,
            info.flush,
            info.emulation
        ));
        // The store survives only what both of its media survive.
        if matches!(
            info.durability,
            DurabilityMode::ProcessCrash | DurabilityMode::None
        ) {
            guarantee = "process crash";
        }
    }
    if let Some(r) = devs.logs[0].region() {
        let info = r.info();
        medium.push_str(&format!(
            "; log on NVM ({}, flush {}, emulation {})",
            info.durability, info.flush, info.emulation
        ));
        if matches!(
            info.durability,
            DurabilityMode::ProcessCrash | DurabilityMode::None
        ) {
            guarantee = "process crash";
        }
    }
    (medium, guarantee)
}

/// `path` made absolute: a link's relative target would resolve against the link's
/// directory, not the directory the path was given in.
fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(|e| Error::io("resolve", Some(path), e))
}

/// `fsync` of directory `dir`, so that the names (and links) made in it are durable.
fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("fsync directory", Some(dir), e))
}

/// Initial data bytes of a log region on NVM (it grows like a log file).
const NVM_LOG_START: u64 = 1 << 20;

/// Makes the two log regions of a new store whose log goes on NVM: next to the tier's file
/// (`<tier file>.wal-0` and `.wal-1`, linked from `wal-0.tb` and `wal-1.tb` when the tier is
/// elsewhere). Paths made are pushed to `made`.
fn create_nvm_logs(
    dir: &Path,
    opts: &BTreeOptions,
    made: &mut Vec<PathBuf>,
) -> Result<[LogFile; 2]> {
    let mut logs = Vec::with_capacity(2);
    for i in 0..2 {
        let link = dir.join(format!("wal-{i}.tb"));
        let target = match &opts.nvm_path {
            Some(tier) => {
                let mut name = absolute(tier)?.into_os_string();
                name.push(format!(".wal-{i}"));
                PathBuf::from(name)
            }
            None => link.clone(),
        };
        let region = PmemRegion::create(&target, NVM_LOG_START, &opts.nvm_region)?;
        made.push(target.clone());
        if target != link {
            std::os::unix::fs::symlink(&target, &link)
                .map_err(|e| Error::io("link the NVM log", Some(&link), e))?;
            made.push(link);
        }
        logs.push(LogFile::Pmem(region));
    }
    Ok(logs.try_into().expect("two log files"))
}

/// Opens log file `path`: an NVM region if it is one (a region file's magic), else a file
/// on the block device.
fn open_log(path: &Path, opts: &BTreeOptions) -> Result<LogFile> {
    let mut magic = [0u8; 8];
    let is_region = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && &magic == crate::device::REGION_MAGIC;
    if is_region {
        PmemRegion::open(path, &opts.nvm_region).map(LogFile::Pmem)
    } else {
        BlockDevice::open(path, &log_block_options(opts)).map(LogFile::Block)
    }
}

/// The block options of the log files: the store's, but buffered at `Eventual`, where every
/// commit writes the log's tail to the file unsynced (so that a crash of the process keeps
/// it) and a sync comes later: through the page cache that write is a copy; with `O_DIRECT`
/// it would be a device write per commit (still what `DirectIo::Require` gets).
fn log_block_options(opts: &BTreeOptions) -> BlockOptions {
    let mut block = opts.block.clone();
    if matches!(opts.durability, Durability::Eventual(_))
        && !opts.nvm_direct
        && block.direct == crate::device::DirectIo::Auto
    {
        block.direct = crate::device::DirectIo::Off;
    }
    block
}

/// The NVM tier's region of the store in `dir`: the one it has (`nvm.tb`, possibly a
/// link), else a new one if the options ask for it (its paths are pushed to `made`).
fn open_nvm(
    dir: &Path,
    opts: &BTreeOptions,
    made: &mut Vec<PathBuf>,
) -> Result<Option<PmemRegion>> {
    let link = dir.join("nvm.tb");
    if std::fs::symlink_metadata(&link).is_ok() {
        if !link.exists() {
            let target = std::fs::read_link(&link).unwrap_or_else(|_| link.clone());
            return Err(Error::io(
                "open the NVM tier (it may hold the newest pages; restore it before opening)",
                Some(&target),
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        return PmemRegion::open(&link, &opts.nvm_region).map(Some);
    }
    if opts.nvm_bytes == 0 {
        return Ok(None);
    }
    let target = match &opts.nvm_path {
        Some(p) => absolute(p)?,
        None => link.clone(),
    };
    if !opts.nvm_direct && opts.nvm_bytes < crate::buffer::nvm::smallest_tier(opts.page_size) {
        // Refused at the size asked for (a region rounds its length up to whole pages).
        return Err(crate::buffer::nvm::too_small(
            opts.nvm_bytes,
            opts.page_size,
        ));
    }
    let region = PmemRegion::create(&target, opts.nvm_bytes, &opts.nvm_region)?;
    made.push(target.clone());
    if target != link {
        std::os::unix::fs::symlink(&target, &link)
            .map_err(|e| Error::io("link the NVM tier", Some(&link), e))?;
        made.push(link);
    }
    Ok(Some(region))
}

impl Inner {
    fn wal(&self) -> &Wal {
        self.log.get().expect("log is open after restart")
    }

    /// Waits until the batch ending at `lsn` is as durable as the level promises: synced at
    /// `Immediate`; at `Eventual` written to the log file (not synced), so that a crash of
    /// the process never takes an acknowledged write, as with the other stores; at `None`
    /// nothing (the tail may wait in the process until a sync: a bulk load's level).
    fn wait(&self, lsn: u64) -> Result<()> {
        let done = match self.durability {
            Durability::Immediate => self.wal().flush_to(lsn),
            Durability::Eventual(_) => self.wal().write_to(lsn),
            Durability::None => Ok(()),
        };
        done.map_err(|e| self.failed(e))
    }

    /// A log or page write failed: the store refuses writes from now on.
    fn failed(&self, e: Error) -> Error {
        let mut w = self.tree.writer.write();
        w.failed
            .get_or_insert_with(|| Refusal::Failed(e.failure_reason()))
            .error(self.path.clone())
    }

    fn sync(&self) -> Result<()> {
        self.wal().flush().map_err(|e| self.failed(e))
    }

    /// A clean shutdown: the closing checkpoint, then the pages in DRAM go to free NVM
    /// slots (if there is a tier), so the next open starts warm from NVM rather than from the
    /// page file.
    fn shut_down(&self) -> Result<()> {
        if self.tree.writer.read().failed == Some(Refusal::OpenedReadOnly) {
            // Nothing was written, and nothing may be.
            return Ok(());
        }
        self.checkpoint()?;
        if !self.hand_over {
            return Ok(());
        }
        let handed = self.tree.pool.hand_over_to_nvm()?;
        if handed > 0 {
            tracing::debug!("closing the B-tree store: {handed} pages handed over to NVM");
        }
        Ok(())
    }

    fn checkpoint(&self) -> Result<()> {
        let mut seq = self.superblock.lock();
        let (generation, start) = {
            let mut w = self.tree.writer.write();
            if let Some(refusal) = &w.failed {
                return Err(refusal.error(self.path.clone()));
            }
            // The generation the checkpoint starts must not need the older one's count.
            if let Err(e) = self.tree.settle_meta(&mut w) {
                drop(w);
                return Err(self.failed(e));
            }
            match self.wal().switch_generation() {
                Ok((g, s)) => {
                    w.generation = g;
                    (g, s)
                }
                Err(e) => {
                    drop(w);
                    return Err(self.failed(e));
                }
            }
        };
        let result = self.tree.pool.flush_dirty().and_then(|_| {
            write_superblock(
                self.tree.pool.device(),
                self.tree.pool.nvm(),
                self.store_id,
                self.tree.pool.page_size(),
                *seq + 1,
                (generation, start),
                self.flags,
            )
        });
        if let Err(e) = result {
            return Err(self.failed(e));
        }
        *seq += 1;
        self.counters.checkpoints.incr();
        Ok(())
    }

    fn stats(&self) -> Vec<(String, String)> {
        let p = &self.tree.pool;
        let pc = &p.counters;
        let pool_bytes = if p.direct().is_some() {
            0 // the frames are the NVM pages
        } else {
            p.frames() as u64 * p.page_size() as u64 + p.mini_pages() as u64 * MINI_PAGE_BYTES
        };
        let dc = p.device().counters();
        let design = match (p.direct(), p.nvm()) {
            (Some(_), _) => "nvm direct (pages in NVM, changed in place)",
            (None, Some(_)) if p.line_grained() => "three-tier (DRAM, NVM by cache line, SSD)",
            (None, Some(_)) => "basic NVM (DRAM, NVM by page, SSD)",
            (None, None) => "DRAM over SSD (main memory while the data fits)",
        };
        let mut out = vec![
            ("store".to_string(), "btree".to_string()),
            (
                "store_id".into(),
                if self.store_id_on_media {
                    format!("{:016x}", self.store_id)
                } else {
                    "none yet (a superblock from before ids; a read-write open gives one)".into()
                },
            ),
            ("design".into(), design.into()),
            ("medium".into(), self.medium.clone()),
            ("durability".into(), self.durability.name()),
            ("keys".into(), self.tree.len().to_string()),
            (
                "height".into(),
                self.tree
                    .height()
                    .map_or_else(|e| format!("unreadable: {e}"), |h| h.to_string()),
            ),
            ("page_size".into(), p.page_size().to_string()),
            (
                "optimistic_reads".into(),
                if self.tree.optimistic_reads {
                    "on"
                } else {
                    "off"
                }
                .into(),
            ),
            (
                "swizzling".into(),
                if p.swizzling() { "on" } else { "off" }.into(),
            ),
            ("dram_budget_bytes".into(), self.dram_budget.to_string()),
            ("pool_bytes".into(), pool_bytes.to_string()),
            // What the store holds in DRAM by design (the pool and the log's buffers), as
            // `kv` and Plush report theirs (`INFO`'s `used_memory`).
            (
                "dram_bytes".into(),
                (pool_bytes + self.log_buffers).to_string(),
            ),
            ("log_buffer_bytes".into(), self.log_buffers.to_string()),
            ("pages_resident".into(), p.resident_pages().to_string()),
            ("pages_dirty".into(), p.dirty_pages().to_string()),
            ("page_file_bytes".into(), p.device().len().to_string()),
            ("dram_hits".into(), pc.hits.get().to_string()),
            ("dram_misses".into(), pc.misses.get().to_string()),
            ("evictions".into(), pc.evictions.get().to_string()),
            (
                "dirty_evictions".into(),
                pc.dirty_evictions.get().to_string(),
            ),
            ("write_back_batch".into(), p.write_back_batch().to_string()),
            (
                "write_back_batches".into(),
                pc.write_back_batches.get().to_string(),
            ),
            ("written_ahead".into(), pc.written_ahead.get().to_string()),
            ("mini_pages".into(), p.mini_pages().to_string()),
            (
                "mini_page_bytes".into(),
                (p.mini_pages() as u64 * MINI_PAGE_BYTES).to_string(),
            ),
            ("mini_loads".into(), pc.mini_loads.get().to_string()),
            (
                "mini_promotions".into(),
                pc.mini_promotions.get().to_string(),
            ),
            ("mini_evictions".into(), pc.mini_evictions.get().to_string()),
            ("swizzles".into(), pc.swizzles.get().to_string()),
            ("unswizzles".into(), pc.unswizzles.get().to_string()),
            ("swizzled_fixes".into(), pc.swizzled_fixes.get().to_string()),
            (
                "read_only_private_reads".into(),
                pc.private_reads.get().to_string(),
            ),
            ("ssd_page_reads".into(), dc.reads.to_string()),
            ("ssd_page_writes".into(), pc.page_writes.get().to_string()),
            ("page_file_syncs".into(), dc.syncs.to_string()),
            (
                "checkpoints".into(),
                self.counters.checkpoints.get().to_string(),
            ),
            (
                "write_batches".into(),
                self.counters.batches.get().to_string(),
            ),
            ("gets".into(), self.counters.gets.get().to_string()),
            (
                "writer_early_descents".into(),
                self.tree.writer_early_descents.get().to_string(),
            ),
            (
                "writer_parks".into(),
                self.tree.writer_parks.get().to_string(),
            ),
            (
                "leaf_writes".into(),
                self.tree.leaf_writes.get().to_string(),
            ),
            (
                "leaf_writer_parks".into(),
                self.tree.leaf_writer_parks.get().to_string(),
            ),
            (
                "optimistic_descents".into(),
                self.tree.optimistic_descents.get().to_string(),
            ),
            (
                "optimistic_restarts".into(),
                self.tree.optimistic_restarts.get().to_string(),
            ),
            (
                "miss_restarts".into(),
                self.tree.miss_restarts.get().to_string(),
            ),
            (
                "read_batches".into(),
                self.tree.read_batches.get().to_string(),
            ),
            ("restart_frames".into(), self.restart.frames.to_string()),
            ("restart_micros".into(), self.restart.micros.to_string()),
        ];
        if let Some(t) = p.nvm() {
            let c = &t.counters;
            out.extend([
                ("nvm_slots".to_string(), t.slots().to_string()),
                ("nvm_pages_resident".into(), t.resident().to_string()),
                (
                    "nvm_admission".into(),
                    match t.admission() {
                        Admission::All => "all".to_string(),
                        Admission::RecentlyRefused(n) => format!("admission set of {n}"),
                    },
                ),
                ("nvm_hits".into(), c.hits.get().to_string()),
                ("nvm_lines_loaded".into(), c.lines_loaded.get().to_string()),
                ("nvm_line_loads".into(), c.line_loads.get().to_string()),
                (
                    "nvm_loads".into(),
                    if p.line_grained() {
                        "a cache line at a time on point reads of leaves".into()
                    } else {
                        "whole pages".to_string()
                    },
                ),
                (
                    "nvm_slot_lines_written".into(),
                    c.lines_written.get().to_string(),
                ),
                (
                    "nvm_line_write_backs".into(),
                    c.line_write_backs.get().to_string(),
                ),
                (
                    "nvm_write_backs".into(),
                    if p.line_grained() {
                        "changed lines of pages that match their slot".into()
                    } else {
                        "whole pages".to_string()
                    },
                ),
                (
                    "nvm_hottest_slot_line_writes".into(),
                    t.hottest_line_writes().0.to_string(),
                ),
                (
                    "nvm_hottest_directory_line_writes".into(),
                    t.hottest_line_writes().1.to_string(),
                ),
                ("nvm_admissions".into(), c.admissions.get().to_string()),
                ("nvm_handed_over".into(), c.handed_over.get().to_string()),
                ("nvm_refusals".into(), c.refusals.get().to_string()),
                ("nvm_page_writes".into(), c.page_writes.get().to_string()),
                ("nvm_evictions".into(), c.evictions.get().to_string()),
                ("nvm_spills".into(), c.spills.get().to_string()),
                ("nvm_spill_syncs".into(), c.spill_syncs.get().to_string()),
                (
                    "restart_nvm_pages".into(),
                    self.restart.nvm_pages.to_string(),
                ),
                (
                    "restart_nvm_scan_micros".into(),
                    self.restart.nvm_scan_micros.to_string(),
                ),
            ]);
        }
        if let Some(d) = p.direct() {
            let c = &d.counters;
            out.extend([
                ("nvm_direct_pages".to_string(), p.frames().to_string()),
                (
                    "nvm_direct_undo_log_bytes".into(),
                    d.region().head_len().to_string(),
                ),
                ("nvm_direct_commits".into(), c.commits.get().to_string()),
                (
                    "nvm_direct_undo_entries".into(),
                    c.undo_entries.get().to_string(),
                ),
                (
                    "nvm_direct_undo_lines".into(),
                    c.undo_lines.get().to_string(),
                ),
                (
                    "nvm_direct_lines_persisted".into(),
                    c.lines_persisted.get().to_string(),
                ),
                (
                    "nvm_direct_charged_reads".into(),
                    c.charged_reads.get().to_string(),
                ),
                (
                    "restart_undone_lines".into(),
                    self.restart.undone_lines.to_string(),
                ),
            ]);
        }
        if let Some(w) = self.log.get() {
            out.extend([
                ("wal_generation".to_string(), w.generation().to_string()),
                ("wal_frames".into(), w.counters.frames.get().to_string()),
                ("wal_bytes".into(), w.counters.bytes.get().to_string()),
                (
                    "wal_bytes_written".into(),
                    w.counters.bytes_written.get().to_string(),
                ),
                (
                    "wal_medium".into(),
                    if w.files()[0].region().is_some() {
                        "nvm"
                    } else {
                        "file"
                    }
                    .to_string(),
                ),
                ("wal_fsyncs".into(), w.counters.syncs.get().to_string()),
                (
                    "wal_writes_behind".into(),
                    w.counters.writes_behind.get().to_string(),
                ),
                (
                    "wal_nvm_persists".into(),
                    w.counters.persists.get().to_string(),
                ),
                ("wal_durable_lsn".into(), w.durable_lsn().to_string()),
            ]);
        }
        if let Some(refusal) = &self.tree.writer.read().failed {
            out.push(("read_only".into(), refusal.reason().to_string()));
        }
        // This open's damage is in the file's text when the open writes (said once).
        if let Some(d) = &self.restart.log_damage
            && self.restart.recorded_log_damage.is_none()
        {
            out.push(("restart_log_damage".into(), d.to_string()));
        }
        if let Some(text) = &self.restart.recorded_log_damage {
            out.push((
                "recorded_log_damage".into(),
                format!(
                    "{} (kept in {LOG_DAMAGE_FILE} in the store's directory: remove it once \
                     the loss is accepted)",
                    text.replace('\n', "; ")
                ),
            ));
        }
        out
    }
}

impl Store for BTreeStore {
    fn describe(&self) -> StoreDescription {
        StoreDescription {
            store: "btree".into(),
            medium: self.inner.medium.clone(),
            guarantee: self.inner.guarantee.into(),
            commit: self.inner.durability.name(),
            ordered: true,
        }
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        BTreeStore::get(self, key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        BTreeStore::get_many(self, keys)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        BTreeStore::put(self, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<bool> {
        BTreeStore::delete(self, key)
    }

    /// One crash-atomic write batch ([`BTreeStore::write_batch`]).
    fn put_many_is_all_or_nothing(&self) -> bool {
        true
    }

    fn put_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<Vec<bool>> {
        let ops: Vec<(&[u8], Option<&[u8]>)> = pairs.iter().map(|&(k, v)| (k, Some(v))).collect();
        let existed = self.write_batch(&ops)?;
        Ok(existed.into_iter().map(|e| !e).collect())
    }

    fn modify(&self, key: &[u8], decide: &mut dyn FnMut(Option<&[u8]>) -> Change) -> Result<()> {
        let lsn = (self.inner.tree.modify(key, decide))
            .map_err(|e| with_path(e, self.inner.path.as_deref()))?;
        self.inner.wait(lsn)
    }

    fn len(&self) -> u64 {
        BTreeStore::len(self)
    }

    /// Cursors name the key to continue from: the store keeps the last 16,384 handed out (at
    /// most 4 MiB of keys), and any other cursor (expired, from before a restart, or made up)
    /// resumes at its first 4 bytes ([`scan_resume`]): some keys may come back twice, as
    /// Redis allows, and none is missed. Only a cursor a fallback handed out that expires in
    /// turn is an error ([`FELL_BACK`]).
    fn scan(&self, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> Result<u64> {
        let (start, exact) = match cursor {
            0 => (None, true),
            c => {
                let (key, exact) = scan_resume(&self.inner.cursors.lock(), c)?;
                (Some(key), exact)
            }
        };
        let want = count.max(1);
        let mut got = 0;
        let mut next: Option<Vec<u8>> = None;
        let from = start.as_deref().map_or(Bound::Unbounded, Bound::Included);
        // One more than asked: the key after the last one handed out names the next cursor.
        self.range_expecting(
            from,
            Bound::Unbounded,
            false,
            want.saturating_add(1),
            |k, _| {
                if got == want {
                    next = Some(k.to_vec());
                    return false;
                }
                out.push(k.to_vec());
                got += 1;
                true
            },
        )?;
        let Some(next) = next else {
            return Ok(0);
        };
        let prefix_of = scan_cursor(&next, 0);
        let id = self.inner.cursors.lock().keep(next);
        let flag = if exact { 0 } else { FELL_BACK };
        Ok(prefix_of | u64::from(id | flag))
    }

    fn defers_sync(&self) -> bool {
        self.inner.durability != Durability::Immediate
    }

    /// At `None` a log in files keeps its tail in DRAM until a sync, the write-behind thread
    /// or a checkpoint writes it out (`Eventual` writes it at each commit); a log on NVM
    /// stores each frame into the mapping; NVM direct persists every batch in place before it
    /// returns.
    fn applied_survives_process_crash(&self) -> bool {
        self.inner.durability != Durability::None
            || self.inner.tree.pool.direct().is_some()
            || self
                .inner
                .log
                .get()
                .is_some_and(|w| w.files()[0].region().is_some())
    }

    /// Batches (`put_many`) take the tree's writer lock exclusively, one at a time; readers,
    /// and single changes that stay in their leaf, go on beside each other.
    fn single_writer(&self) -> bool {
        true
    }

    fn sync(&self) -> Result<()> {
        BTreeStore::sync(self)
    }

    fn metrics(&self) -> Vec<(String, String)> {
        self.stats()
    }

    fn close(self: Box<Self>) -> Result<()> {
        BTreeStore::close(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two processes (here: two cursor tables made at different times) hand out different ids,
    /// so a cursor from before a restart does not name a key the new process keeps under the
    /// same id; and a kept cursor is found again only with its own prefix.
    #[test]
    fn cursor_ids_differ_between_processes_and_carry_their_prefix() {
        // Tables made one after another (as by processes started alike): their first ids
        // differ. Eight, so that one chance collision cannot fail the test.
        let firsts: std::collections::HashSet<u32> = (0..8)
            .map(|_| Cursors::new().keep(b"user:0042".to_vec()))
            .collect();
        assert!(firsts.len() >= 7, "ids repeat across restarts: {firsts:?}");
        let mut second = Cursors::new();
        let b = second.keep(b"user:0042".to_vec());
        let cursor = scan_cursor(b"user:0042", b);
        let resume = |c| scan_resume(&second, c).unwrap();
        assert_eq!(resume(cursor), (b"user:0042".to_vec(), true));
        // The same id with another prefix: not this key; resume at the cursor's own prefix.
        assert_eq!(resume(scan_cursor(b"zzzz", b)), (b"zzzz".to_vec(), false));
        assert_eq!(resume(scan_cursor(b"ab", 7)), (b"ab".to_vec(), false));
        // A kept cursor handed out by a fallback resumes as kept; one not kept is an error.
        assert_eq!(
            resume(cursor | u64::from(FELL_BACK)),
            (b"user:0042".to_vec(), true)
        );
        assert!(scan_resume(&second, scan_cursor(b"ab", 7 | FELL_BACK)).is_err());
    }
}
