//! Injected I/O errors (a dying device) at every sync point of a B+-tree script, driven by the
//! shared harness (`tierbase::testing::crash::BlockFaultInjection`): once `n` syncs completed,
//! every write and sync of the page file and both logs fails with `EIO`; reads still work.
//!
//! The script: puts of new keys (values from a few bytes to past `max_inline`, i.e. in
//! overflow pages), replacing puts, deletes, two-op batches, `Store::modify` (an INCR), `sync`
//! and checkpoints, on a 32-frame pool so that evictions write pages in the middle of it.
//! Checked at every point:
//! - the failing call returns the injected I/O error or `Error::ReadOnly` naming it, and every
//!   later write, batch, modify and checkpoint is `Error::ReadOnly` naming the original
//!   failure (the harness checks the variant and the text), `sync` is `Ok` (nothing
//!   acknowledged is left to flush) or `ReadOnly`, and `stats()` says `read_only`;
//! - reads (get and range scans) go on and return the acknowledged state, with the failed
//!   step applied fully or not at all;
//! - reopening the durable images (the device died and power was lost) on a fresh power
//!   source verifies clean and holds exactly the acknowledged state, or that state plus the
//!   failed step (a batch all or nothing); the reopened store takes writes.
//!
//! The three-tier design runs the same script with an NVM tier whose flushes fail at every
//! persist point (`tierbase::testing::crash::FaultInjection`), the block devices healthy: the
//! same rules, reopening from the tier's durable image and from its working bytes.
//!
//! The NVM-direct design runs it with its region's flushes failing at every persist point: the
//! failed batch is rolled back in place at once (reads see the acknowledged state), and both
//! the durable image and the working bytes reopen to it.
//!
//! Replay one point with `TIERBASE_CRASH_POINT=n`.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use common::stat;
use tierbase::Error;
use tierbase::btree::{BTreeDevices, BTreeOptions, BTreeStore};
use tierbase::buffer::nvm::Admission;
use tierbase::device::{
    BlockCrashConfig, CrashSimConfig, Durability, PmemRegion, RegionOptions, SimPower,
};
use tierbase::store::{Change, Store};
use tierbase::testing::crash::{BlockFaultInjection, FaultInjection, FaultLog, Faulted, Schedule};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts() -> BTreeOptions {
    BTreeOptions::default()
        .page_size(4096)
        .dram_bytes(32 * 4096)
        .durability(Durability::Immediate)
}

#[derive(Clone, Debug)]
enum Step {
    /// A batch of puts (`Some`) and deletes (`None`); one op is a plain put or delete.
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    /// `Store::modify`: the value as a decimal number plus one.
    Incr(Vec<u8>),
    Sync,
    Checkpoint,
}

impl Step {
    fn apply(&self, m: &mut Model) {
        match self {
            Step::Batch(ops) => {
                for (k, v) in ops {
                    match v {
                        Some(v) => m.insert(k.clone(), v.clone()),
                        None => m.remove(k),
                    };
                }
            }
            Step::Incr(k) => {
                let n = incr(m.get(k).map(Vec::as_slice));
                m.insert(k.clone(), n);
            }
            Step::Sync | Step::Checkpoint => {}
        }
    }
}

fn incr(cur: Option<&[u8]>) -> Vec<u8> {
    let n = cur
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(0);
    (n + 1).to_string().into_bytes()
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{:05}", (i * 7919) % 1000).into_bytes()
}

fn val(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8).collect()
}

