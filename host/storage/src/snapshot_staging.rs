//! Receiving a snapshot: staged in files on disk as it arrives, then made
//! current by RocksDB's external-file ingestion, behind an install marker
//! that lets a restart finish an install a crash interrupted.
//!
//! The install, in order (each step durable before the next):
//! 1. the staged files move to `<data dir>.incoming/install`;
//! 2. one write: the install marker (the snapshot's metadata), and the
//!    keyspace, sessions, node records and log cleared;
//! 3. the staged keyspace and the staged `meta` records are ingested;
//! 4. one write: the applied id, membership and snapshot metadata, and the
//!    marker removed;
//! 5. the staged files are removed and a checkpoint taken (to send it on).
//!
//! A restart that finds the marker repeats steps 2 to 5 from the files of
//! step 1 before anything else reads the store. Clearing and ingesting
//! again is harmless: the newest write of a key wins.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};

use rocksdb::{IngestExternalFileOptions, IteratorMode, Options, SstFileWriter, WriteBatch};
use wasmraft_raft::{Index, SnapshotMeta};

use crate::codec;
use crate::error::StorageError;
use crate::log::encode_index;
use crate::plugin::DeployedPlugin;
use crate::rocks::{CF_LOG, CF_META, CF_RAFT, CF_STATE, KEY_APPLIED, KEY_SNAPSHOT, Storage};
use crate::snapshot::{KEY_APPLIED_MEMBERSHIP, SYSTEM_PREFIXES, SnapshotPart, io, prefix_end};
use crate::state::SESSION_PREFIX;

/// The install marker in `raft`: the metadata of a snapshot being installed.
const KEY_INSTALLING: &[u8] = b"installing_snapshot";
const STATE_FILE: &str = "state.sst";
const META_FILE: &str = "meta.sst";
const INSTALL_DIR: &str = "install";

/// Options of the staged table files (the column families' defaults: the
/// bytewise comparator ingestion requires).
static SST_OPTIONS: LazyLock<Options> = LazyLock::new(Options::default);
/// Makes each staging directory's name unique within the process.
static STAGING_SEQ: AtomicU64 = AtomicU64::new(0);

/// A snapshot being received: the keyspace goes straight into a table file
/// on disk, in key order, as parts arrive; sessions and node records (small)
/// are kept until [`SnapshotStaging::finish`]. More than `max_bytes` of keys
/// and values, keys out of order, malformed session ids or unknown node
/// records are errors, and dropping the staging removes its files.
pub struct SnapshotStaging {
    dir: StagingDir,
    meta: SnapshotMeta,
    state: Option<SstFileWriter<'static>>,
    last_key: Option<Vec<u8>>,
    state_keys: u64,
    meta_records: BTreeMap<Vec<u8>, Vec<u8>>,
    bytes: u64,
    max_bytes: u64,
}

impl std::fmt::Debug for SnapshotStaging {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotStaging")
            .field("dir", &self.dir.0)
            .field("index", &self.meta.last.index)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// A snapshot received whole and staged on disk, ready to install. Dropped
/// without being installed, its files are removed.
pub struct StagedSnapshot {
    dir: StagingDir,
    meta: SnapshotMeta,
    state_keys: u64,
    bytes: u64,
    sessions: Vec<(u64, Vec<u8>)>,
    system: Vec<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for StagedSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedSnapshot")
            .field("dir", &self.dir.0)
            .field("index", &self.meta.last.index)
            .field("keys", &self.state_keys)
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// A directory removed when dropped (unless emptied of its path).
struct StagingDir(PathBuf);

impl Drop for StagingDir {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn too_large(max: u64) -> StorageError {
    StorageError::Refused(format!("the snapshot exceeds max_snapshot_bytes ({max} bytes)"))
}

impl Storage {
    pub(crate) fn incoming_dir(&self) -> PathBuf {
        self.sibling_dir("incoming")
    }

    /// Starts receiving the snapshot `meta` describes, of at most
    /// `max_bytes` of keys and values.
    pub fn stage_snapshot(&self, meta: &SnapshotMeta, max_bytes: u64) -> Result<SnapshotStaging, StorageError> {
        let seq = STAGING_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = self.incoming_dir().join(format!("{:020}-{seq}", meta.last.index.0));
        std::fs::create_dir_all(&dir).map_err(io)?;
        Ok(SnapshotStaging {
            dir: StagingDir(dir),
            meta: meta.clone(),
            state: None,
            last_key: None,
            state_keys: 0,
            meta_records: BTreeMap::new(),
            bytes: 0,
            max_bytes,
        })
    }
}

impl SnapshotStaging {
    /// The snapshot being received.
    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }

