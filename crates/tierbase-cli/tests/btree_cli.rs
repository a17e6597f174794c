//! `tierbase btree`: the operator commands work end to end (create, put, get, delete, ordered
//! scan, stats, verify, checkpoint), and bad input is one clear line with a non-zero exit code.

mod common;

use common::{one_line_error, stderr, stdout, tierbase};

#[test]
fn create_put_get_delete_scan_stats_verify_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tree");
    let p = path.to_str().unwrap();
    let o = tierbase(&["btree", "create", "--path", p, "--page-size", "4K"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("4 KiB pages"), "{}", stdout(&o));
    for (k, v) in [("b", "2"), ("a", "1"), ("c", "3")] {
        let o = tierbase(&["btree", "put", "--path", p, k, v]);
        assert_eq!(stdout(&o).trim(), "inserted", "{}", stderr(&o));
    }
    let o = tierbase(&["btree", "put", "--path", p, "a", "one"]);
    assert_eq!(stdout(&o).trim(), "replaced");
    let o = tierbase(&["btree", "get", "--path", p, "a"]);
    assert_eq!(stdout(&o).trim(), "one");
    let o = tierbase(&["btree", "get", "--path", p, "zz"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).trim(), "not found");
    let o = tierbase(&["btree", "scan", "--path", p]);
    assert_eq!(stdout(&o), "a\tone\nb\t2\nc\t3\n");
    let o = tierbase(&["btree", "scan", "--path", p, "--reverse", "--from", "b"]);
    assert_eq!(stdout(&o), "c\t3\nb\t2\n");
    let o = tierbase(&["btree", "scan", "--path", p, "--to", "c", "--limit", "1"]);
    assert_eq!(stdout(&o), "a\tone\n");
    let o = tierbase(&["btree", "delete", "--path", p, "b"]);
    assert_eq!(stdout(&o).trim(), "deleted");
    let o = tierbase(&["btree", "delete", "--path", p, "b"]);
    assert_eq!(o.status.code(), Some(1));
    let o = tierbase(&["btree", "stats", "--path", p, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["keys"], 2);
    assert_eq!(v["page_size"], 4096);
    let o = tierbase(&["btree", "checkpoint", "--path", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tierbase(&["btree", "verify", "--path", p]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("2 keys"), "{}", stdout(&o));
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none");
    let o = tierbase(&["btree", "get", "--path", missing.to_str().unwrap(), "k"]);
    one_line_error(&o, "pages.tb");
    let path = dir.path().join("tree");
    let p = path.to_str().unwrap();
    let o = tierbase(&["btree", "create", "--path", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tierbase(&["btree", "create", "--path", p]);
    one_line_error(&o, "a store exists here already");
    // A range that selects nothing because its ends are swapped is refused, not empty.
    let o = tierbase(&["btree", "scan", "--path", p, "--from", "k8", "--to", "k5"]);
    one_line_error(&o, "--from sorts after --to");
    let big = "x".repeat(5000);
    let o = tierbase(&["btree", "put", "--path", p, "k", &big]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tierbase(&["btree", "get", "--path", p, "k"]);
    assert_eq!(stdout(&o).trim(), big);
    // With a 256 KiB pool a value may take 64 KiB.
    let o = tierbase(&[
        "btree",
        "put",
        "--dram",
        "256K",
        "--path",
        p,
        "k",
        &"y".repeat(100_000),
    ]);
    one_line_error(&o, "value too large");
    let o = tierbase(&[
        "btree",
        "create",
        "--path",
        dir.path().join("t2").to_str().unwrap(),
        "--page-size",
        "3000",
    ]);
    one_line_error(&o, "page size");
    // A tier too small for a page names the size asked for, not its rounding to 4 KiB, and
    // leaves nothing behind.
    let small = dir.path().join("t3");
    let o = tierbase(&[
        "btree",
        "create",
        "--path",
        small.to_str().unwrap(),
        "--nvm",
        "1K",
    ]);
    one_line_error(&o, "NVM tier of 1024 bytes holds no 16384-byte page");
    assert!(!small.exists());
    std::fs::write(path.join("pages.tb"), vec![7u8; 65536]).unwrap();
    let o = tierbase(&["btree", "get", "--path", p, "k"]);
    one_line_error(&o, "superblock");
}

/// On a device that fills (files that cannot grow past a limit: `ulimit -f`), each `put` is
/// acknowledged or refused with one clear line; a put the store acknowledged exits 0 even when
/// the closing checkpoint finds no room (it printed "inserted" and exited 1), and so does a
/// `get` of a store that opens read-only; every acknowledged key reads back.
#[test]
fn a_full_device_acknowledges_or_refuses_each_put_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full");
    let p = path.to_str().unwrap();
    assert!(tierbase(&["btree", "create", "--path", p]).status.success());
    let value = "x".repeat(60_000);
    let limited = |args: &[&str]| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg("trap '' XFSZ; ulimit -f 16384 || exit 97; exec \"$0\" \"$@\"")
            .arg(common::BIN)
            .args(args)
            .output()
            .unwrap()
    };
    let mut acked = Vec::new();
    let refusal = loop {
        assert!(acked.len() < 2000, "the files never stopped growing");
        let key = format!("k{}", acked.len());
        let o = limited(&["btree", "--path", p, "put", &key, &value]);
        assert_ne!(o.status.code(), Some(97), "no ulimit here");
        if !o.status.success() {
            break o;
        }
        assert_eq!(stdout(&o).trim(), "inserted", "{}", stderr(&o));
        acked.push(key);
    };
    one_line_error(&refusal, "device full");
    assert!(acked.len() > 10, "only {} puts fitted", acked.len());
    for key in [&acked[0], &acked[acked.len() / 2], &acked[acked.len() - 1]] {
        let o = limited(&["btree", "--path", p, "get", key]);
        assert!(o.status.success(), "get {key}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim(), value, "get {key}");
    }
    // Room again: everything acknowledged is there, and writes go on.
    assert!(
        tierbase(&["btree", "--path", p, "put", "after", "v"])
            .status
            .success()
    );
    let o = tierbase(&["btree", "--path", p, "stats"]);
    let keys: u64 = stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("keys"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert_eq!(keys, acked.len() as u64 + 1);
}
