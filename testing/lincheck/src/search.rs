//! The search over one partition: Wing & Gong's depth-first search over
//! linearization points with Lowe's cache, in porcupine's shape
//! (`checker.go`, `checkSingle`).
//!
//! The history becomes a doubly linked list of call and return events sorted
//! by time (calls before returns at equal times, so touching intervals count
//! as concurrent). Walking from the head, every call met before the first
//! return belongs to a *minimal* operation: one that may take effect next.
//! Linearizing one removes ("lifts") its call and return from the list and
//! restarts the walk; meeting a return means its operation had to take effect
//! before that point and none that could did, so the search backtracks: it
//! pops the last linearized operation, puts its events back ("unlifts", the
//! dancing-links trick, Knuth 2000), and tries the next call after it. A
//! (linearized set, state) pair already explored is never explored again.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::bitset::Bitset;
use crate::history::Operation;
use crate::model::Model;

/// An operation of a partition with its index in the whole history (used in
/// explanations).
pub(crate) type Indexed<'h, M> = (
    usize,
    &'h Operation<<M as Model>::Input, <M as Model>::Output>,
);

/// How far one partition's search may go.
pub(crate) struct Limits<'a> {
    pub(crate) max_steps: u64,
    pub(crate) max_cache_bytes: usize,
    pub(crate) deadline: Option<Instant>,
    /// Set when another partition proved the history illegal.
    pub(crate) cancel: &'a AtomicBool,
}

/// The verdict on one partition.
pub(crate) enum Verdict {
    Linearizable,
    Illegal(String),
    /// A limit was reached (the reason says which) or the search was cancelled.
    Aborted(String),
}

pub(crate) struct SearchResult {
    pub(crate) verdict: Verdict,
    pub(crate) steps: u64,
    pub(crate) cache_entries: usize,
}

/// How many of the longest prefix's last operations an explanation shows.
const EXPLAIN_TAIL: usize = 20;

