//! The persistent-memory tier of the buffer manager: whole pages in slots of a
//! [`PmemRegion`], between the DRAM frames and the page file (the NVM buffer of the
//! three-tier paper, page-grained; docs/FORMAT-btree.md, "The NVM tier file").
//!
//! Owns: the slots and their directory (which page each holds), Clock over the slots, the
//! admission set, each slot's "newer than the page file" flag, and spilling NVM victims to
//! the page file (through the writer the pool hands in, which also syncs). Must not touch:
//! DRAM frames, the page file itself, the write-ahead rule (the pool applies it before any
//! page reaches this tier) or what is inside a page.
//!
//! Rules it keeps:
//! - **A slot holds the newest durable copy of its page.** Every write-back of a page that
//!   has a slot goes to the slot ([`NvmTier::write_resident`]), never to the page file, so
//!   restart may take a slot over the page file's copy unconditionally.
//! - **Install**: a page's bytes are persisted in a free slot before the directory entry
//!   naming it is (one 8-byte word, failure-atomic); until then the slot is free to restart.
//! - **Spill**: an NVM victim newer than the page file is written there and synced before its
//!   directory entry is cleared.
//! - An in-place write may be torn by a power loss like a page file write: the page's
//!   checksum tells, and restart repairs it from the log's page image as for the page file.
//! - **Changed lines**: a write-back may name the lines changed since its frame matched the
//!   slot ([`ChangedSince`]); only those and the header line are written, and only while the
//!   slot is in the same [`Tenancy`] (a slot's generation changes whenever it is freed), else
//!   the whole page is.
//! - Admission (paper §1.4 E): a page leaving DRAM without a slot gets one only if it was
//!   refused recently (it is in the bounded admission set), or always with
//!   [`Admission::All`] (the "basic NVM buffer manager" design, NVM holding everything).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockWriteGuard};

use crate::device::{AlignedBuf, Counter, PmemRegion};
use crate::error::{Error, Result};

/// First bytes of a formatted tier.
pub const NVM_MAGIC: &[u8; 8] = b"TBNVMPG1";
const NVM_VERSION: u32 = 1;
/// Header bytes at the start of the region's data area (the directory follows).
const HEADER_LEN: u64 = 4096;
/// The tie to the tier's store, 16 bytes in the header line after the header proper: the
/// store's id (an 8-byte word, written once), then the checkpoint word (the sequence number
/// of the superblock written next or last, low 32 bits, with their complement in the high 32
/// bits: one aligned word, so it reaches media whole and a damaged one shows).
const TIE_OFF: u64 = 32;
/// Bytes per directory entry: page id + 1, 0 for a free slot.
const ENTRY_LEN: u64 = 8;
/// NVM victims chosen together when the tier is full (their spills share one sync).
const EVICT_BATCH: usize = 8;
const NO_PAGE: u64 = u64::MAX;
/// Bytes of a cache line, the unit of [`NvmTier::read_lines`].
pub const LINE: usize = 64;

/// Which pages leaving DRAM enter the NVM tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Every page (NVM as the pages' home; the page file receives only NVM victims).
    All,
    /// Pages refused within the last `n` refusals (the paper's admission set; `n` entries).
    RecentlyRefused(usize),
}

/// The tier's counters (always on).
#[derive(Debug, Default)]
pub struct NvmCounters {
    /// DRAM misses served from NVM.
    pub hits: Counter,
    /// Pages given a slot when they left DRAM.
    pub admissions: Counter,
    /// Pages refused a slot (they went to the page file, or nowhere if clean).
    pub refusals: Counter,
    /// Page writes into NVM (admissions and in-place write-backs).
    pub page_writes: Counter,
    /// Slots freed by NVM Clock.
    pub evictions: Counter,
    /// Victims newer than the page file, written there before their slot was freed.
    pub spills: Counter,
    /// Syncs of the page file for spills.
    pub spill_syncs: Counter,
    /// 64-byte lines copied from slots into DRAM (every line of a page a whole-page load
    /// brings, or the lines a cache-line-grained frame touches).
    pub lines_loaded: Counter,
    /// DRAM misses served from NVM a cache line at a time ([`NvmTier::pin_lines`]; also
    /// counted in `hits`).
    pub line_loads: Counter,
    /// 64-byte lines written into slots (every line of a whole-page write; the changed
    /// lines and the header line of a write-back of changed lines).
    pub lines_written: Counter,
    /// Write-backs that wrote only a page's changed lines ([`NvmTier::write_resident`]).
    pub line_write_backs: Counter,
    /// Pages given a free slot at a clean shutdown ([`NvmTier::admit_if_free`]; also
    /// counted in `admissions`).
    pub handed_over: Counter,
}

/// A slot as held by one page from the time it was given the slot until it lost it: a DRAM
/// frame that copied its page from the slot (or wrote it there) may write back only the
/// lines it changed since, if the slot is still in the same tenancy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tenancy {
    slot: u32,
    generation: u32,
}

impl Tenancy {
    /// The tenancy packed in a word, for an atomic field (`u64::MAX` is never one).
    pub fn pack(self) -> u64 {
        u64::from(self.slot) << 32 | u64::from(self.generation)
    }
    /// A word from [`Tenancy::pack`], or `None` for `u64::MAX`.
    pub fn unpack(word: u64) -> Option<Tenancy> {
        (word != u64::MAX).then_some(Tenancy {
            slot: (word >> 32) as u32,
            generation: word as u32,
        })
    }
}

/// The lines of a page that changed since its frame last matched its slot, for
/// [`NvmTier::write_resident`]: bit `l % 64` of word `l / 64` for line `l`.
#[derive(Clone, Copy, Debug)]
pub struct ChangedSince<'a> {
    /// The slot tenancy the frame matched.
    pub tenancy: Tenancy,
    /// The changed lines.
    pub lines: &'a [u64],
    /// The lines the frame holds, if some are missing (a page changed in place by lines):
    /// then only the changed lines can be written, and the checksum is updated from them
    /// ([`checksum_after`]) instead of computed over a page that is not all there.
    pub resident: Option<&'a [u64]>,
    /// Check first that no other (resident) line differs from the slot, and that the
    /// checksum updated from the changed lines equals the page's (a debug mode for tests).
    pub verify: bool,
}

