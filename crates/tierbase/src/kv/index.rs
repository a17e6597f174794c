//! The DRAM offset index: an extendible hash table in the style of CCEH (Nam et al., FAST'19),
//! as Viper uses, mapping a 64-bit key word (the key itself for keys of at most 8 bytes, else
//! a 64-bit fingerprint) to record offsets.
//!
//! Owns: hashing, segments, the directory, splits. Must not touch: persistent memory — it only
//! calls back into the store to ask "is the record at this offset my key's?".
//!
//! Design:
//! - A directory of `2^global_depth` segment ids, addressed by the top bits of the mixed hash;
//!   one directory per depth is kept (doubling creates a new one, old ones stay valid), so
//!   readers never follow a freed pointer and no epoch reclamation is needed.
//! - Segments of 4096 64-byte buckets with 8 slots; a slot is one `u64` packing a 16-bit tag
//!   (the top bits of the key word's hash) with a 48-bit record offset, so 8 bytes per slot and
//!   slots are published with one atomic store. The store confirms every tag match against the
//!   key on media, so tags need not be unique. A key may live in one of two
//!   buckets, `b1` (low hash bits) and `b2 = b1 ^ f(tag)` (partial-key cuckoo hashing, so a
//!   resident's other bucket is computable from what is stored); when both are full, one
//!   resident moves to its other bucket (one-level displacement, as CCEH does), and only when
//!   that fails is the segment split in two (local depth + 1), doubling the directory if
//!   needed. docs/INDEX.md has the measurements.
//! - Reads are lock-free. A per-segment version is odd while entries move (split,
//!   displacement); readers validate it and the segment's ownership (depth, prefix) before
//!   trusting a miss. Offsets are published after their key word (release/acquire), and a
//!   reader re-checks a slot after the store rejected its offset, so a concurrent replacement
//!   is retried instead of being reported as a miss. Writers take the segment's mutex; splits
//!   also take a global mutex.
//! - It is a multimap on the key word: fingerprints of different keys may collide, so writers
//!   ask the store (`same_key`) which entry, if any, belongs to their key, and readers try
//!   candidates until the store accepts one. No entry is lost to a collision.
//!
//! Entirely safe Rust: slots are atomics, segments live in an append-only `boxcar::Vec`, and
//! their buckets in one DRAM arena backed by huge pages (`device::dram`; docs/INDEX.md has
//! the measurement).
//! The comparison against `dashmap` that justified writing this is in docs/INDEX.md.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::device::{DramArena, DramSlice};

/// Slots per bucket (one 64-byte cache line of packed entries).
const SLOTS: usize = 8;
/// Buckets per segment (256 KiB).
const BUCKETS: usize = 4096;
/// Largest local/global depth: routing bits come from the 16-bit tag. 2^16 segments of 32768
/// slots hold ~2 billion entries.
const MAX_DEPTH: u32 = 16;
/// Bits of a slot that hold the offset.
const OFFSET_BITS: u32 = 48;
/// Largest offset the index can hold (`RecordOffset::MAX_BLOCK` keeps offsets below it).
pub const MAX_OFFSET: u64 = (1 << OFFSET_BITS) - 2;
/// Slot value marking an empty slot.
const EMPTY_SLOT: u64 = u64::MAX;
/// Returned for "no offset" by slot loads.
pub const EMPTY: u64 = u64::MAX;

#[inline]
fn pack(tag: u16, off: u64) -> u64 {
    debug_assert!(off <= MAX_OFFSET);
    (u64::from(tag) << OFFSET_BITS) | (off & ((1 << OFFSET_BITS) - 1))
}

#[inline]
fn unpack(slot: u64) -> (u16, u64) {
    (
        (slot >> OFFSET_BITS) as u16,
        slot & ((1 << OFFSET_BITS) - 1),
    )
}

#[repr(align(64))]
struct Bucket {
    slots: [AtomicU64; SLOTS],
}

impl Bucket {
    fn new() -> Self {
        Bucket {
            slots: std::array::from_fn(|_| AtomicU64::new(EMPTY_SLOT)),
        }
    }

    fn free_slot(&self) -> Option<usize> {
        (0..SLOTS).find(|&s| self.slots[s].load(Ordering::Relaxed) == EMPTY_SLOT)
    }

    fn put(&self, s: usize, tag: u16, val: u64) {
        self.slots[s].store(pack(tag, val), Ordering::Release);
    }

