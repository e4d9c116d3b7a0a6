//! etcd's v3 API over the KV plugin: `etcdserverpb.KV`, `Watch`, `Lease`,
//! `Cluster` (MemberList) and `Maintenance` (Alarm, Status), and the
//! `v3lockpb.Lock` and `v3electionpb.Election` services, on the client port,
//! so that etcdctl, etcd's client libraries and its benchmark tool work
//! unmodified. The KV plugin already speaks etcd's messages (a command is a
//! `RequestOp`, an answer a `ResponseOp`), so this is a thin adapter: it
//! picks propose or query, fills the response header, and answers errors
//! with etcd's gRPC codes and texts, which clients' retry and failover
//! logic depend on.

mod alarm;
mod cluster;
pub(crate) mod compactor;
mod concurrency;
mod kv;
mod lease;
mod maintenance;
mod watch;

pub use alarm::SpaceQuota;
pub(crate) use alarm::{is_alarm_change, watch_quota};
pub use cluster::EtcdCluster;
pub use compactor::{AutoCompaction, parse_duration};
pub use concurrency::{EtcdElection, EtcdLock};
pub use kv::EtcdKv;
pub use lease::EtcdLease;
pub use maintenance::{ETCD_API_VERSION, EtcdMaintenance};
pub use watch::EtcdWatch;

use prost::Message as _;
use tonic::{Code, Status};
use wasmraft_node::{Consistency, Error, Node};
use wasmraft_proto::etcdserverpb::request_op::Request as Op;
use wasmraft_proto::etcdserverpb::response_op::Response as OpResponse;
use wasmraft_proto::etcdserverpb::{RangeRequest, RequestOp, ResponseHeader, ResponseOp};
use wasmraft_proto::kvplugin;
use wasmraft_proto::kvplugin::request::Request as KvRequest;
use wasmraft_proto::kvplugin::response::Response as KvResponse;

/// How a node serves etcd's API: what `[etcd]` in its configuration sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// How much of the KV plugin's history to keep (`None`: all, until a
    /// client compacts).
    pub auto_compaction: Option<AutoCompaction>,
    /// How often a watcher that asked for progress notifications gets one
    /// when it has nothing else to receive (etcd: 10 minutes).
    pub progress_notify_interval: std::time::Duration,
    /// The store size past which this member raises the NOSPACE alarm,
    /// which refuses writes that add data on every member until disarmed
    /// (etcd's `--quota-backend-bytes`).
    pub quota_backend_bytes: u64,
}

impl Default for EtcdSettings {
    fn default() -> Self {
        Self {
            auto_compaction: Some(AutoCompaction::Periodic(std::time::Duration::from_secs(3600))),
            progress_notify_interval: std::time::Duration::from_secs(600),
            quota_backend_bytes: 8 << 30,
        }
    }
}

/// The name the KV plugin reports; the etcd API serves no other plugin.
const KV_PLUGIN_NAME: &str = "wasmraft-kv";

/// Refuses the call unless this node runs the KV plugin.
fn require_kv(node: &Node) -> Result<(), Status> {
    if node.plugin_is(KV_PLUGIN_NAME) {
        Ok(())
    } else {
        let plugin = node.plugin().0.name;
        Err(Status::failed_precondition(format!(
            "etcdserver: the etcd API needs the KV plugin; this cluster runs plugin {plugin:?} (use the wasmraft.v1 API)"
        )))
    }
}

/// The header etcd puts on every answer: the cluster and this member, the
/// revision the plugin reported, and this node's term.
fn header(node: &Node, plugin_header: Option<ResponseHeader>) -> Option<ResponseHeader> {
    let revision = plugin_header.map_or(0, |h| h.revision);
    Some(ResponseHeader {
        cluster_id: node.cluster_id().unwrap_or(0),
        member_id: node.id(),
        revision,
        raft_term: node.term(),
    })
}

