//! A typed handle on a node running the built-in KV plugin.

use prost::Message;
use wasmraft_node::{Consistency, Node};
use wasmraft_proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};

/// A KV operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The node refused or could not serve the request.
    #[error(transparent)]
    Node(#[from] wasmraft_node::Error),
    /// The plugin answered with something that is not the expected etcd
    /// response: the node is not running the KV plugin.
    #[error("unexpected response from the plugin: {0}")]
    UnexpectedResponse(String),
}

/// Keys and values on a node running [`wasmraft_node::KV_PLUGIN`], with
/// etcd's semantics (revisions, prefixes). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Kv {
    node: Node,
}

fn encode(request: Request) -> Vec<u8> {
    RequestOp { request: Some(request) }.encode_to_vec()
}

fn decode(bytes: &[u8]) -> Result<Response, Error> {
    ResponseOp::decode(bytes)
        .map_err(|e| Error::UnexpectedResponse(e.to_string()))?
        .response
        .ok_or_else(|| Error::UnexpectedResponse("empty ResponseOp".into()))
}

impl Kv {
    /// Talks to `node` (any node of the cluster: followers forward writes
    /// when they are reached over gRPC; in process, give it the leader).
    pub fn new(node: Node) -> Self {
        Self { node }
    }

    /// Stores `value` under `key`; returns the store's new revision.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<i64, Error> {
        let put = PutRequest { key: key.as_ref().to_vec(), value: value.as_ref().to_vec(), ..Default::default() };
        match decode(&self.node.propose(encode(Request::RequestPut(put))).await?)? {
            Response::ResponsePut(r) => Ok(r.header.map_or(0, |h| h.revision)),
            other => Err(Error::UnexpectedResponse(format!("{other:?}"))),
        }
    }

    /// The value under `key`.
    pub async fn get(&self, key: impl AsRef<[u8]>, consistency: Consistency) -> Result<Option<Vec<u8>>, Error> {
        let range = RangeRequest { key: key.as_ref().to_vec(), ..Default::default() };
        Ok(self.range(range, consistency).await?.pop().map(|(_, v)| v))
    }

    /// Every key and value whose key starts with `prefix`, in key order.
    pub async fn prefix(
        &self,
        prefix: impl AsRef<[u8]>,
        consistency: Consistency,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
        let p = prefix.as_ref();
        let range = RangeRequest { key: p.to_vec(), range_end: wasmraft_proto::prefix_range_end(p), ..Default::default() };
        self.range(range, consistency).await
    }

    async fn range(&self, range: RangeRequest, consistency: Consistency) -> Result<Vec<(Vec<u8>, Vec<u8>)>, Error> {
        match decode(&self.node.query(encode(Request::RequestRange(range)), consistency).await?)? {
            Response::ResponseRange(r) => Ok(r.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect()),
            other => Err(Error::UnexpectedResponse(format!("{other:?}"))),
        }
    }

    /// Deletes `key`; returns whether it existed.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        Ok(self.delete_range(key.as_ref().to_vec(), Vec::new()).await? > 0)
    }

    /// Deletes every key that starts with `prefix`; returns how many.
    pub async fn delete_prefix(&self, prefix: impl AsRef<[u8]>) -> Result<i64, Error> {
        let p = prefix.as_ref();
        self.delete_range(p.to_vec(), wasmraft_proto::prefix_range_end(p)).await
    }

    async fn delete_range(&self, key: Vec<u8>, range_end: Vec<u8>) -> Result<i64, Error> {
        let del = DeleteRangeRequest { key, range_end, prev_kv: false };
        match decode(&self.node.propose(encode(Request::RequestDeleteRange(del))).await?)? {
            Response::ResponseDeleteRange(r) => Ok(r.deleted),
            other => Err(Error::UnexpectedResponse(format!("{other:?}"))),
        }
    }

    /// The node behind this handle.
    pub fn node(&self) -> &Node {
        &self.node
    }
}
