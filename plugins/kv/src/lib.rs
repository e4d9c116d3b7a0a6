//! Wasmraft's default state machine: a key-value store with etcd v3 semantics.
//!
//! Commands and queries are etcd's own protobuf messages: a command is an
//! `etcdserverpb.RequestOp` (put, delete-range, txn, or a range served
//! through the log) answered with a `ResponseOp`; a query is a `RequestOp`
//! holding a range or a read-only txn. So etcd's v3 API is a thin adapter on
//! the host side. `kvplugin.Request` extends `RequestOp` with what etcd's
//! API needs beyond it: a compaction (a command), the changes since a
//! revision and keyspace hashes (queries), and etcd's alarms (a NOSPACE
//! alarm refuses puts at apply, on every member; see `alarms`).
//!
//! Semantics follow etcd: one global revision that increases by one per entry
//! that changes something; per key `create_revision`, `mod_revision` and
//! `version`; range ends (`""` one key, `"\0"` every key from `key`, else
//! `[key, range_end)`); txn compares on value, version, create and mod
//! revision. Past revisions are kept until a compaction: a range reads the
//! keyspace as of any kept revision, and a read below the compacted revision
//! gets etcd's "compacted" error. Each changed key emits an `mvccpb.Event`.

mod alarms;
mod history;
mod keyspace;
#[cfg(test)]
mod lease_tests;
mod leases;
mod ops;
#[cfg(test)]
mod tests;
mod txn;

pub mod pb {
    //! etcd's messages, generated from `proto/etcd`.
    #![allow(missing_docs, clippy::all)]
    pub mod mvccpb {
        include!(concat!(env!("OUT_DIR"), "/mvccpb.rs"));
    }
    pub mod etcdserverpb {
        include!(concat!(env!("OUT_DIR"), "/etcdserverpb.rs"));
    }
    pub mod kvplugin {
        include!(concat!(env!("OUT_DIR"), "/kvplugin.rs"));
    }
}

use pb::etcdserverpb::request_op::Request as Op;
use pb::etcdserverpb::response_op::Response as OpResponse;
use pb::kvplugin::request::Request as KvRequest;
use pb::kvplugin::response::Response as KvResponse;
use pb::kvplugin::{Request, Response};
use prost::Message;
use wasmraft_sdk::{ApplyError, Entry, PluginInfo, QueryError, StateMachine, Tick};

use crate::keyspace::Revision;

/// The KV state machine.
pub struct Kv;

fn decode(bytes: &[u8]) -> Result<KvRequest, String> {
    let request = Request::decode(bytes).map_err(|e| format!("malformed RequestOp: {e}"))?;
    request.request.ok_or_else(|| "empty RequestOp".to_string())
}

/// The etcd operation a request holds, if it is one.
fn etcd_op(request: KvRequest) -> Result<Op, KvRequest> {
    Ok(match request {
        KvRequest::RequestRange(r) => Op::RequestRange(r),
        KvRequest::RequestPut(r) => Op::RequestPut(r),
        KvRequest::RequestDeleteRange(r) => Op::RequestDeleteRange(r),
        KvRequest::RequestTxn(r) => Op::RequestTxn(r),
        other => return Err(other),
    })
}

fn kv_response(response: OpResponse) -> KvResponse {
    match response {
        OpResponse::ResponseRange(r) => KvResponse::ResponseRange(r),
        OpResponse::ResponsePut(r) => KvResponse::ResponsePut(r),
        OpResponse::ResponseDeleteRange(r) => KvResponse::ResponseDeleteRange(r),
        OpResponse::ResponseTxn(r) => KvResponse::ResponseTxn(r),
    }
}

fn encode(response: KvResponse) -> Vec<u8> {
    Response { response: Some(response) }.encode_to_vec()
}

