//! The crash harness: scripted power loss at every persist point, injected I/O errors, and
//! the expected state of a store after a real `kill -9`.
//!
//! Store-agnostic: every tool drives a script given as a closure and hands what the script
//! acknowledged, with the bytes media holds afterwards, to a check closure. The harness knows
//! regions ([`PmemRegion`], the crash simulator), simulated block devices ([`SimPower`],
//! [`BlockCrashConfig`]) and the crate's [`Error`]; it knows nothing of any store, so every
//! store's tests use the same copy.
//!
//! - [`PowerLoss`] runs a script once per persist point `n` on a crash-simulated region that
//!   loses power when its `n`-th fence completes (`CrashSimConfig::crash_after_fences`), after a
//!   crash-free reference run that says how many persist points the script has. Optionally it
//!   samples the points (long scripts), lets unflushed words survive with a probability
//!   (`CrashSimConfig::unflushed_survival`, cycled over a list), and replays a single point
//!   (`TIERBASE_CRASH_POINT=n`).
//! - [`FaultInjection`] runs a script once per persist point `n` on a region whose flushes all
//!   fail once `n` fences took effect (`CrashSimConfig::fail_flushes_after`, a dying device).
//!   The script logs its calls' results in a [`FaultLog`]; the harness checks that the first
//!   failure is followed only by [`Error::ReadOnly`] naming it, and hands both the durable
//!   image and the working bytes to the check (a reopen after a power loss, and after a
//!   process restart).
//! - [`BlockPowerLoss`] and [`BlockFaultInjection`] do the same for stores on block devices
//!   ([`crate::device::BlockDevice::simulated`]): the script builds its devices (page file,
//!   logs) on one [`SimPower`] the harness hands it, which loses power — tearing unsynced writes
//!   per 512-byte sector with a probability — once `n` syncs over all of them completed
//!   ([`BlockCrashConfig::crash_after_syncs`]), or fails every write and sync from then on
//!   ([`BlockCrashConfig::fail_syncs_after`]). The script returns whatever the check needs
//!   (typically what was acknowledged and each device's
//!   [`durable_image`](crate::device::BlockDevice::durable_image)).
//! - All four choose their points alike, from one [`PointSchedule`] set through the
//!   [`Schedule`] trait (`survival`, `seed`, `first_point`, `sample`, `every_point_fails`).
//! - [`ExpectedState`] tracks, per key, the values a store may hold after a crash that cut
//!   concurrent writers short: every acknowledged write, plus every write in flight (which may
//!   or may not have happened). Threads report `begin` before and `ack` after each write, in
//!   process (under a lock) or as text lines from a child process ([`ExpectedState::apply_line`]).
//!
//! ```
//! use tierbase::device::RegionOptions;
//! use tierbase::testing::crash::{PowerLoss, ScriptEnd};
//!
//! // A "store" that writes two 8-byte words, persisting each; acknowledged = words persisted.
//! let report = PowerLoss::new(RegionOptions::default()).region_len(4096).run(
//!     |region, _point| {
//!         let mut acked = 0u64;
//!         for i in 0..2u64 {
//!             region.write(i * 64, &(i + 1).to_le_bytes()).unwrap();
//!             region.persist(i * 64, 8).unwrap();
//!             if !region.crashed() {
//!                 acked += 1;
//!             }
//!         }
//!         ScriptEnd::new(acked, &region)
//!     },
//!     |crashed| {
//!         for i in 0..crashed.acked {
//!             let at = i as usize * 64;
//!             assert_eq!(crashed.image[at..at + 8], (i + 1).to_le_bytes(), "{}", crashed.point);
//!         }
//!     },
//! );
//! assert_eq!(report.total_points, 2);
//! assert_eq!(report.runs, 4); // the reference run and points 0, 1 and 2
//! ```
//!
//! The same on a block device: a "log" that appends two blocks, syncing each.
//!
//! ```
//! use tierbase::device::{AlignedBuf, BlockDevice};
//! use tierbase::testing::crash::{BlockPowerLoss, Schedule};
//!
//! let report = BlockPowerLoss::new().survival(&[0.0, 0.5]).run(
//!     |power, _point| {
//!         let log = BlockDevice::simulated("log", 4 * 4096, 4096, power).unwrap();
//!         let mut acked = 0usize;
//!         for i in 0..2u8 {
//!             let mut block = AlignedBuf::new(4096).unwrap();
//!             block.fill(i + 1);
//!             log.write_at(u64::from(i) * 4096, &block).unwrap();
//!             log.sync().unwrap();
//!             if !power.crashed() {
//!                 acked += 1; // synced before the power loss
//!             }
//!         }
//!         power.cut(); // lose power after the script too (tearing what is unsynced)
//!         (acked, log.durable_image().unwrap())
//!     },
//!     |(acked, image), point| {
//!         for (i, block) in image.chunks(4096).take(acked).enumerate() {
//!             assert!(block.iter().all(|&b| b == i as u8 + 1), "block {i} at {point:?}");
//!         }
//!     },
//! );
//! assert_eq!(report.total_points, 2); // two syncs
//! assert_eq!(report.runs, 4); // the reference run and points 0, 1 and 2
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex};

use crate::device::{BlockCrashConfig, CrashSimConfig, PmemRegion, RegionOptions, SimPower};
use crate::error::{Error, Result};

/// Environment variable that restricts [`PowerLoss::run`], [`FaultInjection::run`],
/// [`BlockPowerLoss::run`] and [`BlockFaultInjection::run`] to one persist (or sync) point
/// (`TIERBASE_CRASH_POINT=17`), to replay a failure.
pub const REPLAY_ENV: &str = "TIERBASE_CRASH_POINT";

// ----- choosing points ---------------------------------------------------------------------

/// splitmix64 step: a small, seedable, dependency-free generator for the harness's choices.
pub(super) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The persist points `first..=total` to visit: all of them, or — when `max_runs` is smaller
/// than their number — `max_runs` of them, the first and the last always included and the
/// others one chosen at random (from `seed`) in each of `max_runs - 2` equal strata between.
/// Sorted, without duplicates.
pub fn crash_points(first: u64, total: u64, max_runs: Option<usize>, seed: u64) -> Vec<u64> {
    if first > total {
        return Vec::new();
    }
    let count = total - first + 1;
    match max_runs {
        Some(max) if (max as u64) < count => {
            let mut out = BTreeSet::new();
            if max >= 1 {
                out.insert(first);
            }
            if max >= 2 {
                out.insert(total);
            }
            let inner = max.saturating_sub(2) as u64;
            let span = count.saturating_sub(2);
            let mut rng = seed;
            for s in 0..inner {
                let lo = first + 1 + span * s / inner;
                let hi = first + 1 + span * (s + 1) / inner;
                let width = hi.saturating_sub(lo).max(1);
                out.insert((lo + splitmix(&mut rng) % width).min(total));
            }
            out.into_iter().collect()
        }
        _ => (first..=total).collect(),
    }
}

