//! Persistence ordering, checked with the power-loss simulator and with a real `kill -9`.
//!
//! The simulator (`PmemRegion::simulated`) keeps a shadow image that receives a cache line only
//! when it was flushed and a fence followed. These tests script writes, flushes and fences and
//! check exactly what a power loss leaves behind, including at every persist point of a
//! sequence. The `kill -9` test re-executes this test binary as a child that persists numbered
//! records in a real region file and kills it mid-stream.

mod device_common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use device_common::{lines_touched, pattern, test_dirs};
use tierbase::Error;
use tierbase::device::{
    CrashSimConfig, DurabilityMode, FlushInstruction, MEDIA_LINE, PmemRegion, RegionOptions,
};

const LINE: u64 = 64;

fn sim(len: u64, config: CrashSimConfig) -> PmemRegion {
    PmemRegion::simulated(len, config, &RegionOptions::default()).expect("simulated region")
}

fn survival(p: f64, seed: u64) -> CrashSimConfig {
    CrashSimConfig {
        crash_after_fences: None,
        unflushed_survival: p,
        seed,
        ..CrashSimConfig::default()
    }
}

/// Flush-instruction lines expected for a range (none when the CPU has no flush instruction).
fn expected_flushes(r: &PmemRegion, off: u64, len: u64) -> u64 {
    if r.flush_instruction() == FlushInstruction::None {
        0
    } else {
        lines_touched(off, len, LINE)
    }
}

#[test]
fn persisted_survives_and_unpersisted_vanishes() {
    let r = sim(16384, CrashSimConfig::default());
    assert_eq!(
        r.durability(),
        DurabilityMode::Dax,
        "simulates a DAX device"
    );
    let a = pattern(1, 100);
    let b = pattern(2, 100);
    let c = pattern(3, 8);
    r.write(0, &a).unwrap();
    r.persist(0, a.len()).unwrap(); // written + persisted
    r.write(4096, &b).unwrap(); // written, never flushed
    r.write(8192, &c).unwrap();
    r.flush(8192, c.len()).unwrap(); // flushed, no fence
    assert!(!r.crashed());
    let img = r.power_loss().expect("simulated regions have an image");
    assert!(r.crashed());
    assert_eq!(img.len(), 16384);
    assert_eq!(&img[..100], &a[..]);
    assert!(
        img[100..].iter().all(|&x| x == 0),
        "only the persisted write survives"
    );

    // Reboot from the image: the persisted data reads back, the rest is zero.
    let back =
        PmemRegion::from_image(&img, CrashSimConfig::default(), &RegionOptions::default()).unwrap();
    assert_eq!(back.snapshot(), img);
    let mut buf = vec![0u8; 100];
    back.read(0, &mut buf).unwrap();
    assert_eq!(buf, a);
    back.read(4096, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0));
}

#[test]
fn survival_one_keeps_everything_written() {
    let r = sim(16384, survival(1.0, 7));
    let a = pattern(1, 100);
    let b = pattern(2, 3000);
    let c = pattern(3, 13);
    r.write(0, &a).unwrap();
    r.persist(0, a.len()).unwrap();
    r.write(4096, &b).unwrap();
    r.write(10001, &c).unwrap();
    r.flush(10001, c.len()).unwrap();
    let working = r.snapshot();
    let img = r.power_loss().unwrap();
    assert_eq!(
        img, working,
        "with survival 1 every written byte reaches media"
    );
}

