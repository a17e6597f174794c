//! `tierbase devices` tells the truth about this machine, and bad input gives one clear line.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use tempfile::TempDir;

use common::{BIN, assert_one_line_error, stderr, stdout};

/// Runs the binary isolated from the user's own profile file.
fn run(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(BIN)
        .args(args)
        .env("TIERBASE_PROFILES", home.path().join("none.toml"))
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("run tierbase")
}

/// The flush instruction /proc/cpuinfo says this CPU has (clwb > clflushopt > clflush).
fn cpuinfo_flush() -> Option<&'static str> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags: Vec<&str> = info
        .lines()
        .find(|l| l.starts_with("flags"))?
        .split(':')
        .nth(1)?
        .split_whitespace()
        .collect();
    ["clwb", "clflushopt", "clflush"]
        .into_iter()
        .find(|f| flags.contains(f))
        .or(Some("none"))
}

/// (directory, durability mode a region there gets): disk, and /dev/shm when present.
fn dirs() -> Vec<(TempDir, &'static str)> {
    let mut v = vec![(
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        "msync",
    )];
    if Path::new("/dev/shm").is_dir() {
        v.push((tempfile::tempdir_in("/dev/shm").unwrap(), "process-crash"));
    }
    // A target dir on tmpfs would make the first one memory-backed too.
    v.retain(|(d, mode)| *mode != "msync" || !on_tmpfs(d.path()));
    v
}

fn on_tmpfs(p: &Path) -> bool {
    let out = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(p)
        .output();
    out.is_ok_and(|o| {
        let t = String::from_utf8_lossy(&o.stdout);
        t.trim() == "tmpfs" || t.trim() == "ramfs"
    })
}

/// The shared one-line error contract, and `devices` prints nothing on stdout when it fails.
fn one_line_error(o: &Output, what: &str) -> String {
    let err = assert_one_line_error(o, what);
    assert!(stdout(o).is_empty(), "{what}: nothing on stdout");
    err
}

#[test]
fn devices_reports_flush_instruction_and_durability() {
    let flush = cpuinfo_flush();
    for (dir, mode) in dirs() {
        let d = dir.path().to_str().unwrap();
        let o = run(&["devices", "--dir", d]);
        assert!(o.status.success(), "{d}: {}", stderr(&o));
        let out = stdout(&o);
        if let Some(f) = flush {
            assert!(
                out.contains(&format!("flush instruction  {f}, the best this CPU has")),
                "{d}: expected {f}:\n{out}"
            );
        }
        // What stores here run: none on a memory-backed or a disk file (no DAX here).
        assert!(
            out.contains("stores here flush  none ("),
            "{d}: a store on {mode} runs no flush instruction:\n{out}"
        );
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with("durability"))
            .expect("durability line");
        assert!(line.contains(mode), "{d}: expected {mode}: {line}");
        if mode == "process-crash" {
            assert!(line.contains("NOT a reboot"), "{line}");
        }
        assert!(out.contains(&format!("data dir           {d}")), "{out}");
        for name in ["dram", "optane-pmem-100", "pcie-ssd-p4510", "hdd"] {
            assert!(out.contains(name), "catalogue lists {name}");
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "{d}: probe files removed"
        );
    }
}

#[test]
fn devices_json_is_valid_and_agrees() {
    let flush = cpuinfo_flush();
    for (dir, mode) in dirs() {
        let o = run(&["devices", "--json", "--dir", dir.path().to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
        let m = &v["machine"];
        assert_eq!(m["durability"], mode);
        if let Some(f) = flush {
            assert_eq!(m["flush_instruction"], f);
        }
        for f in ["clwb", "clflushopt", "clflush"] {
            let in_cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with("flags"))
                .is_some_and(|l| l.split_whitespace().any(|x| x == f));
            assert_eq!(m["cpu_features"][f], in_cpuinfo, "{f}");
        }
        assert_eq!(m["dax"]["available"], false, "no DAX file system here");
        assert!(m["io_uring"]["available"].is_boolean());
        assert!(m["o_direct"]["available"].is_boolean());
        let profiles = v["profiles"].as_array().expect("profiles array");
        assert!(profiles.len() >= 9);
        let p4510 = profiles
            .iter()
            .find(|p| p["name"] == "pcie-ssd-p4510")
            .expect("p4510");
        assert_eq!(
            (p4510["alpha"].as_f64(), p4510["k_r"].as_u64()),
            (Some(2.8), Some(80))
        );
    }
}

#[test]
fn bad_directories_are_one_line_errors() {
    let o = run(&["devices", "--dir", "/definitely/not/here"]);
    let err = one_line_error(&o, "missing dir");
    assert!(err.contains("/definitely/not/here"), "{err}");

    let f = tempfile::NamedTempFile::new().unwrap();
    let o = run(&["devices", "--dir", f.path().to_str().unwrap()]);
    let err = one_line_error(&o, "a file, not a dir");
    assert!(err.contains("not a directory"), "{err}");

    // /proc cannot hold files: the probe cannot write there.
    if Path::new("/proc/self").exists() {
        let o = run(&["devices", "--dir", "/proc"]);
        one_line_error(&o, "unwritable dir");
    }
}

#[test]
fn bad_profile_files_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("syntax.toml", "[[profile]]\nname = \n"),
        ("type.toml", "[[profile]]\nname = 3\n"),
        (
            "values.toml",
            "[[profile]]\nname = \"x\"\nkind = \"block\"\nread_latency_ns = 1\n\
             write_latency_ns = 1\nread_bandwidth_mb_s = 1\nwrite_bandwidth_mb_s = 1\n\
             access_granularity = 4096\nalpha = 1\nk_r = 0\nk_w = 1\nprice_per_gb = 0\n\
             capacity_gb = 1\n",
        ),
        (
            "unknown.toml",
            "[[profile]]\nname = \"x\"\ncolour = \"red\"\n",
        ),
    ];
    for (name, text) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let o = run(&["--profiles", path.to_str().unwrap(), "devices"]);
        let err = one_line_error(&o, name);
        assert!(err.contains(name), "{name}: names the file: {err}");
    }
    let o = run(&["--profiles", "/no/such/profiles.toml", "devices"]);
    one_line_error(&o, "missing profile file");
}

#[test]
fn a_user_profile_file_extends_the_catalogue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.toml");
    std::fs::write(
        &path,
        "[[profile]]\nname = \"my-disk\"\nkind = \"block\"\nread_latency_ns = 50000\n\
         write_latency_ns = 60000\nread_bandwidth_mb_s = 500\nwrite_bandwidth_mb_s = 400\n\
         access_granularity = 4096\nalpha = 1.5\nk_r = 8\nk_w = 4\nprice_per_gb = 0.1\n\
         capacity_gb = 1000\n",
    )
    .unwrap();
    let o = run(&["--profiles", path.to_str().unwrap(), "devices", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(
        v["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "my-disk")
    );
}

#[test]
fn help_lists_every_command() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let out = stdout(&o);
    for cmd in ["devices", "bench", "report", "profile"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(cmd)),
            "--help lists {cmd}:\n{out}"
        );
        let o = run(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd} --help");
        assert!(
            stdout(&o).contains(&format!("Usage: tierbase {cmd}")),
            "{cmd} --help"
        );
    }
    let o = run(&["devices", "--help"]);
    let out = stdout(&o);
    for flag in ["--dir", "--json", "--profiles"] {
        assert!(out.contains(flag), "devices --help documents {flag}");
    }
}
