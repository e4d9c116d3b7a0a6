//! `wasmraft watch`: changes under a prefix as they apply, through etcd's
//! Watch API over the KV plugin, so that a watch whose node goes away
//! resumes on the next endpoint from the revision after the last change it
//! printed: no change is missed or printed twice.

use std::time::{Duration, Instant};

use anyhow::bail;
use wasmraft_proto::etcdserverpb::watch_client::WatchClient;
use wasmraft_proto::etcdserverpb::watch_request::RequestUnion;
use wasmraft_proto::etcdserverpb::{WatchCreateRequest, WatchRequest};
use wasmraft_proto::mvccpb::event::EventType;

use crate::client_cmds::WatchArgs;

/// Why one watch stream ended.
enum Ended {
    /// The node or the connection went away: resume elsewhere.
    Interrupted(String),
    /// The watch cannot go on anywhere (its revision was compacted).
    Refused(String),
    /// Whoever read the output went away (`| head`): done.
    OutputClosed,
}

pub async fn watch(a: WatchArgs) -> anyhow::Result<()> {
    let tls = a.endpoints.tls()?;
    let endpoints = &a.endpoints.endpoints;
    let (key, range_end) = crate::kv::bounds(&a.prefix, crate::kv::Keys::Prefix);
    // 0 until the first stream starts: from now on.
    let mut next_revision = 0i64;
    let mut turn = 0usize;
    let mut failing_since: Option<Instant> = None;
    loop {
        let endpoint = &endpoints[turn % endpoints.len()];
        let before = next_revision;
        let ended = watch_on(endpoint, tls.as_ref(), &key, &range_end, &mut next_revision).await;
        match ended {
            Ended::Refused(m) => bail!("{m}"),
            Ended::OutputClosed => return Ok(()),
            Ended::Interrupted(cause) => {
                // Progress resets the clock: only a watch that gets nowhere
                // for --timeout gives up.
                if next_revision != before {
                    failing_since = None;
                }
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > a.endpoints.timeout {
                    bail!("the watch could not be resumed on any endpoint within --timeout; last: {endpoint}: {cause}");
                }
                turn += 1;
                let from = if next_revision == 0 { "now".to_string() } else { format!("revision {next_revision}") };
                eprintln!("watch on {endpoint} interrupted ({cause}); resuming on {} from {from}", endpoints[turn % endpoints.len()]);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Watches on one endpoint from `next_revision` (0: now), printing changes
/// and advancing `next_revision` past each, until the stream ends.
async fn watch_on(
    endpoint: &str,
    tls: Option<&wasmraft_client::TlsConfig>,
    key: &[u8],
    range_end: &[u8],
    next_revision: &mut i64,
) -> Ended {
    let channel = match wasmraft_client::endpoint(endpoint, tls) {
        Ok(e) => match e.connect().await {
            Ok(c) => c,
            Err(e) => return Ended::Interrupted(wasmraft_client::error_chain(&e)),
        },
        Err(e) => return Ended::Refused(format!("{endpoint}: {e}")),
    };
    // The request stream stays open while the watch runs: closing it ends
    // the watch on the node.
    let (requests, rx) = tokio::sync::mpsc::channel(1);
    let create = WatchCreateRequest {
        key: key.to_vec(),
        range_end: range_end.to_vec(),
        start_revision: *next_revision,
        ..Default::default()
    };
    let _ = requests.send(WatchRequest { request_union: Some(RequestUnion::CreateRequest(create)) }).await;
    let mut stream = match WatchClient::new(channel).watch(tokio_stream::wrappers::ReceiverStream::new(rx)).await {
        Ok(r) => r.into_inner(),
        Err(s) if s.code() == tonic::Code::FailedPrecondition => return Ended::Refused(s.message().to_string()),
        Err(s) => return Ended::Interrupted(wasmraft_client::error_chain(&s)),
    };
    loop {
        let response = match stream.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Ended::Interrupted("the node closed the stream".into()),
            Err(s) => return Ended::Interrupted(wasmraft_client::error_chain(&s)),
        };
        if response.canceled {
            let reason = if response.compact_revision > 0 {
                format!(
                    "{} (the node keeps revisions from {} on; watch again to start from now)",
                    response.cancel_reason, response.compact_revision
                )
            } else {
                response.cancel_reason
            };
            return Ended::Refused(format!("the watch was cancelled: {reason}"));
        }
        if response.created && *next_revision == 0 {
            *next_revision = response.header.map_or(0, |h| h.revision) + 1;
        }
        for event in response.events {
            let kv = event.kv.unwrap_or_default();
            let line = match EventType::try_from(event.r#type) {
                Ok(EventType::Put) => format!("PUT {} {}", String::from_utf8_lossy(&kv.key), String::from_utf8_lossy(&kv.value)),
                _ => format!("DELETE {}", String::from_utf8_lossy(&kv.key)),
            };
            if !crate::client_cmds::print_line(line.as_bytes()) {
                return Ended::OutputClosed;
            }
            *next_revision = kv.mod_revision + 1;
        }
    }
}
