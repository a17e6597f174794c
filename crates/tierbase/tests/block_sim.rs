//! Simulated block devices: what survives a power loss (synced data always, unsynced writes
//! per 512-byte sector with a probability), one power source shared by several devices,
//! injected I/O errors of a dying device, growth and the exclusive lock of file devices, and
//! the block crash harness visiting every sync point.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::panic_text;
use tierbase::Error;
use tierbase::device::{AlignedBuf, BlockCrashConfig, BlockDevice, BlockOptions, SECTOR, SimPower};
use tierbase::testing::crash::{
    BlockFaultInjection, BlockPowerLoss, FaultLog, REPLAY_ENV, Schedule,
};

const BS: u64 = 4096;

fn filled(len: usize, byte: u8) -> AlignedBuf {
    let mut b = AlignedBuf::new(len).unwrap();
    b.fill(byte);
    b
}

/// Bytes that differ from zero everywhere and from sector to sector.
fn patterned(len: usize, seed: u64) -> AlignedBuf {
    let mut b = AlignedBuf::new(len).unwrap();
    for (i, x) in b.iter_mut().enumerate() {
        *x = ((i as u64).wrapping_mul(31).wrapping_add(seed) % 255 + 1) as u8;
    }
    b
}

fn power(cfg: BlockCrashConfig) -> Arc<SimPower> {
    SimPower::new(cfg)
}

fn survival(p: f64) -> Arc<SimPower> {
    power(BlockCrashConfig {
        torn_survival: p,
        seed: 7,
        ..BlockCrashConfig::default()
    })
}

fn read(dev: &BlockDevice, offset: u64, len: usize) -> Vec<u8> {
    let mut b = AlignedBuf::new(len).unwrap();
    dev.read_at(offset, &mut b).unwrap();
    b.to_vec()
}

fn replaying() -> bool {
    std::env::var_os(REPLAY_ENV).is_some()
}

#[test]
fn synced_data_survives_and_unsynced_data_does_not_without_survival() {
    let p = survival(0.0);
    let dev = BlockDevice::simulated("pages", 4 * BS, BS, &p).unwrap();
    assert!(dev.is_simulated());
    assert_eq!(dev.durable_image().unwrap(), vec![0; 4 * BS as usize]);
    dev.write_at(0, &filled(BS as usize, 1)).unwrap();
    dev.sync().unwrap();
    dev.write_at(BS, &filled(BS as usize, 2)).unwrap();
    assert_eq!(
        dev.durable_image().unwrap()[BS as usize..2 * BS as usize],
        [0; BS as usize],
        "unsynced write on media before any power loss"
    );
    assert!(p.cut());
    assert!(p.crashed() && !p.crashed_at_sync());
    let img = dev.durable_image().unwrap();
    assert!(
        img[..BS as usize].iter().all(|&b| b == 1),
        "synced block lost"
    );
    assert!(
        img[BS as usize..].iter().all(|&b| b == 0),
        "unsynced block survived"
    );
    // The process runs on: reads return what it wrote, nothing more reaches media.
    assert_eq!(read(&dev, BS, BS as usize), vec![2; BS as usize]);
    dev.write_at(2 * BS, &filled(BS as usize, 3)).unwrap();
    dev.sync().unwrap();
    assert_eq!(read(&dev, 2 * BS, BS as usize), vec![3; BS as usize]);
    assert_eq!(
        dev.durable_image().unwrap(),
        img,
        "media changed after the power loss"
    );
    assert_eq!(p.syncs(), 1);
    assert_eq!(dev.counters().syncs, 2, "counters count the calls");

    // Reboot from the image.
    let fresh = SimPower::new(BlockCrashConfig::default());
    let again = BlockDevice::simulated_from("pages", img.clone(), BS, &fresh).unwrap();
    assert_eq!(again.len(), 4 * BS);
    assert_eq!(read(&again, 0, 4 * BS as usize), img);
}

