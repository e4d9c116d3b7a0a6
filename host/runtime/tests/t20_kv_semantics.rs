//! The KV plugin follows etcd's documented v3 semantics. Each case runs
//! real etcd protobuf messages through the real plugin.

mod support;

use prost::Message;
use support::{Replica, kv_plugin};
use wasmraft_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, ResponseOp, TxnRequest,
    compare::{CompareResult, CompareTarget, TargetUnion},
    range_request::{SortOrder, SortTarget},
    request_op::Request,
    response_op::Response,
};
use wasmraft_proto::mvccpb::{Event, KeyValue, event::EventType};
use wasmraft_runtime::{EntryError, QueryError};

struct Kv(Replica);

fn op(r: Request) -> Vec<u8> {
    RequestOp { request: Some(r) }.encode_to_vec()
}

fn put_req(k: &str, v: &str) -> PutRequest {
    PutRequest { key: k.into(), value: v.into(), ..Default::default() }
}

fn range_req(k: &str, end: &str) -> RangeRequest {
    RangeRequest { key: k.into(), range_end: end.into(), ..Default::default() }
}

impl Kv {
    fn new() -> Self {
        Kv(Replica::new(&kv_plugin()))
    }

    fn exec(&mut self, r: Request) -> Result<Response, EntryError> {
        let bytes = self.0.apply_one(op(r))?;
        Ok(ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap())
    }

    fn put(&mut self, k: &str, v: &str) -> i64 {
        match self.exec(Request::RequestPut(put_req(k, v))).unwrap() {
            Response::ResponsePut(p) => p.header.unwrap().revision,
            other => panic!("{other:?}"),
        }
    }

    fn query(&self, r: RangeRequest) -> Result<wasmraft_proto::etcdserverpb::RangeResponse, QueryError> {
        let bytes = self.0.query(&op(Request::RequestRange(r)))?;
        match ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() {
            Response::ResponseRange(r) => Ok(r),
            other => panic!("{other:?}"),
        }
    }

    fn keys(&self, r: RangeRequest) -> Vec<String> {
        self.query(r).unwrap().kvs.into_iter().map(|kv| String::from_utf8(kv.key).unwrap()).collect()
    }

    fn get(&self, k: &str) -> Option<KeyValue> {
        self.query(range_req(k, "")).unwrap().kvs.pop()
    }
}

#[test]
fn revisions_versions_and_create_mod_revisions_follow_etcd() {
    let mut kv = Kv::new();
    // etcd's store starts at revision 1; each write entry adds one.
    assert_eq!(kv.query(range_req("a", "")).unwrap().header.unwrap().revision, 1);
    assert_eq!(kv.put("a", "1"), 2);
    assert_eq!(kv.put("b", "1"), 3);
    assert_eq!(kv.put("a", "2"), 4);
    let a = kv.get("a").unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version, a.value.as_slice()), (2, 4, 2, &b"2"[..]));
    // Delete resets the version; re-creating starts a new life.
    kv.exec(Request::RequestDeleteRange(DeleteRangeRequest { key: "a".into(), ..Default::default() })).unwrap();
    assert!(kv.get("a").is_none());
    assert_eq!(kv.put("a", "3"), 6);
    let a = kv.get("a").unwrap();
    assert_eq!((a.create_revision, a.mod_revision, a.version), (6, 6, 1));
    // A delete of nothing does not advance the revision.
    kv.exec(Request::RequestDeleteRange(DeleteRangeRequest { key: "zz".into(), ..Default::default() })).unwrap();
    assert_eq!(kv.put("c", "1"), 7);
}

#[test]
fn put_returns_prev_kv_only_when_asked_and_ignore_value_keeps_the_value() {
    let mut kv = Kv::new();
    kv.put("k", "old");
    let r = kv.exec(Request::RequestPut(PutRequest { prev_kv: true, ..put_req("k", "new") })).unwrap();
    let Response::ResponsePut(p) = r else { panic!() };
    assert_eq!(p.prev_kv.unwrap().value, b"old");
    let Response::ResponsePut(p) = kv.exec(Request::RequestPut(put_req("k", "newer"))).unwrap() else { panic!() };
    assert!(p.prev_kv.is_none());
    kv.exec(Request::RequestPut(PutRequest { ignore_value: true, ..put_req("k", "") })).unwrap();
    assert_eq!(kv.get("k").unwrap().value, b"newer");
    assert_eq!(kv.get("k").unwrap().version, 4, "ignore_value still counts as a modification");
    let err = kv.exec(Request::RequestPut(PutRequest { ignore_value: true, ..put_req("none", "") })).unwrap_err();
    assert_eq!(err, EntryError::Rejected("etcdserver: key not found".into()));
}

