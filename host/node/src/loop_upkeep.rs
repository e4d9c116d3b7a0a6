//! The Raft loop's chores around its messages: ticks (caught up after a
//! stall), ReadIndex rounds and their expiry, keep-alives and the plugin's
//! ticks, the apply side's progress, received snapshots, this node's
//! removal, and warnings throttled so that no peer can flood the log.

use std::time::{Duration, Instant};

use wasmraft_raft::{Index, Message, MessageBody, ReadId, Role};

use crate::apply::ApplyTask;
use crate::error::Error;
use crate::metrics::bump;
use crate::raft_loop::{LoopMsg, ProposeReply, RaftLoop, propose_error};
use crate::transport::Transport;

impl<T: Transport> RaftLoop<T> {
    /// The apply side applied through `index` (reported, or read from the
    /// node's status at a turn).
    pub(crate) fn note_applied(&mut self, index: Index) {
        if index > self.raw.applied() {
            self.raw.applied_to(index);
        }
        self.ticker.applied(index.0);
    }

    /// Asks the apply worker to tell this loop of its next batch if
    /// something here waits for applying to progress; otherwise the next
    /// turn reads the applied index anyway (see `AppliedWanted`).
    pub(crate) fn ask_for_applied_if_waiting(&mut self) {
        let waits = self.raw.waits_for_applied() || self.ticker.waits_for_applied() || self.forwarded_budget.holds();
        if !waits {
            return;
        }
        self.applied_wanted.ask();
        // Applied since this turn read it: take another turn for it.
        let applied = self.status.lock().applied;
        if applied > self.raw.applied().0 {
            let _ = self.self_tx.send(LoopMsg::Applied(Index(applied)));
        }
    }

