//! Log time: the clock the leader stamps on every entry that carries one
//! (client commands, plugin deploys), which plugins read as
//! `entry.timestamp-ms`. It never goes backwards in log order, across
//! leaders too (see `docs/design/006-timers-and-leases.md`):
//!
//! - every node remembers the last stamp it saw in its log and when (by the
//!   monotonic clock); after a restart, the last stamp in its log, not when;
//! - a new leader anchors its term at `last stamp + time since seen`,
//!   moved towards its wall clock by at most [`MAX_CLOCK_STEP_MS`] and never
//!   below that estimate (with no estimate: the later of the last stamp and
//!   its wall clock);
//! - within a term stamps advance with the monotonic clock from the anchor,
//!   so a wall-clock step moves nothing until the next election.

use std::time::Instant;

use wasmraft_raft::{Entry, EntryPayload, Index};
use wasmraft_storage::Storage;

/// The most a new leader moves log time towards its own wall clock: a
/// larger gap (a skewed or stepped clock) is closed one election at a time,
/// with a warning.
pub const MAX_CLOCK_STEP_MS: u64 = 500;

/// How far back a restarting node looks in its log for the last stamp.
const RESTART_WALK: u64 = 256;

/// A leader's anchor for the term it leads: `stamp_ms` at `at`.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    term: u64,
    stamp_ms: u64,
    at: Instant,
}

/// The Raft loop's log clock.
#[derive(Debug)]
pub(crate) struct StampClock {
    /// The highest stamp seen in the log or made here.
    last_ms: u64,
    /// When `last_ms` was seen; none after a restart until an entry shows one.
    seen_at: Option<Instant>,
    anchor: Option<Anchor>,
}

impl StampClock {
    /// A clock that has seen `last_ms` (0: none), at no known time.
    pub fn new(last_ms: u64) -> Self {
        Self { last_ms, seen_at: None, anchor: None }
    }

    /// The highest stamp seen or made.
    #[cfg(test)]
    pub fn last_ms(&self) -> u64 {
        self.last_ms
    }

    /// Notes entries written to this node's log at `now`.
    pub fn observe(&mut self, entries: &[Entry], now: Instant) {
        if let Some(stamp) = entries.iter().rev().find_map(entry_stamp) {
            if stamp >= self.last_ms {
                self.last_ms = stamp;
                self.seen_at = Some(now);
            }
        }
    }

    /// The stamp for entries proposed now by the leader of `term`.
    pub fn stamp(&mut self, term: u64, now: Instant, wall_ms: u64) -> u64 {
        let anchor = match self.anchor {
            Some(a) if a.term == term => a,
            _ => {
                let a = Anchor { term, stamp_ms: self.anchor_ms(now, wall_ms), at: now };
                self.anchor = Some(a);
                a
            }
        };
        let since = now.saturating_duration_since(anchor.at).as_millis() as u64;
        self.last_ms = self.last_ms.max(anchor.stamp_ms.saturating_add(since));
        self.seen_at = Some(now);
        self.last_ms
    }

    /// Where a new term's stamps start.
    fn anchor_ms(&self, now: Instant, wall_ms: u64) -> u64 {
        let Some(seen_at) = self.seen_at else {
            return self.last_ms.max(wall_ms);
        };
        let estimate = self.last_ms.saturating_add(now.saturating_duration_since(seen_at).as_millis() as u64);
        let gap = wall_ms.abs_diff(estimate);
        if gap > MAX_CLOCK_STEP_MS {
            tracing::warn!(
                wall_ms,
                log_time_ms = estimate,
                gap_ms = gap,
                ahead = wall_ms > estimate,
                "this node's wall clock differs from log time by more than {MAX_CLOCK_STEP_MS} ms: \
                 log time keeps to the estimate and moves at most {MAX_CLOCK_STEP_MS} ms towards the wall clock per election (check NTP)"
            );
        }
        wall_ms.clamp(estimate, estimate.saturating_add(MAX_CLOCK_STEP_MS))
    }
}

