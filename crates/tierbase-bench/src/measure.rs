//! Measurement: latency histograms per operation type and the throughput timeline.
//!
//! Owns: [`OpKind`], [`ThreadRecorder`] (one per worker: an HdrHistogram per operation type,
//! counts, 1 s timeline buckets), [`Measurements`] (the merge of all threads) and the summaries
//! written to result files ([`LatencySummary`], [`OperationStats`], [`TimelineBucket`]). Must
//! not touch: stores, workloads or output formats beyond these summaries.
//!
//! Latencies are recorded in nanoseconds with 3 significant digits (HdrHistogram), so every
//! percentile is within 0.1% of the true value.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Length of one timeline bucket.
pub const TIMELINE_BUCKET: Duration = Duration::from_secs(1);

/// Significant digits kept by the histograms.
const HISTOGRAM_DIGITS: u8 = 3;
/// Highest latency the histograms track before resizing themselves (10 s).
const HISTOGRAM_INITIAL_MAX_NS: u64 = 10_000_000_000;

/// The type of a measured operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpKind {
    /// Insert of a new key (load phase and workloads D, E).
    Insert,
    /// Point read.
    Read,
    /// Replace an existing value.
    Update,
    /// Ordered scan.
    Scan,
    /// Read then update, timed together.
    ReadModifyWrite,
    /// Delete of a key (tierbase's micro benchmarks; not in YCSB's core workloads).
    Delete,
}

impl OpKind {
    /// All kinds, in report order.
    pub const ALL: [OpKind; 6] = [
        OpKind::Insert,
        OpKind::Read,
        OpKind::Update,
        OpKind::Scan,
        OpKind::ReadModifyWrite,
        OpKind::Delete,
    ];

    /// Name used in result files and reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Insert => "insert",
            OpKind::Read => "read",
            OpKind::Update => "update",
            OpKind::Scan => "scan",
            OpKind::ReadModifyWrite => "read-modify-write",
            OpKind::Delete => "delete",
        }
    }

    fn index(self) -> usize {
        match self {
            OpKind::Insert => 0,
            OpKind::Read => 1,
            OpKind::Update => 2,
            OpKind::Scan => 3,
            OpKind::ReadModifyWrite => 4,
            OpKind::Delete => 5,
        }
    }
}

/// A new latency histogram in nanoseconds (3 significant digits, resizing itself as needed).
pub fn new_histogram() -> Histogram<u64> {
    // Constant arguments inside hdrhistogram's documented domain (low ≥ 1, high ≥ 2·low,
    // 0..=5 significant digits): this cannot fail, whatever the input.
    #[allow(clippy::expect_used)]
    let mut h = Histogram::new_with_bounds(1, HISTOGRAM_INITIAL_MAX_NS, HISTOGRAM_DIGITS)
        .expect("constant histogram bounds are valid");
    h.auto(true);
    h
}

/// Per-operation-type tallies and latencies.
#[derive(Clone, Debug)]
struct KindRecord {
    histogram: Histogram<u64>,
    count: u64,
    not_found: u64,
}

impl KindRecord {
    fn new() -> Self {
        KindRecord {
            histogram: new_histogram(),
            count: 0,
            not_found: 0,
        }
    }
}

/// What one worker thread measured.
#[derive(Debug)]
pub struct ThreadRecorder {
    start: Instant,
    kinds: [Option<KindRecord>; 6],
    timeline: Vec<u64>,
}

impl ThreadRecorder {
    /// A recorder whose timeline starts at `start` (the measured start of the phase).
    pub fn new(start: Instant) -> Self {
        ThreadRecorder {
            start,
            kinds: Default::default(),
            timeline: Vec::new(),
        }
    }

    /// Records one operation of `kind` that took `latency` and finished at `end`. `found` is
    /// false when the key (or, for scans, any record) was missing.
    #[inline]
    pub fn record(&mut self, kind: OpKind, latency: Duration, end: Instant, found: bool) {
        let Some(slot) = self.kinds.get_mut(kind.index()) else {
            return;
        };
        let rec = slot.get_or_insert_with(KindRecord::new);
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
        rec.histogram.saturating_record(ns);
        rec.count += 1;
        if !found {
            rec.not_found += 1;
        }
        let bucket = (end.saturating_duration_since(self.start).as_nanos()
            / TIMELINE_BUCKET.as_nanos()) as usize;
        if bucket >= self.timeline.len() {
            self.timeline.resize(bucket + 1, 0);
        }
        if let Some(b) = self.timeline.get_mut(bucket) {
            *b += 1;
        }
    }
}

/// All threads of a phase, merged.
#[derive(Debug, Default)]
pub struct Measurements {
    kinds: BTreeMap<OpKind, KindRecord>,
    timeline: Vec<u64>,
}

