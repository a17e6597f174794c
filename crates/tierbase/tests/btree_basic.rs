//! The B+-tree store's basic behaviour: model checks against a BTreeMap through splits,
//! merges, reopen and range scans in both directions.

use std::collections::BTreeMap;
use std::ops::Bound;

use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::device::Durability;

fn opts() -> BTreeOptions {
    BTreeOptions::default()
        .page_size(4096)
        .dram_bytes(64 * 4096)
        .durability(Durability::None)
}

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(2_654_435_761) % 1_000_003).into_bytes()
}

fn check_all(s: &BTreeStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    assert_eq!(s.len(), model.len() as u64);
    let mut seen = Vec::new();
    s.range(Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        seen.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(seen, want);
    let mut back = Vec::new();
    s.range(Bound::Unbounded, Bound::Unbounded, true, |k, v| {
        back.push((k.to_vec(), v.to_vec()));
        true
    })
    .unwrap();
    back.reverse();
    assert_eq!(back, want);
    let (_, keys) = s.verify().unwrap();
    assert_eq!(keys, model.len() as u64);
}

#[test]
fn splits_merges_reopen_and_scans_match_a_btreemap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let mut model = BTreeMap::new();
    {
        let s = BTreeStore::create(&path, &opts()).unwrap();
        for i in 0..5000u64 {
            let v = vec![(i % 251) as u8; (i % 300) as usize];
            assert_eq!(
                s.put(&key(i), &v).unwrap(),
                model.insert(key(i), v).is_none()
            );
        }
        check_all(&s, &model);
        for i in (0..5000u64).step_by(3) {
            let v = vec![7u8; (i % 700) as usize];
            assert_eq!(
                s.put(&key(i), &v).unwrap(),
                model.insert(key(i), v).is_none()
            );
        }
        check_all(&s, &model);
        for i in 0..4500u64 {
            assert_eq!(s.delete(&key(i)).unwrap(), model.remove(&key(i)).is_some());
        }
        check_all(&s, &model);
        s.close().unwrap();
    }
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(
        s.restart_report().frames,
        0,
        "a clean close leaves nothing to replay"
    );
    check_all(&s, &model);
    // Bounded scans.
    let keys: Vec<_> = model.keys().cloned().collect();
    let (lo, hi) = (&keys[10], &keys[200]);
    let mut got = Vec::new();
    s.range(Bound::Included(lo), Bound::Excluded(hi), false, |k, _| {
        got.push(k.to_vec());
        true
    })
    .unwrap();
    assert_eq!(got, keys[10..200].to_vec());
    let mut got = Vec::new();
    s.range(Bound::Excluded(lo), Bound::Included(hi), true, |k, _| {
        got.push(k.to_vec());
        true
    })
    .unwrap();
    let mut want = keys[11..=200].to_vec();
    want.reverse();
    assert_eq!(got, want);
    // Delete everything: the tree shrinks back to a root leaf.
    for k in &keys {
        assert!(s.delete(k).unwrap());
    }
    model.clear();
    check_all(&s, &model);
}

#[test]
fn unclean_shutdown_replays_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let mut model = BTreeMap::new();
    {
        let s = BTreeStore::create(&path, &opts().durability(Durability::Immediate)).unwrap();
        for i in 0..3000u64 {
            let v = i.to_le_bytes().to_vec();
            s.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        for i in 0..1000u64 {
            s.delete(&key(i)).unwrap();
            model.remove(&key(i));
        }
        s.abandon();
    }
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert!(s.restart_report().frames > 0);
    check_all(&s, &model);
}

