//! Memory benchmarks: configuration files and matrices, the executor's accounting, region files
//! and their clean-up, and the memory profile built from runs.

use std::path::Path;

use tierbase::device::{Catalogue, DeviceKind};
use tierbase_profile::config::{BenchmarkDef, expand_all, parse_config};
use tierbase_profile::memory::{
    MemoryConfig, MemoryEvent, MemoryRun, NamedConfig, Operation, RunOptions, run_all,
};
use tierbase_profile::packages::ExecMode;
use tierbase_profile::persist::Persist;
use tierbase_profile::save::memory_profile;

fn small() -> MemoryConfig {
    MemoryConfig {
        memory_range: 4 << 20,
        number_operations: 20_000,
        latency_sample_frequency: 100,
        package_size: 64 << 10,
        ..MemoryConfig::default()
    }
}

fn run(list: &[NamedConfig]) -> Vec<MemoryRun> {
    let (runs, skipped) =
        run_all(list, &Catalogue::builtin(), &RunOptions::default(), |_| {}).unwrap();
    // Only persist instructions this CPU lacks may be skipped.
    for s in &skipped {
        assert!(s.reason.contains("does not have"), "{}", s.reason);
    }
    runs
}

const CONFIG: &str = r#"
[hash_index_update]
matrix = { number_threads = [1, 2] }
args = { custom_ops = "r_256,w_64_cache_128,w_64_cache_-128", total_memory_range = "1M", number_operations = 5000 }

[raw]
matrix = { access_size = [64, 4096], operation = ["read", "write"], persist_instruction = ["none", "nocache"] }
args = { exec_mode = "random", memory_range = 1048576, number_operations = 3000, latency_sample_frequency = 10 }
"#;

#[test]
fn config_files_expand_their_matrix() {
    let defs = parse_config(CONFIG, Path::new("perma.toml")).unwrap();
    assert_eq!(defs.len(), 2);
    let list = expand_all(&defs, &MemoryConfig::default()).unwrap();
    let hash: Vec<&NamedConfig> = list
        .iter()
        .filter(|n| n.name == "hash_index_update")
        .collect();
    assert_eq!(hash.len(), 2);
    assert!(hash.iter().all(|n| n.config.exec_mode == ExecMode::Custom));
    assert_eq!(hash[0].config.memory_range, 1 << 20);
    assert_eq!(hash[1].config.number_threads, 2);
    assert_eq!(hash[1].matrix, vec![("number_threads".into(), "2".into())]);
    // 2 sizes × (read + 2 persisting writes): reads do not multiply by persist instructions.
    let raw: Vec<&NamedConfig> = list.iter().filter(|n| n.name == "raw").collect();
    assert_eq!(raw.len(), 6);
    let reads = raw
        .iter()
        .filter(|n| n.config.operation == Operation::Read)
        .count();
    assert_eq!(reads, 2);
    for n in &raw {
        if n.config.operation == Operation::Read {
            assert!(n.matrix.iter().all(|(k, _)| k != "persist_instruction"));
        }
    }
    let writes: Vec<Persist> = raw
        .iter()
        .filter(|n| n.config.operation == Operation::Write)
        .map(|n| n.config.persist_instruction)
        .collect();
    assert_eq!(
        writes,
        vec![
            Persist::None,
            Persist::NoCache,
            Persist::None,
            Persist::NoCache
        ]
    );
}

#[test]
fn config_errors_are_one_line_and_name_the_problem() {
    let err = |text: &str| {
        let e = parse_config(text, Path::new("b.toml"))
            .and_then(|d| expand_all(&d, &MemoryConfig::default()))
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\n'), "{e}");
        assert!(e.starts_with("b.toml") || e.contains("benchmark"), "{e}");
        e
    };
    assert!(err("[a]\nargs = { bogus = 1 }").contains("unknown parameter 'bogus'"));
    assert!(err("[a]\nmatrix = { number_threads = 2 }").contains("must be a list"));
    assert!(err("[a]\nmatrix = { number_threads = [] }").contains("empty list"));
    assert!(
        err("[a]\nmatrix = { threads = [1] }\nargs = { number_threads = 2 }")
            .contains("given twice")
    );
    assert!(err("[a]\nextra = { x = 1 }").contains("unknown section 'extra'"));
    assert!(err("[a\nargs = {}").contains("line 1"));
    assert!(err("x = 3").contains("must be a table"));
    assert!(err("").contains("no benchmarks"));
    assert!(err("[a]\nargs = { access_size = \"12Q\" }").contains("unknown unit 'Q'"));
    assert!(err("[a]\nmatrix = { number_threads = [1, 0] }").contains("must be from 1"));
    assert!(err("[a]\nargs = { persist = \"flushy\" }").contains("unknown persist"));
    assert!(err("[a]\nargs = { exec_mode = \"diagonal\" }").contains("unknown exec mode"));
    assert!(err("[a]\nargs = { prefault = \"maybe\" }").contains("true or false"));
}

