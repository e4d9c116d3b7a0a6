use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rocksdb::{ColumnFamilyDescriptor, DB, Options, WriteBatch, WriteOptions};
use wasmraft_raft::{HardState, Index, LogId, Membership, SnapshotMeta};

use crate::codec;
use crate::error::StorageError;
use crate::log_time_note::LogTimeNote;
use crate::term_index::TermIndex;
use crate::wal::LogWal;

pub(crate) const CF_LOG: &str = "log";
pub(crate) const CF_RAFT: &str = "raft";
pub(crate) const CF_STATE: &str = "state";
pub(crate) const CF_META: &str = "meta";
/// Every column family, in the order they are opened.
pub(crate) const COLUMN_FAMILIES: [&str; 4] = [CF_LOG, CF_RAFT, CF_STATE, CF_META];

pub(crate) const KEY_HARD_STATE: &[u8] = b"hard_state";
pub(crate) const KEY_BOOTSTRAP: &[u8] = b"bootstrap_membership";
pub(crate) const KEY_SNAPSHOT: &[u8] = b"snapshot_meta";
pub(crate) const KEY_NODE_ID: &[u8] = b"node_id";
pub(crate) const KEY_APPLIED: &[u8] = b"applied";
pub(crate) const KEY_CLUSTER_ID: &[u8] = b"cluster_id";
pub(crate) const KEY_REMOVED: &[u8] = b"removed_members";
pub(crate) const KEY_LOG_TIME_NOTE: &[u8] = b"log_time_note";
/// The note's boot time, apart (see `LogTimeNote::encode`).
pub(crate) const KEY_LOG_TIME_BOOT: &[u8] = b"log_time_boot";
/// The last record of the log's write-ahead segments in this write (`wal.rs`).
pub(crate) const KEY_WAL_SEQ: &[u8] = b"log_wal_seq";

/// How to open the store.
#[derive(Clone, Debug)]
pub struct StorageOptions {
    /// Fsync log appends before they count (turn off only for benchmarks of
    /// everything else; a node without it can lose acknowledged writes).
    pub sync_log: bool,
    /// Bytes of each of the log's two write-ahead segments, allocated on
    /// disk when the store is made (default 64 MiB; smaller in tests that
    /// fill them).
    pub log_segment_bytes: u64,
}

impl Default for StorageOptions {
    fn default() -> Self {
        Self { sync_log: true, log_segment_bytes: crate::wal::SEGMENT_BYTES }
    }
}

/// The cached bounds of the log, kept in step with every write.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    pub first: Index,
    pub last: Index,
    /// The log id just before `first` (the snapshot's last, or 0-0).
    pub before_first: LogId,
}

/// A node's RocksDB instance. Thread-safe and cheap to clone (clones share
/// the instance): the raft loop appends, the apply thread applies, queries
/// read, all through `&self`.
#[derive(Clone)]
pub struct Storage {
    pub(crate) db: Arc<Db>,
    pub(crate) bounds: Arc<Mutex<Bounds>>,
    /// The term of every entry in the log (`term_index.rs`), kept in step
    /// with the bounds.
    pub(crate) terms: Arc<Mutex<TermIndex>>,
    pub(crate) hard_state: Arc<Mutex<HardState>>,
    /// Where the log's writes become durable (`wal.rs`).
    pub(crate) wal: Arc<LogWal>,
    pub(crate) options: StorageOptions,
    /// Fault injection: milliseconds each synced log append waits first.
    /// See [`Storage::stall_synced_appends`].
    pub(crate) append_stall_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("path", &self.db.path())
            .field("bounds", &*self.bounds.lock())
            .finish()
    }
}