#[test]
fn unsynced_writes_are_kept_with_survival_one() {
    let p = power(BlockCrashConfig {
        crash_after_syncs: Some(1),
        torn_survival: 1.0,
        ..BlockCrashConfig::default()
    });
    let dev = BlockDevice::simulated("log", 4 * BS, BS, &p).unwrap();
    dev.write_at(0, &filled(BS as usize, 1)).unwrap();
    dev.sync().unwrap();
    assert!(!p.crashed());
    dev.write_at(0, &filled(BS as usize, 4)).unwrap();
    dev.write_at(BS, &filled(BS as usize, 2)).unwrap();
    dev.sync().unwrap(); // power dies here
    assert!(p.crashed() && p.crashed_at_sync());
    assert_eq!(p.syncs(), 1, "the crash sync does not take effect");
    dev.write_at(2 * BS, &filled(BS as usize, 3)).unwrap(); // after the loss
    let img = dev.durable_image().unwrap();
    assert!(img[..BS as usize].iter().all(|&b| b == 4));
    assert!(img[BS as usize..2 * BS as usize].iter().all(|&b| b == 2));
    assert!(
        img[2 * BS as usize..].iter().all(|&b| b == 0),
        "write after the loss"
    );
}

#[test]
fn crash_at_point_zero_is_the_first_sync_call() {
    let p = power(BlockCrashConfig {
        crash_after_syncs: Some(0),
        ..BlockCrashConfig::default()
    });
    let dev = BlockDevice::simulated("log", BS, BS, &p).unwrap();
    dev.write_at(0, &filled(BS as usize, 9)).unwrap();
    assert!(!p.crashed(), "power is lost at the first sync, not before");
    dev.sync().unwrap();
    assert!(p.crashed());
    assert_eq!(p.syncs(), 0);
    assert_eq!(dev.durable_image().unwrap(), vec![0; BS as usize]);
    assert_eq!(dev.working_image().unwrap(), vec![9; BS as usize]);
}

#[test]
fn torn_writes_mix_old_and_new_sectors() {
    const LEN: usize = 64 << 10;
    let image = |seed: u64| {
        let p = power(BlockCrashConfig {
            torn_survival: 0.5,
            seed,
            ..BlockCrashConfig::default()
        });
        let dev = BlockDevice::simulated("pages", LEN as u64, BS, &p).unwrap();
        dev.write_at(0, &patterned(LEN, 1)).unwrap();
        p.cut();
        dev.durable_image().unwrap()
    };
    let new = patterned(LEN, 1);
    let img = image(3);
    let (mut old_sectors, mut new_sectors) = (0, 0);
    for (got, want) in img.chunks(SECTOR as usize).zip(new.chunks(SECTOR as usize)) {
        if got == want {
            new_sectors += 1;
        } else if got.iter().all(|&b| b == 0) {
            old_sectors += 1;
        } else {
            panic!("a sector was torn inside itself");
        }
    }
    assert_eq!(old_sectors + new_sectors, LEN / SECTOR as usize);
    assert!(
        old_sectors > 0 && new_sectors > 0,
        "{old_sectors} old, {new_sectors} new"
    );
    assert_eq!(img, image(3), "same seed, same image");
}

#[test]
fn two_devices_on_one_power_source_crash_at_the_same_sync() {
    let p = power(BlockCrashConfig {
        crash_after_syncs: Some(2),
        ..BlockCrashConfig::default()
    });
    let pages = BlockDevice::simulated("pages", 2 * BS, BS, &p).unwrap();
    let log = BlockDevice::simulated("log", 2 * BS, BS, &p).unwrap();
    log.write_at(0, &filled(BS as usize, 1)).unwrap();
    log.sync().unwrap(); // sync 1
    pages.write_at(0, &filled(BS as usize, 2)).unwrap();
    pages.sync().unwrap(); // sync 2
    assert!(!p.crashed());
    log.write_at(BS, &filled(BS as usize, 3)).unwrap();
    pages.write_at(BS, &filled(BS as usize, 4)).unwrap();
    log.sync().unwrap(); // power dies: neither device's new block is durable
    assert!(p.crashed());
    pages.sync().unwrap(); // too late
    assert_eq!(p.syncs(), 2);
    let (li, pi) = (log.durable_image().unwrap(), pages.durable_image().unwrap());
    assert_eq!(li[..BS as usize], [1; BS as usize]);
    assert_eq!(pi[..BS as usize], [2; BS as usize]);
    assert_eq!(li[BS as usize..], [0; BS as usize]);
    assert_eq!(pi[BS as usize..], [0; BS as usize]);
}

