//! End-to-end tests of `tierbase-server`: a real server per test (in-process, on a KV store in
//! a temporary directory, listening on an ephemeral loopback port), driven through the
//! `redis` crate, raw RESP over a `TcpStream`, and `redis-cli` when it is installed.
//!
//! Every socket read has a timeout, so a server that fails to answer fails the test instead
//! of hanging it; nothing waits on the wall clock to synchronise (the one sleep is in a
//! bounded retry for a freed client slot, followed by an assertion).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;

use common::{TestServer, base_config, bulk, resp, scan_all, show};
use redis::cmd;
use tierbase::device::Durability;
use tierbase::kv::{KvOptions, KvStore};
use tierbase_server::{Server, ServerConfig, ServerError, open_store};

/// A server error as text (`CODE detail`), from a `redis` crate error.
fn err_text(e: &redis::RedisError) -> String {
    format!(
        "{} {}",
        e.code().unwrap_or("<no code>"),
        e.detail().unwrap_or("")
    )
}

/// Runs a command expected to fail; returns the server's error text.
fn query_err(con: &mut redis::Connection, cmd: &redis::Cmd) -> String {
    match cmd.query::<redis::Value>(con) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => err_text(&e),
    }
}

// ---------------------------------------------------------------------------------------
// 1. Basic commands
// ---------------------------------------------------------------------------------------

#[test]
fn basic_commands() {
    let mut server = TestServer::start();
    let mut con = server.client();
    let c = &mut con;

    assert_eq!(cmd("PING").query::<String>(c).unwrap(), "PONG");
    assert_eq!(cmd("PING").arg("hi").query::<String>(c).unwrap(), "hi");
    assert_eq!(
        cmd("ECHO").arg("hello world").query::<String>(c).unwrap(),
        "hello world"
    );

    // SET / GET.
    assert_eq!(
        cmd("SET")
            .arg("a")
            .arg("1")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Okay
    );
    assert_eq!(
        cmd("GET").arg("a").query::<Option<String>>(c).unwrap(),
        Some("1".into())
    );
    assert_eq!(
        cmd("GET")
            .arg("missing")
            .query::<Option<String>>(c)
            .unwrap(),
        None
    );

    // NX / XX / GET.
    assert_eq!(
        cmd("SET")
            .arg("a")
            .arg("2")
            .arg("NX")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Nil,
        "SET NX on an existing key"
    );
    assert_eq!(cmd("GET").arg("a").query::<String>(c).unwrap(), "1");
    assert_eq!(
        cmd("SET")
            .arg("b")
            .arg("x")
            .arg("XX")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Nil,
        "SET XX on a missing key"
    );
    assert_eq!(cmd("EXISTS").arg("b").query::<i64>(c).unwrap(), 0);
    assert_eq!(
        cmd("SET")
            .arg("b")
            .arg("x")
            .arg("NX")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Okay
    );
    assert_eq!(
        cmd("SET")
            .arg("b")
            .arg("y")
            .arg("XX")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Okay
    );
    assert_eq!(cmd("GET").arg("b").query::<String>(c).unwrap(), "y");
    assert_eq!(
        cmd("SET")
            .arg("b")
            .arg("z")
            .arg("GET")
            .query::<Option<String>>(c)
            .unwrap(),
        Some("y".into()),
        "SET GET returns the old value"
    );
    assert_eq!(cmd("GET").arg("b").query::<String>(c).unwrap(), "z");
    assert_eq!(
        cmd("SET")
            .arg("c")
            .arg("v")
            .arg("GET")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Nil,
        "SET GET on a missing key"
    );
    assert_eq!(cmd("GET").arg("c").query::<String>(c).unwrap(), "v");
    assert_eq!(
        cmd("SET")
            .arg("c")
            .arg("w")
            .arg("NX")
            .arg("GET")
            .query::<Option<String>>(c)
            .unwrap(),
        Some("v".into()),
        "SET NX GET on an existing key: old value, not set"
    );
    assert_eq!(cmd("GET").arg("c").query::<String>(c).unwrap(), "v");
    assert_eq!(
        query_err(c, cmd("SET").arg("c").arg("w").arg("NX").arg("XX")),
        "ERR syntax error"
    );

    // Expiry is refused, with a reason.
    let e = query_err(c, cmd("SET").arg("a").arg("9").arg("EX").arg(10));
    assert!(e.starts_with("ERR "), "{e}");
    assert!(e.contains("expiry"), "{e}");
    assert_eq!(cmd("GET").arg("a").query::<String>(c).unwrap(), "1");

    // GETDEL.
    assert_eq!(
        cmd("GETDEL").arg("b").query::<Option<String>>(c).unwrap(),
        Some("z".into())
    );
    assert_eq!(
        cmd("GETDEL").arg("b").query::<Option<String>>(c).unwrap(),
        None
    );
    assert_eq!(cmd("EXISTS").arg("b").query::<i64>(c).unwrap(), 0);

    // MSET / MGET.
    assert_eq!(
        cmd("MSET")
            .arg("k1")
            .arg("v1")
            .arg("k2")
            .arg("v2")
            .query::<redis::Value>(c)
            .unwrap(),
        redis::Value::Okay
    );
    assert_eq!(
        cmd("MGET")
            .arg("k1")
            .arg("nope")
            .arg("k2")
            .query::<Vec<Option<String>>>(c)
            .unwrap(),
        vec![Some("v1".into()), None, Some("v2".into())]
    );
    assert_eq!(
        query_err(c, cmd("MSET").arg("k1").arg("v1").arg("k2")),
        "ERR wrong number of arguments for 'mset' command"
    );

    // DEL / EXISTS counting.
    assert_eq!(cmd("EXISTS").arg("a").arg("a").query::<i64>(c).unwrap(), 2);
    assert_eq!(
        cmd("EXISTS")
            .arg("a")
            .arg("nope")
            .arg("k1")
            .query::<i64>(c)
            .unwrap(),
        2
    );
    assert_eq!(
        cmd("DEL")
            .arg("k1")
            .arg("k2")
            .arg("nope")
            .arg("k1")
            .query::<i64>(c)
            .unwrap(),
        2
    );
    assert_eq!(cmd("DEL").arg("k1").query::<i64>(c).unwrap(), 0);
    assert_eq!(
        cmd("EXISTS").arg("k1").arg("k2").query::<i64>(c).unwrap(),
        0
    );

    // INCR family.
    assert_eq!(cmd("INCR").arg("n").query::<i64>(c).unwrap(), 1);
    assert_eq!(cmd("INCR").arg("n").query::<i64>(c).unwrap(), 2);
    assert_eq!(cmd("INCRBY").arg("n").arg(40).query::<i64>(c).unwrap(), 42);
    assert_eq!(cmd("DECR").arg("n").query::<i64>(c).unwrap(), 41);
    assert_eq!(cmd("DECRBY").arg("n").arg(50).query::<i64>(c).unwrap(), -9);
    assert_eq!(cmd("INCRBY").arg("n").arg(-1).query::<i64>(c).unwrap(), -10);
    assert_eq!(cmd("GET").arg("n").query::<String>(c).unwrap(), "-10");
    assert_eq!(cmd("DECR").arg("fresh").query::<i64>(c).unwrap(), -1);
    assert_eq!(
        cmd("SET").arg("s").arg("abc").query::<String>(c).unwrap(),
        "OK"
    );
    assert_eq!(
        query_err(c, cmd("INCR").arg("s")),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        query_err(c, cmd("DECRBY").arg("s").arg(1)),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(cmd("GET").arg("s").query::<String>(c).unwrap(), "abc");
    for bad_increment in ["x", "1.5", "", "99999999999999999999"] {
        assert_eq!(
            query_err(c, cmd("INCRBY").arg("n").arg(bad_increment)),
            "ERR value is not an integer or out of range",
            "INCRBY n {bad_increment:?}"
        );
    }
    assert_eq!(
        cmd("SET").arg("sp").arg(" 1").query::<String>(c).unwrap(),
        "OK"
    );
    assert_eq!(
        query_err(c, cmd("INCR").arg("sp")),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        cmd("SET")
            .arg("max")
            .arg("9223372036854775807")
            .query::<String>(c)
            .unwrap(),
        "OK"
    );
    let e = query_err(c, cmd("INCR").arg("max"));
    assert!(e.starts_with("ERR ") && e.contains("overflow"), "{e}");
    assert_eq!(
        cmd("GET").arg("max").query::<String>(c).unwrap(),
        "9223372036854775807",
        "a failed INCR leaves the value alone"
    );
    assert_eq!(
        cmd("SET")
            .arg("min")
            .arg("-9223372036854775808")
            .query::<String>(c)
            .unwrap(),
        "OK"
    );
    let e = query_err(c, cmd("DECR").arg("min"));
    assert!(e.starts_with("ERR ") && e.contains("overflow"), "{e}");

    // APPEND / STRLEN / TYPE.
    assert_eq!(
        cmd("APPEND")
            .arg("ap")
            .arg("hello")
            .query::<i64>(c)
            .unwrap(),
        5
    );
    assert_eq!(
        cmd("APPEND")
            .arg("ap")
            .arg(" world")
            .query::<i64>(c)
            .unwrap(),
        11
    );
    assert_eq!(
        cmd("GET").arg("ap").query::<String>(c).unwrap(),
        "hello world"
    );
    assert_eq!(cmd("STRLEN").arg("ap").query::<i64>(c).unwrap(), 11);
    assert_eq!(cmd("STRLEN").arg("nope").query::<i64>(c).unwrap(), 0);
    assert_eq!(cmd("TYPE").arg("ap").query::<String>(c).unwrap(), "string");
    assert_eq!(cmd("TYPE").arg("nope").query::<String>(c).unwrap(), "none");
    assert_eq!(cmd("TTL").arg("ap").query::<i64>(c).unwrap(), -1);
    assert_eq!(cmd("PTTL").arg("nope").query::<i64>(c).unwrap(), -2);

    // DBSIZE / FLUSHDB. Keys now: a c n fresh s sp max min ap.
    assert_eq!(cmd("DBSIZE").query::<i64>(c).unwrap(), 9);
    assert_eq!(cmd("FLUSHDB").query::<String>(c).unwrap(), "OK");
    assert_eq!(cmd("DBSIZE").query::<i64>(c).unwrap(), 0);
    assert_eq!(
        cmd("GET").arg("a").query::<Option<String>>(c).unwrap(),
        None
    );

    // SELECT.
    assert_eq!(cmd("SELECT").arg(0).query::<String>(c).unwrap(), "OK");
    assert_eq!(
        query_err(c, cmd("SELECT").arg(1)),
        "ERR DB index is out of range"
    );

    // Unknown command, wrong arity, case-insensitive names.
    let e = query_err(c, cmd("NOSUCHCMD").arg("x"));
    assert!(e.starts_with("ERR unknown command"), "{e}");
    assert!(e.contains("NOSUCHCMD"), "{e}");
    assert_eq!(
        query_err(c, &cmd("GET")),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        query_err(c, cmd("GET").arg("a").arg("b")),
        "ERR wrong number of arguments for 'get' command"
    );
    assert_eq!(
        query_err(c, &cmd("sEt")),
        "ERR wrong number of arguments for 'set' command"
    );
    assert_eq!(
        cmd("sEt").arg("Case").arg("ok").query::<String>(c).unwrap(),
        "OK"
    );
    assert_eq!(cmd("gEt").arg("Case").query::<String>(c).unwrap(), "ok");
    assert_eq!(
        cmd("GET").arg("case").query::<Option<String>>(c).unwrap(),
        None,
        "keys are case-sensitive"
    );

    // The connection is still usable after all those errors.
    assert_eq!(cmd("PING").query::<String>(c).unwrap(), "PONG");
    drop(con);
    server.stop();
}

/// A key the store cannot hold (over its key limit, or empty for a store that refuses empty
/// keys) is absent: reads and deletes answer as Redis does for a missing key (they were
/// errors, which a client library raises on `exists()`); a write of it is refused. INFO names
/// each field once.
#[test]
fn keys_the_store_cannot_hold_read_as_absent() {
    let server = TestServer::start();
    let mut con = server.client();
    let c = &mut con;
    let big = vec![b'k'; 20_000];
    for key in [&big[..], b""] {
        assert_eq!(
            cmd("GET").arg(key).query::<Option<Vec<u8>>>(c).unwrap(),
            None
        );
        assert_eq!(cmd("EXISTS").arg(key).arg(key).query::<i64>(c).unwrap(), 0);
        assert_eq!(cmd("DEL").arg(key).query::<i64>(c).unwrap(), 0);
        assert_eq!(cmd("STRLEN").arg(key).query::<i64>(c).unwrap(), 0);
        assert_eq!(cmd("TYPE").arg(key).query::<String>(c).unwrap(), "none");
        assert_eq!(cmd("TTL").arg(key).query::<i64>(c).unwrap(), -2);
        assert_eq!(
            cmd("GETDEL").arg(key).query::<Option<Vec<u8>>>(c).unwrap(),
            None
        );
    }
    assert_eq!(
        cmd("SET").arg("a").arg("1").query::<String>(c).unwrap(),
        "OK"
    );
    assert_eq!(
        cmd("MGET")
            .arg("a")
            .arg(&big)
            .arg("")
            .query::<Vec<Option<String>>>(c)
            .unwrap(),
        vec![Some("1".to_string()), None, None]
    );
    assert!(query_err(c, cmd("SET").arg(&big).arg("v")).contains("key too large"));
    common::assert_refused_mset_writes_nothing(c, &big, b"v", "key too large");
    common::assert_refused_mset_writes_nothing(c, b"", b"v", "empty key");
    let info: String = cmd("INFO").arg("tierbase").query(c).unwrap();
    let mut names = HashSet::new();
    for line in info.lines().filter(|l| l.contains(':')) {
        let name = line.split(':').next().unwrap();
        assert!(names.insert(name.to_string()), "INFO names {name} twice");
    }
}

#[test]
fn overwrite_keeps_one_key() {
    let mut server = TestServer::start();
    let mut con = server.client();
    for v in ["1", "22", "333", ""] {
        assert_eq!(
            cmd("SET")
                .arg("k")
                .arg(v)
                .query::<String>(&mut con)
                .unwrap(),
            "OK"
        );
        assert_eq!(cmd("GET").arg("k").query::<String>(&mut con).unwrap(), v);
        assert_eq!(cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 1);
    }
    assert_eq!(
        cmd("APPEND")
            .arg("k")
            .arg("x")
            .query::<i64>(&mut con)
            .unwrap(),
        1
    );
    assert_eq!(cmd("INCR").arg("n").query::<i64>(&mut con).unwrap(), 1);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 2);
    assert_eq!(
        cmd("DEL").arg("k").arg("n").query::<i64>(&mut con).unwrap(),
        2
    );
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 0);
    drop(con);
    server.stop();
}

