//! Commands: the Redis command set tierbase serves, executed against the engine's
//! [`Store`] interface.
//!
//! Owns: the command table (names, arities, flags), argument checking, Redis's error texts,
//! each command's semantics, and `INFO`/`CONFIG GET`/`COMMAND` contents (`COMMAND DOCS`'s
//! texts are `command_docs`'s). Must not touch:
//! sockets or framing (`server`, `resp`) or any store's internals — every key operation is a
//! [`Store`] call, and read-modify-write commands (INCR, APPEND, SET NX/XX/GET, GETDEL) are
//! one [`Store::modify`] each, so they are atomic per key.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use tierbase::device::Counter;
use tierbase::store::{Change, Store};

use crate::command_docs::{DOCS, Doc, find_doc};
use crate::glob::glob_match;
use crate::lead::LeadQueue;
use crate::resp::{Protocol, Reply};
use crate::server::ServerConfig;
use crate::stores::ReplyPolicy;

/// Shared server state the commands read and update.
#[derive(Debug)]
pub(crate) struct Shared {
    pub store: Box<dyn Store>,
    pub policy: ReplyPolicy,
    pub config: ServerConfig,
    pub port: u16,
    pub started: Instant,
    pub stats: Stats,
    /// Connections' batches of plain SETs, applied one batch at a time by one task, for a
    /// store with a single writer ([`Store::single_writer`]) that leaves syncing to the
    /// server ([`Store::defers_sync`]); `None`: each connection applies its own.
    pub set_queue: Option<SetQueue>,
}

/// Batches of plain SETs (each `SET key value`) and their replies; see [`Shared::set_queue`].
pub(crate) type SetQueue = LeadQueue<SetBatch, Vec<Reply>>;

/// Server-wide counters (`INFO stats`, `INFO clients`): the engine's per-thread sharded
/// counters, so runtime threads counting every command do not share a cache line.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Connected now (a gauge, not a counter).
    pub clients: AtomicUsize,
    pub next_client_id: AtomicU64,
    pub connections_received: Counter,
    pub rejected_connections: Counter,
    pub commands: Counter,
    pub keyspace_hits: Counter,
    pub keyspace_misses: Counter,
    pub net_input_bytes: Counter,
    pub net_output_bytes: Counter,
    pub syncs_before_reply: Counter,
    /// SET batches a connection applied for another ([`Shared::set_queue`]).
    pub set_batches_for_others: Counter,
    pub protocol_errors: Counter,
    /// Bytes of connections' buffers beyond their base (a gauge; see
    /// `ServerConfig::max_client_memory`).
    pub client_buffer_bytes: AtomicUsize,
    /// Connections closed for the client memory limit.
    pub evicted_clients: Counter,
}

/// One connection's session state.
#[derive(Debug)]
pub(crate) struct Session {
    pub id: u64,
    pub name: Option<Vec<u8>>,
    pub protocol: Protocol,
    pub authenticated: bool,
    /// A `MULTI` was refused (no transactions here) and its `EXEC` or `DISCARD` has not come
    /// yet: the commands in between are refused, not run, so that a client that queued a
    /// transaction without reading `MULTI`'s reply (a pipelined transaction) never has part
    /// of it applied.
    pub refusing_transaction: bool,
}

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Read the next command.
    Continue,
    /// Send what is buffered, then close (QUIT).
    Close,
    /// Close without a reply and shut the server down (SHUTDOWN).
    Shutdown,
}

/// The outcome of one command.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub reply: Option<Reply>,
    /// Whether it wrote to the store (its reply waits for durability).
    pub wrote: bool,
    pub flow: Flow,
}

impl Outcome {
    fn read(reply: Reply) -> Self {
        Outcome {
            reply: Some(reply),
            wrote: false,
            flow: Flow::Continue,
        }
    }

    fn write(reply: Reply) -> Self {
        Outcome {
            reply: Some(reply),
            wrote: true,
            flow: Flow::Continue,
        }
    }
}

/// A command's entry in the table: Redis's arity convention (n: exactly n arguments counting
/// the name; -n: at least n), flags, and key positions, as `COMMAND` reports them.
struct Spec {
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    first_key: i64,
    last_key: i64,
    step: i64,
}

const fn spec(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: (i64, i64, i64),
) -> Spec {
    Spec {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
    }
}

const W: &[&str] = &["write"];
const WD: &[&str] = &["write", "denyoom"];
const R: &[&str] = &["readonly", "fast"];
// Redis 7's spellings (`no_auth`), and its `fast` on the O(1) writes.
const A: &[&str] = &["fast", "no_auth"];
const WF: &[&str] = &["write", "fast"];
const WDF: &[&str] = &["write", "denyoom", "fast"];
const NK: (i64, i64, i64) = (0, 0, 0);
const K1: (i64, i64, i64) = (1, 1, 1);

static COMMANDS: &[Spec] = &[
    spec("ping", -1, &["fast"], NK),
    spec("echo", 2, &["fast"], NK),
    spec("quit", -1, A, NK),
    spec("hello", -1, A, NK),
    spec("auth", -2, A, NK),
    spec("select", 2, &["fast"], NK),
    spec("client", -2, &["admin"], NK),
    spec("command", -1, &["loading", "stale"], NK),
    spec("config", -2, &["admin"], NK),
    spec("info", -1, &["loading", "stale"], NK),
    spec("dbsize", 1, R, NK),
    spec("get", 2, R, K1),
    spec("set", -3, WD, K1),
    spec("setnx", 3, WDF, K1),
    spec("getset", 3, WDF, K1),
    spec("getdel", 2, WF, K1),
    spec("mget", -2, R, (1, -1, 1)),
    spec("mset", -3, WD, (1, -1, 2)),
    spec("del", -2, W, (1, -1, 1)),
    spec("unlink", -2, WF, (1, -1, 1)),
    spec("exists", -2, R, (1, -1, 1)),
    spec("incr", 2, WDF, K1),
    spec("decr", 2, WDF, K1),
    spec("incrby", 3, WDF, K1),
    spec("decrby", 3, WDF, K1),
    spec("append", 3, WDF, K1),
    spec("strlen", 2, R, K1),
    spec("type", 2, R, K1),
    spec("ttl", 2, R, K1),
    spec("pttl", 2, R, K1),
    spec("scan", -2, &["readonly"], NK),
    spec("flushdb", -1, W, NK),
    spec("shutdown", -1, &["admin"], NK),
];

