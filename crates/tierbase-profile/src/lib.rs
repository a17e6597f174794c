//! tierbase-profile: measuring devices instead of assuming them ("know thy device") — the
//! library behind `tierbase profile`.
//!
//! Two profilers, following PerMA-Bench (pmem spec section 1) and the PIO model (three-tier
//! spec sections 3 and 6.2.6):
//! - [`memory`]: byte-addressable benchmarks — sequential, random (uniform or zipf) and
//!   access-chain ([`chain`]) reads and writes over DRAM or a persistent region, with a persist
//!   instruction per write ([`persist`]), run from pre-generated work packages ([`packages`]) by
//!   threads that start at a barrier; configured by flags or by TOML files with a matrix and
//!   fixed args ([`config`]);
//! - [`block`]: a queue-depth sweep of 4 KiB and page-size random reads and writes through
//!   `BlockDevice::submit` (io_uring, `O_DIRECT`) after preconditioning, from which
//!   [`derive`] computes the PIO figures α, k_r and k_w.
//!
//! Results are written as JSON ([`results`]) that `tierbase report` renders ([`report`]: the
//! profile sections of the benchmark harness's HTML page), and `--save` turns them into a
//! [`DeviceProfile`](tierbase::device::DeviceProfile) in the user's catalogue ([`save`]).
//! [`target`] holds the safety rules (no overwriting without `--force`, no file systems,
//! temporary files removed even on Ctrl-C); [`raw`] the benchmark operations on memory.
//!
//! The crate has no `unsafe`: memory is accessed through the device layer's safe raw view
//! ([`tierbase::device::RawAccess`]), block devices through `BlockDevice`. It uses the
//! benchmark harness (`tierbase-bench`) for what both measure with: the error type, the random
//! generators, latency histograms, sizes, JSON result files and SVG charts. See
//! `docs/PROFILING.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod block;
pub mod chain;
pub mod config;
pub mod derive;
pub mod memory;
pub mod packages;
pub mod persist;
pub mod raw;
pub mod report;
pub mod results;
pub mod save;
pub mod target;

use tierbase_bench::{BenchError, Result};

pub use tierbase_bench::measure::{LatencySummary, new_histogram};
pub use tierbase_bench::units::{format_bytes, parse_size};

/// Parses a comma-separated list with `item`, naming `what` in errors; empty items and empty
/// lists are errors.
pub fn parse_list<T>(
    s: &str,
    what: &str,
    mut item: impl FnMut(&str) -> Result<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let p = part.trim();
        if p.is_empty() {
            return Err(BenchError::invalid(format!(
                "invalid {what} list '{s}': empty item"
            )));
        }
        out.push(item(p)?);
    }
    Ok(out)
}

/// Parses a positive count (threads, depths, repetitions): one line on error.
pub fn parse_count(s: &str, what: &str, max: u64) -> Result<u64> {
    let t = s.trim();
    let v: u64 = t.parse().map_err(|_| {
        BenchError::invalid(format!(
            "invalid {what} '{s}': expected a whole number from 1 to {max}"
        ))
    })?;
    if v == 0 || v > max {
        return Err(BenchError::invalid(format!(
            "invalid {what} '{s}': must be from 1 to {max}"
        )));
    }
    Ok(v)
}

/// `YYYY-MM-DD HH:MM:SS UTC` for seconds since the Unix epoch.
pub fn utc_timestamp(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_sizes() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc_timestamp(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert!(parse_size("12Q").is_err());
        assert_eq!(format_bytes(4096), "4 KiB");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert!(parse_count("0", "thread count", 4).is_err());
        assert!(parse_count("x", "thread count", 4).is_err());
        assert_eq!(parse_count("3", "thread count", 4).unwrap(), 3);
    }
}
