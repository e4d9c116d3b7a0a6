//! Heartbeats overtaking appends: the transport sends heartbeats, votes and
//! their answers on a lane of their own, ahead of queued appends. A
//! heartbeat answer must neither resend what is in flight nor move progress
//! back, and lost appends must still be found (etcd-io/raft
//! `MsgHeartbeatResp`).

use super::*;
use crate::{Config, LogId, ProgressState};

/// A two-node cluster led by 1 with a window of two appends, the window
/// full: returns the two appends to node 2, not delivered.
fn leader_with_a_full_window() -> (Cluster, Vec<Message>) {
    let mut c = Cluster::new(&[1, 2]);
    let cfg1 = Config {
        max_inflight_msgs: 2,
        ..cfg(1)
    };
    c.nodes
        .insert(1, RawNode::new(cfg1, MemStorage::new(&[1, 2])).unwrap());
    c.elect(1);
    let mut in_flight = Vec::new();
    for i in 0..3u8 {
        c.node(1).propose(vec![vec![i]]).unwrap();
        in_flight.extend(drive(c.node(1)).messages);
    }
    assert_eq!(in_flight.len(), 2, "the third proposal waits for the window");
    (c, in_flight)
}

/// One heartbeat round from 1 answered by 2 at once (the answer overtakes
/// whatever is in flight); returns what the leader sends in reply.
fn heartbeat_round(c: &mut Cluster) -> Vec<Message> {
    c.node(1).tick();
    let out = drive(c.node(1));
    let heartbeat = out
        .messages
        .into_iter()
        .find(|m| matches!(m.body, MessageBody::Heartbeat { .. }))
        .expect("a heartbeat each tick");
    c.node(2).step(heartbeat).unwrap();
    let answers: Vec<Message> = drive(c.node(2))
        .all()
        .into_iter()
        .filter(|m| matches!(m.body, MessageBody::HeartbeatResponse { .. }))
        .collect();
    assert_eq!(answers.len(), 1);
    for a in answers {
        c.node(1).step(a).unwrap();
    }
    drive(c.node(1)).all()
}

fn empty_append_at(m: &Message, index: Index) -> bool {
    matches!(&m.body, MessageBody::AppendEntries { prev, entries, .. }
        if entries.is_empty() && prev.index == index)
}

fn entries_in(msgs: &[Message]) -> usize {
    msgs.iter()
        .map(|m| match &m.body {
            MessageBody::AppendEntries { entries, .. } => entries.len(),
            _ => 0,
        })
        .sum()
}

#[test]
fn a_heartbeat_answer_ahead_of_a_full_window_resends_nothing() {
    let (mut c, in_flight) = leader_with_a_full_window();
    let before = c.node(1).status().progress[&NodeId(2)].clone();
    let last_sent = Index(before.next.0 - 1);
    // Several rounds answered while both appends are still on their way
    // (the old core read the second one as "appends lost" and resent).
    let mut replies = Vec::new();
    for _ in 0..3 {
        let reply = heartbeat_round(&mut c);
        assert_eq!(reply.len(), 1, "one message per answer: {reply:?}");
        assert!(
            empty_append_at(&reply[0], last_sent),
            "an empty append behind the window, not a resend: {reply:?}"
        );
        let pr = &c.node(1).status().progress[&NodeId(2)];
        assert_eq!(
            (pr.state, pr.next, pr.matched),
            (ProgressState::Replicate, before.next, before.matched),
            "a heartbeat answer moves no progress"
        );
        replies.extend(reply);
    }
    // The appends arrive, then the empty ones behind them (one lane, in
    // order): all accepted, and the third proposal goes out once.
    for m in in_flight.iter().cloned().chain(replies) {
        c.node(2).step(m).unwrap();
    }
    let answers = drive(c.node(2)).all();
    assert!(answers.iter().all(
        |m| matches!(m.body, MessageBody::AppendResponse { reject: false, .. })
    ));
    let mut sent = Vec::new();
    for a in answers {
        c.node(1).step(a).unwrap();
        sent.extend(drive(c.node(1)).messages);
    }
    for m in sent.iter().cloned() {
        c.node(2).step(m).unwrap();
    }
    c.settle();
    sent.extend(in_flight);
    let last = c.node(1).status().last_index;
    assert_eq!((c.commit(1), c.commit(2)), (last, last));
    assert_eq!(entries_in(&sent), 3, "each proposal sent once: {sent:?}");
}

#[test]
fn appends_lost_behind_a_full_window_are_found_by_an_empty_append() {
    let (mut c, _lost) = leader_with_a_full_window();
    let matched = c.node(1).status().progress[&NodeId(2)].matched;
    let reply = heartbeat_round(&mut c);
    assert_eq!(reply.len(), 1);
    // Node 2 never got the appends: it rejects the empty one...
    c.node(2).step(reply[0].clone()).unwrap();
    let reject = drive(c.node(2)).all();
    assert!(matches!(reject[..], [Message { body: MessageBody::AppendResponse { reject: true, .. }, .. }]));
    // ...and the leader probes from what matched, with the entries.
    c.node(1).step(reject[0].clone()).unwrap();
    let probe = drive(c.node(1)).messages;
    assert_eq!(c.node(1).status().progress[&NodeId(2)].state, ProgressState::Probe);
    assert!(matches!(&probe[..], [Message { body: MessageBody::AppendEntries { prev, entries, .. }, .. }]
        if prev.index == matched && !entries.is_empty()), "{probe:?}");
    for m in probe {
        c.node(2).step(m).unwrap();
    }
    c.settle();
    let last = c.node(1).status().last_index;
    assert_eq!((c.commit(1), c.commit(2)), (last, last));
}

#[test]
fn an_outstanding_probe_is_followed_by_an_empty_one() {
    // A new leader probes each follower with its no-op; the probe may be
    // lost or queued behind other appends.
    let mut n = make_leader(node(1, &[1, 2, 3]), &[1, 2, 3]);
    let term = n.status().term.0;
    let pr = n.status().progress[&NodeId(2)].clone();
    assert_eq!((pr.state, pr.matched), (ProgressState::Probe, Index(0)));
    n.tick();
    let token = token_to(&drive(&mut n).messages, 2);
    n.step(msg(2, 1, term, MessageBody::HeartbeatResponse { token }))
        .unwrap();
    let out = drive(&mut n).messages;
    let to_2: Vec<_> = out.iter().filter(|m| m.to == NodeId(2)).collect();
    assert!(
        matches!(&to_2[..], [m] if empty_append_at(m, pr.next.prev())),
        "an empty probe, not the no-op again: {out:?}"
    );
    // The probe was lost: the follower accepts the empty one at `matched`,
    // which proves the logs agree there, and replication starts.
    let ack = MessageBody::AppendResponse {
        reject: false,
        index: Index(0),
        hint: LogId::default(),
    };
    n.step(msg(2, 1, term, ack)).unwrap();
    assert_eq!(
        n.status().progress[&NodeId(2)].state,
        ProgressState::Replicate
    );
    let out = drive(&mut n).messages;
    assert!(
        matches!(&out[..], [Message { body: MessageBody::AppendEntries { prev, entries, .. }, .. }]
            if prev.index == Index(0) && entries.len() == 1),
        "the no-op, sent again only now: {out:?}"
    );
}

#[test]
fn a_caught_up_follower_gets_nothing_on_a_heartbeat_answer() {
    let mut c = Cluster::new(&[1, 2]);
    c.elect(1);
    assert!(heartbeat_round(&mut c).is_empty());
}
