//! Replication: truncation, backtracking hints, commit rules, batching, flow control.

use super::*;
use crate::{Config, EntryPayload, HardState, LogId};

fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: LogId::new(term, index),
        payload: EntryPayload::Blank,
    }
}

fn append(prev: LogId, entries: Vec<Entry>, commit: u64) -> MessageBody {
    MessageBody::AppendEntries {
        prev,
        entries,
        commit: Index(commit),
    }
}

/// A follower (node 2) whose persisted log has entries of the given terms.
fn follower_with(terms: &[u64]) -> RawNode<MemStorage> {
    let mut s = MemStorage::new(&[1, 2, 3]);
    let ents: Vec<Entry> = terms
        .iter()
        .enumerate()
        .map(|(i, &t)| blank(t, i as u64 + 1))
        .collect();
    s.append(&ents);
    s.hard_state = HardState {
        term: Term(*terms.last().unwrap()),
        vote: None,
        commit: Index(0),
    };
    RawNode::new(cfg(2), s).unwrap()
}

#[test]
fn append_truncates_only_from_the_first_conflicting_entry() {
    // openraft 9540c904: a stale, shorter append must not cut a matching suffix.
    let mut n = follower_with(&[1, 1, 1]);
    n.step(msg(1, 2, 1, append(LogId::new(1, 1), vec![blank(1, 2)], 0)))
        .unwrap();
    let out = drive(&mut n);
    assert!(out.entries.is_empty(), "nothing to write");
    assert_eq!(n.status().last_index, Index(3));
    let ok = MessageBody::AppendResponse {
        reject: false,
        index: Index(2),
        hint: LogId::default(),
    };
    assert_eq!(out.persisted_messages, vec![msg(2, 1, 1, ok)]);
}

#[test]
fn a_conflicting_suffix_is_replaced() {
    let mut n = follower_with(&[1, 1, 1]);
    n.step(msg(1, 2, 2, append(LogId::new(1, 1), vec![blank(2, 2)], 0)))
        .unwrap();
    let out = drive(&mut n);
    assert_eq!(out.entries, vec![blank(2, 2)]);
    assert_eq!(n.status().last_index, Index(2));
    assert_eq!(n.reader().entries.len(), 2, "the driver truncated 1-3");
}

#[test]
fn an_empty_append_still_checks_prev() {
    // openraft 6202138f: a conflict is expected even for an empty append.
    let mut n = follower_with(&[1, 1]);
    n.step(msg(1, 2, 3, append(LogId::new(3, 2), vec![], 0)))
        .unwrap();
    let out = drive(&mut n);
    let reject = MessageBody::AppendResponse {
        reject: true,
        index: Index(2),
        hint: LogId::new(1, 2),
    };
    assert_eq!(out.persisted_messages, vec![msg(2, 1, 3, reject)]);
}

#[test]
fn rejection_hint_skips_a_whole_conflicting_term() {
    // Follower terms [1,1,1,2,2,2]; leader probes at (5, 7): the hint is the
    // last index whose term is <= 5 at or below 7, clamped to the log: (2, 6).
    let mut n = follower_with(&[1, 1, 1, 2, 2, 2]);
    n.step(msg(1, 2, 5, append(LogId::new(5, 7), vec![], 0)))
        .unwrap();
    let reject = MessageBody::AppendResponse {
        reject: true,
        index: Index(7),
        hint: LogId::new(2, 6),
    };
    assert_eq!(drive(&mut n).persisted_messages, vec![msg(2, 1, 5, reject)]);
    // Probing (4, 5) against terms ..2 at 5: hint (2, 5).
    n.step(msg(1, 2, 5, append(LogId::new(4, 5), vec![], 0)))
        .unwrap();
    let reject = MessageBody::AppendResponse {
        reject: true,
        index: Index(5),
        hint: LogId::new(2, 5),
    };
    assert_eq!(drive(&mut n).persisted_messages, vec![msg(2, 1, 5, reject)]);
}

