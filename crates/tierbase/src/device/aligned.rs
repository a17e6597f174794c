//! Heap buffers aligned for direct I/O.
//!
//! Owns: allocation and freeing of block-aligned byte buffers. Must not touch: files.
//! `O_DIRECT` requires the buffer address, the length and the file offset to be multiples of the
//! device's logical block size; [`AlignedBuf`] guarantees the first two.

use std::alloc::Layout;
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// Alignment of every [`AlignedBuf`]: 4 KiB covers 512-byte and 4 KiB logical blocks.
pub const IO_ALIGN: usize = 4096;

/// A zero-initialised, [`IO_ALIGN`]-aligned byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only allow reads of the owned bytes.
unsafe impl Sync for AlignedBuf {}

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
        let layout = Layout::from_size_align(len, IO_ALIGN)
            .map_err(|e| Error::InvalidArgument(format!("buffer of {len} bytes: {e}")))?;
        // SAFETY: the layout has non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| {
            Error::InvalidArgument(format!("out of memory allocating {len} bytes"))
        })?;
        Ok(AlignedBuf { ptr, len })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
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
        if let Ok(layout) = Layout::from_size_align(self.len, IO_ALIGN) {
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
}
