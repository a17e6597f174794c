//! Background reclamation while readers keep seeing every live record: in the variable layout
//! sparse blocks are compacted (live records moved out, the blocks freed and reused); in the
//! fixed layout partly free blocks are recycled — handed back to inserts, which fill their
//! free slots in place (nothing moves) — so new records take no new space.

use std::time::{Duration, Instant};

use tierbase::kv::{KvOptions, KvStore, ReclaimOptions, RecordLayout};

const N: u64 = 20_000;

fn dir() -> tempfile::TempDir {
    // tmpfs when there is one: on a disk file every persist is an msync, which only slows the
    // test down without testing anything more.
    if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fn opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(64 * 8192)
        .reclaim(Some(ReclaimOptions {
            free_threshold: 0.4,
            interval: Duration::from_millis(1),
        }))
}

fn value(i: u64) -> [u8; 64] {
    [i as u8; 64]
}

/// Fills N records and deletes 60% of them without the reclaimer (with it running during the
/// deletes the end state would depend on timing), then reopens with it: every sealed block is
/// then a victim. Returns the store and the number of blocks recovery scanned.
fn sparse_store(path: &std::path::Path, layout: RecordLayout) -> (KvStore, u64) {
    let o = opts(layout);
    let store = KvStore::create(path, &o.clone().reclaim(None)).unwrap();
    let mut c = store.client();
    for i in 0..N {
        c.put(&i.to_le_bytes(), &value(i)).unwrap();
    }
    for i in (0..N).filter(|i| i % 5 < 3) {
        assert!(c.delete(&i.to_le_bytes()).unwrap());
    }
    drop(c);
    store.close().unwrap();
    let store = KvStore::open(path, &o).unwrap();
    let blocks = store.recovery().blocks_scanned;
    (store, blocks)
}

/// Reads a sample of keys until `done` holds (a liveness bound only: 60 s), checking that every
/// live record stays visible and every deleted one stays gone meanwhile.
fn read_until(store: &KvStore, done: impl Fn(&KvStore) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut v = Vec::new();
    while !done(store) && Instant::now() < deadline {
        for i in (0..N).step_by(97) {
            let found = store.get_into(&i.to_le_bytes(), &mut v).unwrap();
            assert_eq!(found, i % 5 >= 3, "key {i} during reclamation");
            if found {
                assert_eq!(v, value(i));
            }
        }
    }
}

fn check_reopened(path: &std::path::Path, layout: RecordLayout, extra: std::ops::Range<u64>) {
    let store = KvStore::open(path, &opts(layout).reclaim(None)).unwrap();
    let live = (0..N).filter(|i| i % 5 >= 3).count() + extra.clone().count();
    assert_eq!(store.len(), live);
    let mut v = Vec::new();
    for i in (0..N).filter(|i| i % 5 >= 3).chain(extra) {
        assert!(store.get_into(&i.to_le_bytes(), &mut v).unwrap(), "key {i}");
        assert_eq!(v, value(i));
    }
    store.close().unwrap();
    assert!(tierbase::kv::verify(path).unwrap().is_ok());
}

#[test]
fn the_reclaimer_compacts_sparse_blocks_and_space_is_reused() {
    let dir = dir();
    let path = dir.path().join("r.tb");
    let layout = RecordLayout::Variable;
    let (store, victims) = sparse_store(&path, layout);
    read_until(&store, |s| s.metrics().compactions >= victims);
    let m = store.metrics();
    assert!(
        m.compactions >= victims,
        "the reclaimer compacted {} of {victims} blocks",
        m.compactions
    );
    assert_eq!(m.reclaim_errors, 0);
    assert!(m.records_moved >= (N / 5) * 2 - 200, "{m:?}");
    let s = store.stats();
    // Live records now sit in full blocks: what is not live is at most the reclaimer's own
    // partly filled block and rounding.
    assert!(s.dead_bytes <= 2 * s.block_bytes, "dead space left: {s:?}");
    assert!(s.blocks_free > 0, "{s:?}");
    // New inserts reuse the freed blocks instead of growing the store (the reclaimer may take
    // one fresh block for its own copies meanwhile).
    let used_before = s.blocks_used;
    let mut c = store.client();
    for i in N..N + 2_000 {
        c.put(&i.to_le_bytes(), &value(i)).unwrap();
    }
    drop(c);
    let used_after = store.stats().blocks_used;
    assert!(
        used_after <= used_before + 1,
        "freed blocks were not reused: {used_before} -> {used_after}"
    );
    store.close().unwrap();
    check_reopened(&path, layout, N..N + 2_000);
}

#[test]
fn the_reclaimer_recycles_partly_free_fixed_blocks_and_inserts_fill_them_in_place() {
    let dir = dir();
    let path = dir.path().join("f.tb");
    let layout = RecordLayout::Fixed {
        key_size: 8,
        value_size: 64,
    };
    let (store, victims) = sparse_store(&path, layout);
    assert_eq!(victims, N.div_ceil(102), "2 pages of 51 slots per block");
    read_until(&store, |s| s.metrics().blocks_recycled >= victims);
    let m = store.metrics();
    assert!(
        m.blocks_recycled >= victims,
        "the reclaimer recycled {} of {victims} blocks",
        m.blocks_recycled
    );
    assert_eq!((m.records_moved, m.reclaim_errors), (0, 0), "{m:?}");
    // Inserts as many records as were deleted: they fill the freed slots, and the store does
    // not grow by a single block.
    let used_before = store.stats().blocks_used;
    let freed = (0..N).filter(|i| i % 5 < 3).count() as u64;
    let mut c = store.client();
    for i in N..N + freed {
        c.put(&i.to_le_bytes(), &value(i)).unwrap();
    }
    drop(c);
    let s = store.stats();
    assert_eq!(
        s.blocks_used, used_before,
        "recycled slots were not reused: {s:?}"
    );
    assert!(s.dead_bytes <= 2 * s.block_bytes, "dead space left: {s:?}");
    store.close().unwrap();
    check_reopened(&path, layout, N..N + freed);
}