#[test]
fn leader_backtracks_by_term_with_the_hint() {
    // Leader log terms [1,1,1,3,3,3] (+ no-op of term 4); follower's hint
    // (2, 6) means "my entries up to 6 have terms <= 2": the leader's last
    // entry with term <= 2 is 3, so it probes from 4 with prev (1, 3).
    let mut s = MemStorage::new(&[1, 2, 3]);
    s.append(&[
        blank(1, 1),
        blank(1, 2),
        blank(1, 3),
        blank(3, 4),
        blank(3, 5),
        blank(3, 6),
    ]);
    s.hard_state = HardState {
        term: Term(3),
        vote: None,
        commit: Index(0),
    };
    let mut n = make_leader(RawNode::new(cfg(1), s).unwrap(), &[1, 2, 3]);
    let reject = MessageBody::AppendResponse {
        reject: true,
        index: Index(6),
        hint: LogId::new(2, 6),
    };
    n.step(msg(2, 1, 4, reject)).unwrap();
    let out = drive(&mut n);
    let probe = out
        .messages
        .iter()
        .find(|m| m.to == NodeId(2))
        .expect("a new probe");
    match &probe.body {
        MessageBody::AppendEntries { prev, entries, .. } => {
            assert_eq!(*prev, LogId::new(1, 3));
            assert_eq!(entries.first().map(|e| e.log_id), Some(LogId::new(3, 4)));
        }
        other => panic!("expected an append, got {other:?}"),
    }
}

#[test]
fn leader_never_commits_an_older_term_by_counting_replicas() {
    // §5.4.2, Figure 8: entry 2 of term 2 on a majority is not committed
    // until an entry of the leader's own term is.
    let mut s = MemStorage::new(&[1, 2, 3]);
    s.append(&[blank(1, 1), blank(2, 2)]);
    s.hard_state = HardState {
        term: Term(2),
        vote: None,
        commit: Index(0),
    };
    let mut n = make_leader(RawNode::new(cfg(1), s).unwrap(), &[1, 2, 3]);
    assert_eq!(n.status().term, Term(3));
    let ack = |i| MessageBody::AppendResponse {
        reject: false,
        index: Index(i),
        hint: LogId::default(),
    };
    n.step(msg(2, 1, 3, ack(2))).unwrap();
    let _ = drive(&mut n);
    assert_eq!(
        n.status().commit,
        Index(0),
        "a majority holds 2, but it is of term 2"
    );
    n.step(msg(2, 1, 3, ack(3))).unwrap();
    let out = drive(&mut n);
    assert_eq!(n.status().commit, Index(3));
    assert_eq!(out.committed.len(), 3);
}

#[test]
fn leader_counts_its_own_entries_only_once_durable() {
    // d-engine#329, etcd#14370: commit only against the durable index.
    let mut n = make_leader(node(1, &[1, 2, 3]), &[1, 2, 3]);
    let ack = |i| MessageBody::AppendResponse {
        reject: false,
        index: Index(i),
        hint: LogId::default(),
    };
    n.step(msg(2, 1, 1, ack(1))).unwrap();
    let _ = drive(&mut n);
    n.propose(vec![b"x".to_vec()]).unwrap();
    // Not yet persisted by the leader; one follower acknowledged.
    n.step(msg(2, 1, 1, ack(2))).unwrap();
    assert_eq!(
        n.status().commit,
        Index(1),
        "1 of 3 durable copies is not a quorum... plus the leader's unsynced one"
    );
    let rd = n.ready();
    assert_eq!(rd.entries.len(), 1);
    n.reader_mut().persist(&rd);
    n.advance(rd);
    assert_eq!(
        n.status().commit,
        Index(2),
        "committed once the leader's own write is durable"
    );
}

#[test]
fn proposals_are_batched_into_one_append_per_follower() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    let range = c
        .node(1)
        .propose((0..100u8).map(|i| vec![i]).collect())
        .unwrap();
    assert_eq!(range.end.0 - range.start.0, 100);
    let out = drive(c.node(1));
    assert_eq!(out.messages.len(), 2);
    for m in &out.messages {
        assert!(
            matches!(&m.body, MessageBody::AppendEntries { entries, .. } if entries.len() == 100)
        );
    }
}

#[test]
fn in_flight_appends_are_bounded_by_the_window() {
    let mut c = Cluster::new(&[1, 2]);
    c.nodes.insert(
        1,
        RawNode::new(
            Config {
                max_inflight_msgs: 2,
                ..cfg(1)
            },
            MemStorage::new(&[1, 2]),
        )
        .unwrap(),
    );
    c.elect(1);
    let mut sent = Vec::new();
    for i in 0..5u8 {
        c.node(1).propose(vec![vec![i]]).unwrap();
        sent.extend(drive(c.node(1)).messages);
    }
    assert_eq!(
        sent.len(),
        2,
        "the third append waits for an acknowledgement"
    );
    for m in sent {
        c.node(2).step(m).unwrap();
    }
    c.settle();
    assert_eq!(c.commit(2), c.commit(1));
    assert_eq!(c.commit(1), Index(6));
}

