//! Regression (review): a graceful shutdown must end even while a client pipelines requests
//! and never reads the replies (the connection's write can never finish): after a grace period
//! the server closes such connections, closes the store and `serve` returns.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{TestServer, resp};

#[test]
fn shutdown_ends_while_a_client_does_not_read_its_replies() {
    let mut server = TestServer::start();
    // Set a 1 MiB value, read the reply.
    let mut c = std::net::TcpStream::connect(server.addr).unwrap();
    let v = vec![b'v'; 1 << 20];
    c.write_all(&resp(&[b"SET", b"k", &v])).unwrap();
    let mut buf = [0u8; 5];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+OK\r\n");
    // A pipeline of GETs whose replies are never read.
    let mut p = Vec::new();
    for _ in 0..64 {
        p.extend_from_slice(&resp(&[b"GET", b"k"]));
    }
    c.write_all(&p).unwrap();
    // (Whether or not the server has read the whole pipeline yet, serve must return.)
    let t = Instant::now();
    server.handle.shutdown("test");
    match server.wait_within(Duration::from_secs(15)) {
        Some(r) => {
            let r = r.map(|s| s.reason);
            eprintln!("serve returned after {:?}: {:?}", t.elapsed(), r);
            assert!(r.is_ok(), "{r:?}");
        }
        None => panic!(
            "serve() still running 15 s after shutdown (client holds {} bytes unread)",
            64 << 20
        ),
    }
    drop(c);
}
