//! Block devices: files or raw devices accessed with direct I/O and batched asynchronous I/O.
//!
//! Owns: opening with `O_DIRECT` (falling back to buffered I/O where the file system refuses
//! it), alignment and range checks, submitting a batch of k reads/writes and waiting for all of
//! them through io_uring (or a thread-pool fallback), `fdatasync`, growing a device, the
//! exclusive lock on a store file, counters and emulation; and routing the same API to an
//! in-memory, power-loss-simulated device ([`BlockDevice::simulated`], media model in
//! `block_sim`). Must not touch: what the blocks mean (pages, logs and their formats belong to
//! stores).
//!
//! io_uring submission is the one place where the kernel holds raw pointers into our buffers;
//! [`BlockDevice::submit`] never returns (nor unwinds) while any submitted operation is still in
//! flight, which is what makes the safe `&mut AlignedBuf` API sound.
//!
//! In-flight limits: one [`BlockDevice::submit`] call keeps at most `queue_depth` operations in
//! flight; with an emulated profile additionally at most `k_r` reads and `k_w` writes. The
//! `max_in_flight` counter is the largest number of operations observed in flight on the whole
//! device (so concurrent `submit` calls from several threads can add up beyond one batch's
//! depth).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use io_uring::{IoUring, opcode, types};
use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use super::aligned::AlignedBuf;
use super::block_sim::{MemDisk, SimDisk, SimPower};
use super::counters::{CounterSnapshot, DeviceCounters};
use super::emulate::{Direction, Emulator, now_ns};
use super::profile::{DeviceKind, DeviceProfile};
use super::region::{io_err, lock_file, sync_parent_dir};
use crate::error::{Error, Result};

/// Largest transfer Linux performs in one read/write call (`MAX_RW_COUNT`); longer requests are
/// split, and short transfers are resubmitted for the remainder.
const MAX_RW: usize = 0x7fff_f000;
/// Most threads the thread-pool engine uses for one batch.
const MAX_THREADS: usize = 16;
/// How often one operation may come back `EINTR`/`EAGAIN` before the error is reported.
const MAX_RETRIES: u32 = 16;

/// Whether to use `O_DIRECT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum DirectIo {
    /// Use it if the file system accepts it, else buffered I/O (reported by
    /// [`BlockDevice::is_direct`]).
    #[default]
    Auto,
    /// Fail if the file system refuses it.
    Require,
    /// Buffered I/O through the page cache.
    Off,
}

/// Which I/O engine submits batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IoEngineKind {
    /// io_uring if the kernel allows it, else threads.
    #[default]
    Auto,
    /// io_uring (error if unavailable).
    IoUring,
    /// A pool of threads doing `pread`/`pwrite`.
    Threads,
}

/// Options for opening a block device.
#[derive(Clone, Debug)]
pub struct BlockOptions {
    /// `O_DIRECT` policy.
    pub direct: DirectIo,
    /// Engine choice.
    pub engine: IoEngineKind,
    /// Most I/Os in flight at once per [`BlockDevice::submit`] call (io_uring ring size;
    /// threads in the fallback, at most 16).
    pub queue_depth: u32,
    /// Required alignment of offsets and lengths (the logical block size). Default 4096.
    pub block_size: u64,
    /// Make the device behave like this profile.
    pub emulate: Option<DeviceProfile>,
    /// Open an existing file for reading only (a snapshot, a read-only mount): writes fail,
    /// and [`BlockDevice::lock_exclusive`] takes a shared lock, which other read-only opens
    /// share and a writer cannot take.
    pub read_only: bool,
}

impl Default for BlockOptions {
    fn default() -> Self {
        BlockOptions {
            direct: DirectIo::Auto,
            engine: IoEngineKind::Auto,
            queue_depth: 64,
            block_size: 4096,
            emulate: None,
            read_only: false,
        }
    }
}

/// One I/O in a batch.
#[derive(Debug)]
pub enum Io<'a> {
    /// Fill `buf` from `offset`.
    Read {
        /// Byte offset on the device.
        offset: u64,
        /// Destination; its whole length is read.
        buf: &'a mut AlignedBuf,
    },
    /// Write all of `buf` at `offset`.
    Write {
        /// Byte offset on the device.
        offset: u64,
        /// Source; its whole length is written.
        buf: &'a AlignedBuf,
    },
}

impl Io<'_> {
    fn offset(&self) -> u64 {
        match self {
            Io::Read { offset, .. } | Io::Write { offset, .. } => *offset,
        }
    }

    fn len(&self) -> usize {
        match self {
            Io::Read { buf, .. } => buf.len(),
            Io::Write { buf, .. } => buf.len(),
        }
    }

    fn direction(&self) -> Direction {
        match self {
            Io::Read { .. } => Direction::Read,
            Io::Write { .. } => Direction::Write,
        }
    }
}

/// Facts about an open block device, for reports.
#[derive(Clone, Debug, Serialize)]
pub struct BlockInfo {
    /// Path.
    pub path: PathBuf,
    /// Size in bytes.
    pub len: u64,
    /// Whether `O_DIRECT` is in use.
    pub direct_io: bool,
    /// Engine in use (`io-uring` or `threads`).
    pub engine: IoEngineKind,
    /// Why io_uring is not used, if it is not.
    pub engine_note: Option<String>,
    /// Queue depth.
    pub queue_depth: u32,
    /// "none" or "emulated <profile>".
    pub emulation: String,
}

/// What a [`BlockDevice`] reads and writes.
enum Backing {
    /// A file or raw device.
    File(File),
    /// In-memory media on a simulated power source.
    Sim(SimDisk),
    /// Plain in-memory media.
    Memory(MemDisk),
}

