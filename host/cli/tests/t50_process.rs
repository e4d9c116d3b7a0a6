//! The `wasmraft` binary as users run it: separate processes, real gRPC on
//! loopback, `kill -9`.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use prost::Message;
use wasmraft_client::{Client, Consistency};
use wasmraft_proto::etcdserverpb::{RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

/// A `wasmraft dev` process (a 3-node cluster in one process); killed with
/// SIGKILL when dropped.
struct DevNode {
    child: Child,
    endpoint: String,
    /// The nodes' peer (Raft) addresses, comma-separated.
    peers: String,
    /// The `try:` hint it printed.
    hint: String,
    /// The data directory it printed.
    data: String,
}

impl DevNode {
    fn start(data_dir: &std::path::Path) -> Self {
        Self::spawn(Command::new(BIN).args(["dev", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data_dir))
    }

    fn spawn(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn wasmraft dev");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut endpoint = String::new();
        let mut peers = String::new();
        let mut data = String::new();
        let hint = loop {
            assert!(Instant::now() < deadline, "wasmraft dev did not become ready");
            let line = lines.next().expect("wasmraft dev exited before it was ready").unwrap();
            if let Some(addrs) = line.trim().strip_prefix("endpoints:") {
                endpoint = addrs.trim().to_string();
            }
            if let Some(addrs) = line.trim().strip_prefix("peers:") {
                peers = addrs.trim().to_string();
            }
            if let Some(dir) = line.trim().strip_prefix("data:") {
                data = dir.trim().to_string();
            }
            if let Some(hint) = line.trim().strip_prefix("try:") {
                break hint.trim().to_string();
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        DevNode { child, endpoint, peers, hint, data }
    }

    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap();
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", &self.endpoint).output().unwrap()
    }
}

impl Drop for DevNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn stdout(o: &std::process::Output) -> String {
    assert!(o.status.success(), "command failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn put_get_del_and_status_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let node = DevNode::start(dir.path());
    assert_eq!(stdout(&node.cli(&["put", "a", "1"])), "OK\n");
    assert_eq!(stdout(&node.cli(&["get", "a"])), "1\n");
    stdout(&node.cli(&["put", "app/x", "10"]));
    stdout(&node.cli(&["put", "app/y", "20"]));
    assert_eq!(stdout(&node.cli(&["get", "--prefix", "app/"])), "app/x\n10\napp/y\n20\n");
    assert_eq!(stdout(&node.cli(&["get", "a", "--consistency", "e"])), "1\n");
    assert_eq!(stdout(&node.cli(&["del", "--prefix", "app/"])), "2\n");
    let missing = node.cli(&["get", "app/x"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));
    let status = stdout(&node.cli(&["status"]));
    assert!(status.contains("leader:   "), "{status}");
    assert!(status.contains("plugin:   wasmraft-kv"), "{status}");
    // Every node answers, followers included: writes are forwarded to the
    // leader and linearizable reads confirm with it.
    for (i, endpoint) in node.endpoint.split(',').enumerate() {
        let one = |args: &[&str]| Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", endpoint).output().unwrap();
        assert_eq!(stdout(&one(&["put", &format!("via{i}"), "v"])), "OK\n");
        for j in 0..=i {
            assert_eq!(stdout(&one(&["get", &format!("via{j}")])), "v\n", "node {endpoint} reads via{j}");
        }
    }
}

/// Values too large for an argument list come from standard input or a
/// file, as any bytes; a client command whose output is closed early ends
/// quietly instead of panicking.
#[test]
fn put_reads_values_from_stdin_or_a_file_and_a_closed_pipe_is_quiet() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let node = DevNode::start(dir.path());
    // 512 KiB of non-UTF-8 bytes: past what an argument list takes.
    let big: Vec<u8> = (0..512 * 1024).map(|i| (i % 251) as u8 | 0x80).collect();
    let mut put = Command::new(BIN)
        .args(["put", "from-stdin", "-"])
        .env("WASMRAFT_ENDPOINTS", &node.endpoint)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    put.stdin.take().unwrap().write_all(&big).unwrap();
    assert_eq!(stdout(&put.wait_with_output().unwrap()), "OK\n");
    let got = node.cli(&["get", "from-stdin"]);
    assert!(got.status.success());
    assert_eq!(&got.stdout[..got.stdout.len() - 1], big.as_slice(), "the bytes read back, then a newline");

    let file = dir.path().join("value.bin");
    std::fs::write(&file, b"from a file").unwrap();
    assert_eq!(stdout(&node.cli(&["put", "from-file", "--from-file", file.to_str().unwrap()])), "OK\n");
    assert_eq!(stdout(&node.cli(&["get", "from-file"])), "from a file\n");
    let both = node.cli(&["put", "k", "v", "--from-file", file.to_str().unwrap()]);
    assert!(!both.status.success(), "a value and a file at once are refused");
    let neither = node.cli(&["put", "k"]);
    assert!(!neither.status.success() && String::from_utf8_lossy(&neither.stderr).contains("--from-file"));

    // Output closed before the command prints (as `| head -1` does to a
    // longer output): `print!` fails with a broken pipe, and the client
    // ends with success and says nothing, where it used to panic.
    for args in [&["check"][..], &["plugin", "info"][..], &["status"][..], &["get", "from-file"][..]] {
        let mut child = Command::new(BIN)
            .args(args)
            .env("WASMRAFT_ENDPOINTS", &node.endpoint)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && stderr.is_empty(), "{args:?} on a closed pipe: {:?} {stderr}", out.status);
    }
}

#[test]
fn members_and_leader_transfer() {
    let dir = tempfile::tempdir().unwrap();
    let node = DevNode::start(dir.path());
    assert_eq!(node.hint, format!("wasmraft put --endpoints {0} a 1 && wasmraft get --endpoints {0} a", node.endpoint));
    let members = stdout(&node.cli(&["members"]));
    assert_eq!(members.lines().filter(|l| l.contains("voter")).count(), 3, "{members}");
    let leader_line = members.lines().find(|l| l.contains("(leader)")).expect("a leader");
    let leader: u64 = leader_line.split_whitespace().next().unwrap().parse().unwrap();
    let target = if leader == 3 { 2 } else { 3 };
    assert_eq!(stdout(&node.cli(&["transfer-leader", &target.to_string()])), format!("node {target} leads\n"));
    // Writes go on under the new leader.
    assert_eq!(stdout(&node.cli(&["put", "after-transfer", "1"])), "OK\n");
    assert_eq!(stdout(&node.cli(&["get", "after-transfer"])), "1\n");
    let bad = node.cli(&["transfer-leader", "9"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a voter"), "{}", String::from_utf8_lossy(&bad.stderr));
}

/// SIGTERM (or Ctrl-C) stops a running cluster promptly, although its
/// nodes hold Raft streams open to each other.
#[test]
fn sigterm_stops_the_nodes_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = DevNode::start(dir.path());
    stdout(&node.cli(&["put", "a", "1"]));
    let pid = node.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = node.child.try_wait().unwrap() {
            assert!(status.success(), "exit status {status}");
            break;
        }
        assert!(Instant::now() < deadline, "wasmraft dev did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The data is intact for the next start.
    drop(node);
    let node = DevNode::start(dir.path());
    assert_eq!(stdout(&node.cli(&["get", "a"])), "1\n");
}

/// Without `--data-dir`, a dev cluster keeps its state in a temporary
/// directory, removed when it is stopped with Ctrl-C or SIGTERM (removed
/// while the nodes' RocksDB was still open, most of it stayed behind).
#[test]
fn a_stopped_dev_cluster_removes_its_temporary_directory() {
    for signal in ["-INT", "-TERM"] {
        let mut node = DevNode::spawn(Command::new(BIN).args(["dev", "--listen", "127.0.0.1:0"]));
        let dir = std::path::PathBuf::from(&node.data);
        assert!(dir.join("node-1").is_dir(), "data: {}", dir.display());
        stdout(&node.cli(&["put", "a", "1"]));
        let pid = node.child.id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = node.child.try_wait().unwrap() {
                assert!(status.success(), "exit status {status} after {signal}");
                break;
            }
            assert!(Instant::now() < deadline, "wasmraft dev did not exit after {signal}");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(!dir.exists(), "{} left behind after {signal}", dir.display());
    }
}

#[test]
fn a_config_with_an_unknown_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("node.toml");
    std::fs::write(&cfg, "id = 1\ndata_dir = \"d\"\nelection_timeout = 3\n").unwrap();
    let out = Command::new(BIN).args(["run", "--config"]).arg(&cfg).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `election_timeout`"));
}

fn get_request(key: &str) -> Vec<u8> {
    RequestOp { request: Some(Request::RequestRange(RangeRequest { key: key.into(), ..Default::default() })) }
        .encode_to_vec()
}

fn put_request(key: &str, value: &str) -> Vec<u8> {
    use wasmraft_proto::etcdserverpb::PutRequest;
    RequestOp { request: Some(Request::RequestPut(PutRequest { key: key.into(), value: value.into(), ..Default::default() })) }
        .encode_to_vec()
}

/// Every acknowledged put survives `kill -9` of all three nodes at once
/// (`wasmraft dev` runs them in one process).
#[test]
fn no_acknowledged_write_is_lost_on_kill_9() {
    const PUTS: usize = 1000;
    const WRITERS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let node = DevNode::start(dir.path());
    let endpoint = node.endpoint.clone();
    let acked: Vec<usize> = rt.block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|w| {
                let endpoint = endpoint.clone();
                tokio::spawn(async move {
                    let mut client = Client::new(endpoint.split(',')).unwrap();
                    let mut acked = Vec::new();
                    for i in (w..PUTS).step_by(WRITERS) {
                        client.propose(put_request(&format!("key-{i:04}"), &format!("value-{i}"))).await.unwrap();
                        acked.push(i);
                    }
                    acked
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    assert_eq!(acked.len(), PUTS);
    node.kill9();

    let node = DevNode::start(dir.path());
    let endpoint = node.endpoint.clone();
    rt.block_on(async {
        let mut client = Client::new(endpoint.split(',')).unwrap();
        for i in acked {
            let bytes = client.query(get_request(&format!("key-{i:04}")), Consistency::Linearizable).await.unwrap();
            let Some(Response::ResponseRange(r)) = ResponseOp::decode(bytes.as_slice()).unwrap().response else {
                panic!("not a range response")
            };
            assert_eq!(r.kvs.len(), 1, "acknowledged key-{i:04} was lost");
            assert_eq!(r.kvs[0].value, format!("value-{i}").into_bytes());
        }
    });
}

fn repo_file(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// The plugin the README shows is the one CI builds, and it answers.
#[test]
fn the_readme_plugin_builds_and_answers() {
    let readme = std::fs::read_to_string(repo_file("README.md")).unwrap();
    let source = std::fs::read_to_string(repo_file("plugins/examples/counter/src/lib.rs")).unwrap();
    let block = readme.split("```rust\n").nth(1).and_then(|b| b.split("```").next()).expect("a rust block");
    assert_eq!(block, source, "README's plugin differs from plugins/examples/counter/src/lib.rs");

    // As built by `cargo build --target wasm32-unknown-unknown`: a core module.
    let module = repo_file("plugins/target/wasm32-unknown-unknown/release/counter.wasm");
    assert!(module.exists(), "{} missing: run `cargo xtask plugins` first", module.display());
    let dir = tempfile::tempdir().unwrap();
    let node = DevNode::spawn(
        Command::new(BIN).args(["dev", "--listen", "127.0.0.1:0", "--plugin"]).arg(&module).arg("--data-dir").arg(dir.path()),
    );
    // The hint fits the plugin and the addresses (not the defaults here).
    assert!(node.hint.starts_with(&format!("wasmraft propose --endpoints {} ", node.endpoint)), "{}", node.hint);
    assert_eq!(stdout(&node.cli(&["propose", "5"])), "5\n");
    assert_eq!(stdout(&node.cli(&["propose", "3"])), "8\n");
    assert_eq!(stdout(&node.cli(&["query", ""])), "8\n");
    let bad = node.cli(&["propose", "five"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected a number"));
    assert_eq!(stdout(&node.cli(&["query", ""])), "8\n");
}

#[test]
fn watch_prints_changes_under_a_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let node = DevNode::start(dir.path());
    let mut watcher = Command::new(BIN)
        .args(["watch", "app/"])
        .env("WASMRAFT_ENDPOINTS", &node.endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = watcher.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    // The watcher subscribes asynchronously: write until it reports a write.
    let mut first = None;
    for n in 0..100 {
        stdout(&node.cli(&["put", "other", "ignored"]));
        stdout(&node.cli(&["put", "app/w", &n.to_string()]));
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            first = Some(line);
            break;
        }
    }
    let first = first.expect("the watcher reported a put");
    assert!(first.starts_with("PUT app/w "), "{first}");
    stdout(&node.cli(&["del", "app/w"]));
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        let done = line == "DELETE app/w";
        lines.push(line);
        if done {
            break;
        }
    }
    assert_eq!(lines.last().map(String::as_str), Some("DELETE app/w"), "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("app/w")), "only keys under the prefix: {lines:?}");
    let _ = watcher.kill();
    let _ = watcher.wait();
}

/// A fourth node joins a running cluster as a learner, is promoted to voter,
/// serves requests, and is removed again, while a client keeps writing; no
/// acknowledged write is lost.
#[test]
fn a_node_joins_as_learner_is_promoted_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = DevNode::start(dir.path());
    let free: Vec<std::net::TcpListener> = (0..2).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    let (addr, peer_addr) = (free[0].local_addr().unwrap().to_string(), free[1].local_addr().unwrap().to_string());
    drop(free);
    let mut peers: String = cluster.peers.split(',').enumerate().map(|(i, a)| format!("{} = \"{a}\"\n", i + 1)).collect();
    peers.push_str(&format!("4 = \"{peer_addr}\"\n"));
    let config = dir.path().join("node4.toml");
    let data = dir.path().join("node-4-data");
    std::fs::write(
        &config,
        format!(
            "id = 4\ndata_dir = \"{}\"\nlisten = \"{addr}\"\npeer_listen = \"{peer_addr}\"\njoin = true\n[raft]\ntick_ms = 50\n[peers]\n{peers}",
            data.display()
        ),
    )
    .unwrap();
    let fourth = KillOnDrop(Command::new(BIN).args(["run", "--config"]).arg(&config).stderr(Stdio::null()).spawn().unwrap());
    stdout(&cluster.cli(&["put", "before-join", "1"]));

    // Writes keep flowing through every membership change.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, endpoints) = (stop.clone(), cluster.endpoint.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let mut client = Client::new(endpoints.split(',')).unwrap();
                let mut acked = Vec::new();
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    if client.propose(put_request(&format!("load/{n:06}"), "v")).await.is_ok() {
                        acked.push(n);
                    }
                    n += 1;
                }
                acked
            })
        })
    };

    // A mistyped address is refused before it reaches the log.
    let typo = cluster.cli(&["member", "add-learner", "4", &format!("http://{peer_addr}")]);
    assert!(!typo.status.success() && String::from_utf8_lossy(&typo.stderr).contains("without a scheme"), "{typo:?}");
    assert_eq!(stdout(&cluster.cli(&["member", "add-learner", "4", &peer_addr])), "node 4 added as a learner\n");
    let members = |c: &DevNode| stdout(&c.cli(&["members"]));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = members(&cluster);
        let learner = m.lines().find(|l| l.starts_with("4 ")).map(str::to_string).unwrap_or_default();
        // ID ROLE PEER CLIENT MATCHED STATE: a learner that matched some of the log.
        if learner.contains("learner") && learner.split_whitespace().nth(4).is_some_and(|n| n != "0") {
            break;
        }
        assert!(Instant::now() < deadline, "learner 4 did not catch up: {m}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(stdout(&cluster.cli(&["member", "promote", "4"])), "node 4 is a voter\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !members(&cluster).lines().any(|l| l.starts_with("4 ") && l.contains("voter")) {
        assert!(Instant::now() < deadline, "node 4 did not become a voter: {}", members(&cluster));
        std::thread::sleep(Duration::from_millis(100));
    }
    let on4 = |args: &[&str]| Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", &addr).output().unwrap();
    assert_eq!(stdout(&on4(&["put", "via-4", "x"])), "OK\n");
    assert_eq!(stdout(&on4(&["get", "before-join"])), "1\n");
    assert_eq!(stdout(&cluster.cli(&["get", "via-4"])), "x\n");

    assert_eq!(stdout(&cluster.cli(&["member", "remove", "4"])), "node 4 removed\n");
    let deadline = Instant::now() + Duration::from_secs(10);
    while members(&cluster).lines().any(|l| l.starts_with("4 ") && !l.ends_with(" removed")) {
        assert!(Instant::now() < deadline, "node 4 is still a member: {}", members(&cluster));
        std::thread::sleep(Duration::from_millis(100));
    }
    let m = members(&cluster);
    assert!(m.lines().any(|l| l.starts_with("4 ") && l.contains(" removed ") && l.ends_with(" removed")), "node 4 marked removed: {m}");
    assert_eq!(m.lines().filter(|l| l.ends_with(" ok")).count(), 3, "the others are ok: {m}");
    stdout(&cluster.cli(&["put", "after-remove", "y"]));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writer.join().unwrap();
    assert!(acked.len() > 20, "the writer made progress during the changes ({} acked)", acked.len());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut client = Client::new(cluster.endpoint.split(',')).unwrap();
        let bytes = client.query(prefix_request("load/"), Consistency::Linearizable).await.unwrap();
        let Some(Response::ResponseRange(r)) = ResponseOp::decode(bytes.as_slice()).unwrap().response else { panic!() };
        let stored: std::collections::BTreeSet<Vec<u8>> = r.kvs.into_iter().map(|kv| kv.key).collect();
        for n in &acked {
            assert!(stored.contains(format!("load/{n:06}").as_bytes()), "acknowledged load/{n:06} was lost");
        }
    });
    drop(fourth);
}

