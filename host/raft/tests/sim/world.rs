//! The simulated world: nodes, network, clients, faults, and the run loop.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt::Write as _;

use wasmraft_raft::{Config, EntryPayload, Index, Message, MessageBody, NodeId, RawNode, Role};

use super::checker::{Checker, Oracle};
use super::node::{CrashPoint, ReadKind, SimDisk, SimNode, SnapshotData};
use super::params::{Options, Params, SKEW, Stats, TICK};
use super::rng::Rng;

struct InFlight {
    at: u64,
    seq: u64,
    msg: Message,
    snapshot: Option<SnapshotData>,
    lost: bool,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

struct World {
    seed: u64,
    rng: Rng,
    p: Params,
    opts: Options,
    time: u64,
    nodes: BTreeMap<u64, SimNode>,
    net: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Directed links that drop messages.
    cut: BTreeSet<(u64, u64)>,
    /// Directed links with a large extra delay (slow, not dead).
    slow: BTreeMap<(u64, u64), u64>,
    /// Last delivery time per link: once healed, links are FIFO like a stream.
    last_at: BTreeMap<(u64, u64), u64>,
    faults: bool,
    /// Steps left in the current workload phase, and whether it is idle (no writes).
    phase_left: u64,
    idle: bool,
    checker: Checker,
    oracle: Oracle,
    next_id: u64,
    stats: Stats,
    trace: Option<Vec<String>>,
    /// Its own stream, so that hostile input leaves every seed's run as it
    /// was: each hostile message must be refused and change nothing.
    hostile_rng: Rng,
    /// Its own stream too: a seed whose leaders send commit updates at once
    /// runs as it did before they could defer them.
    commit_rng: Rng,
}

macro_rules! trace {
    ($w:expr, $($arg:tt)*) => {
        if let Some(t) = $w.trace.as_mut() {
            let mut s = format!("[t={} ] ", $w.time);
            let _ = write!(s, $($arg)*);
            t.push(s);
        }
    };
}

mod clients;
mod hostile;

/// Runs one seed; `Err` carries the violation (and the trace if `trace`).
pub fn run_seed(seed: u64, opts: &Options, trace: bool) -> Result<Stats, String> {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut w = World::new(seed, opts.clone(), trace);
        let r = w.run();
        (r, w.trace.take(), w.stats.clone())
    }));
    let (r, lines, stats) = match result {
        Ok(x) => x,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (Err(format!("panic: {msg}")), None, Stats::default())
        }
    };
    match r {
        Ok(()) => Ok(stats),
        Err(e) => {
            let mut msg = format!("seed {seed}: {e}");
            if let Some(lines) = lines {
                let from = lines.len().saturating_sub(400);
                msg.push_str("\n--- last events ---\n");
                msg.push_str(&lines[from..].join("\n"));
            }
            Err(msg)
        }
    }
}

impl World {
    fn new(seed: u64, opts: Options, trace: bool) -> World {
        let mut rng = Rng::new(seed);
        let mut p = Params::draw(&mut rng);
        let mut commit_rng = Rng::new(super::rng::mix(seed, 0xC0_3317));
        if commit_rng.chance(0.5) && std::env::var_os("WASMRAFT_SIM_NO_DEFER").is_none() {
            p.defer_commit_updates = Some(commit_rng.range(0, 1000) as f64 / 1000.0);
        }
        let mut disk_rng = Rng::new(super::rng::mix(seed, 0x5A7E));
        p.keep_back_commits = disk_rng.chance(0.5);
        p.durable_state = disk_rng.chance(0.5);
        let voters: Vec<u64> = (1..=p.voters).collect();
        let mut w = World {
            seed,
            p,
            opts,
            time: 0,
            nodes: BTreeMap::new(),
            net: BinaryHeap::new(),
            seq: 0,
            cut: BTreeSet::new(),
            slow: BTreeMap::new(),
            last_at: BTreeMap::new(),
            faults: true,
            phase_left: 0,
            idle: false,
            checker: Checker::default(),
            oracle: Oracle::default(),
            next_id: 1,
            stats: Stats {
                runs: 1,
                ..Stats::default()
            },
            trace: trace.then(Vec::new),
            rng,
            hostile_rng: Rng::new(super::rng::mix(seed, 0xB1_2A17)),
            commit_rng,
        };
        for id in 1..=w.p.pool {
            let mut disk = if id <= w.p.voters {
                SimDisk::new(&voters)
            } else {
                SimDisk::new(&[])
            };
            disk.store.keep_back_commits = w.p.keep_back_commits;
            let period = w.rng.range(TICK - SKEW, TICK + SKEW);
            let next_tick = w.rng.range(1, period);
            let node = SimNode {
                id,
                raw: None,
                down: Some(disk),
                sm: Default::default(),
                period,
                next_tick,
                writes: BTreeMap::new(),
                reads: BTreeMap::new(),
                hard: Default::default(),
                crash_point: None,
            };
            w.nodes.insert(id, node);
            w.restart(id);
        }
        trace!(w, "params {:?}", w.p);
        w
    }