/// A block device or file. See the module docs.
pub struct BlockDevice {
    backing: Backing,
    path: PathBuf,
    /// Size in bytes; only grows ([`BlockDevice::grow`]).
    len: AtomicU64,
    /// Serialises [`BlockDevice::grow`] calls.
    grow_lock: Mutex<()>,
    /// Callers of [`BlockDevice::grow_written`] (which wait for their growth) in progress: a
    /// growth behind then finishes its step in large writes.
    growing_in_front: AtomicU64,
    direct: bool,
    /// Opened for reading only ([`BlockOptions::read_only`]).
    read_only: bool,
    block_size: u64,
    queue_depth: u32,
    rings: Option<Mutex<Vec<IoUring>>>,
    engine_note: Option<String>,
    counters: DeviceCounters,
    /// Operations in flight on the whole device right now (for `max_in_flight`).
    in_flight: AtomicU64,
    emulator: Option<Emulator>,
    /// The file system of a regular file (`None`: a device node, a simulated or in-memory
    /// device), asked of the open file once. On tmpfs or ramfs nothing lies below the page
    /// cache, so a write is as durable as it will ever be once it returns and `fdatasync`
    /// does nothing (Linux's `noop_fsync`): [`BlockDevice::sync`] skips the system call, and
    /// [`BlockDevice::zero_fill_pays`] is false.
    file_fs: Option<super::FsKind>,
}

/// In-flight limits for one batch.
#[derive(Clone, Copy, Debug)]
struct Limits {
    total: usize,
    read: usize,
    write: usize,
}

/// Which operation of a batch to issue next: the lowest-numbered one whose direction still has
/// room under `lim`. Returns `None` when nothing may be issued now.
fn pick_next(
    reads: &mut VecDeque<usize>,
    writes: &mut VecDeque<usize>,
    out: (usize, usize),
    lim: Limits,
) -> Option<(usize, Direction)> {
    if out.0 + out.1 >= lim.total {
        return None;
    }
    let read_ok = out.0 < lim.read;
    let write_ok = out.1 < lim.write;
    let take_read = match (reads.front(), writes.front()) {
        (Some(&r), Some(&w)) if read_ok && write_ok => r < w,
        (Some(_), _) if read_ok => true,
        (_, Some(_)) if write_ok => false,
        _ => return None,
    };
    if take_read {
        reads.pop_front().map(|i| (i, Direction::Read))
    } else {
        writes.pop_front().map(|i| (i, Direction::Write))
    }
}

/// Aborts the process if dropped during a panic. Lives on the stack of code that has handed
/// buffer pointers to the kernel: unwinding out of it would free or reuse buffers the kernel
/// may still write into, so a panic there must not unwind.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::process::abort();
        }
    }
}

impl std::fmt::Debug for BlockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDevice")
            .field("path", &self.path)
            .field("len", &self.len())
            .field("direct", &self.direct)
            .field("io_uring", &self.rings.is_some())
            .field("simulated", &self.is_simulated())
            .finish()
    }
}

impl BlockDevice {
    /// Creates a file of `len` bytes (must not exist; space allocated up front) and opens it.
    ///
    /// On a file system without `fallocate` the file is extended sparsely instead. On any error
    /// the new file is removed again.
    pub fn create(path: &Path, len: u64, opts: &BlockOptions) -> Result<Self> {
        check_options(opts)?;
        if len == 0 || !len.is_multiple_of(opts.block_size) {
            return Err(Error::Misaligned {
                offset: 0,
                len,
                alignment: opts.block_size,
            });
        }
        let Ok(l) = libc::off_t::try_from(len) else {
            return Err(Error::InvalidArgument(format!("size {len} too large")));
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| io_err("create", Some(path), e))?;
        let result = allocate(&file, path, 0, l)
            .and_then(|()| file.sync_all().map_err(|e| io_err("fsync", Some(path), e)))
            .and_then(|()| sync_parent_dir(path));
        drop(file);
        let result = result.and_then(|()| Self::open(path, opts));
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// Opens an existing file or block device.
    pub fn open(path: &Path, opts: &BlockOptions) -> Result<Self> {
        check_options(opts)?;
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(!opts.read_only);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let (file, direct) = match opts.direct {
            DirectIo::Off => (
                open(false).map_err(|e| Error::io("open", Some(path), e))?,
                false,
            ),
            DirectIo::Require => (
                open(true).map_err(|e| Error::io("open (O_DIRECT)", Some(path), e))?,
                true,
            ),
            DirectIo::Auto => match open(true) {
                Ok(f) => (f, true),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                    open(false).map_err(|e| Error::io("open", Some(path), e))?,
                    false,
                ),
                Err(e) => return Err(Error::io("open (O_DIRECT)", Some(path), e)),
            },
        };
        let len = device_len(&file, path)?;
        let (rings, engine_note) = match opts.engine {
            IoEngineKind::Threads => (None, Some("thread pool requested".to_string())),
            kind => match IoUring::new(opts.queue_depth.next_power_of_two()) {
                Ok(ring) => (Some(Mutex::new(vec![ring])), None),
                Err(e) if kind == IoEngineKind::Auto => (
                    None,
                    Some(format!("io_uring unavailable ({e}); using threads")),
                ),
                Err(e) => return Err(Error::Unsupported(format!("io_uring: {e}"))),
            },
        };
        let emulator = opts
            .emulate
            .as_ref()
            .map(|p| Emulator::for_medium(p, DeviceKind::Block, "a block device"))
            .transpose()?;
        let file_fs = super::regular_file_fs(&file);
        Ok(BlockDevice {
            file_fs,
            backing: Backing::File(file),
            path: path.to_path_buf(),
            len: AtomicU64::new(len),
            grow_lock: Mutex::new(()),
            growing_in_front: AtomicU64::new(0),
            direct,
            read_only: opts.read_only,
            block_size: opts.block_size,
            queue_depth: opts.queue_depth,
            rings,
            engine_note,
            counters: DeviceCounters::default(),
            in_flight: AtomicU64::new(0),
            emulator,
        })
    }