#[test]
fn partial_survival_never_tears_an_8_byte_word_and_replays_by_seed() {
    let run = |seed: u64| {
        let r = sim(8192, survival(0.5, seed));
        // A durable base image: every byte 0x11.
        r.fill(0, 8192, 0x11).unwrap();
        r.persist(0, 8192).unwrap();
        // Unpersisted overwrites: whole words, and partial words (3 bytes in the middle of a
        // word), so a torn word would be visible as a mix.
        r.write(0, &pattern(9, 4096)).unwrap();
        for w in 0..512u64 {
            r.write(4096 + w * 8 + 2, &[0xA0, 0xA1, 0xA2]).unwrap();
        }
        let working = r.snapshot();
        (working, r.power_loss().unwrap())
    };
    let (working, img) = run(42);
    let mut survived = 0;
    let mut lost = 0;
    for (w, (new, got)) in working.chunks(8).zip(img.chunks(8)).enumerate() {
        let old = [0x11u8; 8];
        if got == new {
            survived += 1;
        } else if got == old {
            lost += 1;
        } else {
            panic!("word {w} torn: durable {old:?}, written {new:?}, image {got:?}");
        }
    }
    assert_eq!(survived + lost, 1024);
    assert!(
        survived > 0 && lost > 0,
        "p = 0.5 over 1024 words: {survived} survived"
    );
    assert_eq!(run(42).1, img, "same seed, same image");
    assert_ne!(run(43).1, img, "another seed, another choice");
}

#[test]
fn flushed_without_fence_becomes_durable_at_the_next_fence() {
    let r = sim(8192, CrashSimConfig::default());
    let a = pattern(5, 64);
    r.write(128, &a).unwrap();
    r.flush(128, 64).unwrap();
    let img = r.power_loss().unwrap();
    assert!(img.iter().all(|&x| x == 0), "no fence yet: nothing durable");

    let r = sim(8192, CrashSimConfig::default());
    r.write(128, &a).unwrap();
    r.flush(128, 64).unwrap();
    r.persist(4096, 8).unwrap(); // any fence drains every earlier flush
    let img = r.power_loss().unwrap();
    assert_eq!(&img[128..192], &a[..]);
}

#[test]
fn a_flush_captures_the_line_as_it_was_at_flush_time() {
    let r = sim(4096, CrashSimConfig::default());
    r.write(8, &[1; 8]).unwrap();
    r.flush(8, 8).unwrap();
    r.write(8, &[2; 8]).unwrap(); // after the flush, before the fence: not covered
    r.drain();
    let img = r.power_loss().unwrap();
    assert_eq!(&img[8..16], &[1; 8]);
}

#[test]
fn persist_over_odd_ranges_flushes_every_touched_line() {
    let cases: &[(u64, u64)] = &[
        (0, 1),
        (63, 1),
        (63, 2),
        (1, 64),
        (64, 64),
        (100, 300),
        (255, 2),
        (4095, 2),
        (4000, 5000),
        (0, 12288),
        (12287, 1),
        (0, 0),
        (777, 0),
        (12288, 0),
    ];
    for &(off, len) in cases {
        let r = sim(12288, CrashSimConfig::default());
        let data = pattern(off ^ len, 12288);
        r.write(0, &data).unwrap(); // the whole region dirty, nothing persisted
        let before = r.counters();
        r.persist(off, len as usize).unwrap();
        let d = r.counters().since(&before);
        let ctx = format!("persist({off}, {len})");
        assert_eq!(d.flushes, expected_flushes(&r, off, len), "{ctx}: flushes");
        assert_eq!(d.fences, 1, "{ctx}: one fence per persist");
        assert_eq!(
            d.media_lines_written,
            lines_touched(off, len, MEDIA_LINE as u64),
            "{ctx}: 256 B media lines"
        );
        assert_eq!(r.persist_points(), 1, "{ctx}");
        let img = r.power_loss().unwrap();
        let first = off / LINE * LINE;
        let end = if len == 0 {
            first
        } else {
            (off + len).div_ceil(LINE) * LINE
        };
        for (i, (&got, &want)) in img.iter().zip(&data).enumerate() {
            let i = i as u64;
            if i >= first && i < end {
                assert_eq!(
                    got, want,
                    "{ctx}: byte {i} in a touched line must be durable"
                );
            } else {
                assert_eq!(
                    got, 0,
                    "{ctx}: byte {i} outside the touched lines must not be"
                );
            }
        }
    }
}

