//! `etcdserverpb.Watch`: many watchers on one bidirectional stream, fed by
//! the events the KV plugin emits as this node applies entries (an
//! `mvccpb.Event` per changed key).
//!
//! A watch that starts at a past revision first replays the changes since
//! then from the history the KV plugin keeps, page by page, and then
//! follows the live events from the revision after the last page's state,
//! so that no revision is missed or sent twice. A stream too slow for the
//! live events (its client stopped reading; the node keeps 4096 of them)
//! is not cut off: each of its watchers catches up the same way from just
//! after what it was sent, as etcd's unsynced watchers do. A watcher that starts below
//! the compacted revision is created and then cancelled in a second
//! response with `compact_revision`, as etcd does.
//! A watcher with `progress_notify` gets an empty response with the current
//! revision after each interval in which it got nothing else; a progress
//! request is answered (watch id -1) with the revision every watcher of the
//! stream has been sent all events up to. A watcher created with
//! `fragment` gets an answer larger than the node's request limit split, as
//! etcd splits it: every part but the last is marked `fragment`, and each
//! holds at least one event; clientv3 joins them again.

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

use wasmraft_proto::kvplugin::{EventsRequest, EventsResponse};
use wasmraft_proto::kvplugin::request::Request as KvRequest;
use wasmraft_proto::kvplugin::response::Response as KvResponse;

use super::{current_revision, header, plugin_query, require_kv};

/// The stream of answers on one watch stream.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<WatchResponse, Status>> + Send>>;

/// The `etcdserverpb.Watch` service of one node.
#[derive(Clone, Debug)]
pub struct EtcdWatch {
    node: Node,
    progress_interval: std::time::Duration,
}

impl EtcdWatch {
    /// Serves `node`'s applied events; watchers that ask for progress
    /// notifications get one after each quiet `progress_interval`.
    pub fn new(node: Node, progress_interval: std::time::Duration) -> Self {
        Self { node, progress_interval }
    }
}

#[tonic::async_trait]
impl Watch for EtcdWatch {
    type WatchStream = WatchStream;

    async fn watch(&self, request: Request<Streaming<WatchRequest>>) -> Result<Response<WatchStream>, Status> {
        require_kv(&self.node)?;
        let (tx, rx) = mpsc::channel(256);
        tokio::spawn(
            tracing::Instrument::in_current_span(serve(self.node.clone(), request.into_inner(), tx, self.progress_interval)),
        );
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }
}

/// One watcher: a key range, the first revision it wants, its filters.
struct Watcher {
    key: Vec<u8>,
    range_end: Vec<u8>,
    start: i64,
    /// The revision of the last event sent to it, and the keys sent at that
    /// revision (a revision's events may arrive in two batches): where a
    /// catch-up from history resumes without a gap or a repeat.
    sent_revision: i64,
    sent_keys: Vec<Vec<u8>>,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    /// Split answers over the request limit (etcd's `fragment`).
    fragment: bool,
    /// Nothing was sent to it since the last progress tick.
    quiet: bool,
}

