//! Log replication (§5.3): proposals, pipelined AppendEntries, fast
//! backtracking, and commit by counting current-term entries (§5.4.2).

use std::ops::Range;

use super::Raft;
use crate::error::{ProposeError, StorageError};
use crate::message::MessageBody;
use crate::progress::ProgressState;
use crate::quorum::quorum_value;
use crate::storage::LogReader;
use crate::types::{Entry, EntryPayload, Index, LogId, NodeId, Role};

impl<L: LogReader> Raft<L> {
    /// Appends a batch of commands as one append and one message per follower.
    pub(crate) fn propose(&mut self, commands: Vec<Vec<u8>>) -> Result<Range<Index>, ProposeError> {
        self.check_can_propose()?;
        if commands.is_empty() {
            return Err(ProposeError::Empty);
        }
        let first = self.log.last_index().next();
        let entries: Vec<Entry> = commands
            .into_iter()
            .enumerate()
            .map(|(i, data)| Entry {
                log_id: LogId {
                    term: self.term,
                    index: Index(first.0 + i as u64),
                },
                payload: EntryPayload::Normal(data),
            })
            .collect();
        let end = Index(first.0 + entries.len() as u64);
        self.append_entries(entries);
        Ok(first..end)
    }

    pub(crate) fn check_can_propose(&self) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader { leader: self.lead });
        }
        if let Some(to) = self.transferee {
            return Err(ProposeError::TransferInProgress { to });
        }
        Ok(())
    }

    /// Leader: appends to the own log and sends to every follower.
    pub(crate) fn append_entries(&mut self, entries: Vec<Entry>) {
        self.log.append(entries);
        self.bcast_append();
    }

    /// Sends what each follower is missing (or a commit update).
    pub(crate) fn bcast_append(&mut self) {
        for id in self.followers() {
            self.send_append(id);
        }
    }

    /// The members this leader replicates to.
    pub(crate) fn followers(&self) -> Vec<NodeId> {
        self.progress.keys().copied().filter(|&id| id != self.id).collect()
    }

    pub(crate) fn send_append(&mut self, to: NodeId) {
        self.maybe_send_append(to, true);
    }

    /// Sends entries from `next` to `to` unless paused; with `send_if_empty`
    /// also an empty append (a probe or a commit update). Returns whether a
    /// message was sent.
    pub(crate) fn maybe_send_append(&mut self, to: NodeId, send_if_empty: bool) -> bool {
        let Some(pr) = self.progress.get(&to) else {
            return false;
        };
        if pr.is_paused() {
            return false;
        }
        let next = pr.next;
        let last = self.log.last_index();
        let lag = self.cfg.snapshot_lag;
        if lag > 0 && last.0.saturating_sub(next.0) > lag && self.snapshot_covers(next) {
            return self.send_snapshot(to);
        }
        let prev_term = self.log.term(next.prev());
        let entries = match prev_term {
            Ok(_) => self
                .log
                .entries(next, last.next(), self.cfg.max_entries_bytes_per_msg),
            Err(ref e) => Err(e.clone()),
        };
        let (prev_term, entries) = match (prev_term, entries) {
            (Ok(t), Ok(e)) => (t, e),
            (Err(StorageError::Compacted), _) | (_, Err(StorageError::Compacted)) => {
                return self.send_snapshot(to);
            }
            (Err(StorageError::Unavailable), _) | (_, Err(StorageError::Unavailable)) => {
                return false;
            }
            (Err(e), _) | (_, Err(e)) => panic!("raft: reading entries for {to}: {e}"),
        };
        if entries.is_empty() && !send_if_empty {
            return false;
        }
        let pr = self.progress.get_mut(&to).expect("progress checked above");
        pr.sent_entries(entries.last().map(|e| e.log_id.index), entries.iter().map(Entry::size).sum());
        let body = MessageBody::AppendEntries {
            prev: LogId {
                term: prev_term,
                index: next.prev(),
            },
            entries,
            commit: self.log.committed,
        };
        self.send(to, body);
        true
    }

    /// Sends `to` an AppendEntries without entries at `next - 1`, paused or
    /// not, changing no progress: it follows the appends in flight on their
    /// lane, so the follower accepts it if they arrived and rejects it if
    /// they were lost (a rejection above `matched` turns to probing).
    pub(crate) fn send_empty_append(&mut self, to: NodeId) {
        let Some(pr) = self.progress.get(&to) else {
            return;
        };
        let prev = pr.next.prev();
        match self.log.term(prev) {
            Ok(term) => {
                let body = MessageBody::AppendEntries {
                    prev: LogId { term, index: prev },
                    entries: Vec::new(),
                    commit: self.log.committed,
                };
                self.send(to, body);
            }
            // The end of the window was compacted away: probe from `matched`
            // (which sends a snapshot if that is gone too).
            Err(StorageError::Compacted) => {
                let pr = self.progress.get_mut(&to).expect("progress checked above");
                pr.become_probe();
                self.send_append(to);
            }
            Err(StorageError::Unavailable) => {}
            Err(e) => panic!("raft: reading the term at {prev} for {to}: {e}"),
        }
    }

    /// Follower: an AppendEntries of the current term's leader.
    pub(crate) fn handle_append(
        &mut self,
        from: NodeId,
        prev: LogId,
        entries: &[Entry],
        commit: Index,
    ) {
        let committed = self.log.committed;
        if prev.index < committed {
            // Everything up to our commit matches already; do not touch it.
            let body = MessageBody::AppendResponse {
                reject: false,
                index: committed,
                hint: LogId::default(),
            };
            self.send_after_persist(from, self.term, body);
            return;
        }
        match self.log.maybe_append(prev, commit, entries) {
            Some(last_new) => {
                self.after_commit();
                let body = MessageBody::AppendResponse {
                    reject: false,
                    index: last_new,
                    hint: LogId::default(),
                };
                self.send_after_persist(from, self.term, body);
            }
            None => {
                let hint = self.log.find_conflict_by_term(prev.index, prev.term);
                let body = MessageBody::AppendResponse {
                    reject: true,
                    index: prev.index,
                    hint,
                };
                self.send_after_persist(from, self.term, body);
            }
        }
    }

    /// Leader: a follower accepted or rejected an AppendEntries (or installed a snapshot).
    pub(crate) fn handle_append_response(
        &mut self,
        from: NodeId,
        reject: bool,
        index: Index,
        hint: LogId,
    ) {
        let next_probe = if reject && hint.term.0 > 0 {
            self.log.find_conflict_by_term(hint.index, hint.term).index
        } else {
            hint.index
        };
        let first = self.log.first_index();
        let Some(pr) = self.progress.get_mut(&from) else {
            return;
        };
        pr.recent_active = true;
        if reject {
            if pr.maybe_decr_to(index, next_probe) {
                if pr.state == ProgressState::Replicate {
                    pr.become_probe();
                }
                self.send_append(from);
            }
            return;
        }
        let was_paused = pr.is_paused();
        let updated = pr.maybe_update(index);
        // While probing, an answer at exactly `matched` (to an empty probe,
        // see `send_empty_append`) also proves the logs agree there
        // (etcd-io/raft `handleAppendEntries`); without this a lost probe
        // followed by empty ones would leave the follower probing forever.
        if !updated && (pr.state != ProgressState::Probe || index != pr.matched) {
            return;
        }
        match pr.state {
            ProgressState::Probe => pr.become_replicate(),
            ProgressState::Snapshot { .. } if pr.matched.next() >= first => {
                pr.become_probe();
                pr.become_replicate();
            }
            _ => {}
        }
        if self.maybe_commit() {
            self.tell_commit();
        } else if was_paused {
            self.send_append(from);
        }
        while self.maybe_send_append(from, false) {}
        if self.transferee == Some(from) && self.progress[&from].matched == self.log.last_index() {
            self.send(from, MessageBody::TimeoutNow);
        }
    }

    /// Leader: commits the highest index a quorum has persisted, if it is of
    /// the current term (§5.4.2: never count replicas of older terms).
    pub(crate) fn maybe_commit(&mut self) -> bool {
        let idx = Index(quorum_value(&self.membership, |id| {
            self.progress.get(&id).map_or(0, |p| p.matched.0)
        }));
        if idx > self.log.committed && self.log.term_or_zero(idx) == self.term {
            self.commit_to(idx);
            return true;
        }
        false
    }

    /// Leader: the driver persisted this node's log through `persisted`.
    pub(crate) fn on_persisted(&mut self) {
        if self.role != Role::Leader {
            return;
        }
        let persisted = self.log.persisted_last();
        let id = self.id;
        if let Some(pr) = self.progress.get_mut(&id)
            && pr.maybe_update(persisted)
            && self.maybe_commit()
        {
            self.tell_commit();
        }
    }

    /// Leader: the commit index advanced. Sends it to every follower at
    /// once, or, with `defer_commit_updates`, only with entries still to
    /// send (see [`commit_update_due`](Self::commit_update_due)).
    fn tell_commit(&mut self) {
        if !self.cfg.defer_commit_updates {
            self.bcast_append();
            return;
        }
        for id in self.followers() {
            self.maybe_send_append(id, false);
        }
    }

    /// Leader: whether replicating follower `to` was not sent the commit
    /// index yet and could be sent an append now (the broadcast after a
    /// commit would have sent it one). A probing follower hears it as its
    /// probes are answered, and one waiting for a snapshot has no use for
    /// it: an append to either would be a probe, or a snapshot sent again.
    pub(crate) fn commit_update_due(&self, to: NodeId) -> bool {
        self.follower(to).is_some_and(|pr| {
            pr.state == ProgressState::Replicate && !pr.is_paused() && pr.commit_sent < self.log.committed
        })
    }

    /// Leader: the progress of follower `to` (`None`: not a member this
    /// leader replicates to).
    pub(crate) fn follower(&self, to: NodeId) -> Option<&crate::progress::Progress> {
        if self.role != Role::Leader || to == self.id {
            return None;
        }
        self.progress.get(&to)
    }

    /// Leader: sends the commit index, in an append, to each follower
    /// `wanted` for which [`commit_update_due`](Self::commit_update_due).
    pub(crate) fn send_commit_updates(&mut self, mut wanted: impl FnMut(NodeId) -> bool) {
        for id in self.followers() {
            if self.commit_update_due(id) && wanted(id) {
                self.send_append(id);
            }
        }
    }
}
