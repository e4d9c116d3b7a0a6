//! etcd's space quota and NOSPACE alarm. The alarm lives in the KV plugin
//! (`plugins/kv/src/alarms.rs`), so that it is raised and cleared through
//! the log: from the entry that raises it on, every member refuses puts at
//! apply, as etcd's capped applier does, until `etcdctl alarm disarm`. A
//! restart keeps it, and a snapshot carries it.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message as _;
use tonic::Status;
use wasmraft_node::{Error, Node};
use wasmraft_proto::etcdserverpb::alarm_request::AlarmAction;
use wasmraft_proto::etcdserverpb::{AlarmRequest, AlarmResponse, AlarmType};
use wasmraft_proto::kvplugin;
use wasmraft_proto::kvplugin::request::Request as KvRequest;
use wasmraft_proto::kvplugin::response::Response as KvResponse;
use wasmraft_proto::v1::ProposeRequest;

use super::etcd_status;
use crate::forward::{Forwarder, forwarded};

/// How long writes share one reading of the store's size.
const SIZE_READ_EVERY: Duration = Duration::from_millis(100);

/// etcd's text for a write refused under the NOSPACE alarm.
const ERR_NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";

/// This member's space quota (etcd's `--quota-backend-bytes`).
#[derive(Clone, Debug, Default)]
pub struct SpaceQuota {
    quota: u64,
    /// The store's size and when it was read: reading it takes a dozen
    /// RocksDB property lookups under the database's lock, too many for
    /// every write, so writes share a reading for [`SIZE_READ_EVERY`].
    measured: std::sync::Arc<Mutex<Option<(Instant, u64)>>>,
    /// When this member last logged raising its alarm.
    warned: std::sync::Arc<Mutex<Option<Instant>>>,
}

impl SpaceQuota {
    /// A quota of `quota` bytes of store.
    pub fn new(quota: u64) -> Self {
        Self { quota, ..Default::default() }
    }

    pub(crate) fn quota(&self) -> u64 {
        self.quota
    }

    /// The store's size on disk, read at most every [`SIZE_READ_EVERY`].
    fn store_bytes(&self, node: &Node) -> u64 {
        let mut measured = self.measured.lock();
        match *measured {
            Some((at, bytes)) if at.elapsed() < SIZE_READ_EVERY => bytes,
            _ => {
                let bytes = node.storage_bytes().0;
                *measured = Some((Instant::now(), bytes));
                bytes
            }
        }
    }

    /// Before a write that adds data, on the member the client called (and
    /// on the leader it is forwarded to): one that finds its store past the
    /// quota raises its NOSPACE alarm through the log and refuses the
    /// write, as etcd does for every such write.
    pub(crate) async fn check_write(&self, node: &Node, forwarder: &Forwarder) -> Result<(), Status> {
        if self.store_bytes(node) <= self.quota {
            return Ok(());
        }
        self.raise(node, forwarder).await;
        Err(Status::resource_exhausted(ERR_NO_SPACE))
    }

    /// Raises this member's NOSPACE alarm through the log.
    async fn raise(&self, node: &Node, forwarder: &Forwarder) {
        let store_bytes = self.store_bytes(node);
        let raise = AlarmRequest {
            action: AlarmAction::Activate as i32,
            member_id: node.id(),
            alarm: AlarmType::Nospace as i32,
        };
        match propose_alarm(node, forwarder, raise, false).await {
            Ok(_) => {
                let mut warned = self.warned.lock();
                if warned.is_none_or(|at| at.elapsed() > Duration::from_secs(10)) {
                    *warned = Some(Instant::now());
                    tracing::warn!(quota_bytes = self.quota, store_bytes,
                        "NOSPACE alarm raised: the store is past its quota; every member refuses puts until `etcdctl alarm disarm` (compact and defragment first)");
                }
            }
            Err(e) => tracing::warn!(error = %e.message(), "the store is past its quota but the NOSPACE alarm could not be raised"),
        }
    }
}

/// `kvplugin.Request.request_alarm`.
const ALARM_FIELD: u32 = 19;

/// How often each member compares its store with the quota by itself.
const QUOTA_CHECK_EVERY: Duration = Duration::from_secs(5);

