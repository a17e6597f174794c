//! `tierbase bench`: YCSB core workloads against a store, a result table and a JSON file.
//!
//! Thin by design: parses arguments into a [`BenchPlan`], runs it with
//! [`tierbase_bench::plan::run_plan`], prints the table and writes the JSON. Every check that
//! can fail on user input lives in the library and comes back as one error line.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use tierbase_bench::adapter::STORES;
use tierbase_bench::measure::OpKind;
use tierbase_bench::micro::{self, MicroOp};
use tierbase_bench::plan::{
    BenchPlan, DEFAULT_SEED, DEFAULT_STORE, Warmup, parse_thread_list, run_plan,
};
use tierbase_bench::progress::{self, ProgressSink, SilentProgress, format_rate};
use tierbase_bench::report::svg::ValueFormat;
use tierbase_bench::results::{ResultFile, RunResult, check_writable};
use tierbase_bench::workload::{
    DEFAULT_OPERATION_COUNT, DEFAULT_RECORD_COUNT, RequestDistribution, SizeSpec, WorkloadSpec,
    parse_workload_list,
};

use super::Ctx;
use tierbase_bench::ace::{self, AceDevice, AcePlan, Capacity, SyntheticSpec, Trace, TraceSource};

/// Arguments of `tierbase bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: BenchCommand,
}

#[derive(clap::Subcommand, Debug)]
enum BenchCommand {
    /// Run YCSB core workloads (load, A-F) against a store; print a table, write JSON.
    Ycsb(Box<YcsbArgs>),
    /// Micro benchmarks (insert / get / update / delete, uniform and zipfian keys) of several
    /// stores back to back, with each store's throughput relative to the last one listed.
    Micro(Box<MicroArgs>),
    /// Time a store's recovery on open (kv: the index rebuild; plush: the log replay) with 1,
    /// 2, ... threads.
    Recovery(RecoveryArgs),
    /// ACE against the plain replacement policies on page-access traces (synthetic or
    /// recorded), in virtual time on a device profile or on a real page file; print a table,
    /// write JSON and an HTML report.
    Ace(Box<AceArgs>),
    /// The restart ramp of a B+-tree design (the three-tier paper's Fig. 17): load, measure
    /// the warm read rate, close, time the reopen, then sample the read rate per interval.
    Ramp(Box<RampArgs>),
    /// List the stores that can be benchmarked.
    Stores,
}

