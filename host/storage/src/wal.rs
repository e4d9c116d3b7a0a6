//! The Raft log's own write-ahead log: preallocated segment files that
//! make its writes durable, in place of RocksDB's write-ahead log.
//!
//! Every write to the log's keys (entries, their truncation and
//! compaction, the hard state, notes of log time) goes to RocksDB without
//! RocksDB's WAL, and, as the same write batch's bytes, to a record here
//! first. A synced append is one `fdatasync` of a segment file that was
//! allocated whole when it was made: its size never changes, so the
//! `fdatasync` does not write the file's inode for a new size, as every
//! `fdatasync` of RocksDB's growing WAL file did (the first pass through a
//! segment still marks its allocated blocks written, once per block).
//! RocksDB cannot do this itself: it recycles WAL files only without
//! writes that skip its WAL, and the applied batches skip it.
//!
//! Records are `[len: u32][crc: u32][turn: u64][seq: u64][batch]`
//! (little-endian; the CRC covers `turn`, `seq` and the batch). Each batch
//! also writes its `seq` under `KEY_WAL_SEQ`, so RocksDB's table files say
//! which records they hold: at open, the records after that one are
//! written again, in order, and flushed, and a crash loses nothing a
//! record holds.
//!
//! Two segments take turns. When the one in use is full, its records are
//! synced, a flush of RocksDB's memtables (in the background) puts them in
//! table files, and writing goes on in the other, once the flush that
//! started when that one filled has ended. Each time a segment is written
//! from its start (a new turn, and at every open) its records get a new
//! random `turn`: recovery ends a segment's records at the first that is
//! torn, or from another turn, or not the next number, or cleared (a
//! write RocksDB refused while it stalled writes). Records an older
//! turn or an earlier run left behind never join the newest ones, and
//! bytes a client chose inside an entry cannot pass for a record.
//!
//! A write or sync that fails stops every later write: after a failed
//! `fdatasync` the kernel may have dropped the pages it could not write,
//! and a later `fdatasync` would not say so.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use parking_lot::{Condvar, Mutex};
use rocksdb::WriteBatch;

use crate::error::StorageError;
use crate::rocks::{CF_RAFT, Db, KEY_WAL_SEQ, Storage};

/// Segments taking turns.
const SEGMENTS: usize = 2;
/// A record's header: length, CRC, turn, sequence number.
const HEADER_BYTES: usize = 24;
/// The smallest segment [`crate::StorageOptions::log_segment_bytes`] takes.
pub(crate) const MIN_SEGMENT_BYTES: u64 = 4 << 10;
/// The default size of a segment (etcd's WAL segments are as large).
pub(crate) const SEGMENT_BYTES: u64 = 64 << 20;

/// The segment files and where the next record goes.
pub(crate) struct LogWal {
    dir: PathBuf,
    segment_bytes: u64,
    writer: Mutex<Writer>,
    /// One sync at a time, so that a failure shows in the sync that met it.
    syncing: Mutex<()>,
    /// Why writing stopped: a write or sync of a segment failed.
    failed: Mutex<Option<String>>,
    flushed: Arc<Flushed>,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Held while a record is written: records reach RocksDB in their order.
pub(crate) struct Writer {
    segments: [Arc<File>; SEGMENTS],
    /// The last record written to each segment since it was last started
    /// from its beginning (0: none).
    last_in: [u64; SEGMENTS],
    current: usize,
    offset: u64,
    /// The current turn's number (see the module doc).
    turn: u64,
    next_seq: u64,
}

/// The records RocksDB's table files hold, as far as this process knows.
struct Flushed {
    state: Mutex<FlushState>,
    changed: Condvar,
}

struct FlushState {
    through: u64,
    /// Fault injection: background flushes wait while set.
    held: bool,
    /// A write waits for a flush (for tests that hold them).
    waiting: bool,
    /// Why no flush will come: RocksDB's error, or the store acts as if
    /// its process died.
    error: Option<StorageError>,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl Fn(std::io::Error) -> StorageError + 'a {
    move |e| StorageError::Rocks(format!("{what} {}: {e}", path.display()))
}

fn segment_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("raftlog-{i}.seg"))
}

