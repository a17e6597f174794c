//! Power loss at every sync point of the B+-tree store on fault-injecting block devices
//! (unsynced writes lost or torn per 512-byte sector), with evictions and checkpoints in the
//! script: after reopening, the store holds exactly the acknowledged state, or that state
//! plus the one batch in flight (all of its keys or none).
//!
//! The three-tier design runs the same script with a crash-simulated NVM tier on the same
//! power source: power lost at every sync point of the block devices, and at every persist
//! point (fence) of the NVM region with its unfenced words surviving at random (in-place page
//! writes torn, installs cut between the page and its directory entry).
//!
//! With the log on NVM too (two more crash-simulated regions on the same power source), power
//! is lost at every persist point of each log region: a commit is acknowledged only after its
//! frame's lines are persisted, so a cut there loses at most the batch in flight.
//!
//! The NVM-direct design (pages in a crash-simulated region, changed in place under an undo
//! log) loses power at its persist points too: an undo entry's, a commit's line flushes and
//! its epoch word, each torn at random.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use tierbase::btree::{BTreeDevices, BTreeOptions, BTreeStore};
use tierbase::buffer::nvm::Admission;
use tierbase::device::{
    BlockCrashConfig, CrashSimConfig, Durability, PagedRegion, PmemRegion, RegionOptions, SimPower,
};
use tierbase::testing::crash::{BlockPowerLoss, Schedule, crash_points};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts() -> BTreeOptions {
    BTreeOptions::default()
        .page_size(4096)
        // 64 frames: three-key batches fit (a batch may take half the pool), and the overflow
        // values (a few hundred pages) keep evictions going throughout.
        .dram_bytes(64 * 4096)
        .durability(Durability::Immediate)
}

fn contents(s: &BTreeStore) -> Model {
    let mut m = Model::new();
    s.range(Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        m.insert(k.to_vec(), v.to_vec());
        true
    })
    .unwrap();
    m
}

/// One step of the script: a batch of (key, value or delete).
fn step(i: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let k = |j: u64| format!("k{:04}", (j * 7919) % 397).into_bytes();
    match i % 5 {
        0 | 1 => vec![(
            k(i),
            Some(vec![(i % 256) as u8; 40 + (i % 5) as usize * 60]),
        )],
        2 => vec![(k(i / 2), None)],
        3 => vec![
            (k(i + 1), Some(vec![1; 300])),
            (k(i + 2), Some(vec![2; 10])),
            (k(i / 3), None),
        ],
        // Values beyond a quarter page go to overflow chains (4 KiB pages: 3 pages here).
        _ if i.is_multiple_of(3) => vec![(k(i), Some(vec![(i % 251) as u8; 9000 + i as usize]))],
        _ => vec![(k(i), Some(i.to_le_bytes().to_vec()))],
    }
}

fn apply(model: &mut Model, ops: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, v) in ops {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

/// What a run of the script leaves: whether the store was created before power failed, the
/// acknowledged contents, the batch in flight, and the media images (pages, logs, NVM tier,
/// NVM log regions).
type Outcome = (
    bool,
    Model,
    Option<Vec<(Vec<u8>, Option<Vec<u8>>)>>,
    [Vec<u8>; 3],
    Option<Vec<u8>>,
    Option<[Vec<u8>; 2]>,
);

const STEPS: u64 = 220;
/// Preloading batches of the three-tier runs.
const PRELOAD: u64 = 160;

/// NVM slots of the three-tier runs: fewer than the script's pages, so NVM Clock evicts and
/// spills to the page file (with syncs) as well.
const NVM_SLOTS: u64 = 24;

fn nvm_len() -> u64 {
    8192 + NVM_SLOTS * (4096 + 8)
}

/// A smaller pool than [`opts`] (the script's pages do not fit), all pages admitted to NVM.
fn nvm_opts() -> BTreeOptions {
    opts().dram_bytes(40 * 4096).nvm_admission(Admission::All)
}

/// Runs the script on `devs` until its end, then cuts the power (if the point did not).
fn script(devs: BTreeDevices, power: &Arc<SimPower>, opts: &BTreeOptions) -> Outcome {
    script_with_stats(devs, power, opts).0
}

/// How the script ends before the power is cut.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// The power goes while the store is open (a crash).
    Open,
    /// The store is closed first (its checkpoint, then the hand-over of DRAM pages to NVM):
    /// the cut lands after the close, or inside it.
    Closed,
}

