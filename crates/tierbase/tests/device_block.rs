//! Block devices: round trips, typed rejection of bad requests (with no I/O done), batches
//! larger than the queue depth on both engines, concurrent submitters, `O_DIRECT` policies and
//! full devices.

mod device_common;

use device_common::{Mount, TestDir, pattern, shm_dir, test_dirs};
use tierbase::Error;
use tierbase::device::probe::probe;
use tierbase::device::{
    AlignedBuf, BlockDevice, BlockOptions, CounterSnapshot, DirectIo, Io, IoEngineKind,
};

const BS: u64 = 4096;

fn engines() -> [IoEngineKind; 2] {
    [IoEngineKind::Auto, IoEngineKind::Threads]
}

fn options(engine: IoEngineKind, queue_depth: u32) -> BlockOptions {
    BlockOptions {
        engine,
        queue_depth,
        ..BlockOptions::default()
    }
}

fn buf_with(seed: u64, len: usize) -> AlignedBuf {
    let mut b = AlignedBuf::new(len).unwrap();
    b.copy_from_slice(&pattern(seed, len));
    b
}

fn io_uring_works(d: &TestDir) -> bool {
    probe(d.path()).expect("probe").io_uring.available
}

#[test]
fn round_trips_at_many_offsets_and_sizes() {
    for d in test_dirs() {
        for engine in engines() {
            let path = d.join(&format!("rt-{engine:?}"));
            let dev = BlockDevice::create(&path, 8 << 20, &options(engine, 16)).unwrap();
            let ctx = format!("{} {engine:?}", d.name);
            assert_eq!(dev.len(), 8 << 20);
            let info = dev.info();
            assert_eq!(info.direct_io, dev.is_direct());
            assert_eq!(info.emulation, "none");
            match engine {
                IoEngineKind::Threads => assert_eq!(info.engine, IoEngineKind::Threads),
                _ if io_uring_works(&d) => assert_eq!(info.engine, IoEngineKind::IoUring, "{ctx}"),
                _ => {}
            }
            let cases: &[(u64, usize)] = &[
                (0, 1),
                (1, 1),
                (7, 3),
                (100, 17),
                (511, 2),
                (1000, 64),
                (2047, 1),
                (1536, 256),
                (300, 129),
            ];
            let mut bytes = 0;
            for &(block, blocks) in cases {
                let len = blocks * BS as usize;
                let w = buf_with(block * 1000 + blocks as u64, len);
                dev.write_at(block * BS, &w).unwrap();
                let mut r = AlignedBuf::new(len).unwrap();
                dev.read_at(block * BS, &mut r).unwrap();
                assert!(r[..] == w[..], "{ctx}: block {block} x {blocks}");
                bytes += len as u64;
            }
            dev.sync().unwrap();
            let c = dev.counters();
            let n = cases.len() as u64;
            assert_eq!((c.reads, c.writes), (n, n), "{ctx}");
            assert_eq!((c.bytes_read, c.bytes_written), (bytes, bytes), "{ctx}");
            assert_eq!(c.syncs, 1);
            assert_eq!(c.max_in_flight, 1, "{ctx}: single I/Os");
            drop(dev);
            // Contents persist across reopen (the last write wins where cases overlap).
            let dev = BlockDevice::open(&path, &options(engine, 4)).unwrap();
            let (block, blocks) = cases[cases.len() - 1];
            let mut r = AlignedBuf::new(blocks * BS as usize).unwrap();
            dev.read_at(block * BS, &mut r).unwrap();
            assert!(r[..] == pattern(block * 1000 + blocks as u64, r.len())[..]);
        }
    }
}

