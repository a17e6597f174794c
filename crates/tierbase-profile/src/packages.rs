//! Work packages (PerMA-Bench step 2): the whole run is cut into packages generated before the
//! clock starts, which threads then pull from a shared queue.
//!
//! Owns: the package kinds, splitting the memory range into partitions, and generating offsets
//! (sequential chunks, uniform or zipf random offsets, chain start values). Must not touch:
//! memory or execution.
//!
//! - **Sequential** (`sequential`, `sequential_desc`): the range (each partition) is cut into
//!   contiguous chunks of `package_bytes`; together they cover every access-size slot of the
//!   range exactly once, without overlap. Descending runs take the chunks from the top and walk
//!   each chunk downwards.
//! - **Random**: `operations` offsets, aligned to the access size, drawn uniformly or from a
//!   zipf distribution (item 0, at the start of the partition, most popular), spread over the
//!   partitions; `package_bytes / access_size` offsets per package.
//! - **Custom** (access chains): one random 64-bit start value per chain execution;
//!   `package_bytes / chain_bytes` chains per package.

use serde::{Deserialize, Serialize};
use tierbase_bench::generator::ZipfianGenerator;
use tierbase_bench::rng::Rng;
use tierbase_bench::{BenchError, Result};

/// Most operations that may be pre-generated for one run (8 bytes each).
pub const MAX_PREGENERATED_OPS: u64 = 1 << 28;

/// How addresses are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ExecMode {
    /// Ascending contiguous addresses.
    Sequential,
    /// Descending contiguous addresses.
    SequentialDesc,
    /// Random addresses (uniform or zipf).
    Random,
    /// Access chains.
    Custom,
}

impl ExecMode {
    /// Name as in configs and results.
    pub fn name(self) -> &'static str {
        match self {
            ExecMode::Sequential => "sequential",
            ExecMode::SequentialDesc => "sequential_desc",
            ExecMode::Random => "random",
            ExecMode::Custom => "custom",
        }
    }

    /// Parses a name (`seq`, `seq-desc` and `rand` accepted as short forms).
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "sequential" | "seq" => Ok(ExecMode::Sequential),
            "sequential_desc" | "seq_desc" => Ok(ExecMode::SequentialDesc),
            "random" | "rand" => Ok(ExecMode::Random),
            "custom" => Ok(ExecMode::Custom),
            _ => Err(BenchError::invalid(format!(
                "unknown exec mode '{s}': expected sequential, sequential_desc, random or custom"
            ))),
        }
    }
}

/// Random address distribution.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Distribution {
    /// Every aligned slot equally likely.
    Uniform,
    /// Zipf over the slots with exponent `alpha` (0 < alpha < 1).
    Zipf {
        /// Skew.
        alpha: f64,
    },
}

impl Distribution {
    /// Name as in configs and results.
    pub fn name(&self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipf { .. } => "zipf",
        }
    }
}

/// One unit of work a thread takes from the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Package {
    /// Every `access_size` slot of `[start, end)`, in order (or reverse order).
    Sequential {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
        /// Walk from the top down.
        descending: bool,
    },
    /// One access per offset.
    Random {
        /// Byte offsets, aligned to the access size.
        offsets: Vec<u64>,
    },
    /// One chain execution per start value.
    Chains {
        /// Start values.
        seeds: Vec<u64>,
    },
}