/// Redis (t_string.c, decrbyCommand) refuses `DECRBY key -9223372036854775808` with
/// "ERR decrement would overflow": negating LLONG_MIN overflows.
#[test]
fn decrby_min_is_an_overflow() {
    let mut server = TestServer::start();
    let mut con = server.client();
    assert_eq!(
        query_err(&mut con, cmd("DECRBY").arg("k").arg("-9223372036854775808")),
        "ERR decrement would overflow"
    );
    assert_eq!(cmd("EXISTS").arg("k").query::<i64>(&mut con).unwrap(), 0);
    drop(con);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 2. SCAN
// ---------------------------------------------------------------------------------------

#[test]
fn scan_meets_every_key() {
    let mut server = TestServer::start();
    let mut con = server.client();
    let users: HashSet<Vec<u8>> = (0..5000)
        .map(|i| format!("user:{i}").into_bytes())
        .collect();
    let others: HashSet<Vec<u8>> = (0..100)
        .map(|i| format!("other:{i}").into_bytes())
        .collect();
    let all: Vec<&Vec<u8>> = users.iter().chain(&others).collect();
    for chunk in all.chunks(500) {
        let mut c = cmd("MSET");
        for k in chunk {
            c.arg(k.as_slice()).arg(b"v");
        }
        assert_eq!(c.query::<String>(&mut con).unwrap(), "OK");
    }
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 5100);

    let seen = scan_all(&mut con, &["COUNT", "37"]);
    let seen_set: HashSet<Vec<u8>> = seen.iter().cloned().collect();
    let expected: HashSet<Vec<u8>> = users.union(&others).cloned().collect();
    assert_eq!(seen_set.len(), expected.len());
    assert!(
        seen_set == expected,
        "SCAN COUNT 37 missed or invented keys"
    );

    let matched = scan_all(&mut con, &["MATCH", "user:*", "COUNT", "37"]);
    let matched_set: HashSet<Vec<u8>> = matched.iter().cloned().collect();
    assert!(
        matched.iter().all(|k| k.starts_with(b"user:")),
        "MATCH let through a non-matching key"
    );
    assert_eq!(matched_set.len(), 5000);
    assert!(matched_set == users);

    // MATCH with a pattern nothing matches still ends, with nothing.
    assert!(scan_all::<Vec<u8>>(&mut con, &["MATCH", "nothing:*", "COUNT", "1000"]).is_empty());
    // The default COUNT also covers everything.
    let default: HashSet<Vec<u8>> = scan_all(&mut con, &[]).into_iter().collect();
    assert!(default == expected);

    assert_eq!(
        query_err(&mut con, cmd("SCAN").arg("abc")),
        "ERR invalid cursor"
    );
    assert_eq!(
        query_err(&mut con, cmd("SCAN").arg("-1")),
        "ERR invalid cursor"
    );
    assert_eq!(
        query_err(&mut con, cmd("SCAN").arg(0).arg("COUNT").arg(0)),
        "ERR syntax error"
    );
    assert_eq!(
        query_err(&mut con, cmd("SCAN").arg(0).arg("COUNT")),
        "ERR syntax error"
    );
    drop(con);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 3. Binary safety
// ---------------------------------------------------------------------------------------

#[test]
fn binary_keys_and_values_round_trip() {
    let mut server = TestServer::start();
    let mut con = server.client();
    let all_bytes: Vec<u8> = (0..=255u8).collect();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"nul\0key".to_vec(), b"nul\0value\0".to_vec()),
        (b"crlf\r\nkey".to_vec(), b"\r\n$3\r\nfoo\r\n".to_vec()),
        (vec![0xff, 0xfe, 0x00, 0x80], all_bytes.clone()),
        (b"\0".to_vec(), b"\r".to_vec()),
        (b"empty-value".to_vec(), Vec::new()),
        (all_bytes.clone(), b"key is every byte".to_vec()),
    ];
    for (k, v) in &pairs {
        assert_eq!(
            cmd("SET")
                .arg(k.as_slice())
                .arg(v.as_slice())
                .query::<String>(&mut con)
                .unwrap(),
            "OK"
        );
    }
    for (k, v) in &pairs {
        assert_eq!(
            &cmd("GET")
                .arg(k.as_slice())
                .query::<Vec<u8>>(&mut con)
                .unwrap(),
            v,
            "key {k:?}"
        );
        assert_eq!(
            cmd("STRLEN")
                .arg(k.as_slice())
                .query::<i64>(&mut con)
                .unwrap(),
            v.len() as i64
        );
    }
    // Keys that differ only after a NUL are different keys.
    assert_eq!(
        cmd("GET")
            .arg(b"nul".as_slice())
            .query::<Option<Vec<u8>>>(&mut con)
            .unwrap(),
        None
    );
    // The same through the raw protocol, byte for byte.
    let mut raw = server.raw();
    assert_eq!(raw.cmd(&[b"GET", b"nul\0key"]), bulk(b"nul\0value\0"));
    assert_eq!(
        raw.cmd(&[b"GET", b"crlf\r\nkey"]),
        bulk(b"\r\n$3\r\nfoo\r\n")
    );
    assert_eq!(raw.cmd(&[b"APPEND", b"\0", b"\n\xff"]), b":3\r\n".to_vec());
    assert_eq!(raw.cmd(&[b"GET", b"\0"]), bulk(b"\r\n\xff"));

    // A 1 MiB value of pseudo-random bytes.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let big: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    assert_eq!(
        cmd("SET")
            .arg("big")
            .arg(big.as_slice())
            .query::<String>(&mut con)
            .unwrap(),
        "OK"
    );
    assert!(cmd("GET").arg("big").query::<Vec<u8>>(&mut con).unwrap() == big);
    assert_eq!(
        cmd("STRLEN").arg("big").query::<i64>(&mut con).unwrap(),
        1 << 20
    );
    assert!(raw.cmd(&[b"GET", b"big"]) == bulk(&big));
    drop((con, raw));
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 4. Concurrency
// ---------------------------------------------------------------------------------------

