//! Cache-line-grained NVM pages (the three-tier paper's §3.1, "MakeResident"): a page that
//! a point read fixes while it is in an NVM slot and not in DRAM gets a DRAM frame with no
//! bytes copied; each line is copied from the slot when a reader first touches it, and the
//! frame keeps a resident bitmask. A lookup in a 16 KiB leaf reads the header line, a few
//! slot lines and one cell instead of 256 lines.
//!
//! With mini frames configured ([`BufferPool::with_mini_pages`]), such a page goes first to
//! a **mini page**: 16 lines of 64 bytes kept sorted by line number (so that consecutive
//! lines are contiguous), 1088 bytes of DRAM instead of a whole page. A read that needs a
//! 17th line promotes it: the mini page is dropped and the page continues in a full frame
//! (its lines are read from NVM again — the paper copies them, but without swizzled
//! pointers no reference to the mini page outlives its latch, so dropping needs no
//! forwarding). Mini frames have their own Clock and are always clean.
//!
//! Writers mark the lines they change in the frame's [`ChangedLines`] (the paper's dirty
//! mask, `MarkDirty`), and a write-back of a page whose frame matches its NVM slot writes
//! only those lines (the NVM tier does the writing). A same-size value update fixes its leaf
//! by lines too ([`BufferPool::fix_lines_exclusive`]): it loads the lines its search reads and
//! those of the value, changes them in place, and leaves a dirty frame with lines missing,
//! whose write-back writes its changed lines into the slot it still pins, with the page's
//! checksum updated from the changed lines alone ([`super::nvm::checksum_after`]).
//!
//! Owns: the resident mask of such frames ([`LineState`]), the changed-line mask of every
//! frame ([`ChangedLines`]), mini frames and their Clock, [`PageLines`] (the only way to read
//! either), making a frame whole when any other fix needs it, and the [`PageBytes`]
//! interface through which searches read pages of either kind. Must not touch: what is
//! inside a page, or the slot itself (the NVM tier keeps it pinned while a frame reads
//! lines from it, and only that frame's write-backs of lines it holds change it).
//!
//! Rules it keeps:
//! - Only point reads of leaves ([`BufferPool::fix_lines`]) and same-size value updates
//!   ([`BufferPool::fix_lines_exclusive`]) use it; inner pages, scans and every other writer
//!   fix pages whole, and fixing a line-grained frame any other way first copies its missing
//!   lines (the paper loads whole pages for scans and structure changes too).
//! - A dirty frame with lines missing is written back only by its changed lines, into the
//!   slot it pins (whose tenancy cannot change meanwhile); anything else would write lines
//!   it does not hold, and is refused as corruption instead.
//! - Only slots this run wrote or verified are loaded by lines: a checksum needs the whole
//!   page, so the first load of a slot after restart is whole and checked (the documented
//!   torn-page rule for NVM, docs/FORMAT-btree.md).
//! - A line-grained frame is read only under its exclusive latch (copying a line in is a
//!   write); readers of a whole frame share theirs.
//! - With [`BufferPool::with_line_poison`], lines not yet copied hold `0xA5` bytes, so code
//!   that reads a frame's bytes without asking for them reads garbage and tests see it (the
//!   paper's App. A.6 debug mode).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockWriteGuard};

use super::nvm::LINE;
use super::{BufferPool, FrameData, NO_PAGE, PageRead, Verify};
use crate::device::cpu::line_runs;
use crate::error::{Error, Result};
use crate::sync::HybridWriteGuard;

/// Most lines a page has (64 KiB pages).
const MAX_LINES: usize = 65536 / LINE;
/// What a poisoned line holds.
pub(super) const POISON: u8 = 0xA5;
/// Lines a mini page holds (the paper's 16 slots).
pub const MINI_LINES: usize = 16;
/// DRAM a mini page costs: its 16 lines and one line of bookkeeping (the paper's 1088 B).
pub const MINI_PAGE_BYTES: u64 = ((MINI_LINES + 1) * LINE) as u64;
/// Page-table tag of a mini frame's index (full frames are fewer than 2^31).
pub(super) const MINI_TAG: u32 = 1 << 31;

/// A mini page: up to 16 lines of one page, kept sorted by line number so that a run of
/// consecutive lines is contiguous, read from the page's pinned NVM slot.
#[derive(Debug)]
pub(super) struct MiniData {
    pid: u64,
    slot: u32,
    lines: [u16; MINI_LINES],
    count: usize,
    bytes: Box<[u8]>,
}

/// A DRAM frame for a mini page.
#[derive(Debug)]
pub(super) struct MiniFrame {
    data: RwLock<MiniData>,
    referenced: AtomicBool,
}

impl MiniFrame {
    pub(super) fn new() -> Self {
        MiniFrame {
            data: RwLock::new(MiniData {
                pid: NO_PAGE,
                slot: 0,
                lines: [0; MINI_LINES],
                count: 0,
                bytes: vec![0; MINI_LINES * LINE].into_boxed_slice(),
            }),
            referenced: AtomicBool::new(false),
        }
    }
}

impl MiniData {
    /// Position of `line` among the held lines: `Ok` if held.
    fn find(&self, line: usize) -> std::result::Result<usize, usize> {
        self.lines[..self.count].binary_search(&(line as u16))
    }
}

/// Where a search reads a page: a whole page in memory (`&[u8]`), or a page whose lines are
/// loaded from NVM on first touch ([`PageLines`]). Each call returns exactly the bytes
/// `[at, at + len)`; the page is one that passed the pool's check or was written whole by
/// this run, so every offset derived from it is in bounds.
pub trait PageBytes {
    /// Why bytes could not be read (`Infallible` for a page in memory).
    type Error;
    /// Bytes `[at, at + len)` of the page.
    fn bytes(&mut self, at: usize, len: usize) -> std::result::Result<&[u8], Self::Error>;
    /// The `N` bytes at `at`, by value (numbers in the page are read as
    /// `u16::from_le_bytes(b.array(at)?)` and the like). This reader and [`PageBytes::compare`]
    /// default to [`PageBytes::bytes`]; a page read without a copy (`RacyPage`, at most 8
    /// bytes at a time) overrides them.
    #[inline]
    fn array<const N: usize>(&mut self, at: usize) -> std::result::Result<[u8; N], Self::Error> {
        Ok(self.bytes(at, N)?.try_into().expect("N bytes"))
    }
    /// How bytes `[at, at + other.len())` compare with `other`.
    #[inline]
    fn compare(
        &mut self,
        at: usize,
        other: &[u8],
    ) -> std::result::Result<std::cmp::Ordering, Self::Error> {
        Ok(self.bytes(at, other.len())?.cmp(other))
    }
}

