//! The B+-tree over the buffer manager: lookups and range scans with latch coupling; single
//! changes that stay in their leaf made side by side, and one writer at a time applying
//! everything else (batches, splits, merges, overflow values); each change logged
//! physiologically.
//!
//! Owns: the tree's algorithms, the log records they write (their bytes are in
//! docs/FORMAT-wal.md) and their redo. Must not touch: files, the log's framing or group commit
//! (`wal`), frames and eviction (`buffer`), or the page byte layout (`node`).
//!
//! Concurrency: readers fix pages shared, top-down, holding the parent until the child is
//! fixed (latch coupling); the root is re-checked after it is fixed. With the store's
//! `optimistic_reads` option, point reads instead pass the inner pages without latching them
//! (optimistic lock coupling over the frames' hybrid latches, [`Tree::leaf_optimistic`]) and
//! fix only their leaf. A batched read
//! ([`Tree::get_many`]) routes all its keys before it fixes their leaves, holding the writer
//! lock shared meanwhile so that the structure stays put. Writers share one
//! reader-writer lock (the writer lock). A single put, update or delete that changes its leaf
//! only (a value kept in the leaf that fits there; a delete that leaves the leaf at least a
//! quarter full) takes it shared (a leaf writer, [`Tree::change_in_leaf`]): the structure cannot
//! change meanwhile, so it descends, fixes its leaf exclusive, changes it, and appends its own
//! log frame while it still holds the leaf (the frame's LSN stamps the leaf, so each page's
//! changes reach the log in the order they were made). Every other write takes the lock
//! exclusively, as the one writer of LMDB and redb does, and so does a checkpoint. Durability
//! waits (group commit) happen after the lock is released, so concurrent committers still
//! share one `fdatasync`. An exclusive writer that finds the lock held, or any once pages are
//! read from the device after evictions, first descends to its leaves with shared latches (to
//! their parents in a line-grained pool; not at all in NVM direct), so that most device reads
//! overlap other writers' work instead of being made under the lock (`Tree::lock_writer`).
//! Leaf writers are not used in NVM direct (pages changed in place under one undo log) nor in
//! a line-grained pool (puts by lines). A writer fixes a leaf exclusive for an ordinary
//! change; a split or merge fixes the whole path exclusive,
//! top-down, so a reader never sees half a structure change. Scans keep no
//! sibling links: they continue from the fence key of the leaf they finished, by a new
//! descent, so a scan is never confused by a split or merge it raced.
//!
//! Logging: every change to a page sets the page's LSN to its record's LSN while the page is
//! latched. The first change to a page in a log generation is logged as the page's full
//! image (so restart can rebuild a page torn on media from the log alone); later changes as
//! `Put`/`Remove` deltas. A leaf split logs the new right page as an image and, when the leaf
//! already has its image in the generation, the left half as a `Truncate` delta and the
//! separator as a `Put` into the parent (itself an image on its first change); other structure
//! changes log images of every page they touch.

use std::cell::RefCell;
use std::ops::Bound;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use parking_lot::RwLock;

use super::node::{self, Kind, Node, NodeMut};
use crate::buffer::{
    BufferPool, Fixed, ForWrite, PageBytes, PageRead, PageWrite, RacyPage, Swip, Torn, Verify,
};
use crate::device::Counter;
use crate::error::{Error, Result};
use crate::wal::{FRAME_HEADER, Wal};

/// The meta page's id (0 and 1 hold the superblock copies).
pub const META_PID: u64 = 2;
/// The first root's id.
pub const FIRST_ROOT: u64 = 3;
/// Deepest tree accepted (a deeper path means a cycle in a damaged file).
const MAX_DEPTH: usize = 48;
/// Cache lines of an entry's cell a batched read prefetches ([`Tree::get_many`]): its
/// lengths, key and a value of about 200 bytes.
const CELL_PREFETCH_LINES: usize = 4;
/// Most keys of a batch whose leaves a waiting writer reads in ([`Tree::lock_writer`]).
const WARM_KEYS: usize = 64;
/// How long a writer tries for the writer lock before it parks
/// ([`crate::sync::spin_then_park`]): an exclusive writer waits for leaf writers, which hold it
/// shared for 1–2 µs in DRAM; a leaf writer waits for an exclusive one, which splits a leaf in
/// microseconds (a batch or a checkpoint takes longer, and the waiter then parks).
const WRITER_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Optimistic descents a point read tries before it couples latches ([`Tree::leaf_for`]).
const OPTIMISTIC_TRIES: usize = 3;
/// Times one descent lets go of its pages to read a missing child in unlatched, before it
/// reads one in holding its parent ([`Tree::read_in_unlatched`]).
const MISS_RESTARTS: u32 = 4;

/// The LSN of a leaf a leaf writer has changed but not yet logged ([`Tree::change_in_leaf`]).
const UNLOGGED_LSN: u64 = u64::MAX;

const REC_PUT: u8 = 1;
const REC_REMOVE: u8 = 2;
const REC_IMAGE: u8 = 3;
const REC_META: u8 = 4;
/// `Put` whose value is an overflow reference (same layout as `Put`).
const REC_PUT_REF: u8 = 5;
/// Removes every entry of a leaf from a key on: the left half of a split, logged instead of
/// the half's image when the page already has an image in this generation.
const REC_TRUNCATE: u8 = 6;

/// Offsets of the meta page's fields.
const META_ROOT: usize = node::HEADER;
const META_NEXT: usize = node::HEADER + 8;
const META_FREE: usize = node::HEADER + 16;
const META_COUNT: usize = node::HEADER + 24;

/// The tree's global fields, kept on the meta page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Root page.
    pub root: u64,
    /// First page id never used (the page file's high-water mark).
    pub next_pid: u64,
    /// Head of the free-page list (0: empty).
    pub free_head: u64,
    /// Number of keys.
    pub count: u64,
}

/// The page `page` holds, for changing; every line changed is marked (the NVM tier writes
/// back only those).
fn edit<'p>(page: &'p mut PageWrite<'_>) -> NodeMut<'p> {
    let (bytes, changed) = page.bytes_marking();
    NodeMut::marking(bytes, changed)
}

impl Meta {
    /// Reads the meta page.
    pub fn read(page: &[u8]) -> Meta {
        Meta {
            root: node::u64_at(page, META_ROOT),
            next_pid: node::u64_at(page, META_NEXT),
            free_head: node::u64_at(page, META_FREE),
            count: node::u64_at(page, META_COUNT),
        }
    }
    /// Writes the meta page's fields (marking the lines they change).
    pub fn write(&self, page: &mut NodeMut<'_>) {
        page.put_field(META_ROOT, self.root);
        page.put_field(META_NEXT, self.next_pid);
        page.put_field(META_FREE, self.free_head);
        page.put_field(META_COUNT, self.count);
    }
}

/// Size limits of one entry.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest key.
    pub max_key: usize,
    /// Longest value kept in its leaf; longer ones go to a chain of overflow pages.
    pub max_inline: usize,
    /// Longest value.
    pub max_value: usize,
}

impl Limits {
    /// Limits for a page size and buffer pool: an entry takes at most a quarter of a page,
    /// keys at most a sixteenth (so inner pages keep a fan-out of at least 8); a value may
    /// take up to a quarter of the pool (a batch must fit the pool: no steal) and 256 MiB.
    pub fn for_pool(page_size: usize, pool_bytes: u64) -> Limits {
        let max_key = (page_size / 16).min(1024);
        let quarter = (page_size - node::HEADER) / 4;
        Limits {
            max_key,
            max_inline: quarter - node::entry_size(max_key, 0),
            max_value: usize::try_from(pool_bytes / 4)
                .unwrap_or(usize::MAX)
                .min(256 << 20),
        }
    }
}

/// The writer's state (behind the writer lock: read by leaf writers, changed by exclusive
/// ones).
#[derive(Debug)]
pub(crate) struct Writer {
    rec: Vec<u8>,
    frame_lsn: u64,
    pub(crate) meta: Meta,
    /// The meta state last logged by an exclusive writer: a change that moves `meta` without
    /// logging it (chain pages allocated or freed by a replace, the key count of a put that
    /// fits its leaf) is logged once, at the batch's commit. Leaf writers log the count of
    /// each key they add or remove themselves, without the meta page; [`Tree::begin`] takes
    /// it over.
    logged_meta: Meta,
    pub(crate) generation: u32,
    /// Which pages have their image in the log of the current generation.
    imaged: ImagedPages,
    /// Why the store refuses writes, after a failure in the middle of a change.
    pub(crate) failed: Option<super::Refusal>,
    /// NVM direct: pages are changed in place under the pool's undo log, and nothing is
    /// logged (no records, no page LSNs).
    direct: bool,
}

/// The log generation in which each page's image was last logged, by page id (4 bytes of
/// DRAM per page of the file). Kept apart from the frames because it must outlive them: a
/// page evicted and loaded again in the same generation already has its image in the log,
/// and logging another one on each load cost ~9 KB of log per YCSB update once the data
/// outgrew DRAM (docs/BENCHMARKS.md, Figure 14).
///
/// Entries are atomic so that leaf writers ([`Tree::change_in_leaf`]), which share the writer
/// lock, can mark the leaf they hold exclusively; only the writer that holds the lock
/// exclusively adds entries.
#[derive(Debug, Default)]
struct ImagedPages {
    generation: Vec<AtomicU32>,
}

impl ImagedPages {
    /// Marks an entry as holding no generation (a generation this high is never matched, so
    /// the worst a wrap can do is log an image too many).
    const NONE: u32 = u32::MAX;

    /// Entries for pages `0..pages`.
    fn with_pages(pages: u64) -> ImagedPages {
        let mut imaged = ImagedPages::default();
        if let Ok(n) = usize::try_from(pages) {
            imaged.grow_to(n);
        }
        imaged
    }

    fn grow_to(&mut self, len: usize) {
        if len > self.generation.len() {
            self.generation
                .resize_with(len, || AtomicU32::new(Self::NONE));
        }
    }

    fn entry(&self, pid: u64) -> Option<&AtomicU32> {
        usize::try_from(pid)
            .ok()
            .and_then(|i| self.generation.get(i))
    }

    fn has(&self, pid: u64, generation: u32) -> bool {
        generation != Self::NONE
            && self
                .entry(pid)
                .is_some_and(|g| g.load(Ordering::Relaxed) == generation)
    }

    fn set(&mut self, pid: u64, generation: u32) {
        let Ok(i) = usize::try_from(pid) else {
            return;
        };
        self.grow_to(i + 1);
        *self.generation[i].get_mut() = generation;
    }

    /// [`ImagedPages::set`] by a writer that shares the lock and holds page `pid`
    /// exclusively; false (nothing set) if the page has no entry yet.
    fn set_shared(&self, pid: u64, generation: u32) -> bool {
        self.entry(pid)
            .map(|g| g.store(generation, Ordering::Relaxed))
            .is_some()
    }

    /// The page is (re)allocated: what the log holds of its former life does not describe it.
    /// Gives the page an entry, so that leaf writers can mark it.
    fn forget(&mut self, pid: u64) {
        self.set(pid, Self::NONE);
    }
}

