//! Deriving the PIO figures α, k_r and k_w from throughput curves.
//!
//! Owns: the knee rule, the refinement of a sweep near the knee, and α. Must not touch:
//! measurement (the block and memory profilers feed curves in).
//!
//! # The rule (issue 4; three-tier spec section 6.2.6)
//!
//! - **plateau** = the highest throughput measured on the curve (each point being the median of
//!   its repetitions);
//! - **k** = the smallest depth (or thread count) whose throughput reaches `threshold` (0.9) of
//!   the plateau;
//! - **α** = the cost of one write in reads: write latency ÷ read latency at depth 1 (read IOPS
//!   ÷ write IOPS at depth 1). This is the PIO cost view the ACE paper's α follows — a batch of
//!   up to k_w writes costs α reads, as a batch of up to k_r reads costs one — and what the
//!   emulator's block model reproduces (docs/EMULATION.md says why, and why the section 6.6
//!   recipe "read plateau ÷ write plateau" agrees with it only when k_r = k_w). Without a
//!   depth-1 point on both curves, α falls back to the slot-time ratio
//!   (write plateau time per op × k_w) ÷ (read plateau time per op × k_r). The plateau ratio
//!   itself is reported as `throughput_ratio`.
//!
//! The curve is **saturated** when the plateau was already (within the threshold) reached at
//! half the largest depth measured; otherwise it is still climbing and k is only a lower bound
//! (`k ≥ max depth`).
//!
//! The rule's inherent bias: on a device whose throughput grows linearly up to k outstanding
//! I/Os and is flat afterwards (the PIO model, and the emulator), the smallest depth reaching
//! 90% of the plateau is ⌈0.9·k⌉, not k: an emulated k_r = 80 measures as 72, k_w = 8 as 8
//! (⌈7.2⌉). The depth where the plateau itself was measured is reported as `peak_depth`.

use serde::{Deserialize, Serialize};

/// The default threshold of the knee rule.
pub const DEFAULT_THRESHOLD: f64 = 0.9;

/// The knee of one throughput curve.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Knee {
    /// Smallest depth reaching `threshold` × plateau (a lower bound when not `saturated`).
    pub k: u32,
    /// Highest throughput on the curve (operations per second).
    pub plateau: f64,
    /// Depth at which the plateau was measured.
    pub peak_depth: u32,
    /// Whether the curve had flattened within the sweep.
    pub saturated: bool,
    /// The rule's threshold (0.9).
    pub threshold: f64,
}

/// Applies the knee rule to `(depth, throughput)` points (any order; non-finite or negative
/// throughputs are ignored). `None` when no usable point is given.
pub fn derive_knee(points: &[(u32, f64)], threshold: f64) -> Option<Knee> {
    let mut pts: Vec<(u32, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.1.is_finite() && p.1 >= 0.0 && p.0 > 0)
        .collect();
    pts.sort_by_key(|p| p.0);
    let &(peak_depth, plateau) = pts
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
    let target = threshold * plateau;
    let k = pts
        .iter()
        .find(|p| p.1 >= target)
        .map_or(peak_depth, |p| p.0);
    let max_depth = pts.last().map_or(peak_depth, |p| p.0);
    let saturated = pts
        .iter()
        .filter(|p| u64::from(p.0) * 2 <= u64::from(max_depth))
        .any(|p| p.1 >= target);
    Some(Knee {
        k,
        plateau,
        peak_depth,
        saturated,
        threshold,
    })
}

