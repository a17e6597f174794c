//! `tierbase bench ace` as a user runs it: the built binary, real trace and result files.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{BIN, assert_one_line_error, stdout};

fn tierbase(args: &[&str], dir: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env("TIERBASE_PROFILES", dir.join("no-user-profiles.toml"))
        .output()
        .expect("run tierbase")
}

/// Standard output of a run that must have succeeded (both outputs shown if it did not).
fn succeeded(out: &Output) -> String {
    let text = stdout(out);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// A small recorded trace over 40 pages: a hot loop of writes and reads with cold reads.
fn write_trace(dir: &Path) -> std::path::PathBuf {
    let mut text = String::from("# tiny trace for the CLI test\n");
    for i in 0..600u64 {
        let hot = i % 8;
        let cold = 8 + (i * 7) % 32;
        text.push_str(&format!(
            "W {hot}\nR {cold}  # cold\n\nr {}\n",
            (hot + 1) % 8
        ));
    }
    let path = dir.join("tiny.trace");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_recorded_trace_runs_in_virtual_time_and_writes_json_and_html() {
    let dir = tempfile::tempdir().unwrap();
    let trace = write_trace(dir.path());
    let out = tierbase(
        &[
            "bench",
            "ace",
            "--trace",
            trace.to_str().unwrap(),
            "--capacity",
            "6",
            "--device",
            "pcie-ssd-p4510,sata-ssd",
            "--n-w",
            "1,4",
            "-q",
        ],
        dir.path(),
    );
    let text = succeeded(&out);
    assert!(out.stderr.is_empty(), "-q prints nothing on stderr");
    for want in [
        "trace ",
        "1800 accesses over 40 pages",
        "virtual-time model of pcie-ssd-p4510 (no real I/O)",
        "virtual-time model of sata-ssd",
        "lru-wsr",
        "speedup",
        "ace-results.json (16 runs)",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("ace-results.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json["format"], "tierbase-ace-results");
    assert_eq!(json["format_version"], 1);
    assert_eq!(json["trace"]["kind"], "file");
    assert_eq!(json["trace"]["ops"], 1800);
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 16);
    for r in runs {
        let base = r["baseline"]["runtime_ns"].as_u64().unwrap();
        let ace = r["ace"]["runtime_ns"].as_u64().unwrap();
        if r["n_w"] == 1 {
            assert_eq!(base, ace, "n_w = 1 is the plain policy");
        } else {
            assert!(ace < base, "{r}");
        }
        assert!(r["baseline"]["stats"]["misses"].as_u64().unwrap() > 0);
    }
    let html = std::fs::read_to_string(dir.path().join("ace-results.html")).unwrap();
    assert!(html.contains("Runtime vs n_w — pcie-ssd-p4510"));
    assert!(html.contains("<svg"));
    assert!(runs.iter().all(|r| r["cost_model"] == "pio"));

    // `tierbase report` takes ACE result files like every other result file.
    let out = tierbase(
        &["report", "ace-results.json", "--out", "all.html"],
        dir.path(),
    );
    assert!(out.status.success(), "{}", stdout(&out));
    let page = std::fs::read_to_string(dir.path().join("all.html")).unwrap();
    assert!(page.contains("ACE: baseline against ACE — ace-results.json"));
    assert!(page.contains("Runtime vs n_w — pcie-ssd-p4510"));

    // The ACE simulator's costs: named in the medium and the result file.
    let out = tierbase(
        &[
            "bench",
            "ace",
            "--trace",
            trace.to_str().unwrap(),
            "--capacity",
            "6",
            "--cost-model",
            "ace-sim",
            "--policy",
            "lru",
            "--out",
            "sim.json",
            "-q",
        ],
        dir.path(),
    );
    let text = succeeded(&out);
    assert!(
        text.contains("ACE simulator's costs (write = α reads"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("sim.json")).unwrap())
            .unwrap();
    assert_eq!(json["runs"][0]["cost_model"], "ace-sim");
}

#[test]
fn a_bad_trace_line_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.trace"), "R 1\n# fine\nX 7\n").unwrap();
    let out = tierbase(&["bench", "ace", "--trace", "bad.trace", "-q"], dir.path());
    let err = assert_one_line_error(&out, "bad trace");
    assert!(
        err.contains("bad.trace line 3") && err.contains("`R <page>` or `W <page>`"),
        "{err}"
    );
    assert!(!dir.path().join("ace-results.json").exists());
}

#[test]
fn bad_arguments_are_one_clear_error() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--policy", "lru,arc"],
            "unknown replacement policy \"arc\" (known: clock, lru, cflru, lru-wsr)",
        ),
        (&["--device", "floppy"], "unknown device 'floppy'"),
        (&["--prefetch", "magic"], "unknown prefetcher \"magic\""),
        (
            &["--cost-model", "fio"],
            "unknown cost model \"fio\" (known: pio, ace-sim, throughput)",
        ),
        (&["--locality", "90"], "invalid locality '90'"),
        (
            &["--write-pct", "150"],
            "write share 150 is outside 0-100 %",
        ),
        (&["--n-w", "0"], "n_w must be at least 1"),
        (&["--capacity", "100000"], "nothing would ever be evicted"),
        (&["--trace", "t", "--ops", "5"], "cannot be used with"),
        (&["--trace", "missing.trace"], "missing.trace"),
        (&["--device", "."], "tierbase profile block"),
    ];
    for (extra, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec!["bench", "ace", "--ops", "1000", "-q"];
        if extra.contains(&"--trace") {
            args.truncate(2);
        }
        args.extend_from_slice(extra);
        let out = tierbase(&args, dir.path());
        let err = assert_one_line_error(&out, &format!("{args:?}"));
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{args:?} left files behind");
    }
}

/// A real page file in the test directory: the run works, says where the pages lived and how,
/// and removes its page file.
#[test]
fn a_directory_runs_on_a_real_page_file() {
    let dir = tempfile::tempdir().unwrap();
    let pages = dir.path().join("pages");
    std::fs::create_dir(&pages).unwrap();
    let out = tierbase(
        &[
            "bench",
            "ace",
            "--device",
            "pages",
            "--n-w",
            "4",
            "--pages",
            "128",
            "--capacity",
            "16",
            "--ops",
            "1500",
            "--policy",
            "lru",
            "-q",
        ],
        dir.path(),
    );
    let text = succeeded(&out);
    assert!(text.contains("runtime = wall-clock time in I/O"), "{text}");
    assert!(
        text.contains("O_DIRECT") || text.contains("refused O_DIRECT"),
        "{text}"
    );
    assert_eq!(std::fs::read_dir(&pages).unwrap().count(), 0);
}
