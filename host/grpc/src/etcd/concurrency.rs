//! etcd's `v3lockpb.Lock` and `v3electionpb.Election` services. As in
//! etcd's server, they are clients of the node's own KV and Lease services
//! running etcd's concurrency recipes (`clientv3/concurrency`), so a lock
//! taken here excludes one taken by `etcdctl lock` or any client library:
//!
//! - A holder's key is `NAME/LEASE` (the lease id in hex), created on its
//!   lease if absent; its create revision is its place in line.
//! - The lock or leadership is held once no key under `NAME/` has a lower
//!   create revision (the holder waits for each such key to be deleted,
//!   checking with linearizable ranges when a change under `NAME/` applies)
//!   and its own key still exists.
//! - Lease 0 grants a lease of etcd's session TTL (60 s) that nobody keeps
//!   alive, as etcd's server does (`Orphan`).
//! - A caller that goes away while it waits has its key deleted.

use std::pin::Pin;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};
use wasmraft_node::Node;
use wasmraft_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use wasmraft_proto::etcdserverpb::kv_server::Kv;
use wasmraft_proto::etcdserverpb::lease_server::Lease;
use wasmraft_proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use wasmraft_proto::etcdserverpb::request_op::Request as Op;
use wasmraft_proto::etcdserverpb::response_op::Response as OpResponse;
use wasmraft_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, ResponseHeader,
    TxnRequest, TxnResponse,
};
use wasmraft_proto::mvccpb::KeyValue;
use wasmraft_proto::prefix_range_end;
use wasmraft_proto::v3electionpb::election_server::Election;
use wasmraft_proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest, ProclaimResponse,
    ResignRequest, ResignResponse,
};
use wasmraft_proto::v3lockpb::lock_server::Lock;
use wasmraft_proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};

use super::{EtcdKv, EtcdLease};

/// etcd's default session TTL, for a lock or campaign without a lease.
const SESSION_TTL_S: i64 = 60;
/// How long a waiter sleeps without a change under its prefix before it
/// looks again anyway.
const RECHECK_EVERY: Duration = Duration::from_secs(1);

/// The recipes' shared parts: the node's KV and Lease services, called in
/// process (a follower forwards writes to the leader as for any client).
#[derive(Clone, Debug)]
struct Recipes {
    node: Node,
    kv: EtcdKv,
    lease: EtcdLease,
}

/// The `v3lockpb.Lock` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdLock(Recipes);

/// The `v3electionpb.Election` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdElection(Recipes);

impl EtcdLock {
    /// Serves locks over `kv` and `lease`, the services of `node`.
    pub fn new(node: Node, kv: EtcdKv, lease: EtcdLease) -> Self {
        Self(Recipes { node, kv, lease })
    }
}

impl EtcdElection {
    /// Serves elections over `kv` and `lease`, the services of `node`.
    pub fn new(node: Node, kv: EtcdKv, lease: EtcdLease) -> Self {
        Self(Recipes { node, kv, lease })
    }
}

fn create_revision_is(key: &[u8], revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
        ..Default::default()
    }
}

fn op(request: Op) -> RequestOp {
    RequestOp { request: Some(request) }
}

/// The key under `prefix` created first (etcd's `WithFirstCreate`).
fn first_created(prefix: &[u8]) -> RangeRequest {
    RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_range_end(prefix),
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        limit: 1,
        ..Default::default()
    }
}

fn range_of(r: Option<&wasmraft_proto::etcdserverpb::ResponseOp>) -> Option<&RangeResponse> {
    match r.and_then(|r| r.response.as_ref()) {
        Some(OpResponse::ResponseRange(range)) => Some(range),
        _ => None,
    }
}

fn malformed() -> Status {
    Status::internal("etcdserver: the KV service gave a malformed answer")
}

/// Deletes a waiter's key if its call is dropped before it is answered
/// (the client cancelled or went away), as etcd's recipes do.
struct CleanUp {
    recipes: Recipes,
    key: Vec<u8>,
    revision: i64,
    armed: bool,
}

impl Drop for CleanUp {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (recipes, key, revision) = (self.recipes.clone(), std::mem::take(&mut self.key), self.revision);
        tokio::spawn(async move {
            let _ = recipes.delete_if_created_at(&key, revision).await;
        });
    }
}

impl Recipes {
    async fn txn(&self, txn: TxnRequest) -> Result<TxnResponse, Status> {
        Ok(self.kv.txn(Request::new(txn)).await?.into_inner())
    }

    async fn range(&self, range: RangeRequest) -> Result<RangeResponse, Status> {
        Ok(self.kv.range(Request::new(range)).await?.into_inner())
    }

