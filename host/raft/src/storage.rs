//! The core's read-only view of durable storage.

use crate::error::StorageError;
use crate::types::{Entry, HardState, Index, Membership, SnapshotMeta, Term};

/// Read access to what the driver has persisted (`etcd-io/raft:storage.go`,
/// `tikv/raft-rs:src/storage.rs`). The core never writes through it; it keeps
/// unpersisted entries in its own unstable log and tells the driver what to
/// write through [`Ready`](crate::Ready).
///
/// Contract: after the driver persisted a `Ready` and before it calls
/// [`advance`](crate::RawNode::advance), every method must reflect that write.
pub trait LogReader {
    /// The persisted hard state and the *base* membership: the membership of
    /// the latest snapshot (`snapshot_meta().membership`), or the bootstrap
    /// configuration when there is no snapshot (empty for a node that joins
    /// an existing cluster). The core replays membership entries of the log
    /// on top of it.
    fn initial_state(&self) -> Result<(HardState, Membership), StorageError>;

    /// Entries `[lo, hi)`, at least one if `lo < hi` even above `max_bytes`,
    /// then as many as fit in `max_bytes`. `Compacted` if `lo < first_index`.
    fn entries(&self, lo: Index, hi: Index, max_bytes: u64) -> Result<Vec<Entry>, StorageError>;

    /// The term of the entry at `index`, for `index` in
    /// `[first_index - 1, last_index]`; at `first_index - 1` that is the
    /// snapshot's term (or `Term(0)` at index 0). `Compacted` below,
    /// `Unavailable` above.
    fn term(&self, index: Index) -> Result<Term, StorageError>;

    /// The index of the first entry still in the log: snapshot index + 1 (1
    /// for a fresh log), or lower if the driver keeps entries behind its
    /// snapshot (then [`Config::snapshot_lag`](crate::Config::snapshot_lag)
    /// can prefer the snapshot for followers far behind).
    fn first_index(&self) -> Result<Index, StorageError>;

    /// The index of the last persisted entry (`first_index - 1` if empty).
    fn last_index(&self) -> Result<Index, StorageError>;

    /// The metadata of the latest durable snapshot, if any. A leader sends
    /// this snapshot to followers behind its first index.
    fn snapshot_meta(&self) -> Result<Option<SnapshotMeta>, StorageError>;
}
