//! How a leader takes proposals under load (t64's lost puts: a hundred
//! clients retrying 1.4 MiB puts behind a queue the leader could not drain
//! within their timeout).
//!
//! - It admits followers' batches into the budget its own clients'
//!   requests take (`max_pending_bytes`), and answers the ones that do not
//!   fit `busy` at once, instead of dropping them unanswered.
//! - A retry of a proposal still in its log, from its own client or a
//!   follower's, waits for that entry instead of appending a copy.

use std::time::{Duration, Instant};

use prost::Message as _;
use wasmraft_proto::etcdserverpb::PutRequest;
use wasmraft_proto::kvplugin::{Request as KvRequest, request};
use wasmraft_raft::{Message, MessageBody, NodeId, ProposeOutcome, Role};

use super::cluster::{Live, Outbox, Outgoing, node_config};
use super::plugin_cache;
use crate::envelope::Envelope;
use crate::raft_loop::LoopMsg;

const VALUE: usize = 900 << 10;

pub(super) fn put(key: &str, bytes: usize) -> Vec<u8> {
    let put = PutRequest { key: key.as_bytes().to_vec(), value: vec![7; bytes], ..Default::default() };
    KvRequest { request: Some(request::Request::RequestPut(put)) }.encode_to_vec()
}

/// A follower's batch `seq` of `commands`, each (client, sequence, command).
fn forwarded(term: u64, seq: u64, commands: Vec<(u64, u64, Vec<u8>)>) -> Message {
    let commands = commands
        .into_iter()
        .map(|(client_id, sequence, command)| Envelope { timestamp_ms: 0, client_id, sequence, command }.encode())
        .collect();
    Message { from: NodeId(2), to: NodeId(1), term: wasmraft_raft::Term(term), body: MessageBody::Propose { session: 9, seq, commands } }
}

fn batch(term: u64, seq: u64) -> Message {
    forwarded(term, seq, vec![(0, 0, put(&format!("k{seq}"), VALUE))])
}

/// A single voter that elected itself, with 3 MiB for proposals in flight.
fn leader(dir: &std::path::Path, outbox: &Outbox, start: Instant) -> (Live, u64) {
    let mut config = node_config(1, &[1], dir, plugin_cache(), 1);
    config.max_request_bytes = 1 << 20;
    config.max_pending_bytes = 3 << 20;
    let mut leader = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    for ms in 1..=500 {
        if leader.node.status().role == Role::Leader {
            break;
        }
        leader.turn(start + Duration::from_millis(ms * 10), ms * 10, false);
        leader.apply(usize::MAX);
    }
    assert_eq!(leader.node.status().role, Role::Leader, "a single voter did not elect itself");
    // Its first entry written, committed and applied.
    for ms in 1..=5 {
        leader.turn(start + Duration::from_millis(5_000 + ms), 5_000 + ms, false);
        leader.apply(usize::MAX);
    }
    answers(outbox);
    let term = leader.node.status().term;
    (leader, term)
}

/// The answers the leader sent so far, by batch, in order.
fn answers(outbox: &Outbox) -> Vec<(u64, ProposeOutcome)> {
    outbox
        .lock()
        .drain(..)
        .filter_map(|(_, out)| match out {
            Outgoing::Message(Message { body: MessageBody::ProposeResponse { seq, outcome }, .. }) => Some((seq, outcome)),
            _ => None,
        })
        .collect()
}

fn appended(answers: &[(u64, ProposeOutcome)]) -> Vec<u64> {
    answers.iter().filter(|(_, o)| matches!(o, ProposeOutcome::Appended { .. })).map(|(s, _)| *s).collect()
}

