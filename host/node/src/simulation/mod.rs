//! A deterministic simulation of whole nodes: the real Raft loop
//! ([`RaftLoop::turn`](crate::raft_loop::RaftLoop::turn)), the real apply
//! worker ([`ApplyWorker::handle`](crate::apply::ApplyWorker::handle)), real
//! RocksDB storage in a temporary directory and the real KV plugin, driven
//! without threads on a simulated clock. The core's own simulation
//! (`host/raft/tests/t50_simulation.rs`) proves the protocol; this one
//! proves the driver around it: the order of storage writes, snapshots,
//! sessions, the apply queue and what a crash leaves behind.
//!
//! Each millisecond of a run, the world may: deliver, drop, delay, reorder
//! or duplicate messages (snapshots included); partition a node; kill a
//! node, or set a crash point that fails its storage after its next few
//! write batches (so that crashes land between any two writes: an append,
//! an applied batch, a snapshot, a hash record); restart crashed nodes from
//! their directories; let a node's apply worker lag behind its log; pause a
//! node's Raft loop for up to 420 ms; ask the leader to hand leadership on;
//! step a node's wall clock by up to 10 s (only back while it is down or
//! has a crash point set; they
//! start up to 300 ms apart);
//! and give every running node a Raft loop turn. Clients put (tagged,
//! retried until acknowledged) and read (ReadIndex and lease, the latter
//! from the node's published lease when it holds) a few shared keys; lease
//! holders grant etcd leases, attach a key and keep them alive through the
//! leader's ticks, and now and then stop (`leases`); an operator grows the
//! cluster from three voters to four (the new node's address, a learner,
//! then a voter through joint consensus; it catches up by snapshot). Then
//! faults stop, every node runs, and the run must converge.
//!
//! Checked: election safety, committed-entry agreement and exclusive leader
//! leases at every step (`checks`), no failure but injected crashes, no
//! keyspace divergence; at the end, replicas agree on applied index,
//! keyspace, sessions and membership; every key's version equals its
//! acknowledged puts (exactly once); the client history is linearizable
//! (`wasmraft-lincheck`); no lease was revoked early, in log time or real
//! time, every replica revoked each at the same entry, and the leases of
//! stopped holders went within their bound (`leases`).
//!
//! `WASMRAFT_DRIVER_SIM_SEEDS` (default 12) seeds of
//! `WASMRAFT_DRIVER_SIM_MILLIS` (default 3000) simulated milliseconds run
//! in the test command; `WASMRAFT_DRIVER_SIM_SEED=n` replays one seed with
//! a trace (`cargo test -p wasmraft-node --lib simulation::replay -- --nocapture`).

mod admin;
mod checks;
mod clients;
mod cluster;
#[cfg(test)]
mod commit_index_saves;
#[cfg(test)]
mod commit_updates;
#[cfg(test)]
mod leader_proposals;
#[cfg(test)]
mod log_time_note;
mod leases;
#[cfg(test)]
mod ordering;
#[cfg(test)]
mod read_rounds;
#[cfg(test)]
mod stalled_follower;
mod rng;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use wasmraft_lincheck::{CheckOptions, KvModel, check};
use wasmraft_raft::Message;
use wasmraft_storage::SnapshotPart;

use admin::Admin;
use checks::{CRASH_POINT, Checks, replicas_agree};
use clients::{Clients, KEYS, decode_kv, get_request};
use cluster::{Live, Outbox, Outgoing, node_config};
use leases::{LeaseStats, Leases};
use rng::Rng;

use crate::config::NodeConfig;
use crate::boot_clock::BootClock;
use crate::node::Node;
use crate::transport::SnapshotDone;

