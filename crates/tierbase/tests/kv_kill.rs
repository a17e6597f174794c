//! A real `kill -9`: a child process writes to a store and reports each acknowledged write on
//! stdout; the parent kills it at a random moment, reopens the store and checks that every
//! acknowledged write is there. Repeated on the same store, so recovery of a store that has
//! been killed several times is exercised too.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use tierbase::kv::{KvOptions, KvStore, RecordLayout};

const CHILD_ENV: &str = "TIERBASE_KV_KILL_CHILD";

fn opts() -> KvOptions {
    KvOptions::default()
        .layout(RecordLayout::Variable)
        .chunk_size(1 << 20)
}

fn value_for(round: u64, i: u64) -> Vec<u8> {
    let len = 16 + (i * 31 % 400) as usize;
    (0..len).map(|j| (round * 7 + i + j as u64) as u8).collect()
}

/// Child mode: write keys `round:i` forever (until killed), printing `ack i` after each put,
/// deleting every 10th key again and printing `del i` after the delete.
fn child(path: &Path, round: u64) {
    let store = KvStore::open(path, &opts()).unwrap();
    let mut c = store.client();
    for i in 0.. {
        let key = format!("{round}:{i}");
        c.put(key.as_bytes(), &value_for(round, i)).unwrap();
        println!("ack {i}");
        if i % 10 == 9 {
            c.delete(key.as_bytes()).unwrap();
            println!("del {i}");
        }
    }
}

#[test]
fn acknowledged_writes_survive_kill_9() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let (round, path) = spec.split_once('|').unwrap();
        child(Path::new(path), round.parse().unwrap());
        return;
    }
    // Prefer tmpfs (survives kill -9 at memory speed); fall back to the temp dir.
    let base = if Path::new("/dev/shm").is_dir() {
        Some("/dev/shm")
    } else {
        None
    };
    let dir = match base {
        Some(b) => tempfile::tempdir_in(b).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let path = dir.path().join("killed.tb");
    KvStore::create(&path, &opts()).unwrap().close().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut expected: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    for round in 0..6u64 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "acknowledged_writes_survive_kill_9",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, format!("{round}|{}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        // Kill after a round-dependent number of acknowledgements.
        let target = 200 + round * 137;
        let mut acked = 0;
        while let Some(Ok(line)) = lines.next() {
            if let Some(i) = line.strip_prefix("ack ") {
                let i: u64 = i.parse().unwrap();
                expected.push((format!("{round}:{i}"), Some(value_for(round, i))));
                acked += 1;
                // Stop reading only where no delete of this key is pending (an unreported
                // delete may legitimately have happened).
                if acked >= target && i % 10 != 9 {
                    break;
                }
            } else if let Some(i) = line.strip_prefix("del ") {
                let key = format!("{round}:{i}");
                if let Some(e) = expected.iter_mut().rev().find(|(k, _)| *k == key) {
                    e.1 = None;
                }
            }
        }
        assert!(
            acked >= target,
            "round {round}: child stopped after {acked} acknowledgements"
        );
        eprintln!("round {round}: killed after {acked} acknowledged writes");
        // SIGKILL while it is in the middle of further writes.
        child.kill().unwrap();
        child.wait().unwrap();

        let store = KvStore::open(&path, &opts()).unwrap();
        let mut v = Vec::new();
        for (key, want) in &expected {
            match want {
                Some(val) => {
                    assert!(
                        store.get_into(key.as_bytes(), &mut v).unwrap(),
                        "round {round}: lost {key}"
                    );
                    assert_eq!(&v, val, "round {round}: wrong value for {key}");
                }
                // An acknowledged delete stays deleted.
                None => assert!(
                    !store.get_into(key.as_bytes(), &mut v).unwrap(),
                    "round {round}: {key} came back"
                ),
            }
        }
        drop(store);
        assert!(tierbase::kv::verify(&path).unwrap().is_ok());
    }
}
