//! Persistent regions on real files: create, grow, reopen, durability modes and every typed
//! error, on a disk file system and on tmpfs (`/dev/shm`), plus full and fallocate-less file
//! systems when this process may mount them.

mod device_common;

use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

use device_common::{Mount, TestDir, disk_dir, pattern, shm_dir, test_dirs};
use tierbase::Error;
use tierbase::device::probe::probe;
use tierbase::device::{
    DurabilityMode, FlushInstruction, MappingKind, PmemRegion, REGION_HEADER_LEN, RegionOptions,
};

const HDR: u64 = REGION_HEADER_LEN as u64;

fn opts() -> RegionOptions {
    RegionOptions::default()
}

/// Whether files in `d` could be DAX-mapped (never on this project's CI machine).
fn is_dax(d: &TestDir) -> bool {
    probe(d.path()).expect("probe").dax.available
}

#[test]
fn create_grow_reopen_preserve_contents_and_base_address() {
    for d in test_dirs() {
        let ctx = d.name;
        let path = d.join("a.region");
        let r = PmemRegion::create(&path, 5000, &opts()).unwrap();
        assert_eq!(r.len(), 8192, "{ctx}: rounded up to pages");
        assert_eq!(r.durability(), d.expected_durability(), "{ctx}");
        assert_eq!(r.info().durability, r.durability());
        if !is_dax(&d) {
            assert_ne!(
                r.mapping(),
                MappingKind::DaxSync,
                "{ctx}: not a DAX file system"
            );
            assert_eq!(r.mapping(), MappingKind::Shared, "{ctx}");
        }
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            HDR + 8192,
            "{ctx}: header page + data"
        );
        let head = pattern(1, 8192);
        r.write(0, &head).unwrap();
        r.persist(0, head.len()).unwrap();
        let a = r.atomic_u64(4096).unwrap();
        a.store(0xDEAD_BEEF_0123_4567, Ordering::SeqCst);
        r.persist(4096, 8).unwrap();

        // Grow many times while another thread keeps reading through the reference obtained
        // before the first grow: the base never moves, so it never faults or changes value.
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n == 0 {
                    assert_eq!(a.load(Ordering::Acquire), 0xDEAD_BEEF_0123_4567);
                    n += 1;
                }
                n
            });
            for i in 1..=40u64 {
                r.grow(8192 + i * 16384).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
            assert!(reader.join().unwrap() > 0);
        });
        let new_len = 8192 + 40 * 16384;
        assert_eq!(r.len(), new_len);
        assert!(
            std::ptr::eq(a, r.atomic_u64(4096).unwrap()),
            "{ctx}: base moved"
        );
        assert_eq!(a.load(Ordering::SeqCst), 0xDEAD_BEEF_0123_4567);
        // New bytes are zero; the old ones are unchanged.
        let mut all = vec![0u8; new_len as usize];
        r.read(0, &mut all).unwrap();
        assert_eq!(&all[..4096], &head[..4096]);
        assert!(
            all[8192..].iter().all(|&x| x == 0),
            "{ctx}: new bytes are zero"
        );
        let tail = pattern(2, 1000);
        r.write(new_len - 1000, &tail).unwrap();
        r.persist(new_len - 1000, 1000).unwrap();
        assert!(r.grow(100).is_ok(), "shrinking is a no-op");
        assert_eq!(r.len(), new_len);
        drop(r);

        assert_eq!(std::fs::metadata(&path).unwrap().len(), HDR + new_len);
        let r = PmemRegion::open(&path, &opts()).unwrap();
        assert_eq!(r.len(), new_len, "{ctx}: reopened length");
        assert_eq!(
            r.durability(),
            d.expected_durability(),
            "{ctx}: reopened mode"
        );
        if !is_dax(&d) {
            assert_ne!(r.mapping(), MappingKind::DaxSync);
        }
        let mut buf = vec![0u8; 4096];
        r.read(0, &mut buf).unwrap();
        assert_eq!(&buf[..], &head[..4096]);
        assert_eq!(r.read_u64(4096).unwrap(), 0xDEAD_BEEF_0123_4567);
        let mut buf = vec![0u8; 1000];
        r.read(new_len - 1000, &mut buf).unwrap();
        assert_eq!(buf, tail);
        // open_or_create opens (does not recreate) an existing region.
        drop(r);
        let r = PmemRegion::open_or_create(&path, 4096, &opts()).unwrap();
        assert_eq!(r.len(), new_len);
    }
}