#[test]
fn out_of_range_persist_is_a_typed_error_and_no_persist_point() {
    let r = sim(4096, CrashSimConfig::default());
    for (off, len) in [(4096u64, 1usize), (4000, 97), (u64::MAX, 2)] {
        assert!(
            matches!(r.persist(off, len), Err(Error::OutOfRange { .. })),
            "persist({off}, {len})"
        );
        assert!(matches!(r.flush(off, len), Err(Error::OutOfRange { .. })));
    }
    assert_eq!(r.persist_points(), 0);
    assert_eq!(r.counters().fences, 0);
}

/// The scripted sequence: for record k, write it and persist it (persist point 2k+1), then
/// write the commit counter k+1 and persist that (persist point 2k+2). Finally one write
/// without a persist. Returns the working image after each persist point (index 0 = start).
const RECORDS: u64 = 6;
const COUNTER_OFF: u64 = 8192;

fn record_off(k: u64) -> u64 {
    // 40-byte records at a stride that makes some of them cross cache lines.
    k * 100 + 30
}

fn record(k: u64) -> Vec<u8> {
    pattern(1000 + k, 40)
}

fn run_script(r: &PmemRegion, from_record: u64) -> Vec<Vec<u8>> {
    let mut after_point = vec![r.snapshot()];
    for k in from_record..RECORDS {
        r.write(record_off(k), &record(k)).unwrap();
        r.persist(record_off(k), 40).unwrap();
        after_point.push(r.snapshot());
        r.write(COUNTER_OFF, &(k + 1).to_le_bytes()).unwrap();
        r.persist(COUNTER_OFF, 8).unwrap();
        after_point.push(r.snapshot());
    }
    r.write(COUNTER_OFF + 8, &[0xEE; 8]).unwrap(); // never persisted
    after_point
}

/// Recovery: the commit counter says how many records are complete.
fn check_image(img: &[u8], durable_points: u64, ctx: &str) {
    let counter = u64::from_le_bytes(img[COUNTER_OFF as usize..][..8].try_into().unwrap());
    assert_eq!(counter, durable_points / 2, "{ctx}: commit counter");
    let present = durable_points.div_ceil(2); // record k is durable from point 2k+1 on
    for k in 0..RECORDS {
        let got = &img[record_off(k) as usize..][..40];
        if k < present {
            assert_eq!(got, &record(k)[..], "{ctx}: record {k} must be present");
        } else {
            assert!(
                got.iter().all(|&x| x == 0),
                "{ctx}: record {k} must be absent"
            );
        }
    }
    assert_eq!(
        &img[COUNTER_OFF as usize + 8..][..8],
        &[0; 8],
        "{ctx}: unpersisted write"
    );
}

#[test]
fn crash_at_every_persist_point_leaves_exactly_the_persisted_prefix() {
    let total_points = 2 * RECORDS;
    // A run without a crash, for the working image at each persist point.
    let reference = run_script(&sim(12288, CrashSimConfig::default()), 0);
    assert_eq!(reference.len() as u64, total_points + 1);

    for n in 0..=total_points + 1 {
        let cfg = CrashSimConfig {
            crash_after_fences: Some(n),
            unflushed_survival: 0.0,
            seed: n,
            ..CrashSimConfig::default()
        };
        let r = sim(12288, cfg.clone());
        run_script(&r, 0);
        let ctx = format!("crash after {n} fences");
        assert_eq!(r.crashed(), n <= total_points, "{ctx}");
        assert_eq!(r.persist_points(), n.min(total_points), "{ctx}");
        let img = r.power_loss().unwrap();
        check_image(&img, n.min(total_points), &ctx);

        // Recover from the image and finish the script: everything must then be durable.
        let back =
            PmemRegion::from_image(&img, CrashSimConfig::default(), &RegionOptions::default())
                .unwrap();
        let counter = back.read_u64(COUNTER_OFF).unwrap();
        run_script(&back, counter);
        let img = back.power_loss().unwrap();
        check_image(
            &img,
            total_points,
            &format!("{ctx}, recovered and finished"),
        );

        // With survival 1 the image is exactly the working memory at the crash point.
        if n <= total_points {
            let r = sim(
                12288,
                CrashSimConfig {
                    unflushed_survival: 1.0,
                    ..cfg
                },
            );
            run_script(&r, 0);
            assert_eq!(
                r.power_loss().unwrap(),
                reference[n as usize],
                "{ctx}, survival 1"
            );
        }
    }
}

