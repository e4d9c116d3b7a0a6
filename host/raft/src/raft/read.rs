//! Heartbeat rounds, check-quorum, batched ReadIndex and the leader lease
//! (thesis §6.2, §6.4; etcd `read_only.go`; openraft `leader-lease.md`).
//!
//! A round is a heartbeat to every member carrying a fresh token. A round is
//! confirmed once a quorum of voters (the leader included) acknowledged it or
//! a newer round. A confirmed round
//! - releases every read queued before it was sent (reads record the commit
//!   index when queued, and only after the leader committed an entry of its
//!   term);
//! - extends the lease to `sent_tick + election_tick - lease_drift_ticks`:
//!   every acknowledging voter refuses (pre-)votes for `election_tick` of its
//!   own ticks after it received the round, so no other leader can be
//!   elected before the lease ends (given clock rates within the drift).

use super::Raft;
use crate::error::ProposeError;
use crate::message::MessageBody;
use crate::progress::HeartbeatFollowUp;
use crate::quorum::{VoteResult, quorum_value, quorum_vote};
use crate::storage::LogReader;
use crate::types::{Index, Lease, NodeId, ReadId, ReadState, Role};

impl<L: LogReader> Raft<L> {
    pub(crate) fn tick_leader(&mut self) {
        self.heartbeat_elapsed += 1;
        self.election_elapsed += 1;
        if self.transferee.is_some() {
            self.transfer_elapsed += 1;
            if self.transfer_elapsed >= self.cfg.election_tick {
                self.transferee = None; // the transfer failed; the lease stays off this term
            }
        }
        if self.election_elapsed >= self.cfg.election_tick {
            self.election_elapsed = 0;
            if self.cfg.check_quorum && !self.quorum_active() {
                // Check-quorum (thesis §6.2): a leader cut off from a quorum steps down.
                self.become_follower(self.term, None);
                return;
            }
        }
        if self.heartbeat_elapsed >= self.cfg.heartbeat_tick {
            self.heartbeat_elapsed = 0;
            self.bcast_heartbeat();
        }
    }

    /// Whether a quorum answered since the last check; resets the marks.
    fn quorum_active(&mut self) -> bool {
        let me = self.id;
        let result = quorum_vote(&self.membership, |id| {
            Some(id == me || self.progress.get(&id).is_some_and(|p| p.recent_active))
        });
        for (&id, pr) in &mut self.progress {
            pr.recent_active = id == me;
        }
        result == VoteResult::Won
    }

    /// Sends a heartbeat round to every member.
    pub(crate) fn bcast_heartbeat(&mut self) {
        let token = self.read_only.start_round(self.now);
        let committed = self.log.committed;
        let peers: Vec<(NodeId, Index)> = self
            .progress
            .iter()
            .filter(|(id, _)| **id != self.id)
            .map(|(&id, p)| (id, p.matched))
            .collect();
        for (to, matched) in peers {
            self.send(
                to,
                MessageBody::Heartbeat {
                    commit: matched.min(committed),
                    token,
                },
            );
        }
        self.advance_reads();
    }

    /// Sends the round that queued reads wait for, if any (batching: all reads
    /// queued since the last round share this one).
    pub(crate) fn flush_read_round(&mut self) {
        if self.role == Role::Leader && self.read_only.round_wanted {
            self.bcast_heartbeat();
        }
    }

    /// Follower: a heartbeat of the current term's leader.
    pub(crate) fn handle_heartbeat(&mut self, from: NodeId, commit: Index, token: u64) {
        // An honest leader sends at most what this node has (it sends
        // `min(matched, committed)`); a node that lost an unsynced tail, or a
        // forged heartbeat, must not push the commit index past the log.
        let commit = commit.min(self.log.last_index());
        if commit > self.log.committed {
            self.commit_to(commit);
        }
        // Sent at once, even before this node's term is durable: the answer
        // says only that, when the heartbeat came, this node knew no term
        // above the leader's. A quorum of such answers proves no newer
        // leader could have committed (its voters made their vote durable
        // before answering), and a crash that loses the term changes
        // nothing of that. So a follower still writing a slow Ready goes
        // on answering its leader (see `RawNode::take_early`).
        self.send(from, MessageBody::HeartbeatResponse { token });
    }

