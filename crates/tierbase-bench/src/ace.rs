//! `tierbase bench ace`: the trace-driven ACE benchmark (Papon & Athanassoulis, ICDE'23), like
//! the authors' simulator: page-access traces replayed through a page cache with each
//! replacement policy, once plain and once with ACE, back to back on the same trace.
//!
//! Owns: traces (synthetic "s % of accesses on d % of pages" with a write share, and recorded
//! traces from text files), resolving devices (a catalogue profile runs in virtual time; a path
//! runs against a real page file), the sweep over devices × policies × write shares × `n_w`,
//! the result file (`"format": "tierbase-ace-results"`), the text table and the HTML report
//! with its charts. Must not touch: the cache, the policies, ACE itself or the device model —
//! those are the engine's (`tierbase::buffer::{policy, ace}`, `tierbase::device`).
//!
//! **Traces.** A synthetic trace of `ops` accesses over `pages` pages picks its hot set — the
//! first `d %` of a seeded permutation of the pages — and sends `s %` of the accesses to it,
//! uniformly, the rest uniformly to the other pages. Which accesses write is drawn from a
//! separate stream, so traces of one seed with different write shares name the same pages in
//! the same order, and the writes of a smaller share are a subset of a larger one's. A recorded
//! trace is a text file with one access per line, `R <page>` or `W <page>`; `#` starts a
//! comment; blank lines are skipped.
//!
//! **Devices and runtime.** A catalogue profile runs on [`VirtualPages`]: the PIO model of the
//! profile in virtual time, no real I/O, exactly reproducible; the runtime is modelled device
//! time. A path (a directory, where a temporary page file is made, or a new file) runs on
//! [`BlockPages`]: a real page file through [`BlockDevice`] with `O_DIRECT` (where the file
//! system allows it) and io_uring, created and filled once before anything is measured and
//! removed afterwards; the runtime is wall-clock time spent in I/O. ACE's `n_w` defaults to the
//! profile's `k_w` (for a path: the profile named with `--profile`, e.g. one saved by
//! `tierbase profile block --save`).
//!
//! **Baseline and ACE.** Every run pairs the plain policy ([`AceConfig::BASELINE`]) with ACE
//! on the same trace. In virtual time the baseline does not depend on `n_w` and is replayed once
//! per (device, policy, write share) and shared by that group's `n_w` values (the model is
//! deterministic, so a replay again would give the same numbers); on a real device it is
//! replayed again right before each ACE run. Virtual-time groups run in parallel; real-device
//! runs one at a time.
//!
//! Result file, format version 1:
//!
//! ```text
//! { format: "tierbase-ace-results", format_version: 1, generator, created_unix_s,
//!   host: { cpus, cpu_model, kernel }, command,
//!   trace: { kind: "synthetic" | "file", path, pages, ops, locality: { access_pct, data_pct },
//!            seed },
//!   capacity (pages), page_size (bytes), prefetcher,
//!   runs: [ { device, medium, virtual_time, profile: { name, alpha, k_r, k_w } or null,
//!             policy, write_pct (requested), trace_write_pct (measured), n_w, n_e,
//!             baseline: { config: { n_w, n_e, prefetcher }, stats: { accesses, hits, misses,
//!                         pages_read, pages_written, read_batches, write_batches,
//!                         write_batch_sizes, evictions, prefetched, prefetch_hits },
//!                         runtime_ns, wall_s },
//!             ace: { same },
//!             speedup, runtime_reduction_pct, miss_increase_pct, mean_write_batch } ] }
//! ```

use std::collections::BTreeSet;
use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tierbase::buffer::ace::{
    AceConfig, BlockPages, CacheStats, CostModel, PageCache, PageDevice, Prefetcher, VirtualPages,
};
use tierbase::buffer::policy::{POLICIES, by_name};
use tierbase::device::{
    AlignedBuf, BlockDevice, BlockOptions, Catalogue, DeviceProfile, FsKind, Io, fs_kind,
};

use crate::error::{BenchError, Result};
use crate::report::svg::{self, LineChart, LineSeries, ValueFormat, escape};
use crate::report::{ExtraResults, SectionCounts, render_with};
use crate::results::{HostInfo, check_writable, parse_versioned, write_json_atomically};
use crate::rng::Rng;

/// Value of the `format` field of an ACE result file.
pub const ACE_RESULT_FORMAT: &str = "tierbase-ace-results";
/// Version this build writes and reads.
pub const ACE_RESULT_FORMAT_VERSION: u32 = 1;

/// Pages of a synthetic trace by default.
pub const DEFAULT_PAGES: u64 = 100_000;
/// Accesses of a synthetic trace by default.
pub const DEFAULT_OPS: u64 = 1_000_000;
/// Pool size by default, as a share of the trace's pages (10 %: with 90/10 locality the hot
/// set just fits, so misses come from the cold accesses and the hot set's churn).
pub const DEFAULT_CAPACITY_PCT: f64 = 10.0;
/// Locality by default: 90 % of the accesses on 10 % of the pages.
pub const DEFAULT_LOCALITY: Locality = Locality {
    access_pct: 90.0,
    data_pct: 10.0,
};
/// Write share by default (the paper's mixed trace: r/w 50/50).
pub const DEFAULT_WRITE_PCT: f64 = 50.0;
/// Device by default: the paper's PCIe SSD (α 2.8, k_w 8), in virtual time.
pub const DEFAULT_DEVICE: &str = "pcie-ssd-p4510";
/// Page size by default (the simulator's 4 KB).
pub const DEFAULT_PAGE_SIZE: u64 = 4096;

/// Most pages a trace may name (the page space is held in memory while generating).
pub const MAX_PAGES: u64 = 1 << 32;

/// Largest page size (a real page file's pages are read into buffers of this size).
pub const MAX_PAGE_SIZE: u64 = 16 << 20;

/// `MemAvailable` of /proc/meminfo in bytes (`None` where there is no such file).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

const STREAM_HOT: u64 = 0xACE0;
const STREAM_PAGES: u64 = 0xACE1;
const STREAM_WRITES: u64 = 0xACE2;

/// "`access_pct` % of the accesses go to `data_pct` % of the pages".
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Locality {
    /// Share of the accesses that go to the hot set, in percent.
    pub access_pct: f64,
    /// Size of the hot set, in percent of the pages.
    pub data_pct: f64,
}

impl Locality {
    /// Parses `S/D`, e.g. `90/10`.
    pub fn parse(s: &str) -> Result<Self> {
        let bad = || {
            BenchError::invalid(format!(
                "invalid locality '{s}': expected S/D, S % of the accesses on D % of the pages \
                 (e.g. 90/10)"
            ))
        };
        let (a, d) = s.split_once('/').ok_or_else(bad)?;
        let access_pct: f64 = a.trim().trim_end_matches('%').parse().map_err(|_| bad())?;
        let data_pct: f64 = d.trim().trim_end_matches('%').parse().map_err(|_| bad())?;
        let l = Locality {
            access_pct,
            data_pct,
        };
        l.validate()?;
        Ok(l)
    }

