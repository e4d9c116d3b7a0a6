//! gRPC for Wasmraft: the `wasmraft.v1` client service over a [`Node`],
//! etcd's v3 KV service over the KV plugin ([`etcd`]), the Raft peer
//! service, and [`GrpcTransport`], which carries Raft messages
//! between nodes.
#![deny(missing_docs)]

mod address;
mod admin_service;
pub mod auth;
mod client_service;
mod coalesce;
pub mod etcd;
mod health;
mod faults;
mod forward;
mod grpc_metrics;
mod lane;
mod metrics;
pub mod peer;
mod plugin_service;
mod raft_service;
mod safe_channel;
mod status;
pub mod tls;
mod transport;

pub use address::check_peer_address;
pub use admin_service::AdminService;
pub use auth::Admins;
pub use client_service::ClientService;
pub use faults::Faults;
pub use forward::Forwarder;
pub use lane::{Budget, Budgets, LaneKind, LaneStats, stats as lane_stats};
pub use metrics::serve_metrics;
pub use peer::PeerBook;
pub use plugin_service::PluginService;
pub use raft_service::RaftService;
pub use status::to_status;
pub use tls::TlsSettings;
pub use transport::GrpcTransport;

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::Instrument;
use wasmraft_node::Node;
use wasmraft_proto::etcdserverpb::cluster_server::ClusterServer;
use wasmraft_proto::etcdserverpb::kv_server::KvServer;
use wasmraft_proto::etcdserverpb::lease_server::LeaseServer;
use wasmraft_proto::v3electionpb::election_server::ElectionServer;
use wasmraft_proto::v3lockpb::lock_server::LockServer;
use wasmraft_proto::etcdserverpb::maintenance_server::MaintenanceServer;
use wasmraft_proto::etcdserverpb::watch_server::WatchServer;
use wasmraft_proto::v1::admin_server::AdminServer;
use wasmraft_proto::v1::client_server::ClientServer;
use wasmraft_proto::v1::membership_changes_server::MembershipChangesServer;
use wasmraft_proto::v1::plugins_server::PluginsServer;
use wasmraft_proto::v1::raft_server::RaftServer;

/// What the servers of one node share.
#[derive(Clone, Debug)]
pub struct Serving {
    /// The node served.
    pub node: Node,
    /// The other members' peer addresses from the configuration.
    pub peers: BTreeMap<u64, String>,
    /// Test-only fault injection.
    pub faults: Faults,
    /// Cluster identity and advertised addresses.
    pub book: Arc<PeerBook>,
    /// TLS on both listeners, if configured.
    pub tls: Option<Arc<TlsSettings>>,
    /// How etcd's API is served (history kept, progress notifications,
    /// space quota).
    pub etcd: etcd::EtcdSettings,
}

impl Serving {
    /// The admin policy: identities are checked only with client
    /// certificates.
    pub fn admins(&self) -> Admins {
        match &self.tls {
            Some(t) if t.client_cert_auth => Admins::only(t.admins.iter().cloned()),
            _ => Admins::open(),
        }
    }
}