impl PageBytes for &[u8] {
    type Error = std::convert::Infallible;
    #[inline(always)]
    fn bytes(&mut self, at: usize, len: usize) -> std::result::Result<&[u8], Self::Error> {
        Ok(&self[at..at + len])
    }
}

/// The lines overlapping the byte range `range`, as (word index, bit mask) pairs of a mask
/// with a bit per line.
#[inline]
fn word_masks(range: std::ops::Range<usize>) -> impl Iterator<Item = (usize, u64)> {
    let (first, last) = (range.start / LINE, range.end.saturating_sub(1) / LINE);
    let words = if range.is_empty() {
        1..1
    } else {
        first / 64..last / 64 + 1
    };
    words.map(move |w| {
        let lo = if w == first / 64 { first % 64 } else { 0 };
        let hi = if w == last / 64 { last % 64 } else { 63 };
        (w, (u64::MAX >> (63 - hi)) & (u64::MAX << lo))
    })
}

/// The lines of a frame changed since it last matched its page's NVM slot (the paper's
/// dirty mask and `MarkDirty`): writers mark what they change, under the frame's exclusive
/// latch, and a write-back takes the mask and writes only those lines to the slot
/// ([`super::nvm::NvmTier::write_resident`]). A line changed and not marked would be lost,
/// so code that cannot say what it changed marks every line ([`super::PageWrite::bytes_mut`]).
///
/// In the NVM-direct design the frame is the page itself, in NVM: a line's first mark in a
/// batch saves its old bytes in the undo log first ([`ChangedLines::mark_saving`]).
#[derive(Debug)]
pub struct ChangedLines {
    words: Box<[AtomicU64]>,
    /// NVM direct: where first marks save the lines' old bytes, and the page's id there.
    undo: Option<(std::sync::Arc<super::direct::DirectPages>, u32)>,
}

