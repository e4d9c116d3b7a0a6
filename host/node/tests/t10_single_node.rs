//! One node, in process, over real RocksDB and the real KV plugin.

use std::time::Duration;

use prost::Message;
use wasmraft_node::{Consistency, Error, KV_PLUGIN, Node, NodeConfig};
use wasmraft_raft::LogId;
use wasmraft_storage::{Storage, StorageOptions};
use wasmraft_proto::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};

/// The node's data in `dir/node`: its plugin cache and snapshot
/// directories are made beside it, inside the test's temporary directory.
fn config(dir: &std::path::Path) -> NodeConfig {
    NodeConfig { data_dir: dir.join("node"), tick_interval: Duration::from_millis(10), ..NodeConfig::default() }
}

async fn start(dir: &std::path::Path) -> Node {
    let node = Node::start(config(dir), KV_PLUGIN).expect("node starts");
    node.wait_for_leader().await.expect("a single node elects itself");
    node
}

fn put(k: &str, v: &str) -> Vec<u8> {
    RequestOp { request: Some(Request::RequestPut(PutRequest { key: k.into(), value: v.into(), ..Default::default() })) }
        .encode_to_vec()
}

fn get_req(k: &str) -> Vec<u8> {
    RequestOp { request: Some(Request::RequestRange(RangeRequest { key: k.into(), ..Default::default() })) }
        .encode_to_vec()
}

async fn get(node: &Node, k: &str, c: Consistency) -> Option<Vec<u8>> {
    let bytes = node.query(get_req(k), c).await.expect("query");
    match ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() {
        Response::ResponseRange(mut r) => r.kvs.pop().map(|kv| kv.value),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_readable_at_every_consistency_level() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    node.propose(put("a", "1")).await.unwrap();
    for c in [Consistency::Linearizable, Consistency::Lease, Consistency::Eventual] {
        assert_eq!(get(&node, "a", c).await, Some(b"1".to_vec()), "{c:?}");
    }
    node.shutdown();
}

/// At start the applied index counts as committed, so the log must hold
/// what was applied there: a data directory where it holds another term
/// is refused, loudly, before the node takes part in anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_applied_index_disagrees_with_its_log_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    node.propose(put("a", "1")).await.unwrap();
    node.shutdown();
    drop(node);
    {
        let storage = Storage::open(&dir.path().join("node"), 1, StorageOptions::default()).unwrap();
        let applied = storage.applied().unwrap();
        assert!(applied.index.0 > 0, "nothing applied");
        storage.apply(LogId::new(applied.term.0 + 1, applied.index.0), [], []).unwrap();
    }
    let err = Node::start(config(dir.path()), KV_PLUGIN).err().expect("the node started");
    assert!(err.to_string().contains("the data directory is inconsistent"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_proposals_all_apply_in_one_order() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let node = node.clone();
            tokio::spawn(async move { node.propose_as(put(&format!("k{i}"), &format!("v{i}")), 0, 0).await })
        })
        .collect();
    let mut indexes = Vec::new();
    for t in tasks {
        indexes.push(t.await.unwrap().unwrap().index);
    }
    indexes.sort();
    indexes.dedup();
    assert_eq!(indexes.len(), 200, "every proposal got its own log index");
    for i in (0..200).step_by(37) {
        assert_eq!(get(&node, &format!("k{i}"), Consistency::Linearizable).await, Some(format!("v{i}").into_bytes()));
    }
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_log_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    for i in 0..20 {
        node.propose(put(&format!("k{i}"), "v")).await.unwrap();
    }
    let applied = node.status().applied;
    node.shutdown();
    drop(node);

    let node = start(dir.path()).await;
    assert!(node.status().applied >= applied);
    assert_eq!(get(&node, "k19", Consistency::Eventual).await, Some(b"v".to_vec()));
    node.propose(put("k20", "w")).await.unwrap();
    assert_eq!(get(&node, "k20", Consistency::Linearizable).await, Some(b"w".to_vec()));
    node.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_commands_get_clear_errors_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    node.propose(put("a", "1")).await.unwrap();
    let applied = node.status().applied;

    let err = node.propose(vec![0xff, 0x00, 0x13]).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(ref m) if m.contains("malformed RequestOp")), "{err}");
    let err = node.propose(put("", "x")).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(ref m) if m.contains("key is not provided")), "{err}");
    let huge = put("big", &"x".repeat(3 << 20));
    let err = node.propose(huge).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(ref m) if m.contains("exceeds max_request_bytes")), "{err}");
    let err = node.query(vec![0xff], Consistency::Linearizable).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");

    assert_eq!(get(&node, "a", Consistency::Linearizable).await, Some(b"1".to_vec()));
    assert_eq!(get(&node, "big", Consistency::Linearizable).await, None);
    // Refused entries still took a log index, but wrote nothing.
    assert!(node.status().applied >= applied + 2);
    node.shutdown();
}

