//! The NVM-direct design of the B+-tree store (pages in NVM, changed in place under an undo
//! log): model checks through splits, merges, overflow chains and reopens; the undo log's
//! counters; a batch that cannot fit; a region that fills up; and damaged undo logs.
//!
//! Power loss at every persist point is in `btree_crash.rs`, kill -9 in `btree_kill.rs`, the
//! proptest model in `btree_model.rs`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use tierbase::Error;
use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::device::Durability;

fn opts(nvm_bytes: u64) -> BTreeOptions {
    BTreeOptions::default()
        .page_size(4096)
        .dram_bytes(64 * 4096)
        .durability(Durability::Immediate)
        .nvm_bytes(nvm_bytes)
        .nvm_direct(true)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 1_000_003).into_bytes()
}

fn stats(s: &BTreeStore) -> HashMap<String, String> {
    s.stats().into_iter().collect()
}

fn stat(s: &BTreeStore, name: &str) -> u64 {
    stats(s)[name]
        .parse()
        .unwrap_or_else(|_| panic!("{name} not a number"))
}

fn contents(s: &BTreeStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    s.range(Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        m.insert(k.to_vec(), v.to_vec());
        true
    })
    .unwrap();
    m
}

fn check_all(s: &BTreeStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    assert_eq!(s.len(), model.len() as u64);
    assert_eq!(&contents(s), model);
    let (_, keys) = s.verify().unwrap();
    assert_eq!(keys, model.len() as u64);
    for (k, v) in model.iter().take(200) {
        assert_eq!(s.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
}

#[test]
fn nvm_direct_matches_a_btreemap_through_splits_merges_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let o = opts(16 << 20);
    let mut model = BTreeMap::new();
    let s = BTreeStore::create(&path, &o).unwrap();
    let st = stats(&s);
    assert!(st["design"].starts_with("nvm direct"), "{st:?}");
    assert_eq!(st["pool_bytes"], "0", "{st:?}");
    for i in 0..3000u64 {
        let v = match i % 7 {
            // Beyond a quarter page: an overflow chain.
            0 => vec![(i % 251) as u8; 1500 + (i as usize % 3) * 2000],
            _ => format!("value-{i}-{}", "x".repeat((i % 90) as usize)).into_bytes(),
        };
        let new = s.put(&key(i), &v).unwrap();
        assert_eq!(new, model.insert(key(i), v).is_none());
    }
    assert!(stat(&s, "height") >= 2);
    for i in (0..3000u64).step_by(3) {
        assert_eq!(s.delete(&key(i)).unwrap(), model.remove(&key(i)).is_some());
    }
    check_all(&s, &model);
    // Nothing goes through the redo log: the pages are their own durable copy.
    assert_eq!(stat(&s, "wal_frames"), 0);
    assert_eq!(stat(&s, "nvm_direct_commits"), 4000);
    assert!(stat(&s, "nvm_direct_undo_lines") > 0);
    assert!(stat(&s, "nvm_direct_lines_persisted") >= stat(&s, "nvm_direct_undo_lines"));
    s.close().unwrap();

    // Reopened with other options: the superblock says which design it is, and a deferred
    // level does not apply (every batch is persisted in place when it returns).
    let s = BTreeStore::open(&path, &BTreeOptions::default().durability(Durability::None)).unwrap();
    assert!(stats(&s)["design"].starts_with("nvm direct"));
    assert_eq!(stats(&s)["durability"], "immediate");
    assert_eq!(stat(&s, "restart_undone_lines"), 0);
    check_all(&s, &model);
    let batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = (0..40u64)
        .map(|i| (key(i), (i % 2 == 0).then(|| vec![7u8; 30])))
        .collect();
    let refs: Vec<(&[u8], Option<&[u8]>)> = batch
        .iter()
        .map(|(k, v)| (k.as_slice(), v.as_deref()))
        .collect();
    s.write_batch(&refs).unwrap();
    for (k, v) in batch {
        match v {
            Some(v) => model.insert(k, v),
            None => model.remove(&k),
        };
    }
    // Dropped without a close: no checkpoint, and nothing is lost.
    drop(s);
    let s = BTreeStore::open(&path, &BTreeOptions::default()).unwrap();
    check_all(&s, &model);
}

#[test]
fn nvm_direct_needs_a_region_big_enough() {
    let dir = tempfile::tempdir().unwrap();
    let e = BTreeStore::create(dir.path().join("a"), &opts(0)).unwrap_err();
    assert!(
        e.to_string()
            .contains("NVM-direct design needs an NVM region"),
        "{e}"
    );
    let e = BTreeStore::create(dir.path().join("b"), &opts(64 * 4096)).unwrap_err();
    assert!(
        e.to_string().contains("needs an NVM region of at least"),
        "{e}"
    );
    // A failed create leaves nothing behind: the same directory can be created again.
    BTreeStore::create(dir.path().join("b"), &opts(1 << 20)).unwrap();
}

#[test]
fn a_full_region_refuses_the_write_and_keeps_every_acknowledged_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    // 64 pages of undo log (256 KiB) and 64 pages for the tree.
    let s = BTreeStore::create(&path, &opts(512 << 10)).unwrap();
    let mut model = BTreeMap::new();
    let mut refused = None;
    for i in 0..100_000u64 {
        let v = vec![(i % 200) as u8; 300];
        match s.put(&key(i), &v) {
            Ok(_) => {
                model.insert(key(i), v);
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("the region fills up");
    assert!(matches!(e, Error::StoreFull { .. }), "{e}");
    assert!(e.to_string().contains("NVM-direct region"), "{e}");
    // The refused write is rolled back in place at once: the tree is whole and holds exactly
    // what was acknowledged.
    s.verify().unwrap();
    assert_eq!(contents(&s), model);
    // Later writes are refused too (the failed one may have changed pages in place), reads go
    // on and see every acknowledged write.
    assert!(matches!(s.put(b"more", b"x"), Err(Error::ReadOnly { .. })));
    for (k, v) in model.iter().step_by(7) {
        assert_eq!(s.get(k).unwrap().as_deref(), Some(v.as_slice()));
    }
    drop(s);
    // Restart undoes the refused write's lines (if it had changed any before it needed a
    // page) and finds the acknowledged ones.
    let s = BTreeStore::open(&path, &BTreeOptions::default()).unwrap();
    check_all(&s, &model);
    // Room is made by deletes (pages merge onto the free list), then writes go on.
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for k in keys.iter().take(keys.len() / 2) {
        assert!(s.delete(k).unwrap());
        model.remove(k);
    }
    s.put(b"after", b"room").unwrap();
    model.insert(b"after".to_vec(), b"room".to_vec());
    check_all(&s, &model);
}

#[test]
fn a_batch_larger_than_the_undo_log_is_refused_before_any_change() {
    let dir = tempfile::tempdir().unwrap();
    let s = BTreeStore::create(dir.path().join("s"), &opts(1 << 20)).unwrap();
    s.put(b"k", b"v").unwrap();
    let batch: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u64).map(|i| (key(i), vec![1u8; 200])).collect();
    let refs: Vec<(&[u8], Option<&[u8]>)> = batch
        .iter()
        .map(|(k, v)| (k.as_slice(), Some(v.as_slice())))
        .collect();
    let e = s.write_batch(&refs).unwrap_err();
    assert!(e.to_string().contains("undo log"), "{e}");
    // Refused up front: the store still takes writes and holds what it had.
    s.put(b"k2", b"v2").unwrap();
    assert_eq!(s.len(), 2);
}

/// Offsets in `nvm.tb`: the region file's 4 KiB header, then the undo log's header.
const UNDO_AT: u64 = 4096;

fn damage(path: &std::path::Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(path.join("nvm.tb"))
        .unwrap();
    f.write_all_at(bytes, at).unwrap();
}

#[test]
fn a_damaged_undo_log_header_is_a_clear_error() {
    for (at, bytes, says) in [
        (UNDO_AT, &b"XXXXXXXX"[..], "bad magic"),
        (UNDO_AT + 24, &[0xffu8; 8][..], "checksum"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let s = BTreeStore::create(&path, &opts(1 << 20)).unwrap();
        s.put(b"k", b"v").unwrap();
        s.close().unwrap();
        damage(&path, at, bytes);
        let e = BTreeStore::open(&path, &BTreeOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains(says), "{e}");
        assert!(e.to_string().contains("nvm.tb"), "{e}");
    }
}

#[test]
fn a_torn_or_foreign_undo_entry_ends_the_log() {
    // An entry with the running epoch but a bad checksum (a torn last entry), followed by
    // garbage: restart stops at it and restores nothing, and the store opens intact.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = BTreeStore::create(&path, &opts(1 << 20)).unwrap();
    for i in 0..50u64 {
        s.put(&key(i), b"v").unwrap();
    }
    let model = contents(&s);
    let epoch = stat(&s, "nvm_direct_commits");
    s.close().unwrap();
    let mut entry = [0u8; 128];
    entry[..4].copy_from_slice(b"UNDO");
    entry[8..16].copy_from_slice(&(epoch + 1).to_le_bytes());
    entry[16..24].copy_from_slice(&3u64.to_le_bytes()); // the root page
    entry[28..32].copy_from_slice(&1u32.to_le_bytes());
    entry[64..].fill(0xEE);
    damage(&path, UNDO_AT + 64, &entry);
    let s = BTreeStore::open(&path, &BTreeOptions::default()).unwrap();
    assert_eq!(stat(&s, "restart_undone_lines"), 0);
    assert_eq!(contents(&s), model);
    s.verify().unwrap();
}

#[test]
fn point_reads_on_an_emulated_region_are_charged_per_run_of_leaf_lines() {
    let dir = tempfile::tempdir().unwrap();
    let profile = tierbase::device::Catalogue::builtin()
        .get("optane-pmem-100")
        .unwrap()
        .clone();
    let mut o = opts(4 << 20);
    o.nvm_region = tierbase::device::RegionOptions {
        emulate: Some(profile),
        ..tierbase::device::RegionOptions::default()
    };
    let s = BTreeStore::create(dir.path().join("emu"), &o).unwrap();
    for i in 0..2000u64 {
        s.put(&key(i), &[1u8; 40]).unwrap();
    }
    assert!(stat(&s, "height") >= 2);
    let before = stat(&s, "nvm_direct_charged_reads");
    for i in 0..500u64 {
        assert!(s.get(&key(i)).unwrap().is_some());
        assert!(s.get(b"missing").unwrap().is_none());
    }
    // A lookup reads the leaf's header line, some slot lines and a cell: a few runs each,
    // never a whole page of lines.
    let per_get = (stat(&s, "nvm_direct_charged_reads") - before) as f64 / 1000.0;
    assert!((2.0..=16.0).contains(&per_get), "{per_get} runs per lookup");
    drop(s);
    // Without emulation nothing is charged.
    let s = BTreeStore::create(dir.path().join("plain"), &opts(4 << 20)).unwrap();
    s.put(b"k", b"v").unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(stat(&s, "nvm_direct_charged_reads"), 0);
}

#[test]
fn a_damaged_page_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s");
    let s = BTreeStore::create(&path, &opts(1 << 20)).unwrap();
    for i in 0..400u64 {
        s.put(&key(i), &[3u8; 50]).unwrap();
    }
    s.close().unwrap();
    // Page 3's slot count (header byte 6): 65535 slots in a 4 KiB page. The undo log takes
    // 256 KiB of this 1 MiB region, after the region file's 4 KiB header.
    damage(&path, 4096 + (256 << 10) + 3 * 4096 + 6, &[0xff, 0xff]);
    let s = BTreeStore::open(&path, &BTreeOptions::default()).unwrap();
    let e = s.verify().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("nvm.tb"), "{e}");
    // Every read either succeeds or says the same.
    for i in 0..400u64 {
        match s.get(&key(i)) {
            Ok(v) => assert_eq!(v.as_deref(), Some(&[3u8; 50][..])),
            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "{e}"),
        }
    }
}

