//! A region split into a head, reached through the region's copy API, and pages of one size,
//! each handed to one owner as an [`AlignedBuf`] that reads and changes it in place: the
//! NVM-direct design's pages (`buffer::direct`), which a B-tree searches and updates where
//! they lie, with no DRAM copy.
//!
//! Owns: the split, and flushing the lines of a page its owner lends it. Must not touch: what
//! the head or the pages hold.
//!
//! Soundness: the region is moved in, so nothing else can reach its page bytes through the
//! copy API; each page goes to exactly one buffer; the head is reachable only through this
//! type's bounds-checked methods. Flushing a page takes `&AlignedBuf`, so no `&mut` of it is
//! alive meanwhile (a crash-simulated region reads the lines it flushes). One exception, in
//! test machinery only: a crash-simulated region copies its whole working image at a
//! simulated power loss ([`PagedRegion::power_loss`], [`PagedRegion::snapshot`], or the fence
//! it was told to fail at), reading page bytes an owner may hold as `&mut` at that moment; a
//! real region never does.

use std::sync::Arc;

use super::*;
use crate::device::{AlignedBuf, IO_ALIGN};

/// A region split into a head and pages. See the module docs.
#[derive(Debug)]
pub struct PagedRegion {
    region: Arc<PmemRegion>,
    head: u64,
    page_size: usize,
    pages: usize,
}

impl PmemRegion {
    /// Splits the region into a head of `head` bytes and as many pages of `page_size` bytes as
    /// fit behind it; page `i` starts at `head + i * page_size`. Both must be multiples of
    /// [`IO_ALIGN`]. The pages are the region's bytes themselves: changes to a buffer are
    /// changes to the region, durable once flushed ([`PagedRegion::flush_lines`]).
    pub fn into_paged(self, head: u64, page_size: usize) -> Result<(PagedRegion, Vec<AlignedBuf>)> {
        if page_size == 0
            || !page_size.is_multiple_of(IO_ALIGN)
            || !head.is_multiple_of(IO_ALIGN as u64)
        {
            return Err(Error::Misaligned {
                offset: head,
                len: page_size as u64,
                alignment: IO_ALIGN as u64,
            });
        }
        let len = self.len();
        if head > len {
            return Err(Error::OutOfRange {
                offset: 0,
                len: head,
                size: len,
            });
        }
        let pages = usize::try_from((len - head) / page_size as u64).map_err(|_| too_big(len))?;
        let region = Arc::new(self);
        let owner: Arc<dyn Send + Sync> = region.clone();
        let base = region.base_ptr();
        let bufs = (0..pages)
            .map(|i| {
                let at = head as usize + i * page_size;
                // SAFETY: `at + page_size <= len`: inside the mapped data area, which stays
                // mapped (and never moves: address stability) while `owner` holds the region;
                // IO_ALIGN-aligned since the base is page-aligned and `head` and `page_size`
                // are multiples of IO_ALIGN. Page `i` goes to this buffer alone, and the region
                // is reachable only through `PagedRegion`, whose copy API stops at the head.
                unsafe {
                    AlignedBuf::over_mapping(
                        NonNull::new_unchecked(base.add(at)),
                        page_size,
                        owner.clone(),
                    )
                }
            })
            .collect();
        Ok((
            PagedRegion {
                region,
                head,
                page_size,
                pages,
            },
            bufs,
        ))
    }
}

impl PagedRegion {
    /// The flush instruction the region's persists run.
    pub fn flush_instruction(&self) -> crate::device::FlushInstruction {
        self.region.flush_instruction()
    }

    /// Bytes of the head.
    pub fn head_len(&self) -> u64 {
        self.head
    }

