//! The command blocks of `docs/*.md` run as written. Each line of a block
//! runs in a shell, with `wasmraft` and `wasmraft-bench` on the PATH as the
//! binaries under test; it must succeed, and a one-word comment (`# 3`) is
//! its output. Substitutions, all stated here: `~/src/wasmraft` is this
//! checkout; `cargo` building a plugin for wasm32 is the guest toolchain
//! (as `cargo xtask plugins` runs it, with its target directory shared so
//! that reruns reuse the compiled SDK).
//!
//! `every_docs_block_is_run_here` fails when a document gains a block no
//! test here runs. Not run: the language guide's set-up lines, which are
//! the test command's own (`scripts/test.sh`; checked to be).

mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::docs::{block_after, promised, sh_blocks, split_comment};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn doc(name: &str) -> String {
    std::fs::read_to_string(repo().join("docs").join(name)).unwrap()
}

/// The PATH with `extra` and the binaries under test first.
fn path_with_binaries(extra: &[PathBuf]) -> String {
    let bin_dir = Path::new(BIN).parent().unwrap();
    assert!(bin_dir.join("wasmraft-bench").is_file(), "wasmraft-bench is not built beside {BIN}");
    let mut dirs: Vec<String> = extra.iter().map(|d| d.display().to_string()).collect();
    dirs.push(bin_dir.display().to_string());
    dirs.push(std::env::var("PATH").unwrap_or_default());
    dirs.join(":")
}

/// A shell for document lines, in `dir`.
fn shell(dir: &Path, script: &str) -> Command {
    shell_with(dir, script, &[])
}

fn shell_with(dir: &Path, script: &str, extra_path: &[PathBuf]) -> Command {
    let mut command = Command::new("sh");
    command
        .args(["-ec", script])
        .current_dir(dir)
        .env("PATH", path_with_binaries(extra_path))
        .env_remove("WASMRAFT_ENDPOINTS")
        .env_remove("WASMRAFT_CACERT")
        .env_remove("WASMRAFT_CERT")
        .env_remove("WASMRAFT_KEY");
    command
}

/// Runs one document line in `dir`; its standard output.
fn run(dir: &Path, line: &str) -> String {
    run_with(dir, line, &[])
}

fn run_with(dir: &Path, line: &str, extra_path: &[PathBuf]) -> String {
    let (command, comment) = split_comment(line);
    let mut script = command.replace("~/src/wasmraft", &repo().display().to_string());
    let guest_build = command.starts_with("cargo build") && command.contains("wasm32-unknown-unknown");
    if guest_build {
        script = format!("{}{script}", guest_cargo_function());
    }
    let mut sh = shell_with(dir, &script, extra_path);
    if guest_build {
        sh.env("CARGO_TARGET_DIR", repo().join("plugins/target/template-test"))
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_TARGET");
        if let Ok(cargo) = std::env::var("WASMRAFT_GUEST_CARGO") {
            let bin_dir = Path::new(&cargo).parent().unwrap().to_path_buf();
            sh.env("RUSTC", bin_dir.join("rustc"))
                .env("RUSTC_BOOTSTRAP", "1")
                .env("PATH", path_with_binaries(&[bin_dir]));
        }
    }
    let out = sh.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{command}: {:?}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
    if let Some(expected) = comment.and_then(promised) {
        assert_eq!(stdout.trim_end(), expected, "{command}");
    }
    println!("ran: {command}");
    stdout
}

/// A shell function that makes `cargo` the guest toolchain, as `cargo
/// xtask plugins` runs it (`WASMRAFT_GUEST_CARGO`,
/// `WASMRAFT_GUEST_CARGO_ARGS`); empty when the host's cargo is the guest's.
fn guest_cargo_function() -> String {
    match std::env::var("WASMRAFT_GUEST_CARGO") {
        Ok(cargo) => {
            let args = std::env::var("WASMRAFT_GUEST_CARGO_ARGS").unwrap_or_default();
            format!("cargo() {{ '{cargo}' \"$@\" {args}; }}\n")
        }
        Err(_) => String::new(),
    }
}

/// A server a document line starts, stopped when dropped as a reader
/// would stop it (Ctrl-C), so that a `wasmraft dev` removes its temporary
/// data directory; killed if it does not exit within 10 s.
struct Server(Child);

