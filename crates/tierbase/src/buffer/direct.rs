//! NVM direct, the three-tier paper's in-place design (after Arulraj et al.): the tree's pages
//! live in persistent memory and are searched and changed where they lie, with no DRAM copy
//! and no redo log. A batch is atomic through an undo log in the region's head: before a line
//! of a page is first changed in a batch, its old bytes are appended to the log and persisted;
//! at commit the batch's changed lines are persisted, then the log's epoch (one failure-atomic
//! word) moves on, which retires the batch's entries. Restart restores the lines of the one
//! batch whose epoch never moved ([`recover`]). A batch that fails (an error half-way, or a
//! persist of the undo log that fails) is rolled back in place at once from DRAM copies of the
//! same old bytes ([`DirectPages::take_saved`]), so that its half-made change does not stay in
//! the pages: a failed persist cannot stop the change that follows it, which may reach NVM
//! (cache eviction, the kernel's write-back of a file mapping) before the rollback does.
//!
//! Owns: the undo log's bytes (docs/FORMAT-btree.md, "NVM direct"), saving before-images,
//! the commit's persist order and the restart's undo. Must not touch: frames, latches and the
//! page table (`buffer`), or what the pages hold (`btree`).
//!
//! Region layout: bytes `0..head` are the undo log, page `p` is at `head + p * page_size`.

use parking_lot::Mutex;

use crate::device::{Counter, PagedRegion, PmemRegion};
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"TBUNDO01";
const ENTRY_MAGIC: &[u8; 4] = b"UNDO";
const LINE: usize = 64;
/// Bytes of the log's header and of an entry's head.
const HEAD: usize = 64;
/// Offset of the committed epoch (a whole 8-byte word).
const EPOCH_AT: u64 = 8;

/// Counters of the in-place design (always on).
#[derive(Debug, Default)]
pub struct DirectCounters {
    /// Undo entries persisted (one per run of lines first changed in a batch).
    pub undo_entries: Counter,
    /// Lines saved in undo entries.
    pub undo_lines: Counter,
    /// Batches committed.
    pub commits: Counter,
    /// Page lines persisted at commits.
    pub lines_persisted: Counter,
    /// Emulated NVM reads charged for point reads made in place (emulated regions only).
    pub charged_reads: Counter,
}

#[derive(Debug)]
struct UndoState {
    /// Where the next entry goes.
    at: u64,
    /// The last committed batch's epoch; the running batch's entries carry the next one.
    epoch: u64,
    /// Pages changed in the running batch (indexes, in the order first changed).
    touched: Vec<u32>,
    /// Why saving failed in the running batch (its commit fails, and the store with it).
    failure: Option<String>,
    /// An entry being built.
    scratch: Vec<u8>,
    /// DRAM copies of the running batch's saved lines, for a rollback in place: (page, first
    /// line, lines) per save, and their bytes one after another.
    saved: Vec<(u32, u32, u32)>,
    saved_bytes: Vec<u8>,
}

/// The pages of an NVM-direct store and their undo log. See the module docs.
#[derive(Debug)]
pub struct DirectPages {
    region: PagedRegion,
    state: Mutex<UndoState>,
    /// Counters.
    pub counters: DirectCounters,
}

fn corrupt(region: &PmemRegion, detail: String) -> Error {
    Error::corrupt(region.path(), detail)
}

/// The log head's checksummed fields: magic, page size, head length.
fn header_crc(h: &[u8]) -> [u8; 4] {
    let mut c = crc32c::crc32c(&h[..8]);
    c = crc32c::crc32c_append(c, &h[16..32]);
    c.to_le_bytes()
}

/// An entry's checksum: its head from byte 8 on, then its lines.
fn entry_crc(e: &[u8]) -> [u8; 4] {
    crc32c::crc32c(&e[8..]).to_le_bytes()
}