#[test]
fn persist_costs_depend_on_the_mode() {
    for d in test_dirs() {
        let r = PmemRegion::create(&d.join("m.region"), 65536, &opts()).unwrap();
        let before = r.counters();
        r.write(100, &[1; 300]).unwrap();
        r.persist(100, 300).unwrap();
        let c = r.counters().since(&before);
        assert_eq!((c.writes, c.bytes_written), (1, 300));
        assert_eq!(
            c.media_lines_written, 2,
            "bytes 100..400 touch media lines 0 and 1"
        );
        match r.durability() {
            DurabilityMode::Msync => {
                assert_eq!(
                    (c.syncs, c.fences, c.flushes),
                    (1, 0, 0),
                    "{}: one msync",
                    d.name
                );
            }
            DurabilityMode::ProcessCrash | DurabilityMode::Dax => {
                assert_eq!(c.syncs, 0);
                assert_eq!(c.fences, 1);
                let lines = if r.flush_instruction().is_supported()
                    && r.flush_instruction() != tierbase::device::FlushInstruction::None
                {
                    6 // bytes 100..400 touch cache lines 1..=6
                } else {
                    0
                };
                assert_eq!(c.flushes, lines);
            }
            DurabilityMode::None => unreachable!(),
        }
        // Durability None on request: persist does nothing.
        let path = d.join("n.region");
        let none = RegionOptions {
            durability: Some(DurabilityMode::None),
            ..opts()
        };
        let r = PmemRegion::create(&path, 8192, &none).unwrap();
        assert_eq!(r.durability(), DurabilityMode::None);
        let before = r.counters();
        r.write(0, b"volatile").unwrap();
        r.persist(0, 8).unwrap();
        let c = r.counters().since(&before);
        assert_eq!(
            (c.syncs, c.fences, c.flushes, c.media_lines_written),
            (0, 0, 0, 0)
        );
        drop(r);
        // ... yet the file is a normal region.
        let r = PmemRegion::open(&path, &opts()).unwrap();
        assert_eq!(r.durability(), d.expected_durability());
    }
}

#[test]
fn unavailable_durability_modes_are_refused() {
    for d in test_dirs() {
        let available = d.expected_durability();
        let ask = |mode| RegionOptions {
            durability: Some(mode),
            ..opts()
        };
        if !is_dax(&d) {
            let path = d.join("dax.region");
            match PmemRegion::create(&path, 4096, &ask(DurabilityMode::Dax)) {
                Err(Error::DurabilityUnavailable {
                    requested: DurabilityMode::Dax,
                    available: a,
                }) => assert_eq!(a, available, "{}", d.name),
                other => panic!("{}: Dax on a non-DAX file: {other:?}", d.name),
            }
            assert!(!path.exists(), "a refused create leaves no file");
            drop(PmemRegion::create(&path, 4096, &opts()).unwrap());
            assert!(matches!(
                PmemRegion::open(&path, &ask(DurabilityMode::Dax)),
                Err(Error::DurabilityUnavailable { .. })
            ));
        }
        let path = d.join("weak.region");
        drop(PmemRegion::create(&path, 4096, &opts()).unwrap());
        if available == DurabilityMode::ProcessCrash {
            // msync on tmpfs would promise power-loss durability it cannot give.
            assert!(matches!(
                PmemRegion::open(&path, &ask(DurabilityMode::Msync)),
                Err(Error::DurabilityUnavailable { .. })
            ));
        } else {
            let r = PmemRegion::open(&path, &ask(DurabilityMode::ProcessCrash)).unwrap();
            assert_eq!(r.durability(), DurabilityMode::ProcessCrash);
        }
    }
}

