//! The write-ahead log: framed, checksummed records on block devices or in persistent
//! memory, with group commit, generations for truncation, and replay at restart.
//!
//! Owns: the log's byte format (docs/FORMAT-wal.md), log sequence numbers (LSNs: byte
//! positions in one endless log), appending frames, making them durable for every committer
//! waiting with one write and one `fdatasync` (a file on a block device) or one persist of the
//! new cache lines, no sync (a [`PmemRegion`]: the log on NVM), through the engine's
//! [`GroupSync`], switching to a new generation at a checkpoint, and reading the frames back
//! after a crash. Must not touch: what a frame's payload means (the store that logs decides),
//! pages, or when to checkpoint.
//!
//! Two log files alternate. Generation `g` lives in file `g % 2`; its header block names `g`
//! and the LSN its first frame has. A checkpoint switches to `g + 1` (the other file) and,
//! once every page change before the switch is on media, declares `g + 1` the start of redo,
//! which frees file `g % 2` for generation `g + 2`. Replay reads generation `g` frame by frame
//! until a frame is missing, torn (checksum) or of another generation, then continues in the
//! other file if that holds generation `g + 1` starting exactly there.
//!
//! Tail blocks are rewritten as the log grows: a group commit writes from the block holding
//! the written end (see [`Wal::write_out`]). An unwritten tail is also written out, without a
//! sync, once it holds half its limit, by the log's write-behind thread
//! ([`Wal::spawn_write_behind`]; the appender does it only at the full limit), so that DRAM
//! stays bounded under a durability level nobody waits on. A torn rewrite cannot hurt frames
//! already durable because the rewrite carries the same bytes for them, and media tear at
//! sector granularity (512 B, the unit disks write atomically), never inside a sector.
//!
//! On persistent memory the same bytes sit at the same offsets of the region's data area, but
//! an append stores its frame straight into the mapping and a commit persists the lines from
//! the durable end to the appended end (flush, one fence): nothing is rewritten, and a torn
//! persist leaves a frame whose checksum fails, which ends replay as a torn block does.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Duration;

use parking_lot::Mutex;

use crate::device::{AlignedBuf, BlockDevice, Counter, GroupSync, PmemRegion};
use crate::error::{Error, Result};
use crate::sync::Background;

/// Bytes of a frame's header.
pub const FRAME_HEADER: u64 = 24;
/// Log block size: header block and the alignment of every write.
const BLOCK: u64 = 4096;
const MAGIC: &[u8; 8] = b"TBWAL001";
/// Where a generation header holds its store's id (then its check, to byte 40).
const OWNER_AT: usize = 28;
/// Largest payload of one frame.
pub const MAX_FRAME: usize = 1 << 30;

/// Where replay ended and the log continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEnd {
    /// Generation of the last frame read.
    pub generation: u32,
    /// LSN at which that generation starts.
    pub generation_start: u64,
    /// LSN after the last complete frame.
    pub lsn: u64,
    /// Frames of the last generation that pass their check beyond the end: replay stopped at
    /// a damaged frame, not at the log's end.
    pub damage: Option<LogDamage>,
}

/// Valid frames found after the frame that ended replay (see [`LogEnd::damage`]). Replay
/// cannot tell media damage (the frames after it were acknowledged, and are lost) from a
/// power loss that tore one block of a write whose later blocks reached the media (they were
/// not acknowledged): it stops at the damaged frame either way, as RocksDB's and PostgreSQL's
/// default recovery do, and says so here so that the store can report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogDamage {
    /// LSN of the frame that fails its check (where replay stopped).
    pub lsn: u64,
    /// Frames after it that pass their check.
    pub frames_after: u64,
    /// LSN after the last of them.
    pub last_lsn: u64,
}

impl std::fmt::Display for LogDamage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the log frame at LSN {} fails its check, and {} valid frame{} follow{} it up to \
             LSN {}: replay stopped there, so if those were acknowledged writes they are lost \
             (media damage; a power loss during a log write can also leave this)",
            self.lsn,
            self.frames_after,
            if self.frames_after == 1 { "" } else { "s" },
            if self.frames_after == 1 { "s" } else { "" },
            self.last_lsn
        )
    }
}

struct Tail {
    generation: u32,
    /// LSN at the first byte after the generation's header block.
    gen_start: u64,
    /// Bytes from `buf_lsn` to the appended end (a log file's unwritten tail; always empty
    /// on persistent memory, where frames go straight to the region).
    buf: TailBuf,
    buf_lsn: u64,
}

/// A log file's unwritten tail: an aligned buffer, so that a write-out hands it to the device
/// as it is (`O_DIRECT` needs alignment) and swaps in another instead of copying it while
/// appenders wait.
#[derive(Default)]
struct TailBuf {
    /// `None` until the first append.
    bytes: Option<AlignedBuf>,
    /// Bytes of `bytes` that hold frames.
    filled: usize,
}

impl TailBuf {
    fn len(&self) -> usize {
        self.filled
    }

    fn capacity(&self) -> usize {
        self.bytes.as_ref().map_or(0, AlignedBuf::capacity)
    }

    fn as_slice(&self) -> &[u8] {
        self.bytes.as_ref().map_or(&[], |b| &b[..self.filled])
    }

    /// Appends `parts` and `pad` zero bytes, growing to exactly what is needed (at least
    /// `least`) when they do not fit: a doubling buffer would hold up to twice what the limit
    /// allows. Nothing changes if the allocation fails.
    fn push(&mut self, parts: [&[u8]; 2], pad: usize, least: usize) -> Result<()> {
        let need = self.filled + parts[0].len() + parts[1].len() + pad;
        if need > self.capacity() {
            let mut grown = AlignedBuf::new(need.max(least).next_multiple_of(BLOCK as usize))?;
            grown[..self.filled].copy_from_slice(self.as_slice());
            self.bytes = Some(grown);
        }
        let bytes = self.bytes.as_mut().expect("allocated above");
        let mut at = self.filled;
        for part in parts {
            bytes[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        bytes[at..need].fill(0);
        self.filled = need;
        Ok(())
    }

    fn clear(&mut self) {
        self.filled = 0;
    }
}

/// Log counters.
#[derive(Debug, Default)]
pub struct WalCounters {
    /// Frames appended.
    pub frames: Counter,
    /// Payload bytes appended.
    pub bytes: Counter,
    /// Syncs of the log (a file on a block device: an `fdatasync`, none on tmpfs or ramfs).
    pub syncs: Counter,
    /// Persists of the log's new lines (the log on persistent memory).
    pub persists: Counter,
    /// Bytes written to the log files (including rewritten tail blocks).
    pub bytes_written: Counter,
    /// Tails written out (unsynced) by the write-behind thread ([`Wal::spawn_write_behind`])
    /// rather than by an appender or a commit.
    pub writes_behind: Counter,
}

/// The write-ahead log. See the module docs.
pub struct Wal {
    files: [LogFile; 2],
    tail: Mutex<Tail>,
    group: GroupSync,
    appended: AtomicU64,
    durable: AtomicU64,
    /// LSN up to which frames are written to the log file (synced or not; at least
    /// `durable`). A tail that reaches its limit is written out without a sync.
    written: AtomicU64,
    /// `appended` when [`Wal::prepare_ahead`] last ran.
    prepared_at: AtomicU64,
    /// Unwritten tail bytes at which an append writes the tail out (see
    /// [`Wal::with_tail_limit`]).
    tail_limit: usize,
    /// The buffer the tail continues in after the next write-out (the one written out last),
    /// kept between write-outs: no allocation per commit. Its lock is taken before the tail's
    /// and held through the write, which orders overlapping write-outs (see
    /// [`Wal::write_out`]).
    spare: Mutex<Option<AlignedBuf>>,
    /// The thread that writes tails out behind the appenders ([`Wal::spawn_write_behind`]).
    write_behind: OnceLock<Thread>,
    /// An appender asked the write-behind thread for a write-out it has not started yet.
    write_behind_asked: AtomicBool,
    /// A write or sync of the log failed ([`Wal::fail`]): later write-outs and appends fail.
    broken: AtomicBool,
    /// The id of the store the log belongs to, written into every generation's header
    /// ([`Wal::owned_by`]; 0: none).
    owner: u64,
    /// Counters.
    pub counters: WalCounters,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("appended", &self.appended.load(Ordering::Relaxed))
            .field("durable", &self.durable.load(Ordering::Relaxed))
            .finish()
    }
}

fn crc(bytes: &[u8]) -> u32 {
    crate::device::cpu::crc32c_append(0, bytes)
}

/// Writes store id `id` into `buf[at..at + 8]` and a CRC32C of `buf[..at + 8]` into
/// `buf[at + 8..at + 12]`: an id with a check of its own over everything before it, so that
/// code reading only the fields before it (older binaries) is unaffected. The log's
/// generation headers and the B+-tree's superblocks carry their store's id so.
pub(crate) fn seal_store_id(buf: &mut [u8], at: usize, id: u64) {
    buf[at..at + 8].copy_from_slice(&id.to_le_bytes());
    let c = crc(&buf[..at + 8]);
    buf[at + 8..at + 12].copy_from_slice(&c.to_le_bytes());
}

/// The id [`seal_store_id`] wrote at `at`: `None` if it is zero (written before ids) or its
/// check fails.
pub(crate) fn sealed_store_id(buf: &[u8], at: usize) -> Option<u64> {
    let id = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8"));
    (id != 0 && crc(&buf[..at + 8]).to_le_bytes() == buf[at + 8..at + 12]).then_some(id)
}

/// One of the log's two files: a file on a block device, or a persistent-memory region (the
/// log on NVM). The bytes are the same (docs/FORMAT-wal.md); only how they become durable
/// differs.
#[derive(Debug)]
pub enum LogFile {
    /// Group commit: one write of the tail blocks and one `fdatasync`.
    Block(BlockDevice),
    /// Frames stored into the mapping; a commit persists the new lines (no sync).
    Pmem(PmemRegion),
}

impl From<BlockDevice> for LogFile {
    fn from(d: BlockDevice) -> Self {
        LogFile::Block(d)
    }
}

impl From<PmemRegion> for LogFile {
    fn from(r: PmemRegion) -> Self {
        LogFile::Pmem(r)
    }
}

impl LogFile {
    /// Bytes the file (or the region's data area) holds.
    pub fn len(&self) -> u64 {
        match self {
            LogFile::Block(d) => d.len(),
            LogFile::Pmem(r) => r.len(),
        }
    }

