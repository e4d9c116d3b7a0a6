//! What a run is made of: options, fault and workload rates drawn from the
//! seed, and the statistics a run reports.

use super::rng::Rng;

/// Time units per tick (nodes tick every `TICK ± SKEW`); one step is one TICK.
pub const TICK: u64 = 100;
/// Skew bound: periods in `[TICK - SKEW, TICK + SKEW]`. With election_tick
/// 10 and lease_drift_ticks 2 the lease stays safe up to a rate ratio of 9/8.
pub const SKEW: u64 = 4;

/// How a run is configured beyond its seed.
#[derive(Clone, Debug)]
pub struct Options {
    pub steps: u64,
    /// The most steps the heal-and-converge phase may take.
    pub liveness_steps: u64,
    /// Test-only broken read path: serve "linearizable" reads from any node's
    /// local state. The oracle must catch it.
    pub broken_local_reads: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            steps: 500,
            liveness_steps: 4000,
            broken_local_reads: false,
        }
    }
}

/// What happened in a run (or many).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub runs: u64,
    pub steps: u64,
    pub writes_acked: u64,
    pub read_index_served: u64,
    pub lease_served: u64,
    pub elections: u64,
    pub crashes: u64,
    pub snapshots_installed: u64,
    pub membership_committed: u64,
    pub transfers: u64,
    pub messages: u64,
    pub max_converge_steps: u64,
    /// Malformed and out-of-range messages stepped in, every one refused.
    pub hostile_refused: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.runs += o.runs;
        self.steps += o.steps;
        self.writes_acked += o.writes_acked;
        self.read_index_served += o.read_index_served;
        self.lease_served += o.lease_served;
        self.elections += o.elections;
        self.crashes += o.crashes;
        self.snapshots_installed += o.snapshots_installed;
        self.membership_committed += o.membership_committed;
        self.transfers += o.transfers;
        self.messages += o.messages;
        self.max_converge_steps = self.max_converge_steps.max(o.max_converge_steps);
        self.hostile_refused += o.hostile_refused;
    }
}

/// Fault and workload rates, drawn from the seed.
#[derive(Clone, Debug)]
pub struct Params {
    pub voters: u64,
    pub pool: u64,
    pub drop: f64,
    pub dup: f64,
    pub max_delay: u64,
    pub long_delay: f64,
    pub crash: f64,
    pub restart: f64,
    pub partition: f64,
    pub heal: f64,
    pub propose: f64,
    pub read: f64,
    pub lease: f64,
    pub conf: f64,
    pub transfer: f64,
    pub compact: f64,
    pub pre_vote: bool,
    pub max_inflight: usize,
    pub max_bytes: u64,
    pub max_inflight_bytes: u64,
    /// Leaders defer commit updates (`Config::defer_commit_updates`) and
    /// send them after a tick with this chance (heartbeats carry them
    /// too); drawn from `World::commit_rng`.
    pub defer_commit_updates: Option<f64>,
    /// Drivers save a hard state whose only change is the commit index
    /// only with the next synced Ready that carries a hard state (the
    /// node's driver keeps it back too): restarts find a commit index
    /// older than the one they knew. Drawn by the world from a stream of
    /// its own, as is `durable_state`.
    pub keep_back_commits: bool,
    /// The state machine keeps what it applied across a crash (as the
    /// node's does, in RocksDB); otherwise it restarts from the snapshot.
    /// With `keep_back_commits`, restarts find it ahead of the stored
    /// commit index.
    pub durable_state: bool,
}

impl Params {
    pub fn draw(rng: &mut Rng) -> Params {
        let voters = if rng.chance(0.5) { 3 } else { 5 };
        let f = |rng: &mut Rng, max: f64| {
            if rng.chance(0.2) {
                0.0
            } else {
                (rng.range(0, 1000) as f64 / 1000.0) * max
            }
        };
        Params {
            voters,
            pool: voters + 2,
            drop: f(rng, 0.15),
            dup: f(rng, 0.05),
            max_delay: rng.range(5, 80),
            long_delay: f(rng, 0.05),
            crash: f(rng, 0.03),
            restart: 0.05 + f(rng, 0.3),
            partition: f(rng, 0.03),
            heal: 0.05 + f(rng, 0.2),
            propose: 0.2 + f(rng, 0.8),
            read: 0.2 + f(rng, 0.8),
            lease: f(rng, 0.8),
            conf: f(rng, 0.03),
            transfer: f(rng, 0.02),
            compact: f(rng, 0.05),
            pre_vote: rng.chance(0.8),
            max_inflight: rng.range(1, 8) as usize,
            max_bytes: rng.range(40, 2000),
            max_inflight_bytes: if rng.chance(0.5) { u64::MAX } else { rng.range(20, 4000) },
            // Drawn by the world from a stream of its own.
            defer_commit_updates: None,
            keep_back_commits: false,
            durable_state: false,
        }
    }
}
