//! Running one measured phase (load or run) on a store with several worker threads.
//!
//! Owns: the worker threads, the warm-up and the start gate, the live progress counters, the
//! optional time limit, and the execution of each [`Operation`] against a [`Client`] with its
//! latency recorded. Must not touch: store internals, workload definitions, result formats.
//!
//! Method:
//! - each worker opens its own client and its own [`OperationStream`];
//! - in the run phase each worker first performs its share of the warm-up operations,
//!   unmeasured (cut short by the time limit, if one is set); then all workers meet at a start
//!   gate, and the measured window starts when the last one arrives, so no thread is measured
//!   while another still warms up;
//! - each operation's latency goes into the worker's HdrHistogram for its type (only the store
//!   calls are timed, as in YCSB: key and value are built before, a read's value is verified
//!   and an insert acknowledged after); completions are counted in 1 s timeline buckets;
//! - load threads take their key numbers in batches of 64 (one shared counter update per
//!   batch instead of per insert);
//! - throughput = measured operations ÷ (last worker's end − gate opening);
//! - a failing operation stops the phase and is returned as the error; a panicking worker
//!   releases the others and is reported as [`BenchError::WorkerPanicked`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};

use crate::adapter::{Client, Store};
use crate::error::{BenchError, Result};
use crate::measure::{Measurements, OpClock, OpKind, ThreadRecorder};
use crate::progress::{ProgressSink, format_rate};
use crate::workload::WorkloadSpec;
use crate::workload::keys::{KeyBuilder, VALUE_HEADER_LEN, value_matches_key};
use crate::workload::ops::{
    KeySpace, LOAD_STREAM, Operation, OperationStream, RUN_STREAM, WorkloadGenerators,
};

/// Key numbers a load thread takes at once (see [`KeySpace::next_load_batch`]).
const LOAD_BATCH: u64 = 64;

/// How often the monitor refreshes progress and checks the time limit.
const MONITOR_INTERVAL: Duration = Duration::from_millis(200);

/// Parameters of one phase.
#[derive(Clone, Debug)]
pub struct PhaseConfig {
    /// Label shown in progress output.
    pub label: String,
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Seed of the operation streams.
    pub seed: u64,
    /// Unmeasured operations before the measured window (run phase; split over the threads).
    pub warmup_ops: u64,
    /// Stop the measured window after this long (the result says it stopped early).
    pub max_time: Option<Duration>,
    /// Check value fingerprints on reads and scans.
    pub verify: bool,
    /// Measured reads issued together through [`Client::get_many`] (1: one `get` each).
    /// Consecutive reads of a thread's stream are batched; any other operation first ends the
    /// batch, so the order of operations is kept.
    pub read_batch: usize,
    /// Time one measured operation in this many (1: every one). Each timed operation sits
    /// between two clock readings that wait for everything before them (`lfence; rdtsc`), so
    /// the next operation cannot start under this one's cache misses; an untimed one is only
    /// counted, and overlaps its neighbours as it would in an application (or in a driver
    /// that times whole phases only, as the original Viper's does). Latencies are then a
    /// sample; throughput counts every operation. Reads batched by `read_batch` are timed
    /// per batch whatever this is.
    pub latency_every: u64,
    /// Measured reads prepared together (1: none): their keys and fingerprints are built
    /// first, then they are read one `get` after another, each timed or only counted as
    /// `latency_every` says, so that building the next key does not sit between two gets.
    /// Consecutive reads of a thread's stream are gathered, as for `read_batch` (which takes
    /// precedence); the store's work is the same.
    pub prepared_reads: usize,
}

/// What a phase measured.
#[derive(Debug)]
pub struct PhaseOutcome {
    /// Merged histograms, counts and timeline.
    pub measurements: Measurements,
    /// The measured window: gate opening to the last worker's end.
    pub elapsed: Duration,
    /// Values whose key fingerprint did not match (store returned the wrong record).
    pub verify_failures: u64,
    /// The time limit ended the phase before all operations were done.
    pub stopped_early: bool,
}

