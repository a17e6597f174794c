//! ACE (Papon & Athanassoulis, ICDE'23): asymmetry/concurrency-aware write-back and prefetch
//! around any replacement policy, in a page cache over a page device, and the trace-driven
//! mode that replays page accesses through it.
//!
//! Owns: the page cache's miss path (victim, write-back batch, eviction, reads and
//! prefetches), the prefetchers, the page devices a trace runs against ([`VirtualPages`]: a
//! device model in virtual time under one of three [`CostModel`]s — the emulator's PIO
//! model, the ACE authors' simulator, or α read as a throughput ratio; [`BlockPages`]: a
//! real page file through [`BlockDevice`]) and the cache's counters. Must not touch:
//! replacement decisions (those are [`super::policy`]'s) or page contents (a trace has none:
//! pages carry their id only).
//!
//! ACE never changes which page the policy evicts next. When that victim is dirty it writes
//! the first `n_w` dirty pages of the policy's eviction order in one concurrent batch (they
//! stay cached, now clean), then evicts the victim — or, with a prefetcher, the first `n_e`
//! pages of the order, reading the missed page and `n_e − 1` prefetched pages in one batch.
//! `n_w = n_e = 1` without a prefetcher is the plain policy.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::policy::ReplacementPolicy;
use crate::device::{AlignedBuf, BlockDevice, DeviceProfile, Direction, Emulator, Io};
use crate::error::{Error, Result};

/// Which pages a miss prefetches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Prefetcher {
    /// None: a miss reads the missed page only.
    None,
    /// The pages after the missed one (`p+1`, `p+2`, …) that are not resident.
    Sequential,
    /// The pages that followed the missed page the last time it was accessed, and so on
    /// along that chain.
    History,
}

impl Prefetcher {
    /// Parses `none`, `sequential` or `history`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Prefetcher::None),
            "sequential" => Ok(Prefetcher::Sequential),
            "history" => Ok(Prefetcher::History),
            _ => Err(Error::InvalidArgument(format!(
                "unknown prefetcher {s:?} (known: none, sequential, history)"
            ))),
        }
    }
}

/// How many pages ACE writes back and evicts at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct AceConfig {
    /// Dirty pages written back together when the victim is dirty (ACE sets it to `k_w`).
    pub n_w: usize,
    /// Pages evicted together when the victim was dirty; the freed frames take the missed
    /// page and `n_e − 1` prefetched pages (only with a prefetcher; 1 ≤ `n_e` ≤ `n_w`).
    pub n_e: usize,
    /// The prefetcher.
    pub prefetcher: Prefetcher,
}

impl AceConfig {
    /// The plain policy: one write, one eviction, no prefetch.
    pub const BASELINE: AceConfig = AceConfig {
        n_w: 1,
        n_e: 1,
        prefetcher: Prefetcher::None,
    };

    /// ACE for a device: `n_w = k_w`, and with a prefetcher `n_e = n_w`.
    pub fn for_device(profile: &DeviceProfile, prefetcher: Prefetcher) -> Self {
        let n_w = profile.k_w.max(1) as usize;
        AceConfig {
            n_w,
            n_e: if prefetcher == Prefetcher::None {
                1
            } else {
                n_w
            },
            prefetcher,
        }
    }

    /// Checks 1 ≤ `n_e` ≤ `n_w` and that `n_e > 1` comes with a prefetcher.
    pub fn validate(&self) -> Result<()> {
        if self.n_w == 0 || self.n_e == 0 || self.n_e > self.n_w {
            return Err(Error::InvalidArgument(format!(
                "ACE needs 1 <= n_e <= n_w (got n_w = {}, n_e = {})",
                self.n_w, self.n_e
            )));
        }
        if self.n_e > 1 && self.prefetcher == Prefetcher::None {
            return Err(Error::InvalidArgument(
                "n_e > 1 evicts pages to make room for prefetches: choose a prefetcher".into(),
            ));
        }
        Ok(())
    }
}