    /// The caller's lease, or a new one of etcd's session TTL for lease 0.
    async fn session_lease(&self, lease: i64) -> Result<i64, Status> {
        if lease != 0 {
            return Ok(lease);
        }
        let grant = LeaseGrantRequest { ttl: SESSION_TTL_S, id: 0 };
        Ok(self.lease.lease_grant(Request::new(grant)).await?.into_inner().id)
    }

    /// Creates `key` with `value` on `lease` unless it exists; answers its
    /// create revision, its value and the header.
    async fn claim(&self, key: &[u8], value: &[u8], lease: i64) -> Result<(i64, Vec<u8>, Option<ResponseHeader>), Status> {
        let put = PutRequest { key: key.to_vec(), value: value.to_vec(), lease, ..Default::default() };
        let get = RangeRequest { key: key.to_vec(), ..Default::default() };
        let txn = TxnRequest {
            compare: vec![create_revision_is(key, 0)],
            success: vec![op(Op::RequestPut(put))],
            failure: vec![op(Op::RequestRange(get))],
        };
        let resp = self.txn(txn).await?;
        let revision = resp.header.as_ref().map_or(0, |h| h.revision);
        if resp.succeeded {
            return Ok((revision, value.to_vec(), resp.header));
        }
        match range_of(resp.responses.first()).and_then(|r| r.kvs.first()) {
            Some(kv) => Ok((kv.create_revision, kv.value.clone(), resp.header)),
            // Deleted between the compare and the read: impossible in one
            // txn, but answer rather than trust it.
            None => Err(malformed()),
        }
    }

    /// Waits until no key under `prefix` has a create revision of
    /// `before` or less (etcd's `waitDeletes`).
    async fn wait_deletes(&self, prefix: &[u8], before: i64) -> Result<(), Status> {
        let mut changes = self.node.subscribe();
        loop {
            let older = RangeRequest {
                max_create_revision: before,
                sort_order: SortOrder::Descend as i32,
                ..first_created(prefix)
            };
            if self.range(older).await?.kvs.is_empty() {
                return Ok(());
            }
            wait_for_change(&mut changes, prefix).await;
        }
    }

    async fn delete_if_created_at(&self, key: &[u8], revision: i64) -> Result<Option<ResponseHeader>, Status> {
        let delete = DeleteRangeRequest { key: key.to_vec(), ..Default::default() };
        let txn = TxnRequest {
            compare: vec![create_revision_is(key, revision)],
            success: vec![op(Op::RequestDeleteRange(delete))],
            failure: vec![],
        };
        Ok(self.txn(txn).await?.header)
    }

    /// Waits for `key` (created at `revision`) to be first in line under
    /// `prefix`; deletes it if the caller goes away meanwhile. An error if
    /// the key is gone (its lease expired) by then.
    async fn wait_turn(&self, prefix: &[u8], key: &[u8], revision: i64, expired: &str) -> Result<(), Status> {
        let mut clean_up = CleanUp { recipes: self.clone(), key: key.to_vec(), revision, armed: true };
        let waited = self.wait_deletes(prefix, revision - 1).await;
        let still_there = match &waited {
            Ok(()) => !self.range(RangeRequest { key: key.to_vec(), ..Default::default() }).await?.kvs.is_empty(),
            Err(_) => false,
        };
        clean_up.armed = false;
        if let Err(status) = waited {
            let _ = self.delete_if_created_at(key, revision).await;
            return Err(status);
        }
        if !still_there {
            return Err(Status::unknown(expired.to_string()));
        }
        Ok(())
    }
}

/// Returns when a change under `prefix` has applied on this node, after
/// missed changes, or after [`RECHECK_EVERY`].
async fn wait_for_change(changes: &mut broadcast::Receiver<std::sync::Arc<wasmraft_node::EntryEvent>>, prefix: &[u8]) {
    let _ = tokio::time::timeout(RECHECK_EVERY, async {
        loop {
            match changes.recv().await {
                Ok(event) if event.key.starts_with(prefix) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    std::future::pending::<()>().await;
                }
            }
        }
    })
    .await;
}

/// `NAME/` and `NAME/LEASE` (the lease in hex), as etcd's recipes name them.
fn holder_key(name: &[u8], lease: i64) -> (Vec<u8>, Vec<u8>) {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    let mut key = prefix.clone();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    (prefix, key)
}

#[tonic::async_trait]
impl Lock for EtcdLock {
    async fn lock(&self, request: Request<LockRequest>) -> Result<Response<LockResponse>, Status> {
        let r = request.into_inner();
        let recipes = &self.0;
        let lease = recipes.session_lease(r.lease).await?;
        let (prefix, key) = holder_key(&r.name, lease);
        let (revision, _, header) = recipes.claim(&key, b"", lease).await?;
        recipes.wait_turn(&prefix, &key, revision, "mutex: session is expired").await?;
        Ok(Response::new(LockResponse { header, key }))
    }

