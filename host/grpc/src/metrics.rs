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
    render_work(&mut out, nodes);
    render_grpc(&mut out, nodes);
    out
}

/// The nodes' own counters and histograms (`wasmraft_node::NodeMetrics`).
fn render_work(out: &mut String, nodes: &[Node]) {
    use std::sync::atomic::Ordering::Relaxed;
    use wasmraft_node::{NodeMetrics, RequestKind};

    let ids: Vec<u64> = nodes.iter().map(Node::id).collect();
    let head = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };

    head(out, "wasmraft_requests_total", "counter", "Client requests (wasmraft.v1 and etcd's API alike) by kind and outcome.");
    for (id, node) in ids.iter().zip(nodes) {
        for kind in RequestKind::ALL {
            for (outcome, n) in node.metrics().requests(kind) {
                let _ = writeln!(out, "wasmraft_requests_total{{node=\"{id}\",kind=\"{}\",outcome=\"{outcome}\"}} {n}", kind.label());
            }
        }
    }
    head(out, "wasmraft_request_duration_seconds", "histogram", "Time from a request's arrival at the node to its answer, by kind.");
    for (id, node) in ids.iter().zip(nodes) {
        for kind in RequestKind::ALL {
            let labels = format!("node=\"{id}\",kind=\"{}\"", kind.label());
            histogram(out, "wasmraft_request_duration_seconds", &labels, node.metrics().latency(kind));
        }
    }

    type Pick = fn(&NodeMetrics) -> &wasmraft_node::Histogram;
    let histograms: [(&str, &str, Pick); 5] = [
        ("wasmraft_commit_duration_seconds", "From a proposal batch on the leader to its commit by a quorum.", |m| &m.commit_latency),
        ("wasmraft_log_fsync_duration_seconds", "Synced writes of log entries and hard state (one fsync each).", |m| &m.log_fsync),
        ("wasmraft_apply_duration_seconds", "Applying one batch of committed entries (the state machine and its storage write).", |m| &m.apply_latency),
        ("wasmraft_apply_batch_entries", "Committed entries per applied batch.", |m| &m.apply_batch_size),
        ("wasmraft_snapshot_duration_seconds", "Snapshots this node took (checkpoint, log compaction), on the apply thread, which applies nothing meanwhile.", |m| &m.snapshot_duration),
    ];
    for (name, help, pick) in histograms {
        head(out, name, "histogram", help);
        for (id, node) in ids.iter().zip(nodes) {
            histogram(out, name, &format!("node=\"{id}\""), pick(node.metrics()));
        }
    }

    type Count = fn(&NodeMetrics) -> u64;
    let counters: [(&str, &str, Count); 12] = [
        ("wasmraft_applied_entries_total", "Committed entries applied.", |m| m.apply_batch_size.read().2 as u64),
        ("wasmraft_elections_total", "Elections this node started as a candidate (after winning a pre-vote).", |m| m.elections.load(Relaxed)),
        ("wasmraft_leader_changes_total", "Times this node saw the leader change (or go).", |m| m.leader_changes.load(Relaxed)),
        ("wasmraft_read_index_rounds_total", "ReadIndex rounds this node started (one per batch of linearizable reads, one at a time).", |m| m.read_index_rounds.load(Relaxed)),
        ("wasmraft_proposals_forwarded_total", "Proposals this node sent to the leader in its Raft stream, as follower.", |m| m.proposals_forwarded.load(Relaxed)),
        ("wasmraft_snapshots_sent_total", "Snapshots this node streamed to a follower that took them.", |m| m.snapshots_sent_ok.load(Relaxed)),
        ("wasmraft_snapshots_send_failures_total", "Snapshots this node failed to stream to a follower (Raft retries).", |m| m.snapshots_sent_failed.load(Relaxed)),
        ("wasmraft_snapshots_installed_total", "Snapshots from a leader this node installed.", |m| m.snapshots_installed.load(Relaxed)),
        ("wasmraft_plugin_fuel_consumed_total", "Fuel the plugin burned applying entries (every replica burns the same).", |m| m.plugin_fuel.load(Relaxed)),
        ("wasmraft_plugin_traps_total", "Entries the plugin trapped on (a panic, out of fuel or memory); each failed alone, on every replica.", |m| m.plugin_traps.load(Relaxed)),
        ("wasmraft_ticks_total", "Tick entries applied: the plugin's timer came due (wasmraft:plugin@0.2.0).", |m| m.ticks.load(Relaxed)),
        ("wasmraft_tick_failures_total", "Ticks whose plugin tick failed (an error or a trap); the leader retries after a second.", |m| m.tick_failures.load(Relaxed)),
    ];
    for (name, help, count) in counters {
        head(out, name, "counter", help);
        for (id, node) in ids.iter().zip(nodes) {
            let _ = writeln!(out, "{name}{{node=\"{id}\"}} {}", count(node.metrics()));
        }
    }

    let now = std::time::Instant::now();
    head(out, "wasmraft_peer_last_heard_seconds", "gauge", "Seconds since this node last heard from a peer (a leader hears from every member, a follower from its leader).");
    for (id, node) in ids.iter().zip(nodes) {
        node.metrics().each_peer(|peer, p| {
            if let Some(at) = p.last_heard {
                let _ = writeln!(out, "wasmraft_peer_last_heard_seconds{{node=\"{id}\",peer=\"{peer}\"}} {:.3}", now.saturating_duration_since(at).as_secs_f64());
            }
        });
    }
    head(out, "wasmraft_peer_round_trip_seconds", "histogram", "Heartbeat round trips from this node, while it leads, to each peer.");
    for (id, node) in ids.iter().zip(nodes) {
        node.metrics().each_peer(|peer, p| {
            histogram(out, "wasmraft_peer_round_trip_seconds", &format!("node=\"{id}\",peer=\"{peer}\""), &p.round_trip);
        });
    }
}

