//! `tierbase`: the command-line front end. Thin by design: it parses arguments, calls the
//! library, and prints. No storage logic lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;
mod util;

/// tierbase: a storage engine for DRAM, persistent memory, SSDs and HDDs.
#[derive(Parser, Debug)]
#[command(name = "tierbase", version, about, long_about = None, propagate_version = true)]
struct Cli {
    /// Extra device-profile catalogue file (TOML, same format as the built-in catalogue) for
    /// `devices`, `bench` and `profile` (the store commands and `serve` refuse it); may be
    /// given several times. The user file ($TIERBASE_PROFILES or
    /// ~/.config/tierbase/profiles.toml) is always read when it exists.
    #[arg(long = "profiles", global = true, value_name = "FILE")]
    profiles: Vec<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the device catalogue and report what this machine can really do.
    Devices(cmd::devices::DevicesArgs),
    /// Run benchmarks (YCSB core workloads).
    Bench(cmd::bench::BenchArgs),
    /// Turn benchmark and profile JSON results into one HTML report with SVG charts.
    Report(cmd::report::ReportArgs),
    /// Measure a device (PerMA-Bench memory benchmarks, PIO block-device sweep).
    Profile(cmd::profile::ProfileArgs),
    /// Operate a hybrid KV store file: create, put, get, delete, scan, stats, verify (get,
    /// scan, stats and verify open it read-only and change nothing).
    Kv(cmd::kv::KvArgs),
    /// Operate a B+-tree store directory: create, put, get, delete, scan, stats, verify,
    /// checkpoint (get, scan, stats and verify open it read-only).
    Btree(cmd::btree::BTreeArgs),
    /// Operate a Plush store file (persistent hash table): create, put, get, delete, scan,
    /// stats, verify, checkpoint (get, scan, stats and verify open it read-only).
    Plush(cmd::plush::PlushArgs),
    /// Serve a store over the Redis protocol (redis-cli, redis-benchmark, client libraries).
    Serve(cmd::serve::ServeArgs),
}

impl Command {
    /// The command's name if it reads no device profile (`--profiles` means nothing to it).
    fn reading_no_profiles(&self) -> Option<&'static str> {
        match self {
            Command::Devices(_) | Command::Bench(_) | Command::Profile(_) => None,
            Command::Report(_) => Some("report"),
            Command::Kv(_) => Some("kv"),
            Command::Btree(_) => Some("btree"),
            Command::Plush(_) => Some("plush"),
            Command::Serve(_) => Some("serve"),
        }
    }
}

fn main() -> ExitCode {
    // A closed pipe (`tierbase kv stats | head -3`) ends the process quietly, as it does for
    // every Unix tool. SIGPIPE stays ignored (Rust's default), so that a write into the
    // closed pipe is an error: a store command then stops and closes its store cleanly,
    // where the signal would have killed it with the store open (see `util::outln`).
    exit_quietly_when_output_fails();
    // A file-size limit (`ulimit -f`) is a full device: "store full", not death by SIGXFSZ.
    tierbase::device::report_file_size_limit_as_full();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors: clap prints them as usual.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // One line, like every other error (clap's own text adds usage and a hint).
            let text = e.to_string();
            let mut first = text
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_string();
            // "the following required arguments were not provided:" lists them on the
            // indented lines after it: name them on this one.
            if first.ends_with(':') {
                let listed: Vec<&str> = text
                    .lines()
                    .skip(1)
                    .take_while(|l| l.starts_with(' '))
                    .map(str::trim)
                    .collect();
                first = format!("{} {}", first, listed.join(", "));
            }
            // clap lists the accepted values on a later line: keep them on this one.
            let accepted = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("[possible values: "))
                .and_then(|l| l.strip_suffix(']'))
                .map(|values| format!("; possible values: {values}"))
                .unwrap_or_default();
            eprintln!("tierbase: error: {first}{accepted} (see --help)");
            return ExitCode::from(ERROR);
        }
    };
    // Stores and the server read no device profile: a profile given to them would be ignored
    // without a word (a missing or malformed file even "worked"), so it is refused.
    if let (false, Some(name)) = (cli.profiles.is_empty(), cli.command.reading_no_profiles()) {
        eprintln!(
            "tierbase: error: --profiles is for devices, bench and profile; `tierbase {name}` \
             reads no device profile (see --help)"
        );
        return ExitCode::from(ERROR);
    }
    let ctx = cmd::Ctx {
        profile_files: cli.profiles,
    };
    let result = match cli.command {
        Command::Devices(a) => cmd::devices::run(a, &ctx).map(|()| true),
        Command::Bench(a) => cmd::bench::run(a, &ctx).map(|()| true),
        Command::Report(a) => cmd::report::run(a, &ctx).map(|()| true),
        Command::Profile(a) => cmd::profile::run(a, &ctx).map(|()| true),
        Command::Kv(a) => cmd::kv::run(a, &ctx),
        Command::Btree(a) => cmd::btree::run(a, &ctx),
        Command::Plush(a) => cmd::plush::run(a, &ctx),
        Command::Serve(a) => cmd::serve::run(a, &ctx).map(|()| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        // A negative answer ("not found", "verify found problems"), already printed.
        Ok(false) => ExitCode::from(1),
        Err(e) if closed_pipe(&e) => {
            tierbase_bench::cleanup::remove_registered();
            ExitCode::from(CLOSED_PIPE)
        }
        Err(e) => {
            eprintln!("tierbase: error: {}", one_line(&e));
            ExitCode::from(ERROR)
        }
    }
}

/// Exit status of an error (as for bad usage), kept apart from a negative answer's 1 ("not
/// found", "verify found problems"), as `grep` does: a script that tests for a key must not
/// take a failed read for an absent key.
const ERROR: u8 = 2;

/// Exit status after the output's reader went away: what a shell reports for a process that
/// SIGPIPE ended (128 + 13), without a message, as Unix tools do.
const CLOSED_PIPE: u8 = 141;

/// Whether `e` is a write into a pipe whose reader is gone.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Output that cannot be written (`tierbase kv get k > /dev/full`: the device is full, or the
/// pipe is gone with SIGPIPE ignored) ends the process with one line and exit status 2, like
/// any other error, instead of `print!`'s panic and backtrace. What the command did before
/// (an acknowledged write) is durable already; the store is left as a crash would leave it,
/// which every store recovers from.
fn exit_quietly_when_output_fails() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if let Some(cause) = msg.strip_prefix("failed printing to stdout: ") {
            // The process exits without unwinding: the guards of its temporary files and
            // directories never drop.
            tierbase_bench::cleanup::remove_registered();
            if cause.contains("Broken pipe") {
                std::process::exit(i32::from(CLOSED_PIPE));
            }
            eprintln!("tierbase: error: cannot write the output: {cause}");
            std::process::exit(i32::from(ERROR));
        }
        default(info);
    }));
}

/// The error and its causes on one line, skipping a cause whose text its parent already shows
/// (library errors include their source in their message).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let msg = cause.to_string();
        if !line.contains(&msg) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&msg);
        }
    }
    line
}
