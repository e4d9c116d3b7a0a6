//! `wasmraft-bench keep-alive`: what keeping many etcd leases alive costs.
//! It grants `--leases` leases of `--ttl` seconds through etcd's Lease API,
//! then for `--duration` sends each a keep-alive every third of its TTL (as
//! etcd's client does), spread evenly, over `--conns` keep-alive streams.
//! It reports keep-alives answered per second, any lease lost, and, measured
//! around the keep-alive phase alone, the log entries per second of the
//! first endpoint (give the leader's) and the CPU seconds per second of the
//! processes `--cpu-pids` names (read from /proc: a loopback benchmark).
//! It speaks only etcd's API, so it drives an etcd cluster the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use tonic::transport::Channel;
use wasmraft_proto::etcdserverpb::lease_client::LeaseClient;
use wasmraft_proto::etcdserverpb::maintenance_client::MaintenanceClient;
use wasmraft_proto::etcdserverpb::{LeaseGrantRequest, LeaseKeepAliveRequest, StatusRequest};

#[derive(Args, Debug)]
pub struct KeepAliveArgs {
    /// Leases to grant and keep alive.
    #[arg(long, default_value_t = 10_000)]
    pub leases: usize,
    /// Their TTL, in seconds.
    #[arg(long, default_value_t = 5)]
    pub ttl: i64,
    /// How long to keep them alive (`30s`, `2m`).
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    pub duration: Duration,
    /// Processes whose CPU to report (the servers, on this machine).
    #[arg(long, value_delimiter = ',')]
    pub cpu_pids: Vec<u32>,
}

/// User plus system CPU seconds of `pids`.
fn cpu_seconds(pids: &[u32]) -> anyhow::Result<f64> {
    let ticks = 100.0; // USER_HZ on Linux
    let mut total = 0u64;
    for pid in pids {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).with_context(|| format!("reading /proc/{pid}/stat"))?;
        let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        total += fields.get(11).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        total += fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok(total as f64 / ticks)
}

/// The member's Raft commit index, from etcd's Maintenance.Status (which
/// both systems serve).
async fn last_index(channel: &Channel) -> anyhow::Result<u64> {
    let status = MaintenanceClient::new(channel.clone()).status(StatusRequest {}).await?.into_inner();
    Ok(status.raft_index)
}

pub async fn run(channels: Vec<Channel>, a: &KeepAliveArgs, quiet: bool) -> anyhow::Result<()> {
    if a.leases == 0 || a.ttl <= 0 {
        bail!("--leases and --ttl must be at least 1");
    }
    // Grant, over every connection at once.
    let started = Instant::now();
    let mut grants = Vec::new();
    let per_conn = a.leases.div_ceil(channels.len());
    for (i, channel) in channels.iter().enumerate() {
        let n = per_conn.min(a.leases.saturating_sub(i * per_conn));
        let (channel, ttl) = (channel.clone(), a.ttl);
        grants.push(tokio::spawn(async move {
            let mut client = LeaseClient::new(channel);
            let mut ids = Vec::with_capacity(n);
            for _ in 0..n {
                ids.push(client.lease_grant(LeaseGrantRequest { ttl, id: 0 }).await?.into_inner().id);
            }
            Ok::<_, tonic::Status>(ids)
        }));
    }
    let mut per_stream = Vec::new();
    for g in grants {
        per_stream.push(g.await?.context("granting leases")?);
    }
    if !quiet {
        eprintln!("wasmraft-bench: granted {} leases of {} s in {:.1} s", a.leases, a.ttl, started.elapsed().as_secs_f64());
    }

    // Keep them alive.
    let (answered, lost, sent) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let cpu0 = cpu_seconds(&a.cpu_pids)?;
    let index0 = last_index(&channels[0]).await?;
    let phase = Instant::now();
    let interval = Duration::from_millis(a.ttl as u64 * 1000 / 3);
    let mut streams = Vec::new();
    for (channel, ids) in channels.iter().zip(per_stream) {
        let (tx, rx) = tokio::sync::mpsc::channel::<LeaseKeepAliveRequest>(4096);
        let (sent, duration) = (sent.clone(), a.duration);
        // The sender starts first: a server may hold its response headers
        // until its first answer (etcd's does), so the call itself waits
        // for the first keep-alive.
        streams.push(tokio::spawn(async move {
            // Lease i of n goes at offsets i/n of the interval.
            let n = ids.len().max(1) as u32;
            let step = interval / n;
            let mut next = tokio::time::Instant::now();
            'run: loop {
                for id in &ids {
                    tokio::time::sleep_until(next).await;
                    next += step;
                    if phase.elapsed() >= duration || tx.send(LeaseKeepAliveRequest { id: *id }).await.is_err() {
                        break 'run;
                    }
                    sent.fetch_add(1, Relaxed);
                }
            }
        }));
        let mut responses = LeaseClient::new(channel.clone())
            .lease_keep_alive(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        let (answered, lost) = (answered.clone(), lost.clone());
        streams.push(tokio::spawn(async move {
            while let Ok(Some(r)) = responses.message().await {
                if r.ttl > 0 { answered.fetch_add(1, Relaxed) } else { lost.fetch_add(1, Relaxed) };
            }
        }));
    }
    let mut last = (Instant::now(), 0);
    while phase.elapsed() < a.duration {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if !quiet {
            let done = answered.load(Relaxed);
            let rate = (done - last.1) as f64 / last.0.elapsed().as_secs_f64();
            eprintln!("  {:>4.0} s  {done} keep-alives answered ({rate:.0}/s), {} lost", phase.elapsed().as_secs_f64(), lost.load(Relaxed));
            last = (Instant::now(), done);
        }
    }
    let took = phase.elapsed().as_secs_f64();
    let cpu = cpu_seconds(&a.cpu_pids)? - cpu0;
    let entries = last_index(&channels[0]).await? - index0;
    // Answers still in flight arrive within a tick.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for s in &streams {
        s.abort();
    }
    let (answered, lost, sent) = (answered.load(Relaxed), lost.load(Relaxed), sent.load(Relaxed));
    println!("leases: {}, ttl: {} s, keep-alives every {} ms each", a.leases, a.ttl, interval.as_millis());
    println!("keep-alives: {sent} sent, {answered} answered ({:.0}/s), {lost} lost (TTL 0: the lease had expired)", answered as f64 / took);
    println!("log entries on the first endpoint: {entries} ({:.1}/s, {:.0} keep-alives per entry)", entries as f64 / took, answered as f64 / entries.max(1) as f64);
    if !a.cpu_pids.is_empty() {
        println!("server CPU ({:?}): {cpu:.2} s in {took:.1} s ({:.1}% of a core; {:.0} keep-alives per CPU-second)", a.cpu_pids, 100.0 * cpu / took, answered as f64 / cpu.max(0.001));
    }
    if lost > 0 {
        bail!("{lost} keep-alives found their lease expired");
    }
    Ok(())
}
