//! The block-device profiler: a PIO sweep (three-tier spec sections 3 and 6.2.6).
//!
//! Owns: choosing and checking the target (through `target`), preconditioning, the
//! queue-depth sweep of random reads and writes per access size through
//! [`BlockDevice::submit`], its refinement near the knee, and the result ([`BlockRun`]).
//! Must not touch: the derivation rule (see `derive`), the device layer.
//!
//! # How a point is measured
//!
//! A point is (direction, access size, depth d). It issues a fixed number of I/Os
//! (`ops_per_point`, rounded up to whole batches) at uniformly random aligned offsets and takes
//! the wall time; IOPS = I/Os ÷ time, the median (or, when emulating, the best) of
//! `repetitions`, which are interleaved across the depths of a pass.
//!
//! - **batch** mode (default): rounds of exactly d I/Os, each one `submit` call — d I/Os in
//!   flight at the start of every round, and the round ends when the last completes. This is
//!   the PIO model's own unit ("a batch of up to k_r concurrent reads costs about one read")
//!   and the way the emulator charges a `submit` (the whole batch at one virtual instant), so
//!   an emulated profile is measured back faithfully.
//! - **window** mode (native devices only): one `submit` of many I/Os on a device opened with
//!   queue depth d, which io_uring keeps d-deep as a sliding window (fio's `iodepth`). Not
//!   available with `--emulate`: the emulator schedules a whole `submit` at once regardless of
//!   the queue depth.
//!
//! Preconditioning writes the whole test range sequentially (1 MiB writes, 32 in flight) before
//! the sweep, natively even when emulating, so reads hit allocated, written blocks. The sweep
//! runs reads before writes for each size.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tierbase::device::{
    AlignedBuf, BlockDevice, BlockOptions, DeviceKind, DeviceProfile, DirectIo, FsKind, Io,
    IoEngineKind, fs_kind,
};
use tierbase_bench::rng::Rng;
use tierbase_bench::{BenchError, Result};

use crate::derive::{AlphaK, Knee, derive_alpha_k, derive_knee, refine_depths};
use crate::target::{self, TargetKind};
use crate::{LatencySummary, format_bytes, new_histogram};

/// Default size of the test range (a new file).
pub const DEFAULT_SIZE: u64 = 256 << 20;
/// Default I/Os per point.
pub const DEFAULT_OPS_PER_POINT: u64 = 4096;
/// Default largest depth.
pub const DEFAULT_MAX_DEPTH: u32 = 256;
/// Default access sizes: 4 KiB and the engine's page size (16 KiB).
pub const DEFAULT_SIZES: [u64; 2] = [4096, 16384];
/// Rounds of refinement at most.
const REFINE_ROUNDS: usize = 4;
/// Preconditioning write size.
const PRECONDITION_IO: u64 = 1 << 20;

/// How depth is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueMode {
    /// Rounds of exactly d I/Os per `submit`.
    Batch,
    /// A sliding window of d I/Os in flight.
    Window,
}

impl QueueMode {
    /// Parses `batch` or `window`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "batch" => Ok(QueueMode::Batch),
            "window" => Ok(QueueMode::Window),
            _ => Err(BenchError::invalid(format!(
                "unknown queue mode '{s}': expected batch or window"
            ))),
        }
    }

    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            QueueMode::Batch => "batch",
            QueueMode::Window => "window",
        }
    }
}

/// `O_DIRECT` policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectChoice {
    /// `O_DIRECT` where the file system accepts it, else buffered.
    Auto,
    /// `O_DIRECT` or fail.
    Require,
    /// Buffered (page cache).
    Off,
}

impl From<DirectChoice> for DirectIo {
    fn from(d: DirectChoice) -> Self {
        match d {
            DirectChoice::Auto => DirectIo::Auto,
            DirectChoice::Require => DirectIo::Require,
            DirectChoice::Off => DirectIo::Off,
        }
    }
}

/// How a point's IOPS is estimated from its repetitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Estimator {
    /// I/Os ÷ wall time of the median repetition (the default on native devices).
    Median,
    /// I/Os ÷ wall time of the fastest repetition.
    Best,
    /// Batch mode only: depth ÷ the median time of one round, of the repetition where that is
    /// best (the default when emulating). An emulated round takes exactly the profile's time
    /// unless something else delays it — the native I/O, or the CPU being taken by another
    /// process — so the median round is the profile's as long as fewer than half the rounds
    /// are delayed (bursts of interference), and the best repetition escapes a slow period
    /// that lasted a whole repetition. Delays only ever lengthen a round, never shorten it.
    RoundMedian,
}

