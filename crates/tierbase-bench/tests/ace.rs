//! The trace-driven ACE benchmark in virtual time: deterministic, so every figure is exact.

use tierbase::buffer::ace::{CostModel, Prefetcher};
use tierbase::device::Catalogue;
use tierbase_bench::ace::{
    self, AceDevice, AcePlan, AceResultFile, Capacity, Locality, SyntheticSpec, TraceSource,
};

fn plan(devices: &[&str], pages: u64, capacity: usize, ops: u64, writes: &[f64]) -> AcePlan {
    let cat = Catalogue::builtin();
    AcePlan {
        devices: devices
            .iter()
            .map(|d| AceDevice::resolve(d, &cat, None).unwrap())
            .collect(),
        policies: ace::parse_policies("all").unwrap(),
        write_pcts: writes.to_vec(),
        n_w: None,
        n_e: None,
        prefetcher: Prefetcher::None,
        cost_model: CostModel::Pio,
        trace: TraceSource::Synthetic(SyntheticSpec {
            pages,
            ops,
            locality: Locality {
                access_pct: 90.0,
                data_pct: 10.0,
            },
            seed: 42,
        }),
        capacity: Capacity::Pages(capacity),
        page_size: 4096,
        threads: 2,
        command: "test".into(),
    }
}

fn quiet(_: &str) {}

/// The paper's mixed trace (r/w 50/50, 90/10 locality) on the emulated PCIe SSD, scaled down.
#[test]
fn ace_beats_every_policy_on_the_mixed_trace_and_keeps_the_victim_order() {
    let p = plan(&["pcie-ssd-p4510"], 20_000, 2_000, 200_000, &[50.0]);
    let file = ace::run_ace(&p, &quiet).unwrap();
    assert_eq!(file.runs.len(), 4);
    for r in &file.runs {
        assert!(r.virtual_time);
        assert!(
            r.medium.contains("virtual-time model of pcie-ssd-p4510")
                && r.medium.contains("no real I/O"),
            "{}",
            r.medium
        );
        assert_eq!(r.n_w, 8, "n_w defaults to the profile's k_w");
        assert_eq!(r.n_e, 1);
        assert!(
            r.ace.runtime_ns < r.baseline.runtime_ns,
            "{}: ACE {} ns, baseline {} ns",
            r.policy,
            r.ace.runtime_ns,
            r.baseline.runtime_ns
        );
        assert!(r.speedup > 1.0 && r.runtime_reduction_pct > 0.0);
        assert_eq!(r.baseline.stats.accesses, 200_000);
        assert_eq!(r.ace.stats.accesses, 200_000);
        // Plain policies write one page per batch; ACE fills its batches.
        assert_eq!(r.baseline.stats.mean_write_batch(), 1.0);
        assert!(r.mean_write_batch > 7.0, "{}", r.mean_write_batch);
        assert!((r.trace_write_pct - 50.0).abs() < 1.0);
        if r.policy == "clock" || r.policy == "lru" {
            // Their victims do not depend on dirtiness: ACE changes no eviction.
            assert_eq!(r.ace.stats.misses, r.baseline.stats.misses, "{}", r.policy);
            assert_eq!(r.ace.stats.evictions, r.baseline.stats.evictions);
            assert_eq!(r.miss_increase_pct, 0.0);
        }
    }
    let policies: Vec<&str> = file.runs.iter().map(|r| r.policy.as_str()).collect();
    assert_eq!(policies, ["clock", "lru", "cflru", "lru-wsr"]);

    // The JSON file reads back as written.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ace.json");
    file.write(&path).unwrap();
    let back = AceResultFile::read(&path).unwrap();
    assert_eq!(back, file);
    assert_eq!(back.format, ace::ACE_RESULT_FORMAT);

    // Deterministic: the same plan gives the same device times and counters.
    let again = ace::run_ace(&p, &quiet).unwrap();
    for (a, b) in file.runs.iter().zip(&again.runs) {
        assert_eq!(a.baseline.runtime_ns, b.baseline.runtime_ns);
        assert_eq!(a.ace.runtime_ns, b.ace.runtime_ns);
        assert_eq!(a.baseline.stats, b.baseline.stats);
        assert_eq!(a.ace.stats, b.ace.stats);
    }
}

