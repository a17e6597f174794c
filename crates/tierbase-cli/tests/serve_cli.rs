//! `tierbase serve` as a process: acknowledged writes survive `kill -9` under concurrent load
//! (checked against the state each client knows it was acknowledged), SIGTERM and SIGINT shut
//! down cleanly, operator mistakes are one clear line, and every commit level starts and keeps
//! its data across a clean restart.
//!
//! The tests speak raw RESP over `std::net::TcpStream` (no client crate), start each server
//! on a free loopback port, and wait for its "listening on" line, never for a fixed time.

mod common;

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{BIN, assert_one_line_error, tierbase};

/// Upper bound for anything the tests wait for (readiness, exit, replies): reached only when
/// something hangs, and then the test fails with what it saw.
const DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// A served process.
// ---------------------------------------------------------------------------------------------

/// A running `tierbase serve`, its port and everything it has written to stderr.
struct Served {
    child: Option<Child>,
    port: u16,
    /// The "listening on" line.
    ready_line: String,
    /// Every stderr line so far (a thread keeps draining the pipe).
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().unwrap().port()
}

/// Starts `tierbase serve --path <path> --listen 127.0.0.1:<free port> <extra…>` and waits
/// for its "listening on" line. Retries with another port when the one picked was taken in
/// between.
fn serve(path: &Path, extra: &[&str]) -> Served {
    serve_on("127.0.0.1", path, extra)
}

/// [`serve`] listening on `host` (an IPv4 address) instead of loopback.
fn serve_on(host: &str, path: &Path, extra: &[&str]) -> Served {
    let mut last = String::new();
    for _ in 0..5 {
        match try_serve(host, path, extra) {
            Ok(s) => return s,
            Err(err) if err.contains("in use") => last = err,
            Err(err) => panic!("tierbase serve did not start: {err}"),
        }
    }
    panic!("tierbase serve did not find a free port: {last}");
}

fn try_serve(host: &str, path: &Path, extra: &[&str]) -> Result<Served, String> {
    let port = free_port();
    let listen = format!("{host}:{port}");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--path",
            path.to_str().unwrap(),
            "--listen",
            &listen,
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tierbase serve");
    let pipe = child.stderr.take().unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel::<String>();
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                lines.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        })
    };
    let mut served = Served {
        child: Some(child),
        port,
        ready_line: String::new(),
        lines,
        reader: Some(reader),
    };
    let start = Instant::now();
    loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("listening on") => {
                served.ready_line = line;
                return Ok(served);
            }
            Ok(_) => {}
            Err(RecvTimeoutError::Disconnected) => {
                // stderr closed before readiness: the process ended.
                let (status, err) = served.wait_exit();
                return Err(format!("exited ({status}) before listening:\n{err}"));
            }
            Err(RecvTimeoutError::Timeout) => {
                let err = served.stderr_so_far();
                served.kill9();
                return Err(format!(
                    "no 'listening on' line within {DEADLINE:?}:\n{err}"
                ));
            }
        }
    }
}

impl Served {
    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server already reaped").id()
    }

    fn connect(&self) -> Conn {
        Conn::connect(self.port)
    }

    fn stderr_so_far(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// SIGKILL (what `Child::kill` sends on Unix), then reap.
    fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }

    /// Sends `signal` (TERM, INT…) with kill(1).
    fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{signal} failed");
    }

    /// Waits (at most [`DEADLINE`]; then SIGKILL and fail) for the process to end; returns
    /// its status and all of its stderr.
    fn wait_exit(&mut self) -> (ExitStatus, String) {
        let mut child = self.child.take().expect("server already reaped");
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(DEADLINE) {
            Ok(status) => status.expect("wait for tierbase serve"),
            Err(_) => {
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
                let _ = waiter.join();
                panic!(
                    "tierbase serve did not exit within {DEADLINE:?}; stderr:\n{}",
                    self.stderr_so_far()
                );
            }
        };
        let _ = waiter.join();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        (status, self.stderr_so_far())
    }

    /// SHUTDOWN (no reply: the connection just closes), then a clean exit.
    fn shutdown(mut self) -> String {
        let mut c = self.connect();
        c.send(&[b"SHUTDOWN"]).expect("send SHUTDOWN");
        // Redis answers SHUTDOWN by closing the connection.
        assert!(c.read().is_err(), "SHUTDOWN must not reply");
        let port = self.port;
        let (status, err) = self.wait_exit();
        assert!(status.success(), "after SHUTDOWN: {status}\n{err}");
        assert!(err.contains("stopped (SHUTDOWN command)"), "{err}");
        assert_stop_line_names_what_was_served(&err, port);
        err
    }
}