/// The point to replay alone, if [`REPLAY_ENV`] is set.
fn replay_point() -> Option<u64> {
    let v = std::env::var(REPLAY_ENV).ok()?;
    match v.trim().parse() {
        Ok(n) => Some(n),
        Err(_) => panic!("{REPLAY_ENV}={v:?}: expected a persist point number"),
    }
}

/// Which points a runner visits, shared by [`PowerLoss`], [`FaultInjection`],
/// [`BlockPowerLoss`] and [`BlockFaultInjection`] (set through [`Schedule`]), so that they
/// choose points, samples and seeds alike.
#[derive(Clone, Debug)]
pub struct PointSchedule {
    first: u64,
    max_runs: Option<usize>,
    seed: u64,
    survival: Vec<f64>,
    every_point_fails: bool,
}

impl Default for PointSchedule {
    fn default() -> Self {
        PointSchedule {
            first: 0,
            max_runs: None,
            seed: 0,
            survival: vec![0.0],
            every_point_fails: false,
        }
    }
}

impl PointSchedule {
    /// The survival probability of point `n` (`None`: the reference run).
    fn survival_at(&self, n: Option<u64>) -> f64 {
        let i = n.unwrap_or(0) as usize % self.survival.len().max(1);
        self.survival.get(i).copied().unwrap_or(0.0)
    }

    /// The seed of point `n`'s survival choices.
    fn seed_at(&self, n: Option<u64>) -> u64 {
        let mut s = self.seed ^ n.unwrap_or(u64::MAX).rotate_left(29);
        splitmix(&mut s)
    }

    /// Calls `one(point, reference total)` for the reference run (`None`) and then each
    /// chosen point, or for the [`REPLAY_ENV`] point alone (saying so after `replaying`);
    /// `one` returns the run's point count. Returns the reference run's (0 when replaying).
    fn visit(&self, replaying: &str, mut one: impl FnMut(Option<u64>, Option<u64>) -> u64) -> u64 {
        if let Some(n) = replay_point() {
            eprintln!("{replaying} {n} only ({REPLAY_ENV})");
            one(Some(n), None);
            return 0;
        }
        let total = one(None, None);
        for n in crash_points(self.first, total, self.max_runs, self.seed) {
            one(Some(n), Some(total));
        }
        total
    }
}

/// The [`PointSchedule`] setters of every runner (import it to call them).
pub trait Schedule: Sized {
    /// The runner's schedule.
    fn schedule_mut(&mut self) -> &mut PointSchedule;

    /// Power-loss runners: survival probabilities of unflushed data (per 8-byte word on a
    /// region, per 512-byte sector on a block device), used in turn: point `n` gets
    /// `survival[n % survival.len()]` (e.g. `[0.0, 0.5]` alternates). Empty means `[0.0]`.
    fn survival(mut self, survival: &[f64]) -> Self {
        self.schedule_mut().survival = if survival.is_empty() {
            vec![0.0]
        } else {
            survival.to_vec()
        };
        self
    }

    /// Seed of sampling and of the survival choices.
    fn seed(mut self, seed: u64) -> Self {
        self.schedule_mut().seed = seed;
        self
    }

    /// The first point to crash or fail at (default 0: at the first fence or sync).
    fn first_point(mut self, first: u64) -> Self {
        self.schedule_mut().first = first;
        self
    }

    /// Visits at most `max_runs` points (see [`crash_points`]) when the script has more.
    fn sample(mut self, max_runs: usize) -> Self {
        self.schedule_mut().max_runs = Some(max_runs);
        self
    }

    /// Fault runners: requires a failure in every run whose fault comes before the reference
    /// run's last point (right for deterministic, single-threaded scripts that log their
    /// calls).
    fn every_point_fails(mut self, required: bool) -> Self {
        self.schedule_mut().every_point_fails = required;
        self
    }
}

/// A panic payload as text.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-text panic)".to_string()
    }
}

/// Runs `f`; if it panics, panics again with `context` (where the run crashed, how to replay
/// it) in front of the original message.
fn with_context<T>(context: impl Fn() -> String, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = panic_text(payload.as_ref());
            eprintln!("crash harness: failed at {}", context());
            resume_unwind(Box::new(format!("{}: {msg}", context())))
        }
    }
}

// ----- power loss at every persist point ---------------------------------------------------

/// Where a run loses power.
#[derive(Clone, Debug, PartialEq)]
pub struct CrashPoint {
    /// `Some(n)`: power is lost as the `n`-th fence completes (`Some(0)`: before the first).
    /// `None`: the crash-free reference run; power is lost after the script ended.
    pub after_fences: Option<u64>,
    /// Probability that a written but unflushed 8-byte word reaches media anyway.
    pub unflushed_survival: f64,
    /// Seed of the survival choice.
    pub seed: u64,
}

impl CrashPoint {
    /// The simulator configuration of this point.
    pub fn config(&self) -> CrashSimConfig {
        CrashSimConfig {
            crash_after_fences: self.after_fences,
            unflushed_survival: self.unflushed_survival,
            seed: self.seed,
            ..CrashSimConfig::default()
        }
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.after_fences {
            Some(n) => write!(f, "power loss at persist point {n}")?,
            None => write!(f, "power loss after the script (reference run)")?,
        }
        if self.unflushed_survival > 0.0 {
            write!(
                f,
                " (unflushed words survive with p = {}, seed {:#x})",
                self.unflushed_survival, self.seed
            )?;
        }
        if let Some(n) = self.after_fences {
            write!(f, " [replay: {REPLAY_ENV}={n}]")?;
        }
        Ok(())
    }
}

/// What a script hands back: what it saw acknowledged, and the region's media image.
pub struct ScriptEnd<A> {
    acked: A,
    image: Vec<u8>,
    during_script: bool,
    persist_points: u64,
}

impl<A> ScriptEnd<A> {
    /// Ends a run. `acked` must hold only what was acknowledged *before* the power loss: a call
    /// that returned while `region.crashed()` was still false completed all its persists in
    /// time; one that returned later was in flight. Power is lost now if the configured point
    /// has not come, and the media image is taken.
    ///
    /// # Panics
    /// If `region` is not crash-simulated.
    pub fn new(acked: A, region: &PmemRegion) -> Self {
        let during_script = region.crashed();
        let persist_points = region.persist_points();
        let image = region
            .power_loss()
            .expect("the crash harness needs a crash-simulated region");
        ScriptEnd {
            acked,
            image,
            during_script,
            persist_points,
        }
    }
}

impl<A: fmt::Debug> fmt::Debug for ScriptEnd<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptEnd")
            .field("acked", &self.acked)
            .field("image_bytes", &self.image.len())
            .field("during_script", &self.during_script)
            .field("persist_points", &self.persist_points)
            .finish()
    }
}