#[test]
fn large_values_live_in_overflow_chains_whose_pages_are_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let o = BTreeOptions::default()
        .page_size(4096)
        .dram_bytes(8 << 20)
        .durability(Durability::None);
    let s = BTreeStore::create(&path, &o).unwrap();
    let big =
        |i: u64, len: usize| -> Vec<u8> { (0..len).map(|j| (i as usize + j * 7) as u8).collect() };
    let mut model = BTreeMap::new();
    for i in 0..40u64 {
        let v = big(i, 1000 + (i as usize * 7919) % 300_000);
        s.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    check_all(&s, &model);
    let size_after_first = std::fs::metadata(path.join("pages.tb")).unwrap().len();
    // Overwrite every value many times: freed chains are reused, the file does not grow much.
    for round in 0..10u64 {
        for i in 0..40u64 {
            let v = big(i + round, 1000 + ((i + round) as usize * 7919) % 300_000);
            s.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
    }
    check_all(&s, &model);
    let size_after = std::fs::metadata(path.join("pages.tb")).unwrap().len();
    assert!(
        size_after <= 3 * size_after_first,
        "page file grew from {size_after_first} to {size_after} under overwrites"
    );
    for i in (0..40u64).step_by(2) {
        assert!(s.delete(&key(i)).unwrap());
        model.remove(&key(i));
    }
    assert!(matches!(
        s.put(b"huge", &vec![0; s.limits().max_value + 1]),
        Err(tierbase::Error::ValueTooLarge { .. })
    ));
    s.close().unwrap();
    let s = BTreeStore::open(&path, &o).unwrap();
    check_all(&s, &model);
}

/// Scans copy a leaf in chunks and re-enter it from the last key copied: bounded scans from
/// many starting points, both directions, with limits around the chunk size, return what a
/// BTreeMap returns; and a full scan whose callback inserts and deletes keys meanwhile returns
/// every key present throughout exactly once, in order.
#[test]
fn scans_resume_inside_leaves_in_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let s = BTreeStore::create(dir.path().join("t"), &opts()).unwrap();
    let mut model = BTreeMap::new();
    // ~180 entries per 4 KiB leaf: several chunks per leaf.
    for i in 0..3000u64 {
        s.put(&key(i), b"v").unwrap();
        model.insert(key(i), b"v".to_vec());
    }
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for start in keys
        .iter()
        .step_by(97)
        .chain([&b"a".to_vec(), &b"z".to_vec()])
    {
        for limit in [1usize, 31, 32, 33, 127, 128, 129, 500, 5000] {
            for reverse in [false, true] {
                let mut got = Vec::new();
                let (from, to) = if reverse {
                    (Bound::Unbounded, Bound::Included(start.as_slice()))
                } else {
                    (Bound::Included(start.as_slice()), Bound::Unbounded)
                };
                s.range(from, to, reverse, |k, _| {
                    got.push(k.to_vec());
                    got.len() < limit
                })
                .unwrap();
                let want: Vec<Vec<u8>> = if reverse {
                    model
                        .range::<Vec<u8>, _>(..=start.clone())
                        .rev()
                        .take(limit)
                        .map(|(k, _)| k.clone())
                        .collect()
                } else {
                    model
                        .range::<Vec<u8>, _>(start.clone()..)
                        .take(limit)
                        .map(|(k, _)| k.clone())
                        .collect()
                };
                assert_eq!(
                    got, want,
                    "start {start:?}, limit {limit}, reverse {reverse}"
                );
            }
        }
    }
    for reverse in [false, true] {
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut added = Vec::new();
        s.range(Bound::Unbounded, Bound::Unbounded, reverse, |k, _| {
            seen.push(k.to_vec());
            if seen.len().is_multiple_of(7) {
                // A key anywhere in the tree, splitting leaves now and then, and the removal
                // of one added before.
                let extra = format!("{}x{}", String::from_utf8_lossy(k), seen.len()).into_bytes();
                s.put(&extra, &[1; 40]).unwrap();
                added.push(extra);
                if added.len().is_multiple_of(3) {
                    s.delete(&added[added.len() / 2]).unwrap();
                }
            }
            true
        })
        .unwrap();
        let ordered = seen
            .windows(2)
            .all(|w| if reverse { w[0] > w[1] } else { w[0] < w[1] });
        assert!(ordered, "scan out of order (reverse {reverse})");
        let stable: Vec<&Vec<u8>> = seen.iter().filter(|k| model.contains_key(*k)).collect();
        assert_eq!(stable.len(), keys.len(), "reverse {reverse}");
        for k in added {
            s.delete(&k).unwrap();
        }
    }
}

