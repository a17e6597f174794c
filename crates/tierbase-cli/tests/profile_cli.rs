//! `tierbase profile` as a user runs it: bad input is one clear line, runs save profiles and
//! JSON, and nothing is left behind — also after Ctrl-C.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{BIN, assert_one_line_error, text};

fn command(args: &[&str], tmp: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .current_dir(tmp)
        .env("TMPDIR", tmp)
        .env("TIERBASE_PROFILES", tmp.join("profiles.toml"));
    c
}

fn tierbase(args: &[&str], tmp: &Path) -> Output {
    command(args, tmp).output().expect("run tierbase")
}

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Runs `args` in a fresh directory holding `keep` files; expects failure with exactly one
/// stderr line containing `want`, and nothing new in the directory.
fn fails_with(args: &[&str], want: &str) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("existing.img"), b"precious").unwrap();
    std::fs::write(tmp.path().join("bad.toml"), "[a]\nargs = { threads = 0 }\n").unwrap();
    let before = entries(tmp.path());
    let out = tierbase(args, tmp.path());
    let err = assert_one_line_error(&out, &format!("{args:?}"));
    assert!(err.contains(want), "{args:?}: expected '{want}' in: {err}");
    assert_eq!(entries(tmp.path()), before, "{args:?} left files behind");
    assert_eq!(
        std::fs::read(tmp.path().join("existing.img")).unwrap(),
        b"precious"
    );
}

#[test]
fn bad_memory_input_is_one_clear_error() {
    fn m<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["profile", "memory"];
        v.extend_from_slice(extra);
        v
    }
    fails_with(&m(&["--threads", "0"]), "invalid thread count '0'");
    fails_with(&m(&["--threads", "1,x"]), "invalid thread count 'x'");
    fails_with(&m(&["--threads", "1,,2"]), "empty item");
    fails_with(&m(&["--access-size", "12Q"]), "unknown unit 'Q'");
    fails_with(&m(&["--access-size", "96"]), "power of two");
    fails_with(&m(&["--range", "lots"]), "invalid size 'lots'");
    fails_with(
        &m(&["--range", "32", "--access-size", "64"]),
        "must hold at least one access",
    );
    fails_with(
        &m(&["--chain", "r_256,w_64_cach_128"]),
        "invalid access chain 'r_256,w_64_cach_128': column 12 ('cach'): unknown persist",
    );
    fails_with(&m(&["--chain", "r_256,x_8"]), "column 7 ('x')");
    fails_with(
        &m(&["--chain", "r_64", "--op", "read"]),
        "does not apply to --chain",
    );
    fails_with(&m(&["--mode", "diagonal"]), "unknown exec mode 'diagonal'");
    fails_with(
        &m(&["--persist", "flushy"]),
        "unknown persist instruction 'flushy'",
    );
    fails_with(
        &m(&["--distribution", "gauss"]),
        "unknown random distribution",
    );
    fails_with(
        &m(&["--emulate", "nosuch"]),
        "unknown device profile 'nosuch'",
    );
    fails_with(&m(&["--config", "missing.toml"]), "missing.toml");
    fails_with(&m(&["--config", "bad.toml"]), "invalid thread count '0'");
    fails_with(
        &m(&["--config", "bad.toml", "--threads", "2"]),
        "cannot be combined",
    );
    fails_with(
        &m(&["--path", "existing.img", "--range", "1M"]),
        "refusing to write to existing file",
    );
    fails_with(&m(&["--path", "no/such/dir/r.region"]), "does not exist");
    fails_with(&m(&["--out", "no/such/dir/x.json"]), "does not exist");
    fails_with(&m(&["--save", " "]), "invalid profile name");
}

fn m_threads_negative() -> Vec<&'static str> {
    vec!["profile", "memory", "--threads", "-2"]
}

#[test]
fn bad_block_input_is_one_clear_error() {
    fn b<'a>(extra: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["profile", "block"];
        v.extend_from_slice(extra);
        v
    }
    fails_with(&b(&["--size", "12Q"]), "unknown unit 'Q'");
    fails_with(&b(&["--sizes", "1000"]), "multiple of 4 KiB");
    fails_with(&b(&["--depths", "0"]), "invalid queue depth '0'");
    fails_with(&b(&["--depths", "1,,2"]), "empty item");
    fails_with(&b(&["--max-depth", "x"]), "invalid max depth 'x'");
    fails_with(&b(&["--ops", "0"]), "invalid ops per point '0'");
    // Unwritten blocks of a new file are no device's figures (alpha 45 on a virtual disk).
    fails_with(
        &b(&[
            "--precondition",
            "0",
            "--size",
            "1M",
            "--sizes",
            "4K",
            "--no-refine",
            "--max-depth",
            "2",
            "--ops",
            "64",
            "--path",
            ".",
        ]),
        "--precondition 0 on a file the profiler creates",
    );
    fails_with(&b(&["--reps", "-1"]), "invalid repetition count '-1'");
    fails_with(&m_threads_negative(), "invalid thread count '-2'");
    fails_with(&b(&["--mode", "sideways"]), "unknown queue mode");
    fails_with(&b(&["--engine", "warp"]), "unknown engine 'warp'");
    fails_with(&b(&["--threshold", "2"]), "invalid threshold '2'");
    fails_with(&b(&["--estimator", "mean"]), "unknown estimator");
    fails_with(
        &b(&["--emulate", "nosuch"]),
        "unknown device profile 'nosuch'",
    );
    fails_with(&b(&["--emulate", "dram"]), "memory device");
    fails_with(
        &b(&["--mode", "window", "--emulate", "pcie-ssd-p4510"]),
        "window cannot be emulated",
    );
    fails_with(
        &b(&["--path", "existing.img"]),
        "refusing to write to existing file",
    );
    fails_with(&b(&["--path", "/dev/null"]), "neither a regular file");
    fails_with(
        &b(&["--size", "4K", "--sizes", "16K"]),
        "smaller than the largest",
    );
    // A mounted block device (this machine's root disk, say) is refused without --force.
    // (Only ever run without --force: the test must not be able to write to it.)
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    if let Some(dev) = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .find(|s| s.starts_with("/dev/") && Path::new(s).exists())
    {
        fails_with(&b(&["--path", dev]), "refusing to write to");
    }
}

