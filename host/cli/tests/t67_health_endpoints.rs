//! The health endpoints on the metrics listener, as probes use them: a
//! node cut off from its quorum stays live but is not ready (503), and is
//! ready again (200) once the partition heals; `/health` answers etcd's
//! JSON; the node's log names it on every Raft line and has no colour
//! codes. `/metrics` has every series a dashboard reads, and they move
//! under load, a snapshot and a leader change.

mod cluster;

use std::time::{Duration, Instant};

use cluster::*;
use wasmraft_client::Consistency;

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
    // The start's lines too.
    let opening = log.lines().find(|l| l.contains("opening the data directory")).unwrap_or_else(|| panic!("{log}"));
    assert!(opening.contains(&format!("node{{id={cut}}}")), "{opening}");
}

/// A scrape of node `id`'s `/metrics`: every sample, `name{labels}` to value.
fn scrape(cluster: &Cluster, id: u64) -> std::collections::BTreeMap<String, f64> {
    let (code, body) = cluster.http_get(id, "/metrics");
    assert_eq!(code, 200, "{body}");
    let mut families = std::collections::BTreeSet::new();
    let mut samples = std::collections::BTreeMap::new();
    for line in body.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            families.insert(rest.split_whitespace().next().unwrap().to_string());
        } else if !line.starts_with('#') && !line.is_empty() {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample without a value: {line}"));
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).filter(|f| families.contains(*f));
            assert!(families.contains(name) || family.is_some(), "{name} has no # TYPE line");
            samples.insert(series.to_string(), value.parse().unwrap_or_else(|_| panic!("not a number: {line}")));
        }
    }
    samples
}

