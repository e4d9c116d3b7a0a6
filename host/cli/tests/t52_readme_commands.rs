//! The README's walkthroughs run as written, against the quick start's
//! cluster: `wasmraft dev` on its default ports, as `./scripts/dev.sh`
//! starts it. Each command of a block runs in a shell from the repository's
//! root, with `target/release/wasmraft` standing for the binary under test
//! and `etcdctl` for the pinned one the test setup builds. A command must
//! succeed; where its comment is one word (`# OK`, `# 1 (keys deleted)`),
//! that word is its output; a `watch` must still be watching a second
//! later.
//!
//! The "Run nodes from config files" walkthrough runs too, in a copy of
//! `examples/` (its data directories are relative to the repository root):
//! the single node and the three-node script from their config files, then
//! a fourth node joins and the membership commands run as written.
//!
//! Not run here, each run elsewhere: the two set-up commands (CI runs the
//! test command, which ends by running `./scripts/dev.sh` and the
//! `cargo install` line as written and putting and getting through the
//! clusters they start: both build with cargo, which cannot run inside
//! `cargo test`), and `cargo xtask plugins` (the test command runs it
//! before the tests). The README's
//! `plugin new` runs here and its crate is removed (t71 builds one).

mod cluster;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cluster::docs::{block_after, promised, split_comment};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs one README line from the repository root.
fn run(line: &str) {
    let (command, comment) = split_comment(line);
    let etcdctl = cluster::etcdctl::etcdctl_path();
    let shell = command.replace("target/release/wasmraft", BIN);
    let shell = match shell.strip_prefix("etcdctl ") {
        Some(rest) => format!("{} {rest}", etcdctl.display()),
        None => shell,
    };
    // A watch runs until stopped: the shell hands over to it (exec), so
    // that stopping the child stops the watch itself.
    let watch = command.contains(" watch ");
    let shell = if watch { format!("exec {shell}") } else { shell };
    let mut child = Command::new("sh")
        .args(["-c", &shell])
        .current_dir(root())
        .env_remove("WASMRAFT_ENDPOINTS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if watch {
        std::thread::sleep(Duration::from_secs(1));
        let early = child.try_wait().unwrap();
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        assert!(early.is_none(), "{command}: stopped watching ({early:?}): {}", String::from_utf8_lossy(&out.stderr));
        return;
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{command}: {:?}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    if let Some(expected) = comment.and_then(promised) {
        assert_eq!(stdout.trim_end(), expected, "{command}");
    }
    println!("ran: {command}");
}

/// `wasmraft dev` on the quick start's default addresses, stopped as the
/// quick start says (Ctrl-C): by `stop`, or on drop.
struct QuickStart {
    child: std::process::Child,
    /// The data directory it printed, once it did.
    data: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl QuickStart {
    fn start() -> QuickStart {
        // The quick start's script ends by starting the cluster this way.
        let script = std::fs::read_to_string(root().join("scripts/dev.sh")).unwrap();
        assert!(script.trim_end().ends_with("/release/wasmraft\" dev \"$@\""), "scripts/dev.sh changed:\n{script}");
        QuickStart::start_with(&["dev"])
    }

    /// `wasmraft ARGS` from the repository root, on the quick start's ports.
    fn start_with(args: &[&str]) -> QuickStart {
        for port in [7379, 7380, 7381, 7479, 7480, 7481] {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
                "port {port} is taken: the README's commands need the quick start's ports (is a `wasmraft dev` running?)"
            );
        }
        let mut child =
            Command::new(BIN).args(args).current_dir(root()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let data = std::sync::Arc::new(std::sync::Mutex::new(None));
        let (lines, seen) = (child.stdout.take().unwrap(), data.clone());
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(lines).lines().map_while(Result::ok) {
                if let Some(dir) = line.trim().strip_prefix("data:") {
                    *seen.lock().unwrap() = Some(dir.trim().to_string());
                }
            }
        });
        let quick = QuickStart { child, data };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Command::new(BIN).args(["status", "--timeout", "1s"]).output().unwrap().status.success() {
            assert!(Instant::now() < deadline, "wasmraft dev did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        quick
    }
}

impl QuickStart {
    /// Ctrl-C: the cluster exits with success and removes its temporary
    /// data directory (removed under the nodes' open RocksDB, 200 MB of it
    /// stayed behind after every run of this test).
    fn stop(mut self) {
        let data = self.data.lock().unwrap().clone().expect("wasmraft dev printed its data directory");
        let status = cluster::interrupt(&mut self.child, Duration::from_secs(10))
            .expect("wasmraft dev exits within 10 s of Ctrl-C");
        assert!(status.success(), "exit status {status}");
        assert!(!Path::new(&data).exists(), "{data} left behind");
    }
}

impl Drop for QuickStart {
    fn drop(&mut self) {
        if self.child.try_wait().unwrap().is_none() && cluster::interrupt(&mut self.child, Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[test]
fn the_readme_walkthroughs_run_as_written() {
    let _serial = cluster::serial(); // the quick start's ports
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let quick_start = block_after(&readme, "## Quick start");
    assert_eq!(quick_start.len(), 2, "exactly two set-up commands: {quick_start:?}");
    assert!(quick_start[0].starts_with("./scripts/dev.sh") && quick_start[1].starts_with("./scripts/test.sh"));

    let cluster = QuickStart::start();
    let walkthrough = block_after(&readme, "With the cluster running, in another shell");
    assert!(walkthrough.len() >= 10, "{walkthrough:?}");
    for line in &walkthrough {
        run(line);
    }
    for line in &block_after(&readme, "`wasmraft dev` running:") {
        run(line);
    }
    // Last: it replaces the KV plugin. The counter module is built by
    // `cargo xtask plugins`, as by the README's build line.
    for line in block_after(&readme, "Deploy a new plugin to a running cluster") {
        if !line.contains("plugin new") {
            run(&line);
            continue;
        }
        // It writes a crate into the checkout (t71 builds and runs one):
        // checked, then removed.
        let (command, _) = split_comment(&line);
        let name = command.split_whitespace().nth(3).unwrap();
        let crate_dir = root().join(name);
        assert!(!crate_dir.exists(), "{} exists: the README's `plugin new` would not write over it", crate_dir.display());
        run(&line);
        let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
        std::fs::remove_dir_all(&crate_dir).unwrap();
        assert!(manifest.contains("wasmraft-sdk") && manifest.contains("sdk/guest"), "{manifest}");
    }
    cluster.stop();
}

/// The counter plugin's block: built by `cargo xtask plugins` (the test
/// command's own line, before the tests), then run as written.
#[test]
fn the_counter_plugin_walkthrough_runs_as_written() {
    let _serial = cluster::serial(); // the quick start's ports
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let block = block_after(&readme, "Build it (with every plugin of `plugins/`");
    assert_eq!(block[0], "cargo xtask plugins", "{block:?}");
    let test_sh = std::fs::read_to_string(root().join("scripts/test.sh")).unwrap();
    assert!(test_sh.lines().any(|l| l.trim() == block[0]), "scripts/test.sh does not run {:?}", block[0]);
    let (dev, _) = split_comment(&block[1]);
    assert!(dev.starts_with("target/release/wasmraft dev --plugin "), "{dev}");
    let args: Vec<&str> = dev.split_whitespace().skip(1).collect();
    let _cluster = QuickStart::start_with(&args);
    for line in &block[2..] {
        run(line);
    }
}

/// A server a README line starts (`wasmraft run`, `run.sh`), in its own
/// process group, stopped as Ctrl-C would stop it.
struct Server(std::process::Child);

impl Server {
    fn start(line: &str, dir: &Path) -> Server {
        use std::os::unix::process::CommandExt;
        let (command, _) = split_comment(line);
        let shell = command.replace("target/release/wasmraft", BIN);
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("servers.log")).unwrap();
        let child = Command::new("sh")
            .args(["-c", &format!("exec {shell}")])
            .current_dir(dir)
            .env("WASMRAFT_BIN", BIN)
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-INT", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

/// `wasmraft ARGS -w json` as JSON (`None` if it fails).
fn json(args: &[&str]) -> Option<serde_json::Value> {
    let out = Command::new(BIN).args(args).args(["-w", "json"]).output().unwrap();
    out.status.success().then(|| serde_json::from_slice(&out.stdout).unwrap())
}

/// Waits until `wasmraft status` at `endpoint` answers with a leader known;
/// on failure shows what the servers started in `dir` logged.
fn wait_for_leader(endpoint: &str, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = json(&["status", "--timeout", "1s", "--endpoints", endpoint]);
        if status.is_some_and(|s| s["leader_id"].as_u64().is_some_and(|l| l > 0)) {
            return;
        }
        let log = || std::fs::read_to_string(dir.join("servers.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "no leader at {endpoint}; the servers logged:\n{}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_config_file_walkthrough_runs_as_written() {
    let _serial = cluster::serial(); // the examples' ports are the quick start's
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let install = block_after(&readme, "## Run nodes from config files");
    assert!(install.len() == 1 && install[0].contains("cargo install --locked --path host/cli"), "{install:?}");
    let runs = block_after(&readme, "cargo install --locked --path host/cli");
    assert_eq!(runs.len(), 2, "{runs:?}");

    // A copy of the examples: their data directories are relative.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("examples/three-node")).unwrap();
    std::fs::copy(root().join("examples/single-node.toml"), dir.path().join("examples/single-node.toml")).unwrap();
    for file in ["node1.toml", "node2.toml", "node3.toml", "run.sh"] {
        let from = root().join("examples/three-node").join(file);
        std::fs::copy(from, dir.path().join("examples/three-node").join(file)).unwrap();
    }

    // The single node, then the three from their config files.
    {
        assert!(runs[0].contains("examples/single-node.toml"), "{runs:?}");
        let _node = Server::start(&runs[0], dir.path());
        wait_for_leader("127.0.0.1:7379", dir.path());
        run("target/release/wasmraft put a 1  # OK");
        run("target/release/wasmraft get a  # 1");
    }
    assert!(runs[1].starts_with("examples/three-node/run.sh"), "{runs:?}");
    let _three = Server::start(&runs[1], dir.path());
    wait_for_leader("127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381", dir.path());
    run("target/release/wasmraft put b 2  # OK");

    // A fourth node, started with `join = true` and a [peers] table with the
    // members and itself, joins by the README's membership commands.
    let peers: String = (1..=4).map(|i| format!("{i} = \"127.0.0.1:{}\"\n", 7478 + i)).collect();
    let config = format!(
        "id = 4\ndata_dir = \"wasmraft-data/three-node/node-4\"\nlisten = \"127.0.0.1:7382\"\njoin = true\n\n[peers]\n{peers}"
    );
    std::fs::write(dir.path().join("node4.toml"), config).unwrap();
    let _fourth = Server::start("target/release/wasmraft run --config node4.toml", dir.path());
    let membership = block_after(&readme, "then, giving its peer\naddress:");
    assert_eq!(membership.len(), 4, "{membership:?}");
    for line in &membership {
        if line.contains("member promote") {
            // "wait until its MATCHED catches up": node 4 has applied what
            // the cluster committed.
            let commit = json(&["status"]).unwrap()["commit_index"].as_u64().unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let s = json(&["status", "--endpoints", "127.0.0.1:7382"]);
                if s.is_some_and(|s| s["applied_index"].as_u64().is_some_and(|a| a >= commit)) {
                    break;
                }
                assert!(Instant::now() < deadline, "node 4 did not catch up to {commit}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        run(line);
        if line.contains("member promote") {
            // Done means done: the leader left the joint configuration
            // before the command returned.
            let leader = json(&["status"]).unwrap()["leader_id"].as_u64().unwrap();
            let members = json(&["members", "--endpoints", &format!("127.0.0.1:{}", 7378 + leader)]).unwrap();
            let roles: Vec<(u64, String)> = members["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| (m["id"].as_u64().unwrap(), m["role"].as_str().unwrap().to_string()))
                .collect();
            assert!(roles.iter().all(|(_, r)| r == "voter"), "{roles:?}");
            assert!(roles.iter().any(|(id, _)| *id == 4), "{roles:?}");
        }
    }
    // Node 4 votes and node 1 is gone once the joint configuration the
    // removal went through is left; the cluster still writes.
    let deadline = Instant::now() + Duration::from_secs(20);
    let members = loop {
        let members = json(&["members", "--endpoints", "127.0.0.1:7380,127.0.0.1:7381,127.0.0.1:7382"]);
        if let Some(m) = members.filter(|m| m["removed"] == serde_json::json!([1])) {
            break m;
        }
        assert!(Instant::now() < deadline, "node 1 was not removed");
        std::thread::sleep(Duration::from_millis(100));
    };
    let role = |id: u64| members["members"].as_array().unwrap().iter().find(|m| m["id"] == id).map(|m| m["role"].clone());
    assert_eq!(role(4), Some(serde_json::json!("voter")), "{members:#}");
    assert_eq!(role(1), Some(serde_json::json!("removed")), "{members:#}");
    let out = Command::new(BIN).args(["put", "c", "3", "--endpoints", "127.0.0.1:7380,127.0.0.1:7381,127.0.0.1:7382"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn comments_promise_outputs_only_when_they_are_one_word() {
    assert_eq!(promised("OK"), Some("OK"));
    assert_eq!(promised("1 (keys deleted)"), Some("1"));
    assert_eq!(promised("a value from standard input (or --from-file PATH)"), None);
    assert_eq!(promised("role, term, commit/applied index"), None);
    assert_eq!(split_comment("x put a 1         # OK"), ("x put a 1", Some("OK")));
    assert_eq!(split_comment("x status"), ("x status", None));
}