#[test]
fn concurrent_incr_is_atomic() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 500;
    const KEYS: usize = 4;
    let mut server = TestServer::start();
    let url = server.url();
    let key_of = |t: usize, i: usize| (t + i * 3) % KEYS;
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut con = common::connect(&url);
                let mut seen: Vec<(usize, i64)> = Vec::with_capacity(PER_THREAD);
                for i in 0..PER_THREAD {
                    let k = key_of(t, i);
                    let v: i64 = cmd("INCR").arg(format!("ctr:{k}")).query(&mut con).unwrap();
                    seen.push((k, v));
                }
                seen
            })
        })
        .collect();
    let mut replies: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for w in workers {
        for (k, v) in w.join().unwrap() {
            replies.entry(k).or_default().push(v);
        }
    }
    let mut sent = [0i64; KEYS];
    for t in 0..THREADS {
        for i in 0..PER_THREAD {
            sent[key_of(t, i)] += 1;
        }
    }
    let mut con = server.client();
    let mut total = 0;
    for (k, &expected) in sent.iter().enumerate() {
        let value: i64 = cmd("GET").arg(format!("ctr:{k}")).query(&mut con).unwrap();
        assert_eq!(value, expected, "ctr:{k}");
        total += value;
        // Every increment saw a distinct value: exactly 1..=n, each once.
        let mut got = replies.remove(&k).unwrap_or_default();
        got.sort_unstable();
        assert_eq!(
            got,
            (1..=expected).collect::<Vec<_>>(),
            "INCR replies for ctr:{k}"
        );
    }
    assert_eq!(total, (THREADS * PER_THREAD) as i64);
    drop(con);
    server.stop();
}

#[test]
fn concurrent_set_nx_and_append() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 50;
    let mut server = TestServer::start();
    let url = server.url();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut con = common::connect(&url);
                let mut won = Vec::new();
                let mut lengths = Vec::new();
                for r in 0..ROUNDS {
                    let v: redis::Value = cmd("SET")
                        .arg(format!("race:{r}"))
                        .arg(format!("t{t}"))
                        .arg("NX")
                        .query(&mut con)
                        .unwrap();
                    match v {
                        redis::Value::Okay => won.push(r),
                        redis::Value::Nil => {}
                        other => panic!("SET NX replied {other:?}"),
                    }
                    let len: i64 = cmd("APPEND")
                        .arg("log")
                        .arg(format!("{t}"))
                        .query(&mut con)
                        .unwrap();
                    lengths.push(len);
                }
                (t, won, lengths)
            })
        })
        .collect();
    let mut winners = vec![None; ROUNDS];
    let mut lengths = Vec::new();
    let mut con = server.client();
    for w in workers {
        let (t, won, lens) = w.join().unwrap();
        for r in won {
            assert!(winners[r].is_none(), "two SET NX won race:{r}");
            winners[r] = Some(t);
        }
        lengths.extend(lens);
    }
    for (r, winner) in winners.iter().enumerate() {
        let winner = winner.unwrap_or_else(|| panic!("nobody won race:{r}"));
        assert_eq!(
            cmd("GET")
                .arg(format!("race:{r}"))
                .query::<String>(&mut con)
                .unwrap(),
            format!("t{winner}"),
            "race:{r} holds the winner's value"
        );
    }
    // Every APPEND saw a distinct length 1..=n, and the log holds every append.
    lengths.sort_unstable();
    let n = (THREADS * ROUNDS) as i64;
    assert_eq!(lengths, (1..=n).collect::<Vec<_>>());
    let log: String = cmd("GET").arg("log").query(&mut con).unwrap();
    for t in 0..THREADS {
        assert_eq!(
            log.matches(&t.to_string()).count(),
            ROUNDS,
            "appends of thread {t}"
        );
    }
    drop(con);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 5. Pipelining
// ---------------------------------------------------------------------------------------

#[test]
fn pipelined_requests_are_answered_in_order() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    const N: usize = 1000;
    let (sets, gets) =
        common::set_and_get_pipelines(N, |i| format!("k{i}"), |i| format!("v{i}").into_bytes());
    raw.send(&sets);
    raw.send(&gets);
    raw.expect_oks(N, "SET");
    for i in 0..N {
        let r = raw.reply();
        assert_eq!(
            show(&r),
            show(&bulk(format!("v{i}").as_bytes())),
            "reply to GET #{i}"
        );
    }
    // Nothing more: the next reply is the one to this PING.
    assert_eq!(raw.cmd(&[b"PING"]), b"+PONG\r\n".to_vec());

    // One request dribbled a byte at a time gets exactly one reply.
    let req = resp(&[b"SET", b"dribbled", b"yes"]);
    for b in &req {
        raw.send(std::slice::from_ref(b));
    }
    assert_eq!(raw.reply(), b"+OK\r\n".to_vec());
    assert_eq!(raw.cmd(&[b"GET", b"dribbled"]), bulk(b"yes"));

    // Mixed inline and multibulk requests in one write, with an empty request between.
    let mut mixed = b"PING\r\n".to_vec();
    mixed.extend(resp(&[b"ECHO", b"x"]));
    mixed.extend(b"*0\r\n\r\nGET k7\r\n");
    raw.send(&mixed);
    assert_eq!(raw.reply(), b"+PONG\r\n".to_vec());
    assert_eq!(raw.reply(), bulk(b"x"));
    assert_eq!(raw.reply(), bulk(b"v7"));
    assert_eq!(
        raw.cmd(&[b"DBSIZE"]),
        format!(":{}\r\n", N + 1).into_bytes()
    );
    drop(raw);
    server.stop();
}

/// A megabyte subcommand is not echoed back whole by CLIENT, COMMAND or CONFIG (Redis quotes
/// at most 128 bytes of an argument); each still names the subcommand's start.
#[test]
fn unknown_subcommands_are_quoted_at_most_128_bytes() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let mut huge = b"nosuch".to_vec();
    huge.resize(1 << 20, b'x');
    for name in [&b"CLIENT"[..], b"COMMAND", b"CONFIG"] {
        let reply = show(&raw.cmd(&[name, &huge]));
        let what = String::from_utf8_lossy(name);
        assert!(reply.starts_with("-ERR "), "{what}: {reply}");
        assert!(reply.len() < 400, "{what}: {} bytes", reply.len());
        assert!(
            reply.to_ascii_lowercase().contains("nosuchxx"),
            "{what}: {reply}"
        );
    }
    assert_eq!(raw.cmd(&[b"PING"]), b"+PONG\r\n".to_vec());
    drop(raw);
    server.stop();
}

