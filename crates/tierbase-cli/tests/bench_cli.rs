//! `tierbase bench` and `tierbase report` as a user runs them: the built binary, real files.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{BIN, assert_one_line_error, text};

/// The command line run in `tmp` (its temporary files and user profiles there too).
fn command(args: &[&str], tmp: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env("TIERBASE_PROFILES", tmp.join("no-user-profiles.toml"));
    c
}

fn tierbase(args: &[&str], tmp: &Path) -> Output {
    command(args, tmp).output().expect("run tierbase")
}

/// Runs with `args`, expects failure with exactly one stderr line containing `want`.
fn fails_with(args: &[&str], want: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tierbase(args, tmp.path());
    let err = assert_one_line_error(&out, &format!("{args:?}"));
    assert!(err.contains(want), "{args:?}: expected '{want}' in: {err}");
    // Nothing was written: no result file, no leftover temporary data.
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "bad.toml" && n != "bad.json")
        .collect();
    assert!(left.is_empty(), "{args:?} left {left:?}");
}

const SMALL: &[&str] = &["--records", "300", "--ops", "600", "-q"];

fn ycsb<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["bench", "ycsb"];
    v.extend_from_slice(SMALL);
    v.extend_from_slice(extra);
    v
}

#[test]
fn bad_bench_input_is_one_clear_error() {
    fails_with(
        &ycsb(&["--threads", "0"]),
        "thread count must be at least 1",
    );
    fails_with(&ycsb(&["--threads", "1,x"]), "invalid thread count 'x'");
    fails_with(
        &ycsb(&["--value-size", "4"]),
        "value size 4 is too small: values carry an 8-byte key fingerprint",
    );
    fails_with(&ycsb(&["--value-size", "big"]), "invalid size 'big'");
    fails_with(&ycsb(&["--key-size", "3"]), "key size 3 is out of range");
    fails_with(
        &ycsb(&["--workload", "z"]),
        "unknown workload 'z' (known: load, a, b, c, d, e, f)",
    );
    fails_with(
        &ycsb(&["--store", "nope"]),
        "unknown store 'nope' (known: kv, kv-var, btree, btree-3tier, btree-nvm, btree-nvm-direct, plush, plush-range, memory, memory-btree, rocksdb, rocksdb-nosync, redb, lmdb)",
    );
    fails_with(
        &ycsb(&["--out", "/nonexistent-dir/r.json"]),
        "directory /nonexistent-dir does not exist",
    );
    fails_with(&ycsb(&["--out", "."]), "is a directory");
    fails_with(
        &ycsb(&["--distribution", "normal"]),
        "unknown request distribution 'normal'",
    );
    fails_with(
        &ycsb(&["--zipfian-theta", "1.5"]),
        "zipfian constant must be between 0 and 1",
    );
    fails_with(
        &ycsb(&["--emulate", "floppy"]),
        "unknown device profile 'floppy'",
    );
    fails_with(
        &ycsb(&["--repeat", "0"]),
        "repetitions must be between 1 and",
    );
    fails_with(&ycsb(&["--warmup", "lots"]), "invalid warm-up 'lots'");
    fails_with(&ycsb(&["--max-time=-1"]), "invalid --max-time");
    fails_with(
        &["bench", "ycsb", "--records", "0", "-q"],
        "record count must be at least 1",
    );
    fails_with(
        &ycsb(&["--workload", "e", "--store", "memory"]),
        "does not support ordered scans, which workload 'e' needs",
    );
    fails_with(&ycsb(&["--workload-file", "missing.toml"]), "missing.toml");
}

#[test]
fn malformed_workload_file_is_one_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bad.toml"), "read_proportion = \"lots\"\n").unwrap();
    let out = tierbase(&ycsb(&["--workload-file", "bad.toml"]), tmp.path());
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.toml: invalid workload file: line 1, column 19: invalid type"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

#[test]
fn malformed_report_input_is_one_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("bad.json"), "{\"format\": ").unwrap();
    let out = tierbase(&["report", "bad.json", "--out", "r.html"], tmp.path());
    let err = text(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.starts_with(
            "tierbase: error: bad.json: not a valid tierbase benchmark result: invalid JSON"
        ),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!tmp.path().join("r.html").exists());
    fails_with(&["report", "nothing-here.json"], "nothing-here.json");
}

