//! The buffer manager: a DRAM pool of page frames over a block device, with a page table,
//! Clock replacement, shared and exclusive page latches, checksummed write-back that obeys
//! the write-ahead rule, and fuzzy flushing for checkpoints.
//!
//! Owns: frames and their latches, which page is in which frame, choosing and writing back
//! victims, checksums of pages on media, growing the page file, and the pool's counters.
//! Must not touch: what is inside a page beyond the common prefix every page starts with
//! (checksum, LSN and page id, see [`PAGE_PREFIX`]), or the log's format — the log is reached
//! only through [`WalRule`].
//!
//! Frames have hybrid latches ([`crate::sync::HybridLatch`]): besides shared and exclusive
//! fixes, a page in a whole DRAM frame can be read optimistically
//! ([`BufferPool::read_optimistic`]) — no write to the latch's line, the read validated
//! afterwards against the frame's version, which every exclusive fix (a change, a load, an
//! eviction) moves. See [`RacyPage`] for what such a read may see before it is validated.
//!
//! Rules it keeps:
//! - **WAL rule**: a page is written only after the log is durable up to the page's LSN.
//! - **No steal**: a page whose LSN is beyond what the log has been handed
//!   ([`WalRule::committed_lsn`]) holds changes of a batch still being applied; it is neither
//!   evicted nor written.
//! - A frame is reused only under its exclusive latch, and every fix re-checks the frame's
//!   page id after latching, so a fix racing an eviction retries instead of reading the wrong
//!   page.
//!
//! This is the SSD buffer manager design of the three-tier paper (DRAM over a block device,
//! page-grained); with a budget larger than the data it is the main-memory design. With an
//! [`nvm::NvmTier`] ([`BufferPool::with_nvm`]) it is the three-tier design with page-grained
//! NVM: a DRAM miss is served from NVM when the page has a slot there, a page leaving DRAM
//! goes to its slot or asks for one (admission), and only NVM victims and refused pages
//! reach the page file. Point reads of leaves load a page from NVM a cache line at a time
//! ([`lines`], the paper's cache-line-grained pages and mini pages;
//! [`BufferPool::fix_lines`]).
//!
//! **Pointer swizzling** ([`BufferPool::with_swizzling`]): a child reference in a page (a
//! [`Swip`]) whose child is in a DRAM frame may be rewritten, in the parent's frame only, to
//! name that frame (top bit set), so a descent reaches the child without the page table.
//! The page format tells the pool where a page's child references are (the callback given
//! to `with_swizzling`); nothing else of the format is read. Rules:
//! - a swip is swizzled and unswizzled only under the parent frame's exclusive latch, and
//!   only from a parent version the swizzler read the swip at ([`ParentRef`]);
//! - a frame whose page holds swizzled children is never evicted; a swizzled child is
//!   evicted only after its parent's swip holds its page id again (the evictor takes the
//!   parent's latch without waiting, or picks another victim);
//! - every exclusive fix ([`BufferPool::fix_exclusive`], [`BufferPool::fix_new`]) first
//!   unswizzles the page's children, so a change, a log image or a split of a page sees
//!   page ids only;
//! - no byte that leaves DRAM (a write-back copy, a page handed to NVM) holds a swizzled
//!   swip: copies are unswizzled, and a victim has no swizzled children;
//! - swizzling writes no log record and dirties nothing: the page's meaning is unchanged.
//!
//! With [`BufferPool::new_direct`] it is the NVM-direct design: every frame is its page in
//! persistent memory ([`direct`]), mapped from the start, never loaded, evicted or written
//! back; changes are made in place after their lines' old bytes are in the undo log, and
//! [`BufferPool::direct_commit`] persists a batch's changed lines.

pub mod ace;
pub mod direct;
mod lines;
pub mod nvm;
pub mod policy;
mod table;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLockReadGuard};

use crate::device::{AlignedBuf, BlockDevice, Counter, Io, RacyView};
use crate::error::{Error, Result};
use crate::sync::{HybridLatch, HybridWriteGuard};
pub use lines::{ChangedLines, Charged, Fixed, ForWrite, MINI_PAGE_BYTES, PageBytes, PageLines};

/// Bytes every page starts with: `u32` checksum (crc32c of bytes 4..), `u32` owned by the
/// page's format, `u64` page LSN, `u64` page id.
pub const PAGE_PREFIX: usize = 24;
const NO_PAGE: u64 = u64::MAX;
/// Spare frames for reads of a frozen pool that no frame can take
/// ([`BufferPool::read_private`]): a descent holds two pages at a time, so this many readers
/// at once.
const SPARE_FRAMES: usize = 64;
/// Rounds over the spare frames (yielding between them) before such a read is refused.
const SPARE_ROUNDS: usize = 1000;
/// Pages written back in one batch by [`BufferPool::flush_dirty`].
const FLUSH_BATCH: usize = 64;
/// The top bit of a [`Swip`]: set, the rest is a frame index.
const SWIZZLED: u64 = 1 << 63;
/// [`Frame::swizzled_in`] of a frame no swip names.
const NOT_SWIZZLED: u64 = u64::MAX;

/// A child reference as an inner page holds it (8 bytes, little-endian): a page id, or —
/// swizzled, top bit set — the index of the DRAM frame that holds the child
/// ([`BufferPool::with_swizzling`]). Page ids never have the top bit set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Swip(u64);

impl Swip {
    /// The swip stored as `word`.
    #[inline]
    pub const fn from_word(word: u64) -> Swip {
        Swip(word)
    }
    /// The page id, unless the swip is swizzled ([`BufferPool::resolve`] names it then).
    #[inline]
    pub const fn page_id(self) -> Option<u64> {
        if self.0 & SWIZZLED == 0 {
            Some(self.0)
        } else {
            None
        }
    }
    #[inline]
    fn frame(self) -> Option<usize> {
        (self.0 & SWIZZLED != 0).then_some((self.0 & !SWIZZLED) as usize)
    }
}

/// An inner page held shared, as [`BufferPool::try_swizzle`] needs it: its frame, its id, and
/// the version its bytes were read at.
#[derive(Clone, Copy, Debug)]
pub struct ParentRef {
    frame: u32,
    pid: u64,
    version: u32,
}

/// Where a page's child references are: pushes the byte offset of each 8-byte [`Swip`] in
/// `page` to `out` (none for a page without children).
pub type ChildRefs = fn(page: &[u8], out: &mut Vec<usize>);

/// The swip stored at byte `at` of `page` (a [`ChildRefs`] offset: in the page).
fn swip_at(page: &[u8], at: usize) -> Swip {
    Swip(u64::from_le_bytes(
        page[at..at + 8].try_into().expect("8 bytes"),
    ))
}

/// Stores `word` as the swip at byte `at` of `page`.
fn put_swip(page: &mut [u8], at: usize, word: u64) {
    page[at..at + 8].copy_from_slice(&word.to_le_bytes());
}

/// [`Frame::swizzled_in`] for the swip at byte `at` of frame `parent`'s page.
fn swizzle_link(parent: usize, at: usize) -> u64 {
    (parent as u64) << 32 | at as u64
}

/// The parent frame and byte offset a [`Frame::swizzled_in`] names.
fn link_parts(link: u64) -> (usize, usize) {
    ((link >> 32) as usize, (link & 0xffff_ffff) as usize)
}

/// How long a fix waits for a latched frame before it checks that the frame is still its
/// page's ([`BufferPool::latch_mapped`]).
const LATCH_POLL: std::time::Duration = std::time::Duration::from_micros(200);
/// Cache lines of a page [`BufferPool::prefetch`] hints at: the header and the slots of about
/// 70 entries, where a search starts.
const PREFETCH_LINES: usize = 8;
/// Clock sweeps before the pool is declared exhausted.
const VICTIM_SWEEPS: usize = 256;

/// The log as the buffer manager sees it.
pub trait WalRule: Send + Sync {
    /// Highest LSN handed to the log (changes up to it belong to complete batches).
    fn committed_lsn(&self) -> u64;
    /// Makes the log durable up to `lsn`.
    fn flush_to(&self, lsn: u64) -> Result<()>;
}

/// A frame's contents, behind its latch.
#[derive(Debug)]
pub struct FrameData {
    pid: u64,
    /// This frame's index (never changes).
    frame: u32,
    buf: AlignedBuf,
    /// The page failed its checksum when loaded (only with [`Verify::No`]).
    pub torn: bool,
    /// Set while the page is loaded from its NVM slot a cache line at a time.
    lines: Option<lines::LineState>,
}

#[derive(Debug)]
struct Frame {
    data: HybridLatch<FrameData>,
    referenced: AtomicBool,
    /// A checkpoint is writing a copy of this page: it must not be evicted meanwhile (its own
    /// write could land after the checkpoint's older copy).
    io_busy: AtomicBool,
    dirty_version: AtomicU64,
    clean_version: AtomicU64,
    /// Lines changed since the frame last matched its page's NVM slot.
    changed: lines::ChangedLines,
    /// The NVM slot tenancy (packed, `u64::MAX`: none) whose bytes the frame matches
    /// outside `changed`: set when the page is read from its slot or written there.
    tenancy: AtomicU64,
    /// NVM direct: the page passed the format's structural check in this run (pages are
    /// never loaded, so each is checked when first fixed instead).
    checked: AtomicBool,
    /// Where the frame's page bytes are: a buffer is never replaced, so [`BufferPool::prefetch`]
    /// may hint at them without the latch.
    page_addr: usize,
    /// The frame's bytes for optimistic readers (`None`: a heap buffer, never read so).
    racy: Option<RacyView>,
    /// The swip naming this frame: parent frame index << 32 | byte offset in the parent, or
    /// [`NOT_SWIZZLED`]. Set and cleared under the parent's exclusive latch while this
    /// frame is latched (shared, to swizzle; exclusive, to evict) or its parent is changed.
    swizzled_in: AtomicU64,
    /// The page id a swip naming this frame stands for (constant while it is swizzled).
    swizzled_pid: AtomicU64,
    /// Swizzled swips in this frame's page (changed under its exclusive latch): a frame
    /// with any is never evicted.
    swizzled_children: AtomicU32,
}

impl Frame {
    fn new(index: usize, pid: u64, buf: AlignedBuf, changed: lines::ChangedLines) -> Frame {
        Frame {
            page_addr: buf.as_ptr() as usize,
            racy: buf.racy_view(),
            swizzled_in: AtomicU64::new(NOT_SWIZZLED),
            swizzled_pid: AtomicU64::new(NO_PAGE),
            swizzled_children: AtomicU32::new(0),
            data: HybridLatch::new(FrameData {
                pid,
                frame: index as u32,
                buf,
                torn: false,
                lines: None,
            }),
            referenced: AtomicBool::new(false),
            io_busy: AtomicBool::new(false),
            dirty_version: AtomicU64::new(0),
            clean_version: AtomicU64::new(0),
            changed,
            tenancy: AtomicU64::new(u64::MAX),
            checked: AtomicBool::new(false),
        }
    }

    fn tenancy(&self) -> Option<nvm::Tenancy> {
        nvm::Tenancy::unpack(self.tenancy.load(Ordering::Acquire))
    }

    fn set_tenancy(&self, t: Option<nvm::Tenancy>) {
        self.tenancy
            .store(t.map_or(u64::MAX, nvm::Tenancy::pack), Ordering::Release);
    }

    #[inline]
    fn mark_referenced(&self) {
        mark_referenced(&self.referenced);
    }

    /// Readies a frame just taken for a page: not torn, clean.
    fn reset(&self, guard: &mut FrameData) {
        guard.torn = false;
        self.changed.clear();
        self.set_tenancy(None);
        let v = self.dirty_version.load(Ordering::Acquire);
        self.clean_version.store(v, Ordering::Release);
    }

