//! The `lmdb` baseline: [LMDB](http://www.lmdb.tech/doc/) (a memory-mapped copy-on-write
//! B+-tree) through the [heed](https://docs.rs/heed) crate, behind the cargo feature `lmdb`.
//!
//! Owns: the [`Store`]/[`Client`] adapter over heed and the store's truthful [`StoreInfo`].
//! Must not touch: anything else (LMDB does its own I/O; no device emulation).
//!
//! heed compiles LMDB (the `mdb.master` branch) from source with the C compiler, so no system
//! library is needed; its `longer-keys` feature lifts LMDB's 511-byte key limit to what a page
//! holds (about 2 KiB with 4 KiB pages). The environment is the directory `<dir>/lmdb`, with a
//! map of `records × (key + value) × 4` bytes, at least 1 GiB (a reservation of address space:
//! the file grows as it fills), and LMDB's unnamed database. Every put, update and delete is its
//! own write transaction (LMDB serialises writers), committed with the durability of
//! [`StoreOptions::durability`]:
//! - `immediate`: LMDB's default, an fdatasync per commit;
//! - `eventual:<interval>`: the environment flag `NO_SYNC` (commits write to the page cache, no
//!   sync), and a background thread syncs the environment (`mdb_env_sync`) every interval;
//! - `none`: `NO_SYNC`, and one sync at close.
//!
//! With `NO_SYNC` (and no `WRITE_MAP`, so `MAP_ASYNC` has no effect) a process crash loses
//! nothing: commits are written to the file, only not synced. `update` and `delete` read and
//! write in the same write transaction, so they are atomic. Reads are a read transaction each;
//! scans a cursor over a range. LMDB cannot cap its cache: the OS page cache holds the map, so
//! [`StoreOptions::dram_budget`] does not apply (the notes say so).

use std::ops::Bound;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions};
use tierbase::device::Durability;

use super::common::{
    Background, Job, TMPFS_FSYNC_NOTE, create_dir, on_tmpfs, refuse_emulation, synced_durability,
    visit_first,
};
use super::{Capabilities, Client, Store, StoreInfo, StoreOptions, file_medium};
use crate::error::{BenchError, Result};

/// Smallest map size.
const MIN_MAP: u64 = 1 << 30;

/// An LMDB environment opened for benchmarking.
#[derive(Debug)]
pub struct LmdbStore {
    env: Env,
    /// Whether commits sync (`immediate`); otherwise the environment has `NO_SYNC`.
    sync: bool,
    /// The background sync of `eventual`, if running; keeps its first error, reported at
    /// close.
    flusher: Option<Background<String>>,
    info: StoreInfo,
}

fn err(operation: &'static str) -> impl Fn(heed::Error) -> BenchError {
    move |e| BenchError::Store {
        store: "lmdb".to_string(),
        operation,
        detail: e.to_string(),
    }
}

/// The map size for `o`: `records × (key + value) × 4`, at least [`MIN_MAP`], rounded up to a
/// multiple of 1 MiB (a multiple of any page size).
fn map_size(o: &StoreOptions) -> u64 {
    let per_record = (o.key_size as u64).saturating_add(o.value_size as u64);
    let want = o
        .records
        .saturating_mul(per_record)
        .saturating_mul(4)
        .max(MIN_MAP);
    want.div_ceil(1 << 20).saturating_mul(1 << 20)
}

impl LmdbStore {
    /// Creates a new environment in `o.dir/lmdb`.
    pub fn open(o: &StoreOptions) -> Result<Self> {
        refuse_emulation("lmdb", "LMDB", o)?;
        let path = o.dir.join("lmdb");
        create_dir(&path)?;
        let map = map_size(o);
        let sync = matches!(o.durability, Durability::Immediate);
        // One reader slot per worker thread (read transactions use thread-local slots), plus
        // room for the harness's own threads; LMDB's default is 126.
        let readers = u32::try_from(o.threads.saturating_mul(2).saturating_add(16))
            .unwrap_or(u32::MAX)
            .max(126);
        let mut options = EnvOpenOptions::new();
        options
            .map_size(usize::try_from(map).unwrap_or(usize::MAX))
            .max_readers(readers);
        if !sync {
            // SAFETY: `NO_SYNC` only weakens durability (a system crash or power loss may lose
            // the commits since the last sync, and may corrupt the database, which a benchmark
            // run discards anyway); it has no effect on memory safety within this process.
            unsafe {
                options.flags(EnvFlags::NO_SYNC);
            }
        }
        // SAFETY: the environment's directory is new and private to this run (a fresh
        // directory the harness created); nothing else in or out of this process maps or
        // modifies its files while the environment is open, and LMDB's own lock file guards it.
        let env = unsafe { options.open(&path) }.map_err(err("open"))?;

        let medium = file_medium(&o.dir);
        let (durability, level_note) = match o.durability {
            Durability::Immediate => (
                synced_durability("fsync per commit", medium),
                "LMDB default sync: fdatasync per commit".to_string(),
            ),
            Durability::Eventual(every) => (
                format!("process-crash; fsync every {} ms", every.as_millis()),
                format!(
                    "env flag NO_SYNC (commits reach the page cache, no sync), background \
                     mdb_env_sync every {} ms; MAP_ASYNC not used (it needs WRITE_MAP)",
                    every.as_millis()
                ),
            ),
            Durability::None => (
                "process-crash; fsync at close".to_string(),
                "env flag NO_SYNC (commits reach the page cache, no sync), one mdb_env_sync at \
                 close"
                    .to_string(),
            ),
        };
        let mut info = StoreInfo::new("lmdb", medium, durability);
        info.capabilities = Capabilities {
            ordered_scan: true,
            atomic_update: true,
        };
        info.notes.push(format!(
            "LMDB (mdb.master via heed 0.23, compiled in, longer-keys: max key {} B), the \
             unnamed database in <dir>/lmdb, map size {} MiB; one write transaction per \
             put/update/delete (LMDB serialises writers), a read transaction per get/scan",
            env.max_key_size(),
            map >> 20
        ));
        info.notes.push(level_note);
        info.notes.push(
            "cache not capped: LMDB reads through its memory map, so the OS page cache holds the \
             data (--dram does not apply)"
                .into(),
        );
        if on_tmpfs(medium) {
            info.notes.push(TMPFS_FSYNC_NOTE.into());
        }

        let flusher = match o.durability {
            Durability::Eventual(every) => {
                let env = env.clone();
                Some(Background::spawn("lmdb", Job::Sync, every, move || {
                    env.force_sync().map_err(|e| e.to_string())
                })?)
            }
            _ => None,
        };
        Ok(LmdbStore {
            env,
            sync,
            flusher,
            info,
        })
    }
}