#[test]
fn bench_then_report_end_to_end() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = tierbase(
        &ycsb(&[
            "--store",
            "memory-btree",
            "--workload",
            "a,e",
            "--threads",
            "1,2",
            "--value-size",
            "uniform:16-200",
            "--dir",
            data.to_str().unwrap(),
            "--out",
            "r.json",
        ]),
        tmp.path(),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("store memory-btree (none) · DRAM (anonymous)"),
        "{stdout}"
    );
    for want in [
        "workload",
        "p99.9",
        "read",
        "update",
        "scan",
        "insert",
        "results: r.json (4 runs)",
    ] {
        assert!(stdout.contains(want), "missing '{want}' in:\n{stdout}");
    }
    // The runs' data directories were removed, and so was the --dir the run made.
    assert!(!data.exists());
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("r.json")).unwrap()).unwrap();
    assert_eq!(v["runs"].as_array().unwrap().len(), 4);
    assert_eq!(v["runs"][0]["value_size"], "uniform:16-200");
    assert_eq!(v["runs"][0]["medium"], "DRAM (anonymous)");

    let out = tierbase(&["report", "r.json", "--out", "r.html"], tmp.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("4 runs, 2 workloads"));
    let html = std::fs::read_to_string(tmp.path().join("r.html")).unwrap();
    assert!(html.contains("<svg"));
    assert!(html.contains("data-series=\"memory-btree (none) · DRAM (anonymous)\""));

    // A result file with no runs is nothing to report: one line, exit 2, no page (it
    // wrote an empty page and said "0 runs").
    let mut empty = v.clone();
    empty["runs"] = serde_json::json!([]);
    std::fs::write(tmp.path().join("empty.json"), empty.to_string()).unwrap();
    let out = tierbase(&["report", "empty.json", "--out", "e.html"], tmp.path());
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.starts_with("tierbase: error: nothing to report: empty.json holds no runs"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!tmp.path().join("e.html").exists());
}

#[test]
fn default_temp_dir_is_removed_and_keep_data_keeps() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tierbase(&ycsb(&["--threads", "1", "--out", "r.json"]), tmp.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["r.json".to_string()], "temporary data removed");

    let keep = tmp.path().join("keep");
    let out = tierbase(
        &ycsb(&[
            "--threads",
            "1",
            "--dir",
            keep.to_str().unwrap(),
            "--keep-data",
            "--out",
            "k.json",
        ]),
        tmp.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(&keep).unwrap().count(), 1, "one run kept");
}

#[test]
fn workload_file_and_overrides() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("w.toml"),
        "base = \"b\"\nname = \"b-uniform\"\nrequest_distribution = \"uniform\"\nrecord_count = 5000\n",
    )
    .unwrap();
    let out = tierbase(
        &ycsb(&[
            "--workload-file",
            "w.toml",
            "--threads",
            "1",
            "--out",
            "w.json",
        ]),
        tmp.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("w.json")).unwrap()).unwrap();
    let run = &v["runs"][0];
    assert_eq!(run["workload"], "b-uniform");
    assert_eq!(run["request_distribution"], "uniform");
    assert_eq!(run["record_count"], 300, "--records overrides the file");
    assert_eq!(run["workload_spec"]["read_proportion"], 0.95);
}

#[test]
fn stores_are_listed() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tierbase(&["bench", "stores"], tmp.path());
    assert!(out.status.success());
    let s = text(&out.stdout);
    for name in [
        "plush",
        "memory",
        "memory-btree",
        "rocksdb",
        "rocksdb-nosync",
    ] {
        assert!(s.contains(name), "{s}");
    }
}

