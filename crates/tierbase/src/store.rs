//! The engine's store interface: what a front end (the Redis-protocol server, an embedding
//! application) needs from any tierbase store, so that serving a new store is one adapter.
//!
//! Owns: the [`Store`] trait, its read-modify-write vocabulary ([`Change`]), and
//! [`StoreDescription`] (what a store is, where it lives and what a crash may take). Must not
//! touch: any store's internals — each store implements the trait next to its own code
//! (`kv/` for [`crate::kv::KvStore`]).
//!
//! Contract every implementation keeps:
//! - point operations are linearizable per key, including [`Store::modify`], which runs its
//!   closure while no other writer of that key can act (INCR, APPEND and SET NX are built on
//!   it);
//! - a write is durable when it returns unless [`Store::defers_sync`] says writes wait for
//!   [`Store::sync`]; then `sync` makes every write acknowledged before it durable, and one
//!   `sync` serves any number of writers (group commit);
//! - [`Store::scan`] walks the keys with a cursor: starting at cursor 0 and following the
//!   returned cursors until 0 comes back returns every key present for the whole walk at
//!   least once; keys added or removed meanwhile may or may not appear (a store documents any
//!   narrower exception under concurrent writes, as `KvStore::scan` does).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Whether a store still takes writes: set for good by the first failed write to media, after
/// which every write call gets [`Error::ReadOnly`] naming that failure (as RocksDB and
/// TigerBeetle do) — media may now hold a write of unknown fate, and only a reopen (recovery)
/// can say what is durable. One home for every store's read-only state.
#[derive(Debug, Default)]
pub struct WriteFailure {
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Opened read-only: writes are refused from the start, with their own error.
    opened_read_only: AtomicBool,
}

impl WriteFailure {
    /// `Err(ReadOnly)` once a write failed (the store at `path`).
    #[inline]
    pub fn check(&self, path: Option<&Path>) -> Result<()> {
        if self.failed.load(Ordering::Acquire) {
            if self.opened_read_only.load(Ordering::Relaxed) {
                return Err(Error::OpenedReadOnly {
                    path: path.map(Path::to_path_buf),
                });
            }
            return Err(Error::ReadOnly {
                path: path.map(Path::to_path_buf),
                reason: self.reason().unwrap_or_default(),
            });
        }
        Ok(())
    }

    /// Passes `r` through; an error from media (a failed write, sync or allocation, corrupt
    /// data) makes the store read-only; refusals that changed nothing — a full store, a key or
    /// value the store does not take, a refusal already made — do not. `store` names it in the
    /// log.
    #[inline]
    pub fn record<T>(&self, store: &str, r: Result<T>) -> Result<T> {
        if let Err(e) = &r {
            self.note(store, e);
        }
        r
    }

    /// [`WriteFailure::record`]'s error path (out of line: every write passes the check).
    #[cold]
    #[inline(never)]
    fn note(&self, store: &str, e: &Error) {
        if matches!(
            e,
            Error::StoreFull { .. }
                | Error::ReadOnly { .. }
                | Error::OpenedReadOnly { .. }
                | Error::EmptyKey
                | Error::KeyTooLarge { .. }
                | Error::ValueTooLarge { .. }
                | Error::WrongSize { .. }
                | Error::InvalidArgument(_)
        ) {
            return;
        }
        let mut reason = self.reason.lock();
        if reason.is_none() {
            *reason = Some(e.failure_reason());
            tracing::error!("{store} store is read-only from now on: {e}");
        }
        self.failed.store(true, Ordering::Release);
    }

    /// The store was opened read-only (its region maps the file copy-on-write): every write
    /// is refused with [`Error::OpenedReadOnly`] from now on.
    pub fn open_read_only(&self) {
        self.opened_read_only.store(true, Ordering::Relaxed);
        self.failed.store(true, Ordering::Release);
    }

    /// Whether the store was opened read-only.
    pub fn opened_read_only(&self) -> bool {
        self.opened_read_only.load(Ordering::Relaxed)
    }

    /// Whether a write failed (or the store was opened read-only).
    #[inline]
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// The first failure, if any.
    pub fn reason(&self) -> Option<String> {
        self.reason.lock().clone()
    }
}

/// What [`Store::modify`]'s closure wants done with the key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// Leave the key as it is.
    Keep,
    /// Store this value (insert or replace).
    Put(Vec<u8>),
    /// Remove the key.
    Delete,
}

/// What a store is and what it promises, for logs, `INFO` and `stats`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreDescription {
    /// The store's name (`kv`, …).
    pub store: String,
    /// Where its data lives: medium and path (`tmpfs-backed file /dev/shm/s.tb`, …).
    pub medium: String,
    /// What an acknowledged write survives: `power loss`, `process crash` or `nothing`.
    pub guarantee: String,
    /// The commit level in force (`immediate`, `eventual:<ms>`, `none`).
    pub commit: String,
    /// Whether [`Store::scan`] returns keys in byte order.
    pub ordered: bool,
}

