//! etcd's leases, driven by etcdctl against `wasmraft run` processes: grant,
//! attach keys with `put --lease`, time-to-live, list and revoke (its keys
//! go at once); a key on a 2 s lease lives while `etcdctl lease
//! keep-alive` runs, also across a leader kill, and is gone within the
//! documented bound (TTL plus an election timeout, plus a margin for the
//! machine) once the keep-alive process is killed.

mod cluster;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::etcdctl::*;
use cluster::*;

/// The lease id etcdctl printed (`lease 694d77aa9e38260f granted with TTL(10s)`).
fn lease_id(out: &str) -> String {
    let id = out.split_whitespace().nth(1).unwrap_or_else(|| panic!("no lease id in {out}"));
    assert!(u64::from_str_radix(id, 16).is_ok(), "{out}");
    id.to_string()
}

/// `etcdctl lease keep-alive ID`, running until killed.
struct KeepAlive(Child);

impl KeepAlive {
    fn start(endpoints: &str, id: &str) -> KeepAlive {
        let child = Command::new(etcdctl_path())
            .arg(format!("--endpoints={endpoints}"))
            .args(["lease", "keep-alive", id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run etcdctl lease keep-alive");
        KeepAlive(child)
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exists(endpoints: &str, key: &str) -> bool {
    !ok(endpoints, &["get", key]).is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_leases_grant_attach_revoke_and_expire_once_keep_alives_stop() {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");

    // Grant, attach, inspect, revoke: the keys go with the lease.
    let id = lease_id(&ok(&all, &["lease", "grant", "60"]));
    ok(&all, &["put", "svc/a", "1", &format!("--lease={id}")]);
    ok(&all, &["put", "svc/b", "2", &format!("--lease={id}")]);
    ok(&all, &["put", "plain", "3"]);
    let ttl = ok(&all, &["lease", "timetolive", &id, "--keys"]);
    assert!(ttl.contains(&format!("lease {id} granted with TTL(60s)")) && ttl.contains("attached keys([svc/a svc/b])"), "{ttl}");
    assert!(ok(&all, &["lease", "list"]).contains(&id));
    assert!(ok(&all, &["lease", "revoke", &id]).contains(&format!("lease {id} revoked")));
    assert_eq!(ok(&all, &["get", "svc/", "--prefix"]), "", "the lease's keys are gone");
    assert!(exists(&all, "plain"));
    let ttl = ok(&all, &["lease", "timetolive", &id]);
    assert!(ttl.contains("already expired"), "{ttl}");
    let (success, _, err) = etcdctl(&all, &["lease", "revoke", &id], None);
    assert!(!success && err.contains("requested lease not found"), "{err}");

    // A 2 s lease lives while keep-alives flow, also across a leader kill.
    let id = lease_id(&ok(&all, &["lease", "grant", "2"]));
    ok(&all, &["put", "alive", "1", &format!("--lease={id}")]);
    let keep_alive = KeepAlive::start(&all, &id);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(exists(&all, "alive"), "kept alive past twice its TTL");
    let leader = cluster.leader().await;
    cluster.kill9(leader);
    let rest: Vec<String> = cluster.ids().into_iter().filter(|&i| i != leader).map(|i| cluster.addr(i).to_string()).collect();
    let rest = rest.join(",");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(exists(&rest, "alive"), "kept alive across the leader kill");

    // Keep-alives stop: gone within TTL + election timeout (3 s), with
    // 5 s of margin for a loaded machine.
    drop(keep_alive);
    let stopped = Instant::now();
    while exists(&rest, "alive") {
        assert!(stopped.elapsed() < Duration::from_secs(8), "still there {:?} after its keep-alives stopped", stopped.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gone = stopped.elapsed();
    // etcd's client sends a keep-alive every TTL/3: the last one came at
    // most 0.67 s before the kill, and the lease holds 2 s from it.
    assert!(gone >= Duration::from_millis(1300), "expired {gone:?} after the keep-alives stopped: before its TTL");
    println!("a 2 s lease expired {gone:?} after its keep-alives stopped");
}

/// `wasmraft lease` and `wasmraft put --lease`, printed as etcdctl prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasmraft_lease_commands_grant_attach_keep_alive_and_revoke() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");
    let wasmraft = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wasmraft")).args(args).env("WASMRAFT_ENDPOINTS", &all).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (success, out, err) = wasmraft(&["lease", "grant", "30"]);
    assert!(success && out.ends_with(" granted with TTL(30s)\n"), "{out}{err}");
    let id = lease_id(&out);
    assert_eq!(wasmraft(&["put", "svc/web", "10.0.0.7", "--lease", &id]).1, "OK\n");
    let (_, ttl, _) = wasmraft(&["lease", "ttl", &id, "--keys"]);
    assert!(ttl.starts_with(&format!("lease {id} granted with TTL(30s), remaining(")) && ttl.ends_with("attached keys([svc/web])\n"), "{ttl}");
    assert_eq!(wasmraft(&["lease", "list"]).1, format!("found 1 leases\n{id}\n"));
    assert_eq!(wasmraft(&["lease", "keep-alive", &id, "--once"]).1, format!("lease {id} keepalived with TTL(30)\n"));
    // etcdctl sees the same lease.
    assert!(ok(&all, &["lease", "timetolive", &id, "--keys"]).contains("attached keys([svc/web])"));
    assert_eq!(wasmraft(&["lease", "revoke", &id]).1, format!("lease {id} revoked\n"));
    assert_eq!(ok(&all, &["get", "svc/web"]), "", "revoked with its lease");
    assert_eq!(wasmraft(&["lease", "ttl", &id]).1, format!("lease {id} already expired\n"));
    let (success, _, err) = wasmraft(&["put", "x", "1", "--lease", &id]);
    assert!(!success && err.contains("requested lease not found"), "{err}");
    let (success, _, err) = wasmraft(&["lease", "keep-alive", &id]);
    assert!(!success && err.contains("expired or was revoked"), "{err}");
}
