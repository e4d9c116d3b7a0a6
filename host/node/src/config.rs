use std::path::PathBuf;
use std::time::Duration;

use wasmraft_runtime::PluginConfig;

/// Everything a node needs to start. Fields are public; `Default` gives a
/// single node with etcd's timing (100 ms heartbeat, 1 s election timeout).
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id (not 0), unique in the cluster.
    pub id: u64,
    /// Where RocksDB keeps the log and the state.
    pub data_dir: PathBuf,
    /// The length of one Raft tick.
    pub tick_interval: Duration,
    /// Election timeout in ticks.
    pub election_ticks: u64,
    /// Heartbeat interval in ticks.
    pub heartbeat_ticks: u64,
    /// Fsync the log before acknowledging writes. Turning it off can lose
    /// acknowledged writes on a crash; only for experiments.
    pub sync_log: bool,
    /// Limits of plugin execution (identical on every replica).
    pub plugin: PluginConfig,
    /// How long a request may wait for commit or a read index.
    pub request_timeout: Duration,
    /// The one limit on what a client sends: the largest command it may
    /// propose or query it may ask, in bytes (default 1.5 MiB, as etcd's
    /// `--max-request-bytes`). Checked before anything enters the log.
    pub max_request_bytes: usize,
    /// The most client requests (proposals and reads) a node holds at once;
    /// more get an immediate `busy` error instead of queueing without bound.
    pub max_pending_requests: usize,
    /// The most bytes of client requests a node holds at once (same).
    pub max_pending_bytes: usize,
    /// A leader refuses proposals (`busy`) while its state machine is this
    /// many entries behind the commit index (as etcd does at 5000).
    pub max_apply_lag: u64,
    /// The most bytes of committed entries handed to the apply thread and
    /// not yet applied (default 64 MiB): a node whose state machine lags
    /// its log leaves the rest in the log instead of queueing it in memory.
    pub max_applying_bytes: u64,
    /// The most bytes of peer messages (entries plus 64 bytes each) that
    /// wait for the Raft loop at once (default 128 MiB); more are dropped,
    /// as a lossy network would, and the leader resends.
    pub max_peer_inbox_bytes: u64,
    /// The largest snapshot this node accepts from a leader, in bytes of
    /// keys and values (default 8 GiB, etcd's largest suggested backend
    /// quota). A snapshot is staged on disk as it arrives, never in memory.
    pub max_snapshot_bytes: u64,
    /// Seed of the election jitter (default: derived from the id).
    pub seed: Option<u64>,
    /// The voters of a new cluster, used once when the data directory is
    /// empty. Empty means a cluster of this node alone.
    pub bootstrap_voters: Vec<u64>,
    /// Take a snapshot and compact the log after this many applied entries
    /// (0: never), or sooner by `snapshot_log_bytes`. etcd's
    /// `--snapshot-count` default: a snapshot flushes every memtable to
    /// disk on the apply thread, which stops applying for that long.
    pub snapshot_entries: u64,
    /// Take a snapshot once the entries applied since the last one (or
    /// since the node started) carry this many bytes of commands, however
    /// few they are: large values do not keep 100,000 entries of log
    /// (0: only `snapshot_entries` counts).
    pub snapshot_log_bytes: u64,
    /// The leader checks that replicas' keyspaces agree every this many
    /// applied entries, or every R / 4 for a state of R records when that
    /// is more (0: only on request).
    pub hash_check_entries: u64,
    /// A large state is hash-checked less often: every R / this entries for
    /// R records when that is more than `hash_check_entries`, so that the
    /// check hashes about this many records per applied entry at most
    /// (0: every `hash_check_entries` whatever the size).
    pub hash_check_records_per_entry: u64,
    /// Where compiled plugins are cached (default: `<data_dir>.plugin-cache`
    /// beside the data directory).
    pub plugin_cache: Option<PathBuf>,
    /// Join an existing cluster (as a learner added through the admin API)
    /// instead of bootstrapping a new one when the data directory is empty.
    pub join: bool,
    /// The cluster's id, carried by every Raft message. A bootstrapping
    /// node fixes it in its data directory (0: a random one); a joining node
    /// given 0 takes the id of the first peer that contacts it. Once fixed,
    /// the stored id wins over this field.
    pub cluster_id: u64,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            id: 1,
            data_dir: PathBuf::from("wasmraft-data"),
            tick_interval: Duration::from_millis(100),
            election_ticks: 10,
            heartbeat_ticks: 1,
            sync_log: true,
            plugin: PluginConfig::default(),
            request_timeout: Duration::from_secs(5),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_pending_requests: 10_000,
            max_pending_bytes: 64 << 20,
            max_apply_lag: 5_000,
            max_snapshot_bytes: DEFAULT_MAX_SNAPSHOT_BYTES,
            max_applying_bytes: 64 << 20,
            max_peer_inbox_bytes: 128 << 20,
            seed: None,
            bootstrap_voters: Vec::new(),
            snapshot_entries: 100_000,
            snapshot_log_bytes: 64 << 20,
            join: false,
            hash_check_entries: 10_000,
            hash_check_records_per_entry: 4,
            plugin_cache: None,
            cluster_id: 0,
        }
    }
}

