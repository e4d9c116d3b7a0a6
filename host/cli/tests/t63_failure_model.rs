//! One failure model, over real processes: when a worker of a node fails
//! (its Raft thread panics, or its apply worker hits an unrecoverable
//! error), the node stops as a whole. It says so at once in its status and
//! to every client, stops leading and voting so that the others elect a
//! leader, and `wasmraft run` exits non-zero with the cause as its last
//! line. The cluster keeps serving and loses no acknowledged write.

mod cluster;

use std::time::{Duration, Instant};

use cluster::*;
use wasmraft_client::Consistency;

async fn a_failed_leader_stops_as_a_whole(worker: &str) {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let mut client = cluster.client(cluster.endpoints(0));
    let mut acked = Vec::new();
    for i in 0..10 {
        let key = format!("before/{i}");
        client.propose(put_request(&key, "v")).await.unwrap();
        acked.push(key);
    }

    cluster.inject_fault(leader, worker).await;
    // The failed node says so at once (before it exits).
    let started = Instant::now();
    let status = loop {
        let s = status_of(cluster.addr(leader), None).await.expect("the failed node answers status until it exits");
        // The cause names the failure (a panic's message is added a moment
        // after the node is marked fatal).
        if s.fatal.contains("fault injection") {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(2), "no fatal status: {s:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_ne!(status.role, "leader", "a fatal node does not lead");
    // Its clients get a clear error at once, not a timeout.
    let mut pinned = wasmraft_client::Client::new([cluster.addr(leader)]).unwrap().with_retry_for(Duration::ZERO);
    let asked = Instant::now();
    let err = pinned.propose(put_request("to-the-dead", "x")).await.unwrap_err();
    assert_eq!(err.reason(), Some("fatal"), "{err}");
    assert!(asked.elapsed() < Duration::from_secs(1), "the error took {:?}", asked.elapsed());

    // The others elect a leader and keep serving.
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != leader).collect();
    let new_leader = cluster.leader_among(&others).await;
    assert_ne!(new_leader, leader);
    // A fatal leader stops heartbeating at once: the others elect before
    // its process exits (2 s after the failure). Had it kept leading until
    // then, no election could end before 2 s plus an election timeout.
    eprintln!("a new leader {:?} after the failure", started.elapsed());
    assert!(started.elapsed() < Duration::from_millis(1800), "the failed leader kept leading for {:?}", started.elapsed());
    let endpoints: Vec<String> = others.iter().map(|&id| cluster.addr(id).to_string()).collect();
    let mut client = cluster.client(endpoints.clone());
    for i in 0..10 {
        let key = format!("after/{i}");
        client.propose(put_request(&key, "v")).await.unwrap();
        acked.push(key);
    }

    // The process exits non-zero; the cause is its last line.
    let exit = cluster.wait_exit(leader, Duration::from_secs(15)).expect("the failed node did not exit");
    assert!(!exit.success(), "{exit}");
    let log = cluster.log(leader);
    let last = log.lines().filter(|l| !l.trim().is_empty()).last().unwrap_or_default().to_string();
    assert!(last.contains("unrecoverable failure") && last.contains("fault injection"), "last line: {last}");

    for &id in &others {
        let mut node = cluster.client([cluster.addr(id).to_string()]);
        let kvs = range_kvs(&node.query(range_request("\0", b"\0"), Consistency::Linearizable).await.unwrap());
        for k in &acked {
            assert!(kvs.iter().any(|(key, _)| key == k), "node {id} lost acknowledged {k}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_apply_worker_fails_stops_and_the_others_take_over() {
    a_failed_leader_stops_as_a_whole("apply").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_raft_thread_panics_stops_and_the_others_take_over() {
    a_failed_leader_stops_as_a_whole("raft").await;
}
