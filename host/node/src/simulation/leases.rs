//! Simulated lease holders, and what must hold of etcd's leases in the KV
//! plugin (see `docs/design/006-timers-and-leases.md`).
//!
//! Each holder grants a lease (1, 2 or 3 s TTL), puts a key with it, and
//! keeps it alive every TTL/4 to TTL/3 through the Raft loop's `Renew`, as
//! etcd's client does at TTL/3; now and then it stops renewing (its process died)
//! and starts over with a new lease. Proposals are tagged and retried until
//! acknowledged, as the clients' puts are.
//!
//! Checked, from the committed log and from each node's applied state:
//! - In log time: no lease is revoked before its promise, the grant's
//!   stamp + TTL and, for each answered keep-alive, the `at` its tick
//!   carries + TTL; nor before the grace the revoking tick carries.
//! - In real time: a lease lasts at least its TTL from the sending of its
//!   last answered keep-alive, less [`MAX_CLOCK_STEP_MS`] per election
//!   between (log time follows the leader's monotonic clock, and a new
//!   leader moves it at most that far ahead, whatever the wall clocks do);
//!   and a new leader revokes nothing within an election timeout of its
//!   election.
//! - Every replica revokes a lease at the same entry: the ranges in which
//!   each node saw its key go meet.
//! - Once every holder stops, each lease it kept alive is revoked within
//!   TTL + an election timeout + the time without a leader (+ the grace
//!   and the step of each election since, and 200 ms for the network and
//!   ticks); at the end no node has a lease left.
//!
//! [`MAX_CLOCK_STEP_MS`]: crate::timers::MAX_CLOCK_STEP_MS

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;
use tokio::sync::oneshot;
use wasmraft_proto::etcdserverpb::{LeaseGrantRequest, LeaseLeasesRequest, PutRequest};
use wasmraft_proto::kvplugin::{Request as KvRequest, Response as KvResponse, request, response};

use super::checks::{Checks, TickSeen};
use super::clients::{decode_kv, get_request};
use super::rng::Rng;
use crate::error::Error;
use crate::node::{Applied, Node};
use crate::raft_loop::LoopMsg;

/// Holder `i`'s TTL is `1 + i % 3` s: short ones expire often under
/// faults; long ones outlast any election, so that log time running ahead
/// of real time would show as an early revocation.
fn ttl_s(holder: usize) -> i64 {
    1 + holder as i64 % 3
}
/// How long a holder waits for an answer before it tries again.
const ATTEMPT_MS: u64 = 600;
/// Per millisecond under faults, the chance that a holder stops renewing.
const STOP_CHANCE: f64 = 0.0004;
const NOT_FOUND: &str = "requested lease not found";

/// What the holders did and the checks saw.
#[derive(Debug, Default, Clone)]
pub(crate) struct LeaseStats {
    pub granted: u64,
    pub keep_alives: u64,
    /// Keep-alives answered "not found": the lease expired while its holder
    /// still ran (its keep-alives failed for longer than the TTL).
    pub lost: u64,
    pub stopped: u64,
    pub revoked: u64,
    /// Revocations narrowed to one tick by the replicas' observations.
    pub pinned: u64,
}

impl LeaseStats {
    pub fn add(&mut self, o: &LeaseStats) {
        self.granted += o.granted;
        self.keep_alives += o.keep_alives;
        self.lost += o.lost;
        self.stopped += o.stopped;
        self.revoked += o.revoked;
        self.pinned += o.pinned;
    }
}

enum Phase {
    Grant { sequence: u64 },
    Attach { lease: i64, sequence: u64 },
    Alive { lease: i64, next_at: u64 },
    /// Every holder stopped: the run is ending.
    Done,
}

struct Holder {
    /// Its client session id.
    id: u64,
    sequence: u64,
    target: u64,
    phase: Phase,
    waiting: Option<(oneshot::Receiver<Result<Applied, Error>>, u64)>,
    retry_at: u64,
    round: u64,
    /// When the current grant was first sent.
    first_sent: Option<u64>,
}

