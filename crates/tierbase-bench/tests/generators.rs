//! Statistical tests of the YCSB generators against theory, for fixed seeds (so each test is
//! deterministic: it either always passes or always fails for a given build).
//!
//! Thresholds are set at the 1e-4 tail of the relevant distribution, so a correct generator
//! passes with any seed and a wrong one (wrong θ, wrong zeta, off-by-one ranks) fails.

use std::collections::HashMap;

use tierbase_bench::generator::{
    ScrambledZipfianGenerator, SkewedLatestGenerator, UniformGenerator, ZipfianGenerator,
    fnvhash64, zeta,
};
use tierbase_bench::rng::Rng;

/// Upper 1e-4 critical value of chi-square with `df` degrees of freedom (Wilson–Hilferty).
fn chi2_critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.719; // standard normal 1e-4 upper quantile
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// Chi-square of observed counts against expected probabilities, pooling consecutive cells
/// until each pooled cell expects at least `min_expected`. Returns (statistic, df).
fn chi_square(observed: &[u64], probs: &[f64], draws: u64, min_expected: f64) -> (f64, usize) {
    let mut stat = 0.0;
    let mut cells = 0usize;
    let (mut o, mut e) = (0.0, 0.0);
    for (&obs, &p) in observed.iter().zip(probs) {
        o += obs as f64;
        e += p * draws as f64;
        if e >= min_expected {
            stat += (o - e) * (o - e) / e;
            cells += 1;
            o = 0.0;
            e = 0.0;
        }
    }
    if e > 0.0 {
        stat += (o - e) * (o - e) / e;
        cells += 1;
    }
    (stat, cells.saturating_sub(1))
}

#[test]
fn zipfian_matches_its_exact_distribution_chi_square() {
    let n = 1000u64;
    let draws = 1_000_000u64;
    let mut z = ZipfianGenerator::new(0, n - 1, 0.99).unwrap();
    let mut rng = Rng::from_seed(20_240_601);
    let mut counts = vec![0u64; n as usize];
    for _ in 0..draws {
        let v = z.next_value(&mut rng);
        counts[v as usize] += 1;
    }
    let probs: Vec<f64> = (0..n).map(|k| z.probability_of(k, n)).collect();
    let (stat, df) = chi_square(&counts, &probs, draws, 50.0);
    assert!(df > 100, "enough cells: {df}");
    assert!(
        stat < chi2_critical(df),
        "chi-square {stat:.1} exceeds the 1e-4 critical value {:.1} (df {df})",
        chi2_critical(df)
    );
}

#[test]
fn zipfian_rank_frequency_follows_zipfs_law() {
    let n = 1000u64;
    let theta = 0.99;
    let draws = 1_000_000u64;
    let mut z = ZipfianGenerator::new(0, n - 1, theta).unwrap();
    let mut rng = Rng::from_seed(7);
    let mut counts = vec![0u64; n as usize];
    for _ in 0..draws {
        counts[z.next_value(&mut rng) as usize] += 1;
    }
    let zn = zeta(n, theta);
    let ideal = |rank: usize| 1.0 / (rank as f64).powf(theta) / zn;
    let freq = |rank: usize| counts[rank - 1] as f64 / draws as f64;
    // Gray's method is exact for the two most popular items...
    for rank in [1, 2] {
        let rel = freq(rank) / ideal(rank);
        assert!(
            (0.98..1.02).contains(&rel),
            "rank {rank}: {rel:.4} of Zipf's law"
        );
    }
    // ...and approaches the law from rank 3 on (17% high at rank 3, 1% at rank 11).
    for rank in 3..=20 {
        let rel = freq(rank) / ideal(rank);
        assert!(
            (0.97..1.22).contains(&rel),
            "rank {rank}: {rel:.4} of Zipf's law"
        );
    }
    // Log-log slope over ranks 10..500 is -θ.
    let pts: Vec<(f64, f64)> = (10..=500)
        .filter(|&r| counts[r - 1] > 0)
        .map(|r| ((r as f64).ln(), freq(r).ln()))
        .collect();
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / pts.len() as f64;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64;
    let slope = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
        / pts.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    assert!(
        (slope + theta).abs() < 0.05,
        "log-log slope {slope:.3}, expected {}",
        -theta
    );
}

