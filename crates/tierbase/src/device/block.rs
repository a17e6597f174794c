//! Block devices: files or raw devices accessed with direct I/O and batched asynchronous I/O.
//!
//! Owns: opening with `O_DIRECT` (falling back to buffered I/O where the file system refuses
//! it), alignment and range checks, submitting a batch of k reads/writes and waiting for all of
//! them through io_uring (or a thread-pool fallback), `fdatasync`, counters and emulation.
//! Must not touch: what the blocks mean (pages, logs and their formats belong to stores).
//!
//! io_uring submission is the one place where the kernel holds raw pointers into our buffers;
//! [`BlockDevice::submit`] never returns while any submitted operation is still in flight, which
//! is what makes the safe `&mut AlignedBuf` API sound.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use io_uring::{IoUring, opcode, types};
use parking_lot::Mutex;
use serde::Serialize;

use super::aligned::AlignedBuf;
use super::counters::{CounterSnapshot, DeviceCounters};
use super::emulate::{Direction, Emulator};
use super::profile::DeviceProfile;
use crate::error::{Error, Result};

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
    /// Most I/Os in flight at once per batch (io_uring ring size; threads in the fallback).
    pub queue_depth: u32,
    /// Required alignment of offsets and lengths (the logical block size). Default 4096.
    pub block_size: u64,
    /// Make the device behave like this profile.
    pub emulate: Option<DeviceProfile>,
}

