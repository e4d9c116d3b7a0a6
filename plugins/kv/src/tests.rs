//! The KV plugin's history, compaction and watch replay, run natively
//! against the SDK's in-memory host.

use prost::Message;
use wasmraft_sdk::testing::TestHost;
use wasmraft_sdk::{ApplyError, PluginInfo, QueryError, store};

use crate::Kv;
use crate::pb::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::pb::etcdserverpb::request_op::Request as Op;
use crate::pb::etcdserverpb::response_op::Response as Resp2;
use crate::pb::etcdserverpb::{Compare, CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest};
use crate::pb::kvplugin::request::Request as Req;
use crate::pb::kvplugin::response::Response as Resp;
use crate::pb::kvplugin::{EventsRequest, HashRequest, Request, Response};
use crate::pb::mvccpb::event::EventType;

fn bytes(r: Req) -> Vec<u8> {
    Request { request: Some(r) }.encode_to_vec()
}

fn answer(bytes: Vec<u8>) -> Resp {
    Response::decode(bytes.as_slice()).unwrap().response.unwrap()
}

fn put(h: &mut TestHost<Kv>, key: &str, value: &str) -> i64 {
    let r = PutRequest { key: key.into(), value: value.into(), ..Default::default() };
    match answer(h.apply(bytes(Req::RequestPut(r))).unwrap()) {
        Resp::ResponsePut(p) => p.header.unwrap().revision,
        other => panic!("{other:?}"),
    }
}

fn delete(h: &mut TestHost<Kv>, key: &str, range_end: &str) {
    let r = DeleteRangeRequest { key: key.into(), range_end: range_end.into(), prev_kv: false };
    h.apply(bytes(Req::RequestDeleteRange(r))).unwrap();
}

fn compact(h: &mut TestHost<Kv>, revision: i64) -> Result<Vec<u8>, ApplyError> {
    h.apply(bytes(Req::RequestCompaction(CompactionRequest { revision, physical: true })))
}