/// The script. Overflow values (past `max_inline`, about 750 bytes on 4 KiB pages) go only to
/// new keys: replacing a key with an overflow value loses its pages at a restart (the bug
/// `btree_model::replacing_a_value_with_an_overflow_value_survives_a_restart` pins), which
/// would hide what this test looks for.
fn script() -> Vec<Step> {
    let mut s = Vec::new();
    let put = |k: Vec<u8>, v: Vec<u8>| Step::Batch(vec![(k, Some(v))]);
    for i in 0..60u32 {
        let len = match i % 6 {
            0 => 5,
            1 | 2 => 300 + (i as usize * 37) % 400,
            3 => 700,
            4 => 2_000 + i as usize * 10, // an overflow page
            _ => 9_000,                   // a chain of three
        };
        s.push(put(key(i), val(i, len)));
        if i % 15 == 14 {
            s.push(Step::Checkpoint);
        }
    }
    for i in (0..60u32).filter(|i| i % 6 < 4).step_by(3) {
        s.push(put(key(i), val(i + 100, 40))); // replace, inline
    }
    for i in (1..60u32).step_by(5) {
        s.push(Step::Batch(vec![(key(i), None)])); // deletes, overflow ones too
    }
    s.push(Step::Sync);
    for i in 0..10u32 {
        s.push(Step::Incr(format!("counter-{}", i % 3).into_bytes()));
    }
    for i in 0..12u32 {
        s.push(Step::Batch(vec![
            (key(200 + i), Some(val(i, 100 + i as usize * 60))),
            (key(i * 4), if i % 2 == 0 { None } else { Some(val(i, 30)) }),
        ]));
    }
    s.push(Step::Checkpoint);
    for i in 300..320u32 {
        s.push(put(key(i), val(i, 500)));
    }
    s
}

fn run_step(s: &BTreeStore, step: &Step) -> tierbase::Result<()> {
    match step {
        Step::Batch(ops) => {
            let refs: Vec<(&[u8], Option<&[u8]>)> = ops
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref()))
                .collect();
            s.write_batch(&refs).map(drop)
        }
        Step::Incr(k) => Store::modify(s, k, &mut |cur| Change::Put(incr(cur))),
        Step::Sync => s.sync(),
        Step::Checkpoint => s.checkpoint(),
    }
}

fn contents(s: &BTreeStore) -> tierbase::Result<Model> {
    let mut m = Model::new();
    s.range(Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        m.insert(k.to_vec(), v.to_vec());
        true
    })?;
    Ok(m)
}

/// What a run acknowledged and left on media.
#[derive(Debug, Default)]
struct Run {
    /// The store was created (its create did not fail).
    created: bool,
    model: Model,
    failed_step: Option<Step>,
    images: Option<[Vec<u8>; 3]>,
}

impl Run {
    fn with_failed(&self) -> Model {
        let mut m = self.model.clone();
        if let Some(step) = &self.failed_step {
            step.apply(&mut m);
        }
        m
    }
}

/// Writes of every kind, each to be refused once the store failed. (`sync` is not one: with
/// every acknowledged write already durable it may succeed; it is checked on its own.)
fn probes() -> Vec<Step> {
    vec![
        Step::Batch(vec![(b"probe".to_vec(), Some(b"v".to_vec()))]),
        Step::Batch(vec![(key(0), None)]),
        Step::Batch(vec![
            (b"probe-a".to_vec(), Some(val(1, 5000))),
            (key(3), Some(b"x".to_vec())),
        ]),
        Step::Incr(b"counter-0".to_vec()),
        Step::Checkpoint,
    ]
}

/// Region of the NVM-direct runs: a 1 MiB undo log (values up to 16 KiB) and room to spare.
const DIRECT_LEN: u64 = 8 << 20;

fn direct_opts() -> BTreeOptions {
    opts().nvm_bytes(DIRECT_LEN).nvm_direct(true)
}

#[test]
fn nvm_direct_persist_failures_fail_cleanly_and_lose_nothing_acknowledged() {
    let report = FaultInjection::new(RegionOptions::default())
        .region_len(DIRECT_LEN)
        // About 1,000 points (a save, a commit's flush and fence, the epoch): a sample keeps
        // the suite's time (`TIERBASE_CRASH_POINT=n` replays any one).
        .sample(250)
        .every_point_fails(true)
        .run(
            |region, log| nvm_script_run(region, log, &direct_opts()),
            |f: &Faulted<'_, Run>| check_faulted(f, &direct_opts()),
        );
    eprintln!(
        "NVM-direct flushes failing at each of {} persist points ({} runs, {} failed a call)",
        report.total_points, report.runs, report.failed_runs
    );
    if std::env::var_os("TIERBASE_CRASH_POINT").is_none() {
        assert!(report.total_points > 200, "{report:?}");
    }
}

