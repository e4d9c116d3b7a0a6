//! Elections, pre-vote, check-quorum, the vote guard and leader transfer.

use super::*;
use crate::{EntryPayload, HardState, LogId, MembershipChange, ProposeError, SoftState};

fn tick_until_campaign(n: &mut RawNode<MemStorage>) {
    for _ in 0..40 {
        n.tick();
        if n.status().role != Role::Follower {
            return;
        }
    }
    panic!("no campaign");
}

#[test]
fn single_voter_elects_itself_and_commits_once_persisted() {
    let mut n = node(1, &[1]);
    tick_until_campaign(&mut n);
    let rd = n.ready();
    assert_eq!(
        rd.soft_state,
        Some(SoftState {
            leader: Some(NodeId(1)),
            role: Role::Leader
        })
    );
    assert_eq!(
        rd.hard_state,
        Some(HardState {
            term: Term(1),
            vote: Some(NodeId(1)),
            commit: Index(0)
        })
    );
    assert_eq!(
        rd.entries,
        vec![Entry {
            log_id: LogId::new(1, 1),
            payload: EntryPayload::Blank
        }]
    );
    assert!(
        rd.committed_entries.is_empty(),
        "nothing commits before the no-op is durable"
    );
    assert!(rd.must_sync);
    n.reader_mut().persist(&rd);
    n.advance(rd);
    // Persisted: the single voter's own match commits the no-op.
    let rd = n.ready();
    assert_eq!(rd.hard_state.map(|h| h.commit), Some(Index(1)));
    assert_eq!(rd.committed_entries.len(), 1);
    assert!(!rd.must_sync, "a commit-only change needs no fsync");
    n.reader_mut().persist(&rd);
    n.advance(rd);
    n.applied_to(Index(1));

    assert_eq!(
        n.propose(vec![b"a".to_vec(), b"b".to_vec()]),
        Ok(Index(2)..Index(4))
    );
    let rd = n.ready();
    assert_eq!(rd.entries.len(), 2);
    assert!(rd.committed_entries.is_empty());
    n.reader_mut().persist(&rd);
    n.advance(rd);
    let rd = n.ready();
    let committed: Vec<_> = rd
        .committed_entries
        .iter()
        .map(|e| e.payload.clone())
        .collect();
    assert_eq!(
        committed,
        vec![
            EntryPayload::Normal(b"a".to_vec()),
            EntryPayload::Normal(b"b".to_vec())
        ]
    );
    n.advance(rd);
    assert!(!n.has_ready());
}

#[test]
fn pre_vote_asks_at_next_term_without_raising_the_term() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.age();
    let n = c.node(1);
    tick_until_campaign(n);
    assert_eq!(n.status().role, Role::PreCandidate);
    assert_eq!(n.status().term, Term(0));
    let rd = n.ready();
    assert_eq!(rd.hard_state, None, "a pre-vote changes nothing durable");
    let expect: Vec<Message> = [2, 3]
        .iter()
        .map(|&to| {
            msg(
                1,
                to,
                1,
                MessageBody::RequestVote {
                    pre_vote: true,
                    last: LogId::new(0, 0),
                    transfer: false,
                },
            )
        })
        .collect();
    assert_eq!(rd.messages, expect);
    assert!(rd.persisted_messages.is_empty());
    n.advance(rd);
}

#[test]
fn vote_requests_wait_for_the_candidates_own_vote_to_be_durable() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.age();
    tick_until_campaign(c.node(1));
    let _ = drive(c.node(1));
    // A granted pre-vote makes node 1 a candidate of term 1.
    c.node(1)
        .step(msg(
            2,
            1,
            1,
            MessageBody::VoteResponse {
                pre_vote: true,
                reject: false,
            },
        ))
        .unwrap();
    let rd = c.node(1).ready();
    assert_eq!(
        rd.hard_state,
        Some(HardState {
            term: Term(1),
            vote: Some(NodeId(1)),
            commit: Index(0)
        })
    );
    assert!(rd.messages.is_empty());
    let expect: Vec<Message> = [2, 3]
        .iter()
        .map(|&to| {
            msg(
                1,
                to,
                1,
                MessageBody::RequestVote {
                    pre_vote: false,
                    last: LogId::new(0, 0),
                    transfer: false,
                },
            )
        })
        .collect();
    assert_eq!(rd.persisted_messages, expect);
    c.node(1).advance(rd);
}

