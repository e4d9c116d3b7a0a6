//! The order in which a follower's Raft loop steps a leader's appends when
//! large entries leave some of them waiting for the next write.

use std::time::{Duration, Instant};

use wasmraft_raft::{Entry, EntryPayload, Index, LogId, Message, MessageBody, NodeId, Term};

use super::cluster::{Live, Outbox, Outgoing, node_config};
use super::plugin_cache;

fn append(prev: u64, entries: Vec<Entry>) -> Message {
    Message {
        from: NodeId(1),
        to: NodeId(2),
        term: Term(1),
        body: MessageBody::AppendEntries {
            prev: LogId::new(u64::from(prev > 0), prev),
            entries,
            commit: Index(0),
        },
    }
}

fn entry(index: u64) -> Entry {
    // Two fill a write's 8 MiB (`TURN_BYTES`).
    Entry { log_id: LogId::new(1, index), payload: EntryPayload::Normal(vec![7; 5 << 20]) }
}

/// The leader follows appends with an empty one at their end to learn
/// whether they arrived (`HeartbeatFollowUp::EmptyAppend`). When the third
/// large append waited for room in the next write, the empty one behind it
/// was stepped first and rejected, and the leader went back to probing and
/// resent everything in flight (t64's lost leaderships).
#[test]
fn an_empty_append_waits_behind_appends_held_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let config = node_config(2, &[1, 2, 3], dir.path(), plugin_cache(), 1);
    let mut follower = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    follower.node.step(append(0, vec![entry(1)]));
    follower.node.step(append(1, vec![entry(2)]));
    follower.node.step(append(2, vec![entry(3)]));
    follower.node.step(append(3, Vec::new()));
    for ms in 0..5 {
        follower.turn(start + Duration::from_millis(ms), ms, false);
    }
    let answers: Vec<(bool, u64)> = outbox
        .lock()
        .iter()
        .filter_map(|(_, out)| match out {
            Outgoing::Message(Message { body: MessageBody::AppendResponse { reject, index, .. }, .. }) => {
                Some((*reject, index.0))
            }
            _ => None,
        })
        .collect();
    assert!(answers.iter().all(|(reject, _)| !reject), "an append was rejected: {answers:?}");
    assert_eq!(answers.last().map(|a| a.1), Some(3), "{answers:?}");
    assert_eq!(follower.node.status().last_index, 3);
}
