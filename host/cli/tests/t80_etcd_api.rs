//! etcd's v3 KV API on a three-node cluster, driven by etcd's own etcdctl
//! (v3.6.8, pinned and built by `scripts/setup.sh`) over real gRPC: the
//! outputs are compared with etcdctl's documented output formats, writes
//! work through any member, and errors carry etcd's texts.

mod cluster;

use cluster::etcdctl::*;
use cluster::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_reads_and_writes_the_kv_plugin() {
    let _serial = serial();
    let cluster = Cluster::start_with(3, "").await;
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let all = cluster.endpoints(0).join(",");
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
    let (success, _, err) = etcdctl(&all, &["get", "foo", "--rev=100000"], None);
    assert!(!success && err.contains("etcdserver: mvcc: required revision is a future revision"), "{err}");
    let (success, _, err) = etcdctl(&all, &["put", "foo", "x", "--lease=1234"], None);
    assert!(!success && err.contains("etcdserver: requested lease not found"), "{err}");
    let (success, _, err) = etcdctl(&all, &["put", "", "x"], None);
    assert!(!success && err.contains("key is not provided"), "{err}");

    // Members, endpoint status and health, as etcd prints them.
    let members = ok(&all, &["member", "list"]);
    assert_eq!(members.lines().count(), 3, "{members}");
    for id in cluster.ids() {
        let line = members.lines().find(|l| l.starts_with(&format!("{id:x}, "))).unwrap_or_else(|| panic!("no member {id}:\n{members}"));
        assert!(line.contains(&format!("node-{id}")) && line.contains(&format!("http://{}", cluster.addr(id))), "{line}");
        assert!(line.ends_with(", false"), "not a learner: {line}");
    }
    let status = ok(&all, &["endpoint", "status"]);
    assert_eq!(status.lines().count(), 3, "{status}");
    for id in cluster.ids() {
        assert!(status.lines().any(|l| l.starts_with(&format!("{}, {id:x}, 3.6.0, ", cluster.addr(id)))), "node {id}:\n{status}");
    }
    let leaders: Vec<&str> = status.lines().filter(|l| l.contains(", true, false, ")).collect();
    assert_eq!(leaders.len(), 1, "exactly one leader:\n{status}");
    assert!(leaders[0].starts_with(cluster.addr(leader)), "{status}");
    let (success, out, err) = etcdctl(&all, &["endpoint", "health"], None);
    assert!(success, "{out}{err}");
    assert_eq!(format!("{out}{err}").matches("is healthy").count(), 3, "{out}{err}");

    // Watch: etcdctl prints each event (type, then the previous and new
    // pairs with --prev-kv), in revision order, only those under the prefix.
    let watch = Watch::start(&at_follower, &["app/", "--prefix", "--prev-kv"]);
    let seen = |needle: &str| watch.lines().iter().any(|l| l == needle);
    // Until the watch is in place, puts of a marker key go unseen.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    for i in 0.. {
        ok(&all, &["put", "app/0", &format!("marker-{i}")]);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if seen("app/0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the watch never started");
    }
    ok(&all, &["put", "app/a", "1"]);
    ok(&at_follower, &["put", "app/a", "2"]);
    ok(&all, &["put", "other/x", "unseen"]);
    ok(&all, &["del", "app/a"]);
    ok(&all, &["put", "app/b", "3"]);
    watch.wait_for(std::time::Duration::from_secs(10), |lines| lines.iter().any(|l| l == "3")).await;
    let lines = watch.stop();
    let first = lines.windows(2).position(|w| w[0] == "PUT" && w[1] == "app/a").expect("the first event");
    assert_eq!(
        lines[first..].join("\n"),
        ["PUT", "app/a", "1", "PUT", "app/a", "1", "app/a", "2", "DELETE", "app/a", "2", "app/a", "", "PUT", "app/b", "3"].join("\n")
    );
}
