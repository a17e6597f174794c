//! The RocksDB C API (`rocksdb/c.h`), declared by hand, and safe wrappers around it.
//!
//! Owns: every `unsafe` line of the RocksDB baseline — the `extern "C"` declarations of the
//! functions used, and owning wrappers ([`Db`], [`WriteOptions`], [`ReadOptions`],
//! [`DbIterator`]) that free what they allocate and turn `errptr` strings into `Err(String)`.
//! Must not touch: benchmarking logic (see `rocksdb.rs`).
//!
//! Links the system library (`-lrocksdb`; Debian: `librocksdb-dev`), not a vendored build. The
//! declarations are copied from `rocksdb/c.h` of RocksDB 7.8.3 (Debian 12, the version tested);
//! these long-standing functions have kept their signatures in later releases.

use std::ffi::{CStr, CString, c_char, c_int, c_uchar, c_void};
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

/// Opaque `rocksdb_t`.
#[repr(C)]
pub struct RawDb {
    _private: [u8; 0],
}
/// Opaque `rocksdb_options_t`.
#[repr(C)]
pub struct RawOptions {
    _private: [u8; 0],
}
/// Opaque `rocksdb_block_based_table_options_t`.
#[repr(C)]
pub struct RawTableOptions {
    _private: [u8; 0],
}
/// Opaque `rocksdb_cache_t`.
#[repr(C)]
pub struct RawCache {
    _private: [u8; 0],
}
/// Opaque `rocksdb_filterpolicy_t`.
#[repr(C)]
pub struct RawFilterPolicy {
    _private: [u8; 0],
}
/// Opaque `rocksdb_writeoptions_t`.
#[repr(C)]
pub struct RawWriteOptions {
    _private: [u8; 0],
}
/// Opaque `rocksdb_readoptions_t`.
#[repr(C)]
pub struct RawReadOptions {
    _private: [u8; 0],
}
/// Opaque `rocksdb_iterator_t`.
#[repr(C)]
pub struct RawIterator {
    _private: [u8; 0],
}
/// Opaque `rocksdb_pinnableslice_t`.
#[repr(C)]
pub struct RawPinnableSlice {
    _private: [u8; 0],
}

/// `rocksdb_block_based_table_index_type_two_level_index_search` (c.h).
const INDEX_TWO_LEVEL: c_int = 2;