fn assert_injected(e: &Error, name: &str) {
    match e {
        Error::Io { path, source, .. } => {
            assert_eq!(path.as_deref(), Some(Path::new(name)), "{e}");
            assert_eq!(source.raw_os_error(), Some(libc::EIO), "{e}");
        }
        other => panic!("expected an injected I/O error, got {other:?}"),
    }
}

#[test]
fn failure_injection_fails_writes_and_syncs_after_n_syncs() {
    let p = power(BlockCrashConfig {
        fail_syncs_after: Some(1),
        ..BlockCrashConfig::default()
    });
    let dev = BlockDevice::simulated("wal", 2 * BS, BS, &p).unwrap();
    dev.write_at(0, &filled(BS as usize, 1)).unwrap();
    dev.sync().unwrap();
    let e = dev.write_at(BS, &filled(BS as usize, 2)).unwrap_err();
    assert_injected(&e, "wal");
    assert!(e.to_string().contains("wal"), "{e}");
    assert_injected(&dev.sync().unwrap_err(), "wal");
    assert_eq!(p.syncs(), 1);
    // Reads still work; the failed write changed nothing.
    assert_eq!(
        read(&dev, 0, 2 * BS as usize)[..BS as usize],
        [1; BS as usize]
    );
    assert_eq!(read(&dev, BS, BS as usize), vec![0; BS as usize]);

    let p = power(BlockCrashConfig {
        fail_syncs_after: Some(0),
        ..BlockCrashConfig::default()
    });
    let dev = BlockDevice::simulated("wal", BS, BS, &p).unwrap();
    assert_injected(
        &dev.write_at(0, &filled(BS as usize, 1)).unwrap_err(),
        "wal",
    );
    assert_injected(&dev.sync().unwrap_err(), "wal");
}

#[test]
fn simulated_requests_are_validated_like_files() {
    let p = SimPower::new(BlockCrashConfig::default());
    assert!(matches!(
        BlockDevice::simulated("x", BS + 1, BS, &p),
        Err(Error::Misaligned { .. })
    ));
    assert!(matches!(
        BlockDevice::simulated("x", BS, 3, &p),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        BlockDevice::simulated_from("x", vec![0; 100], 512, &p),
        Err(Error::Misaligned { .. })
    ));
    let dev = BlockDevice::simulated("x", 2 * BS, 512, &p).unwrap();
    assert!(matches!(
        dev.write_at(2 * BS, &filled(BS as usize, 1)),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        dev.write_at(100, &filled(BS as usize, 1)),
        Err(Error::Misaligned { .. })
    ));
    assert_eq!(dev.counters().writes, 0, "rejected requests count nothing");
    dev.write_at(512, &filled(BS as usize, 1)).unwrap();
    assert_eq!(dev.counters().writes, 1);
    assert_eq!(dev.counters().bytes_written, BS);
}

#[test]
fn grow_works_on_simulated_devices() {
    let p = SimPower::new(BlockCrashConfig::default());
    let dev = BlockDevice::simulated("pages", BS, BS, &p).unwrap();
    dev.write_at(0, &filled(BS as usize, 1)).unwrap();
    dev.sync().unwrap();
    assert!(matches!(
        dev.write_at(BS, &filled(BS as usize, 2)),
        Err(Error::OutOfRange { .. })
    ));
    dev.grow(3 * BS).unwrap();
    assert_eq!(dev.len(), 3 * BS);
    assert_eq!(read(&dev, BS, 2 * BS as usize), vec![0; 2 * BS as usize]);
    dev.write_at(2 * BS, &filled(BS as usize, 2)).unwrap();
    assert!(matches!(dev.grow(2 * BS), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        dev.grow(3 * BS + 1),
        Err(Error::Misaligned { .. })
    ));
    dev.grow(3 * BS).unwrap(); // same length: no-op
    p.cut();
    let img = dev.durable_image().unwrap();
    assert_eq!(img.len(), 3 * BS as usize, "growth is durable at once");
    assert_eq!(img[..BS as usize], [1; BS as usize]);
    assert!(img[BS as usize..].iter().all(|&b| b == 0));
}

