//! Plush end to end on small geometries: inserts that migrate through every level, reads,
//! deletes, overwrites, a reopen (log replay), both layouts, with and without migrators.

use std::collections::BTreeMap;

use tierbase::hash::{PlushLayout, PlushOptions, PlushStore};

fn key(layout: PlushLayout, i: u64) -> Vec<u8> {
    match layout {
        PlushLayout::Fixed8 => i.to_le_bytes().to_vec(),
        PlushLayout::Variable => {
            format!("key-{i:06}-{}", "x".repeat((i % 7) as usize)).into_bytes()
        }
    }
}

fn value(layout: PlushLayout, i: u64, round: u64) -> Vec<u8> {
    match layout {
        PlushLayout::Fixed8 => (i * 1000 + round).to_le_bytes().to_vec(),
        PlushLayout::Variable => {
            format!("v{i}-{round}-{}", "y".repeat((i % 13) as usize)).into_bytes()
        }
    }
}

fn run(layout: PlushLayout, migrators: usize) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("p.plush");
    let opts = PlushOptions::small().layout(layout).migrators(migrators);
    let store = PlushStore::create(&path, &opts).unwrap();
    let mut model = BTreeMap::new();
    let n = 40_000u64;
    for i in 0..n {
        assert!(
            store.put(&key(layout, i), &value(layout, i, 0)).unwrap(),
            "new {i}"
        );
        model.insert(key(layout, i), value(layout, i, 0));
    }
    for i in (0..n).step_by(3) {
        assert!(
            !store.put(&key(layout, i), &value(layout, i, 1)).unwrap(),
            "old {i}"
        );
        model.insert(key(layout, i), value(layout, i, 1));
    }
    for i in (0..n).step_by(5) {
        assert!(store.delete(&key(layout, i)).unwrap(), "delete {i}");
        model.remove(&key(layout, i));
    }
    assert!(!store.delete(&key(layout, n + 5)).unwrap());
    for i in 0..n + 10 {
        let k = key(layout, i);
        assert_eq!(store.get(&k).unwrap(), model.get(&k).cloned(), "key {i}");
    }
    assert_eq!(store.len().unwrap(), model.len() as u64);
    let stats = store.stats();
    assert!(stats.levels >= 2, "{stats:?}");
    store.close().unwrap();
    let store = PlushStore::open(&path, &opts).unwrap();
    assert!(store.recovery_report().replayed > 0);
    for i in 0..n + 10 {
        let k = key(layout, i);
        assert_eq!(
            store.get(&k).unwrap(),
            model.get(&k).cloned(),
            "after reopen, key {i}"
        );
    }
    assert_eq!(store.len().unwrap(), model.len() as u64);
    let mut keys = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = store.scan(cursor, 100, &mut keys).unwrap();
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
    store.checkpoint().unwrap();
    store.close().unwrap();
    let store = PlushStore::open(&path, &opts).unwrap();
    assert_eq!(
        store.recovery_report().replayed,
        0,
        "a checkpoint leaves nothing to replay"
    );
    for i in (0..n).step_by(7) {
        let k = key(layout, i);
        assert_eq!(
            store.get(&k).unwrap(),
            model.get(&k).cloned(),
            "after checkpoint, key {i}"
        );
    }
}

#[test]
fn fixed_layout_with_a_migrator() {
    run(PlushLayout::Fixed8, 1);
}

#[test]
fn fixed_layout_inserters_migrate() {
    run(PlushLayout::Fixed8, 0);
}

#[test]
fn variable_layout_with_a_migrator() {
    run(PlushLayout::Variable, 1);
}

#[test]
fn variable_layout_inserters_migrate() {
    run(PlushLayout::Variable, 0);
}

#[test]
fn verify_finds_a_sound_store_sound() {
    for layout in [PlushLayout::Fixed8, PlushLayout::Variable] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let store = PlushStore::create(
            dir.path().join("v.plush"),
            &PlushOptions::small().layout(layout),
        )
        .unwrap();
        for i in 0..30_000u64 {
            store
                .upsert(&key(layout, i % 20_000), &value(layout, i, 0))
                .unwrap();
        }
        let r = store.verify().unwrap();
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(r.live_keys, 20_000);
        assert!(
            r.level_records.iter().sum::<u64>() + r.dram_records >= 20_000,
            "{r:?}"
        );
    }
}

