use wasmraft_raft::Message;

/// Sends Raft messages to peers. Implemented over gRPC by `wasmraft-grpc`.
///
/// Contract: `send` must not block the Raft loop (queue and return); losing,
/// duplicating or reordering messages is allowed (Raft tolerates it), but
/// messages to one peer should normally arrive in order for pipelining to pay.
pub trait Transport: Send + 'static {
    /// Queues `messages` for delivery.
    fn send(&mut self, messages: Vec<Message>);
}

/// The transport of a single-node cluster: there is nobody to talk to.
#[derive(Debug, Default)]
pub struct NoPeers;

impl Transport for NoPeers {
    fn send(&mut self, messages: Vec<Message>) {
        for m in messages {
            tracing::warn!(to = m.to.0, kind = m.body.kind(), "dropping a message: this node has no peers");
        }
    }
}