/// A run that lost power, as the check sees it.
pub struct Crashed<A> {
    /// Where power was lost.
    pub point: CrashPoint,
    /// What the script saw acknowledged before the power loss.
    pub acked: A,
    /// What media holds after the power loss.
    pub image: Vec<u8>,
    /// Whether power was lost while the script ran (at the configured point) rather than
    /// after it (the point lay beyond the run's last fence, or this is the reference run).
    pub during_script: bool,
    /// Fences the run passed before it ended (with background threads this varies from run
    /// to run).
    pub persist_points: u64,
}

impl<A> Crashed<A> {
    /// "Reboots": a crash-simulated region (with no crash configured) whose memory and media
    /// hold the image.
    pub fn reboot(&self, opts: &RegionOptions) -> Result<PmemRegion> {
        PmemRegion::from_image(&self.image, CrashSimConfig::default(), opts)
    }
}

impl<A: fmt::Debug> fmt::Debug for Crashed<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Crashed")
            .field("point", &self.point)
            .field("acked", &self.acked)
            .field("image_bytes", &self.image.len())
            .field("during_script", &self.during_script)
            .field("persist_points", &self.persist_points)
            .finish()
    }
}

/// What [`PowerLoss::run`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Persist points of the crash-free reference run.
    pub total_points: u64,
    /// Runs made, the reference run included.
    pub runs: usize,
    /// Runs whose power loss came while the script ran.
    pub crashed_in_script: usize,
}

/// Power loss at every persist point of a script (see the module docs).
///
/// [`PowerLoss::run`] first runs the script crash-free and counts its persist points `N`
/// (the reference run, checked with power lost at its end), then once for each point
/// `n` in `first..=N` (or a sample of them, [`Schedule::sample`]) on a fresh simulated
/// region that loses power when its `n`-th fence completes, and calls the check with what the
/// script acknowledged and the image. A panic in the script or the check is re-raised with
/// the point in front (and how to replay it alone).
///
/// Scripts with background threads have a varying number of persist points: choose points
/// from the reference run's count, and let the check treat a run whose point lay beyond its
/// end ([`Crashed::during_script`] false) as a power loss after the script. Such scripts
/// must keep the survival probability at 0: the simulator merges unflushed words from a copy
/// of working memory taken *after* the crash fence, while the other threads go on writing,
/// so it can let a store made after the power loss reach media without the data it depends
/// on. A call counts as acknowledged only if it returned while `region.crashed()` was still
/// false.
#[derive(Clone, Debug)]
pub struct PowerLoss {
    regions: SimRegions,
    schedule: PointSchedule,
}

/// The simulated regions a harness makes, one a run: their initial length and options.
#[derive(Clone, Debug)]
struct SimRegions {
    len: u64,
    opts: RegionOptions,
}

impl SimRegions {
    /// Regions of 0 initial bytes (the script grows them) made with `opts`.
    fn new(opts: RegionOptions) -> Self {
        SimRegions { len: 0, opts }
    }

    /// A fresh region that crashes or fails as `cfg` says.
    fn create(&self, cfg: CrashSimConfig) -> PmemRegion {
        PmemRegion::simulated(self.len, cfg, &self.opts)
            .unwrap_or_else(|e| panic!("create a simulated region: {e}"))
    }
}

impl Schedule for PowerLoss {
    fn schedule_mut(&mut self) -> &mut PointSchedule {
        &mut self.schedule
    }
}

impl PowerLoss {
    /// Every point from 0, only fenced data surviving, regions of 0 initial bytes (the script
    /// grows them) made with `region`.
    pub fn new(region: RegionOptions) -> Self {
        let (regions, schedule) = (SimRegions::new(region), PointSchedule::default());
        PowerLoss { regions, schedule }
    }

    /// Initial length of each simulated region.
    pub fn region_len(mut self, len: u64) -> Self {
        self.regions.len = len;
        self
    }

    /// The configuration of point `n`.
    pub fn point(&self, n: Option<u64>) -> CrashPoint {
        CrashPoint {
            after_fences: n,
            unflushed_survival: self.schedule.survival_at(n),
            seed: self.schedule.seed_at(n),
        }
    }

    /// Runs `script` at the reference point and at every chosen point, calling `check` after
    /// each run. The script gets a fresh simulated region and the point, and ends with
    /// [`ScriptEnd::new`].
    pub fn run<A>(
        &self,
        mut script: impl FnMut(PmemRegion, &CrashPoint) -> ScriptEnd<A>,
        mut check: impl FnMut(Crashed<A>),
    ) -> PowerLossReport {
        let mut report = PowerLossReport::default();
        let one = |n: Option<u64>, _total: Option<u64>| -> u64 {
            let point = self.point(n);
            let ctx = point.to_string();
            with_context(
                || ctx.clone(),
                || {
                    let end = script(self.regions.create(point.config()), &point);
                    let points = end.persist_points;
                    report.runs += 1;
                    if end.during_script {
                        report.crashed_in_script += 1;
                    }
                    check(Crashed {
                        point: point.clone(),
                        acked: end.acked,
                        image: end.image,
                        during_script: end.during_script,
                        persist_points: points,
                    });
                    points
                },
            )
        };
        report.total_points = self
            .schedule
            .visit("crash harness: replaying persist point", one);
        report
    }
}

// ----- injected I/O errors -----------------------------------------------------------------

/// Where a run's flushes start failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultPoint {
    /// `Some(n)`: every flush fails once `n` fences took effect. `None`: the fault-free
    /// reference run.
    pub fail_after_fences: Option<u64>,
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fail_after_fences {
            Some(n) => write!(
                f,
                "flushes failing after persist point {n} [replay: {REPLAY_ENV}={n}]"
            ),
            None => write!(f, "no injected fault (reference run)"),
        }
    }
}

/// A script's log of its calls under fault injection (see [`FaultInjection`]): pass every
/// result through it, and [`FaultLog::capture`] the region before the store goes away.
#[derive(Debug, Default)]
pub struct FaultLog {
    failure: Option<Error>,
    failed_on_open: bool,
    later: Vec<Error>,
    unexpected_success: Vec<String>,
    durable: Option<Vec<u8>>,
    working: Option<Vec<u8>>,
    fences: u64,
}

