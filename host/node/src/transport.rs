use wasmraft_raft::Message;
use wasmraft_storage::SnapshotReader;

/// Opens the snapshot to send (on the transport's own thread or task); the
/// transport then reads it a part at a time as the stream drains.
pub type SnapshotLoader = Box<dyn FnOnce() -> Result<SnapshotReader, String> + Send>;
/// Reports whether the follower accepted the snapshot.
pub type SnapshotDone = Box<dyn FnOnce(bool) + Send>;

/// Sends Raft messages to peers. Implemented over gRPC by `wasmraft-grpc`.
///
/// Contract: `send` must not block the Raft loop (queue and return); losing,
/// duplicating or reordering messages is allowed (Raft tolerates it), but
/// messages to one peer should normally arrive in order for pipelining to pay.
pub trait Transport: Send + 'static {
    /// Queues `messages` for delivery.
    fn send(&mut self, messages: Vec<Message>);

    /// Sends an `InstallSnapshot` message together with the snapshot's data,
    /// which `load` opens; calls `done` with the outcome. Must not block.
    /// The recipient stages the parts ([`crate::Node::stage_snapshot`]) and
    /// hands the staged snapshot and the message to
    /// [`crate::Node::receive_snapshot`].
    fn send_snapshot(&mut self, message: Message, load: SnapshotLoader, done: SnapshotDone);

    /// Member `id` is now reachable at `address` (learned from the log).
    fn set_address(&mut self, _id: u64, _address: &str) {}

    /// Member `id` was removed from the cluster: stop talking to it, for
    /// good (removed ids are never reused).
    fn remove_peer(&mut self, _id: u64) {}

    /// A leader that refused this node as not a member of the cluster, and
    /// its term, if one did since the last call (checked every loop turn).
    fn refused_as_non_member(&mut self) -> Option<(u64, u64)> {
        None
    }

    /// A sender for the log writer's thread, if this transport has one: a
    /// write's answers (a follower's append and vote answers, which may only
    /// leave once the write is durable) then go out from the writer as soon
    /// as it synced, rather than after a hand-off back to the Raft loop's
    /// thread, on every write's critical path. Without one, the loop sends
    /// them.
    fn sink(&self) -> Option<Box<dyn MessageSink>> {
        None
    }
}

/// Sends Raft messages from another thread than the Raft loop's (see
/// [`Transport::sink`]), with the transport's rules (its faults, its
/// queues); never an `InstallSnapshot`.
pub trait MessageSink: Send + 'static {
    /// Queues `messages` for delivery; must not block.
    fn send(&self, messages: Vec<Message>);
}

/// The transport of a single-node cluster: there is nobody to talk to.
#[derive(Debug, Default)]
pub struct NoPeers;

impl Transport for NoPeers {
    fn send(&mut self, messages: Vec<Message>) {
        for m in messages {
            tracing::warn!(
                to = m.to.0,
                kind = m.body.kind(),
                "dropping a message: this node has no peers"
            );
        }
    }

    fn send_snapshot(&mut self, message: Message, _load: SnapshotLoader, done: SnapshotDone) {
        tracing::warn!(
            to = message.to.0,
            "dropping a snapshot: this node has no peers"
        );
        done(false);
    }
}
