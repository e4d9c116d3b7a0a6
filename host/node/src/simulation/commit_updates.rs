//! When a leader tells its followers a new commit index (the core defers
//! it, `Config::defer_commit_updates`; `RaftLoop::send_commit_updates`
//! decides): at once to a follower whose forwarded proposals it covers,
//! after `COMMIT_UPDATE_DELAY` to the others unless an append carried it
//! first.

use std::time::{Duration, Instant};

use wasmraft_raft::{Index, LogId, Message, MessageBody, NodeId, Role, Term};

use super::cluster::{Live, Outbox, Outgoing, node_config};
use super::plugin_cache;
use crate::envelope::Envelope;

fn reply(from: u64, term: Term, body: MessageBody) -> Message {
    Message { from: NodeId(from), to: NodeId(1), term, body }
}

/// Takes what node 1 sent, answering as nodes 2 and 3 would: votes yes, and
/// every append accepted.
fn answer(leader: &Live, outbox: &Outbox) -> Vec<Message> {
    answer_from(leader, outbox, &[2, 3])
}

/// [`answer`], with only the appends to `nodes` answered.
fn answer_from(leader: &Live, outbox: &Outbox, nodes: &[u64]) -> Vec<Message> {
    let sent: Vec<Message> = outbox
        .lock()
        .drain(..)
        .filter_map(|(_, out)| match out {
            Outgoing::Message(m) => Some(m),
            Outgoing::Snapshot(..) => None,
        })
        .collect();
    for m in &sent {
        let to = m.to.0;
        match &m.body {
            MessageBody::RequestVote { pre_vote, .. } if to == 2 => {
                leader.node.step(reply(to, m.term, MessageBody::VoteResponse { pre_vote: *pre_vote, reject: false }));
            }
            MessageBody::AppendEntries { prev, entries, .. } if nodes.contains(&to) => {
                let index = entries.last().map_or(prev.index, |e| e.log_id.index);
                let body = MessageBody::AppendResponse { reject: false, index, hint: LogId::default() };
                leader.node.step(reply(to, m.term, body));
            }
            _ => {}
        }
    }
    sent
}

/// The commit index each AppendEntries in `sent` carried to `to`.
fn commits_to(sent: &[Message], to: u64) -> Vec<Index> {
    sent.iter()
        .filter(|m| m.to.0 == to)
        .filter_map(|m| match m.body {
            MessageBody::AppendEntries { commit, .. } => Some(commit),
            _ => None,
        })
        .collect()
}

/// Node 1, elected with node 2's votes, its no-op and a first batch that
/// node 2 forwarded committed, every follower answering (both replicate
/// from then on); and a time (in us from `start`) 1 ms past a tick, as a
/// tick every 10 ms from the start carries the commit index in its
/// heartbeats.
fn leading(dir: &std::path::Path, outbox: &Outbox, start: Instant) -> (Live, u64) {
    let at = |us: u64| start + Duration::from_micros(us);
    let config = node_config(1, &[1, 2, 3], dir, plugin_cache(), 1);
    let mut leader = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    // Elected with node 2's votes; its no-op and a first forwarded batch
    // committed, every follower answering (both replicate from then on).
    let mut seq = 0;
    let mut last_ms = 0;
    for ms in 1..=2_000 {
        last_ms = ms;
        leader.turn(at(ms * 1_000), ms, false);
        leader.apply(usize::MAX);
        answer(&leader, &outbox);
        if leader.node.status().role == Role::Leader && leader.node.status().commit > 1 {
            break;
        }
        if leader.node.status().role == Role::Leader && seq == 0 {
            seq = 1;
            leader.node.step(forwarded(leader.node.status().term, seq));
        }
    }
    let status = leader.node.status();
    assert_eq!(status.role, Role::Leader, "node 1 was not elected");
    assert!(status.commit > 1, "nothing committed");
    (leader, (last_ms / 10 + 1) * 10_000 + 1_000)
}

/// The last entry of the appends to node `to` in `sent`.
fn appended_to(sent: &[Message], to: u64) -> Index {
    sent.iter()
        .find_map(|m| match &m.body {
            MessageBody::AppendEntries { entries, .. } if m.to.0 == to => entries.last().map(|e| e.log_id.index),
            _ => None,
        })
        .expect("the forwarded batch was appended and sent")
}

