//! Always-on device counters.
//!
//! Owns: cheap, thread-friendly event counters and their snapshots. Must not touch: devices
//! themselves (devices own a [`DeviceCounters`] and bump it).
//!
//! Counters are sharded over cache-padded atomics so that threads on different cores do not
//! bounce one cache line on every operation; a snapshot sums the shards.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

const SHARDS: usize = 16;

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

/// A monotonically increasing event counter, sharded per thread.
#[derive(Debug, Default)]
pub struct Counter {
    shards: [CachePadded<AtomicU64>; SHARDS],
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        if let Some(shard) = self.shards.get(shard_index()) {
            shard.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Adds one.
    #[inline]
    pub fn incr(&self) {
        self.add(1);
    }

    /// Current total (a racy but monotone read).
    pub fn get(&self) -> u64 {
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

/// Counters every device keeps.
#[derive(Debug, Default)]
pub struct DeviceCounters {
    /// Read operations.
    pub reads: Counter,
    /// Bytes read.
    pub bytes_read: Counter,
    /// Write operations.
    pub writes: Counter,
    /// Bytes written.
    pub bytes_written: Counter,
    /// Cache lines flushed (persistent regions).
    pub flushes: Counter,
    /// Fences issued (persistent regions).
    pub fences: Counter,
    /// `msync`/`fdatasync` calls.
    pub syncs: Counter,
    /// Distinct 256-byte media lines made durable, counted per persist call (write
    /// amplification at Optane's media granularity).
    pub media_lines_written: Counter,
    /// Largest number of I/Os in flight at once (block devices).
    pub max_in_flight: AtomicU64,
    /// Failed operations (I/O errors, injected faults).
    pub errors: Counter,
}

impl DeviceCounters {
    /// Records an observation of `n` I/Os in flight.
    pub fn observe_in_flight(&self, n: u64) {
        self.max_in_flight.fetch_max(n, Ordering::Relaxed);
    }

    /// A consistent-enough copy for reporting.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            reads: self.reads.get(),
            bytes_read: self.bytes_read.get(),
            writes: self.writes.get(),
            bytes_written: self.bytes_written.get(),
            flushes: self.flushes.get(),
            fences: self.fences.get(),
            syncs: self.syncs.get(),
            media_lines_written: self.media_lines_written.get(),
            max_in_flight: self.max_in_flight.load(Ordering::Relaxed),
            errors: self.errors.get(),
        }
    }
}

/// A point-in-time copy of [`DeviceCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    /// Read operations.
    pub reads: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Write operations.
    pub writes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Cache lines flushed.
    pub flushes: u64,
    /// Fences issued.
    pub fences: u64,
    /// `msync`/`fdatasync` calls.
    pub syncs: u64,
    /// Distinct 256-byte media lines made durable (per persist call).
    pub media_lines_written: u64,
    /// Largest number of I/Os observed in flight at once.
    pub max_in_flight: u64,
    /// Failed operations (I/O errors, injected faults).
    #[serde(default)]
    pub errors: u64,
}

impl CounterSnapshot {
    /// Counter-wise difference `self - earlier` (saturating), for measuring one phase.
    /// `max_in_flight` is kept from `self`.
    pub fn since(&self, earlier: &CounterSnapshot) -> CounterSnapshot {
        CounterSnapshot {
            reads: self.reads.saturating_sub(earlier.reads),
            bytes_read: self.bytes_read.saturating_sub(earlier.bytes_read),
            writes: self.writes.saturating_sub(earlier.writes),
            bytes_written: self.bytes_written.saturating_sub(earlier.bytes_written),
            flushes: self.flushes.saturating_sub(earlier.flushes),
            fences: self.fences.saturating_sub(earlier.fences),
            syncs: self.syncs.saturating_sub(earlier.syncs),
            media_lines_written: self
                .media_lines_written
                .saturating_sub(earlier.media_lines_written),
            max_in_flight: self.max_in_flight,
            errors: self.errors.saturating_sub(earlier.errors),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_sum_across_threads() {
        let c = DeviceCounters::default();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.writes.incr();
                        c.bytes_written.add(3);
                    }
                });
            }
        });
        let snap = c.snapshot();
        assert_eq!(snap.writes, 4000);
        assert_eq!(snap.bytes_written, 12000);
        c.observe_in_flight(7);
        c.observe_in_flight(3);
        let later = c.snapshot();
        assert_eq!(later.max_in_flight, 7);
        assert_eq!(later.since(&snap).writes, 0);
    }
}
