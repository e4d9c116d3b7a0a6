//! Auto-compaction of the KV plugin's history, as etcd's
//! `--auto-compaction-mode` and `--auto-compaction-retention` define it.
//! Only the leader compacts, by proposing a compaction through the log like
//! any client's `Compact`; a new leader starts sampling afresh, so it never
//! compacts more than the retention asks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use wasmraft_node::{Error, Node};
use wasmraft_proto::etcdserverpb::CompactionRequest;

use super::{current_revision, require_kv};

/// How much history the KV plugin keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AutoCompaction {
    /// Keep the revisions of the last `retention`: every tenth of it, the
    /// leader compacts at the revision there was `retention` ago.
    Periodic(Duration),
    /// Keep the last `retention` revisions, checked every five minutes.
    Revision(i64),
}

/// How often the revision mode checks, as etcd does.
const REVISION_CHECK: Duration = Duration::from_secs(300);

impl AutoCompaction {
    /// etcd's settings: mode `periodic` with a retention such as `1h`,
    /// `30m` or `90s` (a bare number is hours, as in etcd), or mode
    /// `revision` with a count. A retention of 0 turns it off.
    pub fn parse(mode: &str, retention: &str) -> Result<Option<Self>, String> {
        let retention = retention.trim();
        match mode {
            "periodic" => {
                // A bare number is hours, as etcd reads it.
                let hours = retention.parse::<u64>().ok().map(|h| Duration::from_secs(h * 3600));
                let retention = hours.or_else(|| parse_duration(retention).ok()).ok_or_else(|| bad_retention(retention))?;
                Ok((!retention.is_zero()).then_some(Self::Periodic(retention)))
            }
            "revision" => {
                let n: i64 = retention
                    .parse()
                    .ok()
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| format!("auto_compaction_retention {retention:?}: the revision mode needs a count such as 10000"))?;
                Ok((n > 0).then_some(Self::Revision(n)))
            }
            other => Err(format!("auto_compaction_mode {other:?}: expected \"periodic\" or \"revision\"")),
        }
    }

    fn interval(self) -> Duration {
        match self {
            Self::Periodic(retention) => (retention / 10).max(Duration::from_millis(100)),
            Self::Revision(_) => REVISION_CHECK,
        }
    }
}

/// A duration such as `500ms`, `90s`, `30m` or `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration such as 500ms, 90s, 30m or 1h"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("{text:?} is not a duration such as 500ms, 90s, 30m or 1h")),
    }
}

fn bad_retention(retention: &str) -> String {
    format!("auto_compaction_retention {retention:?}: expected a duration such as 1h, 30m or 90s, or 0 for none")
}

/// Compacts `node`'s history by `policy` while it leads, until `stop`.
pub(crate) async fn run(node: Node, policy: AutoCompaction, stop: watch::Receiver<bool>) {
    run_every(node, policy, policy.interval(), stop).await
}

/// [`run`], checking every `interval`.
async fn run_every(node: Node, policy: AutoCompaction, interval: Duration, mut stop: watch::Receiver<bool>) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples: VecDeque<(Instant, i64)> = VecDeque::new();
    let mut compacted = 0i64;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if node.status().leader.map(|l| l.0) != Some(node.id()) || require_kv(&node).is_err() {
            samples.clear();
            continue;
        }
        let Ok(current) = current_revision(&node).await else { continue };
        let target = match policy {
            AutoCompaction::Periodic(retention) => {
                let now = Instant::now();
                samples.push_back((now, current));
                let mut target = None;
                while let Some(&(at, revision)) = samples.front() {
                    if now.duration_since(at) < retention {
                        break;
                    }
                    target = Some(revision);
                    samples.pop_front();
                }
                target
            }
            AutoCompaction::Revision(keep) => Some(current - keep),
        };
        let Some(target) = target.filter(|t| *t > compacted.max(1)) else { continue };
        match compact(&node, target).await {
            Ok(()) => {
                compacted = target;
                tracing::info!(revision = target, ?policy, "auto-compaction: compacted the KV history");
            }
            Err(Error::Rejected(m)) if m.contains("compacted") => compacted = target,
            Err(e) => tracing::warn!(revision = target, error = %e, "auto-compaction failed; trying again later"),
        }
    }
}

