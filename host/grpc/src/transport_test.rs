//! The transport's lanes over real gRPC on loopback, against a peer that
//! stops reading its data stream (a slow follower): control messages still
//! arrive, appends keep their order, and a full data lane drops and counts
//! rather than growing. No timing decides a result: the peer is held until
//! the test lets it go; waits only guard against hangs.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};
use wasmraft_node::Transport;
use wasmraft_proto::convert::raft as convert;
use wasmraft_proto::v1::raft_server::{Raft, RaftServer};
use wasmraft_proto::v1::{InstallSnapshotResponse, RaftBatch, SendAck, SnapshotChunk};
use wasmraft_raft::{Entry, EntryPayload, Index, LogId, Message, MessageBody, NodeId, Term};

use super::GrpcTransport;
use crate::lane::{Budget, Budgets, LaneKind, LaneStats};
use crate::{Faults, PeerBook};

/// A peer that records what arrives, in order, and stops reading a stream
/// after its first batch with an append until `open` turns true.
#[derive(Clone)]
struct Peer {
    arrived: Arc<Mutex<Vec<Message>>>,
    open: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Raft for Peer {
    async fn send(&self, request: Request<Streaming<RaftBatch>>) -> Result<Response<SendAck>, Status> {
        let mut stream = request.into_inner();
        while let Some(batch) = stream.next().await {
            let mut appends = false;
            for m in batch?.messages {
                let m = convert::from_message(m).unwrap();
                appends |= matches!(m.body, MessageBody::AppendEntries { .. });
                self.arrived.lock().push(m);
            }
            if appends {
                // Not reading: the HTTP/2 window fills, then the lane.
                let mut open = self.open.clone();
                let _ = open.wait_for(|&o| o).await;
            }
        }
        Ok(Response::new(SendAck {}))
    }

    async fn install_snapshot(
        &self,
        _: Request<Streaming<SnapshotChunk>>,
    ) -> Result<Response<InstallSnapshotResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

struct Setup {
    transport: GrpcTransport,
    arrived: Arc<Mutex<Vec<Message>>>,
    open: watch::Sender<bool>,
    lanes: (u64, u64),
}

/// A held peer `peer` and a transport of node `node` to it.
async fn setup(node: u64, peer: u64, budgets: Budgets) -> Setup {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (open, open_rx) = watch::channel(false);
    let arrived = Arc::new(Mutex::new(Vec::new()));
    let server = RaftServer::new(Peer {
        arrived: arrived.clone(),
        open: open_rx,
    })
    .max_decoding_message_size(64 << 20);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    let book = PeerBook::new(String::new(), addr.to_string(), false);
    book.cluster_id.store(7, std::sync::atomic::Ordering::Release);
    let peers = BTreeMap::from([(peer, addr.to_string())]);
    let handle = tokio::runtime::Handle::current();
    let transport =
        GrpcTransport::new(node, &peers, Faults::new(false), &handle, book, None).with_budgets(budgets);
    Setup {
        transport,
        arrived,
        open,
        lanes: (node, peer),
    }
}

fn msg(s: &Setup, body: MessageBody) -> Message {
    Message {
        from: NodeId(s.lanes.0),
        to: NodeId(s.lanes.1),
        term: Term(1),
        body,
    }
}

/// An append of one entry at `index` with `size` bytes of payload.
fn append(s: &Setup, index: u64, size: usize) -> Message {
    let entry = Entry {
        log_id: LogId::new(1, index),
        payload: EntryPayload::Normal(vec![index as u8; size]),
    };
    let body = MessageBody::AppendEntries {
        prev: LogId::new(1, index - 1),
        entries: vec![entry],
        commit: Index(0),
    };
    msg(s, body)
}

fn heartbeat(s: &Setup, token: u64) -> Message {
    msg(s, MessageBody::Heartbeat { commit: Index(0), token })
}

fn stats(s: &Setup, kind: LaneKind) -> LaneStats {
    crate::lane::stats()
        .remove(&(s.lanes.0, s.lanes.1, kind))
        .unwrap_or_default()
}

/// Waits (a hang guard, not a threshold) until `done` holds.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn appended(arrived: &[Message]) -> Vec<u64> {
    arrived
        .iter()
        .filter_map(|m| match &m.body {
            MessageBody::AppendEntries { entries, .. } => Some(entries[0].log_id.index.0),
            _ => None,
        })
        .collect()
}

fn heartbeats(arrived: &[Message]) -> usize {
    arrived
        .iter()
        .filter(|m| matches!(m.body, MessageBody::Heartbeat { .. }))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_overtakes_megabytes_of_queued_appends() {
    let mut s = setup(11, 12, Budgets::default()).await;
    // 40 MiB of appends, within the data budget: nothing is dropped.
    const APPENDS: u64 = 20;
    s.transport
        .send((1..=APPENDS).map(|i| append(&s, i, 2 << 20)).collect());
    let arrived = s.arrived.clone();
    until("the first appends", || !appended(&arrived.lock()).is_empty()).await;
    s.transport.send(vec![heartbeat(&s, 1)]);
    until("the heartbeat", || heartbeats(&arrived.lock()) == 1).await;
    // The peer still holds the data stream: the heartbeat came first, and
    // megabytes of appends wait in the data lane.
    let (got, queued) = (appended(&arrived.lock()), stats(&s, LaneKind::Data));
    assert!(got.len() < APPENDS as usize / 2, "{} appends before the heartbeat", got.len());
    assert!(queued.queued_bytes >= 8 << 20, "the data lane held {queued:?}");
    assert_eq!(queued.dropped_full, 0);
    s.open.send(true).unwrap();
    until("every append", || appended(&arrived.lock()).len() == APPENDS as usize).await;
    assert_eq!(appended(&arrived.lock()), (1..=APPENDS).collect::<Vec<_>>(), "appends in order");
    let arrived = arrived.lock();
    let hb = arrived
        .iter()
        .position(|m| matches!(m.body, MessageBody::Heartbeat { .. }))
        .unwrap();
    let last = arrived.len() - 1;
    assert!(hb < last, "the heartbeat arrived before the last append");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_lane_drops_and_counts_while_control_flows() {
    let budget = Budget {
        messages: 1000,
        bytes: 8 << 20,
    };
    let mut s = setup(21, 22, Budgets { data: budget, ..Budgets::default() }).await;
    const APPENDS: u64 = 40;
    s.transport.send(vec![append(&s, 1, 1 << 20)]);
    let arrived = s.arrived.clone();
    until("the first append", || !appended(&arrived.lock()).is_empty()).await;
    // The peer holds the stream: 40 MiB more cannot all wait.
    for i in 2..=APPENDS {
        s.transport.send(vec![append(&s, i, 1 << 20)]);
        let now = stats(&s, LaneKind::Data);
        assert!(now.queued_bytes <= budget.bytes as u64, "over budget: {now:?}");
    }
    let full = stats(&s, LaneKind::Data);
    assert!(full.dropped_full > 0, "nothing dropped: {full:?}");
    // The control lane does not wait behind the full data lane.
    s.transport.send(vec![heartbeat(&s, 1)]);
    until("the heartbeat", || heartbeats(&arrived.lock()) == 1).await;
    let text = crate::metrics::render(&[]);
    let line = format!(
        "wasmraft_peer_dropped_messages_total{{node=\"21\",peer=\"22\",lane=\"data\",reason=\"full\"}} {}",
        full.dropped_full
    );
    assert!(text.contains(&line), "no {line} in\n{text}");
    // What was not dropped arrives, in order; nothing else.
    s.open.send(true).unwrap();
    let expect = APPENDS - full.dropped_full;
    until("the queued appends", || appended(&arrived.lock()).len() as u64 == expect).await;
    let got = appended(&arrived.lock());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order: {got:?}");
    assert_eq!(stats(&s, LaneKind::Data).queued_bytes, 0);
}

/// A peer that answers its first `garbled` calls at once with a status
/// whose details are not base64 (tonic's parser panics on them), in the
/// headers and in trailers in turn, then reads the calls after them and
/// records the messages they carry.
struct GarblingPeer {
    addr: String,
    calls: Arc<std::sync::atomic::AtomicUsize>,
    /// What arrived, in order.
    arrived: Arc<Mutex<Vec<Message>>>,
}

async fn garbling_peer(garbled: usize) -> GarblingPeer {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (calls, arrived) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(Vec::new())));
    let (c, a) = (calls.clone(), arrived.clone());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (calls, arrived) = (c.clone(), a.clone());
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(tcp).await else { return };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let call = calls.fetch_add(1, Ordering::SeqCst);
                    if call < garbled {
                        // In turn: the status in the answer's headers
                        // (trailers-only), and in trailers after them.
                        let mut status = http::HeaderMap::new();
                        status.insert("grpc-status", "13".parse().unwrap());
                        status.insert("grpc-status-details-bin", "%%% not base64 %%%".parse().unwrap());
                        let mut answer = http::Response::builder().header("content-type", "application/grpc");
                        if call % 2 == 0 {
                            answer.headers_mut().unwrap().extend(status);
                            let _ = respond.send_response(answer.body(()).unwrap(), true);
                        } else if let Ok(mut stream) = respond.send_response(answer.body(()).unwrap(), false) {
                            let _ = stream.send_trailers(status);
                        }
                        continue;
                    }
                    let arrived = arrived.clone();
                    tokio::spawn(async move {
                        let mut body = request.into_body();
                        let mut buf = Vec::new();
                        while let Some(Ok(data)) = body.data().await {
                            let _ = body.flow_control().release_capacity(data.len());
                            buf.extend_from_slice(&data);
                            // gRPC framing: a flag byte, a big-endian length, the message.
                            while buf.len() >= 5 {
                                let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
                                if buf.len() < 5 + len {
                                    break;
                                }
                                let batch = <RaftBatch as prost::Message>::decode(&buf[5..5 + len]).unwrap();
                                let messages = batch.messages.into_iter().map(|m| convert::from_message(m).unwrap());
                                arrived.lock().extend(messages);
                                buf.drain(..5 + len);
                            }
                        }
                    });
                }
            });
        }
    });
    GarblingPeer { addr, calls, arrived }
}

