//! A deterministic simulation of a Wasmraft cluster: `RawNode`s over
//! in-memory disks, a network that drops, duplicates, delays, reorders and
//! partitions (symmetric and asymmetric), nodes that crash (losing what they
//! had not persisted) and restart, skewed tick rates within the lease drift
//! bound, and clients that propose, read (ReadIndex on leader and followers,
//! lease) and change membership. Invariants are checked on every event; a run
//! ends with a heal-and-converge liveness phase. Everything random comes from
//! the seed, so a failing seed replays exactly.

#![allow(dead_code)]

pub mod checker;
pub mod node;
pub mod params;
pub mod rng;
pub mod storage;
mod world;

pub use params::{Options, Stats};
pub use world::run_seed;

/// Runs `seeds` and panics with every failing seed (and a trace of the first).
pub fn run_seeds(seeds: std::ops::Range<u64>, opts: &Options) -> Stats {
    let mut total = Stats::default();
    let mut failures = Vec::new();
    for seed in seeds {
        match run_seed(seed, opts, false) {
            Ok(stats) => total.add(&stats),
            Err(e) => failures.push((seed, e)),
        }
    }
    if let Some((seed, err)) = failures.first() {
        let trace = match run_seed(*seed, opts, true) {
            Err(e) => e,
            Ok(_) => "replay did not fail: the simulation is not deterministic!".to_string(),
        };
        let seeds: Vec<u64> = failures.iter().map(|f| f.0).collect();
        panic!(
            "{} failing seed(s) {seeds:?}\nfirst: seed {seed}: {err}\nreplay: WASMRAFT_SIM_SEED={seed} cargo test -p wasmraft-raft --test t50_simulation replay -- --nocapture\n{trace}",
            failures.len()
        );
    }
    total
}

/// `name` from the environment as a number, or `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
