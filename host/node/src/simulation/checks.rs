//! What must hold in every simulated run, checked as the run goes and at
//! its end.
//!
//! - Election safety (Raft §5.2): at most one leader per term.
//! - State-machine safety (§5.4.3): every node's committed entries are the
//!   same at each index (read back from each node's own RocksDB log).
//! - Log time never goes backwards: the leader stamps of committed entries
//!   do not decrease with the index, whatever the nodes' wall clocks do.
//! - No node fails but by an injected crash point; no node's keyspace
//!   hash ever differs from its leader's (the node's own hash checks run
//!   every 25 entries).
//! - At the end, replicas agree: the same applied index, keyspace hash,
//!   client sessions and applied membership.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry as Slot;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use wasmraft_raft::{Index, Role};

use crate::node::Node;
use crate::system::SystemCommand;

/// The cause a node records when it reaches an injected crash point.
pub(super) const CRASH_POINT: &str = "crash point reached";

#[derive(Default)]
pub(super) struct Checks {
    /// The leader seen in each term.
    leaders: BTreeMap<u64, u64>,
    /// Term and payload digest of each committed index.
    committed: BTreeMap<u64, (u64, u64)>,
    /// Per node, the highest index compared so far.
    compared: BTreeMap<u64, u64>,
    /// The leader stamp of each committed entry that carries one.
    stamps: BTreeMap<u64, u64>,
    /// The committed ticks, by index.
    ticks: BTreeMap<u64, TickSeen>,
}

/// A committed tick of the plugin's timer, as the log holds it.
pub(super) struct TickSeen {
    pub term: u64,
    pub now_ms: u64,
    pub grace_until_ms: u64,
    /// The keep-alives it carries: key and the log time the leader took it.
    pub renewals: Vec<(Vec<u8>, u64)>,
}

impl Checks {
    /// Elections won so far (terms with a leader).
    pub fn elections(&self) -> usize {
        self.leaders.len()
    }

    /// The leader seen in each term.
    pub fn leaders(&self) -> Vec<(u64, u64)> {
        self.leaders.iter().map(|(t, l)| (*t, *l)).collect()
    }

    /// Committed indexes seen so far.
    pub fn committed(&self) -> usize {
        self.committed.len()
    }

    /// A lease is exclusive: while node `id`'s published lease holds at
    /// `now`, no node has led a later term (voters refuse one until the
    /// lease has ended, or it was withdrawn before a transfer).
    pub fn lease_exclusive(&self, id: u64, node: &Node, now: Instant) -> Result<(), String> {
        let Some(lease) = node.lease_held(now) else { return Ok(()) };
        match self.leaders.range(lease.term + 1..).next() {
            Some((term, leader)) => Err(format!(
                "node {id}'s lease of term {} holds while node {leader} has led term {term}",
                lease.term
            )),
            None => Ok(()),
        }
    }