impl PhaseOutcome {
    /// Measured operations per second.
    pub fn throughput(&self) -> f64 {
        let s = self.elapsed.as_secs_f64();
        if s > 0.0 {
            self.measurements.total_ops() as f64 / s
        } else {
            0.0
        }
    }
}

/// All workers meet here after the warm-up; the last to arrive opens it for everyone.
#[derive(Debug)]
struct StartGate {
    state: Mutex<GateState>,
    opened: Condvar,
}

#[derive(Debug)]
struct GateState {
    parties: usize,
    arrived: usize,
    opened_at: Option<Instant>,
    aborted: bool,
}

impl StartGate {
    fn new(parties: usize) -> Self {
        StartGate {
            state: Mutex::new(GateState {
                parties,
                arrived: 0,
                opened_at: None,
                aborted: false,
            }),
            opened: Condvar::new(),
        }
    }

    /// Waits for all parties; the measured start, or `None` when the phase was aborted.
    fn arrive(&self) -> Option<Instant> {
        let mut st = self.state.lock();
        if st.aborted {
            return None;
        }
        st.arrived += 1;
        if st.arrived >= st.parties {
            let now = Instant::now();
            st.opened_at = Some(now);
            self.opened.notify_all();
            return Some(now);
        }
        loop {
            self.opened.wait(&mut st);
            if st.aborted {
                return None;
            }
            if let Some(t) = st.opened_at {
                return Some(t);
            }
        }
    }

    fn abort(&self) {
        self.state.lock().aborted = true;
        self.opened.notify_all();
    }

    fn opened_at(&self) -> Option<Instant> {
        self.state.lock().opened_at
    }
}

/// Shared between the workers and the monitor.
struct Shared {
    gate: StartGate,
    stop: AtomicBool,
    done: Vec<CachePadded<AtomicU64>>,
}

impl Shared {
    fn halt(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.gate.abort();
    }

    #[inline]
    fn report_done(&self, thread: usize, done: u64) {
        if let Some(c) = self.done.get(thread) {
            c.store(done, Ordering::Relaxed);
        }
    }
}

/// Releases the other workers if this one unwinds before reaching the gate.
struct PanicGuard<'a>(&'a Shared);

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.halt();
        }
    }
}

/// One worker's measured result.
struct WorkerResult {
    recorder: ThreadRecorder,
    end: Instant,
    verify_failures: u64,
}

/// Operations for worker `t` of `threads` when `total` are split as evenly as possible.
fn share(total: u64, threads: usize, t: usize) -> u64 {
    let n = threads.max(1) as u64;
    total / n + u64::from((t as u64) < total % n)
}

/// Loads `spec.record_count` records (key numbers from `keyspace`) with `cfg.threads` workers.
/// Every insert is measured (no warm-up).
pub fn run_load(
    store: &dyn Store,
    spec: &WorkloadSpec,
    keyspace: &KeySpace,
    cfg: &PhaseConfig,
    progress: &dyn ProgressSink,
) -> Result<PhaseOutcome> {
    let gens = WorkloadGenerators::new(spec, 0)?;
    run_phase(
        store,
        cfg,
        spec.record_count,
        progress,
        |t, client, shared| {
            let mut stream = gens.stream(cfg.seed, LOAD_STREAM, t as u64, keyspace);
            let mut w = Worker::new(client, stream.key_size(), cfg.verify);
            let Some(start) = shared.gate.arrive() else {
                return Ok(None);
            };
            let mut rec = ThreadRecorder::new(start);
            let mut done = 0u64;
            // Key numbers come in batches (see `KeySpace::next_load_batch`).
            let mut batch = 0..0;
            while let Some(keynum) = batch.next().or_else(|| {
                batch = keyspace.next_load_batch(LOAD_BATCH);
                batch.next()
            }) {
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                w.perform(
                    &mut stream,
                    keyspace,
                    Operation::Insert { keynum },
                    Some(&mut rec),
                    true,
                )?;
                done += 1;
                shared.report_done(t, done);
            }
            Ok(Some(w.finish(rec)))
        },
    )
}