/// The stop line says the store closed cleanly and repeats what the start line said was
/// served: address, store, medium, commit level and guarantee.
fn assert_stop_line_names_what_was_served(stderr: &str, port: u16) {
    let start = stderr
        .lines()
        .find_map(|l| l.split_once("listening on "))
        .map(|(_, what)| what)
        .expect("a start line");
    let stop = stderr
        .lines()
        .find(|l| l.contains("tierbase serve: stopped ("))
        .expect("a stop line");
    assert!(stop.contains("store closed cleanly"), "{stop}");
    assert!(
        stop.ends_with(&format!("served {start}")),
        "{stop}\nstarted: {start}"
    );
    assert!(start.contains(&format!(":{port} — store ")), "{start}");
    for part in ["; commit ", "; guarantee: "] {
        assert!(start.contains(part), "{start}");
    }
}

impl Drop for Served {
    /// A failing test leaves no server behind.
    fn drop(&mut self) {
        self.kill9();
    }
}

// ---------------------------------------------------------------------------------------------
// A tiny RESP2 client.
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
}

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

impl Conn {
    fn connect(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to tierbase serve");
        // A hung server fails the test instead of hanging it.
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    /// Writes one command as a multibulk request.
    fn send(&mut self, args: &[&[u8]]) -> io::Result<()> {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&buf)
    }

