//! Measurement: latency histograms per operation type and the throughput timeline.
//!
//! Owns: [`OpKind`], [`ThreadRecorder`] (one per worker: an HdrHistogram per operation type,
//! counts, 1 s timeline buckets), [`Measurements`] (the merge of all threads) and the summaries
//! written to result files ([`LatencySummary`], [`OperationStats`], [`TimelineBucket`]). Must
//! not touch: stores, workloads or output formats beyond these summaries.
//!
//! Latencies are recorded in nanoseconds with 3 significant digits (HdrHistogram), so every
//! percentile is within 0.1% of the true value.
//!
//! Operations are timed with [`OpClock`]: the CPU's time-stamp counter where it is invariant
//! (read through `quanta`, which calibrates it once per process against the OS monotonic
//! clock), else the OS monotonic clock itself. Each reading waits for every instruction before
//! it (`lfence; rdtsc`), as `clock_gettime` (behind [`Instant::now`]) orders its read: without
//! that, the closing reading of an operation that misses the caches is taken before the miss
//! resolves (a `memory` store's uniform reads then showed under half their median latency).
//! The ordered TSC reading costs less than `clock_gettime`, whose call and conversion every
//! latency used to include in part. Phase throughput is timed with [`Instant`], as before.

use std::collections::BTreeMap;
use std::sync::OnceLock;
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

/// Bits of the sub-bucket index of [`new_histogram`]'s layout: 3 significant digits need
/// 2 · 10³ distinct values per bucket, rounded up to 2048 (as HdrHistogram sizes them).
const SUB_BUCKET_BITS: u32 = 11;
const SUB_BUCKET_HALF: usize = 1 << (SUB_BUCKET_BITS - 1);
/// Latencies below this (2³³ ns, 8.6 s; below the histograms' 10 s range) are counted by
/// [`LatencyCounts`]; longer ones go to the histogram directly.
const FAST_LIMIT_NS: u64 = 1 << 33;
/// Counters of [`LatencyCounts`]: bucket 0 has 2048 sub-buckets, every further one 1024.
const FAST_SLOTS: usize =
    (64 - FAST_LIMIT_NS.leading_zeros() as usize - SUB_BUCKET_BITS as usize + 2) * SUB_BUCKET_HALF;

/// Latency counts in exactly the buckets of a [`new_histogram`] (HdrHistogram, 1 ns, 3
/// significant digits, unit magnitude 0), kept as a plain array so that recording one is an
/// increment: HdrHistogram's recording also maintains its total, minimum and maximum, which
/// [`drain_into`](Self::drain_into) derives afterwards. Recording one value per bucket with
/// its count gives the histogram it would have had — every summary equal.
#[derive(Clone, Debug)]
struct LatencyCounts {
    counts: Box<[u64]>,
}

impl LatencyCounts {
    fn new() -> Self {
        LatencyCounts {
            counts: vec![0; FAST_SLOTS].into_boxed_slice(),
        }
    }

    /// HdrHistogram's counts index of `ns` (for `ns < FAST_LIMIT_NS`).
    #[inline]
    fn index(ns: u64) -> usize {
        // bucket = powers of two above the 2048 values of bucket 0; its sub-buckets are the
        // upper half, 1024..2048, of `ns >> bucket`.
        let bucket = (64 - SUB_BUCKET_BITS) - (ns | ((1 << SUB_BUCKET_BITS) - 1)).leading_zeros();
        ((bucket as usize) << (SUB_BUCKET_BITS - 1)) + (ns >> bucket) as usize
    }

    /// The smallest latency counted at `index`.
    fn value_at(index: usize) -> u64 {
        let bucket = (index >> (SUB_BUCKET_BITS - 1)).saturating_sub(1);
        let sub = index - (bucket << (SUB_BUCKET_BITS - 1));
        (sub as u64) << bucket
    }

    /// Counts `ns`, or returns false when it is beyond the array (the caller records it).
    #[inline]
    fn record(&mut self, ns: u64) -> bool {
        if ns >= FAST_LIMIT_NS {
            return false;
        }
        match self.counts.get_mut(Self::index(ns)) {
            Some(c) => {
                *c += 1;
                true
            }
            None => false,
        }
    }

    /// Moves the counts into `h`.
    fn drain_into(&mut self, h: &mut Histogram<u64>) {
        for (i, c) in self.counts.iter_mut().enumerate() {
            if *c > 0 {
                h.saturating_record_n(Self::value_at(i), *c);
                *c = 0;
            }
        }
    }
}