/// `--out /dev/stdout` into a pipe writes the results there (it was refused: the link led to
/// `pipe:[N]`, which names no file), and nothing is left in the working directory.
#[test]
fn results_to_standard_output() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tierbase(
        &ycsb(&[
            "--store",
            "memory",
            "--threads",
            "1",
            "--out",
            "/dev/stdout",
        ]),
        tmp.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("\"format\": \"tierbase-bench-results\""),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn refusals_that_keep_results_and_reports_honest() {
    // The table finds a store's runs by name: a second copy would show the first one's.
    fails_with(
        &[
            "bench",
            "micro",
            "--stores",
            "kv,kv",
            "--records",
            "100",
            "-q",
        ],
        "--stores names kv twice",
    );
    // Without an NVM tier the figures would be the SSD design's under the 3-tier's name.
    fails_with(
        &ycsb(&["--store", "btree-3tier", "--nvm", "0"]),
        "btree-3tier needs an NVM tier, and --nvm 0 gives it none",
    );
    // Outputs that would overwrite an input or each other.
    fails_with(
        &["report", "r.json", "--out", "./r.json"],
        "--out ./r.json is the input r.json",
    );
    let ace = |extra: &[&'static str]| {
        let mut v = vec!["bench", "ace", "--ops", "1000", "--pages", "1000", "-q"];
        v.extend_from_slice(extra);
        v
    };
    fails_with(
        &ace(&["--out", "a.json", "--html", "a.json"]),
        "--html and --out name the same file a.json",
    );
    // Limits that used to saturate a clock, abort an allocation or panic.
    fails_with(
        &ace(&["--page-size", "18446744073709547520"]),
        "must be a multiple of 4096 and at most 16777216",
    );
    fails_with(
        &["bench", "ace", "--ops", "18446744073709551615", "-q"],
        "--ops 18446744073709551615: must be at most 4294967296",
    );
    fails_with(
        &["bench", "ace", "--pages", "4294967296", "-q"],
        "of memory and",
    );
    fails_with(
        &["bench", "ace", "--ops", "1000", "--pages", "0", "-q"],
        "--pages must be at least 1",
    );
    fails_with(
        &ycsb(&["--value-size", "1G"]),
        "value size 1073741824 is too large",
    );
}

/// A device profile of the other kind is refused; a `--flush` the store's medium does not
/// run is said, once per store; workload E's refusal names only stores this build has.
#[test]
fn mismatched_device_options_are_refused_or_said() {
    fails_with(
        &ycsb(&["--store", "kv", "--emulate", "hdd"]),
        "a memory region cannot emulate hdd, a block device profile: choose a memory profile",
    );
    fails_with(
        &ycsb(&["--store", "btree", "--emulate", "optane-pmem-100"]),
        "a block device cannot emulate optane-pmem-100, a memory device profile",
    );
    fails_with(
        &ycsb(&["--store", "kv", "--workload", "e"]),
        "stores with scans in this build: btree, btree-3tier, plush-range, memory-btree",
    );
    // A data dir on a disk-backed file system: the store's persists are msync, not clwb.
    let tmp = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let flush = ["clwb", "clflushopt", "clflush"]
        .into_iter()
        .find(|f| tierbase::device::FlushInstruction::parse(f).is_some_and(|i| i.is_supported()))
        .unwrap_or("none");
    let out = tierbase(
        &[
            "bench",
            "micro",
            "--stores",
            "kv,plush",
            "--ops",
            "get",
            "--records",
            "200",
            "--flush",
            flush,
            "--dir",
            data.path().to_str().unwrap(),
            "--out",
            "m.json",
            "-q",
        ],
        tmp.path(),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("m.json")).unwrap()).unwrap();
    let err = text(&out.stderr);
    for store in ["kv", "plush"] {
        let ran = json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["store"] == store)
            .unwrap()["flush"]
            .as_str()
            .unwrap()
            .to_string();
        let note = format!("note: --flush {flush} was asked, but {store} ran flush {ran}");
        assert_eq!(
            err.matches(&note).count(),
            usize::from(ran != flush),
            "{err}"
        );
    }
}

#[test]
fn an_interrupted_benchmark_removes_the_data_it_made() {
    use std::process::Stdio;
    let tmp = tempfile::tempdir().unwrap();
    let runs = tmp.path().join("runs");
    let child = command(
        &[
            "bench",
            "ycsb",
            "--records",
            "50000000",
            "--threads",
            "1",
            "--dir",
            runs.to_str().unwrap(),
            "-q",
        ],
        tmp.path(),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Wait until the run's store exists (a load of 50 M records takes far longer).
    let has_store = || {
        std::fs::read_dir(&runs).is_ok_and(|mut d| {
            d.any(|e| {
                e.is_ok_and(|e| std::fs::read_dir(e.path()).is_ok_and(|mut s| s.next().is_some()))
            })
        })
    };
    for _ in 0..6000 {
        if has_store() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(has_store(), "the benchmark made its store under {runs:?}");
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("interrupted; removed"));
    assert!(
        !runs.exists(),
        "the directory the run made, and its store, are removed"
    );
}
