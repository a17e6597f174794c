//! Version latches in the LeanStore style: one `u32` whose low bit says "held". Writers take it
//! exclusively (the version becomes odd, and even again, one higher, on release); optimistic
//! readers remember an even version, copy, and validate that the version did not move.
//!
//! Why hand-written: a reader must be able to validate without writing to the latch's cache
//! line (no reader counts), which `parking_lot`'s locks do not offer.

#[cfg(feature = "shuttle")]
use shuttle::sync::atomic::{AtomicU32, Ordering, fence};
#[cfg(not(feature = "shuttle"))]
use std::sync::atomic::{AtomicU32, Ordering, fence};

/// Spins politely: a pause hint, and a yield after a while so that a preempted holder on an
/// oversubscribed machine can run.
#[inline]
pub fn backoff(round: &mut u32) {
    *round += 1;
    #[cfg(feature = "shuttle")]
    shuttle::thread::yield_now();
    #[cfg(not(feature = "shuttle"))]
    if *round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Takes a lock with `try_take`, trying for up to `spin` before it blocks in `take`; whether it
/// blocked. For a lock held for a few µs at a time: a parked waiter's futex sleep and wake-up
/// cost more than that (two B+-tree writers on two cores: updates 0.69 → 0.88 M/s, medians,
/// docs/BENCHMARKS.md Figure 19), and the time bound (not a count of pause hints, whose length
/// differs 10× between CPUs) caps what a waiter burns when the holder was preempted or is in
/// I/O.
#[inline]
pub fn spin_then_park<G>(
    mut try_take: impl FnMut() -> Option<G>,
    take: impl FnOnce() -> G,
    spin: std::time::Duration,
) -> (G, bool) {
    #[cfg(not(feature = "shuttle"))]
    {
        // The uncontended case first, without reading the clock (callers take such locks on
        // every write).
        if let Some(guard) = try_take() {
            return (guard, false);
        }
        let start = std::time::Instant::now();
        loop {
            for _ in 0..32 {
                if let Some(guard) = try_take() {
                    return (guard, false);
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= spin {
                break;
            }
        }
    }
    #[cfg(feature = "shuttle")]
    let _ = (spin, &mut try_take);
    (take(), true)
}

/// A version latch. Even = free, odd = held exclusively.
#[derive(Debug, Default)]
pub struct VersionLatch(AtomicU32);

impl VersionLatch {
    /// A free latch at version 0.
    pub fn new() -> Self {
        VersionLatch(AtomicU32::new(0))
    }

    /// The current version for an optimistic read, or `None` while a writer holds the latch.
    #[inline]
    pub fn optimistic(&self) -> Option<u32> {
        let v = self.0.load(Ordering::Acquire);
        (v & 1 == 0).then_some(v)
    }

    /// Whether nothing changed since [`VersionLatch::optimistic`] returned `version`: call after
    /// the reads it protects (an acquire fence orders them before the check).
    #[inline]
    pub fn validate(&self, version: u32) -> bool {
        fence(Ordering::Acquire);
        self.0.load(Ordering::Relaxed) == version
    }

    /// Takes the latch exclusively, spinning while another holder has it.
    #[inline]
    pub fn lock(&self) -> LatchGuard<'_> {
        let mut round = 0;
        loop {
            if let Some(g) = self.try_lock() {
                return g;
            }
            backoff(&mut round);
        }
    }

    /// Takes the latch if it is free.
    #[inline]
    pub fn try_lock(&self) -> Option<LatchGuard<'_>> {
        let v = self.0.load(Ordering::Relaxed);
        if v & 1 == 0
            && self
                .0
                .compare_exchange_weak(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // Order the odd version before any byte written under the latch.
            fence(Ordering::Release);
            return Some(LatchGuard { latch: self });
        }
        None
    }

    /// Moves the version on by two without taking the latch (parity kept, so it works whether
    /// or not the caller holds it): every optimistic reader that started before fails its
    /// validation.
    #[inline]
    pub fn invalidate_readers(&self) {
        self.0.fetch_add(2, Ordering::AcqRel);
    }

    fn release(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// A held [`VersionLatch`]; released on drop.
#[derive(Debug)]
#[must_use = "the latch is released when the guard is dropped"]
pub struct LatchGuard<'a> {
    latch: &'a VersionLatch,
}

impl LatchGuard<'_> {
    /// The latch's value while held: odd, and different from every other holding of this
    /// latch in the last 2^31 holdings — a clock of the latch's writers (see
    /// [`KeyLocks::seed`]).
    #[inline]
    pub fn version(&self) -> u32 {
        self.latch.0.load(Ordering::Relaxed)
    }
}

impl Drop for LatchGuard<'_> {
    fn drop(&mut self) {
        self.latch.release();
    }
}

