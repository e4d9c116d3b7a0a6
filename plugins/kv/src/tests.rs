//! The KV plugin's history, compaction and watch replay, run natively
//! against the SDK's in-memory host.

use prost::Message;
use wasmraft_sdk::testing::TestHost;
use wasmraft_sdk::{ApplyError, PluginInfo, QueryError, store};

use crate::Kv;
use crate::pb::etcdserverpb::{CompactionRequest, DeleteRangeRequest, PutRequest, RangeRequest, TxnRequest};
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
    assert_eq!(h.apply(ignoring("x", true, false, 0)).unwrap_err(), not_found);
    assert_eq!(h.apply(ignoring("x", false, true, 0)).unwrap_err(), not_found);
    assert_eq!(h.apply(ignoring("x", false, true, 7)).unwrap_err(), ApplyError::invalid("etcdserver: lease is provided"));
    put(&mut h, "k", "first");
    h.apply(ignoring("ignored", true, false, 0)).unwrap();
    h.apply(ignoring("second", false, true, 0)).unwrap();
    assert_eq!(range_at(&h, 0).unwrap(), pairs(&[("k", "second")]));
}
