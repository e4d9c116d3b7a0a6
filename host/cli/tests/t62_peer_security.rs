//! A locked-down cluster, attacked as an outsider on the same network would:
//! raw gRPC to the nodes' ports of real `wasmraft run` processes.
//!
//! Each attack that once broke a cluster (a fake heartbeat moving every term,
//! a `TimeoutNow` electing a node, an injected `AppendEntries` applied by one
//! replica, a forged snapshot wiping one, a `u64::MAX` term bricking all) is
//! replayed from an outsider and from a node of another cluster, with TLS
//! off (the peer port still checks cluster id and membership) and with
//! mutual TLS. After each: no term change, no leader change, every acknowledged
//! write on every node, and every replica's keyspace hash equal.

mod cluster;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster::*;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use wasmraft_client::Consistency;
use wasmraft_proto::v1::raft_client::RaftClient;
use wasmraft_proto::v1::raft_message::Body;
use wasmraft_proto::v1::{
    AppendEntries, Entry, Heartbeat, KeyValuePair, LogId, Membership, RaftBatch, RaftMessage,
    RequestVote, SnapshotChunk, SnapshotMeta, TimeoutNow, entry::Payload,
};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");
/// A quiet cluster must not elect on its own during the test, even on a
/// busy machine: 2 s election timeouts.
const ELECTION_TICKS: u64 = 100;

/// Who the attacker claims to be.
#[derive(Clone, Copy, Debug)]
enum Sender {
    /// Node 99, in the right cluster.
    Outsider,
    /// A member's id, in another cluster.
    WrongCluster(u64),
    /// No identity metadata at all.
    Anonymous,
    /// A member's id, in the right cluster (possible without TLS only).
    Member(u64),
}

/// How the attacker connects to a peer port.
#[derive(Clone)]
enum Credentials {
    Plain,
    Tls(ClientTlsConfig),
}

fn metadata<T>(request: &mut tonic::Request<T>, cluster_id: &str, sender: Sender, to: u64) {
    let (cluster, from) = match sender {
        Sender::Outsider => (cluster_id.to_string(), 99),
        Sender::WrongCluster(from) => ("00000000deadbeef".to_string(), from),
        Sender::Member(from) => (cluster_id.to_string(), from),
        Sender::Anonymous => return,
    };
    let md = request.metadata_mut();
    md.insert("wasmraft-cluster-id", cluster.parse().unwrap());
    md.insert("wasmraft-from", from.to_string().parse().unwrap());
    md.insert("wasmraft-to", to.to_string().parse().unwrap());
}

async fn raft_client(
    addr: &str,
    credentials: &Credentials,
) -> Result<RaftClient<tonic::transport::Channel>, String> {
    let endpoint = match credentials {
        Credentials::Plain => Endpoint::from_shared(format!("http://{addr}")).unwrap(),
        Credentials::Tls(tls) => Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls.clone())
            .unwrap(),
    };
    let channel = endpoint
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| wasmraft_client::error_chain(&e))?;
    Ok(RaftClient::new(channel))
}

/// Sends one Raft message to node `to` at `addr`; the node's answer.
async fn send_message(
    addr: &str,
    credentials: &Credentials,
    cluster_id: &str,
    sender: Sender,
    to: u64,
    term: u64,
    body: Body,
) -> Result<(), String> {
    let mut client = raft_client(addr, credentials).await?;
    let from = match sender {
        Sender::WrongCluster(f) | Sender::Member(f) => f,
        _ => 99,
    };
    let message = RaftMessage {
        from,
        to,
        term,
        body: Some(body),
    };
    let mut request = tonic::Request::new(tokio_stream::iter(vec![RaftBatch {
        messages: vec![message],
    }]));
    metadata(&mut request, cluster_id, sender, to);
    match tokio::time::timeout(Duration::from_secs(5), client.send(request)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err("no answer".into()),
    }
}

