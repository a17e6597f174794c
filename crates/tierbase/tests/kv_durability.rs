//! Durability levels (`Durability::Eventual` / `None`): what a deferred write may lose, and
//! that nothing else is lost.
//!
//! - Power loss at every persist point of a script run with deferred persists on a
//!   crash-simulated region (which then behaves like a page cache: a written word reaches media
//!   at the next sync, or earlier at random). After recovery every key must hold a value it had
//!   at, or after, the last `sync` that returned — never an older one (a replaced record's
//!   invalidation reaching media before its replacement would show one), never a torn one.
//! - On a disk file: inserts, deletes and replacing puts cost no file sync (a delete of a key
//!   replaced since the last sync two), `sync` one,
//!   the background flush makes writes durable on its own, and a clean close keeps everything.

use std::collections::{BTreeMap, BTreeSet};

use tierbase::device::{Durability, DurabilityMode, PmemRegion};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};
use tierbase::testing::crash::{Crashed, PowerLoss, Schedule, ScriptEnd};

mod kv_common;
use kv_common::crash_opts;

/// Large enough records that the script fills several blocks (and compaction moves some).
const FIXED: RecordLayout = RecordLayout::Fixed {
    key_size: 16,
    value_size: 400,
};

/// Small records: the disk tests' inserts all fit the first block.
const SMALL: RecordLayout = RecordLayout::Fixed {
    key_size: 16,
    value_size: 40,
};

fn opts(layout: RecordLayout, durability: Durability) -> KvOptions {
    crash_opts(layout).durability(durability)
}

#[derive(Clone, Debug)]
enum Step {
    Put(u32, u32),
    Delete(u32),
    Compact,
    Sync,
}

fn key(layout: RecordLayout, i: u32) -> Vec<u8> {
    match layout {
        RecordLayout::Fixed { key_size, .. } => {
            let mut k = vec![0u8; key_size as usize];
            k[..4].copy_from_slice(&i.to_le_bytes());
            k
        }
        RecordLayout::Variable => format!("key-{i}").into_bytes(),
    }
}

fn value(layout: RecordLayout, v: u32) -> Vec<u8> {
    let len = match layout {
        RecordLayout::Fixed { value_size, .. } => value_size as usize,
        RecordLayout::Variable => 8 + (v as usize * 29) % 700,
    };
    let mut out = vec![(v % 251) as u8; len];
    out[..4].copy_from_slice(&v.to_le_bytes());
    out
}

/// Puts, replacing puts, deletes and a compaction over 12 keys, with a sync every few steps.
fn script() -> Vec<Step> {
    let mut s = Vec::new();
    let mut v = 1;
    for round in 0..6u32 {
        for k in 0..12u32 {
            if (k + round) % 5 == 4 {
                s.push(Step::Delete(k));
            } else {
                s.push(Step::Put(k, v));
                v += 1;
            }
            if (k + 1) % 5 == 0 {
                s.push(Step::Sync);
            }
        }
        if round == 3 {
            s.push(Step::Compact);
        }
    }
    // Replaced twice and deleted with no sync between (the delete must first make the
    // replaced records durably invalid), then replaced once more and compacted while the
    // replaced records still wait for their invalidation.
    for k in 0..3u32 {
        s.push(Step::Put(k, v));
        s.push(Step::Put(k, v + 1));
        s.push(Step::Delete(k));
        s.push(Step::Put(k, v + 2));
        s.push(Step::Put(k, v + 3));
        v += 4;
    }
    s.push(Step::Compact);
    s.push(Step::Sync);
    // Replaced, synced (the replaced record's invalidation is written, not yet durable), then
    // deleted: the replaced value is older than the last sync, so it must never come back.
    for k in 6..9u32 {
        s.push(Step::Put(k, v));
        s.push(Step::Put(k, v + 1));
        s.push(Step::Sync);
        s.push(Step::Delete(k));
        v += 2;
    }
    s.push(Step::Put(5, v));
    s.push(Step::Delete(5));
    s
}

/// Per key, every value (`None`: absent) it may hold after a power loss: the one it had at the
/// last completed sync, and each one written since.
#[derive(Debug, Default)]
struct Acked {
    current: BTreeMap<u32, Option<u32>>,
    allowed: BTreeMap<u32, BTreeSet<Option<u32>>>,
    during_create: bool,
}