#[test]
fn grow_works_on_files_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pages");
    let opts = BlockOptions::default();
    {
        let dev = BlockDevice::create(&path, 16 * BS, &opts).unwrap();
        assert!(!dev.is_simulated());
        assert_eq!(dev.durable_image(), None);
        dev.write_at(15 * BS, &filled(BS as usize, 1)).unwrap();
        assert!(matches!(
            dev.write_at(16 * BS, &filled(BS as usize, 2)),
            Err(Error::OutOfRange { .. })
        ));
        dev.grow(32 * BS).unwrap();
        assert_eq!(dev.len(), 32 * BS);
        assert_eq!(dev.info().len, 32 * BS);
        dev.write_at(31 * BS, &filled(BS as usize, 2)).unwrap();
        dev.sync().unwrap();
        assert!(matches!(dev.grow(16 * BS), Err(Error::InvalidArgument(_))));
        assert!(matches!(
            dev.grow(40 * BS + 1),
            Err(Error::Misaligned { .. })
        ));
        assert_eq!(dev.len(), 32 * BS);
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 32 * BS);
    let dev = BlockDevice::open(&path, &opts).unwrap();
    assert_eq!(dev.len(), 32 * BS);
    assert_eq!(read(&dev, 15 * BS, BS as usize), vec![1; BS as usize]);
    assert_eq!(read(&dev, 16 * BS, BS as usize), vec![0; BS as usize]);
    assert_eq!(read(&dev, 31 * BS, BS as usize), vec![2; BS as usize]);
}

#[test]
fn lock_exclusive_keeps_a_second_handle_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let opts = BlockOptions::default();
    let first = BlockDevice::create(&path, 4 * BS, &opts).unwrap();
    first.lock_exclusive().unwrap();
    first.lock_exclusive().unwrap(); // the holder may ask again
    let second = BlockDevice::open(&path, &opts).unwrap();
    match second.lock_exclusive() {
        Err(Error::Locked { path: p, holder }) => {
            assert_eq!(p, path);
            assert!(!holder.is_empty());
        }
        other => panic!("second lock: {other:?}"),
    }
    drop(first);
    second.lock_exclusive().unwrap();

    let p = SimPower::new(BlockCrashConfig::default());
    let a = BlockDevice::simulated("store", BS, BS, &p).unwrap();
    let b = BlockDevice::simulated("store2", BS, BS, &p).unwrap();
    a.lock_exclusive().unwrap();
    b.lock_exclusive().unwrap();
}

/// A "store": a log and a page file. Each of `n` records goes to the log (synced), then to
/// its page (synced). Acknowledged = both syncs returned before the power loss.
fn log_and_pages(power: &Arc<SimPower>, n: u8) -> (usize, Vec<u8>, Vec<u8>) {
    let log = BlockDevice::simulated("log", 8 * BS, BS, power).unwrap();
    let pages = BlockDevice::simulated("pages", 8 * BS, BS, power).unwrap();
    let mut acked = 0;
    for i in 0..n {
        let at = u64::from(i) * BS;
        log.write_at(at, &filled(BS as usize, i + 1)).unwrap();
        log.sync().unwrap();
        pages.write_at(at, &filled(BS as usize, i + 101)).unwrap();
        pages.sync().unwrap();
        if !power.crashed() {
            acked += 1;
        }
    }
    power.cut();
    (
        acked,
        log.durable_image().unwrap(),
        pages.durable_image().unwrap(),
    )
}

#[test]
fn the_harness_visits_every_sync_point() {
    let mut visited = Vec::new();
    let report = BlockPowerLoss::new().survival(&[0.0, 0.5, 1.0]).run(
        |power, point| {
            visited.push(point);
            if let Some(n) = point {
                assert_eq!(power.config().crash_after_syncs, Some(n));
            }
            log_and_pages(power, 3)
        },
        |(acked, log, pages), point| {
            let b = BS as usize;
            for i in 0..acked {
                assert!(log[i * b..(i + 1) * b].iter().all(|&x| x == i as u8 + 1));
                assert!(
                    pages[i * b..(i + 1) * b]
                        .iter()
                        .all(|&x| x == i as u8 + 101)
                );
            }
            if let Some(n) = point {
                // Power died at sync n + 1: `n` syncs are whole records' halves.
                assert_eq!(acked as u64, n / 2, "point {n}");
            }
        },
    );
    if replaying() {
        return;
    }
    assert_eq!(report.total_points, 6);
    assert_eq!(report.runs, 8, "reference run and points 0..=6");
    assert_eq!(
        report.crashed_in_script, 6,
        "points 0..=5 lose power during the script"
    );
    let mut expected = vec![None];
    expected.extend((0..=6).map(Some));
    assert_eq!(visited, expected);

    let sampled = BlockPowerLoss::new()
        .sample(3)
        .run(|power, _| log_and_pages(power, 3), |_, _| {});
    assert_eq!((sampled.total_points, sampled.runs), (6, 4));
}

