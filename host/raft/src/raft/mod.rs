//! The protocol state machine of one node, split by role:
//!
//! | event | handler | outputs |
//! |---|---|---|
//! | `tick` | [`Raft::tick`] | campaign (election.rs), heartbeat round + check-quorum (read.rs) |
//! | `RequestVote` / `VoteResponse` / `TimeoutNow` | election.rs | votes, become leader / follower |
//! | `propose`, `AppendEntries`, `AppendResponse` | replication.rs | appends, commit |
//! | `read_index`, `Heartbeat(Response)`, `ReadIndex(Response)` | read.rs | read states, lease |
//! | `propose_membership`, commit of a membership entry | membership.rs | progress changes, auto-leave |
//! | `InstallSnapshot`, `report_snapshot` | snapshot.rs | snapshot to install / to send |
//!
//! Outputs accumulate in `msgs` (may be sent before this node's writes are
//! durable) and `msgs_after_persist` (only after), then leave through `Ready`.

mod election;
mod membership;
mod read;
mod replication;
mod snapshot;

use std::collections::BTreeMap;

use crate::config::{Config, SplitMix64};
use crate::log::RaftLog;
use crate::message::{Message, MessageBody};
use crate::progress::Progress;
use crate::read_only::ReadOnly;
use crate::storage::LogReader;
use crate::types::{HardState, Index, Membership, NodeId, ReadState, Role, SoftState, Term};

pub(crate) use election::CampaignKind;

/// One node's Raft state.
pub(crate) struct Raft<L: LogReader> {
    pub(crate) id: NodeId,
    pub(crate) cfg: Config,
    pub(crate) term: Term,
    pub(crate) vote: Option<NodeId>,
    pub(crate) lead: Option<NodeId>,
    pub(crate) role: Role,
    pub(crate) log: RaftLog<L>,
    /// The committed configuration in effect.
    pub(crate) membership: Membership,
    /// Leader only: every member's progress, this node's included.
    pub(crate) progress: BTreeMap<NodeId, Progress>,
    pub(crate) votes: BTreeMap<NodeId, bool>,
    pub(crate) election_elapsed: u64,
    pub(crate) heartbeat_elapsed: u64,
    pub(crate) randomized_timeout: u64,
    rng: SplitMix64,
    /// Ticks since start: the core's only clock.
    pub(crate) now: u64,
    /// When this node last heard from a leader (start counts as contact).
    pub(crate) leader_contact: u64,
    pub(crate) msgs: Vec<Message>,
    pub(crate) msgs_after_persist: Vec<Message>,
    pub(crate) read_only: ReadOnly,
    pub(crate) read_states: Vec<ReadState>,
    /// Leader only: the newest round a quorum confirmed.
    pub(crate) confirmed_token: u64,
    /// Leader only: the lease is valid while `now < lease_until`.
    pub(crate) lease_until: u64,
    /// Leader only: no lease for the rest of the term (set by a transfer).
    pub(crate) lease_disabled: bool,
    pub(crate) transferee: Option<NodeId>,
    pub(crate) transfer_elapsed: u64,
}

impl<L: LogReader> Raft<L> {
    pub(crate) fn new(cfg: Config, reader: L) -> Result<Raft<L>, crate::Error> {
        cfg.validate()?;
        let (hs, base) = reader.initial_state()?;
        let mut log = RaftLog::new(reader, hs.commit, cfg.applied);
        log.max_applying_bytes = cfg.max_applying_bytes;
        let mut raft = Raft {
            id: cfg.id,
            rng: SplitMix64::new(cfg.seed, cfg.id),
            cfg,
            term: hs.term,
            vote: hs.vote,
            lead: None,
            role: Role::Follower,
            log,
            membership: base,
            progress: BTreeMap::new(),
            votes: BTreeMap::new(),
            election_elapsed: 0,
            heartbeat_elapsed: 0,
            randomized_timeout: 0,
            now: 0,
            leader_contact: 0,
            msgs: Vec::new(),
            msgs_after_persist: Vec::new(),
            read_only: ReadOnly::default(),
            read_states: Vec::new(),
            confirmed_token: 0,
            lease_until: 0,
            lease_disabled: false,
            transferee: None,
            transfer_elapsed: 0,
        };
        raft.apply_committed_membership();
        raft.reset_randomized_timeout();
        Ok(raft)
    }