/// `(key, value)` pairs of the prefix range `[a, z)` as of `revision`.
fn range_at(h: &TestHost<Kv>, revision: i64) -> Result<Vec<(String, String)>, QueryError> {
    let r = RangeRequest { key: "a".into(), range_end: "z".into(), revision, ..Default::default() };
    match answer(h.query(bytes(Req::RequestRange(r)))?) {
        Resp::ResponseRange(r) => {
            assert_eq!(r.count as usize, r.kvs.len());
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
            Ok(r.kvs.iter().map(|kv| (text(&kv.key), text(&kv.value))).collect())
        }
        other => panic!("{other:?}"),
    }
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Five revisions: a=1 (2), b=1 (3), a=2 (4), b deleted (5), c=1 (6).
fn five_revisions() -> TestHost<Kv> {
    let mut h = TestHost::<Kv>::new();
    assert_eq!(put(&mut h, "a", "1"), 2);
    put(&mut h, "b", "1");
    put(&mut h, "a", "2");
    delete(&mut h, "b", "");
    assert_eq!(put(&mut h, "c", "1"), 6);
    h
}

#[test]
fn a_range_reads_the_keyspace_as_of_any_kept_revision() {
    let h = five_revisions();
    assert_eq!(range_at(&h, 1).unwrap(), pairs(&[]));
    assert_eq!(range_at(&h, 2).unwrap(), pairs(&[("a", "1")]));
    assert_eq!(range_at(&h, 3).unwrap(), pairs(&[("a", "1"), ("b", "1")]));
    assert_eq!(range_at(&h, 4).unwrap(), pairs(&[("a", "2"), ("b", "1")]));
    assert_eq!(range_at(&h, 5).unwrap(), pairs(&[("a", "2")]));
    assert_eq!(range_at(&h, 6).unwrap(), pairs(&[("a", "2"), ("c", "1")]));
    assert_eq!(range_at(&h, 0).unwrap(), range_at(&h, 6).unwrap());
    let future = range_at(&h, 7).unwrap_err();
    assert_eq!(future, QueryError::rejected("etcdserver: mvcc: required revision is a future revision"));
}

#[test]
fn a_single_key_read_at_a_revision_sees_its_version_then() {
    let h = five_revisions();
    let get = |revision: i64| {
        let r = RangeRequest { key: "b".into(), revision, ..Default::default() };
        match answer(h.query(bytes(Req::RequestRange(r))).unwrap()) {
            Resp::ResponseRange(r) => r.kvs.into_iter().map(|kv| (kv.mod_revision, kv.version)).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(get(2), []);
    assert_eq!(get(3), [(3, 1)]);
    assert_eq!(get(4), [(3, 1)]);
    assert_eq!(get(5), []);
}

#[test]
fn compaction_refuses_older_reads_and_keeps_every_newer_one_exact() {
    let mut h = five_revisions();
    let before: Vec<_> = (4..=6).map(|r| range_at(&h, r).unwrap()).collect();
    compact(&mut h, 4).unwrap();
    let compacted = QueryError::rejected("etcdserver: mvcc: required revision has been compacted");
    assert_eq!(range_at(&h, 3).unwrap_err(), compacted);
    let after: Vec<_> = (4..=6).map(|r| range_at(&h, r).unwrap()).collect();
    assert_eq!(before, after);
    // Removed: a's version at 2 (superseded at 4). Kept: b's at 3 (still b
    // as of 4) and everything newer.
    let history = |key: &str| {
        let all = store::scan(&crate::keyspace::history_prefix(key.as_bytes()), &[0x04], 0, false);
        all.iter().filter(|(k, _)| crate::keyspace::parse_history_key(k).unwrap().0 == key.as_bytes()).count()
    };
    assert_eq!((history("a"), history("b"), history("c")), (1, 2, 1), "a@4 | b@3 b@5 | c@6");
    assert_eq!(compact(&mut h, 4).unwrap_err(), ApplyError::rejected("etcdserver: mvcc: required revision has been compacted"));
    assert_eq!(compact(&mut h, 7).unwrap_err(), ApplyError::rejected("etcdserver: mvcc: required revision is a future revision"));
    // Compacting past b's deletion removes every trace of b.
    compact(&mut h, 6).unwrap();
    assert_eq!(store::scan(&crate::keyspace::history_prefix(b"b"), &crate::keyspace::history_prefix(b"c"), 0, false), []);
    assert_eq!(range_at(&h, 6).unwrap(), pairs(&[("a", "2"), ("c", "1")]));
}

#[test]
fn compaction_removal_continues_with_later_writes_until_done() {
    let mut h = TestHost::<Kv>::new();
    // More revisions than one Compact removes at once, all of one key.
    for i in 0..5000 {
        put(&mut h, "k", &i.to_string());
    }
    compact(&mut h, 5001).unwrap();
    let log = || store::scan(&[crate::keyspace::LOG], &[crate::keyspace::LOG + 1], 0, false).len();
    let left = log();
    assert!(left > 0 && left < 5000, "a first batch is removed, not all: {left}");
    for i in 0..1000 {
        put(&mut h, "other", &i.to_string());
    }
    assert_eq!(log(), 1001, "the compacted records are gone; 1001 newer ones stay");
    assert_eq!(range_at(&h, 5001).unwrap(), pairs(&[("k", "4999")]));
    assert_eq!(range_at(&h, 5002).unwrap(), pairs(&[("k", "4999"), ("other", "0")]));
}

#[test]
fn events_replay_every_change_from_a_revision_in_order() {
    let h = five_revisions();
    let events = |start: i64, prev_kv: bool| {
        let r = EventsRequest { key: "a".into(), range_end: "z".into(), start_revision: start, prev_kv, limit: 0 };
        match answer(h.query(bytes(Req::RequestEvents(r))).unwrap()) {
            Resp::ResponseEvents(e) => e,
            other => panic!("{other:?}"),
        }
    };
    let all = events(1, true);
    let summary: Vec<_> = all
        .events
        .iter()
        .map(|e| {
            let kv = e.kv.as_ref().unwrap();
            (e.r#type, String::from_utf8(kv.key.clone()).unwrap(), kv.mod_revision, e.prev_kv.as_ref().map(|p| p.mod_revision))
        })
        .collect();
    let (put, del) = (EventType::Put as i32, EventType::Delete as i32);
    assert_eq!(
        summary,
        [(put, "a".into(), 2, None), (put, "b".into(), 3, None), (put, "a".into(), 4, Some(2)), (del, "b".into(), 5, Some(3)), (put, "c".into(), 6, None)]
    );
    assert_eq!(all.header.unwrap().revision, 6);
    assert!(!all.more);
    assert_eq!(events(5, false).events.len(), 2);
    assert!(events(5, false).events[0].prev_kv.is_none());
    assert_eq!(events(7, false).events.len(), 0);
}

#[test]
fn events_below_the_compacted_revision_name_it() {
    let mut h = five_revisions();
    compact(&mut h, 4).unwrap();
    let r = EventsRequest { key: "a".into(), range_end: "z".into(), start_revision: 3, ..Default::default() };
    match answer(h.query(bytes(Req::RequestEvents(r))).unwrap()) {
        Resp::ResponseEvents(e) => {
            assert_eq!(e.compact_revision, 4);
            assert!(e.events.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_long_replay_comes_in_pages_of_whole_revisions() {
    let mut h = TestHost::<Kv>::new();
    for i in 0..30 {
        put(&mut h, &format!("a{i:02}"), "v");
    }
    // One revision that changes 30 keys.
    delete(&mut h, "a", "b");
    let mut start = 1;
    let mut seen = Vec::new();
    loop {
        let r = EventsRequest { key: "a".into(), range_end: "b".into(), start_revision: start, limit: 7, ..Default::default() };
        let Resp::ResponseEvents(e) = answer(h.query(bytes(Req::RequestEvents(r))).unwrap()) else { panic!() };
        seen.extend(e.events.iter().map(|e| e.kv.as_ref().unwrap().mod_revision));
        if !e.more {
            break;
        }
        start = e.next_revision;
    }
    let mut expected: Vec<i64> = (2..=31).collect();
    expected.extend([32; 30]);
    assert_eq!(seen, expected);
}

#[test]
fn hashes_of_one_revision_agree_before_and_after_later_writes_and_compaction() {
    let mut h = five_revisions();
    let hash = |h: &TestHost<Kv>, revision: i64| {
        let mut req = HashRequest { revision, ..Default::default() };
        loop {
            let Resp::ResponseHash(r) = answer(h.query(bytes(Req::RequestHash(req.clone()))).unwrap()) else { panic!() };
            if r.last_key.is_empty() {
                return r.crc;
            }
            req.after = r.last_key;
            req.crc = r.crc;
        }
    };
    let at6 = hash(&h, 6);
    assert_ne!(at6, hash(&h, 5));
    put(&mut h, "d", "1");
    compact(&mut h, 6).unwrap();
    assert_eq!(hash(&h, 6), at6, "as of 6, from history");
    assert_ne!(hash(&h, 0), at6);
}

#[test]
fn a_deploy_over_a_keyspace_without_history_starts_it() {
    let mut h = five_revisions();
    // As the KV plugin before history left it: current keys and revision only.
    for (k, _) in store::scan(&[0x02], &[0x04], 0, false) {
        store::delete(&k);
    }
    store::delete(b"\x00compact");
    let kv = PluginInfo { name: "wasmraft-kv".into(), version: "0.1.0".into(), sdk_version: String::new() };
    h.migrate(&kv).unwrap();
    assert_eq!(range_at(&h, 6).unwrap(), pairs(&[("a", "2"), ("c", "1")]));
    assert_eq!(range_at(&h, 5).unwrap_err(), QueryError::rejected("etcdserver: mvcc: required revision has been compacted"));
    put(&mut h, "a", "3");
    assert_eq!(range_at(&h, 6).unwrap(), pairs(&[("a", "2"), ("c", "1")]));
}

#[test]
fn a_txn_reads_past_revisions_too() {
    let mut h = five_revisions();
    let txn = TxnRequest {
        success: vec![crate::pb::etcdserverpb::RequestOp {
            request: Some(crate::pb::etcdserverpb::request_op::Request::RequestRange(RangeRequest {
                key: "b".into(),
                revision: 3,
                ..Default::default()
            })),
        }],
        ..Default::default()
    };
    let Resp::ResponseTxn(t) = answer(h.apply(bytes(Req::RequestTxn(txn))).unwrap()) else { panic!() };
    assert_eq!(format!("{:?}", t.responses).matches("mod_revision: 3").count(), 1);
}

/// Random puts, deletes and compactions against a model that keeps every
/// revision's keyspace: each kept revision reads exactly as the model, and
/// the history holds nothing a read can no longer reach.
#[test]
fn random_histories_read_exactly_as_a_model_after_compactions() {
    use std::collections::BTreeMap;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut h = TestHost::<Kv>::new();
    let mut model: Vec<BTreeMap<String, String>> = vec![BTreeMap::new(), BTreeMap::new()]; // revisions 0 and 1
    let mut compacted = 0;
    for step in 0..600 {
        let mut state = model.last().unwrap().clone();
        let key = format!("k{}", next(12));
        match next(10) {
            0..=5 => {
                put(&mut h, &key, &step.to_string());
                state.insert(key, step.to_string());
            }
            6 | 7 => {
                let end = format!("k{}", next(12));
                delete(&mut h, &key, &end);
                let doomed: Vec<String> = state.keys().filter(|k| **k >= key && **k < end).cloned().collect();
                if doomed.is_empty() {
                    continue; // nothing changed: no new revision
                }
                doomed.iter().for_each(|k| drop(state.remove(k)));
            }
            _ => {
                let current = model.len() as i64 - 1;
                let target = compacted + 1 + next((current - compacted).max(1) as u64) as i64;
                if target > compacted && target <= current {
                    compact(&mut h, target).unwrap();
                    compacted = target;
                }
                continue;
            }
        }
        model.push(state);
    }
    let current = model.len() as i64 - 1;
    for revision in compacted.max(1)..=current {
        let expected: Vec<(String, String)> = model[revision as usize].clone().into_iter().collect();
        assert_eq!(range_at(&h, revision).unwrap(), expected, "revision {revision}");
    }
    if compacted > 1 {
        assert!(range_at(&h, compacted - 1).is_err());
    }
    // Every stored version is reachable: the newest at or below the
    // compacted revision (if not a deletion) or a later one.
    let history = store::scan(&[0x03], &[0x04], 0, false);
    let mut per_key: BTreeMap<Vec<u8>, Vec<i64>> = BTreeMap::new();
    for (k, _) in &history {
        let (key, r) = crate::keyspace::parse_history_key(k).unwrap();
        per_key.entry(key).or_default().push(r);
    }
    let log = store::scan(&[0x02], &[0x03], 0, false);
    assert!(compacted > 100, "the run compacted: {compacted}");
    assert!(log.iter().all(|(k, _)| crate::keyspace::parse_log_key(k).unwrap() >= compacted), "every record below the compacted revision is gone");
    for (key, revisions) in per_key {
        let below = revisions.iter().filter(|r| **r < compacted).count();
        assert!(below <= 1, "{key:?} keeps {below} versions below the compacted revision: {revisions:?}");
    }
}

#[test]
fn ignore_value_and_ignore_lease_need_the_key_and_keep_what_they_ignore() {
    let mut h = TestHost::<Kv>::new();
    let ignoring = |value: &str, ignore_value, ignore_lease, lease| {
        bytes(Req::RequestPut(PutRequest { key: "k".into(), value: value.into(), ignore_value, ignore_lease, lease, prev_kv: false }))
    };
    let not_found = ApplyError::rejected("etcdserver: key not found");
    assert_eq!(h.apply(ignoring("", true, false, 0)).unwrap_err(), not_found);
    assert_eq!(h.apply(ignoring("x", false, true, 0)).unwrap_err(), not_found);
    assert_eq!(h.apply(ignoring("x", false, true, 7)).unwrap_err(), ApplyError::invalid("etcdserver: lease is provided"));
    put(&mut h, "k", "first");
    // etcd refuses a value to ignore, whether or not the key exists.
    assert_eq!(h.apply(ignoring("ignored", true, false, 0)).unwrap_err(), ApplyError::invalid("etcdserver: value is provided"));
    h.apply(ignoring("", true, false, 0)).unwrap();
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[("k", "first")]));
    h.apply(ignoring("second", false, true, 0)).unwrap();
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[("k", "second")]));
}

fn put_op(key: &str, value: &str) -> RequestOp {
    RequestOp { request: Some(Op::RequestPut(PutRequest { key: key.into(), value: value.into(), ..Default::default() })) }
}

fn delete_op(key: &str, range_end: &str) -> RequestOp {
    RequestOp { request: Some(Op::RequestDeleteRange(DeleteRangeRequest { key: key.into(), range_end: range_end.into(), prev_kv: false })) }
}

fn range_op(key: &str) -> RequestOp {
    RequestOp { request: Some(Op::RequestRange(RangeRequest { key: key.into(), ..Default::default() })) }
}

fn txn_op(txn: TxnRequest) -> RequestOp {
    RequestOp { request: Some(Op::RequestTxn(txn)) }
}

fn then(success: Vec<RequestOp>) -> TxnRequest {
    TxnRequest { success, ..Default::default() }
}

fn apply_txn(h: &mut TestHost<Kv>, txn: TxnRequest) -> Result<crate::pb::etcdserverpb::TxnResponse, ApplyError> {
    match answer(h.apply(bytes(Req::RequestTxn(txn)))?) {
        Resp::ResponseTxn(t) => Ok(t),
        other => panic!("{other:?}"),
    }
}

const DUPLICATE: &str = "etcdserver: duplicate key given in txn request";

#[test]
fn a_txn_writes_a_key_once_across_nested_txns_as_etcd_checks() {
    let mut h = TestHost::<Kv>::new();
    let refused = |h: &mut TestHost<Kv>, txn: TxnRequest| assert_eq!(apply_txn(h, txn).unwrap_err(), ApplyError::invalid(DUPLICATE));
    refused(&mut h, then(vec![put_op("k", "1"), put_op("k", "2")]));
    refused(&mut h, then(vec![put_op("k", "1"), txn_op(then(vec![put_op("k", "2")]))]));
    refused(&mut h, then(vec![txn_op(then(vec![put_op("k", "2")])), put_op("k", "1")]));
    refused(&mut h, then(vec![delete_op("a", "c"), put_op("b", "1")]));
    refused(&mut h, then(vec![delete_op("b", ""), txn_op(then(vec![put_op("b", "1")]))]));
    refused(&mut h, then(vec![txn_op(then(vec![delete_op("a", "c")])), put_op("b", "1")]));
    refused(&mut h, then(vec![txn_op(then(vec![put_op("b", "1")])), txn_op(then(vec![put_op("b", "2")]))]));
    // Nothing of a refused txn was written.
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[]));

    // Allowed, as by etcd: the two branches of one nested txn put the same
    // key (only one runs); a put outside a deleted range; and a delete
    // "from key" (range end "\0"), which etcd's check covers nothing with.
    let branches = TxnRequest { success: vec![put_op("b", "then")], failure: vec![put_op("b", "else")], ..Default::default() };
    apply_txn(&mut h, then(vec![txn_op(branches)])).unwrap();
    apply_txn(&mut h, then(vec![delete_op("a", "b"), put_op("b", "2")])).unwrap();
    apply_txn(&mut h, then(vec![put_op("c", "1"), delete_op("a", "\0"), put_op("d", "1")])).unwrap();
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[("d", "1")]), "in op order: c put, then a.. deleted, then d put");
}

