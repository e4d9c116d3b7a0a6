//! Hand-written histories with known verdicts. Times are small integers;
//! `[a, b]` in comments is an operation's invoke..return interval.

use std::fmt;

use wasmraft_lincheck::{
    CheckOptions, CheckResult, History, KvHistory, KvInput, KvModel, KvOutput, Model,
};

use crate::{assert_illegal, check, get, options, put};

#[test]
fn empty_and_sequential_histories_are_linearizable() {
    check(&KvHistory::new()).assert_ok();

    let mut h = KvHistory::new();
    get(&mut h, 1, "x", None, 0, 1);
    put(&mut h, 1, "x", "1", 2, 3);
    get(&mut h, 2, "x", Some("1"), 4, 5);
    put(&mut h, 1, "x", "2", 6, 7);
    get(&mut h, 2, "x", Some("2"), 8, 9);
    h.returned(3, KvInput::delete("x"), 10, 11, KvOutput::Ok);
    get(&mut h, 2, "x", None, 12, 13);
    check(&h).assert_ok();
}

#[test]
fn concurrent_put_and_get_are_legal_in_both_orders() {
    // put [0, 10] overlaps get [5, 15]: the get may go before or after it.
    for seen in [None, Some("1")] {
        let mut h = KvHistory::new();
        put(&mut h, 1, "x", "1", 0, 10);
        get(&mut h, 2, "x", seen, 5, 15);
        check(&h).assert_ok();
    }
    // Two overlapping puts: a later read may see either, and then keeps seeing it.
    for (first, second) in [("1", "2"), ("2", "1")] {
        let mut h = KvHistory::new();
        put(&mut h, 1, "x", first, 0, 10);
        put(&mut h, 2, "x", second, 5, 15);
        get(&mut h, 3, "x", Some(second), 20, 30);
        get(&mut h, 3, "x", Some(second), 40, 50);
        check(&h).assert_ok();
    }
}

#[test]
fn intervals_that_touch_count_as_concurrent() {
    // The get is invoked exactly when the put returns: either order is fine.
    let mut h = KvHistory::new();
    put(&mut h, 1, "x", "1", 0, 10);
    get(&mut h, 2, "x", None, 10, 20);
    check(&h).assert_ok();
}

/// The "deliberately stale read path must fail" case: a read that starts
/// after a write was acknowledged must not return the older value.
#[test]
fn stale_read_after_a_completed_write_is_illegal() {
    let mut h = KvHistory::new();
    put(&mut h, 1, "x", "1", 0, 10);
    put(&mut h, 1, "x", "2", 20, 30);
    let stale = get(&mut h, 2, "x", Some("1"), 40, 50);
    let explanation = assert_illegal(&h, "x");
    // The explanation names the stale read, the state it contradicts and why.
    assert!(
        explanation.contains(&format!("#{stale} c2 [40..50] get(\"x\") -> \"1\"")),
        "{explanation}"
    );
    assert!(
        explanation.contains("from state Some(\"2\")"),
        "{explanation}"
    );
    assert!(
        explanation.contains("impossible in this state"),
        "{explanation}"
    );
}

#[test]
fn reads_going_back_in_time_are_illegal() {
    // put "2" [20, 100] is concurrent with both reads; once one read saw "2",
    // a later read cannot see "1" again.
    let build = |a: &str, b: &str| {
        let mut h = KvHistory::new();
        put(&mut h, 1, "x", "1", 0, 10);
        put(&mut h, 1, "x", "2", 20, 100);
        get(&mut h, 2, "x", Some(a), 30, 40);
        get(&mut h, 3, "x", Some(b), 50, 60);
        h
    };
    check(&build("1", "2")).assert_ok();
    check(&build("1", "1")).assert_ok();
    check(&build("2", "2")).assert_ok();
    assert_illegal(&build("2", "1"), "x");
}

#[test]
fn an_unknown_write_may_take_effect_later_or_never() {
    let build = |seen: &[&str]| {
        let mut h = KvHistory::new();
        put(&mut h, 1, "x", "1", 0, 10);
        h.unknown(1, KvInput::put("x", "2"), 20); // timed out
        for (i, value) in seen.iter().enumerate() {
            let t = 100 * (i as u64 + 1);
            get(&mut h, 2, "x", Some(value), t, t + 10);
        }
        h
    };
    check(&build(&["2"])).assert_ok(); // observed: it took effect
    check(&build(&["1", "1"])).assert_ok(); // never observed: legal too
    check(&build(&["1", "2", "2"])).assert_ok(); // took effect long after the timeout
    // But it takes effect at most once: seen, then gone, is illegal.
    assert_illegal(&build(&["2", "1"]), "x");
}