/// A put whose encoded request is exactly `len` bytes.
fn put_of_size(key: &str, len: usize) -> Vec<u8> {
    let mut value = len.saturating_sub(key.len() + 16);
    loop {
        let cmd = put(key, &"v".repeat(value));
        match cmd.len().cmp(&len) {
            std::cmp::Ordering::Equal => return cmd,
            std::cmp::Ordering::Less => value += 1,
            std::cmp::Ordering::Greater => panic!("no put of exactly {len} bytes"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_limit_is_exact_and_checked_before_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    let limit = wasmraft_node::DEFAULT_MAX_REQUEST_BYTES;
    assert_eq!(node.max_request_bytes(), limit);

    // Exactly the limit: accepted and stored, however the size is split
    // between key and value (long keys included).
    node.propose(put_of_size("exact", limit)).await.expect("a request of exactly the limit");
    let long_key = "k".repeat(64 << 10);
    node.propose(put_of_size(&long_key, limit)).await.expect("a long key within the limit");
    node.propose(put(&"k".repeat(4096), "v")).await.expect("a 4 KiB key");
    let stored = get(&node, "exact", Consistency::Linearizable).await.expect("stored");
    assert!(stored.len() > limit - 32, "{}", stored.len());

    // One byte more: refused with both sizes, and no log index taken.
    let last = node.status().last_index;
    let err = node.propose(put_of_size("over", limit + 1)).await.unwrap_err();
    let expected = format!("request of {} bytes exceeds max_request_bytes ({limit} bytes)", limit + 1);
    assert!(matches!(err, Error::Invalid(ref m) if *m == expected), "{err}");
    let err = node.query(vec![0; limit + 1], Consistency::Linearizable).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(ref m) if m.contains("exceeds max_request_bytes")), "{err}");
    assert_eq!(node.status().last_index, last, "a refused request entered the log");
    assert_eq!(get(&node, "over", Consistency::Linearizable).await, None);
    node.shutdown();
}

/// More requests than a node may hold get an immediate `busy` and change
/// nothing; every other one applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_beyond_the_pending_limit_get_busy_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(NodeConfig { max_pending_requests: 4, ..config(dir.path()) }, KV_PLUGIN).unwrap();
    node.wait_for_leader().await.unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let node = node.clone();
            tokio::spawn(async move { (i, node.propose(put(&format!("k{i:03}"), "v")).await) })
        })
        .collect();
    let (mut ok, mut busy) = (Vec::new(), 0);
    for t in tasks {
        match t.await.unwrap() {
            (i, Ok(_)) => ok.push(i),
            (_, Err(Error::Busy(m))) => {
                assert!(m.contains("requests in flight reached 4"), "{m}");
                busy += 1;
            }
            (_, Err(e)) => panic!("{e}"),
        }
    }
    assert!(busy > 0 && !ok.is_empty(), "ok {} busy {busy}", ok.len());
    assert_eq!(node.status().busy_refusals, busy, "every refusal is counted");
    assert_eq!(node.status().pending_requests, 0, "every place is given back");
    for i in 0..100 {
        let stored = get(&node, &format!("k{i:03}"), Consistency::Linearizable).await.is_some();
        assert_eq!(stored, ok.contains(&i), "k{i:03}");
    }
    node.shutdown();
}