impl Package {
    /// Operations (or chain executions) in the package.
    pub fn ops(&self, access_size: u64) -> u64 {
        match self {
            Package::Sequential { start, end, .. } => (end - start) / access_size.max(1),
            Package::Random { offsets } => offsets.len() as u64,
            Package::Chains { seeds } => seeds.len() as u64,
        }
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct PackageSpec {
    /// Bytes of the memory range.
    pub range: u64,
    /// Bytes per access (a power of two).
    pub access_size: u64,
    /// Address pattern.
    pub mode: ExecMode,
    /// Random accesses or chain executions (ignored by sequential modes, which cover the range
    /// once).
    pub operations: u64,
    /// Target bytes per package (PerMA-Bench's `min_io_chunk_size`).
    pub package_bytes: u64,
    /// Partitions of the range (at least 1); thread `t` works in partition `t % partitions`.
    pub partitions: usize,
    /// Random distribution.
    pub distribution: Distribution,
    /// Seed.
    pub seed: u64,
    /// Bytes one chain execution accesses (custom mode).
    pub chain_bytes: u64,
}

/// Packages per partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkPackages {
    /// `partitions[p]` is partition p's queue, in execution order.
    pub partitions: Vec<Vec<Package>>,
    /// `[start, end)` of each partition.
    pub bounds: Vec<(u64, u64)>,
}

impl WorkPackages {
    /// Operations over all packages.
    pub fn total_ops(&self, access_size: u64) -> u64 {
        self.partitions
            .iter()
            .flatten()
            .map(|p| p.ops(access_size))
            .sum()
    }
}

/// Generates the packages for `spec`.
pub fn generate(spec: &PackageSpec) -> Result<WorkPackages> {
    let a = spec.access_size;
    if a == 0 || !a.is_power_of_two() {
        return Err(BenchError::invalid(format!(
            "access size must be a power of two, got {a}"
        )));
    }
    if spec.range < a {
        return Err(BenchError::invalid(format!(
            "memory range of {} bytes is smaller than one access of {a} bytes",
            spec.range
        )));
    }
    let parts = if spec.mode == ExecMode::Custom {
        1
    } else {
        spec.partitions.max(1)
    };
    let slots = spec.range / a;
    let per_part = slots / parts as u64;
    if per_part == 0 {
        return Err(BenchError::invalid(format!(
            "memory range of {} bytes cannot be split into {parts} partitions of at least one \
             {a}-byte access",
            spec.range
        )));
    }
    // Partition p: slots [p * per_part, (p + 1) * per_part), the last one up to `slots`.
    let bounds: Vec<(u64, u64)> = (0..parts as u64)
        .map(|p| {
            let start = p * per_part * a;
            let end = if p + 1 == parts as u64 {
                slots * a
            } else {
                (p + 1) * per_part * a
            };
            (start, end)
        })
        .collect();
    let pkg_ops = (spec.package_bytes / a).max(1);
    let partitions = match spec.mode {
        ExecMode::Sequential | ExecMode::SequentialDesc => {
            let descending = spec.mode == ExecMode::SequentialDesc;
            let chunk = pkg_ops * a;
            bounds
                .iter()
                .map(|&(start, end)| {
                    let mut v: Vec<Package> = (start..end)
                        .step_by(chunk as usize)
                        .map(|s| Package::Sequential {
                            start: s,
                            end: (s + chunk).min(end),
                            descending,
                        })
                        .collect();
                    if descending {
                        v.reverse();
                    }
                    v
                })
                .collect()
        }
        ExecMode::Random => {
            check_pregenerated(spec.operations)?;
            let mut zipf = match spec.distribution {
                Distribution::Uniform => None,
                Distribution::Zipf { alpha } => Some(alpha),
            };
            let mut out = Vec::with_capacity(parts);
            for (p, &(start, end)) in bounds.iter().enumerate() {
                let items = (end - start) / a;
                let ops = spec.operations / parts as u64
                    + u64::from((p as u64) < spec.operations % parts as u64);
                let mut rng = Rng::derive(spec.seed, 0x5041_434b, p as u64);
                let mut zgen = match zipf.as_mut() {
                    Some(alpha) => Some(zipf_generator(items, *alpha)?),
                    None => None,
                };
                let mut pkgs = Vec::new();
                let mut left = ops;
                while left > 0 {
                    let n = left.min(pkg_ops);
                    let offsets = (0..n)
                        .map(|_| {
                            let item = match zgen.as_mut() {
                                Some(g) => g.next_value(&mut rng),
                                None => rng.below(items),
                            };
                            start + item.min(items - 1) * a
                        })
                        .collect();
                    pkgs.push(Package::Random { offsets });
                    left -= n;
                }
                out.push(pkgs);
            }
            out
        }
        ExecMode::Custom => {
            check_pregenerated(spec.operations)?;
            let per = (spec.package_bytes / spec.chain_bytes.max(1)).max(1);
            let mut rng = Rng::derive(spec.seed, 0x4348_4149, 0);
            let mut pkgs = Vec::new();
            let mut left = spec.operations;
            while left > 0 {
                let n = left.min(per);
                pkgs.push(Package::Chains {
                    seeds: (0..n).map(|_| rng.next_u64()).collect(),
                });
                left -= n;
            }
            vec![pkgs]
        }
    };
    Ok(WorkPackages { partitions, bounds })
}

fn check_pregenerated(ops: u64) -> Result<()> {
    if ops > MAX_PREGENERATED_OPS {
        return Err(BenchError::invalid(format!(
            "number_operations {ops} is more than the {MAX_PREGENERATED_OPS} that can be \
             generated in advance; use fewer operations (and run_time to run longer)"
        )));
    }
    Ok(())
}

/// A zipf generator over `items` slots. zeta(n) is summed exactly for the first million terms
/// and by the Euler–Maclaurin formula beyond (relative error far below 1e-9), so huge ranges
/// need no billion-term sum.
fn zipf_generator(items: u64, alpha: f64) -> Result<ZipfianGenerator> {
    if !(alpha.is_finite() && alpha > 0.0 && alpha < 1.0) {
        return Err(BenchError::invalid(format!(
            "zipf_alpha must be between 0 and 1 (exclusive), got {alpha}"
        )));
    }
    ZipfianGenerator::with_zetan(0, items - 1, alpha, approx_zeta(items, alpha))
}

/// Σ_{i=1..n} i^-θ.
pub fn approx_zeta(n: u64, theta: f64) -> f64 {
    const EXACT: u64 = 1_000_000;
    let m = n.min(EXACT);
    let mut sum: f64 = (1..=m).map(|i| (i as f64).powf(-theta)).sum();
    if n > m {
        let f = |x: f64| x.powf(-theta);
        let df = |x: f64| -theta * x.powf(-theta - 1.0);
        let (a, b) = (m as f64, n as f64);
        // Σ_{i=m+1..n} f(i) ≈ ∫_m^n f + (f(n) - f(m))/2 + (f'(n) - f'(m))/12
        let integral = (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta);
        sum += integral + (f(b) - f(a)) / 2.0 + (df(b) - df(a)) / 12.0;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeta_approximation_matches_the_exact_sum() {
        let n = 3_000_000u64;
        let exact: f64 = (1..=n).map(|i| (i as f64).powf(-0.9)).sum();
        let approx = approx_zeta(n, 0.9);
        assert!(
            ((approx - exact) / exact).abs() < 1e-9,
            "{approx} vs {exact}"
        );
    }
}