    /// Number of pages.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    fn in_head(&self, off: u64, len: usize) -> Result<()> {
        match off.checked_add(len as u64) {
            Some(end) if end <= self.head => Ok(()),
            _ => Err(Error::OutOfRange {
                offset: off,
                len: len as u64,
                size: self.head,
            }),
        }
    }

    /// Copies head bytes at `off` into `buf`.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.in_head(off, buf.len())?;
        self.region.read(off, buf)
    }

    /// Copies `data` into the head at `off` (durable once persisted).
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        self.in_head(off, data.len())?;
        self.region.write(off, data)
    }

    /// An atomic view of the head's 8 bytes at `off` (8-aligned): a word that must reach
    /// media whole.
    pub fn atomic_u64(&self, off: u64) -> Result<&AtomicU64> {
        self.in_head(off, 8)?;
        self.region.atomic_u64(off)
    }

    /// Makes the head's `[off, off + len)` durable (flush and fence).
    pub fn persist(&self, off: u64, len: usize) -> Result<()> {
        self.in_head(off, len)?;
        self.region.persist(off, len)
    }

    /// Waits until every flush issued so far is durable.
    pub fn drain(&self) {
        self.region.drain();
    }

    /// Which page `page` is (it must be one of this region's).
    fn page_index(&self, page: &AlignedBuf) -> Result<usize> {
        let start = self.region.base_ptr() as usize + self.head as usize;
        let at = (page.as_ptr() as usize).wrapping_sub(start);
        if page.len() != self.page_size
            || (page.as_ptr() as usize) < start
            || !at.is_multiple_of(self.page_size)
            || at / self.page_size >= self.pages
        {
            return Err(Error::InvalidArgument(
                "flush of a buffer that is not a page of this region".into(),
            ));
        }
        Ok(at / self.page_size)
    }

    /// Writes back (no fence) the lines of `page` whose bits are set in `lines` (bit `b` of
    /// word `w`: line `64 * w + b`), one flush per run of adjacent lines.
    pub fn flush_lines(&self, page: &AlignedBuf, lines: &[u64]) -> Result<()> {
        let first = self.head + (self.page_index(page)? * self.page_size) as u64;
        let set = |l: usize| lines.get(l / 64).is_some_and(|w| w >> (l % 64) & 1 == 1);
        for run in cpu::line_runs(0..self.page_size / CACHE_LINE, set) {
            self.region.flush(
                first + (run.start * CACHE_LINE) as u64,
                run.len() * CACHE_LINE,
            )?;
        }
        Ok(())
    }

    /// Whether the region emulates a device profile (its latencies charged to accesses).
    pub fn emulated(&self) -> bool {
        self.region.emulator().is_some()
    }

    /// Charges one emulated read of `bytes` made in place in a page (pages are read through
    /// references, which the emulator cannot see). Nothing when not emulated.
    pub fn charge_read(&self, bytes: usize) {
        self.region.charge_read(bytes);
    }

    /// The region's description.
    pub fn info(&self) -> RegionInfo {
        self.region.info()
    }

    /// Crash-simulated regions: the persist points (fences) so far.
    pub fn persist_points(&self) -> u64 {
        self.region.persist_points()
    }

    /// Crash-simulated regions: loses power now and returns the image media hold (`None` for
    /// real regions). For tests, once no page is being changed.
    pub fn power_loss(&self) -> Option<Vec<u8>> {
        self.region.power_loss()
    }

    /// A copy of the whole data area, head and pages (for tests, once no page is being
    /// changed; see the module docs).
    pub fn snapshot(&self) -> Vec<u8> {
        self.region.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{CrashSimConfig, RegionOptions};

    fn sim(len: u64) -> PmemRegion {
        PmemRegion::simulated(len, CrashSimConfig::default(), &RegionOptions::default()).unwrap()
    }

    #[test]
    fn pages_are_the_regions_bytes_durable_once_their_lines_are_flushed() {
        let r = sim(4 * 4096);
        r.write(0, b"head").unwrap();
        let (paged, mut pages) = r.into_paged(4096, 4096).unwrap();
        assert_eq!((paged.pages(), pages.len(), paged.head_len()), (3, 3, 4096));
        pages[1][..5].copy_from_slice(b"flush");
        pages[1][64..69].copy_from_slice(b"never");
        pages[2][4095] = 9;
        // Line 0 of page 1 and the last line of page 2.
        paged.flush_lines(&pages[1], &[1]).unwrap();
        paged.flush_lines(&pages[2], &[1 << 63]).unwrap();
        paged.persist(0, 4).unwrap();
        let img = paged.power_loss().unwrap();
        assert_eq!(&img[..4], b"head");
        assert_eq!(&img[2 * 4096..2 * 4096 + 5], b"flush");
        assert_eq!(&img[2 * 4096 + 64..2 * 4096 + 69], &[0; 5], "not flushed");
        assert_eq!(img[4 * 4096 - 1], 9);
    }

    #[test]
    fn the_head_api_stops_at_the_pages_and_foreign_buffers_are_refused() {
        let (paged, pages) = sim(3 * 4096).into_paged(4096, 4096).unwrap();
        assert!(matches!(
            paged.write(4090, &[1; 8]),
            Err(Error::OutOfRange { .. })
        ));
        assert!(paged.read(4096, &mut [0; 1]).is_err());
        assert!(paged.atomic_u64(4096).is_err());
        let foreign = AlignedBuf::new(4096).unwrap();
        assert!(matches!(
            paged.flush_lines(&foreign, &[1]),
            Err(Error::InvalidArgument(_))
        ));
        let (other, theirs) = sim(2 * 4096).into_paged(0, 4096).unwrap();
        assert!(paged.flush_lines(&theirs[0], &[1]).is_err());
        assert!(other.flush_lines(&pages[0], &[1]).is_err());
        for (head, ps) in [(100, 4096), (4096, 100), (8 * 4096, 4096)] {
            assert!(sim(2 * 4096).into_paged(head, ps).is_err(), "{head} {ps}");
        }
    }
}
