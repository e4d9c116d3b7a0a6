//! `etcdserverpb.Lease`, over the KV plugin's leases and the node's timers:
//! Grant and Revoke are commands through the log (a follower forwards them
//! to the leader), TimeToLive and Leases linearizable queries, and each
//! keep-alive of the bidirectional stream a renewal (`Node::renew`) that the
//! leader batches into its next tick and answers once that tick applied: no
//! keep-alive costs an entry of its own. See
//! `docs/design/006-timers-and-leases.md` for the guarantee.

use std::pin::Pin;

use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use wasmraft_node::{Consistency, Error, Node};
use wasmraft_proto::etcdserverpb::lease_client::LeaseClient;
use wasmraft_proto::etcdserverpb::lease_server::Lease;
use wasmraft_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseLeasesRequest,
    LeaseLeasesResponse, LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
};
use wasmraft_proto::kvplugin;
use wasmraft_proto::kvplugin::request::Request as KvRequest;
use wasmraft_proto::kvplugin::response::Response as KvResponse;
use wasmraft_proto::v1::RenewRequest;

use super::{etcd_status, header, plugin_read, require_kv};
use crate::forward::{Forwarder, forwarded, is_forwarded};

/// etcd's largest lease TTL, in seconds.
const MAX_TTL_S: i64 = 9_000_000_000;

/// Keep-alives of one stream waiting for their tick at once.
const KEEP_ALIVES_IN_FLIGHT: usize = 4096;

/// The `etcdserverpb.Lease` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdLease {
    node: Node,
    forwarder: Forwarder,
}

type KeepAliveStream = Pin<Box<dyn Stream<Item = Result<LeaseKeepAliveResponse, Status>> + Send>>;

impl EtcdLease {
    /// Serves `node`, forwarding commands through `forwarder`.
    pub fn new(node: Node, forwarder: Forwarder) -> Self {
        Self { node, forwarder }
    }

    /// etcd's minimum TTL: one and a half election timeouts, so that a
    /// lease outlives an election (shorter grants are raised to it).
    fn min_ttl_s(&self) -> i64 {
        let ms = self.node.election_timeout().as_millis() as i64 * 3 / 2;
        ((ms + 999) / 1000).max(1)
    }

    /// Proposes a lease command; `Err(leader)` when a follower should
    /// forward it to that leader.
    async fn command(&self, request: KvRequest, was_forwarded: bool) -> Result<Result<KvResponse, u64>, Status> {
        require_kv(&self.node)?;
        let command = kvplugin::Request { request: Some(request) };
        match self.node.propose(prost::Message::encode_to_vec(&command)).await {
            Ok(answer) => decode(&answer).map(Ok),
            Err(Error::NotLeader { leader: Some(leader) }) if leader.0 != self.node.id() && !was_forwarded => {
                Ok(Err(leader.0))
            }
            Err(e) => Err(etcd_status(e)),
        }
    }

    fn leader_client(&self, leader: u64) -> Result<LeaseClient<tonic::transport::Channel>, Status> {
        let channel = self
            .forwarder
            .channel(leader)
            .ok_or_else(|| etcd_status(Error::NotLeader { leader: Some(wasmraft_node::NodeId(leader)) }))?;
        Ok(LeaseClient::new(channel))
    }
}

fn decode(answer: &[u8]) -> Result<KvResponse, Status> {
    <kvplugin::Response as prost::Message>::decode(answer)
        .ok()
        .and_then(|r| r.response)
        .ok_or_else(|| Status::internal("etcdserver: the KV plugin gave a malformed answer"))
}

fn unexpected() -> Status {
    Status::internal("etcdserver: the KV plugin answered another request")
}

/// Log time as this node sees it, for a TTL left (display only: expiry is
/// decided by ticks, in log time).
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[tonic::async_trait]
impl Lease for EtcdLease {
    type LeaseKeepAliveStream = KeepAliveStream;

    async fn lease_grant(&self, r: Request<LeaseGrantRequest>) -> Result<Response<LeaseGrantResponse>, Status> {
        let was_forwarded = is_forwarded(&r);
        let mut g = r.into_inner();
        if g.ttl > MAX_TTL_S {
            return Err(Status::out_of_range("etcdserver: too large lease TTL"));
        }
        g.ttl = g.ttl.max(self.min_ttl_s());
        match self.command(KvRequest::RequestLeaseGrant(g.clone()), was_forwarded).await? {
            Ok(KvResponse::ResponseLeaseGrant(mut resp)) => {
                resp.header = header(&self.node, resp.header);
                Ok(Response::new(resp))
            }
            Ok(_) => Err(unexpected()),
            Err(leader) => self.leader_client(leader)?.lease_grant(forwarded(g)).await,
        }
    }

