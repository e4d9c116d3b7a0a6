//! The thread that owns the Raft core: it batches client requests, drives
//! `tick`/`propose`/`read_index`, and carries out each `Ready` in the order
//! the core's contract demands (docs/design/001-raft-core-api.md). This
//! file takes a turn's messages; `loop_ready` carries out the Readies,
//! `proposing` takes the proposals, and `loop_upkeep` does the rest
//! (ticks, read rounds, keep-alives, removal).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use wasmraft_raft::{
    Index, LogId, MembershipChange, Message, MessageBody, NodeId, ProposeError, ProposeOutcome, RawNode,
    ReadId, Role,
};
use wasmraft_storage::{NoteChange, StagedSnapshot, Storage};

use crate::apply::ApplyTask;
use crate::apply_port::ApplyPort;
use crate::forwarding::{self, Forwarding};
use crate::system::SystemCommand;
use crate::error::Error;
use crate::log_writer::LogWriter;
use crate::loop_queue::LoopQueue;
use crate::loop_ready::InFlight;
use crate::loop_upkeep::{Dropped, SlowSyncs, Throttled};
use crate::metrics::{CommitTimer, NodeMetrics, bump};
use crate::node::{Members, NodeStatus};
use crate::transport::Transport;

pub(crate) type ProposeReply = oneshot::Sender<Result<crate::node::Applied, Error>>;
pub(crate) type IndexReply = oneshot::Sender<Result<Index, Error>>;
/// A client's command, its client id and sequence number, and its reply.
pub(crate) type ClientProposal = (Vec<u8>, u64, u64, ProposeReply);

/// Requests to the Raft loop.
pub(crate) enum LoopMsg {
    /// Client proposals wait in the node's queue (see `loop_queue`).
    ProposalsWaiting,
    /// Linearizable reads wait in the node's queue: start a round.
    ReadsWaiting,
    /// A lease read: the commit index if the lease holds, else a ReadIndex.
    LeaseRead {
        reply: IndexReply,
    },
    Step(Message),
    /// A follower's batch `seq` that did not fit this node's budget (see
    /// `forwarding::Budget`): answered `busy`, or "not the leader".
    RefuseForwarded {
        to: NodeId,
        seq: u64,
    },
    /// A snapshot from the leader: its data, then its message to step.
    ReceiveSnapshot(Message, StagedSnapshot),
    /// The outcome of sending a snapshot to a peer.
    SnapshotSent {
        peer: NodeId,
        ok: bool,
    },
    /// A keep-alive for `key`: the leader takes it at log time now, and
    /// the next tick carries it (see `timers::Ticker`).
    Renew {
        key: Vec<u8>,
        reply: ProposeReply,
    },
    /// A node-level command (see `system`), replicated like any other.
    ProposeSystem {
        data: Vec<u8>,
        reply: ProposeReply,
    },
    /// A membership change.
    ChangeMembership {
        change: MembershipChange,
        reply: ProposeReply,
    },
    /// The apply thread learned a member's address.
    SetAddress {
        id: u64,
        address: String,
    },
    /// Hand leadership to a voter.
    TransferLeader {
        to: NodeId,
        reply: oneshot::Sender<Result<(), Error>>,
    },
    /// The configuration and each member's replication progress.
    Members {
        reply: oneshot::Sender<Members>,
    },
    /// The apply worker has applied through this index.
    Applied(Index),
    /// The log writer made the writes of the Ready in flight durable (how
    /// long they took, and the answers it did not send itself), or failed.
    Persisted(Result<crate::log_writer::Written, String>),
    /// Fault injection: make a worker fail.
    InjectFault(crate::node::Worker),
    Shutdown,
}

/// The most entry bytes (proposed or received) one loop turn takes in.
const TURN_BYTES: u64 = 8 << 20;
/// The most inbox messages one loop turn takes in.
const TURN_MESSAGES: usize = 10_000;

