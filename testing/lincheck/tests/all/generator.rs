//! Random histories from a real linearizable register.
//!
//! Clients run concurrently in simulated time: each operation is invoked,
//! later applied atomically to an in-memory map (its linearization point), and
//! later still returns with the map's answer, the three steps of different
//! clients interleaving at random. Some operations lose their response
//! (applied, outcome unknown) and some are never applied (client timed out
//! before the request arrived). Every history generated is linearizable.

use std::collections::HashMap;

use wasmraft_lincheck::{KvHistory, KvInput, KvOutput, Operation, Outcome};

/// SplitMix64: small, seedable, good enough for test data (no dependency).
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub keys: u64,
    pub clients: u64,
    pub ops: usize,
    /// Share of reads; the rest are puts, and a few deletes.
    pub get_percent: u64,
    pub delete_percent: u64,
    /// Chance that an operation's outcome is lost (half before it is applied,
    /// half after).
    pub unknown_percent: u64,
}

enum Phase {
    Idle,
    Invoked(usize),
    Applied(usize, KvOutput),
}

/// A linearizable history; put values are unique (`v<n>`).
pub fn generate(seed: u64, w: &Workload) -> KvHistory {
    let mut rng = Rng::new(seed);
    let mut store: HashMap<String, String> = HashMap::new();
    let mut phases: Vec<Phase> = (0..w.clients).map(|_| Phase::Idle).collect();
    let mut ops: Vec<Operation<KvInput, KvOutput>> = Vec::with_capacity(w.ops);
    let mut time = 0;
    loop {
        if ops.len() == w.ops && phases.iter().all(|p| matches!(p, Phase::Idle)) {
            break;
        }
        time += 1 + rng.below(3);
        let client = rng.below(w.clients);
        let phase = &mut phases[client as usize];
        *phase = match std::mem::replace(phase, Phase::Idle) {
            Phase::Idle if ops.len() < w.ops => {
                let key = format!("k{}", rng.below(w.keys));
                let roll = rng.below(100);
                let input = if roll < w.get_percent {
                    KvInput::get(key)
                } else if roll < w.get_percent + w.delete_percent {
                    KvInput::delete(key)
                } else {
                    KvInput::put(key, format!("v{}", ops.len()))
                };
                ops.push(Operation::unknown(client, input, time));
                Phase::Invoked(ops.len() - 1)
            }
            Phase::Idle => Phase::Idle,
            // Lost before reaching the store: never takes effect.
            Phase::Invoked(_) if rng.percent(w.unknown_percent / 2) => Phase::Idle,
            Phase::Invoked(op) => {
                let output = match &ops[op].input {
                    KvInput::Get { key } => KvOutput::Value(store.get(key).cloned()),
                    KvInput::Put { key, value } => {
                        store.insert(key.clone(), value.clone());
                        KvOutput::Ok
                    }
                    KvInput::Delete { key } => {
                        store.remove(key);
                        KvOutput::Ok
                    }
                    KvInput::Append { .. } | KvInput::Cas { .. } => unreachable!("not generated"),
                };
                Phase::Applied(op, output)
            }
            // Applied, but the response is lost.
            Phase::Applied(_, _) if rng.percent(w.unknown_percent / 2) => Phase::Idle,
            Phase::Applied(op, output) => {
                ops[op].outcome = Outcome::Returned { at: time, output };
                Phase::Idle
            }
        };
    }
    ops.into()
}

/// Makes one returned read stale: it now returns the value of a put `p1` that
/// was overwritten by a put `p2` with `p1` returned < `p2` invoked and `p2`
/// returned < the read invoked. Values are unique, so no linearization can
/// exist. Picks the most recent such pair for a random read. Returns the
/// read's index, or `None` if no read qualifies.
pub fn make_one_read_stale(history: &mut KvHistory, rng: &mut Rng) -> Option<usize> {
    let ops = history.operations();
    let mut reads: Vec<usize> = (0..ops.len())
        .filter(|&i| matches!(ops[i].input, KvInput::Get { .. }) && !ops[i].is_unknown())
        .collect();
    // Fisher-Yates, so the choice depends on the seed only.
    for i in (1..reads.len()).rev() {
        reads.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let latest_put_before = |key: &str, before: u64| {
        (0..ops.len())
            .filter(|&i| matches!(&ops[i].input, KvInput::Put { key: k, .. } if k == key))
            .filter(|&i| ops[i].return_time().is_some_and(|r| r < before))
            .max_by_key(|&i| ops[i].return_time())
    };
    for read in reads {
        let key = ops[read].input.key();
        let Some(p2) = latest_put_before(key, ops[read].invoke) else {
            continue;
        };
        let Some(p1) = latest_put_before(key, ops[p2].invoke) else {
            continue;
        };
        let KvInput::Put { value, .. } = &ops[p1].input else {
            unreachable!()
        };
        let stale = KvOutput::value(value.clone());
        let at = ops[read].return_time().expect("returned");
        history.operations_mut()[read].outcome = Outcome::Returned { at, output: stale };
        return Some(read);
    }
    None
}