fn find_spec(name: &str) -> Option<&'static Spec> {
    COMMANDS.iter().find(|s| s.name == name)
}

fn lower(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_lowercase()
}

fn wrong_args(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn not_integer() -> Reply {
    Reply::error("ERR value is not an integer or out of range")
}

fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

/// A store failure as a reply: Redis's generic error prefix with the store's one line.
fn store_error(e: &tierbase::Error) -> Reply {
    Reply::Error(store_error_text(e))
}

fn store_error_text(e: &tierbase::Error) -> String {
    match e {
        // Redis's reply to a write on a read-only replica: client libraries raise their
        // read-only error for it.
        tierbase::Error::OpenedReadOnly { .. } => format!("READONLY {e}"),
        e => format!("ERR {e}"),
    }
}

/// A store error that stopped a multi-key delete (`DEL`, `FLUSHDB`) part-way: the keys
/// deleted before it stay deleted (these commands are not atomic across keys), and the reply
/// says how many, so that a client does not take the error for "nothing changed".
fn store_error_after_deletes(e: &tierbase::Error, removed: u64) -> Reply {
    let text = store_error_text(e);
    Reply::Error(match removed {
        0 => text,
        1 => format!("{text} (1 key before it was deleted)"),
        n => format!("{text} ({n} keys before it were deleted)"),
    })
}

/// Whether `e` says the key is one the store cannot hold (empty, or over its key limit): such
/// a key is absent, so reads and deletes of it answer as Redis does for a missing key (nil,
/// 0) instead of an error a client library would raise; only writes are refused.
fn unstorable_key(e: &tierbase::Error) -> bool {
    matches!(
        e,
        tierbase::Error::EmptyKey | tierbase::Error::KeyTooLarge { .. }
    )
}

/// `key`'s value; a key the store cannot hold is absent ([`unstorable_key`]).
fn read_key(store: &dyn Store, key: &[u8]) -> tierbase::Result<Option<Vec<u8>>> {
    match store.get(key) {
        Err(e) if unstorable_key(&e) => Ok(None),
        r => r,
    }
}

fn parse_i64(arg: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(arg).ok()?;
    // Redis accepts no leading '+', spaces or leading zeros ("007"); i64 parsing would.
    if s.is_empty()
        || s.starts_with('+')
        || (s.len() > 1 && s.starts_with('0'))
        || s.starts_with("-0")
    {
        return None;
    }
    s.parse().ok()
}

/// Most bytes of a client's argument an error reply quotes (Redis's limit).
const SHOWN: usize = 128;

/// `bytes` as text, cut at `at` bytes (on a character boundary): an error reply never echoes
/// a megabyte argument whole.
fn cut(bytes: &[u8], at: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut end = at.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Redis's reply: the name cut at 128 bytes, then the arguments while fewer than 128 bytes of
/// them were quoted, each cut to what is left of the 128 (a 1 MB argument was echoed whole).
fn unknown_command(args: &[&[u8]]) -> Reply {
    let name = cut(args.first().copied().unwrap_or_default(), SHOWN);
    let mut rest = String::new();
    for a in args.iter().skip(1) {
        if rest.len() >= SHOWN {
            break;
        }
        rest.push_str(&format!("'{}' ", cut(a, SHOWN - rest.len())));
    }
    Reply::error(format!(
        "ERR unknown command '{name}', with args beginning with: {rest}"
    ))
}

/// `MULTI` and what follows it: transactions are not served, and the commands a client
/// queues after a `MULTI` are refused until its `EXEC` (which answers `EXECABORT`, as Redis
/// does for a transaction with an error in its queue) or `DISCARD`; before 2026-12-05 they
/// ran at once, one by one, while the client took them for a transaction. `None`: run the
/// command.
fn refuse_transaction(session: &mut Session, args: &[&[u8]]) -> Option<Reply> {
    let name = args.first().copied().unwrap_or_default();
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if is("multi") && args.len() > 1 {
        // Redis's arity error (checked before authentication, as for every command), and no
        // transaction begins.
        return Some(wrong_args("multi"));
    }
    if !session.authenticated {
        // NOAUTH first, as for any other command Redis knows (these are not in `COMMANDS`).
        return ["multi", "exec", "discard"]
            .iter()
            .any(|n| is(n))
            .then(|| Reply::error("NOAUTH Authentication required."));
    }
    if !session.refusing_transaction {
        if is("multi") {
            session.refusing_transaction = true;
            return Some(Reply::error(
                "ERR MULTI is not supported: this server has no transactions; the commands \
                 up to EXEC or DISCARD are refused, not run",
            ));
        }
        return None;
    }
    if is("exec") {
        session.refusing_transaction = false;
        Some(Reply::error(
            "EXECABORT Transaction discarded because of previous errors.",
        ))
    } else if is("discard") {
        session.refusing_transaction = false;
        Some(Reply::ok())
    } else if is("quit") {
        None
    } else if is("multi") {
        Some(Reply::error("ERR MULTI calls can not be nested"))
    } else {
        Some(Reply::error(
            "ERR not run: this connection's MULTI was refused (no transactions here); send \
             EXEC or DISCARD to end it",
        ))
    }
}

/// Executes one command.
pub(crate) fn execute(shared: &Shared, session: &mut Session, args: &[&[u8]]) -> Outcome {
    shared.stats.commands.incr();
    let Some(first) = args.first() else {
        return Outcome::read(Reply::error("ERR empty command"));
    };
    if let Some(reply) = refuse_transaction(session, args) {
        return Outcome::read(reply);
    }
    // Found without lowering the name into a new String: a command per request counts.
    let Some(spec) = COMMANDS
        .iter()
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(first))
    else {
        return Outcome::read(unknown_command(args));
    };
    let name = spec.name;
    let n = args.len() as i64;
    if (spec.arity > 0 && n != spec.arity) || (spec.arity < 0 && n < -spec.arity) {
        return Outcome::read(wrong_args(name));
    }
    if !session.authenticated && !spec.flags.contains(&"no_auth") {
        return Outcome::read(Reply::error("NOAUTH Authentication required."));
    }
    let store = shared.store.as_ref();
    let rest = &args[1..];
    match name {
        "ping" => Outcome::read(match rest {
            [] => Reply::Simple("PONG".into()),
            [msg] => Reply::bulk(*msg),
            _ => wrong_args("ping"),
        }),
        "echo" => Outcome::read(Reply::bulk(rest[0])),
        "quit" => Outcome {
            reply: Some(Reply::ok()),
            wrote: false,
            flow: Flow::Close,
        },
        "hello" => hello(shared, session, rest),
        "auth" => Outcome::read(auth(shared, session, rest)),
        "select" => Outcome::read(match parse_i64(rest[0]) {
            Some(0) => Reply::ok(),
            Some(_) => Reply::error("ERR DB index is out of range"),
            None => not_integer(),
        }),
        "client" => Outcome::read(client(session, rest)),
        "command" => Outcome::read(command(rest)),
        "config" => Outcome::read(config(shared, rest)),
        "info" => Outcome::read(Reply::Verbatim(info(shared, rest))),
        "dbsize" => Outcome::read(Reply::Integer(store.len() as i64)),
        "get" => Outcome::read(match read_key(store, rest[0]) {
            Ok(v) => {
                count_hit(shared, v.is_some());
                v.map_or(Reply::Nil, Reply::Bulk)
            }
            Err(e) => store_error(&e),
        }),
        "set" => set(store, rest),
        "setnx" => {
            let mut created = false;
            let value = rest[1];
            write_outcome(
                store.modify(rest[0], &mut |old| {
                    created = old.is_none();
                    if created {
                        Change::Put(value.to_vec())
                    } else {
                        Change::Keep
                    }
                }),
                || Reply::Integer(i64::from(created)),
            )
        }
        "getset" => {
            let mut previous = None;
            let value = rest[1];
            write_outcome(
                store.modify(rest[0], &mut |old| {
                    previous = old.map(<[u8]>::to_vec);
                    Change::Put(value.to_vec())
                }),
                || previous.take().map_or(Reply::Nil, Reply::Bulk),
            )
        }
        "getdel" => {
            let mut previous = None;
            let done = store.modify(rest[0], &mut |old| {
                previous = old.map(<[u8]>::to_vec);
                if previous.is_some() {
                    Change::Delete
                } else {
                    Change::Keep
                }
            });
            write_outcome(
                // A key the store cannot hold is absent: nil, as for a missing key.
                done.or_else(|e| if unstorable_key(&e) { Ok(()) } else { Err(e) }),
                || previous.take().map_or(Reply::Nil, Reply::Bulk),
            )
        }
        "mget" => {
            // One batched read: a store that can overlaps the keys' cache misses.
            let keys: Vec<&[u8]> = rest.iter().map(|k| &k[..]).collect();
            // A key the store cannot hold fails the batch: then one key at a time, that
            // key absent.
            let found = match store.get_many(&keys) {
                Err(e) if unstorable_key(&e) => keys.iter().map(|k| read_key(store, k)).collect(),
                r => r,
            };
            match found {
                Ok(found) => {
                    let values = found
                        .into_iter()
                        .map(|v| {
                            count_hit(shared, v.is_some());
                            v.map_or(Reply::Nil, Reply::Bulk)
                        })
                        .collect();
                    Outcome::read(Reply::Array(values))
                }
                Err(e) => Outcome::read(store_error(&e)),
            }
        }
        "mset" => {
            if !rest.len().is_multiple_of(2) {
                return Outcome::read(wrong_args("mset"));
            }
            let pairs: Vec<(&[u8], &[u8])> = rest
                .chunks_exact(2)
                .map(|pair| (pair[0], pair[1]))
                .collect();
            match store.put_many(&pairs) {
                Ok(_) => Outcome::write(Reply::ok()),
                Err(e) => Outcome::write(store_error(&e)),
            }
        }
        "del" | "unlink" => {
            let mut removed = 0;
            for key in rest {
                match store.delete(key) {
                    Ok(true) => removed += 1,
                    Ok(false) => {}
                    Err(e) if unstorable_key(&e) => {}
                    Err(e) => {
                        return Outcome::write(store_error_after_deletes(&e, removed as u64));
                    }
                }
            }
            Outcome::write(Reply::Integer(removed))
        }
        "exists" => {
            let mut found = 0;
            for key in rest {
                match read_key(store, key) {
                    Ok(Some(_)) => found += 1,
                    Ok(None) => {}
                    Err(e) => return Outcome::read(store_error(&e)),
                }
            }
            Outcome::read(Reply::Integer(found))
        }
        "incr" => incr_by(store, rest[0], Some(1)),
        "decr" => incr_by(store, rest[0], Some(-1)),
        "incrby" => incr_by(store, rest[0], parse_i64(rest[1])),
        "decrby" => match parse_i64(rest[1]) {
            // Its negation does not fit: Redis's own message.
            Some(i64::MIN) => Outcome::read(Reply::error("ERR decrement would overflow")),
            delta => incr_by(store, rest[0], delta.map(|d| -d)),
        },
        "append" => {
            let mut len = 0;
            let suffix = rest[1];
            write_outcome(
                store.modify(rest[0], &mut |old| {
                    let mut v = old.map(<[u8]>::to_vec).unwrap_or_default();
                    v.extend_from_slice(suffix);
                    len = v.len();
                    Change::Put(v)
                }),
                || Reply::Integer(len as i64),
            )
        }
        "strlen" => Outcome::read(match read_key(store, rest[0]) {
            Ok(v) => Reply::Integer(v.map_or(0, |v| v.len() as i64)),
            Err(e) => store_error(&e),
        }),
        "type" => Outcome::read(match read_key(store, rest[0]) {
            Ok(Some(_)) => Reply::Simple("string".into()),
            Ok(None) => Reply::Simple("none".into()),
            Err(e) => store_error(&e),
        }),
        "ttl" | "pttl" => Outcome::read(match read_key(store, rest[0]) {
            // No key expires: -1 for a key, -2 for none (Redis's convention).
            Ok(Some(_)) => Reply::Integer(-1),
            Ok(None) => Reply::Integer(-2),
            Err(e) => store_error(&e),
        }),
        "scan" => Outcome::read(scan(store, rest)),
        "flushdb" => flushdb(store, rest),
        "shutdown" => match shutdown_args(rest) {
            Ok(()) => Outcome {
                reply: None,
                wrote: false,
                flow: Flow::Shutdown,
            },
            Err(reply) => Outcome::read(reply),
        },
        _ => Outcome::read(unknown_command(args)),
    }
}

fn count_hit(shared: &Shared, hit: bool) {
    let counter = if hit {
        &shared.stats.keyspace_hits
    } else {
        &shared.stats.keyspace_misses
    };
    counter.incr();
}

/// The outcome of a write through [`Store::modify`]: its reply, or the store's error.
fn write_outcome(result: tierbase::Result<()>, reply: impl FnOnce() -> Reply) -> Outcome {
    match result {
        Ok(()) => Outcome::write(reply()),
        Err(e) => Outcome::write(store_error(&e)),
    }
}

fn incr_by(store: &dyn Store, key: &[u8], delta: Option<i64>) -> Outcome {
    let Some(delta) = delta else {
        return Outcome::read(not_integer());
    };
    let mut result: Result<i64, Reply> = Ok(0);
    let done = store.modify(key, &mut |old| {
        let current = match old {
            None => 0,
            Some(v) => match parse_i64(v) {
                Some(n) => n,
                None => {
                    result = Err(not_integer());
                    return Change::Keep;
                }
            },
        };
        match current.checked_add(delta) {
            Some(n) => {
                result = Ok(n);
                Change::Put(n.to_string().into_bytes())
            }
            None => {
                result = Err(Reply::error("ERR increment or decrement would overflow"));
                Change::Keep
            }
        }
    });
    write_outcome(done, || match result {
        Ok(n) => Reply::Integer(n),
        Err(reply) => reply,
    })
}

/// Whether `args` is a plain `SET key value` (no options) that `session` may run: the one
/// command the server groups with its pipelined neighbours ([`execute_plain_sets`]).
pub(crate) fn is_plain_set(session: &Session, args: &[&[u8]]) -> bool {
    session.authenticated
        && !session.refusing_transaction
        && args.len() == 3
        && args[0].eq_ignore_ascii_case(b"set")
}

/// Whether `args` is a plain `GET key` that may be gathered with the GETs next to it into one
/// batched read ([`execute_plain_gets`]).
pub(crate) fn is_plain_get(session: &Session, args: &[&[u8]]) -> bool {
    session.authenticated
        && !session.refusing_transaction
        && args.len() == 2
        && args[0].eq_ignore_ascii_case(b"get")
}

/// Runs plain GETs (see [`is_plain_get`]) as one [`Store::get_many`], a store that can
/// overlapping the keys' cache misses, and appends one reply per GET, as if each had run
/// alone. If the batch fails, each GET runs alone, so each gets its own reply.
pub(crate) fn execute_plain_gets(
    shared: &Shared,
    session: &mut Session,
    keys: &[&[u8]],
    output: &mut Vec<u8>,
) {
    let store = shared.store.as_ref();
    match store.get_many(keys) {
        Ok(values) => {
            shared.stats.commands.add(keys.len() as u64);
            for value in values {
                count_hit(shared, value.is_some());
                value
                    .map_or(Reply::Nil, Reply::Bulk)
                    .encode(session.protocol, output);
            }
        }
        Err(_) => {
            for key in keys {
                if let Some(reply) = execute(shared, session, &[b"GET".as_slice(), key]).reply {
                    reply.encode(session.protocol, output);
                }
            }
        }
    }
}

/// Plain SETs' keys and values, held back to run as one store batch
/// ([`execute_plain_sets`]): copied end to end into one buffer, so a pipeline of SETs costs a
/// few growths of one buffer instead of allocations per SET.
#[derive(Debug, Default)]
pub(crate) struct SetBatch {
    bytes: Vec<u8>,
    /// Per SET: where its key ends and its value begins, and where its value ends.
    ends: Vec<(usize, usize)>,
}

impl SetBatch {
    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) {
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(value);
        self.ends.push((key_end, self.bytes.len()));
    }

    /// Empties the batch, keeping its buffers for the next SETs.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// SETs held.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Bytes of keys and values held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.len()
    }

    /// The SETs' keys and values, in order.
    pub(crate) fn pairs(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.ends.iter().map(move |&(key_end, end)| {
            let key = self.bytes.get(start..key_end).unwrap_or_default();
            let value = self.bytes.get(key_end..end).unwrap_or_default();
            start = end;
            (key, value)
        })
    }
}

