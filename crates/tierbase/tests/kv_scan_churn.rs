//! Regression (review of `KvStore::scan`): a key overwritten without pause for the whole walk
//! (its record moves under every snapshot, and its old slot is reused) must still be returned
//! by every full walk, as must the stable keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tierbase::device::{Durability, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

fn opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .reclaim(None)
        .layout(layout)
        .region(RegionOptions {
            reserve: 1 << 30,
            ..RegionOptions::default()
        })
        .durability(Durability::Immediate)
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
fn scan_meets_a_key_overwritten_throughout_the_walk() {
    let layout = RecordLayout::Fixed {
        key_size: 16,
        value_size: 40,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scan.tb");
    let store = Arc::new(KvStore::create(&path, &opts(layout)).unwrap());
    // Some stable keys too.
    for i in 0..100 {
        store.put(&key(b's', i), &val(i)).unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (s, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = s.client();
            c.put(&key(b'k', 0), &val(0)).unwrap();
            let mut i = 1u32;
            while !stop.load(Ordering::Relaxed) {
                c.put(&key(b'k', 0), &val(i)).unwrap();
                c.put(&key(b'x', i), &val(i)).unwrap();
                c.delete(&key(b'x', i - 1)).unwrap();
                i += 1;
            }
        })
    };
    // The hot key exists from here on.
    while store.get(&key(b'k', 0)).unwrap().is_none() {
        std::thread::yield_now();
    }
    let (mut walks, mut misses, mut stable_misses) = (0u64, 0u64, 0u64);
    while walks < 3000 {
        let mut cursor = 0;
        let mut keys = Vec::new();
        loop {
            cursor = store.scan(cursor, 1_000_000, &mut keys).unwrap();
            if cursor == 0 {
                break;
            }
        }
        walks += 1;
        if !keys.contains(&key(b'k', 0)) {
            misses += 1;
        }
        stable_misses += (0..100).filter(|&i| !keys.contains(&key(b's', i))).count() as u64;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("walks {walks}, hot key missed in {misses}, stable keys missed {stable_misses}");
    assert_eq!(
        misses, 0,
        "a key overwritten throughout the walks was missed"
    );
    assert_eq!(stable_misses, 0);
}
