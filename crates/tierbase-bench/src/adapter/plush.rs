//! `plush`: tierbase's Plush store (a persistent hash table: a DRAM level of fixed size over
//! leveled PMem hash directories, recovery logs, payload logs) behind the adapter traits,
//! driven as PiBench drives Plush.
//!
//! Owns: mapping [`StoreOptions`] to [`PlushOptions`] (layout, DRAM level, pre-size,
//! emulation, flush instruction) and the store's truthful [`StoreInfo`]. Must not touch: the
//! store's internals.
//!
//! **Operations** (PiBench's semantics): inserts write with the blind
//! [`PlushStore::upsert`] (no lookup), reads use the optimistic [`PlushStore::get`]. Updates
//! write with `upsert` and deletes with the blind [`PlushStore::remove`], each after a `get`:
//! the harness's contract has them report whether the key was there and leave a missing key
//! alone, which a blind write cannot tell. So an update or delete is a lock-free read
//! followed by a blind write, not one atomic step (`atomic_update: false`, as for RocksDB);
//! YCSB's updates only touch loaded keys, so the read always finds one.
//!
//! **Layout**: `fixed8` (keys and values in the buckets) only when every key and value has
//! exactly 8 bytes (`key_size == 8`, `value_size == 8`, fixed value sizes); otherwise
//! `variable` (buckets hold a key hash and a locator, the bytes live in payload logs).
//!
//! **DRAM level** (`dram_bits`, fixed for the store's life, independent of what it holds):
//! with `StoreOptions::dram_budget` (`--dram`), the most entries that fit the budget, at about
//! 9 KiB each beside about 1 MiB that does not depend on them (`tierbase::hash::
//! dram_bits_for_budget`: 256 record slots, the DRAM filters of the first two PMem levels, log
//! bookkeeping; the payload's chunk table); otherwise sized from the expected records:
//! `dram_bits = ⌈log2(records / 2048)⌉`, clamped to 8..=20. At most 2,048 expected records
//! per DRAM entry means the DRAM level holds at least an eighth of them and the first two PMem
//! levels (256 and 4,096 records per DRAM entry) hold the rest with level 1 at most half full
//! after the load, while level 2 and a fourth level stay free for updates' older versions;
//! for 100 M records the rule gives 2^16 entries, the thesis' setting. The floor of 2^8
//! entries (about 2 MiB of DRAM) makes it unlikely that concurrent writers of different keys
//! wait for one entry's lock; the ceiling is what four levels' 32-bit hash indexes allow. The
//! rest is the store's default geometry (64 recovery logs of 1 MiB chunks, four levels, one
//! migrator).
//!
//! **Pre-size**: the region file (`plush.tb` in the run's directory) starts large enough for
//! the recovery logs, the first two levels' directories and `records` records (buckets and,
//! variable layout, payload entries) plus a quarter, at least 16 MiB, so measured operations
//! do not pay for growth (`--grow-from-empty` starts it at the store's minimum instead).
//! `--emulate` and `--flush` go to the region as for `kv`; its durability mode is whatever the
//! medium gives (process-crash on tmpfs, msync on a disk file, dax on DAX). Plush has one
//! durability level — every acknowledged write is durable (one recovery-log entry, one persist
//! barrier) — so `--durability` other than `immediate` is noted and not applied.

use tierbase::device::{Durability, MappingKind, PmemRegion, RegionOptions};
use tierbase::hash::{Partition, PlushLayout, PlushOptions, PlushStore, layout};

use super::common::{create_dir, note_emulation};
use super::{Capabilities, Client, Store, StoreInfo, StoreOptions, file_medium};
use crate::error::{BenchError, Result};

/// The Plush store under benchmark.
#[derive(Debug)]
pub struct PlushBenchStore {
    store: PlushStore,
    info: StoreInfo,
}

/// Expected records per DRAM entry at most (see the module docs).
const RECORDS_PER_DRAM_ENTRY: u64 = 2048;
/// Fewest and most DRAM entries, as log2.
const MIN_DRAM_BITS: u32 = 8;
const MAX_DRAM_BITS: u32 = 20;

