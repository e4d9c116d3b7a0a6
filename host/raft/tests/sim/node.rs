//! One simulated node: the durable disk (log + hard state + snapshot, with a
//! chain hash per entry for the log-matching check), the state machine, and
//! the client operations waiting on it.

use std::collections::BTreeMap;

use wasmraft_raft::{
    Entry, EntryPayload, HardState, Index, LogReader, Membership, RawNode, Ready, SnapshotMeta,
    StorageError, Term,
};

use super::rng::mix;
use super::storage::MemStorage;

/// The state machine: an append-only register of write ids, summarised by a
/// digest. A read returns `last_write`, the index of the newest write it sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmState {
    pub applied: Index,
    pub last_write: Index,
    pub writes: u64,
    pub digest: u64,
    /// The newest membership applied (for snapshot metadata).
    pub membership: Membership,
}

impl SmState {
    pub fn apply(&mut self, e: &Entry) {
        assert_eq!(
            e.log_id.index,
            self.applied.next(),
            "state machine applies out of order"
        );
        self.applied = e.log_id.index;
        match &e.payload {
            EntryPayload::Normal(data) => {
                self.last_write = e.log_id.index;
                self.writes += 1;
                self.digest = mix(self.digest, payload_hash(&e.payload) ^ e.log_id.index.0);
                let _ = data;
            }
            EntryPayload::Membership(m) => self.membership = m.clone(),
            EntryPayload::Blank => {}
        }
    }
}

pub fn payload_hash(p: &EntryPayload) -> u64 {
    match p {
        EntryPayload::Blank => 1,
        EntryPayload::Normal(data) => data.iter().fold(2, |h, &b| mix(h, b as u64)),
        EntryPayload::Membership(m) => {
            let mut h = 3;
            for (tag, set) in [(1, &m.voters), (2, &m.voters_outgoing), (3, &m.learners)] {
                for id in set {
                    h = mix(h, tag * 1000 + id.0);
                }
            }
            h
        }
    }
}

pub fn entry_hash(prev_chain: u64, e: &Entry) -> u64 {
    mix(mix(prev_chain, e.log_id.term.0), payload_hash(&e.payload))
}

/// A received snapshot, durable but not yet made current.
#[derive(Clone, Debug)]
pub struct SnapshotData {
    pub meta: SnapshotMeta,
    pub state: SmState,
    pub chain: u64,
}

/// What survives a crash.
#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    pub store: MemStorage,
    /// Chain hash of each entry of `store.entries`.
    pub chain: Vec<u64>,
    /// Chain hash at the snapshot index.
    pub snap_chain: u64,
    /// The state machine at the snapshot.
    pub snap_state: SmState,
    pub staged: Option<SnapshotData>,
    /// What the state machine had applied when the node crashed, with
    /// `Params::durable_state`.
    pub applied_state: Option<SmState>,
}

impl SimDisk {
    pub fn new(voters: &[u64]) -> SimDisk {
        let store = MemStorage::new(voters);
        let snap_state = SmState {
            membership: store.base.clone(),
            ..SmState::default()
        };
        SimDisk {
            store,
            snap_state,
            ..SimDisk::default()
        }
    }

    pub fn chain_at(&self, i: Index) -> Option<u64> {
        if i == self.store.snapshot_index() {
            return Some(self.snap_chain);
        }
        if i < self.store.first() || i > self.store.last() {
            return None;
        }
        Some(self.chain[(i.0 - self.store.first().0) as usize])
    }

    /// Does the writes of a Ready; returns the new entries' `(index, term, chain)`.
    pub fn persist(&mut self, rd: &Ready) -> Vec<(Index, Term, u64)> {
        if let Some(meta) = &rd.snapshot {
            let staged = self.staged.take().expect("snapshot installed without data");
            assert_eq!(
                &staged.meta, meta,
                "installed snapshot differs from the received one"
            );
            self.store.install_snapshot(meta);
            self.chain.clear();
            self.snap_chain = staged.chain;
            self.snap_state = staged.state;
        }
        let mut out = Vec::new();
        if let Some(e0) = rd.entries.first() {
            let at = e0.log_id.index;
            self.chain.truncate((at.0 - self.store.first().0) as usize);
            let mut prev = self
                .chain_at(at.prev())
                .expect("chain before appended entries");
            for e in &rd.entries {
                prev = entry_hash(prev, e);
                self.chain.push(prev);
                out.push((e.log_id.index, e.log_id.term, prev));
            }
        }
        self.store.persist(rd);
        out
    }

    /// Compacts the log at the state machine's applied index.
    pub fn compact(&mut self, sm: &SmState) -> bool {
        let index = sm.applied;
        if index <= self.store.snapshot_index() || index > self.store.last() {
            return false;
        }
        let term = self.store.term(index).expect("term of applied entry");
        let chain = self.chain_at(index).expect("chain of applied entry");
        let drop = (index.0 - self.store.snapshot_index().0) as usize;
        self.store.compact(SnapshotMeta {
            last: wasmraft_raft::LogId { term, index },
            membership: sm.membership.clone(),
        });
        self.chain.drain(..drop);
        self.snap_chain = chain;
        self.snap_state = sm.clone();
        true
    }

    pub fn snapshot_data(&self) -> Option<SnapshotData> {
        let meta = self.store.snapshot.clone()?;
        Some(SnapshotData {
            meta,
            state: self.snap_state.clone(),
            chain: self.snap_chain,
        })
    }
}

impl LogReader for SimDisk {
    fn initial_state(&self) -> Result<(HardState, Membership), StorageError> {
        self.store.initial_state()
    }
    fn entries(&self, lo: Index, hi: Index, max_bytes: u64) -> Result<Vec<Entry>, StorageError> {
        self.store.entries(lo, hi, max_bytes)
    }
    fn term(&self, index: Index) -> Result<Term, StorageError> {
        self.store.term(index)
    }
    fn first_index(&self) -> Result<Index, StorageError> {
        self.store.first_index()
    }
    fn last_index(&self) -> Result<Index, StorageError> {
        self.store.last_index()
    }
    fn snapshot_meta(&self) -> Result<Option<SnapshotMeta>, StorageError> {
        self.store.snapshot_meta()
    }
}

/// How a read was obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    ReadIndex,
    Lease,
}

/// A client read waiting on a node.
#[derive(Clone, Debug)]
pub struct PendingRead {
    pub kind: ReadKind,
    /// What the read must at least see (oracle floor at its start).
    pub floor: Index,
    pub start: u64,
    /// The read index once known.
    pub index: Option<Index>,
}

/// Where a crash hits while a Ready is being handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint {
    /// After sending `messages`, before the writes are durable.
    BeforePersist,
    /// After the writes, before `persisted_messages` and `advance`.
    AfterPersist,
}

pub struct SimNode {
    pub id: u64,
    pub raw: Option<RawNode<SimDisk>>,
    pub down: Option<SimDisk>,
    pub sm: SmState,
    /// Tick period in time units (skew).
    pub period: u64,
    pub next_tick: u64,
    /// Proposals of this node's clients: index -> (term, write id).
    pub writes: BTreeMap<Index, (Term, u64)>,
    pub reads: BTreeMap<u64, PendingRead>,
    pub hard: HardState,
    pub crash_point: Option<CrashPoint>,
}

impl SimNode {
    pub fn up(&self) -> bool {
        self.raw.is_some()
    }
}