#[test]
fn bad_requests_are_typed_errors_and_do_no_io() {
    for d in test_dirs() {
        for engine in engines() {
            let ctx = format!("{} {engine:?}", d.name);
            let path = d.join(&format!("bad-{engine:?}"));
            let opts = BlockOptions {
                block_size: 8192,
                ..options(engine, 8)
            };
            let dev = BlockDevice::create(&path, 1 << 20, &opts).unwrap();
            let len = dev.len();
            let mut b4 = AlignedBuf::new(4096).unwrap();
            let mut b8 = AlignedBuf::new(8192).unwrap();
            let w8 = buf_with(1, 8192);
            let before: CounterSnapshot = dev.counters();
            let misaligned = |r: tierbase::Result<()>| matches!(r, Err(Error::Misaligned { .. }));
            let oor = |r: tierbase::Result<()>| matches!(r, Err(Error::OutOfRange { .. }));
            assert!(
                misaligned(dev.read_at(4096, &mut b8)),
                "{ctx}: offset not a block"
            );
            assert!(misaligned(dev.read_at(100, &mut b8)), "{ctx}: odd offset");
            assert!(
                misaligned(dev.read_at(0, &mut b4)),
                "{ctx}: length not a block"
            );
            assert!(
                misaligned(dev.write_at(0, &b4)),
                "{ctx}: length not a block"
            );
            assert!(oor(dev.read_at(len, &mut b8)), "{ctx}: at the end");
            assert!(oor(dev.write_at(len, &w8)), "{ctx}: at the end");
            assert!(
                oor(dev.read_at(u64::MAX - 8191, &mut b8)),
                "{ctx}: overflow"
            );
            // One bad request fails the whole batch before anything is issued.
            let mut ok = AlignedBuf::new(8192).unwrap();
            let r = dev.submit(&mut [
                Io::Write {
                    offset: 0,
                    buf: &w8,
                },
                Io::Read {
                    offset: 8192,
                    buf: &mut ok,
                },
                Io::Write {
                    offset: len,
                    buf: &w8,
                },
            ]);
            assert!(oor(r), "{ctx}: batch with an out-of-range write");
            assert_eq!(dev.counters(), before, "{ctx}: counters unchanged");
            dev.read_at(0, &mut b8).unwrap();
            assert!(
                b8.iter().all(|&x| x == 0),
                "{ctx}: the good write was not issued"
            );
            assert!(dev.submit(&mut []).is_ok(), "an empty batch is fine");
        }
        // Zero and odd lengths cannot even be allocated.
        assert!(matches!(AlignedBuf::new(0), Err(Error::Misaligned { .. })));
        assert!(matches!(
            AlignedBuf::new(4097),
            Err(Error::Misaligned { .. })
        ));
        // Bad options and sizes at create leave no file behind.
        let path = d.join("bad-create");
        for (len, opts) in [
            (1u64 << 20, options(IoEngineKind::Auto, 0)),
            (
                1 << 20,
                BlockOptions {
                    block_size: 3000,
                    ..BlockOptions::default()
                },
            ),
            (0, BlockOptions::default()),
            (4095, BlockOptions::default()),
        ] {
            assert!(
                BlockDevice::create(&path, len, &opts).is_err(),
                "{len} {opts:?}"
            );
            assert!(
                !path.exists(),
                "{}: no file left behind ({len}, {opts:?})",
                d.name
            );
        }
    }
}

/// Writes `k` distinct blocks in one batch, reads them back in one batch, checks contents
/// and counters.
fn batch(dev: &BlockDevice, k: usize, seed: u64, ctx: &str) {
    let writes: Vec<AlignedBuf> = (0..k).map(|i| buf_with(seed + i as u64, 4096)).collect();
    let mut reads: Vec<AlignedBuf> = (0..k).map(|_| AlignedBuf::new(4096).unwrap()).collect();
    // Scatter: block i*7 mod blocks (distinct for k <= blocks: 7 is coprime to a power of 2).
    let blocks = (dev.len() / BS) as usize;
    assert!(blocks.is_power_of_two() && k <= blocks);
    let block = |i: usize| ((i * 7) % blocks) as u64 * BS;
    let before = dev.counters();
    let mut ios: Vec<Io<'_>> = writes
        .iter()
        .enumerate()
        .map(|(i, buf)| Io::Write {
            offset: block(i),
            buf,
        })
        .collect();
    dev.submit(&mut ios).unwrap();
    let mut ios: Vec<Io<'_>> = reads
        .iter_mut()
        .enumerate()
        .map(|(i, buf)| Io::Read {
            offset: block(i),
            buf,
        })
        .collect();
    dev.submit(&mut ios).unwrap();
    for (i, (r, w)) in reads.iter().zip(&writes).enumerate() {
        assert!(r[..] == w[..], "{ctx}: I/O {i} of {k}");
    }
    let c = dev.counters().since(&before);
    let k = k as u64;
    assert_eq!((c.reads, c.writes), (k, k), "{ctx}");
    assert_eq!((c.bytes_read, c.bytes_written), (k * BS, k * BS), "{ctx}");
}