/// Pipelined SETs on a `kv` store that may not grow, until it is full: every SET answered
/// OK is stored with its value, every one answered with an error is not. (The server ran
/// them as one batch and, when it stopped part-way, each SET again: the applied ones then
/// found no room for the rewrite and were answered "store full", yet stored.) Both layouts.
#[test]
fn pipelined_sets_on_a_full_store_are_answered_as_they_were_applied() {
    use tierbase::kv::RecordLayout;
    for layout in [
        RecordLayout::Variable,
        RecordLayout::Fixed {
            key_size: 8,
            value_size: 1000,
        },
    ] {
        let dir = common::StoreDir::new(common::KV);
        let opts = KvOptions::default()
            .layout(layout)
            .allow_growth(false)
            .initial_size(2 << 20);
        let store = KvStore::create(&dir.path, &opts).unwrap();
        let mut server = dir.serve_store(Box::new(store));
        let mut raw = server.raw();
        let key = |i: u64| format!("{i:08}").into_bytes();
        let value = |i: u64| vec![b'a' + (i % 26) as u8; 1000];
        let (mut answered_ok, mut refused) = (Vec::new(), Vec::new());
        let mut next = 0u64;
        while refused.len() < 100 {
            assert!(next < 100_000, "{layout:?}: never full");
            let batch: Vec<u8> = (next..next + 50)
                .flat_map(|i| resp(&[b"SET", &key(i), &value(i)]))
                .collect();
            raw.send(&batch);
            for i in next..next + 50 {
                let reply = raw.reply();
                if reply == b"+OK\r\n" {
                    answered_ok.push(i);
                } else {
                    assert!(show(&reply).contains("store full"), "{}", show(&reply));
                    refused.push(i);
                }
            }
            next += 50;
        }
        for &i in &answered_ok {
            assert_eq!(
                raw.cmd(&[b"GET", &key(i)]),
                bulk(&value(i)),
                "{layout:?}: SET {i} answered OK"
            );
        }
        for &i in &refused {
            assert_eq!(
                raw.cmd(&[b"EXISTS", &key(i)]),
                b":0\r\n".to_vec(),
                "{layout:?}: SET {i} answered with an error, yet stored"
            );
        }
        let size = format!(":{}\r\n", answered_ok.len()).into_bytes();
        assert_eq!(raw.cmd(&[b"DBSIZE"]), size, "{layout:?}");
        drop(raw);
        server.stop();
    }
}

/// A transaction pipelined whole (MULTI, SETs, EXEC in one write, as redis-py's
/// `pipeline(transaction=True)` sends it): MULTI is refused, and so is every command up to
/// EXEC, which answers EXECABORT — none of the SETs is applied. (They all ran, one by one,
/// while the client was told its transaction failed.) DISCARD ends the refusal too.
#[test]
fn a_pipelined_transaction_is_refused_whole() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let mut batch = resp(&[b"MULTI"]);
    batch.extend(resp(&[b"SET", b"t1", b"x"]));
    batch.extend(resp(&[b"SET", b"t2", b"y"]));
    batch.extend(resp(&[b"GET", b"t1"]));
    batch.extend(resp(&[b"EXEC"]));
    raw.send(&batch);
    let multi = show(&raw.reply());
    assert!(multi.starts_with("-ERR MULTI is not supported"), "{multi}");
    for what in ["SET", "SET", "GET"] {
        let r = show(&raw.reply());
        assert!(r.starts_with("-ERR not run"), "{what}: {r}");
    }
    let exec = show(&raw.reply());
    assert!(exec.starts_with("-EXECABORT"), "{exec}");
    assert_eq!(raw.cmd(&[b"EXISTS", b"t1", b"t2"]), b":0\r\n".to_vec());
    // After EXEC, commands run again; DISCARD ends a refused MULTI as well.
    assert_eq!(raw.cmd(&[b"SET", b"t1", b"z"]), b"+OK\r\n".to_vec());
    assert!(show(&raw.cmd(&[b"MULTI"])).starts_with("-ERR MULTI"));
    assert!(show(&raw.cmd(&[b"DEL", b"t1"])).starts_with("-ERR not run"));
    assert_eq!(raw.cmd(&[b"DISCARD"]), b"+OK\r\n".to_vec());
    assert_eq!(raw.cmd(&[b"GET", b"t1"]), bulk(b"z"));
    // MULTI with an argument is an arity error and begins nothing.
    let r = show(&raw.cmd(&[b"MULTI", b"x"]));
    assert!(r.starts_with("-ERR wrong number of arguments"), "{r}");
    assert_eq!(raw.cmd(&[b"GET", b"t1"]), bulk(b"z"));
    drop(raw);
    server.stop();
}

#[test]
fn pipeline_replies_larger_than_a_flush_arrive_whole_and_in_order() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    const N: usize = 1000;
    let value = |i: usize| vec![b'a' + (i % 26) as u8; 1000 + i % 7];
    let (sets, gets) = common::set_and_get_pipelines(N, |i| format!("big{i}"), value);
    // A writer thread, so that a server that answers while the pipeline is still being
    // written never blocks on this client (about 1 MB of requests and of replies).
    let mut writer = raw.writer.try_clone().unwrap();
    let feeder = std::thread::spawn(move || {
        writer.write_all(&sets).unwrap();
        writer.write_all(&gets).unwrap();
    });
    raw.expect_oks(N, "SET");
    for i in 0..N {
        assert!(raw.reply() == bulk(&value(i)), "reply to GET #{i}");
    }
    feeder.join().unwrap();
    assert_eq!(raw.cmd(&[b"PING"]), b"+PONG\r\n".to_vec());
    drop(raw);
    server.stop();
}

#[test]
fn half_closed_client_gets_every_reply() {
    // `printf 'SET k v\r\nGET k\r\n' | nc host port`: the client sends, shuts its write
    // side, and reads to the end.
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let mut bytes = b"SET k v\r\nGET k\r\n".to_vec();
    bytes.extend(resp(&[b"INCR", b"n"]));
    raw.send(&bytes);
    raw.writer.shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(show(&raw.reply()), "+OK\r\n");
    assert_eq!(show(&raw.reply()), "$1\r\nv\r\n");
    assert_eq!(show(&raw.reply()), ":1\r\n");
    raw.expect_eof();
    drop(raw);
    server.stop();
}

#[test]
fn quit_replies_then_closes() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let mut bytes = resp(&[b"SET", b"k", b"v"]);
    bytes.extend(resp(&[b"QUIT"]));
    raw.send(&bytes);
    assert_eq!(show(&raw.reply()), "+OK\r\n");
    assert_eq!(show(&raw.reply()), "+OK\r\n");
    raw.expect_eof();
    let mut other = server.raw();
    assert_eq!(show(&other.cmd(&[b"GET", b"k"])), "$1\r\nv\r\n");
    drop(other);
    server.stop();
}

/// A client that writes a whole pipeline before reading any reply (what redis-rs's
/// `pipe().query()` does) must get every reply even once they outgrow the socket buffers: the
/// connection keeps reading requests while it writes replies (it once stalled here forever).
#[test]
fn large_pipeline_written_before_reading() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let key = vec![b'k'; 4096];
    let value = vec![b'v'; 4096];
    assert_eq!(show(&raw.cmd(&[b"SET", &key, &value])), "+OK\r\n");
    const N: usize = 5000;
    let one = resp(&[b"GET", &key]);
    let all: Vec<u8> = one.iter().copied().cycle().take(one.len() * N).collect();
    // 20 MB of requests, 20 MB of replies; the write times out after 5 s if the server
    // stopped reading.
    raw.writer
        .write_all(&all)
        .expect("the server stopped reading while its replies were unread");
    let expected = bulk(&value);
    for i in 0..N {
        assert!(raw.reply() == expected, "reply #{i}");
    }
    drop(raw);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 6. Inline commands
// ---------------------------------------------------------------------------------------

#[test]
fn inline_commands() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    assert_eq!(show(&raw.inline("PING\r\n")), "+PONG\r\n");
    assert_eq!(show(&raw.inline("ping\n")), "+PONG\r\n");
    assert_eq!(show(&raw.inline("SET \"a b\" 'c d'\r\n")), "+OK\r\n");
    assert_eq!(show(&raw.inline("GET \"a b\"\r\n")), "$3\r\nc d\r\n");
    assert_eq!(show(&raw.inline("  GET   'a b'  \r\n")), "$3\r\nc d\r\n");
    assert_eq!(show(&raw.inline("SET esc \"x\\x41\\n\"\r\n")), "+OK\r\n");
    assert_eq!(raw.cmd(&[b"GET", b"esc"]), bulk(b"xA\n"));
    assert_eq!(
        show(&raw.inline("ECHO\r\n")),
        "-ERR wrong number of arguments for 'echo' command\r\n"
    );
    // An unbalanced quote is a protocol error: reply, then close.
    assert_eq!(
        show(&raw.inline("GET \"oops\r\n")),
        "-ERR Protocol error: unbalanced quotes in request\r\n"
    );
    raw.expect_eof();
    drop(raw);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 7. RESP3
// ---------------------------------------------------------------------------------------

