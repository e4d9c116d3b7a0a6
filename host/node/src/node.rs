//! A node: the handle embedders and the gRPC services hold, what it
//! reports of itself, and how requests reach its Raft loop and state (its
//! start is in `start`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use tokio::sync::{broadcast, oneshot, watch};
use wasmraft_raft::{MembershipChange, NodeId};
use wasmraft_runtime::{EntryEvent, PluginInfo, StateView};
use wasmraft_storage::Storage;

use crate::config::NodeConfig;
use crate::deploy::{Loader, SharedQueries};
use crate::error::Error;
use crate::raft_loop::LoopMsg;
use crate::state_machine::StorageView;

mod start;
mod status;
#[cfg(test)]
pub(crate) use start::Parts;
pub(crate) use status::FatalOnPanic;
pub use status::{Applied, Members, NodeStatus};

/// How fresh a read must be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Consistency {
    /// Reflects every write acknowledged before the read started: the leader
    /// confirms it still leads with a quorum round (ReadIndex, batched).
    #[default]
    Linearizable,
    /// Like linearizable while the leader's lease holds (no round trip);
    /// relies on bounded clock drift between nodes. Falls back to ReadIndex.
    Lease,
    /// This node's applied state, possibly stale; any node serves it.
    Eventual,
}

/// A running node: cheap to clone, all methods take `&self`.
#[derive(Clone)]
pub struct Node {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.inner.config.id)
            .finish()
    }
}

struct Inner {
    config: NodeConfig,
    raft: Sender<LoopMsg>,
    storage: Storage,
    queries: SharedQueries,
    loader: Loader,
    applied: watch::Receiver<u64>,
    events: broadcast::Sender<Arc<EntryEvent>>,
    status: Arc<Mutex<NodeStatus>>,
    /// The commit index known at start: no eventual read is served from a
    /// state older than that (a restarted node first replays its log). The
    /// stored commit index may lag the one in memory before a crash (see
    /// docs/design/002-node-driver.md), by about a tick's commits.
    commit_at_start: u64,
    threads: Mutex<Vec<JoinHandle<()>>>,
    addresses: Arc<parking_lot::RwLock<BTreeMap<u64, String>>>,
    /// 0 until a joining node first hears from its cluster.
    cluster_id: Mutex<u64>,
    /// Ids removed from the cluster (written by the Raft loop).
    removed: Arc<parking_lot::RwLock<std::collections::BTreeSet<u64>>>,
    /// Admission: one permit per client request in flight, and one per byte.
    pending_requests: tokio::sync::Semaphore,
    /// Shared with the Raft loop, which holds followers' batches in it.
    pending_bytes: Arc<tokio::sync::Semaphore>,
    /// One permit per query allowed to run at once.
    query_slots: tokio::sync::Semaphore,
    busy_refusals: std::sync::atomic::AtomicU64,
    /// The bound on peer messages waiting for the Raft loop.
    peer_inbox: Arc<crate::peer_inbox::PeerInbox>,
    /// Counters and latency histograms (`Node::metrics`).
    metrics: Arc<crate::metrics::NodeMetrics>,
    /// The leader's lease as the Raft loop publishes it (lease reads).
    lease: Arc<crate::lease_share::LeaseShare>,
    /// Linearizable reads waiting for the Raft loop's next round.
    reads: Arc<crate::loop_queue::LoopQueue<crate::raft_loop::IndexReply>>,
    /// Client proposals waiting for the Raft loop's next log write.
    client_proposals: Arc<crate::loop_queue::LoopQueue<crate::raft_loop::ClientProposal>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: stop the threads (they hold each other's
        // channels, so they would not notice on their own).
        let _ = self.raft.send(LoopMsg::Shutdown);
    }
}

impl Node {
    /// The id of this node's cluster; `None` while a joining node has not
    /// heard from its cluster yet.
    pub fn cluster_id(&self) -> Option<u64> {
        Some(*self.inner.cluster_id.lock()).filter(|&id| id != 0)
    }

    /// Takes `id` as the cluster id if none is fixed yet (a joining node,
    /// on first contact), durably. Returns whether `id` is this node's
    /// cluster id.
    pub fn adopt_cluster_id(&self, id: u64) -> Result<bool, Error> {
        if id == 0 {
            return Ok(false);
        }
        let mut current = self.inner.cluster_id.lock(); // one adopter at a time
        if *current == 0 {
            self.inner.storage.set_cluster_id(id).map_err(|e| Error::Fatal(e.to_string()))?;
            *current = id;
            tracing::info!(cluster_id = %format_cluster_id(id), "joined cluster");
        }
        Ok(*current == id)
    }

