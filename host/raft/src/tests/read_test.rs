//! ReadIndex batching, round tokens and the lease.

use super::*;
use crate::{Config, EntryPayload, Lease, LogId, ProposeError, ReadId};

fn hb_ack(from: u64, to: u64, term: u64, token: u64) -> Message {
    msg(from, to, term, MessageBody::HeartbeatResponse { token })
}

fn ack(from: u64, to: u64, term: u64, index: u64) -> Message {
    msg(
        from,
        to,
        term,
        MessageBody::AppendResponse {
            reject: false,
            index: Index(index),
            hint: Default::default(),
        },
    )
}

#[test]
fn read_index_waits_for_the_leaders_own_term_commit() {
    // etcd-io/etcd#7331: before its no-op commits, a new leader's commit
    // index may be stale; no read may use it.
    let mut n = make_leader(node(1, &[1, 2, 3]), &[1, 2, 3]);
    n.read_index(ReadId(7)).unwrap();
    let out = drive(&mut n);
    assert!(out.read_states.is_empty());
    assert!(
        out.messages
            .iter()
            .all(|m| !matches!(m.body, MessageBody::Heartbeat { .. })),
        "no round yet"
    );
    // Even a quorum of heartbeat acks does not release it.
    n.tick();
    let t = token_to(&drive(&mut n).messages, 2);
    n.step(hb_ack(2, 1, 1, t)).unwrap();
    assert!(drive(&mut n).read_states.is_empty());
    // The no-op commits: the read is queued at commit 1 for a fresh round.
    n.step(ack(2, 1, 1, 1)).unwrap();
    let out = drive(&mut n);
    assert!(out.read_states.is_empty());
    let t2 = token_to(&out.messages, 2);
    assert!(t2 > t);
    n.step(hb_ack(3, 1, 1, t2)).unwrap();
    assert_eq!(
        drive(&mut n).read_states,
        vec![ReadState {
            id: ReadId(7),
            index: Index(1)
        }]
    );
}

/// A leader of 3 voters with its no-op committed.
fn ready_leader() -> RawNode<MemStorage> {
    let mut n = make_leader(node(1, &[1, 2, 3]), &[1, 2, 3]);
    n.step(ack(2, 1, 1, 1)).unwrap();
    let _ = drive(&mut n);
    n
}

#[test]
fn reads_queued_before_one_round_are_confirmed_by_that_round() {
    let mut n = ready_leader();
    for id in 1..=3 {
        n.read_index(ReadId(id)).unwrap();
    }
    let out = drive(&mut n);
    let heartbeats: Vec<_> = out
        .messages
        .iter()
        .filter(|m| matches!(m.body, MessageBody::Heartbeat { .. }))
        .collect();
    assert_eq!(heartbeats.len(), 2, "one round: one heartbeat per follower");
    n.step(hb_ack(3, 1, 1, token_to(&out.messages, 3))).unwrap();
    let states = drive(&mut n).read_states;
    assert_eq!(
        states,
        (1..=3)
            .map(|id| ReadState {
                id: ReadId(id),
                index: Index(1)
            })
            .collect::<Vec<_>>()
    );
}

#[test]
fn late_ack_of_an_older_round_does_not_release_a_newer_read() {
    // etcd-io/etcd#20418 (reused ReadIndex contexts) and the batching rule:
    // a read that joins after a round started is not released by that round.
    let mut n = ready_leader();
    n.read_index(ReadId(1)).unwrap();
    let t1 = token_to(&drive(&mut n).messages, 2);
    n.read_index(ReadId(2)).unwrap(); // arrives while round t1 is in flight
    let t2 = token_to(&drive(&mut n).messages, 2);
    assert!(t2 > t1, "every round has a fresh token");
    n.step(hb_ack(2, 1, 1, t1)).unwrap();
    assert_eq!(
        drive(&mut n).read_states,
        vec![ReadState {
            id: ReadId(1),
            index: Index(1)
        }]
    );
    n.step(hb_ack(3, 1, 1, t1)).unwrap(); // late duplicate of the old round
    assert!(drive(&mut n).read_states.is_empty());
    n.step(hb_ack(3, 1, 1, t2)).unwrap();
    assert_eq!(
        drive(&mut n).read_states,
        vec![ReadState {
            id: ReadId(2),
            index: Index(1)
        }]
    );
}

#[test]
fn acks_from_an_older_term_are_ignored() {
    let mut n = ready_leader();
    n.read_index(ReadId(1)).unwrap();
    let t = token_to(&drive(&mut n).messages, 2);
    n.step(hb_ack(2, 1, 0, t)).unwrap();
    assert!(drive(&mut n).read_states.is_empty());
}

#[test]
fn leader_in_a_minority_serves_no_read() {
    // deventlab/d-engine#381, Jepsen 2014: confirm with a quorum round.
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.isolate(1);
    c.node(1).read_index(ReadId(1)).unwrap();
    for _ in 0..30 {
        c.node(1).tick();
        c.settle();
    }
    assert!(c.read_states[&1].is_empty());
    assert_eq!(
        c.node(1).status().role,
        Role::Follower,
        "check-quorum stepped it down"
    );
}

#[test]
fn single_voter_reads_need_no_peers_but_still_follow_the_rules() {
    // deventlab/d-engine#228: the single-node fast path is still a quorum of one.
    let mut n = node(1, &[1]);
    for _ in 0..20 {
        n.tick();
    }
    n.read_index(ReadId(1)).unwrap();
    assert_eq!(n.lease_read(), None, "the no-op is not committed");
    let out = drive(&mut n);
    assert!(out.read_states.is_empty(), "the no-op is not durable yet");
    let out = drive(&mut n); // the no-op commits after the previous advance
    assert_eq!(
        out.read_states,
        vec![ReadState {
            id: ReadId(1),
            index: Index(1)
        }]
    );
    n.tick();
    assert_eq!(n.lease_read(), Some(Index(1)));
}

