//! The Raft log as the core sees it: the driver's persisted entries (through
//! [`LogReader`]) followed by an unstable suffix the driver has not persisted
//! yet, plus the commit index and the cursors of what was handed out.
//!
//! ```text
//!  first_index        offset (first unstable)         last_index
//!      |   stable (LogReader)   |   unstable (memory)     |
//!  ----+------------------------+-------------------------+
//!          applied <= handed <= committed <= last_index
//! ```
//!
//! A pending snapshot (received from the leader, not yet installed by the
//! driver) replaces the whole stable part: `offset = snapshot.index + 1`.

use std::collections::{BTreeMap, VecDeque};

use crate::error::StorageError;
use crate::storage::LogReader;
use crate::types::{Entry, EntryPayload, Index, LogId, Membership, SnapshotMeta, Term};

/// Unwraps a storage result the core cannot do without; storage failures
/// other than `Compacted`/`Unavailable` are fatal (see the crate docs).
pub(crate) fn fatal<T>(r: Result<T, StorageError>, what: &str) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("raft log: {what}: {e}"),
    }
}

/// Bytes of persisted entries kept in memory ([`RaftLog::recent`]).
const RECENT_BYTES: u64 = 4 << 20;

/// The log: stable view + unstable suffix.
pub(crate) struct RaftLog<L: LogReader> {
    pub(crate) reader: L,
    /// A snapshot received and accepted but not yet installed by the driver.
    pub(crate) unstable_snapshot: Option<SnapshotMeta>,
    /// Entries not yet persisted; `unstable[0]` has index `offset`.
    pub(crate) unstable: Vec<Entry>,
    pub(crate) offset: Index,
    /// The latest persisted entries, the last of them at `offset - 1`, up
    /// to [`RECENT_BYTES`]: the committed entries a Ready hands out and the
    /// appends of a follower just behind come from here, not from a read
    /// (and decode) of the driver's storage.
    pub(crate) recent: VecDeque<Entry>,
    pub(crate) recent_bytes: u64,
    /// The highest index known committed.
    pub(crate) committed: Index,
    /// The highest index handed out in `Ready::committed_entries`.
    pub(crate) handed: Index,
    /// The highest index the driver reported applied.
    pub(crate) applied: Index,
    /// Batches handed out and not yet applied: each one's last index and
    /// bytes; and their total, at most `max_applying_bytes` (plus one batch).
    pub(crate) applying: VecDeque<(Index, u64)>,
    pub(crate) applying_bytes: u64,
    pub(crate) max_applying_bytes: u64,
    /// Membership entries in the log after the committed membership.
    pub(crate) conf_entries: BTreeMap<Index, Membership>,
}

impl<L: LogReader> RaftLog<L> {
    /// Builds the view over `reader`; `applied` is the state machine's index.
    /// Scans the stable log once for membership entries.
    ///
    /// What the state machine applied was committed: the stored `commit`
    /// may lag it (a driver need not save a hard state whose only change is
    /// the commit index), and the applied entries are not handed out again.
    pub(crate) fn new(reader: L, commit: Index, applied: Index) -> RaftLog<L> {
        let first = fatal(reader.first_index(), "first_index");
        let last = fatal(reader.last_index(), "last_index");
        let committed = commit.max(first.prev()).max(applied.min(last));
        assert!(
            committed <= last,
            "raft log: commit {committed} beyond last index {last}"
        );
        let start = applied.max(first.prev()).min(committed);
        let mut log = RaftLog {
            reader,
            unstable_snapshot: None,
            unstable: Vec::new(),
            offset: last.next(),
            recent: VecDeque::new(),
            recent_bytes: 0,
            committed,
            handed: start,
            applied: start,
            applying: VecDeque::new(),
            applying_bytes: 0,
            max_applying_bytes: u64::MAX,
            conf_entries: BTreeMap::new(),
        };
        let mut lo = first;
        while lo <= last {
            let batch = fatal(log.reader.entries(lo, last.next(), 4 << 20), "entries");
            assert!(
                !batch.is_empty(),
                "raft log: reader returned no entries at {lo}"
            );
            lo = Index(lo.0 + batch.len() as u64);
            for e in batch {
                if let EntryPayload::Membership(m) = e.payload {
                    log.conf_entries.insert(e.log_id.index, m);
                }
            }
        }
        log
    }

