//! `btree`: tierbase's B+-tree store (buffer pool over a page file, write-ahead log with
//! group commit) behind the adapter traits.
//!
//! Owns: mapping [`StoreOptions`] to [`BTreeOptions`] (DRAM budget, durability level,
//! emulated block device) and the store's truthful [`StoreInfo`]. Must not touch: the store's
//! internals.
//!
//! Three designs of the three-tier paper share it ([`Tiers`]): `btree` (DRAM over the page
//! file: the SSD buffer manager, or main memory when the budget holds the data),
//! `btree-3tier` (DRAM over an NVM tier over the page file, admission set), `btree-nvm`
//! (DRAM over NVM holding every page, the basic NVM buffer manager) and `btree-nvm-direct`
//! (the pages in NVM, changed in place under an undo log; no DRAM pool). The NVM tier is a region
//! file in `StoreOptions::nvm_dir` (default the run's directory), flushed with
//! `StoreOptions::flush`.
//!
//! The store is the directory `btree` in the run's directory. Its DRAM budget is
//! `StoreOptions::dram_budget` (default 64 MiB); `update` and `delete` are atomic (the store
//! serialises writers). Writes are durable per the level: `immediate` returns after the log's
//! group commit (`fdatasync`; on tmpfs that reaches memory only).

use std::ops::Bound;

use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::buffer::nvm::Admission;
use tierbase::device::{BlockOptions, Durability, RegionOptions};
use tierbase::store::Store as _;

use super::common::{create_dir, found_into, note_emulation, synced_durability};
use super::{Capabilities, Client, Store, StoreInfo, StoreOptions, file_medium};
use crate::error::Result;

/// Default DRAM budget when the plan names none.
pub const DEFAULT_DRAM: u64 = 64 << 20;

/// Which tiers the store has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiers {
    /// DRAM buffer pool over the page file.
    DramSsd,
    /// DRAM over an NVM tier (admission set) over the page file.
    ThreeTier,
    /// DRAM over an NVM tier that admits every page.
    DramNvm,
    /// The pages in NVM, searched and changed in place (no DRAM pool, no redo log).
    NvmDirect,
}

impl Tiers {
    /// The store's name in the benchmark's list.
    pub fn name(self) -> &'static str {
        match self {
            Tiers::DramSsd => "btree",
            Tiers::ThreeTier => "btree-3tier",
            Tiers::DramNvm => "btree-nvm",
            Tiers::NvmDirect => "btree-nvm-direct",
        }
    }

    /// The design a store name stands for.
    pub fn from_name(name: &str) -> Option<Tiers> {
        [
            Tiers::DramSsd,
            Tiers::ThreeTier,
            Tiers::DramNvm,
            Tiers::NvmDirect,
        ]
        .into_iter()
        .find(|t| t.name() == name)
    }
}

/// NVM budget of `btree-nvm` when the plan names none: room for the records in pages two
/// thirds full, with a floor.
fn nvm_for_records(o: &StoreOptions) -> u64 {
    let per = (o.key_size + o.value_size + 16) as u64;
    (o.records.saturating_mul(per) / 2 * 3).max(64 << 20)
}

/// The store's options for `tiers` under `o` (DRAM and NVM budgets, durability, emulation,
/// where the NVM files go; region files an earlier run left there are removed). Creates the
/// run's directory.
pub fn options(o: &StoreOptions, tiers: Tiers) -> Result<BTreeOptions> {
    create_dir(&o.dir)?;
    let dram = o.dram_budget.unwrap_or(DEFAULT_DRAM);
    let mut opts = BTreeOptions::default()
        .dram_bytes(dram)
        .durability(o.durability);
    if let Some(ps) = o.page_size {
        opts = opts.page_size(ps);
    }
    opts.optimistic_reads = o.optimistic_reads;
    if let Some(on) = o.swizzle {
        opts.swizzle = on;
    }
    opts.block = BlockOptions {
        emulate: o.emulate.clone(),
        ..BlockOptions::default()
    };
    opts.write_back_batch = o.write_back_batch.unwrap_or(0);
    let name = tiers.name();
    if tiers != Tiers::DramSsd {
        opts.nvm_bytes = o.nvm_budget.unwrap_or(match tiers {
            Tiers::DramNvm => nvm_for_records(o),
            // The undo log takes an eighth of the region, up to 16 MiB.
            Tiers::NvmDirect => nvm_for_records(o) * 3 / 2 + (16 << 20),
            _ => 4 * dram,
        });
        if opts.nvm_bytes == 0 {
            // The engine opens such a store without an NVM tier: its numbers would be the SSD
            // design's under this design's name.
            return Err(crate::BenchError::invalid(format!(
                "{name} needs an NVM tier, and --nvm 0 gives it none (for DRAM over the page \
                 file alone, run --store btree)"
            )));
        }
        opts.nvm_direct = tiers == Tiers::NvmDirect;
        if tiers == Tiers::DramNvm {
            opts.nvm_admission = Some(Admission::All);
        }
        if let Some(d) = &o.nvm_dir {
            create_dir(d)?;
            let file = d.join(format!("{name}-nvm.tb"));
            // Region files left by an earlier run (the store's directory is new).
            let _ = std::fs::remove_file(&file);
            for i in 0..2 {
                let _ = std::fs::remove_file(d.join(format!("{name}-nvm.tb.wal-{i}")));
            }
            opts.nvm_path = Some(file);
        }
        opts.nvm_log = !o.wal_files;
        opts.nvm_lines = tiers == Tiers::ThreeTier && !o.nvm_pages;
        if o.mini_page_percent.is_some() {
            opts.mini_page_percent = o.mini_page_percent;
        }
        opts.nvm_region = RegionOptions {
            flush: o.flush,
            prefault: true,
            emulate: o.nvm_emulate.clone(),
            ..RegionOptions::default()
        };
    }
    Ok(opts)
}

