//! Memory and persistent-region benchmarks (PerMA-Bench's runtime, pmem spec section 1.2).
//!
//! Owns: one benchmark's configuration ([`MemoryConfig`]), preparing its memory (a DRAM
//! region or a region file, pre-faulted and filled with random data), the executor (threads
//! pulling pre-generated work packages from a shared queue per partition, starting together
//! at a barrier), sampled latency, and the result ([`MemoryRun`]). Must not touch: raw pointers
//! (see `raw`), config files (see `config`).
//!
//! Timing follows PerMA-Bench: the run lasts from the earliest thread start to the latest
//! thread end (after the barrier; preparation and package generation are not timed).
//! Bandwidth is bytes accessed ÷ that time in GB/s (10⁹ B/s); for access chains, ops/s counts
//! whole chain executions and bytes are the chain's bytes.

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tierbase::device::{
    Catalogue, DeviceKind, Direction, Emulator, FsKind, MappingKind, PmemRegion, RegionOptions,
    fs_kind, now_ns,
};
use tierbase_bench::report::svg::ValueFormat;
use tierbase_bench::rng::Rng;
use tierbase_bench::{BenchError, Result};

use crate::chain::{AccessChain, ChainOpKind, ChainPlan, MemoryKind, mix, parse_chain, resolve};
use crate::packages::{self, Distribution, ExecMode, Package, PackageSpec, WorkPackages};
use crate::persist::Persist;
use crate::raw::RawMem;
use crate::target::{self, TargetKind};
use crate::{LatencySummary, format_bytes, new_histogram};
use tierbase_bench::cleanup::Cleanup;

/// Read or write (raw benchmarks; chains say per operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Loads.
    Read,
    /// Stores, persisted with the persist instruction.
    Write,
}

impl Operation {
    /// Name in configs and results.
    pub fn name(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
        }
    }

    /// Parses `read` or `write`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" | "r" => Ok(Operation::Read),
            "write" | "w" => Ok(Operation::Write),
            _ => Err(BenchError::invalid(format!(
                "unknown operation '{s}': expected read or write"
            ))),
        }
    }
}

/// Random distribution kind (the skew is `zipf_alpha`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RandomDistribution {
    /// Uniform.
    Uniform,
    /// Zipf.
    Zipf,
}

impl RandomDistribution {
    /// Parses `uniform` or `zipf`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "uniform" => Ok(RandomDistribution::Uniform),
            "zipf" | "zipfian" => Ok(RandomDistribution::Zipf),
            _ => Err(BenchError::invalid(format!(
                "unknown random distribution '{s}': expected uniform or zipf"
            ))),
        }
    }
}

/// Default memory range (PerMA-Bench uses 10 GiB; this suits a 24 GiB machine shared with
/// builds).
pub const DEFAULT_MEMORY_RANGE: u64 = 1 << 30;
/// Default work-package size (PerMA-Bench's `min_io_chunk_size`).
pub const DEFAULT_PACKAGE_SIZE: u64 = 64 << 20;
/// Default latency sampling: every 1000th operation.
pub const DEFAULT_LATENCY_EVERY: u64 = 1000;
/// Upper bound of the automatic operation count.
pub const AUTO_OPS_MAX: u64 = 10_000_000;
/// Lower bound of the automatic operation count.
pub const AUTO_OPS_MIN: u64 = 100_000;

