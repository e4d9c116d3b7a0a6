//! A commit index learned without entries is kept back from the log: the
//! Raft loop never waits for a busy log to write it, and it reaches the
//! disk with the next entries or alone a tick later.

use std::time::{Duration, Instant};

use wasmraft_raft::{Entry, EntryPayload, Index, LogId, Message, MessageBody, NodeId, Term};

use super::cluster::{Live, Outbox, Outgoing, node_config};
use super::plugin_cache;

fn append(prev: u64, entries: Vec<Entry>, commit: u64) -> Message {
    Message {
        from: NodeId(1),
        to: NodeId(2),
        term: Term(1),
        body: MessageBody::AppendEntries { prev: LogId::new(u64::from(prev > 0), prev), entries, commit: Index(commit) },
    }
}

fn entry(index: u64) -> Entry {
    Entry { log_id: LogId::new(1, index), payload: EntryPayload::Normal(vec![7; 16]) }
}

fn answered(outbox: &Outbox, at: u64) -> bool {
    outbox.lock().iter().any(|(_, out)| {
        matches!(out, Outgoing::Message(Message { body: MessageBody::AppendResponse { reject: false, index, .. }, .. }) if index.0 == at)
    })
}

/// A follower whose log's segments are in use (a write waiting for a
/// flush) takes a new commit index in its turn, answers, and writes it
/// once the log is free; the loop used to write it itself in the turn, and
/// stalled behind the log past an election timeout (t64's lost leaderships).
#[test]
fn a_commit_index_never_waits_for_a_busy_log() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let config = node_config(2, &[1, 2, 3], dir.path(), plugin_cache(), 1);
    let tick = config.tick_interval.as_millis() as u64;
    let mut follower = Live::start(config, outbox.clone(), crate::boot_clock::BootClock::simulated(start), start).unwrap();
    follower.node.step(append(0, vec![entry(1), entry(2)], 0));
    follower.turn(at(1), 1, false);
    follower.turn(at(2), 2, false);
    assert!(answered(&outbox, 2), "entries 1 and 2 were not taken");
    let storage = follower.node.storage().clone();
    assert_eq!(storage.hard_state().commit, Index(0));

    // Entry 1 commits, with no entries to write, while the log is busy.
    let held = storage.hold_log_writes(Duration::from_secs(10));
    follower.node.step(append(2, Vec::new(), 1));
    follower.turn(at(3), 3, false);
    // Due a tick later, and tried then: busy, so due again a tick later.
    follower.turn(at(3 + tick), 3 + tick, false);
    assert!(held.release(), "the Raft loop waited for the busy log");
    assert_eq!(follower.node.status().commit, 1);
    assert_eq!(storage.hard_state().commit, Index(0), "written while the log was busy");
    follower.turn(at(3 + 2 * tick), 3 + 2 * tick, false);
    assert_eq!(storage.hard_state().commit, Index(1), "not written once due and the log free");

    // Entry 2 commits; entry 3, in the next turn, takes it to the disk
    // before it is due.
    follower.node.step(append(2, Vec::new(), 2));
    follower.turn(at(4 + 2 * tick), 4 + 2 * tick, false);
    assert_eq!(storage.hard_state().commit, Index(1));
    follower.node.step(append(2, vec![entry(3)], 2));
    follower.turn(at(5 + 2 * tick), 5 + 2 * tick, false);
    follower.turn(at(6 + 2 * tick), 6 + 2 * tick, false);
    assert!(answered(&outbox, 3), "entry 3 was not taken");
    assert_eq!(storage.hard_state().commit, Index(2), "the write of entry 3 left the commit index behind");
}