impl LoopMsg {
    /// A request that appends to the log (on a leader), a follower's
    /// among them.
    fn is_proposal(&self) -> bool {
        matches!(
            self,
            LoopMsg::ProposeSystem { .. }
                | LoopMsg::ChangeMembership { .. }
                | LoopMsg::Step(Message { body: MessageBody::Propose { .. }, .. })
        )
    }

    /// An AppendEntries from a leader, with or without entries.
    fn is_append(&self) -> bool {
        matches!(self, LoopMsg::Step(Message { body: MessageBody::AppendEntries { .. }, .. }))
    }

    /// The entry bytes this message brings into the log.
    fn entry_bytes(&self) -> u64 {
        match self {
            LoopMsg::Step(Message { body: MessageBody::AppendEntries { entries, .. }, .. }) => {
                entries.iter().map(wasmraft_raft::Entry::size).sum()
            }
            LoopMsg::Step(Message { body: MessageBody::Propose { commands, .. }, .. }) => {
                commands.iter().map(|c| c.len() as u64).sum()
            }
            _ => 0,
        }
    }
}

pub(crate) struct RaftLoop<T: Transport> {
    pub raw: RawNode<Storage>,
    pub storage: Storage,
    pub transport: T,
    pub inbox: Receiver<LoopMsg>,
    /// Where committed entries, waiters and snapshots go (the apply thread,
    /// or the simulation's apply step).
    pub apply: Box<dyn ApplyPort>,
    pub status: Arc<Mutex<NodeStatus>>,
    /// The lease as published for reads that skip the loop.
    pub lease: Arc<crate::lease_share::LeaseShare>,
    pub tick_interval: Duration,
    /// When the next tick is due.
    pub next_tick: Instant,
    /// Leader: when followers not yet told the commit index are told it,
    /// if no append has carried it by then (see `send_commit_updates`).
    pub commit_update_at: Option<Instant>,
    /// Leader: the last entry of each batch a follower forwarded, until
    /// that follower is sent a commit index that covers it. Its clients
    /// wait for it to apply the entry, so it is told the commit at once.
    pub commits_awaited: BTreeMap<NodeId, std::collections::BTreeSet<Index>>,
    pub sync_log: bool,
    /// Reads waiting for the ReadIndex round they joined, with when it
    /// started: a round that never completes (the leader lost its quorum but
    /// not its role yet) is answered with a timeout, not kept forever.
    pub pending_reads: HashMap<ReadId, (Instant, Vec<IndexReply>)>,
    /// Linearizable reads waiting for the next round (see `loop_queue`).
    pub reads: Arc<LoopQueue<IndexReply>>,
    /// Client proposals waiting for the next log write (see `loop_queue`).
    pub client_proposals: Arc<LoopQueue<ClientProposal>>,
    /// How long a read waits for its round.
    pub read_timeout: Duration,
    pub next_read_id: u64,
    /// Log time: stamps commands and deploys, never backwards in log order.
    pub stamp_clock: crate::timers::StampClock,
    /// When to propose the plugin's ticks, as leader.
    pub ticker: crate::timers::Ticker,
    /// The data of the snapshot last received, until the core installs it.
    pub received_snapshot: Option<(LogId, StagedSnapshot)>,
    /// This loop's own inbox, for transport callbacks.
    pub self_tx: std::sync::mpsc::Sender<LoopMsg>,
    /// The most ticks replayed at once after a stall.
    pub max_catch_up_ticks: u64,
    /// Messages the core refused: logged at most once a second.
    pub dropped: Dropped,
    /// Room for peer messages in `inbox`, given back as they are taken.
    pub peer_inbox: Arc<crate::peer_inbox::PeerInbox>,
    /// Ids removed from the cluster, shared with the node handle and
    /// persisted: a node compares each committed configuration with the
    /// one before it.
    pub removed: Arc<parking_lot::RwLock<std::collections::BTreeSet<u64>>>,
    /// Counters and histograms, shared with the node handle.
    pub metrics: Arc<NodeMetrics>,
    /// Proposal batches waiting to commit, for the commit latency.
    pub commit_timer: CommitTimer,
    /// The time the current turn started (the clock every metric of the
    /// loop reads, simulated in the simulation).
    pub now: Instant,
    /// The wall clock when the current turn started, in ms.
    pub wall_ms: u64,
    /// Messages with entries taken from the inbox past a turn's byte
    /// budget, in arrival order: the next turns take them first.
    pub deferred: std::collections::VecDeque<LoopMsg>,
    /// Synced appends slower than half an election timeout: logged at most
    /// every few seconds, as a disk this slow costs followers' heartbeat
    /// answers and the leader its quorum.
    pub slow_syncs: SlowSyncs,
    /// Turns that found the next tick overdue by a fifth of an election timeout.
    pub late_ticks: Throttled,
    /// Entry bytes taken in since the last Ready (at most about
    /// `TURN_BYTES`).
    pub unwritten_bytes: u64,
    /// The election timeout: a leader whose write has been in flight for
    /// longer stops heartbeating.
    pub election_timeout: Duration,
    /// Where a Ready's entries and hard state are written.
    pub writer: LogWriter,
    /// The Ready whose writes the log writer is making durable; the rest of
    /// it waits for [`LoopMsg::Persisted`]. No other Ready is taken
    /// meanwhile.
    pub in_flight: Option<InFlight>,
    /// Proposals sent to the leader as follower, and taken from followers
    /// as leader.
    pub forwarding: Forwarding,
    /// What followers' batches hold of this node's proposal budget.
    pub forwarded_budget: forwarding::Budget,
    /// Leader: where clients' proposals wait in the log uncommitted, for
    /// their retries.
    pub retries: crate::retries::Retries,
    /// The largest command a client may propose (a follower's are checked
    /// again here, as they arrive from the network).
    pub max_request_bytes: usize,
    /// Past this many committed entries not yet applied, a leader refuses
    /// followers' proposals as its node refuses its own clients'.
    pub max_apply_lag: u64,
    /// Whether this loop asked to hear of the next applied batch.
    pub applied_wanted: Arc<crate::apply_port::AppliedWanted>,
    /// A hard state whose only change was the commit index, not written
    /// yet, and when it is saved alone if no write of entries takes it
    /// first (see `save_commit`).
    pub unsaved_commit: Option<(wasmraft_raft::HardState, Instant)>,
}