    /// Bytes of keys and values received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds the next part. Keyspace pairs must come in strictly ascending
    /// key order across parts, as a [`crate::SnapshotReader`] sends them.
    pub fn add(&mut self, part: SnapshotPart) -> Result<(), StorageError> {
        self.bytes = self.bytes.saturating_add(part.bytes());
        if self.bytes > self.max_bytes {
            return Err(too_large(self.max_bytes));
        }
        for (k, v) in part.state {
            if self.last_key.as_ref().is_some_and(|last| *last >= k) {
                return Err(StorageError::Refused("snapshot keys are not in ascending order".into()));
            }
            let writer = match &mut self.state {
                Some(w) => w,
                None => {
                    let w = SstFileWriter::create(&SST_OPTIONS);
                    w.open(self.dir.0.join(STATE_FILE))?;
                    self.state.insert(w)
                }
            };
            writer.put(&k, &v)?;
            self.state_keys += 1;
            self.last_key = Some(k);
        }
        for (id, v) in part.sessions {
            if id.len() != 8 {
                return Err(StorageError::Refused(format!("a snapshot session id of {} bytes, not 8", id.len())));
            }
            let mut k = SESSION_PREFIX.to_vec();
            k.extend_from_slice(&id);
            self.add_meta(k, v)?;
        }
        for (k, v) in part.system {
            if !SYSTEM_PREFIXES.iter().any(|p| k.starts_with(p)) {
                return Err(StorageError::Refused(format!(
                    "the snapshot carries an unexpected node record {:?}",
                    String::from_utf8_lossy(&k)
                )));
            }
            self.add_meta(k, v)?;
        }
        Ok(())
    }

    fn add_meta(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), StorageError> {
        if self.meta_records.insert(key.clone(), value).is_some() {
            return Err(StorageError::Refused(format!(
                "the snapshot carries node record {:?} twice",
                String::from_utf8_lossy(&key)
            )));
        }
        Ok(())
    }

    /// Every part is in: the table files are written and synced.
    pub fn finish(mut self) -> Result<StagedSnapshot, StorageError> {
        if let Some(mut w) = self.state.take() {
            w.finish()?;
        }
        if !self.meta_records.is_empty() {
            let mut w = SstFileWriter::create(&SST_OPTIONS);
            w.open(self.dir.0.join(META_FILE))?;
            for (k, v) in &self.meta_records {
                w.put(k, v)?;
            }
            w.finish()?;
        }
        let mut sessions = Vec::new();
        let mut system = Vec::new();
        for (k, v) in std::mem::take(&mut self.meta_records) {
            match k.strip_prefix(SESSION_PREFIX) {
                Some(id) => sessions.push((u64::from_be_bytes(id.try_into().expect("checked in add")), v)),
                None => system.push((k, v)),
            }
        }
        Ok(StagedSnapshot {
            dir: StagingDir(std::mem::take(&mut self.dir.0)),
            meta: self.meta.clone(),
            state_keys: self.state_keys,
            bytes: self.bytes,
            sessions,
            system,
        })
    }
}

impl StagedSnapshot {
    /// The snapshot's metadata.
    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }

    /// Keys of the plugin keyspace it holds.
    pub fn state_keys(&self) -> u64 {
        self.state_keys
    }

    /// Bytes of keys and values it holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Its client sessions, by client id.
    pub fn sessions(&self) -> &[(u64, Vec<u8>)] {
        &self.sessions
    }

    /// The deployed plugin it carries, if any (else the cluster runs the
    /// plugin its nodes were started with).
    pub fn deployed_plugin(&self) -> Result<Option<(DeployedPlugin, Vec<u8>)>, StorageError> {
        crate::plugin::find_plugin(&self.system)
    }
}

impl Storage {
    /// Makes a staged snapshot current, durably and atomically as far as
    /// any reader of this store can tell: the keyspace, sessions and node
    /// records replaced, the applied id and snapshot metadata set, the whole
    /// log dropped (the leader resends what follows). See the module doc for
    /// the steps and how a crash between them is recovered.
    pub fn install_snapshot(&self, mut staged: StagedSnapshot) -> Result<(), StorageError> {
        let dir = self.incoming_dir().join(INSTALL_DIR);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        std::fs::rename(&staged.dir.0, &dir).map_err(io)?;
        // From here the files belong to the install: removed once it is
        // done, kept if it fails so that the next open can finish it.
        staged.dir.0 = PathBuf::new();
        sync_dir(&self.incoming_dir())?;
        self.install_staged_files(&staged.meta, &dir)
    }