impl Estimator {
    /// Parses `median`, `best` or `round-median`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "median" => Ok(Estimator::Median),
            "best" | "max" => Ok(Estimator::Best),
            "round-median" => Ok(Estimator::RoundMedian),
            _ => Err(BenchError::invalid(format!(
                "unknown estimator '{s}': expected median, best or round-median"
            ))),
        }
    }

    /// Name.
    pub fn name(self) -> &'static str {
        match self {
            Estimator::Median => "median",
            Estimator::Best => "best",
            Estimator::RoundMedian => "round-median",
        }
    }
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct BlockConfig {
    /// File, block device, or directory for a temporary file; `None` = a temporary file in
    /// `temp_dir` (or, when emulating, `/dev/shm`, so the native medium is faster than the
    /// emulated one).
    pub path: Option<PathBuf>,
    /// Bytes of the test range (`None`: 256 MiB for a new file, the whole length of an
    /// existing one up to 256 MiB).
    pub size: Option<u64>,
    /// Access sizes (multiples of 4 KiB).
    pub sizes: Vec<u64>,
    /// Depths of the first pass.
    pub depths: Vec<u32>,
    /// Refine the sweep near the knee and the peak.
    pub refine: bool,
    /// I/Os per point (rounded up to whole batches).
    pub ops_per_point: u64,
    /// Repetitions per point; repetitions of all depths of a pass are interleaved (depth by
    /// depth, then again), so a burst of interference hits different depths in each.
    pub repetitions: u32,
    /// Which repetition counts; `None` = best when emulating, else median.
    pub estimator: Option<Estimator>,
    /// Sequential full writes of the range before the sweep.
    pub precondition_passes: u32,
    /// `O_DIRECT` policy.
    pub direct: DirectChoice,
    /// I/O engine.
    pub engine: IoEngineKind,
    /// Emulated profile.
    pub emulate: Option<DeviceProfile>,
    /// Batch or window.
    pub mode: QueueMode,
    /// Knee threshold (0.9).
    pub threshold: f64,
    /// Seed of offsets and data.
    pub seed: u64,
    /// Allow writing to an existing file or a block device.
    pub force: bool,
    /// Keep a file the profiler created at a given path.
    pub keep: bool,
    /// Directory for the temporary file.
    pub temp_dir: Option<PathBuf>,
    /// Sweep a RAM disk instead of a file (needs [`BlockConfig::emulate`]): the emulated
    /// profile's timing with no real I/O under it, so only the CPU can make it run late.
    pub in_memory: bool,
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            path: None,
            size: None,
            sizes: DEFAULT_SIZES.to_vec(),
            depths: powers_of_two(DEFAULT_MAX_DEPTH),
            refine: true,
            ops_per_point: DEFAULT_OPS_PER_POINT,
            repetitions: 1,
            estimator: None,
            precondition_passes: 1,
            direct: DirectChoice::Auto,
            engine: IoEngineKind::Auto,
            emulate: None,
            mode: QueueMode::Batch,
            threshold: crate::derive::DEFAULT_THRESHOLD,
            seed: 0x0050_494f,
            force: false,
            keep: false,
            temp_dir: None,
            in_memory: false,
        }
    }
}

/// 1, 2, 4, … up to and including `max` (and `max` itself if it is not a power of two).
pub fn powers_of_two(max: u32) -> Vec<u32> {
    let mut v = Vec::new();
    let mut d = 1u32;
    while d <= max {
        v.push(d);
        match d.checked_mul(2) {
            Some(n) => d = n,
            None => break,
        }
    }
    if v.last() != Some(&max) && max > 0 {
        v.push(max);
    }
    v
}

