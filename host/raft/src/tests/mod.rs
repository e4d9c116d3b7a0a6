//! Unit tests: one state plus one input gives exactly the expected outputs.
//! Helpers build nodes over the simulator's in-memory storage.

#![allow(clippy::unwrap_used)]


mod election_test;
mod hostile_input_test;
mod membership_test;
mod read_test;
mod reorder_test;
mod replication_test;
mod snapshot_test;

use std::collections::{BTreeMap, BTreeSet};

pub(crate) use crate::mem_storage::MemStorage;

use crate::{Config, Entry, Index, Message, MessageBody, NodeId, RawNode, ReadState, Role, Term};

pub(crate) fn cfg(id: u64) -> Config {
    Config {
        id: NodeId(id),
        seed: 7,
        ..Config::default()
    }
}

pub(crate) fn node(id: u64, voters: &[u64]) -> RawNode<MemStorage> {
    RawNode::new(cfg(id), MemStorage::new(voters)).unwrap()
}

/// What one Ready produced.
#[derive(Debug, Default)]
pub(crate) struct Out {
    pub(crate) messages: Vec<Message>,
    pub(crate) persisted_messages: Vec<Message>,
    pub(crate) entries: Vec<Entry>,
    pub(crate) committed: Vec<Entry>,
    pub(crate) read_states: Vec<ReadState>,
}

impl Out {
    pub(crate) fn all(&self) -> Vec<Message> {
        self.messages
            .iter()
            .chain(&self.persisted_messages)
            .cloned()
            .collect()
    }
}

/// Handles one Ready like a driver: persist, apply, advance.
pub(crate) fn drive(n: &mut RawNode<MemStorage>) -> Out {
    if !n.has_ready() {
        return Out::default();
    }
    let rd = n.ready();
    n.reader_mut().persist(&rd);
    let out = Out {
        messages: rd.messages.clone(),
        persisted_messages: rd.persisted_messages.clone(),
        entries: rd.entries.clone(),
        committed: rd.committed_entries.clone(),
        read_states: rd.read_states.clone(),
    };
    if let Some(last) = out.committed.last() {
        let idx = last.log_id.index;
        n.advance(rd);
        n.applied_to(idx);
    } else {
        n.advance(rd);
    }
    out
}

pub(crate) fn msg(from: u64, to: u64, term: u64, body: MessageBody) -> Message {
    Message {
        from: NodeId(from),
        to: NodeId(to),
        term: Term(term),
        body,
    }
}

/// A few nodes wired by a perfect (but filterable) network.
pub(crate) struct Cluster {
    pub(crate) nodes: BTreeMap<u64, RawNode<MemStorage>>,
    /// Directed links that drop everything.
    pub(crate) cut: BTreeSet<(u64, u64)>,
    pub(crate) read_states: BTreeMap<u64, Vec<ReadState>>,
    pub(crate) applied: BTreeMap<u64, Vec<Entry>>,
}

impl Cluster {
    pub(crate) fn new(ids: &[u64]) -> Cluster {
        let nodes = ids.iter().map(|&id| (id, node(id, ids))).collect();
        Cluster {
            nodes,
            cut: BTreeSet::new(),
            read_states: BTreeMap::new(),
            applied: BTreeMap::new(),
        }
    }

    pub(crate) fn node(&mut self, id: u64) -> &mut RawNode<MemStorage> {
        self.nodes.get_mut(&id).unwrap()
    }

    pub(crate) fn isolate(&mut self, id: u64) {
        for &other in self.nodes.keys() {
            if other != id {
                self.cut.insert((id, other));
                self.cut.insert((other, id));
            }
        }
    }

    pub(crate) fn heal(&mut self) {
        self.cut.clear();
    }

    /// Delivers messages until the network is quiet.
    pub(crate) fn settle(&mut self) {
        for _ in 0..1000 {
            let mut queue = Vec::new();
            for (&id, n) in &mut self.nodes {
                let out = drive(n);
                self.read_states
                    .entry(id)
                    .or_default()
                    .extend(out.read_states.iter().copied());
                self.applied
                    .entry(id)
                    .or_default()
                    .extend(out.committed.iter().cloned());
                queue.extend(out.all());
            }
            if queue.is_empty() {
                return;
            }
            for m in queue {
                if self.cut.contains(&(m.from.0, m.to.0)) {
                    continue;
                }
                if let Some(n) = self.nodes.get_mut(&m.to.0) {
                    n.step(m).unwrap();
                }
            }
        }
        panic!("cluster did not settle");
    }

    /// Lets every node's start-up vote guard expire (messages discarded).
    pub(crate) fn age(&mut self) {
        for n in self.nodes.values_mut() {
            for _ in 0..n.status().now.max(10) {
                if n.status().now >= 10 {
                    break;
                }
                n.tick();
                let _ = drive(n);
            }
        }
    }

    /// Ticks `id` until it campaigns and settles; asserts it won.
    pub(crate) fn elect(&mut self, id: u64) {
        self.age();
        for _ in 0..100 {
            self.node(id).tick();
            if self.node(id).status().role != Role::Follower {
                break;
            }
        }
        self.settle();
        assert_eq!(
            self.node(id).status().role,
            Role::Leader,
            "node {id} did not win"
        );
    }

    pub(crate) fn tick_all(&mut self, n: usize) {
        for _ in 0..n {
            for node in self.nodes.values_mut() {
                node.tick();
            }
            self.settle();
        }
    }

    pub(crate) fn commit(&mut self, id: u64) -> Index {
        self.nodes[&id].status().commit
    }
}

/// A node of `voters` made leader of term `old term + 1` by hand-made vote
/// responses from `voters[1]`, its no-op persisted (not committed).
pub(crate) fn make_leader(mut n: RawNode<MemStorage>, voters: &[u64]) -> RawNode<MemStorage> {
    let helper = *voters.iter().find(|&&v| v != n.status().id.0).unwrap();
    for _ in 0..40 {
        n.tick();
        if n.status().role != Role::Follower {
            break;
        }
    }
    let term = n.status().term.0 + 1;
    let id = n.status().id.0;
    if n.status().role == Role::PreCandidate {
        n.step(msg(
            helper,
            id,
            term,
            MessageBody::VoteResponse {
                pre_vote: true,
                reject: false,
            },
        ))
        .unwrap();
    }
    for &v in voters.iter().filter(|&&v| v != id) {
        if n.status().role == Role::Candidate {
            n.step(msg(
                v,
                id,
                term,
                MessageBody::VoteResponse {
                    pre_vote: false,
                    reject: false,
                },
            ))
            .unwrap();
        }
    }
    assert_eq!(n.status().role, Role::Leader);
    let _ = drive(&mut n);
    n
}

/// The token of the heartbeat round in `msgs` to `to`.
pub(crate) fn token_to(msgs: &[Message], to: u64) -> u64 {
    msgs.iter()
        .find_map(|m| match m.body {
            MessageBody::Heartbeat { token, .. } if m.to == NodeId(to) => Some(token),
            _ => None,
        })
        .expect("a heartbeat")
}