impl FaultLog {
    /// Passes an open or create's result through; an error is the run's failure (no write can
    /// follow it, so none is required).
    pub fn open<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                if self.failure.is_none() {
                    self.failed_on_open = true;
                    self.failure = Some(e);
                } else {
                    self.later.push(e);
                }
                None
            }
        }
    }

    /// Passes a write's result through. The first error is the run's failure; every later
    /// one must be [`Error::ReadOnly`] naming it, and a write that succeeds after the failure
    /// is reported by the harness.
    pub fn write<T>(&mut self, r: Result<T>) -> Option<T> {
        match r {
            Ok(v) => {
                if let Some(f) = &self.failure {
                    self.unexpected_success
                        .push(format!("a write succeeded after the failure ({f})"));
                }
                Some(v)
            }
            Err(e) => {
                if self.failure.is_none() {
                    self.failure = Some(e);
                } else {
                    self.later.push(e);
                }
                None
            }
        }
    }

    /// Whether a call failed.
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    /// The first error, if any.
    pub fn failure(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    /// Errors returned after the first one.
    pub fn later(&self) -> &[Error] {
        &self.later
    }

    /// Takes the region's working bytes (what a restarted process finds) and its durable image
    /// (what media holds after a power loss, which this causes). Call once, at the end. Only
    /// a run whose open or create failed (and took the region with it) may end without it;
    /// the check is then not called.
    ///
    /// # Panics
    /// If `region` is not crash-simulated.
    pub fn capture(&mut self, region: &PmemRegion) {
        self.keep(
            region.persist_points(),
            region.snapshot(),
            region.power_loss(),
        );
    }

    /// [`FaultLog::capture`] for a region split into pages (an NVM-direct store's).
    ///
    /// # Panics
    /// If `region` is not crash-simulated.
    pub fn capture_paged(&mut self, region: &crate::device::PagedRegion) {
        self.keep(
            region.persist_points(),
            region.snapshot(),
            region.power_loss(),
        );
    }

    /// Keeps a captured region's fences, working bytes and media image (`None`: the region
    /// is not crash-simulated, which fault injection needs).
    fn keep(&mut self, fences: u64, working: Vec<u8>, durable: Option<Vec<u8>>) {
        self.fences = fences;
        self.working = Some(working);
        self.durable = Some(durable.expect("fault injection needs a crash-simulated region"));
    }

    /// The harness's rules for what the store said (see [`FaultInjection`]).
    fn problems(&self) -> Vec<String> {
        let mut out = self.unexpected_success.clone();
        let Some(first) = &self.failure else {
            return out;
        };
        // The original failure's text, as a read-only error must name it.
        let original = match first {
            Error::ReadOnly { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        if !self.failed_on_open && self.later.is_empty() {
            out.push(format!(
                "the script made no write after the failure ({first}); try at least one, to \
                 check that the store refuses it"
            ));
        }
        for e in &self.later {
            match e {
                Error::ReadOnly { reason, .. } if reason.contains(&original) => {}
                Error::ReadOnly { reason, .. } => out.push(format!(
                    "read-only error does not name the original failure: reason {reason:?}, \
                     original {original:?}"
                )),
                other => out.push(format!(
                    "after the failure ({first}) a write failed with {other:?} instead of \
                     Error::ReadOnly"
                )),
            }
        }
        out
    }

    /// The harness's verdict on a run whose script ended, after [`FaultLog::problems`]: a
    /// run that saw the failure counts in `report`; with `every_point_fails`, a run whose
    /// fault came at point `n` before the reference run's last (`total`) must have seen it
    /// (`"{faulted} after n of total {points} points, but no call reported an error"`); the
    /// fault-free run (`n` `None`) must not fail.
    fn judge(
        &self,
        n: Option<u64>,
        total: Option<u64>,
        every_point_fails: bool,
        faulted: &str,
        points: &str,
        report: &mut FaultReport,
    ) {
        if self.failed() {
            report.failed_runs += 1;
        } else if let (true, Some(n), Some(total)) = (every_point_fails, n, total) {
            assert!(
                n >= total,
                "{faulted} after {n} of {total} {points} points, but no call reported an error"
            );
        }
        if n.is_none() {
            assert!(
                !self.failed(),
                "the fault-free run failed: {:?}",
                self.failure()
            );
        }
    }
}

/// Which bytes a reopen after a fault starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Media {
    /// The durable image: the device died and power was lost.
    Durable,
    /// The working memory: the process restarted (the file holds everything written).
    Working,
}

/// A faulted run, as the check sees it (called once per [`Media`]).
#[derive(Debug)]
pub struct Faulted<'a, A> {
    /// Where flushes started failing.
    pub point: FaultPoint,
    /// What the script saw acknowledged.
    pub acked: &'a A,
    /// The first error the script saw, if any.
    pub failure: Option<&'a Error>,
    /// Which bytes these are.
    pub media: Media,
    /// The bytes to reopen from.
    pub bytes: &'a [u8],
}

impl<A> Faulted<'_, A> {
    /// A healthy crash-simulated region holding [`Faulted::bytes`].
    pub fn reboot(&self, opts: &RegionOptions) -> Result<PmemRegion> {
        PmemRegion::from_image(self.bytes, CrashSimConfig::default(), opts)
    }
}

/// What [`FaultInjection::run`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultReport {
    /// Persist points of the fault-free reference run.
    pub total_points: u64,
    /// Runs made, the reference run included.
    pub runs: usize,
    /// Runs in which a call failed.
    pub failed_runs: usize,
}

/// Injected I/O errors at every persist point of a script (see the module docs).
///
/// For each point `n` (after a fault-free reference run that counts them), the script gets a
/// fresh simulated region whose flushes fail once `n` fences took effect, and a [`FaultLog`].
/// The harness then checks, panicking with the point in front:
/// - every error after the first is [`Error::ReadOnly`] whose reason contains the first
///   error's text (or equals it, when the first was itself read-only because background work
///   hit the fault), and at least one write was tried after a failed write;
/// - no write succeeded after the failure;
/// - with [`Schedule::every_point_fails`]: a run with its fault before the reference
///   run's last persist point saw a failure (for deterministic scripts);
///
/// and calls the check twice, with the durable image and with the working bytes.
#[derive(Clone, Debug)]
pub struct FaultInjection {
    regions: SimRegions,
    schedule: PointSchedule,
}

impl Schedule for FaultInjection {
    fn schedule_mut(&mut self) -> &mut PointSchedule {
        &mut self.schedule
    }
}

impl FaultInjection {
    /// Every point from 0, regions of 0 initial bytes made with `region`.
    pub fn new(region: RegionOptions) -> Self {
        let (regions, schedule) = (SimRegions::new(region), PointSchedule::default());
        FaultInjection { regions, schedule }
    }

    /// Initial length of each simulated region.
    pub fn region_len(mut self, len: u64) -> Self {
        self.regions.len = len;
        self
    }

