//! Profile results as JSON and in `tierbase report`.

use std::path::Path;

use tierbase::device::Catalogue;
use tierbase_bench::BenchError;
use tierbase_bench::results::ResultFile;
use tierbase_profile::block::{BlockConfig, powers_of_two, run_block};
use tierbase_profile::config::BenchmarkDef;
use tierbase_profile::memory::{MemoryConfig, RunOptions, run_all};
use tierbase_profile::report::write_report;
use tierbase_profile::results::{PROFILE_FORMAT, ProfileResultFile};

fn profile_file() -> ProfileResultFile {
    let mut f = ProfileResultFile::new();
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let mut p = Catalogue::builtin().require("optane-ssd").unwrap().clone();
    p.read_latency_ns = 500_000.0; // slow enough for any build to emulate
    let cfg = BlockConfig {
        path: Some(dir.path().to_path_buf()),
        size: Some(1 << 20),
        sizes: vec![4096],
        depths: powers_of_two(8),
        refine: false,
        ops_per_point: 16,
        emulate: Some(p),
        ..BlockConfig::default()
    };
    f.block.push(run_block(&cfg, |_| {}).unwrap());
    let mut def = BenchmarkDef::new("mem");
    def.add_text("exec_mode", "random").unwrap();
    def.add_text("access_size", "64,256,4096").unwrap();
    def.add_text("number_threads", "1,2").unwrap();
    let base = MemoryConfig {
        memory_range: 1 << 20,
        number_operations: 2000,
        ..MemoryConfig::default()
    };
    let (runs, _) = run_all(
        &def.expand(&base).unwrap(),
        &Catalogue::builtin(),
        &RunOptions::default(),
        |_| {},
    )
    .unwrap();
    f.memory = runs;
    f
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn profile_results_round_trip_and_render() {
    let f = profile_file();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.json");
    f.write(&path).unwrap();
    let back = ProfileResultFile::read(&path).unwrap();
    assert_eq!(back, f);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(v["format"], PROFILE_FORMAT);
    assert_eq!(v["format_version"], 1);
    for key in ["curves", "derived", "medium", "emulated", "mode", "size"] {
        assert!(v["block"][0].get(key).is_some(), "block.{key}");
    }
    for key in [
        "bandwidth_gb_s",
        "ops_per_s",
        "latency_ns",
        "medium",
        "config",
    ] {
        assert!(v["memory"][0].get(key).is_some(), "memory.{key}");
    }
    assert!(v["block"][0]["derived"][0]["figures"]["alpha"].is_number());

    // A profile file alone.
    let out = dir.path().join("r.html");
    let s = write_report(std::slice::from_ref(&path), &out, "profiles").unwrap();
    let html = std::fs::read_to_string(&out).unwrap();
    assert_eq!(s.runs, 1 + 6);
    assert_eq!(
        s.charts,
        2 + 2,
        "IOPS and MB/s vs depth; bandwidth vs size and vs threads"
    );
    assert!(html.contains("IOPS vs queue depth"));
    assert!(html.contains("Memory bandwidth vs access size"));
    assert!(html.contains("read 4 KiB · tmpfs file") || html.contains("read 4 KiB · disk file"));
    assert!(
        html.contains("emulated optane-ssd"),
        "emulation named in the series"
    );
    assert!(html.contains("DRAM (anonymous)"));
    assert!(
        html.contains(">64 B<") && html.contains(">4 KiB<"),
        "log-2 size ticks"
    );
    assert!(!html.contains("NaN"));

    // Mixed with a benchmark result file: both kinds of sections on one page.
    let bench = dir.path().join("bench.json");
    ResultFile::new(Vec::new()).write(&bench).unwrap();
    let s = write_report(&[bench, path], &out, "both").unwrap();
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("<h2>Runs</h2>") && html.contains("Device profile files"));
    assert!(html.find("Device profile files") < html.find("<footer>"));
    assert_eq!(s.runs, 7);
}

#[test]
fn broken_profile_files_are_named_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.html");
    let bad = write(
        dir.path(),
        "p.json",
        &format!("{{\"format\": \"{PROFILE_FORMAT}\", \"format_version\": 7}}"),
    );
    let e = write_report(&[bad], &out, "t").unwrap_err();
    assert!(
        matches!(e, BenchError::UnsupportedResultVersion { found: 7, .. }),
        "{e}"
    );
    let bad = write(
        dir.path(),
        "q.json",
        &format!("{{\"format\": \"{PROFILE_FORMAT}\", \"format_version\": 1}}"),
    );
    let e = write_report(&[bad], &out, "t").unwrap_err().to_string();
    assert!(e.contains("q.json") && e.contains("missing field"), "{e}");
    assert!(!out.exists());
    let e = ProfileResultFile::parse("{\"runs\": []}", Path::new("x.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("tierbase profile"), "{e}");
}