/// What a run did, summed over seeds.
#[derive(Debug, Default, Clone)]
pub(crate) struct Stats {
    pub seeds: u64,
    pub millis: u64,
    pub turns: u64,
    pub kills: u64,
    pub crash_points_set: u64,
    pub crash_points_hit: u64,
    pub restarts: u64,
    /// Restarts whose machine rebooted: the boot clock started again.
    pub reboots: u64,
    pub partitions: u64,
    /// Raft loops paused for a while (`World::paused`).
    pub pauses: u64,
    /// Leader transfers asked for.
    pub transfers: u64,
    pub clock_steps: u64,
    pub messages: u64,
    pub dropped: u64,
    pub snapshots_delivered: u64,
    /// Restarts that found a snapshot install the crash had interrupted
    /// (its staged files in place), which the open then finished or, before
    /// its marker, discarded.
    pub installs_interrupted: u64,
    pub elections: u64,
    pub committed: u64,
    pub puts: u64,
    /// Puts a follower took and answered (it forwarded them).
    pub follower_puts: u64,
    pub reads: u64,
    /// Reads served from a node's published lease (`lease_share`).
    pub lease_share_reads: u64,
    pub retries: u64,
    /// Seeds whose joining node became a voter before faults stopped.
    pub joined_under_faults: u64,
    pub leases: LeaseStats,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.seeds += o.seeds;
        self.millis += o.millis;
        self.turns += o.turns;
        self.kills += o.kills;
        self.crash_points_set += o.crash_points_set;
        self.crash_points_hit += o.crash_points_hit;
        self.restarts += o.restarts;
        self.reboots += o.reboots;
        self.partitions += o.partitions;
        self.pauses += o.pauses;
        self.transfers += o.transfers;
        self.clock_steps += o.clock_steps;
        self.messages += o.messages;
        self.dropped += o.dropped;
        self.snapshots_delivered += o.snapshots_delivered;
        self.installs_interrupted += o.installs_interrupted;
        self.elections += o.elections;
        self.committed += o.committed;
        self.puts += o.puts;
        self.follower_puts += o.follower_puts;
        self.reads += o.reads;
        self.lease_share_reads += o.lease_share_reads;
        self.retries += o.retries;
        self.joined_under_faults += o.joined_under_faults;
        self.leases.add(&o.leases);
    }
}

/// Nodes 1 to 3 start the cluster; node 4 joins it during the run.
const NODES: u64 = 4;
const FOUNDERS: u64 = 3;
const CLIENTS: u64 = 4;
/// Lease holders, besides the clients.
const HOLDERS: u64 = 3;
/// The nodes' election timeout (see `node_config`), in ms.
const ELECTION_MS: u64 = 100;
/// How long a run may take to converge once faults stop.
const CONVERGE_MILLIS: u64 = 20_000;

enum Delivery {
    Message(Message),
    Snapshot(Message, Vec<SnapshotPart>, SnapshotDone),
}

struct InFlight {
    at: u64,
    to: u64,
    delivery: Delivery,
}

/// A node's place in the world: running, or down until a time.
struct Slot {
    config: NodeConfig,
    live: Option<Live>,
    down_until: u64,
    /// How far this node's wall clock is off (skewed at start, stepped as a
    /// fault), in ms.
    wall_offset_ms: i64,
    /// When its wall clock last stepped forward.
    stepped_forward_at: Option<u64>,
    /// When a crash point was set on its store, until it restarts: its
    /// notes may be refused from then on.
    crash_point_at: Option<u64>,
    /// Its machine rebooted and the node has taken no turn since, so it
    /// has not read its note of log time yet.
    booted_unread: bool,
    /// Its machine's boot clock.
    boot: BootClock,
    restarts: u64,
}

/// How long after a forward step of its wall clock a node's machine does
/// not reboot (counted to when its store could first refuse a note: a
/// crash point set, or its restart): after a reboot, a restarted node
/// measures its downtime by the wall clock, so a step it had no time to
/// note (one turn after the step, after a pause of up to 420 ms), or one
/// after the reboot before it read its note, would count as downtime: the
/// one case docs/design/006-timers-and-leases.md accepts.
const NO_REBOOT_AFTER_STEP_MS: u64 = 2_000;