/// The sum of the samples of `name` on node `id` whose labels contain every
/// one of `labels` (`key="value"`); None when there is no such sample.
fn total(samples: &std::collections::BTreeMap<String, f64>, name: &str, labels: &[&str]) -> Option<f64> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|(series, _)| series.starts_with(&format!("{name}{{")) && labels.iter().all(|l| series.contains(l)))
        .map(|(_, v)| *v)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_series_exists_and_moves_under_load_a_snapshot_and_a_leader_change() {
    let _serial = serial();
    let mut cluster = Cluster::start_with(3, "snapshot_entries = 50").await;
    let leader = cluster.leader().await;
    let followers: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    let node = format!("node=\"{leader}\"");
    let before = scrape(&cluster, leader);

    // Every family a dashboard reads is there before any load.
    let families = [
        "wasmraft_requests_total",
        "wasmraft_request_duration_seconds_count",
        "wasmraft_commit_duration_seconds_count",
        "wasmraft_log_fsync_duration_seconds_count",
        "wasmraft_apply_duration_seconds_count",
        "wasmraft_apply_batch_entries_sum",
        "wasmraft_applied_entries_total",
        "wasmraft_elections_total",
        "wasmraft_leader_changes_total",
        "wasmraft_read_index_rounds_total",
        "wasmraft_proposals_forwarded_total",
        "wasmraft_snapshots_sent_total",
        "wasmraft_snapshots_send_failures_total",
        "wasmraft_snapshots_installed_total",
        "wasmraft_snapshot_duration_seconds_count",
        "wasmraft_plugin_fuel_consumed_total",
        "wasmraft_plugin_traps_total",
        "wasmraft_peer_last_heard_seconds",
        "wasmraft_peer_round_trip_seconds_count",
        "wasmraft_pending_requests",
        "wasmraft_peer_queued_bytes",
        "wasmraft_term",
        "wasmraft_is_leader",
    ];
    for f in families {
        assert!(total(&before, f, &[&node]).is_some(), "{f} missing:\n{before:#?}");
    }

    // Load with a follower down long enough to need a snapshot.
    let lagging = followers[0];
    cluster.kill9(lagging);
    let mut client = pinned_client(cluster.addr(leader)).await;
    for i in 0..200 {
        client.propose(put_request(&format!("m{i}"), "v")).await.unwrap();
    }
    for consistency in [Consistency::Linearizable, Consistency::Lease, Consistency::Eventual] {
        for _ in 0..20 {
            client.query(range_request("m1", b""), consistency).await.unwrap();
        }
    }
    // Writes taken by a follower go to the leader in its Raft stream.
    let mut via_follower = pinned_client(cluster.addr(followers[1])).await;
    for i in 0..5 {
        via_follower.propose(put_request(&format!("f{i}"), "v")).await.unwrap();
    }
    let forwarded = total(&scrape(&cluster, followers[1]), "wasmraft_proposals_forwarded_total", &[]);
    assert!(forwarded >= Some(5.0), "follower {} forwarded {forwarded:?} writes", followers[1]);
    cluster.restart(lagging).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while total(&scrape(&cluster, lagging), "wasmraft_snapshots_installed_total", &[]) < Some(1.0) {
        assert!(Instant::now() < deadline, "node {lagging} installed no snapshot");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The leader's log tells the story, each line naming it.
    let deadline = Instant::now() + Duration::from_secs(10);
    for event in ["cannot reach peer", "connected to peer again", "sending a snapshot", "sent a snapshot"] {
        let line = loop {
            if let Some(l) = cluster.log(leader).lines().find(|l| l.contains(event)) {
                break l.to_string();
            }
            assert!(Instant::now() < deadline, "the leader did not log {event:?}:\n{}", cluster.log(leader));
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(line.contains(&format!("node{{id={leader}}}")), "{line}");
    }

    let after = scrape(&cluster, leader);
    let moved = |name: &str, labels: &[&str]| {
        let mut labels = labels.to_vec();
        labels.push(&node);
        total(&after, name, &labels).unwrap_or(0.0) - total(&before, name, &labels).unwrap_or(0.0)
    };
    assert!(moved("wasmraft_requests_total", &["kind=\"propose\"", "outcome=\"ok\""]) >= 200.0);
    for kind in ["read_linearizable", "read_lease", "read_eventual"] {
        let kind = format!("kind=\"{kind}\"");
        assert!(moved("wasmraft_requests_total", &[&kind, "outcome=\"ok\""]) >= 20.0, "{kind}");
        assert!(moved("wasmraft_request_duration_seconds_count", &[&kind]) >= 20.0, "{kind}");
    }
    assert!(moved("wasmraft_request_duration_seconds_bucket", &["kind=\"propose\"", "le=\"+Inf\""]) >= 200.0);
    assert!(moved("wasmraft_commit_duration_seconds_count", &[]) >= 1.0);
    assert!(moved("wasmraft_log_fsync_duration_seconds_count", &[]) >= 1.0);
    assert!(moved("wasmraft_apply_duration_seconds_count", &[]) >= 1.0);
    assert!(moved("wasmraft_apply_batch_entries_sum", &[]) >= 200.0);
    assert!(moved("wasmraft_applied_entries_total", &[]) >= 200.0);
    assert!(moved("wasmraft_read_index_rounds_total", &[]) >= 1.0);
    assert!(moved("wasmraft_snapshots_sent_total", &[]) >= 1.0);
    // 200 entries at `snapshot_entries = 50`.
    assert!(moved("wasmraft_snapshot_duration_seconds_count", &[]) >= 3.0);
    assert!(moved("wasmraft_plugin_fuel_consumed_total", &[]) > 0.0);
    let awake = format!("peer=\"{}\"", followers[1]);
    assert!(moved("wasmraft_peer_round_trip_seconds_count", &[&awake]) >= 1.0);
    for f in &followers {
        let heard = total(&after, "wasmraft_peer_last_heard_seconds", &[&node, &format!("peer=\"{f}\"")]);
        assert!(heard.is_some_and(|s| s < 5.0), "the leader heard from {f} {heard:?} s ago");
    }

    // The dashboard in docs/ reads only series that exist.
    let dashboard = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/grafana-dashboard.json")).unwrap();
    let names: std::collections::BTreeSet<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("wasmraft_"))
        .collect();
    assert!(names.len() > 20, "{names:?}");
    for name in names {
        assert!(after.keys().any(|k| k.starts_with(&format!("{name}{{"))), "the dashboard reads {name}, which /metrics lacks");
    }

    // A leader change: the new leader counts its election, everyone the change.
    let next = followers[1];
    let changes = |s: &std::collections::BTreeMap<String, f64>| total(s, "wasmraft_leader_changes_total", &[]).unwrap();
    let before_changes: Vec<f64> = cluster.ids().iter().map(|&i| changes(&scrape(&cluster, i))).collect();
    let elections = total(&scrape(&cluster, next), "wasmraft_elections_total", &[]).unwrap();
    let out = cluster.cli(&["transfer-leader", &next.to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(cluster.leader().await, next);
    assert!(total(&scrape(&cluster, next), "wasmraft_elections_total", &[]).unwrap() > elections);
    let deadline = Instant::now() + Duration::from_secs(10);
    for (i, was) in cluster.ids().into_iter().zip(before_changes) {
        while changes(&scrape(&cluster, i)) <= was {
            assert!(Instant::now() < deadline, "node {i} counted no leader change");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let is_leader = total(&scrape(&cluster, next), "wasmraft_is_leader", &[]).unwrap();
    assert_eq!(is_leader, 1.0);
}

/// Every gRPC call is counted by API (service), method and status code
/// under etcd's series names, a stream when it ends; a made-up path never
/// becomes a label of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_are_counted_by_service_method_and_code() {
    use wasmraft_proto::etcdserverpb::kv_client::KvClient;
    use wasmraft_proto::etcdserverpb::{PutRequest, RangeRequest};

    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let leader = cluster.leader().await;
    let node = format!("node=\"{leader}\"");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addr(leader))).unwrap().connect().await.unwrap();
    let mut kv = KvClient::new(channel.clone());
    for i in 0..5 {
        kv.put(PutRequest { key: format!("g{i}").into(), value: b"v".to_vec(), ..Default::default() }).await.unwrap();
    }
    // A compacted revision: etcd's OutOfRange.
    let range = RangeRequest { key: b"g0".to_vec(), revision: 1, ..Default::default() };
    kv.compact(wasmraft_proto::etcdserverpb::CompactionRequest { revision: 3, physical: false }).await.unwrap();
    assert_eq!(kv.range(range).await.unwrap_err().code(), tonic::Code::OutOfRange);
    let mut client = pinned_client(cluster.addr(leader)).await;
    for i in 0..3 {
        client.propose(put_request(&format!("w{i}"), "v")).await.unwrap();
    }
    // A path no service serves.
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/made.Up/Method");
    let codec = tonic_prost::ProstCodec::<PutRequest, PutRequest>::default();
    let _ = grpc.unary(tonic::Request::new(PutRequest::default()), path, codec).await;

    let after = scrape(&cluster, leader);
    let handled = |service: &str, method: &str, code: &str| {
        let labels = [node.as_str(), &format!("grpc_service=\"{service}\""), &format!("grpc_method=\"{method}\""), &format!("grpc_code=\"{code}\"")];
        total(&after, "grpc_server_handled_total", &labels).unwrap_or(0.0)
    };
    assert_eq!(handled("etcdserverpb.KV", "Put", "OK"), 5.0, "{after:#?}");
    assert_eq!(handled("etcdserverpb.KV", "Compact", "OK"), 1.0);
    assert_eq!(handled("etcdserverpb.KV", "Range", "OutOfRange"), 1.0);
    assert!(handled("wasmraft.v1.Client", "Propose", "OK") >= 3.0);
    assert_eq!(handled("unknown", "unknown", "Unimplemented"), 1.0);
    let started = total(&after, "grpc_server_started_total", &[&node, "grpc_service=\"etcdserverpb.KV\"", "grpc_method=\"Put\""]);
    assert_eq!(started, Some(5.0));
    let timed = total(&after, "grpc_server_handling_seconds_count", &[&node, "grpc_service=\"etcdserverpb.KV\"", "grpc_method=\"Put\""]);
    assert_eq!(timed, Some(5.0));
    // Peers' Raft streams are served and counted too (on the peer port).
    assert!(after.keys().any(|k| k.starts_with("grpc_server_started_total{") && k.contains("wasmraft.v1.Raft")), "{after:#?}");
    assert!(!after.keys().any(|k| k.contains("made.Up")));
}
