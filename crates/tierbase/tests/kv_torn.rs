//! Torn single-persist writes over reused space: a record is persisted with its validity marker
//! in one fence, so after a power loss the marker may be on media while the record's bytes are
//! not. The bytes underneath are then whatever the space held before — and those must never
//! pass for a record. These tests build exactly that media state by hand (what such a crash
//! leaves) and check that the old record does not come back:
//! - fixed layout: invalidation zeroes the slot's stamp with its bit, so a freed slot whose bit
//!   comes back holds version 0;
//! - variable layout: recovery zeroes a log's free space after its tail, so bytes an
//!   unacknowledged write left there cannot be revived by a later header word.

use std::path::Path;

use tierbase::device::{PmemRegion, RegionOptions};
use tierbase::kv::layout::{self, HEADER_LEN, PAGE, var};
use tierbase::kv::{KvOptions, KvStore, RecordLayout};

fn opts(layout: RecordLayout) -> KvOptions {
    KvOptions::default()
        .layout(layout)
        .reclaim(None)
        .pages_per_block(1)
        .chunk_size(1 << 20)
}

/// The data area of the region file at `path`, and its first data offset holding `needle`.
/// The store's clean-close mark is taken off: the media states these tests build are what a
/// crash leaves, and a crashed store was not closed.
fn find(path: &Path, needle: &[u8]) -> (PmemRegion, u64) {
    let region = PmemRegion::open(path, &RegionOptions::default()).unwrap();
    region
        .atomic_u64(layout::header::CLEAN as u64)
        .unwrap()
        .store(0, std::sync::atomic::Ordering::SeqCst);
    region.persist(layout::header::CLEAN as u64, 8).unwrap();
    let mut data = vec![0u8; region.len() as usize];
    region.read(0, &mut data).unwrap();
    let at = data
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{needle:?} not found on media"));
    (region, at as u64)
}

const FIXED: RecordLayout = RecordLayout::Fixed {
    key_size: 16,
    value_size: 40,
};

/// A fixed-layout store at `path` holding one record that stays ("keep-key-0000001") and
/// `ghost`, deleted again if `delete`.
fn fixed_store_with(path: &Path, ghost: &[u8; 16], delete: bool) {
    let store = KvStore::create(path, &opts(FIXED)).unwrap();
    let mut c = store.client();
    assert!(c.put(b"keep-key-0000001", &[1; 40]).unwrap());
    assert!(c.put(ghost, &[2; 40]).unwrap());
    if delete {
        assert!(c.delete(ghost).unwrap());
    }
}

/// Sets (or clears) on media the bitset bit of the fixed slot holding `ghost`'s key, as a
/// torn write may leave it.
fn tear_slot_bit(path: &Path, ghost: &[u8], on: bool) {
    let (region, key_at) = find(path, ghost);
    set_slot_bit(&region, FIXED, key_at, on);
}

/// Reopens the store at `path` after a torn write: `ghost` must read as absent (else `what`
/// came back), and only the one record that stays is there.
fn reopen_without(path: &Path, layout: RecordLayout, ghost: &[u8], what: &str) -> KvStore {
    let store = KvStore::open(path, &opts(layout)).unwrap();
    assert_eq!(store.get(ghost).unwrap(), None, "{what} came back");
    assert_eq!(store.len(), 1);
    store
}

#[test]
fn a_freed_slot_whose_bit_comes_back_does_not_revive_its_old_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixed.tb");
    let ghost = *b"ghost-key-000001";
    fixed_store_with(&path, &ghost, true);
    // What a power loss during the next insert into that slot may leave: the slot's bit on
    // media, none of the new record's bytes.
    tear_slot_bit(&path, &ghost, true);
    let store = reopen_without(&path, FIXED, &ghost, "a deleted record");
    assert_eq!(store.recovery().torn_records, 1);
    assert_eq!(
        store.get(b"keep-key-0000001").unwrap().as_deref(),
        Some(&[1u8; 40][..])
    );
}

/// Sets (or clears) the bitset bit of the fixed slot whose key starts at data offset `key_at`.
fn set_slot_bit(region: &PmemRegion, layout: RecordLayout, key_at: u64, on: bool) {
    let slot = key_at - layout::SLOT_KEY;
    let page = HEADER_LEN + (slot - HEADER_LEN) / PAGE * PAGE;
    let geo = layout::Geometry::new(layout, 1, 1 << 20).unwrap();
    let index = (slot - page - u64::from(geo.bitset_words) * 8) / geo.slot_size;
    let word = page + index / 64 * 8;
    let bits = region.atomic_u64(word).unwrap();
    let bit = 1 << (index % 64);
    if on {
        bits.fetch_or(bit, std::sync::atomic::Ordering::SeqCst);
    } else {
        bits.fetch_and(!bit, std::sync::atomic::Ordering::SeqCst);
    }
    region.persist(word, 8).unwrap();
}

#[test]
fn a_whole_record_whose_bit_never_reached_media_is_not_revived_by_a_later_bit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fixed2.tb");
    let ghost = *b"ghost-key-000002";
    fixed_store_with(&path, &ghost, false);
    // A power loss during the ghost's put kept its bytes but not its bit: never acknowledged.
    tear_slot_bit(&path, &ghost, false);
    {
        let store = KvStore::open(&path, &opts(FIXED)).unwrap();
        assert_eq!(store.get(&ghost).unwrap(), None);
    }
    // A later insert into the free slot, torn: only its bit reached media.
    tear_slot_bit(&path, &ghost, true);
    reopen_without(&path, FIXED, &ghost, "an unacknowledged write");
}