/// [`script`], also returning the store's stats at the end (with `nvm_persist_points`, the
/// NVM tier's fences so far).
fn script_with_stats(
    devs: BTreeDevices,
    power: &Arc<SimPower>,
    opts: &BTreeOptions,
) -> (Outcome, HashMap<String, String>) {
    script_ending(devs, power, opts, End::Open)
}

/// [`script_with_stats`], ending as `end` says (the stats are taken before a close, with
/// `nvm_persist_points_closed` after it).
fn script_ending(
    devs: BTreeDevices,
    power: &Arc<SimPower>,
    opts: &BTreeOptions,
    end: End,
) -> (Outcome, HashMap<String, String>) {
    let s = BTreeStore::create_on(devs, opts).unwrap();
    let created = !power.crashed();
    let mut acked = Model::new();
    let mut in_flight = None;
    // With an NVM tier, a first part of 900-byte values makes the data
    // outgrow DRAM and NVM (the script alone fits in a pool that takes its largest batch).
    let preload = if opts.nvm_bytes > 0 || s.nvm_region().is_some() {
        PRELOAD
    } else {
        0
    };
    for i in 0..preload + STEPS {
        if i >= preload && (i - preload) % 60 == 59 {
            s.checkpoint().unwrap();
        }
        let ops = if i < preload {
            vec![(format!("p{i:05}").into_bytes(), Some(vec![i as u8; 900]))]
        } else {
            step(i - preload)
        };
        let refs: Vec<(&[u8], Option<&[u8]>)> = ops
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
            .collect();
        let crashed_before = power.crashed();
        s.write_batch(&refs).unwrap();
        if !power.crashed() {
            apply(&mut acked, &ops);
        } else if !crashed_before && in_flight.is_none() {
            in_flight = Some(ops);
        } else if in_flight.is_none() {
            in_flight = Some(Vec::new());
        }
    }
    let mut stats: HashMap<String, String> = s.stats().into_iter().collect();
    if let Some(r) = s.nvm_region() {
        stats.insert("nvm_persist_points".into(), r.persist_points().to_string());
    }
    if let Some(r) = s.nvm_direct_region() {
        stats.insert("nvm_persist_points".into(), r.persist_points().to_string());
    }
    if let Some(logs) = s.log_regions() {
        for (i, r) in logs.iter().enumerate() {
            stats.insert(
                format!("log{i}_persist_points"),
                r.persist_points().to_string(),
            );
        }
    }
    if end == End::Closed {
        // Closing one handle shuts the store down; this one still reaches its media. A close
        // after the power went may fail (its writes are lost either way).
        let closed = s.clone().close();
        assert!(closed.is_ok() || power.crashed(), "{closed:?}");
        if let Some(r) = s.nvm_region() {
            stats.insert(
                "nvm_persist_points_closed".into(),
                r.persist_points().to_string(),
            );
        }
        let after: HashMap<String, String> = s.stats().into_iter().collect();
        if let Some(h) = after.get("nvm_handed_over") {
            stats.insert("nvm_handed_over_closed".into(), h.clone());
        }
    }
    power.cut();
    let images = s.durable_images().unwrap();
    let nvm = s
        .nvm_region()
        .and_then(PmemRegion::power_loss)
        .or_else(|| s.nvm_direct_region().and_then(PagedRegion::power_loss));
    let logs = s
        .log_regions()
        .map(|l| l.map(|r| r.power_loss().expect("a simulated region")));
    s.abandon();
    ((created, acked, in_flight, images, nvm, logs), stats)
}

