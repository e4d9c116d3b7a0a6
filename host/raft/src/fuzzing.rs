//! Fuzz harness: arbitrary bytes become a sequence of inputs to a
//! three-node cluster of cores (ticks, honest deliveries, forged messages,
//! proposals, reads, Ready handling), and the core's own invariants are
//! checked after every step. Used by the cargo-fuzz targets in `fuzz/` and
//! by a bounded run in the unit tests.
//!
//! A forged message can carry any term, index or entries, as a hostile or
//! broken peer would send; such a peer is outside the fault model, so
//! cross-node safety is not asserted here (the deterministic simulation
//! does that for honest peers). What must hold whatever arrives, on each
//! node: no panic; term and commit index never go back; the commit index
//! never passes the last log index; committed entries are handed out once,
//! in index order, without gaps; a node votes at most once per term.

use std::collections::BTreeMap;

use crate::mem_storage::MemStorage;
use crate::{
    Config, Entry, EntryPayload, Index, LogId, Message, MessageBody, NodeId, RawNode, ReadId, Term,
};

/// What one run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Inputs fed to the cores.
    pub steps: u64,
    /// Forged messages among them.
    pub forged: u64,
    /// Forged messages the cores refused as invalid.
    pub refused: u64,
    /// Entries handed out as committed, over all nodes.
    pub committed: u64,
    /// Times a node became leader.
    pub elected: u64,
}

/// Reads bytes from the fuzz input; zeros once it runs out.
struct Input<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Input<'_> {
    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn u64(&mut self) -> u64 {
        // Mostly small values (where the interesting indexes and terms
        // are), sometimes anything.
        match self.byte() % 4 {
            0 => u64::from_le_bytes(std::array::from_fn(|_| self.byte())),
            _ => u64::from(self.byte() % 16),
        }
    }
}

/// What the harness remembers of one node between steps.
#[derive(Default)]
struct Seen {
    term: u64,
    commit: u64,
    applied: u64,
    votes: BTreeMap<u64, u64>,
}

/// Runs the input and checks the invariants after every step; panics on a
/// violation (which the fuzzer reports like any other panic).
pub fn core_messages(data: &[u8]) -> Report {
    let ids = [1u64, 2, 3];
    // The first byte picks leaders that send each commit index at once, or
    // defer it (as the node's driver has them do) until an append, a
    // heartbeat or a tick here carries it; the rest are the inputs.
    let (mode, data) = data.split_first().map_or((0, data), |(&m, rest)| (m, rest));
    let defer_commit_updates = mode % 2 == 1;
    let mut nodes: BTreeMap<u64, RawNode<MemStorage>> = ids
        .iter()
        .map(|&id| {
            let config = Config { id: NodeId(id), seed: id, defer_commit_updates, ..Config::default() };
            (id, RawNode::new(config, MemStorage::new(&ids)).expect("valid config"))
        })
        .collect();
    let mut seen: BTreeMap<u64, Seen> = ids.iter().map(|&id| (id, Seen::default())).collect();
    let mut network: Vec<Message> = Vec::new();
    let mut input = Input { data, pos: 0 };
    let mut report = Report::default();
    let mut next_read = 0u64;
    // Start from a cluster with a leader and a few committed entries, so
    // that forged messages meet a leader, followers and a log.
    warm_up(&mut nodes, &mut seen, &mut network, &mut report);
    while !input.done() {
        let op = input.byte();
        let id = ids[usize::from(input.byte()) % ids.len()];
        let node = nodes.get_mut(&id).expect("known id");
        match op % 8 {
            0 => {
                node.tick();
                if defer_commit_updates {
                    node.send_commit_updates(|_| true);
                }
            }
            1..=3 => {
                if !network.is_empty() {
                    let m = network.remove(usize::from(input.byte()) % network.len());
                    if let Some(to) = nodes.get_mut(&m.to.0) {
                        let _ = to.step(m);
                    }
                }
            }
            4 => {
                let m = forge(&mut input, id);
                report.forged += 1;
                if node.step(m).is_err() {
                    report.refused += 1;
                }
            }
            5 => {
                let _ = node.propose(vec![vec![input.byte()]]);
            }
            6 => {
                next_read += 1;
                let _ = node.read_index(ReadId(next_read));
            }
            _ => {
                if !network.is_empty() {
                    network.remove(usize::from(input.byte()) % network.len());
                }
            }
        }
        handle_readies(&mut nodes, &mut seen, &mut network, &mut report);
        // A bounded network: the oldest messages are lost first.
        if network.len() > 256 {
            network.drain(..network.len() - 256);
        }
        report.steps += 1;
    }
    report
}

/// Every node handles its Ready, as a driver does, then is checked.
fn handle_readies(
    nodes: &mut BTreeMap<u64, RawNode<MemStorage>>,
    seen: &mut BTreeMap<u64, Seen>,
    network: &mut Vec<Message>,
    report: &mut Report,
) {
    for (&id, node) in nodes.iter_mut() {
        let s = seen.get_mut(&id).expect("known id");
        if node.has_ready() {
            let rd = node.ready();
            node.reader_mut().persist(&rd);
            for e in &rd.committed_entries {
                assert_eq!(e.log_id.index.0, s.applied + 1, "node {id}: committed entries out of order");
                s.applied = e.log_id.index.0;
                report.committed += 1;
            }
            if rd.soft_state.is_some_and(|ss| ss.role == crate::Role::Leader) {
                report.elected += 1;
            }
            network.extend(rd.messages.iter().cloned());
            network.extend(rd.persisted_messages.iter().cloned());
            let last = rd.committed_entries.last().map(|e| e.log_id.index);
            node.advance(rd);
            if let Some(last) = last {
                node.applied_to(last);
            }
        }
        check(id, node, s);
    }
}

