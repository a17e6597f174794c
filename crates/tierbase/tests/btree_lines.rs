//! Cache-line-grained NVM leaves in the B+-tree (the three-tier design): point reads of a
//! leaf brought in from NVM copy only the lines they touch, every other access makes the
//! leaf whole first, and the answers are those of a `BTreeMap` throughout — with lines not
//! yet loaded poisoned, so that a read of one that was never loaded shows.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use common::{scratch_dir, stat};
use tierbase::btree::{BTreeOptions, BTreeStore};
use tierbase::buffer::nvm::Admission;
use tierbase::device::Durability;

const PAGE: usize = 16 * 1024;
const LINES_PER_PAGE: u64 = (PAGE / 64) as u64;
const KEYS: u64 = 20_000;

fn opts(by_line: bool, mini_percent: u8) -> BTreeOptions {
    BTreeOptions::default()
        .page_size(PAGE)
        .dram_bytes(16 * PAGE as u64)
        .durability(Durability::None)
        .nvm_bytes(64 << 20)
        .nvm_admission(Admission::All)
        .nvm_lines(by_line)
        .mini_page_percent(mini_percent)
        .poison_lines(true)
}

fn key(i: u64) -> Vec<u8> {
    format!("user{:012}", i.wrapping_mul(2_654_435_761) % 1_000_003).into_bytes()
}

