//! Workload streams (operation mix, determinism, key choice) and whole benchmark plans on the
//! in-memory stores.

use std::collections::HashMap;

use tierbase_bench::BenchError;
use tierbase_bench::measure::OpKind;
use tierbase_bench::plan::{BenchPlan, Warmup, run_plan};
use tierbase_bench::progress::SilentProgress;
use tierbase_bench::workload::ops::{KeySpace, Operation, WorkloadGenerators};
use tierbase_bench::workload::{CoreWorkload, RequestDistribution, SizeSpec, WorkloadSpec};

const RUN: u64 = 2;

/// `n` operations of a single-threaded stream, inserts acknowledged as they are issued.
fn ops(spec: &WorkloadSpec, seed: u64, thread: u64, n: usize) -> Vec<(Operation, Vec<u8>)> {
    let ks = KeySpace::new(spec.record_count);
    let gens = WorkloadGenerators::new(spec, n as u64).unwrap();
    let mut stream = gens.stream(seed, RUN, thread, &ks);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let op = stream.next_operation();
        let mut value = Vec::new();
        if matches!(op, Operation::Update { .. } | Operation::Insert { .. }) {
            stream.build_value(b"k", &mut value);
        }
        if let Operation::Insert { keynum } = op {
            ks.acknowledge_insert(keynum);
        }
        out.push((op, value));
    }
    out
}

#[test]
fn operation_mix_matches_each_core_workload() {
    let n = 100_000;
    for w in [
        CoreWorkload::A,
        CoreWorkload::B,
        CoreWorkload::C,
        CoreWorkload::D,
        CoreWorkload::E,
        CoreWorkload::F,
    ] {
        let spec = w.spec(10_000, n as u64);
        let mut counts: HashMap<OpKind, usize> = HashMap::new();
        for (op, _) in ops(&spec, 1, 0, n) {
            *counts.entry(op.kind()).or_default() += 1;
        }
        for (kind, p) in spec.mix() {
            let got = counts.get(&kind).copied().unwrap_or(0) as f64 / n as f64;
            // 5 standard deviations of a binomial share at n = 100k is below 0.008.
            assert!(
                (got - p).abs() < 0.008,
                "workload {w}: {} share {got:.4}, expected {p}",
                kind.name()
            );
        }
        let kinds: Vec<_> = counts.keys().copied().collect();
        for k in kinds {
            assert!(
                spec.mix().iter().any(|(m, _)| *m == k),
                "workload {w} issued {k:?}"
            );
        }
    }
}

#[test]
fn same_seed_same_sequence() {
    let spec = CoreWorkload::D.spec(5_000, 10_000);
    let a = ops(&spec, 42, 0, 10_000);
    let b = ops(&spec, 42, 0, 10_000);
    assert_eq!(
        a, b,
        "same seed and thread: identical operations and values"
    );
    let c = ops(&spec, 43, 0, 10_000);
    assert_ne!(a, c, "another seed differs");
    let d = ops(&spec, 42, 1, 10_000);
    assert_ne!(a, d, "another thread differs");
    // Scans and value sizes are part of the sequence too.
    let mut e = CoreWorkload::E.spec(5_000, 5_000);
    e.value_size = SizeSpec::Uniform { min: 8, max: 300 };
    assert_eq!(ops(&e, 9, 0, 5_000), ops(&e, 9, 0, 5_000));
}

#[test]
fn values_lent_in_place_equal_built_values_and_leave_the_filler_intact() {
    use tierbase_bench::workload::keys::{KeyBuilder, value_matches_key};
    for size in [
        SizeSpec::Fixed(200),
        SizeSpec::Fixed(8),
        SizeSpec::Uniform { min: 8, max: 300 },
        SizeSpec::Zipfian { min: 8, max: 5000 },
    ] {
        let mut spec = CoreWorkload::A.spec(1_000, 1_000);
        spec.value_size = size;
        spec.key_size = 16;
        let ks = KeySpace::new(spec.record_count);
        let gens = WorkloadGenerators::new(&spec, 1_000).unwrap();
        let mut built = gens.stream(7, RUN, 0, &ks);
        let mut lent = gens.stream(7, RUN, 0, &ks);
        let mut keys = KeyBuilder::new(spec.key_size);
        let mut expected = Vec::new();
        for keynum in 0..5_000u64 {
            keys.build(keynum % 1_000);
            let fp = keys.fingerprint();
            built.build_value_with(fp, &mut expected);
            let got = lent.with_value(fp, |v| v.to_vec());
            assert_eq!(got, expected, "{size:?}, value {keynum}");
            assert!(value_matches_key(keys.key(), &got));
        }
    }
}

