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
    /// The peer (Raft) address: only Raft messages and snapshots are served
    /// here. Default: `listen`'s IP, port + 100 (7479 for 7379).
    #[serde(default)]
    pub peer_listen: Option<SocketAddr>,
    /// The client address this node tells its peers (shown by `members`,
    /// used by followers forwarding to it). Default: `listen`; set it when
    /// `listen` is a wildcard address such as 0.0.0.0.
    #[serde(default)]
    pub advertise_client: Option<String>,
    /// Mixed into the cluster id derived from `[peers]`, so that two
    /// clusters with the same members never accept each other's traffic.
    #[serde(default)]
    pub cluster_token: Option<String>,
    /// The cluster id (16 hex digits) a joining node expects; without it,
    /// the node takes the id of the first peer that contacts it.
    #[serde(default)]
    pub cluster_id: Option<String>,
    /// A plugin `.wasm` to run instead of the built-in KV plugin.
    #[serde(default)]
    pub plugin: Option<PathBuf>,
    /// Every member of the initial cluster, this node included: id ->
    /// peer `host:port`. Empty: a cluster of this node alone.
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
    #[serde(default)]
    pub etcd: EtcdSection,
    /// TLS on both listeners; off without this section.
    #[serde(default)]
    pub tls: Option<TlsSection>,
}

/// `[tls]`: file paths of PEM files, and the client port's policy. The
/// peer port always requires a certificate signed by `ca` (mutual TLS).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// This node's certificate, served on both ports and presented to peers.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// The cluster CA: signs node certificates.
    pub ca: PathBuf,
    /// The CA that signs client certificates (default: `ca`).
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
    /// Require a client certificate on the client port.
    #[serde(default)]
    pub client_cert_auth: bool,
    /// Common names of client certificates that may administer the cluster
    /// (deploy, membership, leader transfer, hash checks, fault injection).
    #[serde(default)]
    pub admins: Vec<String>,
}

impl TlsSection {
    /// Reads every file; relative paths are relative to `base`.
    pub fn load(&self, base: &Path) -> anyhow::Result<wasmraft_grpc::TlsSettings> {
        let read = |p: &Path| {
            let p = base.join(p);
            std::fs::read(&p).with_context(|| format!("[tls]: cannot read {}", p.display()))
        };
        let settings = wasmraft_grpc::TlsSettings {
            cert_pem: read(&self.cert)?,
            key_pem: read(&self.key)?,
            ca_pem: read(&self.ca)?,
            client_ca_pem: self.client_ca.as_deref().map(read).transpose()?,
            client_cert_auth: self.client_cert_auth,
            admins: self.admins.clone(),
        };
        settings.validate()?;
        if self.client_cert_auth && self.admins.is_empty() {
            tracing::warn!(
                "[tls] client_cert_auth is on but admins is empty: nobody can administer the cluster"
            );
        }
        Ok(settings)
    }
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
    /// Or once the commands applied since the last snapshot carry this many
    /// bytes (0: entries alone count).
    pub snapshot_log_bytes: u64,
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
            snapshot_log_bytes: d.snapshot_log_bytes,
            hash_check_entries: d.hash_check_entries,
        }
    }
}

/// etcd's API over the KV plugin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EtcdSection {
    /// `periodic` or `revision`, as etcd's `--auto-compaction-mode`.
    pub auto_compaction_mode: String,
    /// As etcd's `--auto-compaction-retention`: a duration such as `1h`,
    /// `30m` or `90s` (periodic), or a count of revisions (revision); `0`
    /// keeps every revision until a client compacts.
    pub auto_compaction_retention: String,
    /// How often a quiet watcher that asked for progress notifications
    /// gets one, such as `10m` or `500ms`.
    pub watch_progress_notify_interval: String,
    /// The store size in bytes past which the member raises the NOSPACE
    /// alarm (etcd's `--quota-backend-bytes`).
    pub quota_backend_bytes: u64,
}

impl Default for EtcdSection {
    fn default() -> Self {
        let d = wasmraft_grpc::etcd::EtcdSettings::default();
        Self {
            auto_compaction_mode: "periodic".into(),
            auto_compaction_retention: "1h".into(),
            watch_progress_notify_interval: format!("{}s", d.progress_notify_interval.as_secs()),
            quota_backend_bytes: d.quota_backend_bytes,
        }
    }
}

