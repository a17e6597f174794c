//! Sizes on the command line and in reports: `64K`, `256M`, `1.5 GiB`.
//!
//! Owns: parsing and formatting byte counts (binary multiples). Must not touch: anything else.

use crate::error::{BenchError, Result};

/// Parses a size: `4096`, `64K`, `256M`, `10G`, `1T`, `512KiB`, `2GB` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(BenchError::invalid(format!(
            "invalid size '{s}': expected a number with an optional K/M/G/T suffix"
        )));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| BenchError::invalid(format!("invalid size '{s}': number too large")))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        other => {
            return Err(BenchError::invalid(format!(
                "invalid size '{s}': unknown unit '{other}' (use K, M, G or T)"
            )));
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| BenchError::invalid(format!("invalid size '{s}': too large")))
}

/// Formats bytes with a binary unit: `64 B`, `4 KiB`, `1.5 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