/// `dram_bits` for `records` expected records (see the module docs).
pub fn dram_bits_for_records(records: u64) -> u32 {
    let entries = records.div_ceil(RECORDS_PER_DRAM_ENTRY).max(1);
    let bits = 64 - (entries - 1).leading_zeros(); // ⌈log2(entries)⌉
    bits.clamp(MIN_DRAM_BITS, MAX_DRAM_BITS)
}

/// Initial region size for `records` records (see the module docs).
fn initial_size_for(opts: &PlushOptions, records: u64, key_size: usize, value_size: usize) -> u64 {
    let entries = 1u64 << opts.dram_bits;
    let logs = u64::from(opts.logs).min(entries);
    // Each log: its current chunk and a spare for compaction.
    let log_bytes = logs * 2 * opts.log_chunk_bytes();
    // Directories of levels 0 and 1 (512 bytes per entry, 16 times more entries on level 1).
    let dir_bytes = entries * 17 * layout::ENTRY_BYTES;
    // A bucket slot is 16 bytes; buckets fill up partly, so count two slots per record.
    let per_record = 32
        + match opts.layout {
            PlushLayout::Fixed8 => 0,
            PlushLayout::Variable => layout::payload_entry_bytes(key_size, value_size),
        };
    let want = log_bytes
        .saturating_add(dir_bytes)
        .saturating_add(records.saturating_mul(per_record))
        .saturating_mul(5)
        / 4;
    want.max(16 << 20)
}

impl PlushBenchStore {
    /// Creates a fresh store in `o.dir`, partitioned by `partition` (`plush` is by hash,
    /// `plush-range` by range, with ordered scans).
    pub fn open(o: &StoreOptions, partition: Partition) -> Result<Self> {
        create_dir(&o.dir)?;
        let fixed8 = o.key_size == 8 && o.value_size == 8 && o.value_size_fixed;
        let layout = if fixed8 {
            PlushLayout::Fixed8
        } else {
            PlushLayout::Variable
        };
        let dram_bits = match o.dram_budget {
            Some(b) => tierbase::hash::dram_bits_for_budget(b)?,
            None => dram_bits_for_records(o.records),
        };
        let mut opts = PlushOptions::default()
            .layout(layout)
            .partition(partition)
            .dram_bits(dram_bits)
            .region(RegionOptions {
                emulate: o.emulate.clone(),
                flush: o.flush,
                // Fault the region in when it grows, not during measured operations.
                prefault: true,
                ..RegionOptions::default()
            });
        opts.recovery_threads = o.threads.max(1);
        let path = o.dir.join("plush.tb");
        let size = if o.presize {
            initial_size_for(&opts, o.records, o.key_size, o.value_size)
        } else {
            0
        };
        let region = PmemRegion::create(&path, size, &opts.region)?;
        let mapping = region.mapping();
        let store = PlushStore::create_in(region, &opts)?;
        let medium = match mapping {
            MappingKind::DaxSync => "DAX",
            _ => file_medium(&o.dir),
        };
        let s = store.stats();
        let name = match partition {
            Partition::Hash => "plush",
            Partition::Range => "plush-range",
        };
        let mut info = StoreInfo::new(name, medium, s.durability.name());
        info.capabilities = Capabilities {
            ordered_scan: partition == Partition::Range,
            atomic_update: false,
        };
        info.notes.push(format!(
            "{} records, {}-partitioned; {}",
            s.layout, partition, s.guarantee
        ));
        info.notes.push(format!(
            "DRAM {} ({} entries, 2^{dram_bits}, fixed by configuration{}); up to {} levels",
            crate::units::format_bytes(s.dram_bytes),
            s.dram_entries,
            if o.dram_budget.is_some() {
                ": from --dram"
            } else {
                ": from the expected records"
            },
            s.max_levels
        ));
        info.flush = Some(s.flush.to_string());
        info.notes.push(format!(
            "flush instruction {}; key search {}",
            s.flush, s.key_search
        ));
        info.notes.push(
            "PiBench semantics: insert = blind upsert; update = get, then upsert; delete = \
             get, then remove"
                .into(),
        );
        if o.durability != Durability::Immediate {
            info.notes.push(format!(
                "durability level immediate (plush has no deferred levels; {} not applied)",
                o.durability.name()
            ));
        }
        note_emulation(
            &mut info,
            o.emulate.as_ref(),
            "region reads and persists charged to the profile",
        );
        Ok(PlushBenchStore { store, info })
    }

