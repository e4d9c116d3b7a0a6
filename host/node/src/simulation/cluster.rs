//! The simulated cluster's nodes: the real Raft loop, apply worker, RocksDB
//! storage and KV plugin of each node, with no threads. The world moves
//! messages between them and decides when each one takes a turn.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use wasmraft_raft::{Message, SnapshotMeta};
use wasmraft_storage::SnapshotPart;

use crate::apply::{ApplyTask, ApplyWorker};
use crate::apply_port::ApplyPort;
use crate::config::NodeConfig;
use crate::node::{Node, Parts};
use crate::raft_loop::{Flow, RaftLoop};
use crate::transport::{SnapshotDone, SnapshotLoader, Transport};

/// What a node sent, waiting for the world to route it.
pub(super) enum Outgoing {
    Message(Message),
    /// A snapshot with its parts (read when sent, as they would be on the
    /// wire) and the sender's completion callback.
    Snapshot(Message, Vec<SnapshotPart>, SnapshotDone),
}

/// Every node's outgoing messages, in the order they were sent.
pub(super) type Outbox = Arc<Mutex<Vec<(u64, Outgoing)>>>;

/// The simulated network's end in a node: it only queues.
pub(super) struct SimTransport {
    id: u64,
    outbox: Outbox,
}

impl Transport for SimTransport {
    fn send(&mut self, messages: Vec<Message>) {
        let mut out = self.outbox.lock();
        out.extend(messages.into_iter().map(|m| (self.id, Outgoing::Message(m))));
    }

    fn send_snapshot(&mut self, message: Message, load: SnapshotLoader, done: SnapshotDone) {
        let parts = load().and_then(|mut reader| {
            std::iter::from_fn(|| reader.next_part().transpose()).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())
        });
        match parts {
            Ok(parts) => self.outbox.lock().push((self.id, Outgoing::Snapshot(message, parts, done))),
            Err(_) => done(false),
        }
    }
}

/// The apply worker of a simulated node, with the tasks the Raft loop gave
/// it and has not seen carried out yet: the world runs them when it chooses,
/// so that applying lags the log as it does on a busy node.
pub(super) struct ApplyQueue {
    worker: ApplyWorker,
    tasks: VecDeque<ApplyTask>,
    /// The worker failed: it takes no more tasks.
    stopped: bool,
}

impl ApplyQueue {
    /// Runs up to `max` queued tasks; lets the worker prepare its next call
    /// when the queue runs dry. Whether the worker is still running.
    pub fn run(&mut self, max: usize) -> bool {
        for _ in 0..max {
            if self.stopped {
                break;
            }
            let Some(task) = self.tasks.pop_front() else { break };
            self.stopped = self.worker.handle(task) == Flow::Stop;
        }
        if self.tasks.is_empty() && !self.stopped {
            self.stopped = self.worker.idle() == Flow::Stop;
        }
        !self.stopped
    }

    pub fn queued(&self) -> usize {
        self.tasks.len()
    }
}

/// The Raft loop's port to a simulated apply worker.
#[derive(Clone)]
pub(super) struct ApplyStep(pub Arc<Mutex<ApplyQueue>>);

impl ApplyPort for ApplyStep {
    fn send(&mut self, task: ApplyTask) {
        self.0.lock().tasks.push_back(task);
    }

    fn install_snapshot(&mut self, meta: SnapshotMeta, data: wasmraft_storage::StagedSnapshot) -> Result<(), String> {
        // As on the apply thread: after every task sent before it.
        let mut queue = self.0.lock();
        queue.run(usize::MAX);
        if queue.stopped {
            return Err("the apply worker stopped".into());
        }
        let (done, wait) = std::sync::mpsc::channel();
        queue.stopped = queue.worker.handle(ApplyTask::InstallSnapshot { meta, data, done }) == Flow::Stop;
        wait.recv().map_err(|_| "the apply worker dropped the snapshot".to_string())?
    }
}

/// A node that runs: its handle, Raft loop and apply worker.
pub(super) struct Live {
    pub node: Node,
    pub raft_loop: RaftLoop<SimTransport>,
    pub apply: ApplyStep,
    /// The Raft loop returned `Stop` (fatal, removed): it takes no turns.
    pub stopped: bool,
}

impl Live {
    /// Opens the node's data directory and builds its workers, as
    /// `Node::start` does, but gives them no threads. `boot` is its
    /// machine's boot clock, simulated.
    pub fn start(config: NodeConfig, outbox: Outbox, boot: crate::boot_clock::BootClock, now: Instant) -> Result<Live, String> {
        let id = config.id;
        let transport = SimTransport { id, outbox };
        let Parts { node, mut raft_loop, worker, apply_tasks } =
            Node::assemble(config, crate::KV_PLUGIN, transport).map_err(|e| e.to_string())?;
        drop(apply_tasks);
        let apply = ApplyStep(Arc::new(Mutex::new(ApplyQueue { worker, tasks: VecDeque::new(), stopped: false })));
        raft_loop.apply = Box::new(crate::apply_port::RegistrationsHeld::new(Box::new(apply.clone())));
        raft_loop.stamp_clock.set_boot_clock(boot);
        let stopped = raft_loop.start(now) == Flow::Stop;
        Ok(Live { node, raft_loop, apply, stopped })
    }

    /// One Raft loop turn at `now` over whatever is in the node's inbox.
    /// A slow disk leaves the Ready being written unfinished for this turn:
    /// the loop takes its turn while the write is in flight.
    pub fn turn(&mut self, now: Instant, wall_ms: u64, slow_disk: bool) {
        if !slow_disk {
            self.raft_loop.writer.finish_held();
        }
        if !self.stopped {
            self.stopped = self.raft_loop.turn(None, now, wall_ms) == Flow::Stop;
        }
    }

    /// Runs up to `max` queued apply tasks.
    pub fn apply(&mut self, max: usize) {
        self.apply.0.lock().run(max);
    }

    pub fn apply_queued(&self) -> usize {
        self.apply.0.lock().queued()
    }
}

/// A node's configuration in the simulation: 10 ms ticks (100 ms election
/// timeout), no fsync (a simulated crash is a process crash: what RocksDB
/// wrote survives it), frequent snapshots and keyspace hash checks.
pub(super) fn node_config(id: u64, voters: &[u64], dir: &Path, plugin_cache: &Path, seed: u64) -> NodeConfig {
    NodeConfig {
        id,
        data_dir: dir.join(format!("node-{id}")),
        tick_interval: Duration::from_millis(10),
        election_ticks: 10,
        heartbeat_ticks: 1,
        sync_log: false,
        request_timeout: Duration::from_millis(1000),
        seed: Some(seed),
        bootstrap_voters: voters.to_vec(),
        snapshot_entries: 40,
        // Small too, so that some snapshots come by bytes rather than entries.
        snapshot_log_bytes: 2 << 10,
        hash_check_entries: 25,
        // Every 25 entries however large the state: checks land often.
        hash_check_records_per_entry: 0,
        // Small, so that handing committed entries to apply pauses often.
        max_applying_bytes: 4 << 10,
        plugin_cache: Some(PathBuf::from(plugin_cache)),
        cluster_id: 7,
        ..NodeConfig::default()
    }
}
