use wasmraft_raft::NodeId;

/// Why a request failed. A caller matches on it; it never needs to parse
/// a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// This node cannot serve the request; try the leader.
    #[error("not the leader (leader: {})", leader.map(|l| l.to_string()).unwrap_or_else(|| "unknown".into()))]
    NotLeader {
        /// The leader this node knows of.
        leader: Option<NodeId>,
    },
    /// The request is malformed; nothing changed.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The state machine refused the command or query by its rules; nothing changed.
    #[error("rejected: {0}")]
    Rejected(String),
    /// The plugin trapped on this command (a panic, out of fuel, a limit);
    /// nothing changed, on every replica.
    #[error("plugin trapped: {0}")]
    PluginTrap(String),
    /// The proposal was replaced by another leader's entry before it
    /// committed: it did not apply. Safe to retry.
    #[error("proposal dropped by a leader change; it did not apply")]
    ProposalDropped,
    /// The node has too much work queued to take this request; nothing
    /// changed. Safe to retry after a pause.
    #[error("busy: {0}")]
    Busy(String),
    /// No answer in time. A proposal's outcome is then unknown.
    #[error("timed out")]
    Timeout,
    /// The node is shutting down.
    #[error("node stopped")]
    Stopped,
    /// This node was removed from the cluster; it serves nothing any more.
    #[error("this node was removed from the cluster; send requests to its members")]
    Removed,
    /// The node hit a failure it cannot recover from (storage I/O, a
    /// nondeterministic plugin failure) and stopped applying.
    #[error("fatal: {0}")]
    Fatal(String),
}

impl From<wasmraft_runtime::EntryError> for Error {
    fn from(e: wasmraft_runtime::EntryError) -> Self {
        use wasmraft_runtime::EntryError as E;
        match e {
            E::Invalid(m) => Error::Invalid(m),
            E::Rejected(m) => Error::Rejected(m),
            E::Trap(m) => Error::PluginTrap(m),
        }
    }
}

impl From<wasmraft_runtime::QueryError> for Error {
    fn from(e: wasmraft_runtime::QueryError) -> Self {
        use wasmraft_runtime::QueryError as E;
        match e {
            E::Invalid(m) => Error::Invalid(m),
            E::Rejected(m) => Error::Rejected(m),
            E::Trap(m) => Error::PluginTrap(m),
            E::Fatal(f) => Error::Fatal(f.0),
        }
    }
}

/// The node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The configuration is inconsistent.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The data directory could not be opened or read.
    #[error(transparent)]
    Storage(#[from] wasmraft_storage::StorageError),
    /// The plugin could not be loaded.
    #[error(transparent)]
    Plugin(#[from] wasmraft_runtime::PluginError),
    /// The Raft core refused its configuration or state.
    #[error("raft: {0}")]
    Raft(String),
    /// Replaying the log after a restart failed.
    #[error("recovery: {0}")]
    Recovery(String),
}
