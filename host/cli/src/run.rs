use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use tokio::net::TcpListener;
use tokio::sync::watch;
use wasmraft_grpc::{GrpcTransport, PeerBook};
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
        Some(p) => {
            std::fs::read(p).with_context(|| format!("cannot read plugin {}", p.display()))?
        }
        None => KV_PLUGIN.to_vec(),
    };
    let peers = file.peer_addresses()?;
    file.cluster_id()?; // a malformed cluster_id is an error, not ignored
    let etcd = file.etcd.settings()?;
    let config = file.node_config();
    let tls = match &file.tls {
        Some(t) => Some(Arc::new(
            t.load(args.config.parent().unwrap_or(Path::new(".")))?,
        )),
        None => None,
    };
    let peer_listen = file.peer_listen();
    // The summary lines come once the node runs ("node started",
    // "serving"); the whole configuration only at debug level.
    tracing::debug!(config = ?config, listen = %file.listen, peer_listen = %peer_listen, ?peers, tls = ?tls, "effective configuration");
    tracing::info!(members = ?peers, etcd = ?etcd, "cluster members (peer addresses) and etcd API settings");
    let listeners = Listeners::bind(file.listen, peer_listen).await?;
    // Bound with the others, before the node opens: a port conflict fails
    // the start, and a probe that reaches the client port finds /metrics.
    let metrics = bind_metrics(file.metrics_listen).await?;
    let (stop_tx, stop) = watch::channel(false);
    let faults = wasmraft_grpc::Faults::new(file.fault_injection);
    let server = start(
        config,
        &plugin,
        listeners,
        peers,
        faults,
        tls,
        file.advertise_client.clone(),
        etcd,
        stop.clone(),
    )?;
    if let Some(listener) = metrics {
        serve_metrics(vec![server.node.clone()], listener, stop)?;
    }
    let fatal = tokio::select! {
        _ = shutdown_signal() => None,
        cause = fatal(&server.node) => Some(cause),
    };
    let _ = stop_tx.send(true);
    server.stop().await?;
    match fatal {
        // The cause is the last line, for whoever reads the log of a dead node.
        Some(cause) => Err(anyhow::anyhow!(
            "the node stopped on an unrecoverable failure: {cause}"
        )),
        None => Ok(()),
    }
}

/// Resolves with the cause once `node` is fatal, after a grace period in
/// which clients and peers can still see its status say so (etcd also exits
/// on such failures rather than lingering).
async fn fatal(node: &Node) -> String {
    loop {
        if let Some(cause) = node.status().fatal {
            tracing::error!(cause = %cause, "the node is fatal; exiting in 2 s");
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            return cause;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A node's two listeners: clients, and peers (Raft traffic only).
pub struct Listeners {
    pub client: TcpListener,
    pub peer: TcpListener,
}

impl Listeners {
    pub async fn bind(client: SocketAddr, peer: SocketAddr) -> anyhow::Result<Self> {
        let client = TcpListener::bind(client)
            .await
            .with_context(|| format!("cannot listen for clients on {client}"))?;
        let peer = TcpListener::bind(peer)
            .await
            .with_context(|| format!("cannot listen for peers on {peer}"))?;
        Ok(Self { client, peer })
    }
}

/// A node serving its gRPC APIs.
pub struct Served {
    pub node: Node,
    server: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

impl Served {
    /// Lets the client requests in flight finish, then stops the node. The
    /// server task ends once the client side has drained (the peer side
    /// serves Raft traffic meanwhile; its streams close only as the peers
    /// stop). The drain is bounded: a client's watch stream never ends by
    /// itself.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let result =
            match tokio::time::timeout(std::time::Duration::from_secs(2), &mut self.server).await {
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

/// Starts a node and serves its client APIs and Raft traffic on
/// `listeners` until `stop` turns true. `peers` maps every member (this
/// node too) to its peer address; empty for a single node. The node tells
/// its peers it serves clients at `advertise_client` (default: the client
/// listener's address).
pub fn start(
    config: NodeConfig,
    plugin: &[u8],
    listeners: Listeners,
    peers: BTreeMap<u64, String>,
    faults: wasmraft_grpc::Faults,
    tls: Option<Arc<wasmraft_grpc::TlsSettings>>,
    advertise_client: Option<String>,
    etcd: wasmraft_grpc::etcd::EtcdSettings,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Served> {
    let client_addr = listeners.client.local_addr()?;
    let peer_addr = listeners.peer.local_addr()?;
    if tls.is_none() && (!client_addr.ip().is_loopback() || !peer_addr.ip().is_loopback()) {
        tracing::warn!(
            listen = %client_addr, peer_listen = %peer_addr,
            "listening beyond loopback WITHOUT TLS: anyone who can reach these ports can read and change the \
             cluster's data; configure [tls] (wasmraft certs init writes certificates)"
        );
    }
    let advertised = advertise_client.unwrap_or_else(|| client_addr.to_string());
    let book = PeerBook::new(advertised, peer_addr.to_string(), tls.is_some());
    let dialer = tls.as_ref().map(|t| t.dialer());
    let transport = GrpcTransport::new(
        config.id,
        &peers,
        faults.clone(),
        &tokio::runtime::Handle::current(),
        book.clone(),
        dialer,
    );
    let node =
        tokio::task::block_in_place(|| Node::start_with_transport(config, plugin, transport))
            .context("cannot start the node")?;
    book.cluster_id.store(
        node.cluster_id().unwrap_or(0),
        std::sync::atomic::Ordering::Release,
    );
    tracing::info!(
        id = node.id(),
        cluster_id = %node.cluster_id().map(wasmraft_node::format_cluster_id).unwrap_or_else(|| "(joining: learnt from the first peer)".into()),
        listen = %client_addr, peer_listen = %peer_addr, tls = tls.is_some(),
        "serving"
    );
    let others = peers
        .into_iter()
        .filter(|(id, _)| *id != node.id())
        .collect();
    let serving = wasmraft_grpc::Serving {
        node: node.clone(),
        peers: others,
        faults,
        book,
        tls,
        etcd,
    };
    let server = tokio::spawn(wasmraft_grpc::serve(
        serving,
        listeners.client,
        listeners.peer,
        stop,
    ));
    Ok(Served { node, server })
}

/// The listener for Prometheus metrics and the health probes, if an
/// address is configured.
pub async fn bind_metrics(addr: Option<std::net::SocketAddr>) -> anyhow::Result<Option<TcpListener>> {
    let Some(addr) = addr else { return Ok(None) };
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    Ok(Some(listener))
}

/// Serves Prometheus metrics for `nodes` on `listener` until `stop` turns true.
pub fn serve_metrics(
    nodes: Vec<Node>,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    tracing::info!(address = %listener.local_addr()?, "serving Prometheus metrics at /metrics, and /livez, /readyz, /health");
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    tokio::spawn(wasmraft_grpc::serve_metrics(nodes, listener, shutdown));
    Ok(())
}

pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
}
