//! `--save NAME`: measured figures as a [`DeviceProfile`] in the user's catalogue, so stores
//! and the emulator can use a measured device by name.
//!
//! Owns: mapping measurements onto the profile's fields, its `source` text, and writing it with
//! [`Catalogue::save_profile`]. Must not touch: measurement.
//!
//! Block profiles (from the smallest access size's curves):
//! - `alpha`, `k_r`, `k_w`: the derived figures (see `derive`);
//! - `read_latency_ns`: k_r ÷ read plateau — the PIO slot time, so that the emulator's read
//!   plateau (k_r / t_r) equals the measured one (the catalogue's "derived" convention);
//! - `write_latency_ns`: the measured depth-1 write latency (informational, like the catalogue);
//! - bandwidths: the highest MB/s of any point, any size, per direction;
//! - `access_granularity`: the smallest access size; capacity: the test range; price 0.
//!
//! Memory profiles (from the runs present; the default `profile memory` suite has them all):
//! - latencies: mean sampled latency of random reads / writes of the smallest access size at
//!   the fewest threads;
//! - bandwidths: the highest GB/s of any read / write run;
//! - `alpha`: the highest random-read ops/s ÷ the highest random-write ops/s, smallest size;
//! - `k_r`, `k_w`: the knee rule over thread counts of those random runs;
//! - granularity 64 B (a cache line; not measurable from software), capacity: the range.

use std::path::{Path, PathBuf};

use tierbase::device::{Catalogue, DeviceKind, DeviceProfile};
use tierbase_bench::{BenchError, Result};

use crate::block::BlockRun;
use crate::derive::{DEFAULT_THRESHOLD, derive_knee};
use crate::memory::{MemoryRun, Operation};
use crate::packages::ExecMode;
use crate::{format_bytes, unix_now, utc_timestamp};

/// The catalogue file `--save` writes: `explicit`, else the user's catalogue file.
pub fn catalogue_path(explicit: Option<&Path>) -> Result<PathBuf> {
    match explicit {
        Some(p) => Ok(p.to_path_buf()),
        None => Catalogue::user_file().ok_or_else(|| {
            BenchError::invalid(
                "no user catalogue file: set TIERBASE_PROFILES or HOME, or pass --catalogue",
            )
        }),
    }
}

/// Checks a profile name before a long run.
pub fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty() || name.chars().any(|c| c.is_control()) {
        return Err(BenchError::invalid(format!(
            "invalid profile name '{name}'"
        )));
    }
    Ok(())
}

/// Saves `profile` into `catalogue` (replacing an entry of the same name).
pub fn save(catalogue: &Path, profile: &DeviceProfile) -> Result<()> {
    Catalogue::save_profile(catalogue, profile)?;
    Ok(())
}

/// A block profile from a sweep.
pub fn block_profile(name: &str, run: &BlockRun) -> Result<DeviceProfile> {
    check_name(name)?;
    if let Some(e) = &run.emulation {
        e.kept_up(&run.medium)
            .map_err(|why| BenchError::invalid(format!("not saving profile '{name}': {why}")))?;
    }
    let d = run.primary().ok_or_else(|| {
        BenchError::invalid("the sweep produced no read and write curves to derive a profile from")
    })?;
    let f = &d.figures;
    let read_bw = run.derived.iter().map(|d| d.read_mb_s).fold(0.0, f64::max);
    let write_bw = run.derived.iter().map(|d| d.write_mb_s).fold(0.0, f64::max);
    let read_latency = if f.read.plateau > 0.0 {
        f64::from(f.k_r) * 1e9 / f.read.plateau
    } else {
        0.0
    };
    let mut notes = Vec::new();
    if !f.read.saturated {
        notes.push(format!("reads not saturated: k_r >= {}", f.k_r));
    }
    if !f.write.saturated {
        notes.push(format!("writes not saturated: k_w >= {}", f.k_w));
    }
    let emulation = run.emulated.clone().unwrap_or_else(|| "native".to_string());
    let source = format!(
        "measured by tierbase profile block on {}, {} ({}, {}), {emulation}; {} random I/O, \
         {} mode, depths 1..{}, k = smallest depth reaching {:.0}% of the plateau (k_r plateau \
         at depth {}, k_w at {}){}",
        utc_timestamp(unix_now()),
        run.path.display(),
        run.medium,
        run.engine,
        format_bytes(d.access_size),
        run.mode.name(),
        run.curves
            .iter()
            .flat_map(|c| c.points.iter().map(|p| p.depth))
            .max()
            .unwrap_or(1),
        run.threshold * 100.0,
        f.read.peak_depth,
        f.write.peak_depth,
        if notes.is_empty() {
            String::new()
        } else {
            format!("; {}", notes.join("; "))
        }
    );
    let p = DeviceProfile {
        name: name.to_string(),
        kind: DeviceKind::Block,
        description: format!("measured: {}", run.label()),
        read_latency_ns: read_latency,
        write_latency_ns: d.write_qd1_latency_ns.unwrap_or(read_latency),
        read_bandwidth_mb_s: read_bw,
        write_bandwidth_mb_s: write_bw,
        access_granularity: d.access_size.next_power_of_two(),
        alpha: f.alpha,
        k_r: f.k_r,
        k_w: f.k_w,
        price_per_gb: 0.0,
        capacity_gb: run.size as f64 / 1e9,
        interleave_ways: None,
        source: Some(source),
    };
    p.validate()?;
    Ok(p)
}