/// The stamp an entry carries, if any: a client command's envelope or a
/// deploy's timestamp.
pub(crate) fn entry_stamp(e: &Entry) -> Option<u64> {
    match &e.payload {
        EntryPayload::Normal(bytes) => {
            crate::envelope::stamp(bytes).or_else(|| crate::system::SystemCommand::stamp(bytes))
        }
        _ => None,
    }
}

/// The last stamp in the last [`RESTART_WALK`] entries of the log, or 0.
pub(crate) fn last_stamp_in_log(storage: &Storage) -> u64 {
    let (first, last) = storage.log_bounds();
    let floor = first.0.max(last.0.saturating_sub(RESTART_WALK - 1)).max(1);
    let mut hi = last.0 + 1;
    while hi > floor {
        let lo = hi.saturating_sub(8).max(floor);
        match storage.read_entries(Index(lo), Index(hi)) {
            Ok(entries) => {
                if let Some(stamp) = entries.iter().rev().find_map(entry_stamp) {
                    return stamp;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the log's last stamp; log time starts from the wall clock");
                return 0;
            }
        }
        hi = lo;
    }
    0
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stamped(stamp: u64) -> Entry {
        let env = crate::envelope::Envelope { timestamp_ms: stamp, client_id: 0, sequence: 0, command: b"c".to_vec() };
        Entry {
            log_id: wasmraft_raft::LogId { term: wasmraft_raft::Term(1), index: Index(1) },
            payload: EntryPayload::Normal(env.encode()),
        }
    }

    #[test]
    fn stamps_follow_the_monotonic_clock_within_a_term_whatever_the_wall_does() {
        let t0 = Instant::now();
        let mut c = StampClock::new(0);
        assert_eq!(c.stamp(1, t0, 10_000_000), 10_000_000);
        // The wall steps back an hour, then forward a day: nothing moves.
        assert_eq!(c.stamp(1, t0 + Duration::from_millis(5), 10_000_000 - 3_600_000), 10_000_005);
        assert_eq!(c.stamp(1, t0 + Duration::from_millis(9), 10_000_000 + 86_400_000), 10_000_009);
        // The same instant twice: the same stamp, never less.
        assert_eq!(c.stamp(1, t0 + Duration::from_millis(9), 0), 10_000_009);
    }

    #[test]
    fn a_new_leader_behind_the_old_one_continues_from_the_log() {
        let t0 = Instant::now();
        let mut c = StampClock::new(0);
        // A follower saw the old leader's stamp 50_000 at t0.
        c.observe(&[stamped(40_000), stamped(50_000)], t0);
        // It leads 2 s later with a wall clock 10 s behind: log time goes on.
        assert_eq!(c.stamp(3, t0 + Duration::from_secs(2), 42_000), 52_000);
    }

    #[test]
    fn a_new_leader_ahead_moves_log_time_by_at_most_the_step() {
        let t0 = Instant::now();
        let mut c = StampClock::new(0);
        c.observe(&[stamped(50_000)], t0);
        assert_eq!(c.stamp(2, t0 + Duration::from_secs(1), 61_000), 51_000 + MAX_CLOCK_STEP_MS);
        // Within the step, the wall clock is taken as it is.
        let mut c = StampClock::new(0);
        c.observe(&[stamped(50_000)], t0);
        assert_eq!(c.stamp(2, t0 + Duration::from_secs(1), 51_200), 51_200);
    }

    #[test]
    fn after_a_restart_the_later_of_the_log_and_the_wall_clock() {
        let t0 = Instant::now();
        assert_eq!(StampClock::new(50_000).stamp(4, t0, 49_000), 50_000);
        assert_eq!(StampClock::new(50_000).stamp(4, t0, 90_000), 90_000);
    }

    #[test]
    fn older_stamps_in_the_log_do_not_move_the_clock_back() {
        let t0 = Instant::now();
        let mut c = StampClock::new(0);
        c.observe(&[stamped(50_000)], t0);
        c.observe(&[stamped(20_000)], t0 + Duration::from_secs(1));
        assert_eq!(c.last_ms(), 50_000);
        assert_eq!(c.stamp(2, t0 + Duration::from_secs(1), 0), 51_000);
    }
}
