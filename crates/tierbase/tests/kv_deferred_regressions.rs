//! Regressions found by review of the deferred-durability paths (crash simulator, power loss
//! with unflushed words surviving at random, as a page cache may write them):
//! - the header's high-water mark of used blocks must reach media before any record in a new
//!   block can: otherwise, after a power loss, records beyond the durable mark stay on media
//!   unscanned, and come back once their block is handed out again;
//! - recovery's invalidations of superseded duplicates must be durable before the store takes
//!   writes: otherwise a delete of the winner can reach media first and the older value
//!   returns.

use tierbase::device::{CrashSimConfig, Durability, PmemRegion, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

const FIXED: RecordLayout = RecordLayout::Fixed {
    key_size: 16,
    value_size: 40,
};

fn opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .reclaim(None)
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(4 * 2 * 4096)
        .recovery_threads(1)
        .region(RegionOptions {
            reserve: 64 << 20,
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
