//! `tierbase profile`: measure a device (PerMA-Bench memory benchmarks, PIO block sweep).
//!
//! Thin by design: turns flags into the library's configurations
//! (`tierbase_profile`), prints one line per result with its medium, and writes JSON and
//! the `--save`d profile. Every argument is taken as text and checked by the library, so bad
//! input is one `tierbase: error:` line (no clap usage dump). See docs/PROFILING.md.

use std::path::PathBuf;

use anyhow::Context;
use tierbase::device::IoEngineKind;
use tierbase_bench::report::svg::ValueFormat;
use tierbase_bench::results::check_writable;
use tierbase_profile::block::{
    BlockConfig, BlockEvent, BlockRun, DEFAULT_MAX_DEPTH, DEFAULT_OPS_PER_POINT, DirectChoice,
    Estimator, QueueMode, powers_of_two, run_block,
};
use tierbase_profile::config::{BenchmarkDef, expand_all, load_config};
use tierbase_profile::memory::{
    self, MemoryConfig, MemoryEvent, MemoryRun, NamedConfig, RunOptions,
};
use tierbase_profile::persist::Persist;
use tierbase_profile::results::{ProfileResultFile, SavedProfile};
use tierbase_profile::{format_bytes, parse_count, parse_list, parse_size, save};

use super::Ctx;