/// The B+-tree store under benchmark.
#[derive(Debug)]
pub struct BTreeBenchStore {
    store: BTreeStore,
    info: StoreInfo,
}

impl BTreeBenchStore {
    /// Creates a fresh store in `o.dir`.
    pub fn open(o: &StoreOptions, tiers: Tiers) -> Result<Self> {
        if tiers == Tiers::NvmDirect
            && let Some(p) = &o.emulate
        {
            // It would label numbers no emulated device touched.
            return Err(crate::BenchError::invalid(format!(
                "--emulate {} emulates the page file's block device, and btree-nvm-direct keeps \
                 its pages and log in NVM (no block I/O): use --nvm-emulate for its NVM",
                p.name
            )));
        }
        let opts = options(o, tiers)?;
        let dram = opts.dram_bytes;
        let name = tiers.name();
        let store = BTreeStore::create(o.dir.join("btree"), &opts)?;
        if tiers != Tiers::DramSsd
            && store.nvm_region().is_none()
            && store.nvm_direct_region().is_none()
        {
            return Err(crate::BenchError::invalid(format!(
                "{name} opened without an NVM tier (--nvm {}): its figures would not be {name}'s",
                opts.nvm_bytes
            )));
        }
        let medium = file_medium(&o.dir);
        let d = store.describe();
        let wal_on_nvm = tiers != Tiers::DramSsd && !o.wal_files;
        let durability = match o.durability {
            // Whatever the level: a batch returns once its lines are persisted in place.
            _ if tiers == Tiers::NvmDirect => synced_durability(
                "in place, undo log, persisted per commit",
                file_medium(o.nvm_dir.as_deref().unwrap_or(&o.dir)),
            ),
            Durability::Immediate if wal_on_nvm => synced_durability(
                "wal on NVM, persisted per commit",
                file_medium(o.nvm_dir.as_deref().unwrap_or(&o.dir)),
            ),
            Durability::Immediate => synced_durability("wal+fdatasync", medium),
            Durability::Eventual(_) => "wal, background flush".into(),
            Durability::None => "wal, flushed at close".into(),
        };
        // The NVM tier's medium is part of the store's (tmpfs standing in for persistent
        // memory here says so).
        let medium = match (&tiers, &o.nvm_dir) {
            (Tiers::DramSsd, _) => medium.to_string(),
            (Tiers::NvmDirect, Some(d)) => format!("NVM-direct pages on {}", file_medium(d)),
            (Tiers::NvmDirect, None) => format!("NVM-direct pages on {medium}"),
            (_, Some(d)) => format!("{medium} + NVM tier on {}", file_medium(d)),
            (_, None) => format!("{medium} + NVM tier on {medium}"),
        };
        let mut info = StoreInfo::new(name, medium, durability);
        // The NVM tier's and NVM log's persists; a page file is written with `pwrite`.
        info.flush = store
            .nvm_region()
            .map(|r| r.flush_instruction())
            .or_else(|| store.nvm_direct_region().map(|r| r.flush_instruction()))
            .map(|f| f.name().to_string());
        info.capabilities = Capabilities {
            ordered_scan: true,
            atomic_update: true,
        };
        info.notes.push(if tiers == Tiers::NvmDirect {
            format!(
                "{}; no DRAM pool (pages in NVM), 16 KiB pages; every batch persisted in place",
                d.medium
            )
        } else {
            format!(
                "{}; DRAM budget {} MiB, 16 KiB pages; level {}",
                d.medium,
                dram >> 20,
                d.commit
            )
        });
        let n_w = o
            .write_back_batch
            .unwrap_or_else(|| o.emulate.as_ref().map_or(1, |p| p.k_w as usize));
        info.notes.push(if n_w > 1 {
            format!("ACE write-back: {n_w} dirty pages per dirty victim")
        } else {
            "plain Clock write-back (one page per dirty victim)".into()
        });
        note_emulation(
            &mut info,
            o.emulate.as_ref(),
            if wal_on_nvm {
                "page-file I/O charged to the profile (the log is on NVM, not emulated); pages \
                 the DRAM and NVM tiers hold never reach it"
            } else {
                "page and log I/O charged to the profile"
            },
        );
        if let Some(p) = o.nvm_emulate.as_ref().filter(|_| tiers != Tiers::DramSsd) {
            let both = match info.emulated.take() {
                Some(block) => format!("{block}; NVM tier {}", p.name),
                None => format!("NVM tier {}", p.name),
            };
            info.emulated = Some(both);
            info.notes.push(if tiers == Tiers::NvmDirect {
                format!(
                    "NVM emulates {}: persists charged to the profile, and a point read one \
                     emulated read per run of leaf lines it touches; other in-place accesses \
                     (inner pages, scans, writers' reads and changes) are not charged",
                    p.name
                )
            } else {
                format!(
                    "NVM tier emulates {}: its loads and persists charged to the profile",
                    p.name
                )
            });
        }
        Ok(BTreeBenchStore { store, info })
    }

