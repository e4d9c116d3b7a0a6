//! The KV plugin's leases, run natively against the SDK's in-memory host:
//! grants, keys attached by puts, revokes as one revision with their
//! events, expiry through ticks, keep-alives, the grace after a leader
//! change, and bounded work per tick.

use prost::Message;
use wasmraft_sdk::testing::TestHost;
use wasmraft_sdk::{ApplyError, timer};

use crate::Kv;
use crate::pb::etcdserverpb::request_op::Request as Op;
use crate::pb::etcdserverpb::{
    LeaseGrantRequest, LeaseLeasesRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    PutRequest, RequestOp, TxnRequest,
};
use crate::pb::kvplugin::request::Request as Req;
use crate::pb::kvplugin::response::Response as Resp;
use crate::pb::kvplugin::{LeaseTimeToLiveQuery, Request, Response};
use crate::pb::mvccpb::{Event, event::EventType};

fn bytes(r: Req) -> Vec<u8> {
    Request { request: Some(r) }.encode_to_vec()
}

fn answer(bytes: Vec<u8>) -> Resp {
    Response::decode(bytes.as_slice()).unwrap().response.unwrap()
}

/// A host at log time 1 000 000.
fn host() -> TestHost<Kv> {
    let mut h = TestHost::<Kv>::new();
    h.set_time_ms(1_000_000);
    h
}

fn grant(h: &mut TestHost<Kv>, ttl: i64, id: i64) -> Result<i64, ApplyError> {
    match answer(h.apply(bytes(Req::RequestLeaseGrant(LeaseGrantRequest { ttl, id })))?) {
        Resp::ResponseLeaseGrant(g) => {
            assert_eq!(g.ttl, ttl);
            Ok(g.id)
        }
        other => panic!("{other:?}"),
    }
}

fn revoke(h: &mut TestHost<Kv>, id: i64) -> Result<i64, ApplyError> {
    match answer(h.apply(bytes(Req::RequestLeaseRevoke(LeaseRevokeRequest { id })))?) {
        Resp::ResponseLeaseRevoke(r) => Ok(r.header.unwrap().revision),
        other => panic!("{other:?}"),
    }
}

fn put(h: &mut TestHost<Kv>, key: &str, lease: i64) -> Result<i64, ApplyError> {
    let r = PutRequest { key: key.into(), value: b"v".to_vec(), lease, ..Default::default() };
    match answer(h.apply(bytes(Req::RequestPut(r)))?) {
        Resp::ResponsePut(p) => Ok(p.header.unwrap().revision),
        other => panic!("{other:?}"),
    }
}

fn ttl(h: &TestHost<Kv>, id: i64, now_ms: u64) -> LeaseTimeToLiveResponse {
    let q = LeaseTimeToLiveQuery { request: Some(LeaseTimeToLiveRequest { id, keys: true }), now_ms };
    match answer(h.query(bytes(Req::RequestLeaseTimeToLive(q))).unwrap()) {
        Resp::ResponseLeaseTimeToLive(t) => t,
        other => panic!("{other:?}"),
    }
}

/// Whether `key` is in the keyspace now (the host's store is this thread's).
fn exists(_h: &TestHost<Kv>, key: &str) -> bool {
    crate::keyspace::get(key.as_bytes()).is_some()
}

fn lease_keys(h: &TestHost<Kv>, id: i64) -> Vec<String> {
    ttl(h, id, 0).keys.into_iter().map(|k| String::from_utf8(k).unwrap()).collect()
}

#[test]
fn a_revoke_deletes_the_leases_keys_at_one_revision_with_their_events() {
    let mut h = host();
    let id = grant(&mut h, 60, 0).unwrap();
    assert!(id > 0);
    put(&mut h, "a", id).unwrap();
    put(&mut h, "b", id).unwrap();
    put(&mut h, "c", 0).unwrap();
    assert_eq!(lease_keys(&h, id), ["a", "b"]);
    h.take_events();
    let revision = revoke(&mut h, id).unwrap();
    let events: Vec<Event> = h.take_events().iter().map(|e| Event::decode(e.payload.as_slice()).unwrap()).collect();
    assert_eq!(events.len(), 2);
    for e in &events {
        assert_eq!(e.r#type, EventType::Delete as i32);
        assert_eq!(e.kv.as_ref().unwrap().mod_revision, revision, "one revision for the whole revoke");
    }
    assert!(!exists(&h, "a") && !exists(&h, "b") && exists(&h, "c"));
    assert_eq!(ttl(&h, id, 0).ttl, -1, "gone");
    assert!(matches!(revoke(&mut h, id), Err(ApplyError::Rejected(m)) if m.contains("lease not found")));
    assert_eq!(timer::next(), None, "no lease, no wake-up");
}

#[test]
fn puts_need_an_existing_lease_and_move_keys_between_leases() {
    let mut h = host();
    assert!(matches!(put(&mut h, "a", 77), Err(ApplyError::Rejected(m)) if m.contains("lease not found")));
    let txn = TxnRequest {
        success: vec![RequestOp {
            request: Some(Op::RequestPut(PutRequest { key: b"t".to_vec(), lease: 77, ..Default::default() })),
        }],
        ..Default::default()
    };
    assert!(h.apply(bytes(Req::RequestTxn(txn))).is_err(), "a txn put with a missing lease");
    let (one, two) = (grant(&mut h, 60, 0).unwrap(), grant(&mut h, 60, 0).unwrap());
    assert_ne!(one, two);
    put(&mut h, "k", one).unwrap();
    put(&mut h, "k", two).unwrap();
    assert!(lease_keys(&h, one).is_empty() && lease_keys(&h, two) == ["k"], "moved");
    revoke(&mut h, one).unwrap();
    assert!(exists(&h, "k"), "the first lease no longer holds it");
    put(&mut h, "k", 0).unwrap();
    assert!(lease_keys(&h, two).is_empty(), "a put without a lease detaches");
    assert!(matches!(grant(&mut h, 60, two), Err(ApplyError::Rejected(m)) if m.contains("already exists")));
    assert_eq!(grant(&mut h, 60, 5).unwrap(), 5, "a chosen id");
    let listed = match answer(h.query(bytes(Req::RequestLeaseLeases(LeaseLeasesRequest {}))).unwrap()) {
        Resp::ResponseLeaseLeases(l) => l.leases.iter().map(|l| l.id).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&two) && listed.contains(&5));
}

