//! Background reclamation: with the reclaimer on, blocks that deletes emptied out are compacted
//! and reused while readers keep seeing every live record.

use std::time::{Duration, Instant};

use tierbase::kv::{KvOptions, KvStore, ReclaimOptions, RecordLayout};

#[test]
fn the_reclaimer_compacts_sparse_blocks_and_space_is_reused() {
    // tmpfs when there is one: on a disk file every persist is an msync, which only slows the
    // test down without testing anything more.
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let path = dir.path().join("r.tb");
    let opts = KvOptions::default()
        .layout(RecordLayout::Fixed {
            key_size: 8,
            value_size: 64,
        })
        .pages_per_block(2)
        .chunk_size(64 * 8192)
        .reclaim(Some(ReclaimOptions {
            free_threshold: 0.4,
            interval: Duration::from_millis(1),
        }));
    // Fill and delete without the reclaimer (with it running during the deletes, blocks are
    // compacted as they cross the threshold and the end state depends on timing), then reopen
    // with it.
    let store = KvStore::create(&path, &opts.clone().reclaim(None)).unwrap();
    let n = 20_000u64;
    let mut c = store.client();
    for i in 0..n {
        c.put(&i.to_le_bytes(), &[i as u8; 64]).unwrap();
    }
    // Delete 60%: every sealed block drops below the threshold.
    for i in (0..n).filter(|i| i % 5 < 3) {
        assert!(c.delete(&i.to_le_bytes()).unwrap());
    }
    drop(c);
    store.close().unwrap();
    let store = KvStore::open(&path, &opts).unwrap();
    // Every block holds 40% live records, so every sealed block at open is a victim. Wait for
    // the compaction counter (monotone) to cover them all — a liveness bound only — while
    // readers check every record stays visible. (A stats snapshot taken while blocks move is
    // not a reliable stopping rule.)
    let victims = store.recovery().blocks_scanned;
    assert_eq!(victims, n.div_ceil(102), "2 pages of 51 slots per block");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut v = Vec::new();
    while store.metrics().compactions < victims && Instant::now() < deadline {
        for i in (0..n).step_by(97) {
            let found = store.get_into(&i.to_le_bytes(), &mut v).unwrap();
            assert_eq!(found, i % 5 >= 3, "key {i} during reclamation");
        }
    }
    let m = store.metrics();
    assert!(
        m.compactions >= victims,
        "the reclaimer compacted {} of {victims} blocks",
        m.compactions
    );
    assert_eq!(m.reclaim_errors, 0);
    assert!(m.records_moved >= (n / 5) * 2 - 102, "{m:?}");
    let s = store.stats();
    // Live records now sit in full blocks: what is not live is at most the reclaimer's own
    // partly filled block and rounding.
    assert!(s.dead_bytes <= 2 * s.block_bytes, "dead space left: {s:?}");
    assert!(s.blocks_free > 0, "{s:?}");
    // New inserts reuse the freed blocks instead of growing the store (the reclaimer may take
    // one fresh block for its own copies meanwhile).
    let used_before = s.blocks_used;
    let mut c = store.client();
    for i in n..n + 2_000 {
        c.put(&i.to_le_bytes(), &[1; 64]).unwrap();
    }
    drop(c);
    let used_after = store.stats().blocks_used;
    assert!(
        used_after <= used_before + 1,
        "freed blocks were not reused: {used_before} -> {used_after}"
    );
    let live = (0..n).filter(|i| i % 5 >= 3).count() + 2_000;
    assert_eq!(store.len(), live);
    store.close().unwrap();
    let store = KvStore::open(&path, &opts.reclaim(None)).unwrap();
    assert_eq!(store.len(), live);
    let mut v = Vec::new();
    for i in (0..n).filter(|i| i % 5 >= 3) {
        assert!(store.get_into(&i.to_le_bytes(), &mut v).unwrap());
        assert_eq!(v, [i as u8; 64]);
    }
    store.close().unwrap();
    assert!(tierbase::kv::verify(&path).unwrap().is_ok());
}
