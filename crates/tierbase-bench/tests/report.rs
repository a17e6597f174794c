//! Result files and the HTML report: round trip, golden structure, malformed input.

use std::path::{Path, PathBuf};

use tierbase_bench::BenchError;
use tierbase_bench::plan::{BenchPlan, run_plan};
use tierbase_bench::progress::SilentProgress;
use tierbase_bench::report::{ReportInput, render_html, write_report};
use tierbase_bench::results::{ResultFile, check_writable};
use tierbase_bench::workload::CoreWorkload;

fn results(store: &str, workloads: &[CoreWorkload]) -> ResultFile {
    let mut plan = BenchPlan::new(store);
    plan.workloads = workloads.iter().map(|w| w.spec(1_000, 2_000)).collect();
    plan.threads = vec![1, 2];
    ResultFile::new(run_plan(&plan, &SilentProgress).unwrap())
}

fn write(dir: &Path, name: &str, f: &ResultFile) -> PathBuf {
    let p = dir.join(name);
    f.write(&p).unwrap();
    p
}

#[test]
fn result_files_round_trip_with_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let f = results("memory", &[CoreWorkload::A]);
    let p = write(dir.path(), "a.json", &f);
    assert_eq!(ResultFile::read(&p).unwrap(), f);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    assert_eq!(v["format"], "tierbase-bench-results");
    assert_eq!(v["format_version"], 1);
    let run = &v["runs"][0];
    for field in [
        "store",
        "workload",
        "threads",
        "record_count",
        "key_size",
        "value_size",
        "medium",
        "durability",
        "emulated",
        "throughput",
        "operations",
        "timeline",
        "load",
        "seed",
        "warmup_ops",
    ] {
        assert!(run.get(field).is_some(), "missing {field}");
    }
    assert!(run["emulated"].is_null());
    assert!(run["throughput"].as_f64().unwrap() > 0.0);
    let read = &run["operations"]["read"];
    for p in ["p50", "p90", "p99", "p999", "max"] {
        assert!(read["latency_ns"][p].as_u64().is_some(), "read latency {p}");
    }
    assert!(run["operations"]["update"]["count"].as_u64().unwrap() > 0);
}

#[test]
fn report_has_every_chart_and_series() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        dir.path(),
        "hash.json",
        &results("memory", &[CoreWorkload::A, CoreWorkload::C]),
    );
    let b = write(
        dir.path(),
        "btree.json",
        &results("memory-btree", &[CoreWorkload::A, CoreWorkload::E]),
    );
    let out = dir.path().join("report.html");
    let summary = write_report(&[a, b], &out, "test report").unwrap();
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(summary.runs, 8);
    assert_eq!(summary.workloads, 3);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(!html.contains("<script"), "self-contained, static");
    assert!(
        !html.contains("http://")
            || html.matches("http://").count()
                == html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
        "no external resources"
    );
    // One section per workload, in YCSB order.
    let pos = |s: &str| html.find(s).unwrap_or_else(|| panic!("missing {s}"));
    assert!(pos("id=\"workload-a\"") < pos("id=\"workload-c\""));
    assert!(pos("id=\"workload-c\"") < pos("id=\"workload-e\""));
    // The charts of workload A: throughput vs threads, read and update latency, timeline.
    for title in [
        "Throughput vs threads — workload a",
        "read latency percentiles — workload a",
        "update latency percentiles — workload a",
        "Throughput over time (1 s buckets) — workload a",
        "scan latency percentiles — workload e",
        "insert latency percentiles — workload e",
    ] {
        assert!(
            html.contains(&format!("<title>{title}</title>")),
            "missing chart {title}"
        );
    }
    // Every chart is an SVG; each series appears as a group and in a legend.
    assert_eq!(html.matches("<svg").count(), summary.charts);
    let hash = "memory (none) · DRAM (anonymous)";
    let btree = "memory-btree (none) · DRAM (anonymous)";
    for series in [
        hash.to_string(),
        btree.to_string(),
        format!("{hash} · 2 threads"),
        format!("{btree} · 1 threads"),
    ] {
        assert!(
            html.contains(&format!("data-series=\"{series}\"")),
            "missing series {series}"
        );
    }
    let a_section = &html[pos("id=\"workload-a\"")..pos("id=\"workload-c\"")];
    assert_eq!(
        a_section
            .matches(&format!("data-series=\"{hash}\""))
            .count(),
        1,
        "one throughput-vs-threads line per store"
    );
    assert!(
        a_section.contains("<polyline"),
        "the line joins 1 and 2 threads"
    );
    // Summary table rows carry the medium and durability of each run.
    assert!(html.contains("\">DRAM (anonymous)</td>"));
}

