//! The entry points: partition a history by key, search each partition
//! (in parallel), and combine the verdicts.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::history::{History, Operation};
use crate::model::Model;
use crate::search::{Indexed, Limits, SearchResult, Verdict, search};

/// Bounds on the search. Checking linearizability is NP-complete (Gibbons &
/// Korach 1997), so a search that hits a bound answers
/// [`CheckResult::Unknown`] instead of running for ever.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckOptions {
    /// Search steps (events visited) allowed per partition. Default 10 million
    /// (a few seconds).
    pub max_steps: u64,
    /// Estimated memory for one partition's cache of explored (linearized set,
    /// state) pairs; each entry holds a bitset of one bit per operation of the
    /// partition. Default 256 MiB. Partitions run in parallel, each with its own.
    pub max_cache_bytes: usize,
    /// Wall-clock limit for the whole check; `None` for none. Default 60 s.
    pub timeout: Option<Duration>,
    /// Partitions checked in parallel; 1 checks them in key order on the
    /// calling thread. Default: the available parallelism.
    pub threads: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            max_steps: 10_000_000,
            max_cache_bytes: 256 << 20,
            timeout: Some(Duration::from_secs(60)),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

/// The verdict on a history.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "an illegal or unknown verdict must fail the test"]
pub enum CheckResult<K> {
    /// The history is linearizable.
    Ok,
    /// The operations on `key` have no linearization.
    Illegal {
        /// The partition that failed (the smallest such key found).
        key: K,
        /// The longest linearizable prefix found and the operations that could
        /// not be linearized after it, for debugging.
        explanation: String,
    },
    /// A limit was reached before a verdict; treat it as a failure (raise the
    /// limits or shorten the history), never as a pass.
    Unknown {
        /// The partitions left undecided, in key order.
        keys: Vec<K>,
        /// Which limit.
        reason: String,
    },
}

impl<K: fmt::Debug> CheckResult<K> {
    /// Whether the history is linearizable.
    pub fn is_ok(&self) -> bool {
        matches!(self, CheckResult::Ok)
    }

    /// Whether the history is proven non-linearizable.
    pub fn is_illegal(&self) -> bool {
        matches!(self, CheckResult::Illegal { .. })
    }

    /// Panics with the explanation unless the verdict is [`CheckResult::Ok`]:
    /// an [`Unknown`](CheckResult::Unknown) fails too, so that it is seen.
    #[track_caller]
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            panic!("{self}");
        }
    }
}

/// `linearizable`, or the key and explanation, or the undecided keys.
impl<K: fmt::Debug> fmt::Display for CheckResult<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckResult::Ok => f.write_str("linearizable"),
            CheckResult::Illegal { key, explanation } => {
                write!(f, "not linearizable on key {key:?}: {explanation}")
            }
            CheckResult::Unknown { keys, reason } => {
                write!(
                    f,
                    "linearizability unknown ({reason}) on {} key(s): {keys:?}",
                    keys.len()
                )
            }
        }
    }
}

/// A verdict with statistics, from [`check_report`].
#[derive(Clone, Debug)]
#[must_use = "an illegal or unknown verdict must fail the test"]
pub struct CheckReport<K> {
    /// The verdict.
    pub result: CheckResult<K>,
    /// Number of partitions (keys).
    pub partitions: usize,
    /// Operations searched (after dropping unknown ones that cannot matter).
    pub operations: usize,
    /// Unknown-outcome operations dropped by [`Model::can_drop_unknown`].
    pub dropped_unknown: usize,
    /// Search steps over all partitions.
    pub steps: u64,
    /// Cache entries over all partitions.
    pub cache_entries: usize,
    /// Wall-clock time of the check.
    pub elapsed: Duration,
}

/// Checks that `history` is linearizable with respect to `M`.
///
/// Panics if an operation returns before it is invoked (a recording bug).
pub fn check<M: Model>(
    history: &History<M::Input, M::Output>,
    options: &CheckOptions,
) -> CheckResult<M::Key> {
    check_report::<M>(history, options).result
}

