//! Bad input and damaged files: each is a typed error, never a panic, and the store stays
//! usable with nothing lost.

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use tierbase::Error;
use tierbase::device::REGION_HEADER_LEN;
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

fn opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .layout(layout)
        .pages_per_block(2)
        .chunk_size(4 * 8192)
}

fn poke(path: &Path, file_offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(file_offset)).unwrap();
    f.write_all(bytes).unwrap();
}

/// File offset of the KV store header (after the region header).
const KV: u64 = REGION_HEADER_LEN as u64;

fn filled_store(dir: &Path, layout: RecordLayout) -> std::path::PathBuf {
    let path = dir.join("s.tb");
    let store = KvStore::create(&path, &opts(layout)).unwrap();
    let mut c = store.client();
    for i in 0..50u32 {
        let (k, v) = match layout {
            RecordLayout::Fixed {
                key_size,
                value_size,
            } => {
                let mut k = vec![0u8; key_size as usize];
                k[..4].copy_from_slice(&i.to_le_bytes());
                (k, vec![i as u8; value_size as usize])
            }
            RecordLayout::Variable => (format!("key{i}").into_bytes(), vec![i as u8; 40]),
        };
        c.put(&k, &v).unwrap();
    }
    drop(c);
    store.close().unwrap();
    path
}

#[test]
fn empty_key_and_wrong_sizes_are_typed_errors_and_the_store_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let fixed = KvStore::create(
        dir.path().join("f.tb"),
        &opts(RecordLayout::Fixed {
            key_size: 8,
            value_size: 16,
        }),
    )
    .unwrap();
    let mut c = fixed.client();
    assert!(matches!(c.put(b"", &[0; 16]), Err(Error::EmptyKey)));
    assert!(matches!(
        c.put(b"short", &[0; 16]),
        Err(Error::WrongSize {
            what: "key",
            len: 5,
            expected: 8
        })
    ));
    assert!(matches!(
        c.put(b"12345678", &[0; 17]),
        Err(Error::WrongSize {
            what: "value",
            len: 17,
            expected: 16
        })
    ));
    assert!(matches!(
        fixed.get_into(b"toolongkey", &mut Vec::new()),
        Err(Error::WrongSize { .. })
    ));
    assert!(matches!(fixed.delete(b""), Err(Error::EmptyKey)));
    assert!(c.put(b"12345678", &[7; 16]).unwrap());
    let mut v = Vec::new();
    assert!(fixed.get_into(b"12345678", &mut v).unwrap());
    assert_eq!(v, [7; 16]);
    // A batched read checks every key and its buffers' count before it reads anything.
    let (mut values, mut found) = (vec![Vec::new(); 2], vec![false; 2]);
    assert!(matches!(
        c.get_many(&[b"12345678", b"short"], &mut values, &mut found),
        Err(Error::WrongSize { what: "key", .. })
    ));
    assert!(matches!(
        c.get_many(&[b"12345678"], &mut values, &mut found),
        Err(Error::InvalidArgument(_))
    ));
    c.get_many(&[b"12345678", b"87654321"], &mut values, &mut found)
        .unwrap();
    assert_eq!(found, [true, false]);
    assert_eq!(values[0], [7; 16]);
    drop(c);

    let var = KvStore::create(dir.path().join("v.tb"), &opts(RecordLayout::Variable)).unwrap();
    let mut c = var.client();
    let huge_key = vec![1u8; tierbase::kv::layout::MAX_VAR_KEY + 1];
    assert!(matches!(
        c.put(&huge_key, b"v"),
        Err(Error::KeyTooLarge { .. })
    ));
    assert!(matches!(c.put(b"", b"v"), Err(Error::EmptyKey)));
    assert!(c.put(b"k", b"").unwrap(), "empty values are fine");
    assert!(var.get_into(b"k", &mut v).unwrap());
    assert!(v.is_empty());
    assert_eq!(var.len(), 1);
}

#[test]
fn a_full_store_without_growth_says_so_and_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.tb");
    let o = opts(RecordLayout::Fixed {
        key_size: 8,
        value_size: 200,
    })
    .allow_growth(false)
    .reclaim(None);
    let store = KvStore::create(&path, &o).unwrap();
    let mut c = store.client();
    let (written, err) = fill_until_refused(&mut c);
    assert!(matches!(err, Error::StoreFull { .. }), "{err}");
    assert!(written > 0);
    // Everything acknowledged is intact; reads, updates and deletes still work.
    let mut v = Vec::new();
    for i in 0..written {
        assert!(store.get_into(&i.to_le_bytes(), &mut v).unwrap());
        assert_eq!(v, [i as u8; 200]);
    }
    // A copy-on-write update needs space too: it fails cleanly and the old value stays.
    let r = c.update(&0u64.to_le_bytes(), &[9; 200]);
    assert!(matches!(r, Err(Error::StoreFull { .. })), "{r:?}");
    assert!(store.get_into(&0u64.to_le_bytes(), &mut v).unwrap());
    assert_eq!(v, [0; 200]);
    for i in 0..written / 2 {
        assert!(c.delete(&i.to_le_bytes()).unwrap());
    }
    drop(c);
    // Reclaiming space makes room again.
    store.compact(0.0).unwrap();
    let mut c = store.client();
    assert!(c.put(&u64::MAX.to_le_bytes(), &[1; 200]).unwrap());
    drop(c);
    store.close().unwrap();
    let store = KvStore::open(&path, &o).unwrap();
    assert_eq!(store.len() as u64, written - written / 2 + 1);
}