/// Up to [`LatchRun::MAX`] held latches (e.g. the pages a record spans), taken in the caller's
/// order, without allocation; released on drop.
#[derive(Debug, Default)]
#[must_use = "the latches are released when the run is dropped"]
pub struct LatchRun<'a> {
    held: [Option<&'a VersionLatch>; LatchRun::MAX],
    len: usize,
}

impl<'a> LatchRun<'a> {
    /// Most latches one run holds.
    pub const MAX: usize = 8;

    /// An empty run.
    pub fn new() -> Self {
        LatchRun::default()
    }

    /// Takes `latch` and keeps it in the run. Callers take latches in one global order (e.g.
    /// ascending page number) so that runs cannot deadlock.
    ///
    /// # Panics
    /// Never: a full run returns `false` without taking the latch.
    pub fn push(&mut self, latch: &'a VersionLatch) -> bool {
        let Some(slot) = self.held.get_mut(self.len) else {
            return false;
        };
        std::mem::forget(latch.lock());
        *slot = Some(latch);
        self.len += 1;
        true
    }

    /// Latches held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the run holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for LatchRun<'_> {
    fn drop(&mut self) {
        for l in self.held.iter().take(self.len).flatten() {
            l.release();
        }
    }
}

/// A hybrid latch (LeanStore's): a reader-writer lock whose exclusive holdings also move a
/// [`VersionLatch`], so that a page can be fixed shared, exclusive, or read optimistically —
/// without writing to the latch's cache line — and validated afterwards. Every exclusive
/// holding goes through [`HybridWriteGuard`], which makes the version odd while it is held
/// and even again, one step higher, before the lock is let go; shared holders never move it
/// (nothing changes under them).
#[derive(Debug)]
pub struct HybridLatch<T> {
    version: VersionLatch,
    lock: parking_lot::RwLock<T>,
}

/// A [`HybridLatch`] held exclusively: optimistic readers of it fail their validation.
#[derive(Debug)]
#[must_use = "the latch is released when the guard is dropped"]
pub struct HybridWriteGuard<'a, T> {
    // Dropped first (fields drop in order): the version is even again before the lock is
    // free, so that the next exclusive holder makes it odd from an even value.
    version: LatchGuard<'a>,
    guard: parking_lot::RwLockWriteGuard<'a, T>,
}

impl<T> HybridLatch<T> {
    /// A free latch around `value`.
    pub fn new(value: T) -> Self {
        HybridLatch {
            version: VersionLatch::new(),
            lock: parking_lot::RwLock::new(value),
        }
    }

    fn held<'a>(&'a self, guard: parking_lot::RwLockWriteGuard<'a, T>) -> HybridWriteGuard<'a, T> {
        // The lock is exclusive, so nobody else holds the version: this never waits.
        HybridWriteGuard {
            version: self.version.lock(),
            guard,
        }
    }

