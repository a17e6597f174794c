//! The profile result file (JSON), read by `tierbase report`.
//!
//! Owns: the schema and its version, atomic writing, strict reading. Must not touch:
//! measurement or rendering.
//!
//! Schema, format version 1 (`"format": "tierbase-profile-results"`):
//!
//! ```text
//! { format, format_version: 1, generator, created_unix_s, created_utc,
//!   host: { cpus, cpu_model, kernel },
//!   memory: [ { benchmark, matrix: [[key, value], ..], config: { access_size, memory_range,
//!               dram_memory_range, number_operations, number_threads, run_time, operation,
//!               exec_mode, persist_instruction, number_partitions, random_distribution,
//!               zipf_alpha, custom_operations, latency_sample_frequency, prefault, huge_pages,
//!               package_size, memory_path, emulate, seed },
//!               medium, path, emulated, huge_pages_advised, ops, bytes, elapsed_s, ops_per_s,
//!               bandwidth_gb_s, latency_ns: { samples, min, mean, p50, p90, p99, p999, max }
//!               or null, packages, cpus } ],
//!   skipped: [ { benchmark, matrix, reason } ],
//!   block: [ { path, temporary, medium, direct_io, engine, engine_note, emulated,
//!              emulation: { profile, alpha, k_r, k_w, batches, native_slower } or null,
//!              mode, size, precondition_passes, precondition_s, ops_per_point, repetitions,
//!              threshold,
//!              curves: [ { direction, access_size, points: [ { depth, ops, elapsed_s, iops,
//!                          mb_s, rep_iops, mean_latency_ns, round_latency_ns } ],
//!                          knee: { k, plateau, peak_depth, saturated, threshold } } ],
//!              derived: [ { access_size, figures: { read: knee, write: knee, k_r, k_w, alpha,
//!                           alpha_qd1, throughput_ratio }, read_qd1_latency_ns,
//!                           write_qd1_latency_ns,
//!                           read_mb_s, write_mb_s } ],
//!              sweep_s } ],
//!   saved_profile: { name, catalogue, profile: { ..DeviceProfile.. } } or null }
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tierbase::device::DeviceProfile;
use tierbase_bench::results::{HostInfo, parse_versioned, write_json_atomically};
use tierbase_bench::{BenchError, Result};

use crate::block::BlockRun;
use crate::memory::{MemoryRun, SkippedRun};

/// Value of the `format` field.
pub const PROFILE_FORMAT: &str = "tierbase-profile-results";
/// Version this build writes and reads.
pub const PROFILE_FORMAT_VERSION: u32 = 1;

/// A profile saved into a catalogue by `--save`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SavedProfile {
    /// Its name.
    pub name: String,
    /// The catalogue file written.
    pub catalogue: PathBuf,
    /// The entry.
    pub profile: DeviceProfile,
}

/// A profile result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileResultFile {
    /// Always [`PROFILE_FORMAT`].
    pub format: String,
    /// [`PROFILE_FORMAT_VERSION`].
    pub format_version: u32,
    /// `tierbase-bench <version>` (the profiler's crate before it had its own; kept so that
    /// files stay the same).
    pub generator: String,
    /// Seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// The same as a UTC timestamp.
    pub created_utc: String,
    /// The machine.
    pub host: HostInfo,
    /// Memory benchmark results.
    #[serde(default)]
    pub memory: Vec<MemoryRun>,
    /// Memory benchmarks not run (unsupported persist instruction, ...).
    #[serde(default)]
    pub skipped: Vec<SkippedRun>,
    /// Block-device sweeps.
    #[serde(default)]
    pub block: Vec<BlockRun>,
    /// The profile written by `--save`.
    #[serde(default)]
    pub saved_profile: Option<SavedProfile>,
}

impl ProfileResultFile {
    /// An empty file for this machine, now.
    pub fn new() -> Self {
        let now = crate::unix_now();
        ProfileResultFile {
            format: PROFILE_FORMAT.into(),
            format_version: PROFILE_FORMAT_VERSION,
            generator: format!("tierbase-bench {}", env!("CARGO_PKG_VERSION")),
            created_unix_s: now,
            created_utc: crate::utc_timestamp(now),
            host: HostInfo::current(),
            memory: Vec::new(),
            skipped: Vec::new(),
            block: Vec::new(),
            saved_profile: None,
        }
    }

    /// Writes atomically (temporary sibling, then rename).
    pub fn write(&self, path: &Path) -> Result<()> {
        write_json_atomically(self, path)
    }

    /// Whether JSON text claims to be a profile result file (its `format` field).
    pub fn is_profile_format(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.get("format")?.as_str().map(|f| f == PROFILE_FORMAT))
            .unwrap_or(false)
    }

    /// Parses and checks a profile result file; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        parse_versioned(
            text,
            path,
            PROFILE_FORMAT,
            PROFILE_FORMAT_VERSION,
            "tierbase profile",
        )
    }

    /// Reads and checks a file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))?;
        Self::parse(&text, path)
    }
}

impl Default for ProfileResultFile {
    fn default() -> Self {
        Self::new()
    }
}