    /// (tag, offset) of slot `s`, or `None` if empty.
    fn get(&self, s: usize) -> Option<(u16, u64)> {
        let v = self.slots[s].load(Ordering::Acquire);
        (v != EMPTY_SLOT).then(|| unpack(v))
    }
}

/// The tag stored for a hash: its top 16 bits (which also route it through the directory).
#[inline]
fn tag_of(h: u64) -> u16 {
    (h >> 48) as u16
}

/// A resident's other bucket, from the bucket it is in and its tag (an involution: the same
/// non-zero offset `f(tag)` is xored in both ways). One multiply: this runs on every probe.
#[inline]
fn alternate(b: usize, tag: u16) -> usize {
    let f = ((u32::from(tag).wrapping_mul(0x9E37_79B1) >> 20) as usize) & (BUCKETS - 1);
    b ^ f.max(1)
}

/// The two buckets a hash may live in.
#[inline]
fn buckets_of(h: u64) -> [usize; 2] {
    let b1 = (h as usize) & (BUCKETS - 1);
    [b1, alternate(b1, tag_of(h))]
}

/// A line pair of its own (128 bytes; 104 unaligned): segments lie side by side in the
/// `boxcar` vector, and one straddling two lines can cost a lookup's first touch of it two
/// misses, and puts its lock and count on a neighbour's lines (two writers inserting after a
/// load: 1.05×, median of 5 pairs, each above 1; one writer unchanged: BENCHMARKS Figure 33).
#[repr(align(128))]
struct Segment {
    version: AtomicU64,
    depth: AtomicU32,
    prefix: AtomicU64,
    count: AtomicUsize,
    lock: Mutex<()>,
    buckets: DramSlice<Bucket>,
    /// Entries that could not be placed even after splitting (pathological hash clustering).
    stash: Mutex<Vec<(u16, u64)>>,
    stash_len: AtomicUsize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotRef {
    Bucket(usize, usize),
    Stash(usize),
}

impl Segment {
    fn new(arena: Option<&Arc<DramArena<Bucket>>>, depth: u32, prefix: u64) -> Self {
        Segment {
            version: AtomicU64::new(0),
            depth: AtomicU32::new(depth),
            prefix: AtomicU64::new(prefix),
            count: AtomicUsize::new(0),
            lock: Mutex::new(()),
            buckets: DramSlice::new(arena, BUCKETS, |_| Bucket::new()),
            stash: Mutex::new(Vec::new()),
            stash_len: AtomicUsize::new(0),
        }
    }

    fn owns(&self, h: u64) -> bool {
        let d = self.depth.load(Ordering::Acquire);
        d == 0 || (h >> (64 - d)) == self.prefix.load(Ordering::Acquire)
    }

    fn bucket(&self, i: usize) -> Option<&Bucket> {
        self.buckets.get(i)
    }

    /// Every slot whose tag matches `h`'s, as (where, offset), in probe order.
    #[inline]
    fn each_entry(&self, h: u64, mut f: impl FnMut(SlotRef, u64) -> bool) -> bool {
        let tag = tag_of(h);
        let buckets = buckets_of(h);
        // The second bucket's miss overlaps the scan of the first.
        if let Some(second) = self.bucket(buckets[1]) {
            crate::device::cpu::prefetch(second as *const Bucket);
        }
        for b in buckets {
            let Some(bucket) = self.bucket(b) else {
                continue;
            };
            for s in 0..SLOTS {
                if let Some((t, val)) = bucket.get(s)
                    && t == tag
                    && f(SlotRef::Bucket(b, s), val)
                {
                    return true;
                }
            }
        }
        if self.stash_len.load(Ordering::Acquire) > 0 {
            let entries: Vec<(usize, u64)> = self
                .stash
                .lock()
                .iter()
                .enumerate()
                .filter(|(_, e)| e.0 == tag)
                .map(|(i, e)| (i, e.1))
                .collect();
            for (i, val) in entries {
                if f(SlotRef::Stash(i), val) {
                    return true;
                }
            }
        }
        false
    }

    /// Locked: the slot of an entry for `h` whose offset `pick` accepts.
    fn locate(&self, h: u64, pick: &mut dyn FnMut(u64) -> bool) -> Option<SlotRef> {
        let mut found = None;
        self.each_entry(h, |at, val| {
            if pick(val) {
                found = Some(at);
                true
            } else {
                false
            }
        });
        found
    }

    fn load(&self, at: SlotRef) -> u64 {
        match at {
            SlotRef::Bucket(b, s) => self
                .bucket(b)
                .and_then(|bk| bk.get(s))
                .map_or(EMPTY, |(_, v)| v),
            SlotRef::Stash(i) => self.stash.lock().get(i).map_or(EMPTY, |e| e.1),
        }
    }

