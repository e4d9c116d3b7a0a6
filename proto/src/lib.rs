//! Wire types of Wasmraft: the `wasmraft.v1` client API and the subset of
//! etcd's v3 API (`etcdserverpb`, `mvccpb`) the KV plugin speaks, generated
//! from the `.proto` files in this crate.
#![allow(clippy::all)]

pub mod convert;

/// `wasmraft.v1`: the client API for any plugin, and the peer protocol.
#[allow(missing_docs)]
pub mod v1 {
    tonic::include_proto!("wasmraft.v1");
}

/// etcd's v3 RPC messages (wire-compatible subset).
#[allow(missing_docs)]
pub mod etcdserverpb {
    tonic::include_proto!("etcdserverpb");
}

/// etcd's lock service.
#[allow(missing_docs)]
pub mod v3lockpb {
    tonic::include_proto!("v3lockpb");
}

/// etcd's election service.
#[allow(missing_docs)]
pub mod v3electionpb {
    tonic::include_proto!("v3electionpb");
}

/// etcd's key-value and event messages.
#[allow(missing_docs)]
pub mod mvccpb {
    tonic::include_proto!("mvccpb");
}

/// The KV plugin's own requests and responses: etcd's `RequestOp` and
/// `ResponseOp` plus compaction, watch history and keyspace hashes.
#[allow(missing_docs)]
pub mod kvplugin {
    tonic::include_proto!("kvplugin");
}

/// The etcd `range_end` that selects every key starting with `prefix` (the
/// prefix with its last byte below 0xff incremented; `"\0"`, every key from
/// `prefix` on, when there is none).
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The `wasmraft-error` metadata key of error statuses.
pub const ERROR_KEY: &str = "wasmraft-error";
/// The `wasmraft-leader-id` metadata key of not-leader errors.
pub const LEADER_KEY: &str = "wasmraft-leader-id";

/// An error and its causes, `: `-separated: tonic's own messages ("transport
/// error") hide what went wrong (a refused connection, an unknown CA).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}
