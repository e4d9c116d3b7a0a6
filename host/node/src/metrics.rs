//! Counters and histograms of a node's work, kept with atomics on the hot
//! paths and read when metrics are scraped: client requests by kind and
//! outcome, commit, fsync and apply latency, elections, ReadIndex rounds,
//! snapshots, the plugin's fuel and traps, and what the node hears from
//! each peer. The Prometheus rendering lives with the HTTP listener
//! (`wasmraft-grpc`); this module only counts.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::{Consistency, Error};

/// Upper bounds of the latency buckets, in seconds (Prometheus `le`).
pub const LATENCY_BUCKETS: [f64; 13] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// Upper bounds of the batch-size buckets, in entries.
pub const BATCH_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

/// A histogram with fixed buckets: cumulative when read, as Prometheus
/// wants them.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    /// The sum, in millionths of the unit (microseconds for latencies).
    sum_micros: AtomicU64,
}

impl Default for Histogram {
    /// A latency histogram ([`LATENCY_BUCKETS`]).
    fn default() -> Self {
        Self::new(&LATENCY_BUCKETS)
    }
}

impl Histogram {
    /// A histogram over `bounds`, ascending.
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Records a duration, in seconds.
    pub fn observe(&self, elapsed: Duration) {
        self.observe_value(elapsed.as_secs_f64());
    }

    /// Records a value in the histogram's unit.
    pub fn observe_value(&self, value: f64) {
        if let Some(i) = self.bounds.iter().position(|le| value <= *le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add((value * 1e6) as u64, Ordering::Relaxed);
    }

    /// `(le, cumulative count)` per bucket, the count and the sum.
    pub fn read(&self) -> (Vec<(f64, u64)>, u64, f64) {
        let mut running = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(self.buckets.iter())
            .map(|(le, n)| {
                running += n.load(Ordering::Relaxed);
                (*le, running)
            })
            .collect();
        (buckets, self.count.load(Ordering::Relaxed), self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6)
    }
}

/// What a client asked of the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    /// A command proposed through the log.
    Propose,
    /// A query, at the consistency it asked for.
    Read(Consistency),
}

impl RequestKind {
    /// Every kind, in the order metrics list them.
    pub const ALL: [RequestKind; 4] = [
        RequestKind::Propose,
        RequestKind::Read(Consistency::Linearizable),
        RequestKind::Read(Consistency::Lease),
        RequestKind::Read(Consistency::Eventual),
    ];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            RequestKind::Propose => "propose",
            RequestKind::Read(Consistency::Linearizable) => "read_linearizable",
            RequestKind::Read(Consistency::Lease) => "read_lease",
            RequestKind::Read(Consistency::Eventual) => "read_eventual",
        }
    }

    fn slot(self) -> usize {
        Self::ALL.iter().position(|k| *k == self).expect("every kind is listed")
    }
}

/// The `outcome` labels, in order.
pub const OUTCOMES: [&str; 8] = ["ok", "not_leader", "busy", "timeout", "invalid", "rejected", "plugin_trap", "failed"];

fn outcome(result: Result<(), &Error>) -> usize {
    match result {
        Ok(()) => 0,
        Err(Error::NotLeader { .. } | Error::ProposalDropped) => 1,
        Err(Error::Busy(_)) => 2,
        Err(Error::Timeout) => 3,
        Err(Error::Invalid(_)) => 4,
        Err(Error::Rejected(_)) => 5,
        Err(Error::PluginTrap(_)) => 6,
        Err(Error::Stopped | Error::Removed | Error::Fatal(_)) => 7,
    }
}

/// What a node hears from one peer.
#[derive(Debug, Default)]
pub struct PeerMetrics {
    /// When the last message from it arrived (None: not since start).
    pub last_heard: Option<Instant>,
    /// Heartbeat round trips to it, while this node leads.
    pub round_trip: Histogram,
}

/// Heartbeat rounds whose answers may still arrive, for round trips.
const HEARTBEAT_ROUNDS_KEPT: usize = 16;

