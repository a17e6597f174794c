//! The `kill -9` harness: a test re-runs its own binary as a child process that writes to a
//! store and prints [`TextState`] lines, and the parent kills it with SIGKILL after a number
//! of acknowledgements, then reopens the store and checks it. One copy for every store's
//! kill tests.
//!
//! Owns, for every store:
//! - the child process ([`KillChild`]: spawn, read lines, SIGKILL, reap) and the fork guard;
//! - the kill loop's driver ([`KillLoop`]): rounds and seed (`TIERBASE_KILL_ROUNDS`,
//!   `TIERBASE_KILL_SEED`), a random number of acknowledgements per round, the child's seed,
//!   the kill, and feeding what the child printed to the expected state — the store's test
//!   reopens the store and checks it between rounds;
//! - the child's writer side ([`run_writers`], [`begin`], [`ack_or_exit`], [`open_or_exit`]);
//! - the lock test ([`LockTest`]): a second open while a child process holds the store fails
//!   with [`Error::Locked`] naming the child, and the store opens with the child's write once
//!   it is killed.
//!
//! ```no_run
//! use tierbase::testing::crash::{TextState, Write};
//! use tierbase::testing::kill::{self, KillLoop, TestRng};
//!
//! fn kill_test() {
//!     if let Ok(spec) = std::env::var("MY_KILL_CHILD") {
//!         kill::child_setup();
//!         let (seed, _path) = spec.split_once('|').unwrap();
//!         let seed: u64 = seed.parse().unwrap();
//!         // Open the store at `_path`, then write forever, logging every write.
//!         kill::run_writers(4, |t| {
//!             let mut rng = TestRng::for_writer(seed, t);
//!             loop {
//!                 let key = format!("k{}", rng.below(48));
//!                 kill::begin(t, &key, &Write::Delete);
//!                 let result: Result<bool, String> = Ok(true); // the store's delete
//!                 kill::ack_or_exit(t, result);
//!             }
//!         });
//!         return;
//!     }
//!     let mut state = TextState::new();
//!     let mut kills = KillLoop::new("kill_test", "MY_KILL_CHILD", 100, 0x6b69_6c6c, 600);
//!     let spec = |seed| format!("{seed}|/dev/shm/s");
//!     while let Some(round) = kills.next_round(&mut state, spec, |_| {}) {
//!         // Reopen the store (`round.ok(open, "reopen")`) and dump it, then:
//!         let actual = std::collections::BTreeMap::new();
//!         round.ok(state.check(&actual), "after kill -9");
//!         state.settle(actual);
//!     }
//!     eprintln!("{}", kills.summary());
//! }
//! ```

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub use super::TestRng;
use super::crash::{LogLine, TextState, Write};
use crate::Error;
use crate::store::Store;

/// A value's name in a child's log: its length and FNV-1a hash, so that large values need
/// not be printed.
pub fn value_token(value: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in value {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}:{h:016x}", value.len())
}

/// The environment variable `name` as a number (decimal, or hex with `0x`), e.g. a round
/// count or seed override; panics if it is set but not a number.
pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v:?}: expected a number")))
}

static FORK_GUARD: Mutex<()> = Mutex::new(());

/// Hold this while the parent has a store open (and [`KillChild::spawn_self`] holds it while
/// it spawns): a child forked while another test thread has a store open inherits its files —
/// and their `flock`s — until it execs, so the other test's child could find its store locked.
pub fn fork_guard() -> MutexGuard<'static, ()> {
    FORK_GUARD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// In the child, first: starts its output on a line of its own (the test harness may have
/// printed a prefix) and makes a panic print an `error` line, which fails the parent.
pub fn child_setup() {
    println!();
    std::panic::set_hook(Box::new(|info| {
        println!("error child panicked: {info}");
        std::process::abort();
    }));
}

/// In the child, last: nothing to do until the parent's SIGKILL.
pub fn wait_for_kill() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// In the child: prints `child started` and runs `writer(t)` on `writers` threads, `t` in
/// `0..writers` (writers write forever: this returns only if they all end).
pub fn run_writers(writers: u64, writer: impl Fn(u64) + Sync) {
    println!("child started");
    std::thread::scope(|s| {
        for t in 0..writers {
            let writer = &writer;
            s.spawn(move || writer(t));
        }
    });
}

