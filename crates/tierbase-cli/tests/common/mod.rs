//! Helpers every CLI test shares: the built binary, its output as text, and the one-line error
//! contract (non-zero exit, exactly one `tierbase: error: …` line on stderr, no panic or
//! backtrace).

// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The `tierbase` binary Cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_tierbase");

/// Runs `tierbase <args>` to the end and returns what it did.
pub fn tierbase(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run tierbase")
}

/// Output bytes as text; tierbase only ever prints UTF-8.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("tierbase printed non-UTF-8 output")
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    text(&o.stdout)
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    text(&o.stderr)
}

/// Fails unless `o` is a clean CLI error; `context` names the run in failure messages.
/// Returns the error line for further checks.
pub fn assert_one_line_error(o: &Output, context: &str) -> String {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{context}: an error exits 2 (1 is a negative answer): {err}"
    );
    for bad in ["panicked", "backtrace", "RUST_BACKTRACE"] {
        assert!(!err.contains(bad), "{context}: {err}");
    }
    assert_eq!(
        err.lines().count(),
        1,
        "{context}: one line on stderr expected, got:\n{err}"
    );
    assert!(err.starts_with("tierbase: error: "), "{context}: {err}");
    err
}

/// Fails unless `o` is a clean one-line error mentioning `want`.
pub fn one_line_error(o: &Output, want: &str) {
    let err = assert_one_line_error(o, want);
    assert!(err.contains(want), "expected '{want}' in: {err}");
}