    /// Checks 0 ≤ S ≤ 100 and 0 < D ≤ 100.
    pub fn validate(&self) -> Result<()> {
        let access_ok = (0.0..=100.0).contains(&self.access_pct);
        let data_ok = self.data_pct > 0.0 && self.data_pct <= 100.0;
        if !(access_ok && data_ok) {
            return Err(BenchError::invalid(format!(
                "invalid locality {self}: the access share must be 0-100 % and the hot set \
                 above 0 and at most 100 % of the pages"
            )));
        }
        Ok(())
    }
}

impl fmt::Display for Locality {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.access_pct, self.data_pct)
    }
}

/// Parses a write-share list such as `50` or `0,10,20,...` (percent, 0-100).
pub fn parse_write_pcts(list: &str) -> Result<Vec<f64>> {
    let mut out: Vec<f64> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let v: f64 = part.trim_end_matches('%').parse().map_err(|_| {
            BenchError::invalid(format!(
                "invalid write share '{part}' in '{list}': expected percentages such as 0,50,100"
            ))
        })?;
        if !(0.0..=100.0).contains(&v) {
            return Err(BenchError::invalid(format!(
                "write share {part} is outside 0-100 %"
            )));
        }
        if !out.contains(&v) {
            out.push(v);
        }
    }
    if out.is_empty() {
        return Err(BenchError::invalid("no write share given"));
    }
    Ok(out)
}

/// Parses an `n_w` list such as `8` or `1,2,4,8,16,32`.
pub fn parse_n_w_list(list: &str) -> Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: usize = part.parse().map_err(|_| {
            BenchError::invalid(format!(
                "invalid n_w '{part}' in '{list}': expected numbers such as 1,2,4,8"
            ))
        })?;
        if n == 0 {
            return Err(BenchError::invalid("n_w must be at least 1 (got 0)"));
        }
        if !out.contains(&n) {
            out.push(n);
        }
    }
    if out.is_empty() {
        return Err(BenchError::invalid("no n_w given"));
    }
    Ok(out)
}

/// Parses a policy list (`clock,lru,cflru,lru-wsr`, or `all`), checking every name.
pub fn parse_policies(list: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part == "all" {
            for p in POLICIES {
                if !out.iter().any(|o| o == p) {
                    out.push(p.to_string());
                }
            }
            continue;
        }
        by_name(part, 1)?;
        if !out.iter().any(|o| o == part) {
            out.push(part.to_string());
        }
    }
    if out.is_empty() {
        return Err(BenchError::invalid(format!(
            "no replacement policy given (known: {})",
            POLICIES.join(", ")
        )));
    }
    Ok(out)
}

/// The name of a prefetcher as written in results.
pub fn prefetcher_name(p: Prefetcher) -> &'static str {
    match p {
        Prefetcher::None => "none",
        Prefetcher::Sequential => "sequential",
        Prefetcher::History => "history",
    }
}

/// A synthetic trace's parameters (the write share is given per trace).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// Page space.
    pub pages: u64,
    /// Accesses.
    pub ops: u64,
    /// Locality.
    pub locality: Locality,
    /// Seed of the hot set, the pages and the writes.
    pub seed: u64,
}

/// A page-access trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Pages `0..pages` may be accessed.
    pages: u64,
    /// `page << 1 | write`.
    accesses: Vec<u64>,
    writes: u64,
}

impl Trace {
    /// A trace over `pages` pages from `(page, write)` accesses.
    pub fn from_accesses(pages: u64, accesses: &[(u64, bool)]) -> Result<Self> {
        let mut t = Trace {
            pages,
            accesses: Vec::with_capacity(accesses.len()),
            writes: 0,
        };
        for &(p, w) in accesses {
            if p >= pages {
                return Err(BenchError::invalid(format!(
                    "page {p} is outside the trace's {pages} pages"
                )));
            }
            t.push(p, w);
        }
        Ok(t)
    }

    fn push(&mut self, page: u64, write: bool) {
        self.accesses.push(page << 1 | u64::from(write));
        self.writes += u64::from(write);
    }

    /// A synthetic trace: see the module docs.
    pub fn synthetic(spec: &SyntheticSpec, write_pct: f64) -> Result<Self> {
        let SyntheticSpec {
            pages,
            ops,
            locality,
            seed,
        } = *spec;
        locality.validate()?;
        if pages == 0 || pages > MAX_PAGES {
            return Err(BenchError::invalid(format!(
                "--pages {pages}: must be between 1 and {MAX_PAGES}"
            )));
        }
        if ops == 0 {
            return Err(BenchError::invalid("--ops must be at least 1"));
        }
        if !(0.0..=100.0).contains(&write_pct) {
            return Err(BenchError::invalid(format!(
                "write share {write_pct} is outside 0-100 %"
            )));
        }
        let hot_n = ((pages as f64 * locality.data_pct / 100.0).round() as u64).clamp(1, pages);
        let mut perm: Vec<u64> = (0..pages).collect();
        let mut rng = Rng::derive(seed, STREAM_HOT, 0);
        // Partial Fisher–Yates: the first hot_n places are a uniform sample of the pages.
        for i in 0..hot_n.min(pages - 1) {
            let j = i + rng.below(pages - i);
            perm.swap(i as usize, j as usize);
        }
        let (hot, cold) = perm.split_at(hot_n as usize);
        let mut pick = Rng::derive(seed, STREAM_PAGES, 0);
        let mut writes = Rng::derive(seed, STREAM_WRITES, 0);
        let mut t = Trace {
            pages,
            accesses: Vec::with_capacity(ops as usize),
            writes: 0,
        };
        for _ in 0..ops {
            let to_hot = cold.is_empty() || pick.next_f64() * 100.0 < locality.access_pct;
            let page = if to_hot {
                hot[pick.below(hot.len() as u64) as usize]
            } else {
                cold[pick.below(cold.len() as u64) as usize]
            };
            let write = writes.next_f64() * 100.0 < write_pct;
            t.push(page, write);
        }
        Ok(t)
    }