    fn config(&self, id: u64, applied: Index) -> Config {
        Config {
            id: NodeId(id),
            seed: self.seed,
            pre_vote: self.p.pre_vote,
            max_inflight_msgs: self.p.max_inflight,
            max_entries_bytes_per_msg: self.p.max_bytes,
            max_inflight_bytes: self.p.max_inflight_bytes,
            // Small, so that handing out committed entries pauses and resumes.
            max_applying_bytes: self.p.max_bytes,
            applied,
            defer_commit_updates: self.p.defer_commit_updates.is_some(),
            ..Config::default()
        }
    }

    fn run(&mut self) -> Result<(), String> {
        for _ in 0..self.opts.steps {
            self.step()?;
        }
        self.converge()
    }

    fn step(&mut self) -> Result<(), String> {
        self.stats.steps += 1;
        if self.faults {
            self.inject_faults();
            self.inject_hostile()?;
        }
        self.client_ops()?;
        let end = self.time + TICK;
        loop {
            let next_msg = self.net.peek().map(|m| m.0.at);
            let next_tick = self
                .nodes
                .values()
                .filter(|n| n.up())
                .map(|n| (n.next_tick, n.id))
                .min();
            let t = match (next_msg, next_tick) {
                (Some(m), Some((t, _))) => m.min(t),
                (Some(m), None) => m,
                (None, Some((t, _))) => t,
                (None, None) => break,
            };
            if t >= end {
                break;
            }
            self.time = t;
            if next_msg == Some(t) {
                let Reverse(m) = self.net.pop().expect("peeked");
                self.deliver(m)?;
            } else {
                let (_, id) = next_tick.expect("a tick is next");
                let node = self.nodes.get_mut(&id).expect("node");
                node.next_tick += node.period;
                let raw = node.raw.as_mut().expect("up");
                raw.tick();
                if let Some(chance) = self.p.defer_commit_updates
                    && self.commit_rng.chance(chance)
                {
                    raw.send_commit_updates(|_| true);
                }
                self.drive(id)?;
            }
        }
        self.time = end;
        Ok(())
    }

    // ---- faults ----

