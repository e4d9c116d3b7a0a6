//! The apply thread: runs committed entries through the state machine,
//! stores their writes with the applied index atomically, then answers the
//! clients that proposed them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use wasmraft_raft::{EntryPayload, Index, LogId, SnapshotMeta, Term};
use wasmraft_runtime::{EntryEvent, EntryInput, PluginInfo, StateView};
use wasmraft_storage::{AppliedRecords, StagedSnapshot, StateWrite, Storage};

use crate::deploy::{self, Loader, Prepared, SharedQueries};
use crate::divergence::HashChecks;
use crate::envelope::Envelope;
use crate::error::Error;
use crate::node::{Applied, NodeStatus};
use crate::raft_loop::{Flow, LoopMsg, ProposeReply};
use crate::system::SystemCommand;
use crate::sessions::{Admission as SessionAdmission, SWEEP_EVERY, Session, Sessions};
use crate::state_machine::{QueryHandler, StateMachine, StorageView};

/// How often an idle apply thread looks whether a keyspace hash is done.
const HASH_POLL: std::time::Duration = std::time::Duration::from_millis(20);

pub(crate) enum ApplyTask {
    /// A client waits for the entry proposed at `index` in `term`.
    Await { index: Index, term: Term, reply: ProposeReply },
    /// The keep-alives carried by the tick proposed at `index` in `term`
    /// wait for it, in its order.
    AwaitRenewals { index: Index, term: Term, replies: Vec<ProposeReply> },
    /// Committed entries, in log order.
    Apply(Vec<wasmraft_raft::Entry>),
    /// Make a snapshot from the leader current; answer on `done`.
    InstallSnapshot { meta: SnapshotMeta, data: StagedSnapshot, done: std::sync::mpsc::Sender<Result<(), String>> },
    /// Fault injection: fail as a storage error would.
    Fail,
    /// These tasks, in order (see [`RegistrationsHeld`](crate::apply_port::RegistrationsHeld)).
    Many(Vec<ApplyTask>),
}

/// The clients waiting for one entry: almost always one, so the others
/// cost no allocation until they come.
pub(crate) struct Waiting {
    first: ProposeReply,
    more: Vec<ProposeReply>,
}

impl Waiting {
    fn all(self) -> impl Iterator<Item = ProposeReply> {
        std::iter::once(self.first).chain(self.more)
    }
}

pub(crate) struct ApplyWorker {
    pub state_machine: Box<dyn StateMachine>,
    pub storage: Storage,
    pub raft: Sender<LoopMsg>,
    pub applied: watch::Sender<u64>,
    pub events: broadcast::Sender<Arc<EntryEvent>>,
    pub status: Arc<Mutex<NodeStatus>>,
    /// Clients waiting for the entry their leader (of that term) placed at
    /// an index. Several may wait at one index: a follower's forwarded
    /// entry from one term and its own from a later one as leader, and a
    /// retry of a proposal the leader found still in its log.
    pub waiters: BTreeMap<(Index, Term), Waiting>,
    /// Keep-alives waiting for the tick that carries them.
    pub renewal_waiters: BTreeMap<Index, (Term, Vec<ProposeReply>)>,
    pub last_applied: LogId,
    pub sessions: Sessions,
    /// Snapshot after this many applied entries (0: never)...
    pub snapshot_entries: u64,
    /// ...or once the commands applied since carry this many bytes (0: no
    /// byte bound).
    pub snapshot_log_bytes: u64,
    /// Command bytes applied since the latest snapshot (or the start).
    pub bytes_since_snapshot: u64,
    /// Whether a due snapshot first has RocksDB flush its memtables in the
    /// background, so that its own flush, on this thread, has little left.
    pub flush_ahead: FlushAhead,
    /// The index of the latest snapshot.
    pub snapshot_index: u64,
    /// Member addresses learned from the log, shared with the node handle.
    pub addresses: Arc<parking_lot::RwLock<BTreeMap<u64, String>>>,
    /// Loads deployed plugins; `None` for a native state machine.
    pub loader: Option<Loader>,
    /// The query side of the running plugin, swapped on deploy.
    pub queries: SharedQueries,
    /// The plugin the node was started with: it runs again if a snapshot
    /// predates every deploy.
    pub boot_wasm: Arc<[u8]>,
    /// Keyspace hashes and their comparison with the leader's.
    pub hashes: HashChecks,
    /// Batches applied and their latency, the plugin's fuel and traps,
    /// snapshots installed.
    pub metrics: Arc<crate::metrics::NodeMetrics>,
    /// Progress lines while the entries committed before the start replay.
    pub replay: Option<crate::progress::Replay>,
    /// The plugin's wake-up, published to the Raft loop.
    pub wake: Arc<crate::timers::WakeUp>,
    /// Whether the Raft loop asked to hear of the next applied batch.
    pub applied_wanted: Arc<crate::apply_port::AppliedWanted>,
}

