//! etcd's own benchmark tool (v3.6.8, pinned and built by
//! `scripts/setup.sh`) runs its put, range (linearizable and serializable)
//! and txn-put workloads against a three-node cluster without one error.
//! Bounded runs: a compatibility check, not a measurement (benchmarks live
//! in `benches/`).

mod cluster;

use std::process::Command;

use cluster::etcdctl::{ok, revision};
use cluster::*;

/// etcd's benchmark tool, as `scripts/setup.sh` builds it.
fn benchmark_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("WASMRAFT_ETCD_BENCHMARK") {
        return p.into();
    }
    let home = std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME"));
    let cache = std::env::var_os("XDG_CACHE_HOME").map(std::path::PathBuf::from).unwrap_or_else(|| home.join(".cache"));
    let tools = std::env::var_os("WASMRAFT_TOOLS").map(std::path::PathBuf::from).unwrap_or_else(|| cache.join("wasmraft-tools"));
    tools.join("etcd-v3.6.8/benchmark")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_benchmark_workloads_run_without_errors() {
    let _serial = serial();
    let path = benchmark_path();
    assert!(path.exists(), "etcd's benchmark tool not found at {}: run scripts/setup.sh (it builds it)", path.display());
    let cluster = Cluster::start_with(3, "").await;
    cluster.leader().await;
    let endpoints = cluster.ids().iter().map(|&i| cluster.addr(i).to_string()).collect::<Vec<_>>().join(",");
    let common = [format!("--endpoints={endpoints}")];
    let workloads: [&[&str]; 6] = [
        &["--conns=4", "--clients=16", "put", "--key-size=8", "--val-size=256", "--total=2000", "--sequential-keys", "--key-space-size=1000"],
        // Two thirds of the clients on followers, which forward each turn's
        // puts to the leader as one Raft message: none may be lost or
        // appended twice however they interleave with the leader's fsyncs.
        &["--conns=24", "--clients=96", "put", "--key-size=8", "--val-size=256", "--total=8000", "--sequential-keys", "--key-space-size=8000"],
        &["--conns=4", "--clients=16", "range", "foo", "--consistency=l", "--total=2000"],
        &["--conns=4", "--clients=16", "range", "foo", "--consistency=s", "--total=2000"],
        &["--conns=4", "--clients=16", "range", "00000000", "00000100", "--consistency=l", "--total=500"],
        &["--conns=4", "--clients=16", "txn-put", "--key-size=8", "--val-size=256", "--total=1000", "--txn-ops=4", "--key-space-size=1000"],
    ];
    let revision_now = || revision(&ok(&endpoints, &["get", "nothing", "-w", "json"]));
    for args in workloads {
        let before = revision_now();
        let out = Command::new(&path).args(&common).args(args).output().expect("run etcd's benchmark");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "benchmark {args:?} failed:\n{text}");
        assert!(text.contains("Requests/sec:"), "benchmark {args:?} printed no summary:\n{text}");
        assert!(!text.contains("Error distribution"), "benchmark {args:?} saw errors:\n{text}");
        if args[2] == "put" {
            let total: i64 = args.iter().find_map(|a| a.strip_prefix("--total=")).unwrap().parse().unwrap();
            assert_eq!(revision_now() - before, total, "each acknowledged put applied once: {args:?}");
        }
        let rate = text.lines().find(|l| l.contains("Requests/sec:")).unwrap_or_default().trim().to_string();
        println!("benchmark {}: {rate}", args.join(" "));
    }
}
