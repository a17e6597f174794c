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

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tierbase::Error;
use tierbase::device::{Durability, FsKind};
use tierbase::kv::{KvOptions, KvStore, ReclaimOptions, RecordLayout};
use tierbase::testing::crash::{LogLine, TextState, Write};
use tierbase::testing::kill::{self, KillChild, TestRng, env_u64, fork_guard, value_token};

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
    } else if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
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
    let mut fill = TestRng(rng.next_u64());
    (0..len).map(|_| fill.next_u64() as u8).collect()
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
    println!("child started");
    std::thread::scope(|s| {
        for t in 0..WRITERS {
            let store = &store;
            s.spawn(move || writer_thread(store, t, seed));
        }
    });
}

fn writer_thread(store: &KvStore, t: u64, seed: u64) {
    let mut rng = TestRng(seed ^ (t + 1).wrapping_mul(0xa076_1d64_78bd_642f));
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
        println!("{}", TextState::begin_line(t, &key, &write));
        let k = key.as_bytes();
        let result = match write {
            Write::Put(_) => c.put(k, &v).map(|_| true),
            Write::Update(_) => c.update(k, &v),
            Write::Delete => c.delete(k).map(|_| true),
        };
        match result {
            Ok(applied) => println!("{}", TextState::ack_line(t, applied)),
            Err(e) => {
                println!("error thread {t}: {e}");
                std::process::exit(3);
            }
        }
    }
}

/// Child mode of the lock test: open the store, write a key, say "ready", wait to be killed.
fn holder_child(path: &str) {
    kill::child_setup();
    let store = KvStore::open(path, &opts(Durability::Immediate)).unwrap_or_else(|e| {
        println!("error holder: {e}");
        std::process::exit(3);
    });
    store.put(b"held", b"by the child").unwrap();
    println!("ready");
    kill::wait_for_kill()
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
    let rounds = env_u64("TIERBASE_KILL_ROUNDS").unwrap_or(rounds);
    let seed = env_u64("TIERBASE_KILL_SEED").unwrap_or(seed);
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
    let mut rng = TestRng(seed);
    let (mut total_acks, mut max_file, mut max_live) = (0, 0, 0);
    let mut in_flight_at_kill = 0;
    for round in 0..rounds {
        let ctx = format!("round {round} (TIERBASE_KILL_SEED={seed:#x})");
        let target = 1 + rng.below(600);
        let child_seed = seed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut child = KillChild::spawn_self(
            test,
            WRITER_ENV,
            &format!("{child_seed}|{}|{}", durability.name(), path.display()),
        );
        total_acks += child.kill_after(target, &ctx, |line| {
            kill::feed(&mut state, line, &ctx) == LogLine::Ack
        });
        in_flight_at_kill += state.in_flight();

        let fork = fork_guard();
        let store = KvStore::open(&path, &opts(durability))
            .unwrap_or_else(|e| panic!("{ctx}: reopen: {e}"));
        assert_eq!(
            store.region().defers_persists(),
            durability.defers(),
            "{ctx}: the store must run the durability level under test"
        );
        let actual = dump(&store);
        state
            .check(&actual)
            .unwrap_or_else(|e| panic!("{ctx}: after kill -9: {e}"));
        for (k, tok) in &actual {
            let v = store.get(k.as_bytes()).unwrap();
            assert_eq!(
                v.as_deref().map(value_token).as_ref(),
                Some(tok),
                "{ctx}: get {k}"
            );
        }
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
        if (round + 1) % 100 == 0 {
            eprintln!(
                "after {} rounds: file {file} bytes, most live data {max_live}",
                round + 1
            );
        }
    }
    eprintln!(
        "{rounds} kill -9 rounds: {total_acks} acknowledged writes, {in_flight_at_kill} in \
         flight at the kills; largest file {max_file} bytes, most live data {max_live} bytes"
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
    if let Ok(path) = std::env::var(HOLDER_ENV) {
        holder_child(&path);
        return;
    }
    let dir = store_dir(Durability::Immediate);
    let path = dir.path().join("held.tb");
    {
        let _fork = fork_guard();
        KvStore::create(&path, &opts(Durability::Immediate))
            .unwrap()
            .close()
            .unwrap();
    }
    let mut child = KillChild::spawn_self(
        "second_open_from_another_process_fails_naming_the_holder",
        HOLDER_ENV,
        &path.display().to_string(),
    );
    child.wait_for("ready");
    let err = match KvStore::open(&path, &opts(Durability::Immediate)) {
        Ok(_) => panic!("a second open of a store another process holds succeeded"),
        Err(e) => e,
    };
    let pid = child.id();
    match &err {
        Error::Locked { path: p, holder } => {
            assert_eq!(p, &path);
            assert!(
                holder.contains(&format!("process {pid}")),
                "holder {holder:?} does not name the child (pid {pid})"
            );
        }
        other => panic!("expected Error::Locked, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&path.display().to_string())
            && msg.contains(&format!("process {pid}"))
            && msg.contains("lock")
            && !msg.contains('\n'),
        "not one clear line: {msg:?}"
    );
    // The holder dies: its lock goes with it, and the store opens with its write.
    child.kill();
    let _fork = fork_guard();
    let store = KvStore::open(&path, &opts(Durability::Immediate)).unwrap();
    assert_eq!(
        store.get(b"held").unwrap().as_deref(),
        Some(&b"by the child"[..])
    );
}