impl Storage {
    /// Opens (or creates) the store in `dir` for node `node_id`. A directory
    /// written by another node id is refused.
    pub fn open(dir: &Path, node_id: u64, options: StorageOptions) -> Result<Self, StorageError> {
        // Applied batches skip RocksDB's write-ahead log
        // (`Storage::applied_batch_opts`): what a close would flush, `Db`'s
        // drop flushes instead, unless the store is to act as if its
        // process died.
        let mut db_opts = Options::default().get_options_from_string("avoid_flush_during_shutdown=true")?;
        // The keyspace and the applied id are in two column families, and
        // unflushed writes of either are lost in a crash: flushed apart, a
        // restart could find a state ahead of its applied id and apply
        // entries to it a second time. Flushed together, they always agree.
        db_opts.set_atomic_flush(true);
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        // Recovery after a torn tail: replay the WAL up to the last intact record
        // rather than refusing to open.
        db_opts.set_wal_recovery_mode(rocksdb::DBRecoveryMode::PointInTime);
        let cfs = bounded_memory(&mut db_opts);
        let db = DB::open_cf_descriptors(&db_opts, dir, cfs)?;
        let db = Db { db, writes_left: AtomicU64::new(u64::MAX) };
        check_node_id(&db, node_id)?;
        let wal = LogWal::open(dir, options.log_segment_bytes, &db)?;
        let storage = Self {
            db: Arc::new(db),
            bounds: Arc::new(Mutex::new(Bounds {
                first: Index(1),
                last: Index(0),
                before_first: LogId::default(),
            })),
            terms: Arc::default(),
            hard_state: Arc::new(Mutex::new(HardState::default())),
            wal: Arc::new(wal),
            options,
            append_stall_ms: Arc::default(),
        };
        storage.remove_stale_reader_dirs();
        storage.finish_interrupted_install()?;
        storage.load()?;
        storage.ensure_checkpoint()?;
        Ok(storage)
    }

