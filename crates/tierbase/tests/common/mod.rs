//! Helpers shared by the engine's integration tests of every store (`mod common;`): what is
//! not a harness of its own (those live in `tierbase::testing`) but would otherwise be copied
//! from test file to test file.
#![allow(dead_code)]

use std::path::Path;

/// A fresh directory for store files: on tmpfs (`/dev/shm`) when there is one — process-crash
/// durability at memory speed — else in the temp dir. Removed when dropped.
pub fn scratch_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("a temporary directory in /dev/shm")
    } else {
        tempfile::tempdir().expect("a temporary directory")
    }
}

/// The text of a caught panic's payload (`catch_unwind`'s error): its message, or empty if it
/// was neither a `String` nor a `&str`.
pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_default()
}

/// A B+-tree store's numeric counter `name` from its `stats()`.
pub fn stat(s: &tierbase::btree::BTreeStore, name: &str) -> u64 {
    s.stats()
        .into_iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric stat {name}"))
}