    pub(crate) fn first_index(&self) -> Index {
        match &self.unstable_snapshot {
            Some(s) => s.last.index.next(),
            None => fatal(self.reader.first_index(), "first_index"),
        }
    }

    pub(crate) fn last_index(&self) -> Index {
        if !self.unstable.is_empty() {
            return Index(self.offset.0 + self.unstable.len() as u64 - 1);
        }
        match &self.unstable_snapshot {
            Some(s) => s.last.index,
            None => fatal(self.reader.last_index(), "last_index"),
        }
    }

    /// The last index the driver has persisted (valid prefix of the stable log).
    pub(crate) fn persisted_last(&self) -> Index {
        if self.unstable_snapshot.is_some() {
            return Index(0);
        }
        self.offset.prev()
    }

    pub(crate) fn term(&self, index: Index) -> Result<Term, StorageError> {
        if index > self.last_index() {
            return Err(StorageError::Unavailable);
        }
        if index >= self.offset && !self.unstable.is_empty() {
            return Ok(self.unstable[(index.0 - self.offset.0) as usize]
                .log_id
                .term);
        }
        if let Some(s) = &self.unstable_snapshot {
            return if index == s.last.index {
                Ok(s.last.term)
            } else {
                Err(StorageError::Compacted)
            };
        }
        if index == Index(0) {
            return Ok(Term(0));
        }
        self.reader.term(index)
    }

    /// The term at `index` or 0 if it is not in the log.
    pub(crate) fn term_or_zero(&self, index: Index) -> Term {
        match self.term(index) {
            Ok(t) => t,
            Err(StorageError::Compacted | StorageError::Unavailable) => Term(0),
            Err(e) => panic!("raft log: term({index}): {e}"),
        }
    }

    pub(crate) fn last_log_id(&self) -> LogId {
        let index = self.last_index();
        LogId {
            term: fatal(self.term(index), "term of last index"),
            index,
        }
    }

    pub(crate) fn match_term(&self, id: LogId) -> bool {
        matches!(self.term(id.index), Ok(t) if t == id.term)
    }

    /// §5.4.1: `last` is at least as up-to-date as this log (last term, then
    /// last index, compared lexicographically).
    pub(crate) fn is_up_to_date(&self, last: LogId) -> bool {
        let mine = self.last_log_id();
        (last.term, last.index) >= (mine.term, mine.index)
    }

    /// Entries `[lo, hi)` within `max_bytes` (at least one).
    pub(crate) fn entries(
        &self,
        lo: Index,
        hi: Index,
        max_bytes: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        assert!(
            hi <= self.last_index().next(),
            "raft log: entries [{lo}, {hi}) beyond last index"
        );
        if lo >= hi {
            return Ok(Vec::new());
        }
        if lo < self.first_index() {
            return Err(StorageError::Compacted);
        }
        let mut out = Vec::new();
        let mut size = 0u64;
        if lo < self.offset {
            let stable_hi = hi.min(self.offset);
            let recent_start = Index(self.offset.0 - self.recent.len() as u64);
            if lo < recent_start {
                let read_hi = stable_hi.min(recent_start);
                out = self.reader.entries(lo, read_hi, max_bytes)?;
                if (out.len() as u64) < read_hi.0 - lo.0 {
                    return Ok(out);
                }
                size = out.iter().map(Entry::size).sum();
            }
            for i in lo.max(recent_start).0..stable_hi.0 {
                let e = &self.recent[(i - recent_start.0) as usize];
                if !out.is_empty() && size + e.size() > max_bytes {
                    return Ok(out);
                }
                size += e.size();
                out.push(e.clone());
            }
        }
        let from = lo.max(self.offset);
        for i in from.0..hi.0 {
            let e = &self.unstable[(i - self.offset.0) as usize];
            if !out.is_empty() && size + e.size() > max_bytes {
                break;
            }
            size += e.size();
            out.push(e.clone());
        }
        Ok(out)
    }

    /// The first entry of `entries` whose id does not match this log.
    fn find_conflict(&self, entries: &[Entry]) -> Option<Index> {
        entries
            .iter()
            .find(|e| !self.match_term(e.log_id))
            .map(|e| e.log_id.index)
    }

