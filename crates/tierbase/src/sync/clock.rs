//! The sequence clock: one store-wide counter that orders versions of records, so that
//! recovery can tell the newest copy of a key (newest wins).

use std::sync::atomic::{AtomicU64, Ordering};

/// A monotonic 64-bit sequence clock. 0 is never handed out, so it can mean "none".
#[derive(Debug, Default)]
pub struct SequenceClock(AtomicU64);

impl SequenceClock {
    /// A clock whose next number is 1.
    pub const fn new() -> Self {
        SequenceClock(AtomicU64::new(0))
    }

    /// The next sequence number.
    #[inline]
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Moves the clock past `seen` (recovery: past the highest number found on media).
    pub fn observe(&self, seen: u64) {
        self.0.fetch_max(seen, Ordering::AcqRel);
    }

    /// The last number handed out (or observed).
    pub fn current(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_increase_and_skip_observed() {
        let c = SequenceClock::new();
        assert_eq!(c.next(), 1);
        c.observe(10);
        c.observe(3);
        assert_eq!(c.next(), 11);
        assert_eq!(c.current(), 11);
    }
}