impl Measurements {
    /// Adds one thread's recorder.
    pub fn merge(&mut self, thread: ThreadRecorder) {
        for (kind, rec) in OpKind::ALL.into_iter().zip(thread.kinds) {
            let Some(rec) = rec else { continue };
            match self.kinds.get_mut(&kind) {
                Some(mine) => {
                    // Both histograms auto-resize, so adding cannot fail on range.
                    let _ = mine.histogram.add(&rec.histogram);
                    mine.count += rec.count;
                    mine.not_found += rec.not_found;
                }
                None => {
                    self.kinds.insert(kind, rec);
                }
            }
        }
        if thread.timeline.len() > self.timeline.len() {
            self.timeline.resize(thread.timeline.len(), 0);
        }
        for (mine, theirs) in self.timeline.iter_mut().zip(thread.timeline) {
            *mine += theirs;
        }
    }

    /// Operations recorded, all kinds.
    pub fn total_ops(&self) -> u64 {
        self.kinds.values().map(|r| r.count).sum()
    }

    /// Per-kind statistics, throughput computed over `elapsed`.
    pub fn operation_stats(&self, elapsed: Duration) -> BTreeMap<OpKind, OperationStats> {
        let secs = elapsed.as_secs_f64();
        self.kinds
            .iter()
            .map(|(&kind, rec)| {
                let h = &rec.histogram;
                let stats = OperationStats {
                    count: rec.count,
                    not_found: rec.not_found,
                    throughput: if secs > 0.0 {
                        rec.count as f64 / secs
                    } else {
                        0.0
                    },
                    latency_ns: LatencySummary::of(h).unwrap_or_default(),
                };
                (kind, stats)
            })
            .collect()
    }

    /// The timeline as buckets; the last bucket is cut at `elapsed`.
    pub fn timeline(&self, elapsed: Duration) -> Vec<TimelineBucket> {
        let width = TIMELINE_BUCKET.as_secs_f64();
        let total = elapsed.as_secs_f64();
        self.timeline
            .iter()
            .enumerate()
            .map(|(i, &ops)| {
                let start_s = i as f64 * width;
                let duration_s = (total - start_s).clamp(0.0, width);
                // A bucket can only be empty of time if the clock raced the end stamp; fall
                // back to the nominal width so the rate stays finite.
                let d = if duration_s > 0.0 { duration_s } else { width };
                TimelineBucket {
                    start_s,
                    duration_s: d,
                    ops,
                    ops_per_s: ops as f64 / d,
                }
            })
            .collect()
    }
}

/// Latency percentiles of one operation type (or of sampled operations), in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Latencies recorded (result files from before this field read as 0).
    #[serde(default)]
    pub samples: u64,
    /// Fastest.
    pub min: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest.
    pub max: u64,
}

impl LatencySummary {
    /// Summarises a histogram (`None` if it is empty).
    pub fn of(h: &Histogram<u64>) -> Option<Self> {
        if h.is_empty() {
            return None;
        }
        Some(LatencySummary {
            samples: h.len(),
            min: h.min(),
            mean: h.mean(),
            p50: h.value_at_quantile(0.5),
            p90: h.value_at_quantile(0.9),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        })
    }
}

/// Counts, throughput and latency of one operation type in one run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OperationStats {
    /// Operations measured.
    pub count: u64,
    /// Of those, how many found no record (reads/updates of a missing key, empty scans).
    pub not_found: u64,
    /// Operations per second of this type over the measured window.
    pub throughput: f64,
    /// Latency percentiles in ns.
    pub latency_ns: LatencySummary,
}

/// Throughput in one timeline bucket.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TimelineBucket {
    /// Bucket start, seconds after the measured start.
    pub start_s: f64,
    /// Bucket length in seconds (1, or less for the last bucket).
    pub duration_s: f64,
    /// Operations completed in the bucket.
    pub ops: u64,
    /// `ops / duration_s`.
    pub ops_per_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_counts_histograms_and_timelines() {
        let start = Instant::now();
        let mut a = ThreadRecorder::new(start);
        let mut b = ThreadRecorder::new(start);
        for i in 1..=100u64 {
            a.record(OpKind::Read, Duration::from_nanos(i * 10), start, true);
        }
        b.record(OpKind::Read, Duration::from_nanos(5), start, false);
        b.record(
            OpKind::Update,
            Duration::from_micros(3),
            start + Duration::from_millis(1500),
            true,
        );
        let mut m = Measurements::default();
        m.merge(a);
        m.merge(b);
        assert_eq!(m.total_ops(), 102);
        let stats = m.operation_stats(Duration::from_secs(2));
        let read = stats[&OpKind::Read];
        assert_eq!((read.count, read.not_found), (101, 1));
        assert_eq!(read.latency_ns.min, 5);
        assert!((495..=505).contains(&read.latency_ns.p50));
        assert!((995..=1001).contains(&read.latency_ns.max));
        assert_eq!(read.throughput, 50.5);
        let tl = m.timeline(Duration::from_millis(1600));
        assert_eq!(tl.len(), 2);
        assert_eq!((tl[0].ops, tl[1].ops), (101, 1));
        assert!((tl[1].duration_s - 0.6).abs() < 1e-9);
    }
}