#[test]
fn nested_compares_read_the_state_before_the_txn_writes() {
    let mut h = TestHost::<Kv>::new();
    put(&mut h, "k", "old");
    let is_old = Compare {
        key: "k".into(),
        target: CompareTarget::Value as i32,
        result: CompareResult::Equal as i32,
        target_union: Some(TargetUnion::Value("old".into())),
        ..Default::default()
    };
    let nested = TxnRequest { compare: vec![is_old], success: vec![put_op("seen", "old")], failure: vec![put_op("seen", "new")] };
    let t = apply_txn(&mut h, then(vec![put_op("k", "new"), txn_op(nested)])).unwrap();
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[("k", "new"), ("seen", "old")]));
    let Some(Resp2::ResponseTxn(inner)) = &t.responses[1].response else { panic!("{t:?}") };
    assert!(inner.succeeded);
}

#[test]
fn a_txn_holds_at_most_128_ops_per_level_as_etcd_by_default() {
    let mut h = TestHost::<Kv>::new();
    let too_many = ApplyError::invalid("etcdserver: too many operations in txn request");
    let ranges = |n: usize| (0..n).map(|_| range_op("a")).collect::<Vec<_>>();
    apply_txn(&mut h, then(ranges(128))).unwrap();
    assert_eq!(apply_txn(&mut h, then(ranges(129))).unwrap_err(), too_many);
    let compares = (0..129).map(|_| Compare { key: "a".into(), ..Default::default() }).collect();
    assert_eq!(apply_txn(&mut h, TxnRequest { compare: compares, ..Default::default() }).unwrap_err(), too_many);
    // A nested txn gets what its parent's largest list left: 128 - 100.
    let nested = |n: usize| {
        let mut ops = ranges(99);
        ops.push(txn_op(then(ranges(n))));
        then(ops)
    };
    apply_txn(&mut h, nested(28)).unwrap();
    assert_eq!(apply_txn(&mut h, nested(29)).unwrap_err(), too_many);
}

