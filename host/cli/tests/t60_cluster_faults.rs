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
//!   (a read changes nothing, so leaving it out is always sound).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;
use wasmraft_client::{Client, ClientError, Consistency, StatusResponse};
use wasmraft_lincheck::{CheckOptions, CheckResult, KvInput, KvModel, KvOutput, KvRecorder, check_report};
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
const OP_TIMEOUT: Duration = Duration::from_millis(1000);

fn election_timeout() -> Duration {
    Duration::from_millis(TICK_MS * ELECTION_TICKS)
}

/// The tests share two cores; one cluster at a time keeps elections honest.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---------------------------------------------------------------------------
// The cluster harness
// ---------------------------------------------------------------------------

/// Three (or `n`) `wasmraft run` processes, each with its TOML config, data
/// directory and log file in one temporary directory. Every process is killed
/// when the cluster is dropped; a panicking test keeps the directory and
/// prints the end of every log.
struct Cluster {
    dir: Option<tempfile::TempDir>,
    addrs: BTreeMap<u64, String>,
    running: BTreeMap<u64, Child>,
    paused: BTreeSet<u64>,
}

impl Cluster {
    /// Writes the configs, starts every node and waits for a leader.
    async fn start(n: u64) -> Cluster {
        let dir = tempfile::Builder::new().prefix("wasmraft-t60-").tempdir().unwrap();
        // Free ports: bind port 0, note the port, release it.
        let listeners: Vec<_> = (0..n).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let addrs: BTreeMap<u64, String> =
            listeners.iter().enumerate().map(|(i, l)| (i as u64 + 1, l.local_addr().unwrap().to_string())).collect();
        drop(listeners);
        let peers: String = addrs.iter().map(|(id, a)| format!("{id} = \"{a}\"\n")).collect();
        for (id, addr) in &addrs {
            let data = dir.path().join(format!("n{id}"));
            let config = format!(
                "id = {id}\ndata_dir = \"{}\"\nlisten = \"{addr}\"\n\n[peers]\n{peers}\n\
                 [raft]\ntick_ms = {TICK_MS}\nelection_ticks = {ELECTION_TICKS}\nheartbeat_ticks = 1\n\n\
                 [limits]\nrequest_timeout_ms = 1000\n",
                data.display()
            );
            std::fs::write(dir.path().join(format!("n{id}.toml")), config).unwrap();
        }
        let mut cluster = Cluster { dir: Some(dir), addrs, running: BTreeMap::new(), paused: BTreeSet::new() };
        for id in cluster.ids() {
            cluster.spawn(id);
        }
        cluster.leader().await;
        cluster
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().unwrap().path()
    }

    fn ids(&self) -> Vec<u64> {
        self.addrs.keys().copied().collect()
    }

    fn addr(&self, id: u64) -> &str {
        &self.addrs[&id]
    }

    /// Every endpoint, starting at the `first`-th (so clients spread out).
    fn endpoints(&self, first: usize) -> Vec<String> {
        let all: Vec<String> = self.addrs.values().cloned().collect();
        (0..all.len()).map(|i| all[(first + i) % all.len()].clone()).collect()
    }