#[test]
fn an_unknown_write_cannot_take_effect_before_its_invocation() {
    let mut h = KvHistory::new();
    get(&mut h, 2, "x", Some("2"), 0, 10);
    h.unknown(1, KvInput::put("x", "2"), 20);
    assert_illegal(&h, "x");
}

#[test]
fn unknown_reads_and_deletes() {
    let mut h = KvHistory::new();
    put(&mut h, 1, "x", "1", 0, 10);
    h.unknown(2, KvInput::get("x"), 5);
    h.unknown(3, KvInput::delete("x"), 20);
    get(&mut h, 4, "x", None, 30, 40); // the delete happened
    check(&h).assert_ok();
    get(&mut h, 4, "x", Some("1"), 50, 60); // ... and cannot be undone
    assert_illegal(&h, "x");
}

#[test]
fn a_read_of_a_value_never_written_is_illegal() {
    let mut h = KvHistory::new();
    put(&mut h, 1, "x", "1", 0, 10);
    get(&mut h, 2, "x", Some("garbage"), 5, 15);
    let explanation = assert_illegal(&h, "x");
    assert!(
        explanation.contains("longest linearizable prefix found has"),
        "{explanation}"
    );
}

#[test]
fn a_response_of_the_wrong_kind_is_illegal() {
    let mut h = KvHistory::new();
    h.returned(1, KvInput::get("x"), 0, 10, KvOutput::Ok);
    assert_illegal(&h, "x");
}

#[test]
fn appends_compose_in_some_order() {
    let mut h = KvHistory::new();
    h.returned(1, KvInput::append("l", "a"), 0, 10, KvOutput::Ok);
    h.returned(2, KvInput::append("l", "b"), 5, 15, KvOutput::Ok);
    h.unknown(3, KvInput::append("l", "c"), 6);
    get(&mut h, 4, "l", Some("ba"), 20, 30);
    get(&mut h, 4, "l", Some("bac"), 40, 50);
    check(&h).assert_ok();
    get(&mut h, 4, "l", Some("ba"), 60, 70);
    assert_illegal(&h, "l");
}

#[test]
fn keys_are_checked_independently_and_the_smallest_illegal_key_is_reported() {
    let mut h = KvHistory::new();
    for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
        let t = i as u64;
        put(&mut h, 1, key, "1", t, t + 10);
        put(&mut h, 1, key, "2", t + 20, t + 30);
        // "b" and "d" read stale; "a" and "c" are fine.
        let seen = if i % 2 == 1 { "1" } else { "2" };
        get(&mut h, 2, key, Some(seen), t + 40, t + 50);
    }
    assert_illegal(&h, "b");
    // Same verdict in parallel: results are combined in key order, and "d"
    // either fails too or is cancelled.
    let parallel = CheckOptions {
        threads: 4,
        ..options()
    };
    match wasmraft_lincheck::check::<KvModel>(&h, &parallel) {
        CheckResult::Illegal { key, .. } => assert_eq!(key, "b"),
        other => panic!("{other}"),
    }
}

/// A search limit yields `Unknown`, and tests fail on it.
#[test]
fn reaching_a_limit_is_unknown_and_fails_assert_ok() {
    let mut h = KvHistory::new();
    // 12 concurrent puts and an impossible read: the search must try every
    // subset of the puts (times each last value) before it can say illegal.
    for i in 0..12 {
        put(&mut h, i, "x", &i.to_string(), 0, 100);
    }
    get(&mut h, 99, "x", Some("never"), 200, 300);
    let tight = CheckOptions {
        max_steps: 50,
        ..options()
    };
    let result = wasmraft_lincheck::check::<KvModel>(&h, &tight);
    match &result {
        CheckResult::Unknown { keys, reason } => {
            assert_eq!(keys, &["x".to_owned()]);
            assert!(reason.contains("step limit of 50"), "{reason}");
        }
        other => panic!("expected unknown, got {other}"),
    }
    let panic = std::panic::catch_unwind(|| result.assert_ok())
        .expect_err("assert_ok must fail on Unknown");
    let message = panic
        .downcast_ref::<String>()
        .expect("a formatted panic message");
    assert!(
        message.starts_with("linearizability unknown (step limit of 50 reached)"),
        "{message}"
    );
    // With room to search, the verdict is the real one.
    assert_illegal(&h, "x");
}