/// [`check`], with statistics.
pub fn check_report<M: Model>(
    history: &History<M::Input, M::Output>,
    options: &CheckOptions,
) -> CheckReport<M::Key> {
    let start = Instant::now();
    let (partitions, dropped_unknown) = partition::<M>(history.operations());
    let operations = partitions.iter().map(|(_, ops)| ops.len()).sum();
    let cancel = AtomicBool::new(false);
    let limits = Limits {
        max_steps: options.max_steps,
        max_cache_bytes: options.max_cache_bytes,
        deadline: options.timeout.map(|t| start + t),
        cancel: &cancel,
    };
    let results = run_all::<M>(&partitions, &limits, options.threads);

    let steps = results.iter().map(|r| r.steps).sum();
    let cache_entries = results.iter().map(|r| r.cache_entries).sum();
    let mut undecided = Vec::new();
    let mut reason = None;
    let mut result = CheckResult::Ok;
    // Results are in key order: the first illegal key wins.
    for ((key, _), searched) in partitions.iter().zip(results) {
        match searched.verdict {
            Verdict::Linearizable => {}
            Verdict::Illegal(explanation) => {
                result = CheckResult::Illegal {
                    key: key.clone(),
                    explanation,
                };
                break;
            }
            Verdict::Aborted(why) => {
                undecided.push(key.clone());
                reason.get_or_insert(why);
            }
        }
    }
    if result.is_ok() && !undecided.is_empty() {
        result = CheckResult::Unknown {
            keys: undecided,
            reason: reason.unwrap_or_default(),
        };
    }
    CheckReport {
        result,
        partitions: partitions.len(),
        operations,
        dropped_unknown,
        steps,
        cache_entries,
        elapsed: start.elapsed(),
    }
}

type Partition<'h, M> = (<M as Model>::Key, Vec<Indexed<'h, M>>);

/// Groups operations by key (porcupine's `Partition`), in key order, and
/// drops the unknown ones the model says cannot matter.
fn partition<M: Model>(ops: &[Operation<M::Input, M::Output>]) -> (Vec<Partition<'_, M>>, usize) {
    let mut by_key: BTreeMap<M::Key, Vec<Indexed<'_, M>>> = BTreeMap::new();
    for (index, op) in ops.iter().enumerate() {
        by_key
            .entry(M::partition(&op.input))
            .or_default()
            .push((index, op));
    }
    let mut dropped = 0;
    let partitions = by_key
        .into_iter()
        .map(|(key, part)| {
            let all: Vec<_> = part.iter().map(|(_, op)| *op).collect();
            let before = part.len();
            let kept: Vec<_> = part
                .into_iter()
                .filter(|(_, op)| !(op.is_unknown() && M::can_drop_unknown(op, &all)))
                .collect();
            dropped += before - kept.len();
            (key, kept)
        })
        .collect();
    (partitions, dropped)
}

/// Searches every partition on up to `threads` threads, largest first for
/// balance; the first illegal one cancels the rest. Results in input order.
fn run_all<M: Model>(
    partitions: &[Partition<'_, M>],
    limits: &Limits<'_>,
    threads: usize,
) -> Vec<SearchResult> {
    let run = |i: usize| {
        let searched = search::<M>(&partitions[i].1, limits);
        if matches!(searched.verdict, Verdict::Illegal(_)) {
            limits.cancel.store(true, Ordering::Relaxed);
        }
        searched
    };
    let threads = threads.clamp(1, partitions.len().max(1));
    if threads == 1 {
        // Sequential and deterministic: stop at the first illegal key.
        let mut results = Vec::with_capacity(partitions.len());
        for i in 0..partitions.len() {
            let searched = if limits.cancel.load(Ordering::Relaxed) {
                SearchResult {
                    verdict: Verdict::Aborted("cancelled".to_owned()),
                    steps: 0,
                    cache_entries: 0,
                }
            } else {
                run(i)
            };
            results.push(searched);
        }
        return results;
    }
    let mut order: Vec<usize> = (0..partitions.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(partitions[i].1.len()));
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<SearchResult>> = (0..partitions.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let slot = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = order.get(slot) else { break };
                        done.push((i, run(i)));
                    }
                    done
                })
            })
            .collect();
        for worker in workers {
            for (i, searched) in worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            {
                results[i] = Some(searched);
            }
        }
    });
    results
        .into_iter()
        .map(|r| r.expect("every partition searched"))
        .collect()
}
