//! Embedded-mode benchmark: drives an in-process cluster through the Rust
//! API, without gRPC, so the figures show the cost of Raft, storage and the
//! plugin alone.
//!
//! ```sh
//! cargo run --example embedded_bench -p wasmraft-node -- --nodes 3 --clients 256 --total 50000 put
//! cargo run --example embedded_bench -p wasmraft-node -- --clients 256 --total 100000 range --consistency l
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use prost::Message;
use wasmraft_node::{Consistency, KV_PLUGIN, LocalCluster};
use wasmraft_proto::etcdserverpb::{PutRequest, RangeRequest, RequestOp, request_op::Request};

// The allocator the `wasmraft` binary uses; an embedding application
// chooses its own.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
struct Args {
    /// Nodes in the cluster.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Requests in flight.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Requests in all.
    #[arg(long, default_value_t = 20000)]
    total: u64,
    #[arg(long, default_value_t = 8)]
    key_size: usize,
    #[arg(long, default_value_t = 256)]
    value_size: usize,
    #[arg(value_enum)]
    workload: Workload,
    /// Read consistency for `range`: l, s (lease) or e.
    #[arg(long, default_value = "l")]
    consistency: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum Workload {
    Put,
    Range,
}

fn key(i: u64, size: usize) -> Vec<u8> {
    format!("{i:0size$}").into_bytes()
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run(args));
}

async fn run(args: Args) {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(args.nodes, dir.path(), KV_PLUGIN, |_| {}).unwrap();
    let leader = cluster.leader().await.unwrap();
    let consistency = match args.consistency.as_str() {
        "s" => Consistency::Lease,
        "e" => Consistency::Eventual,
        _ => Consistency::Linearizable,
    };
    let value = vec![b'v'; args.value_size];
    if let Workload::Range = args.workload {
        // Populate the key space first (not measured).
        let keys = args.total.min(10_000);
        for i in 0..keys {
            let put = PutRequest { key: key(i, args.key_size), value: value.clone(), ..Default::default() };
            leader.propose(RequestOp { request: Some(Request::RequestPut(put)) }.encode_to_vec()).await.unwrap();
        }
    }
    let nodes = cluster.nodes();
    let before: Vec<Pipeline> = nodes.iter().map(Pipeline::of).collect();
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let (next, value, nodes) = (next.clone(), value.clone(), cluster.nodes());
        let leader = leader.clone();
        let (total, key_size, workload) = (args.total, args.key_size, args.workload);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return latencies;
                }
                let t = Instant::now();
                match workload {
                    Workload::Put => {
                        let put = PutRequest { key: key(i, key_size), value: value.clone(), ..Default::default() };
                        leader.propose(RequestOp { request: Some(Request::RequestPut(put)) }.encode_to_vec()).await.unwrap();
                    }
                    Workload::Range => {
                        let range = RangeRequest { key: key(i % 10_000, key_size), ..Default::default() };
                        let node = &nodes[c % nodes.len()];
                        let req = RequestOp { request: Some(Request::RequestRange(range)) }.encode_to_vec();
                        node.query(req, consistency).await.unwrap();
                    }
                }
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut all: Vec<Duration> = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed();
    all.sort();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)].as_secs_f64() * 1000.0;
    println!(
        "embedded {} nodes, {} clients, {} requests: {:.0} req/s; latency ms p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3}",
        args.nodes,
        args.clients,
        all.len(),
        all.len() as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(0.999)
    );
    // Where a request's time went, per node, over the measured run.
    for (node, before) in nodes.iter().zip(before) {
        println!("  node {}: {}", node.id(), Pipeline::of(node).since(&before));
    }
}

/// A node's counters that say where requests wait: its synced log writes,
/// its commits as leader, its apply batches and its ReadIndex rounds.
struct Pipeline {
    fsyncs: (u64, f64),
    commits: (u64, f64),
    apply_batches: (u64, f64),
    applies: (u64, f64),
    read_rounds: u64,
}

impl Pipeline {
    fn of(node: &wasmraft_node::Node) -> Self {
        let m = node.metrics();
        let count_sum = |h: &wasmraft_node::Histogram| {
            let (_, count, sum) = h.read();
            (count, sum)
        };
        Pipeline {
            fsyncs: count_sum(&m.log_fsync),
            commits: count_sum(&m.commit_latency),
            apply_batches: count_sum(&m.apply_batch_size),
            applies: count_sum(&m.apply_latency),
            read_rounds: m.read_index_rounds.load(Ordering::Relaxed),
        }
    }

    fn since(&self, before: &Pipeline) -> String {
        let mean = |(n, s): (u64, f64), (n0, s0): (u64, f64)| {
            let n = n - n0;
            (n, if n == 0 { 0.0 } else { (s - s0) / n as f64 })
        };
        let (fsyncs, fsync_s) = mean(self.fsyncs, before.fsyncs);
        let (commits, commit_s) = mean(self.commits, before.commits);
        let (batches, batch_size) = mean(self.apply_batches, before.apply_batches);
        let (_, apply_s) = mean(self.applies, before.applies);
        format!(
            "{fsyncs} log fsyncs of {:.0} us; {commits} commits, {:.0} us from proposal; \
             {batches} apply batches of {batch_size:.1} entries, {:.0} us each; {} ReadIndex rounds",
            fsync_s * 1e6,
            commit_s * 1e6,
            apply_s * 1e6,
            self.read_rounds - before.read_rounds
        )
    }
}