    /// Parses a recorded trace (`R <page>` / `W <page>` per line, `#` comments); `path` is for
    /// messages. The page space is the largest page named plus one.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let mut t = Trace {
            pages: 0,
            accesses: Vec::new(),
            writes: 0,
        };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |why: &str| {
                BenchError::invalid(format!(
                    "{} line {}: {why}: expected `R <page>` or `W <page>`, got {:?}",
                    path.display(),
                    i + 1,
                    raw.trim()
                ))
            };
            let mut parts = line.split_whitespace();
            let (Some(op), Some(page), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(bad("not two fields"));
            };
            let write = match op {
                "R" | "r" => false,
                "W" | "w" => true,
                _ => return Err(bad("unknown operation")),
            };
            let page: u64 = page.parse().map_err(|_| bad("page is not a number"))?;
            if page >= MAX_PAGES {
                return Err(bad(&format!("page {page} is beyond {MAX_PAGES}")));
            }
            t.pages = t.pages.max(page + 1);
            t.push(page, write);
        }
        if t.accesses.is_empty() {
            return Err(BenchError::invalid(format!(
                "{}: the trace has no accesses (lines `R <page>` or `W <page>`)",
                path.display()
            )));
        }
        Ok(t)
    }

    /// Reads a recorded trace file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))?;
        Self::parse(&text, path)
    }

    /// Widens the page space to `pages` (at least the pages the trace names).
    pub fn with_pages(mut self, pages: u64) -> Result<Self> {
        if pages < self.pages {
            return Err(BenchError::invalid(format!(
                "--pages {pages} is too small: the trace names page {}",
                self.pages - 1
            )));
        }
        if pages > MAX_PAGES {
            return Err(BenchError::invalid(format!(
                "--pages {pages}: must be at most {MAX_PAGES}"
            )));
        }
        self.pages = pages;
        Ok(self)
    }

    /// Page space.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Accesses.
    pub fn len(&self) -> usize {
        self.accesses.len()
    }

    /// Whether there are no accesses.
    pub fn is_empty(&self) -> bool {
        self.accesses.is_empty()
    }

    /// Accesses that write.
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// Share of writing accesses, in percent.
    pub fn write_pct(&self) -> f64 {
        100.0 * self.writes as f64 / self.accesses.len().max(1) as f64
    }

    /// The accesses as `(page, write)`.
    pub fn iter(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.accesses.iter().map(|&a| (a >> 1, a & 1 == 1))
    }
}

/// Where the trace comes from.
#[derive(Clone, Debug)]
pub enum TraceSource {
    /// Generated; one trace per write share.
    Synthetic(SyntheticSpec),
    /// Recorded in a file (already read).
    File {
        /// The file.
        path: PathBuf,
        /// Its accesses.
        trace: Trace,
    },
}

/// What a device is.
#[derive(Clone, Debug)]
pub enum DeviceTarget {
    /// The PIO model of the profile in virtual time; no real I/O.
    Virtual,
    /// A real page file at this path (created, filled, and removed afterwards).
    PageFile(PathBuf),
}

/// A device a trace runs on.
#[derive(Clone, Debug)]
pub struct AceDevice {
    /// As the user named it (profile name or path).
    pub name: String,
    /// What it is.
    pub target: DeviceTarget,
    /// The profile: the model (virtual) or the measured figures (real, from `--profile`).
    pub profile: Option<DeviceProfile>,
}

impl AceDevice {
    /// Resolves a `--device` entry: a catalogue profile name runs in virtual time; a path (an
    /// existing directory, where a temporary page file is made, or a new file) runs on a real
    /// page file, with `profile` (if any) giving its measured figures.
    pub fn resolve(
        spec: &str,
        catalogue: &Catalogue,
        profile: Option<&DeviceProfile>,
    ) -> Result<Self> {
        let spec = spec.trim();
        if let Some(p) = catalogue.get(spec) {
            return Ok(AceDevice {
                name: p.name.clone(),
                target: DeviceTarget::Virtual,
                profile: Some(p.clone()),
            });
        }
        let path = Path::new(spec);
        if !spec.contains('/') && !path.exists() {
            return Err(BenchError::invalid(format!(
                "unknown device '{spec}': not a device profile (known: {}) and not a path; \
                 give a profile name for the virtual-time model, or a directory or new file \
                 name for a real page file",
                catalogue.names().join(", ")
            )));
        }
        let file = if path.is_dir() {
            path.join(format!("tierbase-ace-{}.pages", std::process::id()))
        } else if path.exists() {
            return Err(BenchError::invalid(format!(
                "{spec} exists: give a directory (a temporary page file is made there) or the \
                 name of a new file; bench ace never writes over an existing file"
            )));
        } else {
            match path.parent() {
                Some(p) if !p.as_os_str().is_empty() && !p.is_dir() => {
                    return Err(BenchError::invalid(format!(
                        "cannot create {spec}: directory {} does not exist",
                        p.display()
                    )));
                }
                _ => path.to_path_buf(),
            }
        };
        Ok(AceDevice {
            name: spec.to_string(),
            target: DeviceTarget::PageFile(file),
            profile: profile.cloned(),
        })
    }

    /// Whether this device runs in virtual time.
    pub fn is_virtual(&self) -> bool {
        matches!(self.target, DeviceTarget::Virtual)
    }
}

/// How big the pool is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Capacity {
    /// Pages.
    Pages(usize),
    /// Percent of the trace's pages.
    Percent(f64),
}

impl Capacity {
    /// Pages for a trace over `pages` pages.
    pub fn pages(self, pages: u64) -> Result<usize> {
        let n = match self {
            Capacity::Pages(n) => n,
            Capacity::Percent(p) => {
                if !(p > 0.0 && p <= 100.0) {
                    return Err(BenchError::invalid(format!(
                        "--capacity-pct {p}: must be above 0 and at most 100"
                    )));
                }
                ((pages as f64 * p / 100.0).round() as usize).max(1)
            }
        };
        if n == 0 {
            return Err(BenchError::invalid("--capacity must be at least 1 page"));
        }
        if n as u64 >= pages {
            return Err(BenchError::invalid(format!(
                "a pool of {n} pages holds all {pages} pages of the trace: nothing would ever be \
                 evicted; give a smaller --capacity or more --pages"
            )));
        }
        Ok(n)
    }
}

/// A whole `bench ace` run.
#[derive(Clone, Debug)]
pub struct AcePlan {
    /// Devices, in order.
    pub devices: Vec<AceDevice>,
    /// Replacement policies, in order.
    pub policies: Vec<String>,
    /// Write shares (synthetic traces only; a recorded trace has its own).
    pub write_pcts: Vec<f64>,
    /// `n_w` values; `None`: each device's `k_w`.
    pub n_w: Option<Vec<usize>>,
    /// `n_e`; `None`: 1 without a prefetcher, else `n_w`. Capped at each run's `n_w`.
    pub n_e: Option<usize>,
    /// The prefetcher of the ACE runs.
    pub prefetcher: Prefetcher,
    /// How virtual devices charge I/O (real devices take what they take).
    pub cost_model: CostModel,
    /// The trace.
    pub trace: TraceSource,
    /// Pool size.
    pub capacity: Capacity,
    /// Page size in bytes.
    pub page_size: u64,
    /// Virtual-time groups replayed at once.
    pub threads: usize,
    /// The command line, recorded in the result file.
    pub command: String,
}