#[test]
fn an_emulated_block_profile_is_saved_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let scratch_arg = scratch.path().to_str().unwrap();
    // The HDD profile (k = 1, ~1.3 ms per I/O): two depths, a handful of I/Os.
    let out = tierbase(
        &[
            "profile",
            "block",
            "--emulate",
            "hdd",
            "--path",
            scratch_arg,
            "--size",
            "1M",
            "--sizes",
            "4K",
            "--depths",
            "1,2",
            "--no-refine",
            "--ops",
            "4",
            "--out",
            "hdd.json",
            "--save",
            "my-hdd",
            "-q",
        ],
        tmp.path(),
    );
    let so = text(&out.stdout);
    assert!(out.status.success(), "{}{}", so, text(&out.stderr));
    assert!(so.contains("emulated hdd"), "{so}");
    assert!(so.contains("saved profile 'my-hdd'"), "{so}");
    assert!(entries(scratch.path()).is_empty(), "temporary file removed");
    let cat = std::fs::read_to_string(tmp.path().join("profiles.toml")).unwrap();
    assert!(cat.contains("name = \"my-hdd\""), "{cat}");
    assert!(cat.contains("measured by tierbase profile block"), "{cat}");
    assert!(cat.contains("emulated hdd"), "{cat}");
    // The saved profile is usable by name.
    let out = tierbase(&["devices"], tmp.path());
    assert!(
        text(&out.stdout).contains("my-hdd"),
        "{}",
        text(&out.stdout)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("hdd.json")).unwrap())
            .unwrap();
    assert_eq!(json["format"], "tierbase-profile-results");
    assert_eq!(json["saved_profile"]["name"], "my-hdd");
    assert_eq!(json["block"][0]["emulated"], "emulated hdd");
    let out = tierbase(&["report", "hdd.json", "-o", "r.html"], tmp.path());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(tmp.path().join("r.html")).unwrap();
    assert!(html.contains("IOPS vs queue depth") && html.contains("emulated hdd"));
}

#[test]
fn a_memory_run_with_a_chain_writes_json() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tierbase(
        &[
            "profile",
            "memory",
            "--range",
            "1M",
            "--chain",
            "r_256,w_64_cache_128,w_64_cache_-128",
            "--chain",
            "r_256,w_64_nocache_128,w_64_nocache_-128",
            "--threads",
            "1",
            "--ops",
            "2000",
            "--out",
            "mem.json",
            "-q",
        ],
        tmp.path(),
    );
    let so = text(&out.stdout);
    assert!(out.status.success(), "{so}{}", text(&out.stderr));
    // clwb may be missing on this CPU: then that chain is skipped with the reason.
    let cache_ok = so.contains("chain r_256,w_64_cache_128,w_64_cache_-128, 1 thread,");
    let cache_skipped = so.contains("clwb, which this CPU does not have");
    assert!(cache_ok ^ cache_skipped, "{so}");
    assert!(
        so.contains("chain r_256,w_64_nocache_128,w_64_nocache_-128, 1 thread, DRAM (anonymous)")
    );
    assert!(so.contains("chains/s"), "{so}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("mem.json")).unwrap())
            .unwrap();
    let runs = json["memory"].as_array().unwrap();
    assert!(runs.iter().all(|r| r["ops"] == 2000));
    assert_eq!(entries(tmp.path()), vec!["mem.json"]);
}

/// Starts `profile block` on an emulated HDD in a temporary file under `scratch` (`extra`:
/// how much it sweeps) and reads its first stdout line, printed once the file exists and the
/// sweep starts; returns the child and the reader of the rest of its output.
fn start_hdd_sweep(
    tmp: &Path,
    scratch: &Path,
    extra: &[&str],
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut args = vec![
        "profile",
        "block",
        "--emulate",
        "hdd",
        "--path",
        scratch.to_str().unwrap(),
        "--size",
        "1M",
        "--sizes",
        "4K",
        "-q",
    ];
    args.extend_from_slice(extra);
    let mut child = command(&args, tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.starts_with("tierbase profile block: "), "{first}");
    assert_eq!(entries(scratch).len(), 1, "the temporary file exists");
    (child, reader)
}

#[test]
fn ctrl_c_removes_the_temporary_file() {
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // An emulated HDD with 100k I/Os per point would run for hours.
    let (child, _reader) = start_hdd_sweep(tmp.path(), scratch.path(), &["--ops", "100000"]);
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("interrupted; removed"));
    assert!(entries(scratch.path()).is_empty(), "removed on Ctrl-C");
}

#[test]
fn a_closed_output_pipe_removes_the_temporary_file() {
    let tmp = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (child, reader) = start_hdd_sweep(
        tmp.path(),
        scratch.path(),
        &["--ops", "64", "--max-depth", "2"],
    );
    // The reader goes away, as `head -1` does, and the next line's write fails.
    drop(reader);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
    assert!(
        entries(scratch.path()).is_empty(),
        "the temporary file is removed when the output pipe closes: {:?}",
        entries(scratch.path())
    );
}
