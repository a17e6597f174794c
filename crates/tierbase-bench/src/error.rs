//! The bench crate's one error type.
//!
//! Owns: [`BenchError`] and the [`Result`] alias. Every variant says what went wrong in terms a
//! user can act on (which argument, which store, which file); the CLI prints it as one line.
//! Must not touch: anything else (no logging, no recovery).

use std::path::PathBuf;

/// Result alias used throughout the bench crate.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Everything that can go wrong while benchmarking or reporting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A parameter is outside what the harness accepts (0 threads, value too small, ...).
    #[error("{0}")]
    InvalidArgument(String),

    /// No store of this name is registered.
    #[error("unknown store '{name}' (known: {known})")]
    UnknownStore {
        /// Requested name.
        name: String,
        /// Comma-separated known names.
        known: String,
    },

    /// The store exists but this build leaves it out (a cargo feature is off).
    #[error("store '{name}' is not in this build: rebuild with `--features {feature}` ({hint})")]
    StoreNotBuilt {
        /// Requested name.
        name: String,
        /// The cargo feature that enables it.
        feature: &'static str,
        /// Set-up hint.
        hint: &'static str,
    },

    /// No workload of this name exists.
    #[error("unknown workload '{name}' (known: {known})")]
    UnknownWorkload {
        /// Requested name.
        name: String,
        /// Comma-separated known names.
        known: String,
    },

    /// The store cannot do what was asked (ordered scans on a hash store, emulation, ...).
    #[error("store '{store}' does not support {operation}")]
    Unsupported {
        /// The store's name.
        store: String,
        /// What it cannot do.
        operation: String,
    },

    /// A store operation failed.
    #[error("store '{store}': {operation} failed: {detail}")]
    Store {
        /// The store's name.
        store: String,
        /// The operation ("open", "put", "get", ...).
        operation: &'static str,
        /// The store's own message.
        detail: String,
    },

    /// An operating-system call failed.
    #[error("{op} {}: {source}", .path.display())]
    Io {
        /// What we were doing ("create directory", "write", ...).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A workload TOML file could not be read as a workload.
    #[error("{}: invalid workload file: {detail}", .path.display())]
    BadWorkloadFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// A file given to the report is not a benchmark result file.
    #[error("{}: not a valid tierbase benchmark result: {detail}", .path.display())]
    MalformedResult {
        /// The file.
        path: PathBuf,
        /// What is wrong (with line and column for JSON syntax errors).
        detail: String,
    },

    /// A result file was written by an incompatible format version.
    #[error(
        "{}: result format version {found} is not supported (this build reads version {supported})",
        .path.display()
    )]
    UnsupportedResultVersion {
        /// The file.
        path: PathBuf,
        /// Version found.
        found: u64,
        /// Version this build reads.
        supported: u32,
    },

    /// A benchmark worker thread panicked (a bug in a store or in the harness).
    #[error("a benchmark worker thread panicked: {0}")]
    WorkerPanicked(String),

    /// An error from the tierbase engine (device profiles, emulation, ...).
    #[error(transparent)]
    Tierbase(#[from] tierbase::Error),
}

impl BenchError {
    /// Shorthand for [`BenchError::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        BenchError::InvalidArgument(msg.into())
    }

    /// Shorthand for [`BenchError::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// Shorthand for [`BenchError::Unsupported`].
    pub fn unsupported(store: impl Into<String>, operation: impl Into<String>) -> Self {
        BenchError::Unsupported {
            store: store.into(),
            operation: operation.into(),
        }
    }

    /// Whether this is the typed "the store cannot do that" error (for example a scan on a
    /// store without ordered scans).
    pub fn is_unsupported(&self) -> bool {
        matches!(self, BenchError::Unsupported { .. })
    }
}