    /// The store itself.
    pub fn inner(&self) -> &BTreeStore {
        &self.store
    }
}

impl Store for BTreeBenchStore {
    fn info(&self) -> StoreInfo {
        let mut info = self.info.clone();
        info.notes.push(
            self.store
                .stats()
                .into_iter()
                .filter(|(k, _)| {
                    matches!(
                        k.as_str(),
                        "dram_hits"
                            | "dram_misses"
                            | "evictions"
                            | "wal_fsyncs"
                            | "height"
                            | "nvm_hits"
                            | "nvm_admissions"
                            | "nvm_spills"
                            | "nvm_lines_loaded"
                            | "nvm_line_loads"
                            | "mini_loads"
                            | "mini_promotions"
                            | "optimistic_descents"
                            | "optimistic_restarts"
                            | "nvm_slot_lines_written"
                            | "nvm_line_write_backs"
                            | "nvm_hottest_slot_line_writes"
                            | "nvm_hottest_directory_line_writes"
                            | "wal_nvm_persists"
                            | "wal_bytes"
                            | "ssd_page_reads"
                            | "ssd_page_writes"
                            | "nvm_direct_undo_lines"
                            | "nvm_direct_lines_persisted"
                            | "nvm_direct_charged_reads"
                    )
                })
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
        info
    }

    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(BTreeBenchClient { store: &self.store }))
    }

    fn close(self: Box<Self>) -> Result<()> {
        self.store.close()?;
        Ok(())
    }
}

struct BTreeBenchClient<'a> {
    store: &'a BTreeStore,
}

impl Client for BTreeBenchClient<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.store.put(key, value)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        Ok(found_into(self.store.get(key)?, out))
    }

    fn get_many(&mut self, keys: &[&[u8]], outs: &mut [Vec<u8>], found: &mut [bool]) -> Result<()> {
        let values = self.store.get_many(keys)?;
        for ((value, out), f) in values
            .into_iter()
            .zip(outs.iter_mut())
            .zip(found.iter_mut())
        {
            *f = found_into(value, out);
        }
        Ok(())
    }

    fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.store.update(key, value)?)
    }

    fn delete(&mut self, key: &[u8]) -> Result<bool> {
        Ok(self.store.delete(key)?)
    }

    fn scan(
        &mut self,
        start: &[u8],
        count: usize,
        visit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize> {
        let mut n = 0;
        if count == 0 {
            return Ok(0);
        }
        self.store.range_expecting(
            Bound::Included(start),
            Bound::Unbounded,
            false,
            count,
            |k, v| {
                visit(k, v);
                n += 1;
                n < count
            },
        )?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::common::tests::contract_suite_on;

    #[test]
    fn contract_suite_passes_for_every_design() {
        for tiers in [Tiers::DramSsd, Tiers::ThreeTier, Tiers::DramNvm] {
            let dir = tempfile::tempdir().unwrap();
            let mut o = StoreOptions::new(dir.path());
            o.dram_budget = Some(1 << 20);
            o.nvm_budget = Some(2 << 20);
            contract_suite_on(&o, |o| BTreeBenchStore::open(o, tiers));
        }
    }
}