fn stat(s: &BTreeStore, name: &str) -> u64 {
    s.stats()
        .into_iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// A page's image is logged on its first change in a log generation, not on its first change
/// after each load: once the data outgrows DRAM, almost every update meets a leaf evicted
/// since its image was logged, and an image per load made the log ~60× larger. Restart after
/// a crash still rebuilds every value from those images and the deltas after them.
#[test]
fn pages_loaded_again_in_a_generation_log_deltas_not_images() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    // ~600 leaves of 4 KiB against 64 frames, and no checkpoint during the test.
    let o = opts()
        .durability(Durability::Immediate)
        .checkpoint_bytes(1 << 40);
    let s = BTreeStore::create(&path, &o).unwrap();
    let mut model = BTreeMap::new();
    let n = 20_000u64;
    for i in 0..n {
        let v = vec![(i % 251) as u8; 100];
        s.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let (log_before, evictions_before) = (stat(&s, "wal_bytes"), stat(&s, "evictions"));
    let updates = 2_000u64;
    for j in 0..updates {
        let i = j.wrapping_mul(7_919) % n;
        let v = vec![(j % 253) as u8; 100];
        s.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let per_update = (stat(&s, "wal_bytes") - log_before) / updates;
    // The updates did meet evicted leaves (else this proves nothing) ...
    assert!(stat(&s, "evictions") - evictions_before > updates / 2);
    // ... and logged deltas (a key, a value and ~30 bytes of framing), not 2–4 KiB images.
    assert!(per_update < 400, "{per_update} bytes of log per update");
    s.abandon();
    let s = BTreeStore::open(&path, &o).unwrap();
    check_all(&s, &model);
}

/// The DRAM budget holds the pool and, from 2112 KiB on, the log's buffers (264 KiB, or 1/32 of
/// the budget from 8 MiB on);
/// with the log on NVM there are none and the pool gets it all. Writes that nobody waits for
/// are written out (not synced) at the log's tail limit, whatever the budget.
#[test]
fn the_dram_budget_holds_the_pool_and_the_logs_buffers() {
    for (budget, nvm, log_inside) in [
        (256 << 10, false, false),
        (8 << 20, false, true),
        (64 << 20, false, true),
        (8 << 20, true, false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts().dram_bytes(budget);
        if nvm {
            o = o.nvm_bytes(4 << 20);
        }
        let s = BTreeStore::create(dir.path().join("t"), &o).unwrap();
        let (pool, log) = (stat(&s, "pool_bytes"), stat(&s, "log_buffer_bytes"));
        let ctx = format!("budget {budget}, nvm {nvm}: pool {pool}, log {log}");
        assert_eq!(stat(&s, "dram_budget_bytes"), budget, "{ctx}");
        if nvm {
            assert_eq!(log, 0, "{ctx}");
        } else {
            assert!(
                log > 0 && log <= (budget / 32).max(256 << 10) + 8192,
                "{ctx}"
            );
        }
        if log_inside {
            assert!(pool + log <= budget, "{ctx}");
            assert!(pool + log > budget - 2 * 4096, "{ctx}");
        } else if nvm {
            // (Mini pages beyond what the small tier can feed are not made.)
            assert!(pool <= budget, "{ctx}");
        } else {
            assert!(pool <= budget && pool > budget - 2 * 4096, "{ctx}");
        }
        // Far more log than the tail limit, and nothing waits for it: written out meanwhile.
        let (syncs, written) = (stat(&s, "wal_fsyncs"), stat(&s, "wal_bytes_written"));
        for i in 0..6_000u64 {
            s.put(&key(i), &[7u8; 200]).unwrap();
        }
        if !nvm {
            assert!(stat(&s, "wal_bytes_written") > written + (1 << 20), "{ctx}");
            if stat(&s, "dirty_evictions") == 0 {
                // (A dirty page's write-back syncs the log up to the page first.)
                assert_eq!(
                    stat(&s, "wal_fsyncs"),
                    syncs,
                    "{ctx}: written out, not synced"
                );
            }
        }
        s.abandon();
    }
}

/// Once the data has outgrown the pool, a writer that takes the writer lock exclusively reads
/// its leaves in first (a device read under the lock would hold up every writer); while the
/// data fits, it does not (the extra descent would only cost).
#[test]
fn writers_read_their_leaves_in_before_the_mutex_once_the_data_outgrew_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    // 64 frames of 4 KiB.
    let s = BTreeStore::create(dir.path().join("t"), &opts()).unwrap();
    let mut model = BTreeMap::new();
    let put = |s: &BTreeStore, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, i: u64, fill: u8| {
        let v = vec![fill; 100];
        s.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    };
    // ~40 leaves: the data fits.
    for i in 0..1_000 {
        put(&s, &mut model, i, 1);
    }
    assert_eq!(stat(&s, "evictions"), 0);
    assert_eq!(stat(&s, "writer_early_descents"), 0);
    // ~600 leaves against 64 frames.
    for i in 1_000..20_000 {
        put(&s, &mut model, i, 2);
    }
    assert!(stat(&s, "evictions") > 0);
    let (warmed, misses) = (stat(&s, "writer_early_descents"), stat(&s, "dram_misses"));
    let updates = 500;
    for j in 0..updates {
        // Two keys a batch: a batch takes the writer lock exclusively.
        let (a, b) = (j * 37 % 20_000, (j * 37 + 1) % 20_000);
        let v = vec![3u8; 100];
        s.write_batch(&[(&key(a), Some(&v)), (&key(b), Some(&v))])
            .unwrap();
        model.insert(key(a), v.clone());
        model.insert(key(b), v);
    }
    // Every batch's leaves were read in before the lock, and the batches did meet leaves on
    // the device (else this proves nothing).
    assert_eq!(stat(&s, "writer_early_descents") - warmed, 2 * updates);
    assert!(stat(&s, "dram_misses") - misses > updates / 2);
    // A single put that fits its leaf reads it in under the lock shared: other such puts go
    // on meanwhile, so it needs no early descent.
    let (warmed, leaf_writes) = (stat(&s, "writer_early_descents"), stat(&s, "leaf_writes"));
    for j in 0..updates {
        put(&s, &mut model, j * 41 % 20_000, 4);
    }
    assert_eq!(stat(&s, "leaf_writes") - leaf_writes, updates);
    assert_eq!(stat(&s, "writer_early_descents"), warmed);
    check_all(&s, &model);
}

/// ACE's write-back batch (`n_w`) defaults to 32, at most an eighth of the pool, for a page
/// file on a disk's file system opened with `O_DIRECT` (the disk writes a batch concurrently),
/// and to 1 on tmpfs (a write is a copy there).
#[test]
fn the_write_back_batch_defaults_by_medium() {
    let mut dirs = vec![tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()];
    if let Ok(d) = tempfile::tempdir_in("/dev/shm") {
        dirs.push(d);
    }
    for dir in &dirs {
        for (frames, on_disk) in [(64u64, 8u64), (4096, 32)] {
            let path = dir.path().join(format!("t{frames}"));
            let s = BTreeStore::create(&path, &opts().dram_bytes(frames * 4096)).unwrap();
            let medium = s
                .stats()
                .into_iter()
                .find(|(k, _)| k == "medium")
                .unwrap()
                .1;
            let disk = matches!(
                tierbase::device::fs_kind(dir.path()),
                tierbase::device::FsKind::Disk
            ) && medium.contains("O_DIRECT");
            let want = if disk { on_disk } else { 1 };
            assert_eq!(
                stat(&s, "write_back_batch"),
                want,
                "{medium}, {frames} frames"
            );
        }
    }
}

/// Single deletes that leave their leaf at least a quarter full are made by leaf writers
/// (beside other writers); one that would leave it emptier goes to the exclusive writer, which
/// merges: deleting nearly every key one by one shrinks the tree back, and it survives a
/// restart with the right count.
#[test]
fn deletes_stay_in_their_leaf_until_it_would_underflow_and_then_merge() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let s = BTreeStore::create(&path, &opts()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..4_000 {
        s.put(&key(i), &[5u8; 60]).unwrap();
        model.insert(key(i), vec![5u8; 60]);
    }
    let (pages_full, _) = s.verify().unwrap();
    let height_full = stat(&s, "height");
    assert!(height_full >= 2, "height {height_full}");
    let leaf_writes = stat(&s, "leaf_writes");
    for i in 10..4_000 {
        assert!(s.delete(&key(i)).unwrap());
        model.remove(&key(i));
    }
    assert!(!s.delete(&key(5_000)).unwrap(), "a missing key");
    let by_leaf_writers = stat(&s, "leaf_writes") - leaf_writes;
    // Most deletes stay in their leaf; those that would underflow it do not.
    assert!(
        by_leaf_writers > 2_000,
        "{by_leaf_writers} of 3,991 deletes"
    );
    assert!(by_leaf_writers < 3_991, "{by_leaf_writers}: none merged");
    let (pages, keys) = s.verify().unwrap();
    assert_eq!(keys, 10);
    assert!(
        pages * 10 < pages_full,
        "{pages} pages left of {pages_full}"
    );
    check_all(&s, &model);
    s.close().unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    s.verify().unwrap();
    check_all(&s, &model);
}

/// A batched read routes every key to its leaf first and fixes the leaves after: no split may
/// move a key out of its leaf in between. Writers split leaves all the time here (4 KiB pages,
/// 100-byte values), while readers ask for keys that are present throughout.
#[test]
fn batched_reads_find_every_key_while_writers_split_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let s = BTreeStore::create(
        dir.path().join("t"),
        &opts().dram_bytes(4 << 20), // every page stays resident: no evictions mask a miss
    )
    .unwrap();
    let present = |i: u64| format!("p{:06}", i * 7919 % 100_000).into_bytes();
    let value = |k: &[u8]| k.repeat(10);
    for i in 0..2_000 {
        s.put(&present(i), &value(&present(i))).unwrap();
    }
    std::thread::scope(|scope| {
        let s = &s;
        scope.spawn(move || {
            // Keys between the present ones: every leaf of them splits again and again.
            for i in 0..20_000u64 {
                let k = format!("p{:06}x{i}", i * 7919 % 100_000).into_bytes();
                s.put(&k, &[1u8; 100]).unwrap();
            }
        });
        for reader in 0..2u64 {
            scope.spawn(move || {
                for round in 0..3_000u64 {
                    let keys: Vec<Vec<u8>> = (0..16)
                        .map(|j| present((round * 16 + j + reader * 977) % 2_000))
                        .collect();
                    let asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                    for (k, v) in asked.iter().zip(s.get_many(&asked).unwrap()) {
                        assert_eq!(v.as_deref(), Some(&value(k)[..]), "key {k:?} lost");
                    }
                }
            });
        }
    });
    assert_eq!(s.len(), 22_000);
    // Alone, a batch is routed (the lock is free), and its keys found or not as they are.
    let routed = stat(&s, "read_batches");
    let got = s.get_many(&[b"p000000", b"absent", b"p007919"]).unwrap();
    assert_eq!(stat(&s, "read_batches"), routed + 1);
    assert_eq!(got[0].as_deref(), Some(&value(b"p000000")[..]));
    assert_eq!(got[1], None);
    assert_eq!(got[2].as_deref(), Some(&value(b"p007919")[..]));
}

/// Point reads reach their leaves through the inner pages optimistically (no latch), one
/// descent each when nothing changes meanwhile; readers racing a writer whose inserts split
/// leaves and inner pages (long shared prefixes: few separators per inner page) still find
/// every key, restarting or coupling latches where a page on their way moved.
#[test]
fn optimistic_descents_read_past_splits() {
    let dir = tempfile::tempdir().unwrap();
    let opts = opts().dram_bytes(4 << 20);
    let s = BTreeStore::create(dir.path().join("t"), &opts).unwrap();
    s.put(b"a", b"1").unwrap();
    assert_eq!(s.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(stat(&s, "optimistic_descents"), 0, "off by default");
    s.close().unwrap();
    let s = BTreeStore::open(dir.path().join("t"), &opts.optimistic_reads(true)).unwrap();
    let key = |i: u64| format!("{}{:08}", "k".repeat(200), i * 7919 % 1_000_000).into_bytes();
    for i in 0..3_000 {
        s.put(&key(i), &i.to_le_bytes()).unwrap();
    }
    assert!(stat(&s, "height") >= 3, "inner pages split");
    let (descents, restarts) = (
        stat(&s, "optimistic_descents"),
        stat(&s, "optimistic_restarts"),
    );
    for i in 0..3_000 {
        assert_eq!(s.get(&key(i)).unwrap(), Some(i.to_le_bytes().to_vec()));
    }
    assert_eq!(stat(&s, "optimistic_descents"), descents + 3_000);
    assert_eq!(stat(&s, "optimistic_restarts"), restarts, "nothing moved");
    let writing = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|scope| {
        let (s, writing) = (&s, &writing);
        scope.spawn(move || {
            for i in 3_000..30_000 {
                s.put(&key(i), &i.to_le_bytes()).unwrap();
            }
            writing.store(false, std::sync::atomic::Ordering::Release);
        });
        for reader in 0..2u64 {
            scope.spawn(move || {
                let mut round = 0u64;
                while writing.load(std::sync::atomic::Ordering::Acquire) {
                    let i = (round * 31 + reader * 17) % 3_000;
                    assert_eq!(s.get(&key(i)).unwrap(), Some(i.to_le_bytes().to_vec()));
                    round += 1;
                }
            });
        }
    });
    assert_eq!(s.len(), 30_001);
    assert!(stat(&s, "optimistic_descents") > descents + 3_000);
}

/// Pointer swizzling in a pool a fraction of the tree: descents follow swizzled references,
/// evictions give the parents their page ids back first, changes of inner pages (splits,
/// merges) unswizzle them, and nothing swizzled reaches media — a reopen without swizzling
/// (whose structural check refuses a reference with the top bit set) reads every key.
#[test]
fn swizzled_references_stay_in_dram_through_evictions_splits_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let mut model = BTreeMap::new();
    {
        let s = BTreeStore::create(&path, &opts().swizzle(true)).unwrap();
        for i in 0..20_000u64 {
            let v = vec![(i % 251) as u8; 40 + (i % 60) as usize];
            s.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        for round in 0..2 {
            for i in (0..20_000u64).step_by(7) {
                assert_eq!(
                    s.get(&key(i)).unwrap().as_ref(),
                    model.get(&key(i)),
                    "{round}"
                );
            }
        }
        // Merges change inner pages under swizzled children too.
        for i in (0..20_000u64).filter(|i| i % 5 != 0) {
            s.delete(&key(i)).unwrap();
            model.remove(&key(i));
        }
        assert!(
            stat(&s, "height") >= 3,
            "no inner level to swizzle below the root"
        );
        assert!(stat(&s, "evictions") > 0, "the pool held the whole tree");
        for name in ["swizzles", "swizzled_fixes", "unswizzles", "miss_restarts"] {
            assert!(stat(&s, name) > 0, "{name} is 0");
        }
        check_all(&s, &model); // verify() checks the pool's swizzling invariants too
        s.checkpoint().unwrap();
        for i in (0..20_000u64).step_by(10) {
            let v = vec![3u8; 30];
            s.put(&key(i), &v).unwrap();
            model.insert(key(i), v);
        }
        s.close().unwrap();
    }
    let s = BTreeStore::open(&path, &opts().swizzle(false)).unwrap();
    assert_eq!(stat(&s, "swizzles"), 0);
    check_all(&s, &model);
}