/// One record's bytes.
fn encode_record(turn: u64, seq: u64, batch: &[u8]) -> Result<Vec<u8>, StorageError> {
    let len = u32::try_from(batch.len()).map_err(|_| StorageError::Refused(format!("a log write of {} bytes", batch.len())))?;
    let mut out = Vec::with_capacity(HEADER_BYTES + batch.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&record_crc(turn, seq, batch).to_le_bytes());
    out.extend_from_slice(&turn.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(batch);
    Ok(out)
}

fn record_crc(turn: u64, seq: u64, batch: &[u8]) -> u32 {
    let mut crc = crc32fast::Hasher::new();
    crc.update(&turn.to_le_bytes());
    crc.update(&seq.to_le_bytes());
    crc.update(batch);
    crc.finalize()
}

/// A new turn's number: random (std's per-process random hash keys), so
/// that no earlier turn and no client can have written it.
fn new_turn() -> u64 {
    use std::hash::BuildHasher;
    static TURNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    std::hash::RandomState::new().hash_one(TURNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// The records of one segment: its last record's number, and those after
/// `after` with their batches.
struct Run {
    last: Option<u64>,
    after: Vec<(u64, Vec<u8>)>,
}

/// The records at the start of a segment that follow each other: intact
/// (length within the file, CRC), of the first one's turn, and numbered
/// one after another. The first that is not ends them: a torn write, zeros
/// never written or a cleared length, or a record of an older turn. Keeps
/// the batches of those numbered after `after` only.
fn read_run(path: &Path, after: u64) -> Result<Run, StorageError> {
    let file = File::open(path).map_err(io("opening the log segment", path))?;
    let mut left = file.metadata().map_err(io("reading the log segment", path))?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut run = Run { last: None, after: Vec::new() };
    let mut turn = None;
    let mut header = [0u8; HEADER_BYTES];
    while left >= HEADER_BYTES as u64 {
        reader.read_exact(&mut header).map_err(io("reading the log segment", path))?;
        left -= HEADER_BYTES as u64;
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        let this_turn = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        let seq = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
        let follows = match run.last {
            None => true,
            Some(last) => turn == Some(this_turn) && last.checked_add(1) == Some(seq),
        };
        if len == 0 || len > left || !follows {
            break;
        }
        let mut batch = vec![0u8; len as usize];
        reader.read_exact(&mut batch).map_err(io("reading the log segment", path))?;
        left -= len;
        if record_crc(this_turn, seq, &batch) != crc {
            break;
        }
        turn = Some(this_turn);
        run.last = Some(seq);
        if seq > after {
            run.after.push((seq, batch));
        }
    }
    Ok(run)
}

/// Makes a segment of `bytes`, allocated on disk now, so that writing
/// into it never changes its size.
fn create_segment(path: &Path, bytes: u64) -> Result<(), StorageError> {
    let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io("creating the log segment", path))?;
    if file.metadata().map_err(io("reading the log segment", path))?.len() >= bytes {
        return Ok(());
    }
    let len = libc::off_t::try_from(bytes).map_err(|_| StorageError::Refused(format!("a log segment of {bytes} bytes")))?;
    // SAFETY: a plain syscall on an open descriptor this function owns.
    #[allow(unsafe_code)]
    let allocated = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0, len) } == 0;
    if !allocated {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // Filesystems without fallocate: a sparse file of the full size.
            Some(libc::EOPNOTSUPP | libc::ENOSYS) => file.set_len(bytes).map_err(io("sizing the log segment", path))?,
            _ => return Err(io("allocating the log segment", path)(e)),
        }
    }
    file.sync_all().map_err(io("syncing the log segment", path))
}