    /// The largest index `<= index` whose term is `<= term`, with its term
    /// (the rejection hint of fast backtracking).
    pub(crate) fn find_conflict_by_term(&self, index: Index, term: Term) -> LogId {
        let mut i = index.min(self.last_index());
        loop {
            match self.term(i) {
                Ok(t) if t > term && i > Index(0) => i = i.prev(),
                Ok(t) => return LogId { term: t, index: i },
                Err(_) => {
                    return LogId {
                        term: Term(0),
                        index: i,
                    };
                }
            }
        }
    }

    /// A follower's append (§5.3): if `prev` matches, appends `entries` from the
    /// first conflicting one (never truncating a matching suffix) and returns
    /// the last index known to match; commits up to `min(commit, that index)`.
    pub(crate) fn maybe_append(
        &mut self,
        prev: LogId,
        commit: Index,
        entries: &[Entry],
    ) -> Option<Index> {
        if !self.match_term(prev) {
            return None;
        }
        let last_new = Index(prev.index.0 + entries.len() as u64);
        if let Some(conflict) = self.find_conflict(entries) {
            assert!(
                conflict > self.committed,
                "raft log: conflicting entry {conflict} at or below commit {}",
                self.committed
            );
            let start = (conflict.0 - prev.index.0 - 1) as usize;
            self.truncate_and_append(&entries[start..]);
        }
        self.commit_to(commit.min(last_new));
        Some(last_new)
    }

    /// A leader's append at the end of its log.
    pub(crate) fn append(&mut self, entries: Vec<Entry>) {
        let Some(first) = entries.first() else { return };
        assert_eq!(
            first.log_id.index,
            self.last_index().next(),
            "raft log: leader append not contiguous"
        );
        for e in &entries {
            if let EntryPayload::Membership(m) = &e.payload {
                self.conf_entries.insert(e.log_id.index, m.clone());
            }
        }
        if self.unstable.is_empty() && self.offset != first.log_id.index {
            self.offset = first.log_id.index;
            self.forget_recent_from(Index(0));
        }
        self.unstable.extend(entries);
    }

    /// Drops the oldest kept entries past [`RECENT_BYTES`].
    fn trim_recent(&mut self) {
        while self.recent_bytes > RECENT_BYTES {
            let Some(e) = self.recent.pop_front() else { break };
            self.recent_bytes -= e.size();
        }
    }

    /// Drops the kept entries from `index` on (a suffix being replaced).
    fn forget_recent_from(&mut self, index: Index) {
        while self.recent.back().is_some_and(|e| e.log_id.index >= index) {
            let e = self.recent.pop_back().expect("checked");
            self.recent_bytes -= e.size();
        }
    }

    /// Replaces the log from `entries[0]` on.
    fn truncate_and_append(&mut self, entries: &[Entry]) {
        let after = entries[0].log_id.index;
        assert!(
            after > self.committed,
            "raft log: truncating committed entry {after}"
        );
        self.conf_entries.retain(|&i, _| i < after);
        let unstable_end = Index(self.offset.0 + self.unstable.len() as u64);
        if after == unstable_end && !self.unstable.is_empty() {
            // Plain append to the unstable suffix.
        } else if after <= self.offset || self.unstable.is_empty() {
            // Replaces (part of) the stable log: the driver truncates it when it
            // persists these entries.
            self.unstable.clear();
            // (`after` past `offset` cannot happen: with nothing unstable,
            // `offset` is one past the last entry. Were it to, the kept
            // entries would no longer end at `offset - 1`.)
            self.forget_recent_from(if after > self.offset { Index(0) } else { after });
            self.offset = after;
        } else {
            self.unstable.truncate((after.0 - self.offset.0) as usize);
        }
        for e in entries {
            if let EntryPayload::Membership(m) = &e.payload {
                self.conf_entries.insert(e.log_id.index, m.clone());
            }
        }
        self.unstable.extend_from_slice(entries);
    }

    pub(crate) fn commit_to(&mut self, index: Index) {
        if index > self.committed {
            assert!(
                index <= self.last_index(),
                "raft log: commit {index} beyond last index {}",
                self.last_index()
            );
            self.committed = index;
        }
    }

