use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
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
}

pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let temp;
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("wasmraft-dev-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let plugin = match &args.plugin {
        Some(p) => std::fs::read(p).with_context(|| format!("cannot read plugin {}", p.display()))?,
        None => KV_PLUGIN.to_vec(),
    };

    // Bind every listener first, so that port 0 works and peers know each
    // other's real addresses.
    let mut listeners = Vec::new();
    let mut peers = BTreeMap::new();
    for i in 0..args.nodes {
        let port = if args.listen.port() == 0 { 0 } else { args.listen.port() + i as u16 };
        let addr = SocketAddr::new(args.listen.ip(), port);
        let l = TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        peers.insert(i + 1, l.local_addr()?.to_string());
        listeners.push(l);
    }

    let (stop_tx, stop) = watch::channel(false);
    let mut served = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let id = i as u64 + 1;
        let config = NodeConfig {
            id,
            data_dir: data_dir.join(format!("node-{id}")),
            // Short ticks so that a local cluster elects within a second.
            tick_interval: Duration::from_millis(50),
            bootstrap_voters: peers.keys().copied().collect(),
            ..NodeConfig::default()
        };
        served.push(crate::run::start(config, &plugin, listener, peers.clone(), wasmraft_grpc::Faults::new(false), stop.clone())?);
    }
    let leader = served[0].node.wait_for_leader().await.context("the cluster did not elect a leader")?;
    if let Some(addr) = args.metrics_listen {
        crate::run::serve_metrics(served.iter().map(|s| s.node.clone()).collect(), addr, stop.clone()).await?;
    }

    let endpoints: Vec<&str> = peers.values().map(String::as_str).collect();
    let plugin_name = if args.plugin.is_some() { "custom" } else { "kv (built in)" };
    println!("wasmraft dev: {} node(s) ready, plugin {plugin_name}, leader node {leader}", args.nodes);
    println!("  endpoints: {}", endpoints.join(","));
    println!("  data:      {}", data_dir.display());
    if let Some(addr) = args.metrics_listen {
        println!("  metrics:   http://{addr}/metrics");
    }
    println!("  try:       wasmraft put a 1 && wasmraft get a");
    println!("  stop:      Ctrl-C");

    crate::run::shutdown_signal().await;
    let _ = stop_tx.send(true);
    for s in served {
        s.stop().await?;
    }
    Ok(())
}
