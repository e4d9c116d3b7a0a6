//! Byzantine-shaped input: messages no honest peer sends (terms out of
//! range, entries out of order, a second leader in a leader's term, a node's
//! own id as sender) stepped into live nodes between the honest traffic.
//! Every one must be refused by `step` and change nothing: no new `Ready`,
//! the same term, role, leader, commit and log.

use std::fmt::Write as _;

use wasmraft_raft::{Entry, EntryPayload, Index, LogId, MAX_TERM, Message, MessageBody, NodeId, Role, Term};

use super::World;

/// Hostile messages per step, on average.
const RATE: f64 = 0.2;

impl World {
    pub(super) fn inject_hostile(&mut self) -> Result<(), String> {
        if !self.hostile_rng.chance(RATE) {
            return Ok(());
        }
        let up: Vec<u64> = self.nodes.values().filter(|n| n.up()).map(|n| n.id).collect();
        let Some(to) = self.hostile_rng.pick(&up) else { return Ok(()) };
        let others: Vec<u64> = self.nodes.keys().copied().filter(|&id| id != to).collect();
        let from = self.hostile_rng.pick(&others).unwrap_or(to + 1);
        let raw = self.nodes.get_mut(&to).expect("node").raw.as_mut().expect("up");
        let before = raw.status();
        let pending = raw.has_ready();
        let (term, last) = (before.term.0, before.last_index.0);
        let blank = |t: u64, i: u64| Entry { log_id: LogId::new(t, i), payload: EntryPayload::Blank };
        let heartbeat = MessageBody::Heartbeat { commit: Index(0), token: 1 };
        let kind = self.hostile_rng.range(0, 6); // inclusive
        let (sender, at, body) = match kind {
            // A term that would overflow the core's arithmetic.
            0 => (from, u64::MAX - self.hostile_rng.range(0, 3), heartbeat),
            1 => (from, MAX_TERM + 1, MessageBody::RequestVote { pre_vote: false, last: LogId::new(1, 1), transfer: true }),
            // Entries with a gap after `prev`.
            2 => (from, term, MessageBody::AppendEntries {
                prev: LogId::new(term, last),
                entries: vec![blank(term, last + 2)],
                commit: Index(0),
            }),
            // Entry terms going backwards, or above the message's term.
            3 => (from, term + 1, MessageBody::AppendEntries {
                prev: LogId::new(0, 0),
                entries: vec![blank(term + 1, 1), blank(term, 2)],
                commit: Index(0),
            }),
            4 => (from, term, MessageBody::AppendEntries {
                prev: LogId::new(0, 0),
                entries: vec![blank(term + 1, 1)],
                commit: Index(0),
            }),
            // A vote request whose last log is newer than its term.
            5 => (from, term + 1, MessageBody::RequestVote { pre_vote: true, last: LogId::new(term + 2, last), transfer: false }),
            // A message from the node's own id.
            _ => (to, term, heartbeat),
        };
        // A second leader in a leader's own term, when there is one.
        let (sender, at, body) = if kind == 4 && before.role == Role::Leader {
            (from, term, MessageBody::Heartbeat { commit: Index(0), token: 7 })
        } else {
            (sender, at, body)
        };
        let m = Message { from: NodeId(sender), to: NodeId(to), term: Term(at), body };
        let shown = format!("{m:?}");
        if raw.step(m).is_ok() {
            return Err(format!("node {to} accepted a hostile message: {shown}"));
        }
        let after = raw.status();
        let same = (after.term, after.role, after.leader, after.commit, after.last_index)
            == (before.term, before.role, before.leader, before.commit, before.last_index);
        if !same || raw.has_ready() != pending {
            return Err(format!("node {to} changed on a refused hostile message: {shown}"));
        }
        self.stats.hostile_refused += 1;
        if let Some(t) = self.trace.as_mut() {
            let mut line = format!("[t={} ] ", self.time);
            let _ = write!(line, "hostile -> {to}: refused {shown}");
            t.push(line);
        }
        Ok(())
    }
}