/// Runs `spec.operation_count` measured operations (plus `cfg.warmup_ops` unmeasured ones
/// first) of the workload on a loaded store.
pub fn run_transactions(
    store: &dyn Store,
    spec: &WorkloadSpec,
    keyspace: &KeySpace,
    cfg: &PhaseConfig,
    progress: &dyn ProgressSink,
) -> Result<PhaseOutcome> {
    let total = spec.operation_count.saturating_add(cfg.warmup_ops);
    let gens = WorkloadGenerators::new(spec, total)?;
    let threads = cfg.threads;
    let warmup_deadline = cfg.max_time.map(|limit| Instant::now() + limit);
    run_phase(store, cfg, total, progress, |t, client, shared| {
        let mut stream = gens.stream(cfg.seed, RUN_STREAM, t as u64, keyspace);
        let mut w = Worker::new(client, stream.key_size(), cfg.verify);
        let mut done = 0u64;
        for i in 0..share(cfg.warmup_ops, threads, t) {
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            // The time limit also bounds the warm-up (checked every 64 operations).
            if i % 64 == 0 && warmup_deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let op = stream.next_operation();
            w.perform(&mut stream, keyspace, op, None, false)?;
            done += 1;
            shared.report_done(t, done);
        }
        let Some(start) = shared.gate.arrive() else {
            return Ok(None);
        };
        let mut rec = ThreadRecorder::new(start);
        let batch = cfg.read_batch.max(1);
        let latency_every = cfg.latency_every.max(1);
        // Reads gathered for one batched call, or prepared together (see `PhaseConfig`).
        let gather = if batch > 1 {
            batch
        } else {
            cfg.prepared_reads.max(1)
        };
        // Counted from the measured window's start: its first operation is timed.
        for measured in 0..share(spec.operation_count, threads, t) {
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let op = stream.next_operation();
            let time = measured.is_multiple_of(latency_every);
            if gather > 1 {
                if let Operation::Read { keynum } = op {
                    w.batch.push(keynum);
                    w.batch_timed.push(time);
                    if w.batch.len() == gather {
                        w.read_gathered(&mut rec, batch > 1)?;
                    }
                    done += 1;
                    shared.report_done(t, done);
                    continue;
                }
                w.read_gathered(&mut rec, batch > 1)?;
            }
            w.perform(&mut stream, keyspace, op, Some(&mut rec), time)?;
            done += 1;
            shared.report_done(t, done);
        }
        w.read_gathered(&mut rec, batch > 1)?;
        Ok(Some(w.finish(rec)))
    })
}