impl AcePlan {
    /// Refuses a run whose traces and pools would not fit in the memory available now (an
    /// allocation that fails aborts the process): a synthetic trace holds 8 bytes per access,
    /// its generation 8 bytes per page, and each of `threads` pools about 64 bytes per page.
    fn check_memory(&self, capacity: usize) -> Result<()> {
        let ops = match &self.trace {
            TraceSource::Synthetic(s) => {
                if s.ops > MAX_PAGES {
                    return Err(BenchError::invalid(format!(
                        "--ops {}: must be at most {MAX_PAGES}",
                        s.ops
                    )));
                }
                s.ops
            }
            TraceSource::File { trace, .. } => trace.len() as u64,
        };
        let threads = self.threads.min(self.write_pcts().len().max(1)) as u64;
        let need = ops
            .saturating_mul(8)
            .saturating_mul(threads)
            .saturating_add(self.pages().saturating_mul(8))
            .saturating_add((capacity as u64).saturating_mul(64).saturating_mul(threads));
        match available_memory() {
            Some(have) if need > have => Err(BenchError::invalid(format!(
                "the traces and pools need about {} of memory and {} is available: lower \
                 --ops, --pages or --threads",
                crate::units::format_bytes(need),
                crate::units::format_bytes(have)
            ))),
            _ => Ok(()),
        }
    }

    /// Page space of the trace.
    pub fn pages(&self) -> u64 {
        match &self.trace {
            TraceSource::Synthetic(s) => s.pages,
            TraceSource::File { trace, .. } => trace.pages(),
        }
    }

    /// The write shares actually run.
    pub fn write_pcts(&self) -> Vec<f64> {
        match &self.trace {
            TraceSource::Synthetic(_) => self.write_pcts.clone(),
            TraceSource::File { trace, .. } => vec![trace.write_pct()],
        }
    }

    /// The `n_w` values of `device`.
    pub fn n_ws(&self, device: &AceDevice) -> Result<Vec<usize>> {
        if let Some(list) = &self.n_w {
            return Ok(list.clone());
        }
        match &device.profile {
            Some(p) => Ok(vec![p.k_w.max(1) as usize]),
            None => Err(BenchError::invalid(format!(
                "device {}: ACE needs n_w (the device's write concurrency k_w): profile it with \
                 `tierbase profile block --path {} --save NAME` and give --profile NAME, or \
                 give --n-w",
                device.name, device.name
            ))),
        }
    }

    /// The ACE configuration for `n_w`.
    pub fn ace_config(&self, n_w: usize) -> AceConfig {
        let n_e = self
            .n_e
            .unwrap_or(if self.prefetcher == Prefetcher::None {
                1
            } else {
                n_w
            })
            .min(n_w);
        AceConfig {
            n_w,
            n_e,
            prefetcher: self.prefetcher,
        }
    }

    /// Checks everything that can be checked before a replay.
    pub fn validate(&self) -> Result<usize> {
        if self.devices.is_empty() {
            return Err(BenchError::invalid("no device given"));
        }
        if self.policies.is_empty() {
            return Err(BenchError::invalid("no replacement policy given"));
        }
        if self.page_size == 0
            || !self.page_size.is_multiple_of(4096)
            || self.page_size > MAX_PAGE_SIZE
        {
            return Err(BenchError::invalid(format!(
                "--page-size {}: must be a multiple of 4096 and at most {MAX_PAGE_SIZE} (16 MiB)",
                self.page_size
            )));
        }
        if self.threads == 0 {
            return Err(BenchError::invalid("--threads must be at least 1"));
        }
        for p in &self.policies {
            by_name(p, 1)?;
        }
        if self.pages() == 0 {
            return Err(BenchError::invalid("--pages must be at least 1"));
        }
        let capacity = self.capacity.pages(self.pages())?;
        self.check_memory(capacity)?;
        for w in self.write_pcts() {
            if !(0.0..=100.0).contains(&w) {
                return Err(BenchError::invalid(format!(
                    "write share {w} is outside 0-100 %"
                )));
            }
        }
        if let Some(0) = self.n_e {
            return Err(BenchError::invalid("--n-e must be at least 1"));
        }
        for d in &self.devices {
            for n_w in self.n_ws(d)? {
                let c = self.ace_config(n_w);
                c.validate()?;
                if capacity < c.n_e {
                    return Err(BenchError::invalid(format!(
                        "a pool of {capacity} pages cannot evict n_e = {} pages at once",
                        c.n_e
                    )));
                }
            }
            if !d.is_virtual() {
                self.pages()
                    .checked_mul(self.page_size)
                    .ok_or_else(|| BenchError::invalid("page file size overflows"))?;
            }
        }
        Ok(capacity)
    }
}

/// A profile's figures, as recorded with a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProfileSummary {
    /// Profile name.
    pub name: String,
    /// Asymmetry α.
    pub alpha: f64,
    /// Read concurrency.
    pub k_r: u32,
    /// Write concurrency.
    pub k_w: u32,
}

impl From<&DeviceProfile> for ProfileSummary {
    fn from(p: &DeviceProfile) -> Self {
        ProfileSummary {
            name: p.name.clone(),
            alpha: p.alpha,
            k_r: p.k_r,
            k_w: p.k_w,
        }
    }
}

/// A cache configuration, as recorded with a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Pages written back together.
    pub n_w: usize,
    /// Pages evicted together.
    pub n_e: usize,
    /// `none`, `sequential` or `history`.
    pub prefetcher: String,
}

impl From<AceConfig> for RunConfig {
    fn from(c: AceConfig) -> Self {
        RunConfig {
            n_w: c.n_w,
            n_e: c.n_e,
            prefetcher: prefetcher_name(c.prefetcher).to_string(),
        }
    }
}

/// One replay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// The cache configuration.
    pub config: RunConfig,
    /// What the cache did.
    pub stats: CacheStats,
    /// Device time: modelled (virtual) or wall-clock time in I/O (real), in ns.
    pub runtime_ns: u64,
    /// Wall-clock time of the whole replay (CPU and I/O), in seconds.
    pub wall_s: f64,
}

/// One (device, policy, write share, `n_w`): the plain policy and ACE on the same trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AceRun {
    /// The device as named (profile name or path).
    pub device: String,
    /// Where the pages lived ("virtual-time model of …", or the page file, its file system,
    /// `O_DIRECT` and engine).
    pub medium: String,
    /// Whether the runtime is modelled (no real I/O).
    pub virtual_time: bool,
    /// The cost model of a virtual device (`pio`, `ace-sim` or `throughput`); `null` on a real
    /// device.
    #[serde(default)]
    pub cost_model: Option<String>,
    /// The device's profile (the model, or the measured figures given with `--profile`).
    pub profile: Option<ProfileSummary>,
    /// Replacement policy.
    pub policy: String,
    /// Write share asked for, in percent (a recorded trace: its own).
    pub write_pct: f64,
    /// Write share of the trace replayed, in percent.
    pub trace_write_pct: f64,
    /// ACE's `n_w`.
    pub n_w: usize,
    /// ACE's `n_e`.
    pub n_e: usize,
    /// The plain policy.
    pub baseline: Measured,
    /// The policy with ACE.
    pub ace: Measured,
    /// Baseline runtime ÷ ACE runtime.
    pub speedup: f64,
    /// How much lower ACE's runtime is, in percent of the baseline's.
    pub runtime_reduction_pct: f64,
    /// How many more misses ACE has, in percent of the baseline's.
    pub miss_increase_pct: f64,
    /// ACE's pages per write-back batch.
    pub mean_write_batch: f64,
}