#[test]
fn ranges_prefixes_limits_and_flags() {
    let mut kv = Kv::new();
    for k in ["a", "ab", "abc", "b", "c/1", "c/2", "c/3"] {
        kv.put(k, &format!("v-{k}"));
    }
    let cases: Vec<(&str, RangeRequest, Vec<&str>)> = vec![
        ("single key", range_req("ab", ""), vec!["ab"]),
        ("missing key", range_req("zz", ""), vec![]),
        ("[a, b)", range_req("a", "b"), vec!["a", "ab", "abc"]),
        ("prefix c/", range_req("c/", "c0"), vec!["c/1", "c/2", "c/3"]),
        ("from key on (range_end \\0)", range_req("b", "\0"), vec!["b", "c/1", "c/2", "c/3"]),
        ("all keys", range_req("\0", "\0"), vec!["a", "ab", "abc", "b", "c/1", "c/2", "c/3"]),
        ("empty range (end <= key)", range_req("c", "a"), vec![]),
        ("limit", RangeRequest { limit: 2, ..range_req("a", "\0") }, vec!["a", "ab"]),
        (
            "descending by key",
            RangeRequest { sort_order: SortOrder::Descend as i32, ..range_req("a", "b") },
            vec!["abc", "ab", "a"],
        ),
        (
            "descending with limit",
            RangeRequest { sort_order: SortOrder::Descend as i32, limit: 2, ..range_req("a", "\0") },
            vec!["c/3", "c/2"],
        ),
    ];
    for (name, req, want) in cases {
        assert_eq!(kv.keys(req), want, "{name}");
    }

    let r = kv.query(RangeRequest { limit: 2, ..range_req("a", "\0") }).unwrap();
    assert!(r.more, "more keys than the limit");
    assert_eq!(r.count, 7, "count is the whole range");
    let r = kv.query(RangeRequest { count_only: true, ..range_req("c/", "c0") }).unwrap();
    assert_eq!((r.count, r.kvs.len()), (3, 0));
    let r = kv.query(RangeRequest { keys_only: true, ..range_req("a", "b") }).unwrap();
    assert!(r.kvs.iter().all(|kv| kv.value.is_empty()) && r.kvs.len() == 3);
}

#[test]
fn sort_targets_and_revision_filters() {
    let mut kv = Kv::new();
    kv.put("x", "3"); // rev 2
    kv.put("y", "1"); // rev 3
    kv.put("z", "2"); // rev 4
    kv.put("x", "4"); // rev 5
    let by = |target: SortTarget, order: SortOrder| RangeRequest {
        sort_target: target as i32,
        sort_order: order as i32,
        ..range_req("x", "\0")
    };
    assert_eq!(kv.keys(by(SortTarget::Mod, SortOrder::None)), ["y", "z", "x"], "a target implies ascending");
    assert_eq!(kv.keys(by(SortTarget::Value, SortOrder::Descend)), ["x", "z", "y"]);
    assert_eq!(kv.keys(by(SortTarget::Create, SortOrder::Ascend)), ["x", "y", "z"]);
    assert_eq!(kv.keys(by(SortTarget::Version, SortOrder::Descend))[0], "x");
    let filtered = RangeRequest { min_mod_revision: 3, max_mod_revision: 4, ..range_req("x", "\0") };
    assert_eq!(kv.keys(filtered), ["y", "z"]);
    let filtered = RangeRequest { min_create_revision: 3, ..range_req("x", "\0") };
    assert_eq!(kv.keys(filtered), ["y", "z"]);
}

#[test]
fn past_revisions_read_as_they_were_and_future_ones_are_refused() {
    let mut kv = Kv::new();
    kv.put("a", "1");
    kv.put("a", "2"); // current revision 3
    let value_at = |revision| kv.query(RangeRequest { revision, ..range_req("a", "") }).unwrap().kvs.pop().map(|kv| kv.value);
    assert_eq!(value_at(3), Some(b"2".to_vec()));
    assert_eq!(value_at(2), Some(b"1".to_vec()), "the past revision, through the real plugin and store");
    assert_eq!(value_at(1), None, "before the first put");
    assert_eq!(
        kv.query(RangeRequest { revision: 9, ..range_req("a", "") }).unwrap_err(),
        QueryError::Rejected("etcdserver: mvcc: required revision is a future revision".into())
    );
}