/// The checksum of a slot's page after the lines marked in `changed` are replaced: `old` is
/// what the slot holds of those lines now (its checksum in `old_sum`), `new` the page with
/// the new lines (other lines of `old` and `new` are not read).
///
/// CRC-32C is affine in its input: for inputs of one length, `crc(a) ^ crc(b)` is the raw
/// CRC (zero start, no final inversion) of `a ^ b`. So the new checksum is the old one
/// XOR the raw CRC of the page's difference, which is zero outside the changed lines:
/// computing it feeds zeros for those, and reads no line that did not change. (A page's
/// checksum covers bytes 4.. of the page, see [`super::PAGE_PREFIX`].)
pub fn checksum_after(
    old_sum: u32,
    page_len: usize,
    changed: &[u64],
    old: &dyn Fn(usize) -> Result<[u8; LINE]>,
    new: &[u8],
) -> Result<u32> {
    static ZEROS: [u8; 4096] = [0; 4096];
    // crc32c_append's running value is the raw register inverted: a raw start of 0 is !0.
    let mut crc = !0u32;
    let feed_zeros = |crc: &mut u32, mut n: usize| {
        while n > 0 {
            let k = n.min(ZEROS.len());
            *crc = crc32c::crc32c_append(*crc, &ZEROS[..k]);
            n -= k;
        }
    };
    let mut at = 4;
    for l in 0..page_len / LINE {
        if changed[l / 64] & (1 << (l % 64)) == 0 {
            continue;
        }
        let start = (l * LINE).max(4);
        feed_zeros(&mut crc, start - at);
        let before = old(l)?;
        let mut diff = [0u8; LINE];
        for (k, d) in diff.iter_mut().enumerate() {
            *d = before[k] ^ new[l * LINE + k];
        }
        crc = crc32c::crc32c_append(crc, &diff[start - l * LINE..]);
        at = (l + 1) * LINE;
    }
    feed_zeros(&mut crc, page_len - at);
    Ok(old_sum ^ !crc)
}

/// Writes pages `(page id, sealed bytes)` to the page file and makes them durable there.
pub type SpillFn<'a> = &'a dyn Fn(&mut [(u64, AlignedBuf)]) -> Result<()>;

#[derive(Debug)]
struct State {
    map: HashMap<u64, u32>,
    pid_of: Vec<u64>,
    newer: Vec<bool>,
    /// The slot's bytes were written in this run, or passed the pool's checks since: loads
    /// need not verify them again (only a crash tears a slot).
    trusted: Vec<bool>,
    /// DRAM frames holding the slot's page a cache line at a time ([`NvmTier::pin_lines`]):
    /// they read lines from the slot later, so it neither changes hands nor is written.
    pins: Vec<u32>,
    /// Each slot's tenancy number: changes whenever the slot is freed. (It wraps after 2^32
    /// frees of one slot; a frame still naming the old tenancy then, never written back
    /// meanwhile, would match again — far beyond any frame's stay in DRAM.)
    generation: Vec<u32>,
    referenced: Vec<bool>,
    free: Vec<u32>,
    hand: usize,
    /// Admission set: page id → its refusal number; `order` holds (page id, number), oldest
    /// first, and an entry leaves the set only when its number still matches.
    refused: HashMap<u64, u64>,
    order: VecDeque<(u64, u64)>,
    refusal_seq: u64,
}

impl State {
    /// Slot `slot`'s current tenancy.
    fn tenancy(&self, slot: u32) -> Tenancy {
        Tenancy {
            slot,
            generation: self.generation[slot as usize],
        }
    }
}

/// The NVM tier. See the module docs.
pub struct NvmTier {
    region: PmemRegion,
    page_size: usize,
    slots: u32,
    data_off: u64,
    admission: Admission,
    /// Held shared while a slot's bytes are copied out and exclusively while they are
    /// written or the slot changes hands; taken after `state` (or without it), never before.
    slot_latches: Box<[RwLock<()>]>,
    /// Wear: writes into each slot (each writes the slot's header line), and writes of each
    /// 64-byte directory line (8 entries), in this run.
    slot_writes: Box<[AtomicU64]>,
    dir_line_writes: Box<[AtomicU64]>,
    state: Mutex<State>,
    /// Counters.
    pub counters: NvmCounters,
    /// Pages found in the directory when the tier was opened.
    pub found_at_open: u64,
    /// The store id the header names (0: none, a tier formatted before ties existed).
    store_id: AtomicU64,
}

/// What a store expects of its tier's tie ([`NvmTier::open_in_store`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct StoreTie {
    /// The store's id from its superblock; `None` for a superblock written before ties (or
    /// a tier opened without a store): the tier is then not checked against it.
    pub id: Option<u64>,
    /// The sequence number of the store's newest superblock.
    pub seq: u64,
    /// The store's superblock says it has no tier: one is being added (`nvm_bytes` given at
    /// an open), so a blank header is a new tier to format, not a wiped one, whatever `seq`.
    pub adding: bool,
}

/// The checkpoint word for superblock sequence `seq`.
fn checkpoint_word(seq: u64) -> u64 {
    let low = seq as u32;
    u64::from(low) | (u64::from(!low) << 32)
}

/// The superblock sequence (low 32 bits) a checkpoint word names; `None` if it is damaged.
fn checkpoint_of(word: u64) -> Option<u32> {
    let low = word as u32;
    ((word >> 32) as u32 == !low).then_some(low)
}

impl std::fmt::Debug for NvmTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmTier")
            .field("slots", &self.slots)
            .field("page_size", &self.page_size)
            .finish()
    }
}

/// The smallest region that holds one page of `page_size` (header, directory, page).
pub fn smallest_tier(page_size: usize) -> u64 {
    HEADER_LEN + 4096 + page_size as u64
}

/// The refusal of a tier of `len` bytes too small for one page.
pub fn too_small(len: u64, page_size: usize) -> Error {
    Error::InvalidArgument(format!(
        "NVM tier of {len} bytes holds no {page_size}-byte page (needs at least {})",
        smallest_tier(page_size)
    ))
}

/// (slots, data offset) of a region of `len` bytes holding pages of `page_size`.
fn geometry(len: u64, page_size: usize) -> (u32, u64) {
    let ps = page_size as u64;
    let mut slots = len.saturating_sub(HEADER_LEN) / (ps + ENTRY_LEN);
    loop {
        let data_off = (HEADER_LEN + slots * ENTRY_LEN).next_multiple_of(4096);
        if slots == 0 || data_off + slots * ps <= len {
            return (slots.min(u32::MAX as u64) as u32, data_off);
        }
        slots -= 1;
    }
}

fn header(page_size: usize, slots: u32) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[..8].copy_from_slice(NVM_MAGIC);
    h[8..12].copy_from_slice(&NVM_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&(page_size as u32).to_le_bytes());
    h[16..24].copy_from_slice(&u64::from(slots).to_le_bytes());
    let c = crc32c::crc32c(&h[..24]);
    h[24..28].copy_from_slice(&c.to_le_bytes());
    h
}