/// Runs plain SETs (see [`is_plain_set`]) in order; one reply per SET, as if each had run
/// alone. On a store whose [`Store::put_many`] is all or nothing, as one batch, and if the
/// store refuses it whole (too large, a value over the limit), each SET runs alone for its
/// own reply; on any other store each SET runs alone from the start.
pub(crate) fn execute_plain_sets(shared: &Shared, sets: &SetBatch) -> Vec<Reply> {
    shared.stats.commands.add(sets.len() as u64);
    let store = shared.store.as_ref();
    let pairs: Vec<(&[u8], &[u8])> = sets.pairs().collect();
    let one_by_one = || {
        pairs
            .iter()
            .map(|&(key, value)| {
                set(store, &[key, value])
                    .reply
                    .unwrap_or_else(|| Reply::error("ERR no reply"))
            })
            .collect()
    };
    // A batch that fails part-way leaves its first pairs applied, and a SET run again after
    // it may fail where the first run succeeded (a full store has no room for the rewrite):
    // each SET then needs its own answer from its own run. Before 2026-12-05, pipelined SETs
    // on a full `kv` store were answered "store full" yet stored.
    if !store.put_many_is_all_or_nothing() {
        return one_by_one();
    }
    match store.put_many(&pairs) {
        Ok(_) => pairs.iter().map(|_| Reply::ok()).collect(),
        Err(_) => one_by_one(),
    }
}

