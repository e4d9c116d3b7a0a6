//! `wasmraft lock NAME -- COMMAND`: runs COMMAND while holding the lock
//! NAME, with etcd's mutex recipe (`client/v3/concurrency/mutex.go`) over the
//! KV plugin, so it excludes `etcdctl lock` holders of the same name too. A
//! lease, kept alive meanwhile, holds the waiter's key `NAME/<lease hex>`;
//! the waiter with the lowest create revision owns the lock. If the lease
//! is lost while COMMAND runs, COMMAND gets SIGTERM (SIGKILL 5 s later) and
//! the lock command fails: exclusion is the point.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use wasmraft_client::Consistency;
use wasmraft_proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use wasmraft_proto::etcdserverpb::lease_client::LeaseClient;
use wasmraft_proto::etcdserverpb::request_op::Request;
use wasmraft_proto::etcdserverpb::response_op::Response;
use wasmraft_proto::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest, PutRequest, RangeRequest, RequestOp,
    TxnRequest,
};

use crate::client_cmds::Endpoints;
use crate::kv;

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  wasmraft lock deploy -- ./deploy.sh\n  wasmraft lock --ttl 30 nightly -- sh -c 'backup && prune'")]
pub struct LockArgs {
    /// The lock's name.
    pub name: String,
    /// The session lease's TTL, in seconds: how long the lock outlives this
    /// process if it dies.
    #[arg(long, default_value_t = 10)]
    pub ttl: i64,
    /// The command to run while holding the lock (after `--`); without
    /// one, the lock's key is printed and held until interrupted.
    #[arg(last = true)]
    pub command: Vec<String>,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

pub async fn lock(a: LockArgs) -> anyhow::Result<()> {
    let mut client = a.endpoints.client()?;
    let channels = a.endpoints.channels().await?;
    let mut leases = LeaseClient::new(channels[0].1.clone());
    let lease = leases
        .lease_grant(LeaseGrantRequest { ttl: a.ttl, id: 0 })
        .await
        .map_err(crate::client_cmds::status_error)?
        .into_inner();
    let (lost_tx, mut lost) = tokio::sync::watch::channel(false);
    let keeper = tokio::spawn(keep_alive(channels.clone(), lease.id, lease.ttl, lost_tx));
    let key = format!("{}/{:x}", a.name, lease.id);
    let outcome = hold(&mut client, &a, &key, lease.id, &mut lost).await;
    keeper.abort();
    // Unlock and end the session, whatever happened.
    let _ = client.propose(kv::encode(Request::RequestDeleteRange(DeleteRangeRequest { key: key.clone().into_bytes(), ..Default::default() }))).await;
    let _ = leases.lease_revoke(LeaseRevokeRequest { id: lease.id }).await;
    let code = outcome?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Takes the lock, runs the command (or waits for Ctrl-C); its exit code.
async fn hold(
    client: &mut wasmraft_client::Client,
    a: &LockArgs,
    key: &str,
    lease: i64,
    lost: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<i32> {
    // Put the waiter's key if it is not there yet; either way learn its
    // create revision.
    let exists = Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(TargetUnion::CreateRevision(0)),
        ..Default::default()
    };
    let put = RequestOp { request: Some(Request::RequestPut(PutRequest { key: key.as_bytes().to_vec(), lease, ..Default::default() })) };
    let get = RequestOp { request: Some(Request::RequestRange(RangeRequest { key: key.as_bytes().to_vec(), ..Default::default() })) };
    let txn = TxnRequest { compare: vec![exists], success: vec![put], failure: vec![get] };
    let r = client.propose(kv::encode(Request::RequestTxn(txn))).await?;
    let Response::ResponseTxn(t) = kv::decode(&r.result)? else { bail!("unexpected answer to the lock's txn") };
    let revision = if t.succeeded {
        t.header.map_or(0, |h| h.revision)
    } else {
        match t.responses.first().and_then(|r| r.response.clone()) {
            Some(Response::ResponseRange(r)) => r.kvs.first().map_or(0, |kv| kv.create_revision),
            _ => 0,
        }
    };
    if revision == 0 {
        bail!("could not read the lock's key {key}");
    }
    // Wait until no waiter of the name was created before this one.
    let prefix = format!("{}/", a.name);
    let (start, end) = kv::bounds(&prefix, kv::Keys::Prefix);
    loop {
        if *lost.borrow() {
            bail!("lost the lock's lease while waiting");
        }
        // (etcd's count ignores the revision filters: look at the keys.)
        let earlier = RangeRequest {
            key: start.clone(),
            range_end: end.clone(),
            max_create_revision: revision - 1,
            limit: 1,
            keys_only: true,
            ..Default::default()
        };
        let bytes = client.query(kv::encode(Request::RequestRange(earlier)), Consistency::Linearizable).await?;
        if kv::expect_range(kv::decode(&bytes)?)?.kvs.is_empty() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = lost.changed() => {}
        }
    }
    let own = client.query(kv::range(key, kv::Keys::One), Consistency::Linearizable).await?;
    if kv::expect_range(kv::decode(&own)?)?.kvs.is_empty() {
        bail!("lost the lock: its session expired while waiting");
    }
    let Some((program, args)) = a.command.split_first() else {
        println!("{key}");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(0),
            _ = lost.changed() => bail!("lost the lock: its lease expired"),
        }
    };
    let child = std::process::Command::new(program)
        .args(args)
        .env("WASMRAFT_LOCK_KEY", key)
        .env("WASMRAFT_LOCK_REV", revision.to_string())
        .env("ETCD_LOCK_KEY", key)
        .env("ETCD_LOCK_REV", revision.to_string())
        .spawn()
        .with_context(|| format!("cannot run {program}"))?;
    let pid = child.id().to_string();
    let mut waiter = tokio::task::spawn_blocking(move || {
        let mut child = child;
        child.wait()
    });
    tokio::select! {
        status = &mut waiter => Ok(status??.code().unwrap_or(1)),
        _ = lost.changed() => {
            let signal = |name: &str| std::process::Command::new("kill").args([name, &pid]).status();
            let _ = signal("-TERM");
            if tokio::time::timeout(Duration::from_secs(5), &mut waiter).await.is_err() {
                let _ = signal("-KILL");
                let _ = waiter.await;
            }
            bail!("lost the lock: its lease expired while {program} ran (it was stopped)")
        }
    }
}

/// Keeps the lease alive; says `lost` once it is gone or no endpoint
/// renewed it within its TTL.
async fn keep_alive(endpoints: Vec<(String, tonic::transport::Channel)>, id: i64, ttl: i64, lost: tokio::sync::watch::Sender<bool>) {
    let ttl = Duration::from_secs(ttl.max(1) as u64);
    let _ = crate::lease_cmd::keep_alive_loop(&endpoints, id, ttl, |_| true).await;
    let _ = lost.send(true);
}
