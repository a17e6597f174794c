//! Buffers aligned for direct I/O: on the heap one by one (from 128 KiB, each in an anonymous
//! mapping of its own), or carved from one anonymous mapping on huge pages (a buffer pool's
//! frames).
//!
//! Owns: allocation and freeing of block-aligned byte buffers. Must not touch: files.
//! `O_DIRECT` requires the buffer address, the length and the file offset to be multiples of the
//! device's logical block size; [`AlignedBuf`] guarantees the first two.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::device::dram::{advise_huge_pages, map_anonymous};
use crate::error::{Error, Result};

/// Alignment of every [`AlignedBuf`]: 4 KiB covers 512-byte and 4 KiB logical blocks.
pub const IO_ALIGN: usize = 4096;

/// Buffers of at least this many bytes get an anonymous mapping of their own instead of a heap
/// allocation. glibc serves such sizes from `mmap` too, but each free of one raises its
/// adaptive mmap threshold to the freed size; after a log's 1 MiB growth buffers, every
/// allocation below 1 MiB came from the arenas, and a 4 KiB-page B+-tree kept about 20 MiB
/// of freed memory there (docs/BENCHMARKS.md, Figure 35).
const OWN_MAPPING_FROM: usize = 128 * 1024;

/// A zero-initialised, [`IO_ALIGN`]-aligned byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// Bytes allocated (`len` may be less: [`AlignedBuf::set_len`]).
    capacity: usize,
    /// `None`: a heap allocation of its own. Else what owns the mapping it is a slice of,
    /// kept alive by its buffers: an anonymous mapping unmapped when its last buffer goes
    /// ([`AlignedBuf::carve`], or a large buffer's own, [`OWN_MAPPING_FROM`]), or a persistent region split into pages
    /// ([`crate::device::PmemRegion::into_paged`]).
    mapping: Option<Arc<dyn Send + Sync>>,
}

// SAFETY: AlignedBuf owns its bytes exclusively, like a Vec<u8> (a carved buffer owns its
// slice of the mapping: no other buffer overlaps it).
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of the owned bytes.
unsafe impl Sync for AlignedBuf {}

/// An anonymous mapping that carved buffers share (or one large buffer owns), unmapped when
/// the last one drops.
struct SharedMapping {
    base: NonNull<u8>,
    bytes: usize,
}

