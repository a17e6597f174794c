//! Property tests of the replacement policies (`buffer::policy`) and of ACE's page cache
//! (`buffer::ace`).
//!
//! 1. Model-based: Clock, LRU, CFLRU and LRU-WSR against naive reference models written here
//!    (a `Vec` in recency order following the published algorithms for the LRU family, a ring
//!    of slots with reference bits and a hand for Clock), driven by random sequences of
//!    insert / touch (read or write) / mark_clean / victim / victim+remove / remove / look-ahead
//!    over a small page universe. Victims, `len`, `contains`, `is_dirty` and the whole
//!    look-ahead must match the model after every step.
//! 2. The look-ahead is side-effect free: a twin that calls `eviction_order()` (fully or
//!    partially) between all operations picks exactly the same victims; right after
//!    `victim()` returns `v`, `eviction_order()` starts with `v` and lists every resident page
//!    exactly once.
//! 3. The look-ahead is exact for repeated evictions without inserts for Clock, LRU and
//!    LRU-WSR. For CFLRU it is not (its window is frozen, as `policy.rs` documents: a clean
//!    page just beyond the window moves into it after an eviction and overtakes the window's
//!    dirty pages); what does hold, and is checked, is that the first victim is exact and that
//!    the clean pages and the dirty pages each come out in the predicted order.
//! 4. `PageCache` over a recording `PageDevice`, for random traces and capacities: with every
//!    policy, ACE without prefetch has exactly the baseline's hits, misses and evictions;
//!    for all four policies (with and without prefetch) no dirty page is ever evicted
//!    unwritten, each write batch is exactly the first `n_w` dirty pages of the eviction order
//!    and starts with the victim, reads are the missed page plus at most `n_e − 1` prefetches
//!    (exactly the sequential prefetcher's pages), the cache never exceeds its capacity, the
//!    policy's dirty bits are exactly the test's, and every counter agrees with the recorder.
//! 5. `VirtualPages` (pcie-ssd-p4510): deterministic virtual runtime, and ACE beats the
//!    baseline on a write-heavy skewed trace for every policy.
//!
//! More cases: `PROPTEST_CASES=n cargo test -p tierbase --release --test ace_policy`.

use std::collections::{BTreeSet, HashMap, HashSet};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tierbase::buffer::ace::{
    AceConfig, CacheStats, PageCache, PageDevice, Prefetcher, VirtualPages,
};
use tierbase::buffer::policy::{self, CFLRU_WINDOW, Cflru, POLICIES, ReplacementPolicy};
use tierbase::device::Catalogue;

// ------------------------------------------------------------------------------------------
// Reference models.
// ------------------------------------------------------------------------------------------

/// Which member of the LRU family a recency model follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Lru,
    /// CFLRU with a clean-first window of this many pages.
    Cflru(usize),
    LruWsr,
}

#[derive(Clone, Copy, Debug)]
struct RPage {
    page: u64,
    dirty: bool,
    /// Written back while resident: clean, but CFLRU and LRU-WSR still order it as dirty.
    written_back: bool,
    /// LRU-WSR's cold flag.
    cold: bool,
}

impl RPage {
    fn ordered_dirty(&self) -> bool {
        self.dirty || self.written_back
    }
}

/// LRU, CFLRU, LRU-WSR: a `Vec` in recency order, least recent first.
#[derive(Clone, Debug)]
struct RecencyModel {
    kind: Kind,
    pages: Vec<RPage>,
}

impl RecencyModel {
    fn pos(&self, page: u64) -> Option<usize> {
        self.pages.iter().position(|e| e.page == page)
    }

    fn insert(&mut self, page: u64, write: bool) {
        if self.pos(page).is_some() {
            self.touch(page, write);
        } else {
            self.pages.push(RPage {
                page,
                dirty: write,
                written_back: false,
                cold: false,
            });
        }
    }

    /// A hit moves the page to the MRU end; a write dirties it; LRU-WSR clears the cold flag.
    fn touch(&mut self, page: u64, write: bool) {
        if let Some(i) = self.pos(page) {
            let mut e = self.pages.remove(i);
            e.dirty |= write;
            e.cold = false;
            self.pages.push(e);
        }
    }

    fn mark_clean(&mut self, page: u64) {
        if let Some(i) = self.pos(page) {
            let e = &mut self.pages[i];
            e.written_back |= e.dirty;
            e.dirty = false;
        }
    }

    fn remove(&mut self, page: u64) {
        if let Some(i) = self.pos(page) {
            self.pages.remove(i);
        }
    }