#[test]
fn vote_compares_last_term_before_last_index() {
    // Node 2's log: (1,1), (1,2), (1,3). A candidate with a shorter log of a
    // higher last term is more up to date (§5.4.1).
    let mut n = node(2, &[1, 2, 3]);
    for _ in 0..10 {
        n.tick();
    }
    let ents: Vec<Entry> = (1..=3)
        .map(|i| Entry {
            log_id: LogId::new(1, i),
            payload: EntryPayload::Blank,
        })
        .collect();
    n.step(msg(
        1,
        2,
        1,
        MessageBody::AppendEntries {
            prev: LogId::new(0, 0),
            entries: ents,
            commit: Index(0),
        },
    ))
    .unwrap();
    let _ = drive(&mut n);
    for _ in 0..10 {
        n.tick(); // leader contact expires
    }
    let _ = drive(&mut n);
    let vote = |last| MessageBody::RequestVote {
        pre_vote: false,
        last,
        transfer: false,
    };
    n.step(msg(3, 2, 2, vote(LogId::new(1, 2)))).unwrap();
    let out = drive(&mut n);
    assert_eq!(
        out.persisted_messages,
        vec![msg(
            2,
            3,
            2,
            MessageBody::VoteResponse {
                pre_vote: false,
                reject: true
            }
        )]
    );
    n.step(msg(3, 2, 3, vote(LogId::new(2, 1)))).unwrap();
    let out = drive(&mut n);
    assert_eq!(
        out.persisted_messages,
        vec![msg(
            2,
            3,
            3,
            MessageBody::VoteResponse {
                pre_vote: false,
                reject: false
            }
        )]
    );
}

#[test]
fn follower_in_contact_with_a_leader_ignores_vote_and_pre_vote_requests() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    let term = c.node(2).status().term.0;
    for pre_vote in [true, false] {
        let body = MessageBody::RequestVote {
            pre_vote,
            last: LogId::new(term, 100),
            transfer: false,
        };
        c.node(2).step(msg(3, 2, term + 1, body)).unwrap();
        assert!(!c.node(2).has_ready(), "no answer, no term change");
        assert_eq!(c.node(2).status().term, Term(term));
    }
    // A transfer's election bypasses the guard.
    let body = MessageBody::RequestVote {
        pre_vote: false,
        last: LogId::new(term, 100),
        transfer: true,
    };
    c.node(2).step(msg(3, 2, term + 1, body)).unwrap();
    let out = drive(c.node(2));
    assert_eq!(
        out.persisted_messages,
        vec![msg(
            2,
            3,
            term + 1,
            MessageBody::VoteResponse {
                pre_vote: false,
                reject: false
            }
        )]
    );
}

#[test]
fn restarted_node_refuses_votes_for_an_election_timeout() {
    // A restart erases the memory of leader contact; the node must still not
    // help elect a new leader while an old leader's lease may count on it.
    let mut n = node(2, &[1, 2, 3]);
    let body = MessageBody::RequestVote {
        pre_vote: false,
        last: LogId::new(1, 1),
        transfer: false,
    };
    n.step(msg(3, 2, 1, body.clone())).unwrap();
    assert!(!n.has_ready());
    for _ in 0..10 {
        n.tick();
    }
    n.step(msg(3, 2, 1, body)).unwrap();
    let out = drive(&mut n);
    assert_eq!(
        out.persisted_messages,
        vec![msg(
            2,
            3,
            1,
            MessageBody::VoteResponse {
                pre_vote: false,
                reject: false
            }
        )]
    );
}

#[test]
fn candidate_steps_down_on_same_term_append_entries() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.age();
    tick_until_campaign(c.node(1));
    c.node(1)
        .step(msg(
            2,
            1,
            1,
            MessageBody::VoteResponse {
                pre_vote: true,
                reject: false,
            },
        ))
        .unwrap();
    assert_eq!(c.node(1).status().role, Role::Candidate);
    let ae = MessageBody::AppendEntries {
        prev: LogId::new(0, 0),
        entries: vec![Entry {
            log_id: LogId::new(1, 1),
            payload: EntryPayload::Blank,
        }],
        commit: Index(0),
    };
    c.node(1).step(msg(3, 1, 1, ae)).unwrap();
    let st = c.node(1).status();
    assert_eq!(
        (st.role, st.leader, st.last_index),
        (Role::Follower, Some(NodeId(3)), Index(1))
    );
}

#[test]
fn check_quorum_leader_steps_down_when_cut_off() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.isolate(1);
    for _ in 0..20 {
        c.node(1).tick();
        c.settle();
    }
    assert_eq!(c.node(1).status().role, Role::Follower);
    assert_eq!(c.node(1).lease_read(), None);
}

#[test]
fn election_timeouts_are_seeded_and_randomized() {
    let timeout = |seed: u64, id: u64| {
        let mut cfg = cfg(id);
        cfg.seed = seed;
        let mut n = RawNode::new(cfg, MemStorage::new(&[id, 9])).unwrap();
        (1..).find(|_| {
            n.tick();
            n.status().role != Role::Follower
        })
    };
    assert_eq!(timeout(1, 1), timeout(1, 1));
    let all: BTreeSet<_> = (0..20).map(|s| timeout(s, 1)).collect();
    assert!(all.len() > 3, "timeouts vary with the seed: {all:?}");
    assert!(all.iter().all(|t| (10..20).contains(&t.unwrap())));
}