    /// One line without its CRLF; a line cut short (the server died mid-reply) is an error.
    fn line(&mut self) -> io::Result<String> {
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed mid-reply",
            ));
        }
        line.truncate(line.len() - 2);
        String::from_utf8(line).map_err(|e| invalid(e.to_string()))
    }

    /// Reads one reply: simple string, error, integer, bulk string or nil.
    fn read(&mut self) -> io::Result<Resp> {
        let line = self.line()?;
        let (kind, rest) = line
            .split_at_checked(1)
            .ok_or_else(|| invalid(line.clone()))?;
        let int = |s: &str| s.parse::<i64>().map_err(|_| invalid(line.clone()));
        Ok(match kind {
            "+" => Resp::Simple(rest.to_string()),
            "-" => Resp::Error(rest.to_string()),
            ":" => Resp::Int(int(rest)?),
            "$" => {
                let n = int(rest)?;
                if n < 0 {
                    return Ok(Resp::Nil);
                }
                let mut data = vec![0; usize::try_from(n).unwrap() + 2];
                self.r.read_exact(&mut data)?;
                if !data.ends_with(b"\r\n") {
                    return Err(invalid(format!("bulk of {n} bytes without CRLF")));
                }
                data.truncate(data.len() - 2);
                Resp::Bulk(data)
            }
            _ => return Err(invalid(format!("unexpected reply type: {line}"))),
        })
    }

    fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Resp> {
        self.send(args)?;
        self.read()
    }

    /// A command that must succeed with a reply.
    fn ok(&mut self, args: &[&[u8]]) -> Resp {
        self.cmd(args)
            .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(args[0])))
    }

    fn set(&mut self, key: &str, value: &str) {
        let r = self.ok(&[b"SET", key.as_bytes(), value.as_bytes()]);
        assert_eq!(r, Resp::Simple("OK".into()), "SET {key}");
    }

    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.ok(&[b"GET", key.as_bytes()]) {
            Resp::Bulk(v) => Some(v),
            Resp::Nil => None,
            other => panic!("GET {key}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. kill -9 under load, against the state each client knows.
// ---------------------------------------------------------------------------------------------

const WRITERS: usize = 4;
const KEYS_PER_WRITER: u64 = 50;
/// Acknowledged operations each writer makes per cycle before the server is killed.
const ACKED_BEFORE_KILL: u64 = 1000;
const CYCLES: u32 = 3;

/// What a client knows about one key: the last value the server acknowledged, and the value
/// of a write that was sent but never answered (the connection broke).
#[derive(Clone, Debug, Default)]
struct KeyState {
    acked: Option<Vec<u8>>,
    in_flight: Option<Vec<u8>>,
}

/// One writer's keys and its counter (`None`: no INCR acknowledged yet).
#[derive(Clone, Debug, Default)]
struct WriterModel {
    keys: BTreeMap<String, KeyState>,
    counter: Option<i64>,
    counter_in_flight: bool,
}

/// Acknowledged operations per writer in the current cycle, and writers that stopped.
#[derive(Debug, Default)]
struct Progress {
    state: Mutex<(Vec<u64>, Vec<Option<String>>)>,
    changed: Condvar,
}

impl Progress {
    fn new() -> Self {
        Progress {
            state: Mutex::new((vec![0; WRITERS], vec![None; WRITERS])),
            changed: Condvar::new(),
        }
    }

    fn acked(&self, t: usize) {
        let mut s = self.state.lock().unwrap();
        s.0[t] += 1;
        if s.0[t] == ACKED_BEFORE_KILL {
            self.changed.notify_all();
        }
    }

    fn stopped(&self, t: usize, why: String) {
        self.state.lock().unwrap().1[t] = Some(why);
        self.changed.notify_all();
    }

    /// Waits until every writer has [`ACKED_BEFORE_KILL`] acknowledged operations; fails if one
    /// stopped first or nothing moves for [`DEADLINE`].
    fn wait_all_reached(&self, server: &Served) {
        let start = Instant::now();
        let mut s = self.state.lock().unwrap();
        loop {
            if let Some((t, why)) =
                s.1.iter()
                    .enumerate()
                    .find_map(|(t, w)| Some((t, w.as_ref()?)))
            {
                panic!(
                    "writer {t} stopped before the kill: {why}\nstderr:\n{}",
                    server.stderr_so_far()
                );
            }
            if s.0.iter().all(|&n| n >= ACKED_BEFORE_KILL) {
                return;
            }
            let left = DEADLINE.saturating_sub(start.elapsed());
            assert!(
                !left.is_zero(),
                "writers stuck at {:?} acknowledged ops; stderr:\n{}",
                s.0,
                server.stderr_so_far()
            );
            s = self.changed.wait_timeout(s, left).unwrap().0;
        }
    }
}

/// A value naming its cycle, writer and sequence number, of varying length.
fn value(cycle: u32, t: usize, j: u64) -> Vec<u8> {
    let mut v = format!("c{cycle}-t{t}-j{j}-").into_bytes();
    v.resize(v.len() + (j % 7) as usize * 23, b'a' + (j % 26) as u8);
    v
}

/// One writer: SET over its keys, an INCR every 10th operation, each answered before the next
/// is sent, until the connection breaks. Returns what it knows; an unexpected reply (a
/// protocol error or a counter that skipped) is an `Err`.
fn writer(
    port: u16,
    t: usize,
    cycle: u32,
    model: WriterModel,
    progress: &Progress,
) -> Result<WriterModel, String> {
    let result = write_until_broken(port, t, cycle, model, progress);
    if let Err(e) = &result {
        progress.stopped(t, e.clone());
    }
    result
}

fn write_until_broken(
    port: u16,
    t: usize,
    cycle: u32,
    mut model: WriterModel,
    progress: &Progress,
) -> Result<WriterModel, String> {
    let mut c = Conn::connect(port);
    let counter = format!("counter{{{t}}}");
    let mut j = 0u64;
    loop {
        j += 1;
        if j % 10 == 9 {
            model.counter_in_flight = true;
            let reply = match c.cmd(&[b"INCR", counter.as_bytes()]) {
                Ok(r) => r,
                Err(e) => {
                    progress.stopped(t, e.to_string());
                    return Ok(model);
                }
            };
            let want = model.counter.unwrap_or(0) + 1;
            if reply != Resp::Int(want) {
                return Err(format!("INCR {counter}: {reply:?}, expected {want}"));
            }
            model.counter = Some(want);
            model.counter_in_flight = false;
        } else {
            let key = format!("key{{{t}}}-{}", j % KEYS_PER_WRITER);
            let v = value(cycle, t, j);
            let state = model.keys.entry(key.clone()).or_default();
            state.in_flight = Some(v.clone());
            let reply = match c.cmd(&[b"SET", key.as_bytes(), &v]) {
                Ok(r) => r,
                Err(e) => {
                    progress.stopped(t, e.to_string());
                    return Ok(model);
                }
            };
            if reply != Resp::Simple("OK".into()) {
                return Err(format!("SET {key}: {reply:?}"));
            }
            state.acked = Some(v);
            state.in_flight = None;
        }
        progress.acked(t);
    }
}

/// Every key holds its last acknowledged value or the in-flight one after it, never an
/// older value and never nothing once something was acknowledged; each counter its last
/// acknowledged value or one more if an INCR was in flight. Then the model becomes what is
/// there (the next cycle starts from it). Returns how many keys held an in-flight value.
fn verify_and_settle(c: &mut Conn, t: usize, model: &mut WriterModel, cycle: u32) -> usize {
    fn show(v: &Option<Vec<u8>>) -> Option<String> {
        v.as_deref()
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
    let mut took_in_flight = 0;
    for (key, state) in &mut model.keys {
        let got = c.get(key);
        let ok = got == state.acked || (state.in_flight.is_some() && got == state.in_flight);
        assert!(
            ok,
            "after kill {cycle}: {key} = {:?}, expected acknowledged {:?} or in-flight {:?}",
            show(&got),
            show(&state.acked),
            show(&state.in_flight),
        );
        if state.in_flight.is_some() && got == state.in_flight && got != state.acked {
            took_in_flight += 1;
        }
        state.acked = got;
        state.in_flight = None;
    }
    let counter = format!("counter{{{t}}}");
    let got = c.get(&counter).map(|v| {
        String::from_utf8(v)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or_else(|| panic!("{counter} is not an integer"))
    });
    let base = model.counter;
    let ok = got == base || (model.counter_in_flight && got == Some(base.unwrap_or(0) + 1));
    assert!(
        ok,
        "after kill {cycle}: {counter} = {got:?}, expected {base:?} (+1 if in flight: {})",
        model.counter_in_flight
    );
    model.counter = got;
    model.counter_in_flight = false;
    took_in_flight
}

/// One `field:value` of `INFO persistence`.
fn info_field(c: &mut Conn, field: &str) -> Option<String> {
    let Resp::Bulk(info) = c.ok(&[b"INFO", b"persistence"]) else {
        panic!("INFO must reply with a bulk string");
    };
    String::from_utf8(info)
        .unwrap()
        .lines()
        .find_map(|l| Some(l.strip_prefix(field)?.strip_prefix(':')?.to_string()))
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_write() {
    kill_9_under_load("kv");
}

#[test]
fn kill_9_under_load_loses_no_acknowledged_write_btree() {
    kill_9_under_load("btree");
}

fn kill_9_under_load(store: &str) {
    // On a disk file system this covers what the server promises at `immediate` (fsync
    // before reply); on tmpfs it covers a process crash only.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.tb");
    let args = ["--store", store];
    let mut models = vec![WriterModel::default(); WRITERS];
    let mut server = serve(&path, &args);
    assert!(
        server.ready_line.contains(&format!("store {store} ")),
        "{}",
        server.ready_line
    );
    assert!(
        server.ready_line.contains("commit immediate"),
        "{}",
        server.ready_line
    );

    for cycle in 1..=CYCLES {
        let progress = Arc::new(Progress::new());
        let writers: Vec<_> = models
            .iter()
            .enumerate()
            .map(|(t, model)| {
                let (model, progress, port) = (model.clone(), progress.clone(), server.port);
                std::thread::spawn(move || writer(port, t, cycle, model, &progress))
            })
            .collect();
        progress.wait_all_reached(&server);
        // On a disk file the store defers its syncs and the server syncs before replying:
        // the replies the writers counted did wait for syncs.
        let mut c = server.connect();
        if info_field(&mut c, "tierbase_sync_before_reply").as_deref() == Some("1") {
            let syncs = info_field(&mut c, "tierbase_syncs_before_reply")
                .and_then(|n| n.parse::<u64>().ok())
                .expect("INFO tierbase_syncs_before_reply");
            assert!(syncs > 0, "acknowledged writes without a sync before reply");
        }
        drop(c);
        // SIGKILL with every writer mid-stream.
        server.kill9();
        for (t, w) in writers.into_iter().enumerate() {
            models[t] = w
                .join()
                .expect("writer thread panicked")
                .unwrap_or_else(|e| panic!("writer {t}, cycle {cycle}: {e}"));
        }

        server = serve(&path, &args);
        let mut c = server.connect();
        let mut in_flight_applied = 0;
        for (t, model) in models.iter_mut().enumerate() {
            in_flight_applied += verify_and_settle(&mut c, t, model, cycle);
        }
        // Nothing else is in the store: every key present is one a writer wrote.
        let present = models
            .iter()
            .map(|m| m.keys.values().filter(|s| s.acked.is_some()).count())
            .sum::<usize>()
            + models.iter().filter(|m| m.counter.is_some()).count();
        assert_eq!(c.ok(&[b"DBSIZE"]), Resp::Int(present as i64));
        let acked = progress.state.lock().unwrap().0.clone();
        eprintln!(
            "cycle {cycle}: acknowledged ops per writer {acked:?}; \
             {in_flight_applied} in-flight SETs found applied"
        );
    }

    // A clean stop after the last restart, and the state survives it exactly.
    server.shutdown();
    let server = serve(&path, &args);
    let mut c = server.connect();
    for (t, model) in models.iter().enumerate() {
        for (key, state) in &model.keys {
            assert_eq!(c.get(key), state.acked, "{key} after a clean restart");
        }
        let counter = c.get(&format!("counter{{{t}}}"));
        assert_eq!(counter, model.counter.map(|n| n.to_string().into_bytes()));
    }
    drop(c);
    server.shutdown();
}

// ---------------------------------------------------------------------------------------------
// 2. SIGTERM and SIGINT shut down cleanly.
// ---------------------------------------------------------------------------------------------

fn graceful_stop_on(signal: &str) {
    for store in ["kv", "btree"] {
        graceful_stop_of(store, signal);
    }
}

fn graceful_stop_of(store: &str, signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("signal.tb");
    let args = ["--store", store];
    let mut server = serve(&path, &args);
    let mut c = server.connect();
    for i in 0..5 {
        c.set(&format!("k{i}"), &format!("v{i}-{signal}"));
    }
    // The connection stays open: shutdown must close it, not wait for it.
    server.signal(signal);
    let (status, err) = server.wait_exit();
    assert!(status.success(), "after SIG{signal}: {status}\n{err}");
    assert!(err.contains(&format!("stopped (SIG{signal})")), "{err}");
    assert_stop_line_names_what_was_served(&err, server.port);
    for bad in ["panicked", "error"] {
        assert!(!err.contains(bad), "{err}");
    }
    assert!(c.read().is_err(), "the open connection is closed");

    let server = serve(&path, &args);
    let mut c = server.connect();
    for i in 0..5 {
        assert_eq!(
            c.get(&format!("k{i}")),
            Some(format!("v{i}-{signal}").into_bytes())
        );
    }
    drop(c);
    server.shutdown();
}

#[test]
fn sigterm_stops_cleanly_and_keeps_data() {
    graceful_stop_on("TERM");
}

#[test]
fn sigint_stops_cleanly_and_keeps_data() {
    graceful_stop_on("INT");
}

// ---------------------------------------------------------------------------------------------
// 3. Operator errors: one clear line, non-zero exit, no panic.
// ---------------------------------------------------------------------------------------------

#[test]
fn path_in_missing_directory_is_one_line() {
    let o = tierbase(&["serve", "--path", "/nonexistent-dir/x.tb"]);
    let err = assert_one_line_error(&o, "missing directory");
    assert!(err.contains("/nonexistent-dir/x.tb"), "{err}");
}

#[test]
fn public_listen_without_password_is_refused_before_creating_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.tb");
    let listen = format!("0.0.0.0:{}", free_port());
    let o = tierbase(&[
        "serve",
        "--path",
        path.to_str().unwrap(),
        "--listen",
        &listen,
    ]);
    let err = assert_one_line_error(&o, "public listen");
    assert!(err.contains("requirepass"), "{err}");
    assert!(!path.exists(), "the store file must not be created");
}

/// `--protected-mode no` lets a non-loopback address be served without a password. (It once
/// could not be given at all: the flag was parsed as a switch that takes no value.)
#[test]
fn protected_mode_no_serves_a_public_address_without_a_password() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("public.tb");
    let server = serve_on("0.0.0.0", &path, &["--protected-mode", "no"]);
    assert!(
        server.ready_line.contains("listening on 0.0.0.0:"),
        "{}",
        server.ready_line
    );
    let mut c = server.connect();
    c.set("k", "public");
    assert_eq!(c.get("k"), Some(b"public".to_vec()));
    drop(c);
    server.shutdown();
}

#[test]
fn protected_mode_takes_yes_or_no_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.tb");
    let p = path.to_str().unwrap();
    for bad in [
        &["--protected-mode", "maybe"][..],
        &["--protected-mode"][..],
    ] {
        let o = tierbase(&[&["serve", "--path", p][..], bad].concat());
        let err = assert_one_line_error(&o, "bad --protected-mode");
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("protected-mode"), "{err}");
    }
    assert!(!path.exists());
}