/// Arguments of `tierbase profile`.
#[derive(clap::Args, Debug)]
pub struct ProfileArgs {
    #[command(subcommand)]
    command: ProfileCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ProfileCommand {
    /// Memory / persistent-region benchmarks: sequential, random and access-chain reads and
    /// writes, with persist instructions; bandwidth, ops/s and sampled latency.
    Memory(Box<MemoryArgs>),
    /// Block-device sweep: random reads and writes at queue depths 1..256 through io_uring and
    /// O_DIRECT; derives k_r, k_w and α (PIO model).
    Block(Box<BlockArgs>),
}

/// Arguments of `tierbase profile memory`. Lists (comma-separated) are matrix dimensions: one
/// run per combination.
#[derive(clap::Args, Debug)]
#[command(allow_negative_numbers = true)]
struct MemoryArgs {
    /// TOML file of benchmarks (matrix + args per [name] table; see docs/PROFILING.md).
    /// Excludes the benchmark flags below, except --path and --emulate (used as defaults).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Region file to create (or an existing one with --force), or a directory for a
    /// temporary region file (e.g. /dev/shm) [default: DRAM, anonymous memory].
    #[arg(long, value_name = "PATH")]
    path: Option<PathBuf>,
    /// Memory range [default: 1G].
    #[arg(long, value_name = "SIZE")]
    range: Option<String>,
    /// Extra DRAM range for rd_/wd_ access-chain operations.
    #[arg(long, value_name = "SIZE")]
    dram_range: Option<String>,
    /// Access sizes, powers of two [default: 64,256,4096].
    #[arg(long, value_name = "LIST")]
    access_size: Option<String>,
    /// Thread counts [default: 1 and the number of CPUs].
    #[arg(long, value_name = "LIST")]
    threads: Option<String>,
    /// Exec modes: sequential, sequential_desc, random [default: sequential,random].
    #[arg(long, value_name = "LIST")]
    mode: Option<String>,
    /// Operations: read, write [default: read,write].
    #[arg(long, value_name = "LIST")]
    op: Option<String>,
    /// Persist instructions for writes: none, cache (clwb), cacheinv (clflushopt), nocache
    /// (non-temporal) [default: none on DRAM, the CPU's best flush on a region file].
    #[arg(long, value_name = "LIST")]
    persist: Option<String>,
    /// Random distribution: uniform, zipf.
    #[arg(long, value_name = "LIST")]
    distribution: Option<String>,
    /// Zipf skew (0 < α < 1) [default: 0.9].
    #[arg(long, value_name = "ALPHA")]
    zipf_alpha: Option<String>,
    /// Access chain such as r_256,w_64_cache_128,w_64_cache_-128 (may be repeated); runs the
    /// chains instead of --mode/--op/--access-size.
    #[arg(long, value_name = "CHAIN")]
    chain: Vec<String>,
    /// Random operations or chain executions per run [default: automatic, 4x the range's
    /// accesses within 100k..10M].
    #[arg(long, value_name = "N")]
    ops: Option<String>,
    /// Keep running (cycling through the work packages) for this many seconds.
    #[arg(long, value_name = "SECS")]
    run_time: Option<String>,
    /// Partitions of the range (0 = one per thread) [default: 1].
    #[arg(long, value_name = "N")]
    partitions: Option<String>,
    /// Work per package [default: 64M].
    #[arg(long, value_name = "SIZE")]
    package_size: Option<String>,
    /// Time every N-th operation for latency percentiles (0 = off) [default: 1000].
    #[arg(long, value_name = "N")]
    latency_every: Option<String>,
    /// Do not fill (and so pre-fault) the memory before running.
    #[arg(long)]
    no_prefault: bool,
    /// Do not ask for transparent huge pages.
    #[arg(long)]
    no_huge_pages: bool,
    /// Make the region behave like this memory profile (`tierbase devices` lists them).
    #[arg(long, value_name = "PROFILE")]
    emulate: Option<String>,
    /// Seed of the work packages and data.
    #[arg(long, value_name = "N")]
    seed: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
}

/// Output and safety options shared by both profilers.
#[derive(clap::Args, Debug)]
struct CommonArgs {
    /// JSON result file to write (`tierbase report` renders it).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Save the measured figures as a device profile of this name in the user catalogue.
    #[arg(long, value_name = "NAME")]
    save: Option<String>,
    /// Catalogue file for --save [default: $TIERBASE_PROFILES or
    /// ~/.config/tierbase/profiles.toml].
    #[arg(long, value_name = "FILE")]
    catalogue: Option<PathBuf>,
    /// Allow writing to an existing file or block device (destroys its contents).
    #[arg(long)]
    force: bool,
    /// Keep a file created at --path (temporary files are always removed).
    #[arg(long)]
    keep: bool,
    /// No per-point progress output.
    #[arg(long, short)]
    quiet: bool,
}

/// Arguments of `tierbase profile block`.
#[derive(clap::Args, Debug)]
#[command(allow_negative_numbers = true)]
struct BlockArgs {
    /// File to create (or an existing file / block device with --force), or a directory for a
    /// temporary file [default: a temporary file in $TMPDIR; with --emulate in /dev/shm].
    #[arg(long, value_name = "PATH")]
    path: Option<PathBuf>,
    /// Sweep a RAM disk with the --emulate profile's timing (no real I/O under the emulator,
    /// so the profile is reproduced whatever the disk; only a busy CPU can make it late)
    #[arg(long, requires = "emulate", conflicts_with = "path")]
    in_memory: bool,
    /// Size of the test range [default: 256M; an existing target: its length up to 256M].
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Access sizes, multiples of 4K (16K is the engine's page size).
    #[arg(long, value_name = "LIST", default_value = "4K,16K")]
    sizes: String,
    /// Queue depths of the first pass [default: powers of two up to --max-depth].
    #[arg(long, value_name = "LIST")]
    depths: Option<String>,
    /// Largest queue depth.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DEPTH.to_string())]
    max_depth: String,
    /// Do not add depths near the knee and the peak after the first pass.
    #[arg(long)]
    no_refine: bool,
    /// I/Os per point (rounded up to whole batches).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_OPS_PER_POINT.to_string())]
    ops: String,
    /// Repetitions per point, interleaved across the depths of a pass.
    #[arg(long, value_name = "N", default_value = "1")]
    reps: String,
    /// How a point's IOPS is estimated: median (repetition), best (repetition), or
    /// round-median (depth ÷ median round time of the best repetition; batch mode)
    /// [default: round-median with --emulate, else median].
    #[arg(long, value_name = "NAME")]
    estimator: Option<String>,
    /// Sequential full writes of the range before measuring (0 = none).
    #[arg(long, value_name = "N", default_value = "1")]
    precondition: String,
    /// batch: rounds of exactly d I/Os per submit (PIO batches; works with --emulate);
    /// window: d I/Os kept in flight (fio's iodepth; native only).
    #[arg(long, value_name = "MODE", default_value = "batch")]
    mode: String,
    /// Buffered I/O instead of O_DIRECT.
    #[arg(long, conflicts_with = "require_direct")]
    buffered: bool,
    /// Fail instead of falling back to buffered I/O where O_DIRECT is refused.
    #[arg(long)]
    require_direct: bool,
    /// I/O engine: auto, io-uring, threads.
    #[arg(long, value_name = "NAME", default_value = "auto")]
    engine: String,
    /// Knee threshold: k is the smallest depth reaching this share of the plateau.
    #[arg(long, value_name = "F", default_value = "0.9")]
    threshold: String,
    /// Make the device behave like this block profile (`tierbase devices` lists them).
    #[arg(long, value_name = "PROFILE")]
    emulate: Option<String>,
    /// Seed of offsets and data.
    #[arg(long, value_name = "N")]
    seed: Option<String>,
    #[command(flatten)]
    common: CommonArgs,
}

/// Runs the command.
pub fn run(args: ProfileArgs, ctx: &Ctx) -> anyhow::Result<()> {
    match args.command {
        ProfileCommand::Memory(a) => run_memory(*a, ctx),
        ProfileCommand::Block(a) => run_block_cmd(*a, ctx),
    }
}

fn check_outputs(c: &CommonArgs) -> anyhow::Result<Option<PathBuf>> {
    if let Some(out) = &c.out {
        check_writable(out)?;
    }
    match &c.save {
        Some(name) => {
            save::check_name(name)?;
            Ok(Some(save::catalogue_path(c.catalogue.as_deref())?))
        }
        None => Ok(None),
    }
}

fn finish(
    c: &CommonArgs,
    mut file: ProfileResultFile,
    catalogue: Option<PathBuf>,
    profile: Option<tierbase::device::DeviceProfile>,
) -> anyhow::Result<()> {
    if let (Some(cat), Some(p)) = (catalogue, profile) {
        save::save(&cat, &p)?;
        println!(
            "saved profile '{}' to {}: alpha {:.2}, k_r {}, k_w {}, read {:.0} ns, {:.0} MB/s read, {:.0} MB/s write",
            p.name,
            cat.display(),
            p.alpha,
            p.k_r,
            p.k_w,
            p.read_latency_ns,
            p.read_bandwidth_mb_s,
            p.write_bandwidth_mb_s
        );
        file.saved_profile = Some(SavedProfile {
            name: p.name.clone(),
            catalogue: cat,
            profile: p,
        });
    }
    if let Some(out) = &c.out {
        file.write(out)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}

fn run_memory(a: MemoryArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let catalogue_file = check_outputs(&a.common)?;
    let catalogue = ctx.catalogue()?;
    if let Some(name) = &a.emulate {
        catalogue.require(name)?;
    }
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut base = MemoryConfig {
        memory_path: a.path.clone(),
        emulate: a.emulate.clone(),
        ..MemoryConfig::default()
    };
    let list: Vec<NamedConfig> = match &a.config {
        Some(path) => {
            let shaping = [
                ("--range", a.range.is_some()),
                ("--dram-range", a.dram_range.is_some()),
                ("--access-size", a.access_size.is_some()),
                ("--threads", a.threads.is_some()),
                ("--mode", a.mode.is_some()),
                ("--op", a.op.is_some()),
                ("--persist", a.persist.is_some()),
                ("--distribution", a.distribution.is_some()),
                ("--zipf-alpha", a.zipf_alpha.is_some()),
                ("--chain", !a.chain.is_empty()),
                ("--ops", a.ops.is_some()),
                ("--run-time", a.run_time.is_some()),
                ("--partitions", a.partitions.is_some()),
                ("--package-size", a.package_size.is_some()),
                ("--latency-every", a.latency_every.is_some()),
                ("--seed", a.seed.is_some()),
                ("--no-prefault", a.no_prefault),
                ("--no-huge-pages", a.no_huge_pages),
            ];
            if let Some((flag, _)) = shaping.iter().find(|(_, given)| *given) {
                anyhow::bail!(
                    "{flag} cannot be combined with --config (put it in the file's args or matrix)"
                );
            }
            let defs = load_config(path)?;
            expand_all(&defs, &base)?
        }
        None => {
            let mut def = BenchmarkDef::new("memory");
            let on_file = a.path.is_some();
            if !a.chain.is_empty() {
                for (flag, given) in [
                    ("--mode", a.mode.is_some()),
                    ("--op", a.op.is_some()),
                    ("--access-size", a.access_size.is_some()),
                    ("--persist", a.persist.is_some()),
                ] {
                    if given {
                        anyhow::bail!(
                            "{flag} does not apply to --chain (the chain names its own operations)"
                        );
                    }
                }
                def.add_values("custom_operations", a.chain.clone())?;
                def.add_text("exec_mode", "custom")?;
            } else {
                def.add_text(
                    "exec_mode",
                    a.mode.as_deref().unwrap_or("sequential,random"),
                )?;
                def.add_text("operation", a.op.as_deref().unwrap_or("read,write"))?;
                def.add_text(
                    "access_size",
                    a.access_size.as_deref().unwrap_or("64,256,4096"),
                )?;
                let default_persist = if on_file {
                    best_flush_persist()
                } else {
                    Persist::None
                };
                def.add_text(
                    "persist_instruction",
                    a.persist.as_deref().unwrap_or(default_persist.chain_name()),
                )?;
            }
            let default_threads = if cpus > 1 {
                format!("1,{cpus}")
            } else {
                "1".to_string()
            };
            def.add_text(
                "number_threads",
                a.threads.as_deref().unwrap_or(&default_threads),
            )?;
            for (key, v) in [
                ("memory_range", &a.range),
                ("dram_memory_range", &a.dram_range),
                ("random_distribution", &a.distribution),
                ("zipf_alpha", &a.zipf_alpha),
                ("number_operations", &a.ops),
                ("run_time", &a.run_time),
                ("number_partitions", &a.partitions),
                ("min_io_chunk_size", &a.package_size),
                ("latency_sample_frequency", &a.latency_every),
                ("seed", &a.seed),
            ] {
                if let Some(v) = v {
                    def.add_text(key, v)?;
                }
            }
            if a.no_prefault {
                def.add_text("prefault_file", "false")?;
            }
            if a.no_huge_pages {
                def.add_text("dram_huge_pages", "false")?;
            }
            base.memory_path = a.path.clone();
            def.expand(&base)?
        }
    };
    // Validate everything before preparing any memory.
    for nc in &list {
        nc.config
            .validate()
            .with_context(|| format!("benchmark '{}'", nc.name))?;
        if let Some(name) = &nc.config.emulate {
            catalogue.require(name)?;
        }
    }
    let opts = RunOptions {
        force: a.common.force,
        keep: a.common.keep,
        temp_dir: None,
    };
    let quiet = a.common.quiet;
    println!(
        "tierbase profile memory: {} run{} ({} CPUs)",
        list.len(),
        if list.len() == 1 { "" } else { "s" },
        cpus
    );
    let (runs, skipped) = memory::run_all(&list, &catalogue, &opts, |ev| match ev {
        MemoryEvent::Preparing(c) => {
            if !quiet {
                let medium = c.memory_path.as_ref().map_or_else(
                    || "DRAM (anonymous)".to_string(),
                    |p| format!("region at {}", p.display()),
                );
                eprintln!(
                    "preparing {} of {medium}{}",
                    format_bytes(c.memory_range),
                    if c.prefault {
                        " (filling with random data)"
                    } else {
                        ""
                    }
                );
            }
        }
        MemoryEvent::Result(r) => println!("{}", memory_line(r)),
        MemoryEvent::Skipped(s) => println!(
            "skipped {}{}: {}",
            s.benchmark,
            s.matrix
                .iter()
                .map(|(k, v)| format!(" {k}={v}"))
                .collect::<String>(),
            s.reason
        ),
    })?;
    let profile = match &a.common.save {
        Some(name) => Some(save::memory_profile(name, &runs)?),
        None => None,
    };
    let mut file = ProfileResultFile::new();
    file.memory = runs;
    file.skipped = skipped;
    finish(&a.common, file, catalogue_file, profile)
}

fn best_flush_persist() -> Persist {
    [Persist::Cache, Persist::CacheInv]
        .into_iter()
        .find(|p| p.check_supported().is_ok())
        .unwrap_or(Persist::NoCache)
}

fn memory_line(r: &MemoryRun) -> String {
    let lat = r.latency_ns.map_or_else(String::new, |l| {
        format!(
            ", latency p50 {} p99 {} ({} samples)",
            ValueFormat::Nanos.format(l.p50 as f64),
            ValueFormat::Nanos.format(l.p99 as f64),
            l.samples
        )
    });
    let unit = if r.config.custom_operations.is_some() {
        "chains/s"
    } else {
        "ops/s"
    };
    let mut line = format!(
        "{}: {:.2} GB/s, {} {unit}{lat}",
        r.describe(),
        r.bandwidth_gb_s,
        ValueFormat::Count.format(r.ops_per_s)
    );
    if let Some(why) = r.emulation_warning() {
        line.push_str(&format!("\nwarning: {why}"));
    }
    line
}

fn parse_block_args(a: &BlockArgs, ctx: &Ctx) -> anyhow::Result<BlockConfig> {
    let mut cfg = BlockConfig {
        path: a.path.clone(),
        in_memory: a.in_memory,
        ..BlockConfig::default()
    };
    if let Some(s) = &a.size {
        cfg.size = Some(parse_size(s)?);
    }
    cfg.sizes = parse_list(&a.sizes, "access size", parse_size)?;
    let max_depth = parse_count(&a.max_depth, "max depth", 4096)? as u32;
    cfg.depths = match &a.depths {
        Some(d) => parse_list(d, "queue depth", |s| {
            parse_count(s, "queue depth", 4096).map(|v| v as u32)
        })?,
        None => powers_of_two(max_depth),
    };
    cfg.refine = !a.no_refine;
    cfg.ops_per_point = parse_count(&a.ops, "ops per point", 1 << 32)?;
    cfg.repetitions = parse_count(&a.reps, "repetition count", 100)? as u32;
    cfg.precondition_passes = match a.precondition.trim() {
        "0" => 0,
        s => parse_count(s, "precondition pass count", 100)? as u32,
    };
    cfg.mode = QueueMode::parse(&a.mode)?;
    if let Some(e) = &a.estimator {
        cfg.estimator = Some(Estimator::parse(e)?);
    }
    cfg.direct = if a.buffered {
        DirectChoice::Off
    } else if a.require_direct {
        DirectChoice::Require
    } else {
        DirectChoice::Auto
    };
    cfg.engine = match a.engine.trim().to_ascii_lowercase().as_str() {
        "auto" => IoEngineKind::Auto,
        "io-uring" | "io_uring" | "iouring" => IoEngineKind::IoUring,
        "threads" => IoEngineKind::Threads,
        other => anyhow::bail!("unknown engine '{other}': expected auto, io-uring or threads"),
    };
    cfg.threshold = a
        .threshold
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|t| *t > 0.0 && *t <= 1.0)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "invalid threshold '{}': expected a number in (0, 1]",
                a.threshold
            )
        })?;
    if let Some(s) = &a.seed {
        cfg.seed = s
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("invalid seed '{s}': expected a whole number"))?;
    }
    if let Some(name) = &a.emulate {
        cfg.emulate = Some(ctx.catalogue()?.require(name)?.clone());
    }
    cfg.force = a.common.force;
    cfg.keep = a.common.keep;
    cfg.validate()?;
    Ok(cfg)
}

