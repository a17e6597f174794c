//! Bad and damaged input to the B+-tree store: each is a typed error, never a panic, a hang
//! or wrong data.
//!
//! - a missing directory, an empty one, one holding garbage files (random bytes, empty,
//!   odd-sized), and a `create` that fails part-way because a log file is in the way;
//! - `pages.tb` truncated to various lengths;
//! - every byte of the superblock flipped, in the newest copy (open falls back to the other
//!   copy, with the same data) and in both (`Error::Corrupt`); fields rewritten with a valid
//!   checksum (page size, sequence, generation, LSN: an error or the right data); a newer
//!   format version in both copies (`Error::UnsupportedVersion`);
//! - a byte flipped in every page of the tree (leaves, inner pages, overflow pages, free and
//!   meta pages): `Error::Corrupt` on open or on the read that touches the page, every other
//!   read right; and header and slot bytes rewritten with a valid page checksum (structural
//!   damage the checksum cannot see): errors, never a panic;
//! - the log: a torn tail and a bad checksum in the last frame are silently the end of the
//!   log (the state before that write comes back); a frame with a valid checksum that claims
//!   the wrong LSN, and a damaged generation header, are `Error::Corrupt`;
//! - a panic while a store is open ends as an ordinary test failure (not an abort), and the
//!   store opens afterwards with every acknowledged write;
//! - the NVM tier: a byte flipped in a page held there (`Error::Corrupt` naming `nvm.tb` on
//!   the read that touches it), a damaged tier header, two slots claiming one page, a page id
//!   beyond any file, the tier's file removed (refused: its pages are the newest), and a tier
//!   kept elsewhere whose link target is gone (an error naming the target), and a create over
//!   a leftover tier (refused).

use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use tierbase::Error;
use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::device::Durability;
use tierbase::store::{Change, Store};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const PAGE: usize = 4096;

fn opts() -> BTreeOptions {
    BTreeOptions::default()
        .page_size(PAGE)
        .dram_bytes(64 * PAGE as u64)
        .durability(Durability::Immediate)
}

/// A directory for store files: on tmpfs when there is one (hundreds of opens, each syncing).
fn scratch_dir() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").expect("temporary directory in /dev/shm")
    } else {
        tempfile::tempdir().expect("temporary directory")
    }
}

fn poke(path: &Path, offset: u64, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(bytes).unwrap();
}

