//! The harness of the cluster fault tests: a cluster of `wasmraft run`
//! processes ([`Cluster`]), KV requests and their recording for the
//! linearizability checker, and a random put/get [`Workload`].
// Each test binary uses part of the harness.
#![allow(dead_code)]

pub mod docs;
pub mod etcdctl;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;
use wasmraft_client::{Client, ClientError, Consistency, StatusResponse, TlsConfig};
use wasmraft_lincheck::{CheckOptions, KvInput, KvModel, KvOutput, KvRecorder, check_report};
use wasmraft_proto::etcdserverpb::{
    PutRequest, RangeRequest, RequestOp, ResponseOp, request_op::Request, response_op::Response,
};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");
/// Short ticks keep the tests quick: elections take a few hundred ms.
const TICK_MS: u64 = 20;
const ELECTION_TICKS: u64 = 10;
/// How long a client waits for one operation before calling it unknown and
/// moving to another endpoint (a paused node accepts connections but never
/// answers).
pub const OP_TIMEOUT: Duration = Duration::from_millis(1000);

pub fn election_timeout() -> Duration {
    Duration::from_millis(TICK_MS * ELECTION_TICKS)
}

/// A child process killed when dropped.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tests share two cores; one cluster at a time keeps elections honest.
static SERIAL: Mutex<()> = Mutex::new(());