/// A memory profile from benchmark runs.
pub fn memory_profile(name: &str, runs: &[MemoryRun]) -> Result<DeviceProfile> {
    check_name(name)?;
    for r in runs {
        r.emulation_kept_up().map_err(|why| {
            BenchError::invalid(format!(
                "not saving profile '{name}': {} — {why}",
                r.describe()
            ))
        })?;
    }
    let random = |op: Operation| -> Vec<&MemoryRun> {
        runs.iter()
            .filter(|r| r.config.exec_mode == ExecMode::Random && r.config.operation == op)
            .collect()
    };
    let missing = |what: &str| {
        BenchError::invalid(format!(
            "--save needs {what} among the runs (the default `tierbase profile memory` suite has \
             them)"
        ))
    };
    let (reads, writes) = (random(Operation::Read), random(Operation::Write));
    let smallest = |v: &[&MemoryRun]| v.iter().map(|r| r.config.access_size).min();
    let rs = smallest(&reads).ok_or_else(|| missing("random read runs"))?;
    let ws = smallest(&writes).ok_or_else(|| missing("random write runs"))?;
    let of_size = |v: &[&MemoryRun], s: u64| -> Vec<(u32, f64, Option<f64>)> {
        let mut pts: Vec<(u32, f64, Option<f64>)> = v
            .iter()
            .filter(|r| r.config.access_size == s)
            .map(|r| {
                (
                    r.config.number_threads as u32,
                    r.ops_per_s,
                    r.latency_ns.map(|l| l.mean),
                )
            })
            .collect();
        pts.sort_by_key(|p| p.0);
        pts
    };
    let rp = of_size(&reads, rs);
    let wp = of_size(&writes, ws);
    let latency = |pts: &[(u32, f64, Option<f64>)], what: &str| {
        pts.iter()
            .find_map(|p| p.2)
            .ok_or_else(|| missing(&format!("a {what} run with latency sampling")))
    };
    let read_latency = latency(&rp, "random read")?;
    let write_latency = latency(&wp, "random write")?;
    let pairs = |pts: &[(u32, f64, Option<f64>)]| -> Vec<(u32, f64)> {
        pts.iter().map(|p| (p.0, p.1)).collect()
    };
    let rk = derive_knee(&pairs(&rp), DEFAULT_THRESHOLD).ok_or_else(|| missing("read rates"))?;
    let wk = derive_knee(&pairs(&wp), DEFAULT_THRESHOLD).ok_or_else(|| missing("write rates"))?;
    let bw = |op: Operation| {
        runs.iter()
            .filter(|r| r.config.operation == op && r.config.exec_mode != ExecMode::Custom)
            .map(|r| r.bandwidth_gb_s * 1000.0)
            .fold(0.0, f64::max)
    };
    let first = runs.first().ok_or_else(|| missing("runs"))?;
    let mut medium = first.medium.clone();
    if let Some(e) = &first.emulated {
        medium = format!("{medium}, {e}");
    }
    let writes_persist = writes.first().map_or("none".to_string(), |r| {
        r.config.persist_instruction.to_string()
    });
    let threads: Vec<String> = rp.iter().map(|p| p.0.to_string()).collect();
    let source = format!(
        "measured by tierbase profile memory on {}, {}{}; random {} reads / {} writes \
         (persist {writes_persist}), threads {}; k = smallest thread count reaching 90% of the \
         plateau",
        utc_timestamp(unix_now()),
        medium,
        first
            .path
            .as_ref()
            .map(|p| format!(" at {}", p.display()))
            .unwrap_or_default(),
        format_bytes(rs),
        format_bytes(ws),
        threads.join(",")
    );
    let p = DeviceProfile {
        name: name.to_string(),
        kind: DeviceKind::Memory,
        description: format!("measured: {medium}"),
        read_latency_ns: read_latency,
        write_latency_ns: write_latency,
        read_bandwidth_mb_s: bw(Operation::Read),
        write_bandwidth_mb_s: bw(Operation::Write),
        access_granularity: 64,
        alpha: if wk.plateau > 0.0 {
            rk.plateau / wk.plateau
        } else {
            0.0
        },
        k_r: rk.k,
        k_w: wk.k,
        price_per_gb: 0.0,
        capacity_gb: first.config.memory_range as f64 / 1e9,
        interleave_ways: None,
        source: Some(source),
    };
    p.validate()?;
    Ok(p)
}
