//! Replacement policies with a side-effect-free look-ahead over their eviction order: Clock
//! (second chance), LRU, CFLRU (clean-first LRU) and LRU-WSR (write-sequence reordering).
//!
//! Owns: which resident page each policy evicts next, and in what order it would go on
//! evicting if nothing else happened ([`ReplacementPolicy::eviction_order`]), which is what
//! ACE needs to pick the dirty pages it writes back together (see [`super::ace`]). Each policy
//! also keeps the dirty bit of its pages, since CFLRU and LRU-WSR decide by it; a page written
//! back while it stays resident is ordered by them as still dirty, until it is evicted, so
//! that ACE's early write-backs leave the policy's decisions (and misses) as they were.
//! Must not touch: page contents or I/O. The concurrent pool ([`super::BufferPool`]) keeps its
//! own Clock over frames; these policies work on page ids for the page cache of
//! [`super::ace`] and its trace-driven mode.
//!
//! The look-ahead is exact for the next victim and first-order after it: pages inserted later
//! are not foreseen, and for CFLRU the clean-first window is taken as it is now.

use std::collections::{BTreeMap, HashMap};

use crate::error::{Error, Result};

/// A replacement policy over resident page ids.
pub trait ReplacementPolicy: Send {
    /// Short name (`clock`, `lru`, `cflru`, `lru-wsr`).
    fn name(&self) -> &'static str;
    /// Resident pages.
    fn len(&self) -> usize;
    /// Whether no page is resident.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether `page` is resident.
    fn contains(&self, page: u64) -> bool;
    /// Whether resident `page` is dirty (false if not resident).
    fn is_dirty(&self, page: u64) -> bool;
    /// A resident page was accessed (a write makes it dirty).
    fn touch(&mut self, page: u64, write: bool);
    /// `page` became resident (a miss or a prefetch; `write` makes it dirty at once).
    fn insert(&mut self, page: u64, write: bool);
    /// A resident page was written back: it is clean now and stays cached.
    fn mark_clean(&mut self, page: u64);
    /// Removes a resident page (it was evicted).
    fn remove(&mut self, page: u64);
    /// Chooses the next victim, updating the policy's own bookkeeping as the policy does on
    /// eviction (Clock clears reference bits it passes, LRU-WSR moves hot dirty pages away);
    /// the page stays resident until [`ReplacementPolicy::remove`]. Afterwards
    /// [`ReplacementPolicy::eviction_order`] starts with it. `None` when empty.
    fn victim(&mut self) -> Option<u64>;
    /// The resident pages in the order the policy would evict them from now on, without
    /// changing anything.
    fn eviction_order(&self) -> Box<dyn Iterator<Item = u64> + '_>;
}

/// The policies by name.
pub const POLICIES: [&str; 4] = ["clock", "lru", "cflru", "lru-wsr"];

/// A policy by name, for a pool of `capacity` pages.
pub fn by_name(name: &str, capacity: usize) -> Result<Box<dyn ReplacementPolicy>> {
    Ok(match name {
        "clock" => Box::new(Clock::new(capacity)),
        "lru" => Box::new(Lru::new()),
        "cflru" => Box::new(Cflru::new(capacity, CFLRU_WINDOW)),
        "lru-wsr" => Box::new(LruWsr::new()),
        _ => {
            return Err(Error::InvalidArgument(format!(
                "unknown replacement policy {name:?} (known: {})",
                POLICIES.join(", ")
            )));
        }
    })
}

/// CFLRU's clean-first window as a share of the pool (Park et al. study windows up to the
/// whole pool; a quarter keeps hot clean pages out of the window on skewed traces).
pub const CFLRU_WINDOW: f64 = 0.25;

