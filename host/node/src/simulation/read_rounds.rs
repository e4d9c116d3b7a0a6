//! A node has one ReadIndex round of its own in flight: linearizable reads
//! that arrive meanwhile join the next round, which starts as soon as the
//! first is answered. A round whose message is lost is started again after
//! half an election timeout, with its reads (see `loop_queue`).

use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use wasmraft_raft::{Index, Message, MessageBody, NodeId, ReadId, Term};

use super::cluster::{Live, Outbox, Outgoing, node_config};
use super::plugin_cache;
use crate::error::Error;

fn from_leader(body: MessageBody) -> Message {
    Message { from: NodeId(1), to: NodeId(2), term: Term(1), body }
}

fn heartbeat(token: u64) -> Message {
    from_leader(MessageBody::Heartbeat { commit: Index(0), token })
}

/// The ReadIndex requests the follower sent since the last call.
fn rounds_sent(outbox: &Outbox) -> Vec<ReadId> {
    outbox
        .lock()
        .drain(..)
        .filter_map(|(_, out)| match out {
            Outgoing::Message(Message { body: MessageBody::ReadIndex { id }, .. }) => Some(id),
            _ => None,
        })
        .collect()
}

type Answer = oneshot::Receiver<Result<Index, Error>>;

fn ask(follower: &Live) -> Answer {
    let (reply, answer) = oneshot::channel();
    follower.node.ask_read_index(reply).unwrap();
    answer
}

fn answered(answer: &mut Answer) -> Option<Index> {
    answer.try_recv().ok().map(|r| r.unwrap())
}

#[test]
fn reads_during_a_round_join_the_next_and_a_lost_round_is_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    // 10 ms ticks, a 100 ms election timeout.
    let config = node_config(2, &[1, 2, 3], dir.path(), plugin_cache(), 1);
    let mut follower = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    let at = |ms: u64| start + Duration::from_millis(ms);
    follower.node.step(heartbeat(1));
    follower.turn(at(1), 1, false);
    assert_eq!(follower.node.status().leader, Some(NodeId(1)));
    rounds_sent(&outbox);

    let mut a = ask(&follower);
    follower.turn(at(2), 2, false);
    let first = rounds_sent(&outbox);
    assert_eq!(first.len(), 1, "a read starts a round");

    let (mut b, mut c) = (ask(&follower), ask(&follower));
    follower.turn(at(3), 3, false);
    assert!(rounds_sent(&outbox).is_empty(), "reads during a round wait for it");

    follower.node.step(from_leader(MessageBody::ReadIndexResponse { id: first[0], index: Index(5) }));
    follower.turn(at(4), 4, false);
    assert_eq!(answered(&mut a), Some(Index(5)));
    assert_eq!((answered(&mut b), answered(&mut c)), (None, None), "b and c came after the first round began");
    let second = rounds_sent(&outbox);
    assert_eq!(second.len(), 1, "the reads that waited start the next round in the same turn");

    // The second round's request is lost. The leader keeps heartbeating.
    follower.node.step(heartbeat(2));
    follower.turn(at(40), 40, false);
    assert!(rounds_sent(&outbox).is_empty(), "a round is given half an election timeout");
    follower.node.step(heartbeat(3));
    follower.turn(at(60), 60, false);
    let third = rounds_sent(&outbox);
    assert_eq!(third.len(), 1, "an unanswered round is started again");
    assert_ne!(third, second);

    // A late answer to the round given up answers nothing; the new round does.
    follower.node.step(from_leader(MessageBody::ReadIndexResponse { id: second[0], index: Index(6) }));
    follower.turn(at(61), 61, false);
    assert_eq!((answered(&mut b), answered(&mut c)), (None, None));
    follower.node.step(from_leader(MessageBody::ReadIndexResponse { id: third[0], index: Index(7) }));
    follower.turn(at(62), 62, false);
    assert_eq!((answered(&mut b), answered(&mut c)), (Some(Index(7)), Some(Index(7))));
    assert!(rounds_sent(&outbox).is_empty(), "no read waits: no round");
}

#[test]
fn reads_asked_of_a_stopped_loop_get_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let config = node_config(2, &[1, 2, 3], dir.path(), plugin_cache(), 1);
    let mut follower = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    follower.node.step(heartbeat(1));
    follower.turn(start, 1, false);
    let mut waiting = ask(&follower);
    follower.turn(start, 1, false);
    let mut next = ask(&follower);
    follower.node.send(crate::raft_loop::LoopMsg::Shutdown).unwrap();
    follower.turn(start, 1, false);
    assert!(follower.stopped);
    assert!(matches!(next.try_recv(), Ok(Err(Error::Stopped))), "a read waiting for the next round");
    drop(follower.raft_loop);
    assert_eq!(waiting.try_recv(), Err(oneshot::error::TryRecvError::Closed), "the round in flight ends with the loop");
    let (reply, _answer) = oneshot::channel();
    assert!(matches!(follower.node.ask_read_index(reply), Err(Error::Stopped)), "a read asked later");
}
