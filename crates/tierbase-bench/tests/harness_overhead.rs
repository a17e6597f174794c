//! The benchmark harness on the null store ([`NullStore`], which stores nothing): checks that
//! the driver's phases run, count and verify on it, and — ignored by default — measures the
//! harness's own cost per operation.
//!
//! Measure with:
//!
//! ```text
//! cargo test --release -p tierbase-bench --test harness_overhead -- --ignored --nocapture
//! ```
//!
//! (`HARNESS_OPS` operations per phase, default 2 000 000; `HARNESS_REPEAT` runs per
//! configuration, default 5, the median is printed; `HARNESS_ONLY=insert-1` or `read` runs
//! only the configurations whose `kind-threads` label contains it, e.g. under callgrind.) The figure is the measured window's wall
//! time × threads ÷ operations: what one operation costs its worker thread in the harness.

use tierbase_bench::adapter::NullStore;
use tierbase_bench::measure::OpKind;
use tierbase_bench::progress::SilentProgress;
use tierbase_bench::runner::{PhaseConfig, PhaseOutcome, run_load, run_transactions};
use tierbase_bench::workload::ops::KeySpace;
use tierbase_bench::workload::{CoreWorkload, RequestDistribution, SizeSpec, WorkloadSpec};

/// The profiled configuration: 16-byte keys, 200-byte values.
fn spec(kind: OpKind, records: u64, ops: u64) -> WorkloadSpec {
    let mut s = match kind {
        OpKind::Insert => CoreWorkload::Load.spec(records, 0),
        _ => CoreWorkload::C.spec(records, ops),
    };
    s.key_size = 16;
    s.value_size = SizeSpec::Fixed(200);
    s.request_distribution = RequestDistribution::Uniform;
    if kind == OpKind::Update {
        s.read_proportion = 0.0;
        s.update_proportion = 1.0;
    }
    s
}

fn config(threads: usize) -> PhaseConfig {
    PhaseConfig {
        label: "harness".into(),
        threads,
        seed: 42,
        warmup_ops: 0,
        max_time: None,
        verify: true,
        read_batch: 1,
        latency_every: 1,
        prepared_reads: 1,
    }
}

/// One phase of `ops` operations of `kind` on the null store.
fn phase(kind: OpKind, threads: usize, ops: u64) -> PhaseOutcome {
    let store = NullStore;
    let cfg = config(threads);
    if kind == OpKind::Insert {
        let s = spec(kind, ops, 0);
        let ks = KeySpace::new(s.record_count);
        run_load(&store, &s, &ks, &cfg, &SilentProgress).unwrap()
    } else {
        let s = spec(kind, 1_000_000, ops);
        let ks = KeySpace::new(s.record_count);
        run_transactions(&store, &s, &ks, &cfg, &SilentProgress).unwrap()
    }
}

#[test]
fn phases_on_the_null_store_count_and_verify_every_operation() {
    for kind in [OpKind::Insert, OpKind::Read, OpKind::Update] {
        for threads in [1, 2] {
            let out = phase(kind, threads, 5_001);
            let stats = out.measurements.operation_stats(out.elapsed);
            assert_eq!(stats.len(), 1, "{kind:?}: {stats:?}");
            let s = stats[&kind];
            assert_eq!((s.count, s.not_found), (5_001, 0), "{kind:?} t={threads}");
            assert_eq!(s.latency_ns.samples, 5_001);
            assert_eq!(out.verify_failures, 0);
            let timeline: u64 = out
                .measurements
                .timeline(out.elapsed)
                .iter()
                .map(|b| b.ops)
                .sum();
            assert_eq!(timeline, 5_001);
        }
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "measurement: run with --ignored --nocapture on a release build"]
fn harness_overhead() {
    let ops = env("HARNESS_OPS", 2_000_000);
    let repeat = env("HARNESS_REPEAT", 5).max(1);
    println!("harness ns/op (null store, 16 B keys, 200 B values, verify on; median of {repeat})");
    let only = std::env::var("HARNESS_ONLY").unwrap_or_default();
    for kind in [OpKind::Insert, OpKind::Read, OpKind::Update] {
        for threads in [1usize, 2] {
            if !format!("{}-{threads}", kind.name()).contains(&only) {
                continue;
            }
            let mut samples: Vec<f64> = (0..repeat)
                .map(|_| {
                    let out = phase(kind, threads, ops);
                    assert_eq!(out.measurements.total_ops(), ops);
                    assert_eq!(out.verify_failures, 0);
                    out.elapsed.as_nanos() as f64 * threads as f64 / ops as f64
                })
                .collect();
            samples.sort_by(f64::total_cmp);
            let median = samples[samples.len() / 2];
            let all: Vec<String> = samples.iter().map(|s| format!("{s:.1}")).collect();
            println!(
                "{:<7} t={threads}: {median:6.1} ns/op  [{}]",
                kind.name(),
                all.join(" ")
            );
        }
    }
}
