//! A full device without a small file system: a test re-runs its own binary as a child
//! process whose files cannot grow beyond a limit (the shell's `ulimit -f`, with `SIGXFSZ`
//! ignored, which `exec` keeps), so a file's growth fails with `EFBIG` — which the device
//! layer reports as [`crate::Error::DeviceFull`], as it does `ENOSPC`. No mount, no root:
//! CI runs it as any other test.
//!
//! Owns: starting the limited child and collecting what it printed. Must not touch: stores
//! (the child drives its store through the public API and prints what the parent checks).

use std::process::Command;

use super::kill::{fork_guard, self_command};

/// Runs test `test` of this binary again as a child with the environment variable `env` set
/// to `value`, every file it writes limited to about `limit` bytes (in 512-byte blocks: the
/// unit of `ulimit -f` in a POSIX shell; a shell counting in KiB doubles it). Returns what the
/// child printed to stdout; panics with its output if it failed.
pub fn run_limited(test: &str, env: &str, value: &str, limit: u64) -> String {
    let _fork = fork_guard();
    let inner = self_command(test);
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {} || exit 97; exec \"$0\" \"$@\"",
            (limit / 512).max(1)
        ))
        .arg(inner.get_program())
        .args(inner.get_args())
        .env(env, value)
        .output()
        .expect("spawn the limited child through sh");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success() && !stdout.lines().any(|l| l.starts_with("error ")),
        "the child with files limited to {limit} bytes failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