/// A device of pages the cache reads and writes in concurrent batches.
pub trait PageDevice {
    /// Reads `pages` concurrently; returns when all are done.
    fn read(&mut self, pages: &[u64]) -> Result<()>;
    /// Writes `pages` concurrently; returns when all are durable on the device.
    fn write(&mut self, pages: &[u64]) -> Result<()>;
    /// Time spent in I/O so far, in nanoseconds (virtual or wall clock, see the type).
    fn elapsed_ns(&self) -> u64;
    /// What the pages live on, for reports ("virtual-time model of <profile>", a path…).
    fn medium(&self) -> String;
}

/// How a virtual device charges a batch of page I/Os.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CostModel {
    /// The PIO device model the emulator and the profiler share ([`Emulator`]): reads use
    /// `k_r` slots of the read latency t_r, writes `k_w` slots of `α · t_r` — a lone write
    /// costs α reads and a batch of up to `k_w` writes costs the same, which is what α means
    /// in the PIO and ACE papers and what `tierbase profile block` measures (the depth-1
    /// latency ratio). Each direction also has its bandwidth lane.
    #[default]
    Pio,
    /// The ACE authors' simulator (`BU-DiSC/ACE-codebase/Simulation`): every write costs α
    /// reads at any depth; a batch of up to `k_w` writes (`k_r` reads) costs one, larger
    /// batches run in rounds. The same costs as [`CostModel::Pio`] without its bandwidth
    /// lanes.
    AceSim,
    /// α read as the ratio of the *saturated* read and write throughputs (the three-tier
    /// spec's section 6.6 recipe taken alone): a write slot lasts `α · t_r · k_w / k_r`, so a
    /// lone write costs `α · k_w / k_r` reads (0.28 on the PCIe SSD) and ACE's gain is
    /// bounded by the small share of device time the baseline spends writing. Batches run in
    /// rounds as in [`CostModel::AceSim`]. Kept to show how much the reading of α decides
    /// (docs/BENCHMARKS.md, Figure 8).
    Throughput,
}

impl CostModel {
    /// Name as on the command line: `pio`, `ace-sim` or `throughput`.
    pub fn name(self) -> &'static str {
        match self {
            CostModel::Pio => "pio",
            CostModel::AceSim => "ace-sim",
            CostModel::Throughput => "throughput",
        }
    }

    /// Parses [`CostModel::name`].
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim() {
            "pio" => Ok(CostModel::Pio),
            "ace-sim" => Ok(CostModel::AceSim),
            "throughput" => Ok(CostModel::Throughput),
            _ => Err(Error::InvalidArgument(format!(
                "unknown cost model {s:?} (known: pio, ace-sim, throughput)"
            ))),
        }
    }
}

/// A device model in virtual time: no data, no real I/O. A batch is issued at the current
/// virtual instant and completes when its last operation does; how long that is, is the
/// [`CostModel`]'s. The runtime it reports is device time only — what the authors'
/// simulator measures when I/O dominates — and it is exactly reproducible, so ACE's gain on a
/// profile is a property of the profile and the model, not of this machine's load.
#[derive(Debug)]
pub struct VirtualPages {
    emulator: Emulator,
    model: CostModel,
    page_size: u64,
    now_ns: u64,
}

impl VirtualPages {
    /// A virtual device behaving like `profile` in the PIO model, with pages of `page_size`
    /// bytes.
    pub fn new(profile: &DeviceProfile, page_size: u64) -> Result<Self> {
        Self::with_cost_model(profile, page_size, CostModel::Pio)
    }

    /// A virtual device behaving like `profile` under `model`.
    pub fn with_cost_model(
        profile: &DeviceProfile,
        page_size: u64,
        model: CostModel,
    ) -> Result<Self> {
        Ok(VirtualPages {
            emulator: Emulator::new(profile)?,
            model,
            page_size,
            now_ns: 0,
        })
    }

