//! The note of log time a node reads after a restart, when entries whose
//! stamps it counted leave its log: at every crash point, the restarted
//! node finds either those entries still in its log or a note that no
//! longer counts them (see `StampClock::rewind`).

use std::time::{Duration, Instant};

use wasmraft_raft::{Entry, EntryPayload, Index, LogId, LogReader, Message, MessageBody, NodeId, Term};

use super::cluster::{Live, Outbox, node_config};
use super::leader_proposals::{leader_of_two, put};
use super::plugin_cache;
use crate::envelope::Envelope;

/// Where the wall clock stands while node 1 leads: its stamps start there
/// (it has no log time to keep to), far ahead of the stamp of the entry
/// that replaces them.
const LEADER_WALL_MS: u64 = 50_000;
const REPLACING_STAMP_MS: u64 = 1_000;

/// What the restarted node finds, after a crash that let `writes` more
/// writes through once node 2's entry arrived.
struct Found {
    replaced: bool,
    note: Option<wasmraft_storage::LogTimeNote>,
    log_time: u64,
}

fn crash_while_the_suffix_is_replaced(writes: u64) -> Found {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let (mut leader, mut ms) = leader_of_two(dir.path(), &outbox, start);
    let term = leader.node.status().term;
    let mut turns = |leader: &mut Live, n: u64| {
        for _ in 0..n {
            ms += 1;
            leader.turn(start + Duration::from_millis(ms), LEADER_WALL_MS + ms, false);
            leader.apply(usize::MAX);
        }
    };
    // A put node 2 never acknowledges, stamped from node 1's wall clock,
    // and the note of that log time.
    turns(&mut leader, 2);
    let (reply, _answer) = tokio::sync::oneshot::channel();
    leader.node.ask_propose((put("a", 10), 5, 1, reply)).unwrap();
    turns(&mut leader, 3);
    let at = leader.node.status().last_index;
    let storage = leader.raft_loop.storage.clone();
    assert_eq!(storage.term(Index(at)), Ok(Term(term)));
    let noted = storage.log_time_note().unwrap().expect("a note once log time is known").log_time_ms;
    assert!(noted >= LEADER_WALL_MS, "the note counts the put's stamp: {noted}");

    // Node 2 won the next term without it: its own entry at that index.
    let prev = LogId::new(storage.term(Index(at - 1)).unwrap().0, at - 1);
    let command = Envelope { timestamp_ms: REPLACING_STAMP_MS, client_id: 0, sequence: 0, command: put("b", 10) }.encode();
    storage.crash_after_writes(writes);
    leader.node.step(Message {
        from: NodeId(2),
        to: NodeId(1),
        term: Term(term + 1),
        body: MessageBody::AppendEntries {
            prev,
            entries: vec![Entry { log_id: LogId::new(term + 1, at), payload: EntryPayload::Normal(command) }],
            commit: Index(0),
        },
    });
    turns(&mut leader, 3);
    drop(storage);
    drop(leader);

    let restarted = Live::start(node_config(1, &[1, 2], dir.path(), plugin_cache(), 1), outbox, start, start).unwrap();
    let storage = &restarted.raft_loop.storage;
    Found {
        replaced: storage.term(Index(at)) != Ok(Term(term)),
        note: storage.log_time_note().unwrap(),
        log_time: crate::timers::stored_log_time(storage).unwrap(),
    }
}

#[test]
fn at_every_crash_point_a_replaced_suffix_leaves_no_note_of_its_time() {
    let mut replaced = 0;
    for writes in 0..4 {
        let found = crash_while_the_suffix_is_replaced(writes);
        if found.replaced {
            replaced += 1;
            assert!(
                found.note.is_none_or(|n| n.log_time_ms <= found.log_time),
                "after {writes} writes: the note {:?} counts stamps no longer in the log (log time {})",
                found.note,
                found.log_time
            );
        }
    }
    assert!(replaced > 0, "no crash point let the replacing entry reach the log");
    // And without a crash, the node follows node 2 with its entry.
    let found = crash_while_the_suffix_is_replaced(u64::MAX);
    assert!(found.replaced);
    assert_eq!(found.log_time, REPLACING_STAMP_MS);
}
