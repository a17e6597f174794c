//! The machinery every end-to-end test of the server shares (`mod common;` in each test
//! file): a real server on its own thread, serving one of the stores from a temporary
//! directory on an ephemeral loopback port; clients for it (the `redis` crate, and raw RESP
//! over a `TcpStream` with read timeouts); and the command sequences every store's e2e test
//! runs, so that a store's e2e test is the store's name plus what is particular to it.
//!
//! Each test file uses a part of this module.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use redis::cmd;
use tierbase::device::Durability;
use tierbase_server::{Server, ServerConfig, ShutdownHandle, Summary, open_store_with};

/// How long a socket read may block before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a server may take to stop once asked.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Stores and servers
// ---------------------------------------------------------------------------------------

/// A store a test server serves: its `--store` name and where its files go.
#[derive(Clone, Copy, Debug)]
pub struct Store {
    /// The name `open_store` takes.
    pub name: &'static str,
    /// The store's path inside its test directory.
    pub file: &'static str,
    /// Put the directory on tmpfs (`/dev/shm`, the persistent-memory stand-in) when there is
    /// one.
    pub tmpfs: bool,
    /// The DRAM budget passed to `open_store_with` (`None`: the store's default).
    pub dram_budget: Option<u64>,
}

/// The hybrid KV store.
pub const KV: Store = Store {
    name: "kv",
    file: "served.tb",
    tmpfs: false,
    dram_budget: None,
};

/// The B+-tree store.
pub const BTREE: Store = Store {
    name: "btree",
    file: "tree",
    tmpfs: false,
    dram_budget: None,
};

/// The Plush store, on tmpfs when there is one.
pub const PLUSH: Store = Store {
    name: "plush",
    file: "served.plush",
    tmpfs: true,
    dram_budget: None,
};

impl Store {
    /// The same store with a DRAM budget.
    pub const fn dram_budget(self, bytes: u64) -> Store {
        Store {
            dram_budget: Some(bytes),
            ..self
        }
    }
}

/// A fresh temporary directory holding (the path of) one store, for servers started and
/// restarted on it.
#[derive(Debug)]
pub struct StoreDir {
    pub store: Store,
    /// The store's path (nothing is created there until a server starts).
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl StoreDir {
    pub fn new(store: Store) -> StoreDir {
        let dir = if store.tmpfs {
            tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
        } else {
            tempfile::tempdir().unwrap()
        };
        StoreDir {
            store,
            path: dir.path().join(store.file),
            _dir: dir,
        }
    }

    /// Starts a server on the store (creating it or reopening it), with [`base_config`].
    pub fn serve(&self) -> TestServer {
        self.serve_with(|_| {})
    }

    /// [`StoreDir::serve`] with the configuration adjusted by `adjust`.
    pub fn serve_with(&self, adjust: impl FnOnce(&mut ServerConfig)) -> TestServer {
        let (store, policy) = open_store_with(
            self.store.name,
            &self.path,
            Durability::Immediate,
            self.store.dram_budget,
        )
        .unwrap();
        self.serve_opened(store, policy, adjust)
    }

    /// Starts a server on `store`, opened by the test (options `open_store_with` does not
    /// give, e.g. a store that may not grow), with the reply policy `serve` would use.
    pub fn serve_store(&self, store: Box<dyn tierbase::store::Store>) -> TestServer {
        let policy = tierbase_server::reply_policy(store.as_ref(), Durability::Immediate);
        self.serve_opened(store, policy, |_| {})
    }

    /// Starts a server on the existing store opened read-only (`serve --read-only`).
    pub fn serve_read_only(&self) -> TestServer {
        let (store, policy) = tierbase_server::open_store_read_only(
            self.store.name,
            &self.path,
            self.store.dram_budget,
        )
        .unwrap();
        self.serve_opened(store, policy, |_| {})
    }

    fn serve_opened(
        &self,
        store: Box<dyn tierbase::store::Store>,
        policy: tierbase_server::ReplyPolicy,
        adjust: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        assert_eq!(store.describe().store, self.store.name);
        let mut config = base_config();
        adjust(&mut config);
        let server = Server::bind(store, policy, config).unwrap();
        let addr = server.ready().unwrap().addr;
        let handle = server.shutdown_handle();
        let (tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("e2e-serve".into())
            .spawn(move || {
                let _ = tx.send(server.serve());
            })
            .unwrap();
        TestServer {
            addr,
            path: self.path.clone(),
            handle,
            done,
            thread: Some(thread),
            _dir: None,
        }
    }
}

/// The configuration every test starts from: an ephemeral loopback port, two workers.
pub fn base_config() -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        worker_threads: 2,
        ..ServerConfig::default()
    }
}