impl ApplyWorker {
    /// Runs the worker on this thread until its channel closes or it fails.
    pub fn run(mut self, tasks: Receiver<ApplyTask>) {
        let _fatal_on_panic = crate::node::FatalOnPanic::new(self.status.clone(), "apply");
        // A thread of its own may wait for its tasks; the simulation's
        // driver may not.
        self.hashes.in_background();
        loop {
            // Whenever nothing is queued, before waiting: under load the
            // registrations of new proposals (`Await`) come between two
            // batches, and the next batch should still find its instance
            // ready (`idle` does nothing when it is).
            let task = match tasks.try_recv() {
                Ok(task) => task,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    if self.idle() == Flow::Stop {
                        return;
                    }
                    if self.hashes.running() {
                        // Back to `idle` now and then, which records the
                        // hash once its pass is done.
                        match tasks.recv_timeout(HASH_POLL) {
                            Ok(task) => task,
                            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
                        }
                    } else {
                        match tasks.recv() {
                            Ok(task) => task,
                            Err(_) => return,
                        }
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => return,
            };
            if self.handle(task) == Flow::Stop {
                return;
            }
        }
    }

    /// Carries out one task, without threads of its own (the thread above
    /// and the deterministic simulation both drive the worker through it).
    /// `Stop` once the worker failed: the node is fatal.
    pub fn handle(&mut self, task: ApplyTask) -> Flow {
        match task {
            ApplyTask::Await { index, term, reply } => {
                if index <= self.last_applied.index {
                    // Cannot happen (registration precedes commit: a leader
                    // registers before its Ready, a follower on the answer
                    // that precedes the append); the entry may have
                    // applied, so its outcome is unknown.
                    let _ = reply.send(Err(Error::Timeout));
                } else {
                    match self.waiters.entry((index, term)) {
                        std::collections::btree_map::Entry::Vacant(e) => {
                            e.insert(Waiting { first: reply, more: Vec::new() });
                        }
                        std::collections::btree_map::Entry::Occupied(mut e) => e.get_mut().more.push(reply),
                    }
                }
            }
            ApplyTask::AwaitRenewals { index, term, replies } => {
                if index <= self.last_applied.index {
                    for reply in replies {
                        let _ = reply.send(Err(Error::ProposalDropped));
                    }
                } else {
                    self.renewal_waiters.insert(index, (term, replies));
                }
            }
            ApplyTask::InstallSnapshot { meta, data, done } => {
                let result = self.install_snapshot(meta, data);
                let failed = result.is_err();
                let _ = done.send(result);
                if failed {
                    return Flow::Stop;
                }
            }
            ApplyTask::Fail => {
                self.fail("fault injection: the apply worker failed".to_string());
                return Flow::Stop;
            }
            ApplyTask::Many(tasks) => {
                for task in tasks {
                    if self.handle(task) == Flow::Stop {
                        return Flow::Stop;
                    }
                }
            }
            ApplyTask::Apply(entries) => {
                let result = self
                    .finish_hash(false)
                    .and_then(|()| split_batches(entries)
                    .into_iter()
                    .try_for_each(|batch| {
                        let (started, entries) = (std::time::Instant::now(), batch.len());
                        self.bytes_since_snapshot += batch.iter().map(command_bytes).sum::<u64>();
                        self.apply(batch)?;
                        self.metrics.applied_batch(entries, started.elapsed());
                        if let Some(replay) = &mut self.replay {
                            if !replay.applied(self.last_applied.index.0) {
                                self.replay = None;
                            }
                        }
                        self.maybe_snapshot()
                    }))
                    .map(|()| self.maybe_propose_hash_check());
                if let Err(fatal) = result {
                    self.fail(fatal);
                    return Flow::Stop;
                }
            }
        }
        Flow::Continue
    }

    /// Answers `why` to the proposals and keep-alives still waiting at or
    /// below `last`: their entries never came (a replaced log suffix:
    /// dropped), or a snapshot covered them (outcome unknown).
    fn drop_waiters_through(&mut self, last: Index, why: Error) {
        let later = self.waiters.split_off(&(Index(last.0.saturating_add(1)), Term(0)));
        for reply in std::mem::replace(&mut self.waiters, later).into_values().flat_map(Waiting::all) {
            let _ = reply.send(Err(why.clone()));
        }
        let later = self.renewal_waiters.split_off(&Index(last.0.saturating_add(1)));
        for reply in std::mem::replace(&mut self.renewal_waiters, later).into_values().flat_map(|(_, r)| r) {
            let _ = reply.send(Err(why.clone()));
        }
    }

    /// Nothing is queued: prepare the state machine's next call.
    pub fn idle(&mut self) -> Flow {
        if let Err(fatal) = self.finish_hash(false) {
            self.fail(fatal);
            return Flow::Stop;
        }
        match self.state_machine.idle() {
            Ok(()) => Flow::Continue,
            Err(fatal) => {
                self.fail(fatal.0);
                Flow::Stop
            }
        }
    }

    /// Records an unrecoverable failure (the first one wins) and answers
    /// every waiting client with it. The Raft loop sees it and stops too.
    fn fail(&mut self, fatal: String) {
        tracing::error!(error = %fatal, "apply failed; this node stops applying");
        self.status.lock().set_fatal(fatal.clone());
        // Wake the Raft loop so that it stops leading now, not at its next tick.
        let _ = self.raft.send(LoopMsg::Applied(self.last_applied.index));
        for reply in std::mem::take(&mut self.waiters).into_values().flat_map(Waiting::all) {
            let _ = reply.send(Err(Error::Fatal(fatal.clone())));
        }
        for reply in std::mem::take(&mut self.renewal_waiters).into_values().flat_map(|(_, r)| r) {
            let _ = reply.send(Err(Error::Fatal(fatal.clone())));
        }
    }

    /// Records the keyspace hashes of the checks whose passes are done, in
    /// order (`wait`: waits for the oldest); the leader then proposes each
    /// to the others.
    fn finish_hash(&mut self, mut wait: bool) -> Result<(), String> {
        while let Some(done) = self.hashes.finished(wait)? {
            wait = false;
            if let Some(expect) = self.hashes.record(done, &self.status) {
                let (reply, _) = tokio::sync::oneshot::channel();
                let _ = self.raft.send(LoopMsg::ProposeSystem { data: expect.encode(), reply });
            }
        }
        Ok(())
    }

    fn maybe_snapshot(&mut self) -> Result<(), String> {
        let entries_due = self.snapshot_entries > 0
            && self.last_applied.index.0 >= self.snapshot_index + self.snapshot_entries;
        let bytes_due = self.snapshot_log_bytes > 0 && self.bytes_since_snapshot >= self.snapshot_log_bytes;
        if !entries_due && !bytes_due {
            return Ok(());
        }
        match self.flush_ahead {
            FlushAhead::NotAsked => {
                let unflushed = self.storage.unflushed_bytes().map_err(|e| format!("reading RocksDB's memtables: {e}"))?;
                if unflushed >= FLUSH_AHEAD_BYTES {
                    self.storage.flush_ahead_of_snapshot().map_err(|e| format!("flushing ahead of a snapshot: {e}"))?;
                    self.flush_ahead = FlushAhead::AskedAt(std::time::Instant::now());
                    return Ok(());
                }
            }
            // Under a write load that keeps flushes coming, not for ever.
            FlushAhead::AskedAt(asked) if asked.elapsed() < FLUSH_AHEAD_WAIT => {
                if self.storage.flushes_pending().map_err(|e| format!("reading RocksDB's flushes: {e}"))? {
                    return Ok(());
                }
            }
            FlushAhead::AskedAt(_) | FlushAhead::Never => {}
        }
        let started = std::time::Instant::now();
        let meta = self.storage.take_snapshot().map_err(|e| format!("taking a snapshot: {e}"))?;
        let took = started.elapsed();
        self.metrics.snapshot_duration.observe(took);
        tracing::info!(index = meta.last.index.0, log_bytes = self.bytes_since_snapshot, took = ?took,
            "took a snapshot and compacted the log");
        self.snapshot_index = meta.last.index.0;
        self.bytes_since_snapshot = 0;
        self.flush_ahead.reset();
        Ok(())
    }

    fn install_snapshot(&mut self, meta: SnapshotMeta, data: StagedSnapshot) -> Result<(), String> {
        if data.meta() != &meta {
            return Err(format!("the staged snapshot at {} is not the one to install ({})", data.meta().last, meta.last));
        }
        let sessions = Sessions::load(data.sessions().to_vec())?;
        let keys = data.state_keys();
        // The snapshot's plugin is ready before its state is written; both
        // switch together under the query lock (see `SharedQueries`).
        let plugin = self.snapshot_plugin(&data)?;
        {
            let mut queries = self.queries.write();
            if let Err(e) = self.storage.install_snapshot(data) {
                // Fatal before the lock goes: a query waiting on it would
                // read the half-installed state (see `Node::query_applied`).
                let cause = format!("installing a snapshot: {e}");
                self.status.lock().set_fatal(cause.clone());
                return Err(cause);
            }
            if let Some((state_machine, new_queries, info, deployed_at)) = plugin {
                *queries = new_queries;
                self.state_machine = state_machine;
                let mut status = self.status.lock();
                status.plugin = info;
                status.deployed_at = deployed_at;
            }
        }
        tracing::info!(index = meta.last.index.0, keys, "installed a snapshot from the leader");
        crate::metrics::bump(&self.metrics.snapshots_installed);
        self.publish_addresses(self.storage.addresses().map_err(|e| e.to_string())?);
        self.sessions = sessions;
        self.last_applied = meta.last;
        self.snapshot_index = meta.last.index.0;
        self.bytes_since_snapshot = 0;
        self.flush_ahead.reset();
        // Proposals waiting at covered indexes were decided by the leader's
        // log; their outcome is not known here.
        self.drop_waiters_through(meta.last.index, Error::Timeout);
        self.publish_stored_wake_up()?;
        self.status.lock().applied = meta.last.index.0;
        self.applied.send_replace(meta.last.index.0);
        let _ = self.raft.send(LoopMsg::Applied(meta.last.index));
        Ok(())
    }

    fn apply(&mut self, entries: Vec<wasmraft_raft::Entry>) -> Result<(), String> {
        let entries: Vec<_> = entries.into_iter().filter(|e| e.log_id.index > self.last_applied.index).collect();
        let Some(last) = entries.last().map(|e| e.log_id) else { return Ok(()) };
        // A tick is alone in its batch (`split_batches`).
        if let [only] = &entries[..] {
            if let EntryPayload::Normal(bytes) = &only.payload {
                if let Some(Ok(SystemCommand::Tick { now_ms, grace_until_ms, renewals })) = SystemCommand::decode(bytes) {
                    return self.apply_tick(only.log_id, now_ms, grace_until_ms, renewals);
                }
            }
        }
        // Decide each entry's fate: run by the plugin, answered from its
        // client's session, or nothing to run (no-op, membership).
        let mut inputs = Vec::with_capacity(entries.len());
        let mut plans = Vec::with_capacity(entries.len());
        // Tagged commands of this batch not yet in the session table.
        let mut in_batch: HashMap<u64, (u64, usize)> = HashMap::new();
        // A deploy or a hash check ends its batch (see `split_batches`).
        let mut deploy: Option<Prepared> = None;
        let mut hash_at: Option<u64> = None;
        // Membership and addresses go into the same atomic write as the
        // applied index (and are published only once it is durable).
        let mut records = AppliedRecords::default();
        for (pos, e) in entries.iter().enumerate() {
            let plan = match &e.payload {
                EntryPayload::Normal(bytes) if SystemCommand::decode(bytes).is_some() => {
                    match SystemCommand::decode(bytes).expect("checked") {
                        Ok(SystemCommand::SetAddress { id, address }) => {
                            records.addresses.push((id, address));
                            Plan::Done(Ok(Vec::new()))
                        }
                        Ok(SystemCommand::DeployPlugin { timestamp_ms, wasm }) => {
                            let at = EntryInput { index: e.log_id.index.0, term: e.log_id.term.0, timestamp_ms, command: Vec::new() };
                            match self.prepare_deploy(wasm, &at)? {
                                Ok(prepared) => {
                                    let response = prepared.record.sha256.clone().into_bytes();
                                    deploy = Some(prepared);
                                    Plan::Done(Ok(response))
                                }
                                Err(reason) => Plan::Done(Err(Error::Invalid(reason))),
                            }
                        }
                        Ok(SystemCommand::CheckHash) => {
                            hash_at = Some(e.log_id.index.0);
                            Plan::Done(Ok(Vec::new()))
                        }
                        Ok(SystemCommand::ExpectHash { index, hash }) => {
                            self.hashes.compare(index, &hash, &self.status);
                            Plan::Done(Ok(Vec::new()))
                        }
                        // Alone in its batch, and applied above.
                        Ok(SystemCommand::Tick { .. }) => Plan::Done(Err(Error::Invalid("a tick in a batch".into()))),
                        Err(m) => Plan::Done(Err(Error::Invalid(m))),
                    }
                }
                EntryPayload::Normal(bytes) => match Envelope::decode(bytes) {
                    Err(m) => Plan::Done(Err(Error::Invalid(m))),
                    Ok(env) => {
                        let admission = match in_batch.get(&env.client_id) {
                            Some(&(seq, first)) if env.client_id != 0 && seq == env.sequence => {
                                Admission::SameAs(first)
                            }
                            Some(&(seq, _)) if env.client_id != 0 && seq > env.sequence => {
                                Admission::Session(SessionAdmission::Stale { last: seq })
                            }
                            _ if env.client_id != 0 => Admission::Session(self.sessions.admit(env.client_id, env.sequence)),
                            _ => Admission::Session(SessionAdmission::Apply),
                        };
                        match admission {
                            Admission::SameAs(first) => Plan::SameAs(first),
                            Admission::Session(SessionAdmission::Duplicate { outcome, index }) => {
                                Plan::Duplicate { outcome, index }
                            }
                            Admission::Session(SessionAdmission::Stale { last }) => Plan::Done(Err(Error::Invalid(format!(
                                "sequence {} of client {} is older than its last applied command ({last})",
                                env.sequence, env.client_id
                            )))),
                            Admission::Session(SessionAdmission::Apply) => {
                                if env.client_id != 0 {
                                    in_batch.insert(env.client_id, (env.sequence, pos));
                                }
                                inputs.push(EntryInput {
                                    index: e.log_id.index.0,
                                    term: e.log_id.term.0,
                                    timestamp_ms: env.timestamp_ms,
                                    command: env.command,
                                });
                                Plan::Run { client: env.client_id, sequence: env.sequence, timestamp_ms: env.timestamp_ms }
                            }
                        }
                    }
                },
                EntryPayload::Membership(m) => {
                    records.membership = Some(m.clone());
                    Plan::Done(Ok(Vec::new()))
                }
                EntryPayload::Blank => Plan::Done(Err(Error::ProposalDropped)),
            };
            plans.push(plan);
        }
        let batch = if inputs.is_empty() {
            Default::default()
        } else {
            let view: Arc<dyn StateView> = Arc::new(StorageView(self.storage.apply_reader()));
            self.state_machine.apply(view, &inputs).map_err(|f| f.0)?
        };
        self.metrics.plugin_fuel.fetch_add(batch.fuel_used, std::sync::atomic::Ordering::Relaxed);
        let traps = batch.outcomes.iter().filter(|o| matches!(o, Err(wasmraft_runtime::EntryError::Trap(_)))).count();
        self.metrics.plugin_traps.fetch_add(traps as u64, std::sync::atomic::Ordering::Relaxed);

        // Outcomes in entry order, with the index each command applied at
        // (a retry's is the first copy's); sessions record the new ones.
        let mut outcomes: Vec<Result<Vec<u8>, Error>> = Vec::with_capacity(entries.len());
        let mut applied_at: Vec<u64> = Vec::with_capacity(entries.len());
        let mut changed: BTreeMap<u64, Option<Vec<u8>>> = BTreeMap::new();
        let mut plugin_outcomes = batch.outcomes.into_iter();
        for (e, plan) in entries.iter().zip(plans) {
            let mut at = e.log_id.index.0;
            let outcome = match plan {
                Plan::Done(o) => o,
                Plan::Duplicate { outcome, index } => {
                    at = index;
                    outcome
                }
                Plan::SameAs(first) => {
                    at = applied_at[first];
                    outcomes[first].clone()
                }
                Plan::Run { client, sequence, timestamp_ms, .. } => {
                    let o = plugin_outcomes.next().expect("one outcome per input").map_err(Error::from);
                    if client != 0 {
                        let session = Session { sequence, index: e.log_id.index.0, timestamp_ms, outcome: o.clone() };
                        changed.insert(client, Some(session.encode()));
                        self.sessions.record(client, session);
                    }
                    o
                }
            };
            outcomes.push(outcome);
            applied_at.push(at);
            if let Some(stamp) = crate::timers::entry_stamp(e) {
                records.log_time_ms = records.log_time_ms.max(Some(stamp));
            }
            // Sweep at fixed indexes, by that entry's own leader timestamp, so
            // every replica sweeps the same sessions whatever its batching.
            if e.log_id.index.0 % SWEEP_EVERY == 0 {
                if let Some(now) = entry_timestamp(e) {
                    for client in self.sessions.sweep(now) {
                        changed.insert(client, None);
                    }
                }
            }
        }

        match deploy {
            Some(prepared) => {
                // A deploy is alone in its batch (`split_batches`); a session
                // sweep may still fall on its index. (Its stamp is not kept
                // as log time: the entries after it carry log time on.)
                debug_assert!(records.membership.is_none() && records.addresses.is_empty());
                self.switch_plugin(last, prepared, &changed)?;
                self.publish_stored_wake_up()?;
            }
            None => self
                .storage
                .apply_with_records(
                    last,
                    batch.writes.iter().map(|w| StateWrite { key: &w.key, value: w.value.as_deref() }),
                    changed.iter().map(|(c, v)| (*c, v.as_deref())),
                    &records,
                )
                .map_err(|e| e.to_string())?,
        }
        // Before the Raft loop hears of this index: it never holds a
        // wake-up older than what it knows applied.
        if let Some(change) = wasmraft_runtime::TimerRecord::in_writes(&batch.writes)? {
            self.wake.publish(change.and_then(|r| r.wake_at_ms));
        }
        self.last_applied = last;
        self.publish_addresses(records.addresses);
        if let Some(index) = hash_at {
            // The view of exactly this index, hashed while applies go on.
            while self.hashes.full() {
                self.finish_hash(true)?;
            }
            let leading = self.status.lock().role == wasmraft_raft::Role::Leader;
            self.hashes.start(index, self.storage.consistent_reader(), leading);
            self.finish_hash(false)?;
        }

        for ((e, outcome), at) in entries.iter().zip(outcomes).zip(applied_at) {
            let mut result = Some(outcome.map(|response| Applied { index: at, response }));
            while let Some((&(index, term), _)) = self.waiters.first_key_value() {
                if index > e.log_id.index {
                    break;
                }
                let waiting = self.waiters.pop_first().expect("just seen").1;
                // Another leader's entry at this index means ours was dropped.
                let ours = index == e.log_id.index && term == e.log_id.term;
                for reply in waiting.more {
                    let _ = reply.send(if ours { result.clone().expect("not taken yet") } else { Err(Error::ProposalDropped) });
                }
                let _ = waiting.first.send(result.take_if(|_| ours).unwrap_or(Err(Error::ProposalDropped)));
            }
        }
        self.finish_applied(last.index, batch.events);
        Ok(())
    }

    /// After a batch is durable up to `last`: answers the waiters whose
    /// entries never came (a replaced log suffix), publishes `events`, and
    /// tells the node and the Raft loop.
    pub(crate) fn finish_applied(&mut self, last: Index, events: Vec<EntryEvent>) {
        self.drop_waiters_through(last, Error::ProposalDropped);
        for ev in events {
            let _ = self.events.send(Arc::new(ev));
        }
        self.status.lock().applied = last.0;
        self.applied.send_replace(last.0);
        // After the index is published (see `AppliedWanted`).
        if self.applied_wanted.take() {
            let _ = self.raft.send(LoopMsg::Applied(last));
        }
    }
}

impl ApplyWorker {
    fn prepare_deploy(&mut self, wasm: Vec<u8>, at: &EntryInput) -> Result<Result<Prepared, String>, String> {
        let Some(loader) = &self.loader else {
            return Ok(Err("this node runs a native state machine; plugins cannot be deployed to it".into()));
        };
        let previous = self.status.lock().plugin.clone();
        let view: Arc<dyn StateView> = Arc::new(StorageView(self.storage.apply_reader()));
        let prepared = deploy::prepare(loader, wasm, at, view, &previous)?;
        match &prepared {
            Ok(p) => tracing::info!(index = at.index, plugin = %p.record.name, version = %p.record.version,
                sha256 = %p.record.sha256, migration_writes = p.migration.len(), "deploying a plugin"),
            Err(reason) => tracing::warn!(index = at.index, %reason, "refused a plugin deploy"),
        }
        Ok(prepared)
    }