#[test]
fn a_leader_answers_busy_to_batches_past_its_budget_until_earlier_ones_apply() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let (mut leader, term) = leader(dir.path(), &outbox, start);
    let mut ms = 10_000;
    let mut turn = |leader: &mut Live| {
        ms += 10;
        leader.turn(start + Duration::from_millis(ms), ms, false);
        leader.apply(usize::MAX);
    };

    // Three batches of 900 KiB fit in 3 MiB, the fourth does not.
    for seq in 1..=4 {
        leader.node.step(batch(term, seq));
    }
    // Taken after the log write in flight, if any.
    turn(&mut leader);
    turn(&mut leader);
    let got = answers(&outbox);
    assert_eq!(appended(&got), [1, 2, 3], "{got:?}");
    assert!(got.contains(&(4, ProposeOutcome::Busy)), "the fourth is refused busy, not dropped: {got:?}");
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(leader.node.status().busy_refusals, 1);

    // Once the first three apply, their room is back: three more fit.
    for _ in 0..100 {
        turn(&mut leader);
    }
    assert_eq!(leader.node.status().applied, leader.node.status().last_index);
    // A duplicate takes room as it arrives and gives it back, unanswered,
    // when the loop takes it.
    leader.node.step(batch(term, 2));
    turn(&mut leader);
    assert_eq!(answers(&outbox), []);
    for seq in 5..=8 {
        leader.node.step(batch(term, seq));
    }
    turn(&mut leader);
    turn(&mut leader);
    let got = answers(&outbox);
    assert_eq!(appended(&got), [5, 6, 7], "{got:?}");
    assert!(got.contains(&(8, ProposeOutcome::Busy)), "{got:?}");
}

/// Node 1 of voters 1 and 2, elected with the votes the test gives as
/// node 2, which then acknowledges nothing until told: its appends stay
/// uncommitted. Returns it with the time of its election, in ms from `start`.
pub(super) fn leader_of_two(dir: &std::path::Path, outbox: &Outbox, start: Instant) -> (Live, u64) {
    let config = node_config(1, &[1, 2], dir, plugin_cache(), 1);
    let mut leader = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    let mut ms = 0;
    while leader.node.status().role != Role::Leader && ms < 5_000 {
        ms += 10;
        leader.turn(start + Duration::from_millis(ms), ms, false);
        let votes: Vec<_> = outbox
            .lock()
            .drain(..)
            .filter_map(|(_, out)| match out {
                Outgoing::Message(Message { term, body: MessageBody::RequestVote { pre_vote, .. }, .. }) => Some((term, pre_vote)),
                _ => None,
            })
            .collect();
        for (term, pre_vote) in votes {
            leader.node.step(Message { from: NodeId(2), to: NodeId(1), term, body: MessageBody::VoteResponse { pre_vote, reject: false } });
        }
    }
    assert_eq!(leader.node.status().role, Role::Leader, "node 1 was not elected");
    (leader, ms)
}