    /// Takes the latch shared, blocking.
    #[inline]
    pub fn read(&self) -> parking_lot::RwLockReadGuard<'_, T> {
        self.lock.read()
    }

    /// Takes the latch shared if it is free of writers.
    #[inline]
    pub fn try_read(&self) -> Option<parking_lot::RwLockReadGuard<'_, T>> {
        self.lock.try_read()
    }

    /// Takes the latch shared, waiting at most `timeout`.
    #[inline]
    pub fn try_read_for(
        &self,
        timeout: std::time::Duration,
    ) -> Option<parking_lot::RwLockReadGuard<'_, T>> {
        self.lock.try_read_for(timeout)
    }

    /// Takes the latch exclusively, blocking.
    #[inline]
    pub fn write(&self) -> HybridWriteGuard<'_, T> {
        self.held(self.lock.write())
    }

    /// Takes the latch exclusively if it is free.
    #[inline]
    pub fn try_write(&self) -> Option<HybridWriteGuard<'_, T>> {
        self.lock.try_write().map(|g| self.held(g))
    }

    /// Takes the latch exclusively, waiting at most `timeout`.
    #[inline]
    pub fn try_write_for(&self, timeout: std::time::Duration) -> Option<HybridWriteGuard<'_, T>> {
        self.lock.try_write_for(timeout).map(|g| self.held(g))
    }

    /// The version for an optimistic read, or `None` while the latch is held exclusively.
    #[inline]
    pub fn optimistic(&self) -> Option<u32> {
        self.version.optimistic()
    }

    /// Whether the latch was not held exclusively since [`HybridLatch::optimistic`] returned
    /// `version` (call after the reads it protects).
    #[inline]
    pub fn validate(&self, version: u32) -> bool {
        self.version.validate(version)
    }
}

impl<'a, T> HybridWriteGuard<'a, T> {
    /// Whether this holding is the first exclusive one since [`HybridLatch::optimistic`] (or
    /// a shared holding's view of it) returned `version`: nothing changed under the latch in
    /// between.
    #[inline]
    pub fn follows(&self, version: u32) -> bool {
        self.version.version() == version.wrapping_add(1)
    }

    /// Keeps the latch shared: optimistic readers may start again.
    pub fn downgrade(self) -> parking_lot::RwLockReadGuard<'a, T> {
        let HybridWriteGuard { version, guard } = self;
        drop(version);
        parking_lot::RwLockWriteGuard::downgrade(guard)
    }
}

impl<T> std::ops::Deref for HybridWriteGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for HybridWriteGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Striped exclusive latches that serialise writers of the same key: every write of a key
/// (put, update, delete, a compaction move) holds its stripe from the moment it takes a
/// sequence number until the old version is invalidated, so the order of sequence numbers is
/// the order of the writes, and return values ("was new", "existed") agree with the state.
/// Readers never take them.
#[derive(Debug)]
pub struct KeyLocks {
    stripes: Box<[VersionLatch]>,
    mask: u64,
}

impl KeyLocks {
    /// `stripes` latches (rounded up to a power of two).
    pub fn new(stripes: usize) -> Self {
        let n = stripes.max(1).next_power_of_two();
        KeyLocks {
            stripes: (0..n).map(|_| VersionLatch::new()).collect(),
            mask: n as u64 - 1,
        }
    }

    #[inline]
    fn stripe(&self, key_hash: u64) -> &VersionLatch {
        // Fold the high bits in: hashes of short keys may vary only there.
        let i = ((key_hash ^ (key_hash >> 29) ^ (key_hash >> 47)) & self.mask) as usize;
        &self.stripes[i]
    }

    /// Takes the stripe of `key_hash`.
    #[inline]
    pub fn lock(&self, key_hash: u64) -> LatchGuard<'_> {
        self.stripe(key_hash).lock()
    }

    /// Takes the stripe of `key_hash` if it is free.
    #[inline]
    pub fn try_lock(&self, key_hash: u64) -> Option<LatchGuard<'_>> {
        self.stripe(key_hash).try_lock()
    }

    /// DRAM held.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.stripes)
    }

    /// Moves every stripe's version to at least `at_least` (rounded up to even: free), so
    /// that versions handed out from now on ([`LatchGuard::version`]) follow those seen before
    /// (a store's recovery passes the largest version it found on media). Call while no stripe
    /// is held.
    pub fn seed(&self, at_least: u32) {
        let even = at_least.saturating_add(1) & !1;
        for s in self.stripes.iter() {
            s.0.fetch_max(even, Ordering::AcqRel);
        }
    }
}

