//! The JSON result file: what a benchmark measured, with everything needed to interpret it.
//!
//! Owns: the file schema ([`ResultFile`], [`RunResult`], [`LoadSummary`], [`HostInfo`]), its
//! format version, atomic writing, and strict reading with clear errors. Must not touch:
//! measurement or rendering.
//!
//! Schema, format version 1 (`"format": "tierbase-bench-results"`):
//!
//! ```text
//! { format, format_version: 1, generator, created_unix_s,
//!   host: { cpus, cpu_model, kernel },
//!   runs: [ { store, store_label, medium, durability, emulated (profile name or null),
//!             capabilities: { ordered_scan, atomic_update }, store_notes: [..],
//!             workload, workload_spec: { .. }, request_distribution,
//!             threads, record_count, operation_count, warmup_ops, key_size, value_size, seed,
//!             repetitions, throughput_samples: [ops/s per repetition],
//!             throughput (ops/s, median repetition), elapsed_s, measured_ops, stopped_early,
//!             load: { threads, records, elapsed_s, throughput } or null,
//!             operations: { read: { count, not_found, throughput,
//!                                   latency_ns: { samples, min, mean, p50, p90, p99, p999,
//!                                                 max } }, .. },
//!             timeline: [ { start_s, duration_s, ops, ops_per_s }, .. ],
//!             verify_failures, read_batch, latency_every, prepared_reads } ] }
//! ```
//!
//! Readers ignore fields they do not know, so later minor additions keep version 1; a change
//! of meaning bumps the version, and older builds refuse the file with a clear message.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::adapter::Capabilities;
use crate::error::{BenchError, Result};
use crate::measure::{OpKind, OperationStats, TimelineBucket};
use crate::workload::{SizeSpec, WorkloadSpec};

/// Value of the `format` field.
pub const RESULT_FORMAT: &str = "tierbase-bench-results";
/// Version this build writes and reads.
pub const RESULT_FORMAT_VERSION: u32 = 1;

/// The machine a result was measured on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Logical CPUs available to the process.
    pub cpus: usize,
    /// CPU model name (from /proc/cpuinfo), or "unknown".
    pub cpu_model: String,
    /// Kernel release, or "unknown".
    pub kernel: String,
}

impl HostInfo {
    /// Describes this machine.
    pub fn current() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        HostInfo {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model,
            kernel,
        }
    }
}

/// The load phase of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// Threads that loaded.
    pub threads: usize,
    /// Records inserted.
    pub records: u64,
    /// Seconds the load took.
    pub elapsed_s: f64,
    /// Inserts per second.
    pub throughput: f64,
}

/// One configuration (store × workload × thread count), the median of its repetitions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Store registry name.
    pub store: String,
    /// Label used for the store in reports (name, durability, medium, emulation).
    pub store_label: String,
    /// Where the data lived (`DRAM (anonymous)`, `tmpfs file`, `disk file`, `DAX`).
    pub medium: String,
    /// What an acknowledged write survives (`none`, `wal+fsync`, ...).
    pub durability: String,
    /// Emulated device profile, or null.
    pub emulated: Option<String>,
    /// The cache-line flush instruction the store's persistent-memory writes ran, or null
    /// when it writes none (block I/O, DRAM). Missing in files written before 2026-12-03.
    #[serde(default)]
    pub flush: Option<String>,
    /// Store capabilities.
    pub capabilities: Capabilities,
    /// Store notes (settings, caveats).
    pub store_notes: Vec<String>,
    /// Workload name (`load`, `a` … `f`, or a custom name).
    pub workload: String,
    /// The full workload definition.
    pub workload_spec: WorkloadSpec,
    /// Key chooser (`uniform`, `zipfian`, `latest`).
    pub request_distribution: String,
    /// Worker threads.
    pub threads: usize,
    /// Records loaded.
    pub record_count: u64,
    /// Measured operations requested (the load phase's records for `load`).
    pub operation_count: u64,
    /// Unmeasured warm-up operations before the measured window.
    pub warmup_ops: u64,
    /// Key size in bytes.
    pub key_size: usize,
    /// Value size: a number, or `uniform:MIN-MAX` / `zipfian:MIN-MAX`.
    pub value_size: SizeSpec,
    /// Seed of the operation streams.
    pub seed: u64,
    /// Repetitions measured; this record is the median one.
    pub repetitions: usize,
    /// Throughput of each repetition, in run order.
    pub throughput_samples: Vec<f64>,
    /// Operations per second over the measured window (the median repetition).
    pub throughput: f64,
    /// Length of the measured window in seconds.
    pub elapsed_s: f64,
    /// Operations measured.
    pub measured_ops: u64,
    /// The time limit ended the run before all operations were done.
    pub stopped_early: bool,
    /// The load phase that preceded the run (null for workload `load`, which is the load).
    pub load: Option<LoadSummary>,
    /// Per operation type: counts, throughput, latency percentiles.
    pub operations: BTreeMap<OpKind, OperationStats>,
    /// Throughput in 1 s buckets over the measured window.
    pub timeline: Vec<TimelineBucket>,
    /// Values read back with another key's fingerprint (must be 0).
    pub verify_failures: u64,
    /// Reads issued together in one batched call (1: one `get` each; see
    /// `tierbase bench ycsb --read-batch`). A batched read's latency is its batch's.
    #[serde(default = "one")]
    pub read_batch: usize,
    /// One measured operation in this many was timed (1: every one; see
    /// `tierbase bench ycsb --latency-every`): the latencies are a sample of the operations,
    /// the throughput counts them all.
    #[serde(default = "one_u64")]
    pub latency_every: u64,
    /// Reads prepared together (1: none; see `tierbase bench ycsb --prepare-reads`): keys
    /// built first, then one `get` after another.
    #[serde(default = "one")]
    pub prepared_reads: usize,
}