    /// Whether `id` was removed from the cluster (as this node saw its
    /// committed configuration change). Removed ids are never members again.
    pub fn was_removed(&self, id: u64) -> bool {
        self.inner.removed.read().contains(&id)
    }

    /// Whether `id` is a member (voter, outgoing voter or learner) in this
    /// node's latest configuration. A node that knows no configuration yet
    /// (joining) treats everyone as a possible member.
    pub fn is_member(&self, id: u64) -> bool {
        let status = self.inner.status.lock();
        status.membership.members().is_empty() || status.membership.contains(NodeId(id))
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.inner.config.id
    }

    /// Proposes `command` and waits until it is committed and applied;
    /// returns the plugin's response.
    pub async fn propose(&self, command: Vec<u8>) -> Result<Vec<u8>, Error> {
        Ok(self.propose_as(command, 0, 0).await?.response)
    }

    /// Proposes `command` tagged with a client id and sequence number.
    pub async fn propose_as(
        &self,
        command: Vec<u8>,
        client_id: u64,
        sequence: u64,
    ) -> Result<Applied, Error> {
        let started = std::time::Instant::now();
        let result = self.propose_counted(command, client_id, sequence).await;
        self.inner.metrics.request(crate::metrics::RequestKind::Propose, &result, started.elapsed());
        result
    }

    async fn propose_counted(&self, command: Vec<u8>, client_id: u64, sequence: u64) -> Result<Applied, Error> {
        self.check_alive()?;
        self.check_request_size(&command)?;
        self.check_apply_lag()?;
        // A follower sends it to the leader in its Raft stream.
        self.await_leader().await?;
        let _admitted = self.admit(command.len())?;
        let (reply, rx) = oneshot::channel();
        self.ask_propose((command, client_id, sequence, reply))?;
        self.wait(rx).await?
    }

