//! Histories from a real linearizable register must pass; the same history
//! with one read made stale must fail, on that read's key.

use std::collections::HashMap;

use wasmraft_lincheck::{CheckResult, KvInput, KvOutput, Operation, Outcome};

use crate::check;
use crate::generator::{Rng, Workload, generate, make_one_read_stale};

fn run(seeds: std::ops::Range<u64>, workload: &Workload) {
    let mut mutated = 0;
    for seed in seeds.clone() {
        let mut history = generate(seed, workload);
        let verdict = check(&history);
        assert!(verdict.is_ok(), "seed {seed}: {verdict}\n{history}");

        let mut rng = Rng::new(seed ^ 0xDEAD_BEEF);
        let Some(read) = make_one_read_stale(&mut history, &mut rng) else {
            continue;
        };
        mutated += 1;
        let key = history.operations()[read].input.key().to_owned();
        match check(&history) {
            CheckResult::Illegal {
                key: k,
                explanation,
            } => {
                assert_eq!(k, key, "seed {seed}: {explanation}");
                assert!(
                    explanation.contains(&format!("#{read} ")),
                    "seed {seed}: the stale read #{read} is named\n{explanation}"
                );
            }
            other => panic!("seed {seed}: stale read #{read} not caught: {other}\n{history}"),
        }
    }
    let seeds = seeds.end - seeds.start;
    assert!(
        mutated * 10 >= seeds * 9,
        "only {mutated} of {seeds} histories had a read to make stale"
    );
}

#[test]
fn small_histories_with_high_concurrency() {
    let workload = Workload {
        keys: 2,
        clients: 8,
        ops: 60,
        get_percent: 50,
        delete_percent: 5,
        unknown_percent: 10,
    };
    run(0..300, &workload);
}

#[test]
fn medium_histories_over_several_keys() {
    let workload = Workload {
        keys: 4,
        clients: 10,
        ops: 800,
        get_percent: 50,
        delete_percent: 5,
        unknown_percent: 4,
    };
    run(1000..1040, &workload);
}

#[test]
fn one_hot_key_with_many_lost_responses() {
    // Leader-kill-like: a fifth of the operations lose their outcome.
    let workload = Workload {
        keys: 1,
        clients: 10,
        ops: 400,
        get_percent: 60,
        delete_percent: 0,
        unknown_percent: 20,
    };
    run(2000..2020, &workload);
}

#[test]
fn generated_histories_have_real_concurrency_and_unknowns() {
    let workload = Workload {
        keys: 1,
        clients: 10,
        ops: 400,
        get_percent: 50,
        delete_percent: 0,
        unknown_percent: 10,
    };
    let history = generate(7, &workload);
    let ops = history.operations();
    let overlapping = (1..ops.len())
        .filter(|&i| {
            ops[i - 1]
                .return_time()
                .is_none_or(|ret| ret > ops[i].invoke)
        })
        .count();
    let unknown = ops.iter().filter(|op| op.is_unknown()).count();
    let unknown_puts = ops
        .iter()
        .filter(|op| op.is_unknown() && matches!(op.input, KvInput::Put { .. }))
        .count();
    assert!(
        overlapping > ops.len() / 2,
        "{overlapping} of {} overlap their predecessor",
        ops.len()
    );
    assert!(
        unknown > 10 && unknown_puts > 5,
        "{unknown} unknown, {unknown_puts} of them puts"
    );
}

/// An independent, exhaustive oracle for tiny histories: tries every order
/// that respects real time (an operation may go next if no other pending
/// known operation returned before it was invoked), with unknown operations
/// optional, against a plain map.
fn brute_force(ops: &[Operation<KvInput, KvOutput>]) -> bool {
    fn go(
        ops: &[Operation<KvInput, KvOutput>],
        done: &mut [bool],
        store: &mut HashMap<String, String>,
    ) -> bool {
        if (0..ops.len()).all(|i| done[i] || ops[i].is_unknown()) {
            return true;
        }
        for i in 0..ops.len() {
            let blocked = (0..ops.len())
                .any(|j| !done[j] && ops[j].return_time().is_some_and(|ret| ret < ops[i].invoke));
            if done[i] || blocked {
                continue;
            }
            let before = store.clone();
            let legal = match (&ops[i].input, ops[i].output()) {
                (KvInput::Get { key }, Some(KvOutput::Value(seen))) => {
                    store.get(key) == seen.as_ref()
                }
                (KvInput::Get { .. }, None) => true,
                (KvInput::Put { key, value }, _) => {
                    store.insert(key.clone(), value.clone());
                    true
                }
                (KvInput::Delete { key }, _) => {
                    store.remove(key);
                    true
                }
                _ => false,
            };
            done[i] = true;
            if legal && go(ops, done, store) {
                return true;
            }
            done[i] = false;
            *store = before;
        }
        false
    }
    go(ops, &mut vec![false; ops.len()], &mut HashMap::new())
}

#[test]
fn agrees_with_a_brute_force_oracle_on_tiny_histories() {
    let workload = Workload {
        keys: 1,
        clients: 4,
        ops: 7,
        get_percent: 45,
        delete_percent: 10,
        unknown_percent: 40,
    };
    let (mut legal, mut illegal) = (0, 0);
    for seed in 0..3000 {
        let mut history = generate(seed, &workload);
        // Corrupt some reads with a value that was written (or absent).
        let mut rng = Rng::new(seed);
        let written: Vec<Option<String>> = std::iter::once(None)
            .chain(
                history
                    .operations()
                    .iter()
                    .filter_map(|op| match &op.input {
                        KvInput::Put { value, .. } => Some(Some(value.clone())),
                        _ => None,
                    }),
            )
            .collect();
        for op in history.operations_mut() {
            if let (KvInput::Get { .. }, Outcome::Returned { output, .. }) =
                (&op.input, &mut op.outcome)
                && rng.percent(30)
            {
                *output =
                    KvOutput::Value(written[rng.below(written.len() as u64) as usize].clone());
            }
        }
        let expected = brute_force(history.operations());
        let verdict = check(&history);
        assert!(
            !matches!(verdict, CheckResult::Unknown { .. }),
            "seed {seed}: {verdict}"
        );
        assert_eq!(
            verdict.is_ok(),
            expected,
            "seed {seed}: {verdict}\n{history}"
        );
        if expected { legal += 1 } else { illegal += 1 }
    }
    assert!(
        legal > 300 && illegal > 300,
        "{legal} legal, {illegal} illegal: both verdicts exercised"
    );
}