/// Slots of the three-tier runs' NVM tier (fewer than the script's pages).
const NVM_SLOTS: u64 = 24;

/// The three-tier runs: every page leaving the 32 frames enters NVM.
fn nvm_opts() -> BTreeOptions {
    opts().nvm_admission(Admission::All)
}

/// The script with `region` as the NVM tier, or as the NVM-direct design's pages (as `opts`
/// say), healthy block devices; captures what the region holds at the end.
fn nvm_script_run(region: PmemRegion, log: &mut FaultLog, opts: &BTreeOptions) -> Run {
    let power = SimPower::new(BlockCrashConfig::default());
    let devs = BTreeDevices::simulated(&power).unwrap();
    let devs = if opts.nvm_direct {
        devs.with_nvm_direct(region)
    } else {
        devs.with_nvm(region)
    };
    let (run, s) = script_run_on(devs, opts, log);
    if let Some(s) = s {
        match s.nvm_direct_region() {
            Some(r) => log.capture_paged(r),
            None => {
                let stats: std::collections::HashMap<String, String> =
                    s.stats().into_iter().collect();
                run_nvm_writes(&stats);
                log.capture(s.nvm_region().expect("the store has its NVM tier"));
            }
        }
        s.abandon();
    }
    run
}

fn script_run(power: &Arc<SimPower>, log: &mut FaultLog) -> Run {
    let devs = BTreeDevices::simulated(power).unwrap();
    let (run, s) = script_run_on(devs, &opts(), log);
    if let Some(s) = s {
        s.abandon();
    }
    run
}

/// The script on `devs`; returns the run and the store (still open, unless its creation
/// failed) with its durable images taken.
fn script_run_on(
    devs: BTreeDevices,
    opts: &BTreeOptions,
    log: &mut FaultLog,
) -> (Run, Option<BTreeStore>) {
    let mut run = Run::default();
    let Some(s) = log.open(BTreeStore::create_on(devs, opts)) else {
        return (run, None);
    };
    run.created = true;
    for step in script() {
        if log.write(run_step(&s, &step)).is_none() {
            run.failed_step = Some(step);
            break;
        }
        step.apply(&mut run.model);
    }
    if let Some(failure) = log.failure() {
        let text = failure.to_string();
        assert!(
            matches!(failure, Error::Io { .. } | Error::ReadOnly { .. })
                && text.contains("injected"),
            "the failing call returned {failure:?}, not the injected error"
        );
        for step in probes() {
            let r = run_step(&s, &step);
            if let Err(e) = &r {
                assert!(
                    e.to_string().contains("read-only"),
                    "refusal does not say read-only: {e}"
                );
            }
            log.write(r);
        }
        match s.sync() {
            Ok(()) | Err(Error::ReadOnly { .. }) => {}
            Err(e) => panic!("sync after the failure: {e:?}"),
        }
        let read_only = s
            .stats()
            .into_iter()
            .find(|(n, _)| n == "read_only")
            .map(|(_, v)| v);
        assert!(
            read_only.as_deref().is_some_and(|r| r.contains("injected")),
            "stats do not say why the store is read-only: {read_only:?}"
        );
        // Reads go on, every one: the acknowledged state, the failed step whole or not at
        // all. A read that no frame can take (each holds changes that cannot be written back
        // now) reads its page outside the pool.
        match contents(&s) {
            Ok(got) => {
                // NVM direct rolls a failed step back in place at once, its commit point
                // included: exactly the acknowledged state.
                assert!(
                    got == run.model || (got == run.with_failed() && !opts.nvm_direct),
                    "read-only store holds {} keys; acknowledged {}",
                    got.len(),
                    run.model.len()
                );
                for (k, v) in &got {
                    match s.get(k) {
                        Ok(g) => assert_eq!(g.as_ref(), Some(v), "get while read-only"),
                        Err(e) => panic!("get while read-only: {e}"),
                    }
                }
            }
            Err(e) => panic!("range scan while read-only: {e}"),
        }
        match s.get(b"probe") {
            Ok(v) => assert_eq!(v, None, "a refused put is visible"),
            Err(e) => panic!("get while read-only: {e}"),
        }
    } else {
        assert!(
            !s.stats().iter().any(|(n, _)| n == "read_only"),
            "read-only without a failure"
        );
    }
    run.images = s.durable_images();
    (run, Some(s))
}