/// A lease the checks follow, from its grant on.
struct Tracked {
    ttl_ms: u64,
    grant_index: u64,
    /// When its holder sent the grant or the last answered keep-alive: the
    /// leader took it no earlier.
    promised_from_ms: u64,
    /// Indexes of the ticks that answered its keep-alives.
    renewed_at: Vec<u64>,
    /// Its key and the index of the put that attached it (so every
    /// replica holds the key there).
    key: Option<(Vec<u8>, u64)>,
    /// Per node, the applied index at which its key was last seen.
    present: BTreeMap<u64, u64>,
    /// The nodes that saw it gone.
    gone_on: BTreeSet<u64>,
    /// Where it was revoked: the meet of the nodes' `(seen, gone]` ranges.
    revoked_in: Option<(u64, u64)>,
    gone_seen_ms: Option<u64>,
    /// Its holder kept it alive until every holder stopped, at this time.
    alive_at_stop: Option<u64>,
}

pub(super) struct Leases {
    holders: Vec<Holder>,
    tracked: BTreeMap<i64, Tracked>,
    /// Per node, the applied index its keys were last looked up at.
    looked_at: BTreeMap<u64, u64>,
    pub stats: LeaseStats,
    pub violation: Option<String>,
}

impl Leases {
    pub fn new(count: u64, nodes: u64) -> Leases {
        let holders = (0..count)
            .map(|i| Holder {
                id: 2000 + i,
                sequence: 1,
                target: 1 + i % nodes,
                phase: Phase::Grant { sequence: 1 },
                waiting: None,
                retry_at: 0,
                round: 0,
                first_sent: None,
            })
            .collect();
        Leases { holders, tracked: BTreeMap::new(), looked_at: BTreeMap::new(), stats: LeaseStats::default(), violation: None }
    }

    /// Moves every holder on by one millisecond.
    pub fn step(&mut self, now: u64, rng: &mut Rng, faults: bool, nodes: u64, live: &dyn Fn(u64) -> Option<Node>) {
        for i in 0..self.holders.len() {
            if faults && matches!(self.holders[i].phase, Phase::Alive { .. }) && rng.chance(STOP_CHANCE) {
                // Its process died: no more keep-alives; a new lease next.
                self.stats.stopped += 1;
                self.start_over(i);
            }
            self.advance(i, now, rng, nodes, live);
        }
    }

    /// Every holder stops renewing, for good.
    pub fn stop_all(&mut self, now: u64) {
        for h in &mut self.holders {
            if let Phase::Alive { lease, .. } = h.phase {
                if let Some(t) = self.tracked.get_mut(&lease) {
                    t.alive_at_stop = Some(now);
                }
            }
            h.phase = Phase::Done;
            h.waiting = None;
        }
    }

    fn start_over(&mut self, i: usize) {
        let h = &mut self.holders[i];
        h.sequence += 1;
        h.round += 1;
        h.phase = Phase::Grant { sequence: h.sequence };
        h.waiting = None;
        h.first_sent = None;
    }

    fn advance(&mut self, i: usize, now: u64, rng: &mut Rng, nodes: u64, live: &dyn Fn(u64) -> Option<Node>) {
        if let Some((mut rx, sent_at)) = self.holders[i].waiting.take() {
            match rx.try_recv() {
                Ok(answer) => self.answered(i, answer, sent_at, now, rng, nodes),
                Err(oneshot::error::TryRecvError::Empty) if now < sent_at + ATTEMPT_MS => {
                    self.holders[i].waiting = Some((rx, sent_at));
                }
                Err(_) => self.retry(i, now, rng, nodes, None),
            }
            return;
        }
        let ttl = ttl_s(i);
        let h = &mut self.holders[i];
        if now < h.retry_at {
            return;
        }
        let Some(node) = live(h.target) else {
            h.target = 1 + rng.below(nodes);
            h.retry_at = now + 5;
            return;
        };
        let (reply, rx) = oneshot::channel();
        let _ = match h.phase {
            Phase::Grant { sequence } => {
                let r = request::Request::RequestLeaseGrant(LeaseGrantRequest { ttl, id: 0 });
                node.ask_propose((KvRequest { request: Some(r) }.encode_to_vec(), h.id, sequence, reply))
            }
            Phase::Attach { lease, sequence } => {
                let put = PutRequest { key: holder_key(h.id, h.round), value: b"held".to_vec(), lease, ..Default::default() };
                let r = request::Request::RequestPut(put);
                node.ask_propose((KvRequest { request: Some(r) }.encode_to_vec(), h.id, sequence, reply))
            }
            Phase::Alive { lease, next_at } => {
                if now < next_at {
                    return;
                }
                self.stats.keep_alives += 1;
                node.send(LoopMsg::Renew { key: lease.to_be_bytes().to_vec(), reply })
            }
            Phase::Done => return,
        };
        h.waiting = Some((rx, now));
        if matches!(h.phase, Phase::Grant { .. }) {
            h.first_sent.get_or_insert(now);
        }
    }