/// The store's three files, to put back after each damage (every open that succeeds writes
/// superblocks and a log header, so all three must go back together).
struct Snapshot(PathBuf, Vec<(&'static str, Vec<u8>)>);

impl Snapshot {
    fn take(dir: &Path) -> Snapshot {
        // The tier with the rest: an older page file beside a newer tier is refused.
        let files = ["pages.tb", "wal-0.tb", "wal-1.tb", "nvm.tb"]
            .into_iter()
            .filter(|n| *n != "nvm.tb" || dir.join(n).exists())
            .map(|n| (n, std::fs::read(dir.join(n)).unwrap()))
            .collect();
        Snapshot(dir.to_path_buf(), files)
    }
    fn restore(&self) {
        for (n, b) in &self.1 {
            std::fs::write(self.0.join(n), b).unwrap();
        }
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{:06}", (i * 7919) % 100_000).into_bytes()
}

fn val(i: u32) -> Vec<u8> {
    let len = match i % 10 {
        0 => 2_500, // an overflow page
        1..=3 => 300,
        _ => 40,
    };
    (0..len).map(|j| (i as usize + j) as u8).collect()
}

/// A store closed cleanly: enough keys for a three-level tree, some overflow values, some
/// pages on the free list.
fn filled_store(dir: &Path) -> (PathBuf, Model) {
    let path = dir.join("s");
    let s = BTreeStore::create(&path, &opts()).unwrap();
    let mut model = Model::new();
    for i in 0..3000u32 {
        s.put(&key(i), &val(i)).unwrap();
        model.insert(key(i), val(i));
    }
    for i in (0..3000u32).step_by(7) {
        s.delete(&key(i)).unwrap();
        model.remove(&key(i));
    }
    s.close().unwrap();
    (path, model)
}

/// Reads everything there is to read; returns the contents if every read succeeded. A read
/// error must be `Error::Corrupt`; a successful read must return the model's data.
fn read_all(s: &BTreeStore, model: &Model, ctx: &str) -> Result<(), String> {
    let mut first_err = None;
    let mut note = |e: Error| {
        assert!(
            matches!(e, Error::Corrupt { .. }),
            "{ctx}: not Error::Corrupt: {e:?}"
        );
        first_err.get_or_insert(e.to_string());
    };
    for (k, v) in model {
        match s.get(k) {
            Ok(got) => assert_eq!(got.as_ref(), Some(v), "{ctx}: get returned wrong data"),
            Err(e) => note(e),
        }
    }
    assert!(
        matches!(s.get(b"absent"), Ok(None) | Err(Error::Corrupt { .. })),
        "{ctx}"
    );
    let mut seen = Vec::new();
    match s.range(Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        seen.push((k.to_vec(), v.to_vec()));
        true
    }) {
        Ok(()) => {
            let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert!(seen == want, "{ctx}: a complete scan returned wrong data");
        }
        Err(e) => {
            // What came before the error is right.
            for (k, v) in &seen {
                assert_eq!(model.get(k), Some(v), "{ctx}: scan returned wrong data");
            }
            note(e);
        }
    }
    if let Err(e) = s.verify() {
        note(e);
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

// ----- files missing or not a store --------------------------------------------------------

#[test]
fn missing_empty_and_garbage_directories_are_clear_errors() {
    let dir = scratch_dir();
    // Missing: an I/O error naming the file.
    let missing = dir.path().join("nope");
    match BTreeStore::open(&missing, &opts()) {
        Err(e @ Error::Io { .. }) => {
            assert!(e.to_string().contains("nope"), "{e}");
        }
        other => panic!("open of a missing dir: {other:?}"),
    }
    // A file where the directory should be (a kv or Plush store): said so, not "pages.tb
    // not found".
    let file = dir.path().join("kv.tb");
    std::fs::write(&file, b"a kv store").unwrap();
    match BTreeStore::open(&file, &opts()) {
        Err(e @ Error::InvalidArgument(_)) => {
            assert!(
                e.to_string().contains("is a file, not a B+-tree store"),
                "{e}"
            );
        }
        other => panic!("open of a file: {other:?}"),
    }
    // Empty.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(matches!(
        BTreeStore::open(&empty, &opts()),
        Err(Error::Io { .. })
    ));
    // Garbage of several shapes: never a panic, a typed error, and the message says what.
    let garbage = dir.path().join("garbage");
    std::fs::create_dir(&garbage).unwrap();
    let shapes: Vec<(&str, Vec<u8>)> = vec![
        (
            "random",
            (0..256 * 1024u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
        ("zeros", vec![0; 64 * 1024]),
        ("empty", Vec::new()),
        ("odd-sized", vec![0xA5; 5000]),
        (
            "magic only",
            b"TBBTREE1"
                .iter()
                .copied()
                .chain(std::iter::repeat_n(0, 8184))
                .collect(),
        ),
    ];
    for (what, bytes) in &shapes {
        for name in ["pages.tb", "wal-0.tb", "wal-1.tb"] {
            std::fs::write(garbage.join(name), bytes).unwrap();
        }
        match BTreeStore::open(&garbage, &opts()) {
            Ok(_) => panic!("{what}: garbage opened as a store"),
            Err(e) => {
                assert!(
                    matches!(
                        e,
                        Error::Corrupt { .. } | Error::Misaligned { .. } | Error::Io { .. }
                    ),
                    "{what}: {e:?}"
                );
                assert!(!e.to_string().contains('\n'), "{what}: {e}");
            }
        }
    }
    // A directory that is a file.
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert!(BTreeStore::open(&file, &opts()).is_err());
    assert!(BTreeStore::create(&file, &opts()).is_err());
}

/// A `create` that fails because a log file is in the way must not leave a half-made store
/// behind: after removing the obstacle, `create` works. Today `BTreeStore::create` makes
/// `pages.tb` first and leaves it when making `wal-0.tb` fails, so the next `create` says "a
/// store exists here already (open it instead)" and `open` fails too (no superblock).
#[test]
fn a_failed_create_leaves_nothing_behind() {
    let dir = scratch_dir();
    let path = dir.path().join("s");
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("wal-0.tb"), b"in the way").unwrap();
    assert!(BTreeStore::create(&path, &opts()).is_err());
    std::fs::remove_file(path.join("wal-0.tb")).unwrap();
    let s = BTreeStore::create(&path, &opts())
        .unwrap_or_else(|e| panic!("create after the failed one: {e}"));
    s.put(b"k", b"v").unwrap();
    s.close().unwrap();
}

/// A DRAM budget below the pool's 16 pages is refused with an error that names it (it was
/// silently raised to 16 pages: a budget of 0 took 256 KiB), and a refused create leaves
/// neither files nor the directory it made behind; 16 pages are enough.
#[test]
fn a_dram_budget_below_sixteen_pages_is_refused() {
    let dir = scratch_dir();
    let path = dir.path().join("s");
    for budget in [0, 15 * PAGE as u64] {
        match BTreeStore::create(&path, &opts().dram_bytes(budget)) {
            Err(tierbase::Error::InvalidArgument(m)) => {
                assert!(m.contains(&format!("DRAM budget of {budget} bytes")), "{m}");
                assert!(m.contains("16 pages"), "{m}");
            }
            other => panic!("budget {budget}: {other:?}"),
        }
        assert!(!path.exists(), "budget {budget} left {}", path.display());
    }
    let s = BTreeStore::create(&path, &opts().dram_bytes(16 * PAGE as u64)).unwrap();
    s.put(b"k", b"v").unwrap();
    s.close().unwrap();
    assert!(BTreeStore::open(&path, &opts().dram_bytes(PAGE as u64)).is_err());
}

/// A page size the pool cannot take is refused up front with an error that names it (not
/// an I/O error from writing a file of that size), and leaves no file behind.
#[test]
fn a_bad_page_size_is_refused_before_anything_is_made() {
    let dir = scratch_dir();
    let path = dir.path().join("s");
    for ps in [5000, 2048, 131072] {
        match BTreeStore::create(&path, &opts().page_size(ps)) {
            Err(tierbase::Error::InvalidArgument(m)) => {
                assert!(m.contains(&format!("page size {ps}")), "{m}")
            }
            other => panic!("page size {ps}: {other:?}"),
        }
        assert!(!path.exists(), "page size {ps} left {}", path.display());
    }
}

#[test]
fn a_truncated_page_file_is_an_error_or_the_right_data() {
    let dir = scratch_dir();
    let (path, model) = filled_store(dir.path());
    let pages = path.join("pages.tb");
    let original = std::fs::read(&pages).unwrap();
    let snap = Snapshot::take(&path);
    let mut errors = 0;
    for len in [
        0,
        100,
        4096,
        8192,
        3 * 4096,
        original.len() / 3,
        original.len() / 2,
        original.len() - 4096,
    ] {
        snap.restore();
        std::fs::write(&pages, &original[..len]).unwrap();
        let ctx = format!("pages.tb truncated to {len} of {} bytes", original.len());
        match BTreeStore::open(&path, &opts()) {
            Ok(s) => {
                if read_all(&s, &model, &ctx).is_err() {
                    errors += 1;
                }
                s.abandon();
            }
            Err(e) => {
                errors += 1;
                assert!(
                    matches!(e, Error::Corrupt { .. } | Error::Misaligned { .. }),
                    "{ctx}: {e:?}"
                );
            }
        }
    }
    assert!(errors >= 7, "truncations went unnoticed");
    snap.restore();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "restored").unwrap();
}

// ----- the superblock ----------------------------------------------------------------------

/// (offset of the newest copy, offset of the other) and the sequence numbers.
fn superblocks(pages: &Path) -> [(u64, u64); 2] {
    let b = std::fs::read(pages).unwrap();
    let seq = |at: usize| u64::from_le_bytes(b[at + 16..at + 24].try_into().unwrap());
    let (s0, s1) = (seq(0), seq(PAGE));
    if s0 > s1 {
        [(0, s0), (PAGE as u64, s1)]
    } else {
        [(PAGE as u64, s1), (0, s0)]
    }
}

fn reseal_superblock(pages: &Path, at: u64, edit: impl FnOnce(&mut [u8])) {
    let mut b = std::fs::read(pages).unwrap();
    let s = &mut b[at as usize..at as usize + 64];
    edit(s);
    let c = crc32c::crc32c(&s[..40]);
    s[40..44].copy_from_slice(&c.to_le_bytes());
    std::fs::write(pages, b).unwrap();
}

/// Reseals the superblock copies at `copies` as format `version`, with `flags` if given.
fn set_version(pages: &Path, copies: &[u64], version: u32, flags: Option<u32>) {
    for &at in copies {
        reseal_superblock(pages, at, |s| {
            s[8..12].copy_from_slice(&version.to_le_bytes());
            if let Some(f) = flags {
                s[28..32].copy_from_slice(&f.to_le_bytes());
            }
        });
    }
}

#[test]
fn damaged_superblocks_fall_back_or_are_refused() {
    let dir = scratch_dir();
    let (path, model) = filled_store(dir.path());
    let pages = path.join("pages.tb");
    let original = std::fs::read(&pages).unwrap();
    let snap = Snapshot::take(&path);
    let restore = || snap.restore();
    let [(newest, _), (other, _)] = superblocks(&pages);
    // Every byte of the checksummed part and the checksum, in the newest copy: the other copy
    // serves (redo from an older checkpoint), with the same data.
    for at in 0..44u64 {
        poke(
            &pages,
            newest + at,
            &[original[(newest + at) as usize] ^ 0x5A],
        );
        let ctx = format!("superblock byte {at} flipped");
        let s = BTreeStore::open(&path, &opts()).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        read_all(&s, &model, &ctx).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        s.abandon();
        restore();
    }
    // Both copies damaged: refused, naming the file.
    for at in [0u64, 9, 13, 17, 25, 33, 41] {
        poke(
            &pages,
            newest + at,
            &[original[(newest + at) as usize] ^ 0xFF],
        );
        poke(
            &pages,
            other + at,
            &[original[(other + at) as usize] ^ 0xFF],
        );
        match BTreeStore::open(&path, &opts()) {
            Err(e @ Error::Corrupt { .. }) => {
                assert!(e.to_string().contains("superblock"), "{e}");
                assert!(e.to_string().contains("pages.tb"), "{e}");
            }
            other => panic!("both superblocks damaged at byte {at}: {other:?}"),
        }
        restore();
    }
    // Fields rewritten with a valid checksum, in the newest copy: an error, or the right data.
    type Edit = (&'static str, fn(&mut [u8]));
    let edits: [Edit; 9] = [
        ("page size 8192", |s| {
            s[12..16].copy_from_slice(&8192u32.to_le_bytes())
        }),
        ("page size 65536", |s| {
            s[12..16].copy_from_slice(&65536u32.to_le_bytes())
        }),
        ("page size 3", |s| {
            s[12..16].copy_from_slice(&3u32.to_le_bytes())
        }),
        ("page size 0", |s| {
            s[12..16].copy_from_slice(&0u32.to_le_bytes())
        }),
        ("sequence max", |s| {
            s[16..24].copy_from_slice(&u64::MAX.to_le_bytes())
        }),
        ("generation + 7", |s| {
            let g = u32::from_le_bytes(s[24..28].try_into().unwrap());
            s[24..28].copy_from_slice(&(g + 7).to_le_bytes());
        }),
        ("generation 0", |s| {
            s[24..28].copy_from_slice(&0u32.to_le_bytes())
        }),
        ("redo LSN + 8", |s| {
            let l = u64::from_le_bytes(s[32..40].try_into().unwrap());
            s[32..40].copy_from_slice(&(l + 8).to_le_bytes());
        }),
        ("redo LSN max", |s| {
            s[32..40].copy_from_slice(&u64::MAX.to_le_bytes())
        }),
    ];
    for (what, edit) in edits {
        reseal_superblock(&pages, newest, edit);
        match BTreeStore::open(&path, &opts()) {
            Ok(s) => {
                read_all(&s, &model, what).unwrap_or_else(|e| panic!("{what}: {e}"));
                s.abandon();
            }
            Err(e) => assert!(
                matches!(
                    e,
                    Error::Corrupt { .. } | Error::InvalidArgument(_) | Error::Misaligned { .. }
                ),
                "{what}: {e:?}"
            ),
        }
        restore();
    }
    // A newer format in both copies.
    set_version(&pages, &[newest, other], 6, None);
    match BTreeStore::open(&path, &opts()) {
        Err(Error::UnsupportedVersion {
            found: 6,
            supported: 5,
            ..
        }) => {}
        other => panic!("format version 6: {other:?}"),
    }
    // Only in the newest copy: the older one serves.
    restore();
    set_version(&pages, &[newest], 6, None);
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "version 6 in one copy").unwrap();
    drop(s);
    // Version 5 saying the pages are in NVM (NVM direct), with no NVM file: refused, naming it.
    restore();
    set_version(&pages, &[newest, other], 5, Some(1 | 4));
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("nvm.tb"), "{e}"),
        other => panic!("NVM-direct flags without nvm.tb: {other:?}"),
    }
    // The NVM-direct bit in a version 4 copy (which never sets it) is damage: passed over.
    restore();
    set_version(&pages, &[newest], 4, Some(4));
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "NVM-direct bit in a version 4 copy").unwrap();
    drop(s);
    // Version 4 saying the log is on NVM, with plain log files: refused, naming them.
    restore();
    set_version(&pages, &[newest, other], 4, Some(2));
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("wal-0.tb"), "{e}"),
        other => panic!("NVM-log flag with log files: {other:?}"),
    }
    // The NVM-log bit in a version 3 copy (which never sets it) is damage: passed over.
    restore();
    set_version(&pages, &[newest], 3, Some(3));
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "NVM-log bit in a version 3 copy").unwrap();
    drop(s);
    // Version 3 saying the store has an NVM tier, with no `nvm.tb`: refused, naming it.
    restore();
    set_version(&pages, &[newest, other], 3, Some(1));
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("nvm.tb"), "{e}"),
        other => panic!("NVM flag without the tier: {other:?}"),
    }
    // The flags word set in a version 2 copy is damage: that copy is passed over.
    restore();
    reseal_superblock(&pages, newest, |s| {
        s[28..32].copy_from_slice(&1u32.to_le_bytes())
    });
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "flags in a version 2 copy").unwrap();
    drop(s);
    // Version 1 (whose log has a subset of version 2's records) still opens.
    restore();
    set_version(&pages, &[newest, other], 1, None);
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "version 1").unwrap();
}