/// Head length for a region of `len` bytes and pages of `page_size`: an eighth of the region,
/// at least 64 pages' worth (a single change of the tallest tree fits) and at most 16 MiB or
/// 64 pages, in whole 4 KiB blocks.
pub fn head_len_for(len: u64, page_size: usize) -> u64 {
    let floor = 64 * page_size as u64;
    (len / 8).clamp(floor, (16 << 20).max(floor)) / 4096 * 4096
}

/// Writes an empty undo log into the head of `region` (a new store) and persists it.
pub fn format(region: &PmemRegion, page_size: usize, head: u64) -> Result<()> {
    let mut h = [0u8; HEAD];
    h[..8].copy_from_slice(MAGIC);
    h[16..20].copy_from_slice(&(page_size as u32).to_le_bytes());
    h[24..32].copy_from_slice(&head.to_le_bytes());
    let crc = header_crc(&h);
    h[32..36].copy_from_slice(&crc);
    region.write(0, &h)?;
    // The first entry slot holds no entry of epoch 1.
    region.write(HEAD as u64, &[0u8; HEAD])?;
    region.persist(0, 2 * HEAD)
}

/// Where the header holds the id of the store the region belongs to, and its check.
const OWNER_AT: usize = 40;
const OWNER_CHECK_AT: usize = 48;

/// What a region's undo log header says of the store it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The owner field was never written (all zero): a region from before ids.
    Untied,
    /// The store's id.
    Store(u64),
    /// The field fails its check: damaged.
    Damaged,
}

/// The store `region` belongs to, from its undo log's header.
pub fn owner(region: &PmemRegion) -> Result<Owner> {
    let mut h = [0u8; HEAD];
    region.read(0, &mut h)?;
    let field = &h[OWNER_AT..OWNER_CHECK_AT + 4];
    if field.iter().all(|&b| b == 0) {
        return Ok(Owner::Untied);
    }
    let id = u64::from_le_bytes(h[OWNER_AT..OWNER_CHECK_AT].try_into().expect("8"));
    let check = crc32c::crc32c(&h[OWNER_AT..OWNER_CHECK_AT]).to_le_bytes();
    Ok(
        if id != 0 && h[OWNER_CHECK_AT..OWNER_CHECK_AT + 4] == check {
            Owner::Store(id)
        } else {
            Owner::Damaged
        },
    )
}

/// Writes the id of the store `region` belongs to into its header, persisted.
pub fn tie(region: &PmemRegion, owner: u64) -> Result<()> {
    let mut b = [0u8; 12];
    b[..8].copy_from_slice(&owner.to_le_bytes());
    let check = crc32c::crc32c(&b[..8]).to_le_bytes();
    b[8..].copy_from_slice(&check);
    region.write(OWNER_AT as u64, &b)?;
    region.persist(OWNER_AT as u64, b.len())
}

/// What a restart's undo did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Undone {
    /// Bytes of the head (where pages start).
    pub head: u64,
    /// Lines restored from the log (0: no batch was in flight).
    pub lines: u64,
}