#[test]
fn follower_read_index_goes_through_the_leader() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.node(2).read_index(ReadId(9)).unwrap();
    c.settle();
    let commit = c.node(1).status().commit;
    assert_eq!(
        c.read_states[&2],
        vec![ReadState {
            id: ReadId(9),
            index: commit
        }]
    );
    let mut lone = node(3, &[1, 2, 3]);
    assert_eq!(
        lone.read_index(ReadId(1)),
        Err(ProposeError::NotLeader { leader: None })
    );
}

#[test]
fn lease_counts_from_when_the_round_was_sent() {
    let mut n = ready_leader();
    n.tick(); // round sent at tick now
    let sent = n.status().now;
    let t = token_to(&drive(&mut n).messages, 2);
    for _ in 0..5 {
        n.tick(); // the ack is slow
    }
    let _ = drive(&mut n);
    assert_eq!(n.lease_read(), None);
    n.step(hb_ack(2, 1, 1, t)).unwrap();
    let _ = drive(&mut n);
    // Lease = election_tick 10 - drift 2 = 8 ticks from the send.
    assert_eq!(n.lease(), Some(Lease { commit: Index(1), ticks_left: sent + 8 - n.status().now }));
    while n.status().now < sent + 7 {
        n.tick();
        let _ = drive(&mut n);
    }
    assert_eq!(n.lease_read(), Some(Index(1)));
    assert_eq!(n.lease(), Some(Lease { commit: Index(1), ticks_left: 1 }));
    n.tick();
    assert_eq!(n.status().now, sent + 8);
    assert_eq!(n.lease(), None);
    assert_eq!(
        n.lease_read(),
        None,
        "expired exactly lease_ticks after the round was sent"
    );
}

#[test]
fn lease_reads_require_check_quorum() {
    // etcd-io/etcd#8450: a lease without check-quorum is unsafe.
    let cfg = Config {
        check_quorum: false,
        ..cfg(1)
    };
    let mut n = RawNode::new(cfg, MemStorage::new(&[1])).unwrap();
    for _ in 0..20 {
        n.tick();
        let _ = drive(&mut n);
    }
    assert_eq!(n.status().role, Role::Leader);
    assert_eq!(n.lease_read(), None);
}

#[test]
fn lease_ends_at_once_when_a_higher_term_is_seen() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.tick_all(1);
    assert!(c.node(1).lease_read().is_some());
    let term = c.node(1).status().term.0;
    c.node(1).step(hb_ack(2, 1, term + 1, 0)).unwrap();
    assert_eq!(c.node(1).lease_read(), None);
}

#[test]
fn no_new_leader_while_an_old_lease_may_be_valid() {
    // The scenario the vote guard exists for: node 3 lost contact with the
    // leader and campaigns while node 2 just acknowledged the leader's round.
    // Node 2 must refuse, so the leader's lease (8 ticks from the round) ends
    // before anyone else can lead.
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.cut.insert((1, 3));
    c.cut.insert((3, 1));
    for _ in 0..7 {
        c.tick_all(1);
        assert!(c.node(1).lease_read().is_some());
        assert_eq!(c.node(1).status().role, Role::Leader);
    }
    for _ in 0..30 {
        c.tick_all(1);
        assert_ne!(
            c.node(3).status().role,
            Role::Leader,
            "node 2 keeps the leader's lease safe"
        );
    }
}

#[test]
fn a_follower_writing_a_ready_answers_heartbeats_at_once() {
    // A follower hands a Ready with entries to a writer and, before the
    // write is durable, gets its leader's heartbeat: the answer may go at
    // once (it promises nothing durable), the append's answer may not.
    let mut f = node(2, &[1, 2, 3]);
    let entry = Entry { log_id: LogId { term: Term(1), index: Index(1) }, payload: EntryPayload::Normal(b"x".to_vec()) };
    f.step(msg(1, 2, 1, MessageBody::AppendEntries { prev: LogId::default(), entries: vec![entry], commit: Index(0) }))
        .unwrap();
    let rd = f.ready();
    assert_eq!(rd.entries.len(), 1);
    assert!(rd.persisted_messages.iter().any(|m| matches!(m.body, MessageBody::AppendResponse { .. })));
    // The write is in flight: no Ready, but the heartbeat's answer is early.
    f.step(msg(1, 2, 1, MessageBody::Heartbeat { commit: Index(0), token: 5 })).unwrap();
    assert!(!f.has_ready());
    let early = f.take_early().messages;
    assert_eq!(early.len(), 1, "{early:?}");
    assert!(matches!(early[0].body, MessageBody::HeartbeatResponse { token: 5 }));
    assert_eq!((early[0].to, early[0].term), (NodeId(1), Term(1)));
    // A heartbeat that commits the entry being written: the commit shows in
    // the next Ready, after this one's writes are durable.
    f.step(msg(1, 2, 1, MessageBody::Heartbeat { commit: Index(1), token: 6 })).unwrap();
    assert_eq!(f.take_early().messages.len(), 1);
    f.reader_mut().persist(&rd);
    f.advance(rd);
    let next = drive(&mut f);
    assert_eq!(next.committed.len(), 1);
    assert!(next.entries.is_empty(), "the entry is written once");
}