/// A child process killed (SIGKILL) when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn prefix_request(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    *end.last_mut().unwrap() += 1;
    RequestOp { request: Some(Request::RequestRange(RangeRequest { key: prefix.into(), range_end: end, ..Default::default() })) }
        .encode_to_vec()
}

/// The one request limit over real gRPC, on the leader and through a
/// follower's forwarding: exactly the limit is stored, one byte more is
/// `INVALID_ARGUMENT` with both sizes and takes no log index.
#[test]
fn the_request_limit_is_exact_over_grpc() {
    let limit = wasmraft_node::DEFAULT_MAX_REQUEST_BYTES;
    let of_size = |key: &str, len: usize| {
        let mut value = len - key.len() - 16;
        loop {
            let cmd = put_request(key, &"v".repeat(value));
            if cmd.len() >= len {
                assert_eq!(cmd.len(), len);
                return cmd;
            }
            value += 1;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let node = DevNode::start(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        for endpoint in node.endpoint.split(',') {
            let mut client = Client::new([endpoint]).unwrap();
            client.propose(of_size(endpoint, limit)).await.expect("a request of exactly the limit");
            let before = client.status().await.unwrap().last_index;
            let wasmraft_client::ClientError::Status(status) =
                client.propose(of_size("over", limit + 1)).await.unwrap_err()
            else {
                panic!("not a status")
            };
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            let expected = format!("request of {} bytes exceeds max_request_bytes ({limit} bytes)", limit + 1);
            assert!(status.message().contains(&expected), "{status:?}");
            assert_eq!(client.status().await.unwrap().last_index, before, "a refused request took a log index");
            let bytes = client.query(get_request(endpoint), Consistency::Linearizable).await.unwrap();
            let Some(Response::ResponseRange(r)) = ResponseOp::decode(bytes.as_slice()).unwrap().response else {
                panic!("not a range response")
            };
            assert_eq!(r.kvs.len(), 1, "the put of exactly the limit through {endpoint} was not stored");
        }
    });
}

/// With nothing listening, a write says it is retrying, gives up at
/// `--timeout`, and says what to check.
#[test]
fn a_command_against_no_node_retries_visibly_and_stops_at_its_timeout() {
    // Bound but not listening: connections to it are refused, and no other
    // test's server can take the port meanwhile (a port freed here was
    // once taken by one, which answered the put).
    let refusing = tokio::net::TcpSocket::new_v4().unwrap();
    refusing.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = refusing.local_addr().unwrap().to_string();
    let started = Instant::now();
    let out = Command::new(BIN).args(["put", "k", "v", "--timeout", "1s", "--endpoints", &addr]).output().unwrap();
    let elapsed = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("retrying: cannot reach any endpoint"), "{err}");
    assert!(err.contains("is a node running there?"), "{err}");
    assert!(!err.contains("TLS"), "no TLS hint for a refused connection: {err}");
    assert!(elapsed < Duration::from_secs(10), "bounded by --timeout: {elapsed:?}");
}