#[link(name = "rocksdb")]
unsafe extern "C" {
    fn rocksdb_options_create() -> *mut RawOptions;
    fn rocksdb_options_destroy(opt: *mut RawOptions);
    fn rocksdb_options_set_create_if_missing(opt: *mut RawOptions, v: c_uchar);
    fn rocksdb_options_increase_parallelism(opt: *mut RawOptions, total_threads: c_int);
    fn rocksdb_options_set_use_direct_reads(opt: *mut RawOptions, v: c_uchar);
    fn rocksdb_options_set_use_direct_io_for_flush_and_compaction(opt: *mut RawOptions, v: c_uchar);
    fn rocksdb_options_set_write_buffer_size(opt: *mut RawOptions, bytes: usize);
    fn rocksdb_options_set_max_write_buffer_number(opt: *mut RawOptions, n: c_int);
    fn rocksdb_block_based_options_set_cache_index_and_filter_blocks(
        options: *mut RawTableOptions,
        v: c_uchar,
    );
    fn rocksdb_block_based_options_set_index_type(options: *mut RawTableOptions, v: c_int);
    fn rocksdb_block_based_options_set_partition_filters(options: *mut RawTableOptions, v: c_uchar);
    fn rocksdb_block_based_options_set_pin_top_level_index_and_filter(
        options: *mut RawTableOptions,
        v: c_uchar,
    );
    fn rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(
        options: *mut RawTableOptions,
        v: c_uchar,
    );
    fn rocksdb_options_set_block_based_table_factory(
        opt: *mut RawOptions,
        table_options: *mut RawTableOptions,
    );
    fn rocksdb_block_based_options_create() -> *mut RawTableOptions;
    fn rocksdb_block_based_options_destroy(options: *mut RawTableOptions);
    fn rocksdb_block_based_options_set_block_cache(
        options: *mut RawTableOptions,
        block_cache: *mut RawCache,
    );
    fn rocksdb_block_based_options_set_filter_policy(
        options: *mut RawTableOptions,
        filter_policy: *mut RawFilterPolicy,
    );
    fn rocksdb_filterpolicy_create_bloom_full(bits_per_key: f64) -> *mut RawFilterPolicy;
    fn rocksdb_cache_create_lru(capacity: usize) -> *mut RawCache;
    fn rocksdb_cache_destroy(cache: *mut RawCache);
    fn rocksdb_open(
        opt: *const RawOptions,
        name: *const c_char,
        errptr: *mut *mut c_char,
    ) -> *mut RawDb;
    fn rocksdb_close(db: *mut RawDb);

    fn rocksdb_writeoptions_create() -> *mut RawWriteOptions;
    fn rocksdb_writeoptions_destroy(opt: *mut RawWriteOptions);
    fn rocksdb_writeoptions_set_sync(opt: *mut RawWriteOptions, v: c_uchar);
    fn rocksdb_writeoptions_disable_WAL(opt: *mut RawWriteOptions, disable: c_int);
    fn rocksdb_readoptions_create() -> *mut RawReadOptions;
    fn rocksdb_readoptions_destroy(opt: *mut RawReadOptions);

    fn rocksdb_put(
        db: *mut RawDb,
        opt: *const RawWriteOptions,
        key: *const c_char,
        keylen: usize,
        val: *const c_char,
        vallen: usize,
        errptr: *mut *mut c_char,
    );
    fn rocksdb_delete(
        db: *mut RawDb,
        opt: *const RawWriteOptions,
        key: *const c_char,
        keylen: usize,
        errptr: *mut *mut c_char,
    );
    fn rocksdb_get_pinned(
        db: *mut RawDb,
        opt: *const RawReadOptions,
        key: *const c_char,
        keylen: usize,
        errptr: *mut *mut c_char,
    ) -> *mut RawPinnableSlice;
    fn rocksdb_pinnableslice_value(
        slice: *const RawPinnableSlice,
        vlen: *mut usize,
    ) -> *const c_char;
    fn rocksdb_pinnableslice_destroy(slice: *mut RawPinnableSlice);

    fn rocksdb_create_iterator(db: *mut RawDb, opt: *const RawReadOptions) -> *mut RawIterator;
    fn rocksdb_iter_destroy(it: *mut RawIterator);
    fn rocksdb_iter_seek(it: *mut RawIterator, k: *const c_char, klen: usize);
    fn rocksdb_iter_valid(it: *const RawIterator) -> c_uchar;
    fn rocksdb_iter_next(it: *mut RawIterator);
    fn rocksdb_iter_key(it: *const RawIterator, klen: *mut usize) -> *const c_char;
    fn rocksdb_iter_value(it: *const RawIterator, vlen: *mut usize) -> *const c_char;
    fn rocksdb_iter_get_error(it: *const RawIterator, errptr: *mut *mut c_char);

    fn rocksdb_free(ptr: *mut c_void);
}

/// Turns a RocksDB `errptr` into a message and frees it; `Ok` when no error was set.
fn take_error(err: *mut c_char) -> Result<(), String> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: RocksDB sets `errptr` to a NUL-terminated string it allocated with malloc
    // (strdup); it stays valid until we free it just below, and nothing else holds it.
    let msg = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `err` came from RocksDB's allocator and is freed exactly once, with rocksdb_free.
    unsafe { rocksdb_free(err.cast()) };
    Err(msg)
}

/// Borrows `len` bytes at `ptr` returned by RocksDB (empty when `ptr` is null).
///
/// # Safety
/// `ptr` must be null or point to `len` readable bytes that stay valid and unmodified for `'a`.
unsafe fn bytes<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: guaranteed by the caller (see the function's safety section).
    unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
}

/// An open RocksDB database. Closed on drop.
#[derive(Debug)]
pub struct Db {
    raw: NonNull<RawDb>,
}