    fn batch(&mut self, dir: Direction, n: usize) {
        let start = self.now_ns;
        self.now_ns = match self.model {
            CostModel::Pio => self
                .emulator
                .schedule_batch_at(dir, self.page_size, n as u64, start),
            CostModel::AceSim | CostModel::Throughput => {
                let p = self.emulator.profile();
                let write_reads = match self.model {
                    CostModel::Throughput => p.alpha * f64::from(p.k_w) / f64::from(p.k_r),
                    _ => p.alpha,
                };
                let (k, cost) = match dir {
                    Direction::Read => (p.k_r, p.read_latency_ns),
                    Direction::Write => (p.k_w, write_reads * p.read_latency_ns),
                };
                let rounds = n.div_ceil(k.max(1) as usize) as u64;
                start + rounds * cost.round().max(1.0) as u64
            }
        };
    }
}

impl PageDevice for VirtualPages {
    fn read(&mut self, pages: &[u64]) -> Result<()> {
        self.batch(Direction::Read, pages.len());
        Ok(())
    }
    fn write(&mut self, pages: &[u64]) -> Result<()> {
        self.batch(Direction::Write, pages.len());
        Ok(())
    }
    fn elapsed_ns(&self) -> u64 {
        self.now_ns
    }
    fn medium(&self) -> String {
        let name = &self.emulator.profile().name;
        match self.model {
            CostModel::Pio => format!("virtual-time model of {name} (no real I/O)"),
            CostModel::AceSim => format!(
                "virtual-time model of {name}, ACE simulator's costs (write = α reads; no real \
                 I/O)"
            ),
            CostModel::Throughput => format!(
                "virtual-time model of {name}, α as the saturated-throughput ratio (write = \
                 α·k_w/k_r reads; no real I/O)"
            ),
        }
    }
}

/// A real page file: page `p` lives at byte `p * page_size`; batches go to the device in one
/// [`BlockDevice::submit`] (io_uring where available, `O_DIRECT` where the file system
/// allows), and a write batch ends with a sync (a write-back must be durable before its
/// frame is reused). Elapsed time is wall-clock time spent in I/O.
#[derive(Debug)]
pub struct BlockPages {
    device: BlockDevice,
    page_size: usize,
    buffers: Vec<AlignedBuf>,
    busy_ns: u64,
}

impl BlockPages {
    /// Pages over `device`; the device must hold every page the trace names.
    pub fn new(device: BlockDevice, page_size: usize) -> Result<Self> {
        if page_size == 0 || !page_size.is_multiple_of(4096) {
            return Err(Error::InvalidArgument(format!(
                "page size {page_size}: must be a multiple of 4096"
            )));
        }
        Ok(BlockPages {
            device,
            page_size,
            buffers: Vec::new(),
            busy_ns: 0,
        })
    }

    /// The device.
    pub fn device(&self) -> &BlockDevice {
        &self.device
    }

    fn batch(&mut self, pages: &[u64], write: bool) -> Result<()> {
        while self.buffers.len() < pages.len() {
            self.buffers.push(AlignedBuf::new(self.page_size)?);
        }
        let ps = self.page_size as u64;
        let mut offsets = Vec::with_capacity(pages.len());
        for &p in pages {
            let offset = p
                .checked_mul(ps)
                .filter(|o| o + ps <= self.device.len())
                .ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "page {p} lies beyond the page file ({} bytes)",
                        self.device.len()
                    ))
                })?;
            offsets.push(offset);
        }
        let start = Instant::now();
        let mut ios: Vec<Io<'_>> = Vec::with_capacity(pages.len());
        for ((buf, &p), &offset) in self.buffers.iter_mut().zip(pages).zip(&offsets) {
            if write {
                // Each page carries its id, so a page file stays checkable.
                buf[..8].copy_from_slice(&p.to_le_bytes());
                ios.push(Io::Write { offset, buf });
            } else {
                ios.push(Io::Read { offset, buf });
            }
        }
        self.device.submit(&mut ios)?;
        drop(ios);
        if write {
            self.device.sync()?;
        }
        self.busy_ns += start.elapsed().as_nanos() as u64;
        Ok(())
    }
}