impl ChangedLines {
    /// No line marked, for pages of `page_size` bytes.
    pub fn new(page_size: usize) -> Self {
        ChangedLines {
            words: (0..(page_size / LINE).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            undo: None,
        }
    }

    /// No line marked, for page `pid` of an NVM-direct store: a line's first mark saves its
    /// old bytes in `pages`' undo log.
    pub(super) fn saving(
        page_size: usize,
        pages: std::sync::Arc<super::direct::DirectPages>,
        pid: u32,
    ) -> Self {
        ChangedLines {
            undo: Some((pages, pid)),
            ..ChangedLines::new(page_size)
        }
    }

    /// Marks every line overlapping `range` of `page` (the frame's bytes, about to change
    /// there). In an NVM-direct store the lines not marked yet are first saved in the undo log
    /// (persisted), so the change may reach NVM at any moment after this returns.
    #[inline]
    pub fn mark_saving(&self, range: std::ops::Range<usize>, page: &[u8]) {
        match &self.undo {
            None => self.mark_bits(range),
            Some((pages, pid)) => Self::save_first(&self.words, pages, *pid, range, page),
        }
    }

    /// Marks every line of `page` ([`ChangedLines::mark_saving`] of the whole page).
    pub fn mark_all_saving(&self, page: &[u8]) {
        match &self.undo {
            None => self.mark_all(),
            Some((pages, pid)) => Self::save_first(&self.words, pages, *pid, 0..page.len(), page),
        }
    }

    /// Saves the lines of `range` not marked yet, a run of adjacent lines per undo entry,
    /// then marks them.
    #[inline(never)]
    fn save_first(
        words: &[AtomicU64],
        pages: &super::direct::DirectPages,
        pid: u32,
        range: std::ops::Range<usize>,
        page: &[u8],
    ) {
        for (w, bits) in word_masks(range) {
            let word = &words[w];
            let mut new = bits & !word.load(Ordering::Relaxed);
            if new == 0 {
                continue;
            }
            word.fetch_or(new, Ordering::Relaxed);
            while new != 0 {
                let at = new.trailing_zeros();
                let run = (new >> at).trailing_ones();
                pages.save(pid, w * 64 + at as usize, run as usize, page);
                new &= !(u64::MAX >> (64 - run) << at);
            }
        }
    }

    /// Marks every line overlapping the byte range `range` (not for an NVM-direct page,
    /// whose lines must be saved first: [`ChangedLines::mark_saving`]).
    #[inline]
    pub fn mark(&self, range: std::ops::Range<usize>) {
        debug_assert!(
            self.undo.is_none(),
            "an NVM-direct page marked without saving"
        );
        self.mark_bits(range);
    }

    #[inline]
    fn mark_bits(&self, range: std::ops::Range<usize>) {
        for (w, bits) in word_masks(range) {
            let word = &self.words[w];
            // Most marks hit lines already marked (the header line on every change): a load
            // is cheaper than an atomic OR.
            if word.load(Ordering::Relaxed) & bits != bits {
                word.fetch_or(bits, Ordering::Relaxed);
            }
        }
    }

    /// Marks every line (not for an NVM-direct page: [`ChangedLines::mark_all_saving`]).
    pub fn mark_all(&self) {
        debug_assert!(
            self.undo.is_none(),
            "an NVM-direct page marked without saving"
        );
        for w in self.words.iter() {
            w.store(u64::MAX, Ordering::Relaxed);
        }
    }

    /// The marked lines, unmarking them (a write-back is about to write them).
    pub fn take(&self) -> Vec<u64> {
        self.words
            .iter()
            .map(|w| w.swap(0, Ordering::Relaxed))
            .collect()
    }

    /// Unmarks every line (the frame is taken for another page).
    pub(super) fn clear(&self) {
        for w in self.words.iter() {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Marks `lines` again (their write-back failed).
    pub(super) fn restore(&self, lines: &[u64]) {
        for (w, &bits) in self.words.iter().zip(lines) {
            w.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Number of marked lines.
    pub fn count(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
}

/// Which lines of a line-grained frame are in DRAM, and the slot the others come from.
#[derive(Debug)]
pub(super) struct LineState {
    slot: u32,
    resident: [u64; MAX_LINES / 64],
    missing: usize,
}

impl LineState {
    pub(super) fn new(slot: u32, page_size: usize) -> Self {
        LineState {
            slot,
            resident: [0; MAX_LINES / 64],
            missing: page_size / LINE,
        }
    }

    /// The resident mask, a bit per line.
    pub(super) fn resident(&self) -> &[u64] {
        &self.resident
    }

    fn set_resident(&mut self, lines: std::ops::Range<usize>) {
        for l in lines {
            self.resident[l / 64] |= 1 << (l % 64);
        }
    }
}

/// Copies the missing lines of `[first, last]` into the frame (runs of missing lines in
/// one read each); the frame becomes whole, and its slot unpinned, when none is missing.
fn make_resident(
    pool: &BufferPool,
    owner: &super::Frame,
    frame: &mut FrameData,
    first: usize,
    last: usize,
) -> Result<()> {
    let FrameData { buf, lines, .. } = frame;
    let Some(state) = lines else {
        return Ok(());
    };
    let tier = pool
        .nvm
        .as_ref()
        .ok_or_else(|| Error::corrupt(None, "a line-grained frame without an NVM tier"))?;
    // The mask as it was: the runs are read from it while the state takes them in.
    let resident = state.resident;
    let missing = |l: usize| resident[l / 64] & (1 << (l % 64)) == 0;
    for run in line_runs(first..last + 1, missing) {
        tier.read_lines(
            state.slot,
            run.start,
            &mut buf[run.start * LINE..run.end * LINE],
        )?;
        state.missing -= run.len();
        state.set_resident(run);
    }
    if state.missing == 0 {
        owner.wait_for_write_back();
        tier.unpin(state.slot);
        *lines = None;
    }
    Ok(())
}

impl BufferPool {
    /// Loads cache lines only on first touch for pages [`BufferPool::fix_lines`] brings in
    /// from NVM (`on`, the three-tier design); `false` loads them whole (the basic NVM
    /// buffer manager).
    pub fn with_line_grained_nvm(mut self, on: bool) -> Self {
        self.line_grained = on;
        self
    }

    /// Whether point reads load NVM pages a cache line at a time.
    pub fn line_grained(&self) -> bool {
        self.line_grained && self.nvm.is_some()
    }

    /// Fills lines not yet loaded with `0xA5` (a debug mode for tests; see the module docs).
    pub fn with_line_poison(mut self, on: bool) -> Self {
        self.poison_lines = on;
        self
    }

    /// Makes a frame just taken for a page hold it a cache line at a time from `slot`
    /// (pinned by the caller); nothing is copied yet.
    pub(super) fn start_lines(&self, frame: &super::Frame, guard: &mut FrameData, slot: u32) {
        guard.lines = Some(LineState::new(slot, self.page_size));
        if let Some(t) = &self.nvm {
            frame.set_tenancy(Some(t.tenancy(slot)));
        }
        if self.poison_lines {
            guard.buf.fill(POISON);
        }
        frame.referenced.store(true, Ordering::Relaxed);
    }

    /// Forgets a frame's missing lines and unpins their slot (the frame is reused, or
    /// rewritten whole; a frame rewritten in place first waits for a write-back of a copy
    /// of it, [`super::Frame::wait_for_write_back`]).
    pub(super) fn drop_lines(&self, frame: &mut FrameData) {
        if let Some(state) = frame.lines.take()
            && let Some(t) = &self.nvm
        {
            t.unpin(state.slot);
        }
    }

    /// Copies every missing line of a line-grained frame (exclusively latched by the caller).
    pub(super) fn make_whole(&self, owner: &super::Frame, frame: &mut FrameData) -> Result<()> {
        let lines = self.page_size / LINE;
        make_resident(self, owner, frame, 0, lines - 1)
    }

    /// Fixes page `pid` for a point read of a leaf: as [`BufferPool::fix_shared`], except
    /// that a page brought in from an NVM slot (with line-grained NVM on) gets a frame whose
    /// lines are copied when first read ([`Fixed::Lines`], under the frame's exclusive
    /// latch): a mini page while it needs at most 16 lines (when the pool has mini pages),
    /// else a full frame. A frame whose lines are all in DRAM is returned shared
    /// ([`Fixed::Whole`]).
    pub fn fix_lines(&self, pid: u64) -> Result<Fixed<'_>> {
        if let Some(d) = self.direct.as_deref()
            && d.region().emulated()
        {
            return Ok(Fixed::Charged(Charged {
                page: self.fix_shared(pid)?,
                pages: d,
                touched: [0; MAX_LINES / 64],
            }));
        }
        if !self.line_grained() {
            return self.fix_shared(pid).map(Fixed::Whole);
        }
        loop {
            if let Some(i) = self.lookup(pid) {
                if i & MINI_TAG != 0 {
                    match self.latch_mini(pid, i) {
                        Some(page) => return Ok(Fixed::Lines(page)),
                        None => continue,
                    }
                }
                let frame = &self.frames[i as usize];
                let Some(guard) = self.latch_mapped(pid, i, |t| frame.data.try_read_for(t)) else {
                    continue;
                };
                if guard.pid != pid {
                    continue;
                }
                if guard.lines.is_none() {
                    frame.mark_referenced();
                    self.counters.hits.incr();
                    return Ok(Fixed::Whole(PageRead { guard }));
                }
                drop(guard);
                let Some((frame, guard)) = self.latch_frame(pid, i) else {
                    continue;
                };
                return Ok(Fixed::from_write(self, frame, guard));
            }
            if self.frozen() {
                // Read-only: no change is written back any more, so no line-grained frame or
                // mini page is started; a whole fix reads the page even when no frame can
                // take it.
                return self.fix_shared(pid).map(Fixed::Whole);
            }
            if !self.minis.is_empty() {
                match self.load_mini(pid)? {
                    MiniLoad::Loaded(i, guard) => {
                        return Ok(Fixed::Lines(PageLines {
                            pool: self,
                            frame: LineFrame::Mini(i, guard),
                        }));
                    }
                    MiniLoad::Raced => continue,
                    MiniLoad::Unsuited => {}
                }
            }
            match self.load(pid, Verify::Yes, super::Load::Lines) {
                Ok(Some(w)) => return Ok(Fixed::from_write(self, w.frame, w.guard)),
                Ok(None) => {}
                // Turned read-only meanwhile: as above.
                Err(_) if self.frozen() => return self.fix_shared(pid).map(Fixed::Whole),
                Err(e) => return Err(e),
            }
        }
    }

    /// Latches the mini page that page-table entry `i` (tagged) names for `pid`; `None` if it
    /// no longer holds the page (look it up again).
    fn latch_mini(&self, pid: u64, i: u32) -> Option<PageLines<'_>> {
        let m = &self.minis[(i & !MINI_TAG) as usize];
        let guard = self.latch_mapped(pid, i, |t| m.data.try_write_for(t))?;
        if guard.pid != pid {
            return None;
        }
        super::mark_referenced(&m.referenced);
        self.counters.hits.incr();
        Some(PageLines {
            pool: self,
            frame: LineFrame::Mini(i, guard),
        })
    }

    /// Fixes page `pid` for a change in place that needs a few lines of it (a same-size
    /// value update, an insert that fits): as [`BufferPool::fix_exclusive`], except that a page brought in from
    /// its NVM slot, or held by lines already, stays so ([`ForWrite::Lines`]): the caller
    /// reads through [`PageBytes`] and changes only lines it made resident
    /// ([`PageLines::bytes_marking`]). Such a frame is dirty with lines missing; its
    /// write-back writes only its changed lines, with the checksum updated from them.
    pub fn fix_lines_exclusive(&self, pid: u64) -> Result<ForWrite<'_>> {
        if !self.line_grained() {
            return self.fix_exclusive(pid).map(ForWrite::Whole);
        }
        loop {
            if let Some(i) = self.lookup(pid) {
                if i & MINI_TAG != 0 {
                    match self.latch_mini(pid, i) {
                        Some(page) => return Ok(ForWrite::Lines(page)),
                        None => continue,
                    }
                }
                let Some((frame, mut guard)) = self.latch_frame(pid, i) else {
                    continue;
                };
                self.unswizzle_children(frame, &mut guard);
                return Ok(ForWrite::new(self, frame, guard));
            }
            if let Some(w) = self.load(pid, Verify::Yes, super::Load::Lines)? {
                return Ok(ForWrite::new(self, w.frame, w.guard));
            }
        }
    }

    /// Gives `mini` frames of [`MINI_PAGE_BYTES`] each to point reads of pages in NVM (the
    /// caller takes their bytes out of the DRAM budget of the full frames). Give the NVM
    /// tier first: a mini page pins its slot for as long as it lives, so there are at most a
    /// quarter as many as the tier has slots (NVM Clock keeps the rest to choose from).
    pub fn with_mini_pages(mut self, mini: usize) -> Self {
        let cap = self.nvm.as_ref().map_or(0, |t| t.slots() as usize / 4);
        self.minis = (0..mini.min(cap).min(MINI_TAG as usize - 1))
            .map(|_| MiniFrame::new())
            .collect();
        *self.mini_free.get_mut() = (0..self.minis.len() as u32).rev().collect();
        self
    }

    /// If page-table entry `i` is a mini frame: drops the mini page if it still holds
    /// `pid` (a fix that needs the whole page promotes it: the caller retries and loads a
    /// full frame) and returns true.
    #[inline]
    pub(super) fn left_mini(&self, pid: u64, i: u32) -> bool {
        if i & MINI_TAG == 0 {
            return false;
        }
        self.leave_mini(pid, i);
        true
    }

    #[cold]
    #[inline(never)]
    fn leave_mini(&self, pid: u64, i: u32) {
        let m = &self.minis[(i & !MINI_TAG) as usize];
        if let Some(guard) = self.latch_mapped(pid, i, |t| m.data.try_write_for(t))
            && guard.pid == pid
        {
            self.drop_mini(i, guard);
        }
    }

    /// Number of mini frames.
    pub fn mini_pages(&self) -> usize {
        self.minis.len()
    }

    /// Unmaps the mini page in frame `tagged` (exclusively latched) and unpins its slot.
    fn unmap_mini(&self, tagged: u32, mini: &mut MiniData) {
        self.table.remove(mini.pid, tagged);
        if let Some(t) = &self.nvm {
            t.unpin(mini.slot);
        }
        mini.pid = NO_PAGE;
        mini.count = 0;
    }

    /// Unmaps the mini page in frame `tagged` (exclusively latched) and frees the frame.
    pub(super) fn drop_mini(&self, tagged: u32, mut guard: RwLockWriteGuard<'_, MiniData>) {
        self.unmap_mini(tagged, &mut guard);
        drop(guard);
        self.counters.mini_promotions.incr();
        self.mini_free.lock().push(tagged & !MINI_TAG);
    }

    /// Brings `pid` into a mini page if it is in a trusted NVM slot and a mini frame is free
    /// or can be evicted.
    fn load_mini(&self, pid: u64) -> Result<MiniLoad<'_>> {
        let Some(tier) = &self.nvm else {
            return Ok(MiniLoad::Unsuited);
        };
        // A hint (checked again by the pin): an untrusted page is loaded whole, and should
        // not cost a mini page its frame.
        if !tier.is_trusted(pid) {
            return Ok(MiniLoad::Unsuited);
        }
        let Some((i, mut guard)) = self.mini_victim() else {
            return Ok(MiniLoad::Unsuited);
        };
        // Mapped before pinned, as in `load`: once mapped, every other fix of the page waits
        // on this latch, so nothing writes the slot while it is pinned.
        match self.table.insert(pid, MINI_TAG | i) {
            Ok(true) => {}
            other => {
                drop(guard);
                self.mini_free.lock().push(i);
                return other.map(|_| MiniLoad::Raced);
            }
        }
        let Some(slot) = tier.pin_lines(pid) else {
            self.table.remove(pid, MINI_TAG | i);
            drop(guard);
            self.mini_free.lock().push(i);
            return Ok(MiniLoad::Unsuited);
        };
        guard.pid = pid;
        guard.slot = slot;
        guard.count = 0;
        if self.poison_lines {
            guard.bytes.fill(POISON);
        }
        self.minis[i as usize]
            .referenced
            .store(true, Ordering::Relaxed);
        self.counters.mini_loads.incr();
        Ok(MiniLoad::Loaded(MINI_TAG | i, guard))
    }

    /// A free mini frame, exclusively latched and unmapped: from the free list, or by Clock
    /// over the mini frames (they are clean: eviction only unmaps and unpins).
    fn mini_victim(&self) -> Option<(u32, RwLockWriteGuard<'_, MiniData>)> {
        if let Some(i) = self.mini_free.lock().pop() {
            return Some((i, self.minis[i as usize].data.write()));
        }
        let n = self.minis.len();
        for _ in 0..2 * n {
            let i = self.mini_hand.fetch_add(1, Ordering::Relaxed) % n;
            let m = &self.minis[i];
            if m.referenced.swap(false, Ordering::Relaxed) {
                continue;
            }
            let Some(mut guard) = m.data.try_write() else {
                continue;
            };
            if guard.pid == NO_PAGE {
                continue; // on the free list, or being loaded
            }
            self.unmap_mini(MINI_TAG | i as u32, &mut guard);
            self.counters.mini_evictions.incr();
            return Some((i as u32, guard));
        }
        None
    }
}

enum MiniLoad<'a> {
    Loaded(u32, RwLockWriteGuard<'a, MiniData>),
    /// Another thread mapped the page first.
    Raced,
    /// Not in a trusted NVM slot, or no mini frame to be had: load a full frame.
    Unsuited,
}

/// A page fixed by [`BufferPool::fix_lines`].
#[derive(Debug)]
pub enum Fixed<'a> {
    /// All its bytes are in DRAM (shared latch).
    Whole(PageRead<'a>),
    /// Loaded a line at a time (exclusive latch).
    Lines(PageLines<'a>),
    /// NVM direct on an emulated region: read in place, each run of lines the read touches
    /// first charged one emulated NVM read (shared latch).
    Charged(Charged<'a>),
}

/// A page of an NVM-direct store fixed for a point read on an emulated region. Its reads are
/// made in place, through references the emulator cannot see; each run of lines a read
/// touches for the first time in this fix is charged one emulated NVM read (the lines a
/// lookup depends on, one after another, as the three-tier design's loads by line are).
#[derive(Debug)]
pub struct Charged<'a> {
    page: PageRead<'a>,
    pages: &'a super::direct::DirectPages,
    touched: [u64; MAX_LINES / 64],
}

impl Charged<'_> {
    /// Page id.
    pub fn pid(&self) -> u64 {
        self.page.pid()
    }
}

impl PageBytes for Charged<'_> {
    type Error = Error;
    fn bytes(&mut self, at: usize, len: usize) -> Result<&[u8]> {
        let bytes = self
            .page
            .bytes()
            .get(at..at.saturating_add(len))
            .ok_or_else(|| out_of_page(at, len, self.page.pid()))?;
        if len > 0 {
            let touched = self.touched;
            let fresh = |l: usize| touched[l / 64] >> (l % 64) & 1 == 0;
            for run in line_runs(at / LINE..(at + len - 1) / LINE + 1, fresh) {
                for l in run.clone() {
                    self.touched[l / 64] |= 1 << (l % 64);
                }
                self.pages.charge_read(run.len() * LINE);
            }
        }
        Ok(bytes)
    }
}

impl<'a> Fixed<'a> {
    fn from_write(
        pool: &'a BufferPool,
        frame: &'a super::Frame,
        guard: HybridWriteGuard<'a, FrameData>,
    ) -> Self {
        match PageLines::of_frame(pool, frame, guard) {
            Ok(page) => Fixed::Lines(page),
            Err(guard) => Fixed::Whole(PageRead {
                guard: guard.downgrade(),
            }),
        }
    }
}

impl PageBytes for Fixed<'_> {
    type Error = Error;
    fn bytes(&mut self, at: usize, len: usize) -> Result<&[u8]> {
        match self {
            Fixed::Whole(p) => p
                .bytes()
                .get(at..at.saturating_add(len))
                .ok_or_else(|| out_of_page(at, len, p.pid())),
            Fixed::Lines(p) => p.bytes(at, len),
            Fixed::Charged(p) => p.bytes(at, len),
        }
    }
}