/// Writes and persists the tie words (one line, one persist: a crash between the two words
/// matters only while the id is being set, i.e. under a superblock without one, which does
/// not check the tie).
fn write_tie(region: &PmemRegion, id: u64, seq: u64) -> Result<()> {
    let mut tie = [0u8; 16];
    tie[..8].copy_from_slice(&id.to_le_bytes());
    tie[8..].copy_from_slice(&checkpoint_word(seq).to_le_bytes());
    region.write(TIE_OFF, &tie)?;
    region.persist(TIE_OFF, tie.len())
}

/// The check of a tier's tie (`tier_id`, checkpoint `word`) against store `id` at superblock
/// sequence `seq`; the error is the detail of a `Corrupt`.
fn check_tie(id: u64, seq: u64, tier_id: u64, word: u64) -> std::result::Result<(), String> {
    const RESTORE: &str = "restore the tier file written with the store (a directory's files \
                           are restored together)";
    if tier_id != id {
        return Err(if tier_id == 0 {
            format!(
                "the NVM tier names no store, and this store ({id:016x}) ties its tier to \
                 itself: it is another store's tier or an older copy of this one's, whose \
                 pages would be served as the store's newest; {RESTORE}"
            )
        } else {
            format!(
                "the NVM tier belongs to another store ({tier_id:016x}, not {id:016x}): its \
                 pages would be served as this store's; {RESTORE}"
            )
        });
    }
    let store_at = seq as u32;
    match checkpoint_of(word) {
        None => Err(format!(
            "the NVM tier's checkpoint word is damaged ({word:016x}); {RESTORE}"
        )),
        Some(t) if t == store_at || t == store_at.wrapping_add(1) => Ok(()),
        Some(t) => Err(format!(
            "the NVM tier is from checkpoint {t} and the store's superblock from checkpoint \
             {store_at}: {}",
            if t.wrapping_sub(store_at) < 1 << 31 {
                "the page file is older than the tier (an older copy of pages.tb?); restore \
                 the page file and log files written with the tier (a directory's files are \
                 restored together)"
            } else {
                "an older copy of the tier, whose pages would bring back older values; \
                 restore the tier file written with the store (a directory's files are \
                 restored together)"
            }
        )),
    }
}

impl NvmTier {
    /// The tier in `region` for pages of `page_size` bytes: formats an empty (all-zero
    /// header) region, else validates the header and rebuilds the page → slot map from the
    /// directory (restart's NVM scan). `admission` `None`: an admission set of as many
    /// entries as the tier has slots (ARC's ghost list B1 is as long as the cache).
    pub fn open(
        region: PmemRegion,
        page_size: usize,
        admission: Option<Admission>,
    ) -> Result<Self> {
        Self::open_in_store(region, page_size, admission, StoreTie::default())
    }

    /// [`NvmTier::open`] for the store `store` describes.
    ///
    /// A store whose superblock is newer than the one a create writes (sequence 1) has used
    /// its tier: a header still unformatted is then a wiped or replaced file — the newest
    /// copies of pages may have been in it — and refused instead of formatted as a new, empty
    /// tier (a wiped tier opened as an empty store, and the next writes went on over the page
    /// file's old pages).
    ///
    /// A store with an id refuses a tier naming another store, or none, and one whose
    /// checkpoint word is not the superblock's sequence or the next (written before the
    /// superblock, [`NvmTier::tie`]): another store's tier, or an older or newer copy of its
    /// own, would be taken as the store's newest pages (a user's test: 753 of 3,000 keys
    /// served from another store's tier, and `verify` found nothing wrong).
    pub fn open_in_store(
        region: PmemRegion,
        page_size: usize,
        admission: Option<Admission>,
        store: StoreTie,
    ) -> Result<Self> {
        let formatted = store.seq > 1 && !store.adding;
        let path = region.path().map(std::path::Path::to_path_buf);
        let corrupt = |detail: String| Error::corrupt(path.as_deref(), detail);
        let len = region.len();
        let mut h = [0u8; 32];
        if len >= HEADER_LEN {
            region.read(0, &mut h)?;
        }
        let (fit, _) = geometry(len, page_size);
        let fresh = header(page_size, fit);
        // Empty, or a format cut short by a crash (each 8-byte word, the unit that reaches
        // media whole, either still zero or already what this format writes; no page is
        // installed before the header is durable).
        let unformatted = len >= HEADER_LEN
            && h.chunks(8)
                .zip(fresh.chunks(8))
                .all(|(w, f)| w.iter().all(|&b| b == 0) || w == f);
        // (A whole header reads as "unformatted" too: formatting it again changes nothing.)
        if unformatted && formatted && h[..] != fresh[..] {
            return Err(corrupt(
                "the NVM tier's header is blank, but the store has used the tier: the file was \
                 wiped or replaced, and the newest copies of its pages may be lost (restore the \
                 store's own tier file)"
                    .into(),
            ));
        }
        let slots = if unformatted {
            let slots = fit;
            if slots == 0 {
                return Err(too_small(len, page_size));
            }
            // The directory of a new region is zero already; the header makes it a tier. The
            // tie goes first, so a whole header always has its tie behind it.
            if let Some(id) = store.id
                && h[..] != fresh[..]
            {
                write_tie(&region, id, store.seq)?;
            }
            region.write(0, &fresh)?;
            region.persist(0, 32)?;
            slots
        } else {
            if len < HEADER_LEN || &h[..8] != NVM_MAGIC {
                return Err(corrupt("not a tierbase NVM tier (bad magic)".into()));
            }
            if crc32c::crc32c(&h[..24]).to_le_bytes() != h[24..28] {
                return Err(corrupt("NVM tier header fails its checksum".into()));
            }
            let version = u32::from_le_bytes(h[8..12].try_into().expect("4"));
            if version != NVM_VERSION {
                return Err(Error::UnsupportedVersion {
                    path: path.clone(),
                    what: "NVM tier",
                    found: version,
                    supported: NVM_VERSION,
                });
            }
            let ps = u32::from_le_bytes(h[12..16].try_into().expect("4")) as usize;
            if ps != page_size {
                return Err(corrupt(format!(
                    "NVM tier holds {ps}-byte pages, the store uses {page_size}"
                )));
            }
            let slots = u64::from_le_bytes(h[16..24].try_into().expect("8"));
            if slots == 0 || slots > u64::from(fit) {
                return Err(corrupt(format!(
                    "NVM tier header claims {slots} slots; {len} bytes hold {fit}"
                )));
            }
            slots as u32
        };
        let mut tie = [0u8; 16];
        if len >= HEADER_LEN {
            region.read(TIE_OFF, &mut tie)?;
        }
        let tier_id = u64::from_le_bytes(tie[..8].try_into().expect("8"));
        let word = u64::from_le_bytes(tie[8..].try_into().expect("8"));
        if let Some(id) = store.id {
            check_tie(id, store.seq, tier_id, word).map_err(corrupt)?;
        }
        let data_off = (HEADER_LEN + u64::from(slots) * ENTRY_LEN).next_multiple_of(4096);
        let n = slots as usize;
        let mut st = State {
            map: HashMap::new(),
            pid_of: vec![NO_PAGE; n],
            newer: vec![false; n],
            trusted: vec![false; n],
            pins: vec![0; n],
            generation: vec![0; n],
            referenced: vec![false; n],
            free: Vec::new(),
            hand: 0,
            refused: HashMap::new(),
            order: VecDeque::new(),
            refusal_seq: 0,
        };
        let mut dir = vec![0u8; n * ENTRY_LEN as usize];
        region.read(HEADER_LEN, &mut dir)?;
        for (slot, e) in dir.chunks_exact(ENTRY_LEN as usize).enumerate() {
            let word = u64::from_le_bytes(e.try_into().expect("8"));
            if word == 0 {
                continue;
            }
            let pid = word - 1;
            if pid >= super::table::MAX_PAGES {
                return Err(corrupt(format!(
                    "NVM slot {slot} names page {pid}, beyond any page file"
                )));
            }
            if let Some(other) = st.map.insert(pid, slot as u32) {
                return Err(corrupt(format!(
                    "NVM slots {other} and {slot} both claim page {pid}"
                )));
            }
            st.pid_of[slot] = pid;
            // Whether the page file caught up before the restart is not recorded: assume not.
            st.newer[slot] = true;
        }
        st.free = (0..slots)
            .rev()
            .filter(|&s| st.pid_of[s as usize] == NO_PAGE)
            .collect();
        let found_at_open = st.map.len() as u64;
        let admission = admission.unwrap_or(Admission::RecentlyRefused(n));
        Ok(NvmTier {
            region,
            page_size,
            slots,
            data_off,
            admission,
            slot_latches: (0..n).map(|_| RwLock::new(())).collect(),
            slot_writes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            dir_line_writes: (0..n.div_ceil(8)).map(|_| AtomicU64::new(0)).collect(),
            state: Mutex::new(st),
            counters: NvmCounters::default(),
            found_at_open,
            store_id: AtomicU64::new(tier_id),
        })
    }

