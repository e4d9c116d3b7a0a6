//! The node's TOML configuration file. Unknown keys are errors; every key
//! has a default taken from the library's own defaults.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use wasmraft_node::{NodeConfig, PluginConfig};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// This node's id (not 0).
    pub id: u64,
    /// Where the node keeps its data.
    pub data_dir: PathBuf,
    /// The client API address.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// A plugin `.wasm` to run instead of the built-in KV plugin.
    #[serde(default)]
    pub plugin: Option<PathBuf>,
    /// Every member of the initial cluster, this node included: id ->
    /// `host:port`. Empty: a cluster of this node alone.
    #[serde(default)]
    pub peers: BTreeMap<String, String>,
    /// Fsync the log before acknowledging writes.
    #[serde(default = "default_sync_log")]
    pub sync_log: bool,
    /// Join an existing cluster (added with `wasmraft member add-learner`)
    /// instead of bootstrapping one from `[peers]`.
    #[serde(default)]
    pub join: bool,
    /// Allow the admin API's fault injection calls (partition and divergence
    /// tests). Never in production.
    #[serde(default)]
    pub fault_injection: bool,
    /// Serve Prometheus metrics on `http://ADDRESS/metrics`.
    #[serde(default)]
    pub metrics_listen: Option<SocketAddr>,
    #[serde(default)]
    pub raft: RaftSection,
    #[serde(default)]
    pub limits: LimitsSection,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7379))
}

fn default_sync_log() -> bool {
    NodeConfig::default().sync_log
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RaftSection {
    pub tick_ms: u64,
    pub election_ticks: u64,
    pub heartbeat_ticks: u64,
    /// Snapshot and compact the log after this many applied entries (0: never).
    pub snapshot_entries: u64,
    /// Compare replicas' keyspace hashes every this many applied entries
    /// (0: only with `wasmraft check`).
    pub hash_check_entries: u64,
}

impl Default for RaftSection {
    fn default() -> Self {
        let d = NodeConfig::default();
        Self {
            tick_ms: d.tick_interval.as_millis() as u64,
            election_ticks: d.election_ticks,
            heartbeat_ticks: d.heartbeat_ticks,
            snapshot_entries: d.snapshot_entries,
            hash_check_entries: d.hash_check_entries,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub fuel_per_entry: u64,
    pub memory_limit_bytes: usize,
    pub max_wasm_stack_bytes: usize,
    pub max_key_bytes: usize,
    pub max_value_bytes: usize,
    pub query_instances: usize,
    pub watchdog_ms: u64,
    pub request_timeout_ms: u64,
    pub max_command_bytes: usize,
}

impl Default for LimitsSection {
    fn default() -> Self {
        let n = NodeConfig::default();
        let p = PluginConfig::default();
        Self {
            fuel_per_entry: p.fuel_per_entry,
            memory_limit_bytes: p.memory_limit_bytes,
            max_wasm_stack_bytes: p.max_wasm_stack_bytes,
            max_key_bytes: p.max_key_bytes,
            max_value_bytes: p.max_value_bytes,
            query_instances: p.query_instances,
            watchdog_ms: p.watchdog_ms,
            request_timeout_ms: n.request_timeout.as_millis() as u64,
            max_command_bytes: n.max_command_bytes,
        }
    }
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid configuration {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        Ok(toml::from_str(text)?)
    }

    /// The peers table with numeric ids.
    pub fn peer_addresses(&self) -> anyhow::Result<BTreeMap<u64, String>> {
        let mut out = BTreeMap::new();
        for (id, addr) in &self.peers {
            let n: u64 = id.parse().with_context(|| format!("peer id {id:?} is not a number"))?;
            anyhow::ensure!(n != 0, "peer id 0 is not allowed");
            out.insert(n, addr.clone());
        }
        anyhow::ensure!(
            out.is_empty() || out.contains_key(&self.id),
            "[peers] must list this node ({}) too",
            self.id
        );
        Ok(out)
    }

    pub fn node_config(&self) -> NodeConfig {
        NodeConfig {
            bootstrap_voters: self.peer_addresses().map(|p| p.keys().copied().collect()).unwrap_or_default(),
            join: self.join,
            id: self.id,
            data_dir: self.data_dir.clone(),
            tick_interval: Duration::from_millis(self.raft.tick_ms),
            election_ticks: self.raft.election_ticks,
            heartbeat_ticks: self.raft.heartbeat_ticks,
            snapshot_entries: self.raft.snapshot_entries,
            hash_check_entries: self.raft.hash_check_entries,
            sync_log: self.sync_log,
            plugin: PluginConfig {
                fuel_per_entry: self.limits.fuel_per_entry,
                memory_limit_bytes: self.limits.memory_limit_bytes,
                max_wasm_stack_bytes: self.limits.max_wasm_stack_bytes,
                max_key_bytes: self.limits.max_key_bytes,
                max_value_bytes: self.limits.max_value_bytes,
                query_instances: self.limits.query_instances,
                watchdog_ms: self.limits.watchdog_ms,
            },
            request_timeout: Duration::from_millis(self.limits.request_timeout_ms),
            max_command_bytes: self.limits.max_command_bytes,
            ..NodeConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_file_gets_the_library_defaults() {
        let c = FileConfig::parse("id = 3\ndata_dir = \"d\"\n").unwrap();
        let n = c.node_config();
        assert_eq!(n.id, 3);
        assert_eq!(n.election_ticks, NodeConfig::default().election_ticks);
        assert_eq!(n.plugin, PluginConfig::default());
        assert_eq!(c.listen, default_listen());
    }

    #[test]
    fn peers_become_the_bootstrap_voters() {
        let c = FileConfig::parse("id = 2\ndata_dir = \"d\"\n[peers]\n1 = \"a:1\"\n2 = \"a:2\"\n3 = \"a:3\"\n").unwrap();
        assert_eq!(c.node_config().bootstrap_voters, vec![1, 2, 3]);
        let c = FileConfig::parse("id = 4\ndata_dir = \"d\"\n[peers]\n1 = \"a:1\"\n").unwrap();
        assert!(c.peer_addresses().unwrap_err().to_string().contains("must list this node (4)"));
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        let err = FileConfig::parse("id = 1\ndata_dir = \"d\"\nelection = 5\n").unwrap_err();
        assert!(format!("{err:#}").contains("unknown field `election`"), "{err:#}");
        let err = FileConfig::parse("id = 1\ndata_dir = \"d\"\n[raft]\ntick = 5\n").unwrap_err();
        assert!(format!("{err:#}").contains("unknown field `tick`"), "{err:#}");
    }
}
