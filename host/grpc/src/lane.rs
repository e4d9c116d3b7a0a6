//! A lane: the bounded queue of Raft messages to one peer of one kind
//! (control or data), drained by one task into one gRPC stream.
//!
//! Bounded in messages *and* bytes: a count alone let 16 Ki appends of
//! 1.4 MiB entries queue up (22 GiB). A message that does not fit is
//! dropped and counted (`wasmraft_peer_dropped_messages_total`); Raft
//! resends (a lost append is found by the next heartbeat answer, see
//! `wasmraft_raft::ProgressState`). One message always fits an empty lane,
//! whatever its size, so a large entry is never dropped forever.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message as _;
use tokio::sync::Notify;
use wasmraft_proto::v1::RaftMessage;
use wasmraft_raft::MessageBody;

/// The two lanes to a peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LaneKind {
    /// Votes, pre-votes, heartbeats, their answers, TimeoutNow and
    /// ReadIndex traffic: small and latency-critical (a heartbeat late by
    /// an election timeout costs an election).
    Control,
    /// AppendEntries and their answers, forwarded proposals and theirs:
    /// large, and their order matters (the core relies on appends to a
    /// peer arriving in order).
    Data,
}

impl LaneKind {
    /// The lane a message travels on.
    pub fn of(body: &MessageBody) -> LaneKind {
        match body {
            // A proposal's answer goes ahead of the append carrying its
            // entries, so the follower knows whom an entry answers before
            // it applies it.
            MessageBody::AppendEntries { .. }
            | MessageBody::AppendResponse { .. }
            | MessageBody::Propose { .. }
            | MessageBody::ProposeResponse { .. } => LaneKind::Data,
            _ => LaneKind::Control,
        }
    }

    /// The metric label.
    pub fn name(self) -> &'static str {
        match self {
            LaneKind::Control => "control",
            LaneKind::Data => "data",
        }
    }
}

/// What one lane may hold before it drops new messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Messages queued.
    pub messages: usize,
    /// Encoded bytes queued.
    pub bytes: usize,
}

/// The limits of both lanes to each peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// Heartbeats and votes: a few hundred bytes each; room for thousands.
    pub control: Budget,
    /// Appends: 64 MiB, the admission bound of client requests, so one
    /// slow follower holds at most about one admission's worth of entries
    /// on the leader (plus the batch or two being written to its stream).
    pub data: Budget,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            control: Budget {
                messages: 4096,
                bytes: 4 << 20,
            },
            data: Budget {
                messages: 16 * 1024,
                bytes: 64 << 20,
            },
        }
    }
}

/// Why a message was dropped: the metric's `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum DropReason {
    /// The lane's budget was full.
    Full,
    /// The peer was unreachable (or not yet known): stale when it is back.
    Unreachable,
}

impl DropReason {
    fn name(self) -> &'static str {
        match self {
            DropReason::Full => "full",
            DropReason::Unreachable => "unreachable",
        }
    }
}

/// Who a lane belongs to: the metric labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LaneId {
    pub(crate) node: u64,
    pub(crate) peer: u64,
    pub(crate) kind: LaneKind,
}

#[derive(Debug, Default)]
struct Queue {
    messages: VecDeque<(RaftMessage, usize)>,
    bytes: usize,
    closed: bool,
    /// Drops not yet logged, and when the last log line was written.
    unlogged: u64,
    last_log: Option<Instant>,
}

#[derive(Debug)]
struct Lane {
    id: LaneId,
    budget: Budget,
    queue: Mutex<Queue>,
    ready: Notify,
}

/// Process-wide drop counts by lane and reason (every node of a `wasmraft
/// dev` process), kept after a lane closes so the counters only grow.
static DROPPED: Mutex<BTreeMap<(LaneId, DropReason), u64>> = parking_lot::const_mutex(BTreeMap::new());
/// The open lanes, for the queue-depth gauges.
static LANES: Mutex<Vec<Weak<Lane>>> = parking_lot::const_mutex(Vec::new());

/// Opens a lane: the sending half for the transport, the receiving half
/// for the peer's task.
pub(crate) fn lane(id: LaneId, budget: Budget) -> (LaneSender, LaneReceiver) {
    let lane = Arc::new(Lane {
        id,
        budget,
        queue: Mutex::default(),
        ready: Notify::new(),
    });
    let mut lanes = LANES.lock();
    lanes.retain(|l| l.strong_count() > 0);
    lanes.push(Arc::downgrade(&lane));
    (LaneSender(lane.clone()), LaneReceiver(lane))
}