#[test]
fn zipfian_other_theta_is_less_skewed() {
    let mut rng = Rng::from_seed(3);
    let mut top = |theta: f64| {
        let mut z = ZipfianGenerator::new(0, 999, theta).unwrap();
        (0..100_000).filter(|_| z.next_value(&mut rng) == 0).count() as f64 / 100_000.0
    };
    let (a, b) = (top(0.5), top(0.99));
    assert!(
        (a - 1.0 / zeta(1000, 0.5)).abs() < 0.003,
        "θ=0.5 top share {a}"
    );
    assert!(b > 3.0 * a);
}

#[test]
fn scrambled_zipfian_spreads_hot_keys_by_fnv_hash() {
    let n = 10_000u64;
    let draws = 1_000_000u64;
    let mut g = ScrambledZipfianGenerator::new(0, n - 1, 0.99).unwrap();
    let mut rng = Rng::from_seed(11);
    let mut counts = vec![0u64; n as usize];
    for _ in 0..draws {
        let v = g.next_value(&mut rng);
        assert!(v < n);
        counts[v as usize] += 1;
    }
    let mut ranked: Vec<(u64, usize)> = counts.iter().enumerate().map(|(i, &c)| (c, i)).collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    // The hottest item is zipfian rank 0 hashed into the space, the next rank 1.
    let hottest = fnvhash64(0).unsigned_abs() % n;
    let second = fnvhash64(1).unsigned_abs() % n;
    assert_eq!(ranked[0].1 as u64, hottest);
    assert_eq!(ranked[1].1 as u64, second);
    // Its share is 1/zeta(10^10, 0.99) = 1/26.469 = 3.78%.
    let share = ranked[0].0 as f64 / draws as f64;
    assert!(
        (share - 1.0 / 26.469_028).abs() < 0.001,
        "top share {share}"
    );
    // The ten hottest keys are scattered over the space, not clustered at its start.
    let top10: Vec<usize> = ranked.iter().take(10).map(|r| r.1).collect();
    let spread = top10.iter().max().unwrap() - top10.iter().min().unwrap();
    assert!(spread > n as usize / 2, "hot keys {top10:?}");
    assert!(top10.iter().filter(|&&i| i < 100).count() < 3);
}

#[test]
fn uniform_covers_the_space_evenly() {
    let n = 1000u64;
    let draws = 200_000u64;
    let mut g = UniformGenerator::new(5, 5 + n - 1).unwrap();
    let mut rng = Rng::from_seed(99);
    let mut counts = vec![0u64; n as usize];
    for _ in 0..draws {
        let v = g.next_value(&mut rng);
        assert!((5..5 + n).contains(&v));
        counts[(v - 5) as usize] += 1;
    }
    assert!(counts.iter().all(|&c| c > 0), "every value drawn");
    let probs = vec![1.0 / n as f64; n as usize];
    let (stat, df) = chi_square(&counts, &probs, draws, 5.0);
    assert_eq!(df, n as usize - 1);
    assert!(stat < chi2_critical(df), "chi-square {stat:.1}");
}

#[test]
fn latest_favours_the_newest_inserts() {
    let mut rng = Rng::from_seed(5);
    let last = 10_000u64;
    let mut g = SkewedLatestGenerator::new(last, 0.99).unwrap();
    let draws = 200_000;
    let mut counts: HashMap<u64, u64> = HashMap::new();
    let mut newest_1pct = 0;
    for _ in 0..draws {
        let v = g.next_value(last, &mut rng);
        assert!(v <= last);
        *counts.entry(v).or_default() += 1;
        if v > last - 100 {
            newest_1pct += 1;
        }
    }
    // The newest record is the most popular, and the newest 1% of records get what the
    // zipfian gives its 100 most popular ranks: about 52% (zeta(100)/zeta(10000) for an ideal
    // Zipf law; Gray's method gives slightly more).
    let mode = counts.iter().max_by_key(|(_, c)| **c).map(|(v, _)| *v);
    assert_eq!(mode, Some(last));
    let share = newest_1pct as f64 / draws as f64;
    let zipf = ZipfianGenerator::new(0, last - 1, 0.99).unwrap();
    let expect: f64 = (0..100).map(|k| zipf.probability_of(k, last)).sum();
    assert!(
        (share - expect).abs() < 0.005,
        "newest-1% share {share}, expected {expect}"
    );
    assert!((expect - zeta(100, 0.99) / zeta(last, 0.99)).abs() < 0.02);
    // After more inserts the preference moves to the new newest record.
    let mut moved = HashMap::new();
    for _ in 0..20_000 {
        *moved
            .entry(g.next_value(last + 500, &mut rng))
            .or_insert(0u64) += 1;
    }
    let mode = moved.iter().max_by_key(|(_, c)| **c).map(|(v, _)| *v);
    assert_eq!(mode, Some(last + 500));
}