#[test]
fn same_store_in_two_files_becomes_two_series() {
    let dir = tempfile::tempdir().unwrap();
    let f = results("memory", &[CoreWorkload::C]);
    let a = ReportInput {
        source: "monday.json".into(),
        file: f.clone(),
    };
    let b = ReportInput {
        source: "tuesday.json".into(),
        file: f,
    };
    let page = render_html(&[a, b], "t");
    assert!(
        page.html
            .contains("data-series=\"memory (none) · DRAM (anonymous) [monday.json]\"")
    );
    assert!(
        page.html
            .contains("data-series=\"memory (none) · DRAM (anonymous) [tuesday.json]\"")
    );
    drop(dir);
}

fn parse_err(text: &str) -> BenchError {
    ResultFile::parse(text, Path::new("bad.json")).unwrap_err()
}

#[test]
fn malformed_result_files_are_rejected_clearly() {
    let e = parse_err("{\"format\": \"tierbase-bench-results\", ").to_string();
    assert!(
        e.starts_with("bad.json: not a valid tierbase benchmark result: invalid JSON"),
        "{e}"
    );
    assert!(e.contains("line 1 column"), "{e}");
    let e = parse_err("[1, 2]").to_string();
    assert!(e.contains("expected a JSON object"), "{e}");
    let e = parse_err("{\"runs\": []}").to_string();
    assert!(e.contains("missing \"format\""), "{e}");
    let e =
        parse_err("{\"format\": \"tierbase-bench-results\", \"format_version\": 99, \"runs\": []}");
    assert!(
        matches!(e, BenchError::UnsupportedResultVersion { found: 99, .. }),
        "{e}"
    );
    let e =
        parse_err("{\"format\": \"tierbase-bench-results\", \"format_version\": 1, \"runs\": []}")
            .to_string();
    assert!(e.contains("missing field"), "{e}");
    // A run missing its throughput.
    let mut v = serde_json::to_value(results("memory", &[CoreWorkload::C])).unwrap();
    v["runs"][0].as_object_mut().unwrap().remove("throughput");
    let e = parse_err(&v.to_string()).to_string();
    assert!(e.contains("missing field `throughput`"), "{e}");
    for e in [parse_err(""), parse_err("{")] {
        assert!(!e.to_string().contains('\n'));
    }
}

#[test]
fn report_names_the_bad_file_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(
        dir.path(),
        "good.json",
        &results("memory", &[CoreWorkload::C]),
    );
    let bad = dir.path().join("broken.json");
    std::fs::write(&bad, "{ this is not json").unwrap();
    let out = dir.path().join("r.html");
    let e = write_report(&[good, bad], &out, "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("broken.json: not a valid tierbase benchmark result"),
        "{e}"
    );
    assert!(!out.exists());
    let missing = dir.path().join("missing.json");
    let e = write_report(&[missing], &out, "t").unwrap_err().to_string();
    assert!(
        e.contains("missing.json") && e.contains("No such file"),
        "{e}"
    );
}

#[test]
fn unwritable_outputs_are_refused_before_running() {
    let dir = tempfile::tempdir().unwrap();
    assert!(check_writable(&dir.path().join("ok.json")).is_ok());
    assert!(
        !dir.path().join("ok.json").exists(),
        "the probe leaves nothing behind"
    );
    let e = check_writable(&dir.path().join("no/such/dir/x.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not exist"), "{e}");
    let e = check_writable(dir.path()).unwrap_err().to_string();
    assert!(e.contains("is a directory"), "{e}");
}

/// A result file given as a symbolic link is written through the link (the link stays), and
/// one given as a FIFO (or a device: `--out /dev/null`) is written in place. Before
/// 2026-12-03 a rename replaced either with a regular file — as root, `/dev/null` itself.
#[test]
fn outputs_through_links_and_fifos_are_written_in_place() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let f = results("memory", &[CoreWorkload::A]);
    let real = dir.path().join("real.json");
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("real.json", &link).unwrap();
    check_writable(&link).unwrap();
    f.write(&link).unwrap();
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(ResultFile::read(&real).unwrap(), f);

    let fifo = dir.path().join("fifo.json");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        eprintln!("skipped the FIFO: mkfifo did not run");
        return;
    }
    check_writable(&fifo).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            std::fs::File::open(&fifo)
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        })
    };
    f.write(&fifo).unwrap();
    assert!(fifo.metadata().unwrap().file_type().is_fifo(), "replaced");
    let text = reader.join().unwrap();
    assert_eq!(ResultFile::parse(&text, &fifo).unwrap(), f);
}