#[test]
fn a_retry_of_a_proposal_still_in_the_log_waits_for_it_instead_of_appending_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let (mut leader, mut ms) = leader_of_two(dir.path(), &outbox, start);
    let term = leader.node.status().term;
    // A millisecond a turn: all of it well within one election timeout
    // (100 ms), which would find node 2 silent.
    let mut turns = |leader: &mut Live, n: u64| {
        for _ in 0..n {
            ms += 1;
            leader.turn(start + Duration::from_millis(ms), ms, false);
            leader.apply(usize::MAX);
        }
    };
    let propose = |leader: &Live, client_id: u64, command: Vec<u8>| {
        let (reply, rx) = tokio::sync::oneshot::channel();
        leader.node.ask_propose((command, client_id, 1, reply)).unwrap();
        rx
    };

    turns(&mut leader, 3);
    let before = leader.node.status().last_index;
    let mut first = propose(&leader, 5, put("a", 10));
    turns(&mut leader, 3);
    let at = before + 1;
    assert_eq!(leader.node.status().last_index, at);
    // Uncommitted: its client's retry, and a follower's batch with a new
    // proposal and another retry of it, append only the new one.
    let mut retry = propose(&leader, 5, put("a", 10));
    leader.node.step(forwarded(term, 1, vec![(6, 1, put("b", 10)), (5, 1, put("a", 10))]));
    turns(&mut leader, 3);
    assert_eq!(leader.node.status().last_index, at + 1, "one entry for client 6, none for client 5's retries");
    let got = answers(&outbox);
    assert_eq!(got, [(1, ProposeOutcome::Placed { at: vec![wasmraft_raft::Index(at + 1), wasmraft_raft::Index(at)] })]);

    // Node 2 acknowledges: all commit and apply.
    let ack = |index: u64| Message {
        from: NodeId(2),
        to: NodeId(1),
        term: wasmraft_raft::Term(term),
        body: MessageBody::AppendResponse { reject: false, index: wasmraft_raft::Index(index), hint: Default::default() },
    };
    leader.node.step(ack(at + 1));
    turns(&mut leader, 5);
    assert_eq!(leader.node.status().applied, at + 1);
    let first = first.try_recv().expect("answered").expect("applied");
    let retry = retry.try_recv().expect("answered").expect("applied");
    assert_eq!((first.index, retry.index), (at, at), "both answered by the one entry");
    assert_eq!(first.response, retry.response);

    // Committed, a retry is appended again (the apply step answers it
    // with the first outcome).
    let mut late = propose(&leader, 5, put("a", 10));
    turns(&mut leader, 3);
    assert_eq!(leader.node.status().last_index, at + 2);
    leader.node.step(ack(at + 2));
    turns(&mut leader, 5);
    assert_eq!(late.try_recv().expect("answered").expect("applied").response, first.response);
}

#[test]
fn proposals_made_during_a_log_write_ring_the_loop_once_and_go_to_the_log_together_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let (mut leader, _) = leader(dir.path(), &outbox, start);
    let last = |leader: &Live| leader.raft_loop.raw.status().last_index.0;
    let propose = |leader: &Live, client_id: u64| {
        let (reply, rx) = tokio::sync::oneshot::channel();
        leader.node.ask_propose((put(&format!("k{client_id}"), 10), client_id, 1, reply)).unwrap();
        rx
    };
    // Messages waiting in the loop's inbox that ring it for proposals.
    let rings = |leader: &Live| {
        let waiting: Vec<_> = leader.raft_loop.inbox.try_iter().collect();
        let rings = waiting.iter().filter(|m| matches!(m, LoopMsg::ProposalsWaiting)).count();
        for m in waiting.into_iter().filter(|m| !matches!(m, LoopMsg::ProposalsWaiting)) {
            leader.raft_loop.self_tx.send(m).unwrap();
        }
        rings
    };
    let mut ms = 6_000;
    let mut turn = |leader: &mut Live, slow_disk: bool| {
        ms += 1;
        leader.turn(start + Duration::from_millis(ms), ms, slow_disk);
        leader.apply(usize::MAX);
    };

    let before = last(&leader);
    let mut first = propose(&leader, 1);
    assert_eq!(rings(&leader), 1);
    // Its write stays in flight while the disk is slow.
    turn(&mut leader, true);
    assert_eq!(last(&leader), before + 1);
    let mut later: Vec<_> = (2..=4).map(|client| propose(&leader, client)).collect();
    assert_eq!(rings(&leader), 1, "only the first proposal since the loop took them rings it");
    turn(&mut leader, true);
    turn(&mut leader, true);
    assert_eq!(last(&leader), before + 1, "proposals wait for the write in flight");
    // The write ends; the proposals that waited go to the log in the next
    // turn (a thread's loop takes it at once: they wait in the queue).
    turn(&mut leader, false);
    turn(&mut leader, false);
    assert_eq!(last(&leader), before + 4, "the three waiting proposals, in one append");
    for _ in 0..3 {
        turn(&mut leader, false);
    }
    assert!(first.try_recv().expect("answered").is_ok());
    for rx in &mut later {
        assert!(rx.try_recv().expect("answered").is_ok());
    }
}
