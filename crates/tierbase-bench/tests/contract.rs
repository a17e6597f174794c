//! The adapter contract suite on every pure-Rust adapter (and on `plush` through its PMem
//! levels), and proof that it catches broken stores.

use tierbase::hash::Partition;
use tierbase_bench::BenchError;
use tierbase_bench::adapter::{
    Client, PlushBenchStore, STORES, Store, StoreInfo, StoreOptions, open_store,
};
use tierbase_bench::contract::run_contract_suite;

fn open(name: &str) -> (tempfile::TempDir, Box<dyn Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(name, &StoreOptions::new(dir.path())).unwrap();
    (dir, store)
}

#[test]
fn memory_store_passes_the_contract() {
    let (_dir, store) = open("memory");
    run_contract_suite(store.as_ref()).unwrap();
    store.close().unwrap();
}

#[test]
fn memory_btree_store_passes_the_contract() {
    let (_dir, store) = open("memory-btree");
    run_contract_suite(store.as_ref()).unwrap();
    store.close().unwrap();
}

#[test]
fn every_built_store_passes_the_contract() {
    for entry in STORES.iter().filter(|e| e.built) {
        let (_dir, store) = open(entry.name);
        run_contract_suite(store.as_ref()).unwrap_or_else(|e| panic!("{}: {e}", entry.name));
        store.close().unwrap();
    }
}

/// `plush` and `plush-range` with a DRAM level of 2^4 entries (`dram_budget` 64 KiB), so the
/// contract's writes fill DRAM halves and migrate through the PMem levels (and the range
/// store's ordered scans read them); on tmpfs when there is one.
#[test]
fn plush_passes_the_contract_through_its_pmem_levels() {
    for partition in [Partition::Hash, Partition::Range] {
        plush_contract_through_pmem_levels(partition);
    }
}

fn plush_contract_through_pmem_levels(partition: Partition) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let mut o = StoreOptions::new(dir.path());
    o.dram_budget = Some(tierbase::hash::MIN_DRAM_BUDGET);
    let store = PlushBenchStore::open(&o, partition).unwrap();
    assert_eq!(
        store.info().capabilities.ordered_scan,
        partition == Partition::Range
    );
    run_contract_suite(&store).unwrap();
    let stats = store.inner().stats();
    assert_eq!(stats.dram_entries, 16);
    let migrated = stats
        .counters
        .iter()
        .find(|(k, _)| k == "half_migrations")
        .map_or(0, |c| c.1);
    assert!(migrated > 0, "{stats:?}");
    assert!(stats.levels >= 1, "{stats:?}");
    assert!(store.inner().verify().unwrap().problems.is_empty());
    Box::new(store).close().unwrap();
}

#[test]
fn unknown_store_lists_the_known_ones() {
    let e = open_store("leveldb", &StoreOptions::new("."))
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(
        msg.starts_with(
            "unknown store 'leveldb' (known: kv, kv-var, btree, btree-3tier, btree-nvm, btree-nvm-direct, plush, plush-range, memory, memory-btree, rocksdb"
        ),
        "{msg}"
    );
}

#[cfg(not(feature = "rocksdb"))]
#[test]
fn rocksdb_without_the_feature_says_how_to_get_it() {
    let e = open_store("rocksdb", &StoreOptions::new("."))
        .err()
        .unwrap();
    assert!(e.to_string().contains("--features rocksdb"), "{e}");
}

/// Which rule a broken store breaks.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    UpdateUpserts,
    GetKeepsStaleBytes,
    DeleteAlwaysTrue,
    ScanSkipsFirst,
    ScanUntypedError,
}

/// Wraps `memory-btree` and breaks one rule.
struct Broken {
    inner: Box<dyn Store>,
    fault: Fault,
}

struct BrokenClient<'a> {
    inner: Box<dyn Client + 'a>,
    fault: Fault,
}

impl Store for Broken {
    fn info(&self) -> StoreInfo {
        let mut i = self.inner.info();
        if self.fault == Fault::ScanUntypedError {
            i.capabilities.ordered_scan = false;
        }
        i
    }
    fn client(&self) -> tierbase_bench::Result<Box<dyn Client + '_>> {
        Ok(Box::new(BrokenClient {
            inner: self.inner.client()?,
            fault: self.fault,
        }))
    }
    fn close(self: Box<Self>) -> tierbase_bench::Result<()> {
        self.inner.close()
    }
}

impl Client for BrokenClient<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> tierbase_bench::Result<()> {
        self.inner.put(key, value)
    }
    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> tierbase_bench::Result<bool> {
        if self.fault == Fault::GetKeepsStaleBytes {
            let mut tmp = Vec::new();
            let found = self.inner.get(key, &mut tmp)?;
            out.extend_from_slice(&tmp); // appends instead of replacing
            return Ok(found);
        }
        self.inner.get(key, out)
    }
    fn update(&mut self, key: &[u8], value: &[u8]) -> tierbase_bench::Result<bool> {
        if self.fault == Fault::UpdateUpserts {
            self.inner.put(key, value)?;
            return Ok(true);
        }
        self.inner.update(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> tierbase_bench::Result<bool> {
        let r = self.inner.delete(key)?;
        Ok(r || self.fault == Fault::DeleteAlwaysTrue)
    }
    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> tierbase_bench::Result<usize> {
        match self.fault {
            Fault::ScanUntypedError => Err(BenchError::invalid("no scans here")),
            Fault::ScanSkipsFirst => {
                let mut first = true;
                let mut n = 0;
                self.inner.scan(start, count + 1, &mut |k, v| {
                    if first {
                        first = false;
                    } else {
                        visit(k, v);
                        n += 1;
                    }
                })?;
                Ok(n.min(count))
            }
            _ => self.inner.scan(start, count, visit),
        }
    }
}

#[test]
fn the_contract_catches_broken_stores() {
    for (fault, expect) in [
        (Fault::UpdateUpserts, "update of a missing key"),
        (Fault::GetKeepsStaleBytes, "get of key"),
        (Fault::DeleteAlwaysTrue, "delete of a missing key"),
        (Fault::ScanSkipsFirst, "scan from"),
        (Fault::ScanUntypedError, "BenchError::Unsupported"),
    ] {
        let (_dir, inner) = open("memory-btree");
        let store = Broken { inner, fault };
        let err = run_contract_suite(&store).unwrap_err();
        assert!(err.contains(expect), "expected '{expect}' in: {err}");
    }
}

#[test]
fn the_contract_needs_an_empty_store() {
    let (_dir, store) = open("memory-btree");
    store.client().unwrap().put(b"left over", b"x").unwrap();
    let err = run_contract_suite(store.as_ref()).unwrap_err();
    assert!(err.contains("empty store"), "{err}");
}