impl BlockConfig {
    /// Checks figures that do not need the device.
    pub fn validate(&self) -> Result<()> {
        if self.sizes.is_empty() {
            return Err(BenchError::invalid("no access sizes given"));
        }
        for &s in &self.sizes {
            if s == 0 || s % 4096 != 0 || s > 64 << 20 {
                return Err(BenchError::invalid(format!(
                    "access size {s} must be a multiple of 4 KiB, at most 64 MiB"
                )));
            }
        }
        if self.depths.is_empty() || self.depths.iter().any(|&d| d == 0 || d > 4096) {
            return Err(BenchError::invalid("queue depths must be from 1 to 4096"));
        }
        if self.ops_per_point == 0 {
            return Err(BenchError::invalid("ops per point must be at least 1"));
        }
        if self.repetitions == 0 || self.repetitions > 100 {
            return Err(BenchError::invalid("repetitions must be from 1 to 100"));
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(BenchError::invalid(format!(
                "threshold must be in (0, 1], got {}",
                self.threshold
            )));
        }
        if let Some(p) = &self.emulate {
            if p.kind != DeviceKind::Block {
                return Err(BenchError::invalid(format!(
                    "profile '{}' is a {} device; the block profiler emulates block profiles",
                    p.name, p.kind
                )));
            }
            if self.mode == QueueMode::Window {
                return Err(BenchError::invalid(
                    "--mode window cannot be emulated: the emulator charges a whole submit \
                     batch at one instant, whatever the queue depth; use --mode batch",
                ));
            }
        }
        if self.in_memory {
            if self.emulate.is_none() {
                return Err(BenchError::invalid(
                    "--in-memory needs --emulate <profile>: a RAM disk alone measures memcpy",
                ));
            }
            if self.path.is_some() {
                return Err(BenchError::invalid(
                    "--in-memory and --path exclude each other (the test range lives in memory)",
                ));
            }
        }
        if self.mode == QueueMode::Window && self.estimator == Some(Estimator::RoundMedian) {
            return Err(BenchError::invalid(
                "the round-median estimator needs --mode batch (a window has no rounds)",
            ));
        }
        if let Some(s) = self.size
            && s < self.sizes.iter().copied().max().unwrap_or(4096)
        {
            return Err(BenchError::invalid(format!(
                "size {} is smaller than the largest access size",
                format_bytes(s)
            )));
        }
        Ok(())
    }

    /// The estimator in effect.
    pub fn estimator(&self) -> Estimator {
        self.estimator
            .unwrap_or(if self.emulate.is_some() && self.mode == QueueMode::Batch {
                Estimator::RoundMedian
            } else {
                Estimator::Median
            })
    }

    fn max_depth(&self) -> u32 {
        self.depths.iter().copied().max().unwrap_or(1)
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockPoint {
    /// Queue depth (I/Os in flight).
    pub depth: u32,
    /// I/Os per repetition.
    pub ops: u64,
    /// Seconds of the repetition that counts.
    pub elapsed_s: f64,
    /// I/Os per second (the repetition that counts: median or best).
    pub iops: f64,
    /// MB/s (10⁶ B) at that rate.
    pub mb_s: f64,
    /// IOPS of every repetition.
    pub rep_iops: Vec<f64>,
    /// Mean time an I/O was in flight: depth ÷ IOPS (Little's law), ns.
    pub mean_latency_ns: f64,
    /// Batch mode: completion time of whole rounds of `depth` I/Os (at depth 1, of single
    /// I/Os), all repetitions.
    pub round_latency_ns: Option<LatencySummary>,
}

/// Throughput against depth for one direction and size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockCurve {
    /// `read` or `write`.
    pub direction: String,
    /// Bytes per I/O.
    pub access_size: u64,
    /// Points by depth.
    pub points: Vec<BlockPoint>,
    /// The knee of this curve.
    pub knee: Option<Knee>,
}

impl BlockCurve {
    /// `(depth, iops)` pairs.
    pub fn pairs(&self) -> Vec<(u32, f64)> {
        self.points.iter().map(|p| (p.depth, p.iops)).collect()
    }
}

/// α and k for one access size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockDerived {
    /// Bytes per I/O.
    pub access_size: u64,
    /// The figures.
    pub figures: AlphaK,
    /// Latency of one read at depth 1 (1 / IOPS), ns.
    pub read_qd1_latency_ns: Option<f64>,
    /// Latency of one write at depth 1, ns.
    pub write_qd1_latency_ns: Option<f64>,
    /// Highest read MB/s on any point of this size.
    pub read_mb_s: f64,
    /// Highest write MB/s.
    pub write_mb_s: f64,
}

