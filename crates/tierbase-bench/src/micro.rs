//! Micro benchmarks in Viper's style: insert, get, update and delete measured separately, each
//! on a freshly loaded store, with uniform or zipfian keys.
//!
//! Owns: turning a list of micro operations and key distributions into workload specs for
//! [`crate::plan::run_plan`]. Must not touch: measurement or output (the plan and the result
//! file do that, so micro results render in `tierbase report` like any other run).

use crate::error::{BenchError, Result};
use crate::workload::{CoreWorkload, RequestDistribution, SizeSpec, WorkloadSpec};

/// One micro operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MicroOp {
    /// Insert `record_count` new keys (the load phase, measured).
    Insert,
    /// Point reads of existing keys.
    Get,
    /// Replacing the values of existing keys.
    Update,
    /// Deleting existing keys.
    Delete,
}

impl MicroOp {
    /// All micro operations, in report order.
    pub const ALL: [MicroOp; 4] = [
        MicroOp::Insert,
        MicroOp::Get,
        MicroOp::Update,
        MicroOp::Delete,
    ];

    /// Name on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            MicroOp::Insert => "insert",
            MicroOp::Get => "get",
            MicroOp::Update => "update",
            MicroOp::Delete => "delete",
        }
    }

    /// Parses a comma-separated list (`insert,get`); `all` means every operation.
    pub fn parse_list(list: &str) -> Result<Vec<MicroOp>> {
        let mut out = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part.eq_ignore_ascii_case("all") {
                out.extend(MicroOp::ALL);
                continue;
            }
            let op = MicroOp::ALL
                .into_iter()
                .find(|o| o.name().eq_ignore_ascii_case(part))
                .ok_or_else(|| {
                    BenchError::invalid(format!(
                        "unknown micro operation '{part}' (known: insert, get, update, delete, all)"
                    ))
                })?;
            out.push(op);
        }
        if out.is_empty() {
            return Err(BenchError::invalid("no micro operation given"));
        }
        out.dedup();
        Ok(out)
    }
}

/// Parses a comma-separated list of key distributions (`uniform,zipfian`).
pub fn parse_distributions(list: &str) -> Result<Vec<RequestDistribution>> {
    let out: Vec<RequestDistribution> = list
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(RequestDistribution::parse)
        .collect::<Result<_>>()?;
    if out.is_empty() {
        return Err(BenchError::invalid("no key distribution given"));
    }
    Ok(out)
}

/// The workload specs of a micro benchmark: one insert run (distributions do not apply), and
/// one get/update/delete run per distribution. Deletes run `operations / 2` times at most (and
/// at most half the records), so that most of them find a key.
pub fn specs(
    ops: &[MicroOp],
    distributions: &[RequestDistribution],
    records: u64,
    operations: u64,
    key_size: usize,
    value_size: u64,
) -> Result<Vec<WorkloadSpec>> {
    let mut out = Vec::new();
    for &op in ops {
        let base = |name: String, dist: RequestDistribution| {
            let mut s = CoreWorkload::C.spec(records, operations);
            s.name = name;
            s.read_proportion = 0.0;
            s.request_distribution = dist;
            s.key_size = key_size;
            s.value_size = SizeSpec::Fixed(value_size);
            s
        };
        if op == MicroOp::Insert {
            let mut s = CoreWorkload::Load.spec(records, 0);
            s.name = "insert".into();
            s.key_size = key_size;
            s.value_size = SizeSpec::Fixed(value_size);
            out.push(s);
            continue;
        }
        for &dist in distributions {
            let mut s = base(format!("{}-{}", op.name(), dist.name()), dist);
            match op {
                MicroOp::Get => s.read_proportion = 1.0,
                MicroOp::Update => s.update_proportion = 1.0,
                MicroOp::Delete => {
                    s.delete_proportion = 1.0;
                    s.operation_count = operations.min(records / 2).max(1);
                }
                MicroOp::Insert => {}
            }
            out.push(s);
        }
    }
    for s in &out {
        s.validate()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_cover_each_operation_once_per_distribution() {
        let dists = [RequestDistribution::Uniform, RequestDistribution::Zipfian];
        let s = specs(&MicroOp::ALL, &dists, 1000, 500, 16, 200).unwrap();
        let names: Vec<&str> = s.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "insert",
                "get-uniform",
                "get-zipfian",
                "update-uniform",
                "update-zipfian",
                "delete-uniform",
                "delete-zipfian"
            ]
        );
        assert!(s[0].load_only);
        assert_eq!(s[5].delete_proportion, 1.0);
        assert_eq!(s[5].operation_count, 500);
        assert!(
            s.iter()
                .all(|w| w.key_size == 16 && w.value_size == SizeSpec::Fixed(200))
        );
        assert!(MicroOp::parse_list("get,bogus").is_err());
        assert_eq!(MicroOp::parse_list("all").unwrap(), MicroOp::ALL);
        assert!(parse_distributions("uniform,latest,nope").is_err());
    }
}

