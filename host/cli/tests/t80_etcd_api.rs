//! etcd's v3 KV API on a three-node cluster, driven by etcd's own etcdctl
//! (v3.6.8, pinned and built by `scripts/setup.sh`) over real gRPC: the
//! outputs are compared with etcdctl's documented output formats, writes
//! work through any member, and errors carry etcd's texts.

mod cluster;

use std::io::Write;
use std::process::{Command, Stdio};

use cluster::*;

/// etcdctl, as `scripts/setup.sh` builds it.
fn etcdctl_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("WASMRAFT_ETCDCTL") {
        return p.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    let tools = std::env::var_os("WASMRAFT_TOOLS").map(std::path::PathBuf::from).unwrap_or_else(|| cache.join("wasmraft-tools"));
    tools.join("etcd-v3.6.8/etcdctl")
}

/// Runs etcdctl against `endpoints` with `args` (and `stdin`); returns
/// (success, stdout, stderr).
fn etcdctl(endpoints: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let path = etcdctl_path();
    assert!(path.exists(), "etcdctl not found at {}: run scripts/setup.sh (it builds it)", path.display());
    let mut child = Command::new(&path)
        .arg(format!("--endpoints={endpoints}"))
        .args(["--dial-timeout=3s", "--command-timeout=10s"])
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs etcdctl and expects it to succeed; returns its output.
fn ok(endpoints: &str, args: &[&str]) -> String {
    let (success, out, err) = etcdctl(endpoints, args, None);
    assert!(success, "etcdctl {args:?} failed:\n{out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_reads_and_writes_the_kv_plugin() {
    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let all = cluster.ids().iter().map(|&i| cluster.addr(i).to_string()).collect::<Vec<_>>().join(",");
    let at_follower = cluster.addr(follower).to_string();

    // put and get, through a follower (which forwards the write).
    assert_eq!(ok(&at_follower, &["put", "foo", "bar"]), "OK\n");
    assert_eq!(ok(&all, &["get", "foo"]), "foo\nbar\n");
    assert_eq!(ok(&at_follower, &["get", "foo", "--print-value-only"]), "bar\n");
    assert_eq!(ok(&at_follower, &["get", "foo", "--consistency=s"]), "foo\nbar\n");
    assert_eq!(ok(&all, &["get", "missing"]), "");

    // Prefix, limit, sort, keys-only, count-only, from-key.
    for (k, v) in [("app/a", "1"), ("app/b", "2"), ("app/c", "3")] {
        assert_eq!(ok(&all, &["put", k, v]), "OK\n");
    }
    assert_eq!(ok(&all, &["get", "app/", "--prefix"]), "app/a\n1\napp/b\n2\napp/c\n3\n");
    assert_eq!(ok(&all, &["get", "app/", "--prefix", "--limit=2"]), "app/a\n1\napp/b\n2\n");
    assert_eq!(
        ok(&all, &["get", "app/", "--prefix", "--sort-by=KEY", "--order=DESCEND"]),
        "app/c\n3\napp/b\n2\napp/a\n1\n"
    );
    assert_eq!(ok(&all, &["get", "app/", "--prefix", "--keys-only"]), "app/a\n\napp/b\n\napp/c\n\n");
    assert_eq!(ok(&all, &["get", "app/b", "--from-key", "--keys-only"]), "app/b\n\napp/c\n\nfoo\n\n");
    assert_eq!(ok(&all, &["get", "app/", "app/c"]), "app/a\n1\napp/b\n2\n", "a range [key, end)");

    // JSON output carries etcd's header: cluster, member, revision, term.
    let json = ok(&all, &["get", "app/", "--prefix", "-w", "json"]);
    for field in ["\"cluster_id\":", "\"member_id\":", "\"revision\":", "\"raft_term\":", "\"count\":3"] {
        assert!(json.contains(field), "no {field} in {json}");
    }
    let status = status_of(cluster.addr(leader), None).await.unwrap();
    assert!(json.contains(&format!("\"raft_term\":{}", status.term)), "{json}");
    let fields = ok(&all, &["get", "app/", "--prefix", "--count-only", "-w", "fields"]);
    assert!(fields.contains("\"Count\" : 3") && !fields.contains("\"Key\""), "{fields}");
    let json = ok(&all, &["get", "foo", "-w", "json"]);
    assert!(json.contains("\"version\":1") && json.contains("\"create_revision\":"), "{json}");

    // A txn from stdin, as etcdctl's interactive mode reads it: compares,
    // a blank line, the success ops, a blank line, the failure ops.
    let (success, out, err) = etcdctl(&at_follower, &["txn"], Some("value(\"foo\") = \"bar\"\n\nput foo bar2\n\nput foo nope\n\n"));
    assert!(success, "{out}{err}");
    assert_eq!(out, "SUCCESS\n\nOK\n");
    let (_, out, _) = etcdctl(&all, &["txn"], Some("value(\"foo\") = \"bar\"\n\nput foo again\n\nget foo\n\n"));
    assert_eq!(out, "FAILURE\n\nfoo\nbar2\n", "the compare fails: the failure branch ran");
    let (_, out, _) = etcdctl(&all, &["txn"], Some("version(\"foo\") = \"2\"\n\nget foo\n\n\n"));
    assert_eq!(out, "SUCCESS\n\nfoo\nbar2\n", "a read-only txn");

    // Deletes: by prefix (the count), and one key with its previous value.
    assert_eq!(ok(&all, &["del", "app/", "--prefix"]), "3\n");
    assert_eq!(ok(&at_follower, &["del", "foo", "--prev-kv"]), "1\nfoo\nbar2\n");
    assert_eq!(ok(&all, &["get", "", "--prefix"]), "", "nothing left");

    // etcd's errors, with etcd's texts.
    let (success, _, err) = etcdctl(&all, &["get", "foo", "--rev=1"], None);
    assert!(!success && err.contains("etcdserver: mvcc: required revision has been compacted"), "{err}");
    let (success, _, err) = etcdctl(&all, &["put", "foo", "x", "--lease=1234"], None);
    assert!(!success && err.contains("etcdserver: requested lease not found"), "{err}");
    let (success, _, err) = etcdctl(&all, &["put", "", "x"], None);
    assert!(!success && err.contains("key is not provided"), "{err}");
}
