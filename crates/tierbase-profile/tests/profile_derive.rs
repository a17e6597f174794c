//! The α/k derivation on synthetic curves: clean, noisy, batch-sawtooth and
//! monotone-without-plateau.

use tierbase_bench::rng::Rng;
use tierbase_profile::derive::{derive_alpha_k, derive_knee, refine_depths};

const POW2: [u32; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// A sliding-window PIO device: linear up to k, flat after (ops/s with service time `s_us`).
fn pio(d: u32, k: u32, s_us: f64) -> f64 {
    f64::from(d.min(k)) * 1e6 / s_us
}

/// A device measured in batches of exactly d: ⌈d/k⌉ waves per batch.
fn batched(d: u32, k: u32, s_us: f64) -> f64 {
    f64::from(d) * 1e6 / (f64::from(d.div_ceil(k)) * s_us)
}

fn curve(depths: impl IntoIterator<Item = u32>, f: impl Fn(u32) -> f64) -> Vec<(u32, f64)> {
    depths.into_iter().map(|d| (d, f(d))).collect()
}

/// Runs the refinement loop against a synthetic device, as the block profiler does.
fn sweep(f: impl Fn(u32) -> f64, max: u32) -> Vec<(u32, f64)> {
    let mut pts = curve(POW2.into_iter().filter(|&d| d <= max), &f);
    for _ in 0..4 {
        let next = refine_depths(&pts, 0.9, max);
        if next.is_empty() {
            break;
        }
        pts.extend(curve(next, &f));
    }
    pts
}

#[test]
fn clean_curves_give_the_rule_value() {
    // Every depth measured: k = ⌈0.9 k_true⌉, the rule's inherent bias.
    for (k_true, expect) in [(80, 72), (8, 8), (32, 29), (1, 1), (25, 23), (11, 10)] {
        let pts = curve(1..=256, |d| pio(d, k_true, 200.0));
        let knee = derive_knee(&pts, 0.9).unwrap();
        assert_eq!(knee.k, expect, "k_true {k_true}");
        assert!(knee.saturated);
        assert!((knee.plateau - pio(k_true, k_true, 200.0)).abs() < 1e-6);
    }
    // Powers of two only: the first power reaching 90%.
    let pts = curve(POW2, |d| pio(d, 32, 100.0));
    assert_eq!(derive_knee(&pts, 0.9).unwrap().k, 32);
    let pts = curve(POW2, |d| pio(d, 20, 100.0));
    assert_eq!(
        derive_knee(&pts, 0.9).unwrap().k,
        32,
        "20 lies between 16 and 32"
    );
}

#[test]
fn refinement_recovers_k_between_powers_of_two() {
    // Sliding window, k = 20: pow2 alone says 32; refining finds ⌈0.9·20⌉ = 18.
    let pts = sweep(|d| pio(d, 20, 100.0), 256);
    assert_eq!(derive_knee(&pts, 0.9).unwrap().k, 18);
    // Batches on the P4510 profile (k_r = 80, k_w = 8): the powers of two never hit the
    // read plateau (64 per wave at 64, 128 and 256); refinement finds depth 80.
    let reads = sweep(|d| batched(d, 80, 212.425), 256);
    let rk = derive_knee(&reads, 0.9).unwrap();
    assert_eq!(rk.peak_depth, 80);
    assert_eq!(rk.k, 72);
    // The emulator's block model: a write slot is α·t_r.
    let w_service = 2.8 * 212.425;
    let writes = sweep(|d| batched(d, 8, w_service), 256);
    let wk = derive_knee(&writes, 0.9).unwrap();
    assert_eq!(wk.k, 8);
    let ak = derive_alpha_k(&reads, &writes, 0.9).unwrap();
    // α is the depth-1 cost ratio, exact whatever the knee rule's bias on k.
    assert!((ak.alpha - 2.8).abs() < 1e-9, "{}", ak.alpha);
    assert_eq!((ak.k_r, ak.k_w), (72, 8));
    // The plateaus differ by α·k_r/k_w.
    assert!(
        (ak.throughput_ratio - 28.0).abs() < 1e-9,
        "{}",
        ak.throughput_ratio
    );
    // Without depth 1, α is the slot-time ratio: exact but for the knee's ⌈0.9·k⌉ bias.
    let no_qd1 = |c: &[(u32, f64)]| c.iter().copied().filter(|p| p.0 > 1).collect::<Vec<_>>();
    let ak = derive_alpha_k(&no_qd1(&reads), &no_qd1(&writes), 0.9).unwrap();
    assert!(ak.alpha_qd1.is_none());
    assert!((ak.alpha - 28.0 * 8.0 / 72.0).abs() < 1e-9, "{}", ak.alpha);
    // Refinement stays within the depth limit and never repeats a depth.
    let next = refine_depths(&reads, 0.9, 256);
    assert!(next.iter().all(|d| (1..=256).contains(d)));
    assert!(next.iter().all(|d| !reads.iter().any(|p| p.0 == *d)));
}

#[test]
fn noisy_curves_stay_within_tolerance() {
    let mut rng = Rng::from_seed(2024);
    for trial in 0..200 {
        let noise = |v: f64, rng: &mut Rng| v * (1.0 + (rng.next_f64() - 0.5) * 0.06); // ±3%
        let reads = curve(1..=256, |d| pio(d, 80, 212.0));
        let reads: Vec<(u32, f64)> = reads
            .into_iter()
            .map(|(d, v)| (d, noise(v, &mut rng)))
            .collect();
        let writes = curve(1..=64, |d| pio(d, 8, 2.8 * 212.0));
        let writes: Vec<(u32, f64)> = writes
            .into_iter()
            .map(|(d, v)| (d, noise(v, &mut rng)))
            .collect();
        let ak = derive_alpha_k(&reads, &writes, 0.9).unwrap();
        // ±3% noise moves the plateau by at most 3% and the 90% line with it; α, a ratio of
        // two noisy depth-1 points, by at most about 6%.
        assert!((68..=78).contains(&ak.k_r), "trial {trial}: k_r {}", ak.k_r);
        assert!((7..=9).contains(&ak.k_w), "trial {trial}: k_w {}", ak.k_w);
        assert!(
            (ak.alpha - 2.8).abs() < 2.8 * 0.065,
            "trial {trial}: α {}",
            ak.alpha
        );
        assert!(ak.read.saturated && ak.write.saturated);
    }
}

#[test]
fn monotone_curves_without_plateau_report_a_lower_bound() {
    // Linear to the end: not saturated, k is the largest depth (a lower bound).
    let pts = curve(POW2, |d| f64::from(d) * 1000.0);
    let k = derive_knee(&pts, 0.9).unwrap();
    assert!(!k.saturated);
    assert_eq!(k.k, 256);
    assert_eq!(k.peak_depth, 256);
    // Concave but still clearly growing at the end (+25% from 128 to 256): not saturated.
    let pts = curve(POW2, |d| f64::from(d).sqrt().powf(0.65) * 1000.0);
    let k = derive_knee(&pts, 0.9).unwrap();
    assert!(!k.saturated, "{k:?}");
    // Levelling off inside the sweep: saturated.
    let pts = curve(POW2, |d| 1000.0 * (1.0 - (-f64::from(d) / 12.0).exp()));
    let k = derive_knee(&pts, 0.9).unwrap();
    assert!(k.saturated);
    assert_eq!(k.k, 32);
}

#[test]
fn degenerate_inputs() {
    assert!(derive_knee(&[], 0.9).is_none());
    assert!(derive_knee(&[(1, f64::NAN), (0, 5.0)], 0.9).is_none());
    let k = derive_knee(&[(4, 10.0)], 0.9).unwrap();
    assert_eq!((k.k, k.peak_depth), (4, 4));
    assert!(!k.saturated, "one point cannot show a plateau");
    // Ties at the top: the smaller depth is the peak.
    let k = derive_knee(&[(8, 10.0), (16, 10.0), (4, 5.0)], 0.9).unwrap();
    assert_eq!((k.k, k.peak_depth), (8, 8));
    // A write curve of zeros gives an infinite α rather than a panic.
    let ak = derive_alpha_k(&[(1, 5.0)], &[(1, 0.0)], 0.9).unwrap();
    assert!(ak.alpha.is_infinite());
    assert!(ak.throughput_ratio.is_infinite());
    assert!(ak.alpha_qd1.is_none());
}

#[test]
fn result_files_keep_alpha_a_per_write_cost_old_and_new() {
    let reads = sweep(|d| batched(d, 80, 212.425), 256);
    let writes = sweep(|d| batched(d, 8, 2.8 * 212.425), 256);
    let ak = derive_alpha_k(&reads, &writes, 0.9).unwrap();
    // A file written now reads back as it was written.
    let json = serde_json::to_string(&ak).unwrap();
    let back: tierbase_profile::derive::AlphaK = serde_json::from_str(&json).unwrap();
    assert_eq!(back, ak);
    // A file written before 2026-11-30: `alpha` was the plateau ratio and there was no
    // `throughput_ratio`. It reads back with α from its depth-1 ratio.
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    let obj = old.as_object_mut().unwrap();
    obj.remove("throughput_ratio");
    obj.insert("alpha".into(), serde_json::json!(28.0));
    let back: tierbase_profile::derive::AlphaK = serde_json::from_value(old.clone()).unwrap();
    assert!((back.alpha - 2.8).abs() < 1e-9, "{}", back.alpha);
    assert_eq!(back.throughput_ratio, 28.0);
    // Without a depth-1 ratio either, α is the slot-time ratio of the plateaus.
    old.as_object_mut().unwrap().remove("alpha_qd1");
    let back: tierbase_profile::derive::AlphaK = serde_json::from_value(old).unwrap();
    assert!(
        (back.alpha - 28.0 * 8.0 / 72.0).abs() < 1e-9,
        "{}",
        back.alpha
    );
    assert_eq!(back.alpha_qd1, None);
}

#[test]
fn an_unusable_depth_one_point_leaves_alpha_to_the_plateaus() {
    let reads = curve(POW2, |d| pio(d, 8, 100.0));
    let mut writes = curve(POW2, |d| pio(d, 8, 200.0));
    writes[0].1 = f64::INFINITY;
    let ak = derive_alpha_k(&reads, &writes, 0.9).unwrap();
    assert_eq!(ak.alpha_qd1, None);
    assert!((ak.alpha - 2.0).abs() < 1e-9, "{}", ak.alpha);
}