impl StateMachine for Kv {
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
        let request = decode(&entry.command).map_err(ApplyError::invalid)?;
        let mut rev = Revision::begin_entry(entry.index);
        let response = match etcd_op(request) {
            Ok(op) => {
                alarms::check_write(&op, &mut rev)?;
                kv_response(ops::execute(&op, &mut rev)?)
            }
            Err(KvRequest::RequestCompaction(c)) => KvResponse::ResponseCompaction(history::compact(&c, &rev)?),
            Err(KvRequest::RequestAlarm(a)) => {
                rev.nospace = None; // the entries after it read the alarms again
                KvResponse::ResponseAlarm(alarms::change(&a, &rev)?)
            }
            Err(KvRequest::RequestLeaseGrant(g)) => {
                KvResponse::ResponseLeaseGrant(leases::grant(&g, entry.index, entry.timestamp_ms, &rev)?)
            }
            Err(KvRequest::RequestLeaseRevoke(r)) => KvResponse::ResponseLeaseRevoke(leases::revoke(&r, &mut rev)?),
            Err(_) => return Err(ApplyError::invalid("a query, not a command: send it as a query")),
        };
        history::remove_compacted_step(&rev);
        rev.commit();
        Ok(encode(response))
    }

    fn query(request: &[u8]) -> Result<Vec<u8>, QueryError> {
        let request = decode(request).map_err(QueryError::invalid)?;
        let mut rev = Revision::begin();
        let response = match etcd_op(request) {
            Ok(op) if !ops::is_read_only(&op) => {
                return Err(QueryError::invalid("a query must not write: propose it instead"));
            }
            Ok(Op::RequestRange(r)) => match ops::range_encoded(&r, &rev)? {
                Some(encoded) => return Ok(encoded),
                None => KvResponse::ResponseRange(ops::range(&r, &rev)?),
            },
            Ok(op) => kv_response(ops::execute(&op, &mut rev)?),
            Err(KvRequest::RequestEvents(r)) => KvResponse::ResponseEvents(history::events(&r, &rev)),
            Err(KvRequest::RequestHash(r)) => KvResponse::ResponseHash(history::hash(&r, &rev)?),
            Err(KvRequest::RequestAlarm(a)) => KvResponse::ResponseAlarm(alarms::get(&a, &rev)?),
            Err(KvRequest::RequestLeaseTimeToLive(q)) => KvResponse::ResponseLeaseTimeToLive(leases::time_to_live(
                &q.request.unwrap_or_default(),
                q.now_ms,
                &rev,
            )),
            Err(KvRequest::RequestLeaseLeases(_)) => KvResponse::ResponseLeaseLeases(leases::leases(&rev)),
            Err(_) => return Err(QueryError::invalid("this request writes: propose it instead")),
        };
        Ok(encode(response))
    }

    fn tick(tick: &Tick) -> Result<Vec<Result<Vec<u8>, ApplyError>>, ApplyError> {
        Ok(leases::tick(tick).into_iter().map(|r| r.map_err(ApplyError::from)).collect())
    }

    fn migrate(previous: &PluginInfo) -> Result<(), ApplyError> {
        if previous.name == "wasmraft-kv" {
            keyspace::start_history();
        }
        Ok(())
    }
}

/// Errors of an etcd operation, mapped onto the plugin contract.
#[derive(Debug)]
pub(crate) enum KvError {
    /// The request is malformed (etcd's InvalidArgument).
    Invalid(&'static str),
    /// Well formed but refused (etcd's FailedPrecondition / OutOfRange).
    Rejected(&'static str),
}

impl From<KvError> for ApplyError {
    fn from(e: KvError) -> Self {
        match e {
            KvError::Invalid(m) => ApplyError::invalid(m),
            KvError::Rejected(m) => ApplyError::rejected(m),
        }
    }
}

impl From<KvError> for QueryError {
    fn from(e: KvError) -> Self {
        match e {
            KvError::Invalid(m) => QueryError::invalid(m),
            KvError::Rejected(m) => QueryError::rejected(m),
        }
    }
}

#[cfg(target_arch = "wasm32")]
wasmraft_sdk::export!(Kv);

// Size classes over never-returned pages: an apply call's instance is
// short-lived, and dlmalloc's bookkeeping was a third of the plugin's time.
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOC: wasmraft_sdk::alloc::PluginAllocator = wasmraft_sdk::alloc::PluginAllocator::new();
