//! Three nodes in one process, over real RocksDB and the KV plugin.

use std::time::Duration;

use prost::Message;
use wasmraft_node::{Consistency, KV_PLUGIN, LocalCluster, Node, NodeConfig};
use wasmraft_proto::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};

fn fast(c: &mut NodeConfig) {
    c.tick_interval = Duration::from_millis(10);
}

fn put(k: &str, v: &str) -> Vec<u8> {
    RequestOp { request: Some(Request::RequestPut(PutRequest { key: k.into(), value: v.into(), ..Default::default() })) }
        .encode_to_vec()
}

async fn get(node: &Node, k: &str, c: Consistency) -> Option<Vec<u8>> {
    let req = RequestOp { request: Some(Request::RequestRange(RangeRequest { key: k.into(), ..Default::default() })) };
    let bytes = node.query(req.encode_to_vec(), c).await.expect("query");
    match ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() {
        Response::ResponseRange(mut r) => r.kvs.pop().map(|kv| kv.value),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_replicate_and_every_node_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    for i in 0..50 {
        leader.propose(put(&format!("k{i}"), "v")).await.unwrap();
    }
    for node in cluster.nodes() {
        // Linearizable on a follower: a read index from the leader, then wait.
        assert_eq!(get(&node, "k49", Consistency::Linearizable).await, Some(b"v".to_vec()), "node {}", node.id());
    }
    // Followers refuse lease reads of their own: they fall back to ReadIndex.
    for node in cluster.nodes() {
        assert_eq!(get(&node, "k0", Consistency::Lease).await, Some(b"v".to_vec()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_takes_over_and_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, fast).unwrap();
    let old = cluster.leader().await.unwrap();
    for i in 0..20 {
        old.propose(put(&format!("before{i}"), "1")).await.unwrap();
    }
    cluster.stop(old.id());
    let new = cluster.leader().await.unwrap();
    assert_ne!(new.id(), old.id());
    for i in 0..20 {
        assert_eq!(get(&new, &format!("before{i}"), Consistency::Linearizable).await, Some(b"1".to_vec()));
    }
    new.propose(put("after", "2")).await.unwrap();
    for node in cluster.nodes() {
        assert_eq!(get(&node, "after", Consistency::Linearizable).await, Some(b"2".to_vec()));
    }
}

/// A follower that was down while the leader compacted its log catches up
/// from a snapshot: state, sessions and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_follower_catches_up_from_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, |c| {
        fast(c);
        c.snapshot_entries = 100;
    })
    .unwrap();
    let leader = cluster.leader().await.unwrap();
    let lagging = (1..=3).find(|id| *id != leader.id()).unwrap();
    cluster.stop(lagging);
    for i in 0..450 {
        leader.propose_as(put(&format!("k{i:03}"), &format!("v{i}")), 7, i + 1).await.unwrap();
    }
    let (first, _) = leader.storage().log_bounds();
    assert!(first.0 > 300, "the leader compacted its log (first index {first})");

    let node = cluster.restart(lagging).unwrap();
    let applied_on_leader = leader.status().applied;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while node.status().applied < applied_on_leader {
        assert!(tokio::time::Instant::now() < deadline, "follower stuck at {}", node.status().applied);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(node.storage().snapshot().unwrap().is_some(), "the follower installed a snapshot");
    for i in [0, 123, 449] {
        assert_eq!(get(&node, &format!("k{i:03}"), Consistency::Eventual).await, Some(format!("v{i}").into_bytes()));
    }
    // Its client sessions came along: a retry of an applied sequence is
    // answered, not applied again, even through the new node.
    let leader = cluster.leader().await.unwrap();
    let retry = leader.propose_as(put("k449", "changed"), 7, 450).await.unwrap();
    assert!(!retry.response.is_empty());
    assert_eq!(get(&node, "k449", Consistency::Linearizable).await, Some(b"v449".to_vec()));
    // And it keeps replicating normally afterwards.
    leader.propose(put("after", "x")).await.unwrap();
    assert_eq!(get(&node, "after", Consistency::Linearizable).await, Some(b"x".to_vec()));
}

/// Large values bring the snapshot forward: the log is compacted once the
/// commands applied since the last snapshot pass `snapshot_log_bytes`, long
/// before `snapshot_entries`, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_commands_bring_the_snapshot_forward() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, |c| {
        fast(c);
        c.snapshot_entries = 100_000;
        c.snapshot_log_bytes = 256 << 10;
    })
    .unwrap();
    let leader = cluster.leader().await.unwrap();
    let value = "v".repeat(16 << 10);
    // 10 puts of 16 KiB: 160 KiB, under the bound.
    for i in 0..10 {
        leader.propose(put(&format!("big{i:02}"), &value)).await.unwrap();
    }
    assert!(leader.storage().snapshot().unwrap().is_none(), "no snapshot below the byte bound");
    // 10 more pass 256 KiB.
    for i in 10..20 {
        leader.propose(put(&format!("big{i:02}"), &value)).await.unwrap();
    }
    let snapshot = leader.storage().snapshot().unwrap().expect("a snapshot past the byte bound");
    assert!(snapshot.last.index.0 < 100, "taken by bytes, at index {}", snapshot.last.index);
    let (first, _) = leader.storage().log_bounds();
    assert!(first.0 > 10, "the log was compacted (first index {first})");
}

