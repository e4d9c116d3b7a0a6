//! etcd's concurrency recipes over Wasmraft's leases, driven by etcdctl
//! and `wasmraft lock` against `wasmraft run` processes: `etcdctl lock`
//! gives mutual exclusion to five concurrent shell loops that append start
//! and end lines to one file (no pair interleaves), also across a leader
//! kill, and so does a mix of `wasmraft lock` and `etcdctl lock` loops (one
//! mutex); `etcdctl elect` hands leadership over when the holder stops.
//! etcd's `v3lockpb.Lock` and `v3electionpb.Election` gRPC services work
//! on followers and across a leader kill (`services`).

mod cluster;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::etcdctl::*;
use cluster::*;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Five shell loops, each taking the lock `shared` ROUNDS times through
/// `locker(i)` (a command line that runs what follows it under the lock)
/// to append a start and an end line to one file; the leader is killed
/// meanwhile. No pair may interleave.
async fn five_loops_under_one_lock(locker: impl Fn(usize, &str) -> String) {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shared.log");
    const ROUNDS: usize = 6;
    let loops: Vec<Killed> = (0..5)
        .map(|i| {
            // Each round holds the lock while it appends a start line, waits
            // a little and appends an end line.
            let body = format!("echo start {i} >> {f}; sleep 0.05; echo end {i} >> {f}", f = file.display());
            let script = format!(
                "for r in $(seq {ROUNDS}); do {} sh -c '{body}' >/dev/null || echo failed >> {f}.errors; done",
                locker(i, &all),
                f = file.display()
            );
            Killed(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
        })
        .collect();
    // Kill the leader while the loops run.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let leader = cluster.leader().await;
    cluster.kill9(leader);
    let deadline = Instant::now() + Duration::from_secs(90);
    for mut l in loops {
        while l.0.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the loops did not finish");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() % 2 == 0, "{text}");
    for pair in lines.chunks(2) {
        let (start, end) = (pair[0].strip_prefix("start "), pair[1].strip_prefix("end "));
        assert!(start.is_some() && start == end, "interleaved under the lock:\n{text}");
    }
    let failed = std::fs::read_to_string(format!("{}.errors", file.display())).unwrap_or_default();
    // A round may fail while the leader is down (the client gives up before
    // or after running its command); most pass.
    assert!(lines.len() / 2 <= 5 * ROUNDS && lines.len() / 2 + failed.lines().count() >= 5 * ROUNDS, "{text}\nfailed:\n{failed}");
    assert!(lines.len() / 2 >= 5 * ROUNDS - 5, "only {} rounds held the lock:\nfailed:\n{failed}", lines.len() / 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_excludes_five_shell_loops_across_a_leader_kill() {
    let etcdctl = etcdctl_path();
    five_loops_under_one_lock(|_, all| format!("{} --endpoints={all} --dial-timeout=3s lock --ttl=5 shared --", etcdctl.display())).await;
}

/// Three loops take the lock with `wasmraft lock`, two with `etcdctl lock`:
/// one mutex for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasmraft_lock_and_etcdctl_lock_exclude_each_other() {
    let etcdctl = etcdctl_path();
    five_loops_under_one_lock(|i, all| match i {
        0..3 => format!("{} lock --endpoints {all} --ttl 5 shared --", env!("CARGO_BIN_EXE_wasmraft")),
        _ => format!("{} --endpoints={all} --dial-timeout=3s lock --ttl=5 shared --", etcdctl.display()),
    })
    .await;
}

/// `etcdctl elect NAME PROPOSAL`, its output lines gathered.
fn elect(endpoints: &str, proposal: &str) -> (Killed, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(etcdctl_path())
        .arg(format!("--endpoints={endpoints}"))
        .args(["elect", "leadership", proposal])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (Killed(child), rx)
}

fn wait_line(rx: &std::sync::mpsc::Receiver<String>, want: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line == want => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_hands_leadership_over_when_the_holder_stops() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");
    let (first, first_out) = elect(&all, "alpha");
    assert!(wait_line(&first_out, "alpha", Duration::from_secs(10)), "alpha never led");
    let (_second, second_out) = elect(&all, "beta");
    assert!(!wait_line(&second_out, "beta", Duration::from_secs(2)), "beta led while alpha held it");
    // The holder stops (etcdctl resigns on SIGTERM, revoking its session).
    let pid = first.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(wait_line(&second_out, "beta", Duration::from_secs(10)), "beta did not take over");
    drop(first);
}

mod services {
    //! etcd's `v3lockpb.Lock` and `v3electionpb.Election` gRPC services, as
    //! jetcd, dotnet-etcd and etcd's gRPC gateway call them, on followers
    //! (which forward the recipes' writes), across a leader kill.

    use std::time::Duration;

    use tokio_stream::StreamExt;
    use tonic::Code;
    use tonic::transport::Channel;
    use wasmraft_proto::etcdserverpb::lease_client::LeaseClient;
    use wasmraft_proto::etcdserverpb::{LeaseGrantRequest, RangeRequest};
    use wasmraft_proto::v3electionpb::election_client::ElectionClient;
    use wasmraft_proto::v3electionpb::{CampaignRequest, LeaderKey, LeaderRequest, ProclaimRequest, ResignRequest};
    use wasmraft_proto::v3lockpb::lock_client::LockClient;
    use wasmraft_proto::v3lockpb::{LockRequest, UnlockRequest};

    use super::cluster::*;

    async fn channel(addr: &str) -> Channel {
        tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap()
    }

    async fn keys_under(ch: &Channel, prefix: &str) -> Vec<Vec<u8>> {
        let mut kv = wasmraft_proto::etcdserverpb::kv_client::KvClient::new(ch.clone());
        let range = RangeRequest {
            key: prefix.into(),
            range_end: wasmraft_proto::prefix_range_end(prefix.as_bytes()),
            ..Default::default()
        };
        kv.range(range).await.unwrap().into_inner().kvs.into_iter().map(|kv| kv.key).collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lock_waits_its_turn_and_a_cancelled_waiter_leaves_no_key() {
        let _serial = serial();
        let mut cluster = Cluster::start(3).await;
        let leader = cluster.leader().await;
        let followers: Vec<u64> = cluster.ids().into_iter().filter(|&id| id != leader).collect();
        let (a, b) = (channel(cluster.addr(followers[0])).await, channel(cluster.addr(followers[1])).await);
        let first = LockClient::new(a.clone()).lock(LockRequest { name: b"svc".to_vec(), lease: 0 }).await.unwrap().into_inner();
        assert!(first.key.starts_with(b"svc/"), "{:?}", first.key);
        assert!(first.header.unwrap().revision > 0);
        // A second locker waits behind the first, through the other follower.
        let mut second_client = LockClient::new(b.clone());
        let second = tokio::spawn(async move { second_client.lock(LockRequest { name: b"svc".to_vec(), lease: 0 }).await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!second.is_finished(), "the second locker got the lock while the first held it");
        assert_eq!(keys_under(&a, "svc/").await.len(), 2);
        // A third gives up while it waits: its key goes.
        let mut third_client = LockClient::new(a.clone());
        let third = tokio::time::timeout(Duration::from_millis(500), third_client.lock(LockRequest { name: b"svc".to_vec(), lease: 0 })).await;
        assert!(third.is_err(), "the third locker got the lock while the first held it");
        let mut left = 0;
        for _ in 0..50 {
            left = keys_under(&a, "svc/").await.len();
            if left == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(left, 2, "the cancelled locker's key stayed");
        // The leader dies; the first unlocks through a follower; the second
        // gets the lock.
        cluster.kill9(leader);
        let mut unlocked = false;
        for _ in 0..100 {
            if LockClient::new(a.clone()).unlock(UnlockRequest { key: first.key.clone() }).await.is_ok() {
                unlocked = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(unlocked, "unlock never succeeded after the leader kill");
        let second = tokio::time::timeout(Duration::from_secs(15), second).await.expect("the second locker never got the lock");
        let second = second.unwrap().unwrap().into_inner();
        assert!(second.key.starts_with(b"svc/") && second.key != first.key);
        assert_eq!(keys_under(&b, "svc/").await, vec![second.key.clone()]);
    }

    async fn next_value(observed: &mut tonic::Streaming<wasmraft_proto::v3electionpb::LeaderResponse>) -> Vec<u8> {
        let r = tokio::time::timeout(Duration::from_secs(10), observed.next()).await.expect("nothing observed");
        r.unwrap().unwrap().kv.unwrap().value
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_election_proclaims_observes_resigns_and_hands_over() {
        let _serial = serial();
        let cluster = Cluster::start(3).await;
        let leader = cluster.leader().await;
        let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
        let ch = channel(cluster.addr(follower)).await;
        let mut election = ElectionClient::new(ch.clone());
        let lease = |ttl| {
            let mut leases = LeaseClient::new(ch.clone());
            async move { leases.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await.unwrap().into_inner().id }
        };
        let err = election.leader(LeaderRequest { name: b"e".to_vec() }).await.unwrap_err();
        assert_eq!(err.message(), "election: no leader");
        let mut observed = election.observe(LeaderRequest { name: b"e".to_vec() }).await.unwrap().into_inner();
        let alpha_lease = lease(10).await;
        let won = election
            .campaign(CampaignRequest { name: b"e".to_vec(), lease: alpha_lease, value: b"alpha".to_vec() })
            .await
            .unwrap()
            .into_inner();
        let alpha = won.leader.unwrap();
        assert_eq!((alpha.name.as_slice(), alpha.lease), (&b"e"[..], alpha_lease));
        assert_eq!(alpha.key, format!("e/{alpha_lease:x}").into_bytes());
        assert_eq!(next_value(&mut observed).await, b"alpha");
        election.proclaim(ProclaimRequest { leader: Some(alpha.clone()), value: b"alpha 2".to_vec() }).await.unwrap();
        assert_eq!(next_value(&mut observed).await, b"alpha 2");
        let now = election.leader(LeaderRequest { name: b"e".to_vec() }).await.unwrap().into_inner();
        assert_eq!(now.kv.unwrap().value, b"alpha 2");
        // A claim with the wrong revision, or none, is refused.
        let stale = LeaderKey { rev: alpha.rev + 1000, ..alpha.clone() };
        let err = election.proclaim(ProclaimRequest { leader: Some(stale), value: b"x".to_vec() }).await.unwrap_err();
        assert_eq!(err.message(), "election: not leader");
        let err = election.proclaim(ProclaimRequest { leader: None, value: b"x".to_vec() }).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        // A second candidate waits; the first resigns; the second leads.
        let beta_lease = lease(10).await;
        let mut beta_election = election.clone();
        let beta = tokio::spawn(async move {
            beta_election.campaign(CampaignRequest { name: b"e".to_vec(), lease: beta_lease, value: b"beta".to_vec() }).await
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!beta.is_finished(), "beta led while alpha held it");
        election.resign(ResignRequest { leader: Some(alpha) }).await.unwrap();
        let beta = tokio::time::timeout(Duration::from_secs(10), beta).await.expect("beta never led").unwrap().unwrap();
        assert_eq!(beta.into_inner().leader.unwrap().lease, beta_lease);
        assert_eq!(next_value(&mut observed).await, b"beta");
    }
}