    /// Hands durably recorded member addresses to the node handle and the
    /// Raft loop's transport.
    fn publish_addresses(&self, addresses: Vec<(u64, String)>) {
        for (id, address) in addresses {
            self.addresses.write().insert(id, address.clone());
            let _ = self.raft.send(LoopMsg::SetAddress { id, address });
        }
    }

    /// Stores a deploy with its applied index and switches to the plugin.
    fn switch_plugin(
        &mut self,
        last: LogId,
        p: Prepared,
        sessions: &BTreeMap<u64, Option<Vec<u8>>>,
    ) -> Result<(), String> {
        let sessions = sessions.iter().map(|(c, v)| (*c, v.as_deref()));
        {
            let mut queries = self.queries.write();
            let migration = p.migration.iter().map(|w| StateWrite { key: &w.key, value: w.value.as_deref() });
            self.storage
                .deploy_plugin(last, migration, sessions, &p.record, &p.wasm)
                .map_err(|e| e.to_string())?;
            *queries = p.queries;
        }
        let info = p.applier.plugin().info().clone();
        self.state_machine = Box::new(p.applier);
        let mut status = self.status.lock();
        status.plugin = info;
        status.deployed_at = p.record.deployed_at;
        Ok(())
    }

    /// The plugin a snapshot runs, loaded and instantiated, if it is not
    /// the one running now.
    #[allow(clippy::type_complexity)]
    fn snapshot_plugin(
        &self,
        data: &StagedSnapshot,
    ) -> Result<Option<(Box<dyn StateMachine>, Arc<dyn QueryHandler>, PluginInfo, u64)>, String> {
        let Some(loader) = &self.loader else { return Ok(None) };
        let deployed = data.deployed_plugin().map_err(|e| format!("the snapshot's plugin: {e}"))?;
        let (wasm, deployed_at): (Vec<u8>, u64) = match deployed {
            Some((record, wasm)) => (wasm, record.deployed_at),
            None => (self.boot_wasm.to_vec(), 0),
        };
        let current = self.status.lock().plugin.sha256.clone();
        let plugin = loader.load(&wasm).map_err(|e| format!("loading the plugin of a snapshot: {e}"))?;
        if plugin.info().sha256 == current {
            return Ok(None);
        }
        tracing::info!(plugin = %plugin.info().name, sha256 = %plugin.info().sha256, deployed_at, "switching to the plugin of the snapshot");
        let info = plugin.info().clone();
        let (state_machine, queries) = deploy::instantiate(plugin)?;
        Ok(Some((state_machine, queries, info, deployed_at)))
    }

