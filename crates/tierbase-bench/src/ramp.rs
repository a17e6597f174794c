//! The restart ramp of the B+-tree designs (the three-tier paper's Fig. 17): how long a store
//! takes to reopen, and how fast its read rate climbs back to the warm rate afterwards.
//!
//! Owns: loading a store with its own uniform keys, measuring the warm read rate, closing it,
//! timing the reopen and sampling the read rate per interval from the moment the open returns.
//! Must not touch: the store's internals (it goes through `BTreeStore`'s public API and the
//! adapter's option mapping, so each design is configured exactly as `bench ycsb` configures
//! it).

use std::time::{Duration, Instant};

use serde::Serialize;
use tierbase::btree::BTreeStore;

use crate::adapter::StoreOptions;
use crate::adapter::{Tiers, btree_options as options};
use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// Key length of the ramp's records (`ramp` and a 12-digit number).
pub const RAMP_KEY_SIZE: usize = 16;

/// What to measure.
#[derive(Clone, Debug)]
pub struct RampPlan {
    /// The design: `btree`, `btree-3tier`, `btree-nvm` or `btree-nvm-direct`.
    pub store: String,
    /// Records loaded.
    pub records: u64,
    /// Value size in bytes.
    pub value_size: usize,
    /// How long to read after the reopen (and to measure the warm rate before the close).
    pub duration: Duration,
    /// Length of one sample.
    pub interval: Duration,
    /// Seed of the uniform key choice.
    pub seed: u64,
}

/// One sample of the read rate after the reopen.
#[derive(Clone, Debug, Serialize)]
pub struct RampSample {
    /// End of the interval, in milliseconds since the reopen returned.
    pub at_ms: f64,
    /// Reads per second in the interval.
    pub ops_per_sec: f64,
}

/// The measurement.
#[derive(Clone, Debug, Serialize)]
pub struct RampReport {
    /// The design.
    pub store: String,
    /// Where the store's files were, as the store describes its media.
    pub medium: String,
    /// The cache-line flush instruction of the NVM tier's persists (`None`: no NVM tier).
    pub flush: Option<String>,
    /// The device profile the store imitated (`None`: nothing emulated).
    pub emulated: Option<String>,
    /// Records in the store.
    pub records: u64,
    /// Reads per second before the close (the second half of the warm run).
    pub warm_ops_per_sec: f64,
    /// Wall time of the reopen, in milliseconds.
    pub restart_ms: f64,
    /// The NVM directory scan inside the reopen, in milliseconds (0 without an NVM tier).
    pub nvm_scan_ms: f64,
    /// Read rate per interval after the reopen.
    pub samples: Vec<RampSample>,
    /// Milliseconds after the reopen until an interval reached 90 % of the warm rate (`None`:
    /// not within the run).
    pub ms_to_90_percent: Option<f64>,
}

fn key(i: u64) -> [u8; RAMP_KEY_SIZE] {
    let mut k = [0u8; RAMP_KEY_SIZE];
    k[..4].copy_from_slice(b"ramp");
    let digits = format!("{i:012}");
    k[4..].copy_from_slice(digits.as_bytes());
    k
}

/// Reads uniform random keys for `duration`; returns, per `interval`, (time since the start
/// at its end, reads in it). Every key must be found.
fn read_for(
    store: &BTreeStore,
    records: u64,
    rng: &mut Rng,
    duration: Duration,
    interval: Duration,
) -> Result<Vec<(Duration, u64)>> {
    let start = Instant::now();
    let mut next = interval;
    let mut reads = 0u64;
    let mut samples = Vec::new();
    loop {
        // Check the clock every 64 reads: a read takes well under a millisecond.
        for _ in 0..64 {
            let i = rng.below(records);
            if store.get(&key(i))?.is_none() {
                return Err(BenchError::invalid(format!(
                    "restart ramp: record {i} is missing"
                )));
            }
            reads += 1;
        }
        let elapsed = start.elapsed();
        if elapsed >= next {
            samples.push((elapsed, reads));
            reads = 0;
            next += interval;
            if elapsed >= duration {
                return Ok(samples);
            }
        }
    }
}

