//! gRPC for Wasmraft: the `wasmraft.v1` client service over a [`Node`].
//! (The peer transport and etcd's v3 API come with replication.)
#![deny(missing_docs)]

mod client_service;
mod status;

pub use client_service::ClientService;
pub use status::to_status;

use wasmraft_node::Node;
use wasmraft_proto::v1::client_server::ClientServer;

/// Serves the client API of `node` on a bound listener until `shutdown`
/// resolves.
pub async fn serve_on(
    node: Node,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .add_service(ClientServer::new(ClientService::new(node)).max_decoding_message_size(4 << 20))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