    fn store(&self, at: SlotRef, val: u64) {
        match at {
            SlotRef::Bucket(b, s) => {
                if let Some(bk) = self.bucket(b)
                    && let Some((tag, _)) = bk.get(s)
                {
                    bk.put(s, tag, val);
                }
            }
            SlotRef::Stash(i) => {
                if let Some(e) = self.stash.lock().get_mut(i) {
                    e.1 = val;
                }
            }
        }
    }

    fn remove_at(&self, at: SlotRef) {
        match at {
            SlotRef::Bucket(b, s) => {
                if let Some(bk) = self.bucket(b) {
                    bk.slots[s].store(EMPTY_SLOT, Ordering::Release);
                }
            }
            SlotRef::Stash(i) => {
                // Removing from the stash shifts indices: readers must not trust a stash
                // position across it.
                self.version.fetch_add(2, Ordering::AcqRel);
                let mut stash = self.stash.lock();
                if i < stash.len() {
                    stash.swap_remove(i);
                }
                self.stash_len.store(stash.len(), Ordering::Release);
            }
        }
        self.count.fetch_sub(1, Ordering::Relaxed);
    }

    /// Locked: places a new entry in one of its two buckets `pair`, displacing one resident to
    /// its other bucket if both are full. Returns false if there is no room.
    fn place(&self, pair: [usize; 2], tag: u16, val: u64) -> bool {
        let placed = self.place_in(pair, tag, val, true);
        if placed {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        placed
    }

    /// [`Segment::place`] into a segment no reader or writer can reach yet (a split's
    /// sibling): no version changes and no count (the caller counts).
    fn place_unpublished(&self, pair: [usize; 2], tag: u16, val: u64) -> bool {
        self.place_in(pair, tag, val, false)
    }

    /// Places an entry; `published`: whether readers may be looking, so that moving a resident
    /// must make them retry.
    fn place_in(&self, pair: [usize; 2], tag: u16, val: u64, published: bool) -> bool {
        for b in pair {
            if let Some(bucket) = self.bucket(b)
                && let Some(s) = bucket.free_slot()
            {
                bucket.put(s, tag, val);
                return true;
            }
        }
        for b in pair {
            let Some(bucket) = self.bucket(b) else {
                continue;
            };
            for s in 0..SLOTS {
                let Some((rt, rv)) = bucket.get(s) else {
                    continue;
                };
                let Some(alt_bucket) = self.bucket(alternate(b, rt)) else {
                    continue;
                };
                let Some(free) = alt_bucket.free_slot() else {
                    continue;
                };
                if published {
                    // Moving a resident: readers of this segment must retry.
                    self.version.fetch_add(1, Ordering::AcqRel);
                    fence(Ordering::Release);
                }
                alt_bucket.put(free, rt, rv);
                bucket.put(s, tag, val);
                if published {
                    self.version.fetch_add(1, Ordering::Release);
                }
                return true;
            }
        }
        false
    }

    /// Whether splitting at local depth `depth` moves at least one resident of `pair` away
    /// from the side `tag` routes to.
    fn split_frees_room(&self, pair: [usize; 2], tag: u16, depth: u32) -> bool {
        let bit = 15 - depth;
        let side = (tag >> bit) & 1;
        pair.iter().filter_map(|&b| self.bucket(b)).any(|bucket| {
            (0..SLOTS).any(|s| bucket.get(s).is_some_and(|(t, _)| (t >> bit) & 1 != side))
        })
    }

    fn stash_push(&self, tag: u16, val: u64) {
        let mut stash = self.stash.lock();
        stash.push((tag, val));
        self.stash_len.store(stash.len(), Ordering::Release);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// Outcome of a write attempt on one segment.
enum Attempt<R> {
    Done(R),
    Split,
}

impl<R> Attempt<R> {
    fn map<S>(self, f: impl FnOnce(R) -> S) -> Attempt<S> {
        match self {
            Attempt::Done(r) => Attempt::Done(f(r)),
            Attempt::Split => Attempt::Split,
        }
    }
}

/// The extendible hash. See the module docs.
pub struct OffsetIndex {
    global_depth: AtomicU32,
    dirs: Box<[OnceLock<Box<[AtomicU32]>>]>,
    segments: boxcar::Vec<Segment>,
    /// Where segments' buckets live: one reservation backed by huge pages (a random probe of a
    /// large index otherwise misses the TLB too); `None` if it could not be reserved.
    buckets: Option<Arc<DramArena<Bucket>>>,
    /// A segment allocated for a split that turned out not to be needed, for the next one.
    spare: Mutex<Option<Segment>>,
    split_lock: Mutex<()>,
}

/// Bucket arrays the arena can hold: every segment the directory can address.
const ARENA_BUCKETS: usize = BUCKETS << MAX_DEPTH;

fn bucket_arena() -> Option<Arc<DramArena<Bucket>>> {
    DramArena::new(ARENA_BUCKETS).ok().map(Arc::new)
}

impl std::fmt::Debug for OffsetIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetIndex")
            .field("len", &self.len())
            .field("segments", &self.segments.count())
            .field("global_depth", &self.global_depth.load(Ordering::Relaxed))
            .finish()
    }
}

impl Default for OffsetIndex {
    fn default() -> Self {
        Self::new()
    }
}

/// Mixes a key word into a well-distributed hash (the splitmix64 finaliser): raw short keys
/// are often sequential, and the directory uses the top bits.
#[inline]
pub fn mix(k: u64) -> u64 {
    let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl OffsetIndex {
    /// An empty index (one segment).
    pub fn new() -> Self {
        let dirs: Box<[OnceLock<Box<[AtomicU32]>>]> =
            (0..=MAX_DEPTH).map(|_| OnceLock::new()).collect();
        let segments = boxcar::Vec::new();
        let buckets = bucket_arena();
        let first = segments.push(Segment::new(buckets.as_ref(), 0, 0));
        if let Some(d0) = dirs.first() {
            let _ = d0.set(vec![AtomicU32::new(first as u32)].into_boxed_slice());
        }
        OffsetIndex {
            global_depth: AtomicU32::new(0),
            dirs,
            segments,
            buckets,
            spare: Mutex::new(None),
            split_lock: Mutex::new(()),
        }
    }

    /// An empty index pre-split for about `entries` entries, so that filling it (recovery)
    /// needs no splits. Costs the DRAM those entries would need anyway.
    pub fn with_capacity(entries: u64) -> Self {
        let per_segment = (BUCKETS * SLOTS) as u64 * 3 / 4;
        let mut depth = 0u32;
        while depth < 12 && (per_segment << depth) < entries {
            depth += 1;
        }
        if depth == 0 {
            return Self::new();
        }
        let dirs: Box<[OnceLock<Box<[AtomicU32]>>]> =
            (0..=MAX_DEPTH).map(|_| OnceLock::new()).collect();
        let segments = boxcar::Vec::new();
        let buckets = bucket_arena();
        let dir: Box<[AtomicU32]> = (0..1u64 << depth)
            .map(|prefix| {
                let seg = Segment::new(buckets.as_ref(), depth, prefix);
                AtomicU32::new(segments.push(seg) as u32)
            })
            .collect();
        if let Some(slot) = dirs.get(depth as usize) {
            let _ = slot.set(dir);
        }
        OffsetIndex {
            global_depth: AtomicU32::new(depth),
            dirs,
            segments,
            buckets,
            spare: Mutex::new(None),
            split_lock: Mutex::new(()),
        }
    }

    /// Starts loading the two buckets `key` may live in, so that a later operation on it
    /// does not stall on the cache misses (recovery prefetches a batch, then inserts it).
    pub fn prefetch(&self, key: u64) {
        let h = mix(key);
        if let Some(seg) = self.segment_for(h) {
            for b in buckets_of(h) {
                if let Some(bucket) = seg.bucket(b) {
                    crate::device::cpu::prefetch(bucket as *const Bucket);
                }
            }
        }
    }

    fn segment_for(&self, h: u64) -> Option<&Segment> {
        let d = self.global_depth.load(Ordering::Acquire);
        let dir = self.dirs.get(d as usize)?.get()?;
        let i = if d == 0 { 0 } else { (h >> (64 - d)) as usize };
        let id = dir.get(i)?.load(Ordering::Acquire);
        self.segments.get(id as usize)
    }

    /// The segment owning hash `h` and its version, once no split or displacement is moving
    /// its entries (a reader then validates that version after its pass).
    #[inline]
    fn stable_segment(&self, h: u64) -> (&Segment, u64) {
        loop {
            if let Some(seg) = self.segment_for(h) {
                let version = seg.version.load(Ordering::Acquire);
                if version & 1 == 0 && seg.owns(h) {
                    return (seg, version);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Offers the offset of each entry for `key` to `visit` until it returns true (accepted);
    /// returns whether one was accepted. Lock-free.
    ///
    /// A `false` from `visit` means "not my key's record": the slot is then re-read, and if it
    /// changed meanwhile (a concurrent replacement), the whole lookup starts over, so a key
    /// that exists throughout is never reported missing. Likewise a miss is only reported
    /// once the segment's version shows no entries moved during the scan.
    #[inline]
    pub fn find(&self, key: u64, mut visit: impl FnMut(u64) -> bool) -> bool {
        let h = mix(key);
        loop {
            let (seg, v1) = self.stable_segment(h);
            let mut restart = false;
            let accepted = seg.each_entry(h, |at, val| {
                if visit(val) {
                    return true;
                }
                if seg.load(at) != val {
                    restart = true;
                    return true;
                }
                false
            });
            if restart {
                continue;
            }
            if accepted {
                return true;
            }
            fence(Ordering::Acquire);
            if seg.version.load(Ordering::Relaxed) == v1 {
                return false;
            }
        }
    }

    /// The offset `is_mine` accepts among the entries for `key` (see [`OffsetIndex::find`]).
    pub fn get(&self, key: u64, is_mine: &mut dyn FnMut(u64) -> bool) -> Option<u64> {
        let mut out = None;
        self.find(key, &mut |off| {
            let mine = is_mine(off);
            if mine {
                out = Some(off);
            }
            mine
        });
        out
    }

    fn write<R>(&self, key: u64, mut f: impl FnMut(&Segment, u64) -> Attempt<R>) -> R {
        let h = mix(key);
        loop {
            let Some(seg) = self.segment_for(h) else {
                std::hint::spin_loop();
                continue;
            };
            let guard = seg.lock.lock();
            if !seg.owns(h) {
                drop(guard);
                continue;
            }
            match f(seg, h) {
                Attempt::Done(r) => return r,
                Attempt::Split => {
                    drop(guard);
                    self.split(h);
                }
            }
        }
    }

    /// Inserts or replaces the entry of the key that `same_key` recognises (it is asked about
    /// each existing entry for `key`). Returns the replaced offset.
    pub fn upsert(&self, key: u64, val: u64, same_key: &mut dyn FnMut(u64) -> bool) -> Option<u64> {
        self.write(key, |seg, h| {
            if let Some(at) = seg.locate(h, same_key) {
                let old = seg.load(at);
                seg.store(at, val);
                return Attempt::Done(Some(old));
            }
            self.insert_new(seg, h, val).map(|()| None)
        })
    }

    /// Inserts unless an entry that `same_key` recognises exists; then returns its offset.
    pub fn insert_if_absent(
        &self,
        key: u64,
        val: u64,
        same_key: &mut dyn FnMut(u64) -> bool,
    ) -> Result<(), u64> {
        self.write(key, |seg, h| {
            if let Some(at) = seg.locate(h, same_key) {
                return Attempt::Done(Err(seg.load(at)));
            }
            self.insert_new(seg, h, val).map(Ok)
        })
    }

    fn insert_new(&self, seg: &Segment, h: u64, val: u64) -> Attempt<()> {
        let (pair, tag) = (buckets_of(h), tag_of(h));
        if seg.place(pair, tag, val) {
            return Attempt::Done(());
        }
        let depth = seg.depth.load(Ordering::Acquire);
        // Split only if it frees room in this bucket pair: some resident must route to the
        // other side. Otherwise (many keys sharing tag bits) splitting could recurse to the
        // maximum depth and explode the directory; such entries go to the stash instead.
        if depth >= MAX_DEPTH || !seg.split_frees_room(pair, tag, depth) {
            seg.stash_push(tag, val);
            return Attempt::Done(());
        }
        Attempt::Split
    }

    /// Replaces the entry `(key, old)` with `(key, new)`; false if no such entry exists.
    pub fn compare_exchange(&self, key: u64, old: u64, new: u64) -> bool {
        self.write(key, |seg, h| match seg.locate(h, &mut |v| v == old) {
            Some(at) => {
                seg.store(at, new);
                Attempt::Done(true)
            }
            None => Attempt::Done(false),
        })
    }

    /// Removes the entry `(key, val)`; false if no such entry exists.
    pub fn remove_exact(&self, key: u64, val: u64) -> bool {
        self.write(key, |seg, h| match seg.locate(h, &mut |v| v == val) {
            Some(at) => {
                seg.remove_at(at);
                Attempt::Done(true)
            }
            None => Attempt::Done(false),
        })
    }

    /// Splits the segment responsible for `h`.
    fn split(&self, h: u64) {
        // The sibling's memory is taken (and first touched, which may make the kernel find and
        // zero a huge page) before any lock: a writer of another segment never waits for that.
        let sibling = self
            .spare
            .lock()
            .take()
            .unwrap_or_else(|| Segment::new(self.buckets.as_ref(), 0, 0));
        let keep_spare = |sibling: Segment| *self.spare.lock() = Some(sibling);
        let _structure = self.split_lock.lock();
        let gd = self.global_depth.load(Ordering::Acquire);
        let Some(dir) = self.dirs.get(gd as usize).and_then(OnceLock::get) else {
            return keep_spare(sibling);
        };
        let idx = if gd == 0 {
            0
        } else {
            (h >> (64 - gd)) as usize
        };
        let Some(id) = dir.get(idx).map(|a| a.load(Ordering::Acquire)) else {
            return keep_spare(sibling);
        };
        let Some(seg) = self.segments.get(id as usize) else {
            return keep_spare(sibling);
        };
        let _seg_guard = seg.lock.lock();
        let ld = seg.depth.load(Ordering::Acquire);
        if ld >= MAX_DEPTH {
            return keep_spare(sibling);
        }
        let gd = if ld == gd { self.double(gd) } else { gd };
        let prefix = seg.prefix.load(Ordering::Acquire);

        seg.version.fetch_add(1, Ordering::AcqRel);
        fence(Ordering::Release);

        sibling.depth.store(ld + 1, Ordering::Relaxed);
        sibling.prefix.store((prefix << 1) | 1, Ordering::Relaxed);
        // The routing bit of this split, as a bit of the 16-bit tag (= hash bits 48..64).
        let goes_up = |tag: u16| (tag >> (15 - ld)) & 1 == 1;
        // Nobody sees the sibling before it is published below: fill it without versions or
        // per-entry counts (a split moves half of 32768 slots; it holds the split lock).
        let mut moved = 0;
        for (b, bucket) in seg.buckets.iter().enumerate() {
            for s in 0..SLOTS {
                let Some((tag, val)) = bucket.get(s) else {
                    continue;
                };
                if goes_up(tag) {
                    if !sibling.place_unpublished([b, alternate(b, tag)], tag, val) {
                        sibling.stash_push(tag, val);
                        sibling.count.fetch_sub(1, Ordering::Relaxed);
                    }
                    bucket.slots[s].store(EMPTY_SLOT, Ordering::Release);
                    moved += 1;
                }
            }
        }
        sibling.count.fetch_add(moved, Ordering::Relaxed);
        seg.count.fetch_sub(moved, Ordering::Relaxed);
        {
            let mut stash = seg.stash.lock();
            let mut keep = Vec::with_capacity(stash.len());
            for &(tag, val) in stash.iter() {
                if goes_up(tag) {
                    // Stashed entries have no recorded bucket; keep them stashed.
                    sibling.stash_push(tag, val);
                    seg.count.fetch_sub(1, Ordering::Relaxed);
                } else {
                    keep.push((tag, val));
                }
            }
            *stash = keep;
            seg.stash_len.store(stash.len(), Ordering::Release);
        }
        seg.depth.store(ld + 1, Ordering::Release);
        seg.prefix.store(prefix << 1, Ordering::Release);
        let sibling_id = self.segments.push(sibling) as u32;

        // Point the upper half of this segment's directory range at the sibling.
        if let Some(dir) = self.dirs.get(gd as usize).and_then(OnceLock::get) {
            let span = 1usize << (gd - ld);
            let start = (prefix as usize) << (gd - ld);
            for i in start + span / 2..start + span {
                if let Some(e) = dir.get(i) {
                    e.store(sibling_id, Ordering::Release);
                }
            }
        }
        seg.version.fetch_add(1, Ordering::Release);
    }

    /// Doubles the directory from depth `gd` to `gd + 1`; returns the new depth.
    fn double(&self, gd: u32) -> u32 {
        let Some(old) = self.dirs.get(gd as usize).and_then(OnceLock::get) else {
            return gd;
        };
        let new: Box<[AtomicU32]> = (0..old.len() * 2)
            .map(|i| AtomicU32::new(old.get(i >> 1).map_or(0, |a| a.load(Ordering::Acquire))))
            .collect();
        if let Some(slot) = self.dirs.get(gd as usize + 1) {
            let _ = slot.set(new);
            self.global_depth.store(gd + 1, Ordering::Release);
            gd + 1
        } else {
            gd
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.segments
            .iter()
            .map(|(_, s)| s.count.load(Ordering::Relaxed))
            .sum()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// DRAM held by the index, in bytes (segments, directories, stashes).
    pub fn memory_bytes(&self) -> usize {
        let segs = self.segments.count() * (std::mem::size_of::<Segment>() + BUCKETS * 64);
        let gd = self.global_depth.load(Ordering::Relaxed) as usize;
        let dirs: usize = (0..=gd).map(|d| (1usize << d) * 4).sum();
        let stash: usize = self
            .segments
            .iter()
            .map(|(_, s)| s.stash_len.load(Ordering::Relaxed) * 16)
            .sum();
        segs + dirs + stash
    }

    /// The tag of `key` (the top 16 bits of its hash): an entry's position in tag order,
    /// which never changes while it lives (splits and displacements keep it).
    pub fn tag(key: u64) -> u16 {
        tag_of(mix(key))
    }

    /// Appends (tag, offset) of every entry whose tag lies in `lo..=hi` to `out`: for each
    /// segment covering part of the range, a snapshot taken while no entry of it moved (the
    /// segment's version is re-checked; a split or displacement during the pass repeats it).
    /// Walking the tag space in ascending ranges therefore meets every entry that lives
    /// throughout exactly once (the store's cursor scan).
    pub fn entries_in_tags(&self, lo: u16, hi: u16, out: &mut Vec<(u16, u64)>) {
        let mut tag = u32::from(lo);
        let hi = u32::from(hi);
        let mut found = Vec::new();
        while tag <= hi {
            let h = u64::from(tag) << 48;
            let next = loop {
                let (seg, v1) = self.stable_segment(h);
                let depth = seg.depth.load(Ordering::Acquire);
                // The segment's last tag: its prefix's range in the 16-bit tag space.
                let seg_end = if depth == 0 {
                    0xFFFF
                } else {
                    let prefix = u32::try_from(seg.prefix.load(Ordering::Acquire)).unwrap_or(0);
                    ((prefix + 1) << (16 - depth)) - 1
                };
                let last = seg_end.min(hi);
                let wanted = |t: u16| (tag..=last).contains(&u32::from(t));
                found.clear();
                for bucket in seg.buckets.iter() {
                    for s in 0..SLOTS {
                        if let Some((t, v)) = bucket.get(s)
                            && wanted(t)
                        {
                            found.push((t, v));
                        }
                    }
                }
                if seg.stash_len.load(Ordering::Acquire) > 0 {
                    found.extend(seg.stash.lock().iter().filter(|e| wanted(e.0)).copied());
                }
                fence(Ordering::Acquire);
                if seg.version.load(Ordering::Relaxed) == v1 {
                    break last + 1;
                }
            };
            out.extend_from_slice(&found);
            tag = next;
        }
    }

    /// Visits the offset of every entry (not a snapshot; for statistics and tests).
    pub fn for_each(&self, mut f: impl FnMut(u64)) {
        for (_, seg) in self.segments.iter() {
            for b in seg.buckets.iter() {
                for s in 0..SLOTS {
                    if let Some((_, v)) = b.get(s) {
                        f(v);
                    }
                }
            }
            for &(_, v) in seg.stash.lock().iter() {
                f(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    // In these tests an offset is `key << 8 | version`, standing in for "the record at this
    // offset holds this key", which the store checks on media.
    fn off(key: u64, version: u64) -> u64 {
        (key << 8) | version
    }

    fn holds(key: u64) -> impl FnMut(u64) -> bool {
        move |o| o >> 8 == key
    }

    #[test]
    fn insert_get_update_remove_many() {
        let idx = OffsetIndex::new();
        let n = 200_000u64;
        for k in 0..n {
            assert_eq!(idx.upsert(k, off(k, 1), &mut holds(k)), None);
        }
        assert_eq!(idx.len(), n as usize);
        for k in 0..n {
            assert_eq!(idx.get(k, &mut holds(k)), Some(off(k, 1)), "key {k}");
        }
        assert_eq!(idx.get(n + 1, &mut holds(n + 1)), None);
        for k in (0..n).step_by(2) {
            assert_eq!(idx.upsert(k, off(k, 2), &mut holds(k)), Some(off(k, 1)));
        }
        for k in (0..n).step_by(3) {
            let cur = idx.get(k, &mut holds(k)).unwrap();
            assert!(idx.compare_exchange(k, cur, off(k, 3)));
            assert!(!idx.compare_exchange(k, cur, off(k, 4)));
            assert!(idx.remove_exact(k, off(k, 3)));
            assert!(!idx.remove_exact(k, off(k, 3)));
        }
        for k in 0..n {
            let expect = if k % 3 == 0 {
                None
            } else if k % 2 == 0 {
                Some(off(k, 2))
            } else {
                Some(off(k, 1))
            };
            assert_eq!(idx.get(k, &mut holds(k)), expect, "key {k}");
        }
        let mut seen = 0;
        idx.for_each(|_| seen += 1);
        assert_eq!(seen, idx.len());
    }

    #[test]
    fn colliding_key_words_keep_separate_entries() {
        // Many real keys share a key word (as colliding fingerprints do); the callback tells
        // their entries apart.
        let idx = OffsetIndex::new();
        for real_key in 0..64u64 {
            let word = real_key % 4;
            assert_eq!(
                idx.upsert(word, off(real_key, 1), &mut holds(real_key)),
                None
            );
        }
        assert_eq!(idx.len(), 64);
        for real_key in 0..64u64 {
            assert_eq!(
                idx.get(real_key % 4, &mut holds(real_key)),
                Some(off(real_key, 1))
            );
        }
        assert_eq!(idx.upsert(1, off(5, 2), &mut holds(5)), Some(off(5, 1)));
        assert_eq!(idx.len(), 64);
    }

    #[test]
    fn insert_if_absent_reports_existing() {
        let idx = OffsetIndex::new();
        assert_eq!(idx.insert_if_absent(9, off(9, 1), &mut holds(9)), Ok(()));
        assert_eq!(
            idx.insert_if_absent(9, off(9, 2), &mut holds(9)),
            Err(off(9, 1))
        );
        assert_eq!(idx.get(9, &mut holds(9)), Some(off(9, 1)));
    }

    #[test]
    fn a_replacement_racing_a_reader_is_never_a_miss() {
        // Writers keep replacing every key's offset; readers must always find every key.
        let idx = OffsetIndex::new();
        let keys = 2_000u64;
        for k in 0..keys {
            idx.upsert(k, off(k, 0), &mut holds(k));
        }
        std::thread::scope(|s| {
            let idx = &idx;
            s.spawn(move || {
                for v in 1..60u64 {
                    for k in 0..keys {
                        idx.upsert(k, off(k, v), &mut holds(k));
                    }
                }
            });
            s.spawn(move || {
                for _ in 0..30 {
                    for k in 0..keys {
                        assert!(idx.get(k, &mut holds(k)).is_some(), "key {k} missed");
                    }
                }
            });
        });
    }

    #[test]
    fn concurrent_writers_and_readers_agree_with_a_model() {
        let idx = OffsetIndex::new();
        let threads = 4u64;
        let per = 50_000u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let idx = &idx;
                s.spawn(move || {
                    for i in 0..per {
                        let k = i * threads + t;
                        idx.upsert(k, off(k, 1), &mut holds(k));
                        if i % 7 == 0 {
                            assert!(idx.remove_exact(k, off(k, 1)));
                        } else {
                            // A key written by this thread is always visible to it.
                            assert_eq!(idx.get(k, &mut holds(k)), Some(off(k, 1)));
                        }
                    }
                });
            }
            // A reader racing the splits and displacements never sees a wrong offset.
            let idx = &idx;
            s.spawn(move || {
                for round in 0..20u64 {
                    for k in (round..threads * per).step_by(997) {
                        if let Some(v) = idx.get(k, &mut holds(k)) {
                            assert_eq!(v, off(k, 1));
                        }
                    }
                }
            });
        });
        let mut model = HashMap::new();
        for t in 0..threads {
            for i in 0..per {
                if i % 7 != 0 {
                    let k = i * threads + t;
                    model.insert(k, off(k, 1));
                }
            }
        }
        assert_eq!(idx.len(), model.len());
        for (k, v) in model {
            assert_eq!(idx.get(k, &mut holds(k)), Some(v));
        }
    }

    #[test]
    fn segments_fill_well_before_splitting() {
        let idx = OffsetIndex::new();
        let n = 300_000u64;
        for k in 0..n {
            idx.upsert(k, off(k, 1), &mut holds(k));
        }
        let slots = idx.segments.count() * BUCKETS * SLOTS;
        let fill = n as f64 / slots as f64;
        // Extendible hashing halves a segment's fill on a split; anything far below ~0.45
        // would mean splits happen long before segments are full.
        assert!(fill > 0.44, "fill {fill:.2}");
        assert!(idx.memory_bytes() as f64 / (n as f64) < 32.0);
    }
}