/// Serves the client APIs on `client` and Raft traffic on `peer` until
/// `shutdown` turns true. Nothing but Raft messages and snapshots is served
/// on the peer port, and nothing of Raft on the client port.
pub async fn serve(
    serving: Serving,
    client: TcpListener,
    peer: TcpListener,
    shutdown: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let forwarder = Forwarder::new(
        serving.node.clone(),
        serving.peers.clone(),
        serving.book.clone(),
        serving.tls.as_ref().map(|t| t.dialer()),
        serving.admins(),
    );
    // Every line logged while serving names the node (`wasmraft dev` runs
    // several in one process).
    let id = serving.node.id();
    let node_span = move |_: &tonic::codegen::http::Request<()>| tracing::info_span!("node", id);
    if let Some(policy) = serving.etcd.auto_compaction {
        tokio::spawn(
            etcd::compactor::run(serving.node.clone(), policy, shutdown.clone())
                .instrument(tracing::info_span!("node", id)),
        );
    }
    let space = etcd::SpaceQuota::new(serving.etcd.quota_backend_bytes);
    tokio::spawn(
        etcd::watch_quota(serving.node.clone(), forwarder.clone(), space.clone(), shutdown.clone())
            .instrument(tracing::info_span!("node", id)),
    );
    let admin = AdminService::new(
        serving.node.clone(),
        forwarder.clone(),
        serving.faults.clone(),
    );
    let etcd_kv = etcd::EtcdKv::new(serving.node.clone(), forwarder.clone(), space.clone());
    let etcd_lease = etcd::EtcdLease::new(serving.node.clone(), forwarder.clone());
    let client_router = tonic::transport::Server::builder()
        .trace_fn(node_span)
        .layer(grpc_metrics::GrpcMetricsLayer::new(id))
        .add_service(AdminServer::new(admin.clone()))
        .add_service(MembershipChangesServer::new(admin))
        .add_service(
            PluginsServer::new(PluginService::new(serving.node.clone(), forwarder.clone()))
                .max_decoding_message_size(plugin_service::MAX_REQUEST_BYTES),
        )
        .add_service(
            // Room above the request limit for the envelope, so that an
            // oversized request gets the node's exact error, not tonic's.
            ClientServer::new(ClientService::new(serving.node.clone(), forwarder.clone()))
                .max_decoding_message_size(serving.node.max_request_bytes() + (64 << 10)),
        )
        .add_service(
            // etcd's v3 KV API, over the KV plugin (`etcd`).
            KvServer::new(etcd_kv.clone()).max_decoding_message_size(serving.node.max_request_bytes() + (64 << 10)),
        )
        .add_service(WatchServer::new(etcd::EtcdWatch::new(serving.node.clone(), serving.etcd.progress_notify_interval)))
        .add_service(LeaseServer::new(etcd_lease.clone()))
        .add_service(LockServer::new(etcd::EtcdLock::new(serving.node.clone(), etcd_kv.clone(), etcd_lease.clone())))
        .add_service(ElectionServer::new(etcd::EtcdElection::new(serving.node.clone(), etcd_kv, etcd_lease)))
        .add_service(ClusterServer::new(etcd::EtcdCluster::new(serving.node.clone(), forwarder.clone())))
        .add_service(MaintenanceServer::new(etcd::EtcdMaintenance::new(serving.node.clone(), forwarder, space)));
    let peer_router = tonic::transport::Server::builder()
        .trace_fn(node_span)
        .layer(grpc_metrics::GrpcMetricsLayer::new(id))
        .add_service(
        RaftServer::new(RaftService::new(
            serving.node.clone(),
            serving.faults.clone(),
            serving.book.clone(),
        ))
        .max_decoding_message_size(256 << 20),
    );
    match &serving.tls {
        Some(tls) => {
            // Checked at start (`TlsSettings::validate`): these cannot fail here.
            let (client_tls, peer_tls) = (
                tls.client_server().expect("validated"),
                tls.peer_server().expect("validated"),
            );
            until_clients_drained(
                client_router.serve_with_incoming_shutdown(
                    coalesced(tls::incoming(client, client_tls, false)),
                    stop(shutdown.clone()),
                ),
                peer_router.serve_with_incoming_shutdown(
                    coalesced(tls::incoming(peer, peer_tls, true)),
                    stop(shutdown),
                ),
            )
            .await?;
        }
        None => {
            // `Server::tcp_nodelay` does not apply to an incoming stream we
            // supply: set it here, or Nagle's algorithm delays every small
            // response ~40 ms.
            let nodelay =
                |l| coalesced(tonic::transport::server::TcpIncoming::from(l).with_nodelay(Some(true)));
            until_clients_drained(
                client_router.serve_with_incoming_shutdown(nodelay(client), stop(shutdown.clone())),
                peer_router.serve_with_incoming_shutdown(nodelay(peer), stop(shutdown)),
            )
            .await?;
        }
    }
    Ok(())
}

/// The connections of `incoming`, each writing its queued small responses
/// at once ([`coalesce`]).
fn coalesced<T, E>(
    incoming: impl tokio_stream::Stream<Item = Result<T, E>>,
) -> impl tokio_stream::Stream<Item = Result<coalesce::CoalescedWrites<T>, E>> {
    use tokio_stream::StreamExt;
    incoming.map(|conn| conn.map(coalesce::CoalescedWrites::new))
}

/// Runs both servers until the client side has drained after shutdown:
/// its requests in flight finish while the peer side still carries their
/// Raft traffic, whose streams stay open for as long as the peers run.
async fn until_clients_drained<E>(
    client: impl std::future::Future<Output = Result<(), E>>,
    peer: impl std::future::Future<Output = Result<(), E>>,
) -> Result<(), E> {
    tokio::pin!(client, peer);
    tokio::select! {
        drained = &mut client => drained,
        peer_done = &mut peer => {
            peer_done?;
            client.await
        }
    }
}