    fn load(&self) -> Result<(), StorageError> {
        if let Some(bytes) = self.db.get_cf(self.cf(CF_RAFT), KEY_HARD_STATE)? {
            *self.hard_state.lock() = codec::decode_hard_state(&bytes)?;
        }
        let before_first = self
            .snapshot_meta_stored()?
            .map(|m| m.last)
            .unwrap_or_default();
        let first = before_first.index.next();
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_LOG));
        iter.seek_to_last();
        let last = match iter.key() {
            Some(k) => Index(crate::log::decode_index(k)?),
            None => before_first.index,
        };
        iter.status()?;
        let last = last.max(before_first.index);
        *self.terms.lock() = TermIndex::build(first, last, |index| self.read_term(index))?;
        *self.bounds.lock() = Bounds {
            first,
            last,
            before_first,
        };
        Ok(())
    }

    pub(crate) fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    /// Every write batch goes through here: one atomic RocksDB write.
    pub(crate) fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<(), StorageError> {
        self.spend_write()?;
        self.db.write_opt(batch, opts)?;
        Ok(())
    }

    /// Counts one durable write against a crash point, if one is set.
    pub(crate) fn spend_write(&self) -> Result<(), StorageError> {
        let left = self.db.writes_left.load(Ordering::Acquire);
        if left != u64::MAX {
            if left == 0 {
                return Err(StorageError::Crashed);
            }
            self.db.writes_left.store(left - 1, Ordering::Release);
        }
        Ok(())
    }

    /// Fault injection for crash tests: the next `writes` write batches
    /// (or file ingestions) succeed, every later one fails with [`StorageError::Crashed`] and
    /// changes nothing, as if the process had died between two writes. The
    /// test then drops every handle and opens the directory again. A write
    /// batch is atomic, so this reaches every crash point a `kill -9` can.
    /// Once crashed, the store is not flushed when it closes: applied
    /// batches not yet in a table file are lost, as in a real crash, and
    /// the node applies their entries again from the log. `0` crashes now.
    pub fn crash_after_writes(&self, writes: u64) {
        self.db.writes_left.store(writes, Ordering::Release);
    }

    /// Whether a crash point is set ([`Storage::crash_after_writes`]): the
    /// store may already refuse writes, or will after a few more.
    pub fn crash_point_set(&self) -> bool {
        self.db.writes_left.load(Ordering::Acquire) != u64::MAX
    }

    /// Fault injection for tests: from now on every synced log append
    /// takes `stall` longer, as on a disk whose fsync stalls.
    pub fn stall_synced_appends(&self, stall: std::time::Duration) {
        self.append_stall_ms.store(stall.as_millis() as u64, std::sync::atomic::Ordering::Release);
    }

    /// Notes log time against this node's clocks: after a restart, the
    /// time since is measured by the boot clock if the machine has not
    /// rebooted, else by the wall clock. Node-local (not in snapshots),
    /// not synced: a crash may leave the note before it, which counts
    /// only stamps the log held then (the caller's concern: notes of a
    /// new term go with its entries, and of a rewind with the write that
    /// replaces the suffix, `append_noted`, or synced before a snapshot
    /// replaces the log, `replace_log_time_note`), so it lags, never
    /// leads. Never waits for another write to the log:
    /// [`StorageError::Busy`] instead, and the caller notes again later.
    pub fn note_log_time(&self, note: &LogTimeNote) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        self.put_log_time_note(&mut batch, Some(note));
        // From the Raft loop's thread: never behind a log write or a flush.
        self.try_write_logged(batch)
    }

    /// Replaces the log-time note (`None`: removes it), synced like the
    /// log. For a rewind of log time as a snapshot replaces the log: the
    /// note taken before it may count stamps of entries about to leave the
    /// log, so the new one must be durable before they go, or a crash
    /// between the two would bring their time back after the restart. (A
    /// replaced suffix changes the note in the write that truncates it,
    /// [`NoteChange`](crate::NoteChange) in `append_noted`.)
    pub fn replace_log_time_note(&self, note: Option<&LogTimeNote>) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        self.put_log_time_note(&mut batch, note);
        self.write_logged(batch, true)
    }

    /// Adds `note` (`None`: its removal) to `batch`, under both its keys.
    pub(crate) fn put_log_time_note(&self, batch: &mut WriteBatch, note: Option<&LogTimeNote>) {
        let raft = self.cf(CF_RAFT);
        let (plain, with_boot) = match note.map(LogTimeNote::encode) {
            Some((plain, with_boot)) => (Some(plain), with_boot),
            None => (None, None),
        };
        match plain {
            Some(plain) => batch.put_cf(raft, KEY_LOG_TIME_NOTE, plain),
            None => batch.delete_cf(raft, KEY_LOG_TIME_NOTE),
        }
        match with_boot {
            Some(with_boot) => batch.put_cf(raft, KEY_LOG_TIME_BOOT, with_boot),
            None => batch.delete_cf(raft, KEY_LOG_TIME_BOOT),
        }
    }

    /// The last note of log time ([`note_log_time`](Self::note_log_time)).
    pub fn log_time_note(&self) -> Result<Option<LogTimeNote>, StorageError> {
        let Some(note) = self.db.get_cf(self.cf(CF_RAFT), KEY_LOG_TIME_NOTE)? else { return Ok(None) };
        let boot = self.db.get_cf(self.cf(CF_RAFT), KEY_LOG_TIME_BOOT)?;
        LogTimeNote::decode(&note, boot.as_deref())
            .map(Some)
            .map_err(|detail| StorageError::Corrupt { what: "log time note", key: None, detail })
    }

    pub(crate) fn sync_opts(&self) -> WriteOptions {
        let mut o = WriteOptions::default();
        o.set_sync(self.options.sync_log);
        o
    }

    /// Options for an applied batch: not in RocksDB's write-ahead log. The
    /// Raft log is the state's write-ahead log: a crash loses the applied
    /// batches that are only in memtables, with the applied id they set
    /// (atomic flush keeps the two in step), and the node applies those
    /// entries again from the log, which holds every entry after the
    /// last snapshot. Every write would otherwise go to disk twice, once
    /// in the log entry and once in the state, and each log fsync would
    /// carry both.
    pub(crate) fn applied_batch_opts() -> WriteOptions {
        let mut o = WriteOptions::default();
        o.disable_wal(true);
        o
    }

    /// Records the configuration a new cluster starts from. Only for a node
    /// that has never been part of a cluster; a node that joins one gets its
    /// membership from the leader.
    pub fn bootstrap(&self, membership: &Membership) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(
            self.cf(CF_RAFT),
            KEY_BOOTSTRAP,
            codec::encode_membership(membership),
        );
        self.write(batch, &self.sync_opts())?;
        Ok(())
    }

    /// The id of the cluster this store belongs to, once fixed (at
    /// bootstrap, or when a joining node first hears from its cluster).
    pub fn cluster_id(&self) -> Result<Option<u64>, StorageError> {
        match self.db.get_cf(self.cf(CF_RAFT), KEY_CLUSTER_ID)? {
            Some(bytes) => match <[u8; 8]>::try_from(bytes.as_slice()) {
                Ok(b) => Ok(Some(u64::from_be_bytes(b))),
                Err(_) => Err(StorageError::Corrupt {
                    what: "cluster id",
                    key: None,
                    detail: format!("{} bytes, not 8", bytes.len()),
                }),
            },
            None => Ok(None),
        }
    }

    /// Fixes the cluster id, durably. It never changes afterwards.
    pub fn set_cluster_id(&self, id: u64) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_RAFT), KEY_CLUSTER_ID, id.to_be_bytes());
        self.write(batch, &self.sync_opts())?;
        Ok(())
    }

    /// Ids removed from the cluster, as this node saw its committed
    /// configuration change. An id once removed is never a member again.
    pub fn removed_members(&self) -> Result<std::collections::BTreeSet<u64>, StorageError> {
        let Some(bytes) = self.db.get_cf(self.cf(CF_RAFT), KEY_REMOVED)? else {
            return Ok(Default::default());
        };
        if bytes.len() % 8 != 0 {
            return Err(StorageError::Corrupt {
                what: "removed members",
                key: None,
                detail: format!("{} bytes", bytes.len()),
            });
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// Records the removed ids, durably.
    pub fn set_removed_members(
        &self,
        ids: &std::collections::BTreeSet<u64>,
    ) -> Result<(), StorageError> {
        let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_be_bytes()).collect();
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_RAFT), KEY_REMOVED, bytes);
        self.write(batch, &self.sync_opts())?;
        Ok(())
    }

    /// Whether this store has ever held any Raft state.
    pub fn is_empty(&self) -> Result<bool, StorageError> {
        let raft = self.cf(CF_RAFT);
        Ok(self.db.get_cf(raft, KEY_HARD_STATE)?.is_none()
            && self.db.get_cf(raft, KEY_BOOTSTRAP)?.is_none()
            && self.bounds.lock().last == Index(0))
    }

    pub(crate) fn bootstrap_membership(&self) -> Result<Membership, StorageError> {
        match self.db.get_cf(self.cf(CF_RAFT), KEY_BOOTSTRAP)? {
            Some(bytes) => codec::decode_membership(&bytes),
            None => Ok(Membership::default()),
        }
    }

    pub(crate) fn snapshot_meta_stored(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        match self.db.get_cf(self.cf(CF_RAFT), KEY_SNAPSHOT)? {
            Some(bytes) => codec::decode_snapshot_meta(&bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The persisted hard state.
    pub fn hard_state(&self) -> HardState {
        *self.hard_state.lock()
    }

    /// Bytes on disk of the store's table and blob files (and memtables):
    /// all of them, and those live in its current version (what compaction
    /// would keep).
    pub fn size_bytes(&self) -> (u64, u64) {
        let (mut total, mut live) = (0, 0);
        for name in COLUMN_FAMILIES {
            let cf = self.cf(name);
            let prop = |p: &str| self.db.property_int_value_cf(cf, p).ok().flatten().unwrap_or(0);
            let memtables = prop("rocksdb.cur-size-all-mem-tables");
            total += prop("rocksdb.total-sst-files-size") + prop("rocksdb.total-blob-file-size") + memtables;
            live += prop("rocksdb.live-sst-files-size")
                + prop("rocksdb.live-blob-file-size").saturating_sub(prop("rocksdb.live-blob-file-garbage-size"))
                + memtables;
        }
        (total, live)
    }

    /// Rewrites every column family's table files down to what is live,
    /// reclaiming the space of deleted and overwritten records (etcd's
    /// defragment), blob files included: for its duration, compactions
    /// move the live values out of every blob file, not only the oldest.
    /// Blocks for as long as RocksDB takes; reads and writes go on
    /// meanwhile.
    pub fn compact_files(&self) {
        // One at a time: a second would reset the cutoff under the first.
        static ONE_AT_A_TIME: Mutex<()> = parking_lot::const_mutex(());
        let _one = ONE_AT_A_TIME.lock();
        // The bottommost level too (except files this call just wrote): by
        // default RocksDB leaves it as it is, with the references into old
        // blob files.
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::ForceOptimized);
        for name in COLUMN_FAMILIES {
            let cf = self.cf(name);
            let blobs = takes_values(name);
            if blobs {
                self.set_blob_gc_age_cutoff(cf, 1.0);
            }
            self.db.compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &opts);
            if blobs {
                self.set_blob_gc_age_cutoff(cf, BLOB_GC_AGE_CUTOFF);
            }
        }
    }

    fn set_blob_gc_age_cutoff(&self, cf: &rocksdb::ColumnFamily, cutoff: f64) {
        let cutoff = cutoff.to_string();
        if let Err(e) = self.db.set_options_cf(cf, &[("blob_garbage_collection_age_cutoff", cutoff.as_str())]) {
            tracing::warn!(error = %e, "cannot change the blob files' garbage collection");
        }
    }

    /// The path of the RocksDB directory.
    pub fn path(&self) -> &Path {
        self.db.path()
    }
}