// SAFETY: a RocksDB `DB*` is thread-safe: the C++ API documents concurrent Put/Get/Delete and
// iterator creation from many threads without external synchronisation; `Db` only hands out
// shared access and closes the handle once, on drop, when no borrow remains.
unsafe impl Send for Db {}
// SAFETY: see `Send`: every method takes `&self` and RocksDB synchronises internally.
unsafe impl Sync for Db {}

/// What [`Db::open`] changes from RocksDB's default options.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    /// `increase_parallelism(n)`: background flush and compaction threads.
    pub background_threads: i32,
    /// A block cache of this many bytes (RocksDB's default otherwise).
    pub block_cache_bytes: Option<usize>,
    /// `O_DIRECT` for reads, flushes and compactions, so that the OS page cache does not
    /// cache the files beyond the block cache (not on tmpfs, which refuses `O_DIRECT`).
    pub direct_io: bool,
    /// Memtables of this many bytes, at most two (RocksDB's default otherwise: 64 MiB, two).
    pub write_buffer_bytes: Option<usize>,
    /// Index and filter blocks live in the block cache (counted in its capacity) instead of
    /// beside it.
    pub cache_index_and_filter_blocks: bool,
    /// A Bloom filter of this many bits per key in every table (none by RocksDB's default).
    pub bloom_bits_per_key: Option<f64>,
}