/// One histogram's series: cumulative buckets, `+Inf`, sum and count.
fn histogram(out: &mut String, name: &str, labels: &str, h: &wasmraft_node::Histogram) {
    let (buckets, count, sum) = h.read();
    for (le, n) in buckets {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
    let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
}

/// The gRPC calls `nodes` served, by service, method and code
/// (`grpc_metrics.rs`), under etcd's names.
fn render_grpc(out: &mut String, nodes: &[Node]) {
    use std::sync::atomic::Ordering::Relaxed;
    let ids: std::collections::BTreeSet<u64> = nodes.iter().map(Node::id).collect();
    let series: Vec<_> = crate::grpc_metrics::snapshot().into_iter().filter(|s| ids.contains(&s.0)).collect();
    let _ = writeln!(
        out,
        "# HELP grpc_server_started_total gRPC calls started on the server, by service and method.\n\
         # TYPE grpc_server_started_total counter"
    );
    for (node, service, method, s) in &series {
        let n = s.started.load(Relaxed);
        let _ = writeln!(out, "grpc_server_started_total{{node=\"{node}\",grpc_service=\"{service}\",grpc_method=\"{method}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP grpc_server_handled_total gRPC calls completed on the server, by service, method and status code (a stream counts when it ends).\n\
         # TYPE grpc_server_handled_total counter"
    );
    for (node, service, method, s) in &series {
        for (code, n) in crate::grpc_metrics::CODES.iter().zip(&s.handled) {
            let n = n.load(Relaxed);
            // OK always, other codes once they happened.
            if n > 0 || *code == "OK" {
                let _ = writeln!(
                    out,
                    "grpc_server_handled_total{{node=\"{node}\",grpc_service=\"{service}\",grpc_method=\"{method}\",grpc_code=\"{code}\"}} {n}"
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP grpc_server_handling_seconds Time from a gRPC call's request to its status, by service and method.\n\
         # TYPE grpc_server_handling_seconds histogram"
    );
    for (node, service, method, s) in &series {
        let labels = format!("node=\"{node}\",grpc_service=\"{service}\",grpc_method=\"{method}\"");
        histogram(out, "grpc_server_handling_seconds", &labels, &s.latency);
    }
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