/// Arguments of `tierbase bench ycsb`.
#[derive(clap::Args, Debug)]
struct YcsbArgs {
    /// Store to benchmark (`tierbase bench stores` lists them) [default: kv, or btree when
    /// the workloads include e (scans need an ordered store)].
    #[arg(long, value_name = "NAME")]
    store: Option<String>,
    /// Workloads to run, comma-separated: load, a, b, c, d, e, f. Each runs on a freshly
    /// opened and loaded store.
    #[arg(long, default_value = "a", value_name = "LIST")]
    workload: String,
    /// A workload described in TOML (fields of a workload spec on top of `base = "a"`…`"f"`);
    /// replaces --workload. Options given explicitly override the file.
    #[arg(long, value_name = "FILE")]
    workload_file: Option<PathBuf>,
    /// Records loaded before each run [default: 100000].
    #[arg(long, value_name = "N")]
    records: Option<u64>,
    /// Measured operations per run [default: 1000000].
    #[arg(long, value_name = "N")]
    ops: Option<u64>,
    /// Thread counts, comma-separated; each is a separate run.
    #[arg(long, default_value = "1,2", value_name = "LIST")]
    threads: String,
    /// Key size in bytes (23 or more gives YCSB's `user<hash>` names) [default: 24].
    #[arg(long, value_name = "BYTES")]
    key_size: Option<String>,
    /// Value size: bytes (100, 4K), or uniform:MIN-MAX, or zipfian:MIN-MAX [default: 100].
    #[arg(long, value_name = "SIZE")]
    value_size: Option<String>,
    /// Key chooser: uniform, zipfian or latest [default: the workload's own].
    #[arg(long, value_name = "NAME")]
    distribution: Option<String>,
    /// Zipfian constant θ, between 0 and 1 [default: 0.99].
    #[arg(long, value_name = "THETA")]
    zipfian_theta: Option<f64>,
    /// How the "latest" chooser (workload D) recomputes the zipfian's eta as records are
    /// inserted: ycsb (YCSB 0.17 exactly, comparable with published results) or grown (Gray et
    /// al.'s formula with the grown count) [default: ycsb].
    #[arg(long, value_name = "MODE", value_parser = parse_zipfian_eta)]
    zipfian_eta: Option<tierbase_bench::workload::ZipfianEta>,
    /// Seed of the operation streams (same seed, same operations).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Unmeasured warm-up before each run: operations (5000) or a share of --ops (10%).
    #[arg(long, default_value = "10%", value_name = "OPS|PCT")]
    warmup: String,
    /// Repetitions of each configuration; the median is reported.
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: usize,
    /// Time limit of each measured run in seconds (0 = none); the result says if it hit.
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    max_time: f64,
    /// Directory for the stores' data [default: a fresh directory under /dev/shm (tmpfs,
    /// the persistent-memory stand-in) if usable, else under the temp directory; removed after].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Keep each run's data directory (under --dir) instead of removing it.
    #[arg(long)]
    keep_data: bool,
    /// JSON result file to write.
    #[arg(long, default_value = "ycsb-results.json", value_name = "FILE")]
    out: PathBuf,
    /// Make the store behave like this device profile (`tierbase devices` lists them).
    #[arg(long, value_name = "PROFILE")]
    emulate: Option<String>,
    /// Do not check that values read back carry their key's fingerprint.
    #[arg(long)]
    no_verify: bool,
    /// Cache-line flush instruction for `kv`, `plush` and the B+-tree's NVM tier and log (clwb,
    /// clflushopt, clflush, none)
    /// [default: the medium's: best by CPUID on DAX, none on tmpfs where flushing buys no
    /// durability; a disk file's persists are msync and run none, whatever is asked].
    #[arg(long, value_name = "NAME", value_parser = parse_flush)]
    flush: Option<tierbase::device::FlushInstruction>,
    /// Start each store at its minimum size, as a new user's store does, instead of pre-sizing
    /// it for the run's records (as Viper's benchmark sizes its pool): the run then includes
    /// every growth step, and the slowest operation shows what growth costs a writer.
    #[arg(long)]
    grow_from_empty: bool,
    /// When `kv` acknowledges a write: immediate (durable on return), eventual[:MS] (a
    /// background sync every MS milliseconds, default 100), none (at close). Only a store on a
    /// disk file defers anything; elsewhere a persist is a flush and a fence.
    #[arg(long, default_value = "immediate", value_name = "LEVEL", value_parser = parse_durability)]
    durability: tierbase::device::Durability,
    /// DRAM budget, e.g. 64M: the buffer pool of `btree` [default: 64M]; the DRAM level of
    /// `plush` [default: sized from the records]; the cache of `redb` and the block cache of
    /// `rocksdb` (which then bypasses the OS page cache on a disk) [default: theirs].
    #[arg(long, value_name = "SIZE", value_parser = crate::util::parse_size)]
    dram: Option<u64>,
    /// Dirty pages the buffer pool of `btree` writes together when an eviction meets a dirty
    /// victim (ACE's n_w; 1 = plain Clock) [default: k_w of the --emulate profile; else 32 for
    /// a page file on a disk (not tmpfs) without NVM tier, at most an eighth of the pool; else
    /// 1].
    #[arg(long = "n-w", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    n_w: Option<u16>,
    /// Reads issued together in one batched call (`get_many`) [default: 1, one `get` each].
    /// Consecutive reads of a thread are batched; each is recorded with its batch's latency.
    /// The hybrid KV store (`kv`), the B+-tree (`btree`) and Plush (`plush`) overlap a batch's
    /// cache misses; other stores read the keys one after another.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    read_batch: u16,
    /// Time one measured operation in N [default: 1, every one]. A timed operation sits
    /// between two clock readings that wait for everything before them, so the next one cannot
    /// start under its cache misses; untimed ones are only counted (throughput counts every
    /// operation, latencies are a sample of 1 in N; the timeline counts an untimed one in
    /// the second of the timed one before it). Batched reads (--read-batch) are timed per
    /// batch regardless.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..=1024))]
    latency_every: u64,
    /// Prepare N consecutive measured reads together [default: 1, none]: their keys are built
    /// first, then they are read one get after another, so that building the next key does
    /// not sit between two gets. Ignored with --read-batch.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    prepare_reads: u16,
    /// Page size of the B-tree stores (`btree`, `btree-3tier`, `btree-nvm`): a power of two
    /// from 4K to 64K [default: 16K].
    #[arg(long, value_name = "SIZE", value_parser = crate::util::parse_size)]
    page_size: Option<u64>,
    /// B-tree stores: point reads pass the inner pages without latching them (optimistic
    /// lock coupling; off by default: slower on the 2-vCPU machines it was measured on, see
    /// docs/BENCHMARKS.md Figure 37). Ignored by `btree-nvm-direct`.
    #[arg(long)]
    optimistic_reads: bool,
    /// B-tree stores: swizzle inner pages' references to children in DRAM (pointer
    /// swizzling), `true` or `false` [default: the store's, true]. Ignored by `btree-nvm-direct`.
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set)]
    swizzle: Option<bool>,
    /// RocksDB stores with --dram: charge their memtables to the budget (two write buffers of
    /// an eighth of it; the block cache gets the rest and holds the index blocks too)
    /// [default: the block cache is --dram, the memtables (64 MiB each) come on top].
    #[arg(long)]
    memtables_in_budget: bool,
    /// NVM budget of `btree-3tier` [default: 4x --dram] and `btree-nvm` [default: room for
    /// the records], e.g. 1G.
    #[arg(long, value_name = "SIZE", value_parser = crate::util::parse_size)]
    nvm: Option<u64>,
    /// Directory for the NVM tier's region file (a DAX mount on persistent memory)
    /// [default: --dir].
    #[arg(long, value_name = "DIR")]
    nvm_dir: Option<PathBuf>,
    /// Make the NVM tier of `btree-3tier` and `btree-nvm` behave like this memory profile,
    /// e.g. optane-pmem-100 (`tierbase devices` lists them).
    #[arg(long, value_name = "PROFILE")]
    nvm_emulate: Option<String>,
    /// Keep the log of `btree-3tier` and `btree-nvm` in files (group commit, fdatasync)
    /// instead of on NVM next to the tier (a persist per commit, no sync).
    #[arg(long)]
    wal_files: bool,
    /// Load NVM pages of `btree-3tier` whole on every DRAM miss, as `btree-nvm` does,
    /// instead of a cache line at a time on point reads.
    #[arg(long)]
    nvm_pages: bool,
    /// Percent of the DRAM budget of `btree-3tier` given to mini pages (16 lines of a leaf
    /// each, for point reads of leaves in NVM) [default: 25].
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=90))]
    mini_pages: Option<u8>,

    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
}