impl Store for LmdbStore {
    fn info(&self) -> StoreInfo {
        self.info.clone()
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        let rtxn = self.env.read_txn().map_err(err("client"))?;
        let db = self
            .env
            .open_databases_and_commit(rtxn, |opener, rtxn| {
                opener
                    .open_database::<Bytes, Bytes>(rtxn, None)
                    .map(CommitOrAbort::<_, ()>::Commit)
            })
            .map_err(err("client"))?
            .unwrap_commit()
            .ok_or_else(|| BenchError::Store {
                store: "lmdb".into(),
                operation: "client",
                detail: "the unnamed database is missing".into(),
            })?;
        Ok(Box::new(LmdbClient { env: &self.env, db }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        let LmdbStore {
            env, sync, flusher, ..
        } = *self;
        if let Some(f) = flusher
            && let Some(e) = f.stop()?
        {
            return Err(BenchError::Store {
                store: "lmdb".into(),
                operation: "background sync",
                detail: e,
            });
        }
        if !sync {
            env.force_sync().map_err(err("close"))?;
        }
        // Wait until the environment is closed (every clone dropped), so that the run's
        // directory can be removed.
        env.prepare_for_closing().wait();
        Ok(())
    }
}

struct LmdbClient<'a> {
    env: &'a Env,
    db: Database<'a, Bytes, Bytes>,
}

impl LmdbClient<'_> {
    /// Runs `f` in a new write transaction and commits it.
    fn write<T>(
        &self,
        operation: &'static str,
        f: impl FnOnce(&mut heed::RwTxn<'_>) -> heed::Result<T>,
    ) -> Result<T> {
        let mut wtxn = self.env.write_txn().map_err(err(operation))?;
        let out = f(&mut wtxn).map_err(err(operation))?;
        wtxn.commit().map_err(err(operation))?;
        Ok(out)
    }
}

impl Client for LmdbClient<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let db = self.db;
        self.write("put", |w| db.put(w, key, value))
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        let rtxn = self.env.read_txn().map_err(err("get"))?;
        match self.db.get(&rtxn, key).map_err(err("get"))? {
            Some(v) => {
                out.clear();
                out.extend_from_slice(v);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let db = self.db;
        self.write("update", |w| {
            let present = db.get(w, key)?.is_some();
            if present {
                db.put(w, key, value)?;
            }
            Ok(present)
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let db = self.db;
        self.write("delete", |w| db.delete(w, key))
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
        let rtxn = self.env.read_txn().map_err(err("scan"))?;
        // LMDB rejects a zero-length key, also as a cursor position: the empty start is the
        // beginning of the database.
        let from = if start.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(start)
        };
        let range = (from, Bound::<&[u8]>::Unbounded);
        let entries = self.db.range(&rtxn, &range).map_err(err("scan"))?;
        visit_first(count, entries.map(|e| e.map_err(err("scan"))), |(k, v)| {
            visit(k, v)
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
        contract_suite_on(&StoreOptions::new(dir.path()), LmdbStore::open);
    }

    #[test]
    fn contract_suite_passes_with_deferred_durability() {
        contract_suite_deferred(LmdbStore::open, |_| ());
    }

    #[test]
    fn map_size_covers_the_run() {
        let mut o = StoreOptions::new("unused");
        assert_eq!(map_size(&o), MIN_MAP);
        o.records = 10_000_000;
        o.key_size = 24;
        o.value_size = 1000;
        assert!(map_size(&o) >= 10_000_000 * 1024 * 4);
        assert_eq!(map_size(&o) % (1 << 20), 0);
    }

    #[test]
    fn emulation_is_refused() {
        common::tests::emulation_is_refused(LmdbStore::open);
    }
}
