//! Log time: the clock the leader stamps on every entry that carries one
//! (client commands, plugin deploys), which plugins read as
//! `entry.timestamp-ms`. It never goes backwards in log order, across
//! leaders too (see `docs/design/006-timers-and-leases.md`):
//!
//! - every node remembers the last stamp it saw in its log and when (by the
//!   monotonic clock); after a restart, the last stamp in its log, and a
//!   note of log time against its clocks that it writes every second;
//! - a new leader anchors its term at `last stamp + time since seen` (after
//!   a restart, before it saw a stamp: the note's log time + the time since
//!   the note, by the boot clock, or after a reboot by the wall clock),
//!   moved towards its wall clock by at
//!   most [`MAX_CLOCK_STEP_MS`] and never below that estimate (with neither:
//!   the later of the last stamp and its wall clock);
//! - within a term stamps advance with the monotonic clock from the anchor,
//!   so a wall-clock step moves nothing until the next election.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wasmraft_raft::{Entry, EntryPayload, Index, Role};
use wasmraft_storage::{LogTimeNote, Storage};

use crate::boot_clock::{BootClock, Round};

use crate::raft_loop::ProposeReply;
use crate::system::SystemCommand;

/// The most a new leader moves log time towards its own wall clock: a
/// larger gap (a skewed or stepped clock) is closed one election at a time,
/// with a warning.
pub const MAX_CLOCK_STEP_MS: u64 = 500;

/// How far back a restarting node looks in its log for the last stamp.
const RESTART_WALK: u64 = 256;

/// A leader's anchor for the term it leads: `stamp_ms` at `at`, and the
/// highest stamp made in the term since.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    term: u64,
    stamp_ms: u64,
    at: Instant,
    made_ms: u64,
}

/// The Raft loop's log clock.
#[derive(Debug)]
pub(crate) struct StampClock {
    /// The highest stamp given to the log (handed to the log writer, if
    /// not durable yet): no stamp this node makes is below it, so stamps
    /// never go back in log order. Stamps this node makes count once they
    /// are given to its log: one made in a term whose entry never got
    /// there (a proposal dropped as its leader stepped down) is no log
    /// time, and counted on, it would let this node's next term start
    /// ahead of its predecessor's log time by more than
    /// [`MAX_CLOCK_STEP_MS`].
    last_ms: u64,
    /// The highest stamp durable in the log: what estimates, notes and
    /// anchors count from (see [`StampClock::written`]).
    durable_ms: u64,
    /// Log time as this node knows it: `ms` at `at`, the last stamp it saw
    /// in its log (after a restart, first the estimate from its note).
    /// None until then.
    known: Option<(u64, Instant)>,
    /// The term of the entry whose stamp `known` counts from (0: none, or
    /// unknown: a note's, a rewind's). Each leader's stamps run on its own
    /// clock, which may lag the one before it: see [`StampClock::handing`].
    known_term: u64,
    anchor: Option<Anchor>,
    /// The note of log time left before a restart, until the first turn
    /// reads it.
    note: Option<LogTimeNote>,
    /// When a note was last taken (given to be written, periodic or with
    /// entries), and the wall clock then.
    noted_at: Option<(Instant, u64)>,
    /// A refused note is not taken again before this.
    retry_at: Option<Instant>,
    /// The clock that measures the time since a note across a restart.
    boot: BootClock,
}

/// How often the Raft loop notes log time against its clocks; at once when
/// the wall clock steps by more than [`NOTE_ON_STEP_MS`] (which a restart
/// after a reboot measures by).
pub(crate) const NOTE_EVERY: Duration = Duration::from_secs(1);
const NOTE_ON_STEP_MS: u64 = 50;

impl StampClock {
    /// A clock that has seen `last_ms` (0: none), at no known time, with
    /// the note the node left before it restarted and the clock that
    /// measures the time since.
    pub fn new(last_ms: u64, note: Option<LogTimeNote>, boot: BootClock) -> Self {
        Self { last_ms, durable_ms: last_ms, known: None, known_term: 0, anchor: None, note, noted_at: None, retry_at: None, boot }
    }

    /// A simulated node's boot clock: its notes are read after a restart
    /// against the world's time, not this machine's.
    #[cfg(test)]
    pub fn set_boot_clock(&mut self, boot: BootClock) {
        self.boot = boot;
    }

