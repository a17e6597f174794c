//! `tierbase kv`: operator commands for the hybrid KV store (what `ldb` is for RocksDB).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

use super::Ctx;
use super::store_ops::PointCommand;
use crate::util::outln;
use crate::util::{encode, format_size, naming_path, parse_size};

/// Arguments of `tierbase kv`.
#[derive(clap::Args, Debug)]
pub struct KvArgs {
    /// The store file.
    #[arg(long, global = true, value_name = "FILE")]
    path: Option<PathBuf>,
    /// Keys and values on the command line (and in output) are hex instead of UTF-8 text
    /// (without it, output that is not printable text is printed in double quotes with \xNN
    /// escapes, as redis-cli prints it).
    #[arg(long, global = true)]
    hex: bool,
    #[command(subcommand)]
    command: KvCommand,
}

#[derive(Subcommand, Debug)]
enum KvCommand {
    /// Create a new, empty store.
    Create {
        /// Fixed-size records as KEY_BYTES:VALUE_BYTES (e.g. 16:200); omit for variable sizes.
        #[arg(long, value_name = "K:V")]
        fixed: Option<String>,
        /// Pages per block (1..=8; the number of interleaved DIMMs of the target device)
        /// [default: 6, Viper's].
        #[arg(long)]
        pages_per_block: Option<u32>,
        /// Largest growth step of the region, e.g. 64M or 1G (a new store takes a few blocks
        /// and grows by a quarter of its size at a time, up to this); a step below one block
        /// is one block (0 is refused).
        #[arg(long, default_value = "64M", value_parser = parse_size)]
        chunk: u64,
    },
    // put, get, delete: the same for every store.
    #[command(flatten)]
    Point(PointCommand),
    /// Print records, in no particular order (the store has a hash index: no ordered scans).
    Scan {
        /// Stop after this many records.
        #[arg(long, default_value_t = 100, value_parser = crate::util::parse_limit)]
        limit: usize,
    },
    /// Print record count, live/dead bytes, blocks, DRAM use, the durability a read-write open
    /// of the file gets, recovery time and any media damage the open worked around.
    Stats {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every page and record against the format without changing anything
    /// (exit code 1 if anything is wrong).
    Verify {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_fixed(s: &str) -> anyhow::Result<RecordLayout> {
    let (k, v) = s
        .split_once(':')
        .with_context(|| format!("--fixed '{s}': expected KEY_BYTES:VALUE_BYTES, e.g. 16:200"))?;
    let key_size: u32 = k
        .trim()
        .parse()
        .with_context(|| format!("--fixed '{s}': key size '{k}' is not a number"))?;
    let value_size: u32 = v
        .trim()
        .parse()
        .with_context(|| format!("--fixed '{s}': value size '{v}' is not a number"))?;
    Ok(RecordLayout::Fixed {
        key_size,
        value_size,
    })
}

/// Runs the command. Returns `Ok(false)` for "not found" answers (exit code 1, no error text).
pub fn run(args: KvArgs, _ctx: &Ctx) -> anyhow::Result<bool> {
    let path = args
        .path
        .clone()
        .context("--path <FILE> is required: the store file")?;
    let hex = args.hex;
    if let KvCommand::Verify { json } = args.command {
        let report = naming_path(tierbase::kv::verify(&path), "verifying", &path)?;
        if json {
            outln!("{}", serde_json::to_string_pretty(&report)?)?;
        } else {
            if let Some(l) = report.layout {
                outln!("layout          {l}")?;
            }
            outln!("blocks checked  {}", report.blocks_checked)?;
            outln!("valid records   {}", report.valid_records)?;
            outln!("deleted records {}", report.deleted_records)?;
            if report.closed_cleanly {
                outln!(
                    "torn records    {} (fail their check although the store was closed cleanly: \
                     media damage; the next open keeps them as they read, checking no record)",
                    report.torn_records
                )?;
            } else {
                outln!(
                    "torn records    {} (fail their check after a crash: writes it cut short, \
                     never acknowledged — or media damage, which a check cannot tell apart after \
                     a crash; the next open drops them)",
                    report.torn_records
                )?;
            }
            outln!(
                "duplicate keys  {} (by 64-bit fingerprint; recovery keeps the newest)",
                report.duplicate_keys
            )?;
            if report.is_ok() {
                outln!("OK: no format violations")?;
            } else {
                outln!("{} problem(s):", report.problems.len())?;
                for p in &report.problems {
                    outln!("  {p}")?;
                }
            }
        }
        return Ok(report.is_ok());
    }
    if let KvCommand::Create {
        fixed,
        pages_per_block,
        chunk,
    } = &args.command
    {
        let layout = fixed.as_deref().map(parse_fixed).transpose()?;
        let mut opts = KvOptions::default().chunk_size(*chunk);
        opts.layout = layout;
        opts.pages_per_block = *pages_per_block;
        let store = naming_path(KvStore::create(&path, &opts), "creating", &path)?;
        outln!(
            "created {} ({}, {}; {})",
            path.display(),
            store.layout(),
            format_size(store.region().len()),
            store.durability().guarantee()
        )?;
        store.close()?;
        return Ok(true);
    }
    // Commands that only read open the store read-only: they change nothing in its file
    // (also after a crash: recovery's repairs stay in this process), run beside other such
    // commands, and work on a read-only mount.
    let reads_only = match &args.command {
        KvCommand::Point(c) => c.reads_only(),
        _ => true,
    };
    let mut opts = KvOptions::default();
    opts.region.read_only = reads_only;
    let store = naming_path(KvStore::open(&path, &opts), "opening", &path)?;
    if !matches!(args.command, KvCommand::Stats { .. }) {
        // Damage the open worked around (`stats` lists it): what a get or scan of it returns
        // may miss records.
        for d in &store.recovery().damage {
            eprintln!("tierbase: warning: {}: {d}", path.display());
        }
    }
    let found = match args.command {
        KvCommand::Point(c) => c.run(&store, hex)?,
        KvCommand::Scan { limit } => {
            let mut n = 0;
            for record in store.iter() {
                let (k, v) = record?;
                if n < limit {
                    outln!("{}\t{}", encode(hex, &k), encode(hex, &v))?;
                }
                n += 1;
            }
            if n > limit {
                eprintln!("... {} more (raise --limit)", n - limit);
            }
            true
        }
        KvCommand::Stats { json } => {
            let stats = store.stats();
            if json {
                // `stats.durability` is this read-only session's (`none`): say a writer's too.
                let v = serde_json::json!({
                    "read_write_durability": read_write_durability(&store),
                    "stats": stats,
                    "recovery": store.recovery(),
                    "metrics": store.metrics(),
                    "region": store.region().info(),
                });
                outln!("{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                print_stats(&store)?;
            }
            true
        }
        KvCommand::Create { .. } | KvCommand::Verify { .. } => true,
    };
    store.close()?;
    Ok(found)
}

/// What a writer's open of the store's file would use, when `store` is open read-only: its
/// own mode is `none` only because it writes nothing.
fn read_write_durability(store: &KvStore) -> Option<&'static str> {
    if !store.region().is_read_only() {
        return None;
    }
    Some(match store.region().path().map(tierbase::device::fs_kind) {
        Some(tierbase::device::FsKind::Memory) => {
            "process-crash: a memory-backed file survives a process crash, not a power loss"
        }
        _ => {
            "msync on a disk file (survives a power loss), or dax on persistent memory mapped \
             with MAP_SYNC"
        }
    })
}

fn print_stats(store: &KvStore) -> anyhow::Result<()> {
    let s = store.stats();
    let r = store.recovery();
    let per = |b: u64| {
        if s.records == 0 {
            "-".to_string()
        } else {
            format!("{:.1} B/record", b as f64 / s.records as f64)
        }
    };
    outln!("layout        {}", s.layout)?;
    outln!("records       {}", s.records)?;
    if let Some(writers) = read_write_durability(store) {
        outln!("durability    of a read-write open: {writers}")?;
    } else {
        outln!("durability    {} ({})", s.durability, s.guarantee)?;
    }
    outln!(
        "commit        {} ({} deferred persists, {} file syncs)",
        s.commit,
        s.deferred_persists,
        s.syncs
    )?;
    outln!("emulation     {}", s.emulation)?;
    outln!("region        {}", format_size(s.region_bytes))?;
    outln!(
        "blocks        {} allocated, {} used ({} sealed, {} owned, {} large, {} free), {} each",
        s.blocks_allocated,
        s.blocks_used,
        s.blocks_sealed,
        s.blocks_owned,
        s.blocks_large,
        s.blocks_free,
        format_size(s.block_bytes)
    )?;
    outln!("live bytes    {}", format_size(s.live_bytes))?;
    outln!("dead bytes    {}", format_size(s.dead_bytes))?;
    outln!(
        "DRAM index    {} ({})",
        format_size(s.index_bytes),
        per(s.index_bytes)
    )?;
    outln!(
        "DRAM total    {} ({})",
        format_size(s.dram_bytes),
        per(s.dram_bytes)
    )?;
    outln!(
        "recovery      {:.3} s with {} threads ({} blocks, {} records, {} duplicates resolved)",
        r.duration.as_secs_f64(),
        r.threads,
        r.blocks_scanned,
        r.records_found,
        r.duplicates_resolved
    )?;
    for d in &r.damage {
        outln!("damage        {d}")?;
    }
    Ok(())
}
