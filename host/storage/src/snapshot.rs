//! Snapshots: a RocksDB checkpoint of the whole store at an applied index,
//! with the log compacted behind it. Sending one streams it out of its
//! checkpoint ([`crate::SnapshotReader`]); receiving one stages it on disk
//! and ingests it ([`crate::SnapshotStaging`]). Neither side holds a whole
//! snapshot in memory.

use std::path::PathBuf;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{IteratorMode, WriteBatch};
use wasmraft_raft::{Index, Membership, SnapshotMeta};

use crate::codec;
use crate::error::StorageError;
use crate::log::encode_index;
use crate::rocks::{CF_LOG, CF_META, CF_RAFT, COLUMN_FAMILIES, KEY_SNAPSHOT, Storage};

pub(crate) const KEY_APPLIED_MEMBERSHIP: &[u8] = b"applied_membership";
pub(crate) const ADDRESS_PREFIX: &[u8] = b"address/";

pub(crate) fn address_key(id: u64) -> Vec<u8> {
    let mut k = ADDRESS_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// Node records in `meta` that a snapshot carries as they are: the
/// deployed plugin, member addresses and log time.
pub(crate) const SYSTEM_PREFIXES: [&[u8]; 3] = [b"plugin/", ADDRESS_PREFIX, KEY_LOG_TIME];

/// Log time as of the applied index (`AppliedRecords::log_time_ms`).
pub(crate) const KEY_LOG_TIME: &[u8] = b"log_time";

/// A piece of a snapshot in transit, each list in key order. A snapshot is
/// sent as a sequence of parts of about [`crate::SNAPSHOT_PART_BYTES`]: the
/// plugin keyspace first, then the client sessions, then the node records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotPart {
    /// Pairs of the plugin keyspace.
    pub state: Vec<(Vec<u8>, Vec<u8>)>,
    /// Client-session records (`client id BE` -> record).
    pub sessions: Vec<(Vec<u8>, Vec<u8>)>,
    /// The deployed plugin (record and bytes) and member addresses, as
    /// `meta` keys and values.
    pub system: Vec<(Vec<u8>, Vec<u8>)>,
}

impl SnapshotPart {
    /// Bytes of keys and values in this part.
    pub fn bytes(&self) -> u64 {
        [&self.state, &self.sessions, &self.system]
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum()
    }

    /// Whether the part carries nothing.
    pub fn is_empty(&self) -> bool {
        self.state.is_empty() && self.sessions.is_empty() && self.system.is_empty()
    }
}

/// The first key after every key that starts with `prefix` (the prefix
/// with its last byte raised; `prefix + 0xff` would miss keys that continue
/// with 0xff, such as a session id whose first byte is 0xff).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xff; 64] // a prefix of 0xff bytes only: not one of ours
}

impl Storage {
    pub(crate) fn snapshot_dir(&self) -> PathBuf {
        self.sibling_dir("snapshots")
    }

    /// `<data dir>.<what>`, beside the RocksDB directory.
    pub(crate) fn sibling_dir(&self, what: &str) -> PathBuf {
        let mut p = self.db.path().to_path_buf();
        let name = format!("{}.{what}", p.file_name().and_then(|n| n.to_str()).unwrap_or("data"));
        p.set_file_name(name);
        p
    }

    pub(crate) fn checkpoint_path(&self, index: Index) -> PathBuf {
        self.snapshot_dir().join(format!("{:020}", index.0))
    }

    /// The membership in effect at the applied index, as written with the
    /// batch that applied it (or the base membership).
    pub fn applied_membership(&self) -> Result<Membership, StorageError> {
        match self.db.get_cf(self.cf(CF_META), KEY_APPLIED_MEMBERSHIP)? {
            Some(bytes) => codec::decode_membership(&bytes),
            None => match self.snapshot_meta_stored()? {
                Some(m) => Ok(m.membership),
                None => self.bootstrap_membership(),
            },
        }
    }

    /// Asks RocksDB to flush every memtable in the background, and returns
    /// at once: a snapshot taken once that is done ([`Self::flushes_pending`])
    /// flushes only what was written since, instead of stopping its caller
    /// for a whole memtable's flush.
    ///
    /// RocksDB refuses a flush that does not wait while it has stopped
    /// writes (`TryAgain`: full memtables waiting for their flush, or too
    /// many level-0 files). That is no failure of the store: the flushes
    /// this asks for are under way or will be, and the snapshot's own
    /// flush waits for them.
    pub fn flush_ahead_of_snapshot(&self) -> Result<(), StorageError> {
        match self.db.flush_all(false) {
            Err(e) if e.kind() == rocksdb::ErrorKind::TryAgain => {
                tracing::debug!(error = %e, "RocksDB has stopped writes; the snapshot flushes when they resume");
                Ok(())
            }
            result => Ok(result?),
        }
    }