/// SET key value [NX | XX] [GET]; expiry options are refused (no key expires in tierbase).
fn set(store: &dyn Store, rest: &[&[u8]]) -> Outcome {
    let (key, value) = (rest[0], rest[1]);
    let (mut nx, mut xx, mut get) = (false, false, false);
    for opt in &rest[2..] {
        match lower(opt).as_str() {
            "nx" if !xx => nx = true,
            "xx" if !nx => xx = true,
            "get" => get = true,
            "ex" | "px" | "exat" | "pxat" | "keepttl" | "persist" => {
                return Outcome::read(Reply::error(
                    "ERR key expiry (EX/PX/EXAT/PXAT/KEEPTTL) is not supported by tierbase: keys do not expire",
                ));
            }
            _ => return Outcome::read(syntax_error()),
        }
    }
    if !nx && !xx && !get {
        return match store.put(key, value) {
            Ok(_) => Outcome::write(Reply::ok()),
            Err(e) => Outcome::write(store_error(&e)),
        };
    }
    let (mut previous, mut applied) = (None, false);
    let done = store.modify(key, &mut |old| {
        previous = old.map(<[u8]>::to_vec);
        applied = !(nx && old.is_some() || xx && old.is_none());
        if applied {
            Change::Put(value.to_vec())
        } else {
            Change::Keep
        }
    });
    write_outcome(done, || {
        if get {
            previous.take().map_or(Reply::Nil, Reply::Bulk)
        } else if applied {
            Reply::ok()
        } else {
            Reply::Nil
        }
    })
}

