use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::sync::watch;
use wasmraft_node::{KV_PLUGIN, NodeConfig};

#[derive(Args, Debug)]
pub struct DevArgs {
    /// Keep state here (a restart finds it again) instead of a temporary
    /// directory that is removed on exit. Node N keeps its data in DIR/node-N.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The first node's address; the others take the next ports (port 0:
    /// any free ports).
    #[arg(long, default_value = "127.0.0.1:7379")]
    pub listen: SocketAddr,
    /// How many nodes.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=7))]
    pub nodes: u64,
    /// Run this plugin (`.wasm` component, or a core module built with
    /// wasmraft-sdk) instead of the built-in KV plugin.
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// Serve Prometheus metrics of every node on http://ADDRESS/metrics.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Mutual TLS on every port, with throwaway certificates from `wasmraft
    /// certs init` (in DATA_DIR/certs): clients need a certificate, and
    /// only `admin.pem` may administer.
    #[arg(long)]
    pub tls: bool,
}

/// Runs the cluster until Ctrl-C or SIGTERM. Returns the temporary data
/// directory, if it made one, for the caller to remove once the runtime has
/// stopped: tasks that end with the runtime still hold the nodes' storage,
/// and removing the directory under an open RocksDB left most of it behind.
pub async fn dev(args: DevArgs) -> anyhow::Result<Option<tempfile::TempDir>> {
    let mut temp = None;
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => temp.insert(tempfile::Builder::new().prefix("wasmraft-dev-").tempdir()?).path().to_path_buf(),
    };
    let plugin = match &args.plugin {
        Some(p) => {
            std::fs::read(p).with_context(|| format!("cannot read plugin {}", p.display()))?
        }
        None => KV_PLUGIN.to_vec(),
    };

    let tls = if args.tls {
        Some(dev_certs(&data_dir.join("certs"), args.nodes)?)
    } else {
        None
    };

    // Bind every listener first, so that port 0 works and peers know each
    // other's real addresses. Peers listen 100 ports above clients.
    let mut listeners = Vec::new();
    let mut peers = BTreeMap::new();
    let mut clients = Vec::new();
    for i in 0..args.nodes {
        let port = |offset: u16| {
            if args.listen.port() == 0 {
                0
            } else {
                args.listen.port() + offset + i as u16
            }
        };
        let l = crate::run::Listeners::bind(
            SocketAddr::new(args.listen.ip(), port(0)),
            SocketAddr::new(args.listen.ip(), port(100)),
        )
        .await?;
        peers.insert(i + 1, l.peer.local_addr()?.to_string());
        clients.push(l.client.local_addr()?.to_string());
        listeners.push(l);
    }
    let metrics = crate::run::bind_metrics(args.metrics_listen).await?;
    // One cluster id per data directory: a restart finds its own.
    let cluster_id = wasmraft_node::derive_cluster_id(&format!("dev {}", data_dir.display()), &BTreeMap::new());

    let (stop_tx, stop) = watch::channel(false);
    let mut served = Vec::new();
    for (i, listeners) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let config = NodeConfig {
            id,
            data_dir: data_dir.join(format!("node-{id}")),
            // Short ticks so that a local cluster elects within a second.
            tick_interval: Duration::from_millis(50),
            bootstrap_voters: peers.keys().copied().collect(),
            cluster_id,
            ..NodeConfig::default()
        };
        let node_tls = match &tls {
            Some((set, settings)) => {
                let (cert, key) = &set.nodes[i];
                let read = |p: &Path| {
                    std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))
                };
                let node = wasmraft_grpc::TlsSettings {
                    cert_pem: read(cert)?,
                    key_pem: read(key)?,
                    ..settings.clone()
                };
                node.validate()?;
                Some(Arc::new(node))
            }
            None => None,
        };
        let faults = wasmraft_grpc::Faults::new(false);
        served.push(crate::run::start(
            config,
            &plugin,
            listeners,
            peers.clone(),
            faults,
            node_tls,
            None,
            wasmraft_grpc::etcd::EtcdSettings::default(),
            stop.clone(),
        )?);
    }
    let leader = served[0]
        .node
        .wait_for_leader()
        .await
        .context("the cluster did not elect a leader")?;
    if let Some(listener) = metrics {
        crate::run::serve_metrics(
            served.iter().map(|s| s.node.clone()).collect(),
            listener,
            stop.clone(),
        )?;
    }

    let plugin_name = if args.plugin.is_some() {
        "custom"
    } else {
        "kv (built in)"
    };
    println!(
        "wasmraft dev: {} node(s) ready, plugin {plugin_name}, leader node {leader}",
        args.nodes
    );
    println!("  endpoints: {}", clients.join(","));
    println!(
        "  peers:     {}",
        peers.values().cloned().collect::<Vec<_>>().join(",")
    );
    println!(
        "  cluster:   {}",
        wasmraft_node::format_cluster_id(cluster_id)
    );
    println!("  data:      {}", data_dir.display());
    if let Some(addr) = args.metrics_listen {
        println!("  metrics:   http://{addr}/metrics");
    }
    if let Some((set, _)) = &tls {
        println!(
            "  tls:       mutual TLS; certificates in {}",
            set.dir.display()
        );
        println!(
            "  client:    export WASMRAFT_CACERT={} WASMRAFT_CERT={} WASMRAFT_KEY={}",
            set.ca.display(),
            set.admin.0.display(),
            set.admin.1.display()
        );
    }
    // The hint works as printed: it names the endpoints unless they are
    // the CLI's default, and fits the plugin running.
    let endpoints = clients.join(",");
    let flag = if endpoints == crate::DEFAULT_ENDPOINTS { String::new() } else { format!(" --endpoints {endpoints}") };
    if args.plugin.is_some() {
        println!("  try:       wasmraft propose{flag} COMMAND && wasmraft query{flag} REQUEST && wasmraft status{flag}");
    } else {
        println!("  try:       wasmraft put{flag} a 1 && wasmraft get{flag} a");
    }
    println!("  stop:      Ctrl-C");

    crate::run::shutdown_signal().await;
    let _ = stop_tx.send(true);
    // Together: no node waits for another's drain.
    let mut stopping = tokio::task::JoinSet::new();
    for s in served {
        stopping.spawn(s.stop());
    }
    let mut result = Ok(());
    while let Some(stopped) = stopping.join_next().await {
        if let Err(e) = stopped.map_err(anyhow::Error::from).and_then(|r| r) {
            result = result.and(Err(e));
        }
    }
    result.map(|()| temp)
}

/// The certificates of a dev cluster: made once per data directory, found
/// again on restart. Clients need a certificate; `wasmraft-admin` (the CN of
/// `admin.pem`) may administer.
fn dev_certs(
    dir: &Path,
    nodes: u64,
) -> anyhow::Result<(crate::certs::CertSet, wasmraft_grpc::TlsSettings)> {
    let set = if dir.join("ca.pem").exists() && dir.join(format!("node-{nodes}.pem")).exists() {
        crate::certs::existing(dir, nodes)?
    } else {
        crate::certs::init(dir, nodes, &[], true)?
    };
    let settings = wasmraft_grpc::TlsSettings {
        cert_pem: Vec::new(),
        key_pem: Vec::new(),
        ca_pem: std::fs::read(&set.ca)?,
        client_ca_pem: Some(std::fs::read(&set.client_ca)?),
        client_cert_auth: true,
        admins: vec![crate::certs::ADMIN_CN.to_string()],
    };
    Ok((set, settings))
}
