//! Backups through etcd's API and restore into a new cluster: `etcdctl
//! snapshot save` from one member of a running cluster, `wasmraft snapshot
//! restore` for each member of a new three-node cluster, which then serves
//! the same keys and the same history, and goes on from the backup's
//! revision. A damaged backup or a used data directory is refused.

mod cluster;

use std::process::Command;
use std::time::{Duration, Instant};

use cluster::etcdctl::*;
use cluster::*;

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_restores_into_a_new_cluster_that_goes_on_from_it() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("backup.db");
    let (keys, last) = {
        let cluster = Cluster::start(3).await;
        let all = cluster.endpoints(0).join(",");
        for i in 0..50 {
            ok(&all, &["put", &format!("app/{i:02}"), &format!("v{i}")]);
        }
        ok(&all, &["put", "app/00", "newer"]);
        ok(&all, &["del", "app/49"]);
        let last = revision(&ok(&all, &["get", "app/00", "-w", "json"]));
        let keys = ok(&all, &["get", "app/", "--prefix"]);
        let saved = ok(cluster.addr(cluster.ids()[1]), &["snapshot", "save", backup.to_str().unwrap()]);
        assert!(saved.contains("Snapshot saved at"), "{saved}");
        (keys, last)
    };
    let size = std::fs::metadata(&backup).unwrap().len();
    assert_eq!(size % 512, 32, "etcd's framing: a multiple of 512 and a SHA-256");

    // Three new members, each restored from the same file.
    let free = free_addrs(6);
    let peers: String = (1..=3).map(|id| format!("{id} = \"{}\"\n", free[2 + id])).collect();
    let config = |id: usize| {
        let path = dir.path().join(format!("new{id}.toml"));
        let text = format!(
            "id = {id}\ndata_dir = \"{}\"\nlisten = \"{}\"\npeer_listen = \"{}\"\n\n[peers]\n{peers}\n[raft]\ntick_ms = 20\nelection_ticks = 10\nheartbeat_ticks = 1\n",
            dir.path().join(format!("new{id}")).display(),
            free[id - 1],
            free[2 + id],
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let configs: Vec<_> = (1..=3).map(config).collect();
    let restore = |file: &std::path::Path, config: &std::path::Path| {
        Command::new(BIN).args(["snapshot", "restore"]).arg(file).arg("--config").arg(config).output().unwrap()
    };

    // A damaged copy is refused and leaves nothing behind.
    let mut bytes = std::fs::read(&backup).unwrap();
    bytes[100] ^= 0xff;
    let damaged = dir.path().join("damaged.db");
    std::fs::write(&damaged, &bytes).unwrap();
    let out = restore(&damaged, &configs[0]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("SHA-256 does not match"), "{err}");
    assert!(!dir.path().join("new1").exists());

    for config in &configs {
        let out = restore(&backup, config);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.starts_with("restored "), "{text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let again = restore(&backup, &configs[0]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"), "a used data directory is refused");

    let _nodes: Vec<ChildGuard> = configs
        .iter()
        .map(|c| ChildGuard(Command::new(BIN).args(["run", "--config"]).arg(c).stderr(std::process::Stdio::null()).spawn().unwrap()))
        .collect();
    let all = free[..3].join(",");
    let deadline = Instant::now() + Duration::from_secs(30);
    let restored = loop {
        let (success, out, _) = etcdctl(&all, &["get", "app/", "--prefix"], None);
        if success {
            break out;
        }
        assert!(Instant::now() < deadline, "the restored cluster does not serve");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(restored, keys, "the same keys and values");
    // Revisions go on from the backup's, and the history came along.
    let next = revision(&ok(&all, &["put", "after", "x", "-w", "json"]));
    assert_eq!(next, last + 1);
    assert_eq!(ok(&all, &["get", "app/00", "--print-value-only", &format!("--rev={last}")]), "newer\n");
    assert_eq!(ok(&all, &["get", "app/00", "--print-value-only", &format!("--rev={}", last - 2)]), "v0\n");
    assert_eq!(ok(&all, &["member", "list"]).lines().count(), 3);
    // The three restored replicas hold the same state.
    let check = Command::new(BIN).arg("check").env("WASMRAFT_ENDPOINTS", &all).output().unwrap();
    assert!(check.status.success(), "{}{}", String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
}
