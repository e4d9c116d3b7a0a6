//! `etcdserverpb.Watch`: many watchers on one bidirectional stream, fed by
//! the events the KV plugin emits as this node applies entries (an
//! `mvccpb.Event` per changed key).
//!
//! Differences from etcd, while the KV plugin keeps only the newest
//! revision: a watch can start at the next revision, not before (a start
//! at or below the current revision is cancelled as compacted, with
//! `compact_revision` the next revision, from which a client may watch
//! again); `progress_notify` and `fragment` are accepted and not acted on.

use std::collections::BTreeMap;
use std::pin::Pin;

use prost::Message as _;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};
use wasmraft_node::Node;
use wasmraft_proto::etcdserverpb::watch_create_request::FilterType;
use wasmraft_proto::etcdserverpb::watch_request::RequestUnion;
use wasmraft_proto::etcdserverpb::watch_server::Watch;
use wasmraft_proto::etcdserverpb::{ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse};
use wasmraft_proto::mvccpb::{Event, event::EventType};

use super::{current_revision, header, require_kv};

/// The stream of answers on one watch stream.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

/// The `etcdserverpb.Watch` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdWatch {
    node: Node,
}

impl EtcdWatch {
    /// Serves `node`'s applied events.
    pub fn new(node: Node) -> Self {
        Self { node }
    }
}

#[tonic::async_trait]
impl Watch for EtcdWatch {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<Streaming<WatchRequest>>) -> Result<Response<WatchStream>, Status> {
        require_kv(&self.node)?;
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(serve(self.node.clone(), request.into_inner(), tx));
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// One watcher: a key range, the first revision it wants, its filters.
struct Watcher {
    key: Vec<u8>,
    range_end: Vec<u8>,
    start: i64,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
}

impl Watcher {
    fn new(c: &WatchCreateRequest, start: i64) -> Self {
        let has = |f: FilterType| c.filters.contains(&(f as i32));
        Self {
            key: c.key.clone(),
            range_end: c.range_end.clone(),
            start,
            no_put: has(FilterType::Noput),
            no_delete: has(FilterType::Nodelete),
            prev_kv: c.prev_kv,
        }
    }

    /// The event as this watcher gets it, if it wants it.
    fn wants(&self, event: &Event) -> Option<Event> {
        let kv = event.kv.as_ref()?;
        let key = kv.key.as_slice();
        // etcd's range ends: none is one key, "\0" every key from `key` on.
        let in_range = match self.range_end.as_slice() {
            [] => key == self.key.as_slice(),
            [0] => key >= self.key.as_slice(),
            end => key >= self.key.as_slice() && key < end,
        };
        let filtered = match EventType::try_from(event.r#type) {
            Ok(EventType::Put) => self.no_put,
            Ok(EventType::Delete) => self.no_delete,
            Err(_) => true,
        };
        if !in_range || filtered || kv.mod_revision < self.start {
            return None;
        }
        let mut event = event.clone();
        if !self.prev_kv {
            event.prev_kv = None;
        }
        Some(event)
    }
}

/// Runs one watch stream until the client closes it or goes away.
async fn serve(node: Node, mut requests: Streaming<WatchRequest>, tx: mpsc::Sender<Result<WatchResponse, Status>>) {
    // Subscribed before any revision is read, so that no event falls
    // between a watcher's start and its first delivery.
    let mut events = node.subscribe();
    let mut watchers: BTreeMap<i64, Watcher> = BTreeMap::new();
    let mut next_id = 0i64;
    let answer = |revision: i64, r: WatchResponse| {
        let header = header(&node, Some(ResponseHeader { revision, ..Default::default() }));
        WatchResponse { header, ..r }
    };
    let mut revision = 0i64;
    loop {
        let batch = tokio::select! {
            request = requests.next() => {
                let Some(Ok(request)) = request else { return };
                let reply = match request.request_union {
                    Some(RequestUnion::CreateRequest(c)) => {
                        revision = match current_revision(&node).await {
                            Ok(r) => r.max(revision),
                            Err(status) => {
                                let _ = tx.send(Err(status)).await;
                                return;
                            }
                        };
                        create(&mut watchers, &mut next_id, &c, revision)
                    }
                    Some(RequestUnion::CancelRequest(c)) => {
                        watchers.remove(&c.watch_id);
                        WatchResponse { watch_id: c.watch_id, canceled: true, ..Default::default() }
                    }
                    // etcd answers a progress request with watch id -1.
                    Some(RequestUnion::ProgressRequest(_)) => WatchResponse { watch_id: -1, ..Default::default() },
                    None => continue,
                };
                if tx.send(Ok(answer(revision, reply))).await.is_err() {
                    return;
                }
                continue;
            }
            event = events.recv() => match event {
                Ok(first) => {
                    // Everything already applied goes out together.
                    let mut batch = vec![first];
                    while let Ok(more) = events.try_recv() {
                        batch.push(more);
                    }
                    batch
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    // Events were lost: every watcher must start again.
                    for (id, _) in std::mem::take(&mut watchers) {
                        let reply = WatchResponse {
                            watch_id: id,
                            canceled: true,
                            cancel_reason: format!("etcdserver: the watcher fell {n} events behind; watch again"),
                            ..Default::default()
                        };
                        if tx.send(Ok(answer(revision, reply))).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        let decoded: Vec<Event> = batch.iter().filter_map(|e| Event::decode(e.payload.as_slice()).ok()).collect();
        if let Some(last) = decoded.iter().filter_map(|e| e.kv.as_ref()).map(|kv| kv.mod_revision).max() {
            revision = revision.max(last);
        }
        for (id, w) in &watchers {
            let mine: Vec<Event> = decoded.iter().filter_map(|e| w.wants(e)).collect();
            if mine.is_empty() {
                continue;
            }
            let reply = WatchResponse { watch_id: *id, events: mine, ..Default::default() };
            if tx.send(Ok(answer(revision, reply))).await.is_err() {
                return;
            }
        }
    }
}

/// Adds a watcher for `c` if it can be served, and the answer etcd gives.
fn create(watchers: &mut BTreeMap<i64, Watcher>, next_id: &mut i64, c: &WatchCreateRequest, current: i64) -> WatchResponse {
    let id = if c.watch_id != 0 {
        c.watch_id
    } else {
        while watchers.contains_key(next_id) {
            *next_id += 1;
        }
        *next_id
    };
    if watchers.contains_key(&id) {
        return WatchResponse {
            watch_id: id,
            created: true,
            canceled: true,
            cancel_reason: "mvcc: duplicate watch ID provided on the WatchStream".into(),
            ..Default::default()
        };
    }
    if c.start_revision != 0 && c.start_revision <= current {
        // Only the newest revision is kept: events before it are gone.
        return WatchResponse {
            watch_id: id,
            created: true,
            canceled: true,
            compact_revision: current + 1,
            cancel_reason: "mvcc: required revision has been compacted".into(),
            ..Default::default()
        };
    }
    let start = if c.start_revision == 0 { current + 1 } else { c.start_revision };
    watchers.insert(id, Watcher::new(c, start));
    WatchResponse { watch_id: id, created: true, ..Default::default() }
}
