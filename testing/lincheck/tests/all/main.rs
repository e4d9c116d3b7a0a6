//! The crate's one integration test binary.
//!
//! - `t10_histories`: hand-written histories with known verdicts.
//! - `t10_recorder`: recording from threads, outcomes and the text dump.
//! - `t20_randomized`: histories from a real linearizable register, and the
//!   same with one read made stale.
//! - `t30_performance`: 10 keys x 2,000 operations from 10 clients.

mod generator;
mod t10_histories;
mod t10_recorder;
mod t20_randomized;
mod t30_performance;

use wasmraft_lincheck::{CheckOptions, CheckResult, KvHistory, KvInput, KvModel, KvOutput};

/// Deterministic options: one thread (stop at the first illegal key), limits
/// low enough that a regression shows up as `Unknown` quickly.
pub fn options() -> CheckOptions {
    CheckOptions {
        threads: 1,
        max_steps: 2_000_000,
        ..CheckOptions::default()
    }
}

pub fn check(history: &KvHistory) -> CheckResult<String> {
    wasmraft_lincheck::check::<KvModel>(history, &options())
}

/// Shorthands for hand-written histories: (client, invoke, return).
pub fn put(h: &mut KvHistory, client: u64, key: &str, value: &str, invoke: u64, ret: u64) -> usize {
    h.returned(client, KvInput::put(key, value), invoke, ret, KvOutput::Ok)
}

pub fn get(
    h: &mut KvHistory,
    client: u64,
    key: &str,
    seen: Option<&str>,
    invoke: u64,
    ret: u64,
) -> usize {
    h.returned(
        client,
        KvInput::get(key),
        invoke,
        ret,
        KvOutput::Value(seen.map(str::to_owned)),
    )
}

/// Asserts the verdict is `Illegal` on `key` and returns the explanation.
#[track_caller]
pub fn assert_illegal(history: &KvHistory, key: &str) -> String {
    match check(history) {
        CheckResult::Illegal {
            key: k,
            explanation,
        } => {
            assert_eq!(k, key, "{explanation}");
            explanation
        }
        other => panic!("expected illegal on {key:?}, got {other}\n{history}"),
    }
}