#[test]
fn opening_with_mismatched_record_sizes_is_a_layout_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = filled_store(
        dir.path(),
        RecordLayout::Fixed {
            key_size: 16,
            value_size: 200,
        },
    );
    let err = KvStore::open(
        &path,
        &opts(RecordLayout::Fixed {
            key_size: 16,
            value_size: 100,
        }),
    )
    .unwrap_err();
    assert!(matches!(err, Error::LayoutMismatch { .. }), "{err}");
    assert!(err.to_string().contains("200"));
    let err = KvStore::open(&path, &opts(RecordLayout::Variable)).unwrap_err();
    assert!(matches!(err, Error::LayoutMismatch { .. }));
    // Without a stated layout it opens, and the data is all there.
    let store = KvStore::open(&path, &KvOptions::default()).unwrap();
    assert_eq!(store.len(), 50);
}

#[test]
fn damaged_headers_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = filled_store(dir.path(), RecordLayout::Variable);
    let original = std::fs::read(&path).unwrap();
    let restore = || std::fs::write(&path, &original).unwrap();
    let any = KvOptions::default();

    // Not a store at all: the kv magic is gone.
    poke(&path, KV, b"NOTASTOR");
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::BadMagic { .. })
    ));
    restore();
    // A flipped bit in the checksummed header.
    poke(&path, KV + 28, &[0x7F]);
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::Corrupt { .. })
    ));
    restore();
    // A future format version (with a matching checksum, so only the version is wrong).
    let mut hdr = original[KV as usize..KV as usize + 40].to_vec();
    hdr[8] = 99;
    let crc = crc32c::crc32c(&hdr);
    poke(&path, KV + 8, &[99]);
    poke(&path, KV + 40, &crc.to_le_bytes());
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::UnsupportedVersion { found: 99, .. })
    ));
    restore();
    // The used-block count beyond the region.
    poke(&path, KV + 48, &u64::MAX.to_le_bytes());
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::Corrupt { .. })
    ));
    restore();
    // Truncated file (region header says more than there is).
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(original.len() as u64 / 2).unwrap();
    drop(f);
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::Truncated { .. })
    ));
    // A file too small to be anything.
    std::fs::write(&path, b"tiny").unwrap();
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::TooSmall { .. })
    ));
    // Random bytes.
    std::fs::write(&path, vec![0xA5u8; 64 * 1024]).unwrap();
    assert!(matches!(
        KvStore::open(&path, &any),
        Err(Error::BadMagic { .. })
    ));
    // Missing file.
    assert!(matches!(
        KvStore::open(dir.path().join("absent.tb"), &any),
        Err(Error::Io { .. })
    ));
    restore();
    assert_eq!(KvStore::open(&path, &any).unwrap().len(), 50);
}

#[test]
fn damaged_records_are_reported_by_verify_and_refused_by_open() {
    let dir = tempfile::tempdir().unwrap();
    for layout in [
        RecordLayout::Variable,
        RecordLayout::Fixed {
            key_size: 16,
            value_size: 24,
        },
    ] {
        let path = filled_store(dir.path(), layout);
        assert!(tierbase::kv::verify(&path).unwrap().is_ok());
        let first_block = KV + 4096;
        match layout {
            // A record header whose length runs past the block.
            RecordLayout::Variable => poke(
                &path,
                first_block,
                &(1u32 | (5 << 2) | (0xFFFF << 16)).to_le_bytes(),
            ),
            // Bitset bits beyond the 85 slots a page holds (second bitset word).
            RecordLayout::Fixed { .. } => poke(&path, first_block + 8, &u64::MAX.to_le_bytes()),
        }
        let report = tierbase::kv::verify(&path).unwrap();
        assert!(!report.is_ok(), "{layout}: verify missed the damage");
        assert!(
            report.problems[0].contains("block 0"),
            "{:?}",
            report.problems
        );
        let err = KvStore::open(&path, &KvOptions::default()).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{layout}: {err}");
        std::fs::remove_file(&path).unwrap();
    }
}

/// A store that may grow fills its region's reservation to the last block: a growth step
/// that does not fit falls back to the blocks needed now (a file system with a step's room
/// left behaves the same way, with `DeviceFull`), and the refusal leaves the store working.
#[test]
fn a_growing_store_fills_its_reservation_to_the_end() {
    const RESERVE: u64 = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reserve.tb");
    let mut o = opts(RecordLayout::Fixed {
        key_size: 8,
        value_size: 200,
    })
    .reclaim(None);
    o.region.reserve = RESERVE;
    let store = KvStore::create(&path, &o).unwrap();
    let block = store.stats().block_bytes;
    let mut c = store.client();
    let (_, err) = fill_until_refused(&mut c);
    let Error::StoreFull { capacity, .. } = err else {
        panic!("{err}");
    };
    assert!(
        capacity + block > RESERVE,
        "grew to {capacity} of {RESERVE} reserved bytes (blocks of {block})"
    );
    let mut v = Vec::new();
    assert!(store.get_into(&0u64.to_le_bytes(), &mut v).unwrap());
    assert!(c.delete(&0u64.to_le_bytes()).unwrap());
    drop(c);
    store.close().unwrap();
}

/// Puts records of 8-byte keys and 200-byte values (key `i`, value `i as u8` repeated) until
/// one is refused; returns how many were acknowledged and the refusal.
fn fill_until_refused(c: &mut tierbase::kv::Client) -> (u64, Error) {
    let mut written = 0u64;
    loop {
        match c.put(&written.to_le_bytes(), &[written as u8; 200]) {
            Ok(_) => written += 1,
            Err(e) => return (written, e),
        }
        assert!(written < 1_000_000, "never filled up");
    }
}
