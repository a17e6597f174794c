//! A whole benchmark: one store, several workloads × thread counts × repetitions.
//!
//! Owns: [`BenchPlan`] (with its validation and the defaults of `tierbase bench ycsb`), the
//! data directories of the runs, the store's life cycle per run (open, load, run, close,
//! remove), and the median over repetitions ([`run_plan`]). Must not touch: how phases are
//! measured (see `runner`) or written (see `results`).
//!
//! Every repetition of every configuration starts from a freshly opened, empty store in a fresh
//! directory, is loaded with `record_count` records by the same number of threads it then runs
//! with, and is closed and its directory removed afterwards (unless `keep_data`). The
//! configuration's record is the repetition with the median throughput (the upper middle one for
//! an even count); all repetitions' throughputs are kept in `throughput_samples`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tierbase::device::DeviceProfile;

use crate::adapter::{StoreInfo, StoreOptions, find_store, open_store};
use crate::error::{BenchError, Result};
use crate::progress::ProgressSink;
use crate::results::{LoadSummary, RunResult};
use crate::runner::{PhaseConfig, PhaseOutcome, run_load, run_transactions};
use crate::workload::ops::KeySpace;
use crate::workload::{CoreWorkload, WorkloadSpec};

/// The store `tierbase bench ycsb` uses when none is given. Change it here (one place) when a
/// tierbase store becomes the default.
pub const DEFAULT_STORE: &str = "kv";
/// Default thread counts.
pub const DEFAULT_THREADS: &[usize] = &[1, 2];
/// Default seed.
pub const DEFAULT_SEED: u64 = 42;
/// Default warm-up: this share of the measured operations, run first and not measured.
pub const DEFAULT_WARMUP: Warmup = Warmup::Fraction(0.1);
/// Default time limit of one measured window.
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(20);
/// Most threads accepted.
pub const MAX_THREADS: usize = 1024;
/// Most repetitions accepted.
pub const MAX_REPETITIONS: usize = 100;

/// How many unmeasured operations precede the measured window of a run phase.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Warmup {
    /// A fixed number of operations (split over the threads).
    Ops(u64),
    /// A share of the measured operation count (`0.1` = 10%).
    Fraction(f64),
}

impl Warmup {
    /// Parses `5000` (operations) or `10%` (share of the measured operations).
    pub fn parse(s: &str) -> Result<Self> {
        let t = s.trim();
        let bad = || {
            BenchError::invalid(format!(
                "invalid warm-up '{s}': give operations (5000) or a percentage of the measured \
                 operations (10%)"
            ))
        };
        if let Some(pct) = t.strip_suffix('%') {
            let p: f64 = pct.trim().parse().map_err(|_| bad())?;
            if !(0.0..=1000.0).contains(&p) {
                return Err(bad());
            }
            Ok(Warmup::Fraction(p / 100.0))
        } else {
            Ok(Warmup::Ops(t.parse().map_err(|_| bad())?))
        }
    }

    /// Warm-up operations for a run of `ops` measured operations.
    pub fn ops_for(&self, ops: u64) -> u64 {
        match *self {
            Warmup::Ops(n) => n,
            Warmup::Fraction(f) => (ops as f64 * f).round() as u64,
        }
    }
}

/// Parses a comma-separated list of thread counts (`1,2,4`), each at least 1.
pub fn parse_thread_list(list: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: usize = part.parse().map_err(|_| {
            BenchError::invalid(format!(
                "invalid thread count '{part}' in '{list}': expected numbers such as 1,2,4"
            ))
        })?;
        out.push(n);
    }
    if out.is_empty() {
        return Err(BenchError::invalid("no thread count given"));
    }
    check_threads(&out)?;
    Ok(out)
}

fn check_threads(threads: &[usize]) -> Result<()> {
    if threads.is_empty() {
        return Err(BenchError::invalid("no thread count given"));
    }
    for &n in threads {
        if n == 0 {
            return Err(BenchError::invalid(
                "thread count must be at least 1 (got 0)",
            ));
        }
        if n > MAX_THREADS {
            return Err(BenchError::invalid(format!(
                "thread count {n} is too large (at most {MAX_THREADS})"
            )));
        }
    }
    Ok(())
}

