//! `tierbase plush`: the operator commands work end to end (create, put, get, delete, scan,
//! stats, verify, checkpoint) on both layouts, the store is reachable from `bench` and
//! `serve`, and bad input is one clear line with a non-zero exit code.

mod common;

use std::path::Path;
use std::process::Command;

use common::{BIN, one_line_error, stderr, stdout, tierbase};

/// A directory on tmpfs when there is one (the persistent-memory stand-in), else a temporary
/// directory.
fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

/// Runs and expects success; returns standard output.
fn ok(args: &[&str]) -> String {
    let o = tierbase(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

/// Runs `tierbase <args> -q --out <out>` (a benchmark), expects success, returns the result
/// file.
fn bench_json(args: &[&str], out: &Path) -> serde_json::Value {
    let o = Command::new(BIN)
        .args(args)
        .args(["-q", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

/// A small store (2^6 DRAM entries: 16 KiB of slots) at `path`.
fn create_small(path: &Path, layout: &str) -> String {
    create_small_with(path, &["--layout", layout])
}

/// [`create_small`] with other creation flags.
fn create_small_with(path: &Path, flags: &[&str]) -> String {
    let mut args = vec!["plush", "create", "--path", path.to_str().unwrap()];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[
        "--dram-bits",
        "6",
        "--max-levels",
        "3",
        "--logs",
        "8",
        "--log-chunk",
        "16K",
    ]);
    ok(&args)
}

#[test]
fn create_put_get_delete_scan_stats_verify_checkpoint() {
    let dir = tmpdir();
    let path = dir.path().join("ops.plush");
    let p = path.to_str().unwrap();
    let out = create_small(&path, "variable");
    assert!(out.contains("variable records"), "{out}");
    assert!(out.contains("64 DRAM entries"), "{out}");
    assert!(out.contains("up to 3 levels"), "{out}");

    assert_eq!(
        ok(&["plush", "put", "--path", p, "hello", "world"]).trim(),
        "inserted"
    );
    assert_eq!(
        ok(&["plush", "put", "--path", p, "hello", "there"]).trim(),
        "replaced"
    );
    assert_eq!(
        ok(&["plush", "put", "--path", p, "gone", "soon"]).trim(),
        "inserted"
    );
    assert!(
        tierbase(&["plush", "--hex", "put", "--path", p, "00ff", "0102"])
            .status
            .success()
    );
    assert_eq!(ok(&["plush", "get", "--path", p, "hello"]).trim(), "there");
    assert_eq!(
        ok(&["plush", "--hex", "get", "--path", p, "00ff"]).trim(),
        "0102"
    );
    // Not found: exit code 1, no error text beyond "not found".
    let o = tierbase(&["plush", "get", "--path", p, "absent"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).trim(), "not found");

    assert_eq!(
        ok(&["plush", "delete", "--path", p, "gone"]).trim(),
        "deleted"
    );
    let o = tierbase(&["plush", "delete", "--path", p, "gone"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "not found");

    let out = ok(&["plush", "scan", "--path", p]);
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(out.contains("hello\tthere"), "{out}");
    // Bytes that are not text are printed quoted with escapes (they were bare hex, which
    // looked like a text value of hex digits); with --hex, everything is hex.
    let quoted = concat!(r#""\x00\xff""#, "\t", r#""\x01\x02""#);
    assert!(out.contains(quoted), "{out}");
    let hex = ok(&["plush", "scan", "--path", p, "--hex"]);
    assert!(hex.contains("00ff\t0102"), "{hex}");
    assert!(hex.contains("68656c6c6f\t7468657265"), "{hex}");
    let o = tierbase(&["plush", "scan", "--path", p, "--limit", "1"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).lines().count(), 1);
    assert!(
        stderr(&o).contains("1 more (raise --limit)"),
        "{}",
        stderr(&o)
    );

    let s = ok(&["plush", "stats", "--path", p]);
    for want in [
        "layout        variable",
        "records       2",
        "durability    ",
        "medium        ",
        "flush         ",
        "key search    ",
        "DRAM          ",
        "64 entries, fixed by configuration",
        "levels        ",
        "recovery      ",
        "counters",
        "log_entries",
        "half_migrations",
    ] {
        assert!(s.contains(want), "missing '{want}' in:\n{s}");
    }
    let search = s
        .lines()
        .find_map(|l| l.strip_prefix("key search    "))
        .unwrap();
    assert!(
        ["avx512", "avx2", "scalar"].contains(&search),
        "key search {search}"
    );
    // The recovery log was replayed on every open: each command's writes were still in DRAM.
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["plush", "stats", "--path", p, "--json"])).unwrap();
    assert_eq!(v["stats"]["records"], 2);
    assert_eq!(v["stats"]["layout"], "variable");
    assert_eq!(v["stats"]["dram_entries"], 64);
    assert!(v["stats"]["dram_bytes"].as_u64().unwrap() > 0);
    assert!(v["stats"]["durability"].is_string());
    assert!(v["stats"]["counters"].is_array());
    assert!(v["medium"].as_str().unwrap().contains(p), "{}", v["medium"]);
    assert!(v["recovery"]["log_entries"].as_u64().unwrap() >= 4, "{v}");

    let out = ok(&["plush", "verify", "--path", p]);
    assert!(out.contains("OK: no format violations"), "{out}");
    assert!(out.contains("live keys       2"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["plush", "verify", "--path", p, "--json"])).unwrap();
    assert_eq!(v["live_keys"], 2);
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);

    // Checkpoint moves the DRAM level to PMem level 0: nothing left to replay.
    assert_eq!(
        ok(&["plush", "checkpoint", "--path", p]).trim(),
        "checkpointed"
    );
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["plush", "stats", "--path", p, "--json"])).unwrap();
    assert_eq!(v["stats"]["dram_records"], 0, "{v}");
    assert_eq!(v["stats"]["levels"], 1, "{v}");
    assert_eq!(v["recovery"]["replayed"], 0, "{v}");
    let out = ok(&["plush", "verify", "--path", p]);
    assert!(out.contains("OK: no format violations"), "{out}");
    assert!(out.contains("L0 "), "{out}");
    assert_eq!(ok(&["plush", "get", "--path", p, "hello"]).trim(), "there");
}

#[test]
fn fixed8_layout_takes_8_byte_keys_and_values_only() {
    let dir = tmpdir();
    let path = dir.path().join("fixed.plush");
    let p = path.to_str().unwrap();
    let out = create_small(&path, "fixed8");
    assert!(out.contains("fixed8 records"), "{out}");
    assert_eq!(
        ok(&["plush", "put", "--path", p, "12345678", "abcdefgh"]).trim(),
        "inserted"
    );
    assert_eq!(
        ok(&[
            "plush",
            "--hex",
            "put",
            "--path",
            p,
            "0102030405060708",
            "0000000000000009"
        ])
        .trim(),
        "inserted"
    );
    assert_eq!(
        ok(&["plush", "get", "--path", p, "12345678"]).trim(),
        "abcdefgh"
    );
    assert_eq!(
        ok(&["plush", "--hex", "get", "--path", p, "0102030405060708"]).trim(),
        "0000000000000009"
    );
    one_line_error(
        &tierbase(&["plush", "put", "--path", p, "short", "abcdefgh"]),
        "wrong key size: 5 bytes (this store holds fixed 8-byte keys)",
    );
    one_line_error(
        &tierbase(&["plush", "get", "--path", p, "toolongkey"]),
        "wrong key size: 10 bytes",
    );
    one_line_error(
        &tierbase(&["plush", "delete", "--path", p, "k"]),
        "wrong key size: 1 bytes",
    );
    one_line_error(
        &tierbase(&["plush", "put", "--path", p, "12345678", "toolong!!"]),
        "wrong value size: 9 bytes",
    );
    let s = ok(&["plush", "stats", "--path", p]);
    assert!(s.contains("layout        fixed8"), "{s}");
    assert!(s.contains("records       2"), "{s}");
    assert!(!s.contains("payload "), "no payload logs in fixed8:\n{s}");
    let out = ok(&["plush", "scan", "--path", p]);
    assert!(out.contains("12345678\tabcdefgh"), "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(ok(&["plush", "verify", "--path", p]).contains("OK: no format violations"));
}

#[test]
fn default_geometry_creates_opens_and_counts() {
    let dir = tmpdir();
    let path = dir.path().join("default.plush");
    let p = path.to_str().unwrap();
    // The default geometry (2^14 DRAM entries) creates and opens too.
    let out = ok(&["plush", "create", "--path", p]);
    assert!(out.contains("16384 DRAM entries"), "{out}");
    assert!(out.contains("variable records"), "{out}");
    for i in 0..20 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        assert_eq!(
            ok(&["plush", "put", "--path", p, &k, &v]).trim(),
            "inserted"
        );
    }
    let s = ok(&["plush", "stats", "--path", p]);
    assert!(s.contains("records       20"), "{s}");
    assert!(s.contains("16384 entries"), "{s}");
    assert!(ok(&["plush", "verify", "--path", p]).contains("live keys       20"));
}

#[test]
fn bench_runs_plush() {
    let dir = tmpdir();
    let data = dir.path().join("data");
    let out = dir.path().join("r.json");
    let s = ok(&["bench", "stores"]);
    assert!(s.contains("plush"), "{s}");
    let v = bench_json(
        &[
            "bench",
            "ycsb",
            "--store",
            "plush",
            "--workload",
            "load,a",
            "--records",
            "2000",
            "--ops",
            "4000",
            "--threads",
            "2",
            "--dir",
            data.to_str().unwrap(),
        ],
        &out,
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["store"], "plush");
        assert_eq!(r["verify_failures"], 0, "{r}");
        let notes = r["store_notes"].to_string();
        for want in ["variable records", "DRAM ", "flush instruction", "PiBench"] {
            assert!(notes.contains(want), "missing '{want}' in {notes}");
        }
    }
    // micro, 8-byte keys and values: the fixed8 layout, next to kv.
    let micro = dir.path().join("m.json");
    let o = Command::new(BIN)
        .args([
            "bench",
            "micro",
            "--stores",
            "plush,kv",
            "--ops",
            "insert,get,update,delete",
            "--distributions",
            "uniform",
            "--records",
            "3000",
            "--operations",
            "3000",
            "--threads",
            "1",
            "--key-size",
            "8",
            "--value-size",
            "8",
            "-q",
            "--dir",
            data.to_str().unwrap(),
            "--out",
            micro.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&micro).unwrap()).unwrap();
    let runs = v["runs"].as_array().unwrap();
    let plush: Vec<_> = runs.iter().filter(|r| r["store"] == "plush").collect();
    assert_eq!(plush.len(), 4, "{}", stdout(&o));
    for r in plush {
        assert_eq!(r["verify_failures"], 0, "{r}");
        assert!(
            r["store_notes"].to_string().contains("fixed8 records"),
            "{r}"
        );
    }
    assert!(runs.iter().any(|r| r["store"] == "kv"));
}