/// One memory benchmark (PerMA-Bench's `BenchmarkConfig`, with its key names).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryConfig {
    /// Bytes per access (power of two, 8 B … 1 GiB).
    pub access_size: u64,
    /// Bytes of the benchmarked region.
    pub memory_range: u64,
    /// Bytes of the extra DRAM range for `rd`/`wd` chain operations (0 = none).
    pub dram_memory_range: u64,
    /// Random accesses or chain executions; 0 = automatic (4 × the range's accesses, within
    /// 100 000 … 10 000 000). Sequential modes cover the range once and ignore it.
    pub number_operations: u64,
    /// Threads.
    pub number_threads: usize,
    /// If > 0, threads keep taking packages (cycling through them) until this many seconds
    /// have passed.
    pub run_time: f64,
    /// Read or write (raw modes).
    pub operation: Operation,
    /// Address pattern.
    pub exec_mode: ExecMode,
    /// How writes are persisted.
    pub persist_instruction: Persist,
    /// Partitions of the range (0 = one per thread).
    pub number_partitions: usize,
    /// Uniform or zipf.
    pub random_distribution: RandomDistribution,
    /// Zipf skew (0 < α < 1).
    pub zipf_alpha: f64,
    /// Access chain (exec mode `custom`).
    pub custom_operations: Option<String>,
    /// Time every k-th operation (0 = no latency sampling).
    pub latency_sample_frequency: u64,
    /// Fill the range with random data before the run (which also faults every page in).
    pub prefault: bool,
    /// Ask for transparent huge pages before the first touch.
    pub huge_pages: bool,
    /// Bytes of work per package.
    pub package_size: u64,
    /// Region file, or a directory for a temporary one; `None` = DRAM (anonymous memory).
    pub memory_path: Option<PathBuf>,
    /// Device profile to emulate on the region (`None` = native).
    pub emulate: Option<String>,
    /// Seed of the packages and data.
    pub seed: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            access_size: 256,
            memory_range: DEFAULT_MEMORY_RANGE,
            dram_memory_range: 0,
            number_operations: 0,
            number_threads: 1,
            run_time: 0.0,
            operation: Operation::Read,
            exec_mode: ExecMode::Sequential,
            persist_instruction: Persist::None,
            number_partitions: 1,
            random_distribution: RandomDistribution::Uniform,
            zipf_alpha: 0.9,
            custom_operations: None,
            latency_sample_frequency: DEFAULT_LATENCY_EVERY,
            prefault: true,
            huge_pages: true,
            package_size: DEFAULT_PACKAGE_SIZE,
            memory_path: None,
            emulate: None,
            seed: 0x0070_6572_6d61,
        }
    }
}

impl MemoryConfig {
    /// Checks the figures that do not depend on the machine; returns the parsed chain.
    pub fn validate(&self) -> Result<Option<AccessChain>> {
        let a = self.access_size;
        if !a.is_power_of_two() || !(8..=1 << 30).contains(&a) {
            return Err(BenchError::invalid(format!(
                "access_size must be a power of two from 8 B to 1 GiB, got {a}"
            )));
        }
        if self.memory_range < a {
            return Err(BenchError::invalid(format!(
                "memory_range ({}) must hold at least one access of {}",
                format_bytes(self.memory_range),
                format_bytes(a)
            )));
        }
        if self.number_threads == 0 || self.number_threads > 1024 {
            return Err(BenchError::invalid(format!(
                "number_threads must be from 1 to 1024, got {}",
                self.number_threads
            )));
        }
        if !(self.run_time.is_finite() && self.run_time >= 0.0) {
            return Err(BenchError::invalid(format!(
                "run_time must be zero or positive seconds, got {}",
                self.run_time
            )));
        }
        if self.random_distribution == RandomDistribution::Zipf
            && !(self.zipf_alpha > 0.0 && self.zipf_alpha < 1.0)
        {
            return Err(BenchError::invalid(format!(
                "zipf_alpha must be between 0 and 1 (exclusive), got {}",
                self.zipf_alpha
            )));
        }
        if self.package_size == 0 {
            return Err(BenchError::invalid("package_size must be positive"));
        }
        match (&self.custom_operations, self.exec_mode) {
            (Some(text), ExecMode::Custom) => {
                let chain = parse_chain(text)?;
                chain.plan(self.memory_range, self.dram_memory_range)?;
                Ok(Some(chain))
            }
            (None, ExecMode::Custom) => Err(BenchError::invalid(
                "exec_mode custom needs custom_operations (an access chain)",
            )),
            (Some(_), mode) => Err(BenchError::invalid(format!(
                "custom_operations given but exec_mode is {}; use exec_mode custom",
                mode.name()
            ))),
            (None, _) => Ok(None),
        }
    }