thread_local! {
    /// A leaf writer's log frame ([`Tree::change_in_leaf`]), reused from change to change.
    static LEAF_FRAME: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The tree. See the module docs.
#[derive(Debug)]
pub(crate) struct Tree {
    pub(crate) pool: BufferPool,
    pub(crate) log: std::sync::Arc<super::LogLink>,
    /// Held exclusively by a writer that may change the tree's structure, its meta page or
    /// more than one page, and by checkpoints; shared by leaf writers
    /// ([`Tree::change_in_leaf`]), which change one leaf each, concurrently.
    pub(crate) writer: RwLock<Writer>,
    /// Whether single changes may go to [`Tree::change_in_leaf`]: not in NVM direct (changes in
    /// place under one undo log) nor in a line-grained pool (puts by lines).
    leaf_writers: bool,
    root: AtomicU64,
    count: AtomicU64,
    pub(crate) limits: Limits,
    /// Descents (to a leaf, or to its parent in a line-grained pool) a writer made before it
    /// took the writer lock exclusively ([`Tree::lock_writer`]).
    pub(crate) writer_early_descents: Counter,
    /// Exclusive writers that waited for the writer lock longer than [`WRITER_SPIN`] and
    /// parked.
    pub(crate) writer_parks: Counter,
    /// Leaf writers ([`Tree::change_in_leaf`]) that waited for an exclusive writer longer than
    /// [`WRITER_SPIN`] and then took the lock's blocking path (where they may park).
    pub(crate) leaf_writer_parks: Counter,
    /// Batched reads whose keys were routed before their leaves were fixed
    /// ([`Tree::get_many`]; the others ran one get after another).
    pub(crate) read_batches: Counter,
    /// Puts, updates and deletes made by leaf writers, beside other writers
    /// ([`Tree::change_in_leaf`]).
    pub(crate) leaf_writes: Counter,
    /// Point reads pass the inner pages optimistically ([`Tree::leaf_optimistic`]; the
    /// store's `optimistic_reads` option, never in NVM direct).
    pub(crate) optimistic_reads: bool,
    /// How the store's DRAM budget became this pool (to name the budget a refused change
    /// needs).
    sizing: super::DramSizing,
    /// Point reads that reached their leaf through the inner pages without latching them
    /// ([`Tree::leaf_optimistic`]).
    pub(crate) optimistic_descents: Counter,
    /// Optimistic descents given up: a page on the way was changed, latched exclusively or
    /// not in DRAM. Each is retried, [`OPTIMISTIC_TRIES`] times at most before the read
    /// couples latches.
    pub(crate) optimistic_restarts: Counter,
    /// Descents that let go of their pages to read a child in ([`Tree::read_in_unlatched`]).
    pub(crate) miss_restarts: Counter,
}

/// What a leaf writer does ([`Tree::change_in_leaf`]).
#[derive(Clone, Copy, Debug)]
enum LeafChange<'v> {
    /// Insert or replace.
    Put(&'v [u8]),
    /// Replace if present.
    Update(&'v [u8]),
    /// Remove if present.
    Delete,
}

/// The pages from the root to a leaf, by id. Inline up to 8 levels (a tree of 16 KiB pages
/// that deep holds far more than a disk): every put and delete makes one, and a heap `Vec`
/// cost each an allocation (DHAT: 1 M in 500 k inserts, a writer that reads its leaf in first
/// descending twice).
type PagePath = smallvec::SmallVec<[u64; 8]>;

/// Where a descent goes.
#[derive(Clone, Copy, Debug)]
enum Target<'k> {
    /// The leaf that holds this key.
    Key(&'k [u8]),
    /// The leaf that holds the largest keys below this one.
    Before(&'k [u8]),
    /// The last leaf.
    Last,
}

/// Entries a scan copies before it first hands them out, unless its caller said how many it
/// expects ([`Tree::range`]'s `expected`); each further copy (of the rest of the same leaf, or
/// of the next leaf) takes four times as many, or what is left of the expected number. A scan
/// that stops early then has not copied the whole leaf (YCSB E scans ~50 of a leaf's ~130
/// entries); one that goes on re-enters the leaf by a new descent from the last key copied.
const FIRST_SCAN_CHUNK: usize = 32;
/// How many entries ahead of the one it copies a scan starts loading cells.
const SCAN_PREFETCH: usize = 12;

/// Hands a scan's copied `batch` to `f` in scan order and returns false once the scan is
/// over. Entries before the bound the scan starts from are skipped, checked only until one
/// passes it (`started`); the first entry past the bound it ends at ends the scan. `handed`
/// counts the entries `f` took.
// Inlined into both directions of `range` (callgrind: 1 % more instructions per scan without).
#[inline(always)]
fn hand_out(
    batch: &LeafCopy,
    before_start: impl Fn(&[u8]) -> bool,
    past_end: impl Fn(&[u8]) -> bool,
    started: &mut bool,
    handed: &mut usize,
    f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
) -> bool {
    for (k, v) in batch.iter() {
        if past_end(k) {
            return false;
        }
        if !*started {
            if before_start(k) {
                continue;
            }
            *started = true;
        }
        if !f(k, v) {
            return false;
        }
        *handed += 1;
    }
    true
}

/// The size of a scan's next copy, after `handed` entries went to the caller: what is left of
/// what it expects, or four times the last copy once that is used up (or nothing was said).
fn next_chunk(last: usize, expected: Option<usize>, handed: usize) -> usize {
    match expected {
        Some(e) if e > handed => e - handed,
        _ => last.saturating_mul(4),
    }
}

/// A leaf's entries copied out for a scan: every key and value in one buffer (no allocation
/// per entry — with one `Vec` per key and value, allocating and freeing was a sixth of a YCSB
/// E run's samples), reused from leaf to leaf.
#[derive(Default)]
struct LeafCopy {
    bytes: Vec<u8>,
    /// Per entry: where its key starts in `bytes`, the key's length, the value's length (the
    /// value follows the key).
    entries: Vec<(usize, usize, usize)>,
}

thread_local! {
    /// Each thread's spare [`LeafCopy`], so a scan starts with buffers grown by earlier ones
    /// (growing them anew in every scan was a fifth of a YCSB E scan's instructions under
    /// callgrind, docs/BENCHMARKS.md Figure 30).
    static SPARE_LEAF_COPY: std::cell::Cell<Option<LeafCopy>> = const { std::cell::Cell::new(None) };
}

/// Largest buffer a thread keeps for its next scan (one that copied large values gives its
/// buffer back to the allocator).
const SPARE_LEAF_COPY_BYTES: usize = 1 << 20;

/// A scan's [`LeafCopy`], taken from the thread's spare (a scan started from inside another
/// scan's callback gets a new one) and given back when the scan ends.
struct ScanBuffer(LeafCopy);

impl ScanBuffer {
    fn take() -> Self {
        let mut b = SPARE_LEAF_COPY
            .with(std::cell::Cell::take)
            .unwrap_or_default();
        b.clear();
        ScanBuffer(b)
    }
}

impl Drop for ScanBuffer {
    fn drop(&mut self) {
        if self.0.bytes.capacity() <= SPARE_LEAF_COPY_BYTES {
            let b = std::mem::take(&mut self.0);
            SPARE_LEAF_COPY.with(|s| s.set(Some(b)));
        }
    }
}

impl std::ops::Deref for ScanBuffer {
    type Target = LeafCopy;
    fn deref(&self) -> &LeafCopy {
        &self.0
    }
}

impl std::ops::DerefMut for ScanBuffer {
    fn deref_mut(&mut self) -> &mut LeafCopy {
        &mut self.0
    }
}

impl LeafCopy {
    fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
    }

    fn last_key(&self) -> Option<&[u8]> {
        self.entries
            .last()
            .map(|&(at, k, _)| &self.bytes[at..at + k])
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.entries
            .iter()
            .map(|&(at, k, v)| (&self.bytes[at..at + k], &self.bytes[at + k..at + k + v]))
    }
}

/// A leaf found by a descent, with the key range it covers.
struct LeafAt<'a> {
    page: PageRead<'a>,
    /// Keys of this leaf are >= low (None: no lower bound).
    low: Option<Vec<u8>>,
    /// Keys of this leaf are < high (None: no upper bound).
    high: Option<Vec<u8>>,
}

/// Freezes the pool's write-back if a change panics half-way (the writer lock does not
/// poison, so without this a later batch could commit pages holding part of this one).
struct FreezeOnUnwind<'a>(&'a BufferPool);

impl Drop for FreezeOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.freeze();
        }
    }
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::corrupt(None, detail)
}

impl Tree {
    pub(crate) fn new(
        pool: BufferPool,
        meta: Meta,
        generation: u32,
        log: std::sync::Arc<super::LogLink>,
        sizing: super::DramSizing,
    ) -> Tree {
        // NVM direct: a batch must fit the undo log (lines saved at most twice their size),
        // and a value stays small against the region (a sixty-fourth of the undo log).
        let batch_room = match pool.direct() {
            Some(d) => d.region().head_len() / 16,
            None => pool.frames() as u64 * pool.page_size() as u64,
        };
        let limits = Limits::for_pool(pool.page_size(), batch_room);
        let direct = pool.direct().is_some();
        let leaf_writers = !direct && !pool.line_grained();
        Tree {
            pool,
            log,
            writer: RwLock::new(Writer {
                rec: Vec::new(),
                frame_lsn: 0,
                meta,
                logged_meta: meta,
                generation,
                imaged: ImagedPages::with_pages(meta.next_pid),
                failed: None,
                direct,
            }),
            leaf_writers,
            root: AtomicU64::new(meta.root),
            count: AtomicU64::new(meta.count),
            limits,
            writer_early_descents: Counter::default(),
            writer_parks: Counter::default(),
            leaf_writer_parks: Counter::default(),
            read_batches: Counter::default(),
            leaf_writes: Counter::default(),
            optimistic_reads: false,
            sizing,
            optimistic_descents: Counter::default(),
            optimistic_restarts: Counter::default(),
            miss_restarts: Counter::default(),
        }
    }

    fn wal(&self) -> Result<&Wal> {
        self.log
            .get()
            .map(|w| &**w)
            .ok_or_else(|| Error::InvalidArgument("the tree's log is not open".into()))
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> u64 {
        self.count.load(Ordering::Acquire)
    }

    /// Levels of the tree (1: the root is a leaf).
    pub(crate) fn height(&self) -> Result<u32> {
        let root = self.fix_root()?;
        Ok(u32::from(Node(root.bytes()).level()) + 1)
    }

    // ---------------------------------------------------------------- readers

    fn fix_root(&self) -> Result<PageRead<'_>> {
        loop {
            let root = self.root.load(Ordering::Acquire);
            let page = self.pool.fix_shared(root)?;
            if self.root.load(Ordering::Acquire) == root {
                return Ok(page);
            }
        }
    }

    /// Whether `page`, reached by a descent, is a leaf (`false`: an inner page); a page of
    /// another kind is `Corrupt`.
    fn is_leaf(page: &PageRead<'_>) -> Result<bool> {
        match Node(page.bytes()).kind() {
            Some(Kind::Leaf) => Ok(true),
            Some(Kind::Inner) => Ok(false),
            other => Err(corrupt(format!(
                "page {} is {} inside the tree",
                page.pid(),
                match other {
                    Some(kind) => format!("a {kind:?} page"),
                    None => format!("of no known kind (byte {})", page.bytes()[4]),
                }
            ))),
        }
    }

    /// Descends to the leaf for `target`, tracking the leaf's fences.
    fn descend(&self, target: Target<'_>) -> Result<LeafAt<'_>> {
        let mut restarts = 0;
        'descent: loop {
            let mut page = self.fix_root()?;
            let (mut low, mut high): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
            for _ in 0..MAX_DEPTH {
                if Self::is_leaf(&page)? {
                    return Ok(LeafAt { page, low, high });
                }
                let n = Node(page.bytes());
                let at = match target {
                    Target::Key(k) => n.route(k),
                    Target::Before(k) => match n.search(k) {
                        Ok(0) | Err(0) => None,
                        Ok(i) | Err(i) => Some(i - 1),
                    },
                    Target::Last => n.count().checked_sub(1),
                };
                let next_idx = at.map_or(0, |i| i + 1);
                if next_idx < n.count() {
                    high = Some(n.key(next_idx).to_vec());
                }
                if let Some(i) = at {
                    low = Some(n.key(i).to_vec());
                }
                let Some(next) = self.fix_child(page, at, &mut restarts)? else {
                    continue 'descent;
                };
                page = next;
            }
            return Err(corrupt(format!("tree deeper than {MAX_DEPTH} levels")));
        }
    }

