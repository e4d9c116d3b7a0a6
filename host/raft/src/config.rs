//! The core's configuration: a plain struct with public fields, `Default`
//! and [`Config::validate`]. All durations are in ticks.

use crate::error::ConfigError;
use crate::types::{Index, NodeId};

/// Configuration of one Raft node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// This node's id; must not be 0.
    pub id: NodeId,
    /// The election timeout in ticks. A follower that hears nothing from a
    /// leader for a random timeout in `[election_tick, 2 * election_tick)`
    /// campaigns; a leader checks its quorum every `election_tick` ticks.
    pub election_tick: u64,
    /// Ticks between heartbeat rounds of a leader; `< election_tick`.
    pub heartbeat_tick: u64,
    /// Ask for pre-votes before raising the term (thesis §9.6). On by default.
    pub pre_vote: bool,
    /// A leader steps down when a quorum was not active during an election
    /// timeout, and followers in contact with a leader refuse (pre-)votes
    /// (thesis §6.2). On by default; lease reads require it.
    pub check_quorum: bool,
    /// Margin, in ticks, between the leader lease (`election_tick -
    /// lease_drift_ticks`, counted from when a heartbeat round was sent) and
    /// the election timeout. Must cover one tick of rounding plus the worst
    /// clock-rate difference between nodes over an election timeout.
    pub lease_drift_ticks: u64,
    /// The most AppendEntries messages in flight to one follower while it is
    /// replicating (pipelining window).
    pub max_inflight_msgs: usize,
    /// The most entry bytes in flight to one follower while it is
    /// replicating (etcd-io/raft `MaxInflightBytes`); at least one message
    /// is always allowed. Keep it within what the transport queues to a
    /// peer: appends past that are read from the log only to be dropped.
    /// Default: no limit.
    pub max_inflight_bytes: u64,
    /// The most entry bytes in one AppendEntries (at least one entry is sent).
    pub max_entries_bytes_per_msg: u64,
    /// A follower whose next index is more than this many entries behind the
    /// leader's last index is sent the latest snapshot instead of entries when
    /// that snapshot covers its next index. 0 disables this; followers behind
    /// the leader's first index always get a snapshot.
    pub snapshot_lag: u64,
    /// Seed of the election-timeout jitter. Same seed + same inputs give the
    /// same outputs.
    pub seed: u64,
    /// The index the state machine has applied at start (its durable applied
    /// index). Committed entries after it are handed out again.
    pub applied: Index,
    /// The most bytes of committed entries handed out in `Ready`s and not
    /// yet reported applied ([`crate::RawNode::applied_to`]); more wait in
    /// the log until the state machine catches up (at least one entry is
    /// handed out when none is pending, so apply always progresses). Bounds
    /// the apply queue of a node whose state machine lags its log, as
    /// etcd's `MaxCommittedSizePerReady` does. Default: no limit.
    pub max_applying_bytes: u64,
    /// A leader that commits sends no empty AppendEntries only to tell
    /// followers the new commit index: the next append to each carries
    /// it, or the next heartbeat round, or the driver sends it when it
    /// chooses ([`crate::RawNode::send_commit_updates`]). Under a steady
    /// stream of proposals that saves each follower a message and its
    /// answer per commit. Off by default (etcd-io/raft's behaviour: the
    /// commit goes out at once).
    pub defer_commit_updates: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            id: NodeId(0),
            election_tick: 10,
            heartbeat_tick: 1,
            pre_vote: true,
            check_quorum: true,
            lease_drift_ticks: 2,
            max_inflight_msgs: 256,
            max_inflight_bytes: u64::MAX,
            max_entries_bytes_per_msg: 1024 * 1024,
            snapshot_lag: 0,
            seed: 0,
            applied: Index(0),
            max_applying_bytes: u64::MAX,
            defer_commit_updates: false,
        }
    }
}

impl Config {
    /// A default configuration for node `id`.
    #[must_use]
    pub fn new(id: NodeId) -> Config {
        Config {
            id,
            ..Config::default()
        }
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.id == NodeId(0) {
            return Err(ConfigError::InvalidId);
        }
        if self.heartbeat_tick == 0 {
            return Err(ConfigError::HeartbeatTick);
        }
        if self.election_tick <= self.heartbeat_tick {
            return Err(ConfigError::ElectionTick {
                election_tick: self.election_tick,
                heartbeat_tick: self.heartbeat_tick,
            });
        }
        if self.lease_drift_ticks == 0 || self.lease_drift_ticks >= self.election_tick {
            return Err(ConfigError::LeaseDrift {
                lease_drift_ticks: self.lease_drift_ticks,
                election_tick: self.election_tick,
            });
        }
        if self.max_inflight_msgs == 0 {
            return Err(ConfigError::MaxInflight);
        }
        Ok(())
    }

    /// The in-flight window of a replicating follower.
    pub(crate) fn window(&self) -> crate::progress::Window {
        crate::progress::Window {
            messages: self.max_inflight_msgs,
            bytes: self.max_inflight_bytes,
        }
    }

    /// The lease a leader holds after a quorum acknowledged a round, in ticks
    /// from when the round was sent.
    #[must_use]
    pub fn lease_ticks(&self) -> u64 {
        self.election_tick - self.lease_drift_ticks
    }
}

/// A small deterministic PRNG (SplitMix64) for the election jitter.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64, id: NodeId) -> SplitMix64 {
        SplitMix64(seed ^ id.0.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; `n > 0`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