    /// The store id the tier's header names, if any.
    pub fn store_id(&self) -> Option<u64> {
        Some(self.store_id.load(Ordering::Relaxed)).filter(|&id| id != 0)
    }

    /// Ties the tier to store `id` at superblock sequence `seq`: called, and persisted,
    /// before that superblock is written, so that after any crash the tier's checkpoint
    /// word is the newest superblock's sequence or the next.
    pub fn tie(&self, id: u64, seq: u64) -> Result<()> {
        write_tie(&self.region, id, seq)?;
        self.store_id.store(id, Ordering::Relaxed);
        Ok(())
    }

    /// Number of slots (the NVM budget in pages).
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Slots holding a page now.
    pub fn resident(&self) -> usize {
        self.state.lock().map.len()
    }

    /// The region behind the tier.
    pub fn region(&self) -> &PmemRegion {
        &self.region
    }

    /// The admission rule.
    pub fn admission(&self) -> Admission {
        self.admission
    }

    fn slot_off(&self, slot: u32) -> u64 {
        self.data_off + u64::from(slot) * self.page_size as u64
    }

    fn dir_off(slot: u32) -> u64 {
        HEADER_LEN + u64::from(slot) * ENTRY_LEN
    }

    /// Slots holding no page.
    pub fn free_slots(&self) -> usize {
        self.state.lock().free.len()
    }

    /// Whether `pid` has a slot.
    pub fn contains(&self, pid: u64) -> bool {
        self.state.lock().map.contains_key(&pid)
    }

    /// Copies page `pid` into `buf` if it has a slot: `Some((trusted, tenancy))`, where
    /// `trusted` says that this run wrote the slot or [`NvmTier::trust`] was called for it
    /// since (its checksum and structure need no second check); `None` if it has no slot.
    pub fn read(&self, pid: u64, buf: &mut [u8]) -> Result<Option<(bool, Tenancy)>> {
        let (slot, trusted, tenancy, latch) = {
            let mut st = self.state.lock();
            let Some(&slot) = st.map.get(&pid) else {
                return Ok(None);
            };
            st.referenced[slot as usize] = true;
            let trusted = st.trusted[slot as usize];
            let tenancy = st.tenancy(slot);
            (
                slot,
                trusted,
                tenancy,
                self.slot_latches[slot as usize].read(),
            )
        };
        self.region.read(self.slot_off(slot), buf)?;
        drop(latch);
        self.counters.hits.incr();
        self.counters.lines_loaded.add((buf.len() / LINE) as u64);
        Ok(Some((trusted, tenancy)))
    }

    /// The tenancy of a slot pinned by [`NvmTier::pin_lines`] (it cannot change hands).
    pub fn tenancy(&self, slot: u32) -> Tenancy {
        self.state.lock().tenancy(slot)
    }

    /// The tenancy of page `pid`'s slot, if it has one.
    pub fn tenancy_of(&self, pid: u64) -> Option<Tenancy> {
        let st = self.state.lock();
        st.map.get(&pid).map(|&slot| st.tenancy(slot))
    }

    /// Whether `pid` has a slot whose bytes are trusted (see [`NvmTier::pin_lines`]).
    pub fn is_trusted(&self, pid: u64) -> bool {
        let st = self.state.lock();
        st.map.get(&pid).is_some_and(|&s| st.trusted[s as usize])
    }

    /// Page `pid` is to be loaded a cache line at a time: if it has a slot whose bytes are
    /// trusted (see [`NvmTier::read`]; an untrusted slot is loaded whole, so its checksum
    /// is checked), pins the slot for [`NvmTier::read_lines`] and returns it. The caller
    /// unpins it when its frame is whole or leaves DRAM. The pinning frame is the page's
    /// only DRAM copy and stays clean while pinned (writers make it whole first), so no
    /// write-back reaches the slot meanwhile, and Clock passes it by.
    pub fn pin_lines(&self, pid: u64) -> Option<u32> {
        let mut st = self.state.lock();
        let slot = *st.map.get(&pid)?;
        let s = slot as usize;
        if !st.trusted[s] {
            return None;
        }
        st.referenced[s] = true;
        st.pins[s] += 1;
        drop(st);
        self.counters.hits.incr();
        self.counters.line_loads.incr();
        Some(slot)
    }

    /// Releases a pin of [`NvmTier::pin_lines`].
    pub fn unpin(&self, slot: u32) {
        let mut st = self.state.lock();
        let pins = &mut st.pins[slot as usize];
        debug_assert!(*pins > 0, "slot {slot} unpinned more often than pinned");
        *pins = pins.saturating_sub(1);
    }