/// SCAN cursor [MATCH pattern] [COUNT n] [TYPE type].
fn scan(store: &dyn Store, rest: &[&[u8]]) -> Reply {
    let Some(cursor) = std::str::from_utf8(rest[0])
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return Reply::error("ERR invalid cursor");
    };
    let (mut pattern, mut count, mut type_ok) = (None, 10usize, true);
    let mut opts = rest[1..].iter();
    while let Some(opt) = opts.next() {
        let Some(value) = opts.next() else {
            return syntax_error();
        };
        match lower(opt).as_str() {
            "match" => pattern = Some(*value),
            "count" => match parse_i64(value) {
                Some(n) if n >= 1 => count = usize::try_from(n).unwrap_or(usize::MAX),
                Some(_) => return syntax_error(),
                None => return not_integer(),
            },
            "type" => type_ok = lower(value) == "string",
            _ => return syntax_error(),
        }
    }
    let mut keys = Vec::new();
    let next = match store.scan(cursor, count, &mut keys) {
        Ok(next) => next,
        Err(e) => return store_error(&e),
    };
    let keys = keys
        .into_iter()
        .filter(|k| type_ok && pattern.is_none_or(|p| glob_match(p, k)))
        .map(Reply::Bulk)
        .collect();
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(keys)])
}

/// FLUSHDB [ASYNC | SYNC]: deletes every key (a walk, not one atomic step).
fn flushdb(store: &dyn Store, rest: &[&[u8]]) -> Outcome {
    match rest {
        [] => {}
        [mode] if matches!(lower(mode).as_str(), "async" | "sync") => {}
        _ => return Outcome::read(syntax_error()),
    }
    let mut cursor = 0;
    let mut keys = Vec::new();
    let mut removed = 0;
    loop {
        keys.clear();
        cursor = match store.scan(cursor, 1024, &mut keys) {
            Ok(c) => c,
            Err(e) => return Outcome::write(store_error_after_deletes(&e, removed)),
        };
        for key in &keys {
            match store.delete(key) {
                Ok(found) => removed += u64::from(found),
                Err(e) => return Outcome::write(store_error_after_deletes(&e, removed)),
            }
        }
        if cursor == 0 {
            return Outcome::write(Reply::ok());
        }
    }
}

/// HELLO [protover [AUTH username password] [SETNAME clientname]].
fn hello(shared: &Shared, session: &mut Session, rest: &[&[u8]]) -> Outcome {
    let mut protocol = session.protocol;
    let mut opts = rest.iter();
    if let Some(v) = opts.next() {
        protocol = match parse_i64(v) {
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => {
                return Outcome::read(Reply::error("NOPROTO unsupported protocol version"));
            }
            None => {
                return Outcome::read(Reply::error(
                    "ERR Protocol version is not an integer or out of range",
                ));
            }
        };
    }
    let mut name = None;
    while let Some(opt) = opts.next() {
        match lower(opt).as_str() {
            "auth" => {
                let (Some(user), Some(pass)) = (opts.next(), opts.next()) else {
                    return Outcome::read(syntax_error());
                };
                let reply = auth(shared, session, &[*user, *pass]);
                if matches!(reply, Reply::Error(_)) {
                    return Outcome::read(reply);
                }
            }
            "setname" => {
                let Some(n) = opts.next() else {
                    return Outcome::read(syntax_error());
                };
                if let Err(reply) = check_client_name(n) {
                    return Outcome::read(reply);
                }
                name = Some(n.to_vec());
            }
            _ => return Outcome::read(syntax_error()),
        }
    }
    if !session.authenticated {
        return Outcome::read(Reply::error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and \
             select the RESP protocol version at the same time",
        ));
    }
    if name.is_some() {
        session.name = name;
    }
    session.protocol = protocol;
    let proto = match protocol {
        Protocol::Resp2 => 2,
        Protocol::Resp3 => 3,
    };
    let fields = vec![
        (Reply::bulk("server"), Reply::bulk("redis")),
        (Reply::bulk("version"), Reply::bulk(REDIS_VERSION)),
        (Reply::bulk("proto"), Reply::Integer(proto)),
        (Reply::bulk("id"), Reply::Integer(session.id as i64)),
        (Reply::bulk("mode"), Reply::bulk("standalone")),
        (Reply::bulk("role"), Reply::bulk("master")),
        (Reply::bulk("modules"), Reply::Array(Vec::new())),
        (
            Reply::bulk("tierbase"),
            Reply::bulk(env!("CARGO_PKG_VERSION")),
        ),
        (
            Reply::bulk("store"),
            Reply::bulk(shared.store.describe().store),
        ),
    ];
    Outcome::read(Reply::Map(fields))
}