    /// An in-memory device of `len` zeroed bytes named `name`, on the simulated power source
    /// `power` (see [`SimPower`]): writes reach its media only when [`BlockDevice::sync`]
    /// completes before the power loss, or — torn, sector by sector — at the loss itself.
    ///
    /// Validation (alignment, range) and counters are those of a file device; there is no I/O
    /// engine (requests are copied in order), no emulation and no `O_DIRECT`. `len` must be a
    /// positive multiple of `block_size`, a power of two. Devices on one power source should
    /// have distinct names (the name seeds the tearing).
    pub fn simulated(name: &str, len: u64, block_size: u64, power: &Arc<SimPower>) -> Result<Self> {
        let n = usize::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("size {len} too large")))?;
        Self::simulated_checked(name, len, block_size, power, || vec![0; n])
    }

    /// An in-memory device whose working and durable images start as `image` — typically
    /// [`BlockDevice::durable_image`] of a device that lost power, to "reboot" it. Otherwise
    /// as [`BlockDevice::simulated`].
    pub fn simulated_from(
        name: &str,
        image: Vec<u8>,
        block_size: u64,
        power: &Arc<SimPower>,
    ) -> Result<Self> {
        let len = image.len() as u64;
        Self::simulated_checked(name, len, block_size, power, || image)
    }

    fn simulated_checked(
        name: &str,
        len: u64,
        block_size: u64,
        power: &Arc<SimPower>,
        image: impl FnOnce() -> Vec<u8>,
    ) -> Result<Self> {
        check_options(&BlockOptions {
            block_size,
            ..BlockOptions::default()
        })?;
        if len == 0 || !len.is_multiple_of(block_size) {
            return Err(Error::Misaligned {
                offset: 0,
                len,
                alignment: block_size,
            });
        }
        let path = PathBuf::from(name);
        let disk = SimDisk::new(power, &path, image());
        Ok(BlockDevice {
            backing: Backing::Sim(disk),
            path,
            len: AtomicU64::new(len),
            grow_lock: Mutex::new(()),
            growing_in_front: AtomicU64::new(0),
            direct: false,
            read_only: false,
            block_size,
            queue_depth: 1,
            rings: None,
            engine_note: Some("simulated in memory (no I/O engine)".to_string()),
            counters: DeviceCounters::default(),
            in_flight: AtomicU64::new(0),
            emulator: None,
            file_fs: None,
        })
    }

    /// A RAM disk of `len` zeroed bytes named `name`, with `opts.block_size` and, when
    /// `opts.emulate` names a profile, that profile's timing: the PIO device model with real
    /// data but no real I/O, so a profile is reproduced on any machine whose CPU keeps up
    /// (the emulator counts the operations that ended late). No `O_DIRECT`, no I/O engine;
    /// a write is durable when it returns. For benchmarks and the profiler, not for data.
    pub fn in_memory(name: &str, len: u64, opts: &BlockOptions) -> Result<Self> {
        check_options(opts)?;
        if len == 0 || !len.is_multiple_of(opts.block_size) {
            return Err(Error::Misaligned {
                offset: 0,
                len,
                alignment: opts.block_size,
            });
        }
        let n = usize::try_from(len)
            .map_err(|_| Error::InvalidArgument(format!("size {len} too large")))?;
        let emulator = opts
            .emulate
            .as_ref()
            .map(|p| Emulator::for_medium(p, DeviceKind::Block, "a block device"))
            .transpose()?;
        Ok(BlockDevice {
            backing: Backing::Memory(MemDisk::new(n)),
            path: PathBuf::from(name),
            len: AtomicU64::new(len),
            grow_lock: Mutex::new(()),
            growing_in_front: AtomicU64::new(0),
            direct: false,
            read_only: false,
            block_size: opts.block_size,
            queue_depth: opts.queue_depth,
            rings: None,
            engine_note: Some("in memory (no I/O engine)".to_string()),
            counters: DeviceCounters::default(),
            in_flight: AtomicU64::new(0),
            emulator,
            file_fs: None,
        })
    }

    /// Whether the media is in memory ([`BlockDevice::in_memory`]).
    pub fn is_in_memory(&self) -> bool {
        matches!(self.backing, Backing::Memory(_))
    }

    /// Whether this is an in-memory device made by [`BlockDevice::simulated`].
    pub fn is_simulated(&self) -> bool {
        matches!(self.backing, Backing::Sim(_))
    }

    /// What the media of a simulated device holds: before a power loss, the synced writes
    /// (nothing written since the last sync); after it, the frozen image with the surviving
    /// sectors of the writes the loss tore. `None` for files and raw devices.
    pub fn durable_image(&self) -> Option<Vec<u8>> {
        match &self.backing {
            Backing::Sim(disk) => disk.durable_image(),
            Backing::File(_) | Backing::Memory(_) => None,
        }
    }

    /// What a simulated device reads back (every write that returned `Ok`): what a restarted
    /// process would find if power had not been lost. `None` for files and raw devices.
    pub fn working_image(&self) -> Option<Vec<u8>> {
        match &self.backing {
            Backing::Sim(disk) => disk.working_image(),
            Backing::File(_) | Backing::Memory(_) => None,
        }
    }

    /// Grows the device to `new_len` bytes (a multiple of the block size; the same length is
    /// a no-op, a shorter one an [`Error::InvalidArgument`]).
    ///
    /// A file gets the extra space allocated (`fallocate`, or sparsely where the file system
    /// has none) and is `fsync`ed, so that the new length survives a crash; raw block devices
    /// cannot grow ([`Error::Unsupported`]). A simulated device's new space reads zero and is
    /// durable at once. [`BlockDevice::len`] returns the new length once this returns.
    pub fn grow(&self, new_len: u64) -> Result<()> {
        self.grow_with(new_len, None)
    }

    /// At least `new_len` bytes (a length already reached is a no-op, so threads that grow
    /// concurrently do not fail): [`BlockDevice::grow`], then zeros written over the new space
    /// of a file, so that later writes there overwrite written blocks. Space that is only
    /// allocated is "unwritten" to ext4 and XFS, and the `fdatasync` after the first write
    /// into each such extent also commits its conversion to written: a 16 KiB O_DIRECT write
    /// and `fdatasync` took 126 µs into allocated space against 79 µs into zero-filled space
    /// on this project's test disk (docs/BENCHMARKS.md, Figure 7 (e)). For logs that sync
    /// small appends (the WAL); the zeros cost one sequential write of the new space, and are
    /// skipped where [`BlockDevice::zero_fill_pays`] is false. The zeros go in 1 MiB writes:
    /// for a caller that waits for them (a commit that needs the room now).
    pub fn grow_written(&self, new_len: u64) -> Result<()> {
        self.growing_in_front.fetch_add(1, Ordering::AcqRel);
        let grown = self.grow_with(new_len, Some(ZERO_FILL_CHUNK));
        self.growing_in_front.fetch_sub(1, Ordering::AcqRel);
        grown
    }

    /// [`BlockDevice::grow_written`] for a thread that grows ahead of need while others write
    /// the device: the zeros go in [`ZERO_FILL_CHUNK_BEHIND`] writes, one at a time, so that
    /// a foreground write queued behind one waits for 64 KiB, not 1 MiB. Once a caller of
    /// `grow_written` waits for the growth lock meanwhile, the rest of the step goes in 1 MiB
    /// writes: that caller waits for all of it, and small writes would only lengthen its wait.
    /// Measured behind `tierbase serve` on the test disk (docs/BENCHMARKS.md, Figure 27): the
    /// log's growth ahead in 1 MiB writes put unpipelined durable SETs' p99 at about 2×
    /// redis-server's, in 64 KiB writes at 1.1×, with the same throughput.
    pub fn grow_written_behind(&self, new_len: u64) -> Result<()> {
        self.grow_with(new_len, Some(ZERO_FILL_CHUNK_BEHIND))
    }

    /// Whether zeros written ahead pay off here ([`BlockDevice::grow_written`]): a file on a
    /// disk file system. Not tmpfs or ramfs (no extents to convert: the zeros would only cost
    /// memory bandwidth), raw devices, simulated or in-memory devices.
    pub fn zero_fill_pays(&self) -> bool {
        self.file_fs == Some(super::FsKind::Disk)
    }

    /// Whether the device is a regular file on tmpfs or ramfs, whose writes never reach a
    /// disk. Asked of the open file: a raw device under `/dev` (a devtmpfs, whose path a
    /// `statfs` would report as tmpfs) is not.
    pub fn on_memory_fs(&self) -> bool {
        self.file_fs == Some(super::FsKind::Memory)
    }

    /// `zero_fill`: the chunk zeros are written in, or `None` for allocation only.
    fn grow_with(&self, new_len: u64, zero_fill: Option<usize>) -> Result<()> {
        let _serial = self.grow_lock.lock();
        let len = self.len();
        if zero_fill.is_some() && new_len <= len {
            return Ok(());
        }
        if new_len < len {
            return Err(Error::InvalidArgument(format!(
                "{}: cannot shrink a block device from {len} to {new_len} bytes",
                self.path.display()
            )));
        }
        if new_len == len {
            return Ok(());
        }
        if !new_len.is_multiple_of(self.block_size) {
            return Err(Error::Misaligned {
                offset: 0,
                len: new_len,
                alignment: self.block_size,
            });
        }
        match &self.backing {
            Backing::Sim(disk) => disk.grow(new_len)?,
            Backing::Memory(disk) => disk.grow(new_len)?,
            Backing::File(file) => {
                let meta = file
                    .metadata()
                    .map_err(|e| Error::io("stat", Some(&self.path), e))?;
                if meta.file_type().is_block_device() {
                    return Err(Error::Unsupported(format!(
                        "{}: a raw block device cannot grow",
                        self.path.display()
                    )));
                }
                let Ok(l) = libc::off_t::try_from(new_len) else {
                    return Err(Error::InvalidArgument(format!("size {new_len} too large")));
                };
                // `len` fits: it is at most `new_len`, which does.
                allocate(file, &self.path, len as libc::off_t, l)?;
                if let Some(chunk) = zero_fill.filter(|_| self.zero_fill_pays()) {
                    // The largest write either kind of growth makes (`chunk` is at most this).
                    let zeros = AlignedBuf::new(ZERO_FILL_CHUNK.min((new_len - len) as usize))?;
                    let mut at = len;
                    while at < new_len {
                        let step = if self.growing_in_front.load(Ordering::Acquire) > 0 {
                            zeros.len()
                        } else {
                            chunk
                        };
                        // At most `zeros.len()`: that is the whole step or 1 MiB.
                        let n = step.min((new_len - at) as usize);
                        file.write_all_at(&zeros[..n], at)
                            .map_err(|e| io_err("write", Some(&self.path), e))?;
                        self.counters.record_write(n as u64);
                        at += n as u64;
                    }
                }
                file.sync_all()
                    .map_err(|e| io_err("fsync", Some(&self.path), e))?;
            }
        }
        self.len.store(new_len, Ordering::Release);
        Ok(())
    }

    /// Takes an exclusive lock on the file (`flock`), so that no second handle — in this
    /// process or another — locks it while this one lives; that attempt fails with
    /// [`Error::Locked`] naming the holder. Released when the device is dropped. A no-op for
    /// simulated devices.
    pub fn lock_exclusive(&self) -> Result<()> {
        match &self.backing {
            Backing::File(file) => lock_file(file, &self.path, self.read_only),
            Backing::Sim(_) | Backing::Memory(_) => Ok(()),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Acquire)
    }

    /// Whether the device has zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `O_DIRECT` is in use.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Required alignment of offsets and lengths.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// The emulator, when a profile is emulated.
    pub fn emulator(&self) -> Option<&Emulator> {
        self.emulator.as_ref()
    }

    /// Counter snapshot.
    pub fn counters(&self) -> CounterSnapshot {
        self.counters.snapshot()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Facts for reports.
    pub fn info(&self) -> BlockInfo {
        BlockInfo {
            path: self.path.clone(),
            len: self.len(),
            direct_io: self.direct,
            engine: if self.rings.is_some() {
                IoEngineKind::IoUring
            } else {
                IoEngineKind::Threads
            },
            engine_note: self.engine_note.clone(),
            queue_depth: self.queue_depth,
            emulation: self
                .emulator
                .as_ref()
                .map_or_else(|| "none".to_string(), Emulator::label),
        }
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read_at(&self, offset: u64, buf: &mut AlignedBuf) -> Result<()> {
        self.submit(&mut [Io::Read { offset, buf }])
    }

    /// Writes `buf` at `offset` (durable after [`BlockDevice::sync`]).
    pub fn write_at(&self, offset: u64, buf: &AlignedBuf) -> Result<()> {
        self.submit(&mut [Io::Write { offset, buf }])
    }

    /// Makes every completed write durable (`fdatasync`; for a regular file on tmpfs or ramfs
    /// no system call: a completed write is already all the durability that medium has, see
    /// `file_fs`). Counted either way.
    pub fn sync(&self) -> Result<()> {
        match &self.backing {
            Backing::File(_) if self.on_memory_fs() => {}
            Backing::File(file) => file
                .sync_data()
                .map_err(|e| Error::io("fdatasync", Some(&self.path), e))?,
            Backing::Sim(disk) => disk.sync()?,
            Backing::Memory(_) => {}
        }
        self.counters.syncs.incr();
        Ok(())
    }

    fn validate(&self, io: &Io<'_>) -> Result<()> {
        let (offset, len) = (io.offset(), io.len() as u64);
        if offset % self.block_size != 0 || len % self.block_size != 0 || len == 0 {
            return Err(Error::Misaligned {
                offset,
                len,
                alignment: self.block_size,
            });
        }
        let size = self.len();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfRange { offset, len, size }),
        }
    }

    /// Issues every I/O in `ios` (up to the queue depth at once) and waits for all of them.
    ///
    /// All requests are validated before any is issued, so a misaligned or out-of-range
    /// request fails the whole batch without side effects (no I/O, counters unchanged). On an
    /// I/O error no further operations are issued, the ones in flight are still awaited, and
    /// the first error is returned; the counters then count every operation of the batch.
    /// Short transfers are resubmitted for the remainder. Several threads may call this at once.
    pub fn submit(&self, ios: &mut [Io<'_>]) -> Result<()> {
        for io in ios.iter() {
            self.validate(io)?;
        }
        if ios.is_empty() {
            return Ok(());
        }
        // The whole batch is issued at one virtual instant: its emulated makespan depends only
        // on the profile and the batch, not on how fast this thread walks the list.
        let emulated_end = self.emulator.as_ref().map(|e| {
            let now = now_ns();
            ios.iter()
                .map(|io| e.schedule_at(io.direction(), io.len() as u64, now).end_ns)
                .max()
                .unwrap_or(now)
        });
        let result = match (&self.backing, &self.rings) {
            (Backing::Sim(disk), _) => {
                self.enter_flight();
                let r = disk.submit(ios);
                self.leave_flight(1);
                r
            }
            (Backing::Memory(disk), _) => {
                self.enter_flight();
                let r = disk.submit(ios);
                self.leave_flight(1);
                r
            }
            // One operation alone goes straight to pread/pwrite: a ring round trip costs more
            // than it saves for a single I/O (and buffered writes, as on tmpfs, are punted to
            // io_uring's worker threads: ~10 µs more per write, measured with strace).
            (Backing::File(file), _) if ios.len() == 1 => {
                self.enter_flight();
                let r = self.blocking_io(file, &mut ios[0]);
                self.leave_flight(1);
                r
            }
            (Backing::File(file), Some(pool)) => {
                let ring = pool.lock().pop();
                let ring = match ring {
                    Some(r) => Ok(r),
                    None => IoUring::new(self.queue_depth.next_power_of_two())
                        .map_err(|e| Error::io("io_uring setup", Some(&self.path), e)),
                };
                match ring {
                    Ok(mut ring) => {
                        let lim = self.limits(ring.params().sq_entries() as usize);
                        let (result, reusable) = self.run_uring(file, &mut ring, ios, lim);
                        if reusable {
                            pool.lock().push(ring);
                        }
                        result
                    }
                    Err(e) => Err(e),
                }
            }
            (Backing::File(file), None) => self.run_threads(file, ios, self.limits(MAX_THREADS)),
        };
        if let (Some(e), Some(end)) = (&self.emulator, emulated_end) {
            e.wait_until(end);
        }
        for io in ios.iter() {
            let n = io.len() as u64;
            match io {
                Io::Read { .. } => {
                    self.counters.reads.incr();
                    self.counters.bytes_read.add(n);
                }
                Io::Write { .. } => {
                    self.counters.writes.incr();
                    self.counters.bytes_written.add(n);
                }
            }
        }
        result
    }

    /// In-flight limits for one batch on an engine that can hold `engine_max` at once.
    fn limits(&self, engine_max: usize) -> Limits {
        let total = (self.queue_depth as usize).min(engine_max).max(1);
        let (read, write) = self.emulator.as_ref().map_or((total, total), |e| {
            let p = e.profile();
            (p.k_r as usize, p.k_w as usize)
        });
        Limits {
            total,
            read: read.clamp(1, total),
            write: write.clamp(1, total),
        }
    }

    fn io_error(&self, source: std::io::Error) -> Error {
        io_err("block I/O", Some(&self.path), source)
    }

    fn enter_flight(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.counters.observe_in_flight(now);
    }

    fn leave_flight(&self, n: u64) {
        self.in_flight.fetch_sub(n, Ordering::Relaxed);
    }

    /// Runs a batch on `ring`. Returns the result and whether the ring may be reused (it may
    /// not if the kernel refused a submission and left entries queued).
    ///
    /// Invariant: this function does not return, and cannot unwind, while the kernel has
    /// consumed an entry whose completion it has not yet reaped.
    fn run_uring(
        &self,
        file: &File,
        ring: &mut IoUring,
        ios: &mut [Io<'_>],
        lim: Limits,
    ) -> (Result<()>, bool) {
        let _no_unwind = AbortOnUnwind;
        let n = ios.len();
        let fd = types::Fd(file.as_raw_fd());
        let dirs: Vec<Direction> = ios.iter().map(Io::direction).collect();
        let mut reads: VecDeque<usize> = (0..n).filter(|&i| dirs[i] == Direction::Read).collect();
        let mut writes: VecDeque<usize> = (0..n).filter(|&i| dirs[i] == Direction::Write).collect();
        let mut progress = vec![0usize; n]; // bytes transferred so far, per operation
        let mut retries = vec![0u32; n];
        let mut out = (0usize, 0usize); // (reads, writes) pushed and not yet completed
        let mut unconsumed = 0usize; // pushed to the SQ, not yet consumed by the kernel
        let mut first_err: Option<Error> = None;
        loop {
            while first_err.is_none() {
                let Some((idx, dir)) = pick_next(&mut reads, &mut writes, out, lim) else {
                    break;
                };
                let (Some(io), Some(&done)) = (ios.get_mut(idx), progress.get(idx)) else {
                    break;
                };
                let len = (io.len() - done).min(MAX_RW) as u32;
                let offset = io.offset() + done as u64;
                let entry = match io {
                    // SAFETY: `done < buf.len()`, so the pointer stays inside the buffer.
                    Io::Read { buf, .. } => unsafe {
                        opcode::Read::new(fd, buf.as_mut_ptr().add(done), len)
                            .offset(offset)
                            .build()
                    },
                    // SAFETY: as above.
                    Io::Write { buf, .. } => unsafe {
                        opcode::Write::new(fd, buf.as_ptr().add(done), len)
                            .offset(offset)
                            .build()
                    },
                }
                .user_data(idx as u64);
                // SAFETY: the entry points at `len` bytes of a buffer that is borrowed
                // (mutably for reads) for the whole of `submit`, and this function neither
                // returns nor unwinds until every entry the kernel consumed has completed (on
                // a failed submit, entries the kernel never consumed die with the ring).
                let pushed = unsafe { ring.submission().push(&entry) };
                if pushed.is_err() {
                    match dir {
                        Direction::Read => reads.push_front(idx),
                        Direction::Write => writes.push_front(idx),
                    }
                    break;
                }
                unconsumed += 1;
                match dir {
                    Direction::Read => out.0 += 1,
                    Direction::Write => out.1 += 1,
                }
                self.enter_flight();
            }
            if out.0 + out.1 == 0 {
                // Everything completed (or an error stopped issuing and nothing is left).
                break;
            }
            match ring.submit_and_wait(1) {
                Ok(consumed) => unconsumed -= consumed.min(unconsumed),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // io_uring_enter reports an error only when it consumed no entry, so the
                    // `unconsumed` ones were never seen by the kernel. Reap everything it did
                    // take (without submitting more), then discard the ring.
                    let err = self.io_error(e);
                    let mut in_kernel = out.0 + out.1 - unconsumed;
                    while in_kernel > 0 {
                        // SAFETY: to_submit = 0 never hands the queued entries to the kernel;
                        // GETEVENTS with min_complete = 1 only waits for completions.
                        let waited = unsafe {
                            ring.submitter().enter::<libc::sigset_t>(
                                0,
                                1,
                                io_uring::EnterFlags::GETEVENTS.bits(),
                                None,
                            )
                        };
                        if waited.is_err() {
                            // Returning now would be unsound; keep waiting, politely.
                            std::thread::yield_now();
                        }
                        let reaped = ring.completion().count();
                        in_kernel = in_kernel.saturating_sub(reaped);
                        self.leave_flight(reaped as u64);
                    }
                    self.leave_flight(unconsumed as u64);
                    return (Err(first_err.unwrap_or(err)), false);
                }
            }
            for cqe in ring.completion() {
                self.leave_flight(1);
                let idx = cqe.user_data() as usize;
                let res = cqe.result();
                let (Some(&dir), Some(io)) = (dirs.get(idx), ios.get(idx)) else {
                    continue; // cannot happen: we only submit indices of this batch
                };
                match dir {
                    Direction::Read => out.0 -= 1,
                    Direction::Write => out.1 -= 1,
                }
                let requeue = |q: &mut VecDeque<usize>| q.push_front(idx);
                let queue = match dir {
                    Direction::Read => &mut reads,
                    Direction::Write => &mut writes,
                };
                if res < 0 {
                    let retry = matches!(-res, libc::EINTR | libc::EAGAIN)
                        && retries.get(idx).is_some_and(|&r| r < MAX_RETRIES);
                    if retry {
                        if let Some(r) = retries.get_mut(idx) {
                            *r += 1;
                        }
                        requeue(queue);
                    } else {
                        first_err.get_or_insert_with(|| {
                            self.io_error(std::io::Error::from_raw_os_error(-res))
                        });
                    }
                    continue;
                }
                let Some(done) = progress.get_mut(idx) else {
                    continue;
                };
                *done += res as usize;
                if *done >= io.len() {
                    continue;
                }
                if res == 0 {
                    let expected = io.len();
                    let got = *done;
                    first_err.get_or_insert_with(|| {
                        self.io_error(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            format!("short transfer: {got} of {expected} bytes"),
                        ))
                    });
                } else {
                    requeue(queue);
                }
            }
        }
        if first_err.is_none() && !(reads.is_empty() && writes.is_empty()) {
            // Only reachable if the submission queue refused an entry with nothing in flight.
            first_err = Some(Error::Unsupported(
                "io_uring submission queue refused an entry".into(),
            ));
        }
        (first_err.map_or(Ok(()), Err), true)
    }

    fn run_threads(&self, file: &File, ios: &mut [Io<'_>], lim: Limits) -> Result<()> {
        struct Sched {
            reads: VecDeque<usize>,
            writes: VecDeque<usize>,
            out: (usize, usize),
            failed: Option<Error>,
        }
        struct Release<'s> {
            dev: &'s BlockDevice,
            sched: &'s Mutex<Sched>,
            wake: &'s Condvar,
            dir: Direction,
            result: Option<Result<()>>,
        }
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                self.dev.leave_flight(1);
                let mut s = self.sched.lock();
                match self.dir {
                    Direction::Read => s.out.0 -= 1,
                    Direction::Write => s.out.1 -= 1,
                }
                match self.result.take() {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        s.failed.get_or_insert(e);
                    }
                    None => {
                        s.failed.get_or_insert_with(|| {
                            Error::Unsupported("I/O worker panicked".into())
                        });
                    }
                }
                self.wake.notify_all();
            }
        }
        let n = ios.len();
        let dirs: Vec<Direction> = ios.iter().map(Io::direction).collect();
        // No more threads than operations may be in flight at once.
        let has = |d: Direction| dirs.contains(&d);
        let cap = if has(Direction::Read) { lim.read } else { 0 }
            + if has(Direction::Write) { lim.write } else { 0 };
        let workers = n.min(lim.total).min(cap).max(1);
        let sched = Mutex::new(Sched {
            reads: (0..n).filter(|&i| dirs[i] == Direction::Read).collect(),
            writes: (0..n).filter(|&i| dirs[i] == Direction::Write).collect(),
            out: (0, 0),
            failed: None,
        });
        let wake = Condvar::new();
        let slots: Vec<Mutex<&mut Io<'_>>> = ios.iter_mut().map(Mutex::new).collect();
        let work = || {
            loop {
                let (idx, dir) = {
                    let mut s = sched.lock();
                    loop {
                        if s.failed.is_some() || (s.reads.is_empty() && s.writes.is_empty()) {
                            return;
                        }
                        let out = s.out;
                        let st = &mut *s;
                        if let Some(next) = pick_next(&mut st.reads, &mut st.writes, out, lim) {
                            match next.1 {
                                Direction::Read => s.out.0 += 1,
                                Direction::Write => s.out.1 += 1,
                            }
                            break next;
                        }
                        // A direction is at its limit: some operation is in flight and will
                        // wake us when it completes.
                        wake.wait(&mut s);
                    }
                };
                self.enter_flight();
                // Releases the operation's in-flight slot however the I/O ends — even by a
                // panic, which would otherwise leave capped workers waiting forever.
                let mut done = Release {
                    dev: self,
                    sched: &sched,
                    wake: &wake,
                    dir,
                    result: None,
                };
                done.result = Some(match slots.get(idx) {
                    Some(slot) => self.blocking_io(file, &mut slot.lock()),
                    None => Ok(()),
                });
            }
        };
        if workers == 1 {
            work();
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..workers).map(|_| s.spawn(work)).collect();
                for h in handles {
                    if h.join().is_err() {
                        sched.lock().failed.get_or_insert_with(|| {
                            Error::Unsupported("I/O worker panicked".into())
                        });
                    }
                }
            });
        }
        sched.into_inner().failed.map_or(Ok(()), Err)
    }

    fn blocking_io(&self, file: &File, io: &mut Io<'_>) -> Result<()> {
        match io {
            Io::Read { offset, buf } => file.read_exact_at(buf, *offset),
            Io::Write { offset, buf } => file.write_all_at(buf, *offset),
        }
        .map_err(|e| self.io_error(e))
    }
}

