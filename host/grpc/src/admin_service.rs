use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use wasmraft_node::Node;
use wasmraft_proto::v1::admin_client::AdminClient;
use wasmraft_proto::v1::admin_server::Admin;
use wasmraft_proto::v1::membership_changes_client::MembershipChangesClient;
use wasmraft_proto::v1::membership_changes_server::MembershipChanges;
use wasmraft_proto::v1::{
    AddLearnerRequest, CutOffRequest, CutOffResponse, InjectDivergentWriteRequest,
    InjectDivergentWriteResponse, InjectFaultRequest, InjectFaultResponse, Member, MemberRequest, MembersRequest, MembersResponse,
    MembershipResponse, TransferLeaderRequest, TransferLeaderResponse,
};

use crate::faults::Faults;
use crate::forward::Forwarder;

use crate::status::to_status;

/// The `wasmraft.v1.Admin` and `wasmraft.v1.MembershipChanges` services of one node.
#[derive(Clone, Debug)]
pub struct AdminService {
    node: Node,
    /// Member addresses: configured and learned from the log.
    addresses: Forwarder,
    faults: Faults,
}

impl AdminService {
    /// Serves `node`; `addresses` resolves member ids to addresses.
    pub fn new(node: Node, addresses: Forwarder, faults: Faults) -> Self {
        Self {
            node,
            addresses,
            faults,
        }
    }

    /// The leader's membership client, when this node is not the leader
    /// and admin requests may be forwarded.
    fn leader(&self, e: &wasmraft_node::Error, forwarded: bool) -> Option<MembershipChangesClient<Channel>> {
        self.addresses
            .admin_leader(e, forwarded)
            .map(MembershipChangesClient::new)
    }
}

#[tonic::async_trait]
impl MembershipChanges for AdminService {
    async fn add_learner(
        &self,
        r: Request<AddLearnerRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.addresses.admins().require(&r, "a membership change")?;
        let forwarded = crate::forward::is_forwarded(&r);
        let r = r.into_inner();
        if r.id == 0 || r.address.is_empty() {
            return Err(Status::invalid_argument(
                "a learner needs a non-zero id and an address",
            ));
        }
        if let Err(why) = crate::check_peer_address(&r.address) {
            return Err(Status::invalid_argument(format!(
                "peer address {:?}: expected HOST:PORT, such as 127.0.0.1:7482: {why}",
                r.address
            )));
        }
        match self.node.add_learner(r.id, &r.address).await {
            Ok(()) => Ok(Response::new(MembershipResponse {})),
            Err(e) => match self.leader(&e, forwarded) {
                Some(mut client) => client.add_learner(crate::forward::forwarded(r)).await,
                None => Err(to_status(e)),
            },
        }
    }

    async fn promote(
        &self,
        r: Request<MemberRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.addresses.admins().require(&r, "a membership change")?;
        let forwarded = crate::forward::is_forwarded(&r);
        let r = r.into_inner();
        match self.node.promote(r.id).await {
            Ok(()) => Ok(Response::new(MembershipResponse {})),
            Err(e) => match self.leader(&e, forwarded) {
                Some(mut client) => client.promote(crate::forward::forwarded(r)).await,
                None => Err(to_status(e)),
            },
        }
    }