#[test]
fn reads_only_choose_inserted_keys_and_latest_prefers_new_ones() {
    let records = 10_000;
    let spec = CoreWorkload::D.spec(records, 40_000);
    let seq = ops(&spec, 3, 0, 40_000);
    let mut inserted = records;
    let mut reads = 0u64;
    let mut reads_of_new = 0u64;
    for (op, _) in &seq {
        match *op {
            Operation::Insert { keynum } => {
                assert_eq!(keynum, inserted, "inserts take consecutive new key numbers");
                inserted += 1;
            }
            Operation::Read { keynum } => {
                assert!(keynum < inserted, "read of a key not yet inserted");
                reads += 1;
                if keynum >= records {
                    reads_of_new += 1;
                }
            }
            other => panic!("workload D issued {other:?}"),
        }
    }
    // About 2000 new keys (17% of the space) get far more than their share of the reads.
    let share = reads_of_new as f64 / reads as f64;
    assert!(share > 0.5, "reads of new keys: {share:.3}");

    let mut uniform = spec.clone();
    uniform.request_distribution = RequestDistribution::Uniform;
    let max = ops(&uniform, 3, 0, 20_000)
        .iter()
        .filter(|(op, _)| matches!(op, Operation::Read { .. }))
        .map(|(op, _)| op.keynum())
        .max()
        .unwrap();
    assert!(
        max < records,
        "uniform (as YCSB) reads only the loaded records"
    );
}

fn small_plan(store: &str, workloads: &[CoreWorkload], threads: &[usize]) -> BenchPlan {
    let mut plan = BenchPlan::new(store);
    plan.workloads = workloads.iter().map(|w| w.spec(2_000, 4_000)).collect();
    plan.threads = threads.to_vec();
    plan.max_time = None;
    plan
}

#[test]
fn plan_runs_every_configuration_and_records_it() {
    let plan = small_plan(
        "memory-btree",
        &[
            CoreWorkload::Load,
            CoreWorkload::A,
            CoreWorkload::E,
            CoreWorkload::F,
        ],
        &[1, 2],
    );
    let runs = run_plan(&plan, &SilentProgress).unwrap();
    assert_eq!(runs.len(), 8);
    for r in &runs {
        assert_eq!(r.store, "memory-btree");
        assert_eq!(r.medium, "DRAM (anonymous)");
        assert_eq!(r.durability, "none");
        assert_eq!(r.emulated, None);
        assert_eq!(r.verify_failures, 0, "{}", r.workload);
        assert!(r.throughput > 0.0);
        assert!(!r.timeline.is_empty());
        assert_eq!(r.throughput_samples.len(), 1);
        let total: u64 = r.operations.values().map(|s| s.count).sum();
        assert_eq!(total, r.measured_ops);
        if r.workload == "load" {
            assert_eq!(r.measured_ops, 2_000);
            assert!(r.load.is_none());
            assert_eq!(r.warmup_ops, 0);
        } else {
            assert_eq!(r.measured_ops, 4_000);
            assert_eq!(r.warmup_ops, 400);
            assert!(r.load.as_ref().is_some_and(|l| l.records == 2_000));
            // Reads and updates target loaded keys only: nothing is ever missing.
            for (kind, s) in &r.operations {
                if *kind != OpKind::Scan {
                    assert_eq!(s.not_found, 0, "{} {}", r.workload, kind.name());
                }
                let l = s.latency_ns;
                assert!(l.min <= l.p50 && l.p50 <= l.p90 && l.p90 <= l.p99);
                assert!(l.p99 <= l.p999 && l.p999 <= l.max);
            }
        }
    }
    let e = runs.iter().find(|r| r.workload == "e").unwrap();
    assert!(e.operations.contains_key(&OpKind::Scan));
}