    /// Tries again soon, at the leader named or another node.
    fn retry(&mut self, i: usize, now: u64, rng: &mut Rng, nodes: u64, leader: Option<u64>) {
        let h = &mut self.holders[i];
        h.target = leader.unwrap_or_else(|| 1 + rng.below(nodes));
        h.retry_at = now + 1 + rng.below(10);
    }

    fn answered(&mut self, i: usize, answer: Result<Applied, Error>, sent_at: u64, now: u64, rng: &mut Rng, nodes: u64) {
        let applied = match answer {
            Ok(applied) => applied,
            Err(Error::Rejected(m)) if m.contains(NOT_FOUND) => {
                // Expired before the put or the keep-alive got there.
                if matches!(self.holders[i].phase, Phase::Alive { .. }) {
                    self.stats.lost += 1;
                }
                self.start_over(i);
                return;
            }
            Err(Error::NotLeader { leader }) => return self.retry(i, now, rng, nodes, leader.map(|l| l.0)),
            Err(Error::ProposalDropped | Error::Timeout | Error::Stopped | Error::Busy(_)) => {
                return self.retry(i, now, rng, nodes, None);
            }
            Err(Error::Fatal(cause)) if cause.contains(super::checks::CRASH_POINT) => {
                return self.retry(i, now, rng, nodes, None);
            }
            Err(other) => {
                let id = self.holders[i].id;
                self.violation.get_or_insert(format!("lease holder {id}: unexpected answer {other}"));
                return self.retry(i, now, rng, nodes, None);
            }
        };
        let ttl_ms = ttl_s(i) as u64 * 1000;
        let next_renewal = now + ttl_ms / 4 + rng.below(ttl_ms / 12);
        let h = &mut self.holders[i];
        match h.phase {
            Phase::Grant { .. } => match decode_grant(&applied.response) {
                Ok(lease) => {
                    self.stats.granted += 1;
                    let t = Tracked {
                        ttl_ms,
                        grant_index: applied.index,
                        // The grant's stamp is no earlier than its first try.
                        promised_from_ms: h.first_sent.unwrap_or(sent_at),
                        renewed_at: Vec::new(),
                        key: None,
                        present: BTreeMap::new(),
                        gone_on: BTreeSet::new(),
                        revoked_in: None,
                        gone_seen_ms: None,
                        alive_at_stop: None,
                    };
                    self.tracked.insert(lease, t);
                    h.first_sent = None;
                    h.sequence += 1;
                    h.phase = Phase::Attach { lease, sequence: h.sequence };
                }
                Err(e) => {
                    self.violation.get_or_insert(format!("lease holder {}: a grant answered {e}", h.id));
                }
            },
            Phase::Attach { lease, .. } => {
                if let Some(t) = self.tracked.get_mut(&lease) {
                    t.key = Some((holder_key(h.id, h.round), applied.index));
                }
                h.phase = Phase::Alive { lease, next_at: next_renewal };
            }
            Phase::Alive { lease, .. } => {
                if let Some(t) = self.tracked.get_mut(&lease) {
                    t.renewed_at.push(applied.index);
                    t.promised_from_ms = t.promised_from_ms.max(sent_at);
                }
                h.phase = Phase::Alive { lease, next_at: next_renewal };
            }
            Phase::Done => {}
        }
    }