#[test]
fn a_lease_expires_at_its_ttl_unless_kept_alive_in_time() {
    let mut h = host();
    let id = grant(&mut h, 2, 0).unwrap(); // at 1 000 000: expires at 1 002 000
    put(&mut h, "a", id).unwrap();
    assert_eq!(timer::next(), Some(1_002_000));
    assert_eq!(ttl(&h, id, 1_000_500).ttl, 2, "1.5 s left, rounded up");
    // A keep-alive taken at 1 001 500 renews it to 1 003 500.
    let answers = h.renew(&[(&id.to_be_bytes(), 1_001_500)]).unwrap();
    assert_eq!(answers, vec![Ok(2i64.to_be_bytes().to_vec())]);
    assert_eq!(timer::next(), Some(1_003_500));
    assert_eq!(h.advance_to(1_003_499), None, "not due");
    assert!(exists(&h, "a"));
    assert_eq!(h.advance_to(1_003_500), Some(Ok(())));
    assert!(!exists(&h, "a"), "expired with its lease");
    assert_eq!(ttl(&h, id, 1_003_500).ttl, -1);
    // A keep-alive for a lease that is gone, or taken after its expiry.
    let late = grant(&mut h, 2, 0).unwrap(); // expires at 1 005 500
    let answers = h.renew(&[(&id.to_be_bytes(), 1_004_000), (&late.to_be_bytes(), 1_005_500)]).unwrap();
    assert!(answers.iter().all(|a| matches!(a, Err(ApplyError::Rejected(m)) if m.contains("lease not found"))), "{answers:?}");
}

#[test]
fn nothing_expires_before_the_grace_of_a_new_leader() {
    let mut h = host();
    let id = grant(&mut h, 2, 0).unwrap(); // expires at 1 002 000
    // A new leader's tick: its grace runs to 1 010 000.
    h.set_grace_until_ms(1_010_000);
    assert!(h.renew(&[(&[0u8; 8][..], 1_000_100)]).is_ok());
    assert_eq!(timer::next(), Some(1_010_000), "the wake-up waits for the grace");
    assert_eq!(h.advance_to(1_005_000), None);
    assert_eq!(ttl(&h, id, 1_005_000).ttl, 5, "the grace counts as time left");
    // A keep-alive after the expiry but inside the grace still holds.
    assert_eq!(h.renew(&[(&id.to_be_bytes(), 1_006_000)]).unwrap(), vec![Ok(2i64.to_be_bytes().to_vec())]);
    assert_eq!(h.advance_to(1_010_000), Some(Ok(())));
    assert_eq!(ttl(&h, id, 1_010_000).ttl, -1, "renewed to 1 008 000, which the grace outlived");
}

#[test]
fn a_tick_revokes_a_bounded_number_of_leases_and_asks_for_more() {
    let mut h = host();
    let ids: Vec<i64> = (0..70).map(|_| grant(&mut h, 1, 0).unwrap()).collect();
    for (i, id) in ids.iter().enumerate() {
        put(&mut h, &format!("k{i:02}"), *id).unwrap();
    }
    h.take_events();
    assert_eq!(h.advance_to(2_000_000), Some(Ok(())));
    assert_eq!(h.take_events().len(), 64, "64 leases in the first tick, each its own revision");
    assert!(timer::next().is_some_and(|at| at <= 2_000_000), "due again at once");
    assert_eq!(h.advance_to(2_000_000), Some(Ok(())));
    assert_eq!(h.take_events().len(), 6);
    assert_eq!(timer::next(), None);
}

#[test]
fn malformed_lease_input_is_refused_and_extreme_values_do_not_overflow() {
    let mut h = host();
    assert!(matches!(grant(&mut h, 0, 0), Err(ApplyError::Invalid(_))), "a TTL of 0");
    assert!(matches!(grant(&mut h, -5, 0), Err(ApplyError::Invalid(_))), "a negative TTL");
    assert!(matches!(grant(&mut h, 10, -1), Err(ApplyError::Invalid(_))), "a negative id");
    // The largest TTL: the expiry saturates instead of wrapping.
    let id = grant(&mut h, i64::MAX, 0).unwrap();
    assert_eq!(timer::next(), Some(u64::MAX));
    assert_eq!(ttl(&h, id, 0).granted_ttl, i64::MAX);
    // A keep-alive whose key is not a lease id, one at u64::MAX, and a
    // tick at u64::MAX: refused or applied, never a trap.
    let answers = h.renew(&[(b"abc", 1), (&id.to_be_bytes(), u64::MAX)]).unwrap();
    assert!(matches!(answers[0], Err(ApplyError::Invalid(_))), "{answers:?}");
    assert!(matches!(answers[1], Err(ApplyError::Rejected(_))), "taken at or after its expiry: {answers:?}");
    put(&mut h, "k", id).unwrap();
    assert_eq!(h.advance_to(u64::MAX), Some(Ok(())));
    assert!(!exists(&h, "k"), "expired at the end of time");
}
