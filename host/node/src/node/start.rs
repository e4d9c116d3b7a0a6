//! How a node starts: its storage opened and checked, its plugin loaded,
//! its Raft core, apply worker and log writer built and given threads.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::mpsc::channel;

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use wasmraft_raft::{Membership, NodeId, RawNode, Role};
use wasmraft_runtime::{Applier, PluginEngine, QueryPool};
use wasmraft_storage::{Storage, StorageOptions};

use super::{FatalOnPanic, Inner, Node, NodeStatus, format_cluster_id, random_id};
use crate::apply::ApplyWorker;
use crate::config::NodeConfig;
use crate::deploy::{Loader, SharedQueries};
use crate::divergence::HashChecks;
use crate::error::StartError;
use crate::raft_loop::RaftLoop;
use crate::sessions::Sessions;
use crate::transport::{NoPeers, Transport};

/// Entry bytes a leader keeps in flight to one follower: half of what the
/// gRPC transport queues to a peer (`Budgets::data`, 64 MiB), so that the
/// leader reads entries from its log only for appends the transport has
/// room for. Without it, 256 appends of 1.4 MiB values were read and then
/// dropped at the full queue, and resent, and those reads held up the
/// leader's ticks until check-quorum stepped it down.
const MAX_INFLIGHT_BYTES: u64 = 32 << 20;

/// A node's parts before its workers run.
pub(crate) struct Parts<T: Transport> {
    /// The handle (its `threads` empty).
    pub node: Node,
    pub raft_loop: RaftLoop<T>,
    pub worker: ApplyWorker,
    /// The apply worker's inbox, fed by the Raft loop's `apply` port.
    pub apply_tasks: std::sync::mpsc::Receiver<crate::apply::ApplyTask>,
}

impl Node {
    /// Starts a node of a single-node cluster (or the first start of a node
    /// whose `bootstrap_voters` are all local) running the plugin in `wasm`.
    pub fn start(config: NodeConfig, wasm: &[u8]) -> Result<Node, StartError> {
        Self::start_with_transport(config, wasm, NoPeers)
    }

