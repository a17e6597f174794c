//! End-to-end tests of `tierbase serve --store plush`: the Plush store behind the Redis
//! protocol, driven with the `redis` crate: point commands, atomic INCR from several
//! connections, the unordered SCAN cursor walk (every key exactly once) with MATCH, values
//! above the payload chunk's limit, a restart that keeps every acknowledged write (replayed
//! from the recovery logs), and the refusal of deferred durability levels.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use redis::cmd;
use tierbase::device::Durability;
use tierbase_server::{Server, ServerConfig, ShutdownHandle, Summary, open_store, open_store_with};

/// A directory on tmpfs when there is one (the persistent-memory stand-in), else a temporary
/// directory.
fn tmpdir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

struct Served {
    addr: SocketAddr,
    handle: ShutdownHandle,
    done: mpsc::Receiver<tierbase_server::Result<Summary>>,
    thread: Option<JoinHandle<()>>,
}

fn start(path: &Path) -> Served {
    // A 64 KiB DRAM budget: a new store gets 2^4 DRAM entries of 256 slots (an existing one
    // keeps its own), so a few thousand keys fill DRAM halves and migrate to PMem.
    let (store, policy) =
        open_store_with("plush", path, Durability::Immediate, Some(64 << 10)).unwrap();
    assert_eq!(store.describe().store, "plush");
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        worker_threads: 2,
        ..ServerConfig::default()
    };
    let server = Server::bind(store, policy, config).unwrap();
    let addr = server.ready().unwrap().addr;
    let handle = server.shutdown_handle();
    let (tx, done) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let _ = tx.send(server.serve());
    });
    Served {
        addr,
        handle,
        done,
        thread: Some(thread),
    }
}

impl Served {
    fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://{}/", self.addr))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn stop(mut self) {
        self.handle.shutdown("test");
        self.done
            .recv_timeout(Duration::from_secs(20))
            .expect("server stops")
            .expect("clean stop");
        self.thread.take().unwrap().join().unwrap();
    }
}

/// Every key of a full SCAN walk, in the order returned.
fn scan_all(con: &mut redis::Connection, count: usize) -> Vec<String> {
    let mut all = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query(con)
            .unwrap();
        all.extend(keys);
        if next == 0 {
            return all;
        }
        cursor = next;
    }
}

/// A numeric field of an INFO reply.
fn info_number(info: &str, field: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn plush_store_serves_redis_commands_and_keeps_them_across_a_restart() {
    let dir = tmpdir();
    let path = dir.path().join("served.plush");
    let served = start(&path);
    let mut con = served.client();
    let _: () = cmd("SET").arg("b").arg("2").query(&mut con).unwrap();
    let _: () = cmd("MSET")
        .arg("a")
        .arg("1")
        .arg("c")
        .arg("3")
        .query(&mut con)
        .unwrap();
    assert_eq!(cmd("GET").arg("b").query::<String>(&mut con).unwrap(), "2");
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut con).unwrap(), 3);
    // INCR from four connections at once: `modify` under the key's DRAM entry lock counts
    // every increment exactly once.
    let url = format!("redis://{}/", served.addr);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                for _ in 0..200 {
                    let _: i64 = cmd("INCR").arg("counter").query(&mut c).unwrap();
                }
            });
        }
    });
    assert_eq!(
        cmd("GET").arg("counter").query::<i64>(&mut con).unwrap(),
        800
    );
    // Enough keys that DRAM halves (128 slots) fill and migrate to PMem.
    for i in 0..3000 {
        let _: () = cmd("SET")
            .arg(format!("key:{i:04}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    // SCAN: no order, but every key present throughout exactly once, across cursors.
    let all = scan_all(&mut con, 37);
    let set: BTreeSet<&String> = all.iter().collect();
    assert_eq!(set.len(), all.len(), "a key returned twice");
    assert_eq!(all.len(), 3004);
    assert!(set.contains(&"counter".to_string()));
    let (_, matched): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg("key:00*")
        .arg("COUNT")
        .arg(100_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(matched.len(), 100);
    // A value goes to a payload log (up to a payload chunk, 4 MiB, with its key).
    let _: () = cmd("SET")
        .arg("big")
        .arg(vec![b'y'; 100_000])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        cmd("STRLEN").arg("big").query::<u64>(&mut con).unwrap(),
        100_000
    );
    assert_eq!(cmd("DEL").arg("big").query::<u64>(&mut con).unwrap(), 1);
    assert_eq!(cmd("DEL").arg("big").query::<u64>(&mut con).unwrap(), 0);
    assert_eq!(cmd("DEL").arg("b").query::<u64>(&mut con).unwrap(), 1);
    let info: String = cmd("INFO").query(&mut con).unwrap();
    assert!(info.contains("tierbase_commit:immediate"), "{info}");
    assert!(info.contains("store:plush"), "{info}");
    assert!(info_number(&info, "plush_half_migrations") > 0, "{info}");
    assert!(info_number(&info, "plush_levels") >= 1, "{info}");
    drop(con);
    served.stop();

    // Restart: the recovery logs replay what was still in DRAM.
    let served = start(&path);
    let mut con = served.client();
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut con).unwrap(), 3003);
    assert_eq!(
        cmd("GET").arg("counter").query::<i64>(&mut con).unwrap(),
        800
    );
    assert_eq!(
        cmd("GET")
            .arg("b")
            .query::<Option<String>>(&mut con)
            .unwrap(),
        None
    );
    assert_eq!(
        cmd("GET")
            .arg("key:2999")
            .query::<String>(&mut con)
            .unwrap(),
        "2999"
    );
    assert_eq!(scan_all(&mut con, 500).len(), 3003);
    let info: String = cmd("INFO").arg("persistence").query(&mut con).unwrap();
    assert!(info.contains("tierbase_guarantee"), "{info}");
    drop(con);
    served.stop();
}

#[test]
fn plush_refuses_deferred_durability_levels() {
    let dir = tmpdir();
    let path = dir.path().join("never.plush");
    for level in [
        Durability::Eventual(Duration::from_millis(50)),
        Durability::None,
    ] {
        let Err(err) = open_store("plush", &path, level) else {
            panic!("plush opened at {}", level.name());
        };
        let msg = err.to_string();
        assert!(msg.contains("no deferred levels"), "{msg}");
        assert!(msg.contains("use immediate"), "{msg}");
        assert!(!path.exists(), "no store file is created");
    }
}

/// A record whose key + value exceed a payload chunk is an error reply; the key keeps its
/// value and the store keeps taking writes (as `kv` and `btree` do).
#[test]
fn oversized_value_is_an_error_reply_and_the_store_stays_writable() {
    let dir = tmpdir();
    let path = dir.path().join("big.plush");
    let served = start(&path);
    let mut con = served.client();
    let _: () = cmd("SET").arg("a").arg("1").query(&mut con).unwrap();
    let err = cmd("SET")
        .arg("a")
        .arg(vec![b'x'; 4 << 20])
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("value too large"), "{err}");
    assert_eq!(cmd("GET").arg("a").query::<String>(&mut con).unwrap(), "1");
    let _: () = cmd("SET").arg("b").arg("2").query(&mut con).unwrap();
    assert_eq!(cmd("GET").arg("b").query::<String>(&mut con).unwrap(), "2");
    drop(con);
    served.stop();
}
