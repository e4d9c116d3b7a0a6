//! `wasmraft plugin deploy|info|new` and `wasmraft check`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use tonic::transport::Channel;
use wasmraft_proto::v1::client_client::ClientClient;
use wasmraft_proto::v1::plugins_client::PluginsClient;
use wasmraft_proto::v1::{CheckHashesRequest, DeployRequest, PluginInfoRequest, StatusRequest};

use crate::client_cmds::{Endpoints, StatusArgs, status_error};

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Deploy FILE.wasm through the log: every replica validates it, runs its
    /// migrate export and switches to it at the same index. A bad binary is
    /// refused and changes nothing.
    #[command(after_help = "Examples:\n  wasmraft plugin deploy target/wasm32-unknown-unknown/release/tally.wasm\n  wasmraft plugin deploy --force plugins/target/components/counter.wasm   # replaces a plugin of another name")]
    Deploy(DeployArgs),
    /// Show the running plugin: name, version, hash, the index it was
    /// deployed at.
    #[command(after_help = "Example:\n  wasmraft plugin info --endpoints 127.0.0.1:7380")]
    Info(StatusArgs),
    /// Write a new Rust plugin crate from the SDK's template.
    #[command(after_help = "Example:\n  wasmraft plugin new tally      # prints how to build, test and deploy it")]
    New(crate::plugin_new::NewArgs),
}

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// The plugin: a component, or a core module built with wasmraft-sdk.
    pub file: PathBuf,
    /// Deploy even if the plugin's name differs from the running one's: it
    /// takes over the keyspace the running plugin wrote.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// `--timeout` is how long to wait for every node to report its hash.
    #[command(flatten)]
    pub endpoints: Endpoints,
}

fn plugins(channel: Channel) -> PluginsClient<Channel> {
    PluginsClient::new(channel).max_encoding_message_size(64 << 20)
}

pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Deploy(a) => deploy(a).await,
        PluginCommand::Info(a) => info(a).await,
        PluginCommand::New(a) => crate::plugin_new::run(&a).map_err(|e| anyhow::anyhow!(e)),
    }
}

async fn deploy(a: DeployArgs) -> anyhow::Result<()> {
    let wasm =
        std::fs::read(&a.file).with_context(|| format!("cannot read {}", a.file.display()))?;
    eprintln!(
        "deploying {} ({} bytes); every replica validates and compiles it…",
        a.file.display(),
        wasm.len()
    );
    let started = Instant::now();
    let r = a
        .endpoints
        .on_leader(|c| {
            let wasm = wasm.clone();
            async move { plugins(c).deploy(DeployRequest { wasm, force: a.force }).await }
        })
        .await?;
    let p = r.plugin.unwrap_or_default();
    println!(
        "deployed {} {} (sha256 {}) at index {} in {:.1?}",
        p.name,
        p.version,
        p.sha256,
        r.deployed_at,
        started.elapsed()
    );
    Ok(())
}

async fn info(a: StatusArgs) -> anyhow::Result<()> {
    let (_, channel) = a.endpoints.channels().await?.remove(0);
    let r = plugins(channel)
        .info(PluginInfoRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    let p = r.plugin.unwrap_or_default();
    println!("name:        {}", p.name);
    println!("version:     {}", p.version);
    println!(
        "sdk:         {}",
        if p.sdk_version.is_empty() {
            "-"
        } else {
            &p.sdk_version
        }
    );
    println!("sha256:      {}", p.sha256);
    if r.deployed_at == 0 {
        println!("deployed at: - (the plugin the node was started with)");
    } else {
        println!("deployed at: index {}", r.deployed_at);
    }
    println!(
        "migrate:     {}",
        if r.migrates { "exported" } else { "no" }
    );
    println!(
        "wasi:        {}",
        if r.wasi {
            "deterministic WASI linked"
        } else {
            "none"
        }
    );
    // An older node says nothing: it runs 0.1.0 plugins only.
    let contract = if r.contract.is_empty() { "0.1.0" } else { &r.contract };
    println!("contract:    wasmraft:plugin@{contract}{}", if contract == "0.1.0" { "" } else { " (timers)" });
    Ok(())
}

/// Asks every replica to hash its keyspace at one index, then reads each
/// endpoint's hash and says which nodes disagree.
pub async fn check(a: CheckArgs) -> anyhow::Result<()> {
    let index = a
        .endpoints
        .on_leader(|c| async move { plugins(c).check_hashes(CheckHashesRequest {}).await })
        .await?
        .index;
    let tls = a.endpoints.tls()?;
    println!("hash check at index {index}");
    let deadline = Instant::now() + a.endpoints.timeout;
    let mut rows = Vec::new();
    for e in &a.endpoints.endpoints {
        let row = loop {
            let status = match wasmraft_client::endpoint(e, tls.as_ref())?.connect().await {
                Ok(c) => ClientClient::new(c)
                    .status(StatusRequest {})
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|s| s.message().to_string()),
                Err(err) => Err(wasmraft_client::error_chain(&err)),
            };
            match status {
                Ok(s)
                    if s.hash_index >= index
                        && (s.hash_index > index || !s.hash_vs_leader.is_empty()) =>
                {
                    break Ok(s);
                }
                Ok(s) if Instant::now() >= deadline => break Ok(s),
                Err(err) if Instant::now() >= deadline => break Err(err),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        rows.push((e.clone(), row));
    }
    let mut bad = 0;
    let mut by_hash: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for (endpoint, row) in &rows {
        match row {
            Ok(s) if s.hash_index == index => {
                by_hash.entry(s.hash_sha256.clone()).or_default().push(s.id);
                let verdict = if s.hash_vs_leader.is_empty() {
                    "leader's hash not applied yet"
                } else {
                    &s.hash_vs_leader
                };
                println!("node {} ({endpoint}): {} {verdict}", s.id, s.hash_sha256);
                bad += usize::from(s.hash_vs_leader == "mismatch");
            }
            Ok(s) => {
                println!(
                    "node {} ({endpoint}): no hash at index {index} yet (latest at {})",
                    s.id, s.hash_index
                );
                bad += 1;
            }
            Err(err) => {
                println!("{endpoint}: unreachable: {err}");
                bad += 1;
            }
        }
    }
    if by_hash.len() > 1 {
        let majority = by_hash.values().map(Vec::len).max().unwrap_or(0);
        for (hash, nodes) in &by_hash {
            if nodes.len() < majority {
                println!("odd one out: node(s) {nodes:?} with hash {hash}");
            }
        }
        bail!("replicas disagree on the keyspace at index {index}");
    }
    if bad > 0 {
        bail!("{bad} node(s) could not confirm their keyspace hash");
    }
    println!("all {} node(s) agree", rows.len());
    Ok(())
}