#[test]
fn the_harness_names_the_point_of_a_failed_check() {
    let r = std::panic::catch_unwind(|| {
        BlockPowerLoss::new().run(
            |power, _| log_and_pages(power, 2),
            |_, point| assert_ne!(point, Some(3), "boom"),
        )
    });
    let msg = panic_text(&r.expect_err("accepted"));
    assert!(
        msg.contains("power loss at sync point 3") && msg.contains("boom"),
        "{msg}"
    );
}

/// A "store" that writes `n` blocks, syncing each, and refuses writes after a failure.
fn read_only_after_failure(power: &Arc<SimPower>, log: &mut FaultLog, n: u8) -> (u64, Vec<u8>) {
    let dev = BlockDevice::simulated("wal", 8 * BS, BS, power).unwrap();
    let mut acked = 0;
    for i in 0..=n {
        if i == n && !log.failed() {
            break; // one more write (a probe) only after a failure
        }
        let r = match log.failure() {
            Some(f) => Err(Error::ReadOnly {
                path: None,
                reason: f.to_string(),
            }),
            None => dev
                .write_at(u64::from(i) * BS, &filled(BS as usize, i + 1))
                .and_then(|()| dev.sync()),
        };
        if log.write(r).is_some() {
            acked += 1;
        }
    }
    (acked, dev.durable_image().unwrap())
}

#[test]
fn fault_injection_visits_every_sync_point() {
    let mut visited = Vec::new();
    let report = BlockFaultInjection::new().every_point_fails(true).run(
        |power, log, point| {
            visited.push(point);
            read_only_after_failure(power, log, 3)
        },
        |(acked, image), point| {
            let b = BS as usize;
            for i in 0..acked as usize {
                assert!(image[i * b..(i + 1) * b].iter().all(|&x| x == i as u8 + 1));
            }
            if let Some(n) = point {
                assert_eq!(acked, n.min(3), "point {n}");
            }
        },
    );
    if replaying() {
        return;
    }
    assert_eq!(
        (report.total_points, report.runs, report.failed_runs),
        (3, 5, 3)
    );
    let mut expected = vec![None];
    expected.extend((0..=3).map(Some));
    assert_eq!(visited, expected);

    // A store that goes on writing after a failure is caught.
    let r = std::panic::catch_unwind(|| {
        BlockFaultInjection::new().run(
            |power, log, _| {
                let dev = BlockDevice::simulated("wal", 2 * BS, BS, power).unwrap();
                for i in 0..2u64 {
                    log.write(dev.write_at(i * BS, &filled(BS as usize, 1)));
                    log.write(dev.sync());
                }
            },
            |(), _| {},
        )
    });
    let msg = panic_text(&r.expect_err("accepted"));
    assert!(
        msg.contains("failing after sync point") && msg.contains("Error::ReadOnly"),
        "{msg}"
    );
}

/// Devices on one power source share the space `limit_space` gives them: a growth past it
/// fails with `DeviceFull` and changes nothing; freeing space (a higher limit) lets it through.
#[test]
fn devices_share_a_limited_space() {
    let p = power(BlockCrashConfig::default());
    let a = BlockDevice::simulated("pages", 4 * BS, BS, &p).unwrap();
    let b = BlockDevice::simulated("log", 2 * BS, BS, &p).unwrap();
    p.limit_space(Some(8 * BS));
    a.grow(6 * BS).unwrap();
    let err = b.grow(3 * BS).unwrap_err();
    assert!(matches!(err, Error::DeviceFull { .. }), "{err}");
    assert_eq!(b.len(), 2 * BS);
    a.grow(6 * BS).unwrap(); // the length it has: no growth, no refusal
    p.limit_space(Some(9 * BS));
    b.grow(3 * BS).unwrap();
    assert_eq!((a.len(), b.len()), (6 * BS, 3 * BS));
}