/// A page fixed by [`BufferPool::fix_lines_exclusive`].
#[derive(Debug)]
pub enum ForWrite<'a> {
    /// All its bytes are in DRAM.
    Whole(super::PageWrite<'a>),
    /// Loaded a line at a time.
    Lines(PageLines<'a>),
}

impl<'a> ForWrite<'a> {
    fn new(
        pool: &'a BufferPool,
        frame: &'a super::Frame,
        guard: HybridWriteGuard<'a, FrameData>,
    ) -> Self {
        match PageLines::of_frame(pool, frame, guard) {
            Ok(page) => ForWrite::Lines(page),
            Err(guard) => ForWrite::Whole(pool.page_write(frame, guard)),
        }
    }
}

/// A page being loaded a cache line at a time; see the module docs.
#[derive(Debug)]
pub struct PageLines<'a> {
    pool: &'a BufferPool,
    frame: LineFrame<'a>,
}

#[derive(Debug)]
enum LineFrame<'a> {
    /// A full frame with a resident mask.
    Full(&'a super::Frame, HybridWriteGuard<'a, FrameData>),
    /// A mini page (tagged frame index).
    Mini(u32, RwLockWriteGuard<'a, MiniData>),
}

impl<'a> PageLines<'a> {
    /// Full frame `frame` (exclusively latched by `guard`) as a page loaded by lines, or its
    /// guard back when no line is missing.
    fn of_frame(
        pool: &'a BufferPool,
        frame: &'a super::Frame,
        guard: HybridWriteGuard<'a, FrameData>,
    ) -> std::result::Result<Self, HybridWriteGuard<'a, FrameData>> {
        if guard.lines.is_some() {
            Ok(PageLines {
                pool,
                frame: LineFrame::Full(frame, guard),
            })
        } else {
            Err(guard)
        }
    }
}

