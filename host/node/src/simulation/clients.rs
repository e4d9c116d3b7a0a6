//! Simulated clients: each runs one operation at a time against the KV
//! plugin, through the node's own entry points (the Raft loop's inbox, the
//! applied index, the plugin's query), and records what it saw for the
//! linearizability check.
//!
//! A put is tagged with the client's session id and a sequence number and
//! retried with the same number until it is acknowledged, whatever went
//! wrong (a timeout, a leader change, a crashed node), as the Rust client
//! does: the cluster must apply it exactly once. A read that fails changed
//! nothing and is simply left out of the history.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::sync::oneshot;
use wasmraft_lincheck::{KvHistory, KvInput, KvOutput};
use wasmraft_proto::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};
use wasmraft_raft::Index;

use super::rng::Rng;
use crate::error::Error;
use crate::node::{Applied, Node};
use crate::raft_loop::LoopMsg;

/// Keys every client writes and reads: few, so that operations contend.
pub(super) const KEYS: [&str; 3] = ["a", "b", "c"];
/// How long a client waits for an answer before it tries again.
const ATTEMPT_MS: u64 = 600;

enum Op {
    Put { key: &'static str, value: String, sequence: u64 },
    Get { key: &'static str, lease: bool },
}

enum Attempt {
    /// Not sent yet, or waiting to try again.
    Backoff { until: u64 },
    /// `via_follower`: the node did not lead when the put was sent (it
    /// forwards the put to the leader in its Raft stream).
    Propose { rx: oneshot::Receiver<Result<Applied, Error>>, sent_at: u64, via_follower: bool },
    ReadIndex { node: u64, rx: oneshot::Receiver<Result<Index, Error>>, sent_at: u64 },
    /// The read index is known (`from_lease`: from the lease the node
    /// published, not from its Raft loop); waiting for the node to apply it.
    WaitApplied { node: u64, index: u64, sent_at: u64, from_lease: bool },
}

struct InFlight {
    op: Op,
    invoked: u64,
    attempt: Attempt,
}

struct Client {
    id: u64,
    sequence: u64,
    /// The node it believes leads.
    target: u64,
    next_op_at: u64,
    current: Option<InFlight>,
}

/// What the clients did.
#[derive(Default)]
pub(super) struct Outcomes {
    pub history: KvHistory,
    /// Acknowledged puts per key: with exactly-once, each key's version.
    pub acknowledged_puts: BTreeMap<&'static str, u64>,
    pub puts: u64,
    /// Puts acknowledged by a node that did not lead when they were sent.
    pub follower_puts: u64,
    pub reads: u64,
    /// Reads served from the published lease, without the Raft loop.
    pub lease_share_reads: u64,
    pub retries: u64,
    /// Something no correct node answers, with why.
    pub violation: Option<String>,
}

pub(super) struct Clients {
    clients: Vec<Client>,
    /// Event times for the history: strictly increasing.
    clock: u64,
    /// The simulated clock's zero: millisecond `t` is `base + t`.
    base: Instant,
    pub outcomes: Outcomes,
}

impl Clients {
    pub fn new(count: u64, nodes: u64, base: Instant) -> Self {
        let clients = (0..count)
            .map(|i| Client { id: 1000 + i, sequence: 0, target: 1 + i % nodes, next_op_at: 0, current: None })
            .collect();
        Clients { clients, clock: 0, base, outcomes: Outcomes::default() }
    }

    fn stamp(&mut self, now_ms: u64) -> u64 {
        self.clock = self.clock.max(now_ms * 1000) + 1;
        self.clock
    }

    /// Whether every client is done with its operation.
    pub fn idle(&self) -> bool {
        self.clients.iter().all(|c| c.current.is_none())
    }

    /// Moves every client on by one millisecond: starts new operations
    /// (unless `quiet`), sends, retries, and records answers. `live` gives
    /// the node with an id, if it runs.
    pub fn step(&mut self, now: u64, rng: &mut Rng, quiet: bool, nodes: u64, live: &dyn Fn(u64) -> Option<Node>) {
        for i in 0..self.clients.len() {
            if self.clients[i].current.is_none() {
                if quiet || now < self.clients[i].next_op_at {
                    continue;
                }
                let op = if rng.chance(0.5) {
                    let c = &mut self.clients[i];
                    c.sequence += 1;
                    Op::Put { key: *rng.pick(&KEYS), value: format!("{}-{}", c.id, c.sequence), sequence: c.sequence }
                } else {
                    Op::Get { key: *rng.pick(&KEYS), lease: rng.chance(0.3) }
                };
                let invoked = self.stamp(now);
                self.clients[i].current = Some(InFlight { op, invoked, attempt: Attempt::Backoff { until: now } });
            }
            self.advance(i, now, rng, nodes, live);
        }
    }

    fn advance(&mut self, i: usize, now: u64, rng: &mut Rng, nodes: u64, live: &dyn Fn(u64) -> Option<Node>) {
        let Some(mut flight) = self.clients[i].current.take() else { return };
        let client = &mut self.clients[i];
        let mut done: Option<Option<KvOutput>> = None; // Some(None): failed read
        let attempt = std::mem::replace(&mut flight.attempt, Attempt::Backoff { until: now });
        flight.attempt = match attempt {
            Attempt::Backoff { until } if now < until => Attempt::Backoff { until },
            Attempt::Backoff { .. } => match live(client.target) {
                None => {
                    client.target = 1 + rng.below(nodes);
                    Attempt::Backoff { until: now + 5 }
                }
                Some(node) => send(&node, &flight.op, client.id, now, self.base + Duration::from_millis(now)),
            },
            Attempt::Propose { mut rx, sent_at, via_follower } => match rx.try_recv() {
                Ok(Ok(_applied)) => {
                    self.outcomes.follower_puts += u64::from(via_follower);
                    done = Some(Some(KvOutput::Ok));
                    Attempt::Backoff { until: now }
                }
                Ok(Err(e)) => {
                    if let Err(v) = retryable(&e) {
                        self.outcomes.violation.get_or_insert(format!("client {}: {v}", client.id));
                    }
                    if let Error::NotLeader { leader: Some(l) } = e {
                        client.target = l.0;
                    } else {
                        client.target = 1 + rng.below(nodes);
                    }
                    self.outcomes.retries += 1;
                    Attempt::Backoff { until: now + 1 + rng.below(10) }
                }
                Err(oneshot::error::TryRecvError::Empty) if now < sent_at + ATTEMPT_MS => {
                    Attempt::Propose { rx, sent_at, via_follower }
                }
                Err(_) => {
                    // Timed out, or the node went away: the outcome is
                    // unknown, so the same sequence number goes again.
                    client.target = 1 + rng.below(nodes);
                    self.outcomes.retries += 1;
                    Attempt::Backoff { until: now + 1 + rng.below(10) }
                }
            },
            Attempt::ReadIndex { node, mut rx, sent_at } => match rx.try_recv() {
                Ok(Ok(index)) => Attempt::WaitApplied { node, index: index.0, sent_at, from_lease: false },
                Ok(Err(e)) => {
                    if let Error::NotLeader { leader: Some(l) } = e {
                        client.target = l.0;
                    }
                    done = Some(None);
                    Attempt::Backoff { until: now }
                }
                Err(oneshot::error::TryRecvError::Empty) if now < sent_at + ATTEMPT_MS => {
                    Attempt::ReadIndex { node, rx, sent_at }
                }
                Err(_) => {
                    done = Some(None);
                    Attempt::Backoff { until: now }
                }
            },
            Attempt::WaitApplied { node: id, index, sent_at, from_lease } => match live(id) {
                Some(node) if node.status().applied >= index => {
                    let Op::Get { key, .. } = &flight.op else { unreachable!("only reads wait") };
                    match node.query_applied(&get_request(key)) {
                        Ok(bytes) => match decode_value(&bytes) {
                            Ok(value) => {
                                self.outcomes.lease_share_reads += u64::from(from_lease);
                                done = Some(Some(value.map_or_else(KvOutput::absent, KvOutput::value)));
                            }
                            Err(e) => {
                                self.outcomes.violation.get_or_insert(format!("undecodable read: {e}"));
                                done = Some(None);
                            }
                        },
                        // A node that failed answers an error, as `Node::query`
                        // does: the read failed, and tells nothing.
                        Err(crate::Error::Fatal(_)) => done = Some(None),
                        Err(e) => {
                            self.outcomes.violation.get_or_insert(format!("a query failed: {e}"));
                            done = Some(None);
                        }
                    }
                    Attempt::Backoff { until: now }
                }
                Some(_) if now < sent_at + ATTEMPT_MS => Attempt::WaitApplied { node: id, index, sent_at, from_lease },
                _ => {
                    done = Some(None);
                    Attempt::Backoff { until: now }
                }
            },
        };
        let Some(output) = done else {
            self.clients[i].current = Some(flight);
            return;
        };
        let returned = self.stamp(now);
        let client = &mut self.clients[i];
        client.next_op_at = now + 1 + rng.below(20);
        match (flight.op, output) {
            (Op::Put { key, value, .. }, Some(out)) => {
                self.outcomes.puts += 1;
                *self.outcomes.acknowledged_puts.entry(key).or_default() += 1;
                self.outcomes.history.returned(client.id, KvInput::put(key, value), flight.invoked, returned, out);
            }
            (Op::Get { key, .. }, Some(out)) => {
                self.outcomes.reads += 1;
                self.outcomes.history.returned(client.id, KvInput::get(key), flight.invoked, returned, out);
            }
            (_, None) => {} // a failed read changed nothing
        }
    }

    /// Operations still in flight when the run ends: a put's fate is
    /// unknown (its client never heard); a read is dropped.
    pub fn finish(&mut self) {
        for c in &mut self.clients {
            if let Some(InFlight { op: Op::Put { key, value, .. }, invoked, .. }) = c.current.take() {
                self.outcomes.history.unknown(c.id, KvInput::put(key, value), invoked);
            }
        }
    }
}

/// Sends `op` to `node` through the Raft loop's inbox.
fn send(node: &Node, op: &Op, client: u64, now: u64, at: Instant) -> Attempt {
    match op {
        Op::Put { key, value, sequence } => {
            let (reply, rx) = oneshot::channel();
            let command = put_request(key, value);
            let via_follower = node.status().role != wasmraft_raft::Role::Leader;
            let _ = node.ask_propose((command, client, *sequence, reply));
            Attempt::Propose { rx, sent_at: now, via_follower }
        }
        Op::Get { lease, .. } => {
            // As `Node::query` serves one: from the published lease if it
            // holds, else through the loop.
            if *lease && let Some(held) = node.lease_held(at) {
                return Attempt::WaitApplied { node: node.id(), index: held.commit, sent_at: now, from_lease: true };
            }
            let (reply, rx) = oneshot::channel();
            let _ = if *lease { node.send(LoopMsg::LeaseRead { reply }) } else { node.ask_read_index(reply) };
            Attempt::ReadIndex { node: node.id(), rx, sent_at: now }
        }
    }
}

/// Whether a proposal's error is one a correct node may give a retried,
/// tagged command; `Err` says why not.
fn retryable(e: &Error) -> Result<(), String> {
    match e {
        Error::NotLeader { .. } | Error::ProposalDropped | Error::Timeout | Error::Stopped | Error::Busy(_) => Ok(()),
        Error::Fatal(cause) if cause.contains("crash point") => Ok(()),
        other => Err(format!("unexpected answer to a put: {other}")),
    }
}

pub(super) fn put_request(key: &str, value: &str) -> Vec<u8> {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest { key: key.into(), value: value.into(), ..Default::default() })),
    }
    .encode_to_vec()
}

pub(super) fn get_request(key: &str) -> Vec<u8> {
    RequestOp { request: Some(Request::RequestRange(RangeRequest { key: key.into(), ..Default::default() })) }
        .encode_to_vec()
}

/// The value and version of the key a range answered, if it exists.
pub(super) fn decode_kv(bytes: &[u8]) -> Result<Option<(String, i64)>, String> {
    let response = ResponseOp::decode(bytes).map_err(|e| e.to_string())?;
    match response.response {
        Some(Response::ResponseRange(mut r)) => Ok(r
            .kvs
            .pop()
            .map(|kv| (String::from_utf8_lossy(&kv.value).into_owned(), kv.version))),
        other => Err(format!("not a range response: {other:?}")),
    }
}

fn decode_value(bytes: &[u8]) -> Result<Option<String>, String> {
    Ok(decode_kv(bytes)?.map(|(v, _)| v))
}