/// The default of [`NodeConfig::max_snapshot_bytes`].
pub const DEFAULT_MAX_SNAPSHOT_BYTES: u64 = 8 << 30;

/// etcd's default `--max-request-bytes`.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1536 << 10;

/// Room a plugin's store limits leave above the request limit, for what a
/// plugin adds to a request's key or value (prefixes, metadata).
pub const STORE_HEADROOM_BYTES: usize = 64 << 10;

impl NodeConfig {
    /// Sets the request limit and the plugin store limits that follow from
    /// it, so that no request within the limit can trap on a store limit.
    pub fn set_max_request_bytes(&mut self, bytes: usize) {
        self.max_request_bytes = bytes;
        self.plugin.max_key_bytes = bytes.saturating_add(STORE_HEADROOM_BYTES);
        self.plugin.max_value_bytes = bytes.saturating_add(STORE_HEADROOM_BYTES);
    }

    /// Where compiled plugins are cached.
    pub fn plugin_cache_dir(&self) -> PathBuf {
        self.plugin_cache.clone().unwrap_or_else(|| {
            let mut dir = self.data_dir.clone().into_os_string();
            dir.push(".plugin-cache");
            PathBuf::from(dir)
        })
    }

    /// Checks the values make sense together.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("id must not be 0".into());
        }
        if self.tick_interval.is_zero() {
            return Err("tick_interval must be positive".into());
        }
        if self.heartbeat_ticks == 0 || self.election_ticks <= self.heartbeat_ticks {
            return Err(
                "election_ticks must be greater than heartbeat_ticks, which must be positive"
                    .into(),
            );
        }
        if self.max_pending_requests == 0 || self.max_apply_lag == 0 {
            return Err("max_pending_requests and max_apply_lag must be positive".into());
        }
        if self.max_pending_bytes < self.max_request_bytes || self.max_pending_bytes > u32::MAX as usize {
            return Err("max_pending_bytes must be at least max_request_bytes and below 4 GiB".into());
        }
        if self.max_request_bytes == 0 {
            return Err("max_request_bytes must be positive".into());
        }
        if self.max_snapshot_bytes == 0 || self.max_applying_bytes == 0 {
            return Err("max_snapshot_bytes and max_applying_bytes must be positive".into());
        }
        // The largest entry a leader sends must fit, or it could never arrive.
        if self.max_peer_inbox_bytes < 2 * (self.max_request_bytes as u64 + (64 << 10)) {
            return Err("max_peer_inbox_bytes must hold two of the largest requests".into());
        }
        // A request within the limit must never fail later on a store limit
        // (a trap after it took a log index): the store limits sit above it.
        let store = self.plugin.max_key_bytes.min(self.plugin.max_value_bytes);
        if store < self.max_request_bytes {
            return Err(format!(
                "the plugin store limits (max_key_bytes, max_value_bytes) must be at least \
                 max_request_bytes ({}); use NodeConfig::set_max_request_bytes",
                self.max_request_bytes
            ));
        }
        self.plugin.validate()
    }
}

/// A cluster id derived from the initial members and a token, the same on
/// every node started with the same `[peers]` (as etcd derives its cluster
/// id from `--initial-cluster` and `--initial-cluster-token`). Never 0.
pub fn derive_cluster_id(token: &str, members: &std::collections::BTreeMap<u64, String>) -> u64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(token.as_bytes());
    for (id, address) in members {
        h.update([0]);
        h.update(id.to_be_bytes());
        h.update(address.as_bytes());
    }
    let digest = h.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")).max(1)
}