    /// Bytes in memtables, not yet flushed, over every column family.
    pub fn unflushed_bytes(&self) -> Result<u64, StorageError> {
        let mut total = 0;
        for name in COLUMN_FAMILIES {
            total += self.db.property_int_value_cf(self.cf(name), "rocksdb.cur-size-all-mem-tables")?.unwrap_or(0);
        }
        Ok(total)
    }

    /// Whether a memtable flush is running or waiting to run.
    pub fn flushes_pending(&self) -> Result<bool, StorageError> {
        let running = self.db.property_int_value("rocksdb.num-running-flushes")?.unwrap_or(0);
        let mut pending = running > 0;
        for name in COLUMN_FAMILIES {
            pending |= self.db.property_int_value_cf(self.cf(name), "rocksdb.mem-table-flush-pending")?.unwrap_or(0) > 0;
        }
        Ok(pending)
    }

    /// Takes a snapshot of the current applied state (call from the apply
    /// thread, between batches) and compacts the log through its index.
    /// Older snapshots are removed.
    pub fn take_snapshot(&self) -> Result<SnapshotMeta, StorageError> {
        let applied = self.applied()?;
        let meta = SnapshotMeta { last: applied, membership: self.applied_membership()? };
        self.checkpoint(applied.index)?;
        self.compact_to(&meta)?;
        self.remove_snapshots_except(applied.index)?;
        Ok(meta)
    }

    /// A checkpoint of the store as it is now, named for `index` (the
    /// applied index). RocksDB builds it under a temporary name and renames
    /// it, so a checkpoint directory that exists is complete.
    pub(crate) fn checkpoint(&self, index: Index) -> Result<(), StorageError> {
        let path = self.checkpoint_path(index);
        std::fs::create_dir_all(self.snapshot_dir()).map_err(io)?;
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(io)?;
        }
        Checkpoint::new(&self.db)?.create_checkpoint(&path)?;
        Ok(())
    }

    pub(crate) fn remove_snapshots_except(&self, keep: Index) -> Result<(), StorageError> {
        let keep = self.checkpoint_path(keep);
        for entry in std::fs::read_dir(self.snapshot_dir()).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path != keep {
                std::fs::remove_dir_all(&path).map_err(io)?;
            }
        }
        Ok(())
    }

    /// At open: the latest snapshot must have its checkpoint, or this node
    /// could never send it. A crash right after a snapshot was recorded and
    /// before its checkpoint was made leaves it without one; a new snapshot
    /// of the applied state (at or after the recorded one) takes its place.
    pub(crate) fn ensure_checkpoint(&self) -> Result<(), StorageError> {
        let Some(meta) = self.snapshot_meta_stored()? else { return Ok(()) };
        if self.checkpoint_path(meta.last.index).exists() {
            return Ok(());
        }
        let taken = self.take_snapshot()?;
        tracing::warn!(
            recorded = meta.last.index.0,
            taken = taken.last.index.0,
            "the latest snapshot had no checkpoint; took a new one"
        );
        Ok(())
    }

    /// Records `meta` as the latest snapshot and drops log entries up to its
    /// index. The log keeps any entries after it.
    fn compact_to(&self, meta: &SnapshotMeta) -> Result<(), StorageError> {
        let mut bounds = self.bounds.lock();
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_RAFT), KEY_SNAPSHOT, codec::encode_snapshot_meta(meta));
        batch.delete_range_cf(self.cf(CF_LOG), encode_index(Index(0)), encode_index(meta.last.index.next()));
        // With the log's writes, in their order: a restart that writes the
        // unflushed ones again must not bring back entries dropped here.
        self.write_logged(batch, true)?;
        bounds.first = meta.last.index.next();
        bounds.before_first = meta.last;
        bounds.last = bounds.last.max(meta.last.index);
        self.terms.lock().compacted_to(bounds.first);
        Ok(())
    }

    /// Every recorded member address.
    pub fn addresses(&self) -> Result<Vec<(u64, String)>, StorageError> {
        let mut out = Vec::new();
        for item in self.db.iterator_cf(self.cf(CF_META), IteratorMode::From(ADDRESS_PREFIX, rocksdb::Direction::Forward)) {
            let (k, v) = item?;
            let Some(id) = k.strip_prefix(ADDRESS_PREFIX) else { break };
            let Ok(id) = <[u8; 8]>::try_from(id) else { continue };
            out.push((u64::from_be_bytes(id), String::from_utf8_lossy(&v).into_owned()));
        }
        Ok(out)
    }

    /// The latest snapshot's metadata, if any.
    pub fn snapshot(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        self.snapshot_meta_stored()
    }
}

pub(crate) fn io(e: std::io::Error) -> StorageError {
    StorageError::Rocks(format!("snapshot files: {e}"))
}
