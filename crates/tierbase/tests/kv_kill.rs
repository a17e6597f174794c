//! Real `kill -9`s, and a second open from another process.
//!
//! The kill loop: a child process (this test binary, re-executed) opens the store with
//! reclamation on and runs four writer threads doing puts, updates and deletes on one shared
//! key space, with values from 1 B to 80 KiB (those over 64 KiB are large records spanning
//! several blocks). Each thread prints `begin …` before and `ack …` after every write
//! (`tierbase::testing::crash::TextState` lines; values are named by length and hash). The
//! parent kills the child with SIGKILL after a random number of acknowledgements, reads what
//! the child printed up to its death, reopens the store and checks every key against the
//! expected-state tracker: the last acknowledged write of each key (or one of several
//! overlapping ones), or a write in flight at the kill — never a lost acknowledged write, a
//! deleted key come back, a torn value or an unknown key. The media must verify clean, and the
//! file must stay bounded (a leak of freed space across crashes would grow it). Then the next
//! round reopens the same store.
//!
//! The store lives in `/dev/shm` when there is one (tmpfs: process-crash durability, at
//! memory speed), else in the temp dir.
//!
//! The default test runs 100 rounds (a few seconds); the soak runs 1000:
//! `cargo test -p tierbase --release --test kv_kill -- --ignored --nocapture`
//! (`TIERBASE_KILL_ROUNDS=n` and `TIERBASE_KILL_SEED=n` change rounds and seed of either).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use tierbase::device::{Durability, FsKind};
use tierbase::kv::{KvOptions, KvStore, ReclaimOptions, RecordLayout};
use tierbase::testing::crash::{TextState, Write};
use tierbase::testing::kill::{self, KillLoop, LockTest, TestRng, fork_guard, value_token};

/// Child mode of the kill loop: `seed|path`.
const WRITER_ENV: &str = "TIERBASE_KV_KILL_CHILD";
/// Child mode of the lock test: the store path.
const HOLDER_ENV: &str = "TIERBASE_KV_HOLD_CHILD";
/// Writer threads in the child.
const WRITERS: u64 = 4;
/// Shared keys.
const KEYS: u64 = 48;
/// Largest value: 80 KiB.
const MAX_VALUE: u64 = 80 << 10;
/// Growth step of the store.
const CHUNK: u64 = 1 << 20;

fn opts(durability: Durability) -> KvOptions {
    KvOptions::default()
        .durability(durability)
        .layout(RecordLayout::Variable)
        .chunk_size(CHUNK)
        .reclaim(Some(ReclaimOptions {
            interval: Duration::from_millis(5),
            ..ReclaimOptions::default()
        }))
}

fn store_dir(durability: Durability) -> tempfile::TempDir {
    if durability.defers() {
        // Deferred syncs only happen on a disk file.
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
    } else {
        common::scratch_dir()
    }
}

/// 1 B to 80 KiB: tiny, small, multi-page inline, and large records (over 64 KiB).
fn value(rng: &mut TestRng) -> Vec<u8> {
    let len = match rng.below(100) {
        0..=29 => 1 + rng.below(64),
        30..=64 => 65 + rng.below(2_000),
        65..=87 => 2_048 + rng.below(22 << 10),
        _ => (64 << 10) + 1 + rng.below(MAX_VALUE - (64 << 10)),
    };
    rng.bytes(len)
}

// ----- the child ---------------------------------------------------------------------------

/// Child mode: open the store and write forever with `WRITERS` threads, logging every write.
/// Any error or panic prints an `error` line (which fails the parent) and ends the process.
fn writer_child(spec: &str) {
    kill::child_setup();
    let mut parts = spec.splitn(3, '|');
    let seed: u64 = parts.next().unwrap().parse().unwrap();
    let durability = Durability::parse(parts.next().unwrap()).unwrap();
    let path = parts.next().unwrap();
    let store = KvStore::open(path, &opts(durability)).unwrap();
    kill::run_writers(WRITERS, |t| writer_thread(&store, t, seed));
}

fn writer_thread(store: &KvStore, t: u64, seed: u64) {
    let mut rng = TestRng::for_writer(seed, t);
    let mut c = store.client();
    loop {
        let key = format!("k{}", rng.below(KEYS));
        let roll = rng.below(100);
        let v = value(&mut rng);
        let tok = value_token(&v);
        let write = match roll {
            0..=54 => Write::Put(tok.as_str()),
            55..=74 => Write::Update(tok.as_str()),
            _ => Write::Delete,
        };
        kill::begin(t, &key, &write);
        let k = key.as_bytes();
        let result = match write {
            Write::Put(_) => c.put(k, &v).map(|_| true),
            Write::Update(_) => c.update(k, &v),
            Write::Delete => c.delete(k).map(|_| true),
        };
        kill::ack_or_exit(t, result);
    }
}

// ----- the parent --------------------------------------------------------------------------