    async fn remove(
        &self,
        r: Request<MemberRequest>,
    ) -> Result<Response<MembershipResponse>, Status> {
        self.addresses.admins().require(&r, "a membership change")?;
        let forwarded = crate::forward::is_forwarded(&r);
        let r = r.into_inner();
        match self.node.remove_member(r.id).await {
            Ok(()) => Ok(Response::new(MembershipResponse {})),
            Err(e) => match self.leader(&e, forwarded) {
                Some(mut client) => client.remove(crate::forward::forwarded(r)).await,
                None => Err(to_status(e)),
            },
        }
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn cut_off(&self, r: Request<CutOffRequest>) -> Result<Response<CutOffResponse>, Status> {
        self.addresses.admins().require(&r, "fault injection")?;
        let peers = r.into_inner().peers;
        tracing::warn!(?peers, "fault injection: cutting this node off from peers");
        self.faults
            .cut_off(peers)
            .map_err(Status::failed_precondition)?;
        Ok(Response::new(CutOffResponse {}))
    }

    async fn inject_divergent_write(
        &self,
        r: Request<InjectDivergentWriteRequest>,
    ) -> Result<Response<InjectDivergentWriteResponse>, Status> {
        self.addresses.admins().require(&r, "fault injection")?;
        let r = r.into_inner();
        self.faults
            .check_enabled()
            .map_err(Status::failed_precondition)?;
        tracing::warn!(key = ?String::from_utf8_lossy(&r.key), "fault injection: writing the keyspace behind Raft's back");
        self.node
            .inject_divergent_write(&r.key, &r.value)
            .map_err(to_status)?;
        Ok(Response::new(InjectDivergentWriteResponse {}))
    }

    async fn inject_fault(
        &self,
        r: Request<InjectFaultRequest>,
    ) -> Result<Response<InjectFaultResponse>, Status> {
        self.addresses.admins().require(&r, "fault injection")?;
        self.faults.check_enabled().map_err(Status::failed_precondition)?;
        let worker = match r.into_inner().worker.as_str() {
            "raft" => wasmraft_node::Worker::Raft,
            "apply" => wasmraft_node::Worker::Apply,
            other => {
                return Err(Status::invalid_argument(format!("unknown worker {other:?} (raft or apply)")));
            }
        };
        self.node.inject_fault(worker).map_err(to_status)?;
        Ok(Response::new(InjectFaultResponse {}))
    }

    async fn members(
        &self,
        r: Request<MembersRequest>,
    ) -> Result<Response<MembersResponse>, Status> {
        let m = self.node.members().await.map_err(to_status)?;
        // Only the leader knows each member's progress: ask it, if it is
        // another node this one can reach.
        // Forwarded once at most: two nodes that each think the other leads
        // must not bounce the request between them.
        let forwarded = crate::forward::is_forwarded(&r);
        if let Some(leader) = m.leader.filter(|l| l.0 != self.node.id() && !forwarded) {
            if let Some(channel) = self.addresses.channel(leader.0) {
                let mut client = AdminClient::new(channel);
                let request = crate::forward::forwarded(r.into_inner());
                let asked = tokio::time::timeout(
                    std::time::Duration::from_secs(2),
                    client.members(request),
                )
                .await;
                if let Ok(Ok(answer)) = asked {
                    return Ok(answer);
                }
            }
        }
        let member = |id: &wasmraft_raft::NodeId, role: &str| Member {
            id: id.0,
            role: role.to_string(),
            address: self.addresses.peer_address(id.0).unwrap_or_default(),
            matched: m.matched.get(id).copied().unwrap_or_default(),
            client_address: self.addresses.client_address(id.0).unwrap_or_default(),
        };
        let mut members: Vec<Member> = m
            .membership
            .voters
            .iter()
            .map(|id| member(id, "voter"))
            .collect();
        members.extend(
            m.membership
                .voters_outgoing
                .iter()
                .filter(|id| !m.membership.voters.contains(id))
                .map(|id| member(id, "outgoing-voter")),
        );
        members.extend(m.membership.learners.iter().map(|id| member(id, "learner")));
        Ok(Response::new(MembersResponse {
            members,
            leader_id: m.leader.map_or(0, |l| l.0),
            removed: self.node.removed_members(),
        }))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderResponse>, Status> {
        self.addresses
            .admins()
            .require(&request, "a leader transfer")?;
        let forwarded = crate::forward::is_forwarded(&request);
        let to = request.into_inner().to;
        match self.node.transfer_leader(to).await {
            Ok(()) => Ok(Response::new(TransferLeaderResponse {})),
            Err(e) => match self.addresses.admin_leader(&e, forwarded) {
                Some(channel) => {
                    AdminClient::new(channel)
                        .transfer_leader(crate::forward::forwarded(TransferLeaderRequest { to }))
                        .await
                }
                None => Err(to_status(e)),
            },
        }
    }
}