/// Depths worth measuring next to pin the knee and the plateau down, given the points so far
/// (none already measured; never above `max_depth`). Three rules:
/// 1. the band [k/2, 2k] in steps of max(1, k/16), which finds a plateau between two measured
///    powers of two (the emulator's saturation at exactly k_r = 80 lies between 64 and 128);
/// 2. the gap around the peak, in at most 16 steps;
/// 3. the gap just below k, in at most 16 steps, so k is exact where the curve is steep.
///
/// Call repeatedly (measuring the returned depths in between) until it returns nothing.
pub fn refine_depths(points: &[(u32, f64)], threshold: f64, max_depth: u32) -> Vec<u32> {
    let Some(knee) = derive_knee(points, threshold) else {
        return Vec::new();
    };
    let mut measured: Vec<u32> = points.iter().map(|p| p.0).collect();
    measured.sort_unstable();
    measured.dedup();
    let mut want = std::collections::BTreeSet::new();
    let fill = |want: &mut std::collections::BTreeSet<u32>, lo: u32, hi: u32| {
        // Strictly between lo and hi, at most 16 steps.
        if hi > lo + 1 {
            let step = (hi - lo).div_ceil(16).max(1);
            let mut d = lo + step;
            while d < hi {
                want.insert(d);
                d += step;
            }
        }
    };
    let k = knee.k;
    let step = (k / 16).max(1);
    let lo = (k / 2).max(1);
    let hi = k.saturating_mul(2).min(max_depth);
    let mut d = lo.div_ceil(step) * step;
    while d <= hi {
        want.insert(d.max(1));
        d += step;
    }
    let below = |x: u32| measured.iter().copied().filter(|&m| m < x).max();
    let above = |x: u32| measured.iter().copied().filter(|&m| m > x).min();
    let p = knee.peak_depth;
    fill(&mut want, below(p).unwrap_or(0), p);
    fill(&mut want, p, above(p).unwrap_or(p));
    fill(&mut want, below(k).unwrap_or(0), k);
    want.into_iter()
        .filter(|d| *d >= 1 && *d <= max_depth && measured.binary_search(d).is_err())
        .collect()
}

/// α and k for one access size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "AlphaKFile")]
pub struct AlphaK {
    /// Read knee.
    pub read: Knee,
    /// Write knee.
    pub write: Knee,
    /// k_r.
    pub k_r: u32,
    /// k_w.
    pub k_w: u32,
    /// α, the cost of one write in reads: `alpha_qd1` when both depth-1 points were measured,
    /// else the slot-time ratio `throughput_ratio · k_w / k_r`.
    pub alpha: f64,
    /// Read ÷ write throughput at depth 1 (= write ÷ read latency at depth 1), if both were
    /// measured.
    pub alpha_qd1: Option<f64>,
    /// Read plateau ÷ write plateau (the section 6.6 recipe; α · k_r / k_w on the emulator's
    /// block model).
    pub throughput_ratio: f64,
}

/// [`AlphaK`] as result files hold it. Files written before 2026-11-30 have no
/// `throughput_ratio`, and their `alpha` is the plateau ratio (α's reading then); reading
/// one moves that figure to `throughput_ratio` and takes α from the depth-1 ratio they also
/// hold, so a report never shows an old plateau ratio as a per-write α.
#[derive(Deserialize)]
struct AlphaKFile {
    read: Knee,
    write: Knee,
    k_r: u32,
    k_w: u32,
    alpha: f64,
    alpha_qd1: Option<f64>,
    throughput_ratio: Option<f64>,
}

impl From<AlphaKFile> for AlphaK {
    fn from(f: AlphaKFile) -> Self {
        let (alpha, throughput_ratio) = match f.throughput_ratio {
            Some(ratio) => (f.alpha, ratio),
            None => (
                f.alpha_qd1
                    .unwrap_or(f.alpha * f64::from(f.k_w) / f64::from(f.k_r.max(1))),
                f.alpha,
            ),
        };
        AlphaK {
            read: f.read,
            write: f.write,
            k_r: f.k_r,
            k_w: f.k_w,
            alpha,
            alpha_qd1: f.alpha_qd1,
            throughput_ratio,
        }
    }
}

/// Derives α, k_r and k_w from a read and a write curve.
pub fn derive_alpha_k(read: &[(u32, f64)], write: &[(u32, f64)], threshold: f64) -> Option<AlphaK> {
    let r = derive_knee(read, threshold)?;
    let w = derive_knee(write, threshold)?;
    let at1 = |pts: &[(u32, f64)]| {
        pts.iter()
            .find(|p| p.0 == 1)
            .map(|p| p.1)
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    let alpha_qd1 = match (at1(read), at1(write)) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let throughput_ratio = if w.plateau > 0.0 {
        r.plateau / w.plateau
    } else {
        f64::INFINITY
    };
    Some(AlphaK {
        read: r,
        write: w,
        k_r: r.k,
        k_w: w.k,
        alpha: alpha_qd1.unwrap_or(throughput_ratio * f64::from(w.k) / f64::from(r.k)),
        alpha_qd1,
        throughput_ratio,
    })
}
