//! The `kill -9` harness: a test re-runs its own binary as a child process that writes to a
//! store and prints [`TextState`] lines, and the parent kills it with SIGKILL after a number
//! of acknowledgements, then reopens the store and checks it. One copy for every store's
//! kill tests.
//!
//! ```no_run
//! use tierbase::testing::crash::{LogLine, TextState};
//! use tierbase::testing::kill::{self, KillChild};
//!
//! fn kill_test() {
//!     if let Ok(path) = std::env::var("MY_KILL_CHILD") {
//!         kill::child_setup();
//!         // Open the store at `path`, write forever printing begin and ack lines.
//!         return;
//!     }
//!     let mut state = TextState::new();
//!     let mut child = KillChild::spawn_self("kill_test", "MY_KILL_CHILD", "/dev/shm/s");
//!     child.kill_after(100, "round 0", |line| {
//!         kill::feed(&mut state, line, "round 0") == LogLine::Ack
//!     });
//!     // Reopen the store and check it against `state`.
//! }
//! ```

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::crash::{LogLine, TextState, splitmix};

/// splitmix64, seeded: the kill loops' choices replay from `TIERBASE_KILL_SEED`.
#[derive(Clone, Debug)]
pub struct TestRng(pub u64);

impl TestRng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        splitmix(&mut self.0)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

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

/// Feeds one child line to `state`; an `error` line or a malformed harness line fails the
/// test, with `ctx` in front.
pub fn feed(state: &mut TextState, line: &str, ctx: &str) -> LogLine {
    assert!(!line.starts_with("error"), "{ctx}: child failed: {line}");
    state
        .apply_line(line)
        .unwrap_or_else(|e| panic!("{ctx}: {e}"))
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
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut child = Command::new(exe)
            .args([
                test,
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "--include-ignored",
            ])
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