    /// Runs `script` fault-free and then at every chosen point, checking each run (see the
    /// type's docs) and calling `check` with each run's durable image and working bytes.
    pub fn run<A>(
        &self,
        mut script: impl FnMut(PmemRegion, &mut FaultLog) -> A,
        mut check: impl FnMut(&Faulted<'_, A>),
    ) -> FaultReport {
        let mut report = FaultReport::default();
        let one = |n: Option<u64>, total: Option<u64>| -> u64 {
            let point = FaultPoint {
                fail_after_fences: n,
            };
            with_context(
                || point.to_string(),
                || {
                    let cfg = CrashSimConfig {
                        fail_flushes_after: point.fail_after_fences,
                        ..CrashSimConfig::default()
                    };
                    let mut log = FaultLog::default();
                    let acked = script(self.regions.create(cfg), &mut log);
                    report.runs += 1;
                    let problems = log.problems();
                    assert!(problems.is_empty(), "{}", problems.join("\n"));
                    let captured = (log.durable.take(), log.working.take());
                    let (Some(durable), Some(working)) = captured else {
                        // A store whose creation failed may have taken the region with it.
                        assert!(
                            log.failed_on_open,
                            "the script must call FaultLog::capture before it ends"
                        );
                        report.failed_runs += 1;
                        return log.fences;
                    };
                    let every = self.schedule.every_point_fails;
                    log.judge(n, total, every, "flushes failed", "persist", &mut report);
                    let fences = log.fences;
                    for (media, bytes) in [(Media::Durable, &durable), (Media::Working, &working)] {
                        check(&Faulted {
                            point,
                            acked: &acked,
                            failure: log.failure(),
                            media,
                            bytes,
                        });
                    }
                    fences
                },
            )
        };
        report.total_points = self
            .schedule
            .visit("fault harness: replaying persist point", one);
        report
    }
}

// ----- block devices: power loss and injected errors at every sync point -------------------

/// A block run's configuration, as the harness names it in a failure.
fn describe_block_point(cfg: &BlockCrashConfig) -> String {
    let mut s = match (cfg.crash_after_syncs, cfg.fail_syncs_after) {
        (Some(n), _) => format!("power loss at sync point {n}"),
        (None, Some(n)) => format!("writes and syncs failing after sync point {n}"),
        (None, None) => "no power loss or fault during the script (reference run)".to_string(),
    };
    if cfg.crash_after_syncs.is_some() && cfg.torn_survival > 0.0 {
        s.push_str(&format!(
            " (unsynced sectors survive with p = {}, seed {:#x})",
            cfg.torn_survival, cfg.seed
        ));
    }
    if let Some(n) = cfg.crash_after_syncs.or(cfg.fail_syncs_after) {
        s.push_str(&format!(" [replay: {REPLAY_ENV}={n}]"));
    }
    s
}

/// Power loss at every sync point of a script on simulated block devices (see the module docs).
///
/// [`BlockPowerLoss::run`] first runs the script on a power source that never fails (the
/// reference run) and counts the syncs `N` it completed ([`SimPower::syncs`], over every device
/// the script made on it), then once for each point `n` in `first..=N` (or a sample of them,
/// [`Schedule::sample`]) on a fresh power source that loses power at the sync call after
/// the `n`-th completed one ([`BlockCrashConfig::crash_after_syncs`]; that call does not take
/// effect). Every run's result goes to the check with its point (`None` for the reference
/// run). A panic in the script or the check is re-raised with the point in front (and how to
/// replay it alone, [`REPLAY_ENV`]).
///
/// The script makes its devices with [`crate::device::BlockDevice::simulated`] on the power
/// source it is given, counts a call as acknowledged only if it returned while
/// [`SimPower::crashed`] was still false, and should end with [`SimPower::cut`] before it takes
/// [`durable_image`](crate::device::BlockDevice::durable_image)s, so that a run whose point
/// lies beyond its last sync (the reference run, point `N`) also loses power, tearing what it
/// left unsynced. To "reboot", the check opens
/// [`BlockDevice::simulated_from`](crate::device::BlockDevice::simulated_from) on the images.
#[derive(Clone, Debug, Default)]
pub struct BlockPowerLoss {
    schedule: PointSchedule,
}

impl Schedule for BlockPowerLoss {
    fn schedule_mut(&mut self) -> &mut PointSchedule {
        &mut self.schedule
    }
}

impl BlockPowerLoss {
    /// Every point from 0, only synced data surviving.
    pub fn new() -> Self {
        Self::default()
    }

    /// The power source configuration of point `n` (`None`: the reference run, which never
    /// loses power on its own; its survival probability applies to [`SimPower::cut`]).
    pub fn config(&self, n: Option<u64>) -> BlockCrashConfig {
        BlockCrashConfig {
            crash_after_syncs: n,
            torn_survival: self.schedule.survival_at(n),
            seed: self.schedule.seed_at(n),
            fail_syncs_after: None,
        }
    }

    /// Runs `script` at the reference point and at every chosen point, calling `check` with
    /// each run's result. Returns the number of sync points of the reference run
    /// ([`PowerLossReport::total_points`]), the runs made, and how many of them lost power at
    /// their sync point (rather than at the script's [`SimPower::cut`]).
    pub fn run<T>(
        &self,
        mut script: impl FnMut(&Arc<SimPower>, Option<u64>) -> T,
        mut check: impl FnMut(T, Option<u64>),
    ) -> PowerLossReport {
        let mut report = PowerLossReport::default();
        let one = |n: Option<u64>, _total: Option<u64>| -> u64 {
            let cfg = self.config(n);
            let ctx = describe_block_point(&cfg);
            with_context(
                || ctx.clone(),
                || {
                    let power = SimPower::new(cfg);
                    let out = script(&power, n);
                    report.runs += 1;
                    if power.crashed_at_sync() {
                        report.crashed_in_script += 1;
                    }
                    let syncs = power.syncs();
                    check(out, n);
                    syncs
                },
            )
        };
        report.total_points = self
            .schedule
            .visit("crash harness: replaying sync point", one);
        report
    }
}

/// Injected I/O errors at every sync point of a script on simulated block devices.
///
/// For each point `n` (after a fault-free reference run that counts the syncs), the script
/// gets a fresh power source whose devices fail every write and sync with an I/O error
/// (`EIO`) once `n` syncs completed ([`BlockCrashConfig::fail_syncs_after`]), a [`FaultLog`]
/// and the point (`None` for the reference run). Pass the store's results through the log
/// ([`FaultLog::open`], [`FaultLog::write`]); the harness then checks, as
/// [`FaultInjection`] does, that every error after the first is [`Error::ReadOnly`] naming
/// it, that at least one write was tried after a failed write, and that no write succeeded
/// after the failure; with [`Schedule::every_point_fails`], also that a run whose
/// fault came before the reference run's last sync saw a failure. A script that never uses
/// the log is held to none of this. [`FaultLog::capture`] is for regions and not needed here:
/// the script returns what the check needs, typically each device's
/// [`durable_image`](crate::device::BlockDevice::durable_image) (the device died and power
/// was lost) and [`working_image`](crate::device::BlockDevice::working_image) (the process
/// restarted).
#[derive(Clone, Debug, Default)]
pub struct BlockFaultInjection {
    schedule: PointSchedule,
}

impl Schedule for BlockFaultInjection {
    fn schedule_mut(&mut self) -> &mut PointSchedule {
        &mut self.schedule
    }
}

impl BlockFaultInjection {
    /// Every point from 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The power source configuration of point `n` (`None`: the fault-free reference run).
    pub fn config(&self, n: Option<u64>) -> BlockCrashConfig {
        BlockCrashConfig {
            fail_syncs_after: n,
            ..BlockCrashConfig::default()
        }
    }