    /// Persist instructions the benchmark executes.
    pub fn persists(&self, chain: Option<&AccessChain>) -> Vec<Persist> {
        match chain {
            Some(c) => c.persists(),
            None if self.operation == Operation::Write => vec![self.persist_instruction],
            None => Vec::new(),
        }
    }

    /// The operation count this config runs (resolving 0 = automatic).
    pub fn resolved_operations(&self, chain: Option<&AccessChain>) -> u64 {
        if self.number_operations > 0 {
            return self.number_operations;
        }
        let per = chain.map_or(self.access_size, AccessChain::bytes).max(1);
        (4 * (self.memory_range / per)).clamp(AUTO_OPS_MIN, AUTO_OPS_MAX)
    }
}

/// A benchmark with its name and the matrix values that produced it.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedConfig {
    /// Benchmark name (the config file's table name, or `memory` from the command line).
    pub name: String,
    /// `key = value` of the matrix dimensions, in key order.
    pub matrix: Vec<(String, String)>,
    /// The configuration.
    pub config: MemoryConfig,
}

/// The result of one memory benchmark.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryRun {
    /// Benchmark name.
    pub benchmark: String,
    /// Matrix values of this run (`key=value`).
    pub matrix: Vec<(String, String)>,
    /// The full configuration.
    pub config: MemoryConfig,
    /// Where the memory lived: `DRAM (anonymous)`, `tmpfs file`, `disk file (page cache)`,
    /// `DAX file (MAP_SYNC)`.
    pub medium: String,
    /// Region file, if any.
    pub path: Option<PathBuf>,
    /// `emulated <profile>` or null.
    pub emulated: Option<String>,
    /// Emulated operations of the run (`null` when not emulated).
    #[serde(default)]
    pub emulated_ops: Option<u64>,
    /// Of those, how many ended after their emulated end (the native access plus the
    /// emulator's bookkeeping was slower than the profile, or the CPU was busy): the run
    /// measured this machine there, not the profile.
    #[serde(default)]
    pub emulated_late: Option<u64>,
    /// By how much, in total, those late operations overshot their emulated ends (ns).
    #[serde(default)]
    pub emulated_late_ns: Option<u64>,
    /// Whether the kernel accepted the huge-page advice.
    pub huge_pages_advised: bool,
    /// Operations (or chain executions) done.
    pub ops: u64,
    /// Bytes accessed.
    pub bytes: u64,
    /// Earliest thread start to latest thread end, seconds.
    pub elapsed_s: f64,
    /// Operations (chain executions) per second.
    pub ops_per_s: f64,
    /// Bytes per second ÷ 10⁹.
    pub bandwidth_gb_s: f64,
    /// Sampled latency of single operations (chains: of whole chains), if sampled.
    pub latency_ns: Option<LatencySummary>,
    /// Packages executed.
    pub packages: u64,
    /// Threads that ran (more than the CPUs is allowed but noted).
    pub cpus: usize,
}

impl MemoryRun {
    /// `Err` with why and what to do when operations that fell behind the profile added more
    /// than [`crate::block::LATE_TIME_LIMIT`] to the run's time (`Ok` when not emulated).
    pub fn emulation_kept_up(&self) -> std::result::Result<(), String> {
        let (Some(e), Some(ops), Some(late), Some(late_ns)) = (
            &self.emulated,
            self.emulated_ops,
            self.emulated_late,
            self.emulated_late_ns,
        ) else {
            return Ok(());
        };
        // Late operations still take at least the profile's time; what is not the profile's
        // is their overshoot, as a share of the threads' measured time.
        let measured_ns = self.elapsed_s * 1e9 * self.config.number_threads.max(1) as f64;
        let share = if measured_ns > 0.0 {
            late_ns as f64 / measured_ns
        } else {
            0.0
        };
        crate::block::emulation_kept_up(
            e.strip_prefix("emulated ").unwrap_or(e),
            (share, crate::block::LATE_TIME_LIMIT),
            &format!(
                "{late} of {ops} operations ended after their emulated end, adding {} to the \
                 measured time",
                ValueFormat::Nanos.format(late_ns as f64)
            ),
            &self.medium,
        )
    }