#[cfg(all(test, not(feature = "shuttle")))]
mod tests {
    use super::*;

    /// Optimistic readers of a hybrid latch fail validation across an exclusive holding
    /// (also one downgraded to shared), and pass across shared holdings.
    #[test]
    fn hybrid_latch_versions_move_with_exclusive_holdings_only() {
        let l = HybridLatch::new(5u32);
        let v = l.optimistic().unwrap();
        drop(l.read());
        drop(l.try_read_for(std::time::Duration::ZERO).unwrap());
        assert!(l.validate(v), "shared holdings move nothing");
        let mut w = l.write();
        assert!(l.optimistic().is_none(), "held exclusively");
        assert!(l.try_read().is_none());
        *w = 6;
        let r = w.downgrade();
        assert_eq!(*r, 6);
        let v2 = l.optimistic().expect("free of writers once downgraded");
        assert!(!l.validate(v), "an exclusive holding came between");
        drop(r);
        drop(l.try_write_for(std::time::Duration::ZERO).unwrap());
        assert!(!l.validate(v2));
        let v3 = l.optimistic().unwrap();
        drop(l.try_write().unwrap());
        assert!(!l.validate(v3));
        assert_eq!(v3 % 2, 0);
    }

    /// Uncontended, the lock is taken without parking; contended by another thread (no time
    /// to spin), every increment made under it still counts exactly once.
    #[test]
    fn spin_then_park_excludes() {
        let m = parking_lot::RwLock::new(0u64);
        let take = |spin| spin_then_park(|| m.try_write(), || m.write(), spin);
        let (g, parked) = take(std::time::Duration::from_micros(50));
        assert!(!parked);
        drop(g);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let (mut g, _) = take(std::time::Duration::ZERO);
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*m.read(), 40_000);
    }

    #[test]
    fn optimistic_readers_see_writers() {
        let l = VersionLatch::new();
        let v = l.optimistic().unwrap();
        assert!(l.validate(v));
        {
            let _g = l.lock();
            assert!(l.optimistic().is_none());
            assert!(l.try_lock().is_none());
        }
        assert!(!l.validate(v));
        let v2 = l.optimistic().unwrap();
        l.invalidate_readers();
        assert!(!l.validate(v2));
        assert!(l.optimistic().is_some());
    }

    #[test]
    fn runs_release_everything() {
        let ls: Vec<VersionLatch> = (0..9).map(|_| VersionLatch::new()).collect();
        {
            let mut run = LatchRun::new();
            for l in &ls[..8] {
                assert!(run.push(l));
            }
            assert!(!run.push(&ls[8]));
            assert_eq!(run.len(), 8);
            assert!(ls.iter().take(8).all(|l| l.optimistic().is_none()));
        }
        assert!(ls.iter().all(|l| l.optimistic().is_some()));
    }

    #[test]
    fn held_versions_are_odd_increase_and_follow_the_seed() {
        let k = KeyLocks::new(4);
        let a = k.lock(1).version();
        let b = k.lock(1).version();
        assert!(a % 2 == 1 && b % 2 == 1 && b > a);
        k.seed(1_000);
        let c = k.lock(1).version();
        assert!(c > 1_000 && c % 2 == 1, "{c}");
        assert!(k.lock(2).version() > 1_000);
        // Seeding never moves a stripe back.
        k.seed(10);
        assert!(k.lock(1).version() > c);
    }

    #[test]
    fn key_locks_exclude_the_same_key() {
        let k = KeyLocks::new(100);
        assert_eq!(k.stripes.len(), 128);
        let g = k.lock(42);
        assert!(k.try_lock(42).is_none());
        drop(g);
        assert!(k.try_lock(42).is_some());
    }

    #[test]
    fn latch_counts_stay_exact_under_contention() {
        let l = VersionLatch::new();
        let counter = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        let _g = l.lock();
                        // A non-atomic read-modify-write under the latch.
                        let v = counter.load(Ordering::Relaxed);
                        counter.store(v + 1, Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(counter.load(Ordering::Relaxed), 40_000);
        assert_eq!(l.optimistic(), Some(80_000));
    }
}