/// Emulation figures of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EmulationSummary {
    /// Profile name.
    pub profile: String,
    /// Its α, k_r, k_w (what the sweep should measure back).
    pub alpha: f64,
    /// k_r.
    pub k_r: u32,
    /// k_w.
    pub k_w: u32,
    /// Batches measured.
    pub batches: u64,
    /// Batches that ended after their emulated end (nothing was added): the native I/O, or
    /// the CPU being busy elsewhere, was slower than the profile. With the `best` estimator
    /// a few are harmless; if most batches of a point are late, that point measures the native
    /// device, not the profile.
    pub native_slower: u64,
}

/// Share of late operations (block: batches) above which an emulated run did not reproduce
/// its profile (the medium under the emulator or the CPU could not keep up): such a run is
/// not saved.
pub const LATE_BATCH_LIMIT: f64 = 0.01;

/// Late batches a sweep may have whatever its length (a short sweep on a busy machine).
pub const LATE_BATCH_MIN: u64 = 3;

/// Share of a memory run's measured time that late operations may add before the run is
/// taken not to reproduce its profile (half the 10 % a profile must measure back within: a
/// late load still takes at least the profile's latency, only its overshoot is not the
/// profile's, so a share is a bound on the error).
pub const LATE_TIME_LIMIT: f64 = 0.05;

/// `Err` with what went wrong and what to do when `late_share` — the share of the measurement
/// that is not the profile's — is above `limit`; `detail` says what was late,
/// `medium` what lies under the emulation of `profile`. One rule for block sweeps (share of
/// batches that ended late) and memory runs (share of the run's time that late operations
/// added).
pub fn emulation_kept_up(
    profile: &str,
    (late_share, limit): (f64, f64),
    detail: &str,
    medium: &str,
) -> std::result::Result<(), String> {
    if late_share <= limit {
        return Ok(());
    }
    let advice = if medium.starts_with("in memory") {
        "rerun when nothing else is using the CPU"
    } else if detail.contains("batches") {
        "rerun with --in-memory (no real I/O) when nothing else is using the CPU"
    } else {
        "the profile is faster than this machine's native memory plus the emulator's \
         bookkeeping, or the CPU was busy: emulate a slower profile, or rerun when nothing \
         else is using the CPU"
    };
    Err(format!(
        "the emulation of {profile} did not keep up: {detail} ({:.1}%, limit {:.0}%), so the \
         figures are partly those of the medium under it ({medium}) or of a busy CPU; {advice}",
        100.0 * late_share,
        100.0 * limit
    ))
}

impl EmulationSummary {
    /// Share of batches that ended after their emulated end.
    pub fn late_share(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.native_slower as f64 / self.batches as f64
        }
    }

    /// `Err` with what went wrong and what to do when more than [`LATE_BATCH_LIMIT`] of the
    /// batches ended late (measured on `medium`) — and more than [`LATE_BATCH_MIN`] of them:
    /// in a short sweep one preempted batch is not a device that cannot keep up.
    pub fn kept_up(&self, medium: &str) -> std::result::Result<(), String> {
        if self.native_slower < LATE_BATCH_MIN {
            return Ok(());
        }
        emulation_kept_up(
            &self.profile,
            (self.late_share(), LATE_BATCH_LIMIT),
            &format!(
                "{} of {} batches ended after their emulated end",
                self.native_slower, self.batches
            ),
            medium,
        )
    }
}

/// A block-device profile run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BlockRun {
    /// The file or device.
    pub path: PathBuf,
    /// Whether the profiler created (and removed) it.
    pub temporary: bool,
    /// `disk file, O_DIRECT`, `tmpfs file, buffered`, `block device, O_DIRECT`.
    pub medium: String,
    /// Whether `O_DIRECT` was in effect.
    pub direct_io: bool,
    /// `io-uring` or `threads`.
    pub engine: String,
    /// Why not io_uring, if not.
    pub engine_note: Option<String>,
    /// `emulated <profile>` or null.
    pub emulated: Option<String>,
    /// Emulation details.
    pub emulation: Option<EmulationSummary>,
    /// batch or window.
    pub mode: QueueMode,
    /// Bytes of the test range.
    pub size: u64,
    /// Preconditioning passes and their seconds.
    pub precondition_passes: u32,
    /// Seconds spent preconditioning.
    pub precondition_s: f64,
    /// I/Os per point.
    pub ops_per_point: u64,
    /// Repetitions per point.
    pub repetitions: u32,
    /// Which repetition counts.
    pub estimator: Estimator,
    /// Knee threshold.
    pub threshold: f64,
    /// Curves: per size, read then write.
    pub curves: Vec<BlockCurve>,
    /// α and k per size.
    pub derived: Vec<BlockDerived>,
    /// Seconds of the whole sweep.
    pub sweep_s: f64,
}