#[test]
fn batches_larger_than_the_queue_depth_complete_and_add_up() {
    for d in test_dirs() {
        for engine in engines() {
            for (qd, k) in [(32u32, 64usize), (32, 200), (8, 5), (1, 20)] {
                let ctx = format!("{} {engine:?} qd {qd} k {k}", d.name);
                let path = d.join(&format!("batch-{engine:?}-{qd}-{k}"));
                let dev = BlockDevice::create(&path, 8 << 20, &options(engine, qd)).unwrap();
                batch(&dev, k, 10, &ctx);
                let max = dev.counters().max_in_flight;
                let depth = match dev.info().engine {
                    IoEngineKind::Threads => qd.min(16) as usize,
                    _ => qd as usize,
                };
                assert!(max as usize <= depth, "{ctx}: {max} in flight");
                assert!(max >= 1, "{ctx}");
                if dev.info().engine == IoEngineKind::IoUring {
                    // io_uring fills the ring before it waits: exactly min(k, depth).
                    assert_eq!(max as usize, k.min(depth), "{ctx}");
                }
            }
        }
    }
}

#[test]
fn mixed_batches_complete() {
    for d in test_dirs() {
        for engine in engines() {
            let ctx = format!("{} {engine:?}", d.name);
            let dev = BlockDevice::create(
                &d.join(&format!("mixed-{engine:?}")),
                4 << 20,
                &options(engine, 8),
            )
            .unwrap();
            // Prepare blocks 0..50 with known contents, then read them while writing 50..100.
            let old: Vec<AlignedBuf> = (0..50).map(|i| buf_with(i, 4096)).collect();
            let mut ios: Vec<Io<'_>> = old
                .iter()
                .enumerate()
                .map(|(i, buf)| Io::Write {
                    offset: i as u64 * BS,
                    buf,
                })
                .collect();
            dev.submit(&mut ios).unwrap();
            let new: Vec<AlignedBuf> = (50..100).map(|i| buf_with(i, 4096)).collect();
            let mut got: Vec<AlignedBuf> =
                (0..50).map(|_| AlignedBuf::new(4096).unwrap()).collect();
            let mut ios: Vec<Io<'_>> = Vec::new();
            for (i, (w, r)) in new.iter().zip(got.iter_mut()).enumerate() {
                ios.push(Io::Read {
                    offset: i as u64 * BS,
                    buf: r,
                });
                ios.push(Io::Write {
                    offset: (50 + i) as u64 * BS,
                    buf: w,
                });
            }
            dev.submit(&mut ios).unwrap();
            drop(ios);
            for (i, (g, o)) in got.iter().zip(&old).enumerate() {
                assert!(g[..] == o[..], "{ctx}: read {i}");
            }
            let mut all = AlignedBuf::new(100 * 4096).unwrap();
            dev.read_at(0, &mut all).unwrap();
            for i in 0..100 {
                assert!(
                    all[i * 4096..][..4096] == pattern(i as u64, 4096)[..],
                    "{ctx}: block {i}"
                );
            }
            let c = dev.counters();
            assert_eq!((c.writes, c.reads), (100, 51), "{ctx}");
        }
    }
}

#[test]
fn concurrent_submitters() {
    for d in test_dirs() {
        for engine in engines() {
            let ctx = format!("{} {engine:?}", d.name);
            let qd = 4;
            let dev = BlockDevice::create(
                &d.join(&format!("conc-{engine:?}")),
                4 << 20,
                &options(engine, qd),
            )
            .unwrap();
            let threads = 4u64;
            let rounds = 25u64;
            std::thread::scope(|s| {
                for t in 0..threads {
                    let dev = &dev;
                    s.spawn(move || {
                        for round in 0..rounds {
                            // Each thread owns blocks t*256 .. t*256+256.
                            let bufs: Vec<AlignedBuf> = (0..8)
                                .map(|i| buf_with(t * 10_000 + round * 8 + i, 4096))
                                .collect();
                            let at = |i: u64| (t * 256 + (round * 8 + i) % 256) * BS;
                            let mut ios: Vec<Io<'_>> = bufs
                                .iter()
                                .enumerate()
                                .map(|(i, buf)| Io::Write {
                                    offset: at(i as u64),
                                    buf,
                                })
                                .collect();
                            dev.submit(&mut ios).unwrap();
                            let mut back: Vec<AlignedBuf> =
                                (0..8).map(|_| AlignedBuf::new(4096).unwrap()).collect();
                            let mut ios: Vec<Io<'_>> = back
                                .iter_mut()
                                .enumerate()
                                .map(|(i, buf)| Io::Read {
                                    offset: at(i as u64),
                                    buf,
                                })
                                .collect();
                            dev.submit(&mut ios).unwrap();
                            drop(ios);
                            for (b, w) in back.iter().zip(&bufs) {
                                assert!(b[..] == w[..]);
                            }
                        }
                    });
                }
            });
            let c = dev.counters();
            let n = threads * rounds * 8;
            assert_eq!((c.reads, c.writes), (n, n), "{ctx}");
            assert_eq!((c.bytes_read, c.bytes_written), (n * BS, n * BS), "{ctx}");
            assert!(
                c.max_in_flight >= 1 && c.max_in_flight <= threads * u64::from(qd),
                "{ctx}: {} in flight on the device",
                c.max_in_flight
            );
        }
    }
}