/// Restores the lines the batch in flight at a crash had changed (the entries carrying the
/// epoch after the committed one), persists them, and retires those entries. Run before the
/// region is split into pages.
pub fn recover(region: &PmemRegion, page_size: usize) -> Result<Undone> {
    let mut h = [0u8; HEAD];
    region.read(0, &mut h)?;
    if &h[..8] != MAGIC {
        return Err(corrupt(
            region,
            "not an NVM-direct store's region: its undo log header is missing (bad magic)".into(),
        ));
    }
    if h[32..36] != header_crc(&h) {
        return Err(corrupt(
            region,
            "the undo log header fails its checksum".into(),
        ));
    }
    let ps = u32::from_le_bytes(h[16..20].try_into().expect("4")) as usize;
    let head = u64::from_le_bytes(h[24..32].try_into().expect("8"));
    if ps != page_size {
        return Err(corrupt(
            region,
            format!("undo log made for {ps}-byte pages, the store has {page_size}-byte pages"),
        ));
    }
    if head < 2 * HEAD as u64 || !head.is_multiple_of(4096) || head > region.len() {
        return Err(corrupt(
            region,
            format!(
                "undo log length {head} does not fit the {}-byte region",
                region.len()
            ),
        ));
    }
    let epoch = region.read_u64(EPOCH_AT)?;
    let running = epoch.wrapping_add(1);
    let lines_per_page = (page_size / LINE) as u64;
    let mut entries = Vec::new();
    let mut at = HEAD as u64;
    let mut e = [0u8; HEAD];
    while at + HEAD as u64 <= head {
        region.read(at, &mut e)?;
        let word = |r: std::ops::Range<usize>| u64::from_le_bytes(e[r].try_into().expect("8"));
        let half = |r: std::ops::Range<usize>| u32::from_le_bytes(e[r].try_into().expect("4"));
        let (pid, first, n) = (
            word(16..24),
            u64::from(half(24..28)),
            u64::from(half(28..32)),
        );
        let len = HEAD as u64 + n * LINE as u64;
        let page_end = pid
            .checked_add(1)
            .and_then(|p| p.checked_mul(page_size as u64))
            .and_then(|b| b.checked_add(head));
        if &e[..4] != ENTRY_MAGIC
            || word(8..16) != running
            || n == 0
            || first + n > lines_per_page
            || at + len > head
            || page_end.is_none_or(|end| end > region.len())
        {
            break; // the end of the running batch's entries (or a torn last one)
        }
        let mut whole = vec![0u8; len as usize];
        region.read(at, &mut whole)?;
        if whole[4..8] != entry_crc(&whole) {
            break; // torn: its lines were not changed yet (a change waits for its entry)
        }
        entries.push((head + pid * page_size as u64 + first * LINE as u64, whole));
        at += len;
    }
    let mut lines = 0;
    for (to, whole) in entries.iter().rev() {
        region.write(*to, &whole[HEAD..])?;
        region.flush(*to, whole.len() - HEAD)?;
        lines += ((whole.len() - HEAD) / LINE) as u64;
    }
    if !entries.is_empty() {
        region.drain();
        // The restored batch's epoch is used up: its entries no longer match the next one.
        region
            .atomic_u64(EPOCH_AT)?
            .store(running.to_le(), std::sync::atomic::Ordering::Release);
        region.persist(EPOCH_AT, 8)?;
    }
    Ok(Undone { head, lines })
}

impl DirectPages {
    /// The undo log of `region` (recovered and split into pages by the caller).
    pub fn new(region: PagedRegion) -> Result<Self> {
        let mut w = [0u8; 8];
        region.read(EPOCH_AT, &mut w)?;
        Ok(DirectPages {
            region,
            state: Mutex::new(UndoState {
                at: HEAD as u64,
                epoch: u64::from_le_bytes(w),
                touched: Vec::new(),
                failure: None,
                scratch: Vec::new(),
                saved: Vec::new(),
                saved_bytes: Vec::new(),
            }),
            counters: DirectCounters::default(),
        })
    }

    /// The region.
    pub fn region(&self) -> &PagedRegion {
        &self.region
    }

    /// Charges one emulated read of `bytes` of a page, read in place.
    pub fn charge_read(&self, bytes: usize) {
        self.counters.charged_reads.incr();
        self.region.charge_read(bytes);
    }

