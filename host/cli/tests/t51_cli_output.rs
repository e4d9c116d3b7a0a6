//! What the CLI prints for people and for scripts, on three `wasmraft run`
//! processes: `get --all`/`--from-key`, `del --all` (never without
//! consent), `-w json` on get, status and members, and `status --all`,
//! which fails while a node is down.

mod cluster;

use cluster::*;

fn text(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_status_and_members_print_for_people_and_scripts() {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    for (k, v) in [("a", "1"), ("b/x", "2"), ("b/y", "3"), ("c", "4")] {
        text(&cluster.cli(&["put", k, v]));
    }
    assert_eq!(text(&cluster.cli(&["get", "--all"])), "a\n1\nb/x\n2\nb/y\n3\nc\n4\n");
    assert_eq!(text(&cluster.cli(&["get", "b/y", "--from-key"])), "b/y\n3\nc\n4\n");
    let json = text(&cluster.cli(&["get", "b/", "--prefix", "-w", "json"]));
    assert!(json.contains("\"count\": 2") && json.contains("\"key\": \"b/x\"") && json.contains("\"value\": \"3\""), "{json}");

    // del --all asks first: without a terminal it needs --yes.
    let refused = cluster.cli(&["del", "--all"]);
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("add --yes"));
    assert_eq!(text(&cluster.cli(&["get", "--all"])).lines().count(), 8, "nothing deleted");

    let status = text(&cluster.cli(&["status", "-w", "json"]));
    assert!(status.contains("\"role\":") && status.contains("\"leader_id\":"), "{status}");
    let members = text(&cluster.cli(&["members", "-w", "json"]));
    assert_eq!(members.matches("\"peer_address\"").count(), 3, "{members}");
    assert_eq!(members.matches("\"leader\": true").count(), 1, "{members}");

    // status --all: a row per endpoint; a node down makes it fail.
    let table = text(&cluster.cli(&["status", "--all"]));
    assert_eq!(table.lines().count(), 4, "{table}");
    assert_eq!(table.lines().filter(|l| l.ends_with(" ok")).count(), 3, "{table}");
    let down = cluster.ids()[2];
    cluster.kill9(down);
    let out = cluster.cli(&["status", "--all", "--timeout", "2s"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{table}");
    let row = table.lines().find(|l| l.starts_with(cluster.addr(down))).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("unreachable"), "{row}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not every node is healthy"));
    // members marks the dead one, asking each member itself (once the
    // others agree on a leader again, if the dead one led).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let members = text(&cluster.cli(&["members", "--timeout", "2s"]));
        let row = members.lines().find(|l| l.contains(cluster.addr(down))).unwrap_or_else(|| panic!("{members}"));
        assert!(row.contains("unreachable"), "{members}");
        if members.lines().filter(|l| l.ends_with(" ok")).count() == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the live members are not ok: {members}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    assert_eq!(text(&cluster.cli(&["del", "--all", "--yes"])), "4\n");
    assert_eq!(text(&cluster.cli(&["get", "--all"])), "");
}

/// `wasmraft watch` on a node that dies resumes on the next endpoint from
/// the revision after the last change it printed: every change once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resumes_on_another_node_without_missing_or_repeating_a_change() {
    use std::io::{BufRead, BufReader};
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let first = cluster.ids()[0];
    let mut order = vec![cluster.addr(first).to_string()];
    order.extend(cluster.ids().into_iter().skip(1).map(|i| cluster.addr(i).to_string()));
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_wasmraft"))
        .args(["watch", "w/", "--endpoints", &order.join(",")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = watch.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Until the watch runs, a marker goes unseen.
    let mut seen = Vec::new();
    for i in 0.. {
        text(&cluster.cli(&["put", "w/marker", &i.to_string()]));
        if let Ok(line) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            seen.push(line);
            break;
        }
        assert!(i < 100, "the watch never started");
    }
    text(&cluster.cli(&["put", "w/a", "1"]));
    // The node it watches on dies; changes go on meanwhile.
    cluster.kill9(first);
    for (k, v) in [("w/b", "2"), ("w/a", "3"), ("w/c", "4")] {
        text(&cluster.cli(&["put", k, v]));
    }
    text(&cluster.cli(&["del", "w/b"]));
    while !seen.iter().any(|l| l == "DELETE w/b") {
        let line = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap_or_else(|_| panic!("stuck after {seen:?}"));
        seen.push(line);
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains(&format!("watch on {} interrupted", cluster.addr(first))) && stderr.contains("resuming on"), "{stderr}");
    let after_marker: Vec<&str> = seen.iter().map(String::as_str).filter(|l| !l.starts_with("PUT w/marker")).collect();
    assert_eq!(after_marker, ["PUT w/a 1", "PUT w/b 2", "PUT w/a 3", "PUT w/c 4", "DELETE w/b"]);
}