    /// The driver persisted the entries `written` (one Ready's, in order).
    /// An append that conflicted with them while they were being written
    /// replaced a suffix: the prefix the log still holds is stable all the
    /// same (the last entry still held, by the log matching property, vouches
    /// for every one before it), and only the rest is written again.
    pub(crate) fn stable_to(&mut self, written: &[LogId]) {
        if self.unstable.is_empty() {
            return;
        }
        let held = written
            .iter()
            .rev()
            .find(|id| id.index >= self.offset && self.term(id.index) == Ok(id.term));
        let Some(id) = held else {
            return; // all replaced since that Ready was built
        };
        let n = (id.index.0 - self.offset.0 + 1) as usize;
        // Kept in memory: they end at the new `offset - 1`.
        for e in self.unstable.drain(..n) {
            self.recent_bytes += e.size();
            self.recent.push_back(e);
        }
        self.offset = id.index.next();
        self.trim_recent();
    }

    /// The driver installed the snapshot through `index`.
    pub(crate) fn stable_snap_to(&mut self, index: Index) {
        if self
            .unstable_snapshot
            .as_ref()
            .is_some_and(|s| s.last.index == index)
        {
            self.unstable_snapshot = None;
        }
    }

    /// Replaces the whole log with a snapshot (§7).
    pub(crate) fn restore(&mut self, meta: SnapshotMeta) {
        let index = meta.last.index;
        assert!(
            index > self.committed,
            "raft log: restoring snapshot {index} at or below commit"
        );
        self.unstable.clear();
        self.offset = index.next();
        self.forget_recent_from(Index(0));
        self.committed = index;
        self.handed = index;
        // What was handed out before is covered by the snapshot.
        self.applying.clear();
        self.applying_bytes = 0;
        self.conf_entries.clear();
        self.unstable_snapshot = Some(meta);
    }

    /// Whether committed entries wait to be handed out and the applying
    /// budget has room for them.
    pub(crate) fn has_committed_to_hand(&self) -> bool {
        self.committed > self.handed
            && (self.applying.is_empty() || self.applying_bytes < self.max_applying_bytes)
    }

    /// Whether committed entries wait for batches handed out to be applied:
    /// the applying budget is spent.
    pub(crate) fn waits_for_applying_budget(&self) -> bool {
        self.committed > self.handed && !self.has_committed_to_hand()
    }

    /// Committed entries not handed out yet, within the applying budget;
    /// marks them handed out.
    pub(crate) fn take_committed(&mut self) -> Vec<Entry> {
        if !self.has_committed_to_hand() {
            return Vec::new();
        }
        let lo = self.handed.next();
        let budget = self.max_applying_bytes.saturating_sub(self.applying_bytes);
        let ents = fatal(
            self.entries(lo, self.committed.next(), budget),
            "committed entries",
        );
        assert!(
            !ents.is_empty(),
            "raft log: committed entries from {lo} to {} not readable",
            self.committed
        );
        let last = ents[ents.len() - 1].log_id.index;
        assert_eq!(
            last.0 - self.handed.0,
            ents.len() as u64,
            "raft log: committed entries [{lo}, {last}] not contiguous"
        );
        let bytes: u64 = ents.iter().map(Entry::size).sum();
        self.handed = last;
        self.applying.push_back((last, bytes));
        self.applying_bytes += bytes;
        ents
    }

