use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use wasmraft_node::{Node, SnapshotData};

use crate::faults::Faults;
use wasmraft_raft::{Message, MessageBody, NodeId, Term};
use wasmraft_proto::convert::raft as convert;
use wasmraft_proto::v1::raft_server::Raft;
use wasmraft_proto::v1::{InstallSnapshotResponse, RaftBatch, SendAck, SnapshotChunk};

/// The `wasmraft.v1.Raft` service: peers stream Raft messages into the node.
#[derive(Clone, Debug)]
pub struct RaftService {
    node: Node,
    faults: Faults,
}

impl RaftService {
    /// Serves `node`; `faults` may cut peers off (tests).
    pub fn new(node: Node, faults: Faults) -> Self {
        Self { node, faults }
    }
}

#[tonic::async_trait]
impl Raft for RaftService {
    async fn send(&self, request: Request<Streaming<RaftBatch>>) -> Result<Response<SendAck>, Status> {
        let mut stream = request.into_inner();
        while let Some(batch) = stream.next().await {
            for m in batch?.messages {
                match convert::from_message(m) {
                    Ok(m) if self.faults.is_cut_off(m.from.0) => {}
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
        request: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<InstallSnapshotResponse>, Status> {
        let mut stream = request.into_inner();
        let mut header = None;
        let mut data = SnapshotData::default();
        let mut complete = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if header.is_none() {
                let meta = convert::from_snapshot_meta(chunk.meta).map_err(|e| Status::invalid_argument(e.to_string()))?;
                header = Some((meta, chunk.from, chunk.term));
            }
            data.state.extend(chunk.pairs.into_iter().map(|p| (p.key, p.value)));
            data.sessions.extend(chunk.sessions.into_iter().map(|p| (p.key, p.value)));
            data.system.extend(chunk.system.into_iter().map(|p| (p.key, p.value)));
            complete |= chunk.last;
        }
        let (meta, from, term) = header.ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        if self.faults.is_cut_off(from) {
            return Err(Status::unavailable("partitioned (fault injection)"));
        }
        if !complete || from == 0 {
            return Err(Status::invalid_argument("incomplete snapshot stream"));
        }
        let message = Message {
            from: NodeId(from),
            to: NodeId(self.node.id()),
            term: Term(term),
            body: MessageBody::InstallSnapshot { meta },
        };
        self.node.receive_snapshot(message, data);
        Ok(Response::new(InstallSnapshotResponse { accepted: true }))
    }
}