    /// The store itself.
    pub fn inner(&self) -> &PlushStore {
        &self.store
    }
}

impl Store for PlushBenchStore {
    fn info(&self) -> StoreInfo {
        self.info.clone()
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(PlushBenchClient {
            store: &self.store,
            ordered: self.info.capabilities.ordered_scan,
            records: Vec::new(),
            scratch: Vec::new(),
        }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.store.close()?;
        Ok(())
    }
}

struct PlushBenchClient<'a> {
    store: &'a PlushStore,
    /// The store is range-partitioned (scans in key order).
    ordered: bool,
    /// A scan's records (kept to reuse the allocation).
    records: Vec<(Vec<u8>, Vec<u8>)>,
    /// The value an update's or delete's lookup reads (kept to reuse the allocation).
    scratch: Vec<u8>,
}

impl Client for PlushBenchClient<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store.upsert(key, value)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.store.get_into(key, out)?)
    }

    fn get_many(&mut self, keys: &[&[u8]], outs: &mut [Vec<u8>], found: &mut [bool]) -> Result<()> {
        Ok(self.store.get_many(keys, outs, found)?)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        if !self.store.get_into(key, &mut self.scratch)? {
            return Ok(false);
        }
        self.store.upsert(key, value)?;
        Ok(true)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        if !self.store.get_into(key, &mut self.scratch)? {
            return Ok(false);
        }
        self.store.remove(key)?;
        Ok(true)
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        if !self.ordered {
            return Err(BenchError::unsupported(
                "plush",
                "ordered scans (partitioned by hash; plush-range scans in key order)",
            ));
        }
        if count == 0 {
            return Ok(0);
        }
        self.records.clear();
        self.store.range(start, None, count, &mut self.records)?;
        for (k, v) in &self.records {
            visit(k, v);
        }
        Ok(self.records.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dram_level_sizing() {
        assert_eq!(dram_bits_for_records(0), MIN_DRAM_BITS);
        assert_eq!(dram_bits_for_records(1_000), MIN_DRAM_BITS);
        assert_eq!(dram_bits_for_records(2048 << 8), 8);
        assert_eq!(dram_bits_for_records((2048 << 8) + 1), 9);
        // 100 M records: 2^16 entries, as in the thesis.
        assert_eq!(dram_bits_for_records(100_000_000), 16);
        assert_eq!(dram_bits_for_records(u64::MAX), MAX_DRAM_BITS);
    }

    #[test]
    fn dram_budget_bounds_the_stores_dram() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        // Budgets above the store's fixed part (`tierbase::hash::DRAM_BYTES_FIXED`, the payload's
        // chunk table and the logs' bookkeeping, about 1 MiB); one below the smallest store
        // (2^4 entries) is refused.
        for budget in [2u64 << 20, 8 << 20] {
            let mut o = StoreOptions::new(dir.path().join(budget.to_string()));
            o.dram_budget = Some(budget);
            let s = PlushBenchStore::open(&o, Partition::Hash).unwrap();
            let dram = s.inner().stats().dram_bytes;
            assert!(dram <= budget && dram > budget / 2, "{dram} of {budget}");
            Box::new(s).close().unwrap();
        }
    }

    #[test]
    fn layout_follows_the_record_shape() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
        let mut o = StoreOptions::new(dir.path().join("f"));
        o.key_size = 8;
        o.value_size = 8;
        o.value_size_fixed = true;
        let s = PlushBenchStore::open(&o, Partition::Hash).unwrap();
        assert_eq!(s.inner().stats().layout, PlushLayout::Fixed8);
        assert_eq!(s.inner().stats().dram_entries, 1 << MIN_DRAM_BITS);
        let mut c = s.client().unwrap();
        c.put(&7u64.to_le_bytes(), &9u64.to_le_bytes()).unwrap();
        let mut out = Vec::new();
        assert!(c.get(&7u64.to_le_bytes(), &mut out).unwrap());
        assert_eq!(out, 9u64.to_le_bytes());
        drop(c);
        Box::new(s).close().unwrap();
        o.dir = dir.path().join("v");
        o.value_size_fixed = false;
        let s = PlushBenchStore::open(&o, Partition::Hash).unwrap();
        assert_eq!(s.inner().stats().layout, PlushLayout::Variable);
        Box::new(s).close().unwrap();
    }
}