#[test]
fn bad_files_are_typed_errors() {
    for d in test_dirs() {
        let ctx = d.name;
        // Too small to hold a header.
        for size in [0usize, 100, 4095] {
            let path = d.join(&format!("small{size}"));
            std::fs::write(&path, vec![0u8; size]).unwrap();
            match PmemRegion::open(&path, &opts()) {
                Err(Error::TooSmall {
                    actual, minimum, ..
                }) => {
                    assert_eq!((actual, minimum), (size as u64, HDR), "{ctx}");
                }
                other => panic!("{ctx}: {size}-byte file: {other:?}"),
            }
        }
        // Truncated: the header says 64 KiB, the file holds 8 KiB.
        let path = d.join("trunc.region");
        drop(PmemRegion::create(&path, 65536, &opts()).unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(HDR + 8192)
            .unwrap();
        match PmemRegion::open(&path, &opts()) {
            Err(Error::Truncated {
                expected, actual, ..
            }) => assert_eq!((expected, actual), (HDR + 65536, HDR + 8192), "{ctx}"),
            other => panic!("{ctx}: truncated: {other:?}"),
        }
        // A file that is not a region.
        let path = d.join("foreign");
        std::fs::write(&path, vec![b'x'; 8192]).unwrap();
        assert!(matches!(
            PmemRegion::open(&path, &opts()),
            Err(Error::BadMagic { .. })
        ));
    }
}

#[test]
fn every_flipped_header_byte_is_detected() {
    let d = shm_dir().unwrap_or_else(disk_dir);
    let path = d.join("hdr.region");
    drop(PmemRegion::create(&path, 8192, &opts()).unwrap());
    let pristine = std::fs::read(&path).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    for (i, &orig) in pristine.iter().enumerate().take(REGION_HEADER_LEN) {
        for mask in [0x01u8, 0x10, 0x80] {
            let flipped = orig ^ mask;
            file.write_all_at(&[flipped], i as u64).unwrap();
            let r = PmemRegion::open(&path, &opts());
            match (i, &r) {
                (0..8, Err(Error::BadMagic { .. })) => {}
                (8.., Err(Error::Corrupt { .. })) => {}
                _ => panic!("byte {i} ^ {mask:#x}: expected BadMagic/Corrupt, got {r:?}"),
            }
            file.write_all_at(&[orig], i as u64).unwrap();
        }
    }
    assert!(
        PmemRegion::open(&path, &opts()).is_ok(),
        "restored header opens"
    );

    // A well-formed header of another version is UnsupportedVersion, not Corrupt.
    let mut hdr = pristine[..16].to_vec();
    hdr[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&hdr);
    file.write_all_at(&hdr, 0).unwrap();
    file.write_all_at(&crc.to_le_bytes(), 16).unwrap();
    assert!(matches!(
        PmemRegion::open(&path, &opts()),
        Err(Error::UnsupportedVersion { found: 2, .. })
    ));
}

#[test]
fn limits_ranges_and_alignment_are_typed_errors() {
    for d in test_dirs() {
        let ctx = d.name;
        let small = RegionOptions {
            reserve: 65536,
            ..opts()
        };
        // Larger than the reservation at create: refused before anything is allocated.
        let path = d.join("big.region");
        assert!(matches!(
            PmemRegion::create(&path, 65536 + 4096, &small),
            Err(Error::RegionLimit { limit: 65536, .. })
        ));
        assert!(!path.exists(), "{ctx}: no file left behind");

        let path = d.join("r.region");
        let r = PmemRegion::create(&path, 16384, &small).unwrap();
        assert_eq!(r.max_len(), 65536, "{ctx}: reserve bounds the data area");
        r.write(0, b"kept").unwrap();
        r.grow(65536).unwrap();
        match r.grow(65537) {
            Err(Error::RegionLimit { requested, limit }) => {
                assert_eq!((requested, limit), (65537, 65536), "{ctx}")
            }
            other => panic!("{ctx}: grow past reserve: {other:?}"),
        }
        assert!(matches!(r.grow(u64::MAX), Err(Error::RegionLimit { .. })));
        assert_eq!(r.len(), 65536, "{ctx}: a refused grow changes nothing");

        let len = r.len();
        let mut buf = [0u8; 16];
        for (off, n) in [
            (len, 1usize),
            (len - 8, 16),
            (u64::MAX, 1),
            (u64::MAX - 4, 16),
        ] {
            let oor = |res: tierbase::Result<()>| matches!(res, Err(Error::OutOfRange { .. }));
            assert!(oor(r.read(off, &mut buf[..n])), "{ctx}: read {off}+{n}");
            assert!(oor(r.write(off, &buf[..n])), "{ctx}: write {off}+{n}");
            assert!(oor(r.persist(off, n)), "{ctx}: persist {off}+{n}");
            assert!(oor(r.flush(off, n)), "{ctx}: flush {off}+{n}");
            assert!(oor(r.fill(off, n, 1)), "{ctx}: fill {off}+{n}");
            assert!(oor(r.write_nt_persist(off, &buf[..n])));
        }
        assert!(matches!(r.read_u64(len - 4), Err(Error::OutOfRange { .. })));
        assert!(matches!(r.atomic_u64(len), Err(Error::OutOfRange { .. })));
        assert!(matches!(r.atomic_u8(len), Err(Error::OutOfRange { .. })));
        for off in [1u64, 4, 12, 65535] {
            assert!(
                matches!(r.atomic_u64(off), Err(Error::Misaligned { offset, .. }) if offset == off),
                "{ctx}: atomic_u64({off})"
            );
        }
        assert!(matches!(r.atomic_u32(2), Err(Error::Misaligned { .. })));
        assert!(r.atomic_u32(4).is_ok() && r.atomic_u8(65535).is_ok());
        // Boundary cases that are fine.
        r.read(len - 16, &mut buf).unwrap();
        r.persist(len, 0).unwrap();
        r.write(len, &[]).unwrap();
        let mut kept = [0u8; 4];
        r.read(0, &mut kept).unwrap();
        assert_eq!(&kept, b"kept");
    }
}

#[test]
fn create_never_clobbers_an_existing_file() {
    for d in test_dirs() {
        let path = d.join("precious");
        std::fs::write(&path, b"precious data").unwrap();
        let err = PmemRegion::create(&path, 4096, &opts()).unwrap_err();
        match &err {
            Error::Io { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::AlreadyExists, "{err}")
            }
            other => panic!("{}: {other:?}", d.name),
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"precious data");
        assert!(matches!(
            PmemRegion::open(&d.join("missing"), &opts()),
            Err(Error::Io { .. })
        ));
    }
}

