//! Snapshots (§7): the leader asks its driver to send the latest snapshot to a
//! follower that needs compacted entries; a follower accepts an installed one.

use super::Raft;
use crate::error::StorageError;
use crate::message::MessageBody;
use crate::progress::ProgressState;
use crate::storage::LogReader;
use crate::types::{Index, LogId, NodeId, Role, SnapshotMeta};

impl<L: LogReader> Raft<L> {
    /// Whether the latest snapshot covers `next - 1` (so it can replace entries from `next`).
    pub(crate) fn snapshot_covers(&self, next: Index) -> bool {
        matches!(self.log.reader.snapshot_meta(), Ok(Some(m)) if m.last.index >= next)
    }

    /// Leader: asks the driver to send the latest snapshot to `to`.
    pub(crate) fn send_snapshot(&mut self, to: NodeId) -> bool {
        let meta = match self.log.reader.snapshot_meta() {
            Ok(Some(meta)) => meta,
            Ok(None) | Err(StorageError::Unavailable) => return false,
            Err(e) => panic!("raft: snapshot_meta for {to}: {e}"),
        };
        let pr = self
            .progress
            .get_mut(&to)
            .expect("snapshot to a node without progress");
        pr.become_snapshot(meta.last.index);
        self.send(to, MessageBody::InstallSnapshot { meta });
        true
    }

    /// Follower: the snapshot `meta` is durable on this node; make it current
    /// unless the log already has it.
    pub(crate) fn handle_snapshot(&mut self, from: NodeId, meta: SnapshotMeta) {
        let index = meta.last.index;
        if index > self.log.committed {
            if self.log.match_term(meta.last) {
                // Our log already holds it: fast-forward the commit instead.
                self.commit_to(index);
            } else {
                self.log.restore(meta.clone());
                self.membership = meta.membership;
                self.on_membership_changed();
            }
        }
        let body = MessageBody::AppendResponse {
            reject: false,
            index: self.log.committed,
            hint: LogId::default(),
        };
        self.send_after_persist(from, self.term, body);
    }

    /// Leader: the driver finished (or gave up) sending a snapshot to `to`.
    pub(crate) fn report_snapshot(&mut self, to: NodeId, ok: bool) {
        if self.role != Role::Leader {
            return;
        }
        let Some(pr) = self.progress.get_mut(&to) else {
            return;
        };
        if let ProgressState::Snapshot { .. } = pr.state {
            if !ok {
                pr.state = ProgressState::Snapshot { pending: Index(0) };
            }
            pr.become_probe();
            // The next heartbeat answer probes (with an empty append).
            pr.probe_sent = true;
        }
    }

    /// Leader: the driver cannot reach `to`; stop pipelining to it.
    pub(crate) fn report_unreachable(&mut self, to: NodeId) {
        if self.role != Role::Leader {
            return;
        }
        if let Some(pr) = self.progress.get_mut(&to)
            && pr.state == ProgressState::Replicate
        {
            pr.become_probe();
        }
    }
}
