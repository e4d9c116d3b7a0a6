//! etcd's alarms, kept in the keyspace so that every member holds the same
//! ones at the same index: a member past its space quota raises NOSPACE
//! through the log, and from that entry on every member refuses writes
//! that add data (etcd's capped applier) until an operator disarms it.
//!
//! ```text
//! \x00alarm/ member (u64 BE) type (u8)   an active alarm (empty value)
//! \x00nospace                            present while a NOSPACE alarm is
//! ```
//!
//! (`\x00nospace` makes the check on every put one point read, not a scan.)

use wasmraft_sdk::store;

use crate::KvError;
use crate::keyspace::Revision;
use crate::ops::header;
use crate::pb::etcdserverpb::alarm_request::AlarmAction;
use crate::pb::etcdserverpb::request_op::Request as Op;
use crate::pb::etcdserverpb::{AlarmMember, AlarmRequest, AlarmResponse, AlarmType};

const PREFIX: &[u8] = b"\x00alarm/";
const NOSPACE_ACTIVE: &[u8] = b"\x00nospace";

/// etcd's text for a write refused while a NOSPACE alarm is active.
pub(crate) const ERR_NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";

fn key(member: u64, alarm: AlarmType) -> Vec<u8> {
    let mut k = PREFIX.to_vec();
    k.extend_from_slice(&member.to_be_bytes());
    k.push(alarm as u8);
    k
}

/// Every active alarm, by member then type.
pub(crate) fn list() -> Vec<AlarmMember> {
    store::scan_prefix(PREFIX)
        .into_iter()
        .filter_map(|(k, _)| {
            let rest = k.strip_prefix(PREFIX)?;
            let (member, alarm) = rest.split_at_checked(8)?;
            let &[alarm] = alarm else { return None };
            Some(AlarmMember { member_id: u64::from_be_bytes(member.try_into().ok()?), alarm: i32::from(alarm) })
        })
        .collect()
}

fn nospace_active() -> bool {
    store::get(NOSPACE_ACTIVE).is_some()
}

/// Refuses a write that adds data while any member's NOSPACE alarm is
/// active: a put, or a txn with a put in either branch (etcd's capped
/// applier; deletes and compactions go on, they free space).
pub(crate) fn check_write(op: &Op, rev: &mut Revision) -> Result<(), KvError> {
    if puts(op) && *rev.nospace.get_or_insert_with(nospace_active) {
        return Err(KvError::Rejected(ERR_NO_SPACE));
    }
    Ok(())
}

fn puts(op: &Op) -> bool {
    match op {
        Op::RequestPut(_) => true,
        Op::RequestRange(_) | Op::RequestDeleteRange(_) => false,
        Op::RequestTxn(t) => t.success.iter().chain(&t.failure).any(|o| o.request.as_ref().is_some_and(puts)),
    }
}

/// Activates or deactivates one member's alarm. As etcd answers: an
/// activation lists the alarm (new or not), a deactivation lists it only
/// if it was active.
pub(crate) fn change(r: &AlarmRequest, rev: &Revision) -> Result<AlarmResponse, KvError> {
    let action = AlarmAction::try_from(r.action).map_err(|_| KvError::Invalid("etcdserver: unknown alarm action"))?;
    let alarm = match AlarmType::try_from(r.alarm) {
        Ok(AlarmType::None) | Err(_) => return Err(KvError::Invalid("etcdserver: unknown alarm type")),
        Ok(alarm) => alarm,
    };
    if r.member_id == 0 {
        return Err(KvError::Invalid("etcdserver: an alarm needs a member id"));
    }
    let k = key(r.member_id, alarm);
    let member = AlarmMember { member_id: r.member_id, alarm: alarm as i32 };
    let alarms = match action {
        AlarmAction::Get => return Err(KvError::Invalid("a query, not a command: send it as a query")),
        AlarmAction::Activate => {
            store::put(&k, &[]);
            vec![member]
        }
        AlarmAction::Deactivate if store::get(&k).is_some() => {
            store::delete(&k);
            vec![member]
        }
        AlarmAction::Deactivate => Vec::new(),
    };
    if list().iter().any(|a| a.alarm == AlarmType::Nospace as i32) {
        store::put(NOSPACE_ACTIVE, &[]);
    } else {
        store::delete(NOSPACE_ACTIVE);
    }
    Ok(AlarmResponse { header: header(rev), alarms })
}

