//! `tierbase serve`: a store behind the Redis protocol (the server lives in
//! `tierbase-server`; this parses flags and prints the start and stop lines).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tierbase::device::Durability;
use tierbase_server::resp::Limits;
use tierbase_server::{
    AUTO, STORES, Server, ServerConfig, open_store_read_only, open_store_with, resolve_store,
};

use super::Ctx;
use crate::util::parse_size;

/// Arguments of `tierbase serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// The store to serve. `auto`: the one the path holds; for a new path, `kv` on tmpfs or
    /// ramfs and `btree` on any other file system.
    #[arg(long, default_value = AUTO, value_parser = store_names())]
    store: String,
    /// The store's file (`kv`, `plush`) or directory (`btree`), created if missing (its parent
    /// directory must exist). What an acknowledged write survives depends on the medium, the
    /// store and --durability; the start line says it (docs/SERVER.md).
    #[arg(long, value_name = "FILE")]
    path: PathBuf,
    /// Address to listen on, `host:port` (a name such as `localhost` takes its first address).
    /// Anything but loopback needs --requirepass (or --protected-mode no).
    #[arg(long, default_value = "127.0.0.1:6380", value_parser = parse_listen)]
    listen: SocketAddr,
    /// When a write's reply is sent: immediate (once durable), eventual[:<ms>] (once applied;
    /// a background flush makes it durable within the interval), none (durable at shutdown).
    /// `plush` has no deferred levels: immediate only.
    #[arg(long, default_value = "immediate", value_parser = parse_durability)]
    durability: Durability,
    /// Password clients must AUTH with.
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// Refuse a non-loopback --listen without --requirepass (yes|no).
    #[arg(long, default_value = "yes", value_parser = parse_yes_no, action = clap::ArgAction::Set)]
    protected_mode: bool,
    /// Most clients connected at once.
    #[arg(long, default_value_t = 10_000)]
    max_clients: usize,
    /// Longest bulk string a request may carry (e.g. 512M).
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    max_bulk_len: u64,
    /// Most arguments in one request.
    #[arg(long, default_value_t = 1024 * 1024)]
    max_args: usize,
    /// Most bytes all clients' request and reply buffers may take beyond their first 32 KiB
    /// each (Redis's maxmemory-clients): a client whose buffers grow past 1 MiB while the
    /// total is over it is closed with an error.
    #[arg(long, default_value = "2G", value_parser = parse_size)]
    max_client_memory: u64,
    /// Close a client idle this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// Worker threads [default: one per CPU].
    #[arg(long)]
    threads: Option<usize>,
    /// DRAM budget, e.g. 1G: the buffer pool of `--store btree` (at least 16 pages) [default:
    /// 64M]; the DRAM level of a new `--store plush`, filters included (the most entries that
    /// fit, 9 KiB each, beside 1088 KiB; at least 1232K; an existing store keeps its own)
    /// [default: 2^14 entries, about 137 MiB].
    #[arg(long, value_parser = parse_size)]
    dram: Option<u64>,
    /// Serve an existing store for reading only: its files are opened read-only (also on a
    /// read-only mount, beside other read-only opens, no writer meanwhile) and every write
    /// gets -READONLY, as a read-only Redis replica answers.
    #[arg(long)]
    read_only: bool,
}

/// The stores `--store` accepts, `auto` last (so that usage errors list the stores first).
fn store_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(STORES.iter().copied().chain([AUTO]))
}

fn parse_durability(s: &str) -> Result<Durability, String> {
    Durability::parse(s).ok_or_else(|| {
        format!("'{s}' is not a durability level (immediate, eventual, eventual:<ms>, none)")
    })
}

fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(format!("'{s}': expected yes or no")),
    }
}

/// Runs the server until SHUTDOWN, SIGINT or SIGTERM.
pub fn run(args: ServeArgs, _ctx: &Ctx) -> anyhow::Result<()> {
    let defaults = ServerConfig::default();
    let config = ServerConfig {
        listen: args.listen,
        requirepass: args.requirepass,
        protected_mode: args.protected_mode,
        max_clients: args.max_clients,
        limits: Limits {
            max_bulk_len: usize::try_from(args.max_bulk_len).unwrap_or(usize::MAX),
            max_args: args.max_args,
            ..Limits::default()
        },
        idle_timeout: (args.timeout > 0).then(|| Duration::from_secs(args.timeout)),
        max_client_memory: usize::try_from(args.max_client_memory).unwrap_or(usize::MAX),
        worker_threads: args.threads.unwrap_or(defaults.worker_threads),
        handle_signals: true,
    };
    config.validate()?;
    let kind = resolve_store(&args.store, &args.path)?;
    // What the path held before: a failed start removes only what it created.
    let was_missing = !args.path.exists();
    let was_empty_dir = std::fs::read_dir(&args.path).is_ok_and(|mut d| d.next().is_none());
    let opened = if args.read_only {
        open_store_read_only(kind, &args.path, args.dram)
    } else {
        open_store_with(kind, &args.path, args.durability, args.dram)
    };
    let (store, policy) = crate::util::naming_path(opened, "opening", &args.path)?;
    if args.read_only {
        eprintln!("tierbase serve: read-only: every write is refused (-READONLY)");
    }
    // A store that opened read-only (a restart on a full device) serves reads, and one whose
    // restart met a damaged log frame lost what followed it: say so first.
    for (name, text) in store.metrics() {
        if name.ends_with("read_only") && !args.read_only {
            eprintln!("tierbase serve: the store is read-only (writes are refused): {text}");
        } else if name.ends_with("damage") {
            eprintln!("tierbase serve: warning: {text}");
        }
    }
    let server = match Server::bind(store, policy, config) {
        Ok(server) => server,
        Err(e) => {
            // The store this run created (and `bind` closed) serves no one: a failed start
            // (the port in use) leaves no new empty store behind.
            if was_missing {
                let _ = std::fs::remove_file(&args.path)
                    .or_else(|_| std::fs::remove_dir_all(&args.path));
            } else if was_empty_dir && !args.read_only {
                // The B+-tree's files in a directory that was empty; the directory stays.
                for entry in std::fs::read_dir(&args.path)
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            return Err(e.into());
        }
    };
    let ready = server.ready()?;
    let serving = format!(
        "{} — store {} on {}; commit {}; guarantee: {}",
        ready.addr, ready.store, ready.medium, ready.policy.commit, ready.policy.guarantee
    );
    eprintln!("tierbase serve: listening on {serving}");
    let summary = server.serve()?;
    eprintln!(
        "tierbase serve: stopped ({}) after {} connections and {} commands; store closed \
         cleanly; served {serving}",
        summary.reason, summary.connections, summary.commands
    );
    Ok(())
}

/// `--listen`: an address, or a host name and port resolved to the name's first address
/// (`localhost:6380`, as redis-server's `bind localhost` takes).
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    use std::net::ToSocketAddrs;
    let mut addrs = text
        .to_socket_addrs()
        .map_err(|e| format!("not an address or a host name and port ({e}): {text}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("{text} resolves to no address"))
}
