//! Prometheus metrics over plain HTTP (`GET /metrics`), in the text
//! exposition format, read from each node's status when scraped; and the
//! health endpoints (`/livez`, `/readyz`, `/health`, see [`crate::health`]).

use std::fmt::Write as _;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmraft_node::{Node, Role};

/// Serves `GET /metrics` for `nodes` (several in one process: `wasmraft
/// dev`) until `shutdown` resolves.
pub async fn serve_metrics(
    nodes: Vec<Node>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    tokio::pin!(shutdown);
    let readiness = crate::health::Readiness::watch(nodes.clone());
    loop {
        let (mut socket, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener");
                    continue;
                }
            },
        };
        let nodes = nodes.clone();
        let readiness = readiness.clone();
        tokio::spawn(async move {
            // Only the request line matters; bound what is read.
            let mut buf = vec![0u8; 8192];
            let mut read = 0;
            while read < buf.len() && !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
            let request = String::from_utf8_lossy(&buf[..read]);
            let path = request.split_whitespace().nth(1).unwrap_or("");
            let health = if request.starts_with("GET ") { readiness.answer(path) } else { None };
            let (status, body) = if let Some(answer) = health {
                answer
            } else if request.starts_with("GET ")
                && (path == "/metrics" || path.starts_with("/metrics?"))
            {
                ("200 OK", render(&nodes))
            } else {
                ("404 Not Found", "try GET /metrics, /livez, /readyz or /health\n".to_string())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}

/// The metrics of `nodes`, in the Prometheus text format.
pub fn render(nodes: &[Node]) -> String {
    let statuses: Vec<_> = nodes.iter().map(Node::status).collect();
    let mut out = String::new();
    let mut family =
        |name: &str,
         kind: &str,
         help: &str,
         value: &dyn Fn(&wasmraft_node::NodeStatus) -> (String, u64)| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
            for s in &statuses {
                let (extra, v) = value(s);
                let _ = writeln!(out, "{name}{{node=\"{}\"{extra}}} {v}", s.id);
            }
        };
    family("wasmraft_term", "gauge", "Current Raft term.", &|s| {
        (String::new(), s.term)
    });
    family(
        "wasmraft_is_leader",
        "gauge",
        "1 if this node is the leader.",
        &|s| (String::new(), u64::from(s.role == Role::Leader)),
    );
    family(
        "wasmraft_commit_index",
        "gauge",
        "Highest log index known committed.",
        &|s| (String::new(), s.commit),
    );
    family(
        "wasmraft_applied_index",
        "gauge",
        "Highest log index applied to the state machine.",
        &|s| (String::new(), s.applied),
    );
    family(
        "wasmraft_last_log_index",
        "gauge",
        "Last index in the node's log.",
        &|s| (String::new(), s.last_index),
    );
    family(
        "wasmraft_apply_stopped",
        "gauge",
        "1 if the node stopped applying on an unrecoverable failure.",
        &|s| (String::new(), u64::from(s.fatal.is_some())),
    );
    family(
        "wasmraft_plugin_info",
        "gauge",
        "The running plugin (always 1; see the labels).",
        &|s| {
            let p = &s.plugin;
            (
                format!(
                    ",name=\"{}\",version=\"{}\",sha256=\"{}\"",
                    escape(&p.name),
                    escape(&p.version),
                    escape(&p.sha256)
                ),
                1,
            )
        },
    );
    family(
        "wasmraft_plugin_deployed_at_index",
        "gauge",
        "Log index that deployed the running plugin (0: the configured one).",
        &|s| (String::new(), s.deployed_at),
    );
    family(
        "wasmraft_keyspace_hash_checks_total",
        "counter",
        "Keyspace hashes taken for comparison with the leader's.",
        &|s| (String::new(), s.hash_checks),
    );
    family(
        "wasmraft_keyspace_divergences_total",
        "counter",
        "Times this node's keyspace hash differed from the leader's.",
        &|s| (String::new(), s.divergences),
    );
    family(
        "wasmraft_pending_requests",
        "gauge",
        "Client requests (proposals and reads) in flight on this node.",
        &|s| (String::new(), s.pending_requests),
    );
    family(
        "wasmraft_pending_read_rounds",
        "gauge",
        "ReadIndex rounds the leader is waiting on (each expires after the request timeout).",
        &|s| (String::new(), s.pending_read_rounds),
    );
    family(
        "wasmraft_busy_refusals_total",
        "counter",
        "Requests refused as busy (too many in flight, or the leader's apply lag).",
        &|s| (String::new(), s.busy_refusals),
    );
    family(
        "wasmraft_peer_inbox_dropped_total",
        "counter",
        "Peer messages dropped because the Raft loop's inbox was full (the leader resends).",
        &|s| (String::new(), s.peer_inbox_dropped),
    );
    family(
        "wasmraft_removed",
        "gauge",
        "1 once this node learned it was removed from the cluster.",
        &|s| (String::new(), u64::from(s.removed)),
    );
    // Process-wide: every node of a `wasmraft dev` process shares them.
    let _ = writeln!(
        out,
        "# HELP wasmraft_peer_refused_total Peer streams and messages refused (another cluster, another node, a non-member, a stale snapshot).\n\
         # TYPE wasmraft_peer_refused_total counter"
    );
    for (reason, n) in crate::peer::REFUSALS.counts() {
        let _ = writeln!(
            out,
            "wasmraft_peer_refused_total{{reason=\"{reason}\"}} {n}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP wasmraft_tls_handshake_failures_total TLS handshakes refused, by listener.\n\
         # TYPE wasmraft_tls_handshake_failures_total counter"
    );
    let failures = &crate::tls::HANDSHAKE_FAILURES;
    for (listener, n) in [("peer", &failures.peer), ("client", &failures.client)] {
        let _ = writeln!(
            out,
            "wasmraft_tls_handshake_failures_total{{listener=\"{listener}\"}} {}",
            n.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    render_lanes(&mut out);
    out
}

/// The peer lanes of this process (`lane.rs`): queue depth now, and the
/// messages dropped because a lane's budget was full or its peer unreachable.
fn render_lanes(out: &mut String) {
    let lanes = crate::lane::stats();
    let _ = writeln!(
        out,
        "# HELP wasmraft_peer_dropped_messages_total Raft messages to a peer dropped before sending (Raft resends), by lane and reason (full: the lane's budget; unreachable: the peer).\n\
         # TYPE wasmraft_peer_dropped_messages_total counter"
    );
    for ((node, peer, lane), s) in &lanes {
        for (reason, n) in [("full", s.dropped_full), ("unreachable", s.dropped_unreachable)] {
            let _ = writeln!(
                out,
                "wasmraft_peer_dropped_messages_total{{node=\"{node}\",peer=\"{peer}\",lane=\"{}\",reason=\"{reason}\"}} {n}",
                lane.name()
            );
        }
    }
    for (name, help, value) in [
        (
            "wasmraft_peer_queued_messages",
            "Raft messages queued for a peer, by lane.",
            (|s: &crate::lane::LaneStats| s.queued_messages) as fn(&crate::lane::LaneStats) -> u64,
        ),
        (
            "wasmraft_peer_queued_bytes",
            "Encoded bytes of Raft messages queued for a peer, by lane (bounded by the lane's budget).",
            |s| s.queued_bytes,
        ),
    ] {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for ((node, peer, lane), s) in &lanes {
            let _ = writeln!(
                out,
                "{name}{{node=\"{node}\",peer=\"{peer}\",lane=\"{}\"}} {}",
                lane.name(),
                value(s)
            );
        }
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
