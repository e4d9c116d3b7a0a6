//! The health endpoints on the metrics listener, as probes use them: a
//! node cut off from its quorum stays live but is not ready (503), and is
//! ready again (200) once the partition heals; `/health` answers etcd's
//! JSON; the node's log names it on every Raft line and has no colour
//! codes.

mod cluster;

use std::time::{Duration, Instant};

use cluster::*;

/// Waits until `GET path` on node `id` answers `code` (at most 20 s).
async fn wait_for(cluster: &Cluster, id: u64, path: &str, code: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (got, body) = cluster.http_get(id, path);
        if got == code {
            return body;
        }
        assert!(Instant::now() < deadline, "node {id} {path}: still {got} ({body}), not {code}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_its_quorum_is_live_but_not_ready_until_it_heals() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    for id in cluster.ids() {
        let body = wait_for(&cluster, id, "/readyz", 200).await;
        assert_eq!(body, format!("node {id}: ok\n"));
        assert_eq!(cluster.http_get(id, "/livez"), (200, format!("node {id}: ok\n")));
        assert_eq!(cluster.http_get(id, "/health"), (200, "{\"health\":\"true\",\"reason\":\"\"}\n".to_string()));
    }
    let (code, body) = cluster.http_get(1, "/nothing");
    assert_eq!(code, 404, "{body}");

    let leader = cluster.leader().await;
    let cut = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    cluster.isolate(cut).await;
    let body = wait_for(&cluster, cut, "/readyz", 503).await;
    assert!(body.contains("no leader known"), "{body}");
    let (code, health) = cluster.http_get(cut, "/health");
    assert!(code == 503 && health.starts_with("{\"health\":\"false\",\"reason\":\"node "), "{health}");
    assert_eq!(cluster.http_get(cut, "/livez").0, 200, "cut off, but alive");
    for other in cluster.ids().into_iter().filter(|&i| i != cut) {
        assert_eq!(cluster.http_get(other, "/readyz").0, 200, "node {other} keeps its quorum");
    }

    cluster.heal().await;
    wait_for(&cluster, cut, "/readyz", 200).await;

    // Its log tells the story, each line naming the node, without terminal
    // colour codes in a file.
    let log = cluster.log(cut);
    assert!(!log.contains('\u{1b}'), "escape codes in a log file");
    let changes: Vec<&str> = log.lines().filter(|l| l.contains("raft role or leader changed")).collect();
    assert!(changes.len() >= 2, "the lost and the regained leader are logged:\n{log}");
    assert!(changes.iter().all(|l| l.contains(&format!("node{{id={cut}}}"))), "{changes:?}");
}
