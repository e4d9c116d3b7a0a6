//! Every gRPC call a node serves, counted by service, method and status
//! code, and timed: the series etcd exposes (`grpc_server_started_total`,
//! `grpc_server_handled_total`, `grpc_server_handling_seconds`), so that
//! dashboards and alerts written for etcd read Wasmraft's too, and requests
//! show by API (`etcdserverpb.*` or `wasmraft.v1.*`).
//!
//! A tower layer on each gRPC server: the call starts when its request
//! arrives and ends with its status, read from the response headers (an
//! error without a body) or from the trailers at the end of the body, so a
//! stream counts once, when it ends. A call whose body is dropped before its
//! trailers (the client went away) ends as `Canceled`.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use parking_lot::Mutex;
use tonic::codegen::http;
use wasmraft_node::{Histogram, LATENCY_BUCKETS};

/// gRPC status codes by number, named as etcd's metrics name them.
pub(crate) const CODES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];
const CANCELED: usize = 1;
const UNKNOWN: usize = 2;

/// Distinct methods counted per node; past it (a client calling made-up
/// paths), calls count under `other`.
const MAX_METHODS: usize = 128;

/// One method's calls on one node.
pub(crate) struct Series {
    pub started: AtomicU64,
    pub handled: [AtomicU64; CODES.len()],
    pub latency: Histogram,
}

/// Node id, then `service/method`.
type Registry = BTreeMap<u64, BTreeMap<String, Arc<Series>>>;
static SERIES: Mutex<Registry> = parking_lot::const_mutex(BTreeMap::new());

/// The series of `path` (`/package.Service/Method`) on `node`.
fn series(node: u64, path: &str) -> Arc<Series> {
    let name = method_name(path);
    let mut all = SERIES.lock();
    let methods = all.entry(node).or_default();
    if let Some(s) = methods.get(name) {
        return s.clone();
    }
    let name = if methods.len() < MAX_METHODS { name } else { "other/other" };
    methods
        .entry(name.to_string())
        .or_insert_with(|| {
            Arc::new(Series {
                started: AtomicU64::new(0),
                handled: Default::default(),
                latency: Histogram::new(&LATENCY_BUCKETS),
            })
        })
        .clone()
}

/// `service/method` from a gRPC path; `unknown/unknown` for what is not
/// one of this project's services or not a plain method name.
fn method_name(path: &str) -> &str {
    let name = path.strip_prefix('/').unwrap_or("");
    let plain = |s: &str| !s.is_empty() && s.len() <= 48 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '.');
    match name.split_once('/') {
        Some((service, method))
            if (service.starts_with("etcdserverpb.") || service.starts_with("wasmraft.v1."))
                && plain(service)
                && plain(method)
                && !method.contains('.') =>
        {
            name
        }
        _ => "unknown/unknown",
    }
}

/// Every node's series, for rendering: node, service, method, series.
pub(crate) fn snapshot() -> Vec<(u64, String, String, Arc<Series>)> {
    let all = SERIES.lock();
    let mut out = Vec::new();
    for (node, methods) in all.iter() {
        for (name, s) in methods {
            let (service, method) = name.split_once('/').unwrap_or((name, ""));
            out.push((*node, service.to_string(), method.to_string(), s.clone()));
        }
    }
    out
}

/// The layer for a node's gRPC servers.
#[derive(Clone, Copy, Debug)]
pub struct GrpcMetricsLayer {
    node: u64,
}

impl GrpcMetricsLayer {
    pub fn new(node: u64) -> Self {
        Self { node }
    }
}

impl<S> tower_layer::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner, node: self.node }
    }
}

/// A gRPC server's service, counting its calls.
#[derive(Clone, Debug)]
pub struct GrpcMetrics<S> {
    inner: S,
    node: u64,
}

impl<S, ReqBody, ResBody> tonic::codegen::Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: tonic::codegen::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let series = series(self.node, request.uri().path());
        series.started.fetch_add(1, Ordering::Relaxed);
        let mut call = Call { series, started: Instant::now(), done: false };
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            // An error answered without a body carries its status here.
            if let Some(code) = status_code(response.headers()) {
                call.end(code);
            }
            Ok(response.map(|inner| CountedBody { inner, call }))
        })
    }
}

/// The `grpc-status` of headers or trailers, if there is one.
fn status_code(headers: &http::HeaderMap) -> Option<usize> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse::<usize>().ok()?;
    Some(if code < CODES.len() { code } else { UNKNOWN })
}

/// One call until its status is known.
struct Call {
    series: Arc<Series>,
    started: Instant,
    done: bool,
}

impl Call {
    fn end(&mut self, code: usize) {
        if !std::mem::replace(&mut self.done, true) {
            self.series.handled[code].fetch_add(1, Ordering::Relaxed);
            self.series.latency.observe(self.started.elapsed());
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        self.end(CANCELED);
    }
}

/// A response body that ends its call at its trailers (or its end).
pub struct CountedBody<B> {
    inner: B,
    call: Call,
}

impl<B> http_body::Body for CountedBody<B>
where
    B: http_body::Body + Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = status_code(trailers).unwrap_or(UNKNOWN);
                    self.call.end(code);
                }
            }
            Poll::Ready(Some(Err(_))) => self.call.end(UNKNOWN),
            // The end without trailers: a status sent in the headers ended
            // the call already.
            Poll::Ready(None) => self.call.end(UNKNOWN),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::method_name;

    #[test]
    fn only_this_projects_plain_method_names_become_labels() {
        assert_eq!(method_name("/etcdserverpb.KV/Range"), "etcdserverpb.KV/Range");
        assert_eq!(method_name("/wasmraft.v1.Client/Propose"), "wasmraft.v1.Client/Propose");
        for hostile in ["/other.Svc/Call", "/etcdserverpb.KV/Ra\"nge", "/etcdserverpb.KV/", "", "/", "/etcdserverpb.KV/a.b"] {
            assert_eq!(method_name(hostile), "unknown/unknown", "{hostile}");
        }
        let long = format!("/etcdserverpb.KV/{}", "x".repeat(100));
        assert_eq!(method_name(&long), "unknown/unknown");
    }
}
