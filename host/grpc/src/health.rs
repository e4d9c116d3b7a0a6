//! Health endpoints on the metrics listener, as etcd and Kubernetes probes
//! expect them: `/livez` (the process can serve: no node stopped on a
//! fatal failure), `/readyz` (it can serve clients: it knows a leader and
//! has caught up once with the commit index it learnt from it) and
//! `/health` (etcd's JSON: `{"health":"true","reason":""}`). Each answers
//! 200 or 503 with a line per node, for all nodes the process runs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmraft_node::{Node, NodeStatus};

/// How often readiness is looked at between probes.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Whether each node has caught up once since it started: a restarted
/// node is not ready while it applies the entries it missed.
#[derive(Clone, Debug)]
pub struct Readiness {
    nodes: Vec<Node>,
    caught_up: Arc<Vec<AtomicBool>>,
}

impl Readiness {
    /// Watches `nodes` until the process ends.
    pub fn watch(nodes: Vec<Node>) -> Self {
        let caught_up = Arc::new(nodes.iter().map(|_| AtomicBool::new(false)).collect::<Vec<_>>());
        let readiness = Self { nodes, caught_up };
        let watcher = readiness.clone();
        tokio::spawn(async move {
            loop {
                watcher.update();
                if watcher.caught_up.iter().all(|c| c.load(Ordering::Acquire)) {
                    return; // latched for good
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
        });
        readiness
    }

    fn update(&self) {
        for (node, caught_up) in self.nodes.iter().zip(self.caught_up.iter()) {
            let s = node.status();
            if s.leader.is_some() && s.applied >= s.commit && s.commit > 0 {
                caught_up.store(true, Ordering::Release);
            }
        }
    }

    /// The answer to `path`, if it is a health endpoint: status line and body.
    pub fn answer(&self, path: &str) -> Option<(&'static str, String)> {
        let path = path.split('?').next().unwrap_or(path);
        if !matches!(path, "/livez" | "/readyz" | "/health") {
            return None;
        }
        self.update();
        let mut ok = true;
        let mut lines = Vec::new();
        let mut reasons = Vec::new();
        for (node, caught_up) in self.nodes.iter().zip(self.caught_up.iter()) {
            let s = node.status();
            let problem = match path {
                "/livez" => dead(&s),
                _ => dead(&s).or_else(|| unready(&s, caught_up.load(Ordering::Acquire))),
            };
            match problem {
                Some(p) => {
                    ok = false;
                    lines.push(format!("node {}: {p}", s.id));
                    reasons.push(format!("node {}: {p}", s.id));
                }
                None => lines.push(format!("node {}: ok", s.id)),
            }
        }
        let status = if ok { "200 OK" } else { "503 Service Unavailable" };
        let body = if path == "/health" {
            format!("{{\"health\":\"{ok}\",\"reason\":\"{}\"}}\n", reasons.join("; ").replace('"', "'"))
        } else {
            lines.join("\n") + "\n"
        };
        Some((status, body))
    }
}

fn dead(s: &NodeStatus) -> Option<String> {
    s.fatal.as_ref().map(|f| format!("stopped on an unrecoverable failure: {f}"))
}

fn unready(s: &NodeStatus, caught_up: bool) -> Option<String> {
    if s.leader.is_none() {
        Some("no leader known (election under way, or cut off from a quorum)".into())
    } else if !caught_up {
        Some(format!("catching up: applied {} of {} committed", s.applied, s.commit))
    } else {
        None
    }
}
