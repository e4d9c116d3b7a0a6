//! # wasmraft-lincheck: a linearizability checker for recorded histories
//!
//! Multi-process cluster tests run concurrent clients against a Wasmraft
//! cluster (put/get on the KV plugin) while killing, pausing and partitioning
//! nodes, record every operation with its invocation and response times, and
//! ask this crate whether the history is *linearizable* (Herlihy & Wing 1990):
//! whether each operation can be given a single point in time, inside its
//! interval, such that the operations in that order obey the sequential
//! specification. A stale read, a lost acknowledged write, or a read of a value
//! never written all make a history non-linearizable.
//!
//! ## Checking a history
//!
//! ```
//! use wasmraft_lincheck::{check, CheckOptions, CheckResult, KvHistory, KvInput, KvModel, KvOutput};
//!
//! let mut history = KvHistory::new();
//! //                client  input                      invoke  return  output
//! history.returned(1, KvInput::put("x", "1"), 0, 10, KvOutput::Ok);
//! history.returned(2, KvInput::put("x", "2"), 20, 30, KvOutput::Ok);
//! // A read that starts after "2" was acknowledged but returns "1": stale.
//! history.returned(3, KvInput::get("x"), 40, 50, KvOutput::value("1"));
//! // A write whose client timed out: it may or may not have happened.
//! history.unknown(4, KvInput::put("y", "7"), 5);
//! history.returned(4, KvInput::get("y"), 60, 70, KvOutput::value("7"));
//!
//! match check::<KvModel>(&history, &CheckOptions::default()) {
//!     CheckResult::Illegal { key, explanation } => {
//!         assert_eq!(key, "x"); // "y" is fine: the unknown put took effect
//!         println!("{explanation}\n{history}");
//!     }
//!     other => panic!("expected a stale read, got {other}"),
//! }
//! ```
//!
//! From async tests, record with a [`Recorder`] (see its docs) and check
//! [`Recorder::history`]. In tests, call [`CheckResult::assert_ok`]: it fails
//! on [`CheckResult::Unknown`] (a search limit reached) as well, so that a
//! history too hard to check is seen rather than passed.
//!
//! ## Histories
//!
//! An [`Operation`] has a [`ClientId`], an input, an invocation time and an
//! [`Outcome`]: either a response with its time, or [`Outcome::Unknown`] for
//! a request whose fate the client never learned (timeout, connection dropped
//! after sending). As in Jepsen and porcupine, an unknown operation has an
//! infinite return time: it may take effect at any point after its
//! invocation, or never. Requests that definitely failed (rejected before
//! reaching the log) are simply left out. Times are any `u64` ordering;
//! the recorder uses monotonic nanoseconds.
//!
//! ## The algorithm
//!
//! 1. **Partition** (P-compositionality; Herlihy & Wing 1990 §3.1 show
//!    linearizability is local, Horn & Kroening 2015 use it to split the
//!    search): operations are grouped by [`Model::partition`] (the key, for
//!    [`KvModel`]) and each group is checked alone, in parallel. One 20,000-op
//!    history becomes, say, ten 2,000-op searches.
//! 2. **Prune**: unknown-outcome operations that cannot matter (an unknown
//!    read; a write nobody read back, see [`KvModel`]) are dropped
//!    ([`Model::can_drop_unknown`]). Each one left may be linearized anywhere
//!    after its invocation, which multiplies the search.
//! 3. **Search** (Wing & Gong 1993, "Testing and verifying concurrent
//!    objects", JPDC 17(1); with the memoisation of Lowe 2017, "Testing for
//!    linearizability", CCPE 29(4); in the shape of porcupine,
//!    `github.com/anishathalye/porcupine`, `checker.go`): the partition's
//!    call and return events form a doubly linked list sorted by time.
//!    Depth-first, the search linearizes a *minimal* pending operation (its
//!    call comes before every return still in the list) whose response the
//!    [`Model::step`] accepts from the current state, removes its two events,
//!    and goes on; when the walk meets a return, that operation should have
//!    been linearized already, so it backtracks to the last choice. A cache of
//!    (set of linearized operations as a bitset, model state) skips any
//!    configuration seen before, which makes typical histories near-linear.
//!    The search succeeds once every operation with a known outcome is
//!    linearized; unknown ones left over simply never took effect.
//! 4. **Explain**: a failed search reports the longest linearizable prefix it
//!    found, the state after it, the operation whose return ended it, and why
//!    each pending operation could not go next (porcupine reports the longest
//!    partial linearizations for its visualisation likewise).
//!
//! Deciding linearizability is NP-complete (Gibbons & Korach 1997), so the
//! search is bounded ([`CheckOptions`]): steps and cache memory per
//! partition, wall-clock time overall; reaching a bound yields
//! [`CheckResult::Unknown`]. Knossos (Jepsen) implements the same
//! Wing & Gong / Lowe search; etcd's robustness tests use porcupine.
//!
//! ## Models
//!
//! A [`Model`] is a deterministic sequential specification over hashable
//! states. [`KvModel`] is the one the cluster tests use: one register per key
//! with etcd semantics (`Put` -> ok, `Get` -> the value or absent, `Delete`),
//! plus `Append`.

#![deny(missing_docs)]

mod bitset;
mod checker;
mod history;
mod kv;
mod model;
mod recorder;
mod search;

pub use checker::{CheckOptions, CheckReport, CheckResult, check, check_report};
pub use history::{ClientId, History, Operation, Outcome};
pub use kv::{KvHistory, KvInput, KvModel, KvOutput, KvRecorder};
pub use model::Model;
pub use recorder::{OpHandle, Recorder};