/// The transport's half: queues without waiting. Dropping it closes the
/// lane; the task sends what is queued and ends.
#[derive(Debug)]
pub(crate) struct LaneSender(Arc<Lane>);

impl LaneSender {
    /// Queues `m`, or drops and counts it if the budget is full; whether it
    /// was queued.
    pub(crate) fn push(&self, m: RaftMessage) -> bool {
        let size = m.encoded_len();
        let lane = &self.0;
        let mut q = lane.queue.lock();
        let fits = q.messages.is_empty()
            || (q.messages.len() < lane.budget.messages && q.bytes + size <= lane.budget.bytes);
        if !fits {
            lane.dropped(&mut q, DropReason::Full, 1);
            return false;
        }
        q.bytes += size;
        q.messages.push_back((m, size));
        drop(q);
        lane.ready.notify_one();
        true
    }
}

impl std::ops::Drop for LaneSender {
    fn drop(&mut self) {
        self.0.queue.lock().closed = true;
        self.0.ready.notify_one();
    }
}

/// The peer task's half.
#[derive(Debug)]
pub(crate) struct LaneReceiver(Arc<Lane>);

impl LaneReceiver {
    /// The next batch: at least one message, then more while under
    /// `max_messages` and `max_bytes` (one message alone may be larger).
    /// `None` once the lane is closed and empty.
    pub(crate) async fn next_batch(&self, max_messages: usize, max_bytes: usize) -> Option<Vec<RaftMessage>> {
        loop {
            {
                let mut q = self.0.queue.lock();
                if !q.messages.is_empty() {
                    let mut batch = Vec::new();
                    let mut bytes = 0;
                    while let Some((_, size)) = q.messages.front() {
                        if !batch.is_empty() && (batch.len() >= max_messages || bytes + size > max_bytes) {
                            break;
                        }
                        let (m, size) = q.messages.pop_front().expect("front checked");
                        bytes += size;
                        q.bytes -= size;
                        batch.push(m);
                    }
                    return Some(batch);
                }
                if q.closed {
                    return None;
                }
            }
            // A push between the unlock and here leaves a permit: no lost wake-up.
            self.0.ready.notified().await;
        }
    }

    /// Drops everything queued (the peer is unreachable: by the time it is
    /// back, Raft has sent newer messages); whether the lane is closed.
    pub(crate) fn discard(&self) -> bool {
        let mut q = self.0.queue.lock();
        let n = q.messages.len() as u64;
        q.messages.clear();
        q.bytes = 0;
        if n > 0 {
            self.0.dropped(&mut q, DropReason::Unreachable, n);
        }
        q.closed
    }

    /// Whether the transport closed the lane.
    pub(crate) fn is_closed(&self) -> bool {
        self.0.queue.lock().closed
    }
}

impl Lane {
    /// Counts `n` drops; logs at most once a second per lane.
    fn dropped(&self, q: &mut Queue, why: DropReason, n: u64) {
        *DROPPED.lock().entry((self.id, why)).or_default() += n;
        q.unlogged += n;
        let now = Instant::now();
        if q.last_log.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            tracing::warn!(
                peer = self.id.peer,
                lane = self.id.kind.name(),
                reason = why.name(),
                dropped = q.unlogged,
                queued_messages = q.messages.len(),
                queued_bytes = q.bytes,
                "dropping messages to a peer (Raft resends)"
            );
            q.unlogged = 0;
            q.last_log = Some(now);
        }
    }
}

/// One row of [`stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaneStats {
    /// Messages queued now.
    pub queued_messages: u64,
    /// Bytes queued now.
    pub queued_bytes: u64,
    /// Dropped for a full budget, since the process started.
    pub dropped_full: u64,
    /// Dropped while the peer was unreachable, since the process started.
    pub dropped_unreachable: u64,
}

/// Every lane's figures in this process, by (node, peer, lane).
pub fn stats() -> BTreeMap<(u64, u64, LaneKind), LaneStats> {
    let mut out: BTreeMap<(u64, u64, LaneKind), LaneStats> = BTreeMap::new();
    for ((id, why), n) in DROPPED.lock().iter() {
        let row = out.entry((id.node, id.peer, id.kind)).or_default();
        match why {
            DropReason::Full => row.dropped_full += n,
            DropReason::Unreachable => row.dropped_unreachable += n,
        }
    }
    for lane in LANES.lock().iter().filter_map(Weak::upgrade) {
        let q = lane.queue.lock();
        let row = out.entry((lane.id.node, lane.id.peer, lane.id.kind)).or_default();
        row.queued_messages += q.messages.len() as u64;
        row.queued_bytes += q.bytes as u64;
    }
    out
}