// ----- pages -------------------------------------------------------------------------------

/// Page kinds by their byte 4 (see `tierbase::btree::node`).
fn kind(page: &[u8]) -> u8 {
    page[4]
}

#[test]
fn a_flipped_byte_in_any_page_is_corrupt_where_it_is_read() {
    let dir = scratch_dir();
    let (path, model) = filled_store(dir.path());
    let pages = path.join("pages.tb");
    let original = std::fs::read(&pages).unwrap();
    let snap = Snapshot::take(&path);
    let n = original.len() / PAGE;
    let mut by_kind: BTreeMap<u8, usize> = BTreeMap::new();
    let mut noticed = 0;
    for pid in 2..n {
        let page = &original[pid * PAGE..(pid + 1) * PAGE];
        if page.iter().all(|&b| b == 0) {
            continue; // never written
        }
        *by_kind.entry(kind(page)).or_default() += 1;
        // A byte in the header and one in the body, alternating by page.
        let at = if pid % 2 == 0 {
            4 + pid % 44
        } else {
            PAGE - 1 - (pid * 13) % 2000
        };
        let mut bad = original.clone();
        bad[pid * PAGE + at] ^= 0x10;
        snap.restore();
        std::fs::write(&pages, &bad).unwrap();
        let ctx = format!("page {pid} (kind {}) byte {at} flipped", kind(page));
        match BTreeStore::open(&path, &opts()) {
            Ok(s) => {
                let r = read_all(&s, &model, &ctx);
                // Pages the tree reaches (meta, inner, leaf, overflow) must be noticed; free
                // pages are never read.
                if kind(page) != 3 {
                    assert!(r.is_err(), "{ctx}: damage went unnoticed");
                }
                if r.is_err() {
                    noticed += 1;
                }
                s.abandon();
            }
            Err(e) => {
                assert!(matches!(e, Error::Corrupt { .. }), "{ctx}: {e:?}");
                noticed += 1;
            }
        }
    }
    snap.restore();
    // The tree had every kind of page: leaves, inner pages, free pages, the meta page, and
    // overflow pages.
    assert!(by_kind.len() >= 5, "page kinds {by_kind:?}");
    assert!(noticed > 100, "{noticed}");
}

/// Header and slot bytes rewritten with a valid checksum: structural damage that only the
/// page checks can see. Anything but a panic or a hang is fine (the data may be wrong: the
/// checksum vouches for it).
#[test]
fn structural_damage_with_a_valid_checksum_never_panics() {
    let dir = scratch_dir();
    let (path, _) = filled_store(dir.path());
    let pages = path.join("pages.tb");
    let original = std::fs::read(&pages).unwrap();
    let snap = Snapshot::take(&path);
    let n = original.len() / PAGE;
    // The root's level and a leaf, an inner page and an overflow page.
    let mut targets = Vec::new();
    for want in [1u8, 2, 5, 4] {
        if let Some(pid) = (3..n).find(|&p| original[p * PAGE + 4] == want) {
            targets.push(pid);
        }
    }
    assert!(targets.len() >= 3, "{targets:?}");
    let mut errors = 0;
    for &pid in &targets {
        for at in (4..64).chain([4090, 4095]) {
            for x in [0x01u8, 0x80, 0xFF] {
                let mut bad = original.clone();
                let page = &mut bad[pid * PAGE..(pid + 1) * PAGE];
                page[at] ^= x;
                tierbase::buffer::seal(page);
                snap.restore();
                std::fs::write(&pages, &bad).unwrap();
                let r = std::panic::catch_unwind(|| {
                    let Ok(s) = BTreeStore::open(&path, &opts()) else {
                        return 1;
                    };
                    let mut errs = 0;
                    for i in (0..3000u32).step_by(13) {
                        errs += usize::from(s.get(&key(i)).is_err());
                    }
                    errs += usize::from(
                        s.range(Bound::Unbounded, Bound::Unbounded, true, |_, _| true)
                            .is_err(),
                    );
                    errs += usize::from(s.verify().is_err());
                    s.abandon();
                    errs
                });
                match r {
                    Ok(e) => errors += e,
                    Err(_) => panic!("page {pid} byte {at} ^ {x:#x} (resealed): a panic"),
                }
            }
        }
    }
    assert!(errors > 0);
}