#[test]
fn impossibly_large_regions_fail_cleanly() {
    for d in test_dirs() {
        for len in [1u64 << 42, 1 << 50] {
            let path = d.join(&format!("huge{len}"));
            let o = RegionOptions {
                reserve: len,
                ..opts()
            };
            // On disk only sizes beyond the format's 16 TiB limit are tried: a fallocate that
            // fits the file-size limit would fill the disk before failing.
            if d.expected_durability() == DurabilityMode::Msync && len < (1 << 45) {
                continue;
            }
            match PmemRegion::create(&path, len, &o) {
                Err(Error::DeviceFull { .. } | Error::RegionLimit { .. }) => {}
                other => panic!("{}: create {len}: {other:?}", d.name),
            }
            assert!(!path.exists(), "{}: no file left behind", d.name);
        }
    }
    assert!(
        PmemRegion::anonymous(
            1 << 50,
            &RegionOptions {
                reserve: 1 << 50,
                ..opts()
            }
        )
        .is_err()
    );
}

#[test]
fn a_full_device_is_device_full() {
    let Some(m) = Mount::new("tmpfs", "size=1M") else {
        return;
    };
    let path = m.point.join("full.region");
    assert!(matches!(
        PmemRegion::create(&path, 4 << 20, &opts()),
        Err(Error::DeviceFull { .. })
    ));
    assert!(!path.exists(), "no file left behind");

    let r = PmemRegion::create(&path, 256 << 10, &opts()).unwrap();
    r.write(0, b"still here").unwrap();
    r.persist(0, 10).unwrap();
    assert!(matches!(r.grow(4 << 20), Err(Error::DeviceFull { .. })));
    assert_eq!(r.len(), 256 << 10, "a failed grow keeps the old length");
    let mut buf = [0u8; 10];
    r.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"still here");
    drop(r);
    let r = PmemRegion::open(&path, &opts()).unwrap();
    assert_eq!(r.len(), 256 << 10);
    r.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"still here");
}