impl LogWal {
    /// Opens (or makes) the segments in `dir` and writes into `db` every
    /// record its table files do not hold yet, in order.
    pub(crate) fn open(dir: &Path, segment_bytes: u64, db: &Db) -> Result<Self, StorageError> {
        if segment_bytes < MIN_SEGMENT_BYTES {
            return Err(StorageError::Refused(format!("log segments of {segment_bytes} bytes (at least {MIN_SEGMENT_BYTES})")));
        }
        let raft = db.cf_handle(CF_RAFT).expect("column family created at open");
        let flushed = match db.get_cf(raft, KEY_WAL_SEQ)? {
            None => 0,
            Some(bytes) => u64::from_be_bytes(bytes.as_slice().try_into().map_err(|_| StorageError::Corrupt {
                what: "log write-ahead sequence",
                key: None,
                detail: format!("{} bytes, not 8", bytes.len()),
            })?),
        };
        let mut runs = Vec::new();
        for i in 0..SEGMENTS {
            let path = segment_path(dir, i);
            if path.exists() {
                runs.push(read_run(&path, flushed)?);
            }
            // Also one a crash left short of its size, or made smaller.
            create_segment(&path, segment_bytes)?;
        }
        File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing the directory", dir))?;
        let newest = runs.iter().filter_map(|run| run.last).max().unwrap_or(0).max(flushed);
        let mut after: Vec<(u64, Vec<u8>)> = runs.into_iter().flat_map(|run| run.after).collect();
        after.sort_by_key(|(seq, _)| *seq);
        let mut expected = flushed;
        for (seq, batch) in after {
            expected = expected.checked_add(1).filter(|e| *e == seq).ok_or_else(|| StorageError::Corrupt {
                what: "log write-ahead",
                key: Some(format!("record {}", expected.saturating_add(1))),
                detail: format!("missing: the segments in {} go on at record {seq}", dir.display()),
            })?;
            db.write_opt(WriteBatch::from_data(&batch), &Storage::applied_batch_opts())?;
        }
        if expected > flushed {
            tracing::info!(records = expected - flushed, "wrote the log's records that the last run left unflushed");
            // Every record is in table files now: both segments are free.
            db.flush_all(true)?;
        }
        let next_seq = newest.checked_add(1).ok_or_else(|| StorageError::Corrupt {
            what: "log write-ahead sequence",
            key: None,
            detail: "at its largest value".into(),
        })?;
        let mut segments = Vec::with_capacity(SEGMENTS);
        for i in 0..SEGMENTS {
            let path = segment_path(dir, i);
            let file = OpenOptions::new().read(true).write(true).open(&path).map_err(io("opening the log segment", &path))?;
            segments.push(Arc::new(file));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            segment_bytes,
            writer: Mutex::new(Writer {
                segments: segments.try_into().unwrap_or_else(|_| unreachable!("{SEGMENTS} segments")),
                last_in: [0; SEGMENTS],
                current: 0,
                offset: 0,
                turn: new_turn(),
                next_seq,
            }),
            syncing: Mutex::new(()),
            failed: Mutex::new(None),
            flushed: Arc::new(Flushed {
                state: Mutex::new(FlushState { through: newest, held: false, waiting: false, error: None }),
                changed: Condvar::new(),
            }),
            flusher: Mutex::new(None),
        })
    }

    /// Holds back every record while the guard lives.
    pub(crate) fn exclusive(&self) -> parking_lot::MutexGuard<'_, Writer> {
        self.writer.lock()
    }

    /// Waits until RocksDB's table files hold record `seq`.
    fn wait_flushed(&self, seq: u64) -> Result<(), StorageError> {
        let mut state = self.flushed.state.lock();
        while state.through < seq {
            if let Some(e) = &state.error {
                return Err(e.clone());
            }
            state.waiting = true;
            self.flushed.changed.notify_all();
            self.flushed.changed.wait(&mut state);
        }
        state.waiting = false;
        Ok(())
    }

    /// Flushes RocksDB's memtables in the background; once done, every
    /// record through `seq` is in table files.
    fn flush_in_background(&self, db: Weak<Db>, seq: u64) -> Result<(), StorageError> {
        let flushed = self.flushed.clone();
        let mut flusher = self.flusher.lock();
        if let Some(last) = flusher.take() {
            let _ = last.join();
        }
        let handle = std::thread::Builder::new()
            .name("log-wal-flush".into())
            .spawn(move || {
                {
                    let mut state = flushed.state.lock();
                    while state.held {
                        flushed.changed.wait(&mut state);
                    }
                }
                // A flush that panicked must not leave writes waiting for it.
                let _unwinding = ReportUnwind(flushed.clone());
                let result = match db.upgrade() {
                    // A store that acts as if its process died flushes nothing more.
                    Some(db) if db.crashed() => Err(StorageError::Crashed),
                    Some(db) => db.flush_all(true).map_err(|e| {
                        tracing::error!(error = %e, "cannot flush the log's records to table files");
                        StorageError::Rocks(format!("flushing the log's records before their segment is written again: {e}"))
                    }),
                    // Closed meanwhile: its close flushed.
                    None => Ok(()),
                };
                let mut state = flushed.state.lock();
                match result {
                    Ok(()) => state.through = state.through.max(seq),
                    Err(e) => state.error = Some(e),
                }
                flushed.changed.notify_all();
            })
            .map_err(|e| StorageError::Rocks(format!("starting the log's flush thread: {e}")))?;
        *flusher = Some(handle);
        Ok(())
    }
}

