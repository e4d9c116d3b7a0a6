//! Raft messages between nodes: two lanes per peer (control and data), each
//! a bounded queue drained into one long-lived gRPC stream on a connection
//! of its own; see [`GrpcTransport`] and `lane.rs`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::Request;
use tonic::transport::ClientTlsConfig;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tracing::Instrument;
use wasmraft_node::{MessageSink, SnapshotDone, SnapshotLoader, SnapshotReader, Transport};
use wasmraft_proto::convert::raft as convert;
use wasmraft_proto::v1::raft_client::RaftClient;
use wasmraft_proto::v1::{KeyValuePair, RaftBatch, SnapshotChunk};
use wasmraft_raft::{Message, MessageBody, NodeId};

use crate::lane::{self, Budgets, LaneId, LaneKind, LaneReceiver, LaneSender};
use crate::peer::{LEADER_TERM, PeerBook, REFUSAL, Refusal};
use crate::safe_channel::SafeChannel;

/// The most messages sent in one batch.
const BATCH: usize = 1024;
/// The most bytes of messages in one batch (one alone may be larger): far
/// below the gRPC message limit, so that large entries never make a batch
/// the stream refuses (which broke the stream and lost the whole batch).
const BATCH_BYTES: usize = 4 << 20;

/// Snapshot chunks read ahead of the stream: with parts of about
/// [`wasmraft_node::SNAPSHOT_PART_BYTES`], a send holds a few MiB at most.
const CHUNKS_AHEAD: usize = 2;

/// Sends Raft messages to peers over gRPC (dropping those to peers that
/// [`crate::Faults`] cut off). [`Transport::send`] only queues, so it never
/// blocks the Raft loop.
///
/// Each peer gets two lanes ([`LaneKind`]): *control* (votes, pre-votes,
/// heartbeats, their answers, TimeoutNow, ReadIndex) and *data*
/// (AppendEntries and their answers). Each lane is a queue bounded in
/// messages and bytes ([`Budgets`]; a message that does not fit is dropped
/// and counted in `wasmraft_peer_dropped_messages_total`, and Raft resends)
/// and a task that keeps one stream open on a connection of its own,
/// reconnecting after failures, and sends what has queued as batches.
/// Order is kept within a lane, not across lanes: the core tolerates a
/// heartbeat answer overtaking appends (`wasmraft_raft`, "Heartbeats may
/// overtake appends").
///
/// Two streams on two connections rather than one stream drained
/// control-first: a priority queue can only reorder what it still holds,
/// while a heartbeat behind a batch already handed to the stream would wait
/// for megabytes in the stream's HTTP/2 window and the TCP send buffer. On
/// its own connection the control lane shares neither, so it never waits
/// behind the data lane.
#[derive(Debug)]
pub struct GrpcTransport {
    self_id: u64,
    /// The lanes to each peer, shared with the log writer's sink.
    peers: Peers,
    budgets: Budgets,
    addresses: BTreeMap<u64, String>,
    runtime: tokio::runtime::Handle,
    link: Link,
    /// Removed members: never dialed again.
    removed: std::collections::BTreeSet<u64>,
}

/// Where messages go: the lanes to each peer, except to peers the faults
/// cut off. The transport and the log writer's [`MessageSink`] share it.
#[derive(Clone, Debug)]
struct Peers {
    faults: crate::faults::Faults,
    lanes: Arc<parking_lot::RwLock<HashMap<NodeId, Lanes>>>,
}

impl MessageSink for Peers {
    fn send(&self, messages: Vec<Message>) {
        let lanes = self.lanes.read();
        for m in messages {
            if self.faults.is_cut_off(m.to.0) {
                continue;
            }
            match lanes.get(&m.to) {
                // A full lane drops and counts (`lane.rs`).
                Some(to) => {
                    to.get(LaneKind::of(&m.body)).push(convert::message(m));
                }
                None => tracing::warn!(to = m.to.0, "no address for peer; dropping a message"),
            }
        }
    }
}

