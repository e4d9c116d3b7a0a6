//! Running a workload: `--conns` connections, `--clients` concurrent
//! requests sharing them round-robin, until `--total` requests are done.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use prost::Message;
use wasmraft_client::{Client, ClientError, Consistency, TlsConfig};
use wasmraft_proto::etcdserverpb::request_op::Request;
use wasmraft_proto::etcdserverpb::response_op::Response;
use wasmraft_proto::etcdserverpb::{PutRequest, RangeRequest, RequestOp, ResponseOp};

use crate::keys::{KeyGen, Rng};
use crate::report::{ErrorCount, Latencies};

/// What each request does, as etcd `RequestOp`s for the KV plugin.
#[derive(Debug, Clone)]
pub enum Workload {
    /// Propose a Put of a key from the key space with the value.
    Put {
        /// The keys.
        keys: KeyGen,
        /// The value every put writes.
        value: Vec<u8>,
    },
    /// Query a Range of one key from the key space.
    RangeKeys {
        /// The keys.
        keys: KeyGen,
        /// The read consistency.
        consistency: Consistency,
    },
    /// Query the same Range every time, `[key, end)` or `key` alone when
    /// `end` is empty, as etcd's `range KEY [END]`.
    RangeFixed {
        /// The first key.
        key: Vec<u8>,
        /// The range end; empty for the key alone.
        end: Vec<u8>,
        /// The read consistency.
        consistency: Consistency,
    },
}

impl Workload {
    /// The encoded `RequestOp` of request `n`.
    fn request(&self, n: u64, rng: &mut Rng) -> Vec<u8> {
        let request = match self {
            Workload::Put { keys, value } => Request::RequestPut(PutRequest {
                key: keys.key(keys.index(n, rng)),
                value: value.clone(),
                ..Default::default()
            }),
            Workload::RangeKeys { keys, .. } => Request::RequestRange(RangeRequest {
                key: keys.key(keys.index(n, rng)),
                ..Default::default()
            }),
            Workload::RangeFixed { key, end, .. } => Request::RequestRange(RangeRequest {
                key: key.clone(),
                range_end: end.clone(),
                ..Default::default()
            }),
        };
        RequestOp {
            request: Some(request),
        }
        .encode_to_vec()
    }

    /// Sends one request; `Ok(true)` when it succeeded but read no key.
    async fn send(
        &self,
        client: &mut Client,
        request: Vec<u8>,
    ) -> Result<Result<bool, String>, ClientError> {
        match self {
            Workload::Put { .. } => client.propose(request).await.map(|_| Ok(false)),
            Workload::RangeKeys { consistency, .. } | Workload::RangeFixed { consistency, .. } => {
                let bytes = client.query(request, *consistency).await?;
                Ok(
                    match ResponseOp::decode(bytes.as_slice()).map(|r| r.response) {
                        Ok(Some(Response::ResponseRange(r))) => {
                            Ok(r.kvs.is_empty() && r.count == 0)
                        }
                        Ok(other) => Err(format!("expected a range response, got {other:?}")),
                        Err(e) => Err(format!(
                            "not an etcd ResponseOp (is the node running the KV plugin?): {e}"
                        )),
                    },
                )
            }
        }
    }
}

/// How to run a workload.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Requests to send in all.
    pub total: u64,
    /// Requests in flight.
    pub clients: usize,
    /// A request not answered within it counts as a `client-timeout` error.
    pub timeout: Duration,
    /// Print a progress line to stderr about once a second.
    pub progress: bool,
    /// The name in progress lines.
    pub label: String,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Outcome {
    /// From the first request sent to the last answered.
    pub elapsed: Duration,
    /// Latencies of the successful requests.
    pub latencies: Latencies,
    /// Failed requests by reason.
    pub errors: BTreeMap<String, ErrorCount>,
    /// Successful reads that found no key.
    pub empty_reads: u64,
}

/// Opens `conns` connections, spread round-robin over `endpoints` as etcd's
/// tool does (connection `i` talks to endpoint `i % len` only), and makes
/// sure each is connected: clones of a connected [`Client`] share its
/// connection, so the clients of a run open no more.
pub async fn connect(
    endpoints: &[String],
    conns: usize,
    timeout: Duration,
    tls: Option<&TlsConfig>,
) -> anyhow::Result<Vec<Client>> {
    let mut out = Vec::with_capacity(conns);
    for i in 0..conns {
        let endpoint = &endpoints[i % endpoints.len()];
        let mut client = Client::with_tls([endpoint], tls.cloned())?;
        tokio::time::timeout(timeout, client.status())
            .await
            .with_context(|| {
                format!(
                    "connection {i}: {endpoint} did not answer a status request within {timeout:?}"
                )
            })?
            .with_context(|| format!("connection {i}"))?;
        out.push(client);
    }
    Ok(out)
}

/// The endpoint whose node is the leader, asking each in turn.
pub async fn find_leader(
    endpoints: &[String],
    timeout: Duration,
    tls: Option<&TlsConfig>,
) -> anyhow::Result<String> {
    let mut seen = Vec::new();
    for endpoint in endpoints {
        let mut client = Client::with_tls([endpoint], tls.cloned())?;
        match tokio::time::timeout(timeout, client.status()).await {
            Ok(Ok(s)) if s.role == "leader" => return Ok(endpoint.clone()),
            Ok(Ok(s)) => seen.push(format!(
                "{endpoint}: {} (leader id {})",
                s.role, s.leader_id
            )),
            Ok(Err(e)) => seen.push(format!("{endpoint}: {e}")),
            Err(_) => seen.push(format!("{endpoint}: no answer within {timeout:?}")),
        }
    }
    bail!(
        "--target-leader: no endpoint is the leader ({})",
        seen.join("; ")
    )
}