    /// The driver applied every entry through `index`: what it held of
    /// the applying budget is free again.
    pub(crate) fn applied_to(&mut self, index: Index) {
        self.applied = self.applied.max(index);
        while let Some(&(last, bytes)) = self.applying.front() {
            if last > index {
                break;
            }
            self.applying.pop_front();
            self.applying_bytes -= bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::cell::Cell;

    use super::*;
    use crate::mem_storage::MemStorage;
    use crate::types::HardState;

    /// The simulator's storage, counting the entries read from it.
    struct Counting {
        mem: MemStorage,
        reads: Cell<u64>,
    }

    impl LogReader for Counting {
        fn initial_state(&self) -> Result<(HardState, Membership), StorageError> {
            self.mem.initial_state()
        }
        fn entries(&self, lo: Index, hi: Index, max_bytes: u64) -> Result<Vec<Entry>, StorageError> {
            let out = self.mem.entries(lo, hi, max_bytes)?;
            self.reads.set(self.reads.get() + out.len() as u64);
            Ok(out)
        }
        fn term(&self, index: Index) -> Result<Term, StorageError> {
            self.mem.term(index)
        }
        fn first_index(&self) -> Result<Index, StorageError> {
            self.mem.first_index()
        }
        fn last_index(&self) -> Result<Index, StorageError> {
            self.mem.last_index()
        }
        fn snapshot_meta(&self) -> Result<Option<SnapshotMeta>, StorageError> {
            self.mem.snapshot_meta()
        }
    }

    fn entry(term: u64, index: u64, bytes: usize) -> Entry {
        Entry { log_id: LogId::new(term, index), payload: EntryPayload::Normal(vec![index as u8; bytes]) }
    }

    fn log() -> RaftLog<Counting> {
        RaftLog::new(Counting { mem: MemStorage::new(&[1]), reads: Cell::new(0) }, Index(0), Index(0))
    }

    #[test]
    fn the_applied_index_counts_as_committed_at_start() {
        let mut mem = MemStorage::new(&[1]);
        mem.append(&[entry(1, 1, 8), entry(1, 2, 8), entry(1, 3, 8)]);
        // The stored commit index lags the state machine by one entry.
        let log = RaftLog::new(Counting { mem, reads: Cell::new(0) }, Index(1), Index(2));
        assert_eq!((log.committed, log.handed, log.applied), (Index(2), Index(2), Index(2)));
        assert!(!log.has_committed_to_hand(), "entry 2 was applied and must not be handed out again");
    }

    #[test]
    fn a_state_machine_ahead_of_the_log_commits_no_more_than_the_log_holds() {
        let mut mem = MemStorage::new(&[1]);
        mem.append(&[entry(1, 1, 8), entry(1, 2, 8)]);
        let log = RaftLog::new(Counting { mem, reads: Cell::new(0) }, Index(1), Index(5));
        assert_eq!((log.committed, log.handed), (Index(2), Index(2)));
    }

    /// What a driver does with a Ready's entries: store them, report them.
    fn persist(log: &mut RaftLog<Counting>, entries: &[Entry]) {
        log.reader.mem.append(entries);
        log.stable_to(&entries.iter().map(|e| e.log_id).collect::<Vec<_>>());
    }

    #[test]
    fn committed_entries_just_persisted_come_from_memory() {
        let mut log = log();
        let written = vec![entry(1, 1, 10), entry(1, 2, 10), entry(1, 3, 10)];
        log.append(written.clone());
        persist(&mut log, &written);
        log.commit_to(Index(3));
        assert_eq!(log.take_committed(), written);
        assert_eq!(log.entries(Index(2), Index(4), u64::MAX).unwrap(), written[1..]);
        assert_eq!(log.reader.reads.get(), 0, "nothing read back from storage");
    }

    #[test]
    fn a_replaced_suffix_is_never_served_from_memory() {
        let mut log = log();
        let first = vec![entry(1, 1, 10), entry(1, 2, 10), entry(1, 3, 10)];
        log.append(first.clone());
        persist(&mut log, &first);
        log.commit_to(Index(1));
        // A new leader's entry 2 replaces 2 and 3, persisted ones.
        let replacing = vec![entry(2, 2, 20)];
        log.truncate_and_append(&replacing);
        assert_eq!(log.entries(Index(1), Index(3), u64::MAX).unwrap(), [first[0].clone(), replacing[0].clone()]);
        persist(&mut log, &replacing);
        assert_eq!(log.last_index(), Index(2));
        assert_eq!(log.entries(Index(1), Index(3), u64::MAX).unwrap(), [first[0].clone(), replacing[0].clone()]);
        assert_eq!(log.reader.reads.get(), 0);
    }

    #[test]
    fn memory_keeps_the_latest_entries_up_to_its_bytes_and_storage_has_the_rest() {
        let mut log = log();
        let bytes = 64 << 10;
        let count = 2 * RECENT_BYTES / bytes as u64;
        let written: Vec<Entry> = (1..=count).map(|i| entry(1, i, bytes)).collect();
        for chunk in written.chunks(7) {
            log.append(chunk.to_vec());
            persist(&mut log, chunk);
        }
        assert!(log.recent_bytes <= RECENT_BYTES && log.recent.len() as u64 >= count / 2 - 1);
        log.commit_to(Index(count));
        let mut handed = Vec::new();
        loop {
            let batch = log.take_committed();
            if batch.is_empty() {
                break;
            }
            let last = batch.last().unwrap().log_id.index;
            handed.extend(batch);
            log.applied_to(last);
        }
        assert_eq!(handed, written);
        let reads = log.reader.reads.get();
        assert!(reads > 0 && reads < count, "the oldest from storage, the latest from memory ({reads} of {count} read)");
    }
}