impl Default for BlockOptions {
    fn default() -> Self {
        BlockOptions {
            direct: DirectIo::Auto,
            engine: IoEngineKind::Auto,
            queue_depth: 64,
            block_size: 4096,
            emulate: None,
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

/// A block device or file. See the module docs.
pub struct BlockDevice {
    file: File,
    path: PathBuf,
    len: u64,
    direct: bool,
    block_size: u64,
    queue_depth: u32,
    rings: Option<Mutex<Vec<IoUring>>>,
    engine_note: Option<String>,
    counters: DeviceCounters,
    emulator: Option<Emulator>,
}

impl std::fmt::Debug for BlockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockDevice")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("direct", &self.direct)
            .field("io_uring", &self.rings.is_some())
            .finish()
    }
}

impl BlockDevice {
    /// Creates a file of `len` bytes (must not exist; space allocated up front) and opens it.
    pub fn create(path: &Path, len: u64, opts: &BlockOptions) -> Result<Self> {
        if len == 0 || !len.is_multiple_of(opts.block_size.max(1)) {
            return Err(Error::Misaligned {
                offset: 0,
                len,
                alignment: opts.block_size,
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io("create", Some(path), e))?;
        let Ok(l) = libc::off_t::try_from(len) else {
            return Err(Error::InvalidArgument(format!("size {len} too large")));
        };
        // SAFETY: fallocate on our own descriptor with integer arguments.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, l) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            let full = matches!(err.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EFBIG));
            let fallback = err.raw_os_error() == Some(libc::EOPNOTSUPP);
            if fallback {
                file.set_len(len)
                    .map_err(|e| Error::io("truncate", Some(path), e))?;
            } else {
                drop(file);
                let _ = std::fs::remove_file(path);
                if full {
                    return Err(Error::DeviceFull {
                        path: Some(path.to_path_buf()),
                        requested: len,
                    });
                }
                return Err(Error::io("fallocate", Some(path), err));
            }
        }
        file.sync_all()
            .map_err(|e| Error::io("fsync", Some(path), e))?;
        drop(file);
        Self::open(path, opts)
    }

    /// Opens an existing file or block device.
    pub fn open(path: &Path, opts: &BlockOptions) -> Result<Self> {
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
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(true);
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
        let emulator = opts.emulate.as_ref().map(Emulator::new).transpose()?;
        Ok(BlockDevice {
            file,
            path: path.to_path_buf(),
            len,
            direct,
            block_size: opts.block_size,
            queue_depth: opts.queue_depth,
            rings,
            engine_note,
            counters: DeviceCounters::default(),
            emulator,
        })
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the device has zero bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
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

    /// Facts for reports.
    pub fn info(&self) -> BlockInfo {
        BlockInfo {
            path: self.path.clone(),
            len: self.len,
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

    /// Makes every completed write durable (`fdatasync`).
    pub fn sync(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("fdatasync", Some(&self.path), e))?;
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
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Issues every I/O in `ios` (up to the queue depth at once) and waits for all of them.
    ///
    /// All requests are validated before any is issued, so a misaligned or out-of-range
    /// request fails the whole batch without side effects. On an I/O error the remaining
    /// in-flight operations are still awaited, and the first error is returned.
    pub fn submit(&self, ios: &mut [Io<'_>]) -> Result<()> {
        for io in ios.iter() {
            self.validate(io)?;
        }
        if ios.is_empty() {
            return Ok(());
        }
        let emulated_end = self.emulator.as_ref().map(|e| {
            ios.iter()
                .map(|io| e.schedule(io.direction(), io.len() as u64).end_ns)
                .max()
                .unwrap_or(0)
        });
        let result = match &self.rings {
            Some(pool) => {
                let ring = pool.lock().pop();
                let mut ring = match ring {
                    Some(r) => r,
                    None => IoUring::new(self.queue_depth.next_power_of_two())
                        .map_err(|e| Error::io("io_uring setup", Some(&self.path), e))?,
                };
                let (result, reusable) = self.run_uring(&mut ring, ios);
                if reusable {
                    pool.lock().push(ring);
                }
                result
            }
            None => self.run_threads(ios),
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

    /// Runs a batch on `ring`. Returns the result and whether the ring may be reused (it may
    /// not if the kernel refused a submission and left entries queued).
    fn run_uring(&self, ring: &mut IoUring, ios: &mut [Io<'_>]) -> (Result<()>, bool) {
        let n = ios.len();
        let depth = (self.queue_depth as usize)
            .min(ring.params().sq_entries() as usize)
            .max(1);
        let fd = types::Fd(self.file.as_raw_fd());
        let mut next = 0usize;
        let mut queued = 0usize; // pushed to the SQ, not yet consumed by the kernel
        let mut in_flight = 0usize; // consumed by the kernel, not yet completed
        let mut first_err: Option<Error> = None;
        let mut done = 0usize;
        while done < n {
            while first_err.is_none() && next < n && queued + in_flight < depth {
                let Some(io) = ios.get_mut(next) else { break };
                let entry = match io {
                    Io::Read { offset, buf } => {
                        opcode::Read::new(fd, buf.as_mut_ptr(), buf.len() as u32)
                            .offset(*offset)
                            .build()
                    }
                    Io::Write { offset, buf } => {
                        opcode::Write::new(fd, buf.as_ptr(), buf.len() as u32)
                            .offset(*offset)
                            .build()
                    }
                }
                .user_data(next as u64);
                // SAFETY: the buffer behind the entry is borrowed mutably (reads) or shared
                // (writes) for the whole of `submit`, and this function does not return until
                // every consumed entry has completed (or, on a failed submit, the ring is
                // discarded with unconsumed entries never handed to the kernel).
                let pushed = unsafe { ring.submission().push(&entry) };
                if pushed.is_err() {
                    break;
                }
                next += 1;
                queued += 1;
            }
            if queued + in_flight == 0 {
                // Nothing outstanding and nothing more will be issued (error stop).
                break;
            }
            self.counters.observe_in_flight((queued + in_flight) as u64);
            match ring.submit_and_wait(1) {
                Ok(consumed) => {
                    let consumed = consumed.min(queued);
                    queued -= consumed;
                    in_flight += consumed;
                }
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // The kernel took none of the queued entries. Wait out what it already has
                    // (without submitting the rest), then discard the ring.
                    let err = Error::io("io_uring submit", Some(&self.path), e);
                    while in_flight > 0 {
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
                            std::thread::yield_now();
                        }
                        in_flight = in_flight.saturating_sub(ring.completion().count());
                    }
                    return (Err(first_err.unwrap_or(err)), false);
                }
            }
            for cqe in ring.completion() {
                in_flight = in_flight.saturating_sub(1);
                done += 1;
                let idx = cqe.user_data() as usize;
                let res = cqe.result();
                let expected = ios.get(idx).map_or(0, Io::len);
                if res < 0 {
                    first_err.get_or_insert_with(|| {
                        Error::io(
                            "block I/O",
                            Some(&self.path),
                            std::io::Error::from_raw_os_error(-res),
                        )
                    });
                } else if res as usize != expected {
                    first_err.get_or_insert_with(|| {
                        Error::io(
                            "block I/O",
                            Some(&self.path),
                            std::io::Error::new(
                                std::io::ErrorKind::UnexpectedEof,
                                format!("short transfer: {res} of {expected} bytes"),
                            ),
                        )
                    });
                }
            }
            if first_err.is_some() && queued == 0 && in_flight == 0 {
                break;
            }
        }
        (first_err.map_or(Ok(()), Err), true)
    }

    fn run_threads(&self, ios: &mut [Io<'_>]) -> Result<()> {
        let workers = ios.len().min(self.queue_depth as usize).clamp(1, 16);
        self.counters.observe_in_flight(workers as u64);
        if workers == 1 {
            return ios.iter_mut().try_for_each(|io| self.blocking_io(io));
        }
        let chunk = ios.len().div_ceil(workers);
        std::thread::scope(|s| {
            let handles: Vec<_> = ios
                .chunks_mut(chunk)
                .map(|part| {
                    s.spawn(move || part.iter_mut().try_for_each(|io| self.blocking_io(io)))
                })
                .collect();
            let mut first = Ok(());
            for h in handles {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err(Error::Unsupported("I/O worker panicked".into())));
                if first.is_ok() {
                    first = r;
                }
            }
            first
        })
    }

    fn blocking_io(&self, io: &mut Io<'_>) -> Result<()> {
        match io {
            Io::Read { offset, buf } => self.file.read_exact_at(buf, *offset),
            Io::Write { offset, buf } => self.file.write_all_at(buf, *offset),
        }
        .map_err(|e| Error::io("block I/O", Some(&self.path), e))
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