#[test]
fn leader_transfer_ends_the_lease_and_the_target_wins() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    c.tick_all(1);
    assert!(c.node(1).lease_read().is_some());
    c.node(1).transfer_leader(NodeId(2)).unwrap();
    assert_eq!(
        c.node(1).lease_read(),
        None,
        "the lease ends at once on transfer"
    );
    assert_eq!(
        c.node(1).propose(vec![b"x".to_vec()]),
        Err(ProposeError::TransferInProgress { to: NodeId(2) })
    );
    c.settle();
    assert_eq!(c.node(2).status().role, Role::Leader);
    assert_eq!(c.node(1).status().role, Role::Follower);
}

#[test]
fn transfer_to_a_non_voter_is_refused() {
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    assert_eq!(
        c.node(1).transfer_leader(NodeId(9)),
        Err(ProposeError::NotVoter(NodeId(9)))
    );
    assert!(matches!(
        c.node(2)
            .propose_membership(MembershipChange::AddLearner(NodeId(4))),
        Err(ProposeError::NotLeader {
            leader: Some(NodeId(1))
        })
    ));
}

#[test]
fn pre_vote_and_check_quorum_are_on_by_default() {
    // Cloudflare's etcd outage, cockroachdb#104042: both on by default.
    let c = crate::Config::default();
    assert!(c.pre_vote && c.check_quorum);
    assert!(c.lease_ticks() < c.election_tick);
    assert_eq!(crate::Config::new(NodeId(1)).validate(), Ok(()));
    assert!(
        crate::Config::default().validate().is_err(),
        "id 0 is invalid"
    );
}

#[test]
fn guarded_follower_refuses_equal_term_votes_after_a_term_bump() {
    // The guard is about time since leader contact, not about the term: a
    // term raised by some other message must not open the door to a vote.
    let mut c = Cluster::new(&[1, 2, 3]);
    c.elect(1);
    let t = c.node(2).status().term.0;
    c.node(2)
        .step(msg(
            3,
            2,
            t + 1,
            MessageBody::HeartbeatResponse { token: 0 },
        ))
        .unwrap();
    let _ = drive(c.node(2));
    assert_eq!(
        (c.node(2).status().term, c.node(2).status().leader),
        (Term(t + 1), None)
    );
    let body = MessageBody::RequestVote {
        pre_vote: false,
        last: LogId::new(t + 1, 50),
        transfer: false,
    };
    c.node(2).step(msg(3, 2, t + 1, body)).unwrap();
    assert!(
        !c.node(2).has_ready(),
        "no vote while the old leader's lease may live"
    );
}

#[test]
fn a_candidate_that_cannot_win_does_not_hold_off_the_elections_of_those_that_can() {
    // Node 1 has a longer log than node 3, which campaigns at a higher term
    // every 9 ticks, within any election timeout (10-19 ticks). Without
    // pre-vote each request raises node 1's term; it must still campaign.
    let mut s = MemStorage::new(&[1, 2, 3]);
    let blank = |index| Entry { log_id: LogId::new(1, index), payload: EntryPayload::Blank };
    s.append(&[blank(1), blank(2)]);
    s.hard_state = HardState { term: Term(1), vote: None, commit: Index(0) };
    let mut n = RawNode::new(Config { pre_vote: false, ..cfg(1) }, s).unwrap();
    let (mut disrupted, mut campaigns) = (false, 0);
    for _ in 0..200 {
        let now = n.status().now;
        if now >= 10 && (now - 10) % 9 == 0 {
            let term = n.status().term.0 + 1;
            let body = MessageBody::RequestVote { pre_vote: false, last: LogId::new(1, 1), transfer: false };
            n.step(msg(3, 1, term, body)).unwrap();
            assert_eq!(n.status().term, Term(term));
            disrupted = true;
        }
        n.tick();
        let sent = drive(&mut n).all();
        let campaigned = sent.iter().any(|m| matches!(m.body, MessageBody::RequestVote { .. }) && m.from == NodeId(1));
        if disrupted && campaigned {
            campaigns += 1;
        }
        assert!(
            !sent.iter().any(|m| m.to == NodeId(3) && matches!(m.body, MessageBody::VoteResponse { reject: false, .. })),
            "node 1 voted for the stale candidate"
        );
    }
    assert!(campaigns >= 5, "node 1 campaigned {campaigns} times in 200 ticks of disruption");
}
