//! `kv` and `kv-var`: tierbase's hybrid persistent KV store (the Viper design) behind the
//! adapter traits.
//!
//! Owns: mapping [`StoreOptions`] to [`KvOptions`] (layout, growth step, emulation) and the
//! store's truthful [`StoreInfo`]. Must not touch: the store's internals.
//!
//! `kv` uses fixed-size records when the workload's values all have one size (Viper's default
//! configuration) and variable-size records otherwise; `kv-var` always uses variable-size
//! records. The store file is `kv.tb` in the run's directory; its durability mode is whatever
//! the medium gives (process-crash on tmpfs, msync on a disk file, dax on DAX).

use tierbase::device::{MappingKind, RegionOptions};
use tierbase::kv::{self, KvOptions, KvStore, RecordLayout};

use super::common::{create_dir, note_emulation};
use super::{Capabilities, Client, Store, StoreInfo, StoreOptions, file_medium};
use crate::error::{BenchError, Result};

/// The KV store under benchmark.
#[derive(Debug)]
pub struct KvBenchStore {
    store: KvStore,
    info: StoreInfo,
}

/// Initial size: the records the run will hold, plus a quarter for partly filled blocks, at
/// least 16 MiB — the store is pre-sized as Viper's benchmark sizes its pool, so measured
/// operations do not pay for growth (`--grow-from-empty` measures that instead).
fn initial_size_for(records: u64, record_bytes: u64) -> u64 {
    let want = records.saturating_mul(record_bytes).saturating_mul(5) / 4;
    want.max(16 << 20)
}

impl KvBenchStore {
    /// Creates a fresh store in `o.dir`. `variable` forces variable-size records.
    pub fn open(o: &StoreOptions, variable: bool) -> Result<Self> {
        let name = if variable { "kv-var" } else { "kv" };
        create_dir(&o.dir)?;
        let fixed = !variable && o.value_size_fixed;
        let (layout, record_bytes) = if fixed {
            let (k, v) = (
                u32::try_from(o.key_size).map_err(|_| BenchError::invalid("key size too large"))?,
                u32::try_from(o.value_size)
                    .map_err(|_| BenchError::invalid("value size too large"))?,
            );
            (
                RecordLayout::Fixed {
                    key_size: k,
                    value_size: v,
                },
                kv::layout::slot_size(k, v),
            )
        } else {
            (
                RecordLayout::Variable,
                kv::layout::var::inline_size(o.key_size, o.value_size),
            )
        };
        // Pre-sized for the records (as Viper's benchmark sizes its pool), growing beyond.
        let opts = KvOptions::default()
            .layout(layout)
            .initial_size(if o.presize {
                initial_size_for(o.records, record_bytes)
            } else {
                0
            })
            .recovery_threads(o.threads.max(1))
            .durability(o.durability)
            .region(RegionOptions {
                emulate: o.emulate.clone(),
                flush: o.flush,
                commit: o.durability,
                // Fault the region in when it grows (the grower does it, in short steps), not
                // during measured operations.
                prefault: true,
                ..RegionOptions::default()
            });
        let store = KvStore::create(o.dir.join("kv.tb"), &opts)?;
        let medium = match store.region().mapping() {
            MappingKind::DaxSync => "DAX",
            _ => file_medium(&o.dir),
        };
        let mut info = StoreInfo::new(name, medium, store.durability().name());
        info.flush = Some(store.region().flush_instruction().name().to_string());
        info.capabilities = Capabilities {
            ordered_scan: false,
            atomic_update: true,
        };
        info.notes.push(format!(
            "{}; {}",
            store.layout(),
            store.durability().guarantee()
        ));
        info.notes
            .push(format!("durability level {}", store.stats().commit));
        info.notes.push(format!(
            "flush instruction {}; {} pages per block",
            store.region().flush_instruction(),
            store.pages_per_block()
        ));
        note_emulation(
            &mut info,
            o.emulate.as_ref(),
            "region reads and persists charged to the profile",
        );
        Ok(KvBenchStore { store, info })
    }

    /// The store itself (for store-specific measurements such as recovery).
    pub fn inner(&self) -> &KvStore {
        &self.store
    }
}

impl Store for KvBenchStore {
    fn info(&self) -> StoreInfo {
        self.info.clone()
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(KvBenchClient {
            client: self.store.client(),
            name: self.info.name.clone(),
        }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.store.close()?;
        Ok(())
    }
}

struct KvBenchClient {
    client: kv::Client,
    name: String,
}

impl Client for KvBenchClient {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.client.put(key, value)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(self.client.get_into(key, out)?)
    }

    fn get_many(&mut self, keys: &[&[u8]], outs: &mut [Vec<u8>], found: &mut [bool]) -> Result<()> {
        Ok(self.client.get_many(keys, outs, found)?)
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.client.update(key, value)?)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.client.delete(key)?)
    }

    fn scan(
        &mut self,
        _start: &[u8],
        _count: usize,
        _visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        Err(BenchError::unsupported(
            &self.name,
            "ordered scans (it has a hash index; use memory-btree or rocksdb for workload E)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{BenchPlan, run_plan};
    use crate::progress::SilentProgress;
    use crate::workload::CoreWorkload;

    #[test]
    fn contract_suite_passes_with_variable_records() {
        // The suite uses keys and values of many sizes, which only variable records take.
        for variable in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let o = StoreOptions::new(dir.path());
            let store = KvBenchStore::open(&o, variable).unwrap();
            assert_eq!(store.inner().layout(), RecordLayout::Variable);
            crate::contract::run_contract_suite(&store).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn fixed_records_run_verified_ycsb_workloads() {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = BenchPlan::new("kv");
        plan.workloads = vec![
            CoreWorkload::A.spec(2_000, 5_000),
            CoreWorkload::F.spec(2_000, 5_000),
            CoreWorkload::D.spec(2_000, 5_000),
        ];
        plan.threads = vec![2];
        plan.dir = Some(dir.path().to_path_buf());
        plan.max_time = None;
        let runs = run_plan(&plan, &SilentProgress).unwrap();
        assert_eq!(runs.len(), 3);
        for r in &runs {
            assert_eq!(r.verify_failures, 0, "{}", r.workload);
            assert!(
                r.store_notes.iter().any(|n| n.contains("fixed")),
                "{:?}",
                r.store_notes
            );
            assert!(r.throughput > 0.0);
        }
    }
}