/// The Redis version whose protocol and commands tierbase answers as (clients check it).
pub(crate) const REDIS_VERSION: &str = "7.2.0";

/// AUTH [username] password (only the `default` user exists).
fn auth(shared: &Shared, session: &mut Session, rest: &[&[u8]]) -> Reply {
    let (user, pass) = match rest {
        [pass] => (&b"default"[..], pass),
        [user, pass] => (*user, pass),
        _ => return syntax_error(),
    };
    let Some(expected) = &shared.config.requirepass else {
        // Without a password the default user takes any (Redis's `nopass`), so the two-argument
        // form succeeds as it does with Redis — clients configured with a user name send it.
        return match rest {
            [_] => Reply::error(
                "ERR AUTH <password> called without any password configured for the default \
                 user. Are you sure your configuration is correct?",
            ),
            _ if user == b"default" => Reply::ok(),
            _ => Reply::error("WRONGPASS invalid username-password pair or user is disabled."),
        };
    };
    if user == b"default" && constant_time_eq(pass, expected.as_bytes()) {
        session.authenticated = true;
        Reply::ok()
    } else {
        Reply::error("WRONGPASS invalid username-password pair or user is disabled.")
    }
}

/// Compares without an early exit, so the reply time says nothing about the password.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(!x);
    }
    diff == 0
}

/// Redis's rule for client names (CLIENT SETNAME, HELLO … SETNAME): printable, no spaces.
fn check_client_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().any(|&c| c <= b' ' || c > b'~') {
        return Err(Reply::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

/// SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT], checked as Redis 7 does. NOSAVE/SAVE,
/// NOW and FORCE change nothing here (no snapshot to save, no replicas to wait for); ABORT
/// cancels a shutdown in progress, and there never is one a client could cancel, so it is
/// Redis's error for that case rather than a shutdown.
fn shutdown_args(rest: &[&[u8]]) -> Result<(), Reply> {
    let (mut save, mut abort, mut other) = (0, false, false);
    for arg in rest {
        match lower(arg).as_str() {
            "save" | "nosave" => save += 1,
            "now" | "force" => other = true,
            "abort" => abort = true,
            _ => return Err(syntax_error()),
        }
    }
    if save > 1 || (abort && (save > 0 || other)) {
        return Err(syntax_error());
    }
    if abort {
        return Err(Reply::error("ERR No shutdown in progress."));
    }
    Ok(())
}

/// CLIENT SETNAME | GETNAME | ID | SETINFO | INFO.
fn client(session: &mut Session, rest: &[&[u8]]) -> Reply {
    match (lower(rest[0]).as_str(), &rest[1..]) {
        ("setname", [name]) => match check_client_name(name) {
            Ok(()) => {
                session.name = (!name.is_empty()).then(|| name.to_vec());
                Reply::ok()
            }
            Err(reply) => reply,
        },
        ("getname", []) => session.name.clone().map_or(Reply::Nil, Reply::Bulk),
        ("id", []) => Reply::Integer(session.id as i64),
        ("setinfo", [_, _]) => Reply::ok(),
        ("info", []) => Reply::Verbatim(format!(
            "id={} name={} resp={}\n",
            session.id,
            String::from_utf8_lossy(session.name.as_deref().unwrap_or_default()),
            match session.protocol {
                Protocol::Resp2 => 2,
                Protocol::Resp3 => 3,
            }
        )),
        (_, _) => Reply::error(format!(
            "ERR unknown subcommand or wrong number of arguments for '{}'. Try CLIENT HELP.",
            cut(rest[0], SHOWN)
        )),
    }
}

/// A command as `COMMAND` and `COMMAND INFO` describe it, with Redis 7's ten fields: name,
/// arity, flags, first key, last key, key step, ACL categories, tips (none), key
/// specifications, subcommands (none listed).
fn command_entry(spec: &Spec) -> Reply {
    let simple = |s: &'static str| Reply::Simple(s.into());
    let int = |name: &str, v: i64| [Reply::bulk(name), Reply::Integer(v)];
    let key_specs = if spec.first_key == 0 {
        Vec::new()
    } else {
        // Where the keys are, as Redis 7 says it: from argument `first_key` on, up to the
        // last (relative; -1: the end), every `step`-th.
        let last = if spec.last_key < 0 {
            spec.last_key
        } else {
            spec.last_key - spec.first_key
        };
        vec![Reply::Map(vec![
            (
                Reply::bulk("flags"),
                Reply::Set(key_spec_flags(spec).iter().map(|f| simple(f)).collect()),
            ),
            (
                Reply::bulk("begin_search"),
                Reply::Map(vec![
                    (Reply::bulk("type"), Reply::bulk("index")),
                    (
                        Reply::bulk("spec"),
                        pairs(vec![int("index", spec.first_key)]),
                    ),
                ]),
            ),
            (
                Reply::bulk("find_keys"),
                Reply::Map(vec![
                    (Reply::bulk("type"), Reply::bulk("range")),
                    (
                        Reply::bulk("spec"),
                        pairs(vec![
                            int("lastkey", last),
                            int("keystep", spec.step),
                            int("limit", 0),
                        ]),
                    ),
                ]),
            ),
        ])]
    };
    Reply::Array(vec![
        Reply::bulk(spec.name),
        Reply::Integer(spec.arity),
        Reply::Set(spec.flags.iter().map(|f| simple(f)).collect()),
        Reply::Integer(spec.first_key),
        Reply::Integer(spec.last_key),
        Reply::Integer(spec.step),
        Reply::Set(acl_categories(spec).into_iter().map(simple).collect()),
        Reply::Array(Vec::new()),
        Reply::Array(key_specs),
        Reply::Array(Vec::new()),
    ])
}

/// A map of `(name, integer)` fields.
fn pairs(fields: Vec<[Reply; 2]>) -> Reply {
    Reply::Map(fields.into_iter().map(|[k, v]| (k, v)).collect())
}

/// Redis's ACL categories of a command, from its flags and group (`GET`: `@read @string
/// @fast`).
fn acl_categories(spec: &Spec) -> Vec<&'static str> {
    let has = |f: &str| spec.flags.contains(&f);
    let mut out = Vec::new();
    if has("write") {
        out.push("@write");
    }
    if has("readonly") {
        out.push("@read");
    }
    match find_doc(spec.name).map(|d| d.group) {
        Some("string") => out.push("@string"),
        Some("generic") => out.push("@keyspace"),
        Some("connection") => out.push("@connection"),
        // Server commands on the keyspace (Redis files them so).
        _ if matches!(spec.name, "dbsize" | "flushdb") => out.push("@keyspace"),
        _ => {}
    }
    out.push(if has("fast") { "@fast" } else { "@slow" });
    if has("admin") {
        out.extend(["@admin", "@dangerous"]);
    } else if spec.name == "flushdb" {
        out.push("@dangerous");
    }
    out
}

/// Redis 7's key-specification flags: how a command uses its keys.
fn key_spec_flags(spec: &Spec) -> &'static [&'static str] {
    match spec.name {
        "del" | "unlink" => &["RM", "delete"],
        "getdel" => &["RW", "access", "delete"],
        "mset" => &["OW", "update"],
        "setnx" => &["OW", "insert"],
        "set" => &["RW", "access", "update", "variable_flags"],
        _ if spec.flags.contains(&"write") => &["RW", "access", "update"],
        _ => &["RO", "access"],
    }
}