    fn victim(&mut self) -> Option<u64> {
        if self.pages.is_empty() {
            return None;
        }
        match self.kind {
            Kind::Lru => Some(self.pages[0].page),
            // Park et al.: the least recent clean page among the `window` least recent pages,
            // else the least recent page.
            Kind::Cflru(window) => {
                let w = window.min(self.pages.len());
                let clean = self.pages[..w].iter().find(|e| !e.ordered_dirty());
                Some(clean.unwrap_or(&self.pages[0]).page)
            }
            // Jung et al.: a hot (not cold) dirty page at the LRU end is moved to the MRU end
            // and marked cold; a clean or cold page at the LRU end is the victim.
            Kind::LruWsr => loop {
                let e = self.pages[0];
                if !e.ordered_dirty() || e.cold {
                    return Some(e.page);
                }
                let mut e = self.pages.remove(0);
                e.cold = true;
                self.pages.push(e);
            },
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    page: u64,
    referenced: bool,
    dirty: bool,
}

/// Clock: a ring of slots with reference bits and a hand. A new page takes the most recently
/// freed slot (initially the slots in ascending order); with no free slot the ring grows by
/// one slot at its end.
#[derive(Clone, Debug)]
struct ClockModel {
    ring: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
}

impl ClockModel {
    fn new(capacity: usize) -> Self {
        let n = capacity.max(1);
        ClockModel {
            ring: vec![None; n],
            free: (0..n).rev().collect(),
            hand: 0,
        }
    }

    fn slot(&self, page: u64) -> Option<usize> {
        self.ring
            .iter()
            .position(|s| s.is_some_and(|s| s.page == page))
    }

    fn insert(&mut self, page: u64, write: bool) {
        if self.slot(page).is_some() {
            self.touch(page, write);
            return;
        }
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.ring.push(None);
                self.ring.len() - 1
            }
        };
        self.ring[i] = Some(Slot {
            page,
            referenced: true,
            dirty: write,
        });
    }

    fn touch(&mut self, page: u64, write: bool) {
        if let Some(i) = self.slot(page) {
            let s = self.ring[i].as_mut().unwrap();
            s.referenced = true;
            s.dirty |= write;
        }
    }

    fn mark_clean(&mut self, page: u64) {
        if let Some(i) = self.slot(page) {
            self.ring[i].as_mut().unwrap().dirty = false;
        }
    }

    fn remove(&mut self, page: u64) {
        if let Some(i) = self.slot(page) {
            self.ring[i] = None;
            self.free.push(i);
        }
    }

    /// Second chance: the hand clears set bits as it passes and stops at the first page whose
    /// bit is clear (it stays on that slot).
    fn victim(&mut self) -> Option<u64> {
        if self.ring.iter().all(Option::is_none) {
            return None;
        }
        loop {
            if let Some(s) = self.ring[self.hand].as_mut() {
                if !s.referenced {
                    return Some(s.page);
                }
                s.referenced = false;
            }
            self.hand = (self.hand + 1) % self.ring.len();
        }
    }
}

#[derive(Clone, Debug)]
enum Model {
    Recency(RecencyModel),
    Clock(ClockModel),
}

impl Model {
    fn insert(&mut self, page: u64, write: bool) {
        match self {
            Model::Recency(m) => m.insert(page, write),
            Model::Clock(m) => m.insert(page, write),
        }
    }
    fn touch(&mut self, page: u64, write: bool) {
        match self {
            Model::Recency(m) => m.touch(page, write),
            Model::Clock(m) => m.touch(page, write),
        }
    }
    fn mark_clean(&mut self, page: u64) {
        match self {
            Model::Recency(m) => m.mark_clean(page),
            Model::Clock(m) => m.mark_clean(page),
        }
    }
    fn remove(&mut self, page: u64) {
        match self {
            Model::Recency(m) => m.remove(page),
            Model::Clock(m) => m.remove(page),
        }
    }
    fn victim(&mut self) -> Option<u64> {
        match self {
            Model::Recency(m) => m.victim(),
            Model::Clock(m) => m.victim(),
        }
    }
    /// Resident pages with their dirty bits.
    fn resident(&self) -> Vec<(u64, bool)> {
        match self {
            Model::Recency(m) => m.pages.iter().map(|e| (e.page, e.dirty)).collect(),
            Model::Clock(m) => m.ring.iter().flatten().map(|s| (s.page, s.dirty)).collect(),
        }
    }
    fn contains(&self, page: u64) -> bool {
        self.resident().iter().any(|&(p, _)| p == page)
    }
    fn is_dirty(&self, page: u64) -> bool {
        self.resident().iter().any(|&(p, d)| p == page && d)
    }
    fn len(&self) -> usize {
        self.resident().len()
    }
    /// The victims of repeated victim + remove with nothing else happening.
    fn drain_order(&self) -> Vec<u64> {
        let mut m = self.clone();
        let mut out = Vec::new();
        while let Some(v) = m.victim() {
            out.push(v);
            m.remove(v);
        }
        out
    }
    /// The look-ahead `policy.rs` documents: exact (the drain order) except for CFLRU, whose
    /// window is taken as it is now: clean pages in the window, dirty pages in the window (both
    /// least recent first), then the pages beyond the window in LRU order.
    fn documented_order(&self) -> Vec<u64> {
        match self {
            Model::Recency(RecencyModel {
                kind: Kind::Cflru(window),
                pages,
            }) => {
                let w = (*window).min(pages.len());
                let clean = pages[..w].iter().filter(|e| !e.ordered_dirty());
                let dirty = pages[..w].iter().filter(|e| e.ordered_dirty());
                clean
                    .chain(dirty)
                    .chain(&pages[w..])
                    .map(|e| e.page)
                    .collect()
            }
            _ => self.drain_order(),
        }
    }
}