    /// Saves lines `first..first + n` of page `pid` (`page`: its bytes, not yet changed)
    /// and persists them before returning, so the change that follows can reach media at any
    /// moment. A failure is kept: the batch's commit reports it (and the pool rolls the batch
    /// back from the DRAM copy every save also keeps).
    pub fn save(&self, pid: u32, first: usize, n: usize, page: &[u8]) {
        let mut st = self.state.lock();
        if st.touched.last() != Some(&pid) && !st.touched.contains(&pid) {
            st.touched.push(pid);
        }
        let lines = &page[first * LINE..(first + n) * LINE];
        st.saved.push((pid, first as u32, n as u32));
        st.saved_bytes.extend_from_slice(lines);
        if st.failure.is_some() {
            return;
        }
        let len = HEAD + n * LINE;
        // A zeroed head follows the entry, persisted with it, so that restart never reads old
        // bytes behind the running batch's last entry (an earlier batch's lines) as an entry.
        let end = len + HEAD;
        if st.at + end as u64 > self.region.head_len() {
            st.failure = Some(format!(
                "the batch changes more lines than the {}-byte undo log holds: split it",
                self.region.head_len()
            ));
            return;
        }
        let epoch = st.epoch.wrapping_add(1);
        let mut e = std::mem::take(&mut st.scratch);
        e.clear();
        e.resize(HEAD, 0);
        e[..4].copy_from_slice(ENTRY_MAGIC);
        e[8..16].copy_from_slice(&epoch.to_le_bytes());
        e[16..24].copy_from_slice(&u64::from(pid).to_le_bytes());
        e[24..28].copy_from_slice(&(first as u32).to_le_bytes());
        e[28..32].copy_from_slice(&(n as u32).to_le_bytes());
        e.extend_from_slice(lines);
        let crc = entry_crc(&e);
        e[4..8].copy_from_slice(&crc);
        e.resize(end, 0);
        let at = st.at;
        match self
            .region
            .write(at, &e)
            .and_then(|()| self.region.persist(at, end))
        {
            Ok(()) => {
                st.at += len as u64;
                self.counters.undo_entries.incr();
                self.counters.undo_lines.add(n as u64);
            }
            Err(err) => st.failure = Some(format!("persisting the undo log: {err}")),
        }
        st.scratch = e;
    }

    /// The pages changed in the running batch, or why the batch cannot commit.
    pub(super) fn touched(&self) -> Result<Vec<u32>> {
        let mut st = self.state.lock();
        if let Some(f) = &st.failure {
            return Err(Error::Io {
                op: "NVM-direct undo log",
                path: self.region.info().path.clone(),
                source: std::io::Error::other(f.clone()),
            });
        }
        Ok(std::mem::take(&mut st.touched))
    }

    /// The running batch's saved lines (page, first line, their old bytes), oldest first,
    /// forgetting them and the batch: for a rollback in place after a failure.
    pub(super) fn take_saved(&self) -> Vec<(u32, usize, Vec<u8>)> {
        let mut st = self.state.lock();
        st.touched.clear();
        st.at = HEAD as u64; // the batch's entries stay for restart, overwritten by the next
        let bytes = std::mem::take(&mut st.saved_bytes);
        let mut at = 0;
        std::mem::take(&mut st.saved)
            .into_iter()
            .map(|(pid, first, n)| {
                let len = n as usize * LINE;
                let lines = bytes[at..at + len].to_vec();
                at += len;
                (pid, first as usize, lines)
            })
            .collect()
    }

    /// Ends a batch whose changed lines are flushed: a fence, then the epoch moves on and is
    /// persisted (the commit point), and the log starts over.
    /// If the epoch's persist fails, the word is put back and the DRAM copies kept: the
    /// caller rolls the batch back ([`super::BufferPool::direct_abort`]); its lines are
    /// durable already, so whichever epoch reached media, restart finds it whole or undoes it.
    pub(super) fn commit(&self, lines: u64) -> Result<()> {
        let mut st = self.state.lock();
        self.region.drain();
        let next = st.epoch.wrapping_add(1);
        let word = self.region.atomic_u64(EPOCH_AT)?;
        word.store(next.to_le(), std::sync::atomic::Ordering::Release);
        if let Err(e) = self.region.persist(EPOCH_AT, 8) {
            word.store(st.epoch.to_le(), std::sync::atomic::Ordering::Release);
            return Err(e);
        }
        st.epoch = next;
        st.at = HEAD as u64;
        st.saved.clear();
        st.saved_bytes.clear();
        if st.saved_bytes.capacity() > 1 << 20 {
            // One large batch does not keep its copies' DRAM for good.
            st.saved_bytes = Vec::new();
        }
        self.counters.commits.incr();
        self.counters.lines_persisted.add(lines);
        Ok(())
    }