/// The active alarms (an `AlarmRequest` with action GET).
pub(crate) fn get(r: &AlarmRequest, rev: &Revision) -> Result<AlarmResponse, KvError> {
    if r.action != AlarmAction::Get as i32 {
        return Err(KvError::Invalid("an alarm change writes: propose it instead"));
    }
    Ok(AlarmResponse { header: header(rev), alarms: list() })
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use wasmraft_sdk::testing::TestHost;

    use crate::Kv;
    use crate::pb::etcdserverpb::alarm_request::AlarmAction;
    use crate::pb::etcdserverpb::request_op::Request as Op;
    use crate::pb::etcdserverpb::{AlarmMember, AlarmRequest, AlarmType, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest};
    use crate::pb::kvplugin::request::Request as Req;
    use crate::pb::kvplugin::response::Response as Resp;
    use crate::pb::kvplugin::{Request, Response};

    fn bytes(r: Req) -> Vec<u8> {
        Request { request: Some(r) }.encode_to_vec()
    }

    fn alarm(h: &mut TestHost<Kv>, action: AlarmAction, member_id: u64) -> Vec<AlarmMember> {
        let r = AlarmRequest { action: action as i32, member_id, alarm: AlarmType::Nospace as i32 };
        let answer = if action == AlarmAction::Get { h.query(bytes(Req::RequestAlarm(r))).unwrap() } else { h.apply(bytes(Req::RequestAlarm(r))).unwrap() };
        match Response::decode(answer.as_slice()).unwrap().response.unwrap() {
            Resp::ResponseAlarm(a) => a.alarms,
            other => panic!("{other:?}"),
        }
    }

    fn put(key: &str) -> Op {
        Op::RequestPut(PutRequest { key: key.into(), value: b"v".to_vec(), ..Default::default() })
    }

    fn txn(success: Vec<Op>) -> Op {
        let success = success.into_iter().map(|op| RequestOp { request: Some(op) }).collect();
        Op::RequestTxn(TxnRequest { success, ..Default::default() })
    }

    fn apply(h: &mut TestHost<Kv>, op: Op) -> Result<Vec<u8>, String> {
        h.apply(RequestOp { request: Some(op) }.encode_to_vec()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_nospace_alarm_refuses_puts_at_apply_until_deactivated() {
        let mut h = TestHost::<Kv>::new();
        apply(&mut h, put("a")).unwrap();
        let nospace = |member_id| AlarmMember { member_id, alarm: AlarmType::Nospace as i32 };
        assert_eq!(alarm(&mut h, AlarmAction::Activate, 3), vec![nospace(3)]);
        // Raised again by the same member: listed once.
        assert_eq!(alarm(&mut h, AlarmAction::Activate, 3), vec![nospace(3)]);
        assert_eq!(alarm(&mut h, AlarmAction::Activate, 1), vec![nospace(1)]);
        assert_eq!(alarm(&mut h, AlarmAction::Get, 0), vec![nospace(1), nospace(3)]);

        for op in [put("b"), txn(vec![put("b")]), txn(vec![txn(vec![put("b")])])] {
            let err = apply(&mut h, op).unwrap_err();
            assert!(err.contains(super::ERR_NO_SPACE), "{err}");
        }
        // Deletes free space; a txn without a put writes nothing new.
        let delete = || Op::RequestDeleteRange(DeleteRangeRequest { key: b"a".to_vec(), ..Default::default() });
        apply(&mut h, delete()).unwrap();
        apply(&mut h, txn(vec![delete()])).unwrap();

        assert_eq!(alarm(&mut h, AlarmAction::Deactivate, 3), vec![nospace(3)]);
        assert_eq!(alarm(&mut h, AlarmAction::Deactivate, 3), vec![], "not active any more");
        assert!(apply(&mut h, put("b")).is_err(), "member 1's alarm still refuses puts");
        assert_eq!(alarm(&mut h, AlarmAction::Deactivate, 1), vec![nospace(1)]);
        assert_eq!(alarm(&mut h, AlarmAction::Get, 0), vec![]);
        apply(&mut h, put("b")).unwrap();
    }

    #[test]
    fn malformed_alarm_changes_are_refused_and_change_nothing() {
        let mut h = TestHost::<Kv>::new();
        for (action, member_id, alarm_type) in [(AlarmAction::Activate, 0, AlarmType::Nospace as i32), (AlarmAction::Activate, 2, 0), (AlarmAction::Activate, 2, 9), (AlarmAction::Get, 2, 1)] {
            let r = AlarmRequest { action: action as i32, member_id, alarm: alarm_type };
            assert!(h.apply(bytes(Req::RequestAlarm(r))).is_err(), "{action:?} {member_id} {alarm_type}");
        }
        let change = AlarmRequest { action: AlarmAction::Activate as i32, member_id: 2, alarm: 1 };
        assert!(h.query(bytes(Req::RequestAlarm(change))).is_err(), "a change sent as a query");
        assert_eq!(alarm(&mut h, AlarmAction::Get, 0), vec![]);
    }
}
