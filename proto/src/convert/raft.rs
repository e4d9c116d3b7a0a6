//! Raft core messages <-> `wasmraft.v1` peer messages.

use std::collections::BTreeSet;

use wasmraft_raft as raft;

use crate::v1;
use crate::v1::entry::Payload;
use crate::v1::raft_message::Body;

/// A peer sent a message that does not decode into a core message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed raft message: {0}")]
pub struct Malformed(pub &'static str);

fn log_id(id: raft::LogId) -> v1::LogId {
    v1::LogId {
        term: id.term.0,
        index: id.index.0,
    }
}

fn from_log_id(id: Option<v1::LogId>) -> Result<raft::LogId, Malformed> {
    let id = id.ok_or(Malformed("missing log id"))?;
    Ok(raft::LogId::new(id.term, id.index))
}

fn ids(set: &BTreeSet<raft::NodeId>) -> Vec<u64> {
    set.iter().map(|n| n.0).collect()
}

fn from_ids(v: Vec<u64>) -> BTreeSet<raft::NodeId> {
    v.into_iter().map(raft::NodeId).collect()
}

/// Membership to wire.
pub fn membership(m: &raft::Membership) -> v1::Membership {
    v1::Membership {
        voters: ids(&m.voters),
        voters_outgoing: ids(&m.voters_outgoing),
        learners: ids(&m.learners),
    }
}

/// Membership from wire.
pub fn from_membership(m: v1::Membership) -> raft::Membership {
    raft::Membership {
        voters: from_ids(m.voters),
        voters_outgoing: from_ids(m.voters_outgoing),
        learners: from_ids(m.learners),
    }
}

/// Snapshot metadata to wire.
pub fn snapshot_meta(m: &raft::SnapshotMeta) -> v1::SnapshotMeta {
    v1::SnapshotMeta {
        last: Some(log_id(m.last)),
        membership: Some(membership(&m.membership)),
    }
}

/// Snapshot metadata from wire.
pub fn from_snapshot_meta(m: Option<v1::SnapshotMeta>) -> Result<raft::SnapshotMeta, Malformed> {
    let m = m.ok_or(Malformed("missing snapshot metadata"))?;
    Ok(raft::SnapshotMeta {
        last: from_log_id(m.last)?,
        membership: from_membership(m.membership.ok_or(Malformed("missing membership"))?),
    })
}

fn entry(e: raft::Entry) -> v1::Entry {
    let payload = match e.payload {
        raft::EntryPayload::Blank => Payload::Blank(v1::Blank {}),
        raft::EntryPayload::Normal(d) => Payload::Normal(d),
        raft::EntryPayload::Membership(m) => Payload::Membership(membership(&m)),
    };
    v1::Entry {
        log_id: Some(log_id(e.log_id)),
        payload: Some(payload),
    }
}

fn from_entry(e: v1::Entry) -> Result<raft::Entry, Malformed> {
    let payload = match e.payload.ok_or(Malformed("entry without payload"))? {
        Payload::Blank(_) => raft::EntryPayload::Blank,
        Payload::Normal(d) => raft::EntryPayload::Normal(d),
        Payload::Membership(m) => raft::EntryPayload::Membership(from_membership(m)),
    };
    Ok(raft::Entry {
        log_id: from_log_id(e.log_id)?,
        payload,
    })
}

/// A core message to wire.
pub fn message(m: raft::Message) -> v1::RaftMessage {
    use raft::MessageBody as B;
    let body = match m.body {
        B::AppendEntries {
            prev,
            entries,
            commit,
        } => Body::AppendEntries(v1::AppendEntries {
            prev: Some(log_id(prev)),
            entries: entries.into_iter().map(entry).collect(),
            commit: commit.0,
        }),
        B::AppendResponse {
            reject,
            index,
            hint,
        } => Body::AppendResponse(v1::AppendResponse {
            reject,
            index: index.0,
            hint: Some(log_id(hint)),
        }),
        B::RequestVote {
            pre_vote,
            last,
            transfer,
        } => Body::RequestVote(v1::RequestVote {
            pre_vote,
            last: Some(log_id(last)),
            transfer,
        }),
        B::VoteResponse { pre_vote, reject } => {
            Body::VoteResponse(v1::VoteResponse { pre_vote, reject })
        }
        B::Heartbeat { commit, token } => Body::Heartbeat(v1::Heartbeat {
            commit: commit.0,
            token,
        }),
        B::HeartbeatResponse { token } => Body::HeartbeatResponse(v1::HeartbeatResponse { token }),
        B::InstallSnapshot { meta } => Body::InstallSnapshot(v1::InstallSnapshotMessage {
            meta: Some(snapshot_meta(&meta)),
        }),
        B::TimeoutNow => Body::TimeoutNow(v1::TimeoutNow {}),
        B::ReadIndex { id } => Body::ReadIndex(v1::ReadIndex { id: id.0 }),
        B::ReadIndexResponse { id, index } => Body::ReadIndexResponse(v1::ReadIndexResponse {
            id: id.0,
            index: index.0,
        }),
        B::Propose { session, seq, commands } => Body::Propose(v1::ForwardProposals { session, seq, commands }),
        B::ProposeResponse { seq, outcome } => {
            use v1::forward_proposals_response::Refusal;
            let (first, at, refusal) = match outcome {
                raft::ProposeOutcome::Appended { first } => (first.0, Vec::new(), Refusal::None),
                raft::ProposeOutcome::Placed { at } => (0, at.into_iter().map(|i| i.0).collect(), Refusal::None),
                raft::ProposeOutcome::NotLeader => (0, Vec::new(), Refusal::NotLeader),
                raft::ProposeOutcome::Busy => (0, Vec::new(), Refusal::Busy),
            };
            Body::ProposeResponse(v1::ForwardProposalsResponse { seq, first, refusal: refusal as i32, at })
        }
    };
    v1::RaftMessage {
        from: m.from.0,
        to: m.to.0,
        term: m.term.0,
        body: Some(body),
    }
}

/// A wire message to core.
pub fn from_message(m: v1::RaftMessage) -> Result<raft::Message, Malformed> {
    use raft::MessageBody as B;
    let body = match m.body.ok_or(Malformed("message without body"))? {
        Body::AppendEntries(a) => B::AppendEntries {
            prev: from_log_id(a.prev)?,
            entries: a
                .entries
                .into_iter()
                .map(from_entry)
                .collect::<Result<_, _>>()?,
            commit: raft::Index(a.commit),
        },
        Body::AppendResponse(r) => B::AppendResponse {
            reject: r.reject,
            index: raft::Index(r.index),
            hint: from_log_id(r.hint)?,
        },
        Body::RequestVote(v) => B::RequestVote {
            pre_vote: v.pre_vote,
            last: from_log_id(v.last)?,
            transfer: v.transfer,
        },
        Body::VoteResponse(v) => B::VoteResponse {
            pre_vote: v.pre_vote,
            reject: v.reject,
        },
        Body::Heartbeat(h) => B::Heartbeat {
            commit: raft::Index(h.commit),
            token: h.token,
        },
        Body::HeartbeatResponse(h) => B::HeartbeatResponse { token: h.token },
        Body::InstallSnapshot(s) => B::InstallSnapshot {
            meta: from_snapshot_meta(s.meta)?,
        },
        Body::TimeoutNow(_) => B::TimeoutNow,
        Body::ReadIndex(r) => B::ReadIndex {
            id: raft::ReadId(r.id),
        },
        Body::ReadIndexResponse(r) => B::ReadIndexResponse {
            id: raft::ReadId(r.id),
            index: raft::Index(r.index),
        },
        Body::Propose(p) if p.commands.is_empty() => return Err(Malformed("a proposal without commands")),
        Body::Propose(p) => B::Propose { session: p.session, seq: p.seq, commands: p.commands },
        Body::ProposeResponse(r) => {
            use v1::forward_proposals_response::Refusal;
            let outcome = match Refusal::try_from(r.refusal).map_err(|_| Malformed("unknown proposal refusal"))? {
                Refusal::None if !r.at.is_empty() => {
                    if r.first != 0 || r.at.iter().any(|&i| i == 0 || i > MAX_TERM) {
                        return Err(Malformed("proposal index out of range"));
                    }
                    raft::ProposeOutcome::Placed { at: r.at.into_iter().map(raft::Index).collect() }
                }
                Refusal::None if r.first == 0 || r.first > MAX_TERM => {
                    return Err(Malformed("proposal index out of range"));
                }
                Refusal::None => raft::ProposeOutcome::Appended { first: raft::Index(r.first) },
                Refusal::NotLeader => raft::ProposeOutcome::NotLeader,
                Refusal::Busy => raft::ProposeOutcome::Busy,
            };
            B::ProposeResponse { seq: r.seq, outcome }
        }
    };
    if m.from == 0 || m.to == 0 {
        return Err(Malformed("node id 0"));
    }
    if m.from == m.to {
        return Err(Malformed("a message from a node to itself"));
    }
    if m.term > MAX_TERM {
        return Err(Malformed("term out of range"));
    }
    match &body {
        B::AppendEntries {
            prev,
            entries,
            commit,
        } => check_entries(m.term, *prev, entries, *commit)?,
        B::RequestVote { last, .. } if last.term.0 > m.term || last.index.0 > MAX_TERM => {
            return Err(Malformed("vote request with a last log id out of range"));
        }
        B::InstallSnapshot { meta }
            if meta.last.term.0 > m.term || meta.last.index.0 > MAX_TERM =>
        {
            return Err(Malformed("snapshot position out of range"));
        }
        B::Heartbeat { commit, .. } | B::ReadIndexResponse { index: commit, .. }
            if commit.0 > MAX_TERM =>
        {
            return Err(Malformed("index out of range"));
        }
        B::AppendResponse { index, hint, .. }
            if index.0 > MAX_TERM || hint.index.0 > MAX_TERM || hint.term.0 > MAX_TERM =>
        {
            return Err(Malformed("index out of range"));
        }
        _ => {}
    }
    Ok(raft::Message {
        from: raft::NodeId(m.from),
        to: raft::NodeId(m.to),
        term: raft::Term(m.term),
        body,
    })
}

/// The largest term or index a peer may send (the core's bound).
pub const MAX_TERM: u64 = raft::MAX_TERM;

/// The shape every `AppendEntries` must have, whoever sent it: entries at
/// consecutive indexes right after `prev`, terms never decreasing and never
/// above the message's, and nothing out of range.
fn check_entries(
    term: u64,
    prev: raft::LogId,
    entries: &[raft::Entry],
    commit: raft::Index,
) -> Result<(), Malformed> {
    if prev.index.0 > MAX_TERM || prev.term.0 > term || commit.0 > MAX_TERM {
        return Err(Malformed("append-entries position out of range"));
    }
    let mut last = prev;
    for e in entries {
        if e.log_id.index.0 != last.index.0 + 1 {
            return Err(Malformed("append-entries with non-consecutive indexes"));
        }
        if e.log_id.term < last.term || e.log_id.term.0 > term {
            return Err(Malformed("append-entries with terms out of order"));
        }
        last = e.log_id;
    }
    if last.index.0 > MAX_TERM {
        return Err(Malformed("append-entries position out of range"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::{
        Entry, EntryPayload, Index, LogId, Membership, Message, MessageBody, NodeId, ProposeOutcome, ReadId,
        SnapshotMeta, Term,
    };

    fn round_trip(body: MessageBody) {
        let m = Message {
            from: NodeId(1),
            to: NodeId(2),
            term: Term(3),
            body,
        };
        assert_eq!(from_message(message(m.clone())).unwrap(), m);
    }

    #[test]
    fn every_message_kind_round_trips() {
        let entries = vec![
            Entry {
                log_id: LogId::new(3, 5),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: LogId::new(3, 6),
                payload: EntryPayload::Normal(b"x".to_vec()),
            },
            Entry {
                log_id: LogId::new(3, 7),
                payload: EntryPayload::Membership(Membership::new([NodeId(1), NodeId(2)])),
            },
        ];
        round_trip(MessageBody::AppendEntries {
            prev: LogId::new(2, 4),
            entries,
            commit: Index(4),
        });
        round_trip(MessageBody::AppendResponse {
            reject: true,
            index: Index(9),
            hint: LogId::new(1, 3),
        });
        round_trip(MessageBody::RequestVote {
            pre_vote: true,
            last: LogId::new(2, 8),
            transfer: false,
        });
        round_trip(MessageBody::VoteResponse {
            pre_vote: false,
            reject: true,
        });
        round_trip(MessageBody::Heartbeat {
            commit: Index(7),
            token: 42,
        });
        round_trip(MessageBody::HeartbeatResponse { token: 42 });
        round_trip(MessageBody::InstallSnapshot {
            meta: SnapshotMeta {
                last: LogId::new(2, 100),
                membership: Membership::new([NodeId(1)]),
            },
        });
        round_trip(MessageBody::TimeoutNow);
        round_trip(MessageBody::ReadIndex { id: ReadId(5) });
        round_trip(MessageBody::ReadIndexResponse {
            id: ReadId(5),
            index: Index(9),
        });
        round_trip(MessageBody::Propose { session: 3, seq: 8, commands: vec![b"a".to_vec(), vec![]] });
        let placed = ProposeOutcome::Placed { at: vec![Index(12), Index(7), Index(13)] };
        for outcome in [ProposeOutcome::Appended { first: Index(12) }, placed, ProposeOutcome::NotLeader, ProposeOutcome::Busy] {
            round_trip(MessageBody::ProposeResponse { seq: 8, outcome });
        }
    }

    #[test]
    fn proposals_without_commands_or_with_impossible_answers_are_refused() {
        let wire = |body| v1::RaftMessage { from: 1, to: 2, term: 1, body: Some(body) };
        let empty = Body::Propose(v1::ForwardProposals { session: 1, seq: 1, commands: vec![] });
        assert_eq!(from_message(wire(empty)).unwrap_err(), Malformed("a proposal without commands"));
        for first in [0, MAX_TERM + 1] {
            let answer = Body::ProposeResponse(v1::ForwardProposalsResponse { seq: 1, first, refusal: 0, at: vec![] });
            assert_eq!(from_message(wire(answer)).unwrap_err(), Malformed("proposal index out of range"));
        }
        for (first, at) in [(0, vec![3, 0]), (0, vec![MAX_TERM + 1]), (4, vec![5])] {
            let answer = Body::ProposeResponse(v1::ForwardProposalsResponse { seq: 1, first, refusal: 0, at });
            assert_eq!(from_message(wire(answer)).unwrap_err(), Malformed("proposal index out of range"));
        }
        let unknown = Body::ProposeResponse(v1::ForwardProposalsResponse { seq: 1, first: 5, refusal: 9, at: vec![] });
        assert_eq!(from_message(wire(unknown)).unwrap_err(), Malformed("unknown proposal refusal"));
    }

    #[test]
    fn malformed_messages_are_refused() {
        assert!(
            from_message(v1::RaftMessage {
                from: 1,
                to: 2,
                term: 1,
                body: None
            })
            .is_err()
        );
        let no_prev = v1::RaftMessage {
            from: 1,
            to: 2,
            term: 1,
            body: Some(Body::AppendEntries(v1::AppendEntries {
                prev: None,
                entries: vec![],
                commit: 0,
            })),
        };
        assert_eq!(
            from_message(no_prev).unwrap_err(),
            Malformed("missing log id")
        );
    }

    /// Whatever a peer's bytes decode to, conversion answers with a
    /// message or an error, never a panic: arbitrary bytes, and valid
    /// messages with fields set to extreme values.
    #[test]
    fn arbitrary_peer_bytes_never_panic() {
        use prost::Message as _;
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let extremes = [0, 1, 2, MAX_TERM - 1, MAX_TERM, MAX_TERM + 1, u64::MAX - 1, u64::MAX];
        let pick = move |n: u64| if n % 3 == 0 { extremes[(n / 3 % extremes.len() as u64) as usize] } else { n % 16 };
        let (mut ok, mut refused) = (0u64, 0u64);
        for round in 0..50_000u64 {
            let wire = if round % 2 == 0 {
                let bytes: Vec<u8> = (0..next() % 64).map(|_| next() as u8).collect();
                match v1::RaftMessage::decode(bytes.as_slice()) {
                    Ok(m) => m,
                    Err(_) => continue,
                }
            } else {
                let id = |n: u64| v1::LogId { term: pick(n), index: pick(n >> 8) };
                let entries = (0..next() % 4)
                    .map(|_| v1::Entry { log_id: Some(id(next())), payload: Some(Payload::Blank(v1::Blank {})) })
                    .collect();
                let body = match next() % 7 {
                    0 => Body::AppendEntries(v1::AppendEntries { prev: Some(id(next())), entries, commit: pick(next()) }),
                    1 => Body::RequestVote(v1::RequestVote { pre_vote: next() % 2 == 0, last: Some(id(next())), transfer: false }),
                    2 => Body::Heartbeat(v1::Heartbeat { commit: pick(next()), token: next() }),
                    3 => Body::AppendResponse(v1::AppendResponse { reject: true, index: pick(next()), hint: Some(id(next())) }),
                    4 => Body::Propose(v1::ForwardProposals {
                        session: pick(next()),
                        seq: pick(next()),
                        commands: (0..next() % 3).map(|_| vec![next() as u8; (next() % 40) as usize]).collect(),
                    }),
                    5 => Body::ProposeResponse(v1::ForwardProposalsResponse {
                        seq: pick(next()),
                        first: pick(next()),
                        refusal: (next() % 5) as i32,
                        at: (0..next() % 3).map(|_| pick(next())).collect(),
                    }),
                    _ => Body::InstallSnapshot(v1::InstallSnapshotMessage {
                        meta: Some(v1::SnapshotMeta { last: Some(id(next())), membership: None }),
                    }),
                };
                v1::RaftMessage { from: pick(next()), to: pick(next()), term: pick(next()), body: Some(body) }
            };
            match from_message(wire) {
                Ok(m) => {
                    assert!(m.term.0 <= MAX_TERM && m.from != m.to && m.from.0 != 0);
                    ok += 1;
                }
                Err(_) => refused += 1,
            }
        }
        assert!(ok > 1_000 && refused > 1_000, "both kinds exercised: {ok} accepted, {refused} refused");
    }

    fn append(term: u64, prev: (u64, u64), entries: &[(u64, u64)]) -> v1::RaftMessage {
        message(Message {
            from: NodeId(1),
            to: NodeId(2),
            term: Term(term),
            body: MessageBody::AppendEntries {
                prev: LogId::new(prev.0, prev.1),
                entries: entries
                    .iter()
                    .map(|&(t, i)| Entry {
                        log_id: LogId::new(t, i),
                        payload: EntryPayload::Blank,
                    })
                    .collect(),
                commit: Index(0),
            },
        })
    }

    #[test]
    fn messages_out_of_shape_are_refused_before_the_core() {
        assert!(from_message(append(3, (2, 4), &[(2, 5), (3, 6)])).is_ok());
        let refused = [
            append(3, (2, 4), &[(3, 6)]),         // a gap
            append(3, (2, 4), &[(3, 5), (3, 5)]), // a repeat
            append(3, (2, 4), &[(3, 4)]),         // at or before prev
            append(3, (2, 4), &[(1, 5)]),         // a term below prev's
            append(3, (2, 4), &[(4, 5)]),         // a term above the message's
            append(3, (4, 4), &[]),               // prev's term above the message's
            append(u64::MAX, (2, 4), &[]),        // a term that would overflow
            append(3, (2, u64::MAX), &[]),        // an index that would overflow
        ];
        for m in refused {
            assert!(from_message(m.clone()).is_err(), "{m:?}");
        }
        let to_self = v1::RaftMessage {
            from: 2,
            to: 2,
            term: 1,
            body: Some(Body::TimeoutNow(v1::TimeoutNow {})),
        };
        assert!(from_message(to_self).is_err());
        let heartbeat = |term| v1::RaftMessage {
            from: 1,
            to: 2,
            term,
            body: Some(Body::Heartbeat(v1::Heartbeat {
                commit: 0,
                token: 1,
            })),
        };
        assert!(from_message(heartbeat(u64::MAX)).is_err());
        assert!(from_message(heartbeat(MAX_TERM)).is_ok());
    }
}