#[test]
fn a_txn_is_checked_whole_before_it_runs() {
    let mut h = TestHost::<Kv>::new();
    let no_key = Compare { key: Vec::new(), ..Default::default() };
    let empty_key = ApplyError::invalid("etcdserver: key is not provided");
    assert_eq!(apply_txn(&mut h, TxnRequest { compare: vec![no_key], ..Default::default() }).unwrap_err(), empty_key);
    // An op of the branch that does not run is checked too.
    let failure = |op: RequestOp| TxnRequest { success: vec![put_op("a", "1")], failure: vec![op], ..Default::default() };
    assert_eq!(apply_txn(&mut h, failure(put_op("", "1"))).unwrap_err(), empty_key);
    assert_eq!(apply_txn(&mut h, failure(delete_op("", ""))).unwrap_err(), empty_key);
    let empty_op = ApplyError::invalid("etcdserver: key not found");
    assert_eq!(apply_txn(&mut h, failure(RequestOp { request: None })).unwrap_err(), empty_op);
    let value_given = PutRequest { key: "a".into(), value: "v".into(), ignore_value: true, ..Default::default() };
    let value_given = RequestOp { request: Some(Op::RequestPut(value_given)) };
    assert_eq!(apply_txn(&mut h, failure(value_given)).unwrap_err(), ApplyError::invalid("etcdserver: value is provided"));
    let bad_sort = RangeRequest { key: "a".into(), sort_order: 7, ..Default::default() };
    let bad_sort = RequestOp { request: Some(Op::RequestRange(bad_sort)) };
    assert_eq!(apply_txn(&mut h, failure(bad_sort)).unwrap_err(), ApplyError::invalid("etcdserver: invalid sort option"));
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[]));
    // A range at the revision the txn itself writes is a future one, as
    // etcd checks the path against the state before the txn.
    let at_own = RangeRequest { key: "a".into(), revision: 2, ..Default::default() };
    let txn = then(vec![put_op("a", "1"), RequestOp { request: Some(Op::RequestRange(at_own)) }]);
    let future = ApplyError::rejected("etcdserver: mvcc: required revision is a future revision");
    assert_eq!(apply_txn(&mut h, txn).unwrap_err(), future);
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[]));
}

