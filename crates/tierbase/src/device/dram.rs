//! DRAM arenas: memory that a DRAM structure (an index, a directory, a buffer pool's frames)
//! grows into without ever moving, backed by transparent huge pages where the kernel offers
//! them.
//!
//! Owns: reserving address space, asking for huge pages (`madvise(MADV_HUGEPAGE)`), handing out
//! initialised runs of elements, and freeing them. Must not touch: what the elements mean.
//!
//! Why: a large hash index is read at random, so nearly every probe of a 4 KiB-paged index also
//! misses the TLB and walks page tables (expensive under virtualisation). Measured here on a
//! 10 M-record KV store: backing the index with 2 MiB pages raised inserts from ~1.25 M to
//! ~1.6 M per second (docs/INDEX.md). The first [`SMALL_PREFIX`] bytes keep ordinary pages, so
//! a small structure does not take a 2 MiB page for a few kilobytes.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Bytes at the start of an arena that keep ordinary pages.
pub const SMALL_PREFIX: usize = 2 << 20;

/// A private anonymous mapping of `len` bytes with protection `prot`, at an address the kernel
/// chooses, without reserving swap (`MAP_NORESERVE`): memory is taken page by page as it is
/// touched. The one place the device layer asks for anonymous address space (DRAM arenas and
/// region reservations).
pub(crate) fn map_anonymous(len: usize, prot: libc::c_int) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping at a kernel-chosen address; it touches no
    // existing memory, and nothing else refers to the range.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    NonNull::new(p.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned null"))
}

/// [`map_anonymous`] at an address that is a multiple of `align` (a power of two, a multiple
/// of the page size; `len` a multiple of the page size too): `len + align` bytes are mapped,
/// then the unaligned head and the tail past `len` are unmapped again.
pub(crate) fn map_anonymous_aligned(
    len: usize,
    prot: libc::c_int,
    align: usize,
) -> std::io::Result<NonNull<u8>> {
    let total = len
        .checked_add(align)
        .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOMEM))?;
    let base = map_anonymous(total, prot)?;
    let head = (base.as_ptr() as usize).next_multiple_of(align) - base.as_ptr() as usize;
    let tail = total - head - len;
    // SAFETY: `head + len + tail == total`, so both trimmed ranges and the aligned start lie
    // inside the mapping just made, which nothing else refers to; `head` and `tail` are page
    // multiples (the base, `align` and `len` are), as munmap needs.
    let aligned = unsafe {
        let aligned = base.as_ptr().add(head);
        if head > 0 {
            libc::munmap(base.as_ptr().cast(), head);
        }
        if tail > 0 {
            libc::munmap(aligned.add(len).cast(), tail);
        }
        aligned
    };
    NonNull::new(aligned).ok_or_else(|| std::io::Error::other("mmap returned null"))
}

/// Asks for transparent huge pages for the mapping of `bytes` at `p`, past its first
/// [`SMALL_PREFIX`] bytes (a hint: where the kernel has none, or disables them, ordinary pages).
pub(crate) fn advise_huge_pages(p: NonNull<u8>, bytes: usize) {
    if bytes > SMALL_PREFIX {
        // SAFETY: advice on a mapping of at least `bytes` bytes the caller owns; it changes no
        // contents.
        unsafe {
            libc::madvise(
                p.as_ptr().add(SMALL_PREFIX).cast(),
                bytes - SMALL_PREFIX,
                libc::MADV_HUGEPAGE,
            )
        };
    }
}

/// A growable array of `T` in one reserved range of address space: elements are appended in
/// runs ([`DramArena::push`]) and never move or go away before the arena does, so a run's start
/// index stays valid for the arena's life.
pub struct DramArena<T> {
    base: NonNull<T>,
    /// Elements the reservation can hold.
    capacity: usize,
    /// Elements initialised and published (readers may look at `0..len`).
    len: AtomicUsize,
    /// Serialises appends; holds the bytes made accessible so far.
    grow: Mutex<usize>,
    reserved_bytes: usize,
}

// SAFETY: the arena owns its elements; sharing it shares `&T` (needs `T: Sync`) and appending
// moves `T` values in from any thread (needs `T: Send`).
unsafe impl<T: Send + Sync> Sync for DramArena<T> {}
// SAFETY: as above; the raw pointer is owned memory, not shared with anyone else.
unsafe impl<T: Send> Send for DramArena<T> {}

