//! `tierbase btree`: operator commands for the B+-tree store (a directory with a page file,
//! two log files and, if it has an NVM tier, `nvm.tb` or a link to it).

use std::ops::Bound;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use tierbase::btree::{BTreeOptions, BTreeStore};

use super::Ctx;
use super::store_ops::PointCommand;
use crate::util::outln;
use crate::util::{decode, encode, format_size, naming_path, parse_size};

/// Arguments of `tierbase btree`.
#[derive(clap::Args, Debug)]
pub struct BTreeArgs {
    /// The store's directory.
    #[arg(long, global = true, value_name = "DIR")]
    path: Option<PathBuf>,
    /// Keys and values on the command line (and in output) are hex instead of UTF-8 text
    /// (without it, output that is not printable text is printed in double quotes with \xNN
    /// escapes, as redis-cli prints it).
    #[arg(long, global = true)]
    hex: bool,
    /// DRAM budget of the buffer pool, e.g. 64M or 1G (at least 16 pages, 256K at 16 KiB pages).
    #[arg(long, global = true, default_value = "64M", value_parser = parse_size)]
    dram: u64,
    #[command(subcommand)]
    command: BTreeCommand,
}

#[derive(Subcommand, Debug)]
enum BTreeCommand {
    /// Create a new, empty store.
    Create {
        /// Page size, a power of two from 4K to 64K. 16K suits scans and data that fits the
        /// DRAM budget; 4K suits data well beyond it that is read by key (more of the hot
        /// keys fit, and a miss reads less: docs/BENCHMARKS.md, Figure 34).
        #[arg(long, default_value = "16K", value_parser = parse_size)]
        page_size: u64,
        /// Give the store an NVM tier of this size between the DRAM pool and the page file,
        /// e.g. 1G (later opens find it by themselves).
        #[arg(long, value_parser = parse_size)]
        nvm: Option<u64>,
        /// The NVM tier's region file, e.g. on a DAX mount [default: nvm.tb in the store's
        /// directory].
        #[arg(long, value_name = "FILE", requires = "nvm")]
        nvm_file: Option<PathBuf>,
        /// The NVM-direct design: the pages live in the --nvm region (an eighth of it undo
        /// log) and are changed in place, with no DRAM pool and no redo log.
        #[arg(long, requires = "nvm")]
        nvm_direct: bool,
    },
    // put, get, delete: the same for every store.
    #[command(flatten)]
    Point(PointCommand),
    /// Print keys and values in key order.
    Scan {
        /// First key (inclusive).
        #[arg(long)]
        from: Option<String>,
        /// Last key (exclusive).
        #[arg(long)]
        to: Option<String>,
        /// Descending order (from `--to`, exclusive, down to `--from`).
        #[arg(long)]
        reverse: bool,
        /// Stop after this many keys.
        #[arg(long, default_value_t = 100, value_parser = crate::util::parse_limit)]
        limit: usize,
    },
    /// Print key count, tree height, pool, page-file and log counters, restart figures.
    Stats {
        /// Machine-readable JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every page of the tree (checksums, levels, key order across pages, key count);
    /// exit code 1 if anything is wrong. NVM-direct pages carry no checksums: damage to their
    /// keys' or values' bytes that leaves a page well-formed goes unseen.
    Verify,
    /// Write every changed page and start a new log generation.
    Checkpoint,
}

/// Runs the command. Returns `Ok(false)` for "not found" answers (exit code 1).
pub fn run(args: BTreeArgs, _ctx: &Ctx) -> anyhow::Result<bool> {
    let path = args
        .path
        .clone()
        .context("--path <DIR> is required: the store's directory")?;
    let hex = args.hex;
    let opts = BTreeOptions::default().dram_bytes(args.dram);
    if let BTreeCommand::Create {
        page_size,
        nvm,
        nvm_file,
        nvm_direct,
    } = args.command
    {
        let mut opts = opts
            .page_size(usize::try_from(page_size).unwrap_or(usize::MAX))
            .nvm_bytes(nvm.unwrap_or(0))
            .nvm_direct(nvm_direct);
        opts.nvm_path = nvm_file;
        let store = naming_path(BTreeStore::create(&path, &opts), "creating", &path)?;
        let medium = tierbase::store::Store::describe(&store).medium;
        outln!(
            "created {} ({} pages; {})",
            path.display(),
            format_size(page_size),
            medium
        )?;
        store.close()?;
        return Ok(true);
    }
    // Commands that only read open the store read-only: no checkpoint, no new log
    // generation, no byte of its files changed (redo's pages stay in DRAM).
    let mut opts = opts;
    opts.read_only = match &args.command {
        BTreeCommand::Point(c) => c.reads_only(),
        BTreeCommand::Checkpoint => false,
        _ => true,
    };
    let store = naming_path(BTreeStore::open(&path, &opts), "opening", &path)?;
    // Met by this open, or recorded by an earlier one that wrote (which started a new log
    // generation after the damage, so that no replay meets it again).
    let report = store.restart_report();
    let log_damage = report.log_damage.is_some() || report.recorded_log_damage.is_some();
    if let (Some(d), true) = (&report.log_damage, report.recorded_log_damage.is_none()) {
        eprintln!("tierbase: warning: {}: {d}", path.display());
    }
    if let Some(text) = &report.recorded_log_damage {
        for line in text.lines() {
            eprintln!("tierbase: warning: {}: {line}", path.display());
        }
        eprintln!(
            "tierbase: warning: {}: (kept in {}; remove it once the loss is accepted)",
            path.display(),
            path.join(tierbase::btree::LOG_DAMAGE_FILE).display()
        );
    }
    let found = match args.command {
        BTreeCommand::Point(c) => c.run(&store, hex)?,
        BTreeCommand::Scan {
            from,
            to,
            reverse,
            limit,
        } => {
            let from = from.map(|f| decode(hex, &f, "key")).transpose()?;
            let to = to.map(|t| decode(hex, &t, "key")).transpose()?;
            crate::util::check_range(from.as_deref(), to.as_deref())?;
            let lo = from.as_deref().map_or(Bound::Unbounded, Bound::Included);
            let hi = to.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let (mut n, mut more, mut output) = (0, false, Ok(()));
            store.range_expecting(lo, hi, reverse, limit.saturating_add(1), |k, v| {
                if n == limit {
                    more = true;
                    return false;
                }
                output = outln!("{}\t{}", encode(hex, k), encode(hex, v));
                n += 1;
                output.is_ok()
            })?;
            output?;
            if more {
                eprintln!("... more (raise --limit)");
            }
            true
        }
        BTreeCommand::Stats { json } => {
            let stats = store.stats();
            if json {
                let map: serde_json::Map<String, serde_json::Value> = stats
                    .into_iter()
                    .map(|(k, v)| {
                        let value = v
                            .parse::<u64>()
                            .map_or_else(|_| serde_json::Value::from(v), serde_json::Value::from);
                        (k, value)
                    })
                    .collect();
                outln!("{}", serde_json::to_string_pretty(&map)?)?;
            } else {
                let width = stats.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 2;
                for (k, v) in stats {
                    outln!("{k:<width$}{v}")?;
                }
            }
            true
        }
        BTreeCommand::Verify => match store.verify() {
            Ok(_) if log_damage => {
                outln!("problem: the log was damaged (see the warning above)")?;
                false
            }
            Ok((pages, keys)) => {
                outln!("OK: {pages} pages, {keys} keys, no format violations")?;
                true
            }
            Err(e) => {
                outln!("problem: {e}")?;
                false
            }
        },
        BTreeCommand::Checkpoint => {
            store.checkpoint()?;
            outln!("checkpointed")?;
            true
        }
        BTreeCommand::Create { .. } => true,
    };
    match store.close() {
        Ok(()) => {}
        // A store that is read-only (a full device) cannot write its closing checkpoint;
        // what the command did stands (a write it acknowledged is in the log, which the next
        // open redoes), so it is a warning, not the command's failure.
        Err(e @ tierbase::Error::ReadOnly { .. }) => {
            eprintln!("tierbase: warning: not closed cleanly: {e}");
        }
        Err(e) => return Err(e.into()),
    }
    Ok(found)
}
