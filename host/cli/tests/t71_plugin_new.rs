//! `wasmraft plugin new` writes a crate that builds for wasm32 as it is,
//! and the plugin it builds runs on a node and answers.
//!
//! Builds with the guest toolchain as `cargo xtask plugins` does
//! (`WASMRAFT_GUEST_CARGO`, `WASMRAFT_GUEST_CARGO_ARGS`; `scripts/setup.sh`
//! prints them), into `plugins/target/template-test` so that reruns reuse the
//! compiled dependencies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn success(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `cargo build --release --target wasm32-unknown-unknown` in `dir`, with
/// the guest toolchain.
fn build_for_wasm32(dir: &Path) {
    let repo = repo();
    let guest_cargo = std::env::var("WASMRAFT_GUEST_CARGO").ok();
    let mut cmd = Command::new(guest_cargo.as_deref().unwrap_or("cargo"));
    cmd.current_dir(dir)
        .args(["build", "--release", "--target", "wasm32-unknown-unknown"])
        .env("CARGO_TARGET_DIR", repo.join("plugins/target/template-test"))
        // Flags meant for the host build are not for the guest.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET");
    if let Some(bin_dir) = guest_cargo.as_deref().and_then(|c| Path::new(c).parent()) {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", bin_dir.display()))
            .env("RUSTC", bin_dir.join("rustc"))
            .env("RUSTC_BOOTSTRAP", "1");
    }
    if let Ok(extra) = std::env::var("WASMRAFT_GUEST_CARGO_ARGS") {
        cmd.args(extra.split_whitespace());
    }
    success("building the new plugin for wasm32", cmd.output().expect("run the guest cargo"));
}

/// A single-node `wasmraft run`, killed when dropped.
struct Node {
    child: Child,
    endpoint: String,
}

impl Node {
    fn start(dir: &Path, plugin: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let endpoint = format!("127.0.0.1:{port}");
        let config = dir.join("node.toml");
        // TOML literal strings: the paths are used as they are.
        std::fs::write(
            &config,
            format!(
                "id = 1\ndata_dir = '{}'\nlisten = \"{endpoint}\"\npeer_listen = \"127.0.0.1:0\"\nplugin = '{}'\n[raft]\ntick_ms = 20\n",
                dir.join("data").display(),
                plugin.display()
            ),
        )
        .unwrap();
        let child =
            Command::new(BIN).args(["run", "--config"]).arg(&config).stderr(Stdio::null()).spawn().expect("spawn");
        let node = Node { child, endpoint };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = node.cli(&["status"]);
            if String::from_utf8_lossy(&status.stdout).contains("leader:   1") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the node did not elect itself: {}",
                String::from_utf8_lossy(&status.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        node
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", &self.endpoint).output().unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_new_plugin_builds_runs_and_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let crate_dir = tmp.path().join("demo");
    let sdk = repo().join("sdk/guest");
    let out = Command::new(BIN)
        .args(["plugin", "new", "demo", "--dir"])
        .arg(&crate_dir)
        .arg("--sdk")
        .arg(&sdk)
        .output()
        .unwrap();
    success("wasmraft plugin new", out);
    for file in ["Cargo.toml", "src/lib.rs", "README.md", ".cargo/config.toml"] {
        assert!(crate_dir.join(file).is_file(), "{file} was not written");
    }
    // The guest workspace's lockfile pins the same versions, so the build
    // needs no registry lookup and reuses compiled dependencies.
    std::fs::copy(repo().join("plugins/Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    build_for_wasm32(&crate_dir);
    let module = repo().join("plugins/target/template-test/wasm32-unknown-unknown/release/demo.wasm");
    assert!(module.is_file(), "{} was not built", module.display());

    let node = Node::start(tmp.path(), &module);
    let status = success("status", node.cli(&["status"]));
    assert!(status.contains("plugin:   demo 0.1.0 (sdk 0.1.0"), "{status}");
    assert_eq!(success("propose", node.cli(&["propose", "add apples 3"])), "3\n");
    assert_eq!(success("propose", node.cli(&["propose", "add apples 2"])), "5\n");
    assert_eq!(success("propose", node.cli(&["propose", "add pears 1"])), "1\n");
    assert_eq!(success("query", node.cli(&["query", "apples"])), "5\n");
    assert_eq!(success("query", node.cli(&["query", ""])), "{\"apples\":5,\"pears\":1}\n");
    let bad = node.cli(&["propose", "add apples many"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a number"), "{}", String::from_utf8_lossy(&bad.stderr));
    assert_eq!(success("query", node.cli(&["query", "apples"])), "5\n");

    // Refuses to write over what it created.
    let again = Command::new(BIN).args(["plugin", "new", "demo", "--dir"]).arg(&crate_dir).output().unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
}