/// etcd's count is of the whole range at the revision, whatever the limit,
/// the order or the revision filters cut from the answer.
#[test]
fn a_range_counts_every_key_in_it_whatever_it_returns() {
    let mut h = TestHost::<Kv>::new();
    for key in ["a", "b", "c", "d", "e"] {
        put(&mut h, key, "1");
    }
    let range = |r: RangeRequest| match answer(h.query(bytes(Req::RequestRange(r))).unwrap()) {
        Resp::ResponseRange(r) => (r.count, r.kvs.len(), r.more),
        other => panic!("{other:?}"),
    };
    let all = || RangeRequest { key: "a".into(), range_end: "z".into(), ..Default::default() };
    assert_eq!(range(all()), (5, 5, false));
    for (limit, returned, more) in [(1, 1, true), (4, 4, true), (5, 5, false), (6, 5, false)] {
        assert_eq!(range(RangeRequest { limit, ..all() }), (5, returned, more), "limit {limit}");
    }
    use crate::pb::etcdserverpb::range_request::SortOrder;
    let descending = RangeRequest { limit: 2, sort_order: SortOrder::Descend as i32, ..all() };
    assert_eq!(range(descending), (5, 2, true));
    // Revisions 2..=6: keys d and e were put at 5 and 6.
    assert_eq!(range(RangeRequest { min_mod_revision: 5, ..all() }), (5, 2, false));
    assert_eq!(range(RangeRequest { count_only: true, ..all() }), (5, 0, false));
    assert_eq!(range(RangeRequest { key: "c".into(), ..Default::default() }), (1, 1, false));
    assert_eq!(range(RangeRequest { key: "x".into(), ..Default::default() }), (0, 0, false));
    assert_eq!(range(RangeRequest { key: "b".into(), range_end: "d".into(), limit: 1, ..Default::default() }), (2, 1, true));
}

