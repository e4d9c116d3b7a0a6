//! The storage path: appending a batch of log entries (without fsync, so the
//! figure is the CPU cost, not the disk's), writing an applied batch, and
//! reading a filled keyspace: the keyspace hash replicas compare, and a
//! query's range of 10 keys.
//!
//! `cargo bench --workspace --bench storage` (with `-p`, cargo
//! resolves other features and rebuilds RocksDB first)

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use wasmraft_raft::{Entry, EntryPayload, LogId};
use wasmraft_storage::{StateWrite, Storage, StorageOptions};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(dir.path(), 1, StorageOptions { sync_log: false, ..Default::default() }).unwrap();
    let mut g = c.benchmark_group("storage");
    g.throughput(Throughput::Elements(100));
    let mut next = 1u64;
    g.bench_function("append_100_entries_300B", |b| {
        b.iter(|| {
            let batch: Vec<Entry> = (next..next + 100)
                .map(|i| Entry { log_id: LogId::new(1, i), payload: EntryPayload::Normal(vec![7; 300]) })
                .collect();
            next += 100;
            s.append(&batch, None, false).unwrap();
        })
    });
    let keys: Vec<Vec<u8>> = (0..100u64).map(|i| format!("{i:08}").into_bytes()).collect();
    let value = vec![b'v'; 280];
    let mut applied = 1u64;
    g.bench_function("apply_100_writes_280B", |b| {
        b.iter(|| {
            applied += 100;
            let none: [(u64, Option<&[u8]>); 0] = [];
            s.apply(LogId::new(1, applied), keys.iter().map(|k| StateWrite { key: k, value: Some(&value) }), none).unwrap();
        })
    });
    g.finish();

    // 10,000 keys of 8 bytes with 280-byte values (all still in memtables).
    let (_dir, s, keys) = filled(10_000, &value);
    let mut g = c.benchmark_group("keyspace");
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("state_hash_10000_records", |b| b.iter(|| s.state_hash().unwrap()));
    g.throughput(Throughput::Elements(10));
    g.bench_function("scan_10_of_10000", |b| scan_10(b, &s, &keys));
    g.finish();

    // A state that outgrew its memtables: 300,000 keys (about 100 MB with
    // their values), most of them in table files, as a node's state is.
    let (_dir, s, keys) = filled(300_000, &value);
    let mut g = c.benchmark_group("large_keyspace");
    g.throughput(Throughput::Elements(10));
    g.bench_function("scan_10_of_300000", |b| scan_10(b, &s, &keys));
    g.bench_function("get_1_of_300000", |b| {
        let mut at = 0usize;
        b.iter(|| {
            at = (at + 997) % 300_000;
            assert!(s.consistent_reader().get(&keys[at]).unwrap().is_some());
        })
    });
    // What a put of a new key reads first: a key no memtable or table holds.
    g.bench_function("get_absent_1_of_300000", |b| {
        let mut at = 0u64;
        b.iter(|| {
            at = (at + 997) % 300_000;
            assert!(s.consistent_reader().get(format!("{at:08}x").as_bytes()).unwrap().is_none());
        })
    });
    g.finish();
}

/// Storage in a temp dir holding `n` keys of 8 bytes with `value`, written
/// in applied batches of 1,000.
fn filled(n: u64, value: &[u8]) -> (tempfile::TempDir, Storage, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(dir.path(), 1, StorageOptions { sync_log: false, ..Default::default() }).unwrap();
    let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("{i:08}").into_bytes()).collect();
    for (batch, chunk) in keys.chunks(1000).enumerate() {
        let none: [(u64, Option<&[u8]>); 0] = [];
        s.apply(LogId::new(1, batch as u64 + 1), chunk.iter().map(|k| StateWrite { key: k, value: Some(value) }), none).unwrap();
    }
    (dir, s, keys)
}

/// A query's range of 10 consecutive keys, at a different place each time.
fn scan_10(b: &mut criterion::Bencher, s: &Storage, keys: &[Vec<u8>]) {
    let mut at = 0usize;
    b.iter(|| {
        at = (at + 997) % (keys.len() - 10);
        let reader = s.consistent_reader();
        let mut seen = 0;
        reader
            .scan(&keys[at], Some(&keys[at + 10]), false, &mut |_, _| {
                seen += 1;
                true
            })
            .unwrap();
        assert_eq!(seen, 10);
    })
}

criterion_group!(benches, bench);
criterion_main!(benches);
