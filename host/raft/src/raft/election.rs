//! Elections (§5.2) with pre-vote (thesis §9.6) and leader transfer (§3.10).

use super::Raft;
use crate::message::MessageBody;
use crate::progress::{Progress, Window};
use crate::quorum::{VoteResult, quorum_vote};
use crate::storage::LogReader;
use crate::types::{Entry, EntryPayload, LogId, NodeId, Role, Term};

/// How a campaign starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CampaignKind {
    /// Ask whether an election would succeed, without raising the term.
    PreVote,
    /// A regular election.
    Vote,
    /// An election asked for by the leader (TimeoutNow): no pre-vote, and
    /// voters bypass their leader-contact guard.
    Transfer,
}

impl<L: LogReader> Raft<L> {
    pub(crate) fn campaign(&mut self, kind: CampaignKind) {
        if !self.promotable() {
            return;
        }
        let pre_vote = kind == CampaignKind::PreVote;
        let term = if pre_vote {
            self.become_pre_candidate();
            Term(self.term.0 + 1)
        } else {
            self.become_candidate();
            self.term
        };
        if self.record_vote(self.id, true) {
            return;
        }
        let last = self.log.last_log_id();
        let transfer = kind == CampaignKind::Transfer;
        let voters: Vec<NodeId> = self
            .membership
            .members()
            .into_iter()
            .filter(|&id| id != self.id && self.membership.is_voter(id))
            .collect();
        for to in voters {
            let body = MessageBody::RequestVote {
                pre_vote,
                last,
                transfer,
            };
            if pre_vote {
                self.msgs.push(crate::Message {
                    from: self.id,
                    to,
                    term,
                    body,
                });
            } else {
                // Our own vote for this term must be durable before anyone
                // counts on the request.
                self.send_after_persist(to, term, body);
            }
        }
    }

    fn become_pre_candidate(&mut self) {
        assert!(
            self.role != Role::Leader,
            "raft: leader {} cannot become pre-candidate",
            self.id
        );
        self.role = Role::PreCandidate;
        self.votes.clear();
        self.lead = None;
    }

    fn become_candidate(&mut self) {
        assert!(
            self.role != Role::Leader,
            "raft: leader {} cannot become candidate",
            self.id
        );
        let term = Term(self.term.0 + 1);
        self.reset(term);
        self.vote = Some(self.id);
        self.role = Role::Candidate;
    }

    pub(crate) fn become_leader(&mut self) {
        assert!(
            self.role == Role::Candidate,
            "raft: node {} becomes leader from {:?}",
            self.id,
            self.role
        );
        self.reset(self.term);
        self.role = Role::Leader;
        self.lead = Some(self.id);
        let last = self.log.last_index();
        for id in self.membership.members() {
            let mut pr = Progress::new(last.next(), self.cfg.window());
            pr.recent_active = true;
            self.progress.insert(id, pr);
        }
        let own = self
            .progress
            .entry(self.id)
            .or_insert_with(|| Progress::new(last.next(), Window { messages: 1, bytes: u64::MAX }));
        own.matched = self.log.persisted_last();
        own.recent_active = true;
        // The no-op of the new term (§8): commits the previous terms' entries
        // and gates reads and membership changes.
        let noop = Entry {
            log_id: LogId {
                term: self.term,
                index: last.next(),
            },
            payload: EntryPayload::Blank,
        };
        self.log.append(vec![noop]);
        self.bcast_append();
    }

    /// Records a vote; returns true if the campaign ended (won or lost).
    fn record_vote(&mut self, from: NodeId, granted: bool) -> bool {
        self.votes.entry(from).or_insert(granted);
        match quorum_vote(&self.membership, |id| self.votes.get(&id).copied()) {
            VoteResult::Won => {
                if self.role == Role::PreCandidate {
                    self.campaign(CampaignKind::Vote);
                } else {
                    self.become_leader();
                }
                true
            }
            VoteResult::Lost => {
                self.become_follower(self.term, None);
                true
            }
            VoteResult::Pending => false,
        }
    }

    pub(crate) fn handle_vote_request(
        &mut self,
        from: NodeId,
        term: Term,
        pre_vote: bool,
        last: LogId,
        transfer: bool,
    ) {
        if !transfer && self.in_lease() && self.vote != Some(from) {
            // Also at an equal term: the term may have been raised by some
            // other message while a leader's lease still counts on us.
            return;
        }
        let can_vote = self.vote == Some(from)
            || (self.vote.is_none() && self.lead.is_none())
            || (pre_vote && term > self.term);
        if can_vote && self.log.is_up_to_date(last) {
            if !pre_vote {
                self.election_elapsed = 0;
                self.vote = Some(from);
            }
            let body = MessageBody::VoteResponse {
                pre_vote,
                reject: false,
            };
            self.send_after_persist(from, term, body);
        } else {
            let body = MessageBody::VoteResponse {
                pre_vote,
                reject: true,
            };
            self.send_after_persist(from, self.term, body);
        }
    }

    pub(crate) fn handle_vote_response(&mut self, from: NodeId, pre_vote: bool, reject: bool) {
        let expected = if pre_vote {
            Role::PreCandidate
        } else {
            Role::Candidate
        };
        if self.role != expected {
            return;
        }
        self.record_vote(from, !reject);
    }

    pub(crate) fn handle_timeout_now(&mut self, from: NodeId) {
        if self.role == Role::Leader || self.lead != Some(from) {
            return;
        }
        self.campaign(CampaignKind::Transfer);
    }

    /// Starts a leader transfer: the lease ends now and for the rest of the term.
    pub(crate) fn transfer_leader(&mut self, to: NodeId) -> Result<(), crate::ProposeError> {
        use crate::ProposeError;
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader { leader: self.lead });
        }
        if let Some(t) = self.transferee {
            return if t == to {
                Ok(())
            } else {
                Err(ProposeError::TransferInProgress { to: t })
            };
        }
        if to == self.id {
            return Ok(());
        }
        if !self.membership.voters.contains(&to) {
            return Err(ProposeError::NotVoter(to));
        }
        self.transferee = Some(to);
        self.transfer_elapsed = 0;
        // Voters bypass their lease guard for the transfer's election, so the
        // lease can never be trusted again in this term.
        self.lease_disabled = true;
        self.lease_until = 0;
        if self.progress[&to].matched == self.log.last_index() {
            self.send(to, MessageBody::TimeoutNow);
        } else {
            self.send_append(to);
        }
        Ok(())
    }
}