impl Db {
    /// Opens (creating if missing) the database at `path` with RocksDB's default options plus
    /// `create_if_missing` and what `o` asks for.
    pub fn open(path: &Path, o: OpenOptions) -> Result<Db, String> {
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("path {} contains a NUL byte", path.display()))?;
        // SAFETY: plain constructor; returns a new options object we own (never null in
        // RocksDB, checked anyway below).
        let opts = unsafe { rocksdb_options_create() };
        if opts.is_null() {
            return Err("rocksdb_options_create returned null".into());
        }
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: `opts` is a live options object; `cpath` is NUL-terminated and outlives the
        // call; `err` is a valid out-pointer. The options are copied by rocksdb_open, so they
        // are destroyed right after.
        let raw = unsafe {
            rocksdb_options_set_create_if_missing(opts, 1);
            rocksdb_options_increase_parallelism(opts, o.background_threads.max(1));
            if o.direct_io {
                rocksdb_options_set_use_direct_reads(opts, 1);
                rocksdb_options_set_use_direct_io_for_flush_and_compaction(opts, 1);
            }
            if o.block_cache_bytes.is_some() || o.bloom_bits_per_key.is_some() {
                // The options copy the table options: our handle can go once handed over.
                let table = rocksdb_block_based_options_create();
                if let Some(bytes) = o.block_cache_bytes {
                    // The table options and the options each keep their own reference (a
                    // shared_ptr) to the cache: our handle can go too.
                    let cache = rocksdb_cache_create_lru(bytes);
                    rocksdb_block_based_options_set_block_cache(table, cache);
                    rocksdb_cache_destroy(cache);
                }
                if let Some(bits) = o.bloom_bits_per_key {
                    // The table options take the policy over (into their shared_ptr): it is
                    // not destroyed here.
                    let policy = rocksdb_filterpolicy_create_bloom_full(bits);
                    rocksdb_block_based_options_set_filter_policy(table, policy);
                }
                if o.cache_index_and_filter_blocks {
                    rocksdb_block_based_options_set_cache_index_and_filter_blocks(table, 1);
                    // What RocksDB's wiki ("Partitioned Index/Filters") sets with them: a
                    // table's index and filter in partitions of a block each, under a top
                    // level that stays pinned, as do level 0's. Unpartitioned, one table's
                    // filter and index are single blocks of hundreds of KiB that data blocks
                    // evict from a small cache's shard, and nearly every read then loads one
                    // again (YCSB C 4x beyond a 24 MiB budget: 3 k against 30 k reads/s,
                    // docs/BENCHMARKS.md Figure 34).
                    rocksdb_block_based_options_set_index_type(table, INDEX_TWO_LEVEL);
                    rocksdb_block_based_options_set_partition_filters(table, 1);
                    rocksdb_block_based_options_set_pin_top_level_index_and_filter(table, 1);
                    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(
                        table, 1,
                    );
                }
                rocksdb_options_set_block_based_table_factory(opts, table);
                rocksdb_block_based_options_destroy(table);
            }
            if let Some(bytes) = o.write_buffer_bytes {
                rocksdb_options_set_write_buffer_size(opts, bytes);
                rocksdb_options_set_max_write_buffer_number(opts, 2);
            }
            let db = rocksdb_open(opts, cpath.as_ptr(), &mut err);
            rocksdb_options_destroy(opts);
            db
        };
        take_error(err)?;
        NonNull::new(raw)
            .map(|raw| Db { raw })
            .ok_or_else(|| "rocksdb_open returned null without an error".into())
    }

    /// Writes `key` = `value`.
    pub fn put(&self, opts: &WriteOptions, key: &[u8], value: &[u8]) -> Result<(), String> {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: the handles are live for the call; key and value pointers are valid for
        // their lengths (RocksDB copies them); `err` is a valid out-pointer.
        unsafe {
            rocksdb_put(
                self.raw.as_ptr(),
                opts.raw.as_ptr(),
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            );
        }
        take_error(err)
    }

    /// Deletes `key` (a no-op when absent).
    pub fn delete(&self, opts: &WriteOptions, key: &[u8]) -> Result<(), String> {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: live handles; `key` valid for its length; `err` a valid out-pointer.
        unsafe {
            rocksdb_delete(
                self.raw.as_ptr(),
                opts.raw.as_ptr(),
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            );
        }
        take_error(err)
    }

    /// Reads `key` into `out` (when `out` is given); `false` when absent.
    pub fn get(
        &self,
        opts: &ReadOptions,
        key: &[u8],
        out: Option<&mut Vec<u8>>,
    ) -> Result<bool, String> {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: live handles; `key` valid for its length; `err` a valid out-pointer. The
        // returned slice (or null) is owned by us and destroyed below.
        let slice = unsafe {
            rocksdb_get_pinned(
                self.raw.as_ptr(),
                opts.raw.as_ptr(),
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            )
        };
        if let Err(e) = take_error(err) {
            if !slice.is_null() {
                // SAFETY: a non-null slice from rocksdb_get_pinned is ours to destroy, once.
                unsafe { rocksdb_pinnableslice_destroy(slice) };
            }
            return Err(e);
        }
        if slice.is_null() {
            return Ok(false);
        }
        if let Some(out) = out {
            out.clear();
            let mut len = 0usize;
            // SAFETY: `slice` is a live pinnable slice; the value pointer and length it
            // returns stay valid until the slice is destroyed, after the copy.
            unsafe {
                let ptr = rocksdb_pinnableslice_value(slice, &mut len);
                out.extend_from_slice(bytes(ptr, len));
            }
        }
        // SAFETY: `slice` is non-null, ours, and destroyed exactly once here.
        unsafe { rocksdb_pinnableslice_destroy(slice) };
        Ok(true)
    }

    /// A new iterator over the database (unpositioned: call [`DbIterator::seek`]).
    pub fn iter<'a>(&'a self, opts: &'a ReadOptions) -> Result<DbIterator<'a>, String> {
        // SAFETY: live handles; the iterator must not outlive the DB or the read options,
        // which the lifetime `'a` on `DbIterator` enforces.
        let raw = unsafe { rocksdb_create_iterator(self.raw.as_ptr(), opts.raw.as_ptr()) };
        NonNull::new(raw)
            .map(|raw| DbIterator {
                raw,
                _borrow: PhantomData,
            })
            .ok_or_else(|| "rocksdb_create_iterator returned null".into())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: the handle is live and closed exactly once; iterators and clients borrow
        // `Db`, so none remains when it drops.
        unsafe { rocksdb_close(self.raw.as_ptr()) };
    }
}

/// Owned `rocksdb_writeoptions_t`.
#[derive(Debug)]
pub struct WriteOptions {
    raw: NonNull<RawWriteOptions>,
}

// SAFETY: write options are a plain settings struct with no thread affinity; moving the owning
// handle to another thread is fine (it is used by one thread at a time through `&self`).
unsafe impl Send for WriteOptions {}

