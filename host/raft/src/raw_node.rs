//! [`RawNode`]: the driving API, and [`Ready`]: what the driver must do.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::config::Config;
use crate::error::{Error, ProposeError, StepError};
use crate::message::{Message, MessageBody};
use crate::progress::Progress;
use crate::raft::Raft;
use crate::storage::LogReader;
use crate::types::{
    Entry, HardState, Index, Lease, LogId, Membership, MembershipChange, NodeId, ReadId, ReadState, Role,
    SnapshotMeta, SoftState, Term,
};

/// A batch of work for the driver, to be done in this order (see the crate
/// docs for the full contract):
///
/// 1. send `messages` (they do not depend on this Ready's writes);
/// 2. if `snapshot` is `Some`, install it atomically (state and meta);
/// 3. append `entries` (truncating any suffix they replace) and save
///    `hard_state`; fsync once if `must_sync`;
/// 4. only then send `persisted_messages`;
/// 5. apply `committed_entries` in order and answer `read_states` once
///    `applied >= read_state.index`;
/// 6. call [`RawNode::advance`] with this Ready.
#[derive(Debug, Default)]
#[must_use = "a Ready must be handled and given back to advance()"]
pub struct Ready {
    /// The role/leader if they changed since the last Ready.
    pub soft_state: Option<SoftState>,
    /// The hard state to save, if it changed.
    pub hard_state: Option<HardState>,
    /// Entries to append, replacing any persisted suffix from `entries[0]` on.
    pub entries: Vec<Entry>,
    /// A snapshot received from the leader, to make current before `entries`.
    pub snapshot: Option<SnapshotMeta>,
    /// Messages to send now, before the writes of this Ready are durable.
    pub messages: Vec<Message>,
    /// Messages to send only after the writes of this Ready are durable.
    pub persisted_messages: Vec<Message>,
    /// Committed entries to apply, in order.
    pub committed_entries: Vec<Entry>,
    /// Answers to `read_index`: serve each once `applied >= index`.
    pub read_states: Vec<ReadState>,
    /// Whether the writes need an fsync (term, vote, entries or snapshot changed).
    pub must_sync: bool,
    /// The ids of `entries`, for `advance` (the driver may move them out).
    written: Vec<LogId>,
    snapshot_index: Option<Index>,
}

/// What may be done while a Ready's writes are in flight
/// ([`RawNode::take_early`]): as a Ready's `messages` and `read_states`.
#[derive(Debug, Default)]
pub struct Early {
    /// Messages to send now.
    pub messages: Vec<Message>,
    /// Answers to `read_index`: serve each once `applied >= index`.
    pub read_states: Vec<ReadState>,
}

/// A node's status.
#[derive(Clone, Debug)]
pub struct Status {
    /// This node.
    pub id: NodeId,
    /// Its role.
    pub role: Role,
    /// Its term.
    pub term: Term,
    /// Its vote in `term`.
    pub vote: Option<NodeId>,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// Its commit index.
    pub commit: Index,
    /// The applied index reported by the driver.
    pub applied: Index,
    /// Its last log index.
    pub last_index: Index,
    /// The committed configuration in effect.
    pub membership: Membership,
    /// Leader only: each member's progress.
    pub progress: BTreeMap<NodeId, Progress>,
    /// Leader only: the transfer target, if a transfer is in progress.
    pub transferee: Option<NodeId>,
    /// Ticks since start.
    pub now: u64,
}

/// A Raft node without I/O: feed it ticks, messages and proposals; take
/// [`Ready`]s; do what they say; [`advance`](RawNode::advance).
pub struct RawNode<L: LogReader> {
    raft: Raft<L>,
    prev_soft: SoftState,
    prev_hard: HardState,
    outstanding: bool,
}

impl<L: LogReader> std::fmt::Debug for RawNode<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawNode")
            .field("id", &self.raft.id)
            .field("role", &self.raft.role)
            .field("term", &self.raft.term)
            .finish_non_exhaustive()
    }
}

