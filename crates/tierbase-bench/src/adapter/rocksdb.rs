//! The RocksDB baselines: `rocksdb` (WAL on, `sync=true`) and `rocksdb-nosync` (WAL on,
//! `sync=false`).
//!
//! Owns: the [`Store`]/[`Client`] adapter over the safe wrappers of `rocksdb_ffi` (this file
//! has no `unsafe`). Must not touch: RocksDB's C API directly.
//!
//! Settings: RocksDB's defaults, plus `create_if_missing` and `increase_parallelism(cpus)`;
//! with a DRAM budget (`--dram`), a block cache of that size and, on a disk, `O_DIRECT` I/O so
//! that the OS page cache adds nothing to it (memtables come on top, as the notes say, unless
//! `--memtables-in-budget` charges two of an eighth of the budget each to it); one
//! database per run in `<dir>/rocksdb`. `update` and `delete` must report whether the key
//! was present, which RocksDB's blind writes do not, so they are a point lookup followed by the
//! write (not atomic across clients, as in YCSB's RocksDB binding, which reads before it
//! merges). Scans use a RocksDB iterator.

use super::common::{TMPFS_FSYNC_NOTE, create_dir, on_tmpfs, refuse_emulation, synced_durability};
use super::rocksdb_ffi::{Db, OpenOptions, ReadOptions, WriteOptions};
use super::{Capabilities, Client, Store, StoreInfo, StoreOptions, file_medium};
use crate::error::{BenchError, Result};

/// A RocksDB database opened for benchmarking.
#[derive(Debug)]
pub struct RocksDbStore {
    db: Db,
    sync: bool,
    info: StoreInfo,
}

fn store_error(name: &str, operation: &'static str, detail: String) -> BenchError {
    BenchError::Store {
        store: name.to_string(),
        operation,
        detail,
    }
}

/// Bits per key of the Bloom filter every table gets: what RocksDB's tuning guide sets for
/// point lookups (about 1 % false positives). RocksDB's default is no filter, with which a
/// read searches every table that may hold its key; users who read by key set one, so the
/// baseline does too (one-thread YCSB C in DRAM 1.36–1.63× faster with it, unchanged with the
/// data 4× beyond the cache: docs/BENCHMARKS.md, Figure 33).
const BLOOM_BITS_PER_KEY: f64 = 10.0;

impl RocksDbStore {
    /// Opens a new database in `opts.dir`; `sync` = fsync the WAL on every write.
    pub fn open(opts: &StoreOptions, sync: bool) -> Result<Self> {
        let name = if sync { "rocksdb" } else { "rocksdb-nosync" };
        refuse_emulation(name, "RocksDB", opts)?;
        create_dir(&opts.dir)?;
        let path = opts.dir.join("rocksdb");
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        let medium = file_medium(&opts.dir);
        let budget = opts.dram_budget.and_then(|b| usize::try_from(b).ok());
        // Memtables in the budget: two write buffers of an eighth, the cache the rest.
        let write_buffer_bytes = budget.filter(|_| opts.memtables_in_budget).map(|b| b / 8);
        let block_cache_bytes = budget.map(|b| b - 2 * write_buffer_bytes.unwrap_or(0));
        // With a DRAM budget, the budget is the block cache (and the memtables, with
        // --memtables-in-budget) and reads bypass the OS page cache (where the medium allows
        // O_DIRECT), so that RocksDB caches what the other stores may.
        let direct_io = block_cache_bytes.is_some() && !on_tmpfs(medium);
        let db = Db::open(
            &path,
            OpenOptions {
                background_threads: i32::try_from(cpus).unwrap_or(2),
                block_cache_bytes,
                direct_io,
                write_buffer_bytes,
                cache_index_and_filter_blocks: write_buffer_bytes.is_some(),
                bloom_bits_per_key: Some(BLOOM_BITS_PER_KEY),
            },
        )
        .map_err(|e| store_error(name, "open", e))?;
        let durability = if sync {
            synced_durability("wal+fsync", medium)
        } else {
            "wal, no fsync (process-crash)".into()
        };
        let mut info = StoreInfo::new(name, medium, durability);
        info.capabilities = Capabilities {
            ordered_scan: true,
            atomic_update: false,
        };
        info.notes.push(format!(
            "RocksDB (system librocksdb) default options + increase_parallelism({cpus}) + a \
             {BLOOM_BITS_PER_KEY}-bit Bloom filter per key; WAL on, sync={sync}; {}",
            match (block_cache_bytes, direct_io) {
                (Some(b), direct) => format!(
                    "{}{}",
                    match write_buffer_bytes {
                        Some(m) => format!(
                            "--dram holds the block cache ({} KiB, index and filter blocks in \
                             it, partitioned, top levels and level 0's pinned) and two \
                             memtables of {} KiB (--memtables-in-budget; table readers and \
                             compaction buffers come on top)",
                            b >> 10,
                            m >> 10
                        ),
                        None => format!(
                            "block cache {} KiB (--dram); memtables (64 MiB each) come on top",
                            b >> 10
                        ),
                    },
                    if direct {
                        "; O_DIRECT reads, flushes and compactions (no OS page cache)"
                    } else {
                        "; on tmpfs the files are memory anyway"
                    }
                ),
                (None, _) if opts.memtables_in_budget =>
                    "default block cache and the OS page cache (--memtables-in-budget ignored: \
                     no --dram)"
                        .into(),
                (None, _) => "default block cache and the OS page cache".into(),
            }
        ));
        if on_tmpfs(medium) {
            info.notes.push(TMPFS_FSYNC_NOTE.into());
        }
        info.notes
            .push("update/delete = point lookup + write (not atomic across clients)".into());
        Ok(RocksDbStore { db, sync, info })
    }
}

impl Store for RocksDbStore {
    fn info(&self) -> StoreInfo {
        self.info.clone()
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        let name = self.info.name.as_str();
        Ok(Box::new(RocksDbClient {
            db: &self.db,
            name,
            write: WriteOptions::new(self.sync).map_err(|e| store_error(name, "client", e))?,
            read: ReadOptions::new().map_err(|e| store_error(name, "client", e))?,
        }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        drop(self); // rocksdb_close flushes nothing it has not already logged
        Ok(())
    }
}

struct RocksDbClient<'a> {
    db: &'a Db,
    name: &'a str,
    write: WriteOptions,
    read: ReadOptions,
}

impl Client for RocksDbClient<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.db
            .put(&self.write, key, value)
            .map_err(|e| store_error(self.name, "put", e))
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        self.db
            .get(&self.read, key, Some(out))
            .map_err(|e| store_error(self.name, "get", e))
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        let present = self
            .db
            .get(&self.read, key, None)
            .map_err(|e| store_error(self.name, "update", e))?;
        if present {
            self.put(key, value)?;
        }
        Ok(present)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        let present = self
            .db
            .get(&self.read, key, None)
            .map_err(|e| store_error(self.name, "delete", e))?;
        if present {
            self.db
                .delete(&self.write, key)
                .map_err(|e| store_error(self.name, "delete", e))?;
        }
        Ok(present)
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
        let mut it = self
            .db
            .iter(&self.read)
            .map_err(|e| store_error(self.name, "scan", e))?;
        it.seek(start);
        let mut visited = 0;
        while visited < count {
            let Some((k, v)) = it.entry() else { break };
            visit(k, v);
            visited += 1;
            it.next();
        }
        it.status().map_err(|e| store_error(self.name, "scan", e))?;
        Ok(visited)
    }
}