    /// A note of log time `log_time_ms` now.
    fn note_of(&self, log_time_ms: u64, now: Instant, wall_ms: u64) -> LogTimeNote {
        LogTimeNote { log_time_ms, wall_ms, boot: self.boot.read(now, Round::Up) }
    }

    /// Log time by this node's monotonic clock, if it knows it.
    fn estimate(&self, now: Instant) -> Option<u64> {
        let (ms, at) = self.known?;
        Some(self.durable_ms.max(ms.saturating_add(now.saturating_duration_since(at).as_millis() as u64)))
    }

    /// Reads the note left before a restart, once: the time since the note
    /// is the boot clock's advance, if the machine has not rebooted since,
    /// else the wall clock's (right unless it was stepped meanwhile). From
    /// then on the monotonic clock counts, so a later step changes nothing.
    fn read_note(&mut self, now: Instant, wall_ms: u64) {
        if let Some(note) = self.note.take() {
            if self.known.is_none() {
                let since = match (note.boot, self.boot.read(now, Round::Down)) {
                    (Some(then), Some(boot)) if then.boot_id == boot.boot_id => boot.ms.saturating_sub(then.ms),
                    _ => wall_ms.saturating_sub(note.wall_ms),
                };
                let ms = self.durable_ms.max(note.log_time_ms.saturating_add(since));
                self.known = Some((ms, now));
                self.known_term = 0;
            }
        }
    }

    /// Log time against this node's clocks, to note, every [`NOTE_EVERY`]
    /// and after a wall-clock step (for a reboot's restart, which measures
    /// by the wall clock), once this node knows log time.
    pub fn note_due(&mut self, now: Instant, wall_ms: u64) -> Option<LogTimeNote> {
        self.read_note(now, wall_ms);
        let estimate = self.estimate(now)?;
        if self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        if let Some((at, wall_then)) = self.noted_at {
            let elapsed = now.saturating_duration_since(at);
            let stepped = wall_ms.abs_diff(wall_then.saturating_add(elapsed.as_millis() as u64)) > NOTE_ON_STEP_MS;
            if elapsed < NOTE_EVERY && !stepped {
                return None;
            }
        }
        self.noted_at = Some((now, wall_ms));
        self.retry_at = None;
        Some(self.note_of(estimate, now, wall_ms))
    }

    /// The note [`note_due`](Self::note_due) gave could not be written
    /// (the log busy, or RocksDB stalling writes): it is due again at
    /// `retry_at`, as the one on disk may be further from log time
    /// (missing a wall-clock step, for a reboot), and not before, so that
    /// a long stall is not tried on every turn.
    pub fn note_refused(&mut self, retry_at: Instant) {
        self.noted_at = None;
        self.retry_at = Some(retry_at);
    }

    /// The highest stamp seen or made.
    #[cfg(test)]
    pub fn last_ms(&self) -> u64 {
        self.last_ms
    }

    /// Entries whose last stamp is `stamped` (stamp, term) go to the log
    /// writer at `now`; the note to write in the same batch, if any: one
    /// with the first stamp of another term. A new leader's clock may run
    /// behind the one this node counted from (it anchored from a lagging
    /// estimate), and a note extrapolated from the old clock, read after a
    /// restart, would put this node ahead of log time by the difference
    /// (seed 1000349: 42 ms past the step a new leader may take). Written
    /// apart from the entries, a crash between the two writes would leave
    /// the old note with the new entries.
    ///
    /// The stamp is the floor of this node's own stamps from now on.
    pub fn handing(&mut self, stamped: Option<(u64, u64)>, now: Instant, wall_ms: u64) -> Option<LogTimeNote> {
        let (stamp, term) = stamped?;
        if stamp < self.last_ms {
            return None;
        }
        self.last_ms = stamp;
        (term != self.known_term).then(|| self.note_of(stamp, now, wall_ms))
    }