async fn compact(node: &Node, revision: i64) -> Result<(), Error> {
    let request = CompactionRequest { revision, physical: false };
    node.propose(super::kv::request_op(super::kv::OP_COMPACTION, &request)).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use wasmraft_node::{Consistency, LocalCluster};
    use wasmraft_proto::etcdserverpb::request_op::Request as Op;
    use wasmraft_proto::etcdserverpb::{PutRequest, RangeRequest, RequestOp};

    async fn put(node: &Node) {
        let put = PutRequest { key: b"k".to_vec(), value: b"v".to_vec(), ..Default::default() };
        node.propose(super::super::kv::request_op(super::super::kv::OP_PUT, &put)).await.unwrap();
    }

    /// Whether a read at `revision` is refused as compacted.
    async fn compacted(node: &Node, revision: i64) -> bool {
        let range = RequestOp { request: Some(Op::RequestRange(RangeRequest { key: b"k".to_vec(), revision, ..Default::default() })) };
        match node.query(range.encode_to_vec(), Consistency::Eventual).await {
            Ok(_) => false,
            Err(Error::Rejected(m)) if m.contains("required revision has been compacted") => true,
            Err(e) => panic!("{e}"),
        }
    }

    /// The revision mode keeps the last `retention` revisions: the leader
    /// compacts at `current - retention` on each check, and again as writes
    /// go on (real node, KV plugin and RocksDB; checked every 20 ms here
    /// instead of etcd's five minutes).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_revision_mode_keeps_the_last_revisions() {
        let dir = tempfile::tempdir().unwrap();
        let cluster = LocalCluster::start(1, dir.path(), wasmraft_node::KV_PLUGIN, |c| {
            c.tick_interval = Duration::from_millis(10);
        })
        .unwrap();
        let node = cluster.leader().await.unwrap();
        for _ in 0..10 {
            put(&node).await; // revisions 2..=11
        }
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run_every(node.clone(), AutoCompaction::Revision(3), Duration::from_millis(20), stopped));
        let until_compacted = |revision: i64| {
            let node = node.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !compacted(&node, revision).await {
                    assert!(Instant::now() < deadline, "revision {revision} was never compacted");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        // Current 11, keep 3: compacted at 8, so 7 is gone and 8 stays.
        until_compacted(7).await;
        assert!(!compacted(&node, 8).await);
        for _ in 0..5 {
            put(&node).await; // up to 16: compacted at 13
        }
        until_compacted(12).await;
        assert!(!compacted(&node, 13).await);
        stop.send(true).unwrap();
        task.await.unwrap();
    }

    #[test]
    fn settings_parse_as_etcd_reads_them() {
        let p = |m, r| AutoCompaction::parse(m, r);
        assert_eq!(p("periodic", "1h"), Ok(Some(AutoCompaction::Periodic(Duration::from_secs(3600)))));
        assert_eq!(p("periodic", "72"), Ok(Some(AutoCompaction::Periodic(Duration::from_secs(72 * 3600)))));
        assert_eq!(p("periodic", "30m"), Ok(Some(AutoCompaction::Periodic(Duration::from_secs(1800)))));
        assert_eq!(p("periodic", "2s"), Ok(Some(AutoCompaction::Periodic(Duration::from_secs(2)))));
        assert_eq!(p("periodic", "0"), Ok(None));
        assert_eq!(p("revision", "1000"), Ok(Some(AutoCompaction::Revision(1000))));
        assert_eq!(p("revision", "0"), Ok(None));
        assert!(p("periodic", "1d").unwrap_err().contains("expected a duration"));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5 m").is_err() && parse_duration("m").is_err());
        assert!(p("revision", "1h").unwrap_err().contains("needs a count"));
        assert!(p("hourly", "1h").unwrap_err().contains("expected \"periodic\" or \"revision\""));
    }
}
