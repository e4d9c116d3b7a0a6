use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
use tokio::sync::watch;
use wasmraft_grpc::GrpcTransport;
use wasmraft_node::{KV_PLUGIN, Node, NodeConfig};

use crate::config::FileConfig;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The node's TOML configuration (see examples/single-node.toml and
    /// examples/three-node/).
    #[arg(long, short)]
    pub config: PathBuf,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let file = FileConfig::load(&args.config)?;
    let plugin = match &file.plugin {
        Some(p) => std::fs::read(p).with_context(|| format!("cannot read plugin {}", p.display()))?,
        None => KV_PLUGIN.to_vec(),
    };
    let peers = file.peer_addresses()?;
    let config = file.node_config();
    tracing::info!(config = ?config, listen = %file.listen, ?peers, "effective configuration");
    let listener = TcpListener::bind(file.listen).await.with_context(|| format!("cannot listen on {}", file.listen))?;
    let (stop_tx, stop) = watch::channel(false);
    let server = start(config, &plugin, listener, peers, wasmraft_grpc::Faults::new(file.fault_injection), stop.clone())?;
    if let Some(addr) = file.metrics_listen {
        serve_metrics(vec![server.node.clone()], addr, stop).await?;
    }
    shutdown_signal().await;
    let _ = stop_tx.send(true);
    server.stop().await
}

/// A node serving its gRPC APIs.
pub struct Served {
    pub node: Node,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Served {
    /// Lets the server drain for a moment, then stops the node. The drain
    /// is bounded: peers keep their Raft streams to this node open (they are
    /// running, or draining too), so waiting for every connection to close
    /// would never end.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let result = match tokio::time::timeout(std::time::Duration::from_secs(2), &mut self.server).await {
            Ok(joined) => joined.context("server task")?.context("gRPC server failed"),
            Err(_) => {
                self.server.abort();
                Ok(())
            }
        };
        tracing::info!(id = self.node.id(), "node stopped");
        tokio::task::block_in_place(|| self.node.shutdown());
        result
    }
}

/// Starts a node and serves its client and Raft APIs on `listener` until
/// `stop` turns true. `peers` maps every member (this node too) to its
/// address; empty for a single node.
pub fn start(
    config: NodeConfig,
    plugin: &[u8],
    listener: TcpListener,
    peers: BTreeMap<u64, String>,
    faults: wasmraft_grpc::Faults,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<Served> {
    let transport = GrpcTransport::new(config.id, &peers, faults.clone(), &tokio::runtime::Handle::current());
    let node = tokio::task::block_in_place(|| Node::start_with_transport(config, plugin, transport))
        .context("cannot start the node")?;
    let others = peers.into_iter().filter(|(id, _)| *id != node.id()).collect();
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let server = tokio::spawn(wasmraft_grpc::serve_on(node.clone(), others, faults, listener, shutdown));
    Ok(Served { node, server })
}

/// Serves Prometheus metrics for `nodes` on `addr` until `stop` turns true.
pub async fn serve_metrics(nodes: Vec<Node>, addr: std::net::SocketAddr, mut stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    let listener = TcpListener::bind(addr).await.with_context(|| format!("cannot listen for metrics on {addr}"))?;
    tracing::info!(address = %listener.local_addr()?, "serving Prometheus metrics at /metrics");
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::spawn(wasmraft_grpc::serve_metrics(nodes, listener, shutdown));
    Ok(())
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
