use std::collections::BTreeMap;

use tonic::{Request, Response, Status};
use wasmraft_node::Node;
use wasmraft_proto::v1::admin_client::AdminClient;
use wasmraft_proto::v1::admin_server::Admin;
use wasmraft_proto::v1::{Member, MembersRequest, MembersResponse, TransferLeaderRequest, TransferLeaderResponse};

use crate::status::to_status;

/// The `wasmraft.v1.Admin` service of one node.
#[derive(Clone, Debug)]
pub struct AdminService {
    node: Node,
    /// Every member's address, this node's included.
    addresses: BTreeMap<u64, String>,
}

impl AdminService {
    /// Serves `node`; `addresses` maps member ids to their addresses.
    pub fn new(node: Node, addresses: BTreeMap<u64, String>) -> Self {
        Self { node, addresses }
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn members(&self, _r: Request<MembersRequest>) -> Result<Response<MembersResponse>, Status> {
        let m = self.node.members().await.map_err(to_status)?;
        let member = |id: &wasmraft_raft::NodeId, role: &str| Member {
            id: id.0,
            role: role.to_string(),
            address: self.addresses.get(&id.0).cloned().unwrap_or_default(),
            matched: m.matched.get(id).copied().unwrap_or_default(),
        };
        let mut members: Vec<Member> = m.membership.voters.iter().map(|id| member(id, "voter")).collect();
        members.extend(m.membership.voters_outgoing.iter().filter(|id| !m.membership.voters.contains(id)).map(|id| member(id, "outgoing-voter")));
        members.extend(m.membership.learners.iter().map(|id| member(id, "learner")));
        Ok(Response::new(MembersResponse { members, leader_id: m.leader.map_or(0, |l| l.0) }))
    }

    async fn transfer_leader(
        &self,
        request: Request<TransferLeaderRequest>,
    ) -> Result<Response<TransferLeaderResponse>, Status> {
        let to = request.into_inner().to;
        match self.node.transfer_leader(to).await {
            Ok(()) => Ok(Response::new(TransferLeaderResponse {})),
            Err(wasmraft_node::Error::NotLeader { leader: Some(l) }) if l.0 != self.node.id() => {
                let addr = self.addresses.get(&l.0).ok_or_else(|| Status::unavailable("the leader's address is unknown"))?;
                let uri = if addr.contains("://") { addr.clone() } else { format!("http://{addr}") };
                let mut client = AdminClient::connect(uri).await.map_err(|e| Status::unavailable(e.to_string()))?;
                client.transfer_leader(TransferLeaderRequest { to }).await
            }
            Err(e) => Err(to_status(e)),
        }
    }
}
