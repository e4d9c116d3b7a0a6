//! etcd's concurrency recipes over Wasmraft's leases, driven by etcdctl
//! and `wasmraft lock` against `wasmraft run` processes: `etcdctl lock`
//! gives mutual exclusion to five concurrent shell loops that append start
//! and end lines to one file (no pair interleaves), also across a leader
//! kill, and so does a mix of `wasmraft lock` and `etcdctl lock` loops (one
//! mutex); `etcdctl elect` hands leadership over when the holder stops.

mod cluster;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cluster::etcdctl::*;
use cluster::*;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Five shell loops, each taking the lock `shared` ROUNDS times through
/// `locker(i)` (a command line that runs what follows it under the lock)
/// to append a start and an end line to one file; the leader is killed
/// meanwhile. No pair may interleave.
async fn five_loops_under_one_lock(locker: impl Fn(usize, &str) -> String) {
    let _serial = serial();
    let mut cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shared.log");
    const ROUNDS: usize = 6;
    let loops: Vec<Killed> = (0..5)
        .map(|i| {
            // Each round holds the lock while it appends a start line, waits
            // a little and appends an end line.
            let body = format!("echo start {i} >> {f}; sleep 0.05; echo end {i} >> {f}", f = file.display());
            let script = format!(
                "for r in $(seq {ROUNDS}); do {} sh -c '{body}' >/dev/null || echo failed >> {f}.errors; done",
                locker(i, &all),
                f = file.display()
            );
            Killed(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
        })
        .collect();
    // Kill the leader while the loops run.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let leader = cluster.leader().await;
    cluster.kill9(leader);
    let deadline = Instant::now() + Duration::from_secs(90);
    for mut l in loops {
        while l.0.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the loops did not finish");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() % 2 == 0, "{text}");
    for pair in lines.chunks(2) {
        let (start, end) = (pair[0].strip_prefix("start "), pair[1].strip_prefix("end "));
        assert!(start.is_some() && start == end, "interleaved under the lock:\n{text}");
    }
    let failed = std::fs::read_to_string(format!("{}.errors", file.display())).unwrap_or_default();
    // A round may fail while the leader is down (the client gives up before
    // or after running its command); most pass.
    assert!(lines.len() / 2 <= 5 * ROUNDS && lines.len() / 2 + failed.lines().count() >= 5 * ROUNDS, "{text}\nfailed:\n{failed}");
    assert!(lines.len() / 2 >= 5 * ROUNDS - 5, "only {} rounds held the lock:\nfailed:\n{failed}", lines.len() / 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_excludes_five_shell_loops_across_a_leader_kill() {
    let etcdctl = etcdctl_path();
    five_loops_under_one_lock(|_, all| format!("{} --endpoints={all} --dial-timeout=3s lock --ttl=5 shared --", etcdctl.display())).await;
}

/// Three loops take the lock with `wasmraft lock`, two with `etcdctl lock`:
/// one mutex for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasmraft_lock_and_etcdctl_lock_exclude_each_other() {
    let etcdctl = etcdctl_path();
    five_loops_under_one_lock(|i, all| match i {
        0..3 => format!("{} lock --endpoints {all} --ttl 5 shared --", env!("CARGO_BIN_EXE_wasmraft")),
        _ => format!("{} --endpoints={all} --dial-timeout=3s lock --ttl=5 shared --", etcdctl.display()),
    })
    .await;
}

/// `etcdctl elect NAME PROPOSAL`, its output lines gathered.
fn elect(endpoints: &str, proposal: &str) -> (Killed, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(etcdctl_path())
        .arg(format!("--endpoints={endpoints}"))
        .args(["elect", "leadership", proposal])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (Killed(child), rx)
}

fn wait_line(rx: &std::sync::mpsc::Receiver<String>, want: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line == want => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_hands_leadership_over_when_the_holder_stops() {
    let _serial = serial();
    let cluster = Cluster::start(3).await;
    let all = cluster.endpoints(0).join(",");
    let (first, first_out) = elect(&all, "alpha");
    assert!(wait_line(&first_out, "alpha", Duration::from_secs(10)), "alpha never led");
    let (_second, second_out) = elect(&all, "beta");
    assert!(!wait_line(&second_out, "beta", Duration::from_secs(2)), "beta led while alpha held it");
    // The holder stops (etcdctl resigns on SIGTERM, revoking its session).
    let pid = first.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(wait_line(&second_out, "beta", Duration::from_secs(10)), "beta did not take over");
    drop(first);
}