fn check_options(opts: &BlockOptions) -> Result<()> {
    if opts.queue_depth == 0 {
        return Err(Error::InvalidArgument(
            "queue depth must be at least 1".into(),
        ));
    }
    if !opts.block_size.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "block size {} is not a power of two",
            opts.block_size
        )));
    }
    if let Some(p) = &opts.emulate {
        p.validate()?;
    }
    Ok(())
}

/// Largest zero buffer [`BlockDevice::grow_written`] writes at once.
const ZERO_FILL_CHUNK: usize = 1 << 20;
/// Largest zero buffer [`BlockDevice::grow_written_behind`] writes at once: a foreground
/// write that queues behind it waits for one 64 KiB write (0.69 ms on average on the test
/// disk while commits ran, queueing included), not a 1 MiB one (4.3 ms).
const ZERO_FILL_CHUNK_BEHIND: usize = 64 << 10;

/// Allocates bytes `from..len` of a file whose first `from` bytes are allocated already (a new
/// one: `from` 0, or one that grows): `fallocate`, or a sparse `set_len` where the file system
/// has no `fallocate`. Only the new range: tmpfs walks every page of the range it is given.
fn allocate(file: &File, path: &Path, from: libc::off_t, len: libc::off_t) -> Result<()> {
    let err = loop {
        // SAFETY: fallocate on our own descriptor with integer arguments.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, from, len - from) };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            break err;
        }
    };
    let full = || Error::DeviceFull {
        path: Some(path.to_path_buf()),
        requested: (len - from) as u64,
    };
    match err.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EFBIG) => Err(full()),
        Some(libc::EOPNOTSUPP) => file
            .set_len(len as u64)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EFBIG) => full(),
                _ => io_err("truncate", Some(path), e),
            }),
        _ => Err(io_err("fallocate", Some(path), err)),
    }
}

