//! Sending a snapshot: its parts read one at a time out of its checkpoint.

use rocksdb::{DB, Direction, IteratorMode, Options};
use wasmraft_raft::Index;

use crate::codec;
use crate::error::StorageError;
use crate::rocks::{CF_META, CF_STATE, COLUMN_FAMILIES, KEY_APPLIED, Storage};
use crate::snapshot::{SYSTEM_PREFIXES, SnapshotPart};
use crate::state::SESSION_PREFIX;

/// A snapshot part holds about this many bytes of keys and values (at least
/// one pair, so a part may be as large as the largest pair).
pub const SNAPSHOT_PART_BYTES: u64 = 1 << 20;

/// Which records a [`SnapshotReader`] reads now, in the order they are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    State,
    Sessions,
    System(usize),
    Done,
}

/// Reads the snapshot at one index out of its checkpoint, a part of about
/// [`SNAPSHOT_PART_BYTES`] at a time, so that sending a snapshot of any
/// size holds one part in memory. The checkpoint stays readable while the
/// reader lives, even if a newer snapshot removes its directory: the reader
/// reads links of its own to the checkpoint's files
/// ([`Storage::snapshot_reader`]).
pub struct SnapshotReader {
    db: DB,
    index: Index,
    term: u64,
    section: Section,
    /// The last key read in the current section (`None`: none yet).
    after: Option<Vec<u8>>,
    /// Pairs read so far, all sections together.
    pairs: u64,
    /// The reader's own directory, if it has one, removed after `db`
    /// closes (fields drop in order).
    _own_dir: Option<RemovedOnDrop>,
}

/// A reader's own directory (a sending reader's links, a backup's
/// checkpoint), removed when this is dropped.
struct RemovedOnDrop(std::path::PathBuf);

/// The directories of this process's live readers: a store opened again in
/// the same process (a restarted node) leaves them alone.
static LIVE: parking_lot::Mutex<std::collections::BTreeSet<std::path::PathBuf>> =
    parking_lot::const_mutex(std::collections::BTreeSet::new());

impl RemovedOnDrop {
    fn new(dir: std::path::PathBuf) -> Self {
        LIVE.lock().insert(dir.clone());
        RemovedOnDrop(dir)
    }
}

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        LIVE.lock().remove(&self.0);
    }
}

/// The prefix of a sending reader's directory beside the data directory.
const SENDING_PREFIX: &str = "sending-";
/// The prefix of a backup's checkpoint beside the data directory.
pub(crate) const BACKUP_PREFIX: &str = "backup-";

impl std::fmt::Debug for SnapshotReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotReader").field("index", &self.index).field("section", &self.section).finish()
    }
}

impl Storage {
    /// Opens the snapshot at `index` (the latest one) for sending. It reads
    /// hard links of its own to the checkpoint's files, in a directory
    /// beside the data directory that goes with the reader: RocksDB opens
    /// a blob file only when it first reads a value in it, so a reader of
    /// the checkpoint directory itself failed once a newer snapshot had
    /// removed it.
    pub fn snapshot_reader(&self, index: Index) -> Result<SnapshotReader, StorageError> {
        let path = self.checkpoint_path(index);
        if !path.exists() {
            return Err(StorageError::Incompatible(format!("no snapshot at index {index}")));
        }
        let links = self.reader_dir(SENDING_PREFIX)?;
        let io = |e: std::io::Error| StorageError::Rocks(format!("linking snapshot {index}'s files for sending: {e}"));
        std::fs::create_dir_all(&links.0).map_err(io)?;
        for entry in std::fs::read_dir(&path).map_err(io)? {
            let entry = entry.map_err(io)?;
            std::fs::hard_link(entry.path(), links.0.join(entry.file_name())).map_err(io)?;
        }
        let mut reader = SnapshotReader::open_checkpoint(&links.0, Some(index))?;
        reader._own_dir = Some(links);
        Ok(reader)
    }

    /// Removes the directories of sending readers and backups that a
    /// process which died left behind (at open: no reader of this store
    /// lives, except in this process if it opened the store before).
    pub(crate) fn remove_stale_reader_dirs(&self) {
        // Only names this store makes (`<data>.sending-<pid>-<n>`, and
        // RocksDB's `.tmp` of one being made): an operator's own
        // `<data>.backup-before-upgrade` stays.
        let ours = |name: &str, prefix: &str| {
            let Some(rest) = name.strip_prefix(prefix) else { return false };
            let rest = rest.strip_suffix(".tmp").unwrap_or(rest);
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            rest.split_once('-').is_some_and(|(pid, n)| digits(pid) && digits(n))
        };
        let data = self.sibling_dir("");
        let parent = match data.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => std::path::Path::new("."),
        };
        let Some(data_name) = data.file_name().and_then(|n| n.to_str()) else { return };
        let Ok(entries) = std::fs::read_dir(parent) else { return };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
            let stale = [SENDING_PREFIX, BACKUP_PREFIX].iter().any(|what| ours(&name, &format!("{data_name}{what}")));
            if stale && !LIVE.lock().contains(&entry.path()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }

