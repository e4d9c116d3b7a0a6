//! The protocol's data types: ids, log entries, hard state, membership and
//! snapshot metadata.
//!
//! Every type here has a stable meaning that storage and the transport encode
//! with their own codecs; the core has no serialization dependency.

use std::collections::BTreeSet;
use std::fmt;

macro_rules! newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

newtype!(
    /// A server's id in the cluster. `NodeId(0)` is never a valid id.
    NodeId
);
newtype!(
    /// A Raft term (§5.1). Terms only grow; `Term(0)` precedes every election.
    Term
);
newtype!(
    /// A log index. `Index(0)` is "before the first entry"; the first entry of a
    /// fresh log has index 1.
    Index
);
newtype!(
    /// The id of a read request, chosen by the driver and echoed back in a
    /// [`ReadState`]. The core never interprets it.
    ReadId
);

impl Index {
    /// The next index (`self + 1`).
    #[must_use]
    pub fn next(self) -> Index {
        Index(self.0 + 1)
    }

    /// The previous index, saturating at 0.
    #[must_use]
    pub fn prev(self) -> Index {
        Index(self.0.saturating_sub(1))
    }
}

/// The identity of a log entry: a term and an index. Two logs that hold an
/// entry with the same `LogId` are identical up to it (Log Matching, §5.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogId {
    /// The term of the leader that created the entry.
    pub term: Term,
    /// The entry's position in the log.
    pub index: Index,
}

impl LogId {
    /// A log id from raw numbers.
    #[must_use]
    pub fn new(term: u64, index: u64) -> LogId {
        LogId {
            term: Term(term),
            index: Index(index),
        }
    }
}

impl fmt::Display for LogId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.term, self.index)
    }
}

/// What an entry carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryPayload {
    /// The no-op a new leader appends in its term (§8, thesis §6.4); it lets
    /// the leader commit earlier entries and serve reads.
    Blank,
    /// An application command: opaque bytes for the state machine.
    Normal(Vec<u8>),
    /// A configuration change (joint when `voters_outgoing` is non-empty). It
    /// takes effect on a node when the node learns it is committed.
    Membership(Membership),
}

/// One log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Term and index of the entry.
    pub log_id: LogId,
    /// What the entry carries.
    pub payload: EntryPayload,
}

impl Entry {
    /// An approximate encoded size in bytes, used for message and batch limits.
    #[must_use]
    pub fn size(&self) -> u64 {
        let body = match &self.payload {
            EntryPayload::Blank => 0,
            EntryPayload::Normal(data) => data.len(),
            EntryPayload::Membership(m) => {
                8 * (m.voters.len() + m.voters_outgoing.len() + m.learners.len())
            }
        };
        (body + 24) as u64
    }
}

/// The state every node must persist before it sends a message that depends
/// on it (§5.1, Figure 2: `currentTerm`, `votedFor`; plus the commit index so
/// that a restart does not need to re-learn it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HardState {
    /// The latest term this node has seen.
    pub term: Term,
    /// The candidate this node voted for in `term`, if any.
    pub vote: Option<NodeId>,
    /// The highest index this node knows to be committed.
    pub commit: Index,
}

/// A cluster configuration. Joint (§6, thesis §4.3) while `voters_outgoing`
/// is non-empty: decisions then need a majority of `voters` *and* a majority of
/// `voters_outgoing`. Learners receive the log but never vote or count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// The voters (the incoming voters while joint).
    pub voters: BTreeSet<NodeId>,
    /// The outgoing voters of a joint configuration; empty when not joint.
    pub voters_outgoing: BTreeSet<NodeId>,
    /// Non-voting members. Never overlaps `voters`; may overlap
    /// `voters_outgoing` (a voter being demoted to learner).
    pub learners: BTreeSet<NodeId>,
}

impl Membership {
    /// A simple (non-joint) configuration of `voters` and no learners.
    pub fn new(voters: impl IntoIterator<Item = NodeId>) -> Membership {
        Membership {
            voters: voters.into_iter().collect(),
            ..Membership::default()
        }
    }

    /// Whether this is a joint configuration.
    #[must_use]
    pub fn is_joint(&self) -> bool {
        !self.voters_outgoing.is_empty()
    }

    /// Whether `id` votes in this configuration (in either half while joint).
    #[must_use]
    pub fn is_voter(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.voters_outgoing.contains(&id)
    }

    /// Whether `id` is a member at all (voter or learner).
    #[must_use]
    pub fn contains(&self, id: NodeId) -> bool {
        self.is_voter(id) || self.learners.contains(&id)
    }

    /// Every member, voters and learners, in id order.
    #[must_use]
    pub fn members(&self) -> BTreeSet<NodeId> {
        let mut all = self.voters.clone();
        all.extend(self.voters_outgoing.iter().copied());
        all.extend(self.learners.iter().copied());
        all
    }

    /// The configuration that ends this joint configuration (`voters` alone).
    #[must_use]
    pub fn leave_joint(&self) -> Membership {
        Membership {
            voters: self.voters.clone(),
            voters_outgoing: BTreeSet::new(),
            learners: self.learners.clone(),
        }
    }
}

/// The metadata of a snapshot: the last entry it covers and the membership in
/// effect at that entry (membership is taken from here on install, never from
/// a log that is about to be replaced).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// The last entry the snapshot covers.
    pub last: LogId,
    /// The committed membership as of `last`.
    pub membership: Membership,
}

/// A node's role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Role {
    /// Follows a leader (learners are always followers).
    #[default]
    Follower,
    /// Asks for pre-votes without raising its term (thesis §9.6).
    PreCandidate,
    /// Asks for votes in a new term (§5.2).
    Candidate,
    /// Leads its term.
    Leader,
}

/// Volatile state the driver may want to observe (not persisted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SoftState {
    /// The leader this node knows of in its term.
    pub leader: Option<NodeId>,
    /// This node's role.
    pub role: Role,
}

/// The answer to a [`read_index`](crate::RawNode::read_index) call: the read
/// `id` may be served once the state machine has applied `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadState {
    /// The id given to `read_index`.
    pub id: ReadId,
    /// The read index: serve the read once `applied >= index`.
    pub index: Index,
}

/// A leader's lease, from [`lease`](crate::RawNode::lease): reads may be
/// served at `commit` without a round until the core's clock has advanced
/// `ticks_left` more ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The commit index: serve a read once `applied >= commit`.
    pub commit: Index,
    /// Ticks until the lease ends (at least one).
    pub ticks_left: u64,
}

/// A membership change requested of the leader, turned into one log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// Add a learner (a simple configuration change).
    AddLearner(NodeId),
    /// Add a voter, or promote a learner (joint consensus).
    AddVoter(NodeId),
    /// Remove a voter (joint consensus) or a learner (simple change).
    RemoveNode(NodeId),
    /// Move to an arbitrary configuration (joint consensus if the voters change).
    Replace {
        /// The voters after the change.
        voters: std::collections::BTreeSet<NodeId>,
        /// The learners after the change.
        learners: std::collections::BTreeSet<NodeId>,
    },
}
