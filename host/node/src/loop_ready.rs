//! How the Raft loop carries out a `Ready` (docs/design/002-node-driver.md):
//! what needs no write goes out at once, the writes go to the log writer
//! with the answers that wait on them, and the rest of the Ready waits for
//! them; committed entries go to apply once their Ready is done.

use std::time::{Duration, Instant};

use wasmraft_raft::{Message, MessageBody, NodeId, Ready, Role};
use wasmraft_storage::NoteChange;

use crate::apply::ApplyTask;
use crate::error::Error;
use crate::log_writer::LogWrite;
use crate::metrics::bump;
use crate::raft_loop::{LoopMsg, RaftLoop};
use crate::transport::Transport;

/// How long a leader lets a new commit index wait for the next append to
/// carry it to a follower before it sends the index alone. Under a steady
/// stream of proposals (a client whose next request follows its answer)
/// the next append comes first, and each follower is spared a message and
/// its answer per commit; an idle cluster's followers apply this much
/// later. Followers whose clients wait on the entries are told at once.
const COMMIT_UPDATE_DELAY: Duration = Duration::from_millis(1);

/// A Ready being written, whether its write is synced, how many entries it
/// writes, when it started (on the loop's clock), and whether it was
/// reported as stuck.
pub(crate) struct InFlight {
    ready: Ready,
    sync: bool,
    entries: usize,
    started: Instant,
    reported: bool,
    /// The last stamp among the entries, with its term: log time once
    /// they are durable.
    stamped: Option<(u64, u64)>,
    /// What the write does to the note of log time.
    pub(crate) note: NoteChange,
}

impl<T: Transport> RaftLoop<T> {
    /// Leader: tells followers the commit index that no append carried
    /// (the core defers it, `Config::defer_commit_updates`): at once to
    /// those whose forwarded entries it covers, to the others once
    /// [`COMMIT_UPDATE_DELAY`] has passed since it was first due. Whether
    /// it sent any.
    pub(crate) fn send_commit_updates(&mut self, now: Instant) -> bool {
        let committed = self.raw.committed();
        // Entries a follower was sent a commit index for (in an append or a
        // heartbeat) wait no more; nor do those of a follower this node no
        // longer leads (`commit_sent` is then `None`), nor committed ones of
        // a follower that cannot be sent an update now (it probes, waits for
        // a snapshot or has a full window: it hears the commit as it
        // answers).
        let raw = &self.raw;
        self.commits_awaited.retain(|&id, entries| {
            let Some(sent) = raw.commit_sent(id) else { return false };
            let due = raw.commit_update_due(id);
            entries.retain(|&entry| entry > sent && (entry > committed || due));
            !entries.is_empty()
        });
        if !self.raw.commit_updates_due() {
            self.commit_update_at = None;
            return false;
        }
        let at = *self.commit_update_at.get_or_insert(now + COMMIT_UPDATE_DELAY);
        let all = now >= at;
        let awaited = &self.commits_awaited;
        let mut sent = false;
        self.raw.send_commit_updates(|id| {
            let waits = awaited.get(&id).and_then(|e| e.first()).is_some_and(|&entry| entry <= committed);
            sent |= all || waits;
            all || waits
        });
        if all {
            self.commit_update_at = None;
        }
        sent
    }

    /// Sends messages; snapshots go with their data, read from storage by
    /// the transport.
    fn send(&mut self, messages: Vec<Message>) {
        // A commit index these carry (the core may have moved it since the
        // turn began: its own log write can complete a quorum) is published
        // before anyone can learn of it.
        self.publish_lease();
        let (snapshots, rest): (Vec<_>, Vec<_>) = messages
            .into_iter()
            .partition(|m| matches!(m.body, MessageBody::InstallSnapshot { .. }));
        if let Some(token) = rest.iter().find_map(|m| match m.body {
            MessageBody::Heartbeat { token, .. } => Some(token),
            _ => None,
        }) {
            self.metrics.heartbeat_sent(token, self.now);
        }
        self.transport.send(rest);
        for m in snapshots {
            let MessageBody::InstallSnapshot { meta } = &m.body else {
                unreachable!()
            };
            let (storage, index, peer, tx) = (
                self.storage.clone(),
                meta.last.index,
                m.to,
                self.self_tx.clone(),
            );
            tracing::info!(peer = peer.0, index = index.0, "sending a snapshot");
            self.transport.send_snapshot(
                m,
                Box::new(move || storage.snapshot_reader(index).map_err(|e| e.to_string())),
                Box::new(move |ok| {
                    let _ = tx.send(LoopMsg::SnapshotSent { peer, ok });
                }),
            );
        }
    }