/// Reopens what media hold and checks it against the script's acknowledgements.
fn check(outcome: Outcome, point: &str, opts: &BTreeOptions) {
    let (created, acked, in_flight, images, nvm, logs) = outcome;
    let power = SimPower::new(BlockCrashConfig::default());
    let reboot = |img: &[u8]| {
        PmemRegion::from_image(img, CrashSimConfig::default(), &RegionOptions::default()).unwrap()
    };
    let images = match logs {
        // A log on NVM has no block images (its regions replace the placeholders below).
        Some(_) => {
            let [pages, _, _] = images;
            [pages, vec![0; 4096], vec![0; 4096]]
        }
        None => images,
    };
    let mut devs = BTreeDevices::simulated_from(images, &power).unwrap();
    if let Some(img) = nvm {
        devs = if opts.nvm_direct {
            devs.with_nvm_direct(reboot(&img))
        } else {
            devs.with_nvm(reboot(&img))
        };
    }
    if let Some(logs) = logs {
        devs = devs.with_nvm_log(logs.map(|img| reboot(&img)));
    }
    let s = match BTreeStore::open_on(devs, None, opts) {
        Ok(s) => s,
        // Power lost while the store was being created: nothing was acknowledged,
        // and the half-made store is refused with a clear error.
        Err(e) if !created => {
            assert!(e.to_string().contains("superblock"), "{e}");
            return;
        }
        Err(e) => panic!("reopen at point {point}: {e}"),
    };
    s.verify()
        .unwrap_or_else(|e| panic!("verify at point {point}: {e}"));
    let got = contents(&s);
    let mut with = acked.clone();
    if let Some(ops) = &in_flight {
        apply(&mut with, ops);
    }
    assert!(
        got == acked || got == with,
        "point {point}: store holds {} keys, acknowledged {} (with the batch in flight {})",
        got.len(),
        acked.len(),
        with.len()
    );
    assert_eq!(s.len(), got.len() as u64, "point {point}: key count");
    // The reopened store takes writes and survives another restart.
    s.put(b"after", b"crash").unwrap();
    s.close().unwrap();
}

#[test]
fn power_loss_at_every_sync_keeps_acknowledged_batches_whole() {
    let report = BlockPowerLoss::new().survival(&[0.0, 0.5, 1.0]).run(
        |power: &Arc<SimPower>, _point| {
            script(BTreeDevices::simulated(power).unwrap(), power, &opts())
        },
        |outcome, point| check(outcome, &format!("{point:?}"), &opts()),
    );
    assert!(report.total_points > STEPS / 2, "{report:?}");
}

/// How many NVM persist points a sweep visits: `default` sampled, or what
/// `TIERBASE_NVM_CRASH_RUNS` says (`0`: all of them; every point takes ~10 ms here).
fn nvm_crash_runs(default: usize) -> Option<usize> {
    match std::env::var("TIERBASE_NVM_CRASH_RUNS") {
        Ok(v) if v.trim() == "0" => None,
        Ok(v) => Some(v.trim().parse().expect("a number of runs")),
        Err(_) => Some(default),
    }
}

/// Simulated block devices and an NVM tier on one power source; the tier's own power loss
/// (if any) at `fences`.
fn three_tier_devices(power: &Arc<SimPower>, nvm: CrashSimConfig) -> BTreeDevices {
    three_tier_devices_of(power, nvm, nvm_len())
}

/// [`three_tier_devices`] with an NVM region of `len` bytes.
fn three_tier_devices_of(power: &Arc<SimPower>, nvm: CrashSimConfig, len: u64) -> BTreeDevices {
    let region = PmemRegion::simulated(len, nvm, &RegionOptions::default()).unwrap();
    region.share_power(power).unwrap();
    BTreeDevices::simulated(power).unwrap().with_nvm(region)
}