    /// Bytes of undo log the running batch has used.
    pub fn used(&self) -> u64 {
        self.state.lock().at - HEAD as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CrashSimConfig, RegionOptions};

    const PS: usize = 4096;
    const HEAD: u64 = 16 * 4096;

    fn reboot(img: &[u8]) -> PmemRegion {
        PmemRegion::from_image(img, CrashSimConfig::default(), &RegionOptions::default()).unwrap()
    }

    /// A formatted region of 4 pages whose page 2 holds `old` in every byte, durably.
    fn formatted(old: u8) -> Vec<u8> {
        let r = PmemRegion::simulated(
            HEAD + 4 * PS as u64,
            CrashSimConfig::default(),
            &RegionOptions::default(),
        )
        .unwrap();
        format(&r, PS, HEAD).unwrap();
        r.write(HEAD + 2 * PS as u64, &[old; PS]).unwrap();
        r.persist(HEAD + 2 * PS as u64, PS).unwrap();
        r.power_loss().unwrap()
    }

    #[test]
    fn a_batch_cut_before_its_commit_is_undone_and_its_entries_retired() {
        let r = reboot(&formatted(1));
        assert_eq!(
            recover(&r, PS).unwrap(),
            Undone {
                head: HEAD,
                lines: 0
            }
        );
        let (paged, mut pages) = r.into_paged(HEAD, PS).unwrap();
        let d = DirectPages::new(paged).unwrap();
        // Lines 3..5 and 40 of page 2 saved, then changed in place and flushed (they reach
        // media), but the batch never commits.
        d.save(2, 3, 2, &pages[2]);
        d.save(2, 40, 1, &pages[2]);
        pages[2][3 * 64..5 * 64].fill(7);
        pages[2][40 * 64] = 7;
        d.region()
            .flush_lines(&pages[2], &[1 << 3 | 1 << 4 | 1 << 40])
            .unwrap();
        d.region().drain();
        assert_eq!(d.used(), 64 * 2 + 64 * 3);
        let img = d.region().power_loss().unwrap();
        let page = |img: &[u8]| img[(HEAD as usize + 2 * PS)..(HEAD as usize + 3 * PS)].to_vec();
        assert_eq!(page(&img)[3 * 64], 7, "the change reached media");
        let r = reboot(&img);
        assert_eq!(
            recover(&r, PS).unwrap(),
            Undone {
                head: HEAD,
                lines: 3
            }
        );
        let img = r.power_loss().unwrap();
        assert_eq!(page(&img), vec![1; PS], "restored");
        // Retired: a second restart restores nothing (the entries' epoch is used up).
        assert_eq!(recover(&reboot(&img), PS).unwrap().lines, 0);
    }

    #[test]
    fn a_committed_batch_stays() {
        let r = reboot(&formatted(1));
        recover(&r, PS).unwrap();
        let (paged, mut pages) = r.into_paged(HEAD, PS).unwrap();
        let d = DirectPages::new(paged).unwrap();
        d.save(2, 0, 1, &pages[2]);
        pages[2][..64].fill(5);
        assert_eq!(d.touched().unwrap(), vec![2]);
        d.region().flush_lines(&pages[2], &[1]).unwrap();
        d.commit(1).unwrap();
        let img = d.region().power_loss().unwrap();
        let r = reboot(&img);
        assert_eq!(recover(&r, PS).unwrap().lines, 0);
        assert_eq!(r.power_loss().unwrap()[HEAD as usize + 2 * PS], 5);
    }

    #[test]
    fn a_batch_beyond_the_log_fails_its_commit() {
        let r = reboot(&formatted(1));
        let (paged, pages) = r.into_paged(HEAD, PS).unwrap();
        let d = DirectPages::new(paged).unwrap();
        // 64 lines a save: a whole page is 4160 bytes of log, 16 of them do not fit 64 KiB.
        for _ in 0..16 {
            d.save(2, 0, 64, &pages[2]);
        }
        let e = d.touched().unwrap_err();
        assert!(e.to_string().contains("split it"), "{e}");
    }
}
