//! `tierbase plush`: operator commands for the Plush store (a persistent hash table in one
//! region file: a DRAM level of fixed size over leveled PMem hash directories, recovery logs,
//! and payload logs for variable-length records).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use tierbase::hash::{Partition, PlushLayout, PlushOptions, PlushStore};
use tierbase::store::Store as _;

use super::Ctx;
use super::store_ops::PointCommand;
use crate::util::outln;
use crate::util::{decode, encode, format_size, naming_path, parse_size};

/// Arguments of `tierbase plush`.
#[derive(clap::Args, Debug)]
pub struct PlushArgs {
    /// The store file.
    #[arg(long, global = true, value_name = "FILE")]
    path: Option<PathBuf>,
    /// Keys and values on the command line (and in output) are hex instead of UTF-8 text
    /// (without it, output that is not printable text is printed in double quotes with \xNN
    /// escapes, as redis-cli prints it).
    #[arg(long, global = true)]
    hex: bool,
    #[command(subcommand)]
    command: PlushCommand,
}

#[derive(Subcommand, Debug)]
enum PlushCommand {
    /// Create a new, empty store.
    Create(CreateArgs),
    // put, get, delete: the same for every store.
    #[command(flatten)]
    Point(PointCommand),
    /// Print records: in key order from a range-partitioned store (created with `--partition
    /// range`), in no particular order from a hash-partitioned one.
    Scan {
        /// Stop after this many records.
        #[arg(long, default_value_t = 100, value_parser = crate::util::parse_limit)]
        limit: usize,
        /// First key (inclusive); range-partitioned stores only.
        #[arg(long)]
        from: Option<String>,
        /// Last key (exclusive); range-partitioned stores only.
        #[arg(long)]
        to: Option<String>,
    },
    /// Print layout, record count, DRAM use, levels, key search, flush instruction,
    /// durability and medium, recovery figures and counters.
    Stats {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every level, bucket, filter and payload locator (exit code 1 if anything is
    /// wrong). The check changes nothing; opening the store recovers it as any open does.
    Verify {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Move everything in the DRAM level to PMem (the next open replays nothing).
    Checkpoint,
}

/// Arguments of `tierbase plush create` (geometry: fixed for the store's life).
#[derive(clap::Args, Debug)]
struct CreateArgs {
    /// Record layout: fixed8 (keys and values of exactly 8 bytes, held in the buckets) or
    /// variable (any length; key and value bytes in payload logs).
    #[arg(long, default_value = "variable", value_parser = parse_layout)]
    layout: PlushLayout,
    /// How keys are spread over the DRAM entries: hash (even load whatever the keys) or range
    /// (by the keys' first 8 bytes, for ordered scans; skew-prone: keys sharing their first
    /// bytes crowd one entry).
    #[arg(long, default_value = "hash")]
    partition: Partition,
    /// log2 of the DRAM level's entries, 4 to 20: each holds 256 records and takes about
    /// 8.8 KiB of DRAM with its filters, whatever the store's size [default: 14, about
    /// 137 MiB].
    #[arg(long, value_name = "N")]
    dram_bits: Option<u32>,
    /// Most PMem levels, 1 to 8, each 16 times the one above [default: 4].
    #[arg(long, value_name = "N")]
    max_levels: Option<u32>,
    /// Recovery logs, a power of two (capped at the DRAM entries) [default: 64].
    #[arg(long, value_name = "N")]
    logs: Option<u32>,
    /// Bytes per recovery-log chunk, a multiple of 4K, e.g. 1M [default: sized to the DRAM
    /// level, 16K to 1M; 1M with 2^14 entries].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    log_chunk: Option<u64>,
    /// Payload logs of the variable layout, 1 to 256 [default: 8].
    #[arg(long, value_name = "N")]
    payload_logs: Option<u32>,
    /// Bytes per payload chunk of the variable layout, a multiple of 4K; it bounds one
    /// record's key + value [default: 4M].
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    payload_chunk: Option<u64>,
}

fn parse_layout(s: &str) -> Result<PlushLayout, String> {
    match s.trim() {
        "fixed8" => Ok(PlushLayout::Fixed8),
        "variable" => Ok(PlushLayout::Variable),
        other => Err(format!(
            "'{other}' is not a Plush layout (fixed8, variable)"
        )),
    }
}

/// The creation options the flags ask for.
fn create_options(a: &CreateArgs) -> anyhow::Result<PlushOptions> {
    let CreateArgs {
        layout,
        partition,
        dram_bits,
        max_levels,
        logs,
        log_chunk,
        payload_logs,
        payload_chunk,
    } = a;
    if *layout == PlushLayout::Fixed8 {
        if payload_logs.is_some() {
            bail!("--payload-logs applies to the variable layout only");
        }
        if payload_chunk.is_some() {
            bail!("--payload-chunk applies to the variable layout only");
        }
    }
    let mut opts = PlushOptions::default()
        .layout(*layout)
        .partition(*partition);
    if let Some(b) = dram_bits {
        opts = opts.dram_bits(*b);
    }
    if let Some(l) = max_levels {
        opts = opts.max_levels(*l);
    }
    if let Some(n) = logs {
        opts.logs = *n;
    }
    if let Some(c) = log_chunk {
        opts.log_chunk_bytes = Some(*c);
    }
    if let Some(n) = payload_logs {
        opts.payload_logs = *n;
    }
    if let Some(c) = payload_chunk {
        opts.payload_chunk_bytes = *c;
    }
    Ok(opts)
}

/// Runs the command. Returns `Ok(false)` for "not found" answers and for a verify that found
/// problems (exit code 1, no error text).
pub fn run(args: PlushArgs, _ctx: &Ctx) -> anyhow::Result<bool> {
    let path = args
        .path
        .clone()
        .context("--path <FILE> is required: the store file")?;
    let hex = args.hex;
    if let PlushCommand::Create(create) = &args.command {
        let opts = create_options(create)?;
        let store = naming_path(PlushStore::create(&path, &opts), "creating", &path)?;
        let s = store.stats();
        outln!(
            "created {} ({} records, {}-partitioned; {} DRAM entries, {} of DRAM; up to {} \
             levels; {})",
            path.display(),
            s.layout,
            s.partition,
            s.dram_entries,
            format_size(s.dram_bytes),
            s.max_levels,
            s.guarantee
        )?;
        store.close()?;
        return Ok(true);
    }
    // Commands that only read open the store read-only (see `kv`): not checkpoint.
    let reads_only = match &args.command {
        PlushCommand::Point(c) => c.reads_only(),
        PlushCommand::Checkpoint => false,
        _ => true,
    };
    let mut opts = PlushOptions::default();
    opts.region.read_only = reads_only;
    let store = naming_path(PlushStore::open(&path, &opts), "opening", &path)?;
    // Said by the one open that meets it (verify reports it as a problem too).
    if let Some(d) = store.recovery_damage()
        && !matches!(args.command, PlushCommand::Verify { .. })
    {
        eprintln!("tierbase: warning: {}: {d}", path.display());
    }
    let ok = match args.command {
        PlushCommand::Point(c) => c.run(&store, hex)?,
        PlushCommand::Scan { limit, from, to } if store.partition() == Partition::Range => {
            let start = match &from {
                Some(k) => decode(hex, k, "--from key")?,
                None => Vec::new(),
            };
            let end = to
                .as_deref()
                .map(|k| decode(hex, k, "--to key"))
                .transpose()?;
            crate::util::check_range(Some(&start), end.as_deref())?;
            let mut records = Vec::new();
            // One more than asked: to tell whether there is more.
            store.range(
                &start,
                end.as_deref(),
                limit.saturating_add(1),
                &mut records,
            )?;
            for (k, v) in records.iter().take(limit) {
                outln!("{}\t{}", encode(hex, k), encode(hex, v))?;
            }
            if records.len() > limit {
                eprintln!("... more (raise --limit)");
            }
            true
        }
        PlushCommand::Scan { from, to, .. } if from.is_some() || to.is_some() => {
            bail!(
                "--from and --to need a range-partitioned store (tierbase plush create \
                 --partition range); this one is partitioned by hash and has no key order"
            )
        }
        PlushCommand::Scan { limit, .. } => {
            let (mut n, mut cursor, mut keys) = (0usize, 0u64, Vec::new());
            loop {
                keys.clear();
                cursor = store.scan(cursor, 256, &mut keys)?;
                for k in &keys {
                    if n < limit {
                        // A key deleted since the walk saw it is skipped.
                        let Some(v) = store.get(k)? else { continue };
                        outln!("{}\t{}", encode(hex, k), encode(hex, &v))?;
                    }
                    n += 1;
                }
                if cursor == 0 {
                    break;
                }
            }
            if n > limit {
                eprintln!("... {} more (raise --limit)", n - limit);
            }
            true
        }
        PlushCommand::Stats { json } => {
            // Counts the keys (after an open the count is unknown until walked).
            store.len()?;
            if json {
                let v = serde_json::json!({
                    "stats": store.stats(),
                    "medium": store.describe().medium,
                    "recovery": store.recovery_report(),
                });
                outln!("{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                print_stats(&store)?;
            }
            true
        }
        PlushCommand::Verify { json } => {
            let report = store.verify()?;
            if json {
                outln!("{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                let levels: Vec<String> = report
                    .level_records
                    .iter()
                    .zip(&report.level_entries)
                    .enumerate()
                    .map(|(l, (r, e))| format!("L{l} {r} in {e} entries"))
                    .collect();
                outln!("live keys       {}", report.live_keys)?;
                outln!("DRAM records    {}", report.dram_records)?;
                outln!(
                    "level records   {}",
                    if levels.is_empty() {
                        "none (no PMem level yet)".to_string()
                    } else {
                        levels.join(", ")
                    }
                )?;
                outln!(
                    "dangling        {} (superseded records whose payload was collected; dropped at their next migration)",
                    report.dangling
                )?;
                if report.problems.is_empty() {
                    outln!("OK: no format violations")?;
                } else {
                    outln!("{} problem(s):", report.problems.len())?;
                    for p in &report.problems {
                        outln!("  {p}")?;
                    }
                }
            }
            report.problems.is_empty()
        }
        PlushCommand::Checkpoint => {
            store.checkpoint()?;
            outln!("checkpointed")?;
            true
        }
        PlushCommand::Create(_) => true,
    };
    store.close()?;
    Ok(ok)
}

fn print_stats(store: &PlushStore) -> anyhow::Result<()> {
    let s = store.stats();
    let r = store.recovery_report();
    outln!("layout        {}", s.layout)?;
    outln!("partition     {}", s.partition)?;
    outln!(
        "records       {}",
        s.records
            .map_or_else(|| "unknown".to_string(), |n| n.to_string())
    )?;
    // A read-only store runs in mode `none` only because it writes nothing.
    let mode = if store.region().is_read_only() {
        "read-only".to_string()
    } else {
        s.durability.to_string()
    };
    outln!("durability    {mode} ({})", s.guarantee)?;
    outln!("medium        {}", store.describe().medium)?;
    outln!("flush         {}", s.flush)?;
    outln!("key search    {}", s.key_search)?;
    outln!("emulation     {}", s.emulation)?;
    outln!(
        "DRAM          {} ({} entries, fixed by configuration; {} records waiting)",
        format_size(s.dram_bytes),
        s.dram_entries,
        s.dram_records
    )?;
    outln!("levels        {} of {}", s.levels, s.max_levels)?;
    outln!(
        "region        {} ({} handed out)",
        format_size(s.region_bytes),
        format_size(s.space_used)
    )?;
    if s.layout == PlushLayout::Variable {
        // Dead bytes are those found since this open (an open knows none, and counts the
        // rest as live until its collector has looked at each chunk).
        outln!(
            "payload       {} in use: {} not known dead, {} found dead since this open",
            format_size(s.payload_bytes),
            format_size(s.payload_live_bytes),
            format_size(s.payload_dead_bytes)
        )?;
    }
    if let Some(reason) = &s.read_only {
        outln!("read-only     {reason}")?;
    }
    outln!(
        "recovery      {:.3} s ({} log chunks, {} log entries, {} replayed, {} frozen halves, {} filters)",
        r.total.as_secs_f64(),
        r.log_chunks,
        r.log_entries,
        r.replayed,
        r.frozen_halves,
        r.filters
    )?;
    outln!("counters (since this open)")?;
    for (k, v) in &s.counters {
        outln!("  {k:<26}{v}")?;
    }
    Ok(())
}