/// Sustained overwrites of variable-length values: payload chunks are collected and the space
/// stays bounded, every read sees the last value, and a reopen agrees.
#[test]
fn payload_collection_keeps_space_bounded_under_overwrites() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("gc.plush");
    let mut opts = PlushOptions::small().layout(PlushLayout::Variable);
    opts.payload_chunk_bytes = 16 << 10;
    opts.payload_chunks = 64;
    let store = PlushStore::create(&path, &opts).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..60u64 {
        for i in 0..300u64 {
            let k = format!("k{i}").into_bytes();
            let v = vec![(round % 251) as u8; 100 + (i % 50) as usize];
            store.upsert(&k, &v).unwrap();
            model.insert(k, v);
        }
    }
    let s = store.stats();
    let c = |n: &str| s.counters.iter().find(|c| c.0 == n).unwrap().1;
    assert!(c("payload_collections") > 0, "{s:?}");
    assert_eq!(c("payload_chunks_damaged"), 0, "{s:?}");
    // 300 live values of ~150 bytes: ~50 KB live, 2.6 MB written. The payload stays within
    // about twice the live bytes plus the chunks the logs write into (6 chunks here); a limit
    // of 12 leaves room, and the chunk cap (64) would be four times that.
    assert!(
        s.payload_bytes <= 12 * (16 << 10),
        "payload {} bytes, {} live, counters {:?}",
        s.payload_bytes,
        s.payload_live_bytes,
        s.counters
    );
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
    }
    let r = store.verify().unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    store.close().unwrap();
    let store = PlushStore::open(&path, &opts).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
    }
}

/// Ordered scans of a range-partitioned store while a writer overwrites, inserts and deletes,
/// a migrator moves halves down and payload chunks are collected (so locators a scan read may
/// dangle by the time it reads their payload). Every walk must return each stable key exactly
/// once, in strictly increasing key order, with a value written for that key; and no walk may
/// return an older value of a key than an earlier walk returned (each key's values carry a
/// rising sequence number), which a scan skipping a moved record for an older one would do.
/// Read-modify-writes (`modify`: the server's INCR, APPEND and SET NX) keep the payload
/// bounded as writes do: the record a modify replaces counts as dead, and the collector runs
/// for them too. Before, neither happened: 400,000 INCRs of one key through `serve` left
/// 18.5 MiB of payload for one record, with no collection, and appends grew a store to 123
/// MiB for 200 KB live (a user's trial, 2026-12-04).
#[test]
fn modify_keeps_payload_space_bounded() {
    use tierbase::store::Change;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("modify.plush");
    let mut opts = PlushOptions::small().layout(PlushLayout::Variable);
    opts.payload_chunk_bytes = 16 << 10;
    opts.payload_chunks = 256;
    drop(PlushStore::create(&path, &opts).unwrap());
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for session in 0..2 {
        let store = PlushStore::open(&path, &opts).unwrap();
        assert_eq!(store.recovery_report().damage(), None, "session {session}");
        for round in 0..6_000u64 {
            // A counter incremented, and a value appended to until it is 1,000 bytes long.
            let k = b"counter".to_vec();
            store
                .modify(&k, &mut |cur| {
                    let n: u64 = cur.map_or(0, |c| String::from_utf8_lossy(c).parse().unwrap());
                    Change::Put((n + 1).to_string().into_bytes())
                })
                .unwrap();
            let n: u64 = model
                .get(&k)
                .map_or(0, |c| String::from_utf8_lossy(c).parse().unwrap());
            model.insert(k, (n + 1).to_string().into_bytes());
            let k = format!("log{}", round % 20).into_bytes();
            let mut next = model.get(&k).cloned().unwrap_or_default();
            if next.len() >= 1_000 {
                next.clear();
            }
            next.extend_from_slice(format!("{round},").as_bytes());
            let want = next.clone();
            store
                .modify(&k, &mut |_| Change::Put(want.clone()))
                .unwrap();
            model.insert(k, next);
        }
        let s = store.stats();
        let c = |n: &str| s.counters.iter().find(|c| c.0 == n).unwrap().1;
        assert!(c("payload_collections") > 0, "session {session}: {s:?}");
        // ~10 KB live, ~2.8 MB written: within twice the live bytes plus the chunks the logs
        // write into, as for writes (48 KiB here; before, 2.8 MB: no collection ran).
        assert!(
            s.payload_bytes <= 12 * (16 << 10),
            "session {session}: payload {} bytes, {} live, counters {:?}",
            s.payload_bytes,
            s.payload_live_bytes,
            s.counters
        );
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "session {session}");
        }
        store.close().unwrap();
    }
}