    /// Whether the file holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file's path, if it has one (not a simulated device).
    pub fn path(&self) -> Option<&Path> {
        match self {
            LogFile::Block(d) => Some(d.path()),
            LogFile::Pmem(r) => r.path(),
        }
    }

    /// The region, when the log is on persistent memory.
    pub fn region(&self) -> Option<&PmemRegion> {
        match self {
            LogFile::Pmem(r) => Some(r),
            LogFile::Block(_) => None,
        }
    }

    /// The block device, when the log is a file.
    pub fn block(&self) -> Option<&BlockDevice> {
        match self {
            LogFile::Block(d) => Some(d),
            LogFile::Pmem(_) => None,
        }
    }

    fn read_at(&self, offset: u64, buf: &mut AlignedBuf) -> Result<()> {
        match self {
            LogFile::Block(d) => d.read_at(offset, buf),
            LogFile::Pmem(r) => r.read(offset, buf),
        }
    }

    /// Writes a whole block and makes it durable (the header).
    fn write_durable(&self, offset: u64, buf: &AlignedBuf, counters: &WalCounters) -> Result<()> {
        match self {
            LogFile::Block(d) => {
                d.write_at(offset, buf)?;
                d.sync()?;
                counters.syncs.incr();
            }
            LogFile::Pmem(r) => {
                r.write(offset, buf)?;
                r.persist(offset, buf.len())?;
                counters.persists.incr();
            }
        }
        Ok(())
    }

    /// Grows the file so that `end` bytes fit: by its own size (at least 1 MiB, at most
    /// [`GROW_STEP_MAX`]) beyond `end`, or to `end` alone on a device without room for the
    /// step. A block file's new room is zero-filled ([`BlockDevice::grow_written`]) so that
    /// each group commit's write overwrites written blocks and its `fdatasync` commits no
    /// extent change; a region's new room is zero. A file reused by a later generation is
    /// long enough already and never grows again.
    fn ensure_len(&self, end: u64) -> Result<()> {
        if end <= self.len() {
            return Ok(());
        }
        crate::device::grow_toward(
            end.next_multiple_of(BLOCK),
            (end + self.grow_step()).next_multiple_of(BLOCK),
            |len| self.grow_to(len),
        )
        .map(drop)
    }

    fn grow_to(&self, len: u64) -> Result<()> {
        match self {
            LogFile::Block(d) => d.grow_written(len),
            LogFile::Pmem(r) => r.grow(len),
        }
    }

    /// [`LogFile::grow_to`] for [`Wal::prepare_ahead`]'s thread: a block file's zeros go in
    /// small writes, so that commits running meanwhile queue behind 64 KiB, not 1 MiB
    /// ([`BlockDevice::grow_written_behind`]).
    fn grow_ahead_to(&self, len: u64) -> Result<()> {
        match self {
            LogFile::Block(d) => d.grow_written_behind(len),
            LogFile::Pmem(r) => r.grow(len),
        }
    }

    /// How far a log file grows past what it must hold: its own size, at least 1 MiB, at
    /// most [`GROW_STEP_MAX`].
    fn grow_step(&self) -> u64 {
        self.len().clamp(1 << 20, GROW_STEP_MAX)
    }

    /// Whether growing ahead of the log, off the commit path, saves commits work: files on
    /// disk file systems (unwritten extents) and region files (allocation and mapping), not
    /// simulated or in-memory devices (whose fault schedule must not depend on when a
    /// background thread ran).
    fn grows_ahead(&self) -> bool {
        match self {
            LogFile::Block(d) => d.zero_fill_pays(),
            LogFile::Pmem(r) => r.path().is_some(),
        }
    }
}

fn header_block(generation: u32, start: u64, owner: u64) -> Result<AlignedBuf> {
    let mut b = AlignedBuf::new(BLOCK as usize)?;
    b.fill(0);
    b[..8].copy_from_slice(MAGIC);
    b[8..12].copy_from_slice(&generation.to_le_bytes());
    b[16..24].copy_from_slice(&start.to_le_bytes());
    let c = crc(&b[..24]);
    b[24..28].copy_from_slice(&c.to_le_bytes());
    if owner != 0 {
        seal_store_id(&mut b, OWNER_AT, owner);
    }
    Ok(b)
}

/// A log file's valid header: generation, start LSN and owner (`None`: a header written
/// without one, or whose owner field fails its check).
struct Header {
    generation: u32,
    start: u64,
    owner: Option<u64>,
}

fn read_header(file: &LogFile) -> Result<Option<Header>> {
    if file.len() < BLOCK {
        return Ok(None);
    }
    let mut b = AlignedBuf::new(BLOCK as usize)?;
    file.read_at(0, &mut b)?;
    if &b[..8] != MAGIC || crc(&b[..24]).to_le_bytes() != b[24..28] {
        return Ok(None);
    }
    Ok(Some(Header {
        generation: u32::from_le_bytes(b[8..12].try_into().expect("4")),
        start: u64::from_le_bytes(b[16..24].try_into().expect("8")),
        owner: sealed_store_id(&b, OWNER_AT),
    }))
}

/// Most a log file grows at once: its zeros are written while a commit waits (about 4 ms
/// for 8 MiB on the test disk), so the step is bounded, not doubling without end.
const GROW_STEP_MAX: u64 = 8 << 20;
/// How long an appender spins for the tail before it parks ([`Wal::lock_tail`]).
const TAIL_SPIN: Duration = Duration::from_micros(20);

/// Most zero-filled room [`Wal::prepare_ahead`] keeps beyond a log file's end.
const PREPARE_AHEAD_MAX: u64 = 64 << 20;
/// The default [`Wal::with_tail_limit`]. An unwritten log tail this long is written out (not
/// synced) by the append that reaches it. Under a durability level that never waits for the
/// log, the tail otherwise stayed in DRAM until the next write-back or checkpoint: about 1.5×
/// the pool's data while a store was loaded into its pool (docs/BENCHMARKS.md, Figures 14
/// and 16).
pub const DEFAULT_TAIL_LIMIT: usize = 4 << 20;

impl Wal {
    /// Starts a new log in two empty files: generation 1 at LSN `start` (open it with
    /// [`Wal::replay`] and [`Wal::resume`]).
    pub fn format(files: &[LogFile; 2], start: u64) -> Result<()> {
        Self::format_owned(files, start, 0)
    }

    /// [`Wal::format`] for the store with id `owner` (not 0), written into the header:
    /// [`Wal::replay_owned`] then refuses the files as another store's log.
    pub fn format_owned(files: &[LogFile; 2], start: u64, owner: u64) -> Result<()> {
        let file = &files[1];
        file.ensure_len(BLOCK)?;
        file.write_durable(0, &header_block(1, start, owner)?, &WalCounters::default())
    }

    fn with_tail(files: [LogFile; 2], generation: u32, start: u64) -> Wal {
        Wal {
            files,
            tail: Mutex::new(Tail {
                generation,
                gen_start: start,
                buf: TailBuf::default(),
                buf_lsn: start,
            }),
            group: GroupSync::default(),
            appended: AtomicU64::new(start),
            durable: AtomicU64::new(start),
            written: AtomicU64::new(start),
            prepared_at: AtomicU64::new(start),
            tail_limit: DEFAULT_TAIL_LIMIT,
            spare: Mutex::new(None),
            write_behind: OnceLock::new(),
            write_behind_asked: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            owner: 0,
            counters: WalCounters::default(),
        }
    }

    /// Names the store the log belongs to in every generation header written from now on.
    fn owned_by(mut self, owner: u64) -> Self {
        self.owner = owner;
        self
    }

    /// Sets the unwritten tail at which an append writes the tail out (at least one block).
    /// A store counts [`Wal::buffer_bytes`] of it against its DRAM budget.
    pub fn with_tail_limit(mut self, bytes: usize) -> Self {
        self.tail_limit = bytes.max(BLOCK as usize);
        self
    }

