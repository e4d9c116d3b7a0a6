//! Messages no honest peer sends are refused by `step`, and change nothing:
//! the core's own assertions (one leader per term, never truncating a
//! committed entry) and its term arithmetic are out of a peer's reach.

use super::*;
use crate::{EntryPayload, LogId, MAX_TERM, StepError};

fn blank(term: u64, index: u64) -> Entry {
    Entry {
        log_id: LogId::new(term, index),
        payload: EntryPayload::Blank,
    }
}

fn heartbeat() -> MessageBody {
    MessageBody::Heartbeat {
        commit: Index(0),
        token: 1,
    }
}

fn refused(n: &mut RawNode<MemStorage>, m: Message) {
    let before = n.status();
    let what = format!("{m:?}");
    assert!(
        matches!(n.step(m), Err(StepError::Invalid { .. })),
        "accepted: {what}"
    );
    assert!(!n.has_ready(), "refused, yet something to do: {what}");
    let after = n.status();
    assert_eq!(
        (after.term, after.role, after.leader, after.commit),
        (before.term, before.role, before.leader, before.commit)
    );
}

#[test]
fn a_term_beyond_the_bound_is_refused_and_the_bound_is_accepted() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    for term in [u64::MAX, u64::MAX - 1, MAX_TERM + 1] {
        refused(c.node(2), msg(3, 2, term, heartbeat()));
        let vote = MessageBody::RequestVote {
            pre_vote: false,
            last: LogId::new(1, 1),
            transfer: true,
        };
        refused(c.node(2), msg(3, 2, term, vote));
    }
    // The bound itself is a term like any other.
    c.node(2).step(msg(3, 2, MAX_TERM, heartbeat())).unwrap();
    assert_eq!(c.node(2).status().term, Term(MAX_TERM));
}

#[test]
fn a_leader_refuses_another_leader_of_its_own_term() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    let term = c.node(1).status().term.0;
    refused(c.node(1), msg(2, 1, term, heartbeat()));
    let append = MessageBody::AppendEntries {
        prev: LogId::new(0, 0),
        entries: vec![],
        commit: Index(0),
    };
    refused(c.node(1), msg(3, 1, term, append));
    assert_eq!(c.node(1).status().role, Role::Leader);
}

#[test]
fn append_entries_out_of_order_or_against_committed_entries_are_refused() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    let commit = c.commit(2);
    assert!(commit.0 >= 1, "the leader's no-op committed");
    let term = c.node(2).status().term.0;
    let last = c.node(2).status().last_index.0;
    let append = |prev: LogId, entries: Vec<Entry>| MessageBody::AppendEntries {
        prev,
        entries,
        commit: Index(0),
    };
    // A gap, a repeat, a term above the message's, a term going backwards.
    refused(
        c.node(2),
        msg(
            1,
            2,
            term,
            append(LogId::new(term, last), vec![blank(term, last + 2)]),
        ),
    );
    refused(
        c.node(2),
        msg(
            1,
            2,
            term,
            append(
                LogId::new(term, last),
                vec![blank(term, last + 1), blank(term, last + 1)],
            ),
        ),
    );
    refused(
        c.node(2),
        msg(
            1,
            2,
            term,
            append(LogId::new(term, last), vec![blank(term + 1, last + 1)]),
        ),
    );
    refused(
        c.node(2),
        msg(
            1,
            2,
            term + 1,
            append(
                LogId::new(term, last),
                vec![blank(term + 1, last + 1), blank(term, last + 2)],
            ),
        ),
    );
    // Rewriting the committed entry at `commit` with another term is not
    // refused but ignored: the node answers with its commit index.
    let prev = LogId::new(if commit.0 > 1 { term } else { 0 }, commit.0 - 1);
    c.node(2)
        .step(msg(
            1,
            2,
            term,
            append(prev, vec![blank(term, commit.0), blank(term, commit.0 + 1)]),
        ))
        .unwrap();
    let out = drive(c.node(2));
    assert!(
        out.entries.is_empty(),
        "committed entries are never rewritten: {:?}",
        out.entries
    );
    // From this node's own id.
    refused(c.node(2), msg(2, 2, term, heartbeat()));
}

#[test]
fn a_heartbeat_never_commits_past_the_log() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    let term = c.node(2).status().term.0;
    let last = c.node(2).status().last_index;
    c.node(2).step(msg(1, 2, term, MessageBody::Heartbeat { commit: Index(last.0 + 1000), token: 9 })).unwrap();
    drive(c.node(2));
    assert!(c.node(2).status().commit <= last, "commit beyond the last index");
}

/// A bounded run of the fuzz harness (`crate::fuzzing`, also behind the
/// cargo-fuzz targets): 20,000 random inputs of up to 600 bytes, each a
/// sequence of ticks, deliveries, forged messages, proposals and reads fed
/// to three cores, with the invariants checked after every step.
#[test]
fn random_input_sequences_keep_the_core_invariants() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut total = crate::fuzzing::Report::default();
    for _ in 0..20_000 {
        // The first byte picks the mode (`core_messages`), the rest are inputs.
        let len = 1 + (next() % 600) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let r = crate::fuzzing::core_messages(&data);
        total.steps += r.steps;
        total.forged += r.forged;
        total.refused += r.refused;
        total.committed += r.committed;
        total.elected += r.elected;
    }
    assert!(total.steps > 1_500_000, "{total:?}");
    assert!(total.forged > 150_000 && total.refused > 50_000, "{total:?}");
    // The honest part of the traffic makes progress too.
    assert!(total.elected > 1_000 && total.committed > 1_000, "{total:?}");
    println!("core fuzz: {total:?}");
}