/// Runs `work` on `cfg.threads` workers, each with its own client, while this thread shows
/// progress and enforces the time limit. `work` returns `None` when the phase was aborted
/// before its measured window.
fn run_phase<F>(
    store: &dyn Store,
    cfg: &PhaseConfig,
    total_ops: u64,
    progress: &dyn ProgressSink,
    work: F,
) -> Result<PhaseOutcome>
where
    F: Fn(usize, &mut dyn Client, &Shared) -> Result<Option<WorkerResult>> + Sync,
{
    if cfg.threads == 0 {
        return Err(BenchError::invalid("thread count must be at least 1"));
    }
    // Calibrate the operation clock now, not inside the measured window.
    let _ = OpClock::get();
    let shared = Shared {
        gate: StartGate::new(cfg.threads),
        stop: AtomicBool::new(false),
        done: (0..cfg.threads)
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect(),
    };
    progress.start(&cfg.label, total_ops);
    let (finished_tx, finished_rx) = mpsc::channel::<()>();
    let results: Vec<Result<Option<WorkerResult>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let finished = finished_tx.clone();
                let shared = &shared;
                let work = &work;
                s.spawn(move || {
                    let _guard = PanicGuard(shared);
                    let r = store.client().and_then(|mut c| work(t, c.as_mut(), shared));
                    if r.is_err() {
                        shared.halt();
                    }
                    let _ = finished.send(());
                    r
                })
            })
            .collect();
        drop(finished_tx);
        monitor(cfg, &shared, progress, &finished_rx);
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|payload| {
                    let msg = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    Err(BenchError::WorkerPanicked(msg))
                })
            })
            .collect()
    });
    let stopped_early = shared.stop.load(Ordering::Relaxed);
    let mut measurements = Measurements::default();
    let mut verify_failures = 0;
    let mut last_end = None::<Instant>;
    let mut first_error = None;
    for r in results {
        match r {
            Ok(Some(w)) => {
                verify_failures += w.verify_failures;
                last_end = Some(last_end.map_or(w.end, |e| e.max(w.end)));
                measurements.merge(w.recorder);
            }
            Ok(None) => {}
            Err(e) => {
                // Keep the root cause: the first real error, not a panic report of a bystander.
                if first_error.is_none()
                    || matches!(first_error, Some(BenchError::WorkerPanicked(_)))
                {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        progress.finish(&format!("{}: failed", cfg.label));
        return Err(e);
    }
    let elapsed = match (shared.gate.opened_at(), last_end) {
        (Some(start), Some(end)) => end.saturating_duration_since(start),
        _ => Duration::ZERO,
    };
    let outcome = PhaseOutcome {
        measurements,
        elapsed,
        verify_failures,
        stopped_early,
    };
    progress.finish(&format!(
        "{}: {} ops in {:.2} s, {} ops/s{}",
        cfg.label,
        outcome.measurements.total_ops(),
        elapsed.as_secs_f64(),
        format_rate(outcome.throughput()),
        if stopped_early {
            " (time limit reached)"
        } else {
            ""
        }
    ));
    Ok(outcome)
}

/// Shows progress until every worker has finished; stops the phase at the time limit.
fn monitor(
    cfg: &PhaseConfig,
    shared: &Shared,
    progress: &dyn ProgressSink,
    finished: &mpsc::Receiver<()>,
) {
    let mut remaining = cfg.threads;
    let mut last = (Instant::now(), 0u64);
    while remaining > 0 {
        match finished.recv_timeout(MONITOR_INTERVAL) {
            Ok(()) => remaining -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let done: u64 = shared.done.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        let now = Instant::now();
        let dt = now.saturating_duration_since(last.0).as_secs_f64();
        if dt >= MONITOR_INTERVAL.as_secs_f64() / 2.0 {
            progress.update(done, done.saturating_sub(last.1) as f64 / dt);
            last = (now, done);
        }
        if let (Some(limit), Some(start)) = (cfg.max_time, shared.gate.opened_at())
            && now.saturating_duration_since(start) >= limit
        {
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether `value` starts with `fingerprint` (its key's, when the store returned the right
/// record).
#[inline]
fn has_fingerprint(value: &[u8], fingerprint: &[u8; VALUE_HEADER_LEN]) -> bool {
    value.get(..VALUE_HEADER_LEN) == Some(&fingerprint[..])
}

/// A worker's client and reusable buffers.
struct Worker<'c> {
    client: &'c mut dyn Client,
    keys: KeyBuilder,
    read_buf: Vec<u8>,
    verify: bool,
    verify_failures: u64,
    /// Key numbers of the reads waiting for [`Worker::read_gathered`], and whether each is
    /// timed (prepared reads; a batch is timed as one call).
    batch: Vec<u64>,
    batch_timed: Vec<bool>,
    /// The prepared reads' key fingerprints.
    batch_fingerprints: Vec<[u8; VALUE_HEADER_LEN]>,
    /// The batch's keys, values and answers (reused).
    batch_keys: Vec<Vec<u8>>,
    batch_values: Vec<Vec<u8>>,
    batch_found: Vec<bool>,
}

impl<'c> Worker<'c> {
    fn new(client: &'c mut dyn Client, key_size: usize, verify: bool) -> Self {
        Worker {
            client,
            keys: KeyBuilder::new(key_size),
            read_buf: Vec::new(),
            verify,
            verify_failures: 0,
            batch: Vec::new(),
            batch_timed: Vec::new(),
            batch_fingerprints: Vec::new(),
            batch_keys: Vec::new(),
            batch_values: Vec::new(),
            batch_found: Vec::new(),
        }
    }

    /// Reads the waiting reads: in one [`Client::get_many`] call if `batched`, else one
    /// [`Client::get`] after another with their keys built beforehand (prepared reads,
    /// each timed or only counted as it was marked).
    fn read_gathered(&mut self, rec: &mut ThreadRecorder, batched: bool) -> Result<()> {
        if batched {
            return self.read_batch(rec);
        }
        let n = self.batch.len();
        if n == 0 {
            return Ok(());
        }
        self.batch_keys.resize_with(n, Vec::new);
        self.batch_fingerprints.resize(n, [0; VALUE_HEADER_LEN]);
        for i in 0..n {
            self.keys.build(self.batch[i]);
            let key = &mut self.batch_keys[i];
            key.clear();
            key.extend_from_slice(self.keys.key());
            self.batch_fingerprints[i] = self.keys.fingerprint();
        }
        for i in 0..n {
            let (key, buf) = (&self.batch_keys[i], &mut self.read_buf);
            let client = &mut self.client;
            let found = recorded(rec, OpKind::Read, self.batch_timed[i], || {
                client.get(key, buf)
            })?;
            let fingerprint = self.batch_fingerprints[i];
            self.check(found, &fingerprint);
        }
        self.batch.clear();
        self.batch_timed.clear();
        Ok(())
    }

    /// Reads the waiting batch in one [`Client::get_many`] call, timed as one span that each
    /// of its reads is recorded with (the time its caller waited for it), then checks every
    /// value's fingerprint.
    fn read_batch(&mut self, rec: &mut ThreadRecorder) -> Result<()> {
        let n = self.batch.len();
        if n == 0 {
            return Ok(());
        }
        self.batch_keys.resize_with(n, Vec::new);
        self.batch_values.resize_with(n, Vec::new);
        self.batch_found.resize(n, false);
        for (&keynum, key) in self.batch.iter().zip(&mut self.batch_keys) {
            self.keys.build(keynum);
            key.clear();
            key.extend_from_slice(self.keys.key());
        }
        let refs: Vec<&[u8]> = self.batch_keys[..n].iter().map(Vec::as_slice).collect();
        let t0 = rec.now();
        self.client.get_many(
            &refs,
            &mut self.batch_values[..n],
            &mut self.batch_found[..n],
        )?;
        let t1 = rec.now();
        for i in 0..n {
            rec.record_span(OpKind::Read, t0, t1, self.batch_found[i]);
            if self.verify && self.batch_found[i] {
                self.keys.build(self.batch[i]);
                if !has_fingerprint(&self.batch_values[i], &self.keys.fingerprint()) {
                    self.verify_failures += 1;
                }
            }
        }
        self.batch.clear();
        self.batch_timed.clear();
        Ok(())
    }

    fn finish(self, recorder: ThreadRecorder) -> WorkerResult {
        WorkerResult {
            recorder,
            end: Instant::now(),
            verify_failures: self.verify_failures,
        }
    }

    /// Counts a failure when a value was `found` without the fingerprint of its key.
    #[inline]
    fn check(&mut self, found: bool, fingerprint: &[u8; VALUE_HEADER_LEN]) {
        if self.verify && found && !has_fingerprint(&self.read_buf, fingerprint) {
            self.verify_failures += 1;
        }
    }

    /// Performs `op`, recording it in `rec` when measuring, with its latency if `time`. Only
    /// the store calls are timed, as in YCSB: the key, its fingerprint and the value are built
    /// before the clock starts; a read's value is checked, and an insert acknowledged, after
    /// it stops.
    #[inline]
    fn perform(
        &mut self,
        stream: &mut OperationStream<'_>,
        keyspace: &KeySpace,
        op: Operation,
        rec: Option<&mut ThreadRecorder>,
        time: bool,
    ) -> Result<()> {
        self.keys.build(op.keynum());
        match op {
            Operation::Update { .. }
            | Operation::Insert { .. }
            | Operation::ReadModifyWrite { .. } => {
                let fingerprint = self.keys.fingerprint();
                stream.with_value(fingerprint, |value| {
                    self.timed(op, value, &fingerprint, rec, time)
                })?;
                if let Operation::Insert { keynum } = op {
                    // After the timed call, as YCSB acknowledges.
                    keyspace.acknowledge_insert(keynum);
                }
            }
            Operation::Read { .. } => {
                // The fingerprint is only needed to check the value: after the timed call.
                let found = self.timed(op, &[], &[0; VALUE_HEADER_LEN], rec, time)?;
                let fingerprint = self.keys.fingerprint();
                self.check(found, &fingerprint);
            }
            Operation::Scan { .. } | Operation::Delete { .. } => {
                self.timed(op, &[], &[0; VALUE_HEADER_LEN], rec, time)?;
            }
        }
        Ok(())
    }

    /// [`execute`](Self::execute), recorded into `rec` when measuring (timed if `time`).
    #[inline(always)]
    fn timed(
        &mut self,
        op: Operation,
        value: &[u8],
        fingerprint: &[u8; VALUE_HEADER_LEN],
        rec: Option<&mut ThreadRecorder>,
        time: bool,
    ) -> Result<bool> {
        match rec {
            Some(rec) => recorded(rec, op.kind(), time, || {
                self.execute(op, value, fingerprint)
            }),
            None => self.execute(op, value, fingerprint),
        }
    }

    /// The store calls of `op` with `value` (for writes); whether the record was found.
    #[inline(always)]
    fn execute(
        &mut self,
        op: Operation,
        value: &[u8],
        fingerprint: &[u8; VALUE_HEADER_LEN],
    ) -> Result<bool> {
        let key = self.keys.key();
        Ok(match op {
            Operation::Read { .. } => self.client.get(key, &mut self.read_buf)?,
            Operation::Update { .. } => self.client.update(key, value)?,
            Operation::Insert { .. } => {
                self.client.put(key, value)?;
                true
            }
            Operation::Scan { length, .. } => {
                let verify = self.verify;
                let mut bad = 0u64;
                let n = self.client.scan(key, length, &mut |k, v| {
                    if verify && !value_matches_key(k, v) {
                        bad += 1;
                    }
                })?;
                self.verify_failures += bad;
                n > 0
            }
            Operation::ReadModifyWrite { .. } => {
                let found = self.client.get(key, &mut self.read_buf)?;
                self.check(found, fingerprint);
                found && self.client.update(self.keys.key(), value)?
            }
            Operation::Delete { .. } => self.client.delete(key)?,
        })
    }
}

/// Runs one store call of `kind` and records it in `rec`: timed between two clock readings if
/// `time`, else only counted (see `PhaseConfig::latency_every`). Whether the record was found.
#[inline(always)]
fn recorded(
    rec: &mut ThreadRecorder,
    kind: OpKind,
    time: bool,
    call: impl FnOnce() -> Result<bool>,
) -> Result<bool> {
    if !time {
        let found = call()?;
        rec.count_untimed(kind, found);
        return Ok(found);
    }
    let t0 = rec.now();
    let found = call()?;
    let t1 = rec.now();
    rec.record_span(kind, t0, t1, found);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        for total in [0u64, 1, 7, 100, 101] {
            for threads in 1..5 {
                let sum: u64 = (0..threads).map(|t| share(total, threads, t)).sum();
                assert_eq!(sum, total);
            }
        }
    }
}
