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
            MessageBody::AppendEntries { prev, entries, .. } => {
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

#[test]
fn a_commit_index_goes_at_once_to_the_forwarder_and_after_a_delay_to_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let at = |us: u64| start + Duration::from_micros(us);
    let config = node_config(1, &[1, 2, 3], dir.path(), plugin_cache(), 1);
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
    // A tick every 10 ms from the start carries the commit index in its
    // heartbeats: what follows happens between two ticks (t in us).
    let t = (last_ms / 10 + 1) * 10_000 + 1_000;
    leader.node.step(forwarded(status.term, seq + 1));
    leader.turn(at(t), t / 1_000, false);
    let sent = answer(&leader, &outbox);
    let forwarded_entry = sent
        .iter()
        .find_map(|m| match &m.body {
            MessageBody::AppendEntries { entries, .. } if m.to.0 == 3 => entries.last().map(|e| e.log_id.index),
            _ => None,
        })
        .expect("the forwarded batch was appended and sent to node 3");
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

/// Node 2's batch `seq` of one put.
fn forwarded(term: u64, seq: u64) -> Message {
    let command = super::leader_proposals::put(&format!("k{seq}"), 10);
    let command = Envelope { timestamp_ms: 0, client_id: 0, sequence: 0, command }.encode();
    Message { from: NodeId(2), to: NodeId(1), term: Term(term), body: MessageBody::Propose { session: 9, seq, commands: vec![command] } }
}
