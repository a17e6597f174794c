//! Real `kill -9`s of a process writing to a Plush store (`tierbase::hash`), and a second open
//! from another process.
//!
//! The kill loop: a child process (this test binary, re-executed) opens the store — a
//! background migrator, a small geometry (16 DRAM entries, 16 KiB recovery-log and payload
//! chunks) — and runs four writer threads doing puts, deletes and update-if-present `modify`s
//! on one shared key space; in the variable layout with values from 1 byte to 12 KiB. Each
//! thread prints `begin …` before and `ack …` after every write
//! (`tierbase::testing::crash::TextState` lines; values are named by length and hash). The
//! parent kills the child with SIGKILL after a random number of acknowledgements, reads what
//! the child printed up to its death, reopens the store and checks every key against the
//! expected-state tracker: the last acknowledged write of each key (or one of several
//! overlapping ones), or a write in flight at the kill — never a lost acknowledged write, a
//! deleted key come back, a torn value or an unknown key. `scan`, `get` and `len` must agree,
//! `verify()` must find nothing wrong, and the file must stay bounded over the rounds: at most
//! every structure at its largest (header, tables, directories, every recovery-log and payload
//! chunk, the buckets the keys can use) plus one reserve step (`RESERVE_STEP`, 256 KiB) per
//! open — the space allocator resumes at its persisted mark, so each open abandons what was
//! reserved past its last allocation. Then the next round reopens the same store.
//!
//! The fixed layout runs by default; the variable layout's runs are ignored until two bugs
//! are fixed (see their tests).
//!
//! The store lives in `/dev/shm` when there is one (tmpfs: process-crash durability, at
//! memory speed), else in the temp dir. Before the first round the parent writes the key space
//! over a few times itself, so the store starts with history (levels; in the variable layout,
//! collected payload chunks and a spare).
//!
//! `TIERBASE_KILL_ROUNDS=n` and `TIERBASE_KILL_SEED=n` change rounds and seed.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::scratch_dir as store_dir;
use tierbase::hash::layout::{Geometry, RESERVE_STEP, TOMBSTONE};
use tierbase::hash::{PlushLayout, PlushOptions, PlushStore};
use tierbase::store::Change;
use tierbase::testing::crash::{TextState, Write};
use tierbase::testing::kill::{self, KillLoop, LockTest, TestRng, fork_guard, value_token};

/// Child mode of the kill loop: `seed|layout|put or modify|path`.
const WRITER_ENV: &str = "TIERBASE_PLUSH_KILL_CHILD";
/// Child mode of the lock test: the store path.
const HOLDER_ENV: &str = "TIERBASE_PLUSH_HOLD_CHILD";
/// Writer threads in the child.
const WRITERS: u64 = 4;
/// Shared keys.
const KEYS: u64 = 48;
/// Largest value.
const MAX_VALUE: u64 = 12 << 10;

fn opts(layout: PlushLayout) -> PlushOptions {
    let mut o = PlushOptions::small()
        .layout(layout)
        .dram_bits(4)
        .migrators(1);
    o.log_chunks = Some(LOG_CHUNKS);
    o.payload_chunk_bytes = PAYLOAD_CHUNK;
    o.payload_chunks = PAYLOAD_CHUNKS;
    o
}

/// Recovery-log chunks per log (16 KiB each).
const LOG_CHUNKS: u32 = 6;
/// Payload chunks: 16 KiB each, 96 at most.
const PAYLOAD_CHUNK: u64 = 16 << 10;
const PAYLOAD_CHUNKS: u32 = 96;

/// The most a store of [`opts`] can take for its structures, whatever happened: header and
/// tables, every level's directory, every recovery-log chunk, every payload chunk, and the
/// buckets the keys can occupy (each key in one entry per level, 16 buckets an entry).
fn structural_bound(layout: PlushLayout) -> u64 {
    let o = opts(layout);
    let geo = Geometry {
        layout: o.layout,
        partition: o.partition,
        dram_bits: o.dram_bits,
        max_levels: o.max_levels,
        logs: o.logs.min(1 << o.dram_bits),
        log_chunks: LOG_CHUNKS,
        log_chunk_bytes: o.log_chunk_bytes(),
        payload_logs: if layout == PlushLayout::Variable {
            o.payload_logs
        } else {
            0
        },
        payload_chunks: if layout == PlushLayout::Variable {
            PAYLOAD_CHUNKS
        } else {
            0
        },
        payload_chunk_bytes: PAYLOAD_CHUNK,
    };
    geo.validate(None).expect("a valid geometry");
    let dirs: u64 = (0..geo.max_levels).map(|l| geo.level_bytes(l)).sum();
    let logs = u64::from(geo.logs) * u64::from(geo.log_chunks) * geo.log_chunk_bytes;
    let payload = u64::from(geo.payload_chunks) * geo.payload_chunk_bytes;
    let buckets = KEYS * u64::from(geo.max_levels) * 16 * 256;
    4096 + geo.space_offset() + dirs + logs + payload + buckets
}

