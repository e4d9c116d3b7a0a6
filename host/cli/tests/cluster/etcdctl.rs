//! etcd's etcdctl, as the tests of etcd's API run it.

use std::io::Write;
use std::process::{Command, Stdio};

/// etcdctl, as `scripts/setup.sh` builds it.
pub fn etcdctl_path() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("WASMRAFT_ETCDCTL") {
        return p.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    let tools = std::env::var_os("WASMRAFT_TOOLS").map(std::path::PathBuf::from).unwrap_or_else(|| cache.join("wasmraft-tools"));
    tools.join("etcd-v3.6.8/etcdctl")
}

/// Runs etcdctl against `endpoints` with `args` (and `stdin`); returns
/// (success, stdout, stderr).
pub fn etcdctl(endpoints: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let path = etcdctl_path();
    assert!(path.exists(), "etcdctl not found at {}: run scripts/setup.sh (it builds it)", path.display());
    let mut child = Command::new(&path)
        .arg(format!("--endpoints={endpoints}"))
        .args(["--dial-timeout=3s", "--command-timeout=10s"])
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run etcdctl");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Runs etcdctl and expects it to succeed; returns its output.
pub fn ok(endpoints: &str, args: &[&str]) -> String {
    let (success, out, err) = etcdctl(endpoints, args, None);
    assert!(success, "etcdctl {args:?} failed:\n{out}{err}");
    out
}

/// The number after `"field":` in etcdctl's JSON output.
pub fn json_number(json: &str, field: &str) -> u64 {
    let name = format!("\"{field}\":");
    let at = json.find(&name).unwrap_or_else(|| panic!("no {field} in {json}")) + name.len();
    json[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

/// The header revision in etcdctl's JSON output.
pub fn revision(json: &str) -> i64 {
    json_number(json, "revision") as i64
}

/// A running `etcdctl watch`, its output gathered line by line.
pub struct Watch {
    child: std::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// Starts `etcdctl watch ARGS` against `endpoints`.
    pub fn start(endpoints: &str, args: &[&str]) -> Watch {
        let mut child = Command::new(etcdctl_path())
            .arg(format!("--endpoints={endpoints}"))
            .arg("watch")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run etcdctl watch");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (stdout, sink) = (child.stdout.take().unwrap(), lines.clone());
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Watch { child, lines, reader: Some(reader) }
    }

    /// The lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the lines printed (at most `within`).
    pub async fn wait_for(&self, within: std::time::Duration, done: impl Fn(&[String]) -> bool) {
        let deadline = std::time::Instant::now() + within;
        while !done(&self.lines()) {
            assert!(std::time::Instant::now() < deadline, "the watch did not print what was expected: {:?}", self.lines());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Stops the watch; returns every line it printed.
    pub fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.lines()
    }
}