/// One thread count's recovery timings.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RecoveryRun {
    /// Recovery threads.
    pub threads: usize,
    /// Median of the samples, in seconds.
    pub median_s: f64,
    /// Every timed open, in seconds (index rebuild as the store reports it).
    pub samples_s: Vec<f64>,
}

/// What [`recovery`] measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RecoveryReport {
    /// Records in the store.
    pub records: u64,
    /// Region size in bytes.
    pub region_bytes: u64,
    /// Medium of the store file.
    pub medium: String,
    /// Durability mode of the store.
    pub durability: String,
    /// The cache-line flush instruction of the store's persists.
    pub flush: String,
    /// Whether the timed opens recovered the image a crash leaves (every record checked)
    /// rather than a cleanly closed store.
    pub after_crash: bool,
    /// DRAM the reopened store holds (index and page/block metadata), in bytes.
    pub dram_bytes: u64,
    /// DRAM of the index alone, in bytes (for Plush: the DRAM level with its filters, as
    /// `dram_bytes`).
    pub index_bytes: u64,
    /// The store timed (`kv` or `plush`).
    pub store: String,
    /// Log entries recovery read (Plush; 0 for `kv`).
    pub log_entries: u64,
    /// One entry per thread count.
    pub runs: Vec<RecoveryRun>,
}

/// What [`recovery`] measures.
#[derive(Debug, Clone)]
pub struct RecoveryPlan {
    /// Records loaded before the store is closed and reopened.
    pub records: u64,
    /// Key size in bytes (8..=4096).
    pub key_size: usize,
    /// Value size in bytes (at most 1 MiB).
    pub value_size: usize,
    /// Recovery thread counts, one run each.
    pub threads: Vec<usize>,
    /// Timed reopenings per thread count.
    pub repeat: usize,
    /// Time recovery from a crash image (every record checked) instead of after a clean close.
    pub after_crash: bool,
    /// The store whose recovery is timed.
    pub store: RecoveryStore,
}

/// Stores [`recovery`] can time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryStore {
    /// The hybrid KV store: a parallel scan of every record rebuilds the DRAM index, so its
    /// time grows with the record count.
    Kv,
    /// Plush: the DRAM level is rebuilt from the recovery logs, whose size the configuration
    /// fixes, so its time should not grow with the record count.
    Plush,
}

impl RecoveryStore {
    /// Name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            RecoveryStore::Kv => "kv",
            RecoveryStore::Plush => "plush",
        }
    }

    /// Parses `kv` or `plush`.
    pub fn parse(name: &str) -> Result<Self> {
        match name.trim() {
            "kv" => Ok(RecoveryStore::Kv),
            "plush" => Ok(RecoveryStore::Plush),
            other => Err(BenchError::invalid(format!(
                "recovery: unknown store {other:?} (kv or plush)"
            ))),
        }
    }
}

