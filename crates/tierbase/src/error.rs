//! The crate's one error type.
//!
//! Every fallible library call returns [`Result`]. Variants say what went wrong in terms a user
//! can act on (which path, which offset, which limit); the CLI prints them as one line.

use std::path::PathBuf;

use crate::device::DurabilityMode;

/// Result alias used throughout tierbase.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tierbase.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("{op} {}: {source}", path_display(.path))]
    Io {
        /// What we were doing ("open", "mmap", "fallocate", ...).
        op: &'static str,
        /// The file involved, when there is one.
        path: Option<PathBuf>,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The device or file system has no space left for the requested size.
    #[error("{}", device_full(.path, *.requested))]
    DeviceFull {
        /// The file that could not grow.
        path: Option<PathBuf>,
        /// Bytes the file was to grow by (0: not known, e.g. a write that found no space).
        requested: u64,
    },

    /// A region was asked to grow beyond the address space reserved for it.
    #[error("region limit reached: {requested} bytes requested, at most {limit} bytes reserved")]
    RegionLimit {
        /// Requested length in bytes.
        requested: u64,
        /// The reservation in bytes.
        limit: u64,
    },

    /// A request was not aligned as the device requires.
    #[error(
        "misaligned request: offset {offset}, length {len} (both must be multiples of {alignment})"
    )]
    Misaligned {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Required alignment in bytes.
        alignment: u64,
    },

    /// A request touched bytes beyond the end of a device or region.
    #[error("out of range: offset {offset} + length {len} exceeds size {size}")]
    OutOfRange {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Size of the device or region.
        size: u64,
    },

    /// A file is shorter than its own header says it must be.
    #[error("{}: file is truncated: {actual} bytes on disk, {expected} expected", .path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header requires.
        expected: u64,
        /// Bytes actually present.
        actual: u64,
    },

    /// A file is too small to hold even a header.
    #[error("{}: file too small ({actual} bytes, at least {minimum} needed)", .path.display())]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// Its size.
        actual: u64,
        /// The minimum.
        minimum: u64,
    },

    /// A file does not start with the expected magic number: it is not ours, or it is damaged.
    #[error("{}: not a {expected} file (bad magic number)", path_display(.path))]
    BadMagic {
        /// The file.
        path: Option<PathBuf>,
        /// What kind of file was expected.
        expected: &'static str,
    },

    /// A file was written by an incompatible format version.
    #[error("{}: unsupported {what} format version {found} (this build reads version {supported})", path_display(.path))]
    UnsupportedVersion {
        /// The file.
        path: Option<PathBuf>,
        /// Which format.
        what: &'static str,
        /// Version found.
        found: u32,
        /// Version this build understands.
        supported: u32,
    },

    /// On-media data failed a consistency check.
    #[error("corrupt data{}: {detail}", path_suffix(.path))]
    Corrupt {
        /// The file, when known.
        path: Option<PathBuf>,
        /// What is wrong, where.
        detail: String,
    },

    /// The caller asked for a durability mode the medium cannot give.
    #[error("durability mode {requested} is not available here (best available: {available})")]
    DurabilityUnavailable {
        /// Mode requested.
        requested: DurabilityMode,
        /// Strongest mode available on this medium.
        available: DurabilityMode,
    },

    /// A device profile name is not in the catalogue.
    #[error("unknown device profile '{name}' (known: {known})")]
    UnknownProfile {
        /// Requested name.
        name: String,
        /// Comma-separated list of known names.
        known: String,
    },

    /// A device profile or catalogue file is malformed.
    #[error("invalid device profile{}: {detail}", path_suffix(.path))]
    InvalidProfile {
        /// The catalogue file, when the profile came from one.
        path: Option<PathBuf>,
        /// What is wrong.
        detail: String,
    },

    /// A key is empty; stores require at least one byte.
    #[error("empty key: keys must have at least one byte")]
    EmptyKey,

    /// A key is longer than the store accepts.
    #[error("key too large: {len} bytes (this store accepts at most {max})")]
    KeyTooLarge {
        /// Length given.
        len: usize,
        /// Largest accepted length.
        max: usize,
    },

    /// A value is longer than the store accepts.
    #[error("value too large: {len} bytes (this store accepts at most {max})")]
    ValueTooLarge {
        /// Length given.
        len: usize,
        /// Largest accepted length.
        max: usize,
    },

    /// A fixed-size store was given a key or value of the wrong size.
    #[error("wrong {what} size: {len} bytes (this store holds fixed {expected}-byte {what}s)")]
    WrongSize {
        /// "key" or "value".
        what: &'static str,
        /// Length given.
        len: usize,
        /// The store's fixed size.
        expected: usize,
    },

    /// The store cannot take more data: its region may not grow (growth disabled, the
    /// reservation exhausted, the device full), or a structure of fixed size is full (a
    /// Plush subtree's last level, every frame of a buffer pool); `reason` says which.
    /// Existing data is untouched.
    #[error("store full: {reason} ({used} of {capacity} bytes in use)")]
    StoreFull {
        /// Bytes in use.
        used: u64,
        /// Current capacity.
        capacity: u64,
        /// Why it cannot grow.
        reason: String,
    },

    /// A store was opened with options that contradict how it was created.
    #[error("{}: store was created with {found}, but {requested} was requested", path_display(.path))]
    LayoutMismatch {
        /// The store file.
        path: Option<PathBuf>,
        /// What the file says.
        found: String,
        /// What the caller asked for.
        requested: String,
    },

    /// An earlier write failed to persist, so the store refuses writes: media may hold a write
    /// whose fate is unknown, and only a reopen (recovery) can say what is durable. Reads go
    /// on.
    #[error("{}: store is read-only after a failed write ({reason}); reopen it to recover", path_display(.path))]
    ReadOnly {
        /// The store file.
        path: Option<PathBuf>,
        /// The error that made it read-only.
        reason: String,
    },

    /// The store was opened read-only (a snapshot, a read-only mount): it serves reads and
    /// refuses every write; nothing changes its files.
    #[error("{}: opened read-only: writes are refused (open it without --read-only to write)", path_display(.path))]
    OpenedReadOnly {
        /// The store file.
        path: Option<PathBuf>,
    },

    /// Another open handle (in this or another process) holds the file's lock.
    #[error("{}: in use: {holder} holds its lock", .path.display())]
    Locked {
        /// The file.
        path: PathBuf,
        /// Who holds the lock, as far as the system says ("process 1234", or "another open
        /// handle").
        holder: String,
    },

    /// A parameter is outside what the call accepts.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A feature this call needs is not available on this machine or build.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