    /// Entries whose last stamp is `stamped` (stamp, term), handed to the
    /// log writer at `seen`, are durable: log time counts from that stamp.
    /// Not before: a note taken meanwhile (`note_due`) would count a stamp
    /// that a crash may still take from the log, and one this node made
    /// leading a term may run [`MAX_CLOCK_STEP_MS`] ahead of the log before
    /// it. `noted_wall`: the wall clock of the note written with them, if
    /// any (the next periodic one is a second later).
    pub fn written(&mut self, (stamp, term): (u64, u64), seen: Instant, noted_wall: Option<u64>) {
        if let Some(wall_ms) = noted_wall {
            self.noted_at = Some((seen, wall_ms));
        }
        if stamp < self.durable_ms {
            return;
        }
        self.durable_ms = stamp;
        self.known = Some((stamp, seen));
        self.known_term = term;
    }

    /// The log lost entries this node had written: a follower's suffix
    /// that conflicts with its leader's, or the whole log for a snapshot.
    /// The stamps they carried are no log time: this node may have made
    /// them itself, leading a term whose entries never committed (and a
    /// term's first stamp may run [`MAX_CLOCK_STEP_MS`] ahead of what it
    /// knew). Counted on, they let this node's next term start up to one
    /// more step ahead of its predecessor's log time, and leases end early
    /// in real time. Log time is now `stamp`, the last one the log holds (0:
    /// none), as of `now`: an estimate that may lag, never lead. The note
    /// on disk was taken from the old estimate: the caller replaces it with
    /// the note returned (`None`: removes it), durably, no later than the
    /// entries leave the log (in the write that removes them, or before
    /// it), or a restart would bring their time back through it.
    /// `wall_ms` is the wall clock now.
    #[must_use = "the note on disk must be replaced no later than the entries leave the log"]
    pub fn rewind(&mut self, stamp: u64, now: Instant, wall_ms: u64) -> Option<LogTimeNote> {
        // (No write is in flight: the loop hands the next only once the
        // last is durable, and rewinds as it hands one.)
        self.last_ms = stamp;
        self.durable_ms = stamp;
        self.known = (stamp > 0).then_some((stamp, now));
        self.known_term = 0;
        self.anchor = None;
        self.note = None;
        self.noted_at = Some((now, wall_ms));
        self.known.map(|(ms, _)| self.note_of(ms, now, wall_ms))
    }

    /// The stamp for entries proposed now by the leader of `term`.
    pub fn stamp(&mut self, term: u64, now: Instant, wall_ms: u64) -> u64 {
        let anchor = match self.anchor {
            Some(a) if a.term == term => a,
            _ => {
                self.read_note(now, wall_ms);
                let stamp_ms = self.anchor_ms(now, wall_ms);
                Anchor { term, stamp_ms, at: now, made_ms: stamp_ms }
            }
        };
        let since = now.saturating_duration_since(anchor.at).as_millis() as u64;
        let stamp = self.last_ms.max(anchor.made_ms).max(anchor.stamp_ms.saturating_add(since));
        self.anchor = Some(Anchor { made_ms: stamp, ..anchor });
        stamp
    }

    /// The stamp `stamp` would give now in `term`, without moving the
    /// clock; none before the term's first stamp.
    pub fn peek(&self, term: u64, now: Instant) -> Option<u64> {
        let anchor = self.anchor.filter(|a| a.term == term)?;
        let since = now.saturating_duration_since(anchor.at).as_millis() as u64;
        Some(self.last_ms.max(anchor.made_ms).max(anchor.stamp_ms.saturating_add(since)))
    }

