//! Concurrency: several writer threads on overlapping keys, readers checking that no value is
//! ever torn, deletes and compaction running at the same time; the final state must be one the
//! operations could have produced.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use tierbase::device::RegionOptions;
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

const KEYS: u32 = 96;
const WRITERS: u32 = 3;
const ROUNDS: u32 = 3000;

/// A self-checking value: (writer, round, key) repeated, so any mix of two writes is visible.
fn value(layout: RecordLayout, writer: u32, round: u32, key: u32) -> Vec<u8> {
    let len = match layout {
        RecordLayout::Fixed { value_size, .. } => value_size as usize,
        RecordLayout::Variable => 24 + ((writer * 7 + round * 13 + key) % 200) as usize,
    };
    let unit = [writer.to_le_bytes(), round.to_le_bytes(), key.to_le_bytes()].concat();
    unit.iter().copied().cycle().take(len).collect()
}

fn decode(v: &[u8]) -> Option<(u32, u32, u32)> {
    let u = |i: usize| u32::from_le_bytes([v[i], v[i + 1], v[i + 2], v[i + 3]]);
    if v.len() < 12 {
        return None;
    }
    let (w, r, k) = (u(0), u(4), u(8));
    let unit = [w.to_le_bytes(), r.to_le_bytes(), k.to_le_bytes()].concat();
    let ok = v.iter().zip(unit.iter().cycle()).all(|(a, b)| a == b);
    ok.then_some((w, r, k))
}

fn key(layout: RecordLayout, k: u32) -> Vec<u8> {
    match layout {
        RecordLayout::Fixed { key_size, .. } => {
            let mut v = vec![0u8; key_size as usize];
            v[..4].copy_from_slice(&k.to_le_bytes());
            v
        }
        RecordLayout::Variable => format!("k{k}").into_bytes(),
    }
}

fn hammer(layout: RecordLayout, mask: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.tb");
    let opts = KvOptions::default()
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(64 * 8192)
        .fingerprint_mask(mask)
        .region(RegionOptions {
            reserve: 1 << 30,
            ..RegionOptions::default()
        });
    let store = KvStore::create(&path, &opts).unwrap();
    let stop = AtomicBool::new(false);
    // Per writer: the last value it wrote (or deleted: None) for each key, in its own order.
    let finals: Vec<HashMap<u32, Option<(u32, u32)>>> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = &store;
                s.spawn(move || {
                    let mut c = store.client();
                    let mut last = HashMap::new();
                    for r in 0..ROUNDS {
                        let k = (r * 7 + w * 31) % KEYS;
                        if r % 11 == 5 {
                            c.delete(&key(layout, k)).unwrap();
                            last.insert(k, None);
                        } else if r % 5 == 0 {
                            if c.update(&key(layout, k), &value(layout, w, r, k)).unwrap() {
                                last.insert(k, Some((w, r)));
                            }
                        } else {
                            c.put(&key(layout, k), &value(layout, w, r, k)).unwrap();
                            last.insert(k, Some((w, r)));
                        }
                    }
                    last
                })
            })
            .collect();
        let store = &store;
        let stop = &stop;
        s.spawn(move || {
            let mut v = Vec::new();
            let mut reads = 0u64;
            while !stop.load(Ordering::Acquire) || reads < 1000 {
                for k in 0..KEYS {
                    if store.get_into(&key(layout, k), &mut v).unwrap() {
                        let (_, _, kk) =
                            decode(&v).unwrap_or_else(|| panic!("torn value for key {k}"));
                        assert_eq!(kk, k, "value of another key returned");
                    }
                    reads += 1;
                }
            }
        });
        s.spawn(move || {
            while !stop.load(Ordering::Acquire) {
                store.compact(0.3).unwrap();
                std::thread::yield_now();
            }
        });
        let finals = writers.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Release);
        finals
    });

    let check = |store: &KvStore| {
        let mut v = Vec::new();
        let mut live = 0;
        for k in 0..KEYS {
            // The final value must be the last write of one of the writers that touched k.
            let candidates: Vec<Option<(u32, u32)>> =
                finals.iter().filter_map(|f| f.get(&k).copied()).collect();
            let got = store.get_into(&key(layout, k), &mut v).unwrap().then(|| {
                let (w, r, kk) = decode(&v).expect("torn value at rest");
                assert_eq!(kk, k);
                (w, r)
            });
            if candidates.is_empty() {
                assert_eq!(got, None);
            } else {
                assert!(
                    candidates.contains(&got),
                    "key {k}: {got:?} not in {candidates:?}"
                );
            }
            live += usize::from(got.is_some());
        }
        assert_eq!(store.len(), live);
    };
    check(&store);
    let m = store.metrics();
    assert!(m.puts > 0 && m.gets > 0);
    store.close().unwrap();
    let store = KvStore::open(&path, &opts).unwrap();
    check(&store);
    // Verification reads the file on its own, so the store must be closed first (it holds
    // the file's lock).
    assert!(matches!(
        tierbase::kv::verify(&path),
        Err(tierbase::Error::Locked { .. })
    ));
    store.close().unwrap();
    assert!(tierbase::kv::verify(&path).unwrap().is_ok());
}

#[test]
fn variable_records_under_concurrent_writers_readers_and_compaction() {
    hammer(RecordLayout::Variable, u64::MAX);
}

#[test]
fn fixed_records_under_concurrent_writers_readers_and_compaction() {
    hammer(
        RecordLayout::Fixed {
            key_size: 16,
            value_size: 48,
        },
        u64::MAX,
    );
}

#[test]
fn colliding_fingerprints_under_concurrency() {
    hammer(RecordLayout::Variable, 0b111);
}