/// Arguments of `tierbase bench micro`.
#[derive(clap::Args, Debug)]
struct MicroArgs {
    /// Stores to compare, comma-separated; ratios are relative to the last one.
    #[arg(long, default_value = "kv,memory", value_name = "LIST")]
    stores: String,
    /// Operations: insert, get, update, delete, or all.
    #[arg(long, default_value = "all", value_name = "LIST")]
    ops: String,
    /// Key distributions for get/update/delete: uniform, zipfian, latest.
    #[arg(long, default_value = "uniform,zipfian", value_name = "LIST")]
    distributions: String,
    /// Thread counts, comma-separated.
    #[arg(long, default_value = "1,2", value_name = "LIST")]
    threads: String,
    /// Records loaded before each get/update/delete run (and inserted by the insert run).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    records: u64,
    /// Measured operations of each get/update run (deletes: at most half the records).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    operations: u64,
    /// Key size in bytes.
    #[arg(long, default_value_t = 16, value_name = "BYTES", value_parser = crate::util::parse_size_usize)]
    key_size: usize,
    /// Value size in bytes (200, 4K).
    #[arg(long, default_value_t = 200, value_name = "BYTES", value_parser = crate::util::parse_size)]
    value_size: u64,
    /// Seed of the operation streams.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Repetitions of each configuration; the median is reported.
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: usize,
    /// Time limit of each measured run in seconds (0 = none).
    #[arg(long, default_value_t = 20.0, value_name = "SECS")]
    max_time: f64,
    /// Directory for the stores' data (its file system decides the medium: tmpfs or disk)
    /// [default: as for `bench ycsb`].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// JSON result file to write (all stores' runs; `tierbase report` renders it).
    #[arg(long, default_value = "micro-results.json", value_name = "FILE")]
    out: PathBuf,
    /// Make the stores behave like this device profile.
    #[arg(long, value_name = "PROFILE")]
    emulate: Option<String>,
    /// Cache-line flush instruction for `kv`, `plush` and the B+-tree's NVM tier and log (clwb,
    /// clflushopt, clflush, none)
    /// [default: the medium's: best by CPUID on DAX, none on tmpfs where flushing buys no
    /// durability; a disk file's persists are msync and run none, whatever is asked].
    #[arg(long, value_name = "NAME", value_parser = parse_flush)]
    flush: Option<tierbase::device::FlushInstruction>,

    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
}

/// Arguments of `tierbase bench recovery`.
#[derive(clap::Args, Debug)]
struct RecoveryArgs {
    /// Store to time: kv (the DRAM index is rebuilt from every record) or plush (the DRAM
    /// level is rebuilt from its fixed-size recovery logs; 8-byte keys and values use its fixed
    /// layout).
    #[arg(long, default_value = "kv", value_name = "STORE")]
    store: String,
    /// Records in the store.
    #[arg(long, default_value_t = 10_000_000, value_name = "N")]
    records: u64,
    /// Recovery thread counts to time, comma-separated.
    #[arg(long, default_value = "1,2", value_name = "LIST")]
    threads: String,
    /// Key size in bytes.
    #[arg(long, default_value_t = 16, value_name = "BYTES", value_parser = crate::util::parse_size_usize)]
    key_size: usize,
    /// Value size in bytes (200, 4K).
    #[arg(long, default_value_t = 200, value_name = "BYTES", value_parser = crate::util::parse_size_usize)]
    value_size: usize,
    /// Opens timed per thread count; the median is reported.
    #[arg(long, default_value_t = 3, value_name = "N")]
    repeat: usize,
    /// Directory for the store file [default: /dev/shm if present, else the temp directory].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Time recovery from the image a crash leaves (a copy of the file taken while the store is
    /// open: every record is checked for a torn write) instead of after a clean close.
    #[arg(long)]
    after_crash: bool,
}