#[test]
fn a_request_limit_above_the_store_limits_is_a_clear_error() {
    let mut config = NodeConfig::default();
    config.max_request_bytes = config.plugin.max_value_bytes + 1;
    let err = config.validate().unwrap_err();
    assert!(err.contains("must be at least max_request_bytes"), "{err}");
    config.set_max_request_bytes(8 << 20);
    config.validate().expect("set_max_request_bytes keeps the store limits above");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_receive_the_events_of_applied_entries() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    let mut events = node.subscribe();
    let applied = node.propose_as(put("w", "1"), 0, 0).await.unwrap();
    let ev = events.recv().await.unwrap();
    assert_eq!(ev.key, b"w");
    assert_eq!(ev.index, applied.index);
    node.shutdown();
}

/// A retried proposal (same client id and sequence) applies once and gets
/// the first outcome, even when both copies commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_proposal_applies_once() {
    use prost::Message;
    use wasmraft_proto::etcdserverpb::PutResponse;
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path()).await;
    let first = node.propose_as(put("once", "1"), 42, 1).await.unwrap();
    // The same command again, and concurrently twice more: all are retries.
    let (a, b) = tokio::join!(node.propose_as(put("once", "1"), 42, 1), node.propose_as(put("once", "1"), 42, 1));
    for retry in [a.unwrap(), b.unwrap()] {
        assert_eq!(retry.response, first.response, "a retry returns the first result");
    }
    let header = |r: &[u8]| match ResponseOp::decode(r).unwrap().response.unwrap() {
        Response::ResponsePut(PutResponse { header, .. }) => header.unwrap().revision,
        other => panic!("{other:?}"),
    };
    assert_eq!(header(&first.response), 2);
    // The key was written once: version 1.
    let bytes = node.query(get_req("once"), Consistency::Linearizable).await.unwrap();
    let Response::ResponseRange(r) = ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() else { panic!() };
    assert_eq!(r.kvs[0].version, 1);
    // The next sequence applies; an older one is refused.
    node.propose_as(put("once", "2"), 42, 2).await.unwrap();
    let err = node.propose_as(put("once", "3"), 42, 1).await.unwrap_err();
    assert!(matches!(err, Error::Invalid(ref m) if m.contains("older than its last applied")), "{err}");
    // Sessions survive a restart.
    node.shutdown();
    drop(node);
    let node = start(dir.path()).await;
    let again = node.propose_as(put("once", "2"), 42, 2).await.unwrap();
    let bytes = node.query(get_req("once"), Consistency::Linearizable).await.unwrap();
    let Response::ResponseRange(r) = ResponseOp::decode(bytes.as_slice()).unwrap().response.unwrap() else { panic!() };
    assert_eq!(r.kvs[0].version, 2, "the retry after restart did not apply again");
    assert_eq!(header(&again.response), 3);
    node.shutdown();
}

/// Requests that arrive before the first election ends wait for a leader
/// (up to the request timeout) instead of failing with "no leader".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_the_first_election_wait_for_a_leader() {
    let dir = tempfile::tempdir().unwrap();
    let config = NodeConfig { tick_interval: Duration::from_millis(50), ..config(dir.path()) };
    let node = Node::start(config, KV_PLUGIN).expect("node starts");
    assert!(node.status().leader.is_none(), "still electing: the test would prove nothing");
    // Both wait and succeed (`get` fails the test on an error). The read
    // runs concurrently with the write, so either order is linearizable:
    // it sees nothing or the write, never anything else.
    let (read, write) = tokio::join!(get(&node, "k", Consistency::Linearizable), node.propose(put("k", "v")));
    assert!(read.is_none() || read.as_deref() == Some(&b"v"[..]), "{read:?}");
    write.expect("the write waited for the election");
    assert_eq!(get(&node, "k", Consistency::Lease).await, Some(b"v".to_vec()));
    node.shutdown();
}