    /// Runs `script` fault-free and then at every chosen point, checking each run's log (see
    /// the type's docs) and calling `check` with its result.
    pub fn run<T>(
        &self,
        mut script: impl FnMut(&Arc<SimPower>, &mut FaultLog, Option<u64>) -> T,
        mut check: impl FnMut(T, Option<u64>),
    ) -> FaultReport {
        let mut report = FaultReport::default();
        let one = |n: Option<u64>, total: Option<u64>| -> u64 {
            let cfg = self.config(n);
            let ctx = describe_block_point(&cfg);
            with_context(
                || ctx.clone(),
                || {
                    let power = SimPower::new(cfg);
                    let mut log = FaultLog::default();
                    let out = script(&power, &mut log, n);
                    report.runs += 1;
                    let problems = log.problems();
                    assert!(problems.is_empty(), "{}", problems.join("\n"));
                    let every = self.schedule.every_point_fails;
                    log.judge(
                        n,
                        total,
                        every,
                        "writes and syncs failed",
                        "sync",
                        &mut report,
                    );
                    let syncs = power.syncs();
                    check(out, n);
                    syncs
                },
            )
        };
        report.total_points = self
            .schedule
            .visit("fault harness: replaying sync point", one);
        report
    }
}

// ----- expected state after a crash with writes in flight ----------------------------------

/// A write, as a thread announces it before calling the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write<V> {
    /// Insert or replace.
    Put(V),
    /// Replace only if present.
    Update(V),
    /// Remove.
    Delete,
}

/// One tracked write of a key.
#[derive(Clone, Debug)]
struct Tracked<V> {
    thread: u64,
    begin: u64,
    /// Event time of the acknowledgement; `None` while (or if forever) in flight.
    end: Option<u64>,
    /// The state it leaves: `Some(value)` or `None` (deleted).
    effect: Option<V>,
    kind: &'static str,
    /// It wrote nothing (an update of an absent key, an abandoned call). Kept in place, so
    /// that the positions other threads' in-flight writes hold stay valid.
    ignored: bool,
}

/// The values a store may hold after a crash, per key (see the module docs).
///
/// Feed it, in real-time order, [`ExpectedState::begin`] just before each write and
/// [`ExpectedState::ack`] right after it returned (from several threads: behind a lock, or
/// as the lines of one pipe). After the crash, [`ExpectedState::check`] compares the state
/// found with what is possible:
/// - a key may hold the value of any write still in flight at the crash (it may have taken
///   effect), or of any acknowledged write that no other acknowledged write of the key
///   *began after* (those were certainly ordered after it);
/// - if no write of a key was acknowledged, its state from before the history (the initial
///   state) is possible too;
/// - an update acknowledged as "absent" wrote nothing and is ignored; a delete leaves the key
///   absent.
///
/// This is sound for any linearizable store (it never rejects a correct outcome) and exact
/// for a key written by one thread at a time. [`ExpectedState::settle`] makes the checked
/// state the initial state of the next round.
#[derive(Clone, Debug)]
pub struct ExpectedState<K, V> {
    initial: BTreeMap<K, V>,
    writes: BTreeMap<K, Vec<Tracked<V>>>,
    in_flight: HashMap<u64, (K, usize)>,
    clock: u64,
    acked: u64,
}

impl<K: Ord + Clone + fmt::Debug, V: Clone + Eq + fmt::Debug> Default for ExpectedState<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Clone + fmt::Debug, V: Clone + Eq + fmt::Debug> ExpectedState<K, V> {
    /// An empty store.
    pub fn new() -> Self {
        Self::with_initial(BTreeMap::new())
    }

    /// A store that holds `initial` before the tracked writes.
    pub fn with_initial(initial: BTreeMap<K, V>) -> Self {
        ExpectedState {
            initial,
            writes: BTreeMap::new(),
            in_flight: HashMap::new(),
            clock: 0,
            acked: 0,
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// `thread` is about to call the store with `write` on `key`. A thread has at most one
    /// write in flight.
    pub fn begin(
        &mut self,
        thread: u64,
        key: K,
        write: Write<V>,
    ) -> std::result::Result<(), String> {
        if let Some((k, _)) = self.in_flight.get(&thread) {
            return Err(format!(
                "thread {thread} begins a write of {key:?} while its write of {k:?} is in flight"
            ));
        }
        let begin = self.tick();
        let (effect, kind) = match write {
            Write::Put(v) => (Some(v), "put"),
            Write::Update(v) => (Some(v), "update"),
            Write::Delete => (None, "delete"),
        };
        let list = self.writes.entry(key.clone()).or_default();
        list.push(Tracked {
            thread,
            begin,
            end: None,
            effect,
            kind,
            ignored: false,
        });
        let at = list.len() - 1;
        self.in_flight.insert(thread, (key, at));
        Ok(())
    }

    /// `thread`'s write returned successfully. `applied`: for an update, whether the key
    /// existed (an update of an absent key writes nothing); ignored for puts and deletes.
    pub fn ack(&mut self, thread: u64, applied: bool) -> std::result::Result<(), String> {
        let Some((key, at)) = self.in_flight.remove(&thread) else {
            return Err(format!(
                "thread {thread} acknowledges a write it never began"
            ));
        };
        let end = self.tick();
        self.acked += 1;
        if let Some(w) = self.writes.get_mut(&key).and_then(|l| l.get_mut(at)) {
            w.end = Some(end);
            w.ignored = w.kind == "update" && !applied;
        }
        Ok(())
    }

    /// `thread`'s write failed without effect (e.g. a rejected argument): forget it. Do not
    /// use this for a write whose effect is unknown; leave that in flight.
    pub fn abandon(&mut self, thread: u64) {
        if let Some((key, at)) = self.in_flight.remove(&thread)
            && let Some(w) = self.writes.get_mut(&key).and_then(|l| l.get_mut(at))
        {
            w.ignored = true;
        }
    }

    /// Writes acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.acked
    }

    /// Writes in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Every key with an initial state or a tracked write.
    pub fn keys(&self) -> BTreeSet<K> {
        self.initial
            .keys()
            .chain(self.writes.keys())
            .cloned()
            .collect()
    }

    /// The states `key` may be in after a crash now (`None`: absent).
    pub fn possible(&self, key: &K) -> Vec<Option<&V>> {
        let writes = || {
            self.writes
                .get(key)
                .into_iter()
                .flatten()
                .filter(|w| !w.ignored)
        };
        let last_acked_begin = writes().filter(|w| w.end.is_some()).map(|w| w.begin).max();
        let mut out = Vec::new();
        if last_acked_begin.is_none() {
            out.push(self.initial.get(key));
        }
        for w in writes() {
            let candidate = match (w.end, last_acked_begin) {
                (None, _) | (_, None) => true,
                (Some(end), Some(b)) => end > b,
            };
            if candidate && !out.contains(&w.effect.as_ref()) {
                out.push(w.effect.as_ref());
            }
        }
        out
    }

    /// Compares the complete state found after a crash (every key the store holds) with what
    /// is possible. The error lists every key that is wrong (the first few in detail: the
    /// value found, the possible ones and the key's tracked writes).
    pub fn check(&self, actual: &BTreeMap<K, V>) -> std::result::Result<(), String> {
        let mut keys = self.keys();
        keys.extend(actual.keys().cloned());
        let mut wrong = Vec::new();
        for k in &keys {
            let found = actual.get(k);
            let possible = self.possible(k);
            if !possible.contains(&found) {
                wrong.push((k, found, possible));
            }
        }
        if wrong.is_empty() {
            return Ok(());
        }
        let mut msg = format!(
            "{} of {} keys hold a state no crash can produce:",
            wrong.len(),
            keys.len()
        );
        for (k, found, possible) in wrong.iter().take(8) {
            msg.push_str(&format!(
                "\n  key {k:?}: found {found:?}, possible {possible:?}, initial {:?}",
                self.initial.get(k)
            ));
            for w in self.writes.get(*k).into_iter().flatten() {
                msg.push_str(&format!(
                    "\n    thread {} {} {:?}: begun at event {}, {}{}",
                    w.thread,
                    w.kind,
                    w.effect,
                    w.begin,
                    match w.end {
                        Some(e) => format!("acknowledged at event {e}"),
                        None => "in flight".to_string(),
                    },
                    if w.ignored { " (wrote nothing)" } else { "" }
                ));
            }
        }
        Err(msg)
    }

    /// Starts the next round from `actual` (a state [`ExpectedState::check`] accepted): it
    /// becomes the initial state, and the tracked writes are forgotten.
    pub fn settle(&mut self, actual: BTreeMap<K, V>) {
        self.initial = actual;
        self.writes.clear();
        self.in_flight.clear();
    }
}

/// Runs `writers` threads at once in a crash script, `writer(t, tracker)` for `t` in
/// `0..writers`, all reporting to one fresh [`ExpectedState`] behind a lock (each write's
/// [`begin`](ExpectedState::begin) just before the call, its [`ack`](ExpectedState::ack)
/// only if the call returned before the power loss); returns that state once every writer
/// returned.
pub fn tracked_writers<K, V>(
    writers: u64,
    writer: impl Fn(u64, &Mutex<ExpectedState<K, V>>) + Sync,
) -> ExpectedState<K, V>
where
    K: Ord + Clone + fmt::Debug + Send,
    V: Clone + Eq + fmt::Debug + Send,
{
    let tracker = Mutex::new(ExpectedState::new());
    std::thread::scope(|s| {
        for t in 0..writers {
            let (writer, tracker) = (&writer, &tracker);
            s.spawn(move || writer(t, tracker));
        }
    });
    tracker
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`ExpectedState`] of a child process that reports its writes as text lines: keys and
/// values are tokens without whitespace (a value token typically names how to regenerate the
/// value, e.g. a seed and a length, so that 64 KiB values need not be printed).
pub type TextState = ExpectedState<String, String>;

/// What one line of a child's log was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogLine {
    /// A write began.
    Begin,
    /// A write was acknowledged.
    Ack,
    /// Not a harness line (anything else the child prints).
    Other,
}