/// A meta page whose high-water mark (checksum valid) lies beyond every page the files and
/// the log can hold is refused at open, before the first allocation would size the writer's
/// tables and the page file by it (with 2^40, tables of terabytes).
#[test]
fn a_high_water_mark_beyond_the_files_is_corrupt() {
    let dir = scratch_dir();
    let (path, _) = filled_store(dir.path());
    let pages = path.join("pages.tb");
    let original = std::fs::read(&pages).unwrap();
    let n = (original.len() / PAGE) as u64;
    // The meta page is page 2; its second field (from byte 48 of the page) is the mark.
    let next_at = 2 * PAGE + 48 + 8;
    let next = u64::from_le_bytes(original[next_at..next_at + 8].try_into().unwrap());
    assert!(next > 3 && next <= n, "mark {next} of {n} pages");
    let snap = Snapshot::take(&path);
    for mark in [n + 1_000_000, 1 << 40, u64::MAX] {
        let mut bad = original.clone();
        bad[next_at..next_at + 8].copy_from_slice(&mark.to_le_bytes());
        tierbase::buffer::seal(&mut bad[2 * PAGE..3 * PAGE]);
        snap.restore();
        std::fs::write(&pages, &bad).unwrap();
        let Err(e) = BTreeStore::open(&path, &opts()) else {
            panic!("mark {mark}: opened");
        };
        assert!(
            matches!(e, tierbase::Error::Corrupt { .. }) && e.to_string().contains("high-water"),
            "mark {mark}: {e}"
        );
    }
    // The store's own mark opens, and takes new pages.
    snap.restore();
    std::fs::write(&pages, &original).unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    for i in 0..2000u32 {
        s.put(&key(100_000 + i), &val(i)).unwrap();
    }
    s.close().unwrap();
}

/// An overflow reference rewritten (checksum valid) to point back at its own leaf: a read of
/// that value is a clear corruption error, not a wait on the leaf's own latch (a leaf loaded
/// a cache line at a time is held exclusively while its chain is read).
#[test]
fn an_overflow_chain_leading_back_to_its_leaf_is_corrupt() {
    let dir = scratch_dir();
    let (path, _) = filled_store(dir.path());
    let pages = path.join("pages.tb");
    let mut bytes = std::fs::read(&pages).unwrap();
    let u16_at = |p: &[u8], at: usize| u16::from_le_bytes([p[at], p[at + 1]]) as usize;
    // A leaf with an entry whose value is an overflow reference: its key, and the leaf.
    // (leaf, key, offset of the reference in the leaf)
    let (pid, key, r) = (3..bytes.len() / PAGE)
        .find_map(|pid| {
            let page = &bytes[pid * PAGE..(pid + 1) * PAGE];
            if page[4] != 1 {
                return None;
            }
            (0..u16_at(page, 6)).find_map(|i| {
                let cell = u16_at(page, 48 + 6 * i);
                let k = u16_at(page, cell);
                (k & 0x8000 != 0).then(|| {
                    let k = k & 0x7fff;
                    (pid, page[cell + 4..cell + 4 + k].to_vec(), cell + 4 + k)
                })
            })
        })
        .expect("a leaf holding an overflow reference");
    let page = &mut bytes[pid * PAGE..(pid + 1) * PAGE];
    page[r + 8..r + 16].copy_from_slice(&(pid as u64).to_le_bytes());
    tierbase::buffer::seal(page);
    std::fs::write(&pages, &bytes).unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    match s.get(&key) {
        Err(Error::Corrupt { detail, .. }) => {
            assert!(detail.contains("leads back"), "{detail}");
        }
        other => panic!("a chain back to its leaf read as {other:?}"),
    }
    s.abandon();
}

// ----- the log on NVM ----------------------------------------------------------------------

/// A store with an NVM tier keeps its log on NVM (region files): a torn last frame there is
/// the end of the log; a log region missing, or swapped for a plain log file, is a clear error
/// naming it; an NVM log elsewhere is reached through links, and its target gone is an error
/// naming the target.
#[test]
fn nvm_log_damage_absence_and_mismatch_are_clear_errors() {
    let dir = scratch_dir();
    let path = dir.path().join("n");
    let o = opts().nvm_bytes(8192 + 64 * (PAGE as u64 + 8));
    let s = BTreeStore::create(&path, &o).unwrap();
    let mut states = vec![Model::new()];
    for i in 0..40u32 {
        s.put(&key(i), &val(i)).unwrap();
        let mut m = states.last().unwrap().clone();
        m.insert(key(i), val(i));
        states.push(m);
    }
    let stats: std::collections::HashMap<String, String> = s.stats().into_iter().collect();
    assert_eq!(stats["wal_medium"], "nvm", "{stats:?}");
    assert_eq!(stats["wal_fsyncs"], "0", "{stats:?}");
    s.abandon();
    let (log, frames) = newest_log(&path);
    assert_eq!(frames.len(), 40, "one frame per put");
    let original = std::fs::read(&log).unwrap();
    assert_eq!(&original[..8], b"TBREGION");
    let snap = Snapshot::take(&path);
    // A torn last frame (its second half never persisted): the log ends before it.
    let (last_at, last_len) = *frames.last().unwrap();
    let mut torn = original.clone();
    torn[last_at + last_len / 2..last_at + last_len].fill(0);
    std::fs::write(&log, &torn).unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(s.restart_report().frames, 39);
    assert_eq!(contents(&s), states[39], "torn NVM log tail");
    s.abandon();
    snap.restore();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(contents(&s), states[40], "the whole NVM log");
    s.abandon();
    snap.restore();
    // A log region missing.
    std::fs::remove_file(&log).unwrap();
    let e = BTreeStore::open(&path, &opts()).unwrap_err();
    let name = log.file_name().unwrap().to_str().unwrap();
    assert!(e.to_string().contains(name), "{e}");
    snap.restore();
    // A log region replaced by a plain log file: the superblock says NVM, refused.
    std::fs::write(&log, vec![0u8; 8192]).unwrap();
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("wal-0.tb"), "{e}"),
        other => panic!("plain file for an NVM log: {other:?}"),
    }
    snap.restore();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(contents(&s), states[40], "log put back");
    s.close().unwrap();

    // The tier and its log elsewhere: links in the store's directory.
    let elsewhere = scratch_dir();
    let target = elsewhere.path().join("pmem.tb");
    let mut o = opts().nvm_bytes(8192 + 64 * (PAGE as u64 + 8));
    o.nvm_path = Some(target.clone());
    let path2 = dir.path().join("x");
    let s = BTreeStore::create(&path2, &o).unwrap();
    s.put(b"k", b"v").unwrap();
    s.abandon();
    for i in 0..2 {
        let link = path2.join(format!("wal-{i}.tb"));
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            elsewhere.path().join(format!("pmem.tb.wal-{i}"))
        );
    }
    let moved = elsewhere.path().join("moved");
    std::fs::rename(elsewhere.path().join("pmem.tb.wal-1"), &moved).unwrap();
    let e = BTreeStore::open(&path2, &opts()).unwrap_err();
    assert!(e.to_string().contains("pmem.tb.wal-1"), "{e}");
    std::fs::rename(&moved, elsewhere.path().join("pmem.tb.wal-1")).unwrap();
    let s = BTreeStore::open(&path2, &opts()).unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    s.close().unwrap();

    // A store with an NVM tier may keep its log in files (nvm_log false).
    let path3 = dir.path().join("f");
    let o = opts()
        .nvm_bytes(8192 + 64 * (PAGE as u64 + 8))
        .nvm_log(false);
    let s = BTreeStore::create(&path3, &o).unwrap();
    s.put(b"k", b"v").unwrap();
    let stats: std::collections::HashMap<String, String> = s.stats().into_iter().collect();
    assert_eq!(stats["wal_medium"], "file", "{stats:?}");
    s.close().unwrap();
    assert_ne!(
        &std::fs::read(path3.join("wal-0.tb")).unwrap()[..8],
        b"TBREGION"
    );
}

