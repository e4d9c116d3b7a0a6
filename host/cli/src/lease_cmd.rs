//! `wasmraft lease`: etcd's leases over the KV plugin, through etcd's Lease
//! API (as `watch` goes through etcd's Watch API), printed as etcdctl prints
//! them, with ids in hex.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use tonic::transport::Channel;
use wasmraft_proto::etcdserverpb::lease_client::LeaseClient;
use wasmraft_proto::etcdserverpb::{
    LeaseGrantRequest, LeaseKeepAliveRequest, LeaseLeasesRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest,
};

use crate::client_cmds::{Endpoints, status_error};

#[derive(Subcommand, Debug)]
pub enum LeaseCommand {
    /// Grant a lease of TTL seconds and print its id.
    #[command(after_help = "Examples:\n  wasmraft lease grant 10\n  wasmraft put svc/a 10.0.0.1 --lease $(wasmraft lease grant 10 | cut -d' ' -f2)")]
    Grant(GrantArgs),
    /// Revoke a lease: its keys are deleted at once.
    #[command(after_help = "Example:\n  wasmraft lease revoke 694d77aa9e38260f")]
    Revoke(IdArgs),
    /// Keep a lease alive until interrupted (or once, with --once).
    #[command(after_help = "Examples:\n  wasmraft lease keep-alive 694d77aa9e38260f\n  wasmraft lease keep-alive 694d77aa9e38260f --once")]
    KeepAlive(KeepAliveArgs),
    /// Print a lease's granted TTL and the time left (and its keys).
    #[command(after_help = "Example:\n  wasmraft lease ttl 694d77aa9e38260f --keys")]
    Ttl(TtlArgs),
    /// List every lease.
    #[command(after_help = "Example:\n  wasmraft lease list")]
    List(ListArgs),
}