    fn dirty(&self) -> bool {
        self.dirty_version.load(Ordering::Acquire) != self.clean_version.load(Ordering::Acquire)
    }

    /// Waits until no write-back of a copy of this frame is in flight; the caller holds the
    /// frame's exclusive latch, so none starts meanwhile. A frame with lines missing must
    /// keep its slot pinned until such a write is done: the copy can only be written into
    /// that slot, by its changed lines (checkpoints and ACE write copies without the latch).
    fn wait_for_write_back(&self) {
        let mut round = 0;
        while self.io_busy.load(Ordering::Acquire) {
            crate::sync::backoff(&mut round);
        }
    }
}

/// Sets a Clock bit (of a frame or a mini frame), writing only when it is clear: on a hot
/// page (the root) an unconditional store would move its line between the cores on every fix.
#[inline]
fn mark_referenced(bit: &AtomicBool) {
    if !bit.load(Ordering::Relaxed) {
        bit.store(true, Ordering::Relaxed);
    }
}

/// How [`BufferPool::load`] fills a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// Read the whole page (from NVM or the page file).
    Whole,
    /// A new page: zeroes, no read.
    Fresh,
    /// From a trusted NVM slot, a cache line at a time on first touch; else whole.
    Lines,
}

/// Whether a load checks the page's checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verify {
    /// A checksum mismatch is an [`Error::Corrupt`].
    Yes,
    /// Load anyway and mark the frame [`FrameData::torn`] (restart, which repairs torn pages
    /// from logged images).
    No,
}

/// Where [`BufferPool::read_page`] found a page's bytes.
#[derive(Clone, Copy, Debug)]
struct PageSource {
    /// Its NVM slot: whether the slot's bytes are trusted ([`nvm::NvmTier::read`]), and the
    /// slot's tenancy.
    nvm: Option<(bool, nvm::Tenancy)>,
    /// Zeros: a new page, or one past the file's end (never written on media).
    zeroed: bool,
}

impl PageSource {
    const ZEROED: PageSource = PageSource {
        nvm: None,
        zeroed: true,
    };
}

/// Pool counters (always on).
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Fixes served from DRAM.
    pub hits: Counter,
    /// Fixes that read the page from the device.
    pub misses: Counter,
    /// Frames reused for another page.
    pub evictions: Counter,
    /// Pages written to the device (evictions and checkpoints).
    pub page_writes: Counter,
    /// Pages written back because they were evicted dirty.
    pub dirty_evictions: Counter,
    /// Write-back batches of an eviction (one per dirty victim).
    pub write_back_batches: Counter,
    /// Dirty pages written together with a dirty victim and kept cached (ACE's write-ahead).
    pub written_ahead: Counter,
    /// Pages brought into mini pages (from NVM, for point reads).
    pub mini_loads: Counter,
    /// Mini pages left for a full frame (a read needed more than 16 lines, or another fix
    /// the whole page).
    pub mini_promotions: Counter,
    /// Mini pages evicted by their Clock.
    pub mini_evictions: Counter,
    /// Swips rewritten to name their child's frame ([`BufferPool::with_swizzling`]).
    pub swizzles: Counter,
    /// Swizzled swips given their page id back (the child's eviction, or a change of the
    /// parent).
    pub unswizzles: Counter,
    /// Fixes that followed a swizzled swip (no page-table lookup).
    pub swizzled_fixes: Counter,
    /// Pages read into a spare frame outside the page table, as no frame could take them: the
    /// store is read-only and every frame holds changes that can no longer be written back.
    pub private_reads: Counter,
}

/// Options of a pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolOptions {
    /// Page size in bytes (a power of two, 4–64 KiB).
    pub page_size: usize,
    /// DRAM budget for frames in bytes.
    pub dram_bytes: u64,
    /// The page format's structural check, run on every page loaded intact from media (so
    /// that code above may trust a fixed page's layout): `Err` describes the damage.
    pub check: fn(&[u8], u64) -> std::result::Result<(), String>,
}

/// The buffer pool. See the module docs.
pub struct BufferPool {
    device: BlockDevice,
    page_size: usize,
    frames: Box<[Frame]>,
    /// Where frame 0's page bytes are when frame `i`'s follow at `i` pages from them (frames
    /// carved from one mapping): [`BufferPool::prefetch`] then computes a page's address
    /// instead of loading it from its frame, a cache miss of its own.
    pages_base: Option<usize>,
    table: table::PageTable,
    free: Mutex<Vec<u32>>,
    hand: AtomicUsize,
    wal: Arc<dyn WalRule>,
    check: fn(&[u8], u64) -> std::result::Result<(), String>,
    grow: Mutex<()>,
    /// A page write failed: dirty frames are no longer chosen as victims.
    write_failed: AtomicBool,
    /// Frames outside the page table for reads of a frozen pool that no frame can take
    /// ([`BufferPool::read_private`]); made on first use.
    spares: std::sync::OnceLock<Box<[Frame]>>,
    /// A page was read from the device after frames had been evicted: the data has outgrown
    /// the pool, and a fix may wait for a device read ([`BufferPool::outgrown`]).
    outgrown: AtomicBool,
    /// What made a write-back fail first (for the read-only errors that follow).
    write_failure: Mutex<Option<String>>,
    /// Dirty pages written per eviction of a dirty victim (ACE's `n_w`; 1 = plain Clock).
    write_back_batch: usize,
    /// The persistent-memory tier between the frames and the page file, if any.
    nvm: Option<nvm::NvmTier>,
    /// Point reads load NVM pages a cache line at a time ([`BufferPool::fix_lines`]).
    line_grained: bool,
    /// Lines not yet loaded hold [`lines::POISON`] (a debug mode).
    poison_lines: bool,
    /// Mini pages for point reads of pages in NVM (none unless configured).
    minis: Box<[lines::MiniFrame]>,
    mini_free: Mutex<Vec<u32>>,
    mini_hand: AtomicUsize,
    /// NVM direct: the frames are the pages of this region.
    direct: Option<Arc<direct::DirectPages>>,
    /// Pointer swizzling is on: where pages hold their child references.
    child_refs: Option<ChildRefs>,
    /// Counters.
    pub counters: PoolCounters,
}

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("frames", &self.frames.len())
            .field("page_size", &self.page_size)
            .finish()
    }
}

/// A dirty page copied for writing back while its frame stays cached.
struct PageCopy {
    frame: usize,
    pid: u64,
    /// The frame's dirty version the copy holds.
    version: u64,
    buf: AlignedBuf,
    /// The lines changed since the frame last matched its NVM slot in this tenancy
    /// (line-grained NVM only).
    changed: Option<(nvm::Tenancy, Vec<u64>)>,
    /// The frame's resident lines if some are missing (a page changed in place by lines):
    /// only its changed lines may be written, into its slot.
    resident: Option<Vec<u64>>,
}

/// A page fixed for reading: in a frame of the pool, or (a read of a frozen pool that no
/// frame can take, [`BufferPool::read_private`]) in a spare frame outside the page table.
#[derive(Debug)]
pub struct PageRead<'a> {
    guard: RwLockReadGuard<'a, FrameData>,
}

impl PageRead<'_> {
    /// The page's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.guard.buf
    }
    /// Page id.
    pub fn pid(&self) -> u64 {
        self.guard.pid
    }
}

/// Where an optimistic read of a page started ([`BufferPool::read_optimistic`]): the frame
/// and its latch's version then.
#[derive(Clone, Copy, Debug)]
pub struct Optimistic {
    frame: u32,
    version: u32,
    pid: u64,
}

/// A racing optimistic read saw bytes that cannot be a page's (an offset past its end):
/// the page is being changed. Retry, or fix the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torn;

/// The bytes of a page in a frame, read without its latch ([`BufferPool::read_optimistic`]
/// points it at a page; one serves a whole descent). Numbers and comparisons
/// ([`PageBytes::array`], [`PageBytes::compare`]) are atomic
/// loads of the aligned words that cover them, straight into registers; [`PageBytes::bytes`]
/// copies those words into a scratch buffer. A range outside the page is refused ([`Torn`]): a
/// writer may be changing the page meanwhile, so what is read — offsets, lengths, ids — is
/// garbage until [`BufferPool::validate`] says the frame's version did not move, and must only
/// steer further reads of this page until then.
///
/// The reads go through the frame's [`RacyView`], which says what a racing read may and may
/// not see.
#[derive(Debug)]
pub struct RacyPage<'a> {
    view: Option<&'a RacyView>,
    scratch: Vec<u8>,
}

impl RacyPage<'_> {
    #[inline(always)]
    fn le_bytes(&self, at: usize, n: usize) -> std::result::Result<u64, Torn> {
        self.view.and_then(|v| v.le_bytes(at, n)).ok_or(Torn)
    }
}

impl PageBytes for RacyPage<'_> {
    type Error = Torn;
    /// Up to 8 bytes (a wider read is [`Torn`]).
    #[inline]
    fn array<const N: usize>(&mut self, at: usize) -> std::result::Result<[u8; N], Torn> {
        let word = self.le_bytes(at, N)?.to_le_bytes();
        // `le_bytes` read them, so N <= 8.
        Ok(word[..N].try_into().expect("N <= 8 bytes"))
    }
    #[inline]
    fn compare(
        &mut self,
        at: usize,
        other: &[u8],
    ) -> std::result::Result<std::cmp::Ordering, Torn> {
        // Eight bytes at a time, as big-endian numbers (their order is the bytes' order).
        for (i, chunk) in other.chunks(8).enumerate() {
            let n = chunk.len();
            let mine = self.le_bytes(at + 8 * i, n)?.swap_bytes() >> (64 - 8 * n);
            let mut theirs = [0u8; 8];
            theirs[8 - n..].copy_from_slice(chunk);
            let order = mine.cmp(&u64::from_be_bytes(theirs));
            if order.is_ne() {
                return Ok(order);
            }
        }
        Ok(std::cmp::Ordering::Equal)
    }
    #[inline]
    fn bytes(&mut self, at: usize, len: usize) -> std::result::Result<&[u8], Torn> {
        let view = self.view.ok_or(Torn)?;
        view.copy(at, len, &mut self.scratch).ok_or(Torn)
    }
}

/// A page fixed for writing.
#[derive(Debug)]
pub struct PageWrite<'a> {
    frame: &'a Frame,
    guard: HybridWriteGuard<'a, FrameData>,
    /// Changed lines are tracked (line-grained NVM: only they are written back).
    marks: bool,
}

impl PageWrite<'_> {
    /// The page's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.guard.buf
    }
    /// The page's bytes for changing; marks the page dirty, and every line changed (a
    /// frame whose page has an NVM slot writes it back whole).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.marks {
            self.frame.changed.mark_all_saving(&self.guard.buf);
        }
        self.frame.dirty_version.fetch_add(1, Ordering::AcqRel);
        &mut self.guard.buf
    }
    /// The page's bytes for changing, and the set where the caller marks each line it
    /// changes, if the pool tracks them (line-grained NVM: only those are written back to
    /// the page's slot); marks the page dirty.
    pub fn bytes_marking(&mut self) -> (&mut [u8], Option<&lines::ChangedLines>) {
        self.frame.dirty_version.fetch_add(1, Ordering::AcqRel);
        (
            &mut self.guard.buf,
            self.marks.then_some(&self.frame.changed),
        )
    }
    /// Page id.
    pub fn pid(&self) -> u64 {
        self.guard.pid
    }
    /// Frame state (the torn flag).
    pub fn state(&mut self) -> &mut FrameData {
        &mut self.guard
    }
}