/// Builds a fixed-layout `kv` store with `records` records in a fresh directory under `dir`,
/// then times reopening it (the parallel recovery scan that rebuilds the DRAM index) `repeat`
/// times per thread count — after a clean close, or with `after_crash` from the image a crash
/// leaves (a copy of the file taken while the store is open). Checks that every open recovers
/// every record. Removes the store.
pub fn recovery(
    dir: &std::path::Path,
    plan: &RecoveryPlan,
    log: &mut dyn FnMut(&str),
) -> Result<RecoveryReport> {
    use tierbase::kv::{KvOptions, KvStore, RecordLayout};
    let RecoveryPlan {
        records,
        key_size,
        value_size,
        ref threads,
        repeat,
        after_crash,
        store: which,
    } = *plan;
    if records == 0 || repeat == 0 || threads.is_empty() {
        return Err(BenchError::invalid(
            "recovery needs at least 1 record, 1 repetition and 1 thread count",
        ));
    }
    if !(8..=4096).contains(&key_size) || value_size > 1 << 20 {
        return Err(BenchError::invalid(format!(
            "recovery: key size must be 8..=4096 bytes and value size at most 1 MiB \
             (got {key_size} and {value_size})"
        )));
    }
    // Made if missing (and removed again), as `bench ycsb` and `bench micro` make theirs.
    let _made = crate::cleanup::make_dir(dir, true)?;
    let work = crate::cleanup::temp_dir("tierbase-recovery-", dir)?;
    if which == RecoveryStore::Plush {
        return recovery_plush(work.path(), plan, log);
    }
    let path = work.path().join("kv.tb");
    let layout = RecordLayout::Fixed {
        key_size: key_size as u32,
        value_size: value_size as u32,
    };
    let record_bytes = tierbase::kv::layout::slot_size(key_size as u32, value_size as u32);
    let opts = KvOptions::default()
        .layout(layout)
        .initial_size(records * record_bytes * 11 / 10);
    let store = KvStore::create(&path, &opts)?;
    log(&format!(
        "loading {records} records into {}",
        path.display()
    ));
    load_in_parallel(records, key_size, value_size, || {
        let mut c = store.client();
        move |k: &[u8], v: &[u8]| c.put(k, v).map(drop).map_err(BenchError::from)
    })?;
    let region_bytes = store.region().len();
    let durability = store.durability().name().to_string();
    let flush = store.region().flush_instruction().name().to_string();
    store.close()?;
    let medium = crate::adapter::file_medium(work.path()).to_string();
    let mut runs = Vec::new();
    let (mut dram_bytes, mut index_bytes) = (0, 0);
    // The image a crash leaves: the file as it is while the store is open (its clean-close
    // mark cleared), so recovery checks every record and clears free space.
    let crash_path = work.path().join("crashed.tb");
    let crash_image = || -> Result<()> {
        let open = KvStore::open(&path, &opts)?;
        std::fs::copy(&path, &crash_path)
            .map_err(|e| BenchError::io("copy the open store to", &crash_path, e))?;
        open.close()?;
        Ok(())
    };
    for &t in threads.iter() {
        let mut samples = Vec::new();
        for _ in 0..repeat {
            let o = opts.clone().recovery_threads(t);
            let timed = if after_crash {
                crash_image()?;
                &crash_path
            } else {
                &path
            };
            let store = KvStore::open(timed, &o)?;
            if store.recovery().after_clean_close == after_crash {
                return Err(BenchError::invalid(
                    "recovery did not see the close it was meant to time",
                ));
            }
            if store.len() as u64 != records {
                return Err(BenchError::invalid(format!(
                    "recovery found {} records, expected {records}",
                    store.len()
                )));
            }
            samples.push(store.recovery().duration.as_secs_f64());
            let stats = store.stats();
            dram_bytes = stats.dram_bytes;
            index_bytes = stats.index_bytes;
            store.close()?;
            if after_crash {
                let _ = std::fs::remove_file(&crash_path);
            }
        }
        runs.push(recovery_run(t, samples, log));
    }
    Ok(RecoveryReport {
        records,
        region_bytes,
        medium,
        durability,
        flush,
        after_crash,
        dram_bytes,
        index_bytes,
        store: which.name().into(),
        log_entries: 0,
        runs,
    })
}