    fn inject_faults(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        if self.rng.chance(self.p.crash) {
            let up: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| self.nodes[id].up())
                .collect();
            if let Some(id) = self.rng.pick(&up) {
                match self.rng.range(0, 2) {
                    0 => self.crash(id),
                    1 => {
                        self.nodes.get_mut(&id).expect("node").crash_point =
                            Some(CrashPoint::BeforePersist)
                    }
                    _ => {
                        self.nodes.get_mut(&id).expect("node").crash_point =
                            Some(CrashPoint::AfterPersist)
                    }
                }
            }
        }
        for &id in &ids {
            if !self.nodes[&id].up() && self.rng.chance(self.p.restart) {
                self.restart(id);
            }
        }
        if self.rng.chance(self.p.partition) {
            let voters: Vec<u64> = (1..=self.p.pool).collect();
            let leader = self.leader();
            match self.rng.range(0, 5) {
                4 => {
                    // Slow links, mostly into the leader: acknowledgements
                    // arrive late, and so does news of a higher term.
                    for _ in 0..self.rng.range(1, 3) {
                        let a = self.rng.range(1, self.p.pool);
                        let b = leader
                            .filter(|_| self.rng.chance(0.7))
                            .unwrap_or_else(|| self.rng.range(1, self.p.pool));
                        let extra = self.rng.range(2 * TICK, 8 * TICK);
                        self.slow.insert((a, b), extra);
                        trace!(self, "slow {a} -> {b} by {extra}");
                    }
                }
                3 if leader.is_some() => {
                    // The leader's messages to some followers are lost, not theirs to it.
                    let l = leader.expect("checked");
                    for _ in 0..self.rng.range(1, 2) {
                        let b = self.rng.range(1, self.p.pool);
                        self.cut.insert((l, b));
                        trace!(self, "cut leader {l} -> {b}");
                    }
                }
                0 => {
                    // Symmetric split into two sides.
                    let side: BTreeSet<u64> = voters
                        .iter()
                        .copied()
                        .filter(|_| self.rng.chance(0.5))
                        .collect();
                    for &a in &voters {
                        for &b in &voters {
                            if side.contains(&a) != side.contains(&b) {
                                self.cut.insert((a, b));
                            }
                        }
                    }
                    trace!(self, "partition {side:?} | rest");
                }
                1 => {
                    // Asymmetric: some links drop one way only.
                    for _ in 0..self.rng.range(1, 4) {
                        let a = self.rng.range(1, self.p.pool);
                        let b = self.rng.range(1, self.p.pool);
                        self.cut.insert((a, b));
                        trace!(self, "cut {a} -> {b}");
                    }
                }
                _ => {
                    let a = leader
                        .filter(|_| self.rng.chance(0.5))
                        .unwrap_or_else(|| self.rng.range(1, self.p.pool));
                    for &b in &voters {
                        self.cut.insert((a, b));
                        self.cut.insert((b, a));
                    }
                    trace!(self, "isolate {a}");
                }
            }
        }
        if !(self.cut.is_empty() && self.slow.is_empty()) && self.rng.chance(self.p.heal) {
            self.cut.clear();
            self.slow.clear();
            trace!(self, "heal");
        }
    }

    fn crash(&mut self, id: u64) {
        let node = self.nodes.get_mut(&id).expect("node");
        let Some(raw) = node.raw.take() else { return };
        let mut disk = raw.into_reader();
        disk.staged = None;
        // Everything it applied came from entries already persisted.
        disk.applied_state = self.p.durable_state.then(|| node.sm.clone());
        node.down = Some(disk);
        node.writes.clear();
        node.reads.clear();
        node.crash_point = None;
        self.stats.crashes += 1;
        trace!(self, "crash {id}");
    }

    fn restart(&mut self, id: u64) {
        let mut disk = self.nodes.get_mut(&id).expect("node").down.take().expect("down");
        // A snapshot installed since is newer than what was applied.
        let sm = match disk.applied_state.take() {
            Some(sm) if sm.applied >= disk.store.snapshot_index() => sm,
            _ => disk.snap_state.clone(),
        };
        let cfg = self.config(id, sm.applied);
        let time = self.time;
        let node = self.nodes.get_mut(&id).expect("node");
        node.sm = sm;
        node.hard = disk.store.hard_state;
        node.raw = Some(RawNode::new(cfg, disk).expect("restart"));
        node.next_tick = time + node.period;
        trace!(self, "start {id}");
    }

    // ---- network ----

    fn send(&mut self, from: u64, msgs: Vec<Message>) {
        for msg in msgs {
            self.stats.messages += 1;
            let snapshot = if let MessageBody::InstallSnapshot { meta } = &msg.body {
                let disk = self.nodes[&from].raw.as_ref().expect("sender up").reader();
                let data = disk
                    .snapshot_data()
                    .expect("leader has the snapshot it sends");
                assert_eq!(
                    &data.meta, meta,
                    "snapshot message does not match the leader's snapshot"
                );
                Some(data)
            } else {
                None
            };
            let copies = if self.rng.chance(self.p.dup) { 2 } else { 1 };
            for _ in 0..copies {
                let lost = self.rng.chance(self.p.drop);
                let mut delay = self.rng.range(1, self.p.max_delay);
                if self.rng.chance(self.p.long_delay) {
                    delay += self.rng.range(TICK, 5 * TICK);
                }
                delay += self.slow.get(&(from, msg.to.0)).copied().unwrap_or(0);
                let mut at = self.time + delay;
                if !self.faults {
                    let last = self.last_at.entry((from, msg.to.0)).or_insert(0);
                    at = at.max(*last);
                    *last = at;
                }
                self.seq += 1;
                let m = InFlight {
                    at,
                    seq: self.seq,
                    msg: msg.clone(),
                    snapshot: snapshot.clone(),
                    lost,
                };
                self.net.push(Reverse(m));
            }
        }
    }

    fn deliver(&mut self, m: InFlight) -> Result<(), String> {
        let (from, to) = (m.msg.from.0, m.msg.to.0);
        let blocked = m.lost || self.cut.contains(&(from, to)) || !self.nodes[&to].up();
        let is_snapshot = m.snapshot.is_some();
        if blocked {
            if is_snapshot {
                self.report_snapshot(from, to, false)?;
            }
            return Ok(());
        }
        trace!(self, "{from} -> {to} t{} {:?}", m.msg.term.0, m.msg.body);
        let node = self.nodes.get_mut(&to).expect("node");
        let raw = node.raw.as_mut().expect("up");
        if let Some(data) = m.snapshot {
            raw.reader_mut().staged = Some(data); // streamed and durable
        }
        raw.step(m.msg).map_err(|e| e.to_string())?;
        self.drive(to)?;
        if is_snapshot {
            self.report_snapshot(from, to, true)?;
        }
        Ok(())
    }

    fn report_snapshot(&mut self, leader: u64, to: u64, ok: bool) -> Result<(), String> {
        if let Some(raw) = self.nodes.get_mut(&leader).and_then(|n| n.raw.as_mut()) {
            raw.report_snapshot(NodeId(to), ok);
            self.drive(leader)?;
        }
        Ok(())
    }

    // ---- the driver ----

    /// Handles every Ready of `id` the way `host/node` must (crate docs).
    fn drive(&mut self, id: u64) -> Result<(), String> {
        loop {
            let node = self.nodes.get_mut(&id).expect("node");
            let Some(raw) = node.raw.as_mut() else {
                return Ok(());
            };
            if !raw.has_ready() {
                return Ok(());
            }
            let rd = raw.ready();
            let term = raw.status().term;
            let mut became_leader = false;
            if let Some(ss) = rd.soft_state {
                trace!(
                    self,
                    "node {id} {:?} term {} leader {:?}", ss.role, term.0, ss.leader
                );
                if ss.role == Role::Leader {
                    self.checker.leader(term, id)?;
                    self.stats.elections += 1;
                    became_leader = true;
                }
            }
            let node = self.nodes.get_mut(&id).expect("node");
            let old_hard = node.hard;
            if let Some(hs) = rd.hard_state {
                Checker::hard_state(id, old_hard, hs)?;
            }
            // 1. messages that may leave before the writes are durable.
            self.send(id, rd.messages.clone());
            let node = self.nodes.get_mut(&id).expect("node");
            if node.crash_point == Some(CrashPoint::BeforePersist) {
                self.crash(id);
                return Ok(());
            }
            // 2 + 3. snapshot, entries, hard state: durable.
            let raw = node.raw.as_mut().expect("up");
            let disk = raw.reader_mut();
            let new = disk.persist(&rd);
            if rd.snapshot.is_some() {
                node.sm = disk.snap_state.clone();
                node.writes.retain(|&i, _| i > node.sm.applied);
                self.stats.snapshots_installed += 1;
                trace!(
                    self,
                    "node {id} installed snapshot {:?}",
                    rd.snapshot.as_ref().map(|s| s.last)
                );
            }
            self.checker.persisted(id, &new)?;
            let node = self.nodes.get_mut(&id).expect("node");
            let disk = node.raw.as_ref().expect("up").reader();
            if let Some(hs) = rd.hard_state {
                self.checker
                    .committed(id, disk, old_hard.commit, hs.commit)?;
                node.hard = hs;
            }
            if became_leader {
                self.checker.leader_complete(id, disk)?;
            }
            if node.crash_point == Some(CrashPoint::AfterPersist) {
                self.crash(id);
                return Ok(());
            }
            // 4. messages that depend on the writes.
            self.send(id, rd.persisted_messages.clone());
            // 5. apply, acknowledge writes, record read indexes.
            let node = self.nodes.get_mut(&id).expect("node");
            for e in &rd.committed_entries {
                node.sm.apply(e);
                self.checker.applied(id, &node.sm)?;
                if let EntryPayload::Membership(m) = &e.payload
                    && !m.is_joint()
                {
                    self.stats.membership_committed += 1;
                }
                if let Some((t, wid)) = node.writes.remove(&e.log_id.index)
                    && t == e.log_id.term
                    && e.payload == EntryPayload::Normal(wid.to_le_bytes().to_vec())
                {
                    self.oracle.ack(e.log_id.index);
                    self.stats.writes_acked += 1;
                }
            }
            for rs in &rd.read_states {
                if let Some(r) = node.reads.get_mut(&rs.id.0) {
                    r.index = Some(rs.index);
                }
            }
            let applied = node.sm.applied;
            let raw = node.raw.as_mut().expect("up");
            raw.advance(rd);
            raw.applied_to(applied);
            self.serve_reads(id)?;
        }
    }

    fn serve_reads(&mut self, id: u64) -> Result<(), String> {
        let node = self.nodes.get_mut(&id).expect("node");
        let applied = node.sm.applied;
        let ready: Vec<u64> = node
            .reads
            .iter()
            .filter(|(_, r)| r.index.is_some_and(|i| i <= applied))
            .map(|(&k, _)| k)
            .collect();
        for k in ready {
            let r = node.reads.remove(&k).expect("listed");
            let saw = node.sm.last_write;
            let what = match r.kind {
                ReadKind::ReadIndex => {
                    self.stats.read_index_served += 1;
                    "read-index"
                }
                ReadKind::Lease => {
                    self.stats.lease_served += 1;
                    "lease"
                }
            };
            self.oracle
                .served(&format!("node {id} {what}"), r.floor, saw)?;
        }
        Ok(())
    }
}