/// The clock operations are timed with (see the module documentation).
#[derive(Clone, Debug)]
pub struct OpClock {
    clock: quanta::Clock,
}

static OP_CLOCK: OnceLock<quanta::Clock> = OnceLock::new();

impl OpClock {
    /// The process-wide clock. The first call calibrates it (a few milliseconds, at most
    /// 200 ms): make it before a measured window opens.
    pub fn get() -> OpClock {
        OpClock {
            clock: OP_CLOCK.get_or_init(quanta::Clock::new).clone(),
        }
    }

    /// A raw reading: ticks of the time-stamp counter, or nanoseconds of the OS monotonic
    /// clock. Only differences of two readings mean anything ([`nanos`](Self::nanos)).
    #[inline]
    pub fn now(&self) -> u64 {
        tierbase::device::cpu::lfence();
        self.clock.raw()
    }

    /// Nanoseconds from reading `start` to reading `end` (0 if `end` is not after `start`).
    #[inline]
    pub fn nanos(&self, start: u64, end: u64) -> u64 {
        self.clock.delta_as_nanos(start, end)
    }
}

/// Nanoseconds in one timeline bucket.
const BUCKET_NS: u64 = TIMELINE_BUCKET.as_nanos() as u64;

/// What one worker thread measured.
#[derive(Debug)]
pub struct ThreadRecorder {
    start: Instant,
    clock: OpClock,
    /// A reading of `clock` and how many nanoseconds after `start` it was taken.
    anchor: (u64, u64),
    kinds: [Option<(KindRecord, LatencyCounts)>; 6],
    timeline: Vec<u64>,
    /// The timeline bucket last counted in, and its bounds in nanoseconds after `start`.
    bucket: usize,
    bucket_span: (u64, u64),
    /// The span recorded last, added when the next one is (or at the merge): its arithmetic
    /// then does not wait for the closing clock reading it needs, before the next operation.
    pending: Option<(OpKind, u64, u64, bool)>,
}