#[test]
fn n_w_of_one_is_the_baseline_and_read_only_traces_gain_nothing() {
    let mut p = plan(&["sata-ssd"], 4_000, 400, 40_000, &[0.0, 30.0]);
    p.n_w = Some(vec![1, 4]);
    let file = ace::run_ace(&p, &quiet).unwrap();
    assert_eq!(file.runs.len(), 4 * 2 * 2);
    for r in &file.runs {
        if r.n_w == 1 || r.write_pct == 0.0 {
            assert_eq!(r.ace.stats, r.baseline.stats, "{} {}", r.policy, r.n_w);
            assert_eq!(r.ace.runtime_ns, r.baseline.runtime_ns);
            assert_eq!(r.speedup, 1.0);
        }
        if r.write_pct == 0.0 {
            assert_eq!(r.ace.stats.pages_written, 0);
        } else if r.n_w == 4 {
            assert!(r.ace.runtime_ns < r.baseline.runtime_ns, "{}", r.policy);
        }
    }
}

#[test]
fn sweeps_draw_their_charts_and_the_html_names_the_model() {
    let mut p = plan(
        &["pcie-ssd-p4510", "cloud-ssd"],
        2_000,
        200,
        10_000,
        &[20.0, 80.0],
    );
    p.policies = vec!["lru".into()];
    p.n_w = Some(vec![2, 8]);
    let file = ace::run_ace(&p, &quiet).unwrap();
    assert_eq!(file.runs.len(), 2 * 2 * 2);
    // n_w sweep: runtime and speedup for each (device, write share) = 8; write-share sweep: one
    // per policy = 1.
    let charts = ace::charts(&file);
    assert_eq!(charts.len(), 9);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ace.html");
    assert_eq!(ace::write_html(&file, "ace.json", &out, "t").unwrap(), 9);
    let html = std::fs::read_to_string(&out).unwrap();
    for want in [
        "Runtime vs n_w — pcie-ssd-p4510, 20% writes",
        "Speedup vs write share — ACE-lru",
        "data-series=\"ACE-lru\"",
        "data-series=\"cloud-ssd (n_w 2, α 2.00)\"",
        "virtual-time model of cloud-ssd",
    ] {
        assert!(html.contains(want), "missing {want}");
    }
    // A single configuration draws nothing.
    let single = ace::run_ace(&plan(&["optane-ssd"], 1_000, 100, 2_000, &[50.0]), &quiet).unwrap();
    assert!(ace::charts(&single).is_empty());
}

#[test]
fn real_devices_need_n_w_and_bad_plans_are_refused() {
    let cat = Catalogue::builtin();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap().to_string();
    let mut p = plan(&["pcie-ssd-p4510"], 1_000, 100, 1_000, &[50.0]);
    p.devices = vec![AceDevice::resolve(&path, &cat, None).unwrap()];
    let e = p.validate().unwrap_err().to_string();
    assert!(
        e.contains("tierbase profile block") && e.contains("--n-w"),
        "{e}"
    );

    let e = AceDevice::resolve("floppy", &cat, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown device 'floppy'") && e.contains("pcie-ssd-p4510"),
        "{e}"
    );

    let mut p = plan(&["pcie-ssd-p4510"], 1_000, 1_000, 1_000, &[50.0]);
    let e = p.validate().unwrap_err().to_string();
    assert!(e.contains("nothing would ever be evicted"), "{e}");
    p.capacity = Capacity::Pages(100);
    p.n_e = Some(4);
    let e = p.validate().unwrap_err().to_string();
    assert!(e.contains("choose a prefetcher"), "{e}");
}

/// On a real page file (the test directory's file system): the runs complete, the file is
/// filled, named in the medium, and removed afterwards. Times are not checked (wall clock).
#[test]
fn real_page_file_runs_and_is_removed() {
    let cat = Catalogue::builtin();
    let dir = tempfile::tempdir().unwrap();
    let mut p = plan(&["pcie-ssd-p4510"], 256, 32, 2_000, &[50.0]);
    p.devices = vec![AceDevice::resolve(dir.path().to_str().unwrap(), &cat, None).unwrap()];
    p.policies = vec!["lru".into()];
    p.n_w = Some(vec![4]);
    let file = ace::run_ace(&p, &quiet).unwrap();
    assert_eq!(file.runs.len(), 1);
    let r = &file.runs[0];
    assert!(!r.virtual_time);
    assert!(
        r.medium.contains("disk file") || r.medium.contains("tmpfs file"),
        "{}",
        r.medium
    );
    assert!(ace::describe(&file).contains("runtime = wall-clock time in I/O"));
    assert!(
        r.medium.contains("O_DIRECT") || r.medium.contains("refused O_DIRECT"),
        "{}",
        r.medium
    );
    assert!(r.ace.stats.write_batches > 0 && r.mean_write_batch > 1.0);
    assert_eq!(
        r.ace.stats.misses, r.baseline.stats.misses,
        "LRU keeps its victims"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "page file removed"
    );
}