#[test]
#[should_panic(expected = "operation #1 returns at 5, before its invocation at 10")]
fn a_return_before_the_invocation_is_a_recording_bug() {
    let mut h = KvHistory::new();
    put(&mut h, 1, "x", "1", 0, 1);
    put(&mut h, 1, "x", "2", 10, 5);
    let _ = check(&h);
}

/// The model is generic: an unpartitioned counter with increments and reads.
#[derive(Debug)]
struct Counter;

#[derive(Debug)]
enum CounterOp {
    Add(u64),
    Read,
}

impl fmt::Display for CounterOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CounterOp::Add(n) => write!(f, "add({n})"),
            CounterOp::Read => f.write_str("read"),
        }
    }
}

impl Model for Counter {
    type Key = ();
    type State = u64;
    type Input = CounterOp;
    type Output = u64; // reads return the count; adds return 0

    fn partition(_: &CounterOp) {}

    fn init() -> u64 {
        0
    }

    fn step(state: &u64, input: &CounterOp, output: Option<&u64>) -> Option<u64> {
        match input {
            CounterOp::Add(n) => Some(state + n),
            CounterOp::Read => output.is_none_or(|seen| seen == state).then_some(*state),
        }
    }
}

#[test]
fn a_custom_model_checks_too() {
    let mut h: History<CounterOp, u64> = History::new();
    h.returned(1, CounterOp::Add(1), 0, 10, 0);
    h.returned(2, CounterOp::Add(2), 0, 10, 0);
    h.unknown(3, CounterOp::Add(4), 0);
    h.returned(4, CounterOp::Read, 5, 6, 2); // only the add(2) so far
    h.returned(4, CounterOp::Read, 20, 30, 7); // all three
    wasmraft_lincheck::check::<Counter>(&h, &options()).assert_ok();
    h.returned(4, CounterOp::Read, 40, 50, 3); // the unknown add cannot be undone
    assert!(wasmraft_lincheck::check::<Counter>(&h, &options()).is_illegal());
}

/// Compare-and-swap, as an etcd Txn does it: two racing swaps from the same
/// value cannot both succeed, and a failed swap needs a state that differs.
#[test]
fn compare_and_swap_succeeds_only_on_the_expected_value() {
    let swap = |h: &mut KvHistory, client: u64, expected: Option<&str>, value: &str, at: (u64, u64), swapped: bool| {
        h.returned(client, KvInput::cas("x", expected, value), at.0, at.1, KvOutput::Swapped(swapped));
    };
    // From absent, one of two concurrent swaps wins; a read after sees it.
    let mut h = KvHistory::new();
    swap(&mut h, 1, None, "a", (0, 10), true);
    swap(&mut h, 2, None, "b", (5, 15), false);
    get(&mut h, 3, "x", Some("a"), 20, 30);
    check(&h).assert_ok();
    // Both winning is illegal.
    let mut h = KvHistory::new();
    swap(&mut h, 1, None, "a", (0, 10), true);
    swap(&mut h, 2, None, "b", (5, 15), true);
    assert_illegal(&h, "x");
    // A swap from "1" that fails after "1" was written, with nothing else
    // writing, is illegal.
    let mut h = KvHistory::new();
    put(&mut h, 1, "x", "1", 0, 10);
    swap(&mut h, 2, Some("1"), "2", (20, 30), false);
    assert_illegal(&h, "x");
    // An unknown swap may have happened: a read may see it, or not.
    for seen in [Some("2"), Some("1")] {
        let mut h = KvHistory::new();
        put(&mut h, 1, "x", "1", 0, 10);
        h.unknown(2, KvInput::cas("x", Some("1"), "2"), 20);
        get(&mut h, 3, "x", seen, 40, 50);
        check(&h).assert_ok();
    }
}