/// Reads that cannot fail (a page already in memory, see `buffer::PageBytes`) share code
/// with reads that can.
impl From<std::convert::Infallible> for Error {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

impl Error {
    /// Wraps an I/O error with the operation and path it came from, mapping `ENOSPC` to
    /// [`Error::DeviceFull`] so that callers can tell a full device from other failures.
    pub fn io(op: &'static str, path: Option<&std::path::Path>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.map(std::path::Path::to_path_buf),
            source,
        }
    }

    /// What a failure that makes a store read-only is recorded as: a [`Error::ReadOnly`]'s
    /// own reason (its message would nest "read-only after a failed write (…)" once more in
    /// each layer that records it: log, tree, store), else the error's message.
    pub fn failure_reason(&self) -> String {
        match self {
            Error::ReadOnly { reason, .. } => reason.clone(),
            e => e.to_string(),
        }
    }

    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(path: Option<&std::path::Path>, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.map(std::path::Path::to_path_buf),
            detail: detail.into(),
        }
    }
}

fn device_full(path: &Option<PathBuf>, requested: u64) -> String {
    match requested {
        0 => format!("device full: no space left for {}", path_display(path)),
        n => format!(
            "device full: no room for {n} more bytes of {}",
            path_display(path)
        ),
    }
}

fn path_display(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => p.display().to_string(),
        None => "<memory>".to_string(),
    }
}

fn path_suffix(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!(" in {}", p.display()),
        None => String::new(),
    }
}

/// A TOML error as one line ("line L, column C: message"); the `Display` form of
/// `toml::de::Error` spans several lines with a source excerpt, which a CLI must not print.
pub fn one_line_toml_error(e: &toml::de::Error, text: &str) -> String {
    let message = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}
