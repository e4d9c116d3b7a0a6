//! The bank example plugin (`plugins/examples/bank`) on a real `wasmraft dev`
//! cluster: concurrent clients transfer money; no account is ever
//! overdrawn, no money appears or vanishes, and a refused transfer changes
//! nothing.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wasmraft_client::{Client, Consistency};

const BIN: &str = env!("CARGO_BIN_EXE_wasmraft");

/// Built by `cargo xtask plugins`; a missing build fails the test.
fn bank_plugin() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins/target/components/bank.wasm");
    assert!(path.exists(), "{} is missing: run `cargo xtask plugins` first (scripts/test.sh does)", path.display());
    path
}

/// A `wasmraft dev` process running the bank (three nodes in one process),
/// killed when dropped.
struct Cluster {
    child: Child,
    endpoints: String,
    _data: tempfile::TempDir,
}

impl Cluster {
    fn start() -> Self {
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(BIN)
            .args(["dev", "--listen", "127.0.0.1:0", "--plugin"])
            .arg(bank_plugin())
            .arg("--data-dir")
            .arg(data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn wasmraft dev");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let endpoints = loop {
            assert!(Instant::now() < deadline, "wasmraft dev did not become ready");
            let line = lines.next().expect("wasmraft dev exited before it was ready").unwrap();
            if let Some(addrs) = line.trim().strip_prefix("endpoints:") {
                break addrs.trim().to_string();
            }
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Cluster { child, endpoints, _data: data }
    }

    fn client(&self) -> Client {
        Client::new(self.endpoints.split(',')).unwrap()
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN).args(args).env("WASMRAFT_ENDPOINTS", &self.endpoints).output().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn open(account: &str) -> Vec<u8> {
    format!(r#"{{"op":"open","account":"{account}"}}"#).into_bytes()
}

fn deposit(account: &str, amount: u64) -> Vec<u8> {
    format!(r#"{{"op":"deposit","account":"{account}","amount":{amount}}}"#).into_bytes()
}

fn transfer(from: &str, to: &str, amount: u64) -> Vec<u8> {
    format!(r#"{{"op":"transfer","from":"{from}","to":"{to}","amount":{amount}}}"#).into_bytes()
}

const ACCOUNTS_QUERY: &[u8] = br#"{"op":"accounts"}"#;

/// The balances of an `accounts` reply, `{"accounts":{"a":1,...},"total":N}`.
/// (The host workspace has no JSON crate; the shape is fixed.)
fn parse_accounts(reply: &[u8]) -> (BTreeMap<String, u64>, u64) {
    let text = std::str::from_utf8(reply).unwrap();
    let inner = text
        .strip_prefix(r#"{"accounts":{"#)
        .and_then(|t| t.split_once("},\"total\":"))
        .unwrap_or_else(|| panic!("unexpected accounts reply {text}"));
    let total = inner.1.trim_end_matches('}').parse().unwrap();
    let balances = inner
        .0
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, balance) = pair.split_once(':').unwrap();
            (name.trim_matches('"').to_string(), balance.parse().unwrap())
        })
        .collect();
    (balances, total)
}

/// A small deterministic generator, so that a failing run can be repeated.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[test]
fn concurrent_transfers_never_overdraw_and_conserve_money() {
    const ACCOUNTS: usize = 5;
    const CLIENTS: u64 = 6;
    const TRANSFERS: usize = 40;
    const START: u64 = 100;
    let cluster = Cluster::start();
    let names: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct-{i}")).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();

    let applied = rt.block_on(async {
        let mut setup = cluster.client();
        for name in &names {
            setup.propose(open(name)).await.unwrap();
            setup.propose(deposit(name, START)).await.unwrap();
        }
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (mut client, names) = (cluster.client(), names.clone());
                tokio::spawn(async move {
                    let mut rng = Lcg(c + 1);
                    let (mut applied, mut refused) = (Vec::new(), 0);
                    for _ in 0..TRANSFERS {
                        let from = rng.below(ACCOUNTS as u64) as usize;
                        let to = (from + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
                        // Up to 60 out of about 100 per account: many overdraw.
                        let amount = 1 + rng.below(60);
                        match client.propose(transfer(&names[from], &names[to], amount)).await {
                            Ok(r) => applied.push((r.index, from, to, amount)),
                            Err(e) if e.reason() == Some("rejected") => {
                                assert!(e.to_string().contains("insufficient funds"), "{e}");
                                refused += 1;
                            }
                            Err(e) => panic!("transfer failed unexpectedly: {e} ({:?})", e.reason()),
                        }
                    }
                    (applied, refused)
                })
            })
            .collect();
        let (mut applied, mut refused) = (Vec::new(), 0);
        for t in tasks {
            let (a, r) = t.await.unwrap();
            applied.extend(a);
            refused += r;
        }
        assert!(
            !applied.is_empty() && refused > 0,
            "the load should both move money and overdraw: {} applied, {refused} refused",
            applied.len()
        );
        applied
    });

    // Replaying the acknowledged transfers in log order never goes below
    // zero and ends where the cluster is.
    let mut applied = applied;
    applied.sort();
    let mut expected = vec![START as i128; ACCOUNTS];
    for &(index, from, to, amount) in &applied {
        expected[from] -= amount as i128;
        expected[to] += amount as i128;
        assert!(expected[from] >= 0, "the transfer at index {index} overdrew {}", names[from]);
    }
    let reply = rt
        .block_on(async { cluster.client().query(ACCOUNTS_QUERY.to_vec(), Consistency::Linearizable).await.unwrap() });
    let (balances, total) = parse_accounts(&reply);
    assert_eq!(total, START * ACCOUNTS as u64, "money was created or destroyed: {balances:?}");
    for (i, name) in names.iter().enumerate() {
        assert_eq!(balances[name] as i128, expected[i], "{name}: {balances:?}");
    }
}

#[test]
fn an_overdraft_is_rejected_and_changes_nothing() {
    let cluster = Cluster::start();
    let ok = |args: &[&str]| {
        let out = cluster.cli(args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    ok(&["propose", r#"{"op":"open","account":"alice"}"#]);
    ok(&["propose", r#"{"op":"open","account":"bob"}"#]);
    assert_eq!(
        ok(&["propose", r#"{"op":"deposit","account":"alice","amount":50}"#]),
        "{\"account\":\"alice\",\"balance\":50}\n"
    );
    let accounts_before = ok(&["query", r#"{"op":"accounts"}"#]);
    let statement = r#"{"op":"statement","account":"alice"}"#;
    let statement_before = ok(&["query", statement]);

    let out = cluster.cli(&["propose", r#"{"op":"transfer","from":"alice","to":"bob","amount":51}"#]);
    assert!(!out.status.success(), "an overdraft must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("insufficient funds"), "{err}");
    let out = cluster.cli(&["propose", r#"{"op":"withdraw","account":"alice","amount":51}"#]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("insufficient funds"));

    assert_eq!(ok(&["query", r#"{"op":"accounts"}"#]), accounts_before);
    assert_eq!(ok(&["query", statement]), statement_before, "a refused entry leaves no statement line");
    assert_eq!(accounts_before, "{\"accounts\":{\"alice\":50,\"bob\":0},\"total\":50}\n");
    // The exact balance can still move.
    ok(&["propose", r#"{"op":"transfer","from":"alice","to":"bob","amount":50}"#]);
    assert_eq!(ok(&["query", r#"{"op":"accounts"}"#]), "{\"accounts\":{\"alice\":0,\"bob\":50},\"total\":50}\n");
}