#[test]
fn raw_runs_count_every_operation_and_byte() {
    let mut def = BenchmarkDef::new("raw");
    def.add_text("exec_mode", "sequential,sequential_desc,random")
        .unwrap();
    def.add_text("operation", "read,write").unwrap();
    def.add_text("access_size", "64,4096").unwrap();
    def.add_text("number_threads", "1,2").unwrap();
    def.add_text("persist", "nocache").unwrap();
    let list = def.expand(&small()).unwrap();
    assert_eq!(list.len(), 24);
    let runs = run(&list);
    assert_eq!(runs.len(), 24);
    for r in &runs {
        let c = &r.config;
        let expect_ops = match c.exec_mode {
            ExecMode::Random => 20_000,
            _ => (4 << 20) / c.access_size,
        };
        assert_eq!(r.ops, expect_ops, "{}", r.describe());
        assert_eq!(r.bytes, r.ops * c.access_size);
        assert!(r.ops_per_s > 0.0 && r.bandwidth_gb_s > 0.0);
        assert_eq!(r.medium, "DRAM (anonymous)");
        assert!(r.emulated.is_none());
        let lat = r.latency_ns.expect("sampled");
        // One sample per 100 operations of each thread.
        assert!(lat.samples >= r.ops / 100 - c.number_threads as u64);
        assert!(lat.samples <= r.ops / 100);
        assert!(lat.min <= lat.p50 && lat.p50 <= lat.p99 && lat.p99 <= lat.max);
    }
}

#[test]
fn chains_run_on_both_memories_and_time_limits_cycle_packages() {
    let mut def = BenchmarkDef::new("hybrid");
    def.add_values(
        "custom_operations",
        vec![
            "rd_2048,rd_2048,r_1024".into(),
            "r_256,w_64_nocache_128,w_64_nocache_-128".into(),
        ],
    )
    .unwrap();
    def.add_text("dram_memory_range", "1M").unwrap();
    def.add_text("number_operations", "3000").unwrap();
    let list = def.expand(&small()).unwrap();
    assert_eq!(list.len(), 2);
    let runs = run(&list);
    assert_eq!(runs[0].ops, 3000);
    assert_eq!(runs[0].bytes, 3000 * (2048 + 2048 + 1024));
    assert_eq!(runs[1].bytes, 3000 * 384);
    assert!(
        runs[1]
            .describe()
            .starts_with("chain r_256,w_64_nocache_128")
    );
    // A time limit keeps threads cycling through the packages until it passes.
    let mut timed = small();
    timed.exec_mode = ExecMode::Random;
    timed.access_size = 64;
    timed.number_operations = 1000;
    timed.package_size = 64 * 100;
    timed.run_time = 0.02;
    let runs = run(&[NamedConfig {
        name: "timed".into(),
        matrix: vec![],
        config: timed,
    }]);
    assert!(runs[0].ops > 0);
    assert_eq!(runs[0].ops % 100, 0, "whole packages of 100 operations");
    assert_eq!(runs[0].ops, runs[0].packages * 100);
}

