//! Always-on device counters.
//!
//! Owns: cheap, thread-friendly event counters and their snapshots. Must not touch: devices
//! themselves (devices own a [`DeviceCounters`] and bump it).
//!
//! Counters are sharded so that threads never share a cache line on the hot path, and a thread
//! owns its shard exclusively while it lives: an increment is a plain load and store of a
//! thread-private line (no locked instruction — a `lock add` is a full barrier on x86 and would
//! serialise the cache misses of the operation around it). Threads beyond [`OWNED_SHARDS`]
//! share one overflow shard with atomic adds. A snapshot sums the shards (racy but monotone).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

/// Shards a thread can own; one more is shared by the threads beyond them.
pub const OWNED_SHARDS: usize = 32;
const SHARDS: usize = OWNED_SHARDS + 1;
const OVERFLOW: usize = OWNED_SHARDS;
const UNSET: usize = usize::MAX;

/// Which owned shards are taken (bit i = shard i).
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// Releases the thread's shard when the thread ends, so a later thread can own it.
struct ShardOwner(usize);

impl Drop for ShardOwner {
    fn drop(&mut self) {
        if self.0 < OWNED_SHARDS {
            // Release: this thread's last increments happen before the next owner's.
            TAKEN.fetch_and(!(1u64 << self.0), Ordering::Release);
        }
        SHARD.with(|s| s.set(UNSET));
    }
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(UNSET) };
    static OWNER: ShardOwner = ShardOwner(claim_shard());
}

fn claim_shard() -> usize {
    let mut taken = TAKEN.load(Ordering::Relaxed);
    loop {
        let free = !taken & ((1u64 << OWNED_SHARDS) - 1);
        if free == 0 {
            return OVERFLOW;
        }
        let i = free.trailing_zeros() as usize;
        // Acquire: the previous owner's increments happen before ours.
        match TAKEN.compare_exchange_weak(
            taken,
            taken | 1 << i,
            Ordering::Acquire,
            Ordering::Relaxed,
        ) {
            Ok(_) => return i,
            Err(now) => taken = now,
        }
    }
}

/// A small number the calling thread owns while it lives (below [`OWNED_SHARDS`], or
/// [`OWNED_SHARDS`] for threads beyond them): its counter shard, also usable to spread threads
/// over other per-thread structures (a store's append logs) so that they share no lines.
#[inline]
pub fn thread_slot() -> usize {
    shard_index()
}

/// The calling thread's shard (claimed on first use).
#[inline]
fn shard_index() -> usize {
    let i = SHARD.with(Cell::get);
    if i != UNSET {
        return i;
    }
    // During thread teardown the owner may be gone already: count in the overflow shard.
    let i = OWNER.try_with(|o| o.0).unwrap_or(OVERFLOW);
    let _ = SHARD.try_with(|s| s.set(i));
    i
}

/// A monotonically increasing event counter, sharded per thread.
///
/// The shards (a cache line pair each, 4 KiB in all) live on the heap: structures holding a
/// dozen counters are moved by value (devices, pools, stores being opened), and inline shards
/// made their stack frames hundreds of KiB deep.
#[derive(Debug)]
pub struct Counter {
    shards: Box<[CachePadded<AtomicU64>; SHARDS]>,
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            shards: Box::new(std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0)))),
        }
    }
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.add_in(shard_index(), n);
    }

    /// Adds `n` in shard `i` (from [`shard_index`]: several counters of one event share the
    /// lookup).
    #[inline]
    fn add_in(&self, i: usize, n: u64) {
        let Some(shard) = self.shards.get(i) else {
            return;
        };
        if i == OVERFLOW {
            shard.fetch_add(n, Ordering::Relaxed);
        } else {
            // Only this thread writes this shard (see the module docs); readers may see the old
            // or the new total, never a torn one.
            shard.store(
                shard.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
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
    /// Syncs made: `msync`/`fdatasync` calls, and syncs of a regular file on tmpfs or ramfs,
    /// which need no system call ([`crate::device::BlockDevice::sync`]).
    pub syncs: Counter,
    /// Persists deferred to a later sync (durability levels `Eventual` and `None`).
    pub deferred_persists: Counter,
    /// Distinct 256-byte media lines made durable, counted per persist call (write
    /// amplification at Optane's media granularity).
    pub media_lines_written: Counter,
    /// Largest number of I/Os in flight at once (block devices).
    pub max_in_flight: AtomicU64,
    /// Failed operations (I/O errors, injected faults).
    pub errors: Counter,
}

impl DeviceCounters {
    /// Counts one read of `bytes` bytes.
    #[inline]
    pub fn record_read(&self, bytes: u64) {
        let i = shard_index();
        self.reads.add_in(i, 1);
        self.bytes_read.add_in(i, bytes);
    }

    /// Counts `lines` cache lines flushed and `media_lines` media lines written by one persist
    /// (one shard look-up for both counters).
    #[inline]
    pub fn record_flush(&self, lines: u64, media_lines: u64) {
        let i = shard_index();
        self.flushes.add_in(i, lines);
        self.media_lines_written.add_in(i, media_lines);
    }

    /// Counts one write of `bytes` bytes.
    #[inline]
    pub fn record_write(&self, bytes: u64) {
        let i = shard_index();
        self.writes.add_in(i, 1);
        self.bytes_written.add_in(i, bytes);
    }

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
            deferred_persists: self.deferred_persists.get(),
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
    /// Syncs made (see [`DeviceCounters::syncs`]).
    pub syncs: u64,
    /// Persists deferred to a later sync.
    #[serde(default)]
    pub deferred_persists: u64,
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
            deferred_persists: self
                .deferred_persists
                .saturating_sub(earlier.deferred_persists),
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

    #[test]
    fn no_increment_is_lost_when_threads_come_and_go_beyond_the_owned_shards() {
        let c = Counter::default();
        // Waves of more threads than there are owned shards, so shards are reused by later
        // threads and some threads count in the shared overflow shard.
        for _ in 0..3 {
            std::thread::scope(|s| {
                for _ in 0..OWNED_SHARDS + 8 {
                    s.spawn(|| {
                        for _ in 0..500 {
                            c.incr();
                        }
                    });
                }
            });
        }
        assert_eq!(c.get(), 3 * (OWNED_SHARDS as u64 + 8) * 500);
    }
}