    /// Checks what node `id` shows now.
    pub fn observe(&mut self, id: u64, node: &Node) -> Result<(), String> {
        let st = node.status();
        if let Some(cause) = &st.fatal {
            if !cause.contains(CRASH_POINT) {
                return Err(format!("node {id} failed: {cause}"));
            }
            return Ok(());
        }
        if let Some(d) = &st.divergence {
            return Err(format!("node {id}: keyspace hash differs from the leader's: {d}"));
        }
        if st.removed {
            return Err(format!("node {id} believes it was removed"));
        }
        if st.role == Role::Leader {
            match self.leaders.entry(st.term) {
                Slot::Vacant(v) => {
                    v.insert(id);
                }
                Slot::Occupied(o) if *o.get() != id => {
                    return Err(format!("two leaders in term {}: {} and {id}", st.term, o.get()));
                }
                Slot::Occupied(_) => {}
            }
        }
        // Committed entries still in this node's log, not compared yet: up
        // to the commit index it wrote with them. Its status may know a
        // higher one, of entries it holds only in memory so far, while its
        // log still holds the older entries they will replace (seed
        // 1300332: a leader paused with its term-1 entries in flight learned
        // of a commit at index 2 in term 3 in the turn that finished
        // writing them; its next write replaced them).
        let storage = node.storage();
        let (first, last) = storage.log_bounds();
        let from = self.compared.get(&id).copied().unwrap_or(0).max(first.0.saturating_sub(1)) + 1;
        // The stored commit index may lag (it is kept back from the Raft
        // loop's turns); what the state machine applied came from this log
        // and was committed too.
        let applied = storage.applied().map_err(|e| format!("node {id}: reading its applied index: {e}"))?.index.0;
        let to = storage.hard_state().commit.0.max(applied).min(last.0);
        if from > to {
            return Ok(());
        }
        let entries = storage
            .read_entries(Index(from), Index(to + 1))
            .map_err(|e| format!("node {id}: reading its log {from}..={to}: {e}"))?;
        for e in entries {
            let mut h = std::hash::DefaultHasher::new();
            format!("{:?}", e.payload).hash(&mut h);
            let seen = (e.log_id.term.0, h.finish());
            match self.committed.entry(e.log_id.index.0) {
                Slot::Vacant(v) => {
                    v.insert(seen);
                    if let Some(stamp) = crate::timers::entry_stamp(&e) {
                        self.stamp_in_order(e.log_id.index.0, stamp)?;
                    }
                    if let wasmraft_raft::EntryPayload::Normal(bytes) = &e.payload {
                        if let Some(Ok(SystemCommand::Tick { now_ms, grace_until_ms, renewals })) = SystemCommand::decode(bytes) {
                            let tick = TickSeen { term: e.log_id.term.0, now_ms, grace_until_ms, renewals };
                            self.ticks.insert(e.log_id.index.0, tick);
                        }
                    }
                }
                Slot::Occupied(o) if *o.get() != seen => {
                    return Err(format!(
                        "node {id} committed another entry at index {}: term {} where another node has term {}",
                        e.log_id.index.0,
                        seen.0,
                        o.get().0
                    ));
                }
                Slot::Occupied(_) => {}
            }
        }
        self.compared.insert(id, to);
        Ok(())
    }
}

impl Checks {
    /// The leader stamp of committed entry `index`, if it carries one and
    /// was seen.
    pub fn stamp(&self, index: u64) -> Option<u64> {
        self.stamps.get(&index).copied()
    }

    /// The committed ticks seen, by index.
    pub fn ticks(&self) -> &BTreeMap<u64, TickSeen> {
        &self.ticks
    }

    /// Whether every committed entry in `lo..=hi` was seen.
    pub fn saw_all(&self, lo: u64, hi: u64) -> bool {
        hi < lo || self.committed.range(lo..=hi).count() as u64 == hi - lo + 1
    }

    /// Records the stamp of committed entry `index`; an error if an earlier
    /// entry has a later stamp or a later entry an earlier one.
    fn stamp_in_order(&mut self, index: u64, stamp: u64) -> Result<(), String> {
        if let Some((&i, &s)) = self.stamps.range(..index).next_back() {
            if s > stamp {
                return Err(format!("log time went backwards: entry {i} is stamped {s}, entry {index} {stamp}"));
            }
        }
        if let Some((&i, &s)) = self.stamps.range(index + 1..).next() {
            if s < stamp {
                return Err(format!("log time went backwards: entry {index} is stamped {stamp}, entry {i} {s}"));
            }
        }
        self.stamps.insert(index, stamp);
        Ok(())
    }
}

/// Replica agreement at the end of a run: every node applied the same
/// index and holds the same keyspace, sessions and membership there.
pub(super) fn replicas_agree(nodes: &[(u64, Node)]) -> Result<(), String> {
    let mut first: Option<(u64, String)> = None;
    for (id, node) in nodes {
        let s = node.storage();
        let err = |e: wasmraft_storage::StorageError| format!("node {id}: {e}");
        let applied = s.applied().map_err(err)?;
        let summary = format!(
            "applied {:?}, keyspace {}, sessions {:?}, membership {:?}",
            applied,
            hex(&s.state_hash().map_err(err)?),
            s.sessions().map_err(err)?,
            s.applied_membership().map_err(err)?
        );
        match &first {
            None => first = Some((*id, summary)),
            Some((other, expected)) if *expected != summary => {
                return Err(format!("replicas differ:\n  node {other}: {expected}\n  node {id}: {summary}"));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
