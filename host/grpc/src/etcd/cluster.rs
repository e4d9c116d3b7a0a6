//! `etcdserverpb.Cluster`: etcd's membership calls over Wasmraft's
//! membership. A member added through etcd's API gets a fresh id (as etcd
//! gives one) and its peer address through the log; a voter is added as a
//! learner and promoted at once. Changes are admin operations, served by
//! the leader: a follower forwards them, as `wasmraft member` does.

use std::hash::BuildHasher;

use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use wasmraft_node::{Consistency, Error, Node};
use wasmraft_proto::etcdserverpb::cluster_client::ClusterClient;
use wasmraft_proto::etcdserverpb::cluster_server::Cluster;
use wasmraft_proto::etcdserverpb::{
    Member, MemberAddRequest, MemberAddResponse, MemberListRequest, MemberListResponse, MemberPromoteRequest,
    MemberPromoteResponse, MemberRemoveRequest, MemberRemoveResponse, MemberUpdateRequest, MemberUpdateResponse,
    ResponseHeader,
};

use super::{current_revision, etcd_status, header, require_kv, revision_at};
use crate::forward::{Forwarder, forwarded, is_forwarded};

/// etcd promotes a learner only once it holds this share of the leader's
/// committed log (etcd's `readyPercentThreshold`).
const PROMOTE_READY: f64 = 0.9;

/// The `etcdserverpb.Cluster` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdCluster {
    node: Node,
    forwarder: Forwarder,
}

impl EtcdCluster {
    /// Serves `node`; member addresses come from `forwarder`, and changes
    /// a follower cannot make go to the leader through it.
    pub fn new(node: Node, forwarder: Forwarder) -> Self {
        Self { node, forwarder }
    }

    fn url(&self, address: Option<String>) -> Vec<String> {
        address.map(|a| crate::tls::uri(&a, self.forwarder.uses_tls())).into_iter().collect()
    }

    /// Voters and learners of the latest configuration this node knows.
    fn members(&self) -> Vec<Member> {
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
        members
    }

    fn member(&self, id: u64) -> Option<Member> {
        self.members().into_iter().find(|m| m.id == id)
    }

    /// Member `id`, as of every change committed before this call: a
    /// member just added through another node may not be in this node's
    /// view yet, so a miss is checked again after a linearizable read.
    async fn known_member(&self, id: u64) -> Result<Option<Member>, Status> {
        if let Some(m) = self.member(id) {
            return Ok(Some(m));
        }
        revision_at(&self.node, Consistency::Linearizable).await?;
        Ok(self.member(id))
    }

    async fn header(&self) -> Result<Option<ResponseHeader>, Status> {
        let revision = current_revision(&self.node).await?;
        Ok(header(&self.node, Some(ResponseHeader { revision, ..Default::default() })))
    }

    /// The leader's Cluster service, for a change this node could not
    /// make because it does not lead (never for a forwarded call).
    fn leader(&self, e: &Error, was_forwarded: bool) -> Option<ClusterClient<Channel>> {
        self.forwarder.admin_leader(e, was_forwarded).map(ClusterClient::new)
    }

    /// An id no member has or had: random, as etcd's are, below 2^53 so
    /// that it survives JSON numbers and TOML integers alike.
    fn fresh_id(&self) -> u64 {
        let state = std::collections::hash_map::RandomState::new();
        let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        loop {
            let id = state.hash_one(seed) & ((1 << 53) - 1);
            if id != 0 && !self.node.is_member(id) && !self.node.was_removed(id) {
                return id;
            }
            seed += 1;
        }
    }
}

/// The `host:port` of an etcd peer URL (`http://host:port`).
fn peer_address(url: &str) -> Result<String, Status> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).unwrap_or(url);
    let address = rest.trim_end_matches('/');
    match address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(address.to_string()),
        _ => Err(Status::invalid_argument(format!(
            "etcdserver: peer URL {url:?} is not of the form http://HOST:PORT"
        ))),
    }
}

fn not_found() -> Status {
    Status::not_found("etcdserver: member not found")
}