fn checksum(page: &[u8]) -> [u8; 4] {
    crc32c::crc32c(&page[4..]).to_le_bytes()
}

/// Whether `page_size` is one the pool takes: a power of two from 4 to 64 KiB.
pub fn check_page_size(page_size: usize) -> Result<()> {
    if !page_size.is_power_of_two() || !(4096..=65536).contains(&page_size) {
        return Err(Error::InvalidArgument(format!(
            "page size {page_size}: must be a power of two from 4096 to 65536"
        )));
    }
    Ok(())
}

/// Sets the checksum of a page about to be written to media (by the pool's write-backs, or
/// without the pool when formatting a new file).
pub fn seal(page: &mut [u8]) {
    let sum = checksum(page);
    page[..4].copy_from_slice(&sum);
}

/// Whether a page read from media is intact: its checksum matches, or it was never written
/// (all zero).
fn intact(page: &[u8]) -> bool {
    page[..4] == checksum(page) || page.iter().all(|&b| b == 0)
}

/// The resident mask of a frame with lines missing (changed in place by lines), `None` for
/// a whole frame.
fn resident_if_partial(frame: &FrameData) -> Option<Vec<u64>> {
    frame.lines.as_ref().map(|state| state.resident().to_vec())
}

/// Fewest DRAM frames a pool has: a smaller budget is raised to this many pages (a B+-tree
/// refuses one at open instead).
pub const MIN_FRAMES: u64 = 16;

fn page_lsn(page: &[u8]) -> u64 {
    u64::from_le_bytes(page[8..16].try_into().expect("8 bytes"))
}

impl BufferPool {
    /// A pool over `device` with the given budget.
    pub fn new(device: BlockDevice, opts: PoolOptions, wal: Arc<dyn WalRule>) -> Result<Self> {
        let ps = opts.page_size;
        check_page_size(ps)?;
        let n = (opts.dram_bytes / ps as u64).max(MIN_FRAMES);
        if n > u32::MAX as u64 / 2 {
            return Err(Error::InvalidArgument(format!(
                "DRAM budget {} bytes is too large",
                opts.dram_bytes
            )));
        }
        // One mapping for all frames, on huge pages where the kernel has them, faulted in now:
        // the budget is what the user gave us, and a request must not pay a 2 MiB fault.
        let frames = AlignedBuf::carve(ps, n as usize, true)?
            .into_iter()
            .enumerate()
            .map(|(i, buf)| Frame::new(i, NO_PAGE, buf, lines::ChangedLines::new(ps)))
            .collect();
        let free = (0..n as u32).rev().collect();
        let table = table::PageTable::default();
        Ok(Self::of_frames(
            device, ps, frames, table, free, wal, opts.check, None,
        ))
    }

    /// A pool of `frames`, `table` mapping pages to them and `free` the unmapped ones.
    #[allow(clippy::too_many_arguments)]
    fn of_frames(
        device: BlockDevice,
        page_size: usize,
        frames: Vec<Frame>,
        table: table::PageTable,
        free: Vec<u32>,
        wal: Arc<dyn WalRule>,
        check: fn(&[u8], u64) -> std::result::Result<(), String>,
        direct: Option<Arc<direct::DirectPages>>,
    ) -> Self {
        let first = frames.first().map_or(0, |f| f.page_addr);
        let pages_base = frames
            .iter()
            .enumerate()
            .all(|(i, f)| f.page_addr == first + i * page_size)
            .then_some(first);
        BufferPool {
            device,
            page_size,
            pages_base,
            frames: frames.into_boxed_slice(),
            table,
            free: Mutex::new(free),
            hand: AtomicUsize::new(0),
            wal,
            check,
            grow: Mutex::new(()),
            write_failed: AtomicBool::new(false),
            spares: std::sync::OnceLock::new(),
            outgrown: AtomicBool::new(false),
            write_failure: Mutex::new(None),
            write_back_batch: 1,
            nvm: None,
            line_grained: false,
            poison_lines: false,
            minis: Box::new([]),
            mini_free: Mutex::new(Vec::new()),
            mini_hand: AtomicUsize::new(0),
            direct,
            child_refs: None,
            counters: PoolCounters::default(),
        }
    }

    /// The NVM-direct design: a pool whose frames are the pages of `region` (page `i` is
    /// frame `i`), all mapped from the start. `device` is the page file, which holds only the
    /// superblocks then. Pages are never loaded, so `check` runs on each non-zero page when
    /// it is first fixed (a damaged page is `Corrupt`, naming the region's file).
    pub fn new_direct(
        device: BlockDevice,
        region: crate::device::PagedRegion,
        pages: Vec<AlignedBuf>,
        check: fn(&[u8], u64) -> std::result::Result<(), String>,
        wal: Arc<dyn WalRule>,
    ) -> Result<Self> {
        let ps = region.page_size();
        check_page_size(ps)?;
        if pages.len() > u32::MAX as usize / 2 {
            return Err(Error::InvalidArgument(format!(
                "NVM region of {} pages is too large",
                pages.len()
            )));
        }
        let direct = Arc::new(direct::DirectPages::new(region)?);
        let table = table::PageTable::default();
        let mut frames = Vec::with_capacity(pages.len());
        for (i, buf) in pages.into_iter().enumerate() {
            table.insert(i as u64, i as u32)?;
            let changed = lines::ChangedLines::saving(ps, direct.clone(), i as u32);
            frames.push(Frame::new(i, i as u64, buf, changed));
        }
        let (free, direct) = (Vec::new(), Some(direct));
        Ok(Self::of_frames(
            device, ps, frames, table, free, wal, check, direct,
        ))
    }

    /// The NVM-direct pages, if this is that design.
    pub fn direct(&self) -> Option<&direct::DirectPages> {
        self.direct.as_deref()
    }

    /// NVM direct: makes the running batch durable. Persists the lines it changed, page by
    /// page (each read-latched, so no change is under way while its lines are flushed), then
    /// commits the undo log. A no-op in the other designs, and for a batch that changed
    /// nothing.
    pub fn direct_commit(&self) -> Result<()> {
        let Some(d) = &self.direct else {
            return Ok(());
        };
        let touched = d.touched()?;
        if touched.is_empty() {
            return Ok(());
        }
        let mut lines = 0;
        for i in touched {
            let frame = &self.frames[i as usize];
            let guard = frame.data.read();
            let changed = frame.changed.take();
            lines += changed
                .iter()
                .map(|w| u64::from(w.count_ones()))
                .sum::<u64>();
            d.region().flush_lines(&guard.buf, &changed)?;
        }
        d.commit(lines)
    }

    /// NVM direct: a batch failed half-way. Puts the old bytes of every line it changed back
    /// in place, from DRAM copies, and flushes them (what fails to flush is restored by
    /// restart from the undo log). Every page the batch changed is latched exclusively for
    /// the whole rollback, so readers see the batch's pages all as it left them or all
    /// restored; `restored` runs before they are released, with the restored bytes of page
    /// `watch` if the batch had changed it (the tree resets its root and count from the meta
    /// page there). The caller holds no page.
    pub fn direct_abort(&self, watch: u64, restored: impl FnOnce(Option<&[u8]>)) {
        let Some(d) = &self.direct else {
            return;
        };
        let saved = d.take_saved();
        let mut pids: Vec<u32> = saved.iter().map(|&(pid, ..)| pid).collect();
        pids.sort_unstable();
        pids.dedup();
        pids.retain(|&p| (p as usize) < self.frames.len());
        // All or none: a reader holds a page shared only while it fixes the next one down,
        // so taking them one by one could wait on a reader that waits on a page taken here.
        let mut round = 0;
        let mut guards = loop {
            let guards: Vec<_> = pids
                .iter()
                .map_while(|&p| self.frames[p as usize].data.try_write())
                .collect();
            if guards.len() == pids.len() {
                break guards;
            }
            drop(guards);
            crate::sync::backoff(&mut round);
        };
        let mut flushed = true;
        let lines_per_page = self.page_size / nvm::LINE;
        for (pid, first, old) in saved.into_iter().rev() {
            let Ok(k) = pids.binary_search(&pid) else {
                continue;
            };
            let at = first * nvm::LINE;
            guards[k].buf[at..at + old.len()].copy_from_slice(&old);
            let mut bits = vec![0u64; lines_per_page.div_ceil(64)];
            for l in first..first + old.len() / nvm::LINE {
                bits[l / 64] |= 1 << (l % 64);
            }
            flushed &= d.region().flush_lines(&guards[k].buf, &bits).is_ok();
        }
        for &p in &pids {
            self.frames[p as usize].changed.take();
        }
        d.region().drain();
        if !flushed {
            tracing::warn!("NVM direct: the rollback of a failed batch could not be flushed");
        }
        let watched = u32::try_from(watch)
            .ok()
            .and_then(|w| pids.binary_search(&w).ok());
        restored(watched.map(|k| &guards[k].buf[..]));
        drop(guards);
    }

    /// NVM direct: checks a page the first time it is fixed in this run.
    #[cold]
    fn check_direct(&self, frame: &Frame, page: &FrameData) -> Result<()> {
        if page.buf.iter().any(|&b| b != 0)
            && let Err(detail) = (self.check)(&page.buf, page.pid)
        {
            let path = self.direct.as_ref().and_then(|d| d.region().info().path);
            return Err(Error::corrupt(path.as_deref(), detail));
        }
        frame.checked.store(true, Ordering::Release);
        Ok(())
    }

    /// Puts `tier` between the frames and the page file (the three-tier design). Give it
    /// before the first fix: pages in its slots are newer than the page file's copies.
    pub fn with_nvm(mut self, tier: nvm::NvmTier) -> Self {
        self.nvm = Some(tier);
        self
    }

    /// The NVM tier, if any.
    pub fn nvm(&self) -> Option<&nvm::NvmTier> {
        self.nvm.as_ref()
    }

    /// ACE write-back (Papon & Athanassoulis, ICDE'23): when Clock's victim is dirty, write
    /// it together with the next `n_w - 1` dirty pages in Clock's order in one concurrent
    /// batch; those stay cached, now clean, so later evictions find clean victims. `n_w`
    /// should be the device's write concurrency `k_w`; 1 (the default) is plain Clock.
    pub fn with_write_back_batch(mut self, n_w: usize) -> Self {
        self.write_back_batch = n_w.clamp(1, FLUSH_BATCH);
        self
    }

