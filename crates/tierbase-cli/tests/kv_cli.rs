//! `tierbase kv`: the operator commands work end to end, and bad input is one clear line with a
//! non-zero exit code and no panic.

mod common;

use common::{one_line_error, stderr, stdout, tierbase};

#[test]
fn create_put_get_delete_scan_stats_verify() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ops.tb");
    let p = path.to_str().unwrap();
    let o = tierbase(&["kv", "create", "--path", p, "--chunk", "1M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("variable-size records"));

    let o = tierbase(&["kv", "put", "--path", p, "hello", "world"]);
    assert_eq!(stdout(&o).trim(), "inserted");
    let o = tierbase(&["kv", "put", "--path", p, "hello", "there"]);
    assert_eq!(stdout(&o).trim(), "replaced");
    let o = tierbase(&["kv", "--hex", "put", "--path", p, "00ff", "0102"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = tierbase(&["kv", "get", "--path", p, "hello"]);
    assert!(o.status.success());
    assert_eq!(stdout(&o).trim(), "there");
    let o = tierbase(&["kv", "--hex", "get", "--path", p, "00ff"]);
    assert_eq!(stdout(&o).trim(), "0102");
    // Not found: exit code 1, no error text beyond "not found".
    let o = tierbase(&["kv", "get", "--path", p, "absent"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).trim(), "not found");

    let o = tierbase(&["kv", "scan", "--path", p]);
    assert!(stdout(&o).contains("hello\tthere"), "{}", stdout(&o));
    assert_eq!(stdout(&o).lines().count(), 2);

    let o = tierbase(&["kv", "stats", "--path", p]);
    let s = stdout(&o);
    assert!(s.contains("records       2"), "{s}");
    assert!(s.contains("durability"), "{s}");
    assert!(s.contains("DRAM index"), "{s}");
    let text_durability = s.lines().find_map(|l| l.strip_prefix("durability    "));
    let o = tierbase(&["kv", "stats", "--path", p, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["stats"]["records"], 2);
    // The JSON says what the text says: a writer's durability, beside the read-only
    // session's own `none` (it gave only the session's).
    let writers = v["read_write_durability"]
        .as_str()
        .expect("a writer's durability");
    assert_eq!(
        text_durability.and_then(|d| d.strip_prefix("of a read-write open: ")),
        Some(writers)
    );
    assert!(v["recovery"]["duration"].is_object());

    let o = tierbase(&["kv", "delete", "--path", p, "hello"]);
    assert_eq!(stdout(&o).trim(), "deleted");
    let o = tierbase(&["kv", "delete", "--path", p, "hello"]);
    assert_eq!(o.status.code(), Some(1));

    let o = tierbase(&["kv", "verify", "--path", p]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("OK: no format violations"));
}

#[test]
fn verify_reports_damage_with_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("damaged.tb");
    let p = path.to_str().unwrap();
    assert!(
        tierbase(&["kv", "create", "--path", p, "--chunk", "1M"])
            .status
            .success()
    );
    assert!(
        tierbase(&["kv", "put", "--path", p, "k", "v"])
            .status
            .success()
    );
    // A record header that runs past its block: region header (4 KiB) + store header (4 KiB).
    let mut bytes = std::fs::read(&path).unwrap();
    let word: u32 = 1 | (5 << 2) | (0xFFFF << 16);
    bytes[8192..8196].copy_from_slice(&word.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let o = tierbase(&["kv", "verify", "--path", p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("problem"), "{}", stdout(&o));
    // A read-write open refuses with one line; a read-only one reads around the damage and
    // warns that it did.
    one_line_error(
        &tierbase(&["kv", "put", "--path", p, "k2", "v"]),
        "read-only open",
    );
    let o = tierbase(&["kv", "get", "--path", p, "k"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("warning") && stderr(&o).contains("media damage"),
        "{}",
        stderr(&o)
    );
}

/// A flipped bit in a record of a cleanly closed store (no write was in flight, so the record
/// is no torn write) is damage: `verify` says so and exits 1 (it counted such a record as a
/// legal torn write and said OK).
#[test]
fn verify_reports_a_flipped_bit_in_a_cleanly_closed_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flipped.tb");
    let p = path.to_str().unwrap();
    assert!(tierbase(&["kv", "create", "--path", p]).status.success());
    for i in 0..30 {
        let (k, v) = (format!("key{i}"), format!("val{i}"));
        assert!(
            tierbase(&["kv", "put", "--path", p, &k, &v])
                .status
                .success()
        );
    }
    let o = tierbase(&["kv", "verify", "--path", p]);
    assert!(o.status.success(), "{}", stdout(&o));
    // Each `kv put` is a process of its own, and opens compact sparse blocks: the key may be
    // in the file twice, a live copy and a dead original, in an order that depends on which
    // block compaction picked. Flip the bit in every copy so the live record is damaged.
    let mut bytes = std::fs::read(&path).unwrap();
    let copies: Vec<usize> = bytes
        .windows(5)
        .enumerate()
        .filter(|(_, w)| *w == b"key24")
        .map(|(at, _)| at)
        .collect();
    assert!(!copies.is_empty(), "the record's key is in the file");
    for at in copies {
        bytes[at + 4] ^= 0x40;
    }
    std::fs::write(&path, &bytes).unwrap();
    let o = tierbase(&["kv", "verify", "--path", p]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("media damage"), "{}", stdout(&o));
    // The record is named by where it is (it was only counted).
    assert!(
        stdout(&o).lines().any(|l| l.trim().starts_with("block ")
            && l.contains(" page ")
            && l.ends_with("the record fails its check: media damage")),
        "{}",
        stdout(&o)
    );
    // After a clean close nothing drops such a record: the count's explanation must not say
    // the next open does (it did, written for the after-a-crash case only).
    let torn = stdout(&o)
        .lines()
        .find(|l| l.starts_with("torn records"))
        .map(str::to_owned);
    let torn = torn.expect("a torn-records line");
    assert!(
        torn.contains("closed cleanly") && !torn.contains("drops them"),
        "{torn}"
    );
    let o = tierbase(&["kv", "verify", "--path", p, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["closed_cleanly"], true);
}

#[test]
fn bad_input_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = dir.path().join("fixed.tb");
    let f = fixed.to_str().unwrap();
    assert!(
        tierbase(&[
            "kv", "create", "--path", f, "--fixed", "8:4", "--chunk", "1M"
        ])
        .status
        .success()
    );
    one_line_error(
        &tierbase(&["kv", "put", "--path", f, "short", "abcd"]),
        "wrong key size: 5 bytes",
    );
    one_line_error(
        &tierbase(&["kv", "put", "--path", f, "12345678", "toolong"]),
        "wrong value size",
    );
    one_line_error(&tierbase(&["kv", "put", "--path", f, "", "abcd"]), "");
    one_line_error(&tierbase(&["kv", "create", "--path", f]), "File exists");
    one_line_error(
        &tierbase(&["kv", "create", "--path", "/x.tb", "--fixed", "8x4"]),
        "expected KEY_BYTES:VALUE_BYTES",
    );
    one_line_error(
        &tierbase(&["kv", "create", "--path", "/nonexistent/dir/s.tb"]),
        "No such file or directory",
    );
    one_line_error(
        &tierbase(&["kv", "get", "--path", "/nonexistent/s.tb", "k"]),
        "No such file or directory",
    );
    one_line_error(&tierbase(&["kv", "get", "k"]), "--path <FILE> is required");
    // A device profile means nothing to a store: refused, not ignored (a missing file
    // "worked").
    one_line_error(
        &tierbase(&[
            "--profiles",
            "/nonexistent.toml",
            "kv",
            "stats",
            "--path",
            f,
        ]),
        "reads no device profile",
    );
    // Missing arguments are named (the line ended with "not provided:" and nothing after).
    one_line_error(
        &tierbase(&["kv", "put", "--path", f]),
        "not provided: <KEY>, <VALUE>",
    );
    one_line_error(
        &tierbase(&["kv", "--hex", "get", "--path", f, "zz"]),
        "is not hex",
    );
    // Non-ASCII text given as hex: a clear error (it panicked, cutting a character in two).
    for bad in ["ＡＢ", "é0"] {
        one_line_error(
            &tierbase(&["kv", "--hex", "get", "--path", f, bad]),
            "is not a hex digit",
        );
    }
    one_line_error(
        &tierbase(&["kv", "create", "--path", "/tmp/x.tb", "--chunk", "10Q"]),
        "unknown unit 'Q'",
    );
    let zero = dir.path().join("zero.tb");
    one_line_error(
        &tierbase(&[
            "kv",
            "create",
            "--path",
            zero.to_str().unwrap(),
            "--chunk",
            "0",
        ]),
        "must be at least one block, not 0",
    );
    assert!(!zero.exists(), "a refused create left its file");
    // A file that is not a store.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, vec![7u8; 100_000]).unwrap();
    one_line_error(
        &tierbase(&["kv", "stats", "--path", junk.to_str().unwrap()]),
        "not a tierbase region",
    );
}

/// A file-size limit (the shell's `ulimit -f`) met while the store grows is a full device:
/// one clear line and exit status 2, and the store keeps what it held. (The kernel's
/// `SIGXFSZ` killed the command mid-write, with no error line and the store left open.)
#[test]
fn a_file_size_limit_is_a_full_store_not_a_killing_signal() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limited.tb");
    let p = path.to_str().unwrap();
    let o = tierbase(&["kv", "create", "--path", p, "--chunk", "1M"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        tierbase(&["kv", "put", "--path", p, "kept", "v"])
            .status
            .success()
    );
    // Files may not grow past the store's size (`ulimit -f` counts 512-byte blocks in a
    // POSIX shell); a value larger than the whole store must grow it. No `trap '' XFSZ`
    // here: the command itself must not die of the signal.
    let limit = std::fs::metadata(&path).unwrap().len().div_ceil(512);
    let value = "x".repeat(120_000);
    let o = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -f {limit} || exit 97; exec \"$0\" \"$@\""))
        .arg(common::BIN)
        .args(["kv", "put", "--path", p, "big", &value])
        .output()
        .unwrap();
    assert_eq!(
        o.status.signal(),
        None,
        "killed by a signal: {}",
        stderr(&o)
    );
    assert_ne!(
        o.status.code(),
        Some(97),
        "the shell could not set the limit"
    );
    one_line_error(&o, "full");
    let o = tierbase(&["kv", "get", "--path", p, "kept"]);
    assert_eq!(stdout(&o).trim(), "v", "{}", stderr(&o));
    let o = tierbase(&["kv", "verify", "--path", p]);
    assert!(o.status.success(), "{}", stdout(&o));
}

/// Output that cannot be written (a full device) is one clear line and exit status 2, not a
/// panic with a backtrace; a write made before the output is kept.
#[test]
fn output_that_cannot_be_written_is_one_clear_line() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here: skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tb");
    let p = path.to_str().unwrap();
    assert!(tierbase(&["kv", "create", "--path", p]).status.success());
    let full = || std::fs::File::create("/dev/full").unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(common::BIN)
            .args(args)
            .stdout(full())
            .output()
            .unwrap()
    };
    let put = run(&["kv", "put", "--path", p, "k", "v"]);
    one_line_error(&put, "cannot write the output");
    assert_eq!(put.status.code(), Some(2));
    let o = tierbase(&["kv", "get", "--path", p, "k"]);
    assert_eq!(stdout(&o).trim(), "v", "{}", stderr(&o));
    one_line_error(&run(&["kv", "get", "--path", p, "k"]), "No space left");
    one_line_error(&run(&["devices"]), "cannot write the output");
}

/// A reader that goes away (`tierbase kv scan | head -1`) ends the command quietly with the
/// status a shell shows for SIGPIPE, and the store is closed cleanly: before 2026-12-03 the
/// signal killed the process with the store open, so the next open took it for crashed and
/// dropped every record it could not check.
#[test]
fn a_closed_pipe_ends_quietly_and_closes_the_store() {
    use std::io::{BufRead, BufReader};
    use tierbase::kv::{KvOptions, KvStore};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tb");
    let p = path.to_str().unwrap();
    // Far more output than a pipe holds.
    let store = KvStore::create(&path, &KvOptions::default()).unwrap();
    for i in 0..5000 {
        store
            .put(format!("key{i}").as_bytes(), &[b'v'; 100])
            .unwrap();
    }
    store.close().unwrap();
    let mut child = std::process::Command::new(common::BIN)
        .args(["kv", "scan", "--path", p, "--limit", "100000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("key"), "{first}");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(141), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "quietly");
    let stats = tierbase(&["kv", "stats", "--json", "--path", p]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&stats)).unwrap();
    assert_eq!(
        v["recovery"]["after_clean_close"], true,
        "the scan left the store unclosed"
    );
}