// ------------------------------------------------------------------------------------------
// Policy cases and operations.
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
struct PolicyCase {
    name: &'static str,
    capacity: usize,
    /// CFLRU's window share (ignored by the others).
    share: f64,
}

impl PolicyCase {
    fn cflru_window(&self) -> usize {
        ((self.capacity as f64 * self.share).ceil() as usize).max(1)
    }

    fn build(&self) -> Box<dyn ReplacementPolicy> {
        if self.name == "cflru" {
            Box::new(Cflru::new(self.capacity, self.share))
        } else {
            policy::by_name(self.name, self.capacity).unwrap()
        }
    }

    fn model(&self) -> Model {
        let recency = |kind| {
            Model::Recency(RecencyModel {
                kind,
                pages: Vec::new(),
            })
        };
        match self.name {
            "clock" => Model::Clock(ClockModel::new(self.capacity)),
            "lru" => recency(Kind::Lru),
            "cflru" => recency(Kind::Cflru(self.cflru_window())),
            "lru-wsr" => recency(Kind::LruWsr),
            other => panic!("unknown policy {other}"),
        }
    }
}

fn policy_case(names: &'static [&'static str]) -> impl Strategy<Value = PolicyCase> {
    (
        prop::sample::select(names),
        1usize..=8,
        prop::sample::select(vec![CFLRU_WINDOW, 0.1, 0.5, 1.0]),
    )
        .prop_map(|(name, capacity, share)| PolicyCase {
            name,
            capacity,
            share,
        })
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64, bool),
    Touch(u64, bool),
    MarkClean(u64),
    /// victim() then remove() of that victim.
    Evict,
    /// victim() only (the page stays resident).
    Victim,
    /// remove() of any page (resident or not).
    Remove(u64),
    /// Takes this many pages of the look-ahead.
    Peek(usize),
}

fn op(universe: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..universe, any::<bool>()).prop_map(|(p, w)| Op::Insert(p, w)),
        4 => (0..universe, any::<bool>()).prop_map(|(p, w)| Op::Touch(p, w)),
        2 => (0..universe).prop_map(Op::MarkClean),
        4 => Just(Op::Evict),
        1 => Just(Op::Victim),
        1 => (0..universe).prop_map(Op::Remove),
        1 => (0usize..12).prop_map(Op::Peek),
    ]
}

/// A policy case, a page universe and operations over it.
fn case_and_ops(
    names: &'static [&'static str],
    max_ops: usize,
) -> impl Strategy<Value = (PolicyCase, u64, Vec<Op>)> {
    (policy_case(names), 1u64..=12).prop_flat_map(move |(case, universe)| {
        (
            Just(case),
            Just(universe),
            prop::collection::vec(op(universe), 0..max_ops),
        )
    })
}

fn residents(p: &dyn ReplacementPolicy, universe: u64) -> BTreeSet<u64> {
    (0..universe).filter(|&x| p.contains(x)).collect()
}

/// The look-ahead lists every resident page exactly once (and nothing else).
fn check_order_is_permutation(
    p: &dyn ReplacementPolicy,
    universe: u64,
) -> Result<Vec<u64>, TestCaseError> {
    let order: Vec<u64> = p.eviction_order().collect();
    let set: BTreeSet<u64> = order.iter().copied().collect();
    prop_assert_eq!(set.len(), order.len(), "a page listed twice: {:?}", order);
    prop_assert_eq!(order.len(), p.len(), "look-ahead {:?} vs len", order);
    prop_assert_eq!(&set, &residents(p, universe), "look-ahead {:?}", order);
    Ok(order)
}

/// After `victim()` returned `v`: the look-ahead starts with `v` and covers every resident
/// page once.
fn check_after_victim(
    p: &dyn ReplacementPolicy,
    v: Option<u64>,
    universe: u64,
) -> Result<(), TestCaseError> {
    let order = check_order_is_permutation(p, universe)?;
    prop_assert_eq!(
        order.first().copied(),
        v,
        "look-ahead {:?} after victim",
        order
    );
    Ok(())
}