    /// Dirty pages written per eviction of a dirty victim.
    pub fn write_back_batch(&self) -> usize {
        self.write_back_batch
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Number of frames (the DRAM budget in pages).
    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    /// The page file.
    pub fn device(&self) -> &BlockDevice {
        &self.device
    }

    fn lookup(&self, pid: u64) -> Option<u32> {
        self.table.get(pid)
    }

    /// Latches the frame (full or mini) that the page table maps `pid` to as entry `i`, with
    /// `latch` (a timed try of the mode wanted); `None` once the table no longer maps `pid`
    /// there (look the page up again). Waiting on regardless could deadlock: the frame may
    /// have been reused for another page, whose fixer may hold it while it waits for a page
    /// this thread holds (a scanner following an overflow chain from its leaf, a writer
    /// merging into that leaf). Entry `i` names the page while it is loaded and while it is
    /// resident, so a wait for the page itself goes on as long as it must.
    pub(super) fn latch_mapped<G>(
        &self,
        pid: u64,
        i: u32,
        latch: impl Fn(std::time::Duration) -> Option<G>,
    ) -> Option<G> {
        loop {
            if let Some(g) = latch(LATCH_POLL) {
                return Some(g);
            }
            if self.table.get(pid) != Some(i) {
                return None;
            }
        }
    }

    /// Latches full frame `i`, which the page table maps `pid` to, exclusively, and counts
    /// the hit; `None` if the frame no longer holds `pid` (look it up again).
    fn latch_frame(&self, pid: u64, i: u32) -> Option<(&Frame, HybridWriteGuard<'_, FrameData>)> {
        let frame = &self.frames[i as usize];
        let guard = self.latch_mapped(pid, i, |t| frame.data.try_write_for(t))?;
        if guard.pid != pid {
            return None;
        }
        frame.mark_referenced();
        self.counters.hits.incr();
        Some((frame, guard))
    }

    /// Starts loading, into the CPU's cache, what a fix and a search of page `pid` touch first
    /// (the frame's latch, the page's header and first slots), if the page is in a frame: a
    /// hint that lets several pages' cache misses overlap before they are fixed one by one.
    /// Reads nothing and latches nothing.
    pub fn prefetch(&self, pid: u64) {
        let Some(i) = self.lookup(pid) else {
            return;
        };
        let Some(frame) = self.frames.get(i as usize) else {
            return; // a mini page's entry: nothing to hint at
        };
        crate::device::cpu::prefetch(&frame.data);
        let page = match self.pages_base {
            Some(base) => base + i as usize * self.page_size,
            None => frame.page_addr,
        };
        for line in 0..PREFETCH_LINES.min(self.page_size / 64) {
            crate::device::cpu::prefetch((page + line * 64) as *const u8);
        }
    }

    /// A [`RacyPage`] pointing at no page (every read is [`Torn`]) for
    /// [`BufferPool::read_optimistic`] to point at pages.
    pub fn racy_page(&self) -> RacyPage<'_> {
        RacyPage {
            view: None,
            scratch: Vec::new(),
        }
    }