#[test]
fn in_flight_appends_are_bounded_by_the_byte_window() {
    let mut c = Cluster::new(&[1, 2]);
    c.nodes.insert(
        1,
        RawNode::new(
            Config {
                max_inflight_bytes: 250,
                ..cfg(1)
            },
            MemStorage::new(&[1, 2]),
        )
        .unwrap(),
    );
    c.elect(1);
    let mut sent = Vec::new();
    for _ in 0..5 {
        c.node(1).propose(vec![vec![0; 100]]).unwrap();
        sent.extend(drive(c.node(1)).messages);
    }
    // 100 + 100 bytes leave room; 300 do not: the fourth waits.
    assert_eq!(sent.len(), 3, "appends past the byte window wait for an acknowledgement");
    for m in sent {
        c.node(2).step(m).unwrap();
    }
    c.settle();
    assert_eq!(c.commit(2), c.commit(1));
    assert_eq!(c.commit(1), Index(6));
}

#[test]
fn one_append_larger_than_the_byte_window_still_goes() {
    let mut c = Cluster::new(&[1, 2]);
    c.nodes.insert(
        1,
        RawNode::new(
            Config {
                max_inflight_bytes: 10,
                ..cfg(1)
            },
            MemStorage::new(&[1, 2]),
        )
        .unwrap(),
    );
    c.elect(1);
    c.node(1).propose(vec![vec![0; 100]]).unwrap();
    c.node(1).propose(vec![vec![0; 100]]).unwrap();
    c.settle();
    assert_eq!(c.commit(2), Index(3));
}

#[test]
fn follower_acknowledges_only_after_persisting() {
    let mut n = follower_with(&[1]);
    n.step(msg(1, 2, 1, append(LogId::new(1, 1), vec![blank(1, 2)], 1)))
        .unwrap();
    let rd = n.ready();
    assert!(rd.messages.is_empty());
    assert_eq!(
        rd.persisted_messages.len(),
        1,
        "the append response waits for the fsync"
    );
    assert!(rd.must_sync);
    n.advance(rd);
}

#[test]
fn stale_leader_learns_the_new_term_from_a_follower() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.isolate(1);
    for _ in 0..40 {
        c.tick_all(1);
    }
    let new = [2, 3]
        .into_iter()
        .find(|&id| c.node(id).status().role == Role::Leader)
        .expect("a new leader");
    c.heal();
    c.tick_all(2);
    assert_eq!(c.node(1).status().role, Role::Follower);
    assert_eq!(c.node(1).status().leader, Some(NodeId(new)));
}

fn normal(term: u64, index: u64, len: usize) -> Entry {
    Entry {
        log_id: LogId::new(term, index),
        payload: EntryPayload::Normal(vec![7; len]),
    }
}

/// Committed entries handed out and not yet applied stay within
/// `max_applying_bytes` (plus the entry that crosses it): a follower whose
/// state machine lags gets no more until it reports applies, then the rest,
/// in order, each once. One entry larger than the budget still goes out
/// alone when nothing else is applying.
#[test]
fn committed_entries_handed_out_stay_within_the_applying_budget() {
    let mut s = MemStorage::new(&[1, 2, 3]);
    s.hard_state = HardState { term: Term(1), vote: None, commit: Index(0) };
    let config = Config { max_applying_bytes: 3000, ..cfg(2) };
    let mut n = RawNode::new(config, s).unwrap();
    let mut entries: Vec<Entry> = (1..=10).map(|i| normal(1, i, 1000)).collect();
    entries.push(normal(1, 11, 10_000));
    n.step(msg(1, 2, 1, append(LogId::default(), entries, 11))).unwrap();

    let mut handed: Vec<(u64, u64)> = Vec::new(); // index, size
    let mut applied = 0;
    let mut batches = Vec::new();
    for _ in 0..20 {
        // Hand out without applying: the budget fills and stops the flow.
        assert!(n.has_ready());
        let rd = n.ready();
        n.reader_mut().persist(&rd);
        let batch: Vec<(u64, u64)> = rd.committed_entries.iter().map(|e| (e.log_id.index.0, e.size())).collect();
        n.advance(rd);
        if !batch.is_empty() {
            batches.push(batch.len());
            handed.extend(batch);
        }
        let applying: u64 = handed.iter().filter(|(i, _)| *i > applied).map(|(_, size)| size).sum();
        let largest = handed.iter().map(|(_, size)| *size).max().unwrap_or(0);
        assert!(applying < 3000 + largest, "{applying} bytes applying");
        if n.has_ready() {
            continue;
        }
        // Nothing more until the state machine reports what it applied.
        let Some(&(last, _)) = handed.last() else { panic!("nothing handed out") };
        if last == 11 {
            break;
        }
        applied = last;
        n.applied_to(Index(last));
    }
    let handed: Vec<u64> = handed.into_iter().map(|(i, _)| i).collect();
    assert_eq!(handed, (1..=11).collect::<Vec<u64>>(), "every committed entry once, in order");
    assert!(batches.len() >= 4, "handed out in bounded batches: {batches:?}");
    assert_eq!(*batches.last().unwrap(), 1, "the large entry alone");
}