/// Raises this member's NOSPACE alarm when its store grows past the quota
/// without a write reaching it through etcd's API (a follower takes every
/// write through the log; etcd checks at apply), until `stop`.
pub(crate) async fn watch_quota(node: Node, forwarder: Forwarder, quota: SpaceQuota, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(QUOTA_CHECK_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if super::require_kv(&node).is_err() || quota.store_bytes(&node) <= quota.quota {
            continue;
        }
        let list = AlarmRequest { action: AlarmAction::Get as i32, ..Default::default() };
        let raised = match super::plugin_query(&node, KvRequest::RequestAlarm(list)).await {
            Ok(KvResponse::ResponseAlarm(a)) => {
                a.alarms.iter().any(|m| m.member_id == node.id() && m.alarm == AlarmType::Nospace as i32)
            }
            _ => continue,
        };
        if !raised {
            quota.raise(&node, &forwarder).await;
        }
    }
}

/// Whether a command for the KV plugin activates or deactivates an alarm.
/// Every proposal is asked: the fields are skipped, not decoded (a put's
/// value is not copied), unless the alarm's field is among them.
pub(crate) fn is_alarm_change(command: &[u8]) -> bool {
    use prost::encoding::{DecodeContext, decode_key, skip_field};
    let mut buf = command;
    let mut alarm_field = false;
    while !buf.is_empty() && !alarm_field {
        let Ok((tag, wire_type)) = decode_key(&mut buf) else { return false };
        alarm_field = tag == ALARM_FIELD;
        if skip_field(wire_type, tag, &mut buf, DecodeContext::default()).is_err() {
            return false;
        }
    }
    alarm_field
        && matches!(
        kvplugin::Request::decode(command).ok().and_then(|r| r.request),
        Some(KvRequest::RequestAlarm(a)) if a.action != AlarmAction::Get as i32
    )
}

/// Proposes an alarm change to the KV plugin: on a follower, through the
/// leader's `wasmraft.v1` service (never again for a forwarded request).
pub(crate) async fn propose_alarm(
    node: &Node,
    forwarder: &Forwarder,
    change: AlarmRequest,
    was_forwarded: bool,
) -> Result<AlarmResponse, Status> {
    let command = kvplugin::Request { request: Some(KvRequest::RequestAlarm(change)) }.encode_to_vec();
    let answer = match node.propose(command.clone()).await {
        Ok(answer) => answer,
        Err(Error::NotLeader { leader: Some(leader) }) if leader.0 != node.id() && !was_forwarded => {
            let Some(mut client) = forwarder.client(leader.0) else {
                return Err(etcd_status(Error::NotLeader { leader: Some(leader) }));
            };
            client.propose(forwarded(ProposeRequest { command, client_id: 0, sequence: 0 })).await?.into_inner().result
        }
        Err(e) => return Err(etcd_status(e)),
    };
    match kvplugin::Response::decode(answer.as_slice()).ok().and_then(|r| r.response) {
        Some(KvResponse::ResponseAlarm(alarms)) => Ok(alarms),
        _ => Err(Status::internal("etcdserver: the KV plugin gave a malformed answer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(requests: &[KvRequest]) -> Vec<u8> {
        // Concatenated messages merge; of a oneof, the last field wins.
        requests.iter().flat_map(|r| kvplugin::Request { request: Some(r.clone()) }.encode_to_vec()).collect()
    }

    #[test]
    fn alarm_changes_are_told_from_other_commands_as_the_plugin_decodes_them() {
        use wasmraft_proto::etcdserverpb::PutRequest;
        let alarm = |action: AlarmAction| {
            KvRequest::RequestAlarm(AlarmRequest { action: action as i32, member_id: 1, alarm: AlarmType::Nospace as i32 })
        };
        let put = KvRequest::RequestPut(PutRequest { key: b"k".to_vec(), value: vec![7; 4096], ..Default::default() });
        assert!(is_alarm_change(&command(&[alarm(AlarmAction::Activate)])));
        assert!(is_alarm_change(&command(&[alarm(AlarmAction::Deactivate)])));
        assert!(!is_alarm_change(&command(&[alarm(AlarmAction::Get)])));
        assert!(!is_alarm_change(&command(std::slice::from_ref(&put))));
        assert!(is_alarm_change(&command(&[put.clone(), alarm(AlarmAction::Activate)])), "an alarm after a put");
        assert!(!is_alarm_change(&command(&[alarm(AlarmAction::Activate), put])), "a put after an alarm");
        assert!(!is_alarm_change(b"add apples 3") && !is_alarm_change(&[]));
    }
}