/// With memtables past a few MiB, a due snapshot first has RocksDB flush them
/// in the background, and is taken once that is done: it still comes, at a
/// later index, and compacts the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_flushes_ahead_still_comes() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, |c| {
        fast(c);
        c.snapshot_entries = 100_000;
        c.snapshot_log_bytes = 4 << 20;
    })
    .unwrap();
    let leader = cluster.leader().await.unwrap();
    let value = "v".repeat(64 << 10);
    // 64 puts of 64 KiB pass the byte bound with about 12 MiB in memtables
    // (each value is in the log, the current record and the history).
    let mut i = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while leader.storage().snapshot().unwrap().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no snapshot after {i} puts of 64 KiB");
        leader.propose(put(&format!("big{i:04}"), &value)).await.unwrap();
        i += 1;
    }
    assert!(i > 64, "the snapshot came after its flush, not at the bound ({i} puts)");
    let (first, _) = leader.storage().log_bounds();
    assert!(first.0 > 64, "the log was compacted (first index {first})");
}

/// A retry that reaches a new leader after the old one applied the command
/// is answered from the replicated session table: applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_leader_change_applies_once() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, fast).unwrap();
    let old = cluster.leader().await.unwrap();
    let first = old.propose_as(put("once", "1"), 99, 1).await.unwrap();
    cluster.stop(old.id());
    drop(old);
    let new = cluster.leader().await.unwrap();
    let retry = new.propose_as(put("once", "1"), 99, 1).await.unwrap();
    assert_eq!(retry, first, "the retry gets the first outcome, at the first index");
    let req = RequestOp { request: Some(Request::RequestRange(RangeRequest { key: "once".into(), ..Default::default() })) };
    let bytes = new.query(req.encode_to_vec(), Consistency::Linearizable).await.unwrap();
    let Response::ResponseRange(r) = ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() else { panic!() };
    assert_eq!(r.kvs[0].version, 1, "written once");
}