    async fn lease_revoke(&self, r: Request<LeaseRevokeRequest>) -> Result<Response<LeaseRevokeResponse>, Status> {
        let was_forwarded = is_forwarded(&r);
        let v = r.into_inner();
        match self.command(KvRequest::RequestLeaseRevoke(v.clone()), was_forwarded).await? {
            Ok(KvResponse::ResponseLeaseRevoke(mut resp)) => {
                resp.header = header(&self.node, resp.header);
                Ok(Response::new(resp))
            }
            Ok(_) => Err(unexpected()),
            Err(leader) => self.leader_client(leader)?.lease_revoke(forwarded(v)).await,
        }
    }

    async fn lease_keep_alive(
        &self,
        r: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Result<Response<KeepAliveStream>, Status> {
        require_kv(&self.node)?;
        let mut inbound = r.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let (node, forwarder) = (self.node.clone(), self.forwarder.clone());
        tokio::spawn(async move {
            // Keep-alives wait for the leader's next tick: many at once, each
            // answered when its tick applied (clients match answers by id).
            let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(KEEP_ALIVES_IN_FLIGHT));
            while let Ok(Some(request)) = inbound.message().await {
                let Ok(permit) = in_flight.clone().acquire_owned().await else { break };
                let (node, forwarder, tx) = (node.clone(), forwarder.clone(), tx.clone());
                tokio::spawn(async move {
                    let answer = keep_alive(&node, &forwarder, request.id).await;
                    let _ = tx.send(answer).await;
                    drop(permit);
                });
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn lease_time_to_live(
        &self,
        r: Request<LeaseTimeToLiveRequest>,
    ) -> Result<Response<LeaseTimeToLiveResponse>, Status> {
        require_kv(&self.node)?;
        let query = kvplugin::LeaseTimeToLiveQuery { request: Some(r.into_inner()), now_ms: now_ms() };
        match plugin_read(&self.node, KvRequest::RequestLeaseTimeToLive(query), Consistency::Linearizable).await? {
            KvResponse::ResponseLeaseTimeToLive(mut resp) => {
                resp.header = header(&self.node, resp.header);
                Ok(Response::new(resp))
            }
            _ => Err(unexpected()),
        }
    }

    async fn lease_leases(&self, _: Request<LeaseLeasesRequest>) -> Result<Response<LeaseLeasesResponse>, Status> {
        require_kv(&self.node)?;
        match plugin_read(&self.node, KvRequest::RequestLeaseLeases(LeaseLeasesRequest {}), Consistency::Linearizable)
            .await?
        {
            KvResponse::ResponseLeaseLeases(mut resp) => {
                resp.header = header(&self.node, resp.header);
                Ok(Response::new(resp))
            }
            _ => Err(unexpected()),
        }
    }
}

/// One keep-alive: renewed through the leader's next tick. A lease that
/// does not exist (or expired) gets TTL 0, as etcd answers.
async fn keep_alive(node: &Node, forwarder: &Forwarder, id: i64) -> Result<LeaseKeepAliveResponse, Status> {
    let key = id.to_be_bytes().to_vec();
    let answer = match node.renew(key.clone()).await {
        Ok(applied) => Ok(applied.response),
        Err(Error::NotLeader { leader: Some(leader) }) if leader.0 != node.id() => {
            let channel = forwarder
                .channel(leader.0)
                .ok_or_else(|| etcd_status(Error::NotLeader { leader: Some(leader) }))?;
            let mut client = wasmraft_proto::v1::client_client::ClientClient::new(channel);
            match client.renew(forwarded(RenewRequest { key })).await {
                Ok(r) => Ok(r.into_inner().result),
                Err(s) if s.message().contains("lease not found") => Err(Error::Rejected(s.message().to_string())),
                Err(s) => return Err(s),
            }
        }
        Err(e) => Err(e),
    };
    let ttl = match answer {
        Ok(bytes) => <[u8; 8]>::try_from(bytes.as_slice()).map(i64::from_be_bytes).unwrap_or(0),
        Err(Error::Rejected(m)) if m.contains("lease not found") => 0,
        Err(e) => return Err(etcd_status(e)),
    };
    Ok(LeaseKeepAliveResponse { header: header(node, None), id, ttl })
}
