//! Snapshots: a RocksDB checkpoint of the whole store at an applied index,
//! the log compacted behind it, and the atomic install of a snapshot
//! received from the leader.

use std::path::PathBuf;

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{DB, IteratorMode, Options, WriteBatch};
use wasmraft_raft::{Index, Membership, SnapshotMeta};

use crate::codec;
use crate::error::StorageError;
use crate::log::encode_index;
use crate::rocks::{CF_LOG, CF_META, CF_RAFT, CF_STATE, KEY_APPLIED, KEY_SNAPSHOT, Storage};
use crate::state::SESSION_PREFIX;

pub(crate) const KEY_APPLIED_MEMBERSHIP: &[u8] = b"applied_membership";
const ADDRESS_PREFIX: &[u8] = b"address/";

pub(crate) fn address_key(id: u64) -> Vec<u8> {
    let mut k = ADDRESS_PREFIX.to_vec();
    k.extend_from_slice(&id.to_be_bytes());
    k
}

/// Node records in `meta` that a snapshot carries as they are: the
/// deployed plugin and member addresses.
const SYSTEM_PREFIXES: [&[u8]; 2] = [b"plugin/", ADDRESS_PREFIX];

/// What a snapshot carries besides its metadata: the plugin keyspace, the
/// client sessions and the node's own records, each in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotData {
    /// The plugin keyspace.
    pub state: Vec<(Vec<u8>, Vec<u8>)>,
    /// Client-session records (`client id BE` -> record).
    pub sessions: Vec<(Vec<u8>, Vec<u8>)>,
    /// The deployed plugin (record and bytes) and member addresses, as
    /// `meta` keys and values.
    pub system: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The first key after every key that starts with `prefix` (the prefix
/// with its last byte raised; `prefix + 0xff` would miss keys that continue
/// with 0xff, such as a session id whose first byte is 0xff).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
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
    fn snapshot_dir(&self) -> PathBuf {
        let mut p = self.db.path().to_path_buf();
        let name = format!("{}.snapshots", p.file_name().and_then(|n| n.to_str()).unwrap_or("data"));
        p.set_file_name(name);
        p
    }

    fn checkpoint_path(&self, index: Index) -> PathBuf {
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

    /// Takes a snapshot of the current applied state (call from the apply
    /// thread, between batches) and compacts the log through its index.
    /// Older snapshots are removed.
    pub fn take_snapshot(&self) -> Result<SnapshotMeta, StorageError> {
        let applied = self.applied()?;
        let meta = SnapshotMeta { last: applied, membership: self.applied_membership()? };
        let path = self.checkpoint_path(applied.index);
        std::fs::create_dir_all(self.snapshot_dir()).map_err(io)?;
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(io)?;
        }
        Checkpoint::new(&self.db)?.create_checkpoint(&path)?;
        self.compact_to(&meta)?;
        self.remove_snapshots_except(applied.index)?;
        Ok(meta)
    }

    fn remove_snapshots_except(&self, keep: Index) -> Result<(), StorageError> {
        let keep = self.checkpoint_path(keep);
        for entry in std::fs::read_dir(self.snapshot_dir()).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path != keep {
                std::fs::remove_dir_all(&path).map_err(io)?;
            }
        }
        Ok(())
    }

    /// Records `meta` as the latest snapshot and drops log entries up to its
    /// index. The log keeps any entries after it.
    fn compact_to(&self, meta: &SnapshotMeta) -> Result<(), StorageError> {
        let mut bounds = self.bounds.lock();
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_RAFT), KEY_SNAPSHOT, codec::encode_snapshot_meta(meta));
        batch.delete_range_cf(self.cf(CF_LOG), encode_index(Index(0)), encode_index(meta.last.index.next()));
        self.write(batch, &self.sync_opts())?;
        bounds.first = meta.last.index.next();
        bounds.before_first = meta.last;
        bounds.last = bounds.last.max(meta.last.index);
        Ok(())
    }

    /// Reads the state and sessions of the snapshot at `index`.
    pub fn read_snapshot(&self, index: Index) -> Result<SnapshotData, StorageError> {
        let path = self.checkpoint_path(index);
        if !path.exists() {
            return Err(StorageError::Incompatible(format!("no snapshot at index {index}")));
        }
        let cfs = [CF_LOG, CF_RAFT, CF_STATE, CF_META];
        let db = DB::open_cf_for_read_only(&Options::default(), &path, cfs, false)?;
        let mut data = SnapshotData::default();
        for item in db.iterator_cf(db.cf_handle(CF_STATE).expect("cf"), IteratorMode::Start) {
            let (k, v) = item?;
            data.state.push((k.to_vec(), v.to_vec()));
        }
        let meta = db.cf_handle(CF_META).expect("cf");
        for item in db.iterator_cf(meta, IteratorMode::From(SESSION_PREFIX, rocksdb::Direction::Forward)) {
            let (k, v) = item?;
            let Some(id) = k.strip_prefix(SESSION_PREFIX) else { break };
            data.sessions.push((id.to_vec(), v.to_vec()));
        }
        for prefix in SYSTEM_PREFIXES {
            for item in db.iterator_cf(meta, IteratorMode::From(prefix, rocksdb::Direction::Forward)) {
                let (k, v) = item?;
                if !k.starts_with(prefix) {
                    break;
                }
                data.system.push((k.to_vec(), v.to_vec()));
            }
        }
        Ok(data)
    }

    /// Makes a snapshot received from the leader current, atomically: the
    /// keyspace and sessions are replaced, the applied id and the snapshot
    /// metadata set, and the whole log dropped (the leader resends what
    /// follows). Then checkpoints it, so this node can send it on.
    pub fn install_snapshot(&self, meta: &SnapshotMeta, data: &SnapshotData) -> Result<(), StorageError> {
        {
            let mut bounds = self.bounds.lock();
            let mut batch = WriteBatch::default();
            let (state, metacf) = (self.cf(CF_STATE), self.cf(CF_META));
            batch.delete_range_cf(state, [0u8].as_slice(), [0xffu8; 64].as_slice());
            // Keys are at most a few KiB; anything past 64 x 0xff is removed one by one.
            for item in self.db.iterator_cf(state, IteratorMode::From(&[0xffu8; 64], rocksdb::Direction::Forward)) {
                batch.delete_cf(state, item?.0);
            }
            batch.delete_cf(state, [] as [u8; 0]);
            for (k, v) in &data.state {
                batch.put_cf(state, k, v);
            }
            batch.delete_range_cf(metacf, SESSION_PREFIX, prefix_end(SESSION_PREFIX).as_slice());
            for (id, v) in &data.sessions {
                let mut k = SESSION_PREFIX.to_vec();
                k.extend_from_slice(id);
                batch.put_cf(metacf, k, v);
            }
            for prefix in SYSTEM_PREFIXES {
                batch.delete_range_cf(metacf, prefix, prefix_end(prefix).as_slice());
            }
            for (k, v) in &data.system {
                if !SYSTEM_PREFIXES.iter().any(|p| k.starts_with(p)) {
                    return Err(StorageError::Incompatible(format!(
                        "snapshot carries an unexpected node record {:?}",
                        String::from_utf8_lossy(k)
                    )));
                }
                batch.put_cf(metacf, k, v);
            }
            batch.put_cf(metacf, KEY_APPLIED, codec::encode_log_id(&meta.last));
            batch.put_cf(metacf, KEY_APPLIED_MEMBERSHIP, codec::encode_membership(&meta.membership));
            batch.put_cf(self.cf(CF_RAFT), KEY_SNAPSHOT, codec::encode_snapshot_meta(meta));
            batch.delete_range_cf(self.cf(CF_LOG), encode_index(Index(0)), encode_index(Index(u64::MAX)));
            self.write(batch, &self.sync_opts())?;
            *bounds = crate::rocks::Bounds { first: meta.last.index.next(), last: meta.last.index, before_first: meta.last };
        }
        let path = self.checkpoint_path(meta.last.index);
        std::fs::create_dir_all(self.snapshot_dir()).map_err(io)?;
        if path.exists() {
            std::fs::remove_dir_all(&path).map_err(io)?;
        }
        Checkpoint::new(&self.db)?.create_checkpoint(&path)?;
        self.remove_snapshots_except(meta.last.index)
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

fn io(e: std::io::Error) -> StorageError {
    StorageError::Rocks(format!("snapshot files: {e}"))
}