/// Streams a one-key snapshot claiming to be at `index` in `term`.
async fn send_snapshot(
    addr: &str,
    credentials: &Credentials,
    cluster_id: &str,
    sender: Sender,
    to: u64,
    term: u64,
    index: u64,
) -> Result<bool, String> {
    let mut client = raft_client(addr, credentials).await?;
    let meta = SnapshotMeta {
        last: Some(LogId { term, index }),
        membership: Some(Membership {
            voters: vec![1, 2, 3],
            voters_outgoing: vec![],
            learners: vec![],
        }),
    };
    let from = match sender {
        Sender::WrongCluster(f) | Sender::Member(f) => f,
        _ => 99,
    };
    let chunk = SnapshotChunk {
        meta: Some(meta),
        from,
        term,
        pairs: vec![KeyValuePair {
            key: b"injected".to_vec(),
            value: b"evil".to_vec(),
        }],
        last: true,
        ..Default::default()
    };
    let mut request = tonic::Request::new(tokio_stream::iter(vec![chunk]));
    metadata(&mut request, cluster_id, sender, to);
    match tokio::time::timeout(Duration::from_secs(5), client.install_snapshot(request)).await {
        Ok(Ok(r)) => Ok(r.into_inner().accepted),
        Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
        Err(_) => Err("no answer".into()),
    }
}

/// An entry carrying an envelope-encoded put, as the leader would write it.
fn injected_entry(term: u64, index: u64) -> Entry {
    let command = put_request("injected", "evil");
    let envelope = wasmraft_node::Envelope {
        timestamp_ms: 1,
        client_id: 0,
        sequence: 0,
        command,
    };
    Entry {
        log_id: Some(LogId { term, index }),
        payload: Some(Payload::Normal(envelope.encode())),
    }
}

/// Terms and the leader, as every node reports them.
async fn terms_and_leader(cluster: &Cluster) -> (BTreeMap<u64, u64>, BTreeMap<u64, u64>) {
    let mut terms = BTreeMap::new();
    let mut leaders = BTreeMap::new();
    for (id, s) in cluster.statuses().await {
        let s = s.unwrap_or_else(|| panic!("node {id} does not answer"));
        terms.insert(id, s.term);
        leaders.insert(id, s.leader_id);
    }
    (terms, leaders)
}

