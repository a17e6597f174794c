//! The `redb` baseline: the pure-Rust [redb](https://www.redb.org) embedded database (a
//! copy-on-write B-tree in one file), behind the cargo feature `redb`.
//!
//! Owns: the [`Store`]/[`Client`] adapter over redb and the store's truthful [`StoreInfo`].
//! Must not touch: anything else (redb does its own I/O; no device emulation).
//!
//! One table of byte keys and values in `<dir>/redb.db`. Every put, update and delete is its own
//! write transaction (redb serialises writers), committed with the durability of
//! [`StoreOptions::durability`]:
//! - `immediate`: redb's `Durability::Immediate` (its default), an fsync per commit;
//! - `eventual:<interval>`: commits with `Durability::None`, and a background thread commits an
//!   empty transaction with `Durability::Immediate` every interval, which makes every earlier
//!   commit durable (redb 2's `Durability::Eventual` fsyncs on Linux like `Immediate`, so it buys
//!   nothing here);
//! - `none`: commits with `Durability::None`, and one durable commit at close.
//!
//! redb frees the pages a commit replaces only at a durable commit, so with `Durability::None`
//! alone the file grows by every commit's copied pages (3.5 GiB for 200,000 small writes):
//! under `eventual` and `none`, every [`DURABLE_EVERY`]th commit is made durable as well, which
//! bounds the growth at an fsync per that many writes.
//!
//! `update` and `delete` read and write in the same write transaction, so they are atomic.
//! Reads are a read transaction each; scans a range iterator. The cache (redb's page cache) is
//! [`StoreOptions::dram_budget`] when given, redb's default (1 GiB) otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ::redb::{Database, Durability as RedbDurability, ReadableTable, TableDefinition};
use tierbase::device::Durability;

use super::common::{
    Background, Job, TMPFS_FSYNC_NOTE, create_dir, on_tmpfs, refuse_emulation, synced_durability,
    visit_first,
};
use super::{Capabilities, Client, Store, StoreInfo, StoreOptions, file_medium};
use crate::error::{BenchError, Result};

/// The one table.
const TABLE: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("kv");

/// The redb release series this adapter is written against (the workspace pins `redb = "2.6"`).
const REDB_VERSION: &str = "2.6";

/// Under deferred durability, every this many commits one is durable (see the module doc).
const DURABLE_EVERY: u64 = 4096;

/// redb's default cache size (`Builder::new`), stated in the notes when the plan names none.
const REDB_DEFAULT_CACHE: u64 = 1 << 30;

/// A redb database opened for benchmarking.
#[derive(Debug)]
pub struct RedbStore {
    db: Arc<Database>,
    /// Durability of the clients' commits.
    commit: RedbDurability,
    /// Commits so far (under deferred durability: every [`DURABLE_EVERY`]th is durable).
    commits: AtomicU64,
    /// The background durable commit of `eventual`, if running; keeps its first error,
    /// reported at close.
    flusher: Option<Background<BenchError>>,
    info: StoreInfo,
}

/// Wraps any redb error (each operation has its own type) as [`BenchError::Store`].
fn err<E: std::fmt::Display>(operation: &'static str) -> impl Fn(E) -> BenchError {
    move |e| BenchError::Store {
        store: "redb".to_string(),
        operation,
        detail: e.to_string(),
    }
}

/// Commits an empty write transaction with `Durability::Immediate`: makes every earlier
/// (non-durable) commit durable and lets redb free the pages they replaced.
fn durable_commit(db: &Database, operation: &'static str) -> Result<()> {
    let mut txn = db.begin_write().map_err(err(operation))?;
    txn.set_durability(RedbDurability::Immediate);
    txn.commit().map_err(err(operation))
}

