//! The server's error type.

/// What can stop the server from starting or running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The store failed to open, sync or close.
    #[error(transparent)]
    Store(#[from] tierbase::Error),
    /// A socket or runtime failure.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A configuration the server refuses (unknown store, unsafe bind, bad limit).
    #[error("{0}")]
    Config(String),
}

impl ServerError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        ServerError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result with [`ServerError`].
pub type Result<T, E = ServerError> = std::result::Result<T, E>;
