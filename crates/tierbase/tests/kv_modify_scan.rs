//! The engine store interface on the hybrid KV store: atomic read-modify-write
//! (`KvStore::modify`, the base of a server's INCR/APPEND/SET NX) and the cursor walk
//! (`KvStore::scan`, a server's SCAN), alone and under concurrent writers.

use std::collections::{BTreeSet, HashSet};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use tierbase::Error;
use tierbase::kv::{KvOptions, KvStore, ReclaimOptions, RecordLayout};
use tierbase::store::{Change, Store};

fn store_at(dir: &tempfile::TempDir, opts: &KvOptions) -> KvStore {
    KvStore::create(dir.path().join("s.tb"), opts).expect("create")
}

fn small_opts() -> KvOptions {
    KvOptions::default().chunk_size(1 << 20)
}

#[test]
fn modify_keeps_puts_and_deletes_and_sees_the_current_value() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, &small_opts());
    let mut seen = Vec::new();
    store
        .modify(b"k", &mut |old| {
            seen.push(old.map(<[u8]>::to_vec));
            Change::Put(b"one".to_vec())
        })
        .unwrap();
    store
        .modify(b"k", &mut |old| {
            seen.push(old.map(<[u8]>::to_vec));
            Change::Keep
        })
        .unwrap();
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"one"[..]));
    store
        .modify(b"k", &mut |old| {
            seen.push(old.map(<[u8]>::to_vec));
            Change::Delete
        })
        .unwrap();
    assert_eq!(store.get(b"k").unwrap(), None);
    store.modify(b"k", &mut |_| Change::Delete).unwrap();
    assert_eq!(
        seen,
        vec![None, Some(b"one".to_vec()), Some(b"one".to_vec())]
    );
    assert_eq!(store.len(), 0);
}

#[test]
fn modify_checks_sizes_like_put() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_opts().layout(RecordLayout::Fixed {
        key_size: 8,
        value_size: 8,
    });
    let store = store_at(&dir, &opts);
    let err = store
        .modify(b"12345678", &mut |_| Change::Put(vec![0; 9]))
        .unwrap_err();
    assert!(matches!(err, Error::WrongSize { .. }), "{err}");
    assert_eq!(store.len(), 0);
}

/// Counters incremented by several threads through `modify`: no increment is lost, and the
/// values the increments saw are exactly 0..n per key (each increment saw its predecessor's
/// result, so the history is a sequence: linearizable).
#[test]
fn concurrent_increments_through_modify_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, &small_opts());
    const THREADS: usize = 4;
    const PER_THREAD: usize = 1500;
    let keys: [&[u8]; 3] = [b"hot-a", b"hot-b", b"hot-c"];
    let barrier = Barrier::new(THREADS);
    let seen: Vec<Vec<(usize, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (store, barrier) = (&store, &barrier);
                s.spawn(move || {
                    let mut client = store.client();
                    barrier.wait();
                    let mut seen = Vec::with_capacity(PER_THREAD);
                    for i in 0..PER_THREAD {
                        let k = (i + t) % keys.len();
                        let mut before = 0u64;
                        client
                            .modify(keys[k], &mut |old| {
                                before = old.map_or(0, |v| {
                                    u64::from_le_bytes(v.try_into().expect("8-byte counter"))
                                });
                                Change::Put((before + 1).to_le_bytes().to_vec())
                            })
                            .unwrap();
                        seen.push((k, before));
                        // Plain puts of other keys interleave with the counters.
                        client
                            .put(format!("other-{t}-{i}").as_bytes(), b"x")
                            .unwrap();
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (k, key) in keys.iter().enumerate() {
        let mut befores: Vec<u64> = seen
            .iter()
            .flatten()
            .filter(|(kk, _)| *kk == k)
            .map(|(_, b)| *b)
            .collect();
        befores.sort_unstable();
        let n = befores.len() as u64;
        assert_eq!(
            befores,
            (0..n).collect::<Vec<_>>(),
            "key {k}: increments saw {befores:?}"
        );
        let value = store.get(key).unwrap().unwrap();
        assert_eq!(u64::from_le_bytes(value.try_into().unwrap()), n);
    }
}

fn walk(store: &KvStore, count: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut cursor = 0;
    let mut calls = 0;
    loop {
        cursor = store.scan(cursor, count, &mut out).unwrap();
        calls += 1;
        assert!(calls <= 1 << 17, "the walk does not end");
        if cursor == 0 {
            return out;
        }
    }
}

#[test]
fn a_full_scan_returns_every_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(&dir, &small_opts());
    assert!(walk(&store, 10).is_empty());
    let n = 120_000u32; // several index segments, so several splits happened
    let mut client = store.client();
    for i in 0..n {
        client
            .put(format!("key-{i}").as_bytes(), &i.to_le_bytes())
            .unwrap();
    }
    for count in [1, 10, 1000, 1 << 20] {
        let keys = walk(&store, count);
        let unique: HashSet<_> = keys.iter().cloned().collect();
        assert_eq!(
            keys.len(),
            n as usize,
            "count {count}: duplicates or misses"
        );
        assert_eq!(unique.len(), n as usize);
    }
    // The trait object gives the same walk.
    let dynamic: &dyn Store = &store;
    let mut out = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = dynamic.scan(cursor, 100, &mut out).unwrap();
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(out.len(), n as usize);
    // A cursor that no walk returns ends the walk.
    assert_eq!(store.scan(1 << 40, 10, &mut out).unwrap(), 0);
}

/// Keys present for the whole walk are all returned while other threads insert (splitting
/// the index), delete, overwrite the stable keys (moving their records) and compact.
#[test]
fn a_scan_under_concurrent_writes_meets_every_stable_key() {
    let dir = tempfile::tempdir().unwrap();
    let opts = small_opts().reclaim(Some(ReclaimOptions::default()));
    let store = store_at(&dir, &opts);
    let stable: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("stable-{i}").into_bytes())
        .collect();
    let doomed: Vec<Vec<u8>> = (0..20_000)
        .map(|i| format!("doomed-{i}").into_bytes())
        .collect();
    {
        let mut c = store.client();
        for k in stable.iter().chain(&doomed) {
            c.put(k, b"initial value, long enough to move").unwrap();
        }
    }
    let done = AtomicBool::new(false);
    let walks = std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = store.client();
            let mut i = 0u64;
            while !done.load(Ordering::Relaxed) {
                c.put(format!("new-{i}").as_bytes(), b"v").unwrap();
                let k = &stable[(i as usize * 7) % stable.len()];
                c.put(k, format!("overwritten {i}").as_bytes()).unwrap();
                i += 1;
            }
        });
        s.spawn(|| {
            let mut c = store.client();
            for (i, k) in doomed.iter().enumerate() {
                if done.load(Ordering::Relaxed) {
                    break;
                }
                c.delete(k).unwrap();
                if i % 2000 == 0 {
                    store.compact(0.2).unwrap();
                }
            }
        });
        let walks: Vec<Vec<Vec<u8>>> = [5, 50, 500].iter().map(|&c| walk(&store, c)).collect();
        done.store(true, Ordering::Relaxed);
        walks
    });
    let stable_set: BTreeSet<&[u8]> = stable.iter().map(Vec::as_slice).collect();
    for keys in walks {
        let got: BTreeSet<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let missing: Vec<_> = stable_set.difference(&got).take(5).collect();
        assert!(
            missing.is_empty(),
            "stable keys missed by a scan: {missing:?}"
        );
    }
}