#[test]
fn region_files_are_created_checked_and_removed() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let mut cfg = small();
    cfg.exec_mode = ExecMode::Random;
    cfg.operation = Operation::Write;
    cfg.persist_instruction = Persist::NoCache;
    cfg.memory_path = Some(dir.path().to_path_buf());
    let mut events = Vec::new();
    let (runs, _) = run_all(
        &[NamedConfig {
            name: "file".into(),
            matrix: vec![],
            config: cfg.clone(),
        }],
        &Catalogue::builtin(),
        &RunOptions::default(),
        |e| {
            events.push(match e {
                MemoryEvent::Preparing(_) => "prepare",
                MemoryEvent::Result(_) => "result",
                MemoryEvent::Skipped(_) => "skip",
            })
        },
    )
    .unwrap();
    assert_eq!(events, vec!["prepare", "result"]);
    assert!(
        runs[0].medium.ends_with("file") || runs[0].medium.contains("file ("),
        "{}",
        runs[0].medium
    );
    let path = runs[0].path.clone().unwrap();
    assert!(path.starts_with(dir.path()));
    assert!(!path.exists(), "the temporary region file is removed");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // An existing file is refused without --force, and is not a region with it.
    let existing = dir.path().join("data.bin");
    std::fs::write(&existing, b"precious").unwrap();
    cfg.memory_path = Some(existing.clone());
    let one = |cfg: &MemoryConfig, force: bool| {
        run_all(
            &[NamedConfig {
                name: "x".into(),
                matrix: vec![],
                config: cfg.clone(),
            }],
            &Catalogue::builtin(),
            &RunOptions {
                force,
                ..RunOptions::default()
            },
            |_| {},
        )
        .map(|_| ())
        .unwrap_err()
        .to_string()
    };
    assert!(one(&cfg, false).contains("refusing to write to existing file"));
    assert!(one(&cfg, true).contains("cannot be used as a region"));
    assert_eq!(std::fs::read(&existing).unwrap(), b"precious");
}

#[test]
fn emulated_runs_say_so_and_block_profiles_are_refused() {
    let mut cfg = small();
    cfg.exec_mode = ExecMode::Random;
    cfg.number_operations = 2000;
    cfg.emulate = Some("optane-pmem-100".into());
    let runs = run(&[NamedConfig {
        name: "emu".into(),
        matrix: vec![],
        config: cfg.clone(),
    }]);
    assert_eq!(
        runs[0].emulated.as_deref(),
        Some("emulated optane-pmem-100")
    );
    assert!(runs[0].describe().contains("emulated optane-pmem-100"));
    cfg.emulate = Some("hdd".into());
    let e = run_all(
        &[NamedConfig {
            name: "emu".into(),
            matrix: vec![],
            config: cfg,
        }],
        &Catalogue::builtin(),
        &RunOptions::default(),
        |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("block device"), "{e}");
}

#[test]
fn memory_profiles_come_from_random_runs() {
    let mut def = BenchmarkDef::new("suite");
    def.add_text("exec_mode", "sequential,random").unwrap();
    def.add_text("operation", "read,write").unwrap();
    def.add_text("access_size", "64,256").unwrap();
    def.add_text("number_threads", "1,2").unwrap();
    let runs = run(&def.expand(&small()).unwrap());
    let p = memory_profile("this-dram", &runs).unwrap();
    assert_eq!(p.kind, DeviceKind::Memory);
    assert!(p.k_r >= 1 && p.k_r <= 2 && p.k_w >= 1 && p.k_w <= 2);
    assert!(p.alpha > 0.0 && p.read_latency_ns > 0.0 && p.write_latency_ns > 0.0);
    let best_read = runs
        .iter()
        .filter(|r| r.config.operation == Operation::Read)
        .map(|r| r.bandwidth_gb_s * 1000.0)
        .fold(0.0, f64::max);
    assert!((p.read_bandwidth_mb_s - best_read).abs() < 1e-9);
    assert!(p.source.unwrap().contains("DRAM (anonymous)"));
    // A run whose emulation fell behind (late loads added over 5 % of its time) is not the
    // profile's: such runs are not saved.
    let mut late = runs.clone();
    let measured_ns = (late[0].elapsed_s * 1e9) as u64;
    late[0].emulated = Some("emulated cxl-memory".into());
    late[0].emulated_ops = Some(late[0].ops);
    late[0].emulated_late = Some(late[0].ops);
    late[0].emulated_late_ns = Some(measured_ns / 10);
    let e = memory_profile("too-fast", &late).unwrap_err().to_string();
    assert!(
        e.contains("not saving profile 'too-fast'")
            && e.contains("emulation of cxl-memory did not keep up")
            && e.contains("limit 5%"),
        "{e}"
    );
    late[0].emulated_late_ns = Some(measured_ns / 100);
    assert!(memory_profile("kept-up", &late).is_ok());
    // Without random writes there is nothing to derive α from.
    let reads: Vec<MemoryRun> = runs
        .into_iter()
        .filter(|r| r.config.operation == Operation::Read)
        .collect();
    let e = memory_profile("x", &reads).unwrap_err().to_string();
    assert!(e.contains("random write runs"), "{e}");
}