/// Checks one partition. `ops[i].0` is the operation's index in the whole
/// history, used in explanations.
pub(crate) fn search<M: Model>(ops: &[Indexed<'_, M>], limits: &Limits<'_>) -> SearchResult {
    let mut list = EventList::new(ops);
    let n = ops.len();
    let mut known_left = ops.iter().filter(|(_, op)| !op.is_unknown()).count();
    let mut state = M::init();
    let mut linearized = Bitset::new(n);
    let mut cache: HashSet<(Bitset, M::State)> = HashSet::new();
    let entry_bytes = linearized.heap_bytes() + size_of::<(Bitset, M::State)>() + 16;
    // The linearization so far: (call node, state before it).
    let mut calls: Vec<(usize, M::State)> = Vec::new();
    let mut deepest: Option<DeadEnd> = None;
    let mut entry = list.next[list.head()];
    let mut steps: u64 = 0;

    let abort = |reason: String, steps: u64, cache_entries: usize| SearchResult {
        verdict: Verdict::Aborted(reason),
        steps,
        cache_entries,
    };

    // Unknown operations need not be linearized: they may never have taken
    // effect. So the search succeeds once every known operation is placed.
    while known_left > 0 {
        steps += 1;
        if steps > limits.max_steps {
            return abort(
                format!("step limit of {} reached", limits.max_steps),
                steps - 1,
                cache.len(),
            );
        }
        if steps.is_multiple_of(1024) {
            if limits.cancel.load(Ordering::Relaxed) {
                return abort("cancelled".to_owned(), steps, cache.len());
            }
            if limits.deadline.is_some_and(|d| Instant::now() >= d) {
                return abort("time limit reached".to_owned(), steps, cache.len());
            }
            if cache.len() * entry_bytes > limits.max_cache_bytes {
                return abort(
                    format!(
                        "cache memory limit of {} bytes reached",
                        limits.max_cache_bytes
                    ),
                    steps,
                    cache.len(),
                );
            }
        }
        debug_assert_ne!(
            entry,
            list.tail(),
            "a known operation's return is always ahead"
        );

        let op_id = list.op[entry];
        if list.is_call[entry] {
            let op = ops[op_id].1;
            if let Some(next_state) = M::step(&state, &op.input, op.output()) {
                linearized.set(op_id);
                if cache.insert((linearized.clone(), next_state.clone())) {
                    calls.push((entry, std::mem::replace(&mut state, next_state)));
                    if !op.is_unknown() {
                        known_left -= 1;
                    }
                    list.lift(entry);
                    entry = list.next[list.head()];
                    continue;
                }
                linearized.clear(op_id);
            }
            entry = list.next[entry];
        } else {
            // A return: its operation had to be linearized by now. Remember
            // the deepest such dead end for the explanation, then backtrack.
            if deepest.as_ref().is_none_or(|d| calls.len() > d.order.len()) {
                deepest = Some(DeadEnd::capture(&list, &calls, entry));
            }
            let Some((call, previous)) = calls.pop() else {
                let dead_end = deepest.expect("captured above");
                return SearchResult {
                    verdict: Verdict::Illegal(dead_end.explain::<M>(ops)),
                    steps,
                    cache_entries: cache.len(),
                };
            };
            state = previous;
            let undone = list.op[call];
            linearized.clear(undone);
            if !ops[undone].1.is_unknown() {
                known_left += 1;
            }
            list.unlift(call);
            entry = list.next[call];
        }
    }
    SearchResult {
        verdict: Verdict::Linearizable,
        steps,
        cache_entries: cache.len(),
    }
}

/// Call and return events as a doubly linked list over indices, with head and
/// tail sentinels (porcupine uses pointers and `nil`).
struct EventList {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Operation (partition-local index) of each event node.
    op: Vec<usize>,
    is_call: Vec<bool>,
    /// Return node of each operation.
    ret_node: Vec<usize>,
}

impl EventList {
    fn new<I, O>(ops: &[(usize, &Operation<I, O>)]) -> Self {
        // (time, 0 = call / 1 = return, op): calls first on ties, so operations
        // whose intervals touch may be ordered either way (porcupine's `byTime`).
        let mut events: Vec<(u64, u8, usize)> = Vec::with_capacity(2 * ops.len());
        for (i, (index, op)) in ops.iter().enumerate() {
            let ret = op.return_time().unwrap_or(u64::MAX);
            assert!(
                ret >= op.invoke,
                "operation #{index} returns at {ret}, before its invocation at {}",
                op.invoke
            );
            events.push((op.invoke, 0, i));
            events.push((ret, 1, i));
        }
        events.sort_unstable();
        let nodes = events.len();
        let (head, tail) = (nodes, nodes + 1);
        let mut list = EventList {
            next: vec![usize::MAX; nodes + 2],
            prev: vec![usize::MAX; nodes + 2],
            op: events.iter().map(|e| e.2).collect(),
            is_call: events.iter().map(|e| e.1 == 0).collect(),
            ret_node: vec![usize::MAX; ops.len()],
        };
        // head, 0, 1, .., nodes - 1, tail
        let order: Vec<usize> = std::iter::once(head)
            .chain(0..nodes)
            .chain(std::iter::once(tail))
            .collect();
        for pair in order.windows(2) {
            list.next[pair[0]] = pair[1];
            list.prev[pair[1]] = pair[0];
        }
        for (k, e) in events.iter().enumerate() {
            if e.1 == 1 {
                list.ret_node[e.2] = k;
            }
        }
        list
    }

    fn head(&self) -> usize {
        self.next.len() - 2
    }

    fn tail(&self) -> usize {
        self.next.len() - 1
    }

    fn unlink(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    /// Relinks `node` where it was; valid in LIFO order of `unlink`s.
    fn relink(&mut self, node: usize) {
        let (p, n) = (self.prev[node], self.next[node]);
        self.next[p] = node;
        self.prev[n] = node;
    }

    /// Removes a call and its return.
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.ret_node[self.op[call]]);
    }

    /// Undoes the matching [`lift`](Self::lift).
    fn unlift(&mut self, call: usize) {
        self.relink(self.ret_node[self.op[call]]);
        self.relink(call);
    }
}

