//! Model-based property tests: random operation sequences against a `BTreeMap`, with
//! "reopen" meaning a simulated power loss (random unflushed lines survive) and recovery.
//! Every completed operation must survive; nothing else may appear.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tierbase::device::{CrashSimConfig, PmemRegion, RegionOptions};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

#[derive(Clone, Debug)]
enum Op {
    Put(u8, Vec<u8>),
    Update(u8, Vec<u8>),
    Delete(u8),
    Get(u8),
    /// A batched read (`get_many`) of these keys, repeats allowed.
    GetMany(Vec<u8>),
    Crash(u64),
    Compact,
}

struct Setup {
    layout: RecordLayout,
    mask: u64,
}

fn key_bytes(setup: &Setup, k: u8) -> Vec<u8> {
    match setup.layout {
        RecordLayout::Fixed { key_size, .. } => {
            let mut v = vec![0u8; key_size as usize];
            v[0] = k;
            if key_size > 1 {
                v[key_size as usize - 1] = k.wrapping_mul(31);
            }
            v
        }
        // Variable keys of varying length, sharing prefixes.
        RecordLayout::Variable => format!("k{}{}", k, "x".repeat((k % 5) as usize)).into_bytes(),
    }
}

fn value_bytes(setup: &Setup, raw: &[u8]) -> Vec<u8> {
    match setup.layout {
        RecordLayout::Fixed { value_size, .. } => {
            let mut v = raw.to_vec();
            v.resize(value_size as usize, 0xAB);
            v
        }
        RecordLayout::Variable => raw.to_vec(),
    }
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let key = 0u8..24;
    let value = prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 300..1500),
        1 => Just(vec![0x5Au8; 30_000]), // larger than a 24 KiB block: a large record
    ];
    let op = prop_oneof![
        10 => (key.clone(), value.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        3 => (key.clone(), value).prop_map(|(k, v)| Op::Update(k, v)),
        4 => key.clone().prop_map(Op::Delete),
        4 => key.clone().prop_map(Op::Get),
        2 => proptest::collection::vec(key, 0..20).prop_map(Op::GetMany),
        1 => any::<u64>().prop_map(Op::Crash),
        1 => Just(Op::Compact),
    ];
    proptest::collection::vec(op, 1..120)
}

fn kv_opts(setup: &Setup) -> KvOptions {
    KvOptions::default()
        .reclaim(None)
        .layout(setup.layout)
        .pages_per_block(6)
        .chunk_size(2 * 6 * 4096)
        .recovery_threads(2)
        .region(RegionOptions {
            reserve: 256 << 20,
            ..RegionOptions::default()
        })
        .fingerprint_mask(setup.mask)
}

fn run(setup: &Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let opts = kv_opts(setup);
    let region = PmemRegion::simulated(0, CrashSimConfig::default(), &opts.region).unwrap();
    let mut store = KvStore::create_in(region, &opts).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut out = Vec::new();
    let fixed_small_value =
        matches!(setup.layout, RecordLayout::Fixed { value_size, .. } if value_size <= 8);
    let mut found_updates_since_open = 0u64;
    for op in ops {
        match op {
            Op::Put(k, v) => {
                let (k, v) = (key_bytes(setup, *k), value_bytes(setup, v));
                let was_new = store.client().put(&k, &v).unwrap();
                prop_assert_eq!(was_new, !model.contains_key(&k));
                model.insert(k, v);
            }
            Op::Update(k, v) => {
                let (k, v) = (key_bytes(setup, *k), value_bytes(setup, v));
                let found = store.client().update(&k, &v).unwrap();
                prop_assert_eq!(found, model.contains_key(&k));
                if found {
                    found_updates_since_open += 1;
                    model.insert(k, v);
                }
            }
            Op::Delete(k) => {
                let k = key_bytes(setup, *k);
                prop_assert_eq!(store.delete(&k).unwrap(), model.remove(&k).is_some());
            }
            Op::Get(k) => {
                let k = key_bytes(setup, *k);
                let found = store.get_into(&k, &mut out).unwrap();
                prop_assert_eq!(found, model.contains_key(&k));
                if found {
                    prop_assert_eq!(&out, &model[&k]);
                }
            }
            Op::GetMany(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|k| key_bytes(setup, *k)).collect();
                let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                // Buffers start dirty: a missing key must leave its buffer empty.
                let mut values = vec![vec![0xEEu8; 3]; keys.len()];
                let mut found = vec![true; keys.len()];
                store.get_many(&refs, &mut values, &mut found).unwrap();
                for ((k, v), f) in keys.iter().zip(&values).zip(&found) {
                    prop_assert_eq!(*f, model.contains_key(k));
                    match model.get(k) {
                        Some(m) => prop_assert_eq!(v, m),
                        None => prop_assert!(v.is_empty()),
                    }
                }
            }
            Op::Compact => {
                store.compact(0.0).unwrap();
            }
            Op::Crash(seed) => {
                let image = store.region().power_loss().unwrap();
                drop(store);
                let cfg = CrashSimConfig {
                    unflushed_survival: 0.5,
                    seed: *seed,
                    ..CrashSimConfig::default()
                };
                let region = PmemRegion::from_image(&image, cfg, &opts.region).unwrap();
                let report = tierbase::kv::verify_region(&region).unwrap();
                prop_assert!(report.is_ok(), "{:?}", report.problems);
                store = KvStore::open_in(region, &opts).unwrap();
                found_updates_since_open = 0;
            }
        }
        prop_assert_eq!(store.len(), model.len());
    }
    // Final state, also through iteration.
    let mut seen = BTreeMap::new();
    store
        .for_each(|k, v| {
            seen.insert(k.to_vec(), v.to_vec());
        })
        .unwrap();
    prop_assert_eq!(&seen, &model);
    if fixed_small_value {
        // Every successful update of an 8-byte value went in place (no copy-on-write).
        prop_assert_eq!(store.metrics().in_place_updates, found_updates_since_open);
    } else {
        prop_assert_eq!(store.metrics().in_place_updates, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn variable_records_match_a_btreemap(ops in ops()) {
        run(&Setup { layout: RecordLayout::Variable, mask: u64::MAX }, &ops)?;
    }

    #[test]
    fn variable_records_with_colliding_fingerprints(ops in ops()) {
        // Two fingerprint bits: almost every key collides with another.
        run(&Setup { layout: RecordLayout::Variable, mask: 0b11 }, &ops)?;
    }

    #[test]
    fn fixed_records_match_a_btreemap(ops in ops()) {
        run(&Setup { layout: RecordLayout::Fixed { key_size: 16, value_size: 100 }, mask: u64::MAX }, &ops)?;
    }

    #[test]
    fn fixed_records_with_colliding_fingerprints(ops in ops()) {
        run(&Setup { layout: RecordLayout::Fixed { key_size: 12, value_size: 20 }, mask: 0b1 }, &ops)?;
    }

    #[test]
    fn fixed_small_records_update_in_place(ops in ops()) {
        run(&Setup { layout: RecordLayout::Fixed { key_size: 8, value_size: 8 }, mask: u64::MAX }, &ops)?;
    }
}