impl<T> std::fmt::Debug for DramArena<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DramArena")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl<T> DramArena<T> {
    /// An empty arena that can grow to `max_elements` (address space only: memory is taken as
    /// elements are appended).
    pub fn new(max_elements: usize) -> Result<Self> {
        let size = std::mem::size_of::<T>().max(1);
        let bytes = max_elements
            .checked_mul(size)
            .and_then(|b| b.checked_next_multiple_of(4096))
            .filter(|&b| b > 0)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("DRAM arena of {max_elements} elements"))
            })?;
        if std::mem::align_of::<T>() > 4096 {
            return Err(Error::InvalidArgument(
                "DRAM arena elements must align to at most a page".into(),
            ));
        }
        // Readable and writable from the start, without reserving swap (MAP_NORESERVE): memory
        // is taken page by page as runs are written, and appending never changes the mapping —
        // an `mprotect` would take the address-space lock for writing and wait behind any
        // thread populating memory (a region growing), stalling the appender for that long.
        // Under strict overcommit, where such a mapping counts in full, fall back to address
        // space only (PROT_NONE) and make runs accessible as they are appended.
        let (p, accessible) = match map_anonymous(bytes, libc::PROT_READ | libc::PROT_WRITE) {
            Ok(p) => (p, bytes),
            Err(_) => (
                map_anonymous(bytes, libc::PROT_NONE)
                    .map_err(|e| Error::io("reserve DRAM", None, e))?,
                0,
            ),
        };
        let base = p.cast::<T>();
        advise_huge_pages(p, bytes);
        Ok(DramArena {
            base,
            capacity: bytes / size,
            len: AtomicUsize::new(0),
            grow: Mutex::new(accessible),
            reserved_bytes: bytes,
        })
    }

    /// Appends `n` elements made by `init(i)` (`i` counting from 0 within the run) and returns
    /// the index of the first. Errors when the arena is full.
    pub fn push(&self, n: usize, mut init: impl FnMut(usize) -> T) -> Result<usize> {
        let mut accessible = self.grow.lock();
        let start = self.len.load(Ordering::Relaxed);
        let end = start
            .checked_add(n)
            .filter(|&e| e <= self.capacity)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "DRAM arena full: {start} + {n} elements exceed {}",
                    self.capacity
                ))
            })?;
        let need = (end * std::mem::size_of::<T>()).next_multiple_of(SMALL_PREFIX);
        let need = need.min(self.reserved_bytes);
        if need > *accessible {
            // SAFETY: the range lies inside our own reservation and holds nothing yet.
            let rc = unsafe {
                libc::mprotect(
                    self.base.as_ptr().cast::<u8>().add(*accessible).cast(),
                    need - *accessible,
                    libc::PROT_READ | libc::PROT_WRITE,
                )
            };
            if rc != 0 {
                return Err(Error::io(
                    "commit DRAM",
                    None,
                    std::io::Error::last_os_error(),
                ));
            }
            *accessible = need;
        }
        for i in 0..n {
            // SAFETY: `start + i < end <= capacity`: inside the reservation, properly aligned
            // (the base is page-aligned and T's alignment is at most a page), and not yet
            // published, so no one else reads or writes it.
            unsafe { self.base.as_ptr().add(start + i).write(init(i)) };
        }
        // Release: the writes above happen before any reader that sees the new length.
        self.len.store(end, Ordering::Release);
        Ok(start)
    }

    /// Elements `start..start + n`, if all are initialised.
    #[inline]
    pub fn get(&self, start: usize, n: usize) -> Option<&[T]> {
        let len = self.len.load(Ordering::Acquire);
        let end = start.checked_add(n)?;
        if end > len {
            return None;
        }
        // SAFETY: `start..end` is initialised and published (acquire above pairs with the
        // release in `push`), never moved or freed before `self`, and only ever accessed
        // through shared references.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(start), n) })
    }

    /// Elements initialised so far.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Whether no element was appended yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of DRAM the initialised elements take.
    pub fn bytes_used(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }

    /// Appends a run of `n` elements (see [`DramArena::push`]) and returns a handle to it that
    /// keeps the arena alive.
    pub fn push_run(self: &Arc<Self>, n: usize, init: impl FnMut(usize) -> T) -> Result<Run<T>> {
        let start = self.push(n, init)?;
        let slice = self
            .get(start, n)
            .ok_or_else(|| Error::InvalidArgument("DRAM arena run vanished".into()))?;
        Ok(Run {
            ptr: NonNull::from(slice).cast(),
            len: n,
            _arena: self.clone(),
        })
    }
}