impl EtcdSection {
    pub fn settings(&self) -> anyhow::Result<wasmraft_grpc::etcd::EtcdSettings> {
        use wasmraft_grpc::etcd::{AutoCompaction, parse_duration};
        let auto_compaction = AutoCompaction::parse(&self.auto_compaction_mode, &self.auto_compaction_retention)
            .map_err(|e| anyhow::anyhow!("[etcd] {e}"))?;
        let progress_notify_interval = parse_duration(&self.watch_progress_notify_interval)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "[etcd] watch_progress_notify_interval {:?}: expected a duration such as 10m or 500ms",
                    self.watch_progress_notify_interval
                )
            })?;
        anyhow::ensure!(self.quota_backend_bytes > 0, "[etcd] quota_backend_bytes must be positive");
        Ok(wasmraft_grpc::etcd::EtcdSettings {
            auto_compaction,
            progress_notify_interval,
            quota_backend_bytes: self.quota_backend_bytes,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsSection {
    pub fuel_per_entry: u64,
    pub memory_limit_bytes: usize,
    pub max_wasm_stack_bytes: usize,
    pub query_instances: usize,
    pub watchdog_ms: u64,
    pub request_timeout_ms: u64,
    /// The one client limit; the plugin store limits follow from it.
    #[serde(alias = "max_command_bytes")]
    pub max_request_bytes: usize,
    pub max_pending_requests: usize,
    pub max_pending_bytes: usize,
    pub max_apply_lag: u64,
    /// The largest snapshot accepted from a leader (staged on disk).
    pub max_snapshot_bytes: u64,
}

impl Default for LimitsSection {
    fn default() -> Self {
        let n = NodeConfig::default();
        let p = PluginConfig::default();
        Self {
            fuel_per_entry: p.fuel_per_entry,
            memory_limit_bytes: p.memory_limit_bytes,
            max_wasm_stack_bytes: p.max_wasm_stack_bytes,
            query_instances: p.query_instances,
            watchdog_ms: p.watchdog_ms,
            request_timeout_ms: n.request_timeout.as_millis() as u64,
            max_request_bytes: n.max_request_bytes,
            max_pending_requests: n.max_pending_requests,
            max_pending_bytes: n.max_pending_bytes,
            max_apply_lag: n.max_apply_lag,
            max_snapshot_bytes: n.max_snapshot_bytes,
        }
    }
}

impl FileConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("invalid configuration {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        Ok(toml::from_str(text)?)
    }

    /// The peer address: `peer_listen`, or `listen`'s IP at port + 100.
    pub fn peer_listen(&self) -> SocketAddr {
        self.peer_listen.unwrap_or_else(|| {
            let port = if self.listen.port() == 0 {
                0
            } else {
                self.listen.port().saturating_add(100)
            };
            SocketAddr::new(self.listen.ip(), port)
        })
    }

    /// The cluster id to bootstrap with, or to expect when joining (0:
    /// learn it from the first peer).
    pub fn cluster_id(&self) -> anyhow::Result<u64> {
        if let Some(id) = &self.cluster_id {
            let id = u64::from_str_radix(id.trim(), 16)
                .with_context(|| format!("cluster_id {id:?} is not 16 hex digits"))?;
            anyhow::ensure!(id != 0, "cluster_id 0 is not allowed");
            return Ok(id);
        }
        let peers = self.peer_addresses()?;
        if self.join || peers.is_empty() {
            return Ok(0);
        }
        Ok(wasmraft_node::derive_cluster_id(
            self.cluster_token.as_deref().unwrap_or("wasmraft"),
            &peers,
        ))
    }

    /// The peers table with numeric ids.
    pub fn peer_addresses(&self) -> anyhow::Result<BTreeMap<u64, String>> {
        let mut out = BTreeMap::new();
        for (id, addr) in &self.peers {
            let n: u64 = id
                .parse()
                .with_context(|| format!("peer id {id:?} is not a number"))?;
            anyhow::ensure!(n != 0, "peer id 0 is not allowed");
            check_peer_address(n, addr)?;
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
        let mut config = NodeConfig {
            bootstrap_voters: self
                .peer_addresses()
                .map(|p| p.keys().copied().collect())
                .unwrap_or_default(),
            join: self.join,
            id: self.id,
            data_dir: self.data_dir.clone(),
            tick_interval: Duration::from_millis(self.raft.tick_ms),
            election_ticks: self.raft.election_ticks,
            heartbeat_ticks: self.raft.heartbeat_ticks,
            snapshot_entries: self.raft.snapshot_entries,
            snapshot_log_bytes: self.raft.snapshot_log_bytes,
            hash_check_entries: self.raft.hash_check_entries,
            sync_log: self.sync_log,
            plugin: PluginConfig {
                fuel_per_entry: self.limits.fuel_per_entry,
                memory_limit_bytes: self.limits.memory_limit_bytes,
                max_wasm_stack_bytes: self.limits.max_wasm_stack_bytes,
                query_instances: self.limits.query_instances,
                watchdog_ms: self.limits.watchdog_ms,
                ..PluginConfig::default()
            },
            request_timeout: Duration::from_millis(self.limits.request_timeout_ms),
            max_pending_requests: self.limits.max_pending_requests,
            max_pending_bytes: self.limits.max_pending_bytes,
            max_apply_lag: self.limits.max_apply_lag,
            max_snapshot_bytes: self.limits.max_snapshot_bytes,
            cluster_id: self.cluster_id().unwrap_or(0),
            ..NodeConfig::default()
        };
        config.set_max_request_bytes(self.limits.max_request_bytes);
        config
    }
}

/// A `[peers]` address is `HOST:PORT`: refused at start rather than
/// failing every connection at run time.
fn check_peer_address(id: u64, addr: &str) -> anyhow::Result<()> {
    wasmraft_grpc::check_peer_address(addr).map_err(|why| {
        anyhow::anyhow!("[peers] {id} = {addr:?}: expected HOST:PORT, such as \"127.0.0.1:7480\" or \"node-2.example:7480\": {why}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_addresses_must_be_host_and_port() {
        let with = |addr: &str| FileConfig::parse(&format!("id = 1\ndata_dir = \"d\"\n[peers]\n1 = \"{addr}\"\n")).unwrap().peer_addresses();
        for good in ["127.0.0.1:7480", "node-2.example:7480", "[::1]:7480", "localhost:1"] {
            assert!(with(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("127.0.0.1", "the port is missing"),
            ("127.0.0.1:0", "is not a port"),
            ("127.0.0.1:99999", "is not a port"),
            ("http://127.0.0.1:7480", "without a scheme"),
            (":7480", "is not a host name"),
            ("no spaces:7480", "is not a host name"),
        ] {
            let err = format!("{:#}", with(bad).unwrap_err());
            assert!(err.contains(why) && err.contains("expected HOST:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn minimal_file_gets_the_library_defaults() {
        let c = FileConfig::parse("id = 3\ndata_dir = \"d\"\n").unwrap();
        let n = c.node_config();
        assert_eq!(n.id, 3);
        assert_eq!(n.election_ticks, NodeConfig::default().election_ticks);
        assert_eq!(n.plugin, PluginConfig::default());
        assert_eq!(c.listen, default_listen());
        assert_eq!(c.peer_listen().port(), 7479);
        assert!(c.tls.is_none());
    }

    #[test]
    fn the_cluster_id_follows_peers_and_token_and_a_pinned_one_wins() {
        let base = "id = 1\ndata_dir = \"d\"\n";
        let peers = "[peers]\n1 = \"a:1\"\n2 = \"a:2\"\n";
        let a = FileConfig::parse(&format!("{base}{peers}"))
            .unwrap()
            .cluster_id()
            .unwrap();
        let b = FileConfig::parse(&format!("{base}cluster_token = \"other\"\n{peers}"))
            .unwrap()
            .cluster_id()
            .unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b, "the token changes the id");
        let pinned =
            FileConfig::parse(&format!("{base}cluster_id = \"00000000000000ab\"\n{peers}"))
                .unwrap();
        assert_eq!(pinned.cluster_id().unwrap(), 0xab);
        let joiner = FileConfig::parse(&format!("{base}join = true\n{peers}")).unwrap();
        assert_eq!(
            joiner.cluster_id().unwrap(),
            0,
            "a joiner learns the id from its cluster"
        );
        assert!(
            FileConfig::parse(&format!("{base}cluster_id = \"xyz\"\n"))
                .unwrap()
                .cluster_id()
                .is_err()
        );
    }

    #[test]
    fn a_tls_section_needs_cert_key_and_ca_and_refuses_unknown_keys() {
        let c = FileConfig::parse("id = 1\ndata_dir = \"d\"\n[tls]\ncert = \"c\"\nkey = \"k\"\nca = \"a\"\nclient_cert_auth = true\nadmins = [\"ops\"]\n").unwrap();
        let tls = c.tls.unwrap();
        assert!(tls.client_cert_auth);
        assert_eq!(tls.admins, vec!["ops".to_string()]);
        assert!(
            FileConfig::parse("id = 1\ndata_dir = \"d\"\n[tls]\ncert = \"c\"\nkey = \"k\"\n")
                .is_err()
        );
        assert!(FileConfig::parse("id = 1\ndata_dir = \"d\"\n[tls]\ncert = \"c\"\nkey = \"k\"\nca = \"a\"\nverify = 1\n").is_err());
    }

    #[test]
    fn peers_become_the_bootstrap_voters() {
        let c = FileConfig::parse(
            "id = 2\ndata_dir = \"d\"\n[peers]\n1 = \"a:1\"\n2 = \"a:2\"\n3 = \"a:3\"\n",
        )
        .unwrap();
        assert_eq!(c.node_config().bootstrap_voters, vec![1, 2, 3]);
        let c = FileConfig::parse("id = 4\ndata_dir = \"d\"\n[peers]\n1 = \"a:1\"\n").unwrap();
        assert!(
            c.peer_addresses()
                .unwrap_err()
                .to_string()
                .contains("must list this node (4)")
        );
    }

    #[test]
    fn unknown_keys_are_errors_that_name_the_key() {
        let err = FileConfig::parse("id = 1\ndata_dir = \"d\"\nelection = 5\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `election`"),
            "{err:#}"
        );
        let err = FileConfig::parse("id = 1\ndata_dir = \"d\"\n[raft]\ntick = 5\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `tick`"),
            "{err:#}"
        );
    }
}