/// The collector leaves a chunk alone when bytes between its entries are not zeros (only
/// damage leaves such bytes in a chunk no crash cut short): concurrent writers of values of
/// many sizes sharing payload logs, clean reopens that resume appending mid-chunk, and chunks
/// reused after collection (old entries past the new ones' end) must never look so — each
/// false alarm would keep a chunk from collection for good. Likewise no clean reopen may take
/// a recovery-log slot for damage, with log chunks reused in a new generation.
#[test]
fn concurrent_overwrites_across_reopens_find_no_damage() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("gc-threads.plush");
    let mut opts = PlushOptions::small().layout(PlushLayout::Variable);
    opts.payload_chunk_bytes = 16 << 10;
    opts.payload_chunks = 256;
    // Recovery logs of 4 small chunks: they rotate and are reused in every session.
    opts.logs = 4;
    opts.log_chunk_bytes = Some(4096);
    opts.log_chunks = Some(68);
    drop(PlushStore::create(&path, &opts).unwrap());
    let value = |t: u64, i: u64, round: u64| {
        let len = 1 + ((i * 7919 + round * 104_729 + t) % 2_000) as usize;
        vec![(1 + (t * 31 + round) % 250) as u8; len]
    };
    let mut model = BTreeMap::new();
    for session in 0..5u64 {
        let store = PlushStore::open(&path, &opts).unwrap();
        // Nor may a clean reopen take a recovery-log slot for damage.
        assert_eq!(
            store.recovery_report().damage(),
            None,
            "session {session}: {:?}",
            store.recovery_report()
        );
        std::thread::scope(|sc| {
            for t in 0..3u64 {
                let store = &store;
                sc.spawn(move || {
                    for round in 0..30u64 {
                        for i in 0..150u64 {
                            let k = format!("t{t}-k{i}").into_bytes();
                            store
                                .upsert(&k, &value(t, i, session * 100 + round))
                                .unwrap();
                        }
                    }
                });
            }
        });
        for t in 0..3u64 {
            for i in 0..150u64 {
                model.insert(
                    format!("t{t}-k{i}").into_bytes(),
                    value(t, i, session * 100 + 29),
                );
            }
        }
        let s = store.stats();
        let c = |n: &str| s.counters.iter().find(|c| c.0 == n).unwrap().1;
        assert!(c("payload_collections") > 0, "session {session}: {s:?}");
        if session >= 2 {
            // By now the logs reuse their chunks (a new generation over the old entries).
            assert!(
                c("log_compactions") + c("log_compactions_skipped") > 0,
                "session {session}: {s:?}"
            );
        }
        assert_eq!(c("payload_chunks_damaged"), 0, "session {session}: {s:?}");
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap().as_ref(), Some(v), "session {session}");
        }
        store.close().unwrap();
    }
}

