//! A native Rust twin of the KV plugin's put path, for the Wasm-tax bench.
//!
//! Same keyspace layout and encoding as `plugins/kv` (`keyspace.rs`,
//! `ops.rs`, `history.rs`): `\x00rev` holds the revision (u64 big-endian,
//! etcd starts at 1), user key `k` lives at `\x01k` as an `mvccpb.KeyValue`
//! without its key, its version at revision `r` at `\x03 esc(k) r`, the
//! revision log records `k` at `\x02 r sub`, every 16th revision reads the
//! compacted revision (no compaction runs in the bench), and each put emits
//! an `mvccpb.Event`. Only puts are implemented; anything else
//! is refused, so the bench cannot silently compare different work.

use std::collections::BTreeMap;
use std::sync::Arc;

use prost::Message;
use wasmraft_node::StateMachine;
use wasmraft_proto::etcdserverpb::{PutRequest, PutResponse, RequestOp, ResponseHeader, ResponseOp, request_op, response_op};
use wasmraft_proto::mvccpb::{Event, KeyValue, event::EventType};
use wasmraft_runtime::{ApplyBatch, EntryError, EntryEvent, EntryInput, Fatal, StateView, Write};

const REVISION_KEY: &[u8] = b"\x00rev";
const COMPACT_KEY: &[u8] = b"\x00compact";
const DATA_PREFIX: u8 = 0x01;
const LOG_PREFIX: u8 = 0x02;
const HISTORY_PREFIX: u8 = 0x03;
const INITIAL_REVISION: i64 = 1;
const ERR_EMPTY_KEY: &str = "etcdserver: key is not provided";

/// The native state machine. Like the runtime's overlay, writes of earlier
/// entries of a batch are visible to later ones and leave as one net,
/// key-sorted list.
#[derive(Debug, Default)]
pub struct NativeKv;

/// One batch's pending writes over the committed view.
struct Batch<'a> {
    view: &'a dyn StateView,
    writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl Batch<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Fatal> {
        match self.writes.get(key) {
            Some(v) => Ok(v.clone()),
            None => self.view.get(key).map_err(|e| Fatal(e.to_string())),
        }
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.writes.insert(key, Some(value));
    }
}

fn data_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(DATA_PREFIX);
    k.extend_from_slice(key);
    k
}

fn history_key(key: &[u8], revision: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 12);
    k.push(HISTORY_PREFIX);
    for &b in key {
        k.push(b);
        if b == 0 {
            k.push(0xff);
        }
    }
    k.extend_from_slice(&[0, 1]);
    k.extend_from_slice(&(revision as u64).to_be_bytes());
    k
}

fn log_key(revision: i64) -> Vec<u8> {
    let mut k = vec![LOG_PREFIX];
    k.extend_from_slice(&(revision as u64).to_be_bytes());
    k.extend_from_slice(&0u32.to_be_bytes());
    k
}

impl StateMachine for NativeKv {
    fn apply(&mut self, state: Arc<dyn StateView>, entries: &[EntryInput]) -> Result<ApplyBatch, Fatal> {
        let mut batch = Batch { view: state.as_ref(), writes: BTreeMap::new() };
        let mut outcomes = Vec::with_capacity(entries.len());
        let mut events = Vec::new();
        for entry in entries {
            outcomes.push(put(&mut batch, entry, &mut events)?);
        }
        let writes = batch.writes.into_iter().map(|(key, value)| Write { key, value }).collect();
        Ok(ApplyBatch { outcomes, writes, events, fuel_used: 0 })
    }
}

/// One entry. Every refusal happens before the first write, so a refused
/// entry needs no rollback.
fn put(batch: &mut Batch<'_>, entry: &EntryInput, events: &mut Vec<EntryEvent>) -> Result<Result<Vec<u8>, EntryError>, Fatal> {
    let op = match RequestOp::decode(entry.command.as_slice()) {
        Ok(op) => op,
        Err(e) => return Ok(Err(EntryError::Invalid(format!("malformed RequestOp: {e}")))),
    };
    let r: PutRequest = match op.request {
        Some(request_op::Request::RequestPut(r)) => r,
        None => return Ok(Err(EntryError::Invalid("empty RequestOp".into()))),
        Some(_) => return Ok(Err(EntryError::Invalid("the native bench KV only puts".into()))),
    };
    if r.key.is_empty() {
        return Ok(Err(EntryError::Invalid(ERR_EMPTY_KEY.into())));
    }
    if r.lease != 0 {
        return Ok(Err(EntryError::Rejected("etcdserver: requested lease not found".into())));
    }
    let base = match batch.get(REVISION_KEY)? {
        Some(v) => u64::from_be_bytes(v.try_into().map_err(|_| Fatal("corrupt revision".into()))?) as i64,
        None => INITIAL_REVISION,
    };
    let prev = match batch.get(&data_key(&r.key))? {
        Some(bytes) => {
            let mut kv = KeyValue::decode(bytes.as_slice()).map_err(|e| Fatal(format!("corrupt key-value: {e}")))?;
            kv.key = r.key.clone();
            Some(kv)
        }
        None => None,
    };
    let value = if r.ignore_value {
        match &prev {
            Some(p) => p.value.clone(),
            None => return Ok(Err(EntryError::Rejected("etcdserver: key not found".into()))),
        }
    } else {
        r.value
    };
    let revision = base + 1;
    let kv = KeyValue {
        key: r.key,
        create_revision: prev.as_ref().map_or(revision, |p| p.create_revision),
        mod_revision: revision,
        version: prev.as_ref().map_or(1, |p| p.version + 1),
        value,
        lease: 0,
    };
    let stored = KeyValue { key: Vec::new(), ..kv.clone() }.encode_to_vec();
    batch.put(log_key(revision), kv.key.clone());
    batch.put(data_key(&kv.key), stored.clone());
    batch.put(history_key(&kv.key, revision), stored);
    if revision % 16 == 0 && batch.get(COMPACT_KEY)?.is_some() {
        return Err(Fatal("the native bench KV does not compact".into()));
    }
    let key = kv.key.clone();
    let event = Event { r#type: EventType::Put as i32, kv: Some(kv), prev_kv: prev.clone() };
    events.push(EntryEvent { index: entry.index, key, payload: event.encode_to_vec() });
    batch.put(REVISION_KEY.to_vec(), (revision as u64).to_be_bytes().to_vec());
    let response = PutResponse {
        header: Some(ResponseHeader { revision, ..Default::default() }),
        prev_kv: if r.prev_kv { prev } else { None },
    };
    Ok(Ok(ResponseOp { response: Some(response_op::Response::ResponsePut(response)) }.encode_to_vec()))
}