/// COMMAND, COMMAND COUNT, COMMAND INFO name…, COMMAND DOCS [name…].
fn command(rest: &[&[u8]]) -> Reply {
    match rest.first().map(|s| lower(s)).as_deref() {
        None => Reply::Array(COMMANDS.iter().map(command_entry).collect()),
        Some("count") => Reply::Integer(COMMANDS.len() as i64),
        Some("info") => Reply::Array(
            rest[1..]
                .iter()
                .map(|n| find_spec(&lower(n)).map_or(Reply::Nil, command_entry))
                .collect(),
        ),
        Some("docs") if rest.len() == 1 => Reply::Map(DOCS.iter().map(Doc::entry).collect()),
        // As Redis: names it does not serve are left out.
        Some("docs") => Reply::Map(
            rest[1..]
                .iter()
                .filter_map(|n| find_doc(&lower(n)).map(Doc::entry))
                .collect(),
        ),
        Some(_) => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            cut(rest[0], SHOWN)
        )),
    }
}

/// CONFIG GET pattern…; CONFIG SET and the rest are refused (start-up flags configure the
/// server).
fn config(shared: &Shared, rest: &[&[u8]]) -> Reply {
    if !rest[0].eq_ignore_ascii_case(b"get") {
        return Reply::error(format!(
            "ERR CONFIG {} is not supported by tierbase (configure the server with its start-up flags)",
            cut(rest[0], SHOWN).to_ascii_uppercase()
        ));
    }
    if rest.len() < 2 {
        return wrong_args("config|get");
    }
    let c = &shared.config;
    let values: Vec<(&str, String)> = vec![
        ("appendonly", "no".into()),
        ("save", String::new()),
        ("databases", "1".into()),
        ("maxclients", c.max_clients.to_string()),
        (
            "timeout",
            c.idle_timeout.map_or(0, |d| d.as_secs()).to_string(),
        ),
        ("proto-max-bulk-len", c.limits.max_bulk_len.to_string()),
        ("port", shared.port.to_string()),
        ("bind", c.listen.ip().to_string()),
        (
            "protected-mode",
            if c.protected_mode { "yes" } else { "no" }.into(),
        ),
        ("maxmemory", "0".into()),
        ("io-threads", c.worker_threads.to_string()),
    ];
    let mut out = Vec::new();
    for pattern in &rest[1..] {
        for (name, value) in &values {
            if glob_match(&pattern.to_ascii_lowercase(), name.as_bytes())
                && !out
                    .iter()
                    .any(|(n, _): &(Reply, Reply)| n == &Reply::bulk(*name))
            {
                out.push((Reply::bulk(*name), Reply::bulk(value.clone())));
            }
        }
    }
    Reply::Map(out)
}

/// CPU seconds (user, system) this process has used.
fn cpu_seconds() -> (f64, f64) {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `rusage` into the pointer it is given; the pointer is to a
    // zeroed, properly aligned `rusage` that lives across the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return (0.0, 0.0);
    }
    // SAFETY: getrusage returned 0, so it filled the struct (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// Resident set size in bytes, from /proc (0 where it cannot be read).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// INFO [section…]: server, clients, stats, memory, persistence, cpu, keyspace, tierbase.