/// [`three_tier_devices`] with the log on NVM: two more regions on the same power source,
/// each with its own power loss (if any) at `logs[i]`.
fn nvm_log_devices(power: &Arc<SimPower>, logs: [CrashSimConfig; 2]) -> BTreeDevices {
    let regions = logs.map(|config| {
        let r = PmemRegion::simulated(4096, config, &RegionOptions::default()).unwrap();
        r.share_power(power).unwrap();
        r
    });
    three_tier_devices(power, CrashSimConfig::default()).with_nvm_log(regions)
}

#[test]
fn nvm_log_power_loss_at_every_page_file_sync_keeps_acknowledged_batches_whole() {
    // With the log on NVM the block syncs are the page file's: checkpoints (between a
    // generation's header and the superblock naming it), spills and restart.
    let report = BlockPowerLoss::new().survival(&[0.5]).run(
        |power: &Arc<SimPower>, _point| {
            let devs = nvm_log_devices(
                power,
                [CrashSimConfig::default(), CrashSimConfig::default()],
            );
            script(devs, power, &nvm_opts())
        },
        |outcome, point| check(outcome, &format!("sync {point:?}"), &nvm_opts()),
    );
    assert!(report.total_points > 10, "{report:?}");
}

#[test]
fn nvm_log_power_loss_at_every_log_persist_point_keeps_acknowledged_batches_whole() {
    // The reference run: both log regions take frames (checkpoints alternate them), and
    // every commit is one persist, no file sync of the log.
    let power = SimPower::new(BlockCrashConfig::default());
    let devs = nvm_log_devices(
        &power,
        [CrashSimConfig::default(), CrashSimConfig::default()],
    );
    let (outcome, stats) = script_with_stats(devs, &power, &nvm_opts());
    let n = |k: &str| stats[k].parse::<u64>().unwrap();
    assert_eq!(stats["wal_medium"], "nvm", "{stats:?}");
    assert_eq!(n("wal_fsyncs"), 0, "{stats:?}");
    // One persist per commit (and per generation header), no batching behind a sync.
    assert!(n("wal_nvm_persists") >= n("wal_frames"), "{stats:?}");
    assert!(n("wal_frames") > PRELOAD + STEPS / 2, "{stats:?}");
    let totals = [n("log0_persist_points"), n("log1_persist_points")];
    assert!(totals.iter().all(|&t| t > 20), "{stats:?}");
    check(outcome, "the reference run", &nvm_opts());
    let runs = nvm_crash_runs(100);
    for (log, &total) in totals.iter().enumerate() {
        for n in crash_points(1, total, runs, 0x109 + log as u64) {
            let power = SimPower::new(BlockCrashConfig {
                torn_survival: 0.5,
                seed: n,
                ..BlockCrashConfig::default()
            });
            let mut configs = [CrashSimConfig::default(), CrashSimConfig::default()];
            configs[log] = CrashSimConfig {
                crash_after_fences: Some(n),
                unflushed_survival: 0.5,
                seed: n,
                ..CrashSimConfig::default()
            };
            let outcome = script(nvm_log_devices(&power, configs), &power, &nvm_opts());
            check(
                outcome,
                &format!("log {log} fence {n} of {total}"),
                &nvm_opts(),
            );
        }
    }
}

/// Bytes of the NVM-direct runs' region: 1 MiB of undo log (values up to 16 KiB) and 1792
/// pages of 4 KiB, room for the script's data.
const DIRECT_LEN: u64 = 8 << 20;

fn direct_opts() -> BTreeOptions {
    opts().nvm_bytes(DIRECT_LEN).nvm_direct(true)
}

