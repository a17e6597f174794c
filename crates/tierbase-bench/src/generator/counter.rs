//! YCSB's insert counters: [`CounterGenerator`] hands out consecutive key numbers (load phase);
//! [`AcknowledgedCounter`] also tracks which inserts have completed, so that readers only pick
//! keys that exist (YCSB `AcknowledgedCounterGenerator`).
//!
//! Owns: the two counters. Must not touch: key choice or anything outside `generator`.
//!
//! Both are shared by all worker threads of a phase.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// A counter whose [`last_value`](Self::last_value) is the highest number `v` such that every
/// number from the start up to `v` has been acknowledged.
#[derive(Debug)]
pub struct AcknowledgedCounter {
    next: AtomicU64,
    limit: AtomicU64,
    pending: Mutex<BinaryHeap<Reverse<u64>>>,
}

impl AcknowledgedCounter {
    /// A counter whose first value is `start` (≥ 1); `last_value` starts at `start - 1`, the
    /// newest record of the load phase.
    pub fn new(start: u64) -> Self {
        let start = start.max(1);
        AcknowledgedCounter {
            next: AtomicU64::new(start),
            limit: AtomicU64::new(start - 1),
            pending: Mutex::new(BinaryHeap::new()),
        }
    }

    /// The next number to insert.
    #[inline]
    pub fn next_value(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Marks `value` (from [`next_value`](Self::next_value)) as inserted.
    pub fn acknowledge(&self, value: u64) {
        let mut pending = self.pending.lock();
        pending.push(Reverse(value));
        let mut limit = self.limit.load(Ordering::Relaxed);
        while let Some(&Reverse(v)) = pending.peek() {
            if v == limit + 1 {
                limit = v;
                pending.pop();
            } else if v <= limit {
                pending.pop(); // acknowledged twice: ignore
            } else {
                break;
            }
        }
        self.limit.store(limit, Ordering::Release);
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
    fn counter_counts() {
        let c = CounterGenerator::new(5);
        assert_eq!(c.next_value(), 5);
        assert_eq!(c.next_value(), 6);
    }
}
