//! The shape of a cluster test's history: 10 keys x 2,000 operations from 10
//! concurrent clients, some outcomes lost. No timing assertion: it must
//! complete (within the default limits) and the times are printed
//! (`cargo test -p wasmraft-lincheck -- --nocapture t30`).

use std::time::Instant;

use wasmraft_lincheck::{CheckOptions, CheckReport, CheckResult, KvModel, check_report};

use crate::generator::{Rng, Workload, generate, make_one_read_stale};

const WORKLOAD: Workload = Workload {
    keys: 10,
    clients: 10,
    ops: 20_000,
    get_percent: 50,
    delete_percent: 2,
    unknown_percent: 2,
};

fn report(label: &str, report: &CheckReport<String>) {
    eprintln!(
        "lincheck perf [{label}]: {:?} for {} partitions, {} operations searched ({} unknown dropped), {} steps, {} cache entries: {}",
        report.elapsed,
        report.partitions,
        report.operations,
        report.dropped_unknown,
        report.steps,
        report.cache_entries,
        match &report.result {
            CheckResult::Ok => "linearizable".to_owned(),
            CheckResult::Illegal { key, .. } => format!("illegal on {key:?}"),
            CheckResult::Unknown { reason, .. } => format!("unknown: {reason}"),
        },
    );
}

#[test]
fn twenty_thousand_operations_over_ten_keys() {
    let started = Instant::now();
    let mut history = generate(42, &WORKLOAD);
    assert_eq!(history.len(), 20_000);
    eprintln!(
        "lincheck perf: generated {} operations in {:?}",
        history.len(),
        started.elapsed()
    );

    for (label, threads) in [
        ("parallel", CheckOptions::default().threads),
        ("1 thread", 1),
    ] {
        let options = CheckOptions {
            threads,
            ..CheckOptions::default()
        };
        let checked = check_report::<KvModel>(&history, &options);
        report(label, &checked);
        checked.result.assert_ok();
        assert_eq!(checked.partitions, 10);
    }

    let read = make_one_read_stale(&mut history, &mut Rng::new(42)).expect("a read to make stale");
    let options = CheckOptions {
        threads: 1,
        ..CheckOptions::default()
    };
    let checked = check_report::<KvModel>(&history, &options);
    report("one stale read", &checked);
    match &checked.result {
        CheckResult::Illegal { key, explanation } => {
            assert_eq!(key, history.operations()[read].input.key());
            eprintln!("{explanation}");
        }
        other => panic!("stale read #{read} not caught: {other}"),
    }
}
