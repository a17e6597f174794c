//! Quick end-to-end checks of the KV store on real files.

use tierbase::kv::{KvOptions, KvStore, RecordLayout};

fn opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .layout(layout)
        .chunk_size(1 << 20)
        .reclaim(None)
}

#[test]
fn fixed_put_get_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tb");
    let o = opts(RecordLayout::Fixed {
        key_size: 16,
        value_size: 200,
    });
    let store = KvStore::create(&path, &o).unwrap();
    let mut c = store.client();
    for i in 0..5000u64 {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.to_le_bytes());
        let v = vec![(i % 251) as u8; 200];
        assert!(c.put(&k, &v).unwrap());
    }
    for i in (0..5000u64).step_by(3) {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.to_le_bytes());
        let v = vec![(i % 7) as u8; 200];
        assert!(!c.put(&k, &v).unwrap());
    }
    drop(c);
    assert_eq!(store.len(), 5000);
    store.close().unwrap();
    let store = KvStore::open(&path, &o).unwrap();
    assert_eq!(store.len(), 5000);
    assert_eq!(store.recovery().duplicates_resolved, 0);
    let mut v = Vec::new();
    for i in 0..5000u64 {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.to_le_bytes());
        assert!(store.get_into(&k, &mut v).unwrap());
        let expect = if i % 3 == 0 {
            (i % 7) as u8
        } else {
            (i % 251) as u8
        };
        assert_eq!(v, vec![expect; 200], "key {i}");
    }
    let s = store.stats();
    assert_eq!(s.records, 5000);
    println!("{s:#?}");
}

#[test]
fn variable_put_get_delete_large_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.tb");
    let o = opts(RecordLayout::Variable);
    let store = KvStore::create(&path, &o).unwrap();
    let mut c = store.client();
    let big = vec![7u8; 100_000];
    c.put(b"big", &big).unwrap();
    for i in 0..3000u32 {
        let k = format!("key-{i}");
        let v = vec![(i % 13) as u8; (i % 300) as usize];
        c.put(k.as_bytes(), &v).unwrap();
    }
    for i in (0..3000u32).step_by(5) {
        assert!(c.delete(format!("key-{i}").as_bytes()).unwrap());
    }
    drop(c);
    let mut v = Vec::new();
    assert!(store.get_into(b"big", &mut v).unwrap());
    assert_eq!(v, big);
    store.close().unwrap();
    let store = KvStore::open(&path, &o).unwrap();
    assert_eq!(store.len(), 1 + 3000 - 600);
    assert!(store.get_into(b"big", &mut v).unwrap());
    assert_eq!(v, big);
    for i in 0..3000u32 {
        let k = format!("key-{i}");
        let found = store.get_into(k.as_bytes(), &mut v).unwrap();
        assert_eq!(found, i % 5 != 0, "{k}");
        if found {
            assert_eq!(v, vec![(i % 13) as u8; (i % 300) as usize]);
        }
    }
    let mut n = 0;
    store.for_each(|_, _| n += 1).unwrap();
    assert_eq!(n, store.len());
    let (blocks, moved) = store.compact(0.1).unwrap();
    println!("compacted {blocks} blocks, moved {moved}");
    for i in 0..3000u32 {
        let k = format!("key-{i}");
        assert_eq!(
            store.get_into(k.as_bytes(), &mut v).unwrap(),
            i % 5 != 0,
            "{k}"
        );
    }
    store.close().unwrap();
    let report = tierbase::kv::verify(&path).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
}

#[test]
fn pages_per_block_follow_the_emulated_profile_unless_given() {
    use tierbase::device::{Catalogue, PmemRegion, RegionOptions};
    let cat = Catalogue::builtin();
    for (profile, given, expected) in [
        (Some("optane-pmem-200"), None, 8),
        (Some("optane-pmem-100"), None, 6),
        (Some("dram"), None, 6),
        (Some("optane-pmem-200"), Some(3), 3),
        (None, None, 6),
    ] {
        let region_opts = RegionOptions {
            emulate: profile.map(|p| cat.require(p).unwrap().clone()),
            reserve: 64 << 20,
            ..RegionOptions::default()
        };
        let region = PmemRegion::anonymous(0, &region_opts).unwrap();
        let mut opts = KvOptions::default().chunk_size(1 << 20).region(region_opts);
        opts.pages_per_block = given;
        let store = KvStore::create_in(region, &opts).unwrap();
        assert_eq!(store.pages_per_block(), expected, "{profile:?} {given:?}");
    }
}

#[test]
fn store_level_puts_share_one_insert_block() {
    let dir = tempfile::tempdir().unwrap();
    let store = KvStore::create(dir.path().join("p.tb"), &opts(RecordLayout::Variable)).unwrap();
    for i in 0..200u32 {
        assert!(store.put(format!("k{i}").as_bytes(), b"value").unwrap());
    }
    // 200 small records fit one block: the convenience API must not take a block per call.
    assert_eq!(store.stats().blocks_used, 1);
    store.close().unwrap();
}

/// Durable operations cost the documented number of persist points (docs/FORMAT-kv.md,
/// docs/BENCHMARKS.md): with checked records, insert 1 (record and marker together),
/// copy-on-write update 2 (new record, old copy invalidated), delete 1, get 0; with values of
/// at most 8 bytes (updated in place, no check), insert 2 (record, then marker) and update 1. A
/// persist point is one file sync on a disk file and one fence on tmpfs; the counts must not
/// depend on the medium.
#[test]
fn durable_operations_cost_the_documented_persists() {
    let mut dirs = vec![tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()];
    if let Ok(shm) = tempfile::tempdir_in("/dev/shm") {
        dirs.push(shm);
    }
    let key = |i: u64| {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.to_le_bytes());
        k
    };
    for dir in &dirs {
        let fixed = |value_size| RecordLayout::Fixed {
            key_size: 16,
            value_size,
        };
        for (n, (layout, value_size, insert_cost, update_cost)) in [
            (fixed(200), 200u32, 1u64, 2u64),
            (fixed(8), 8, 2, 1),
            (RecordLayout::Variable, 200, 1, 2),
        ]
        .into_iter()
        .enumerate()
        {
            let o = opts(layout);
            let path = dir.path().join(format!("p{n}.tb"));
            let store = KvStore::create(&path, &o).unwrap();
            let mode = store.durability();
            let persists = |s: &KvStore| {
                let r = s.metrics().region;
                r.syncs + r.fences
            };
            let mut c = store.client();
            // Warm up: the client's first insert takes a block (and persists its header).
            c.put(&key(0), &vec![0; value_size as usize]).unwrap();
            let cost = |op: &mut dyn FnMut()| {
                let before = persists(&store);
                op();
                persists(&store) - before
            };
            let v = vec![7u8; value_size as usize];
            let mut out = Vec::new();
            let what = format!("{mode} in {}, {layout}", dir.path().display());
            assert_eq!(
                cost(&mut || assert!(c.put(&key(1), &v).unwrap())),
                insert_cost,
                "insert, {what}"
            );
            assert_eq!(
                cost(&mut || assert!(c.update(&key(1), &v).unwrap())),
                update_cost,
                "update, {what}"
            );
            assert_eq!(
                cost(&mut || assert!(c.get_into(&key(1), &mut out).unwrap())),
                0,
                "get, {what}"
            );
            assert_eq!(
                cost(&mut || assert!(c.delete(&key(1)).unwrap())),
                1,
                "delete, {what}"
            );
        }
    }
}