impl Acked {
    fn write(&mut self, k: u32, v: Option<u32>) {
        self.current.insert(k, v);
        // A key first written since the last sync was absent at it.
        let allowed = self
            .allowed
            .entry(k)
            .or_insert_with(|| BTreeSet::from([None]));
        allowed.insert(v);
    }

    fn synced(&mut self) {
        for (k, v) in &self.current {
            self.allowed.insert(*k, BTreeSet::from([*v]));
        }
    }
}

fn run_script(layout: RecordLayout, region: PmemRegion) -> ScriptEnd<Acked> {
    let store = KvStore::create_in(region, &opts(layout, Durability::None))
        .unwrap_or_else(|e| panic!("create: {e}"));
    let mut acked = Acked::default();
    if store.region().crashed() {
        acked.during_create = true;
        return ScriptEnd::new(acked, store.region());
    }
    assert!(store.region().defers_persists());
    let mut c = store.client();
    for step in script() {
        // A write in flight may or may not have happened: allowed either way.
        match step {
            Step::Put(k, v) => {
                acked.write(k, Some(v));
                c.put(&key(layout, k), &value(layout, v)).unwrap();
            }
            Step::Delete(k) => {
                acked.write(k, None);
                store.delete(&key(layout, k)).unwrap();
            }
            Step::Compact => {
                store.compact(0.0).unwrap();
            }
            Step::Sync => {
                store.sync().unwrap();
                if !store.region().crashed() {
                    acked.synced();
                }
            }
        }
        if store.region().crashed() {
            break;
        }
    }
    ScriptEnd::new(acked, store.region())
}

fn check(layout: RecordLayout, crashed: Crashed<Acked>) {
    let o = opts(layout, Durability::None);
    let point = &crashed.point;
    let region = crashed.reboot(&o.region).unwrap();
    if crashed.acked.during_create {
        if let Ok(s) = KvStore::open_in(region, &o) {
            assert!(s.is_empty());
        }
        return;
    }
    let report = tierbase::kv::verify_region(&region).unwrap();
    assert!(report.is_ok(), "{point}: {:?}", report.problems);
    let store =
        KvStore::open_in(region, &o).unwrap_or_else(|e| panic!("reopen after {point}: {e}"));
    let mut value_buf = Vec::new();
    for k in 0..12u32 {
        let allowed = crashed
            .acked
            .allowed
            .get(&k)
            .cloned()
            .unwrap_or_else(|| BTreeSet::from([None]));
        let got = if store.get_into(&key(layout, k), &mut value_buf).unwrap() {
            let v = u32::from_le_bytes(value_buf[..4].try_into().unwrap());
            assert_eq!(
                value_buf,
                value(layout, v),
                "{point}: key {k} holds a torn value"
            );
            Some(v)
        } else {
            None
        };
        assert!(
            allowed.contains(&got),
            "{point}: key {k} holds {got:?}, allowed since the last sync: {allowed:?}"
        );
    }
    assert!(store.len() <= 12, "{point}: unknown keys recovered");
}

fn every_persist_point(layout: RecordLayout) {
    let report = PowerLoss::new(opts(layout, Durability::None).region)
        .survival(&[0.0, 0.5, 0.9])
        .run(
            |region, _| run_script(layout, region),
            |crashed| check(layout, crashed),
        );
    assert!(
        report.total_points > 20,
        "the script should have many persist points, has {}",
        report.total_points
    );
}

#[test]
fn deferred_writes_lose_at_most_what_followed_the_last_sync_fixed() {
    every_persist_point(FIXED);
}

#[test]
fn deferred_writes_lose_at_most_what_followed_the_last_sync_variable() {
    every_persist_point(RecordLayout::Variable);
}

// ----- on a disk file ----------------------------------------------------------------------

/// A store on a disk file (where persists are file syncs), or `None` if the target directory
/// is memory-backed and nothing would be deferred.
fn disk_store(dir: &tempfile::TempDir, durability: Durability) -> Option<KvStore> {
    let store = KvStore::create(dir.path().join("s.tb"), &opts(SMALL, durability)).unwrap();
    if store.durability() != DurabilityMode::Msync {
        eprintln!("skipped: {} is not on a disk", dir.path().display());
        return None;
    }
    Some(store)
}

