//! Power loss at (a sample of) every persist point while the store is busy in the background:
//! the reclaimer runs every millisecond with a threshold of 0 (it moves every record of every
//! sealed block, again and again; the second thread also wakes it for a whole round every 40
//! calls, so coverage does not depend on the machine's speed), a writer thread puts and updates keys, and a second thread
//! deletes, updates and re-puts the same keys while compaction moves them.
//!
//! With background threads the persist points differ from run to run, so the points are
//! chosen from a crash-free reference run's count (1..=N, sampled), and the check does not
//! rely on the exact interleaving: a call counts as acknowledged only if it returned before
//! the power loss (`region.crashed()` still false), and after recovery every key must hold a
//! state the [`ExpectedState`] tracker allows — the last acknowledged write (or any of
//! several overlapping ones), or a write that was in flight. So an acknowledged delete never
//! comes back, an acknowledged update is never lost, a compaction copy never resurrects an
//! older value, no unknown key appears, and the media verifies clean.
//!
//! Only flushed-and-fenced data survives here (`unflushed_survival` 0): the simulator merges
//! unflushed words from a copy of working memory taken after the crash fence while the other
//! threads go on writing, so with concurrent writers it would let a store made *after* the
//! power loss reach media without the data it depends on — a state no machine produces.
//!
//! Replay one point with `TIERBASE_CRASH_POINT=n` (the interleaving will differ).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tierbase::device::{PmemRegion, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, ReclaimOptions, RecordLayout};
use tierbase::testing::TestRng as Rng;
use tierbase::testing::crash::{
    Crashed, ExpectedState, PowerLoss, Schedule, ScriptEnd, Write, tracked_writers,
};

/// A value as the tracker sees it: length and FNV-1a hash of the bytes (a torn or mixed value
/// has a different hash; short to print).
type Digest = (usize, u64);
type State = ExpectedState<Vec<u8>, Digest>;

/// Shared keys.
const KEYS: u64 = 16;
/// Calls per thread and run.
const OPS: u64 = 200;
/// Points visited per test at most (the reference run has 700 to 900; more points than this
/// are sampled evenly).
const SAMPLE: usize = 600;

