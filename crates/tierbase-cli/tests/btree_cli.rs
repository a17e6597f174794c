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
    std::fs::write(path.join("pages.tb"), vec![7u8; 65536]).unwrap();
    let o = tierbase(&["btree", "get", "--path", p, "k"]);
    one_line_error(&o, "superblock");
}