#[test]
fn delete_range_returns_prev_kvs_and_emits_delete_events() {
    let mut kv = Kv::new();
    kv.put("p/1", "a");
    kv.put("p/2", "b");
    kv.put("q", "c");
    let batch = kv.0.apply(&[op(Request::RequestDeleteRange(DeleteRangeRequest {
        key: "p/".into(),
        range_end: "p0".into(),
        prev_kv: true,
    }))]);
    let Response::ResponseDeleteRange(d) =
        ResponseOp::decode(batch.outcomes[0].as_ref().unwrap().as_slice()).unwrap().response.unwrap()
    else {
        panic!()
    };
    assert_eq!(d.deleted, 2);
    assert_eq!(d.prev_kvs.iter().map(|kv| kv.value.clone()).collect::<Vec<_>>(), [b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(d.header.unwrap().revision, 5);
    let events: Vec<Event> = batch.events.iter().map(|e| Event::decode(e.payload.as_slice()).unwrap()).collect();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.r#type == EventType::Delete as i32));
    assert_eq!(events[0].kv.as_ref().unwrap().mod_revision, 5);
    assert_eq!(events[0].prev_kv.as_ref().unwrap().value, b"a");
    assert_eq!(kv.keys(range_req("\0", "\0")), ["q"]);
}

#[test]
fn put_emits_a_put_event_with_the_previous_value() {
    let mut kv = Kv::new();
    kv.put("e", "1");
    let batch = kv.0.apply(&[op(Request::RequestPut(put_req("e", "2")))]);
    assert_eq!(batch.events.len(), 1);
    assert_eq!(batch.events[0].key, b"e");
    let ev = Event::decode(batch.events[0].payload.as_slice()).unwrap();
    assert_eq!(ev.r#type, EventType::Put as i32);
    assert_eq!(ev.kv.unwrap().value, b"2");
    assert_eq!(ev.prev_kv.unwrap().value, b"1");
}

fn cmp(key: &str, target: CompareTarget, result: CompareResult, value: TargetUnion) -> Compare {
    Compare { key: key.into(), target: target as i32, result: result as i32, target_union: Some(value), ..Default::default() }
}

fn txn_succeeded(kv: &mut Kv, compare: Vec<Compare>) -> bool {
    let r = kv
        .exec(Request::RequestTxn(TxnRequest {
            compare,
            success: vec![RequestOp { request: Some(Request::RequestRange(range_req("k", ""))) }],
            failure: vec![],
        }))
        .unwrap();
    let Response::ResponseTxn(t) = r else { panic!() };
    t.succeeded
}

#[test]
fn txn_compares_on_value_version_create_and_mod_revision() {
    use CompareResult::*;
    use CompareTarget::*;
    let mut kv = Kv::new();
    kv.put("k", "m"); // rev 2: create 2, mod 2, version 1
    kv.put("k", "n"); // rev 3: mod 3, version 2
    let v = |s: &str| TargetUnion::Value(s.into());
    let cases = vec![
        (cmp("k", Value, Equal, v("n")), true),
        (cmp("k", Value, NotEqual, v("n")), false),
        (cmp("k", Value, Greater, v("m")), true),
        (cmp("k", Value, Less, v("m")), false),
        (cmp("k", Version, Equal, TargetUnion::Version(2)), true),
        (cmp("k", Version, Greater, TargetUnion::Version(2)), false),
        (cmp("k", Create, Equal, TargetUnion::CreateRevision(2)), true),
        (cmp("k", Create, Less, TargetUnion::CreateRevision(3)), true),
        (cmp("k", Mod, Equal, TargetUnion::ModRevision(3)), true),
        (cmp("k", Mod, NotEqual, TargetUnion::ModRevision(3)), false),
        // A missing key: version/create/mod compare as 0, a value compare fails.
        (cmp("nope", Version, Equal, TargetUnion::Version(0)), true),
        (cmp("nope", Create, Equal, TargetUnion::CreateRevision(0)), true),
        (cmp("nope", Value, NotEqual, v("x")), false),
    ];
    for (i, (c, want)) in cases.into_iter().enumerate() {
        assert_eq!(txn_succeeded(&mut kv, vec![c]), want, "case {i}");
    }
    // All compares must hold.
    assert!(!txn_succeeded(&mut kv, vec![cmp("k", Value, Equal, v("n")), cmp("k", Version, Equal, TargetUnion::Version(9))]));
    // Reads do not move the revision.
    assert_eq!(kv.put("z", "1"), 4);
}

#[test]
fn txn_runs_one_branch_at_one_revision_and_sees_its_own_writes() {
    let mut kv = Kv::new();
    kv.put("lock", "free");
    let txn = |expect: &str| TxnRequest {
        compare: vec![cmp("lock", CompareTarget::Value, CompareResult::Equal, TargetUnion::Value(expect.into()))],
        success: vec![
            RequestOp { request: Some(Request::RequestPut(put_req("lock", "held"))) },
            RequestOp { request: Some(Request::RequestPut(put_req("owner", "me"))) },
            RequestOp { request: Some(Request::RequestRange(range_req("owner", ""))) },
        ],
        failure: vec![RequestOp { request: Some(Request::RequestRange(range_req("lock", ""))) }],
    };
    let Response::ResponseTxn(t) = kv.exec(Request::RequestTxn(txn("free"))).unwrap() else { panic!() };
    assert!(t.succeeded);
    assert_eq!(t.header.unwrap().revision, 3, "one revision for the whole txn");
    let Some(Response::ResponseRange(r)) = &t.responses[2].response else { panic!() };
    assert_eq!(r.kvs[0].value, b"me", "a range after a put in the same txn sees it");
    assert_eq!(kv.get("lock").unwrap().mod_revision, 3);
    assert_eq!(kv.get("owner").unwrap().mod_revision, 3);

    let Response::ResponseTxn(t) = kv.exec(Request::RequestTxn(txn("free"))).unwrap() else { panic!() };
    assert!(!t.succeeded);
    let Some(Response::ResponseRange(r)) = &t.responses[0].response else { panic!() };
    assert_eq!(r.kvs[0].value, b"held");
    assert_eq!(kv.put("after", "x"), 4, "a txn that only read did not advance the revision");
}

#[test]
fn invalid_requests_are_refused_and_change_nothing() {
    let mut kv = Kv::new();
    kv.put("a", "1");
    let before = kv.0.state.clone();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0xff, 0x01, 0x02], "malformed RequestOp"),
        (RequestOp { request: None }.encode_to_vec(), "empty RequestOp"),
        (op(Request::RequestPut(put_req("", "v"))), "key is not provided"),
        (op(Request::RequestPut(PutRequest { lease: 7, ..put_req("a", "v") })), "lease not found"),
        (
            op(Request::RequestTxn(TxnRequest {
                compare: vec![],
                success: vec![
                    RequestOp { request: Some(Request::RequestPut(put_req("d", "1"))) },
                    RequestOp { request: Some(Request::RequestPut(put_req("d", "2"))) },
                ],
                failure: vec![],
            })),
            "duplicate key",
        ),
        (
            op(Request::RequestTxn(TxnRequest {
                compare: vec![],
                success: vec![
                    RequestOp { request: Some(Request::RequestPut(put_req("new", "1"))) },
                    RequestOp { request: Some(Request::RequestPut(PutRequest { lease: 1, ..put_req("x", "1") })) },
                ],
                failure: vec![],
            })),
            "lease not found",
        ),
    ];
    for (command, want) in cases {
        let err = kv.0.apply_one(command).unwrap_err();
        assert!(err.to_string().contains(want), "{err} should mention {want}");
        assert_eq!(kv.0.state, before, "a refused command changed state: {want}");
    }
    // A query must not write.
    let err = kv.0.query(&op(Request::RequestPut(put_req("a", "2")))).unwrap_err();
    assert!(matches!(err, QueryError::Invalid(ref m) if m.contains("must not write")), "{err}");
}

