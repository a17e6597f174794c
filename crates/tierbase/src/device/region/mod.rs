//! Persistent regions: byte-addressable memory backed by a memory-mapped file.
//!
//! Split by concern: this file maps, grows and describes regions; `header` encodes the file
//! header; `persist` holds the persist API (flush, fence, group commit, faults); `sim` the
//! crash simulator's hooks; `file` the exclusive file lock.
//!
//! Owns: reserving address space, mapping the file (with `MAP_SYNC` on DAX), growing it in
//! place, the region file header, and the persist API (`flush`, `drain`, `persist`,
//! non-temporal writes) in the durability mode of the medium; also anonymous (volatile) regions
//! and crash-simulated regions for tests. Must not touch: what the bytes mean (stores own their
//! formats inside the data area).
//!
//! # Address stability
//! A region reserves `RegionOptions::reserve` bytes of address space up front (`PROT_NONE`,
//! no memory committed) and maps the file into the start of it. Growing maps the new part of the
//! file right behind the old one (`MAP_FIXED` inside the reservation), so the base address never
//! changes and concurrent readers never see a remap. The reservation starts on a 2 MiB
//! boundary, so file offsets and addresses agree modulo 2 MiB and the kernel can map a file
//! whose pages are 2 MiB (DAX, a tmpfs mounted with `huge=`) with one TLB entry per 2 MiB.
//!
//! # File format
//! A region file is a 4 KiB header page followed by the data area. Offsets in this API are
//! offsets into the data area. Header (little endian; byte by byte in `docs/FORMAT-region.md`):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `TBREGION` |
//! | 8..12 | format version (1) |
//! | 12..16 | header length (4096) |
//! | 16..20 | CRC32C of bytes 0..16 |
//! | 20..24 | zero |
//! | 24..28 | data length in 4 KiB pages |
//! | 28..32 | CRC32C of bytes 24..28 |
//! | 32..4096 | zero |
//!
//! Bytes 24..32 form one aligned 8-byte word, replaced by a single atomic store after the file
//! has grown durably, so the length is both checksummed and failure-atomic. The data area is at
//! most `u32::MAX` pages (just under 16 TiB).
//!
//! # Concurrency
//! The mapping is shared memory, accessed only through raw-pointer copies and atomics — never
//! through Rust references to the bytes — so concurrent writers and optimistic readers are
//! well-defined at the hardware level; stores detect torn reads with their own version checks.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde::Serialize;

mod file;
mod header;
mod paged;
mod persist;
mod sim;

pub(super) use self::file::lock_file;
#[cfg(test)]
use self::header::decode_len_word;
use self::header::{encode_len_word, parse_header, write_header_fields};
pub use self::paged::PagedRegion;
#[cfg(test)]
use self::persist::media_lines;
use super::counters::{CounterSnapshot, DeviceCounters};
use super::cpu::{self, CACHE_LINE, FlushInstruction};
use super::crash::{CrashSim, CrashSimConfig};
use super::durability::{Durability, DurabilityMode, FsKind, fs_kind};
use super::emulate::{Direction, Emulator, now_ns};
use super::group_sync::GroupSync;
use super::profile::{DeviceKind, DeviceProfile};
use super::shared_mem;
use crate::error::{Error, Result};

/// Size of the region file header.
pub const REGION_HEADER_LEN: usize = 4096;
/// Optane's media access granularity, used for the write-amplification counter.
pub const MEDIA_LINE: usize = 256;
/// The first bytes of every region file.
pub const REGION_MAGIC: &[u8; 8] = b"TBREGION";
const MAGIC: &[u8; 8] = REGION_MAGIC;
const FORMAT_VERSION: u32 = 1;
const PAGE: usize = 4096;
/// The size of a page-middle-directory mapping (x86-64): reservations start on a multiple.
const HUGE_PAGE: usize = 2 << 20;
const DATA_LEN_OFFSET: usize = 24;
/// Largest data area the header's 32-bit page count can describe.
const MAX_DATA_LEN: usize = u32::MAX as usize * PAGE;

