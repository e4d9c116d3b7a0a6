//! The Wasm tax: what running the state machine as a Wasm plugin costs over
//! the same state machine in native Rust, through the node's real apply
//! path (`apply.rs`): a view over `Storage::apply_reader()`, the state
//! machine's `apply`, then `Storage::apply` of its writes into RocksDB.
//!
//! Workload: etcd puts, 8-byte keys, 256-byte values, batches of 100 (and 1
//! for reference). Before measuring, both state machines apply the same
//! entries and must produce identical outcomes, writes and events.
//!
//! `cargo bench --workspace --bench wasm_tax`
//!
//! The batch of 100 with its storage write is also measured in alternated
//! pairs, which RocksDB's background work disturbs far less (a few seconds;
//! it runs only when asked for):
//!
//! `WASM_TAX_PAIRED=1 cargo bench --workspace --bench wasm_tax -- paired`

mod native_kv;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use wasmraft_node::{KV_PLUGIN, StateMachine};
use wasmraft_proto::etcdserverpb::{PutRequest, RequestOp, request_op::Request};
use wasmraft_raft::LogId;
use wasmraft_runtime::{ApplyBatch, Applier, EntryInput, Plugin, PluginConfig, PluginEngine, StateError, StateView};
use wasmraft_storage::{StateReader, StateWrite, Storage, StorageOptions};

use native_kv::NativeKv;

// The allocator the `wasmraft` binary uses, for both state machines.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Distinct keys: after the first pass every put finds a previous value.
const KEY_SPACE: u64 = 10_000;
const VALUE: [u8; 256] = [b'v'; 256];

/// The node's `StorageView` (crate-private there), verbatim.
struct StorageView(StateReader);

impl StateView for StorageView {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.0.get(key).map_err(|e| StateError(e.to_string()))
    }

    fn scan(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        reverse: bool,
        visit: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        self.0.scan(start, end, reverse, visit).map_err(|e| StateError(e.to_string()))
    }
}

fn wasm_kv() -> Box<dyn StateMachine> {
    let engine = PluginEngine::new(PluginConfig::default()).expect("engine");
    Box::new(Applier::new(Plugin::load(&engine, KV_PLUGIN).expect("the KV plugin loads")).expect("instantiate"))
}

fn put(k: u64, prev_kv: bool) -> Vec<u8> {
    let key = format!("{k:08}").into_bytes();
    let req = PutRequest { key, value: VALUE.to_vec(), prev_kv, ..Default::default() };
    RequestOp { request: Some(Request::RequestPut(req)) }.encode_to_vec()
}

/// A node: storage in a temp dir, a state machine, the next log index.
struct Replica {
    _dir: tempfile::TempDir,
    storage: Storage,
    sm: Box<dyn StateMachine>,
    next: u64,
}

impl Replica {
    fn new(sm: Box<dyn StateMachine>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = Storage::open(dir.path(), 1, StorageOptions { sync_log: false, ..Default::default() }).expect("storage");
        Self { _dir: dir, storage, sm, next: 1 }
    }

    /// A replica whose key space is filled, so that measured puts overwrite.
    fn filled(sm: Box<dyn StateMachine>) -> Self {
        let mut r = Self::new(sm);
        while r.next <= KEY_SPACE {
            let e = r.entries(1000);
            r.apply(&e);
        }
        r
    }

    /// The next `n` entries: puts of consecutive keys.
    fn entries(&self, n: u64) -> Vec<EntryInput> {
        self.entries_for((self.next..self.next + n).map(|i| i % KEY_SPACE))
    }

    /// The next entries, putting these keys; every other one asks for the
    /// previous key-value.
    fn entries_for(&self, keys: impl IntoIterator<Item = u64>) -> Vec<EntryInput> {
        keys.into_iter()
            .zip(self.next..)
            .map(|(k, i)| EntryInput { index: i, term: 1, timestamp_ms: 1_700_000_000_000 + i, command: put(k, i % 2 == 0) })
            .collect()
    }

    /// What the apply worker does with a batch of committed entries.
    fn apply(&mut self, entries: &[EntryInput]) -> ApplyBatch {
        let view: Arc<dyn StateView> = Arc::new(StorageView(self.storage.apply_reader()));
        let batch = self.sm.apply(view, entries).expect("no fatal failure");
        let last = LogId::new(1, entries.last().expect("entries").index);
        let none: [(u64, Option<&[u8]>); 0] = [];
        self.storage
            .apply(last, batch.writes.iter().map(|w| StateWrite { key: &w.key, value: w.value.as_deref() }), none)
            .expect("storage write");
        self.next = last.index.0 + 1;
        batch
    }
}