    /// Copies lines `[first, first + buf.len() / 64)` of pinned `slot` into `buf`.
    pub fn read_lines(&self, slot: u32, first: usize, buf: &mut [u8]) -> Result<()> {
        debug_assert!(buf.len().is_multiple_of(LINE));
        self.region
            .read(self.slot_off(slot) + (first * LINE) as u64, buf)?;
        self.counters.lines_loaded.add((buf.len() / LINE) as u64);
        Ok(())
    }

    /// Page `pid`'s slot passed the pool's checks, or this run wrote it (whole, or the lines
    /// that changed since its frame matched it): later loads
    /// may skip the checks. (By page id: if the page moved to another slot meanwhile, that
    /// slot was written in this run too, and readers wait for its write on its latch.)
    pub fn trust(&self, pid: u64) {
        let mut st = self.state.lock();
        if let Some(&slot) = st.map.get(&pid) {
            st.trusted[slot as usize] = true;
        }
    }

    /// NVM wear in this run: (writes of the most written cache line of any slot, writes of
    /// the most written directory line). Every write of a slot, whole or of changed lines,
    /// writes its header line (the checksum changes), so the count of a slot's writes is
    /// that of its most written line.
    pub fn hottest_line_writes(&self) -> (u64, u64) {
        let max = |v: &[AtomicU64]| v.iter().map(|c| c.load(Ordering::Relaxed)).max();
        (
            max(&self.slot_writes).unwrap_or(0),
            max(&self.dir_line_writes).unwrap_or(0),
        )
    }

    /// Writes page `pid` (sealed) over its slot if it has one; `false` if it has none. With
    /// `changed` naming the slot's current tenancy, only the changed lines and the header
    /// line (the checksum changes with any line) are written, the paper's dirty-line
    /// write-back; otherwise, or if the slot changed hands since, the whole page.
    pub fn write_resident(
        &self,
        pid: u64,
        page: &[u8],
        changed: Option<ChangedSince<'_>>,
    ) -> Result<bool> {
        let (slot, latch, partial) = {
            let mut st = self.state.lock();
            let lines_missing = changed.as_ref().is_some_and(|c| c.resident.is_some());
            let Some(&slot) = st.map.get(&pid) else {
                if lines_missing {
                    return Err(Error::corrupt(
                        self.region.path(),
                        format!("page {pid} has lines missing and no slot"),
                    ));
                }
                return Ok(false);
            };
            st.newer[slot as usize] = true;
            let current = st.tenancy(slot);
            let partial = changed.filter(|c| c.tenancy == current);
            if lines_missing && partial.is_none() {
                return Err(Error::corrupt(
                    self.region.path(),
                    format!("page {pid} has lines missing and its slot changed hands"),
                ));
            }
            // A frame loading lines from its slot pins it; only that frame itself (changed
            // in place by lines) writes into it meanwhile, and only lines it holds.
            debug_assert!(
                st.pins[slot as usize] == 0 || lines_missing,
                "a pinned slot is written"
            );
            (slot, self.slot_latches[slot as usize].write(), partial)
        };
        let off = self.slot_off(slot);
        let lines = match partial {
            Some(c) => self.write_changed_lines(pid, off, page, c)?,
            None => {
                self.region.write(off, page)?;
                self.region.persist(off, page.len())?;
                page.len() / LINE
            }
        };
        self.slot_writes[slot as usize].fetch_add(1, Ordering::Relaxed);
        drop(latch);
        // By page, not slot: the slot may have changed hands since the latch was dropped.
        self.trust(pid);
        self.counters.page_writes.incr();
        self.counters.lines_written.add(lines as u64);
        Ok(true)
    }

    /// Writes the runs of changed lines of `page` (and its header line) into the slot at
    /// `off`, persisting them with one fence; the number of lines written. With
    /// `changed.verify`, first checks that every other line equals the slot's (a change
    /// that was not marked would be lost).
    fn write_changed_lines(
        &self,
        pid: u64,
        off: u64,
        page: &[u8],
        changed: ChangedSince<'_>,
    ) -> Result<usize> {
        let n = page.len() / LINE;
        let mut lines = changed.lines.to_vec();
        lines[0] |= 1; // the header line, with the checksum
        let is_changed = |l: usize| lines[l / 64] & (1 << (l % 64)) != 0;
        let resident = |l: usize| {
            changed
                .resident
                .is_none_or(|r| r[l / 64] & (1 << (l % 64)) != 0)
        };
        if let Some(l) = (0..n).find(|&l| is_changed(l) && !resident(l)) {
            return Err(Error::corrupt(
                self.region.path(),
                format!("page {pid}: line {l} is marked changed but was never loaded"),
            ));
        }
        if changed.verify {
            let mut slot = AlignedBuf::new(page.len())?;
            self.region.read(off, &mut slot)?;
            if let Some(l) = (0..n).find(|&l| {
                !is_changed(l)
                    && resident(l)
                    && page[l * LINE..(l + 1) * LINE] != slot[l * LINE..(l + 1) * LINE]
            }) {
                return Err(Error::corrupt(
                    self.region.path(),
                    format!("page {pid}: line {l} changed but was not marked (it would be lost)"),
                ));
            }
        }
        // The header line as written: with the checksum updated from the changed lines when
        // the page is not all there (and, in the debug mode, checked against the page's).
        let mut head = [0u8; LINE];
        head.copy_from_slice(&page[..LINE]);
        // (Every line marked: the page is rewritten whole, whatever the slot held.)
        if changed.resident.is_some() || (changed.verify && !(0..n).all(is_changed)) {
            let mut old_head = [0u8; LINE];
            self.region.read(off, &mut old_head)?;
            let old_sum = u32::from_le_bytes(old_head[..4].try_into().expect("4 bytes"));
            let old_line = |l: usize| -> Result<[u8; LINE]> {
                let mut line = [0u8; LINE];
                self.region.read(off + (l * LINE) as u64, &mut line)?;
                Ok(line)
            };
            let sum = checksum_after(old_sum, page.len(), &lines, &old_line, page)?;
            if changed.resident.is_some() {
                head[..4].copy_from_slice(&sum.to_le_bytes());
            } else if head[..4] != sum.to_le_bytes() {
                return Err(Error::corrupt(
                    self.region.path(),
                    format!("page {pid}: the checksum updated from its changed lines is wrong"),
                ));
            }
        }
        let mut ranges = Vec::new();
        let mut written = 0;
        for run in crate::device::cpu::line_runs(0..n, is_changed) {
            let (at, len) = (run.start * LINE, run.len() * LINE);
            if run.start == 0 {
                self.region.write(off, &head)?;
                self.region
                    .write(off + LINE as u64, &page[LINE..at + len])?;
            } else {
                self.region.write(off + at as u64, &page[at..at + len])?;
            }
            ranges.push((off + at as u64, len));
            written += run.len();
        }
        self.region.persist_all(&ranges)?;
        self.counters.line_write_backs.incr();
        Ok(written)
    }