impl PageDevice for BlockPages {
    fn read(&mut self, pages: &[u64]) -> Result<()> {
        self.batch(pages, false)
    }
    fn write(&mut self, pages: &[u64]) -> Result<()> {
        self.batch(pages, true)
    }
    fn elapsed_ns(&self) -> u64 {
        self.busy_ns
    }
    fn medium(&self) -> String {
        let info = self.device.info();
        format!(
            "{} ({}, {})",
            info.path.display(),
            if info.direct_io {
                "O_DIRECT"
            } else {
                "page cache"
            },
            info.emulation
        )
    }
}

/// What a page cache did (always counted). Serialized as is in the benchmark's result files,
/// which read it back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheStats {
    /// Page accesses.
    pub accesses: u64,
    /// Accesses to a resident page.
    pub hits: u64,
    /// Accesses that had to read the page.
    pub misses: u64,
    /// Pages read (misses and prefetches).
    pub pages_read: u64,
    /// Pages written back.
    pub pages_written: u64,
    /// Read batches issued.
    pub read_batches: u64,
    /// Write-back batches issued.
    pub write_batches: u64,
    /// Number of write-back batches by size: `write_batch_sizes[n]` batches of `n` pages.
    pub write_batch_sizes: Vec<u64>,
    /// Pages evicted.
    pub evictions: u64,
    /// Pages prefetched.
    pub prefetched: u64,
    /// Prefetched pages accessed before they were evicted.
    pub prefetch_hits: u64,
}

impl CacheStats {
    /// Pages per write-back batch (0 when nothing was written).
    pub fn mean_write_batch(&self) -> f64 {
        if self.write_batches == 0 {
            0.0
        } else {
            self.pages_written as f64 / self.write_batches as f64
        }
    }
}

/// A page cache of `capacity` pages with a replacement policy, ACE and a page device.
pub struct PageCache<D: PageDevice> {
    policy: Box<dyn ReplacementPolicy>,
    capacity: usize,
    config: AceConfig,
    device: D,
    /// Prefetched pages not accessed yet.
    unused_prefetches: HashSet<u64>,
    /// History prefetcher: page → the page accessed after it last time.
    successor: HashMap<u64, u64>,
    last_access: Option<u64>,
    /// Highest page id the sequential prefetcher may name (exclusive).
    pages: u64,
    stats: CacheStats,
}

impl<D: PageDevice> std::fmt::Debug for PageCache<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("policy", &self.policy.name())
            .field("capacity", &self.capacity)
            .field("config", &self.config)
            .finish()
    }
}

