//! etcd's own benchmark tool (v3.6.8, pinned and built by
//! `scripts/setup.sh`) runs its put, range (linearizable and serializable)
//! and txn-put workloads against a three-node cluster without one error.
//! Bounded runs: a compatibility check, not a measurement (benchmarks live
//! in `benches/`).

mod cluster;

use std::process::Command;

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
    let common = [format!("--endpoints={endpoints}"), "--conns=4".into(), "--clients=16".into()];
    let workloads: [&[&str]; 5] = [
        &["put", "--key-size=8", "--val-size=256", "--total=2000", "--sequential-keys", "--key-space-size=1000"],
        &["range", "foo", "--consistency=l", "--total=2000"],
        &["range", "foo", "--consistency=s", "--total=2000"],
        &["range", "00000000", "00000100", "--consistency=l", "--total=500"],
        &["txn-put", "--key-size=8", "--val-size=256", "--total=1000", "--txn-ops=4", "--key-space-size=1000"],
    ];
    for args in workloads {
        let out = Command::new(&path).args(&common).args(args).output().expect("run etcd's benchmark");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "benchmark {args:?} failed:\n{text}");
        assert!(text.contains("Requests/sec:"), "benchmark {args:?} printed no summary:\n{text}");
        assert!(!text.contains("Error distribution"), "benchmark {args:?} saw errors:\n{text}");
        let rate = text.lines().find(|l| l.contains("Requests/sec:")).unwrap_or_default().trim().to_string();
        println!("benchmark {}: {rate}", args.join(" "));
    }
}