/// Gives the writers waiting for a flush an error if its thread panics.
struct ReportUnwind(Arc<Flushed>);

impl Drop for ReportUnwind {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut state = self.0.state.lock();
        state.error.get_or_insert(StorageError::Rocks("the log's flush thread panicked".into()));
        self.0.changed.notify_all();
    }
}

impl LogWal {
    /// Syncs `file`, one sync at a time; any failure stops every later write.
    fn sync(&self, file: &File) -> Result<(), StorageError> {
        let _one = self.syncing.lock();
        if let Err(e) = file.sync_data() {
            self.fail(format!("syncing a log segment: {e}"));
        }
        // Also a failure another sync met after this record was written:
        // its pages may have been the ones dropped.
        self.check_failed()
    }

    /// Marks the segments failed: no later write goes through.
    fn fail(&self, why: String) -> StorageError {
        self.failed.lock().get_or_insert(why.clone());
        StorageError::Rocks(why)
    }

    fn check_failed(&self) -> Result<(), StorageError> {
        match &*self.failed.lock() {
            Some(why) => Err(StorageError::Rocks(format!("the log's write-ahead segments failed earlier ({why}); the node cannot go on"))),
            None => Ok(()),
        }
    }
}

impl Drop for LogWal {
    fn drop(&mut self) {
        // The flush holds the database open; whoever opens it next must
        // not find it still locked.
        if let Some(handle) = self.flusher.get_mut().take() {
            let _ = handle.join();
        }
    }
}

impl std::fmt::Debug for LogWal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogWal").field("dir", &self.dir).finish()
    }
}

impl Storage {
    /// Writes `batch`, a write to the log's keys: as a record in the log's
    /// segments, then to RocksDB without its WAL. With `sync` (and the
    /// `sync_log` option), returns once the record is on disk. Records
    /// reach RocksDB in their order; the sync runs after the lock, so that
    /// an unsynced write need not wait for it.
    pub(crate) fn write_logged(&self, batch: WriteBatch, sync: bool) -> Result<(), StorageError> {
        self.spend_write()?;
        let file = self.write_locked(&mut self.wal.writer.lock(), batch, true)?;
        if sync && self.options.sync_log {
            self.wal.sync(&file)?;
        }
        Ok(())
    }