    pub(crate) fn hard_state(&self) -> HardState {
        HardState {
            term: self.term,
            vote: self.vote,
            commit: self.log.committed,
        }
    }

    pub(crate) fn soft_state(&self) -> SoftState {
        SoftState {
            leader: self.lead,
            role: self.role,
        }
    }

    /// Whether this node may campaign: a voter of the committed configuration.
    pub(crate) fn promotable(&self) -> bool {
        self.membership.is_voter(self.id)
    }

    /// Whether the leader committed an entry of its term (§5.4.2; needed
    /// before serving reads and changing membership).
    pub(crate) fn committed_in_term(&self) -> bool {
        self.log.term_or_zero(self.log.committed) == self.term
    }

    /// Whether this node must refuse (pre-)votes: it heard from a leader
    /// within the election timeout (or just started, which may have erased
    /// such contact), so a leader may be counting on it for its lease
    /// (thesis §6.2, §9.6; openraft leader_lease.md).
    pub(crate) fn in_lease(&self) -> bool {
        self.cfg.check_quorum
            && (self.role == Role::Leader
                || self.now - self.leader_contact < self.cfg.election_tick)
    }

    fn reset_randomized_timeout(&mut self) {
        let e = self.cfg.election_tick;
        self.randomized_timeout = e + self.rng.below(e);
    }

    pub(crate) fn send(&mut self, to: NodeId, body: MessageBody) {
        if let MessageBody::AppendEntries { commit, .. } | MessageBody::Heartbeat { commit, .. } = &body
            && let Some(pr) = self.progress.get_mut(&to)
        {
            pr.commit_sent = pr.commit_sent.max(*commit);
        }
        self.msgs.push(Message {
            from: self.id,
            to,
            term: self.term,
            body,
        });
    }

    /// Sends after this node's writes of the current Ready are durable.
    pub(crate) fn send_after_persist(&mut self, to: NodeId, term: Term, body: MessageBody) {
        self.msgs_after_persist.push(Message {
            from: self.id,
            to,
            term,
            body,
        });
    }

    /// Resets the volatile state of a role change into `term`.
    fn reset(&mut self, term: Term) {
        if term != self.term {
            self.term = term;
            self.vote = None;
        }
        self.lead = None;
        self.election_elapsed = 0;
        self.heartbeat_elapsed = 0;
        self.reset_randomized_timeout();
        self.votes.clear();
        self.progress.clear();
        self.read_only.reset();
        self.confirmed_token = 0;
        self.lease_until = 0;
        self.lease_disabled = false;
        self.transferee = None;
        self.transfer_elapsed = 0;
    }

    pub(crate) fn become_follower(&mut self, term: Term, lead: Option<NodeId>) {
        self.reset(term);
        self.role = Role::Follower;
        self.lead = lead;
    }

    pub(crate) fn tick(&mut self) {
        self.now += 1;
        if self.role == Role::Leader {
            self.tick_leader();
        } else {
            self.election_elapsed += 1;
            if self.promotable() && self.election_elapsed >= self.randomized_timeout {
                self.election_elapsed = 0;
                let kind = if self.cfg.pre_vote {
                    CampaignKind::PreVote
                } else {
                    CampaignKind::Vote
                };
                self.campaign(kind);
            }
        }
    }

