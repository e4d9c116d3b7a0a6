//! The README's walkthroughs run as written, against the quick start's
//! cluster: `wasmraft dev` on its default ports, as `./scripts/dev.sh`
//! starts it. Each command of a block runs in a shell from the repository's
//! root, with `target/debug/wasmraft` standing for the binary under test
//! and `etcdctl` for the pinned one the test setup builds. A command must
//! succeed; where its comment is one word (`# OK`, `# 1 (keys deleted)`),
//! that word is its output; a `watch` must still be watching a second
//! later.
//!
//! Not run here, each tested elsewhere: the two set-up commands themselves
//! (CI runs the test command; `scripts/dev.sh` builds with cargo, which
//! cannot run inside `cargo test`), the plugin build (`cargo xtask plugins`
//! builds the same module before the tests) and `plugin new` (t71).

mod cluster;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The commands of the first ```sh block after the line containing
/// `marker`: one per line, continuation lines joined.
fn block_after(readme: &str, marker: &str) -> Vec<String> {
    let from = readme.find(marker).unwrap_or_else(|| panic!("README has no {marker:?}"));
    let rest = &readme[from..];
    let start = rest.find("```sh\n").unwrap_or_else(|| panic!("no sh block after {marker:?}")) + "```sh\n".len();
    let end = rest[start..].find("```").unwrap() + start;
    rest[start..end].lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// Splits `cmd   # comment` at the comment.
fn split_comment(line: &str) -> (&str, Option<&str>) {
    match line.find("  #") {
        Some(i) => (line[..i].trim(), Some(line[i..].trim_start().trim_start_matches('#').trim())),
        None => (line.trim(), None),
    }
}

/// The output a comment promises: its first word, when that word is all of
/// it but a parenthesis (`OK`, `1 (keys deleted)`).
fn promised(comment: &str) -> Option<&str> {
    let head = comment.split(" (").next().unwrap().trim();
    (!head.is_empty() && !head.contains(' ')).then_some(head)
}

/// Runs one README line from the repository root.
fn run(line: &str) {
    let (command, comment) = split_comment(line);
    let etcdctl = cluster::etcdctl::etcdctl_path();
    let shell = command.replace("target/debug/wasmraft", BIN);
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

/// `wasmraft dev` on the quick start's default addresses, stopped on drop.
struct QuickStart(std::process::Child);

impl QuickStart {
    fn start() -> QuickStart {
        // The quick start's script ends by starting the cluster this way.
        let script = std::fs::read_to_string(root().join("scripts/dev.sh")).unwrap();
        assert!(script.trim_end().ends_with("/debug/wasmraft\" dev \"$@\""), "scripts/dev.sh changed:\n{script}");
        for port in [7379, 7380, 7381, 7479, 7480, 7481] {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
                "port {port} is taken: the README's commands need the quick start's ports (is a `wasmraft dev` running?)"
            );
        }
        let child = Command::new(BIN).arg("dev").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let quick = QuickStart(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !Command::new(BIN).args(["status", "--timeout", "1s"]).output().unwrap().status.success() {
            assert!(Instant::now() < deadline, "wasmraft dev did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        quick
    }
}

impl Drop for QuickStart {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_readme_walkthroughs_run_as_written() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let quick_start = block_after(&readme, "## Quick start");
    assert_eq!(quick_start.len(), 2, "exactly two set-up commands: {quick_start:?}");
    assert!(quick_start[0].starts_with("./scripts/dev.sh") && quick_start[1].starts_with("./scripts/test.sh"));

    let _cluster = QuickStart::start();
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
        }
    }
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
