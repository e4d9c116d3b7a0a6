//! `etcdserverpb.KV`: Range, Put, DeleteRange and Txn.

use prost::Message as _;
use tonic::{Request, Response, Status};
use wasmraft_node::{Consistency, Error, Node};
use wasmraft_proto::etcdserverpb::kv_client::KvClient;
use wasmraft_proto::etcdserverpb::kv_server::Kv;
use wasmraft_proto::etcdserverpb::request_op::Request as Op;
use wasmraft_proto::etcdserverpb::response_op::Response as OpResponse;
use wasmraft_proto::kvplugin;
use wasmraft_proto::kvplugin::response::Response as KvResponse;
use wasmraft_proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse, RequestOp,
    ResponseOp, TxnRequest, TxnResponse,
};

use super::{SpaceQuota, etcd_status, header, require_kv};
use crate::forward::{Forwarder, forwarded, is_forwarded};

/// The `etcdserverpb.KV` service of one node. Writes go through the log
/// (a follower forwards them to the leader once, as the `wasmraft.v1`
/// service does); a serializable range is served from this node's state,
/// any other read after a ReadIndex round, as etcd does.
#[derive(Clone, Debug)]
pub struct EtcdKv {
    node: Node,
    forwarder: Forwarder,
    space: SpaceQuota,
}

impl EtcdKv {
    /// Serves `node`, forwarding writes through `forwarder`; writes that
    /// add data are refused on a member whose store is past `space`.
    pub fn new(node: Node, forwarder: Forwarder, space: SpaceQuota) -> Self {
        Self { node, forwarder, space }
    }

    /// Proposes `command` (a `RequestOp`, see [`request_op`]) and returns
    /// the plugin's answer. On a follower the caller's `forward` runs
    /// against the leader's KV service instead.
    async fn write<T, F, Fut>(&self, command: Vec<u8>, was_forwarded: bool, forward: F) -> Result<Result<Vec<u8>, T>, Status>
    where
        F: FnOnce(KvClient<tonic::transport::Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        require_kv(&self.node)?;
        match self.node.propose(command).await {
            Ok(answer) => Ok(Ok(answer)),
            Err(Error::NotLeader { leader: Some(leader) }) if leader.0 != self.node.id() && !was_forwarded => {
                match self.forwarder.channel(leader.0) {
                    Some(channel) => {
                        let client = KvClient::new(channel).max_decoding_message_size(64 << 20);
                        forward(client).await.map(Err)
                    }
                    None => Err(etcd_status(Error::NotLeader { leader: Some(leader) })),
                }
            }
            Err(e) => Err(etcd_status(e)),
        }
    }

    /// Serves a read-only `op` at `consistency`.
    async fn read(&self, op: Op, consistency: Consistency) -> Result<OpResponse, Status> {
        require_kv(&self.node)?;
        let request = RequestOp { request: Some(op) }.encode_to_vec();
        let answer = self.node.query(request, consistency).await.map_err(etcd_status)?;
        decode(&answer)
    }
}

/// Field numbers of `RequestOp`'s `request` oneof.
pub(super) const OP_PUT: u32 = 2;
const OP_DELETE_RANGE: u32 = 3;
const OP_TXN: u32 = 4;
/// The field of a compaction in the KV plugin's `kvplugin.Request`.
pub(super) const OP_COMPACTION: u32 = 16;

/// `RequestOp { request: Some(op) }` encoded from a borrowed request, where
/// `field` is the op's field number: the same bytes without moving or
/// copying the request, which a follower still needs to forward.
pub(super) fn request_op<M: prost::Message>(field: u32, request: &M) -> Vec<u8> {
    let mut buf = Vec::with_capacity(request.encoded_len() + 8);
    prost::encoding::message::encode(field, request, &mut buf);
    buf
}

fn decode(answer: &[u8]) -> Result<OpResponse, Status> {
    ResponseOp::decode(answer)
        .ok()
        .and_then(|r| r.response)
        .ok_or_else(|| Status::internal("etcdserver: the KV plugin gave a malformed answer"))
}

/// Decodes the plugin's answer to a write; the leader's answer to a
/// forwarded one passes through.
fn decoded<T, L>(answer: Result<Vec<u8>, L>, decode: impl FnOnce(&[u8]) -> Result<T, Status>) -> Result<Result<T, L>, Status> {
    match answer {
        Ok(bytes) => decode(&bytes).map(Ok),
        Err(leader) => Ok(Err(leader)),
    }
}

fn unexpected() -> Status {
    Status::internal("etcdserver: the KV plugin answered with another kind of response")
}