    /// [`Self::write_logged`] without sync, for the Raft loop's thread:
    /// [`StorageError::Busy`] instead of waiting for another write, instead
    /// of starting the next segment (which syncs, and may wait for a
    /// flush), and instead of waiting out a stall of RocksDB's writes.
    pub(crate) fn try_write_logged(&self, batch: WriteBatch) -> Result<(), StorageError> {
        let mut w = self.wal.writer.try_lock().ok_or(StorageError::Busy("the log's write-ahead segments are in use"))?;
        self.spend_write()?;
        self.write_locked(&mut w, batch, false).map(drop)
    }

    /// Writes the record and the batch; returns the segment to sync.
    /// `may_wait`: for a segment to turn, and for RocksDB to take the write
    /// while it stalls writes (a flush or compaction behind).
    fn write_locked(&self, w: &mut Writer, mut batch: WriteBatch, may_wait: bool) -> Result<Arc<File>, StorageError> {
        let wal = &self.wal;
        wal.check_failed()?;
        let seq = w.next_seq;
        batch.put_cf(self.cf(CF_RAFT), KEY_WAL_SEQ, seq.to_be_bytes());
        if w.offset > 0 && w.offset + (HEADER_BYTES + batch.data().len()) as u64 > wal.segment_bytes {
            if !may_wait {
                return Err(StorageError::Busy("the log's write-ahead segment is full"));
            }
            self.next_segment(w)?;
        }
        let record = encode_record(w.turn, seq, batch.data())?;
        let file = w.segments[w.current].clone();
        file.write_all_at(&record, w.offset)
            .map_err(|e| wal.fail(format!("writing {}: {e}", segment_path(&wal.dir, w.current).display())))?;
        let mut opts = Self::applied_batch_opts();
        opts.set_no_slowdown(!may_wait);
        match self.db.write_opt(batch, &opts) {
            Ok(()) => {}
            // Refused before RocksDB took any of it. The record's length
            // is cleared, so that recovery ends the segment there (a
            // segment turn syncs it, and the next segment starts with the
            // same number), and the next record takes its place and its
            // number; a shorter one leaves its tail behind, where recovery
            // ends the segment too (no record of the segment's turn there).
            // Not synced: a crash of the machine before the next sync may
            // keep the record whole, which replays it as if it had been
            // written, as a note or a commit index may be at any moment.
            Err(e) if !may_wait && is_write_stall(&e) => {
                file.write_all_at(&[0; 4], w.offset)
                    .map_err(|e| wal.fail(format!("clearing a refused record in {}: {e}", segment_path(&wal.dir, w.current).display())))?;
                return Err(StorageError::Busy("RocksDB is stalling writes (a flush or compaction is behind)"));
            }
            // The record stands on disk from here: a failed RocksDB write
            // would come back at the next open, so it stops writing too.
            Err(e) => return Err(wal.fail(format!("writing a logged batch to RocksDB: {e}"))),
        }
        w.offset += record.len() as u64;
        let current = w.current;
        w.last_in[current] = seq;
        w.next_seq = seq + 1;
        Ok(file)
    }

    /// Moves writing to the other segment, from its beginning, in a new turn.
    fn next_segment(&self, w: &mut Writer) -> Result<(), StorageError> {
        let wal = &self.wal;
        // A record in the next segment must never be on disk without every
        // record before it: recovery stops at the first one missing.
        wal.sync(&w.segments[w.current])?;
        let next = (w.current + 1) % SEGMENTS;
        wal.wait_flushed(w.last_in[next])?;
        wal.flush_in_background(Arc::downgrade(&self.db), w.last_in[w.current])?;
        w.current = next;
        w.offset = 0;
        w.turn = new_turn();
        w.last_in[next] = 0;
        Ok(())
    }

    /// Fault injection for tests: the background flushes that free the
    /// log's segments wait while `hold` is set, as on a slow disk; a write
    /// that needs a segment they free waits with them.
    pub fn hold_log_flushes(&self, hold: bool) {
        let mut state = self.wal.flushed.state.lock();
        state.held = hold;
        self.wal.flushed.changed.notify_all();
    }