#[test]
fn bogus_durability_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.tb");
    let p = path.to_str().unwrap();
    let o = tierbase(&["serve", "--path", p, "--durability", "bogus"]);
    let err = assert_one_line_error(&o, "bogus durability");
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("immediate, eventual"), "{err}");
    assert!(!path.exists());
}

#[test]
fn unknown_store_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.tb");
    let o = tierbase(&["serve", "--path", path.to_str().unwrap(), "--store", "nope"]);
    let err = assert_one_line_error(&o, "unknown store");
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("nope"), "{err}");
    assert!(!path.exists());
}

/// A port already in use is one line, and the store the run created for it is gone again
/// (it left a new empty store behind).
#[test]
fn a_port_in_use_leaves_no_new_store_behind() {
    let dir = tempfile::tempdir().unwrap();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    for store in ["kv", "btree", "plush"] {
        let path = dir.path().join(format!("new-{store}"));
        let p = path.to_str().unwrap();
        let o = tierbase(&["serve", "--path", p, "--store", store, "--listen", &listen]);
        let err = assert_one_line_error(&o, "port in use");
        assert!(err.contains("in use"), "{err}");
        assert!(!path.exists(), "{store}: the new store was left behind");
    }
    // A directory that was empty stays, empty again.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = empty.to_str().unwrap();
    let o = tierbase(&[
        "serve", "--path", e, "--store", "btree", "--listen", &listen,
    ]);
    assert_one_line_error(&o, "port in use, empty directory");
    let left: Vec<_> = std::fs::read_dir(&empty).unwrap().collect();
    assert!(left.is_empty(), "the new store's files were left: {left:?}");
    // An existing store stays, of course.
    let kept = dir.path().join("kept.tb");
    let k = kept.to_str().unwrap();
    assert!(tierbase(&["kv", "create", "--path", k]).status.success());
    let o = tierbase(&["serve", "--path", k, "--listen", &listen]);
    assert_one_line_error(&o, "port in use, existing store");
    assert!(kept.exists());
}

