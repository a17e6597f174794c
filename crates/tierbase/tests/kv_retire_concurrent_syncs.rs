//! Regression (review of the retire mechanism): two threads call `sync()` while a writer
//! overwrites, inserts and deletes on a disk file under `Durability::None`, so the same slot
//! is retired, invalidated, reused by the same key and retired again while a sync still works
//! from an older list. Retirements are named by id; before, a stale list invalidated a live
//! record and keys verified present vanished.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tierbase::device::{Durability, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

const L: RecordLayout = RecordLayout::Fixed {
    key_size: 16,
    value_size: 40,
};
fn opts() -> KvOptions {
    KvOptions::default()
        .reclaim(None)
        .layout(L)
        .region(RegionOptions {
            reserve: 1 << 30,
            ..RegionOptions::default()
        })
        .durability(Durability::None)
}
fn key(p: u8, i: u32) -> Vec<u8> {
    let mut k = vec![p; 16];
    k[..4].copy_from_slice(&i.to_le_bytes());
    k
}
fn val(i: u32) -> Vec<u8> {
    let mut v = vec![7u8; 40];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

#[test]
fn concurrent_syncs_and_slot_reuse() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("aba.tb");
    let _ = std::fs::remove_file(&path);
    let store = Arc::new(KvStore::create(&path, &opts()).unwrap());
    assert!(store.region().defers_persists());
    let stop = Arc::new(AtomicBool::new(false));
    let mut hs = Vec::new();
    for _ in 0..2 {
        let (s, stop) = (store.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                s.sync().unwrap();
            }
        }));
    }
    {
        let (s, stop) = (store.clone(), stop.clone());
        hs.push(std::thread::spawn(move || {
            let mut c = s.client();
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                c.put(&key(b'w', i % 3000), &val(i)).unwrap();
                i += 1;
            }
        }));
    }
    let mut c = store.client();
    let mut i = 0u32;
    let mut failure = None;
    while i < 300_000 {
        c.put(&key(b'k', 0), &val(i)).unwrap();
        c.put(&key(b'x', i), &val(i)).unwrap();
        if i > 0 && !c.delete(&key(b'x', i - 1)).unwrap() {
            failure = Some(format!(
                "iteration {i}: x key {} (verified present before) vanished",
                i - 1
            ));
            break;
        }
        if c.get(&key(b'k', 0)).unwrap() != Some(val(i)) {
            failure = Some(format!("iteration {i}: hot key lost/wrong"));
            break;
        }
        if i > 0 && c.get(&key(b'x', i)).unwrap() != Some(val(i)) {
            failure = Some(format!("iteration {i}: x key lost"));
            break;
        }
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    eprintln!("iterations: {i}");
    drop(c);
    if failure.is_none() {
        // Reopen and check.
        let s = Arc::try_unwrap(store).ok().unwrap();
        s.close().unwrap();
        let s = KvStore::open(&path, &opts()).unwrap();
        if s.get(&key(b'k', 0)).unwrap() != Some(val(i - 1)) {
            failure = Some("after reopen: hot key wrong".into());
        }
        if s.get(&key(b'x', i - 1)).unwrap() != Some(val(i - 1)) {
            failure = Some("after reopen: last x key wrong".into());
        }
    }
    let _ = std::fs::remove_file(&path);
    assert!(failure.is_none(), "{failure:?}");
}