/// Recency order shared by LRU, CFLRU and LRU-WSR: a stamp per page, pages by stamp.
#[derive(Debug, Default)]
struct Recency {
    next: u64,
    /// page → (stamp, dirty, cold).
    pages: HashMap<u64, Entry>,
    /// stamp → page, least recent first.
    order: BTreeMap<u64, u64>,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    stamp: u64,
    dirty: bool,
    /// Written back while resident (by ACE) and not written since: clean, but still ordered
    /// as dirty by CFLRU and LRU-WSR (see [`Recency::ordered_dirty`]).
    written_back: bool,
    /// LRU-WSR's cold flag: a dirty page that already got its second chance.
    cold: bool,
}

impl Entry {
    /// Dirty as CFLRU and LRU-WSR order it (see [`Recency::ordered_dirty`]).
    fn ordered_dirty(&self) -> bool {
        self.dirty || self.written_back
    }
}

impl Recency {
    fn move_to_front(&mut self, page: u64) -> Option<&mut Entry> {
        let stamp = self.next;
        self.next += 1;
        let e = self.pages.get_mut(&page)?;
        self.order.remove(&e.stamp);
        e.stamp = stamp;
        self.order.insert(stamp, page);
        Some(e)
    }

    fn insert(&mut self, page: u64, write: bool) {
        if self.pages.contains_key(&page) {
            self.touch(page, write);
            return;
        }
        let stamp = self.next;
        self.next += 1;
        self.pages.insert(
            page,
            Entry {
                stamp,
                dirty: write,
                written_back: false,
                cold: false,
            },
        );
        self.order.insert(stamp, page);
    }

    fn touch(&mut self, page: u64, write: bool) {
        if let Some(e) = self.move_to_front(page) {
            e.dirty |= write;
            e.cold = false;
        }
    }

    fn remove(&mut self, page: u64) {
        if let Some(e) = self.pages.remove(&page) {
            self.order.remove(&e.stamp);
        }
    }

    fn dirty(&self, page: u64) -> bool {
        self.pages.get(&page).is_some_and(|e| e.dirty)
    }

    fn mark_clean(&mut self, page: u64) {
        if let Some(e) = self.pages.get_mut(&page) {
            e.written_back |= e.dirty;
            e.dirty = false;
        }
    }

    /// Whether a policy that decides by dirtiness orders `page` as dirty: it is, or it was
    /// until a write-back that left it resident. ACE's write-backs must not change which
    /// pages the policy keeps (it promises the policy's own eviction order, so misses stay
    /// as they were); such a page's eviction then simply costs no write.
    fn ordered_dirty(&self, page: u64) -> bool {
        self.pages.get(&page).is_some_and(Entry::ordered_dirty)
    }

    fn lru_order(&self) -> impl Iterator<Item = u64> + '_ {
        self.order.values().copied()
    }
}

macro_rules! recency_common {
    () => {
        fn len(&self) -> usize {
            self.r.pages.len()
        }
        fn contains(&self, page: u64) -> bool {
            self.r.pages.contains_key(&page)
        }
        fn is_dirty(&self, page: u64) -> bool {
            self.r.dirty(page)
        }
        fn touch(&mut self, page: u64, write: bool) {
            self.r.touch(page, write);
        }
        fn insert(&mut self, page: u64, write: bool) {
            self.r.insert(page, write);
        }
        fn mark_clean(&mut self, page: u64) {
            self.r.mark_clean(page);
        }
        fn remove(&mut self, page: u64) {
            self.r.remove(page);
        }
    };
}

/// Least recently used.
#[derive(Debug, Default)]
pub struct Lru {
    r: Recency,
}

impl Lru {
    /// An empty LRU.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ReplacementPolicy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    recency_common!();
    fn victim(&mut self) -> Option<u64> {
        self.r.lru_order().next()
    }
    fn eviction_order(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        Box::new(self.r.lru_order())
    }
}

/// Clean-first LRU (Park et al., CASES'06): within the `window` least recently used pages,
/// evict the least recent clean page; only if all of them are dirty, the least recent page.
#[derive(Debug)]
pub struct Cflru {
    r: Recency,
    window: usize,
}

