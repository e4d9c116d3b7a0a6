//! Divergence detection: replicas hash their plugin keyspace at the same
//! applied index and compare with the leader's hash.
//!
//! The leader proposes a `CheckHash` entry (every `hash_check_entries`
//! applied entries, or on request). Each replica hashes its keyspace right
//! after applying it. The leader then proposes its own hash in an
//! `ExpectHash` entry, and every replica that applies it compares. A
//! mismatch is reported loudly: in the node's status, in the log at error
//! level, and in the `wasmraft_keyspace_divergences_total` metric. Each
//! node's hash is in its status, so an operator (or `wasmraft check`) can
//! see which replica is the odd one out, the leader included.
//!
//! A pass reads the whole keyspace: seconds for millions of keys. A node's
//! apply thread only takes a RocksDB snapshot at the check's index, and a
//! thread of the pass's own hashes that snapshot while applies go on (the
//! deterministic simulation hashes in place instead, see
//! [`HashChecks::in_background`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmraft_storage::StateReader;

use crate::node::NodeStatus;
use crate::system::SystemCommand;

/// Hashes kept for comparison with the leader's.
const KEEP: usize = 64;

/// Passes at most running at once: another check waits for the oldest
/// (checks come every `hash_check_entries` at most, or from an operator).
const MAX_PASSES: usize = 4;

/// A finished hash pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hashed {
    pub index: u64,
    pub hash: [u8; 32],
    pub records: u64,
    pub took: Duration,
    /// Whether this node led when the check entry applied: only then does
    /// it tell the others its hash (a pass may outlast a leader change, and
    /// the next leader must not tell them a second time).
    pub leading: bool,
}

/// A check's pass, until its hash is recorded.
enum Pass {
    /// On its own thread; `stop` ends it early.
    Running { index: u64, stop: Arc<AtomicBool>, thread: JoinHandle<Result<Hashed, String>> },
    Done(Result<Hashed, String>),
}

impl Pass {
    fn index(&self) -> Option<u64> {
        match self {
            Pass::Running { index, .. } => Some(*index),
            Pass::Done(done) => done.as_ref().ok().map(|h| h.index),
        }
    }
}
/// A node's latest keyspace hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashCheck {
    /// The index of the check entry the hash was taken at.
    pub index: u64,
    /// SHA-256 of the plugin keyspace there, in hex.
    pub sha256: String,
    /// Whether it matched the leader's, once the leader's hash applied.
    pub matches_leader: Option<bool>,
}

pub(crate) struct HashChecks {
    every: u64,
    /// A periodic check hashes the whole keyspace. Spread over the entries
    /// until the next one, it hashes at most about this many records per
    /// applied entry: a state of R records is checked every R / this
    /// entries when that is more than `every`, so the check's cost per
    /// entry stays the same however large the state grows (0: every
    /// `every` entries whatever the size).
    records_per_entry: u64,
    next_due: u64,
    own: BTreeMap<u64, [u8; 32]>,
    /// The leader's hashes that arrived before this node's own at their
    /// index was done.
    early: BTreeMap<u64, [u8; 32]>,
    /// Passes not recorded yet, oldest first.
    passes: VecDeque<Pass>,
    /// Whether passes run on a thread of their own.
    background: bool,
}

impl HashChecks {
    /// Checks every `every` applied entries (0: only on request), less
    /// often for a state of more than `every * records_per_entry` records.
    pub fn new(every: u64, records_per_entry: u64, applied: u64) -> Self {
        Self {
            every,
            records_per_entry,
            next_due: applied.saturating_add(every),
            own: BTreeMap::new(),
            early: BTreeMap::new(),
            passes: VecDeque::new(),
            background: false,
        }
    }

    /// Hash on a thread of each pass's own, not on the caller's.
    pub fn in_background(&mut self) {
        self.background = true;
    }

    /// Whether a pass runs on its own thread now.
    pub fn running(&self) -> bool {
        self.passes.iter().any(|p| matches!(p, Pass::Running { .. }))
    }

    /// Whether another pass must wait for the oldest to finish.
    pub fn full(&self) -> bool {
        self.passes.len() >= MAX_PASSES
    }