impl AceRun {
    #[allow(clippy::too_many_arguments)]
    fn new(
        device: &AceDevice,
        cost_model: CostModel,
        medium: String,
        policy: &str,
        write_pct: f64,
        trace: &Trace,
        baseline: Measured,
        ace: Measured,
    ) -> Self {
        let (b, a) = (baseline.runtime_ns as f64, ace.runtime_ns as f64);
        let speedup = if a > 0.0 {
            b / a
        } else if b > 0.0 {
            f64::INFINITY
        } else {
            1.0
        };
        let runtime_reduction_pct = if b > 0.0 { 100.0 * (b - a) / b } else { 0.0 };
        let (bm, am) = (baseline.stats.misses as f64, ace.stats.misses as f64);
        let miss_increase_pct = if bm > 0.0 {
            100.0 * (am - bm) / bm
        } else {
            0.0
        };
        AceRun {
            device: device.name.clone(),
            medium,
            virtual_time: device.is_virtual(),
            cost_model: device.is_virtual().then(|| cost_model.name().to_string()),
            profile: device.profile.as_ref().map(ProfileSummary::from),
            policy: policy.to_string(),
            write_pct,
            trace_write_pct: trace.write_pct(),
            n_w: ace.config.n_w,
            n_e: ace.config.n_e,
            mean_write_batch: ace.stats.mean_write_batch(),
            baseline,
            ace,
            speedup: if speedup.is_finite() { speedup } else { 0.0 },
            runtime_reduction_pct,
            miss_increase_pct,
        }
    }
}

/// The trace as recorded in the result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceInfo {
    /// `synthetic` or `file`.
    pub kind: String,
    /// The file of a recorded trace.
    pub path: Option<String>,
    /// Page space.
    pub pages: u64,
    /// Accesses.
    pub ops: u64,
    /// Locality of a synthetic trace.
    pub locality: Option<Locality>,
    /// Seed of a synthetic trace.
    pub seed: Option<u64>,
}

/// An ACE result file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AceResultFile {
    /// Always [`ACE_RESULT_FORMAT`].
    pub format: String,
    /// [`ACE_RESULT_FORMAT_VERSION`] when written by this build.
    pub format_version: u32,
    /// The program that wrote it.
    pub generator: String,
    /// When it was written (seconds since the Unix epoch).
    pub created_unix_s: u64,
    /// The machine.
    pub host: HostInfo,
    /// The command line that produced it.
    pub command: String,
    /// The trace.
    pub trace: TraceInfo,
    /// Pool size in pages.
    pub capacity: usize,
    /// Page size in bytes.
    pub page_size: u64,
    /// ACE's prefetcher.
    pub prefetcher: String,
    /// The runs.
    pub runs: Vec<AceRun>,
}

impl AceResultFile {
    /// Writes the file atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_json_atomically(self, path)
    }

    /// Reads and checks a result file.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))?;
        Self::parse(&text, path)
    }

    /// Parses result-file text; `path` is only used in error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        parse_versioned(
            text,
            path,
            ACE_RESULT_FORMAT,
            ACE_RESULT_FORMAT_VERSION,
            "tierbase bench ace",
        )
    }
}

/// Replays `trace` through a cache of `capacity` pages with `policy` and `config` on `device`.
pub fn replay<D: PageDevice>(
    trace: &Trace,
    policy: &str,
    capacity: usize,
    config: AceConfig,
    device: D,
) -> Result<(Measured, String)> {
    let mut cache = PageCache::new(
        by_name(policy, capacity)?,
        capacity,
        config,
        device,
        trace.pages(),
    )?;
    let start = Instant::now();
    for (page, write) in trace.iter() {
        cache.access(page, write)?;
    }
    let wall_s = start.elapsed().as_secs_f64();
    let medium = cache.device().medium();
    Ok((
        Measured {
            config: config.into(),
            stats: cache.stats().clone(),
            runtime_ns: cache.device().elapsed_ns(),
            wall_s,
        },
        medium,
    ))
}

/// A page file made for a real-device run, removed when dropped.
#[derive(Debug)]
struct PageFile {
    path: PathBuf,
    opts: BlockOptions,
    medium: String,
    /// Removes the file when the run ends.
    _cleanup: crate::cleanup::Cleanup,
}

impl PageFile {
    /// Creates the file and writes every page once (each carries its id), so reads hit real
    /// media and not unwritten extents.
    fn create(path: &Path, pages: u64, page_size: u64, queue_depth: u32) -> Result<Self> {
        let opts = BlockOptions {
            queue_depth,
            ..BlockOptions::default()
        };
        let len = pages * page_size;
        // Registered before it exists: removed when the run ends, also on Ctrl-C.
        let (device, cleanup) =
            crate::cleanup::create_registered(path, || Ok(BlockDevice::create(path, len, &opts)?))?;
        let mut file = PageFile {
            path: path.to_path_buf(),
            opts,
            medium: String::new(),
            _cleanup: cleanup,
        };
        const CHUNK: u64 = 1 << 20;
        let chunk = CHUNK.max(page_size) / page_size * page_size;
        let mut buf = AlignedBuf::new(chunk as usize)?;
        let mut offset = 0;
        while offset < len {
            let n = chunk.min(len - offset);
            let mut part = if n == chunk {
                None
            } else {
                Some(AlignedBuf::new(n as usize)?)
            };
            let b = part.as_mut().unwrap_or(&mut buf);
            for (i, page) in b.chunks_mut(page_size as usize).enumerate() {
                let id = offset / page_size + i as u64;
                page[..8].copy_from_slice(&id.to_le_bytes());
            }
            device.submit(&mut [Io::Write { offset, buf: b }])?;
            offset += n;
        }
        device.sync()?;
        let info = device.info();
        let fs = match fs_kind(path) {
            FsKind::Memory => "tmpfs",
            FsKind::Disk => "disk",
        };
        file.medium = format!(
            "{fs} file {} ({}, {})",
            path.display(),
            if info.direct_io {
                "O_DIRECT"
            } else {
                "buffered I/O: the file system refused O_DIRECT"
            },
            match info.engine {
                tierbase::device::IoEngineKind::IoUring => "io_uring",
                _ => "thread pool",
            }
        );
        Ok(file)
    }

    fn open(&self, page_size: u64) -> Result<BlockPages> {
        let device = BlockDevice::open(&self.path, &self.opts)?;
        Ok(BlockPages::new(device, page_size as usize)?)
    }
}

/// One (device, policy, write share): the baseline and ACE for each `n_w`.
#[derive(Clone, Copy, Debug)]
struct Group {
    device: usize,
    policy: usize,
    write: usize,
}

