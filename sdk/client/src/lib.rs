//! `wasmraft-client`: a Rust client of the `wasmraft.v1` API.
//!
//! ```no_run
//! # async fn demo() -> Result<(), wasmraft_client::ClientError> {
//! use wasmraft_client::{Client, Consistency};
//! let mut client = Client::new(["127.0.0.1:7379"])?;
//! let reply = client.propose(b"command".to_vec()).await?;
//! let state = client.query(b"request".to_vec(), Consistency::Linearizable).await?;
//! # Ok(()) }
//! ```
//!
//! The client tries its endpoints in order and remembers the one that
//! answered; any node accepts proposals (followers forward them to the
//! leader).
//!
//! Each `Client` (and each clone) is a session: it tags every proposal with
//! its session id and a sequence number. When the outcome of a proposal is
//! unknown (a timeout, a connection lost mid-request, a leader change) the
//! client retries it with the same number, and the cluster applies it at
//! most once, answering the retry with the first outcome. Proposals of one
//! session are sequential (`&mut self`); use a clone per concurrent task.
#![deny(missing_docs)]

use std::path::Path;
use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use wasmraft_proto::v1::client_client::ClientClient;
pub use wasmraft_proto::v1::{Consistency, ProposeResponse, RenewResponse, StatusResponse, WatchEvent};
use wasmraft_proto::v1::{ProposeRequest, QueryRequest, RenewRequest, StatusRequest, WatchRequest};
use wasmraft_proto::{ERROR_KEY, LEADER_KEY};

/// A request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No endpoint was given.
    #[error("no endpoints given")]
    NoEndpoints,
    /// An endpoint is not a valid address.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given.
        endpoint: String,
        /// Why it is invalid.
        reason: String,
    },
    /// No endpoint could be reached.
    #[error("cannot reach any endpoint ({endpoints}): {last}")]
    Unreachable {
        /// The endpoints tried.
        endpoints: String,
        /// The last connection error.
        last: String,
    },
    /// The node answered with an error (or the transport failed under the
    /// request: then the causes follow the message).
    #[error("{}", status_text(.0))]
    Status(tonic::Status),
    /// A TLS file could not be read.
    #[error("tls: {0}")]
    Tls(String),
}

/// How a client speaks TLS to the cluster: the CA that signed the nodes'
/// certificates, and a client certificate when the nodes ask for one
/// (`client_cert_auth`; its common name is the caller's identity).
#[derive(Clone, Default)]
pub struct TlsConfig {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

impl TlsConfig {
    /// Trusts the CA in `ca_pem` (PEM).
    pub fn new(ca_pem: Vec<u8>) -> Self {
        Self {
            ca_pem,
            identity: None,
        }
    }

    /// Presents the certificate `cert_pem` with its key `key_pem` (PEM).
    pub fn with_identity(mut self, cert_pem: Vec<u8>, key_pem: Vec<u8>) -> Self {
        self.identity = Some((cert_pem, key_pem));
        self
    }

    /// Reads the CA and, if given, a client certificate and key from files.
    pub fn from_files(
        ca: &Path,
        cert: Option<&Path>,
        key: Option<&Path>,
    ) -> Result<Self, ClientError> {
        let read = |p: &Path| {
            std::fs::read(p)
                .map_err(|e| ClientError::Tls(format!("cannot read {}: {e}", p.display())))
        };
        let config = Self::new(read(ca)?);
        match (cert, key) {
            (Some(c), Some(k)) => Ok(config.with_identity(read(c)?, read(k)?)),
            (None, None) => Ok(config),
            _ => Err(ClientError::Tls(
                "a client certificate needs both --cert and --key".into(),
            )),
        }
    }

    fn tonic(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem));
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(cert, key)),
            None => config,
        }
    }
}

/// An endpoint for the node at `addr` (`host:port` or a URI), over TLS when
/// `tls` is given. For the admin services, which [`Client`] does not wrap.
pub fn endpoint(addr: &str, tls: Option<&TlsConfig>) -> Result<Endpoint, ClientError> {
    let addr = addr.trim();
    let invalid = |reason: String| ClientError::InvalidEndpoint {
        endpoint: addr.to_string(),
        reason,
    };
    let uri = match (addr.contains("://"), tls.is_some()) {
        (true, _) => addr.to_string(),
        (false, true) => format!("https://{addr}"),
        (false, false) => format!("http://{addr}"),
    };
    let endpoint = Endpoint::from_shared(uri)
        .map_err(|e| invalid(e.to_string()))?
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true);
    match tls {
        Some(t) => endpoint
            .tls_config(t.tonic())
            .map_err(|e| invalid(error_chain(&e))),
        None => Ok(endpoint),
    }
}