/// In the child: the `begin` line of a write of thread `thread` to `key`, printed before the
/// write is called.
pub fn begin(thread: u64, key: &str, write: &Write<&str>) {
    println!("{}", TextState::begin_line(thread, key, write));
}

/// In the child: the `ack` line of a write's result (`applied`: whether it changed the key,
/// false for an update of an absent key) — or, if it failed, an `error` line (which fails
/// the parent) and the end of the process.
pub fn ack_or_exit<E: Display>(thread: u64, result: Result<bool, E>) {
    match result {
        Ok(applied) => println!("{}", TextState::ack_line(thread, applied)),
        Err(e) => {
            println!("error thread {thread}: {e}");
            std::process::exit(3);
        }
    }
}

/// In the child: the opened store — or, if the open failed, an `error {what}: …` line (which
/// fails the parent) and the end of the process.
pub fn open_or_exit<S, E: Display>(what: &str, opened: Result<S, E>) -> S {
    opened.unwrap_or_else(|e| {
        println!("error {what}: {e}");
        std::process::exit(3);
    })
}

/// Feeds one child line to `state`; an `error` line or a malformed harness line fails the
/// test, with `ctx` in front.
pub fn feed(state: &mut TextState, line: &str, ctx: &str) -> LogLine {
    assert!(!line.starts_with("error"), "{ctx}: child failed: {line}");
    state
        .apply_line(line)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"))
}

/// A command re-running this test binary with only `test` (a test's name), ignored or not,
/// on one thread, its output not captured: a test's child process, which a variable in its
/// environment tells it is the child.
pub fn self_command(test: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command.args([
        test,
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "--include-ignored",
    ]);
    command
}

/// A child process running this test binary, killed (SIGKILL) and reaped when dropped, so
/// that a failing test leaves no writer behind.
#[derive(Debug)]
pub struct KillChild {
    child: Child,
    out: BufReader<ChildStdout>,
    line: String,
}

impl KillChild {
    /// Re-executes this test binary as a child running only `test` (the calling test's name)
    /// with `env = value`, which tells the test it is the child; its stdout is piped here.
    pub fn spawn_self(test: &str, env: &str, value: &str) -> KillChild {
        let _fork = fork_guard();
        let mut child = self_command(test)
            .env(env, value)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let out = BufReader::new(child.stdout.take().expect("piped stdout"));
        KillChild {
            child,
            out,
            line: String::new(),
        }
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The next complete line (without its newline); `None` at end of output. A last line
    /// cut short by the kill is dropped: it acknowledges nothing.
    pub fn next_line(&mut self) -> Option<&str> {
        self.line.clear();
        let n = self.out.read_line(&mut self.line).expect("read the child");
        if n == 0 || !self.line.ends_with('\n') {
            return None;
        }
        self.line.pop();
        Some(&self.line)
    }

    /// Reads lines until one equals `ready`; panics if the child prints an `error` line or
    /// ends first.
    pub fn wait_for(&mut self, ready: &str) {
        loop {
            let Some(line) = self.next_line() else {
                panic!(
                    "the child ended before it said {ready:?} ({:?})",
                    self.child.wait()
                );
            };
            assert!(!line.starts_with("error"), "child failed: {line}");
            if line == ready {
                return;
            }
        }
    }

    /// SIGKILL now; panics unless that is how the child ended.
    pub fn kill(&mut self) {
        self.sigkill("kill");
    }

    fn sigkill(&mut self, ctx: &str) {
        self.child.kill().expect("kill the child");
        let status: ExitStatus = self.child.wait().expect("reap the child");
        assert_eq!(
            status.signal(),
            Some(libc::SIGKILL),
            "{ctx}: the child did not die of SIGKILL: {status:?}"
        );
    }

    /// Passes the child's lines to `feed` (true: an acknowledgement) until `acks` of them
    /// were acknowledgements, kills the child mid-write, then passes on what it printed
    /// before it died. Returns the acknowledgements seen; panics, with `ctx` in front, if the
    /// child ends before the kill.
    pub fn kill_after(&mut self, acks: u64, ctx: &str, mut feed: impl FnMut(&str) -> bool) -> u64 {
        let mut seen = 0;
        while seen < acks {
            let Some(line) = self.next_line() else {
                panic!(
                    "{ctx}: the child ended before it was killed ({:?})",
                    self.child.wait()
                );
            };
            seen += u64::from(feed(line));
        }
        self.sigkill(ctx); // in the middle of further writes
        while let Some(line) = self.next_line() {
            seen += u64::from(feed(line));
        }
        seen
    }
}

impl Drop for KillChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The parent's side of a kill loop over one store: each [`KillLoop::next_round`] spawns the
/// child (this test binary re-run as `test`, told its spec through `child_env`), feeds what it
/// prints to the expected state, kills it after a random number of acknowledgements (1 to
/// `max_acks`) in the middle of further writes, and hands the round to the store's test, which
/// reopens the store, checks it against the state and settles the state.
///
/// Rounds and seed come from the test, overridden by `TIERBASE_KILL_ROUNDS` and
/// `TIERBASE_KILL_SEED`; every failure names the round and the seed, so that it replays.
#[derive(Debug)]
pub struct KillLoop<'a> {
    test: &'a str,
    child_env: &'a str,
    rounds: u64,
    seed: u64,
    max_acks: u64,
    rng: TestRng,
    next: u64,
    total_acks: u64,
    in_flight_at_kill: usize,
}

