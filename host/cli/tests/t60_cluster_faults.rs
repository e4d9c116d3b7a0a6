//! Fault tests of a real three-process cluster: `wasmraft run` nodes on
//! loopback, faults from outside (`kill -9`, SIGSTOP/SIGCONT, restarts),
//! concurrent clients whose histories go through the linearizability checker
//! (`wasmraft-lincheck`).
//!
//! No sleep decides correctness: sleeps only pace the nemesis. A verdict comes
//! from the checker or from reads. Each test prints its seed
//! (`WASMRAFT_TEST_SEED=N` replays the same choices of keys and operations,
//! not the same timing) and, on failure, keeps the cluster's directory (configs,
//! data, one log per node) and prints where it is.
//!
//! How outcomes are recorded (see `wasmraft_lincheck::Recorder`):
//! - a put that returns is `ok`; a put that errs or times out is *unknown*,
//!   whatever the error: the client may have tried several endpoints, and an
//!   earlier attempt (forwarded to a leader that then died) may still commit,
//!   so even a final `not-leader` proves nothing about the first attempt;
//! - a get that returns is `ok` with what it saw; a get that errs is left out
//!   (a read changes nothing, so leaving it out is always sound). Reads are
//!   recorded under client ids that name their path (`cluster::reader`:
//!   `cN` linearizable, `c1000+N` lease, `c2000+N` eventual), so a failing
//!   history shows which path served a stale read.
//!
//! The harness (`cluster/mod.rs`) starts each node from its own TOML config
//! with 20 ms ticks and a 10-tick election timeout, and runs one cluster at a
//! time. On a failure it prints the end of every node's log and keeps the
//! directory, with the history and the checker's verdict next to the logs.

mod cluster;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::*;
use wasmraft_client::{Client, Consistency};
use wasmraft_lincheck::{CheckOptions, CheckResult, KvModel, KvOutput, KvRecorder, check_report};

/// `kill -9` of the leader under load from six clients, then its restart:
/// the history of puts and linearizable/lease gets stays linearizable, and
/// the cluster keeps serving after the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_leader_under_load_keeps_history_linearizable() {
    let _serial = serial();
    let seed = seed("kill9_leader_under_load_keeps_history_linearizable");
    let mut cluster = Cluster::start(3).await;
    let load = Workload::start(&cluster, 6, &[Consistency::Linearizable, Consistency::Lease], seed);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let leader = cluster.leader().await;
    load.set_phase(1);
    cluster.kill9(leader);
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    let new_leader = cluster.leader_among(&others).await;
    eprintln!("killed leader {leader}; new leader {new_leader}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.set_phase(2);
    cluster.restart(leader).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rec, stats) = load.finish().await;
    eprintln!("{}", stats.summary());

    assert_linearizable(&cluster, &rec, "kill -9 leader");
    // Not vacuous: the clients got work done before the kill, while the old
    // leader was down (writes need the new leader), and after its restart.
    assert!(stats.ok_in(0) >= 30, "too few operations before the kill: {}", stats.summary());
    assert!(stats.ok_puts[1].load(Ordering::Relaxed) >= 20, "too few writes after the kill: {}", stats.summary());
    assert!(stats.ok_in(2) >= 20, "too few operations after the restart: {}", stats.summary());
}

/// The leader is partitioned from both followers through the transport's
/// fault injection, under load: the majority elects a new leader and keeps
/// serving, the isolated node serves no stale strong reads, and after
/// healing it rejoins; the whole history stays linearizable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_leader_is_replaced_and_the_history_stays_linearizable() {
    let _serial = serial();
    let seed = seed("a_partitioned_leader_is_replaced_and_the_history_stays_linearizable");
    let cluster = Cluster::start(3).await;
    let load = Workload::start(&cluster, 6, &[Consistency::Linearizable, Consistency::Lease], seed);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let leader = cluster.leader().await;
    load.set_phase(1);
    cluster.isolate(leader).await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != leader).collect();
    let new_leader = cluster.leader_among(&others).await;
    eprintln!("partitioned leader {leader}; new leader {new_leader}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.set_phase(2);
    cluster.heal().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rec, stats) = load.finish().await;
    eprintln!("{}", stats.summary());

    assert_linearizable(&cluster, &rec, "partitioned leader");
    assert!(stats.ok_in(0) >= 30, "too few operations before the partition: {}", stats.summary());
    assert!(stats.ok_puts[1].load(Ordering::Relaxed) >= 20, "too few writes during the partition: {}", stats.summary());
    assert!(stats.ok_in(2) >= 20, "too few operations after healing: {}", stats.summary());
}

