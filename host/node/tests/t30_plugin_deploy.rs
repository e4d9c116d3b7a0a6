//! Plugins deployed through the log, and keyspace hash checks, on three
//! nodes in one process over real RocksDB.

use std::path::PathBuf;
use std::time::Duration;

use wasmraft_node::{Consistency, Error, LocalCluster, Node, NodeConfig};

fn component(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{} is missing ({e}): run `cargo xtask plugins` first", path.display()))
}

fn fast(c: &mut NodeConfig) {
    c.tick_interval = Duration::from_millis(10);
    // Small snapshots, so that a node down for a while catches up from one.
    c.snapshot_entries = 50;
    c.hash_check_entries = 0;
}

/// Waits until `node` has applied `index`.
async fn applied(node: &Node, index: u64) {
    for _ in 0..500 {
        if node.status().applied >= index {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("node {} did not apply index {index}: {:?}", node.id(), node.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_plugin_is_contained_then_replaced_on_every_replica_at_one_index() {
    let dir = tempfile::tempdir().unwrap();
    let hostile = component("fixture_hostile");
    let mut cluster = LocalCluster::start(3, dir.path(), &hostile, fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    let down = cluster.nodes().into_iter().map(|n| n.id()).find(|&id| id != leader.id()).unwrap();

    // The hostile plugin's bad entries fail alone; the cluster keeps serving.
    leader.propose(b"put a 1".to_vec()).await.unwrap();
    for bad in ["trap", "loop", "oom", "put-then-trap x 1", "put-then-err y 1"] {
        let e = leader.propose(bad.as_bytes().to_vec()).await.unwrap_err();
        assert!(matches!(e, Error::PluginTrap(_) | Error::Rejected(_) | Error::Invalid(_)), "{bad}: {e:?}");
    }
    leader.propose(b"put b 2".to_vec()).await.unwrap();

    // A bad binary is refused before it reaches the log, and changes nothing.
    let before = leader.plugin();
    let e = leader.deploy_plugin(b"\0asm\x01\x00\x00\x00garbage".to_vec()).await.unwrap_err();
    assert!(matches!(&e, Error::Invalid(m) if m.contains("plugin refused")), "{e:?}");
    let e = leader.deploy_plugin(b"not wasm at all".to_vec()).await.unwrap_err();
    assert!(matches!(&e, Error::Invalid(m) if m.contains("not WebAssembly")), "{e:?}");
    assert_eq!(leader.plugin(), before);

    // One node is down during the deploy and many entries after it.
    cluster.stop(down);
    let counter = component("counter");
    let (info, deployed_at) = leader.deploy_plugin(counter.clone()).await.unwrap();
    assert_eq!(info.name, "counter");
    let mut last = 0;
    for _ in 0..120 {
        last = leader.propose_as(b"1".to_vec(), 0, 0).await.unwrap().index;
    }
    assert_eq!(leader.query(Vec::new(), Consistency::Linearizable).await.unwrap(), b"120");

    // It comes back, installs a snapshot taken after the deploy, and runs
    // the deployed plugin from the same index as the others.
    let restarted = cluster.restart(down).unwrap();
    applied(&restarted, last).await;
    for node in cluster.nodes() {
        applied(&node, last).await;
        let (plugin, at) = node.plugin();
        assert_eq!((plugin.sha256.as_str(), at), (info.sha256.as_str(), deployed_at), "node {}", node.id());
        assert_eq!(node.query(Vec::new(), Consistency::Eventual).await.unwrap(), b"120", "node {}", node.id());
    }

    // The deployed plugin survives a restart of every node (its bytes are
    // stored), whatever plugin the nodes are configured with.
    let ids: Vec<u64> = cluster.nodes().iter().map(Node::id).collect();
    drop((leader, restarted));
    for &id in &ids {
        cluster.stop(id);
    }
    for &id in &ids {
        cluster.restart(id).unwrap();
    }
    let leader = cluster.leader().await.unwrap();
    assert_eq!(leader.plugin().0.sha256, info.sha256);
    assert_eq!(leader.query(Vec::new(), Consistency::Linearizable).await.unwrap(), b"120");

    // And every replica's keyspace is identical.
    let index = leader.check_hashes().await.unwrap();
    for node in cluster.nodes() {
        applied(&node, index + 1).await;
    }
    wait_for_verdicts(&cluster, index).await;
    let hashes: Vec<_> = cluster.nodes().iter().map(|n| n.status().hash_check.unwrap()).collect();
    assert!(hashes.iter().all(|h| h.index == index && h.sha256 == hashes[0].sha256), "{hashes:?}");
    assert!(hashes.iter().all(|h| h.matches_leader == Some(true)), "{hashes:?}");
}

/// Waits until every node compared its hash at `index` with the leader's.
async fn wait_for_verdicts(cluster: &LocalCluster, index: u64) {
    for _ in 0..500 {
        if cluster.nodes().iter().all(|n| n.status().hash_check.is_some_and(|c| c.index == index && c.matches_leader.is_some())) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st: Vec<_> = cluster.nodes().iter().map(|n| n.status().hash_check).collect();
    panic!("not every node compared its hash at {index}: {st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_diverges_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), wasmraft_node::KV_PLUGIN, fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    let index = leader.check_hashes().await.unwrap();
    wait_for_verdicts(&cluster, index).await;
    assert!(cluster.nodes().iter().all(|n| n.status().divergence.is_none()));

    let follower = cluster.nodes().into_iter().find(|n| n.id() != leader.id()).unwrap();
    follower.inject_divergent_write(b"\x01sneaky", b"value").unwrap();
    let index = leader.check_hashes().await.unwrap();
    wait_for_verdicts(&cluster, index).await;
    for node in cluster.nodes() {
        let st = node.status();
        if node.id() == follower.id() {
            assert_eq!(st.hash_check.unwrap().matches_leader, Some(false));
            assert_eq!(st.divergences, 1);
            assert!(st.divergence.unwrap().contains(&format!("index {index}")));
        } else {
            assert_eq!(st.hash_check.unwrap().matches_leader, Some(true), "node {}", node.id());
            assert_eq!(st.divergences, 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_whose_migration_refuses_changes_nothing_on_any_replica() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), &component("counter"), fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    leader.propose(b"7".to_vec()).await.unwrap();
    let before: Vec<_> = cluster.nodes().iter().map(|n| n.plugin()).collect();

    // The bank's migrate refuses a keyspace another plugin wrote: the deploy
    // fails at its index on every replica, and the counter keeps running.
    let e = leader.deploy_plugin(component("bank")).await.unwrap_err();
    assert!(matches!(&e, Error::Invalid(m) if m.contains("migration failed") && m.contains("counter")), "{e:?}");
    let last = leader.propose_as(b"1".to_vec(), 0, 0).await.unwrap().index;
    for node in cluster.nodes() {
        applied(&node, last).await;
        assert_eq!(node.query(Vec::new(), Consistency::Eventual).await.unwrap(), b"8", "node {}", node.id());
    }
    let after: Vec<_> = cluster.nodes().iter().map(|n| n.plugin()).collect();
    assert_eq!(before, after);
}

/// A query reads a RocksDB snapshot and holds no lock while it runs: a
/// query that runs for seconds does not hold up writes, which apply and
/// are read back meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_query_does_not_hold_up_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = NodeConfig { data_dir: dir.path().join("node"), ..NodeConfig::default() };
    fast(&mut config);
    // Enough fuel for the `loop` query to run for seconds.
    config.plugin.fuel_per_entry = 5_000_000_000;
    config.plugin.watchdog_ms = 600_000;
    config.request_timeout = Duration::from_secs(120);
    let node = Node::start(config, &component("fixture_hostile")).unwrap();
    node.wait_for_leader().await.unwrap();

    let long = {
        let node = node.clone();
        tokio::spawn(async move { node.query(b"loop".to_vec(), Consistency::Eventual).await })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while node.queries_running() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the long query never started");
        tokio::task::yield_now().await;
    }
    for i in 0..5 {
        node.propose(format!("put k{i} v{i}").into_bytes()).await.unwrap();
        let read = node.query(format!("k{i}").into_bytes(), Consistency::Linearizable).await.unwrap();
        assert_eq!(read, format!("v{i}").into_bytes());
    }
    assert!(!long.is_finished(), "the writes waited for the long query");
    let e = long.await.unwrap().unwrap_err();
    assert!(matches!(e, Error::PluginTrap(ref m) if m.contains("fuel")), "{e:?}");
    node.shutdown();
}
