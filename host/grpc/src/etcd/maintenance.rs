//! `etcdserverpb.Maintenance` (Alarm, Status, Hash, HashKV, Defragment,
//! MoveLeader): what `etcdctl endpoint status`, `endpoint health`,
//! `endpoint hashkv`, `defrag` and `move-leader` ask.

use tonic::{Request, Response, Status};
use wasmraft_node::Node;
use wasmraft_node::Consistency;
use wasmraft_proto::etcdserverpb::alarm_request::AlarmAction;
use wasmraft_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use wasmraft_proto::etcdserverpb::maintenance_server::Maintenance;
use wasmraft_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, DefragmentRequest, DefragmentResponse, HashKvRequest, HashKvResponse, HashRequest, HashResponse,
    MoveLeaderRequest, MoveLeaderResponse, ResponseHeader, SnapshotRequest, SnapshotResponse, StatusRequest,
    StatusResponse,
};

use wasmraft_proto::kvplugin::HashRequest as HashPage;
use wasmraft_proto::kvplugin::request::Request as KvRequest;
use wasmraft_proto::kvplugin::response::Response as KvResponse;

use super::alarm::propose_alarm;
use super::{SpaceQuota, current_revision, etcd_status, header, plugin_query, plugin_read, require_kv};
use crate::forward::Forwarder;

/// The etcd API level these services answer as: what `Status.version`
/// reports, so that clients that check it find the features they use.
pub const ETCD_API_VERSION: &str = "3.6.0";

/// The `etcdserverpb.Maintenance` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdMaintenance {
    node: Node,
    forwarder: Forwarder,
    space: SpaceQuota,
}

impl EtcdMaintenance {
    /// Serves `node`; a leader transfer asked of a follower goes to the
    /// leader through `forwarder`.
    pub fn new(node: Node, forwarder: Forwarder, space: SpaceQuota) -> Self {
        Self { node, forwarder, space }
    }
}

#[tonic::async_trait]
impl Maintenance for EtcdMaintenance {
    type SnapshotStream = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<SnapshotResponse, Status>> + Send>>;

    /// The cluster's alarms, kept by the KV plugin (see `alarm.rs`): a
    /// list is a linearizable read; an activation or a deactivation (what
    /// `etcdctl alarm disarm` sends for each listed alarm) goes through the
    /// log, from any member.
    async fn alarm(&self, request: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        require_kv(&self.node)?;
        let was_forwarded = crate::forward::is_forwarded(&request);
        let answer = match AlarmAction::try_from(request.get_ref().action) {
            Ok(AlarmAction::Get) => {
                match plugin_read(&self.node, KvRequest::RequestAlarm(request.into_inner()), Consistency::Linearizable).await? {
                    KvResponse::ResponseAlarm(answer) => answer,
                    _ => return Err(Status::internal("etcdserver: the KV plugin gave a malformed answer")),
                }
            }
            Ok(_) => {
                self.forwarder.admins().require(&request, "an alarm change")?;
                propose_alarm(&self.node, &self.forwarder, request.into_inner(), was_forwarded).await?
            }
            Err(_) => return Err(Status::invalid_argument("etcdserver: unknown alarm action")),
        };
        let header = header(&self.node, answer.header);
        Ok(Response::new(AlarmResponse { header, alarms: answer.alarms }))
    }

    async fn status(&self, _request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        require_kv(&self.node)?;
        let s = self.node.status();
        let (total, live) = self.node.storage_bytes();
        let mut errors: Vec<String> = s.fatal.iter().chain(&s.divergence).cloned().collect();
        // etcd lists active alarms among a member's errors too.
        let alarms = AlarmRequest { action: AlarmAction::Get as i32, ..Default::default() };
        if let Ok(KvResponse::ResponseAlarm(a)) = plugin_query(&self.node, KvRequest::RequestAlarm(alarms)).await {
            errors.extend(a.alarms.iter().map(|m| format!("memberID:{} alarm:{}", m.member_id, m.alarm().as_str_name())));
        }
        let header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
        Ok(Response::new(StatusResponse {
            header,
            version: ETCD_API_VERSION.to_string(),
            db_size: total as i64,
            leader: s.leader.map_or(0, |l| l.0),
            raft_index: s.commit,
            raft_term: s.term,
            raft_applied_index: s.applied,
            errors,
            db_size_in_use: live as i64,
            is_learner: s.membership.learners.iter().any(|l| l.0 == s.id),
            storage_version: format!("wasmraft-{}", env!("CARGO_PKG_VERSION")),
            db_size_quota: self.space.quota() as i64,
            downgrade_info: None,
        }))
    }