impl Server {
    /// Starts `line` in `dir` and waits until `ready` succeeds.
    fn start(dir: &Path, line: &str, ready: &[&str]) -> Server {
        for port in [7379, 7380, 7381, 7479, 7480, 7481] {
            assert!(
                std::net::TcpListener::bind(("127.0.0.1", port)).is_ok(),
                "port {port} is taken: the documents' commands use the default ports (is a `wasmraft dev` running?)"
            );
        }
        let (command, _) = split_comment(line);
        let child = shell(dir, &format!("exec {command}")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let server = Server(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !shell(dir, &ready.join(" ")).output().unwrap().status.success() {
            assert!(Instant::now() < deadline, "{command} did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if cluster::interrupt(&mut self.0, Duration::from_secs(10)).is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The first lines of every block the tests below run, by document.
const RUN_HERE: &[(&str, &str)] = &[
    ("writing-a-plugin.md", "wasmraft plugin new tally "),
    ("writing-a-plugin.md", "cargo build --release --target wasm32-unknown-unknown"),
    ("writing-a-plugin.md", "wasmraft plugin deploy target/wasm32-unknown-unknown/release/tally.wasm"),
    ("plugin-platform.md", "wasmraft plugin deploy target/my_plugin.wasm"),
    ("security.md", "wasmraft status --cacert certs/ca.pem"),
    ("plugins-in-other-languages.md", "eval \"$(scripts/setup.sh)\""),
    ("plugins-in-other-languages.md", "cargo xtask c-bindings wit"),
    ("plugins-in-other-languages.md", "componentize-py -d wit"),
    ("plugins-in-other-languages.md", "componentize-qjs --wit wit"),
];

#[test]
fn every_docs_block_is_run_here() {
    let mut docs: Vec<_> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut seen = 0;
    for path in docs {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        for block in sh_blocks(&std::fs::read_to_string(&path).unwrap()) {
            let known = RUN_HERE.iter().any(|(d, first)| *d == name && block[0].starts_with(first));
            assert!(known, "{name} has a command block no test runs: {block:?}");
            seen += 1;
        }
    }
    assert_eq!(seen, RUN_HERE.len(), "a block listed here is gone from the documents");
}

/// `docs/writing-a-plugin.md` from an empty directory to a deployed
/// plugin, and `docs/plugin-platform.md`'s deploy on the same cluster.
#[test]
fn the_plugin_guide_runs_as_written() {
    let _serial = cluster::serial(); // the default ports
    let guide = doc("writing-a-plugin.md");
    let tmp = tempfile::tempdir().unwrap();
    let create = block_after(&guide, "## 1. Create a crate");
    assert_eq!(create.len(), 3, "{create:?}");
    // Each way of creating the crate, in a directory of its own; the one
    // with the checkout's SDK is built (the others need crates.io).
    for (line, dir) in create.iter().zip(["from-crates-io", "from-checkout", "elsewhere"]) {
        let dir = tmp.path().join(dir);
        std::fs::create_dir(&dir).unwrap();
        run(&dir, line);
    }
    assert!(tmp.path().join("from-crates-io/tally/Cargo.toml").is_file());
    assert!(tmp.path().join("elsewhere/plugins/tally/Cargo.toml").is_file());
    let tally = tmp.path().join("from-checkout/tally");
    // The guest workspace's lockfile pins the same versions: no registry
    // lookup. The build's target directory is shared (see `guest_cargo`);
    // `target` points at it so that the guide's paths hold.
    std::fs::copy(repo().join("plugins/Cargo.lock"), tally.join("Cargo.lock")).unwrap();
    let shared = repo().join("plugins/target/template-test");
    std::fs::create_dir_all(&shared).unwrap();
    std::os::unix::fs::symlink(&shared, tally.join("target")).unwrap();

    let test_it = block_after(&guide, "run the plugin on a local cluster:");
    assert!(test_it[0].starts_with("cargo build") && test_it[1].starts_with("wasmraft dev --plugin"), "{test_it:?}");
    run(&tally, &test_it[0]);
    let _cluster = Server::start(&tally, &test_it[1], &["wasmraft", "status", "--timeout", "1s"]);
    for line in &test_it[2..] {
        let out = run(&tally, line);
        if line.starts_with("wasmraft status") {
            assert!(out.contains("tally 0.1.0 (sdk 0.1.0"), "{out}");
        }
    }
    for line in block_after(&guide, "## 5. Deploy") {
        run(&tally, &line);
    }
    // The platform guide's deploy, of the same plugin under the guide's
    // file name.
    std::fs::copy(tally.join("target/wasm32-unknown-unknown/release/tally.wasm"), tally.join("target/my_plugin.wasm"))
        .unwrap();
    for line in block_after(&doc("plugin-platform.md"), "## Deploying and upgrading through the log") {
        let out = run(&tally, &line);
        if line.starts_with("wasmraft plugin info") {
            assert!(out.contains("tally"), "{out}");
        }
    }
}

/// `docs/security.md`'s client lines against a node set up as the same
/// document says: `wasmraft certs init` and its `[tls]` section, on the
/// default client port.
#[test]
fn the_tls_client_commands_run_as_written() {
    let _serial = cluster::serial(); // the default ports
    let security = doc("security.md");
    let tmp = tempfile::tempdir().unwrap();
    run(tmp.path(), "wasmraft certs init certs --nodes 1");
    let tls = {
        let from = security.find("```toml\n[tls]").expect("the [tls] example") + "```toml\n".len();
        let end = security[from..].find("```").unwrap() + from;
        security[from..end].to_string()
    };
    std::fs::write(
        tmp.path().join("node.toml"),
        format!("id = 1\ndata_dir = \"data\"\nlisten = \"127.0.0.1:7379\"\npeer_listen = \"127.0.0.1:7479\"\n{tls}"),
    )
    .unwrap();
    let admin = ["wasmraft status --cacert certs/ca.pem --cert certs/admin.pem --key certs/admin-key.pem --timeout 1s"];
    let _node = Server::start(tmp.path(), "wasmraft run --config node.toml", &admin);
    // Without a certificate, the client port refuses.
    let refused = shell(tmp.path(), "wasmraft status --cacert certs/ca.pem --timeout 2s").output().unwrap();
    assert!(!refused.status.success());
    // One shell for the block: its `export` is for the lines after it.
    let block = block_after(&security, "Clients pass the CA");
    assert_eq!(block.len(), 3, "{block:?}");
    let script = block.iter().map(|l| split_comment(l).0.to_string()).collect::<Vec<_>>().join("\n") + "\nwasmraft status";
    let out = shell(tmp.path(), &script).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{script}\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // The exported variables reached the last `wasmraft status`.
    assert_eq!(stdout.matches("leader:").count(), 2, "{stdout}");
    assert!(stdout.contains("10000"), "the benchmark's summary: {stdout}");
}

/// `docs/plugins-in-other-languages.md`: its set-up lines are the test
/// command's own; its C recipe runs as written from the repository's root
/// (into `target/c/`), its Python and JavaScript builds in a directory laid
/// out as their lines expect, with the tools `scripts/setup.sh` installs.
#[test]
fn the_language_guide_runs_as_written() {
    let guide = doc("plugins-in-other-languages.md");
    let blocks = sh_blocks(&guide);
    assert_eq!(blocks.len(), 4, "{blocks:?}");
    let test_sh = std::fs::read_to_string(repo().join("scripts/test.sh")).unwrap();
    let setup = &blocks[0];
    assert!(test_sh.contains("scripts/setup.sh") && setup[0].contains("scripts/setup.sh"), "{setup:?}");
    assert!(test_sh.contains(split_comment(&setup[1]).0), "test.sh does not run {:?}", setup[1]);
    // The test targets it names exist (the workspace's tests run them).
    for target in split_comment(&setup[2]).0.split("--test ").skip(1) {
        let name = target.trim();
        let found = ["host/cli/tests", "host/runtime/tests"].iter().any(|d| repo().join(d).join(format!("{name}.rs")).is_file());
        assert!(found, "no test target {name}");
    }

    let tools = PathBuf::from(std::env::var("WASMRAFT_TOOLS").expect("WASMRAFT_TOOLS: run the tests through scripts/test.sh"));
    let tool_dirs = [tools.join("venv/bin"), tools.join("npm/node_modules/.bin")];
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let repo = repo();
    let copy = |from: &str, to: &str| {
        let to = dir.join(to);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let status = Command::new("cp").arg("-r").arg(repo.join(from)).arg(&to).status().unwrap();
        assert!(status.success(), "copying {from}");
    };
    copy("wit", "wit");
    copy("examples/plugins/python-poll/app.py", "examples/plugins/python-poll/app.py");
    copy("examples/plugins/js-leaderboard/leaderboard.js", "leaderboard.js");

    let c = &blocks[1];
    assert_eq!(c.len(), 3, "{c:?}");
    let c_out = repo.join("target/c");
    let _ = std::fs::remove_dir_all(&c_out);
    for line in c {
        run(&repo, line);
    }
    assert_eq!(&std::fs::read(c_out.join("core.wasm")).unwrap()[..8], b"\0asm\x01\0\0\0", "core.wasm");
    let component = std::fs::read(c_out.join("c_ratelimit.wasm")).unwrap();
    assert_eq!(&component[..8], b"\0asm\x0d\0\x01\0", "c_ratelimit.wasm");
    // The very component `cargo xtask examples` builds, which t70 runs.
    let example = std::fs::read(repo.join("plugins/target/components/c_ratelimit.wasm")).unwrap();
    assert!(component == example, "the recipe's component differs from the example's");
    for (line, output) in [(&blocks[2][0], "python_poll.wasm"), (&blocks[3][0], "js_leaderboard.wasm")] {
        run_with(dir, line, &tool_dirs);
        let bytes = std::fs::read(dir.join(output)).unwrap();
        // A component (layer 1), not a core module.
        assert_eq!(&bytes[..8], b"\0asm\x0d\0\x01\0", "{output}");
    }
}
