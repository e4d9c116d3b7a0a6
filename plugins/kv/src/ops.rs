//! Range, Put and DeleteRange with etcd's semantics.

use prost::Message;
use wasmraft_sdk::events;

use crate::KvError;
use crate::history;
use crate::keyspace::{self, Revision};
use crate::pb::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    ResponseHeader, range_request::SortOrder, range_request::SortTarget, request_op::Request,
    response_op::Response,
};
use crate::pb::mvccpb::{Event, KeyValue, event::EventType};

/// Runs one request against the store.
pub(crate) fn execute(request: &Request, rev: &mut Revision) -> Result<Response, KvError> {
    Ok(match request {
        Request::RequestRange(r) => Response::ResponseRange(range(r, rev)?),
        Request::RequestPut(r) => Response::ResponsePut(put(r, rev)?),
        Request::RequestDeleteRange(r) => Response::ResponseDeleteRange(delete_range(r, rev)?),
        Request::RequestTxn(r) => Response::ResponseTxn(crate::txn::txn(r, rev)?),
    })
}

/// Whether a request only reads, in every branch.
pub(crate) fn is_read_only(request: &Request) -> bool {
    match request {
        Request::RequestRange(_) => true,
        Request::RequestPut(_) | Request::RequestDeleteRange(_) => false,
        Request::RequestTxn(t) => t
            .success
            .iter()
            .chain(&t.failure)
            .all(|op| op.request.as_ref().is_none_or(is_read_only)),
    }
}

pub(crate) fn header(rev: &Revision) -> Option<ResponseHeader> {
    Some(ResponseHeader { revision: rev.current(), ..Default::default() })
}

pub(crate) const ERR_EMPTY_KEY: &str = "etcdserver: key is not provided";
pub(crate) const ERR_KEY_NOT_FOUND: &str = "etcdserver: key not found";

/// etcd's checkRangeRequest: what no range may hold, whatever the state.
pub(crate) fn check_range(r: &RangeRequest) -> Result<(), KvError> {
    if r.key.is_empty() {
        return Err(KvError::Invalid(ERR_EMPTY_KEY));
    }
    if SortOrder::try_from(r.sort_order).is_err() || SortTarget::try_from(r.sort_target).is_err() {
        return Err(KvError::Invalid("etcdserver: invalid sort option"));
    }
    Ok(())
}

/// etcd's checkPutRequest: what no put may hold, whatever the state.
pub(crate) fn check_put(r: &PutRequest) -> Result<(), KvError> {
    if r.key.is_empty() {
        return Err(KvError::Invalid(ERR_EMPTY_KEY));
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(KvError::Invalid("etcdserver: value is provided"));
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(KvError::Invalid("etcdserver: lease is provided"));
    }
    Ok(())
}

/// etcd's checkPut, which a txn runs on the puts of its path against the
/// state before it writes: an ignored value or lease needs the key, and a
/// lease must exist.
pub(crate) fn check_put_state(r: &PutRequest) -> Result<(), KvError> {
    if (r.ignore_value || r.ignore_lease) && keyspace::count(&r.key, &[]) == 0 {
        return Err(KvError::Rejected(ERR_KEY_NOT_FOUND));
    }
    if r.lease != 0 && !crate::leases::exists(r.lease) {
        return Err(KvError::Rejected(crate::leases::ERR_LEASE_NOT_FOUND));
    }
    Ok(())
}

pub(crate) fn range(r: &RangeRequest, rev: &Revision) -> Result<RangeResponse, KvError> {
    check_range(r)?;
    let revision = history::check_readable(r.revision, rev)?;
    let target = SortTarget::try_from(r.sort_target).unwrap_or(SortTarget::Key);
    let mut order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    if order == SortOrder::None && target != SortTarget::Key {
        order = SortOrder::Ascend; // etcd's rule: a sort target implies ascending
    }
    let filtered = has_filters(r);
    let limit = u32::try_from(r.limit.max(0)).unwrap_or(u32::MAX);
    let mut resp = RangeResponse { header: header(rev), ..Default::default() };

    let mut kvs = if revision != rev.current() {
        // A past revision: the whole range from history, then as below.
        let mut all = history::range_at(&r.key, &r.range_end, revision);
        resp.count = all.len() as i64;
        if r.count_only {
            return Ok(resp);
        }
        all.retain(|kv| passes_filters(r, kv));
        sort(&mut all, target, order);
        all
    } else if r.count_only {
        resp.count = keyspace::count(&r.key, &r.range_end);
        return Ok(resp);
    } else if target == SortTarget::Key && !filtered {
        let (kvs, count) = in_key_order(r, limit, order, keyspace::range);
        resp.count = count;
        kvs
    } else {
        let mut all = keyspace::range(&r.key, &r.range_end, 0, false);
        resp.count = all.len() as i64;
        all.retain(|kv| passes_filters(r, kv));
        sort(&mut all, target, order);
        all
    };
    if limit > 0 && kvs.len() > limit as usize {
        kvs.truncate(limit as usize);
        resp.more = true;
    }
    if r.keys_only {
        kvs.iter_mut().for_each(|kv| kv.value.clear());
    }
    resp.kvs = kvs;
    Ok(resp)
}