#[test]
fn direct_io_policies() {
    let Some(d) = shm_dir() else { return };
    let path = d.join("direct");
    drop(BlockDevice::create(&path, 1 << 20, &BlockOptions::default()).unwrap());
    let off = BlockDevice::open(
        &path,
        &BlockOptions {
            direct: DirectIo::Off,
            ..BlockOptions::default()
        },
    )
    .unwrap();
    assert!(!off.is_direct());
    assert!(!off.info().direct_io);
    drop(off);
    // tmpfs accepts O_DIRECT on recent kernels (6.6+); older ones refuse it with EINVAL.
    match BlockDevice::open(
        &path,
        &BlockOptions {
            direct: DirectIo::Require,
            ..BlockOptions::default()
        },
    ) {
        Ok(dev) => {
            assert!(dev.is_direct());
            let w = buf_with(3, 8192);
            dev.write_at(4096, &w).unwrap();
            let mut r = AlignedBuf::new(8192).unwrap();
            dev.read_at(4096, &mut r).unwrap();
            assert!(r[..] == w[..]);
        }
        Err(e) => assert!(matches!(e, Error::Io { .. }), "clean error: {e:?}"),
    }
    let auto = BlockDevice::open(&path, &BlockOptions::default()).unwrap();
    assert_eq!(
        auto.is_direct(),
        probe(d.path()).unwrap().o_direct.available
    );
}

#[test]
fn buffered_fallback_where_o_direct_is_refused() {
    // ramfs refuses O_DIRECT and fallocate: Auto falls back to buffered I/O (and says so),
    // Require fails cleanly, and create extends the file sparsely.
    let Some(m) = Mount::new("ramfs", "") else {
        return;
    };
    let path = m.point.join("dev");
    let dev = BlockDevice::create(&path, 1 << 20, &BlockOptions::default()).unwrap();
    assert_eq!(dev.len(), 1 << 20);
    assert_eq!(dev.is_direct(), probe(&m.point).unwrap().o_direct.available);
    if !dev.is_direct() {
        assert!(!dev.info().direct_io);
        let strict = BlockOptions {
            direct: DirectIo::Require,
            ..BlockOptions::default()
        };
        assert!(matches!(
            BlockDevice::open(&path, &strict),
            Err(Error::Io { .. })
        ));
    }
    batch(&dev, 40, 5, "ramfs");
    dev.sync().unwrap();
}

#[test]
fn too_large_devices_are_device_full() {
    for d in test_dirs() {
        let path = d.join("huge");
        match BlockDevice::create(&path, 1 << 50, &BlockOptions::default()) {
            Err(Error::DeviceFull { requested, .. }) => assert_eq!(requested, 1 << 50),
            other => panic!("{}: {other:?}", d.name),
        }
        assert!(!path.exists(), "{}: no file left behind", d.name);
    }
    if let Some(m) = Mount::new("tmpfs", "size=1M") {
        let path = m.point.join("dev");
        assert!(matches!(
            BlockDevice::create(&path, 4 << 20, &BlockOptions::default()),
            Err(Error::DeviceFull { .. })
        ));
        assert!(!path.exists());
        let dev = BlockDevice::create(&path, 512 << 10, &BlockOptions::default()).unwrap();
        batch(&dev, 16, 1, "small tmpfs");
    }
}