#[test]
fn a_conflict_while_a_ready_is_written_leaves_its_unchanged_prefix_stable() {
    // Entries 1-3 of term 1 are being written when the leader of term 2
    // replaces 2 and 3: once the write ends, 1 is stable and only the new 2
    // and 3 are written again (a rewrite of 1 could land after the node
    // applied and compacted it).
    let e = |index: u64, term: u64| Entry { log_id: LogId { term: Term(term), index: Index(index) }, payload: EntryPayload::Normal(vec![]) };
    let mut f = node(2, &[1, 2, 3]);
    f.step(msg(1, 2, 1, MessageBody::AppendEntries { prev: LogId::default(), entries: vec![e(1, 1), e(2, 1), e(3, 1)], commit: Index(0) }))
        .unwrap();
    let rd = f.ready();
    assert_eq!(rd.entries.len(), 3);
    let prev = LogId { term: Term(1), index: Index(1) };
    f.step(msg(3, 2, 2, MessageBody::AppendEntries { prev, entries: vec![e(2, 2), e(3, 2)], commit: Index(0) })).unwrap();
    f.reader_mut().persist(&rd);
    f.advance(rd);
    let next = drive(&mut f);
    let ids: Vec<(u64, u64)> = next.entries.iter().map(|e| (e.log_id.index.0, e.log_id.term.0)).collect();
    assert_eq!(ids, vec![(2, 2), (3, 2)]);
}

/// A three-node cluster whose leader (node 1) defers commit updates.
fn cluster_deferring_commit_updates() -> Cluster {
    let ids = [1, 2, 3];
    let mut c = Cluster::new(&ids);
    for id in ids {
        let config = Config { defer_commit_updates: true, ..cfg(id) };
        c.nodes.insert(id, RawNode::new(config, MemStorage::new(&ids)).unwrap());
    }
    c.elect(1);
    c
}

#[test]
fn a_deferred_commit_index_goes_with_the_next_append_or_heartbeat() {
    let mut c = cluster_deferring_commit_updates();
    // Both followers replicating (after the election they probe, and one
    // that answers after the commit is sent an append at once, as ever).
    c.node(1).propose(vec![b"a".to_vec()]).unwrap();
    c.settle();
    // An entry committed on the leader, and no message only for that.
    c.node(1).propose(vec![b"w".to_vec()]).unwrap();
    c.settle();
    let w = c.commit(1);
    for f in [2, 3] {
        assert!(c.commit(f) < w, "follower {f} learned the commit without a message for it");
        assert!(c.node(1).commit_update_due(NodeId(f)));
    }
    assert!(!c.node(1).commit_update_due(NodeId(1)), "never due to the leader itself");
    // The next append carries it; its own commit is due in turn.
    c.node(1).propose(vec![b"x".to_vec()]).unwrap();
    c.settle();
    let x = c.commit(1);
    assert!(x > w);
    for f in [2, 3] {
        assert_eq!(c.commit(f), w, "follower {f}");
        assert!(c.node(1).commit_update_due(NodeId(f)));
    }
    // The driver tells the followers it picks, and only those.
    c.node(1).send_commit_updates(|id| id == NodeId(2));
    c.settle();
    assert_eq!(c.commit(2), x);
    assert_eq!(c.commit(3), w);
    assert!(!c.node(1).commit_update_due(NodeId(2)));
    assert!(c.node(1).commit_updates_due());
    // A heartbeat round carries it to the rest.
    c.tick_all(1);
    assert_eq!(c.commit(3), x);
    assert!(!c.node(1).commit_updates_due());
    assert_eq!(c.applied[&3].last().map(|e| e.log_id.index), Some(x), "and the follower applies it");
}

#[test]
fn without_deferring_a_commit_index_goes_out_at_once() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.node(1).propose(vec![b"x".to_vec()]).unwrap();
    c.settle();
    let x = c.commit(1);
    for f in [2, 3] {
        assert_eq!(c.commit(f), x, "follower {f}");
    }
    assert!(!c.node(1).commit_updates_due());
}