#[test]
fn same_seed_same_operation_counts_end_to_end() {
    // Operation types are per-thread deterministic even with two threads and inserts.
    let plan = small_plan("memory-btree", &[CoreWorkload::B, CoreWorkload::E], &[1, 2]);
    let a = run_plan(&plan, &SilentProgress).unwrap();
    let b = run_plan(&plan, &SilentProgress).unwrap();
    let counts = |r: &tierbase_bench::results::RunResult| {
        r.operations
            .iter()
            .map(|(k, s)| (*k, s.count))
            .collect::<Vec<_>>()
    };
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(counts(x), counts(y), "{} t={}", x.workload, x.threads);
    }
}

#[test]
fn repetitions_report_the_median() {
    let mut plan = small_plan("memory", &[CoreWorkload::C], &[1]);
    plan.repetitions = 3;
    plan.warmup = Warmup::Ops(0);
    let runs = run_plan(&plan, &SilentProgress).unwrap();
    let r = &runs[0];
    assert_eq!(r.repetitions, 3);
    let mut s = r.throughput_samples.clone();
    s.sort_by(f64::total_cmp);
    assert_eq!(r.throughput, s[1]);
}

#[test]
fn emulation_is_recorded_and_slows_the_store() {
    let cat = tierbase::device::Catalogue::builtin();
    let hdd = cat.require("hdd").unwrap().clone();
    let mut plan = small_plan("memory", &[CoreWorkload::C], &[1]);
    plan.workloads = vec![CoreWorkload::C.spec(50, 50)];
    plan.emulate = Some(hdd.clone());
    let runs = run_plan(&plan, &SilentProgress).unwrap();
    let r = &runs[0];
    assert_eq!(r.emulated.as_deref(), Some(hdd.name.as_str()));
    assert!(r.store_label.contains("emulated hdd"), "{}", r.store_label);
    let read = r.operations[&OpKind::Read].latency_ns;
    assert!(
        read.p50 as f64 >= hdd.read_latency_ns * 0.9,
        "emulated read p50 {} ns vs profile {} ns",
        read.p50,
        hdd.read_latency_ns
    );
}

#[test]
fn bad_plans_are_one_clear_error() {
    let check = |plan: BenchPlan, want: &str| {
        let e = run_plan(&plan, &SilentProgress).unwrap_err().to_string();
        assert!(e.contains(want), "expected '{want}' in '{e}'");
        assert!(!e.contains('\n'), "one line: {e}");
    };
    let mut p = small_plan("memory", &[CoreWorkload::A], &[1]);
    p.threads = vec![0];
    check(p, "thread count must be at least 1");
    let mut p = small_plan("memory", &[CoreWorkload::A], &[1]);
    p.workloads[0].value_size = SizeSpec::Fixed(3);
    check(p, "value size 3 is too small");
    check(
        small_plan("nope", &[CoreWorkload::A], &[1]),
        "unknown store 'nope' (known: kv, kv-var, btree, btree-3tier, btree-nvm, btree-nvm-direct, plush, plush-range, memory",
    );
    check(
        small_plan("memory", &[CoreWorkload::E], &[1]),
        "does not support ordered scans, which workload 'e' needs",
    );
    let mut p = small_plan("memory", &[CoreWorkload::A], &[1]);
    p.repetitions = 0;
    check(p, "repetitions");
}

#[test]
fn scans_on_a_hash_store_are_the_typed_unsupported_error() {
    let plan = small_plan("memory", &[CoreWorkload::E], &[1]);
    let e = run_plan(&plan, &SilentProgress).unwrap_err();
    assert!(e.is_unsupported());
    assert!(matches!(e, BenchError::Unsupported { .. }));
    // It suggests only stores this build has: a default build has no RocksDB.
    let text = e.to_string();
    assert!(
        text.contains(
            "stores with scans in this build: btree, btree-3tier, plush-range, memory-btree"
        ),
        "{text}"
    );
    for name in tierbase_bench::adapter::built_stores_with_scans() {
        let entry = tierbase_bench::adapter::find_store(name).unwrap();
        assert!(entry.built, "{name}");
    }
    assert_eq!(
        text.contains("rocksdb"),
        tierbase_bench::adapter::find_store("rocksdb")
            .unwrap()
            .built,
        "{text}"
    );
}