fn digest(v: &[u8]) -> Digest {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in v {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (v.len(), h)
}

fn opts(layout: RecordLayout, reclaim: bool) -> KvOptions {
    let o = KvOptions::default()
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(8 * 2 * 4096)
        .recovery_threads(1)
        .region(RegionOptions {
            reserve: 256 << 20,
            ..RegionOptions::default()
        });
    if reclaim {
        o.reclaim(Some(ReclaimOptions {
            free_threshold: 0.0,
            interval: Duration::from_millis(1),
        }))
    } else {
        o.reclaim(None)
    }
}

fn key(layout: RecordLayout, i: u64) -> Vec<u8> {
    match layout {
        RecordLayout::Fixed { key_size, .. } => {
            let mut k = vec![0u8; key_size as usize];
            k[..8].copy_from_slice(&i.to_le_bytes());
            k
        }
        RecordLayout::Variable => format!("key-{i}").into_bytes(),
    }
}

/// A value unique to (thread, op): small mostly, sometimes a few KiB (spanning pages), and in
/// the variable layout now and then a large record (bigger than a block).
fn value(layout: RecordLayout, thread: u64, op: u64, rng: &mut Rng) -> Vec<u8> {
    let len = match layout {
        RecordLayout::Fixed { value_size, .. } => value_size as usize,
        RecordLayout::Variable => match rng.below(20) {
            0 => 9_000 + rng.below(3_000) as usize,
            1..=3 => 1_000 + rng.below(4_000) as usize,
            _ => 16 + rng.below(300) as usize,
        },
    };
    let tag = thread << 32 | op;
    (0..len)
        .map(|i| (tag.rotate_left((i % 64) as u32) ^ i as u64) as u8)
        .collect()
}

/// What a run acknowledged before the power loss.
#[derive(Debug, Default)]
struct Acked {
    state: State,
    /// Power was lost while the store was being created.
    during_create: bool,
    /// Records the reclaimer moved during the run (for the coverage figure).
    moved: u64,
    /// Partly free blocks the reclaimer handed back to inserts (fixed layout).
    recycled: u64,
}

/// One worker: thread 0 puts and updates; thread 1 deletes, updates and puts back. Both
/// stop at the first call that returns after the power loss (it stays in flight).
fn worker(layout: RecordLayout, store: &KvStore, tracker: &Mutex<State>, t: u64, seed: u64) {
    let mut rng = Rng(seed ^ (t + 1).wrapping_mul(0x51_7cc1_b727_220a));
    let mut c = store.client();
    for op in 0..OPS {
        if store.region().crashed() {
            return;
        }
        if t == 1 && op % 40 == 39 {
            // Coverage that does not hang on timing: besides its 1 ms ticks, have the
            // reclaimer run a whole round now, while thread 0 goes on writing.
            assert!(store.reclaim_round());
        }
        let k = key(layout, rng.below(KEYS));
        let roll = rng.below(100);
        let v = value(layout, t, op, &mut rng);
        let write = match (t, roll) {
            (0, 0..=69) | (1, 0..=24) => Write::Put(v),
            (0, _) | (1, 25..=49) => Write::Update(v),
            _ => Write::Delete,
        };
        let tracked = match &write {
            Write::Put(v) => Write::Put(digest(v)),
            Write::Update(v) => Write::Update(digest(v)),
            Write::Delete => Write::Delete,
        };
        tracker
            .lock()
            .unwrap()
            .begin(t, k.clone(), tracked)
            .unwrap();
        let applied = match &write {
            Write::Put(v) => c.put(&k, v).map(|_| true),
            Write::Update(v) => c.update(&k, v),
            Write::Delete => c.delete(&k).map(|_| true),
        }
        .unwrap_or_else(|e| panic!("thread {t} op {op}: {e}"));
        if store.region().crashed() {
            // Returned after the power loss: its persists may have come too late.
            return;
        }
        tracker.lock().unwrap().ack(t, applied).unwrap();
    }
}

fn run_script(layout: RecordLayout, region: PmemRegion, seed: u64) -> ScriptEnd<Acked> {
    let store = KvStore::create_in(region, &opts(layout, true)).unwrap();
    let mut acked = Acked::default();
    if store.region().crashed() {
        acked.during_create = true;
        return ScriptEnd::new(acked, store.region());
    }
    acked.state = tracked_writers(2, |t, tracker| worker(layout, &store, tracker, t, seed));
    acked.moved = store.metrics().records_moved;
    acked.recycled = store.metrics().blocks_recycled;
    ScriptEnd::new(acked, store.region())
}

fn check(layout: RecordLayout, crashed: &Crashed<Acked>) {
    let point = &crashed.point;
    let o = opts(layout, false);
    let region = crashed.reboot(&o.region).unwrap();
    if crashed.acked.during_create {
        if let Ok(s) = KvStore::open_in(region, &o) {
            assert!(
                s.is_empty(),
                "{point}: a store cut short in creation holds data"
            );
        }
        return;
    }
    let report = tierbase::kv::verify_region(&region).unwrap();
    assert!(report.is_ok(), "{point}: {:?}", report.problems);
    let store = KvStore::open_in(region, &o).unwrap_or_else(|e| panic!("{point}: reopen: {e}"));
    let mut actual = BTreeMap::new();
    store
        .for_each(|k, v| {
            assert!(
                actual.insert(k.to_vec(), digest(v)).is_none(),
                "{point}: key {k:?} seen twice"
            );
        })
        .unwrap();
    assert_eq!(actual.len(), store.len(), "{point}: iteration vs len");
    crashed
        .acked
        .state
        .check(&actual)
        .unwrap_or_else(|e| panic!("{point}: {e}"));
    // Point reads agree with the iteration.
    for (k, d) in &actual {
        let v = store.get(k).unwrap();
        assert_eq!(v.as_deref().map(digest), Some(*d), "{point}: get {k:?}");
    }
    // And the recovered store works on.
    let (k, v) = (key(layout, 1000), value(layout, 9, 9, &mut Rng(1)));
    store.put(&k, &v).unwrap();
    assert_eq!(store.get(&k).unwrap(), Some(v));
}

fn crash_while_reclaiming(layout: RecordLayout, seed: u64) {
    let moved = AtomicU64::new(0);
    let recycled = AtomicU64::new(0);
    let mut crashed_runs = 0;
    let report = PowerLoss::new(opts(layout, true).region)
        .first_point(1)
        .seed(seed)
        .sample(SAMPLE)
        .run(
            |region, _| run_script(layout, region, seed),
            |crashed| {
                check(layout, &crashed);
                if crashed.during_script {
                    crashed_runs += 1;
                }
                moved.fetch_add(crashed.acked.moved, Ordering::Relaxed);
                recycled.fetch_add(crashed.acked.recycled, Ordering::Relaxed);
            },
        );
    let (moved, recycled) = (moved.into_inner(), recycled.into_inner());
    eprintln!(
        "{layout}: {} runs, reference run {} persist points, {crashed_runs} crashed mid-script, \
         {moved} records moved and {recycled} blocks recycled by the reclaimer in all",
        report.runs, report.total_points
    );
    assert!(report.total_points > 300, "{report:?}");
    assert!(
        crashed_runs > report.runs / 2,
        "most points must fall inside the script: {report:?}"
    );
    // The scenario needs reclamation to run while the writers do: records moved (variable
    // layout), or partly free blocks refilled in place (fixed layout).
    match layout {
        RecordLayout::Variable => assert!(moved > 0, "the reclaimer never moved a record"),
        RecordLayout::Fixed { .. } => {
            assert!(recycled > 0, "the reclaimer never recycled a block")
        }
    }
}

#[test]
fn variable_layout_crash_with_reclaimer_and_concurrent_deletes() {
    crash_while_reclaiming(RecordLayout::Variable, 0x5eed_0001);
}

#[test]
fn fixed_layout_crash_with_reclaimer_and_concurrent_deletes() {
    crash_while_reclaiming(
        RecordLayout::Fixed {
            key_size: 16,
            value_size: 64,
        },
        0x5eed_0002,
    );
}