    /// The KV plugin hashes the keyspace as of the revision in pages of
    /// bounded work; all pages read the same revision, so later writes do
    /// not change the answer, and members that applied it agree.
    async fn hash_kv(&self, request: Request<HashKvRequest>) -> Result<Response<HashKvResponse>, Status> {
        require_kv(&self.node)?;
        let mut page = HashPage { revision: request.into_inner().revision, ..Default::default() };
        loop {
            let answer = match plugin_query(&self.node, KvRequest::RequestHash(page.clone())).await? {
                KvResponse::ResponseHash(answer) => answer,
                _ => return Err(Status::internal("etcdserver: the KV plugin answered a hash query with something else")),
            };
            let revision = answer.header.as_ref().map_or(0, |h| h.revision);
            if page.revision <= 0 {
                page.revision = revision;
            }
            if answer.last_key.is_empty() {
                let header = header(&self.node, Some(ResponseHeader { revision, ..Default::default() }));
                return Ok(Response::new(HashKvResponse {
                    header,
                    hash: answer.crc,
                    compact_revision: answer.compact_revision,
                    hash_revision: page.revision,
                }));
            }
            page.after = answer.last_key;
            page.crc = answer.crc;
        }
    }

    /// The first 32 bits of the node's state hash: the plugin's store (for
    /// the KV plugin, current keys, history and revision log) and the
    /// client sessions. Like etcd's, for tests on idle members.
    async fn hash(&self, _request: Request<HashRequest>) -> Result<Response<HashResponse>, Status> {
        require_kv(&self.node)?;
        let digest = self.node.state_hash().await.map_err(etcd_status)?;
        let hash = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        let header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
        Ok(Response::new(HashResponse { header, hash }))
    }

    /// A backup of this member's state as applied now, streamed as the
    /// bytes of a file that `wasmraft snapshot restore` turns into the
    /// data directory of a new cluster (format: the storage crate's
    /// `backup` module). It ends as etcd's does: its size is 32 past a
    /// multiple of 512, the last 32 bytes the SHA-256 of the rest.
    async fn snapshot(&self, request: Request<SnapshotRequest>) -> Result<Response<Self::SnapshotStream>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a backup")?;
        let node = self.node.clone();
        let mut backup = tokio::task::spawn_blocking(move || node.backup())
            .await
            .map_err(|e| Status::internal(format!("etcdserver: backup: {e}")))?
            .map_err(etcd_status)?;
        tracing::info!(index = backup.index().0, "sending a backup (etcd snapshot)");
        // The first message carries the header.
        let mut header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tokio::task::spawn_blocking(move || {
            let mut next = backup.next_chunk();
            loop {
                let chunk = match next {
                    Ok(Some(chunk)) => chunk,
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.blocking_send(Err(Status::internal(format!("etcdserver: backup: {e}"))));
                        return;
                    }
                };
                next = backup.next_chunk();
                // Only the last message knows nothing remains.
                let remaining = if matches!(next, Ok(None)) { 0 } else { 1 };
                let response = SnapshotResponse {
                    header: header.take(),
                    remaining_bytes: remaining,
                    blob: chunk,
                    version: ETCD_API_VERSION.to_string(),
                };
                if tx.blocking_send(Ok(response)).is_err() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    /// Compacts this member's store on disk, as etcd's defragment does
    /// for its database file; the member serves meanwhile.
    async fn defragment(&self, request: Request<DefragmentRequest>) -> Result<Response<DefragmentResponse>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a defragmentation")?;
        let (before, _) = self.node.storage_bytes();
        self.node.compact_storage().await.map_err(etcd_status)?;
        let (after, _) = self.node.storage_bytes();
        tracing::info!(before_bytes = before, after_bytes = after, "storage compacted (etcd defragment)");
        let header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
        Ok(Response::new(DefragmentResponse { header }))
    }

    /// Hands leadership to `target_id`, which must be a voter that has
    /// caught up; asked of a follower, the leader does it.
    async fn move_leader(&self, request: Request<MoveLeaderRequest>) -> Result<Response<MoveLeaderResponse>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a leader transfer")?;
        let was_forwarded = crate::forward::is_forwarded(&request);
        let target = request.into_inner().target_id;
        if !self.node.status().membership.voters.iter().any(|v| v.0 == target) {
            return Err(Status::failed_precondition("etcdserver: bad leader transferee"));
        }
        if let Err(e) = self.node.transfer_leader(target).await {
            return match self.forwarder.admin_leader(&e, was_forwarded) {
                Some(channel) => {
                    MaintenanceClient::new(channel)
                        .move_leader(crate::forward::forwarded(MoveLeaderRequest { target_id: target }))
                        .await
                }
                None => Err(etcd_status(e)),
            };
        }
        // As etcd does: answer once this member follows the new leader, so
        // that whoever asked finds it in office.
        let deadline = tokio::time::Instant::now() + 5 * self.node.election_timeout();
        while self.node.status().leader.map(|l| l.0) != Some(target) {
            if tokio::time::Instant::now() >= deadline {
                return Err(Status::deadline_exceeded("etcdserver: request timed out, leader transfer took too long"));
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        tracing::info!(to = target, "leadership moved through etcd's API");
        let header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
        Ok(Response::new(MoveLeaderResponse { header }))
    }
}
