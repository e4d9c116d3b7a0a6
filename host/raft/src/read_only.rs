//! The ReadIndex queue (thesis §6.4, `etcd-io/raft:read_only.go`), batched by
//! heartbeat rounds.
//!
//! Every heartbeat round carries a token, unique and increasing for the life
//! of the process (and a leader never reuses a term, so `(term, token)` is
//! unique). A read recorded while round `t - 1` was the newest sent waits for
//! a round `>= t`, i.e. one *started after* the read arrived; a round is
//! confirmed when a quorum acknowledged it or a later round. A late
//! acknowledgement of an older round can therefore never release a newer read
//! (the etcd-io/etcd#20418 class of bug), and all reads queued before one
//! round are released by it together.

use std::collections::VecDeque;

use crate::types::{Index, NodeId, ReadId};

/// A read waiting for a quorum round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingRead {
    pub(crate) id: ReadId,
    /// The commit index when the read was recorded: its read index.
    pub(crate) index: Index,
    /// The follower that forwarded it; `None` for a local read.
    pub(crate) from: Option<NodeId>,
    /// The first round that may confirm it.
    pub(crate) token: u64,
}

/// Rounds kept for lease computation.
const SENT_ROUNDS_KEPT: usize = 128;

#[derive(Debug, Default)]
pub(crate) struct ReadOnly {
    /// The token of the newest round sent (0: none yet).
    last_token: u64,
    /// `(token, tick sent)` of recent rounds, oldest first.
    sent: VecDeque<(u64, u64)>,
    /// Reads waiting for a round, in token order.
    queue: VecDeque<PendingRead>,
    /// Reads that arrived before the leader committed an entry of its term.
    pub(crate) waiting_commit: Vec<(ReadId, Option<NodeId>)>,
    /// A read is waiting for a round that has not been sent yet.
    pub(crate) round_wanted: bool,
}

impl ReadOnly {
    /// Drops every queued read (on a role change); tokens keep increasing.
    pub(crate) fn reset(&mut self) {
        self.sent.clear();
        self.queue.clear();
        self.waiting_commit.clear();
        self.round_wanted = false;
    }

    pub(crate) fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Queues a read at read index `index`, to be confirmed by the next round.
    pub(crate) fn push(&mut self, id: ReadId, from: Option<NodeId>, index: Index) {
        self.queue.push_back(PendingRead {
            id,
            index,
            from,
            token: self.last_token + 1,
        });
        self.round_wanted = true;
    }

    /// Starts a round at tick `now`; returns its token.
    pub(crate) fn start_round(&mut self, now: u64) -> u64 {
        self.last_token += 1;
        self.sent.push_back((self.last_token, now));
        if self.sent.len() > SENT_ROUNDS_KEPT {
            self.sent.pop_front();
        }
        self.round_wanted = false;
        self.last_token
    }

    /// When round `token` was sent, if still known.
    pub(crate) fn sent_tick(&self, token: u64) -> Option<u64> {
        self.sent
            .iter()
            .rev()
            .find(|&&(t, _)| t == token)
            .map(|&(_, at)| at)
    }

    /// Releases the reads confirmed by round `confirmed`.
    pub(crate) fn release(&mut self, confirmed: u64) -> Vec<PendingRead> {
        let mut out = Vec::new();
        while self.queue.front().is_some_and(|r| r.token <= confirmed) {
            out.extend(self.queue.pop_front());
        }
        out
    }
}