#[test]
fn bytes_an_unacknowledged_write_left_after_a_log_tail_are_never_revived() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("var.tb");
    let ghost = b"ghost-key";
    let ghost_value = [7u8; 100];
    {
        let store = KvStore::create(&path, &opts(RecordLayout::Variable)).unwrap();
        let mut c = store.client();
        assert!(c.put(b"keep", b"kept value").unwrap());
        assert!(c.put(ghost, &ghost_value).unwrap());
    }
    // A power loss during the ghost's put left its body but not its header word: the put was
    // never acknowledged, and the log ends before it.
    let header_at = {
        let (region, key_at) = find(&path, ghost);
        let header_at = key_at - var::INLINE_HEADER;
        region
            .atomic_u32(header_at)
            .unwrap()
            .store(0, std::sync::atomic::Ordering::SeqCst);
        region.persist(header_at, 4).unwrap();
        header_at
    };
    {
        let store = KvStore::open(&path, &opts(RecordLayout::Variable)).unwrap();
        assert_eq!(store.get(ghost).unwrap(), None);
        assert_eq!(store.len(), 1);
    }
    // A later put of the same lengths at the same place, torn by another power loss: only its
    // header word reached media. Underneath lies whatever the space held.
    {
        let (region, _) = find(&path, b"keep");
        region.atomic_u32(header_at).unwrap().store(
            var::inline_word(ghost.len(), ghost_value.len()),
            std::sync::atomic::Ordering::SeqCst,
        );
        region.persist(header_at, 4).unwrap();
    }
    let store = reopen_without(
        &path,
        RecordLayout::Variable,
        ghost,
        "an unacknowledged write",
    );
    assert_eq!(store.recovery().torn_records, 1);
    assert_eq!(
        store.get(b"keep").unwrap().as_deref(),
        Some(&b"kept value"[..])
    );
}

#[test]
fn a_record_whose_bytes_do_not_match_its_check_is_dropped_and_the_rest_survive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("check.tb");
    let layout = FIXED;
    {
        let store = KvStore::create(&path, &opts(layout)).unwrap();
        let mut c = store.client();
        for i in 0..10u8 {
            assert!(c.put(&[i; 16], &[i; 40]).unwrap());
        }
    }
    // One word of record 3's value never reached media (a torn write).
    {
        let (region, key_at) = find(&path, &[3u8; 16]);
        let value_at = key_at - layout::SLOT_KEY + layout::slot_value(16);
        region.write(value_at + 8, &[0xEE; 8]).unwrap();
        region.persist(value_at + 8, 8).unwrap();
    }
    let report = tierbase::kv::verify(&path).unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    assert_eq!((report.valid_records, report.torn_records), (9, 1));
    let store = KvStore::open(&path, &opts(layout)).unwrap();
    assert_eq!(store.recovery().torn_records, 1);
    assert_eq!(store.get(&[3u8; 16]).unwrap(), None);
    for i in (0..10u8).filter(|&i| i != 3) {
        assert_eq!(store.get(&[i; 16]).unwrap().as_deref(), Some(&[i; 40][..]));
    }
    // Dropped on media too: the next open finds nothing torn.
    drop(store);
    let store = KvStore::open(&path, &opts(layout)).unwrap();
    assert_eq!(store.recovery().torn_records, 0);
    assert_eq!(store.len(), 9);
}

#[test]
fn only_a_clean_close_lets_recovery_skip_the_checks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clean.tb");
    fixed_store_with(&path, b"ghost-key-000003", false);
    let store = KvStore::open(&path, &opts(FIXED)).unwrap();
    assert!(store.recovery().after_clean_close, "closed cleanly");
    // While open, media says "not closed": a copy taken now is what a crash would leave.
    let word = store
        .region()
        .atomic_u64(layout::header::CLEAN as u64)
        .unwrap()
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(word, 0, "the mark is cleared at open, before any write");
    let crashed = dir.path().join("crashed.tb");
    std::fs::copy(&path, &crashed).unwrap();
    drop(store);
    let crashed_copy = dir.path().join("crashed-copy.tb");
    std::fs::copy(&crashed, &crashed_copy).unwrap();
    let store = KvStore::open(&crashed, &opts(FIXED)).unwrap();
    assert!(
        !store.recovery().after_clean_close,
        "a crash image is checked"
    );
    assert_eq!(store.len(), 2);
    drop(store);
    // An open whose recovery fails (a damaged bitset) must not mark the store clean on its
    // way out: the next open must check everything again.
    {
        let region = PmemRegion::open(&crashed_copy, &RegionOptions::default()).unwrap();
        let word = region.atomic_u64(HEADER_LEN).unwrap();
        word.store(u64::MAX, std::sync::atomic::Ordering::SeqCst);
        region.persist(HEADER_LEN, 8).unwrap();
    }
    assert!(KvStore::open(&crashed_copy, &opts(FIXED)).is_err());
    let region = PmemRegion::open(&crashed_copy, &RegionOptions::default()).unwrap();
    let mark = region
        .atomic_u64(layout::header::CLEAN as u64)
        .unwrap()
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(mark, 0, "a failed open marked the store clean");
}
