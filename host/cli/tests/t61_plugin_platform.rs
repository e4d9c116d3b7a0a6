//! The plugin platform on a real cluster of `wasmraft run` processes: a
//! hostile plugin deployed through the log is contained, a fixed plugin
//! replaces it on every replica at one index (one of them down during the
//! deploy, back through a snapshot), and the replicas' keyspace hashes agree
//! (`wasmraft check`), all through the `wasmraft` binary as a user runs it.

#[allow(dead_code)]
mod cluster;

use std::path::PathBuf;
use std::process::{Command, Output};

use cluster::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

fn component(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components").join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run `cargo xtask plugins` first", path.display());
    path
}

fn cli(endpoints: &[String], args: &[&str]) -> Output {
    Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", endpoints.join(",")).output().expect("run wasmraft")
}

fn ok(o: Output) -> String {
    assert!(o.status.success(), "failed: {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn failed(o: Output) -> String {
    assert!(!o.status.success(), "succeeded: {}", String::from_utf8_lossy(&o.stdout));
    String::from_utf8(o.stderr).unwrap()
}

/// `name: value` lines of `wasmraft plugin info`.
fn info_field(info: &str, field: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploys_reach_every_replica_at_one_index_and_keyspaces_agree() {
    let _serial = cluster::serial();
    let mut cluster = Cluster::start_with(3, "snapshot_entries = 40\nhash_check_entries = 0").await;
    let all = cluster.endpoints(0);

    // A bad binary is refused with a clear error and changes nothing.
    let garbage = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(garbage.path(), b"\0asm\x01\x00\x00\x00not a module").unwrap();
    let before = ok(cli(&all, &["plugin", "info"]));
    let err = failed(cli(&all, &["plugin", "deploy", garbage.path().to_str().unwrap()]));
    assert!(err.contains("plugin refused"), "{err}");
    assert_eq!(ok(cli(&all, &["plugin", "info"])), before);

    // A plugin of another name is refused without --force: it would take
    // over the KV plugin's keyspace.
    let err = failed(cli(&all, &["plugin", "deploy", component("fixture_hostile").to_str().unwrap()]));
    assert!(err.contains("the cluster runs plugin \"wasmraft-kv\"") && err.contains("--force"), "{err}");
    assert_eq!(ok(cli(&all, &["plugin", "info"])), before);

    // The hostile plugin: its bad entries fail alone, the rest apply.
    let out = ok(cli(&all, &["plugin", "deploy", "--force", component("fixture_hostile").to_str().unwrap()]));
    assert!(out.contains("deployed fixture-hostile"), "{out}");
    ok(cli(&all, &["propose", "put a 1"]));
    for bad in ["trap", "loop", "oom", "put-then-trap x 1"] {
        let err = failed(cli(&all, &["propose", bad]));
        assert!(err.contains("trapped"), "{bad}: {err}");
    }
    ok(cli(&all, &["propose", "put b 2"]));

    // One follower is killed; the fixed plugin is deployed without it.
    let leader = cluster.leader().await;
    let down = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    cluster.kill9(down);
    let up: Vec<String> = cluster.ids().into_iter().filter(|&id| id != down).map(|id| cluster.addr(id).to_string()).collect();
    ok(cli(&up, &["plugin", "deploy", "--force", component("counter").to_str().unwrap()]));
    for _ in 0..60 {
        ok(cli(&up, &["propose", "2"]));
    }

    // It comes back, catches up from a snapshot, and runs the new plugin
    // from the same index as the others.
    cluster.restart(down).await;
    let mut infos = Vec::new();
    for id in cluster.ids() {
        let endpoint = vec![cluster.addr(id).to_string()];
        // Wait until the node has caught up (its eventual read says so).
        let mut total = String::new();
        for _ in 0..200 {
            let o = cli(&endpoint, &["query", "--consistency", "e", "total"]);
            total = String::from_utf8_lossy(&o.stdout).trim().to_string();
            if total == "120" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(total, "120", "node {id} did not catch up");
        let info = ok(cli(&endpoint, &["plugin", "info"]));
        infos.push((info_field(&info, "name"), info_field(&info, "sha256"), info_field(&info, "deployed at")));
    }
    assert_eq!(infos[0].0, "counter");
    assert!(infos.iter().all(|i| i == &infos[0]), "{infos:?}");

    // etcd's API is the KV plugin's: over another plugin, it refuses and says so.
    let (success, out, err) = cluster::etcdctl::etcdctl(&all.join(","), &["get", "k"], None);
    assert!(!success, "{out}");
    assert!(err.contains("the etcd API needs the KV plugin; this cluster runs plugin \"counter\""), "{err}");
    assert!(infos[0].2.starts_with("index "), "{infos:?}");

    // Every replica hashes its keyspace at one index; they agree.
    let out = ok(cli(&all, &["check"]));
    assert!(out.contains("all 3 node(s) agree"), "{out}");

    // A replica written behind Raft's back is named.
    let victim = vec![cluster.addr(down).to_string()];
    inject(&victim[0], b"\x01sneaky").await;
    let o = cli(&all, &["check"]);
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(!o.status.success(), "{out}");
    assert!(out.contains(&format!("odd one out: node(s) [{down}]")), "{out}");
    assert!(cluster.log(down).contains("keyspace diverged from the leader's"), "no error in node {down}'s log");
}

/// A plugin built for `wasmraft:plugin@0.2.0` deploys once every member's
/// host has shown it runs that contract (all of them here), and its timer
/// record replicates like any write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_0_plugin_deploys_and_its_wake_up_replicates() {
    let _serial = cluster::serial();
    let cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0);
    let out = ok(cli(&all, &["plugin", "deploy", "--force", component("fixture_timer").to_str().unwrap()]));
    assert!(out.contains("deployed fixture-timer"), "{out}");
    // A keep-alive, through any node, rides a tick to every replica.
    assert_eq!(ok(cli(&all, &["propose", "lease s1"])).trim(), "ok");
    for id in cluster.ids() {
        let endpoint = vec![cluster.addr(id).to_string()];
        assert_eq!(ok(cli(&endpoint, &["renew", "s1"])).trim(), "s1", "through node {id}");
    }
    let err = failed(cli(&all, &["renew", "s2"]));
    assert!(err.contains("not leased"), "{err}");
    // In 2100: not due, so no tick clears it meanwhile.
    assert_eq!(ok(cli(&all, &["propose", "wake 4102444800000"])).trim(), "ok");
    for id in cluster.ids() {
        let endpoint = vec![cluster.addr(id).to_string()];
        let mut wake = String::new();
        for _ in 0..100 {
            // A node that has not applied the deploy yet asks the KV plugin.
            let o = cli(&endpoint, &["query", "--consistency", "e", "timer"]);
            wake = format!("{}{}", String::from_utf8_lossy(&o.stdout).trim(), String::from_utf8_lossy(&o.stderr).trim());
            if wake == "4102444800000" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(wake, "4102444800000", "node {id}");
        // It has applied the deploy, then.
        let info = ok(cli(&endpoint, &["plugin", "info"]));
        assert_eq!(info_field(&info, "contract"), "wasmraft:plugin@0.2.0 (timers)", "node {id}");
    }
}

async fn inject(endpoint: &str, key: &[u8]) {
    use wasmraft_proto::v1::InjectDivergentWriteRequest;
    use wasmraft_proto::v1::admin_client::AdminClient;
    let mut admin = AdminClient::connect(format!("http://{endpoint}")).await.unwrap();
    admin.inject_divergent_write(InjectDivergentWriteRequest { key: key.to_vec(), value: b"x".to_vec() }).await.unwrap();
}

#[test]
fn metrics_are_served_in_the_prometheus_format() {
    use std::io::{BufRead, BufReader, Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(BIN)
        .args(["dev", "--listen", "127.0.0.1:0", "--metrics-listen", &format!("127.0.0.1:{port}"), "--data-dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while !lines.next().expect("dev exited early").unwrap().contains("metrics:") {}
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    for node in 1..=3 {
        assert!(response.contains(&format!("wasmraft_applied_index{{node=\"{node}\"}}")), "{response}");
        assert!(response.contains(&format!("wasmraft_keyspace_divergences_total{{node=\"{node}\"}} 0")), "{response}");
    }
    assert!(response.contains("# TYPE wasmraft_is_leader gauge"), "{response}");
    assert!(response.contains("wasmraft_plugin_info{node=\"1\",name=\"wasmraft-kv\""), "{response}");
    let leaders = response.lines().filter(|l| l.starts_with("wasmraft_is_leader{") && l.ends_with(" 1")).count();
    assert_eq!(leaders, 1, "{response}");
}