fn run_block_cmd(a: BlockArgs, ctx: &Ctx) -> anyhow::Result<()> {
    let cfg = parse_block_args(&a, ctx)?;
    let catalogue_file = check_outputs(&a.common)?;
    let quiet = a.common.quiet;
    let mut label = String::new();
    let emulated = cfg
        .emulate
        .as_ref()
        .map(|p| format!(", emulated {}", p.name))
        .unwrap_or_default();
    let run = run_block(&cfg, |ev| match ev {
        BlockEvent::Preconditioned(pass, s) => {
            if !quiet {
                eprintln!("preconditioned (pass {pass}) in {s:.1} s");
            }
        }
        BlockEvent::Target(path, medium) => {
            label = format!("{medium}{emulated}");
            println!(
                "tierbase profile block: {} ({label}), {} mode",
                path.display(),
                cfg.mode.name()
            );
        }
        BlockEvent::Point(dir, size, p) => {
            if !quiet {
                eprintln!(
                    "  {dir} {} depth {:>3}: {:>9} IOPS {:>8.1} MB/s  mean latency {}",
                    format_bytes(size),
                    p.depth,
                    ValueFormat::Count.format(p.iops),
                    p.mb_s,
                    ValueFormat::Nanos.format(p.mean_latency_ns)
                );
            }
        }
        BlockEvent::Curve(c) => {
            let points: Vec<String> = c
                .points
                .iter()
                .filter(|p| p.depth.is_power_of_two())
                .map(|p| format!("{}:{}", p.depth, ValueFormat::Count.format(p.iops)))
                .collect();
            let knee = c.knee.map_or_else(String::new, |k| {
                format!(
                    "; plateau {} IOPS at depth {}, k {} {}",
                    ValueFormat::Count.format(k.plateau),
                    k.peak_depth,
                    if k.saturated { "=" } else { ">=" },
                    k.k
                )
            });
            println!(
                "{} {} ({label}): IOPS by depth {}{knee}",
                c.direction,
                format_bytes(c.access_size),
                points.join(" ")
            );
        }
    })?;
    print_derived(&run);
    let profile = match &a.common.save {
        Some(name) => Some(save::block_profile(name, &run)?),
        None => None,
    };
    let mut file = ProfileResultFile::new();
    file.block.push(run);
    finish(&a.common, file, catalogue_file, profile)
}