    /// A page without a slot leaves DRAM: gives it a slot if the admission rule says so
    /// (spilling NVM victims through `spill` when the tier is full). `newer` says whether
    /// `page` is newer than the page file's copy. `false`: refused, the caller writes the
    /// page to the page file if it is newer.
    pub fn admit(&self, pid: u64, page: &[u8], newer: bool, spill: SpillFn<'_>) -> Result<bool> {
        let mut st = self.state.lock();
        if st.map.contains_key(&pid) {
            drop(st);
            return if newer {
                self.write_resident(pid, page, None)
            } else {
                Ok(true)
            };
        }
        if let Admission::RecentlyRefused(n) = self.admission
            && st.refused.remove(&pid).is_none()
        {
            st.refusal_seq += 1;
            let seq = st.refusal_seq;
            st.refused.insert(pid, seq);
            st.order.push_back((pid, seq));
            while st.refused.len() > n {
                let Some((old, s)) = st.order.pop_front() else {
                    break;
                };
                if st.refused.get(&old) == Some(&s) {
                    st.refused.remove(&old);
                }
            }
            // Entries of pages admitted meanwhile linger in `order`; keep it bounded.
            if st.order.len() > 2 * n.max(16) {
                let refused = &st.refused;
                let kept: VecDeque<_> = st
                    .order
                    .iter()
                    .copied()
                    .filter(|(p, s)| refused.get(p) == Some(s))
                    .collect();
                st.order = kept;
            }
            self.counters.refusals.incr();
            return Ok(false);
        }
        let slot = match self.take_slot(&mut st, spill) {
            Ok(slot) => slot,
            // Every candidate slot is being read or written: refuse this page (the caller
            // writes it to the page file if it is newer) rather than fail the store.
            Err(Error::StoreFull { .. }) => {
                self.counters.refusals.incr();
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        self.install(st, slot, pid, page, newer)
    }

    /// Gives page `pid` (sealed, no newer than the page file) a slot if one is free, without
    /// asking the admission rule or evicting: a clean shutdown hands DRAM's pages to NVM so
    /// that the next run starts warm. `false`: no free slot (or the page has one already).
    pub fn admit_if_free(&self, pid: u64, page: &[u8]) -> Result<bool> {
        let mut st = self.state.lock();
        if st.map.contains_key(&pid) {
            return Ok(false);
        }
        let Some(slot) = st.free.pop() else {
            return Ok(false);
        };
        self.install(st, slot, pid, page, false)?;
        self.counters.handed_over.incr();
        Ok(true)
    }

    /// Installs `page` in `slot` (taken by the caller, whose `state` lock is passed in and
    /// released here): the bytes are persisted before the directory entry naming them.
    fn install(
        &self,
        mut st: MutexGuard<'_, State>,
        slot: u32,
        pid: u64,
        page: &[u8],
        newer: bool,
    ) -> Result<bool> {
        st.map.insert(pid, slot);
        st.pid_of[slot as usize] = pid;
        st.newer[slot as usize] = newer;
        st.trusted[slot as usize] = false;
        st.referenced[slot as usize] = true;
        let latch = self.slot_latches[slot as usize].write();
        drop(st);
        let off = self.slot_off(slot);
        let installed = self
            .region
            .write(off, page)
            .and_then(|()| self.region.persist(off, page.len()))
            .and_then(|()| {
                self.region
                    .write(Self::dir_off(slot), &(pid + 1).to_le_bytes())
            })
            .and_then(|()| self.region.persist(Self::dir_off(slot), ENTRY_LEN as usize));
        self.slot_writes[slot as usize].fetch_add(1, Ordering::Relaxed);
        self.dir_line_writes[slot as usize / 8].fetch_add(1, Ordering::Relaxed);
        drop(latch);
        if let Err(e) = installed {
            // The directory entry may or may not have reached media; either way it names a
            // persisted copy or nothing (the store stops writing now). Undo the mapping only
            // if the slot was not evicted and handed on since the latch was dropped; the slot
            // is not reused in this run.
            let mut st = self.state.lock();
            if st.map.get(&pid) == Some(&slot) && st.pid_of[slot as usize] == pid {
                st.map.remove(&pid);
                st.pid_of[slot as usize] = NO_PAGE;
                st.generation[slot as usize] = st.generation[slot as usize].wrapping_add(1);
            }
            return Err(e);
        }
        self.trust(pid);
        self.counters.admissions.incr();
        self.counters.page_writes.incr();
        self.counters.lines_written.add((page.len() / LINE) as u64);
        Ok(true)
    }

    /// A free slot: from the free list, or by NVM Clock, spilling victims newer than the
    /// page file first (one sync for the batch) and clearing their directory entries after.
    fn take_slot(&self, st: &mut State, spill: SpillFn<'_>) -> Result<u32> {
        if let Some(s) = st.free.pop() {
            return Ok(s);
        }
        let n = self.slots as usize;
        let mut victims: Vec<(u32, RwLockWriteGuard<'_, ()>)> = Vec::new();
        // Slot latches are held only for one copy, by threads that need no `state`: a few
        // sweeps (yielding between them) find victims unless the tier is tiny and busy.
        for step in 0..8 * n {
            if victims.len() >= EVICT_BATCH.min(n) {
                break;
            }
            if step > 0 && step % (2 * n) == 0 {
                if !victims.is_empty() {
                    break;
                }
                std::thread::yield_now();
            }
            let s = st.hand % n;
            st.hand = st.hand.wrapping_add(1);
            if st.pid_of[s] == NO_PAGE || victims.iter().any(|(v, _)| *v as usize == s) {
                continue;
            }
            if std::mem::replace(&mut st.referenced[s], false) || st.pins[s] > 0 {
                continue;
            }
            if let Some(g) = self.slot_latches[s].try_write() {
                victims.push((s as u32, g));
            }
        }
        if victims.is_empty() {
            return Err(Error::StoreFull {
                used: u64::from(self.slots) * self.page_size as u64,
                capacity: u64::from(self.slots) * self.page_size as u64,
                reason: "NVM tier: every slot is being read or written (raise the NVM budget)"
                    .into(),
            });
        }
        let mut pages = Vec::new();
        for (s, _) in &victims {
            if st.newer[*s as usize] {
                let mut buf = AlignedBuf::new(self.page_size)?;
                self.region.read(self.slot_off(*s), &mut buf)?;
                pages.push((st.pid_of[*s as usize], buf));
            }
        }
        if !pages.is_empty() {
            spill(&mut pages)?;
            self.counters.spills.add(pages.len() as u64);
            self.counters.spill_syncs.incr();
        }
        let zero = 0u64.to_le_bytes();
        let mut ranges = Vec::with_capacity(victims.len());
        for (s, _) in &victims {
            self.region.write(Self::dir_off(*s), &zero)?;
            self.dir_line_writes[*s as usize / 8].fetch_add(1, Ordering::Relaxed);
            ranges.push((Self::dir_off(*s), ENTRY_LEN as usize));
        }
        self.region.persist_all(&ranges)?;
        for (s, _) in &victims {
            let i = *s as usize;
            st.map.remove(&st.pid_of[i]);
            st.pid_of[i] = NO_PAGE;
            st.newer[i] = false;
            st.trusted[i] = false;
            st.generation[i] = st.generation[i].wrapping_add(1);
            st.free.push(*s);
        }
        self.counters.evictions.add(victims.len() as u64);
        drop(victims);
        Ok(st.free.pop().expect("victims were freed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CrashSimConfig, RegionOptions};
    use proptest::prelude::*;

    const PS: usize = 4096;

    proptest! {
        /// The checksum updated from the changed lines alone equals the checksum of the whole
        /// new page, whichever lines change (the header line included, whose first four
        /// bytes are the checksum itself and not covered by it).
        #[test]
        fn the_checksum_updated_from_changed_lines_is_the_whole_pages(
            seed in any::<u64>(),
            pages_16k in any::<bool>(),
            changes in proptest::collection::vec((0usize..256, any::<u8>()), 1..12),
        ) {
            let len = if pages_16k { 16384 } else { 4096 };
            let mut rng = seed | 1;
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            };
            let old: Vec<u8> = (0..len).map(|_| next()).collect();
            let mut new = old.clone();
            let mut changed = vec![0u64; len / LINE / 64 + 1];
            for (line, byte) in changes {
                let l = line % (len / LINE);
                changed[l / 64] |= 1 << (l % 64);
                for b in &mut new[l * LINE..(l + 1) * LINE] {
                    *b ^= byte | 1;
                }
            }
            let old_sum = crc32c::crc32c(&old[4..]);
            let old_line = |l: usize| -> Result<[u8; LINE]> {
                Ok(old[l * LINE..(l + 1) * LINE].try_into().expect("a line"))
            };
            let sum = checksum_after(old_sum, len, &changed, &old_line, &new).unwrap();
            prop_assert_eq!(sum, crc32c::crc32c(&new[4..]));
        }
    }

    fn region(pages: u64) -> PmemRegion {
        PmemRegion::simulated(
            HEADER_LEN + 4096 + pages * PS as u64,
            CrashSimConfig::default(),
            &RegionOptions::default(),
        )
        .unwrap()
    }

    /// A page of `pid`, sealed (its checksum set).
    fn page(pid: u64) -> Vec<u8> {
        let mut p = vec![(pid % 251) as u8; PS];
        p[16..24].copy_from_slice(&pid.to_le_bytes());
        super::super::seal(&mut p);
        p
    }

    #[test]
    fn geometry_fits_the_region() {
        for len in [8192u64, 12288, 1 << 20, (1 << 20) + 4095, 1 << 30] {
            for ps in [4096usize, 16384, 65536] {
                let (slots, off) = geometry(len, ps);
                assert!(off >= HEADER_LEN + u64::from(slots) * ENTRY_LEN);
                assert!(
                    slots == 0 || off + u64::from(slots) * ps as u64 <= len,
                    "{len} {ps}"
                );
                // One more slot would not fit.
                let more = u64::from(slots) + 1;
                let off2 = (HEADER_LEN + more * ENTRY_LEN).next_multiple_of(4096);
                assert!(
                    off2 + more * ps as u64 > len,
                    "{len} {ps}: {slots} is not the most"
                );
            }
        }
    }

    #[test]
    fn admission_set_admits_on_the_second_eviction_and_clock_spills_newer_pages() {
        let t = NvmTier::open(region(4), PS, Some(Admission::RecentlyRefused(8))).unwrap();
        assert_eq!(t.slots(), 4);
        let spilled = Mutex::new(Vec::new());
        let spill = |pages: &mut [(u64, AlignedBuf)]| -> Result<()> {
            spilled.lock().extend(pages.iter().map(|(p, _)| *p));
            Ok(())
        };
        // First eviction refused, second admitted.
        assert!(!t.admit(1, &page(1), true, &spill).unwrap());
        assert!(t.admit(1, &page(1), true, &spill).unwrap());
        let mut buf = vec![0u8; PS];
        // Written by this run: trusted (the pool skips its checks).
        assert_eq!(t.read(1, &mut buf).unwrap().map(|r| r.0), Some(true));
        assert_eq!(buf, page(1));
        // Fill the tier (clean pages 2..=4), then one more: Clock frees a batch; page 1 is
        // the only one newer than the page file, so it is the only one spilled.
        for pid in 2..=5 {
            assert!(!t.admit(pid, &page(pid), false, &spill).unwrap());
            assert!(t.admit(pid, &page(pid), false, &spill).unwrap());
        }
        assert_eq!(*spilled.lock(), vec![1]);
        assert!(t.counters.evictions.get() >= 1);
        assert!(t.contains(5));
        assert!(!t.contains(1));
        assert_eq!(t.counters.spills.get(), 1);
    }

    /// A write-back naming the slot's tenancy writes the changed lines and the header line
    /// only; the check refuses a change it does not name; a stale tenancy writes the page.
    #[test]
    fn a_write_back_of_changed_lines_writes_them_only_while_the_tenancy_holds() {
        let t = NvmTier::open(region(2), PS, Some(Admission::All)).unwrap();
        let none = |_: &mut [(u64, AlignedBuf)]| -> Result<()> { Ok(()) };
        assert!(t.admit(1, &page(1), true, &none).unwrap());
        let first = t.tenancy_of(1).unwrap();
        let mut changed = page(1);
        changed[5 * LINE..6 * LINE].fill(0xEE);
        super::super::seal(&mut changed); // the checksum's line is always written
        let lines = [1u64 << 5];
        let since = |tenancy, verify| ChangedSince {
            tenancy,
            lines: &lines,
            resident: None,
            verify,
        };
        assert!(
            t.write_resident(1, &changed, Some(since(first, true)))
                .unwrap()
        );
        assert_eq!(t.counters.line_write_backs.get(), 1);
        assert_eq!(t.counters.lines_written.get(), (PS / LINE + 2) as u64);
        let mut back = vec![0u8; PS];
        t.read(1, &mut back).unwrap();
        assert!(back == changed);
        // A change the mask does not name is refused under the check.
        let mut unmarked = changed.clone();
        unmarked[9 * LINE] ^= 1;
        super::super::seal(&mut unmarked);
        let e = t.write_resident(1, &unmarked, Some(since(first, true)));
        assert!(matches!(e, Err(Error::Corrupt { .. })), "{e:?}");
        // So is a checksum that does not match the page (the one updated from the changed
        // lines is checked against it).
        let mut wrong_sum = changed.clone();
        wrong_sum[0] ^= 1;
        let e = t.write_resident(1, &wrong_sum, Some(since(first, true)));
        assert!(matches!(e, Err(Error::Corrupt { .. })), "{e:?}");
        // A frame with lines missing (only line 5 and the header line resident): the
        // checksum is computed from the changed lines, whatever the copy holds elsewhere.
        let mut partial = vec![0xA5u8; PS];
        partial[..LINE].copy_from_slice(&changed[..LINE]);
        partial[5 * LINE..6 * LINE].fill(0x77);
        let resident = [1u64 | 1 << 5];
        let by_lines = ChangedSince {
            tenancy: first,
            lines: &lines,
            resident: Some(&resident),
            verify: true,
        };
        assert!(t.write_resident(1, &partial, Some(by_lines)).unwrap());
        let mut expect = changed.clone();
        expect[5 * LINE..6 * LINE].fill(0x77);
        super::super::seal(&mut expect);
        t.read(1, &mut back).unwrap();
        assert!(back == expect, "the slot holds the page with its checksum");
        changed = expect;
        // The slot changes hands (two more pages in a two-slot tier), page 1 comes back: a
        // write-back naming the old tenancy writes the whole page.
        for pid in [2, 3, 1] {
            assert!(t.admit(pid, &page(pid), true, &none).unwrap());
        }
        assert_ne!(t.tenancy_of(1), Some(first));
        // A frame with lines missing cannot be written whole: refused, not written.
        let stale_by_lines = ChangedSince {
            tenancy: first,
            lines: &lines,
            resident: Some(&resident),
            verify: false,
        };
        let e = t.write_resident(1, &partial, Some(stale_by_lines));
        assert!(matches!(e, Err(Error::Corrupt { .. })), "{e:?}");
        let written = t.counters.lines_written.get();
        assert!(
            t.write_resident(1, &changed, Some(since(first, false)))
                .unwrap()
        );
        assert_eq!(t.counters.lines_written.get() - written, (PS / LINE) as u64);
        assert_eq!(t.counters.line_write_backs.get(), 2);
        t.read(1, &mut back).unwrap();
        assert!(back == changed);
    }

    /// Wear: each page write counts once on its slot's lines, each install and clear once on
    /// the directory line the slot's entry shares with seven others.
    #[test]
    fn wear_counts_the_most_written_slot_and_directory_line() {
        let t = NvmTier::open(region(4), PS, Some(Admission::All)).unwrap();
        let none = |_: &mut [(u64, AlignedBuf)]| -> Result<()> { Ok(()) };
        assert_eq!(t.hottest_line_writes(), (0, 0));
        for pid in 1..=3 {
            assert!(t.admit(pid, &page(pid), true, &none).unwrap());
        }
        for _ in 0..5 {
            assert!(t.write_resident(2, &page(2), None).unwrap());
        }
        assert!(!t.write_resident(9, &page(9), None).unwrap());
        // Slot of page 2: its install and five rewrites; one directory line, three installs.
        assert_eq!(t.hottest_line_writes(), (6, 3));
    }

    #[test]
    fn reopen_finds_every_installed_page_and_rejects_damage() {
        let r = region(8);
        let t = NvmTier::open(r, PS, Some(Admission::All)).unwrap();
        let none = |_: &mut [(u64, AlignedBuf)]| -> Result<()> { Ok(()) };
        for pid in [3u64, 9, 700] {
            assert!(t.admit(pid, &page(pid), true, &none).unwrap());
        }
        let image = t.region().power_loss().unwrap();
        let reboot = |img: &[u8]| {
            PmemRegion::from_image(img, CrashSimConfig::default(), &RegionOptions::default())
                .unwrap()
        };
        let t2 = NvmTier::open(reboot(&image), PS, Some(Admission::All)).unwrap();
        assert_eq!(t2.found_at_open, 3);
        let mut buf = vec![0u8; PS];
        // Found at open: checked on its first load, trusted once the pool says it passed.
        assert_eq!(t2.read(700, &mut buf).unwrap().map(|r| r.0), Some(false));
        assert_eq!(buf, page(700));
        t2.trust(700);
        assert_eq!(t2.read(700, &mut buf).unwrap().map(|r| r.0), Some(true));
        assert_eq!(t2.read(701, &mut buf).unwrap().map(|r| r.0), None);
        // The wrong page size, a damaged header and two slots claiming one page are refused.
        let e = NvmTier::open(reboot(&image), 8192, Some(Admission::All)).unwrap_err();
        assert!(e.to_string().contains("4096-byte pages"), "{e}");
        let mut bad = image.clone();
        bad[13] ^= 1;
        let e = NvmTier::open(reboot(&bad), PS, Some(Admission::All)).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        let mut dup = image.clone();
        let first = dup[HEADER_LEN as usize..HEADER_LEN as usize + 8].to_vec();
        dup[HEADER_LEN as usize + 40..HEADER_LEN as usize + 48].copy_from_slice(&first);
        let e = NvmTier::open(reboot(&dup), PS, Some(Admission::All)).unwrap_err();
        assert!(e.to_string().contains("both claim"), "{e}");
    }

    #[test]
    fn an_install_cut_before_its_directory_entry_leaves_the_slot_free() {
        // Fence 1 formats the header; fence 2 persists the page; power fails before fence 3
        // (the directory entry).
        let r = PmemRegion::simulated(
            HEADER_LEN + 4096 + 4 * PS as u64,
            CrashSimConfig {
                crash_after_fences: Some(2),
                ..CrashSimConfig::default()
            },
            &RegionOptions::default(),
        )
        .unwrap();
        let t = NvmTier::open(r, PS, Some(Admission::All)).unwrap();
        let none = |_: &mut [(u64, AlignedBuf)]| -> Result<()> { Ok(()) };
        assert!(t.admit(5, &page(5), true, &none).unwrap());
        let image = t.region().power_loss().unwrap();
        let r2 =
            PmemRegion::from_image(&image, CrashSimConfig::default(), &RegionOptions::default())
                .unwrap();
        let t2 = NvmTier::open(r2, PS, Some(Admission::All)).unwrap();
        assert_eq!(t2.found_at_open, 0);
        assert!(!t2.contains(5));
    }
}
