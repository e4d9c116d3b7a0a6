//! etcd's own Go client (clientv3 3.6.8) against three `wasmraft run`
//! processes, through `testing/etcd-client-check` (built by
//! `scripts/setup.sh`): STM transfers between accounts from concurrent
//! workers conserve the total, and a watcher pinned to one member sees
//! every revision exactly once, in order, while the leader is killed with
//! SIGKILL and restarted, and then the watcher's own member too, after
//! which a watch from below a compaction gets etcd's `ErrCompacted` with
//! the compacted revision; and a
//! get/put/delete/compare-and-swap history recorded by clientv3 under
//! SIGKILL and SIGSTOP of leaders is linearizable (the project's checker);
//! and every KV, Watch, Cluster and Maintenance call answers as etcd's.

mod cluster;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmraft_lincheck::{KvHistory, KvInput, KvOutput};

use cluster::*;

/// The client-check program, as `scripts/setup.sh` builds it.
fn client_check() -> std::path::PathBuf {
    let path = std::env::var_os("WASMRAFT_ETCD_CLIENT_CHECK")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| etcd_tools().join("etcd-client-check"));
    assert!(path.exists(), "{} not found: run scripts/setup.sh (it builds it)", path.display());
    path
}

/// Waits (at most two minutes) for the program to exit by itself.
async fn finish(check: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = check.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "etcd-client-check did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn etcd_tools() -> std::path::PathBuf {
    cluster::etcdctl::etcdctl_path().parent().unwrap().to_path_buf()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clientv3_stm_transfers_and_a_watcher_survive_leader_and_member_kills() {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let endpoints = cluster.endpoints(0).join(",");
    let leader = cluster.leader().await;
    let watched = cluster.ids().into_iter().find(|&i| i != leader).unwrap();

    let mut check = Command::new(client_check())
        .args(["-endpoints", &endpoints, "-watch-endpoint", cluster.addr(watched), "-duration", "12s", "-workers", "4"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcd-client-check");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = check.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = rx.recv_timeout(Duration::from_secs(30)).expect("the program reports ready");
    assert!(ready.starts_with("ready "), "{ready}");

    // The leader dies mid-transfers and comes back; then the member the
    // watcher is connected to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.kill9(leader);
    let next = cluster.leader_among(&cluster.ids().into_iter().filter(|&i| i != leader).collect::<Vec<_>>()).await;
    assert_ne!(next, leader);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart(leader).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.kill9(watched);
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.restart(watched).await;

    let status = finish(&mut check).await;
    let lines: Vec<String> = rx.try_iter().collect();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut check.stderr.take().unwrap(), &mut stderr).unwrap();
    let summary = lines.last().cloned().unwrap_or_default();
    println!("{summary}");
    assert!(status.success() && summary.starts_with("ok "), "{lines:?}\n{stderr}");
}

/// Every KV, Watch, Cluster and Maintenance call of clientv3 answers as
/// etcd's: gets with prefix, limit, sort, revision, keys-only, count-only,
/// from-key and min mod revision; deletes with prev kv; txns with every
/// compare target, nested txns and etcd's duplicate-key error; watches
/// replaying history with prev kv and the no-delete filter, a progress
/// request, a live event and a cancel; a learner added, updated, refused
/// promotion and removed; status, alarms, equal HashKV on every member,
/// defragment, a snapshot stream and a leader move (`api.go`); leases
/// (grant, attach, time to live, keep-alive, list, revoke) and the
/// concurrency package's sessions, mutex and election (`leases.go`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_clientv3_call_answers_as_etcds() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    cluster.leader().await;
    let mut check = Command::new(client_check())
        .args(["-api", "-endpoints", &cluster.endpoints(0).join(",")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcd-client-check");
    let status = finish(&mut check).await;
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut check.stdout.take().unwrap(), &mut stdout).unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut check.stderr.take().unwrap(), &mut stderr).unwrap();
    println!("{stdout}");
    assert!(status.success() && stdout.trim_end().ends_with("ok: every call answered as etcd's"), "{stdout}\n{stderr}");
    for part in ["kv", "txn", "watch", "cluster", "maintenance", "lease", "concurrency"] {
        assert!(stdout.contains(&format!("checked {part}\n")), "{stdout}");
    }
}

/// The history `etcd-client-check -history` wrote (format in its
/// `history.go`).
fn parse_history(text: &str) -> KvHistory {
    let mut history = KvHistory::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 8, "a malformed history line: {line:?}");
        let value = |s: &str| (s != "~").then(|| s.to_string());
        let client: u64 = f[0].parse().unwrap();
        let (key, invoke, ret): (&str, u64, i64) = (f[2], f[5].parse().unwrap(), f[6].parse().unwrap());
        let input = match f[1] {
            "get" => KvInput::get(key),
            "put" => KvInput::put(key, f[3]),
            "del" => KvInput::delete(key),
            "cas" => KvInput::cas(key, value(f[4]).as_deref(), f[3]),
            other => panic!("unknown operation {other:?}"),
        };
        if ret < 0 {
            history.unknown(client, input, invoke);
            continue;
        }
        let output = match f[1] {
            "get" => KvOutput::Value(value(f[7])),
            "cas" => KvOutput::Swapped(f[7] == "true"),
            _ => KvOutput::Ok,
        };
        history.returned(client, input, invoke, ret as u64, output);
    }
    history
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clientv3_histories_under_leader_kills_and_pauses_are_linearizable() {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let endpoints = cluster.endpoints(0).join(",");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("history.tsv");
    let mut check = Command::new(client_check())
        .args(["-endpoints", &endpoints, "-duration", "12s", "-workers", "6", "-history"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcd-client-check");
    let mut stdout = BufReader::new(check.stdout.take().unwrap());
    let mut ready = String::new();
    stdout.read_line(&mut ready).unwrap();
    assert_eq!(ready.trim(), "ready");

    // SIGKILL the leader and bring it back; then SIGSTOP the next leader
    // long enough for an election, and let it go on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = cluster.leader().await;
    cluster.kill9(first);
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.restart(first).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = cluster.leader().await;
    cluster.stop(second);
    tokio::time::sleep(election_timeout() * 5).await;
    cluster.cont(second);

    let status = finish(&mut check).await;
    let mut summary = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut summary).unwrap();
    assert!(status.success() && summary.starts_with("ok "), "{summary}");
    println!("{}", summary.trim());
    let history = parse_history(&std::fs::read_to_string(&path).unwrap());
    let returned = history.operations().iter().filter(|o| !o.is_unknown()).count();
    let swaps = history.operations().iter().filter(|o| matches!(o.output(), Some(KvOutput::Swapped(true)))).count();
    assert!(returned > 500 && swaps > 20, "the workload made progress: {returned} returned, {swaps} swaps");
    assert_history_linearizable(&cluster, &history, "clientv3 get/put/delete/CAS under kill -9 and SIGSTOP");
}