/// [`check_on`] for a run whose NVM region's flushes failed: reopens what the region held
/// (`f.media`: its durable image or its working bytes).
fn check_faulted(f: &Faulted<'_, Run>, opts: &BTreeOptions) {
    let run = Run {
        created: f.acked.created,
        model: f.acked.model.clone(),
        failed_step: f.acked.failed_step.clone(),
        images: f.acked.images.clone(),
    };
    let point = format!("{} ({:?})", f.point, f.media);
    check_on(run, &point, Some(f.bytes), opts);
}

fn check(run: Run, point: Option<u64>) {
    check_on(run, &format!("{point:?}"), None, &opts());
}

/// Reopens the run's block images (with an NVM tier of `nvm` bytes, if given) and checks the
/// store against what the run acknowledged.
fn check_on(run: Run, point: &str, nvm: Option<&[u8]>, opts: &BTreeOptions) {
    let Some(images) = run.images.clone() else {
        assert!(!run.created, "point {point}: no images of a created store");
        return;
    };
    // The device is replaced: a fresh power source, media as the dying one left them.
    let power = SimPower::new(BlockCrashConfig::default());
    let mut devs = BTreeDevices::simulated_from(images, &power).unwrap();
    if let Some(bytes) = nvm {
        let region =
            PmemRegion::from_image(bytes, CrashSimConfig::default(), &RegionOptions::default())
                .unwrap();
        devs = if opts.nvm_direct {
            devs.with_nvm_direct(region)
        } else {
            devs.with_nvm(region)
        };
    }
    let s = match BTreeStore::open_on(devs, None, opts) {
        Ok(s) => s,
        Err(e) => panic!("point {point}: reopen: {e}"),
    };
    s.verify()
        .unwrap_or_else(|e| panic!("point {point}: verify: {e}"));
    let got = contents(&s).unwrap();
    assert!(
        got == run.model || got == run.with_failed(),
        "point {point}: the store holds {} keys; acknowledged {} (failed step {:?})",
        got.len(),
        run.model.len(),
        run.failed_step
            .as_ref()
            .map(|s| format!("{s:?}").chars().take(80).collect::<String>())
    );
    assert_eq!(s.len(), got.len() as u64, "point {point}");
    // A healthy device again: the store takes writes and keeps them.
    s.put(b"after", b"the fault").unwrap();
    assert!(Store::scan(&s, 0, 10, &mut Vec::new()).is_ok());
    assert_eq!(s.get(b"after").unwrap().as_deref(), Some(&b"the fault"[..]));
    s.close().unwrap();
}

#[test]
fn every_sync_point_fails_cleanly_and_loses_nothing_acknowledged() {
    let report = BlockFaultInjection::new()
        .every_point_fails(true)
        .run(|power, log, _point| script_run(power, log), check);
    eprintln!(
        "writes and syncs failing at each of {} sync points ({} runs, {} failed a call)",
        report.total_points, report.runs, report.failed_runs,
    );
    if std::env::var_os("TIERBASE_CRASH_POINT").is_none() {
        assert!(report.total_points > 100, "{report:?}");
        assert_eq!(report.failed_runs as u64, report.total_points, "{report:?}");
    }
}

#[test]
fn three_tier_nvm_persist_failures_fail_cleanly_and_lose_nothing_acknowledged() {
    let report = FaultInjection::new(RegionOptions::default())
        .region_len(8192 + NVM_SLOTS * (4096 + 8))
        .every_point_fails(true)
        .run(
            |region, log| nvm_script_run(region, log, &nvm_opts()),
            |f: &Faulted<'_, Run>| check_faulted(f, &nvm_opts()),
        );
    eprintln!(
        "NVM flushes failing at each of {} persist points ({} runs, {} failed a call)",
        report.total_points, report.runs, report.failed_runs
    );
    if std::env::var_os("TIERBASE_CRASH_POINT").is_none() {
        assert!(report.total_points > 50, "{report:?}");
    }
    assert!(
        NVM_WRITES.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the script never wrote a page into NVM"
    );
}