fn info(shared: &Shared, rest: &[&[u8]]) -> String {
    let wanted: Vec<String> = rest.iter().map(|s| lower(s)).collect();
    let all = wanted.is_empty()
        || wanted
            .iter()
            .any(|w| w == "all" || w == "everything" || w == "default");
    let show = |section: &str| all || wanted.iter().any(|w| w == section);
    let st = &shared.stats;
    let desc = shared.store.describe();
    let mut out = String::new();
    let mut section = |name: &str, lines: Vec<(String, String)>| {
        if show(&name.to_ascii_lowercase()) {
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            out.push_str(&format!("# {name}\r\n"));
            for (k, v) in lines {
                out.push_str(&format!("{k}:{v}\r\n"));
            }
        }
    };
    let s = |k: &str, v: String| (k.to_string(), v);
    let load = |c: &Counter| c.get().to_string();
    section(
        "Server",
        vec![
            s("redis_version", REDIS_VERSION.into()),
            s("tierbase_version", env!("CARGO_PKG_VERSION").into()),
            s("redis_mode", "standalone".into()),
            s("os", std::env::consts::OS.into()),
            s("arch_bits", (usize::BITS).to_string()),
            s("multiplexing_api", "tokio".into()),
            s("process_id", std::process::id().to_string()),
            s("tcp_port", shared.port.to_string()),
            s(
                "uptime_in_seconds",
                shared.started.elapsed().as_secs().to_string(),
            ),
            s(
                "io_threads_active",
                shared.config.worker_threads.to_string(),
            ),
        ],
    );
    section(
        "Clients",
        vec![
            s(
                "connected_clients",
                st.clients.load(Ordering::Relaxed).to_string(),
            ),
            s("maxclients", shared.config.max_clients.to_string()),
            s("blocked_clients", "0".into()),
            s(
                "tierbase_client_buffer_bytes",
                st.client_buffer_bytes.load(Ordering::Relaxed).to_string(),
            ),
        ],
    );
    // One read of the store's figures (it walks the store's block metadata).
    let store_metrics = shared.store.metrics();
    let dram = store_metrics
        .iter()
        .find(|(k, _)| k.ends_with("dram_bytes"))
        .map_or_else(|| "0".to_string(), |(_, v)| v.clone());
    section(
        "Memory",
        vec![
            s("used_memory", dram.clone()),
            s("used_memory_rss", rss_bytes().to_string()),
            s("tierbase_store_dram_bytes", dram),
            s("maxmemory", "0".into()),
            s(
                "maxmemory_clients",
                shared.config.max_client_memory.to_string(),
            ),
        ],
    );
    section(
        "Persistence",
        vec![
            s("loading", "0".into()),
            s("aof_enabled", "0".into()),
            s("rdb_changes_since_last_save", "0".into()),
            s("tierbase_guarantee", shared.policy.guarantee_class.into()),
            s("tierbase_guarantee_detail", shared.policy.guarantee.clone()),
            s("tierbase_commit", shared.policy.commit.clone()),
            s(
                "tierbase_sync_before_reply",
                u8::from(shared.policy.sync_before_reply).to_string(),
            ),
            s("tierbase_syncs_before_reply", load(&st.syncs_before_reply)),
            s(
                "tierbase_set_batches_for_others",
                load(&st.set_batches_for_others),
            ),
            s("tierbase_medium", desc.medium.clone()),
        ],
    );
    section(
        "Stats",
        vec![
            s("total_connections_received", load(&st.connections_received)),
            s("total_commands_processed", load(&st.commands)),
            s("rejected_connections", load(&st.rejected_connections)),
            s("evicted_clients", load(&st.evicted_clients)),
            s("keyspace_hits", load(&st.keyspace_hits)),
            s("keyspace_misses", load(&st.keyspace_misses)),
            s("total_net_input_bytes", load(&st.net_input_bytes)),
            s("total_net_output_bytes", load(&st.net_output_bytes)),
            s("total_error_replies_protocol", load(&st.protocol_errors)),
            s("expired_keys", "0".into()),
            s("evicted_keys", "0".into()),
        ],
    );
    let (user, sys) = cpu_seconds();
    section(
        "CPU",
        vec![
            s("used_cpu_sys", format!("{sys:.6}")),
            s("used_cpu_user", format!("{user:.6}")),
        ],
    );
    section(
        "Keyspace",
        vec![s(
            "db0",
            format!("keys={},expires=0,avg_ttl=0", shared.store.len()),
        )],
    );
    let mut store_lines = vec![
        s("store", desc.store),
        s("store_ordered", u8::from(desc.ordered).to_string()),
    ];
    // A store's own figure named like one above (the B+-tree reports `store` too) is not
    // given twice: a client reading INFO into a map would keep either.
    store_lines.extend(
        store_metrics
            .into_iter()
            .filter(|(k, _)| k != "store" && k != "store_ordered")
            .map(|(k, v)| match k.as_str() {
                // The level the store was opened at, which is not what a reply means when the
                // server syncs before it replies (`durability:none` beside `tierbase_commit:
                // immediate` read as a contradiction): named as what it is.
                "durability" if shared.policy.sync_before_reply => (
                    "store_durability_level".to_string(),
                    format!("{v} (the server syncs each batch before its replies)"),
                ),
                "durability" => ("store_durability_level".to_string(), v),
                // `kv`'s level, likewise (`kv_commit:none` beside `tierbase_commit:immediate`).
                "kv_commit" if shared.policy.sync_before_reply => (
                    k,
                    format!(
                        "{v} (opened so by the server, which syncs each batch before its replies)"
                    ),
                ),
                _ => (k, v),
            }),
    );
    section("Tierbase", store_lines);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every served command is documented, in the table's order, and nothing else is: a
    /// command added to one table and not the other fails here.
    #[test]
    fn command_docs_cover_exactly_the_served_commands() {
        let served: Vec<&str> = COMMANDS.iter().map(|s| s.name).collect();
        let documented: Vec<&str> = DOCS.iter().map(|d| d.name).collect();
        assert_eq!(served, documented);
    }

    /// A megabyte argument of an unknown command is not echoed: Redis's 128-byte limits.
    #[test]
    fn an_unknown_command_quotes_at_most_128_bytes_of_its_arguments() {
        let huge = vec![b'x'; 1 << 20];
        let name = "é".repeat(100); // 200 bytes, cut on a character boundary
        let reply = super::unknown_command(&[name.as_bytes(), b"a", &huge, b"never"]);
        let super::Reply::Error(text) = reply else {
            panic!("{reply:?}")
        };
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(text.starts_with(&format!("ERR unknown command '{}'", "é".repeat(64))));
        assert!(text.contains("'a' 'xxx"), "{text}");
        assert!(!text.contains("never"), "{text}");
    }

    /// Keys and values come back whole and in order, empty ones and ones that look alike
    /// included; a cleared batch starts over.
    #[test]
    fn a_set_batch_gives_back_each_key_and_value() {
        let mut batch = SetBatch::default();
        let sets: [(&[u8], &[u8]); 4] = [(b"k1", b"v1"), (b"", b"x"), (b"k3", b""), (b"k1v", b"1")];
        for (k, v) in sets {
            batch.push(k, v);
        }
        assert_eq!(batch.len(), 4);
        assert_eq!(batch.bytes(), 11);
        assert_eq!(batch.pairs().collect::<Vec<_>>(), sets.to_vec());
        batch.clear();
        assert!(batch.is_empty());
        assert_eq!(batch.pairs().count(), 0);
        batch.push(b"a", b"bc");
        assert_eq!(
            batch.pairs().collect::<Vec<_>>(),
            vec![(&b"a"[..], &b"bc"[..])]
        );
    }
}