// ----- the log -----------------------------------------------------------------------------

const BLOCK: usize = 4096;
const FRAME_HEADER: usize = 24;

/// The log file holding the newest generation, and the frames in it: (offset, length).
fn newest_log(dir: &Path) -> (PathBuf, Vec<(usize, usize)>) {
    let mut best: Option<(u32, PathBuf)> = None;
    for name in ["wal-0.tb", "wal-1.tb"] {
        let p = dir.join(name);
        let raw = std::fs::read(&p).unwrap();
        let b = log_bytes(&raw);
        if b.len() >= BLOCK && &b[..8] == b"TBWAL001" {
            let g = u32::from_le_bytes(b[8..12].try_into().unwrap());
            if best.as_ref().is_none_or(|(bg, _)| g > *bg) {
                best = Some((g, p));
            }
        }
    }
    let (generation, p) = best.expect("a log file with a header");
    let raw = std::fs::read(&p).unwrap();
    let base = raw.len() - log_bytes(&raw).len();
    let b = log_bytes(&raw);
    let mut frames = Vec::new();
    let mut at = BLOCK;
    while at + FRAME_HEADER <= b.len() {
        let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let g = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap());
        if len < FRAME_HEADER || g != generation || at + len > b.len() {
            break;
        }
        frames.push((base + at, len));
        at += len;
    }
    (p, frames)
}

/// The log's bytes in a log file: all of it, or a region file's data area (after its 4 KiB
/// header) when the log is on NVM.
fn log_bytes(file: &[u8]) -> &[u8] {
    if file.starts_with(b"TBREGION") {
        &file[4096..]
    } else {
        file
    }
}

/// A store abandoned after `n` acknowledged puts (no closing checkpoint): its log holds them
/// (one frame each, after the open's checkpoint).
fn unclean_store(dir: &Path, n: u32) -> (PathBuf, Vec<Model>) {
    let path = dir.join("s");
    let s = BTreeStore::create(&path, &opts()).unwrap();
    let mut states = vec![Model::new()];
    for i in 0..n {
        s.put(&key(i), &val(i)).unwrap();
        let mut m = states.last().unwrap().clone();
        m.insert(key(i), val(i));
        states.push(m);
    }
    s.abandon();
    (path, states)
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

#[test]
fn a_torn_log_tail_is_the_end_and_a_wrong_lsn_is_corrupt() {
    let dir = scratch_dir();
    let (path, states) = unclean_store(dir.path(), 40);
    let (log, frames) = newest_log(&path);
    assert_eq!(frames.len(), 40, "one frame per put");
    let original = std::fs::read(&log).unwrap();
    let snap = Snapshot::take(&path);
    let restore = || snap.restore();
    let (last_at, last_len) = *frames.last().unwrap();
    // Torn tail: the last frame's second half never reached media.
    let mut torn = original.clone();
    torn[last_at + last_len / 2..last_at + last_len].fill(0);
    std::fs::write(&log, &torn).unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(s.restart_report().frames, 39);
    assert_eq!(contents(&s), states[39], "torn tail");
    assert_eq!(
        s.restart_report().log_damage,
        None,
        "a torn tail is no damage"
    );
    s.verify().unwrap();
    s.abandon();
    restore();
    // A damaged frame in the middle: replay stops there as at a torn tail, and the restart
    // reports the valid frames after it (before 2026-12-03 it said nothing, and `verify` OK).
    let (mid_at, _) = frames[10];
    poke(
        &log,
        (mid_at + FRAME_HEADER + 3) as u64,
        &[original[mid_at + FRAME_HEADER + 3] ^ 0x10],
    );
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(
        contents(&s),
        states[10],
        "replay stops at the damaged frame"
    );
    let damage = s
        .restart_report()
        .log_damage
        .expect("the damage is reported");
    assert_eq!(damage.frames_after, 29, "{damage:?}");
    let lsn = |i: usize| u64::from_le_bytes(original[frames[i].0 + 16..][..8].try_into().unwrap());
    assert_eq!(damage.lsn, lsn(10));
    assert_eq!(damage.last_lsn, lsn(39) + frames[39].1 as u64);
    assert!(
        s.stats()
            .iter()
            .any(|(k, v)| k == "recorded_log_damage" && v.contains("29 valid frames")),
        "{:?}",
        s.stats()
    );
    s.abandon();
    // The open started a new log generation after the damage, so the next replay does not
    // meet it; the record of it stays until an operator removes it (before, `verify` said
    // OK from then on while the 29 acknowledged puts after the damage were gone).
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(s.restart_report().log_damage, None);
    let recorded = s.restart_report().recorded_log_damage.clone();
    assert!(
        recorded
            .as_deref()
            .is_some_and(|t| t.contains("29 valid frames")),
        "{recorded:?}"
    );
    s.abandon();
    std::fs::remove_file(path.join(tierbase::btree::LOG_DAMAGE_FILE)).unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(s.restart_report().recorded_log_damage, None);
    s.abandon();
    restore();
    // A bad checksum in the last frame: the same.
    poke(
        &log,
        (last_at + FRAME_HEADER + 3) as u64,
        &[original[last_at + FRAME_HEADER + 3] ^ 1],
    );
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(contents(&s), states[39], "bad checksum in the last frame");
    s.abandon();
    restore();
    // The whole log intact: every put.
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(contents(&s), states[40]);
    s.abandon();
    restore();
    // A frame with a valid checksum that claims another LSN: corruption, not the end.
    for (i, delta) in [(0usize, 8u64), (17, 4096), (39, u64::MAX / 2)] {
        let (at, len) = frames[i];
        let mut b = original.clone();
        let lsn = u64::from_le_bytes(b[at + 16..at + 24].try_into().unwrap());
        b[at + 16..at + 24].copy_from_slice(&lsn.wrapping_add(delta).to_le_bytes());
        let c = crc32c::crc32c(&b[at + 8..at + len]);
        b[at + 4..at + 8].copy_from_slice(&c.to_le_bytes());
        restore();
        std::fs::write(&log, &b).unwrap();
        match BTreeStore::open(&path, &opts()) {
            Err(e @ Error::Corrupt { .. }) => {
                assert!(e.to_string().contains("claims LSN"), "frame {i}: {e}");
            }
            other => panic!("frame {i} claiming LSN + {delta}: {other:?}"),
        }
        restore();
    }
    // The generation's header damaged: the log redo needs is missing.
    poke(&log, 9, &[original[9] ^ 0xFF]);
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("log"), "{e}"),
        other => panic!("damaged log header: {other:?}"),
    }
    restore();
    // And every byte of one frame's header flipped: the end of the log or corruption,
    // never a panic or other data.
    let (at, _) = frames[20];
    for b in 0..FRAME_HEADER {
        poke(&log, (at + b) as u64, &[original[at + b] ^ 0x22]);
        match BTreeStore::open(&path, &opts()) {
            Ok(s) => {
                let got = contents(&s);
                assert_eq!(
                    got, states[20],
                    "frame 20 header byte {b}: the log ends there"
                );
                s.abandon();
            }
            Err(e) => assert!(matches!(e, Error::Corrupt { .. }), "header byte {b}: {e:?}"),
        }
        restore();
    }
}

// ----- a panic with the store open ---------------------------------------------------------

const PANIC_ENV: &str = "TIERBASE_BTREE_PANIC_CHILD";

