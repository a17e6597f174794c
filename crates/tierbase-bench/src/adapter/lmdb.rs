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
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvFlags, EnvOpenOptions};
use parking_lot::Mutex;
use tierbase::device::Durability;

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
    /// The background sync of `eventual`, if running.
    flusher: Option<Flusher>,
    info: StoreInfo,
}

#[derive(Debug)]
struct Flusher {
    stop: Sender<()>,
    thread: JoinHandle<()>,
    /// The first error of a background sync, reported at close.
    error: Arc<Mutex<Option<String>>>,
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
        if let Some(p) = &o.emulate {
            return Err(BenchError::unsupported(
                "lmdb",
                format!(
                    "device emulation (--emulate {}): LMDB does its own I/O; run it on the real \
                     medium",
                    p.name
                ),
            ));
        }
        let path = o.dir.join("lmdb");
        std::fs::create_dir_all(&path).map_err(|e| BenchError::io("create directory", &path, e))?;
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
        let memory_backed = medium == "tmpfs file";
        let (durability, level_note) = match o.durability {
            Durability::Immediate => (
                if memory_backed {
                    "fsync per commit on tmpfs (process-crash)".to_string()
                } else {
                    "fsync per commit".to_string()
                },
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
        if memory_backed {
            info.notes
                .push("on tmpfs an fsync reaches memory only: no power-loss durability".into());
        }

        let flusher = match o.durability {
            Durability::Eventual(every) => Some(spawn_flusher(env.clone(), every)?),
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

fn spawn_flusher(env: Env, every: Duration) -> Result<Flusher> {
    let (stop, rx) = mpsc::channel::<()>();
    let error = Arc::new(Mutex::new(None));
    let first_error = Arc::clone(&error);
    let thread = std::thread::Builder::new()
        .name("lmdb-sync".into())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                if let Err(e) = env.force_sync() {
                    first_error.lock().get_or_insert_with(|| e.to_string());
                }
            }
        })
        .map_err(|e| BenchError::io("spawn sync thread for", "lmdb", e))?;
    Ok(Flusher {
        stop,
        thread,
        error,
    })
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
        if let Some(f) = flusher {
            drop(f.stop);
            f.thread
                .join()
                .map_err(|_| BenchError::WorkerPanicked("the lmdb sync thread".into()))?;
            if let Some(e) = f.error.lock().take() {
                return Err(BenchError::Store {
                    store: "lmdb".into(),
                    operation: "background sync",
                    detail: e,
                });
            }
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
        let mut visited = 0;
        for entry in self.db.range(&rtxn, &range).map_err(err("scan"))? {
            let (k, v) = entry.map_err(err("scan"))?;
            visit(k, v);
            visited += 1;
            if visited == count {
                break;
            }
        }
        Ok(visited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contract_suite_passes() {
        let dir = tempfile::tempdir().unwrap();
        let store = LmdbStore::open(&StoreOptions::new(dir.path())).unwrap();
        crate::contract::run_contract_suite(&store).unwrap_or_else(|e| panic!("{e}"));
        Box::new(store).close().unwrap();
    }

    #[test]
    fn contract_suite_passes_with_deferred_durability() {
        for level in [
            Durability::Eventual(Duration::from_millis(5)),
            Durability::None,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let mut o = StoreOptions::new(dir.path());
            o.durability = level;
            let store = LmdbStore::open(&o).unwrap();
            crate::contract::run_contract_suite(&store).unwrap_or_else(|e| panic!("{e}"));
            Box::new(store).close().unwrap();
        }
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
        let dir = tempfile::tempdir().unwrap();
        let mut o = StoreOptions::new(dir.path());
        o.emulate = tierbase::device::Catalogue::builtin()
            .profiles()
            .first()
            .cloned();
        assert!(o.emulate.is_some());
        let e = LmdbStore::open(&o).unwrap_err();
        assert!(e.is_unsupported(), "{e}");
    }
}