/// The RocksDB instance of a [`Storage`] and all its clones. Closing it
/// (the last clone dropped) flushes the memtables: applied batches are not
/// in the write-ahead log ([`Storage::applied_batch_opts`]), and a clean
/// stop should not have to apply them again. A store that acts as if its
/// process died ([`Storage::crash_after_writes`]) closes without a flush,
/// losing them as a `kill -9` would.
pub(crate) struct Db {
    db: DB,
    /// Fault injection: writes still allowed before the store acts as if
    /// the process died (`u64::MAX`: no limit). See [`Storage::crash_after_writes`].
    writes_left: AtomicU64,
}

impl Db {
    /// Whether the store acts as if its process died.
    pub(crate) fn crashed(&self) -> bool {
        self.writes_left.load(Ordering::Acquire) == 0
    }

    /// Flushes every column family's memtables, in one atomic flush;
    /// `wait`: returns once it is done, else once it is scheduled.
    pub(crate) fn flush_all(&self, wait: bool) -> Result<(), rocksdb::Error> {
        let mut opts = rocksdb::FlushOptions::default();
        opts.set_wait(wait);
        let cfs: Vec<_> = COLUMN_FAMILIES.iter().filter_map(|name| self.db.cf_handle(name)).collect();
        self.db.flush_cfs_opt(&cfs, &opts)
    }
}

