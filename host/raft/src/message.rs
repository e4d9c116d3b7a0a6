//! Messages between peers. The transport encodes them; the core never does.

use crate::types::{Entry, Index, LogId, NodeId, ReadId, SnapshotMeta, Term};

/// One message from one node to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The sender.
    pub from: NodeId,
    /// The recipient.
    pub to: NodeId,
    /// The sender's term (for a pre-vote request: the term it would campaign
    /// in; for a granted pre-vote: that same term).
    pub term: Term,
    /// What the message says.
    pub body: MessageBody,
}

/// The kinds of messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MessageBody {
    /// Leader to follower: append `entries` after `prev` (§5.3).
    AppendEntries {
        /// The entry just before `entries` in the leader's log.
        prev: LogId,
        /// The entries to append (possibly none: a probe or a commit update).
        entries: Vec<Entry>,
        /// The leader's commit index.
        commit: Index,
    },
    /// Follower to leader: the outcome of an `AppendEntries` or `InstallSnapshot`.
    AppendResponse {
        /// Whether `prev` did not match.
        reject: bool,
        /// If accepted: the last index known to match the leader's log. If
        /// rejected: the rejected `prev.index`.
        index: Index,
        /// If rejected: the follower's guess of where logs agree, the largest
        /// index `<= prev.index` whose term is `<= prev.term`, with its term
        /// (fast backtracking, §5.3 "optimization").
        hint: LogId,
    },
    /// Candidate to voters: vote for me (or pre-vote: would you?) (§5.2, thesis §9.6).
    RequestVote {
        /// Whether this is a pre-vote; the term is then not raised by anyone.
        pre_vote: bool,
        /// The candidate's last log id (the up-to-date check, §5.4.1).
        last: LogId,
        /// Sent on TimeoutNow: voters bypass their leader-contact guard.
        transfer: bool,
    },
    /// Voter to candidate.
    VoteResponse {
        /// Whether this answers a pre-vote.
        pre_vote: bool,
        /// Whether the vote was refused.
        reject: bool,
    },
    /// Leader to follower: I am still the leader (§5.2). Carries the round's
    /// token used by ReadIndex and the lease.
    Heartbeat {
        /// `min(leader commit, follower match)`.
        commit: Index,
        /// The heartbeat round; unique within the leader's term and increasing.
        token: u64,
    },
    /// Follower to leader: acknowledges the heartbeat round `token`.
    HeartbeatResponse {
        /// The acknowledged round.
        token: u64,
    },
    /// Leader to follower: install the snapshot `meta` (streamed by the
    /// drivers). The follower's driver steps this message once the data is durable.
    InstallSnapshot {
        /// What the snapshot covers.
        meta: SnapshotMeta,
    },
    /// Leader to transfer target: campaign now (thesis §3.10).
    TimeoutNow,
    /// Follower to leader: give me a read index for `id`.
    ReadIndex {
        /// The follower's read id, echoed back.
        id: ReadId,
    },
    /// Leader to follower: the read index for `id`.
    ReadIndexResponse {
        /// The follower's read id.
        id: ReadId,
        /// The read index confirmed by a quorum round.
        index: Index,
    },
    /// Follower to leader: append these commands for me (proposals made on
    /// a follower, as etcd forwards them). The driver handles this message
    /// and its answer; the core only applies its term rules to them.
    Propose {
        /// The sender's forwarding session (new at each start).
        session: u64,
        /// Increasing within `session`: a leader appends each batch once,
        /// whatever the transport duplicates or reorders.
        seq: u64,
        /// The commands, each an entry's data.
        commands: Vec<Vec<u8>>,
    },
    /// Leader to follower: what became of the `Propose` numbered `seq`.
    ProposeResponse {
        /// The batch answered.
        seq: u64,
        /// Where its commands went, or why they did not.
        outcome: ProposeOutcome,
    },
}

/// What a leader did with a forwarded batch of proposals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProposeOutcome {
    /// Appended at consecutive indexes from `first`, in the message's term.
    Appended {
        /// The index of the batch's first command.
        first: Index,
    },
    /// Appended, in the message's term, at these indexes, one per command
    /// in order: a retry of a proposal still in the leader's log waits for
    /// that entry instead of being appended again.
    Placed {
        /// Each command's index.
        at: Vec<Index>,
    },
    /// Refused: the recipient does not lead (or is handing over).
    NotLeader,
    /// Refused: the leader has more queued than it takes.
    Busy,
}

impl MessageBody {
    /// A short name of the kind, for logs.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            MessageBody::AppendEntries { .. } => "append_entries",
            MessageBody::AppendResponse { .. } => "append_response",
            MessageBody::RequestVote { pre_vote: true, .. } => "request_pre_vote",
            MessageBody::RequestVote { .. } => "request_vote",
            MessageBody::VoteResponse { pre_vote: true, .. } => "pre_vote_response",
            MessageBody::VoteResponse { .. } => "vote_response",
            MessageBody::Heartbeat { .. } => "heartbeat",
            MessageBody::HeartbeatResponse { .. } => "heartbeat_response",
            MessageBody::InstallSnapshot { .. } => "install_snapshot",
            MessageBody::TimeoutNow => "timeout_now",
            MessageBody::ReadIndex { .. } => "read_index",
            MessageBody::ReadIndexResponse { .. } => "read_index_response",
            MessageBody::Propose { .. } => "propose",
            MessageBody::ProposeResponse { .. } => "propose_response",
        }
    }
}
