//! # wasmraft-raft: the pure Raft protocol core
//!
//! A deterministic state machine that implements Raft (Ongaro & Ousterhout
//! 2014, and the thesis, cited as "thesis §x") with no I/O, no clock, no
//! threads and no async: time arrives as [`RawNode::tick`], randomness from
//! [`Config::seed`], storage is read through [`LogReader`], and everything the
//! node must do comes out as a [`Ready`]. Same seed + same inputs give the same
//! `Ready`s. The shape is etcd-io/raft's and tikv/raft-rs's.
//!
//! Features: elections with pre-vote and check-quorum (both on by default),
//! seeded randomized election timeouts, the leader's no-op; pipelined
//! replication with a bounded in-flight window, conflict-term hints, probe /
//! replicate / snapshot progress states, commit by counting current-term
//! entries only; proposal batching; batched ReadIndex with per-round tokens,
//! follower ReadIndex through the leader; a tick-counted leader lease;
//! learners; joint-consensus membership changes with automatic leave; leader
//! transfer (TimeoutNow); snapshots.
//!
//! ## Driving a node
//!
//! ```
//! use wasmraft_raft::*;
//!
//! // A LogReader over what the driver persisted (a Vec here; RocksDB in host/storage).
//! #[derive(Default)]
//! struct Disk { hs: HardState, log: Vec<Entry> }
//! impl LogReader for Disk {
//!     fn initial_state(&self) -> Result<(HardState, Membership), StorageError> {
//!         Ok((self.hs, Membership::new([NodeId(1)])))
//!     }
//!     fn entries(&self, lo: Index, hi: Index, _max: u64) -> Result<Vec<Entry>, StorageError> {
//!         Ok(self.log[lo.0 as usize - 1..hi.0 as usize - 1].to_vec())
//!     }
//!     fn term(&self, i: Index) -> Result<Term, StorageError> {
//!         if i.0 == 0 { return Ok(Term(0)) }
//!         self.log.get(i.0 as usize - 1).map(|e| e.log_id.term).ok_or(StorageError::Unavailable)
//!     }
//!     fn first_index(&self) -> Result<Index, StorageError> { Ok(Index(1)) }
//!     fn last_index(&self) -> Result<Index, StorageError> { Ok(Index(self.log.len() as u64)) }
//!     fn snapshot_meta(&self) -> Result<Option<SnapshotMeta>, StorageError> { Ok(None) }
//! }
//!
//! let mut node = RawNode::new(Config::new(NodeId(1)), Disk::default()).unwrap();
//! let mut applied = Vec::new();
//! for tick in 0..40 {
//!     node.tick(); // the driver turns a monotonic clock into ticks
//!     if tick == 30 {
//!         node.propose(vec![b"hello".to_vec()]).unwrap(); // we lead by now
//!     }
//!     while node.has_ready() {
//!         let rd = node.ready();
//!         // 1. send rd.messages (none: a single node)
//!         // 2-3. persist entries and hard state, one fsync if rd.must_sync
//!         let disk = node.reader_mut();
//!         if let Some(first) = rd.entries.first() {
//!             disk.log.truncate(first.log_id.index.0 as usize - 1);
//!             disk.log.extend(rd.entries.iter().cloned());
//!         }
//!         if let Some(hs) = rd.hard_state { disk.hs = hs; }
//!         // 4. send rd.persisted_messages; 5. apply
//!         applied.extend(rd.committed_entries.iter().cloned());
//!         let last = rd.committed_entries.last().map(|e| e.log_id.index);
//!         node.advance(rd);
//!         if let Some(i) = last { node.applied_to(i); }
//!     }
//! }
//! assert_eq!(node.status().role, Role::Leader);
//! assert_eq!(applied.last().unwrap().payload, EntryPayload::Normal(b"hello".to_vec()));
//! ```
//!
//! ## The driver's contract: what to persist, in which order
//!
//! One `Ready` at a time: `ready()`, do steps 1-5, `advance(rd)`, then the
//! next. `has_ready()` is false while a Ready is outstanding; `tick`, `step`,
//! `propose` and `read_index` may be called between `ready()` and `advance()`,
//! and [`RawNode::take_early`] gives the messages and answered reads they
//! produced that may go before the next Ready (a driver writing on another thread keeps
//! answering heartbeats while its fsync runs).
//!
//! 1. **Send `messages` at once.** They never depend on this Ready's writes:
//!    the leader's AppendEntries and heartbeats may go out before its own fsync
//!    (thesis §10.2.1) because the leader counts its own log only after
//!    `advance`; pre-vote requests, TimeoutNow, InstallSnapshot requests and
//!    ReadIndex traffic change nothing durable.
//! 2. **Install `snapshot`** (if `Some`) atomically: the state machine data
//!    received earlier becomes current together with its metadata, and the
//!    whole log is discarded. The state machine is then at
//!    `snapshot.last.index`.
//! 3. **Append `entries`**, first deleting every persisted entry with an
//!    index `>= entries[0].index`, and **save `hard_state`**; the snapshot,
//!    the entries and the hard state go to disk in that order and are made
//!    durable by **one fsync** when `must_sync` (a Ready whose only change is
//!    the commit index needs none, and need not be saved at once: at start
//!    the core counts everything up to [`Config::applied`] (if the log holds
//!    it) as committed, and learns the rest from the leader or by
//!    committing in its own term). Never reorder the vote/term write after
//!    the log write or across Readys (openraft `io_ordering.md`).
//! 4. **Only then send `persisted_messages`**: votes, append and snapshot
//!    responses, and a candidate's vote requests all promise something that
//!    must survive a crash (a heartbeat answer promises nothing durable: it
//!    goes in `messages`). If the Ready wrote nothing they may
//!    go at once.
//! 5. **Apply `committed_entries`** in order, then call
//!    [`RawNode::applied_to`]. Acknowledge a client's write only when the entry
//!    with the index *and term* `propose` gave it is applied (another entry at
//!    that index means the proposal was lost). Answer a `read_states` entry
//!    once the state machine has applied at least its `index`. Make the
//!    applied index durable atomically with the state it covers, never
//!    ahead of the log entries it covers, and pass it as
//!    [`Config::applied`] on restart.
//! 6. **`advance(rd)`**: the writes are durable. Even if the driver moved the
//!    fields out of `rd`, `advance` knows what the Ready carried.
//!
//! Other duties:
//! - **Reader freshness**: after step 3 and before `advance`, the
//!   [`LogReader`] must show the new state.
//! - **Compaction**: the driver may take a snapshot of the state machine at
//!   its applied index `i` and then drop log entries `<= i`; the snapshot's
//!   [`SnapshotMeta::membership`] is the last membership entry applied at or
//!   before `i` (or the previous snapshot's / bootstrap membership), and
//!   `LogReader::term(i)` must keep answering the snapshot's term.
//! - **Snapshots to followers**: a leader's `InstallSnapshot { meta }` asks the
//!   driver to stream the snapshot `meta` to that follower. The follower's
//!   driver stores the data durably, then steps the message; its next Ready
//!   carries `snapshot: Some(meta)`. The leader's driver calls
//!   [`RawNode::report_snapshot`] when the transfer succeeded or failed.
//! - **Commit updates**: with [`Config::defer_commit_updates`], a leader
//!   sends a new commit index only with the next append or heartbeat round;
//!   the driver decides when followers must hear it sooner (after a short
//!   delay, or at once for one whose clients wait) and calls
//!   [`RawNode::send_commit_updates`] for those that
//!   [`RawNode::commit_update_due`] names.
//! - **Ticks and leases**: deliver every elapsed tick, also after a process
//!   pause or a slow fsync, *before* calling [`RawNode::lease_read`]; check
//!   the lease when the read is taken, serve at `applied >= index`. Clock rates
//!   of nodes may differ by at most what [`Config::lease_drift_ticks`] covers:
//!   one tick of rounding plus the rate difference over an election timeout
//!   (default 2 of 10 ticks: rates within 9/8 of each other).
//! - **Storage errors**: `Compacted` and `Unavailable` are part of the
//!   protocol; any other `LogReader` error is fatal and the core panics with
//!   the error (a node with a failing disk must stop, not vote).
//! - **Restart**: `LogReader::initial_state` returns the persisted hard state
//!   and the *base* membership (snapshot's or bootstrap); the core replays the
//!   membership entries of the log on top of it.
//!
//! ## Protocol choices worth knowing
//!
//! - **Membership takes effect at commit.** A configuration entry becomes the
//!   node's configuration when the node learns it is committed, so a
//!   truncated entry never has to be rolled back. Changes of voters always
//!   go through a joint configuration that the leader leaves by itself once
//!   it commits; one change at a time; never before the leader committed an
//!   entry of its term. A leader removed by `C_new` steps down when `C_new`
//!   commits.
//! - **ReadIndex rounds** (`read_only.rs`): each heartbeat
//!   round has a new token; a read waits for a round started after it
//!   arrived; a round is confirmed by a quorum of voters acknowledging it or a
//!   later round. Reads arriving before the leader's no-op commits wait for it.
//!   All `read_index` calls between two `ready()`s share one round.
//! - **Lease**: after a quorum confirmed a round sent at tick `s`, the leader
//!   may serve reads locally until tick `s + election_tick -
//!   lease_drift_ticks`. Every voter that acknowledged refuses (pre-)votes for
//!   `election_tick` of its own ticks after it heard from the leader, and for
//!   `election_tick` ticks after it starts (a restart forgets the contact).
//!   The lease ends on any step-down, and on `transfer_leader` for the rest of
//!   the term (the transfer's election bypasses the voters' guard).
//! - **Lost appends**: the network may drop silently. Each heartbeat answer
//!   makes the leader send a follower what is not in flight: new entries if
//!   the window has room, else an empty append at the window's end (a probe
//!   that is outstanding is followed the same way). The follower rejects it
//!   only if the appends before it were lost, and the leader probes again;
//!   `report_unreachable` does so at once.
//! - **Heartbeats may overtake appends**: the driver may send heartbeats,
//!   votes and their answers ahead of queued appends (another lane), as
//!   long as AppendEntries to a peer, and AppendResponses to a peer, keep
//!   their order (empty ones too: an empty append stepped ahead of appends
//!   with entries is rejected, and sends the leader back to probing). A
//!   heartbeat answer moves no progress, so it never resends entries in
//!   flight nor moves `next` back.
//! - **Window**: at most `max_inflight_msgs` appends and
//!   `max_inflight_bytes` of entries are in flight to a replicating
//!   follower (one append always goes). A driver whose transport queues a
//!   bounded number of bytes per peer sets the byte window within it, or
//!   the leader reads entries from its log for appends the transport drops.
//!
//! ## Pitfalls and their regression tests
//!
//! From `shared/notes/reliability-anchors.md` §3, the items that concern the
//! core. Unit tests live in `src/tests/`; the simulation in
//! `tests/t50_simulation.rs` exercises all of them together.
//!
//! | Pitfall | Regression test(s) |
//! |---|---|
//! | ReadIndex before the leader committed an entry of its term (etcd#7331, raft-rs#141) | `read_test::read_index_waits_for_the_leaders_own_term_commit` |
//! | Minority leader serves a read without a quorum round (d-engine#381, Jepsen 2014) | `read_test::leader_in_a_minority_serves_no_read`, `t50_simulation::checker_catches_local_reads_served_as_linearizable` |
//! | Reused ReadIndex context; late acks release a newer read (etcd#20418, raft#397) | `read_test::late_ack_of_an_older_round_does_not_release_a_newer_read`, `read_test::acks_from_an_older_term_are_ignored` |
//! | A read joining a batch is served by a round that started before it | `read_test::late_ack_of_an_older_round_does_not_release_a_newer_read`, `read_test::reads_queued_before_one_round_are_confirmed_by_that_round` |
//! | Single-node fast path stale reads (d-engine#228); quorum math must follow the joint config, learners not counted (openraft d60f1e85, a10d9906) | `read_test::single_voter_reads_need_no_peers_but_still_follow_the_rules`, `quorum::tests::joint_value_is_the_minimum_of_both_halves`, `quorum::tests::joint_vote_needs_both_halves`, `membership_test::learners_receive_the_log_but_never_vote_or_count` |
//! | Follower ReadIndex must wait `applied >= read_index` (openraft read.md) | `read_test::follower_read_index_goes_through_the_leader` (the index comes back as a `ReadState`; the simulator serves only at `applied >= index`) |
//! | Lease reads need check-quorum (etcd#8450) and monotonic ticks | `read_test::lease_reads_require_check_quorum`, `read_test::lease_counts_from_when_the_round_was_sent` |
//! | Lease < election timeout − drift; followers with a live lease do not vote | `election_test::follower_in_contact_with_a_leader_ignores_vote_and_pre_vote_requests`, `read_test::no_new_leader_while_an_old_lease_may_be_valid`, `election_test::restarted_node_refuses_votes_for_an_election_timeout` |
//! | CheckQuorum lease lasting 1.5–2 election timeouts (etcd-io/raft#166) | `read_test::lease_counts_from_when_the_round_was_sent` (counted from the send, ends after `election_tick - lease_drift_ticks`) |
//! | Leader transfer must end the lease at once (tikv#4680, #9208) | `election_test::leader_transfer_ends_the_lease_and_the_target_wins` |
//! | Lease ends on step-down / paused leader | `read_test::lease_ends_at_once_when_a_higher_term_is_seen`, `election_test::check_quorum_leader_steps_down_when_cut_off` |
//! | Pre-vote and check-quorum on by default (Cloudflare outage, cockroach#104042) | `election_test::pre_vote_and_check_quorum_are_on_by_default`, `election_test::pre_vote_asks_at_next_term_without_raising_the_term` |
//! | Candidate must step down on a same-term AppendEntries (d-engine#340) | `election_test::candidate_steps_down_on_same_term_append_entries` |
//! | Vote compares (last term, last index) lexicographically (openraft a48a3282) | `election_test::vote_compares_last_term_before_last_index` |
//! | Randomized, seeded election timeouts; a restarted follower does not wait too long | `election_test::election_timeouts_are_seeded_and_randomized` |
//! | Membership change before the leader committed an entry of its term (raft-dev 2015, copycat#23) | `membership_test::membership_change_waits_for_an_entry_of_the_leaders_term`, `membership_test::one_membership_change_at_a_time` |
//! | Apply-time single-server changes unsound (etcd#7625): joint consensus | `membership_test::adding_a_voter_goes_through_a_joint_configuration_and_leaves_it`, `membership_test::joint_commit_needs_both_majorities` |
//! | Joint config kept at restart; learner stays learner (openraft 6c0ccaf3, 39690593) | `membership_test::learner_stays_learner_and_joint_stays_joint_after_restart` |
//! | Non-voters never block or count; interrupted joint change is finished | `membership_test::learners_receive_the_log_but_never_vote_or_count`; the simulator's heal-and-converge phase requires a non-joint configuration |
//! | Removed server / non-voting leader (cowsql#150, RedisLabs/raft#13) | `membership_test::removed_leader_steps_down_once_the_new_configuration_commits`, `membership_test::a_leader_removed_by_the_new_configuration_tells_the_others_it_committed` |
//! | Disruptive candidates without pre-vote (thesis §4.2.3): only the leader or a granted vote restarts the election timer (Figure 2) | `election_test::a_candidate_that_cannot_win_does_not_hold_off_the_elections_of_those_that_can` |
//! | A deferred commit index still reaches every follower (`Config::defer_commit_updates`) | `replication_test::a_deferred_commit_index_goes_with_the_next_append_or_heartbeat`; half the simulation's seeds defer |
//! | Never send before HardState + entries are durable (etcd-io/raft README) | `election_test::vote_requests_wait_for_the_candidates_own_vote_to_be_durable`, `replication_test::follower_acknowledges_only_after_persisting` |
//! | Commit/ack only against the durable index (d-engine#329, etcd#14370) | `replication_test::leader_counts_its_own_entries_only_once_durable`, `election_test::single_voter_elects_itself_and_commits_once_persisted` |
//! | Truncate only from the first conflicting entry; empty appends still check (openraft 9540c904, 6202138f) | `replication_test::append_truncates_only_from_the_first_conflicting_entry`, `replication_test::an_empty_append_still_checks_prev`, `replication_test::a_conflicting_suffix_is_replaced` |
//! | Commit only current-term entries by counting (§5.4.2, Figure 8; openraft beb0302b) | `replication_test::leader_never_commits_an_older_term_by_counting_replicas` |
//! | Two snapshots in quick succession (etcd#18055) | `snapshot_test::an_older_snapshot_after_a_newer_one_is_ignored` |
//! | Membership from snapshot meta, not a stale log (openraft 447dc11c) | `snapshot_test::follower_installs_a_snapshot_with_the_membership_of_its_meta` |
//! | Install success = follower persisted, not transfer ack (d-engine#308) | `snapshot_test::follower_installs_a_snapshot_with_the_membership_of_its_meta` (the response is a `persisted_messages` entry) |
//! | Lost appends stall a full pipeline (found by this crate's simulator) | `reorder_test::appends_lost_behind_a_full_window_are_found_by_an_empty_append`, `t50_simulation` (seeds with message drop) |
//! | More in flight than the transport queues: appends read, dropped and resent under large values (t64's lost leaderships) | `replication_test::in_flight_appends_are_bounded_by_the_byte_window`, `replication_test::one_append_larger_than_the_byte_window_still_goes` |
//! | A heartbeat answer overtaking appends read as loss: resend storm (the reverted control lane, 104077d) | `reorder_test::a_heartbeat_answer_ahead_of_a_full_window_resends_nothing`, `reorder_test::an_outstanding_probe_is_followed_by_an_empty_one` |
//!
//! Outside the core (driver or storage): fsync of directories, torn tails,
//! storage checksums, snapshot I/O off the loop, idempotent apply, client
//! retries and sessions, cross-replica hash checks, zombie leader on a stalled
//! disk (the core only counts the leader's log once `advance` says it is
//! durable, so a stalled disk stops commits; stepping down on it is the
//! driver's call).
#![deny(missing_docs)]

mod config;
mod error;
mod log;
mod message;
mod progress;
mod quorum;
mod raft;
mod raw_node;
mod read_only;
mod storage;
mod types;

pub use config::Config;

/// The largest term or index the core accepts from a peer: far beyond any
/// real cluster (a new term every millisecond for 146,000 years) and far
/// enough below `u64::MAX` that no `+ 1` on a term or index can overflow.
/// [`RawNode::step`] refuses messages beyond it.
pub const MAX_TERM: u64 = 1 << 62;
pub use error::{ConfigError, Error, ProposeError, StepError, StorageError};
pub use message::{Message, MessageBody, ProposeOutcome};
pub use progress::{Progress, ProgressState};
pub use raw_node::{Early, RawNode, Ready, Status};
pub use storage::LogReader;
pub use types::{
    Entry, EntryPayload, HardState, Index, Lease, LogId, Membership, MembershipChange, NodeId,
    ReadId, ReadState, Role, SnapshotMeta, SoftState, Term,
};

#[cfg(any(test, feature = "fuzzing"))]
extern crate self as wasmraft_raft;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
#[path = "../tests/sim/storage.rs"]
pub mod mem_storage;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod tests;
