use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use wasmraft_node::{KV_PLUGIN, NodeConfig};

#[derive(Args, Debug)]
pub struct DevArgs {
    /// Keep state here (a restart finds it again) instead of a temporary
    /// directory that is removed on exit.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The client API address.
    #[arg(long, default_value = crate::DEFAULT_ENDPOINT)]
    pub listen: SocketAddr,
    /// Run this plugin (`.wasm` component, or a core module built with
    /// wasmraft-sdk) instead of the built-in KV plugin.
    #[arg(long)]
    pub plugin: Option<PathBuf>,
}

pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let temp;
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => {
            temp = tempfile::Builder::new().prefix("wasmraft-dev-").tempdir()?;
            temp.path().to_path_buf()
        }
    };
    let plugin = match &args.plugin {
        Some(p) => std::fs::read(p).with_context(|| format!("cannot read plugin {}", p.display()))?,
        None => KV_PLUGIN.to_vec(),
    };
    let config = NodeConfig {
        id: 1,
        data_dir: data_dir.join("node-1"),
        // A single node elects itself after one election timeout: keep it short.
        tick_interval: Duration::from_millis(50),
        ..NodeConfig::default()
    };
    let plugin_name = if args.plugin.is_some() { "custom" } else { "kv (built in)" };
    crate::run::serve(config, &plugin, args.listen, |addr| {
        println!("wasmraft dev: node 1 ready, plugin {plugin_name}");
        println!("  endpoint: {addr}");
        println!("  data:     {}", data_dir.display());
        println!("  try:      wasmraft put a 1 && wasmraft get a");
        println!("  stop:     Ctrl-C");
    })
    .await
}
