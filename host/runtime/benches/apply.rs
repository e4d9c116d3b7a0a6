//! The plugin path: the KV plugin applying batches of puts and answering
//! point reads and 10-key ranges, over an in-memory keyspace (storage has its own bench).
//!
//! `cargo xtask plugins && cargo bench -p wasmraft-runtime --bench apply`

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use wasmraft_proto::etcdserverpb::{PutRequest, RangeRequest, RequestOp, request_op::Request};
use wasmraft_runtime::{Applier, EntryInput, MemoryView, Plugin, PluginConfig, PluginEngine, QueryPool};

fn kv() -> Arc<Plugin> {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/dist/kv.wasm")).unwrap();
    Plugin::load(&PluginEngine::new(PluginConfig::default()).unwrap(), &bytes).unwrap()
}

fn put(i: u64) -> Vec<u8> {
    let req = PutRequest { key: format!("{i:08}").into_bytes(), value: vec![b'v'; 256], ..Default::default() };
    RequestOp { request: Some(Request::RequestPut(req)) }.encode_to_vec()
}

fn entries(n: u64) -> Vec<EntryInput> {
    (1..=n).map(|i| EntryInput { index: i, term: 1, timestamp_ms: 0, command: put(i) }).collect()
}

fn apply(c: &mut Criterion) {
    let plugin = kv();
    let mut g = c.benchmark_group("kv_apply");
    for n in [1u64, 100] {
        g.throughput(Throughput::Elements(n));
        let batch = entries(n);
        let mut applier = Applier::new(plugin.clone()).unwrap();
        g.bench_function(format!("puts_batch_{n}"), |b| {
            b.iter_batched(
                || Arc::new(MemoryView::default()),
                |view| applier.apply(view, &batch).unwrap(),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn query(c: &mut Criterion) {
    let plugin = kv();
    let mut applier = Applier::new(plugin.clone()).unwrap();
    let mut state = MemoryView::default();
    let batch = applier.apply(Arc::new(state.clone()), &entries(1000)).unwrap();
    state.apply_writes(&batch.writes);
    let state = Arc::new(state);
    let pool = QueryPool::new(plugin);
    let get = RequestOp {
        request: Some(Request::RequestRange(RangeRequest { key: b"00000500".to_vec(), ..Default::default() })),
    }
    .encode_to_vec();
    c.bench_function("kv_query_point_read", |b| b.iter(|| pool.query(state.clone(), &get).unwrap()));
    // etcd's hot-keys workload: one range over 10 keys.
    let range = RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: b"00000500".to_vec(),
            range_end: b"00000510".to_vec(),
            ..Default::default()
        })),
    }
    .encode_to_vec();
    c.bench_function("kv_query_range_10", |b| b.iter(|| pool.query(state.clone(), &range).unwrap()));
}

criterion_group!(benches, apply, query);
criterion_main!(benches);
