//! The plugin deployed through the log (its record and bytes, in `meta`),
//! and the hash of the plugin keyspace that replicas compare.

use rocksdb::WriteBatch;
use sha2::{Digest, Sha256};
use wasmraft_raft::LogId;

use crate::codec;
use crate::error::StorageError;
use crate::rocks::{CF_META, CF_STATE, Storage};
use crate::state::{AppliedRecords, SESSION_PREFIX, StateReader, StateWrite};

const KEY_PLUGIN_RECORD: &[u8] = b"plugin/record";
const KEY_PLUGIN_WASM: &[u8] = b"plugin/wasm";

/// A plugin deployed through the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeployedPlugin {
    /// SHA-256 of its bytes, in hex.
    pub sha256: String,
    /// Its name, as it reports it.
    pub name: String,
    /// Its version, as it reports it.
    pub version: String,
    /// The SDK version it was built with.
    pub sdk_version: String,
    /// The log index of the entry that deployed it.
    pub deployed_at: u64,
}

/// A plugin record and its bytes, checked against each other.
fn checked_plugin(
    record: Option<&[u8]>,
    wasm: Option<Vec<u8>>,
) -> Result<Option<(DeployedPlugin, Vec<u8>)>, StorageError> {
    let Some(record) = record else { return Ok(None) };
    let record = codec::decode_plugin(record)?;
    let wasm = wasm.ok_or_else(|| StorageError::Corrupt {
        what: "deployed plugin",
        key: None,
        detail: "the record is there but the bytes are not".into(),
    })?;
    if hex::encode(Sha256::digest(&wasm)) != record.sha256 {
        return Err(StorageError::Corrupt {
            what: "deployed plugin",
            key: None,
            detail: format!("the stored bytes do not hash to {}", record.sha256),
        });
    }
    Ok(Some((record, wasm)))
}

/// The deployed plugin among a snapshot's node records, if any.
pub(crate) fn find_plugin(system: &[(Vec<u8>, Vec<u8>)]) -> Result<Option<(DeployedPlugin, Vec<u8>)>, StorageError> {
    let find = |key: &[u8]| system.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    checked_plugin(find(KEY_PLUGIN_RECORD).map(Vec::as_slice), find(KEY_PLUGIN_WASM).cloned())
}

impl Storage {
    /// The deployed plugin and its bytes, if one was deployed through the
    /// log (else the node runs the plugin it was started with). The bytes
    /// are checked against the recorded hash.
    pub fn deployed_plugin(&self) -> Result<Option<(DeployedPlugin, Vec<u8>)>, StorageError> {
        let meta = self.cf(CF_META);
        let record = self.db.get_cf(meta, KEY_PLUGIN_RECORD)?;
        let wasm = self.db.get_cf(meta, KEY_PLUGIN_WASM)?;
        checked_plugin(record.as_deref(), wasm)
    }

    /// Applies the entry that deploys a plugin: the migration's writes, the
    /// session records that changed, the plugin's record and bytes, and the
    /// applied id, in one atomic write.
    pub fn deploy_plugin<'a>(
        &self,
        applied: LogId,
        writes: impl IntoIterator<Item = StateWrite<'a>>,
        sessions: impl IntoIterator<Item = (u64, Option<&'a [u8]>)>,
        record: &DeployedPlugin,
        wasm: &[u8],
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        let meta = self.cf(CF_META);
        batch.put_cf(meta, KEY_PLUGIN_WASM, wasm);
        batch.put_cf(meta, KEY_PLUGIN_RECORD, codec::encode_plugin(record));
        self.write_applied(batch, applied, writes, sessions, &AppliedRecords::default())
    }

    /// Writes one key of the plugin keyspace directly, bypassing the log:
    /// makes this replica diverge, to test that divergence is detected.
    /// Fault injection only.
    #[doc(hidden)]
    pub fn inject_state_write(&self, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        self.db.put_cf(self.cf(CF_STATE), key, value)?;
        Ok(())
    }

    /// SHA-256 over the whole plugin keyspace, then the client sessions
    /// (the exactly-once table, which replicas must agree on as much as on
    /// the state), each in key order, each key and value prefixed with its
    /// length. Equal on replicas with equal state at the same applied index.
    /// Taken at the applied index of the call (every applied batch is one
    /// atomic write): for an exact index, call it from the apply thread, or
    /// take a [`Storage::consistent_reader`] there and hash that elsewhere.
    pub fn state_hash(&self) -> Result<[u8; 32], StorageError> {
        Ok(self.state_hash_counted()?.0)
    }

    /// [`state_hash`](Self::state_hash), and how many records it hashed.
    pub fn state_hash_counted(&self) -> Result<([u8; 32], u64), StorageError> {
        let hashed = self.consistent_reader().keyspace_hash(&|| true)?;
        Ok(hashed.expect("a pass that is never stopped ends"))
    }
}

/// How many records a hash pass reads between two looks at whether it
/// should stop.
const RECORDS_BETWEEN_CHECKS: u64 = 4096;

impl StateReader {
    /// [`Storage::state_hash_counted`] at this reader's applied index, and
    /// how many records it hashed; `None` if `go_on` said stop (asked every
    /// few thousand records).
    pub fn keyspace_hash(&self, go_on: &dyn Fn() -> bool) -> Result<Option<([u8; 32], u64)>, StorageError> {
        let mut hash = Sha256::new();
        let mut records = 0u64;
        let mut add = |k: &[u8], v: &[u8]| {
            hash.update((k.len() as u64).to_be_bytes());
            hash.update(k);
            hash.update((v.len() as u64).to_be_bytes());
            hash.update(v);
            records += 1;
            records % RECORDS_BETWEEN_CHECKS != 0 || go_on()
        };
        // Raw iterators hand out borrowed slices: no copy of each pair. A
        // full pass would evict the blocks queries and applies need from
        // the block cache, so it reads around it.
        let mut opts = self.read_options();
        opts.fill_cache(false);
        let mut iter = self.db.raw_iterator_cf_opt(self.db.cf_handle(CF_STATE).expect("created at open"), opts);
        iter.seek_to_first();
        while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
            if !add(k, v) {
                return Ok(None);
            }
            iter.next();
        }
        iter.status()?;
        // A marker no key-length prefix can equal: keys are far shorter.
        add(&[0xff; 8], b"sessions");
        let mut iter =
            self.db.raw_iterator_cf_opt(self.db.cf_handle(CF_META).expect("created at open"), self.read_options());
        iter.seek(SESSION_PREFIX);
        while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
            if !k.starts_with(SESSION_PREFIX) {
                break;
            }
            if !add(k, v) {
                return Ok(None);
            }
            iter.next();
        }
        iter.status()?;
        Ok(Some((hash.finalize().into(), records)))
    }
}
