//! A follower whose Raft loop stalled for longer than an election timeout
//! steps the leader's heartbeat that waited meanwhile. Its answer extends
//! the leader's lease, so its vote guard must hold for an election timeout
//! from then, not from the tick its clock had stopped at.

use std::time::{Duration, Instant};

use wasmraft_raft::{Index, LogId, Message, MessageBody, NodeId, Term};

use super::cluster::{Live, Outbox, Outgoing, node_config};
use super::plugin_cache;

fn heartbeat(token: u64) -> Message {
    Message { from: NodeId(1), to: NodeId(2), term: Term(1), body: MessageBody::Heartbeat { commit: Index(0), token } }
}

#[test]
fn a_stalled_follower_keeps_its_vote_guard_after_answering_a_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let config = node_config(2, &[1, 2, 3], dir.path(), plugin_cache(), 1);
    let mut follower = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    let at = |ms: u64| start + Duration::from_millis(ms);
    follower.node.step(heartbeat(1));
    follower.turn(at(1), 1, false);
    assert_eq!(follower.node.status().leader, Some(NodeId(1)));
    // The loop stalls for 500 ms (50 ticks); the leader's heartbeat waits.
    follower.node.step(heartbeat(2));
    follower.turn(at(501), 501, false);
    let answered = outbox.lock().iter().any(|(_, out)| {
        matches!(out, Outgoing::Message(Message { body: MessageBody::HeartbeatResponse { token: 2 }, .. }))
    });
    assert!(answered, "the heartbeat was answered");
    // Node 3, cut off from the leader, asks for its vote right after.
    follower.node.step(Message {
        from: NodeId(3),
        to: NodeId(2),
        term: Term(2),
        body: MessageBody::RequestVote { pre_vote: true, last: LogId::new(1, 1), transfer: false },
    });
    follower.turn(at(502), 502, false);
    let granted = outbox.lock().iter().any(|(_, out)| {
        matches!(out, Outgoing::Message(Message { to: NodeId(3), body: MessageBody::VoteResponse { reject: false, .. }, .. }))
    });
    assert!(!granted, "a follower that just acknowledged the leader's round granted another node its vote");
}
