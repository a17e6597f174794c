//! Regressions found by review of the deferred-durability and scan paths. On the crash
//! simulator (power loss with unflushed words surviving at random, as a page cache may write
//! them):
//! - the header's high-water mark of used blocks must reach media before any record in a new
//!   block can: otherwise, after a power loss, records beyond the durable mark stay on media
//!   unscanned, and come back once their block is handed out again;
//! - recovery's invalidations of superseded duplicates must be durable before the store takes
//!   writes: otherwise a delete of the winner can reach media first and the older value
//!   returns.
//!
//! And under concurrency: syncs racing a writer that reuses slots, and a scan racing a key
//! that never stops moving.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tierbase::device::{CrashSimConfig, Durability, PmemRegion, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

mod kv_common;
use kv_common::crash_opts;

const FIXED: RecordLayout = RecordLayout::Fixed {
    key_size: 16,
    value_size: 40,
};

/// The crash tests' small store (`kv_common::crash_opts`), one recovery thread, deferring.
fn opts(layout: RecordLayout) -> KvOptions {
    crash_opts(layout)
        .recovery_threads(1)
        .durability(Durability::None)
}

/// A store on a real file (the concurrent tests), room to grow.
fn large_opts(layout: RecordLayout, durability: Durability) -> KvOptions {
    KvOptions::default()
        .reclaim(None)
        .layout(layout)
        .region(RegionOptions {
            reserve: 1 << 30,
            ..RegionOptions::default()
        })
        .durability(durability)
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

fn records_beyond_the_durable_high_water_mark_never_return(layout: RecordLayout) {
    let o = opts(layout);
    for seed in 0..200u64 {
        let cfg = CrashSimConfig {
            crash_after_fences: None,
            unflushed_survival: 0.9,
            seed,
            ..CrashSimConfig::default()
        };
        let region = PmemRegion::simulated(0, cfg, &o.region).unwrap();
        let store = KvStore::create_in(region, &o).unwrap();
        let mut c = store.client();
        c.put(&key(b'a', 0), &val(0)).unwrap();
        store.sync().unwrap();
        // Enough never-synced inserts to take further fresh blocks.
        for i in 0..300 {
            c.put(&key(b'b', i), &val(i)).unwrap();
        }
        drop(c);
        let image = store.region().power_loss().unwrap();
        drop(store);
        // First reboot: the b keys were never synced; any subset is fine.
        let region = PmemRegion::from_image(&image, CrashSimConfig::default(), &o.region).unwrap();
        let store = KvStore::open_in(region, &o).unwrap();
        let mut present_after_first = std::collections::BTreeSet::new();
        for i in 0..300 {
            if store.get(&key(b'b', i)).unwrap().is_some() {
                present_after_first.insert(i);
            }
        }
        // Delete every b key that came back, and sync: from now on no b key may exist.
        for &i in &present_after_first {
            store.delete(&key(b'b', i)).unwrap();
        }
        let mut c = store.client();
        for i in 0..300 {
            c.put(&key(b'c', i), &val(i)).unwrap();
        }
        drop(c);
        store.sync().unwrap();
        store.sync().unwrap();
        let image = store.region().power_loss().unwrap();
        drop(store);
        let region = PmemRegion::from_image(&image, CrashSimConfig::default(), &o.region).unwrap();
        let store = match KvStore::open_in(region, &o) {
            Ok(s) => s,
            Err(e) => panic!("seed {seed}: reopen after a completed sync failed: {e}"),
        };
        let back: Vec<u32> = (0..300)
            .filter(|&i| store.get(&key(b'b', i)).unwrap().is_some())
            .collect();
        assert!(
            back.is_empty(),
            "seed {seed}: b keys (absent/deleted at the last completed sync) came back: {back:?}"
        );
    }
}

#[test]
fn records_beyond_the_durable_high_water_mark_never_return_fixed() {
    records_beyond_the_durable_high_water_mark_never_return(FIXED);
}

#[test]
fn records_beyond_the_durable_high_water_mark_never_return_variable() {
    records_beyond_the_durable_high_water_mark_never_return(RecordLayout::Variable);
}

#[test]
fn a_delete_after_recovery_never_brings_back_a_superseded_duplicate() {
    let o = opts(FIXED);
    let mut hits = 0;
    for seed in 0..200u64 {
        let region = PmemRegion::simulated(0, CrashSimConfig::default(), &o.region).unwrap();
        let store = KvStore::create_in(region, &o).unwrap();
        for k in 0..20 {
            store.put(&key(b'k', k), &val(1)).unwrap();
        }
        store.sync().unwrap();
        for k in 0..20 {
            store.put(&key(b'k', k), &val(2)).unwrap();
        }
        store.sync().unwrap();
        // Last completed sync: every key holds 2.
        let image = store.region().power_loss().unwrap();
        drop(store);
        let cfg = CrashSimConfig {
            unflushed_survival: 0.5,
            seed,
            ..CrashSimConfig::default()
        };
        let region = PmemRegion::from_image(&image, cfg, &o.region).unwrap();
        let store = KvStore::open_in(region, &o).unwrap();
        let dups = store.recovery().duplicates_resolved;
        for k in 0..20 {
            assert_eq!(store.get(&key(b'k', k)).unwrap(), Some(val(2)));
        }
        for k in 0..20 {
            store.delete(&key(b'k', k)).unwrap();
        }
        let image = store.region().power_loss().unwrap();
        drop(store);
        let region = PmemRegion::from_image(&image, CrashSimConfig::default(), &o.region).unwrap();
        let store = KvStore::open_in(region, &o).unwrap();
        for k in 0..20 {
            let got = store.get(&key(b'k', k)).unwrap();
            if got == Some(val(1)) {
                hits += 1;
                eprintln!(
                    "seed {seed} (dups {dups}): key {k} came back with the value replaced before the last completed sync"
                );
            }
        }
    }
    assert_eq!(hits, 0);
}

/// Two threads call `sync()` while a writer overwrites, inserts and deletes on a disk file
/// under `Durability::None`, so one slot is retired, invalidated, reused by the same key and
/// retired again while a sync still works from an older list. Retirements are named by id;
/// before, a stale list invalidated a live record and keys verified present vanished.
#[test]
fn concurrent_syncs_and_slot_reuse() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("aba.tb");
    let _ = std::fs::remove_file(&path);
    let store = Arc::new(KvStore::create(&path, &large_opts(FIXED, Durability::None)).unwrap());
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
        let s = KvStore::open(&path, &large_opts(FIXED, Durability::None)).unwrap();
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

/// A key overwritten without pause for the whole walk (its record moves under every
/// snapshot, and its old slot is reused) must still be returned by every full walk, as must
/// the stable keys.
#[test]
fn scan_meets_a_key_overwritten_throughout_the_walk() {
    let layout = RecordLayout::Fixed {
        key_size: 16,
        value_size: 40,
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scan.tb");
    let store =
        Arc::new(KvStore::create(&path, &large_opts(layout, Durability::Immediate)).unwrap());
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

/// Found by review of the damage checks (2026-12-03). In a fixed layout with in-place values
/// (at most 8 bytes) an insert persists its slot, then its bit: a power loss between the two
/// left a free slot with a stamp, recovery cleared free stamps only in checked layouts, and
/// after the next clean close `verify` called the leftover media damage. Power loss at every
/// fence of a few inserts, then a read-write open, a clean close and `verify`.
#[test]
fn an_in_place_layout_verifies_clean_after_a_crash_and_a_clean_close() {
    let layout = RecordLayout::Fixed {
        key_size: 16,
        value_size: 8,
    };
    let o = crash_opts(layout).recovery_threads(1);
    let key = |i: u32| {
        let mut k = vec![b'k'; 16];
        k[..4].copy_from_slice(&i.to_le_bytes());
        k
    };
    let mut false_alarms = Vec::new();
    for fence in 0..60u64 {
        let cfg = CrashSimConfig {
            crash_after_fences: Some(fence),
            unflushed_survival: 0.0,
            seed: 1,
            ..CrashSimConfig::default()
        };
        let region = PmemRegion::simulated(0, cfg, &o.region).unwrap();
        let Ok(store) = KvStore::create_in(region, &o) else {
            continue;
        };
        let mut c = store.client();
        for i in 0..8u32 {
            if store.region().crashed() {
                break;
            }
            let _ = c.put(&key(i), &[i as u8; 8]);
        }
        drop(c);
        let Some(image) = store.region().power_loss() else {
            continue;
        };
        std::mem::forget(store);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.tb");
        let r = PmemRegion::create(&path, image.len() as u64, &RegionOptions::default()).unwrap();
        r.write(0, &image).unwrap();
        r.persist(0, image.len()).unwrap();
        drop(r);
        let Ok(store) = KvStore::open(&path, &KvOptions::default().reclaim(None)) else {
            continue;
        };
        store.close().unwrap();
        let report = tierbase::kv::verify(&path).unwrap();
        if !report.is_ok() {
            false_alarms.push((fence, report.problems));
        }
    }
    assert!(false_alarms.is_empty(), "{false_alarms:#?}");
}

/// Also found by that review: gets of large records (whose check they now verify) racing
/// their replacement, deletion and the reuse of their blocks must retry, never report damage
/// or return a mix of two values.
#[test]
fn large_gets_racing_replacement_never_see_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tb");
    let store = KvStore::create(
        &path,
        &large_opts(RecordLayout::Variable, Durability::Immediate),
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = store.client();
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for k in 0..4u8 {
                    let v = vec![(n as u8).wrapping_add(k); 70_000 + (n as usize % 5) * 30_000];
                    c.put(&[b'K', k], &v).unwrap();
                    if n.is_multiple_of(3) {
                        c.delete(&[b'K', (k + 1) % 4]).unwrap();
                    }
                    n += 1;
                }
            }
        })
    };
    let mut c = store.client();
    let mut v = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..5_000 {
        for k in 0..4u8 {
            match c.get_into(&[b'K', k], &mut v) {
                Ok(true) => assert!(v.iter().all(|&b| b == v[0]), "a mix of two values"),
                Ok(false) => {}
                Err(e) => errors.push(e.to_string()),
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(errors.is_empty(), "{:?}", &errors[..errors.len().min(3)]);
}
