//! The clients of the simulated world (writes, reads of every kind,
//! membership changes, transfers, compaction) and the final heal-and-converge
//! liveness phase.

use std::fmt::Write as _;

use wasmraft_raft::{Index, Membership, MembershipChange, NodeId, ReadId, Role, Term};

use super::World;
use crate::sim::node::{PendingRead, ReadKind};

impl World {
    // ---- clients ----

    /// The up node that believes it leads the highest term.
    pub(super) fn leader(&self) -> Option<u64> {
        self.nodes
            .values()
            .filter_map(|n| n.raw.as_ref().map(|r| (r.status(), n.id)))
            .filter(|(s, _)| s.role == Role::Leader)
            .max_by_key(|(s, _)| s.term)
            .map(|(_, id)| id)
    }

    fn random_up(&mut self) -> Option<u64> {
        let up: Vec<u64> = self
            .nodes
            .values()
            .filter(|n| n.up())
            .map(|n| n.id)
            .collect();
        self.rng.pick(&up)
    }

    pub(super) fn client_ops(&mut self) -> Result<(), String> {
        // Idle phases (no writes) let lagging followers catch up and win
        // elections: that is when leases and vote guards matter.
        if self.phase_left == 0 {
            self.phase_left = self.rng.range(5, 60);
            self.idle = self.faults && self.rng.chance(0.3);
        }
        self.phase_left -= 1;
        // No client writes while converging (the final write is the probe).
        if self.faults && !self.idle && self.rng.chance(self.p.propose) {
            let target = if self.rng.chance(0.9) {
                self.leader()
            } else {
                self.random_up()
            };
            if let Some(id) = target {
                let n = self.rng.range(1, 4);
                let wids: Vec<u64> = (0..n)
                    .map(|_| {
                        self.next_id += 1;
                        self.next_id
                    })
                    .collect();
                let node = self.nodes.get_mut(&id).expect("node");
                let raw = node.raw.as_mut().expect("up");
                let term = raw.status().term;
                if let Ok(range) =
                    raw.propose(wids.iter().map(|w| w.to_le_bytes().to_vec()).collect())
                {
                    for (i, w) in (range.start.0..range.end.0).zip(&wids) {
                        node.writes.insert(Index(i), (term, *w));
                    }
                }
                self.drive(id)?;
            }
        }
        if self.rng.chance(self.p.read) {
            let target = if self.rng.chance(0.5) {
                self.leader()
            } else {
                self.random_up()
            };
            if let Some(id) = target {
                self.next_id += 1;
                let rid = self.next_id;
                let floor = self.oracle.floor();
                let start = self.oracle.now();
                let node = self.nodes.get_mut(&id).expect("node");
                if node
                    .raw
                    .as_mut()
                    .expect("up")
                    .read_index(ReadId(rid))
                    .is_ok()
                {
                    node.reads.insert(
                        rid,
                        PendingRead {
                            kind: ReadKind::ReadIndex,
                            floor,
                            start,
                            index: None,
                        },
                    );
                }
                self.drive(id)?;
            }
        }
        if self.rng.chance(self.p.lease) {
            // Any node that thinks it leads may try, stale leaders included.
            let leaders: Vec<u64> = self
                .nodes
                .values()
                .filter(|n| {
                    n.raw
                        .as_ref()
                        .is_some_and(|r| r.status().role == Role::Leader)
                })
                .map(|n| n.id)
                .collect();
            if let Some(id) = self.rng.pick(&leaders) {
                self.next_id += 1;
                let rid = self.next_id;
                let floor = self.oracle.floor();
                let start = self.oracle.now();
                let node = self.nodes.get_mut(&id).expect("node");
                if let Some(index) = node.raw.as_ref().expect("up").lease_read() {
                    node.reads.insert(
                        rid,
                        PendingRead {
                            kind: ReadKind::Lease,
                            floor,
                            start,
                            index: Some(index),
                        },
                    );
                    self.serve_reads(id)?;
                }
            }
        }
        if self.opts.broken_local_reads
            && self.rng.chance(0.5)
            && let Some(id) = self.random_up()
        {
            let floor = self.oracle.floor();
            let saw = self.nodes[&id].sm.last_write;
            self.oracle
                .served(&format!("node {id} local (broken)"), floor, saw)?;
        }
        if self.faults
            && self.rng.chance(self.p.conf)
            && let Some(id) = self.leader()
        {
            self.change_membership(id)?;
        }
        if self.faults
            && self.rng.chance(self.p.transfer)
            && let Some(id) = self.leader()
        {
            let voters: Vec<u64> = {
                let st = self.nodes[&id].raw.as_ref().expect("up").status();
                st.membership.voters.iter().map(|v| v.0).collect()
            };
            if let Some(to) = self.rng.pick(&voters) {
                let raw = self
                    .nodes
                    .get_mut(&id)
                    .expect("node")
                    .raw
                    .as_mut()
                    .expect("up");
                if raw.transfer_leader(NodeId(to)).is_ok() {
                    self.stats.transfers += 1;
                    trace!(self, "transfer {id} -> {to}");
                }
                self.drive(id)?;
            }
        }
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.rng.chance(self.p.compact) {
                let node = self.nodes.get_mut(&id).expect("node");
                if let Some(raw) = node.raw.as_mut()
                    && raw.reader_mut().compact(&node.sm)
                {
                    trace!(self, "node {id} compacted through {}", node.sm.applied);
                }
            }
        }
        Ok(())
    }

    fn change_membership(&mut self, id: u64) -> Result<(), String> {
        let m: Membership = self.nodes[&id]
            .raw
            .as_ref()
            .expect("up")
            .status()
            .membership;
        let all: Vec<u64> = (1..=self.p.pool).collect();
        let spares: Vec<u64> = all
            .iter()
            .copied()
            .filter(|&i| !m.contains(NodeId(i)))
            .collect();
        let learners: Vec<u64> = m.learners.iter().map(|n| n.0).collect();
        let voters: Vec<u64> = m.voters.iter().map(|n| n.0).collect();
        let change = match self.rng.range(0, 4) {
            0 => self
                .rng
                .pick(&spares)
                .map(|s| MembershipChange::AddLearner(NodeId(s))),
            1 if voters.len() < 5 => {
                let from = if learners.is_empty() {
                    &spares
                } else {
                    &learners
                };
                self.rng
                    .pick(from)
                    .map(|s| MembershipChange::AddVoter(NodeId(s)))
            }
            2 if voters.len() > 3 => self
                .rng
                .pick(&voters)
                .map(|s| MembershipChange::RemoveNode(NodeId(s))),
            3 => {
                // Swap a voter for a spare in one joint change.
                match (self.rng.pick(&voters), self.rng.pick(&spares)) {
                    (Some(out), Some(inn)) => {
                        let mut v = m.voters.clone();
                        v.remove(&NodeId(out));
                        v.insert(NodeId(inn));
                        Some(MembershipChange::Replace {
                            voters: v,
                            learners: m.learners.clone(),
                        })
                    }
                    _ => None,
                }
            }
            _ => self
                .rng
                .pick(&learners)
                .map(|s| MembershipChange::RemoveNode(NodeId(s))),
        };
        if let Some(change) = change {
            let raw = self
                .nodes
                .get_mut(&id)
                .expect("node")
                .raw
                .as_mut()
                .expect("up");
            let r = raw.propose_membership(change.clone());
            trace!(self, "membership {change:?} on {id}: {r:?}");
            self.drive(id)?;
        }
        Ok(())
    }

    // ---- liveness ----

    /// Heals everything and requires a leader and full convergence within a bound.
    pub(super) fn converge(&mut self) -> Result<(), String> {
        self.faults = false;
        self.cut.clear();
        self.slow.clear();
        self.p.drop = 0.0;
        self.p.dup = 0.0;
        self.p.long_delay = 0.0;
        self.p.compact = 0.0;
        self.p.lease = 0.0;
        for id in 1..=self.p.pool {
            let node = self.nodes.get_mut(&id).expect("node");
            node.crash_point = None;
            if !node.up() {
                self.restart(id);
            }
        }
        trace!(self, "--- heal and converge ---");
        let mut final_write: Option<(u64, Index)> = None;
        // Liveness: a leader within LEADER_BOUND steps of healing (and of any
        // later loss of leadership), and catch-up that never stalls for
        // PROGRESS_BOUND steps; catching up may take long with tiny messages.
        const LEADER_BOUND: u64 = 100;
        const PROGRESS_BOUND: u64 = 100;
        let (mut leaderless, mut stalled, mut progress) = (0, 0, (0, 0, Term(0), 0));
        let why = 'run: {
            for steps in 1..=self.opts.liveness_steps {
                self.step()?;
                let Some(l) = self.leader() else {
                    leaderless += 1;
                    if leaderless > LEADER_BOUND {
                        break 'run format!("no leader {LEADER_BOUND} steps after healing");
                    }
                    continue;
                };
                leaderless = 0;
                // Progress is applying, or a quorum catching up on the
                // leader's log: a new leader commits nothing until a quorum
                // holds all of it (§5.4.2), which with tiny messages and a
                // window of one takes longer than the bound.
                let st = self.nodes[&l].raw.as_ref().expect("up").status();
                let now = (
                    self.nodes.values().map(|n| n.sm.applied.0).sum::<u64>(),
                    l,
                    st.term,
                    st.progress.values().map(|p| p.matched.0).sum::<u64>(),
                );
                // A new leader only sets the baseline: churn that never
                // applies anything still runs into the bound.
                let same_leader = (now.1, now.2) == (progress.1, progress.2);
                let moved = now.0 > progress.0 || (same_leader && now.3 > progress.3);
                progress = (progress.0.max(now.0), now.1, now.2, now.3);
                if moved {
                    stalled = 0;
                } else {
                    stalled += 1;
                    if stalled > PROGRESS_BOUND {
                        break 'run format!("no progress for {PROGRESS_BOUND} steps after healing");
                    }
                }
                if final_write.is_none_or(|(fl, _)| fl != l) || st.term != self.nodes[&l].hard.term
                {
                    self.next_id += 1;
                    let raw = self
                        .nodes
                        .get_mut(&l)
                        .expect("node")
                        .raw
                        .as_mut()
                        .expect("up");
                    if let Ok(r) = raw.propose(vec![self.next_id.to_le_bytes().to_vec()]) {
                        final_write = Some((l, r.start));
                    }
                    self.drive(l)?;
                    continue;
                }
                let (_, idx) = final_write.expect("proposed");
                if st.commit < idx || st.commit != st.last_index || st.membership.is_joint() {
                    continue;
                }
                let done = st.membership.members().iter().all(|m| {
                    let n = &self.nodes[&m.0];
                    n.raw
                        .as_ref()
                        .is_some_and(|r| r.status().commit == st.commit)
                        && n.sm.applied == st.commit
                });
                if done {
                    self.stats.max_converge_steps = steps;
                    return Ok(());
                }
            }
            format!(
                "no convergence {} steps after healing",
                self.opts.liveness_steps
            )
        };
        let summary: Vec<String> = self
            .nodes
            .values()
            .map(|n| match n.raw.as_ref() {
                Some(r) => {
                    let s = r.status();
                    format!(
                        "node {}: {:?} term {} leader {:?} commit {} applied {} last {} members {:?}",
                        n.id, s.role, s.term.0, s.leader, s.commit, n.sm.applied, s.last_index, s.membership
                    )
                }
                None => format!("node {}: down", n.id),
            })
            .collect();
        Err(format!("liveness: {why}\n{}", summary.join("\n")))
    }
}