    /// Log time goes back to `stamp`, as a snapshot is about to replace the
    /// log whose stamps it counted (see `StampClock::rewind`); the note on
    /// disk follows, durably, before they go. (A replaced suffix changes
    /// the note in the log writer's write that replaces it.)
    fn rewind_log_time(&mut self, stamp: u64) -> Result<(), String> {
        let note = self.stamp_clock.rewind(stamp, self.now, self.wall_ms);
        self.storage.replace_log_time_note(note.as_ref()).map_err(|e| format!("cannot replace the log-time note: {e}"))
    }

    /// Finishes the Ready in flight if its writes ended (`persisted`), then
    /// takes Readies until one has writes to make: those go to the log
    /// writer with the answers that wait on them (`log_writer`), and the
    /// rest of that Ready waits for them. While they run, only the messages
    /// that need no write go out.
    pub(crate) fn handle_readies(&mut self, persisted: Option<Result<crate::log_writer::Written, String>>) -> Result<(), String> {
        // The lease as the turn's steps left it (extended by heartbeat
        // answers, ended by a higher term or a transfer); published again
        // before each send and apply, which may follow a commit the core
        // made meanwhile (see `lease_share`).
        self.publish_lease();
        if let Some(result) = persisted {
            let InFlight { mut ready, sync, entries, started, stamped, note, .. } = self
                .in_flight
                .take()
                .ok_or("the log writer finished a write the Raft loop never gave it")?;
            let crate::log_writer::Written { took, unsent } = result?;
            if let Some(stamped) = stamped {
                let noted_wall = match note {
                    NoteChange::Write(n) => Some(n.wall_ms),
                    NoteChange::Keep | NoteChange::Remove => None,
                };
                self.stamp_clock.written(stamped, started, noted_wall);
            }
            ready.persisted_messages.extend(unsent);
            if sync {
                self.metrics.log_fsync.observe(took);
                self.slow_syncs.note(took, entries);
            }
            self.finish_ready(ready)?;
        }
        if let Some(write) = &mut self.in_flight {
            let early = self.raw.take_early();
            let pending = self.now.saturating_duration_since(write.started);
            let stuck = pending > self.election_timeout;
            let report = stuck && !std::mem::replace(&mut write.reported, true);
            self.answer_reads(&early.read_states);
            // A leader whose disk hangs goes silent, as it did while the
            // loop itself waited on the disk: its followers elect another
            // leader instead of following one that commits nothing. (A slow
            // follower answering its leader harms no one.)
            let leader = stuck && self.raw.status().role == Role::Leader;
            if report {
                tracing::warn!(pending = ?pending, leader, "a log write has been in flight for longer than an election timeout");
            }
            if !leader {
                self.send(early.messages);
            }
            return Ok(());
        }
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            self.unwritten_bytes = 0;
            if let Some(soft) = rd.soft_state {
                let mut st = self.status.lock();
                if st.leader != soft.leader || st.role != soft.role {
                    let term = self.raw.status().term.0;
                    let show = |l: Option<NodeId>| {
                        l.map_or_else(|| "none".to_string(), |l| l.0.to_string())
                    };
                    tracing::info!(term, role = ?soft.role, leader = %show(soft.leader), previous_leader = %show(st.leader),
                        previous_role = ?st.role, "raft role or leader changed");
                }
                if soft.role == Role::Candidate && st.role != Role::Candidate {
                    bump(&self.metrics.elections);
                }
                if soft.leader != st.leader {
                    bump(&self.metrics.leader_changes);
                }
                if st.fatal.is_none() {
                    st.role = soft.role;
                    st.leader = soft.leader;
                }
                drop(st);
                if soft.role != Role::Leader {
                    self.commit_timer.clear();
                    // Reads waiting on a round this node can no longer finish.
                    let err = Error::NotLeader {
                        leader: soft.leader,
                    };
                    for (_, (_, replies)) in self.pending_reads.drain() {
                        for r in replies {
                            let _ = r.send(Err(err.clone()));
                        }
                    }
                }
            }
            self.send(std::mem::take(&mut rd.messages));
            // Reads depend on no write: answered now, not after the fsync.
            let reads = std::mem::take(&mut rd.read_states);
            self.answer_reads(&reads);
            if let Some(meta) = rd.snapshot.clone() {
                let data = match self.received_snapshot.take() {
                    Some((last, data)) if last == meta.last => data,
                    _ => {
                        return Err(format!(
                            "no data for the snapshot at {} to install",
                            meta.last
                        ));
                    }
                };
                // The log's entries leave with the install: first, log time
                // goes back to the applied state's, which stays.
                let applied_time = self.storage.log_time_ms().map_err(|e| e.to_string())?.unwrap_or(0);
                self.rewind_log_time(applied_time)?;
                // Installed by the apply side, after everything it was given
                // before, and durably so before this Ready is acknowledged.
                self.apply.install_snapshot(meta, data)?;
                let log_time = crate::timers::stored_log_time(&self.storage).map_err(|e| e.to_string())?;
                self.rewind_log_time(log_time)?;
            }
            // A suffix this node wrote is replaced, by the write handed to
            // the log writer below: log time goes back now, and the note on
            // disk changes in that write, atomically with the truncation
            // (never on this thread, where it would wait for the log).
            let mut note = NoteChange::Keep;
            if let Some(first) = rd.entries.first().map(|e| e.log_id.index) {
                if first <= self.storage.log_bounds().1 {
                    let log_time = crate::timers::stored_log_time_before(&self.storage, first).map_err(|e| e.to_string())?;
                    note = match self.stamp_clock.rewind(log_time, self.now, self.wall_ms) {
                        Some(rewound) => NoteChange::Write(rewound),
                        None => NoteChange::Remove,
                    };
                }
            }
            // Entries, a term or a vote: written off this thread.
            let stamped = crate::timers::last_stamp(&rd.entries);
            // A new term's note, taken after the rewind, replaces its note.
            if let Some(handed) = self.stamp_clock.handing(stamped, self.now, self.wall_ms) {
                note = NoteChange::Write(handed);
            }
            if !rd.entries.is_empty() || (rd.must_sync && rd.hard_state.is_some()) {
                let sync = rd.must_sync && self.sync_log;
                let entries = rd.entries.len();
                // The answers leave with the write (see `log_writer`); a
                // snapshot this Ready carries is durable already (above).
                // A sink takes no snapshot, which the core never sends as
                // an answer.
                let answers = if !rd.persisted_messages.iter().any(|m| matches!(m.body, MessageBody::InstallSnapshot { .. })) {
                    std::mem::take(&mut rd.persisted_messages)
                } else {
                    Vec::new()
                };
                // A commit index kept back is older than this Ready's.
                let kept_back = self.unsaved_commit.take().map(|(hs, _)| hs);
                self.writer.write(LogWrite {
                    entries: std::mem::take(&mut rd.entries),
                    hard_state: rd.hard_state.or(kept_back),
                    note,
                    sync,
                    answers,
                });
                let started = self.now;
                self.in_flight =
                    Some(InFlight { ready: rd, sync, entries, started, reported: false, stamped, note });
                return Ok(());
            }
            if let Some(hard_state) = rd.hard_state {
                // Only the commit index moved: kept back, for the next write
                // of entries or a tick from now (`save_commit`). A write here
                // would cost this thread a log write per batch, and could hold
                // it behind the log writer's lock or a segment turn's sync and
                // flush, past a heartbeat. A restart counts the applied index
                // as committed and learns the rest from the leader.
                let due = self.unsaved_commit.map_or(self.now + self.tick_interval, |(_, due)| due);
                self.unsaved_commit = Some((hard_state, due));
            }
            self.finish_ready(rd)?;
        }
        // No write in flight: entries the core refused (proposals to a
        // follower) left no Ready behind, and must not keep the budget full.
        self.unwritten_bytes = 0;
        Ok(())
    }

    /// Saves a commit index kept back once it is due, if no write of
    /// entries took it: alone, unsynced, and never waiting for the log (busy:
    /// due again a tick later). Not while a write is in flight, which holds
    /// an older hard state and could land after this one.
    pub(crate) fn save_commit(&mut self) -> Result<(), String> {
        let Some((hard_state, due)) = self.unsaved_commit else { return Ok(()) };
        if self.in_flight.is_some() || self.now < due {
            return Ok(());
        }
        match self.storage.try_save_hard_state(&hard_state) {
            Ok(()) => self.unsaved_commit = None,
            Err(wasmraft_storage::StorageError::Busy(_)) => {
                self.unsaved_commit = Some((hard_state, self.now + self.tick_interval));
            }
            Err(e) => return Err(format!("saving the commit index: {e}")),
        }
        Ok(())
    }

    /// Publishes the core's lease for reads that skip the loop: it holds
    /// until the tick that would end it in the core is due.
    fn publish_lease(&self) {
        let lease = self.raw.lease().map(|l| {
            let ticks = u32::try_from(l.ticks_left - 1).unwrap_or(u32::MAX);
            crate::lease_share::Published {
                term: self.raw.role_and_term().1.0,
                commit: l.commit.0,
                until: self.next_tick + self.tick_interval.saturating_mul(ticks),
            }
        });
        self.lease.publish(lease);
    }

    /// Answers the reads waiting on these ReadIndex rounds.
    fn answer_reads(&mut self, read_states: &[wasmraft_raft::ReadState]) {
        for rs in read_states {
            if let Some((_, replies)) = self.pending_reads.remove(&rs.id) {
                for r in replies {
                    let _ = r.send(Ok(rs.index));
                }
            }
        }
    }

    /// The rest of a Ready once its writes are durable: what waited on them
    /// goes out, committed entries go to apply, reads are answered, and the
    /// core learns the Ready is done.
    fn finish_ready(&mut self, mut rd: Ready) -> Result<(), String> {
        // `send` publishes the lease first, also with nothing to send: so
        // before the committed entries below go to apply.
        self.send(std::mem::take(&mut rd.persisted_messages));
        if let Some(last) = rd.committed_entries.last() {
            // A retry's waiter would come after the entry it waits for.
            self.retries.committed(last.log_id.index);
            self.apply
                .send(ApplyTask::Apply(std::mem::take(&mut rd.committed_entries)));
        }
        self.raw.advance(rd);
        let s = self.raw.status();
        self.commit_timer.committed(s.commit.0, self.now, &self.metrics.commit_latency);
        let mut st = self.status.lock();
        st.term = s.term.0;
        st.commit = s.commit.0;
        st.pending_read_rounds = self.pending_reads.len() as u64;
        st.last_index = s.last_index.0;
        if st.fatal.is_none() {
            st.leader = s.leader;
            st.role = s.role;
        }
        if st.membership != s.membership {
            tracing::info!(membership = ?s.membership, "configuration changed");
            let gone: Vec<u64> = st
                .membership
                .members()
                .difference(&s.membership.members())
                .map(|id| id.0)
                .collect();
            st.membership = s.membership;
            drop(st);
            if !gone.is_empty() {
                let mut removed = self.removed.write();
                removed.extend(gone.iter().copied());
                self.storage
                    .set_removed_members(&removed)
                    .map_err(|e| e.to_string())?;
                drop(removed);
                for id in gone {
                    tracing::info!(node = id, "removed from the cluster");
                    self.metrics.forget_peer(id);
                    self.transport.remove_peer(id);
                }
            }
        }
        Ok(())
    }
}