/// A memory region refuses a block device's profile and a block device a memory one: the
/// two kinds read α and the slots differently, so the figures would label a device no one
/// emulated.
#[test]
fn a_profile_of_the_other_kind_is_refused() {
    let cat = tierbase::device::Catalogue::builtin();
    let mut p = small_plan("kv", &[CoreWorkload::C], &[1]);
    p.emulate = Some(cat.require("hdd").unwrap().clone());
    let e = run_plan(&p, &SilentProgress).unwrap_err().to_string();
    assert!(
        e.contains("a memory region cannot emulate hdd, a block device profile"),
        "{e}"
    );
    let mut p = small_plan("btree", &[CoreWorkload::C], &[1]);
    p.emulate = Some(cat.require("optane-pmem-100").unwrap().clone());
    let e = run_plan(&p, &SilentProgress).unwrap_err().to_string();
    assert!(
        e.contains("a block device cannot emulate optane-pmem-100, a memory device profile"),
        "{e}"
    );
    // The in-memory reference charges each operation to any profile.
    let mut p = small_plan("memory", &[CoreWorkload::C], &[1]);
    p.workloads = vec![CoreWorkload::C.spec(20, 20)];
    p.emulate = Some(cat.require("hdd").unwrap().clone());
    run_plan(&p, &SilentProgress).unwrap();
}

/// A store that fails (or panics) on the n-th read, to check that a phase stops cleanly.
struct Failing {
    inner: Box<dyn tierbase_bench::adapter::Store>,
    reads: std::sync::atomic::AtomicU64,
    fail_at: u64,
    panic: bool,
}

struct FailingClient<'a> {
    store: &'a Failing,
    inner: Box<dyn tierbase_bench::adapter::Client + 'a>,
}

impl tierbase_bench::adapter::Store for Failing {
    fn info(&self) -> tierbase_bench::adapter::StoreInfo {
        self.inner.info()
    }
    fn client(&self) -> tierbase_bench::Result<Box<dyn tierbase_bench::adapter::Client + '_>> {
        Ok(Box::new(FailingClient {
            store: self,
            inner: self.inner.client()?,
        }))
    }
    fn close(self: Box<Self>) -> tierbase_bench::Result<()> {
        self.inner.close()
    }
}

impl tierbase_bench::adapter::Client for FailingClient<'_> {
    fn put(&mut self, k: &[u8], v: &[u8]) -> tierbase_bench::Result<()> {
        self.inner.put(k, v)
    }
    fn get(&mut self, k: &[u8], out: &mut Vec<u8>) -> tierbase_bench::Result<bool> {
        let n = self
            .store
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n == self.store.fail_at {
            if self.store.panic {
                panic!("injected panic");
            }
            return Err(BenchError::Store {
                store: "failing".into(),
                operation: "get",
                detail: "injected failure".into(),
            });
        }
        self.inner.get(k, out)
    }
    fn update(&mut self, k: &[u8], v: &[u8]) -> tierbase_bench::Result<bool> {
        self.inner.update(k, v)
    }
    fn delete(&mut self, k: &[u8]) -> tierbase_bench::Result<bool> {
        self.inner.delete(k)
    }
    fn scan(
        &mut self,
        s: &[u8],
        c: usize,
        v: &mut dyn FnMut(&[u8], &[u8]),
    ) -> tierbase_bench::Result<usize> {
        self.inner.scan(s, c, v)
    }
}

