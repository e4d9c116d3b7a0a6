//! The plugin keyspace (`state`) and the applied log id (`meta`).

use std::sync::Arc;

use rocksdb::{DB, Direction, IteratorMode, SnapshotWithThreadMode, WriteBatch};
use wasmraft_raft::{LogId, Membership};

use crate::codec;
use crate::error::StorageError;
use crate::rocks::{CF_META, CF_STATE, KEY_APPLIED, Storage};
use crate::snapshot::{KEY_APPLIED_MEMBERSHIP, KEY_LOG_TIME, address_key};

/// One write to the plugin keyspace: `value` `None` deletes.
#[derive(Clone, Copy, Debug)]
pub struct StateWrite<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The new value, or `None` to delete.
    pub value: Option<&'a [u8]>,
}

/// Replicated node records an applied batch changes besides the keyspace.
/// They are written in the same atomic write as the applied index, so that
/// neither a crash nor a snapshot cut between two writes can show them ahead
/// of or behind it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedRecords {
    /// The membership the batch's last configuration entry put in effect.
    pub membership: Option<Membership>,
    /// Member addresses the batch set, in entry order.
    pub addresses: Vec<(u64, String)>,
    /// The highest leader timestamp among the batch's entries (log time),
    /// kept so that log time survives a log compacted to nothing.
    pub log_time_ms: Option<u64>,
}

impl AppliedRecords {
    /// Nothing but the keyspace changed.
    pub fn is_empty(&self) -> bool {
        self.membership.is_none() && self.addresses.is_empty() && self.log_time_ms.is_none()
    }
}

/// Client sessions (exactly-once retries) live in `meta` under this prefix,
/// keyed by big-endian client id; the node owns the value format.
pub(crate) const SESSION_PREFIX: &[u8] = b"session/";

fn session_key(client: u64) -> Vec<u8> {
    let mut k = SESSION_PREFIX.to_vec();
    k.extend_from_slice(&client.to_be_bytes());
    k
}

impl Storage {
    /// Writes an applied batch: the plugin's writes, the client-session
    /// records that changed (`None` removes one) and the log id of the last
    /// entry they cover, atomically. Not durable until RocksDB flushes it
    /// (it is not in RocksDB's write-ahead log, see
    /// [`Storage::applied_batch_opts`]): after a crash the node applies
    /// again the entries after the applied id it finds.
    pub fn apply<'a>(
        &self,
        applied: LogId,
        writes: impl IntoIterator<Item = StateWrite<'a>>,
        sessions: impl IntoIterator<Item = (u64, Option<&'a [u8]>)>,
    ) -> Result<(), StorageError> {
        self.apply_with_records(applied, writes, sessions, &AppliedRecords::default())
    }

    /// [`Storage::apply`], with the node records the batch changed, in the
    /// same atomic write.
    pub fn apply_with_records<'a>(
        &self,
        applied: LogId,
        writes: impl IntoIterator<Item = StateWrite<'a>>,
        sessions: impl IntoIterator<Item = (u64, Option<&'a [u8]>)>,
        records: &AppliedRecords,
    ) -> Result<(), StorageError> {
        self.write_applied(WriteBatch::default(), applied, writes, sessions, records)
    }

    /// Adds an applied batch to `batch` and writes it atomically.
    pub(crate) fn write_applied<'a>(
        &self,
        mut batch: WriteBatch,
        applied: LogId,
        writes: impl IntoIterator<Item = StateWrite<'a>>,
        sessions: impl IntoIterator<Item = (u64, Option<&'a [u8]>)>,
        records: &AppliedRecords,
    ) -> Result<(), StorageError> {
        let state = self.cf(CF_STATE);
        for w in writes {
            match w.value {
                Some(v) => batch.put_cf(state, w.key, v),
                None => batch.delete_cf(state, w.key),
            }
        }
        let meta = self.cf(CF_META);
        for (client, record) in sessions {
            match record {
                Some(v) => batch.put_cf(meta, session_key(client), v),
                None => batch.delete_cf(meta, session_key(client)),
            }
        }
        if let Some(m) = &records.membership {
            batch.put_cf(meta, KEY_APPLIED_MEMBERSHIP, codec::encode_membership(m));
        }
        for (id, address) in &records.addresses {
            batch.put_cf(meta, address_key(*id), address.as_bytes());
        }
        if let Some(ms) = records.log_time_ms {
            batch.put_cf(meta, KEY_LOG_TIME, ms.to_be_bytes());
        }
        batch.put_cf(meta, KEY_APPLIED, codec::encode_log_id(&applied));
        self.write(batch, &Self::applied_batch_opts())?;
        Ok(())
    }