    /// On the leader, every `hash_check_entries` applied entries: propose a
    /// keyspace hash check.
    fn maybe_propose_hash_check(&mut self) {
        let is_leader = self.status.lock().role == wasmraft_raft::Role::Leader;
        if self.hashes.due(self.last_applied.index.0, is_leader) {
            let (reply, _) = tokio::sync::oneshot::channel();
            let _ = self.raft.send(LoopMsg::ProposeSystem { data: SystemCommand::CheckHash.encode(), reply });
        }
    }
}

/// Cuts committed entries into batches so that a deploy is alone in its
/// batch and a hash check ends one: the plugin changes, and the keyspace is
/// hashed, exactly at their index.
fn split_batches(entries: Vec<wasmraft_raft::Entry>) -> Vec<Vec<wasmraft_raft::Entry>> {
    let mut batches = Vec::new();
    let mut current = Vec::new();
    for e in entries {
        let ends = matches!(&e.payload, EntryPayload::Normal(b) if SystemCommand::ends_batch(b));
        if ends && !current.is_empty() {
            batches.push(std::mem::take(&mut current));
        }
        current.push(e);
        if ends {
            batches.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// How the apply thread handles one committed entry.
enum Plan {
    /// Run by the plugin (its outcomes come back in entry order).
    Run { client: u64, sequence: u64, timestamp_ms: u64 },
    /// A retry of the entry at this position of the same batch.
    SameAs(usize),
    /// A retry of a command applied earlier, at `index`.
    Duplicate { outcome: Result<Vec<u8>, Error>, index: u64 },
    /// Decided without the plugin.
    Done(Result<Vec<u8>, Error>),
}

enum Admission {
    SameAs(usize),
    Session(SessionAdmission),
}

fn entry_timestamp(e: &wasmraft_raft::Entry) -> Option<u64> {
    match &e.payload {
        EntryPayload::Normal(b) => Envelope::decode(b).ok().map(|env| env.timestamp_ms),
        _ => None,
    }
}

/// Whether a due snapshot first has RocksDB flush the memtables in the
/// background ([`ApplyWorker::maybe_snapshot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FlushAhead {
    /// Each snapshot at once (the simulation: when RocksDB's own threads
    /// finish a flush is not for it to replay).
    Never,
    /// No flush asked for the next snapshot yet.
    NotAsked,
    /// A flush was asked for at this time.
    AskedAt(std::time::Instant),
}

impl FlushAhead {
    /// A snapshot was taken or installed: the next one asks again.
    fn reset(&mut self) {
        if *self != FlushAhead::Never {
            *self = FlushAhead::NotAsked;
        }
    }
}

/// Memtables smaller than this are flushed by the snapshot itself, at once
/// (a few milliseconds); larger ones first in the background.
const FLUSH_AHEAD_BYTES: u64 = 4 << 20;
/// How long a due snapshot waits for the flush it asked for before it is
/// taken anyway.
const FLUSH_AHEAD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The bytes of an entry's command, as they count towards the next snapshot.
fn command_bytes(entry: &wasmraft_raft::Entry) -> u64 {
    match &entry.payload {
        EntryPayload::Normal(bytes) => bytes.len() as u64,
        EntryPayload::Blank | EntryPayload::Membership(_) => 0,
    }
}