    /// Starts a node that talks to its peers through `transport`.
    pub fn start_with_transport<T: Transport>(
        config: NodeConfig,
        wasm: &[u8],
        transport: T,
    ) -> Result<Node, StartError> {
        // The start's own lines (opening the data directory, compiling the
        // plugin) name the node too.
        let starting = tracing::info_span!("node", id = config.id).entered();
        let Parts { node, mut raft_loop, mut worker, apply_tasks } = Self::assemble(config, wasm, transport)?;
        worker.flush_ahead = crate::apply::FlushAhead::NotAsked;
        let (writer, writes) = crate::log_writer::LogWriter::thread();
        raft_loop.writer = writer;
        let (storage, written) = (node.inner.storage.clone(), raft_loop.self_tx.clone());
        let sink = raft_loop.transport.sink();
        drop(starting);
        let (status, id) = (node.inner.status.clone(), node.id());
        // A worker that panics records why, once, so that the other worker
        // and every caller see the node is dead rather than half-alive.
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            let (status, what) = (status.clone(), name.to_string());
            let run = move || {
                // Every line the worker logs names its node (`wasmraft dev`
                // runs several in one process).
                let _node = tracing::info_span!("node", id).entered();
                if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "(no message)".into());
                    let cause = format!("the {what} thread panicked: {message}");
                    tracing::error!(cause = %cause, "node failed");
                    // `FatalOnPanic` recorded it already, without the message.
                    status.lock().refine_fatal(&FatalOnPanic::cause(&what), cause);
                }
            };
            std::thread::Builder::new()
                .name(format!("{name}-{id}"))
                .spawn(run)
                .expect("spawn a thread")
        };
        *node.inner.threads.lock() = vec![
            spawn("apply", Box::new(move || worker.run(apply_tasks))),
            spawn("raft", Box::new(move || raft_loop.run())),
            // Ends when the Raft loop does (it drops the other end).
            spawn("log-writer", Box::new(move || crate::log_writer::run(storage, writes, written, sink))),
        ];
        Ok(node)
    }

    /// Opens storage, loads the plugin and builds the node's workers,
    /// without starting them: `start_with_transport` gives each a thread,
    /// the simulation drives them itself.
    pub(crate) fn assemble<T: Transport>(
        config: NodeConfig,
        wasm: &[u8],
        mut transport: T,
    ) -> Result<Parts<T>, StartError> {
        config.validate().map_err(StartError::Config)?;
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            StartError::Config(format!("cannot create {}: {e}", config.data_dir.display()))
        })?;
        tracing::info!(data_dir = %config.data_dir.display(), "opening the data directory");
        let storage = crate::progress::logged("opening the data directory", || {
            Storage::open(&config.data_dir, config.id, StorageOptions { sync_log: config.sync_log, ..Default::default() })
        })?;
        let bootstrapping = storage.is_empty()? && !config.join;
        if bootstrapping {
            let voters = if config.bootstrap_voters.is_empty() {
                vec![config.id]
            } else {
                config.bootstrap_voters.clone()
            };
            storage.bootstrap(&Membership::new(voters.into_iter().map(NodeId)))?;
        }
        // Before the plugin is compiled: a refusal costs nothing.
        let applied = applied_as_logged(&storage)?;
        let cluster_id = match storage.cluster_id()? {
            Some(stored) => {
                if config.cluster_id != 0 && config.cluster_id != stored {
                    tracing::warn!(configured = %format_cluster_id(config.cluster_id), stored = %format_cluster_id(stored),
                        "the data directory belongs to another cluster id than configured; keeping the stored one");
                }
                stored
            }
            // Fixed now: the configured id, a random one for a new cluster,
            // or none yet for a joining node (its first peer's, later).
            None => {
                let id = match config.cluster_id {
                    0 if bootstrapping => random_id(),
                    configured => configured,
                };
                if id != 0 {
                    storage.set_cluster_id(id)?;
                }
                id
            }
        };

        let loader = Loader {
            engine: PluginEngine::new(config.plugin.clone())?,
            cache_dir: config.plugin_cache_dir(),
        };
        // A plugin deployed through the log replaces the configured one.
        let (plugin, deployed_at) = match storage.deployed_plugin()? {
            Some((record, deployed)) => {
                tracing::info!(plugin = %record.name, sha256 = %record.sha256, deployed_at = record.deployed_at,
                    "running the plugin deployed through the log, not the configured one");
                (crate::progress::logged("compiling the plugin", || loader.load(&deployed))?, record.deployed_at)
            }
            None => (crate::progress::logged("compiling the plugin", || loader.load(wasm))?, 0),
        };
        let applier = Applier::new(plugin.clone()).map_err(|f| StartError::Recovery(f.0))?;
        let queries: SharedQueries = Arc::new(parking_lot::RwLock::new(Arc::new(QueryPool::new(
            plugin.clone(),
        ))));

        let hard_state = storage.hard_state();
        let removed = storage.removed_members()?;
        for id in &removed {
            transport.remove_peer(*id);
        }
        let addresses: BTreeMap<u64, String> = storage.addresses()?.into_iter().collect();
        for (id, address) in &addresses {
            transport.set_address(*id, address);
        }
        let addresses = Arc::new(parking_lot::RwLock::new(addresses));
        let raft_config = wasmraft_raft::Config {
            id: NodeId(config.id),
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            // The core mixes the node id into the seed itself; mixing it here
            // too cancelled out and gave every node the same election jitter.
            seed: config.seed.unwrap_or(0),
            applied: applied.index,
            max_applying_bytes: config.max_applying_bytes,
            max_inflight_bytes: MAX_INFLIGHT_BYTES,
            // The Raft loop sends them itself (`RaftLoop::send_commit_updates`).
            defer_commit_updates: true,
            ..wasmraft_raft::Config::default()
        };
        let raw = RawNode::new(raft_config, storage.clone())
            .map_err(|e| StartError::Raft(e.to_string()))?;
        // The stored commit index, or the applied one if that is higher.
        let commit_at_start = raw.status().commit.0;
        let removed = Arc::new(parking_lot::RwLock::new(removed));

        let status = Arc::new(Mutex::new(NodeStatus {
            id: config.id,
            role: Role::Follower,
            term: hard_state.term.0,
            leader: None,
            commit: commit_at_start,
            applied: applied.index.0,
            last_index: storage.log_bounds().1.0,
            plugin: plugin.info().clone(),
            fatal: None,
            deployed_at,
            hash_check: None,
            hash_checks: 0,
            divergence: None,
            divergences: 0,
            membership: raw.status().membership,
            removed: removed.read().contains(&config.id),
            pending_requests: 0,
            pending_read_rounds: 0,
            busy_refusals: 0,
            peer_inbox_dropped: 0,
        }));
        let (raft_tx, raft_rx) = channel();
        let pending_bytes = Arc::new(tokio::sync::Semaphore::new(config.max_pending_bytes));
        let peer_inbox = Arc::new(crate::peer_inbox::PeerInbox::new(config.max_peer_inbox_bytes));
        let (apply_tx, apply_rx) = channel();
        let (applied_tx, applied_rx) = watch::channel(applied.index.0);
        let (events_tx, _) = broadcast::channel(4096);

        let metrics = Arc::new(crate::metrics::NodeMetrics::default());
        let wake = Arc::new(crate::timers::WakeUp::default());
        let applied_wanted = Arc::new(crate::apply_port::AppliedWanted::default());
        let worker = ApplyWorker {
            state_machine: Box::new(applier),
            storage: storage.clone(),
            raft: raft_tx.clone(),
            applied: applied_tx,
            events: events_tx.clone(),
            status: status.clone(),
            waiters: BTreeMap::new(),
            renewal_waiters: BTreeMap::new(),
            last_applied: applied,
            sessions: Sessions::load(storage.sessions()?).map_err(StartError::Recovery)?,
            snapshot_entries: config.snapshot_entries,
            snapshot_log_bytes: config.snapshot_log_bytes,
            bytes_since_snapshot: 0,
            flush_ahead: crate::apply::FlushAhead::Never,
            snapshot_index: storage.snapshot()?.map_or(0, |m| m.last.index.0),
            addresses: addresses.clone(),
            loader: Some(loader.clone()),
            queries: queries.clone(),
            boot_wasm: Arc::from(wasm),
            hashes: HashChecks::new(config.hash_check_entries, config.hash_check_records_per_entry, applied.index.0),
            metrics: metrics.clone(),
            replay: crate::progress::Replay::new(applied.index.0, commit_at_start),
            wake: wake.clone(),
            applied_wanted: applied_wanted.clone(),
        };
        worker.publish_stored_wake_up().map_err(StartError::Recovery)?;
        let lease = Arc::new(crate::lease_share::LeaseShare::default());
        let reads = Arc::new(crate::loop_queue::LoopQueue::default());
        let client_proposals = Arc::new(crate::loop_queue::LoopQueue::default());
        let raft_loop = RaftLoop {
            raw,
            storage: storage.clone(),
            transport,
            inbox: raft_rx,
            apply: Box::new(crate::apply_port::RegistrationsHeld::new(Box::new(apply_tx))),
            status: status.clone(),
            lease: lease.clone(),
            tick_interval: config.tick_interval,
            next_tick: std::time::Instant::now(),
            commit_update_at: None,
            commits_awaited: BTreeMap::new(),
            sync_log: config.sync_log,
            pending_reads: HashMap::new(),
            reads: reads.clone(),
            client_proposals: client_proposals.clone(),
            read_timeout: config.request_timeout,
            next_read_id: 0,
            ticker: crate::timers::Ticker::new(wake, config.tick_interval * config.election_ticks as u32),
            stamp_clock: crate::timers::StampClock::new(
                crate::timers::stored_log_time(&storage)?,
                storage.log_time_note()?,
                crate::boot_clock::BootClock::of_this_machine(),
            ),
            received_snapshot: None,
            self_tx: raft_tx.clone(),
            max_catch_up_ticks: 4 * config.election_ticks,
            removed: removed.clone(),
            dropped: Default::default(),
            peer_inbox: peer_inbox.clone(),
            metrics: metrics.clone(),
            commit_timer: Default::default(),
            now: std::time::Instant::now(),
            wall_ms: 0,
            deferred: Default::default(),
            // The simulation's; a started node's runs on its own thread.
            writer: crate::log_writer::LogWriter::Held {
                job: None,
                storage: storage.clone(),
                done: raft_tx.clone(),
            },
            in_flight: None,
            forwarding: crate::forwarding::Forwarding::for_this_process(),
            forwarded_budget: crate::forwarding::Budget::new(pending_bytes.clone()),
            retries: Default::default(),
            max_request_bytes: config.max_request_bytes,
            max_apply_lag: config.max_apply_lag,
            unsaved_commit: None,
            applied_wanted,
            election_timeout: config.tick_interval * config.election_ticks as u32,
            unwritten_bytes: 0,
            slow_syncs: crate::loop_upkeep::SlowSyncs::new(
                config.tick_interval * config.election_ticks as u32 / 2,
            ),
            late_ticks: Default::default(),
        };
        tracing::info!(
            id = config.id,
            data_dir = %config.data_dir.display(),
            plugin = %plugin.info().name,
            plugin_sha256 = %plugin.info().sha256,
            applied = applied.index.0,
            commit = commit_at_start,
            "node started"
        );
        let pending_requests = tokio::sync::Semaphore::new(config.max_pending_requests);
        let query_slots = tokio::sync::Semaphore::new(config.plugin.query_instances);
        let node = Node {
            inner: Arc::new(Inner {
                commit_at_start,
                config,
                raft: raft_tx,
                storage,
                queries,
                applied: applied_rx,
                events: events_tx,
                status,
                threads: Mutex::new(Vec::new()),
                addresses,
                loader,
                pending_requests,
                pending_bytes,
                query_slots,
                busy_refusals: Default::default(),
                peer_inbox,
                metrics,
                cluster_id: Mutex::new(cluster_id),
                removed,
                lease,
                reads,
                client_proposals,
            }),
        };
        Ok(Parts { node, raft_loop, worker, apply_tasks: apply_rx })
    }

}

/// The state machine's applied index, checked against the log: the core
/// counts it as committed at start, so the log must hold the same entry
/// there (or have compacted it).
fn applied_as_logged(storage: &Storage) -> Result<wasmraft_raft::LogId, StartError> {
    let applied = storage.applied()?;
    let (first, last) = storage.log_bounds();
    if applied.index < first || applied.index > last {
        return Ok(applied);
    }
    let in_log = wasmraft_raft::LogReader::term(storage, applied.index)
        .map_err(|e| StartError::Recovery(format!("reading the term of applied index {}: {e}", applied.index.0)))?;
    if in_log != applied.term {
        return Err(StartError::Recovery(format!(
            "the state machine applied index {} of term {}, but the log holds term {} there: the data directory is inconsistent",
            applied.index.0, applied.term.0, in_log.0
        )));
    }
    Ok(applied)
}