/// Simulated block devices (superblocks, empty logs) and an NVM-direct region on one power
/// source; the region's own power loss (if any) as `nvm` says.
fn direct_devices(power: &Arc<SimPower>, nvm: CrashSimConfig) -> BTreeDevices {
    let region = PmemRegion::simulated(DIRECT_LEN, nvm, &RegionOptions::default()).unwrap();
    region.share_power(power).unwrap();
    BTreeDevices::simulated(power)
        .unwrap()
        .with_nvm_direct(region)
}

#[test]
fn nvm_direct_power_loss_at_every_sync_keeps_acknowledged_batches_whole() {
    // The block syncs are the superblocks' (create, restart, checkpoints).
    let report = BlockPowerLoss::new().survival(&[0.5]).run(
        |power: &Arc<SimPower>, _point| {
            script(
                direct_devices(power, CrashSimConfig::default()),
                power,
                &direct_opts(),
            )
        },
        |outcome, point| check(outcome, &format!("sync {point:?}"), &direct_opts()),
    );
    assert!(report.total_points >= 3, "{report:?}");
}

#[test]
fn nvm_direct_power_loss_at_nvm_persist_points_keeps_acknowledged_batches_whole() {
    // The reference run: every batch saves lines in the undo log and commits in place.
    let power = SimPower::new(BlockCrashConfig::default());
    let devs = direct_devices(&power, CrashSimConfig::default());
    let (outcome, stats) = script_with_stats(devs, &power, &direct_opts());
    let n = |k: &str| stats[k].parse::<u64>().unwrap();
    assert_eq!(n("wal_frames"), 0, "{stats:?}");
    // A batch that changes nothing (a delete of a missing key) has nothing to commit.
    let commits = n("nvm_direct_commits");
    assert!(
        commits > PRELOAD + STEPS * 3 / 4 && commits <= PRELOAD + STEPS,
        "{stats:?}"
    );
    // Splits and merges saved whole pages; updates a few lines.
    assert!(
        n("nvm_direct_undo_lines") > n("nvm_direct_undo_entries"),
        "{stats:?}"
    );
    let total = n("nvm_persist_points");
    assert!(total > 2 * (PRELOAD + STEPS), "{stats:?}");
    check(outcome, "the reference run", &direct_opts());
    nvm_fence_runs(total, 0xd1ec7, direct_devices, &direct_opts());
}

/// Runs the script with the power lost at sampled fences of the NVM region `devices` makes
/// (of `total` in the reference run), unfenced words and unsynced sectors surviving at
/// random, and checks each reopen.
fn nvm_fence_runs(
    total: u64,
    seed: u64,
    devices: fn(&Arc<SimPower>, CrashSimConfig) -> BTreeDevices,
    opts: &BTreeOptions,
) {
    for n in crash_points(1, total, nvm_crash_runs(160), seed) {
        let power = SimPower::new(BlockCrashConfig {
            torn_survival: 0.5,
            seed: n,
            ..BlockCrashConfig::default()
        });
        let devs = devices(
            &power,
            CrashSimConfig {
                crash_after_fences: Some(n),
                unflushed_survival: 0.5,
                seed: n,
                ..CrashSimConfig::default()
            },
        );
        let outcome = script(devs, &power, opts);
        check(outcome, &format!("NVM fence {n} of {total}"), opts);
    }
}

#[test]
fn three_tier_power_loss_at_every_sync_keeps_acknowledged_batches_whole() {
    let report = BlockPowerLoss::new().survival(&[0.0, 0.5]).run(
        |power: &Arc<SimPower>, _point| {
            let devs = three_tier_devices(power, CrashSimConfig::default());
            script(devs, power, &nvm_opts())
        },
        |outcome, point| check(outcome, &format!("sync {point:?}"), &nvm_opts()),
    );
    // NVM victims are spilled to the page file with a sync each batch.
    assert!(report.total_points > STEPS / 2, "{report:?}");
}

