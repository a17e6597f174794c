//! YCSB's insert counters: [`CounterGenerator`] hands out consecutive key numbers (load phase);
//! [`AcknowledgedCounter`] also tracks which inserts have completed, so that readers only pick
//! keys that exist (YCSB `AcknowledgedCounterGenerator`).
//!
//! Owns: the two counters. Must not touch: key choice or anything outside `generator`.
//!
//! Both are shared by all worker threads of a phase.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

/// Consecutive numbers from a start value, shared between threads.
#[derive(Debug)]
pub struct CounterGenerator {
    next: AtomicU64,
}

impl CounterGenerator {
    /// A counter whose first value is `start`.
    pub fn new(start: u64) -> Self {
        CounterGenerator {
            next: AtomicU64::new(start),
        }
    }

    /// The next number.
    #[inline]
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The next `n` consecutive numbers at once (one shared update instead of `n`).
    #[inline]
    pub fn next_values(&self, n: u64) -> std::ops::Range<u64> {
        let first = self.next.fetch_add(n, Ordering::Relaxed);
        first..first.saturating_add(n)
    }
}

/// Inserts that may be outstanding (handed out, not yet acknowledged past the limit) at once.
const WINDOW: u64 = 1 << 20;

/// A counter whose [`last_value`](Self::last_value) is the highest number `v` such that every
/// number from the start up to `v` has been acknowledged. As YCSB's, it marks acknowledgements
/// in a sliding window and advances the limit under a lock that nobody waits for, so the
/// writers it counts are not serialised by it (the insert workloads' harness cost).
#[derive(Debug)]
pub struct AcknowledgedCounter {
    /// Apart from `limit`, which every reader loads: taking an insert number does not evict it.
    next: CachePadded<AtomicU64>,
    limit: CachePadded<AtomicU64>,
    window: Box<[AtomicBool]>,
    advancing: Mutex<()>,
}

impl AcknowledgedCounter {
    /// A counter whose first value is `start` (≥ 1); `last_value` starts at `start - 1`, the
    /// newest record of the load phase.
    pub fn new(start: u64) -> Self {
        let start = start.max(1);
        AcknowledgedCounter {
            next: CachePadded::new(AtomicU64::new(start)),
            limit: CachePadded::new(AtomicU64::new(start - 1)),
            window: (0..WINDOW).map(|_| AtomicBool::new(false)).collect(),
            advancing: Mutex::new(()),
        }
    }

    /// The next number to insert.
    #[inline]
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// The next `n` consecutive numbers to insert (for a caller that does not acknowledge
    /// them one by one: an insert-only run, where nothing reads the newest key).
    pub fn next_values(&self, n: u64) -> std::ops::Range<u64> {
        let first = self.next.fetch_add(n, Ordering::Relaxed);
        first..first.saturating_add(n)
    }

    fn mark(&self, value: u64) -> &AtomicBool {
        &self.window[(value % WINDOW) as usize]
    }

    /// Marks `value` (from [`next_value`](Self::next_value)) as inserted.
    pub fn acknowledge(&self, value: u64) {
        if value <= self.limit.load(Ordering::Acquire) {
            return; // acknowledged twice: ignore
        }
        // A value a whole window ahead of the limit would share its mark with an outstanding
        // one: wait (helping) until the limit moves. Only a stalled inserter causes this.
        while value - self.limit.load(Ordering::Acquire) > WINDOW {
            self.advance();
            std::thread::yield_now();
        }
        self.mark(value).store(true, Ordering::SeqCst);
        self.advance();
    }

    /// Moves the limit over every acknowledged value after it. Whoever holds the lock
    /// advances; the others leave. After unlocking, the holder looks once more, so that a mark
    /// set while it held the lock (whose owner found the lock taken) is not left behind.
    fn advance(&self) {
        loop {
            let Some(_g) = self.advancing.try_lock() else {
                return;
            };
            let mut limit = self.limit.load(Ordering::Relaxed);
            while self.mark(limit + 1).swap(false, Ordering::SeqCst) {
                limit += 1;
            }
            self.limit.store(limit, Ordering::Release);
            drop(_g);
            if !self.mark(limit + 1).load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// The newest number below which everything is acknowledged.
    #[inline]
    pub fn last_value(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledged_counter_waits_for_gaps() {
        let c = AcknowledgedCounter::new(10);
        assert_eq!(c.last_value(), 9);
        let a = c.next_value();
        let b = c.next_value();
        assert_eq!((a, b), (10, 11));
        c.acknowledge(b);
        assert_eq!(c.last_value(), 9, "11 done but 10 still pending");
        c.acknowledge(a);
        assert_eq!(c.last_value(), 11);
    }

    #[test]
    fn acknowledged_counter_reaches_every_value_with_concurrent_inserters() {
        let c = AcknowledgedCounter::new(1);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50_000 {
                        let v = c.next_value();
                        c.acknowledge(v);
                    }
                });
            }
        });
        assert_eq!(c.last_value(), 200_000);
    }

    #[test]
    fn counter_counts() {
        let c = CounterGenerator::new(5);
        assert_eq!(c.next_value(), 5);
        assert_eq!(c.next_value(), 6);
        assert_eq!(c.next_values(3), 7..10);
        assert_eq!(c.next_value(), 10);
    }
}