/// A key: 8 ASCII bytes (the fixed layout's size; text, for the log lines).
fn key_name(n: u64) -> String {
    format!("k{n:07}")
}

/// Fixed layout: 8 random bytes (never the deletion marker). Variable: 1 byte to 12 KiB —
/// tiny, small, a few KiB, and most of a payload chunk's quarter.
fn value(rng: &mut TestRng, layout: PlushLayout) -> Vec<u8> {
    if layout == PlushLayout::Fixed8 {
        let v = rng.next_u64();
        let v = if v == TOMBSTONE { v ^ 1 } else { v };
        return v.to_le_bytes().to_vec();
    }
    let len = match rng.below(100) {
        0..=34 => 1 + rng.below(64),
        35..=74 => 65 + rng.below(1_000),
        75..=92 => 1_100 + rng.below(4_000),
        _ => 6_000 + rng.below(MAX_VALUE - 6_000),
    };
    rng.bytes(len)
}

// ----- the child ---------------------------------------------------------------------------

/// Child mode: open the store and write forever with `WRITERS` threads, logging every write.
/// Any error or panic prints an `error` line (which fails the parent) and ends the process.
fn writer_child(spec: &str) {
    kill::child_setup();
    let mut parts = spec.splitn(4, '|');
    let seed: u64 = parts.next().unwrap().parse().unwrap();
    let layout = match parts.next().unwrap() {
        "fixed8" => PlushLayout::Fixed8,
        _ => PlushLayout::Variable,
    };
    let with_modify = parts.next().unwrap() == "modify";
    let path = parts.next().unwrap();
    let store = kill::open_or_exit("open", PlushStore::open(path, &opts(layout)));
    kill::run_writers(WRITERS, |t| {
        writer_thread(&store, layout, t, seed, with_modify);
    });
}

/// Puts, deletes and (`with_modify`) update-if-present `modify`s.
fn writer_thread(store: &PlushStore, layout: PlushLayout, t: u64, seed: u64, with_modify: bool) {
    let mut rng = TestRng::for_writer(seed, t);
    loop {
        let key = key_name(rng.below(KEYS));
        let roll = rng.below(100);
        let v = value(&mut rng, layout);
        let tok = value_token(&v);
        let write = match roll {
            0..=59 => Write::Put(tok.as_str()),
            60..=74 if with_modify => Write::Update(tok.as_str()),
            60..=74 => Write::Put(tok.as_str()),
            _ => Write::Delete,
        };
        kill::begin(t, &key, &write);
        let k = key.as_bytes();
        let result = match write {
            Write::Put(_) => store.put(k, &v).map(|_| true),
            Write::Update(_) => {
                let mut existed = false;
                store
                    .modify(k, &mut |cur| {
                        existed = cur.is_some();
                        match cur {
                            Some(_) => Change::Put(v.clone()),
                            None => Change::Keep,
                        }
                    })
                    .map(|()| existed)
            }
            Write::Delete => store.delete(k).map(|_| true),
        };
        kill::ack_or_exit(t, result);
    }
}

// ----- the parent --------------------------------------------------------------------------

/// Every key of the store (by a scan), values named as in the log; `get` and `len` agree.
fn dump(ctx: &str, store: &PlushStore) -> BTreeMap<String, String> {
    let mut keys = Vec::new();
    let mut cursor = 0;
    loop {
        cursor = store.scan(cursor, 32, &mut keys).unwrap();
        if cursor == 0 {
            break;
        }
    }
    let mut actual = BTreeMap::new();
    for k in keys {
        let v = store
            .get(&k)
            .unwrap()
            .unwrap_or_else(|| panic!("{ctx}: scanned key {k:?} reads as absent"));
        let k = String::from_utf8(k).expect("keys are text");
        assert!(
            actual.insert(k.clone(), value_token(&v)).is_none(),
            "{ctx}: {k} scanned twice"
        );
    }
    assert_eq!(
        store.len().unwrap(),
        actual.len() as u64,
        "{ctx}: len vs scan"
    );
    actual
}

/// Writes every key a few times (and deletes some) from the parent, so the first child finds
/// a store with history. Returns the state it leaves.
fn prepare(path: &Path, layout: PlushLayout, seed: u64) -> BTreeMap<String, String> {
    let _fork = fork_guard();
    let store = PlushStore::create(path, &opts(layout)).unwrap();
    let mut rng = TestRng(seed ^ 0x9e37);
    let mut state = BTreeMap::new();
    for i in 0..6 * KEYS {
        let key = key_name(i % KEYS);
        if i % 11 == 10 {
            store.delete(key.as_bytes()).unwrap();
            state.remove(&key);
        } else {
            let v = value(&mut rng, layout);
            store.put(key.as_bytes(), &v).unwrap();
            state.insert(key, value_token(&v));
        }
    }
    let stats: BTreeMap<String, u64> = store.stats().counters.into_iter().collect();
    if layout == PlushLayout::Variable {
        assert!(stats["payload_collections"] > 0, "{stats:?}");
    }
    store.close().unwrap();
    state
}