impl<D: PageDevice> PageCache<D> {
    /// A cache of `capacity` pages (at least `n_e`) over `device`, which holds pages
    /// `0..pages`.
    pub fn new(
        policy: Box<dyn ReplacementPolicy>,
        capacity: usize,
        config: AceConfig,
        device: D,
        pages: u64,
    ) -> Result<Self> {
        config.validate()?;
        if capacity < config.n_e.max(1) {
            return Err(Error::InvalidArgument(format!(
                "a cache of {capacity} pages cannot evict n_e = {} at once",
                config.n_e
            )));
        }
        Ok(PageCache {
            policy,
            capacity,
            config,
            device,
            unused_prefetches: HashSet::new(),
            successor: HashMap::new(),
            last_access: None,
            pages,
            stats: CacheStats::default(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> &CacheStats {
        &self.stats
    }

    /// The device (for its elapsed time and medium).
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The policy.
    pub fn policy(&self) -> &dyn ReplacementPolicy {
        self.policy.as_ref()
    }

    /// Accesses `page` (a write dirties it). Returns whether it was a hit.
    pub fn access(&mut self, page: u64, write: bool) -> Result<bool> {
        if page >= self.pages {
            return Err(Error::InvalidArgument(format!(
                "page {page} is outside the trace's {} pages",
                self.pages
            )));
        }
        self.stats.accesses += 1;
        if let Some(prev) = self.last_access.replace(page)
            && self.config.prefetcher == Prefetcher::History
            && prev != page
        {
            self.successor.insert(prev, page);
        }
        if self.policy.contains(page) {
            self.policy.touch(page, write);
            self.stats.hits += 1;
            if self.unused_prefetches.remove(&page) {
                self.stats.prefetch_hits += 1;
            }
            return Ok(true);
        }
        self.stats.misses += 1;
        let mut reads = vec![page];
        if self.policy.len() >= self.capacity {
            self.make_room(page, &mut reads)?;
        }
        self.device.read(&reads)?;
        self.stats.read_batches += 1;
        self.stats.pages_read += reads.len() as u64;
        self.policy.insert(page, write);
        for &p in &reads[1..] {
            self.policy.insert(p, false);
            self.unused_prefetches.insert(p);
            self.stats.prefetched += 1;
        }
        Ok(false)
    }

    /// Frees at least one frame for the miss of `page`; adds prefetches to `reads`.
    fn make_room(&mut self, page: u64, reads: &mut Vec<u64>) -> Result<()> {
        let victim = self
            .policy
            .victim()
            .ok_or_else(|| Error::InvalidArgument("cache full but no victim".into()))?;
        debug_assert_eq!(self.policy.eviction_order().next(), Some(victim));
        if !self.policy.is_dirty(victim) {
            self.evict(victim);
            return Ok(());
        }
        let batch: Vec<u64> = self
            .policy
            .eviction_order()
            .filter(|&p| self.policy.is_dirty(p))
            .take(self.config.n_w)
            .collect();
        self.device.write(&batch)?;
        for &p in &batch {
            self.policy.mark_clean(p);
        }
        self.stats.write_batches += 1;
        self.stats.pages_written += batch.len() as u64;
        if self.stats.write_batch_sizes.len() <= batch.len() {
            self.stats.write_batch_sizes.resize(batch.len() + 1, 0);
        }
        self.stats.write_batch_sizes[batch.len()] += 1;
        if self.config.n_e <= 1 {
            self.evict(victim);
            return Ok(());
        }
        // The first n_e pages in eviction order are clean now: the dirty ones among them
        // were the first dirty pages of the order, and n_e <= n_w of those were written.
        let evicted: Vec<u64> = self.policy.eviction_order().take(self.config.n_e).collect();
        for &p in &evicted {
            debug_assert!(!self.policy.is_dirty(p));
            self.evict(p);
        }
        let wanted = evicted.len().saturating_sub(1);
        let prefetches = self.prefetch_candidates(page, wanted);
        reads.extend(prefetches);
        Ok(())
    }

    fn evict(&mut self, page: u64) {
        self.policy.remove(page);
        self.unused_prefetches.remove(&page);
        self.stats.evictions += 1;
    }

    fn prefetch_candidates(&self, page: u64, n: usize) -> Vec<u64> {
        let mut out = Vec::with_capacity(n);
        let fresh = |p: u64, out: &Vec<u64>| {
            p != page && p < self.pages && !self.policy.contains(p) && !out.contains(&p)
        };
        match self.config.prefetcher {
            Prefetcher::None => {}
            Prefetcher::Sequential => {
                let mut p = page;
                while out.len() < n {
                    p += 1;
                    if p >= self.pages {
                        break;
                    }
                    if fresh(p, &out) {
                        out.push(p);
                    }
                }
            }
            Prefetcher::History => {
                let mut p = page;
                // Bounded walk: a chain may cycle through resident pages.
                for _ in 0..4 * n.max(1) {
                    if out.len() >= n {
                        break;
                    }
                    let Some(&next) = self.successor.get(&p) else {
                        break;
                    };
                    if fresh(next, &out) {
                        out.push(next);
                    }
                    p = next;
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::policy::{Lru, by_name};

    /// Records batches instead of timing them.
    #[derive(Debug, Default)]
    struct Recorder {
        reads: Vec<Vec<u64>>,
        writes: Vec<Vec<u64>>,
    }
    impl PageDevice for Recorder {
        fn read(&mut self, pages: &[u64]) -> Result<()> {
            self.reads.push(pages.to_vec());
            Ok(())
        }
        fn write(&mut self, pages: &[u64]) -> Result<()> {
            self.writes.push(pages.to_vec());
            Ok(())
        }
        fn elapsed_ns(&self) -> u64 {
            0
        }
        fn medium(&self) -> String {
            "recorder".into()
        }
    }

    /// The worked example of the ACE talk: LRU, k_w = 3, pool 6 2 3 5 7 4 9 (MRU → LRU)
    /// with 2, 5 and 4 dirty; "write 8" evicts clean 9; "write 1" meets dirty victim 4.
    fn example(config: AceConfig) -> PageCache<Recorder> {
        let mut c =
            PageCache::new(Box::new(Lru::new()), 7, config, Recorder::default(), 100).unwrap();
        for (p, dirty) in [
            (9, false),
            (4, true),
            (7, false),
            (5, true),
            (3, false),
            (2, true),
            (6, false),
        ] {
            c.access(p, dirty).unwrap();
        }
        c.access(8, true).unwrap();
        assert!(!c.policy().contains(9), "clean victim 9 simply evicted");
        assert!(c.device().writes.is_empty());
        c.access(1, true).unwrap();
        c
    }

    #[test]
    fn plain_lru_writes_and_evicts_one_page() {
        let c = example(AceConfig::BASELINE);
        assert_eq!(c.device().writes, vec![vec![4]]);
        assert!(!c.policy().contains(4));
        assert!(c.policy().is_dirty(5) && c.policy().is_dirty(2));
    }

    #[test]
    fn ace_writes_the_next_dirty_pages_together_and_evicts_only_the_victim() {
        let c = example(AceConfig {
            n_w: 3,
            n_e: 1,
            prefetcher: Prefetcher::None,
        });
        assert_eq!(c.device().writes, vec![vec![4, 5, 2]]);
        assert!(!c.policy().contains(4));
        for p in [7, 5, 3, 2, 6, 8, 1] {
            assert!(c.policy().contains(p), "page {p} stays");
        }
        assert!(!c.policy().is_dirty(5) && !c.policy().is_dirty(2));
        assert_eq!(c.stats().write_batch_sizes, vec![0, 0, 0, 1]);
    }

    #[test]
    fn ace_with_prefetch_evicts_n_e_pages_and_reads_with_the_miss() {
        let c = example(AceConfig {
            n_w: 3,
            n_e: 2,
            prefetcher: Prefetcher::Sequential,
        });
        assert_eq!(c.device().writes, vec![vec![4, 5, 2]]);
        assert!(!c.policy().contains(7), "4 and 7 evicted");
        assert_eq!(c.stats().evictions, 3, "9, then 4 and 7");
        // The miss of 1 reads 1 and prefetches the next page not resident (2 and 3 are; 4
        // was just evicted), in one batch.
        let last = c.device().reads.last().unwrap();
        assert_eq!(last, &vec![1, 4]);
        assert!(!c.policy().is_dirty(4), "a prefetched page is clean");
        assert_eq!(c.stats().prefetched, 1);
    }

    #[test]
    fn config_rules_are_checked() {
        let bad = AceConfig {
            n_w: 2,
            n_e: 3,
            prefetcher: Prefetcher::Sequential,
        };
        assert!(bad.validate().is_err());
        let no_prefetcher = AceConfig {
            n_w: 4,
            n_e: 2,
            prefetcher: Prefetcher::None,
        };
        assert!(no_prefetcher.validate().is_err());
    }

    #[test]
    fn virtual_time_charges_a_write_batch_once_per_k_w() {
        let p = crate::device::Catalogue::builtin()
            .require("pcie-ssd-p4510")
            .unwrap()
            .clone();
        let mut one = VirtualPages::new(&p, 4096).unwrap();
        one.write(&[1]).unwrap();
        let single = one.elapsed_ns();
        let mut eight = VirtualPages::new(&p, 4096).unwrap();
        eight.write(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(
            eight.elapsed_ns(),
            single,
            "k_w = 8 writes in one slot time"
        );
        eight.write(&[9]).unwrap();
        assert_eq!(eight.elapsed_ns(), 2 * single);
    }

    #[test]
    fn the_ace_simulator_charges_alpha_reads_per_write_round() {
        let p = crate::device::Catalogue::builtin()
            .require("pcie-ssd-p4510")
            .unwrap()
            .clone();
        let mut d = VirtualPages::with_cost_model(&p, 4096, CostModel::AceSim).unwrap();
        d.read(&[1]).unwrap();
        let read = d.elapsed_ns();
        assert_eq!(read, p.read_latency_ns.round() as u64);
        d.write(&[1]).unwrap();
        let write = d.elapsed_ns() - read;
        assert_eq!(write, (p.alpha * p.read_latency_ns).round() as u64);
        // k_w = 8 writes cost one write, the ninth starts a second round; 80 reads cost one.
        d.write(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(d.elapsed_ns(), read + 2 * write);
        d.write(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
        assert_eq!(d.elapsed_ns(), read + 4 * write);
        d.read(&(0..80).collect::<Vec<u64>>()).unwrap();
        assert_eq!(d.elapsed_ns(), 2 * read + 4 * write);
        assert!(d.medium().contains("ACE simulator"));
        assert_eq!(CostModel::parse("ace-sim").unwrap(), CostModel::AceSim);
        assert!(CostModel::parse("pio2").is_err());
    }

    #[test]
    fn the_device_model_charges_as_the_simulator_and_the_throughput_reading_less() {
        let p = crate::device::Catalogue::builtin()
            .require("pcie-ssd-p4510")
            .unwrap()
            .clone();
        let run = |model| {
            let mut d = VirtualPages::with_cost_model(&p, 4096, model).unwrap();
            let mut steps = Vec::new();
            for batch in [1usize, 8, 9, 3, 80, 81] {
                let pages: Vec<u64> = (0..batch as u64).collect();
                d.read(&pages).unwrap();
                steps.push(d.elapsed_ns());
                d.write(&pages).unwrap();
                steps.push(d.elapsed_ns());
            }
            steps
        };
        // 4 KiB pages never reach the P4510's bandwidth lanes: the emulator's slots alone
        // decide, and they are the simulator's rounds.
        assert_eq!(run(CostModel::Pio), run(CostModel::AceSim));
        let mut d = VirtualPages::with_cost_model(&p, 4096, CostModel::Throughput).unwrap();
        d.write(&[1]).unwrap();
        assert_eq!(d.elapsed_ns(), (0.28 * p.read_latency_ns).round() as u64);
        assert!(d.medium().contains("saturated-throughput"));
        assert_eq!(
            CostModel::parse("throughput").unwrap(),
            CostModel::Throughput
        );
    }

    #[test]
    fn outside_pages_are_refused() {
        let mut c = PageCache::new(
            by_name("clock", 4).unwrap(),
            4,
            AceConfig::BASELINE,
            Recorder::default(),
            10,
        )
        .unwrap();
        assert!(c.access(10, false).is_err());
    }
}