struct HoldersStopped {
    leaderless_ms: u64,
    elections_before: usize,
}

struct World {
    rng: Rng,
    now: u64,
    base: Instant,
    slots: BTreeMap<u64, Slot>,
    outbox: Outbox,
    net: Vec<InFlight>,
    /// Nodes cut off from every other, until a time.
    isolated: BTreeMap<u64, u64>,
    /// Nodes whose Raft loop takes no turn until a time (a stalled thread,
    /// a paused process), while their clients and apply worker go on.
    paused: BTreeMap<u64, u64>,
    clients: Clients,
    leases: Leases,
    /// Since the lease holders stopped: the time without a leader, and the
    /// elections.
    holders_stopped: Option<HoldersStopped>,
    /// When each term's leader was first seen.
    elections_at: BTreeMap<u64, u64>,
    admin: Admin,
    checks: Checks,
    stats: Stats,
    trace: Option<Vec<String>>,
    _dir: tempfile::TempDir,
}

macro_rules! trace {
    ($w:expr, $($arg:tt)*) => {
        if let Some(t) = $w.trace.as_mut() {
            t.push(format!("[{:>6} ms] {}", $w.now, format!($($arg)*)));
        }
    };
}

/// Compiled plugins, shared by every node of every seed, and by every test
/// process: one directory that outlives them (nothing would remove one per
/// process). Entries are written whole and renamed, and a damaged one is
/// recompiled (`wasmraft_runtime` checks its digest).
fn plugin_cache() -> &'static PathBuf {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = std::env::temp_dir().join("wasmraft-driver-sim-cache");
        std::fs::create_dir_all(&dir).expect("create the plugin cache");
        dir
    })
}