impl<L: LogReader> RawNode<L> {
    /// A node over the persisted state `reader` exposes.
    pub fn new(config: Config, reader: L) -> Result<RawNode<L>, Error> {
        let raft = Raft::new(config, reader)?;
        let prev_hard = raft.hard_state();
        Ok(RawNode {
            prev_soft: raft.soft_state(),
            prev_hard,
            raft,
            outstanding: false,
        })
    }

    /// Advances the logical clock by one tick.
    pub fn tick(&mut self) {
        self.raft.tick();
    }

    /// Steps a message received from a peer.
    pub fn step(&mut self, msg: Message) -> Result<(), StepError> {
        if msg.to != self.raft.id {
            return Err(StepError::WrongRecipient {
                to: msg.to,
                node: self.raft.id,
            });
        }
        if let Some(reason) = self.invalid(&msg) {
            return Err(StepError::Invalid {
                from: msg.from,
                reason,
            });
        }
        self.raft.step(msg);
        Ok(())
    }

    /// Why `msg` cannot come from an honest peer, if it cannot. The core
    /// asserts its own invariants; a peer's word is checked here first, so
    /// that nothing a peer sends can trip them (or overflow a term).
    fn invalid(&self, msg: &Message) -> Option<&'static str> {
        let r = &self.raft;
        if msg.from == r.id {
            return Some("a message from this node's own id");
        }
        if msg.term.0 > crate::MAX_TERM {
            return Some("term out of range");
        }
        let leader_only = matches!(
            msg.body,
            MessageBody::AppendEntries { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::InstallSnapshot { .. }
        );
        // Election safety (§5.2): one leader per term, and it is this node.
        if leader_only && msg.term == r.term && r.role == Role::Leader {
            return Some("a second leader in this node's term");
        }
        match &msg.body {
            MessageBody::AppendEntries {
                prev,
                entries,
                commit,
            } => {
                let mut last = *prev;
                for e in entries {
                    if e.log_id.index != last.index.next()
                        || e.log_id.term < last.term
                        || e.log_id.term > msg.term
                    {
                        return Some("append-entries out of order");
                    }
                    last = e.log_id;
                }
                if last.index.0 > crate::MAX_TERM || commit.0 > crate::MAX_TERM {
                    return Some("index out of range");
                }
                // Entries at or below this node's commit index are never
                // rewritten: the core answers with its commit index instead.
                None
            }
            MessageBody::RequestVote { last, .. }
                if last.term > msg.term || last.index.0 > crate::MAX_TERM =>
            {
                Some("vote request with a last log id out of range")
            }
            MessageBody::InstallSnapshot { meta }
                if meta.last.term > msg.term || meta.last.index.0 > crate::MAX_TERM =>
            {
                Some("snapshot position out of range")
            }
            _ => None,
        }
    }

    /// The snapshot the core accepted and has not handed out in a `Ready`
    /// yet: a driver keeps a received snapshot's data only if this names it.
    pub fn pending_snapshot(&self) -> Option<LogId> {
        self.raft.log.unstable_snapshot.as_ref().map(|m| m.last)
    }

    /// Proposes a batch of commands: one append, one message per follower.
    /// Returns the indexes the entries got (all in the current term,
    /// [`Status::term`]); they commit only if an entry with the same index and
    /// term shows up in `committed_entries`.
    pub fn propose(&mut self, commands: Vec<Vec<u8>>) -> Result<Range<Index>, ProposeError> {
        self.raft.propose(commands)
    }

    /// Proposes a membership change; returns the index of its entry.
    pub fn propose_membership(&mut self, change: MembershipChange) -> Result<Index, ProposeError> {
        self.raft.propose_membership(change)
    }

    /// Transfers leadership to voter `to` (TimeoutNow once it caught up). The
    /// lease ends at once; proposals are refused until the transfer ends.
    pub fn transfer_leader(&mut self, to: NodeId) -> Result<(), ProposeError> {
        self.raft.transfer_leader(to)
    }

    /// Asks for a linearizable read index for `id`; the answer comes as a
    /// [`ReadState`] in a later Ready (never, if leadership is lost first:
    /// the driver times the read out). A follower forwards it to the leader.
    pub fn read_index(&mut self, id: ReadId) -> Result<(), ProposeError> {
        self.raft.read_index(id)
    }

