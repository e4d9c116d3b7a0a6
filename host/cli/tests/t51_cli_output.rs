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

    assert_eq!(text(&cluster.cli(&["del", "--all", "--yes"])), "4\n");
    assert_eq!(text(&cluster.cli(&["get", "--all"])), "");
}