/// Runs the plan. `progress` gets one line per finished run.
pub fn run_ace(plan: &AcePlan, progress: &(dyn Fn(&str) + Sync)) -> Result<AceResultFile> {
    let capacity = plan.validate()?;
    let write_pcts = plan.write_pcts();
    let traces: Vec<Trace> = match &plan.trace {
        TraceSource::Synthetic(spec) => write_pcts
            .iter()
            .map(|&w| Trace::synthetic(spec, w))
            .collect::<Result<_>>()?,
        TraceSource::File { trace, .. } => vec![trace.clone()],
    };
    let mut groups = Vec::new();
    for device in 0..plan.devices.len() {
        for policy in 0..plan.policies.len() {
            for write in 0..write_pcts.len() {
                groups.push(Group {
                    device,
                    policy,
                    write,
                });
            }
        }
    }
    let report = |run: &AceRun| {
        progress(&format!(
            "{} {} {}% writes n_w {}: baseline {}, ACE {} ({:.2}x, misses {:+.4}%)",
            run.device,
            run.policy,
            fmt_pct(run.write_pct),
            run.n_w,
            fmt_ns(run.baseline.runtime_ns),
            fmt_ns(run.ace.runtime_ns),
            run.speedup,
            run.miss_increase_pct
        ));
    };
    let mut results: Vec<Option<Vec<AceRun>>> = vec![None; groups.len()];

    // Virtual time: groups in parallel, deterministic whatever the interleaving.
    let virtual_groups: Vec<usize> = (0..groups.len())
        .filter(|&g| plan.devices[groups[g].device].is_virtual())
        .collect();
    {
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let out: Mutex<Vec<(usize, Result<Vec<AceRun>>)>> = Mutex::new(Vec::new());
        let workers = plan.threads.min(virtual_groups.len()).max(1);
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| {
                    loop {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&g) = virtual_groups.get(i) else {
                            break;
                        };
                        let r = virtual_group(plan, groups[g], &traces, &write_pcts, capacity);
                        match &r {
                            Ok(runs) => runs.iter().for_each(report),
                            Err(_) => failed.store(true, Ordering::Relaxed),
                        }
                        out.lock().unwrap_or_else(|e| e.into_inner()).push((g, r));
                    }
                });
            }
        });
        let mut out = out.into_inner().unwrap_or_else(|e| e.into_inner());
        out.sort_by_key(|(g, _)| *g);
        for (g, r) in out {
            results[g] = Some(r?);
        }
    }

    // Real devices: one page file per device, one run at a time.
    for (d, device) in plan.devices.iter().enumerate() {
        let DeviceTarget::PageFile(path) = &device.target else {
            continue;
        };
        let n_ws = plan.n_ws(device)?;
        let depth = n_ws.iter().copied().max().unwrap_or(1).max(64);
        let depth = u32::try_from(depth.next_power_of_two()).unwrap_or(u32::MAX);
        progress(&format!(
            "{}: creating and filling a page file of {} pages at {}",
            device.name,
            plan.pages(),
            path.display()
        ));
        let file = PageFile::create(path, plan.pages(), plan.page_size, depth)?;
        for (g, group) in groups.iter().enumerate().filter(|(_, g)| g.device == d) {
            let policy = &plan.policies[group.policy];
            let trace = &traces[group.write];
            let mut runs = Vec::new();
            for &n_w in &n_ws {
                let (baseline, _) = replay(
                    trace,
                    policy,
                    capacity,
                    AceConfig::BASELINE,
                    file.open(plan.page_size)?,
                )?;
                let (ace, _) = replay(
                    trace,
                    policy,
                    capacity,
                    plan.ace_config(n_w),
                    file.open(plan.page_size)?,
                )?;
                let run = AceRun::new(
                    device,
                    plan.cost_model,
                    file.medium.clone(),
                    policy,
                    write_pcts[group.write],
                    trace,
                    baseline,
                    ace,
                );
                report(&run);
                runs.push(run);
            }
            results[g] = Some(runs);
        }
    }

    let trace = match &plan.trace {
        TraceSource::Synthetic(s) => TraceInfo {
            kind: "synthetic".into(),
            path: None,
            pages: s.pages,
            ops: s.ops,
            locality: Some(s.locality),
            seed: Some(s.seed),
        },
        TraceSource::File { path, trace } => TraceInfo {
            kind: "file".into(),
            path: Some(path.display().to_string()),
            pages: trace.pages(),
            ops: trace.len() as u64,
            locality: None,
            seed: None,
        },
    };
    Ok(AceResultFile {
        format: ACE_RESULT_FORMAT.to_string(),
        format_version: ACE_RESULT_FORMAT_VERSION,
        generator: format!("tierbase-bench {}", env!("CARGO_PKG_VERSION")),
        created_unix_s: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        host: HostInfo::current(),
        command: plan.command.clone(),
        trace,
        capacity,
        page_size: plan.page_size,
        prefetcher: prefetcher_name(plan.prefetcher).to_string(),
        runs: results.into_iter().flatten().flatten().collect(),
    })
}

fn virtual_group(
    plan: &AcePlan,
    group: Group,
    traces: &[Trace],
    write_pcts: &[f64],
    capacity: usize,
) -> Result<Vec<AceRun>> {
    let device = &plan.devices[group.device];
    let profile = device
        .profile
        .as_ref()
        .ok_or_else(|| BenchError::invalid("a virtual device needs a profile"))?;
    let policy = &plan.policies[group.policy];
    let trace = &traces[group.write];
    let pages = || VirtualPages::with_cost_model(profile, plan.page_size, plan.cost_model);
    let (baseline, medium) = replay(trace, policy, capacity, AceConfig::BASELINE, pages()?)?;
    let mut runs = Vec::new();
    for n_w in plan.n_ws(device)? {
        let (ace, _) = replay(trace, policy, capacity, plan.ace_config(n_w), pages()?)?;
        runs.push(AceRun::new(
            device,
            plan.cost_model,
            medium.clone(),
            policy,
            write_pcts[group.write],
            trace,
            baseline.clone(),
            ace,
        ));
    }
    Ok(runs)
}

fn fmt_ns(ns: u64) -> String {
    ValueFormat::Nanos.format(ns as f64)
}