/// Every node holds every acknowledged key and no injected one, and the
/// replicas' keyspace hashes agree (`wasmraft check`).
async fn assert_intact(cluster: &Cluster, acked: &[String]) {
    let leader = cluster.leader().await;
    let mut client = cluster.client([cluster.addr(leader).to_string()]);
    // A linearizable write through the leader: every node that applies it
    // has applied everything before it.
    let fence = client
        .propose(put_request("fence", "1"))
        .await
        .expect("a write after the attacks")
        .index;
    for id in cluster.ids() {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let s = status_of(cluster.addr(id), cluster.client_tls())
                .await
                .expect("status");
            if s.applied_index >= fence {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not apply index {fence}: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut node = cluster.client([cluster.addr(id).to_string()]);
        let kvs = range_kvs(
            &node
                .query(range_request("\0", b"\0"), Consistency::Eventual)
                .await
                .unwrap(),
        );
        let keys: Vec<&str> = kvs.iter().map(|(k, _)| k.as_str()).collect();
        assert!(
            !keys.contains(&"injected"),
            "node {id} holds an injected key: {keys:?}"
        );
        for k in acked {
            assert!(
                keys.contains(&k.as_str()),
                "node {id} lost acknowledged {k}: {keys:?}"
            );
        }
    }
    let out = cluster.cli(&["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("all 3 node(s) agree"),
        "check: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Replays every attack against `cluster` with `credentials` (what an
/// attacker holds), checking after each that nothing moved.
async fn replay_attacks(cluster: &Cluster, credentials: Credentials) {
    let mut acked = Vec::new();
    let mut writer = cluster.client(cluster.endpoints(0));
    for i in 0..20 {
        let key = format!("before/{i}");
        writer.propose(put_request(&key, "v")).await.unwrap();
        acked.push(key);
    }
    let leader = cluster.leader().await;
    let follower = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let status = status_of(cluster.addr(leader), cluster.client_tls())
        .await
        .unwrap();
    let cluster_id = status.cluster_id.clone();
    assert_eq!(
        cluster_id.len(),
        16,
        "status shows the cluster id: {status:?}"
    );
    let (terms, leaders) = terms_and_leader(cluster).await;
    let term = terms[&leader];

    let attacks: Vec<(&str, Body, u64)> = vec![
        (
            "heartbeat at term 1000",
            Body::Heartbeat(Heartbeat {
                commit: 0,
                token: 1,
            }),
            1000,
        ),
        (
            "heartbeat at term u64::MAX",
            Body::Heartbeat(Heartbeat {
                commit: 0,
                token: 1,
            }),
            u64::MAX,
        ),
        (
            "vote request at term 1000",
            Body::RequestVote(RequestVote {
                pre_vote: false,
                last: Some(LogId {
                    term: 999,
                    index: 1 << 40,
                }),
                transfer: true,
            }),
            1000,
        ),
        ("timeout-now", Body::TimeoutNow(TimeoutNow {}), term),
        (
            "append-entries with an injected put",
            Body::AppendEntries(AppendEntries {
                prev: Some(LogId {
                    term,
                    index: status.last_index,
                }),
                entries: vec![injected_entry(term, status.last_index + 1)],
                commit: status.last_index + 1,
            }),
            term,
        ),
    ];
    for sender in [
        Sender::Outsider,
        Sender::WrongCluster(leader),
        Sender::Anonymous,
    ] {
        for (what, body, at_term) in &attacks {
            for target in [follower, leader] {
                let answer = send_message(
                    cluster.peer_addr(target),
                    &credentials,
                    &cluster_id,
                    sender,
                    target,
                    *at_term,
                    body.clone(),
                )
                .await;
                assert!(
                    answer.is_err(),
                    "{what} from {sender:?} to node {target} was accepted"
                );
            }
        }
        let snapshot = send_snapshot(
            cluster.peer_addr(follower),
            &credentials,
            &cluster_id,
            sender,
            follower,
            term,
            1 << 30,
        )
        .await;
        assert!(
            !matches!(snapshot, Ok(true)),
            "a snapshot from {sender:?} was accepted: {snapshot:?}"
        );
        // Let anything that slipped through take effect before looking.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            terms_and_leader(cluster).await,
            (terms.clone(), leaders.clone()),
            "after the attacks from {sender:?}"
        );
    }
    // Without TLS a member's id can be claimed, but what no honest member
    // sends is still refused before the core: the term that once bricked
    // every node, entries out of order, a second leader in this term.
    if matches!(credentials, Credentials::Plain) {
        let other = cluster.ids().into_iter().find(|&id| id != leader && id != follower).unwrap();
        let bad: Vec<(&str, Body, u64, u64)> = vec![
            ("a heartbeat at term u64::MAX", Body::Heartbeat(Heartbeat { commit: 0, token: 1 }), u64::MAX, follower),
            (
                "entries with a gap",
                Body::AppendEntries(AppendEntries {
                    prev: Some(LogId { term, index: status.last_index }),
                    entries: vec![injected_entry(term, status.last_index + 2)],
                    commit: 0,
                }),
                term,
                follower,
            ),
            ("a second leader's heartbeat", Body::Heartbeat(Heartbeat { commit: 0, token: 1 }), term, leader),
        ];
        for (what, body, at_term, target) in bad {
            let answer = send_message(cluster.peer_addr(target), &credentials, &cluster_id, Sender::Member(other), target, at_term, body).await;
            // The stream is refused (malformed) or the core drops the message;
            // either way nothing may move.
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(terms_and_leader(cluster).await, (terms.clone(), leaders.clone()), "after {what} ({answer:?})");
        }
    }
    // A member's id cannot install a snapshot unless it leads this term.
    if matches!(credentials, Credentials::Plain) {
        let third = cluster
            .ids()
            .into_iter()
            .find(|&id| id != leader && id != follower)
            .unwrap();
        let forged = send_snapshot(
            cluster.peer_addr(follower),
            &credentials,
            &cluster_id,
            Sender::Member(third),
            follower,
            term,
            1 << 30,
        )
        .await;
        assert!(!matches!(forged, Ok(true)), "{forged:?}");
    }
    // The client port does not serve Raft at all.
    if let Ok(mut client) = raft_client(cluster.addr(follower), &Credentials::Plain).await {
        let r = client
            .send(tokio_stream::iter(Vec::<RaftBatch>::new()))
            .await;
        assert!(r.is_err(), "the client port answered a Raft stream");
    }
    assert_eq!(terms_and_leader(cluster).await, (terms, leaders));
    assert_intact(cluster, &acked).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacks_on_the_peer_port_without_tls_change_nothing() {
    let _serial = serial();
    let cluster = Cluster::start_opts(3, "", false, ELECTION_TICKS).await;
    replay_attacks(&cluster, Credentials::Plain).await;
    // Refusals are logged with their reason.
    let logs: String = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.log(id))
        .collect();
    for reason in ["wrong-cluster", "not-a-member", "stale-snapshot"] {
        assert!(logs.contains(reason), "no {reason} refusal was logged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacks_on_the_peer_port_with_mutual_tls_are_refused_at_the_handshake() {
    let _serial = serial();
    let cluster = Cluster::start_opts(3, "", true, ELECTION_TICKS).await;
    let tls = cluster.tls().unwrap().clone();
    let ca = Certificate::from_pem(std::fs::read(tls.path("ca.pem")).unwrap());
    // An attacker that trusts the cluster CA, with no certificate, with a
    // client certificate (from the client CA) and with a node certificate of
    // another cluster's CA.
    let foreign = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["certs", "init"])
        .arg(foreign.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let identity = |dir: &std::path::Path, name: &str| {
        Identity::from_pem(
            std::fs::read(dir.join(format!("{name}.pem"))).unwrap(),
            std::fs::read(dir.join(format!("{name}-key.pem"))).unwrap(),
        )
    };
    let attackers = [
        ClientTlsConfig::new().ca_certificate(ca.clone()),
        ClientTlsConfig::new()
            .ca_certificate(ca.clone())
            .identity(identity(&tls.dir, "admin")),
        ClientTlsConfig::new()
            .ca_certificate(ca.clone())
            .identity(identity(foreign.path(), "node-1")),
    ];
    for attacker in &attackers {
        let leader = cluster.leader().await;
        let refused = send_message(
            cluster.peer_addr(leader),
            &Credentials::Tls(attacker.clone()),
            "0000000000000000",
            Sender::Outsider,
            leader,
            1000,
            Body::Heartbeat(Heartbeat {
                commit: 0,
                token: 1,
            }),
        )
        .await;
        assert!(
            refused.is_err(),
            "the peer port accepted a stream without a node certificate"
        );
    }
    let logs: String = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.log(id))
        .collect();
    assert!(
        logs.contains("refused a TLS handshake"),
        "refused handshakes are logged"
    );
    // A node's own certificate speaks only as that node: node 3's may not
    // pretend to be node 1.
    let leader = cluster.leader().await;
    let cluster_id = status_of(cluster.addr(leader), cluster.client_tls())
        .await
        .unwrap()
        .cluster_id;
    let (terms, leaders) = terms_and_leader(&cluster).await;
    let as_node_3 = ClientTlsConfig::new()
        .ca_certificate(ca.clone())
        .identity(identity(&tls.dir, "node-3"));
    let impostor = send_message(
        cluster.peer_addr(2),
        &Credentials::Tls(as_node_3),
        &cluster_id,
        Sender::Member(1),
        2,
        1000,
        Body::Heartbeat(Heartbeat {
            commit: 0,
            token: 1,
        }),
    )
    .await;
    assert!(impostor.is_err(), "node 3's certificate spoke as node 1");
    assert_eq!(terms_and_leader(&cluster).await, (terms, leaders));
    // Even with plain TCP, the peer port speaks nothing but TLS.
    replay_attacks(&cluster, Credentials::Plain).await;
}

/// A 3-node mutual-TLS cluster from `wasmraft certs init`, driven through
/// the CLI: put, get, watch, members; a client without the CA is refused
/// with a message that says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutual_tls_cluster_serves_the_cli_and_refuses_clients_without_the_ca() {
    let _serial = serial();
    let cluster = Cluster::start_tls(3).await;
    let tls = cluster.tls().unwrap().clone();
    let ok = |out: std::process::Output| {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let endpoints = cluster.endpoints(0).join(",");
    let mut watch = Command::new(BIN)
        .args(["watch", "app/"])
        .args(tls.flags("client"))
        .env("WASMRAFT_ENDPOINTS", &endpoints)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let _ = lines_tx.send(line.unwrap());
        }
    });
    // The watch may start after the first puts: write until it sees one.
    let mut seen = None;
    for i in 0..50 {
        assert_eq!(ok(cluster.cli(&["put", &format!("app/x{i}"), "1"])), "OK\n");
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) {
            seen = Some(line);
            break;
        }
    }
    let line = seen.expect("the watch over TLS printed nothing");
    assert!(
        line.starts_with("PUT app/x") && line.ends_with(" 1"),
        "{line}"
    );
    let _ = watch.kill();
    let _ = watch.wait();
    assert_eq!(ok(cluster.cli(&["get", "app/x0"])), "1\n");
    let members = ok(cluster.cli(&["members"]));
    for id in cluster.ids() {
        assert!(members.contains(cluster.peer_addr(id)), "{members}");
        assert!(
            members.contains(cluster.addr(id)),
            "members shows client addresses: {members}"
        );
    }

    // No CA: the CLI cannot speak TLS and says how to.
    let plain = Command::new(BIN)
        .args(["get", "app/x0"])
        .env("WASMRAFT_ENDPOINTS", &endpoints)
        .output()
        .unwrap();
    assert!(!plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("--cacert"), "{err}");
    // The CA but no client certificate: refused at the handshake.
    let p = |n: &str| tls.path(n).display().to_string();
    let anonymous = Command::new(BIN)
        .args(["get", "app/x0", "--cacert", &p("ca.pem")])
        .env("WASMRAFT_ENDPOINTS", &endpoints)
        .output()
        .unwrap();
    assert!(
        !anonymous.status.success(),
        "a client without a certificate was served"
    );
    // A CA that did not sign the nodes' certificates: refused, and said so.
    let wrong_ca = Command::new(BIN)
        .args([
            "get",
            "app/x0",
            "--cacert",
            &p("client-ca.pem"),
            "--cert",
            &p("client.pem"),
            "--key",
            &p("client-key.pem"),
        ])
        .env("WASMRAFT_ENDPOINTS", &endpoints)
        .output()
        .unwrap();
    assert!(!wrong_ca.status.success());
    let err = String::from_utf8_lossy(&wrong_ca.stderr).to_lowercase();
    assert!(err.contains("certificate"), "{err}");
}

