use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};
use wasmraft_node::{Node, SnapshotPart, SnapshotStaging, StorageError};

use std::sync::Arc;

use crate::faults::Faults;
use crate::peer::{PeerBook, Refusal};
use wasmraft_proto::convert::raft as convert;
use wasmraft_proto::v1::raft_server::Raft;
use wasmraft_proto::v1::{InstallSnapshotResponse, RaftBatch, SendAck, SnapshotChunk};
use wasmraft_raft::{Message, MessageBody, NodeId, Term};

/// The `wasmraft.v1.Raft` service, served on the peer port only: peers
/// stream Raft messages and snapshots into the node, after [`PeerBook`]
/// checked the stream's cluster id, sender and target.
#[derive(Clone, Debug)]
pub struct RaftService {
    node: Node,
    faults: Faults,
    book: Arc<PeerBook>,
}

impl RaftService {
    /// Serves `node`; `faults` may cut peers off (tests).
    pub fn new(node: Node, faults: Faults, book: Arc<PeerBook>) -> Self {
        Self { node, faults, book }
    }
}

#[tonic::async_trait]
impl Raft for RaftService {
    async fn send(
        &self,
        request: Request<Streaming<RaftBatch>>,
    ) -> Result<Response<SendAck>, Status> {
        let cn = crate::auth::caller(&request);
        let from = self
            .book
            .admit(&self.node, request.metadata(), cn.as_deref())?;
        let mut stream = request.into_inner();
        while let Some(batch) = stream.next().await {
            // A member removed while its stream is open is cut off here.
            self.book.check_member(&self.node, from)?;
            for m in batch?.messages {
                match convert::from_message(m) {
                    Ok(m) if m.from.0 != from => {
                        return Err(self.book.refuse(
                            Refusal::BadSender,
                            &format!("message from {} on node {from}'s stream", m.from.0),
                        ));
                    }
                    Ok(m) if m.to.0 != self.node.id() => {
                        return Err(self.book.refuse(
                            Refusal::WrongTarget,
                            &format!("message for node {}", m.to.0),
                        ));
                    }
                    Ok(_) if self.faults.is_cut_off(from) => {}
                    Ok(m) => self.node.step(m),
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
        let cn = crate::auth::caller(&request);
        let sender = self
            .book
            .admit(&self.node, request.metadata(), cn.as_deref())?;
        let mut stream = request.into_inner();
        let mut header = None;
        // Staged on disk as chunks arrive (never the whole snapshot in
        // memory); dropped on any error, which removes its files.
        let mut staging: Option<SnapshotStaging> = None;
        let mut complete = false;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            if header.is_none() {
                let meta = convert::from_snapshot_meta(chunk.meta)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                if chunk.from != sender {
                    return Err(self.book.refuse(
                        Refusal::BadSender,
                        &format!("snapshot from {} on node {sender}'s stream", chunk.from),
                    ));
                }
                // Refused before a byte is kept; the Raft loop checks again
                // when the whole snapshot is in.
                let st = self.node.status();
                let from_leader = chunk.term == st.term && st.leader.map(|l| l.0) == Some(sender);
                if from_leader && meta.last.index.0 <= st.commit {
                    // The leader is behind on this follower's progress: it
                    // already holds everything the snapshot covers.
                    tracing::debug!(
                        index = meta.last.index.0,
                        commit = st.commit,
                        "a snapshot not ahead of the commit index; not installed"
                    );
                    return Ok(Response::new(InstallSnapshotResponse { accepted: true }));
                }
                if !from_leader {
                    return Err(self.book.refuse(
                        Refusal::StaleSnapshot,
                        &format!(
                            "snapshot at {} from node {sender} in term {}; this node is in term {} with leader {:?} and commit {}",
                            meta.last.index.0, chunk.term, st.term, st.leader.map(|l| l.0), st.commit
                        ),
                    ));
                }
                staging = Some(self.node.stage_snapshot(&meta).map_err(snapshot_status)?);
                header = Some((meta, chunk.from, chunk.term));
            }
            complete |= chunk.last;
            let part = SnapshotPart {
                state: chunk.pairs.into_iter().map(|p| (p.key, p.value)).collect(),
                sessions: chunk.sessions.into_iter().map(|p| (p.key, p.value)).collect(),
                system: chunk.system.into_iter().map(|p| (p.key, p.value)).collect(),
            };
            if part.is_empty() {
                continue;
            }
            let mut st = staging.take().expect("staged with the header");
            // Table-file writes block: off the async workers.
            let added = tokio::task::spawn_blocking(move || st.add(part).map(|()| st))
                .await
                .map_err(|e| Status::internal(e.to_string()))?;
            staging = Some(added.map_err(snapshot_status)?);
        }
        let (meta, from, term) =
            header.ok_or_else(|| Status::invalid_argument("empty snapshot stream"))?;
        if self.faults.is_cut_off(from) {
            return Err(Status::unavailable("partitioned (fault injection)"));
        }
        if !complete || from == 0 {
            return Err(Status::invalid_argument("incomplete snapshot stream"));
        }
        let staging = staging.expect("staged with the header");
        let staged = tokio::task::spawn_blocking(move || staging.finish())
            .await
            .map_err(|e| Status::internal(e.to_string()))?
            .map_err(snapshot_status)?;
        let message = Message {
            from: NodeId(from),
            to: NodeId(self.node.id()),
            term: Term(term),
            body: MessageBody::InstallSnapshot { meta },
        };
        tracing::info!(from, index = staged.meta().last.index.0, keys = staged.state_keys(), bytes = staged.bytes(), "received a snapshot");
        self.node.receive_snapshot(message, staged);
        Ok(Response::new(InstallSnapshotResponse { accepted: true }))
    }
}

/// A snapshot the node will not take (too large, malformed) is the
/// sender's problem; anything else is this node's.
fn snapshot_status(e: StorageError) -> Status {
    tracing::warn!(error = %e, "receiving a snapshot failed");
    match e {
        StorageError::Refused(_) => Status::invalid_argument(format!("snapshot {e}")),
        e => Status::internal(format!("staging a snapshot: {e}")),
    }
}