#[tonic::async_trait]
impl Cluster for EtcdCluster {
    async fn member_add(&self, request: Request<MemberAddRequest>) -> Result<Response<MemberAddResponse>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a membership change")?;
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        let [url] = r.peer_ur_ls.as_slice() else {
            return Err(Status::invalid_argument("etcdserver: a new member needs exactly one peer URL"));
        };
        let address = peer_address(url)?;
        let taken = self.members().iter().any(|m| m.peer_ur_ls.iter().any(|u| peer_address(u).ok().as_ref() == Some(&address)));
        if taken {
            return Err(Status::failed_precondition("etcdserver: Peer URLs already exists"));
        }
        let id = self.fresh_id();
        if let Err(e) = self.node.add_learner(id, &address).await {
            return match self.leader(&e, was_forwarded) {
                Some(mut leader) => leader.member_add(forwarded(r)).await,
                None => Err(etcd_status(e)),
            };
        }
        if !r.is_learner {
            self.node.promote(id).await.map_err(etcd_status)?;
        }
        tracing::info!(id, address = %address, learner = r.is_learner, "member added through etcd's API");
        let member = Member { id, name: String::new(), peer_ur_ls: vec![url.clone()], client_ur_ls: Vec::new(), is_learner: r.is_learner };
        // The change is applied, but this node's view of the configuration
        // (from its Raft loop) may lag it by a moment: the answer lists the
        // new member either way, as etcd's does.
        let mut members = self.members();
        if !members.iter().any(|m| m.id == id) {
            members.push(member.clone());
        }
        Ok(Response::new(MemberAddResponse { header: self.header().await?, member: Some(member), members }))
    }

    async fn member_remove(&self, request: Request<MemberRemoveRequest>) -> Result<Response<MemberRemoveResponse>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a membership change")?;
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        if self.known_member(r.id).await?.is_none() {
            return Err(not_found());
        }
        if let Err(e) = self.node.remove_member(r.id).await {
            return match self.leader(&e, was_forwarded) {
                Some(mut leader) => leader.member_remove(forwarded(r)).await,
                None => Err(etcd_status(e)),
            };
        }
        tracing::info!(id = r.id, "member removed through etcd's API");
        let mut members = self.members();
        members.retain(|m| m.id != r.id);
        Ok(Response::new(MemberRemoveResponse { header: self.header().await?, members }))
    }

    async fn member_update(&self, request: Request<MemberUpdateRequest>) -> Result<Response<MemberUpdateResponse>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a membership change")?;
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        if self.known_member(r.id).await?.is_none() {
            return Err(not_found());
        }
        let [url] = r.peer_ur_ls.as_slice() else {
            return Err(Status::invalid_argument("etcdserver: a member needs exactly one peer URL"));
        };
        let address = peer_address(url)?;
        if let Err(e) = self.node.set_address(r.id, &address).await {
            return match self.leader(&e, was_forwarded) {
                Some(mut leader) => leader.member_update(forwarded(r)).await,
                None => Err(etcd_status(e)),
            };
        }
        tracing::info!(id = r.id, address = %address, "member address updated through etcd's API");
        Ok(Response::new(MemberUpdateResponse { header: self.header().await?, members: self.members() }))
    }

    /// Voters and learners of the latest configuration this node knows;
    /// with etcd's `linearizable`, after a ReadIndex round, so that the list
    /// holds every membership change committed before the call.
    async fn member_list(&self, request: Request<MemberListRequest>) -> Result<Response<MemberListResponse>, Status> {
        require_kv(&self.node)?;
        let consistency = if request.get_ref().linearizable { Consistency::Linearizable } else { Consistency::Eventual };
        let revision = revision_at(&self.node, consistency).await?;
        let header = header(&self.node, Some(ResponseHeader { revision, ..Default::default() }));
        Ok(Response::new(MemberListResponse { header, members: self.members() }))
    }

    async fn member_promote(&self, request: Request<MemberPromoteRequest>) -> Result<Response<MemberPromoteResponse>, Status> {
        require_kv(&self.node)?;
        self.forwarder.admins().require(&request, "a membership change")?;
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        match self.known_member(r.id).await? {
            None => return Err(not_found()),
            Some(m) if !m.is_learner => {
                return Err(Status::failed_precondition("etcdserver: can only promote a learner member"));
            }
            Some(_) => {}
        }
        // Only the leader knows how far the learner is: elsewhere this
        // asks the leader.
        let members = self.node.members().await.map_err(etcd_status)?;
        if members.leader.map(|l| l.0) != Some(self.node.id()) {
            let e = Error::NotLeader { leader: members.leader };
            return match self.leader(&e, was_forwarded) {
                Some(mut leader) => leader.member_promote(forwarded(r)).await,
                None => Err(etcd_status(e)),
            };
        }
        let commit = self.node.status().commit;
        let matched = members.matched.iter().find(|(id, _)| id.0 == r.id).map_or(0, |(_, m)| *m);
        if (matched as f64) < commit as f64 * PROMOTE_READY {
            return Err(Status::failed_precondition(
                "etcdserver: can only promote a learner member which is in sync with leader",
            ));
        }
        self.node.promote(r.id).await.map_err(etcd_status)?;
        tracing::info!(id = r.id, "learner promoted through etcd's API");
        Ok(Response::new(MemberPromoteResponse { header: self.header().await?, members: self.members() }))
    }
}

#[cfg(test)]
mod tests {
    use super::peer_address;

    #[test]
    fn peer_urls_give_their_address_or_a_clear_error() {
        assert_eq!(peer_address("http://127.0.0.1:7482").unwrap(), "127.0.0.1:7482");
        assert_eq!(peer_address("https://node-4.example:2380/").unwrap(), "node-4.example:2380");
        assert_eq!(peer_address("127.0.0.1:7482").unwrap(), "127.0.0.1:7482");
        for bad in ["http://127.0.0.1", "http://:80", "http://host:port", ""] {
            assert!(peer_address(bad).unwrap_err().message().contains("http://HOST:PORT"), "{bad}");
        }
    }
}