/// A range the store answers in key order: it applies the limit, asked
/// for one more to learn whether there is more. Returns the items fetched
/// and the count of the whole range (etcd's, before limit and filters):
/// only a range the limit cut short needs counting apart.
fn in_key_order<T>(
    r: &RangeRequest,
    limit: u32,
    order: SortOrder,
    fetch_range: impl FnOnce(&[u8], &[u8], u32, bool) -> Vec<T>,
) -> (Vec<T>, i64) {
    let fetch = if limit == 0 { 0 } else { limit.saturating_add(1) };
    let items = fetch_range(&r.key, &r.range_end, fetch, order == SortOrder::Descend);
    let count = if fetch == 0 || items.len() < fetch as usize {
        items.len() as i64
    } else {
        keyspace::count(&r.key, &r.range_end)
    };
    (items, count)
}

/// A range's answer as an encoded `kvplugin.Response`, for a range at the
/// current revision in key order with nothing filtered out or cleared:
/// each key-value is its record as stored with its key put back
/// ([`keyspace::with_key`]), so none is decoded and encoded again. `None`
/// for any other range, which [`range`] answers. Decodes to exactly what
/// `range` gives (`tests::spliced_ranges_decode_to_what_range_gives`).
pub(crate) fn range_encoded(r: &RangeRequest, rev: &Revision) -> Result<Option<Vec<u8>>, KvError> {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    check_range(r)?;
    let order = SortOrder::try_from(r.sort_order).unwrap_or(SortOrder::None);
    let plain = SortTarget::try_from(r.sort_target) == Ok(SortTarget::Key)
        && !has_filters(r)
        && !r.count_only
        && !r.keys_only;
    if !plain || history::check_readable(r.revision, rev)? != rev.current() {
        return Ok(None);
    }
    let limit = u32::try_from(r.limit.max(0)).unwrap_or(u32::MAX);
    let (mut stored, count) = in_key_order(r, limit, order, keyspace::range_stored);
    let more = limit > 0 && stored.len() > limit as usize;
    if more {
        stored.truncate(limit as usize);
    }
    // The fields other than the key-values, as prost encodes them; the
    // key-values (field 2) follow, which a decoder takes in any order.
    let rest = RangeResponse { header: header(rev), kvs: Vec::new(), more, count };
    let kv_len = |(key, record): &(Vec<u8>, Vec<u8>)| keyspace::with_key_len(key, record);
    let body_len = rest.encoded_len()
        + stored.iter().map(|kv| key_len(2) + encoded_len_varint(kv_len(kv) as u64) + kv_len(kv)).sum::<usize>();
    let mut out = Vec::with_capacity(key_len(1) + encoded_len_varint(body_len as u64) + body_len);
    // kvplugin.Response { response_range (1): ... }
    encode_key(1, WireType::LengthDelimited, &mut out);
    encode_varint(body_len as u64, &mut out);
    rest.encode(&mut out).expect("the buffer has room");
    for kv in &stored {
        encode_key(2, WireType::LengthDelimited, &mut out);
        encode_varint(kv_len(kv) as u64, &mut out);
        keyspace::with_key(&kv.0, &kv.1, &mut out);
    }
    Ok(Some(out))
}

/// Whether a range filters by revision ([`passes_filters`]).
fn has_filters(r: &RangeRequest) -> bool {
    r.min_mod_revision != 0 || r.max_mod_revision != 0 || r.min_create_revision != 0 || r.max_create_revision != 0
}

