//! Slotted B+-tree pages: the byte layout of leaf, inner, free and meta pages, and every
//! operation on one page.
//!
//! Owns: the page format (docs/FORMAT-btree.md describes every byte), sorted slot arrays with
//! binary search, in-page compaction, splitting and merging two pages' entries, the compact
//! page image the log carries, and the structural check that makes a page read from media
//! safe to use. Must not touch: buffering, latching or logging — callers hand in the bytes of
//! a page they hold.
//!
//! Layout of a page of `P` bytes (little-endian):
//! ```text
//! 0   u32 checksum (crc32c of bytes 4..P; set when the page is written to media)
//! 4   u8  kind (1 leaf, 2 inner, 3 free, 4 meta)
//! 5   u8  level (0 for leaves)
//! 6   u16 count: number of slots
//! 8   u64 page LSN: log position of the last change applied to this page
//! 16  u64 pid: the page's own id (a page at the wrong place is detected)
//! 24  u32 heap start: cells occupy [heap start, P)
//! 28  u32 dead bytes in the heap (reclaimed by compaction)
//! 32  u64 aux: inner: leftmost child; free: next free page; otherwise 0
//! 40  u16 prefix length p: every key of the page starts with the same p bytes
//! 42  6 bytes reserved (0)
//! 48  count × 6-byte slot: u16 offset of the slot's cell, u32 big-endian key head (the
//!     4 key bytes after the prefix, zero-padded), in key order
//! …   free space
//! …   cells: u16 key length (bit 15: the value is an overflow reference), u16 value
//!     length, key bytes, value bytes
//! ```
//! An overflow page (kind 5) holds `u32` data length at offset 24 and the data from offset 48;
//! `aux` is the next page of the chain (0: last). A leaf value too large for a page is stored in
//! such a chain, and the leaf holds a 16-byte reference: `u64` total length, `u64` first page.
//! An inner page with entries (k_i, c_i) routes a key `x` to `aux` if `x < k_0`, else to the
//! `c_i` of the largest `k_i <= x`; its values are 8-byte child ids.

use std::cmp::Ordering;

use crate::buffer::{ChangedLines, PageBytes, Swip};
use crate::device::cpu::prefetch;
use crate::error::{Error, Result};

/// Bytes of the page header.
pub const HEADER: usize = 48;
/// Bytes of one slot.
const SLOT: usize = 6;
/// Bytes of a cell's length fields.
const CELL_HEAD: usize = 4;

/// What a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Keys and values.
    Leaf = 1,
    /// Separator keys and child ids.
    Inner = 2,
    /// A page on the free list (`aux` = next free page, 0 = end).
    Free = 3,
    /// The tree's meta page (root, page count, free list, key count).
    Meta = 4,
    /// Part of a large value (`aux` = next page of the chain).
    Overflow = 5,
}

/// Bit of a cell's key length saying the value is an overflow reference.
const REF_FLAG: usize = 0x8000;
/// Bytes of an overflow reference: total length, first page.
pub const REF_LEN: usize = 16;

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        match v {
            1 => Some(Kind::Leaf),
            2 => Some(Kind::Inner),
            3 => Some(Kind::Free),
            4 => Some(Kind::Meta),
            5 => Some(Kind::Overflow),
            _ => None,
        }
    }
}

