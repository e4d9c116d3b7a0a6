//! The Raft log: appends with fsync, truncation of a conflicting suffix, and
//! the core's read-only [`LogReader`] view.

use rocksdb::WriteBatch;
use wasmraft_raft::{Entry, HardState, Index, LogReader, Membership, SnapshotMeta, Term};

use crate::codec;
use crate::error::StorageError;
use crate::log_time_note::NoteChange;
use crate::rocks::{CF_LOG, CF_RAFT, KEY_HARD_STATE, Storage};

pub(crate) fn encode_index(i: Index) -> [u8; 8] {
    i.0.to_be_bytes()
}

pub(crate) fn decode_index(key: &[u8]) -> Result<u64, StorageError> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| StorageError::Corrupt {
        what: "log key",
        key: None,
        detail: format!("{} bytes instead of 8", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

fn to_raft(e: StorageError) -> wasmraft_raft::StorageError {
    wasmraft_raft::StorageError::Other(e.to_string())
}

impl Storage {
    /// Appends `entries` (replacing any existing suffix from the first of them
    /// on) and saves `hard_state`, in one write batch. With `sync` and the
    /// `sync_log` option (the default), fsyncs before returning (the log's
    /// own write-ahead segments, `wal.rs`).
    ///
    /// `entries` must be contiguous and start at most one past the last index.
    pub fn append(&self, entries: &[Entry], hard_state: Option<&HardState>, sync: bool) -> Result<(), StorageError> {
        self.append_noted(entries, hard_state, NoteChange::Keep, sync)
    }

    /// [`Storage::append`], with a change to the note of log time in the
    /// same write batch (see [`Storage::note_log_time`]): durable with the
    /// entries whose stamps it counts from, or with the truncation that
    /// removes the stamps the note it replaces counted, never before or
    /// after them.
    pub fn append_noted(
        &self,
        entries: &[Entry],
        hard_state: Option<&HardState>,
        note: NoteChange,
        sync: bool,
    ) -> Result<(), StorageError> {
        let stall = self.append_stall_ms.load(std::sync::atomic::Ordering::Acquire);
        if sync && stall > 0 {
            std::thread::sleep(std::time::Duration::from_millis(stall));
        }
        let mut batch = WriteBatch::default();
        let log = self.cf(CF_LOG);
        // The bounds are read and checked here, and moved once the write is
        // durable; they are not held during it. Readers of the log (the Raft
        // loop, while this runs on the log writer's thread) must not wait an
        // fsync: they read no entry this write touches (those are still in
        // the core's unstable log), and see the new ones once it is done.
        let bounds = *self.bounds.lock();
        if let Some(first) = entries.first() {
            let start = first.log_id.index;
            assert!(
                start.0 <= bounds.last.0 + 1 && start >= bounds.first,
                "append at {start} leaves a gap or overwrites the snapshot (log is [{}, {}])",
                bounds.first,
                bounds.last
            );
            if start <= bounds.last {
                // Raft only truncates from the first conflicting entry (§5.3);
                // the core hands us exactly that suffix.
                batch.delete_range_cf(log, encode_index(start), encode_index(bounds.last.next()));
            }
            for (offset, e) in entries.iter().enumerate() {
                assert_eq!(e.log_id.index.0, start.0 + offset as u64, "appended entries must be contiguous");
                batch.put_cf(log, encode_index(e.log_id.index), codec::encode_entry(e));
            }
        }
        if let Some(hs) = hard_state {
            batch.put_cf(self.cf(CF_RAFT), KEY_HARD_STATE, codec::encode_hard_state(hs));
        }
        match note {
            NoteChange::Keep => {}
            NoteChange::Write(note) => self.put_log_time_note(&mut batch, Some(&note)),
            NoteChange::Remove => self.put_log_time_note(&mut batch, None),
        }
        // The entries are in RocksDB before the sync ends, but nothing
        // reads them until the bounds move below, and the Raft loop counts
        // them only once this returns.
        self.write_logged(batch, sync)?;
        if let Some(first) = entries.first() {
            // Terms before bounds: a reader within the bounds finds its term.
            self.terms.lock().appended(first.log_id.index, entries.iter().map(|e| e.log_id.term));
            self.bounds.lock().last = entries[entries.len() - 1].log_id.index;
        }
        if let Some(hs) = hard_state {
            *self.hard_state.lock() = *hs;
        }
        Ok(())
    }

    /// Saves `hard_state` alone, unsynced, from the Raft loop's thread: a
    /// commit index the loop kept back. [`StorageError::Busy`] instead of
    /// waiting for another write to the log, and the caller saves it later
    /// or with its next entries.
    pub fn try_save_hard_state(&self, hard_state: &HardState) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_RAFT), KEY_HARD_STATE, codec::encode_hard_state(hard_state));
        self.try_write_logged(batch)?;
        *self.hard_state.lock() = *hard_state;
        Ok(())
    }

    /// Entries in `[lo, hi)` straight from disk (for replay after a restart).
    pub fn read_entries(&self, lo: Index, hi: Index) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::new();
        if lo >= hi {
            return Ok(out);
        }
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_LOG));
        iter.seek(encode_index(lo));
        while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
            let index = decode_index(k)?;
            if index >= hi.0 {
                break;
            }
            if index != lo.0 + out.len() as u64 {
                return Err(StorageError::Corrupt {
                    what: "log",
                    key: Some(format!("index {index}")),
                    detail: format!("gap: expected index {}", lo.0 + out.len() as u64),
                });
            }
            out.push(codec::decode_entry(index, v)?);
            iter.next();
        }
        iter.status()?;
        Ok(out)
    }

    /// The term of the entry at `index`, read from disk.
    pub(crate) fn read_term(&self, index: Index) -> Result<Term, StorageError> {
        let bytes = self.db.get_cf(self.cf(CF_LOG), encode_index(index))?.ok_or_else(|| StorageError::Corrupt {
            what: "log",
            key: Some(format!("index {}", index.0)),
            detail: "missing within the log's bounds".to_string(),
        })?;
        Ok(codec::decode_entry(index.0, &bytes)?.log_id.term)
    }

    /// The first and last index in the log.
    pub fn log_bounds(&self) -> (Index, Index) {
        let b = self.bounds.lock();
        (b.first, b.last)
    }

    fn entries_limited(&self, lo: Index, hi: Index, max_bytes: u64) -> Result<Vec<Entry>, StorageError> {
        let mut out: Vec<Entry> = Vec::new();
        let mut size = 0u64;
        let mut iter = self.db.raw_iterator_cf(self.cf(CF_LOG));
        iter.seek(encode_index(lo));
        while let (Some(k), Some(v)) = (iter.key(), iter.value()) {
            let index = decode_index(k)?;
            if index >= hi.0 {
                break;
            }
            let e = codec::decode_entry(index, v)?;
            size += e.size();
            if !out.is_empty() && size > max_bytes {
                break;
            }
            out.push(e);
            iter.next();
        }
        iter.status()?;
        Ok(out)
    }
}