/// The KV revision this node has applied, as the plugin reports it in a
/// header (a count of no keys, from this node's own state).
async fn current_revision(node: &Node) -> Result<i64, Status> {
    revision_at(node, Consistency::Eventual).await
}

/// The KV revision as a read at `consistency` sees it: linearizable, after
/// a ReadIndex round, once this node has applied every entry committed
/// before the call.
async fn revision_at(node: &Node, consistency: Consistency) -> Result<i64, Status> {
    let count = RequestOp {
        request: Some(Op::RequestRange(RangeRequest { key: vec![0], count_only: true, ..Default::default() })),
    };
    let answer = node.query(count.encode_to_vec(), consistency).await.map_err(etcd_status)?;
    match ResponseOp::decode(answer.as_slice()).ok().and_then(|r| r.response) {
        Some(OpResponse::ResponseRange(r)) => Ok(r.header.map_or(0, |h| h.revision)),
        _ => Err(Status::internal("etcdserver: the KV plugin gave a malformed answer")),
    }
}

/// Asks the KV plugin one of its own queries (history, hashes) against
/// this node's state.
async fn plugin_query(node: &Node, request: KvRequest) -> Result<KvResponse, Status> {
    plugin_read(node, request, Consistency::Eventual).await
}

/// Asks the KV plugin one of its own queries at `consistency`.
async fn plugin_read(node: &Node, request: KvRequest, consistency: Consistency) -> Result<KvResponse, Status> {
    let query = kvplugin::Request { request: Some(request) };
    let answer = node.query(query.encode_to_vec(), consistency).await.map_err(etcd_status)?;
    kvplugin::Response::decode(answer.as_slice())
        .ok()
        .and_then(|r| r.response)
        .ok_or_else(|| Status::internal("etcdserver: the KV plugin gave a malformed answer"))
}

/// A node error as etcd's server would answer it (`rpctypes` in etcd's
/// API: the code decides whether a client retries or fails over).
fn etcd_status(e: Error) -> Status {
    match e {
        Error::Invalid(m) | Error::Rejected(m) if m.starts_with("etcdserver: ") => {
            let code = if m.contains("revision has been compacted") || m.contains("is a future revision") {
                Code::OutOfRange
            } else if m.contains("lease not found") {
                Code::NotFound
            } else if m.contains("database space exceeded") {
                Code::ResourceExhausted
            } else {
                Code::InvalidArgument
            };
            Status::new(code, m)
        }
        Error::Invalid(m) if m.contains("exceeds max_request_bytes") => {
            // etcd's exact text: clients match on it, so the sizes go to the log.
            tracing::debug!(reason = %m, "etcd API request refused as too large");
            Status::invalid_argument("etcdserver: request is too large")
        }
        Error::Invalid(m) => Status::invalid_argument(format!("etcdserver: {m}")),
        Error::Rejected(m) => Status::failed_precondition(format!("etcdserver: {m}")),
        Error::PluginTrap(m) => Status::internal(format!("etcdserver: the KV plugin trapped: {m}")),
        Error::NotLeader { leader: None } => Status::unavailable("etcdserver: no leader"),
        // A request that lost its leader on the way (a read round or a
        // forwarded write overtaken by an election): etcd's answer for
        // that is "leader changed", which clients retry; its "not leader"
        // (FAILED_PRECONDITION) they do not.
        Error::NotLeader { leader: Some(_) } => Status::unavailable("etcdserver: leader changed"),
        Error::ProposalDropped => {
            Status::unavailable("etcdserver: request timed out, possibly due to previous leader failure")
        }
        Error::Busy(_) => Status::resource_exhausted("etcdserver: too many requests"),
        Error::Timeout => Status::unavailable("etcdserver: request timed out"),
        Error::Stopped | Error::Removed => Status::unavailable("etcdserver: server stopped"),
        Error::Fatal(m) => Status::unavailable(format!("etcdserver: server stopped: {m}")),
    }
}