    /// `Some(commit)` if this node is the leader and holds a valid lease: the
    /// read may then be served once `applied >= commit` without a round. The
    /// driver must have delivered every elapsed tick first.
    #[must_use]
    pub fn lease_read(&self) -> Option<Index> {
        self.raft.lease_read()
    }

    /// Like [`lease_read`](Self::lease_read), with the ticks the lease
    /// still holds for: it holds until the core's clock reaches `now +
    /// ticks_left`, so a driver may serve lease reads without the core
    /// until the real time that tick is due, unless it hears otherwise
    /// first (see `transfer_leader`, which ends the lease at once).
    #[must_use]
    pub fn lease(&self) -> Option<Lease> {
        self.raft.lease()
    }

    /// The transport cannot reach `peer`.
    pub fn report_unreachable(&mut self, peer: NodeId) {
        self.raft.report_unreachable(peer);
    }

    /// Leader, with [`Config::defer_commit_updates`]: whether follower `to`
    /// was not sent the commit index yet, and could be sent an append now.
    /// The next append or heartbeat round sends it anyway;
    /// [`send_commit_updates`](Self::send_commit_updates) sends it now.
    #[must_use]
    pub fn commit_update_due(&self, to: NodeId) -> bool {
        self.raft.commit_update_due(to)
    }

    /// Leader: the highest commit index sent to follower `to` this term, in
    /// an append or a heartbeat (`None`: not a member this leader
    /// replicates to).
    #[must_use]
    pub fn commit_sent(&self, to: NodeId) -> Option<Index> {
        self.raft.follower(to).map(|pr| pr.commit_sent)
    }

    /// The commit index this node knows.
    #[must_use]
    pub fn committed(&self) -> Index {
        self.raft.log.committed
    }

    /// Leader: whether [`commit_update_due`](Self::commit_update_due) for
    /// any follower.
    #[must_use]
    pub fn commit_updates_due(&self) -> bool {
        self.raft.progress.keys().any(|&id| self.raft.commit_update_due(id))
    }

    /// Leader: sends each follower that `wanted` picks, and for which a
    /// [commit update is due](Self::commit_update_due), the commit index in
    /// an AppendEntries (with entries, if it has any to send).
    pub fn send_commit_updates(&mut self, wanted: impl FnMut(NodeId) -> bool) {
        self.raft.send_commit_updates(wanted);
    }

    /// The snapshot sent to `peer` was installed (`ok`) or failed.
    pub fn report_snapshot(&mut self, peer: NodeId, ok: bool) {
        self.raft.report_snapshot(peer, ok);
    }

    /// The state machine applied every entry through `index`.
    pub fn applied_to(&mut self, index: Index) {
        assert!(
            index <= self.raft.log.handed,
            "raw node: applied {index} beyond the committed entries handed out ({})",
            self.raft.log.handed
        );
        self.raft.log.applied_to(index);
    }

    /// The applied index the driver last reported.
    #[must_use]
    pub fn applied(&self) -> Index {
        self.raft.log.applied
    }

    /// Whether committed entries wait until the driver reports more of the
    /// entries handed out applied (`max_applying_bytes` is spent): the
    /// driver should then report [`applied_to`](Self::applied_to) as soon
    /// as it can.
    #[must_use]
    pub fn waits_for_applied(&self) -> bool {
        self.raft.log.waits_for_applying_budget()
    }

    /// This node's role and term, without the copies [`RawNode::status`]
    /// makes of membership and progress.
    #[must_use]
    pub fn role_and_term(&self) -> (Role, Term) {
        (self.raft.role, self.raft.term)
    }

    /// This node's id.
    #[must_use]
    pub fn id(&self) -> NodeId {
        self.raft.id
    }

    /// The leader this node knows of, if any (without [`Self::status`]'s copies).
    #[must_use]
    pub fn leader(&self) -> Option<NodeId> {
        self.raft.lead
    }

