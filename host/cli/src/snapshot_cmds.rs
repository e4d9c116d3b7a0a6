//! `wasmraft snapshot restore`: a new cluster's data directory from a backup
//! (`etcdctl snapshot save`, served by any member of a KV cluster).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use wasmraft_raft::{Membership, NodeId};
use wasmraft_storage::{Storage, StorageOptions};

use crate::config::FileConfig;

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Build a node's data directory for a new cluster from a backup file.
    ///
    /// Run it once per member of the new cluster, each with its own
    /// configuration; all of them start from the backup's keyspace and
    /// plugin, with the members of `[peers]` and an empty log. Then start
    /// each with `wasmraft run --config ...`.
    ///
    /// Example:
    ///   etcdctl --endpoints=127.0.0.1:7379 snapshot save backup.db
    ///   wasmraft snapshot restore backup.db --config node1.toml
    Restore(RestoreArgs),
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup file (from `etcdctl snapshot save` against a member).
    pub file: PathBuf,
    /// The configuration of the node to restore: its id, `data_dir` (which
    /// must not exist yet or be empty), `[peers]` (the new cluster's
    /// members) and optional `cluster_id`/`cluster_token`.
    #[arg(long)]
    pub config: PathBuf,
}

pub fn run(command: SnapshotCommand) -> anyhow::Result<()> {
    match command {
        SnapshotCommand::Restore(a) => restore(&a),
    }
}

fn restore(args: &RestoreArgs) -> anyhow::Result<()> {
    let file = FileConfig::load(&args.config)?;
    let peers = file.peer_addresses()?;
    anyhow::ensure!(!file.join, "a restored cluster starts from its backup: remove `join = true` from {}", args.config.display());
    let digest = wasmraft_storage::verify_backup(&args.file).with_context(|| format!("cannot restore {}", args.file.display()))?;
    let data = &file.data_dir;
    if data.exists() && std::fs::read_dir(data).map(|mut d| d.next().is_some()).unwrap_or(true) {
        anyhow::bail!("{} exists and is not empty: restore into a new data directory", data.display());
    }
    let voters: Vec<u64> = if peers.is_empty() { vec![file.id] } else { peers.keys().copied().collect() };
    // Every member that restores the same backup for the same members gets
    // the same cluster id, unless one is configured.
    let cluster_id = match file.cluster_id()? {
        0 => u64::from_be_bytes(digest[..8].try_into().expect("8 bytes")).max(1),
        id => id,
    };
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let result = (|| {
        let storage = Storage::open(data, file.id, StorageOptions { sync_log: true, ..Default::default() })?;
        storage.restore_backup(&args.file, &Membership::new(voters.iter().copied().map(NodeId)), cluster_id)
    })();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(data);
            return Err(anyhow::anyhow!(e)).with_context(|| format!("cannot restore {}", args.file.display()));
        }
    };
    println!(
        "restored {} keys ({} bytes, taken at index {}) into {} for node {} of cluster {} (members {:?}); start it with: wasmraft run --config {}",
        summary.keys,
        summary.bytes,
        summary.index,
        data.display(),
        file.id,
        wasmraft_node::format_cluster_id(cluster_id),
        voters,
        args.config.display()
    );
    Ok(())
}