impl<T: Transport> RaftLoop<T> {
    /// Runs the loop on this thread until shutdown or a fatal error.
    pub fn run(mut self) {
        // Dropped last: requests waiting in the queues or made later get
        // the node's fatal error, also after a panic.
        let _close_queues = CloseQueues(self.reads.clone(), self.client_proposals.clone(), self.status.clone());
        let _fatal_on_panic = crate::node::FatalOnPanic::new(self.status.clone(), "raft");
        // Nobody answers for this node's lease once the loop ends, also by
        // a panic.
        let _withdraw = WithdrawLease(self.lease.clone());
        self.run_turns();
    }

    fn run_turns(&mut self) {
        if self.start(Instant::now()) == Flow::Stop {
            return;
        }
        loop {
            // Deferred messages are work to do now, if the next Ready has
            // room for them: do not wait for more.
            let now = Instant::now();
            let work_waits = !self.deferred.is_empty() || self.client_proposals.is_waiting();
            let timeout = if !work_waits || !self.takes_deferred() {
                let until_tick = self.next_tick.saturating_duration_since(now);
                match self.ticker.sleep_limit(&self.stamp_clock, now) {
                    Some(until_wake) => until_tick.min(until_wake),
                    None => until_tick,
                }
            } else {
                Duration::ZERO
            };
            let timeout = match self.commit_update_at {
                Some(at) => timeout.min(at.saturating_duration_since(now)),
                None => timeout,
            };
            let first = match self.inbox.recv_timeout(timeout) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            if self.turn(first, Instant::now(), wall_clock_ms()) == Flow::Stop {
                return;
            }
        }
    }