    /// This node's status.
    #[must_use]
    pub fn status(&self) -> Status {
        let r = &self.raft;
        Status {
            id: r.id,
            role: r.role,
            term: r.term,
            vote: r.vote,
            leader: r.lead,
            commit: r.log.committed,
            applied: r.log.applied,
            last_index: r.log.last_index(),
            membership: r.membership.clone(),
            progress: r.progress.clone(),
            transferee: r.transferee,
            now: r.now,
        }
    }

    /// The storage reader.
    pub fn reader(&self) -> &L {
        &self.raft.log.reader
    }

    /// The storage reader, mutably (e.g. for a driver that writes through it).
    pub fn reader_mut(&mut self) -> &mut L {
        &mut self.raft.log.reader
    }

    /// Consumes the node, returning its reader.
    pub fn into_reader(self) -> L {
        self.raft.log.reader
    }

    /// Whether a Ready has work. False while a Ready is outstanding.
    #[must_use]
    pub fn has_ready(&self) -> bool {
        let r = &self.raft;
        !self.outstanding
            && (r.soft_state() != self.prev_soft
                || r.hard_state() != self.prev_hard
                || !r.log.unstable.is_empty()
                || r.log.unstable_snapshot.is_some()
                || !r.msgs.is_empty()
                || !r.msgs_after_persist.is_empty()
                || r.log.has_committed_to_hand()
                || !r.read_states.is_empty()
                || (r.role == Role::Leader && r.read_only.round_wanted))
    }

    /// While a Ready's writes are in flight (between [`ready`](Self::ready)
    /// and [`advance`](Self::advance)), the work that depends on no write:
    /// messages (a follower's heartbeat answers, a leader's heartbeats,
    /// appends and ReadIndex round) and answered reads. A driver that
    /// writes on another thread takes these at once, so that a slow disk
    /// neither silences this node for the length of an fsync (its leader
    /// would find its quorum gone, or its followers their leader) nor
    /// delays reads. Everything else waits for the next Ready.
    pub fn take_early(&mut self) -> Early {
        self.raft.flush_read_round();
        Early {
            messages: std::mem::take(&mut self.raft.msgs),
            read_states: std::mem::take(&mut self.raft.read_states),
        }
    }

    /// Takes the pending work. Give it back to [`advance`](Self::advance)
    /// before the next `ready()`.
    pub fn ready(&mut self) -> Ready {
        assert!(
            !self.outstanding,
            "raw node: ready() called again before advance()"
        );
        self.raft.flush_read_round();
        let r = &mut self.raft;
        let soft = r.soft_state();
        let hard = r.hard_state();
        let soft_state = (soft != self.prev_soft).then_some(soft);
        let hard_state = (hard != self.prev_hard).then_some(hard);
        let must_sync = hard.term != self.prev_hard.term
            || hard.vote != self.prev_hard.vote
            || !r.log.unstable.is_empty()
            || r.log.unstable_snapshot.is_some();
        self.prev_soft = soft;
        self.prev_hard = hard;
        let entries = r.log.unstable.clone();
        let snapshot = r.log.unstable_snapshot.clone();
        let rd = Ready {
            soft_state,
            hard_state,
            written: entries.iter().map(|e| e.log_id).collect(),
            snapshot_index: snapshot.as_ref().map(|s| s.last.index),
            entries,
            snapshot,
            messages: std::mem::take(&mut r.msgs),
            persisted_messages: std::mem::take(&mut r.msgs_after_persist),
            committed_entries: r.log.take_committed(),
            read_states: std::mem::take(&mut r.read_states),
            must_sync,
        };
        self.outstanding = true;
        rd
    }

    /// The driver did everything `rd` asked (its writes are durable). The
    /// leader counts its own log as persisted only now.
    pub fn advance(&mut self, rd: Ready) {
        assert!(self.outstanding, "raw node: advance() without ready()");
        self.outstanding = false;
        if let Some(index) = rd.snapshot_index {
            self.raft.log.stable_snap_to(index);
            self.raft.log.applied_to(index);
        }
        if !rd.written.is_empty() {
            self.raft.log.stable_to(&rd.written);
        }
        self.raft.on_persisted();
    }
}