#[test]
fn range_scans_under_concurrent_writes_migration_and_collection() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tierbase::hash::Partition;

    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let mut opts = PlushOptions::small()
        .layout(PlushLayout::Variable)
        .partition(Partition::Range)
        .dram_bits(4)
        .migrators(1);
    opts.payload_chunk_bytes = 4096;
    opts.payload_chunks = 256;
    let store = PlushStore::create(dir.path().join("r.plush"), &opts).unwrap();
    // Stable keys, their first byte spread over the 16 DRAM entries.
    const STABLE: u64 = 120;
    let stable = |i: u64| [vec![(i * 37 % 256) as u8], format!("s{i:03}").into_bytes()].concat();
    let transient = |i: u64| [vec![(i * 91 % 256) as u8], format!("t{i}").into_bytes()].concat();
    let value = |i: u64, seq: u64| format!("{i}:{seq:08}:{}", "p".repeat((seq % 40) as usize));
    for i in 0..STABLE {
        store.put(&stable(i), value(i, 0).as_bytes()).unwrap();
    }
    let done = AtomicBool::new(false);
    let mut walks = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            for seq in 1..=12_000u64 {
                let i = seq * 7 % STABLE;
                store.put(&stable(i), value(i, seq).as_bytes()).unwrap();
                let t = seq % 50;
                if seq % 3 == 0 {
                    store.put(&transient(t), b"t").unwrap();
                } else if seq % 3 == 1 {
                    store.delete(&transient(t)).unwrap();
                }
            }
            done.store(true, Ordering::Release);
        });
        let mut last_seq = vec![0u64; STABLE as usize];
        while !done.load(Ordering::Acquire) || walks < 3 {
            let (mut all, mut from) = (Vec::new(), Vec::new());
            while let Some(next) = store.range(&from, None, 17, &mut all).unwrap() {
                from = next;
            }
            assert!(
                all.windows(2).all(|w| w[0].0 < w[1].0),
                "walk {walks}: not in increasing key order"
            );
            let mut seen = 0;
            for (k, v) in &all {
                if k[1] != b's' {
                    continue;
                }
                let i: u64 = std::str::from_utf8(&k[2..]).unwrap().parse().unwrap();
                let v = std::str::from_utf8(v).unwrap();
                let mut parts = v.split(':');
                assert_eq!(parts.next(), Some(i.to_string().as_str()), "{k:?}: {v}");
                let seq: u64 = parts.next().unwrap().parse().unwrap();
                assert!(
                    seq >= last_seq[i as usize],
                    "walk {walks}: key {i} went back from {} to {seq}",
                    last_seq[i as usize]
                );
                last_seq[i as usize] = seq;
                seen += 1;
            }
            assert_eq!(seen, STABLE, "walk {walks}: stable keys seen");
            walks += 1;
        }
    });
    let stats = store.stats();
    let counters: BTreeMap<String, u64> = stats.counters.iter().cloned().collect();
    assert!(counters["payload_collections"] > 0, "{counters:?}");
    assert!(counters["half_migrations"] > 0, "{counters:?}");
    assert!(store.verify().unwrap().problems.is_empty());
    eprintln!("{walks} walks; {counters:?}");
}

/// The budget rule the front ends size the DRAM level by holds for what a store really takes.
#[test]
fn dram_bytes_per_entry_covers_what_a_store_holds() {
    use tierbase::hash::{
        DRAM_BYTES_FIXED, DRAM_BYTES_PER_ENTRY, MIN_DRAM_BUDGET, dram_bits_for_budget,
    };
    let bits = |budget| dram_bits_for_budget(budget).unwrap();
    assert_eq!(bits(64 << 20), 12);
    assert_eq!(bits(DRAM_BYTES_FIXED + (9 << 20)), 10);
    assert_eq!(bits(DRAM_BYTES_FIXED + (9 << 20) - 1), 9);
    assert_eq!(bits(MIN_DRAM_BUDGET), 4);
    assert!(dram_bits_for_budget(0).is_err());
    assert!(dram_bits_for_budget(MIN_DRAM_BUDGET - 1).is_err());
    assert_eq!(bits(u64::MAX), 20);
    let dir = tempfile::tempdir().unwrap();
    for bits in [8, 12] {
        let path = dir.path().join(format!("{bits}.plush"));
        let store = PlushStore::create(&path, &PlushOptions::default().dram_bits(bits)).unwrap();
        let st = store.stats();
        // What the store reports holds the payload's chunk table and the logs' bookkeeping,
        // which do not grow with the DRAM level.
        let budget = DRAM_BYTES_FIXED + (DRAM_BYTES_PER_ENTRY << bits);
        eprintln!(
            "2^{bits} entries: {} bytes of DRAM, budget {budget}",
            st.dram_bytes
        );
        assert!(
            st.dram_bytes <= budget,
            "2^{bits} entries hold {} bytes of DRAM, more than the {budget} the rule budgets",
            st.dram_bytes
        );
        // And the rule is not far off: within 10 %.
        assert!(
            st.dram_bytes * 10 >= budget * 9,
            "{} of {budget}",
            st.dram_bytes
        );
        store.close().unwrap();
    }
}