impl World {
    fn new(seed: u64, trace: bool) -> Result<World, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let voters: Vec<u64> = (1..=FOUNDERS).collect();
        let base = Instant::now();
        let outbox = Outbox::default();
        let mut rng = Rng::new(seed);
        let mut slots = BTreeMap::new();
        for id in 1..=NODES {
            let mut config = node_config(id, &voters, dir.path(), plugin_cache(), seed);
            if id > FOUNDERS {
                config.join = true;
                config.bootstrap_voters.clear();
            }
            let boot = BootClock::Simulated { boot_id: [id as u8; 16], zero: base };
            let live = Live::start(config.clone(), outbox.clone(), boot, base)?;
            // Wall clocks up to 300 ms apart.
            let wall_offset_ms = rng.below(601) as i64 - 300;
            let slot = Slot { config, live: Some(live), down_until: 0, wall_offset_ms, stepped_forward_at: None, crash_point_at: None, booted_unread: false, boot, restarts: 0 };
            slots.insert(id, slot);
        }
        Ok(World {
            rng,
            now: 0,
            base,
            slots,
            outbox,
            net: Vec::new(),
            isolated: BTreeMap::new(),
            paused: BTreeMap::new(),
            clients: Clients::new(CLIENTS, FOUNDERS, base),
            leases: Leases::new(HOLDERS, FOUNDERS),
            holders_stopped: None,
            elections_at: BTreeMap::new(),
            admin: Admin::new(NODES, 200, 1000),
            checks: Checks::default(),
            stats: Stats { seeds: 1, ..Stats::default() },
            trace: trace.then(Vec::new),
            _dir: dir,
        })
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_millis(self.now)
    }

    fn node(&self, id: u64) -> Option<Node> {
        self.slots.get(&id)?.live.as_ref().map(|l| l.node.clone())
    }

    /// A running node that believes it leads (the one of the highest term).
    fn leader(&self) -> Option<Node> {
        self.slots
            .values()
            .filter_map(|s| s.live.as_ref())
            .map(|l| (l.node.status(), &l.node))
            .filter(|(st, _)| st.role == wasmraft_raft::Role::Leader)
            .max_by_key(|(st, _)| st.term)
            .map(|(_, n)| n.clone())
    }

    /// One simulated millisecond.
    fn step(&mut self, faults: bool, quiet: bool) -> Result<(), String> {
        self.now += 1;
        self.stats.millis += 1;
        if faults {
            self.inject_faults();
        }
        self.isolated.retain(|_, until| *until > self.now);
        self.paused.retain(|_, until| *until > self.now);
        self.restart_due()?;
        self.route()?;
        self.deliver();
        let mut ids: Vec<u64> = self.slots.keys().copied().collect();
        // Nodes take their turns in a random order.
        for i in (1..ids.len()).rev() {
            ids.swap(i, self.rng.below(i as u64 + 1) as usize);
        }
        let now = self.instant();
        let wall_ms = 1_700_000_000_000 + self.now;
        for id in ids {
            let wall_ms = wall_ms.saturating_add_signed(self.slots[&id].wall_offset_ms);
            let paused = self.paused.contains_key(&id);
            let stall = faults && self.rng.chance(0.02) || paused;
            let lag = self.rng.chance(0.3);
            let slow_disk = self.rng.chance(0.3);
            let Some(slot) = self.slots.get_mut(&id) else { continue };
            let Some(live) = slot.live.as_mut() else { continue };
            // The apply worker runs behind the Raft loop now and then, and
            // on while the loop is paused.
            if !lag && (paused || !stall) {
                live.apply(usize::MAX);
            }
            if stall {
                continue;
            }
            live.turn(now, wall_ms, slow_disk);
            slot.booted_unread = false;
            self.stats.turns += 1;
        }
        let slots = &self.slots;
        let live = |id: u64| slots.get(&id)?.live.as_ref().map(|l| l.node.clone());
        self.clients.step(self.now, &mut self.rng, quiet, NODES, &live);
        self.leases.step(self.now, &mut self.rng, faults, NODES, &live);
        let leader = self.leader();
        if let Some(stopped) = self.holders_stopped.as_mut() {
            stopped.leaderless_ms += u64::from(leader.is_none());
        }
        self.admin.step(self.now, leader);
        for (id, slot) in &self.slots {
            if let Some(live) = &slot.live {
                self.checks.observe(*id, &live.node)?;
                self.checks.lease_exclusive(*id, &live.node, now)?;
                self.leases.observe(self.now, *id, &live.node);
            }
        }
        for (term, leader) in self.checks.leaders() {
            if let std::collections::btree_map::Entry::Vacant(v) = self.elections_at.entry(term) {
                v.insert(self.now);
                trace!(self, "node {leader} leads term {term}");
            }
        }
        self.reap();
        if let Some(v) = self.clients.outcomes.violation.as_ref().or(self.leases.violation.as_ref()) {
            return Err(v.clone());
        }
        Ok(())
    }

    fn inject_faults(&mut self) {
        let ids: Vec<u64> = self.slots.keys().copied().collect();
        if self.rng.chance(0.0015) {
            let id = *self.rng.pick(&ids);
            let down = 30 + self.rng.below(300);
            if let Some(slot) = self.slots.get_mut(&id) {
                if slot.live.is_some() {
                    if self.rng.chance(0.5) {
                        // Its store closes as a killed process's does: what
                        // RocksDB had not flushed is lost.
                        if let Some(live) = slot.live.take() {
                            live.node.storage().crash_after_writes(0);
                        }
                        slot.down_until = self.now + down;
                        self.stats.kills += 1;
                        trace!(self, "kill -9 node {id}, back in {down} ms");
                    } else {
                        let writes = self.rng.below(6);
                        if let Some(live) = &slot.live {
                            live.node.storage().crash_after_writes(writes);
                        }
                        slot.crash_point_at.get_or_insert(self.now);
                        self.stats.crash_points_set += 1;
                        trace!(self, "node {id} crashes after {writes} more writes");
                    }
                }
            }
        }
        if self.rng.chance(0.0015) {
            // A wall clock steps by up to 10 s either way (NTP, an operator),
            // while its node runs, is paused or is down: a restarted node
            // measures the time since its last note of log time by its
            // machine's boot clock, which no step moves. Not forward after a
            // reboot before the node read its note: then it measures by the
            // wall clock (see `NO_REBOOT_AFTER_STEP_MS`).
            let id = *self.rng.pick(&ids);
            let step = self.rng.below(20_001) as i64 - 10_000;
            if let Some(slot) = self.slots.get_mut(&id)
                && !(step > 0 && slot.booted_unread)
            {
                slot.wall_offset_ms += step;
                if step > 0 {
                    slot.stepped_forward_at = Some(self.now);
                }
                self.stats.clock_steps += 1;
                trace!(self, "node {id}'s wall clock steps {step} ms");
            }
        }
        if self.rng.chance(0.001) {
            let id = *self.rng.pick(&ids);
            let until = self.now + 100 + self.rng.below(500);
            self.isolated.insert(id, until);
            self.stats.partitions += 1;
            trace!(self, "node {id} cut off until {until} ms");
        }
        if self.rng.chance(0.0005)
            && let Some(leader) = self.leader()
        {
            // An operator hands leadership on: the target's election skips
            // the voters' lease guard, so the leader's lease must end first.
            let to = *self.rng.pick(&ids);
            let (reply, _) = tokio::sync::oneshot::channel();
            let _ = leader.send(crate::raft_loop::LoopMsg::TransferLeader { to: wasmraft_raft::NodeId(to), reply });
            self.stats.transfers += 1;
            trace!(self, "leader {} asked to hand leadership to node {to}", leader.id());
        }
        if self.rng.chance(0.001) {
            // Past an election timeout or not: a leader's lease must end
            // on time even if its loop is not there to end it.
            let id = *self.rng.pick(&ids);
            let until = self.now + 20 + self.rng.below(400);
            self.paused.insert(id, until);
            self.stats.pauses += 1;
            trace!(self, "node {id}'s Raft loop paused until {until} ms");
        }
    }

    /// Takes down nodes that stopped: a crash point reached, or a loop
    /// that returned for another reason (which `checks` reports).
    fn reap(&mut self) {
        for (id, slot) in &mut self.slots {
            let Some(live) = &slot.live else { continue };
            let fatal = live.node.status().fatal;
            if live.stopped || fatal.is_some() {
                if fatal.as_deref().is_some_and(|f| f.contains(CRASH_POINT)) {
                    self.stats.crash_points_hit += 1;
                }
                if let Some(t) = self.trace.as_mut() {
                    t.push(format!("[{:>6} ms] node {id} stopped: {fatal:?}", self.now));
                }
                slot.live = None;
                slot.down_until = self.now + 20;
            }
        }
    }

    fn restart_due(&mut self) -> Result<(), String> {
        let now = self.instant();
        for (id, slot) in &mut self.slots {
            if slot.live.is_none() && slot.down_until <= self.now {
                let mut incoming = slot.config.data_dir.clone().into_os_string();
                incoming.push(".incoming/install");
                if std::path::Path::new(&incoming).exists() {
                    self.stats.installs_interrupted += 1;
                }
                // Every second restart, the machine rebooted too, unless its
                // wall clock stepped forward shortly before or since.
                slot.restarts += 1;
                // The step must have been noted before the store could
                // refuse notes.
                let notes_refused_from = slot.crash_point_at.take().unwrap_or(self.now);
                let reboot = slot.restarts % 2 == 0
                    && slot.stepped_forward_at.is_none_or(|at| at + NO_REBOOT_AFTER_STEP_MS <= notes_refused_from);
                if reboot && let BootClock::Simulated { mut boot_id, .. } = slot.boot {
                    boot_id[1] = boot_id[1].wrapping_add(1);
                    slot.boot = BootClock::Simulated { boot_id, zero: now };
                    slot.booted_unread = true;
                    self.stats.reboots += 1;
                }
                slot.live = Some(Live::start(slot.config.clone(), self.outbox.clone(), slot.boot, now)?);
                self.stats.restarts += 1;
                if let Some(t) = self.trace.as_mut() {
                    let how = if reboot { " after a reboot" } else { "" };
                    t.push(format!("[{:>6} ms] node {id} restarts{how}", self.now));
                }
            }
        }
        Ok(())
    }

    fn cut(&self, from: u64, to: u64) -> bool {
        self.isolated.contains_key(&from) || self.isolated.contains_key(&to)
    }

    /// Puts what nodes sent on the network, with loss, delay and
    /// duplication.
    fn route(&mut self) -> Result<(), String> {
        let sent = std::mem::take(&mut *self.outbox.lock());
        // Sent during the last millisecond's turns.
        let sent_at = self.base + Duration::from_millis(self.now - 1);
        for (from, out) in sent {
            self.stats.messages += 1;
            if let Outgoing::Message(m) = &out {
                self.lease_covers(from, m, sent_at)?;
            }
            let (to, delivery) = match out {
                Outgoing::Message(m) => (m.to.0, Delivery::Message(m)),
                Outgoing::Snapshot(m, data, done) => (m.to.0, Delivery::Snapshot(m, data, done)),
            };
            if self.cut(from, to) || self.rng.chance(0.02) {
                self.stats.dropped += 1;
                if let Delivery::Snapshot(_, _, done) = delivery {
                    done(false);
                }
                continue;
            }
            let delay = if self.rng.chance(0.03) { 20 + self.rng.below(60) } else { 1 + self.rng.below(6) };
            if let Delivery::Message(m) = &delivery {
                if self.rng.chance(0.01) {
                    let at = self.now + 1 + self.rng.below(30);
                    self.net.push(InFlight { at, to, delivery: Delivery::Message(m.clone()) });
                }
            }
            self.net.push(InFlight { at: self.now + delay, to, delivery });
        }
        Ok(())
    }

    /// A leader tells no one of a commit index past the one its lease
    /// publishes: a follower that learned it could acknowledge a write that
    /// a lease read on the leader then misses.
    fn lease_covers(&self, from: u64, m: &Message, sent_at: Instant) -> Result<(), String> {
        let commit = match m.body {
            wasmraft_raft::MessageBody::AppendEntries { commit, .. } | wasmraft_raft::MessageBody::Heartbeat { commit, .. } => commit.0,
            _ => return Ok(()),
        };
        match self.node(from).and_then(|n| n.lease_held(sent_at)) {
            Some(lease) if lease.term == m.term.0 && commit > lease.commit => Err(format!(
                "node {from} sent commit {commit} to node {} while its lease publishes index {}",
                m.to.0, lease.commit
            )),
            _ => Ok(()),
        }
    }

    fn deliver(&mut self) {
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.net).into_iter().partition(|f| f.at <= self.now);
        self.net = later;
        for f in due {
            let node = self.node(f.to);
            match (f.delivery, node) {
                (Delivery::Message(m), Some(node)) => node.step(m),
                (Delivery::Snapshot(m, parts, done), Some(node)) => {
                    trace!(self, "snapshot at {} delivered to node {}", snapshot_index(&m), f.to);
                    let wasmraft_raft::MessageBody::InstallSnapshot { meta } = &m.body else { unreachable!() };
                    // Staged on the receiver's disk as the gRPC service does.
                    let staged = node.stage_snapshot(meta).and_then(|mut staging| {
                        parts.into_iter().try_for_each(|p| staging.add(p))?;
                        staging.finish()
                    });
                    match staged {
                        Ok(staged) => {
                            self.stats.snapshots_delivered += 1;
                            node.receive_snapshot(m, staged);
                            done(true);
                        }
                        Err(e) => panic!("staging a snapshot from an honest leader failed: {e}"),
                    }
                }
                (Delivery::Snapshot(_, _, done), None) => done(false),
                (Delivery::Message(_), None) => {}
            }
        }
    }

    /// Whether no running node has a lease left.
    fn leases_gone(&self) -> Result<bool, String> {
        let nodes: Vec<(u64, Node)> = self.slots.keys().filter_map(|&id| Some((id, self.node(id)?))).collect();
        self.leases.none_left(&nodes)
    }

    /// Whether every node runs and applied the same index as the others,
    /// with nothing left to apply.
    fn converged(&self) -> bool {
        let mut applied = BTreeSet::new();
        for slot in self.slots.values() {
            let Some(live) = &slot.live else { return false };
            let st = live.node.status();
            if live.apply_queued() > 0 || st.applied != st.commit {
                return false;
            }
            applied.insert(st.applied);
        }
        applied.len() == 1
    }
}