#[test]
fn resp3_through_hello() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    // RESP2 first.
    assert_eq!(show(&raw.cmd(&[b"GET", b"missing"])), "$-1\r\n");
    assert_eq!(
        show(&raw.cmd(&[b"CONFIG", b"GET", b"save"])),
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );

    let hello = raw.cmd(&[b"HELLO", b"3"]);
    assert!(hello.starts_with(b"%"), "{:?}", show(&hello));
    let text = show(&hello);
    assert!(text.contains("$5\r\nproto\r\n:3\r\n"), "{text:?}");
    assert!(text.contains("$6\r\nserver\r\n$5\r\nredis\r\n"), "{text:?}");
    assert_eq!(show(&raw.cmd(&[b"GET", b"missing"])), "_\r\n");
    assert_eq!(
        show(&raw.cmd(&[b"MGET", b"missing", b"missing"])),
        "*2\r\n_\r\n_\r\n"
    );
    assert_eq!(
        show(&raw.cmd(&[b"CONFIG", b"GET", b"save"])),
        "%1\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    assert_eq!(show(&raw.cmd(&[b"SET", b"k", b"v"])), "+OK\r\n");
    assert_eq!(show(&raw.cmd(&[b"GET", b"k"])), "$1\r\nv\r\n");
    let info = raw.cmd(&[b"INFO", b"keyspace"]);
    assert!(
        info.starts_with(b"="),
        "INFO is a verbatim string in RESP3: {:?}",
        show(&info)
    );

    let e = raw.cmd(&[b"HELLO", b"4"]);
    assert!(e.starts_with(b"-NOPROTO"), "{:?}", show(&e));
    // A refused HELLO leaves the protocol as it was.
    assert_eq!(show(&raw.cmd(&[b"GET", b"missing"])), "_\r\n");
    let e = raw.cmd(&[b"HELLO", b"x"]);
    assert!(e.starts_with(b"-ERR"), "{:?}", show(&e));

    // And back to RESP2: the HELLO reply is a flat array.
    let hello2 = raw.cmd(&[b"HELLO", b"2"]);
    assert!(hello2.starts_with(b"*"), "{:?}", show(&hello2));
    assert!(show(&hello2).contains("$5\r\nproto\r\n:2\r\n"));
    assert_eq!(show(&raw.cmd(&[b"GET", b"missing"])), "$-1\r\n");
    drop(raw);

    // The redis crate speaking RESP3.
    let client = redis::Client::open(format!("redis://{}/?protocol=resp3", server.addr)).unwrap();
    let mut con = client.get_connection().unwrap();
    assert_eq!(
        cmd("GET")
            .arg("missing")
            .query::<redis::Value>(&mut con)
            .unwrap(),
        redis::Value::Nil
    );
    assert_eq!(cmd("GET").arg("k").query::<String>(&mut con).unwrap(), "v");
    drop(con);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 8. Auth
// ---------------------------------------------------------------------------------------

#[test]
fn auth_with_requirepass() {
    let mut server = TestServer::start_with(|c| c.requirepass = Some("sekret".into()));
    let mut raw = server.raw();
    assert_eq!(
        show(&raw.cmd(&[b"GET", b"a"])),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        show(&raw.cmd(&[b"SET", b"a", b"1"])),
        "-NOAUTH Authentication required.\r\n"
    );
    let e = raw.cmd(&[b"HELLO", b"3"]);
    assert!(e.starts_with(b"-NOAUTH"), "{:?}", show(&e));
    // Commands Redis knows but this server refuses are NOAUTH too, not "unknown command".
    for name in [&b"MULTI"[..], b"EXEC", b"DISCARD"] {
        assert_eq!(
            show(&raw.cmd(&[name])),
            "-NOAUTH Authentication required.\r\n",
            "{}",
            String::from_utf8_lossy(name)
        );
    }
    let e = raw.cmd(&[b"AUTH", b"wrong"]);
    assert!(e.starts_with(b"-WRONGPASS"), "{:?}", show(&e));
    let e = raw.cmd(&[b"AUTH", b"sekre"]);
    assert!(e.starts_with(b"-WRONGPASS"), "{:?}", show(&e));
    let e = raw.cmd(&[b"AUTH", b"other", b"sekret"]);
    assert!(e.starts_with(b"-WRONGPASS"), "unknown user: {:?}", show(&e));
    assert_eq!(
        show(&raw.cmd(&[b"GET", b"a"])),
        "-NOAUTH Authentication required.\r\n",
        "failed AUTHs do not authenticate"
    );
    assert_eq!(show(&raw.cmd(&[b"AUTH", b"sekret"])), "+OK\r\n");
    assert_eq!(show(&raw.cmd(&[b"SET", b"a", b"1"])), "+OK\r\n");
    assert_eq!(show(&raw.cmd(&[b"GET", b"a"])), "$1\r\n1\r\n");
    drop(raw);

    // HELLO 3 AUTH in one step.
    let mut raw = server.raw();
    let e = raw.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"nope"]);
    assert!(e.starts_with(b"-WRONGPASS"), "{:?}", show(&e));
    assert_eq!(
        show(&raw.cmd(&[b"GET", b"missing"])),
        "-NOAUTH Authentication required.\r\n"
    );
    let hello = raw.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"sekret"]);
    assert!(hello.starts_with(b"%"), "{:?}", show(&hello));
    assert_eq!(show(&raw.cmd(&[b"GET", b"a"])), "$1\r\n1\r\n");
    assert_eq!(show(&raw.cmd(&[b"GET", b"missing"])), "_\r\n");
    drop(raw);

    // AUTH default <pass> (two-argument form).
    let mut raw = server.raw();
    assert_eq!(show(&raw.cmd(&[b"AUTH", b"default", b"sekret"])), "+OK\r\n");
    assert_eq!(show(&raw.cmd(&[b"GET", b"a"])), "$1\r\n1\r\n");
    drop(raw);

    // The redis crate with a password in the URL.
    let mut con = redis::Client::open(format!("redis://:sekret@{}/", server.addr))
        .unwrap()
        .get_connection()
        .unwrap();
    assert_eq!(cmd("GET").arg("a").query::<String>(&mut con).unwrap(), "1");
    drop(con);
    assert!(
        redis::Client::open(format!("redis://:nope@{}/", server.addr))
            .unwrap()
            .get_connection()
            .is_err(),
        "a wrong password in the URL must not connect"
    );
    server.stop();
}

#[test]
fn auth_without_requirepass() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let e = raw.cmd(&[b"AUTH", b"x"]);
    assert!(e.starts_with(b"-ERR AUTH"), "{:?}", show(&e));
    // As with Redis, the default user takes any password when none is set: clients
    // configured with a user name send the two-argument form, or HELLO … AUTH.
    assert_eq!(show(&raw.cmd(&[b"AUTH", b"default", b"x"])), "+OK\r\n");
    let e = raw.cmd(&[b"AUTH", b"bob", b"x"]);
    assert!(e.starts_with(b"-WRONGPASS"), "{:?}", show(&e));
    let hello = raw.cmd(&[b"HELLO", b"3", b"AUTH", b"default", b"x"]);
    assert!(hello.starts_with(b"%"), "{:?}", show(&hello));
    // Still usable, and never needed.
    assert_eq!(show(&raw.cmd(&[b"SET", b"a", b"1"])), "+OK\r\n");
    drop(raw);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 9. Protected mode
// ---------------------------------------------------------------------------------------

