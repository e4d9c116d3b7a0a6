//! Safety invariants of the Raft paper (Figure 3), checked as events happen:
//! election safety (§5.2), log matching (§5.3), leader completeness (§5.4),
//! state-machine safety (§5.4.3), and monotonic term / vote / commit / applied.

use std::collections::HashMap;

use wasmraft_raft::{HardState, Index, Term};

use super::node::{SimDisk, SmState};

#[derive(Default)]
pub struct Checker {
    /// term -> the one leader of that term.
    leaders: HashMap<u64, u64>,
    /// (index, term) -> chain hash of the log prefix ending there.
    chains: HashMap<(u64, u64), u64>,
    /// index -> chain hash of the committed prefix ending there.
    committed: HashMap<u64, u64>,
    max_committed: u64,
    /// applied index -> state-machine digest.
    digests: HashMap<u64, u64>,
}

impl Checker {
    /// §5.2 Election Safety: at most one leader per term.
    pub fn leader(&mut self, term: Term, id: u64) -> Result<(), String> {
        match self.leaders.insert(term.0, id) {
            Some(other) if other != id => Err(format!(
                "election safety: nodes {other} and {id} both lead term {term}"
            )),
            _ => Ok(()),
        }
    }

    /// §5.3 Log Matching: entries with the same index and term have
    /// identical prefixes (checked by chain hash on every persisted entry).
    pub fn persisted(&mut self, id: u64, entries: &[(Index, Term, u64)]) -> Result<(), String> {
        for &(index, term, chain) in entries {
            if let Some(&prev) = self.chains.get(&(index.0, term.0)) {
                if prev != chain {
                    return Err(format!(
                        "log matching: node {id} entry {term}-{index} has a different prefix"
                    ));
                }
            } else {
                self.chains.insert((index.0, term.0), chain);
            }
        }
        Ok(())
    }

    /// Records entries `(from, to]` of `disk` as committed; a committed index
    /// holding two different prefixes violates state-machine safety.
    pub fn committed(
        &mut self,
        id: u64,
        disk: &SimDisk,
        from: Index,
        to: Index,
    ) -> Result<(), String> {
        let lo = from.0.max(disk.store.snapshot_index().0);
        for i in lo + 1..=to.0 {
            let Some(chain) = disk.chain_at(Index(i)) else {
                return Err(format!("node {id} committed {i} which is not in its log"));
            };
            match self.committed.get(&i) {
                Some(&c) if c != chain => {
                    return Err(format!(
                        "safety: node {id} committed a different entry at {i}"
                    ));
                }
                Some(_) => {}
                None => {
                    self.committed.insert(i, chain);
                }
            }
        }
        self.max_committed = self.max_committed.max(to.0);
        Ok(())
    }

    /// §5.4 Leader Completeness: a new leader holds every committed entry.
    pub fn leader_complete(&self, id: u64, disk: &SimDisk) -> Result<(), String> {
        let c = self.max_committed;
        if c == 0 {
            return Ok(());
        }
        if disk.store.last().0 < c {
            return Err(format!(
                "leader completeness: leader {id} lacks committed index {c}"
            ));
        }
        let snap = disk.store.snapshot_index().0;
        let (at, chain) = if c >= snap {
            (c, disk.chain_at(Index(c)))
        } else {
            (snap, Some(disk.snap_chain))
        };
        match (self.committed.get(&at), chain) {
            (Some(want), Some(have)) if *want != have => Err(format!(
                "leader completeness: leader {id} has a different entry at committed index {at}"
            )),
            _ => Ok(()),
        }
    }

    /// §5.4.3 State Machine Safety: every node that applied index `i` is in
    /// the same state.
    pub fn applied(&mut self, id: u64, sm: &SmState) -> Result<(), String> {
        match self.digests.get(&sm.applied.0) {
            Some(&d) if d != sm.digest => Err(format!(
                "state machine safety: node {id} diverged at applied index {}",
                sm.applied
            )),
            Some(_) => Ok(()),
            None => {
                self.digests.insert(sm.applied.0, sm.digest);
                Ok(())
            }
        }
    }

    /// Term, vote and commit never go back (also across restarts: they are durable).
    pub fn hard_state(id: u64, old: HardState, new: HardState) -> Result<(), String> {
        if new.term < old.term || new.commit < old.commit {
            return Err(format!(
                "monotonicity: node {id} hard state went back {old:?} -> {new:?}"
            ));
        }
        if new.term == old.term && old.vote.is_some() && new.vote != old.vote {
            return Err(format!(
                "node {id} changed its vote in term {}: {old:?} -> {new:?}",
                old.term
            ));
        }
        Ok(())
    }
}

/// The linearizability oracle for reads of the register state machine.
///
/// Reads return a prefix of the committed log, summarised by `last_write`.
/// Linearizable iff every read sees every write acknowledged before it
/// started, and at least what every read completed before it started saw
/// (writes are ordered by log index, and a read of prefix `k` linearizes
/// right after write `k`).
#[derive(Default)]
pub struct Oracle {
    seq: u64,
    max_acked: Index,
    max_read: Index,
    pub acked: u64,
    pub served_read_index: u64,
    pub served_lease: u64,
}

impl Oracle {
    /// A logical timestamp.
    pub fn now(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// What a read starting now must see.
    pub fn floor(&self) -> Index {
        self.max_acked.max(self.max_read)
    }

    pub fn ack(&mut self, index: Index) {
        self.max_acked = self.max_acked.max(index);
        self.acked += 1;
    }

    pub fn served(&mut self, what: &str, floor: Index, saw: Index) -> Result<(), String> {
        if saw < floor {
            return Err(format!(
                "linearizability: {what} read saw write {saw} but a write or read at {floor} completed before it started"
            ));
        }
        self.max_read = self.max_read.max(saw);
        Ok(())
    }
}