impl Cflru {
    /// A CFLRU whose clean-first window is `share` of `capacity` pages (at least one page).
    pub fn new(capacity: usize, share: f64) -> Self {
        Cflru {
            r: Recency::default(),
            window: ((capacity as f64 * share).ceil() as usize).max(1),
        }
    }
}

impl ReplacementPolicy for Cflru {
    fn name(&self) -> &'static str {
        "cflru"
    }
    recency_common!();
    fn victim(&mut self) -> Option<u64> {
        self.eviction_order().next()
    }
    fn eviction_order(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        let window = self.window;
        let clean_in_window = self
            .r
            .lru_order()
            .take(window)
            .filter(|p| !self.r.ordered_dirty(*p));
        let dirty_in_window = self
            .r
            .lru_order()
            .take(window)
            .filter(|p| self.r.ordered_dirty(*p));
        Box::new(
            clean_in_window
                .chain(dirty_in_window)
                .chain(self.r.lru_order().skip(window)),
        )
    }
}

/// LRU with write-sequence reordering (Jung et al., 2008): a dirty page at the LRU end gets a
/// second chance (moved to the front, marked cold) unless it is already cold; a hit clears
/// the mark. Clean pages are evicted in LRU order.
#[derive(Debug, Default)]
pub struct LruWsr {
    r: Recency,
}

impl LruWsr {
    /// An empty LRU-WSR.
    pub fn new() -> Self {
        Self::default()
    }
}

impl ReplacementPolicy for LruWsr {
    fn name(&self) -> &'static str {
        "lru-wsr"
    }
    recency_common!();
    fn victim(&mut self) -> Option<u64> {
        // Each hot dirty page is passed at most once (it turns cold), so this ends.
        loop {
            let page = self.r.lru_order().next()?;
            let e = self.r.pages[&page];
            if !e.ordered_dirty() || e.cold {
                return Some(page);
            }
            if let Some(e) = self.r.move_to_front(page) {
                e.cold = true;
            }
        }
    }
    fn eviction_order(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        let evictable = |p: &u64| {
            let e = &self.r.pages[p];
            !e.ordered_dirty() || e.cold
        };
        Box::new(
            self.r
                .lru_order()
                .filter(evictable)
                .chain(self.r.lru_order().filter(move |p| !evictable(p))),
        )
    }
}

/// Clock (second chance) over a fixed ring of slots: a page gets its reference bit on insert
/// and on every access; the hand clears set bits as it passes and evicts the first page
/// whose bit is clear.
#[derive(Debug)]
pub struct Clock {
    slots: Vec<Option<u64>>,
    referenced: Vec<bool>,
    dirty: Vec<bool>,
    free: Vec<usize>,
    slot_of: HashMap<u64, usize>,
    hand: usize,
}

impl Clock {
    /// A Clock with `capacity` slots (inserting more pages than that grows the ring).
    pub fn new(capacity: usize) -> Self {
        let n = capacity.max(1);
        Clock {
            slots: vec![None; n],
            referenced: vec![false; n],
            dirty: vec![false; n],
            free: (0..n).rev().collect(),
            slot_of: HashMap::new(),
            hand: 0,
        }
    }

    fn ring_from_hand(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.slots.len();
        (0..n).map(move |i| (self.hand + i) % n)
    }
}