impl WriteOptions {
    /// WAL on; `sync` chooses whether each write fsyncs the WAL before returning.
    pub fn new(sync: bool) -> Result<Self, String> {
        // SAFETY: plain constructor returning an object we own.
        let raw = unsafe { rocksdb_writeoptions_create() };
        let raw = NonNull::new(raw).ok_or("rocksdb_writeoptions_create returned null")?;
        // SAFETY: `raw` is a live write-options object.
        unsafe {
            rocksdb_writeoptions_set_sync(raw.as_ptr(), u8::from(sync));
            rocksdb_writeoptions_disable_WAL(raw.as_ptr(), 0);
        }
        Ok(WriteOptions { raw })
    }
}

impl Drop for WriteOptions {
    fn drop(&mut self) {
        // SAFETY: owned, live, destroyed exactly once.
        unsafe { rocksdb_writeoptions_destroy(self.raw.as_ptr()) };
    }
}

/// Owned `rocksdb_readoptions_t` (defaults).
#[derive(Debug)]
pub struct ReadOptions {
    raw: NonNull<RawReadOptions>,
}

// SAFETY: read options are a plain settings struct with no thread affinity (see WriteOptions).
unsafe impl Send for ReadOptions {}

impl ReadOptions {
    /// Default read options.
    pub fn new() -> Result<Self, String> {
        // SAFETY: plain constructor returning an object we own.
        let raw = unsafe { rocksdb_readoptions_create() };
        NonNull::new(raw)
            .map(|raw| ReadOptions { raw })
            .ok_or_else(|| "rocksdb_readoptions_create returned null".into())
    }
}

impl Drop for ReadOptions {
    fn drop(&mut self) {
        // SAFETY: owned, live, destroyed exactly once.
        unsafe { rocksdb_readoptions_destroy(self.raw.as_ptr()) };
    }
}

/// A RocksDB iterator borrowing its database and read options.
#[derive(Debug)]
pub struct DbIterator<'a> {
    raw: NonNull<RawIterator>,
    _borrow: PhantomData<&'a Db>,
}

impl DbIterator<'_> {
    /// Positions at the first key `>= key`.
    pub fn seek(&mut self, key: &[u8]) {
        // SAFETY: live iterator; `key` valid for its length (RocksDB copies what it keeps).
        unsafe { rocksdb_iter_seek(self.raw.as_ptr(), key.as_ptr().cast(), key.len()) }
    }

    /// Whether the iterator is on a record.
    pub fn valid(&self) -> bool {
        // SAFETY: live iterator.
        unsafe { rocksdb_iter_valid(self.raw.as_ptr()) != 0 }
    }

    /// Moves to the next record.
    pub fn next(&mut self) {
        if self.valid() {
            // SAFETY: live iterator, and valid (RocksDB requires `Valid()` before `Next()`).
            unsafe { rocksdb_iter_next(self.raw.as_ptr()) }
        }
    }

    /// The current key and value, borrowed until the iterator moves (`None` when not valid).
    pub fn entry(&self) -> Option<(&[u8], &[u8])> {
        if !self.valid() {
            return None;
        }
        let (mut klen, mut vlen) = (0usize, 0usize);
        // SAFETY: the iterator is live and valid; the key and value pointers it returns stay
        // valid until the next seek/next/destroy, all of which need `&mut self`, so the
        // returned borrows (tied to `&self`) cannot outlive them.
        unsafe {
            let k = rocksdb_iter_key(self.raw.as_ptr(), &mut klen);
            let v = rocksdb_iter_value(self.raw.as_ptr(), &mut vlen);
            Some((bytes(k, klen), bytes(v, vlen)))
        }
    }

    /// The iterator's error status (I/O or corruption met while iterating).
    pub fn status(&self) -> Result<(), String> {
        let mut err: *mut c_char = std::ptr::null_mut();
        // SAFETY: live iterator; `err` a valid out-pointer.
        unsafe { rocksdb_iter_get_error(self.raw.as_ptr(), &mut err) };
        take_error(err)
    }
}

impl Drop for DbIterator<'_> {
    fn drop(&mut self) {
        // SAFETY: owned, live, destroyed exactly once, before the borrowed DB (lifetime `'a`).
        unsafe { rocksdb_iter_destroy(self.raw.as_ptr()) };
    }
}