impl RedbStore {
    /// Creates a new database `redb.db` in `o.dir`.
    pub fn open(o: &StoreOptions) -> Result<Self> {
        refuse_emulation("redb", "redb", o)?;
        create_dir(&o.dir)?;
        let path = o.dir.join("redb.db");
        let mut builder = Database::builder();
        if let Some(bytes) = o.dram_budget {
            builder.set_cache_size(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
        let db = Arc::new(builder.create(&path).map_err(err("open"))?);
        // Create the table now, so that readers find it before the first write.
        {
            let txn = db.begin_write().map_err(err("open"))?;
            txn.open_table(TABLE).map_err(err("open"))?;
            txn.commit().map_err(err("open"))?;
        }

        let medium = file_medium(&o.dir);
        let (commit, durability, level_note) = match o.durability {
            Durability::Immediate => (
                RedbDurability::Immediate,
                synced_durability("fsync per commit", medium),
                "commits with Durability::Immediate (redb's default): fsync per commit".to_string(),
            ),
            Durability::Eventual(every) => (
                RedbDurability::None,
                format!(
                    "fsync every {} ms and every {DURABLE_EVERY}th commit",
                    every.as_millis()
                ),
                format!(
                    "commits with Durability::None; a background durable commit every {} ms \
                     and every {DURABLE_EVERY}th commit durable (redb frees replaced pages only \
                     at durable commits); redb 2's Durability::Eventual fsyncs on Linux like \
                     Immediate; a crash loses the commits since the last durable one",
                    every.as_millis()
                ),
            ),
            Durability::None => (
                RedbDurability::None,
                format!("fsync at close and every {DURABLE_EVERY}th commit"),
                format!(
                    "commits with Durability::None, one durable commit at close, and every \
                     {DURABLE_EVERY}th commit durable (redb frees replaced pages only at durable \
                     commits; without them the file grows by every commit); a crash loses the \
                     commits since the last durable one"
                ),
            ),
        };
        let mut info = StoreInfo::new("redb", medium, durability);
        info.capabilities = Capabilities {
            ordered_scan: true,
            atomic_update: true,
        };
        info.notes.push(format!(
            "redb {REDB_VERSION} (pure Rust copy-on-write B-tree), one table in <dir>/redb.db; \
             one write transaction per put/update/delete (redb serialises writers), a read \
             transaction per get/scan"
        ));
        info.notes.push(level_note);
        info.notes.push(match o.dram_budget {
            Some(b) => format!("cache {} MiB (--dram)", b >> 20),
            None => format!(
                "cache {} MiB (redb's default; --dram sets it)",
                REDB_DEFAULT_CACHE >> 20
            ),
        });
        if on_tmpfs(medium) {
            info.notes.push(TMPFS_FSYNC_NOTE.into());
        }

        let flusher = match o.durability {
            Durability::Eventual(every) => {
                let db = Arc::clone(&db);
                Some(Background::spawn("redb", Job::Flush, every, move || {
                    durable_commit(&db, "background durable commit")
                })?)
            }
            _ => None,
        };
        Ok(RedbStore {
            db,
            commit,
            commits: AtomicU64::new(0),
            flusher,
            info,
        })
    }
}

impl Store for RedbStore {
    fn info(&self) -> StoreInfo {
        self.info.clone()
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(RedbClient {
            db: &self.db,
            commit: self.commit,
            commits: &self.commits,
        }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        let RedbStore {
            db,
            commit,
            flusher,
            ..
        } = *self;
        if let Some(f) = flusher
            && let Some(e) = f.stop()?
        {
            return Err(e);
        }
        if !matches!(commit, RedbDurability::Immediate) {
            durable_commit(&db, "close")?;
        }
        drop(db);
        Ok(())
    }
}

struct RedbClient<'a> {
    db: &'a Database,
    commit: RedbDurability,
    commits: &'a AtomicU64,
}

impl RedbClient<'_> {
    /// Runs `f` on the table in a new write transaction and commits it.
    fn write<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(
            &mut ::redb::Table<'_, &'static [u8], &'static [u8]>,
        ) -> Result<T, ::redb::StorageError>,
    ) -> Result<T> {
        let mut txn = self.db.begin_write().map_err(err(operation))?;
        let deferred = !matches!(self.commit, RedbDurability::Immediate);
        if deferred
            && self.commits.fetch_add(1, Ordering::Relaxed) % DURABLE_EVERY == DURABLE_EVERY - 1
        {
            txn.set_durability(RedbDurability::Immediate);
        } else {
            txn.set_durability(self.commit);
        }
        let out = {
            let mut table = txn.open_table(TABLE).map_err(err(operation))?;
            f(&mut table).map_err(err(operation))?
        };
        txn.commit().map_err(err(operation))?;
        Ok(out)
    }
}

impl Client for RedbClient<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write("put", |t| {
            t.insert(key, value)?;
            Ok(())
        })
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let txn = self.db.begin_read().map_err(err("get"))?;
        let table = txn.open_table(TABLE).map_err(err("get"))?;
        match table.get(key).map_err(err("get"))? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v.value());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.write("update", |t| {
            let present = t.get(key)?.is_some();
            if present {
                t.insert(key, value)?;
            }
            Ok(present)
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        self.write("delete", |t| Ok(t.remove(key)?.is_some()))
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        if count == 0 {
            return Ok(0);
        }
        let txn = self.db.begin_read().map_err(err("scan"))?;
        let table = txn.open_table(TABLE).map_err(err("scan"))?;
        let entries = table.range::<&[u8]>(start..).map_err(err("scan"))?;
        visit_first(count, entries.map(|e| e.map_err(err("scan"))), |(k, v)| {
            visit(k.value(), v.value())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::common::{
        self,
        tests::{contract_suite_deferred, contract_suite_on},
    };

    #[test]
    fn contract_suite_passes() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = StoreOptions::new(dir.path());
        o.dram_budget = Some(4 << 20);
        contract_suite_on(&o, RedbStore::open);
    }

    #[test]
    fn contract_suite_passes_with_deferred_durability() {
        contract_suite_deferred(RedbStore::open, |dir| {
            // Everything is durable after close: reopen and read it back.
            let db = Database::open(dir.join("redb.db")).unwrap();
            let txn = db.begin_read().unwrap();
            let table = txn.open_table(TABLE).unwrap();
            assert!(table.get(b"edge/empty".as_slice()).unwrap().is_some());
        });
    }

    #[test]
    fn emulation_is_refused() {
        common::tests::emulation_is_refused(RedbStore::open);
    }
}
