use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use wasmraft_node::Node;
use wasmraft_proto::convert::raft as convert;
use wasmraft_proto::v1::raft_server::Raft;
use wasmraft_proto::v1::{InstallSnapshotResponse, RaftBatch, SendAck, SnapshotChunk};

/// The `wasmraft.v1.Raft` service: peers stream Raft messages into the node.
#[derive(Clone, Debug)]
pub struct RaftService {
    node: Node,
}

impl RaftService {
    /// Serves `node`.
    pub fn new(node: Node) -> Self {
        Self { node }
    }
}

#[tonic::async_trait]
impl Raft for RaftService {
    async fn send(&self, request: Request<Streaming<RaftBatch>>) -> Result<Response<SendAck>, Status> {
        let mut stream = request.into_inner();
        while let Some(batch) = stream.next().await {
            for m in batch?.messages {
                match convert::from_message(m) {
                    Ok(m) if m.to.0 == self.node.id() => self.node.step(m),
                    Ok(m) => tracing::warn!(to = m.to.0, "message for another node; dropped"),
                    Err(e) => return Err(Status::invalid_argument(e.to_string())),
                }
            }
        }
        Ok(Response::new(SendAck {}))
    }

    async fn install_snapshot(
        &self,
        _request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<InstallSnapshotResponse>, Status> {
        Err(Status::unimplemented("snapshot transfer is not supported by this node yet"))
    }
}