#[test]
fn write_nt_persist_is_durable_at_odd_offsets() {
    let r = sim(16384, CrashSimConfig::default());
    let cases: &[(u64, usize)] = &[
        (0, 1),
        (3, 17),
        (64, 64),
        (129, 100),
        (1000, 4099),
        (8191, 2),
    ];
    let mut fences = 0;
    for &(off, len) in cases {
        let data = pattern(off, len);
        let before = r.counters();
        r.write_nt_persist(off, &data).unwrap();
        let d = r.counters().since(&before);
        fences += 1;
        assert_eq!(d.fences, 1);
        assert_eq!(d.writes, 1);
        assert_eq!(d.bytes_written, len as u64);
        assert_eq!(
            d.media_lines_written,
            lines_touched(off, len as u64, MEDIA_LINE as u64)
        );
    }
    assert_eq!(r.persist_points(), fences);
    let img = r.power_loss().unwrap();
    for &(off, len) in cases {
        assert_eq!(
            &img[off as usize..][..len],
            &pattern(off, len)[..],
            "nt write at {off}"
        );
    }
}

#[test]
fn empty_nt_write_is_a_fence_and_persists_nothing_else() {
    let r = sim(4096, CrashSimConfig::default());
    r.write(0, &[9; 8]).unwrap(); // dirty, never flushed
    let before = r.counters();
    r.write_nt_persist(8, &[]).unwrap();
    let d = r.counters().since(&before);
    assert_eq!(
        (d.flushes, d.fences, d.writes, d.media_lines_written),
        (0, 1, 0, 0)
    );
    assert_eq!(r.persist_points(), 1);
    let img = r.power_loss().unwrap();
    assert_eq!(
        &img[..8],
        &[0; 8],
        "the unflushed neighbour must not become durable"
    );
}

#[test]
fn growth_of_a_simulated_region_keeps_durable_contents_and_zeroes_new_bytes() {
    let r = sim(4096, CrashSimConfig::default());
    let a = pattern(1, 4096);
    r.write(0, &a).unwrap();
    r.persist(0, 4096).unwrap();
    r.grow(65536).unwrap();
    assert_eq!(r.len(), 65536);
    let mut buf = vec![0xFFu8; 65536 - 4096];
    r.read(4096, &mut buf).unwrap();
    assert!(buf.iter().all(|&x| x == 0), "new bytes are zero");
    let b = pattern(2, 100);
    r.write(60000, &b).unwrap();
    r.persist(60000, 100).unwrap();
    r.write(30000, &[5; 10]).unwrap(); // not persisted
    let img = r.power_loss().unwrap();
    assert_eq!(img.len(), 65536);
    assert_eq!(&img[..4096], &a[..]);
    assert_eq!(&img[60000..60100], &b[..]);
    assert!(img[4096..60000 - 60000 % 64].iter().all(|&x| x == 0));
    let back =
        PmemRegion::from_image(&img, CrashSimConfig::default(), &RegionOptions::default()).unwrap();
    assert_eq!(back.len(), 65536);
    assert_eq!(back.snapshot(), img);
}

#[test]
fn simulator_inputs_are_checked_and_real_regions_have_no_image() {
    assert!(matches!(
        PmemRegion::from_image(
            &[0; 100],
            CrashSimConfig::default(),
            &RegionOptions::default()
        ),
        Err(Error::InvalidArgument(_))
    ));
    let anon = PmemRegion::anonymous(4096, &RegionOptions::default()).unwrap();
    assert_eq!(anon.durability(), DurabilityMode::None);
    assert!(anon.power_loss().is_none());
    assert!(!anon.crashed());
    // A simulated region can run in a weaker mode on request, but not in msync.
    let opts = RegionOptions {
        durability: Some(DurabilityMode::Msync),
        ..RegionOptions::default()
    };
    let r = PmemRegion::simulated(4096, CrashSimConfig::default(), &opts).unwrap();
    assert_eq!(r.durability(), DurabilityMode::Msync);
}