/// Whether a txn may put (and so add data), in any branch.
fn puts(txn: &TxnRequest) -> bool {
    txn.success.iter().chain(&txn.failure).any(|op| match &op.request {
        Some(Op::RequestPut(_)) => true,
        Some(Op::RequestTxn(t)) => puts(t),
        _ => false,
    })
}

/// Whether a txn only reads (then it is served as a read, as etcd does).
fn read_only(txn: &TxnRequest) -> bool {
    txn.success.iter().chain(&txn.failure).all(|op| match &op.request {
        Some(Op::RequestRange(_)) | None => true,
        Some(Op::RequestTxn(t)) => read_only(t),
        Some(Op::RequestPut(_)) | Some(Op::RequestDeleteRange(_)) => false,
    })
}

/// Fills in the header of a plugin's answer, or passes on the leader's.
macro_rules! answer {
    ($node:expr, $answer:expr, $variant:path) => {
        match $answer {
            Ok($variant(mut resp)) => {
                resp.header = header($node, resp.header);
                Ok(Response::new(resp))
            }
            Ok(_) => Err(unexpected()),
            Err(leader) => Ok(leader),
        }
    };
}

#[tonic::async_trait]
impl Kv for EtcdKv {
    async fn range(&self, request: Request<RangeRequest>) -> Result<Response<RangeResponse>, Status> {
        let r = request.into_inner();
        let consistency = if r.serializable { Consistency::Eventual } else { Consistency::Linearizable };
        let answer: Result<_, Response<RangeResponse>> = Ok(self.read(Op::RequestRange(r), consistency).await?);
        answer!(&self.node, answer, OpResponse::ResponseRange)
    }

    async fn put(&self, request: Request<PutRequest>) -> Result<Response<PutResponse>, Status> {
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        // A put with a lease is refused by the KV plugin, which serves no
        // lease yet, with etcd's "etcdserver: requested lease not found"
        // (NOT_FOUND) after etcd's request checks, as etcd orders them.
        // Also on the leader for a forwarded put: the header that marks it
        // is a client's to set.
        self.space.check_write(&self.node, &self.forwarder).await?;
        let command = request_op(OP_PUT, &r);
        let answer = self.write(command, was_forwarded, |mut c| async move { c.put(forwarded(r)).await }).await?;
        answer!(&self.node, decoded(answer, decode)?, OpResponse::ResponsePut)
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Result<Response<DeleteRangeResponse>, Status> {
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        let command = request_op(OP_DELETE_RANGE, &r);
        let answer = self
            .write(command, was_forwarded, |mut c| async move { c.delete_range(forwarded(r)).await })
            .await?;
        answer!(&self.node, decoded(answer, decode)?, OpResponse::ResponseDeleteRange)
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Result<Response<TxnResponse>, Status> {
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        let answer = if read_only(&r) {
            Ok(self.read(Op::RequestTxn(r), Consistency::Linearizable).await?)
        } else {
            if puts(&r) {
                self.space.check_write(&self.node, &self.forwarder).await?;
            }
            let command = request_op(OP_TXN, &r);
            let answer = self.write(command, was_forwarded, |mut c| async move { c.txn(forwarded(r)).await }).await?;
            decoded(answer, decode)?
        };
        answer!(&self.node, answer, OpResponse::ResponseTxn)
    }

    async fn compact(&self, request: Request<CompactionRequest>) -> Result<Response<CompactionResponse>, Status> {
        let was_forwarded = is_forwarded(&request);
        let r = request.into_inner();
        let command = request_op(OP_COMPACTION, &r);
        let answer = self.write(command, was_forwarded, |mut c| async move { c.compact(forwarded(r)).await }).await?;
        let decode_kv = |a: &[u8]| kvplugin::Response::decode(a).ok().and_then(|r| r.response).ok_or_else(unexpected);
        answer!(&self.node, decoded(answer, decode_kv)?, KvResponse::ResponseCompaction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encoding from a borrowed request gives `RequestOp`'s own bytes.
    #[test]
    fn a_borrowed_request_encodes_as_its_request_op() {
        let put = PutRequest { key: b"k".to_vec(), value: vec![7; 300], prev_kv: true, ..Default::default() };
        let del = DeleteRangeRequest { key: b"a".to_vec(), range_end: b"b".to_vec(), prev_kv: true };
        let txn = TxnRequest { success: vec![RequestOp { request: Some(Op::RequestPut(put.clone())) }], ..Default::default() };
        let op = |o: Op| RequestOp { request: Some(o) }.encode_to_vec();
        assert_eq!(request_op(OP_PUT, &put), op(Op::RequestPut(put.clone())));
        assert_eq!(request_op(OP_DELETE_RANGE, &del), op(Op::RequestDeleteRange(del.clone())));
        assert_eq!(request_op(OP_TXN, &txn), op(Op::RequestTxn(txn.clone())));
    }
}