/// Elects node 1 and commits a few entries over a perfect network.
fn warm_up(
    nodes: &mut BTreeMap<u64, RawNode<MemStorage>>,
    seen: &mut BTreeMap<u64, Seen>,
    network: &mut Vec<Message>,
    report: &mut Report,
) {
    let settle = |nodes: &mut BTreeMap<u64, RawNode<MemStorage>>,
                  seen: &mut BTreeMap<u64, Seen>,
                  network: &mut Vec<Message>,
                  report: &mut Report| {
        for _ in 0..100 {
            handle_readies(nodes, seen, network, report);
            if network.is_empty() {
                return;
            }
            for m in std::mem::take(network) {
                if let Some(to) = nodes.get_mut(&m.to.0) {
                    let _ = to.step(m);
                }
            }
        }
    };
    for _ in 0..100 {
        for node in nodes.values_mut() {
            node.tick();
        }
        settle(nodes, seen, network, report);
        if nodes.values().any(|n| n.status().role == crate::Role::Leader) {
            break;
        }
    }
    for node in nodes.values_mut() {
        let _ = node.propose(vec![b"a".to_vec(), b"b".to_vec()]);
    }
    settle(nodes, seen, network, report);
}

fn check(id: u64, node: &RawNode<MemStorage>, seen: &mut Seen) {
    let st = node.status();
    assert!(st.term.0 >= seen.term, "node {id}: term went back from {} to {}", seen.term, st.term.0);
    assert!(st.commit.0 >= seen.commit, "node {id}: commit went back from {} to {}", seen.commit, st.commit.0);
    assert!(st.commit <= st.last_index, "node {id}: commit {} beyond the last index {}", st.commit.0, st.last_index.0);
    assert!(seen.applied <= st.commit.0, "node {id}: applied {} beyond commit {}", seen.applied, st.commit.0);
    let durable = node.reader().hard_state;
    if let Some(vote) = durable.vote {
        let earlier = *seen.votes.entry(durable.term.0).or_insert(vote.0);
        assert_eq!(earlier, vote.0, "node {id}: voted twice in term {}", durable.term.0);
    }
    seen.term = st.term.0;
    seen.commit = st.commit.0;
}

/// A message to `to` with fields read from the input: any sender (members
/// and strangers), any term, any body.
fn forge(input: &mut Input<'_>, to: u64) -> Message {
    let from = NodeId(u64::from(input.byte() % 5));
    let term = Term(input.u64());
    let log_id = |input: &mut Input<'_>| LogId { term: Term(input.u64()), index: Index(input.u64()) };
    let body = match input.byte() % 12 {
        0 => {
            let prev = log_id(input);
            let n = input.byte() % 4;
            let mut entries = Vec::new();
            let mut index = prev.index.0;
            for _ in 0..n {
                // Usually contiguous, sometimes not.
                index = if input.byte() % 4 == 0 { input.u64() } else { index.saturating_add(1) };
                entries.push(Entry {
                    log_id: LogId { term: Term(input.u64()), index: Index(index) },
                    payload: EntryPayload::Normal(vec![input.byte()]),
                });
            }
            MessageBody::AppendEntries { prev, entries, commit: Index(input.u64()) }
        }
        1 => MessageBody::AppendResponse { reject: input.byte() % 2 == 0, index: Index(input.u64()), hint: log_id(input) },
        2 => MessageBody::RequestVote { pre_vote: input.byte() % 2 == 0, last: log_id(input), transfer: input.byte() % 2 == 0 },
        3 => MessageBody::VoteResponse { pre_vote: input.byte() % 2 == 0, reject: input.byte() % 2 == 0 },
        4 => MessageBody::Heartbeat { commit: Index(input.u64()), token: input.u64() },
        5 => MessageBody::HeartbeatResponse { token: input.u64() },
        6 => MessageBody::TimeoutNow,
        7 => MessageBody::ReadIndex { id: ReadId(input.u64()) },
        8 => MessageBody::ReadIndexResponse { id: ReadId(input.u64()), index: Index(input.u64()) },
        9 => MessageBody::Propose { session: input.u64(), seq: input.u64(), commands: vec![vec![input.byte()]] },
        10 => MessageBody::ProposeResponse {
            seq: input.u64(),
            outcome: crate::ProposeOutcome::Appended { first: Index(input.u64()) },
        },
        _ => MessageBody::InstallSnapshot {
            meta: crate::SnapshotMeta {
                last: log_id(input),
                membership: crate::Membership::new([NodeId(1), NodeId(2), NodeId(u64::from(input.byte() % 5))]),
            },
        },
    };
    Message { from, to: NodeId(to), term, body }
}