    /// Whether a received snapshot may be installed: only the leader of the
    /// current term may send one, and only one ahead of what this node has
    /// committed. Checked before its data is kept, so a forged or stale
    /// snapshot never reaches storage.
    pub(crate) fn may_install(&self, m: &Message) -> Result<(), &'static str> {
        let MessageBody::InstallSnapshot { meta } = &m.body else {
            return Err("not a snapshot");
        };
        let s = self.raw.status();
        if m.term != s.term || s.leader != Some(m.from) || s.role != Role::Follower {
            return Err("the sender is not the leader of this node's current term");
        }
        if meta.last.index <= s.commit {
            return Err("the snapshot is not ahead of this node's commit index");
        }
        Ok(())
    }

    /// Stops serving for good: a removed node must neither vote nor lead,
    /// and says why in its status. Its peers stop dialing it on their own.
    pub(crate) fn stop_as_removed(&mut self, why: &str) {
        tracing::error!(
            reason = why,
            "this node was removed from the cluster; it stops serving"
        );
        // Recorded like any removal, so that a restart finds it removed too
        // (a leader's word may be all this node ever hears of it).
        let me = self.raw.status().id.0;
        let mut removed = self.removed.write();
        if removed.insert(me) {
            if let Err(e) = self.storage.set_removed_members(&removed) {
                tracing::error!(error = %e, "cannot record this node's removal");
            }
        }
        drop(removed);
        let mut st = self.status.lock();
        st.removed = true;
        st.role = Role::Follower;
        st.leader = None;
        drop(st);
        for (_, (_, replies)) in self.pending_reads.drain() {
            for r in replies {
                let _ = r.send(Err(Error::Removed));
            }
        }
    }

    /// Ticks once per tick interval elapsed since `next_tick`. After a long
    /// stall the ticks are capped at a few election timeouts: enough to end
    /// any lease and start an election, and no more work than that.
    pub(crate) fn catch_up_ticks(&mut self, now: Instant) {
        // etcd warns when a leader's heartbeat is two intervals late; a
        // fifth of an election timeout is that with the default ticks.
        let late = now.saturating_duration_since(self.next_tick);
        if late > self.election_timeout / 5
            && let Some(late_so_far) = self.late_ticks.count(Duration::from_secs(5))
        {
            tracing::warn!(late = ?late, role = ?self.raw.status().role, late_so_far,
                "the Raft loop is late for its ticks (heartbeats and elections wait): the node is overloaded or its process was paused");
        }
        let mut ticks = 0;
        while self.next_tick <= now {
            self.raw.tick();
            self.next_tick += self.tick_interval;
            ticks += 1;
            if ticks >= self.max_catch_up_ticks {
                self.next_tick = now + self.tick_interval;
                break;
            }
        }
        if ticks > 1 {
            tracing::debug!(ticks, "caught up on ticks missed during a stall");
        }
        if ticks > 0 {
            self.expire_reads(now);
        }
    }

    /// Answers reads whose round has outlived the request timeout. A round
    /// unanswered for half an election timeout (a message lost, a leader
    /// gone) is given up: its reads whose callers still wait join the next
    /// round, which starts in this turn, as only one round is in flight.
    fn expire_reads(&mut self, now: Instant) {
        let timeout = self.read_timeout;
        let retry = self.election_timeout / 2;
        let mut again = Vec::new();
        self.pending_reads.retain(|_, (started, replies)| {
            let waited = now.duration_since(*started);
            if waited < retry {
                return true;
            }
            for r in replies.drain(..) {
                if waited >= timeout {
                    let _ = r.send(Err(Error::Timeout));
                } else if !r.is_closed() {
                    again.push(r);
                }
            }
            false
        });
        for r in again {
            // Refused only once the loop stopped, which it has not.
            let _ = self.reads.push(r);
        }
        self.status.lock().pending_read_rounds = self.pending_reads.len() as u64;
    }

    pub(crate) fn not_leader(&self) -> Error {
        Error::NotLeader {
            leader: self.raw.status().leader,
        }
    }

    /// Keep-alives, taken at log time now if this node leads (the next
    /// tick carries them), else answered "not the leader".
    pub(crate) fn take_renewals(&mut self, renewals: Vec<(Vec<u8>, ProposeReply)>, now: Instant, wall_ms: u64) {
        if renewals.is_empty() {
            return;
        }
        let (role, term) = self.raw.role_and_term();
        if role != Role::Leader {
            let err = self.not_leader();
            for (_, reply) in renewals {
                let _ = reply.send(Err(err.clone()));
            }
            return;
        }
        let at = self.stamp_clock.stamp(term.0, now, wall_ms);
        for (key, reply) in renewals {
            self.ticker.renewal(key, at, reply);
        }
    }

    /// Proposes a tick of the plugin's timer, if one is due. The replies
    /// of the keep-alives it carries wait in the apply worker.
    pub(crate) fn propose_tick(&mut self, now: Instant, wall_ms: u64) {
        let (role, term) = self.raw.role_and_term();
        if role != Role::Leader {
            let err = self.not_leader();
            for reply in self.ticker.abandon() {
                let _ = reply.send(Err(err.clone()));
            }
        }
        let raw = &self.raw;
        let Some((tick, replies)) =
            self.ticker.due(role, term.0, || raw.status().last_index.0, &mut self.stamp_clock, now, wall_ms)
        else {
            return;
        };
        match self.raw.propose(vec![tick.encode()]) {
            Ok(range) => {
                self.ticker.proposed(range.start.0, now);
                // Registered before the entry can commit (a later Ready).
                if !replies.is_empty() {
                    self.apply.send(ApplyTask::AwaitRenewals { index: range.start, term, replies });
                }
            }
            Err(e) => {
                let err = propose_error(e);
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }

    /// Starts a ReadIndex round with every read waiting, unless a round of
    /// this node's is in flight (those reads join the next). Whether it
    /// started one.
    pub(crate) fn start_read_round(&mut self, now: Instant) -> bool {
        if !self.pending_reads.is_empty() {
            return false;
        }
        let reads = self.reads.take();
        if reads.is_empty() {
            return false;
        }
        self.next_read_id += 1;
        let id = ReadId(self.next_read_id);
        match self.raw.read_index(id) {
            Ok(()) => {
                bump(&self.metrics.read_index_rounds);
                self.pending_reads.insert(id, (now, reads));
                true
            }
            Err(_) => {
                let err = self.not_leader();
                for r in reads {
                    let _ = r.send(Err(err.clone()));
                }
                false
            }
        }
    }

}

/// Counts synced appends that took longer than `limit` and logs them at most
/// every 5 s.
#[derive(Debug)]
pub(crate) struct SlowSyncs {
    pub limit: Duration,
    seen: Throttled,
}

impl SlowSyncs {
    pub fn new(limit: Duration) -> Self {
        Self { limit, seen: Throttled::default() }
    }

    pub(crate) fn note(&mut self, took: Duration, entries: usize) {
        if took <= self.limit {
            return;
        }
        if let Some(slow_so_far) = self.seen.count(Duration::from_secs(5)) {
            tracing::warn!(took = ?took, entries, limit = ?self.limit, slow_so_far,
                "slow synced log append: the disk is slower than half an election timeout");
        }
    }
}

/// Counts events and says when one may be logged: the first, then at most
/// one per period.
#[derive(Debug, Default)]
pub(crate) struct Throttled {
    count: u64,
    last_log: Option<Instant>,
}

impl Throttled {
    /// Counts an event; the count so far if it may be logged now.
    pub(crate) fn count(&mut self, period: Duration) -> Option<u64> {
        self.count += 1;
        let now = Instant::now();
        if self.last_log.is_some_and(|t| now.duration_since(t) < period) {
            return None;
        }
        self.last_log = Some(now);
        Some(self.count)
    }
}

/// Counts messages the core refused and logs them at most once a second, so
/// that a misbehaving peer cannot flood the log.
#[derive(Debug, Default)]
pub(crate) struct Dropped(Throttled);

impl Dropped {
    pub(crate) fn note(&mut self, e: &wasmraft_raft::StepError) {
        if let Some(dropped_so_far) = self.0.count(Duration::from_secs(1)) {
            tracing::warn!(error = %e, dropped_so_far, "dropped a message");
        }
    }
}