/// YCSB 0.17's distribution of `ZipfianGenerator.nextLong(itemcount)` after the generator,
/// built over `items` items, has grown to `itemcount`: computed here straight from YCSB's
/// Java (not from the port), by inverting its formula for `u`. `eta_items` is the count `eta`
/// is computed from: YCSB's `items` (the constructor's count), or `itemcount` for Gray's.
fn ycsb_next_long_probs(itemcount: u64, eta_items: u64, theta: f64, ranks: usize) -> Vec<f64> {
    let zetan: f64 = (1..=itemcount).map(|i| 1.0 / (i as f64).powf(theta)).sum();
    let zeta2 = 1.0 + 0.5f64.powf(theta);
    // eta = (1 - Math.pow(2.0 / items, 1 - theta)) / (1 - zeta2theta / zetan)
    let eta = (1.0 - (2.0 / eta_items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
    let mut p = vec![0.0; ranks];
    // uz < 1 → base; uz < 1 + 0.5^theta → base + 1
    p[0] = 1.0 / zetan;
    p[1] = 0.5f64.powf(theta) / zetan;
    let u_formula = zeta2 / zetan;
    // Otherwise ret = (long) (itemcount * Math.pow(eta * u - eta + 1, alpha)), alpha =
    // 1 / (1 - theta): ret >= k exactly when u >= 1 + ((k / itemcount)^(1 - theta) - 1) / eta.
    let first_u = |k: usize| 1.0 + ((k as f64 / itemcount as f64).powf(1.0 - theta) - 1.0) / eta;
    for (k, pk) in p.iter_mut().enumerate() {
        let lo = first_u(k).max(u_formula);
        let hi = first_u(k + 1).min(1.0).max(u_formula);
        if hi > lo {
            *pk += hi - lo;
        }
    }
    p
}

/// Workload D's "latest" chooser after the store grew from 1,000 to 2,000 records, against
/// the distribution YCSB's own algorithm gives: by default exactly YCSB's (whose `eta` keeps
/// the initial count, so distances 2 and 3 are never drawn), and Gray's with `grown`.
#[test]
fn latest_after_growth_matches_ycsb_and_grown_matches_gray() {
    use tierbase_bench::generator::ZipfianEta;
    let (initial, grown) = (1_000u64, 2_000u64);
    let ranks = 64;
    let draws = 400_000u64;
    for (mode, eta_items) in [(ZipfianEta::Ycsb, initial), (ZipfianEta::Grown, grown)] {
        let mut g = SkewedLatestGenerator::new(initial, 0.99)
            .unwrap()
            .with_eta_mode(mode);
        let mut rng = Rng::from_seed(11);
        let mut counts = vec![0u64; ranks + 1];
        for _ in 0..draws {
            let distance = grown - g.next_value(grown, &mut rng);
            counts[(distance as usize).min(ranks)] += 1;
        }
        let mut probs = ycsb_next_long_probs(grown, eta_items, 0.99, ranks);
        probs.push(1.0 - probs.iter().sum::<f64>()); // the tail beyond `ranks`
        let (stat, df) = chi_square(&counts, &probs, draws, 5.0);
        assert!(
            stat < chi2_critical(df),
            "{mode}: chi-square {stat:.1} with {df} df; counts {:?}",
            &counts[..12]
        );
        let share = |d: usize| counts[d] as f64 / draws as f64;
        match mode {
            ZipfianEta::Ycsb => {
                // YCSB's shape: the third- and fourth-newest records are never read.
                assert_eq!(probs[2] + probs[3], 0.0);
                assert_eq!(counts[2] + counts[3], 0, "{:?}", &counts[..8]);
                assert!(share(4) > 0.02, "{}", share(4));
            }
            ZipfianEta::Grown => assert!(share(2) > 0.04, "{}", share(2)),
        }
    }
}