fn u16_at(p: &[u8], at: usize) -> usize {
    u16::from_le_bytes([p[at], p[at + 1]]) as usize
}
fn put_u16(p: &mut [u8], at: usize, v: usize) {
    p[at..at + 2].copy_from_slice(&(v as u16).to_le_bytes());
}
fn u32_at(p: &[u8], at: usize) -> usize {
    u32::from_le_bytes(p[at..at + 4].try_into().expect("4 bytes")) as usize
}
fn put_u32(p: &mut [u8], at: usize, v: usize) {
    p[at..at + 4].copy_from_slice(&(v as u32).to_le_bytes());
}
/// Reads a little-endian u64 at `at`.
pub fn u64_at(p: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(p[at..at + 8].try_into().expect("8 bytes"))
}
/// Writes a little-endian u64 at `at`.
pub fn put_u64(p: &mut [u8], at: usize, v: u64) {
    p[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The head of `key` after a prefix of `p` bytes: the next 4 bytes, zero-padded, big-endian
/// (so heads order as the keys do whenever they differ).
fn head_of(key: &[u8], p: usize) -> u32 {
    let mut b = [0u8; 4];
    let rest = key.get(p..).unwrap_or(&[]);
    let n = rest.len().min(4);
    b[..n].copy_from_slice(&rest[..n]);
    u32::from_be_bytes(b)
}

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Bytes one entry takes in a page (slot + cell).
pub fn entry_size(key_len: usize, value_len: usize) -> usize {
    SLOT + CELL_HEAD + key_len + value_len
}

/// Read access to a page's bytes. Only valid on pages that passed [`check`] or were built by
/// this module.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a>(pub &'a [u8]);

impl<'a> Node<'a> {
    /// The page's kind (`None`: not a tree page, e.g. never written).
    pub fn kind(&self) -> Option<Kind> {
        Kind::from_u8(self.0[4])
    }
    /// Level above the leaves.
    pub fn level(&self) -> u8 {
        self.0[5]
    }
    /// Number of entries.
    pub fn count(&self) -> usize {
        u16_at(self.0, 6)
    }
    /// Page LSN.
    pub fn lsn(&self) -> u64 {
        u64_at(self.0, 8)
    }
    /// The page id written in the page.
    pub fn pid(&self) -> u64 {
        u64_at(self.0, 16)
    }
    fn heap_start(&self) -> usize {
        u32_at(self.0, 24)
    }
    fn dead(&self) -> usize {
        u32_at(self.0, 28)
    }
    /// Inner: leftmost child. Free: next free page.
    pub fn aux(&self) -> u64 {
        u64_at(self.0, 32)
    }
    fn cell(&self, i: usize) -> usize {
        u16_at(self.0, HEADER + i * SLOT)
    }
    fn head(&self, i: usize) -> u32 {
        let at = HEADER + i * SLOT + 2;
        u32::from_be_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
    /// Length of the prefix all keys of the page share.
    pub fn prefix_len(&self) -> usize {
        u16_at(self.0, 40)
    }
    /// Key of entry `i`.
    pub fn key(&self, i: usize) -> &'a [u8] {
        let c = self.cell(i);
        let k = u16_at(self.0, c) & !REF_FLAG;
        &self.0[c + CELL_HEAD..c + CELL_HEAD + k]
    }
    /// Starts loading entry `i`'s cell (its first two lines), if there is an entry `i`: a scan
    /// that copies entries in key order meets cells in the heap's order of insertion, so each
    /// is a cache miss the hardware cannot foresee.
    #[inline]
    pub fn prefetch_entry(&self, i: usize) {
        if i < self.count() {
            let at = self.0.as_ptr().wrapping_add(self.cell(i));
            prefetch(at);
            prefetch(at.wrapping_add(64));
        }
    }
    /// Value of entry `i` as stored (an overflow reference when [`Node::is_ref`]).
    pub fn value(&self, i: usize) -> &'a [u8] {
        let c = self.cell(i);
        let (k, v) = (u16_at(self.0, c) & !REF_FLAG, u16_at(self.0, c + 2));
        &self.0[c + CELL_HEAD + k..c + CELL_HEAD + k + v]
    }
    /// Whether entry `i`'s value is an overflow reference.
    pub fn is_ref(&self, i: usize) -> bool {
        u16_at(self.0, self.cell(i)) & REF_FLAG != 0
    }
    /// Overflow page: the data it holds.
    pub fn overflow_data(&self) -> &'a [u8] {
        let n = u32_at(self.0, 24).min(self.0.len() - HEADER);
        &self.0[HEADER..HEADER + n]
    }
    /// Inner: the child reference of entry `i` (a page id unless the pool swizzled it).
    pub fn child(&self, i: usize) -> Swip {
        self.child_ref(Some(i)).1
    }
    /// Inner: where the child reference at route position `at` (`None` = leftmost) is in the
    /// page, and the reference. A malformed entry (not 8 bytes) reads as page id 0, which no
    /// tree page has.
    #[inline]
    pub fn child_ref(&self, at: Option<usize>) -> (usize, Swip) {
        let Some(i) = at else {
            return (32, Swip::from_word(self.aux()));
        };
        let c = self.cell(i);
        let lengths = u32_at(self.0, c);
        let off = c + CELL_HEAD + (lengths & 0xffff & !REF_FLAG);
        let word = match self.0.get(off..off + 8) {
            Some(w) if lengths >> 16 == 8 => u64::from_le_bytes(w.try_into().expect("8 bytes")),
            _ => 0,
        };
        (off, Swip::from_word(word))
    }
    /// `Ok(i)`: entry `i` has `key`; `Err(i)`: `key` would go at `i` (see [`search_in`]).
    #[inline]
    pub fn search(&self, key: &[u8]) -> std::result::Result<usize, usize> {
        let mut bytes = self.0;
        match search_in(&mut bytes, key) {
            Ok(found) => found,
            Err(never) => match never {},
        }
    }
    /// Inner: the child index (−1 for `aux`, as `None`) a key routes to.
    pub fn route(&self, key: &[u8]) -> Option<usize> {
        route_of(self.search(key))
    }
    /// Inner: child reference at route position (`None` = leftmost).
    pub fn child_at(&self, at: Option<usize>) -> Swip {
        self.child_ref(at).1
    }
    /// Bytes free for new entries (after compaction).
    pub fn free_space(&self) -> usize {
        let used_front = HEADER + self.count() * SLOT;
        self.heap_start().saturating_sub(used_front) + self.dead()
    }
    /// Bytes in use by entries (slots and cells).
    pub fn used(&self) -> usize {
        self.0.len() - HEADER - self.free_space()
    }
}

/// An inner page's routing rule: the entry a search's result sends a key to (the largest
/// key `<=` it), `None` for `aux` (below every key).
#[inline]
fn route_of(found: std::result::Result<usize, usize>) -> Option<usize> {
    match found {
        Ok(i) => Some(i),
        Err(0) => None,
        Err(i) => Some(i - 1),
    }
}

fn u16_in<B: PageBytes>(b: &mut B, at: usize) -> std::result::Result<usize, B::Error> {
    Ok(usize::from(u16::from_le_bytes(b.array(at)?)))
}

/// The key of entry `i`, its value's offset and length, and whether the value is an
/// overflow reference.
fn cell_in<B: PageBytes>(
    b: &mut B,
    i: usize,
) -> std::result::Result<(usize, usize, usize, bool), B::Error> {
    let c = u16_in(b, HEADER + i * SLOT)?;
    let lengths = u32::from_le_bytes(b.array(c)?) as usize;
    let (k, v) = (lengths & 0xffff, lengths >> 16);
    Ok((c + CELL_HEAD, k & !REF_FLAG, v, k & REF_FLAG != 0))
}

/// How entry `i`'s key compares with `key`, compared where it lies (no copy).
fn compare_key_in<B: PageBytes>(
    b: &mut B,
    i: usize,
    key: &[u8],
) -> std::result::Result<Ordering, B::Error> {
    let (at, k, ..) = cell_in(b, i)?;
    compare_at(b, at, k, key)
}

/// How the `len` bytes at `at` compare with `key` (shorter sorts first on a common start).
fn compare_at<B: PageBytes>(
    b: &mut B,
    at: usize,
    len: usize,
    key: &[u8],
) -> std::result::Result<Ordering, B::Error> {
    let n = len.min(key.len());
    Ok(b.compare(at, &key[..n])?.then(len.cmp(&key.len())))
}

/// Whether entry `i`'s key starts with `prefix`.
fn starts_with_in<B: PageBytes>(
    b: &mut B,
    i: usize,
    prefix: &[u8],
) -> std::result::Result<bool, B::Error> {
    let (at, k, ..) = cell_in(b, i)?;
    Ok(k >= prefix.len() && b.compare(at, prefix)? == Ordering::Equal)
}

fn key_in<B: PageBytes>(b: &mut B, i: usize) -> std::result::Result<&[u8], B::Error> {
    let (at, k, ..) = cell_in(b, i)?;
    b.bytes(at, k)
}

/// Loads, through `b`, every byte [`NodeMut::insert_cell`] reads or writes when it inserts
/// `key` with a value of `value_len` bytes at slot `at` (the header, the slots from `at` on
/// and the one added, the first entry's key, the new cell's place in the heap). `false`
/// when that insert would compact the heap or change the page's prefix, or does not fit:
/// those need the whole page (what was loaded by then stays loaded, and is not changed).
pub fn insert_lines_in<B: PageBytes>(
    b: &mut B,
    at: usize,
    key: &[u8],
    value_len: usize,
) -> std::result::Result<bool, B::Error> {
    let header = b.bytes(0, HEADER)?;
    let (count, heap, prefix) = (u16_at(header, 6), u32_at(header, 24), u16_at(header, 40));
    let cell_len = CELL_HEAD + key.len() + value_len;
    let front = HEADER + (count + 1) * SLOT;
    if count == 0 || at > count || heap < front + cell_len {
        return Ok(false);
    }
    // `insert_cell` takes the new prefix from the first entry's key (at slot 0, or 1 once the
    // new entry went before it).
    let first = key_in(b, 0)?;
    if common_prefix(&first[..prefix.min(first.len())], key) != prefix {
        return Ok(false);
    }
    b.bytes(HEADER + at * SLOT, (count + 1 - at) * SLOT)?;
    b.bytes(heap - cell_len, cell_len)?;
    Ok(true)
}