/// Where runs keep their data when no directory is given: `/dev/shm` when it is a writable
/// memory-backed file system — the stand-in for persistent memory on machines without it
/// (process-crash durability) — else the temporary directory. Every result names the medium
/// it actually ran on.
pub fn default_data_root() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let usable = shm.is_dir()
        && tierbase::device::fs_kind(shm) == tierbase::device::FsKind::Memory
        && tempfile::Builder::new()
            .prefix(".tierbase-probe-")
            .tempdir_in(shm)
            .is_ok();
    if usable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// A benchmark to run.
#[derive(Clone, Debug)]
pub struct BenchPlan {
    /// Store registry name.
    pub store: String,
    /// Workloads, run in order.
    pub workloads: Vec<WorkloadSpec>,
    /// Thread counts, each run separately.
    pub threads: Vec<usize>,
    /// Seed of every operation stream.
    pub seed: u64,
    /// Warm-up before each measured run phase.
    pub warmup: Warmup,
    /// Repetitions of each configuration (the median is reported).
    pub repetitions: usize,
    /// Time limit of each measured run phase (`None` = none).
    pub max_time: Option<Duration>,
    /// Parent directory of the stores' data; `None` = a fresh temporary directory.
    pub dir: Option<PathBuf>,
    /// Keep each run's data directory instead of removing it.
    pub keep_data: bool,
    /// Device profile for stores to emulate.
    pub emulate: Option<DeviceProfile>,
    /// Check value fingerprints on reads.
    pub verify: bool,
    /// Flush instruction for stores on persistent regions (see [`StoreOptions::flush`]).
    pub flush: Option<tierbase::device::FlushInstruction>,
    /// Pre-size stores for the run's records (see [`StoreOptions::presize`]).
    pub presize: bool,
    /// When acknowledged writes become durable (see [`StoreOptions::durability`]).
    pub durability: tierbase::device::Durability,
    /// DRAM budget of stores with a buffer pool (see [`StoreOptions::dram_budget`]).
    pub dram_budget: Option<u64>,
    /// ACE write-back batch of stores with a buffer pool (see
    /// [`StoreOptions::write_back_batch`]).
    pub write_back_batch: Option<usize>,
    /// NVM budget of stores with an NVM tier (see [`StoreOptions::nvm_budget`]).
    pub nvm_budget: Option<u64>,
    /// Where their NVM region file goes (see [`StoreOptions::nvm_dir`]).
    pub nvm_dir: Option<std::path::PathBuf>,
    /// Memory profile their NVM tier emulates (see [`StoreOptions::nvm_emulate`]).
    pub nvm_emulate: Option<DeviceProfile>,
    /// Keep their log in files (see [`StoreOptions::wal_files`]).
    pub wal_files: bool,
    /// Load NVM pages whole (see [`StoreOptions::nvm_pages`]).
    pub nvm_pages: bool,
    /// Percent of the DRAM budget for mini pages (see [`StoreOptions::mini_page_percent`]).
    pub mini_page_percent: Option<u8>,
    /// Page size of stores with pages (see [`StoreOptions::page_size`]).
    pub page_size: Option<usize>,
    /// B-tree point reads pass inner pages optimistically (see
    /// [`StoreOptions::optimistic_reads`]).
    pub optimistic_reads: bool,
    /// B-tree pointer swizzling (see [`StoreOptions::swizzle`]).
    pub swizzle: Option<bool>,
    /// Charge RocksDB's memtables to the DRAM budget (see
    /// [`StoreOptions::memtables_in_budget`]).
    pub memtables_in_budget: bool,
    /// Measured reads issued together through one batched call (see
    /// [`PhaseConfig::read_batch`]; 1: one `get` each).
    pub read_batch: usize,
    /// Time one measured operation in this many (see [`PhaseConfig::latency_every`]; 1:
    /// every one).
    pub latency_every: u64,
    /// Measured reads prepared together (see [`PhaseConfig::prepared_reads`]; 1: none).
    pub prepared_reads: usize,
}