/// tonic's client panics on status details that are not base64; a lane
/// whose task panicked would never send to that peer again. Its answers
/// reach tonic without them (`safe_channel.rs`): both lanes call again,
/// and then carry messages (each lane's first call gets a garbled answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_outlives_answers_that_tonic_cannot_parse() {
    use std::sync::atomic::Ordering;
    const GARBLED: usize = 4;
    let peer = garbling_peer(GARBLED).await;
    let book = PeerBook::new(String::new(), peer.addr.clone(), false);
    book.cluster_id.store(7, Ordering::Release);
    let peers = BTreeMap::from([(32, peer.addr.clone())]);
    let mut transport =
        GrpcTransport::new(31, &peers, Faults::new(false), &tokio::runtime::Handle::current(), book, None);
    until("the lanes to call past the garbled answers", || peer.calls.load(Ordering::SeqCst) > GARBLED).await;
    let message = |body| Message { from: NodeId(31), to: NodeId(32), term: Term(1), body };
    let heartbeat = message(MessageBody::Heartbeat { commit: Index(0), token: 1 });
    let append = message(MessageBody::AppendEntries { prev: LogId::new(1, 0), entries: vec![], commit: Index(0) });
    let deadline = Instant::now() + Duration::from_secs(60);
    // Messages a broken stream took are lost (Raft resends): send again
    // until one of each lane arrives.
    while heartbeats(&peer.arrived.lock()) == 0 || !peer.arrived.lock().iter().any(|m| m.body == append.body) {
        assert!(Instant::now() < deadline, "timed out waiting for a heartbeat and an append");
        transport.send(vec![heartbeat.clone(), append.clone()]);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