/// A txn nested `depth` levels deep, with a compare and a put at every level
/// and the ops of the innermost level as given.
fn nested_txn(depth: usize, innermost: Vec<RequestOp>) -> TxnRequest {
    let exists = |k: &str| cmp(k, CompareTarget::Version, CompareResult::Greater, TargetUnion::Version(0));
    let mut txn = TxnRequest { compare: vec![exists("a")], success: innermost, failure: vec![] };
    for level in (1..depth).rev() {
        let put = RequestOp { request: Some(Request::RequestPut(put_req(&format!("level-{level:03}"), "v"))) };
        let inner = RequestOp { request: Some(Request::RequestTxn(txn)) };
        txn = TxnRequest { compare: vec![exists("a")], success: vec![put, inner], failure: vec![] };
    }
    txn
}

#[test]
fn the_deepest_txn_the_plugin_decodes_runs_within_its_stack() {
    // The plugin's stack is small (plugins/kv/build.rs), so that a fresh
    // instance touches few pages; nesting is the deepest recursion it has
    // (decoding, checking, running and encoding a txn each recurse).
    let mut kv = Kv::new();
    kv.put("a", "1");
    let ranges = || (0..4).map(|_| RequestOp { request: Some(Request::RequestRange(range_req("a", "\0"))) }).collect();
    let mut deepest = 0;
    for depth in 1..=80 {
        match kv.exec(Request::RequestTxn(nested_txn(depth, ranges()))) {
            Ok(Response::ResponseTxn(t)) => {
                assert!(t.succeeded, "depth {depth}");
                deepest = depth;
            }
            Ok(other) => panic!("depth {depth}: {other:?}"),
            // Past the protobuf decoder's recursion limit: refused whole.
            Err(EntryError::Invalid(_)) => break,
            Err(e) => panic!("depth {depth}: {e}"),
        }
    }
    assert!(deepest >= 40, "only {deepest} levels decoded");
    assert_eq!(kv.keys(range_req("level-", "level.")).len(), deepest - 1);
}