/// SIGSTOP of the leader for well over an election timeout, under load: the
/// others elect a new leader and keep serving, and the whole history stays
/// linearizable.
///
/// The paused leader resumes believing it still leads. To catch it serving
/// stale reads, probe keys (written only here, so their histories stay tiny
/// however many probes there are) are written before the pause, written
/// again through the new leader, and then read at the paused node: mostly
/// lease reads, the path that trusts the old leader's sense of time. The
/// reads wait in its sockets, so each is invoked after the second write was
/// acknowledged; answering one with the first value is a stale read. Which
/// requests the resumed node reads first (a probe or the new leader's
/// heartbeat) is up to its scheduler, so probes go on the connection opened
/// before the pause, on new connections all through the pause, and right
/// after the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigstop_leader_then_resume() {
    use Consistency::{Lease, Linearizable};
    const PROBE_KEYS: [&str; 5] = ["p0", "p1", "p2", "p3", "p4"];
    let _serial = serial();
    let seed = seed("sigstop_leader_then_resume");
    let mut cluster = Cluster::start(3).await;
    let load = Workload::start(&cluster, 6, &[Linearizable, Lease], seed);
    let rec = load.recorder.clone();

    tokio::time::sleep(Duration::from_secs(1)).await;
    let old = cluster.leader().await;
    let mut before = pinned_client(cluster.addr(old)).await;
    for key in PROBE_KEYS {
        put_until_acked(&rec, &mut before, key, &format!("{key}-before")).await;
    }
    let probe_client = pinned_client(cluster.addr(old)).await;
    let paused_at = Instant::now();
    load.set_phase(1);
    cluster.stop(old);
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != old).collect();
    let new = cluster.leader_among(&others).await;
    eprintln!("paused leader {old}; new leader {new} after {:?}", paused_at.elapsed());
    let mut after = pinned_client(cluster.addr(new)).await;
    for key in PROBE_KEYS {
        put_until_acked(&rec, &mut after, key, &format!("{key}-after")).await;
    }

    let mut probes = Vec::new();
    let mut probe_id = 200;
    let mut next_id = || {
        probe_id += 1;
        probe_id
    };
    for key in PROBE_KEYS {
        for c in [Lease, Lease, Linearizable] {
            probes.push(spawn_probe(&rec, probe_client.clone(), next_id(), key, c));
        }
    }
    // Pace the nemesis: keep the pause over twice an election timeout and
    // until the clients, having timed out on the paused node, get writes
    // done through the new leader.
    let deadline = Instant::now() + Duration::from_secs(15);
    while paused_at.elapsed() < election_timeout() * 2 || load.stats.ok_puts[1].load(Ordering::Relaxed) < 20 {
        assert!(Instant::now() < deadline, "too few writes while {old} was paused: {}", load.stats.summary());
        for key in PROBE_KEYS {
            let fresh = Client::new([cluster.addr(old)]).unwrap();
            probes.push(spawn_probe(&rec, fresh, next_id(), key, Lease));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.cont(old);
    load.set_phase(2);
    eprintln!("resumed {old} after {:?}", paused_at.elapsed());
    for key in PROBE_KEYS {
        probes.push(spawn_probe(&rec, probe_client.clone(), next_id(), key, Lease));
    }
    let mut answered = BTreeMap::<String, usize>::new();
    for p in probes {
        let outcome = match p.await.unwrap() {
            Ok(KvOutput::Value(Some(v))) if v.ends_with("-before") => "stale",
            Ok(_) => "answered",
            Err(false) => "refused",
            Err(true) => "timed out",
        };
        *answered.entry(outcome.into()).or_default() += 1;
    }
    eprintln!("probes of the resumed node: {answered:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rec, stats) = load.finish().await;
    eprintln!("{}", stats.summary());

    assert_linearizable(&cluster, &rec, "SIGSTOP leader");
    assert!(stats.ok_in(0) >= 30, "too few operations before the pause: {}", stats.summary());
    assert!(stats.ok_in(2) >= 20, "too few operations after the resume: {}", stats.summary());
}

/// The schedule above, arranged so that the resumed leader hears of the new
/// term as late as possible: while it is paused, both followers are killed
/// and restarted (so their new connections to it wait in its accept queue,
/// behind the probes already on an open connection), elect a leader between
/// them and overwrite the probe keys. When the old leader resumes, its own
/// clock (in ticks) has not moved, so the lease it held before the pause
/// must not be trusted: lease and linearizable probes must see the new
/// values or be refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_leader_whose_followers_moved_on_serves_no_stale_reads() {
    use Consistency::{Lease, Linearizable};
    const PROBE_KEYS: [&str; 5] = ["p0", "p1", "p2", "p3", "p4"];
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let rec = KvRecorder::new();
    let old = cluster.leader().await;
    let mut before = pinned_client(cluster.addr(old)).await;
    for key in PROBE_KEYS {
        put_until_acked(&rec, &mut before, key, &format!("{key}-before")).await;
    }
    let probe_client = pinned_client(cluster.addr(old)).await;
    // Keep the lease fresh right up to the pause.
    let _ = probe_client.clone().query(range_request("p0", b""), Lease).await;
    cluster.stop(old);
    let others: Vec<u64> = cluster.ids().into_iter().filter(|&i| i != old).collect();
    for &id in &others {
        cluster.kill9(id);
    }
    for &id in &others {
        cluster.restart(id).await;
    }
    let new = cluster.leader_among(&others).await;
    let mut after = pinned_client(cluster.addr(new)).await;
    for key in PROBE_KEYS {
        put_until_acked(&rec, &mut after, key, &format!("{key}-after")).await;
    }
    let mut probes = Vec::new();
    for (i, key) in PROBE_KEYS.into_iter().enumerate() {
        for (j, c) in [Lease, Lease, Lease, Linearizable].into_iter().enumerate() {
            probes.push(spawn_probe(&rec, probe_client.clone(), 200 + 10 * i as u64 + j as u64, key, c));
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.cont(old);
    let mut answered = BTreeMap::<String, usize>::new();
    for p in probes {
        let outcome = match p.await.unwrap() {
            Ok(KvOutput::Value(Some(v))) if v.ends_with("-before") => "stale",
            Ok(_) => "answered",
            Err(false) => "refused",
            Err(true) => "timed out",
        };
        *answered.entry(outcome.into()).or_default() += 1;
    }
    eprintln!("probes of the resumed node {old}: {answered:?}");
    assert_linearizable(&cluster, &rec, "resumed leader");
}

/// Ten writers put fresh keys; once 500 puts are acknowledged, all three
/// nodes get `kill -9` at once (writes still in flight), restart, and a
/// linearizable read finds every acknowledged key with its value. Three
/// rounds, each adding 500 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_write_survives_kill9_of_all_nodes() {
    const WRITERS: u64 = 10;
    const PER_ROUND: usize = 500;
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let acked: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();

    for round in 0..3 {
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let endpoints = cluster.endpoints(w as usize);
                let (acked, count, stop) = (acked.clone(), count.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut client = Client::new(&endpoints).unwrap();
                    let mut i = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("dur/r{round}-w{w}-{i:05}");
                        let value = format!("v{round}-{w}-{i}");
                        match tokio::time::timeout(OP_TIMEOUT, client.propose(put_request(&key, &value))).await {
                            Ok(Ok(_)) => {
                                acked.lock().unwrap().insert(key, value);
                                count.fetch_add(1, Ordering::SeqCst);
                                i += 1;
                            }
                            // Unknown outcome: the key is not counted; write the
                            // next one (a retry of the same value would be fine too).
                            _ => {
                                i += 1;
                                tokio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while count.load(Ordering::SeqCst) < PER_ROUND {
            assert!(Instant::now() < deadline, "round {round}: only {} puts acknowledged", count.load(Ordering::SeqCst));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        cluster.kill9_all();
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.await.unwrap();
        }
        let expected = acked.lock().unwrap().clone();
        eprintln!("round {round}: killed all nodes with {} acknowledged puts in total", expected.len());

        for id in cluster.ids() {
            cluster.restart(id).await;
        }
        cluster.leader().await;
        let mut client = Client::new(cluster.endpoints(round)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let bytes = loop {
            match tokio::time::timeout(
                Duration::from_secs(5),
                client.query(range_request("dur/", b"dur0"), Consistency::Linearizable),
            )
            .await
            {
                Ok(Ok(bytes)) => break bytes,
                other => {
                    assert!(Instant::now() < deadline, "round {round}: the restarted cluster does not answer: {other:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        let stored: BTreeMap<String, String> = range_kvs(&bytes).into_iter().collect();
        let lost: Vec<_> = expected.iter().filter(|(k, v)| stored.get(*k) != Some(v)).collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged puts lost or changed, e.g. {:?}",
            lost.len(),
            expected.len(),
            &lost[..lost.len().min(5)]
        );
        // Unacknowledged puts may or may not be there, but nothing else may.
        for (k, v) in &stored {
            let (r, rest) = k.strip_prefix("dur/r").unwrap().split_once("-w").unwrap();
            let (w, i) = rest.split_once('-').unwrap();
            assert_eq!(v, &format!("v{r}-{w}-{}", i.parse::<u64>().unwrap()), "key {k} holds a value never written");
        }
        // Every key was put once, so applied once, however many of its
        // entries the restarts applied again from the log (state that was
        // not flushed is lost in a kill -9): version 1, and a revision of
        // its own.
        let stamps = range_stamps(&bytes);
        for (k, version, created, modified) in &stamps {
            assert_eq!((*version, created), (1, modified), "key {k}: applied more than once");
        }
        let revisions: std::collections::BTreeSet<i64> = stamps.iter().map(|s| s.3).collect();
        assert_eq!(revisions.len(), stamps.len(), "two keys share a revision");
        eprintln!("round {round}: all {} acknowledged puts read back ({} keys stored)", expected.len(), stored.len());
    }
}

/// The checker is not vacuous: eventual reads on a follower that was paused
/// while a write committed return the old value, and the checker rejects
/// such a history. Each attempt writes v1, waits until the follower shows it,
/// pauses the follower, writes v2 through the leader, sends an eventual get
/// to the paused follower (queued in its socket, so invoked after v2 was
/// acknowledged) and resumes it: the local read is served before the
/// follower can append, fsync and apply v2. The checker's verdict must match
/// what was seen, every time, and at least one read must be stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eventual_reads_on_a_paused_follower_can_be_stale_and_the_checker_says_so() {
    const ATTEMPTS: usize = 20;
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let mut stale = 0;
    let mut fresh = 0;
    for attempt in 0..ATTEMPTS {
        let leader = cluster.leader().await;
        let follower = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
        let mut writer = pinned_client(cluster.addr(leader)).await;
        let mut reader = pinned_client(cluster.addr(follower)).await;
        let rec = KvRecorder::new();
        let key = format!("stale-{attempt}");
        assert!(recorded_put(&rec, 1, &mut writer, &key, "v1").await, "attempt {attempt}: put v1 failed");
        // Wait until the follower has applied v1. These polls are eventual
        // reads that may lag by design, so they stay out of the history.
        let deadline = Instant::now() + Duration::from_secs(10);
        let polls = KvRecorder::new();
        while recorded_get(&polls, 2, &mut reader, &key, Consistency::Eventual, OP_TIMEOUT).await
            != Ok(KvOutput::value("v1"))
        {
            assert!(Instant::now() < deadline, "attempt {attempt}: follower {follower} never applied v1");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        cluster.stop(follower);
        let put_v2 = recorded_put(&rec, 1, &mut writer, &key, "v2").await;
        let read = {
            let (rec, mut reader, key) = (rec.clone(), reader.clone(), key.clone());
            tokio::spawn(async move {
                recorded_get(&rec, 3, &mut reader, &key, Consistency::Eventual, Duration::from_secs(10)).await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await; // let the get reach the socket
        cluster.cont(follower);
        assert!(put_v2, "attempt {attempt}: put v2 through leader {leader} was not acknowledged");
        let seen = read.await.unwrap().unwrap_or_else(|e| panic!("attempt {attempt}: eventual get failed (timeout {e})"));

        let verdict = check_report::<KvModel>(&rec.history(), &CheckOptions::default()).result;
        if seen == KvOutput::value("v2") {
            fresh += 1;
            assert!(verdict.is_ok(), "attempt {attempt}: a fresh read, yet {verdict}");
        } else {
            stale += 1;
            match &verdict {
                CheckResult::Illegal { key: k, .. } if *k == key => {}
                other => panic!("attempt {attempt}: the follower returned {seen} after v2 was acknowledged, yet {other}"),
            }
        }
        // After catching up, the follower's linearizable read sees v2.
        let seen = recorded_get(&rec, 4, &mut reader, &key, Consistency::Linearizable, Duration::from_secs(5)).await;
        assert_eq!(seen, Ok(KvOutput::value("v2")), "attempt {attempt}: linearizable read on follower {follower}");
    }
    eprintln!("eventual reads on a resumed follower: {stale} stale, {fresh} fresh of {ATTEMPTS}");
    assert!(stale > 0, "no stale eventual read in {ATTEMPTS} attempts: the checker was never put to the test");
}

/// A follower that was down while the leader compacted its log far past it
/// catches up from a snapshot streamed over gRPC, with every acknowledged
/// write, and then follows the log again. `WASMRAFT_SNAPSHOT_TEST_PUTS`
/// sets how many entries it misses (default 100,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_down_for_thousands_of_entries_catches_up_from_a_streamed_snapshot() {
    let _serial = serial();
    let puts: usize = std::env::var("WASMRAFT_SNAPSHOT_TEST_PUTS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let mut cluster = Cluster::start_with(3, "snapshot_entries = 500").await;
    let leader = cluster.leader().await;
    let lagging = cluster.ids().into_iter().find(|&i| i != leader).unwrap();
    cluster.kill9(lagging);

    let leader_addr = cluster.addr(leader).to_string();
    let writers: Vec<_> = (0..10)
        .map(|w| {
            let addr = leader_addr.clone();
            tokio::spawn(async move {
                let mut client = pinned_client(&addr).await;
                for i in (w..puts).step_by(10) {
                    client.propose(put_request(&format!("s{i:06}"), &format!("v{i}"))).await.expect("put");
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }

    cluster.restart(lagging).await;
    let mut reader = pinned_client(cluster.addr(lagging)).await;
    let last = format!("s{:06}", puts - 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(bytes) = reader.query(range_request(&last, &[]), Consistency::Eventual).await {
            if !range_kvs(&bytes).is_empty() {
                break;
            }
        }
        assert!(Instant::now() < deadline, "node {lagging} did not catch up:\n{}", cluster.log(lagging));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The install is logged just after its write batch: poll the log.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cluster.log(lagging).contains("installed a snapshot from the leader") {
        assert!(Instant::now() < deadline, "node {lagging} caught up without a snapshot:\n{}", cluster.log(lagging));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every key, read from the caught-up node's own state, a page at a time
    // (one query over 100,000 keys would exceed the per-query fuel budget).
    for page in (0..puts).step_by(5000) {
        let end = (page + 5000).min(puts);
        let (from, to) = (format!("s{page:06}"), format!("s{end:06}"));
        let bytes = reader.query(range_request(&from, to.as_bytes()), Consistency::Eventual).await.unwrap();
        let kvs = range_kvs(&bytes);
        assert_eq!(kvs.len(), end - page, "keys [{from}, {to})");
        for (i, (k, v)) in (page..end).zip(&kvs) {
            assert_eq!((k.as_str(), v.as_str()), (format!("s{i:06}").as_str(), format!("v{i}").as_str()));
        }
    }
    // And it follows the log again.
    let mut writer = pinned_client(cluster.addr(leader)).await;
    writer.propose(put_request("after-snapshot", "x")).await.unwrap();
    let bytes = reader.query(range_request("after-snapshot", &[]), Consistency::Linearizable).await.unwrap();
    assert_eq!(range_kvs(&bytes), vec![("after-snapshot".to_string(), "x".to_string())]);
}