/// Pages written into NVM over all runs (the three-tier script must really use the tier).
static NVM_WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn run_nvm_writes(stats: &std::collections::HashMap<String, String>) {
    let n: u64 = stats["nvm_page_writes"].parse().unwrap();
    NVM_WRITES.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

/// Once a write failed, reads must go on: a read that needs a frame takes a clean one instead
/// of writing back a dirty page to the dead device (the pool stops choosing dirty victims after
/// the first failed write-back).
#[test]
fn reads_go_on_after_a_write_failure() {
    let o = BTreeOptions::default()
        .page_size(4096)
        .dram_bytes(16 * 4096)
        .durability(Durability::None);
    let fill = |s: &BTreeStore| {
        for i in 0..300u32 {
            s.put(&key(i), &val(i, 400)).unwrap();
        }
        // A checkpoint leaves every page clean, so that after the failure the pool holds
        // both clean frames (reusable) and dirty ones (unwritable): reads must use the former.
        // (A pool whose every frame is dirty when the device dies cannot read anything new.)
        s.checkpoint().unwrap();
    };
    // How many syncs creating and filling the store takes.
    let power = SimPower::new(BlockCrashConfig::default());
    let s = BTreeStore::create_on(BTreeDevices::simulated(&power).unwrap(), &o).unwrap();
    fill(&s);
    let setup = power.syncs();
    s.abandon();
    // The same again, then the device dies: the next sync (of the unflushed log) fails.
    let power = SimPower::new(BlockCrashConfig {
        fail_syncs_after: Some(setup),
        ..BlockCrashConfig::default()
    });
    let s = BTreeStore::create_on(BTreeDevices::simulated(&power).unwrap(), &o).unwrap();
    fill(&s);
    // Writes until one needs the device (a page write-back or the log's flush).
    let mut extra = 0u32;
    let failure = loop {
        let r = s
            .put(&key(1000 + extra), &val(extra, 400))
            .and_then(|_| if extra % 8 == 7 { s.sync() } else { Ok(()) });
        match r {
            Ok(()) => extra += 1,
            Err(e) => break e,
        }
        assert!(extra < 10_000, "the device never failed");
    };
    assert!(failure.to_string().contains("injected"), "{failure}");
    assert!(matches!(s.put(b"x", b"y"), Err(Error::ReadOnly { .. })));
    let dirty: u64 = s
        .stats()
        .into_iter()
        .find(|(n, _)| n == "pages_dirty")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap();
    assert!(dirty > 0, "no dirty page left to trip over");
    // Every acknowledged key reads back, by get and by a scan (both need to evict).
    for i in 0..300u32 {
        let got = s
            .get(&key(i))
            .unwrap_or_else(|e| panic!("get {i} after the failure: {e}"));
        assert_eq!(got, Some(val(i, 400)));
    }
    assert_eq!(contents(&s).unwrap().len(), 300);
}

/// A full file system (the simulated devices share `SPACE` bytes): the write that finds no
/// room fails with one clear error (the device full, named once, not nested through the
/// log, tree and store); the files grow to the last bytes they can (a growth step that does
/// not fit falls back to the room needed now); reads go on — every one, with a pool that
/// holds the tree; with a small one, each returns the acknowledged value or, once every frame
/// holds changes that can no longer be written back, says the store is read-only — and once
/// space is freed, a restart from media holds every acknowledged write and takes writes again.
#[test]
fn a_full_device_fails_one_write_clearly_and_loses_nothing() {
    const SPACE: u64 = 3 << 20;
    for frames in [64u64, 2048] {
        let o = opts().dram_bytes(frames * 4096);
        let power = SimPower::new(BlockCrashConfig::default());
        power.limit_space(Some(SPACE));
        let s = BTreeStore::create_on(BTreeDevices::simulated(&power).unwrap(), &o).unwrap();
        let mut acked = Model::new();
        let failure = (0u32..)
            .find_map(|i| {
                assert!(i < 100_000, "the device never filled");
                let k = format!("full-{i:06}").into_bytes();
                let v = val(i, 300);
                match s.put(&k, &v) {
                    Ok(_) => {
                        acked.insert(k, v);
                        None
                    }
                    Err(e) => Some(e),
                }
            })
            .unwrap();
        let msg = failure.to_string();
        assert_eq!(
            msg.matches("device full").count(),
            1,
            "{frames} frames: {msg}"
        );
        assert!(msg.matches("read-only").count() <= 1, "{msg}");
        assert!(msg.matches("reopen it to recover").count() <= 1, "{msg}");
        // The next write says the same.
        let again = s.put(b"another", b"value").unwrap_err().to_string();
        assert_eq!(again.matches("device full").count(), 1, "{again}");
        // The files took the space up to less than a growth step (1 MiB) from the end.
        let images = s.durable_images().unwrap();
        let used: u64 = images.iter().map(|i| i.len() as u64).sum();
        assert!(
            used > SPACE - (256 << 10),
            "{frames} frames: {used} of {SPACE} bytes used when the device was full"
        );
        let private = read_back_on_a_full_device(&s, &acked, frames);
        eprintln!(
            "{frames} frames: {} keys acknowledged, {used} bytes used, {private} pages read \
             outside the pool; {msg}",
            acked.len()
        );
        if frames < 2048 {
            assert!(
                private > 0,
                "the small pool never had to read outside itself"
            );
        }
        s.abandon();
        // A restart on the still-full device opens read-only (redo cannot write its pages):
        // reads as above, writes refused naming the full device.
        let power = SimPower::new(BlockCrashConfig::default());
        power.limit_space(Some(SPACE));
        let s = BTreeStore::open_on(
            BTreeDevices::simulated_from(images.clone(), &power).unwrap(),
            None,
            &o,
        )
        .unwrap_or_else(|e| panic!("{frames} frames: a restart on the full device: {e}"));
        let err = s.put(b"another", b"value").unwrap_err();
        assert!(matches!(err, Error::ReadOnly { .. }), "{err}");
        assert_eq!(err.to_string().matches("device full").count(), 1, "{err}");
        let private_after = read_back_on_a_full_device(&s, &acked, frames);
        eprintln!(
            "{frames} frames, read-only restart: {private_after} pages read outside the pool; {err}"
        );
        assert!(s.close().is_err(), "a read-only store cannot close cleanly");
        // Space freed: a restart from media holds every acknowledged write, and writes go on.
        let power = SimPower::new(BlockCrashConfig::default());
        let s = BTreeStore::open_on(
            BTreeDevices::simulated_from(images, &power).unwrap(),
            None,
            &o,
        )
        .unwrap();
        let after = contents(&s).unwrap();
        assert!(
            acked.iter().all(|(k, v)| after.get(k) == Some(v)),
            "{} acknowledged keys, {} after the restart",
            acked.len(),
            after.len()
        );
        assert!(
            after.len() <= acked.len() + 1,
            "only the failed put may be extra"
        );
        s.put(b"after", b"restart").unwrap();
        assert_eq!(s.get(b"after").unwrap().as_deref(), Some(&b"restart"[..]));
    }
}

/// Reads back every 37th acknowledged key, each of which must return its value — also with a
/// pool too small for the tree, whose every frame holds changes that can no longer be written
/// (the page is then read outside the pool) — and then every key by a scan. Returns how many
/// pages were read outside the pool.
fn read_back_on_a_full_device(s: &BTreeStore, acked: &Model, frames: u64) -> u64 {
    for (k, v) in acked.iter().step_by(37) {
        match s.get(k) {
            Ok(got) => assert_eq!(got.as_ref(), Some(v), "{frames} frames"),
            Err(e) => panic!("{frames} frames: a read on the full device: {e}"),
        }
    }
    let all = contents(s).unwrap_or_else(|e| panic!("{frames} frames: a scan: {e}"));
    assert!(
        acked.iter().all(|(k, v)| all.get(k) == Some(v)),
        "{frames} frames: {} acknowledged keys, {} scanned",
        acked.len(),
        all.len()
    );
    stat(s, "read_only_private_reads")
}