/// Batching never changes an entry's outcome, though within a batch each
/// entry starts from the revision and NOSPACE state the entry before it
/// left: the same entries in one batch, in batches of two and three, and
/// one at a time give the same outcomes, events and keyspace. Batches that
/// hold a refused entry run again entry by entry.
#[test]
fn batches_of_any_size_give_the_outcomes_of_entries_applied_one_at_a_time() {
    use wasmraft_proto::etcdserverpb::{AlarmRequest, alarm_request::AlarmAction, AlarmType};
    use wasmraft_proto::kvplugin;
    let alarm = |action: AlarmAction| {
        let r = AlarmRequest { action: action as i32, member_id: 7, alarm: AlarmType::Nospace as i32 };
        kvplugin::Request { request: Some(kvplugin::request::Request::RequestAlarm(r)) }.encode_to_vec()
    };
    let put = |k: &str, v: &str| op(Request::RequestPut(put_req(k, v)));
    let txn = TxnRequest {
        success: vec![RequestOp { request: Some(Request::RequestPut(put_req("t", "1"))) }],
        ..Default::default()
    };
    // In batches of 3 the first holds a put, the alarm and a put the alarm
    // refuses; in batches of 4 the third holds only puts that apply.
    let commands = vec![
        put("a", "1"),
        alarm(AlarmAction::Activate),
        put("c", "1"), // refused: NOSPACE
        op(Request::RequestTxn(txn.clone())), // refused: a put in it
        op(Request::RequestDeleteRange(DeleteRangeRequest { key: "a".into(), ..Default::default() })),
        alarm(AlarmAction::Deactivate),
        put("c", "2"),
        op(Request::RequestPut(PutRequest { ignore_value: true, ..put_req("missing", "") })), // refused
        put("b", "1"),
        op(Request::RequestPut(PutRequest { prev_kv: true, ..put_req("a", "2") })),
        op(Request::RequestTxn(txn)),
        put("d", "1"),
        put("a", "3"),
    ];
    let run = |size: usize| {
        let mut r = Replica::new(&kv_plugin());
        let (mut outcomes, mut events) = (Vec::new(), Vec::new());
        for chunk in commands.chunks(size) {
            let batch = r.apply(chunk);
            outcomes.extend(batch.outcomes);
            events.extend(batch.events);
        }
        (outcomes, events, r.state)
    };
    let alone = run(1);
    let refused: Vec<usize> = alone.0.iter().enumerate().filter(|(_, o)| o.is_err()).map(|(i, _)| i).collect();
    assert_eq!(refused, [2, 3, 7], "{:?}", alone.0);
    let last = ResponseOp::decode(alone.0[12].as_ref().unwrap().as_slice()).unwrap().response.unwrap();
    match last {
        Response::ResponsePut(p) => assert_eq!(p.header.unwrap().revision, 9, "eight changes after etcd's revision 1"),
        other => panic!("{other:?}"),
    }
    for size in [2, 3, 4, commands.len()] {
        assert!(run(size) == alone, "batches of {size} differ from entries applied one at a time");
    }
}