fn check_same_state(
    real: &dyn ReplacementPolicy,
    model: &Model,
    universe: u64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(real.len(), model.len());
    prop_assert_eq!(real.is_empty(), model.len() == 0);
    for x in 0..universe {
        prop_assert_eq!(real.contains(x), model.contains(x), "contains({})", x);
        prop_assert_eq!(real.is_dirty(x), model.is_dirty(x), "is_dirty({})", x);
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// 1–3: policies.
// ------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Each policy against its reference model, step by step: victims, state, and the whole
    /// look-ahead (the drain order for Clock, LRU and LRU-WSR; CFLRU's documented order).
    #[test]
    fn policies_match_reference_models((case, universe, ops) in case_and_ops(&POLICIES, 120)) {
        let mut real = case.build();
        let mut model = case.model();
        prop_assert_eq!(real.name(), case.name);
        for (step, &op) in ops.iter().enumerate() {
            match op {
                Op::Insert(p, w) => {
                    real.insert(p, w);
                    model.insert(p, w);
                }
                Op::Touch(p, w) => {
                    real.touch(p, w);
                    model.touch(p, w);
                }
                Op::MarkClean(p) => {
                    real.mark_clean(p);
                    model.mark_clean(p);
                }
                Op::Evict | Op::Victim => {
                    let v = real.victim();
                    prop_assert_eq!(v, model.victim(), "victim at step {} ({:?})", step, op);
                    check_after_victim(real.as_ref(), v, universe)?;
                    if let (Op::Evict, Some(v)) = (op, v) {
                        real.remove(v);
                        model.remove(v);
                    }
                }
                Op::Remove(p) => {
                    real.remove(p);
                    model.remove(p);
                }
                Op::Peek(k) => {
                    let _ = real.eviction_order().take(k).count();
                }
            }
            check_same_state(real.as_ref(), &model, universe)?;
            let order = check_order_is_permutation(real.as_ref(), universe)?;
            prop_assert_eq!(
                &order,
                &model.documented_order(),
                "look-ahead after step {} ({:?})", step, op
            );
        }
    }

    /// Looking ahead (fully or partially) between operations never changes a later victim.
    #[test]
    fn look_ahead_has_no_side_effects((case, universe, ops) in case_and_ops(&POLICIES, 120)) {
        let mut plain = case.build();
        let mut peeked = case.build();
        for (step, &op) in ops.iter().enumerate() {
            // Partial and full look-aheads on one twin only.
            let take = step % (peeked.len() + 2);
            let _ = peeked.eviction_order().take(take).count();
            if step % 3 == 0 {
                let _ = peeked.eviction_order().count();
            }
            match op {
                Op::Insert(p, w) => {
                    plain.insert(p, w);
                    peeked.insert(p, w);
                }
                Op::Touch(p, w) => {
                    plain.touch(p, w);
                    peeked.touch(p, w);
                }
                Op::MarkClean(p) => {
                    plain.mark_clean(p);
                    peeked.mark_clean(p);
                }
                Op::Evict | Op::Victim => {
                    let v = peeked.victim();
                    prop_assert_eq!(plain.victim(), v, "victim at step {}", step);
                    check_after_victim(peeked.as_ref(), v, universe)?;
                    if let (Op::Evict, Some(v)) = (op, v) {
                        plain.remove(v);
                        peeked.remove(v);
                    }
                }
                Op::Remove(p) => {
                    plain.remove(p);
                    peeked.remove(p);
                }
                Op::Peek(k) => {
                    let _ = peeked.eviction_order().take(k).count();
                }
            }
            prop_assert_eq!(plain.len(), peeked.len());
            for x in 0..universe {
                prop_assert_eq!(plain.is_dirty(x), peeked.is_dirty(x));
            }
        }
        // The rest of the victims, too.
        loop {
            let v = plain.victim();
            prop_assert_eq!(peeked.victim(), v);
            let Some(v) = v else { break };
            plain.remove(v);
            peeked.remove(v);
        }
    }

    /// Clock, LRU and LRU-WSR: draining by victim + remove yields exactly the look-ahead
    /// taken before, from any state the operations reach.
    #[test]
    fn look_ahead_is_exact_for_repeated_evictions(
        (case, universe, ops) in case_and_ops(&["clock", "lru", "lru-wsr"], 80),
    ) {
        let mut p = case.build();
        for (step, &op) in ops.iter().enumerate() {
            apply(p.as_mut(), op);
            // Drain a twin from this state (replaying the ops so far).
            if step % 7 == 6 {
                let mut twin = case.build();
                for &o in &ops[..=step] {
                    apply(twin.as_mut(), o);
                }
                check_drain_exact(twin.as_mut(), universe)?;
            }
        }
        check_drain_exact(p.as_mut(), universe)?;
    }

    /// CFLRU's look-ahead is not exact (its window is frozen), but the first victim is, and
    /// the clean pages and the dirty pages each leave in the predicted order — dirty as CFLRU
    /// orders it: written since the page became resident, written back or not.
    #[test]
    fn cflru_look_ahead_is_exact_per_dirtiness(
        (case, universe, ops) in case_and_ops(&["cflru"], 80),
    ) {
        let mut p = case.build();
        let mut written = std::collections::HashSet::new();
        for &op in &ops {
            match op {
                Op::Insert(x, w) | Op::Touch(x, w) => {
                    let fresh = !p.contains(x);
                    if fresh && matches!(op, Op::Insert(..)) {
                        written.remove(&x);
                    }
                    if w && (!fresh || matches!(op, Op::Insert(..))) {
                        written.insert(x);
                    }
                }
                Op::Remove(x) => {
                    written.remove(&x);
                }
                _ => {}
            }
            if let Op::Evict = op {
                if let Some(v) = p.victim() {
                    p.remove(v);
                    written.remove(&v);
                }
            } else {
                apply(p.as_mut(), op);
            }
        }
        let predicted: Vec<(u64, bool)> =
            p.eviction_order().map(|x| (x, written.contains(&x))).collect();
        let mut drained = Vec::new();
        while let Some(v) = p.victim() {
            drained.push((v, written.contains(&v)));
            p.remove(v);
        }
        prop_assert!(p.is_empty() && residents(p.as_ref(), universe).is_empty());
        prop_assert_eq!(predicted.first(), drained.first());
        for dirty in [false, true] {
            let pick = |v: &[(u64, bool)]| -> Vec<u64> {
                v.iter().filter(|e| e.1 == dirty).map(|e| e.0).collect()
            };
            prop_assert_eq!(pick(&predicted), pick(&drained), "dirty = {}", dirty);
        }
    }
}

fn apply(p: &mut dyn ReplacementPolicy, op: Op) {
    match op {
        Op::Insert(x, w) => p.insert(x, w),
        Op::Touch(x, w) => p.touch(x, w),
        Op::MarkClean(x) => p.mark_clean(x),
        Op::Evict => {
            if let Some(v) = p.victim() {
                p.remove(v);
            }
        }
        Op::Victim => {
            let _ = p.victim();
        }
        Op::Remove(x) => p.remove(x),
        Op::Peek(k) => {
            let _ = p.eviction_order().take(k).count();
        }
    }
}

fn check_drain_exact(p: &mut dyn ReplacementPolicy, universe: u64) -> Result<(), TestCaseError> {
    let predicted = check_order_is_permutation(p, universe)?;
    let mut drained = Vec::new();
    while let Some(v) = p.victim() {
        // The look-ahead keeps predicting the rest.
        let rest: Vec<u64> = p.eviction_order().collect();
        prop_assert_eq!(&rest[..], &predicted[drained.len()..]);
        drained.push(v);
        p.remove(v);
    }
    prop_assert_eq!(drained, predicted);
    prop_assert!(p.is_empty());
    Ok(())
}

/// The counterexample behind the CFLRU exception, spelled out: window of 2 over 1 (clean),
/// 2 (dirty), 3 (clean). The look-ahead says 1, 2, 3; evicting 1 slides 3 into the window,
/// so the next victim is the clean 3, not the dirty 2. Only the first victim is promised.
#[test]
fn cflru_window_slides_after_an_eviction() {
    let mut p = Cflru::new(8, CFLRU_WINDOW); // window of 2
    p.insert(1, false);
    p.insert(2, true);
    p.insert(3, false);
    let predicted: Vec<u64> = p.eviction_order().collect();
    assert_eq!(predicted, [1, 2, 3]);
    let mut drained = Vec::new();
    while let Some(v) = p.victim() {
        drained.push(v);
        p.remove(v);
    }
    assert_eq!(drained[0], predicted[0]);
    assert_eq!(
        drained,
        [1, 3, 2],
        "a real CFLRU prefers clean 3 once it is in the window"
    );
}

// ------------------------------------------------------------------------------------------
// 4: the page cache over a recording device.
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Batch {
    Read(Vec<u64>),
    Write(Vec<u64>),
}

/// Records batches; takes no time.
#[derive(Debug, Default)]
struct Recorder {
    log: Vec<Batch>,
}

impl PageDevice for Recorder {
    fn read(&mut self, pages: &[u64]) -> tierbase::Result<()> {
        self.log.push(Batch::Read(pages.to_vec()));
        Ok(())
    }
    fn write(&mut self, pages: &[u64]) -> tierbase::Result<()> {
        self.log.push(Batch::Write(pages.to_vec()));
        Ok(())
    }
    fn elapsed_ns(&self) -> u64 {
        0
    }
    fn medium(&self) -> String {
        "recorder".into()
    }
}

/// What a checked run saw, per access.
#[derive(Debug)]
struct Run {
    hits: Vec<bool>,
    evicted: Vec<BTreeSet<u64>>,
    stats: CacheStats,
}

fn distinct(v: &[u64]) -> bool {
    v.iter().collect::<HashSet<_>>().len() == v.len()
}

/// Replays `trace` through a checked cache; every invariant is asserted after every access.
fn run_checked(
    policy: &str,
    capacity: usize,
    config: AceConfig,
    universe: u64,
    trace: &[(u64, bool)],
) -> Result<Run, TestCaseError> {
    let mut cache = PageCache::new(
        policy::by_name(policy, capacity).unwrap(),
        capacity,
        config,
        Recorder::default(),
        universe,
    )
    .unwrap();
    let mut resident: BTreeSet<u64> = BTreeSet::new();
    let mut dirty: BTreeSet<u64> = BTreeSet::new();
    let mut unused_prefetches: HashSet<u64> = HashSet::new();
    let mut successor: HashMap<u64, u64> = HashMap::new();
    let mut last: Option<u64> = None;
    let mut want = CacheStats::default();
    let mut run = Run {
        hits: Vec::new(),
        evicted: Vec::new(),
        stats: CacheStats::default(),
    };
    for (i, &(page, write)) in trace.iter().enumerate() {
        let before = residents(cache.policy(), universe);
        prop_assert_eq!(&before, &resident, "access {}: resident set", i);
        let order: Vec<u64> = cache.policy().eviction_order().collect();
        let dirty_before = dirty.clone();
        let mark = cache.device().log.len();

        let hit = cache.access(page, write).unwrap();

        let events = cache.device().log[mark..].to_vec();
        let after = residents(cache.policy(), universe);
        want.accesses += 1;
        prop_assert_eq!(hit, before.contains(&page), "access {} of {}: hit", i, page);
        // Evicted: gone now, or read again in this access's batch (a prefetch may bring back a
        // page evicted to make room for it). A resident page read again without an eviction
        // would show up in the eviction counter, which is checked.
        let mut evicted: BTreeSet<u64> = before.difference(&after).copied().collect();
        if let Some(Batch::Read(r)) = events.last() {
            evicted.extend(r.iter().filter(|x| before.contains(x)));
        }
        if hit {
            want.hits += 1;
            if unused_prefetches.remove(&page) {
                want.prefetch_hits += 1;
            }
            prop_assert!(
                events.is_empty(),
                "access {}: I/O on a hit: {:?}",
                i,
                events
            );
            prop_assert_eq!(&after, &before);
        } else {
            want.misses += 1;
            let (batch, reads) = match events.as_slice() {
                [Batch::Read(r)] => (None, r.clone()),
                [Batch::Write(w), Batch::Read(r)] => (Some(w.clone()), r.clone()),
                other => {
                    return Err(TestCaseError::fail(format!(
                        "access {i}: a miss must issue [write], read; got {other:?}"
                    )));
                }
            };
            let full = before.len() >= capacity;
            // The write-back batch: exactly the first n_w dirty pages of the look-ahead.
            if let Some(w) = &batch {
                prop_assert!(full, "access {}: write-back into a cache with room", i);
                prop_assert!(!w.is_empty() && w.len() <= config.n_w, "batch {:?}", w);
                prop_assert!(distinct(w), "batch {:?} repeats a page", w);
                for x in w {
                    prop_assert!(dirty.contains(x), "access {}: wrote clean page {}", i, x);
                }
                let expect: Vec<u64> = order
                    .iter()
                    .copied()
                    .filter(|x| dirty.contains(x))
                    .take(config.n_w)
                    .collect();
                prop_assert_eq!(w, &expect, "access {}: batch vs look-ahead {:?}", i, order);
                for x in w {
                    dirty.remove(x);
                }
                want.write_batches += 1;
                want.pages_written += w.len() as u64;
                if want.write_batch_sizes.len() <= w.len() {
                    want.write_batch_sizes.resize(w.len() + 1, 0);
                }
                want.write_batch_sizes[w.len()] += 1;
            }
            for x in &evicted {
                prop_assert!(
                    !dirty.contains(x),
                    "access {}: dirty page {} evicted without being written",
                    i,
                    x
                );
                unused_prefetches.remove(x);
            }
            want.evictions += evicted.len() as u64;
            if !full {
                prop_assert!(evicted.is_empty() && batch.is_none(), "access {}", i);
                prop_assert_eq!(reads.len(), 1, "access {}: prefetch without eviction", i);
            } else {
                let v = order[0];
                let v_dirty = dirty_before.contains(&v);
                prop_assert!(evicted.contains(&v), "access {}: victim {} stays", i, v);
                prop_assert_eq!(batch.is_some(), v_dirty, "access {}: victim {}", i, v);
                if let Some(w) = &batch {
                    prop_assert_eq!(w[0], v, "access {}: batch must start with the victim", i);
                }
                if config.prefetcher == Prefetcher::None || !v_dirty {
                    prop_assert_eq!(evicted.len(), 1, "access {}: evicted {:?}", i, evicted);
                    prop_assert_eq!(reads.len(), 1, "access {}: reads {:?}", i, reads);
                } else {
                    prop_assert_eq!(evicted.len(), config.n_e, "access {}", i);
                    prop_assert!(reads.len() <= config.n_e, "access {}: {:?}", i, reads);
                }
            }
            // Reads: the missed page first, then prefetches not resident after the eviction.
            prop_assert_eq!(reads[0], page);
            prop_assert!(distinct(&reads), "reads {:?}", reads);
            let kept: BTreeSet<u64> = before.difference(&evicted).copied().collect();
            for x in &reads {
                prop_assert!(*x < universe && !kept.contains(x), "read {} {:?}", x, reads);
            }
            let prefetched = &reads[1..];
            match config.prefetcher {
                Prefetcher::None => prop_assert!(prefetched.is_empty()),
                Prefetcher::Sequential => {
                    let expect: Vec<u64> = (page + 1..universe)
                        .filter(|x| !kept.contains(x))
                        .take(prefetched.len())
                        .collect();
                    prop_assert_eq!(prefetched, &expect[..], "sequential prefetch");
                    // Short only when the pages ran out.
                    if full && dirty_before.contains(&order[0]) {
                        let room = (page + 1..universe).filter(|x| !kept.contains(x)).count();
                        prop_assert_eq!(prefetched.len(), room.min(config.n_e - 1));
                    }
                }
                Prefetcher::History => {
                    // Every prefetched page lies on the successor chain from the missed page
                    // (the chain includes this access's own update).
                    let mut chain = HashSet::new();
                    let mut p = page;
                    let mut succ = successor.clone();
                    if let Some(prev) = last.filter(|&l| l != page) {
                        succ.insert(prev, page);
                    }
                    while let Some(&n) = succ.get(&p) {
                        if !chain.insert(n) {
                            break;
                        }
                        p = n;
                    }
                    for x in prefetched {
                        prop_assert!(chain.contains(x), "prefetch {} off the chain", x);
                    }
                }
            }
            let mut expect_after = kept.clone();
            expect_after.extend(reads.iter().copied());
            prop_assert_eq!(&after, &expect_after, "access {}: resident set", i);
            unused_prefetches.extend(prefetched.iter().copied());
            want.read_batches += 1;
            want.pages_read += reads.len() as u64;
            want.prefetched += prefetched.len() as u64;
        }
        if let Some(prev) = last.replace(page)
            && prev != page
        {
            successor.insert(prev, page);
        }
        if write {
            dirty.insert(page);
        }
        resident = after;
        prop_assert!(resident.len() <= capacity, "over capacity: {:?}", resident);
        prop_assert_eq!(cache.policy().len(), resident.len());
        prop_assert!(dirty.is_subset(&resident));
        for x in 0..universe {
            prop_assert_eq!(
                cache.policy().is_dirty(x),
                dirty.contains(&x),
                "dirty bit of {}",
                x
            );
        }
        prop_assert_eq!(cache.stats(), &want, "access {}: counters", i);
        run.hits.push(hit);
        run.evicted.push(evicted);
    }
    run.stats = cache.stats().clone();
    Ok(run)
}

/// A trace over `0..universe`, skewed towards a hot prefix, with a share of writes.
fn trace() -> impl Strategy<Value = (u64, Vec<(u64, bool)>)> {
    (2u64..=40, 1u64..=10).prop_flat_map(|(universe, hot)| {
        let hot = hot.min(universe);
        let page = prop_oneof![2 => 0..hot, 1 => 0..universe];
        let write = prop::bool::weighted(0.5);
        (Just(universe), prop::collection::vec((page, write), 1..300))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every policy: ACE without prefetch changes write-backs only, never what is evicted
    /// (CFLRU and LRU-WSR order a page ACE wrote back as still dirty).
    #[test]
    fn ace_without_prefetch_keeps_the_baseline_misses(
        policy in prop::sample::select(&POLICIES[..]),
        capacity in 1usize..=16,
        n_w in 2usize..16,
        (universe, trace) in trace(),
    ) {
        let base = run_checked(policy, capacity, AceConfig::BASELINE, universe, &trace)?;
        let ace = AceConfig { n_w, n_e: 1, prefetcher: Prefetcher::None };
        let ace = run_checked(policy, capacity, ace, universe, &trace)?;
        prop_assert_eq!(&ace.hits, &base.hits);
        prop_assert_eq!(&ace.evicted, &base.evicted);
        prop_assert_eq!(ace.stats.misses, base.stats.misses);
        prop_assert_eq!(ace.stats.evictions, base.stats.evictions);
        // A victim dirty under ACE is dirty under the baseline (ACE only cleans earlier).
        prop_assert!(ace.stats.write_batches <= base.stats.write_batches);
    }

    /// All four policies, ACE without prefetch: the checked invariants of `run_checked`.
    #[test]
    fn ace_write_back_invariants(
        policy in prop::sample::select(&POLICIES[..]),
        capacity in 1usize..=16,
        n_w in 1usize..16,
        (universe, trace) in trace(),
    ) {
        let config = AceConfig { n_w, n_e: 1, prefetcher: Prefetcher::None };
        run_checked(policy, capacity, config, universe, &trace)?;
    }

    /// All four policies, ACE with a prefetcher: also at most n_e reads per batch and never
    /// more pages than the capacity.
    #[test]
    fn ace_prefetch_invariants(
        policy in prop::sample::select(&POLICIES[..]),
        prefetcher in prop::sample::select(vec![Prefetcher::Sequential, Prefetcher::History]),
        (n_w, n_e, capacity) in (1usize..16)
            .prop_flat_map(|n_w| (Just(n_w), 1..=n_w))
            .prop_flat_map(|(n_w, n_e)| (Just(n_w), Just(n_e), n_e..=16)),
        (universe, trace) in trace(),
    ) {
        let config = AceConfig { n_w, n_e, prefetcher };
        run_checked(policy, capacity, config, universe, &trace)?;
    }
}

// ------------------------------------------------------------------------------------------
// 5: virtual time.
// ------------------------------------------------------------------------------------------

/// SplitMix64, for reproducible traces without a seeded RNG dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `hot_share` of the accesses go to the first `hot_pages` pages; `writes` per mille are
/// writes.
fn skewed_trace(
    seed: u64,
    len: usize,
    pages: u64,
    hot_pages: u64,
    hot_share_pm: u64,
    writes_pm: u64,
) -> Vec<(u64, bool)> {
    let mut rng = SplitMix(seed);
    (0..len)
        .map(|_| {
            let page = if rng.below(1000) < hot_share_pm {
                rng.below(hot_pages)
            } else {
                hot_pages + rng.below(pages - hot_pages)
            };
            (page, rng.below(1000) < writes_pm)
        })
        .collect()
}

fn virtual_run(
    policy: &str,
    capacity: usize,
    config: AceConfig,
    trace: &[(u64, bool)],
    pages: u64,
) -> (u64, CacheStats) {
    let profile = Catalogue::builtin()
        .require("pcie-ssd-p4510")
        .unwrap()
        .clone();
    let device = VirtualPages::new(&profile, 4096).unwrap();
    let mut cache = PageCache::new(
        policy::by_name(policy, capacity).unwrap(),
        capacity,
        config,
        device,
        pages,
    )
    .unwrap();
    for &(p, w) in trace {
        cache.access(p, w).unwrap();
    }
    (cache.device().elapsed_ns(), cache.stats().clone())
}

#[test]
fn virtual_time_is_deterministic_and_ace_beats_the_baseline_on_writes() {
    let profile = Catalogue::builtin()
        .require("pcie-ssd-p4510")
        .unwrap()
        .clone();
    let (pages, capacity) = (2_000u64, 200usize);
    // Write-heavy (80 % writes), 90 % of the accesses on 10 % of the pages.
    let trace = skewed_trace(0x00ac_e0ac_e0ac_e0ac, 30_000, pages, pages / 10, 900, 800);
    let ace = AceConfig::for_device(&profile, Prefetcher::None);
    assert_eq!(ace.n_w, profile.k_w as usize);
    assert!(ace.n_w > 1, "the profile must allow concurrent writes");
    for policy in POLICIES {
        let (base_ns, base_stats) =
            virtual_run(policy, capacity, AceConfig::BASELINE, &trace, pages);
        let (again_ns, again_stats) =
            virtual_run(policy, capacity, AceConfig::BASELINE, &trace, pages);
        assert_eq!(
            (base_ns, &base_stats),
            (again_ns, &again_stats),
            "{policy}: baseline"
        );
        let (ace_ns, ace_stats) = virtual_run(policy, capacity, ace, &trace, pages);
        let (again_ns, again_stats) = virtual_run(policy, capacity, ace, &trace, pages);
        assert_eq!(
            (ace_ns, &ace_stats),
            (again_ns, &again_stats),
            "{policy}: ACE"
        );
        assert!(
            base_ns > 0 && base_stats.pages_written > 0,
            "{policy}: {base_stats:?}"
        );
        eprintln!(
            "{policy:8} baseline {base_ns:>12} ns ({} misses, {} write batches)   \
             ACE {ace_ns:>12} ns ({} misses, {} write batches)   {:.1} % less",
            base_stats.misses,
            base_stats.write_batches,
            ace_stats.misses,
            ace_stats.write_batches,
            100.0 * (1.0 - ace_ns as f64 / base_ns as f64)
        );
        assert!(
            ace_ns < base_ns,
            "{policy}: ACE {ace_ns} ns is not below the baseline's {base_ns} ns"
        );
        // The same trace gives the same runtime on a fresh device with prefetch, too.
        let pf = AceConfig::for_device(&profile, Prefetcher::Sequential);
        assert_eq!(
            virtual_run(policy, capacity, pf, &trace, pages),
            virtual_run(policy, capacity, pf, &trace, pages),
            "{policy}: ACE with prefetch"
        );
    }
}