    /// Whether the next Ready has room for more entries.
    fn has_room(&self) -> bool {
        self.unwritten_bytes < TURN_BYTES
    }

    /// Whether deferred messages may be taken now: with room for their
    /// entries, and no write in flight (deferred proposals wait for it).
    fn takes_deferred(&self) -> bool {
        self.has_room() && self.in_flight.is_none()
    }

    /// Before the first turn: a node removed before it last stopped stays
    /// stopped.
    pub fn start(&mut self, now: Instant) -> Flow {
        self.next_tick = now + self.tick_interval;
        self.now = now;
        let me = self.raw.status().id.0;
        if self.removed.read().contains(&me) {
            self.stop_as_removed("it was removed from the cluster before it stopped last time");
            return Flow::Stop;
        }
        Flow::Continue
    }

    /// One turn of the loop, without threads or clocks of its own: takes
    /// `first` and whatever else waits in the inbox (within the turn's
    /// caps), ticks for every tick interval due by `now`, and carries out
    /// every `Ready`. `wall_ms` stamps proposals. The thread above and the
    /// deterministic simulation both drive the loop through this.
    pub fn turn(&mut self, first: Option<LoopMsg>, now: Instant, wall_ms: u64) -> Flow {
        let flow = self.take_turn(first, now, wall_ms);
        if flow == Flow::Stop {
            self.lease.publish(None);
            close_queues(&self.reads, &self.client_proposals, &self.status);
        }
        flow
    }