/// A run of elements in a [`DramArena`], usable as a slice for as long as the handle lives.
pub struct Run<T> {
    ptr: NonNull<T>,
    len: usize,
    _arena: Arc<DramArena<T>>,
}

// SAFETY: a run is a shared view of arena elements: sending or sharing it shares `&T`.
unsafe impl<T: Send + Sync> Send for Run<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Run<T> {}

impl<T> std::ops::Deref for Run<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        // SAFETY: the run was initialised and published before this handle was made, arena
        // elements never move, and the arena outlives the handle (it holds an `Arc`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> std::fmt::Debug for Run<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run").field("len", &self.len).finish()
    }
}

/// Elements in DRAM: a run of a [`DramArena`] where one could be had, else an ordinary heap
/// allocation (a machine that refuses the reservation still works, without huge pages).
#[derive(Debug)]
pub enum DramSlice<T> {
    /// In an arena (huge pages where the kernel gives them).
    Arena(Run<T>),
    /// On the heap.
    Heap(Box<[T]>),
}

impl<T> DramSlice<T> {
    /// `n` elements made by `init`, in `arena` if it has room, else on the heap.
    pub fn new(
        arena: Option<&Arc<DramArena<T>>>,
        n: usize,
        mut init: impl FnMut(usize) -> T,
    ) -> Self {
        if let Some(run) = arena.and_then(|a| a.push_run(n, &mut init).ok()) {
            return DramSlice::Arena(run);
        }
        DramSlice::Heap((0..n).map(init).collect())
    }
}

impl<T> std::ops::Deref for DramSlice<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            DramSlice::Arena(r) => r,
            DramSlice::Heap(b) => b,
        }
    }
}

impl<T> Drop for DramArena<T> {
    fn drop(&mut self) {
        let len = *self.len.get_mut();
        // SAFETY: `0..len` holds initialised elements that nobody else can reach any more
        // (`&mut self`); each is dropped once.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), len));
            libc::munmap(self.base.as_ptr().cast(), self.reserved_bytes);
        }
    }
}

/// `len` atomic 64-bit words, all zero, in an anonymous mapping of their own: memory is taken
/// page by page only as words are written, so a large table that is mostly empty (the DRAM
/// level of a hash table, filters of levels not created yet) costs what it holds. Never moves.
pub struct ZeroedWords {
    base: NonNull<std::sync::atomic::AtomicU64>,
    len: usize,
    bytes: usize,
}

// SAFETY: the words are atomics, shared by `&` only; the mapping is owned by this value.
unsafe impl Sync for ZeroedWords {}
// SAFETY: as above; the raw pointer is owned memory, not shared with anyone else.
unsafe impl Send for ZeroedWords {}

impl ZeroedWords {
    /// `len` zero words (address space only until written).
    pub fn new(len: usize) -> Result<Self> {
        let bytes = len
            .max(1)
            .checked_mul(8)
            .and_then(|b| b.checked_next_multiple_of(4096))
            .ok_or_else(|| Error::InvalidArgument(format!("{len} DRAM words")))?;
        let p = map_anonymous(bytes, libc::PROT_READ | libc::PROT_WRITE)
            .map_err(|e| Error::io("reserve DRAM", None, e))?;
        advise_huge_pages(p, bytes);
        Ok(ZeroedWords {
            base: p.cast(),
            len,
            bytes,
        })
    }

    /// Bytes of address space held (memory is taken only as words are written).
    pub fn reserved_bytes(&self) -> usize {
        self.bytes
    }
}