impl BenchPlan {
    /// A plan for `store` with the defaults of `tierbase bench ycsb` (workload A, 100k
    /// records, 1M operations, threads 1 and 2, one repetition).
    pub fn new(store: impl Into<String>) -> Self {
        BenchPlan {
            store: store.into(),
            workloads: vec![CoreWorkload::A.spec(
                crate::workload::DEFAULT_RECORD_COUNT,
                crate::workload::DEFAULT_OPERATION_COUNT,
            )],
            threads: DEFAULT_THREADS.to_vec(),
            seed: DEFAULT_SEED,
            warmup: DEFAULT_WARMUP,
            repetitions: 1,
            max_time: Some(DEFAULT_MAX_TIME),
            dir: None,
            keep_data: false,
            emulate: None,
            verify: true,
            flush: None,
            presize: true,
            durability: tierbase::device::Durability::Immediate,
            dram_budget: None,
            write_back_batch: None,
            nvm_budget: None,
            nvm_dir: None,
            nvm_emulate: None,
            wal_files: false,
            nvm_pages: false,
            mini_page_percent: None,
            page_size: None,
            optimistic_reads: false,
            swizzle: None,
            memtables_in_budget: false,
            read_batch: 1,
            latency_every: 1,
            prepared_reads: 1,
        }
    }

    /// Checks the whole plan before anything runs.
    pub fn validate(&self) -> Result<()> {
        find_store(&self.store)?;
        if self.workloads.is_empty() {
            return Err(BenchError::invalid("no workload given"));
        }
        for w in &self.workloads {
            w.validate()?;
        }
        check_threads(&self.threads)?;
        if self.repetitions == 0 || self.repetitions > MAX_REPETITIONS {
            return Err(BenchError::invalid(format!(
                "repetitions must be between 1 and {MAX_REPETITIONS}, got {}",
                self.repetitions
            )));
        }
        if let Some(t) = self.max_time
            && t.is_zero()
        {
            return Err(BenchError::invalid("time limit must be positive"));
        }
        if let Warmup::Fraction(f) = self.warmup
            && !(f.is_finite() && f >= 0.0)
        {
            return Err(BenchError::invalid(format!("invalid warm-up share {f}")));
        }
        if let Some(p) = &self.emulate {
            p.validate()?;
        }
        if let Some(f) = self.flush
            && !f.is_supported()
        {
            return Err(BenchError::invalid(format!(
                "flush instruction {f} is not supported by this CPU"
            )));
        }
        Ok(())
    }
}

/// One repetition's outcome.
struct Repetition {
    info: StoreInfo,
    load: PhaseOutcome,
    run: Option<PhaseOutcome>,
    warmup_ops: u64,
}

impl Repetition {
    fn measured(&self) -> &PhaseOutcome {
        self.run.as_ref().unwrap_or(&self.load)
    }
}

/// Runs `plan`, returning one [`RunResult`] per workload × thread count, in order.
pub fn run_plan(plan: &BenchPlan, progress: &dyn ProgressSink) -> Result<Vec<RunResult>> {
    plan.validate()?;
    let temp_root;
    let mut made_dir = None;
    let base: &Path = match &plan.dir {
        Some(d) => {
            // A directory this run makes goes again afterwards, unless its data is kept.
            made_dir = crate::cleanup::make_dir(d, !plan.keep_data)?;
            d
        }
        None => {
            // Removed afterwards, also on Ctrl-C (it may be in /dev/shm, that is, in RAM).
            temp_root = crate::cleanup::temp_dir("tierbase-bench-", &default_data_root())?;
            temp_root.path()
        }
    };
    let mut results = Vec::new();
    for spec in &plan.workloads {
        for &threads in &plan.threads {
            let mut reps = Vec::with_capacity(plan.repetitions);
            for rep in 0..plan.repetitions {
                reps.push(run_repetition(plan, spec, threads, rep, base, progress)?);
            }
            results.push(summarize(plan, spec, threads, reps));
        }
    }
    drop(made_dir);
    Ok(results)
}