impl ReplacementPolicy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }
    fn len(&self) -> usize {
        self.slot_of.len()
    }
    fn contains(&self, page: u64) -> bool {
        self.slot_of.contains_key(&page)
    }
    fn is_dirty(&self, page: u64) -> bool {
        self.slot_of.get(&page).is_some_and(|&s| self.dirty[s])
    }
    fn touch(&mut self, page: u64, write: bool) {
        if let Some(&s) = self.slot_of.get(&page) {
            self.referenced[s] = true;
            self.dirty[s] |= write;
        }
    }
    fn insert(&mut self, page: u64, write: bool) {
        if self.slot_of.contains_key(&page) {
            self.touch(page, write);
            return;
        }
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.referenced.push(false);
                self.dirty.push(false);
                self.slots.len() - 1
            }
        };
        self.slots[s] = Some(page);
        self.referenced[s] = true;
        self.dirty[s] = write;
        self.slot_of.insert(page, s);
    }
    fn mark_clean(&mut self, page: u64) {
        if let Some(&s) = self.slot_of.get(&page) {
            self.dirty[s] = false;
        }
    }
    fn remove(&mut self, page: u64) {
        if let Some(s) = self.slot_of.remove(&page) {
            self.slots[s] = None;
            self.referenced[s] = false;
            self.dirty[s] = false;
            self.free.push(s);
        }
    }
    fn victim(&mut self) -> Option<u64> {
        if self.slot_of.is_empty() {
            return None;
        }
        let n = self.slots.len();
        // Two turns at most: the first clears every bit it passes.
        for _ in 0..2 * n {
            if let Some(page) = self.slots[self.hand] {
                if !self.referenced[self.hand] {
                    return Some(page);
                }
                self.referenced[self.hand] = false;
            }
            self.hand = (self.hand + 1) % n;
        }
        None
    }
    fn eviction_order(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        let unreferenced = self
            .ring_from_hand()
            .filter(|&s| !self.referenced[s])
            .filter_map(|s| self.slots[s]);
        let referenced = self
            .ring_from_hand()
            .filter(|&s| self.referenced[s])
            .filter_map(|s| self.slots[s]);
        Box::new(unreferenced.chain(referenced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(p: &mut dyn ReplacementPolicy, pages: &[(u64, bool)]) {
        for &(page, dirty) in pages {
            p.insert(page, dirty);
        }
    }

    #[test]
    fn lru_evicts_least_recent_and_looks_ahead_in_order() {
        let mut p = Lru::new();
        fill(&mut p, &[(1, false), (2, true), (3, false)]);
        p.touch(1, false);
        assert_eq!(p.eviction_order().collect::<Vec<_>>(), [2, 3, 1]);
        assert_eq!(p.victim(), Some(2));
        assert!(p.is_dirty(2));
        p.mark_clean(2);
        assert!(!p.is_dirty(2));
    }

    #[test]
    fn cflru_prefers_clean_pages_inside_the_window() {
        let mut p = Cflru::new(8, 0.5); // window of 4
        fill(
            &mut p,
            &[(1, true), (2, true), (3, false), (4, true), (5, false)],
        );
        // Window = 1, 2, 3, 4: clean 3 first, then dirty 1, 2, 4, then 5.
        assert_eq!(p.eviction_order().collect::<Vec<_>>(), [3, 1, 2, 4, 5]);
        assert_eq!(p.victim(), Some(3));
    }

    #[test]
    fn lru_wsr_gives_hot_dirty_pages_a_second_chance() {
        let mut p = LruWsr::new();
        fill(&mut p, &[(1, true), (2, false), (3, true)]);
        assert_eq!(p.eviction_order().collect::<Vec<_>>(), [2, 1, 3]);
        assert_eq!(p.victim(), Some(2));
        p.remove(2);
        // 1 is hot and dirty: it moves to the front, cold; then 3 does the same; then 1 goes.
        assert_eq!(p.victim(), Some(1));
        assert_eq!(p.eviction_order().collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn clock_clears_bits_then_evicts_in_ring_order() {
        let mut p = Clock::new(3);
        fill(&mut p, &[(1, false), (2, true), (3, false)]);
        assert_eq!(
            p.victim(),
            Some(1),
            "all referenced: one turn clears, then 1"
        );
        p.remove(1);
        p.insert(4, false); // takes slot 0, referenced
        assert_eq!(p.eviction_order().collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(p.victim(), Some(2));
    }

    #[test]
    fn unknown_policy_is_a_clear_error() {
        let e = by_name("arc", 4).err().unwrap().to_string();
        assert!(e.contains("arc") && e.contains("lru-wsr"), "{e}");
    }
}