/// A status's message and, for transport failures, their causes.
fn status_text(status: &tonic::Status) -> String {
    if status.code() == tonic::Code::PermissionDenied {
        return format!("permission denied: {}", status.message());
    }
    match std::error::Error::source(status) {
        Some(source) => format!("{}: {}", status.message(), error_chain(source)),
        None => status.message().to_string(),
    }
}

pub use wasmraft_proto::error_chain;

impl ClientError {
    /// The `wasmraft-error` reason of a node's error (`not-leader`,
    /// `invalid`, `rejected`, `plugin-trap`, ...), if any.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ClientError::Status(s) => s.metadata().get(ERROR_KEY).and_then(|v| v.to_str().ok()),
            _ => None,
        }
    }
}

/// A client of one cluster, and a session for exactly-once proposals.
pub struct Client {
    endpoints: Vec<Endpoint>,
    names: Vec<String>,
    channels: Vec<Option<ClientClient<Channel>>>,
    current: usize,
    session: u64,
    sequence: u64,
    retry_for: Duration,
    on_retry: Option<std::sync::Arc<dyn Fn(&ClientError) + Send + Sync>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.names)
            .field("current", &self.current)
            .field("session", &self.session)
            .field("retry_for", &self.retry_for)
            .finish_non_exhaustive()
    }
}

/// A clone shares the connections but is a new session.
impl Clone for Client {
    fn clone(&self) -> Self {
        Self {
            endpoints: self.endpoints.clone(),
            names: self.names.clone(),
            channels: self.channels.clone(),
            current: self.current,
            session: new_session_id(),
            sequence: 0,
            retry_for: self.retry_for,
            on_retry: self.on_retry.clone(),
        }
    }
}

/// A random, non-zero session id.
fn new_session_id() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // RandomState is seeded from the OS per process.
    std::collections::hash_map::RandomState::new()
        .hash_one((n, std::process::id()))
        .max(1)
}

/// Whether a failed proposal may have applied (so a retry must reuse its
/// sequence number), or certainly did not (and retrying is also safe).
fn retryable(e: &ClientError) -> bool {
    match e {
        ClientError::Unreachable { .. } => true,
        ClientError::Status(s) => match s.metadata().get(ERROR_KEY).and_then(|v| v.to_str().ok()) {
            Some("not-leader" | "proposal-dropped" | "timeout" | "stopped" | "busy") => true,
            Some(_) => false,
            // No reason: the transport failed, the request may or may not have arrived.
            None => matches!(
                s.code(),
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Cancelled
                    | tonic::Code::Unknown
            ),
        },
        _ => false,
    }
}

impl Client {
    /// A client of the cluster reachable at `endpoints` (`host:port` or
    /// `http://host:port`). Connections are made on first use.
    pub fn new<S: AsRef<str>>(endpoints: impl IntoIterator<Item = S>) -> Result<Self, ClientError> {
        Self::with_tls(endpoints, None)
    }

    /// Like [`Client::new`], over TLS when `tls` is given.
    pub fn with_tls<S: AsRef<str>>(
        endpoints: impl IntoIterator<Item = S>,
        tls: Option<TlsConfig>,
    ) -> Result<Self, ClientError> {
        let mut parsed = Vec::new();
        let mut names = Vec::new();
        for e in endpoints {
            let e = e.as_ref().trim();
            if e.is_empty() {
                continue;
            }
            parsed.push(endpoint(e, tls.as_ref())?);
            names.push(e.to_string());
        }
        if parsed.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        let channels = vec![None; parsed.len()];
        Ok(Self {
            endpoints: parsed,
            names,
            channels,
            current: 0,
            session: new_session_id(),
            sequence: 0,
            retry_for: Duration::from_secs(15),
            on_retry: None,
        })
    }

    /// How long a proposal whose outcome is unknown keeps being retried
    /// (default 15 s). Zero: never retry.
    pub fn with_retry_for(mut self, retry_for: Duration) -> Self {
        self.retry_for = retry_for;
        self
    }

    /// Calls `f` with the reason each time a proposal is retried (a
    /// command-line tool prints it, so that waiting is never silent).
    pub fn on_retry(mut self, f: impl Fn(&ClientError) + Send + Sync + 'static) -> Self {
        self.on_retry = Some(std::sync::Arc::new(f));
        self
    }

    /// This session's id.
    pub fn session(&self) -> u64 {
        self.session
    }