/// The two lanes to one peer; dropping them ends their tasks once the
/// queued messages are sent (or discarded, if the peer is unreachable).
#[derive(Debug)]
struct Lanes {
    control: LaneSender,
    data: LaneSender,
}

impl Lanes {
    fn open(id: u64, addr: &str, link: &Link, budgets: Budgets, runtime: &tokio::runtime::Handle) -> Self {
        let open = |kind, budget| {
            let lane_id = LaneId { node: link.self_id, peer: id, kind };
            let (tx, rx) = lane::lane(lane_id, budget);
            let node = tracing::info_span!("node", id = link.self_id);
            runtime.spawn(lane_task(id, addr.to_string(), kind, rx, link.clone()).instrument(node));
            tx
        };
        Lanes {
            control: open(LaneKind::Control, budgets.control),
            data: open(LaneKind::Data, budgets.data),
        }
    }

    fn get(&self, kind: LaneKind) -> &LaneSender {
        match kind {
            LaneKind::Control => &self.control,
            LaneKind::Data => &self.data,
        }
    }
}

/// What every stream to a peer shares: identity metadata, TLS, and where
/// a leader's "not a member" refusal is reported.
#[derive(Clone, Debug)]
struct Link {
    self_id: u64,
    book: Arc<PeerBook>,
    tls: Option<ClientTlsConfig>,
    refused: Arc<Mutex<Option<(u64, u64)>>>,
}

impl Link {
    fn endpoint(&self, addr: &str) -> Result<Endpoint, tonic::transport::Error> {
        let endpoint = Endpoint::from_shared(crate::tls::uri(addr, self.tls.is_some()))?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true);
        match &self.tls {
            Some(tls) => endpoint.tls_config(tls.clone()),
            None => Ok(endpoint),
        }
    }

    fn request<T>(&self, to: u64, body: T) -> Request<T> {
        let mut request = Request::new(body);
        *request.metadata_mut() = self.book.stream_metadata(self.self_id, to);
        request
    }

    /// Notes a leader's refusal of this node as a non-member; whether the
    /// peer refused this node's traffic at all.
    fn note(&self, peer: u64, status: &tonic::Status) -> bool {
        let refusal = status.metadata().get(REFUSAL).and_then(|v| v.to_str().ok());
        if refusal == Some(Refusal::NotAMember.name()) {
            if let Some(term) = status
                .metadata()
                .get(LEADER_TERM)
                .and_then(|v| v.to_str().ok()?.parse().ok())
            {
                *self.refused.lock() = Some((peer, term));
            }
        }
        if refusal.is_some() {
            tracing::warn!(peer, error = %status.message(), "a peer refused this node's traffic");
        }
        refusal.is_some()
    }
}

impl GrpcTransport {
    /// Connects lazily to every peer in `peers` (id -> peer `host:port`)
    /// except `self_id`, spawning on `runtime`. Streams carry the identity
    /// in `book`, over TLS when `tls` is set.
    pub fn new(
        self_id: u64,
        peers: &BTreeMap<u64, String>,
        faults: crate::faults::Faults,
        runtime: &tokio::runtime::Handle,
        book: Arc<PeerBook>,
        tls: Option<ClientTlsConfig>,
    ) -> Self {
        let link = Link {
            self_id,
            book,
            tls,
            refused: Arc::default(),
        };
        let budgets = Budgets::default();
        let mut senders = HashMap::new();
        for (&id, addr) in peers {
            if id == self_id {
                continue;
            }
            senders.insert(NodeId(id), Lanes::open(id, addr, &link, budgets, runtime));
        }
        Self {
            self_id,
            peers: Peers { faults, lanes: Arc::new(parking_lot::RwLock::new(senders)) },
            budgets,
            addresses: peers.clone(),
            runtime: runtime.clone(),
            link,
            removed: Default::default(),
        }
    }
}