    /// The most DRAM the log's buffers hold with a tail limit of `limit` (the tail, and the
    /// spare it continues in while the last tail is written), while no single frame is larger
    /// than the limit: the tail keeps at most the limit, the partial block a write-out leaves
    /// and the frame that reached the limit. Zero for a log on persistent memory, whose frames go straight into
    /// the mapping.
    pub fn buffer_bytes(limit: usize, on_pmem: bool) -> u64 {
        if on_pmem {
            return 0;
        }
        let limit = limit.max(BLOCK as usize) as u64;
        2 * Self::stage_len(limit)
    }

    /// Capacity of the tail's buffer and of the spare for a tail limit: the limit, a frame
    /// that reached it, and the partial block before it, in whole blocks.
    fn stage_len(limit: u64) -> u64 {
        (2 * limit + BLOCK).next_multiple_of(BLOCK)
    }

    fn write_header(&self, generation: u32, start: u64) -> Result<()> {
        let file = &self.files[generation as usize % 2];
        file.ensure_len(BLOCK)?;
        let header = header_block(generation, start, self.owner)?;
        file.write_durable(0, &header, &self.counters)
    }

    /// Reads every frame from generation `generation` on (whose first frame is at `start`),
    /// calling `frame(lsn, payload)` in log order, and returns where the log ends. A missing
    /// or torn frame ends the log; a frame that claims another position is corruption.
    pub fn replay(
        files: &[LogFile; 2],
        generation: u32,
        start: u64,
        frame: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<LogEnd> {
        Self::replay_owned(files, generation, start, None, frame)
    }

    /// [`Wal::replay`] of the log of the store with id `owner`: a generation header naming
    /// another store is refused (another store's log file put in place of this one's would
    /// be redone onto its pages). Headers written without an owner are accepted.
    pub fn replay_owned(
        files: &[LogFile; 2],
        generation: u32,
        start: u64,
        owner: Option<u64>,
        mut frame: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<LogEnd> {
        let mut end = LogEnd {
            generation,
            generation_start: start,
            lsn: start,
            damage: None,
        };
        let mut expect_gen = generation;
        loop {
            let file = &files[expect_gen as usize % 2];
            let header = read_header(file)?;
            // Only a header whose frames are redone: the other file's older generation (which
            // replay passes over) may predate an id given since.
            let redone = expect_gen == generation
                || matches!(&header, Some(h) if h.generation == expect_gen && h.start == end.lsn);
            if let (
                Some(want),
                Some(Header {
                    owner: Some(is), ..
                }),
            ) = (owner, &header)
                && *is != want
                && redone
            {
                return Err(Error::corrupt(
                    file.path(),
                    format!(
                        "the log belongs to another store ({is:016x}, not {want:016x}): its \
                         records would be redone onto this store's pages; restore the log \
                         files written with the store (a directory's files are restored \
                         together)"
                    ),
                ));
            }
            match header {
                Some(h) if h.generation == expect_gen && h.start == end.lsn => {}
                Some(_) | None if expect_gen != generation => return Ok(end),
                found => {
                    let holds = match found {
                        Some(h) => format!("generation {} from LSN {}", h.generation, h.start),
                        None => "no log header".into(),
                    };
                    return Err(Error::corrupt(
                        None,
                        format!(
                            "log generation {generation} (from LSN {start}) is missing: the \
                             file holds {holds}"
                        ),
                    ));
                }
            }
            let mut bytes = FrameReader::new(file);
            let mut at = BLOCK as usize;
            let gen_start = end.lsn;
            end.generation = expect_gen;
            end.generation_start = gen_start;
            // Whether replay stopped at bytes that are not zeros (the end of what was written)
            // nor the end of the file.
            let mut stopped_at_bytes = false;
            while let Some(h) = bytes.get(at, FRAME_HEADER as usize)? {
                let written = h.iter().any(|&b| b != 0);
                let len = u32::from_le_bytes(h[0..4].try_into().expect("4")) as usize;
                let sum = u32::from_le_bytes(h[4..8].try_into().expect("4"));
                let g = u32::from_le_bytes(h[8..12].try_into().expect("4"));
                let plen = u32::from_le_bytes(h[12..16].try_into().expect("4")) as usize;
                let lsn = u64::from_le_bytes(h[16..24].try_into().expect("8"));
                // An older generation's bytes (a reused file) past the end are no damage: only a
                // frame header of this generation that fails is searched past.
                let ours = written && g == expect_gen;
                if len < FRAME_HEADER as usize || !len.is_multiple_of(8) || g != expect_gen {
                    stopped_at_bytes = ours;
                    break;
                }
                let Some(body) = bytes.get(at + 8, len - 8)? else {
                    stopped_at_bytes = ours;
                    break;
                };
                if crc(body) != sum {
                    stopped_at_bytes = ours;
                    break;
                }
                let here = gen_start + (at as u64 - BLOCK);
                if lsn != here {
                    return Err(Error::corrupt(
                        None,
                        format!("log frame at LSN {here} claims LSN {lsn}"),
                    ));
                }
                let payload = body
                    .get(FRAME_HEADER as usize - 8..FRAME_HEADER as usize - 8 + plen)
                    .ok_or_else(|| Error::corrupt(None, format!("log frame {lsn}: bad length")))?;
                frame(lsn + FRAME_HEADER, payload)?;
                at += len;
                end.lsn = here + len as u64;
            }
            if stopped_at_bytes {
                end.damage = frames_after(&mut bytes, at, expect_gen, gen_start)?;
            }
            if let LogFile::Pmem(region) = file
                && end.lsn > gen_start
            {
                // A region is read through the mapping: after a process crash it shows frames
                // that were stored but never persisted (dirty cache lines, or page cache on a
                // disk file). Redo applies them, so they must not vanish at a later power
                // loss: persist what was replayed before anything depends on it.
                region.persist(BLOCK, (end.lsn - gen_start) as usize)?;
            }
            expect_gen += 1;
        }
    }

    /// The log of a store opened read-only after [`Wal::replay`] ended at `end`: nothing is
    /// written (no new generation begins), every append fails with [`Error::ReadOnly`] giving
    /// `reason`, and a flush finds everything replayed durable already.
    pub fn read_only(files: [LogFile; 2], end: LogEnd, reason: String) -> Wal {
        let wal = Wal::with_tail(files, end.generation + 1, end.lsn);
        wal.group.fail(reason);
        wal.broken.store(true, Ordering::Release);
        wal
    }

    /// Continues the log after [`Wal::replay`] ended at `end`: the next generation starts
    /// there (so that nothing after the end of the replayed generation is ever read again).
    pub fn resume(files: [LogFile; 2], end: LogEnd) -> Result<Wal> {
        Self::resume_owned(files, end, 0)
    }

    /// [`Wal::resume`] for the store with id `owner`, written into every new generation's
    /// header.
    pub fn resume_owned(files: [LogFile; 2], end: LogEnd, owner: u64) -> Result<Wal> {
        let next = end.generation + 1;
        let wal = Wal::with_tail(files, next, end.lsn).owned_by(owner);
        wal.write_header(next, end.lsn)?;
        Ok(wal)
    }

    /// LSN the next appended frame gets; record positions inside it are this plus
    /// [`FRAME_HEADER`] plus their offset in the payload. Stable while the caller is the only
    /// appender.
    pub fn next_lsn(&self) -> u64 {
        self.appended.load(Ordering::Acquire)
    }

    /// Current generation.
    pub fn generation(&self) -> u32 {
        self.tail.lock().generation
    }

    /// LSN up to which frames are durable.
    pub fn durable_lsn(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Appends one frame; returns the LSN after it. On persistent memory the frame is stored
    /// into the region here (durable at the next [`Wal::flush_to`] that covers it).
    pub fn append(&self, payload: &[u8]) -> Result<u64> {
        Self::check_frame_len(payload.len())?;
        let mut t = self.lock_tail();
        if self.broken.load(Ordering::Acquire) {
            return Err(self.failure());
        }
        let (end, unwritten) = self.store_frame(&mut t, payload)?;
        drop(t);
        self.appended_frame(payload.len(), unwritten)?;
        Ok(end)
    }

    /// Appends one frame that `build` writes into `payload` (cleared first), given the LSN the
    /// frame gets, while no other frame can be appended: for appenders that run concurrently
    /// and must stamp their pages with their records' LSNs, or write fields that must follow
    /// the log's order. Keep `build` short: every appender waits for it. Returns the LSN after
    /// the frame.
    ///
    /// An error from `build` appends nothing. Once `build` has run, a frame that cannot be
    /// stored fails the log before any other frame can follow it: `build` may have changed
    /// what later frames assume (a page, a count), so no later frame may become durable.
    pub fn append_with(
        &self,
        payload: &mut Vec<u8>,
        build: impl FnOnce(u64, &mut Vec<u8>) -> Result<()>,
    ) -> Result<u64> {
        let mut t = self.lock_tail();
        if self.broken.load(Ordering::Acquire) {
            return Err(self.failure());
        }
        payload.clear();
        build(self.appended.load(Ordering::Acquire), payload)?;
        let stored =
            Self::check_frame_len(payload.len()).and_then(|()| self.store_frame(&mut t, payload));
        let (end, unwritten) = match stored {
            Ok(done) => done,
            Err(e) => {
                let e = self.fail(e);
                drop(t);
                return Err(e);
            }
        };
        drop(t);
        self.appended_frame(payload.len(), unwritten)?;
        Ok(end)
    }

    /// The tail, for an appender. Appenders mostly hold it briefly (a frame's copy and
    /// checksum: under a microsecond for a record, a few for a page image), so a waiter spins
    /// up to [`TAIL_SPIN`] before it parks: parking, and being woken, cost each of two
    /// appenders on two cores more than the wait (the B+-tree's load with two writers:
    /// docs/BENCHMARKS.md, Figure 24). Longer holds — a batch's frame of many images, a tail
    /// buffer that grows because write-behind fell behind, a log on persistent memory that
    /// grows its file — cost a waiter the bounded spin, then it parks as before.
    #[inline]
    fn lock_tail(&self) -> parking_lot::MutexGuard<'_, Tail> {
        crate::sync::spin_then_park(|| self.tail.try_lock(), || self.tail.lock(), TAIL_SPIN).0
    }

    fn check_frame_len(len: usize) -> Result<()> {
        if len > MAX_FRAME {
            return Err(Error::InvalidArgument(format!(
                "log frame of {len} bytes (at most {MAX_FRAME})"
            )));
        }
        Ok(())
    }

    /// Stores one frame at the end of the log (the tail locked); returns the LSN after it and
    /// how many bytes the tail holds unwritten.
    fn store_frame(&self, t: &mut Tail, payload: &[u8]) -> Result<(u64, usize)> {
        let len = (FRAME_HEADER as usize + payload.len()).next_multiple_of(8);
        let lsn = self.appended.load(Ordering::Acquire);
        let generation = t.generation;
        let mut header = [0u8; FRAME_HEADER as usize];
        header[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[8..12].copy_from_slice(&generation.to_le_bytes());
        header[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[16..24].copy_from_slice(&lsn.to_le_bytes());
        let pad = len - FRAME_HEADER as usize - payload.len();
        // Under the tail lock: short frames (a put's) take the serial instruction loop.
        let mut sum = crate::device::cpu::crc32c_append(crc(&header[8..]), payload);
        sum = crate::device::cpu::crc32c_append(sum, &[0u8; 8][..pad]);
        header[4..8].copy_from_slice(&sum.to_le_bytes());
        let mut unwritten = 0;
        match &self.files[generation as usize % 2] {
            LogFile::Block(_) => {
                let least = Self::stage_len(self.tail_limit as u64) as usize;
                t.buf.push([&header, payload], pad, least)?;
                unwritten = t.buf.len();
            }
            LogFile::Pmem(region) => {
                // Straight into the mapping, no staging copy; the padding is zeroed because a
                // recycled file holds an older generation's bytes there.
                let at = BLOCK + (lsn - t.gen_start);
                self.files[generation as usize % 2].ensure_len(at + len as u64)?;
                region.write(at, &header)?;
                region.write(at + FRAME_HEADER, payload)?;
                region.fill(at + FRAME_HEADER + payload.len() as u64, pad, 0)?;
            }
        }
        let end = lsn + len as u64;
        self.appended.store(end, Ordering::Release);
        Ok((end, unwritten))
    }

    /// After a frame of `payload_len` bytes was stored (the tail unlocked): counts it, and has
    /// the tail written out if it holds `unwritten` bytes past half its limit.
    fn appended_frame(&self, payload_len: usize, unwritten: usize) -> Result<()> {
        self.counters.frames.incr();
        self.counters.bytes.add(payload_len as u64);
        if unwritten >= self.tail_limit {
            // Written, not synced: what bounds DRAM is the write. The next flush's sync makes
            // it durable (an `fdatasync` covers every earlier write of the file). Reached only
            // when no write-behind thread runs or it fell behind by half the limit.
            self.write_out(false)?;
        } else if unwritten >= self.tail_limit / 2 {
            self.ask_write_behind();
        }
        Ok(())
    }

    /// Wakes the write-behind thread, if there is one, for the tail (once per write-out).
    fn ask_write_behind(&self) {
        if let Some(thread) = self.write_behind.get()
            && !self.write_behind_asked.swap(true, Ordering::AcqRel)
        {
            thread.unpark();
        }
    }

    /// Starts a thread that writes the tail out (unsynced) once it holds half the tail limit,
    /// so that appenders rarely write it themselves: an appender that reaches the limit holds
    /// the store's writer while its write runs (4 MiB by default, milliseconds). `None` for a
    /// log on persistent memory, whose frames go straight into the mapping. Stop the returned
    /// thread before the log is closed; appends then write the tail themselves again.
    pub fn spawn_write_behind(self: &Arc<Self>) -> Result<Option<Background>> {
        if self.files[0].region().is_some() {
            return Ok(None);
        }
        // The interval only matters if a wake-up were lost; appenders wake the thread.
        let thread = Background::spawn(
            "tierbase-wal",
            self.clone(),
            Duration::from_secs(1),
            |wal, ticker| {
                while ticker.next() {
                    wal.write_behind_asked.store(false, Ordering::Release);
                    // The appenders' measure (what the tail holds), so that it never declines
                    // what an appender asked for.
                    let unwritten = wal.tail.lock().buf.len();
                    if unwritten < wal.tail_limit / 2 || wal.broken.load(Ordering::Acquire) {
                        continue;
                    }
                    match wal.write_out(false) {
                        Ok(true) => wal.counters.writes_behind.incr(),
                        Ok(false) => {}
                        // The log has failed for good (`write_out` failed it); appends and
                        // flushes report it.
                        Err(e) => tracing::warn!("log write-behind: {e}"),
                    }
                }
            },
        )
        .map_err(|e| Error::io("spawn the log's write-behind thread", None, e))?;
        if let Some(handle) = thread.handle() {
            // Set once: a second thread would only wait for the first one's writes.
            let _ = self.write_behind.set(handle);
        }
        Ok(Some(thread))
    }

    /// Makes every frame up to `lsn` durable; concurrent callers share one write and sync.
    pub fn flush_to(&self, lsn: u64) -> Result<()> {
        if self.durable.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        self.group
            .sync(|| {
                self.write_out(true)
                    .map(|_| ())
                    .map_err(|e| std::io::Error::other(e.failure_reason()))
            })
            .map(|_| ())
            .map_err(|reason| Error::ReadOnly { path: None, reason })
    }

    /// Fails the log for good after a write or sync outside the group commit failed: every
    /// later flush then fails as after a failed sync (the write may be missing from the
    /// file, or a sync elsewhere may have consumed the kernel's report of lost pages).
    fn fail(&self, e: Error) -> Error {
        let reason = e.failure_reason();
        self.group.fail(reason.clone());
        self.broken.store(true, Ordering::Release);
        Error::ReadOnly { path: None, reason }
    }

    /// The error of a log that [`Wal::fail`] failed.
    fn failure(&self) -> Error {
        Error::ReadOnly {
            path: None,
            reason: self
                .group
                .failed()
                .unwrap_or_else(|| "the log failed".to_string()),
        }
    }

    /// Hands every frame up to `lsn` to the operating system (written, not synced), so that
    /// it survives a crash of the process: what a deferring durability level promises of an
    /// acknowledged write. Concurrent callers share one write; on persistent memory the
    /// frames are in the mapping already.
    pub fn write_to(&self, lsn: u64) -> Result<()> {
        if self.files[0].region().is_some() || self.written.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        self.write_out_upto(false, lsn).map(|_| ())
    }

    /// Makes every appended frame durable.
    pub fn flush(&self) -> Result<()> {
        self.flush_to(self.appended.load(Ordering::Acquire))
    }

    /// Writes the tail kept in DRAM (from the block holding the written end) and, with
    /// `sync`, syncs the file; on persistent memory, with `sync`, persists the lines from the
    /// durable end to the appended end (without, nothing: frames are in the mapping).
    ///
    /// The tail's buffer is handed to the device as it is: under the tail lock it is swapped
    /// for the spare, which continues with the last partial block (the next write starts
    /// there), so appenders wait for a copy of less than a block, not for the write.
    /// Write-outs may overlap (a group commit's leader, the write-behind thread, an append at
    /// the tail limit): each takes the spare's lock first and holds it through its write, so
    /// writes reach the file in the order their tails were taken, and a write's zero padding
    /// never lands over frames a later write put there. Returns whether it wrote bytes to a
    /// file.
    fn write_out(&self, sync: bool) -> Result<bool> {
        self.write_out_upto(sync, u64::MAX)
    }

    /// [`Wal::write_out`] for a caller that needs only the frames up to `lsn`: a write-out
    /// that ran while it waited for the spare's lock may have covered them (unsynced writes
    /// only: `lsn` is not consulted for a sync), and then it writes nothing.
    fn write_out_upto(&self, sync: bool, lsn: u64) -> Result<bool> {
        if self.files[0].region().is_some() {
            if !sync {
                return Ok(false);
            }
            let t = self.tail.lock();
            let Some(region) = self.files[t.generation as usize % 2].region() else {
                return Err(Error::InvalidArgument(
                    "a log in one file and one persistent-memory region".into(),
                ));
            };
            // Frames are complete in the mapping up to `appended` (stored under the tail
            // lock), and everything before the generation's start is durable already (a
            // switch flushes first), so the range lies inside this generation's file.
            let end = self.appended.load(Ordering::Acquire);
            let from = self.durable.load(Ordering::Acquire).max(t.gen_start);
            let gen_start = t.gen_start;
            drop(t);
            if end <= from {
                return Ok(false);
            }
            region.persist(BLOCK + (from - gen_start), (end - from) as usize)?;
            self.counters.persists.incr();
            self.counters.bytes_written.add(end - from);
            self.durable.fetch_max(end, Ordering::AcqRel);
            return Ok(false);
        }
        let spare = self.spare.lock();
        if self.broken.load(Ordering::Acquire) {
            // An earlier write-out failed after it had taken frames off the tail: nothing
            // written now may be reported as written or durable across that hole.
            return Err(self.failure());
        }
        // A write that fails after taking frames off the tail fails the log before the spare's
        // lock is released (in `write_out_file`), so no later write-out (which waits for that
        // lock) reports frames beyond the missing ones; any other failure fails it here.
        if !sync && self.written.load(Ordering::Acquire) >= lsn {
            return Ok(false);
        }
        self.write_out_file(sync, spare).map_err(|e| match e {
            e @ Error::ReadOnly { .. } => e,
            e => self.fail(e),
        })
    }

    /// [`Wal::write_out`] for a log in files, holding the spare's lock until its write
    /// returned (or failed the log).
    fn write_out_file(
        &self,
        sync: bool,
        mut spare: parking_lot::MutexGuard<'_, Option<AlignedBuf>>,
    ) -> Result<bool> {
        let mut t = self.tail.lock();
        let end = t.buf_lsn + t.buf.len() as u64;
        let done = if sync { &self.durable } else { &self.written };
        if end <= done.load(Ordering::Acquire) {
            return Ok(false);
        }
        let file = &self.files[t.generation as usize % 2];
        let LogFile::Block(device) = file else {
            return Err(Error::InvalidArgument(
                "a log in one file and one persistent-memory region".into(),
            ));
        };
        if end <= self.written.load(Ordering::Acquire) {
            // Everything is in the file (no write runs: the caller holds the spare's lock),
            // e.g. an unsynced write-out that ended on a block boundary: only the sync is left.
            drop(t);
            drop(spare);
            device.sync()?;
            self.counters.syncs.incr();
            self.durable.fetch_max(end, Ordering::AcqRel);
            return Ok(false);
        }
        let offset = BLOCK + (t.buf_lsn - t.gen_start);
        let kept = Self::stage_len(self.tail_limit as u64) as usize;
        // The tail continues with the last partial block, whose rest the next write fills.
        let keep_from = t.gen_start + (end - t.gen_start) / BLOCK * BLOCK;
        let carried = (keep_from - t.buf_lsn) as usize;
        let mut next = match spare.take() {
            Some(buf) => buf,
            None => AlignedBuf::new(kept)?,
        };
        next.set_len(next.capacity())?;
        let filled = t.buf.len();
        next[..filled - carried].copy_from_slice(&t.buf.as_slice()[carried..]);
        let mut out = t
            .buf
            .bytes
            .replace(next)
            .expect("a tail with frames has a buffer");
        t.buf.filled = filled - carried;
        t.buf_lsn = keep_from;
        drop(t);
        // The buffer's capacity is whole blocks, so the padded length fits.
        let padded = filled.next_multiple_of(BLOCK as usize);
        let write = |out: &mut AlignedBuf| -> Result<()> {
            out.set_len(out.capacity())?;
            out[filled..padded].fill(0);
            out.set_len(padded)?;
            file.ensure_len(offset + padded as u64)?;
            device.write_at(offset, out)
        };
        if let Err(e) = write(&mut out) {
            // The frames before `keep_from` are only in `out` now: fail the log while the
            // spare's lock is held, before the next write-out writes the frames after them.
            return Err(self.fail(e));
        }
        self.counters.bytes_written.add(padded as u64);
        self.written.fetch_max(end, Ordering::AcqRel);
        // A buffer grown for a frame larger than the limit is given back, not kept.
        if out.capacity() <= kept {
            *spare = Some(out);
        }
        // The sync runs without the lock: write-outs behind it need not wait for it, and a
        // failed sync fails the group commit for good (no flush reports durable after it).
        drop(spare);
        if sync {
            device.sync()?;
            self.counters.syncs.incr();
            self.durable.fetch_max(end, Ordering::AcqRel);
        }
        Ok(true)
    }

    /// Starts a new generation at the current end (after making the old one durable); the
    /// caller must be the only appender while this runs. Returns the new generation and its
    /// start LSN.
    pub fn switch_generation(&self) -> Result<(u32, u64)> {
        self.flush()?;
        let mut t = self.tail.lock();
        let start = self.appended.load(Ordering::Acquire);
        let next = t.generation + 1;
        // The header is durable before any frame of the new generation can be.
        self.write_header(next, start)?;
        t.generation = next;
        t.gen_start = start;
        t.buf.clear();
        t.buf_lsn = start;
        Ok((next, start))
    }

    /// Grows the current log file (zero-filled) ahead of its end, off the commit path: room
    /// for twice what was appended since the last call (at most [`PREPARE_AHEAD_MAX`]), so
    /// that commits rarely wait for growth. An idle log grows nothing. For a background
    /// thread to call every interval; returns the bytes the file grew (always 0 for block
    /// files where [`BlockDevice::zero_fill_pays`] is false — tmpfs, simulated and in-memory
    /// devices — and for simulated regions).
    pub fn prepare_ahead(&self) -> Result<u64> {
        let appended = self.appended.load(Ordering::Acquire);
        let since = appended.saturating_sub(self.prepared_at.swap(appended, Ordering::AcqRel));
        let (generation, gen_start) = {
            let t = self.tail.lock();
            (t.generation, t.gen_start)
        };
        let want = (since * 2).min(PREPARE_AHEAD_MAX);
        if want == 0 {
            return Ok(0);
        }
        let file = &self.files[generation as usize % 2];
        if !file.grows_ahead() {
            return Ok(0);
        }
        let end = BLOCK + appended.saturating_sub(gen_start);
        let before = file.len();
        loop {
            // A step at a time: a commit that needs the space meanwhile waits for one step.
            let len = file.len();
            if len >= end + want {
                return Ok(len - before);
            }
            // Growing syncs the file: a failed sync fails the log as a failed commit would
            // (it may have taken the kernel's report of an earlier write's lost pages). Other
            // failures (no space) leave it to a commit that needs the room to grow the file.
            file.grow_ahead_to((len + file.grow_step()).next_multiple_of(BLOCK))
                .map_err(|e| match e {
                    Error::Io { op: "fsync", .. } => self.fail(e),
                    e => e,
                })?;
        }
    }

    /// Bytes the current generation holds (for checkpoint triggers).
    pub fn generation_bytes(&self) -> u64 {
        let t = self.tail.lock();
        self.appended.load(Ordering::Acquire) - t.gen_start
    }

    /// The two log files (for counters and reports).
    pub fn files(&self) -> &[LogFile; 2] {
        &self.files
    }
}

/// Reads a log file front to back in 1 MiB chunks, keeping only what the frame being parsed
/// needs: a restart reads up to the log's end, not the whole (possibly much longer, recycled)
/// file into memory.
struct FrameReader<'a> {
    file: &'a LogFile,
    len: usize,
    /// Bytes of the file from offset `base`.
    buf: Vec<u8>,
    base: usize,
    chunk: Option<AlignedBuf>,
}

impl<'a> FrameReader<'a> {
    const CHUNK: usize = 1 << 20;

    fn new(file: &'a LogFile) -> Self {
        FrameReader {
            file,
            len: (file.len() / BLOCK * BLOCK) as usize,
            buf: Vec::new(),
            base: 0,
            chunk: None,
        }
    }

    /// Bytes `[at, at + n)` of the file, or `None` past its end. Offsets must not go back
    /// before an earlier call's `at`.
    fn get(&mut self, at: usize, n: usize) -> Result<Option<&[u8]>> {
        let Some(end) = at.checked_add(n).filter(|&e| e <= self.len) else {
            return Ok(None);
        };
        // Reads stay block-aligned (`O_DIRECT`): `base + buf.len()` only ever grows by whole
        // chunks of a block-multiple file, and dropping a prefix moves `base` by as much.
        while self.base + self.buf.len() < end {
            if at > self.base {
                // Drop what earlier frames used, once per refill (not per frame: the shift
                // costs up to a chunk).
                let used = (at - self.base).min(self.buf.len());
                self.buf.drain(..used);
                self.base += used;
            }
            let from = self.base + self.buf.len();
            let step = Self::CHUNK.min(self.len - from);
            let chunk = match &mut self.chunk {
                Some(c) if c.len() == step => c,
                slot => slot.insert(AlignedBuf::new(step)?),
            };
            self.file.read_at(from as u64, chunk)?;
            self.buf.extend_from_slice(chunk);
        }
        Ok(self.buf.get(at - self.base..end - self.base))
    }
}

/// Looks for frames of generation `generation` (whose first frame is at file offset
/// [`BLOCK`], LSN `gen_start`) that pass their check, anywhere after the frame at file offset
/// `at` that ended replay; `None` when there are none (a torn tail, or the end of what was
/// written followed by an older generation's bytes).
fn frames_after(
    bytes: &mut FrameReader<'_>,
    at: usize,
    generation: u32,
    gen_start: u64,
) -> Result<Option<LogDamage>> {
    let lsn_at = |p: usize| gen_start + (p as u64 - BLOCK);
    let mut found = LogDamage {
        lsn: lsn_at(at),
        frames_after: 0,
        last_lsn: 0,
    };
    let mut p = at + 8;
    // Frames lie end to end, so past the written part of the file (zeros a growth wrote
    // ahead, up to 64 MiB) nothing more can follow: the search ends after this many zero
    // bytes in a row (only a value of zeros that long inside a frame could hide one).
    const ZEROS_END: usize = 4 << 20;
    let mut zeros = 0;
    while let Some(h) = bytes.get(p, FRAME_HEADER as usize)? {
        if h[..8] == [0; 8] {
            zeros += 8;
            if zeros >= ZEROS_END {
                break;
            }
            p += 8;
            continue;
        }
        zeros = 0;
        let len = u32::from_le_bytes(h[0..4].try_into().expect("4")) as usize;
        let sum = u32::from_le_bytes(h[4..8].try_into().expect("4"));
        let g = u32::from_le_bytes(h[8..12].try_into().expect("4"));
        let lsn = u64::from_le_bytes(h[16..24].try_into().expect("8"));
        // The frame's own position is in it: a match by chance is all but impossible.
        let framed = len >= FRAME_HEADER as usize && len.is_multiple_of(8);
        let whole = |bytes: &mut FrameReader<'_>| -> Result<bool> {
            Ok(bytes
                .get(p + 8, len - 8)?
                .is_some_and(|body| crc(body) == sum))
        };
        if framed && g == generation && lsn == lsn_at(p) && whole(bytes)? {
            found.frames_after += 1;
            found.last_lsn = lsn + len as u64;
            p += len;
        } else if framed && g < generation && (generation - g).is_multiple_of(2) && whole(bytes)? {
            // A whole frame of an older generation in this file: what this one wrote ended
            // before it (a reused file is overwritten from its start), so nothing follows.
            break;
        } else {
            p += 8;
        }
    }
    Ok((found.frames_after > 0).then_some(found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::BlockOptions;

    fn files(dir: &std::path::Path) -> [LogFile; 2] {
        let opts = BlockOptions::default();
        [0, 1].map(|i| {
            BlockDevice::create(&dir.join(format!("log{i}")), 4096, &opts)
                .unwrap()
                .into()
        })
    }

    fn reopen(dir: &std::path::Path) -> [LogFile; 2] {
        [0, 1].map(|i| {
            BlockDevice::open(&dir.join(format!("log{i}")), &BlockOptions::default())
                .unwrap()
                .into()
        })
    }

    /// Replay of the log in `dir` from `(generation, start)` returns frames `frame(0..n)` in
    /// order and ends at `appended`.
    fn replays_exactly(
        dir: &std::path::Path,
        (generation, start): (u32, u64),
        n: u64,
        appended: u64,
        frame: impl Fn(u64) -> Vec<u8>,
    ) {
        let mut got = 0u64;
        let replayed = Wal::replay(&reopen(dir), generation, start, |_, p| {
            assert_eq!(p, &frame(got)[..], "frame {got}");
            got += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((got, replayed.lsn), (n, appended));
    }

    /// A new log in `files` (generation 1 from LSN `start`, replayed: no frames) continued in
    /// generation 2, as a store's create and open leave it; and where generation 1 ended.
    fn started(files: [LogFile; 2], start: u64) -> (Wal, LogEnd) {
        Wal::format(&files, start).unwrap();
        let end = Wal::replay(&files, 1, start, |_, _| panic!("no frames yet")).unwrap();
        (Wal::resume(files, end).unwrap(), end)
    }

    /// The log file grows zero-filled ahead of an active log (twice what was appended since
    /// the last call), not at all while idle; replay still ends at the last frame, and a
    /// concurrent-looking smaller grow is a no-op rather than an error.
    #[test]
    fn prepare_ahead_grows_an_active_log_only_and_replay_ends_at_the_last_frame() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let (wal, end) = started(f, 0);
        assert_eq!(
            wal.prepare_ahead().unwrap(),
            0,
            "nothing appended: no growth"
        );
        let payload = vec![7u8; 3000];
        for _ in 0..400 {
            wal.append(&payload).unwrap();
        }
        wal.flush().unwrap();
        let appended = wal.next_lsn() - end.lsn;
        let file = wal.files()[wal.generation() as usize % 2].block().unwrap();
        let before = file.len();
        let grown = wal.prepare_ahead().unwrap();
        if file.zero_fill_pays() {
            assert!(
                file.len() >= BLOCK + appended + 2 * appended,
                "{} bytes for {appended} appended (grew {grown} from {before})",
                file.len()
            );
        } else {
            // The temporary directory is on tmpfs here: nothing to gain, nothing grown.
            assert_eq!(grown, 0);
        }
        assert_eq!(wal.prepare_ahead().unwrap(), 0, "idle again: no growth");
        let len = file.len();
        file.grow_written(len - BLOCK).unwrap();
        assert_eq!(file.len(), len, "a shorter grow_written is a no-op");
        assert!(
            file.grow(len - BLOCK).is_err(),
            "grow still refuses to shrink"
        );
        let generation = wal.generation();
        let files = reopen(dir.path());
        drop(wal);
        let mut frames = 0;
        let replayed = Wal::replay(&files, generation, end.lsn, |_, p| {
            assert_eq!(p, &payload[..]);
            frames += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(frames, 400);
        assert_eq!(replayed.lsn, end.lsn + appended);
    }

    /// Appends nobody waits for do not pile up in DRAM: the tail is written out (not synced:
    /// nothing becomes durable by it) once it reaches its limit, and the tail and its aligned
    /// copy stay within [`Wal::buffer_bytes`], also after a frame larger than the limit.
    #[test]
    fn an_unwritten_tail_is_written_out_at_its_limit_and_its_buffers_stay_bounded() {
        for limit in [DEFAULT_TAIL_LIMIT, 64 << 10] {
            let dir = tempfile::tempdir().unwrap();
            let f = files(dir.path());
            let (wal, end) = started(f, 0);
            let wal = wal.with_tail_limit(limit);
            let bound = Wal::buffer_bytes(limit, false) as usize;
            let held = |wal: &Wal| {
                // One lock at a time (the spare's is taken before the tail's elsewhere).
                let tail = wal.tail.lock().buf.capacity();
                tail + wal.spare.lock().as_ref().map_or(0, AlignedBuf::capacity)
            };
            let syncs = wal.counters.syncs.get();
            let payload = vec![3u8; 10_000];
            let n = 3 * limit / payload.len();
            for _ in 0..n {
                wal.append(&payload).unwrap();
                assert!(wal.tail.lock().buf.len() < limit);
                assert!(held(&wal) <= bound, "{} > {bound}", held(&wal));
            }
            assert!(wal.counters.bytes_written.get() > 2 * limit as u64);
            assert_eq!(wal.counters.syncs.get(), syncs, "written out, not synced");
            assert_eq!(wal.durable_lsn(), end.lsn);
            // A frame three times the limit is written out whole; its room is given back.
            let big = vec![5u8; 3 * limit];
            wal.append(&big).unwrap();
            wal.append(&payload).unwrap();
            wal.flush().unwrap();
            assert_eq!(wal.durable_lsn(), wal.next_lsn());
            assert!(held(&wal) <= bound, "{} > {bound}", held(&wal));
            let (generation, appended) = (wal.generation(), wal.next_lsn());
            drop(wal);
            let mut sizes = Vec::new();
            let replayed = Wal::replay(&reopen(dir.path()), generation, end.lsn, |_, p| {
                sizes.push(p.len());
                Ok(())
            })
            .unwrap();
            assert_eq!(replayed.lsn, appended);
            assert_eq!(sizes.len(), n + 2);
            assert_eq!(sizes[n], big.len());
        }
        assert_eq!(Wal::buffer_bytes(1 << 20, true), 0);
    }

    /// A tail written out unsynced up to a block boundary leaves nothing in DRAM; the next
    /// flush then only syncs (it once asked the device for a write of zero bytes).
    #[test]
    fn a_flush_after_a_write_out_that_ended_on_a_block_boundary_only_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, end) = started(files(dir.path()), 0);
        let wal = wal.with_tail_limit(BLOCK as usize);
        let payload = vec![9u8; (BLOCK - FRAME_HEADER) as usize];
        wal.append(&payload).unwrap();
        assert_eq!(wal.tail.lock().buf.len(), 0);
        assert_eq!(wal.durable_lsn(), end.lsn);
        let syncs = wal.counters.syncs.get();
        wal.flush().unwrap();
        assert_eq!(wal.durable_lsn(), end.lsn + BLOCK);
        assert_eq!(wal.counters.syncs.get(), syncs + 1);
    }

    /// Write-outs at the tail limit (the appender's) overlapping group commits (another
    /// thread's flushes): every frame comes back whole and in order, so no write's zero
    /// padding landed on frames a later write had put there, and every flush covered what
    /// was appended before it.
    #[test]
    fn write_outs_at_the_limit_overlapping_flushes_keep_every_frame() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, end) = started(files(dir.path()), 0);
        let wal = wal.with_tail_limit(2 * BLOCK as usize);
        let frame = |i: u64| -> Vec<u8> {
            let len = 1 + (i * 613) % 1_500;
            (0..len).map(|j| (i * 13 + j * 5) as u8).collect()
        };
        let n = 6_000u64;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    let target = wal.next_lsn();
                    wal.flush_to(target).unwrap();
                    assert!(wal.durable_lsn() >= target);
                }
            });
            for i in 0..n {
                wal.append(&frame(i)).unwrap();
            }
            stop.store(true, Ordering::Release);
        });
        wal.flush().unwrap();
        assert!(
            wal.counters.syncs.get() > 10,
            "the flusher ran: {:?}",
            wal.counters
        );
        let (generation, appended) = (wal.generation(), wal.next_lsn());
        drop(wal);
        replays_exactly(dir.path(), (generation, end.lsn), n, appended, frame);
    }

    /// A power loss after tails were written out unsynced, on a device that tears unsynced
    /// writes per sector (with a write-behind thread too: then which writes are still unsynced
    /// at the cut depends on its timing, so such a failure may not replay exactly): replay returns a prefix of the frames appended, with every frame
    /// up to the last flush, each whole — whether a write-out came from a flush or from the
    /// tail limit, and whether later unsynced writes rewrote the flushed end's block.
    #[test]
    fn power_loss_after_unsynced_write_outs_keeps_every_flushed_frame() {
        use crate::device::{BlockCrashConfig, SimPower};
        for (seed, behind) in (0..12u64).flat_map(|s| [(s, false), (s, true)]) {
            let power = SimPower::new(BlockCrashConfig {
                torn_survival: 0.5,
                seed,
                ..BlockCrashConfig::default()
            });
            let make = |i: usize| -> LogFile {
                BlockDevice::simulated(&format!("log{i}"), 4096, 512, &power)
                    .unwrap()
                    .into()
            };
            let (wal, end) = started([make(0), make(1)], 0);
            let wal = Arc::new(wal.with_tail_limit(BLOCK as usize));
            // With a write-behind thread, write-outs also come from it, racing the appends.
            let writer = behind.then(|| wal.spawn_write_behind().unwrap().unwrap());
            let frame = |i: u64| -> Vec<u8> {
                let len = 40 + (i * 977 + seed * 131) % 3_000;
                (0..len).map(|j| (i * 7 + j) as u8).collect()
            };
            let total = 200 + seed * 7;
            let flush_after = 60 + seed * 9;
            let mut flushed = 0;
            for i in 0..total {
                wal.append(&frame(i)).unwrap();
                if i + 1 == flush_after {
                    wal.flush().unwrap();
                    flushed = i + 1;
                }
            }
            assert!(
                wal.counters.bytes_written.get() > 64 * BLOCK,
                "written out meanwhile"
            );
            let generation = wal.generation();
            power.cut();
            drop(writer);
            let images: Vec<Vec<u8>> = wal
                .files()
                .iter()
                .map(|f| match f {
                    LogFile::Block(d) => d.durable_image().unwrap(),
                    LogFile::Pmem(_) => unreachable!(),
                })
                .collect();
            drop(wal);
            let power = SimPower::new(BlockCrashConfig::default());
            let files: [LogFile; 2] = [0, 1].map(|i| {
                BlockDevice::simulated_from(&format!("log{i}"), images[i].clone(), 512, &power)
                    .unwrap()
                    .into()
            });
            let mut got = 0u64;
            Wal::replay(&files, generation, end.lsn, |_, p| {
                assert_eq!(p, &frame(got)[..], "seed {seed} ({behind}): frame {got}");
                got += 1;
                Ok(())
            })
            .unwrap();
            assert!(
                (flushed..=total).contains(&got),
                "seed {seed} ({behind}): {got} frames back, {flushed} flushed of {total}"
            );
        }
    }

    /// Waits until `done` holds, failing the test if it never does (a generous bound: this
    /// checks that the write-behind thread acts at all, not how fast).
    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Once the tail holds half its limit, the write-behind thread writes it out (unsynced)
    /// and appenders do not; with appends, flushes and write-behind racing, every frame comes
    /// back whole and in order.
    #[test]
    fn the_write_behind_thread_writes_the_tail_out_and_keeps_every_frame() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, end) = started(files(dir.path()), 0);
        let limit = 16 * BLOCK as usize;
        let wal = Arc::new(wal.with_tail_limit(limit));
        let writer = wal.spawn_write_behind().unwrap().expect("a log in files");
        let frame = |i: u64| -> Vec<u8> {
            let len = 1 + (i * 613) % 1_500;
            (0..len).map(|j| (i * 13 + j * 5) as u8).collect()
        };
        // Half the limit, not all of it: only the thread may write this out.
        let mut i = 0u64;
        while wal.tail.lock().buf.len() < limit / 2 {
            wal.append(&frame(i)).unwrap();
            i += 1;
        }
        wait_for("the write-behind thread wrote the tail", || {
            wal.counters.writes_behind.get() == 1
        });
        assert!(wal.written.load(Ordering::Acquire) >= wal.next_lsn());
        assert_eq!(wal.durable_lsn(), end.lsn, "written out, not synced");
        assert!(
            wal.tail.lock().buf.len() < BLOCK as usize,
            "only a partial block left"
        );
        // Appends racing write-behind and group commits.
        let n = 6_000u64;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let flusher = s.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    let target = wal.next_lsn();
                    wal.flush_to(target).unwrap();
                    assert!(wal.durable_lsn() >= target);
                }
            });
            while i < n {
                wal.append(&frame(i)).unwrap();
                i += 1;
            }
            stop.store(true, Ordering::Release);
            flusher.join().unwrap();
        });
        wal.flush().unwrap();
        drop(writer);
        let (generation, appended) = (wal.generation(), wal.next_lsn());
        drop(wal);
        replays_exactly(dir.path(), (generation, end.lsn), n, appended, frame);
    }

    /// A new log on simulated devices whose every write and sync fails once it is started.
    fn started_failing() -> (Wal, LogEnd) {
        use crate::device::{BlockCrashConfig, SimPower};
        let make = |power: &Arc<SimPower>| -> [LogFile; 2] {
            [0, 1].map(|i| {
                BlockDevice::simulated(&format!("log{i}"), 4096, 512, power)
                    .unwrap()
                    .into()
            })
        };
        // The syncs starting a log takes, after which every write fails.
        let probe = SimPower::new(BlockCrashConfig::default());
        let _ = started(make(&probe), 0);
        let power = SimPower::new(BlockCrashConfig {
            fail_syncs_after: Some(probe.syncs()),
            ..BlockCrashConfig::default()
        });
        started(make(&power), 0)
    }

    /// A write-out by the write-behind thread that fails fails the log: the next append and
    /// every flush report the error, and nothing is reported durable.
    #[test]
    fn a_failed_write_behind_fails_later_appends_and_flushes() {
        let (wal, end) = started_failing();
        let limit = 16 * BLOCK as usize;
        let wal = Arc::new(wal.with_tail_limit(limit));
        let _writer = wal.spawn_write_behind().unwrap().unwrap();
        let payload = vec![1u8; 1000];
        // The write-behind thread may run (and fail the log) while the tail is still filling:
        // then an append here already reports the failure, which is what is checked below.
        while wal.tail.lock().buf.len() < limit / 2 {
            if let Err(err) = wal.append(&payload) {
                assert!(matches!(&err, Error::ReadOnly { .. }), "{err}");
                break;
            }
        }
        wait_for("the failed write-behind failed the log", || {
            wal.broken.load(Ordering::Acquire)
        });
        let err = wal.append(&payload).unwrap_err();
        assert!(
            matches!(&err, Error::ReadOnly { reason, .. } if reason.contains("injected")),
            "{err}"
        );
        assert!(matches!(wal.flush(), Err(Error::ReadOnly { .. })));
        assert_eq!(wal.durable_lsn(), end.lsn);
        assert_eq!(wal.counters.writes_behind.get(), 0);
    }

    /// A write-out whose write fails has taken its frames off the tail already: it fails the
    /// log itself (in the code, before it lets another write-out run), and nothing after it
    /// is reported written or durable.
    #[test]
    fn a_failed_write_out_fails_the_log_before_the_next_one_runs() {
        let (wal, end) = started_failing();
        for _ in 0..3 {
            wal.append(&[4u8; 3000]).unwrap();
        }
        assert!(wal.write_out(false).is_err());
        assert!(
            wal.broken.load(Ordering::Acquire),
            "failed by the write-out itself"
        );
        assert_eq!(wal.written.load(Ordering::Acquire), end.lsn);
        assert!(matches!(wal.write_out(true), Err(Error::ReadOnly { .. })));
        assert!(matches!(wal.flush(), Err(Error::ReadOnly { .. })));
        assert!(matches!(wal.append(b"x"), Err(Error::ReadOnly { .. })));
        assert_eq!(wal.durable_lsn(), end.lsn);
    }

    /// Replay reads the file in 1 MiB chunks: frames larger than a chunk and frames that
    /// straddle chunk boundaries come back whole and in order, and the end is found after them.
    #[test]
    fn replay_streams_frames_across_chunk_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let (wal, end) = started(f, 0);
        // Sizes from a few bytes to 2.5 MiB, so that boundaries fall at every offset mod 8.
        let sizes: Vec<usize> = (0..40usize)
            .map(|i| match i % 7 {
                0 => 2_600_000 + i,
                1 => 700_000 + 8 * i,
                _ => 1 + i * 13_001,
            })
            .collect();
        let payload =
            |i: usize| -> Vec<u8> { (0..sizes[i]).map(|j| (i * 31 + j * 7) as u8).collect() };
        for i in 0..sizes.len() {
            wal.append(&payload(i)).unwrap();
        }
        wal.flush().unwrap();
        let (generation, appended) = (wal.generation(), wal.next_lsn() - end.lsn);
        drop(wal);
        let files = reopen(dir.path());
        let mut next = 0;
        let replayed = Wal::replay(&files, generation, end.lsn, |_, p| {
            assert_eq!(p, &payload(next)[..], "frame {next}");
            next += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(next, sizes.len());
        assert_eq!(replayed.lsn, end.lsn + appended);
    }

    /// Crash-simulated log regions as a reboot after a power loss finds them.
    fn after_power_loss(files: &[LogFile; 2]) -> [LogFile; 2] {
        use crate::device::{CrashSimConfig, RegionOptions};
        files.each_ref().map(|f| {
            let image = f.region().unwrap().power_loss().unwrap();
            PmemRegion::from_image(&image, CrashSimConfig::default(), &RegionOptions::default())
                .unwrap()
                .into()
        })
    }

    fn payload_of(i: usize) -> Vec<u8> {
        (0..(i * 37) % 700 + 1)
            .map(|j| (i * 13 + j) as u8)
            .collect()
    }

    /// The log on persistent-memory region files: frames appended, persisted without any
    /// file sync, carried across a generation switch, and read back after the regions are
    /// reopened; a region grows ahead of an active log.
    #[test]
    fn nvm_log_in_region_files_replays_across_generations() {
        use crate::device::RegionOptions;
        let dir = tempfile::tempdir().unwrap();
        let path = |i: usize| dir.path().join(format!("log{i}.nvm"));
        let opts = RegionOptions::default();
        let files: [LogFile; 2] =
            [0, 1].map(|i| PmemRegion::create(&path(i), 4096, &opts).unwrap().into());
        let (wal, end) = started(files, 4096);
        for i in 0..300 {
            wal.append(&payload_of(i)).unwrap();
            if i % 3 == 0 {
                wal.flush().unwrap();
            }
        }
        let (generation, _) = wal.switch_generation().unwrap();
        for i in 300..600 {
            wal.append(&payload_of(i)).unwrap();
        }
        wal.flush().unwrap();
        assert_eq!(wal.counters.syncs.get(), 0, "no file sync on NVM");
        assert!(wal.counters.persists.get() >= 100);
        let appended = wal.next_lsn();
        let since_start = appended - end.lsn;
        wal.prepare_ahead().unwrap();
        let (_, gen_start) = (wal.generation(), wal.tail.lock().gen_start);
        assert!(
            wal.files()[generation as usize % 2].len()
                >= BLOCK + (appended - gen_start) + (2 * since_start).min(PREPARE_AHEAD_MAX),
            "a region file grows ahead of an active log"
        );
        drop(wal);
        let files: [LogFile; 2] = [0, 1].map(|i| PmemRegion::open(&path(i), &opts).unwrap().into());
        let mut next = 0;
        // Redo from the generation before the switch reads both files in order.
        let replayed = Wal::replay(&files, generation - 1, end.lsn, |_, p| {
            assert_eq!(p, &payload_of(next)[..], "frame {next}");
            next += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(next, 600);
        assert_eq!(replayed.lsn, appended);
        assert_eq!(replayed.generation, generation);
    }

    /// Power lost at every persist point of a crash-simulated NVM log, unfenced lines
    /// surviving at random: replay returns every frame acknowledged (flushed) before the
    /// loss, in order and intact, and nothing that was never appended.
    #[test]
    fn nvm_log_keeps_every_acknowledged_frame_at_every_persist_point() {
        use crate::device::{CrashSimConfig, RegionOptions};
        let region = |config| -> LogFile {
            PmemRegion::simulated(4096, config, &RegionOptions::default())
                .unwrap()
                .into()
        };
        let run = |crash: Option<u64>| -> (usize, usize, u64) {
            let config = CrashSimConfig {
                crash_after_fences: crash,
                unflushed_survival: 0.5,
                seed: crash.unwrap_or(0),
                ..CrashSimConfig::default()
            };
            // Generation 2 (after the resume) lives in file 0, which loses power.
            let files = [region(config), region(CrashSimConfig::default())];
            Wal::format(&files, 0).unwrap();
            let end = Wal::replay(&files, 1, 0, |_, _| Ok(())).unwrap();
            let crashed = |w: &Wal| w.files()[0].region().unwrap().crashed();
            let (mut acked, mut appended) = (0, 0);
            let mut points = 0;
            if let Ok(wal) = Wal::resume(files, end) {
                for i in 0..120 {
                    if crashed(&wal) {
                        break;
                    }
                    wal.append(&payload_of(i)).unwrap();
                    appended = i + 1;
                    if i % 4 != 1 {
                        wal.flush().unwrap();
                        if !crashed(&wal) {
                            acked = i + 1;
                        }
                    }
                }
                points = wal.files()[0].region().unwrap().persist_points();
                let files = after_power_loss(wal.files());
                let mut got = 0;
                Wal::replay(&files, 1, 0, |_, p| {
                    assert_eq!(p, &payload_of(got)[..], "crash {crash:?}: frame {got}");
                    got += 1;
                    Ok(())
                })
                .unwrap();
                assert!(
                    got >= acked && got <= appended,
                    "crash {crash:?}: replayed {got}, acknowledged {acked}, appended {appended}"
                );
                return (acked, got, points);
            }
            (acked, 0, points)
        };
        let (acked, got, total) = run(None);
        assert_eq!((acked, got), (120, 120));
        assert!(total >= 90, "{total} persist points");
        for n in 1..=total {
            run(Some(n));
        }
    }

    /// After a process crash a region shows frames stored but never persisted; replay hands
    /// them to redo, so it must make them durable: a power loss after the replay keeps every
    /// frame the replay returned.
    #[test]
    fn replay_persists_frames_it_read_from_a_region() {
        use crate::device::{CrashSimConfig, RegionOptions};
        let region = || -> LogFile {
            PmemRegion::simulated(4096, CrashSimConfig::default(), &RegionOptions::default())
                .unwrap()
                .into()
        };
        let files = [region(), region()];
        let (wal, _) = started(files, 0);
        for i in 0..30 {
            wal.append(&payload_of(i)).unwrap();
            if i == 9 {
                wal.flush().unwrap();
            }
        }
        // The "process crash": the mapping still shows all 30 frames, 10 of them persisted.
        let mut seen = 0;
        Wal::replay(wal.files(), 1, 0, |_, _| {
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 30);
        let files = after_power_loss(wal.files());
        let mut after = 0;
        Wal::replay(&files, 1, 0, |_, p| {
            assert_eq!(p, &payload_of(after)[..]);
            after += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            after, 30,
            "frames replayed once must survive a later power loss"
        );
    }

    /// `append_with`: the builder sees the frame's LSN; a builder's error appends nothing and
    /// leaves the log working; a frame built but not stored (here: too long) fails the log at
    /// once, so no later frame (of another appender) can follow it.
    #[test]
    fn a_built_frame_that_cannot_be_stored_fails_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (wal, end) = started(files(dir.path()), 0);
        let mut frame = Vec::new();
        let mut seen = None;
        let after = wal
            .append_with(&mut frame, |lsn, p| {
                seen = Some(lsn);
                p.extend_from_slice(b"first");
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, Some(end.lsn));
        assert_eq!(wal.next_lsn(), after);
        let refused = wal.append_with(&mut frame, |_, p| {
            p.extend_from_slice(b"never");
            Err(Error::InvalidArgument("no".into()))
        });
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{refused:?}"
        );
        assert_eq!(wal.next_lsn(), after, "nothing appended");
        let too_long = wal.append_with(&mut frame, |_, p| {
            p.resize(MAX_FRAME + 1, 7);
            Ok(())
        });
        assert!(
            matches!(too_long, Err(Error::ReadOnly { .. })),
            "{too_long:?}"
        );
        assert!(matches!(wal.append(b"later"), Err(Error::ReadOnly { .. })));
        let later = wal.append_with(&mut frame, |_, p| {
            p.extend_from_slice(b"later");
            Ok(())
        });
        assert!(matches!(later, Err(Error::ReadOnly { .. })), "{later:?}");
        assert_eq!(wal.next_lsn(), after);
    }
}