    /// Leader: a follower acknowledged round `token`.
    pub(crate) fn handle_heartbeat_response(&mut self, from: NodeId, token: u64) {
        let last = self.log.last_index();
        let Some(pr) = self.progress.get_mut(&from) else {
            return;
        };
        pr.recent_active = true;
        // Tokens only grow: a late acknowledgement of an old round changes nothing.
        pr.acked_token = pr.acked_token.max(token);
        // The answer may have overtaken appends in flight (see
        // `HeartbeatFollowUp`): send only what is not in flight.
        match pr.on_heartbeat_response(last) {
            HeartbeatFollowUp::Nothing => {}
            HeartbeatFollowUp::Append => self.send_append(from),
            HeartbeatFollowUp::EmptyAppend => self.send_empty_append(from),
        }
        self.advance_reads();
    }

    /// Releases reads and extends the lease up to the newest confirmed round.
    pub(crate) fn advance_reads(&mut self) {
        let me = self.id;
        let own = self.read_only.last_token();
        let confirmed = quorum_value(&self.membership, |id| {
            if id == me {
                own
            } else {
                self.progress.get(&id).map_or(0, |p| p.acked_token)
            }
        });
        if confirmed > self.confirmed_token {
            self.confirmed_token = confirmed;
            if let Some(sent) = self.read_only.sent_tick(confirmed) {
                self.lease_until = self.lease_until.max(sent + self.cfg.lease_ticks());
            }
        }
        for r in self.read_only.release(self.confirmed_token) {
            match r.from {
                None => self.read_states.push(ReadState {
                    id: r.id,
                    index: r.index,
                }),
                Some(to) => self.send(
                    to,
                    MessageBody::ReadIndexResponse {
                        id: r.id,
                        index: r.index,
                    },
                ),
            }
        }
    }

    /// `read_index` of the driver: a leader queues it; a follower forwards it.
    pub(crate) fn read_index(&mut self, id: ReadId) -> Result<(), ProposeError> {
        match (self.role, self.lead) {
            (Role::Leader, _) => {
                self.leader_read(id, None);
                Ok(())
            }
            (_, Some(leader)) => {
                self.send(leader, MessageBody::ReadIndex { id });
                Ok(())
            }
            (_, None) => Err(ProposeError::NotLeader { leader: None }),
        }
    }

    /// Leader: queues a read, local (`from == None`) or forwarded by a follower.
    pub(crate) fn leader_read(&mut self, id: ReadId, from: Option<NodeId>) {
        if !self.committed_in_term() {
            // The commit index may be stale until our no-op commits (§6.4 step 1).
            self.read_only.waiting_commit.push((id, from));
            return;
        }
        self.read_only.push(id, from, self.log.committed);
    }

    /// Leader: the own-term entry committed; queue the reads held back.
    pub(crate) fn release_waiting_reads(&mut self) {
        let waiting = std::mem::take(&mut self.read_only.waiting_commit);
        for (id, from) in waiting {
            self.read_only.push(id, from, self.log.committed);
        }
    }

    /// The commit index if the leader holds a valid lease, else `None`.
    pub(crate) fn lease_read(&self) -> Option<Index> {
        let valid = self.role == Role::Leader
            && self.cfg.check_quorum
            && self.transferee.is_none()
            && !self.lease_disabled
            && self.committed_in_term()
            && self.now < self.lease_until;
        valid.then_some(self.log.committed)
    }

    /// The lease with the ticks it still holds for (at least one), if it
    /// holds.
    pub(crate) fn lease(&self) -> Option<Lease> {
        self.lease_read().map(|commit| Lease { commit, ticks_left: self.lease_until - self.now })
    }
}