fn one_u64() -> u64 {
    1
}

fn one() -> usize {
    1
}

/// A result file: one or more runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResultFile {
    /// Always [`RESULT_FORMAT`].
    pub format: String,
    /// [`RESULT_FORMAT_VERSION`] when written by this build.
    pub format_version: u32,
    /// The program that wrote it (`tierbase-bench <version>`).
    pub generator: String,
    /// When it was written (seconds since the Unix epoch).
    pub created_unix_s: u64,
    /// The machine.
    pub host: HostInfo,
    /// The runs.
    pub runs: Vec<RunResult>,
}

impl ResultFile {
    /// A file for `runs` measured on this machine, now.
    pub fn new(runs: Vec<RunResult>) -> Self {
        ResultFile {
            format: RESULT_FORMAT.to_string(),
            format_version: RESULT_FORMAT_VERSION,
            generator: format!("tierbase-bench {}", env!("CARGO_PKG_VERSION")),
            created_unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            host: HostInfo::current(),
            runs,
        }
    }

    /// Writes the file atomically (temporary file in the same directory, then rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        write_json_atomically(self, path)
    }

    /// Reads and checks a result file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))?;
        Self::parse(&text, path)
    }

    /// Parses result-file text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        parse_versioned(
            text,
            path,
            RESULT_FORMAT,
            RESULT_FORMAT_VERSION,
            "tierbase bench",
        )
    }
}

/// Where output to `path` goes: a symbolic link's target (the link is kept, not replaced by
/// a file), and whether that is written in place — a device, a FIFO or a socket (`--out
/// /dev/null`, `--out /dev/stdout`) is written through, never replaced by a rename (as root,
/// a rename over `/dev/null` replaced it for the whole system).
fn output_target(path: &Path) -> (PathBuf, bool) {
    // A device, FIFO or socket at the end of any links (`/dev/stdout` into a pipe): written
    // through its own name, which the kernel resolves.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return (path.to_path_buf(), true);
    }
    let mut target = path.to_path_buf();
    // Follow links one at a time (a dangling link's target is where the file is to be).
    for _ in 0..40 {
        match std::fs::read_link(&target) {
            Ok(next) => {
                target = match target.parent() {
                    Some(dir) => dir.join(next),
                    None => next,
                }
            }
            Err(_) => break,
        }
    }
    (target, false)
}

