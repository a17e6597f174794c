//! Work packages: sequential modes cover the range exactly once; random modes stay in bounds.

use tierbase_profile::packages::{
    Distribution, ExecMode, Package, PackageSpec, WorkPackages, generate,
};

fn spec(range: u64, access: u64, mode: ExecMode) -> PackageSpec {
    PackageSpec {
        range,
        access_size: access,
        mode,
        operations: 10_000,
        package_bytes: 64 << 10,
        partitions: 1,
        distribution: Distribution::Uniform,
        seed: 1,
        chain_bytes: 384,
    }
}

/// Every access of a sequential package set, in execution order per partition.
fn sequential_accesses(w: &WorkPackages, access: u64) -> Vec<Vec<u64>> {
    w.partitions
        .iter()
        .map(|pkgs| {
            let mut v = Vec::new();
            for p in pkgs {
                let Package::Sequential {
                    start,
                    end,
                    descending,
                } = p
                else {
                    panic!("not sequential: {p:?}")
                };
                let mut offs: Vec<u64> = (*start..*end).step_by(access as usize).collect();
                if *descending {
                    offs.reverse();
                }
                v.extend(offs);
            }
            v
        })
        .collect()
}

#[test]
fn sequential_packages_cover_the_range_once_without_overlap() {
    for &(range, access, pkg, parts) in &[
        (1u64 << 20, 64u64, 64u64 << 10, 1usize),
        (1 << 20, 256, 100_000, 3),
        ((1 << 20) + 1000, 4096, 64 << 10, 4),
        (10_000, 64, 1, 1),
        (4096, 4096, 64 << 20, 1),
        (3 << 20, 512, 1 << 20, 7),
    ] {
        for mode in [ExecMode::Sequential, ExecMode::SequentialDesc] {
            let mut s = spec(range, access, mode);
            s.package_bytes = pkg;
            s.partitions = parts;
            let w = generate(&s).unwrap();
            assert_eq!(w.partitions.len(), parts);
            let per_part = sequential_accesses(&w, access);
            let mut all: Vec<u64> = per_part.iter().flatten().copied().collect();
            let n = all.len() as u64;
            all.sort_unstable();
            all.dedup();
            assert_eq!(all.len() as u64, n, "overlap: {range} {access} {parts}");
            let slots = range / access;
            assert_eq!(n, slots, "coverage: {range} {access} {parts}");
            assert_eq!(all, (0..slots).map(|i| i * access).collect::<Vec<_>>());
            assert_eq!(w.total_ops(access), slots);
            for (p, accesses) in per_part.iter().enumerate() {
                let (lo, hi) = w.bounds[p];
                assert!(accesses.iter().all(|&o| o >= lo && o + access <= hi));
                let ordered = accesses.windows(2).all(|x| match mode {
                    ExecMode::Sequential => x[0] < x[1],
                    _ => x[0] > x[1],
                });
                assert!(ordered, "{mode:?} order in partition {p}");
                // Packages hold at most package_bytes of work.
                for pk in &w.partitions[p] {
                    assert!(pk.ops(access) * access <= pkg.max(access));
                }
            }
        }
    }
}

#[test]
fn random_packages_stay_in_bounds_aligned_and_in_their_partition() {
    for dist in [Distribution::Uniform, Distribution::Zipf { alpha: 0.9 }] {
        for &(range, access, parts, ops) in &[
            (1u64 << 20, 64u64, 1usize, 10_000u64),
            ((1 << 20) + 77, 256, 3, 9_999),
            (8192, 4096, 2, 101),
            (1 << 30, 64, 4, 20_000),
        ] {
            let mut s = spec(range, access, ExecMode::Random);
            s.partitions = parts;
            s.operations = ops;
            s.distribution = dist;
            s.package_bytes = 4096;
            let w = generate(&s).unwrap();
            assert_eq!(w.total_ops(access), ops);
            for (p, pkgs) in w.partitions.iter().enumerate() {
                let (lo, hi) = w.bounds[p];
                assert!(hi <= range);
                for pk in pkgs {
                    let Package::Random { offsets } = pk else {
                        panic!("not random")
                    };
                    assert!(offsets.len() as u64 <= (4096 / access).max(1));
                    for &o in offsets {
                        assert_eq!(o % access, 0);
                        assert!(o >= lo && o + access <= hi, "{o} outside [{lo}, {hi})");
                    }
                }
            }
        }
    }
}

#[test]
fn zipf_favours_the_first_items_and_uniform_does_not() {
    let count_first = |dist| {
        let mut s = spec(1 << 20, 64, ExecMode::Random);
        s.distribution = dist;
        s.operations = 50_000;
        let w = generate(&s).unwrap();
        w.partitions
            .iter()
            .flatten()
            .map(|p| match p {
                Package::Random { offsets } => offsets.iter().filter(|&&o| o < 64 * 16).count(),
                _ => 0,
            })
            .sum::<usize>()
    };
    let zipf = count_first(Distribution::Zipf { alpha: 0.9 });
    let uniform = count_first(Distribution::Uniform);
    // 16 of 16384 slots: uniform expects ~49 hits; zipf(0.9) gives the first 16 far more.
    assert!(uniform < 150, "uniform {uniform}");
    assert!(zipf > 5_000, "zipf {zipf}");
}

#[test]
fn chain_packages_and_bad_specs() {
    let mut s = spec(1 << 20, 256, ExecMode::Custom);
    s.operations = 1000;
    s.package_bytes = 384 * 100;
    let w = generate(&s).unwrap();
    assert_eq!(w.partitions.len(), 1);
    assert_eq!(w.partitions[0].len(), 10);
    assert_eq!(w.total_ops(256), 1000);
    let e = generate(&spec(32, 64, ExecMode::Random)).unwrap_err();
    assert!(e.to_string().contains("smaller than one access"), "{e}");
    let e = generate(&spec(1 << 20, 96, ExecMode::Random)).unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    let mut many = spec(4096, 64, ExecMode::Sequential);
    many.partitions = 100;
    assert!(generate(&many).is_err());
    let mut huge = spec(1 << 20, 64, ExecMode::Random);
    huge.operations = u64::MAX;
    assert!(
        generate(&huge)
            .unwrap_err()
            .to_string()
            .contains("generated in advance")
    );
}