/// A test that fails (panics) while a store is open must fail like any test — exit code 101
/// with its message — not abort the whole test process from the store's drop, and everything
/// acknowledged before must be there afterwards.
#[test]
fn a_panic_with_the_store_open_is_an_ordinary_failure() {
    if let Ok(path) = std::env::var(PANIC_ENV) {
        let s = BTreeStore::open(&path, &opts()).unwrap();
        s.put(b"before", b"the panic").unwrap();
        panic!("deliberate panic with the store open");
    }
    let dir = scratch_dir();
    let path = dir.path().join("s");
    BTreeStore::create(&path, &opts()).unwrap().close().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_panic_with_the_store_open_is_an_ordinary_failure",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PANIC_ENV, &path)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("deliberate panic"), "{text}");
    assert_eq!(
        out.status.code(),
        Some(101),
        "the child did not fail normally: {:?}",
        out.status
    );
    let s = BTreeStore::open(&path, &opts()).unwrap();
    assert_eq!(
        s.get(b"before").unwrap().as_deref(),
        Some(&b"the panic"[..])
    );
    s.verify().unwrap();
}

// ----- the NVM tier --------------------------------------------------------------------------

/// A store with an NVM tier that every page leaving DRAM enters, closed cleanly, most pages
/// in NVM only. Returns the store, its model and the NVM file.
fn filled_three_tier_store(dir: &Path, nvm_path: Option<PathBuf>) -> (PathBuf, Model, PathBuf) {
    let path = dir.join("t");
    let mut o = opts()
        .nvm_bytes(8192 + 512 * (PAGE as u64 + 8))
        .nvm_admission(tierbase::buffer::nvm::Admission::All);
    o.nvm_path = nvm_path.clone();
    let s = BTreeStore::create(&path, &o).unwrap();
    let mut model = Model::new();
    for i in 0..3000u32 {
        s.put(&key(i), &val(i)).unwrap();
        model.insert(key(i), val(i));
    }
    s.close().unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    let stats: std::collections::HashMap<String, String> = s.stats().into_iter().collect();
    let in_nvm: u64 = stats["restart_nvm_pages"].parse().unwrap();
    assert!(in_nvm > 64, "{stats:?}");
    read_all(&s, &model, "three-tier store").unwrap();
    s.close().unwrap();
    (
        path,
        model,
        nvm_path.unwrap_or_else(|| dir.join("t/nvm.tb")),
    )
}

/// Offset in the NVM file of (directory entry, page) of each occupied slot: the region's
/// 4 KiB header, the tier's 4 KiB header, the directory, then the slots.
fn nvm_slots(nvm: &Path) -> Vec<(u64, u64)> {
    let b = std::fs::read(nvm).unwrap();
    let data = &b[4096..];
    assert_eq!(&data[..8], b"TBNVMPG1");
    let slots = u64::from_le_bytes(data[16..24].try_into().unwrap());
    let slot_base = (4096 + slots * 8).next_multiple_of(4096);
    (0..slots)
        .filter(|s| {
            let at = (4096 + s * 8) as usize;
            data[at..at + 8] != [0; 8]
        })
        .map(|s| (4096 + 4096 + s * 8, 4096 + slot_base + s * PAGE as u64))
        .collect()
}