/// Writes `value` as pretty JSON atomically (temporary sibling, then rename), so a reader never
/// sees half a file; a device or FIFO is written in place ([`output_target`]). Used for every
/// result file (benchmark and device-profile results).
pub fn write_json_atomically<T: Serialize>(value: &T, path: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| BenchError::invalid(format!("cannot encode results: {e}")))?;
    let (path, in_place) = output_target(path);
    let path = path.as_path();
    if in_place {
        return std::fs::write(path, text + "\n").map_err(|e| BenchError::io("write", path, e));
    }
    let tmp = temp_sibling(path);
    std::fs::write(&tmp, text + "\n").map_err(|e| BenchError::io("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        BenchError::io("rename into", path, e)
    })
}

/// Parses a JSON file that names its `format` and `format_version`, checking both before the
/// body; `writer` is the command that writes such files (for the error message). Used for every
/// result file (benchmark and device-profile results).
pub fn parse_versioned<T: DeserializeOwned>(
    text: &str,
    path: &Path,
    format: &str,
    format_version: u32,
    writer: &str,
) -> Result<T> {
    let malformed = |detail: String| BenchError::MalformedResult {
        path: path.to_path_buf(),
        detail,
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| malformed(format!("invalid JSON: {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| malformed("expected a JSON object with a \"format\" field".into()))?;
    if obj.get("format").and_then(|f| f.as_str()) != Some(format) {
        return Err(malformed(format!(
            "missing \"format\": \"{format}\" (was it written by `{writer}`?)"
        )));
    }
    let version = obj
        .get("format_version")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| malformed("missing numeric \"format_version\"".into()))?;
    if version != u64::from(format_version) {
        return Err(BenchError::UnsupportedResultVersion {
            path: path.to_path_buf(),
            found: version,
            supported: format_version,
        });
    }
    serde_json::from_value(value).map_err(|e| malformed(e.to_string()))
}

fn temp_sibling(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    path.with_file_name(name)
}

/// Refuses an output that is one of `inputs`, or the same file as another output: writing it
/// would replace a result file the run reads or writes (`tierbase report a.json -o a.json`
/// turned the results into HTML). `what` names each path's option for the message.
pub fn check_distinct(outputs: &[(&str, &Path)], inputs: &[&Path]) -> Result<()> {
    for (n, (what, out)) in outputs.iter().enumerate() {
        if let Some(input) = inputs.iter().find(|i| same_file(i, out)) {
            return Err(BenchError::invalid(format!(
                "{what} {} is the input {}: it would be overwritten; give another file",
                out.display(),
                input.display()
            )));
        }
        if let Some((other, _)) = outputs[..n].iter().find(|(_, o)| same_file(o, out)) {
            return Err(BenchError::invalid(format!(
                "{what} and {other} name the same file {}: one would overwrite the other",
                out.display()
            )));
        }
    }
    Ok(())
}

/// Whether `a` and `b` are one file: the same inode when both exist, else the same absolute
/// path (through the parent directory's real path).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return x.dev() == y.dev() && x.ino() == y.ino();
    }
    let resolve = |p: &Path| -> Option<std::path::PathBuf> {
        let parent = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        Some(std::fs::canonicalize(parent).ok()?.join(p.file_name()?))
    };
    match (resolve(a), resolve(b)) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// Checks, before a long benchmark, that `path` can be written: its directory exists and
/// accepts a new file, and `path` is not a directory. Leaves nothing behind.
pub fn check_writable(path: &Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(BenchError::invalid("output path is empty"));
    }
    if path.is_dir() {
        return Err(BenchError::invalid(format!(
            "output path {} is a directory; give a file name",
            path.display()
        )));
    }
    let (target, in_place) = output_target(path);
    if in_place {
        use std::os::unix::fs::FileTypeExt;
        if std::fs::metadata(&target).is_ok_and(|m| m.file_type().is_fifo()) {
            // Opening a FIFO waits for its reader, and closing it ends the reader's input.
            return Ok(());
        }
        // Opened for writing, not truncated: nothing is written until the results are.
        return std::fs::OpenOptions::new()
            .write(true)
            .open(&target)
            .map(|_| ())
            .map_err(|e| BenchError::io("cannot write to", path, e));
    }
    let path = target.as_path();
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(BenchError::invalid(format!(
            "cannot write {}: directory {} does not exist",
            path.display(),
            parent.display()
        )));
    }
    let probe = temp_sibling(path);
    std::fs::write(&probe, b"").map_err(|e| BenchError::io("cannot write to", path, e))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