#[test]
fn a_failing_or_panicking_store_stops_the_phase_with_its_error() {
    use tierbase_bench::adapter::{StoreOptions, open_store};
    use tierbase_bench::runner::{PhaseConfig, run_load, run_transactions};
    for (panic, fail_at) in [(false, 0), (false, 500), (true, 0), (true, 500)] {
        let store = Failing {
            inner: open_store("memory", &StoreOptions::new(".")).unwrap(),
            reads: Default::default(),
            fail_at,
            panic,
        };
        let spec = CoreWorkload::C.spec(1_000, 2_000);
        let ks = KeySpace::new(spec.record_count);
        let cfg = PhaseConfig {
            label: "test".into(),
            threads: 2,
            seed: 1,
            warmup_ops: 100,
            max_time: None,
            verify: true,
            read_batch: 1,
            latency_every: 1,
            prepared_reads: 1,
        };
        run_load(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let e = run_transactions(&store, &spec, &ks, &cfg, &SilentProgress).unwrap_err();
        if panic {
            assert!(
                matches!(&e, BenchError::WorkerPanicked(m) if m.contains("injected panic")),
                "{e}"
            );
        } else {
            assert!(e.to_string().contains("injected failure"), "{e}");
        }
    }
}

/// A store over `memory` that counts the puts of every key, logs every read and update in
/// the order it receives them (`true` for an update), corrupts the fingerprint of every
/// `corrupt_every`-th value it reads back (0 = none), and, if `miss_a_third`, answers
/// "missing" for keys whose last byte is a multiple of 3.
struct Recording {
    inner: Box<dyn tierbase_bench::adapter::Store>,
    puts: std::sync::Mutex<HashMap<Vec<u8>, u32>>,
    reads: std::sync::atomic::AtomicU64,
    corrupt_every: u64,
    log: std::sync::Mutex<Vec<(bool, Vec<u8>)>>,
    miss_a_third: bool,
}

impl Recording {
    fn new(corrupt_every: u64) -> Self {
        use tierbase_bench::adapter::{StoreOptions, open_store};
        Recording {
            inner: open_store("memory", &StoreOptions::new(".")).unwrap(),
            puts: Default::default(),
            reads: Default::default(),
            corrupt_every,
            log: Default::default(),
            miss_a_third: false,
        }
    }
}

struct RecordingClient<'a> {
    store: &'a Recording,
    inner: Box<dyn tierbase_bench::adapter::Client + 'a>,
}

impl tierbase_bench::adapter::Store for Recording {
    fn info(&self) -> tierbase_bench::adapter::StoreInfo {
        self.inner.info()
    }
    fn client(&self) -> tierbase_bench::Result<Box<dyn tierbase_bench::adapter::Client + '_>> {
        Ok(Box::new(RecordingClient {
            store: self,
            inner: self.inner.client()?,
        }))
    }
    fn close(self: Box<Self>) -> tierbase_bench::Result<()> {
        self.inner.close()
    }
}

impl tierbase_bench::adapter::Client for RecordingClient<'_> {
    fn put(&mut self, k: &[u8], v: &[u8]) -> tierbase_bench::Result<()> {
        *self
            .store
            .puts
            .lock()
            .unwrap()
            .entry(k.to_vec())
            .or_default() += 1;
        self.inner.put(k, v)
    }
    fn get(&mut self, k: &[u8], out: &mut Vec<u8>) -> tierbase_bench::Result<bool> {
        self.store.log.lock().unwrap().push((false, k.to_vec()));
        let found = self.inner.get(k, out)?;
        let n = self
            .store
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.store.corrupt_every > 0 && n.is_multiple_of(self.store.corrupt_every) {
            out[0] ^= 1;
        }
        if self.store.miss_a_third && k.last().is_some_and(|b| b % 3 == 0) {
            return Ok(false);
        }
        Ok(found)
    }
    fn update(&mut self, k: &[u8], v: &[u8]) -> tierbase_bench::Result<bool> {
        self.store.log.lock().unwrap().push((true, k.to_vec()));
        self.inner.update(k, v)
    }
    fn delete(&mut self, k: &[u8]) -> tierbase_bench::Result<bool> {
        self.inner.delete(k)
    }
    fn scan(
        &mut self,
        s: &[u8],
        c: usize,
        v: &mut dyn FnMut(&[u8], &[u8]),
    ) -> tierbase_bench::Result<usize> {
        self.inner.scan(s, c, v)
    }
}

fn phase_config(threads: usize) -> tierbase_bench::runner::PhaseConfig {
    tierbase_bench::runner::PhaseConfig {
        label: "test".into(),
        threads,
        seed: 1,
        warmup_ops: 50,
        max_time: None,
        verify: true,
        read_batch: 1,
        latency_every: 1,
        prepared_reads: 1,
    }
}

#[test]
fn threads_loading_in_batches_insert_every_key_exactly_once() {
    use tierbase_bench::runner::run_load;
    use tierbase_bench::workload::keys::build_key;
    for threads in [1, 2, 3] {
        for records in [1, 63, 64, 65, 1_000, 4_099] {
            let store = Recording::new(0);
            let mut spec = CoreWorkload::Load.spec(records, 0);
            spec.key_size = 16;
            let ks = KeySpace::new(records);
            let out =
                run_load(&store, &spec, &ks, &phase_config(threads), &SilentProgress).unwrap();
            assert_eq!(out.measurements.total_ops(), records);
            let puts = store.puts.into_inner().unwrap();
            assert_eq!(puts.len() as u64, records, "t={threads}, {records} records");
            let mut key = Vec::new();
            for k in 0..records {
                build_key(k, spec.key_size, &mut key);
                assert_eq!(puts.get(&key), Some(&1), "key number {k}, t={threads}");
            }
            assert!(ks.next_load_batch(64).is_empty());
        }
    }
}