/// Sends `child` SIGINT, as Ctrl-C would, and waits up to `within` for
/// it to exit; `None` if it is still running.
pub fn interrupt(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// The cluster harness
// ---------------------------------------------------------------------------

/// Three (or `n`) `wasmraft run` processes, each with its TOML config, data
/// directory and log file in one temporary directory. Every process is killed
/// when the cluster is dropped; a panicking test keeps the directory (the
/// nodes' data only if small, see `drop_large_data_dirs`) and prints the
/// end of every log.
pub struct Cluster {
    dir: Option<tempfile::TempDir>,
    /// Client addresses.
    addrs: BTreeMap<u64, String>,
    /// Peer (Raft) addresses.
    peer_addrs: BTreeMap<u64, String>,
    /// Metrics and health addresses.
    metrics_addrs: BTreeMap<u64, String>,
    running: BTreeMap<u64, Child>,
    paused: BTreeSet<u64>,
    /// With TLS on: the certificates, and how the harness's clients connect
    /// (as the admin).
    tls: Option<Tls>,
}

/// A TLS cluster's certificates, from `wasmraft certs init`.
#[derive(Clone, Debug)]
pub struct Tls {
    pub dir: PathBuf,
}

impl Tls {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A client config presenting `who` (`admin`, `client`, or `None`).
    pub fn client(&self, who: Option<&str>) -> TlsConfig {
        let config = TlsConfig::new(std::fs::read(self.path("ca.pem")).unwrap());
        match who {
            Some(w) => config.with_identity(
                std::fs::read(self.path(&format!("{w}.pem"))).unwrap(),
                std::fs::read(self.path(&format!("{w}-key.pem"))).unwrap(),
            ),
            None => config,
        }
    }

    /// CLI flags presenting `who`.
    pub fn flags(&self, who: &str) -> Vec<String> {
        let p = |n: &str| self.path(n).display().to_string();
        vec![
            "--cacert".into(),
            p("ca.pem"),
            "--cert".into(),
            p(&format!("{who}.pem")),
            "--key".into(),
            p(&format!("{who}-key.pem")),
        ]
    }
}

/// Free loopback ports: bind port 0, note the port, release it.
pub fn free_addrs(n: usize) -> Vec<String> {
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect()
}

impl Cluster {
    /// Writes the configs, starts every node and waits for a leader.
    pub async fn start(n: u64) -> Cluster {
        Self::start_with(n, "").await
    }

    /// Like [`Cluster::start`], with extra lines for each node's `[raft]` section.
    pub async fn start_with(n: u64, raft_extra: &str) -> Cluster {
        Self::start_opts(n, raft_extra, false, ELECTION_TICKS).await
    }

    /// Like [`Cluster::start`], with mutual TLS on both ports from `wasmraft
    /// certs init`; only `admin.pem` may administer.
    pub async fn start_tls(n: u64) -> Cluster {
        Self::start_opts(n, "", true, ELECTION_TICKS).await
    }

    /// A cluster whose election timeout is `election_ticks` ticks of 20 ms,
    /// with or without TLS.
    pub async fn start_opts(n: u64, raft_extra: &str, tls: bool, election_ticks: u64) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("wasmraft-t60-")
            .tempdir()
            .unwrap();
        let free = free_addrs(3 * n as usize);
        let addrs: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, free[id as usize - 1].clone()))
            .collect();
        let peer_addrs: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, free[(n + id) as usize - 1].clone()))
            .collect();
        let metrics_addrs: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, free[(2 * n + id) as usize - 1].clone()))
            .collect();
        let peers: String = peer_addrs
            .iter()
            .map(|(id, a)| format!("{id} = \"{a}\"\n"))
            .collect();
        let tls = tls.then(|| {
            let certs = dir.path().join("certs");
            let out = Command::new(BIN)
                .args(["certs", "init"])
                .arg(&certs)
                .args(["--nodes", &n.to_string()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "certs init: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Tls { dir: certs }
        });
        for (id, addr) in &addrs {
            let data = dir.path().join(format!("n{id}"));
            let tls_section = match &tls {
                Some(t) => format!(
                    "[tls]\ncert = \"{}\"\nkey = \"{}\"\nca = \"{}\"\nclient_ca = \"{}\"\nclient_cert_auth = true\nadmins = [\"wasmraft-admin\"]\n",
                    t.path(&format!("node-{id}.pem")).display(),
                    t.path(&format!("node-{id}-key.pem")).display(),
                    t.path("ca.pem").display(),
                    t.path("client-ca.pem").display()
                ),
                None => String::new(),
            };
            let config = format!(
                "id = {id}\ndata_dir = \"{}\"\nlisten = \"{addr}\"\npeer_listen = \"{}\"\nmetrics_listen = \"{}\"\nfault_injection = true\n\n[peers]\n{peers}\n\
                 [raft]\ntick_ms = {TICK_MS}\nelection_ticks = {election_ticks}\nheartbeat_ticks = 1\n{raft_extra}\n\
                 [limits]\nrequest_timeout_ms = 1000\n{tls_section}",
                data.display(),
                peer_addrs[id],
                metrics_addrs[id],
            );
            std::fs::write(dir.path().join(format!("n{id}.toml")), config).unwrap();
        }
        let mut cluster = Cluster {
            dir: Some(dir),
            addrs,
            peer_addrs,
            metrics_addrs,
            running: BTreeMap::new(),
            paused: BTreeSet::new(),
            tls,
        };
        for id in cluster.ids() {
            cluster.spawn(id);
        }
        cluster.leader().await;
        cluster
    }

    /// The certificates, when TLS is on.
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// How the harness's own clients connect: as the admin, with TLS on.
    pub fn client_tls(&self) -> Option<TlsConfig> {
        self.tls.as_ref().map(|t| t.client(Some("admin")))
    }

    /// A client of `endpoints`, over TLS (as the admin) when it is on.
    pub fn client(&self, endpoints: impl IntoIterator<Item = String>) -> Client {
        Client::with_tls(endpoints, self.client_tls()).unwrap()
    }

    /// A `wasmraft run` process for a new node `id` that joins this
    /// cluster (same timing, data in `dir`), killed when dropped; with its
    /// client and peer addresses.
    pub fn spawn_joining(&self, id: u64, dir: &Path) -> (ChildGuard, String, String) {
        let addrs = free_addrs(2);
        let (addr, peer_addr) = (addrs[0].clone(), addrs[1].clone());
        let mut peers: String = self.peer_addrs.iter().map(|(i, a)| format!("{i} = \"{a}\"\n")).collect();
        peers.push_str(&format!("{id} = \"{peer_addr}\"\n"));
        let config = dir.join(format!("n{id}.toml"));
        std::fs::write(
            &config,
            format!(
                "id = {id}\ndata_dir = \"{}\"\nlisten = \"{addr}\"\npeer_listen = \"{peer_addr}\"\njoin = true\n\n[peers]\n{peers}\n\
                 [raft]\ntick_ms = {TICK_MS}\nelection_ticks = {ELECTION_TICKS}\nheartbeat_ticks = 1\n",
                dir.join(format!("n{id}")).display()
            ),
        )
        .unwrap();
        let log = File::create(dir.join(format!("n{id}.log"))).unwrap();
        let child = Command::new(BIN).args(["run", "--config"]).arg(&config).stdout(Stdio::null()).stderr(log).spawn().unwrap();
        (ChildGuard(child), addr, peer_addr)
    }

    /// `GET path` on node `id`'s metrics listener: the status code and body.
    pub fn http_get(&self, id: u64, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.metrics_addrs[&id]).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let code = response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        (code, body)
    }

    /// Node `id`'s peer (Raft) address.
    pub fn peer_addr(&self, id: u64) -> &str {
        &self.peer_addrs[&id]
    }

    /// Runs the `wasmraft` CLI against every node (as the admin with TLS).
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(BIN);
        command
            .args(args)
            .env("WASMRAFT_ENDPOINTS", self.endpoints(0).join(","));
        if let Some(t) = &self.tls {
            command.args(t.flags("admin"));
        }
        command.output().unwrap()
    }

    /// Every node's status, by id (`None`: no answer).
    pub async fn statuses(&self) -> BTreeMap<u64, Option<StatusResponse>> {
        let mut out = BTreeMap::new();
        for id in self.ids() {
            out.insert(id, status_of(self.addr(id), self.client_tls()).await);
        }
        out
    }

    /// Partitions node `id` from every other node, both ways, through the
    /// nodes' transport fault injection (the processes keep running).
    pub async fn isolate(&self, id: u64) {
        let others: Vec<u64> = self.ids().into_iter().filter(|&o| o != id).collect();
        self.cut_off(id, others.clone()).await;
        for o in others {
            self.cut_off(o, vec![id]).await;
        }
    }

    /// Makes a worker of node `id` fail (`raft` or `apply`), through the
    /// admin API's fault injection.
    pub async fn inject_fault(&self, id: u64, worker: &str) {
        use wasmraft_proto::v1::{InjectFaultRequest, admin_client::AdminClient};
        let tls = self.client_tls();
        let channel = wasmraft_client::endpoint(self.addr(id), tls.as_ref()).unwrap().connect().await.expect("admin connection");
        AdminClient::new(channel).inject_fault(InjectFaultRequest { worker: worker.into() }).await.expect("inject a fault");
    }

    /// Waits up to `timeout` for node `id`'s process to exit by itself.
    pub fn wait_exit(&mut self, id: u64, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.running.get_mut(&id).unwrap_or_else(|| panic!("node {id} is not running"));
            if let Some(status) = child.try_wait().unwrap() {
                self.running.remove(&id);
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restores every link.
    pub async fn heal(&self) {
        for id in self.ids() {
            self.cut_off(id, Vec::new()).await;
        }
    }

    async fn cut_off(&self, id: u64, peers: Vec<u64>) {
        use wasmraft_proto::v1::{CutOffRequest, admin_client::AdminClient};
        let tls = self.client_tls();
        let channel = wasmraft_client::endpoint(self.addr(id), tls.as_ref())
            .unwrap()
            .connect()
            .await
            .expect("admin connection");
        AdminClient::new(channel)
            .cut_off(CutOffRequest { peers })
            .await
            .expect("cut off");
    }

    /// What node `id` has logged so far.
    pub fn log(&self, id: u64) -> String {
        std::fs::read_to_string(self.dir().join(format!("n{id}.log"))).unwrap_or_default()
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    pub fn ids(&self) -> Vec<u64> {
        self.addrs.keys().copied().collect()
    }

    pub fn addr(&self, id: u64) -> &str {
        &self.addrs[&id]
    }

    /// Every endpoint, starting at the `first`-th (so clients spread out).
    pub fn endpoints(&self, first: usize) -> Vec<String> {
        let all: Vec<String> = self.addrs.values().cloned().collect();
        (0..all.len())
            .map(|i| all[(first + i) % all.len()].clone())
            .collect()
    }

    fn spawn(&mut self, id: u64) {
        assert!(
            !self.running.contains_key(&id),
            "node {id} is already running"
        );
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir().join(format!("n{id}.log")))
            .unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(self.dir().join(format!("n{id}.toml")))
            .env("WASMRAFT_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn wasmraft run");
        self.running.insert(id, child);
    }

    /// The peak resident set of node `id`'s process so far, in KiB
    /// (`VmHWM`; Linux only).
    pub fn peak_rss_kib(&self, id: u64) -> Option<u64> {
        let pid = self.running.get(&id)?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// `kill -9` one node.
    pub fn kill9(&mut self, id: u64) {
        let mut child = self
            .running
            .remove(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"));
        child.kill().unwrap();
        child.wait().unwrap();
        self.paused.remove(&id);
    }

    /// `kill -9` every node, all signals sent before waiting for any.
    pub fn kill9_all(&mut self) {
        let mut children: Vec<Child> = std::mem::take(&mut self.running).into_values().collect();
        for c in &mut children {
            c.kill().unwrap();
        }
        for c in &mut children {
            c.wait().unwrap();
        }
        self.paused.clear();
    }

    fn signal(&self, id: u64, signal: &str) {
        let pid = self.running[&id].id().to_string();
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// SIGSTOP: the process freezes; the kernel still accepts connections and
    /// buffers what is sent to it.
    pub fn stop(&mut self, id: u64) {
        self.signal(id, "-STOP");
        self.paused.insert(id);
    }

    /// SIGCONT.
    pub fn cont(&mut self, id: u64) {
        self.signal(id, "-CONT");
        self.paused.remove(&id);
    }

    /// Starts a killed node again on its data directory and waits until it
    /// answers.
    pub async fn restart(&mut self, id: u64) {
        self.spawn(id);
        let deadline = Instant::now() + Duration::from_secs(30);
        while status_of(self.addr(id), self.client_tls()).await.is_none() {
            assert!(Instant::now() < deadline, "node {id} did not come back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The leader of the highest term among running, unpaused nodes; waits
    /// (up to 15 s) until some node leads.
    pub async fn leader(&self) -> u64 {
        self.leader_among(&self.ids()).await
    }

    pub async fn leader_among(&self, candidates: &[u64]) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let mut best: Option<(u64, u64)> = None;
            let mut seen = Vec::new();
            for &id in candidates {
                if !self.running.contains_key(&id) || self.paused.contains(&id) {
                    continue;
                }
                let status = status_of(self.addr(id), self.client_tls()).await;
                if let Some(s) = &status {
                    if s.role == "leader" && best.is_none_or(|(term, _)| s.term > term) {
                        best = Some((s.term, id));
                    }
                }
                seen.push((
                    id,
                    status.map(|s| (s.role, s.term, s.leader_id, s.commit_index, s.applied_index)),
                ));
            }
            if let Some((_, id)) = best {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no leader among {candidates:?} in 15 s; (id, (role, term, leader, commit, applied)): {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_tails(&self) -> String {
        let mut out = String::new();
        for id in self.ids() {
            let path = self.dir().join(format!("n{id}.log"));
            let lines: Vec<String> = File::open(&path)
                .map(|f| BufReader::new(f).lines().map_while(Result::ok).collect())
                .unwrap_or_default();
            out += &format!(
                "---- {} (last 40 of {} lines)\n",
                path.display(),
                lines.len()
            );
            for l in &lines[lines.len().saturating_sub(40)..] {
                out += l;
                out.push('\n');
            }
        }
        out
    }

    /// Writes `text` next to the logs (kept on failure) and returns its path.
    fn save(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.running) {
            let _ = c.kill(); // SIGKILL ends a stopped process too
            let _ = c.wait();
        }
        let panicking = std::thread::panicking();
        if panicking {
            eprintln!("{}", self.log_tails());
        }
        // WASMRAFT_TEST_KEEP keeps everything of a passing run too.
        let keep_all = std::env::var_os("WASMRAFT_TEST_KEEP").is_some();
        if panicking || keep_all {
            if let Some(dir) = self.dir.take() {
                if !keep_all {
                    drop_large_data_dirs(dir.path());
                }
                eprintln!("cluster directory kept: {}", dir.keep().display());
            }
        }
    }
}

/// Node data past this size is not kept for a failed test: a test of large
/// values leaves gigabytes, and a few failed runs would fill a CI disk.
const KEPT_DATA_LIMIT: u64 = 256 << 20;

/// Removes the nodes' data directories (`n1`, `n2`, ...) under `dir` when
/// together they exceed KEPT_DATA_LIMIT; logs and configs stay.
fn drop_large_data_dirs(dir: &Path) {
    fn size(path: &Path) -> u64 {
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => std::fs::read_dir(path)
                .map(|entries| entries.flatten().map(|e| size(&e.path())).sum())
                .unwrap_or(0),
            Ok(m) => m.len(),
            Err(_) => 0,
        }
    }
    let data_dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.file_name().and_then(|n| n.to_str()).is_some_and(is_node_dir))
        .collect();
    let total: u64 = data_dirs.iter().map(|d| size(d)).sum();
    if total > KEPT_DATA_LIMIT {
        for d in &data_dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        eprintln!(
            "node data removed ({} MiB); WASMRAFT_TEST_KEEP=1 keeps it",
            total >> 20
        );
    }
}

/// `n` followed by a node id: a data directory of the harness.
fn is_node_dir(name: &str) -> bool {
    name.strip_prefix('n').is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
}

/// One node's status, or `None` if it does not answer within 300 ms.
pub async fn status_of(addr: &str, tls: Option<TlsConfig>) -> Option<StatusResponse> {
    let mut client = Client::with_tls([addr], tls).ok()?;
    tokio::time::timeout(Duration::from_millis(300), client.status())
        .await
        .ok()?
        .ok()
}

/// A client of one node only, connected now (so that requests sent later
/// while the node is paused are queued on an open connection).
pub async fn pinned_client(addr: &str) -> Client {
    let mut client = Client::new([addr]).unwrap();
    tokio::time::timeout(Duration::from_secs(5), client.status())
        .await
        .expect("status timed out")
        .expect("status");
    client
}

// ---------------------------------------------------------------------------
// KV requests
// ---------------------------------------------------------------------------

pub fn put_request(key: &str, value: &str) -> Vec<u8> {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

pub fn range_request(key: &str, range_end: &[u8]) -> Vec<u8> {
    RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: key.into(),
            range_end: range_end.to_vec(),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// A range that counts the keys in `[key, range_end)` without reading them.
pub fn count_request(key: &str, range_end: &[u8]) -> Vec<u8> {
    RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: key.into(),
            range_end: range_end.to_vec(),
            count_only: true,
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

/// The count of a range's answer.
pub fn range_count(bytes: &[u8]) -> i64 {
    let Some(Response::ResponseRange(r)) =
        ResponseOp::decode(bytes).expect("a ResponseOp").response
    else {
        panic!("not a range response")
    };
    r.count
}

/// Each key of a range response with its version, create and mod
/// revisions.
pub fn range_stamps(bytes: &[u8]) -> Vec<(String, i64, i64, i64)> {
    let Some(Response::ResponseRange(r)) = ResponseOp::decode(bytes).expect("a ResponseOp").response else {
        panic!("not a range response")
    };
    r.kvs.into_iter().map(|kv| (String::from_utf8(kv.key).unwrap(), kv.version, kv.create_revision, kv.mod_revision)).collect()
}

pub fn range_kvs(bytes: &[u8]) -> Vec<(String, String)> {
    let Some(Response::ResponseRange(r)) =
        ResponseOp::decode(bytes).expect("a ResponseOp").response
    else {
        panic!("not a range response")
    };
    r.kvs
        .into_iter()
        .map(|kv| {
            (
                String::from_utf8(kv.key).unwrap(),
                String::from_utf8(kv.value).unwrap(),
            )
        })
        .collect()
}

/// The value of one key as the checker models it.
fn get_output(bytes: &[u8]) -> KvOutput {
    let kvs = range_kvs(bytes);
    assert!(kvs.len() <= 1, "a single-key range returned {kvs:?}");
    KvOutput::Value(kvs.into_iter().next().map(|(_, v)| v))
}

/// Puts `key = value` and records it: ok, or unknown on any error or timeout.
pub async fn recorded_put(
    rec: &KvRecorder,
    who: u64,
    client: &mut Client,
    key: &str,
    value: &str,
) -> bool {
    let op = rec.invoke(who, KvInput::put(key, value));
    match tokio::time::timeout(OP_TIMEOUT, client.propose(put_request(key, value))).await {
        Ok(Ok(_)) => {
            op.ok(KvOutput::Ok);
            true
        }
        _ => {
            op.unknown();
            false
        }
    }
}

/// The id a read is recorded under: `who` for linearizable reads, `1000 +
/// who` for lease reads and `2000 + who` for eventual ones, so that a failing
/// history shows which read path served each read.
pub fn reader(who: u64, consistency: Consistency) -> u64 {
    match consistency {
        Consistency::Linearizable => who,
        Consistency::Lease => 1000 + who,
        Consistency::Eventual => 2000 + who,
    }
}

/// Gets `key` at `consistency` and records it (as [`reader`]`(who,
/// consistency)`): ok with the value, or left out on an error.
/// `Err(timed_out)` when it did not return.
pub async fn recorded_get(
    rec: &KvRecorder,
    who: u64,
    client: &mut Client,
    key: &str,
    consistency: Consistency,
    timeout: Duration,
) -> Result<KvOutput, bool> {
    let op = rec.invoke(reader(who, consistency), KvInput::get(key));
    match tokio::time::timeout(timeout, client.query(range_request(key, b""), consistency)).await {
        Ok(Ok(bytes)) => {
            let out = get_output(&bytes);
            op.ok(out.clone());
            Ok(out)
        }
        Ok(Err(_)) => {
            op.failed();
            Err(false)
        }
        Err(_) => {
            op.failed();
            Err(true)
        }
    }
}

// ---------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------

/// A small deterministic generator (splitmix64); no dependency needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

pub fn seed(test: &str) -> u64 {
    let seed = std::env::var("WASMRAFT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("{test}: WASMRAFT_TEST_SEED={seed}");
    seed
}

pub const KEYS: [&str; 5] = ["k0", "k1", "k2", "k3", "k4"];
const PHASES: usize = 3;

/// Counters of one run, per nemesis phase: an operation counts in a phase
/// when it was invoked and returned in it.
#[derive(Default)]
pub struct Stats {
    phase: AtomicUsize,
    pub ok_puts: [AtomicUsize; PHASES],
    ok_gets: [AtomicUsize; PHASES],
    unknown_puts: AtomicUsize,
    failed_gets: AtomicUsize,
    /// A few client errors, for the report.
    errors: Mutex<BTreeMap<String, usize>>,
}

impl Stats {
    fn note_error(&self, e: &str) {
        // Group by the message up to the first digit (addresses, ids vary).
        let short: String = e
            .chars()
            .take_while(|c| !c.is_ascii_digit())
            .take(80)
            .collect();
        *self.errors.lock().unwrap().entry(short).or_default() += 1;
    }

    pub fn summary(&self) -> String {
        let p = |a: &[AtomicUsize; PHASES]| {
            a.iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        format!(
            "ok puts per phase {:?}, ok gets per phase {:?}, unknown puts {}, failed gets {}, errors {:?}",
            p(&self.ok_puts),
            p(&self.ok_gets),
            self.unknown_puts.load(Ordering::Relaxed),
            self.failed_gets.load(Ordering::Relaxed),
            self.errors.lock().unwrap()
        )
    }

    pub fn ok_in(&self, phase: usize) -> usize {
        self.ok_puts[phase].load(Ordering::Relaxed) + self.ok_gets[phase].load(Ordering::Relaxed)
    }
}

/// Concurrent clients doing random puts and gets on [`KEYS`], every value
/// unique (`c{client}-{n}`), reads at the given consistencies.
pub struct Workload {
    pub recorder: KvRecorder,
    pub stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    pub fn start(
        cluster: &Cluster,
        clients: u64,
        reads: &'static [Consistency],
        seed: u64,
    ) -> Workload {
        let recorder = KvRecorder::new();
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..clients)
            .map(|c| {
                let endpoints = cluster.endpoints(c as usize);
                let (recorder, stats, stop) = (recorder.clone(), stats.clone(), stop.clone());
                let rng = Rng(seed ^ (c + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                tokio::spawn(client_loop(c, endpoints, reads, rng, recorder, stats, stop))
            })
            .collect();
        Workload {
            recorder,
            stats,
            stop,
            tasks,
        }
    }

    pub fn set_phase(&self, phase: usize) {
        self.stats.phase.store(phase, Ordering::SeqCst);
    }

    /// Stops the clients (each finishes its operation in flight, bounded by
    /// [`OP_TIMEOUT`]).
    pub async fn finish(self) -> (KvRecorder, Arc<Stats>) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            t.await.expect("a client task panicked");
        }
        (self.recorder, self.stats)
    }
}

async fn client_loop(
    id: u64,
    endpoints: Vec<String>,
    reads: &'static [Consistency],
    mut rng: Rng,
    rec: KvRecorder,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
) {
    let mut rotation = 0;
    let mut client = Client::new(&endpoints).unwrap();
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let key = KEYS[rng.below(KEYS.len())];
        let phase = stats.phase.load(Ordering::SeqCst);
        let same_phase = |stats: &Stats| stats.phase.load(Ordering::SeqCst) == phase;
        let mut timed_out = false;
        let mut errored = false;
        if rng.below(2) == 0 {
            n += 1;
            let value = format!("c{id}-{n}");
            let op = rec.invoke(id, KvInput::put(key, &value));
            match tokio::time::timeout(OP_TIMEOUT, client.propose(put_request(key, &value))).await {
                Ok(Ok(_)) => {
                    op.ok(KvOutput::Ok);
                    if same_phase(&stats) {
                        stats.ok_puts[phase].fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Err(e)) => {
                    op.unknown();
                    stats.unknown_puts.fetch_add(1, Ordering::Relaxed);
                    stats.note_error(&error_text(&e));
                    errored = true;
                }
                Err(_) => {
                    op.unknown();
                    stats.unknown_puts.fetch_add(1, Ordering::Relaxed);
                    stats.note_error("client timeout");
                    timed_out = true;
                }
            }
        } else {
            let consistency = reads[rng.below(reads.len())];
            let op = rec.invoke(reader(id, consistency), KvInput::get(key));
            match tokio::time::timeout(
                OP_TIMEOUT,
                client.query(range_request(key, b""), consistency),
            )
            .await
            {
                Ok(Ok(bytes)) => {
                    op.ok(get_output(&bytes));
                    if same_phase(&stats) {
                        stats.ok_gets[phase].fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Err(e)) => {
                    op.failed();
                    stats.failed_gets.fetch_add(1, Ordering::Relaxed);
                    stats.note_error(&error_text(&e));
                    errored = true;
                }
                Err(_) => {
                    op.failed();
                    stats.failed_gets.fetch_add(1, Ordering::Relaxed);
                    stats.note_error("client timeout");
                    timed_out = true;
                }
            }
        }
        if timed_out {
            // The node we talk to may be paused: start from the next one.
            rotation += 1;
            let mut rotated = endpoints.clone();
            rotated.rotate_left(rotation % endpoints.len());
            client = Client::new(&rotated).unwrap();
        } else if errored {
            // No leader yet, most likely: pace the retries.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn error_text(e: &ClientError) -> String {
    match e.reason() {
        Some(reason) => reason.to_string(),
        None => e.to_string(),
    }
}

/// Checks the history; on failure saves it next to the logs and panics with
/// the checker's explanation.
pub fn assert_linearizable(cluster: &Cluster, rec: &KvRecorder, what: &str) {
    assert_history_linearizable(cluster, &rec.history(), what);
}

/// [`assert_linearizable`] for a history recorded elsewhere.
pub fn assert_history_linearizable(cluster: &Cluster, history: &wasmraft_lincheck::KvHistory, what: &str) {
    let report = check_report::<KvModel>(history, &CheckOptions::default());
    eprintln!(
        "{what}: {} ops, {} searched over {} keys ({} unknown dropped), {} steps, {:?}: {}",
        history.len(),
        report.operations,
        report.partitions,
        report.dropped_unknown,
        report.steps,
        report.elapsed,
        report.result
    );
    if !report.result.is_ok() {
        cluster.save("verdict.txt", &format!("{}", report.result));
        let path = cluster.save("history.txt", &format!("{history}"));
        panic!(
            "{what}: {}\nfull history: {}",
            report.result,
            path.display()
        );
    }
}

/// A get of `key` at `consistency` through `client`, in its own task,
/// recorded as [`reader`]`(who, consistency)`.
pub fn spawn_probe(
    rec: &KvRecorder,
    mut client: Client,
    who: u64,
    key: &'static str,
    consistency: Consistency,
) -> tokio::task::JoinHandle<Result<KvOutput, bool>> {
    let rec = rec.clone();
    tokio::spawn(async move {
        recorded_get(
            &rec,
            who,
            &mut client,
            key,
            consistency,
            Duration::from_secs(10),
        )
        .await
    })
}

/// Puts `key = value` through `client` until it is acknowledged (10 s at
/// most), recording every attempt as nemesis client 100.
pub async fn put_until_acked(rec: &KvRecorder, client: &mut Client, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !recorded_put(rec, 100, client, key, value).await {
        assert!(
            Instant::now() < deadline,
            "put {key} = {value} was never acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