impl GrpcTransport {
    /// Replaces the lanes' limits (default [`Budgets::default`]); lanes
    /// reopen, dropping what was queued. For tests and tuning.
    #[must_use]
    pub fn with_budgets(mut self, budgets: Budgets) -> Self {
        self.budgets = budgets;
        for (id, addr) in &self.addresses {
            if let Some(lanes) = self.peers.lanes.write().get_mut(&NodeId(*id)) {
                *lanes = Lanes::open(*id, addr, &self.link, budgets, &self.runtime);
            }
        }
        self
    }
}

impl Transport for GrpcTransport {
    fn send(&mut self, messages: Vec<Message>) {
        MessageSink::send(&self.peers, messages);
    }

    fn sink(&self) -> Option<Box<dyn MessageSink>> {
        Some(Box::new(self.peers.clone()))
    }

    fn set_address(&mut self, id: u64, address: &str) {
        if self.addresses.get(&id).map(String::as_str) == Some(address)
            || id == self.self_id
            || self.removed.contains(&id)
        {
            return;
        }
        tracing::info!(peer = id, %address, "learned a member's address");
        self.addresses.insert(id, address.to_string());
        // New tasks for the new address; the old ones end with their queues.
        let lanes = Lanes::open(id, address, &self.link, self.budgets, &self.runtime);
        self.peers.lanes.write().insert(NodeId(id), lanes);
    }

    fn remove_peer(&mut self, id: u64) {
        // Dropping a peer's queue ends its task: no more dialing a node
        // that left (it learns so when it next calls, see `Link::note`).
        if self.peers.lanes.write().remove(&NodeId(id)).is_some() {
            tracing::info!(peer = id, "no longer a member; closing the link to it");
        }
        self.addresses.remove(&id);
        self.removed.insert(id);
    }

    fn refused_as_non_member(&mut self) -> Option<(u64, u64)> {
        self.link.refused.lock().take()
    }

    fn send_snapshot(&mut self, message: Message, load: SnapshotLoader, done: SnapshotDone) {
        if self.peers.faults.is_cut_off(message.to.0) {
            done(false);
            return;
        }
        let Some(addr) = self.addresses.get(&message.to.0).cloned() else {
            done(false);
            return;
        };
        let link = self.link.clone();
        let node = tracing::info_span!("node", id = self.self_id);
        self.runtime.spawn(async move {
            let to = message.to.0;
            let result = async {
                let reader = tokio::task::spawn_blocking(load)
                    .await
                    .map_err(|e| e.to_string())??;
                stream_snapshot(&link, &addr, message, reader).await
            }
            .await;
            match &result {
                Ok(()) => tracing::info!(peer = to, "sent a snapshot"),
                Err(e) => tracing::warn!(peer = to, error = %e, "sending a snapshot failed"),
            }
            done(result.is_ok());
        }.instrument(node));
    }
}