    /// The log time of the last applied batch that carried one (see
    /// [`AppliedRecords::log_time_ms`]), from snapshots too.
    pub fn log_time_ms(&self) -> Result<Option<u64>, StorageError> {
        match self.db.get_cf(self.cf(CF_META), KEY_LOG_TIME)? {
            None => Ok(None),
            Some(v) => match <[u8; 8]>::try_from(v.as_slice()) {
                Ok(b) => Ok(Some(u64::from_be_bytes(b))),
                Err(_) => Err(StorageError::Corrupt { what: "log time", key: None, detail: format!("{} bytes, not 8", v.len()) }),
            },
        }
    }

    /// Every client-session record, by client id.
    pub fn sessions(&self) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let mut out = Vec::new();
        let iter = self.db.iterator_cf(self.cf(CF_META), IteratorMode::From(SESSION_PREFIX, Direction::Forward));
        for item in iter {
            let (k, v) = item?;
            let Some(id) = k.strip_prefix(SESSION_PREFIX) else { break };
            let id: [u8; 8] = id.try_into().map_err(|_| StorageError::Corrupt {
                what: "session key",
                key: None,
                detail: format!("{} bytes of client id", id.len()),
            })?;
            out.push((u64::from_be_bytes(id), v.to_vec()));
        }
        Ok(out)
    }

    /// The log id of the last applied entry (0-0 if none).
    pub fn applied(&self) -> Result<LogId, StorageError> {
        match self.db.get_cf(self.cf(CF_META), KEY_APPLIED)? {
            Some(bytes) => codec::decode_log_id("applied log id", &bytes),
            None => Ok(LogId::default()),
        }
    }

    /// A reader of the state keyspace that sees one applied batch throughout:
    /// it reads a RocksDB snapshot, so it never holds up the apply thread
    /// (every applied batch is one atomic write, so a snapshot falls between
    /// two batches).
    pub fn consistent_reader(&self) -> StateReader {
        let snapshot = self.db.snapshot();
        // SAFETY: the snapshot borrows the `DB` inside the `Arc`, which does
        // not move and which the reader's `db` keeps alive for as long as the
        // snapshot (released first, by field order). Nothing hands out the
        // snapshot with the extended lifetime.
        #[allow(unsafe_code)]
        let snapshot = unsafe {
            std::mem::transmute::<SnapshotWithThreadMode<'_, DB>, SnapshotWithThreadMode<'static, DB>>(snapshot)
        };
        StateReader::new(Some(snapshot), self.db.clone())
    }

    /// A reader for the apply thread itself, the only writer: it reads the
    /// live keyspace.
    pub fn apply_reader(&self) -> StateReader {
        StateReader::new(None, self.db.clone())
    }
}

/// Read options that read at `snapshot` (`None`: the live keyspace).
fn options_at(snapshot: Option<&SnapshotWithThreadMode<'static, DB>>) -> rocksdb::ReadOptions {
    let mut opts = rocksdb::ReadOptions::default();
    if let Some(s) = snapshot {
        opts.set_snapshot(s);
    }
    opts
}

/// Reads the plugin keyspace.
pub struct StateReader {
    /// The options of every point read, made once (a put reads its key
    /// first). They point at `snapshot`, and are released before it.
    point_read: rocksdb::ReadOptions,
    /// Declared before `db`, so released before it.
    snapshot: Option<SnapshotWithThreadMode<'static, DB>>,
    pub(crate) db: Arc<crate::rocks::Db>,
}

impl std::fmt::Debug for StateReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateReader").field("snapshot", &self.snapshot.is_some()).finish()
    }
}

impl StateReader {
    fn new(snapshot: Option<SnapshotWithThreadMode<'static, DB>>, db: Arc<crate::rocks::Db>) -> Self {
        Self { point_read: options_at(snapshot.as_ref()), snapshot, db }
    }

    fn cf(&self) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(CF_STATE).expect("column family created at open")
    }

    pub(crate) fn read_options(&self) -> rocksdb::ReadOptions {
        options_at(self.snapshot.as_ref())
    }

    /// The value under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.db.get_cf_opt(self.cf(), key, &self.point_read)?)
    }

    /// Visits pairs with `start <= key < end` (`None`: unbounded) in key
    /// order, descending if `reverse`, until `visit` returns `false`.
    pub fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StorageError> {
        let mut opts = self.read_options();
        opts.set_iterate_lower_bound(start.to_vec());
        if let Some(end) = end {
            opts.set_iterate_upper_bound(end.to_vec());
        }
        // A raw iterator hands out borrowed slices: no copy of each pair.
        let mut iter = self.db.raw_iterator_cf_opt(self.cf(), opts);
        if reverse {
            iter.seek_to_last();
        } else {
            iter.seek(start);
        }
        while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
            if !visit(k, v) {
                break;
            }
            if reverse {
                iter.prev();
            } else {
                iter.next();
            }
        }
        iter.status()?;
        Ok(())
    }

    /// Every pair of the keyspace, in key order (for hashing and tests).
    pub fn dump(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StorageError> {
        let mut out = Vec::new();
        self.scan(&[], None, false, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            true
        })?;
        Ok(out)
    }
}
