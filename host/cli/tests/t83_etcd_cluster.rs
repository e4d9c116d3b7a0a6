//! etcd's Cluster and Maintenance calls that change a cluster, driven by
//! etcdctl against `wasmraft run` processes: a member added through etcd's
//! API joins as a learner, is promoted once in sync, takes writes, and is
//! removed; leadership moves on request; defragment compacts every member's
//! store; errors carry etcd's texts.

mod cluster;

use std::time::{Duration, Instant};

use cluster::etcdctl::*;
use cluster::*;

/// The member id etcdctl printed (`Member 1a2b... added to cluster ...`).
fn member_id(out: &str) -> u64 {
    let hex = out.split_whitespace().nth(1).unwrap_or_else(|| panic!("no member id in {out}"));
    u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("member id {hex:?} in {out}"))
}

/// Retries `args` until etcdctl succeeds (at most `within`); the output.
async fn ok_within(endpoints: &str, args: &[&str], within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let (success, out, err) = etcdctl(endpoints, args, None);
        if success {
            return out;
        }
        assert!(Instant::now() < deadline, "etcdctl {args:?} kept failing: {out}{err}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_adds_promotes_and_removes_a_member_and_moves_the_leader() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");
    let dir = tempfile::tempdir().unwrap();
    ok(&all, &["put", "before", "1"]);

    // Add: etcdctl prints the new id and the settings to start it with.
    let free = free_addrs(1);
    let planned_peer = format!("http://{}", free[0]);
    let (success, _, err) = etcdctl(&all, &["member", "add", "n4", &format!("--peer-urls=http://{}", cluster.peer_addr(1))], None);
    assert!(!success && err.contains("etcdserver: Peer URLs already exists"), "{err}");
    let added = ok(&all, &["member", "add", "n4", &format!("--peer-urls={planned_peer}"), "--learner"]);
    assert!(added.starts_with("Member ") && added.contains(" added as learner to cluster "), "{added}");
    assert!(added.contains(&format!("ETCD_INITIAL_ADVERTISE_PEER_URLS=\"{planned_peer}\"")), "{added}");
    let id = member_id(&added);
    let list = ok(&all, &["member", "list"]);
    let line = list.lines().find(|l| l.starts_with(&format!("{id:x}, "))).unwrap_or_else(|| panic!("{list}"));
    assert!(line.contains(&planned_peer) && line.ends_with(", true"), "a learner at its peer URL: {line}");

    // The new node starts with that id; its real peer address replaces the
    // planned one through etcd's MemberUpdate.
    let (_node4, addr4, peer4) = cluster.spawn_joining(id, dir.path());
    let updated = ok(&all, &["member", "update", &format!("{id:x}"), &format!("--peer-urls=http://{peer4}")]);
    assert_eq!(updated.split_whitespace().collect::<Vec<_>>(), ["Member", &format!("{id:x}"), "updated", "in", "cluster", &format!("{:x}", json_number(&ok(&all, &["get", "x", "-w", "json"]), "cluster_id"))]);

    // Promote once it has caught up (etcd refuses a learner behind).
    let (success, _, err) = etcdctl(&all, &["member", "promote", &format!("{:x}", cluster.ids()[0])], None);
    assert!(!success && err.contains("etcdserver: can only promote a learner member"), "{err}");
    let promoted = ok_within(&all, &["member", "promote", &format!("{id:x}")], Duration::from_secs(30)).await;
    assert!(promoted.contains(" promoted in cluster "), "{promoted}");
    let list = ok(&all, &["member", "list"]);
    assert_eq!(list.lines().count(), 4, "{list}");
    assert!(list.lines().any(|l| l.starts_with(&format!("{id:x}, ")) && l.ends_with(", false")), "a voter now: {list}");
    assert_eq!(ok_within(&addr4, &["get", "before", "--print-value-only"], Duration::from_secs(10)).await, "1\n");
    ok(&addr4, &["put", "via-4", "x"]);
    assert_eq!(ok(&all, &["get", "via-4", "--print-value-only"]), "x\n");

    // Move the leader to another of the first three, then remove the new
    // member; the cluster goes on with three.
    let leader = cluster.leader().await;
    let target = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    let everyone = format!("{all},{addr4}");
    let moved = ok(&everyone, &["move-leader", &format!("{target:x}")]);
    assert!(moved.contains(&format!("Leadership transferred from {leader:x} to {target:x}")), "{moved}");
    assert_eq!(cluster.leader_among(&cluster.ids()).await, target);
    let removed = ok(&all, &["member", "remove", &format!("{id:x}")]);
    assert!(removed.split_whitespace().take(3).eq(["Member", &format!("{id:x}"), "removed"]), "{removed}");
    let (success, _, err) = etcdctl(&all, &["member", "remove", &format!("{id:x}")], None);
    assert!(!success && err.contains("etcdserver: member not found"), "{err}");
    assert_eq!(ok(&all, &["member", "list"]).lines().count(), 3);
    ok(&all, &["put", "after", "2"]);

    // Defragment every member.
    let defrag = ok(&all, &["defrag"]);
    assert_eq!(defrag.matches("Finished defragmenting etcd member").count(), 3, "{defrag}");
}