/// How a region's memory is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MappingKind {
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` on a DAX file system.
    DaxSync,
    /// `MAP_SHARED` through the page cache.
    Shared,
    /// `MAP_PRIVATE` of a file opened read-only ([`RegionOptions::read_only`]): what the
    /// process stores stays in its own copies of the pages, never in the file.
    Private,
    /// Anonymous private memory (volatile or crash-simulated).
    Anonymous,
}

/// Options for creating or opening a region.
#[derive(Clone, Debug)]
pub struct RegionOptions {
    /// Durability mode to run in; `None` = the strongest the medium offers. Asking for a
    /// stronger mode than available is an error; a weaker one is honoured (e.g. `None` on disk
    /// for a volatile benchmark).
    pub durability: Option<DurabilityMode>,
    /// Flush instruction override (must be supported). `None` = the best by CPUID on DAX and
    /// simulated regions; no flushing in `process-crash` mode (tmpfs), where it adds cost but
    /// no durability.
    pub flush: Option<FlushInstruction>,
    /// Address space to reserve, i.e. the largest size (in data bytes) the region can grow to;
    /// a file region's header page comes on top, and file regions are limited to just under
    /// 16 TiB by their format. Default 1 TiB (virtual only; no memory or disk is committed).
    pub reserve: u64,
    /// Pre-fault every page at open and on growth, so page faults are not measured later.
    pub prefault: bool,
    /// Make the region behave like this memory profile (reads and persists are slowed down).
    pub emulate: Option<DeviceProfile>,
    /// When acknowledged writes become durable. Anything but `Immediate` defers the persists a
    /// store marks deferrable ([`PmemRegion::persist_deferred`]) on media whose persist is a
    /// file sync, and on crash-simulated regions (which then model a page cache: unflushed
    /// words reach media at random). Elsewhere it has no effect.
    pub commit: Durability,
    /// Open the file for reading only (a snapshot, a read-only mount, an inspection that must
    /// not change the file): mapped copy-on-write, so nothing stored reaches the file; a
    /// shared lock (other read-only opens share it; a writer cannot open meanwhile); durability
    /// `None`; growth refused. The store above refuses writes ([`Error::OpenedReadOnly`]).
    pub read_only: bool,
}

impl Default for RegionOptions {
    fn default() -> Self {
        RegionOptions {
            durability: None,
            flush: None,
            reserve: 1 << 40,
            prefault: false,
            emulate: None,
            commit: Durability::Immediate,
            read_only: false,
        }
    }
}

/// Facts about a region, for reports.
#[derive(Clone, Debug, Serialize)]
pub struct RegionInfo {
    /// Backing file, if any.
    pub path: Option<PathBuf>,
    /// Data bytes.
    pub len: u64,
    /// How it is mapped.
    pub mapping: MappingKind,
    /// Durability mode in effect.
    pub durability: DurabilityMode,
    /// What that mode guarantees, in words.
    pub guarantee: &'static str,
    /// Flush instruction in use.
    pub flush: FlushInstruction,
    /// "none" or "emulated <profile>".
    pub emulation: String,
    /// Whether this is a crash-simulated region.
    pub crash_simulated: bool,
}

/// A byte-addressable persistent region. See the module docs.
pub struct PmemRegion {
    reservation: NonNull<u8>,
    reserve: usize,
    header_len: usize,
    len: AtomicUsize,
    file: Option<File>,
    path: Option<PathBuf>,
    grow_lock: Mutex<()>,
    mapping: MappingKind,
    mode: DurabilityMode,
    flush: FlushInstruction,
    prefault: bool,
    counters: DeviceCounters,
    sim: Option<CrashSim>,
    emulator: Option<Emulator>,
    group: GroupSync,
    /// Deferred persists (see [`RegionOptions::commit`]); `None` when every persist is done at
    /// once.
    deferred: Option<persist::Deferred>,
}

// SAFETY: the mapping is process-wide shared memory; all access goes through raw-pointer copies
// and atomics (see the module docs), and the mutable bookkeeping is behind atomics and a mutex.
unsafe impl Send for PmemRegion {}
// SAFETY: as above.
unsafe impl Sync for PmemRegion {}

impl std::fmt::Debug for PmemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmemRegion")
            .field("path", &self.path)
            .field("len", &self.len())
            .field("mapping", &self.mapping)
            .field("mode", &self.mode)
            .field("flush", &self.flush)
            .finish()
    }
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// `len` rounded up to whole pages, or an error if that does not fit the address space.
fn page_len(len: u64) -> Result<usize> {
    usize::try_from(len)
        .ok()
        .and_then(|l| l.checked_next_multiple_of(PAGE))
        .ok_or_else(|| too_big(len))
}

fn os_err(op: &'static str, path: Option<&Path>) -> Error {
    io_err(op, path, std::io::Error::last_os_error())
}

/// [`Error::io`], except that `ENOSPC` becomes [`Error::DeviceFull`] (which `Error::io` itself
/// does not do), so that a full device is always reported as such.
pub(crate) fn io_err(op: &'static str, path: Option<&Path>, e: std::io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ENOSPC) {
        return Error::DeviceFull {
            path: path.map(Path::to_path_buf),
            requested: 0,
        };
    }
    Error::io(op, path, e)
}

/// `fsync` of the directory holding `path`, so that a newly created file's name is durable.
pub(crate) fn sync_parent_dir(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("fsync directory", Some(dir), e))
}

/// Reserves up to `wanted` bytes of inaccessible address space, and at least `minimum`,
/// starting on a [`HUGE_PAGE`] boundary.
///
/// Why the boundary: the kernel maps a file with 2 MiB page-table entries only where the
/// address and the file offset agree modulo 2 MiB (DAX persistent memory, and a tmpfs
/// mounted with `huge=`). Region offsets are file offsets from the reservation's base, so an
/// aligned base lets every 2 MiB of the file take one TLB entry instead of 512. Measured on
/// a huge-page tmpfs: docs/BENCHMARKS.md Figure 28.
///
/// Where the full reservation is refused (a tight `RLIMIT_AS`, valgrind, 32-bit-ish address
/// spaces), it halves the request down to `minimum`; the region can then grow only that far,
/// and growing beyond says so with [`Error::RegionLimit`]. Returns the base and the size won.
fn reserve_address_space(wanted: usize, minimum: usize) -> Result<(NonNull<u8>, usize)> {
    let minimum = minimum.max(PAGE);
    let mut len = wanted.max(minimum);
    loop {
        let err = match super::dram::map_anonymous_aligned(len, libc::PROT_NONE, HUGE_PAGE) {
            Ok(base) => return Ok((base, len)),
            Err(e) => e,
        };
        let next = (len / 2) & !(PAGE - 1);
        if next < minimum {
            return Err(Error::io("reserve address space", None, err));
        }
        len = next;
    }
}

fn check_flush(requested: Option<FlushInstruction>) -> Result<FlushInstruction> {
    match requested {
        None => Ok(cpu::features().best_flush()),
        Some(f) if f.is_supported() => Ok(f),
        Some(f) => Err(Error::Unsupported(format!(
            "flush instruction {f} is not supported by this CPU"
        ))),
    }
}

impl PmemRegion {
    /// Creates a new region file of `len` data bytes at `path` (which must not exist).
    ///
    /// Disk space is allocated up front (`fallocate`), so a full device is reported here as
    /// [`Error::DeviceFull`] instead of a crash on first write.
    pub fn create(path: &Path, len: u64, opts: &RegionOptions) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io_err("create", Some(path), e))?;
        let result =
            lock_file(&file, path, false).and_then(|()| Self::create_in(file, path, len, opts));
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn create_in(file: File, path: &Path, len: u64, opts: &RegionOptions) -> Result<Self> {
        let data_len = page_len(len)?;
        // Refuse before allocating anything if the region could never be that large.
        let limit = file_data_limit(opts.reserve);
        if data_len as u64 > limit {
            return Err(Error::RegionLimit {
                requested: data_len as u64,
                limit,
            });
        }
        let total = REGION_HEADER_LEN + data_len;
        allocate_file(&file, path, 0, total)?;
        let mut header = [0u8; REGION_HEADER_LEN];
        write_header_fields(&mut header, 0);
        // The header goes to the file with pwrite + fdatasync (and the new name with an fsync
        // of the directory) before anything is mapped, so a crash right after create leaves a
        // valid, empty region (or no file at all).
        std::os::unix::fs::FileExt::write_all_at(&file, &header, 0)
            .map_err(|e| io_err("write header", Some(path), e))?;
        file.sync_data()
            .map_err(|e| io_err("fdatasync", Some(path), e))?;
        sync_parent_dir(path)?;
        let region = Self::map_file(file, path, 0, opts)?;
        region.grow(data_len as u64)?;
        Ok(region)
    }

    /// Opens an existing region file, validating its header.
    pub fn open(path: &Path, opts: &RegionOptions) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .open(path)
            .map_err(|e| Error::io("open", Some(path), e))?;
        lock_file(&file, path, opts.read_only)?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::io("stat", Some(path), e))?
            .len();
        if file_len < REGION_HEADER_LEN as u64 {
            return Err(Error::TooSmall {
                path: path.to_path_buf(),
                actual: file_len,
                minimum: REGION_HEADER_LEN as u64,
            });
        }
        let mut header = [0u8; REGION_HEADER_LEN];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut header, 0)
            .map_err(|e| Error::io("read header", Some(path), e))?;
        let data_len = parse_header(&header, path)?;
        let needed = REGION_HEADER_LEN as u64 + data_len;
        if file_len < needed {
            return Err(Error::Truncated {
                path: path.to_path_buf(),
                expected: needed,
                actual: file_len,
            });
        }
        let data_len = usize::try_from(data_len).map_err(|_| too_big(data_len))?;
        Self::map_file(file, path, data_len, opts)
    }

    /// Opens `path` if it exists, else creates it with `len` bytes.
    pub fn open_or_create(path: &Path, len: u64, opts: &RegionOptions) -> Result<Self> {
        if path.exists() {
            Self::open(path, opts)
        } else {
            Self::create(path, len, opts)
        }
    }

    fn map_file(file: File, path: &Path, data_len: usize, opts: &RegionOptions) -> Result<Self> {
        let flush = check_flush(opts.flush)?;
        // `reserve` bounds the data area; the header page comes on top of it.
        let limit =
            usize::try_from(file_data_limit(opts.reserve)).map_err(|_| too_big(opts.reserve))?;
        let (reservation, reserve) = reserve_address_space(
            REGION_HEADER_LEN + limit.max(data_len),
            REGION_HEADER_LEN + data_len,
        )?;
        let mut region = PmemRegion {
            reservation,
            reserve,
            header_len: REGION_HEADER_LEN,
            len: AtomicUsize::new(data_len),
            file: Some(file),
            path: Some(path.to_path_buf()),
            grow_lock: Mutex::new(()),
            mapping: MappingKind::Shared,
            mode: DurabilityMode::None,
            flush,
            prefault: opts.prefault,
            counters: DeviceCounters::default(),
            sim: None,
            emulator: None,
            group: GroupSync::default(),
            deferred: None,
        };
        if opts.read_only {
            region.mapping = MappingKind::Private;
            region.map_range(0, REGION_HEADER_LEN + data_len, false)?;
            region.flush = FlushInstruction::None;
            // No prefault: it writes to fault pages in, which would copy every page.
            region.prefault = false;
            return Ok(region);
        }
        // Map the header and the existing data; the first mapping decides DAX or not.
        region.mapping = region.map_range(0, REGION_HEADER_LEN + data_len, true)?;
        let available = match region.mapping {
            // Without a flush instruction, stores reach persistent memory only when the cache
            // evicts them: that survives a process crash, not a power loss.
            MappingKind::DaxSync if region.flush == FlushInstruction::None => {
                DurabilityMode::ProcessCrash
            }
            MappingKind::DaxSync => DurabilityMode::Dax,
            _ => match fs_kind(path) {
                FsKind::Memory => DurabilityMode::ProcessCrash,
                FsKind::Disk => DurabilityMode::Msync,
            },
        };
        region.mode = resolve_mode(opts.durability, available)?;
        if opts.commit.defers() && region.mode == DurabilityMode::Msync {
            region.deferred = Some(persist::Deferred::default());
        }
        if matches!(region.mode, DurabilityMode::Msync | DurabilityMode::None) {
            // Persists of these modes run no flush instruction (msync or nothing): the region
            // says so, and so does every report that names its instruction (a disk file's
            // benchmarks said `clwb`, which never ran).
            region.flush = FlushInstruction::None;
        }
        if region.mode == DurabilityMode::ProcessCrash && opts.flush.is_none() {
            // A memory-backed file survives kill -9 from the page cache; writing cache lines
            // back buys nothing there, so by default nothing is flushed (fences stay). Ask for
            // a flush instruction explicitly to model persistent-memory costs on tmpfs.
            region.flush = FlushInstruction::None;
        }
        if let Some(p) = &opts.emulate {
            region.emulator = Some(Emulator::for_medium(
                p,
                DeviceKind::Memory,
                "a memory region",
            )?);
        }
        if region.prefault {
            region.prefault_range(0, data_len);
        }
        Ok(region)
    }

    /// A volatile region in anonymous memory (durability `None`).
    pub fn anonymous(len: u64, opts: &RegionOptions) -> Result<Self> {
        Self::anonymous_inner(len, opts, None)
    }

    /// A crash-simulated region in anonymous memory: every persist is also tracked in a shadow
    /// image, and [`PmemRegion::power_loss`] returns what media would hold after a power loss.
    /// It reports durability `Dax`, since it simulates a DAX device.
    pub fn simulated(len: u64, config: CrashSimConfig, opts: &RegionOptions) -> Result<Self> {
        let data_len = page_len(len)?;
        let sim = CrashSim::new(config, vec![0; data_len]);
        Self::anonymous_inner(len, opts, Some(sim))
    }

    /// A crash-simulated region whose contents (durable and working) start as `image` — the
    /// "reboot" after [`PmemRegion::power_loss`]. `image.len()` must be a multiple of 4 KiB.
    pub fn from_image(image: &[u8], config: CrashSimConfig, opts: &RegionOptions) -> Result<Self> {
        if !image.len().is_multiple_of(PAGE) {
            return Err(Error::InvalidArgument(format!(
                "image length {} is not a multiple of 4096",
                image.len()
            )));
        }
        let sim = CrashSim::new(config, image.to_vec());
        let region = Self::anonymous_inner(image.len() as u64, opts, Some(sim))?;
        // SAFETY: the region's data area is mapped read-write for image.len() bytes, and nothing
        // else references it yet.
        unsafe { shared_mem::store(region.base_ptr(), image) };
        Ok(region)
    }

    fn anonymous_inner(len: u64, opts: &RegionOptions, sim: Option<CrashSim>) -> Result<Self> {
        let flush = check_flush(opts.flush)?;
        let data_len = page_len(len)?;
        let (reservation, reserve) =
            reserve_address_space(page_len(opts.reserve)?.max(data_len).max(PAGE), data_len)?;
        let simulated = sim.is_some();
        let mut region = PmemRegion {
            reservation,
            reserve,
            header_len: 0,
            len: AtomicUsize::new(0),
            file: None,
            path: None,
            grow_lock: Mutex::new(()),
            mapping: MappingKind::Anonymous,
            mode: if simulated {
                DurabilityMode::Dax
            } else {
                DurabilityMode::None
            },
            flush,
            prefault: opts.prefault,
            counters: DeviceCounters::default(),
            sim,
            emulator: None,
            group: GroupSync::default(),
            deferred: None,
        };
        if let Some(requested) = opts.durability {
            region.mode = resolve_mode(Some(requested), region.mode)?;
        }
        if opts.commit.defers() && region.sim.is_some() {
            region.deferred = Some(persist::Deferred::default());
        }
        if let Some(p) = &opts.emulate {
            region.emulator = Some(Emulator::for_medium(
                p,
                DeviceKind::Memory,
                "a memory region",
            )?);
        }
        region.grow(data_len as u64)?;
        Ok(region)
    }

    /// Maps `[file_off, file_off + len)` of the backing (file or anonymous) at the same offset
    /// inside the reservation. `first`: this is the initial mapping, which decides between
    /// `MAP_SYNC` (DAX) and a plain shared mapping.
    fn map_range(&self, file_off: usize, len: usize, first: bool) -> Result<MappingKind> {
        if len == 0 {
            return Ok(self.mapping);
        }
        debug_assert!(file_off + len <= self.reserve);
        // SAFETY: `file_off + len <= reserve` is checked by every caller, so the address range
        // lies inside our own reservation.
        let addr = unsafe { self.reservation.as_ptr().add(file_off) }.cast::<libc::c_void>();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let Some(file) = &self.file else {
            // SAFETY: changes protection of pages inside our own reservation only.
            let rc = unsafe { libc::mprotect(addr, len, prot) };
            if rc != 0 {
                return Err(os_err("mprotect", None));
            }
            return Ok(MappingKind::Anonymous);
        };
        let fd = file.as_raw_fd();
        let off = libc::off_t::try_from(file_off).map_err(|_| too_big(file_off as u64))?;
        // Decide DAX with a probe mapping at a kernel-chosen address, never with MAP_FIXED on
        // the reservation: on a non-DAX file system the kernel rejects MAP_SYNC only *after* it
        // has unmapped the target range, which would punch a hole into the reservation that
        // another thread's mmap could then take.
        let kind = if first {
            probe_map_sync(fd, self.path.as_deref())?
        } else {
            self.mapping
        };
        let flags = match kind {
            MappingKind::DaxSync => libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC | libc::MAP_FIXED,
            // Copy-on-write over a file opened read-only: writable pages, an unchanged file.
            MappingKind::Private => libc::MAP_PRIVATE | libc::MAP_FIXED,
            _ => libc::MAP_SHARED | libc::MAP_FIXED,
        };
        // SAFETY: MAP_FIXED replaces pages of our own reservation (PROT_NONE, or an earlier
        // mapping of the same file range that nothing references beyond `len`), so no memory
        // anyone else owns is touched.
        let p = unsafe { libc::mmap(addr, len, prot, flags, fd, off) };
        if p == libc::MAP_FAILED {
            let err = os_err("mmap", self.path.as_deref());
            // A failed MAP_FIXED may already have unmapped the range: put the PROT_NONE
            // reservation back so the hole cannot be handed to anyone else and our final
            // munmap covers only our own pages.
            // SAFETY: as above, the range is inside our reservation.
            unsafe {
                libc::mmap(
                    addr,
                    len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            return Err(err);
        }
        Ok(kind)
    }

    /// Grows the data area to at least `new_len` bytes (rounded up to 4 KiB). Contents and the
    /// base address are preserved; new bytes are zero. The new length is durable before this
    /// returns (in `Dax`/`Msync` modes).
    pub fn grow(&self, new_len: u64) -> Result<()> {
        let _g = self.grow_lock.lock();
        let old = self.len.load(Ordering::Acquire);
        let limit = self.reserve - self.header_len;
        let new = match page_len(new_len) {
            Ok(n) if n <= limit => n,
            _ if new_len <= old as u64 => return Ok(()),
            _ => {
                return Err(Error::RegionLimit {
                    requested: new_len,
                    limit: limit as u64,
                });
            }
        };
        if new <= old {
            return Ok(());
        }
        if self.mapping == MappingKind::Private {
            return Err(Error::OpenedReadOnly {
                path: self.path.clone(),
            });
        }
        // Growth protocol (docs/FORMAT-region.md): 1. allocate the file's new size and make
        // that durable; 2. map it; 3. publish the new length in the header with one 8-byte
        // store; 4. persist the header line. A crash before 4 completes leaves the old length
        // in a file at least that long, which opens with every persisted byte.
        if let Some(file) = &self.file {
            // Only the new range: fallocate over the whole file would walk every page already
            // allocated (on tmpfs, a cost that grows with the store on every step).
            allocate_file(
                file,
                self.path.as_deref().unwrap_or(Path::new("")),
                self.header_len + old,
                new - old,
            )?;
            if self.mode.survives_power_loss() {
                file.sync_data()
                    .map_err(|e| io_err("fdatasync", self.path.as_deref(), e))?;
                self.counters.syncs.incr();
            }
        }
        grow_stop_point(1)?;
        self.map_range(self.header_len + old, new - old, false)?;
        if let Some(sim) = &self.sim {
            sim.grow(new);
        }
        if self.prefault {
            self.prefault_range(old, new - old);
        }
        grow_stop_point(2)?;
        if self.file.is_some() {
            let hdr = self.header_u64(DATA_LEN_OFFSET);
            hdr.store(encode_len_word(new as u64).to_le(), Ordering::Release);
            grow_stop_point(3)?;
            self.persist_header_line()?;
        }
        self.len.store(new, Ordering::Release);
        Ok(())
    }

    fn header_u64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: the header page is mapped for the region's lifetime, `off` is 8-aligned and
        // inside it, and the reservation base is page-aligned.
        unsafe { AtomicU64::from_ptr(self.reservation.as_ptr().add(off).cast::<u64>()) }
    }

    fn persist_header_line(&self) -> Result<()> {
        let ptr = self.reservation.as_ptr();
        match self.mode {
            DurabilityMode::Dax | DurabilityMode::ProcessCrash => {
                // SAFETY: the header page is mapped and the instruction was checked at open.
                let lines = unsafe { cpu::flush_range(self.flush, ptr.add(DATA_LEN_OFFSET), 8) };
                cpu::sfence();
                self.counters.flushes.add(lines);
                self.counters.fences.incr();
                Ok(())
            }
            DurabilityMode::Msync => self.msync_abs(0, PAGE),
            DurabilityMode::None => Ok(()),
        }
    }

    fn prefault_range(&self, off: usize, len: usize) {
        if len == 0 {
            return;
        }
        // In steps, so that the address-space lock it holds is released often: a writer that
        // needs it meanwhile (a page fault behind an `mprotect`) waits for one step at most.
        const STEP: usize = 256 << 10;
        let mut rc = 0;
        let mut at = off;
        while at < off + len && rc == 0 {
            let n = STEP.min(off + len - at);
            // SAFETY: the range is mapped read-write inside the reservation.
            let addr = unsafe { self.base_ptr().add(at) };
            // SAFETY: madvise on our own mapping; MADV_POPULATE_WRITE only faults pages in.
            rc = unsafe { libc::madvise(addr.cast(), n, libc::MADV_POPULATE_WRITE) };
            at += n;
        }
        if rc != 0 {
            // Older kernels: touch one byte per page with an atomic no-op to fault it in writable.
            let mut o = off;
            while o < off + len {
                self.atomic_u8_unchecked(o).fetch_add(0, Ordering::Relaxed);
                o += PAGE;
            }
        }
    }

    #[inline]
    fn base_ptr(&self) -> *mut u8 {
        // SAFETY: header_len <= reserve, so the result stays inside the reservation.
        unsafe { self.reservation.as_ptr().add(self.header_len) }
    }

    /// Data bytes currently mapped.
    #[inline]
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire) as u64
    }

    /// Whether the data area is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest size the region can grow to.
    pub fn max_len(&self) -> u64 {
        (self.reserve - self.header_len) as u64
    }

    /// Durability mode in effect.
    pub fn durability(&self) -> DurabilityMode {
        self.mode
    }

    /// How the memory is mapped.
    pub fn mapping(&self) -> MappingKind {
        self.mapping
    }

    /// Flush instruction in use.
    pub fn flush_instruction(&self) -> FlushInstruction {
        self.flush
    }

    /// Whether the region maps its file read-only, copy-on-write ([`RegionOptions::read_only`]).
    pub fn is_read_only(&self) -> bool {
        self.mapping == MappingKind::Private
    }

    /// What the region lives on, for a store's description: the durability mode's medium, or
    /// "read-only file" (its mode is `None` only because nothing is written).
    pub fn medium_label(&self) -> &'static str {
        if self.is_read_only() {
            "read-only file"
        } else {
            self.mode.medium()
        }
    }

    /// What a write survives, in a sentence (see [`DurabilityMode::guarantee`]); for a
    /// read-only region, that nothing is written.
    pub fn guarantee_label(&self) -> &'static str {
        if self.is_read_only() {
            "opened read-only: nothing is written, every write is refused"
        } else {
            self.mode.guarantee()
        }
    }

    /// What an acknowledged write survives, in two words (see [`DurabilityMode::survives`]);
    /// `read-only` for a read-only region.
    pub fn survives_label(&self) -> &'static str {
        if self.is_read_only() {
            "read-only"
        } else {
            self.mode.survives()
        }
    }

    /// Backing file path, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The emulator, when a profile is emulated.
    pub fn emulator(&self) -> Option<&Emulator> {
        self.emulator.as_ref()
    }

    /// Facts for reports.
    pub fn info(&self) -> RegionInfo {
        RegionInfo {
            path: self.path.clone(),
            len: self.len(),
            mapping: self.mapping,
            durability: self.mode,
            guarantee: self.mode.guarantee(),
            flush: self.flush,
            emulation: self
                .emulator
                .as_ref()
                .map_or_else(|| "none".to_string(), Emulator::label),
            crash_simulated: self.sim.is_some(),
        }
    }

    /// Counter snapshot.
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    #[inline]
    fn check(&self, off: u64, len: usize) -> Result<usize> {
        let size = self.len();
        match off.checked_add(len as u64) {
            Some(end) if end <= size => Ok(off as usize),
            _ => Err(Error::OutOfRange {
                offset: off,
                len: len as u64,
                size,
            }),
        }
    }

    /// Hints the CPU to start loading the cache lines of `off..off + len` (ignored when out of
    /// range). A lookup that knows a record's offset before it must read something else (a
    /// latch) overlaps the two cache misses this way.
    #[inline]
    pub fn prefetch(&self, off: u64, len: usize) {
        let Ok(o) = self.check(off, len) else {
            return;
        };
        let (mut line, end) = (o & !63, o + len);
        while line < end {
            // The address stays inside the mapping (bounds checked above) and prefetching never
            // faults, so the pointer is only a hint.
            crate::device::cpu::prefetch(self.base_ptr().wrapping_add(line));
            line += 64;
        }
    }

    /// Copies `buf.len()` bytes at `off` into `buf`.
    #[inline]
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        let o = self.check(off, buf.len())?;
        let issued = self.emulation_start();
        // SAFETY: bounds checked above; the range is mapped for `&self`'s lifetime and only
        // ever accessed atomically (shared_mem) by anyone.
        unsafe { shared_mem::load(self.base_ptr().add(o), buf) };
        self.counters.record_read(buf.len() as u64);
        self.emulation_finish(issued, Direction::Read, buf.len());
        Ok(())
    }

    /// Compares the `key.len()` bytes at `off` with `key` and, only if they are equal, copies
    /// the `out.len()` bytes at `off + value_at` into `out`: a record's key checked in place
    /// and its value copied straight into the caller's buffer, with one bounds check and one
    /// counted read. `value_at` must not be less than `key.len()`.
    #[inline]
    pub fn read_if_key(&self, off: u64, key: &[u8], value_at: u64, out: &mut [u8]) -> Result<bool> {
        let len = (value_at as usize).saturating_add(out.len());
        if (value_at as usize) < key.len() {
            return Err(Error::InvalidArgument(format!(
                "read_if_key: the value at +{value_at} overlaps the {}-byte key",
                key.len()
            )));
        }
        let o = self.check(off, len)?;
        let issued = self.emulation_start();
        // SAFETY: `off..off + value_at + out.len()` is in bounds (checked above) and holds the
        // key's bytes (value_at >= key.len()); mapped for `&self`'s lifetime and only ever
        // accessed atomically (shared_mem) by anyone.
        let equal = unsafe {
            shared_mem::load_if_equal(self.base_ptr().add(o), key, value_at as usize, out)
        };
        self.counters.record_read(len as u64);
        self.emulation_finish(issued, Direction::Read, len);
        Ok(equal)
    }

    /// Reads a little-endian u64 at `off` (no alignment requirement).
    pub fn read_u64(&self, off: u64) -> Result<u64> {
        let o = self.check(off, 8)?;
        let issued = self.emulation_start();
        let mut w = [0u8; 8];
        // SAFETY: bounds checked above; as for `read`.
        unsafe { shared_mem::load(self.base_ptr().add(o), &mut w) };
        let v = u64::from_ne_bytes(w);
        self.counters.record_read(8);
        self.emulation_finish(issued, Direction::Read, 8);
        Ok(u64::from_le(v))
    }

    /// The `N` 8-byte words at `off` (must be 8-aligned), each read atomically: a hash
    /// bucket's keys or a filter line as numbers, with one bounds check and no byte copy.
    #[inline]
    pub fn read_words<const N: usize>(&self, off: u64) -> Result<[u64; N]> {
        if !off.is_multiple_of(8) {
            return Err(Error::Misaligned {
                offset: off,
                len: 8 * N as u64,
                alignment: 8,
            });
        }
        let o = self.check(off, 8 * N)?;
        let issued = self.emulation_start();
        // SAFETY: `N` words in bounds (checked above), 8-aligned (the base is page-aligned),
        // mapped for `&self`'s lifetime and only ever accessed atomically or by raw copies.
        let words = unsafe { &*self.base_ptr().add(o).cast::<[AtomicU64; N]>() };
        let mut w = [0u64; N];
        // A plain loop: `array::map` here compiles to copies of the whole array.
        for (out, word) in w.iter_mut().zip(words) {
            *out = u64::from_le(word.load(Ordering::Relaxed));
        }
        self.counters.record_read(8 * N as u64);
        self.emulation_finish(issued, Direction::Read, 8 * N);
        Ok(w)
    }

    /// Copies `data` to `off`. Not durable until persisted.
    #[inline]
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let o = self.check(off, data.len())?;
        // SAFETY: bounds checked above; the range is mapped writable for `&self`'s lifetime and
        // only ever accessed atomically (shared_mem) by anyone.
        unsafe { shared_mem::store(self.base_ptr().add(o), data) };
        self.counters.record_write(data.len() as u64);
        Ok(())
    }

    /// Fills `[off, off+len)` with `byte`. Not durable until persisted.
    pub fn fill(&self, off: u64, len: usize, byte: u8) -> Result<()> {
        let o = self.check(off, len)?;
        // SAFETY: bounds checked above; as for `write`.
        unsafe { shared_mem::fill(self.base_ptr().add(o), len, byte) };
        self.counters.writes.incr();
        self.counters.bytes_written.add(len as u64);
        Ok(())
    }

    /// An atomic view of the 8 bytes at `off` (must be 8-aligned).
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        let o = self.check_aligned(off, 8)?;
        // SAFETY: in bounds, 8-aligned (the base is page-aligned), mapped for `&self`'s lifetime
        // (the reservation is only unmapped on drop and never moves), and only ever accessed
        // atomically or by raw copies.
        Ok(unsafe { AtomicU64::from_ptr(self.base_ptr().add(o).cast::<u64>()) })
    }

    /// An atomic view of the 4 bytes at `off` (must be 4-aligned).
    pub fn atomic_u32(&self, off: u64) -> Result<&AtomicU32> {
        let o = self.check_aligned(off, 4)?;
        // SAFETY: as for `atomic_u64`.
        Ok(unsafe { AtomicU32::from_ptr(self.base_ptr().add(o).cast::<u32>()) })
    }

    /// An atomic view of the byte at `off`.
    pub fn atomic_u8(&self, off: u64) -> Result<&AtomicU8> {
        let o = self.check(off, 1)?;
        Ok(self.atomic_u8_unchecked(o))
    }

    fn atomic_u8_unchecked(&self, o: usize) -> &AtomicU8 {
        // SAFETY: callers pass an in-bounds offset; as for `atomic_u64`.
        unsafe { AtomicU8::from_ptr(self.base_ptr().add(o)) }
    }

    fn check_aligned(&self, off: u64, align: u64) -> Result<usize> {
        if !off.is_multiple_of(align) {
            return Err(Error::Misaligned {
                offset: off,
                len: align,
                alignment: align,
            });
        }
        self.check(off, align as usize)
    }
}

impl Drop for PmemRegion {
    fn drop(&mut self) {
        // SAFETY: we own the whole reservation; no references into it outlive `self`.
        unsafe { libc::munmap(self.reservation.as_ptr().cast(), self.reserve) };
    }
}

#[cfg(test)]
thread_local! {
    /// Unit tests: make `grow` stop (as if the process died) after this protocol step.
    static GROW_STOP: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn grow_stop_point(step: u8) -> Result<()> {
    if GROW_STOP.with(std::cell::Cell::get) == step {
        return Err(Error::InvalidArgument(format!(
            "test stop after grow step {step}"
        )));
    }
    Ok(())
}

#[cfg(not(test))]
#[inline(always)]
fn grow_stop_point(_step: u8) -> Result<()> {
    Ok(())
}

/// Whether `fd` can be mapped with `MAP_SYNC` (a DAX file), tried on one page at an address
/// the kernel chooses and unmapped again.
fn probe_map_sync(fd: libc::c_int, path: Option<&Path>) -> Result<MappingKind> {
    // SAFETY: a fresh one-page mapping at a kernel-chosen address; it replaces nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(MappingKind::Shared),
            _ => Err(io_err("mmap (MAP_SYNC probe)", path, err)),
        };
    }
    // SAFETY: unmaps exactly the probe mapping created above, which nothing references.
    unsafe { libc::munmap(p, PAGE) };
    Ok(MappingKind::DaxSync)
}

/// The largest data area a file region may have with `reserve` bytes reserved.
fn file_data_limit(reserve: u64) -> u64 {
    reserve
        .checked_next_multiple_of(PAGE as u64)
        .unwrap_or(u64::MAX - (PAGE as u64 - 1))
        .min(MAX_DATA_LEN as u64)
}

fn too_big(v: u64) -> Error {
    Error::InvalidArgument(format!(
        "size {v} does not fit this platform's address space"
    ))
}

fn resolve_mode(
    requested: Option<DurabilityMode>,
    available: DurabilityMode,
) -> Result<DurabilityMode> {
    match requested {
        None => Ok(available),
        Some(m) if m.can_run_on(available) => Ok(m),
        Some(m) => Err(Error::DurabilityUnavailable {
            requested: m,
            available,
        }),
    }
}

/// Allocates `len` bytes of `file` from `offset` (extending it to at least `offset + len`).
fn allocate_file(file: &File, path: &Path, offset: usize, len: usize) -> Result<()> {
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(too_big(len as u64));
    };
    let err = loop {
        // SAFETY: fallocate on our own open file descriptor with plain integer arguments.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, off, l) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            break err;
        }
    };
    match err.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EFBIG) => Err(Error::DeviceFull {
            path: Some(path.to_path_buf()),
            requested: len as u64,
        }),
        Some(libc::EOPNOTSUPP) => {
            // File systems without fallocate: extend with set_len (sparse; a later full disk can
            // still surface as SIGBUS, which is why fallocate is preferred).
            let cur = file
                .metadata()
                .map_err(|e| io_err("stat", Some(path), e))?
                .len();
            let end = (offset + len) as u64;
            if cur < end {
                file.set_len(end).map_err(|e| match e.raw_os_error() {
                    Some(libc::EFBIG) => Error::DeviceFull {
                        path: Some(path.to_path_buf()),
                        requested: end - cur,
                    },
                    _ => io_err("truncate", Some(path), e),
                })?;
            }
            Ok(())
        }
        _ => Err(io_err("fallocate", Some(path), err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_stopped_after_any_step_leaves_an_openable_region() {
        let mut dirs = vec![tempfile::tempdir().unwrap()];
        if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
            dirs.push(d);
        }
        for dir in &dirs {
            for step in 1..=3u8 {
                let path = dir.path().join(format!("grow-{step}.region"));
                let r = PmemRegion::create(&path, 8192, &RegionOptions::default()).unwrap();
                r.write(0, b"first page").unwrap();
                r.persist(0, 10).unwrap();
                r.write(8184, b"lastword").unwrap();
                r.persist(8184, 8).unwrap();
                GROW_STOP.with(|c| c.set(step));
                let stopped = r.grow(65536);
                GROW_STOP.with(|c| c.set(0));
                assert!(stopped.is_err(), "step {step}: the stop point was reached");
                // The process "dies" here: nothing else is written or synced.
                drop(r);
                let r = PmemRegion::open(&path, &RegionOptions::default())
                    .unwrap_or_else(|e| panic!("step {step}: region must open: {e}"));
                // Before the header store the old length stands; after it (in the page cache)
                // the new one, whose bytes were allocated first.
                let want = if step < 3 { 8192 } else { 65536 };
                assert_eq!(r.len(), want, "step {step}");
                let mut buf = [0u8; 10];
                r.read(0, &mut buf).unwrap();
                assert_eq!(&buf, b"first page", "step {step}");
                assert_eq!(&r.read_u64(8184).unwrap().to_le_bytes(), b"lastword");
                r.grow(65536).unwrap();
                let mut rest = vec![1u8; 65536 - 8192];
                r.read(8192, &mut rest).unwrap();
                assert!(
                    rest.iter().all(|&b| b == 0),
                    "step {step}: new bytes are zero"
                );
            }
        }
    }

    /// A tmpfs mount that backs its files with huge pages, if this machine has one (a test
    /// cannot mount one itself).
    fn huge_tmpfs() -> Option<PathBuf> {
        let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
        mounts
            .lines()
            .filter_map(|line| line.split_whitespace().nth(1).map(PathBuf::from))
            .find(|mount| crate::device::on_huge_page_tmpfs(mount))
    }

    /// Kilobytes the kernel maps with 2 MiB entries in the mappings inside `[base, end)`, from
    /// `/proc/self/smaps`.
    fn pmd_mapped_kib(base: usize, end: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut kib = 0;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((start, _)) = range.split_once('-')
                && let Ok(start) = usize::from_str_radix(start, 16)
            {
                inside = (base..end).contains(&start);
                continue;
            }
            if inside
                && let Some(v) = line
                    .strip_prefix("ShmemPmdMapped:")
                    .or_else(|| line.strip_prefix("FilePmdMapped:"))
            {
                kib += v.trim().trim_end_matches(" kB").parse::<u64>().unwrap_or(0);
            }
        }
        kib
    }

    /// Regions start on a 2 MiB boundary, and keep their base as they grow, so that a file
    /// whose pages are 2 MiB (DAX, a huge-page tmpfs) can be mapped with 2 MiB entries.
    #[test]
    fn regions_start_on_a_huge_page_boundary() {
        let mut dirs = vec![tempfile::tempdir().unwrap()];
        dirs.extend(tempfile::tempdir_in("/dev/shm").ok());
        let huge = huge_tmpfs().and_then(|m| tempfile::tempdir_in(m).ok());
        let on_huge_pages = huge.is_some();
        dirs.extend(huge);
        let mut regions = vec![PmemRegion::anonymous(8192, &RegionOptions::default()).unwrap()];
        for dir in &dirs {
            let path = dir.path().join("aligned.region");
            regions.push(PmemRegion::create(&path, 8192, &RegionOptions::default()).unwrap());
        }
        for r in &regions {
            let base = r.reservation.as_ptr() as usize;
            assert_eq!(base % HUGE_PAGE, 0, "{:?}", r.path);
            r.grow(6 << 20).unwrap();
            assert_eq!(
                r.reservation.as_ptr() as usize,
                base,
                "growth keeps the base"
            );
        }
        if !on_huge_pages {
            eprintln!("no tmpfs mounted with huge=always: 2 MiB entries not checked");
            return;
        }
        // The file's first 4 MiB (header included) are two whole huge pages once touched.
        let r = regions.last().unwrap();
        for off in (0..6u64 << 20).step_by(4096) {
            r.write(off, &[1]).unwrap();
        }
        let base = r.reservation.as_ptr() as usize;
        let kib = pmd_mapped_kib(base, base + r.reserve);
        assert!(kib >= 4096, "{kib} KiB mapped with 2 MiB entries");
    }

    #[test]
    fn length_word_round_trips_and_detects_any_bit_flip() {
        for len in [0u64, 4096, 1 << 30, MAX_DATA_LEN as u64] {
            let w = encode_len_word(len);
            assert_eq!(decode_len_word(w), Some(len));
            for bit in 0..64 {
                assert_eq!(
                    decode_len_word(w ^ (1 << bit)),
                    None,
                    "len {len}, bit {bit}"
                );
            }
        }
    }

    #[test]
    fn media_line_count() {
        assert_eq!(media_lines(0, 0), 0);
        assert_eq!(media_lines(0, 1), 1);
        assert_eq!(media_lines(0, 256), 1);
        assert_eq!(media_lines(255, 2), 2);
        assert_eq!(media_lines(100, 600), 3);
    }

    #[test]
    fn header_round_trip_and_corruption() {
        let mut h = [0u8; REGION_HEADER_LEN];
        write_header_fields(&mut h, 8192);
        assert_eq!(parse_header(&h, Path::new("x")).unwrap(), 8192);
        let mut bad = h;
        bad[0] = b'X';
        assert!(matches!(
            parse_header(&bad, Path::new("x")),
            Err(Error::BadMagic { .. })
        ));
        let mut bad = h;
        bad[13] ^= 1;
        assert!(matches!(
            parse_header(&bad, Path::new("x")),
            Err(Error::Corrupt { .. })
        ));
        let mut bad = h;
        bad[8] = 9;
        let crc = crc32c::crc32c(&bad[0..16]);
        bad[16..20].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            parse_header(&bad, Path::new("x")),
            Err(Error::UnsupportedVersion { found: 9, .. })
        ));
    }
}