impl BlockRun {
    /// Medium plus emulation, for every printed figure.
    pub fn label(&self) -> String {
        match &self.emulated {
            Some(e) => format!("{}, {e}", self.medium),
            None => format!("{}, native", self.medium),
        }
    }

    /// The figures of the smallest access size (what `--save` uses).
    pub fn primary(&self) -> Option<&BlockDerived> {
        self.derived.iter().min_by_key(|d| d.access_size)
    }
}

/// Progress of [`run_block`].
#[derive(Debug)]
pub enum BlockEvent<'a> {
    /// The target is ready: path, medium.
    Target(&'a Path, &'a str),
    /// Preconditioning pass done (pass, seconds).
    Preconditioned(u32, f64),
    /// A point was measured.
    Point(&'a str, u64, &'a BlockPoint),
    /// A curve is complete.
    Curve(&'a BlockCurve),
}

/// Runs the sweep.
pub fn run_block(cfg: &BlockConfig, mut on_event: impl FnMut(BlockEvent<'_>)) -> Result<BlockRun> {
    cfg.validate()?;
    // Emulated waits sleep; keep their wake-ups precise while this thread measures.
    let _slack = tierbase::device::raw::precise_timer_slack();
    if cfg.in_memory {
        let size = cfg.size.unwrap_or(DEFAULT_SIZE).next_multiple_of(4096);
        let dev = BlockDevice::in_memory("memory", size, &sweep_options(cfg))?;
        let medium = "in memory, no real I/O".to_string();
        let path = PathBuf::from("memory");
        on_event(BlockEvent::Target(&path, &medium));
        return measure(cfg, &dev, size, (&path, true, medium), 0.0, &mut on_event);
    }
    let default_dir = match (&cfg.temp_dir, &cfg.emulate) {
        (Some(d), _) => d.clone(),
        (None, Some(_)) if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    };
    let t = target::resolve(cfg.path.as_deref(), &default_dir, cfg.force, true)?;
    let max_io = cfg.sizes.iter().copied().max().unwrap_or(4096);
    let precond_opts = BlockOptions {
        direct: cfg.direct.into(),
        engine: cfg.engine,
        queue_depth: 32,
        block_size: 4096,
        emulate: None,
        ..BlockOptions::default()
    };
    let (size, cleanup) = match t.kind {
        TargetKind::New => {
            let size = cfg.size.unwrap_or(DEFAULT_SIZE).next_multiple_of(4096);
            let (_dev, c) = tierbase_bench::cleanup::create_registered(&t.path, || {
                Ok(BlockDevice::create(&t.path, size, &precond_opts)?)
            })?;
            let c = if cfg.keep && !t.temporary {
                c.keep();
                None
            } else {
                Some(c)
            };
            (size, c)
        }
        TargetKind::ExistingFile | TargetKind::BlockDevice => {
            let dev = BlockDevice::open(&t.path, &precond_opts)?;
            let len = dev.len() / 4096 * 4096;
            let size = match cfg.size {
                Some(s) if s > len => {
                    return Err(BenchError::invalid(format!(
                        "{} holds {}, less than the requested --size {}",
                        t.path.display(),
                        format_bytes(len),
                        format_bytes(s)
                    )));
                }
                Some(s) => s / 4096 * 4096,
                None => len.min(DEFAULT_SIZE),
            };
            (size, None)
        }
    };
    if size < max_io {
        return Err(BenchError::invalid(format!(
            "test range of {} is smaller than one {} I/O",
            format_bytes(size),
            format_bytes(max_io)
        )));
    }
    let result = sweep_target(cfg, &t, size, &precond_opts, &mut on_event);
    drop(cleanup);
    result
}

fn sweep_target(
    cfg: &BlockConfig,
    t: &target::Target,
    size: u64,
    precond_opts: &BlockOptions,
    on_event: &mut impl FnMut(BlockEvent<'_>),
) -> Result<BlockRun> {
    if cfg.precondition_passes == 0 && t.kind == TargetKind::New {
        // Its reads would be of blocks never written, which the file system answers without
        // touching the device (alpha 45 on a virtual disk).
        return Err(BenchError::invalid(format!(
            "--precondition 0 on a file the profiler creates ({}) would measure unwritten \
             blocks, which the file system answers without device I/O: give at least one \
             pass, or --path a file whose range is written",
            t.path.display()
        )));
    }
    // Precondition natively.
    let mut precondition_s = 0.0;
    {
        let dev = BlockDevice::open(&t.path, precond_opts)?;
        let mut rng = Rng::derive(cfg.seed, 0x5052_4543, 0);
        let chunk = PRECONDITION_IO.min(size);
        let bufs: Vec<AlignedBuf> = (0..8)
            .map(|_| {
                let mut b = AlignedBuf::new(chunk as usize)?;
                rng.fill_bytes(&mut b);
                Ok(b)
            })
            .collect::<Result<_>>()?;
        for pass in 0..cfg.precondition_passes {
            let t0 = Instant::now();
            let mut off = 0u64;
            while off < size {
                let mut ios = Vec::with_capacity(32);
                while off < size && ios.len() < 32 {
                    let n = chunk.min(size - off);
                    if n < chunk {
                        // Tail shorter than a chunk: whole 4 KiB blocks of a fresh buffer.
                        break;
                    }
                    ios.push(Io::Write {
                        offset: off,
                        buf: &bufs[ios.len() % bufs.len()],
                    });
                    off += n;
                }
                if ios.is_empty() {
                    break;
                }
                dev.submit(&mut ios)?;
            }
            if off < size {
                let mut tail = AlignedBuf::new((size - off) as usize)?;
                rng.fill_bytes(&mut tail);
                dev.write_at(off, &tail)?;
            }
            dev.sync()?;
            let s = t0.elapsed().as_secs_f64();
            precondition_s += s;
            on_event(BlockEvent::Preconditioned(pass + 1, s));
        }
    }
    let dev = BlockDevice::open(&t.path, &sweep_options(cfg))?;
    let medium = medium_label(
        &t.path,
        t.kind == TargetKind::BlockDevice,
        dev.info().direct_io,
    );
    on_event(BlockEvent::Target(&t.path, &medium));
    measure(
        cfg,
        &dev,
        size,
        (&t.path, t.temporary, medium),
        precondition_s,
        on_event,
    )
}

/// How the device is opened for the sweep itself.
fn sweep_options(cfg: &BlockConfig) -> BlockOptions {
    BlockOptions {
        direct: cfg.direct.into(),
        engine: cfg.engine,
        queue_depth: cfg.max_depth().max(1),
        block_size: 4096,
        emulate: cfg.emulate.clone(),
        ..BlockOptions::default()
    }
}

/// The sweep over `dev` (`target`: its path, whether it is temporary, its medium).
fn measure(
    cfg: &BlockConfig,
    dev: &BlockDevice,
    size: u64,
    target: (&Path, bool, String),
    precondition_s: f64,
    on_event: &mut impl FnMut(BlockEvent<'_>),
) -> Result<BlockRun> {
    let (path, temporary, medium) = target;
    let info = dev.info();
    let mut state = Sweep {
        cfg,
        dev,
        size,
        rng: Rng::derive(cfg.seed, 0x5357_4545, 0),
        read_bufs: Vec::new(),
        write_bufs: Vec::new(),
        batches: 0,
    };
    let t0 = Instant::now();
    let mut curves = Vec::new();
    let mut derived = Vec::new();
    let native_slower_before = dev.emulator().map_or(0, |e| e.stats().native_slower);
    for &access in &cfg.sizes {
        let mut pair = Vec::new();
        for dir in [Dir::Read, Dir::Write] {
            let curve = state.curve(dir, access, on_event)?;
            on_event(BlockEvent::Curve(&curve));
            pair.push(curve);
        }
        let (r, w) = (&pair[0], &pair[1]);
        if let Some(figures) = derive_alpha_k(&r.pairs(), &w.pairs(), cfg.threshold) {
            let qd1 = |c: &BlockCurve| {
                c.points
                    .iter()
                    .find(|p| p.depth == 1 && p.iops > 0.0)
                    .map(|p| 1e9 / p.iops)
            };
            let best = |c: &BlockCurve| c.points.iter().map(|p| p.mb_s).fold(0.0, f64::max);
            derived.push(BlockDerived {
                access_size: access,
                figures,
                read_qd1_latency_ns: qd1(r),
                write_qd1_latency_ns: qd1(w),
                read_mb_s: best(r),
                write_mb_s: best(w),
            });
        }
        curves.extend(pair);
    }
    let sweep_s = t0.elapsed().as_secs_f64();
    let emulation = match (dev.emulator(), &cfg.emulate) {
        (Some(e), Some(p)) => Some(EmulationSummary {
            profile: p.name.clone(),
            alpha: p.alpha,
            k_r: p.k_r,
            k_w: p.k_w,
            batches: state.batches,
            native_slower: e.stats().native_slower - native_slower_before,
        }),
        _ => None,
    };
    Ok(BlockRun {
        path: path.to_path_buf(),
        temporary,
        medium,
        direct_io: info.direct_io,
        engine: match info.engine {
            IoEngineKind::IoUring => "io-uring".into(),
            IoEngineKind::Threads => "threads".into(),
            IoEngineKind::Auto => "auto".into(),
        },
        engine_note: info.engine_note,
        emulated: dev.emulator().map(|e| e.label()),
        emulation,
        mode: cfg.mode,
        size,
        precondition_passes: cfg.precondition_passes,
        precondition_s,
        ops_per_point: cfg.ops_per_point,
        repetitions: cfg.repetitions,
        estimator: cfg.estimator(),
        threshold: cfg.threshold,
        curves,
        derived,
        sweep_s,
    })
}

/// `disk file, O_DIRECT` and the like.
pub fn medium_label(path: &Path, block_device: bool, direct: bool) -> String {
    let kind = if block_device {
        "block device"
    } else {
        match fs_kind(path) {
            FsKind::Memory => "tmpfs file",
            FsKind::Disk => "disk file",
        }
    };
    format!("{kind}, {}", if direct { "O_DIRECT" } else { "buffered" })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Read,
    Write,
}

impl Dir {
    fn name(self) -> &'static str {
        match self {
            Dir::Read => "read",
            Dir::Write => "write",
        }
    }
}

struct Sweep<'a> {
    cfg: &'a BlockConfig,
    dev: &'a BlockDevice,
    size: u64,
    rng: Rng,
    read_bufs: Vec<AlignedBuf>,
    write_bufs: Vec<AlignedBuf>,
    batches: u64,
}

impl Sweep<'_> {
    fn curve(
        &mut self,
        dir: Dir,
        access: u64,
        on_event: &mut impl FnMut(BlockEvent<'_>),
    ) -> Result<BlockCurve> {
        self.read_bufs.clear();
        self.write_bufs.clear();
        let mut points: Vec<BlockPoint> = Vec::new();
        let mut todo: Vec<u32> = self.cfg.depths.clone();
        todo.sort_unstable();
        todo.dedup();
        let mut round = 0;
        loop {
            let mut reps: Vec<Vec<Rep>> = todo.iter().map(|_| Vec::new()).collect();
            for _ in 0..self.cfg.repetitions {
                for (i, &d) in todo.iter().enumerate() {
                    let r = self.measure(dir, access, d)?;
                    if let Some(v) = reps.get_mut(i) {
                        v.push(r);
                    }
                }
            }
            for (d, r) in todo.iter().zip(reps) {
                let p = self.summarize(*d, access, r);
                on_event(BlockEvent::Point(dir.name(), access, &p));
                points.push(p);
            }
            if !self.cfg.refine || round >= REFINE_ROUNDS {
                break;
            }
            round += 1;
            let pairs: Vec<(u32, f64)> = points.iter().map(|p| (p.depth, p.iops)).collect();
            todo = refine_depths(&pairs, self.cfg.threshold, self.cfg.max_depth());
            if todo.is_empty() {
                break;
            }
        }
        points.sort_by_key(|p| p.depth);
        let pairs: Vec<(u32, f64)> = points.iter().map(|p| (p.depth, p.iops)).collect();
        Ok(BlockCurve {
            direction: dir.name().into(),
            access_size: access,
            knee: derive_knee(&pairs, self.cfg.threshold),
            points,
        })
    }

    fn ensure_bufs(&mut self, dir: Dir, access: u64, n: usize) -> Result<()> {
        match dir {
            Dir::Read => {
                while self.read_bufs.len() < n {
                    self.read_bufs.push(AlignedBuf::new(access as usize)?);
                }
            }
            Dir::Write => {
                // Distinct random contents, so a device cannot deduplicate or compress them.
                while self.write_bufs.len() < n.min(64) {
                    let mut b = AlignedBuf::new(access as usize)?;
                    self.rng.fill_bytes(&mut b);
                    self.write_bufs.push(b);
                }
            }
        }
        Ok(())
    }

    /// One repetition of a point: `ops_per_point` I/Os (whole batches) at random offsets.
    fn measure(&mut self, dir: Dir, access: u64, depth: u32) -> Result<Rep> {
        let d = depth as usize;
        let slots = self.size / access;
        let total = self.cfg.ops_per_point.div_ceil(u64::from(depth)) * u64::from(depth);
        let mut hist = new_histogram();
        let window = self.cfg.mode == QueueMode::Window;
        // Window mode: a device whose io_uring keeps `depth` in flight; chunks of up to 4096.
        let window_dev = if window {
            Some(BlockDevice::open(
                self.dev.path(),
                &BlockOptions {
                    direct: self.cfg.direct.into(),
                    engine: self.cfg.engine,
                    queue_depth: depth,
                    block_size: 4096,
                    emulate: None,
                    ..BlockOptions::default()
                },
            )?)
        } else {
            None
        };
        let chunk = if window {
            (16 * d).clamp(64, 4096).min(total as usize)
        } else {
            d
        };
        self.ensure_bufs(dir, access, chunk)?;
        let mut left = total;
        let t0 = Instant::now();
        while left > 0 {
            let n = (left as usize).min(chunk);
            let offsets: Vec<u64> = (0..n).map(|_| self.rng.below(slots) * access).collect();
            let mut ios: Vec<Io<'_>> = match dir {
                Dir::Read => self
                    .read_bufs
                    .iter_mut()
                    .zip(&offsets)
                    .map(|(buf, &offset)| Io::Read { offset, buf })
                    .collect(),
                Dir::Write => offsets
                    .iter()
                    .enumerate()
                    .map(|(i, &offset)| Io::Write {
                        offset,
                        buf: &self.write_bufs[i % self.write_bufs.len()],
                    })
                    .collect(),
            };
            let started = Instant::now();
            match &window_dev {
                Some(w) => w.submit(&mut ios)?,
                None => {
                    self.dev.submit(&mut ios)?;
                    self.batches += 1;
                }
            }
            if !window {
                let _ = hist.record(started.elapsed().as_nanos() as u64);
            }
            left -= n as u64;
        }
        Ok(Rep {
            ops: total,
            secs: t0.elapsed().as_secs_f64(),
            hist,
        })
    }

    fn summarize(&self, depth: u32, access: u64, reps: Vec<Rep>) -> BlockPoint {
        let rate = |r: &Rep| {
            if r.secs > 0.0 {
                r.ops as f64 / r.secs
            } else {
                0.0
            }
        };
        let rep_iops: Vec<f64> = reps.iter().map(rate).collect();
        let mut order: Vec<usize> = (0..reps.len()).collect();
        order.sort_by(|&a, &b| rep_iops[a].total_cmp(&rep_iops[b]));
        let estimator = self.cfg.estimator();
        let pick = match estimator {
            Estimator::Best => order.last(),
            Estimator::Median | Estimator::RoundMedian => order.get(order.len() / 2),
        }
        .copied()
        .unwrap_or(0);
        let mut hist = new_histogram();
        for r in &reps {
            let _ = hist.add(&r.hist);
        }
        let round_rate = |r: &Rep| {
            let p50 = r.hist.value_at_quantile(0.5);
            (!r.hist.is_empty() && p50 > 0).then(|| f64::from(depth) * 1e9 / p50 as f64)
        };
        let iops = match estimator {
            Estimator::RoundMedian => reps
                .iter()
                .filter_map(round_rate)
                .fold(None, |best: Option<f64>, v| {
                    Some(best.map_or(v, |b| b.max(v)))
                })
                .unwrap_or_else(|| rep_iops.get(pick).copied().unwrap_or(0.0)),
            _ => rep_iops.get(pick).copied().unwrap_or(0.0),
        };
        BlockPoint {
            depth,
            ops: reps.get(pick).map_or(0, |r| r.ops),
            elapsed_s: reps.get(pick).map_or(0.0, |r| r.secs),
            iops,
            mb_s: iops * access as f64 / 1e6,
            rep_iops,
            mean_latency_ns: if iops > 0.0 {
                f64::from(depth) * 1e9 / iops
            } else {
                0.0
            },
            round_latency_ns: LatencySummary::of(&hist),
        }
    }
}

/// One repetition of one point.
struct Rep {
    ops: u64,
    secs: f64,
    hist: hdrhistogram::Histogram<u64>,
}