/// The speedup of the lru runs of `file`, by (device, write share).
fn speedups(file: &AceResultFile) -> Vec<(String, f64, f64)> {
    file.runs
        .iter()
        .map(|r| (r.device.clone(), r.write_pct, r.speedup))
        .collect()
}

/// The paper's shapes (ICDE'23, "Impact of R/W ratio & asymmetry"), scaled down, under every
/// cost model: ACE's speedup grows with the write share on every device. Under the device
/// model (`pio`, the default) and the ACE simulator's costs — a write costs α reads — it is
/// ordered by α (PCIe 2.8 > cloud 2.0 > SATA 1.5 > Optane 1.1) and the mixed trace gains
/// ≥ 25 % for every policy. Read as a throughput ratio, α makes a lone write cost α·k_w/k_r
/// reads (cloud 3.5 > Optane 0.9 > SATA 0.5 > PCIe 0.3), and the order follows that instead.
#[test]
fn speedup_grows_with_writes_and_follows_each_models_write_cost() {
    let devices = ["pcie-ssd-p4510", "cloud-ssd", "sata-ssd", "optane-ssd"];
    let by_alpha = ["pcie-ssd-p4510", "cloud-ssd", "sata-ssd", "optane-ssd"];
    for (model, order) in [
        (CostModel::Pio, by_alpha),
        (CostModel::AceSim, by_alpha),
        (
            CostModel::Throughput,
            ["cloud-ssd", "optane-ssd", "sata-ssd", "pcie-ssd-p4510"],
        ),
    ] {
        let mut p = plan(&devices, 10_000, 1_000, 100_000, &[10.0, 50.0, 100.0]);
        p.policies = vec!["lru".into()];
        p.cost_model = model;
        let file = ace::run_ace(&p, &quiet).unwrap();
        assert!(
            file.runs
                .iter()
                .all(|r| r.cost_model.as_deref() == Some(model.name()))
        );
        let s = speedups(&file);
        for d in devices {
            let curve: Vec<f64> = s.iter().filter(|x| x.0 == d).map(|x| x.2).collect();
            assert_eq!(curve.len(), 3);
            assert!(
                curve[0] > 1.0 && curve[0] < curve[1] && curve[1] < curve[2],
                "{model:?} {d}: {curve:?}"
            );
        }
        let at_all_writes: Vec<f64> = order
            .iter()
            .map(|d| s.iter().find(|x| x.0 == *d && x.1 == 100.0).unwrap().2)
            .collect();
        assert!(
            at_all_writes.windows(2).all(|w| w[0] > w[1]),
            "{model:?}: {order:?} → {at_all_writes:?}"
        );
    }

    for model in [CostModel::Pio, CostModel::AceSim] {
        let mut p = plan(&["pcie-ssd-p4510"], 10_000, 1_000, 100_000, &[50.0]);
        p.cost_model = model;
        let file = ace::run_ace(&p, &quiet).unwrap();
        assert_eq!(file.runs.len(), 4, "one run per policy");
        for r in &file.runs {
            assert_eq!(
                r.medium.contains("ACE simulator"),
                model == CostModel::AceSim,
                "{}",
                r.medium
            );
            assert!(
                r.runtime_reduction_pct >= 25.0,
                "{model:?} {}: {r:?}",
                r.policy
            );
        }
    }
}

/// Runtime against n_w on the PCIe SSD (k_w = 8), every model: the speedup rises to n_w = 8
/// and nothing beyond it does better (past k_w a batch only takes more rounds).
#[test]
fn speedup_peaks_at_the_devices_write_concurrency() {
    for model in [CostModel::Pio, CostModel::AceSim, CostModel::Throughput] {
        let mut p = plan(&["pcie-ssd-p4510"], 10_000, 1_000, 100_000, &[50.0]);
        p.policies = vec!["lru".into()];
        p.cost_model = model;
        p.n_w = Some(vec![1, 2, 4, 8, 10, 12, 16, 32]);
        let file = ace::run_ace(&p, &quiet).unwrap();
        let by_n_w: Vec<(usize, f64)> = file.runs.iter().map(|r| (r.n_w, r.speedup)).collect();
        let at_k_w = by_n_w.iter().find(|x| x.0 == 8).unwrap().1;
        let rising: Vec<f64> = by_n_w.iter().take(4).map(|x| x.1).collect();
        assert!(
            rising.windows(2).all(|w| w[0] < w[1]),
            "{model:?}: {by_n_w:?}"
        );
        assert!(
            by_n_w.iter().all(|x| x.1 <= at_k_w),
            "{model:?}: {by_n_w:?}"
        );
    }
}
