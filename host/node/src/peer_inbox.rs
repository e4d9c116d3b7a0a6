//! The bound on peer messages waiting in the Raft loop's inbox.
//!
//! Peers' messages arrive on gRPC tasks and wait in the loop's inbox until
//! its next turn. A peer that sends faster than the loop drains (a burst of
//! appends while an fsync is slow, or a hostile member) must not grow that
//! inbox without bound: past the budget, messages are dropped and counted,
//! which Raft tolerates as loss (the leader resends). A follower's batch of
//! proposals dropped here is answered `busy` instead (nothing resends it),
//! through a refusal that waits in the inbox in its place; refusals have a
//! budget of their own, in number.

use std::sync::atomic::{AtomicU64, Ordering};

use wasmraft_raft::{Message, MessageBody};

/// Refusals waiting in the inbox at most; past it, a batch is dropped
/// unanswered (its clients time out).
const REFUSALS: u64 = 4096;

/// What one message costs against the budget: its entries' bytes plus a
/// fixed overhead, so that empty messages count too.
pub(crate) fn message_bytes(m: &Message) -> u64 {
    let entries = match &m.body {
        MessageBody::AppendEntries { entries, .. } => entries.iter().map(wasmraft_raft::Entry::size).sum(),
        MessageBody::Propose { commands, .. } => commands.iter().map(|c| c.len() as u64 + 16).sum(),
        _ => 0,
    };
    64 + entries
}

/// Bytes of peer messages in the inbox, against a limit.
#[derive(Debug)]
pub(crate) struct PeerInbox {
    bytes: AtomicU64,
    limit: u64,
    dropped: AtomicU64,
    refusals: AtomicU64,
}

impl PeerInbox {
    pub(crate) fn new(limit: u64) -> Self {
        Self { bytes: AtomicU64::new(0), limit, dropped: AtomicU64::new(0), refusals: AtomicU64::new(0) }
    }

    /// Takes room for `m`, or counts it dropped (`false`).
    pub(crate) fn admit(&self, m: &Message) -> bool {
        let size = message_bytes(m);
        let taken = self.bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            (held.saturating_add(size) <= self.limit).then_some(held + size)
        });
        if taken.is_err() {
            let before = self.dropped.fetch_add(1, Ordering::Relaxed);
            if before.is_multiple_of(1000) {
                tracing::warn!(
                    from = m.from.0,
                    kind = m.body.kind(),
                    dropped = before + 1,
                    limit = self.limit,
                    "the Raft inbox is full of peer messages; dropping (Raft resends)"
                );
            }
        }
        taken.is_ok()
    }

    /// Takes room for one refusal of a batch of proposals, or counts the
    /// batch dropped (`false`).
    pub(crate) fn admit_refusal(&self) -> bool {
        let taken = self.refusals.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < REFUSALS).then_some(n + 1));
        if taken.is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        taken.is_ok()
    }

    /// The loop took a refusal out of the inbox.
    pub(crate) fn release_refusal(&self) {
        self.refusals.fetch_sub(1, Ordering::AcqRel);
    }

    /// The loop took `m` out of the inbox.
    pub(crate) fn release(&self, m: &Message) {
        self.bytes.fetch_sub(message_bytes(m), Ordering::AcqRel);
    }

    /// Messages dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmraft_raft::{Entry, EntryPayload, Index, LogId, NodeId, Term};

    fn append(bytes: usize) -> Message {
        let entry = Entry { log_id: LogId::new(1, 1), payload: EntryPayload::Normal(vec![0; bytes]) };
        Message {
            from: NodeId(1),
            to: NodeId(2),
            term: Term(1),
            body: MessageBody::AppendEntries { prev: LogId::default(), entries: vec![entry], commit: Index(0) },
        }
    }

    #[test]
    fn messages_past_the_budget_are_dropped_until_the_loop_takes_some() {
        let inbox = PeerInbox::new(10_000);
        let m = append(3000);
        assert!(message_bytes(&m) > 3000);
        assert!(inbox.admit(&m) && inbox.admit(&m) && inbox.admit(&m));
        assert!(!inbox.admit(&m), "a fourth would pass the limit");
        assert_eq!(inbox.dropped(), 1);
        inbox.release(&m);
        assert!(inbox.admit(&m), "room again once the loop took one");
        assert!(!inbox.admit(&append(20_000)), "one larger than the budget never fits");
        assert_eq!(inbox.dropped(), 2);
    }

    #[test]
    fn refusals_have_a_budget_in_number() {
        let inbox = PeerInbox::new(10_000);
        assert!((0..REFUSALS).all(|_| inbox.admit_refusal()));
        assert!(!inbox.admit_refusal());
        assert_eq!(inbox.dropped(), 1);
        inbox.release_refusal();
        assert!(inbox.admit_refusal());
    }
}