fn passes_filters(r: &RangeRequest, kv: &KeyValue) -> bool {
    let bound = |min: i64, max: i64, v: i64| (min == 0 || v >= min) && (max == 0 || v <= max);
    bound(r.min_mod_revision, r.max_mod_revision, kv.mod_revision)
        && bound(r.min_create_revision, r.max_create_revision, kv.create_revision)
}

fn sort(kvs: &mut [KeyValue], target: SortTarget, order: SortOrder) {
    match target {
        SortTarget::Key => {} // already in key order
        SortTarget::Version => kvs.sort_by_key(|kv| kv.version),
        SortTarget::Create => kvs.sort_by_key(|kv| kv.create_revision),
        SortTarget::Mod => kvs.sort_by_key(|kv| kv.mod_revision),
        SortTarget::Value => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
    }
    if order == SortOrder::Descend {
        kvs.reverse();
    }
}

pub(crate) fn put(r: &PutRequest, rev: &mut Revision) -> Result<PutResponse, KvError> {
    check_put(r)?;
    // etcd's Put looks the lease up before the key.
    crate::leases::check_attach(r.lease, &r.key)?;
    // The previous version is decoded whole only when its value is needed.
    let prev_record = keyspace::get_record(&r.key);
    let prev = prev_record.as_deref().map(keyspace::Versions::of);
    if (r.ignore_value || r.ignore_lease) && prev.is_none() {
        return Err(KvError::Rejected(ERR_KEY_NOT_FOUND));
    }
    let prev_kv = match &prev_record {
        Some(record) if r.prev_kv || r.ignore_value => Some(keyspace::decode(r.key.clone(), record)),
        _ => None,
    };
    let value = match (&prev_kv, r.ignore_value) {
        (Some(p), true) => &p.value,
        _ => &r.value,
    };
    let old_lease = prev.map_or(0, |p| p.lease);
    let lease = if r.ignore_lease { old_lease } else { r.lease };
    let revision = rev.write();
    let versions = keyspace::Versions {
        create_revision: prev.map_or(revision, |p| p.create_revision),
        version: prev.map_or(1, |p| p.version + 1),
        lease,
    };
    let record = keyspace::put(&r.key, versions, value, rev);
    crate::leases::reattach(&r.key, old_lease, lease);
    emit_put(&r.key, &record, prev_record.as_deref());
    Ok(PutResponse { header: header(rev), prev_kv: prev_kv.filter(|_| r.prev_kv) })
}

pub(crate) fn delete_range(
    r: &DeleteRangeRequest,
    rev: &mut Revision,
) -> Result<DeleteRangeResponse, KvError> {
    if r.key.is_empty() {
        return Err(KvError::Invalid(ERR_EMPTY_KEY));
    }
    let doomed = keyspace::range(&r.key, &r.range_end, 0, false);
    if !doomed.is_empty() {
        let revision = rev.write();
        for kv in &doomed {
            keyspace::delete(&kv.key, rev);
            crate::leases::reattach(&kv.key, kv.lease, 0);
            let tombstone = KeyValue { key: kv.key.clone(), mod_revision: revision, ..Default::default() };
            emit(EventType::Delete, tombstone, Some(kv.clone()));
        }
    }
    Ok(DeleteRangeResponse {
        header: header(rev),
        deleted: doomed.len() as i64,
        prev_kvs: if r.prev_kv { doomed } else { Vec::new() },
    })
}

/// A put's event, `Event { type: PUT, kv, prev_kv }`, from the records as
/// stored: byte for byte what encoding it gives (PUT is 0, which protobuf
/// leaves out), without decoding the previous version or encoding either
/// key-value again.
fn emit_put(key: &[u8], record: &[u8], prev_record: Option<&[u8]>) {
    use prost::encoding::{WireType, encode_key, encode_varint};
    let mut payload = Vec::with_capacity(2 * (key.len() + record.len() + 16));
    for (field, stored) in [(2, Some(record)), (3, prev_record)] {
        let Some(stored) = stored else { continue };
        encode_key(field, WireType::LengthDelimited, &mut payload);
        encode_varint(keyspace::with_key_len(key, stored) as u64, &mut payload);
        keyspace::with_key(key, stored, &mut payload);
    }
    events::emit(key, &payload);
}

fn emit(kind: EventType, kv: KeyValue, prev_kv: Option<KeyValue>) {
    let payload = Event { r#type: kind as i32, kv: Some(kv), prev_kv };
    let key = payload.kv.as_ref().map_or(&[][..], |kv| &kv.key);
    events::emit(key, &payload.encode_to_vec());
}