// SAFETY: the mapping is only ever accessed through the disjoint buffers carved from it; this
// handle itself only unmaps it, once, when nothing refers to it any more.
unsafe impl Send for SharedMapping {}
// SAFETY: as above (the handle has no methods that touch the memory).
unsafe impl Sync for SharedMapping {}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours, and every buffer carved from it is gone (each holds an
        // `Arc` of this handle).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.bytes) };
    }
}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes; `len` must be a positive multiple of [`IO_ALIGN`].
    pub fn new(len: usize) -> Result<Self> {
        if len == 0 || !len.is_multiple_of(IO_ALIGN) {
            return Err(Error::Misaligned {
                offset: 0,
                len: len as u64,
                alignment: IO_ALIGN as u64,
            });
        }
        if len >= OWN_MAPPING_FROM
            && let Ok(base) = map_anonymous(len, libc::PROT_READ | libc::PROT_WRITE)
        {
            return Ok(AlignedBuf {
                ptr: base,
                len,
                capacity: len,
                mapping: Some(Arc::new(SharedMapping { base, bytes: len })),
            });
        }
        let layout = Layout::from_size_align(len, IO_ALIGN)
            .map_err(|e| Error::InvalidArgument(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::InvalidArgument(format!("out of memory allocating {len} bytes"))
        })?;
        Ok(AlignedBuf {
            ptr,
            len,
            capacity: len,
            mapping: None,
        })
    }

    /// `count` zeroed buffers of `len` bytes each, carved from one anonymous mapping that asks
    /// for transparent huge pages: a buffer pool's frames, which a pool read at random misses
    /// the TLB far less on. With `populate`, the kernel faults the whole mapping in now
    /// (`MADV_POPULATE_WRITE`, zero-filled by the kernel), so that no request later pays a
    /// 2 MiB fault; without it, memory is taken as buffers are first written. Falls back to
    /// heap buffers where the kernel refuses such a mapping.
    pub fn carve(len: usize, count: usize, populate: bool) -> Result<Vec<AlignedBuf>> {
        if len == 0 || !len.is_multiple_of(IO_ALIGN) {
            return Err(Error::Misaligned {
                offset: 0,
                len: len as u64,
                alignment: IO_ALIGN as u64,
            });
        }
        let bytes = len
            .checked_mul(count)
            .filter(|&b| b > 0)
            .ok_or_else(|| Error::InvalidArgument(format!("{count} buffers of {len} bytes")))?;
        let Ok(base) = map_anonymous(bytes, libc::PROT_READ | libc::PROT_WRITE) else {
            return (0..count).map(|_| AlignedBuf::new(len)).collect();
        };
        advise_huge_pages(base, bytes);
        if populate {
            // SAFETY: advice on the mapping just made; it only faults pages in (zeroed). On a
            // kernel without MADV_POPULATE_WRITE it fails, and pages fault in on first use.
            unsafe { libc::madvise(base.as_ptr().cast(), bytes, libc::MADV_POPULATE_WRITE) };
        }
        let mapping: Arc<dyn Send + Sync> = Arc::new(SharedMapping { base, bytes });
        Ok((0..count)
            .map(|i| AlignedBuf {
                // SAFETY: `i * len + len <= bytes`: inside the mapping, and page-aligned since
                // the mapping is and `len` is a multiple of IO_ALIGN.
                ptr: unsafe { NonNull::new_unchecked(base.as_ptr().add(i * len)) },
                len,
                capacity: len,
                mapping: Some(mapping.clone()),
            })
            .collect())
    }

    /// A buffer over `len` bytes at `ptr` of a mapping that `owner` keeps mapped.
    ///
    /// # Safety
    /// `ptr` must be [`IO_ALIGN`]-aligned and point to `len` initialised bytes that stay
    /// mapped while `owner` lives, and that nothing but the returned buffer reads or writes
    /// (the buffer hands out `&` and `&mut` slices of them).
    pub(crate) unsafe fn over_mapping(
        ptr: NonNull<u8>,
        len: usize,
        owner: Arc<dyn Send + Sync>,
    ) -> AlignedBuf {
        AlignedBuf {
            ptr,
            len,
            capacity: len,
            mapping: Some(owner),
        }
    }

    /// A view of the buffer's bytes for readers that do not hold it
    /// ([`super::shared_mem::RacyView`]), if the buffer is a slice of a mapping (which the
    /// view keeps mapped); `None` for a heap buffer of its own.
    pub fn racy_view(&self) -> Option<super::shared_mem::RacyView> {
        let mapping = self.mapping.clone()?;
        // SAFETY: the buffer is IO_ALIGN-aligned (so 8-aligned), and its first `len` bytes
        // (here rounded down to whole words) lie in the mapping that `mapping` keeps mapped.
        Some(unsafe { super::shared_mem::RacyView::new(self.ptr, self.len & !7, mapping) })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes allocated (at least [`AlignedBuf::len`]).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Sets the length to `len` bytes of the ones allocated (a positive multiple of
    /// [`IO_ALIGN`], at most the length the buffer was made with): one allocation then serves
    /// I/Os of different sizes. Bytes beyond the old length keep their earlier contents.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len == 0 || !len.is_multiple_of(IO_ALIGN) || len > self.capacity {
            return Err(Error::Misaligned {
                offset: 0,
                len: len as u64,
                alignment: IO_ALIGN as u64,
            });
        }
        self.len = len;
        Ok(())
    }

    /// Always false (buffers are never empty), provided for API completeness.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer for I/O submission.
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Raw mutable pointer for I/O submission.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to `len` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.mapping.is_some() {
            // A slice of a shared mapping: the mapping goes with its last buffer.
            return;
        }
        if let Ok(layout) = Layout::from_size_align(self.capacity, IO_ALIGN) {
            // SAFETY: allocated in `new` with exactly this layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let mut b = AlignedBuf::new(8192).unwrap();
        assert_eq!(b.as_ptr() as usize % IO_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        b[8191] = 1;
        assert_eq!(b[8191], 1);
        assert!(matches!(
            AlignedBuf::new(100),
            Err(Error::Misaligned { .. })
        ));
        assert!(matches!(AlignedBuf::new(0), Err(Error::Misaligned { .. })));
    }

    #[test]
    fn large_buffers_are_mappings_of_their_own() {
        let small = AlignedBuf::new(OWN_MAPPING_FROM - IO_ALIGN).unwrap();
        assert!(small.mapping.is_none(), "below the bound: from the heap");
        let mut b = AlignedBuf::new(OWN_MAPPING_FROM + IO_ALIGN).unwrap();
        assert!(
            b.mapping.is_some(),
            "from the bound on: never from the allocator"
        );
        assert_eq!(b.as_ptr() as usize % IO_ALIGN, 0);
        assert!(b.iter().all(|&x| x == 0));
        b.fill(9);
        b.set_len(IO_ALIGN).unwrap();
        b.set_len(OWN_MAPPING_FROM + IO_ALIGN).unwrap();
        assert!(b.iter().all(|&x| x == 9));
        drop(b); // unmapped here; a second one maps afresh, zeroed
        let again = AlignedBuf::new(OWN_MAPPING_FROM).unwrap();
        assert!(again.iter().all(|&x| x == 0));
    }

    #[test]
    fn set_len_stays_within_the_allocation() {
        let mut b = AlignedBuf::new(3 * IO_ALIGN).unwrap();
        b.fill(7);
        b.set_len(IO_ALIGN).unwrap();
        assert_eq!(b.len(), IO_ALIGN);
        b.set_len(3 * IO_ALIGN).unwrap();
        assert!(b.iter().all(|&x| x == 7), "the bytes beyond were kept");
        for bad in [0, 100, 4 * IO_ALIGN] {
            assert!(matches!(b.set_len(bad), Err(Error::Misaligned { .. })));
        }
        assert_eq!(b.len(), 3 * IO_ALIGN);
    }

    #[test]
    fn carved_buffers_are_aligned_zeroed_and_disjoint() {
        let mut bufs = AlignedBuf::carve(8192, 5, false).unwrap();
        assert_eq!(bufs.len(), 5);
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.len(), 8192);
            assert_eq!(b.as_ptr() as usize % IO_ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u8 + 1),
                "buffer {i} was overwritten"
            );
        }
        // Dropping some keeps the others (and the mapping) alive.
        let last = bufs.pop().unwrap();
        drop(bufs);
        assert!(last.iter().all(|&x| x == 5));
        assert!(matches!(
            AlignedBuf::carve(100, 2, true),
            Err(Error::Misaligned { .. })
        ));
        assert!(AlignedBuf::carve(4096, 0, false).is_err());
        let populated = AlignedBuf::carve(4096, 3, true).unwrap();
        assert!(populated.iter().all(|b| b.iter().all(|&x| x == 0)));
    }
}
