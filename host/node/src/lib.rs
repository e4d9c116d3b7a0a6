//! A Wasmraft node: drives the Raft core, persists through RocksDB and
//! applies committed entries through a WebAssembly state machine.
//!
//! ```text
//! callers ──► Node (handle) ──mpsc──► raft thread: RawNode, batching, Ready handling
//!                                      │ append + fsync (group commit), send messages
//!                                      ▼
//!                                     apply thread: plugin apply, writes + applied index
//!                                      │ in one RocksDB batch, answer proposals, events
//! queries ──► read index / lease ──► wait applied ──► QueryPool on the blocking pool
//! ```
//!
//! Start a node with [`Node::start`]; propose with [`Node::propose`]; read
//! with [`Node::query`] at a [`Consistency`]; watch with [`Node::subscribe`].
#![deny(missing_docs)]

mod apply;
mod apply_port;
mod apply_tick;
mod boot_clock;
mod config;
mod deploy;
mod divergence;
mod envelope;
mod error;
mod forwarding;
mod kv_plugin;
mod lease_share;
mod local_cluster;
mod log_writer;
mod loop_ready;
mod loop_queue;
mod loop_upkeep;
mod metrics;
mod node;
mod peer_inbox;
mod progress;
mod proposing;
mod raft_loop;
mod retries;
mod sessions;
#[cfg(test)]
mod simulation;
mod state_machine;
mod system;
mod timers;
mod transport;

pub use config::{
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_SNAPSHOT_BYTES, NodeConfig, STORE_HEADROOM_BYTES, derive_cluster_id,
};
pub use deploy::MAX_PLUGIN_BYTES;
pub use divergence::HashCheck;
pub use envelope::Envelope;
pub use error::{Error, StartError};
pub use kv_plugin::KV_PLUGIN;
pub use local_cluster::LocalCluster;
pub use metrics::{BATCH_BUCKETS, Histogram, LATENCY_BUCKETS, NodeMetrics, OUTCOMES, PeerMetrics, RequestKind};
pub use node::{Applied, Consistency, Members, Node, NodeStatus, Worker, format_cluster_id};
pub use state_machine::{QueryHandler, StateMachine};
pub use transport::{MessageSink, NoPeers, SnapshotDone, SnapshotLoader, Transport};
pub use wasmraft_raft::{Membership, NodeId, Role};
pub use wasmraft_runtime::{CONTRACT_V1, CONTRACT_V2, EntryEvent, PluginConfig, PluginInfo};
pub use wasmraft_storage::DeployedPlugin;
pub use wasmraft_storage::{SNAPSHOT_PART_BYTES, SnapshotPart, SnapshotReader, SnapshotStaging, StagedSnapshot, StorageError};