/// 100 bytes, or 1500 for every tenth key: reading one of those needs 24 lines, more than
/// a mini page holds, so the read promotes it mid-lookup.
fn value(i: u64, round: u8) -> Vec<u8> {
    let len = if i % 10 == 3 { 1500 } else { 100 };
    let mut v = vec![round ^ (i as u8); len];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

/// A store holding `KEYS` records (about 250 leaves) over a 16-frame pool: most leaves sit
/// in NVM only.
fn loaded(dir: &std::path::Path, o: &BTreeOptions) -> (BTreeStore, BTreeMap<Vec<u8>, Vec<u8>>) {
    let s = BTreeStore::create(dir.join("store"), o).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..KEYS {
        s.put(&key(i), &value(i, 0)).unwrap();
        model.insert(key(i), value(i, 0));
    }
    (s, model)
}

/// Reads every key once, in an order unrelated to the leaves', plus keys that are absent:
/// (NVM hits, lines loaded) during the reads.
fn read_all(s: &BTreeStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) -> (u64, u64) {
    let (hits, lines) = (stat(s, "nvm_hits"), stat(s, "nvm_lines_loaded"));
    for i in (0..KEYS).map(|i| i.wrapping_mul(7919) % KEYS) {
        assert_eq!(
            s.get(&key(i)).unwrap().as_ref(),
            model.get(&key(i)),
            "key {i}"
        );
        let absent = format!("user{:012}x", i).into_bytes();
        assert_eq!(s.get(&absent).unwrap(), None);
    }
    (
        stat(s, "nvm_hits") - hits,
        stat(s, "nvm_lines_loaded") - lines,
    )
}

fn check_scans(s: &BTreeStore, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for reverse in [false, true] {
        let mut seen = Vec::new();
        s.range(Bound::Unbounded, Bound::Unbounded, reverse, |k, v| {
            seen.push((k.to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        if reverse {
            seen.reverse();
        }
        assert!(seen.iter().map(|(k, v)| (k, v)).eq(model.iter()), "scan");
    }
}

#[test]
fn point_reads_copy_a_few_lines_where_page_mode_copies_every_line() {
    let dir = scratch_dir();
    let (s, model) = loaded(dir.path(), &opts(true, 0));
    let (hits, lines) = read_all(&s, &model);
    let line_loads = stat(&s, "nvm_line_loads");
    assert!(
        hits > 1000 && line_loads > 1000,
        "{hits} NVM hits, {line_loads} by lines"
    );
    // A lookup in a leaf of ~110 entries reads its header, a few slot lines and one cell:
    // well under a tenth of the page, where page mode reads all of it.
    assert!(
        lines * 10 < hits * LINES_PER_PAGE,
        "{lines} lines for {hits} NVM hits"
    );
    s.close().unwrap();

    let dir = scratch_dir();
    let (s, model) = loaded(dir.path(), &opts(false, 0));
    let (hits, lines) = read_all(&s, &model);
    assert_eq!(stat(&s, "nvm_line_loads"), 0);
    assert!(hits > 1000);
    assert_eq!(lines, hits * LINES_PER_PAGE, "page mode copies every line");
    s.close().unwrap();
}

#[test]
fn writers_scans_and_restart_see_whole_leaves() {
    writers_scans_and_restart(0);
}

/// Mini pages hold the leaves of point reads: writers, scans and reads needing more lines
/// promote them.
#[test]
fn writers_scans_and_restart_see_whole_leaves_with_mini_pages() {
    let s = writers_scans_and_restart(25);
    let (loads, promotions) = (s["mini_loads"], s["mini_promotions"]);
    assert!(
        loads > 1000 && promotions > 10,
        "{loads} mini loads, {promotions} promotions"
    );
}

/// Returns the counters of the reopened store.
fn writers_scans_and_restart(mini_percent: u8) -> std::collections::HashMap<String, u64> {
    let o = opts(true, mini_percent);
    let dir = scratch_dir();
    let (s, mut model) = loaded(dir.path(), &o);
    for round in 1..=3u8 {
        // Point reads leave line-grained leaves in DRAM; the writes and scans that follow
        // meet some of them and must make them whole before using them.
        read_all(&s, &model);
        for i in (0..KEYS).filter(|i| i % 5 == u64::from(round)) {
            if i % 2 == 0 {
                s.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            } else {
                assert!(s.delete(&key(i)).unwrap());
                model.remove(&key(i));
            }
        }
        read_all(&s, &model);
        check_scans(&s, &model);
        assert_eq!(s.len(), model.len() as u64);
    }
    assert!(stat(&s, "nvm_line_loads") > 0);
    s.checkpoint().unwrap();
    s.close().unwrap();

    // After a restart no slot is trusted: a leaf's first load is whole and checked, later
    // ones may go by lines again.
    let s = BTreeStore::open(dir.path().join("store"), &o).unwrap();
    let (hits, lines) = read_all(&s, &model);
    let whole = hits - stat(&s, "nvm_line_loads");
    // Each of the ~250 leaves' first load at least.
    assert!(
        whole >= 100,
        "{whole} whole loads of {hits} after the restart"
    );
    assert!(lines >= whole * LINES_PER_PAGE);
    let (hits, _) = read_all(&s, &model);
    assert!(hits > 0 && stat(&s, "nvm_line_loads") > 0);
    check_scans(&s, &model);
    let (_, n) = s.verify().unwrap();
    assert_eq!(n, model.len() as u64);
    let counters = s
        .stats()
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    s.close().unwrap();
    counters
}

/// Counter deltas of `names` over `f`.
fn deltas<const N: usize>(s: &BTreeStore, names: [&str; N], f: impl FnOnce()) -> [u64; N] {
    let before = names.map(|n| stat(s, n));
    f();
    let mut out = names.map(|n| stat(s, n));
    for (o, b) in out.iter_mut().zip(before) {
        *o -= b;
    }
    out
}

/// Updates of leaves that came from NVM write back only the lines they changed (and the
/// header line), where page mode writes every line; with the changed-line check on (poison
/// mode), every such write-back first proves that no other line differs from the slot. The
/// answers survive a restart.
#[test]
fn write_backs_of_leaves_from_nvm_write_only_their_changed_lines() {
    let names = [
        "nvm_page_writes",
        "nvm_slot_lines_written",
        "nvm_line_write_backs",
    ];
    let update = |s: &BTreeStore, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        for i in (0..KEYS).filter(|i| i % 3 == 0 && i % 10 != 3) {
            s.put(&key(i), &value(i, 7)).unwrap();
            model.insert(key(i), value(i, 7));
        }
        s.checkpoint().unwrap();
    };
    let dir = scratch_dir();
    let o = opts(true, 0);
    let (s, mut model) = loaded(dir.path(), &o);
    s.checkpoint().unwrap();
    let [pages, lines, by_line] = deltas(&s, names, || update(&s, &mut model));
    assert!(
        by_line > 100 && by_line <= pages,
        "{by_line} of {pages} write-backs by line"
    );
    // A same-size update rewrites its value in place: a line or two and the header line,
    // of 256.
    assert!(
        lines * 8 < pages * LINES_PER_PAGE,
        "{lines} lines in {pages} page writes"
    );
    read_all(&s, &model);
    s.close().unwrap();
    let s = BTreeStore::open(dir.path().join("store"), &o).unwrap();
    read_all(&s, &model);
    check_scans(&s, &model);
    s.close().unwrap();

    let dir = scratch_dir();
    let (s, mut model) = loaded(dir.path(), &opts(false, 0));
    s.checkpoint().unwrap();
    let [pages, lines, by_line] = deltas(&s, names, || update(&s, &mut model));
    assert_eq!(by_line, 0);
    assert_eq!(lines, pages * LINES_PER_PAGE, "page mode writes every line");
    s.close().unwrap();
}

/// A clean close hands the pages in DRAM to free NVM slots: after a reopen every DRAM miss
/// is served from NVM, none from the page file. Without the hand-over (or after a crash,
/// which skips the close) the same reads go to the page file.
#[test]
fn a_clean_close_hands_dram_pages_to_nvm_for_a_warm_restart() {
    for hand_over in [true, false] {
        let o = opts(true, 0)
            .dram_bytes(64 << 20)
            .nvm_admission(Admission::RecentlyRefused(1024))
            .nvm_hand_over(hand_over);
        let dir = scratch_dir();
        let (s, model) = loaded(dir.path(), &o);
        // Everything fits in DRAM: nothing was evicted, so nothing is in NVM yet.
        assert_eq!(stat(&s, "nvm_pages_resident"), 0);
        s.close().unwrap();
        let s = BTreeStore::open(dir.path().join("store"), &o).unwrap();
        let restart_nvm = stat(&s, "restart_nvm_pages");
        // What the open itself read (superblocks, the meta page) is not the reads' doing.
        let opened = stat(&s, "ssd_page_reads");
        read_all(&s, &model);
        check_scans(&s, &model);
        let (from_nvm, from_file) = (stat(&s, "nvm_hits"), stat(&s, "ssd_page_reads") - opened);
        if hand_over {
            assert!(restart_nvm > 200, "{restart_nvm} pages in NVM at open");
            assert!(from_nvm >= restart_nvm, "{from_nvm} NVM hits");
            assert_eq!(from_file, 0, "page file reads after a hand-over");
        } else {
            assert_eq!(restart_nvm, 0);
            assert_eq!(from_nvm, 0);
            assert!(from_file > 200, "{from_file} page file reads");
        }
        s.close().unwrap();
    }
}

/// Same-size updates of leaves that sit in NVM load the lines their search reads and those
/// of the value, not the whole leaf (the paper's MakeResident for writers), whether they
/// come through `put` or a read-modify-write (`modify`), with and without mini pages. Their
/// frames are dirty with lines missing; the write-backs write the changed lines into the slot
/// with the checksum updated from them (checked against the page's in poison mode), and the
/// answers survive a clean close and a crash.
#[test]
fn same_size_updates_of_leaves_in_nvm_load_lines_not_pages() {
    use tierbase::store::{Change, Store};
    for mini_percent in [0, 25] {
        let dir = scratch_dir();
        let o = opts(true, mini_percent);
        // No checkpoint after the load: every leaf has its image in this log generation,
        // so its updates need no whole page for the log.
        let (s, mut model) = loaded(dir.path(), &o);
        let updated: Vec<u64> = (0..KEYS).filter(|i| i % 10 != 3 && i % 4 == 1).collect();
        let [lines] = deltas(&s, ["nvm_lines_loaded"], || {
            for (n, &i) in updated.iter().enumerate() {
                let v = value(i, 5);
                if n % 2 == 0 {
                    assert!(!s.put(&key(i), &v).unwrap());
                } else {
                    Store::modify(&s, &key(i), &mut |old| {
                        assert_eq!(old, Some(value(i, 0).as_slice()));
                        Change::Put(v.clone())
                    })
                    .unwrap();
                }
                model.insert(key(i), v);
            }
        });
        let per_update = lines / updated.len() as u64;
        // A lookup reads the header line, ~8 slot lines and the cell: about a tenth of the
        // 256 lines that loading the leaf whole copies.
        assert!(
            per_update < LINES_PER_PAGE / 8,
            "{per_update} lines loaded per update (minis {mini_percent} %)"
        );
        assert!(stat(&s, "nvm_line_write_backs") > 100);
        read_all(&s, &model);
        // A clean close (its checkpoint writes the changed lines; the reopen checks every
        // slot's checksum as it loads it), or a crash (redo from the images of the load).
        if mini_percent == 0 {
            s.close().unwrap();
        } else {
            s.abandon();
        }
        let s = BTreeStore::open(dir.path().join("store"), &o).unwrap();
        read_all(&s, &model);
        check_scans(&s, &model);
        s.close().unwrap();
    }
}

#[test]
fn inserts_into_leaves_in_nvm_load_lines_not_pages() {
    for mini_percent in [0, 25] {
        let dir = scratch_dir();
        let o = opts(true, mini_percent);
        let s = BTreeStore::create(dir.path().join("store"), &o).unwrap();
        let mut model = BTreeMap::new();
        // Every other key first, then a sixteenth of the rest: new keys land between old
        // ones, in leaves with room, and most of those leaves sit in NVM only.
        for i in (0..KEYS).filter(|i| i % 2 == 0) {
            s.put(&key(i), &value(i, 0)).unwrap();
            model.insert(key(i), value(i, 0));
        }
        let inserted: Vec<u64> = (0..KEYS).filter(|i| i % 32 == 1).collect();
        let [lines, misses] = deltas(&s, ["nvm_lines_loaded", "nvm_hits"], || {
            for &i in &inserted {
                assert!(s.put(&key(i), &value(i, 0)).unwrap(), "key {i} is new");
                model.insert(key(i), value(i, 0));
            }
        });
        assert_eq!(s.len(), model.len() as u64);
        let per_insert = lines / inserted.len() as u64;
        // A slot search, the slots after the new one, its cell and the header: a tenth of
        // the 256 lines a whole leaf takes (the inserts that split a leaf load it whole).
        assert!(
            per_insert < LINES_PER_PAGE / 8,
            "{per_insert} lines loaded per insert, {misses} NVM hits (minis {mini_percent} %)"
        );
        read_all(&s, &model);
        check_scans(&s, &model);
        if mini_percent == 0 {
            s.close().unwrap();
        } else {
            s.abandon();
        }
        let s = BTreeStore::open(dir.path().join("store"), &o).unwrap();
        assert_eq!(s.verify().unwrap().1, model.len() as u64);
        read_all(&s, &model);
        check_scans(&s, &model);
        s.close().unwrap();
    }
}

/// Checkpoints write copies of frames without their latch; a frame changed in place by lines
/// must keep its slot pinned until such a copy is written, even when a scan or another writer
/// makes the frame whole meanwhile (else the slot can change hands under the copy, and the
/// write-back fails as corruption). Updates by lines, scans and checkpoints race here on a
/// tier that must evict (every page is admitted); none may fail, and the answers hold.
#[test]
fn checkpoints_racing_scans_and_updates_by_lines_fail_nothing() {
    let dir = scratch_dir();
    // A tier smaller than the data: NVM Clock keeps evicting while the threads run.
    let o = opts(true, 25).nvm_bytes(3 << 20);
    let (s, model) = loaded(dir.path(), &o);
    let keys: Vec<u64> = (0..KEYS).filter(|i| i % 10 != 3).collect();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let updates = scope.spawn(|| {
            for round in 1..=4u8 {
                for &i in keys.iter().step_by(7) {
                    s.put(&key(i), &value(i, round)).unwrap();
                }
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let scans = scope.spawn(|| {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                s.range(Bound::Unbounded, Bound::Unbounded, n % 2 == 1, |_, _| true)
                    .unwrap();
                n += 1;
            }
        });
        while !stop.load(std::sync::atomic::Ordering::Acquire) {
            s.checkpoint().unwrap();
        }
        updates.join().unwrap();
        scans.join().unwrap();
    });
    let mut model = model;
    for &i in keys.iter().step_by(7) {
        model.insert(key(i), value(i, 4));
    }
    read_all(&s, &model);
    s.close().unwrap();
    let s = BTreeStore::open(dir.path().join("store"), &o).unwrap();
    read_all(&s, &model);
    s.close().unwrap();
}