#[test]
fn serve_store_plush_is_accepted() {
    let o = tierbase(&["serve", "--help"]);
    assert!(stdout(&o).contains("plush"), "{}", stdout(&o));
    // A deferred level is refused before the store file is created.
    let dir = tmpdir();
    let path = dir.path().join("never.plush");
    let o = tierbase(&[
        "serve",
        "--store",
        "plush",
        "--path",
        path.to_str().unwrap(),
        "--durability",
        "eventual:50",
    ]);
    one_line_error(&o, "no deferred levels");
    assert!(!path.exists());
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = tmpdir();
    let path = dir.path().join("s.plush");
    let p = path.to_str().unwrap();
    // Bad paths.
    one_line_error(
        &tierbase(&["plush", "get", "--path", "/nonexistent/s.plush", "k"]),
        "No such file or directory",
    );
    one_line_error(
        &tierbase(&["plush", "create", "--path", "/nonexistent/dir/s.plush"]),
        "No such file or directory",
    );
    one_line_error(
        &tierbase(&["plush", "get", "k"]),
        "--path <FILE> is required",
    );
    // Bad geometry: nothing is left behind.
    for (flags, want) in [
        (&["--dram-bits", "3"][..], "must be 2^4 to 2^20"),
        (&["--max-levels", "9"][..], "PMem levels: must be 1 to 8"),
        (&["--logs", "3"][..], "must be a power of two"),
        (&["--log-chunk", "5000"][..], "multiple of 4 KiB"),
        (&["--payload-chunk", "1000"][..], "multiple of 4 KiB"),
        (
            &["--layout", "fixed8", "--payload-chunk", "8K"][..],
            "--payload-chunk applies to the variable layout only",
        ),
    ] {
        let mut args = vec!["plush", "create", "--path", p];
        args.extend_from_slice(flags);
        one_line_error(&tierbase(&args), want);
        assert!(!path.exists(), "{flags:?} left a file");
    }
    let o = tierbase(&["plush", "create", "--path", p, "--layout", "fixed16"]);
    one_line_error(&o, "not a Plush layout (fixed8, variable)");
    assert_eq!(o.status.code(), Some(2), "a usage error");
    // An existing store is not overwritten.
    create_small(&path, "variable");
    one_line_error(&tierbase(&["plush", "create", "--path", p]), "File exists");
    one_line_error(
        &tierbase(&["plush", "--hex", "get", "--path", p, "zz"]),
        "is not hex",
    );
    one_line_error(
        &tierbase(&["plush", "put", "--path", p, "", "v"]),
        "empty key",
    );
    // Files that are not Plush stores.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 100_000]).unwrap();
    one_line_error(
        &tierbase(&["plush", "stats", "--path", junk.to_str().unwrap()]),
        "not a tierbase region",
    );
    let kv = dir.path().join("kv.tb");
    ok(&[
        "kv",
        "create",
        "--path",
        kv.to_str().unwrap(),
        "--chunk",
        "1M",
    ]);
    let o = tierbase(&["plush", "verify", "--path", kv.to_str().unwrap()]);
    one_line_error(&o, "not a tierbase Plush store file (bad magic number)");
    assert_eq!(o.status.code(), Some(2));
    // One process per store: while this test holds it open, a command fails naming the holder.
    let held =
        tierbase::hash::PlushStore::open(&path, &tierbase::hash::PlushOptions::small()).unwrap();
    one_line_error(
        &tierbase(&["plush", "get", "--path", p, "k"]),
        "holds its lock",
    );
    held.close().unwrap();
    // Exit codes: success 0, negative answers 1, errors and usage errors 2.
    assert_eq!(
        tierbase(&["plush", "get", "--path", p, "nope"])
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        tierbase(&["plush", "stats", "--path", p]).status.code(),
        Some(0)
    );
    assert_eq!(
        tierbase(&["plush", "frobnicate", "--path", p])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn range_partition_scans_in_key_order() {
    let dir = tmpdir();
    let path = dir.path().join("range.plush");
    let p = path.to_str().unwrap();
    let out = create_small_with(&path, &["--partition", "range"]);
    assert!(out.contains("range-partitioned"), "{out}");
    for k in ["date", "banana", "apple", "cherry", "elder", "fig"] {
        ok(&["plush", "put", "--path", p, k, &k.to_uppercase()]);
    }
    ok(&["plush", "delete", "--path", p, "elder"]);
    assert_eq!(
        ok(&["plush", "scan", "--path", p]),
        "apple\tAPPLE\nbanana\tBANANA\ncherry\tCHERRY\ndate\tDATE\nfig\tFIG\n"
    );
    assert_eq!(
        ok(&["plush", "scan", "--path", p, "--from", "b", "--to", "date"]),
        "banana\tBANANA\ncherry\tCHERRY\n"
    );
    let o = tierbase(&["plush", "scan", "--path", p, "--from", "c", "--limit", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "cherry\tCHERRY\n");
    assert!(stderr(&o).contains("more"), "{}", stderr(&o));
    assert!(ok(&["plush", "stats", "--path", p]).contains("partition     range"));
    // A hash-partitioned store has no key order to scan by.
    let hashed = dir.path().join("hash.plush");
    create_small(&hashed, "variable");
    let o = tierbase(&[
        "plush",
        "scan",
        "--path",
        hashed.to_str().unwrap(),
        "--from",
        "a",
    ]);
    one_line_error(&o, "range-partitioned");
    let o = tierbase(&["plush", "create", "--path", p, "--partition", "sorted"]);
    one_line_error(&o, "sorted");
}

#[test]
fn bench_runs_plush_range_with_scans() {
    let dir = tmpdir();
    let data = dir.path().join("data");
    let out = dir.path().join("e.json");
    assert!(ok(&["bench", "stores"]).contains("plush-range"));
    let v = bench_json(
        &[
            "bench",
            "ycsb",
            "--store",
            "plush-range",
            "--workload",
            "e",
            "--records",
            "3000",
            "--ops",
            "2000",
            "--threads",
            "2",
            "--dir",
            data.to_str().unwrap(),
        ],
        &out,
    );
    let r = &v["runs"][0];
    assert_eq!(r["store"], "plush-range");
    assert_eq!(r["verify_failures"], 0, "{r}");
    assert!(
        r["operations"]["scan"]["count"].as_u64().unwrap() > 0,
        "{r}"
    );
}

/// A recovery-log chunk size that cannot be is refused as given (0 made `create` spin for
/// ever; 1000 was reported as 8000).
#[test]
fn impossible_log_chunk_sizes_are_refused_as_given() {
    let dir = tmpdir();
    let p = dir.path().join("s.plush");
    for (given, shown) in [("0", "chunks of 0 bytes"), ("1000", "chunks of 1000 bytes")] {
        one_line_error(
            &tierbase(&[
                "plush",
                "create",
                "--path",
                p.to_str().unwrap(),
                "--log-chunk",
                given,
            ]),
            shown,
        );
        assert!(!p.exists(), "a refused create left a file");
    }
}

/// Commands that only read (get, scan, stats, verify) open the store read-only: the file is
/// not changed by a byte (an open counted itself in the header, and recovered a crashed
/// store in place), and a write through the same command line still works afterwards.
#[test]
fn reading_commands_leave_the_file_as_it_was() {
    let dir = tmpdir();
    let path = dir.path().join("p.plush");
    let p = path.to_str().unwrap();
    create_small(&path, "variable");
    ok(&["plush", "put", "--path", p, "a", "1"]);
    let before = std::fs::read(&path).unwrap();
    assert_eq!(ok(&["plush", "get", "--path", p, "a"]).trim(), "1");
    ok(&["plush", "scan", "--path", p]);
    ok(&["plush", "stats", "--path", p]);
    ok(&["plush", "verify", "--path", p]);
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a reading command changed the store's file"
    );
    ok(&["plush", "put", "--path", p, "b", "2"]);
    assert_eq!(ok(&["plush", "get", "--path", p, "b"]).trim(), "2");
}
