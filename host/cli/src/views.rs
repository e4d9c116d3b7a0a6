//! What `status`, `members` and `get` print: text for people, JSON
//! (`-w json`) for scripts, and `status --all`, a table of every endpoint.

use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use wasmraft_client::{Client, StatusResponse};

use crate::client_cmds::Endpoints;

/// How a command prints its answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum WriteOut {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON document, for scripts.
    Json,
}

#[derive(Args, Debug)]
pub struct StatusCmdArgs {
    /// Ask every endpoint, print a table, and fail if any node is
    /// unreachable, fatal, removed or without a leader.
    #[arg(long)]
    pub all: bool,
    /// Output format.
    #[arg(short = 'w', long = "write-out", value_enum, default_value_t)]
    pub write_out: WriteOut,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

/// A node's status as JSON (keys as in `wasmraft.v1.StatusResponse`).
pub fn status_json(s: &StatusResponse) -> Value {
    let plugin = s.plugin.clone().unwrap_or_default();
    json!({
        "id": s.id, "role": s.role, "term": s.term, "leader_id": s.leader_id,
        "commit_index": s.commit_index, "applied_index": s.applied_index, "last_index": s.last_index,
        "plugin": {"name": plugin.name, "version": plugin.version, "sdk_version": plugin.sdk_version, "sha256": plugin.sha256},
        "plugin_deployed_at": s.plugin_deployed_at, "cluster_id": s.cluster_id,
        "client_address": s.client_address, "peer_address": s.peer_address,
        "fatal": s.fatal, "removed": s.removed, "divergence": s.divergence,
    })
}

/// What is wrong with a node for `status --all`, if anything.
fn problem(s: &StatusResponse) -> Option<String> {
    if !s.fatal.is_empty() {
        Some(format!("fatal: {}", s.fatal))
    } else if s.removed {
        Some("removed from the cluster".into())
    } else if s.leader_id == 0 {
        Some("no leader known".into())
    } else {
        None
    }
}

/// One node's status asked at `endpoint` within `timeout`, once, and what
/// is wrong with it (`None`: healthy); no status if it did not answer.
async fn health(endpoint: &str, tls: Option<wasmraft_client::TlsConfig>, timeout: std::time::Duration) -> (Option<StatusResponse>, Option<String>) {
    let answer = match Client::with_tls([endpoint], tls) {
        Ok(mut c) => tokio::time::timeout(timeout, c.status()).await.unwrap_or_else(|_| {
            Err(wasmraft_client::ClientError::Unreachable { endpoints: endpoint.to_string(), last: "timed out".into() })
        }),
        Err(e) => Err(e),
    };
    match answer {
        Ok(s) => {
            let p = problem(&s);
            (Some(s), p)
        }
        Err(e) => (None, Some(format!("unreachable: {e}"))),
    }
}

/// `status --all`: every endpoint's status, one row each.
pub async fn status_all(a: &StatusCmdArgs) -> anyhow::Result<()> {
    let tls = a.endpoints.tls()?;
    let mut rows = Vec::new();
    let mut healthy = true;
    for endpoint in &a.endpoints.endpoints {
        let (status, problem) = health(endpoint, tls.clone(), a.endpoints.timeout).await;
        healthy &= problem.is_none();
        rows.push((endpoint.clone(), status, problem));
    }
    match a.write_out {
        WriteOut::Json => {
            let nodes: Vec<Value> = rows
                .iter()
                .map(|(endpoint, s, p)| {
                    json!({"endpoint": endpoint, "status": s.as_ref().map(status_json), "healthy": p.is_none(), "problem": p})
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&json!({ "nodes": nodes }))?);
        }
        WriteOut::Text => {
            println!(
                "{:<22} {:>4} {:<10} {:>5} {:>6} {:>8} {:>8} {:<12} HEALTH",
                "ENDPOINT", "ID", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED", "PLUGIN"
            );
            for (endpoint, s, p) in &rows {
                let health = p.clone().unwrap_or_else(|| "ok".into());
                match s {
                    Some(s) => println!(
                        "{endpoint:<22} {:>4} {:<10} {:>5} {:>6} {:>8} {:>8} {:<12} {health}",
                        s.id,
                        s.role,
                        s.term,
                        s.leader_id,
                        s.commit_index,
                        s.applied_index,
                        s.plugin.as_ref().map_or("", |p| p.name.as_str())
                    ),
                    None => println!("{endpoint:<22} {:>4} {:<10} {:>5} {:>6} {:>8} {:>8} {:<12} {health}", "-", "-", "-", "-", "-", "-", "-"),
                }
            }
        }
    }
    if !healthy {
        anyhow::bail!("not every node is healthy (see HEALTH)");
    }
    Ok(())
}

/// `members`: the configuration from the leader's view, each member's
/// state asked of the member itself, and the ids removed.
pub async fn print_members(
    r: wasmraft_proto::v1::MembersResponse,
    endpoints: &Endpoints,
    write_out: WriteOut,
) -> anyhow::Result<()> {
    // Each member asked once, briefly: a dead one must not hold up the table.
    let tls = endpoints.tls()?;
    let timeout = endpoints.timeout.min(std::time::Duration::from_secs(2));
    let mut states = Vec::with_capacity(r.members.len());
    for m in &r.members {
        states.push(if m.client_address.is_empty() {
            "unknown (no client address yet)".to_string()
        } else {
            health(&m.client_address, tls.clone(), timeout).await.1.unwrap_or_else(|| "ok".into())
        });
    }
    if write_out == WriteOut::Json {
        let mut members: Vec<Value> = r
            .members
            .iter()
            .zip(&states)
            .map(|(m, state)| {
                json!({
                    "id": m.id, "role": m.role, "leader": m.id == r.leader_id, "peer_address": m.address,
                    "client_address": m.client_address, "matched": m.matched, "state": state,
                })
            })
            .collect();
        members.extend(r.removed.iter().map(|id| json!({"id": id, "role": "removed", "leader": false, "state": "removed"})));
        let doc = json!({ "leader_id": r.leader_id, "members": members, "removed": r.removed });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!("{:<6} {:<15} {:<24} {:<24} {:<8} STATE", "ID", "ROLE", "PEER ADDRESS", "CLIENT ADDRESS", "MATCHED");
    for (m, state) in r.members.iter().zip(&states) {
        let role = if m.id == r.leader_id { format!("{} (leader)", m.role) } else { m.role.clone() };
        let client = if m.client_address.is_empty() { "-" } else { m.client_address.as_str() };
        println!("{:<6} {:<15} {:<24} {:<24} {:<8} {state}", m.id, role, m.address, client, m.matched);
    }
    for id in &r.removed {
        println!("{id:<6} {:<15} {:<24} {:<24} {:<8} removed", "removed", "-", "-", "-");
    }
    Ok(())
}

/// Bytes as a JSON string when they are UTF-8, else as base64 under
/// `<name>_base64`.
pub fn bytes_field(object: &mut serde_json::Map<String, Value>, name: &str, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => object.insert(name.into(), Value::String(text.into())),
        Err(_) => object.insert(format!("{name}_base64"), Value::String(base64(bytes))),
    };
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        for (bytes, text) in [(&b""[..], ""), (b"f", "Zg=="), (b"fo", "Zm8="), (b"foo", "Zm9v"), (b"\xff\xfe\x00", "//4A")] {
            assert_eq!(base64(bytes), text);
        }
    }
}