    /// A reader of a new checkpoint of the store as it is now, in
    /// `<data>.<prefix><pid>-<n>`, which goes with the reader.
    pub(crate) fn checkpoint_reader(&self, prefix: &str) -> Result<SnapshotReader, StorageError> {
        let dir = self.reader_dir(prefix)?;
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(&dir.0)?;
        let mut reader = SnapshotReader::open_checkpoint(&dir.0, None)?;
        reader._own_dir = Some(dir);
        Ok(reader)
    }

    /// A new reader's own directory, `<data>.<prefix><pid>-<n>` (not made
    /// yet), which goes when the guard does; one numbering for every
    /// prefix, so that no two live readers share a name.
    fn reader_dir(&self, prefix: &str) -> Result<RemovedOnDrop, StorageError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = RemovedOnDrop::new(self.sibling_dir(&format!("{prefix}{}-{n}", std::process::id())));
        // Left by a process that had this one's id, if any.
        if dir.0.exists() {
            std::fs::remove_dir_all(&dir.0).map_err(crate::snapshot::io)?;
        }
        Ok(dir)
    }
}

impl SnapshotReader {
    /// Opens the checkpoint at `path`, checking it holds the state applied
    /// at `index` if one is given.
    pub(crate) fn open_checkpoint(path: &std::path::Path, index: Option<Index>) -> Result<SnapshotReader, StorageError> {
        let mut opts = Options::default();
        opts.set_max_open_files(-1); // every table file opened now, see above
        let db = DB::open_cf_for_read_only(&opts, path, COLUMN_FAMILIES, false)?;
        let applied = match db.get_cf(db.cf_handle(CF_META).expect("cf"), KEY_APPLIED)? {
            Some(bytes) => codec::decode_log_id("applied", &bytes)?,
            None => Default::default(),
        };
        if let Some(index) = index.filter(|i| *i != applied.index) {
            return Err(StorageError::Corrupt {
                what: "snapshot checkpoint",
                key: Some(format!("index {index}")),
                detail: format!("the checkpoint holds the state applied at {}", applied.index),
            });
        }
        Ok(SnapshotReader { db, index: applied.index, term: applied.term.0, section: Section::State, after: None, pairs: 0, _own_dir: None })
    }
}

impl SnapshotReader {
    /// The snapshot's index.
    pub fn index(&self) -> Index {
        self.index
    }

    /// The term of the entry applied last in it.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Pairs read so far.
    pub fn pairs(&self) -> u64 {
        self.pairs
    }

    /// The next part, or `None` once everything was read.
    pub fn next_part(&mut self) -> Result<Option<SnapshotPart>, StorageError> {
        let mut part = SnapshotPart::default();
        let mut bytes = 0;
        while bytes < SNAPSHOT_PART_BYTES {
            let (cf, prefix, strip, out) = match self.section {
                Section::State => (CF_STATE, &b""[..], false, &mut part.state),
                Section::Sessions => (CF_META, SESSION_PREFIX, true, &mut part.sessions),
                Section::System(i) => (CF_META, SYSTEM_PREFIXES[i], false, &mut part.system),
                Section::Done => break,
            };
            let start = self.after.as_deref().unwrap_or(prefix);
            let iter = self.db.iterator_cf(self.db.cf_handle(cf).expect("cf"), IteratorMode::From(start, Direction::Forward));
            let mut full = false;
            for item in iter {
                let (k, v) = item?;
                if !k.starts_with(prefix) {
                    break;
                }
                if self.after.as_deref() == Some(&*k) {
                    continue;
                }
                bytes += (k.len() + v.len()) as u64;
                let key = if strip { k[prefix.len()..].to_vec() } else { k.to_vec() };
                out.push((key, v.to_vec()));
                self.pairs += 1;
                self.after = Some(k.to_vec());
                if bytes >= SNAPSHOT_PART_BYTES {
                    full = true;
                    break;
                }
            }
            if !full {
                self.after = None;
                self.section = match self.section {
                    Section::State => Section::Sessions,
                    Section::Sessions => Section::System(0),
                    Section::System(i) if i + 1 < SYSTEM_PREFIXES.len() => Section::System(i + 1),
                    _ => Section::Done,
                };
            }
        }
        Ok(if part.is_empty() && self.section == Section::Done { None } else { Some(part) })
    }

    /// Reads every remaining part into one (tests and small snapshots).
    pub fn read_all(&mut self) -> Result<SnapshotPart, StorageError> {
        let mut all = SnapshotPart::default();
        while let Some(p) = self.next_part()? {
            all.state.extend(p.state);
            all.sessions.extend(p.sessions);
            all.system.extend(p.system);
        }
        Ok(all)
    }
}