/// etcd's NOSPACE alarm goes through the log: raised by each member past
/// its quota (on a write it refuses, and by itself within a few seconds),
/// listed by every member, kept across a restart, and from its entry on
/// every member refuses puts at apply (here through the `wasmraft.v1` API,
/// which checks no quota), until `alarm disarm`, after which members still
/// past their quota raise it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_past_their_quota_raise_nospace_for_the_whole_cluster_until_disarmed() {
    let _serial = serial();
    // A quota every store exceeds.
    let mut cluster = Cluster::start_with(3, "[etcd]\nquota_backend_bytes = 1").await;
    let leader_id = cluster.leader().await;
    let leader = cluster.addr(leader_id).to_string();
    let follower_id = cluster.ids().into_iter().find(|&id| id != leader_id).unwrap();
    let follower = cluster.addr(follower_id).to_string();
    let (success, _, err) = etcdctl(&leader, &["put", "k", "v"], None);
    assert!(!success && err.contains("etcdserver: mvcc: database space exceeded"), "{err}");
    let all: String = cluster.ids().iter().map(|id| format!("memberID:{id} alarm:NOSPACE \n")).collect();
    let every_member_raised = |endpoint: String| {
        let all = all.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let listed = ok(&endpoint, &["alarm", "list"]);
                if listed == all {
                    return;
                }
                assert!(Instant::now() < deadline, "alarms listed: {listed:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    every_member_raised(leader.clone()).await;
    // Every member holds them, and refuses puts at apply.
    assert_eq!(ok(&follower, &["alarm", "list"]), all);
    let json = ok(&follower, &["endpoint", "status", "-w", "json"]);
    assert!(json.contains("\"dbSizeQuota\":1") && json.contains("alarm:NOSPACE"), "{json}");
    let refused = cluster.cli(&["put", "k", "v", "--endpoints", &follower]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("database space exceeded"), "{stderr}");
    // Reads and deletes go on; a txn that only reads too.
    ok(&leader, &["get", "k"]);
    assert_eq!(ok(&leader, &["del", "k"]), "0\n");
    // A restarted member still holds them.
    cluster.kill9(follower_id);
    cluster.restart(follower_id).await;
    assert_eq!(ok_within(&follower, &["alarm", "list"], Duration::from_secs(10)).await, all);
    // Disarming through a follower deactivates every listed alarm; the
    // stores are still past the quota, so the members raise theirs again.
    assert_eq!(ok(&follower, &["alarm", "disarm"]), all);
    every_member_raised(follower.clone()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_watchers_get_progress_notifications_and_idle_members_hash_alike() {
    let _serial = serial();
    let cluster = Cluster::start_with(3, "[etcd]\nwatch_progress_notify_interval = \"200ms\"").await;
    let all = cluster.endpoints(0).join(",");
    ok(&all, &["put", "a", "1"]);
    let watch = Watch::start(&all, &["nothing-here", "--progress-notify"]);
    watch.wait_for(Duration::from_secs(10), |l| l.iter().filter(|l| l.starts_with("progress notify: ")).count() >= 2).await;
    let lines = watch.stop();
    assert!(lines.iter().all(|l| l.starts_with("progress notify: ")), "{lines:?}");

    // etcd's Hash: the whole store of each member, equal once all applied
    // the same entries.
    let revision = |addr: &str| {
        let json = ok(addr, &["get", "a", "-w", "json", "--consistency=s"]);
        json.contains(&format!("\"revision\":{}", 2))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cluster.ids().iter().all(|&i| revision(cluster.addr(i))) {
        assert!(Instant::now() < deadline, "the members did not all apply revision 2");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut hashes = Vec::new();
    for id in cluster.ids() {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cluster.addr(id))).unwrap().connect().await.unwrap();
        let mut maintenance = wasmraft_proto::etcdserverpb::maintenance_client::MaintenanceClient::new(channel);
        hashes.push(maintenance.hash(wasmraft_proto::etcdserverpb::HashRequest {}).await.unwrap().into_inner().hash);
    }
    assert!(hashes.iter().all(|h| *h == hashes[0]) && hashes[0] != 0, "{hashes:?}");
}