    /// What a reader of an emulated run's figure must be told, if anything: that no operation
    /// was charged the profile's cost (writes never persisted are not delayed), so the figure
    /// is the medium's own; or why the emulation did not keep up
    /// ([`MemoryRun::emulation_kept_up`]).
    pub fn emulation_warning(&self) -> Option<String> {
        let profile = self.emulated.as_deref()?;
        if self.emulated_ops == Some(0) {
            let name = profile.strip_prefix("emulated ").unwrap_or(profile);
            return Some(format!(
                "the emulation of {name} charged no operation of this run its cost (writes are charged when \
                 they are persisted), so the figure is that of the medium under it ({})",
                self.medium
            ));
        }
        self.emulation_kept_up().err()
    }

    /// One-line description: mode, operation, size, persist, threads, medium.
    pub fn describe(&self) -> String {
        let c = &self.config;
        let what = match &c.custom_operations {
            Some(ch) if c.exec_mode == ExecMode::Custom => format!("chain {ch}"),
            _ => {
                let mut s = format!(
                    "{} {} {}",
                    c.exec_mode.name(),
                    c.operation.name(),
                    format_bytes(c.access_size)
                );
                if c.operation == Operation::Write {
                    s.push_str(&format!(" persist={}", c.persist_instruction));
                }
                if c.exec_mode == ExecMode::Random
                    && c.random_distribution == RandomDistribution::Zipf
                {
                    s.push_str(&format!(" zipf({})", c.zipf_alpha));
                }
                s
            }
        };
        let mut medium = self.medium.clone();
        if let Some(e) = &self.emulated {
            medium = format!("{medium}, {e}");
        }
        let threads = c.number_threads;
        let plural = if threads == 1 { "" } else { "s" };
        format!("{what}, {threads} thread{plural}, {medium}")
    }
}

/// A benchmark that was not run, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SkippedRun {
    /// Benchmark name.
    pub benchmark: String,
    /// Matrix values.
    pub matrix: Vec<(String, String)>,
    /// Why.
    pub reason: String,
}

/// Options that are not part of a benchmark's configuration.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Allow writing to an existing region file.
    pub force: bool,
    /// Keep region files the profiler created.
    pub keep: bool,
    /// Directory for temporary region files when `memory_path` is a directory (else unused).
    pub temp_dir: Option<PathBuf>,
}

/// Identity of prepared memory (consecutive benchmarks with the same one share it).
#[derive(Clone, Debug, PartialEq)]
struct TargetKey {
    path: Option<PathBuf>,
    range: u64,
    dram: u64,
    prefault: bool,
    huge: bool,
    emulate: Option<String>,
    seed: u64,
}

/// Prepared memory.
struct Prepared {
    key: TargetKey,
    region: PmemRegion,
    dram: Option<PmemRegion>,
    medium: String,
    path: Option<PathBuf>,
    huge_advised: bool,
    // Dropped last: removes a file the profiler created, after the region is unmapped.
    _cleanup: Option<Cleanup>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("medium", &self.medium)
            .field("path", &self.path)
            .finish()
    }
}