impl LogReader for Storage {
    fn initial_state(&self) -> Result<(HardState, Membership), wasmraft_raft::StorageError> {
        let membership = match self.snapshot_meta_stored().map_err(to_raft)? {
            Some(meta) => meta.membership,
            None => self.bootstrap_membership().map_err(to_raft)?,
        };
        Ok((self.hard_state(), membership))
    }

    fn entries(&self, lo: Index, hi: Index, max_bytes: u64) -> Result<Vec<Entry>, wasmraft_raft::StorageError> {
        let b = *self.bounds.lock();
        if lo < b.first {
            return Err(wasmraft_raft::StorageError::Compacted);
        }
        if hi.0 > b.last.0 + 1 {
            return Err(wasmraft_raft::StorageError::Unavailable);
        }
        if lo >= hi {
            return Ok(Vec::new());
        }
        let entries = self.entries_limited(lo, hi, max_bytes).map_err(to_raft)?;
        // A compaction between the bounds check and the read leaves the
        // read starting past `lo`, or with nothing.
        if entries.first().map(|e| e.log_id.index) != Some(lo) {
            return Err(if lo < self.bounds.lock().first {
                wasmraft_raft::StorageError::Compacted
            } else {
                wasmraft_raft::StorageError::Unavailable
            });
        }
        Ok(entries)
    }

    fn term(&self, index: Index) -> Result<Term, wasmraft_raft::StorageError> {
        // The bounds stay locked for the lookup: a compaction (which holds
        // them while it drops entries and their terms) cannot run between
        // the bounds check and the term index.
        let bounds = self.bounds.lock();
        let b = *bounds;
        if index == b.before_first.index {
            return Ok(b.before_first.term);
        }
        if index < b.first {
            return Err(wasmraft_raft::StorageError::Compacted);
        }
        if index > b.last {
            return Err(wasmraft_raft::StorageError::Unavailable);
        }
        // Bounds, then terms: the order of `compact_to` and the install;
        // `append` never holds both.
        self.terms.lock().term(index).ok_or(wasmraft_raft::StorageError::Unavailable)
    }

    fn first_index(&self) -> Result<Index, wasmraft_raft::StorageError> {
        Ok(self.bounds.lock().first)
    }

    fn last_index(&self) -> Result<Index, wasmraft_raft::StorageError> {
        Ok(self.bounds.lock().last)
    }

    fn snapshot_meta(&self) -> Result<Option<SnapshotMeta>, wasmraft_raft::StorageError> {
        self.snapshot_meta_stored().map_err(to_raft)
    }
}