    /// Renews `key`, a keep-alive in the plugin's own terms (a lease id):
    /// the leader takes it at log time now, the next tick carries it to
    /// every replica's `tick` (batched: at most 20 ticks a second), and the
    /// plugin's answer comes back once that tick applied. Leader only.
    pub async fn renew(&self, key: Vec<u8>) -> Result<Applied, Error> {
        self.check_alive()?;
        if key.len() > u16::MAX as usize {
            return Err(Error::Invalid(format!("a renewal key of {} bytes; at most {}", key.len(), u16::MAX)));
        }
        self.await_leading().await?;
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::Renew { key, reply })?;
        self.wait(rx).await?
    }

    /// Answers `request` with the plugin's `query`, at the given consistency.
    pub async fn query(
        &self,
        request: Vec<u8>,
        consistency: Consistency,
    ) -> Result<Vec<u8>, Error> {
        let started = std::time::Instant::now();
        let result = self.query_counted(request, consistency).await;
        self.inner.metrics.request(crate::metrics::RequestKind::Read(consistency), &result, started.elapsed());
        result
    }

    async fn query_counted(&self, request: Vec<u8>, consistency: Consistency) -> Result<Vec<u8>, Error> {
        self.check_alive()?;
        self.check_request_size(&request)?;
        let _admitted = self.admit(request.len())?;
        let index = match consistency {
            Consistency::Eventual => self.inner.commit_at_start,
            Consistency::Linearizable => {
                self.await_leader().await?;
                let (reply, rx) = oneshot::channel();
                self.ask_read_index(reply)?;
                self.wait(rx).await??.0
            }
            Consistency::Lease => match self.lease_held(std::time::Instant::now()) {
                Some(lease) => lease.commit,
                None => {
                    self.await_leader().await?;
                    let (reply, rx) = oneshot::channel();
                    self.send(LoopMsg::LeaseRead { reply })?;
                    self.wait(rx).await??.0
                }
            },
        };
        self.wait_applied(index).await?;
        // At most `query_instances` queries run at once; more wait here,
        // without holding a thread.
        let _slot = self.inner.query_slots.acquire().await.map_err(|_| Error::Stopped)?;
        // Inline, not on the blocking pool: a query is microseconds of CPU
        // (memtable reads and a warm wasm instance), and handing it to
        // another thread cost more than running it (two wake-ups per read).
        self.query_applied(&request)
    }

    /// Runs `request` through the plugin's `query` over this node's applied
    /// state, whatever index that is.
    pub(crate) fn query_applied(&self, request: &[u8]) -> Result<Vec<u8>, Error> {
        // The plugin and the state it reads are taken together, under a lock
        // held only for that: a deploy or a snapshot install switches both at
        // once (see `SharedQueries`). The state is a RocksDB snapshot, so a
        // long query never holds up the apply thread.
        let (queries, view) = {
            let queries = self.inner.queries.read();
            // A snapshot install that failed half-way left the state between
            // two versions; it makes the node fatal before the lock goes.
            if let Some(cause) = &self.inner.status.lock().fatal {
                return Err(Error::Fatal(cause.clone()));
            }
            let view: Arc<dyn StateView> =
                Arc::new(StorageView(self.inner.storage.consistent_reader()));
            (queries.clone(), view)
        };
        queries.query(view, request).map_err(Error::from)
    }

    /// The one client limit (`max_request_bytes`), exact and checked before
    /// the log: a request within it cannot fail later on a store limit.
    fn check_request_size(&self, request: &[u8]) -> Result<(), Error> {
        let limit = self.inner.config.max_request_bytes;
        if request.len() > limit {
            return Err(Error::Invalid(format!(
                "request of {} bytes exceeds max_request_bytes ({limit} bytes)",
                request.len()
            )));
        }
        Ok(())
    }

    /// Takes a place for one request of `bytes` among those in flight, or
    /// refuses it at once: a node under more load than it can queue says
    /// so instead of growing without bound.
    fn admit(
        &self,
        bytes: usize,
    ) -> Result<(tokio::sync::SemaphorePermit<'_>, tokio::sync::SemaphorePermit<'_>), Error> {
        let busy = |what: &str, limit: usize| {
            self.count_busy();
            Error::Busy(format!("{what} in flight reached {limit} ({what} limit); retry later"))
        };
        let request = self.inner.pending_requests.try_acquire().map_err(|_| {
            busy("requests", self.inner.config.max_pending_requests)
        })?;
        // Checked against max_request_bytes, which validation keeps below
        // max_pending_bytes (itself below 4 GiB).
        let bytes = self
            .inner
            .pending_bytes
            .try_acquire_many(bytes.max(1) as u32)
            .map_err(|_| busy("request bytes", self.inner.config.max_pending_bytes))?;
        Ok((request, bytes))
    }

    fn count_busy(&self) {
        self.inner.busy_refusals.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// A leader whose state machine lags far behind the log takes no more
    /// proposals until it catches up (the apply queue stays bounded).
    fn check_apply_lag(&self) -> Result<(), Error> {
        let lag = self.inner.status.lock().apply_lag();
        if lag > self.inner.config.max_apply_lag {
            self.count_busy();
            return Err(Error::Busy(format!(
                "the state machine is {lag} entries behind the log (max_apply_lag {}); retry later",
                self.inner.config.max_apply_lag
            )));
        }
        Ok(())
    }

    /// Queries running at this moment (at most `query_instances`).
    pub fn queries_running(&self) -> usize {
        self.inner.config.plugin.query_instances - self.inner.query_slots.available_permits()
    }

    /// The one client limit, for transports to size their message limits.
    pub fn max_request_bytes(&self) -> usize {
        self.inner.config.max_request_bytes
    }

    async fn wait_applied(&self, index: u64) -> Result<(), Error> {
        let mut applied = self.inner.applied.clone();
        match tokio::time::timeout(
            self.inner.config.request_timeout,
            applied.wait_for(|a| *a >= index),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(_)) => Err(Error::Stopped),
            Err(_) => Err(Error::Timeout),
        }
    }

    async fn wait<R>(&self, rx: oneshot::Receiver<R>) -> Result<R, Error> {
        match tokio::time::timeout(self.inner.config.request_timeout, rx).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(self.check_alive().err().unwrap_or(Error::Stopped)),
            Err(_) => Err(Error::Timeout),
        }
    }

    /// This node's lease if it holds at `now`, as the Raft loop last
    /// published it (see `lease_share`): a lease read at its `commit` needs
    /// no trip through the loop.
    pub(crate) fn lease_held(&self, now: std::time::Instant) -> Option<crate::lease_share::Published> {
        self.inner.lease.read(now)
    }

    /// Asks the Raft loop for a read index confirmed by a quorum, through
    /// its read queue (see `loop_queue`): `reply` gets it.
    pub(crate) fn ask_read_index(&self, reply: crate::raft_loop::IndexReply) -> Result<(), Error> {
        self.queue_for_loop(&self.inner.reads, reply, LoopMsg::ReadsWaiting)
    }

    /// Hands a client's proposal to the Raft loop, through its proposal
    /// queue (see `loop_queue`); its reply comes once it applied.
    pub(crate) fn ask_propose(&self, proposal: crate::raft_loop::ClientProposal) -> Result<(), Error> {
        self.queue_for_loop(&self.inner.client_proposals, proposal, LoopMsg::ProposalsWaiting)
    }

    /// Puts `item` in one of the Raft loop's queues, and sends `ring` if
    /// the loop does not know yet that requests wait there.
    fn queue_for_loop<T>(&self, queue: &crate::loop_queue::LoopQueue<T>, item: T, ring: LoopMsg) -> Result<(), Error> {
        if queue.push(item)? == crate::loop_queue::Ring::Loop {
            self.send(ring)?;
        }
        Ok(())
    }

    pub(crate) fn send(&self, msg: LoopMsg) -> Result<(), Error> {
        self.inner.raft.send(msg).map_err(|_| Error::Stopped)
    }

    fn check_alive(&self) -> Result<(), Error> {
        let status = self.inner.status.lock();
        if status.removed {
            return Err(Error::Removed);
        }
        match &status.fatal {
            Some(f) => Err(Error::Fatal(f.clone())),
            None => Ok(()),
        }
    }

    /// Adds node `id`, reachable at `address`, as a learner: it receives the
    /// log but does not vote. Records the address through the log first, so
    /// every member (and any future leader) can reach it. Leader only.
    pub async fn add_learner(&self, id: u64, address: &str) -> Result<(), Error> {
        if self.was_removed(id) {
            return Err(Error::Invalid(format!(
                "node id {id} was removed from this cluster; ids are never reused, give the new node another id"
            )));
        }
        self.propose_system(crate::system::SystemCommand::SetAddress {
            id,
            address: address.to_string(),
        })
        .await?;
        self.change_membership(MembershipChange::AddLearner(NodeId(id)))
            .await
    }

    /// Records a new peer address for member `id` through the log, so that
    /// every member reaches it there. Leader only.
    pub async fn set_address(&self, id: u64, address: &str) -> Result<(), Error> {
        self.propose_system(crate::system::SystemCommand::SetAddress { id, address: address.to_string() })
            .await
            .map(drop)
    }

    /// Makes learner `id` a voter (through a joint configuration). Leader only.
    pub async fn promote(&self, id: u64) -> Result<(), Error> {
        self.change_membership(MembershipChange::AddVoter(NodeId(id)))
            .await
    }

    /// Removes voter or learner `id` from the cluster. Leader only.
    pub async fn remove_member(&self, id: u64) -> Result<(), Error> {
        self.change_membership(MembershipChange::RemoveNode(NodeId(id)))
            .await
    }

    /// Proposes `change` and waits until it is applied. A change that goes
    /// through a joint configuration (promote, remove a voter) is done only
    /// once the joint configuration is left, which the leader proposes on
    /// its own: it waits for that too (up to the request timeout), so that
    /// a `members` right after shows the new configuration, as etcd's
    /// would.
    async fn change_membership(&self, change: MembershipChange) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::ChangeMembership { change, reply })?;
        self.wait(rx).await??;
        let left = self
            .poll_status(|st| (!st.membership.is_joint() || st.removed || st.fatal.is_some()).then_some(()))
            .await;
        if left.is_none() {
            tracing::info!("the membership change is applied; its joint configuration is still being left");
        }
        Ok(())
    }

    async fn propose_system(
        &self,
        command: crate::system::SystemCommand,
    ) -> Result<Applied, Error> {
        self.check_alive()?;
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::ProposeSystem {
            data: command.encode(),
            reply,
        })?;
        self.wait(rx).await?
    }

    /// Deploys a plugin through the log: every replica validates it, runs
    /// its `migrate` export and switches to it at the same index. The bytes
    /// are validated here first, so a bad binary is refused before it
    /// reaches the log. Returns the plugin's description and the index it
    /// runs from. Leader only.
    pub async fn deploy_plugin(&self, wasm: Vec<u8>) -> Result<(PluginInfo, u64), Error> {
        self.deploy_plugin_checked(wasm, true).await
    }

    /// [`Node::deploy_plugin`], refusing a plugin whose name differs from
    /// the running one's unless `replace_other` (it would take over a
    /// keyspace another plugin wrote: a mistake far more often than not).
    pub async fn deploy_plugin_checked(&self, wasm: Vec<u8>, replace_other: bool) -> Result<(PluginInfo, u64), Error> {
        self.deploy_plugin_where(wasm, replace_other, |_| Ok(())).await
    }

    /// [`Node::deploy_plugin_checked`], once `check` accepts the loaded
    /// plugin (the gRPC service checks that every member's host can run
    /// its contract).
    pub async fn deploy_plugin_where(
        &self,
        wasm: Vec<u8>,
        replace_other: bool,
        check: impl FnOnce(&PluginInfo) -> Result<(), Error>,
    ) -> Result<(PluginInfo, u64), Error> {
        let plugin = {
            let loader = self.inner.loader.clone();
            let bytes = wasm.clone();
            // Compiling a large plugin takes seconds: off the async threads.
            tokio::task::spawn_blocking(move || loader.load(&bytes))
                .await
                .map_err(|e| Error::Fatal(format!("plugin validation panicked: {e}")))?
                .map_err(|e| Error::Invalid(format!("plugin refused: {e}")))?
        };
        let running = self.plugin().0.name;
        if !replace_other && plugin.info().name != running {
            return Err(Error::Rejected(format!(
                "the cluster runs plugin {running:?} and this one is {:?}: it would take over the keyspace {running:?} wrote; \
                 deploy with --force if that is what you want",
                plugin.info().name
            )));
        }
        check(plugin.info())?;
        // The leader's Raft loop stamps it with log time.
        let applied = self
            .propose_system(crate::system::SystemCommand::DeployPlugin { timestamp_ms: 0, wasm })
            .await?;
        Ok((plugin.info().clone(), applied.index))
    }

    /// The election timeout (ticks times the tick interval).
    pub fn election_timeout(&self) -> std::time::Duration {
        self.inner.config.tick_interval * self.inner.config.election_ticks as u32
    }

    /// This node's current term (without a whole [`NodeStatus`]).
    pub fn term(&self) -> u64 {
        self.inner.status.lock().term
    }

    /// The running plugin and the index of the entry that deployed it (0:
    /// the plugin the node started with).
    pub fn plugin(&self) -> (PluginInfo, u64) {
        let status = self.inner.status.lock();
        (status.plugin.clone(), status.deployed_at)
    }

    /// Whether the plugin running is the one named `name`: [`Self::plugin`]
    /// without copying its description, for checks on every request.
    pub fn plugin_is(&self, name: &str) -> bool {
        self.inner.status.lock().plugin.name == name
    }

    /// Asks every replica to hash its keyspace at the next index and compare
    /// with the leader's (see [`NodeStatus::hash_check`]). Returns the index
    /// of the check. Leader only.
    pub async fn check_hashes(&self) -> Result<u64, Error> {
        Ok(self
            .propose_system(crate::system::SystemCommand::CheckHash)
            .await?
            .index)
    }

    /// Writes to this node's plugin keyspace behind Raft's back, to test
    /// divergence detection. Fault injection only: never call it otherwise.
    #[doc(hidden)]
    pub fn inject_divergent_write(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.inner
            .storage
            .inject_state_write(key, value)
            .map_err(|e| Error::Fatal(e.to_string()))
    }

    /// Makes one of this node's workers fail, to test the failure model.
    /// Fault injection only: never call it otherwise.
    #[doc(hidden)]
    pub fn inject_fault(&self, worker: Worker) -> Result<(), Error> {
        tracing::warn!(?worker, "fault injection: failing a worker");
        self.send(LoopMsg::InjectFault(worker))
    }

    /// Member addresses this node learned from the log.
    pub fn addresses(&self) -> BTreeMap<u64, String> {
        self.inner.addresses.read().clone()
    }

    /// Hands leadership to voter `to` once it has caught up (Raft thesis
    /// §3.10). Must be called on the leader. The leader's lease ends at once.
    pub async fn transfer_leader(&self, to: u64) -> Result<(), Error> {
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::TransferLeader {
            to: NodeId(to),
            reply,
        })?;
        self.wait(rx).await?
    }

    /// The configuration and, on the leader, each member's progress.
    pub async fn members(&self) -> Result<Members, Error> {
        let (reply, rx) = oneshot::channel();
        self.send(LoopMsg::Members { reply })?;
        self.wait(rx).await
    }

    /// Bytes of this node's store on disk: all table files and memtables,
    /// and those live in its current version.
    pub fn storage_bytes(&self) -> (u64, u64) {
        self.inner.storage.size_bytes()
    }

    /// A backup of the state as applied now (etcd's snapshot save): read
    /// its file's bytes with [`wasmraft_storage::BackupReader::next_chunk`]
    /// on a blocking thread.
    pub fn backup(&self) -> Result<wasmraft_storage::BackupReader, Error> {
        self.inner.storage.backup_reader().map_err(|e| Error::Fatal(format!("cannot take a backup: {e}")))
    }

    /// SHA-256 of this node's whole state (the plugin's store and the
    /// client sessions) at whatever index it has applied meanwhile: equal
    /// on members that applied the same entries, so compare idle members
    /// only (`check_hashes` compares at one index, through the log).
    pub async fn state_hash(&self) -> Result<[u8; 32], Error> {
        let storage = self.inner.storage.clone();
        tokio::task::spawn_blocking(move || storage.state_hash())
            .await
            .map_err(|e| Error::Fatal(format!("state hash panicked: {e}")))?
            .map_err(|e| Error::Fatal(format!("cannot hash the state: {e}")))
    }

    /// Compacts this node's store on disk (etcd's defragment), on a
    /// blocking thread; the node serves meanwhile.
    pub async fn compact_storage(&self) -> Result<(), Error> {
        let storage = self.inner.storage.clone();
        tokio::task::spawn_blocking(move || storage.compact_files())
            .await
            .map_err(|e| Error::Fatal(format!("storage compaction panicked: {e}")))
    }

    /// Hands a Raft message from a peer to this node. Never blocks; the
    /// message is dropped if the node has stopped (Raft tolerates loss).
    /// Past [`NodeConfig::max_peer_inbox_bytes`] waiting in the Raft loop's
    /// inbox, it is dropped and counted (`peer_inbox_dropped`). A
    /// follower's batch of proposals takes its bytes of
    /// [`NodeConfig::max_pending_bytes`] as this node's clients' requests
    /// do; one that finds no room is answered `busy`.
    pub fn step(&self, message: wasmraft_raft::Message) {
        let inbox = &self.inner.peer_inbox;
        if let wasmraft_raft::MessageBody::Propose { seq, commands, .. } = &message.body {
            let (to, seq) = (message.from, *seq);
            if !crate::forwarding::Budget::take(&self.inner.pending_bytes, commands) {
                self.count_busy();
            } else if inbox.admit(&message) {
                let _ = self.inner.raft.send(LoopMsg::Step(message));
                return;
            } else {
                crate::forwarding::Budget::untake(&self.inner.pending_bytes, commands);
            }
            if inbox.admit_refusal() {
                let _ = self.inner.raft.send(LoopMsg::RefuseForwarded { to, seq });
            }
            return;
        }
        if inbox.admit(&message) {
            let _ = self.inner.raft.send(LoopMsg::Step(message));
        }
    }

    /// Starts receiving the snapshot `meta` describes: its parts are
    /// staged on disk as they arrive, up to
    /// [`NodeConfig::max_snapshot_bytes`], and the result goes to
    /// [`Node::receive_snapshot`].
    pub fn stage_snapshot(
        &self,
        meta: &wasmraft_raft::SnapshotMeta,
    ) -> Result<wasmraft_storage::SnapshotStaging, wasmraft_storage::StorageError> {
        self.inner
            .storage
            .stage_snapshot(meta, self.inner.config.max_snapshot_bytes)
    }

    /// Hands a snapshot received from the leader to this node: its staged
    /// data, and the `InstallSnapshot` message that announced it. The Raft
    /// loop keeps it only if the core accepts the message (the staged files
    /// are removed otherwise).
    pub fn receive_snapshot(
        &self,
        message: wasmraft_raft::Message,
        staged: wasmraft_storage::StagedSnapshot,
    ) {
        let _ = self
            .inner
            .raft
            .send(LoopMsg::ReceiveSnapshot(message, staged));
    }

    /// This node's counters and latency histograms (requests by kind and
    /// outcome, applied batches).
    pub fn metrics(&self) -> &crate::metrics::NodeMetrics {
        &self.inner.metrics
    }

    /// Ids removed from the cluster, as this node learned from committed
    /// configurations.
    pub fn removed_members(&self) -> Vec<u64> {
        self.inner.removed.read().iter().copied().collect()
    }

    /// A snapshot of this node's state.
    pub fn status(&self) -> NodeStatus {
        let mut status = self.inner.status.lock().clone();
        let c = &self.inner.config;
        status.pending_requests = (c.max_pending_requests - self.inner.pending_requests.available_permits()) as u64;
        status.busy_refusals = self.inner.busy_refusals.load(std::sync::atomic::Ordering::Relaxed);
        status.peer_inbox_dropped = self.inner.peer_inbox.dropped();
        status
    }

    /// Events of entries applied from now on, in apply order. A receiver
    /// that falls more than 4096 events behind loses the oldest.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<EntryEvent>> {
        self.inner.events.subscribe()
    }

    /// Returns the leader at once while this node knows one; during an
    /// election waits for its outcome, up to the request timeout, as etcd's
    /// clients do, instead of failing a request that a moment later would
    /// succeed. Still no leader then: `NotLeader { leader: None }`.
    async fn await_leader(&self) -> Result<u64, Error> {
        if let Some(leader) = self.inner.status.lock().leader {
            return Ok(leader.0);
        }
        match self.wait_for_leader().await {
            Err(Error::Timeout) => Err(Error::NotLeader { leader: None }),
            found => found,
        }
    }

    /// [`Self::await_leader`], refusing here if the leader is another node,
    /// as the Raft loop would, for what only a leader takes (keep-alives):
    /// without a round trip through this node's Raft thread first. (Just
    /// after this node won an election its status may name the old leader
    /// for one loop turn; the refusal then names a node that refuses too,
    /// and the client retries, as after any leader change.)
    async fn await_leading(&self) -> Result<(), Error> {
        match self.await_leader().await? {
            leader if leader != self.id() => Err(Error::NotLeader { leader: Some(NodeId(leader)) }),
            _ => Ok(()),
        }
    }

    /// Waits until this node knows a leader (single-node clusters elect
    /// themselves within an election timeout).
    pub async fn wait_for_leader(&self) -> Result<u64, Error> {
        self.poll_status(|st| match (st.leader, st.fatal) {
            (Some(leader), _) => Some(Ok(leader.0)),
            (None, Some(f)) => Some(Err(Error::Fatal(f))),
            (None, None) => None,
        })
        .await
        .unwrap_or(Err(Error::Timeout))
    }

    /// Reads this node's status every half tick until `done` makes
    /// something of it; `None` once the request timeout passed.
    async fn poll_status<T>(&self, done: impl Fn(NodeStatus) -> Option<T>) -> Option<T> {
        let deadline = tokio::time::Instant::now() + self.inner.config.request_timeout;
        loop {
            if let Some(found) = done(self.status()) {
                return Some(found);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(self.inner.config.tick_interval / 2).await;
        }
    }

    /// Stops the node's threads and waits for them. Writes already
    /// acknowledged are durable; requests in flight fail with `Stopped`.
    pub fn shutdown(&self) {
        let _ = self.inner.raft.send(LoopMsg::Shutdown);
        for t in self.inner.threads.lock().drain(..) {
            let _ = t.join();
        }
    }

    /// The node's storage (for tools and tests).
    pub fn storage(&self) -> &Storage {
        &self.inner.storage
    }
}

/// A node's worker threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worker {
    /// The thread that owns the Raft core.
    Raft,
    /// The thread that applies committed entries.
    Apply,
}

/// A cluster id as shown to operators: 16 hex digits.
pub fn format_cluster_id(id: u64) -> String {
    format!("{id:016x}")
}

/// A fresh, non-zero id (a cluster's that was given none, a forwarding
/// session's): unpredictable enough that two never meet by accident.
pub(crate) fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish().max(1)
}