/// The deepest point the search reached: a linearizable prefix after which a
/// return came before any pending operation could be linearized.
struct DeadEnd {
    /// Partition-local operations in linearization order.
    order: Vec<usize>,
    /// The operations that could have been linearized next (calls before the
    /// blocking return).
    candidates: Vec<usize>,
    /// The operation whose return ended the prefix.
    blocker: usize,
}

impl DeadEnd {
    fn capture<S>(list: &EventList, calls: &[(usize, S)], ret: usize) -> Self {
        let mut candidates = Vec::new();
        let mut node = list.next[list.head()];
        while node != ret {
            candidates.push(list.op[node]);
            node = list.next[node];
        }
        DeadEnd {
            order: calls.iter().map(|(call, _)| list.op[*call]).collect(),
            candidates,
            blocker: list.op[ret],
        }
    }

    /// Replays the prefix through the model (it is deterministic) to show the
    /// states, then says why each candidate could not go next.
    fn explain<M: Model>(&self, ops: &[Indexed<'_, M>]) -> String {
        let mut out = String::new();
        let mut state = M::init();
        let shown_from = self.order.len().saturating_sub(EXPLAIN_TAIL);
        let _ = writeln!(
            out,
            "no linearization of these {} exists; the longest linearizable prefix found has {}{}",
            plural(ops.len(), "operation"),
            plural(self.order.len(), "operation"),
            if shown_from > 0 {
                format!(" (the last {EXPLAIN_TAIL} shown, in linearization order)")
            } else {
                String::new()
            },
        );
        if self.order.is_empty() {
            let _ = writeln!(out, "  (none) => {}", M::describe_state(&state));
        }
        for (position, &i) in self.order.iter().enumerate() {
            let (index, op) = ops[i];
            state = M::step(&state, &op.input, op.output())
                .expect("replaying a prefix the search accepted");
            if position >= shown_from {
                let _ = writeln!(out, "  #{index} {op} => {}", M::describe_state(&state));
            }
        }
        let (blocker_index, blocker) = ops[self.blocker];
        let _ = writeln!(
            out,
            "then #{blocker_index} returned at {}, but from state {} no pending operation can take effect before that:",
            blocker
                .return_time()
                .map_or_else(|| "∞".to_owned(), |t| t.to_string()),
            M::describe_state(&state),
        );
        for &i in &self.candidates {
            let (index, op) = ops[i];
            let why = match M::step(&state, &op.input, op.output()) {
                None => "impossible in this state".to_owned(),
                Some(next) => format!(
                    "possible (=> {}), but no linearization continues from there",
                    M::describe_state(&next)
                ),
            };
            let _ = writeln!(out, "  #{index} {op}: {why}");
        }
        out
    }
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::EventList;
    use crate::history::Operation;

    fn walk(list: &EventList) -> Vec<(usize, bool)> {
        let mut out = Vec::new();
        let mut node = list.next[list.head()];
        while node != list.tail() {
            out.push((list.op[node], list.is_call[node]));
            assert_eq!(list.next[list.prev[node]], node, "links agree");
            node = list.next[node];
        }
        out
    }

    #[test]
    fn events_sort_calls_first_and_lift_unlift_restore() {
        let ops: Vec<Operation<(), ()>> = vec![
            Operation::returned(0, (), 0, 10, ()),
            Operation::returned(1, (), 10, 20, ()), // touches #0: concurrent
            Operation::unknown(2, (), 5),
        ];
        let refs: Vec<_> = ops.iter().enumerate().collect();
        let mut list = EventList::new(&refs);
        let all = vec![
            (0, true),
            (2, true),
            (1, true),
            (0, false),
            (1, false),
            (2, false),
        ];
        assert_eq!(walk(&list), all);
        let call_of_2 = list.next[list.next[list.head()]];
        list.lift(call_of_2);
        list.lift(list.next[list.head()]);
        assert_eq!(walk(&list), vec![(1, true), (1, false)]);
        list.unlift(0);
        list.unlift(call_of_2);
        assert_eq!(walk(&list), all);
    }

    #[test]
    fn empty_list() {
        let list = EventList::new::<(), ()>(&[]);
        assert_eq!(list.next[list.head()], list.tail());
        assert!(walk(&list).is_empty());
    }
}
