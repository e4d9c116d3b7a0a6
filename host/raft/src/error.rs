//! Error types, one small enum per concern.

use crate::types::{Index, NodeId};

/// A [`Config`](crate::Config) that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The node id is 0.
    #[error("node id 0 is invalid")]
    InvalidId,
    /// `heartbeat_tick` is 0.
    #[error("heartbeat_tick must be positive")]
    HeartbeatTick,
    /// `election_tick` is not larger than `heartbeat_tick`.
    #[error("election_tick {election_tick} must exceed heartbeat_tick {heartbeat_tick}")]
    ElectionTick {
        /// The configured election timeout.
        election_tick: u64,
        /// The configured heartbeat interval.
        heartbeat_tick: u64,
    },
    /// `lease_drift_ticks` is 0 or not below `election_tick`.
    #[error("lease_drift_ticks {lease_drift_ticks} must be in [1, election_tick {election_tick})")]
    LeaseDrift {
        /// The configured drift margin.
        lease_drift_ticks: u64,
        /// The configured election timeout.
        election_tick: u64,
    },
    /// `max_inflight_msgs` is 0.
    #[error("max_inflight_msgs must be positive")]
    MaxInflight,
}

/// What a [`LogReader`](crate::LogReader) can fail with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The requested index is behind the first index (compacted into a snapshot).
    #[error("log compacted")]
    Compacted,
    /// The requested data is not available (yet), e.g. beyond the last index
    /// or a snapshot still being built.
    #[error("log unavailable")]
    Unavailable,
    /// Anything else (I/O, corruption). The core treats it as fatal.
    #[error("storage: {0}")]
    Other(String),
}

/// Errors of [`RawNode::new`](crate::RawNode::new).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid.
    #[error("invalid config: {0}")]
    Config(#[from] ConfigError),
    /// The initial state could not be read.
    #[error("cannot read initial state: {0}")]
    Storage(#[from] StorageError),
}

/// Errors of [`RawNode::step`](crate::RawNode::step).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The message is addressed to another node.
    #[error("message for node {to} stepped into node {node}")]
    WrongRecipient {
        /// The message's recipient.
        to: NodeId,
        /// This node.
        node: NodeId,
    },
    /// The message cannot come from an honest peer: its shape is wrong, or
    /// it contradicts what this node knows is committed or who leads. It is
    /// dropped; nothing changed.
    #[error("invalid message from node {from}: {reason}")]
    Invalid {
        /// The claimed sender.
        from: NodeId,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Errors of `propose`, `propose_membership`, `read_index` and `transfer_leader`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    /// This node is not the leader (for `read_index`: and knows no leader).
    #[error("not the leader (leader: {leader:?})")]
    NotLeader {
        /// The leader this node knows of, if any.
        leader: Option<NodeId>,
    },
    /// A membership change is not committed yet, or the configuration is joint.
    #[error("a membership change is in progress")]
    MembershipChangeInProgress,
    /// The leader has not committed an entry of its own term yet (required
    /// before a membership change).
    #[error("the leader has not committed an entry of its term (commit {commit})")]
    LeaderNotReady {
        /// The leader's commit index.
        commit: Index,
    },
    /// A leader transfer is in progress; proposals are refused until it ends.
    #[error("leader transfer to node {to} in progress")]
    TransferInProgress {
        /// The transfer's target.
        to: NodeId,
    },
    /// The membership change is invalid (unknown node, no voters left, ...).
    #[error("invalid membership change: {0}")]
    InvalidMembership(String),
    /// The transfer target is not a voter of the current configuration.
    #[error("node {0} is not a voter")]
    NotVoter(NodeId),
    /// The batch of commands is empty.
    #[error("empty proposal")]
    Empty,
}