    /// Hashes `reader`, a consistent view taken right after the check entry
    /// at `index` applied (`leading`: on the leader): in place, or on a
    /// thread of its own. Its result comes from [`finished`](Self::finished).
    pub fn start(&mut self, index: u64, reader: StateReader, leading: bool) {
        let pass = move |go_on: &dyn Fn() -> bool| {
            let started = Instant::now();
            match reader.keyspace_hash(go_on) {
                Ok(Some((hash, records))) => Ok(Hashed { index, hash, records, took: started.elapsed(), leading }),
                Ok(None) => Err("the keyspace hash stopped before its end".to_string()),
                Err(e) => Err(format!("hashing the keyspace: {e}")),
            }
        };
        if !self.background {
            self.passes.push_back(Pass::Done(pass(&|| true)));
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let go_on = stop.clone();
        let pass = Arc::new(Mutex::new(Some(pass)));
        let on_thread = pass.clone();
        let spawned = std::thread::Builder::new().name("keyspace-hash".into()).spawn(move || {
            let pass = on_thread.lock().take().expect("taken once");
            pass(&|| !go_on.load(Ordering::Relaxed))
        });
        self.passes.push_back(match spawned {
            Ok(thread) => Pass::Running { index, stop, thread },
            Err(e) => {
                // Slower, but the check is not lost.
                tracing::warn!(error = %e, "cannot start a thread to hash the keyspace; hashing in place");
                let pass = pass.lock().take().expect("the thread never ran");
                Pass::Done(pass(&|| true))
            }
        });
    }

    /// The hash of the oldest pass once it is done (`wait`: waits for it);
    /// an error if it failed, which the node cannot go on from.
    pub fn finished(&mut self, wait: bool) -> Result<Option<Hashed>, String> {
        match self.passes.pop_front() {
            None => Ok(None),
            Some(Pass::Done(result)) => result.map(Some),
            Some(Pass::Running { index, stop, thread }) => {
                if !wait && !thread.is_finished() {
                    self.passes.push_front(Pass::Running { index, stop, thread });
                    return Ok(None);
                }
                match thread.join() {
                    Ok(result) => result.map(Some),
                    Err(_) => Err("the thread hashing the keyspace panicked".into()),
                }
            }
        }
    }

    /// Whether a periodic check is due (proposed by the leader only). Not
    /// while a pass is unrecorded: its size sets when the next is due.
    pub fn due(&mut self, applied: u64, is_leader: bool) -> bool {
        if self.every == 0 || applied < self.next_due || !self.passes.is_empty() {
            return false;
        }
        self.next_due = applied + self.every;
        is_leader
    }

    /// Records this node's hash of a finished pass; on the leader, returns
    /// the entry that tells the others.
    pub fn record(&mut self, done: Hashed, status: &Mutex<NodeStatus>) -> Option<SystemCommand> {
        let Hashed { index, hash, records, took, leading } = done;
        self.schedule(index, records);
        self.own.insert(index, hash);
        while self.own.len() > KEEP {
            self.own.pop_first();
        }
        {
            let mut status = status.lock();
            status.hash_checks += 1;
            status.hash_check = Some(HashCheck { index, sha256: hex(&hash), matches_leader: None });
        }
        tracing::info!(index, sha256 = %hex(&hash), records, took_ms = took.as_millis() as u64, "keyspace hash");
        // Older early hashes are for indexes this node never hashed (a
        // snapshot took it past them).
        self.early = self.early.split_off(&index);
        if let Some(leader) = self.early.remove(&index) {
            self.compare(index, &leader, status);
        }
        // Still leading: a proposal of a node that no longer leads fails.
        (leading && status.lock().role == wasmraft_raft::Role::Leader)
            .then_some(SystemCommand::ExpectHash { index, hash })
    }

    /// After a check at `index` over `records` records: the next one is
    /// due `hash_check_entries` on, or later for a large state.
    fn schedule(&mut self, index: u64, records: u64) {
        if self.every > 0 {
            let spread = records.checked_div(self.records_per_entry).unwrap_or(0);
            self.next_due = self.next_due.max(index.saturating_add(self.every.max(spread)));
        }
    }

    /// Compares the leader's hash at `index` with this node's.
    pub fn compare(&mut self, index: u64, leader: &[u8; 32], status: &Mutex<NodeStatus>) {
        let Some(own) = self.own.get(&index) else {
            if self.passes.iter().any(|p| p.index() == Some(index)) {
                // Compared when this node's own pass is done.
                self.early.insert(index, *leader);
                while self.early.len() > KEEP {
                    self.early.pop_first();
                }
                return;
            }
            // Taken before a snapshot this node installed, or too long ago.
            tracing::debug!(index, "no own keyspace hash to compare with the leader's");
            return;
        };
        let matches = own == leader;
        let mut status = status.lock();
        if let Some(check) = status.hash_check.as_mut().filter(|c| c.index == index) {
            check.matches_leader = Some(matches);
        }
        if !matches {
            let message = format!(
                "keyspace diverged from the leader's at index {index}: this node's hash is {}, the leader's {}",
                hex(own),
                hex(leader)
            );
            tracing::error!(index, own = %hex(own), leader = %hex(leader), "{message}");
            status.divergences += 1;
            status.divergence = Some(message);
        }
    }
}

impl Drop for HashChecks {
    /// Passes still running stop within a few thousand records.
    fn drop(&mut self) {
        let running: Vec<_> = self
            .passes
            .drain(..)
            .filter_map(|p| match p {
                Pass::Running { stop, thread, .. } => Some((stop, thread)),
                Pass::Done(_) => None,
            })
            .collect();
        for (stop, _) in &running {
            stop.store(true, Ordering::Relaxed);
        }
        for (_, thread) in running {
            let _ = thread.join();
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(role: wasmraft_raft::Role) -> Mutex<NodeStatus> {
        Mutex::new(NodeStatus {
            id: 1,
            role,
            term: 1,
            leader: None,
            commit: 0,
            applied: 0,
            last_index: 0,
            plugin: wasmraft_runtime::PluginInfo {
                name: String::new(),
                version: String::new(),
                sdk_version: String::new(),
                sha256: String::new(),
                migrates: false,
                wasi: false,
                contract: String::new(),
            },
            fatal: None,
            deployed_at: 0,
            hash_check: None,
            hash_checks: 0,
            divergence: None,
            divergences: 0,
            membership: wasmraft_raft::Membership::new([wasmraft_raft::NodeId(1)]),
            removed: false,
            pending_requests: 0,
            pending_read_rounds: 0,
            busy_refusals: 0,
            peer_inbox_dropped: 0,
        })
    }

    /// A store of 1,000 keys applied at index 1.
    fn store(dir: &std::path::Path) -> wasmraft_storage::Storage {
        let storage =
            wasmraft_storage::Storage::open(dir, 1, wasmraft_storage::StorageOptions::default()).unwrap();
        let keys: Vec<Vec<u8>> = (0..1_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let writes = keys.iter().map(|k| wasmraft_storage::StateWrite { key: k, value: Some(b"v") });
        storage.apply(wasmraft_raft::LogId::new(1, 1), writes, []).unwrap();
        storage
    }

    /// Off the apply thread, a pass hashes the index it was started at
    /// while later batches apply; the leader's hash, if it comes first,
    /// is compared once the pass is done, and a mismatch is reported.
    #[test]
    fn a_background_pass_hashes_its_index_and_a_leader_hash_that_came_early_is_compared() {
        for (leader_agrees, role) in [(false, wasmraft_raft::Role::Follower), (true, wasmraft_raft::Role::Leader)] {
            let dir = tempfile::tempdir().unwrap();
            let storage = store(dir.path());
            let (hash, records) = storage.state_hash_counted().unwrap();
            let status = status(role);
            let mut checks = HashChecks::new(100, 4, 0);
            checks.in_background();
            checks.start(1, storage.consistent_reader(), role == wasmraft_raft::Role::Leader);
            let later = [wasmraft_storage::StateWrite { key: b"later", value: Some(b"v") }];
            storage.apply(wasmraft_raft::LogId::new(1, 2), later, []).unwrap();
            // Running until its result is taken, whether or not its thread ended.
            assert!(checks.running());
            assert!(!checks.due(1_000, true), "no check while a pass runs");
            let leader = if leader_agrees { hash } else { [7; 32] };
            checks.compare(1, &leader, &status);
            assert_eq!(status.lock().divergences, 0, "nothing to compare with yet");

            let done = checks.finished(true).unwrap().unwrap();
            assert_eq!((done.index, done.hash, done.records), (1, hash, records));
            assert_eq!(done.leading, role == wasmraft_raft::Role::Leader);
            assert!(!checks.running());
            let expect = checks.record(done, &status);
            let st = status.lock();
            assert_eq!(st.hash_check.as_ref().unwrap().matches_leader, Some(leader_agrees));
            assert_eq!(st.divergences, u64::from(!leader_agrees));
            assert_eq!(expect.is_some(), role == wasmraft_raft::Role::Leader, "only a leader tells the others");
        }
    }

    /// Checks that come while earlier passes run each hash their own
    /// index, and are recorded in order; only a node that led when the
    /// check applied, and still leads, tells the others.
    #[test]
    fn overlapping_passes_are_recorded_in_order_and_told_by_the_leader_of_their_check() {
        use wasmraft_raft::Role;
        let dir = tempfile::tempdir().unwrap();
        let storage = store(dir.path());
        let status = status(Role::Follower);
        let mut checks = HashChecks::new(100, 4, 0);
        checks.in_background();
        let mut expected = Vec::new();
        for index in 1..=MAX_PASSES as u64 {
            expected.push(storage.state_hash().unwrap());
            checks.start(index, storage.consistent_reader(), index % 2 == 0);
            let key = format!("after {index}").into_bytes();
            let write = [wasmraft_storage::StateWrite { key: &key, value: Some(b"v") }];
            storage.apply(wasmraft_raft::LogId::new(1, index + 1), write, []).unwrap();
        }
        assert!(checks.full());
        // Leading by the time the passes end: only those checked as leader tell.
        status.lock().role = Role::Leader;
        for (at, hash) in (1..).zip(&expected) {
            let done = checks.finished(true).unwrap().unwrap();
            assert_eq!((done.index, done.hash, done.leading), (at, *hash, at % 2 == 0));
            assert_eq!(checks.record(done, &status).is_some(), done.leading, "check at {at}");
        }
        assert!(!checks.full());
        assert_eq!(checks.finished(true).unwrap(), None);
        // Led at the check, no longer at its end: tells nobody.
        checks.start(9, storage.consistent_reader(), true);
        status.lock().role = Role::Follower;
        let done = checks.finished(true).unwrap().unwrap();
        assert!(checks.record(done, &status).is_none());
    }

    /// In place (the simulation), the pass is done when `start` returns.
    #[test]
    fn a_pass_in_place_is_done_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let storage = store(dir.path());
        let mut checks = HashChecks::new(100, 4, 0);
        checks.start(1, storage.consistent_reader(), false);
        assert!(!checks.running());
        let done = checks.finished(false).unwrap().unwrap();
        assert_eq!(done.hash, storage.state_hash().unwrap());
        assert_eq!(checks.finished(false).unwrap(), None, "taken once");
    }

    #[test]
    fn a_large_state_is_checked_less_often_a_small_one_every_interval() {
        let mut checks = HashChecks::new(100, 4, 0);
        assert!(!checks.due(99, true));
        assert!(checks.due(100, true));
        // A small state: the next check 100 entries on.
        checks.schedule(101, 40);
        assert!(!checks.due(200, true));
        assert!(checks.due(201, true));
        // 4,000 records: hashed every 1,000 entries, about 4 per entry.
        checks.schedule(202, 4_000);
        assert!(!checks.due(1_201, true));
        assert!(checks.due(1_202, true));
        // Followers never propose.
        let mut follower = HashChecks::new(100, 4, 0);
        assert!(!follower.due(100, false));
        // Off stays off.
        let mut off = HashChecks::new(0, 4, 0);
        off.schedule(5, 1_000_000);
        assert!(!off.due(u64::MAX, true));
        // Without spreading: every 100 entries whatever the size.
        let mut fixed = HashChecks::new(100, 0, 0);
        fixed.schedule(100, 1_000_000);
        assert!(fixed.due(200, true));
    }
}
