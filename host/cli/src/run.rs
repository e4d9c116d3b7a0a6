use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use wasmraft_node::{KV_PLUGIN, Node, NodeConfig};

use crate::config::FileConfig;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The node's TOML configuration (see examples/single-node.toml).
    #[arg(long, short)]
    pub config: PathBuf,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let file = FileConfig::load(&args.config)?;
    let plugin = match &file.plugin {
        Some(p) => std::fs::read(p).with_context(|| format!("cannot read plugin {}", p.display()))?,
        None => KV_PLUGIN.to_vec(),
    };
    let config = file.node_config();
    tracing::info!(config = ?config, listen = %file.listen, "effective configuration");
    serve(config, &plugin, file.listen, |_| {}).await
}

/// Starts a node and serves its client API until Ctrl-C or SIGTERM.
pub async fn serve(
    config: NodeConfig,
    plugin: &[u8],
    listen: SocketAddr,
    on_ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    let addr = listener.local_addr()?;
    let node = tokio::task::block_in_place(|| Node::start(config, plugin)).context("cannot start the node")?;
    node.wait_for_leader().await.context("the node did not elect a leader")?;
    on_ready(addr);
    let server = wasmraft_grpc::serve_on(node.clone(), listener, shutdown_signal());
    let result = server.await.context("gRPC server failed");
    tracing::info!("shutting down");
    tokio::task::block_in_place(|| node.shutdown());
    result
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}