    fn take_turn(&mut self, first: Option<LoopMsg>, now: Instant, wall_ms: u64) -> Flow {
        let me = self.raw.id().0;
        self.now = now;
        self.wall_ms = wall_ms;
        // What arrived while the last Ready was being written joins one
        // batch: one append, one fsync, one ReadIndex round. One Ready
        // takes at most TURN_BYTES of entries (`unwritten_bytes`) and a turn
        // TURN_MESSAGES messages, so that each write is bounded and ticks
        // are never far apart however much is queued. Messages with entries
        // past the byte budget wait in `deferred`, in order, for the next
        // Ready, while the small ones queued behind them (votes, heartbeats
        // and their answers, reads) are taken now: a heartbeat answer
        // behind 64 MiB of proposals must not wait eight fsyncs, or
        // check-quorum finds the quorum silent under load.
        let mut proposals = Vec::new();
        let mut forwarded = Vec::new();
        let mut lease_reads = Vec::new();
        let mut renewals = Vec::new();
        let mut turn_messages = 0usize;
        let mut held = std::collections::VecDeque::new();
        // A Ready's writes may be in flight meanwhile (see `handle_readies`):
        // the core takes messages between a Ready and its `advance`.
        let mut persisted = None;
        // Whether an AppendEntries that arrived before the current message
        // waits, in `held` or in `deferred` (all of which arrived before any
        // message from the inbox).
        let mut append_held = false;
        let mut append_deferred = None;
        // A follower catches up on missed ticks before it steps what waited
        // meanwhile: acknowledging a heartbeat at a stale tick would extend
        // the leader's lease while its own vote guard, counted from that
        // tick, lapses as soon as the ticks catch up. (A leader steps first:
        // acknowledgements waiting in its inbox still count for its quorum,
        // and its lease counts from when each round was sent.)
        if self.raw.role_and_term().0 != Role::Leader {
            self.catch_up_ticks(now);
        }
        let mut next = first;
        loop {
            let (msg, from_inbox) = match next.take() {
                Some(msg) => (msg, true),
                None if turn_messages >= TURN_MESSAGES => break,
                None => match self.takes_deferred().then(|| self.deferred.pop_front()).flatten() {
                    Some(msg) => (msg, false),
                    None => match self.inbox.try_recv() {
                        Ok(msg) => (msg, true),
                        Err(_) => break,
                    },
                },
            };
            turn_messages += 1;
            // Appends keep their order, also those without entries: the
            // leader's empty append checks that the appends before it
            // arrived (`HeartbeatFollowUp::EmptyAppend`), so one that
            // overtook a held append was rejected, and the leader resent its
            // whole window into a full queue. A deferred message is never
            // held again (it is taken only with room and no write in
            // flight), so the held ones stay behind the deferred ones.
            let earlier_append_waits = from_inbox
                && msg.is_append()
                && (append_held || *append_deferred.get_or_insert_with(|| self.deferred.iter().any(LoopMsg::is_append)));
            // Proposals wait for the write in flight: those that arrive
            // during an fsync go to the log together after it, one append
            // to each follower, as when the loop itself waited on the disk
            // (stepped one by one, each would cost an append message).
            if (!self.has_room() && msg.entry_bytes() > 0)
                || (self.in_flight.is_some() && msg.is_proposal())
                || earlier_append_waits
            {
                append_held |= msg.is_append();
                held.push_back(msg);
                continue;
            }
            self.unwritten_bytes += msg.entry_bytes();
            match msg {
                LoopMsg::ProposalsWaiting | LoopMsg::ReadsWaiting => {}
                LoopMsg::LeaseRead { reply } => lease_reads.push(reply),
                LoopMsg::Renew { key, reply } => renewals.push((key, reply)),
                LoopMsg::Step(m @ Message { body: MessageBody::Propose { .. } | MessageBody::ProposeResponse { .. }, .. }) => {
                    self.peer_inbox.release(&m);
                    self.take_forwarding(m, &mut forwarded);
                }
                LoopMsg::Step(m) => {
                    self.peer_inbox.release(&m);
                    let from = m.from.0;
                    let token = match m.body {
                        MessageBody::HeartbeatResponse { token } => Some(token),
                        _ => None,
                    };
                    match self.raw.step(m) {
                        // Heard only what the core took: a refused message
                        // says nothing of its claimed sender.
                        Ok(()) => self.metrics.heard_from(from, now, token),
                        Err(e) => self.dropped.note(&e),
                    }
                }
                LoopMsg::Applied(index) => self.note_applied(index),
                LoopMsg::Persisted(result) => persisted = Some(result),
                LoopMsg::ReceiveSnapshot(m, data) => {
                    if let Err(reason) = self.may_install(&m) {
                        tracing::warn!(
                            from = m.from.0,
                            term = m.term.0,
                            reason,
                            "refused a snapshot"
                        );
                        continue;
                    }
                    let MessageBody::InstallSnapshot { meta } = &m.body else { continue };
                    let last = meta.last;
                    if let Err(e) = self.raw.step(m) {
                        tracing::warn!(error = %e, "dropped a snapshot message");
                    }
                    // The data is kept only if the core took the snapshot:
                    // a stale one in the same drain must not replace the
                    // data of one it accepted.
                    if self.raw.pending_snapshot() == Some(last) {
                        self.received_snapshot = Some((last, data));
                    }
                }
                LoopMsg::SnapshotSent { peer, ok } => {
                    bump(if ok { &self.metrics.snapshots_sent_ok } else { &self.metrics.snapshots_sent_failed });
                    self.raw.report_snapshot(peer, ok);
                }
                LoopMsg::ProposeSystem { mut data, reply } => {
                    let (role, term) = self.raw.role_and_term();
                    if role == Role::Leader {
                        let stamp = self.stamp_clock.stamp(term.0, now, wall_ms);
                        SystemCommand::restamp(&mut data, stamp);
                    }
                    match self.raw.propose(vec![data]) {
                        Ok(range) => {
                            self.apply.send(ApplyTask::Await {
                                index: range.start,
                                term,
                                reply,
                            });
                        }
                        Err(e) => {
                            let _ = reply.send(Err(propose_error(e)));
                        }
                    }
                }
                LoopMsg::ChangeMembership { change, reply } => {
                    let term = self.raw.status().term;
                    match self.raw.propose_membership(change) {
                        Ok(index) => {
                            self.apply.send(ApplyTask::Await { index, term, reply });
                        }
                        Err(e) => {
                            let _ = reply.send(Err(propose_error(e)));
                        }
                    }
                }
                LoopMsg::SetAddress { id, address } => self.transport.set_address(id, &address),
                LoopMsg::RefuseForwarded { to, seq } => {
                    self.peer_inbox.release_refusal();
                    let (role, term) = self.raw.role_and_term();
                    let outcome = if role == Role::Leader { ProposeOutcome::Busy } else { ProposeOutcome::NotLeader };
                    self.transport.send(forwarding::refused(self.raw.id(), term, &[(to, seq)], &outcome));
                }
                LoopMsg::TransferLeader { to, reply } => {
                    let result = self.raw.transfer_leader(to).map_err(|e| match e {
                        e @ ProposeError::TransferInProgress { .. } => Error::Busy(format!("{e}; retry once it ends")),
                        e => propose_error(e),
                    });
                    let _ = reply.send(result);
                }
                LoopMsg::Members { reply } => {
                    let s = self.raw.status();
                    let _ = reply.send(Members {
                        membership: s.membership,
                        leader: s.leader,
                        matched: s
                            .progress
                            .iter()
                            .map(|(id, p)| (*id, p.matched.0))
                            .collect(),
                    });
                }
                LoopMsg::InjectFault(crate::node::Worker::Raft) => panic!("fault injection: the raft thread panics"),
                LoopMsg::InjectFault(crate::node::Worker::Apply) => {
                    self.apply.send(ApplyTask::Fail);
                }
                LoopMsg::Shutdown => return Flow::Stop,
            }
        }
        self.deferred.extend(held);
        // Client proposals wait for the write in flight and for room in the
        // next one, as those from the inbox do above.
        if self.in_flight.is_none() {
            let mut unwritten = self.unwritten_bytes;
            proposals.extend(self.client_proposals.take_while(|(command, ..)| {
                let room = unwritten < TURN_BYTES;
                if room {
                    unwritten += command.len() as u64;
                }
                room
            }));
            self.unwritten_bytes = unwritten;
        }
        // Catch up on every tick missed while this process was stalled
        // (a pause, a slow fsync) before anything reads the core's clock:
        // a leader paused past its lease must not serve lease reads on
        // resume as if no time had passed. (A follower did so above; one
        // that just stepped down may have a tick to take.)
        self.catch_up_ticks(now);
        // Lease reads right after the clock caught up.
        for reply in lease_reads {
            match self.raw.lease_read() {
                Some(index) => {
                    let _ = reply.send(Ok(index));
                }
                // Refused only once the loop stopped, which it has not.
                None => {
                    let _ = self.reads.push(reply);
                }
            }
        }
        // The apply worker failed: a node that cannot apply must not
        // keep leading or voting, not even for the rest of this turn.
        let (fatal, applied) = {
            let st = self.status.lock();
            (st.fatal.clone(), st.applied)
        };
        self.note_applied(Index(applied));
        let leads = self.raw.role_and_term().0 == Role::Leader;
        self.forwarded_budget.applied(applied, leads);
        if !leads {
            self.retries.forget_all();
        }
        if let Some(cause) = fatal {
            tracing::error!(cause = %cause, "the node is fatal; the Raft loop stops leading and voting");
            return Flow::Stop;
        }
        self.propose(proposals, forwarded, wall_ms);
        self.forwarding.forget_abandoned(now);
        self.take_renewals(renewals, now, wall_ms);
        self.propose_tick(now, wall_ms);
        self.start_read_round(now);
        let mut readies = self.handle_readies(persisted);
        // The round this node had in flight was answered (or ended) in this
        // turn: the reads that waited for it start the next one now, as no
        // later read rings the loop until it takes them.
        if readies.is_ok() && self.start_read_round(now) {
            readies = self.handle_readies(None);
        }
        if readies.is_ok() && self.send_commit_updates(now) {
            readies = self.handle_readies(None);
        }
        if readies.is_ok() {
            readies = self.save_commit();
        }
        if let Err(e) = readies {
            tracing::error!(error = %e, "storage failed; stopping the raft loop");
            self.status.lock().set_fatal(e.clone());
            return Flow::Stop;
        }
        // Not while a write that writes or removes the note is in flight:
        // the two would race on the log writer's thread and this one, and
        // this one, from the clock before the write, may land last.
        let note_in_flight = self.in_flight.as_ref().is_some_and(|w| w.note != NoteChange::Keep);
        if !note_in_flight && let Some(note) = self.stamp_clock.note_due(now, wall_ms) {
            // A lost note leaves an older one, which may be further from
            // log time than a new one would be: due again a tick later.
            if let Err(e) = self.storage.note_log_time(&note) {
                tracing::debug!(error = %e, "cannot note log time");
                self.stamp_clock.note_refused(now + self.tick_interval);
            }
        }
        if let Some((leader, term)) = self.transport.refused_as_non_member() {
            // A leader says so only of ids it saw removed; one at this
            // node's term or later speaks for the cluster.
            if term >= self.raw.status().term.0 {
                self.stop_as_removed(&format!(
                    "leader {leader} (term {term}) says it was removed"
                ));
                return Flow::Stop;
            }
        }
        if self.removed.read().contains(&me) {
            self.stop_as_removed("a committed configuration removed it");
            return Flow::Stop;
        }
        self.ask_for_applied_if_waiting();
        Flow::Continue
    }

}