fn fmt_pct(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Describes the trace, the pool and each device in a few lines (above the table).
pub fn describe(file: &AceResultFile) -> String {
    let mut s = String::new();
    let t = &file.trace;
    let pool_pct = 100.0 * file.capacity as f64 / t.pages.max(1) as f64;
    match (&t.path, t.locality) {
        (Some(path), _) => {
            let _ = writeln!(s, "trace {path}: {} accesses over {} pages", t.ops, t.pages);
        }
        (None, Some(l)) => {
            let _ = writeln!(
                s,
                "synthetic trace: {} accesses over {} pages, {}% of the accesses on {}% of the \
                 pages, seed {}",
                t.ops,
                t.pages,
                l.access_pct,
                l.data_pct,
                t.seed.unwrap_or(0)
            );
        }
        (None, None) => {}
    }
    let _ = writeln!(
        s,
        "pool {} pages ({:.1}% of the pages) of {} B; ACE prefetcher {}",
        file.capacity, pool_pct, file.page_size, file.prefetcher
    );
    let mut seen = BTreeSet::new();
    for r in &file.runs {
        if !seen.insert(r.device.clone()) {
            continue;
        }
        let profile = r.profile.as_ref().map_or_else(String::new, |p| {
            format!(
                "; profile {} (α {:.2}, k_r {}, k_w {})",
                p.name, p.alpha, p.k_r, p.k_w
            )
        });
        let _ = writeln!(
            s,
            "device {}: {}{profile}; runtime = {}",
            r.device,
            r.medium,
            if r.virtual_time {
                "modelled device time"
            } else {
                "wall-clock time in I/O"
            }
        );
    }
    s
}

/// The result table, one line per run.
pub fn format_table(runs: &[AceRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<16} {:<8} {:>6} {:>4} {:>11} {:>11} {:>8} {:>8} {:>10} {:>10} {:>9} {:>10} {:>10} {:>6}",
        "device",
        "policy",
        "write%",
        "n_w",
        "base time",
        "ACE time",
        "speedup",
        "time -%",
        "base miss",
        "ACE miss",
        "miss +%",
        "base wr",
        "ACE wr",
        "batch"
    );
    for r in runs {
        let device = if r.device.chars().count() > 16 {
            let tail: String = r
                .device
                .chars()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("…{tail}")
        } else {
            r.device.clone()
        };
        let _ = writeln!(
            s,
            "{:<16} {:<8} {:>6} {:>4} {:>11} {:>11} {:>7.3}x {:>8.2} {:>10} {:>10} {:>9.4} {:>10} {:>10} {:>6.2}",
            device,
            r.policy,
            fmt_pct(r.write_pct),
            r.n_w,
            fmt_ns(r.baseline.runtime_ns),
            fmt_ns(r.ace.runtime_ns),
            r.speedup,
            r.runtime_reduction_pct,
            r.baseline.stats.misses,
            r.ace.stats.misses,
            r.miss_increase_pct,
            r.baseline.stats.pages_written,
            r.ace.stats.pages_written,
            r.mean_write_batch
        );
    }
    s
}

/// ACE result files on an HTML page (implements [`ExtraResults`], so they join any report).
#[derive(Clone, Debug, Default)]
pub struct AceResults {
    files: Vec<(String, AceResultFile)>,
}

impl AceResults {
    /// Adds a parsed file shown as `source`.
    pub fn push(&mut self, source: impl Into<String>, file: AceResultFile) {
        self.files.push((source.into(), file));
    }
}

impl ExtraResults for AceResults {
    fn add(&mut self, source: &str, text: &str, path: &Path) -> Result<bool> {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
            return Ok(false);
        };
        if value.get("format").and_then(|f| f.as_str()) != Some(ACE_RESULT_FORMAT) {
            return Ok(false);
        }
        self.push(source, AceResultFile::parse(text, path)?);
        Ok(true)
    }

    fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    fn render(&self, html: &mut String) -> SectionCounts {
        let mut counts = SectionCounts::default();
        for (source, file) in &self.files {
            let c = render_file(html, source, file);
            counts.runs += c.runs;
            counts.charts += c.charts;
        }
        counts
    }

    fn footer(&self) -> &str {
        "Generated by <code>tierbase bench ace</code>. Each run replays one trace through the \
         plain replacement policy and through ACE, back to back. Runtime is device time: the \
         PIO model of the profile in virtual time (no real I/O), or wall-clock time in I/O on \
         a real page file. See docs/BENCHMARKS.md."
    }
}

/// Writes the HTML report of `file` (shown as `source`) to `out`; returns the charts drawn.
pub fn write_html(file: &AceResultFile, source: &str, out: &Path, title: &str) -> Result<usize> {
    let mut ace = AceResults::default();
    ace.push(source, file.clone());
    let page = render_with(&[], &ace, title);
    check_writable(out)?;
    std::fs::write(out, &page.html).map_err(|e| BenchError::io("write", out, e))?;
    Ok(page.charts)
}

fn render_file(html: &mut String, source: &str, file: &AceResultFile) -> SectionCounts {
    let _ = write!(
        html,
        "<section class=\"ace\"><h2>ACE: baseline against ACE — {}</h2>",
        escape(source)
    );
    let h = &file.host;
    let _ = write!(
        html,
        "<p><code>{}</code><br>{} on {} ({} CPUs), Linux {}; written {} (unix s)</p><p>",
        escape(&file.command),
        escape(&file.generator),
        escape(&h.cpu_model),
        h.cpus,
        escape(&h.kernel),
        file.created_unix_s
    );
    for line in describe(file).lines() {
        let _ = write!(html, "{}<br>", escape(line));
    }
    html.push_str("</p>");
    html.push_str(
        "<table><tr><th class=\"l\">device</th><th class=\"l\">policy</th><th>write %</th>\
         <th>n_w</th><th>n_e</th><th>baseline runtime</th><th>ACE runtime</th><th>speedup</th>\
         <th>runtime −%</th><th>misses baseline</th><th>misses ACE</th><th>misses +%</th>\
         <th>pages written baseline</th><th>pages written ACE</th><th>mean write batch</th></tr>",
    );
    for r in &file.runs {
        let _ = write!(
            html,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td><b>{:.3}×</b></td><td>{:.2}</td><td>{}</td><td>{}</td>\
             <td>{:.4}</td><td>{}</td><td>{}</td><td>{:.2}</td></tr>",
            escape(&r.device),
            escape(&r.policy),
            fmt_pct(r.write_pct),
            r.n_w,
            r.n_e,
            fmt_ns(r.baseline.runtime_ns),
            fmt_ns(r.ace.runtime_ns),
            r.speedup,
            r.runtime_reduction_pct,
            r.baseline.stats.misses,
            r.ace.stats.misses,
            r.miss_increase_pct,
            r.baseline.stats.pages_written,
            r.ace.stats.pages_written,
            r.mean_write_batch
        );
    }
    html.push_str("</table><div class=\"charts\">");
    let charts = charts(file);
    for c in &charts {
        html.push_str(c);
    }
    html.push_str("</div></section>\n");
    SectionCounts {
        runs: file.runs.len(),
        charts: charts.len(),
    }
}