/// Every record of the store, values named as in the log.
fn dump(store: &KvStore) -> BTreeMap<String, String> {
    let mut actual = BTreeMap::new();
    store
        .for_each(|k, v| {
            let k = String::from_utf8(k.to_vec()).expect("keys are text");
            assert!(
                actual.insert(k, value_token(v)).is_none(),
                "a key seen twice"
            );
        })
        .unwrap();
    assert_eq!(actual.len(), store.len());
    actual
}

/// `rounds` kill -9 rounds on one store (`test`: the name of the calling test, which the child
/// re-runs).
fn kill_loop(test: &str, rounds: u64, seed: u64, durability: Durability) {
    let mut kills = KillLoop::new(test, WRITER_ENV, rounds, seed, 600);
    let dir = store_dir(durability);
    if durability.defers() && tierbase::device::fs_kind(dir.path()) == FsKind::Memory {
        eprintln!(
            "skipped: {} is memory-backed, nothing is deferred",
            dir.path().display()
        );
        return;
    }
    let path = dir.path().join("killed.tb");
    {
        let _fork = fork_guard();
        KvStore::create(&path, &opts(durability))
            .unwrap()
            .close()
            .unwrap();
    }
    let mut state = TextState::new();
    let (mut max_file, mut max_live) = (0, 0);
    let child_spec = |child_seed| format!("{child_seed}|{}|{}", durability.name(), path.display());
    while let Some(round) = kills.next_round(&mut state, child_spec, |_| {}) {
        let ctx = &round.ctx;
        let fork = fork_guard();
        let store = round.ok(KvStore::open(&path, &opts(durability)), "reopen");
        assert_eq!(
            store.region().defers_persists(),
            durability.defers(),
            "{ctx}: the store must run the durability level under test"
        );
        let actual = dump(&store);
        round.ok(state.check(&actual), "after kill -9");
        round.check_gets(&actual, |k| store.get(k).unwrap());
        max_live = max_live.max(store.stats().live_bytes);
        drop(store);
        let report = tierbase::kv::verify(&path).unwrap();
        drop(fork);
        assert!(report.is_ok(), "{ctx}: {:?}", report.problems);
        let file = std::fs::metadata(&path).unwrap().len();
        max_file = max_file.max(file);
        // Bounded: at most twice the most live data seen (the file cannot shrink; live data
        // peaks between the reopens we see) plus three growth steps (blocks the killed
        // writers owned, the grower's headroom). Measured here over ten seeds of 100 rounds
        // and one of 400: files of 2.3 to 2.9 MB with 0.8 to 1.2 MB live, at least 1.8 MiB
        // under the bound — a leak of one 24 KiB block per crash passes it within 100 rounds.
        let bound = 2 * max_live + 3 * CHUNK;
        assert!(
            file <= bound,
            "{ctx}: file {file} bytes exceeds {bound} (2 x {max_live} live bytes + {}): \
             freed space leaks across crashes",
            3 * CHUNK
        );
        state.settle(actual);
        if (round.number + 1) % 100 == 0 {
            eprintln!(
                "after {} rounds: file {file} bytes, most live data {max_live}",
                round.number + 1
            );
        }
    }
    eprintln!(
        "{}; largest file {max_file} bytes, most live data {max_live} bytes",
        kills.summary()
    );
}

#[test]
fn acknowledged_writes_survive_kill_9_with_concurrent_writers() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        writer_child(&spec);
        return;
    }
    kill_loop(
        "acknowledged_writes_survive_kill_9_with_concurrent_writers",
        100,
        0x6b69_6c6c,
        Durability::Immediate,
    );
}

/// `Eventual` on a disk file acknowledges before the file sync: a process crash must still
/// lose nothing (the page cache outlives the process), and the deferred syncs must keep the
/// media consistent for recovery.
#[test]
fn deferred_writes_survive_kill_9_on_a_disk_file() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        writer_child(&spec);
        return;
    }
    kill_loop(
        "deferred_writes_survive_kill_9_on_a_disk_file",
        20,
        0x6576_656e,
        Durability::Eventual(Duration::from_millis(20)),
    );
}

#[test]
#[ignore = "soak: hundreds of kill -9 rounds (cargo test -p tierbase --release --test kv_kill -- --ignored)"]
fn kill_9_soak_keeps_every_acknowledged_write_and_a_bounded_file() {
    if let Ok(spec) = std::env::var(WRITER_ENV) {
        writer_child(&spec);
        return;
    }
    kill_loop(
        "kill_9_soak_keeps_every_acknowledged_write_and_a_bounded_file",
        1000,
        0x736f_616b,
        Durability::Immediate,
    );
}

#[test]
fn second_open_from_another_process_fails_naming_the_holder() {
    let o = opts(Durability::Immediate);
    if let Ok(path) = std::env::var(HOLDER_ENV) {
        LockTest::hold(|| KvStore::open(&path, &o));
    }
    let dir = store_dir(Durability::Immediate);
    let path = dir.path().join("held.tb");
    let test = LockTest {
        test: "second_open_from_another_process_fails_naming_the_holder",
        child_env: HOLDER_ENV,
        path: &path,
        locked: &path,
    };
    test.run(
        || KvStore::create(&path, &o)?.close(),
        || KvStore::open(&path, &o),
        drop,
    );
}
