use std::pin::Pin;
use tonic::{Request, Response, Status};
use wasmraft_node::{Consistency as NodeConsistency, Node, Role};

use tokio_stream::Stream;
use wasmraft_proto::v1::{
    Consistency, PluginInfo, ProposeRequest, ProposeResponse, QueryRequest, QueryResponse, RenewRequest, RenewResponse,
    StatusRequest, StatusResponse, WatchEvent, WatchRequest, client_server::Client,
};

use crate::forward::Forwarder;
use crate::status::to_status;

/// The `wasmraft.v1.Client` service of one node. A proposal that reaches a
/// follower is forwarded to the leader (once; the leader's answer, error or
/// not, goes back to the client).
#[derive(Clone, Debug)]
pub struct ClientService {
    node: Node,
    forwarder: Forwarder,
}

impl ClientService {
    /// Serves `node`, forwarding through `forwarder`.
    pub fn new(node: Node, forwarder: Forwarder) -> Self {
        Self { node, forwarder }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Follower => "follower",
        Role::PreCandidate => "pre-candidate",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Client for ClientService {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let prefix = request.into_inner().prefix;
        let mut events = self.node.subscribe();
        let stream = async_stream_events(move |tx| async move {
            loop {
                match events.recv().await {
                    Ok(ev) if ev.key.starts_with(&prefix) => {
                        let item = WatchEvent {
                            index: ev.index,
                            key: ev.key.clone(),
                            payload: ev.payload.clone(),
                        };
                        if tx.send(Ok(item)).await.is_err() {
                            return; // the watcher went away
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let mut status =
                            Status::resource_exhausted(format!("watcher fell {n} events behind"));
                        status
                            .metadata_mut()
                            .insert(wasmraft_proto::ERROR_KEY, "lagged".parse().expect("ascii"));
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn propose(
        &self,
        request: Request<ProposeRequest>,
    ) -> Result<Response<ProposeResponse>, Status> {
        // Forwarded once at most: a node that got a forwarded proposal but
        // does not lead (its hint was stale) answers "not the leader"
        // instead of passing it on, so two nodes never bounce it.
        let forwarded = crate::forward::is_forwarded(&request);
        // An etcd alarm change is an admin operation, whichever API carries
        // it (the KV plugin takes it as a command like any other).
        if crate::etcd::is_alarm_change(&request.get_ref().command) {
            self.forwarder.admins().require(&request, "an alarm change")?;
        }
        let r = request.into_inner();
        match self
            .node
            .propose_as(r.command.clone(), r.client_id, r.sequence)
            .await
        {
            Ok(applied) => Ok(Response::new(ProposeResponse {
                result: applied.response,
                index: applied.index,
            })),
            Err(wasmraft_node::Error::NotLeader {
                leader: Some(leader),
            }) if leader.0 != self.node.id() && !forwarded => match self.forwarder.client(leader.0) {
                Some(mut client) => client.propose(crate::forward::forwarded(r)).await,
                None => Err(to_status(wasmraft_node::Error::NotLeader {
                    leader: Some(leader),
                })),
            },
            Err(e) => Err(to_status(e)),
        }
    }

    async fn renew(&self, request: Request<RenewRequest>) -> Result<Response<RenewResponse>, Status> {
        let forwarded = crate::forward::is_forwarded(&request);
        let r = request.into_inner();
        match self.node.renew(r.key.clone()).await {
            Ok(applied) => Ok(Response::new(RenewResponse { result: applied.response, index: applied.index })),
            Err(wasmraft_node::Error::NotLeader { leader: Some(leader) }) if leader.0 != self.node.id() && !forwarded => {
                match self.forwarder.client(leader.0) {
                    Some(mut client) => client.renew(crate::forward::forwarded(r)).await,
                    None => Err(to_status(wasmraft_node::Error::NotLeader { leader: Some(leader) })),
                }
            }
            Err(e) => Err(to_status(e)),
        }
    }

    async fn query(
        &self,
        request: Request<QueryRequest>,
    ) -> Result<Response<QueryResponse>, Status> {
        let r = request.into_inner();
        let consistency = match Consistency::try_from(r.consistency) {
            Ok(Consistency::Linearizable) => NodeConsistency::Linearizable,
            Ok(Consistency::Lease) => NodeConsistency::Lease,
            Ok(Consistency::Eventual) => NodeConsistency::Eventual,
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "unknown consistency {}",
                    r.consistency
                )));
            }
        };
        let result = self
            .node
            .query(r.request, consistency)
            .await
            .map_err(to_status)?;
        Ok(Response::new(QueryResponse { result }))
    }

    async fn status(
        &self,
        _request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let s = self.node.status();
        Ok(Response::new(StatusResponse {
            id: s.id,
            role: role_name(s.role).to_string(),
            term: s.term,
            leader_id: s.leader.map_or(0, |l| l.0),
            commit_index: s.commit,
            applied_index: s.applied,
            last_index: s.last_index,
            plugin: Some(PluginInfo {
                name: s.plugin.name,
                version: s.plugin.version,
                sdk_version: s.plugin.sdk_version,
                sha256: s.plugin.sha256,
            }),
            fatal: s.fatal.unwrap_or_default(),
            plugin_deployed_at: s.deployed_at,
            hash_index: s.hash_check.as_ref().map_or(0, |c| c.index),
            hash_sha256: s
                .hash_check
                .as_ref()
                .map(|c| c.sha256.clone())
                .unwrap_or_default(),
            hash_vs_leader: match s.hash_check.as_ref().and_then(|c| c.matches_leader) {
                Some(true) => "match".into(),
                Some(false) => "mismatch".into(),
                None => String::new(),
            },
            divergence: s.divergence.unwrap_or_default(),
            divergences: s.divergences,
            cluster_id: self
                .node
                .cluster_id()
                .map(wasmraft_node::format_cluster_id)
                .unwrap_or_default(),
            removed: s.removed,
            peer_address: self.forwarder.peer_address(s.id).unwrap_or_default(),
            client_address: self.forwarder.client_address(s.id).unwrap_or_default(),
        }))
    }
}

/// A stream fed by a task that `produce` runs with the sending half.
fn async_stream_events<F, Fut>(produce: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<WatchEvent, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(tracing::Instrument::in_current_span(produce(tx)));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