/// Runs benchmarks one after the other, preparing memory once per distinct memory setting.
/// `on_result` sees each result (or skip) as it is produced.
pub fn run_all(
    list: &[NamedConfig],
    catalogue: &Catalogue,
    opts: &RunOptions,
    mut on_event: impl FnMut(MemoryEvent<'_>),
) -> Result<(Vec<MemoryRun>, Vec<SkippedRun>)> {
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    // Refuse unusable paths before any memory is prepared or any benchmark runs.
    let default_dir = opts.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut checked: Vec<&Path> = Vec::new();
    for nc in list {
        if let Some(p) = nc.config.memory_path.as_deref()
            && !checked.contains(&p)
        {
            target::resolve(Some(p), &default_dir, opts.force, false)?;
            checked.push(p);
        }
    }
    let mut prepared: Option<Prepared> = None;
    for nc in list {
        let chain = nc.config.validate().map_err(|e| {
            BenchError::invalid(format!(
                "benchmark '{}'{}: {e}",
                nc.name,
                matrix_suffix(&nc.matrix)
            ))
        })?;
        if let Some(reason) = nc
            .config
            .persists(chain.as_ref())
            .into_iter()
            .find_map(|p| p.check_supported().err())
        {
            let s = SkippedRun {
                benchmark: nc.name.clone(),
                matrix: nc.matrix.clone(),
                reason,
            };
            on_event(MemoryEvent::Skipped(&s));
            skipped.push(s);
            continue;
        }
        let key = TargetKey {
            path: nc.config.memory_path.clone(),
            range: nc.config.memory_range,
            dram: nc.config.dram_memory_range,
            prefault: nc.config.prefault,
            huge: nc.config.huge_pages,
            emulate: nc.config.emulate.clone(),
            seed: nc.config.seed,
        };
        if prepared.as_ref().is_none_or(|p| p.key != key) {
            // Release the old memory (and its file) before preparing the next.
            drop(prepared.take());
            on_event(MemoryEvent::Preparing(&nc.config));
            prepared = Some(prepare(&key, catalogue, opts)?);
        }
        let Some(p) = prepared.as_ref() else {
            continue;
        };
        let run = run_one(nc, chain.as_ref(), p)?;
        on_event(MemoryEvent::Result(&run));
        runs.push(run);
    }
    Ok((runs, skipped))
}

/// Progress of [`run_all`].
#[derive(Debug)]
pub enum MemoryEvent<'a> {
    /// Memory is being prepared (allocated, pre-faulted, filled).
    Preparing(&'a MemoryConfig),
    /// A benchmark finished.
    Result(&'a MemoryRun),
    /// A benchmark was skipped.
    Skipped(&'a SkippedRun),
}

fn matrix_suffix(m: &[(String, String)]) -> String {
    if m.is_empty() {
        String::new()
    } else {
        let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(" [{}]", parts.join(", "))
    }
}

fn prepare(key: &TargetKey, catalogue: &Catalogue, opts: &RunOptions) -> Result<Prepared> {
    let emulate = match &key.emulate {
        Some(name) => {
            let p = catalogue.require(name)?.clone();
            if p.kind != DeviceKind::Memory {
                return Err(BenchError::invalid(format!(
                    "profile '{}' is a {} device; memory benchmarks emulate memory profiles",
                    p.name, p.kind
                )));
            }
            Some(p)
        }
        None => None,
    };
    let ropts = RegionOptions {
        durability: None,
        flush: None,
        reserve: key.range,
        prefault: false,
        emulate,
        ..RegionOptions::default()
    };
    let (region, medium, path, cleanup) = match &key.path {
        None => (
            PmemRegion::anonymous(key.range, &ropts)?,
            "DRAM (anonymous)".to_string(),
            None,
            None,
        ),
        Some(given) => {
            let default_dir = opts.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
            let t = target::resolve(Some(given), &default_dir, opts.force, false)?;
            let (region, cleanup) = match t.kind {
                TargetKind::New => {
                    let (r, c) = tierbase_bench::cleanup::create_registered(&t.path, || {
                        Ok(PmemRegion::create(&t.path, key.range, &ropts)?)
                    })?;
                    let c = if opts.keep && !t.temporary {
                        c.keep();
                        None
                    } else {
                        Some(c)
                    };
                    (r, c)
                }
                TargetKind::ExistingFile => {
                    let r = PmemRegion::open(&t.path, &ropts).map_err(|e| {
                        BenchError::invalid(format!(
                            "{} exists but cannot be used as a region ({e}); remove it or \
                             choose another path",
                            t.path.display()
                        ))
                    })?;
                    if r.len() < key.range {
                        r.grow(key.range)?;
                    }
                    (r, None)
                }
                TargetKind::BlockDevice => {
                    return Err(BenchError::invalid("a block device cannot hold a region"));
                }
            };
            let medium = medium_of(&region, &t.path);
            (region, medium, Some(t.path), cleanup)
        }
    };
    let dram = if key.dram > 0 {
        Some(PmemRegion::anonymous(
            key.dram,
            &RegionOptions {
                reserve: key.dram,
                ..RegionOptions::default()
            },
        )?)
    } else {
        None
    };
    let mut huge_advised = false;
    for (i, r) in std::iter::once(&region).chain(dram.as_ref()).enumerate() {
        let m = RawMem::new(r)?;
        if key.huge {
            huge_advised |= m.advise_huge_pages();
        }
        if key.prefault {
            fill_parallel(&m, key.seed ^ i as u64);
        }
    }
    Ok(Prepared {
        key: key.clone(),
        region,
        dram,
        medium,
        path,
        huge_advised,
        _cleanup: cleanup,
    })
}

/// The medium label of a region file.
pub fn medium_of(region: &PmemRegion, path: &Path) -> String {
    match region.mapping() {
        MappingKind::DaxSync => "DAX file (MAP_SYNC)".to_string(),
        MappingKind::Anonymous => "DRAM (anonymous)".to_string(),
        MappingKind::Shared => match fs_kind(path) {
            FsKind::Memory => "tmpfs file".to_string(),
            FsKind::Disk => "disk file (page cache)".to_string(),
        },
        MappingKind::Private => "file, read-only (copy-on-write)".to_string(),
    }
}

/// Random data over the whole view, written by all CPUs.
fn fill_parallel(m: &RawMem<'_>, seed: u64) {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let len = m.len();
    let chunk = (len / cpus as u64).next_multiple_of(4096).max(4096);
    std::thread::scope(|s| {
        let mut off = 0;
        let mut i = 0;
        while off < len {
            let n = chunk.min(len - off);
            let (o, idx) = (off, i);
            s.spawn(move || {
                let mut rng = Rng::derive(seed, 0x4649_4c4c, idx);
                m.fill_random(o, n as usize, &mut rng);
            });
            off += n;
            i += 1;
        }
    });
}

/// What one thread measured.
struct ThreadResult {
    start: Instant,
    end: Instant,
    ops: u64,
    bytes: u64,
    packages: u64,
    hist: hdrhistogram::Histogram<u64>,
}

/// Everything a worker thread needs, shared.
struct Shared<'a> {
    pmem: RawMem<'a>,
    dram: Option<RawMem<'a>>,
    emulator: Option<&'a Emulator>,
    packages: &'a WorkPackages,
    next: Vec<AtomicUsize>,
    config: &'a MemoryConfig,
    plan: Option<ChainPlan>,
    chain_bytes: u64,
    deadline: Option<Duration>,
    barrier: Barrier,
}

fn run_one(nc: &NamedConfig, chain: Option<&AccessChain>, p: &Prepared) -> Result<MemoryRun> {
    let c = &nc.config;
    let plan = match chain {
        Some(ch) => Some(ch.plan(p.region.len(), p.dram.as_ref().map_or(0, PmemRegion::len))?),
        None => None,
    };
    let threads = c.number_threads;
    let partitions = if c.number_partitions == 0 {
        threads
    } else {
        c.number_partitions
    };
    let chain_bytes = chain.map_or(0, AccessChain::bytes);
    let distribution = match c.random_distribution {
        RandomDistribution::Uniform => Distribution::Uniform,
        RandomDistribution::Zipf => Distribution::Zipf {
            alpha: c.zipf_alpha,
        },
    };
    let pk = packages::generate(&PackageSpec {
        range: c.memory_range.min(p.region.len()),
        access_size: c.access_size,
        mode: c.exec_mode,
        operations: c.resolved_operations(chain),
        package_bytes: c.package_size,
        partitions,
        distribution,
        seed: c.seed,
        chain_bytes,
    })?;
    let emulation_before = p.region.emulator().map(Emulator::stats);
    let shared = Shared {
        pmem: RawMem::new(&p.region)?,
        dram: p.dram.as_ref().map(RawMem::new).transpose()?,
        emulator: p.region.emulator(),
        next: (0..pk.partitions.len())
            .map(|_| AtomicUsize::new(0))
            .collect(),
        packages: &pk,
        config: c,
        plan,
        chain_bytes,
        deadline: (c.run_time > 0.0).then(|| Duration::from_secs_f64(c.run_time)),
        barrier: Barrier::new(threads),
    };
    let results: Vec<ThreadResult> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let sh = &shared;
                s.spawn(move || worker(sh, t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().map_err(|e| {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_string()))
                        .unwrap_or_default();
                    BenchError::WorkerPanicked(msg)
                })
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let start = results.iter().map(|r| r.start).min();
    let end = results.iter().map(|r| r.end).max();
    let elapsed = match (start, end) {
        (Some(s), Some(e)) => e.duration_since(s).as_secs_f64(),
        _ => 0.0,
    };
    let emulation = match (emulation_before, p.region.emulator().map(Emulator::stats)) {
        (Some(b), Some(a)) => Some((
            (a.reads + a.writes) - (b.reads + b.writes),
            a.native_slower - b.native_slower,
            a.late_ns - b.late_ns,
        )),
        _ => None,
    };
    let ops: u64 = results.iter().map(|r| r.ops).sum();
    let bytes: u64 = results.iter().map(|r| r.bytes).sum();
    let mut hist = new_histogram();
    for r in &results {
        let _ = hist.add(&r.hist);
    }
    let rate = |v: u64| {
        if elapsed > 0.0 {
            v as f64 / elapsed
        } else {
            0.0
        }
    };
    Ok(MemoryRun {
        benchmark: nc.name.clone(),
        matrix: nc.matrix.clone(),
        config: c.clone(),
        medium: p.medium.clone(),
        path: p.path.clone(),
        emulated: p.region.emulator().map(Emulator::label),
        emulated_ops: emulation.map(|e| e.0),
        emulated_late: emulation.map(|e| e.1),
        emulated_late_ns: emulation.map(|e| e.2),
        huge_pages_advised: p.huge_advised,
        ops,
        bytes,
        elapsed_s: elapsed,
        ops_per_s: rate(ops),
        bandwidth_gb_s: rate(bytes) / 1e9,
        latency_ns: LatencySummary::of(&hist),
        packages: results.iter().map(|r| r.packages).sum(),
        cpus: std::thread::available_parallelism().map_or(1, usize::from),
    })
}

fn worker(sh: &Shared<'_>, t: usize) -> ThreadResult {
    let c = sh.config;
    let part = t % sh.packages.partitions.len().max(1);
    let queue = sh
        .packages
        .partitions
        .get(part)
        .map_or(&[][..], Vec::as_slice);
    let next = &sh.next[part.min(sh.next.len().saturating_sub(1))];
    // Source data for writes: random, at least one access (or the largest chain write).
    let src_len = sh
        .plan
        .as_ref()
        .map_or(c.access_size, |p| {
            p.steps().iter().map(|s| s.op.size).max().unwrap_or(8)
        })
        .max(8) as usize;
    let mut src = vec![0u8; src_len];
    Rng::derive(c.seed, 0x5352_4300, t as u64).fill_bytes(&mut src);
    let mut hist = new_histogram();
    let every = c.latency_sample_frequency;
    // Count down to the next sampled operation (a division per operation would cost more than
    // a 64-byte sequential read).
    let mut countdown = every;
    let mut sink = 0u64;
    let (mut ops, mut bytes, mut packages) = (0u64, 0u64, 0u64);
    sh.barrier.wait();
    let start = Instant::now();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let pkg = match (queue.get(i), sh.deadline) {
            (Some(p), Some(d)) if start.elapsed() >= d => {
                let _ = p;
                break;
            }
            (Some(p), _) => p,
            (None, Some(d)) if !queue.is_empty() && start.elapsed() < d => {
                // Time-limited runs cycle through the packages again.
                match queue.get(i % queue.len()) {
                    Some(p) => p,
                    None => break,
                }
            }
            _ => break,
        };
        packages += 1;
        let mut op = |off: u64| {
            let sample = every > 0 && {
                countdown -= 1;
                countdown == 0
            };
            if sample {
                countdown = every;
            }
            let t0 = if sample { Some(Instant::now()) } else { None };
            let issued = if sh.emulator.is_some() { now_ns() } else { 0 };
            let dir = match c.operation {
                Operation::Read => {
                    sink ^= sh.pmem.read(off, c.access_size as usize);
                    Some(Direction::Read)
                }
                Operation::Write => {
                    sh.pmem
                        .write(off, &src[..c.access_size as usize], c.persist_instruction);
                    (c.persist_instruction != Persist::None).then_some(Direction::Write)
                }
            };
            if let (Some(e), Some(dir)) = (sh.emulator, dir) {
                let t = e.schedule_at(dir, c.access_size, issued);
                e.wait(&t);
            }
            if let Some(t0) = t0 {
                let _ = hist.record(t0.elapsed().as_nanos() as u64);
            }
        };
        match pkg {
            Package::Sequential {
                start: s,
                end: e,
                descending,
            } => {
                let a = c.access_size;
                if *descending {
                    let mut off = *e;
                    while off >= s + a {
                        off -= a;
                        op(off);
                    }
                } else {
                    let mut off = *s;
                    while off + a <= *e {
                        op(off);
                        off += a;
                    }
                }
                let n = (e - s) / a;
                ops += n;
                bytes += n * a;
            }
            Package::Random { offsets } => {
                for &off in offsets {
                    op(off);
                }
                ops += offsets.len() as u64;
                bytes += offsets.len() as u64 * c.access_size;
            }
            Package::Chains { seeds } => {
                let Some(plan) = sh.plan.as_ref() else { break };
                for &seed in seeds {
                    let sample = every > 0 && {
                        countdown -= 1;
                        countdown == 0
                    };
                    if sample {
                        countdown = every;
                    }
                    let t0 = if sample { Some(Instant::now()) } else { None };
                    sink ^= run_chain(sh, plan, seed, &mut src);
                    if let Some(t0) = t0 {
                        let _ = hist.record(t0.elapsed().as_nanos() as u64);
                    }
                }
                ops += seeds.len() as u64;
                bytes += seeds.len() as u64 * sh.chain_bytes;
            }
        }
    }
    let end = Instant::now();
    std::hint::black_box(sink);
    ThreadResult {
        start,
        end,
        ops,
        bytes,
        packages,
        hist,
    }
}

/// One execution of an access chain: each address derives from the data read before it.
#[inline]
fn run_chain(sh: &Shared<'_>, plan: &ChainPlan, seed: u64, src: &mut [u8]) -> u64 {
    let mut d = seed;
    let mut prev = 0u64;
    for step in plan.steps() {
        let op = step.op;
        let (mem, emulated) = match op.memory {
            MemoryKind::Pmem => (&sh.pmem, sh.emulator),
            MemoryKind::Dram => match &sh.dram {
                Some(m) => (m, None),
                None => (&sh.pmem, None),
            },
        };
        let addr = resolve(&step.address, d, prev);
        let issued = if emulated.is_some() { now_ns() } else { 0 };
        let size = op.size as usize;
        let dir = match op.kind {
            ChainOpKind::Read => {
                d ^= mem.read(addr, size);
                Some(Direction::Read)
            }
            ChainOpKind::Write { persist, .. } => {
                // Fresh data in the first word, so later reads of this line stay random.
                if let Some(w) = src.get_mut(..8) {
                    w.copy_from_slice(&mix(d).to_le_bytes());
                }
                mem.write(addr, &src[..size], persist);
                (persist != Persist::None).then_some(Direction::Write)
            }
        };
        if let (Some(e), Some(dir)) = (emulated, dir) {
            let t = e.schedule_at(dir, op.size, issued);
            e.wait(&t);
        }
        d = mix(d);
        prev = addr;
    }
    d
}
