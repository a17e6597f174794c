//! Always-on counters of the KV store and the snapshot users read.
//!
//! Owns: the store's event counters. Must not touch: device counters (the snapshot embeds the
//! region's own).

use serde::Serialize;

use crate::device::{Counter, CounterSnapshot};

/// Store event counters (sharded, relaxed; a few ns each).
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub puts: Counter,
    pub updates: Counter,
    pub in_place_updates: Counter,
    pub deletes: Counter,
    pub gets: Counter,
    pub get_hits: Counter,
    pub read_retries: Counter,
    pub damaged_reads: Counter,
    pub compactions: Counter,
    pub records_moved: Counter,
    pub large_records: Counter,
    pub reclaim_errors: Counter,
    pub helped_compactions: Counter,
    pub blocks_recycled: Counter,
    pub reclaim_waits: Counter,
    /// Bytes of records made valid (fixed: slots; variable: log bytes or large runs).
    pub live_bytes_written: Counter,
    /// Bytes of records invalidated.
    pub live_bytes_freed: Counter,
}

/// A point-in-time copy of the store's counters, with the region's device counters.
#[derive(Clone, Debug, Default, Serialize)]
pub struct KvMetrics {
    /// Completed puts.
    pub puts: u64,
    /// Completed updates (found or not).
    pub updates: u64,
    /// Updates done atomically in place.
    pub in_place_updates: u64,
    /// Completed deletes (found or not).
    pub deletes: u64,
    /// Completed gets.
    pub gets: u64,
    /// Gets that found their key.
    pub get_hits: u64,
    /// Optimistic reads retried because a writer changed the page.
    pub read_retries: u64,
    /// Reads refused because the record failed its check (media damage; never served).
    pub damaged_reads: u64,
    /// Blocks compacted.
    pub compactions: u64,
    /// Records moved by compaction.
    pub records_moved: u64,
    /// Records stored as large (multi-block) records.
    pub large_records: u64,
    /// Background reclamation rounds that failed.
    pub reclaim_errors: u64,
    /// Blocks compacted by writers helping the reclaimer (dead space outweighed live space).
    pub helped_compactions: u64,
    /// Fixed layout: partly free blocks handed back to inserts to fill in place (Viper's
    /// reclamation of fixed-size records: nothing is moved).
    pub blocks_recycled: u64,
    /// Times a writer waited for a reclaimer round instead of growing the file.
    pub reclaim_waits: u64,
    /// Persists (fences), flushes, msyncs and bytes written on the region.
    pub region: CounterSnapshot,
}

impl Metrics {
    pub(crate) fn snapshot(&self, region: CounterSnapshot) -> KvMetrics {
        KvMetrics {
            puts: self.puts.get(),
            updates: self.updates.get(),
            in_place_updates: self.in_place_updates.get(),
            deletes: self.deletes.get(),
            gets: self.gets.get(),
            get_hits: self.get_hits.get(),
            read_retries: self.read_retries.get(),
            damaged_reads: self.damaged_reads.get(),
            compactions: self.compactions.get(),
            records_moved: self.records_moved.get(),
            large_records: self.large_records.get(),
            reclaim_errors: self.reclaim_errors.get(),
            helped_compactions: self.helped_compactions.get(),
            blocks_recycled: self.blocks_recycled.get(),
            reclaim_waits: self.reclaim_waits.get(),
            region,
        }
    }
}
