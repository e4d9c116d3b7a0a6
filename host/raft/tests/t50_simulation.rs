//! Faults and environment: the seeded simulation (see `sim/mod.rs`).
//!
//! The default run checks `WASMRAFT_SIM_SEEDS` seeds (default 2,000) of
//! `WASMRAFT_SIM_STEPS` steps (default 500, one tick each), split across
//! tests so they run in parallel. `WASMRAFT_SIM_SEED=n` replays one seed
//! with a trace (test `replay`). Half the seeds have leaders defer commit
//! updates; `WASMRAFT_SIM_NO_DEFER=1` runs them as the others, to tell
//! whether a failure has to do with deferring.

mod sim;

use sim::{Options, env_u64, run_seeds};

const SHARDS: u64 = 4;

fn shard(k: u64) {
    let seeds = env_u64("WASMRAFT_SIM_SEEDS", 2000);
    let base = env_u64("WASMRAFT_SIM_SEED_BASE", 0);
    let opts = Options {
        steps: env_u64("WASMRAFT_SIM_STEPS", 500),
        ..Options::default()
    };
    let per = seeds.div_ceil(SHARDS);
    let lo = base + k * per;
    let hi = (base + seeds).min(lo + per);
    let stats = run_seeds(lo..hi, &opts);
    println!("shard {k}: seeds {lo}..{hi}: {stats:?}");
    assert_eq!(stats.runs, hi - lo);
    // The hostile mode ran: malformed messages reached live nodes (every
    // one refused, or the run would have failed).
    assert!(hi == lo || stats.hostile_refused > 0, "no hostile message was stepped in");
}

#[test]
fn simulation_shard_0() {
    shard(0);
}

#[test]
fn simulation_shard_1() {
    shard(1);
}

#[test]
fn simulation_shard_2() {
    shard(2);
}

#[test]
fn simulation_shard_3() {
    shard(3);
}

/// Replays `WASMRAFT_SIM_SEED` with a trace of events (no-op without it).
#[test]
fn replay() {
    let Ok(seed) = std::env::var("WASMRAFT_SIM_SEED") else {
        return;
    };
    let seed: u64 = seed.parse().expect("WASMRAFT_SIM_SEED is a number");
    let opts = Options {
        steps: env_u64("WASMRAFT_SIM_STEPS", 500),
        ..Options::default()
    };
    match sim::run_seed(seed, &opts, true) {
        Ok(stats) => println!("seed {seed} passed: {stats:?}"),
        Err(e) => panic!("{e}"),
    }
}

/// The same seed produces the same run.
#[test]
fn simulation_is_deterministic() {
    let opts = Options::default();
    for seed in [3, 11] {
        let a = format!("{:?}", sim::run_seed(seed, &opts, false).expect("passes"));
        let b = format!("{:?}", sim::run_seed(seed, &opts, false).expect("passes"));
        assert_eq!(a, b);
    }
}

/// The checker can fail: serving "linearizable" reads from any node's local
/// state (the Jepsen 2014 etcd bug) is caught.
#[test]
fn checker_catches_local_reads_served_as_linearizable() {
    let opts = Options {
        broken_local_reads: true,
        ..Options::default()
    };
    let caught = (0..200).find(|&seed| {
        sim::run_seed(seed, &opts, false).is_err_and(|e| e.contains("linearizability"))
    });
    assert!(
        caught.is_some(),
        "200 seeds of broken local reads went unnoticed"
    );
}
