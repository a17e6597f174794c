//! Crash consistency of the Plush store (`tierbase::hash`): a simulated power loss at every
//! persist point (or a sample of them, plus every point around the rare events) and injected
//! I/O errors at every persist point, driven by the shared harness
//! (`tierbase::testing::crash::{PowerLoss, FaultInjection}`).
//!
//! Scripts (each on a small geometry, so that the rare paths come quickly):
//! - `levels`: inserts, overwrites, deletes, blind upserts and removes and `modify` on keys
//!   chosen to share one DRAM entry *and* one level-1 entry, so that halves switch and migrate
//!   to PMem level 0, level 0 cascades into level 1, and level 1 into level 2; a checkpoint.
//! - `log compaction`: 4 KiB recovery-log chunks, 9 per log: a few "cold" records in one DRAM
//!   entry keep the oldest chunk live while a hot entry of the same log fills the log, so the
//!   log compacts by copying to its spare (`log_compactions`) and by reusing all-dead chunks
//!   (`log_compactions_skipped`).
//! - `payload collection` (variable layout): 4 KiB payload chunks, 4 of them, heavy
//!   overwrites and deletes of a few keys, so payload chunks are collected again and again
//!   (`payload_collections`).
//! - `concurrent migration`: two writer threads and a background migrator (`migrators(1)`) on
//!   keys of one DRAM entry; the crash cuts migrations the migrator runs concurrently (recovery
//!   then finds frozen halves, `RecoveryReport::frozen_halves`).
//!
//! After each power loss the image is reopened (`PlushStore::open_in` on the rebooted region)
//! and compared with the model: every acknowledged write is there with its last acknowledged
//! value, the write in flight fully or not at all (concurrent runs: the `ExpectedState`
//! tracker), no other key; `scan` agrees with `get` and `len`; `verify()` reports no problem;
//! and the store takes more writes (enough to switch halves, migrate and, in the payload
//! script, collect again), which are read back and verified.
//!
//! Under fault injection the failing call returns the I/O error, every later write
//! `Error::ReadOnly` naming it (checked by the harness), reads go on returning acknowledged
//! values, and the durable image and the working bytes both reopen with every acknowledged
//! write.
//!
//! The harness takes the image of the store's region (`PlushStore::region`).
//!
//! Replay one point with `TIERBASE_CRASH_POINT=n` (the concurrent test's interleaving will
//! differ).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::OnceLock;

use tierbase::Error;
use tierbase::device::{PmemRegion, RegionOptions};
use tierbase::hash::layout::{HALF_SLOTS, hash_bytes, hash_word};
use tierbase::hash::{
    Partition, PlushLayout, PlushOptions, PlushStore, RecoveryReport, VerifyReport,
};
use tierbase::store::Change;
use tierbase::testing::crash::{
    Crashed, ExpectedState, FaultInjection, FaultLog, Faulted, Media, PowerLoss, REPLAY_ENV,
    Schedule, ScriptEnd, Write, tracked_writers,
};

// ----- keys, values, steps and the model -----------------------------------------------------

fn key_of(layout: PlushLayout, id: u64) -> Vec<u8> {
    match layout {
        PlushLayout::Fixed8 => id.to_le_bytes().to_vec(),
        PlushLayout::Variable => {
            let mut k = format!("key-{id}").into_bytes();
            k.resize(k.len() + (id % 5) as usize * 3, b'.');
            k
        }
    }
}

fn hash_of(layout: PlushLayout, key: &[u8]) -> u64 {
    match layout {
        PlushLayout::Fixed8 => hash_word(u64::from_le_bytes(key.try_into().expect("8 bytes"))),
        PlushLayout::Variable => hash_bytes(key),
    }
}

/// `count` keys (ids from `from` on) whose hash satisfies `pred`.
fn keys_where(
    layout: PlushLayout,
    count: usize,
    from: u64,
    pred: impl Fn(u64) -> bool,
) -> Vec<Vec<u8>> {
    (from..)
        .map(|id| key_of(layout, id))
        .filter(|k| pred(hash_of(layout, k)))
        .take(count)
        .collect()
}

/// A value unique to `tag`: 8 bytes in the fixed layout (never the tombstone: tags are small),
/// 1 to 150 bytes in the variable one, now and then up to 1.2 KB.
fn value_of(layout: PlushLayout, tag: u64) -> Vec<u8> {
    match layout {
        PlushLayout::Fixed8 => (tag | (1 << 40)).to_le_bytes().to_vec(),
        PlushLayout::Variable => {
            let len = if tag.is_multiple_of(23) {
                600 + (tag * 7 % 600) as usize
            } else {
                1 + (tag * 37 % 150) as usize
            };
            (0..len)
                .map(|i| {
                    (tag.wrapping_mul(0x9e37_79b9).rotate_left(i as u32 % 61) ^ i as u64) as u8
                })
                .collect()
        }
    }
}

