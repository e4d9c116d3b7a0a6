//! The leader's view of each follower (etcd-io/raft `tracker/progress.go`):
//! probe one message at a time until the follower's log matches, then
//! replicate pipelined within a window, or wait for a snapshot.

use std::collections::VecDeque;

use crate::types::Index;

/// How the leader currently sends to a follower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressState {
    /// Looking for the point where logs agree: one AppendEntries per
    /// heartbeat interval until one is acknowledged.
    Probe,
    /// Logs agree: AppendEntries are pipelined, bounded by the in-flight window.
    Replicate,
    /// The follower needs the snapshot through `pending`; nothing else is sent.
    Snapshot {
        /// The snapshot's last index.
        pending: Index,
    },
}

/// The leader's record of one follower.
#[derive(Clone, Debug)]
pub struct Progress {
    /// The highest index known to match the leader's log.
    pub matched: Index,
    /// The next index to send.
    pub next: Index,
    /// The sending state.
    pub state: ProgressState,
    /// Probe: a message was sent since the last acknowledgement.
    pub(crate) probe_sent: bool,
    /// Replicate: the last index and entry bytes of each unacknowledged
    /// AppendEntries.
    pub(crate) inflights: VecDeque<(Index, u64)>,
    /// The sum of the bytes in `inflights`.
    pub(crate) inflight_bytes: u64,
    pub(crate) window: Window,
    /// Whether the follower answered since the last check-quorum.
    pub(crate) recent_active: bool,
    /// The newest heartbeat round (token) the follower acknowledged this term.
    pub(crate) acked_token: u64,
    /// The highest commit index sent to the follower this term, in an
    /// append or a heartbeat (see `Config::defer_commit_updates`).
    pub(crate) commit_sent: Index,
}

/// What the leader sends a follower when it answers a heartbeat.
///
/// Heartbeats and appends may travel on different lanes (the transport
/// sends heartbeats ahead of queued appends), so a heartbeat answer says
/// nothing about appends still in flight. The leader therefore never reads
/// "no append acknowledged since the last heartbeat" as "appends lost"
/// (that resent the whole window whenever the append lane was slower than
/// one heartbeat interval); instead it sends an empty append at the end of
/// what is in flight. Appends keep their order among themselves, so the
/// follower sees it after the in-flight ones and rejects it only if they
/// were lost, which moves the follower to probing (etcd-io/raft
/// `MsgHeartbeatResp`: only new entries, or an empty append, never a resend).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeartbeatFollowUp {
    /// Nothing: caught up, or waiting for a snapshot.
    Nothing,
    /// Entries not yet sent (or an empty append if none), as flow control allows.
    Append,
    /// An empty append at `next - 1`: the window is full, or a probe is
    /// outstanding; it checks for loss without resending a byte.
    EmptyAppend,
}

/// How much may be in flight to one follower while replicating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    /// AppendEntries messages.
    pub messages: usize,
    /// Entry bytes (etcd-io/raft `MaxInflightBytes`): past it, the leader
    /// waits for acknowledgements instead of reading more entries from its
    /// log for messages the transport has no room for.
    pub bytes: u64,
}

impl Progress {
    pub(crate) fn new(next: Index, window: Window) -> Progress {
        Progress {
            matched: Index(0),
            next,
            state: ProgressState::Probe,
            probe_sent: false,
            inflights: VecDeque::new(),
            inflight_bytes: 0,
            window,
            recent_active: false,
            acked_token: 0,
            commit_sent: Index(0),
        }
    }

    fn reset_state(&mut self, state: ProgressState) {
        self.state = state;
        self.probe_sent = false;
        self.inflights.clear();
        self.inflight_bytes = 0;
    }

    pub(crate) fn become_probe(&mut self) {
        if let ProgressState::Snapshot { pending } = self.state {
            self.reset_state(ProgressState::Probe);
            self.next = self.matched.next().max(pending.next());
        } else {
            self.reset_state(ProgressState::Probe);
            self.next = self.matched.next();
        }
    }

    pub(crate) fn become_replicate(&mut self) {
        self.reset_state(ProgressState::Replicate);
        self.next = self.matched.next();
    }

    pub(crate) fn become_snapshot(&mut self, pending: Index) {
        self.reset_state(ProgressState::Snapshot { pending });
    }

    /// Whether sending must wait.
    pub(crate) fn is_paused(&self) -> bool {
        match self.state {
            ProgressState::Probe => self.probe_sent,
            ProgressState::Replicate => {
                self.inflights.len() >= self.window.messages
                    || (!self.inflights.is_empty() && self.inflight_bytes >= self.window.bytes)
            }
            ProgressState::Snapshot { .. } => true,
        }
    }

    /// Records that an AppendEntries ending at `last` with `bytes` of
    /// entries (or a probe) was sent.
    pub(crate) fn sent_entries(&mut self, last: Option<Index>, bytes: u64) {
        match self.state {
            ProgressState::Replicate => {
                if let Some(last) = last {
                    self.next = last.next();
                    self.inflights.push_back((last, bytes));
                    self.inflight_bytes += bytes;
                }
            }
            ProgressState::Probe => self.probe_sent = true,
            ProgressState::Snapshot { .. } => panic!("progress: sending entries in snapshot state"),
        }
    }

    /// An acknowledgement through `index`; returns whether it was news.
    pub(crate) fn maybe_update(&mut self, index: Index) -> bool {
        let updated = index > self.matched;
        if updated {
            self.matched = index;
            self.probe_sent = false;
        }
        self.next = self.next.max(index.next());
        while let Some(&(last, bytes)) = self.inflights.front().filter(|(i, _)| *i <= index) {
            debug_assert!(last <= index);
            self.inflights.pop_front();
            self.inflight_bytes -= bytes;
        }
        updated
    }

    /// A heartbeat answer arrived while the leader's log ends at `last`:
    /// what to send the follower. Changes no state: progress only moves on
    /// append answers, so an answer overtaking appends in flight (another
    /// lane) neither regresses `next` nor resends.
    pub(crate) fn on_heartbeat_response(&self, last: Index) -> HeartbeatFollowUp {
        match self.state {
            // The outstanding probe may be lost or only queued behind other
            // appends: follow it with an empty one rather than its entries.
            ProgressState::Probe if self.probe_sent => HeartbeatFollowUp::EmptyAppend,
            // Also when caught up: an answer brings it back to replicating.
            ProgressState::Probe => HeartbeatFollowUp::Append,
            ProgressState::Replicate if self.matched >= last => HeartbeatFollowUp::Nothing,
            ProgressState::Replicate if self.is_paused() => HeartbeatFollowUp::EmptyAppend,
            ProgressState::Replicate => HeartbeatFollowUp::Append,
            ProgressState::Snapshot { .. } => HeartbeatFollowUp::Nothing,
        }
    }

    /// A rejection of `rejected` (the sent prev index) with the follower's
    /// hint `match_hint`; returns whether `next` moved back (false for a stale
    /// rejection).
    pub(crate) fn maybe_decr_to(&mut self, rejected: Index, match_hint: Index) -> bool {
        if self.state == ProgressState::Replicate {
            if rejected <= self.matched {
                return false; // stale: it answers an older message
            }
            self.next = self.matched.next();
            return true;
        }
        if self.next.prev() != rejected {
            return false; // stale: not the probe we are waiting for
        }
        self.next = match_hint.next().min(rejected).max(self.matched.next());
        self.probe_sent = false;
        true
    }
}