impl PageLines<'_> {
    /// Whether every line is in DRAM by now.
    pub fn whole(&self) -> bool {
        match &self.frame {
            LineFrame::Full(_, g) => g.lines.is_none(),
            LineFrame::Mini(..) => false,
        }
    }

    /// Whether the page is held in a mini page.
    pub fn is_mini(&self) -> bool {
        matches!(self.frame, LineFrame::Mini(..))
    }

    /// Page id.
    pub fn pid(&self) -> u64 {
        match &self.frame {
            LineFrame::Full(_, g) => g.pid,
            LineFrame::Mini(_, g) => g.pid,
        }
    }

    /// The page's bytes for a change in place of `range`: the lines of `range` and the
    /// header's line (which holds the page LSN) are made resident first, a mini page moves
    /// to a full frame (mini pages are never dirty), and the page is marked dirty. Returns
    /// the whole frame with the set where the change must mark each line it changes; lines
    /// that are not resident hold nothing of the page (poison in the debug mode), so only
    /// resident ones may be read or changed.
    pub fn bytes_marking(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Result<(&mut [u8], Option<&ChangedLines>)> {
        if let LineFrame::Mini(..) = self.frame {
            self.promote()?;
        }
        self.bytes(0, LINE)?;
        self.bytes(range.start, range.len())?;
        let pid = self.pid();
        match &mut self.frame {
            LineFrame::Full(frame, g) => {
                frame.dirty_version.fetch_add(1, Ordering::AcqRel);
                Ok((&mut g.buf, Some(&frame.changed)))
            }
            LineFrame::Mini(..) => Err(Error::corrupt(
                None,
                format!("page {pid}: a mini page was not promoted for a write"),
            )),
        }
    }

    /// Moves the page from its mini page to a full frame (more than 16 lines are needed),
    /// without ever releasing it: a search in progress keeps offsets it read from the page,
    /// so no writer may change the page in between. The held lines are copied over, the
    /// page table entry is switched, the slot's pin passes to the full frame, and threads
    /// waiting on the mini page find it empty and look the page up again.
    fn promote(&mut self) -> Result<()> {
        let pool = self.pool;
        let LineFrame::Mini(tagged, mini) = &mut self.frame else {
            return Ok(());
        };
        let tagged = *tagged;
        let (f, mut full) = pool.victim()?;
        if !pool.table.replace(mini.pid, tagged, f) {
            // The entry changes only under the mini page's latch, which this thread holds.
            drop(full);
            pool.free.lock().push(f);
            return Err(Error::corrupt(
                None,
                format!("page {}: its mini page is not in the page table", mini.pid),
            ));
        }
        let frame = &pool.frames[f as usize];
        full.pid = mini.pid;
        frame.reset(&mut full);
        pool.start_lines(frame, &mut full, mini.slot);
        let FrameData { buf, lines, .. } = &mut *full;
        if let Some(state) = lines {
            for (k, &line) in mini.lines[..mini.count].iter().enumerate() {
                let line = usize::from(line);
                buf[line * LINE..(line + 1) * LINE]
                    .copy_from_slice(&mini.bytes[k * LINE..(k + 1) * LINE]);
                state.set_resident(line..line + 1);
                state.missing -= 1;
            }
        }
        mini.pid = NO_PAGE;
        mini.count = 0;
        pool.counters.mini_promotions.incr();
        // Releases the mini page's latch; its frame is free.
        self.frame = LineFrame::Full(frame, full);
        pool.mini_free.lock().push(tagged & !MINI_TAG);
        Ok(())
    }
}
fn out_of_page(at: usize, len: usize, pid: u64) -> Error {
    Error::corrupt(
        None,
        format!("page {pid}: bytes {at}+{len} lie outside the page"),
    )
}

