//! A snapshot larger than a node's whole memory budget: a follower that was
//! down while 256 MiB of 1 MiB values were written, and the log compacted
//! past it, catches up from a snapshot streamed a part at a time, staged in
//! table files on its disk and ingested by RocksDB. Its peak memory stays
//! below half the snapshot's size (it held the whole snapshot, several
//! times over, when snapshots travelled in memory), and it ends with every
//! key.

mod cluster;

use cluster::*;

const PUTS: usize = 256;
const VALUE: usize = 1 << 20;
const WRITERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_catches_up_from_a_snapshot_larger_than_its_memory_budget() {
    let _serial = serial();
    let mut cluster = Cluster::start_with(3, "snapshot_entries = 32").await;
    let leader = cluster.leader().await;
    let lagging = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    cluster.kill9(lagging);

    let tasks: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut client = cluster.client([cluster.addr(leader).to_string()]).with_retry_for(std::time::Duration::from_secs(120));
            tokio::spawn(async move {
                for i in (w..PUTS).step_by(WRITERS) {
                    let value = format!("{i:04}").repeat(VALUE / 4);
                    if let Err(e) = client.propose(put_request(&format!("big/{i:03}"), &value)).await {
                        panic!("put {i} failed: {e}");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // Small puts past the next snapshot boundary, so that the snapshot
    // covers every large value and the follower gets no large entry but
    // through the snapshot: its memory then measures the snapshot path.
    let mut client = cluster.client([cluster.addr(leader).to_string()]);
    for i in 0..40 {
        client.propose(put_request(&format!("small/{i:02}"), "x")).await.unwrap();
    }
    let commit = status_of(cluster.addr(leader), None).await.unwrap().commit_index;

    cluster.restart(lagging).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let s = status_of(cluster.addr(lagging), None).await;
        if s.as_ref().is_some_and(|s| s.applied_index >= commit) && cluster.log(lagging).contains("installed a snapshot from the leader") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "node {lagging} did not catch up to {commit}: {s:?}\n{}", cluster.log(lagging));
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let log = cluster.log(lagging);
    let received = log.lines().find(|l| l.contains("received a snapshot")).expect("the receive is logged").to_string();
    println!("node {lagging}: {received}");

    // Every key is on the caught-up node, read from its own state: counted,
    // and the last one read back whole.
    let mut reader = cluster.client([cluster.addr(lagging).to_string()]);
    let answer = reader.query(count_request("big/", b"big0"), wasmraft_client::Consistency::Eventual).await.unwrap();
    assert_eq!(range_count(&answer), PUTS as i64);
    let last = format!("big/{:03}", PUTS - 1);
    let bytes = reader.query(range_request(&last, &[]), wasmraft_client::Consistency::Eventual).await.unwrap();
    let kvs = range_kvs(&bytes);
    assert_eq!(kvs.len(), 1);
    assert_eq!(kvs[0].1, format!("{:04}", PUTS - 1).repeat(VALUE / 4));

    let snapshot_mib = (PUTS * VALUE) >> 20;
    let peak = cluster.peak_rss_kib(lagging).expect("the node's /proc status") / 1024;
    println!("node {lagging}: peak RSS {peak} MiB while installing a snapshot of {snapshot_mib} MiB");
    assert!(
        peak < snapshot_mib as u64 / 2,
        "node {lagging} peaked at {peak} MiB receiving a {snapshot_mib} MiB snapshot: it is held in memory"
    );
}