#[test]
fn a_file_system_without_fallocate_still_works() {
    // ramfs has neither fallocate nor a size limit: regions extend the file sparsely.
    let Some(m) = Mount::new("ramfs", "") else {
        return;
    };
    let path = m.point.join("sparse.region");
    let r = PmemRegion::create(&path, 8192, &opts()).unwrap();
    assert_eq!(
        r.durability(),
        DurabilityMode::ProcessCrash,
        "ramfs is memory"
    );
    r.write(0, b"sparse").unwrap();
    r.persist(0, 6).unwrap();
    r.grow(1 << 20).unwrap();
    r.write((1 << 20) - 6, b"at end").unwrap();
    r.persist((1 << 20) - 6, 6).unwrap();
    drop(r);
    let r = PmemRegion::open(&path, &opts()).unwrap();
    assert_eq!(r.len(), 1 << 20);
    let mut buf = [0u8; 6];
    r.read(0, &mut buf).unwrap();
    assert_eq!(&buf, b"sparse");
    r.read((1 << 20) - 6, &mut buf).unwrap();
    assert_eq!(&buf, b"at end");
}

#[test]
fn region_info_tells_the_truth() {
    for d in test_dirs() {
        let path = d.join("info.region");
        let r = PmemRegion::create(&path, 4096, &opts()).unwrap();
        let info = r.info();
        assert_eq!(info.path.as_deref(), Some(path.as_path()));
        assert_eq!(info.len, 4096);
        assert_eq!(info.mapping, r.mapping());
        assert_eq!(info.durability, d.expected_durability());
        assert_eq!(info.guarantee, d.expected_durability().guarantee());
        // Process-crash durability (tmpfs) needs no cache flushes, so none is used by default;
        // msync's persists run none at all. Only DAX runs the best the CPU has.
        let expected_flush = if d.expected_durability() == DurabilityMode::Dax {
            tierbase::device::cpu::features().best_flush()
        } else {
            FlushInstruction::None
        };
        assert_eq!(info.flush, expected_flush);
        assert_eq!(info.emulation, "none");
        assert!(!info.crash_simulated);
        assert!(r.emulator().is_none());
    }
}

/// Dirty and under-writeback page counts of a file range, by `cachestat(2)` (Linux 6.5+);
/// `None` where the kernel lacks it.
fn dirty_pages(file: &std::fs::File, off: u64, len: u64) -> Option<u64> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct CacheStat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    const SYS_CACHESTAT: libc::c_long = 451; // same number on every Linux architecture
    let range = Range { off, len };
    let mut st = CacheStat::default();
    // SAFETY: cachestat reads `range` and writes `st`, both live and of the kernel's layout.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const Range,
            &mut st as *mut CacheStat,
            0u32,
        )
    };
    (rc == 0).then_some(st.nr_dirty + st.nr_writeback)
}

#[test]
fn msync_mode_writes_back_every_page_a_persist_touches() {
    let d = disk_dir();
    if d.expected_durability() != DurabilityMode::Msync {
        return; // the target directory is memory-backed here
    }
    let path = d.join("msync.region");
    let r = PmemRegion::create(&path, 16 * 4096, &opts()).unwrap();
    assert_eq!(r.durability(), DurabilityMode::Msync);
    let file = std::fs::File::open(&path).unwrap();
    let Some(_) = dirty_pages(&file, 0, 4096) else {
        eprintln!("note: cachestat(2) unavailable; skipping");
        return;
    };
    assert_eq!(
        dirty_pages(&file, 0, 4096),
        Some(0),
        "header page written back by create"
    );
    // Odd ranges: crossing one page boundary, within one page, and a single byte.
    for (off, len) in [
        (4096 * 2 + 4000, 200usize),
        (4096 * 6 + 5, 10),
        (4096 * 9 + 4095, 1),
    ] {
        let first = (HDR + off) / 4096 * 4096;
        let end = (HDR + off + len as u64).div_ceil(4096) * 4096;
        r.write(off, &pattern(off, len)).unwrap();
        assert!(
            dirty_pages(&file, first, end - first).unwrap() > 0,
            "store at {off} dirties its page(s)"
        );
        r.persist(off, len).unwrap();
        assert_eq!(
            dirty_pages(&file, first, end - first),
            Some(0),
            "persist({off}, {len}) must leave no page of [{first}, {end}) dirty"
        );
    }
    // Growth writes the header back as well.
    r.grow(32 * 4096).unwrap();
    assert_eq!(
        dirty_pages(&file, 0, 4096),
        Some(0),
        "header page after grow"
    );
}