/// A put's event is built from the records as stored, not encoded again:
/// its bytes must be exactly what encoding the event gives, with and
/// without a previous version, a lease, and a key holding a zero byte.
#[test]
fn a_puts_event_is_the_encoding_of_the_event() {
    use crate::pb::mvccpb::{Event, KeyValue};
    let mut h = TestHost::<Kv>::new();
    let key = b"k\x00ey".to_vec();
    for (value, lease_attach) in [(vec![1u8; 300], false), (Vec::new(), false), (b"third".to_vec(), true)] {
        let before = crate::keyspace::get(&key);
        let mut lease = 0;
        if lease_attach {
            let grant = crate::pb::etcdserverpb::LeaseGrantRequest { ttl: 60, id: 77 };
            h.apply(bytes(Req::RequestLeaseGrant(grant))).unwrap();
            h.take_events();
            lease = 77;
        }
        let r = PutRequest { key: key.clone(), value: value.clone(), lease, ..Default::default() };
        h.apply(bytes(Req::RequestPut(r))).unwrap();
        let events = h.take_events();
        assert_eq!(events.len(), 1);
        let now: KeyValue = crate::keyspace::get(&key).unwrap();
        assert_eq!(now.value, value);
        let expected = Event { r#type: EventType::Put as i32, kv: Some(now), prev_kv: before };
        assert_eq!(events[0].payload, expected.encode_to_vec());
        assert_eq!(events[0].key, key);
    }
}

#[test]
fn spliced_ranges_decode_to_what_range_gives() {
    use crate::keyspace::Revision;
    use crate::pb::etcdserverpb::range_request::{SortOrder, SortTarget};
    let mut h = TestHost::<Kv>::new();
    for (k, v) in [("a", "1"), ("a\0", ""), ("b", "2"), ("c", "3"), ("d", "4"), ("b", "22")] {
        put(&mut h, k, v);
    }
    let range = |key: &str, end: &str| RangeRequest { key: key.into(), range_end: end.into(), ..Default::default() };
    // Each request, and whether it is answered from the stored records.
    let cases = [
        (range("b", ""), true),
        (range("bb", ""), true),
        (range("a", "z"), true),
        (RangeRequest { limit: 2, ..range("a", "z") }, true),
        (RangeRequest { limit: 5, ..range("a", "z") }, true),
        (RangeRequest { limit: 9, ..range("a", "z") }, true),
        (RangeRequest { sort_order: SortOrder::Descend as i32, limit: 2, ..range("a", "z") }, true),
        (RangeRequest { sort_order: SortOrder::Ascend as i32, ..range("b", "\0") }, true),
        (RangeRequest { revision: 7, ..range("a", "z") }, true),
        (range("z", "a"), true),
        (RangeRequest { revision: 3, ..range("a", "z") }, false),
        (RangeRequest { keys_only: true, ..range("a", "z") }, false),
        (RangeRequest { count_only: true, ..range("a", "z") }, false),
        (RangeRequest { sort_target: SortTarget::Value as i32, ..range("a", "z") }, false),
        (RangeRequest { min_mod_revision: 4, ..range("a", "z") }, false),
    ];
    for (r, splices) in cases {
        let rev = Revision::begin();
        let expected = crate::ops::range(&r, &rev).unwrap();
        match crate::ops::range_encoded(&r, &rev).unwrap() {
            Some(encoded) => {
                assert!(splices, "{r:?}");
                assert_eq!(answer(encoded), Resp::ResponseRange(expected.clone()), "{r:?}");
            }
            None => assert!(!splices, "{r:?}"),
        }
        // Through the plugin's query, either way.
        assert_eq!(answer(h.query(bytes(Req::RequestRange(r.clone()))).unwrap()), Resp::ResponseRange(expected), "{r:?}");
    }
    // Refused as the plain range refuses.
    let rev = Revision::begin();
    assert!(crate::ops::range_encoded(&range("", "z"), &rev).is_err());
    compact(&mut h, 4).unwrap();
    assert!(crate::ops::range_encoded(&RangeRequest { revision: 3, ..range("a", "z") }, &Revision::begin()).is_err());
}