/// Withdraws the published lease when dropped.
struct WithdrawLease(Arc<crate::lease_share::LeaseShare>);

struct CloseQueues(Arc<LoopQueue<IndexReply>>, Arc<LoopQueue<ClientProposal>>, Arc<Mutex<NodeStatus>>);

impl Drop for CloseQueues {
    fn drop(&mut self) {
        close_queues(&self.0, &self.1, &self.2);
    }
}

/// The loop stopped: what waits in its queues, and every later request,
/// gets its error.
fn close_queues(reads: &LoopQueue<IndexReply>, proposals: &LoopQueue<ClientProposal>, status: &Mutex<NodeStatus>) {
    let error = stopped_error(&status.lock());
    for reply in reads.close(error.clone()) {
        let _ = reply.send(Err(error.clone()));
    }
    for (.., reply) in proposals.close(error.clone()) {
        let _ = reply.send(Err(error.clone()));
    }
}

/// What reads get once the loop has stopped.
fn stopped_error(st: &NodeStatus) -> Error {
    match &st.fatal {
        _ if st.removed => Error::Removed,
        Some(cause) => Error::Fatal(cause.clone()),
        None => Error::Stopped,
    }
}

impl Drop for WithdrawLease {
    fn drop(&mut self) {
        self.0.publish(None);
    }
}

/// Whether the loop goes on after a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// Milliseconds since the Unix epoch, for stamping proposals.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(crate) fn propose_error(e: ProposeError) -> Error {
    match e {
        ProposeError::NotLeader { leader } => Error::NotLeader { leader },
        // Leadership is on its way to `to`: nothing changed, and the
        // client retries there (etcd's clients: "leader changed").
        ProposeError::TransferInProgress { to } => Error::NotLeader { leader: Some(to) },
        other => Error::Invalid(other.to_string()),
    }
}