#[test]
fn reads_of_values_with_a_wrong_fingerprint_are_counted() {
    use tierbase_bench::runner::{run_load, run_transactions};
    // (corrupt every, key size, read batch, time one operation in, reads prepared together):
    // the last two cases prepare reads (keys built ahead, one `get` each), and the check must
    // still see every value.
    let cases = [
        (0, 16, 1, 1, 1),
        (7, 16, 1, 1, 1),
        (7, 24, 1, 1, 1),
        (1, 30, 1, 1, 1),
        (7, 16, 5, 1, 1),
        (1, 24, 64, 1, 1),
        (7, 16, 1, 16, 16),
        (3, 24, 1, 5, 7),
    ];
    for (corrupt_every, key_size, read_batch, latency_every, prepared_reads) in cases {
        let store = Recording::new(corrupt_every);
        let mut spec = CoreWorkload::C.spec(500, 2_000);
        spec.key_size = key_size;
        let ks = KeySpace::new(spec.record_count);
        let cfg = tierbase_bench::runner::PhaseConfig {
            read_batch,
            latency_every,
            prepared_reads,
            ..phase_config(2)
        };
        let load = run_load(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        assert_eq!(load.verify_failures, 0);
        let run = run_transactions(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let reads: u64 = 2_000 + 50; // measured and warm-up reads are all checked
        let expected = if corrupt_every == 0 {
            0
        } else {
            reads.div_ceil(corrupt_every)
        };
        assert_eq!(
            run.verify_failures, expected,
            "corrupting every {corrupt_every}, reads in batches of {read_batch}, one in \
             {latency_every} timed, {prepared_reads} prepared together"
        );
    }
}

#[test]
fn batched_reads_keep_every_operation_and_its_answer() {
    use tierbase_bench::measure::OpKind;
    use tierbase_bench::runner::{run_load, run_transactions};
    // Workload A interleaves reads and updates: a batch ends at every update, and the last
    // one at the end of the stream. Every operation is measured once, and every read finds
    // its (loaded) key with its own fingerprint.
    // Workload C (reads only) leaves a part batch at the end of each thread's share.
    for (workload, read_batch) in [
        (CoreWorkload::A, 1),
        (CoreWorkload::A, 3),
        (CoreWorkload::A, 16),
        (CoreWorkload::C, 16),
    ] {
        let store = Recording::new(0);
        let spec = workload.spec(300, 1_001);
        let ks = KeySpace::new(spec.record_count);
        let cfg = tierbase_bench::runner::PhaseConfig {
            read_batch,
            ..phase_config(2)
        };
        run_load(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let run = run_transactions(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let stats = run.measurements.operation_stats(run.elapsed);
        let count = |k| stats.get(&k).map_or(0, |s| s.count);
        let not_found = stats.get(&OpKind::Read).map_or(0, |s| s.not_found);
        assert_eq!(
            run.measurements.total_ops(),
            1_001,
            "batches of {read_batch}"
        );
        assert_eq!(count(OpKind::Read) + count(OpKind::Update), 1_001);
        assert!(count(OpKind::Read) > 300, "batches of {read_batch}");
        assert_eq!(not_found, 0, "batches of {read_batch}");
        assert_eq!(run.verify_failures, 0);
        // Measured and warm-up reads all reached the store.
        let reads = store.reads.load(std::sync::atomic::Ordering::Relaxed);
        assert!(reads >= count(OpKind::Read), "batches of {read_batch}");
    }
}

/// Timing one operation in N counts every operation (throughput and misses are those of all
/// of them) and records a latency for each N-th of each thread's share, its first included,
/// whether or not reads are prepared together (shares of 501 and 500 leave a part group).
#[test]
fn timing_one_operation_in_n_counts_them_all_and_samples_latencies() {
    use tierbase_bench::runner::{run_load, run_transactions};
    for (workload, every, prepared_reads) in [
        (CoreWorkload::C, 1u64, 1usize),
        (CoreWorkload::C, 16, 1),
        (CoreWorkload::C, 16, 16),
        (CoreWorkload::C, 1, 7),
        (CoreWorkload::A, 7, 5),
    ] {
        let store = Recording::new(0);
        let spec = workload.spec(300, 1_001);
        let ks = KeySpace::new(spec.record_count);
        let cfg = tierbase_bench::runner::PhaseConfig {
            latency_every: every,
            prepared_reads,
            ..phase_config(2)
        };
        run_load(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let run = run_transactions(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let stats = run.measurements.operation_stats(run.elapsed);
        let ctx = format!("{workload:?}, one in {every}, {prepared_reads} prepared");
        assert_eq!(run.measurements.total_ops(), 1_001, "{ctx}");
        let counted: u64 = stats.values().map(|s| s.count).sum();
        let sampled: u64 = stats.values().map(|s| s.latency_ns.samples).sum();
        let not_found: u64 = stats.values().map(|s| s.not_found).sum();
        assert_eq!(counted, 1_001, "{ctx}");
        assert_eq!(not_found, 0, "{ctx}");
        // Shares of 501 and 500 operations: every `every`-th of each, from its first.
        assert_eq!(
            sampled,
            501u64.div_ceil(every) + 500u64.div_ceil(every),
            "{ctx}"
        );
        let timeline: u64 = run
            .measurements
            .timeline(run.elapsed)
            .iter()
            .map(|b| b.ops)
            .sum();
        assert_eq!(timeline, 1_001, "{ctx}");
        assert_eq!(run.verify_failures, 0, "{ctx}");
    }
}

/// Prepared reads and sampled timing change neither what the store is asked, nor in which
/// order (an update first ends the reads gathered before it), nor what is counted: the same
/// seed gives the same sequence of calls and the same misses as every operation timed alone.
#[test]
fn prepared_reads_keep_the_order_of_operations_and_count_misses() {
    use tierbase_bench::measure::OpKind;
    use tierbase_bench::runner::{run_load, run_transactions};
    let run = |latency_every: u64, prepared_reads: usize| {
        let store = Recording {
            miss_a_third: true,
            ..Recording::new(0)
        };
        let spec = CoreWorkload::A.spec(300, 2_000);
        let ks = KeySpace::new(spec.record_count);
        let cfg = tierbase_bench::runner::PhaseConfig {
            warmup_ops: 0,
            latency_every,
            prepared_reads,
            ..phase_config(1)
        };
        run_load(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let out = run_transactions(&store, &spec, &ks, &cfg, &SilentProgress).unwrap();
        let stats = out.measurements.operation_stats(out.elapsed);
        let misses = stats.get(&OpKind::Read).map_or(0, |s| s.not_found);
        let log = store.log.into_inner().unwrap();
        (log, misses, out.measurements.total_ops())
    };
    let (plain, plain_misses, plain_ops) = run(1, 1);
    assert_eq!(plain_ops, 2_000);
    assert!(
        plain_misses > 100,
        "{plain_misses} misses: the store's misses are counted"
    );
    assert!(plain.iter().filter(|(update, _)| *update).count() > 500);
    for (latency_every, prepared_reads) in [(1, 8), (3, 8), (64, 16), (5, 1)] {
        let (log, misses, ops) = run(latency_every, prepared_reads);
        let ctx = format!("one in {latency_every} timed, {prepared_reads} prepared");
        assert_eq!(ops, 2_000, "{ctx}");
        assert_eq!(misses, plain_misses, "{ctx}");
        assert!(
            log == plain,
            "{ctx}: the store saw other calls, or in another order"
        );
    }
}

/// `--emulate` on a store without a block device is refused, not recorded: its label would
/// have said "emulated hdd" over numbers no emulated device touched.
#[test]
fn emulating_a_block_device_the_store_does_not_use_is_refused() {
    let cat = tierbase::device::Catalogue::builtin();
    let mut plan = small_plan("btree-nvm-direct", &[CoreWorkload::C], &[1]);
    plan.workloads = vec![CoreWorkload::C.spec(50, 50)];
    plan.emulate = Some(cat.require("hdd").unwrap().clone());
    let e = run_plan(&plan, &SilentProgress).unwrap_err().to_string();
    assert!(e.contains("--nvm-emulate"), "{e}");
}
