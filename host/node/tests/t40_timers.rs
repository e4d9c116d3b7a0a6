//! Timers on three nodes in one process over real RocksDB, with the
//! `fixture_timer` plugin (`wasmraft:plugin@0.2.0`): the leader proposes a
//! tick when the plugin's wake-up comes due, every replica runs it at the
//! same index, log time never goes back, and a new leader takes over the
//! wake-up from the replicated state.

use std::path::PathBuf;
use std::time::Duration;

use wasmraft_node::{Consistency, LocalCluster, Node, NodeConfig};

fn component(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components").join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{} is missing ({e}): run `cargo xtask plugins` first", path.display()))
}

fn fast(c: &mut NodeConfig) {
    c.tick_interval = Duration::from_millis(10);
    c.hash_check_entries = 0;
}

/// `last-tick` on `node` (its own applied state): (index, log time).
async fn last_tick(node: &Node) -> Option<(u64, u64)> {
    let answer = node.query(b"last-tick".to_vec(), Consistency::Eventual).await.ok()?;
    let text = String::from_utf8(answer).ok()?;
    let (index, now) = text.split_once(' ')?;
    Some((index.parse().ok()?, now.parse().ok()?))
}

/// Waits until `node` shows a tick after `after` (an index); returns it.
async fn tick_after(node: &Node, after: u64) -> (u64, u64) {
    for _ in 0..500 {
        if let Some(t) = last_tick(node).await.filter(|t| t.0 > after) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("node {} saw no tick after index {after}: {:?}", node.id(), node.status());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_come_due_on_every_replica_and_go_on_under_a_new_leader() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = LocalCluster::start(3, dir.path(), &component("fixture_timer"), fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    assert_eq!(last_tick(&leader).await, None, "no wake-up, no tick");

    // A wake-up already past is due at once; then one every 50 ms of log time.
    for command in ["every 50", "mode again", "wake 0"] {
        assert_eq!(leader.propose(command.as_bytes().to_vec()).await.unwrap(), b"ok");
    }
    let mut seen = vec![tick_after(&leader, 0).await];
    while seen.len() < 4 {
        let last = seen[seen.len() - 1];
        seen.push(tick_after(&leader, last.0).await);
    }
    for pair in seen.windows(2) {
        assert!(pair[1].1 >= pair[0].1 + 50, "ticks {:?}: no sooner than the wake-up", seen);
    }

    // The leader stops; another one takes the wake-up over from the log.
    let old = leader.id();
    let before = seen[seen.len() - 1];
    drop(leader);
    cluster.stop(old);
    // It left a note of log time against this machine's boot clock, which
    // measures its downtime when it comes back (wall-clock steps aside).
    {
        let storage = wasmraft_storage::Storage::open(&dir.path().join(format!("node-{old}")), old, Default::default()).unwrap();
        let note = storage.log_time_note().unwrap().expect("a node that saw stamps leaves a note");
        assert!(note.boot.is_some_and(|b| b.ms > 0), "no boot time in {note:?}");
    }
    let leader = cluster.leader().await.unwrap();
    assert_ne!(leader.id(), old);
    let after = tick_after(&leader, before.0 + 1).await;
    assert!(after.1 > before.1, "log time went back across leaders: {before:?} then {after:?}");

    // Ticks stop when the plugin cancels its wake-up; the old leader comes
    // back, and every replica ends with the same last tick.
    assert_eq!(leader.propose(b"mode ok".to_vec()).await.unwrap(), b"ok");
    let stopped = tick_after(&leader, after.0).await;
    cluster.restart(old).unwrap();
    let end = leader.status().last_index;
    for node in cluster.nodes() {
        for _ in 0..500 {
            if node.status().applied >= end {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(node.status().applied >= end, "node {} did not catch up", node.id());
        assert_eq!(last_tick(&node).await, Some(stopped), "node {}", node.id());
        assert_eq!(node.query(b"timer".to_vec(), Consistency::Eventual).await.unwrap(), b"none");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(last_tick(&leader).await, Some(stopped), "no tick without a wake-up");
}

/// A tick the plugin fails writes nothing of the plugin's, keeps the
/// wake-up, and is proposed again only after a second: a broken plugin
/// costs one entry a second, not a stream of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tick_is_retried_a_second_later() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), &component("fixture_timer"), fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    for command in ["mode fail", "wake 0"] {
        assert_eq!(leader.propose(command.as_bytes().to_vec()).await.unwrap(), b"ok");
    }
    let failures = || leader.metrics().tick_failures.load(Relaxed);
    let mut first = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while failures() < 2 {
        if first.is_none() && failures() == 1 {
            first = Some(std::time::Instant::now());
        }
        assert!(std::time::Instant::now() < deadline, "no retry: {} failures", failures());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let first = first.expect("the first failure was seen before the second");
    assert!(first.elapsed() >= Duration::from_millis(900), "retried after {:?}", first.elapsed());
    assert_eq!(last_tick(&leader).await, None, "a failed tick leaves no write of the plugin's");
    assert_eq!(leader.query(b"timer".to_vec(), Consistency::Eventual).await.unwrap(), b"0", "the wake-up stays");
}

/// The `reminders` example, built with the SDK's `timers` feature: a
/// reminder whose time has come fires on every replica and is gone, a later
/// one waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reminders_example_fires_what_is_due_on_every_replica() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), &component("reminders"), fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    assert_eq!(leader.plugin().0.contract, wasmraft_node::CONTRACT_V2);
    let now = leader.propose(b"remind 0 already due".to_vec()).await.unwrap();
    let later = leader.propose(b"remind 4102444800000 in 2100".to_vec()).await.unwrap();
    let expected = format!("{} 4102444800000 in 2100\n", String::from_utf8(later).unwrap());
    for node in cluster.nodes() {
        let mut pending = String::new();
        for _ in 0..500 {
            let answer = node.query(b"pending".to_vec(), Consistency::Eventual).await.unwrap();
            pending = String::from_utf8(answer).unwrap();
            if pending == expected {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(pending, expected, "node {}: {} should have fired", node.id(), String::from_utf8_lossy(&now));
    }
}

/// Keep-alives go to the leader, ride the next tick in batches (not an
/// entry each), and come back with the plugin's answer once that tick
/// applied; a follower refuses them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_ride_ticks_in_batches_and_get_the_plugins_answer() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().unwrap();
    let cluster = LocalCluster::start(3, dir.path(), &component("fixture_timer"), fast).unwrap();
    let leader = cluster.leader().await.unwrap();
    assert_eq!(leader.propose(b"lease a".to_vec()).await.unwrap(), b"ok");
    let renewed = leader.renew(b"a".to_vec()).await.unwrap();
    assert_eq!(renewed.response, b"a");
    let refused = leader.renew(b"b".to_vec()).await.unwrap_err();
    assert!(matches!(&refused, wasmraft_node::Error::Rejected(m) if m.contains("not leased")), "{refused:?}");
    // A key too large for a tick's renewal record is refused at the door.
    let e = leader.renew(vec![7; 70_000]).await.unwrap_err();
    assert!(matches!(&e, wasmraft_node::Error::Invalid(m) if m.contains("renewal key")), "{e:?}");
    let follower = cluster.nodes().into_iter().find(|n| n.id() != leader.id()).unwrap();
    let e = follower.renew(b"a".to_vec()).await.unwrap_err();
    assert!(matches!(e, wasmraft_node::Error::NotLeader { .. }), "{e:?}");

    let ticks = || leader.metrics().ticks.load(Relaxed);
    let before = ticks();
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let leader = leader.clone();
        tasks.push(tokio::spawn(async move { leader.renew(b"a".to_vec()).await }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap().response, b"a");
    }
    let used = ticks() - before;
    assert!((1..=10).contains(&used), "40 keep-alives took {used} ticks");
    // Keep-alives alone set no wake-up.
    assert_eq!(leader.query(b"timer".to_vec(), Consistency::Eventual).await.unwrap(), b"none");
}