#[test]
fn a_commit_index_goes_at_once_to_the_forwarder_and_after_a_delay_to_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let at = |us: u64| start + Duration::from_micros(us);
    let (mut leader, t) = leading(dir.path(), &outbox, start);
    leader.node.step(forwarded(leader.node.status().term, 2));
    leader.turn(at(t), t / 1_000, false);
    let forwarded_entry = appended_to(&answer(&leader, &outbox), 3);
    // Its own write done and both answers in: committed. Node 2 forwarded
    // the entry and its clients wait for it, so it hears at once; node 3
    // does not, yet.
    leader.turn(at(t + 100), t / 1_000, false);
    assert_eq!(leader.node.status().commit, forwarded_entry.0);
    let sent = answer(&leader, &outbox);
    assert_eq!(commits_to(&sent, 2), vec![forwarded_entry], "{sent:?}");
    assert!(commits_to(&sent, 3).is_empty(), "{sent:?}");
    leader.turn(at(t + 900), t / 1_000, false);
    assert!(commits_to(&answer(&leader, &outbox), 3).is_empty(), "node 3 was told before the delay");
    // No append carried it within the delay: it goes alone.
    leader.turn(at(t + 1_100), t / 1_000 + 1, false);
    let sent = answer(&leader, &outbox);
    assert_eq!(commits_to(&sent, 3), vec![forwarded_entry], "{sent:?}");
    assert!(commits_to(&sent, 2).is_empty(), "node 2 knew it already: {sent:?}");
}

#[test]
fn a_forwarder_is_told_at_once_even_before_it_answers_the_append() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let at = |us: u64| start + Duration::from_micros(us);
    let (mut leader, t) = leading(dir.path(), &outbox, start);
    // Two batches from node 2, in two appends, neither answered yet.
    let term = leader.node.status().term;
    leader.node.step(forwarded(term, 2));
    leader.turn(at(t), t / 1_000, false);
    let first = appended_to(&answer_from(&leader, &outbox, &[]), 2);
    leader.node.step(forwarded(term, 3));
    let mut second = None;
    for us in [100, 200, 300] {
        leader.turn(at(t + us), t / 1_000, false);
        let sent = answer_from(&leader, &outbox, &[]);
        assert!(commits_to(&sent, 2).iter().all(|&c| c < first), "nothing committed the first batch yet: {sent:?}");
        if let Some(index) = sent.iter().find_map(|m| match &m.body {
            MessageBody::AppendEntries { entries, .. } if m.to.0 == 2 => entries.last().map(|e| e.log_id.index),
            _ => None,
        }) {
            second = Some(index);
            break;
        }
    }
    let second = second.expect("the second batch was appended and sent");
    assert!(second > first);
    // Node 3 answers the first: committed. Node 2 hears it behind the
    // appends it has not answered, as it would have before commit indexes
    // waited, though its second batch still waits.
    let ack = |index| MessageBody::AppendResponse { reject: false, index, hint: LogId::default() };
    leader.node.step(reply(3, Term(term), ack(first)));
    leader.turn(at(t + 400), t / 1_000, false);
    assert_eq!(leader.node.status().commit, first.0);
    let sent = answer_from(&leader, &outbox, &[]);
    assert_eq!(commits_to(&sent, 2), vec![first], "{sent:?}");
    // Node 3's answer to the second commits it, and node 2 hears that at
    // once too.
    leader.node.step(reply(2, Term(term), ack(first)));
    leader.node.step(reply(3, Term(term), ack(second)));
    leader.turn(at(t + 500), t / 1_000, false);
    assert_eq!(leader.node.status().commit, second.0);
    let sent = answer_from(&leader, &outbox, &[]);
    assert_eq!(commits_to(&sent, 2), vec![second], "{sent:?}");
}

/// Node 2's batch `seq` of one put.
fn forwarded(term: u64, seq: u64) -> Message {
    let command = super::leader_proposals::put(&format!("k{seq}"), 10);
    let command = Envelope { timestamp_ms: 0, client_id: 0, sequence: 0, command }.encode();
    Message { from: NodeId(2), to: NodeId(1), term: Term(term), body: MessageBody::Propose { session: 9, seq, commands: vec![command] } }
}
