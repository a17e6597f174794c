//! Regression (review): a graceful shutdown must end even while a client pipelines requests
//! and never reads the replies (the connection's write can never finish): after a grace period
//! the server closes such connections, closes the store and `serve` returns.

use std::io::{Read, Write};
use std::time::{Duration, Instant};
use tierbase::device::Durability;
use tierbase_server::{Server, ServerConfig, open_store};

#[test]
fn shutdown_ends_while_a_client_does_not_read_its_replies() {
    let dir = tempfile::tempdir().unwrap();
    let (store, policy) =
        open_store("kv", &dir.path().join("s.tb"), Durability::Immediate).unwrap();
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        worker_threads: 2,
        ..ServerConfig::default()
    };
    let server = Server::bind(store, policy, config).unwrap();
    let addr = server.ready().unwrap().addr;
    let handle = server.shutdown_handle();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = server.serve();
        let _ = tx.send(r.map(|s| s.reason));
    });
    // Set a 1 MiB value, read the reply.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let v = vec![b'v'; 1 << 20];
    let mut req = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", v.len()).into_bytes();
    req.extend_from_slice(&v);
    req.extend_from_slice(b"\r\n");
    c.write_all(&req).unwrap();
    let mut buf = [0u8; 5];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+OK\r\n");
    // A pipeline of GETs whose replies are never read.
    let mut p = Vec::new();
    for _ in 0..64 {
        p.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
    c.write_all(&p).unwrap();
    // (Whether or not the server has read the whole pipeline yet, serve must return.)
    let t = Instant::now();
    handle.shutdown("test");
    match rx.recv_timeout(Duration::from_secs(15)) {
        Ok(r) => {
            eprintln!("serve returned after {:?}: {:?}", t.elapsed(), r);
            assert!(r.is_ok(), "{r:?}");
        }
        Err(_) => panic!(
            "serve() still running 15 s after shutdown (client holds {} bytes unread)",
            64 << 20
        ),
    }
    drop(c);
}