    /// The leaf for `key` (a point lookup: no fences to track), fixed for reading: if it is
    /// brought in from NVM, a cache line at a time when `by_lines` (a point read, see
    /// [`BufferPool::fix_lines`], or the read of a same-size update made by lines), else
    /// whole.
    fn leaf_for(&self, key: &[u8], by_lines: bool) -> Result<Fixed<'_>> {
        if self.optimistic_reads {
            for _ in 0..OPTIMISTIC_TRIES {
                if let Some(leaf) = self.leaf_optimistic(key, by_lines)? {
                    self.optimistic_descents.incr();
                    return Ok(leaf);
                }
                self.optimistic_restarts.incr();
            }
        }
        let mut restarts = 0;
        'descent: loop {
            let mut page = self.fix_root()?;
            for _ in 0..MAX_DEPTH {
                if Self::is_leaf(&page)? {
                    return Ok(Fixed::Whole(page));
                }
                let n = Node(page.bytes());
                let level = n.level();
                let at = n.route(key);
                if level == 1
                    && by_lines
                    && let Some(child) = n.child_at(at).page_id()
                {
                    if self.read_in_unlatched(child, true, &mut restarts) {
                        drop(page);
                        // An error is reported by the next descent, if the page is still the
                        // child then.
                        let _ = self.pool.fix_lines(child);
                        continue 'descent;
                    }
                    let mut leaf = self.pool.fix_lines(child)?;
                    // Kind and level, in the header's line.
                    if leaf.bytes(4, 2)? != [Kind::Leaf as u8, 0] {
                        return Err(corrupt(format!(
                            "page {child}, a child of page {} at level 1, is not a leaf",
                            page.pid()
                        )));
                    }
                    return Ok(leaf);
                }
                let Some(next) = self.fix_child(page, at, &mut restarts)? else {
                    continue 'descent;
                };
                page = next;
            }
            return Err(corrupt(format!("tree deeper than {MAX_DEPTH} levels")));
        }
    }

    /// The child at route position `at` of inner page `page` (fixed for reading, and let go
    /// here), fixed for reading: through its frame if the reference to it is swizzled; else
    /// by its page id, and then, if the pool swizzles, the reference is swizzled (once the
    /// parent is let go: that takes its latch exclusively, without waiting). `None`: the
    /// child was read in with no latch held ([`Tree::read_in_unlatched`]); descend again. A
    /// child not one level below its parent is `Corrupt` (a cycle in a damaged file ends).
    #[inline]
    fn fix_child<'a>(
        &'a self,
        page: PageRead<'a>,
        at: Option<usize>,
        restarts: &mut u32,
    ) -> Result<Option<PageRead<'a>>> {
        let n = Node(page.bytes());
        let (level, (off, swip)) = (n.level(), n.child_ref(at));
        let child = match swip.page_id() {
            None => self.pool.fix_swip(swip)?,
            Some(pid) => match self.fix_by_id(page, off, pid, restarts)? {
                Some(child) => child,
                None => return Ok(None),
            },
        };
        let cl = Node(child.bytes()).level();
        if u16::from(cl) + 1 != u16::from(level) {
            return Err(corrupt(format!(
                "page {} (level {cl}) is a child of a page at level {level}",
                child.pid()
            )));
        }
        Ok(Some(child))
    }

    /// [`Tree::fix_child`] of a child named by its page id `pid`, at byte `off` of `page`.
    #[inline]
    fn fix_by_id<'a>(
        &'a self,
        page: PageRead<'a>,
        off: usize,
        pid: u64,
        restarts: &mut u32,
    ) -> Result<Option<PageRead<'a>>> {
        if self.read_in_unlatched(pid, false, restarts) {
            drop(page);
            // An error is reported by the next descent, if the page is still the child then.
            let _ = self.pool.fix_shared(pid);
            return Ok(None);
        }
        let parent = self.pool.parent_ref(&page);
        let child = self.pool.fix_shared(pid)?;
        if let Some(parent) = parent {
            drop(page);
            self.pool.try_swizzle(parent, off, &child);
        }
        Ok(Some(child))
    }

    /// Whether a descent should let its page go, read child `pid` in (`by_lines`: as
    /// [`BufferPool::fix_lines`] would), and descend again: with swizzling, when the fix
    /// would take a frame. A victim may be a child swizzled in a page this descent holds,
    /// which only that page's exclusive latch can unswizzle; holding nothing, the descent
    /// leaves every such victim to the pool. At most [`MISS_RESTARTS`] times per descent
    /// (pages read in may be evicted again before it gets back to them).
    #[inline]
    fn read_in_unlatched(&self, pid: u64, by_lines: bool, restarts: &mut u32) -> bool {
        if !self.pool.swizzling()
            || *restarts >= MISS_RESTARTS
            || !self.pool.fix_takes_frame(pid, by_lines)
        {
            return false;
        }
        *restarts += 1;
        self.miss_restarts.incr();
        true
    }

    /// [`Tree::leaf_for`] through the inner pages without latching them (optimistic lock
    /// coupling, as in LeanStore): each inner page is read through
    /// [`BufferPool::read_optimistic`], its child's read (or, for the leaf, its fix) starts
    /// before the page is validated again, so that a validated page vouches for the child it
    /// named. Readers so write nothing to the inner pages' latches, which every descent shares
    /// (the root's line no longer moves between cores on each read). `None` when anything on
    /// the way moved or is not in DRAM: retry, or couple latches, which also reports damage
    /// (a page of the wrong kind or level only sends this path back).
    fn leaf_optimistic(&self, key: &[u8], by_lines: bool) -> Result<Option<Fixed<'_>>> {
        let root = self.root.load(Ordering::Acquire);
        let mut page = self.pool.racy_page();
        let Some(mut read) = self.pool.read_optimistic(root, &mut page) else {
            return Ok(None);
        };
        // A root split publishes the new root before it lets the old one go: a version read
        // after the split sees the new root here.
        if self.root.load(Ordering::Acquire) != root {
            return Ok(None);
        }
        let (mut pid, mut level) = (root, None);
        for _ in 0..MAX_DEPTH {
            let routed = Self::route_racy(&mut page, pid, level, key);
            let (at, child) = match routed {
                Ok(Some(next)) => next,
                // The root is a leaf (a small tree): fix it as latch coupling would.
                Ok(None) if level.is_none() => {
                    let page = self.fix_root()?;
                    if Node(page.bytes()).kind() != Some(Kind::Leaf) {
                        return Ok(None);
                    }
                    return Ok(Some(Fixed::Whole(page)));
                }
                Ok(None) | Err(Torn) => return Ok(None),
            };
            // A swizzled reference names the child's frame, whose page id is read from the
            // frame: garbage until this page is validated, like any id read here.
            let child = self.pool.resolve(child);
            if at == 1 {
                // The child is fixed, perhaps read from the device: its id must be real.
                if !self.pool.validate(read) {
                    return Ok(None);
                }
                let leaf = if by_lines {
                    self.pool.fix_lines(child)
                } else {
                    self.pool.fix_shared(child).map(Fixed::Whole)
                };
                if !self.pool.validate(read) {
                    return Ok(None); // the parent changed: the leaf may not be the key's
                }
                let mut leaf = leaf?;
                if leaf.bytes(4, 2)? != [Kind::Leaf as u8, 0] {
                    return Ok(None);
                }
                return Ok(Some(leaf));
            }
            // `child` may be garbage until this page is validated, after the child's read
            // has started (so that the page vouches for the child it named); looking a
            // garbage id up is harmless.
            let Some(next) = self.pool.read_optimistic(child, &mut page) else {
                return Ok(None);
            };
            if !self.pool.validate(read) {
                return Ok(None);
            }
            (read, pid, level) = (next, child, Some(at - 1));
        }
        Ok(None)
    }

    /// An inner page `pid`, read without its latch: its level and the child `key` routes to;
    /// `None` for a leaf. [`Torn`] when the bytes are not page `pid` at level `level` (if
    /// given): changed meanwhile, or another page by now.
    fn route_racy(
        page: &mut RacyPage<'_>,
        pid: u64,
        level: Option<u8>,
        key: &[u8],
    ) -> std::result::Result<Option<(u8, Swip)>, Torn> {
        // Kind and level (bytes 4 and 5), and the page's id.
        let [kind, at] = page.array(4)?;
        let id = u64::from_le_bytes(page.array(16)?);
        if id != pid || level.is_some_and(|l| l != at) {
            return Err(Torn);
        }
        if kind == Kind::Leaf as u8 && at == 0 {
            return Ok(None);
        }
        if kind != Kind::Inner as u8 || at == 0 {
            return Err(Torn);
        }
        Ok(Some((at, node::child_for_in(page, key)?)))
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.get_from(key, true)
    }

    /// The values of `keys`, in order, with their leaves' cache misses overlapped: every key
    /// is first routed to its leaf's id through the (cached) inner pages and the leaf's frame
    /// prefetched, then each leaf is fixed and searched. The writer lock is held shared
    /// throughout, as a leaf writer holds it, so no split or merge moves a key between the two
    /// steps. Falls back to one [`Tree::get`] after another where that lock is not to be had
    /// at once (an exclusive writer holds it or waits for it), and in pools whose point reads
    /// load leaves by cache lines or that have no frames to prefetch (NVM direct).
    pub(crate) fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let structure =
            if keys.len() > 1 && !self.pool.line_grained() && self.pool.direct().is_none() {
                self.writer.try_read()
            } else {
                None
            };
        let Some(_structure) = structure else {
            return keys.iter().map(|k| self.get_from(k, true)).collect();
        };
        self.read_batches.incr();
        let mut leaves: smallvec::SmallVec<[u64; 32]> =
            smallvec::SmallVec::with_capacity(keys.len());
        for key in keys {
            let leaf = self.leaf_id_for(key)?;
            self.pool.prefetch(leaf);
            leaves.push(leaf);
        }
        // Each leaf's slots (prefetched above) name the cell its key is in: that cell is
        // prefetched too before any leaf is searched. The latch is let go in between: holding
        // several leaves' latches at once could deadlock with leaf writers queued on them.
        for (key, &leaf) in keys.iter().zip(&leaves) {
            let page = self.pool.fix_shared(leaf)?;
            if let Some(cell) = node::cell_hint(page.bytes(), key) {
                let lines = page.bytes()[cell..].as_ptr_range();
                for line in (lines.start as usize..lines.end as usize)
                    .step_by(64)
                    .take(CELL_PREFETCH_LINES)
                {
                    crate::device::cpu::prefetch(line as *const u8);
                }
            }
        }
        let mut out = Vec::with_capacity(keys.len());
        for (key, &leaf) in keys.iter().zip(&leaves) {
            let page = self.pool.fix_shared(leaf)?;
            if Node(page.bytes()).kind() != Some(Kind::Leaf) {
                return Err(corrupt(format!(
                    "page {leaf}, routed to as a leaf, is not one"
                )));
            }
            out.push(self.get_in(leaf, &mut page.bytes(), key)?);
        }
        Ok(out)
    }

    /// The id of the leaf `key` belongs in, found through the inner pages with latch coupling
    /// (the leaf itself is not fixed). Only meaningful while the structure cannot change: the
    /// caller holds the writer lock.
    fn leaf_id_for(&self, key: &[u8]) -> Result<u64> {
        let mut restarts = 0;
        'descent: loop {
            let mut page = self.fix_root()?;
            for _ in 0..MAX_DEPTH {
                if Self::is_leaf(&page)? {
                    return Ok(page.pid());
                }
                let n = Node(page.bytes());
                let (level, at) = (n.level(), n.route(key));
                if level == 1 {
                    return Ok(self.pool.resolve(n.child_at(at)));
                }
                let Some(next) = self.fix_child(page, at, &mut restarts)? else {
                    continue 'descent;
                };
                page = next;
            }
            return Err(corrupt(format!("tree deeper than {MAX_DEPTH} levels")));
        }
    }

    /// The value of `key`, reading its leaf by lines if `by_lines` (see [`Tree::leaf_for`]).
    fn get_from(&self, key: &[u8], by_lines: bool) -> Result<Option<Vec<u8>>> {
        match self.leaf_for(key, by_lines)? {
            Fixed::Whole(leaf) => self.get_in(leaf.pid(), &mut leaf.bytes(), key),
            Fixed::Lines(mut leaf) => self.get_in(leaf.pid(), &mut leaf, key),
            Fixed::Charged(mut leaf) => self.get_in(leaf.pid(), &mut leaf, key),
        }
    }

    /// `key`'s value in leaf `leaf`, read through `page` (whole, or a cache line at a time).
    fn get_in<B: PageBytes>(&self, leaf: u64, page: &mut B, key: &[u8]) -> Result<Option<Vec<u8>>>
    where
        Error: From<B::Error>,
    {
        let Ok(i) = node::search_in(page, key)? else {
            return Ok(None);
        };
        let (stored, is_ref) = node::value_in(page, i)?;
        let mut out = Vec::new();
        self.append_stored(leaf, stored, is_ref, &mut out)?;
        Ok(Some(out))
    }

    /// Entry `i`'s value, read from its overflow chain if it has one. The caller holds the
    /// leaf's latch, so the chain cannot be freed meanwhile (a writer changes the leaf first).
    fn value_of(&self, n: &Node<'_>, i: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.append_value(n, i, &mut out)?;
        Ok(out)
    }

    /// [`Tree::value_of`], appended to `out`.
    fn append_value(&self, n: &Node<'_>, i: usize, out: &mut Vec<u8>) -> Result<()> {
        self.append_stored(n.pid(), n.value(i), n.is_ref(i), out)
    }

    /// A value as stored in its leaf (`r` an overflow reference when `is_ref`), appended to
    /// `out`.
    /// The caller holds leaf `leaf`'s latch (exclusively, when it was loaded by line): a
    /// damaged chain leading back to it is refused, not waited on.
    fn append_stored(&self, leaf: u64, r: &[u8], is_ref: bool, out: &mut Vec<u8>) -> Result<()> {
        if !is_ref {
            out.extend_from_slice(r);
            return Ok(());
        }
        if r.len() != node::REF_LEN {
            return Err(corrupt(format!("overflow reference of {} bytes", r.len())));
        }
        let total = node::u64_at(r, 0);
        let mut next = node::u64_at(r, 8);
        let cap = (self.pool.page_size() - node::HEADER) as u64;
        if total > self.limits.max_value.max(1 << 30) as u64 {
            return Err(corrupt(format!("overflow value of {total} bytes")));
        }
        let start = out.len();
        out.reserve(total as usize);
        for _ in 0..total.div_ceil(cap) {
            if next == leaf {
                return Err(corrupt(format!(
                    "the overflow chain of a value in page {leaf} leads back to it"
                )));
            }
            let page = self.pool.fix_shared(next)?;
            let p = Node(page.bytes());
            if p.kind() != Some(Kind::Overflow) {
                return Err(corrupt(format!(
                    "page {next} of an overflow chain is not one"
                )));
            }
            out.extend_from_slice(p.overflow_data());
            next = p.aux();
        }
        let got = out.len() - start;
        if got as u64 != total || next != 0 {
            return Err(corrupt(format!(
                "overflow chain holds {got} bytes, its reference says {total}"
            )));
        }
        Ok(())
    }

    /// Writes `value` to a new chain of overflow pages; returns the reference.
    fn write_chain(&self, w: &mut Writer, value: &[u8]) -> Result<[u8; node::REF_LEN]> {
        let cap = self.pool.page_size() - node::HEADER;
        let mut next = 0u64;
        for chunk in value.chunks(cap).rev() {
            let mut page = self.alloc(w)?;
            let pid = page.pid();
            edit(&mut page).init_overflow(pid, next, chunk);
            self.log_image(w, &mut page);
            next = pid;
        }
        let mut r = [0u8; node::REF_LEN];
        r[..8].copy_from_slice(&(value.len() as u64).to_le_bytes());
        r[8..].copy_from_slice(&next.to_le_bytes());
        Ok(r)
    }

    /// Refuses, before anything changes, to free the overflow chain `r` refers to when its
    /// pages with a change's path and splits would not fit the buffer pool: freeing
    /// changes every page of the chain, and a batch's pages stay in DRAM until it commits. A
    /// value written under a larger DRAM budget can take more than a smaller one holds; a
    /// delete or overwrite of it that ran out of frames half-way made the store read-only.
    /// `height`: the length of the change's path (the tree's height is not read here: the
    /// caller holds the leaf, which may be the root).
    fn check_chain_fits(&self, r: &[u8], height: usize) -> Result<()> {
        if self.pool.direct().is_some() {
            return Ok(()); // its pages are changed in place, with an undo log of its own
        }
        let cap = (self.pool.page_size() - node::HEADER) as u64;
        let chain = node::u64_at(r, 0).div_ceil(cap);
        let path = 2 * height as u64 + 2;
        // The whole pool, not the half a batch is held to: a single change ran fine up to it,
        // and only past it did the frames run out.
        let frames = self.pool.frames() as u64;
        if chain + path > frames {
            let mib = self.sizing.mib_for_frames(chain + path);
            return Err(Error::InvalidArgument(format!(
                "the key's value takes {chain} overflow pages, and freeing them changes more \
                 pages than this buffer pool holds ({frames}): reopen with a DRAM budget of at \
                 least about {mib} MiB (--dram {mib}M) to delete or replace it"
            )));
        }
        Ok(())
    }

    /// Frees the overflow chain `r` refers to.
    fn free_chain(&self, w: &mut Writer, r: &[u8]) -> Result<()> {
        let total = node::u64_at(r, 0);
        let mut next = node::u64_at(r, 8);
        let cap = (self.pool.page_size() - node::HEADER) as u64;
        for _ in 0..total.div_ceil(cap) {
            let mut page = self.pool.fix_exclusive(next)?;
            if Node(page.bytes()).kind() != Some(Kind::Overflow) {
                return Err(corrupt(format!(
                    "page {next} of an overflow chain is not one"
                )));
            }
            let after = Node(page.bytes()).aux();
            self.free(w, &mut page);
            next = after;
        }
        Ok(())
    }

    /// Appends entry `i` of leaf `n` to `out`.
    fn copy_entry(&self, n: &Node<'_>, i: usize, out: &mut LeafCopy) -> Result<()> {
        let start = out.bytes.len();
        out.bytes.extend_from_slice(n.key(i));
        let key_len = out.bytes.len() - start;
        self.append_value(n, i, &mut out.bytes)?;
        out.entries
            .push((start, key_len, out.bytes.len() - start - key_len));
        Ok(())
    }

    /// Calls `f(key, value)` for keys in `[from, to)` order (forward) or reverse, until it
    /// returns false. Each leaf is copied out under its latch, so `f` runs latch-free.
    /// `expected`: how many entries the caller expects to take, if it knows (the copies are
    /// sized to it, so a scan of `n` entries within one leaf descends once).
    pub(crate) fn range(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        forward: bool,
        expected: Option<usize>,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let below_from = |k: &[u8]| match from {
            Bound::Included(s) => k < s,
            Bound::Excluded(s) => k <= s,
            Bound::Unbounded => false,
        };
        let above_to = |k: &[u8]| match to {
            Bound::Included(e) => k > e,
            Bound::Excluded(e) => k >= e,
            Bound::Unbounded => false,
        };
        // Entries come in scan order, so once one is past the bound the scan starts from,
        // every later one is too (see `hand_out`).
        let mut started = false;
        let mut batch = ScanBuffer::take();
        if forward {
            let mut cursor: Option<Vec<u8>> = match from {
                Bound::Included(s) | Bound::Excluded(s) => Some(s.to_vec()),
                Bound::Unbounded => None,
            };
            // After a partial copy the cursor is the last key copied, and excluded.
            let mut after_cursor = false;
            let mut chunk = expected.unwrap_or(FIRST_SCAN_CHUNK).max(1);
            let mut handed = 0usize;
            loop {
                let leaf = self.descend(Target::Key(cursor.as_deref().unwrap_or(&[])))?;
                let n = Node(leaf.page.bytes());
                batch.clear();
                let start = cursor.as_deref().map_or(0, |c| match n.search(c) {
                    Ok(i) if after_cursor => i + 1,
                    Ok(i) | Err(i) => i,
                });
                let end = n.count().min(start.saturating_add(chunk));
                for i in start..end {
                    n.prefetch_entry(i + SCAN_PREFETCH);
                    self.copy_entry(&n, i, &mut batch)?;
                }
                let rest_of_leaf = end < n.count();
                let high = leaf.high;
                drop(leaf.page);
                if !hand_out(&batch, below_from, above_to, &mut started, &mut handed, f) {
                    return Ok(());
                }
                chunk = next_chunk(chunk, expected, handed);
                if rest_of_leaf {
                    cursor = batch.last_key().map(<[u8]>::to_vec);
                    after_cursor = true;
                    continue;
                }
                match high {
                    Some(h) => {
                        if let Bound::Included(e) | Bound::Excluded(e) = to
                            && h.as_slice() > e
                        {
                            return Ok(());
                        }
                        cursor = Some(h);
                        after_cursor = false;
                    }
                    None => return Ok(()),
                }
            }
        } else {
            let mut cursor: Option<Vec<u8>> = None; // exclusive upper bound after the first leaf
            let mut first = true;
            let mut chunk = expected.unwrap_or(FIRST_SCAN_CHUNK).max(1);
            let mut handed = 0usize;
            loop {
                let leaf = if first {
                    match to {
                        Bound::Included(e) => self.descend(Target::Key(e))?,
                        Bound::Excluded(e) => self.descend(Target::Before(e))?,
                        Bound::Unbounded => self.descend(Target::Last)?,
                    }
                } else {
                    match &cursor {
                        Some(c) => self.descend(Target::Before(c))?,
                        None => return Ok(()),
                    }
                };
                first = false;
                let n = Node(leaf.page.bytes());
                batch.clear();
                let end = cursor
                    .as_deref()
                    .map_or(n.count(), |c| n.search(c).unwrap_or_else(|i| i));
                let start = end.saturating_sub(chunk);
                for i in (start..end).rev() {
                    if let Some(ahead) = i.checked_sub(SCAN_PREFETCH) {
                        n.prefetch_entry(ahead);
                    }
                    self.copy_entry(&n, i, &mut batch)?;
                }
                let low = leaf.low;
                drop(leaf.page);
                if !hand_out(&batch, above_to, below_from, &mut started, &mut handed, f) {
                    return Ok(());
                }
                chunk = next_chunk(chunk, expected, handed);
                if start > 0 {
                    // The rest of this leaf is below the last key copied.
                    cursor = batch.last_key().map(<[u8]>::to_vec);
                    continue;
                }
                match low {
                    Some(l) => cursor = Some(l),
                    None => return Ok(()),
                }
            }
        }
    }

    // ---------------------------------------------------------------- the writer

    fn check_entry(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        if key.len() > self.limits.max_key {
            return Err(Error::KeyTooLarge {
                len: key.len(),
                max: self.limits.max_key,
            });
        }
        if let Some(v) = value
            && v.len() > self.limits.max_value
        {
            return Err(Error::ValueTooLarge {
                len: v.len(),
                max: self.limits.max_value,
            });
        }
        Ok(())
    }

    /// Applies `ops` (value `None` = delete) as one atomic batch: one log frame, so after a
    /// crash all of them or none are there. Returns, per op, whether the key existed before,
    /// and the LSN that makes the batch durable once the log reaches it.
    pub(crate) fn apply(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<(Vec<bool>, u64)> {
        for (k, v) in ops {
            self.check_entry(k, *v)?;
        }
        if let [(key, value)] = ops
            && let Some((existed, end)) =
                self.change_in_leaf(key, value.map_or(LeafChange::Delete, LeafChange::Put))?
        {
            return Ok((vec![existed], end));
        }
        self.check_batch_fits(ops)?;
        let mut w = self.lock_writer(ops.iter().map(|(k, _)| *k));
        self.begin(&mut w)?;
        let guard = FreezeOnUnwind(&self.pool);
        let mut existed = Vec::with_capacity(ops.len());
        for (k, v) in ops {
            let r = match v {
                Some(v) => self.put_locked(&mut w, k, v).map(|new| !new),
                None => self.delete_locked(&mut w, k),
            };
            match r {
                Ok(e) => existed.push(e),
                // Refused before the batch changed anything (no record logged, so no page
                // changed): nothing to undo, and the store goes on.
                Err(e @ Error::InvalidArgument(_)) if w.rec.is_empty() && !w.direct => {
                    return Err(e);
                }
                Err(e) => return Err(self.fail(&mut w, e)),
            }
        }
        let end = self.commit(&mut w)?;
        drop(guard);
        Ok((existed, end))
    }

    /// Refuses, before anything is changed, a batch whose pages may not fit half the pool: a
    /// batch's pages stay in DRAM until it is complete (no steal), and a pool that runs out of
    /// frames in the middle of a batch leaves the store read-only. Per op: its path and a
    /// split's new pages (twice the height, plus two) and its overflow pages.
    fn check_batch_fits(&self, ops: &[(&[u8], Option<&[u8]>)]) -> Result<()> {
        if ops.len() <= 1 {
            return Ok(()); // one op fits by the value limit
        }
        let height = self.height()? as usize;
        let cap = self.pool.page_size() - node::HEADER;
        let pages: usize = ops
            .iter()
            .map(|(_, v)| {
                let chain = v
                    .filter(|v| v.len() > self.limits.max_inline)
                    .map_or(0, |v| v.len().div_ceil(cap));
                2 * height + 2 + chain
            })
            .sum();
        let logged: usize = pages * self.pool.page_size()
            + ops
                .iter()
                .map(|(k, v)| k.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>();
        if logged > crate::wal::MAX_FRAME / 2 {
            return Err(Error::InvalidArgument(format!(
                "write batch of {} ops may log {logged} bytes, more than one log frame holds \
                 ({} bytes): split the batch",
                ops.len(),
                crate::wal::MAX_FRAME / 2
            )));
        }
        if let Some(d) = self.pool.direct() {
            // Each page's lines saved at most once, with at most one 64-byte entry head per
            // line: twice the page.
            let undo = 2 * pages as u64 * self.pool.page_size() as u64;
            // Entries start at 64, and a zeroed head follows the last one.
            if undo > d.region().head_len() - 128 {
                return Err(Error::InvalidArgument(format!(
                    "write batch of {} ops may change {pages} pages, more than the NVM-direct \
                     undo log holds ({} bytes): split the batch",
                    ops.len(),
                    d.region().head_len()
                )));
            }
            return Ok(());
        }
        let room = self.pool.frames() / 2;
        if pages > room {
            return Err(Error::InvalidArgument(format!(
                "write batch of {} ops may change {pages} pages, more than half the buffer \
                 pool ({room} of {} pages): split the batch or raise the DRAM budget",
                ops.len(),
                self.pool.frames()
            )));
        }
        Ok(())
    }

    /// Replaces the value of `key` if it has one; whether it had, and the LSN that makes the
    /// change durable.
    pub(crate) fn update(&self, key: &[u8], value: &[u8]) -> Result<(bool, u64)> {
        self.check_entry(key, Some(value))?;
        if let Some(done) = self.change_in_leaf(key, LeafChange::Update(value))? {
            return Ok(done);
        }
        let mut existed = false;
        let end = self.modify(key, &mut |old| {
            existed = old.is_some();
            if existed {
                crate::store::Change::Put(value.to_vec())
            } else {
                crate::store::Change::Keep
            }
        })?;
        Ok((existed, end))
    }

    /// Reads `key` and applies what `decide` returns, under the writer lock (exclusive).
    pub(crate) fn modify(
        &self,
        key: &[u8],
        decide: &mut dyn FnMut(Option<&[u8]>) -> crate::store::Change,
    ) -> Result<u64> {
        self.check_entry(key, None)?;
        let mut w = self.lock_writer(std::iter::once(key));
        self.begin(&mut w)?;
        // By lines when the put can be made by lines too (`put_by_lines`).
        let current = self.get_from(key, self.pool.line_grained())?;
        // The caller's closure runs before anything changes: a panic in it leaves the store
        // as it was, and writable (the writer lock is released as the panic unwinds).
        let change = decide(current.as_deref());
        let guard = FreezeOnUnwind(&self.pool);
        let r = match change {
            crate::store::Change::Keep => Ok(()),
            crate::store::Change::Put(v) => {
                self.check_entry(key, Some(&v))?;
                self.put_locked(&mut w, key, &v).map(|_| ())
            }
            crate::store::Change::Delete => self.delete_locked(&mut w, key).map(|_| ()),
        };
        match r {
            Ok(()) => {}
            // Refused before anything changed (no record logged), as in `apply`: e.g. an
            // overflow chain too long for this pool to free. The store goes on.
            Err(e @ Error::InvalidArgument(_)) if w.rec.is_empty() && !w.direct => {
                return Err(e);
            }
            Err(e) => return Err(self.fail(&mut w, e)),
        }
        let end = self.commit(&mut w);
        drop(guard);
        end
    }

    /// Takes the writer lock exclusively. While another writer holds it, or once the data has
    /// outgrown the pool ([`BufferPool::outgrown`]), this one first descends to the leaves of
    /// `keys` with shared latches (at most [`WARM_KEYS`] of them): a page read from the device
    /// then overlaps the other writers' work instead of being made under the lock, where it
    /// holds up every writer. Only a hint: the writer fixes the pages again (an evicted one
    /// is read again), and reports any error itself.
    #[inline]
    fn lock_writer<'k>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> parking_lot::RwLockWriteGuard<'_, Writer> {
        if !self.pool.outgrown()
            && let Some(w) = self.writer.try_write()
        {
            return w;
        }
        self.warm_then_lock(keys)
    }

    /// [`Tree::lock_writer`]'s reads, then the wait. Out of line: the uncontended path of a
    /// write stays small.
    #[inline(never)]
    fn warm_then_lock<'k>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
    ) -> parking_lot::RwLockWriteGuard<'_, Writer> {
        // NVM direct has nothing to read in: its pages are the region's. A line-grained pool
        // reads inner pages only: its writers fix leaves in NVM by lines, which costs the
        // lock little, and a whole leaf read here would load every line. A frozen pool (the
        // store is read-only) is not read from: the write is refused under the lock. Each
        // waiting writer reads in at most an eighth of the pool, so that waiting writers do not
        // evict each other's pages.
        if self.pool.direct().is_none() && !self.pool.frozen() {
            let fix_leaf = !self.pool.line_grained();
            for key in keys.take(WARM_KEYS.min(self.pool.frames() / 8)) {
                if self.path_to(key, fix_leaf).is_err() {
                    break; // the writer meets the error again and reports it
                }
                self.writer_early_descents.incr();
            }
        }
        let (w, parked) = crate::sync::spin_then_park(
            || self.writer.try_write(),
            || self.writer.write(),
            WRITER_SPIN,
        );
        if parked {
            self.writer_parks.incr();
        }
        w
    }

    fn begin(&self, w: &mut Writer) -> Result<()> {
        if w.failed.is_none() && self.pool.frozen() {
            w.failed = Some(super::Refusal::Failed(
                self.pool
                    .write_failure()
                    .unwrap_or_else(|| "a change failed half-way (panic)".into()),
            ));
        }
        if let Some(refusal) = &w.failed {
            return Err(refusal.error(None));
        }
        w.rec.clear();
        w.frame_lsn = self.wal()?.next_lsn();
        // Leaf writers count the keys they add (and log the count) without the meta page: it
        // gets the count when this batch commits (`logged_meta` still holds the old one).
        w.meta.count = self.count.load(Ordering::Acquire);
        Ok(())
    }

    /// Brings the meta page up to date with the keys leaf writers added, logging it: before a
    /// checkpoint writes the page out, since the log it starts from no longer holds their
    /// counts.
    pub(crate) fn settle_meta(&self, w: &mut Writer) -> Result<()> {
        self.begin(w)?;
        let guard = FreezeOnUnwind(&self.pool);
        let end = self.commit(w).map(|_| ());
        drop(guard);
        end
    }

    /// Hands the batch's records to the log; returns the LSN to wait for.
    fn commit(&self, w: &mut Writer) -> Result<u64> {
        let wal = self.wal()?;
        // The count may be back where the last record left it while leaf writers moved it
        // since (the readers' count then differs).
        if w.meta != w.logged_meta || w.meta.count != self.count.load(Ordering::Acquire) {
            // A count changed by puts that fitted their leaves: one meta record per batch.
            if let Err(e) = self.log_meta(w) {
                return Err(self.fail(w, e));
            }
        }
        if w.direct {
            // The batch's lines are persisted in place: durable once this returns.
            return match self.pool.direct_commit() {
                Ok(()) => Ok(wal.next_lsn()),
                Err(e) => Err(self.fail(w, e)),
            };
        }
        if w.rec.is_empty() {
            return Ok(wal.next_lsn());
        }
        debug_assert_eq!(wal.next_lsn(), w.frame_lsn);
        match wal.append(&w.rec) {
            Ok(end) => {
                w.rec.clear();
                Ok(end)
            }
            Err(e) => Err(self.fail(w, e)),
        }
    }

    /// A change failed half-way: pages may hold part of it, so no further writes.
    fn fail(&self, w: &mut Writer, e: Error) -> Error {
        if w.failed.is_none() {
            w.failed = Some(super::Refusal::Failed(e.failure_reason()));
        }
        // Pages may hold part of the change without a log record for it: none of them may
        // reach media now (the store is read-only; restart redoes from the log).
        self.pool.freeze();
        if w.direct {
            // The pages are on media already: put the lines the change made back at once
            // (restart would undo them too), and the tree's root and count with the meta page,
            // before readers see the restored pages (a reader that fixed the old root finds
            // it changed and starts again).
            self.pool.direct_abort(META_PID, |meta| {
                if let Some(page) = meta {
                    self.install_meta(w, Meta::read(page));
                }
            });
        }
        e
    }

    fn next_lsn(w: &Writer) -> u64 {
        w.frame_lsn + FRAME_HEADER + w.rec.len() as u64
    }

    /// Logs the change just made to `page` (a delta, or its image on its first change in
    /// this generation) and stamps the page with the record's LSN.
    fn log_change(&self, w: &mut Writer, page: &mut PageWrite<'_>, delta: &dyn Fn(&mut Vec<u8>)) {
        if w.direct {
            return;
        }
        if w.imaged.has(page.pid(), w.generation) {
            let lsn = Self::next_lsn(w);
            delta(&mut w.rec);
            edit(page).set_lsn(lsn);
        } else {
            self.log_image(w, page);
        }
    }

    /// Appends a `Put` (or `PutRef`) record.
    fn put_record(rec: &mut Vec<u8>, pid: u64, key: &[u8], value: &[u8], is_ref: bool) {
        rec.push(if is_ref { REC_PUT_REF } else { REC_PUT });
        rec.extend_from_slice(&pid.to_le_bytes());
        rec.extend_from_slice(&(key.len() as u16).to_le_bytes());
        rec.extend_from_slice(&(value.len() as u32).to_le_bytes());
        rec.extend_from_slice(key);
        rec.extend_from_slice(value);
    }

    /// Appends a record of `kind` that names a key only (`Remove`, `Truncate`).
    fn key_record(rec: &mut Vec<u8>, kind: u8, pid: u64, key: &[u8]) {
        rec.push(kind);
        rec.extend_from_slice(&pid.to_le_bytes());
        rec.extend_from_slice(&(key.len() as u16).to_le_bytes());
        rec.extend_from_slice(key);
    }

    fn log_image(&self, w: &mut Writer, page: &mut PageWrite<'_>) {
        if w.direct {
            return;
        }
        let lsn = Self::next_lsn(w);
        Self::image_record(&mut w.rec, page, lsn);
        w.imaged.set(page.pid(), w.generation);
    }

    /// Stamps `page` with `lsn` and appends its `Image` record (which must land at `lsn`).
    fn image_record(rec: &mut Vec<u8>, page: &mut PageWrite<'_>, lsn: u64) {
        let pid = page.pid();
        edit(page).set_lsn(lsn);
        let img = node::image(page.bytes());
        rec.push(REC_IMAGE);
        rec.extend_from_slice(&pid.to_le_bytes());
        rec.extend_from_slice(&(img.len() as u32).to_le_bytes());
        rec.extend_from_slice(&img);
    }

    /// Appends a `Meta` record.
    fn meta_record(rec: &mut Vec<u8>, m: Meta) {
        rec.push(REC_META);
        for v in [m.root, m.next_pid, m.free_head, m.count] {
            rec.extend_from_slice(&v.to_le_bytes());
        }
    }

    fn log_meta(&self, w: &mut Writer) -> Result<()> {
        let lsn = Self::next_lsn(w);
        let m = w.meta;
        w.logged_meta = m;
        if !w.direct {
            Self::meta_record(&mut w.rec, m);
        }
        let mut page = self.pool.fix_exclusive(META_PID)?;
        let mut n = edit(&mut page);
        m.write(&mut n);
        if !w.direct {
            n.set_lsn(lsn);
        }
        self.root.store(m.root, Ordering::Release);
        self.count.store(m.count, Ordering::Release);
        Ok(())
    }

    /// The pids from the root to the leaf for `key` (the writer is the only one changing the
    /// structure, so the path stays valid while it holds the writer lock, shared or not).
    fn path(&self, key: &[u8]) -> Result<PagePath> {
        self.path_to(key, true)
    }

    /// [`Tree::path`]; with `fix_leaf` false, the leaf below an inner page is named but not
    /// fixed (nor checked: the caller fixes it as it needs, by lines or whole).
    fn path_to(&self, key: &[u8], fix_leaf: bool) -> Result<PagePath> {
        let mut restarts = 0;
        'descent: loop {
            let mut path = PagePath::new();
            // The root is re-checked: a writer waiting for the lock descends too.
            let mut page = self.fix_root()?;
            loop {
                path.push(page.pid());
                let n = Node(page.bytes());
                match n.kind() {
                    Some(Kind::Leaf) => return Ok(path),
                    Some(Kind::Inner) if path.len() < MAX_DEPTH => {
                        let (at, level) = (n.route(key), n.level());
                        if !fix_leaf && level == 1 {
                            path.push(self.pool.resolve(n.child_at(at)));
                            return Ok(path);
                        }
                        let Some(next) = self.fix_child(page, at, &mut restarts)? else {
                            continue 'descent;
                        };
                        page = next;
                    }
                    _ => return Err(corrupt(format!("page {}: not a tree page", page.pid()))),
                }
            }
        }
    }

    /// A change to one leaf only (no split or merge, no overflow pages), made beside other such
    /// changes (a leaf writer): under the writer lock shared, with the leaf fixed exclusively
    /// from the change until its log frame is appended and the leaf stamped with the frame's
    /// LSN (so each page's changes reach the log in the order they were made). A frame that
    /// adds or removes a key also carries the meta record with the key count, taken in the
    /// log's order. `None`, with nothing changed, when the change needs the writer lock
    /// exclusively: a put's leaf is full, a delete would leave its leaf underfull (a merge),
    /// the new or the old value goes to overflow pages, the leaf has no image entry yet, the
    /// store has no leaf writers (NVM direct, a line-grained pool), or the store refuses
    /// writes (the exclusive path reports why). A missing key is left out by
    /// [`LeafChange::Update`] and [`LeafChange::Delete`]. Returns whether the key existed and
    /// the LSN that makes the change durable.
    fn change_in_leaf(&self, key: &[u8], change: LeafChange<'_>) -> Result<Option<(bool, u64)>> {
        let inline = match change {
            LeafChange::Put(v) | LeafChange::Update(v) => v.len() <= self.limits.max_inline,
            LeafChange::Delete => true,
        };
        if !self.leaf_writers || !inline {
            return Ok(None);
        }
        // A leaf writer waits while an exclusive writer splits, merges or applies a batch
        // (mostly microseconds): it spins before it parks, as exclusive writers do. The lock's
        // own wait spins only briefly: in a load of 1.5 M keys by two writers, one of them
        // went to sleep at most splits, the largest of the three sources of 20,000 context
        // switches (docs/BENCHMARKS.md, Figure 24).
        let (w, parked) = crate::sync::spin_then_park(
            || self.writer.try_read(),
            || self.writer.read(),
            WRITER_SPIN,
        );
        if parked {
            self.leaf_writer_parks.incr();
        }
        if w.failed.is_some() || self.pool.frozen() {
            return Ok(None);
        }
        let wal = self.wal()?;
        // The structure cannot change while the lock is shared: the path stays valid.
        let path = self.path_to(key, false)?;
        let leaf_pid = *path.last().expect("path has a leaf");
        let mut leaf = self.pool.fix_exclusive(leaf_pid)?;
        if self.pool.frozen() {
            // Another writer failed meanwhile (the leaf may hold its unlogged change).
            return Ok(None);
        }
        let imaged = w.imaged.has(leaf_pid, w.generation);
        if !imaged && w.imaged.entry(leaf_pid).is_none() {
            return Ok(None);
        }
        // How the key count moves: +1, 0 or -1; and where the key is (the change below uses
        // this search: nothing changes the leaf in between, it is fixed exclusively).
        let (keys, found): (i8, _) = {
            let n = Node(leaf.bytes());
            if n.kind() != Some(Kind::Leaf) || n.level() != 0 {
                return Err(corrupt(format!(
                    "page {leaf_pid}: not a leaf below a level-1 page"
                )));
            }
            let found = n.search(key);
            let keys = match (found, change) {
                (Ok(i), _) if n.is_ref(i) => return Ok(None),
                (Ok(i), LeafChange::Put(v) | LeafChange::Update(v)) => {
                    if n.free_space() + n.value(i).len() < v.len() {
                        return Ok(None);
                    }
                    0
                }
                (Ok(i), LeafChange::Delete) => {
                    // What the removal frees (cells hold whole keys), so the leaf stays at
                    // least a quarter full, as the exclusive path's merge rule wants.
                    let freed = node::entry_size(key.len(), n.value(i).len());
                    if path.len() > 1 && n.used() < self.pool.page_size() / 4 + freed {
                        return Ok(None);
                    }
                    -1
                }
                (Err(_), LeafChange::Update(_) | LeafChange::Delete) => {
                    return Ok(Some((false, wal.next_lsn())));
                }
                (Err(_), LeafChange::Put(v)) => {
                    if n.free_space() < node::entry_size(key.len(), v.len()) {
                        return Ok(None);
                    }
                    1
                }
            };
            (keys, found)
        };
        let guard = FreezeOnUnwind(&self.pool);
        // Until its record is in the log the leaf carries an LSN no commit reaches, so that
        // write-back leaves it alone (`WalRule::committed_lsn`), also when the record never
        // comes (the store then fails, and only redo from the log rebuilds the page).
        edit(&mut leaf).set_lsn(UNLOGGED_LSN);
        let changed = match change {
            LeafChange::Put(v) | LeafChange::Update(v) => edit(&mut leaf)
                .upsert_found(found, key, v, false)
                .map(|_| ()),
            LeafChange::Delete => match found {
                Ok(i) => {
                    edit(&mut leaf).remove_at(i);
                    Ok(())
                }
                Err(_) => Err(()),
            },
        };
        let appended = match changed {
            Ok(()) => LEAF_FRAME.with_borrow_mut(|frame| {
                wal.append_with(frame, |frame_lsn, rec| {
                    if self.pool.frozen() {
                        // A writer failed (or panicked) after this one's check: its change
                        // may be in pages without a record, so nothing may follow it.
                        return Err(Error::ReadOnly {
                            path: None,
                            reason: self
                                .pool
                                .write_failure()
                                .unwrap_or_else(|| "a change failed half-way".into()),
                        });
                    }
                    // Only leaf writers change the count while the lock is shared, each under
                    // the log's tail lock: a load and a store suffice. The store comes last
                    // (an error or a panic while building leaves the count alone); a frame
                    // built but not stored fails the log (`append_with`).
                    let count = match keys {
                        0 => None,
                        1 => Some(self.count.load(Ordering::Acquire) + 1),
                        _ => Some(
                            self.count
                                .load(Ordering::Acquire)
                                .checked_sub(1)
                                .ok_or_else(|| {
                                    corrupt("the meta page counts no keys, the tree holds one")
                                })?,
                        ),
                    };
                    let lsn = frame_lsn + FRAME_HEADER;
                    if imaged {
                        match change {
                            LeafChange::Put(v) | LeafChange::Update(v) => {
                                Self::put_record(rec, leaf_pid, key, v, false);
                            }
                            LeafChange::Delete => {
                                Self::key_record(rec, REC_REMOVE, leaf_pid, key);
                            }
                        }
                        edit(&mut leaf).set_lsn(lsn);
                    } else {
                        Self::image_record(rec, &mut leaf, lsn);
                        w.imaged.set_shared(leaf_pid, w.generation);
                    }
                    if let Some(count) = count {
                        Self::meta_record(rec, Meta { count, ..w.meta });
                        self.count.store(count, Ordering::Release);
                    }
                    Ok(())
                })
            }),
            Err(()) => Err(corrupt(format!(
                "page {leaf_pid}: a leaf refused a change its search allowed"
            ))),
        };
        match appended {
            Ok(end) => {
                drop(leaf);
                drop(guard);
                self.leaf_writes.incr();
                Ok(Some((keys <= 0, end)))
            }
            Err(e) => {
                // The leaf may hold the change without its record: it must not reach media.
                self.pool.freeze();
                drop(leaf);
                drop(guard);
                drop(w);
                Err(self.fail(&mut self.writer.write(), e))
            }
        }
    }

    /// Inserts or replaces; whether the key was new.
    fn put_locked(&self, w: &mut Writer, key: &[u8], value: &[u8]) -> Result<bool> {
        let by_lines = self.pool.line_grained() && value.len() <= self.limits.max_inline;
        // The leaf is named, not fixed: `put_by_lines` or `put_entry` fixes it and checks it
        // there (a shared fix and a search of it here cost a put about 8 %).
        let path = self.path_to(key, false)?;
        let leaf_pid = *path.last().expect("path has a leaf");
        if by_lines && let Some(new) = self.put_by_lines(w, leaf_pid, key, value)? {
            if new {
                w.meta.count += 1;
            }
            return Ok(new);
        }
        let chain;
        let (value, is_ref) = if value.len() > self.limits.max_inline {
            // An old chain this pool cannot free is refused before the new chain is written
            // and logged (after that, the refusal would fail the store, as `put_entry`'s
            // check alone did for a large value over a larger one).
            if let Some(r) = self.old_ref(leaf_pid, key)? {
                self.check_chain_fits(&r, path.len())?;
            }
            chain = self.write_chain(w, value)?;
            (&chain[..], true)
        } else {
            (value, false)
        };
        let (new, old) = self.put_entry(w, &path, key, value, is_ref)?;
        if let Some(r) = old {
            self.free_chain(w, &r)?;
        }
        Ok(new)
    }

    /// Puts `key` with an inline `value` into leaf `leaf_pid` fixed by lines: a leaf brought
    /// in from NVM for it loads the lines its search reads and those the change touches, not
    /// the whole page (the paper's MakeResident for writers), and its write-back writes the
    /// changed lines. Two changes go this way: a value replaced by one of the same size (in
    /// place), and a new key whose entry fits without compacting the heap or changing the
    /// page's prefix (its slot, the slots after it, its cell and the header). `Some(new)`:
    /// done, `new` if the key was new. `None` (nothing changed): any other change, or the
    /// leaf's image is not in this log generation yet (an image needs the whole page).
    fn put_by_lines(
        &self,
        w: &mut Writer,
        leaf_pid: u64,
        key: &[u8],
        value: &[u8],
    ) -> Result<Option<bool>> {
        if !w.imaged.has(leaf_pid, w.generation) {
            return Ok(None);
        }
        let ForWrite::Lines(mut leaf) = self.pool.fix_lines_exclusive(leaf_pid)? else {
            return Ok(None); // whole in DRAM: the ordinary path costs nothing more
        };
        if leaf.bytes(4, 2)? != [Kind::Leaf as u8, 0] {
            return Err(corrupt(format!(
                "page {leaf_pid} on a leaf's path is not a leaf"
            )));
        }
        // Where the change goes: `Ok(value range)` in place, or `Err(slot)` for a new entry.
        let place = match node::search_in(&mut leaf, key)? {
            Ok(i) => {
                let (range, is_ref) = node::value_range_in(&mut leaf, i)?;
                if is_ref || range.len() != value.len() {
                    return Ok(None);
                }
                Ok(range)
            }
            Err(at) => {
                if !node::insert_lines_in(&mut leaf, at, key, value.len())? {
                    return Ok(None);
                }
                Err(at)
            }
        };
        let marked = match &place {
            Ok(range) => range.clone(),
            Err(_) => 0..node::HEADER,
        };
        let (bytes, changed) = leaf.bytes_marking(marked)?;
        let lsn = Self::next_lsn(w);
        let mut n = NodeMut::marking(bytes, changed);
        let new = match place {
            Ok(range) => {
                n.overwrite(range, value);
                false
            }
            Err(at) => {
                if !n.insert_cell(at, key, value, false) {
                    return Err(corrupt(format!(
                        "page {leaf_pid}: a leaf refused an entry that fits"
                    )));
                }
                true
            }
        };
        n.set_lsn(lsn);
        Self::put_record(&mut w.rec, leaf_pid, key, value, false);
        Ok(Some(new))
    }

    /// The overflow reference of `key`'s value in leaf `leaf_pid`, if it has one.
    fn old_ref(&self, leaf_pid: u64, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let leaf = self.pool.fix_shared(leaf_pid)?;
        let n = Node(leaf.bytes());
        if n.kind() != Some(Kind::Leaf) || n.level() != 0 {
            return Err(corrupt(format!(
                "page {leaf_pid}: not a leaf below a level-1 page"
            )));
        }
        Ok(n.search(key)
            .ok()
            .and_then(|i| n.is_ref(i).then(|| n.value(i).to_vec())))
    }

    /// Puts an entry (value stored as given) into the leaf at the end of `path`, after
    /// checking that it is a leaf; returns whether the key was new, and the overflow
    /// reference of the value it replaced (for the caller to free).
    fn put_entry(
        &self,
        w: &mut Writer,
        path: &[u64],
        key: &[u8],
        value: &[u8],
        is_ref: bool,
    ) -> Result<(bool, Option<Vec<u8>>)> {
        let leaf_pid = *path.last().expect("path has a leaf");
        let mut leaf = self.pool.fix_exclusive(leaf_pid)?;
        let (fits, old) = {
            let n = Node(leaf.bytes());
            if n.kind() != Some(Kind::Leaf) || n.level() != 0 {
                return Err(corrupt(format!(
                    "page {leaf_pid}: not a leaf below a level-1 page"
                )));
            }
            match n.search(key) {
                Ok(i) => (
                    n.free_space() + n.value(i).len() >= value.len(),
                    n.is_ref(i).then(|| n.value(i).to_vec()),
                ),
                Err(_) => (
                    n.free_space() >= node::entry_size(key.len(), value.len()),
                    None,
                ),
            }
        };
        if let Some(r) = &old {
            self.check_chain_fits(r, path.len())?;
        }
        if fits {
            let new = edit(&mut leaf)
                .upsert_cell(key, value, is_ref)
                .map_err(|()| corrupt("leaf refused an entry that fits"))?;
            self.log_change(w, &mut leaf, &|rec: &mut Vec<u8>| {
                Self::put_record(rec, leaf_pid, key, value, is_ref);
            });
            drop(leaf);
            if new {
                // Logged once per batch, at its commit.
                w.meta.count += 1;
            }
            return Ok((new, old));
        }
        drop(leaf);
        // The writer lock keeps the leaf as it was searched: `old` still holds.
        let new = self.split_insert(w, path, key, value, is_ref)?;
        Ok((new, old))
    }

    /// Allocates a page: from the free list, else past the high-water mark.
    fn alloc(&self, w: &mut Writer) -> Result<PageWrite<'_>> {
        let pid = if w.meta.free_head != 0 {
            let pid = w.meta.free_head;
            let page = self.pool.fix_shared(pid)?;
            let n = Node(page.bytes());
            if n.kind() != Some(Kind::Free) {
                return Err(corrupt(format!("page {pid} on the free list is not free")));
            }
            w.meta.free_head = n.aux();
            pid
        } else {
            w.meta.next_pid += 1;
            w.meta.next_pid - 1
        };
        w.imaged.forget(pid);
        self.pool.fix_new(pid)
    }

    /// Returns `page` to the free list (logged as its image).
    fn free(&self, w: &mut Writer, page: &mut PageWrite<'_>) {
        let pid = page.pid();
        edit(page).init(Kind::Free, 0, pid, w.meta.free_head);
        w.meta.free_head = pid;
        self.log_image(w, page);
    }

    /// Split point of a full page: the first index at which half of its bytes are left of it.
    fn split_index(n: &Node<'_>) -> usize {
        let half = n.used() / 2;
        let mut acc = 0;
        for i in 0..n.count() {
            acc += node::entry_size(n.key(i).len(), n.value(i).len());
            if acc >= half {
                return (i + 1).clamp(1, n.count() - 1);
            }
        }
        n.count() / 2
    }

    /// Insert that needs splits: fixes the whole path exclusive, top-down, then splits
    /// bottom-up as far as needed.
    fn split_insert(
        &self,
        w: &mut Writer,
        path: &[u64],
        key: &[u8],
        value: &[u8],
        is_ref: bool,
    ) -> Result<bool> {
        let mut pages = Vec::with_capacity(path.len());
        for &pid in path {
            pages.push(self.pool.fix_exclusive(pid)?);
        }
        let mut leaf = pages.pop().expect("leaf");
        let leaf_pid = leaf.pid();
        // A leaf that already has an image in this generation logs its split as deltas (the
        // removal of the old entry, the truncation, the new entry), not as a second image:
        // splits dominated the log of a growing tree.
        let left_deltas = w.imaged.has(leaf_pid, w.generation);
        let new = !edit(&mut leaf).remove(key);
        if !new && left_deltas {
            self.log_change(w, &mut leaf, &|rec: &mut Vec<u8>| {
                Self::key_record(rec, REC_REMOVE, leaf_pid, key);
            });
        }
        // Every page stays latched until the new root (if any) is published: a reader that
        // fixed the old root must not find it split before the root pointer moves.
        let mut held: Vec<PageWrite<'_>> = Vec::new();
        let free_now = Node(leaf.bytes()).free_space();
        if free_now >= node::entry_size(key.len(), value.len()) || Node(leaf.bytes()).count() < 2 {
            // Removing the old entry made room (a value grew in place).
            edit(&mut leaf)
                .upsert_cell(key, value, is_ref)
                .map_err(|()| corrupt("entry does not fit an emptied leaf"))?;
            self.log_image(w, &mut leaf);
            held.push(leaf);
            drop(pages);
            if new {
                w.meta.count += 1;
            }
            self.log_meta(w)?;
            return Ok(new);
        }
        // Split the leaf and put the entry into the half it belongs to.
        let mut right = self.alloc(w)?;
        let right_pid = right.pid();
        edit(&mut right).init(Kind::Leaf, 0, right_pid, 0);
        let at = Self::split_index(&Node(leaf.bytes()));
        edit(&mut leaf).move_tail(at, &mut edit(&mut right));
        let sep = {
            let (l, r) = (Node(leaf.bytes()), Node(right.bytes()));
            let (last, first) = (l.key(l.count() - 1), r.key(0));
            let common = last.iter().zip(first).take_while(|(a, b)| a == b).count();
            first[..(common + 1).min(first.len())].to_vec()
        };
        let into_left = key < sep.as_slice();
        let target = if into_left { &mut leaf } else { &mut right };
        edit(target)
            .upsert_cell(key, value, is_ref)
            .map_err(|()| corrupt("entry does not fit a half page"))?;
        if left_deltas {
            // Redo replays these in order on the leaf's state before the split.
            let first_moved = Node(right.bytes()).key(0).to_vec();
            self.log_change(w, &mut leaf, &|rec: &mut Vec<u8>| {
                Self::key_record(rec, REC_TRUNCATE, leaf_pid, &first_moved);
            });
            if into_left {
                self.log_change(w, &mut leaf, &|rec: &mut Vec<u8>| {
                    Self::put_record(rec, leaf_pid, key, value, is_ref);
                });
            }
        } else {
            self.log_image(w, &mut leaf);
        }
        self.log_image(w, &mut right);
        let mut child_left = (leaf.pid(), 0u8);
        held.push(leaf);
        held.push(right);
        let mut up: (Vec<u8>, u64) = (sep, right_pid);
        loop {
            let Some(mut parent) = pages.pop() else {
                // The root split: a new root above it.
                let mut root = self.alloc(w)?;
                let pid = root.pid();
                let level = child_left.1 + 1;
                edit(&mut root).init(Kind::Inner, level, pid, child_left.0);
                if !edit(&mut root).insert_at(0, &up.0, &up.1.to_le_bytes()) {
                    return Err(corrupt("separator does not fit an empty root"));
                }
                self.log_image(w, &mut root);
                held.push(root);
                w.meta.root = pid;
                break;
            };
            let fits = Node(parent.bytes()).free_space() >= node::entry_size(up.0.len(), 8);
            if fits {
                let at = Node(parent.bytes()).search(&up.0).unwrap_or_else(|i| i);
                let child = up.1.to_le_bytes();
                edit(&mut parent).insert_at(at, &up.0, &child);
                // The separator as a delta (redo inserts it where a search puts it, as here),
                // or the parent's image on its first change in this generation.
                let parent_pid = parent.pid();
                self.log_change(w, &mut parent, &|rec: &mut Vec<u8>| {
                    Self::put_record(rec, parent_pid, &up.0, &child, false);
                });
                held.push(parent);
                break;
            }
            // Split the inner page: the middle key moves up, its child becomes the right
            // page's leftmost child.
            let mut right = self.alloc(w)?;
            let rpid = right.pid();
            let level = Node(parent.bytes()).level();
            let mid = Self::split_index(&Node(parent.bytes()));
            let (mid_key, mid_child) = {
                let n = Node(parent.bytes());
                (n.key(mid).to_vec(), self.pool.resolve(n.child(mid)))
            };
            edit(&mut right).init(Kind::Inner, level, rpid, mid_child);
            edit(&mut parent).move_tail(mid + 1, &mut edit(&mut right));
            edit(&mut parent).remove_at(mid);
            let target = if up.0.as_slice() < mid_key.as_slice() {
                &mut parent
            } else {
                &mut right
            };
            let at = Node(target.bytes()).search(&up.0).unwrap_or_else(|i| i);
            if !edit(target).insert_at(at, &up.0, &up.1.to_le_bytes()) {
                return Err(corrupt("separator does not fit a half inner page"));
            }
            self.log_image(w, &mut parent);
            self.log_image(w, &mut right);
            child_left = (parent.pid(), level);
            held.push(parent);
            held.push(right);
            up = (mid_key, rpid);
        }
        if new {
            w.meta.count += 1;
        }
        self.log_meta(w)?;
        drop(held);
        drop(pages);
        Ok(new)
    }

    /// Removes `key`; whether it existed.
    fn delete_locked(&self, w: &mut Writer, key: &[u8]) -> Result<bool> {
        let path = self.path(key)?;
        let leaf_pid = *path.last().expect("path has a leaf");
        let mut leaf = self.pool.fix_exclusive(leaf_pid)?;
        let old = match Node(leaf.bytes()).search(key) {
            Err(_) => return Ok(false),
            Ok(i) => {
                let n = Node(leaf.bytes());
                n.is_ref(i).then(|| n.value(i).to_vec())
            }
        };
        if let Some(r) = &old {
            self.check_chain_fits(r, path.len())?;
        }
        edit(&mut leaf).remove(key);
        self.log_change(w, &mut leaf, &|rec: &mut Vec<u8>| {
            Self::key_record(rec, REC_REMOVE, leaf_pid, key);
        });
        let underfull = Node(leaf.bytes()).used() < self.pool.page_size() / 4;
        drop(leaf);
        if let Some(r) = old {
            self.free_chain(w, &r)?;
        }
        w.meta.count = w
            .meta
            .count
            .checked_sub(1)
            .ok_or_else(|| corrupt("the meta page counts no keys, the tree holds one"))?;
        if underfull && path.len() > 1 {
            self.merge_path(w, &path, key)?;
        } else {
            self.log_meta(w)?;
        }
        Ok(true)
    }

    /// Merges underfull pages on `path` into a sibling where both fit one page, bottom-up,
    /// and shrinks the root when it is left with one child.
    fn merge_path(&self, w: &mut Writer, path: &[u64], key: &[u8]) -> Result<()> {
        let mut pages = Vec::with_capacity(path.len());
        for &pid in path {
            pages.push(self.pool.fix_exclusive(pid)?);
        }
        let quarter = self.pool.page_size() / 4;
        let room = self.pool.page_size() - node::HEADER;
        while pages.len() > 1 {
            let child = pages.pop().expect("child");
            let parent = pages.last_mut().expect("parent");
            if Node(child.bytes()).used() >= quarter {
                break;
            }
            let pn = Node(parent.bytes());
            let pos = pn.route(key); // None = leftmost child
            // Merge with the right sibling if there is one, else into the left one.
            let (mut left, mut right, sep_idx) = match pos {
                None if pn.count() > 0 => {
                    let sib = self.pool.fix_exclusive(self.pool.resolve(pn.child(0)))?;
                    (child, sib, 0)
                }
                Some(i) if i + 1 < pn.count() => {
                    let sib = self
                        .pool
                        .fix_exclusive(self.pool.resolve(pn.child(i + 1)))?;
                    (child, sib, i + 1)
                }
                Some(i) => {
                    let sib = self
                        .pool
                        .fix_exclusive(self.pool.resolve(pn.child_at(i.checked_sub(1))))?;
                    (sib, child, i)
                }
                None => break, // an inner page without entries: handled as the root below
            };
            let sep = Node(parent.bytes()).key(sep_idx).to_vec();
            let (l, r) = (Node(left.bytes()), Node(right.bytes()));
            let extra = if l.kind() == Some(Kind::Inner) {
                node::entry_size(sep.len(), 8)
            } else {
                0
            };
            if l.used() + r.used() + extra > room {
                break;
            }
            if l.kind() == Some(Kind::Inner) {
                let n = l.count();
                // Exclusive fixes unswizzled both pages: `aux` is a page id.
                let aux = r.aux();
                edit(&mut left).insert_at(n, &sep, &aux.to_le_bytes());
            }
            let right_copy = right.bytes().to_vec();
            if !edit(&mut left).append_all(&Node(&right_copy)) {
                return Err(corrupt("merge overflowed a page"));
            }
            edit(parent).remove_at(sep_idx);
            self.log_image(w, &mut left);
            self.free(w, &mut right);
            self.log_image(w, parent);
        }
        // A root inner page without separators hands the root to its only child.
        if pages.len() == 1 {
            let root = &mut pages[0];
            let n = Node(root.bytes());
            if n.kind() == Some(Kind::Inner) && n.count() == 0 && root.pid() == w.meta.root {
                w.meta.root = n.aux();
                self.free(w, root);
            }
        }
        // Publish the (possibly new) root before any page of the change is released.
        self.log_meta(w)?;
        drop(pages);
        Ok(())
    }

    // ---------------------------------------------------------------- redo

    /// Applies the records of one log frame whose payload starts at `lsn`.
    pub(crate) fn redo(&self, lsn: u64, payload: &[u8]) -> Result<u64> {
        let mut at = 0usize;
        let mut records = 0;
        let bad = |what: &str| corrupt(format!("log record at LSN {}: {what}", lsn));
        let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
            let s = payload.get(*at..*at + n).ok_or_else(|| {
                corrupt(format!(
                    "log frame at LSN {lsn}: record runs past the frame"
                ))
            })?;
            *at += n;
            Ok(s)
        };
        while at < payload.len() {
            let rec_lsn = lsn + at as u64;
            let kind = take(&mut at, 1)?[0];
            records += 1;
            if kind == REC_META {
                let mut v = [0u64; 4];
                for x in &mut v {
                    *x = u64::from_le_bytes(take(&mut at, 8)?.try_into().expect("8"));
                }
                let m = Meta {
                    root: v[0],
                    next_pid: v[1],
                    free_head: v[2],
                    count: v[3],
                };
                let mut page = self.pool.fix_exclusive_with(META_PID, Verify::No)?;
                if Node(page.bytes()).lsn() < rec_lsn || page.state().torn {
                    let mut n = NodeMut::new(page.bytes_mut());
                    n.init(Kind::Meta, 0, META_PID, 0);
                    m.write(&mut n);
                    n.set_lsn(rec_lsn);
                    page.state().torn = false;
                }
                continue;
            }
            let pid = u64::from_le_bytes(take(&mut at, 8)?.try_into().expect("8"));
            match kind {
                REC_IMAGE => {
                    let len = u32::from_le_bytes(take(&mut at, 4)?.try_into().expect("4")) as usize;
                    let img = take(&mut at, len)?;
                    let mut page = self.pool.fix_exclusive_with(pid, Verify::No)?;
                    node::install_image(page.bytes_mut(), img)?;
                    if Node(page.bytes()).pid() != pid {
                        return Err(bad("image of another page"));
                    }
                    page.state().torn = false;
                }
                REC_PUT | REC_PUT_REF | REC_REMOVE | REC_TRUNCATE => {
                    let klen =
                        u16::from_le_bytes(take(&mut at, 2)?.try_into().expect("2")) as usize;
                    let vlen = if kind == REC_PUT || kind == REC_PUT_REF {
                        u32::from_le_bytes(take(&mut at, 4)?.try_into().expect("4")) as usize
                    } else {
                        0
                    };
                    let key = take(&mut at, klen)?;
                    let value = take(&mut at, vlen)?;
                    let mut page = self.pool.fix_exclusive_with(pid, Verify::No)?;
                    if page.state().torn {
                        return Err(corrupt(format!(
                            "page {pid} is torn on media and the log holds no image of it \
                             before LSN {rec_lsn}"
                        )));
                    }
                    match Node(page.bytes()).kind() {
                        Some(Kind::Leaf) => {}
                        // A separator put into a parent by a split: a child id as the value.
                        Some(Kind::Inner) if kind == REC_PUT && value.len() == 8 => {}
                        _ => return Err(bad("change to a page of the wrong kind")),
                    }
                    if Node(page.bytes()).lsn() >= rec_lsn {
                        continue;
                    }
                    let mut n = edit(&mut page);
                    match kind {
                        REC_REMOVE => {
                            n.remove(key);
                        }
                        REC_TRUNCATE => n.truncate_from(key),
                        _ => {
                            if kind == REC_PUT_REF && value.len() != node::REF_LEN {
                                return Err(bad("malformed overflow reference"));
                            }
                            n.upsert_cell(key, value, kind == REC_PUT_REF)
                                .map_err(|()| bad("entry does not fit"))?;
                        }
                    }
                    n.set_lsn(rec_lsn);
                }
                _ => return Err(bad(&format!("unknown record kind {kind}"))),
            }
        }
        Ok(records)
    }

    /// Adopts the meta page after redo. Gives the pages the file holds entries for their
    /// images, so that leaf writers can take their first changes (at most the file's pages:
    /// a damaged meta page's high-water mark does not size anything; pages past the file get
    /// entries from the exclusive writer as it changes them).
    pub(crate) fn adopt_meta(&self, meta: Meta) {
        let mut w = self.writer.write();
        let file_pages = self.pool.device().len() / self.pool.page_size() as u64;
        w.imaged
            .grow_to(usize::try_from(meta.next_pid.min(file_pages)).unwrap_or(0));
        self.install_meta(&mut w, meta);
    }

    /// Makes `meta` the writer's, and its root and count the readers'.
    fn install_meta(&self, w: &mut Writer, meta: Meta) {
        w.meta = meta;
        w.logged_meta = meta;
        self.root.store(meta.root, Ordering::Release);
        self.count.store(meta.count, Ordering::Release);
    }

    /// Checks every page reachable from the root: levels, key order across pages (fences),
    /// that the leaves hold `count` keys, and the pool's swizzling invariants. Returns (pages,
    /// keys).
    /// Writers wait meanwhile (the count and the leaves must agree).
    pub(crate) fn verify(&self) -> Result<(u64, u64)> {
        let _writers = self.writer.write();
        self.pool
            .check_swizzles()
            .map_err(|e| corrupt(format!("buffer pool: {e}")))?;
        let mut pages = 0;
        let mut keys = 0;
        let root = self.root.load(Ordering::Acquire);
        // (page, lower fence, upper fence, expected level)
        type Visit = (u64, Option<Vec<u8>>, Option<Vec<u8>>, Option<u8>);
        let mut stack: Vec<Visit> = vec![(root, None, None, None)];
        while let Some((pid, low, high, level)) = stack.pop() {
            pages += 1;
            let page = self.pool.fix_shared(pid)?;
            let n = Node(page.bytes());
            if let Some(l) = level
                && n.level() != l
            {
                return Err(corrupt(format!(
                    "page {pid}: level {} where {l} belongs",
                    n.level()
                )));
            }
            for i in 0..n.count() {
                let k = n.key(i);
                if low.as_deref().is_some_and(|lo| k < lo)
                    || high.as_deref().is_some_and(|h| k >= h)
                {
                    return Err(corrupt(format!(
                        "page {pid}: key outside its parent's range"
                    )));
                }
            }
            match n.kind() {
                Some(Kind::Leaf) => {
                    keys += n.count() as u64;
                    for i in 0..n.count() {
                        if n.is_ref(i) {
                            let total = node::u64_at(n.value(i), 0);
                            let cap = (self.pool.page_size() - node::HEADER) as u64;
                            self.value_of(&n, i)?; // walks and checks the chain
                            pages += total.div_ceil(cap);
                        }
                    }
                }
                Some(Kind::Inner) => {
                    if n.level() == 0 {
                        return Err(corrupt(format!("inner page {pid} at level 0")));
                    }
                    let next = n.level() - 1;
                    let first_high = (n.count() > 0).then(|| n.key(0).to_vec()).or(high.clone());
                    let first = self.pool.resolve(n.child_at(None));
                    stack.push((first, low.clone(), first_high, Some(next)));
                    for i in 0..n.count() {
                        let h = if i + 1 < n.count() {
                            Some(n.key(i + 1).to_vec())
                        } else {
                            high.clone()
                        };
                        let child = self.pool.resolve(n.child(i));
                        stack.push((child, Some(n.key(i).to_vec()), h, Some(next)));
                    }
                }
                other => return Err(corrupt(format!("page {pid}: {other:?} page in the tree"))),
            }
        }
        if keys != self.len() {
            return Err(corrupt(format!(
                "leaves hold {keys} keys, the meta page says {}",
                self.len()
            )));
        }
        Ok((pages, keys))
    }
}
