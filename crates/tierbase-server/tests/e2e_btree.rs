//! End-to-end tests of `tierbase serve --store btree`: the B+-tree store behind the Redis
//! protocol, driven with the `redis` crate: point commands, atomic INCR from several
//! connections, SCAN in key order with cursors and MATCH, values above the store's limit, and
//! a restart that keeps every acknowledged write.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;

use redis::cmd;
use tierbase::device::Durability;
use tierbase_server::{Server, ServerConfig, ShutdownHandle, Summary, open_store};

struct Served {
    addr: SocketAddr,
    handle: ShutdownHandle,
    done: mpsc::Receiver<tierbase_server::Result<Summary>>,
    thread: Option<JoinHandle<()>>,
}

fn start(path: &Path) -> Served {
    let (store, policy) = open_store("btree", path, Durability::Immediate).unwrap();
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
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("server stops")
            .expect("clean stop");
        self.thread.take().unwrap().join().unwrap();
    }
}

#[test]
fn btree_store_serves_redis_commands_in_key_order_and_keeps_them_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tree");
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
    // INCR from four connections at once: every increment counted exactly once.
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
    for i in 0..500 {
        let _: () = cmd("SET")
            .arg(format!("key:{i:04}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    // SCAN walks the keys in byte order, across cursors; MATCH filters.
    let mut all = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(37)
            .query(&mut con)
            .unwrap();
        all.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        all, sorted,
        "SCAN on an ordered store returns keys in order, once"
    );
    assert_eq!(all.len(), 504);
    let (_, matched): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg("key:00*")
        .arg("COUNT")
        .arg(10_000)
        .query(&mut con)
        .unwrap();
    assert_eq!(matched.len(), 100);
    // A value beyond a page goes to overflow pages; one beyond the store's limit (a quarter
    // of the default 64 MiB pool) is an error reply, and the key is unchanged.
    let _: () = cmd("SET")
        .arg("big")
        .arg(vec![b'y'; 100_000])
        .query(&mut con)
        .unwrap();
    assert_eq!(
        cmd("STRLEN").arg("big").query::<u64>(&mut con).unwrap(),
        100_000
    );
    let _: () = cmd("DEL").arg("big").query(&mut con).unwrap();
    let err = cmd("SET")
        .arg("a")
        .arg(vec![b'x'; (16 << 20) + 1])
        .query::<()>(&mut con)
        .unwrap_err();
    assert!(err.to_string().contains("value too large"), "{err}");
    assert_eq!(cmd("GET").arg("a").query::<String>(&mut con).unwrap(), "1");
    let _: () = cmd("DEL").arg("b").query(&mut con).unwrap();
    drop(con);
    served.stop();

    let served = start(&path);
    let mut con = served.client();
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut con).unwrap(), 503);
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
            .arg("key:0499")
            .query::<String>(&mut con)
            .unwrap(),
        "499"
    );
    let info: String = cmd("INFO").arg("persistence").query(&mut con).unwrap();
    assert!(info.contains("tierbase_guarantee"), "{info}");
    drop(con);
    served.stop();
}