/// A server running on its own thread.
pub struct TestServer {
    pub addr: SocketAddr,
    /// The store's path.
    pub path: PathBuf,
    pub handle: ShutdownHandle,
    done: mpsc::Receiver<tierbase_server::Result<Summary>>,
    thread: Option<JoinHandle<()>>,
    // Last: the directory outlives the server (when the server owns it).
    _dir: Option<StoreDir>,
}

impl TestServer {
    /// A server on a fresh KV store.
    pub fn start() -> Self {
        Self::start_with(|_| {})
    }

    /// [`TestServer::start`] with the configuration adjusted by `adjust`.
    pub fn start_with(adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        Self::start_store_with(KV, adjust)
    }

    /// A server on a fresh `store` (configured by `adjust`), in a directory it owns.
    pub fn start_store_with(store: Store, adjust: impl FnOnce(&mut ServerConfig)) -> Self {
        let dir = StoreDir::new(store);
        let mut server = dir.serve_with(adjust);
        server._dir = Some(dir);
        server
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The server's `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    pub fn client(&self) -> redis::Connection {
        connect(&self.url())
    }

    pub fn raw(&self) -> Raw {
        Raw::connect(self.addr)
    }

    /// Sends `bytes` on a new connection and reads one reply; asserts the server then closes
    /// the connection with nothing more sent. Returns the reply.
    pub fn reply_then_close(&self, bytes: &[u8]) -> Vec<u8> {
        let mut raw = self.raw();
        raw.send(bytes);
        let reply = raw.reply();
        raw.expect_eof();
        reply
    }

    /// Waits up to `timeout` for `serve` to return (without asking it to stop): its result,
    /// or `None` if it is still running (its thread is then left behind).
    pub fn wait_within(&mut self, timeout: Duration) -> Option<tierbase_server::Result<Summary>> {
        let Ok(result) = self.done.recv_timeout(timeout) else {
            self.thread.take();
            return None;
        };
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        Some(result)
    }

    /// Waits for `serve` to return (without asking it to stop) and asserts it returned Ok.
    pub fn wait(&mut self) -> Summary {
        self.wait_within(STOP_TIMEOUT)
            .expect("the server did not stop")
            .expect("serve returned an error")
    }

    /// Stops the server through its handle; asserts `serve` returned Ok.
    pub fn stop(&mut self) -> Summary {
        self.handle.shutdown("test");
        self.wait()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // A test that failed before `stop`: stop the server anyway, without panicking again.
        if let Some(t) = self.thread.take() {
            self.handle.shutdown("test dropped");
            if self.done.recv_timeout(STOP_TIMEOUT).is_ok() {
                let _ = t.join();
            }
        }
    }
}

/// A `redis` crate connection to `url`.
pub fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

// ---------------------------------------------------------------------------------------
// Raw RESP client
// ---------------------------------------------------------------------------------------

/// Encodes a multibulk request.
pub fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Encodes a bulk string reply.
pub fn bulk(v: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", v.len()).into_bytes();
    out.extend_from_slice(v);
    out.extend_from_slice(b"\r\n");
    out
}

pub fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A raw connection: writes bytes, reads whole RESP replies.
pub struct Raw {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Raw {
    /// Connects with [`READ_TIMEOUT`] on reads and writes.
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        Raw {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    /// Sends one multibulk request and reads its reply.
    pub fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send(&resp(args));
        self.reply()
    }

    /// Sends raw bytes (e.g. an inline request) and reads one reply.
    pub fn inline(&mut self, line: &str) -> Vec<u8> {
        self.send(line.as_bytes());
        self.reply()
    }