#[test]
fn nvm_tier_damage_and_absence_are_clear_errors() {
    let dir = scratch_dir();
    let (path, model, nvm) = filled_three_tier_store(dir.path(), None);
    let original = std::fs::read(&nvm).unwrap();
    let put_back = || std::fs::write(&nvm, &original).unwrap();
    let slots = nvm_slots(&nvm);
    assert!(slots.len() > 64);
    let snap = Snapshot::take(&path);

    // A byte flipped inside a page in NVM: the read that touches it is corrupt, naming the
    // NVM file; every other read is right.
    let (_, page_at) = slots[slots.len() / 2];
    poke(
        &nvm,
        page_at + 100,
        &[original[(page_at + 100) as usize] ^ 0x40],
    );
    let s = BTreeStore::open(&path, &opts()).unwrap();
    let e = read_all(&s, &model, "a flipped byte in NVM").unwrap_err();
    assert!(e.contains("nvm.tb") && e.contains("checksum"), "{e}");
    drop(s);
    snap.restore();
    put_back();

    // The tier's header damaged; two slots claiming one page; a page id beyond any file.
    for (what, at, bytes, want) in [
        ("header", 4096 + 13, vec![0x7f], "NVM tier header"),
        (
            "directory",
            slots[1].0,
            original[slots[0].0 as usize..slots[0].0 as usize + 8].to_vec(),
            "both claim",
        ),
        (
            "directory",
            slots[2].0,
            u64::MAX.to_le_bytes().to_vec(),
            "beyond any page file",
        ),
    ] {
        poke(&nvm, at, &bytes);
        match BTreeStore::open(&path, &opts()) {
            Err(e @ Error::Corrupt { .. }) => {
                let t = e.to_string();
                assert!(t.contains(want) && t.contains("nvm.tb"), "{what}: {t}");
            }
            other => panic!("{what}: {other:?}"),
        }
        snap.restore();
        put_back();
    }

    // The NVM file gone: refused (its pages are the newest), not opened without it.
    std::fs::remove_file(&nvm).unwrap();
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("nvm.tb"), "{e}"),
        other => panic!("NVM file removed: {other:?}"),
    }
    put_back();
    snap.restore();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "NVM file put back").unwrap();
    drop(s);

    // An NVM file elsewhere (a link in the store's directory): its target gone is an error
    // naming the target.
    let elsewhere = scratch_dir();
    let target = elsewhere.path().join("pmem-tier.tb");
    let (path2, model2, nvm2) =
        filled_three_tier_store(dir.path().join("x").as_path(), Some(target.clone()));
    assert_eq!(nvm2, target);
    assert!(
        std::fs::symlink_metadata(path2.join("nvm.tb"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let kept = std::fs::read(&target).unwrap();
    std::fs::remove_file(&target).unwrap();
    let e = BTreeStore::open(&path2, &opts()).unwrap_err();
    assert!(e.to_string().contains("pmem-tier.tb"), "{e}");
    std::fs::write(&target, kept).unwrap();
    let s = BTreeStore::open(&path2, &opts()).unwrap();
    read_all(&s, &model2, "NVM file elsewhere").unwrap();
    drop(s);

    // A leftover tier without its page file: a new store there would read its pages, so
    // create refuses.
    let leftover = dir.path().join("leftover");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::copy(&nvm, leftover.join("nvm.tb")).unwrap();
    match BTreeStore::create(&leftover, &opts()) {
        Err(e @ Error::InvalidArgument(_)) => assert!(e.to_string().contains("nvm.tb"), "{e}"),
        other => panic!("create over a leftover NVM tier: {other:?}"),
    }
    assert!(!leftover.join("pages.tb").exists());
}

/// A value written under a larger DRAM budget takes more overflow pages than a smaller pool
/// can hold for one change: deleting or replacing it under the smaller one ran out of frames
/// half-way and left the store read-only for every client. Now it is refused before anything
/// changes, the store goes on, and a larger budget deletes it.
#[test]
fn a_value_too_large_for_the_pool_is_refused_before_anything_changes() {
    let dir = scratch_dir();
    let path = dir.path().join("big");
    let big = vec![7u8; 3 << 20];
    let large = || {
        BTreeOptions::default()
            .page_size(PAGE)
            .dram_bytes(32 << 20)
            .durability(Durability::Immediate)
    };
    let s = BTreeStore::create(&path, &large()).unwrap();
    s.put(b"big", &big).unwrap();
    s.put(b"small", b"1").unwrap();
    s.close().unwrap();
    let small = BTreeOptions::default()
        .page_size(PAGE)
        .dram_bytes(2 << 20)
        .durability(Durability::Immediate);
    let s = BTreeStore::open(&path, &small).unwrap();
    // `modify` is what a server's GETDEL, GETSET, SET … GET and SET … XX run: it made the
    // store read-only after stop 60's refusal, which only `put` and `delete` returned as is.
    let modify = |change: Change| {
        let mut seen = 0;
        let r = Store::modify(&s, b"big", &mut |old| {
            seen = old.map_or(0, <[u8]>::len);
            change.clone()
        });
        assert_eq!(seen, big.len());
        r.unwrap_err()
    };
    // A replacement that needs overflow pages of its own was written and logged before the
    // old chain was checked: that refusal still made the store read-only.
    let large_value = vec![9u8; 100_000];
    for attempt in [
        "delete",
        "replace",
        "update",
        "modify-delete",
        "modify-put",
        "replace-large",
        "modify-put-large",
    ] {
        let err = match attempt {
            "delete" => s.delete(b"big").unwrap_err(),
            "replace" => s.put(b"big", b"short").unwrap_err(),
            "update" => s.update(b"big", b"short").unwrap_err(),
            "modify-delete" => modify(Change::Delete),
            "modify-put" => modify(Change::Put(b"short".to_vec())),
            "replace-large" => s.put(b"big", &large_value).unwrap_err(),
            _ => modify(Change::Put(large_value.clone())),
        };
        assert!(matches!(err, Error::InvalidArgument(_)), "{attempt}: {err}");
        assert!(err.to_string().contains("DRAM budget of at least"), "{err}");
        // Nothing changed, and other writes go on.
        assert_eq!(s.get(b"big").unwrap().as_deref(), Some(&big[..]));
        s.put(b"small", attempt.as_bytes()).unwrap();
    }
    s.close().unwrap();
    let s = BTreeStore::open(&path, &large()).unwrap();
    assert_eq!(
        s.get(b"small").unwrap().as_deref(),
        Some(&b"modify-put-large"[..])
    );
    assert!(s.delete(b"big").unwrap());
    assert_eq!(s.get(b"big").unwrap(), None);
    s.close().unwrap();
}

/// A tier file wiped (its data area zeroed, the region header kept) opened as a new, empty
/// tier: the store served an empty tree and took writes over the page file's old pages. A
/// store that has used its tier now refuses a blank tier header.
#[test]
fn a_wiped_nvm_tier_is_refused_not_formatted_again() {
    let dir = scratch_dir();
    let (path, model, nvm) = filled_three_tier_store(dir.path(), None);
    let mut bytes = std::fs::read(&nvm).unwrap();
    bytes[4096..].fill(0);
    std::fs::write(&nvm, &bytes).unwrap();
    match BTreeStore::open(&path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => {
            assert!(
                e.to_string().contains("nvm.tb") && e.to_string().contains("blank"),
                "{e}"
            )
        }
        Err(e) => panic!("{e}"),
        Ok(s) => panic!("opened with {} of {} keys", s.len(), model.len()),
    }
}

/// Opens the store at `path` read-write, checks it holds `model`, and closes it.
fn opens_with_every_value(path: &Path, model: &Model, ctx: &str) {
    let s = BTreeStore::open(path, &opts()).unwrap();
    read_all(&s, model, ctx).unwrap();
    s.close().unwrap();
}

/// Fails unless opening the store at `path` (which holds `model`) is refused as corrupt,
/// naming `nvm.tb` and saying each of `words` (the refusal's message must hold them all).
fn refused_naming(path: &Path, model: &Model, words: &[&str]) {
    refused_naming_file(path, model, "nvm.tb", words);
}

/// [`refused_naming`] for the file named by `file` (a part of its name).
fn refused_naming_file(path: &Path, model: &Model, file: &str, words: &[&str]) {
    match BTreeStore::open(path, &opts()) {
        Err(e @ Error::Corrupt { .. }) => {
            let m = e.to_string();
            assert!(
                m.contains(file) && words.iter().all(|w| m.contains(w)),
                "{m}"
            )
        }
        Err(e) => panic!("{e}"),
        Ok(s) => {
            let wrong = model
                .iter()
                .filter(|(k, v)| s.get(k).unwrap().as_deref() != Some(&v[..]))
                .count();
            panic!(
                "opened, {wrong} of {} keys not the store's own values",
                model.len()
            )
        }
    }
}

/// Another store's tier put in place of a store's own: its pages were taken as the store's
/// newest (a user's test: 753 of 3,000 keys served with the other store's values, `verify`
/// finding nothing wrong). The tier's header names its store, and the open refuses it.
#[test]
fn another_stores_nvm_tier_is_refused() {
    let (one, two) = (scratch_dir(), scratch_dir());
    let (path_one, model, nvm_one) = filled_three_tier_store(one.path(), None);
    let (_, _, nvm_two) = filled_three_tier_store(two.path(), None);
    // The other store holds other values for the same keys.
    let s = BTreeStore::open(two.path().join("t"), &opts()).unwrap();
    for i in 0..3000u32 {
        s.put(&key(i), b"the other store's").unwrap();
    }
    s.close().unwrap();
    std::fs::copy(&nvm_two, &nvm_one).unwrap();
    refused_naming(&path_one, &model, &["another store"]);
}

/// An older copy of the store's own tier (a restore of one file of the directory) brought
/// back older values; one from a later checkpoint than the page file is refused too.
#[test]
fn an_older_copy_of_the_tier_or_the_page_file_is_refused() {
    let dir = scratch_dir();
    let (path, _, nvm) = filled_three_tier_store(dir.path(), None);
    let saved = dir.path().join("saved");
    std::fs::create_dir(&saved).unwrap();
    for f in ["nvm.tb", "pages.tb"] {
        std::fs::copy(path.join(f), saved.join(f)).unwrap();
    }
    let s = BTreeStore::open(&path, &opts()).unwrap();
    let mut model = Model::new();
    for i in 0..3000u32 {
        s.put(&key(i), b"newer").unwrap();
        model.insert(key(i), b"newer".to_vec());
    }
    s.close().unwrap();
    let (now_nvm, now_pages) = (
        std::fs::read(&nvm).unwrap(),
        std::fs::read(path.join("pages.tb")).unwrap(),
    );
    std::fs::copy(saved.join("nvm.tb"), &nvm).unwrap();
    refused_naming(&path, &model, &["older copy of the tier"]);
    std::fs::write(&nvm, &now_nvm).unwrap();
    std::fs::copy(saved.join("pages.tb"), path.join("pages.tb")).unwrap();
    refused_naming(&path, &model, &["page file is older than the tier"]);
    // The store's own files together open, with every value.
    std::fs::write(path.join("pages.tb"), &now_pages).unwrap();
    opens_with_every_value(&path, &model, "the store's own files");
}

/// A damaged checkpoint word (its complement disagrees) is refused, naming it.
#[test]
fn a_damaged_tier_checkpoint_word_is_refused() {
    let dir = scratch_dir();
    let (path, model, nvm) = filled_three_tier_store(dir.path(), None);
    // Region header 4096, then the tier's header: the checkpoint word at 40.
    poke(&nvm, 4096 + 40, &[0xff]);
    refused_naming(&path, &model, &["checkpoint word is damaged"]);
}

/// A store written before ids (no id in its superblocks, no tie in its tier) opens with all
/// its keys; its first read-write open gives it an id and ties the tier, which another
/// store's tier then no longer passes for.
#[test]
fn a_store_from_before_ids_opens_and_is_tied_by_its_next_open() {
    let (one, two) = (scratch_dir(), scratch_dir());
    let (path, model, nvm) = filled_three_tier_store(one.path(), None);
    // Clear the id and its check in both superblocks, and the tier's tie words.
    for slot in 0..2u64 {
        poke(&path.join("pages.tb"), slot * PAGE as u64 + 48, &[0; 12]);
    }
    poke(&nvm, 4096 + 32, &[0; 16]);
    let mut ro = opts();
    ro.read_only = true;
    let read_only = BTreeStore::open(&path, &ro).unwrap();
    read_all(
        &read_only,
        &model,
        "read-only open of a store without an id",
    )
    .unwrap();
    let stats: std::collections::HashMap<String, String> = read_only.stats().into_iter().collect();
    assert!(stats["store_id"].starts_with("none yet"), "{stats:?}");
    drop(read_only);
    let s = BTreeStore::open(&path, &opts()).unwrap();
    read_all(&s, &model, "first read-write open").unwrap();
    let stats: std::collections::HashMap<String, String> = s.stats().into_iter().collect();
    let id = stats["store_id"].clone();
    assert_eq!(id.len(), 16, "{stats:?}");
    s.close().unwrap();
    let s = BTreeStore::open(&path, &opts()).unwrap();
    let stats: std::collections::HashMap<String, String> = s.stats().into_iter().collect();
    assert_eq!(stats["store_id"], id, "the id stays");
    s.close().unwrap();
    let (_, _, nvm_two) = filled_three_tier_store(two.path(), None);
    std::fs::copy(&nvm_two, &nvm).unwrap();
    refused_naming(&path, &model, &["another store"]);
}

/// Another store's log files put in place of a store's own (two stores with the same history
/// of writes, so the generation and its first LSN match what the superblock expects): their
/// records were redone onto this store's pages, every key taking the other store's value.
/// The log's headers name their store, and the open refuses them; headers written without
/// one (by older binaries) are still read.
#[test]
fn another_stores_log_is_refused() {
    let (one, two) = (scratch_dir(), scratch_dir());
    let abandoned = |dir: &Path, value: &[u8]| {
        let path = dir.join("s");
        let s = BTreeStore::create(&path, &opts()).unwrap();
        let mut model = Model::new();
        for i in 0..200u32 {
            s.put(&key(i), value).unwrap();
            model.insert(key(i), value.to_vec());
        }
        s.abandon();
        (path, model)
    };
    let (path, model) = abandoned(one.path(), b"this store's");
    let (other, _) = abandoned(two.path(), b"other store's");
    let saved: Vec<Vec<u8>> = ["wal-0.tb", "wal-1.tb"]
        .iter()
        .map(|f| std::fs::read(path.join(f)).unwrap())
        .collect();
    for f in ["wal-0.tb", "wal-1.tb"] {
        std::fs::copy(other.join(f), path.join(f)).unwrap();
    }
    refused_naming_file(&path, &model, "wal-", &["another store"]);
    // The store's own log, its headers' owner field cleared (as an older binary wrote them).
    for (f, bytes) in ["wal-0.tb", "wal-1.tb"].iter().zip(&saved) {
        std::fs::write(path.join(f), bytes).unwrap();
        poke(&path.join(f), 28, &[0; 12]);
    }
    opens_with_every_value(&path, &model, "own log without owner fields");
}

/// The crash window of a tie: the tier is tied to superblock `s + 1` before that superblock is
/// written, so a crash in between leaves the tier one checkpoint ahead of the newest
/// superblock. That store opens with every value; a tier two checkpoints ahead does not (it
/// can only be a page file from an older checkpoint).
#[test]
fn a_tier_one_checkpoint_ahead_is_the_crash_window_and_opens() {
    let dir = scratch_dir();
    let (path, model, nvm) = filled_three_tier_store(dir.path(), None);
    let [(_, newest), _] = superblocks(&path.join("pages.tb"));
    let word = |seq: u64| {
        let low = seq as u32;
        (u64::from(low) | (u64::from(!low) << 32)).to_le_bytes()
    };
    poke(&nvm, 4096 + 40, &word(newest + 1));
    opens_with_every_value(&path, &model, "tier one checkpoint ahead");
    let [(_, newest), _] = superblocks(&path.join("pages.tb"));
    poke(&nvm, 4096 + 40, &word(newest + 2));
    refused_naming(&path, &model, &["page file is older than the tier"]);
}

/// A damaged id check in the newest superblock: the open took the store for one without an
/// id and gave it a new one, which the next log generation's header then carried while the
/// other log file kept the old id; after a crash every open (read-only ones too) refused the
/// store as "the log belongs to another store". Now the other copy's id is the store's, and
/// replay checks only the headers whose frames it redoes.
#[test]
fn a_damaged_superblock_id_check_keeps_the_stores_id() {
    let dir = scratch_dir();
    let path = dir.path().join("s");
    let s = BTreeStore::create(&path, &opts()).unwrap();
    let mut model = Model::new();
    for i in 0..50u32 {
        s.put(&key(i), &val(i)).unwrap();
        model.insert(key(i), val(i));
    }
    let id = s
        .stats()
        .into_iter()
        .find(|(k, _)| k == "store_id")
        .unwrap()
        .1;
    s.close().unwrap();
    let pages = path.join("pages.tb");
    let [(newest, _), _] = superblocks(&pages);
    let byte = std::fs::read(&pages).unwrap()[newest as usize + 56];
    poke(&pages, newest + 56, &[byte ^ 1]);
    let s = BTreeStore::open(&path, &opts()).unwrap();
    let now = s
        .stats()
        .into_iter()
        .find(|(k, _)| k == "store_id")
        .unwrap()
        .1;
    assert_eq!(now, id, "the store keeps its id");
    for i in 50..80u32 {
        s.put(&key(i), &val(i)).unwrap();
        model.insert(key(i), val(i));
    }
    s.abandon();
    opens_with_every_value(&path, &model, "after a crash");
}

/// A `modify` closure that panics has changed nothing: the store stays writable, as kv's and
/// Plush's do. Before, the panic froze the pool and every later write (and the close) got
/// `ReadOnly` ("a change failed half-way (panic)") until the store was reopened (a user's
/// trial, 2026-12-04).
#[test]
fn a_panicking_modify_closure_leaves_the_store_writable() {
    use tierbase::store::{Change, Store};
    let dir = scratch_dir();
    let s = BTreeStore::create(dir.path(), &opts()).unwrap();
    s.put(b"k", b"before").unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = Store::modify(&s, b"k", &mut |_| -> Change {
            panic!("the caller's closure")
        });
    }));
    assert!(r.is_err(), "the closure's panic reaches the caller");
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"before"[..]));
    s.put(b"k", b"after").unwrap();
    Store::modify(&s, b"n", &mut |cur| {
        assert_eq!(cur, None);
        Change::Put(b"1".to_vec())
    })
    .unwrap();
    s.close().unwrap();
    let s = BTreeStore::open(dir.path(), &opts()).unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"after"[..]));
    assert_eq!(s.get(b"n").unwrap().as_deref(), Some(&b"1"[..]));
    s.close().unwrap();
}