/// A leader cut off from the majority stops serving linearizable and lease
/// reads and commits nothing; the majority elects a new leader and goes on;
/// after healing, the old leader follows and has every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_serves_no_stale_reads_and_rejoins_after_healing() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, |c| {
        fast(c);
        c.request_timeout = Duration::from_millis(500);
    })
    .unwrap();
    let old = cluster.leader().await.unwrap();
    old.propose(put("k", "before")).await.unwrap();
    cluster.isolate(old.id());

    // The majority moves on.
    let others: Vec<Node> = cluster.nodes().into_iter().filter(|n| n.id() != old.id()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let new = loop {
        if let Some(n) = others.iter().find(|n| n.status().role == wasmraft_node::Role::Leader) {
            break n.clone();
        }
        assert!(tokio::time::Instant::now() < deadline, "the majority elected no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    new.propose(put("k", "after")).await.unwrap();

    // The isolated node never answers with the old value at a strong level.
    for c in [Consistency::Linearizable, Consistency::Lease] {
        let req = RequestOp { request: Some(Request::RequestRange(RangeRequest { key: "k".into(), ..Default::default() })) };
        match old.query(req.encode_to_vec(), c).await {
            Ok(bytes) => {
                let Response::ResponseRange(r) = ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() else { panic!() };
                assert_ne!(r.kvs[0].value, b"before", "a stale {c:?} read from the isolated node");
            }
            Err(e) => assert!(matches!(e, wasmraft_node::Error::Timeout | wasmraft_node::Error::NotLeader { .. }), "{e}"),
        }
    }
    // It cannot commit either.
    assert!(old.propose(put("lost", "x")).await.is_err(), "an isolated node committed a write");

    cluster.heal();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if old.status().role != wasmraft_node::Role::Leader {
            if let Ok(bytes) = old
                .query(
                    RequestOp { request: Some(Request::RequestRange(RangeRequest { key: "k".into(), ..Default::default() })) }
                        .encode_to_vec(),
                    Consistency::Linearizable,
                )
                .await
            {
                let Response::ResponseRange(r) = ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() else { panic!() };
                if r.kvs[0].value == b"after" {
                    break;
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the old leader did not rejoin");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(get(&old, "lost", Consistency::Linearizable).await, None, "the isolated write never applied");
}

/// A leader cut off from its followers keeps its role until check-quorum
/// ends it (one election timeout); a read waiting on it meanwhile gets a
/// timeout, and its ReadIndex round is dropped then, not kept until the
/// leader steps down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_round_that_cannot_complete_expires_after_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, |c| {
        fast(c);
        // 3 s election timeout, 200 ms request timeout.
        c.election_ticks = 300;
        c.request_timeout = Duration::from_millis(200);
    })
    .unwrap();
    // Waits for a leader in steps of the (short) request timeout.
    let mut tries = 0;
    let leader = loop {
        match cluster.leader().await {
            Ok(l) => break l,
            Err(e) => {
                tries += 1;
                assert!(tries < 100, "no leader: {e}");
            }
        }
    };
    // The short request timeout can pass on a busy machine: retry.
    let mut tries = 0;
    while let Err(e) = leader.propose_as(put("a", "1"), 7, 1).await {
        tries += 1;
        assert!(tries < 50, "{e}");
    }
    cluster.isolate(leader.id());

    let req = RequestOp { request: Some(Request::RequestRange(RangeRequest { key: b"a".to_vec(), ..Default::default() })) };
    let e = leader.query(req.encode_to_vec(), Consistency::Linearizable).await.unwrap_err();
    assert_eq!(e, wasmraft_node::Error::Timeout);
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while leader.status().pending_read_rounds > 0 {
        assert!(std::time::Instant::now() < deadline, "the read round was kept: {:?}", leader.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(leader.status().role, wasmraft_raft::Role::Leader, "the round was dropped only by a step-down");
    cluster.heal();
}

/// Both followers' disks stall each synced write for five election
/// timeouts. Their Raft loops go on answering heartbeats while the writes
/// run, so the leader keeps its quorum and its term, and every write
/// commits (slowly). A loop that waited on its fsync would fall silent and
/// the leader would step down at its next check-quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_with_stalled_fsyncs_keep_their_leader() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    leader.propose(put("warm", "up")).await.unwrap();
    let term = leader.status().term;
    let election_timeout = Duration::from_millis(10 * 10);
    for node in cluster.nodes() {
        if node.id() != leader.id() {
            node.storage().stall_synced_appends(5 * election_timeout);
        }
    }
    for i in 0..4 {
        leader.propose(put(&format!("slow{i}"), "v")).await.unwrap();
    }
    for node in cluster.nodes() {
        let s = node.status();
        assert_eq!((s.term, s.leader.map(|l| l.0)), (term, Some(leader.id())), "node {}: {s:?}", node.id());
    }
    assert_eq!(get(&leader, "slow3", Consistency::Linearizable).await, Some(b"v".to_vec()));
}

/// The leader's disk hangs in a synced write. It stops heartbeating once the
/// write has been in flight for an election timeout, so that its followers
/// elect another leader rather than follow one that commits nothing; the
/// new leader serves writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_fsync_hangs_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), KV_PLUGIN, fast).unwrap();
    let old = cluster.leader().await.unwrap();
    old.propose(put("warm", "up")).await.unwrap();
    let term = old.status().term;
    old.storage().stall_synced_appends(Duration::from_secs(3));
    let stuck = old.clone();
    let pending = tokio::spawn(async move { stuck.propose(put("stuck", "v")).await });
    // Well within the 3 s stall: 100 ms election timeouts.
    let deadline = std::time::Instant::now() + Duration::from_millis(1500);
    let new = loop {
        let led = cluster.nodes().into_iter().find(|n| {
            let s = n.status();
            n.id() != old.id() && s.role == wasmraft_node::Role::Leader && s.term > term
        });
        if let Some(n) = led {
            break n;
        }
        assert!(std::time::Instant::now() < deadline, "no other node took over from {}: {:?}", old.id(), old.status());
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    old.storage().stall_synced_appends(Duration::ZERO);
    new.propose(put("after", "v")).await.unwrap();
    assert_eq!(get(&new, "after", Consistency::Linearizable).await, Some(b"v".to_vec()));
    let _ = pending.await.unwrap();
}
