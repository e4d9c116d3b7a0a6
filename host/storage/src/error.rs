/// A storage operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// RocksDB reported an error (I/O, a locked directory, ...).
    #[error("rocksdb: {0}")]
    Rocks(String),
    /// A record failed its checksum or could not be decoded.
    #[error("corrupt {what} record{}: {detail}", key.as_ref().map(|k| format!(" at {k}")).unwrap_or_default())]
    Corrupt {
        /// Which kind of record.
        what: &'static str,
        /// Where, if known.
        key: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// The data directory belongs to another node or another format.
    #[error("incompatible data directory: {0}")]
    Incompatible(String),
    /// Input from a peer or a file that this store will not take (a
    /// snapshot over its size limit, out of order, or malformed); nothing
    /// was changed.
    #[error("refused: {0}")]
    Refused(String),
    /// A crash point set by fault injection was reached
    /// ([`crate::Storage::crash_after_writes`]); nothing was written.
    #[error("crash point reached (fault injection): the write was not made")]
    Crashed,
    /// A write that does not wait found the store busy with another
    /// (the caller tries again later); nothing was written.
    #[error("busy: {0}")]
    Busy(&'static str),
}

impl From<rocksdb::Error> for StorageError {
    fn from(e: rocksdb::Error) -> Self {
        StorageError::Rocks(e.into_string())
    }
}