    /// Steps 2 to 5 of the install, from the files in `dir`.
    fn install_staged_files(&self, meta: &SnapshotMeta, dir: &Path) -> Result<(), StorageError> {
        let mut bounds = self.bounds.lock();
        let (state, metacf) = (self.cf(CF_STATE), self.cf(CF_META));
        let mut clear = WriteBatch::default();
        clear.put_cf(self.cf(CF_RAFT), KEY_INSTALLING, codec::encode_snapshot_meta(meta));
        clear.delete_range_cf(state, [0u8].as_slice(), [0xffu8; 64].as_slice());
        // Keys are at most a few KiB; anything past 64 x 0xff is removed one by one.
        for item in self.db.iterator_cf(state, IteratorMode::From(&[0xffu8; 64], rocksdb::Direction::Forward)) {
            clear.delete_cf(state, item?.0);
        }
        clear.delete_cf(state, [] as [u8; 0]);
        for prefix in [SESSION_PREFIX].into_iter().chain(SYSTEM_PREFIXES) {
            clear.delete_range_cf(metacf, prefix, prefix_end(prefix).as_slice());
        }
        clear.delete_range_cf(self.cf(CF_LOG), encode_index(Index(0)), encode_index(Index(u64::MAX)));
        {
            // The log's records so far go to table files first, and none
            // comes between: a restart writes again only records after
            // this point, never an entry or hard state from before it over
            // the cleared log, nor a snapshot record over the one this
            // install writes (`wal.rs`). The clear itself is in RocksDB's
            // WAL, before the files it makes way for. Most of the flush
            // runs before the segments are held: the Raft loop's notes of
            // log time do not wait for it.
            if self.db.crashed() {
                return Err(StorageError::Crashed);
            }
            self.db.flush_all(true)?;
            let _records = self.wal.exclusive();
            self.db.flush_all(true)?;
            self.write(clear, &self.sync_opts())?;
        }

        for (file, cf) in [(STATE_FILE, CF_STATE), (META_FILE, CF_META)] {
            let path = dir.join(file);
            if path.exists() {
                self.ingest(&path, cf)?;
            }
        }

        let mut done = WriteBatch::default();
        done.put_cf(metacf, KEY_APPLIED, codec::encode_log_id(&meta.last));
        done.put_cf(metacf, KEY_APPLIED_MEMBERSHIP, codec::encode_membership(&meta.membership));
        done.put_cf(self.cf(CF_RAFT), KEY_SNAPSHOT, codec::encode_snapshot_meta(meta));
        done.delete_cf(self.cf(CF_RAFT), KEY_INSTALLING);
        self.write(done, &self.sync_opts())?;
        self.terms.lock().clear();
        *bounds = crate::rocks::Bounds { first: meta.last.index.next(), last: meta.last.index, before_first: meta.last };
        drop(bounds);

        let _ = std::fs::remove_dir_all(dir);
        self.checkpoint(meta.last.index)?;
        self.remove_snapshots_except(meta.last.index)
    }

    /// Ingests one staged table file into `cf`, keeping the staged file (a
    /// hard link is what RocksDB moves in), so that a restart can ingest it
    /// again. Counts as a write for [`Storage::crash_after_writes`].
    fn ingest(&self, file: &Path, cf: &str) -> Result<(), StorageError> {
        self.spend_write()?;
        let link = file.with_extension("ingest");
        let _ = std::fs::remove_file(&link);
        if std::fs::hard_link(file, &link).is_err() {
            std::fs::copy(file, &link).map_err(io)?;
        }
        let mut opts = IngestExternalFileOptions::default();
        opts.set_move_files(true);
        self.db.ingest_external_file_cf_opts(self.cf(cf), &opts, vec![&link])?;
        Ok(())
    }

    /// At open, before anything reads the store: finishes an install a
    /// crash interrupted, and removes staged snapshots no install needs.
    pub(crate) fn finish_interrupted_install(&self) -> Result<(), StorageError> {
        let incoming = self.incoming_dir();
        let marker = self.db.get_cf(self.cf(CF_RAFT), KEY_INSTALLING)?;
        let install = incoming.join(INSTALL_DIR);
        if let Some(bytes) = marker {
            let meta = codec::decode_snapshot_meta(&bytes)?;
            if !install.exists() {
                return Err(StorageError::Corrupt {
                    what: "snapshot install",
                    key: Some(format!("index {}", meta.last.index)),
                    detail: format!(
                        "an install was interrupted and its staged files in {} are gone; \
                         this node's state cannot be recovered: remove its data directory and add it to the cluster again",
                        install.display()
                    ),
                });
            }
            tracing::warn!(index = meta.last.index.0, "finishing a snapshot install that a crash interrupted");
            self.install_staged_files(&meta, &install)?;
        }
        if incoming.exists() {
            std::fs::remove_dir_all(&incoming).map_err(io)?;
        }
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(io)
}