/// Arguments of `tierbase bench ramp`.
#[derive(clap::Args, Debug)]
struct RampArgs {
    /// Design: btree (SSD BM, or main memory when --dram holds the data), btree-3tier or
    /// btree-nvm.
    #[arg(long, default_value = "btree-3tier", value_name = "NAME")]
    store: String,
    /// Records loaded (16-byte keys, uniform reads).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    records: u64,
    /// Value size in bytes (100, 4K).
    #[arg(long, default_value_t = 100, value_name = "BYTES", value_parser = crate::util::parse_size_usize)]
    value_size: usize,
    /// DRAM budget, e.g. 256M [default: 64 MiB].
    #[arg(long, value_name = "SIZE", value_parser = crate::util::parse_size)]
    dram: Option<u64>,
    /// NVM budget of btree-3tier and btree-nvm, e.g. 1G [default: as bench ycsb].
    #[arg(long, value_name = "SIZE", value_parser = crate::util::parse_size)]
    nvm: Option<u64>,
    /// Directory for the NVM files [default: --dir].
    #[arg(long, value_name = "DIR")]
    nvm_dir: Option<PathBuf>,
    /// Cache-line flush instruction for the NVM tier (clwb, clflushopt, clflush, none).
    #[arg(long, value_name = "NAME", value_parser = parse_flush)]
    flush: Option<tierbase::device::FlushInstruction>,
    /// Seconds of reads before the close (the warm rate) and after the reopen.
    #[arg(long, default_value_t = 3.0, value_name = "S")]
    seconds: f64,
    /// Length of one sample in milliseconds.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    interval_ms: u64,
    /// Directory for the store (must not exist; removed afterwards unless --keep-data).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// Keep the store after the run.
    #[arg(long)]
    keep_data: bool,
    /// JSON file for the samples (a shape of its own: plot it yourself; `tierbase report`
    /// does not read it).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Arguments of `tierbase bench ace`.
#[derive(clap::Args, Debug)]
struct AceArgs {
    /// Devices, comma-separated: a device profile name (`tierbase devices` lists them; runs in
    /// virtual time, the PIO model of the profile, no real I/O), or a path — a directory (a
    /// temporary page file is made there) or a new file — for a real page file through O_DIRECT
    /// and io_uring (wall-clock I/O time; needs --profile or --n-w).
    #[arg(long, default_value = ace::DEFAULT_DEVICE, value_name = "LIST")]
    device: String,
    /// The measured profile of the real device(s) given as paths (e.g. one saved by
    /// `tierbase profile block --save NAME`): ACE's n_w defaults to its k_w.
    #[arg(long, value_name = "NAME")]
    profile: Option<String>,
    /// Replacement policies, comma-separated: clock, lru, cflru, lru-wsr (or all).
    #[arg(long, default_value = "clock,lru,cflru,lru-wsr", value_name = "LIST")]
    policy: String,
    /// ACE's prefetcher: none, sequential or history.
    #[arg(long, default_value = "none", value_name = "NAME")]
    prefetch: String,
    /// How a device profile's virtual time charges I/O: pio (the device model the emulator
    /// and the profiler share: a write costs α reads, up to k_w writes at once cost one, with
    /// bandwidth lanes), ace-sim (the ACE authors' simulator: the same costs without the
    /// lanes) or throughput (α read as the saturated-throughput ratio: a write costs α·k_w/k_r
    /// reads). Real page files take what they take.
    #[arg(long, default_value = "pio", value_name = "MODEL")]
    cost_model: String,
    /// Pages ACE writes back concurrently, comma-separated for a sweep (e.g. 1,2,4,8,16,32)
    /// [default: the device profile's k_w].
    #[arg(long = "n-w", value_name = "LIST")]
    n_w: Option<String>,
    /// Pages ACE evicts at once when the victim is dirty (with a prefetcher) [default: 1
    /// without a prefetcher, else n_w; at most n_w].
    #[arg(long = "n-e", value_name = "N")]
    n_e: Option<usize>,
    /// A recorded trace: one access per line, `R <page>` or `W <page>`; `#` starts a comment.
    /// Replaces the synthetic trace.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ops", "locality", "write_pct"])]
    trace: Option<PathBuf>,
    /// Page space [default: 100000; with --trace: the largest page named plus one].
    #[arg(long, value_name = "N")]
    pages: Option<u64>,
    /// Accesses of the synthetic trace [default: 1000000].
    #[arg(long, value_name = "N")]
    ops: Option<u64>,
    /// Locality of the synthetic trace: S/D = S % of the accesses on D % of the pages
    /// [default: 90/10].
    #[arg(long, value_name = "S/D")]
    locality: Option<String>,
    /// Write share of the synthetic trace in percent, comma-separated for a sweep (e.g.
    /// 0,10,20,30,40,50,60,70,80,90,100) [default: 50].
    #[arg(long, value_name = "LIST")]
    write_pct: Option<String>,
    /// Pool size in pages.
    #[arg(long, value_name = "N", conflicts_with = "capacity_pct")]
    capacity: Option<usize>,
    /// Pool size in percent of the pages [default: 10].
    #[arg(long, value_name = "P")]
    capacity_pct: Option<f64>,
    /// Page size in bytes (a multiple of 4K).
    #[arg(long, default_value = "4096", value_name = "BYTES", value_parser = crate::util::parse_size)]
    page_size: u64,
    /// Seed of the synthetic trace (hot set, pages, writes).
    #[arg(long, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Virtual-time runs replayed at once [default: the CPUs available].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// JSON result file to write.
    #[arg(long, default_value = "ace-results.json", value_name = "FILE")]
    out: PathBuf,
    /// HTML report to write [default: the --out file with .html].
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// No progress output.
    #[arg(long, short)]
    quiet: bool,
}

/// Runs the command.
pub fn run(args: BenchArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match args.command {
        BenchCommand::Ycsb(a) => ycsb(*a, ctx),
        BenchCommand::Micro(a) => micro(*a, ctx),
        BenchCommand::Recovery(a) => recovery(a),
        BenchCommand::Ace(a) => ace(*a, ctx),
        BenchCommand::Ramp(a) => ramp(*a),
        BenchCommand::Stores => {
            stores();
            Ok(())
        }
    }
}

fn stores() {
    println!("{:<16} {:<6} summary", "store", "built");
    for e in STORES {
        let built = if e.built {
            "yes".to_string()
        } else {
            format!("no (--features {})", e.feature.unwrap_or("?"))
        };
        println!("{:<16} {:<6} {}", e.name, built, e.summary);
    }
}

/// The workloads the arguments describe, overrides applied.
fn workloads(a: &YcsbArgs) -> anyhow::Result<Vec<WorkloadSpec>> {
    let mut specs = match &a.workload_file {
        Some(path) => vec![WorkloadSpec::from_toml_file(path)?],
        None => parse_workload_list(&a.workload)?
            .into_iter()
            .map(|w| w.spec(DEFAULT_RECORD_COUNT, DEFAULT_OPERATION_COUNT))
            .collect(),
    };
    let key_size = a
        .key_size
        .as_deref()
        .map(|k| {
            let n = crate::util::parse_size(k).map_err(|e| anyhow::anyhow!("--key-size: {e}"))?;
            usize::try_from(n).map_err(|_| anyhow::anyhow!("--key-size {k} is too large"))
        })
        .transpose()?;
    let value_size = a
        .value_size
        .as_deref()
        .map(str::parse::<SizeSpec>)
        .transpose()?;
    let distribution = a
        .distribution
        .as_deref()
        .map(RequestDistribution::parse)
        .transpose()?;
    for s in &mut specs {
        if let Some(n) = a.records {
            s.record_count = n;
        }
        if let Some(n) = a.ops {
            s.operation_count = n;
        }
        if let Some(n) = key_size {
            s.key_size = n;
        }
        if let Some(v) = value_size {
            s.value_size = v;
        }
        if let Some(d) = distribution {
            s.request_distribution = d;
        }
        if let Some(t) = a.zipfian_theta {
            s.zipfian_theta = t;
        }
        if let Some(m) = a.zipfian_eta {
            s.zipfian_eta = m;
        }
        s.validate()?;
    }
    Ok(specs)
}

fn parse_zipfian_eta(s: &str) -> Result<tierbase_bench::workload::ZipfianEta, String> {
    tierbase_bench::workload::ZipfianEta::parse(s).map_err(|e| e.to_string())
}

fn parse_durability(s: &str) -> Result<tierbase::device::Durability, String> {
    tierbase::device::Durability::parse(s).ok_or_else(|| {
        format!("unknown durability level '{s}' (immediate, eventual, eventual:<ms>, none)")
    })
}

fn parse_flush(s: &str) -> Result<tierbase::device::FlushInstruction, String> {
    tierbase::device::FlushInstruction::parse(s)
        .ok_or_else(|| format!("unknown flush instruction '{s}' (clwb, clflushopt, clflush, none)"))
}

fn max_time(secs: f64) -> anyhow::Result<Option<Duration>> {
    if secs.is_finite() && secs > 0.0 {
        Ok(Some(Duration::from_secs_f64(secs)))
    } else if secs == 0.0 {
        Ok(None)
    } else {
        anyhow::bail!("invalid --max-time {secs}: give seconds, or 0 for no limit")
    }
}

fn micro(a: MicroArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let stores: Vec<String> = a
        .stores
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if stores.is_empty() {
        anyhow::bail!("--stores: no store given");
    }
    if let Some((i, s)) = stores
        .iter()
        .enumerate()
        .find(|(i, s)| stores[..*i].contains(s))
    {
        // The table finds a store's runs by its name: the second copy would show the first's.
        anyhow::bail!(
            "--stores names {s} twice (positions {} and {}); for repeated runs use --repeat",
            stores.iter().position(|x| x == s).unwrap_or(0) + 1,
            i + 1
        );
    }
    let ops = MicroOp::parse_list(&a.ops)?;
    let dists = micro::parse_distributions(&a.distributions)?;
    let specs = micro::specs(
        &ops,
        &dists,
        a.records,
        a.operations,
        a.key_size,
        a.value_size,
    )?;
    let emulate = match &a.emulate {
        Some(name) => Some(ctx.catalogue()?.require(name)?.clone()),
        None => None,
    };
    let mut plans = Vec::new();
    for store in &stores {
        let mut plan = BenchPlan::new(store.as_str());
        plan.workloads = specs.clone();
        plan.threads = parse_thread_list(&a.threads)?;
        plan.seed = a.seed;
        plan.repetitions = a.repeat;
        plan.max_time = max_time(a.max_time)?;
        plan.dir = a.dir.clone();
        plan.emulate = emulate.clone();
        plan.flush = a.flush;
        plan.validate()?;
        plans.push(plan);
    }
    check_writable(&a.out)?;
    let progress: Box<dyn ProgressSink> = if a.quiet {
        Box::new(SilentProgress)
    } else {
        progress::auto()
    };
    let mut runs = Vec::new();
    for plan in &plans {
        runs.extend(run_plan(plan, progress.as_ref())?);
    }
    let file = ResultFile::new(runs);
    file.write(&a.out)
        .with_context(|| format!("writing results to {}", a.out.display()))?;
    print_micro_table(&file.runs, &stores);
    note_flush_overrides(&file.runs, a.flush);
    println!(
        "\nresults: {} ({} runs); HTML report: tierbase report {} --out report.html",
        a.out.display(),
        file.runs.len(),
        a.out.display()
    );
    Ok(())
}

/// A throughput ratio to two significant digits, never rounded to a bare zero: `1.23x`,
/// `0.50x`, `0.0031x`.
fn format_ratio(r: f64) -> String {
    if !(r.is_finite() && r > 0.0) {
        return format!("{r:.2}x");
    }
    let decimals = if r >= 0.1 {
        2
    } else {
        (1 - r.log10().floor() as i32).clamp(2, 12) as usize
    };
    format!("{r:.decimals$}x")
}

/// Says when a store ran another flush instruction than `--flush` asked (a region whose
/// persists are msync runs none, whatever is asked), so a figure is never read as the asked
/// instruction's: once per store.
fn note_flush_overrides(runs: &[RunResult], asked: Option<tierbase::device::FlushInstruction>) {
    let Some(asked) = asked else { return };
    let mut told: Vec<&str> = Vec::new();
    for r in runs {
        if let Some(ran) = r.flush.as_deref()
            && ran != asked.name()
            && !told.contains(&r.store.as_str())
        {
            told.push(&r.store);
            eprintln!(
                "note: --flush {asked} was asked, but {} ran flush {ran}: its region ({}) \
                 persists by durability mode {}, which runs no flush instruction",
                r.store, r.medium, r.durability
            );
        }
    }
}

/// One row per (workload, threads), one throughput column per store, and each store's ratio
/// to the last store listed (the baseline).
fn print_micro_table(runs: &[RunResult], stores: &[String]) {
    let Some(first) = runs.first() else { return };
    println!(
        "\n{} records, key {} B, value {} B, seed {}",
        first.record_count, first.key_size, first.value_size, first.seed
    );
    for name in stores {
        if let Some(r) = runs.iter().find(|r| &r.store == name) {
            println!("  {name}: {}", r.store_label);
        }
    }
    let base = stores.last().map(String::as_str).unwrap_or_default();
    print!("{:<16} {:>7}", "workload", "threads");
    for name in stores {
        print!(" {:>12}", format!("{name} ops/s"));
    }
    for name in &stores[..stores.len().saturating_sub(1)] {
        print!(" {:>12}", format!("{name}/{base}"));
    }
    println!(" {:>10}", "p99 (1st)");
    let mut keys: Vec<(String, usize)> = Vec::new();
    for r in runs {
        let k = (r.workload.clone(), r.threads);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (workload, threads) in keys {
        let find = |store: &str| {
            runs.iter()
                .find(|r| r.store == store && r.workload == workload && r.threads == threads)
        };
        print!("{workload:<16} {threads:>7}");
        for name in stores {
            print!(
                " {:>12}",
                find(name).map_or("-".into(), |r| format_rate(r.throughput))
            );
        }
        let base_tp = find(base).map(|r| r.throughput);
        for name in &stores[..stores.len().saturating_sub(1)] {
            let ratio = match (find(name).map(|r| r.throughput), base_tp) {
                (Some(x), Some(b)) if b > 0.0 => format_ratio(x / b),
                _ => "-".into(),
            };
            print!(" {ratio:>12}");
        }
        let p99 = stores
            .first()
            .and_then(|s| find(s))
            .and_then(|r| r.operations.values().next().map(|o| ns(o.latency_ns.p99)))
            .unwrap_or_else(|| "-".into());
        println!(" {p99:>10}");
    }
}

fn recovery(a: RecoveryArgs) -> anyhow::Result<()> {
    let threads = parse_thread_list(&a.threads)?;
    let dir = a.dir.clone().unwrap_or_else(|| {
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            shm
        } else {
            std::env::temp_dir()
        }
    });
    let plan = tierbase_bench::micro::RecoveryPlan {
        records: a.records,
        key_size: a.key_size,
        value_size: a.value_size,
        threads,
        repeat: a.repeat,
        after_crash: a.after_crash,
        store: tierbase_bench::micro::RecoveryStore::parse(&a.store)?,
    };
    let report = tierbase_bench::micro::recovery(&dir, &plan, &mut |line| eprintln!("{line}"))?;
    println!(
        "\n{} recovery {}: {} records ({} B keys, {} B values), {} store on {} ({}, flush {})",
        report.store,
        if report.after_crash && report.store == "plush" {
            "after a crash (the DRAM level replayed from the logs)"
        } else if report.after_crash {
            "after a crash (every record checked)"
        } else {
            "after a clean close"
        },
        report.records,
        a.key_size,
        a.value_size,
        crate::util::format_size(report.region_bytes),
        report.medium,
        report.durability,
        report.flush
    );
    let per = |b: u64| b as f64 / report.records.max(1) as f64;
    println!(
        "DRAM after recovery: {} ({:.1} B/record; index {:.1} B/record)",
        crate::util::format_size(report.dram_bytes),
        per(report.dram_bytes),
        per(report.index_bytes)
    );
    if plan.store == tierbase_bench::micro::RecoveryStore::Plush {
        println!("log entries read: {}", report.log_entries);
    }
    println!("{:>8} {:>12} {:>14}", "threads", "median s", "records/s");
    for r in &report.runs {
        println!(
            "{:>8} {:>12.3} {:>14}",
            r.threads,
            r.median_s,
            format_rate(report.records as f64 / r.median_s.max(1e-9))
        );
    }
    Ok(())
}

fn ramp(a: RampArgs) -> anyhow::Result<()> {
    if a.dir.exists() {
        anyhow::bail!("{}: exists already (give a new directory)", a.dir.display());
    }
    if !(a.seconds.is_finite() && a.seconds > 0.0 && a.seconds <= 3600.0) {
        anyhow::bail!("--seconds must be above 0 and at most 3600");
    }
    if let Some(out) = &a.out {
        // Before the run, not after it.
        check_writable(out)?;
    }
    let mut o = tierbase_bench::adapter::StoreOptions::new(&a.dir);
    o.durability = tierbase::device::Durability::None;
    o.dram_budget = a.dram;
    o.nvm_budget = a.nvm;
    o.nvm_dir = a.nvm_dir.clone();
    o.flush = a.flush;
    let plan = tierbase_bench::ramp::RampPlan {
        store: a.store.clone(),
        records: a.records,
        value_size: a.value_size,
        duration: std::time::Duration::from_secs_f64(a.seconds),
        interval: std::time::Duration::from_millis(a.interval_ms),
        seed: 42,
    };
    // The directory must not exist (checked above): this command makes it, and removes it
    // afterwards (also on Ctrl-C) unless --keep-data.
    let made = tierbase_bench::cleanup::make_dir(&a.dir, true)?;
    let result = tierbase_bench::ramp::ramp(&o, &plan, &mut |line| eprintln!("{line}"));
    if let (true, Some(made)) = (a.keep_data, made) {
        made.keep();
    }
    let r = result?;
    println!(
        "\n{} restart ramp: {} records ({} B keys, {} B values, uniform reads, 1 thread); {}; \
         {}{}",
        r.store,
        r.records,
        tierbase_bench::ramp::RAMP_KEY_SIZE,
        a.value_size,
        r.medium,
        r.flush
            .as_deref()
            .map_or_else(|| "no NVM flushes".to_string(), |f| format!("flush {f}")),
        r.emulated
            .as_deref()
            .map_or_else(String::new, |p| format!("; emulated {p}"))
    );
    println!(
        "warm before the close: {}; reopen {:.1} ms (NVM scan {:.1} ms); 90 % of warm after {}",
        format_rate(r.warm_ops_per_sec),
        r.restart_ms,
        r.nvm_scan_ms,
        r.ms_to_90_percent
            .map_or_else(|| "not reached".to_string(), |ms| format!("{ms:.0} ms"))
    );
    println!("{:>10} {:>12} {:>8}", "ms", "reads/s", "of warm");
    for s in &r.samples {
        println!(
            "{:>10.0} {:>12} {:>7.0}%",
            s.at_ms,
            format_rate(s.ops_per_sec),
            100.0 * s.ops_per_sec / r.warm_ops_per_sec.max(1e-9)
        );
    }
    if let Some(out) = &a.out {
        std::fs::write(out, serde_json::to_string_pretty(&r)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

fn plan(a: &YcsbArgs, ctx: &Ctx) -> anyhow::Result<BenchPlan> {
    let workloads = workloads(a)?;
    let store = match &a.store {
        Some(s) => s.trim().to_string(),
        None if workloads.iter().any(|w| w.scan_proportion > 0.0) => "btree".to_string(),
        None => DEFAULT_STORE.to_string(),
    };
    let mut plan = BenchPlan::new(&store);
    plan.workloads = workloads;
    plan.threads = parse_thread_list(&a.threads)?;
    plan.seed = a.seed;
    plan.warmup = Warmup::parse(&a.warmup)?;
    plan.repetitions = a.repeat;
    plan.max_time = max_time(a.max_time)?;
    plan.dir = a.dir.clone();
    plan.keep_data = a.keep_data;
    plan.verify = !a.no_verify;
    plan.flush = a.flush;
    plan.presize = !a.grow_from_empty;
    plan.durability = a.durability;
    plan.dram_budget = a.dram;
    plan.write_back_batch = a.n_w.map(usize::from);
    plan.nvm_budget = a.nvm;
    plan.nvm_dir = a.nvm_dir.clone();
    plan.wal_files = a.wal_files;
    plan.nvm_pages = a.nvm_pages;
    plan.mini_page_percent = a.mini_pages;
    plan.read_batch = usize::from(a.read_batch);
    plan.latency_every = a.latency_every;
    plan.prepared_reads = usize::from(a.prepare_reads);
    plan.page_size = a
        .page_size
        .map(|b| usize::try_from(b).unwrap_or(usize::MAX));
    plan.memtables_in_budget = a.memtables_in_budget;
    plan.optimistic_reads = a.optimistic_reads;
    plan.swizzle = a.swizzle;
    if let Some(name) = &a.emulate {
        let catalogue = ctx.catalogue()?;
        plan.emulate = Some(catalogue.require(name)?.clone());
    }
    if let Some(name) = &a.nvm_emulate {
        let catalogue = ctx.catalogue()?;
        plan.nvm_emulate = Some(catalogue.require(name)?.clone());
    }
    plan.validate()?;
    Ok(plan)
}

fn ycsb(a: YcsbArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let plan = plan(&a, ctx)?;
    check_writable(&a.out)?;
    let progress: Box<dyn ProgressSink> = if a.quiet {
        Box::new(SilentProgress)
    } else {
        progress::auto()
    };
    let runs = run_plan(&plan, progress.as_ref())?;
    let file = ResultFile::new(runs);
    file.write(&a.out)
        .with_context(|| format!("writing results to {}", a.out.display()))?;
    print_table(&file.runs);
    note_flush_overrides(&file.runs, a.flush);
    println!(
        "\nresults: {} ({} run{}); HTML report: tierbase report {} --out report.html",
        a.out.display(),
        file.runs.len(),
        if file.runs.len() == 1 { "" } else { "s" },
        a.out.display()
    );
    Ok(())
}

fn ns(v: u64) -> String {
    ValueFormat::Nanos.format(v as f64)
}

fn print_table(runs: &[RunResult]) {
    let Some(first) = runs.first() else { return };
    println!();
    let data = first
        .record_count
        .saturating_mul((first.key_size as u64).saturating_add(first.value_size.max()));
    println!(
        "store {} | {} records (up to {} of keys and values), key {} B, value {} B, seed {}{}",
        first.store_label,
        first.record_count,
        crate::util::format_size(data),
        first.key_size,
        first.value_size,
        first.seed,
        if first.repetitions > 1 {
            format!(", median of {} repetitions", first.repetitions)
        } else {
            String::new()
        }
    );
    println!(
        "{:<9} {:>7} {:>11} {:>10}  {:<17} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "workload",
        "threads",
        "ops/s",
        "load ops/s",
        "operation",
        "count",
        "miss",
        "p50",
        "p90",
        "p99",
        "p99.9",
        "max"
    );
    for r in runs {
        let mut first_line = true;
        for kind in OpKind::ALL {
            let Some(s) = r.operations.get(&kind) else {
                continue;
            };
            let l = s.latency_ns;
            let (w, t, tp, load) = if first_line {
                (
                    r.workload.clone(),
                    r.threads.to_string(),
                    format_rate(r.throughput),
                    r.load
                        .as_ref()
                        .map_or_else(|| "-".into(), |l| format_rate(l.throughput)),
                )
            } else {
                Default::default()
            };
            first_line = false;
            println!(
                "{w:<9} {t:>7} {tp:>11} {load:>10}  {:<17} {:>9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9}",
                kind.name(),
                s.count,
                s.not_found,
                ns(l.p50),
                ns(l.p90),
                ns(l.p99),
                ns(l.p999),
                ns(l.max)
            );
        }
        if r.stopped_early {
            println!(
                "          note: the time limit ended this run after {} of {} operations",
                r.measured_ops, r.operation_count
            );
        }
        if r.verify_failures > 0 {
            println!(
                "          WARNING: {} values came back with another key's fingerprint",
                r.verify_failures
            );
        }
    }
}

fn ace_plan(a: &AceArgs, ctx: &Ctx) -> anyhow::Result<AcePlan> {
    let catalogue = ctx.catalogue()?;
    let profile = a
        .profile
        .as_deref()
        .map(|name| catalogue.require(name).cloned())
        .transpose()?;
    let mut devices = Vec::new();
    for spec in a.device.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        devices.push(AceDevice::resolve(spec, &catalogue, profile.as_ref())?);
    }
    if devices.is_empty() {
        anyhow::bail!("--device: no device given");
    }
    if let Some(name) = &a.profile
        && devices.iter().all(AceDevice::is_virtual)
    {
        anyhow::bail!(
            "--profile {name} is for a real device given as a path in --device; a device \
             profile in --device runs on its own figures"
        );
    }
    let trace = match &a.trace {
        Some(path) => {
            let mut trace = Trace::from_file(path)?;
            if let Some(pages) = a.pages {
                trace = trace.with_pages(pages)?;
            }
            TraceSource::File {
                path: path.clone(),
                trace,
            }
        }
        None => TraceSource::Synthetic(SyntheticSpec {
            pages: a.pages.unwrap_or(ace::DEFAULT_PAGES),
            ops: a.ops.unwrap_or(ace::DEFAULT_OPS),
            locality: match &a.locality {
                Some(l) => ace::Locality::parse(l)?,
                None => ace::DEFAULT_LOCALITY,
            },
            seed: a.seed,
        }),
    };
    let plan = AcePlan {
        devices,
        policies: ace::parse_policies(&a.policy)?,
        write_pcts: match &a.write_pct {
            Some(list) => ace::parse_write_pcts(list)?,
            None => vec![ace::DEFAULT_WRITE_PCT],
        },
        n_w: a.n_w.as_deref().map(ace::parse_n_w_list).transpose()?,
        n_e: a.n_e,
        prefetcher: tierbase::buffer::ace::Prefetcher::parse(&a.prefetch)?,
        cost_model: tierbase::buffer::ace::CostModel::parse(&a.cost_model)?,
        trace,
        capacity: match (a.capacity, a.capacity_pct) {
            (Some(n), _) => Capacity::Pages(n),
            (None, Some(p)) => Capacity::Percent(p),
            (None, None) => Capacity::Percent(ace::DEFAULT_CAPACITY_PCT),
        },
        page_size: a.page_size,
        threads: a
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    plan.validate()?;
    Ok(plan)
}

fn ace(a: AceArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let plan = ace_plan(&a, ctx)?;
    let html = a
        .html
        .clone()
        .unwrap_or_else(|| a.out.with_extension("html"));
    check_writable(&a.out)?;
    check_writable(&html)?;
    let inputs: Vec<&std::path::Path> = a.trace.iter().map(PathBuf::as_path).collect();
    tierbase_bench::results::check_distinct(&[("--out", &a.out), ("--html", &html)], &inputs)?;
    let quiet = a.quiet;
    let progress = move |line: &str| {
        if !quiet {
            eprintln!("{line}");
        }
    };
    let file = ace::run_ace(&plan, &progress)?;
    file.write(&a.out)
        .with_context(|| format!("writing results to {}", a.out.display()))?;
    let source = a.out.file_name().map_or_else(
        || a.out.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let charts = ace::write_html(&file, &source, &html, "tierbase bench ace")?;
    println!();
    print!("{}", ace::describe(&file));
    println!();
    print!("{}", ace::format_table(&file.runs));
    println!(
        "\nresults: {} ({} run{}); HTML report: {} ({} chart{})",
        a.out.display(),
        file.runs.len(),
        if file.runs.len() == 1 { "" } else { "s" },
        html.display(),
        charts,
        if charts == 1 { "" } else { "s" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::format_ratio;

    #[test]
    fn small_ratios_keep_two_significant_digits() {
        assert_eq!(format_ratio(1.234), "1.23x");
        assert_eq!(format_ratio(0.5), "0.50x");
        assert_eq!(format_ratio(0.05), "0.050x");
        assert_eq!(format_ratio(0.0031), "0.0031x");
        assert_eq!(format_ratio(0.000_012_3), "0.000012x");
        assert_eq!(format_ratio(0.0), "0.00x");
    }
}
