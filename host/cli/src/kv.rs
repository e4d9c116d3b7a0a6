//! Building etcd requests for the KV plugin and reading its responses.

use anyhow::{Context, bail};
use prost::Message;
use wasmraft_proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};

pub fn encode(request: Request) -> Vec<u8> {
    RequestOp { request: Some(request) }.encode_to_vec()
}

pub fn put(key: &str, value: &[u8]) -> Vec<u8> {
    encode(Request::RequestPut(PutRequest { key: key.into(), value: value.to_vec(), ..Default::default() }))
}

pub fn range(key: &str, prefix: bool) -> Vec<u8> {
    let range_end = if prefix { wasmraft_proto::prefix_range_end(key.as_bytes()) } else { Vec::new() };
    encode(Request::RequestRange(RangeRequest { key: key.into(), range_end, ..Default::default() }))
}

pub fn delete(key: &str, prefix: bool) -> Vec<u8> {
    let range_end = if prefix { wasmraft_proto::prefix_range_end(key.as_bytes()) } else { Vec::new() };
    encode(Request::RequestDeleteRange(DeleteRangeRequest { key: key.into(), range_end, prev_kv: false }))
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