/// Inner page: the child `key` routes to (as [`Node::route`] and [`Node::child_at`]), read
/// through `b`. On bytes read without a latch the result means nothing until the read is
/// validated; it is never out of the page's bounds (`b` refuses such ranges).
#[inline]
pub fn child_for_in<B: PageBytes>(b: &mut B, key: &[u8]) -> std::result::Result<Swip, B::Error> {
    Ok(Swip::from_word(match route_of(search_in(b, key)?) {
        None => u64::from_le_bytes(b.array(32)?),
        Some(i) => {
            let (c, k, v, _) = cell_in(b, i)?;
            // A child id is 8 bytes; another length is a page mid-change (or damaged), and
            // reads as id 0, which no tree page has.
            if v == 8 {
                u64::from_le_bytes(b.array(c + k)?)
            } else {
                0
            }
        }
    }))
}

/// Where an inner page holds its child references (`aux` and each entry's value): the
/// pool's [`crate::buffer::ChildRefs`] for pointer swizzling. Other pages hold none. Never
/// panics, whatever the bytes (the pool's invariant check reads every frame, torn ones too):
/// slots and cells outside the page are skipped.
pub fn child_refs(page: &[u8], out: &mut Vec<usize>) {
    let n = Node(page);
    if page.len() < HEADER || n.kind() != Some(Kind::Inner) {
        return;
    }
    out.push(32);
    for i in 0..n.count().min((page.len() - HEADER) / SLOT) {
        if n.cell(i) + CELL_HEAD > page.len() {
            continue;
        }
        let (at, _) = n.child_ref(Some(i));
        if at + 8 <= page.len() {
            out.push(at);
        }
    }
}

/// Value of entry `i` as stored, and whether it is an overflow reference.
pub fn value_in<B: PageBytes>(b: &mut B, i: usize) -> std::result::Result<(&[u8], bool), B::Error> {
    let (at, k, v, is_ref) = cell_in(b, i)?;
    Ok((b.bytes(at + k, v)?, is_ref))
}

/// Where entry `i`'s value is stored in the page, and whether it is an overflow reference
/// (for a change of the value in place, [`NodeMut::overwrite`]).
pub fn value_range_in<B: PageBytes>(
    b: &mut B,
    i: usize,
) -> std::result::Result<(std::ops::Range<usize>, bool), B::Error> {
    let (at, k, v, is_ref) = cell_in(b, i)?;
    Ok((at + k..at + k + v, is_ref))
}

/// `Ok(i)`: entry `i` has `key`; `Err(i)`: `key` would go at `i`.
///
/// Compares the 4-byte heads in the slots first: no cell is touched unless two heads are
/// equal, so a lookup reads the header line, about log2(count) slot lines and the cell it
/// finds (what a page loaded a cache line at a time pays for). Whether `key` shares the
/// page's prefix (which the heads assume) is checked on the first cell the search reads
/// anyway (a lookup that finds its key reads one), else on entry 0 at the end — not on a
/// cell read up front, which cost a found key's lookup an extra cache miss (+10 % YCSB C,
/// docs/BENCHMARKS.md Figure 7). A key without the prefix sorts before or after every key
/// of the page, and is placed by whole keys.
#[inline]
pub fn search_in<B: PageBytes>(
    b: &mut B,
    key: &[u8],
) -> std::result::Result<std::result::Result<usize, usize>, B::Error> {
    // Count (at 6) and prefix length (at 40), both in the header's line.
    let (count, p) = (u16_in(b, 6)?, u16_in(b, 40)?);
    if count == 0 || key.len() < p {
        return search_full_in(b, count, key);
    }
    let (prefix, rest) = key.split_at(p);
    let h = head_of(key, p);
    let mut shares_checked = p == 0;
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let slot_head = u32::from_be_bytes(b.array(HEADER + mid * SLOT + 2)?);
        let order = match slot_head.cmp(&h) {
            Ordering::Equal => {
                let (at, k, ..) = cell_in(b, mid)?;
                if !shares_checked {
                    if k < p || b.compare(at, prefix)? != Ordering::Equal {
                        return search_full_in(b, count, key);
                    }
                    shares_checked = true;
                }
                // A key shorter than the prefix (a damaged page) compares as empty.
                compare_at(b, at + p.min(k), k.saturating_sub(p), rest)?
            }
            other => other,
        };
        match order {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(Ok(mid)),
        }
    }
    // Entry 0's cell, not one near `lo`: on a hot inner page (the root) it stays cached.
    if !shares_checked && !starts_with_in(b, 0, prefix)? {
        return search_full_in(b, count, key);
    }
    Ok(Err(lo))
}

/// Where in `page` (a leaf or inner page) the cell of `key`'s entry most likely starts, read
/// from the header and the slots alone: the first entry whose key head is not below `key`'s,
/// if its head is `key`'s. A hint for prefetching the cell before [`search_in`] compares it;
/// `None` when the slots cannot tell (no such head, or `key` outside the page's prefix).
/// Never reads past the slots; an offset it returns is inside the page.
pub fn cell_hint(page: &[u8], key: &[u8]) -> Option<usize> {
    let header = page.get(..HEADER)?;
    let (count, p) = (u16_at(header, 6), u16_at(header, 40));
    if key.len() < p || page.len() < HEADER + count * SLOT {
        return None;
    }
    let h = head_of(key, p);
    let head = |i: usize| {
        let at = HEADER + i * SLOT + 2;
        u32::from_be_bytes([page[at], page[at + 1], page[at + 2], page[at + 3]])
    };
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if head(mid) < h {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if lo == count || head(lo) != h {
        return None;
    }
    let cell = u16_at(page, HEADER + lo * SLOT);
    (cell < page.len()).then_some(cell)
}

/// [`search_in`] by whole keys (no heads): for keys that do not share the prefix.
fn search_full_in<B: PageBytes>(
    b: &mut B,
    count: usize,
    key: &[u8],
) -> std::result::Result<std::result::Result<usize, usize>, B::Error> {
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = (lo + hi) / 2;
        match compare_key_in(b, mid, key)? {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok(Ok(mid)),
        }
    }
    Ok(Err(lo))
}