fn print_derived(run: &BlockRun) {
    for d in &run.derived {
        let f = &d.figures;
        let ge = |s: bool| if s { "=" } else { ">=" };
        println!(
            "{} random I/O ({}): k_r {} {}, k_w {} {}, alpha = {:.2} (a write in reads: depth-1 \
             write latency {} / read {}), plateaus {} / {} IOPS (ratio {:.2})",
            format_bytes(d.access_size),
            run.label(),
            ge(f.read.saturated),
            f.k_r,
            ge(f.write.saturated),
            f.k_w,
            f.alpha,
            d.write_qd1_latency_ns
                .map_or_else(|| "n/a".into(), |v| ValueFormat::Nanos.format(v)),
            d.read_qd1_latency_ns
                .map_or_else(|| "n/a".into(), |v| ValueFormat::Nanos.format(v)),
            ValueFormat::Count.format(f.read.plateau),
            ValueFormat::Count.format(f.write.plateau),
            f.throughput_ratio,
        );
    }
    if let Some(e) = &run.emulation {
        println!(
            "emulated {}: profile alpha {}, k_r {}, k_w {}; {} of {} batches ended after their \
             emulated end (native I/O or a busy CPU was slower than the profile)",
            e.profile, e.alpha, e.k_r, e.k_w, e.native_slower, e.batches
        );
        if let Err(why) = e.kept_up(&run.medium) {
            eprintln!("warning: {why}");
        }
    }
}
