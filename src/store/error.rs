//! What can go wrong with the history store, each error naming the store file.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

/// A history store failure. `path` is the store file (`:memory:` for an
/// in-memory store).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The [`StoreConfig`](super::StoreConfig) itself is unusable.
    #[error("history store {}: invalid config: {reason}", path.display())]
    InvalidConfig { path: PathBuf, reason: String },
    /// The file could not be opened or created (missing directory, permissions, ...).
    #[error("history store {}: cannot open: {source}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Box<redb::DatabaseError>,
    },
    /// Another process (or another `Store` in this one) has the file open.
    #[error("history store {}: already open by another process or Store", path.display())]
    Locked { path: PathBuf },
    /// The file is not a readable redb database, or its contents are damaged.
    #[error("history store {}: corrupt or not a history store: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    /// The file was written by an incompatible version of the store format.
    #[error("history store {}: unsupported format: {detail}", path.display())]
    Format { path: PathBuf, detail: String },
    /// The file holds history at another resolution; reading it at the
    /// configured one would silently stretch or squash time.
    #[error(
        "history store {}: holds history at {stored:?} resolution but the config asks for {configured:?}; \
         use the stored resolution or a new file",
        path.display()
    )]
    ResolutionMismatch { path: PathBuf, stored: Duration, configured: Duration },
    /// A time before 1970 (bucket indexes start at the Unix epoch).
    #[error("history store {}: {what} is before the Unix epoch", path.display())]
    BeforeEpoch { path: PathBuf, what: &'static str },
    /// A range read would need more buckets than one answer may hold.
    #[error("history store {}: range of {buckets} buckets exceeds the limit of {limit}", path.display())]
    RangeTooLarge { path: PathBuf, buckets: u64, limit: u64 },
    /// Closed after an I/O error; the next flush reopens it.
    #[error("history store {}: closed after an I/O error (disk full or read-only?); reopened at the next flush", path.display())]
    Reopening { path: PathBuf },
    /// No more series ids (u32) are free.
    #[error("history store {}: series id space exhausted", path.display())]
    TooManySeries { path: PathBuf },
    /// A database operation failed (I/O error, full disk, ...).
    #[error("history store {}: {op}: {source}", path.display())]
    Db {
        path: PathBuf,
        op: &'static str,
        // Boxed: redb's error is large, and every Result here carries it.
        #[source]
        source: Box<redb::Error>,
    },
}

impl StoreError {
    /// Wrap a redb error from operation `op`; damage reported by redb becomes [`StoreError::Corrupt`].
    pub(super) fn db(path: &Path, op: &'static str, e: impl Into<redb::Error>) -> StoreError {
        match e.into() {
            redb::Error::Corrupted(detail) => {
                StoreError::Corrupt { path: path.to_owned(), detail: format!("{op}: {detail}") }
            }
            // A table of ours with other types: someone else's redb file.
            e @ redb::Error::TableTypeMismatch { .. } => {
                StoreError::Corrupt { path: path.to_owned(), detail: format!("{op}: not a history store: {e}") }
            }
            source => StoreError::Db { path: path.to_owned(), op, source: Box::new(source) },
        }
    }
}

/// `.ctx(path, op)?` on any redb result.
pub(super) trait Ctx<T> {
    fn ctx(self, path: &Path, op: &'static str) -> Result<T, StoreError>;
}

impl<T, E: Into<redb::Error>> Ctx<T> for Result<T, E> {
    fn ctx(self, path: &Path, op: &'static str) -> Result<T, StoreError> {
        self.map_err(|e| StoreError::db(path, op, e))
    }
}