impl std::ops::Deref for Db {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.db
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if self.crashed() {
            return;
        }
        if let Err(e) = self.flush_all(true) {
            tracing::warn!(error = %e, "cannot flush the store as it closes; the node applies the unflushed entries again from its log");
        }
    }
}

/// All memtables together, across column families: RocksDB flushes the
/// largest once they pass it.
const MEMTABLES_BYTES: usize = 64 << 20;
/// One memtable of the log or state column family: large values fill it in
/// a dozen writes.
const MEMTABLE_BYTES: usize = 16 << 20;
/// Memtables of the log or state column family, the one taking writes and
/// those waiting for their flush. With two, a burst of large values that
/// fills the second while the first still flushes stops every write to the
/// database (RocksDB's write stall), and with it the Raft loop's synced
/// append, for seconds under load: followers stop answering heartbeats and
/// the leader loses its quorum. Four give a flush room to finish;
/// [`MEMTABLES_BYTES`] still has RocksDB flush the largest once all of them
/// together pass it.
const MEMTABLES_PER_LARGE_CF: i32 = 4;
/// One memtable of the small column families (hard state, metadata).
const SMALL_MEMTABLE_BYTES: usize = 4 << 20;
/// Write-ahead log files kept at most: past it, RocksDB flushes (every
/// column family, in one atomic flush) so that the oldest file can go. A
/// WAL file is deleted only once every column family's data in it is
/// flushed, and the hard state takes a write in nearly every file but fills
/// its memtable rarely: by default (4 x all memtables) a node kept 700 MB of
/// WAL under large values, five times the data written.
const MAX_TOTAL_WAL_BYTES: u64 = 2 * MEMTABLES_BYTES as u64;
/// One block cache for every column family.
const BLOCK_CACHE_BYTES: usize = 32 << 20;
/// Whether column family `name` takes every value written (the log's
/// entries and the state): large memtables, and blob files.
fn takes_values(name: &str) -> bool {
    name == CF_LOG || name == CF_STATE
}

/// Values from this size on are kept in blob files (see [`blob_values`]).
const MIN_BLOB_BYTES: u64 = 4 << 10;