    fn line(&mut self, out: &mut Vec<u8>) -> Vec<u8> {
        let mut line = Vec::new();
        let n = self
            .reader
            .read_until(b'\n', &mut line)
            .expect("reading a reply");
        assert!(
            n > 0,
            "connection closed while waiting for a reply (got so far: {:?})",
            show(out)
        );
        assert!(
            line.ends_with(b"\r\n"),
            "reply line without CRLF: {:?}",
            show(&line)
        );
        out.extend_from_slice(&line);
        line.truncate(line.len() - 2);
        line
    }

    fn count(header: &[u8]) -> i64 {
        std::str::from_utf8(&header[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad length in {:?}", show(header)))
    }

    fn reply_into(&mut self, out: &mut Vec<u8>) {
        let header = self.line(out);
        match header.first() {
            Some(b'$' | b'!' | b'=') => {
                let len = Self::count(&header);
                if len >= 0 {
                    let mut body = vec![0; len as usize + 2];
                    self.reader.read_exact(&mut body).expect("reading a bulk");
                    assert!(body.ends_with(b"\r\n"), "bulk without CRLF");
                    out.extend_from_slice(&body);
                }
            }
            Some(b'*' | b'~' | b'>') => {
                for _ in 0..Self::count(&header).max(0) {
                    self.reply_into(out);
                }
            }
            Some(b'%' | b'|') => {
                for _ in 0..2 * Self::count(&header).max(0) {
                    self.reply_into(out);
                }
            }
            Some(b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(') => {}
            _ => panic!("not a RESP reply: {:?}", show(&header)),
        }
    }

    /// Reads one whole reply, as its bytes on the wire.
    pub fn reply(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.reply_into(&mut out);
        out
    }

    /// Reads `n` replies and asserts each is `+OK` (`what`: the requests, for the message).
    pub fn expect_oks(&mut self, n: usize, what: &str) {
        for i in 0..n {
            assert_eq!(show(&self.reply()), "+OK\r\n", "reply to {what} #{i}");
        }
    }

    /// Asserts the server closes the connection with nothing more sent.
    pub fn expect_eof(&mut self) {
        let mut rest = Vec::new();
        match self.reader.read_to_end(&mut rest) {
            Ok(_) => assert!(rest.is_empty(), "expected EOF, got {:?}", show(&rest)),
            Err(e) => panic!("expected EOF, got {e} (after {:?})", show(&rest)),
        }
    }
}

/// `SET key(i) value(i)` for `i` in `0..n` as one pipeline, and `GET key(i)` as another.
pub fn set_and_get_pipelines(
    n: usize,
    key: impl Fn(usize) -> String,
    value: impl Fn(usize) -> Vec<u8>,
) -> (Vec<u8>, Vec<u8>) {
    let mut sets = Vec::new();
    let mut gets = Vec::new();
    for i in 0..n {
        let k = key(i);
        sets.extend(resp(&[b"SET", k.as_bytes(), &value(i)]));
        gets.extend(resp(&[b"GET", k.as_bytes()]));
    }
    (sets, gets)
}

// ---------------------------------------------------------------------------------------
// Command sequences
// ---------------------------------------------------------------------------------------

/// Iterates SCAN (with `extra` options) to the end; every key returned, in order.
pub fn scan_all<K: redis::FromRedisValue>(con: &mut redis::Connection, extra: &[&str]) -> Vec<K> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    for _ in 0..100_000 {
        let mut c = cmd("SCAN");
        c.arg(&cursor);
        for e in extra {
            c.arg(*e);
        }
        let (next, batch): (String, Vec<K>) = c.query(con).unwrap();
        keys.extend(batch);
        if next == "0" {
            return keys;
        }
        assert!(next.parse::<u64>().is_ok(), "cursor {next:?}");
        cursor = next;
    }
    panic!("SCAN did not end");
}

/// The keys one `SCAN 0 MATCH pattern COUNT count` returns.
pub fn scan_match_once(con: &mut redis::Connection, pattern: &str, count: usize) -> Vec<String> {
    let (_, matched): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .unwrap();
    matched
}

/// The opening of a store's e2e test: `b`=2, then `a`=1 and `c`=3 in one MSET (3 keys);
/// then `INCR counter` from four connections at once, 200 times each, every increment
/// counted exactly once (800); then `key:0000`.. (`keys` of them), each holding its number.
/// 4 + `keys` keys in all.
pub fn write_common_keys(server: &TestServer, con: &mut redis::Connection, keys: usize) {
    let _: () = cmd("SET").arg("b").arg("2").query(con).unwrap();
    let _: () = cmd("MSET")
        .arg("a")
        .arg("1")
        .arg("c")
        .arg("3")
        .query(con)
        .unwrap();
    assert_eq!(cmd("GET").arg("b").query::<String>(con).unwrap(), "2");
    assert_eq!(cmd("DBSIZE").query::<u64>(con).unwrap(), 3);
    let url = server.url();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut c = connect(&url);
                for _ in 0..200 {
                    let _: i64 = cmd("INCR").arg("counter").query(&mut c).unwrap();
                }
            });
        }
    });
    assert_eq!(cmd("GET").arg("counter").query::<i64>(con).unwrap(), 800);
    for i in 0..keys {
        let _: () = cmd("SET")
            .arg(format!("key:{i:04}"))
            .arg(i)
            .query(con)
            .unwrap();
    }
}