/// Level 0's buckets are handed out whole when the level appears (`prealloc_levels`, default
/// 1); without it, only the buckets migrations fill. Both stores hold the same records.
#[test]
fn level_zero_buckets_are_preallocated() {
    let dir = tempfile::tempdir().unwrap();
    let buckets = |prealloc: u32| {
        let mut opts = PlushOptions::small()
            .layout(PlushLayout::Fixed8)
            .migrators(0);
        opts.prealloc_levels = prealloc;
        let path = dir.path().join(format!("{prealloc}.plush"));
        let store = PlushStore::create(&path, &opts).unwrap();
        for i in 0..300u64 {
            store
                .upsert(&i.to_le_bytes(), &(i + 1).to_le_bytes())
                .unwrap();
        }
        store.checkpoint().unwrap();
        assert!(store.verify().unwrap().problems.is_empty());
        let entries = store.stats().dram_entries as u64;
        let n = store
            .stats()
            .counters
            .iter()
            .find(|c| c.0 == "buckets")
            .map(|c| c.1)
            .unwrap();
        store.close().unwrap();
        let store = PlushStore::open(&path, &opts).unwrap();
        for i in 0..300u64 {
            assert_eq!(
                store.get(&i.to_le_bytes()).unwrap().as_deref(),
                Some(&(i + 1).to_le_bytes()[..])
            );
        }
        (n, entries)
    };
    let (all, entries) = buckets(1);
    assert_eq!(
        all,
        entries * 16,
        "every bucket of level 0 handed out at once"
    );
    let (used, _) = buckets(0);
    assert!(used < all, "{used} buckets without pre-allocation");
}

/// Set in the child of [`a_full_device_refuses_writes_and_keeps_the_store_writable`]: the
/// directory to create its stores in.
const FULL_ENV: &str = "TIERBASE_PLUSH_FULL_CHILD";
/// Bytes the child's files may grow to.
const FULL_LIMIT: u64 = 8 << 20;

/// On a full device (a child process whose files cannot grow past [`FULL_LIMIT`]: growth
/// fails as on a full file system) a write is refused with `StoreFull` naming the device, the
/// store does not turn read-only, refusals repeat without leaking chunk slots, everything
/// acknowledged reads back and verifies, and the store reopens with all of it and takes
/// writes again once there is room. Both layouts: the variable one fills its payload first,
/// the fixed one a level's directory (a migration is refused, then the writers).
#[test]
fn a_full_device_refuses_writes_and_keeps_the_store_writable() {
    if let Ok(dir) = std::env::var(FULL_ENV) {
        tierbase::testing::kill::child_setup();
        for layout in [PlushLayout::Variable, PlushLayout::Fixed8] {
            fill_a_full_device(std::path::Path::new(&dir), layout);
        }
        return;
    }
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let out = tierbase::testing::full::run_limited(
        "a_full_device_refuses_writes_and_keeps_the_store_writable",
        FULL_ENV,
        dir.path().to_str().unwrap(),
        FULL_LIMIT,
    );
    for layout in [PlushLayout::Variable, PlushLayout::Fixed8] {
        let name = format!("{layout:?}");
        let acked: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("acked {name} ")))
            .unwrap_or_else(|| panic!("the child reported no {name} store:\n{out}"))
            .parse()
            .unwrap();
        assert!(acked > 1000, "{name}: only {acked} writes fitted");
        let store = PlushStore::open(dir.path().join(&name), &full_opts(layout)).unwrap();
        assert_filled(&store, layout, acked, "after the reopen");
        assert!(
            store
                .put(&key(layout, acked), &value(layout, acked, 0))
                .unwrap(),
            "{name}: with room again the store takes writes"
        );
        store.close().unwrap();
    }
}

fn full_opts(layout: PlushLayout) -> PlushOptions {
    PlushOptions::small().layout(layout)
}

/// Every one of the `acked` writes of the fill reads back, and the store verifies.
fn assert_filled(store: &PlushStore, layout: PlushLayout, acked: u64, when: &str) {
    for i in 0..acked {
        assert_eq!(
            store.get(&key(layout, i)).unwrap(),
            Some(value(layout, i, 0)),
            "{layout:?}: acknowledged key {i} of {acked} {when}"
        );
    }
    let r = store.verify().unwrap();
    assert!(r.problems.is_empty(), "{layout:?} {when}: {:?}", r.problems);
}