/// The node's counters and histograms.
#[derive(Debug)]
pub struct NodeMetrics {
    requests: [[AtomicU64; OUTCOMES.len()]; RequestKind::ALL.len()],
    latency: [Histogram; RequestKind::ALL.len()],
    /// The time each batch took (state machine and storage write).
    pub apply_latency: Histogram,
    /// Entries per applied batch (its count is the batches applied, its
    /// sum the entries).
    pub apply_batch_size: Histogram,
    /// Fuel the plugin burned applying entries.
    pub plugin_fuel: AtomicU64,
    /// Entries the plugin trapped on (a panic, out of fuel or memory).
    pub plugin_traps: AtomicU64,
    /// Ticks applied (the plugin's timer came due, or keep-alives waited).
    pub ticks: AtomicU64,
    /// Ticks whose plugin `tick` failed (an error or a trap).
    pub tick_failures: AtomicU64,
    /// Synced log writes (entries and hard state), each one fsync.
    pub log_fsync: Histogram,
    /// From a proposal batch on the leader to its commit.
    pub commit_latency: Histogram,
    /// Campaigns for leadership this node started (real votes, not pre-votes).
    pub elections: AtomicU64,
    /// Times this node saw a new leader (or lost the one it had).
    pub leader_changes: AtomicU64,
    /// ReadIndex rounds this node started as leader.
    pub read_index_rounds: AtomicU64,
    /// Proposals this node sent to the leader as follower.
    pub proposals_forwarded: AtomicU64,
    /// Snapshots sent to followers that took them.
    pub snapshots_sent_ok: AtomicU64,
    /// Snapshots that failed on the way to a follower.
    pub snapshots_sent_failed: AtomicU64,
    /// Snapshots this node installed from a leader.
    pub snapshots_installed: AtomicU64,
    /// Snapshots this node took, each on the apply thread, which applies
    /// nothing meanwhile: the checkpoint, the log compaction, the removal
    /// of the one before.
    pub snapshot_duration: Histogram,
    peers: Mutex<BTreeMap<u64, PeerMetrics>>,
    /// Heartbeat rounds sent as leader: token and when.
    heartbeats: Mutex<VecDeque<(u64, Instant)>>,
}

impl Default for NodeMetrics {
    fn default() -> Self {
        Self {
            requests: Default::default(),
            latency: Default::default(),
            apply_latency: Histogram::default(),
            apply_batch_size: Histogram::new(&BATCH_BUCKETS),
            plugin_fuel: AtomicU64::new(0),
            plugin_traps: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            tick_failures: AtomicU64::new(0),
            log_fsync: Histogram::default(),
            commit_latency: Histogram::default(),
            elections: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
            read_index_rounds: AtomicU64::new(0),
            proposals_forwarded: AtomicU64::new(0),
            snapshots_sent_ok: AtomicU64::new(0),
            snapshots_sent_failed: AtomicU64::new(0),
            snapshots_installed: AtomicU64::new(0),
            snapshot_duration: Histogram::default(),
            peers: Mutex::new(BTreeMap::new()),
            heartbeats: Mutex::new(VecDeque::new()),
        }
    }
}

/// Adds one to a counter.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl NodeMetrics {
    /// Counts a finished request and its latency.
    pub fn request<T>(&self, kind: RequestKind, result: &Result<T, Error>, elapsed: Duration) {
        let slot = kind.slot();
        self.requests[slot][outcome(result.as_ref().map(drop))].fetch_add(1, Ordering::Relaxed);
        self.latency[slot].observe(elapsed);
    }

    /// Requests of `kind` per outcome label.
    pub fn requests(&self, kind: RequestKind) -> Vec<(&'static str, u64)> {
        OUTCOMES.iter().zip(&self.requests[kind.slot()]).map(|(o, n)| (*o, n.load(Ordering::Relaxed))).collect()
    }

    /// The latency histogram of `kind`.
    pub fn latency(&self, kind: RequestKind) -> &Histogram {
        &self.latency[kind.slot()]
    }

    /// Counts one applied batch of `entries`.
    pub(crate) fn applied_batch(&self, entries: usize, took: Duration) {
        self.apply_batch_size.observe_value(entries as f64);
        self.apply_latency.observe(took);
    }

    /// A message from `peer` arrived at `now`; a heartbeat answer also
    /// times its round trip.
    pub(crate) fn heard_from(&self, peer: u64, now: Instant, heartbeat_token: Option<u64>) {
        let sent = heartbeat_token.and_then(|token| {
            self.heartbeats.lock().iter().find(|(t, _)| *t == token).map(|(_, at)| *at)
        });
        let mut peers = self.peers.lock();
        let p = peers.entry(peer).or_default();
        p.last_heard = Some(now);
        if let Some(sent) = sent {
            p.round_trip.observe(now.saturating_duration_since(sent));
        }
    }

    /// This node, leading, sent heartbeat round `token` at `now`.
    pub(crate) fn heartbeat_sent(&self, token: u64, now: Instant) {
        let mut rounds = self.heartbeats.lock();
        if rounds.back().is_some_and(|(t, _)| *t == token) {
            return;
        }
        if rounds.len() == HEARTBEAT_ROUNDS_KEPT {
            rounds.pop_front();
        }
        rounds.push_back((token, now));
    }

    /// `peer` left the cluster.
    pub(crate) fn forget_peer(&self, peer: u64) {
        self.peers.lock().remove(&peer);
    }

    /// Runs `f` over each peer's figures, in id order.
    pub fn each_peer(&self, mut f: impl FnMut(u64, &PeerMetrics)) {
        for (id, p) in self.peers.lock().iter() {
            f(*id, p);
        }
    }
}