    /// Starts an optimistic read of page `pid` through `page`: `None` unless the page is in a
    /// whole DRAM frame of this pool (not a mini page, not NVM direct, whose frames are NVM)
    /// that nobody holds exclusively. Read it through `page`, then call
    /// [`BufferPool::validate`]; the caller checks that the bytes are the page it wanted (the
    /// frame may hold another page by the time it is read: the id at bytes 16..24 tells).
    #[inline]
    pub fn read_optimistic<'a>(&'a self, pid: u64, page: &mut RacyPage<'a>) -> Option<Optimistic> {
        if self.direct.is_some() {
            return None;
        }
        let i = self.lookup(pid)?;
        let frame = self.frames.get(i as usize)?;
        let view = frame.racy.as_ref()?;
        let version = frame.data.optimistic()?;
        page.view = Some(view);
        Some(Optimistic {
            frame: i,
            version,
            pid,
        })
    }

    /// Whether what was read since `read` started is a consistent image of its page as it was
    /// at this moment: no exclusive fix of the frame came between, and the page table still
    /// maps the page to the frame (a frame given up while it still held the page's bytes — a
    /// load that failed its check — keeps its version even after it was unmapped, under its
    /// latch, between the read's lookup and its version). Marks the frame referenced for
    /// Clock when it holds.
    #[inline]
    pub fn validate(&self, read: Optimistic) -> bool {
        let frame = &self.frames[read.frame as usize];
        let valid = frame.data.validate(read.version) && self.lookup(read.pid) == Some(read.frame);
        if valid {
            frame.mark_referenced();
        }
        valid
    }

    /// Turns pointer swizzling on (see the module docs): `child_refs` says where a page
    /// holds its child references. Off in NVM direct, whose frames are persistent.
    pub fn with_swizzling(mut self, child_refs: ChildRefs) -> Self {
        if self.direct.is_none() {
            self.child_refs = Some(child_refs);
        }
        self
    }

    /// Whether swips are swizzled ([`BufferPool::with_swizzling`]).
    pub fn swizzling(&self) -> bool {
        self.child_refs.is_some()
    }

    /// The page id `swip` stands for. A swizzled swip read without its parent's latch (an
    /// optimistic read) may be garbage: it then names some page, or none ([`u64::MAX`]),
    /// and the read's validation decides.
    #[inline]
    pub fn resolve(&self, swip: Swip) -> u64 {
        match swip.frame() {
            None => swip.0,
            Some(i) => self
                .frames
                .get(i)
                .map_or(NO_PAGE, |f| f.swizzled_pid.load(Ordering::Acquire)),
        }
    }

    /// Fixes the child that `swip`, read from a parent page the caller holds (shared or
    /// exclusive), names, for reading: through its frame if the swip is swizzled, else by
    /// its page id.
    #[inline]
    pub fn fix_swip(&self, swip: Swip) -> Result<PageRead<'_>> {
        let Some(i) = swip.frame() else {
            return self.fix_shared(swip.0);
        };
        let frame = self.frames.get(i).ok_or_else(|| {
            Error::corrupt(
                None,
                format!("a swizzled reference names frame {i}, beyond the pool"),
            )
        })?;
        // The parent is held, so the child can be neither unswizzled nor evicted: its frame
        // holds the page, whole (a frame loaded by lines is never swizzled). Checked cheaply
        // here (the frame's `swizzled_pid` is on another cache line; `check_swizzles`
        // compares it).
        let guard = frame.data.read();
        if guard.pid == NO_PAGE || guard.lines.is_some() {
            return Err(Error::corrupt(
                None,
                format!("swizzled frame {i} no longer holds its page (a pool invariant broke)"),
            ));
        }
        frame.mark_referenced();
        self.counters.hits.incr();
        self.counters.swizzled_fixes.incr();
        Ok(PageRead { guard })
    }

    /// Whether fixing `pid` now would take a frame (and so perhaps evict a page): it is in
    /// no full frame — not in DRAM, or (unless `by_lines`, which reads mini pages) only in a
    /// mini page, which a whole fix promotes. A hint: the answer may change at once.
    #[inline]
    pub fn fix_takes_frame(&self, pid: u64, by_lines: bool) -> bool {
        match self.lookup(pid) {
            None => true,
            Some(i) => i & lines::MINI_TAG != 0 && !by_lines,
        }
    }

    /// `page` (held shared) as the parent of a later [`BufferPool::try_swizzle`]: `None` if
    /// the pool does not swizzle.
    #[inline]
    pub fn parent_ref(&self, page: &PageRead<'_>) -> Option<ParentRef> {
        self.child_refs?;
        // A spare frame (a read outside the pool) is no parent a swip may name.
        let frame = self.frames.get(page.guard.frame as usize)?;
        Some(ParentRef {
            frame: page.guard.frame,
            pid: page.guard.pid,
            version: frame.data.optimistic()?,
        })
    }

    /// Swizzles the swip at byte `at` of `parent` (released by the caller since
    /// [`BufferPool::parent_ref`]) to name `child`'s frame, if the parent is unchanged since
    /// then, its latch is free now, and the swip still holds `child`'s page id. Otherwise
    /// does nothing (a later fix tries again).
    pub fn try_swizzle(&self, parent: ParentRef, at: usize, child: &PageRead<'_>) {
        let child = &child.guard;
        // A spare frame (a read outside the pool) is not one a swip may name.
        let Some(c) = self.frames.get(child.frame as usize) else {
            return;
        };
        if c.swizzled_in.load(Ordering::Acquire) != NOT_SWIZZLED || child.lines.is_some() {
            return;
        }
        let p = &self.frames[parent.frame as usize];
        let Some(mut pg) = p.data.try_write() else {
            return;
        };
        if at + 8 > pg.buf.len()
            || !pg.follows(parent.version)
            || pg.pid != parent.pid
            || swip_at(&pg.buf, at).page_id() != Some(child.pid)
        {
            return;
        }
        c.swizzled_pid.store(child.pid, Ordering::Release);
        c.swizzled_in
            .store(swizzle_link(parent.frame as usize, at), Ordering::Release);
        put_swip(&mut pg.buf, at, SWIZZLED | u64::from(child.frame));
        p.swizzled_children.fetch_add(1, Ordering::AcqRel);
        self.counters.swizzles.incr();
    }

    /// Gives every swizzled swip in the page of `frame` (latched exclusively by the caller,
    /// as `page`) its page id back.
    fn unswizzle_children(&self, frame: &Frame, page: &mut FrameData) {
        self.unswizzle_in(frame, &mut page.buf, |child| {
            child.swizzled_in.store(NOT_SWIZZLED, Ordering::Release);
            frame.swizzled_children.fetch_sub(1, Ordering::AcqRel);
            self.counters.unswizzles.incr();
        });
    }

    /// Replaces swizzled swips in `copy` (bytes of `frame`'s page, copied under its latch)
    /// by their page ids, for writing it out; the frame's own swips stay swizzled.
    fn unswizzle_copy(&self, frame: &Frame, copy: &mut [u8]) {
        self.unswizzle_in(frame, copy, |_| {});
    }

    /// Writes the page id over every swizzled swip in `bytes` (the page of `frame`, or a
    /// copy of it) and calls `given_back` with each child frame so named.
    fn unswizzle_in(&self, frame: &Frame, bytes: &mut [u8], mut given_back: impl FnMut(&Frame)) {
        if frame.swizzled_children.load(Ordering::Acquire) == 0 {
            return;
        }
        let Some(child_refs) = self.child_refs else {
            return;
        };
        let mut refs = Vec::new();
        child_refs(bytes, &mut refs);
        for at in refs {
            let Some(child) = swip_at(bytes, at).frame().and_then(|i| self.frames.get(i)) else {
                continue;
            };
            put_swip(bytes, at, child.swizzled_pid.load(Ordering::Acquire));
            given_back(child);
        }
    }

    /// Before the page in `frame` (latched exclusively, about to be evicted) leaves: if a
    /// swip names it, gives that swip its page id back, taking the parent's latch without
    /// waiting. `false`: the parent is busy, choose another victim.
    fn unswizzle_from_parent(&self, frame: &Frame) -> bool {
        let link = frame.swizzled_in.load(Ordering::Acquire);
        if link == NOT_SWIZZLED {
            return true;
        }
        let (parent, at) = link_parts(link);
        let p = &self.frames[parent];
        let Some(mut pg) = p.data.try_write() else {
            return false;
        };
        // Unswizzled meanwhile by a change of the parent (which took its latch first)?
        if frame.swizzled_in.load(Ordering::Acquire) != link {
            return true;
        }
        put_swip(&mut pg.buf, at, frame.swizzled_pid.load(Ordering::Acquire));
        frame.swizzled_in.store(NOT_SWIZZLED, Ordering::Release);
        p.swizzled_children.fetch_sub(1, Ordering::AcqRel);
        self.counters.unswizzles.incr();
        true
    }

    /// Checks the swizzling invariants, frame by frame (each under its shared latch, so
    /// fixes may run meanwhile): every swizzled swip in a page names a frame that points back
    /// at it, the page's count of swizzled children is right, and a frame a swip names holds
    /// that swip's page, which its parent names (unless the parent is latched exclusively
    /// just then). `Err` says what broke.
    pub fn check_swizzles(&self) -> std::result::Result<(), String> {
        let Some(child_refs) = self.child_refs else {
            return Ok(());
        };
        let mut refs = Vec::new();
        for (i, frame) in self.frames.iter().enumerate() {
            let page = frame.data.read();
            let link = frame.swizzled_in.load(Ordering::Acquire);
            if link != NOT_SWIZZLED {
                if page.pid != frame.swizzled_pid.load(Ordering::Acquire) {
                    return Err(format!("swizzled frame {i} holds page {}", page.pid));
                }
                let (p, at) = link_parts(link);
                // Child before parent is against the latch order: never wait here.
                if let Some(parent) = self.frames.get(p).and_then(|f| f.data.try_read())
                    && frame.swizzled_in.load(Ordering::Acquire) == link
                    && parent.buf.get(at..at + 8) != Some(&(SWIZZLED | i as u64).to_le_bytes()[..])
                {
                    return Err(format!(
                        "frame {i} (page {}) says frame {p} byte {at} names it; it does not",
                        page.pid
                    ));
                }
            }
            // A torn page (restart repairs it from the log) may hold garbage: not checked.
            if page.pid == NO_PAGE || page.torn {
                continue;
            }
            refs.clear();
            child_refs(&page.buf, &mut refs);
            let mut swizzled = 0;
            for &at in &refs {
                let Some(c) = swip_at(&page.buf, at).frame() else {
                    continue;
                };
                swizzled += 1;
                let link = self
                    .frames
                    .get(c)
                    .map(|f| f.swizzled_in.load(Ordering::Acquire));
                if link != Some(swizzle_link(i, at)) {
                    return Err(format!(
                        "page {} byte {at}: a swip names frame {c}, which does not point back",
                        page.pid
                    ));
                }
            }
            if swizzled != frame.swizzled_children.load(Ordering::Acquire) {
                return Err(format!(
                    "page {} has {swizzled} swizzled children, its frame counts {}",
                    page.pid,
                    frame.swizzled_children.load(Ordering::Acquire)
                ));
            }
        }
        Ok(())
    }

    /// Fixes page `pid` for reading.
    pub fn fix_shared(&self, pid: u64) -> Result<PageRead<'_>> {
        loop {
            if let Some(i) = self.lookup(pid) {
                if self.left_mini(pid, i) {
                    continue;
                }
                let frame = &self.frames[i as usize];
                let Some(guard) = self.latch_mapped(pid, i, |t| frame.data.try_read_for(t)) else {
                    continue;
                };
                if guard.pid != pid {
                    continue;
                }
                frame.mark_referenced();
                self.counters.hits.incr();
                if self.direct.is_some() && !frame.checked.load(Ordering::Acquire) {
                    self.check_direct(frame, &guard)?;
                }
                if guard.lines.is_none() {
                    return Ok(PageRead { guard });
                }
                drop(guard);
                match self.whole_for_reading(i, pid)? {
                    Some(page) => return Ok(page),
                    None => continue,
                }
            }
            match self.load(pid, Verify::Yes, Load::Whole) {
                Ok(Some(w)) => {
                    return Ok(PageRead {
                        guard: w.guard.downgrade(),
                    });
                }
                Ok(None) => {}
                // Read-only (perhaps since a victim's write-back failed in this very fix):
                // nothing is written back any more, so no frame may be free for the page; it
                // is read into a spare frame. A fault of the page's own read recurs
                // there and is returned. (NVM direct maps every page: it never loads one.)
                Err(_) if self.frozen() && self.direct.is_none() => return self.read_private(pid),
                Err(e) => return Err(e),
            }
        }
    }

    /// A frame loaded a line at a time by a point read, made whole and fixed for reading;
    /// `None` if it no longer holds `pid` (retry). Out of line: the hot path of
    /// [`BufferPool::fix_shared`] stays small.
    #[cold]
    #[inline(never)]
    fn whole_for_reading(&self, i: u32, pid: u64) -> Result<Option<PageRead<'_>>> {
        let frame = &self.frames[i as usize];
        let Some(mut guard) = self.latch_mapped(pid, i, |t| frame.data.try_write_for(t)) else {
            return Ok(None);
        };
        if guard.pid != pid {
            return Ok(None);
        }
        self.make_whole(frame, &mut guard)?;
        Ok(Some(PageRead {
            guard: guard.downgrade(),
        }))
    }

    /// Frame `frame`, latched exclusively by `guard`, as a page fixed for writing.
    fn page_write<'a>(
        &'a self,
        frame: &'a Frame,
        guard: HybridWriteGuard<'a, FrameData>,
    ) -> PageWrite<'a> {
        PageWrite {
            frame,
            guard,
            marks: self.line_grained() || self.direct.is_some(),
        }
    }

    /// Fixes page `pid` for writing.
    pub fn fix_exclusive(&self, pid: u64) -> Result<PageWrite<'_>> {
        self.fix_exclusive_with(pid, Verify::Yes)
    }

    /// Fixes page `pid` for writing, choosing whether a checksum mismatch is an error.
    pub fn fix_exclusive_with(&self, pid: u64, verify: Verify) -> Result<PageWrite<'_>> {
        loop {
            if let Some(i) = self.lookup(pid) {
                if self.left_mini(pid, i) {
                    continue;
                }
                let Some((frame, mut guard)) = self.latch_frame(pid, i) else {
                    continue;
                };
                if self.direct.is_some() && !frame.checked.load(Ordering::Acquire) {
                    self.check_direct(frame, &guard)?;
                }
                self.make_whole(frame, &mut guard)?;
                self.unswizzle_children(frame, &mut guard);
                return Ok(self.page_write(frame, guard));
            }
            if let Some(w) = self.load(pid, verify, Load::Whole)? {
                return Ok(w);
            }
        }
    }

    /// Fixes a page that is new (never written, or free and being reused): no read; the
    /// frame starts zeroed.
    pub fn fix_new(&self, pid: u64) -> Result<PageWrite<'_>> {
        loop {
            if let Some(i) = self.lookup(pid) {
                if self.left_mini(pid, i) {
                    continue;
                }
                let frame = &self.frames[i as usize];
                let Some(mut guard) = self.latch_mapped(pid, i, |t| frame.data.try_write_for(t))
                else {
                    continue;
                };
                if guard.pid == pid {
                    frame.wait_for_write_back();
                    self.unswizzle_children(frame, &mut guard);
                    self.drop_lines(&mut guard);
                    frame.changed.mark_all_saving(&guard.buf);
                    guard.buf.fill(0);
                    frame.dirty_version.fetch_add(1, Ordering::AcqRel);
                    return Ok(self.page_write(frame, guard));
                }
                continue;
            }
            if let Some(w) = self.load(pid, Verify::No, Load::Fresh)? {
                return Ok(w);
            }
        }
    }

    /// Brings `pid` into a frame; `None` if another thread mapped it first (retry).
    fn load(&self, pid: u64, verify: Verify, how: Load) -> Result<Option<PageWrite<'_>>> {
        let fresh = how == Load::Fresh;
        if let Some(d) = &self.direct {
            // Every page of the region is mapped: one beyond it does not exist. Reading one
            // means a damaged reference; a new one, that the region is full.
            if !fresh {
                return Err(Error::corrupt(
                    d.region().info().path.as_deref(),
                    format!(
                        "page {pid} is beyond the {} pages of the NVM-direct region",
                        self.frames.len()
                    ),
                ));
            }
            return Err(Error::StoreFull {
                used: (self.frames.len() * self.page_size) as u64,
                capacity: (self.frames.len() * self.page_size) as u64,
                reason: format!(
                    "page {pid} is beyond the {} pages of the NVM-direct region {}",
                    self.frames.len(),
                    d.region()
                        .info()
                        .path
                        .as_deref()
                        .map_or_else(|| "(simulated)".into(), |p| p.display().to_string())
                ),
            });
        }
        // A damaged id (from a corrupt parent or chain) is refused before a frame is taken.
        let offset = pid.checked_mul(self.page_size as u64).ok_or_else(|| {
            Error::corrupt(None, format!("page id {pid} is beyond any page file"))
        })?;
        let (i, mut guard) = self.victim()?;
        let frame = &self.frames[i as usize];
        // The frame's page id is set under its latch, which fixers take before they trust
        // what the table says.
        match self.table.insert(pid, i) {
            Ok(true) => guard.pid = pid,
            Ok(false) => {
                drop(guard);
                self.free.lock().push(i);
                return Ok(None);
            }
            Err(e) => {
                drop(guard);
                self.free.lock().push(i);
                return Err(e);
            }
        }
        frame.reset(&mut guard);
        if how == Load::Lines
            && let Some(slot) = self.nvm.as_ref().and_then(|t| t.pin_lines(pid))
        {
            self.start_lines(frame, &mut guard, slot);
            return Ok(Some(self.page_write(frame, guard)));
        }
        // A page zeroed here (new) is never written on media: nothing to check (its checksum
        // and a zero scan cost a 16 KiB page about 2 µs, on every split).
        let read = if fresh {
            guard.buf.fill(0);
            Ok(PageSource::ZEROED)
        } else {
            self.read_page(pid, offset, &mut guard.buf)
        };
        let checked = read.and_then(|src| {
            if let Some((_, tenancy)) = src.nvm {
                frame.set_tenancy(Some(tenancy));
            }
            Ok((src, self.check_page(pid, &guard.buf, src, verify)?))
        });
        let src = match checked {
            Ok((src, torn)) => {
                guard.torn = torn;
                src
            }
            Err(e) => {
                self.table.remove(pid, i);
                guard.pid = NO_PAGE;
                drop(guard);
                self.free.lock().push(i);
                return Err(e);
            }
        };
        if let Some((false, _)) = src.nvm
            && !guard.torn
            && let Some(t) = &self.nvm
        {
            t.trust(pid);
        }
        if fresh {
            frame.dirty_version.fetch_add(1, Ordering::AcqRel);
        }
        frame.referenced.store(true, Ordering::Relaxed);
        Ok(Some(self.page_write(frame, guard)))
    }

    /// Reads page `pid` (at byte `offset` of the page file) into `buf` from where its newest
    /// bytes are: its NVM slot if it has one (a slot is never older than the file), else the
    /// page file; zeros past the file's end (a page never written).
    fn read_page(&self, pid: u64, offset: u64, buf: &mut AlignedBuf) -> Result<PageSource> {
        match self.nvm.as_ref().map(|t| t.read(pid, buf)) {
            Some(Ok(Some(slot))) => Ok(PageSource {
                nvm: Some(slot),
                zeroed: false,
            }),
            Some(Err(e)) => Err(e),
            _ if offset + self.page_size as u64 > self.device.len() => {
                buf.fill(0);
                Ok(PageSource::ZEROED)
            }
            _ => {
                self.counters.misses.incr();
                if !self.outgrown.load(Ordering::Relaxed) && self.counters.evictions.get() > 0 {
                    self.outgrown.store(true, Ordering::Relaxed);
                }
                self.device.read_at(offset, buf)?;
                Ok(PageSource {
                    nvm: None,
                    zeroed: false,
                })
            }
        }
    }

    /// Checks page `pid` as [`Self::read_page`] read it from `src`: `Ok(true)` if it is torn
    /// (fails its checksum or the format's check) and `verify` is [`Verify::No`]; with
    /// [`Verify::Yes`] that is an [`Error::Corrupt`] naming the file it came from.
    fn check_page(&self, pid: u64, buf: &[u8], src: PageSource, verify: Verify) -> Result<bool> {
        // Borrowed: only an error names it (copying it cost every miss three allocations).
        let source: Option<&Path> = match (&self.nvm, src.nvm) {
            (Some(t), Some(_)) => t.region().path(),
            _ => Some(self.device.path()),
        };
        // Written whole by this run (or checked since): only a crash tears a slot.
        if matches!(src.nvm, Some((true, _))) || src.zeroed {
            return Ok(false);
        }
        if !intact(buf) {
            return match verify {
                Verify::Yes => Err(Error::corrupt(
                    source,
                    format!("page {pid} fails its checksum (torn or damaged on media)"),
                )),
                Verify::No => Ok(true),
            };
        }
        if buf.iter().all(|&b| b == 0) {
            return Ok(false);
        }
        match (self.check)(buf, pid) {
            Ok(()) => Ok(false),
            Err(detail) if verify == Verify::Yes => Err(Error::corrupt(source, detail)),
            Err(_) => Ok(true),
        }
    }

    /// Page `pid` read into a spare frame, outside the page table: for a read of a store that
    /// became read-only ([`BufferPool::frozen`]) once every frame holds changes that can no
    /// longer be written back, so that no frame can take the page. Nothing is written any
    /// more, so a page not in a frame is as its NVM slot or the page file holds it, and the
    /// copy stays what the page is. With every spare in use by other such reads for a while
    /// (more than [`SPARE_FRAMES`] pages read at once) the read is refused.
    #[cold]
    #[inline(never)]
    fn read_private(&self, pid: u64) -> Result<PageRead<'_>> {
        let offset = pid.checked_mul(self.page_size as u64).ok_or_else(|| {
            Error::corrupt(None, format!("page id {pid} is beyond any page file"))
        })?;
        let spares = self.spares()?;
        for round in 0..SPARE_ROUNDS {
            if round > 0 {
                std::thread::yield_now();
            }
            for spare in spares {
                let Some(mut guard) = spare.data.try_write() else {
                    continue;
                };
                let read = self
                    .read_page(pid, offset, &mut guard.buf)
                    .and_then(|src| self.check_page(pid, &guard.buf, src, Verify::Yes));
                if let Err(e) = read {
                    guard.pid = NO_PAGE;
                    return Err(e);
                }
                guard.pid = pid;
                self.counters.private_reads.incr();
                return Ok(PageRead {
                    guard: guard.downgrade(),
                });
            }
        }
        Err(Error::ReadOnly {
            path: None,
            reason: format!(
                "{}; page {pid} cannot be read in: every frame holds changes that cannot be \
                 written back any more, and all {SPARE_FRAMES} spare frames are in use",
                self.write_failure()
                    .unwrap_or_else(|| "a change failed half-way".into())
            ),
        })
    }

    /// The spare frames of [`Self::read_private`], made on first use.
    fn spares(&self) -> Result<&[Frame]> {
        if self.spares.get().is_none() {
            let made = (0..SPARE_FRAMES)
                .map(|k| {
                    Ok(Frame::new(
                        self.frames.len() + k,
                        NO_PAGE,
                        AlignedBuf::new(self.page_size)?,
                        lines::ChangedLines::new(self.page_size),
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            // Another reader may have made them first: theirs are kept.
            let _ = self.spares.set(made.into_boxed_slice());
        }
        Ok(self.spares.get().map_or(&[], |s| &s[..]))
    }

    /// A free frame, exclusively latched and unmapped: from the free list, or by Clock.
    ///
    /// Clock skips frames without a page: those are on the free list or being loaded by
    /// another thread (which latches them only after taking them). Frames may be fixed for
    /// a moment everywhere (tiny pools under concurrency), so sweeps repeat, yielding, before
    /// the pool is declared exhausted. After a failed write-back, dirty frames are skipped
    /// (reads go on with clean frames; the store is read-only by then).
    fn victim(&self) -> Result<(u32, HybridWriteGuard<'_, FrameData>)> {
        if let Some(i) = self.free.lock().pop() {
            return Ok((i, self.frames[i as usize].data.write()));
        }
        let n = self.frames.len();
        let mut write_error = None;
        for sweep in 0..VICTIM_SWEEPS {
            if sweep > 0 && sweep < 16 {
                std::thread::yield_now();
            } else if sweep >= 16 && self.write_failed.load(Ordering::Acquire) {
                // No checkpoint runs any more, and dirty frames stay dirty: what a few sweeps
                // did not find, waiting will not bring.
                break;
            } else if sweep >= 16 {
                // Frames may be busy with a checkpoint's write for a while (a disk write).
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            if let Some(found) = self.sweep(n, &mut write_error)? {
                return Ok(found);
            }
        }
        if let Some(e) = write_error {
            return Err(e);
        }
        if self.write_failed.load(Ordering::Acquire) {
            // Not a budget to raise: the frames hold changes that may never be written now.
            return Err(Error::ReadOnly {
                path: None,
                reason: format!(
                    "{}; no page can be read in, as every frame holds changes that cannot be \
                     written back any more",
                    self.write_failure()
                        .unwrap_or_else(|| "a change failed half-way".into())
                ),
            });
        }
        Err(Error::StoreFull {
            used: self.frames.len() as u64 * self.page_size as u64,
            capacity: self.frames.len() as u64 * self.page_size as u64,
            reason: "buffer pool: every frame is fixed or holds changes of an unfinished batch \
                     (raise the DRAM budget or write smaller batches)"
                .into(),
        })
    }

    /// One Clock sweep (two passes over the frames, so cleared reference bits count).
    fn sweep(
        &self,
        n: usize,
        write_error: &mut Option<Error>,
    ) -> Result<Option<(u32, HybridWriteGuard<'_, FrameData>)>> {
        for _ in 0..2 * n {
            let i = self.hand.fetch_add(1, Ordering::Relaxed) % n;
            let frame = &self.frames[i];
            if frame.referenced.swap(false, Ordering::Relaxed) {
                continue;
            }
            let Some(mut guard) = frame.data.try_write() else {
                continue;
            };
            if guard.pid == NO_PAGE
                || frame.io_busy.load(Ordering::Acquire)
                || frame.swizzled_children.load(Ordering::Acquire) > 0
                || !self.unswizzle_from_parent(frame)
            {
                continue;
            }
            {
                if frame.dirty() {
                    if write_error.is_some() || self.write_failed.load(Ordering::Acquire) {
                        continue;
                    }
                    let lsn = page_lsn(&guard.buf);
                    if lsn > self.wal.committed_lsn() {
                        continue; // no steal
                    }
                    let written = if self.write_back_batch > 1 {
                        self.write_back_ahead(i, &guard, lsn)
                    } else {
                        let pid = guard.pid;
                        let resident = resident_if_partial(&guard);
                        if resident.is_none() {
                            seal(&mut guard.buf);
                        }
                        let changed = self.take_changed(frame);
                        let written = self.wal.flush_to(lsn).and_then(|()| {
                            self.write_victim(
                                pid,
                                &guard.buf,
                                self.changed_since(pid, &changed, &resident)?,
                            )
                        });
                        if written.is_err() {
                            self.write_failed_at(frame, &changed);
                        }
                        written
                    };
                    if let Err(e) = written {
                        self.write_failed_with(&e);
                        *write_error = Some(e);
                        continue;
                    }
                    let v = frame.dirty_version.load(Ordering::Acquire);
                    frame.clean_version.store(v, Ordering::Release);
                    self.counters.dirty_evictions.incr();
                    self.counters.write_back_batches.incr();
                } else if let Some(t) = &self.nvm
                    && !guard.torn
                    && write_error.is_none()
                    && !self.write_failed.load(Ordering::Acquire)
                    && !t.contains(guard.pid)
                    && let Err(e) = {
                        // A clean frame's checksum is stale if a checkpoint wrote a copy of it
                        // (a torn frame, whose checksum must keep telling, is never admitted).
                        seal(&mut guard.buf);
                        t.admit(guard.pid, &guard.buf, false, &|p| self.spill(p))
                    }
                {
                    // A clean page needs no write; but a failing NVM tier stops all writes.
                    self.write_failed_with(&e);
                    *write_error = Some(e);
                }
                self.drop_lines(&mut guard);
                self.table.remove(guard.pid, i as u32);
                guard.pid = NO_PAGE;
                self.counters.evictions.incr();
            }
            return Ok(Some((i as u32, guard)));
        }
        Ok(None)
    }

    /// Writes the dirty victim in frame `victim` (exclusively latched by the caller) with up
    /// to `n_w - 1` further dirty pages found ahead of it in Clock's order (unreferenced, not
    /// of an unfinished batch, latch free), in one batch. The others are copied under a
    /// shared latch and marked busy until their copy is on media, so no newer write of them
    /// can land first; they are marked clean only up to the version copied.
    fn write_back_ahead(&self, victim: usize, guard: &FrameData, lsn: u64) -> Result<()> {
        let n = self.frames.len();
        let committed = self.wal.committed_lsn();
        let mut copies: Vec<PageCopy> = Vec::new();
        copies.push(self.copy_page(victim, guard)?);
        let mut max_lsn = lsn;
        for step in 1..n {
            if copies.len() >= self.write_back_batch {
                break;
            }
            let j = (victim + step) % n;
            let frame = &self.frames[j];
            if frame.referenced.load(Ordering::Relaxed) || !frame.dirty() {
                continue;
            }
            let Some(g) = frame.data.try_read() else {
                continue;
            };
            let page_lsn = page_lsn(&g.buf);
            if g.pid == NO_PAGE || !frame.dirty() || page_lsn > committed {
                continue;
            }
            if frame.io_busy.swap(true, Ordering::AcqRel) {
                continue; // a checkpoint or another eviction is writing it
            }
            match self.copy_page(j, &g) {
                Ok(c) => copies.push(c),
                Err(e) => {
                    frame.io_busy.store(false, Ordering::Release);
                    self.copies_written(&copies, false);
                    self.release_busy(&copies, victim);
                    return Err(e);
                }
            }
            max_lsn = max_lsn.max(page_lsn);
        }
        let result = self.write_copies(&mut copies, max_lsn);
        if result.is_ok() {
            self.counters.written_ahead.add(copies.len() as u64 - 1);
        }
        self.copies_written(&copies, result.is_ok());
        self.release_busy(&copies, victim);
        result
    }

    /// A copy of the page in frame `i` (latched by the caller, and busy unless it is the
    /// victim), taking its changed lines.
    fn copy_page(&self, i: usize, guard: &FrameData) -> Result<PageCopy> {
        let frame = &self.frames[i];
        let mut buf = AlignedBuf::new(self.page_size)?;
        buf.copy_from_slice(&guard.buf);
        self.unswizzle_copy(frame, &mut buf);
        Ok(PageCopy {
            frame: i,
            pid: guard.pid,
            version: frame.dirty_version.load(Ordering::Acquire),
            buf,
            changed: self.take_changed(frame),
            resident: resident_if_partial(guard),
        })
    }

    /// After copies were written (`ok`) or not: marks their frames clean up to the version
    /// copied and notes the NVM tenancy they now match; or marks their lines changed again.
    fn copies_written(&self, copies: &[PageCopy], ok: bool) {
        for c in copies {
            let frame = &self.frames[c.frame];
            if ok {
                frame.clean_version.fetch_max(c.version, Ordering::AcqRel);
                // The copy is in the slot (if the page has one): lines changed since are
                // marked. A page rewritten whole meanwhile (`fix_new`) marked every line.
                if let Some(t) = &self.nvm
                    && self.line_grained()
                {
                    frame.set_tenancy(t.tenancy_of(c.pid));
                }
            } else {
                self.write_failed_at(frame, &c.changed);
            }
        }
    }

    /// A write-back of `frame` (latched or busy, so no other write-back of it runs) failed:
    /// its changed lines are marked again, and it no longer claims to match its slot (what
    /// reached the slot is unknown), so any later write-back of it writes the whole page.
    fn write_failed_at(&self, frame: &Frame, changed: &Option<(nvm::Tenancy, Vec<u64>)>) {
        if let Some((_, lines)) = changed {
            frame.changed.restore(lines);
        }
        frame.set_tenancy(None);
    }

    /// Takes frame's changed lines for a write-back (latched by the caller), if line-grained
    /// NVM is on and the frame matches a slot tenancy: else the page is written whole.
    fn take_changed(&self, frame: &Frame) -> Option<(nvm::Tenancy, Vec<u64>)> {
        if !self.line_grained() {
            return None;
        }
        let lines = frame.changed.take();
        frame.tenancy().map(|t| (t, lines))
    }

    /// What a write-back of page `pid` may write by lines: `changed` (from
    /// [`BufferPool::take_changed`]) in the slot tenancy it was taken in; `resident` says
    /// which lines the copy holds if some are missing, and then nothing but those lines may be
    /// written.
    fn changed_since<'c>(
        &self,
        pid: u64,
        changed: &'c Option<(nvm::Tenancy, Vec<u64>)>,
        resident: &'c Option<Vec<u64>>,
    ) -> Result<Option<nvm::ChangedSince<'c>>> {
        if resident.is_some() && changed.is_none() {
            return Err(Error::corrupt(
                None,
                format!("page {pid} has lines missing and no slot tenancy to write its changes to"),
            ));
        }
        Ok(changed.as_ref().map(|(tenancy, lines)| nvm::ChangedSince {
            tenancy: *tenancy,
            lines,
            resident: resident.as_deref(),
            verify: self.poison_lines,
        }))
    }

    fn release_busy(&self, copies: &[PageCopy], victim: usize) {
        for c in copies {
            if c.frame != victim {
                self.frames[c.frame].io_busy.store(false, Ordering::Release);
            }
        }
    }

    fn ensure_len(&self, end: u64) -> Result<()> {
        if end <= self.device.len() {
            return Ok(());
        }
        let _g = self.grow.lock();
        if end <= self.device.len() {
            return Ok(());
        }
        let step = self.device.len().clamp(1 << 20, 1 << 30);
        let page = self.page_size as u64;
        crate::device::grow_toward(
            end.next_multiple_of(page),
            (self.device.len() + step).next_multiple_of(page),
            |len| self.device.grow(len),
        )
        .map(drop)
    }

    /// Writes a dirty victim (sealed, the log flushed to its LSN): to its NVM slot, or to a
    /// new slot if the tier admits it, else to the page file.
    fn write_victim(
        &self,
        pid: u64,
        buf: &AlignedBuf,
        changed: Option<nvm::ChangedSince<'_>>,
    ) -> Result<()> {
        if let Some(t) = &self.nvm
            && (t.write_resident(pid, buf, changed)?
                || t.admit(pid, buf, true, &|p| self.spill(p))?)
        {
            return Ok(());
        }
        self.write_page(pid, buf)
    }

    /// Writes NVM victims to the page file and syncs it (they leave NVM after this).
    fn spill(&self, pages: &mut [(u64, AlignedBuf)]) -> Result<()> {
        self.write_pages(pages.iter().map(|(pid, buf)| (*pid, buf)).collect())?;
        self.device.sync()
    }

    /// Writes sealed pages `(page id, bytes)` to the page file in one batch, growing it first.
    fn write_pages(&self, pages: Vec<(u64, &AlignedBuf)>) -> Result<()> {
        if pages.is_empty() {
            return Ok(());
        }
        let end = pages
            .iter()
            .map(|(pid, _)| (pid + 1) * self.page_size as u64)
            .max()
            .unwrap_or(0);
        self.ensure_len(end)?;
        let mut ios: Vec<Io<'_>> = pages
            .iter()
            .map(|&(pid, buf)| Io::Write {
                offset: pid * self.page_size as u64,
                buf,
            })
            .collect();
        self.device.submit(&mut ios)?;
        self.counters.page_writes.add(pages.len() as u64);
        Ok(())
    }

    fn write_page(&self, pid: u64, buf: &AlignedBuf) -> Result<()> {
        let offset = pid.checked_mul(self.page_size as u64).ok_or_else(|| {
            Error::corrupt(None, format!("page id {pid} is beyond any page file"))
        })?;
        self.ensure_len(offset + self.page_size as u64)?;
        self.device.write_at(offset, buf)?;
        self.counters.page_writes.incr();
        Ok(())
    }

    /// Writes every dirty page whose changes are complete (retrying pages of a batch in
    /// progress until it completes), obeying the WAL rule, then syncs the page file. Pages
    /// changed meanwhile may or may not be included. Writers keep working throughout.
    pub fn flush_dirty(&self) -> Result<u64> {
        if self.direct.is_some() {
            return Ok(0); // the pages are their own home, persisted at each commit
        }
        let mut pending: Vec<usize> = (0..self.frames.len())
            .filter(|&i| self.frames[i].dirty())
            .collect();
        let mut written = 0;
        let mut round = 0u32;
        // Leave most frames evictable while a batch of copies is being written.
        let batch = FLUSH_BATCH.min(self.frames.len() / 4).max(1);
        while !pending.is_empty() {
            if self.frozen() {
                return Err(Error::ReadOnly {
                    path: None,
                    reason: self.write_failure().unwrap_or_else(|| {
                        "an earlier change or page write failed; pages are no longer written".into()
                    }),
                });
            }
            let mut retry = Vec::new();
            for chunk in pending.chunks(batch) {
                let mut copies: Vec<PageCopy> = Vec::new();
                let mut max_lsn = 0;
                for &i in chunk {
                    let frame = &self.frames[i];
                    // Never wait for a latch while frames of this chunk are busy: a fixer
                    // holding it may be waiting for one of them (`wait_for_write_back`).
                    let Some(guard) = frame.data.try_read() else {
                        retry.push(i);
                        continue;
                    };
                    if guard.pid == NO_PAGE || !frame.dirty() {
                        continue;
                    }
                    let lsn = page_lsn(&guard.buf);
                    if lsn > self.wal.committed_lsn() {
                        retry.push(i);
                        continue;
                    }
                    if frame.io_busy.swap(true, Ordering::AcqRel) {
                        retry.push(i); // an eviction is writing it ahead
                        continue;
                    }
                    match self.copy_page(i, &guard) {
                        Ok(c) => copies.push(c),
                        Err(e) => {
                            frame.io_busy.store(false, Ordering::Release);
                            // Before the frames are released: another write-back of them
                            // must see their lines marked.
                            self.copies_written(&copies, false);
                            for c in &copies {
                                self.frames[c.frame].io_busy.store(false, Ordering::Release);
                            }
                            return Err(e);
                        }
                    }
                    max_lsn = max_lsn.max(lsn);
                }
                let result = self.write_copies(&mut copies, max_lsn);
                self.copies_written(&copies, result.is_ok());
                for c in &copies {
                    self.frames[c.frame].io_busy.store(false, Ordering::Release);
                }
                result?;
                written += copies.len() as u64;
            }
            pending = retry;
            if !pending.is_empty() {
                crate::sync::backoff(&mut round);
            }
        }
        self.device.sync()?;
        Ok(written)
    }

    fn write_copies(&self, copies: &mut [PageCopy], lsn: u64) -> Result<()> {
        if copies.is_empty() {
            return Ok(());
        }
        self.wal.flush_to(lsn)?;
        let mut to_file = Vec::with_capacity(copies.len());
        for (k, c) in copies.iter_mut().enumerate() {
            if c.resident.is_none() {
                seal(&mut c.buf);
            }
            // A page with an NVM slot is written there (the slot must stay the newest copy);
            // with NVM as the pages' home (admit all), one without a slot gets one.
            if let Some(t) = &self.nvm
                && (t.write_resident(
                    c.pid,
                    &c.buf,
                    self.changed_since(c.pid, &c.changed, &c.resident)?,
                )? || (t.admission() == nvm::Admission::All
                    && t.admit(c.pid, &c.buf, true, &|p| self.spill(p))?))
            {
                continue;
            }
            to_file.push(k);
        }
        self.write_pages(
            to_file
                .iter()
                .map(|&k| (copies[k].pid, &copies[k].buf))
                .collect(),
        )
    }

    /// Gives the clean pages in DRAM free NVM slots, recently referenced ones first, without
    /// evicting anything from NVM (a clean shutdown, after its checkpoint: the next run finds
    /// them in NVM instead of the page file). Returns how many were handed over.
    pub fn hand_over_to_nvm(&self) -> Result<u64> {
        let Some(t) = &self.nvm else {
            return Ok(0);
        };
        let mut handed = 0;
        let mut buf = AlignedBuf::new(self.page_size)?;
        for referenced in [true, false] {
            for frame in self.frames.iter() {
                if self.frozen() || t.free_slots() == 0 {
                    return Ok(handed);
                }
                if frame.referenced.load(Ordering::Relaxed) != referenced {
                    continue;
                }
                let guard = frame.data.read();
                if guard.pid == NO_PAGE || guard.torn || guard.lines.is_some() || frame.dirty() {
                    continue;
                }
                buf.copy_from_slice(&guard.buf);
                self.unswizzle_copy(frame, &mut buf);
                seal(&mut buf);
                if let Err(e) = t
                    .admit_if_free(guard.pid, &buf)
                    .map(|h| handed += u64::from(h))
                {
                    self.write_failed_with(&e);
                    return Err(e);
                }
            }
        }
        Ok(handed)
    }

    /// Stops all write-back of dirty pages for good (an error or panic left pages holding
    /// changes the log does not have): victims are chosen among clean frames only, and
    /// checkpoints fail. Reads go on: a page no frame can take (every one holds changes) is
    /// read into a spare frame outside the page table ([`BufferPool::read_private`]).
    pub fn freeze(&self) {
        self.write_failed.store(true, Ordering::Release);
    }

    /// A page write failed: no more write-backs, and `e` is why.
    fn write_failed_with(&self, e: &Error) {
        self.write_failure
            .lock()
            .get_or_insert_with(|| e.failure_reason());
        self.write_failed.store(true, Ordering::Release);
    }

    /// What made a write-back fail first, if one did (a [`BufferPool::freeze`] has no
    /// reason of its own).
    pub fn write_failure(&self) -> Option<String> {
        self.write_failure.lock().clone()
    }

    /// Whether a page has been read from the device after frames were evicted: the data no
    /// longer fits the pool, so fixes may wait for device reads (and a caller about to take
    /// a lock that others wait for may want its pages in first).
    pub fn outgrown(&self) -> bool {
        self.outgrown.load(Ordering::Relaxed)
    }

    /// Whether [`BufferPool::freeze`] was called (or a write-back failed).
    pub fn frozen(&self) -> bool {
        self.write_failed.load(Ordering::Acquire)
    }

    /// Number of dirty frames right now.
    pub fn dirty_pages(&self) -> usize {
        if self.direct.is_some() {
            return 0; // persisted in place at every commit
        }
        self.frames.iter().filter(|f| f.dirty()).count()
    }

    /// Number of frames holding a page.
    pub fn resident_pages(&self) -> usize {
        self.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{BlockCrashConfig, SimPower};

    pub(super) const PAGE: usize = 4096;

    /// A log that has everything (tests of the pool alone).
    pub(super) struct NoLog;
    impl WalRule for NoLog {
        fn committed_lsn(&self) -> u64 {
            u64::MAX
        }
        fn flush_to(&self, _: u64) -> Result<()> {
            Ok(())
        }
    }

    /// A pool of 16 frames of 4 KiB over a simulated 1 MiB page file.
    pub(super) fn test_pool(name: &str) -> BufferPool {
        let power = SimPower::new(BlockCrashConfig::default());
        let device = BlockDevice::simulated(name, 256 * PAGE as u64, 4096, &power).unwrap();
        BufferPool::new(
            device,
            PoolOptions {
                page_size: PAGE,
                dram_bytes: 16 * PAGE as u64,
                check: |_, _| Ok(()),
            },
            Arc::new(NoLog),
        )
        .unwrap()
    }

    fn pool(n_w: usize) -> BufferPool {
        test_pool("ace").with_write_back_batch(n_w)
    }

    /// An optimistic read validates across shared fixes only: an exclusive fix (even one that
    /// changes nothing), an eviction, or the frame's reuse for another page fails it; a page
    /// not in a frame, or latched exclusively, cannot be read so; ranges past the page are
    /// refused.
    #[test]
    fn optimistic_reads_validate_only_while_nothing_moved() {
        let pool = test_pool("optimistic");
        {
            let mut w = pool.fix_new(3).unwrap();
            w.bytes_mut()[16..24].copy_from_slice(&3u64.to_le_bytes());
            w.bytes_mut()[200] = 0x77;
        }
        let mut page = pool.racy_page();
        assert_eq!(page.bytes(0, 1), Err(Torn), "points at no page yet");
        let read = pool
            .read_optimistic(3, &mut page)
            .expect("resident, not latched");
        assert_eq!(page.bytes(16, 8).unwrap(), 3u64.to_le_bytes());
        assert_eq!(page.bytes(200, 1).unwrap(), [0x77]);
        assert_eq!(page.bytes(197, 5).unwrap(), [0, 0, 0, 0x77, 0], "unaligned");
        assert_eq!(page.bytes(100, 1000).unwrap().len(), 1000);
        assert_eq!(u64::from_le_bytes(page.array(16).unwrap()), 3);
        assert_eq!(
            u64::from_le_bytes(page.array(196).unwrap()),
            0x77 << 32,
            "unaligned"
        );
        assert_eq!(page.array::<8>(PAGE - 4), Err(Torn));
        // The readers that copy nothing, across word boundaries and at the page's end.
        assert_eq!(u16::from_le_bytes(page.array(199).unwrap()), 0x7700);
        assert_eq!(u32::from_be_bytes(page.array(198).unwrap()), 0x0000_7700);
        assert_eq!(u32::from_le_bytes(page.array(198).unwrap()), 0x0077_0000);
        assert_eq!(page.array::<4>(PAGE - 2), Err(Torn));
        assert_eq!(u16::from_le_bytes(page.array(PAGE - 2).unwrap()), 0);
        for (at, len) in [(196, 20), (200, 1), (193, 9), (190, 0), (PAGE - 3, 3)] {
            let same = page.bytes(at, len).unwrap().to_vec();
            assert_eq!(
                page.compare(at, &same),
                Ok(std::cmp::Ordering::Equal),
                "{at}"
            );
            let mut above = same.clone();
            if let Some(last) = above.last_mut() {
                *last = 0xff;
                assert_eq!(
                    page.compare(at, &above),
                    Ok(std::cmp::Ordering::Less),
                    "{at}"
                );
            }
        }
        assert_eq!(page.compare(PAGE - 3, &[0; 4]), Err(Torn));
        assert_eq!(page.bytes(PAGE - 1, 2), Err(Torn));
        assert_eq!(page.bytes(usize::MAX, 2), Err(Torn));
        drop(pool.fix_shared(3).unwrap());
        assert!(pool.validate(read), "a shared fix moves nothing");

        let w = pool.fix_exclusive(3).unwrap();
        assert!(
            pool.read_optimistic(3, &mut page).is_none(),
            "latched exclusively"
        );
        drop(w);
        assert!(!pool.validate(read), "an exclusive fix came between");

        let read = pool.read_optimistic(3, &mut page).unwrap();
        assert!(
            pool.read_optimistic(999, &mut page).is_none(),
            "never loaded"
        );
        // Fill the pool with other pages until page 3 is evicted.
        let mut pid = 10;
        while pool.lookup(3).is_some() {
            drop(pool.fix_new(pid).unwrap());
            pid += 1;
        }
        assert!(!pool.validate(read), "evicted (and its frame reused)");
        assert!(
            pool.read_optimistic(3, &mut page).is_none(),
            "no longer in a frame"
        );

        // A frame given up with its page's bytes still in it (as a load that fails its check
        // does), found by a reader that looked the page up just before: the version is
        // even and the bytes name the page, but the table no longer maps it there.
        {
            let mut w = pool.fix_new(4).unwrap();
            w.bytes_mut()[16..24].copy_from_slice(&4u64.to_le_bytes());
        }
        let i = pool.lookup(4).unwrap();
        let frame = &pool.frames[i as usize];
        let mut guard = frame.data.write();
        pool.table.remove(4, i);
        guard.pid = NO_PAGE;
        drop(guard);
        pool.free.lock().push(i);
        let late = Optimistic {
            frame: i,
            version: frame.data.optimistic().unwrap(),
            pid: 4,
        };
        page.view = frame.racy.as_ref();
        assert_eq!(
            u64::from_le_bytes(page.array(16).unwrap()),
            4,
            "the old bytes are still there"
        );
        assert!(!pool.validate(late), "the frame no longer holds the page");
    }

    /// A toy format for swizzling: a page whose byte 4 is 2 holds child references at bytes
    /// 32 and 40.
    fn toy_child_refs(page: &[u8], out: &mut Vec<usize>) {
        if page[4] == 2 {
            out.extend([32, 40]);
        }
    }

    /// Swizzles the reference at `at` of page `parent` to `child` as a descent would: the
    /// parent fixed shared, the child fixed through it, the parent let go, then the swizzle.
    fn descend(pool: &BufferPool, parent: u64, at: usize) -> u64 {
        let p = pool.fix_shared(parent).unwrap();
        let swip = Swip::from_word(u64::from_le_bytes(
            p.bytes()[at..at + 8].try_into().unwrap(),
        ));
        let pref = pool.parent_ref(&p).unwrap();
        let child = pool.fix_swip(swip).unwrap();
        drop(p);
        pool.try_swizzle(pref, at, &child);
        child.pid()
    }

    fn word(pool: &BufferPool, pid: u64, at: usize) -> u64 {
        let p = pool.fix_shared(pid).unwrap();
        u64::from_le_bytes(p.bytes()[at..at + 8].try_into().unwrap())
    }

    /// Swizzling: a swip is rewritten to its child's frame only from the parent version it
    /// was read at; a swizzled child is fixed without the table; a parent with swizzled
    /// children is never evicted, a swizzled child's eviction gives the parent its page id
    /// back; an exclusive fix of the parent unswizzles it; nothing written out holds a
    /// swizzled swip.
    #[test]
    fn swizzled_swips_never_leave_dram_and_pin_their_parents() {
        let pool = test_pool("swizzle").with_swizzling(toy_child_refs);
        {
            let mut w = pool.fix_new(1).unwrap();
            let b = w.bytes_mut();
            b[4] = 2;
            b[16..24].copy_from_slice(&1u64.to_le_bytes());
            b[32..40].copy_from_slice(&2u64.to_le_bytes());
            b[40..48].copy_from_slice(&3u64.to_le_bytes());
        }
        for pid in [2u64, 3] {
            let mut w = pool.fix_new(pid).unwrap();
            w.bytes_mut()[16..24].copy_from_slice(&pid.to_le_bytes());
        }
        // A stale parent version: nothing happens.
        let p = pool.fix_shared(1).unwrap();
        let stale = pool.parent_ref(&p).unwrap();
        drop(p);
        drop(pool.fix_exclusive(1).unwrap());
        let child = pool.fix_shared(2).unwrap();
        pool.try_swizzle(stale, 32, &child);
        drop(child);
        assert_eq!(pool.counters.swizzles.get(), 0, "the parent moved since");
        assert_eq!(word(&pool, 1, 32), 2);

        assert_eq!(descend(&pool, 1, 32), 2);
        assert_eq!(descend(&pool, 1, 40), 3);
        assert_eq!(pool.counters.swizzles.get(), 2);
        let (w32, w40) = (word(&pool, 1, 32), word(&pool, 1, 40));
        assert!(
            w32 & SWIZZLED != 0 && w40 & SWIZZLED != 0,
            "{w32:#x} {w40:#x}"
        );
        assert_eq!(pool.resolve(Swip::from_word(w32)), 2);
        assert_eq!(pool.check_swizzles(), Ok(()));
        // Through the frame: no table lookup.
        assert_eq!(descend(&pool, 1, 32), 2);
        assert_eq!(pool.counters.swizzled_fixes.get(), 1);
        assert_eq!(pool.counters.swizzles.get(), 2, "already swizzled");

        // A checkpoint writes page ids, and keeps the swips swizzled in DRAM.
        pool.flush_dirty().unwrap();
        let mut on_disk = AlignedBuf::new(PAGE).unwrap();
        pool.device().read_at(PAGE as u64, &mut on_disk).unwrap();
        assert_eq!(on_disk[32..40], 2u64.to_le_bytes());
        assert_eq!(on_disk[40..48], 3u64.to_le_bytes());
        assert!(intact(&on_disk), "sealed after unswizzling");
        assert!(word(&pool, 1, 32) & SWIZZLED != 0);

        // Fill the pool: page 2 is evicted (unswizzled first), page 3 is kept swizzled by
        // fixing it through its swip each round; the parent with a swizzled child stays.
        let mut pid = 10;
        while pool.lookup(2).is_some() {
            descend(&pool, 1, 40);
            drop(pool.fix_new(pid).unwrap());
            pid += 1;
            assert!(pid < 200, "page 2 never evicted");
        }
        assert_eq!(word(&pool, 1, 32), 2, "page id back in the parent");
        assert!(
            pool.lookup(1).is_some(),
            "a parent with a swizzled child stays"
        );
        assert_eq!(pool.check_swizzles(), Ok(()));
        assert!(pool.counters.unswizzles.get() >= 1);

        // An exclusive fix unswizzles every child: the parent's change sees page ids.
        let w = pool.fix_exclusive(1).unwrap();
        assert_eq!(w.bytes()[40..48], 3u64.to_le_bytes());
        drop(w);
        assert_eq!(pool.check_swizzles(), Ok(()));
        // Now nothing pins the parent: it can be evicted and read back intact.
        while pool.lookup(1).is_some() {
            drop(pool.fix_new(pid).unwrap());
            pid += 1;
            assert!(pid < 400, "page 1 never evicted");
        }
        assert_eq!(word(&pool, 1, 32), 2);
        assert_eq!(word(&pool, 1, 40), 3);
    }

    /// Dirties pages 0..16 (filling the pool), then touches 16..48: every eviction meets a
    /// dirty or written-ahead victim. Returns the pool after checking every page's bytes.
    fn churn(n_w: usize) -> BufferPool {
        let pool = pool(n_w);
        for pid in 0..48u64 {
            let mut w = pool.fix_new(pid).unwrap();
            let b = w.bytes_mut();
            b[16..24].copy_from_slice(&pid.to_le_bytes());
            b[100] = pid as u8 ^ 0x5a;
        }
        for pid in 0..48u64 {
            let r = pool.fix_shared(pid).unwrap();
            assert_eq!(r.bytes()[16..24], pid.to_le_bytes(), "page {pid}");
            assert_eq!(r.bytes()[100], pid as u8 ^ 0x5a, "page {pid}");
        }
        pool
    }

    #[test]
    fn plain_clock_writes_one_page_per_dirty_victim() {
        let pool = churn(1);
        let c = &pool.counters;
        assert_eq!(c.written_ahead.get(), 0);
        assert_eq!(c.write_back_batches.get(), c.dirty_evictions.get());
        assert_eq!(c.page_writes.get(), c.dirty_evictions.get());
    }

    #[test]
    fn ace_writes_dirty_pages_ahead_in_batches_and_keeps_every_byte() {
        let pool = churn(4);
        let c = &pool.counters;
        assert!(c.written_ahead.get() > 0, "no page was written ahead");
        // Every page is written once (48 dirty pages, 32 evicted while dirty or after being
        // written ahead): fewer batches than pages.
        assert!(c.write_back_batches.get() < c.page_writes.get());
        assert_eq!(
            c.page_writes.get(),
            c.write_back_batches.get() + c.written_ahead.get()
        );
        // A page written ahead is clean, so evicting it later writes nothing.
        assert!(c.dirty_evictions.get() < c.evictions.get());
    }
}