impl ThreadRecorder {
    /// A recorder whose timeline starts at `start` (the measured start of the phase).
    pub fn new(start: Instant) -> Self {
        let clock = OpClock::get();
        let raw = clock.now();
        let since = Instant::now().saturating_duration_since(start);
        ThreadRecorder {
            start,
            clock,
            anchor: (raw, u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)),
            kinds: Default::default(),
            timeline: Vec::new(),
            bucket: 0,
            bucket_span: (0, 0),
            pending: None,
        }
    }

    /// A reading of the operation clock, for [`record_span`](Self::record_span).
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Records one operation of `kind` that ran from clock reading `begin` to `end` (both from
    /// [`now`](Self::now)). `found` is false when the key (or, for scans, any record) was
    /// missing. (Counted with the next span, or when [`Measurements::merge`] takes the
    /// recorder.)
    #[inline]
    pub fn record_span(&mut self, kind: OpKind, begin: u64, end: u64, found: bool) {
        if let Some((kind, begin, end, found)) = self.pending.replace((kind, begin, end, found)) {
            self.add_span(kind, begin, end, found);
        }
    }

    #[inline]
    fn add_span(&mut self, kind: OpKind, begin: u64, end: u64, found: bool) {
        let latency = self.clock.nanos(begin, end);
        let since = self
            .anchor
            .1
            .saturating_add(self.clock.nanos(self.anchor.0, end));
        self.add(kind, latency, since, found);
    }

    fn flush(&mut self) {
        if let Some((kind, begin, end, found)) = self.pending.take() {
            self.add_span(kind, begin, end, found);
        }
    }

    /// Counts one operation of `kind` that was not timed (see `PhaseConfig::latency_every`):
    /// it adds to the operation counts and the timeline's current bucket, not to the
    /// latencies.
    #[inline]
    pub fn count_untimed(&mut self, kind: OpKind, found: bool) {
        // The last timed operation first: it moves the timeline to its bucket.
        self.flush();
        let Some(slot) = self.kinds.get_mut(kind.index()) else {
            return;
        };
        let (rec, _) = slot.get_or_insert_with(|| (KindRecord::new(), LatencyCounts::new()));
        rec.count += 1;
        if !found {
            rec.not_found += 1;
        }
        if let Some(b) = self.timeline.get_mut(self.bucket) {
            *b += 1;
        }
    }

    /// Records one operation of `kind` that took `latency` and finished at `end`. `found` is
    /// false when the key (or, for scans, any record) was missing.
    pub fn record(&mut self, kind: OpKind, latency: Duration, end: Instant, found: bool) {
        let since = end.saturating_duration_since(self.start).as_nanos();
        self.add(
            kind,
            u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX),
            u64::try_from(since).unwrap_or(u64::MAX),
            found,
        );
    }

    /// Records a latency of `ns` for an operation that ended `since` ns after the start.
    #[inline]
    fn add(&mut self, kind: OpKind, ns: u64, since: u64, found: bool) {
        let Some(slot) = self.kinds.get_mut(kind.index()) else {
            return;
        };
        let (rec, fast) = slot.get_or_insert_with(|| (KindRecord::new(), LatencyCounts::new()));
        let ns = ns.max(1);
        if !fast.record(ns) {
            rec.histogram.saturating_record(ns);
        }
        rec.count += 1;
        if !found {
            rec.not_found += 1;
        }
        if since < self.bucket_span.0 || since >= self.bucket_span.1 {
            self.enter_bucket(since);
        }
        if let Some(b) = self.timeline.get_mut(self.bucket) {
            *b += 1;
        }
    }

    /// Makes the bucket holding `since` the current one (growing the timeline to it).
    #[cold]
    fn enter_bucket(&mut self, since: u64) {
        let bucket = since / BUCKET_NS;
        let index = usize::try_from(bucket).unwrap_or(usize::MAX);
        if index >= self.timeline.len() {
            self.timeline.resize(index.saturating_add(1), 0);
        }
        self.bucket = index;
        self.bucket_span = (bucket * BUCKET_NS, (bucket + 1).saturating_mul(BUCKET_NS));
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
    pub fn merge(&mut self, mut thread: ThreadRecorder) {
        thread.flush();
        for (kind, rec) in OpKind::ALL.into_iter().zip(thread.kinds) {
            let Some((mut rec, mut fast)) = rec else {
                continue;
            };
            fast.drain_into(&mut rec.histogram);
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
    fn latency_counts_keep_the_histogram_buckets() {
        let mut direct = new_histogram();
        let mut fast = LatencyCounts::new();
        let mut via_counts = new_histogram();
        let mut rng = crate::rng::Rng::from_seed(3);
        let special = [
            1,
            2,
            1023,
            1024,
            2047,
            2048,
            2049,
            4095,
            4096,
            1 << 20,
            (1 << 33) - 1,
        ];
        let values = special
            .into_iter()
            .chain((0..100_000).map(|_| rng.next_u64() >> (29 + rng.below(35))))
            .chain([1 << 33, 20_000_000_000, u64::MAX]);
        for ns in values {
            let ns = ns.max(1);
            direct.saturating_record(ns);
            if ns < FAST_LIMIT_NS {
                assert_eq!(
                    direct.lowest_equivalent(ns),
                    LatencyCounts::value_at(LatencyCounts::index(ns)),
                    "{ns}"
                );
            }
            if !fast.record(ns) {
                via_counts.saturating_record(ns);
            }
        }
        fast.drain_into(&mut via_counts);
        assert_eq!(LatencySummary::of(&direct), LatencySummary::of(&via_counts));
        let buckets = |h: &Histogram<u64>| -> Vec<(u64, u64)> {
            h.iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect()
        };
        assert_eq!(buckets(&direct), buckets(&via_counts));
        assert_eq!(direct.stdev(), via_counts.stdev());
    }

    #[test]
    fn recorded_spans_land_in_their_timeline_buckets() {
        let start = Instant::now();
        let mut r = ThreadRecorder::new(start);
        let t0 = r.now();
        let t1 = r.now();
        r.record_span(OpKind::Insert, t0, t1, true);
        r.record(
            OpKind::Insert,
            Duration::from_nanos(5),
            start + Duration::from_millis(2500),
            true,
        );
        r.record(
            OpKind::Insert,
            Duration::from_nanos(5),
            start + Duration::from_millis(500),
            true,
        );
        let mut m = Measurements::default();
        m.merge(r);
        let tl: Vec<u64> = m
            .timeline(Duration::from_secs(3))
            .iter()
            .map(|b| b.ops)
            .collect();
        assert_eq!(tl, [2, 0, 1]);
        let stats = m.operation_stats(Duration::from_secs(3));
        assert_eq!(stats[&OpKind::Insert].count, 3);
    }

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