/// Write access to a page's bytes. Every change goes through the helpers below, which mark
/// the lines they change when the page is tracked ([`NodeMut::marking`]): a frame whose
/// page has an NVM slot writes back only those lines, so a change made here without a mark
/// would be lost.
#[derive(Debug)]
pub struct NodeMut<'a> {
    page: &'a mut [u8],
    changed: Option<&'a ChangedLines>,
}

impl<'a> NodeMut<'a> {
    /// Changes `page` without marking lines (a page that is written whole, or not at all).
    pub fn new(page: &'a mut [u8]) -> Self {
        NodeMut {
            page,
            changed: None,
        }
    }
    /// Changes `page`, marking each line changed in `changed` (if given).
    pub fn marking(page: &'a mut [u8], changed: Option<&'a ChangedLines>) -> Self {
        NodeMut { page, changed }
    }
}

impl NodeMut<'_> {
    /// Read view.
    pub fn view(&self) -> Node<'_> {
        Node(self.page)
    }
    /// Marks `range` changed before it is written (an NVM-direct page saves the lines'
    /// old bytes in its undo log here, so the write must follow the mark).
    #[inline]
    fn mark(&self, range: std::ops::Range<usize>) {
        if let Some(c) = self.changed {
            c.mark_saving(range, self.page);
        }
    }
    /// The bytes `range`, marked changed.
    #[inline]
    fn bytes_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        self.mark(range.clone());
        &mut self.page[range]
    }
    fn put_u16(&mut self, at: usize, v: usize) {
        put_u16(self.bytes_mut(at..at + 2), 0, v);
    }
    fn put_u32(&mut self, at: usize, v: usize) {
        put_u32(self.bytes_mut(at..at + 4), 0, v);
    }
    fn put_u64(&mut self, at: usize, v: u64) {
        put_u64(self.bytes_mut(at..at + 8), 0, v);
    }
    /// Copies bytes `src` to `dst`, marking the destination.
    fn copy_within(&mut self, src: std::ops::Range<usize>, dst: usize) {
        self.mark(dst..dst + src.len());
        self.page.copy_within(src, dst);
    }
    /// Formats the page as an empty page of `kind`.
    pub fn init(&mut self, kind: Kind, level: u8, pid: u64, aux: u64) {
        let len = self.page.len();
        let h = self.bytes_mut(0..HEADER);
        h.fill(0);
        h[4] = kind as u8;
        h[5] = level;
        put_u64(h, 16, pid);
        put_u32(h, 24, len);
        put_u64(h, 32, aux);
    }
    /// Sets the page LSN.
    pub fn set_lsn(&mut self, lsn: u64) {
        self.put_u64(8, lsn);
    }
    /// Sets the `u64` at `at` past the header of a page whose body this format does not lay
    /// out (the meta page's fields).
    pub fn put_field(&mut self, at: usize, v: u64) {
        debug_assert!(at >= HEADER && self.view().kind() == Some(Kind::Meta));
        self.put_u64(at, v);
    }
    /// Overwrites a value in place with one of the same size (`range` from
    /// [`value_range_in`]): the page's layout does not change.
    pub fn overwrite(&mut self, range: std::ops::Range<usize>, value: &[u8]) {
        debug_assert_eq!(range.len(), value.len());
        self.bytes_mut(range).copy_from_slice(value);
    }
    /// Sets `aux` (leftmost child / next free page).
    pub fn set_aux(&mut self, aux: u64) {
        self.put_u64(32, aux);
    }
    fn set_count(&mut self, n: usize) {
        self.put_u16(6, n);
    }
    fn set_slot(&mut self, i: usize, cell: usize, head: u32) {
        let at = HEADER + i * SLOT;
        let s = self.bytes_mut(at..at + SLOT);
        put_u16(s, 0, cell);
        s[2..6].copy_from_slice(&head.to_be_bytes());
    }
    /// Writes a cell at `at`.
    fn put_cell(&mut self, at: usize, key: &[u8], value: &[u8], is_ref: bool) {
        let c = self.bytes_mut(at..at + CELL_HEAD + key.len() + value.len());
        put_u16(c, 0, key.len() | if is_ref { REF_FLAG } else { 0 });
        put_u16(c, 2, value.len());
        c[CELL_HEAD..CELL_HEAD + key.len()].copy_from_slice(key);
        c[CELL_HEAD + key.len()..].copy_from_slice(value);
    }
    /// Sets the prefix length and recomputes every slot's head.
    fn set_prefix(&mut self, p: usize) {
        self.put_u16(40, p);
        for i in 0..self.view().count() {
            let (cell, head) = {
                let v = self.view();
                (v.cell(i), head_of(v.key(i), p))
            };
            self.set_slot(i, cell, head);
        }
    }
    /// Inserts a new entry at slot `at`; false if it does not fit even after compaction.
    pub fn insert_at(&mut self, at: usize, key: &[u8], value: &[u8]) -> bool {
        self.insert_cell(at, key, value, false)
    }
    /// Formats the page as an overflow page holding `data`, followed by page `next`.
    pub fn init_overflow(&mut self, pid: u64, next: u64, data: &[u8]) {
        self.init(Kind::Overflow, 0, pid, next);
        self.put_u32(24, data.len());
        self.bytes_mut(HEADER..HEADER + data.len())
            .copy_from_slice(data);
    }
    /// [`NodeMut::insert_at`] with the overflow-reference flag.
    pub fn insert_cell(&mut self, at: usize, key: &[u8], value: &[u8], is_ref: bool) -> bool {
        let need = entry_size(key.len(), value.len());
        if self.view().free_space() < need {
            return false;
        }
        let count = self.view().count();
        let front = HEADER + (count + 1) * SLOT;
        if self.view().heap_start() < front + CELL_HEAD + key.len() + value.len() {
            self.compact();
        }
        let cell = self.view().heap_start() - CELL_HEAD - key.len() - value.len();
        self.put_cell(cell, key, value, is_ref);
        self.put_u32(24, cell);
        let slots = HEADER + at * SLOT;
        self.copy_within(slots..HEADER + count * SLOT, slots + SLOT);
        let p = if count == 0 {
            key.len().min(u16::MAX as usize)
        } else {
            let v = self.view();
            let p = v.prefix_len();
            // The key at a neighbouring slot shares the current prefix.
            let other = v.key(if at == 0 { 1 } else { 0 });
            common_prefix(&other[..p], key)
        };
        self.set_slot(at, cell, head_of(key, p));
        self.set_count(count + 1);
        if p != self.view().prefix_len() {
            self.set_prefix(p);
        }
        true
    }
    /// Removes entry `at`.
    pub fn remove_at(&mut self, at: usize) {
        let v = self.view();
        let count = v.count();
        let cell_len = CELL_HEAD + v.key(at).len() + v.value(at).len();
        let dead = v.dead() + cell_len;
        self.put_u32(28, dead);
        let slots = HEADER + at * SLOT;
        self.copy_within(slots + SLOT..HEADER + count * SLOT, slots);
        self.set_count(count - 1);
        if count == 1 {
            // An empty page needs no heap: start it afresh.
            let len = self.page.len();
            self.put_u32(24, len);
            self.put_u32(28, 0);
        }
    }
    /// Inserts or replaces `key`; `Ok(true)` if it was new, `Ok(false)` if replaced, `Err(())`
    /// if it does not fit (the page is unchanged).
    #[allow(clippy::result_unit_err)]
    pub fn upsert(&mut self, key: &[u8], value: &[u8]) -> std::result::Result<bool, ()> {
        self.upsert_cell(key, value, false)
    }
    /// [`NodeMut::upsert`] with the overflow-reference flag.
    #[allow(clippy::result_unit_err)]
    pub fn upsert_cell(
        &mut self,
        key: &[u8],
        value: &[u8],
        is_ref: bool,
    ) -> std::result::Result<bool, ()> {
        let found = self.view().search(key);
        self.upsert_found(found, key, value, is_ref)
    }
    /// [`NodeMut::upsert_cell`] with `found`, what [`Node::search`] returned for `key` on this
    /// page as it is (a caller that searched already does not search twice).
    #[allow(clippy::result_unit_err)]
    pub fn upsert_found(
        &mut self,
        found: std::result::Result<usize, usize>,
        key: &[u8],
        value: &[u8],
        is_ref: bool,
    ) -> std::result::Result<bool, ()> {
        debug_assert_eq!(found, self.view().search(key), "stale search result");
        match found {
            Ok(i) => {
                let old = self.view().value(i).len();
                if old == value.len() && self.view().is_ref(i) == is_ref {
                    // In place: an update of a same-size value (YCSB's) changes the lines of
                    // its value only, not the slot array behind it.
                    let (c, k) = (self.view().cell(i), self.view().key(i).len());
                    let at = c + CELL_HEAD + k;
                    self.bytes_mut(at..at + old).copy_from_slice(value);
                    return Ok(false);
                }
                if self.view().free_space() + old < value.len() {
                    return Err(());
                }
                self.remove_at(i);
                let ok = self.insert_cell(i, key, value, is_ref);
                debug_assert!(ok);
                Ok(false)
            }
            Err(i) => {
                if self.insert_cell(i, key, value, is_ref) {
                    Ok(true)
                } else {
                    Err(())
                }
            }
        }
    }
    /// Removes `key`; whether it was there.
    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.view().search(key) {
            Ok(i) => {
                self.remove_at(i);
                true
            }
            Err(_) => false,
        }
    }
    /// Rewrites the heap without dead bytes, keeping slot order.
    pub fn compact(&mut self) {
        let len = self.page.len();
        let v = self.view();
        if v.kind() == Some(Kind::Overflow) {
            return;
        }
        let count = v.count();
        // One copy of the page to rebuild from, not two allocations per entry: compaction
        // runs on every page image the log takes.
        let old = self.page.to_vec();
        let v = Node(&old);
        // Keys are sorted: the first and last share what all share.
        let p = match count {
            0 => 0,
            n => common_prefix(v.key(0), v.key(n - 1)).min(u16::MAX as usize),
        };
        let mut top = len;
        for i in 0..count {
            let (k, val, is_ref) = (v.key(i), v.value(i), v.is_ref(i));
            top -= CELL_HEAD + k.len() + val.len();
            self.put_cell(top, k, val, is_ref);
            self.set_slot(i, top, head_of(k, p));
        }
        self.put_u16(40, p);
        self.put_u32(24, top);
        self.put_u32(28, 0);
    }
    /// Moves entries `from..` to `right` (an empty page of the same kind, as [`Self::init`]
    /// leaves it), appending them.
    ///
    /// The right page is written in one pass — prefix, cells from the end of the page down,
    /// slots, count — and ends byte for byte as appending the entries one at a time would
    /// leave it (the prefix of sorted keys is that of the first and the last), without
    /// each append's checks and prefix updates: a split of a full 16 KiB leaf took ~75,000
    /// instructions that way (docs/BENCHMARKS.md, Figure 39).
    pub fn move_tail(&mut self, from: usize, right: &mut NodeMut<'_>) {
        let v = Node(&*self.page);
        let count = v.count();
        if from < count {
            debug_assert_eq!(
                right.view().count(),
                0,
                "move_tail into a page with entries"
            );
            let p = common_prefix(v.key(from), v.key(count - 1)).min(u16::MAX as usize);
            let mut top = right.view().heap_start();
            for (n, i) in (from..count).enumerate() {
                let (k, val, is_ref) = (v.key(i), v.value(i), v.is_ref(i));
                top -= CELL_HEAD + k.len() + val.len();
                right.put_cell(top, k, val, is_ref);
                right.set_slot(n, top, head_of(k, p));
            }
            debug_assert!(
                top >= HEADER + (count - from) * SLOT,
                "moved entries overflow"
            );
            right.put_u16(40, p);
            right.put_u32(24, top);
            right.set_count(count - from);
        }
        self.remove_from(from);
    }
    /// Removes every entry whose key is `key` or after it (what [`NodeMut::move_tail`] left
    /// behind, replayed from the log), then compacts as `move_tail` does.
    pub fn truncate_from(&mut self, key: &[u8]) {
        let from = self.view().search(key).unwrap_or_else(|i| i);
        self.remove_from(from);
    }
    /// Removes entries `from..count`, then compacts the page (which rebuilds the heap from
    /// the slots kept, so the removed cells need no bookkeeping of their own).
    fn remove_from(&mut self, from: usize) {
        if from < self.view().count() {
            self.set_count(from);
        }
        self.compact();
    }
    /// Appends every entry of `other` (whose keys all sort after this page's); false (and
    /// nothing moved) if they do not fit.
    pub fn append_all(&mut self, other: &Node<'_>) -> bool {
        if self.view().free_space() < other.used() {
            return false;
        }
        for i in 0..other.count() {
            let n = self.view().count();
            let ok = self.insert_cell(n, other.key(i), other.value(i), other.is_ref(i));
            debug_assert!(ok);
        }
        true
    }
}