fn device_len(file: &File, path: &Path) -> Result<u64> {
    let meta = file
        .metadata()
        .map_err(|e| Error::io("stat", Some(path), e))?;
    if !meta.file_type().is_block_device() {
        return Ok(meta.len());
    }
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to `size`.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) };
    if rc != 0 {
        return Err(Error::io(
            "ioctl BLKGETSIZE64",
            Some(path),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queues(dirs: &[Direction]) -> (VecDeque<usize>, VecDeque<usize>) {
        let pick = |d: Direction| (0..dirs.len()).filter(|&i| dirs[i] == d).collect();
        (pick(Direction::Read), pick(Direction::Write))
    }

    #[test]
    fn pick_next_keeps_order_and_per_direction_limits() {
        use Direction::{Read as R, Write as W};
        let lim = Limits {
            total: 4,
            read: 3,
            write: 1,
        };
        let (mut r, mut w) = queues(&[W, W, R, R, R, R, W]);
        let mut out = (0, 0);
        let mut issued = Vec::new();
        while let Some((i, d)) = pick_next(&mut r, &mut w, out, lim) {
            match d {
                R => out.0 += 1,
                W => out.1 += 1,
            }
            issued.push(i);
        }
        // Write 0 (the one write allowed), then reads 2, 3, 4 skip past the waiting write 1.
        assert_eq!(issued, vec![0, 2, 3, 4]);
        assert_eq!(out, (3, 1));
        // One write completes: write 1 is next, ahead of read 5 (which is at its limit anyway).
        out.1 -= 1;
        assert_eq!(pick_next(&mut r, &mut w, out, lim), Some((1, W)));
        out.1 += 1;
        assert_eq!(pick_next(&mut r, &mut w, out, lim), None, "total limit");
        out.0 -= 1;
        assert_eq!(pick_next(&mut r, &mut w, out, lim), Some((5, R)));
    }

    /// A regular file on tmpfs skips the `fdatasync` (nothing is below the page cache), and
    /// still counts the sync and keeps what was written. A device node never does, though
    /// devtmpfs reports tmpfs's magic; nor does a file on a disk file system.
    #[test]
    fn only_a_regular_file_on_tmpfs_skips_its_sync() {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() && super::super::fs_kind(shm) == super::super::FsKind::Memory {
            let dir = tempfile::tempdir_in(shm).unwrap();
            let path = dir.path().join("dev");
            let opts = BlockOptions::default();
            let dev = BlockDevice::create(&path, 8192, &opts).unwrap();
            assert_eq!(dev.file_fs, Some(super::super::FsKind::Memory));
            assert!(dev.on_memory_fs());
            assert!(!dev.zero_fill_pays());
            let mut buf = AlignedBuf::new(4096).unwrap();
            buf.fill(0xa5);
            dev.write_at(4096, &buf).unwrap();
            dev.sync().unwrap();
            assert_eq!(dev.counters().syncs, 1);
            drop(dev);
            let dev = BlockDevice::open(&path, &opts).unwrap();
            let mut back = AlignedBuf::new(4096).unwrap();
            dev.read_at(4096, &mut back).unwrap();
            assert_eq!(&back[..], &buf[..]);
        } else {
            eprintln!("no tmpfs at /dev/shm: its half skipped");
        }
        // A character device on devtmpfs (whose magic is tmpfs's) is not a regular file.
        if let Ok(null) = std::fs::File::open("/dev/null") {
            assert_eq!(super::super::regular_file_fs(&null), None);
        }
        let dir = tempfile::tempdir().unwrap();
        if super::super::fs_kind(dir.path()) == super::super::FsKind::Disk {
            let dev = BlockDevice::create(&dir.path().join("dev"), 8192, &BlockOptions::default())
                .unwrap();
            assert!(
                dev.zero_fill_pays(),
                "a file on a disk file system keeps its zeros"
            );
            assert!(!dev.on_memory_fs());
            let file = std::fs::File::create(dir.path().join("f")).unwrap();
            assert_eq!(
                super::super::regular_file_fs(&file),
                Some(super::super::FsKind::Disk)
            );
        }
    }

    /// Growth ahead of need writes its zeros in small writes, growth a caller waits for in
    /// large ones; both leave zeros and the new length, and both count their writes. Skipped
    /// where the temporary directory is not on a disk file system (no zeros are written).
    #[test]
    fn growth_behind_writes_its_zeros_in_small_writes() {
        let dir = tempfile::tempdir().unwrap();
        if super::super::fs_kind(dir.path()) != super::super::FsKind::Disk {
            eprintln!("the temporary directory is not on a disk file system: skipped");
            return;
        }
        let path = dir.path().join("dev");
        let dev = BlockDevice::create(&path, 8192, &BlockOptions::default()).unwrap();
        let step = 2 * ZERO_FILL_CHUNK as u64;
        let before = dev.counters();
        dev.grow_written(8192 + step).unwrap();
        let foreground = dev.counters();
        assert_eq!(foreground.bytes_written - before.bytes_written, step);
        assert_eq!(foreground.writes - before.writes, 2, "1 MiB writes");
        dev.grow_written_behind(8192 + 2 * step).unwrap();
        let behind = dev.counters();
        assert_eq!(behind.bytes_written - foreground.bytes_written, step);
        assert_eq!(
            behind.writes - foreground.writes,
            step / ZERO_FILL_CHUNK_BEHIND as u64,
            "64 KiB writes"
        );
        assert_eq!(dev.len(), 8192 + 2 * step);
        let mut back = AlignedBuf::new(ZERO_FILL_CHUNK).unwrap();
        back.fill(0xa5);
        dev.read_at(8192 + step + ZERO_FILL_CHUNK as u64, &mut back)
            .unwrap();
        assert!(back.iter().all(|&b| b == 0));
        // A caller of `grow_written` waiting meanwhile: the rest goes in 1 MiB writes.
        dev.growing_in_front.fetch_add(1, Ordering::AcqRel);
        dev.grow_written_behind(8192 + 3 * step).unwrap();
        dev.growing_in_front.fetch_sub(1, Ordering::AcqRel);
        let hurried = dev.counters();
        assert_eq!(hurried.bytes_written - behind.bytes_written, step);
        assert_eq!(
            hurried.writes - behind.writes,
            2,
            "1 MiB writes once one waits"
        );
        assert_eq!(dev.len(), 8192 + 3 * step);
    }
}