#[derive(Clone, Debug)]
enum Step {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Upsert(Vec<u8>, Vec<u8>),
    Remove(Vec<u8>),
    /// `modify`: if the key is present, store the value (`None`: delete it); else keep.
    Modify(Vec<u8>, Option<Vec<u8>>),
    Checkpoint,
}

impl Step {
    fn key(&self) -> Option<&[u8]> {
        match self {
            Step::Put(k, _)
            | Step::Delete(k)
            | Step::Upsert(k, _)
            | Step::Remove(k)
            | Step::Modify(k, _) => Some(k),
            Step::Checkpoint => None,
        }
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(model: &mut Model, step: &Step) {
    match step {
        Step::Put(k, v) | Step::Upsert(k, v) => {
            model.insert(k.clone(), v.clone());
        }
        Step::Delete(k) | Step::Remove(k) => {
            model.remove(k);
        }
        Step::Modify(k, change) => {
            if model.contains_key(k) {
                match change {
                    Some(v) => {
                        model.insert(k.clone(), v.clone());
                    }
                    None => {
                        model.remove(k);
                    }
                }
            }
        }
        Step::Checkpoint => {}
    }
}

/// Runs `step`, asserting its return value against `model` (the state before it).
fn run_step(store: &PlushStore, step: &Step, model: &Model) -> tierbase::Result<()> {
    match step {
        Step::Put(k, v) => {
            let new = store.put(k, v)?;
            assert_eq!(new, !model.contains_key(k), "put's was-new for {k:?}");
        }
        Step::Delete(k) => {
            let existed = store.delete(k)?;
            assert_eq!(existed, model.contains_key(k), "delete's existed for {k:?}");
        }
        Step::Upsert(k, v) => store.upsert(k, v)?,
        Step::Remove(k) => store.remove(k)?,
        Step::Modify(k, change) => {
            let mut calls = 0;
            let mut seen = None;
            store.modify(k, &mut |cur| {
                calls += 1;
                seen = cur.map(<[u8]>::to_vec);
                match (cur, change) {
                    (None, _) => Change::Keep,
                    (Some(_), Some(v)) => Change::Put(v.clone()),
                    (Some(_), None) => Change::Delete,
                }
            })?;
            assert_eq!(calls, 1, "modify calls its closure once");
            assert_eq!(
                seen.as_ref(),
                model.get(k),
                "modify saw the wrong value of {k:?}"
            );
        }
        Step::Checkpoint => store.checkpoint()?,
    }
    Ok(())
}

/// `verify`'s problems, the first few (a broken store can have thousands).
fn problems(v: &VerifyReport) -> String {
    let shown: Vec<&String> = v.problems.iter().take(6).collect();
    format!("{} problems, the first: {shown:?}", v.problems.len())
}

// ----- scripts -------------------------------------------------------------------------------

const RESERVE: u64 = 256 << 20;

fn region_opts() -> RegionOptions {
    RegionOptions {
        reserve: RESERVE,
        ..RegionOptions::default()
    }
}

/// A small geometry with 16 DRAM entries, inserters migrating (every persist point is the
/// script's own), two recovery threads.
fn base_opts(layout: PlushLayout) -> PlushOptions {
    let mut o = PlushOptions::small()
        .layout(layout)
        .dram_bits(4)
        .migrators(0)
        .region(region_opts());
    o.recovery_threads = 2;
    o
}

/// A script: its options, its steps, the keys the check's extra writes go to, how many, and
/// what the reference run must have done (counter name, at least).
struct Script {
    name: &'static str,
    opts: PlushOptions,
    steps: Vec<Step>,
    hot: Vec<Vec<u8>>,
    post_writes: usize,
    expect: Vec<(&'static str, u64)>,
    /// PMem levels the reference run must have created.
    levels: u32,
}

/// Keys sharing DRAM entry 5 and level-1 entry 0x35: every half of that entry migrates into
/// the same level-0 entry, and every cascade of it into the same level-1 entry.
fn levels_script(layout: PlushLayout) -> Script {
    static HOT: OnceLock<[Vec<Vec<u8>>; 2]> = OnceLock::new();
    let hot_all = HOT.get_or_init(|| {
        [PlushLayout::Fixed8, PlushLayout::Variable]
            .map(|l| keys_where(l, 720, 1 << 20, |h| h & 0xff == 0x35))
    });
    let hot = hot_all[usize::from(layout == PlushLayout::Variable)].clone();
    let mut s = Vec::new();
    let mut tag = 0u64;
    let mut v = |layout| {
        tag += 1;
        value_of(layout, tag)
    };
    for i in 0..24 {
        s.push(Step::Put(key_of(layout, i), v(layout)));
    }
    for j in 0..hot.len() {
        s.push(Step::Put(hot[j].clone(), v(layout)));
        if j % 6 == 5 {
            s.push(Step::Put(hot[j - 3].clone(), v(layout)));
        }
        if j % 9 == 8 {
            s.push(Step::Delete(hot[j - 5].clone()));
        }
        if j % 50 == 25 {
            s.push(Step::Upsert(hot[j - 11].clone(), v(layout)));
            s.push(Step::Remove(hot[j - 20].clone()));
            s.push(Step::Modify(hot[j - 7].clone(), Some(v(layout))));
            s.push(Step::Modify(hot[j - 8].clone(), None));
            s.push(Step::Modify(hot[j - 20].clone(), Some(v(layout)))); // removed: keeps
        }
        if j % 97 == 96 {
            s.push(Step::Delete(key_of(layout, (j % 24) as u64)));
        }
    }
    s.push(Step::Checkpoint);
    for i in 24..32 {
        s.push(Step::Put(key_of(layout, i), v(layout)));
    }
    s.push(Step::Put(hot[3].clone(), v(layout)));
    Script {
        name: "levels",
        opts: base_opts(layout),
        steps: s,
        hot,
        post_writes: HALF_SLOTS + 40,
        expect: vec![("half_migrations", 6), ("migrations", 2)],
        levels: 3,
    }
}

/// One recovery log serving DRAM entries 0 and 8 (8 logs over 16 entries), of nine 4 KiB
/// chunks (126 entries each): three records of entry 8 stay unmigrated in the oldest chunk
/// while entry 0 fills the log.
fn log_compaction_script(layout: PlushLayout) -> Script {
    let mut opts = base_opts(layout);
    opts.logs = 8;
    opts.log_chunk_bytes = Some(4096);
    opts.log_chunks = Some(9);
    let cold = keys_where(layout, 3, 1 << 21, |h| h & 0xf == 8);
    let hot = keys_where(layout, 150, 1 << 22, |h| h & 0xf == 0);
    let mut s = Vec::new();
    for (i, k) in cold.iter().enumerate() {
        s.push(Step::Put(k.clone(), value_of(layout, 90_000 + i as u64)));
    }
    for j in 0..1450u64 {
        let k = hot[(j * 7 % 150) as usize].clone();
        if j % 13 == 12 {
            s.push(Step::Delete(k));
        } else {
            s.push(Step::Put(k, value_of(layout, j + 1)));
        }
    }
    s.push(Step::Put(cold[1].clone(), value_of(layout, 95_000)));
    Script {
        name: "log compaction",
        opts,
        steps: s,
        hot,
        post_writes: 300,
        expect: vec![("log_compactions", 1), ("log_compactions_skipped", 2)],
        levels: 2,
    }
}

/// One payload log of 4 KiB chunks, 4 chunks in all (two before it collects): overwrites and
/// deletes of a few keys fill chunks with dead entries the collector reclaims.
fn payload_script() -> Script {
    let layout = PlushLayout::Variable;
    let mut opts = base_opts(layout);
    opts.payload_logs = 1;
    opts.payload_chunk_bytes = 4096;
    opts.payload_chunks = 4;
    let hot: Vec<Vec<u8>> = (0..8).map(|i| key_of(layout, 500 + i)).collect();
    // Cold keys, written once (or twice): their entries stay live in chunks full of dead
    // ones, so collections have to move them.
    let cold: Vec<Vec<u8>> = (0..6).map(|i| key_of(layout, 600 + i)).collect();
    let mut s = Vec::new();
    for (i, k) in cold.iter().enumerate() {
        s.push(Step::Put(k.clone(), value_of(layout, 70_000 + i as u64)));
    }
    for j in 0..520u64 {
        match j {
            100 => s.push(Step::Delete(cold[4].clone())),
            300 => s.push(Step::Put(cold[2].clone(), value_of(layout, 71_000))),
            _ => {}
        }
        let k = hot[(j * 5 % 8) as usize].clone();
        match j % 17 {
            7 => s.push(Step::Delete(k)),
            // (No `modify` here: in the variable layout it cannot collect payload chunks and
            // fails with StoreFull once they are used up; see plush_model's
            // `modify_reclaims_payload_space_like_put`.)
            11 => s.push(Step::Upsert(k, value_of(layout, j * 3 + 1))),
            _ => s.push(Step::Put(k, value_of(layout, j * 3 + 2))),
        }
        if j == 260 {
            s.push(Step::Checkpoint);
        }
    }
    Script {
        name: "payload collection",
        opts,
        steps: s,
        hot,
        post_writes: 200,
        expect: vec![("payload_collections", 5), ("payload_entries_moved", 5)],
        levels: 1,
    }
}

// ----- running a script ----------------------------------------------------------------------

/// What a run acknowledged.
#[derive(Debug, Default)]
struct Acked {
    model: Model,
    in_flight: Option<Step>,
    /// Power was lost (or a flush failed) while the store was being created.
    during_create: bool,
    /// The store's counters at the end of the script.
    counters: BTreeMap<String, u64>,
    levels: u32,
    /// Persist points before and after each step that did something rare (compaction,
    /// collection, a cascade), for the targeted pass.
    windows: Vec<(u64, u64)>,
}

fn counters(store: &PlushStore) -> BTreeMap<String, u64> {
    store.stats().counters.into_iter().collect()
}

/// Counters whose change marks a step worth crashing in at every point.
const RARE: &[&str] = &[
    "log_compactions",
    "log_compactions_skipped",
    "payload_collections",
    "migrations",
];

/// Runs `script` on `region` until the power loss; returns what was acknowledged, and the
/// store (whose region holds the image).
fn run_script(script: &Script, region: PmemRegion) -> (Acked, PlushStore) {
    let store = PlushStore::create_in(region, &script.opts)
        .unwrap_or_else(|e| panic!("{}: create: {e}", script.name));
    let mut acked = Acked::default();
    let r = store.region();
    if r.crashed() {
        acked.during_create = true;
        return (acked, store);
    }
    let mut before = counters(&store);
    for step in &script.steps {
        let p0 = r.persist_points();
        run_step(&store, step, &acked.model)
            .unwrap_or_else(|e| panic!("{}: {step:?}: {e}", script.name));
        if r.crashed() {
            acked.in_flight = Some(step.clone());
            break;
        }
        apply(&mut acked.model, step);
        let after = counters(&store);
        if RARE.iter().any(|c| after.get(*c) != before.get(*c)) {
            acked.windows.push((p0, r.persist_points()));
        }
        before = after;
    }
    acked.counters = counters(&store);
    acked.levels = store.stats().levels;
    (acked, store)
}

/// Reopens a crashed or faulted image and checks it against the model; then more writes.
fn check_recovered(
    ctx: &str,
    script: &Script,
    region: PmemRegion,
    model: &Model,
    in_flight: Option<&Step>,
) -> RecoveryReport {
    let store =
        PlushStore::open_in(region, &script.opts).unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
    let report = store.recovery_report().clone();
    let mut after = model.clone();
    if let Some(step) = in_flight {
        apply(&mut after, step);
    }
    let touched = in_flight.and_then(Step::key);
    let keys: BTreeSet<&Vec<u8>> = model.keys().chain(after.keys()).collect();
    let mut expect = model.clone();
    for k in &keys {
        let got = store
            .get(k)
            .unwrap_or_else(|e| panic!("{ctx}: get {k:?}: {e}"));
        if touched == Some(k.as_slice()) {
            assert!(
                got.as_ref() == model.get(*k) || got.as_ref() == after.get(*k),
                "{ctx}: key {k:?} in flight ({in_flight:?}) is neither before nor after: {got:?}"
            );
            match got {
                Some(v) => expect.insert((*k).clone(), v),
                None => expect.remove(*k),
            };
        } else {
            assert_eq!(
                got.as_ref(),
                model.get(*k),
                "{ctx}: acknowledged key {k:?} (in flight: {in_flight:?})"
            );
        }
    }
    // Nothing else, and scan, get and len agree.
    let mut scanned = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = store
            .scan(cursor, 64, &mut scanned)
            .unwrap_or_else(|e| panic!("{ctx}: scan: {e}"));
        if cursor == 0 {
            break;
        }
    }
    let n = scanned.len();
    let scanned: BTreeSet<Vec<u8>> = scanned.into_iter().collect();
    assert_eq!(n, scanned.len(), "{ctx}: scan returned a key twice");
    let want: BTreeSet<Vec<u8>> = expect.keys().cloned().collect();
    assert_eq!(scanned, want, "{ctx}: scan vs the model");
    assert_eq!(store.len().unwrap(), want.len() as u64, "{ctx}: len");
    let v = store
        .verify()
        .unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
    assert!(v.problems.is_empty(), "{ctx}: verify: {}", problems(&v));
    assert_eq!(v.live_keys, want.len() as u64, "{ctx}: verify's live keys");
    if script.opts.partition == Partition::Range {
        // Ordered scans see the same records, in key order, in steps of 7.
        let (mut all, mut from) = (Vec::new(), Vec::new());
        loop {
            let next = store
                .range(&from, None, 7, &mut all)
                .unwrap_or_else(|e| panic!("{ctx}: range: {e}"));
            match next {
                Some(k) => from = k,
                None => break,
            }
        }
        let want: Vec<(Vec<u8>, Vec<u8>)> = expect.clone().into_iter().collect();
        assert_eq!(all, want, "{ctx}: ordered scan vs the model");
    }
    // The recovered store works on: enough writes to switch halves and migrate (and collect
    // payload chunks), a new key, a delete; all read back.
    let layout = script.opts.layout;
    let fresh = key_of(layout, 999_999);
    assert!(store.put(&fresh, &value_of(layout, 7)).unwrap(), "{ctx}");
    expect.insert(fresh.clone(), value_of(layout, 7));
    for i in 0..script.post_writes {
        let k = &script.hot[i % script.hot.len()];
        let val = value_of(layout, 200_000 + i as u64);
        let was_new = store
            .put(k, &val)
            .unwrap_or_else(|e| panic!("{ctx}: put {i} after recovery: {e}"));
        assert_eq!(
            was_new,
            !expect.contains_key(k),
            "{ctx}: was-new after recovery"
        );
        expect.insert(k.clone(), val);
    }
    let gone = script.hot[0].clone();
    assert!(store.delete(&gone).unwrap(), "{ctx}: delete after recovery");
    expect.remove(&gone);
    for (k, val) in &expect {
        assert_eq!(
            store.get(k).unwrap().as_ref(),
            Some(val),
            "{ctx}: after recovery and more writes, key {k:?}"
        );
    }
    assert_eq!(store.get(&gone).unwrap(), None, "{ctx}");
    assert_eq!(
        store.len().unwrap(),
        expect.len() as u64,
        "{ctx}: len after more writes"
    );
    let v = store.verify().unwrap();
    assert!(
        v.problems.is_empty(),
        "{ctx}: verify after more writes: {}",
        problems(&v)
    );
    report
}

fn check_crashed(script: &Script, crashed: &Crashed<Acked>) -> RecoveryReport {
    let ctx = format!("{}: {}", script.name, crashed.point);
    let region = crashed.reboot(&script.opts.region).unwrap();
    if crashed.acked.during_create {
        // Cut short in creation: no store, or an empty one.
        if let Ok(s) = PlushStore::open_in(region, &script.opts) {
            assert_eq!(
                s.len().unwrap(),
                0,
                "{ctx}: a store cut short in creation holds data"
            );
        }
        return RecoveryReport::default();
    }
    check_recovered(
        &ctx,
        script,
        region,
        &crashed.acked.model,
        crashed.acked.in_flight.as_ref(),
    )
}

/// Power loss at a sample of the script's persist points (every point if it has at most
/// `sample`), then at every point of the steps that compacted a log, collected payload or
/// cascaded (found by the reference run). Unflushed words survive with p = 0 or 0.5 in turn.
fn power_loss(script: &Script, sample: usize, seed: u64) {
    let reference: Mutex<Option<Acked>> = Mutex::new(None);
    let mut replayed = 0u64;
    let survival = [0.0, 0.5];
    let harness = PowerLoss::new(region_opts())
        .survival(&survival)
        .seed(seed)
        .sample(sample);
    let report = harness.run(
        |region, _| {
            let (acked, store) = run_script(script, region);
            ScriptEnd::new(acked, store.region())
        },
        |crashed| {
            replayed += check_crashed(script, &crashed).replayed;
            if crashed.point.after_fences.is_none() {
                *reference.lock().unwrap() = Some(crashed.acked);
            }
        },
    );
    if std::env::var(REPLAY_ENV).is_ok() {
        return;
    }
    let reference = reference.into_inner().unwrap().expect("the reference run");
    // The script reached what it is for.
    for (counter, least) in &script.expect {
        let got = reference.counters.get(*counter).copied().unwrap_or(0);
        assert!(
            got >= *least,
            "{}: the reference run's {counter} is {got}, expected at least {least}: {:?}",
            script.name,
            reference.counters
        );
    }
    assert!(
        reference.levels >= script.levels,
        "{}: {} PMem levels, expected {}",
        script.name,
        reference.levels,
        script.levels
    );
    // Every point of the rare steps.
    let mut points: BTreeSet<u64> = BTreeSet::new();
    for &(a, b) in &reference.windows {
        points.extend(a..=b);
    }
    for &n in &points {
        let point = harness.point(Some(n));
        let region = PmemRegion::simulated(0, point.config(), &region_opts()).unwrap();
        let (acked, store) = run_script(script, region);
        let r = store.region();
        let (during_script, persist_points) = (r.crashed(), r.persist_points());
        let image = r.power_loss().unwrap();
        drop(store);
        let crashed = Crashed {
            point: point.clone(),
            acked,
            image,
            during_script,
            persist_points,
        };
        replayed += check_crashed(script, &crashed).replayed;
    }
    assert!(report.total_points > 200, "{}: {report:?}", script.name);
    assert!(replayed > 0, "{}: no run replayed a log entry", script.name);
    eprintln!(
        "{}: {} persist points, {} runs sampled, {} more around {} rare steps, {replayed} \
         records replayed in all",
        script.name,
        report.total_points,
        report.runs,
        points.len(),
        reference.windows.len()
    );
}

#[test]
fn fixed_layout_levels_survive_power_loss() {
    power_loss(&levels_script(PlushLayout::Fixed8), 400, 0x11);
}

#[test]
fn variable_layout_levels_survive_power_loss() {
    power_loss(&levels_script(PlushLayout::Variable), 400, 0x12);
}

/// Partitioned by range, the variable layout's keys (`key-…`) all share their first bytes, so
/// every key lands in one DRAM entry: the deepest cascade, and the ordered scans of the check.
#[test]
fn range_partitioned_levels_survive_power_loss() {
    let mut script = levels_script(PlushLayout::Variable);
    script.name = "levels by range";
    script.opts = script.opts.partition(Partition::Range);
    power_loss(&script, 300, 0x16);
}

#[test]
fn log_compaction_survives_power_loss() {
    power_loss(&log_compaction_script(PlushLayout::Fixed8), 300, 0x13);
    power_loss(&log_compaction_script(PlushLayout::Variable), 200, 0x14);
}

#[test]
fn payload_collection_survives_power_loss() {
    power_loss(&payload_script(), 400, 0x15);
}

// ----- a background migrator and two writers -------------------------------------------------

type State = ExpectedState<Vec<u8>, Vec<u8>>;

const CONCURRENT_OPS: u64 = 400;

fn concurrent_opts(layout: PlushLayout) -> PlushOptions {
    base_opts(layout).migrators(1)
}

#[derive(Debug, Default)]
struct ConcurrentAcked {
    state: State,
    during_create: bool,
    half_migrations: u64,
}

/// One writer: puts, blind upserts, deletes, removes and update-if-present `modify`s on keys
/// of one DRAM entry; stops at the first call that returns after the power loss.
fn concurrent_worker(
    layout: PlushLayout,
    store: &PlushStore,
    keys: &[Vec<u8>],
    tracker: &Mutex<State>,
    t: u64,
    seed: u64,
) {
    let region = store.region();
    let mut rng = seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next = || {
        rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        hash_word(rng)
    };
    for op in 0..CONCURRENT_OPS {
        if region.crashed() {
            return;
        }
        let k = keys[(next() % keys.len() as u64) as usize].clone();
        let v = value_of(layout, ((t + 1) << 32) | op);
        let roll = next() % 100;
        let write = match roll {
            0..55 => Write::Put(v.clone()),
            55..75 => Write::Update(v.clone()),
            _ => Write::Delete,
        };
        tracker
            .lock()
            .unwrap()
            .begin(t, k.clone(), write.clone())
            .unwrap();
        let applied = match (&write, roll % 2) {
            (Write::Put(v), 0) => store.put(&k, v).map(|_| true),
            (Write::Put(v), _) => store.upsert(&k, v).map(|()| true),
            (Write::Update(v), _) => {
                let mut existed = false;
                store
                    .modify(&k, &mut |cur| {
                        existed = cur.is_some();
                        match cur {
                            Some(_) => Change::Put(v.clone()),
                            None => Change::Keep,
                        }
                    })
                    .map(|()| existed)
            }
            (Write::Delete, 0) => store.delete(&k).map(|_| true),
            (Write::Delete, _) => store.remove(&k).map(|()| true),
        }
        .unwrap_or_else(|e| panic!("thread {t} op {op}: {e}"));
        if region.crashed() {
            return; // returned after the power loss: stays in flight
        }
        tracker.lock().unwrap().ack(t, applied).unwrap();
    }
}

fn concurrent_script(
    layout: PlushLayout,
    region: PmemRegion,
    keys: &[Vec<u8>],
    seed: u64,
) -> ScriptEnd<ConcurrentAcked> {
    let store = PlushStore::create_in(region, &concurrent_opts(layout)).unwrap();
    let mut acked = ConcurrentAcked::default();
    if store.region().crashed() {
        acked.during_create = true;
        return ScriptEnd::new(acked, store.region());
    }
    acked.state = tracked_writers(2, |t, tracker| {
        concurrent_worker(layout, &store, keys, tracker, t, seed);
    });
    acked.half_migrations = counters(&store)["half_migrations"];
    ScriptEnd::new(acked, store.region())
}

/// Every key's state after the crash, read by a scan (and each by `get`).
fn dump(ctx: &str, store: &PlushStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut keys = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = store.scan(cursor, 64, &mut keys).unwrap();
        if cursor == 0 {
            break;
        }
    }
    let mut out = BTreeMap::new();
    for k in keys {
        let v = store
            .get(&k)
            .unwrap()
            .unwrap_or_else(|| panic!("{ctx}: scanned key {k:?} reads as absent"));
        assert!(
            out.insert(k.clone(), v).is_none(),
            "{ctx}: {k:?} scanned twice"
        );
    }
    assert_eq!(store.len().unwrap(), out.len() as u64, "{ctx}: len vs scan");
    out
}

fn crash_during_concurrent_migration(layout: PlushLayout, seed: u64) {
    // Keys of DRAM entry 3: 260 writes per thread switch its halves about four times a run.
    let keys = keys_where(layout, 40, 1 << 23, |h| h & 0xf == 3);
    let mut crashed_runs = 0;
    let mut frozen = 0;
    let mut migrated = 0;
    let report = PowerLoss::new(region_opts())
        .first_point(1)
        .seed(seed)
        .sample(400)
        .run(
            |region, _| concurrent_script(layout, region, &keys, seed),
            |crashed| {
                let ctx = format!("{layout} concurrent: {}", crashed.point);
                let o = concurrent_opts(layout).migrators(0);
                let region = crashed.reboot(&o.region).unwrap();
                if crashed.acked.during_create {
                    if let Ok(s) = PlushStore::open_in(region, &o) {
                        assert_eq!(s.len().unwrap(), 0, "{ctx}");
                    }
                    return;
                }
                let store = PlushStore::open_in(region, &o)
                    .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
                frozen += store.recovery_report().frozen_halves;
                let actual = dump(&ctx, &store);
                crashed
                    .acked
                    .state
                    .check(&actual)
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                let v = store.verify().unwrap();
                assert!(v.problems.is_empty(), "{ctx}: verify: {}", problems(&v));
                // More writes: a half's worth to one key set, then read back.
                let mut now = actual;
                for i in 0..HALF_SLOTS as u64 + 10 {
                    let k = &keys[(i % keys.len() as u64) as usize];
                    let val = value_of(layout, (1 << 50) | i);
                    store
                        .put(k, &val)
                        .unwrap_or_else(|e| panic!("{ctx}: put: {e}"));
                    now.insert(k.clone(), val);
                }
                assert_eq!(dump(&ctx, &store), now, "{ctx}: after more writes");
                if crashed.during_script {
                    crashed_runs += 1;
                }
                migrated += crashed.acked.half_migrations;
            },
        );
    eprintln!(
        "{layout} concurrent: {} runs, reference {} persist points, {crashed_runs} crashed \
         mid-script, {frozen} frozen halves found by recovery, {migrated} half migrations",
        report.runs, report.total_points
    );
    if std::env::var(REPLAY_ENV).is_ok() {
        return;
    }
    assert!(report.total_points > 300, "{report:?}");
    assert!(crashed_runs > report.runs / 2, "{report:?}");
    assert!(migrated > report.runs as u64, "the migrator hardly ran");
    // A frozen half at recovery: the power loss came while a full half waited for, or was in,
    // its migration by the background migrator.
    assert!(frozen > 0, "no crash cut a concurrent migration");
}

#[test]
fn fixed_layout_crash_during_concurrent_migration() {
    crash_during_concurrent_migration(PlushLayout::Fixed8, 0x5eed_0021);
}

#[test]
fn variable_layout_crash_during_concurrent_migration() {
    crash_during_concurrent_migration(PlushLayout::Variable, 0x5eed_0022);
}

// ----- injected I/O errors -------------------------------------------------------------------

/// Writes tried after the failure (each must be refused with `Error::ReadOnly`).
fn probes(script: &Script) -> Vec<Step> {
    let layout = script.opts.layout;
    let k = script.hot[1].clone();
    vec![
        Step::Put(key_of(layout, 777_777), value_of(layout, 1)),
        Step::Delete(k.clone()),
        Step::Upsert(k.clone(), value_of(layout, 2)),
        Step::Remove(k.clone()),
        Step::Modify(k, Some(value_of(layout, 3))),
        Step::Checkpoint,
    ]
}

/// Runs `script` until a call fails; then the probes (each must be refused) and reads of
/// every acknowledged key. Returns what was acknowledged and the store (`None` if the create
/// failed).
fn run_faulted(
    script: &Script,
    region: PmemRegion,
    log: &mut FaultLog,
) -> (Acked, Option<PlushStore>) {
    let mut acked = Acked::default();
    let Some(store) = log.open(PlushStore::create_in(region, &script.opts)) else {
        acked.during_create = true;
        return (acked, None);
    };
    for step in &script.steps {
        if log.write(run_step(&store, step, &acked.model)).is_none() {
            acked.in_flight = Some(step.clone());
            break;
        }
        apply(&mut acked.model, step);
    }
    let Some(failure) = log.failure() else {
        assert!(store.stats().read_only.is_none());
        return (acked, Some(store));
    };
    assert!(
        matches!(failure, Error::Io { .. }),
        "the failing call returned {failure:?}, not the I/O error"
    );
    let reason = store.stats().read_only.expect("read-only after a failure");
    assert_eq!(reason, failure.to_string());
    for step in probes(script) {
        let r = run_step(&store, &step, &acked.model);
        if let Err(e) = &r {
            assert!(
                matches!(e, Error::ReadOnly { .. }) && e.to_string().contains(&reason),
                "refusal does not say why: {e}"
            );
        }
        log.write(r);
    }
    // Reads go on, with acknowledged values (the failed step's key: either).
    let mut after = acked.model.clone();
    if let Some(s) = &acked.in_flight {
        apply(&mut after, s);
    }
    for k in acked.model.keys().chain(after.keys()) {
        let got = store
            .get(k)
            .unwrap_or_else(|e| panic!("get while read-only: {e}"));
        assert!(
            got.as_ref() == acked.model.get(k) || got.as_ref() == after.get(k),
            "read-only store returns {got:?} for {k:?}"
        );
    }
    (acked, Some(store))
}

fn fault_injection(script: &Script, sample: usize) {
    let report = FaultInjection::new(region_opts())
        .every_point_fails(true)
        .sample(sample)
        .seed(0xfa17)
        .run(
            |region, log| {
                // The store owns the region: capture before it goes.
                let (acked, store) = run_faulted(script, region, log);
                if let Some(store) = store {
                    log.capture(store.region());
                }
                acked
            },
            |run: &Faulted<'_, Acked>| {
                let ctx = format!("{}: {} ({:?} bytes)", script.name, run.point, run.media);
                let region = run.reboot(&script.opts.region).unwrap();
                let report = check_recovered(
                    &ctx,
                    script,
                    region,
                    &run.acked.model,
                    run.acked.in_flight.as_ref(),
                );
                if run.media == Media::Working && run.acked.in_flight.is_none() {
                    assert_eq!(report.frozen_halves, 0, "{ctx}");
                }
            },
        );
    eprintln!(
        "{}: flushes failing at {} of {} persist points",
        script.name, report.runs, report.total_points
    );
    assert!(report.total_points > 200, "{report:?}");
    // Every run failed a call but the reference run and the one failing after the last point.
    assert!(report.failed_runs + 2 >= report.runs, "{report:?}");
}

#[test]
fn injected_failures_make_the_store_read_only_and_lose_nothing() {
    fault_injection(&levels_script(PlushLayout::Fixed8), 150);
    fault_injection(&levels_script(PlushLayout::Variable), 120);
    fault_injection(&log_compaction_script(PlushLayout::Fixed8), 100);
    fault_injection(&payload_script(), 150);
}