#[test]
fn three_tier_power_loss_at_nvm_persist_points_keeps_acknowledged_batches_whole() {
    // The reference run counts the tier's persist points and checks that the script really
    // installs pages, writes them in place, serves misses from NVM and spills victims.
    let power = SimPower::new(BlockCrashConfig::default());
    let devs = three_tier_devices(&power, CrashSimConfig::default());
    let (outcome, stats) = script_with_stats(devs, &power, &nvm_opts());
    let n = |k: &str| stats[k].parse::<u64>().unwrap();
    assert!(n("nvm_admissions") > NVM_SLOTS, "{stats:?}");
    assert!(
        n("nvm_page_writes") > n("nvm_admissions"),
        "no in-place write: {stats:?}"
    );
    assert!(n("nvm_spills") > 0 && n("nvm_hits") > 0, "{stats:?}");
    // Write-backs of changed lines only are among the writes cut short.
    assert!(
        n("nvm_line_write_backs") > 0 && n("nvm_line_write_backs") < n("nvm_page_writes"),
        "{stats:?}"
    );
    let total = n("nvm_persist_points");
    check(outcome, "the reference run", &nvm_opts());
    nvm_fence_runs(total, 0x3713, three_tier_devices, &nvm_opts());
}

#[test]
fn three_tier_power_loss_inside_a_clean_close_loses_nothing() {
    // An NVM tier with room to spare, so that the close hands DRAM pages over to free slots
    // (with the script's 24 slots there is none left by then).
    let len = 8192 + 400 * (4096 + 8);
    // The paper's admission set: pages enter NVM on their second eviction, so DRAM holds
    // pages that have no slot when the close begins.
    let close_opts = nvm_opts().nvm_admission(Admission::RecentlyRefused(64));
    let power = SimPower::new(BlockCrashConfig::default());
    let devs = three_tier_devices_of(&power, CrashSimConfig::default(), len);
    let (outcome, stats) = script_ending(devs, &power, &close_opts, End::Closed);
    let n = |k: &str| stats[k].parse::<u64>().unwrap();
    let (open, closed) = (n("nvm_persist_points"), n("nvm_persist_points_closed"));
    assert!(closed > open + 5, "the close persisted nothing: {stats:?}");
    let handed = n("nvm_handed_over_closed");
    assert!(handed > 5, "the close handed no page over: {stats:?}");
    // The reference close handed pages over, and the next open finds them in NVM.
    let (_, acked, _, images, nvm, _) = outcome.clone();
    check(outcome, "the reference run", &close_opts);
    let power = SimPower::new(BlockCrashConfig::default());
    let devs = BTreeDevices::simulated_from(images, &power)
        .unwrap()
        .with_nvm(
            PmemRegion::from_image(
                &nvm.unwrap(),
                CrashSimConfig::default(),
                &RegionOptions::default(),
            )
            .unwrap(),
        );
    let s = BTreeStore::open_on(devs, None, &close_opts).unwrap();
    let restart: HashMap<String, String> = s.stats().into_iter().collect();
    assert!(
        restart["restart_nvm_pages"].parse::<u64>().unwrap() >= handed,
        "{restart:?}"
    );
    assert_eq!(contents(&s), acked);
    s.abandon();
    // Power lost at every persist point of the close (its checkpoint's write-backs and
    // the hand-over's installs), unfenced words surviving at random.
    for point in open + 1..=closed {
        let power = SimPower::new(BlockCrashConfig {
            torn_survival: 0.5,
            seed: point,
            ..BlockCrashConfig::default()
        });
        let devs = three_tier_devices_of(
            &power,
            CrashSimConfig {
                crash_after_fences: Some(point),
                unflushed_survival: 0.5,
                seed: point,
                ..CrashSimConfig::default()
            },
            len,
        );
        let (outcome, _) = script_ending(devs, &power, &close_opts, End::Closed);
        assert!(outcome.2.is_none(), "power went before the close");
        check(
            outcome,
            &format!("NVM fence {point} of {open}..{closed} (in the close)"),
            &close_opts,
        );
    }
}