/// Another NVM-direct store's region put in place of a store's own: its pages were served as
/// the store's (any well-formed region was taken). The region's undo log header names its
/// store now, and the open refuses another's; a region from before ids (no owner) is tied by
/// the store's next read-write open, after which another store's region no longer passes.
#[test]
fn another_stores_nvm_direct_region_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str, value: &[u8]| {
        let path = dir.path().join(name);
        let s = BTreeStore::create(&path, &opts(1 << 20)).unwrap();
        for i in 0..300 {
            s.put(&key(i), value).unwrap();
        }
        s.close().unwrap();
        path
    };
    let (one, two) = (make("one", b"this store's"), make("two", b"the other's"));
    let own = std::fs::read(one.join("nvm.tb")).unwrap();
    std::fs::copy(two.join("nvm.tb"), one.join("nvm.tb")).unwrap();
    match BTreeStore::open(&one, &BTreeOptions::default()) {
        Err(e @ Error::Corrupt { .. }) => {
            let m = e.to_string();
            assert!(m.contains("nvm.tb") && m.contains("another store"), "{m}");
        }
        Err(e) => panic!("{e}"),
        Ok(s) => panic!(
            "opened: {:?} for a key of this store",
            s.get(&key(1)).unwrap()
        ),
    }
    // The store's own region with its owner field cleared (made by a build that gave
    // superblocks ids but not yet the region): opens with every value, and is tied to the
    // superblocks' id.
    std::fs::write(one.join("nvm.tb"), &own).unwrap();
    damage(&one, UNDO_AT + 40, &[0; 12]);
    let s = BTreeStore::open(&one, &BTreeOptions::default()).unwrap();
    assert_eq!(
        s.get(&key(7)).unwrap().as_deref(),
        Some(&b"this store's"[..])
    );
    s.close().unwrap();
    let tied = std::fs::read(one.join("nvm.tb")).unwrap();
    let at = (UNDO_AT + 40) as usize;
    assert_eq!(
        tied[at..at + 12],
        own[at..at + 12],
        "tied to the same id again"
    );
    // A damaged owner field under a superblock with an id is refused.
    damage(&one, UNDO_AT + 41, &[0x5a]);
    let e = BTreeStore::open(&one, &BTreeOptions::default()).unwrap_err();
    assert!(e.to_string().contains("damaged owner field"), "{e}");
    // The store's own region with its owner field cleared (written before ids), under
    // superblocks without an id either: opens with every value, and is tied again.
    std::fs::write(one.join("nvm.tb"), &own).unwrap();
    damage(&one, UNDO_AT + 40, &[0; 12]);
    for slot in 0..2u64 {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(one.join("pages.tb"))
            .unwrap();
        f.write_all_at(&[0; 12], slot * 4096 + 48).unwrap();
    }
    let s = BTreeStore::open(&one, &BTreeOptions::default()).unwrap();
    for i in 0..300 {
        assert_eq!(
            s.get(&key(i)).unwrap().as_deref(),
            Some(&b"this store's"[..])
        );
    }
    s.close().unwrap();
    std::fs::copy(two.join("nvm.tb"), one.join("nvm.tb")).unwrap();
    let e = BTreeStore::open(&one, &BTreeOptions::default()).unwrap_err();
    assert!(e.to_string().contains("another store"), "{e}");
}