/// A store named with `--store` that the path holds another store's files of: one line that
/// says which store is there ("create directory: File exists" for a kv file as a btree).
#[test]
fn a_store_named_other_than_the_one_at_the_path_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.tb");
    let p = path.to_str().unwrap();
    assert!(tierbase(&["kv", "create", "--path", p]).status.success());
    for other in ["btree", "plush"] {
        let o = tierbase(&["serve", "--path", p, "--store", other]);
        let err = assert_one_line_error(&o, other);
        assert!(
            err.contains(&format!("holds a kv store, not a {other} store")),
            "{err}"
        );
    }
    assert!(tierbase(&["kv", "verify", "--path", p]).status.success());
    // A directory named as a file store.
    let o = tierbase(&[
        "serve",
        "--path",
        dir.path().to_str().unwrap(),
        "--store",
        "kv",
    ]);
    let err = assert_one_line_error(&o, "a directory as a kv store");
    assert!(
        err.contains("is a directory: a kv store is a file"),
        "{err}"
    );
}

#[test]
fn unknown_store_lists_the_valid_stores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("never.tb");
    let o = tierbase(&["serve", "--path", path.to_str().unwrap(), "--store", "nope"]);
    let err = assert_one_line_error(&o, "unknown store");
    assert!(
        err.contains("possible values: kv"),
        "the valid stores must be listed: {err}"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Every commit level starts, says so, and keeps its data across a clean restart.
// ---------------------------------------------------------------------------------------------

fn level_starts_and_keeps_data(level: &str, shown: &str) {
    for store in ["kv", "btree"] {
        level_starts_and_keeps_data_in(store, level, shown);
    }
}

fn level_starts_and_keeps_data_in(store: &str, level: &str, shown: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("level.tb");
    let args = ["--store", store, "--durability", level];
    let server = serve(&path, &args);
    assert!(
        server.ready_line.contains(&format!("commit {shown};")),
        "{}",
        server.ready_line
    );
    let mut c = server.connect();
    for i in 0..100 {
        c.set(&format!("k{i}"), &format!("{level}-{i}"));
    }
    assert_eq!(c.ok(&[b"INCR", b"n"]), Resp::Int(1));
    drop(c);
    server.shutdown();

    let server = serve(&path, &args);
    let mut c = server.connect();
    for i in 0..100 {
        assert_eq!(
            c.get(&format!("k{i}")),
            Some(format!("{level}-{i}").into_bytes()),
            "k{i} at {level}"
        );
    }
    assert_eq!(c.get("n"), Some(b"1".to_vec()));
    assert_eq!(c.ok(&[b"DBSIZE"]), Resp::Int(101));
    drop(c);
    server.shutdown();
}

#[test]
fn eventual_starts_and_keeps_data() {
    level_starts_and_keeps_data("eventual:50", "eventual:50ms");
}

#[test]
fn none_starts_and_keeps_data() {
    level_starts_and_keeps_data("none", "none");
}

/// The KV store's start line promises that at `eventual` and `none` acknowledged writes
/// survive a process crash (records are written into the mapped file, which the page cache
/// keeps); kill -9 must not lose them.
#[test]
fn relaxed_levels_survive_kill_9() {
    for level in ["eventual:50", "none"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relaxed.tb");
        let args = ["--store", "kv", "--durability", level];
        let mut server = serve(&path, &args);
        assert!(
            server.ready_line.contains("survive a process crash"),
            "{}",
            server.ready_line
        );
        let mut c = server.connect();
        for i in 0..200 {
            c.set(&format!("k{i}"), &format!("{level}-{i}"));
        }
        server.kill9();
        let server = serve(&path, &args);
        let mut c = server.connect();
        for i in 0..200 {
            assert_eq!(
                c.get(&format!("k{i}")),
                Some(format!("{level}-{i}").into_bytes()),
                "k{i} at {level} after kill -9"
            );
        }
        drop(c);
        server.shutdown();
    }
}

/// At `eventual` the B+-tree acknowledges a write once its log frame is written to the log
/// file (not yet synced): its start line says a process crash keeps acknowledged writes, and
/// after kill -9 every SET that was answered is there (it once kept the log's tail in the
/// process until a sync, and kill -9 took the last answered SETs). At `none` the tail may
/// wait in the process: the start line says a process crash may take writes, and what is left
/// of one client's SETs is a prefix of them.
#[test]
fn btree_relaxed_levels_keep_or_say_what_kill_9_may_take() {
    for (level, says) in [
        // On a disk file it adds "; a power loss may take the last 50 ms" (the temporary
        // directory may be on tmpfs, where the reply says "…, not a power loss").
        ("eventual:50", "acknowledged writes survive a process crash"),
        (
            "none",
            "may take every acknowledged write since the last sync",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relaxed");
        let args = ["--store", "btree", "--durability", level];
        let mut server = serve(&path, &args);
        assert!(server.ready_line.contains(says), "{}", server.ready_line);
        let mut c = server.connect();
        let n = 2_000;
        for i in 0..n {
            c.set(&format!("k{i:05}"), &format!("{level}-{i}"));
        }
        server.kill9();
        let server = serve(&path, &args);
        let mut c = server.connect();
        let present: Vec<bool> = (0..n)
            .map(|i| {
                let v = c.get(&format!("k{i:05}"));
                assert!(v.is_none() || v == Some(format!("{level}-{i}").into_bytes()));
                v.is_some()
            })
            .collect();
        let kept = present.iter().take_while(|p| **p).count();
        if level == "none" {
            assert!(
                present[kept..].iter().all(|p| !p),
                "{level}: not a prefix (first {kept} kept)"
            );
        } else {
            assert_eq!(kept, n, "{level}: answered SETs lost to kill -9");
        }
        drop(c);
        server.shutdown();
    }
}