/// Large values apart from their keys (RocksDB's integrated BlobDB): a
/// flush writes each such value once, to a blob file, and compactions move
/// only its reference. Kept in the table files, every 64 KiB value was
/// written again by each compaction it went through: RocksDB's flush and
/// compaction threads took two thirds of a member's CPU under 64 KiB puts.
/// Blob files whose values are all deleted go with the last table file
/// that referred to them; garbage collection during compactions moves the
/// live values out of the oldest files (a quarter of them), so that a
/// value overwritten many times does not keep its old blob files alive.
fn blob_values(cf: &mut Options) {
    cf.set_enable_blob_files(true);
    cf.set_min_blob_size(MIN_BLOB_BYTES);
    cf.set_blob_file_size(64 << 20);
    cf.set_enable_blob_gc(true);
    cf.set_blob_gc_age_cutoff(BLOB_GC_AGE_CUTOFF);
}

/// The oldest blob files, as a fraction of them all, whose live values
/// compactions move to new files.
const BLOB_GC_AGE_CUTOFF: f64 = 0.25;

/// Bounds RocksDB's memory: by default each of the four column families
/// had two 64 MiB memtables and a 32 MiB block cache of its own (640 MiB
/// in all, reached under large values: the log and state column families
/// both take every value). Now memtables past [`MEMTABLES_BYTES`] together
/// are flushed (at most 136 MiB while flushes queue) and blocks share
/// [`BLOCK_CACHE_BYTES`], index and filter blocks included.
fn bounded_memory(db_opts: &mut Options) -> [ColumnFamilyDescriptor; 4] {
    db_opts.set_db_write_buffer_size(MEMTABLES_BYTES);
    db_opts.set_max_total_wal_size(MAX_TOTAL_WAL_BYTES);
    let cache = rocksdb::Cache::new_lru_cache(BLOCK_CACHE_BYTES);
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_cache_index_and_filter_blocks(true);
    // A point read probes every level-0 file and one file per level; all of
    // them span every key prefix (current keys, versions, the revision
    // log), so without a filter each probe reads and decompresses a data
    // block: reads and puts (which read the key first) slowed 8x as a
    // state grew from 200,000 to 500,000 keys. 10 bits a key: about 1%
    // false positives.
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks share the block cache; whole, a large table's
    // are hundreds of KiB, evicted by data blocks and read back for every
    // point read once the state outgrows the cache. Partitioned, a read
    // loads only the partitions it needs; the top levels stay pinned.
    table.set_index_type(rocksdb::BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    COLUMN_FAMILIES.map(|name| {
        let mut cf = Options::default();
        cf.set_block_based_table_factory(&table);
        let (size, count) = if takes_values(name) {
            (MEMTABLE_BYTES, MEMTABLES_PER_LARGE_CF)
        } else {
            (SMALL_MEMTABLE_BYTES, 2)
        };
        cf.set_write_buffer_size(size);
        cf.set_max_write_buffer_number(count);
        if takes_values(name) {
            blob_values(&mut cf);
        }
        if name == CF_STATE {
            // Every put reads its key first, and most such reads find it in
            // a table file or nowhere: a whole-key filter in each memtable
            // (about 2% of its size) spares them the search through each
            // memtable's skip list.
            cf.set_memtable_prefix_bloom_ratio(0.02);
            cf.set_memtable_whole_key_filtering(true);
        }
        if name == CF_LOG {
            // Entries live until the next snapshot and are read back to
            // replicate them: compressing them spent the leader's CPU on
            // every read (a whole large value decompressed per append
            // sent) to save disk that compaction frees soon anyway.
            cf.set_compression_type(rocksdb::DBCompressionType::None);
        }
        ColumnFamilyDescriptor::new(name, cf)
    })
}

/// Refuses a directory written by another node id; records the id in a
/// new one. Before anything else of the store is opened or written.
fn check_node_id(db: &Db, node_id: u64) -> Result<(), StorageError> {
    let cf = db.cf_handle(CF_META).expect("column family created at open");
    match db.get_cf(cf, KEY_NODE_ID)? {
        Some(bytes) => {
            let stored = codec::decode_u64("node id", &bytes)?;
            if stored != node_id {
                return Err(StorageError::Incompatible(format!("the directory belongs to node {stored}, not node {node_id}")));
            }
        }
        None => {
            let mut opts = WriteOptions::default();
            opts.set_sync(true);
            db.put_cf_opt(cf, KEY_NODE_ID, codec::encode_u64(node_id), &opts)?;
        }
    }
    Ok(())
}
