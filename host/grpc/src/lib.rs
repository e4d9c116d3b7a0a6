//! gRPC for Wasmraft: the `wasmraft.v1` client service over a [`Node`],
//! the Raft peer service, and [`GrpcTransport`], which carries Raft messages
//! between nodes.
#![deny(missing_docs)]

mod admin_service;
mod client_service;
mod faults;
mod forward;
mod metrics;
mod plugin_service;
mod raft_service;
mod status;
mod transport;

pub use admin_service::AdminService;
pub use client_service::ClientService;
pub use faults::Faults;
pub use forward::Forwarder;
pub use metrics::serve_metrics;
pub use plugin_service::PluginService;
pub use raft_service::RaftService;
pub use status::to_status;
pub use transport::GrpcTransport;

use std::collections::BTreeMap;

use wasmraft_node::Node;
use wasmraft_proto::v1::admin_server::AdminServer;
use wasmraft_proto::v1::membership_changes_server::MembershipChangesServer;
use wasmraft_proto::v1::client_server::ClientServer;
use wasmraft_proto::v1::plugins_server::PluginsServer;
use wasmraft_proto::v1::raft_server::RaftServer;

/// Serves the client and Raft APIs of `node` on a bound listener until
/// `shutdown` resolves. `peers` maps the other nodes' ids to their
/// addresses, for forwarding proposals to the leader.
pub async fn serve_on(
    node: Node,
    peers: BTreeMap<u64, String>,
    faults: Faults,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    // `Server::tcp_nodelay` does not apply to an incoming stream we supply:
    // set it here, or Nagle's algorithm delays every small response ~40 ms.
    let incoming_addr = listener.local_addr();
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let mut addresses = peers.clone();
    if let Ok(addr) = incoming_addr {
        addresses.insert(node.id(), addr.to_string());
    }
    let admin = AdminService::new(node.clone(), Forwarder::new(node.clone(), addresses.clone()), faults.clone());
    let plugins = PluginService::new(node.clone(), Forwarder::new(node.clone(), addresses));
    let client = ClientService::new(node.clone(), Forwarder::new(node.clone(), peers));
    tonic::transport::Server::builder()
        .add_service(AdminServer::new(admin.clone()))
        .add_service(MembershipChangesServer::new(admin))
        .add_service(PluginsServer::new(plugins).max_decoding_message_size(plugin_service::MAX_REQUEST_BYTES))
        .add_service(ClientServer::new(client).max_decoding_message_size(4 << 20))
        .add_service(RaftServer::new(RaftService::new(node, faults)).max_decoding_message_size(256 << 20))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