    /// Looks up node `id`'s lease keys at its applied index, if that moved:
    /// a key seen at `p` and gone at `a` was revoked in `(p, a]`.
    pub fn observe(&mut self, now: u64, id: u64, node: &Node) {
        let status = node.status();
        // A node that failed answers no one (its state may be half an
        // install: see `Node::query_applied`).
        if status.fatal.is_some() {
            return;
        }
        let applied = status.applied;
        if self.looked_at.insert(id, applied) == Some(applied) {
            return;
        }
        for (lease, t) in &mut self.tracked {
            let Some((key, attached)) = &t.key else { continue };
            if t.gone_on.contains(&id) {
                continue;
            }
            let bytes = match node.query_applied(&get_request_bytes(key)) {
                Ok(bytes) => bytes,
                Err(e) => {
                    self.violation.get_or_insert(format!("node {id}: a query failed: {e}"));
                    return;
                }
            };
            match decode_kv(&bytes) {
                Ok(Some(_)) => {
                    t.present.insert(id, applied);
                }
                Ok(None) => {
                    let seen = t.present.get(&id).copied().unwrap_or(*attached);
                    if seen >= applied {
                        continue; // it has not applied the put yet
                    }
                    t.gone_on.insert(id);
                    let (lo, hi) = t.revoked_in.map_or((seen, applied), |(lo, hi)| (lo.max(seen), hi.min(applied)));
                    if lo >= hi {
                        self.violation.get_or_insert(format!(
                            "replicas revoked lease {lease:x} at different entries: node {id} in {}..={applied}, the others in {:?}",
                            seen + 1,
                            t.revoked_in
                        ));
                    }
                    t.revoked_in = Some((lo, hi));
                    t.gone_seen_ms.get_or_insert(now);
                }
                Err(e) => {
                    self.violation.get_or_insert(format!("node {id}: undecodable range: {e}"));
                }
            }
        }
    }

    /// Whether no node has a lease left.
    pub fn none_left(&self, nodes: &[(u64, Node)]) -> Result<bool, String> {
        let query = KvRequest { request: Some(request::Request::RequestLeaseLeases(LeaseLeasesRequest {})) }.encode_to_vec();
        for (id, node) in nodes {
            let bytes = node.query_applied(&query).map_err(|e| format!("node {id}: {e}"))?;
            match KvResponse::decode(bytes.as_slice()).map_err(|e| e.to_string())?.response {
                Some(response::Response::ResponseLeaseLeases(r)) if r.leases.is_empty() => {}
                Some(response::Response::ResponseLeaseLeases(_)) => return Ok(false),
                other => return Err(format!("node {id}: not a leases response: {other:?}")),
            }
        }
        Ok(true)
    }