/// With client certificates, only the identities in `[tls] admins` may
/// deploy a plugin, change membership, move the leader or run hash checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_certificate_may_administer() {
    let _serial = serial();
    let cluster = Cluster::start_tls(3).await;
    let tls = cluster.tls().unwrap().clone();
    let endpoints = cluster.endpoints(0).join(",");
    let as_client = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .args(tls.flags("client"))
            .env("WASMRAFT_ENDPOINTS", &endpoints)
            .output()
            .unwrap()
    };
    let leader = cluster.leader().await;
    let other = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let kv = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kv.path(), b"\0asm\x01\0\0\0").unwrap();
    let before = terms_and_leader(&cluster).await;
    for args in [
        vec!["plugin", "deploy", kv.path().to_str().unwrap()],
        vec!["member", "remove", "3"],
        vec!["member", "add-learner", "4", "127.0.0.1:1"],
        vec!["transfer-leader", &other.to_string()],
        vec!["check"],
    ] {
        let args: Vec<&str> = args.iter().map(|a| &**a).collect();
        let out = as_client(&args);
        assert!(!out.status.success(), "{args:?} succeeded for a non-admin");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("permission denied") && err.contains("wasmraft-client"),
            "{args:?}: {err}"
        );
    }
    // An etcd alarm change is an admin operation through wasmraft.v1 too: a
    // client's NOSPACE alarm for the leader would stop every put.
    {
        use prost::Message as _;
        use std::io::Write as _;
        use wasmraft_proto::etcdserverpb::AlarmRequest;
        use wasmraft_proto::kvplugin::{Request as KvPluginRequest, request::Request as KvRequest};
        let raise = AlarmRequest { action: 1, member_id: leader, alarm: 1 };
        let command = KvPluginRequest { request: Some(KvRequest::RequestAlarm(raise)) }.encode_to_vec();
        let mut child = Command::new(BIN)
            .args(["propose", "--stdin"])
            .args(tls.flags("client"))
            .env("WASMRAFT_ENDPOINTS", &endpoints)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&command).unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("permission denied") && err.contains("alarm change"), "{err}");
    }
    assert_eq!(terms_and_leader(&cluster).await, before, "nothing changed");
    let members = String::from_utf8(cluster.cli(&["members"]).stdout).unwrap();
    assert_eq!(
        members.lines().filter(|l| l.contains("voter")).count(),
        3,
        "{members}"
    );
    // Ordinary requests are fine for the client identity.
    assert!(as_client(&["put", "k", "v"]).status.success());
    // The admin may.
    let out = cluster.cli(&["transfer-leader", &other.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cluster.leader().await, other);
}