#[test]
fn protected_mode_refuses_public_bind_without_password() {
    let dir = tempfile::tempdir().unwrap();
    let public = ServerConfig {
        listen: "0.0.0.0:0".parse().unwrap(),
        requirepass: None,
        protected_mode: true,
        ..base_config()
    };
    assert!(
        matches!(public.validate(), Err(ServerError::Config(_))),
        "validate must refuse"
    );
    let (store, policy) =
        open_store("kv", &dir.path().join("a.tb"), Durability::Immediate).unwrap();
    match Server::bind(store, policy, public.clone()) {
        Err(ServerError::Config(msg)) => assert!(msg.contains("0.0.0.0"), "{msg}"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("bound 0.0.0.0 without a password under protected mode"),
    }

    // With protected mode off it binds.
    let open = ServerConfig {
        protected_mode: false,
        ..public.clone()
    };
    open.validate().unwrap();
    let (store, policy) =
        open_store("kv", &dir.path().join("b.tb"), Durability::Immediate).unwrap();
    let server = Server::bind(store, policy, open).unwrap();
    let addr = server.ready().unwrap().addr;
    assert!(addr.ip().is_unspecified() && addr.port() != 0, "{addr}");
    drop(server);

    // With a password it binds, protected mode or not.
    let with_password = ServerConfig {
        requirepass: Some("pw".into()),
        ..public
    };
    with_password.validate().unwrap();
    let (store, policy) =
        open_store("kv", &dir.path().join("c.tb"), Durability::Immediate).unwrap();
    drop(Server::bind(store, policy, with_password).unwrap());

    // Loopback never needs one.
    base_config().validate().unwrap();
}

// ---------------------------------------------------------------------------------------
// 10. Limits
// ---------------------------------------------------------------------------------------

#[test]
fn max_clients_rejects_and_recovers() {
    let mut server = TestServer::start_with(|c| c.max_clients = 2);
    let mut c1 = server.raw();
    let mut c2 = server.raw();
    assert_eq!(show(&c1.cmd(&[b"PING"])), "+PONG\r\n");
    assert_eq!(show(&c2.cmd(&[b"PING"])), "+PONG\r\n");

    // The third is told, then closed (send nothing: unread input would turn the close
    // into a reset).
    let mut c3 = server.raw();
    assert_eq!(show(&c3.reply()), "-ERR max number of clients reached\r\n");
    c3.expect_eof();
    drop(c3);

    // The first two still work.
    assert_eq!(show(&c1.cmd(&[b"PING"])), "+PONG\r\n");
    assert_eq!(show(&c2.cmd(&[b"PING"])), "+PONG\r\n");

    // Close one; once the server has noticed, a new client gets in. (A bounded retry, not
    // synchronisation: the slot frees when the server reads the EOF.)
    drop(c1);
    let mut admitted = None;
    for _ in 0..200 {
        let mut attempt = server.raw();
        let mut first = Vec::new();
        if attempt.writer.write_all(&resp(&[b"PING"])).is_ok()
            && attempt.reader.read_until(b'\n', &mut first).is_ok()
            && first == b"+PONG\r\n"
        {
            admitted = Some(attempt);
            break;
        }
        assert!(
            first.is_empty() || first == b"-ERR max number of clients reached\r\n",
            "unexpected reply {:?}",
            show(&first)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c4 = admitted.expect("no slot freed after a client left");
    assert_eq!(show(&c4.cmd(&[b"SET", b"k", b"v"])), "+OK\r\n");
    assert_eq!(show(&c2.cmd(&[b"GET", b"k"])), "$1\r\nv\r\n");
    drop((c2, c4));
    let summary = server.stop();
    assert!(summary.connections >= 4, "{summary:?}");
}

/// A request that never completes cannot grow the input buffer without bound: past the
/// largest request the limits allow to complete, it is refused and the connection closed;
/// other clients go on.
#[test]
fn an_endless_request_reaches_the_query_buffer_limit() {
    let mut server = TestServer::start_with(|c| c.limits.max_bulk_len = 1024);
    let mut other = server.raw();
    // The limit: the longest bulk plus 64 read chunks of 16 KiB (server.rs).
    let limit = 1024 + 64 * 16 * 1024;
    let mut request = b"*100000\r\n".to_vec();
    while request.len() <= limit {
        request.extend_from_slice(b"$1000\r\n");
        request.extend_from_slice(&[b'x'; 1000]);
        request.extend_from_slice(b"\r\n");
    }
    let r = server.reply_then_close(&request);
    assert!(
        r.starts_with(b"-ERR Protocol error: query buffer limit reached"),
        "{:?}",
        show(&r)
    );
    assert_eq!(show(&other.cmd(&[b"PING"])), "+PONG\r\n");
    drop(other);
    server.stop();
}

/// The connections' buffers together are bounded (`max_client_memory`, Redis's
/// `maxmemory-clients`): each client below the per-connection limit, but one whose growth
/// takes the total over is closed with an error; the others go on, and a finished large
/// request's or reply's buffers are given back. Before 2026-12-03, 10 000 clients could each
/// hold 513 MiB.
#[test]
fn the_connections_buffers_share_one_limit() {
    const LIMIT: usize = 8 << 20;
    let mut server = TestServer::start_with(|c| c.max_client_memory = LIMIT);
    let mut con = server.client();
    let buffered = |con: &mut redis::Connection| -> usize {
        let info: String = cmd("INFO").arg("clients").query(con).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("tierbase_client_buffer_bytes:"))
            .unwrap_or_else(|| panic!("no tierbase_client_buffer_bytes in {info}"))
            .trim()
            .parse()
            .unwrap()
    };
    let wait_for = |con: &mut redis::Connection, what: &str, ok: &dyn Fn(usize) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = buffered(con);
            if ok(now) {
                return now;
            }
            assert!(Instant::now() < deadline, "{what}: {now} bytes buffered");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // A: most of an 8 MB SET: its read buffer doubles to 4 MiB.
    let value_len = 8_000_000;
    let header = format!("*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n${value_len}\r\n");
    let mut a = server.raw();
    a.send(header.as_bytes());
    a.send(&vec![b'x'; 3_000_000]);
    let held_a = (4 << 20) + 16 * 1024 - 32 * 1024;
    wait_for(&mut con, "A's 4 MiB", &|n| n == held_a);
    // B: another large request. At 4 MiB both fit (8 MiB less 64 KiB); B's next doubling
    // takes the total over, and B, not A, is closed. B sends exactly what the server reads
    // before it grows B's buffer, so that the error is not lost to a reset.
    let mut b = server.raw();
    b.send(header.as_bytes());
    b.send(&vec![b'y'; (4 << 20) - 16 * 1024 + 1 - header.len()]);
    let refused = show(&b.reply());
    assert!(
        refused.starts_with("-ERR client memory limit reached"),
        "{refused}"
    );
    b.expect_eof();
    wait_for(&mut con, "B's buffers given back", &|n| n == held_a);
    let info: String = cmd("INFO").arg("stats").query(&mut con).unwrap();
    assert!(info.contains("evicted_clients:1"), "{info}");
    // A finishes its SET (8 MiB of buffer, within the limit alone); then every buffer is
    // back to its base, and a GET of the 8 MB value (an 8 MB reply) gives its buffer back too.
    let mut rest = vec![b'x'; value_len - 3_000_000];
    rest.extend_from_slice(b"\r\n");
    a.send(&rest);
    assert_eq!(show(&a.reply()), "+OK\r\n");
    wait_for(&mut con, "A's buffers given back", &|n| n == 0);
    let big: Vec<u8> = cmd("GET").arg("big").query(&mut con).unwrap();
    assert_eq!(big.len(), value_len);
    assert_eq!(buffered(&mut con), 0, "the reply's buffer was kept");
    // Replies count too: while A holds 4 MiB again, an 8 MB reply would take the total over,
    // so that client is closed with the error instead of the reply.
    a.send(header.as_bytes());
    a.send(&vec![b'x'; 3_000_000]);
    wait_for(&mut con, "A's 4 MiB again", &|n| n == held_a);
    let mut c = server.raw();
    let refused = show(&c.cmd(&[b"GET", b"big"]));
    assert!(
        refused.starts_with("-ERR client memory limit reached"),
        "{}",
        &refused[..refused.len().min(80)]
    );
    c.expect_eof();
    drop(a);
    wait_for(&mut con, "A gone", &|n| n == 0);
    let info: String = cmd("INFO").arg("stats").query(&mut con).unwrap();
    assert!(info.contains("evicted_clients:2"), "{info}");
    drop(con);
    server.stop();
}

/// COMMAND INFO describes the commands asked for (nil for unknown ones) as COMMAND lists
/// them; COMMAND DOCS gives Redis 7's summary, group and argument schema.
#[test]
fn command_info_and_docs() {
    let mut server = TestServer::start();
    let mut c = server.client();
    let info: Vec<redis::Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("get")
        .arg("SET")
        .arg("nosuch")
        .query(&mut c)
        .unwrap();
    assert_eq!(info.len(), 3);
    let entry = |v: &redis::Value| -> (String, i64, i64) {
        let redis::Value::Array(fields) = v else {
            panic!("{v:?}")
        };
        let name: String = redis::from_redis_value(fields[0].clone()).unwrap();
        let arity: i64 = redis::from_redis_value(fields[1].clone()).unwrap();
        let first_key: i64 = redis::from_redis_value(fields[3].clone()).unwrap();
        (name, arity, first_key)
    };
    assert_eq!(entry(&info[0]), ("get".to_string(), 2, 1));
    // Redis 7's ten fields: ACL categories, tips, key specifications, subcommands.
    let redis::Value::Array(get) = &info[0] else {
        panic!("{:?}", info[0])
    };
    assert_eq!(get.len(), 10, "{get:?}");
    let categories: Vec<String> = redis::from_redis_value(get[6].clone()).unwrap();
    assert_eq!(categories, ["@read", "@string", "@fast"]);
    let text = format!("{:?}", get[8]);
    for part in [
        "begin_search",
        "index",
        "find_keys",
        "range",
        "lastkey",
        "RO",
        "access",
    ] {
        assert!(text.contains(part), "key specs without {part}: {text}");
    }
    assert_eq!(entry(&info[1]), ("set".to_string(), -3, 1));
    assert_eq!(info[2], redis::Value::Nil);
    // Flags and categories as Redis 7 spells and files them.
    let mut flags_and_categories = |name: &str| -> (Vec<String>, Vec<String>) {
        let v: Vec<redis::Value> = cmd("COMMAND").arg("INFO").arg(name).query(&mut c).unwrap();
        let redis::Value::Array(f) = &v[0] else {
            panic!("{v:?}")
        };
        (
            redis::from_redis_value(f[2].clone()).unwrap(),
            redis::from_redis_value(f[6].clone()).unwrap(),
        )
    };
    let (flags, categories) = flags_and_categories("incr");
    assert_eq!(flags, ["write", "denyoom", "fast"]);
    assert_eq!(categories, ["@write", "@string", "@fast"]);
    assert!(
        flags_and_categories("hello")
            .0
            .contains(&"no_auth".to_string())
    );
    let (_, categories) = flags_and_categories("flushdb");
    assert_eq!(categories, ["@write", "@keyspace", "@slow", "@dangerous"]);
    let all: Vec<redis::Value> = cmd("COMMAND").query(&mut c).unwrap();
    assert!(all.contains(&info[0]) && all.contains(&info[1]));
    // COMMAND DOCS: every command, each with Redis 7's fields; named ones only, unknown
    // names left out. RESP2 sends a map as a flat array of name, fields, name, fields, ...
    let all_docs: Vec<redis::Value> = cmd("COMMAND").arg("DOCS").query(&mut c).unwrap();
    assert_eq!(all_docs.len(), 2 * all.len());
    let docs: Vec<redis::Value> = cmd("COMMAND")
        .arg("DOCS")
        .arg("SET")
        .arg("nosuch")
        .query(&mut c)
        .unwrap();
    assert_eq!(docs.len(), 2, "{docs:?}");
    let name: String = redis::from_redis_value(docs[0].clone()).unwrap();
    assert_eq!(name, "set");
    let fields: std::collections::HashMap<String, redis::Value> =
        redis::from_redis_value(docs[1].clone()).unwrap();
    let text = |f: &str| -> String { redis::from_redis_value(fields[f].clone()).unwrap() };
    assert_eq!(text("group"), "string");
    assert_eq!(text("since"), "1.0.0");
    assert!(text("summary").starts_with("Sets the string value of a key"));
    let args: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::from_redis_value(fields["arguments"].clone()).unwrap();
    let arg_names: Vec<String> = args
        .iter()
        .map(|a| redis::from_redis_value(a["name"].clone()).unwrap())
        .collect();
    assert_eq!(arg_names, ["key", "value", "condition", "get"]);
    let kind: String = redis::from_redis_value(args[0]["type"].clone()).unwrap();
    assert_eq!(kind, "key");
    let token: String = redis::from_redis_value(args[3]["token"].clone()).unwrap();
    assert_eq!(token, "GET");
    let e = query_err(&mut c, cmd("COMMAND").arg("NOSUCH"));
    assert!(e.starts_with("ERR unknown subcommand"), "{e}");
    drop(c);
    server.stop();
}

#[test]
fn oversized_bulk_is_a_protocol_error() {
    let mut server = TestServer::start_with(|c| c.limits.max_bulk_len = 1024);
    let mut other = server.raw();
    assert_eq!(show(&other.cmd(&[b"PING"])), "+PONG\r\n");

    // At the limit is fine.
    let mut ok = server.raw();
    let value = vec![b'x'; 1024];
    assert_eq!(show(&ok.cmd(&[b"SET", b"k", &value])), "+OK\r\n");
    assert!(ok.cmd(&[b"GET", b"k"]) == bulk(&value));

    let r = server.reply_then_close(b"*2\r\n$3\r\nGET\r\n$2000\r\n");
    assert!(
        r.starts_with(b"-ERR Protocol error: invalid bulk length"),
        "{:?}",
        show(&r)
    );

    // One byte over the limit, with its payload, is refused the same way.
    let r = server.reply_then_close(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1025\r\n");
    assert!(
        r.starts_with(b"-ERR Protocol error: invalid bulk length"),
        "{:?}",
        show(&r)
    );

    // The other clients are unaffected.
    assert_eq!(show(&other.cmd(&[b"PING"])), "+PONG\r\n");
    assert_eq!(show(&ok.cmd(&[b"STRLEN", b"k"])), ":1024\r\n");
    drop((other, ok));
    server.stop();
}

#[test]
fn malformed_multibulk_is_a_protocol_error() {
    let mut server = TestServer::start();
    let mut other = server.raw();
    assert_eq!(show(&other.cmd(&[b"PING"])), "+PONG\r\n");

    assert_eq!(
        show(&server.reply_then_close(b"*1\r\n*1\r\n$1\r\na\r\n")),
        "-ERR Protocol error: expected '$', got '*'\r\n"
    );

    // Replies to the requests before the bad one are sent first.
    let mut bad = server.raw();
    let mut bytes = resp(&[b"SET", b"before", b"1"]);
    bytes.extend(b"*x\r\n");
    bad.send(&bytes);
    assert_eq!(show(&bad.reply()), "+OK\r\n");
    assert_eq!(
        show(&bad.reply()),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );
    bad.expect_eof();

    assert_eq!(show(&other.cmd(&[b"GET", b"before"])), "$1\r\n1\r\n");
    drop(other);
    server.stop();
}

#[test]
fn other_request_limits() {
    let mut server = TestServer::start_with(|c| {
        c.limits.max_args = 4;
        c.limits.max_inline_len = 1024;
    });
    let mut ok = server.raw();
    assert_eq!(
        show(&ok.cmd(&[b"MGET", b"a", b"b", b"c"])),
        "*3\r\n$-1\r\n$-1\r\n$-1\r\n"
    );

    assert_eq!(
        show(&server.reply_then_close(b"*5\r\n")),
        "-ERR Protocol error: invalid multibulk length\r\n"
    );

    assert_eq!(
        show(&server.reply_then_close(&vec![b'x'; 1025])),
        "-ERR Protocol error: too big inline request\r\n"
    );

    assert_eq!(
        show(&server.reply_then_close(b"*1\r\n$-1\r\n")),
        "-ERR Protocol error: invalid bulk length\r\n"
    );

    assert_eq!(show(&ok.cmd(&[b"PING"])), "+PONG\r\n");
    drop(ok);
    server.stop();
}

#[test]
fn idle_connections_are_closed() {
    let mut server = TestServer::start_with(|c| c.idle_timeout = Some(Duration::from_millis(200)));
    let mut idle = server.raw();
    assert_eq!(show(&idle.cmd(&[b"PING"])), "+PONG\r\n");
    // Nothing sent: the server closes it well within the 5 s read timeout.
    idle.expect_eof();
    // New connections are still served.
    let mut fresh = server.raw();
    assert_eq!(show(&fresh.cmd(&[b"PING"])), "+PONG\r\n");
    drop(fresh);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 11. Graceful shutdown
// ---------------------------------------------------------------------------------------

fn reopen(path: &std::path::Path) -> KvStore {
    KvStore::open(path, &KvOptions::default()).unwrap()
}

#[test]
fn shutdown_command_closes_the_store_cleanly() {
    let mut server = TestServer::start();
    let mut con = server.client();
    for i in 0..100 {
        assert_eq!(
            cmd("SET")
                .arg(format!("k{i}"))
                .arg(format!("v{i}"))
                .query::<String>(&mut con)
                .unwrap(),
            "OK"
        );
    }
    assert_eq!(
        cmd("INCRBY")
            .arg("n")
            .arg(7)
            .query::<i64>(&mut con)
            .unwrap(),
        7
    );
    assert_eq!(cmd("DEL").arg("k99").query::<i64>(&mut con).unwrap(), 1);

    // Redis 7's arguments are checked: ABORT (which cancels a shutdown in Redis) and unknown
    // or contradictory ones are errors, and the server goes on.
    let mut raw = server.raw();
    for (args, error) in [
        (
            &[&b"SHUTDOWN"[..], b"ABORT"][..],
            "-ERR No shutdown in progress.\r\n",
        ),
        (&[b"SHUTDOWN", b"NOSAVE", b"ABORT"], "-ERR syntax error\r\n"),
        (&[b"SHUTDOWN", b"SAVE", b"NOSAVE"], "-ERR syntax error\r\n"),
        (&[b"SHUTDOWN", b"LATER"], "-ERR syntax error\r\n"),
    ] {
        assert_eq!(show(&raw.cmd(args)), error, "{args:?}");
    }
    assert_eq!(show(&raw.cmd(&[b"PING"])), "+PONG\r\n");
    raw.send(&resp(&[b"SHUTDOWN", b"NOSAVE", b"NOW", b"FORCE"]));
    raw.expect_eof();
    let summary = server.wait();
    assert!(summary.reason.contains("SHUTDOWN"), "{summary:?}");
    assert!(summary.commands >= 103, "{summary:?}");
    // The other client was closed too.
    assert!(cmd("PING").query::<String>(&mut con).is_err());
    drop(con);

    let store = reopen(&server.path);
    assert!(
        store.recovery().after_clean_close,
        "the store was not closed cleanly: {:?}",
        store.recovery()
    );
    assert_eq!(store.len(), 100);
    for i in 0..99 {
        assert_eq!(
            store.get(format!("k{i}").as_bytes()).unwrap(),
            Some(format!("v{i}").into_bytes())
        );
    }
    assert_eq!(store.get(b"k99").unwrap(), None);
    assert_eq!(store.get(b"n").unwrap(), Some(b"7".to_vec()));
    store.close().unwrap();
}

#[test]
fn shutdown_after_a_pipeline_answers_it_first() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    const N: usize = 500;
    let (mut bytes, _) =
        common::set_and_get_pipelines(N, |i| format!("p{i}"), |i| i.to_string().into_bytes());
    bytes.extend(resp(&[b"SHUTDOWN"]));
    // Never executed: the connection ends at SHUTDOWN.
    bytes.extend(resp(&[b"SET", b"after", b"x"]));
    raw.send(&bytes);
    raw.expect_oks(N, "SET");
    raw.expect_eof();
    let summary = server.wait();
    assert!(summary.reason.contains("SHUTDOWN"), "{summary:?}");
    let store = reopen(&server.path);
    assert!(store.recovery().after_clean_close, "{:?}", store.recovery());
    assert_eq!(store.len(), N);
    assert_eq!(store.get(b"p499").unwrap(), Some(b"499".to_vec()));
    assert_eq!(store.get(b"after").unwrap(), None);
    store.close().unwrap();
}

#[test]
fn shutdown_handle_closes_connections_and_store() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    assert_eq!(show(&raw.cmd(&[b"SET", b"kept", b"yes"])), "+OK\r\n");
    // The client stays connected and idle while the server stops.
    let summary = server.stop();
    assert_eq!(summary.reason, "test");
    raw.expect_eof();
    let store = reopen(&server.path);
    assert!(store.recovery().after_clean_close, "{:?}", store.recovery());
    assert_eq!(store.get(b"kept").unwrap(), Some(b"yes".to_vec()));
    store.close().unwrap();
}

// ---------------------------------------------------------------------------------------
// 12. INFO, CONFIG, COMMAND, CLIENT
// ---------------------------------------------------------------------------------------

#[test]
fn introspection_commands() {
    let mut server = TestServer::start();
    let mut con = server.client();
    let c = &mut con;
    for k in ["x", "y", "z"] {
        assert_eq!(cmd("SET").arg(k).arg("1").query::<String>(c).unwrap(), "OK");
    }
    let info: String = cmd("INFO").query(c).unwrap();
    for needle in [
        "# Server\r\n",
        "redis_version:",
        "# Persistence\r\n",
        "tierbase_guarantee:",
        "# Keyspace\r\n",
        "db0:keys=3,",
        "# Tierbase\r\n",
        &format!("tcp_port:{}\r\n", server.port()),
    ] {
        assert!(info.contains(needle), "INFO lacks {needle:?}:\n{info}");
    }
    for line in info.lines() {
        assert!(
            line.is_empty() || line.starts_with("# ") || line.contains(':'),
            "INFO line {line:?}"
        );
    }
    let keyspace: String = cmd("INFO").arg("keyspace").query(c).unwrap();
    assert!(
        keyspace.contains("# Keyspace") && keyspace.contains("db0:keys=3,"),
        "{keyspace}"
    );
    assert!(
        !keyspace.contains("# Server"),
        "INFO keyspace shows only keyspace: {keyspace}"
    );
    assert_eq!(cmd("DEL").arg("x").query::<i64>(c).unwrap(), 1);
    let keyspace: String = cmd("INFO").arg("keyspace").query(c).unwrap();
    assert!(keyspace.contains("db0:keys=2,"), "{keyspace}");

    assert_eq!(
        cmd("CONFIG")
            .arg("GET")
            .arg("save")
            .query::<Vec<String>>(c)
            .unwrap(),
        vec!["save".to_string(), String::new()]
    );
    assert_eq!(
        cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query::<Vec<String>>(c)
            .unwrap(),
        vec!["appendonly".to_string(), "no".to_string()]
    );
    assert_eq!(
        cmd("CONFIG")
            .arg("GET")
            .arg("port")
            .query::<Vec<String>>(c)
            .unwrap(),
        vec!["port".to_string(), server.port().to_string()]
    );
    assert!(
        cmd("CONFIG")
            .arg("GET")
            .arg("nosuch")
            .query::<Vec<String>>(c)
            .unwrap()
            .is_empty()
    );
    let e = query_err(c, cmd("CONFIG").arg("SET").arg("save").arg(""));
    assert!(e.starts_with("ERR "), "{e}");

    let count: i64 = cmd("COMMAND").arg("COUNT").query(c).unwrap();
    assert!(count > 20, "COMMAND COUNT {count}");
    let all: Vec<redis::Value> = cmd("COMMAND").query(c).unwrap();
    assert_eq!(all.len() as i64, count);

    assert_eq!(
        cmd("CLIENT")
            .arg("SETNAME")
            .arg("foo")
            .query::<String>(c)
            .unwrap(),
        "OK"
    );
    assert_eq!(
        cmd("CLIENT")
            .arg("GETNAME")
            .query::<Option<String>>(c)
            .unwrap(),
        Some("foo".into())
    );
    let e = query_err(c, cmd("CLIENT").arg("SETNAME").arg("has space"));
    assert!(
        e.starts_with("ERR Client names cannot contain spaces"),
        "{e}"
    );
    let id: i64 = cmd("CLIENT").arg("ID").query(c).unwrap();
    assert!(id > 0);
    let mut other = server.client();
    let other_id: i64 = cmd("CLIENT").arg("ID").query(&mut other).unwrap();
    assert_ne!(id, other_id, "client ids are unique");
    assert_eq!(
        cmd("CLIENT")
            .arg("GETNAME")
            .query::<Option<String>>(&mut other)
            .unwrap(),
        None,
        "names are per connection"
    );
    drop((con, other));
    server.stop();
}

/// Redis's HELLO … SETNAME checks the name as CLIENT SETNAME does; a name with a space
/// would break CLIENT INFO's space-separated fields.
#[test]
fn hello_setname_checks_the_name() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    assert_eq!(
        show(&raw.cmd(&[b"HELLO", b"2", b"SETNAME", b"a b"])),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(show(&raw.cmd(&[b"CLIENT", b"GETNAME"])), "$-1\r\n");
    drop(raw);
    server.stop();
}

#[test]
fn hello_setname_sets_the_name() {
    let mut server = TestServer::start();
    let mut raw = server.raw();
    let hello = raw.cmd(&[b"HELLO", b"3", b"SETNAME", b"named"]);
    assert!(hello.starts_with(b"%"), "{:?}", show(&hello));
    assert_eq!(show(&raw.cmd(&[b"CLIENT", b"GETNAME"])), "$5\r\nnamed\r\n");
    let id = raw.cmd(&[b"CLIENT", b"ID"]);
    assert!(
        show(&hello).contains(&format!("$2\r\nid\r\n{}", show(&id))),
        "HELLO's id is CLIENT ID: {:?} vs {:?}",
        show(&hello),
        show(&id)
    );
    drop(raw);
    server.stop();
}

// ---------------------------------------------------------------------------------------
// 13. redis-cli
// ---------------------------------------------------------------------------------------

/// Whether `tool --version` runs (redis-cli, redis-benchmark).
fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn redis_cli_installed() -> bool {
    installed("redis-cli")
}

/// Runs redis-cli against `port` with `args`, feeding `stdin`. A redis-cli that does not
/// finish in 20 s is killed and fails the test.
fn run_redis_cli(port: u16, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new("redis-cli")
        .arg("-h")
        .arg("127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            panic!("redis-cli {args:?} did not finish");
        }
    };
    feeder.join().unwrap();
    out
}

/// [`run_redis_cli`], asserting success; its stdout.
fn redis_cli(port: u16, args: &[&str], stdin: &[u8]) -> String {
    let out = run_redis_cli(port, args, stdin);
    assert!(
        out.status.success(),
        "redis-cli {args:?}: {}\n{}",
        out.status,
        show(&out.stderr)
    );
    show(&out.stdout)
}

#[test]
fn redis_cli_works() {
    if !redis_cli_installed() {
        println!("redis-cli not installed: skipping");
        return;
    }
    let mut server = TestServer::start();
    let port = server.port();
    assert_eq!(redis_cli(port, &["SET", "a", "b"], b""), "OK\n");
    assert_eq!(redis_cli(port, &["GET", "a"], b""), "b\n");
    assert_eq!(redis_cli(port, &["GET", "missing"], b""), "\n");
    for k in ["ab", "abc", "ba", "xa"] {
        assert_eq!(redis_cli(port, &["SET", k, "1"], b""), "OK\n");
    }
    let scanned: HashSet<String> = redis_cli(port, &["--scan", "--pattern", "a*"], b"")
        .lines()
        .map(str::to_string)
        .collect();
    let expected: HashSet<String> = ["a", "ab", "abc"].iter().map(|s| s.to_string()).collect();
    assert_eq!(scanned, expected);

    let keyspace = redis_cli(port, &["INFO", "keyspace"], b"");
    assert!(
        keyspace.contains("# Keyspace") && keyspace.contains("db0:keys=5,"),
        "{keyspace}"
    );

    let hello = redis_cli(port, &["-3", "HELLO", "3"], b"");
    let lines: Vec<&str> = hello.lines().collect();
    assert!(
        lines.contains(&"proto 3") && lines.contains(&"server redis"),
        "{hello}"
    );
    assert_eq!(redis_cli(port, &["-3", "GET", "missing"], b""), "\n");

    // Mass insertion with --pipe.
    let (mass, _) = common::set_and_get_pipelines(
        1000,
        |i| format!("pipe:{i}"),
        |i| i.to_string().into_bytes(),
    );
    let piped = redis_cli(port, &["--pipe"], &mass);
    assert!(piped.contains("errors: 0, replies: 1000"), "{piped}");
    assert_eq!(redis_cli(port, &["DBSIZE"], b""), "1005\n");
    assert_eq!(redis_cli(port, &["GET", "pipe:999"], b""), "999\n");

    // SHUTDOWN through redis-cli stops the server.
    let out = run_redis_cli(port, &["SHUTDOWN"], b"");
    assert!(
        out.stdout.is_empty(),
        "SHUTDOWN replied {:?}",
        show(&out.stdout)
    );
    let summary = server.wait();
    assert!(summary.reason.contains("SHUTDOWN"), "{summary:?}");
}

/// redis-benchmark (what docs/BENCHMARKS.md measures with) runs against the server, with and
/// without pipelining, and what it wrote is there: 200-byte values under its random keys.
#[test]
fn redis_benchmark_runs_and_its_sets_are_stored() {
    if !installed("redis-benchmark") {
        println!("redis-benchmark not installed: skipping");
        return;
    }
    let mut server = TestServer::start();
    let port = server.port().to_string();
    for pipeline in ["1", "16"] {
        let out = Command::new("redis-benchmark")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-t",
                "set,get",
                "-n",
                "2000",
            ])
            .args([
                "-c", "8", "-d", "200", "-r", "1000", "-P", pipeline, "--csv",
            ])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = show(&out.stdout);
        assert!(out.status.success(), "{text}\n{}", show(&out.stderr));
        for test in ["\"SET\"", "\"GET\""] {
            let row = text
                .lines()
                .find(|l| l.starts_with(test))
                .unwrap_or_else(|| panic!("no {test} row: {text}"));
            let rps: f64 = row
                .split(',')
                .nth(1)
                .unwrap()
                .trim_matches('"')
                .parse()
                .unwrap();
            assert!(rps > 0.0, "{row}");
        }
    }
    let mut c = server.client();
    let keys: Vec<String> = scan_all(&mut c, &[]);
    assert!(
        !keys.is_empty() && keys.len() <= 1000,
        "{} keys",
        keys.len()
    );
    for key in keys.iter().take(20) {
        assert!(key.starts_with("key:"), "{key}");
        let value: Vec<u8> = cmd("GET").arg(key).query(&mut c).unwrap();
        assert_eq!(value.len(), 200, "{key}");
    }
    drop(c);
    server.stop();
}
