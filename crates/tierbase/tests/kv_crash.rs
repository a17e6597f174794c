//! Crash consistency: a simulated power loss at every persist point (every fence) of a script
//! of puts, replacing puts, updates, deletes, large records and compaction. After recovery,
//! every acknowledged operation is present, the one in flight is either fully there or not at
//! all, nothing torn or deleted comes back, and the media verifies clean.

use std::collections::BTreeMap;

use tierbase::device::{CrashSimConfig, PmemRegion, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

#[derive(Clone, Debug)]
enum Step {
    Put(Vec<u8>, Vec<u8>),
    Update(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Compact,
}

impl Step {
    fn key(&self) -> Option<&[u8]> {
        match self {
            Step::Put(k, _) | Step::Update(k, _) | Step::Delete(k) => Some(k),
            Step::Compact => None,
        }
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(model: &mut Model, step: &Step) {
    match step {
        Step::Put(k, v) => {
            model.insert(k.clone(), v.clone());
        }
        Step::Update(k, v) => {
            if let Some(slot) = model.get_mut(k) {
                *slot = v.clone();
            }
        }
        Step::Delete(k) => {
            model.remove(k);
        }
        Step::Compact => {}
    }
}

fn script(layout: RecordLayout) -> Vec<Step> {
    let (ks, vs) = match layout {
        RecordLayout::Fixed {
            key_size,
            value_size,
        } => (Some(key_size as usize), Some(value_size as usize)),
        RecordLayout::Variable => (None, None),
    };
    let key = |i: u32| match ks {
        Some(n) => {
            let mut k = vec![0u8; n];
            k[..4].copy_from_slice(&i.to_le_bytes());
            k
        }
        None => format!("key-{i}").into_bytes(),
    };
    let val = |i: u32, len: usize| match vs {
        Some(n) => vec![(i % 250) as u8 + 1; n],
        None => vec![(i % 250) as u8 + 1; len],
    };
    let mut s = Vec::new();
    for i in 0..40 {
        s.push(Step::Put(key(i), val(i, 10 + (i as usize * 37) % 300)));
    }
    for i in (0..40).step_by(4) {
        s.push(Step::Put(key(i), val(i + 100, 50)));
    }
    for i in (1..40).step_by(6) {
        s.push(Step::Update(key(i), val(i + 200, 8)));
    }
    s.push(Step::Update(key(999), val(7, 8))); // missing key: no effect
    for i in (2..40).step_by(3) {
        s.push(Step::Delete(key(i)));
    }
    if ks.is_none() {
        s.push(Step::Put(b"large".to_vec(), vec![0xC3; 60_000]));
        s.push(Step::Put(key(5), vec![9; 30_000])); // replaces an inline record with a large one
    }
    s.push(Step::Compact);
    for i in 40..50 {
        s.push(Step::Put(key(i), val(i, 120)));
    }
    if ks.is_none() {
        s.push(Step::Put(b"large".to_vec(), vec![1; 20])); // large replaced by inline
        s.push(Step::Delete(key(5)));
    }
    s.push(Step::Delete(key(0)));
    s
}

fn opts(layout: RecordLayout) -> KvOptions {
    // No background reclaimer: the persist points must be the script's own.
    KvOptions::default()
        .reclaim(None)
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(4 * 2 * 4096)
        .recovery_threads(2)
        .region(RegionOptions {
            reserve: 64 << 20,
            ..RegionOptions::default()
        })
}

fn run_step(store: &KvStore, step: &Step) {
    match step {
        Step::Put(k, v) => {
            store.client().put(k, v).unwrap();
        }
        Step::Update(k, v) => {
            store.client().update(k, v).unwrap();
        }
        Step::Delete(k) => {
            store.delete(k).unwrap();
        }
        Step::Compact => {
            store.compact(0.0).unwrap();
        }
    }
}

/// Runs the script with a power loss after `crash_at` fences; returns the number of fences the
/// whole run took when it did not crash.
fn crash_run(layout: RecordLayout, crash_at: Option<u64>, survival: f64) -> u64 {
    let o = opts(layout);
    let steps = script(layout);
    let cfg = CrashSimConfig {
        crash_after_fences: crash_at,
        unflushed_survival: survival,
        seed: crash_at.unwrap_or(0),
        ..CrashSimConfig::default()
    };
    let region = PmemRegion::simulated(0, cfg, &o.region).unwrap();
    let created = KvStore::create_in(region, &o);
    let store = match created {
        Ok(s) if !s.region().crashed() => s,
        Ok(s) => {
            // Power was lost while creating: the image must not open as a store with data.
            let image = s.region().power_loss().unwrap();
            let region =
                PmemRegion::from_image(&image, CrashSimConfig::default(), &o.region).unwrap();
            if let Ok(s) = KvStore::open_in(region, &o) {
                assert!(s.is_empty());
            }
            return 0;
        }
        Err(e) => panic!("create failed without a crash: {e}"),
    };
    let mut model = Model::new();
    let mut in_flight = None;
    for step in &steps {
        run_step(&store, step);
        if store.region().crashed() {
            in_flight = Some(step.clone());
            break;
        }
        apply(&mut model, step);
    }
    if crash_at.is_none() {
        return store.region().persist_points();
    }
    let image = store.region().power_loss().unwrap();
    drop(store);
    let region = PmemRegion::from_image(&image, CrashSimConfig::default(), &o.region).unwrap();
    let report = tierbase::kv::verify_region(&region).unwrap();
    assert!(
        report.is_ok(),
        "crash at {crash_at:?}: {:?}",
        report.problems
    );
    let store = KvStore::open_in(region, &o)
        .unwrap_or_else(|e| panic!("reopen after crash at {crash_at:?}: {e}"));

    let mut after = model.clone();
    if let Some(step) = &in_flight {
        apply(&mut after, step);
    }
    let touched = in_flight.as_ref().and_then(Step::key);
    let mut keys: Vec<Vec<u8>> = model.keys().chain(after.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let mut value = Vec::new();
    for k in &keys {
        let found = store.get_into(k, &mut value).unwrap();
        let got = found.then(|| value.clone());
        let before = model.get(k).cloned();
        if touched == Some(k.as_slice()) {
            let now = after.get(k).cloned();
            assert!(
                got == before || got == now,
                "crash at {crash_at:?} during {in_flight:?}: key {k:?} is neither before nor after"
            );
        } else {
            assert_eq!(
                got, before,
                "crash at {crash_at:?} (in flight {in_flight:?}): key {k:?}"
            );
        }
    }
    // Nothing else: every record the store holds is one of the keys above.
    let mut n = 0;
    store
        .for_each(|k, _| {
            assert!(
                keys.iter().any(|x| x == k),
                "resurrected or unknown key {k:?}"
            );
            n += 1;
        })
        .unwrap();
    assert_eq!(n, store.len());
    // And the recovered store keeps working.
    let (k, v) = match layout {
        RecordLayout::Fixed {
            key_size,
            value_size,
        } => (
            vec![0xEE; key_size as usize],
            vec![0xEF; value_size as usize],
        ),
        RecordLayout::Variable => (b"after-crash".to_vec(), b"ok".to_vec()),
    };
    assert!(store.client().put(&k, &v).unwrap());
    assert!(store.get_into(&k, &mut value).unwrap());
    assert_eq!(value, v);
    0
}

fn every_persist_point(layout: RecordLayout) {
    let total = crash_run(layout, None, 0.0);
    assert!(
        total > 100,
        "script should have many persist points, has {total}"
    );
    eprintln!("{layout}: power loss at each of {total} persist points");
    for n in 0..=total {
        // Alternate: only fenced data survives / half of the unflushed words survive too.
        let survival = if n % 2 == 0 { 0.0 } else { 0.5 };
        crash_run(layout, Some(n), survival);
    }
}

#[test]
fn variable_layout_survives_a_crash_at_every_persist_point() {
    every_persist_point(RecordLayout::Variable);
}

#[test]
fn fixed_layout_survives_a_crash_at_every_persist_point() {
    every_persist_point(RecordLayout::Fixed {
        key_size: 16,
        value_size: 64,
    });
}

#[test]
fn fixed_in_place_layout_survives_a_crash_at_every_persist_point() {
    every_persist_point(RecordLayout::Fixed {
        key_size: 8,
        value_size: 8,
    });
}