/// One round of a [`KillLoop`], its child killed.
#[derive(Clone, Debug)]
pub struct KillRound {
    /// The round's number, from 0.
    pub number: u64,
    /// `round N (TIERBASE_KILL_SEED=…)`: what a failure of the round says first.
    pub ctx: String,
}

impl KillRound {
    /// `result`'s value; if it is an error, panics with `{ctx}: {what}: {error}`.
    pub fn ok<T, E: Display>(&self, result: Result<T, E>, what: &str) -> T {
        result.unwrap_or_else(|e| panic!("{}: {what}: {e}", self.ctx))
    }

    /// Every key of `actual` (a store's dump, values named by [`value_token`]) reads back by
    /// `get` with the same value.
    pub fn check_gets(
        &self,
        actual: &BTreeMap<String, String>,
        mut get: impl FnMut(&[u8]) -> Option<Vec<u8>>,
    ) {
        for (k, tok) in actual {
            let v = get(k.as_bytes());
            assert_eq!(
                v.as_deref().map(value_token).as_ref(),
                Some(tok),
                "{}: get {k}",
                self.ctx
            );
        }
    }
}

impl<'a> KillLoop<'a> {
    /// `rounds` rounds (or `TIERBASE_KILL_ROUNDS`) from `seed` (or `TIERBASE_KILL_SEED`), each
    /// killing its child after 1 to `max_acks` acknowledgements (`max_acks > 0`). `test` is the
    /// calling test's name, which the child re-runs with `child_env` set to its spec.
    pub fn new(test: &'a str, child_env: &'a str, rounds: u64, seed: u64, max_acks: u64) -> Self {
        let rounds = env_u64("TIERBASE_KILL_ROUNDS").unwrap_or(rounds);
        let seed = env_u64("TIERBASE_KILL_SEED").unwrap_or(seed);
        KillLoop {
            test,
            child_env,
            rounds,
            seed,
            max_acks,
            rng: TestRng(seed),
            next: 0,
            total_acks: 0,
            in_flight_at_kill: 0,
        }
    }

    /// The rounds the loop runs.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// The loop's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Runs the next round's child until its kill: spawns it with the spec `child_spec`
    /// makes from the round's child seed, passes every line it prints to [`feed`] (into
    /// `state`) and then to `also`, and kills it after the round's number of
    /// acknowledgements. `None` once every round ran.
    pub fn next_round(
        &mut self,
        state: &mut TextState,
        child_spec: impl FnOnce(u64) -> String,
        mut also: impl FnMut(&str),
    ) -> Option<KillRound> {
        if self.next >= self.rounds {
            return None;
        }
        let round = self.next;
        self.next += 1;
        let seed = self.seed;
        let ctx = format!("round {round} (TIERBASE_KILL_SEED={seed:#x})");
        let target = 1 + self.rng.below(self.max_acks);
        let child_seed = seed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut child = KillChild::spawn_self(self.test, self.child_env, &child_spec(child_seed));
        self.total_acks += child.kill_after(target, &ctx, |line| {
            // `feed` first: it fails the test on an `error` line.
            let ack = feed(state, line, &ctx) == LogLine::Ack;
            also(line);
            ack
        });
        self.in_flight_at_kill += state.in_flight();
        Some(KillRound { number: round, ctx })
    }