fn run_repetition(
    plan: &BenchPlan,
    spec: &WorkloadSpec,
    threads: usize,
    rep: usize,
    base: &Path,
    progress: &dyn ProgressSink,
) -> Result<Repetition> {
    let prefix = format!("{}-{}-t{threads}-r{rep}-", plan.store, spec.name);
    let dir = crate::cleanup::temp_dir(&prefix, base)?;
    let mut opts = StoreOptions::new(dir.path());
    // The records the store will hold at the end: those loaded plus the inserts of warm-up and
    // measured operations (a sizing hint: stores pre-size for it, as Viper's benchmark sizes
    // its pool for the whole run).
    let ops = if spec.load_only {
        0
    } else {
        spec.operation_count
            .saturating_add(plan.warmup.ops_for(spec.operation_count))
    };
    opts.records = spec
        .record_count
        .saturating_add((ops as f64 * spec.insert_proportion).ceil() as u64);
    opts.key_size = spec.key_size;
    opts.value_size = usize::try_from(spec.value_size.max()).unwrap_or(usize::MAX);
    opts.value_size_fixed = spec.value_size.min() == spec.value_size.max();
    opts.threads = threads;
    opts.emulate = plan.emulate.clone();
    opts.flush = plan.flush;
    opts.presize = plan.presize;
    opts.durability = plan.durability;
    opts.dram_budget = plan.dram_budget;
    opts.write_back_batch = plan.write_back_batch;
    opts.nvm_budget = plan.nvm_budget;
    opts.nvm_dir = plan.nvm_dir.clone();
    opts.nvm_emulate = plan.nvm_emulate.clone();
    opts.wal_files = plan.wal_files;
    opts.nvm_pages = plan.nvm_pages;
    opts.mini_page_percent = plan.mini_page_percent;
    opts.page_size = plan.page_size;
    opts.optimistic_reads = plan.optimistic_reads;
    opts.swizzle = plan.swizzle;
    opts.memtables_in_budget = plan.memtables_in_budget;
    let store = open_store(&plan.store, &opts)?;
    let info = store.info();
    if spec.has_scans() && !info.capabilities.ordered_scan {
        return Err(BenchError::unsupported(
            &info.name,
            format!(
                "ordered scans, which workload '{}' needs (stores with scans in this build: \
                 {})",
                spec.name,
                crate::adapter::built_stores_with_scans().join(", ")
            ),
        ));
    }
    let reps = if plan.repetitions > 1 {
        format!(" rep {}/{}", rep + 1, plan.repetitions)
    } else {
        String::new()
    };
    let inserts_only = !spec.load_only
        && spec
            .mix()
            .iter()
            .all(|&(kind, _)| kind == crate::measure::OpKind::Insert);
    let keyspace = KeySpace::new(spec.record_count).inserts_only(inserts_only);
    let load_cfg = PhaseConfig {
        label: format!("{} load t={threads}{reps}", plan.store),
        threads,
        seed: plan.seed,
        warmup_ops: 0,
        max_time: None,
        verify: plan.verify,
        read_batch: 1,
        latency_every: 1,
        prepared_reads: 1,
    };
    let load = run_load(store.as_ref(), spec, &keyspace, &load_cfg, progress)?;
    // Counters after the load, so that the run's own can be told apart from the load's.
    let load_notes = store.info().notes;
    let warmup_ops = if spec.load_only {
        0
    } else {
        plan.warmup.ops_for(spec.operation_count)
    };
    let run = if spec.load_only {
        None
    } else {
        let cfg = PhaseConfig {
            label: format!("{} {} t={threads}{reps}", plan.store, spec.name),
            warmup_ops,
            max_time: plan.max_time,
            read_batch: plan.read_batch,
            latency_every: plan.latency_every,
            prepared_reads: plan.prepared_reads,
            ..load_cfg
        };
        Some(run_transactions(
            store.as_ref(),
            spec,
            &keyspace,
            &cfg,
            progress,
        )?)
    };
    // The notes again after the run: stores report their counters there (load and run);
    // the load's counters follow, where they differ.
    let mut info = store.info();
    if run.is_some() {
        let changed: Vec<String> = load_notes
            .into_iter()
            .filter(|n| !info.notes.contains(n))
            .map(|n| format!("after the load: {n}"))
            .collect();
        info.notes.extend(changed);
    }
    store.close()?;
    if plan.keep_data {
        let kept = dir.keep();
        progress.message(&format!("kept data in {}", kept.display()));
    } else {
        dir.remove()?;
    }
    Ok(Repetition {
        info,
        load,
        run,
        warmup_ops,
    })
}