/// A store made without an NVM tier, opened with `nvm_bytes` (as the option's doc offers:
/// "or of a store opened without one"), gets a tier. Before, the open made `nvm.tb` and then
/// refused it as a wiped tier ("the newest copies of its pages may be lost"), telling the user
/// their intact store had lost data (a user's trial, 2026-12-04). A store that had a tier
/// still refuses a blank one.
#[test]
fn a_tier_can_be_added_to_a_store_made_without_one() {
    let dir = scratch_dir();
    let s = BTreeStore::create(dir.path(), &opts()).unwrap();
    for i in 0..2_000 {
        s.put(&key(i), &val(i)).unwrap();
    }
    s.checkpoint().unwrap();
    s.close().unwrap();
    let with_tier = opts().nvm_bytes(4 << 20);
    let s = BTreeStore::open(dir.path(), &with_tier).unwrap();
    assert!(dir.path().join("nvm.tb").exists());
    for i in 0..2_000 {
        assert_eq!(s.get(&key(i)).unwrap(), Some(val(i)), "key {i}");
    }
    for i in 2_000..3_000 {
        s.put(&key(i), &val(i)).unwrap();
    }
    s.close().unwrap();
    // The tier is the store's now: opened without the option too.
    let s = BTreeStore::open(dir.path(), &opts()).unwrap();
    for i in 0..3_000 {
        assert_eq!(s.get(&key(i)).unwrap(), Some(val(i)), "key {i}");
    }
    s.verify().unwrap();
    s.close().unwrap();
}