/// A removed member stops serving within about an election timeout, says
/// so in its status, and the others stop dialing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_member_stops_serving_and_is_no_longer_dialed() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader().await;
    let removed = cluster.ids().into_iter().find(|&id| id != leader).unwrap();
    let out = cluster.cli(&["member", "remove", &removed.to_string()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = Instant::now();
    loop {
        let s = status_of(cluster.addr(removed), None)
            .await
            .expect("the removed node still answers status");
        if s.removed {
            break;
        }
        // Typically 0.3 s: one randomised election timeout (0.2 to 0.4 s
        // here) without a leader, then the leader refuses its pre-vote. The
        // bound leaves room for a loaded machine.
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "node {removed} does not know it was removed: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "node {removed} knew it was removed {:?} after the change",
        started.elapsed()
    );
    let mut alone = wasmraft_client::Client::new([cluster.addr(removed)])
        .unwrap()
        .with_retry_for(Duration::ZERO);
    let err = alone
        .propose(put_request("via-removed", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Some("removed"), "{err}");
    let err = alone
        .query(range_request("a", b""), Consistency::Eventual)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), Some("removed"), "{err}");
    // The others closed their links to it and keep serving.
    let mut client = cluster.client(
        cluster
            .endpoints(0)
            .into_iter()
            .filter(|e| e != cluster.addr(removed))
            .collect::<Vec<_>>(),
    );
    client
        .propose(put_request("after-removal", "1"))
        .await
        .unwrap();
    for id in cluster.ids().into_iter().filter(|&id| id != removed) {
        let log = cluster.log(id);
        assert!(
            log.contains("no longer a member; closing the link to it"),
            "node {id}:\n{log}"
        );
    }
    let log = cluster.log(removed);
    assert!(log.contains("removed from the cluster"), "{log}");
}