#[derive(Args, Debug)]
pub struct GrantArgs {
    /// Seconds; raised to the cluster's minimum (one and a half election timeouts).
    pub ttl: i64,
    /// Ask for this id (hex) instead of a generated one.
    #[arg(long)]
    pub id: Option<String>,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct IdArgs {
    /// The lease id, in hex.
    pub id: String,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct KeepAliveArgs {
    /// The lease id, in hex.
    pub id: String,
    /// Send one keep-alive and exit.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct TtlArgs {
    /// The lease id, in hex.
    pub id: String,
    /// Also list the keys attached to it.
    #[arg(long)]
    pub keys: bool,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub endpoints: Endpoints,
}

/// A lease id as etcdctl prints and takes it: hex.
pub fn parse_id(id: &str) -> anyhow::Result<i64> {
    let n = u64::from_str_radix(id.trim_start_matches("0x"), 16)
        .with_context(|| format!("{id:?} is not a lease id (hex, as `lease grant` prints it)"))?;
    i64::try_from(n).with_context(|| format!("lease id {id} is out of range"))
}

/// Runs `call` on each endpoint in turn until one answers.
async fn on_any<T, F, Fut>(endpoints: &Endpoints, mut call: F) -> anyhow::Result<T>
where
    F: FnMut(LeaseClient<Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    let mut last = None;
    for (_, channel) in endpoints.channels().await? {
        match call(LeaseClient::new(channel)).await {
            Ok(r) => return Ok(r.into_inner()),
            Err(s) if s.code() == tonic::Code::Unavailable => last = Some(s),
            Err(s) => return Err(status_error(s)),
        }
    }
    Err(status_error(last.expect("channels() returns at least one")))
}

pub async fn lease(command: LeaseCommand) -> anyhow::Result<()> {
    match command {
        LeaseCommand::Grant(a) => {
            let id = a.id.as_deref().map(parse_id).transpose()?.unwrap_or(0);
            let ttl = a.ttl;
            let r = on_any(&a.endpoints, |mut c| async move { c.lease_grant(LeaseGrantRequest { ttl, id }).await }).await?;
            println!("lease {:x} granted with TTL({}s)", r.id, r.ttl);
        }
        LeaseCommand::Revoke(a) => {
            let id = parse_id(&a.id)?;
            on_any(&a.endpoints, |mut c| async move { c.lease_revoke(LeaseRevokeRequest { id }).await }).await?;
            println!("lease {id:x} revoked");
        }
        LeaseCommand::Ttl(a) => {
            let id = parse_id(&a.id)?;
            let keys = a.keys;
            let r = on_any(&a.endpoints, |mut c| async move { c.lease_time_to_live(LeaseTimeToLiveRequest { id, keys }).await }).await?;
            if r.ttl < 0 {
                println!("lease {id:x} already expired");
            } else {
                let mut line = format!("lease {id:x} granted with TTL({}s), remaining({}s)", r.granted_ttl, r.ttl);
                if keys {
                    let names: Vec<String> = r.keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
                    line.push_str(&format!(", attached keys([{}])", names.join(" ")));
                }
                println!("{line}");
            }
        }
        LeaseCommand::List(a) => {
            let r = on_any(&a.endpoints, |mut c| async move { c.lease_leases(LeaseLeasesRequest {}).await }).await?;
            println!("found {} leases", r.leases.len());
            for l in r.leases {
                println!("{:x}", l.id);
            }
        }
        LeaseCommand::KeepAlive(a) => keep_alive(a).await?,
    }
    Ok(())
}

/// `wasmraft lease keep-alive`: prints each answer; fails once the lease is
/// gone or no endpoint renewed it for `--timeout`.
async fn keep_alive(a: KeepAliveArgs) -> anyhow::Result<()> {
    let id = parse_id(&a.id)?;
    let endpoints = a.endpoints.channels().await?;
    let outcome = keep_alive_loop(&endpoints, id, a.endpoints.timeout, |ttl| {
        crate::client_cmds::print_line(format!("lease {id:x} keepalived with TTL({ttl})").as_bytes()) && !a.once
    })
    .await;
    match outcome {
        Ok(()) => Ok(()),
        Err(KeepAliveEnd::Expired) => bail!("lease {id:x} expired or was revoked"),
        Err(KeepAliveEnd::Unreachable(d)) => bail!("no endpoint answered keep-alives for lease {id:x} for {d:?}"),
    }
}

/// Why keep-alives stopped.
pub enum KeepAliveEnd {
    /// The lease is gone (expired or revoked).
    Expired,
    /// No endpoint renewed it for this long.
    Unreachable(Duration),
}

/// Keeps lease `id` alive every third of its TTL, as etcd's client does, on
/// one endpoint's stream; a stream that breaks resumes on the next endpoint.
/// `on_answer(ttl)` says whether to go on. Ends when it says stop, the
/// lease is gone, or no endpoint renewed it for `give_up`.
pub async fn keep_alive_loop(
    endpoints: &[(String, Channel)],
    id: i64,
    give_up: Duration,
    mut on_answer: impl FnMut(i64) -> bool,
) -> Result<(), KeepAliveEnd> {
    let mut turn = 0usize;
    let mut renewed = std::time::Instant::now();
    loop {
        let (name, channel) = &endpoints[turn % endpoints.len()];
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        match LeaseClient::new(channel.clone()).lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx)).await {
            Ok(stream) => {
                let mut responses = stream.into_inner();
                while tx.send(LeaseKeepAliveRequest { id }).await.is_ok() {
                    match responses.message().await {
                        Ok(Some(r)) if r.ttl <= 0 => return Err(KeepAliveEnd::Expired),
                        Ok(Some(r)) => {
                            renewed = std::time::Instant::now();
                            if !on_answer(r.ttl) {
                                return Ok(());
                            }
                            tokio::time::sleep(Duration::from_millis((r.ttl.max(1) as u64 * 1000) / 3)).await;
                        }
                        Ok(None) | Err(_) => break,
                    }
                }
                eprintln!("keep-alive stream on {name} ended; resuming on the next endpoint");
            }
            Err(s) => eprintln!("keep-alive on {name}: {}; trying the next endpoint", s.message()),
        }
        if renewed.elapsed() > give_up {
            return Err(KeepAliveEnd::Unreachable(give_up));
        }
        turn += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