/// Loads `plan.records` records into a fresh store of design `plan.store` in `o.dir`
/// (configured from `o` as `bench ycsb` would), reads for `plan.duration` to measure the warm
/// rate, closes the store, reopens it and samples the read rate per `plan.interval` for
/// `plan.duration`. Removes nothing (the caller owns `o.dir`).
pub fn ramp(o: &StoreOptions, plan: &RampPlan, log: &mut dyn FnMut(&str)) -> Result<RampReport> {
    let tiers = Tiers::from_name(&plan.store).ok_or_else(|| {
        BenchError::invalid(format!(
            "restart ramp: unknown store {:?} (btree, btree-3tier, btree-nvm or btree-nvm-direct)",
            plan.store
        ))
    })?;
    if plan.records == 0 || plan.interval.is_zero() || plan.duration < plan.interval {
        return Err(BenchError::invalid(
            "restart ramp: needs at least 1 record and a duration of at least one interval",
        ));
    }
    let mut o = o.clone();
    o.records = plan.records;
    o.key_size = RAMP_KEY_SIZE;
    o.value_size = plan.value_size;
    let mut opts = options(&o, tiers)?;
    let path = o.dir.join("btree");
    let store = BTreeStore::create(&path, &opts)?;
    log(&format!(
        "loading {} records into {}",
        plan.records,
        path.display()
    ));
    let value = vec![0x5au8; plan.value_size];
    let mut i = 0;
    while i < plan.records {
        // Small batches: a batch may change at most half the pool (4 pages per op).
        let end = (i + 4).min(plan.records);
        let keys: Vec<_> = (i..end).map(key).collect();
        let ops: Vec<(&[u8], Option<&[u8]>)> =
            keys.iter().map(|k| (&k[..], Some(&value[..]))).collect();
        store.write_batch(&ops)?;
        i = end;
    }
    let mut rng = Rng::from_seed(plan.seed);
    log("measuring the warm read rate");
    let warm = read_for(&store, plan.records, &mut rng, plan.duration, plan.interval)?;
    // The second half of the samples: from the end of the first half to the end.
    let half = warm.len() / 2;
    let reads: u64 = warm[half..].iter().map(|&(_, n)| n).sum();
    let from = half.checked_sub(1).map_or(Duration::ZERO, |i| warm[i].0);
    let to = warm.last().map_or(Duration::ZERO, |&(t, _)| t);
    let warm_ops_per_sec = reads as f64 / (to - from).as_secs_f64().max(1e-9);
    store.close()?;
    log("reopening");
    // The reopen maps the regions as a user's open does: without touching every page first
    // (the benchmark's pre-faulting of a 512 MiB tier alone takes ~100 ms).
    opts.nvm_region.prefault = false;
    let opened = Instant::now();
    let store = BTreeStore::open(&path, &opts)?;
    let restart_ms = opened.elapsed().as_secs_f64() * 1e3;
    let nvm_scan_ms = store.restart_report().nvm_scan_micros as f64 / 1e3;
    let medium = tierbase::store::Store::describe(&store).medium;
    let flush = store
        .nvm_region()
        .map(|r| r.flush_instruction())
        .or_else(|| store.nvm_direct_region().map(|r| r.flush_instruction()))
        .map(|f| f.name().to_string());
    let emulated = [&o.emulate, &o.nvm_emulate]
        .into_iter()
        .flatten()
        .map(|p| p.name.clone())
        .reduce(|a, b| format!("{a} + {b}"));
    let after = read_for(&store, plan.records, &mut rng, plan.duration, plan.interval)?;
    let starts = std::iter::once(Duration::ZERO).chain(after.iter().map(|&(t, _)| t));
    let samples: Vec<RampSample> = after
        .iter()
        .zip(starts)
        .map(|(&(t, n), from)| RampSample {
            at_ms: t.as_secs_f64() * 1e3,
            ops_per_sec: n as f64 / (t - from).as_secs_f64().max(1e-9),
        })
        .collect();
    store.close()?;
    let ms_to_90_percent = samples
        .iter()
        .find(|s| s.ops_per_sec >= 0.9 * warm_ops_per_sec)
        .map(|s| s.at_ms);
    Ok(RampReport {
        store: plan.store.clone(),
        medium,
        flush,
        emulated,
        records: plan.records,
        warm_ops_per_sec,
        restart_ms,
        nvm_scan_ms,
        samples,
        ms_to_90_percent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small ramp of each design: every record is found after the reopen (a missing one is
    /// an error), the samples cover the run in order, and the NVM designs report their scan.
    #[test]
    fn each_design_reopens_with_every_record_and_samples_in_order() {
        for store in ["btree", "btree-3tier", "btree-nvm", "btree-nvm-direct"] {
            let dir = tempfile::tempdir().unwrap();
            let mut o = StoreOptions::new(dir.path().join("run"));
            o.durability = tierbase::device::Durability::None;
            o.dram_budget = Some(1 << 20);
            o.nvm_budget = Some(8 << 20);
            let plan = RampPlan {
                store: store.into(),
                records: 5_000,
                value_size: 100,
                duration: Duration::from_millis(40),
                interval: Duration::from_millis(10),
                seed: 7,
            };
            let r = ramp(&o, &plan, &mut |_| {}).unwrap();
            // The samples cover the run whatever the machine's stalls: a stall merges
            // intervals (CI once saw three samples at 10, 20 and 45 ms), so count the time
            // covered, not the samples.
            let (first, last) = (r.samples.first().unwrap(), r.samples.last().unwrap());
            assert!(first.at_ms >= 10.0 && last.at_ms >= 40.0, "{store}: {r:?}");
            assert!(r.samples.windows(2).all(|w| w[0].at_ms < w[1].at_ms));
            assert!(r.warm_ops_per_sec > 0.0 && r.restart_ms > 0.0);
            assert_eq!(
                r.medium.contains("NVM tier"),
                store == "btree-3tier" || store == "btree-nvm",
                "{store}: {r:?}"
            );
            assert_eq!(
                r.medium.contains("NVM-direct pages"),
                store == "btree-nvm-direct",
                "{store}: {r:?}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let o = StoreOptions::new(dir.path().join("run"));
        let mut plan = RampPlan {
            store: "kv".into(),
            records: 10,
            value_size: 10,
            duration: Duration::from_millis(10),
            interval: Duration::from_millis(10),
            seed: 1,
        };
        assert!(
            ramp(&o, &plan, &mut |_| {}).is_err(),
            "not a B+-tree design"
        );
        plan.store = "btree".into();
        plan.records = 0;
        assert!(ramp(&o, &plan, &mut |_| {}).is_err(), "no records");
    }
}