/// The compact image of a page the log carries: header, slots and heap without the free gap,
/// as the page would be after [`NodeMut::compact`]. Built straight from the page, which is
/// left as it is (logging its image changes none of its lines, and copies it once).
pub fn image(page: &[u8]) -> Vec<u8> {
    let v = Node(page);
    let len = page.len();
    if v.kind() == Some(Kind::Overflow) {
        let front = HEADER + v.overflow_data().len();
        let mut out = Vec::with_capacity(4 + front);
        out.extend_from_slice(&(front as u32).to_le_bytes());
        out.extend_from_slice(&page[..front]);
        return out;
    }
    let count = v.count();
    // As compaction does: keys are sorted, so the first and last share what all share.
    let p = match count {
        0 => 0,
        n => common_prefix(v.key(0), v.key(n - 1)).min(u16::MAX as usize),
    };
    let front = HEADER + count * SLOT;
    let heap: usize = (0..count)
        .map(|i| CELL_HEAD + v.key(i).len() + v.value(i).len())
        .sum();
    let heap_start = len - heap;
    let mut out = vec![0u8; 4 + front + heap];
    out[..4].copy_from_slice(&(front as u32).to_le_bytes());
    let (head, cells) = out[4..].split_at_mut(front);
    head[..HEADER].copy_from_slice(&page[..HEADER]);
    put_u32(head, 24, heap_start);
    put_u32(head, 28, 0);
    put_u16(head, 40, p);
    let mut top = len;
    for i in 0..count {
        let (k, val) = (v.key(i), v.value(i));
        top -= CELL_HEAD + k.len() + val.len();
        let c = &mut cells[top - heap_start..top - heap_start + CELL_HEAD + k.len() + val.len()];
        put_u16(c, 0, k.len() | if v.is_ref(i) { REF_FLAG } else { 0 });
        put_u16(c, 2, val.len());
        c[CELL_HEAD..CELL_HEAD + k.len()].copy_from_slice(k);
        c[CELL_HEAD + k.len()..].copy_from_slice(val);
        let s = &mut head[HEADER + i * SLOT..HEADER + (i + 1) * SLOT];
        put_u16(s, 0, top);
        s[2..6].copy_from_slice(&head_of(k, p).to_be_bytes());
    }
    out
}

