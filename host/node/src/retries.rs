//! A leader appends a client's proposal once while it waits in the log.
//!
//! A client whose request outlived its timeout retries it with the same id
//! and sequence, which the apply step answers with the first outcome. Under
//! overload, each retry appended again is a whole copy of the command in a
//! log that is already behind: more requests time out, more retries follow,
//! and the cluster can spend all its throughput on copies that apply as
//! no-ops. So a leader remembers where each client's proposals sit in its
//! log until they commit, and a retry of one still uncommitted (its own
//! client's or a follower's) waits for that entry instead. Only entries of
//! the leader's current term count: a leader never truncates those, so the
//! entry a retry waits for is the one it would have been answered with.
//! A committed entry has gone to the apply thread, where a waiter that
//! comes after it would never hear of it: its retries are appended again,
//! and the apply step answers them with the first outcome.

use std::collections::{HashMap, VecDeque};

use wasmraft_raft::{Index, Term};

use crate::envelope;

/// Where one of a turn's proposals goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Appended: its position among the turn's new commands.
    New(usize),
    /// A retry of a proposal already in the log, at this index.
    InLog(Index),
}

/// A turn's commands to append, each client's once.
#[derive(Default)]
pub(crate) struct Plan {
    pub commands: Vec<Vec<u8>>,
    keys: Vec<Option<(u64, u64)>>,
    positions: HashMap<(u64, u64), usize>,
}

/// Leader: the current term's client proposals appended and not yet
/// committed, by client id and sequence.
#[derive(Default)]
pub(crate) struct Retries {
    term: Term,
    at: HashMap<(u64, u64), Index>,
    /// The same, in log order.
    order: VecDeque<(Index, (u64, u64))>,
}

impl Retries {
    /// Where `command`, proposed in `term`, goes: to the entry of its
    /// first copy if that is in the log or in `plan` already, else into
    /// `plan`.
    pub(crate) fn place(&self, plan: &mut Plan, command: Vec<u8>, term: Term) -> Slot {
        let key = envelope::client_sequence(&command);
        if let Some(key) = key {
            if let Some(&index) = self.at.get(&key).filter(|_| self.term == term) {
                return Slot::InLog(index);
            }
            if let Some(&position) = plan.positions.get(&key) {
                return Slot::New(position);
            }
            plan.positions.insert(key, plan.commands.len());
        }
        plan.commands.push(command);
        plan.keys.push(key);
        Slot::New(plan.commands.len() - 1)
    }

    /// `plan`'s commands were appended in `term` from `first` on.
    pub(crate) fn appended(&mut self, plan: &Plan, first: Index, term: Term) {
        if term != self.term {
            self.forget_all();
            self.term = term;
        }
        for (position, key) in plan.keys.iter().enumerate() {
            if let Some(key) = *key {
                let index = Index(first.0 + position as u64);
                self.at.insert(key, index);
                self.order.push_back((index, key));
            }
        }
    }

    /// Forgets the proposals committed by `commit` (handed to the apply
    /// thread).
    pub(crate) fn committed(&mut self, commit: Index) {
        while let Some(&(index, key)) = self.order.front() {
            if index > commit {
                break;
            }
            self.order.pop_front();
            if self.at.get(&key) == Some(&index) {
                self.at.remove(&key);
            }
        }
    }

    /// Forgets every proposal: this node no longer leads (called each turn
    /// then, and a map's `clear` costs its capacity).
    pub(crate) fn forget_all(&mut self) {
        if self.order.is_empty() {
            return;
        }
        self.at.clear();
        self.order.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Envelope;

    fn command(client_id: u64, sequence: u64) -> Vec<u8> {
        Envelope { timestamp_ms: 0, client_id, sequence, command: b"put".to_vec() }.encode()
    }

    #[test]
    fn a_retry_waits_for_its_first_copy_until_that_commits() {
        let mut retries = Retries::default();
        let term = Term(3);
        let mut plan = Plan::default();
        assert_eq!(retries.place(&mut plan, command(7, 1), term), Slot::New(0));
        assert_eq!(retries.place(&mut plan, command(0, 0), term), Slot::New(1), "no client: always appended");
        assert_eq!(retries.place(&mut plan, command(0, 0), term), Slot::New(2));
        assert_eq!(retries.place(&mut plan, command(7, 1), term), Slot::New(0), "a retry in the same turn");
        assert_eq!(retries.place(&mut plan, command(7, 2), term), Slot::New(3));
        assert_eq!(plan.commands.len(), 4);
        retries.appended(&plan, Index(10), term);

        let mut next = Plan::default();
        assert_eq!(retries.place(&mut next, command(7, 1), term), Slot::InLog(Index(10)));
        assert_eq!(retries.place(&mut next, command(7, 2), term), Slot::InLog(Index(13)));
        assert_eq!(retries.place(&mut next, command(7, 2), Term(4)), Slot::New(0), "another term's entry may be gone");
        retries.committed(Index(10));
        assert_eq!(retries.place(&mut next, command(7, 1), term), Slot::New(1), "committed: the apply step answers it");
        assert_eq!(retries.place(&mut next, command(7, 2), term), Slot::InLog(Index(13)));
        retries.forget_all();
        assert_eq!(retries.place(&mut Plan::default(), command(7, 2), term), Slot::New(0), "no longer leading: all forgotten");
    }

    #[test]
    fn a_new_term_forgets_the_last_one_s_entries() {
        let mut retries = Retries::default();
        let mut plan = Plan::default();
        retries.place(&mut plan, command(1, 1), Term(2));
        retries.appended(&plan, Index(5), Term(2));
        let mut plan = Plan::default();
        retries.place(&mut plan, command(2, 1), Term(4));
        retries.appended(&plan, Index(9), Term(4));
        assert_eq!(retries.place(&mut Plan::default(), command(1, 1), Term(4)), Slot::New(0));
        assert_eq!(retries.place(&mut Plan::default(), command(2, 1), Term(4)), Slot::InLog(Index(9)));
    }
}