/// Loads `records` distinct keys (`key_size` bytes, the first 8 a mix of the index) with
/// `value_size`-byte values through two threads, each with its own writer from `writer`.
fn load_in_parallel<W: FnMut(&[u8], &[u8]) -> Result<()>>(
    records: u64,
    key_size: usize,
    value_size: usize,
    writer: impl Fn() -> W + Sync,
) -> Result<()> {
    let loaders = 2u64;
    std::thread::scope(|s| -> Result<()> {
        let handles: Vec<_> = (0..loaders)
            .map(|t| {
                let writer = &writer;
                s.spawn(move || -> Result<()> {
                    let mut put = writer();
                    let mut key = vec![0u8; key_size];
                    let value = vec![0xA5u8; value_size];
                    let mut i = t;
                    while i < records {
                        key[..8].copy_from_slice(&tierbase::kv::index_mix(i).to_le_bytes());
                        put(&key, &value)?;
                        i += loaders;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| BenchError::WorkerPanicked("recovery loader".into()))??;
        }
        Ok(())
    })
}

/// One thread count's samples, with their median, logged.
fn recovery_run(threads: usize, samples: Vec<f64>, log: &mut dyn FnMut(&str)) -> RecoveryRun {
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    let median_s = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    log(&format!(
        "recovery with {threads} thread(s): median {median_s:.3} s"
    ));
    RecoveryRun {
        threads,
        median_s,
        samples_s: samples,
    }
}

/// [`recovery`] of a Plush store (8-byte keys and values: the fixed layout; otherwise the
/// variable one) in `work`. Loaded with migration on the inserting threads, so nothing moves
/// while the crash image is copied.
fn recovery_plush(
    work: &std::path::Path,
    plan: &RecoveryPlan,
    log: &mut dyn FnMut(&str),
) -> Result<RecoveryReport> {
    use tierbase::hash::{PlushLayout, PlushOptions, PlushStore};
    let path = work.join("plush.tb");
    let layout = if plan.key_size == 8 && plan.value_size == 8 {
        PlushLayout::Fixed8
    } else {
        PlushLayout::Variable
    };
    let opts = PlushOptions::default().layout(layout);
    let store = PlushStore::create(&path, &opts.clone().migrators(0))?;
    log(&format!(
        "loading {} records into {}",
        plan.records,
        path.display()
    ));
    load_in_parallel(plan.records, plan.key_size, plan.value_size, || {
        let store = &store;
        move |k: &[u8], v: &[u8]| store.upsert(k, v).map_err(BenchError::from)
    })?;
    let region_bytes = store.region().len();
    let durability = store.region().durability().name().to_string();
    let flush = store.region().flush_instruction().name().to_string();
    let crash_path = work.join("crashed.tb");
    if plan.after_crash {
        // The image a crash leaves: the file while the store is open and idle.
        std::fs::copy(&path, &crash_path)
            .map_err(|e| BenchError::io("copy the open store to", &crash_path, e))?;
    }
    store.close()?;
    if plan.after_crash {
        // Only the image is timed: free the medium (tmpfs is memory).
        let _ = std::fs::remove_file(&path);
    }
    let medium = crate::adapter::file_medium(work).to_string();
    let (mut runs, mut dram_bytes, mut log_entries) = (Vec::new(), 0, 0);
    for &t in &plan.threads {
        let mut samples = Vec::new();
        for _ in 0..plan.repeat {
            let timed = if plan.after_crash {
                // Recovery rewrites what it replays: time a fresh copy each time.
                let copy = work.join("timed.tb");
                std::fs::copy(&crash_path, &copy)
                    .map_err(|e| BenchError::io("copy the crash image to", &copy, e))?;
                copy
            } else {
                path.clone()
            };
            let mut o = opts.clone();
            o.recovery_threads = t;
            let store = PlushStore::open(&timed, &o)?;
            let found = store.len()?;
            if found != plan.records {
                return Err(BenchError::invalid(format!(
                    "recovery found {found} records, expected {}",
                    plan.records
                )));
            }
            let report = store.recovery_report();
            samples.push(report.total.as_secs_f64());
            log_entries = report.log_entries;
            dram_bytes = store.stats().dram_bytes;
            store.close()?;
        }
        runs.push(recovery_run(t, samples, log));
    }
    Ok(RecoveryReport {
        records: plan.records,
        region_bytes,
        medium,
        durability,
        flush,
        after_crash: plan.after_crash,
        dram_bytes,
        index_bytes: dram_bytes,
        store: RecoveryStore::Plush.name().into(),
        log_entries,
        runs,
    })
}