/// `rounds` kill -9 rounds on one store (`test`: the name of the calling test, which the child
/// re-runs).
fn kill_loop(test: &str, layout: PlushLayout, rounds: u64, seed: u64, with_modify: bool) {
    let mut kills = KillLoop::new(test, WRITER_ENV, rounds, seed, 700);
    let (rounds, seed) = (kills.rounds(), kills.seed());
    let dir = store_dir();
    let path = dir.path().join("killed.plush");
    let mut state = TextState::with_initial(prepare(&path, layout, seed));
    let mut max_file = 0;
    let (mut replayed, mut frozen) = (0, 0);
    let mut no_growth = 0;
    let bound = structural_bound(layout) + (rounds + 1) * RESERVE_STEP;
    let writes = if with_modify { "modify" } else { "put" };
    let child_spec = |child_seed| format!("{child_seed}|{layout}|{writes}|{}", path.display());
    while let Some(round) = kills.next_round(&mut state, child_spec, |_| {}) {
        let ctx = &round.ctx;
        let fork = fork_guard();
        let store = round.ok(PlushStore::open(&path, &opts(layout)), "reopen");
        replayed += store.recovery_report().replayed;
        frozen += store.recovery_report().frozen_halves;
        let actual = dump(ctx, &store);
        round.ok(state.check(&actual), "after kill -9");
        let report = store.verify().unwrap();
        assert!(
            report.problems.is_empty(),
            "{ctx}: verify: {:?}",
            &report.problems[..report.problems.len().min(6)]
        );
        assert_eq!(report.live_keys, actual.len() as u64, "{ctx}");
        store.close().unwrap();
        drop(fork);
        let file = std::fs::metadata(&path).unwrap().len();
        if file <= max_file {
            no_growth += 1;
        }
        max_file = max_file.max(file);
        assert!(
            file <= bound,
            "{ctx}: file {file} bytes exceeds {bound} (every structure at its largest, and \
             {} bytes leaked per open): space leaks across crashes",
            RESERVE_STEP
        );
        state.settle(actual);
    }
    eprintln!(
        "{}, {replayed} records replayed, {frozen} frozen halves found; largest file \
         {max_file} bytes (bound {bound}), {no_growth} rounds without growth",
        kills.summary()
    );
    assert!(replayed > 0, "no round replayed a log entry");
}

#[test]
fn fixed_layout_acknowledged_writes_survive_kill_9() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        writer_child(&spec);
        return;
    }
    kill_loop(
        "fixed_layout_acknowledged_writes_survive_kill_9",
        PlushLayout::Fixed8,
        150,
        0x6669_7865,
        true,
    );
}

/// Variable layout, values of 1 B to 12 KiB. Fails in 5 to 20 % of the runs (seeds 0x73,
/// 22, 23, 24, 30, 38 did in one sweep; the interleaving decides): a child's write fails with
/// "corrupt data: payload entry at chunk N offset … claims … bytes" — a payload chunk with two
/// users (see `plush_linearizability`'s `variable_layout_with_some_payload_collection_…`):
/// `collect_payload` allocates its spare outside the pool lock, and `rotate_payload` marks a
/// pooled chunk current only after releasing the pool lock. With `alloc_payload_chunk` made
/// exclusive, 2 of 26 seeds still failed; with `current` also set under the pool lock, 0 of
/// 40.
#[test]
fn variable_layout_acknowledged_writes_survive_kill_9() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        writer_child(&spec);
        return;
    }
    kill_loop(
        "variable_layout_acknowledged_writes_survive_kill_9",
        PlushLayout::Variable,
        150,
        0x706c_7573,
        false,
    );
}

/// The same with update-if-present `modify`s among the writes. `modify` writes its payload
/// while it holds a DRAM entry's lock, so it never collects: its rotations take free chunks or
/// allocate new ones up to the hard limit, and once every payload chunk is allocated it fails
/// with `StoreFull` ("every payload chunk holds live entries") — here in round 14 to 19 of
/// the default seed, with about 60 KB of live data in 1.5 MB of payload chunks.
#[test]
fn variable_layout_acknowledged_writes_survive_kill_9_with_modify() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        writer_child(&spec);
        return;
    }
    kill_loop(
        "variable_layout_acknowledged_writes_survive_kill_9_with_modify",
        PlushLayout::Variable,
        40,
        0x706c_7573,
        true,
    );
}

#[test]
fn second_open_from_another_process_fails_naming_the_holder() {
    let o = opts(PlushLayout::Variable);
    if let Ok(path) = std::env::var(HOLDER_ENV) {
        LockTest::hold(|| PlushStore::open(&path, &o));
    }
    let dir = store_dir();
    let path = dir.path().join("held.plush");
    let test = LockTest {
        test: "second_open_from_another_process_fails_naming_the_holder",
        child_env: HOLDER_ENV,
        path: &path,
        locked: &path,
    };
    test.run(
        || PlushStore::create(&path, &o)?.close(),
        || PlushStore::open(&path, &o),
        drop,
    );
}
