//! `etcdserverpb.Cluster` (MemberList) and `etcdserverpb.Maintenance`
//! (Alarm, Status, HashKV): what `etcdctl member list`, `endpoint status`,
//! `endpoint health` and `endpoint hashkv` ask.

use tonic::{Request, Response, Status};
use wasmraft_node::Node;
use wasmraft_proto::etcdserverpb::alarm_request::AlarmAction;
use wasmraft_proto::etcdserverpb::cluster_server::Cluster;
use wasmraft_proto::etcdserverpb::maintenance_server::Maintenance;
use wasmraft_proto::etcdserverpb::{
    AlarmRequest, AlarmResponse, HashKvRequest, HashKvResponse, Member, MemberListRequest, MemberListResponse, ResponseHeader, StatusRequest,
    StatusResponse,
};

use wasmraft_proto::kvplugin::HashRequest;
use wasmraft_proto::kvplugin::request::Request as KvRequest;
use wasmraft_proto::kvplugin::response::Response as KvResponse;

use super::{current_revision, header, plugin_query, require_kv};
use crate::forward::Forwarder;

/// The etcd API level these services answer as: what `Status.version`
/// reports, so that clients that check it find the features they use.
pub const ETCD_API_VERSION: &str = "3.6.0";

/// The `etcdserverpb.Cluster` and `etcdserverpb.Maintenance` services of
/// one node.
#[derive(Clone, Debug)]
pub struct EtcdMaintenance {
    node: Node,
    forwarder: Forwarder,
}

impl EtcdMaintenance {
    /// Serves `node`; member addresses come from `forwarder`.
    pub fn new(node: Node, forwarder: Forwarder) -> Self {
        Self { node, forwarder }
    }

    fn url(&self, address: Option<String>) -> Vec<String> {
        address.map(|a| crate::tls::uri(&a, self.forwarder.uses_tls())).into_iter().collect()
    }
}

#[tonic::async_trait]
impl Cluster for EtcdMaintenance {
    /// Voters and learners of the latest configuration this node knows
    /// (etcd's `linearizable` flag is not honoured yet: the list is this
    /// node's view).
    async fn member_list(&self, _request: Request<MemberListRequest>) -> Result<Response<MemberListResponse>, Status> {
        require_kv(&self.node)?;
        let membership = self.node.status().membership;
        let voters = membership.voters.iter().chain(&membership.voters_outgoing).map(|id| (id.0, false));
        let learners = membership.learners.iter().map(|id| (id.0, true));
        let mut members: Vec<Member> = voters
            .chain(learners)
            .map(|(id, is_learner)| Member {
                id,
                name: format!("node-{id}"),
                peer_ur_ls: self.url(self.forwarder.peer_address(id)),
                client_ur_ls: self.url(self.forwarder.client_address(id)),
                is_learner,
            })
            .collect();
        members.sort_by_key(|m| m.id);
        members.dedup_by_key(|m| m.id);
        let header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
        Ok(Response::new(MemberListResponse { header, members }))
    }
}

#[tonic::async_trait]
impl Maintenance for EtcdMaintenance {
    /// No alarm is ever raised yet: listing gives none, disarming has
    /// nothing to do, and raising one is refused.
    async fn alarm(&self, request: Request<AlarmRequest>) -> Result<Response<AlarmResponse>, Status> {
        require_kv(&self.node)?;
        match AlarmAction::try_from(request.into_inner().action) {
            Ok(AlarmAction::Get | AlarmAction::Deactivate) => {
                let header = header(&self.node, Some(ResponseHeader { revision: current_revision(&self.node).await?, ..Default::default() }));
                Ok(Response::new(AlarmResponse { header, alarms: Vec::new() }))
            }
            _ => Err(Status::unimplemented("etcdserver: raising alarms is not served")),
        }
    }

    async fn status(&self, _request: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        require_kv(&self.node)?;
        let s = self.node.status();
        let (total, live) = self.node.storage_bytes();
        let errors = s.fatal.iter().chain(&s.divergence).cloned().collect();
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
            db_size_quota: 0,
            downgrade_info: None,
        }))
    }

    /// The KV plugin hashes the keyspace as of the revision in pages of
    /// bounded work; all pages read the same revision, so later writes do
    /// not change the answer, and members that applied it agree.
    async fn hash_kv(&self, request: Request<HashKvRequest>) -> Result<Response<HashKvResponse>, Status> {
        require_kv(&self.node)?;
        let mut page = HashRequest { revision: request.into_inner().revision, ..Default::default() };
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
}