#[test]
fn prefault_and_flush_overrides() {
    use tierbase::device::FlushInstruction;
    let d = shm_dir().unwrap_or_else(disk_dir);
    let o = RegionOptions {
        prefault: true,
        ..opts()
    };
    let r = PmemRegion::create(&d.join("prefault.region"), 1 << 20, &o).unwrap();
    r.grow(2 << 20).unwrap();
    let mut buf = vec![1u8; 2 << 20];
    r.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));

    for f in [
        FlushInstruction::Clflush,
        FlushInstruction::Clflushopt,
        FlushInstruction::Clwb,
    ] {
        let o = RegionOptions {
            flush: Some(f),
            ..opts()
        };
        let r = PmemRegion::anonymous(4096, &o);
        if !f.is_supported() {
            assert!(matches!(r, Err(Error::Unsupported(_))), "{f}");
            continue;
        }
        let sim = PmemRegion::simulated(4096, Default::default(), &o).unwrap();
        assert_eq!(sim.flush_instruction(), f);
        sim.write(0, &[1; 200]).unwrap();
        sim.persist(0, 200).unwrap();
        assert_eq!(sim.counters().flushes, 4, "{f}: 200 bytes from 0 = 4 lines");
        assert_eq!(&sim.power_loss().unwrap()[..200], &[1; 200][..]);
    }
    let o = RegionOptions {
        flush: Some(FlushInstruction::None),
        ..opts()
    };
    let sim = PmemRegion::simulated(4096, Default::default(), &o).unwrap();
    sim.persist(0, 200).unwrap();
    assert_eq!(
        sim.counters().flushes,
        0,
        "no flush instruction: nothing counted"
    );
}

#[test]
fn a_record_read_copies_the_value_only_behind_its_key_and_checks_its_bounds() {
    let r = PmemRegion::anonymous(8192, &opts()).unwrap();
    let record: Vec<u8> = (0..64u8).collect();
    r.write(1000, &record).unwrap();
    let mut out = [0u8; 40];
    let before = r.counters();
    assert!(r.read_if_key(1000, &record[..16], 24, &mut out).unwrap());
    assert_eq!(out[..], record[24..]);
    assert_eq!(r.counters().reads - before.reads, 1, "one counted read");
    let mut untouched = [0xAAu8; 40];
    assert!(
        !r.read_if_key(1000, &record[1..17], 24, &mut untouched)
            .unwrap()
    );
    assert!(untouched.iter().all(|&b| b == 0xAA));
    // The value must start at or after the key's end, and the whole record be in bounds.
    assert!(matches!(
        r.read_if_key(1000, &record[..16], 8, &mut out),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        r.read_if_key(8192 - 50, &record[..16], 24, &mut out),
        Err(Error::OutOfRange { .. })
    ));
}

/// A region whose persists run no flush instruction says so, whatever was asked: on a disk
/// file (msync) a benchmark's report said `flush clwb` (or whatever `--flush` named), which
/// never ran (a user's trial, 2026-12-04).
#[test]
fn a_msync_region_names_no_flush_instruction() {
    let d = disk_dir();
    if d.expected_durability() != DurabilityMode::Msync {
        return; // the target directory is memory-backed here
    }
    let Some(f) = [FlushInstruction::Clwb, FlushInstruction::Clflushopt]
        .into_iter()
        .find(|f| f.is_supported())
    else {
        return;
    };
    let path = d.join("named.region");
    let o = RegionOptions {
        flush: Some(f),
        ..opts()
    };
    let r = PmemRegion::create(&path, 16 * 4096, &o).unwrap();
    assert_eq!(r.durability(), DurabilityMode::Msync);
    assert_eq!(r.flush_instruction(), FlushInstruction::None);
    drop(r);
    let r = PmemRegion::open(&path, &o).unwrap();
    assert_eq!(r.flush_instruction(), FlushInstruction::None);
}