    async fn channel(&mut self, i: usize) -> Result<ClientClient<Channel>, String> {
        if let Some(c) = &self.channels[i] {
            return Ok(c.clone());
        }
        let channel = self.endpoints[i]
            .connect()
            .await
            .map_err(|e| format!("{}: {}", self.names[i], error_chain(&e)))?;
        let client = ClientClient::new(channel).max_decoding_message_size(64 << 20);
        self.channels[i] = Some(client.clone());
        Ok(client)
    }

    /// Runs `call` against the current endpoint, moving on while the
    /// request certainly did not take effect.
    async fn call<T, F, Fut>(&mut self, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(ClientClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let n = self.endpoints.len();
        let mut last = String::new();
        for attempt in 0..n {
            let i = (self.current + attempt) % n;
            let client = match self.channel(i).await {
                Ok(c) => c,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match call(client).await {
                Ok(r) => {
                    self.current = i;
                    return Ok(r.into_inner());
                }
                Err(status) => {
                    // Another node may serve what this one cannot: a
                    // follower without a leader, a node removed from the
                    // cluster.
                    let not_leader = status
                        .metadata()
                        .get(ERROR_KEY)
                        .is_some_and(|v| v == "not-leader" || v == "removed");
                    if let Some(leader) = status.metadata().get(LEADER_KEY) {
                        tracing::debug!(endpoint = %self.names[i], leader = ?leader, "not the leader");
                    }
                    if not_leader && attempt + 1 < n {
                        continue;
                    }
                    if status.code() == tonic::Code::Unavailable
                        && status.metadata().get(ERROR_KEY).is_none()
                    {
                        // A transport failure before the request reached a node.
                        self.channels[i] = None;
                        last = format!("{}: {}", self.names[i], status.message());
                        continue;
                    }
                    return Err(ClientError::Status(status));
                }
            }
        }
        Err(ClientError::Unreachable {
            endpoints: self.names.join(","),
            last,
        })
    }

    /// Proposes a command; returns the plugin's response once it applied.
    /// Retries with the same sequence number while the outcome is unknown,
    /// so the command applies at most once.
    pub async fn propose(&mut self, command: Vec<u8>) -> Result<ProposeResponse, ClientError> {
        self.sequence += 1;
        let (client_id, sequence) = (self.session, self.sequence);
        self.retrying("a proposal", |mut c| {
            let command = command.clone();
            async move { c.propose(ProposeRequest { command, client_id, sequence }).await }
        })
        .await
    }

    /// Sends a keep-alive for `key` (a `wasmraft:plugin@0.2.0` plugin's
    /// `tick` answers it) and returns the plugin's answer; retried like a
    /// proposal (a keep-alive taken twice renews twice, which is harmless).
    pub async fn renew(&mut self, key: Vec<u8>) -> Result<RenewResponse, ClientError> {
        self.retrying("a keep-alive", |mut c| {
            let key = key.clone();
            async move { c.renew(RenewRequest { key }).await }
        })
        .await
    }

    /// `call`, retried with backoff while the error is retryable and the
    /// retry budget lasts, trying the next endpoint each time.
    async fn retrying<T, F, Fut>(&mut self, what: &str, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(ClientClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let deadline = tokio::time::Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(20);
        loop {
            match self.call(&mut call).await {
                Err(e) if retryable(&e) && tokio::time::Instant::now() + backoff < deadline => {
                    tracing::debug!(error = %e, "retrying {what}");
                    if let Some(f) = &self.on_retry {
                        f(&e);
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                    self.current = (self.current + 1) % self.endpoints.len();
                }
                other => return other,
            }
        }
    }

    /// Runs a read-only query at `consistency`.
    pub async fn query(
        &mut self,
        request: Vec<u8>,
        consistency: Consistency,
    ) -> Result<Vec<u8>, ClientError> {
        self.call(|mut c| {
            let request = request.clone();
            async move {
                c.query(QueryRequest {
                    request,
                    consistency: consistency as i32,
                })
                .await
            }
        })
        .await
        .map(|r| r.result)
    }

    /// Events of entries applied from now on whose key starts with `prefix`,
    /// from the first reachable node.
    pub async fn watch(
        &mut self,
        prefix: Vec<u8>,
    ) -> Result<tonic::Streaming<WatchEvent>, ClientError> {
        self.call(|mut c| {
            let prefix = prefix.clone();
            async move { c.watch(WatchRequest { prefix }).await }
        })
        .await
    }

    /// The status of the first reachable node.
    pub async fn status(&mut self) -> Result<StatusResponse, ClientError> {
        self.call(|mut c| async move { c.status(StatusRequest {}).await })
            .await
    }
}