/// The comparison is only honest if both do the same work: same outcomes,
/// writes, events and keyspace, for new and overwritten keys alike.
fn check_same_semantics() {
    let mut wasm = Replica::new(wasm_kv());
    let mut native = Replica::new(Box::new(NativeKv));
    let batches: [Vec<u64>; 4] = [
        (0..100).collect(),
        (50..150).collect(),      // overwrites half of the first batch
        vec![7, 7, 8, 7],         // the same key again within one batch
        vec![200, 0, 201],        // the middle one made invalid below
    ];
    for (i, keys) in batches.into_iter().enumerate() {
        let mut entries = wasm.entries_for(keys.iter().copied());
        if i == 3 {
            entries[1].command = RequestOp { request: Some(Request::RequestPut(PutRequest::default())) }.encode_to_vec();
        }
        let (a, b) = (wasm.apply(&entries), native.apply(&entries));
        assert_eq!(a.outcomes, b.outcomes, "outcomes differ for keys {keys:?}");
        assert_eq!(a.writes, b.writes, "writes differ for keys {keys:?}");
        assert_eq!(a.events, b.events, "events differ for keys {keys:?}");
        assert_eq!(a.outcomes.iter().filter(|o| o.is_err()).count(), usize::from(i == 3), "{:?}", a.outcomes);
    }
    let dump = |r: &Replica| r.storage.apply_reader().dump().expect("dump");
    assert_eq!(dump(&wasm), dump(&native), "keyspaces differ");
    assert_eq!(dump(&wasm).len(), 1 + 152 + 2 * 206, "the revision, 152 keys, and the 206 puts' versions with their revision-log records");
}

fn bench(c: &mut Criterion) {
    check_same_semantics();
    if std::env::var_os("WASM_TAX_PAIRED").is_some_and(|v| v == "1") {
        paired_batches_with_storage();
    }
    for n in [100u64, 1] {
        let mut g = c.benchmark_group(format!("wasm_tax/batch_{n}"));
        g.throughput(Throughput::Elements(n));
        for (name, sm) in [("wasm", wasm_kv()), ("native", Box::new(NativeKv) as Box<dyn StateMachine>)] {
            let mut r = Replica::filled(sm);
            g.bench_function(name, |b| b.iter_custom(|iters| timed(iters, &mut r, n)));
        }
        g.finish();
    }
    // The state machine's share alone (no storage write; the keyspace stays
    // as filled), to tell where a difference comes from.
    let mut g = c.benchmark_group("wasm_tax/apply_only_batch_100");
    g.throughput(Throughput::Elements(100));
    for (name, sm) in [("wasm", wasm_kv()), ("native", Box::new(NativeKv) as Box<dyn StateMachine>)] {
        let mut r = Replica::filled(sm);
        let view: Arc<dyn StateView> = Arc::new(StorageView(r.storage.apply_reader()));
        let entries = r.entries(100);
        g.bench_function(name, |b| b.iter(|| r.sm.apply(view.clone(), &entries).expect("no fatal failure")));
    }
    g.finish();
}

const PAIRED: &str = "wasm_tax/paired_batch_100";

/// The tax with the storage write, measured in pairs: the batch of 100
/// with its RocksDB write takes 0.4-0.9 ms on either side depending on
/// what RocksDB's background threads are doing (flushes and compactions of
/// a store that grows with every put), so two criterion runs one after the
/// other differ more than the state machines do. Here the Wasm and native
/// replicas apply their batches in turn, each on its own store, so that
/// both meet the same background work; the tax is the ratio of the medians.
fn paired_batches_with_storage() {
    const WARM_UP: usize = 200;
    const PAIRS: usize = 3000;
    let mut wasm = Replica::filled(wasm_kv());
    let mut native = Replica::filled(Box::new(NativeKv));
    let (mut w, mut n) = (Vec::with_capacity(PAIRS), Vec::with_capacity(PAIRS));
    for i in 0..WARM_UP + PAIRS {
        // Alternate which goes first, so neither always follows the other.
        let order: [(&mut Replica, &mut Vec<Duration>); 2] =
            if i % 2 == 0 { [(&mut wasm, &mut w), (&mut native, &mut n)] } else { [(&mut native, &mut n), (&mut wasm, &mut w)] };
        for (r, times) in order {
            let entries = r.entries(100);
            let start = Instant::now();
            black_box(r.apply(&entries));
            if i >= WARM_UP {
                times.push(start.elapsed());
            }
        }
    }
    let quantile = |times: &mut Vec<Duration>, q: f64| {
        times.sort_unstable();
        times[((times.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
    };
    let (w50, n50) = (quantile(&mut w, 0.5), quantile(&mut n, 0.5));
    let (w90, n90) = (quantile(&mut w, 0.9), quantile(&mut n, 0.9));
    println!(
        "{PAIRED}: {PAIRS} pairs of batches of 100 puts with their storage write, alternated: \
         Wasm median {w50:.1} us (p90 {w90:.1}), native {n50:.1} us (p90 {n90:.1}); tax {:+.0}% at the median",
        (w50 / n50 - 1.0) * 100.0
    );
}

/// Applies `iters` fresh batches of `n` puts, timing only the apply path
/// (the entries depend on the index the previous batch reached).
fn timed(iters: u64, r: &mut Replica, n: u64) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let entries = r.entries(n);
        let start = Instant::now();
        black_box(r.apply(&entries));
        total += start.elapsed();
    }
    total
}

criterion_group!(benches, bench);
criterion_main!(benches);