    async fn unlock(&self, request: Request<UnlockRequest>) -> Result<Response<UnlockResponse>, Status> {
        let key = request.into_inner().key;
        let delete = DeleteRangeRequest { key, ..Default::default() };
        let header = self.0.kv.delete_range(Request::new(delete)).await?.into_inner().header;
        Ok(Response::new(UnlockResponse { header }))
    }
}

type ObserveStream = Pin<Box<dyn Stream<Item = Result<LeaderResponse, Status>> + Send>>;

fn leader_key(leader: Option<LeaderKey>) -> Result<LeaderKey, Status> {
    // etcd's text for a request without one.
    leader.ok_or_else(|| Status::invalid_argument("\"leader\" field must be provided"))
}

#[tonic::async_trait]
impl Election for EtcdElection {
    async fn campaign(&self, request: Request<CampaignRequest>) -> Result<Response<CampaignResponse>, Status> {
        let r = request.into_inner();
        let recipes = &self.0;
        let lease = recipes.session_lease(r.lease).await?;
        let (prefix, key) = holder_key(&r.name, lease);
        let (revision, value, mut header) = recipes.claim(&key, &r.value, lease).await?;
        if value != r.value {
            // Already campaigning with another value: proclaim this one.
            let put = PutRequest { key: key.clone(), value: r.value.clone(), lease, ..Default::default() };
            let txn = TxnRequest {
                compare: vec![create_revision_is(&key, revision)],
                success: vec![op(Op::RequestPut(put))],
                failure: vec![],
            };
            let resp = recipes.txn(txn).await?;
            if !resp.succeeded {
                return Err(Status::unknown("election: session expired"));
            }
            header = resp.header;
        }
        recipes.wait_turn(&prefix, &key, revision, "election: session expired").await?;
        let leader = LeaderKey { name: r.name, key, rev: revision, lease };
        Ok(Response::new(CampaignResponse { header, leader: Some(leader) }))
    }

    async fn proclaim(&self, request: Request<ProclaimRequest>) -> Result<Response<ProclaimResponse>, Status> {
        let r = request.into_inner();
        let leader = leader_key(r.leader)?;
        let put = PutRequest { key: leader.key.clone(), value: r.value, lease: leader.lease, ..Default::default() };
        let txn = TxnRequest {
            compare: vec![create_revision_is(&leader.key, leader.rev)],
            success: vec![op(Op::RequestPut(put))],
            failure: vec![],
        };
        let resp = self.0.txn(txn).await?;
        if !resp.succeeded {
            return Err(Status::unknown("election: not leader"));
        }
        Ok(Response::new(ProclaimResponse { header: resp.header }))
    }

    async fn leader(&self, request: Request<LeaderRequest>) -> Result<Response<LeaderResponse>, Status> {
        let name = request.into_inner().name;
        let (prefix, _) = holder_key(&name, 0);
        let resp = self.0.range(first_created(&prefix)).await?;
        match resp.kvs.into_iter().next() {
            Some(kv) => Ok(Response::new(LeaderResponse { header: resp.header, kv: Some(kv) })),
            None => Err(Status::unknown("election: no leader")),
        }
    }

    type ObserveStream = ObserveStream;

    async fn observe(&self, request: Request<LeaderRequest>) -> Result<Response<Self::ObserveStream>, Status> {
        let name = request.into_inner().name;
        let (prefix, _) = holder_key(&name, 0);
        let recipes = self.0.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut changes = recipes.node.subscribe();
            let mut sent: Option<KeyValue> = None;
            loop {
                let current = match recipes.range(first_created(&prefix)).await {
                    Ok(resp) => resp.kvs.into_iter().next().map(|kv| (resp.header, kv)),
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                if let Some((header, kv)) = current {
                    let changed = sent.as_ref().is_none_or(|s| s.key != kv.key || s.mod_revision != kv.mod_revision);
                    if changed {
                        sent = Some(kv.clone());
                        if tx.send(Ok(LeaderResponse { header, kv: Some(kv) })).await.is_err() {
                            return;
                        }
                    }
                }
                tokio::select! {
                    _ = wait_for_change(&mut changes, &prefix) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn resign(&self, request: Request<ResignRequest>) -> Result<Response<ResignResponse>, Status> {
        let leader = leader_key(request.into_inner().leader)?;
        let header = self.0.delete_if_created_at(&leader.key, leader.rev).await?;
        Ok(Response::new(ResignResponse { header }))
    }
}