/// Proposals on the leader waiting to commit, timed from when they were
/// proposed (the Raft loop's clock) to when the commit index passes them.
#[derive(Debug, Default)]
pub(crate) struct CommitTimer {
    /// The last index of each proposal batch, and when it was proposed.
    waiting: VecDeque<(u64, Instant)>,
}

impl CommitTimer {
    pub fn proposed(&mut self, last_index: u64, now: Instant) {
        self.waiting.push_back((last_index, now));
    }

    /// The commit index reached `commit` at `now`.
    pub fn committed(&mut self, commit: u64, now: Instant, into: &Histogram) {
        while let Some(&(index, at)) = self.waiting.front() {
            if index > commit {
                break;
            }
            into.observe(now.saturating_duration_since(at));
            self.waiting.pop_front();
        }
    }

    /// Leadership ended: what waits may never commit in this term.
    pub fn clear(&mut self) {
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_outcomes_counted_by_kind() {
        let m = NodeMetrics::default();
        m.request(RequestKind::Propose, &Ok::<(), Error>(()), Duration::from_micros(300));
        m.request(RequestKind::Propose, &Err::<(), _>(Error::Timeout), Duration::from_millis(7));
        m.request(RequestKind::Read(Consistency::Lease), &Ok::<(), Error>(()), Duration::from_secs(9));
        let propose = m.requests(RequestKind::Propose);
        assert_eq!(propose.iter().find(|(o, _)| *o == "ok").unwrap().1, 1);
        assert_eq!(propose.iter().find(|(o, _)| *o == "timeout").unwrap().1, 1);
        let (buckets, count, sum) = m.latency(RequestKind::Propose).read();
        assert_eq!(count, 2);
        assert!((sum - 0.0073).abs() < 1e-9);
        assert_eq!(buckets[0], (0.0005, 1));
        assert_eq!(buckets[4], (0.01, 2));
        assert_eq!(buckets.last().unwrap().1, 2);
        let (buckets, count, _) = m.latency(RequestKind::Read(Consistency::Lease)).read();
        assert_eq!((buckets.last().unwrap().1, count), (0, 1), "past the last bucket: only in +Inf (the count)");
    }

    #[test]
    fn heartbeat_answers_time_their_round_and_others_only_mark_the_peer_heard() {
        let m = NodeMetrics::default();
        let t0 = Instant::now();
        m.heartbeat_sent(7, t0);
        m.heartbeat_sent(7, t0 + Duration::from_millis(50)); // same round again: the first send counts
        m.heard_from(2, t0 + Duration::from_millis(3), Some(7));
        m.heard_from(3, t0 + Duration::from_millis(4), None);
        m.heard_from(3, t0 + Duration::from_millis(5), Some(99)); // an unknown round
        let mut seen = Vec::new();
        m.each_peer(|id, p| seen.push((id, p.last_heard, p.round_trip.read().1, p.round_trip.read().2)));
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].0, 2);
        assert_eq!(seen[0].2, 1);
        assert!((seen[0].3 - 0.003).abs() < 1e-9);
        assert_eq!((seen[1].0, seen[1].1, seen[1].2), (3, Some(t0 + Duration::from_millis(5)), 0));
        m.forget_peer(2);
        let mut ids = Vec::new();
        m.each_peer(|id, _| ids.push(id));
        assert_eq!(ids, vec![3]);
    }

    #[test]
    fn commit_timer_observes_each_batch_once_when_the_commit_passes_it() {
        let h = Histogram::default();
        let mut timer = CommitTimer::default();
        let t0 = Instant::now();
        timer.proposed(5, t0);
        timer.proposed(9, t0 + Duration::from_millis(1));
        timer.committed(6, t0 + Duration::from_millis(2), &h);
        assert_eq!(h.read().1, 1);
        timer.committed(6, t0 + Duration::from_millis(3), &h);
        assert_eq!(h.read().1, 1, "a commit that did not move observes nothing");
        timer.committed(9, t0 + Duration::from_millis(4), &h);
        assert_eq!(h.read().1, 2);
        assert!((h.read().2 - 0.005).abs() < 1e-9, "2 ms + 3 ms");
        timer.proposed(12, t0);
        timer.clear();
        timer.committed(100, t0, &h);
        assert_eq!(h.read().1, 2);
    }

    #[test]
    fn batch_sizes_land_in_their_buckets() {
        let h = Histogram::new(&BATCH_BUCKETS);
        for n in [1.0, 3.0, 100.0, 5000.0] {
            h.observe_value(n);
        }
        let (buckets, count, sum) = h.read();
        assert_eq!(count, 4);
        assert_eq!(sum, 5104.0);
        assert_eq!(buckets[0], (1.0, 1));
        assert_eq!(buckets[2], (4.0, 2));
        assert_eq!(buckets.last().unwrap(), &(1024.0, 3));
    }
}