    /// Fault injection for tests: RocksDB stops every write, as it does
    /// when its compactions fall too far behind (files pile up in level 0),
    /// until `stall_writes(false)`: a table file in level 0 of the `meta`
    /// column family, which its options then count as too many and never
    /// compact.
    pub fn stall_writes(&self, stall: bool) -> Result<(), StorageError> {
        let cf = self.cf(crate::rocks::CF_META);
        let options: [(&str, &str); 3] = if stall {
            [("level0_file_num_compaction_trigger", "-1"), ("level0_slowdown_writes_trigger", "1"), ("level0_stop_writes_trigger", "1")]
        } else {
            // RocksDB's defaults, which the storage keeps.
            [("level0_file_num_compaction_trigger", "4"), ("level0_slowdown_writes_trigger", "20"), ("level0_stop_writes_trigger", "36")]
        };
        if stall {
            // (A flush that would make too many files waits: made first.)
            self.db.put_cf(cf, b"stall", b"")?;
            self.db.flush_cf(cf)?;
        }
        self.db.set_options_cf(cf, &options)?;
        Ok(())
    }

    /// Fault injection for tests: another thread holds the log's
    /// write-ahead segments, as a write that waits for a flush does, until
    /// [`LogWritesHeld::release`] or for at most `at_most`. Returns once
    /// they are held.
    pub fn hold_log_writes(&self, at_most: std::time::Duration) -> LogWritesHeld {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (held_tx, held) = std::sync::mpsc::channel::<()>();
        let storage = self.clone();
        let thread = std::thread::spawn(move || {
            let _writer = storage.wal.writer.lock();
            let _ = held_tx.send(());
            released.recv_timeout(at_most).is_ok()
        });
        let _ = held.recv();
        LogWritesHeld { release, thread }
    }

    /// For tests that hold flushes: waits until a log write waits for one,
    /// for at most `timeout`; whether it does.
    pub fn log_write_waits_for_flush(&self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.wal.flushed.state.lock();
        while !state.waiting {
            if self.wal.flushed.changed.wait_until(&mut state, deadline).timed_out() {
                return state.waiting;
            }
        }
        true
    }
}

/// RocksDB refused a `no_slowdown` write because it stalls or slows writes
/// (`Status::Incomplete("Write stall")`); not the same status carrying a
/// background error that stopped writes, which stops the log.
fn is_write_stall(e: &rocksdb::Error) -> bool {
    e.kind() == rocksdb::ErrorKind::Incomplete && e.as_ref().ends_with("Write stall")
}

/// The log's write-ahead segments held by [`Storage::hold_log_writes`].
#[derive(Debug)]
pub struct LogWritesHeld {
    release: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<bool>,
}

