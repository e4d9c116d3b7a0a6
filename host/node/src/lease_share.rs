//! Lease reads without a trip through the Raft loop.
//!
//! The Raft loop publishes what the core says of its lease: its term, the
//! commit index, and the real time the tick that ends the lease is due (the
//! loop's tick schedule from now on). It does so after each turn's steps,
//! and again before each send and each hand-over to apply. A lease read then
//! takes a read lock and a clock read on the caller's thread, instead of two
//! thread hand-offs.
//!
//! Why this is as safe as asking the core:
//!
//! - While the lease holds, no other node can have been elected (voters
//!   refuse while they count on it, thesis §6.2): this node's commit index
//!   covers every write any node has acknowledged, provided no replica
//!   learns of a commit before it is published. The core can move its
//!   commit index in the middle of a turn (its own log write completing a
//!   quorum), so the loop publishes again right before anything leaves.
//! - The deadline is the tick at which the core itself would end the lease,
//!   in real time. A loop that falls behind its ticks (overload, a paused
//!   process) only makes the core's lease last longer in real time than the
//!   published one; the published one ends on time regardless.
//! - The one early end, a leader transfer (the target's election bypasses
//!   the voters' guard), is published before its `TimeoutNow` leaves. A
//!   stopped loop withdraws the lease.
//!
//! The driver simulation checks both halves: no node leads a later term
//! while a lease holds, and no leader sends a commit index past the one its
//! lease publishes.

use std::time::Instant;

use parking_lot::RwLock;

/// A leader's lease: reads at `commit` until `until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Published {
    /// The term the node leads.
    pub term: u64,
    pub commit: u64,
    pub until: Instant,
}

/// The lease as the Raft loop last published it.
#[derive(Debug, Default)]
pub(crate) struct LeaseShare {
    lease: RwLock<Option<Published>>,
}

impl LeaseShare {
    /// The loop's view after a turn; None: no lease.
    pub fn publish(&self, lease: Option<Published>) {
        *self.lease.write() = lease;
    }

    /// The lease, if it holds at `now`.
    pub fn read(&self, now: Instant) -> Option<Published> {
        (*self.lease.read()).filter(|l| now < l.until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn holds_until_the_deadline_and_not_after() {
        let base = Instant::now();
        let share = LeaseShare::default();
        assert_eq!(share.read(base), None, "no lease before one is published");
        let until = base + Duration::from_millis(80);
        share.publish(Some(Published { term: 2, commit: 7, until }));
        assert_eq!(share.read(base + Duration::from_millis(79)).map(|l| l.commit), Some(7));
        assert_eq!(share.read(until), None, "ends at the deadline");
        share.publish(Some(Published { term: 2, commit: 9, until: base + Duration::from_millis(100) }));
        assert_eq!(share.read(until).map(|l| l.commit), Some(9));
        share.publish(None);
        assert_eq!(share.read(base), None, "withdrawn at once");
    }
}