    /// Where a new term's stamps start.
    fn anchor_ms(&self, now: Instant, wall_ms: u64) -> u64 {
        let Some(estimate) = self.estimate(now) else {
            return self.last_ms.max(wall_ms);
        };
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

/// The leader's side of timers: when to propose a tick. Ticks start once
/// the leader applied the first entry of its term (so that the wake-up it
/// reads reflects every earlier entry), are at least [`MIN_TICK_GAP`] apart,
/// one at a time, and a tick the plugin failed is retried after
/// [`RETRY_AFTER_FAILURE`]. `grace_until` is fixed when a term's ticks start:
/// the stamp then plus one election timeout.
#[derive(Debug)]
pub(crate) struct Ticker {
    wake: Arc<WakeUp>,
    election_timeout_ms: u64,
    /// The highest index the apply side reported applied.
    applied: u64,
    leading: Option<Leading>,
    /// The index of the tick proposed and not yet applied.
    in_flight: Option<u64>,
    last_proposed: Option<Instant>,
    retry_at: Option<Instant>,
    /// Keep-alives taken and not yet carried by a tick: key, log time taken.
    pending: Vec<(Vec<u8>, u64, ProposeReply)>,
}

#[derive(Debug)]
struct Leading {
    term: u64,
    /// An index at or after the first entry of the term.
    first_index: u64,
    /// Set once the term's ticks may start.
    grace_until_ms: Option<u64>,
}

/// Ticks at most this often: a plugin that always asks for `now` costs 100
/// entries a second, not a busy loop.
pub const MIN_TICK_GAP: Duration = Duration::from_millis(10);
/// How long the leader waits before it proposes again a tick that failed.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(1);
/// Keep-alives wait at most this long after the last tick for the next
/// one: at most 20 ticks a second carry them, however many arrive.
pub const RENEW_BATCH: Duration = Duration::from_millis(50);
/// The most keep-alives one tick carries; the rest wait for the next.
pub const MAX_RENEWALS_PER_TICK: usize = 4096;

impl Ticker {
    pub fn new(wake: Arc<WakeUp>, election_timeout: Duration) -> Self {
        Self {
            wake,
            election_timeout_ms: election_timeout.as_millis() as u64,
            applied: 0,
            leading: None,
            in_flight: None,
            last_proposed: None,
            retry_at: None,
            pending: Vec::new(),
        }
    }

    /// Takes a keep-alive for `key`, at log time `at_ms`.
    pub fn renewal(&mut self, key: Vec<u8>, at_ms: u64, reply: ProposeReply) {
        self.pending.push((key, at_ms, reply));
    }

    /// The replies of keep-alives no tick will carry: this node stopped
    /// leading.
    pub fn abandon(&mut self) -> Vec<ProposeReply> {
        self.pending.drain(..).map(|(_, _, reply)| reply).collect()
    }

    /// The apply side applied up to `index`.
    pub fn applied(&mut self, index: u64) {
        self.applied = self.applied.max(index);
    }

    /// Whether the next tick waits for an index to be applied: the first
    /// of this leader's term, or the tick in flight.
    pub fn waits_for_applied(&self) -> bool {
        self.leading.as_ref().is_some_and(|l| self.applied < l.first_index)
            || self.in_flight.is_some_and(|index| self.applied < index)
    }

    /// The tick to propose now, if one is due. `last_index` is read once
    /// per term: the log's last index when this node is first seen leading.
    pub fn due(
        &mut self,
        role: Role,
        term: u64,
        last_index: impl FnOnce() -> u64,
        clock: &mut StampClock,
        now: Instant,
        wall_ms: u64,
    ) -> Option<(SystemCommand, Vec<ProposeReply>)> {
        if role != Role::Leader {
            self.leading = None;
            self.in_flight = None;
            return None;
        }
        if self.leading.as_ref().is_none_or(|l| l.term != term) {
            self.leading = Some(Leading { term, first_index: last_index(), grace_until_ms: None });
            self.in_flight = None;
            self.retry_at = None;
        }
        let leading = self.leading.as_mut().expect("set above");
        if self.applied < leading.first_index {
            return None;
        }
        if let Some(index) = self.in_flight {
            if self.applied < index {
                return None;
            }
            self.in_flight = None;
            if self.wake.failed(index) {
                self.retry_at = Some(now + RETRY_AFTER_FAILURE);
            }
        }
        let stamp = clock.stamp(term, now, wall_ms);
        let grace_until_ms = *leading.grace_until_ms.get_or_insert(stamp.saturating_add(self.election_timeout_ms));
        let waiting = |at: Option<Instant>| at.is_some_and(|at| now < at);
        let wake_due = self.wake.get().is_some_and(|wake| wake <= stamp) && !waiting(self.retry_at);
        let renewals_due = !self.pending.is_empty() && !waiting(self.last_proposed.map(|p| p + RENEW_BATCH));
        if !(wake_due || renewals_due) || waiting(self.last_proposed.map(|p| p + MIN_TICK_GAP)) {
            return None;
        }
        let carried: Vec<_> = self.pending.drain(..self.pending.len().min(MAX_RENEWALS_PER_TICK)).collect();
        let (renewals, replies) = carried.into_iter().map(|(key, at, reply)| ((key, at), reply)).unzip();
        Some((SystemCommand::Tick { now_ms: stamp, grace_until_ms, renewals }, replies))
    }

    /// The tick `due` returned was proposed at `index`.
    pub fn proposed(&mut self, index: u64, now: Instant) {
        self.in_flight = Some(index);
        self.last_proposed = Some(now);
    }

    /// How long the loop may sleep before a tick could be due (none: no
    /// tick waits on time).
    pub fn sleep_limit(&self, clock: &StampClock, now: Instant) -> Option<Duration> {
        let leading = self.leading.as_ref()?;
        if leading.grace_until_ms.is_none() || self.in_flight.is_some() {
            return None;
        }
        if !self.pending.is_empty() {
            let since = self.last_proposed.map_or(RENEW_BATCH, |p| now.saturating_duration_since(p));
            return Some(RENEW_BATCH.saturating_sub(since).max(MIN_TICK_GAP));
        }
        let wake = self.wake.get()?;
        let now_ms = clock.peek(leading.term, now)?;
        Some(Duration::from_millis(wake.saturating_sub(now_ms)).max(MIN_TICK_GAP))
    }
}

/// The plugin's wake-up in log time, as the apply side last stored it, and
/// the last tick that failed: written by the apply worker before it tells
/// the Raft loop an index applied, read by the loop to decide when to tick.
#[derive(Debug)]
pub(crate) struct WakeUp {
    at_ms: AtomicU64,
    failed_index: AtomicU64,
}

const NO_WAKE_UP: u64 = u64::MAX;

impl Default for WakeUp {
    fn default() -> Self {
        Self { at_ms: AtomicU64::new(NO_WAKE_UP), failed_index: AtomicU64::new(0) }
    }
}

impl WakeUp {
    pub fn publish(&self, at_ms: Option<u64>) {
        self.at_ms.store(at_ms.unwrap_or(NO_WAKE_UP), Ordering::Release);
    }

    pub fn get(&self) -> Option<u64> {
        Some(self.at_ms.load(Ordering::Acquire)).filter(|&at| at != NO_WAKE_UP)
    }

    pub fn failed_at(&self, index: u64) {
        self.failed_index.store(index, Ordering::Release);
    }

    /// Whether the tick at `index` failed.
    pub fn failed(&self, index: u64) -> bool {
        self.failed_index.load(Ordering::Acquire) == index
    }
}

/// The last stamp among `entries`, with its entry's term.
pub(crate) fn last_stamp(entries: &[Entry]) -> Option<(u64, u64)> {
    entries.iter().rev().find_map(|e| Some((entry_stamp(e)?, e.log_id.term.0)))
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

/// Log time as the store holds it: see [`stored_log_time_before`].
pub(crate) fn stored_log_time(storage: &Storage) -> Result<u64, wasmraft_storage::StorageError> {
    stored_log_time_before(storage, Index(storage.log_bounds().1.0 + 1))
}

/// Log time as the store holds it below `index`: the last stamp in the
/// [`RESTART_WALK`] entries of the log before it, or the applied state's
/// log time if later (a log compacted to nothing, a snapshot just
/// installed); 0 if neither has one.
pub(crate) fn stored_log_time_before(storage: &Storage, index: Index) -> Result<u64, wasmraft_storage::StorageError> {
    Ok(last_stamp_before(storage, index).max(storage.log_time_ms()?.unwrap_or(0)))
}

/// The last stamp in the [`RESTART_WALK`] entries of the log before
/// `index`, or 0.
fn last_stamp_before(storage: &Storage, index: Index) -> u64 {
    let first = storage.log_bounds().0;
    let floor = first.0.max(index.0.saturating_sub(RESTART_WALK)).max(1);
    let mut hi = index.0;
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
    use wasmraft_storage::BootTime;

    use super::*;

    /// A clock with no boot clock, and a note `(log time, wall)`.
    fn clock(last_ms: u64, note: Option<(u64, u64)>) -> StampClock {
        let note = note.map(|(log_time_ms, wall_ms)| LogTimeNote { log_time_ms, wall_ms, boot: None });
        StampClock::new(last_ms, note, BootClock::Unknown)
    }

    /// A note as `(log time, wall)`.
    fn pair(note: Option<LogTimeNote>) -> Option<(u64, u64)> {
        note.map(|n| (n.log_time_ms, n.wall_ms))
    }

    impl StampClock {
        /// Entries handed to the log writer at `now` and durable at once:
        /// the note that goes with them.
        fn observe(&mut self, entries: &[Entry], now: Instant, wall_ms: u64) -> Option<LogTimeNote> {
            let stamped = last_stamp(entries)?;
            let note = self.handing(Some(stamped), now, wall_ms);
            self.written(stamped, now, note.map(|n| n.wall_ms));
            note
        }
    }

    fn stamped(stamp: u64) -> Entry {
        stamped_in(1, stamp)
    }

    fn stamped_in(term: u64, stamp: u64) -> Entry {
        let env = crate::envelope::Envelope { timestamp_ms: stamp, client_id: 0, sequence: 0, command: b"c".to_vec() };
        Entry {
            log_id: wasmraft_raft::LogId { term: wasmraft_raft::Term(term), index: Index(1) },
            payload: EntryPayload::Normal(env.encode()),
        }
    }

    #[test]
    fn the_first_stamp_of_another_term_is_noted_with_its_entries() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        assert_eq!(pair(c.observe(&[stamped_in(4, 10_000)], t0, 90_000)), Some((10_000, 90_000)));
        assert_eq!(pair(c.note_due(t0, 90_000)), None, "noted with the entries");
        // Term 4's clock, 400 ms on: more stamps of it need no note.
        let t1 = t0 + Duration::from_millis(400);
        assert_eq!(pair(c.observe(&[stamped_in(4, 10_390)], t1, 90_400)), None);
        assert_eq!(pair(c.note_due(t1, 90_400)), None);
        // Term 5's leader anchored 40 ms behind term 4's clock. Counted
        // from term 4's, the note would be 40 ms ahead after a restart.
        let t2 = t0 + Duration::from_millis(600);
        assert_eq!(pair(c.observe(&[stamped_in(5, 10_560)], t2, 90_600)), Some((10_560, 90_600)));
        assert_eq!(pair(c.note_due(t2, 90_600)), None);
        let t3 = t2 + Duration::from_millis(100);
        assert_eq!(pair(c.observe(&[stamped_in(5, 10_650)], t3, 90_700)), None, "one note per change of term");
        assert_eq!(pair(c.note_due(t3, 90_700)), None);
        // Refused by the store, it is due again, once the retry is.
        c.note_refused(t3 + Duration::from_millis(10));
        assert_eq!(pair(c.note_due(t3, 90_700)), None, "retried before its time");
        let t4 = t3 + Duration::from_millis(10);
        assert_eq!(pair(c.note_due(t4, 90_710)), Some((10_660, 90_710)));
    }

    /// A stamp counts once its entries are durable: handed to the log
    /// writer, it moves neither a periodic note nor a later term's anchor
    /// (a crash, or a new leader, may still take it from the log).
    #[test]
    fn a_stamp_counts_once_its_entries_are_durable() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        let _ = c.observe(&[stamped_in(4, 50_000)], t0, 90_000);
        // Leading term 5 with a wall clock far ahead: one step ahead, with
        // its note in the batch.
        let t1 = t0 + Duration::from_secs(1);
        let stamp = c.stamp(5, t1, 99_000);
        assert_eq!(stamp, 51_000 + MAX_CLOCK_STEP_MS);
        assert_eq!(pair(c.handing(Some((stamp, 5)), t1, 99_000)), Some((stamp, 99_000)));
        // Its stamps in the term go on from there, whatever is durable.
        assert_eq!(c.stamp(5, t1, 0), stamp);
        // In flight, the estimate is still the durable log's.
        let t2 = t1 + Duration::from_secs(1);
        assert_eq!(pair(c.note_due(t2, 100_000)), Some((52_000, 100_000)));
        // A later term starts one step past the durable log, and never
        // below a stamp given to the log before it.
        assert_eq!(c.stamp(6, t2, 100_000), 52_000 + MAX_CLOCK_STEP_MS, "one step past the durable log");
        assert_eq!(c.stamp(7, t1, 0), stamp, "not below the stamp in flight");
        // Written, it counts.
        c.written((stamp, 5), t1, None);
        assert_eq!(c.last_ms(), stamp);
    }

    #[test]
    fn stamps_follow_the_monotonic_clock_within_a_term_whatever_the_wall_does() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
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
        let mut c = clock(0, None);
        // A follower saw the old leader's stamp 50_000 at t0.
        let _ = c.observe(&[stamped(40_000), stamped(50_000)], t0, 0);
        // It leads 2 s later with a wall clock 10 s behind: log time goes on.
        assert_eq!(c.stamp(3, t0 + Duration::from_secs(2), 42_000), 52_000);
    }