#[test]
fn deferred_levels_sync_only_where_order_or_the_caller_needs_it() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let Some(store) = disk_store(&dir, Durability::None) else {
        return;
    };
    assert_eq!(store.stats().commit, "none");
    let syncs = || store.stats().syncs;
    let mut c = store.client();
    // The first insert takes a fresh block (an immediate persist of the header's high-water
    // mark: records in the block must never be on media beyond it); the next ones fill it.
    assert!(c.put(&key(SMALL, 0), &value(SMALL, 0)).unwrap());
    let start = syncs();
    for i in 1..50 {
        assert!(c.put(&key(SMALL, i), &value(SMALL, i)).unwrap());
    }
    for i in 0..5 {
        assert!(store.delete(&key(SMALL, i)).unwrap());
    }
    assert_eq!(syncs(), start, "inserts and deletes are deferred");
    assert_eq!(store.stats().deferred_persists, 55, "50 records, 5 deletes");
    // A replacing put costs no sync either: the old record stays valid until a sync has put
    // the new one on media; that sync writes the old one's invalidation, the next makes it
    // durable.
    let live = |records: u64| records * store.stats().live_bytes / 45;
    let live45 = live(45);
    assert!(!c.put(&key(SMALL, 10), &value(SMALL, 1000)).unwrap());
    assert!(!c.put(&key(SMALL, 11), &value(SMALL, 1001)).unwrap());
    assert_eq!(syncs(), start, "replacing puts are deferred");
    // The replaced records are still valid, and still counted live (their space is not free).
    assert_eq!(store.stats().live_bytes, live45 / 45 * 47);
    store.sync().unwrap();
    assert_eq!(syncs(), start + 1);
    assert_eq!(store.stats().live_bytes, live45);
    store.sync().unwrap();
    assert_eq!(
        syncs(),
        start + 2,
        "the invalidations written by the first sync"
    );
    store.sync().unwrap();
    assert_eq!(syncs(), start + 2, "nothing pending, no sync");
    // Deleting a key replaced since the last sync: its replaced record is made durably
    // invalid first (two syncs), so a power loss cannot bring it back.
    assert!(!c.put(&key(SMALL, 12), &value(SMALL, 1002)).unwrap());
    assert!(store.delete(&key(SMALL, 12)).unwrap());
    assert_eq!(syncs(), start + 4);
    store.sync().unwrap();
    drop(c);
    store.close().unwrap();

    let store = KvStore::open(dir.path().join("s.tb"), &opts(SMALL, Durability::None)).unwrap();
    assert!(store.recovery().after_clean_close);
    assert_eq!(store.len(), 44);
    assert_eq!(
        store.get(&key(SMALL, 10)).unwrap(),
        Some(value(SMALL, 1000))
    );
}

#[test]
fn deferring_levels_run_immediate_where_a_persist_is_a_fence() {
    // tmpfs defers nothing: a persist there is a fence, already cheap.
    if std::path::Path::new("/dev/shm").is_dir() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let opts = opts(
            SMALL,
            Durability::Eventual(std::time::Duration::from_millis(5)),
        );
        let store = KvStore::create(dir.path().join("s.tb"), &opts).unwrap();
        assert!(!store.region().defers_persists());
        assert!(
            store
                .stats()
                .commit
                .starts_with("immediate (asked: eventual:5ms")
        );
        store
            .client()
            .put(&key(SMALL, 1), &value(SMALL, 1))
            .unwrap();
        assert_eq!(store.stats().deferred_persists, 0);
    }
}

#[test]
fn immediate_defers_nothing_and_eventual_syncs_in_the_background() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let Some(store) = disk_store(&dir, Durability::Immediate) else {
        return;
    };
    assert_eq!(store.stats().commit, "immediate");
    let mut c = store.client();
    c.put(&key(SMALL, 1), &value(SMALL, 1)).unwrap();
    assert_eq!(store.stats().deferred_persists, 0);
    assert!(store.stats().syncs >= 1);
    drop(c);
    store.close().unwrap();

    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let eventual = Durability::Eventual(std::time::Duration::from_millis(5));
    let Some(store) = disk_store(&dir, eventual) else {
        return;
    };
    assert_eq!(store.stats().commit, "eventual:5ms");
    let before = store.stats().syncs;
    store
        .client()
        .put(&key(SMALL, 1), &value(SMALL, 1))
        .unwrap();
    // The flusher syncs without being asked (liveness: it runs every 5 ms; the deadline only
    // bounds a hang).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.stats().syncs == before {
        assert!(
            std::time::Instant::now() < deadline,
            "no background sync in 60 s"
        );
        std::thread::yield_now();
    }
}
