//! Read-only opens of the KV and Plush stores (`RegionOptions::read_only`): every read
//! served, every write refused with `Error::OpenedReadOnly`, other read-only opens beside it
//! and no writer, and the file not changed by a single byte — also when the open had to
//! recover a store a crash left (its repairs stay in the process's copy-on-write pages).

use std::path::Path;

use tierbase::Error;
use tierbase::hash::{PlushOptions, PlushStore};
use tierbase::kv::{KvOptions, KvStore};
use tierbase::store::Store;

fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn val(i: u32) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat((i % 50) as usize)).into_bytes()
}

/// What a read-only store must do, through the engine's store interface.
fn check_read_only(store: &dyn Store, n: u32, ctx: &str) {
    for i in (0..n).step_by(7) {
        assert_eq!(store.get(&key(i)).unwrap(), Some(val(i)), "{ctx}: key {i}");
    }
    assert_eq!(store.len(), u64::from(n), "{ctx}");
    let refused = [
        store.put(b"new", b"v").map(|_| ()),
        store.delete(&key(1)).map(|_| ()),
        store.put_many(&[(b"a", b"b")]).map(|_| ()),
    ];
    for r in refused {
        match r {
            Err(e @ Error::OpenedReadOnly { .. }) => {
                assert!(e.to_string().contains("opened read-only"), "{ctx}: {e}");
            }
            other => panic!("{ctx}: a write on a read-only store: {other:?}"),
        }
    }
    assert_eq!(
        store.get(&key(1)).unwrap(),
        Some(val(1)),
        "{ctx}: delete refused"
    );
}

fn unchanged(path: &Path, before: &[u8], ctx: &str) {
    let after = std::fs::read(path).unwrap();
    assert!(after == before, "{ctx}: a read-only open changed the file");
}

/// The read-only opens of a one-file store at `path` (closed cleanly) and at `crashed` (a
/// copy taken while it was open): `open(path, read_only)` opens it either way.
fn check_file_store(
    path: &Path,
    crashed: &Path,
    n: u32,
    open: impl Fn(&Path, bool) -> tierbase::Result<Box<dyn Store>>,
) {
    for (p, clean) in [(path, true), (crashed, false)] {
        let ctx = format!("{}, clean close {clean}", p.display());
        let before = std::fs::read(p).unwrap();
        let a = open(p, true).unwrap();
        // Another read-only open shares it; a writer cannot open meanwhile.
        let b = open(p, true).unwrap();
        assert!(
            matches!(open(p, false), Err(Error::Locked { .. })),
            "{ctx}: a writer opened beside a reader"
        );
        check_read_only(a.as_ref(), n, &ctx);
        check_read_only(b.as_ref(), n, &ctx);
        a.close().unwrap();
        b.close().unwrap();
        unchanged(p, &before, &ctx);
    }
    // The crash image still recovers for writing (the read-only opens repaired nothing).
    let w = open(crashed, false).unwrap();
    assert!(w.put(b"new", b"v").unwrap());
    w.close().unwrap();
}

#[test]
fn a_read_only_kv_store_reads_refuses_writes_and_changes_nothing() {
    let dir = scratch_dir();
    let path = dir.path().join("s.tb");
    let crashed = dir.path().join("crashed.tb");
    let n = 2000;
    let s = KvStore::create(&path, &KvOptions::default()).unwrap();
    for i in 0..n {
        s.put(&key(i), &val(i)).unwrap();
    }
    // A crash image: the file as it is while the store is open (its clean mark cleared).
    std::fs::copy(&path, &crashed).unwrap();
    s.close().unwrap();
    let open = |p: &Path, read_only: bool| {
        let mut o = KvOptions::default();
        o.region.read_only = read_only;
        KvStore::open(p, &o)
    };
    // The crash image is recovered (in the process's pages) as after a crash.
    assert!(!open(&crashed, true).unwrap().recovery().after_clean_close);
    check_file_store(&path, &crashed, n, |p, ro| {
        open(p, ro).map(|s| Box::new(s) as Box<dyn Store>)
    });
}

#[test]
fn a_read_only_plush_store_reads_refuses_writes_and_changes_nothing() {
    let dir = scratch_dir();
    let path = dir.path().join("p.plush");
    let crashed = dir.path().join("crashed.plush");
    let n = 3000;
    // A small DRAM level, so that records reach PMem levels and halves are frozen.
    let opts = PlushOptions::default().dram_bits(4);
    let s = PlushStore::create(&path, &opts).unwrap();
    for i in 0..n {
        s.put(&key(i), &val(i)).unwrap();
    }
    std::fs::copy(&path, &crashed).unwrap();
    s.close().unwrap();
    let open = |p: &Path, read_only: bool| {
        let mut o = opts.clone();
        o.region.read_only = read_only;
        PlushStore::open(p, &o)
    };
    assert!(
        open(&crashed, true)
            .unwrap()
            .verify()
            .unwrap()
            .problems
            .is_empty()
    );
    check_file_store(&path, &crashed, n, |p, ro| {
        open(p, ro).map(|s| Box::new(s) as Box<dyn Store>)
    });
}

/// Every file of a B+-tree store directory, by name.
fn dir_bytes(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn a_read_only_btree_store_reads_refuses_writes_and_changes_nothing() {
    use tierbase::btree::{BTreeOptions, BTreeStore};
    let dir = scratch_dir();
    let path = dir.path().join("bt");
    let crashed = dir.path().join("crashed");
    let n = 3000;
    let opts = BTreeOptions::default().page_size(4096).dram_bytes(4 << 20);
    let s = BTreeStore::create(&path, &opts).unwrap();
    for i in 0..n {
        s.put(&key(i), &val(i)).unwrap();
    }
    // A crash image: the files as they are while the store is open (its log holds the puts
    // since the open's checkpoint).
    copy_dir(&path, &crashed);
    s.close().unwrap();
    let mut ro = opts.clone();
    ro.read_only = true;
    for (p, clean) in [(&path, true), (&crashed, false)] {
        let ctx = format!("btree, clean close {clean}");
        let before = dir_bytes(p);
        let a = BTreeStore::open(p, &ro).unwrap();
        assert_eq!(
            a.restart_report().frames > 0,
            !clean,
            "{ctx}: {:?}",
            a.restart_report()
        );
        let b = BTreeStore::open(p, &ro).unwrap();
        assert!(
            matches!(BTreeStore::open(p, &opts), Err(Error::Locked { .. })),
            "{ctx}: a writer opened beside a reader"
        );
        check_read_only(&a, n, &ctx);
        check_read_only(&b, n, &ctx);
        assert!(a.checkpoint().is_err(), "{ctx}: a checkpoint writes");
        a.verify().unwrap();
        a.close().unwrap();
        b.close().unwrap();
        assert!(
            dir_bytes(p) == before,
            "{ctx}: a read-only open changed a file"
        );
    }
    // Redo's pages must fit the pool: a clear error naming the budget, not "a failed write".
    let mut small = ro.clone();
    small.dram_bytes = 16 * 4096;
    match BTreeStore::open(&crashed, &small) {
        Err(e @ Error::InvalidArgument(_)) => {
            assert!(e.to_string().contains("give a larger one (--dram)"), "{e}")
        }
        other => panic!("a read-only restart in 16 frames: {other:?}"),
    }
    let w = BTreeStore::open(&crashed, &opts).unwrap();
    assert!(w.put(b"new", b"v").unwrap());
    w.close().unwrap();
}
