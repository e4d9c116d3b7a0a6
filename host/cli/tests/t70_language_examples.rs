//! The C, Python and JavaScript example plugins (`examples/plugins/`, built
//! by `cargo xtask examples`) run in a real `wasmraft run` node and answer
//! `wasmraft propose` / `wasmraft query` as their READMEs say.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

fn component(name: &str) -> PathBuf {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components").join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run `cargo xtask examples` first (scripts/test.sh does)", path.display());
    path
}

/// One `wasmraft run` process with `plugin` set; killed when dropped. Its
/// log goes to a file that a failing test prints.
struct Node {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
}

impl Node {
    fn start(plugin: &Path) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let endpoint = format!("127.0.0.1:{port}");
        let config = dir.path().join("node.toml");
        std::fs::write(
            &config,
            format!(
                "id = 1\ndata_dir = \"{}\"\nlisten = \"{endpoint}\"\npeer_listen = \"127.0.0.1:0\"\nplugin = \"{}\"\n[raft]\ntick_ms = 20\n",
                dir.path().join("data").display(),
                plugin.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("node.log")).unwrap();
        let child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(&config)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn wasmraft run");
        let mut node = Node { child, endpoint, dir };
        node.wait_for_leader();
        node
    }

    /// Polls `wasmraft status` until the node leads. Compiling an
    /// interpreter's component takes seconds (Python: 10-20 s on 2 cores).
    fn wait_for_leader(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("wasmraft run exited ({status}):\n{}", self.log());
            }
            let out = self.cli(&["status"]);
            if out.status.success() && String::from_utf8_lossy(&out.stdout).contains("leader:   1") {
                return;
            }
            assert!(Instant::now() < deadline, "no leader after 180 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("node.log")).unwrap_or_default()
    }

    fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", &self.endpoint).output().unwrap()
    }

    /// `wasmraft propose COMMAND`; its output, which must be a success.
    fn propose(&self, command: &str) -> String {
        ok(&self.cli(&["propose", command]), command)
    }

    fn query(&self, request: &str) -> String {
        ok(&self.cli(&["query", request]), request)
    }

    /// A command the plugin refuses: the CLI fails with the plugin's message.
    fn refused(&self, args: &[&str], message: &str) {
        let out = self.cli(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
        assert!(stderr.contains(message), "{args:?}: expected {message:?} in {stderr:?}");
    }

    fn status(&self) -> String {
        ok(&self.cli(&["status"]), "status")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- node log ---\n{}", self.log());
        }
    }
}

fn ok(out: &Output, what: &str) -> String {
    assert!(out.status.success(), "{what:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap().trim_end_matches('\n').to_string()
}

#[test]
fn c_ratelimit_counts_tokens_in_a_node() {
    let node = Node::start(&component("c_ratelimit"));
    assert!(node.status().contains("plugin:   c-ratelimit 0.1.0"), "{}", node.status());
    // Rate 0: the bucket never refills, whatever the timestamps.
    assert_eq!(node.propose("limit api 5 0"), "ok 5");
    assert_eq!(node.propose("take api 2"), "ok 3");
    assert_eq!(node.propose("take api 3"), "ok 0");
    assert_eq!(node.query("api"), "0");
    node.refused(&["propose", "take api 1"], "api has too few tokens");
    node.refused(&["propose", "take api two"], "N must be a whole number");
    node.refused(&["propose", "take other 1"], "no limit set for other");
    node.refused(&["query", "other"], "no limit set for other");
    assert_eq!(node.query("api"), "0", "refused takes changed nothing");
    // Refills follow the entries' timestamps; a query may look ahead.
    assert_eq!(node.propose("limit slow 10 1"), "ok 10");
    assert_eq!(node.propose("take slow 10"), "ok 0");
    assert_eq!(node.query("slow 9999999999999"), "10");
    assert_eq!(node.query("api 9999999999999"), "0", "rate 0 never refills");
    assert_eq!(node.propose("drop api"), "ok");
    node.refused(&["query", "api"], "no limit set for api");
}

#[test]
fn python_poll_tallies_votes_in_a_node() {
    let node = Node::start(&component("python_poll"));
    assert!(node.status().contains("plugin:   python-poll 0.1.0"), "{}", node.status());
    assert_eq!(node.propose("open lunch pizza sushi tacos"), "open\npizza 0\nsushi 0\ntacos 0");
    assert_eq!(node.propose("vote lunch ann pizza"), "pizza 1");
    assert_eq!(node.propose("vote lunch bob sushi"), "sushi 1");
    assert_eq!(node.propose("vote lunch cy pizza"), "pizza 2");
    let before = node.query("lunch");
    assert_eq!(before, "open\npizza 2\nsushi 1\ntacos 0");
    node.refused(&["propose", "vote lunch ann tacos"], "ann already voted in lunch");
    node.refused(&["propose", "vote lunch dan burgers"], "poll lunch has no option burgers");
    node.refused(&["propose", "vote lunch"], "usage: vote POLL VOTER OPTION");
    node.refused(&["propose", "open lunch a b"], "poll lunch exists");
    node.refused(&["query", "dinner"], "no poll dinner");
    assert_eq!(node.query("lunch"), before, "refused votes changed nothing");
    assert_eq!(node.propose("close lunch"), "closed\npizza 2\nsushi 1\ntacos 0");
    node.refused(&["propose", "vote lunch dan tacos"], "poll lunch is closed");
    assert_eq!(node.query("lunch"), "closed\npizza 2\nsushi 1\ntacos 0");
}

#[test]
fn js_leaderboard_ranks_players_in_a_node() {
    let node = Node::start(&component("js_leaderboard"));
    assert!(node.status().contains("plugin:   js-leaderboard 0.1.0"), "{}", node.status());
    assert_eq!(node.propose("score ann 10"), "best 10");
    assert_eq!(node.propose("score bob 30"), "best 30");
    assert_eq!(node.propose("score ann 5"), "kept 10");
    assert_eq!(node.propose("score cy 20"), "best 20");
    assert_eq!(node.propose("score ann 40"), "best 40");
    let board = node.query("top 10");
    assert_eq!(board, "1 ann 40\n2 bob 30\n3 cy 20");
    node.refused(&["propose", "score dan -5"], "points must be an integer");
    node.refused(&["propose", "remove dan"], "no player dan");
    node.refused(&["propose", "dance"], "unknown command");
    node.refused(&["query", "player dan"], "no player dan");
    assert_eq!(node.query("top 10"), board, "refused commands changed nothing");
    assert_eq!(node.propose("remove bob"), "removed");
    assert_eq!(node.query("top 2"), "1 ann 40\n2 cy 20");
    assert_eq!(node.query("player ann"), "40");
}