/// The child's part: fills a store of `layout` until a write is refused and checks the
/// refusal; prints `acked <layout> <n>` for the parent.
fn fill_a_full_device(dir: &std::path::Path, layout: PlushLayout) {
    use tierbase::Error;
    let name = format!("{layout:?}");
    let store = PlushStore::create(dir.join(&name), &full_opts(layout)).unwrap();
    let mut acked = 0u64;
    let err = loop {
        match store.upsert(&key(layout, acked), &value(layout, acked, 0)) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 5_000_000, "{name}: never filled {FULL_LIMIT} bytes");
    };
    assert!(
        matches!(&err, Error::StoreFull { reason, .. } if reason.contains("no room")),
        "{name}: {err}"
    );
    assert_eq!(
        store.stats().read_only,
        None,
        "{name}: a refusal is no failure"
    );
    // Refusals repeat (a payload chunk slot or the allocator's mark must not be used up by
    // them: 300 tries are more than the small geometry's 256 payload chunks).
    for _ in 0..300 {
        let again = store.upsert(&key(layout, acked), &value(layout, acked, 0));
        assert!(
            matches!(&again, Err(Error::StoreFull { reason, .. }) if reason.contains("no room")),
            "{name}: {again:?}"
        );
    }
    assert_filled(&store, layout, acked, "on the full device");
    // What is refused is not there.
    assert_eq!(store.get(&key(layout, acked)).unwrap(), None, "{name}");
    store.close().unwrap();
    println!("acked {name} {acked}");
}

/// A clean close records where the payload log and the recovery logs take their next entries,
/// and the next open appends there: a store reopened for one write at a time (each CLI `put`)
/// does not grow by a chunk per open (it took a 4 MiB payload chunk and a log chunk each
/// time: 60 puts made 325 MB). A store dropped without a close (as a crash leaves it) has no
/// positions recorded: the next open starts new chunks, and nothing acknowledged is lost.
#[test]
fn reopened_stores_append_where_a_clean_close_left_off() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("reopened.plush");
    let opts = PlushOptions::default().dram_bits(8);
    PlushStore::create(&path, &opts).unwrap().close().unwrap();
    let put_one = |i: u32| {
        let s = PlushStore::open(&path, &opts).unwrap();
        s.upsert(b"the key", format!("value {i}").as_bytes())
            .unwrap();
        s.upsert(format!("key {i}").as_bytes(), b"v").unwrap();
        s.close().unwrap();
    };
    put_one(0);
    let first = std::fs::metadata(&path).unwrap().len();
    for i in 1..40 {
        put_one(i);
    }
    let len = std::fs::metadata(&path).unwrap().len();
    // 40 distinct keys reach up to 40 of the 64 logs: at most a 16 KiB chunk each.
    assert!(
        len <= first + (40 << 14),
        "{first} bytes after one reopened write, {len} after 40"
    );
    // Dropped without a close: the next open finds no positions, and loses nothing.
    let s = PlushStore::open(&path, &opts).unwrap();
    s.upsert(b"the key", b"before the crash").unwrap();
    drop(s);
    let s = PlushStore::open(&path, &opts).unwrap();
    assert_eq!(
        s.get(b"the key").unwrap().as_deref(),
        Some(&b"before the crash"[..])
    );
    for i in 0..40 {
        assert_eq!(
            s.get(format!("key {i}").as_bytes()).unwrap().as_deref(),
            Some(&b"v"[..])
        );
    }
    s.upsert(b"after", b"the crash").unwrap();
    s.close().unwrap();
    let s = PlushStore::open(&path, &opts).unwrap();
    assert_eq!(s.get(b"after").unwrap().as_deref(), Some(&b"the crash"[..]));
    let v = s.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
    s.close().unwrap();
}