    /// `N kill -9 rounds: A acknowledged writes, F in flight at the kills`, over the rounds
    /// run so far (the test's summary line goes on with its store's figures).
    pub fn summary(&self) -> String {
        format!(
            "{} kill -9 rounds: {} acknowledged writes, {} in flight at the kills",
            self.next, self.total_acks, self.in_flight_at_kill
        )
    }
}

/// The key the holder child of a [`LockTest`] writes.
pub const HELD_KEY: &[u8] = b"held";
/// The value the holder child of a [`LockTest`] writes.
pub const HELD_VALUE: &[u8] = b"by the child";

/// The lock test: a second open of a store that another process holds fails with
/// [`Error::Locked`], naming the holder's process in one clear line, and changes nothing —
/// once the holder is killed, the store opens with the holder's write.
///
/// The test re-runs itself as the holder child; in the child, call [`LockTest::hold`].
#[derive(Clone, Copy, Debug)]
pub struct LockTest<'a> {
    /// The calling test's name, which the child re-runs.
    pub test: &'a str,
    /// The environment variable that tells the test it is the holder (set to the path).
    pub child_env: &'a str,
    /// The store's path.
    pub path: &'a Path,
    /// The file whose lock the error must name (the path, or a file in it).
    pub locked: &'a Path,
}

impl LockTest<'_> {
    /// In the holder child: opens the store, writes [`HELD_KEY`], says `ready` and waits for
    /// the parent's SIGKILL. A failed open prints an `error holder: …` line and ends.
    pub fn hold<S: Store>(open: impl FnOnce() -> crate::Result<S>) -> ! {
        child_setup();
        let store = open_or_exit("holder", open());
        store.put(HELD_KEY, HELD_VALUE).unwrap();
        println!("ready");
        wait_for_kill()
    }

    /// In the parent: `create` makes the store (and closes it); the holder child opens it; a
    /// second `open` must fail with [`Error::Locked`] on [`LockTest::locked`], its holder and
    /// message naming the child's process (one line, naming the path and the lock); then the
    /// child is killed and `open` must succeed with the holder's write, and `after` gets the
    /// store (the fork guard still held).
    pub fn run<S: Store>(
        &self,
        create: impl FnOnce() -> crate::Result<()>,
        open: impl Fn() -> crate::Result<S>,
        after: impl FnOnce(S),
    ) {
        {
            let _fork = fork_guard();
            create().expect("create the store");
        }
        let mut child =
            KillChild::spawn_self(self.test, self.child_env, &self.path.display().to_string());
        child.wait_for("ready");
        let err = {
            let _fork = fork_guard();
            match open() {
                Ok(_) => panic!("a second open of a store another process holds succeeded"),
                Err(e) => e,
            }
        };
        let pid = child.id();
        match &err {
            Error::Locked { path: p, holder } => {
                assert_eq!(p, self.locked);
                assert!(
                    holder.contains(&format!("process {pid}")),
                    "holder {holder:?} does not name the child (pid {pid})"
                );
            }
            other => panic!("expected Error::Locked, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains(&self.path.display().to_string())
                && msg.contains(&format!("process {pid}"))
                && msg.contains("lock")
                && !msg.contains('\n'),
            "not one clear line: {msg:?}"
        );
        // The failed open changed nothing: the holder dies, its lock goes with it, and the
        // store opens with the holder's write.
        child.kill();
        let _fork = fork_guard();
        let store = open().unwrap();
        assert_eq!(store.get(HELD_KEY).unwrap().as_deref(), Some(HELD_VALUE));
        after(store);
    }
}