impl TextState {
    /// The line a child prints (and flushes) just before `write` on `key` in `thread`:
    /// `begin <thread> put|update|delete <key> [<value>]`.
    pub fn begin_line(thread: u64, key: &str, write: &Write<&str>) -> String {
        match write {
            Write::Put(v) => format!("begin {thread} put {key} {v}"),
            Write::Update(v) => format!("begin {thread} update {key} {v}"),
            Write::Delete => format!("begin {thread} delete {key}"),
        }
    }

    /// The line a child prints after a write returned successfully: `ack <thread> applied`
    /// or `ack <thread> absent` (an update of a missing key).
    pub fn ack_line(thread: u64, applied: bool) -> String {
        format!(
            "ack {thread} {}",
            if applied { "applied" } else { "absent" }
        )
    }

    /// Applies one line of a child's output (without its newline). Lines that start with
    /// neither `begin ` nor `ack ` are [`LogLine::Other`]; a malformed harness line is an
    /// error. Feed only complete lines: a line cut short by the kill is no acknowledgement.
    pub fn apply_line(&mut self, line: &str) -> std::result::Result<LogLine, String> {
        let mut f = line.split_whitespace();
        let bad = || format!("malformed harness line {line:?}");
        match f.next() {
            Some("begin") => {
                let thread: u64 = f.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
                let kind = f.next().ok_or_else(bad)?;
                let key = f.next().ok_or_else(bad)?.to_string();
                let write = match (kind, f.next()) {
                    ("put", Some(v)) => Write::Put(v.to_string()),
                    ("update", Some(v)) => Write::Update(v.to_string()),
                    ("delete", None) => Write::Delete,
                    _ => return Err(bad()),
                };
                if f.next().is_some() {
                    return Err(bad());
                }
                self.begin(thread, key, write)?;
                Ok(LogLine::Begin)
            }
            Some("ack") => {
                let thread: u64 = f.next().and_then(|t| t.parse().ok()).ok_or_else(bad)?;
                let applied = match f.next() {
                    Some("applied") => true,
                    Some("absent") => false,
                    _ => return Err(bad()),
                };
                self.ack(thread, applied)?;
                Ok(LogLine::Ack)
            }
            _ => Ok(LogLine::Other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> ExpectedState<&'static str, u32> {
        ExpectedState::new()
    }

    #[test]
    fn acknowledged_write_is_the_only_possibility() {
        let mut s = state();
        s.begin(0, "k", Write::Put(1)).unwrap();
        s.ack(0, true).unwrap();
        assert_eq!(s.possible(&"k"), vec![Some(&1)]);
        let actual = BTreeMap::from([("k", 1)]);
        s.check(&actual).unwrap();
        assert!(s.check(&BTreeMap::new()).is_err(), "lost write accepted");
        assert!(s.check(&BTreeMap::from([("k", 2)])).is_err());
    }

    #[test]
    fn in_flight_write_may_or_may_not_have_happened() {
        let mut s = state();
        s.begin(0, "k", Write::Put(1)).unwrap();
        s.ack(0, true).unwrap();
        s.begin(0, "k", Write::Delete).unwrap();
        let p = s.possible(&"k");
        assert!(p.contains(&Some(&1)) && p.contains(&None) && p.len() == 2);
        // Unknown keys must be absent.
        assert!(s.check(&BTreeMap::from([("k", 1), ("x", 9)])).is_err());
    }

    #[test]
    fn acknowledged_delete_stays_deleted_and_overlap_allows_both() {
        let mut s = state();
        s.begin(0, "k", Write::Put(1)).unwrap();
        s.ack(0, true).unwrap();
        s.begin(1, "k", Write::Delete).unwrap();
        s.ack(1, true).unwrap();
        assert_eq!(s.possible(&"k"), vec![None]);
        // Two overlapping acknowledged writes: either order.
        s.begin(0, "k", Write::Put(2)).unwrap();
        s.begin(1, "k", Write::Put(3)).unwrap();
        s.ack(0, true).unwrap();
        s.ack(1, true).unwrap();
        let p = s.possible(&"k");
        assert!(p.contains(&Some(&2)) && p.contains(&Some(&3)) && !p.contains(&None));
    }

    #[test]
    fn absent_update_is_ignored_and_initial_state_counts() {
        let mut s = ExpectedState::with_initial(BTreeMap::from([("k", 7)]));
        s.begin(0, "k", Write::Update(8)).unwrap();
        assert_eq!(s.possible(&"k"), vec![Some(&7), Some(&8)]);
        s.ack(0, false).unwrap();
        assert_eq!(s.possible(&"k"), vec![Some(&7)]);
        assert!(s.begin(0, "k", Write::Delete).is_ok());
        assert!(
            s.begin(0, "k", Write::Delete).is_err(),
            "two writes in flight"
        );
        s.settle(BTreeMap::new());
        assert_eq!(s.possible(&"k"), vec![None]);
    }

    #[test]
    fn a_no_op_update_keeps_other_threads_writes_in_place() {
        let mut s = state();
        s.begin(0, "k", Write::Update(1)).unwrap();
        s.begin(1, "k", Write::Put(2)).unwrap();
        s.begin(2, "k", Write::Put(3)).unwrap();
        s.ack(0, false).unwrap(); // the key was absent: wrote nothing
        s.ack(1, true).unwrap();
        s.abandon(2);
        assert_eq!(s.possible(&"k"), vec![Some(&2)]);
    }

    #[test]
    fn text_lines_round_trip() {
        let mut s = TextState::new();
        let b = TextState::begin_line(3, "key-1", &Write::Put("v:7:100"));
        assert_eq!(s.apply_line(&b), Ok(LogLine::Begin));
        assert_eq!(s.apply_line("hello"), Ok(LogLine::Other));
        assert_eq!(
            s.apply_line(&TextState::ack_line(3, true)),
            Ok(LogLine::Ack)
        );
        assert!(s.apply_line("begin 3 put key-1").is_err());
        assert!(s.apply_line("ack 4 applied").is_err());
        assert_eq!(
            s.possible(&"key-1".to_string()),
            vec![Some(&"v:7:100".to_string())]
        );
    }

    fn injected() -> Error {
        Error::io(
            "persist",
            None,
            std::io::Error::other("injected I/O error (simulated)"),
        )
    }

    fn read_only(reason: &str) -> Error {
        Error::ReadOnly {
            path: None,
            reason: reason.to_string(),
        }
    }

    #[test]
    fn fault_log_accepts_only_read_only_errors_naming_the_failure() {
        let original = injected().to_string();
        let mut log = FaultLog::default();
        assert!(log.write::<()>(Ok(())).is_some());
        assert!(log.write::<()>(Err(injected())).is_none());
        assert!(
            !log.problems().is_empty(),
            "no write tried after the failure"
        );
        log.write::<()>(Err(read_only(&original)));
        assert!(log.problems().is_empty(), "{:?}", log.problems());

        let mut wrong = FaultLog::default();
        wrong.write::<()>(Err(injected()));
        wrong.write::<()>(Err(injected())); // not read-only
        wrong.write::<()>(Err(read_only("something else"))); // does not name it
        wrong.write::<()>(Ok(())); // accepted after the failure
        assert_eq!(wrong.problems().len(), 3, "{:?}", wrong.problems());

        let mut on_open = FaultLog::default();
        assert!(on_open.open::<()>(Err(injected())).is_none());
        assert!(
            on_open.problems().is_empty(),
            "an open failure needs no probe"
        );
    }

    /// A "store" over a raw region: one persisted word per write; `read_only` says whether it
    /// refuses writes after a failed persist.
    fn word_store(region: &PmemRegion, log: &mut FaultLog, read_only_after: bool) -> u64 {
        let mut acked = 0;
        // Four writes, and one more (a probe) after a failure.
        for i in 0..5u64 {
            if i == 4 && !log.failed() {
                break;
            }
            let r = if read_only_after && log.failed() {
                Err(read_only(
                    &log.failure().map(ToString::to_string).unwrap_or_default(),
                ))
            } else {
                region
                    .write(i * 64, &(i + 1).to_le_bytes())
                    .and_then(|()| region.persist(i * 64, 8))
            };
            if log.write(r).is_some() {
                acked += 1;
            }
        }
        log.capture(region);
        acked
    }

    fn check_words(run: &Faulted<'_, u64>) {
        for i in 0..*run.acked {
            let at = i as usize * 64;
            assert_eq!(
                run.bytes[at..at + 8],
                (i + 1).to_le_bytes(),
                "{}",
                run.point
            );
        }
    }

    #[test]
    fn fault_injection_passes_a_store_that_goes_read_only() {
        let report = FaultInjection::new(RegionOptions::default())
            .region_len(4096)
            .every_point_fails(true)
            .run(|r, log| word_store(&r, log, true), check_words);
        if replay_point().is_none() {
            assert_eq!(
                (report.total_points, report.runs, report.failed_runs),
                (4, 6, 4)
            );
        }
    }

    #[test]
    fn fault_injection_fails_a_store_that_goes_on_writing() {
        let r = catch_unwind(|| {
            FaultInjection::new(RegionOptions::default())
                .region_len(4096)
                .run(|r, log| word_store(&r, log, false), check_words)
        });
        let msg = panic_text(r.expect_err("accepted").as_ref());
        assert!(
            msg.contains("flushes failing after persist point") && msg.contains("Error::ReadOnly"),
            "{msg}"
        );
    }

    #[test]
    fn power_loss_names_the_point_of_a_failed_check() {
        let r = catch_unwind(|| {
            PowerLoss::new(RegionOptions::default())
                .region_len(4096)
                .run(
                    |region, _| {
                        region.write(0, &[1; 8]).unwrap();
                        region.persist(0, 8).unwrap();
                        ScriptEnd::new((), &region)
                    },
                    |crashed| assert_ne!(crashed.point.after_fences, Some(1), "boom"),
                )
        });
        let msg = panic_text(r.expect_err("accepted").as_ref());
        assert!(
            msg.contains("power loss at persist point 1") && msg.contains("boom"),
            "{msg}"
        );
    }

    #[test]
    fn sampled_points_are_bounded_sorted_and_keep_the_ends() {
        assert_eq!(crash_points(0, 5, None, 1), vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(crash_points(1, 5, Some(10), 1), vec![1, 2, 3, 4, 5]);
        let p = crash_points(1, 10_000, Some(50), 7);
        assert!(p.len() <= 50 && p.len() > 40, "{}", p.len());
        assert_eq!((p[0], *p.last().unwrap()), (1, 10_000));
        assert!(p.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(p, crash_points(1, 10_000, Some(50), 7), "seeded");
        assert!(crash_points(5, 4, None, 0).is_empty());
    }
}
