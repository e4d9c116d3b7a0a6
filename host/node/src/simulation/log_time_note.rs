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

    let restarted = Live::start(node_config(1, &[1, 2], dir.path(), plugin_cache(), 1), outbox, crate::boot_clock::BootClock::simulated(start), start).unwrap();
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

/// What a node that crashed as a new term's first entry reached it finds
/// after its restart.
struct NewTerm {
    appended: bool,
    note: Option<wasmraft_storage::LogTimeNote>,
    /// The new entry's stamp, and when it arrived, in boot ms.
    stamp: u64,
    arrived_ms: u64,
}

fn crash_as_a_new_term_arrives(writes: u64) -> NewTerm {
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
        ms
    };
    // Node 1 stamps a put from its wall clock, and runs on for 90 ms.
    turns(&mut leader, 2);
    let (reply, _answer) = tokio::sync::oneshot::channel();
    leader.node.ask_propose((put("a", 10), 5, 1, reply)).unwrap();
    let arrived_ms = turns(&mut leader, 90);
    let at = leader.node.status().last_index;
    let storage = leader.raft_loop.storage.clone();
    let own_stamp = crate::timers::stored_log_time(&storage).unwrap();
    assert!(own_stamp >= LEADER_WALL_MS, "{own_stamp}");

    // Node 2 leads the next term on a clock that lags node 1's by about
    // 90 ms (it anchored from a lagging estimate): node 1's note,
    // extrapolated from its own clock, is ahead of it.
    let stamp = own_stamp + 1;
    let command = Envelope { timestamp_ms: stamp, client_id: 0, sequence: 0, command: put("b", 10) }.encode();
    storage.crash_after_writes(writes);
    leader.node.step(Message {
        from: NodeId(2),
        to: NodeId(1),
        term: Term(term + 1),
        body: MessageBody::AppendEntries {
            prev: LogId::new(term, at),
            entries: vec![Entry { log_id: LogId::new(term + 1, at + 1), payload: EntryPayload::Normal(command) }],
            commit: Index(0),
        },
    });
    turns(&mut leader, 3);
    drop(storage);
    drop(leader);

    let boot = crate::boot_clock::BootClock::simulated(start);
    let restarted = Live::start(node_config(1, &[1, 2], dir.path(), plugin_cache(), 1), outbox, boot, start).unwrap();
    let storage = &restarted.raft_loop.storage;
    NewTerm {
        appended: storage.term(Index(at + 1)) == Ok(Term(term + 1)),
        note: storage.log_time_note().unwrap(),
        stamp,
        arrived_ms,
    }
}

/// The note of a new term's clock goes to disk in the write that appends
/// its first stamp: at no crash point does a restarted node find the new
/// term's entry with a note from the old term's clock, which would put its
/// estimate ahead of log time by how far the new clock lags.
#[test]
fn a_new_terms_first_stamp_reaches_the_disk_with_its_note() {
    for writes in [0, 1, 2, 3, u64::MAX] {
        let found = crash_as_a_new_term_arrives(writes);
        // (A crash before any write keeps the new term's entry out.)
        assert_eq!(found.appended, writes > 0, "after {writes} writes: the append is the first write");
        if !found.appended {
            continue;
        }
        let note = found.note.expect("a note");
        let boot_ms = note.boot.expect("a simulated boot clock").ms;
        // Log time the note gives at any later moment, against the new
        // stamp counted from when it arrived (which may only lag).
        assert!(
            note.log_time_ms.saturating_sub(boot_ms) <= found.stamp.saturating_sub(found.arrived_ms),
            "after {writes} writes: the note {note:?} runs ahead of the new term's stamp {} at {} ms",
            found.stamp,
            found.arrived_ms
        );
    }
}

/// A node whose log's segments are in use (a write waiting for a flush)
/// takes, in its turn, a suffix replaced by its new leader's: log time goes
/// back at once, and the note on disk changes in the write that replaces
/// the suffix, once the log is free. The Raft loop used to write the note
/// itself, synced, before handing that write over: in its turn, behind the
/// busy log, for as long as the log stayed busy.
#[test]
fn a_replaced_suffix_never_waits_for_a_busy_log() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = Outbox::default();
    let start = Instant::now();
    let (mut leader, mut ms) = leader_of_two(dir.path(), &outbox, start);
    let term = leader.node.status().term;
    let mut turn = |leader: &mut Live, slow_disk: bool| {
        ms += 1;
        leader.turn(start + Duration::from_millis(ms), LEADER_WALL_MS + ms, slow_disk);
        leader.apply(usize::MAX);
    };
    // A put node 2 never acknowledges, the only stamp in the log.
    turn(&mut leader, false);
    turn(&mut leader, false);
    let (reply, _answer) = tokio::sync::oneshot::channel();
    leader.node.ask_propose((put("a", 10), 5, 1, reply)).unwrap();
    for _ in 0..3 {
        turn(&mut leader, false);
    }
    let at = leader.node.status().last_index;
    let storage = leader.raft_loop.storage.clone();
    let noted = storage.log_time_note().unwrap().expect("a note once log time is known");
    assert!(noted.log_time_ms >= LEADER_WALL_MS, "the note counts the put's stamp: {noted:?}");

    // Node 2 won the next term without it: its blank at that index, while
    // another thread holds the log.
    let held = storage.hold_log_writes(Duration::from_secs(3));
    let prev = LogId::new(storage.term(Index(at - 1)).unwrap().0, at - 1);
    leader.node.step(Message {
        from: NodeId(2),
        to: NodeId(1),
        term: Term(term + 1),
        body: MessageBody::AppendEntries {
            prev,
            entries: vec![Entry { log_id: LogId::new(term + 1, at), payload: EntryPayload::Blank }],
            commit: Index(0),
        },
    });
    turn(&mut leader, true);
    assert!(held.release(), "the Raft loop waited for the busy log");
    assert_eq!(storage.term(Index(at)), Ok(Term(term)), "the suffix was replaced while the log was busy");
    assert_eq!(storage.log_time_note().unwrap(), Some(noted), "the note changed while the log was busy");

    // The disk finishes the write: the blank and the note's removal (the
    // log holds no stamp any more) land together.
    turn(&mut leader, false);
    assert_eq!(storage.term(Index(at)), Ok(Term(term + 1)), "the suffix was not replaced");
    assert_eq!(crate::timers::stored_log_time(&storage).unwrap(), 0);
    assert_eq!(storage.log_time_note().unwrap(), None, "the note still counts the replaced put's stamp");
}