fn summarize(
    plan: &BenchPlan,
    spec: &WorkloadSpec,
    threads: usize,
    mut reps: Vec<Repetition>,
) -> RunResult {
    let samples: Vec<f64> = reps.iter().map(|r| r.measured().throughput()).collect();
    let mut order: Vec<usize> = (0..reps.len()).collect();
    order.sort_by(|&a, &b| samples[a].total_cmp(&samples[b]));
    let median_index = order.get(order.len() / 2).copied().unwrap_or(0);
    let rep = reps.swap_remove(median_index.min(reps.len().saturating_sub(1)));
    let m = rep.measured();
    let elapsed = m.elapsed;
    let load = (!spec.load_only).then(|| LoadSummary {
        threads,
        records: spec.record_count,
        elapsed_s: rep.load.elapsed.as_secs_f64(),
        throughput: rep.load.throughput(),
    });
    RunResult {
        store: rep.info.name.clone(),
        store_label: rep.info.label(),
        medium: rep.info.medium.clone(),
        durability: rep.info.durability.clone(),
        emulated: rep.info.emulated.clone(),
        flush: rep.info.flush.clone(),
        capabilities: rep.info.capabilities,
        store_notes: rep.info.notes.clone(),
        workload: spec.name.clone(),
        workload_spec: spec.clone(),
        request_distribution: spec.request_distribution.name().to_string(),
        threads,
        record_count: spec.record_count,
        operation_count: if spec.load_only {
            spec.record_count
        } else {
            spec.operation_count
        },
        warmup_ops: rep.warmup_ops,
        key_size: spec.key_size,
        value_size: spec.value_size,
        seed: plan.seed,
        repetitions: samples.len(),
        throughput: m.throughput(),
        throughput_samples: samples,
        elapsed_s: elapsed.as_secs_f64(),
        measured_ops: m.measurements.total_ops(),
        stopped_early: m.stopped_early,
        load,
        operations: m.measurements.operation_stats(elapsed),
        timeline: m.measurements.timeline(elapsed),
        verify_failures: rep.load.verify_failures
            + rep.run.as_ref().map_or(0, |r| r.verify_failures),
        read_batch: if spec.load_only { 1 } else { plan.read_batch },
        latency_every: if spec.load_only {
            1
        } else {
            plan.latency_every
        },
        prepared_reads: if spec.load_only {
            1
        } else {
            plan.prepared_reads
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_lists() {
        assert_eq!(parse_thread_list("1, 2,4").unwrap(), vec![1, 2, 4]);
        let e = parse_thread_list("0,2").unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        assert!(parse_thread_list("x").is_err());
        assert!(parse_thread_list("").is_err());
        assert!(parse_thread_list("5000").is_err());
    }

    #[test]
    fn warmups() {
        assert_eq!(Warmup::parse("10%").unwrap().ops_for(1000), 100);
        assert_eq!(Warmup::parse("7").unwrap().ops_for(1000), 7);
        assert!(Warmup::parse("ten").is_err());
        assert!(Warmup::parse("-5%").is_err());
    }
}
