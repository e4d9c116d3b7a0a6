//! Wasmraft's default state machine: a key-value store with etcd v3 semantics.
//!
//! Commands and queries are etcd's own protobuf messages: a command is an
//! `etcdserverpb.RequestOp` (put, delete-range, txn, or a range served
//! through the log) answered with a `ResponseOp`; a query is a `RequestOp`
//! holding a range or a read-only txn. So etcd's v3 API is a thin adapter on
//! the host side.
//!
//! Semantics follow etcd: one global revision that increases by one per entry
//! that changes something; per key `create_revision`, `mod_revision` and
//! `version`; range ends (`""` one key, `"\0"` every key from `key`, else
//! `[key, range_end)`); txn compares on value, version, create and mod
//! revision. Only the newest revision is kept: a read at an older revision
//! gets etcd's "compacted" error. Each changed key emits an `mvccpb.Event`.

mod keyspace;
mod ops;
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
}

use pb::etcdserverpb::{RequestOp, ResponseOp};
use prost::Message;
use wasmraft_sdk::{ApplyError, Entry, QueryError, StateMachine};

use crate::keyspace::Revision;

/// The KV state machine.
pub struct Kv;

impl StateMachine for Kv {
    fn apply(entry: Entry) -> Result<Vec<u8>, ApplyError> {
        let op = RequestOp::decode(entry.command.as_slice())
            .map_err(|e| ApplyError::invalid(format!("malformed RequestOp: {e}")))?;
        let request = op.request.ok_or_else(|| ApplyError::invalid("empty RequestOp"))?;
        let mut rev = Revision::begin();
        let response = ops::execute(&request, &mut rev).map_err(ApplyError::from)?;
        rev.commit();
        Ok(ResponseOp { response: Some(response) }.encode_to_vec())
    }

    fn query(request: &[u8]) -> Result<Vec<u8>, QueryError> {
        let op = RequestOp::decode(request)
            .map_err(|e| QueryError::invalid(format!("malformed RequestOp: {e}")))?;
        let request = op.request.ok_or_else(|| QueryError::invalid("empty RequestOp"))?;
        if !ops::is_read_only(&request) {
            return Err(QueryError::invalid("a query must not write: propose it instead"));
        }
        let mut rev = Revision::begin();
        let response = ops::execute(&request, &mut rev).map_err(QueryError::from)?;
        Ok(ResponseOp { response: Some(response) }.encode_to_vec())
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
