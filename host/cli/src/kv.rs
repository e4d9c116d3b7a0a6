//! Building etcd requests for the KV plugin and reading its responses.

use anyhow::{Context, bail};
use prost::Message;
use wasmraft_proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};

pub fn encode(request: Request) -> Vec<u8> {
    RequestOp { request: Some(request) }.encode_to_vec()
}

/// A put, attaching the key to `lease` (0: none).
pub fn put_with_lease(key: &str, value: &[u8], lease: i64) -> Vec<u8> {
    encode(Request::RequestPut(PutRequest { key: key.into(), value: value.to_vec(), lease, ..Default::default() }))
}

/// Which keys a get or del addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// KEY alone.
    One,
    /// Every key that starts with KEY.
    Prefix,
    /// Every key from KEY on.
    FromKey,
    /// Every key.
    All,
}

/// etcd's key and range end for `keys` around `key`.
pub(crate) fn bounds(key: &str, keys: Keys) -> (Vec<u8>, Vec<u8>) {
    match keys {
        Keys::One => (key.into(), Vec::new()),
        Keys::Prefix if key.is_empty() => (vec![0], vec![0]),
        Keys::Prefix => (key.into(), wasmraft_proto::prefix_range_end(key.as_bytes())),
        Keys::FromKey => (key.into(), vec![0]),
        Keys::All => (vec![0], vec![0]),
    }
}

pub fn range(key: &str, keys: Keys) -> Vec<u8> {
    let (key, range_end) = bounds(key, keys);
    encode(Request::RequestRange(RangeRequest { key, range_end, ..Default::default() }))
}

pub fn delete(key: &str, keys: Keys) -> Vec<u8> {
    let (key, range_end) = bounds(key, keys);
    encode(Request::RequestDeleteRange(DeleteRangeRequest { key, range_end, prev_kv: false }))
}

pub fn decode(bytes: &[u8]) -> anyhow::Result<Response> {
    ResponseOp::decode(bytes)
        .context("the plugin's response is not an etcd ResponseOp (is the node running the KV plugin?)")?
        .response
        .context("empty ResponseOp")
}

pub fn expect_range(r: Response) -> anyhow::Result<wasmraft_proto::etcdserverpb::RangeResponse> {
    match r {
        Response::ResponseRange(r) => Ok(r),
        other => bail!("expected a range response, got {other:?}"),
    }
}