/// Streams a snapshot a part at a time, read from its checkpoint on a
/// blocking thread no further than [`CHUNKS_AHEAD`] chunks ahead of the
/// stream; the first chunk carries the metadata, an empty last one says the
/// snapshot is complete (a stream that ends without it is refused).
async fn stream_snapshot(
    link: &Link,
    addr: &str,
    message: Message,
    mut reader: SnapshotReader,
) -> Result<(), String> {
    let MessageBody::InstallSnapshot { meta } = &message.body else {
        return Err("not an InstallSnapshot message".into());
    };
    let channel = link
        .endpoint(addr)
        .map_err(|e| e.to_string())?
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let mut client = RaftClient::new(SafeChannel(channel)).max_encoding_message_size(64 << 20);
    let pairs = |list: Vec<(Vec<u8>, Vec<u8>)>| {
        list.into_iter()
            .map(|(key, value)| KeyValuePair { key, value })
            .collect()
    };
    let (tx, rx) = mpsc::channel::<SnapshotChunk>(CHUNKS_AHEAD);
    let mut header = Some(SnapshotChunk {
        meta: Some(convert::snapshot_meta(meta)),
        from: message.from.0,
        term: message.term.0,
        ..Default::default()
    });
    let producer = tokio::task::spawn_blocking(move || -> Result<(), String> {
        loop {
            let part = reader.next_part().map_err(|e| e.to_string())?;
            let mut chunk = header.take().unwrap_or_default();
            let Some(part) = part else {
                chunk.last = true;
                // The receiver may already have answered; nothing to do then.
                let _ = tx.blocking_send(chunk);
                return Ok(());
            };
            chunk.pairs = pairs(part.state);
            chunk.sessions = pairs(part.sessions);
            chunk.system = pairs(part.system);
            if tx.blocking_send(chunk).is_err() {
                return Ok(()); // the stream ended early: its error says why
            }
        }
    });
    let to = message.to.0;
    let response = client
        .install_snapshot(link.request(to, ReceiverStream::new(rx)))
        .await
        .map_err(|status| {
            link.note(to, &status);
            status.to_string()
        });
    // A read error ends the stream without its last chunk: report that.
    producer.await.map_err(|e| e.to_string())??;
    let response = response?;
    if response.into_inner().accepted {
        Ok(())
    } else {
        Err("the follower refused the snapshot".into())
    }
}

/// Keeps one stream to peer `id` open for one lane, on a connection of its
/// own (see [`GrpcTransport`]), reconnecting after failures, and sends what
/// has queued as batches of at most [`BATCH`] messages and [`BATCH_BYTES`].
async fn lane_task(id: u64, addr: String, kind: LaneKind, lane: LaneReceiver, link: Link) {
    let endpoint = match link.endpoint(&addr) {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(peer = id, %addr, error = %e, "invalid peer address");
            return;
        }
    };
    // Streams carry the cluster id: a node that does not know it yet (a
    // joining node before its cluster contacts it) has nothing to say.
    while link
        .book
        .cluster_id
        .load(std::sync::atomic::Ordering::Acquire)
        == 0
    {
        if lane.discard() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut failures = 0u32;
    loop {
        let channel = match endpoint.connect().await {
            Ok(c) => c,
            Err(e) => {
                if failures.is_multiple_of(50) {
                    let cause = wasmraft_proto::error_chain(&e);
                    tracing::warn!(peer = id, %addr, lane = kind.name(), error = %cause, "cannot reach peer");
                }
                failures += 1;
                // Messages for an unreachable peer are stale by the time it is back.
                if lane.discard() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if failures > 0 {
            tracing::info!(peer = id, %addr, lane = kind.name(), failed_attempts = failures, "connected to peer again");
        }
        failures = 0;
        // Whatever answers at the peer's address must not end this task.
        let mut client = RaftClient::new(SafeChannel(channel)).max_encoding_message_size(64 << 20);
        // Room for one batch: what leaves the lane's budget is at most the
        // batch waiting here and the one the stream is writing.
        let (batches, stream) = mpsc::channel::<RaftBatch>(1);
        let forward = async {
            loop {
                let Some(messages) = lane.next_batch(BATCH, BATCH_BYTES).await else {
                    return true; // the lane closed: the peer left or moved
                };
                if batches.send(RaftBatch { messages }).await.is_err() {
                    return false; // the stream broke: reconnect
                }
            }
        };
        tokio::select! {
            stopped = forward => if stopped { return },
            result = client.send(link.request(id, ReceiverStream::new(stream))) => {
                if let Err(e) = result {
                    if link.note(id, &e) {
                        // Refused for who this node is: asking again at once
                        // would not change the answer.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    tracing::debug!(peer = id, lane = kind.name(), error = %e, "stream to peer ended");
                }
            }
        }
        if lane.is_closed() && lane.discard() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
#[path = "transport_test.rs"]
mod tests;