impl std::ops::Deref for ZeroedWords {
    type Target = [std::sync::atomic::AtomicU64];
    fn deref(&self) -> &Self::Target {
        // SAFETY: the mapping holds `len` 8-aligned (page-aligned base) words, zero-filled by
        // the kernel — a valid `AtomicU64` bit pattern — and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl Drop for ZeroedWords {
    fn drop(&mut self) {
        // SAFETY: we own the mapping; no reference into it outlives `self` (Deref borrows it).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.bytes) };
    }
}

impl std::fmt::Debug for ZeroedWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZeroedWords")
            .field("len", &self.len)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn runs_are_appended_initialised_and_stay_put() {
        let a: DramArena<AtomicU64> = DramArena::new(1 << 20).unwrap();
        assert!(a.is_empty());
        let s1 = a.push(10, |i| AtomicU64::new(i as u64)).unwrap();
        let p1 = a.get(s1, 10).unwrap().as_ptr();
        let s2 = a.push(1000, |_| AtomicU64::new(7)).unwrap();
        assert_eq!((s1, s2), (0, 10));
        assert_eq!(a.get(s1, 10).unwrap().as_ptr(), p1, "runs never move");
        assert_eq!(a.get(s1, 10).unwrap()[9].load(Ordering::Relaxed), 9);
        assert_eq!(a.get(s2, 1000).unwrap()[999].load(Ordering::Relaxed), 7);
        assert!(a.get(s2, 1001).is_none(), "beyond what is initialised");
        assert_eq!(a.bytes_used(), 1010 * 8);
    }

    #[test]
    fn aligned_mappings_start_on_the_boundary_and_keep_their_length() {
        const ALIGN: usize = 2 << 20;
        for len in [4096, 3 * 4096, 5 << 20] {
            let p = map_anonymous_aligned(len, libc::PROT_READ | libc::PROT_WRITE, ALIGN).unwrap();
            assert_eq!(p.as_ptr() as usize % ALIGN, 0, "len {len}");
            // SAFETY: `p` maps `len` writable bytes that this test owns; unmapped at the end.
            unsafe {
                p.as_ptr().write(1);
                p.as_ptr().add(len - 1).write(2);
                assert_eq!(p.as_ptr().add(len - 1).read(), 2);
                // The whole length is mapped (madvise fails with ENOMEM on a hole).
                assert_eq!(libc::madvise(p.as_ptr().cast(), len, libc::MADV_NORMAL), 0);
                assert_eq!(libc::munmap(p.as_ptr().cast(), len), 0);
            }
        }
    }

    #[test]
    fn a_full_arena_is_an_error_and_stays_usable() {
        let a: DramArena<u64> = DramArena::new(512).unwrap();
        assert!(a.push(513, |_| 0).is_err());
        assert_eq!(a.push(512, |i| i as u64).unwrap(), 0);
        assert!(a.push(1, |_| 0).is_err());
        assert_eq!(a.get(0, 512).unwrap()[511], 511);
    }

    #[test]
    fn runs_keep_their_arena_alive_and_slices_fall_back_to_the_heap() {
        let a: Arc<DramArena<u64>> = Arc::new(DramArena::new(1 << 16).unwrap());
        let run = a.push_run(4, |i| i as u64 * 10).unwrap();
        drop(a);
        assert_eq!(&run[..], &[0, 10, 20, 30]);
        // A page holds 512 u64s: the arena's whole capacity.
        let small: Arc<DramArena<u64>> = Arc::new(DramArena::new(512).unwrap());
        let s = DramSlice::new(Some(&small), 1000, |i| i as u64);
        assert!(matches!(s, DramSlice::Heap(_)), "no room in the arena");
        assert_eq!(s[999], 999);
        let t = DramSlice::new(Some(&small), 8, |_| 1);
        assert!(matches!(t, DramSlice::Arena(_)));
        assert_eq!(t.iter().sum::<u64>(), 8);
    }

    #[test]
    fn elements_are_dropped_with_the_arena() {
        let counter = std::sync::Arc::new(());
        {
            let a: DramArena<std::sync::Arc<()>> = DramArena::new(100).unwrap();
            a.push(5, |_| counter.clone()).unwrap();
            assert_eq!(std::sync::Arc::strong_count(&counter), 6);
        }
        assert_eq!(std::sync::Arc::strong_count(&counter), 1);
    }
}