impl PageBytes for PageLines<'_> {
    type Error = Error;
    fn bytes(&mut self, at: usize, len: usize) -> Result<&[u8]> {
        let pid = self.pid();
        let page_size = self.pool.page_size;
        let end = at
            .checked_add(len)
            .filter(|&e| e <= page_size)
            .ok_or_else(|| out_of_page(at, len, pid))?;
        if len == 0 {
            return Ok(&[]);
        }
        let (first, last) = (at / LINE, (end - 1) / LINE);
        if let LineFrame::Mini(_, g) = &self.frame {
            let missing = (first..=last).filter(|&l| g.find(l).is_err()).count();
            if g.count + missing > MINI_LINES {
                self.promote()?;
            }
        }
        match &mut self.frame {
            LineFrame::Full(owner, g) => {
                if g.lines.is_some() {
                    make_resident(self.pool, owner, g, first, last)?;
                }
                Ok(&g.buf[at..end])
            }
            LineFrame::Mini(_, g) => {
                let tier = self
                    .pool
                    .nvm
                    .as_ref()
                    .ok_or_else(|| Error::corrupt(None, "a mini page without an NVM tier"))?;
                for l in first..=last {
                    let Err(pos) = g.find(l) else {
                        continue;
                    };
                    let mut line = [0u8; LINE];
                    tier.read_lines(g.slot, l, &mut line)?;
                    // Keep the lines sorted: shift the later ones up by one line.
                    let count = g.count;
                    g.bytes
                        .copy_within(pos * LINE..count * LINE, (pos + 1) * LINE);
                    g.lines.copy_within(pos..count, pos + 1);
                    g.bytes[pos * LINE..(pos + 1) * LINE].copy_from_slice(&line);
                    g.lines[pos] = l as u16;
                    g.count += 1;
                }
                // Lines first..=last are held, so they sit in consecutive positions.
                let pos = g.find(first).unwrap_or(0);
                let from = pos * LINE + at % LINE;
                Ok(&g.bytes[from..from + len])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::nvm::{Admission, NvmTier};
    use crate::buffer::tests::{PAGE, test_pool};
    use crate::device::{CrashSimConfig, PmemRegion, RegionOptions};

    const SLOTS: u64 = 8;

    /// Byte `at` of page `pid` as [`fill`] writes it (past the page prefix).
    fn expected(pid: u64, at: usize) -> u8 {
        (pid as usize * 7 + at * 13) as u8 | 1
    }

    fn fill(pool: &BufferPool, pid: u64) {
        let mut w = pool.fix_new(pid).unwrap();
        let b = w.bytes_mut();
        for (at, byte) in b.iter_mut().enumerate().skip(super::super::PAGE_PREFIX) {
            *byte = expected(pid, at);
        }
        b[16..24].copy_from_slice(&pid.to_le_bytes());
    }

    /// A 16-frame pool over a 8-slot NVM tier that admits every page, loading by lines with
    /// poison.
    fn pool_with_minis(minis: usize) -> BufferPool {
        pool_over(minis, SLOTS, CrashSimConfig::default())
    }

    fn pool_over(minis: usize, slots: u64, sim: CrashSimConfig) -> BufferPool {
        let region =
            PmemRegion::simulated(8192 + slots * PAGE as u64, sim, &RegionOptions::default())
                .unwrap();
        let tier = NvmTier::open(region, PAGE, Some(Admission::All)).unwrap();
        assert_eq!(u64::from(tier.slots()), slots);
        test_pool("lines")
            .with_nvm(tier)
            .with_line_grained_nvm(true)
            .with_line_poison(true)
            .with_mini_pages(minis)
    }

    /// [`pool_with_minis`] after pages 0..20 were written through it (four of them were
    /// evicted into NVM slots).
    fn filled(minis: usize) -> BufferPool {
        let pool = pool_with_minis(minis);
        for pid in 0..20 {
            fill(&pool, pid);
        }
        pool
    }

    /// Page `pid` fixed for a point read, which must load it by line.
    fn by_lines(pool: &BufferPool, pid: u64) -> PageLines<'_> {
        match pool.fix_lines(pid).unwrap() {
            Fixed::Lines(page) => page,
            Fixed::Whole(_) | Fixed::Charged(_) => panic!("page {pid} came back whole"),
        }
    }

    /// The pages in an NVM slot and not in DRAM (pages 0..20 were written through a
    /// 16-frame pool; the four evicted sit in NVM slots).
    fn pages_in_nvm_only(pool: &BufferPool) -> Vec<u64> {
        (0..20)
            .filter(|&pid| pool.nvm().unwrap().contains(pid) && pool.lookup(pid).is_none())
            .collect()
    }

    fn page_in_nvm_only(pool: &BufferPool) -> u64 {
        pages_in_nvm_only(pool)[0]
    }

    /// Read-only, with every frame holding changes that can no longer be written back: a read
    /// of a page in an NVM slot (which the page file never had) takes no frame and gets the
    /// slot's bytes, whole, in a spare frame outside the page table — by a point read and by a whole fix.
    #[test]
    fn a_frozen_pool_whose_frames_are_all_dirty_reads_pages_outside_it() {
        let pool = filled(2);
        let evicted: Vec<u64> = (0..20).filter(|&p| pool.lookup(p).is_none()).collect();
        assert!(!evicted.is_empty(), "nothing was evicted into NVM");
        assert_eq!(pool.dirty_pages(), pool.frames.len(), "a frame is clean");
        pool.freeze();
        let check = |pid: u64, bytes: &[u8]| {
            assert_eq!(bytes[16..24], pid.to_le_bytes(), "page {pid}'s id");
            for (at, &b) in bytes.iter().enumerate().skip(24) {
                assert_eq!(b, expected(pid, at), "page {pid}, byte {at}");
            }
        };
        for &pid in &evicted {
            match pool.fix_lines(pid).unwrap() {
                Fixed::Whole(page) => check(pid, page.bytes()),
                Fixed::Lines(_) | Fixed::Charged(_) => panic!("page {pid}: not a whole copy"),
            }
            check(pid, pool.fix_shared(pid).unwrap().bytes());
            assert!(pool.lookup(pid).is_none(), "page {pid} took a frame");
        }
        assert_eq!(pool.counters.private_reads.get(), 2 * evicted.len() as u64);
        // Pages in frames are read there.
        let resident = (0..20).find(|&p| pool.lookup(p).is_some()).unwrap();
        check(resident, pool.fix_shared(resident).unwrap().bytes());
        assert_eq!(pool.counters.private_reads.get(), 2 * evicted.len() as u64);
    }

    #[test]
    fn a_point_read_copies_only_the_lines_it_touches() {
        let pool = filled(0);
        let pid = page_in_nvm_only(&pool);
        let loaded = || pool.nvm().unwrap().counters.lines_loaded.get();
        let before = loaded();
        let mut page = by_lines(&pool, pid);
        assert_eq!(loaded(), before, "the fix itself copies nothing");
        // Bytes 1000..1100 lie in lines 15..=17.
        let got = page.bytes(1000, 100).unwrap().to_vec();
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, &b)| b == expected(pid, 1000 + i))
        );
        assert_eq!(loaded(), before + 3);
        // Touching them again copies nothing; a byte past the page is an error, not a panic.
        page.bytes(1010, 8).unwrap();
        assert_eq!(loaded(), before + 3);
        assert!(page.bytes(PAGE - 4, 8).is_err());
        assert!(!page.whole());
        drop(page);
        // A shared fix makes the frame whole: the other 61 lines, no poison left.
        let whole = pool.fix_shared(pid).unwrap();
        assert_eq!(loaded(), before + (PAGE / LINE) as u64);
        let b = whole.bytes();
        assert!((super::super::PAGE_PREFIX..PAGE).all(|at| b[at] == expected(pid, at)));
        drop(whole);
        assert!(matches!(pool.fix_lines(pid).unwrap(), Fixed::Whole(_)));
    }

    #[test]
    fn an_exclusive_fix_makes_the_frame_whole_and_a_new_page_unpins_it() {
        let pool = filled(0);
        let pid = page_in_nvm_only(&pool);
        {
            let mut page = by_lines(&pool, pid);
            assert_eq!(page.bytes(64, 1).unwrap()[0], expected(pid, 64));
        }
        let w = pool.fix_exclusive(pid).unwrap();
        let b = w.bytes();
        assert!((super::super::PAGE_PREFIX..PAGE).all(|at| b[at] == expected(pid, at)));
        drop(w);
        // A page reused as new while line-grained drops its lines and its pin.
        let other = pages_in_nvm_only(&pool)[0];
        assert!(matches!(pool.fix_lines(other).unwrap(), Fixed::Lines(_)));
        let w = pool.fix_new(other).unwrap();
        assert!(w.bytes().iter().all(|&b| b == 0));
        assert!(w.guard.lines.is_none());
    }

    #[test]
    fn a_pinned_slot_keeps_its_page_while_nvm_clock_turns() {
        let pool = filled(0);
        let pid = page_in_nvm_only(&pool);
        let mut page = by_lines(&pool, pid);
        assert_eq!(page.bytes(100, 1).unwrap()[0], expected(pid, 100));
        // Forty more pages pass through DRAM into the eight NVM slots: Clock must pass the
        // pinned slot by, or the lines read next come from another page.
        let evicted = pool.nvm().unwrap().counters.evictions.get();
        for other in 20..60 {
            fill(&pool, other);
        }
        assert!(pool.nvm().unwrap().counters.evictions.get() > evicted + 8);
        let all = page.bytes(0, PAGE).unwrap();
        assert!((super::super::PAGE_PREFIX..PAGE).all(|at| all[at] == expected(pid, at)));
        assert!(page.whole());
    }

    #[test]
    fn an_evicted_line_grained_frame_unpins_its_slot() {
        let pool = filled(0);
        let pid = page_in_nvm_only(&pool);
        {
            let mut page = by_lines(&pool, pid);
            assert_eq!(page.bytes(64, 1).unwrap()[0], expected(pid, 64));
        }
        // Churn DRAM and NVM until the page left both: its slot was reusable.
        for other in 20..80 {
            fill(&pool, other);
        }
        assert!(pool.lookup(pid).is_none());
        assert!(!pool.nvm().unwrap().contains(pid), "the slot stayed pinned");
    }

    fn check_range(page: &mut PageLines<'_>, pid: u64, at: usize, len: usize) {
        let got = page.bytes(at, len).unwrap();
        for (i, &b) in got.iter().enumerate() {
            if at + i >= super::super::PAGE_PREFIX {
                assert_eq!(b, expected(pid, at + i), "page {pid} byte {}", at + i);
            }
        }
    }

    #[test]
    fn a_mini_page_keeps_lines_sorted_and_promotes_past_sixteen() {
        let pool = filled(4);
        let pid = page_in_nvm_only(&pool);
        let mut page = by_lines(&pool, pid);
        assert!(page.is_mini());
        // Lines arrive out of order; a range over lines held apart must read contiguously.
        for line in [40usize, 10, 30, 11, 2] {
            check_range(&mut page, pid, line * LINE + 5, 20);
        }
        check_range(&mut page, pid, 10 * LINE + 30, 2 * LINE - 30);
        check_range(&mut page, pid, 0, 40);
        assert!(page.is_mini());
        assert_eq!(pool.counters.mini_promotions.get(), 0);
        // Six lines held; twelve more do not fit sixteen: the page moves to a full frame
        // without being released, the six lines copied over (poison would show otherwise)
        // and the slot still pinned.
        check_range(&mut page, pid, 50 * LINE, 12 * LINE);
        assert!(!page.is_mini());
        assert_eq!(pool.counters.mini_promotions.get(), 1);
        let loaded = pool.nvm().unwrap().counters.lines_loaded.get();
        for line in [40usize, 10, 30, 11, 2, 0] {
            check_range(&mut page, pid, line * LINE, LINE);
        }
        assert_eq!(pool.nvm().unwrap().counters.lines_loaded.get(), loaded);
        let i = pool.lookup(pid).expect("mapped");
        assert_eq!(i & MINI_TAG, 0, "the table names the full frame");
        assert_eq!(
            pool.mini_free.lock().len(),
            pool.mini_pages(),
            "the mini frame is free again"
        );
        for other in 20..60 {
            fill(&pool, other);
        }
        check_range(&mut page, pid, 0, PAGE);
        assert!(page.whole());
        drop(page);
        assert_eq!(pool.counters.mini_loads.get(), 1);
    }

    #[test]
    fn a_whole_fix_promotes_a_mini_page_and_mini_clock_unpins() {
        let pool = filled(2);
        let in_nvm = pages_in_nvm_only(&pool);
        assert!(in_nvm.len() >= 3, "{in_nvm:?}");
        for &pid in &in_nvm[..3] {
            let mut page = by_lines(&pool, pid);
            assert!(page.is_mini());
            check_range(&mut page, pid, 100, 8);
        }
        // Two mini frames, three pages: Clock evicted one.
        assert_eq!(pool.counters.mini_evictions.get(), 1);
        // A shared fix of a page in a mini page reads it whole from NVM.
        let pid = in_nvm[2];
        assert!(pool.lookup(pid).is_some_and(|i| i & MINI_TAG != 0));
        let whole = pool.fix_shared(pid).unwrap();
        let b = whole.bytes();
        assert!((super::super::PAGE_PREFIX..PAGE).all(|at| b[at] == expected(pid, at)));
        drop(whole);
        assert_eq!(pool.counters.mini_promotions.get(), 1);
        // Every pin is released: churning DRAM and NVM pushes all three pages out of NVM.
        for other in 20..80 {
            fill(&pool, other);
        }
        let st = pool.nvm().unwrap();
        assert!(
            in_nvm[..3]
                .iter()
                .all(|&p| !st.contains(p) || pool.lookup(p).is_some())
        );
    }

    /// A write-back of changed lines that fails leaves the frame's lines marked and the
    /// frame no longer claiming to match its slot: whatever reached the slot, a later
    /// write-back of the page writes it whole (a lost mark would leave stale lines there).
    #[test]
    fn a_failed_write_back_of_changed_lines_leaves_the_next_one_whole() {
        let changed_in_nvm = |sim: CrashSimConfig| {
            // Room for every page: no slot changes hands.
            let pool = pool_over(0, 64, sim);
            for pid in 0..20 {
                fill(&pool, pid);
            }
            // Only the changed page is dirty.
            pool.flush_dirty().unwrap();
            let pid = page_in_nvm_only(&pool);
            let mut w = pool.fix_exclusive(pid).unwrap();
            let (bytes, changed) = w.bytes_marking();
            bytes[40 * LINE] ^= 1;
            changed
                .expect("line-grained")
                .mark(40 * LINE..40 * LINE + 1);
            drop(w);
            (pool, pid)
        };
        let (pool, pid) = changed_in_nvm(CrashSimConfig::default());
        let fences = pool.nvm().unwrap().region().persist_points();
        pool.flush_dirty().unwrap();
        assert!(pool.nvm().unwrap().counters.line_write_backs.get() > 0);

        let (pool, pid2) = changed_in_nvm(CrashSimConfig {
            fail_flushes_after: Some(fences),
            ..CrashSimConfig::default()
        });
        assert_eq!(pid, pid2);
        assert!(pool.flush_dirty().is_err());
        let frame = &pool.frames[pool.lookup(pid).unwrap() as usize];
        assert!(
            frame.changed.count() >= 1,
            "the changed line is marked again"
        );
        assert_eq!(
            frame.tenancy(),
            None,
            "the frame no longer matches its slot"
        );
    }
}