/// Two writers put their own keys, interleaved in the same leaves, at the same time (puts that
/// fit their leaf are made beside each other under the shared writer lock; splits take it
/// exclusively), while a third thread checkpoints; power is lost at every sync point. After
/// reopening: every acknowledged put is there, each writer's keys that are there form a prefix
/// of its sequence (its frames reach the log in its order), and the key count matches.
#[test]
fn power_loss_with_concurrent_leaf_writers_keeps_every_acknowledged_put() {
    const WRITERS: usize = 2;
    const PER_WRITER: usize = 120;
    let key = |t: usize, i: usize| format!("{:05}-w{t}", (i * 7919) % 10007).into_bytes();
    let value = |t: usize, i: usize| vec![(t * 100 + i % 100) as u8; 20 + i % 90];
    let report = BlockPowerLoss::new().survival(&[0.0, 0.5]).sample(120).run(
        |power: &Arc<SimPower>, _point| {
            let s =
                BTreeStore::create_on(BTreeDevices::simulated(power).unwrap(), &opts()).unwrap();
            let created = !power.crashed();
            let acked: Vec<usize> = std::thread::scope(|scope| {
                let writers: Vec<_> = (0..WRITERS)
                    .map(|t| {
                        let s = &s;
                        scope.spawn(move || {
                            let mut acked = 0;
                            for i in 0..PER_WRITER {
                                s.put(&key(t, i), &value(t, i)).unwrap();
                                if !power.crashed() {
                                    acked = i + 1;
                                }
                            }
                            acked
                        })
                    })
                    .collect();
                for _ in 0..4 {
                    // After the power went a checkpoint's writes are lost either way.
                    let done = s.checkpoint();
                    assert!(done.is_ok() || power.crashed(), "{done:?}");
                    std::thread::yield_now();
                }
                writers.into_iter().map(|w| w.join().unwrap()).collect()
            });
            let stats: HashMap<String, String> = s.stats().into_iter().collect();
            power.cut();
            let images = s.durable_images().unwrap();
            s.abandon();
            (created, acked, images, stats)
        },
        |(created, acked, images, stats), point| {
            let power = SimPower::new(BlockCrashConfig::default());
            let devs = BTreeDevices::simulated_from(images, &power).unwrap();
            let s = match BTreeStore::open_on(devs, None, &opts()) {
                Ok(s) => s,
                Err(e) if !created => {
                    assert!(e.to_string().contains("superblock"), "{e}");
                    return;
                }
                Err(e) => panic!("reopen at point {point:?}: {e}"),
            };
            // The puts went beside each other, not all through the exclusive writer.
            let leaf_writes: u64 = stats["leaf_writes"].parse().unwrap();
            assert!(leaf_writes > PER_WRITER as u64, "leaf writes {leaf_writes}");
            s.verify()
                .unwrap_or_else(|e| panic!("verify at point {point:?}: {e}"));
            let got = contents(&s);
            let mut there = 0;
            for (t, &acked) in acked.iter().enumerate() {
                let present: Vec<bool> = (0..PER_WRITER)
                    .map(|i| got.get(&key(t, i)) == Some(&value(t, i)))
                    .collect();
                let prefix = present.iter().take_while(|&&p| p).count();
                assert!(
                    prefix >= acked,
                    "point {point:?}: writer {t} acknowledged {acked} puts, {prefix} are there"
                );
                assert!(
                    present[prefix..].iter().all(|&p| !p),
                    "point {point:?}: writer {t}'s puts after {prefix} are there without it"
                );
                there += prefix;
            }
            assert_eq!(got.len(), there, "point {point:?}: keys nobody put");
            assert_eq!(s.len(), there as u64, "point {point:?}: key count");
            s.put(b"after", b"crash").unwrap();
            s.close().unwrap();
        },
    );
    assert!(report.total_points > PER_WRITER as u64, "{report:?}");
}