fn distinct<T: PartialEq + Clone>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// The charts a result file's sweeps allow: runtime and speedup against `n_w` per policy (for
/// each device and write share with more than one `n_w`), and speedup against the write share
/// per device (for each policy, with more than one write share; each device at its profile's
/// `k_w`, or its smallest `n_w`).
pub fn charts(file: &AceResultFile) -> Vec<String> {
    let runs = &file.runs;
    let devices = distinct(runs.iter().map(|r| r.device.clone()));
    let policies = distinct(runs.iter().map(|r| r.policy.clone()));
    let writes = distinct(runs.iter().map(|r| r.write_pct.to_bits()));
    let mut out = Vec::new();

    for device in &devices {
        for &w in &writes {
            let sel: Vec<&AceRun> = runs
                .iter()
                .filter(|r| &r.device == device && r.write_pct.to_bits() == w)
                .collect();
            if distinct(sel.iter().map(|r| r.n_w)).len() < 2 {
                continue;
            }
            let w = f64::from_bits(w);
            let mut runtime = Vec::new();
            let mut speedup = Vec::new();
            for (colour, policy) in policies.iter().enumerate() {
                let mut rs: Vec<&&AceRun> = sel.iter().filter(|r| &r.policy == policy).collect();
                if rs.is_empty() {
                    continue;
                }
                rs.sort_by_key(|r| r.n_w);
                runtime.push(LineSeries {
                    name: format!("ACE-{policy}"),
                    points: rs
                        .iter()
                        .map(|r| (r.n_w as f64, r.ace.runtime_ns as f64))
                        .collect(),
                    colour,
                    dash: 0,
                });
                runtime.push(LineSeries {
                    name: format!("{policy} (baseline)"),
                    points: rs
                        .iter()
                        .map(|r| (r.n_w as f64, r.baseline.runtime_ns as f64))
                        .collect(),
                    colour,
                    dash: 1,
                });
                speedup.push(LineSeries {
                    name: format!("ACE-{policy}"),
                    points: rs.iter().map(|r| (r.n_w as f64, r.speedup)).collect(),
                    colour,
                    dash: 0,
                });
            }
            let title = format!("Runtime vs n_w — {device}, {}% writes", fmt_pct(w));
            out.push(svg::line_chart(&LineChart {
                title: &title,
                x_label: "n_w (pages written back concurrently)",
                y_label: "runtime",
                x_format: ValueFormat::Count,
                y_format: ValueFormat::Nanos,
                integer_x: true,
                log_y: false,
                series: &runtime,
            }));
            let title = format!("Speedup vs n_w — {device}, {}% writes", fmt_pct(w));
            out.push(svg::line_chart(&LineChart {
                title: &title,
                x_label: "n_w (pages written back concurrently)",
                y_label: "speedup (baseline ÷ ACE runtime)",
                x_format: ValueFormat::Count,
                y_format: ValueFormat::Count,
                integer_x: true,
                log_y: false,
                series: &speedup,
            }));
        }
    }

    if writes.len() >= 2 {
        for policy in &policies {
            let mut lines = Vec::new();
            for (colour, device) in devices.iter().enumerate() {
                let rs: Vec<&AceRun> = runs
                    .iter()
                    .filter(|r| &r.policy == policy && &r.device == device)
                    .collect();
                let Some(n_w) = rs
                    .iter()
                    .find_map(|r| r.profile.as_ref().map(|p| p.k_w as usize))
                    .filter(|k| rs.iter().any(|r| r.n_w == *k))
                    .or_else(|| rs.iter().map(|r| r.n_w).min())
                else {
                    continue;
                };
                let mut points: Vec<(f64, f64)> = rs
                    .iter()
                    .filter(|r| r.n_w == n_w)
                    .map(|r| (r.write_pct, r.speedup))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                let alpha = rs
                    .first()
                    .and_then(|r| r.profile.as_ref())
                    .map_or_else(String::new, |p| format!(", α {:.2}", p.alpha));
                lines.push(LineSeries {
                    name: format!("{device} (n_w {n_w}{alpha})"),
                    points,
                    colour,
                    dash: 0,
                });
            }
            let title = format!("Speedup vs write share — ACE-{policy}");
            out.push(svg::line_chart(&LineChart {
                title: &title,
                x_label: "writes (% of accesses)",
                y_label: "speedup (baseline ÷ ACE runtime)",
                x_format: ValueFormat::Count,
                y_format: ValueFormat::Count,
                integer_x: true,
                log_y: false,
                series: &lines,
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locality_parses_and_checks() {
        assert_eq!(Locality::parse("90/10").unwrap(), DEFAULT_LOCALITY);
        assert_eq!(
            Locality::parse("80%/20%").unwrap(),
            Locality {
                access_pct: 80.0,
                data_pct: 20.0
            }
        );
        for bad in ["90", "x/10", "90/0", "101/10", "90/200"] {
            assert!(Locality::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn synthetic_traces_are_deterministic_and_skewed() {
        let spec = SyntheticSpec {
            pages: 10_000,
            ops: 100_000,
            locality: DEFAULT_LOCALITY,
            seed: 7,
        };
        let a = Trace::synthetic(&spec, 30.0).unwrap();
        assert_eq!(a, Trace::synthetic(&spec, 30.0).unwrap());
        let other_seed = Trace::synthetic(&SyntheticSpec { seed: 8, ..spec }, 30.0).unwrap();
        assert_ne!(a, other_seed);
        assert!((a.write_pct() - 30.0).abs() < 1.0, "{}", a.write_pct());
        // The same pages in the same order whatever the write share; writes nest.
        let b = Trace::synthetic(&spec, 60.0).unwrap();
        for ((pa, wa), (pb, wb)) in a.iter().zip(b.iter()) {
            assert_eq!(pa, pb);
            assert!(!wa || wb);
        }
        // 90 % of the accesses go to 1,000 pages.
        let mut counts = vec![0u64; 10_000];
        for (p, _) in a.iter() {
            counts[p as usize] += 1;
        }
        counts.sort_unstable_by(|x, y| y.cmp(x));
        let top: u64 = counts[..1_000].iter().sum();
        let share = top as f64 / 100_000.0;
        assert!((0.89..0.92).contains(&share), "{share}");
    }

    #[test]
    fn recorded_traces_parse_with_line_numbers_in_errors() {
        let p = Path::new("t.trace");
        let t = Trace::parse("# header\nR 3\n\nw 1 # write\nr 0\n", p).unwrap();
        assert_eq!(t.pages(), 4);
        assert_eq!(
            t.iter().collect::<Vec<_>>(),
            [(3, false), (1, true), (0, false)]
        );
        let e = Trace::parse("R 1\nX 2\n", p).unwrap_err().to_string();
        assert!(e.contains("t.trace line 2") && e.contains("\"X 2\""), "{e}");
        let e = Trace::parse("R 1\nW\n", p).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = Trace::parse("R -1\n", p).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("not a number"), "{e}");
        assert!(Trace::parse("# nothing\n", p).is_err());
        assert!(t.clone().with_pages(3).is_err());
        assert_eq!(t.with_pages(10).unwrap().pages(), 10);
    }

    #[test]
    fn lists_parse() {
        assert_eq!(parse_write_pcts("0,50,100").unwrap(), [0.0, 50.0, 100.0]);
        assert!(parse_write_pcts("120").is_err());
        assert_eq!(parse_n_w_list("1,2,4").unwrap(), [1, 2, 4]);
        assert!(parse_n_w_list("0").is_err());
        assert_eq!(parse_policies("all").unwrap().len(), 4);
        let e = parse_policies("lru,arc").unwrap_err().to_string();
        assert!(e.contains("arc") && e.contains("lru-wsr"), "{e}");
    }
}
