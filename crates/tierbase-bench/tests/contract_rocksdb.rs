//! The contract suite and a short benchmark on the RocksDB baselines (feature `rocksdb`,
//! which links the system librocksdb).
#![cfg(feature = "rocksdb")]

use tierbase_bench::adapter::{StoreOptions, open_store};
use tierbase_bench::contract::run_contract_suite;
use tierbase_bench::measure::OpKind;
use tierbase_bench::plan::{BenchPlan, run_plan};
use tierbase_bench::progress::SilentProgress;
use tierbase_bench::workload::CoreWorkload;

fn contract(name: &str) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(name, &StoreOptions::new(dir.path())).unwrap();
    let info = store.info();
    assert!(info.capabilities.ordered_scan);
    run_contract_suite(store.as_ref()).unwrap_or_else(|e| panic!("{name}: {e}"));
    store.close().unwrap();
    assert!(dir.path().join("rocksdb").join("CURRENT").exists());
}

#[test]
fn rocksdb_sync_passes_the_contract() {
    contract("rocksdb");
}

#[test]
fn rocksdb_nosync_passes_the_contract() {
    contract("rocksdb-nosync");
}

#[test]
fn durability_and_medium_are_stated() {
    let dir = tempfile::tempdir().unwrap();
    let sync = open_store("rocksdb", &StoreOptions::new(dir.path().join("a"))).unwrap();
    let nosync = open_store("rocksdb-nosync", &StoreOptions::new(dir.path().join("b"))).unwrap();
    let (s, n) = (sync.info(), nosync.info());
    assert!(s.durability.starts_with("wal+fsync"), "{}", s.durability);
    assert!(
        n.durability.starts_with("wal, no fsync"),
        "{}",
        n.durability
    );
    assert!(s.notes.iter().any(|x| x.contains("sync=true")));
    assert!(n.notes.iter().any(|x| x.contains("sync=false")));
    let expect = tierbase_bench::adapter::file_medium(dir.path());
    assert_eq!(s.medium, expect);
    if std::path::Path::new("/dev/shm").is_dir() {
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let on_shm = open_store("rocksdb", &StoreOptions::new(shm.path())).unwrap();
        assert_eq!(on_shm.info().medium, "tmpfs file");
        assert!(on_shm.info().durability.contains("process-crash"));
    }
}

#[test]
fn emulation_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = StoreOptions::new(dir.path());
    opts.emulate = tierbase::device::Catalogue::builtin().get("hdd").cloned();
    let e = open_store("rocksdb", &opts).err().unwrap();
    assert!(e.is_unsupported());
    assert!(e.to_string().contains("device emulation"), "{e}");
}

#[test]
fn short_ycsb_runs_verify() {
    let mut plan = BenchPlan::new("rocksdb-nosync");
    plan.workloads = vec![
        CoreWorkload::A.spec(1_000, 2_000),
        CoreWorkload::E.spec(1_000, 500),
    ];
    plan.threads = vec![2];
    let runs = run_plan(&plan, &SilentProgress).unwrap();
    for r in &runs {
        assert_eq!(r.verify_failures, 0);
        assert!(r.durability.contains("no fsync"));
    }
    assert_eq!(runs[0].operations[&OpKind::Read].not_found, 0);
    assert!(runs[1].operations[&OpKind::Scan].count > 400);
}

/// The tables carry a Bloom filter: RocksDB's own record of the options it opened with (the
/// `OPTIONS-*` file it writes into the database) names the policy. Without one (RocksDB's
/// default) it says `nullptr`.
#[test]
fn tables_carry_a_bloom_filter() {
    let dir = tempfile::tempdir().unwrap();
    for (name, sub, dram) in [
        ("rocksdb", "a", None),
        ("rocksdb-nosync", "b", Some(8u64 << 20)),
    ] {
        let mut opts = StoreOptions::new(dir.path().join(sub));
        opts.dram_budget = dram;
        let store = open_store(name, &opts).unwrap();
        assert!(
            store
                .info()
                .notes
                .iter()
                .any(|n| n.contains("Bloom filter")),
            "{name}: {:?}",
            store.info().notes
        );
        store.close().unwrap();
        for text in options_files(&dir.path().join(sub).join("rocksdb")) {
            let policy = option(&text, "filter_policy");
            assert!(policy.starts_with("bloomfilter"), "{name}: {policy}");
        }
    }
}

/// The texts of the `OPTIONS-*` files RocksDB wrote into the database at `db` (at least one).
fn options_files(db: &std::path::Path) -> Vec<String> {
    let texts: Vec<String> = std::fs::read_dir(db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("OPTIONS-"))
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(!texts.is_empty(), "no OPTIONS file in {db:?}");
    texts
}

/// The value of `key` in an `OPTIONS-*` file's text.
fn option<'t>(text: &'t str, key: &str) -> &'t str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key} in the OPTIONS file"))
}

/// With `--memtables-in-budget` the index and filter blocks live in the block cache; they are
/// then partitioned, with their top levels pinned, as RocksDB's wiki advises. Whole, each
/// table's filter is one block of hundreds of KiB that data blocks evict from a small cache
/// (docs/BENCHMARKS.md, Figure 34: reads 10x slower). Without the option they stay whole,
/// outside the cache.
#[test]
fn index_and_filters_in_the_cache_are_partitioned() {
    let dir = tempfile::tempdir().unwrap();
    for (sub, in_budget) in [("a", true), ("b", false)] {
        let mut opts = StoreOptions::new(dir.path().join(sub));
        opts.dram_budget = Some(8 << 20);
        opts.memtables_in_budget = in_budget;
        let store = open_store("rocksdb-nosync", &opts).unwrap();
        store.close().unwrap();
        for text in options_files(&dir.path().join(sub).join("rocksdb")) {
            let expect = |key: &str, with: &str, without: &str| {
                let want = if in_budget { with } else { without };
                assert_eq!(
                    option(&text, key),
                    want,
                    "{key}, in the budget: {in_budget}"
                );
            };
            expect("cache_index_and_filter_blocks", "true", "false");
            expect("index_type", "kTwoLevelIndexSearch", "kBinarySearch");
            expect("partition_filters", "true", "false");
            expect("pin_top_level_index_and_filter", "true", "true");
            expect("pin_l0_filter_and_index_blocks_in_cache", "true", "false");
        }
    }
}