    #[test]
    fn a_new_leader_ahead_moves_log_time_by_at_most_the_step() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        let _ = c.observe(&[stamped(50_000)], t0, 0);
        assert_eq!(c.stamp(2, t0 + Duration::from_secs(1), 61_000), 51_000 + MAX_CLOCK_STEP_MS);
        // Within the step, the wall clock is taken as it is.
        let mut c = clock(0, None);
        let _ = c.observe(&[stamped(50_000)], t0, 0);
        assert_eq!(c.stamp(2, t0 + Duration::from_secs(1), 51_200), 51_200);
    }

    #[test]
    fn after_a_restart_without_a_note_the_later_of_the_log_and_the_wall_clock() {
        let t0 = Instant::now();
        assert_eq!(clock(50_000, None).stamp(4, t0, 49_000), 50_000);
        assert_eq!(clock(50_000, None).stamp(4, t0, 90_000), 90_000);
    }

    #[test]
    fn after_a_restart_the_note_counts_the_wall_clocks_advance_not_its_reading() {
        let t0 = Instant::now();
        // Before the restart: log time 50_000 when the wall read 1_000_000
        // (stepped far ahead of log time). 3 s later, a restart and a lead.
        let note = Some((50_000, 1_000_000));
        assert_eq!(clock(50_500, note).stamp(4, t0, 1_003_000), 53_000 + MAX_CLOCK_STEP_MS);
        // The wall went back while the node was down, below log time: the
        // log's last stamp, and no more.
        assert_eq!(clock(50_500, note).stamp(4, t0, 40_000), 50_500);
        // A wall clock that agrees with log time is taken as it is.
        assert_eq!(clock(50_500, Some((50_000, 50_100))).stamp(4, t0, 53_200), 53_200);
        // The note is read at the first turn; a step after it moves nothing
        // but the usual step at an election.
        let mut c = clock(50_500, note);
        assert_eq!(pair(c.note_due(t0, 1_003_000)), Some((53_000, 1_003_000)));
        assert_eq!(c.stamp(4, t0 + Duration::from_secs(1), 1_012_000), 54_000 + MAX_CLOCK_STEP_MS);
    }

    /// Seed 3200315: a node's wall clock stepped 1.8 s forward while its
    /// loop was paused, and it died before it could note the step. By the
    /// wall clock, it was down 1.8 s longer than it was.
    #[test]
    fn after_a_restart_without_a_reboot_the_boot_clock_measures_the_time_down() {
        let boot = Instant::now();
        let t0 = boot + Duration::from_secs(100);
        let mut before = StampClock::new(0, None, BootClock::simulated(boot));
        let note = before.observe(&[stamped(50_000)], t0, 90_000).expect("noted with the first stamp");
        assert_eq!(note.boot, Some(BootTime { boot_id: [0; 16], ms: 100_000 }));
        // Down 53 ms; the wall clock stepped 1,762 ms forward meanwhile.
        let t1 = t0 + Duration::from_millis(53);
        let mut after = StampClock::new(50_000, Some(note), BootClock::simulated(boot));
        assert_eq!(after.stamp(2, t1, 90_000 + 53 + 1_762), 50_053 + MAX_CLOCK_STEP_MS);
        assert_eq!(pair(after.note_due(t1, 90_000 + 53 + 1_762)), Some((50_053, 91_815)));
        // After a reboot (another boot id), only the wall clock is left.
        let rebooted = LogTimeNote { boot: Some(BootTime { boot_id: [9; 16], ms: 100_000 }), ..note };
        let mut after = StampClock::new(50_000, Some(rebooted), BootClock::simulated(boot));
        assert_eq!(pair(after.note_due(t1, 90_000 + 400)), Some((50_400, 90_400)));
    }

    #[test]
    fn notes_are_taken_every_second_and_on_a_step_once_log_time_is_known() {
        let t0 = Instant::now();
        let mut c = clock(50_000, None);
        assert_eq!(pair(c.note_due(t0, 7)), None, "no stamp seen since the start");
        assert_eq!(pair(c.observe(&[stamped(60_000)], t0, 600)), Some((60_000, 600)));
        assert_eq!(pair(c.note_due(t0 + Duration::from_millis(300), 900)), None);
        assert_eq!(pair(c.note_due(t0 + Duration::from_millis(900), 1_500)), None);
        assert_eq!(pair(c.note_due(t0 + Duration::from_millis(1_300), 1_900)), Some((61_300, 1_900)));
        // A wall-clock step is noted at once.
        assert_eq!(pair(c.note_due(t0 + Duration::from_millis(1_400), 2_000)), None);
        assert_eq!(pair(c.note_due(t0 + Duration::from_millis(1_500), 9_000)), Some((61_500, 9_000)));
    }

    #[test]
    fn stamps_that_never_reach_the_log_do_not_carry_into_a_later_term() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        let _ = c.observe(&[stamped(50_000)], t0, 0);
        // Leading term 2 with a wall clock far ahead: one step, stamped for
        // a proposal that is dropped as this node steps down.
        assert_eq!(c.stamp(2, t0, 90_000), 50_000 + MAX_CLOCK_STEP_MS);
        // Term 3's leader stamps from its own log time; this node leads
        // term 4, 1 s later, with the same wall clock: one step past log
        // time, not two.
        let _ = c.observe(&[stamped(50_100)], t0 + Duration::from_millis(100), 0);
        assert_eq!(c.stamp(4, t0 + Duration::from_secs(1), 90_000), 51_000 + MAX_CLOCK_STEP_MS);
    }

    #[test]
    fn a_replaced_suffix_takes_its_stamps_with_it() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        let _ = c.observe(&[stamped(50_000)], t0, 0);
        assert_eq!(c.stamp(2, t0, 90_000), 50_000 + MAX_CLOCK_STEP_MS);
        let _ = c.observe(&[stamped(50_000 + MAX_CLOCK_STEP_MS)], t0, 0);
        // Term 3's leader replaces that entry: the log's last stamp is
        // 50_000 again, and then term 3's own.
        let _ = c.rewind(50_000, t0 + Duration::from_millis(100), 90_100);
        let _ = c.observe(&[stamped(50_100)], t0 + Duration::from_millis(100), 0);
        assert_eq!(c.last_ms(), 50_100);
        assert_eq!(c.stamp(4, t0 + Duration::from_secs(1), 90_000), 51_000 + MAX_CLOCK_STEP_MS);
    }

    #[test]
    fn a_rewind_gives_the_note_to_replace_the_one_on_disk_with() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        let noted = c.observe(&[stamped(50_000 + MAX_CLOCK_STEP_MS)], t0, 90_000);
        assert_eq!(pair(noted), Some((50_000 + MAX_CLOCK_STEP_MS, 90_000)));
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(pair(c.note_due(t1, 90_100)), None, "not due yet");
        // The entry leaves the log. Left on disk, the note of its time
        // would come back after a restart (seed 700509: a new leader 700 ms
        // ahead of its predecessor's log time).
        assert_eq!(pair(c.rewind(50_000, t1, 90_100)), Some((50_000, 90_100)));
        // The caller wrote it: the next is a second later.
        assert_eq!(pair(c.note_due(t1, 90_100)), None);
        let t2 = t1 + NOTE_EVERY;
        assert_eq!(pair(c.note_due(t2, 91_100)), Some((51_000, 91_100)));
        // A log left with no stamp: no note, and none due until a stamp.
        assert_eq!(pair(c.rewind(0, t2, 91_100)), None);
        assert_eq!(pair(c.note_due(t2 + NOTE_EVERY, 92_100)), None);
    }

    #[test]
    fn older_stamps_in_the_log_do_not_move_the_clock_back() {
        let t0 = Instant::now();
        let mut c = clock(0, None);
        let _ = c.observe(&[stamped(50_000)], t0, 0);
        let _ = c.observe(&[stamped(20_000)], t0 + Duration::from_secs(1), 0);
        assert_eq!(c.last_ms(), 50_000);
        assert_eq!(c.stamp(2, t0 + Duration::from_secs(1), 0), 51_000);
    }
}