/// Installs an image made by [`image`] into `page`, then checks the result.
pub fn install_image(page: &mut [u8], img: &[u8]) -> Result<()> {
    let bad = || Error::corrupt(None, "log: malformed page image");
    let front = u32::from_le_bytes(
        img.get(..4)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let rest = img.get(4..).ok_or_else(bad)?;
    if front < HEADER || front > rest.len() || rest.len() > page.len() {
        return Err(bad());
    }
    let heap_len = rest.len() - front;
    let len = page.len();
    page[..front].copy_from_slice(&rest[..front]);
    page[front..len - heap_len].fill(0);
    page[len - heap_len..].copy_from_slice(&rest[front..]);
    check(page, None).map_err(|e| Error::corrupt(None, format!("log: page image: {e}")))
}

/// Checks that `page` is structurally sound, so every accessor above stays in bounds:
/// known kind, the expected pid (when given), slots and cells inside the page, sorted keys.
pub fn check(page: &[u8], pid: Option<u64>) -> std::result::Result<(), String> {
    let len = page.len();
    let v = Node(page);
    let Some(kind) = v.kind() else {
        return Err(format!("unknown page kind {}", page[4]));
    };
    if let Some(pid) = pid
        && v.pid() != pid
    {
        return Err(format!("page {pid} holds page id {}", v.pid()));
    }
    let level_ok = match kind {
        Kind::Inner => (1..=48).contains(&v.level()),
        _ => v.level() == 0,
    };
    if !level_ok {
        return Err(format!(
            "page {}: level {} for a {kind:?} page",
            v.pid(),
            v.level()
        ));
    }
    if kind == Kind::Overflow {
        return if u32_at(page, 24) <= len - HEADER && v.count() == 0 {
            Ok(())
        } else {
            Err(format!("overflow page {}: bad data length", v.pid()))
        };
    }
    let count = v.count();
    let heap = v.heap_start();
    if HEADER + count * SLOT > heap || heap > len || v.dead() > len - heap {
        return Err(format!("page {}: slot array and heap overlap", v.pid()));
    }
    if matches!(kind, Kind::Free | Kind::Meta) {
        return Ok(());
    }
    if kind == Kind::Inner && v.child_at(None).page_id().is_none() {
        return Err(format!(
            "page {}: its leftmost child is a swizzled reference",
            v.pid()
        ));
    }
    let mut live = 0;
    for i in 0..count {
        let c = v.cell(i);
        if c < heap || c + CELL_HEAD > len {
            return Err(format!(
                "page {}: slot {i} points outside the heap",
                v.pid()
            ));
        }
        let (k, val) = (u16_at(page, c) & !REF_FLAG, u16_at(page, c + 2));
        if c + CELL_HEAD + k + val > len {
            return Err(format!("page {}: cell {i} runs past the page", v.pid()));
        }
        if kind == Kind::Inner && (val != 8 || v.is_ref(i)) {
            return Err(format!(
                "page {}: inner entry {i} is not a child id",
                v.pid()
            ));
        }
        // A page id never has the top bit, which marks a swizzled reference in DRAM: one on
        // media would be followed as a frame.
        if kind == Kind::Inner && v.child(i).page_id().is_none() {
            return Err(format!(
                "page {}: inner entry {i} holds a swizzled reference",
                v.pid()
            ));
        }
        if v.is_ref(i) && val != REF_LEN {
            return Err(format!(
                "page {}: overflow reference {i} is malformed",
                v.pid()
            ));
        }
        live += CELL_HEAD + k + val;
        if i > 0 && v.key(i - 1) >= v.key(i) {
            return Err(format!("page {}: keys out of order at slot {i}", v.pid()));
        }
    }
    let p = v.prefix_len();
    for i in 0..count {
        let k = v.key(i);
        if k.len() < p || k[..p] != v.key(0)[..p] || v.head(i) != head_of(k, p) {
            return Err(format!(
                "page {}: key prefix or head of slot {i} is wrong",
                v.pid()
            ));
        }
    }
    if live + v.dead() != len - heap {
        return Err(format!("page {}: heap accounting is off", v.pid()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_hint_names_the_cell_of_a_present_key_and_never_reads_past_the_slots() {
        let mut buf = vec![0u8; 4096];
        let mut n = NodeMut::new(&mut buf);
        n.init(Kind::Leaf, 0, 7, 0);
        // A shared prefix ("user"), and keys whose heads collide ("user0001a" / "user0001b").
        for i in (0..60u32).rev() {
            n.upsert(format!("user{i:04}a").as_bytes(), &[i as u8; 20])
                .unwrap();
        }
        n.upsert(b"user0001b", b"b").unwrap();
        let v = Node(&buf);
        for i in 0..60u32 {
            let key = format!("user{i:04}a").into_bytes();
            let slot = v.search(&key).unwrap();
            let cell = u16_at(&buf, HEADER + slot * SLOT);
            assert_eq!(cell_hint(&buf, &key), Some(cell), "key {i}");
        }
        // The first of the colliding heads is named; the search itself tells them apart.
        assert!(cell_hint(&buf, b"user0001b").is_some());
        assert_eq!(
            cell_hint(&buf, b"user9999"),
            None,
            "no entry with that head"
        );
        assert_eq!(cell_hint(&buf, b"us"), None, "shorter than the prefix");
        // Damaged headers: counts beyond the page, or a page shorter than a header.
        let mut bad = buf.clone();
        bad[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(cell_hint(&bad, b"user0001a"), None);
        assert_eq!(cell_hint(&buf[..20], b"user0001a"), None);
    }

    #[test]
    fn insert_search_remove_compact_and_image_round_trip() {
        let mut buf = vec![0u8; 4096];
        let mut n = NodeMut::new(&mut buf);
        n.init(Kind::Leaf, 0, 7, 0);
        for i in (0..100u32).rev() {
            assert_eq!(
                n.upsert(format!("k{i:03}").as_bytes(), &[i as u8; 10]),
                Ok(true)
            );
        }
        assert_eq!(n.upsert(b"k050", b"x"), Ok(false));
        assert!(n.remove(b"k010"));
        assert!(!n.remove(b"k010"));
        check(&buf, Some(7)).unwrap();
        let v = Node(&buf);
        assert_eq!(v.count(), 99);
        assert_eq!(v.value(v.search(b"k050").unwrap()), b"x");
        let copy = buf.clone();
        let img = image(&copy);
        assert!(
            img == image_by_compaction(&copy),
            "image differs from the compacted page"
        );
        let mut other = vec![0xAAu8; 4096];
        install_image(&mut other, &img).unwrap();
        // Same entries, same header and slots (the free gap may differ).
        assert!(image(&other) == img, "image round trip differs");
        let (a, b) = (Node(&other), Node(&copy));
        assert!((0..a.count()).all(|i| a.key(i) == b.key(i) && a.value(i) == b.value(i)));
        // Fill until full: upsert reports it and leaves the page intact.
        let mut i = 0;
        while NodeMut::new(&mut buf)
            .upsert(format!("z{i:05}").as_bytes(), &[1; 30])
            .is_ok()
        {
            i += 1;
        }
        check(&buf, Some(7)).unwrap();
    }

    proptest::proptest! {
        /// Head-first search finds what a plain binary search over the keys finds, for keys
        /// with and without the page's prefix (longer, shorter, before and after it), and with
        /// heads that tie.
        #[test]
        fn search_matches_a_plain_binary_search(
            prefix in proptest::collection::vec(0u8..3, 0..6),
            tails in proptest::collection::btree_set(proptest::collection::vec(0u8..3, 0..7), 1..60),
            probes in proptest::collection::vec(proptest::collection::vec(0u8..3, 0..12), 1..40),
        ) {
            let mut buf = vec![0u8; 4096];
            let mut n = NodeMut::new(&mut buf);
            n.init(Kind::Leaf, 0, 1, 0);
            let keys: Vec<Vec<u8>> = tails.iter().map(|t| [&prefix[..], t].concat()).collect();
            for k in &keys {
                proptest::prop_assert_eq!(n.upsert(k, b"v"), Ok(true));
            }
            let v = Node(&buf);
            let with_prefix = probes.iter().map(|t| [&prefix[..], t].concat());
            for probe in probes.iter().cloned().chain(with_prefix) {
                let want = keys.binary_search(&probe);
                proptest::prop_assert_eq!(v.search(&probe), want, "probe {:?}", probe);
            }
        }
    }

    proptest::proptest! {
        /// A split's one-pass move leaves both pages byte for byte as moving the entries one
        /// append at a time and removing them one at a time did (redo and the line marks
        /// rely on a page's bytes, not only on its entries).
        #[test]
        fn move_tail_writes_what_appending_one_entry_at_a_time_writes(
            prefix in proptest::collection::vec(0u8..3, 0..6),
            entries in proptest::collection::btree_map(
                proptest::collection::vec(0u8..4, 0..9), (0usize..90, proptest::bool::ANY), 1..70),
            removed in proptest::collection::vec(proptest::num::usize::ANY, 0..10),
            from in proptest::num::usize::ANY,
            inner in proptest::bool::ANY,
        ) {
            const PS: usize = 4096;
            let kind = if inner { Kind::Inner } else { Kind::Leaf };
            let mut page = vec![0u8; PS];
            let mut n = NodeMut::new(&mut page);
            n.init(kind, u8::from(inner), 1, 9);
            for (tail, (len, is_ref)) in &entries {
                let key = [&prefix[..], tail].concat();
                let value = vec![0xA5; if inner { 8 } else { *len }];
                let at = n.view().search(&key).unwrap_err();
                if !n.insert_cell(at, &key, &value, *is_ref && !inner) {
                    break;
                }
            }
            // Dead bytes and a heap out of key order, as a page that lived has.
            for r in removed {
                let count = n.view().count();
                if count > 1 {
                    n.remove_at(r % count);
                }
            }
            let count = n.view().count();
            let from = from % count;
            let (mut left, mut right) = (page.clone(), vec![0u8; PS]);
            let mut r = NodeMut::new(&mut right);
            r.init(kind, u8::from(inner), 2, 0);
            NodeMut::new(&mut left).move_tail(from, &mut r);
            // The reference: one append and one removal at a time, then compaction.
            let (mut ref_left, mut ref_right) = (page.clone(), vec![0u8; PS]);
            let mut rr = NodeMut::new(&mut ref_right);
            rr.init(kind, u8::from(inner), 2, 0);
            let mut rl = NodeMut::new(&mut ref_left);
            for i in from..count {
                let v = Node(&page);
                let at = rr.view().count();
                proptest::prop_assert!(rr.insert_cell(at, v.key(i), v.value(i), v.is_ref(i)));
            }
            for i in (from..count).rev() {
                rl.remove_at(i);
            }
            rl.compact();
            proptest::prop_assert_eq!(&left, &ref_left);
            proptest::prop_assert_eq!(&right, &ref_right);
        }
    }

    /// The image as the compacted page holds it (what [`image`] must produce).
    fn image_by_compaction(page: &[u8]) -> Vec<u8> {
        let mut page = page.to_vec();
        NodeMut::new(&mut page).compact();
        let v = Node(&page);
        let (front, heap) = if v.kind() == Some(Kind::Overflow) {
            (HEADER + v.overflow_data().len(), page.len())
        } else {
            (HEADER + v.count() * SLOT, v.heap_start())
        };
        [
            &(front as u32).to_le_bytes()[..],
            &page[..front],
            &page[heap..],
        ]
        .concat()
    }

    #[derive(Clone, Debug)]
    enum Change {
        Upsert(Vec<u8>, usize, u8),
        Remove(Vec<u8>),
        Compact,
        SetLsn(u64),
        /// Moves the entries from index `n % count` to a second page, then appends them back.
        MoveTailAndBack(usize),
        Truncate(Vec<u8>),
    }

    fn change() -> impl proptest::strategy::Strategy<Value = Change> {
        use proptest::prelude::*;
        let key = proptest::collection::vec(b'a'..b'e', 1..12);
        prop_oneof![
            4 => (key.clone(), prop_oneof![Just(100usize), 0usize..300], any::<u8>()).prop_map(|(k, n, b)| Change::Upsert(k, n, b)),
            2 => key.clone().prop_map(Change::Remove),
            1 => Just(Change::Compact),
            1 => any::<u64>().prop_map(Change::SetLsn),
            1 => any::<usize>().prop_map(Change::MoveTailAndBack),
            1 => key.prop_map(Change::Truncate),
        ]
    }

    proptest::proptest! {
        /// Every change made through a marking `NodeMut` marks each line whose bytes it
        /// changed (an unmarked changed line would never reach the page's NVM slot).
        #[test]
        fn every_change_marks_the_lines_it_changes(
            changes in proptest::collection::vec(change(), 1..120),
        ) {
            const PS: usize = 4096;
            let mut buf = vec![0u8; PS];
            NodeMut::new(&mut buf).init(Kind::Leaf, 0, 1, 0);
            let changed = ChangedLines::new(PS);
            let mut other = vec![0u8; PS];
            for c in changes {
                let before = buf.clone();
                changed.take();
                let mut n = NodeMut::marking(&mut buf, Some(&changed));
                match &c {
                    Change::Upsert(k, len, fill) => {
                        let _ = n.upsert(k, &vec![*fill; *len]);
                    }
                    Change::Remove(k) => {
                        n.remove(k);
                    }
                    Change::Compact => n.compact(),
                    Change::SetLsn(l) => n.set_lsn(*l),
                    Change::MoveTailAndBack(at) => {
                        let count = n.view().count();
                        if count > 0 {
                            let mut right = NodeMut::new(&mut other);
                            right.init(Kind::Leaf, 0, 2, 0);
                            n.move_tail(at % count, &mut right);
                            proptest::prop_assert!(n.append_all(&Node(&other)));
                        }
                    }
                    Change::Truncate(k) => n.truncate_from(k),
                }
                let marked = changed.take();
                for l in 0..PS / 64 {
                    let differs = before[l * 64..(l + 1) * 64] != buf[l * 64..(l + 1) * 64];
                    let is_marked = marked[l / 64] & (1 << (l % 64)) != 0;
                    proptest::prop_assert!(
                        !differs || is_marked,
                        "{:?} changed line {} without marking it", c, l
                    );
                }
                check(&buf, Some(1)).map_err(proptest::test_runner::TestCaseError::fail)?;
                proptest::prop_assert!(image(&buf) == image_by_compaction(&buf), "image after {:?}", c);
            }
        }
    }

    #[test]
    fn check_rejects_garbage_without_panicking() {
        let mut buf = vec![0u8; 4096];
        NodeMut::new(&mut buf).init(Kind::Leaf, 0, 1, 0);
        NodeMut::new(&mut buf).upsert(b"a", b"b").unwrap();
        for at in 0..64 {
            let mut bad = buf.clone();
            bad[at] ^= 0xFF;
            let _ = check(&bad, Some(1));
        }
        let mut bad = buf.clone();
        put_u16(&mut bad, HEADER, 4095);
        assert!(check(&bad, Some(1)).is_err());
    }

    /// An inner page read from media with a child reference that has the top bit set (a
    /// swizzled reference, which only DRAM may hold) is damaged: it must never be followed
    /// as a frame index.
    #[test]
    fn check_rejects_swizzled_references_on_media() {
        let mut buf = vec![0u8; 4096];
        NodeMut::new(&mut buf).init(Kind::Inner, 1, 1, 5);
        assert!(NodeMut::new(&mut buf).insert_at(0, b"m", &6u64.to_le_bytes()));
        check(&buf, Some(1)).unwrap();
        let mut refs = Vec::new();
        child_refs(&buf, &mut refs);
        assert_eq!(refs.len(), 2, "aux and one entry");
        assert_eq!(refs[0], 32);
        for &at in &refs {
            let mut bad = buf.clone();
            bad[at + 7] |= 0x80;
            let e = check(&bad, Some(1)).unwrap_err();
            assert!(e.contains("swizzled"), "{e}");
        }
        // A leaf's values are not references.
        let mut leaf = vec![0u8; 4096];
        NodeMut::new(&mut leaf).init(Kind::Leaf, 0, 2, 0);
        NodeMut::new(&mut leaf)
            .upsert(b"a", &u64::MAX.to_le_bytes())
            .unwrap();
        refs.clear();
        child_refs(&leaf, &mut refs);
        assert!(refs.is_empty());
        check(&leaf, Some(2)).unwrap();
        // Garbage inner pages: references inside the page only, and no panic.
        for fill in [0x00u8, 0x7f, 0xff] {
            let mut bad = vec![fill; 4096];
            bad[4] = Kind::Inner as u8;
            refs.clear();
            child_refs(&bad, &mut refs);
            assert!(refs.iter().all(|&at| at + 8 <= bad.len()), "{fill:#x}");
        }
    }
}