impl Watcher {
    fn new(c: &WatchCreateRequest, start: i64) -> Self {
        let has = |f: FilterType| c.filters.contains(&(f as i32));
        Self {
            key: c.key.clone(),
            range_end: c.range_end.clone(),
            start,
            sent_revision: 0,
            sent_keys: Vec::new(),
            no_put: has(FilterType::Noput),
            no_delete: has(FilterType::Nodelete),
            prev_kv: c.prev_kv,
            progress_notify: c.progress_notify,
            fragment: c.fragment,
            quiet: true,
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
        if kv.mod_revision == self.sent_revision && self.sent_keys.iter().any(|k| k == key) {
            return None; // sent before a catch-up replayed its revision
        }
        let mut event = event.clone();
        if !self.prev_kv {
            event.prev_kv = None;
        }
        Some(event)
    }

    /// Notes `events` as sent.
    fn sent(&mut self, events: &[Event]) {
        for kv in events.iter().filter_map(|e| e.kv.as_ref()) {
            if kv.mod_revision > self.sent_revision {
                self.sent_revision = kv.mod_revision;
                self.sent_keys.clear();
            }
            if kv.mod_revision == self.sent_revision {
                self.sent_keys.push(kv.key.clone());
            }
        }
    }
}

/// Runs one watch stream until the client closes it or goes away.
async fn serve(
    node: Node,
    mut requests: Streaming<WatchRequest>,
    tx: mpsc::Sender<Result<WatchResponse, Status>>,
    progress_interval: std::time::Duration,
) {
    let mut progress = tokio::time::interval_at(tokio::time::Instant::now() + progress_interval, progress_interval);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Subscribed before any revision is read, so that no event falls
    // between a watcher's start and its first delivery.
    let mut events = node.subscribe();
    let mut watchers: BTreeMap<i64, Watcher> = BTreeMap::new();
    let mut next_id = 0i64;
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
                        match create(&node, &tx, &mut watchers, &mut next_id, &c, &mut revision).await {
                            Ok(()) => continue,
                            Err(()) => return,
                        }
                    }
                    Some(RequestUnion::CancelRequest(c)) => {
                        watchers.remove(&c.watch_id);
                        WatchResponse { watch_id: c.watch_id, canceled: true, ..Default::default() }
                    }
                    // etcd answers a progress request with watch id -1.
                    Some(RequestUnion::ProgressRequest(_)) => WatchResponse { watch_id: -1, ..Default::default() },
                    None => continue,
                };
                if tx.send(Ok(stamped(&node, revision, reply))).await.is_err() {
                    return;
                }
                continue;
            }
            _ = progress.tick() => {
                for (id, w) in watchers.iter_mut() {
                    if w.progress_notify && w.quiet {
                        let reply = WatchResponse { watch_id: *id, ..Default::default() };
                        if tx.send(Ok(stamped(&node, revision, reply))).await.is_err() {
                            return;
                        }
                    }
                    w.quiet = true;
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
                    // This stream was too slow and live events were dropped:
                    // every watcher catches up from the history the KV
                    // plugin keeps, from just after what it was sent, then
                    // follows live events again (etcd's unsynced watchers).
                    tracing::info!(dropped = n, watchers = watchers.len(), "a watch stream fell behind; catching up from history");
                    for (id, w) in std::mem::take(&mut watchers) {
                        let from = if w.sent_revision > 0 { w.sent_revision } else { w.start };
                        match replay(&node, &tx, id, w, from, &mut revision).await {
                            Ok(Some(w)) => {
                                watchers.insert(id, w);
                            }
                            Ok(None) => {} // compacted past it: cancelled
                            Err(()) => return,
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
        for (id, w) in watchers.iter_mut() {
            let mine: Vec<Event> = decoded.iter().filter_map(|e| w.wants(e)).collect();
            if mine.is_empty() {
                continue;
            }
            w.quiet = false;
            w.sent(&mine);
            let reply = WatchResponse { watch_id: *id, events: mine, ..Default::default() };
            for part in fragments(stamped(&node, revision, reply), w.fragment, node.max_request_bytes()) {
                if tx.send(Ok(part)).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Adds a watcher for `c`: answers its creation, replays the history
/// from its start revision if that is past, and registers it for the live
/// events after that. `Err` when the stream is gone.
async fn create(
    node: &Node,
    tx: &mpsc::Sender<Result<WatchResponse, Status>>,
    watchers: &mut BTreeMap<i64, Watcher>,
    next_id: &mut i64,
    c: &WatchCreateRequest,
    revision: &mut i64,
) -> Result<(), ()> {
    let send = |r: WatchResponse, revision: i64| tx.send(Ok(stamped(node, revision, r)));
    if c.start_revision < 0 {
        // etcd refuses a negative start at once, with watch id -1.
        let reply = WatchResponse {
            watch_id: -1,
            created: true,
            canceled: true,
            cancel_reason: "etcdserver: mvcc: required revision has been compacted".into(),
            ..Default::default()
        };
        return send(reply, *revision).await.map_err(drop);
    }
    let id = if c.watch_id != 0 {
        c.watch_id
    } else {
        while watchers.contains_key(next_id) {
            *next_id += 1;
        }
        *next_id
    };
    let created = WatchResponse { watch_id: id, created: true, ..Default::default() };
    if watchers.contains_key(&id) {
        let reply = WatchResponse {
            canceled: true,
            cancel_reason: "mvcc: duplicate watch ID provided on the WatchStream".into(),
            ..created
        };
        return send(reply, *revision).await.map_err(drop);
    }
    if c.start_revision == 0 || c.start_revision > *revision {
        let start = if c.start_revision == 0 { *revision + 1 } else { c.start_revision };
        watchers.insert(id, Watcher::new(c, start));
        return send(created, *revision).await.map_err(drop);
    }

    // A past start: the history first, page by page.
    send(created, *revision).await.map_err(drop)?;
    if let Some(watcher) = replay(node, tx, id, Watcher::new(c, c.start_revision), c.start_revision, revision).await? {
        watchers.insert(id, watcher);
    }
    Ok(())
}

/// Sends `watcher` (id `id`) the changes from revision `from` on that the
/// KV plugin kept, page by page, and returns it ready for the live events
/// after them; `None` once it is cancelled because `from` was compacted
/// (a response of its own naming the compacted revision, as etcd's), `Err`
/// when the stream is gone.
async fn replay(
    node: &Node,
    tx: &mpsc::Sender<Result<WatchResponse, Status>>,
    id: i64,
    mut watcher: Watcher,
    from: i64,
    revision: &mut i64,
) -> Result<Option<Watcher>, ()> {
    let mut page = EventsRequest {
        key: watcher.key.clone(),
        range_end: watcher.range_end.clone(),
        start_revision: from,
        prev_kv: watcher.prev_kv,
        limit: 0,
    };
    loop {
        let answer = match events_since(node, &page).await {
            Ok(answer) => answer,
            Err(status) => {
                let _ = tx.send(Err(status)).await;
                return Err(());
            }
        };
        *revision = (*revision).max(answer.header.map_or(0, |h| h.revision));
        if answer.compact_revision > 0 {
            let reply = WatchResponse { watch_id: id, canceled: true, compact_revision: answer.compact_revision, ..Default::default() };
            tx.send(Ok(stamped(node, *revision, reply))).await.map_err(drop)?;
            return Ok(None);
        }
        let events: Vec<Event> = answer.events.iter().filter_map(|e| watcher.wants(e)).collect();
        if !events.is_empty() {
            watcher.sent(&events);
            let whole = stamped(node, *revision, WatchResponse { watch_id: id, events, ..Default::default() });
            for part in fragments(whole, watcher.fragment, node.max_request_bytes()) {
                tx.send(Ok(part)).await.map_err(drop)?;
            }
        }
        if !answer.more {
            // Live events take over after the state the last page read.
            let through = answer.header.map_or(*revision, |h| h.revision);
            watcher.start = watcher.start.max(through + 1);
            return Ok(Some(watcher));
        }
        page.start_revision = answer.next_revision;
    }
}

/// `r` with etcd's header at `revision`.
fn stamped(node: &Node, revision: i64, r: WatchResponse) -> WatchResponse {
    WatchResponse { header: header(node, Some(ResponseHeader { revision, ..Default::default() })), ..r }
}

/// `response` as it goes out: whole, or, for a watcher that asked for
/// fragments and an answer over `limit` bytes, in parts of at most `limit`
/// bytes of events (at least one event each), all but the last marked
/// `fragment`, as etcd's `sendFragments` cuts them.
fn fragments(response: WatchResponse, fragment: bool, limit: usize) -> Vec<WatchResponse> {
    if !fragment || response.encoded_len() <= limit || response.events.len() < 2 {
        return vec![response];
    }
    let mut template = response;
    let events = std::mem::take(&mut template.events);
    let mut parts = Vec::new();
    let mut part = template.clone();
    for event in events {
        if !part.events.is_empty() && part.encoded_len() + event.encoded_len() > limit {
            parts.push(WatchResponse { fragment: true, ..std::mem::replace(&mut part, template.clone()) });
        }
        part.events.push(event);
    }
    parts.push(part);
    parts
}

/// One page of the changes the KV plugin kept, from this node's state.
async fn events_since(node: &Node, request: &EventsRequest) -> Result<EventsResponse, Status> {
    match plugin_query(node, KvRequest::RequestEvents(request.clone())).await? {
        KvResponse::ResponseEvents(events) => Ok(events),
        _ => Err(Status::internal("etcdserver: the KV plugin answered a history query with something else")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmraft_proto::mvccpb::KeyValue;

    fn event(key: &str, bytes: usize) -> Event {
        Event { kv: Some(KeyValue { key: key.into(), value: vec![b'v'; bytes], ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn large_answers_split_into_marked_fragments_only_when_asked() {
        let whole = WatchResponse { watch_id: 7, events: (0..5).map(|i| event(&format!("k{i}"), 400)).collect(), ..Default::default() };
        assert_eq!(fragments(whole.clone(), false, 1000), vec![whole.clone()], "not asked: whole");
        assert_eq!(fragments(whole.clone(), true, 1 << 20), vec![whole.clone()], "under the limit: whole");

        let parts = fragments(whole.clone(), true, 1000);
        assert_eq!(parts.len(), 3, "two events of ~410 bytes fit in 1000");
        assert!(parts.iter().all(|p| p.encoded_len() <= 1000 && p.watch_id == 7));
        assert!(parts[..2].iter().all(|p| p.fragment) && !parts[2].fragment, "all but the last are fragments");
        let joined: Vec<Event> = parts.into_iter().flat_map(|p| p.events).collect();
        assert_eq!(joined, whole.events, "every event once, in order");

        // An event over the limit alone still goes out, one per part.
        let big = WatchResponse { events: vec![event("a", 3000), event("b", 3000)], ..Default::default() };
        let parts = fragments(big, true, 1000);
        assert_eq!(parts.iter().map(|p| p.events.len()).collect::<Vec<_>>(), vec![1, 1]);
    }
}