    fn spawn(&mut self, id: u64) {
        assert!(!self.running.contains_key(&id), "node {id} is already running");
        let log = File::options().create(true).append(true).open(self.dir().join(format!("n{id}.log"))).unwrap();
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

    /// `kill -9` one node.
    fn kill9(&mut self, id: u64) {
        let mut child = self.running.remove(&id).unwrap_or_else(|| panic!("node {id} is not running"));
        child.kill().unwrap();
        child.wait().unwrap();
        self.paused.remove(&id);
    }

    /// `kill -9` every node, all signals sent before waiting for any.
    fn kill9_all(&mut self) {
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
    fn stop(&mut self, id: u64) {
        self.signal(id, "-STOP");
        self.paused.insert(id);
    }

    /// SIGCONT.
    fn cont(&mut self, id: u64) {
        self.signal(id, "-CONT");
        self.paused.remove(&id);
    }

    /// Starts a killed node again on its data directory and waits until it
    /// answers.
    async fn restart(&mut self, id: u64) {
        self.spawn(id);
        let deadline = Instant::now() + Duration::from_secs(30);
        while status_of(self.addr(id)).await.is_none() {
            assert!(Instant::now() < deadline, "node {id} did not come back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The leader of the highest term among running, unpaused nodes; waits
    /// (up to 30 s) until some node leads.
    async fn leader(&self) -> u64 {
        self.leader_among(&self.ids()).await
    }

    async fn leader_among(&self, candidates: &[u64]) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut best: Option<(u64, u64)> = None;
            let mut seen = Vec::new();
            for &id in candidates {
                if !self.running.contains_key(&id) || self.paused.contains(&id) {
                    continue;
                }
                let status = status_of(self.addr(id)).await;
                if let Some(s) = &status {
                    if s.role == "leader" && best.is_none_or(|(term, _)| s.term > term) {
                        best = Some((s.term, id));
                    }
                }
                seen.push((id, status.map(|s| (s.role, s.term, s.leader_id, s.commit_index, s.applied_index))));
            }
            if let Some((_, id)) = best {
                return id;
            }
            assert!(Instant::now() < deadline, "no leader among {candidates:?}; (id, (role, term, leader, commit, applied)): {seen:?}");
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
            out += &format!("---- {} (last 40 of {} lines)\n", path.display(), lines.len());
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
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails());
            if let Some(dir) = self.dir.take() {
                eprintln!("cluster directory kept: {}", dir.keep().display());
            }
        }
    }
}

/// One node's status, or `None` if it does not answer within 300 ms.
async fn status_of(addr: &str) -> Option<StatusResponse> {
    let mut client = Client::new([addr]).ok()?;
    tokio::time::timeout(Duration::from_millis(300), client.status()).await.ok()?.ok()
}

/// A client of one node only, connected now (so that requests sent later
/// while the node is paused are queued on an open connection).
async fn pinned_client(addr: &str) -> Client {
    let mut client = Client::new([addr]).unwrap();
    tokio::time::timeout(Duration::from_secs(5), client.status()).await.expect("status timed out").expect("status");
    client
}

// ---------------------------------------------------------------------------
// KV requests
// ---------------------------------------------------------------------------

fn put_request(key: &str, value: &str) -> Vec<u8> {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.into(),
            value: value.into(),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

fn range_request(key: &str, range_end: &[u8]) -> Vec<u8> {
    RequestOp {
        request: Some(Request::RequestRange(RangeRequest {
            key: key.into(),
            range_end: range_end.to_vec(),
            ..Default::default()
        })),
    }
    .encode_to_vec()
}

fn range_kvs(bytes: &[u8]) -> Vec<(String, String)> {
    let Some(Response::ResponseRange(r)) = ResponseOp::decode(bytes).expect("a ResponseOp").response else {
        panic!("not a range response")
    };
    r.kvs
        .into_iter()
        .map(|kv| (String::from_utf8(kv.key).unwrap(), String::from_utf8(kv.value).unwrap()))
        .collect()
}

/// The value of one key as the checker models it.
fn get_output(bytes: &[u8]) -> KvOutput {
    let kvs = range_kvs(bytes);
    assert!(kvs.len() <= 1, "a single-key range returned {kvs:?}");
    KvOutput::Value(kvs.into_iter().next().map(|(_, v)| v))
}

/// Puts `key = value` and records it: ok, or unknown on any error or timeout.
async fn recorded_put(rec: &KvRecorder, who: u64, client: &mut Client, key: &str, value: &str) -> bool {
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
fn reader(who: u64, consistency: Consistency) -> u64 {
    match consistency {
        Consistency::Linearizable => who,
        Consistency::Lease => 1000 + who,
        Consistency::Eventual => 2000 + who,
    }
}

/// Gets `key` at `consistency` and records it (as [`reader`]`(who,
/// consistency)`): ok with the value, or left out on an error.
/// `Err(timed_out)` when it did not return.
async fn recorded_get(
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

fn seed(test: &str) -> u64 {
    let seed = std::env::var("WASMRAFT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64);
    eprintln!("{test}: WASMRAFT_TEST_SEED={seed}");
    seed
}

const KEYS: [&str; 5] = ["k0", "k1", "k2", "k3", "k4"];
const PHASES: usize = 3;

/// Counters of one run, per nemesis phase: an operation counts in a phase
/// when it was invoked and returned in it.
#[derive(Default)]
struct Stats {
    phase: AtomicUsize,
    ok_puts: [AtomicUsize; PHASES],
    ok_gets: [AtomicUsize; PHASES],
    unknown_puts: AtomicUsize,
    failed_gets: AtomicUsize,
    /// A few client errors, for the report.
    errors: Mutex<BTreeMap<String, usize>>,
}

impl Stats {
    fn note_error(&self, e: &str) {
        // Group by the message up to the first digit (addresses, ids vary).
        let short: String = e.chars().take_while(|c| !c.is_ascii_digit()).take(80).collect();
        *self.errors.lock().unwrap().entry(short).or_default() += 1;
    }

    fn summary(&self) -> String {
        let p = |a: &[AtomicUsize; PHASES]| a.iter().map(|c| c.load(Ordering::Relaxed)).collect::<Vec<_>>();
        format!(
            "ok puts per phase {:?}, ok gets per phase {:?}, unknown puts {}, failed gets {}, errors {:?}",
            p(&self.ok_puts),
            p(&self.ok_gets),
            self.unknown_puts.load(Ordering::Relaxed),
            self.failed_gets.load(Ordering::Relaxed),
            self.errors.lock().unwrap()
        )
    }

    fn ok_in(&self, phase: usize) -> usize {
        self.ok_puts[phase].load(Ordering::Relaxed) + self.ok_gets[phase].load(Ordering::Relaxed)
    }
}

/// Concurrent clients doing random puts and gets on [`KEYS`], every value
/// unique (`c{client}-{n}`), reads at the given consistencies.
struct Workload {
    recorder: KvRecorder,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    fn start(cluster: &Cluster, clients: u64, reads: &'static [Consistency], seed: u64) -> Workload {
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
        Workload { recorder, stats, stop, tasks }
    }

    fn set_phase(&self, phase: usize) {
        self.stats.phase.store(phase, Ordering::SeqCst);
    }

    /// Stops the clients (each finishes its operation in flight, bounded by
    /// [`OP_TIMEOUT`]).
    async fn finish(self) -> (KvRecorder, Arc<Stats>) {
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
            match tokio::time::timeout(OP_TIMEOUT, client.query(range_request(key, b""), consistency)).await {
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
fn assert_linearizable(cluster: &Cluster, rec: &KvRecorder, what: &str) {
    let history = rec.history();
    let report = check_report::<KvModel>(&history, &CheckOptions::default());
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
        panic!("{what}: {}\nfull history: {}", report.result, path.display());
    }
}

/// A get of `key` at `consistency` through `client`, in its own task,
/// recorded as [`reader`]`(who, consistency)`.
fn spawn_probe(
    rec: &KvRecorder,
    mut client: Client,
    who: u64,
    key: &'static str,
    consistency: Consistency,
) -> tokio::task::JoinHandle<Result<KvOutput, bool>> {
    let rec = rec.clone();
    tokio::spawn(async move { recorded_get(&rec, who, &mut client, key, consistency, Duration::from_secs(10)).await })
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

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

/// Puts `key = value` through `client` until it is acknowledged (10 s at
/// most), recording every attempt as nemesis client 100.
async fn put_until_acked(rec: &KvRecorder, client: &mut Client, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !recorded_put(rec, 100, client, key, value).await {
        assert!(Instant::now() < deadline, "put {key} = {value} was never acknowledged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
        let stored: BTreeMap<String, String> = loop {
            match tokio::time::timeout(
                Duration::from_secs(5),
                client.query(range_request("dur/", b"dur0"), Consistency::Linearizable),
            )
            .await
            {
                Ok(Ok(bytes)) => break range_kvs(&bytes).into_iter().collect(),
                other => {
                    assert!(Instant::now() < deadline, "round {round}: the restarted cluster does not answer: {other:?}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
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
        // The follower has applied v1 (a legal, possibly stale read).
        let deadline = Instant::now() + Duration::from_secs(10);
        while recorded_get(&rec, 2, &mut reader, &key, Consistency::Eventual, OP_TIMEOUT).await
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