    /// The checks on every revocation seen, against the committed log;
    /// a lease kept alive until the holders stopped may last its TTL +
    /// `late_ms` after.
    pub fn verify(&mut self, checks: &Checks, elections_at: &BTreeMap<u64, u64>, election_ms: u64, late_ms: u64) -> Result<(), String> {
        let ticks = checks.ticks();
        for (lease, t) in &self.tracked {
            // In real time: log time runs with the leader's monotonic clock,
            // and a new leader moves it at most `MAX_CLOCK_STEP_MS` ahead of
            // its predecessor's, whatever the wall clocks do.
            if let Some(gone) = t.gone_seen_ms {
                let from = t.promised_from_ms;
                let elections = elections_at.values().filter(|&&e| e >= from && e <= gone).count() as u64;
                let shortest = t.ttl_ms.saturating_sub(elections * crate::timers::MAX_CLOCK_STEP_MS);
                if gone - from < shortest {
                    return Err(format!(
                        "lease {lease:x} was gone at {gone} ms, {} ms after its last answered keep-alive was sent; with {elections} elections between, at least {shortest} ms",
                        gone - from
                    ));
                }
            }
            if let (Some(stop), Some(gone)) = (t.alive_at_stop, t.gone_seen_ms) {
                let bound_ms = t.ttl_ms + late_ms;
                if gone.saturating_sub(stop) > bound_ms {
                    return Err(format!("lease {lease:x} was revoked {} ms after its keep-alives stopped; the bound is {bound_ms} ms", gone - stop));
                }
            }
            if t.alive_at_stop.is_some() && t.gone_seen_ms.is_none() {
                return Err(format!("lease {lease:x} was kept alive until the end and never seen revoked"));
            }
            let Some((lo, hi)) = t.revoked_in else { continue };
            self.stats.revoked += 1;
            let in_range: Vec<(&u64, _)> = ticks.range(lo + 1..=hi).collect();
            if in_range.len() == 1 && checks.saw_all(lo + 1, hi) {
                self.stats.pinned += 1;
            }
            if in_range.is_empty() {
                if checks.saw_all(lo + 1, hi) {
                    return Err(format!("lease {lease:x} was revoked in entries {}..={hi}, none of them a tick", lo + 1));
                }
                continue;
            }
            // The promise: grant stamp + TTL, and each answered keep-alive's
            // `at` + TTL.
            let mut promise = checks.stamp(t.grant_index).map_or(0, |s| s + t.ttl_ms);
            for r in &t.renewed_at {
                let key = lease.to_be_bytes();
                let at = ticks.get(r).and_then(|k| k.renewals.iter().filter(|(k, _)| k[..] == key).map(|(_, at)| *at).max());
                promise = promise.max(at.map_or(0, |at| at + t.ttl_ms));
            }
            // One of the ticks in the range revoked it; unless the range
            // holds only one, it is not known which, so the revocation is
            // wrong only if none of them may have made it. (The last is not
            // always the one: a new leader's tick carries a later grace, and
            // one at the end of the range may have revoked nothing; seed
            // 1600243.)
            let gone = t.gone_seen_ms.unwrap_or(u64::MAX);
            let verdict = |index: u64, tick: &TickSeen| {
                if tick.now_ms < promise {
                    return Err(format!(
                        "lease {lease:x} was revoked by the tick at {index} (log time {}) before its promise {promise} (grant at {}, keep-alives answered at {:?})",
                        tick.now_ms, t.grant_index, t.renewed_at
                    ));
                }
                if tick.now_ms < tick.grace_until_ms {
                    return Err(format!(
                        "lease {lease:x} was revoked by the tick at {index} (log time {}) before the grace it carries ({})",
                        tick.now_ms, tick.grace_until_ms
                    ));
                }
                // The grace in real time: a new leader revokes nothing
                // within an election timeout of its election (seen at most
                // 1 ms late).
                let elected = elections_at.get(&tick.term).copied().unwrap_or(0);
                if gone < elected + election_ms - 1 {
                    return Err(format!(
                        "lease {lease:x} was revoked by the tick at {index} of term {}, {} ms after its leader was elected",
                        tick.term,
                        gone.saturating_sub(elected)
                    ));
                }
                Ok(())
            };
            let mut last = Ok(());
            for &(&index, tick) in &in_range {
                last = verdict(index, tick);
                if last.is_ok() {
                    break;
                }
            }
            last?;
        }
        Ok(())
    }
}

fn holder_key(holder: u64, round: u64) -> Vec<u8> {
    format!("lease/{holder}/{round}").into_bytes()
}

fn get_request_bytes(key: &[u8]) -> Vec<u8> {
    get_request(std::str::from_utf8(key).expect("holder keys are text"))
}

fn decode_grant(bytes: &[u8]) -> Result<i64, String> {
    match KvResponse::decode(bytes).map_err(|e| e.to_string())?.response {
        Some(response::Response::ResponseLeaseGrant(r)) if r.id > 0 => Ok(r.id),
        other => Err(format!("not a grant: {other:?}")),
    }
}
