//! An in-memory `LogReader` with the writes a driver does: what a `Ready`
//! asks to persist, snapshot install and compaction. Shared by the unit tests
//! (through `#[path]`) and the simulator.

#![allow(dead_code)]

use wasmraft_raft::{
    Entry, HardState, Index, LogReader, Membership, NodeId, Ready, SnapshotMeta, StorageError, Term,
};

/// The durable state of one simulated node.
#[derive(Clone, Debug, Default)]
pub struct MemStorage {
    pub hard_state: HardState,
    /// Bootstrap membership, replaced by a snapshot's.
    pub base: Membership,
    pub snapshot: Option<SnapshotMeta>,
    /// The log after the snapshot: `entries[0]` has index `first_index()`.
    pub entries: Vec<Entry>,
    /// A hard state whose only change is the commit index (no sync) is
    /// not saved; the next synced Ready that carries one saves it.
    pub keep_back_commits: bool,
}

impl MemStorage {
    /// A fresh node of a cluster bootstrapped with `voters`.
    pub fn new(voters: &[u64]) -> MemStorage {
        MemStorage {
            base: Membership::new(voters.iter().map(|&v| NodeId(v))),
            ..MemStorage::default()
        }
    }

    pub fn snapshot_index(&self) -> Index {
        self.snapshot.as_ref().map_or(Index(0), |s| s.last.index)
    }

    pub fn first(&self) -> Index {
        self.snapshot_index().next()
    }

    pub fn last(&self) -> Index {
        Index(self.snapshot_index().0 + self.entries.len() as u64)
    }

    pub fn entry(&self, index: Index) -> Option<&Entry> {
        if index < self.first() || index > self.last() {
            return None;
        }
        self.entries.get((index.0 - self.first().0) as usize)
    }

    /// Appends, truncating the suffix the new entries replace.
    pub fn append(&mut self, ents: &[Entry]) {
        let Some(e0) = ents.first() else { return };
        let at = e0.log_id.index;
        assert!(
            at >= self.first(),
            "append at {at} below first index {}",
            self.first()
        );
        assert!(
            at <= self.last().next(),
            "append at {at} leaves a gap after {}",
            self.last()
        );
        self.entries.truncate((at.0 - self.first().0) as usize);
        self.entries.extend_from_slice(ents);
    }

    /// Makes a received snapshot current: the whole log is replaced.
    pub fn install_snapshot(&mut self, meta: &SnapshotMeta) {
        self.entries.clear();
        self.base = meta.membership.clone();
        self.hard_state.commit = self.hard_state.commit.max(meta.last.index);
        self.snapshot = Some(meta.clone());
    }

    /// Compacts the log through `meta.last` (a snapshot the driver took).
    pub fn compact(&mut self, meta: SnapshotMeta) {
        let index = meta.last.index;
        assert!(
            index >= self.snapshot_index() && index <= self.last(),
            "compact at {index} out of range"
        );
        let drop = (index.0 - self.snapshot_index().0) as usize;
        self.entries.drain(..drop);
        self.base = meta.membership.clone();
        self.snapshot = Some(meta);
    }

    /// Does the writes of `rd` (steps 2 and 3 of the Ready contract).
    pub fn persist(&mut self, rd: &Ready) {
        if let Some(meta) = &rd.snapshot {
            self.install_snapshot(meta);
        }
        self.append(&rd.entries);
        if let Some(hs) = rd.hard_state
            && (rd.must_sync || !self.keep_back_commits)
        {
            self.hard_state = hs;
        }
    }
}

impl LogReader for MemStorage {
    fn initial_state(&self) -> Result<(HardState, Membership), StorageError> {
        Ok((self.hard_state, self.base.clone()))
    }

    fn entries(&self, lo: Index, hi: Index, max_bytes: u64) -> Result<Vec<Entry>, StorageError> {
        if lo < self.first() {
            return Err(StorageError::Compacted);
        }
        if hi > self.last().next() {
            return Err(StorageError::Unavailable);
        }
        let mut out = Vec::new();
        let mut size = 0;
        for i in lo.0..hi.0 {
            let e = self.entry(Index(i)).expect("in range");
            if !out.is_empty() && size + e.size() > max_bytes {
                break;
            }
            size += e.size();
            out.push(e.clone());
        }
        Ok(out)
    }

    fn term(&self, index: Index) -> Result<Term, StorageError> {
        let snap = self.snapshot_index();
        if index < snap {
            return Err(StorageError::Compacted);
        }
        if index == snap {
            return Ok(self.snapshot.as_ref().map_or(Term(0), |s| s.last.term));
        }
        self.entry(index)
            .map(|e| e.log_id.term)
            .ok_or(StorageError::Unavailable)
    }

    fn first_index(&self) -> Result<Index, StorageError> {
        Ok(self.first())
    }

    fn last_index(&self) -> Result<Index, StorageError> {
        Ok(self.last())
    }

    fn snapshot_meta(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        Ok(self.snapshot.clone())
    }
}