fn snapshot_index(m: &Message) -> u64 {
    match &m.body {
        wasmraft_raft::MessageBody::InstallSnapshot { meta } => meta.last.index.0,
        _ => 0,
    }
}

/// Runs one seed; `Err` says what went wrong (with a trace if asked).
pub(crate) fn run_seed(seed: u64, millis: u64, trace: bool) -> Result<Stats, String> {
    let mut w = World::new(seed, trace)?;
    let result = run(&mut w, millis);
    w.stats.elections = w.checks.elections() as u64;
    w.stats.committed = w.checks.committed() as u64;
    let o = &w.clients.outcomes;
    (w.stats.puts, w.stats.follower_puts, w.stats.reads, w.stats.retries) = (o.puts, o.follower_puts, o.reads, o.retries);
    w.stats.lease_share_reads = o.lease_share_reads;
    w.stats.leases = w.leases.stats.clone();
    match result {
        Ok(()) => Ok(w.stats.clone()),
        Err(e) => {
            let trace = w.trace.map(|t| t.join("\n")).unwrap_or_default();
            Err(format!("seed {seed} at {} ms: {e}\n{trace}", w.now))
        }
    }
}

fn run(w: &mut World, millis: u64) -> Result<(), String> {
    while w.now < millis {
        w.step(true, false)?;
    }
    // Faults stop; crashed nodes come back; clients finish what they began;
    // lease holders stop renewing, and their leases must go.
    trace!(w, "faults stop");
    w.leases.stop_all(w.now);
    w.holders_stopped = Some(HoldersStopped { leaderless_ms: 0, elections_before: w.checks.elections() });
    w.stats.joined_under_faults = u64::from(w.admin.done());
    w.isolated.clear();
    w.paused.clear();
    for slot in w.slots.values_mut() {
        slot.down_until = slot.down_until.min(w.now);
        if let Some(live) = &slot.live {
            live.node.storage().crash_after_writes(u64::MAX);
        }
    }
    let deadline = w.now + CONVERGE_MILLIS;
    while !(w.clients.idle() && w.admin.done() && w.converged() && w.leases_gone()?) {
        if w.now >= deadline {
            let status: Vec<String> = w
                .slots
                .iter()
                .map(|(id, s)| match &s.live {
                    Some(l) => {
                        let st = l.node.status();
                        format!("node {id}: {:?} term {} commit {} applied {}", st.role, st.term, st.commit, st.applied)
                    }
                    None => format!("node {id}: down"),
                })
                .collect();
            return Err(format!(
                "no convergence {CONVERGE_MILLIS} ms after faults stopped (clients idle: {}, node {NODES} joined: {}, leases gone: {}): {}",
                w.clients.idle(),
                w.admin.done(),
                w.leases_gone()?,
                status.join("; ")
            ));
        }
        w.step(false, true)?;
    }
    w.clients.finish();
    let nodes: Vec<(u64, Node)> = w.slots.keys().filter_map(|&id| Some((id, w.node(id)?))).collect();
    replicas_agree(&nodes)?;
    // Exactly once: no key was changed more often than its puts were
    // acknowledged (every put finished, so none is in doubt).
    let (_, node) = &nodes[0];
    for key in KEYS {
        let bytes = node.query_applied(&get_request(key)).map_err(|e| e.to_string())?;
        let version = decode_kv(&bytes)?.map_or(0, |(_, v)| v as u64);
        let acknowledged = w.clients.outcomes.acknowledged_puts.get(key).copied().unwrap_or(0);
        if version != acknowledged {
            return Err(format!("key {key:?} has version {version} after {acknowledged} acknowledged puts: a put applied twice or lost"));
        }
    }
    // A lease kept alive until the holders stopped lasts at most TTL + an
    // election timeout + the time without a leader; each election since
    // may add its grace and the 500 ms a new leader's log time may lag its
    // predecessor's (`StampClock`); 200 ms for the network and ticks.
    let stopped = w.holders_stopped.as_ref().expect("set when faults stop");
    let elections = (w.checks.elections() - stopped.elections_before) as u64;
    let late = ELECTION_MS + stopped.leaderless_ms + elections * (500 + ELECTION_MS) + 200;
    w.leases.verify(&w.checks, &w.elections_at, ELECTION_MS, late)?;
    let result = check::<KvModel>(&w.clients.outcomes.history, &CheckOptions::default());
    if !result.is_ok() {
        return Err(format!("the client history is not linearizable: {result}"));
    }
    Ok(())
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn run_seeds(shard: u64, shards: u64) {
    let seeds = env_u64("WASMRAFT_DRIVER_SIM_SEEDS", 12);
    let millis = env_u64("WASMRAFT_DRIVER_SIM_MILLIS", 3000);
    let base = env_u64("WASMRAFT_DRIVER_SIM_SEED_BASE", 0);
    let mut total = Stats::default();
    let mut failures = Vec::new();
    for seed in (base..base + seeds).filter(|s| s % shards == shard) {
        match run_seed(seed, millis, false) {
            Ok(stats) => total.add(&stats),
            Err(e) => failures.push((seed, e)),
        }
    }
    println!("driver simulation shard {shard}/{shards}: {total:?}");
    if let Some((seed, err)) = failures.first() {
        let seeds: Vec<u64> = failures.iter().map(|f| f.0).collect();
        let replay = run_seed(*seed, millis, true).err().unwrap_or_else(|| "replay passed: not deterministic".into());
        panic!(
            "{} failing seed(s) {seeds:?}\nfirst: {err}\nreplay: WASMRAFT_DRIVER_SIM_SEED={seed} cargo test -p wasmraft-node --lib simulation::replay -- --nocapture\n{replay}",
            failures.len()
        );
    }
    assert!(total.seeds > 0, "no seed ran");
    assert!(total.follower_puts > 0, "no put went through a follower: forwarding untested");
    assert!(total.lease_share_reads > 0, "no read was served from a published lease: lease reads untested");
}

#[test]
fn driver_simulation_shard_0() {
    run_seeds(0, 2);
}

#[test]
fn driver_simulation_shard_1() {
    run_seeds(1, 2);
}

/// Replays `WASMRAFT_DRIVER_SIM_SEED` with a trace (no-op without it).
#[test]
fn replay() {
    let Ok(seed) = std::env::var("WASMRAFT_DRIVER_SIM_SEED") else { return };
    let seed: u64 = seed.parse().expect("WASMRAFT_DRIVER_SIM_SEED is a number");
    match run_seed(seed, env_u64("WASMRAFT_DRIVER_SIM_MILLIS", 3000), true) {
        Ok(stats) => println!("seed {seed} passed: {stats:?}"),
        Err(e) => panic!("{e}"),
    }
}