    /// Steps a message from a peer: term handling first (§5.1), then by role.
    pub(crate) fn step(&mut self, m: Message) {
        if m.term > self.term {
            if let MessageBody::RequestVote {
                transfer: false, ..
            } = m.body
                && self.in_lease()
            {
                return; // a leader may count on us: ignore, do not even raise the term
            }
            match m.body {
                MessageBody::RequestVote { pre_vote: true, .. } => {}
                MessageBody::VoteResponse {
                    pre_vote: true,
                    reject: false,
                } => {}
                MessageBody::AppendEntries { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::InstallSnapshot { .. } => self.become_follower(m.term, Some(m.from)),
                MessageBody::RequestVote { .. } if self.role != Role::Leader => {
                    // Only the leader or a granted vote restarts the election
                    // timer (Figure 2): a candidate that cannot win (a stale
                    // log, a member removed without knowing it) would
                    // otherwise hold off, term after term, the nodes that can.
                    let elapsed = self.election_elapsed;
                    self.become_follower(m.term, None);
                    self.election_elapsed = elapsed;
                }
                _ => self.become_follower(m.term, None),
            }
        } else if m.term < self.term {
            match m.body {
                // Tell a stale leader about the new term so it steps down
                // (with pre-vote it would otherwise never learn of it).
                MessageBody::AppendEntries { .. } | MessageBody::Heartbeat { .. } => {
                    let body = MessageBody::HeartbeatResponse { token: 0 };
                    self.send_after_persist(m.from, self.term, body);
                }
                MessageBody::RequestVote { pre_vote: true, .. } => {
                    let body = MessageBody::VoteResponse {
                        pre_vote: true,
                        reject: true,
                    };
                    self.send_after_persist(m.from, self.term, body);
                }
                _ => {}
            }
            return;
        }
        match m.body {
            MessageBody::RequestVote {
                pre_vote,
                last,
                transfer,
            } => {
                self.handle_vote_request(m.from, m.term, pre_vote, last, transfer);
            }
            MessageBody::VoteResponse { pre_vote, reject } => {
                self.handle_vote_response(m.from, pre_vote, reject)
            }
            MessageBody::TimeoutNow => self.handle_timeout_now(m.from),
            MessageBody::AppendEntries {
                prev,
                entries,
                commit,
            } => {
                self.heard_from_leader(m.from);
                self.handle_append(m.from, prev, &entries, commit);
            }
            MessageBody::Heartbeat { commit, token } => {
                self.heard_from_leader(m.from);
                self.handle_heartbeat(m.from, commit, token);
            }
            MessageBody::InstallSnapshot { meta } => {
                self.heard_from_leader(m.from);
                self.handle_snapshot(m.from, meta);
            }
            MessageBody::AppendResponse {
                reject,
                index,
                hint,
            } => {
                if self.role == Role::Leader {
                    self.handle_append_response(m.from, reject, index, hint);
                }
            }
            MessageBody::HeartbeatResponse { token } => {
                if self.role == Role::Leader {
                    self.handle_heartbeat_response(m.from, token);
                }
            }
            MessageBody::ReadIndex { id } => {
                if self.role == Role::Leader {
                    self.leader_read(id, Some(m.from));
                }
            }
            MessageBody::ReadIndexResponse { id, index } => {
                if self.role == Role::Follower {
                    self.read_states.push(ReadState { id, index });
                }
            }
            // The driver's: it stamps forwarded commands before they enter
            // the log and matches their answers to its clients.
            MessageBody::Propose { .. } | MessageBody::ProposeResponse { .. } => {}
        }
    }

    /// A message of the current term from the leader: follow it.
    fn heard_from_leader(&mut self, from: NodeId) {
        assert!(
            self.role != Role::Leader,
            "raft: node {} is leader of term {} and heard from another leader {from}",
            self.id,
            self.term
        );
        if self.role != Role::Follower {
            // A candidate learns that a leader won this term (§5.2).
            self.become_follower(self.term, Some(from));
        }
        self.lead = Some(from);
        self.election_elapsed = 0;
        self.leader_contact = self.now;
    }

    /// Moves the commit index and applies what follows from it.
    pub(crate) fn commit_to(&mut self, index: Index) {
        self.log.commit_to(index);
        self.after_commit();
    }

    /// Applies newly committed membership and releases reads held back for
    /// the own-term commit.
    pub(crate) fn after_commit(&mut self) {
        self.apply_committed_membership();
        if self.role == Role::Leader && self.committed_in_term() {
            self.release_waiting_reads();
            self.maybe_leave_joint();
        }
    }
}