/// Checks the slices of a batched read into caller buffers (`values[i]` and `found[i]` are
/// key `i`'s): their lengths must be equal.
pub(crate) fn check_batch(keys: &[&[u8]], values: &[Vec<u8>], found: &[bool]) -> Result<()> {
    if values.len() != keys.len() || found.len() != keys.len() {
        return Err(Error::InvalidArgument(format!(
            "get_many: {} keys, {} value buffers and {} found flags (must be equal)",
            keys.len(),
            values.len(),
            found.len()
        )));
    }
    Ok(())
}

/// [`Store::get_many`] of a store whose batched read fills caller buffers: runs `read` on
/// fresh buffers and returns each key's value if it was found.
pub(crate) fn get_many_into(
    keys: &[&[u8]],
    read: impl FnOnce(&mut [Vec<u8>], &mut [bool]) -> Result<()>,
) -> Result<Vec<Option<Vec<u8>>>> {
    let mut values = vec![Vec::new(); keys.len()];
    let mut found = vec![false; keys.len()];
    read(&mut values, &mut found)?;
    Ok(values
        .into_iter()
        .zip(found)
        .map(|(v, f)| f.then_some(v))
        .collect())
}

/// A key-value store the engine's front ends can drive. `Send + Sync`: one handle is shared
/// by every thread or task.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// What the store is (see [`StoreDescription`]).
    fn describe(&self) -> StoreDescription;

    /// The value of `key`, if present.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// The values of several keys, in order (each read as [`Store::get`] reads it; the batch
    /// is not a snapshot). Stores that can overlap the keys' cache misses override it.
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// Inserts or replaces `key`; returns whether it was new.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<bool>;

    /// Removes `key`; returns whether it existed.
    fn delete(&self, key: &[u8]) -> Result<bool>;

    /// Refuses a record the store cannot hold (an empty or too long key, a value of the wrong
    /// size or too large) with the error [`Store::put`] would give, without writing anything.
    /// Default: every record is accepted here and `put` decides.
    fn check_record(&self, _key: &[u8], _value: &[u8]) -> Result<()> {
        Ok(())
    }

    /// Inserts or replaces each `(key, value)` in order (a key given twice ends with its last
    /// value); returns, per pair, whether its key was new. By default every pair is first
    /// [`Store::check_record`]ed, so that a batch holding a pair the store cannot hold writes
    /// nothing; then the pairs are [`Store::put`] one by one and the first error (an I/O
    /// error, a full device) stops the rest, the pairs before it staying applied. A store may
    /// apply them as one checked batch instead (the B+-tree does: after a crash or an `Err`,
    /// all of them or none are there once it is reopened). Readers may see a batch partly
    /// applied in either case.
    fn put_many(&self, pairs: &[(&[u8], &[u8])]) -> Result<Vec<bool>> {
        for (k, v) in pairs {
            self.check_record(k, v)?;
        }
        pairs.iter().map(|(k, v)| self.put(k, v)).collect()
    }

    /// Whether [`Store::put_many`] applies all of its pairs or none when it returns `Err`
    /// (the B+-tree's one checked batch). By default not: the pairs before the failing one
    /// stay applied, and a caller that answers per pair must put them one by one to know
    /// which were.
    fn put_many_is_all_or_nothing(&self) -> bool {
        false
    }

    /// Reads `key` and applies what `decide` returns, atomically: no other write of `key`
    /// happens between the read and the write. `decide` is called exactly once.
    ///
    /// `decide` runs while the store holds the key's write lock (the B+-tree: its one writer
    /// lock; KV: the lock stripe of the key's hash; Plush: the key's DRAM entry). It must
    /// not write to the same store — a write that needs that lock waits for it forever.
    /// Compute in `decide`, and write other keys after `modify` returns.
    fn modify(&self, key: &[u8], decide: &mut dyn FnMut(Option<&[u8]>) -> Change) -> Result<()>;

    /// Number of keys.
    fn len(&self) -> u64;

    /// Whether the store has no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends about `count` keys from position `cursor` (0: the start) to `out` and returns
    /// the cursor to continue from (0: done). See the module docs for the guarantee.
    fn scan(&self, cursor: u64, count: usize, out: &mut Vec<Vec<u8>>) -> Result<u64>;

    /// Whether writes wait for [`Store::sync`] to become durable.
    fn defers_sync(&self) -> bool;

    /// Whether a write, once applied, survives a crash of the process before its sync: true
    /// when it is in the operating system's page cache or a mapping by then (the default),
    /// false when it may wait in the process's memory (a log tail) until a sync or a write-out.
    fn applied_survives_process_crash(&self) -> bool {
        true
    }

    /// Whether the store applies one write batch at a time (one writer lock), so that callers
    /// on several threads gain nothing by writing batches at once: a server then hands its
    /// connections' batches to one task instead of parking threads on the lock. Default:
    /// false.
    fn single_writer(&self) -> bool {
        false
    }

    /// Makes every write acknowledged so far durable (nothing to do when
    /// [`Store::defers_sync`] is false).
    fn sync(&self) -> Result<()>;

    /// The store's own counters and figures, as (name, value) lines for `INFO`.
    fn metrics(&self) -> Vec<(String, String)>;

    /// Makes every acknowledged write durable and releases the store (a clean close: the
    /// next open needs no crash recovery once the last handle is gone).
    fn close(self: Box<Self>) -> Result<()>;
}