/// The error bucket of a failed request and its message: the node's
/// `wasmraft-error` reason when it gave one, else the gRPC code.
fn classify(e: &ClientError) -> (String, String) {
    match e {
        ClientError::Status(s) => match e.reason() {
            Some(reason) => (reason.to_string(), s.message().to_string()),
            None => (format!("grpc-{:?}", s.code()), s.message().to_string()),
        },
        ClientError::Unreachable { .. } => ("unreachable".into(), e.to_string()),
        other => ("client".into(), other.to_string()),
    }
}

fn count(errors: &mut BTreeMap<String, ErrorCount>, reason: String, message: String) {
    let e = errors.entry(reason).or_default();
    if e.count == 0 {
        e.example = message;
    }
    e.count += 1;
}

/// Counters shared by the clients and the progress printer.
#[derive(Debug, Default)]
struct Shared {
    /// Request numbers handed out so far.
    next: AtomicU64,
    /// Requests answered (or failed).
    done: AtomicU64,
    failed: AtomicU64,
    /// Set by Ctrl-C: send no more requests.
    stop: AtomicBool,
}

/// Runs `workload` over `conns` (client `i` uses connection `i % len`)
/// until `settings.total` requests are answered or failed, or Ctrl-C.
pub async fn run(conns: &[Client], workload: Arc<Workload>, settings: &Settings) -> Outcome {
    let shared = Arc::new(Shared::default());
    let interrupt = {
        let shared = shared.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("interrupted: finishing the requests in flight (Ctrl-C again to quit)");
                shared.stop.store(true, Ordering::Relaxed);
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        })
    };
    let start = Instant::now();
    let progress = settings
        .progress
        .then(|| tokio::spawn(progress(shared.clone(), settings.clone(), start)));
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let seed = clock.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32);
    let mut tasks = Vec::with_capacity(settings.clients);
    for i in 0..settings.clients {
        let client = conns[i % conns.len()].clone();
        let rng = Rng::new(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.push(tokio::spawn(client_loop(
            client,
            rng,
            workload.clone(),
            shared.clone(),
            settings.clone(),
        )));
    }
    let mut outcome = Outcome::default();
    let mut nanos = Vec::with_capacity(settings.total.min(10_000_000) as usize);
    for task in tasks {
        // A client task only ends by returning; a panic is a bug worth seeing.
        let part = task.await.expect("a benchmark client panicked");
        nanos.extend(part.nanos);
        outcome.empty_reads += part.empty_reads;
        for (reason, e) in part.errors {
            let total = outcome.errors.entry(reason).or_default();
            if total.count == 0 {
                total.example = e.example;
            }
            total.count += e.count;
        }
    }
    outcome.elapsed = start.elapsed();
    interrupt.abort();
    if let Some(p) = progress {
        p.abort();
    }
    outcome.latencies = Latencies::new(nanos);
    outcome
}

/// What one client measured.
#[derive(Debug, Default)]
struct ClientOutcome {
    nanos: Vec<u64>,
    errors: BTreeMap<String, ErrorCount>,
    empty_reads: u64,
}

/// One client: one request in flight at a time, until the run's requests
/// are all handed out.
async fn client_loop(
    mut client: Client,
    mut rng: Rng,
    workload: Arc<Workload>,
    shared: Arc<Shared>,
    settings: Settings,
) -> ClientOutcome {
    let mut out = ClientOutcome::default();
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let n = shared.next.fetch_add(1, Ordering::Relaxed);
        if n >= settings.total {
            break;
        }
        let request = workload.request(n, &mut rng);
        let sent = Instant::now();
        let result =
            tokio::time::timeout(settings.timeout, workload.send(&mut client, request)).await;
        let latency = sent.elapsed();
        let ok = match result {
            Ok(Ok(Ok(empty))) => {
                out.nanos.push(latency.as_nanos() as u64);
                out.empty_reads += u64::from(empty);
                true
            }
            Ok(Ok(Err(bad))) => {
                count(&mut out.errors, "bad-response".into(), bad);
                false
            }
            Ok(Err(e)) => {
                let (reason, message) = classify(&e);
                count(&mut out.errors, reason, message);
                false
            }
            Err(_) => {
                let message = format!("no answer within {:?} (--timeout)", settings.timeout);
                count(&mut out.errors, "client-timeout".into(), message);
                false
            }
        };
        if !ok {
            shared.failed.fetch_add(1, Ordering::Relaxed);
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
    }
    out
}

/// Prints `label: done/total (pct), rate req/s, errors` to stderr about
/// once a second; the rate is over the last interval.
async fn progress(shared: Arc<Shared>, settings: Settings, start: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await; // the first tick is immediate
    let (mut last_done, mut last_at) = (0u64, start);
    loop {
        tick.tick().await;
        let done = shared.done.load(Ordering::Relaxed);
        let now = Instant::now();
        let rate = (done - last_done) as f64 / now.duration_since(last_at).as_secs_f64().max(1e-9);
        eprintln!(
            "{}: {done}/{} ({:.0}%), {rate:.0} req/s, {} errors, {:.0}s",
            settings.label,
            settings.total,
            done as f64 * 100.0 / settings.total.max(1) as f64,
            shared.failed.load(Ordering::Relaxed),
            now.duration_since(start).as_secs_f64(),
        );
        (last_done, last_at) = (done, now);
    }
}
