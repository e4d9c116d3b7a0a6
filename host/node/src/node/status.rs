//! What a node reports of itself and of the commands it applied, and how
//! a worker that panics marks its node fatal.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use wasmraft_raft::{Membership, NodeId, Role};
use wasmraft_runtime::PluginInfo;

use crate::divergence::HashCheck;

/// A command that committed and applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The log index it applied at.
    pub index: u64,
    /// The plugin's response.
    pub response: Vec<u8>,
}

/// The cluster's configuration as this node sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    /// Voters, learners (and the outgoing voters while a change is joint).
    pub membership: wasmraft_raft::Membership,
    /// The leader this node knows of.
    pub leader: Option<NodeId>,
    /// On the leader: the last index known replicated to each member.
    pub matched: BTreeMap<NodeId, u64>,
}

/// What a node reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// This node's id.
    pub id: u64,
    /// Its Raft role.
    pub role: Role,
    /// Its current term.
    pub term: u64,
    /// The leader it knows of.
    pub leader: Option<NodeId>,
    /// The highest committed index it knows.
    pub commit: u64,
    /// The highest index its state machine applied.
    pub applied: u64,
    /// The last index in its log.
    pub last_index: u64,
    /// The plugin it runs.
    pub plugin: PluginInfo,
    /// Set when the node stopped on an unrecoverable failure.
    pub fatal: Option<String>,
    /// The index of the entry that deployed the running plugin (0: the
    /// plugin the node was started with).
    pub deployed_at: u64,
    /// This node's latest keyspace hash.
    pub hash_check: Option<HashCheck>,
    /// Keyspace hashes taken so far.
    pub hash_checks: u64,
    /// Set when this node's keyspace hash differed from the leader's.
    pub divergence: Option<String>,
    /// How many times it differed.
    pub divergences: u64,
    /// The cluster's members as this node knows them (the latest
    /// configuration in its log).
    pub membership: Membership,
    /// Set once this node learned it was removed from the cluster.
    pub removed: bool,
    /// Client requests (proposals and reads) in flight on this node.
    pub pending_requests: u64,
    /// ReadIndex rounds the Raft loop is waiting on.
    pub pending_read_rounds: u64,
    /// Requests refused as `busy` since start (a full queue, apply lag).
    pub busy_refusals: u64,
    /// Peer messages dropped since start because the Raft loop's inbox
    /// held [`NodeConfig::max_peer_inbox_bytes`](crate::NodeConfig::max_peer_inbox_bytes) already.
    pub peer_inbox_dropped: u64,
}

impl NodeStatus {
    /// Committed entries not applied yet.
    pub(crate) fn apply_lag(&self) -> u64 {
        self.commit.saturating_sub(self.applied)
    }

    /// Records an unrecoverable failure; the first cause wins. A fatal node
    /// neither leads nor follows anyone.
    pub(crate) fn set_fatal(&mut self, cause: String) {
        self.fatal.get_or_insert(cause);
        self.role = Role::Follower;
        self.leader = None;
    }

    /// Replaces the cause `generic`, if it is the recorded one, with
    /// `detailed`.
    pub(super) fn refine_fatal(&mut self, generic: &str, detailed: String) {
        if self.fatal.as_deref() == Some(generic) {
            self.fatal = Some(detailed);
        } else {
            self.set_fatal(detailed);
        }
    }
}

/// Held by a worker for its whole run: if the worker unwinds from a panic,
/// the node is marked fatal before the worker's channels close, so that a
/// client waiting on one sees "fatal", not a mere "stopped". (Locals drop
/// before the worker itself.)
pub(crate) struct FatalOnPanic {
    status: Arc<Mutex<NodeStatus>>,
    what: &'static str,
}

impl FatalOnPanic {
    pub(crate) fn new(status: Arc<Mutex<NodeStatus>>, what: &'static str) -> Self {
        Self { status, what }
    }

    pub(super) fn cause(what: &str) -> String {
        format!("the {what} thread panicked")
    }
}

impl Drop for FatalOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.status.lock().set_fatal(Self::cause(self.what));
        }
    }
}
