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
    /// The largest command a client may propose.
    pub max_command_bytes: usize,
    /// Seed of the election jitter (default: derived from the id).
    pub seed: Option<u64>,
    /// The voters of a new cluster, used once when the data directory is
    /// empty. Empty means a cluster of this node alone.
    pub bootstrap_voters: Vec<u64>,
    /// Take a snapshot and compact the log after this many applied entries
    /// (0: never).
    pub snapshot_entries: u64,
    /// The leader checks that replicas' keyspaces agree every this many
    /// applied entries (0: only on request).
    pub hash_check_entries: u64,
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
            max_command_bytes: 2 << 20,
            seed: None,
            bootstrap_voters: Vec::new(),
            snapshot_entries: 10_000,
            join: false,
            hash_check_entries: 10_000,
            plugin_cache: None,
            cluster_id: 0,
        }
    }
}

impl NodeConfig {
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
        if self.max_command_bytes == 0 {
            return Err("max_command_bytes must be positive".into());
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