impl LogWritesHeld {
    /// Lets the log's writes go on; whether they were still held (false:
    /// the time allowed ran out first).
    pub fn release(self) -> bool {
        let _ = self.release.send(());
        self.thread.join().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TURN: u64 = 0x5eed;

    fn record(seq: u64, batch: &[u8]) -> Vec<u8> {
        encode_record(TURN, seq, batch).unwrap()
    }

    fn write_segment(path: &Path, records: &[(u64, &[u8])], tail: &[u8]) {
        let mut bytes = Vec::new();
        for (seq, batch) in records {
            bytes.extend(record(*seq, batch));
        }
        bytes.extend_from_slice(tail);
        bytes.resize(bytes.len() + 64, 0);
        std::fs::write(path, bytes).unwrap();
    }

    fn seqs(path: &Path) -> Vec<u64> {
        read_run(path, 0).unwrap().after.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn a_run_ends_at_zeros_a_torn_record_or_another_turn() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        write_segment(&path, &[(7, b"a"), (8, b"bb"), (9, b"ccc")], &[]);
        assert_eq!(seqs(&path), [7, 8, 9]);
        let run = read_run(&path, 7).unwrap();
        assert_eq!((run.last, run.after.len(), &run.after[0].1[..]), (Some(9), 2, &b"bb"[..]), "only those after 7 are kept");

        // A torn last record: its CRC fails.
        let mut torn = record(10, b"dddd");
        let last = torn.len() - 1;
        torn[last] ^= 1;
        write_segment(&path, &[(7, b"a"), (8, b"bb")], &torn);
        assert_eq!(seqs(&path), [7, 8]);

        // A record of an older turn after the newest ones, even numbered next.
        write_segment(&path, &[(7, b"a"), (8, b"bb")], &encode_record(TURN + 1, 9, b"old").unwrap());
        assert_eq!(seqs(&path), [7, 8]);
        write_segment(&path, &[(7, b"a"), (8, b"bb")], &record(3, b"old"));
        assert_eq!(seqs(&path), [7, 8]);

        // A length past the end of the file.
        let mut long = record(9, b"x");
        long[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        write_segment(&path, &[(7, b"a")], &long);
        assert_eq!(seqs(&path), [7]);

        // The largest number ends the run instead of overflowing.
        write_segment(&path, &[(u64::MAX, b"a")], &record(0, b"b"));
        assert_eq!(seqs(&path), [u64::MAX]);
    }

    fn entries(storage: &Storage) -> Vec<wasmraft_raft::Entry> {
        storage.read_entries(wasmraft_raft::Index(1), wasmraft_raft::Index(10)).unwrap()
    }

    /// Garbage in the segments' places is no record: the log stays as the
    /// table files have it. A record that skips numbers, or a malformed
    /// `log_wal_seq`, is a clear `Corrupt` error at open, not a panic.
    #[test]
    fn garbage_a_gap_or_a_malformed_sequence_never_passes_for_records() {
        use wasmraft_raft::{Entry, EntryPayload, LogId};
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("db");
        let options = || crate::StorageOptions { log_segment_bytes: MIN_SEGMENT_BYTES, ..Default::default() };
        let written: Vec<Entry> =
            (1..=3).map(|i| Entry { log_id: LogId::new(1, i), payload: EntryPayload::Normal(vec![i as u8; 100]) }).collect();
        let storage = Storage::open(&data, 1, options()).unwrap();
        storage.append(&written, None, true).unwrap();
        drop(storage); // a clean close flushes the records into table files

        let mut noise = 0x9e37_79b9_7f4a_7c15u64;
        let garbage: Vec<u8> = (0..MIN_SEGMENT_BYTES)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
                noise as u8
            })
            .collect();
        for i in 0..SEGMENTS {
            std::fs::write(segment_path(&data, i), &garbage).unwrap();
        }
        let storage = Storage::open(&data, 1, options()).unwrap();
        assert_eq!(entries(&storage), written);
        drop(storage);

        // Records that start far past the last flushed one: some are missing.
        let mut segment = record(u64::MAX / 2, b"never replayed");
        segment.resize(MIN_SEGMENT_BYTES as usize, 0);
        std::fs::write(segment_path(&data, 0), &segment).unwrap();
        let gap = Storage::open(&data, 1, options()).unwrap_err();
        assert!(matches!(gap, StorageError::Corrupt { what: "log write-ahead", .. }), "{gap:?}");
        std::fs::write(segment_path(&data, 0), vec![0u8; MIN_SEGMENT_BYTES as usize]).unwrap();

        let storage = Storage::open(&data, 1, options()).unwrap();
        storage.db.put_cf(storage.cf(CF_RAFT), KEY_WAL_SEQ, b"abc").unwrap();
        drop(storage);
        let malformed = Storage::open(&data, 1, options()).unwrap_err();
        assert!(matches!(malformed, StorageError::Corrupt { what: "log write-ahead sequence", .. }), "{malformed:?}");
    }
}