/// Recovery-log chunks are sized to the DRAM level: 1 MiB for the default level, 16 KiB for a
/// small one, so that a small store whose 64 logs all take their first chunk stays a few MiB
/// (with 1 MiB chunks it took 64 MiB: docs/BENCHMARKS.md, Figure 41). An explicit size wins.
#[test]
fn log_chunks_are_sized_to_the_dram_level() {
    assert_eq!(PlushOptions::default().log_chunk_bytes(), 1 << 20);
    assert_eq!(
        PlushOptions::default().dram_bits(11).log_chunk_bytes(),
        128 << 10
    );
    assert_eq!(
        PlushOptions::default().dram_bits(6).log_chunk_bytes(),
        16 << 10
    );
    assert_eq!(
        PlushOptions::default().dram_bits(20).log_chunk_bytes(),
        1 << 20
    );
    let mut explicit = PlushOptions::default().dram_bits(6);
    explicit.log_chunk_bytes = Some(64 << 10);
    assert_eq!(explicit.log_chunk_bytes(), 64 << 10);
    // A size given is refused as given: 0 once made create spin forever (doubling 0), and
    // 1000 was reported as 8000.
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    for bad in [0u64, 1000, 4097, 2 << 30] {
        let mut o = PlushOptions::default().dram_bits(6);
        o.log_chunk_bytes = Some(bad);
        let e = PlushStore::create(dir.path().join(format!("bad{bad}")), &o).unwrap_err();
        assert!(
            e.to_string().contains(&format!("chunks of {bad} bytes")),
            "{bad}: {e}"
        );
    }

    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("small.plush");
    let opts = PlushOptions::default()
        .layout(PlushLayout::Fixed8)
        .dram_bits(6);
    let store = PlushStore::create(&path, &opts).unwrap();
    // 64 DRAM entries, one per log: 640 keys reach every log.
    for i in 0..640u64 {
        store.upsert(&i.to_le_bytes(), &i.to_le_bytes()).unwrap();
    }
    store.close().unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len < 8 << 20, "a store of 640 records takes {len} bytes");
    let store = PlushStore::open(&path, &opts).unwrap();
    for i in 0..640u64 {
        assert_eq!(
            store.get(&i.to_le_bytes()).unwrap(),
            Some(i.to_le_bytes().to_vec())
        );
    }
}

/// Overwrites across many reopens (clean closes, and drops that leave the store as a crash
/// would): the payload stays bounded as it does within one session. An open knows no chunk's
/// dead bytes, and took everything in the payload for live, so the estimator never looked
/// for dead entries and each session grew the payload further (a helper's `serve` restarted
/// every few seconds went from 54 MB to 243 MB for 22 MB live).
#[test]
fn payload_space_stays_bounded_across_reopens() {
    for clean in [true, false] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let path = dir.path().join("reopen.plush");
        let mut opts = PlushOptions::small().layout(PlushLayout::Variable);
        opts.payload_chunk_bytes = 16 << 10;
        opts.payload_chunks = 256;
        drop(PlushStore::create(&path, &opts).unwrap());
        let mut model = BTreeMap::new();
        let mut most = 0;
        for session in 0..40u64 {
            let store = PlushStore::open(&path, &opts).unwrap();
            for round in 0..4u64 {
                for i in 0..300u64 {
                    let k = format!("k{i}").into_bytes();
                    let v = vec![((session * 4 + round) % 251) as u8; 100 + (i % 50) as usize];
                    store.upsert(&k, &v).unwrap();
                    model.insert(k, v);
                }
            }
            most = most.max(store.stats().payload_bytes);
            if clean {
                store.close().unwrap();
            } else {
                drop(store);
            }
        }
        // ~50 KB live; one session alone stays within 12 chunks (see
        // `payload_collection_keeps_space_bounded_under_overwrites`). Reopens add the chunks
        // each session starts before it has looked for dead entries.
        assert!(
            most <= 24 * (16 << 10),
            "clean {clean}: payload reached {most} bytes over 40 sessions"
        );
        let store = PlushStore::open(&path, &opts).unwrap();
        for (k, v) in &model {
            assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
        }
    }
}

/// A store dropped without a close (as a crash leaves it) and reopened again and again: each
/// open appends to every recovery log's newest chunk past its last valid entry, instead of
/// abandoning it for a new chunk (before 2026-12-03 each crash took a new chunk for every log
/// written to, and a `serve` killed every few seconds grew its file to 660 MiB for 150 keys).
#[test]
fn recovery_log_chunks_do_not_pile_up_across_crashes() {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let path = dir.path().join("crashes.plush");
    let opts = PlushOptions::small().layout(PlushLayout::Variable);
    drop(PlushStore::create(&path, &opts).unwrap());
    let mut model = BTreeMap::new();
    let mut chunks = Vec::new();
    for session in 0..20u64 {
        let store = PlushStore::open(&path, &opts).unwrap();
        chunks.push(store.recovery_report().log_chunks);
        for i in 0..40u64 {
            let k = format!("k{i}").into_bytes();
            let v = format!("v{session}-{i}").into_bytes();
            store.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        drop(store); // no close: the next open recovers as after a crash
    }
    let store = PlushStore::open(&path, &opts).unwrap();
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
    }
    // 40 records a session fit in the chunks the first sessions started.
    assert!(
        chunks[19] <= chunks[2] + 2,
        "recovery-log chunks read by each open: {chunks:?}"
    );
}