// ---------------------------------------------------------------------------------------------
// kill -9
// ---------------------------------------------------------------------------------------------

const CHILD_ENV: &str = "TIERBASE_TEST_KILL9_REGION";
const REC: u64 = 64;

fn kill9_record(seq: u64) -> [u8; REC as usize] {
    let mut r = [0u8; REC as usize];
    r[..8].copy_from_slice(&seq.to_le_bytes());
    r[8..56].copy_from_slice(&pattern(seq, 48));
    let sum = r[..56].iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    r[56..].copy_from_slice(&sum.to_le_bytes());
    r
}

/// Child mode: writes and persists records forever (until killed), printing "ack <seq>" after
/// each persist, and grows the region every 64 records. A no-op in a normal test run.
#[test]
fn kill9_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let r = PmemRegion::open(std::path::Path::new(&path), &RegionOptions::default()).unwrap();
    let mut out = std::io::stdout().lock();
    let mut seq = 0u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        if seq < 200_000 {
            let off = seq * REC;
            if off + REC > r.len() {
                r.grow(r.len() + 4096).unwrap();
            }
            r.write(off, &kill9_record(seq)).unwrap();
            r.persist(off, REC as usize).unwrap();
            writeln!(out, "ack {seq}").unwrap();
            out.flush().unwrap();
            seq += 1;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// "ack N" (libtest may print "test kill9_child ... " in front of the first one).
fn parse_ack(line: &str) -> Option<u64> {
    line.rsplit_once("ack ")
        .and_then(|(_, n)| n.trim().parse().ok())
}

#[test]
fn kill9_keeps_every_acknowledged_record() {
    let exe = std::env::current_exe().unwrap();
    for d in test_dirs() {
        // Kill points early, near a grow (every 64 records) and late; fewer on disk, where
        // every record costs an msync.
        let kill_points: &[u64] = if d.expected_durability() == DurabilityMode::ProcessCrash {
            &[1, 64, 65, 300, 2500, 10000]
        } else {
            &[1, 64, 200]
        };
        for &kill_after in kill_points {
            let path = d.join(&format!("kill9-{kill_after}.region"));
            drop(PmemRegion::create(&path, 4096, &RegionOptions::default()).unwrap());
            let mut child = Command::new(&exe)
                .args(["--exact", "kill9_child", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let mut lines = BufReader::new(stdout).lines();
            let mut acked: Option<u64> = None;
            let mut killed = false;
            for line in lines.by_ref() {
                let line = line.unwrap();
                if let Some(n) = parse_ack(&line) {
                    assert_eq!(n, acked.map_or(0, |a| a + 1), "acks are consecutive");
                    acked = Some(n);
                    if n + 1 >= kill_after {
                        child.kill().unwrap(); // SIGKILL
                        killed = true;
                        break;
                    }
                }
            }
            let status = child.wait().unwrap();
            // Acknowledgements already in the pipe when the child died count too.
            for line in lines {
                let Ok(line) = line else { break };
                if let Some(n) = parse_ack(&line) {
                    acked = Some(n);
                }
            }
            let ctx = format!("{}: kill after {kill_after} acks", d.name);
            assert!(killed, "{ctx}: child ended before it was killed ({status})");
            assert_eq!(status.signal(), Some(libc::SIGKILL), "{ctx}");
            let acked = acked.expect("at least one ack");

            let r = PmemRegion::open(&path, &RegionOptions::default()).unwrap();
            assert_eq!(r.durability(), d.expected_durability(), "{ctx}");
            assert!(
                r.len() >= (acked + 1) * REC,
                "{ctx}: region too short for the acks"
            );
            let mut buf = [0u8; REC as usize];
            for seq in 0..=acked {
                r.read(seq * REC, &mut buf).unwrap();
                assert_eq!(
                    buf,
                    kill9_record(seq),
                    "{ctx}: acknowledged record {seq} lost"
                );
            }
        }
    }
}