/// Sets `big` to a 100 000-byte value and checks its length.
pub fn set_big_value(con: &mut redis::Connection) {
    let _: () = cmd("SET")
        .arg("big")
        .arg(vec![b'y'; 100_000])
        .query(con)
        .unwrap();
    assert_eq!(cmd("STRLEN").arg("big").query::<u64>(con).unwrap(), 100_000);
}

/// A SET of `key` to a value of `len` bytes is a "value too large" error reply, and `key`
/// keeps `kept`.
pub fn assert_value_too_large(con: &mut redis::Connection, key: &str, len: usize, kept: &str) {
    let err = cmd("SET")
        .arg(key)
        .arg(vec![b'x'; len])
        .query::<()>(con)
        .unwrap_err();
    assert!(err.to_string().contains("value too large"), "{err}");
    assert_eq!(cmd("GET").arg(key).query::<String>(con).unwrap(), kept);
}

/// An MSET holding a pair the store cannot hold (`bad_key` → `bad_value`) between two good
/// ones is refused whole: `mset:a` keeps its value and `mset:d` is not written (before
/// 2026-12-03 the kv and Plush stores wrote the pairs before the refused one).
pub fn assert_refused_mset_writes_nothing(
    con: &mut redis::Connection,
    bad_key: &[u8],
    bad_value: &[u8],
    error: &str,
) {
    let _: () = cmd("SET").arg("mset:a").arg("5").query(con).unwrap();
    let err = cmd("MSET")
        .arg("mset:a")
        .arg("9")
        .arg(bad_key)
        .arg(bad_value)
        .arg("mset:d")
        .arg("7")
        .query::<()>(con)
        .unwrap_err();
    assert!(err.to_string().contains(error), "{err}");
    assert_eq!(cmd("GET").arg("mset:a").query::<String>(con).unwrap(), "5");
    assert_eq!(
        cmd("GET")
            .arg("mset:d")
            .query::<Option<String>>(con)
            .unwrap(),
        None
    );
    let _: () = cmd("DEL").arg("mset:a").query(con).unwrap();
}

/// After a restart, what [`write_common_keys`] wrote with `keys` numbered keys, once `b` was
/// deleted, is all there: `keys` + 3 keys, the counter at 800, the last numbered key; and
/// INFO reports the guarantee.
pub fn assert_common_keys_kept(con: &mut redis::Connection, keys: usize) {
    assert_eq!(cmd("DBSIZE").query::<u64>(con).unwrap(), keys as u64 + 3);
    assert_eq!(cmd("GET").arg("counter").query::<i64>(con).unwrap(), 800);
    assert_eq!(
        cmd("GET").arg("b").query::<Option<String>>(con).unwrap(),
        None
    );
    let last = keys - 1;
    assert_eq!(
        cmd("GET")
            .arg(format!("key:{last:04}"))
            .query::<String>(con)
            .unwrap(),
        last.to_string()
    );
    let info: String = cmd("INFO").arg("persistence").query(con).unwrap();
    assert!(info.contains("tierbase_guarantee"), "{info}");
}
