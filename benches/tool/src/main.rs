//! `wasmraft-bench`: a load generator for Wasmraft's KV plugin over the
//! `wasmraft.v1` gRPC API, with the flags of etcd's benchmark tool
//! (`tools/benchmark`) and d-engine's, so their published workloads can be
//! run as they are.
//!
//! ```text
//! wasmraft-bench --endpoints 127.0.0.1:7379 --conns 200 --clients 1000 --total 100000 \
//!     --key-size 8 --value-size 256 --sequential-keys put
//! wasmraft-bench --conns 200 --clients 1000 --total 100000 range --consistency l
//! ```
//!
//! It prints a progress line to stderr about once a second and, at the end,
//! a summary to stdout (`--json`: one line of JSON). See `benches/README.md`.

mod keepalive;
mod keys;
mod report;
mod run;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use prost::Message;
use wasmraft_client::{Client, Consistency};
use wasmraft_proto::etcdserverpb::request_op::Request;
use wasmraft_proto::etcdserverpb::{PutRequest, RequestOp};

use crate::keys::KeyGen;
use crate::report::{Report, RunInfo};
use crate::run::{Settings, Workload};

/// Load generator for Wasmraft's KV plugin, with etcd's benchmark flags.
#[derive(Parser, Debug)]
#[command(name = "wasmraft-bench", version)]
struct Cli {
    /// Comma-separated node addresses; connections go to them round-robin.
    #[arg(
        long,
        global = true,
        env = "WASMRAFT_ENDPOINTS",
        default_value = "127.0.0.1:7379",
        value_delimiter = ','
    )]
    endpoints: Vec<String>,
    /// Speak TLS, trusting the CA in this PEM file (the cluster CA).
    #[arg(long, global = true, env = "WASMRAFT_CACERT")]
    cacert: Option<std::path::PathBuf>,
    /// A client certificate (PEM), for clusters that ask for one.
    #[arg(
        long = "cert",
        id = "tls_cert",
        global = true,
        env = "WASMRAFT_CERT",
        requires = "tls_key"
    )]
    cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long = "key",
        id = "tls_key",
        global = true,
        env = "WASMRAFT_KEY",
        requires = "tls_cert"
    )]
    key: Option<std::path::PathBuf>,
    /// gRPC (TCP) connections.
    #[arg(long, global = true, default_value_t = 1)]
    conns: usize,
    /// Requests in flight; clients share the connections round-robin.
    #[arg(long, global = true, default_value_t = 1)]
    clients: usize,
    /// Requests to send; the run stops by itself after them.
    #[arg(long, global = true, default_value_t = 10_000)]
    total: u64,
    /// Key size in bytes (keys are zero-padded decimal numbers).
    #[arg(long, global = true, default_value_t = 8)]
    key_size: usize,
    /// Value size in bytes (`put`, `--populate`).
    #[arg(long, global = true, visible_alias = "val-size", default_value_t = 256)]
    value_size: usize,
    /// Take keys in order (request n uses key n % key-space) instead of at random.
    #[arg(long, global = true)]
    sequential_keys: bool,
    /// Number of distinct keys [default: --total].
    #[arg(long, global = true, visible_alias = "key-space-size")]
    key_space: Option<u64>,
    /// Send every request to the leader: the endpoint whose status says so.
    #[arg(long, global = true)]
    target_leader: bool,
    /// A request unanswered this long counts as an error (`10s`, `500ms`, `2`).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Print the summary as one line of JSON.
    #[arg(long, global = true)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Propose puts of keys from the key space (etcd `RequestOp` Put).
    Put,
    /// Query ranges at a read consistency (etcd `RequestOp` Range).
    Range(RangeArgs),
    /// Keep many etcd leases alive and report what it costs the server.
    KeepAlive(keepalive::KeepAliveArgs),
}

#[derive(Args, Debug)]
struct RangeArgs {
    /// Read this key every time (etcd's `range KEY [END]`); without it, each
    /// read takes one key of the key space, like `put`.
    key: Option<String>,
    /// With KEY, read the range [KEY, END).
    end: Option<String>,
    /// Read consistency: l = linearizable, s = lease, e = eventual.
    #[arg(long, value_enum, default_value = "l")]
    consistency: ConsistencyArg,
    /// Write every key first (unmeasured), so the reads find values: the key
    /// space with sequential keys, or KEY.
    #[arg(long)]
    populate: bool,
}

/// Read consistency: l = linearizable, s = lease, e = eventual.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum ConsistencyArg {
    /// Linearizable (ReadIndex).
    #[value(name = "l", alias = "linearizable")]
    Linearizable,
    /// Leader lease.
    #[value(name = "s", alias = "lease")]
    Lease,
    /// Eventual: the node's own state.
    #[value(name = "e", alias = "eventual")]
    Eventual,
}

impl ConsistencyArg {
    fn consistency(self) -> Consistency {
        match self {
            ConsistencyArg::Linearizable => Consistency::Linearizable,
            ConsistencyArg::Lease => Consistency::Lease,
            ConsistencyArg::Eventual => Consistency::Eventual,
        }
    }

    fn letter(self) -> &'static str {
        match self {
            ConsistencyArg::Linearizable => "l",
            ConsistencyArg::Lease => "s",
            ConsistencyArg::Eventual => "e",
        }
    }
}

/// `10s`, `500ms`, `2m`, or a number of seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 10s or 500ms"))?;
    let secs = match unit.trim() {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        other => return Err(format!("invalid duration unit {other:?}: use ms, s or m")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    // Errors print as one chain of causes, without the backtrace that
    // anyhow adds under RUST_BACKTRACE.
    match bench(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmraft-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark `cli` describes and prints its summary.
async fn bench(cli: Cli) -> anyhow::Result<()> {
    if cli.conns == 0 || cli.clients == 0 || cli.total == 0 {
        bail!("--conns, --clients and --total must be at least 1");
    }
    let mut endpoints: Vec<String> = cli
        .endpoints
        .iter()
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect();
    if endpoints.is_empty() {
        bail!("--endpoints is empty");
    }
    let keys = KeyGen::new(
        cli.key_size,
        cli.key_space.unwrap_or(cli.total),
        cli.sequential_keys,
    )?;
    let value = keys::value(cli.value_size, 0x5eed);
    let tls = match &cli.cacert {
        Some(ca) => Some(wasmraft_client::TlsConfig::from_files(
            ca,
            cli.cert.as_deref(),
            cli.key.as_deref(),
        )?),
        None => None,
    };
    if cli.target_leader {
        endpoints = vec![run::find_leader(&endpoints, cli.timeout, tls.as_ref()).await?];
    }
    if let Command::KeepAlive(args) = &cli.command {
        let mut channels = Vec::with_capacity(cli.conns);
        for i in 0..cli.conns {
            let endpoint = &endpoints[i % endpoints.len()];
            channels.push(wasmraft_client::endpoint(endpoint, tls.as_ref())?.connect().await.with_context(|| format!("connecting to {endpoint}"))?);
        }
        return keepalive::run(channels, args, cli.quiet).await;
    }
    let conns = run::connect(&endpoints, cli.conns, cli.timeout, tls.as_ref()).await?;
    let settings = |label: &str, total: u64| Settings {
        total,
        clients: cli.clients,
        timeout: cli.timeout,
        progress: !cli.quiet,
        label: label.to_string(),
    };

    let (workload, consistency) = match &cli.command {
        Command::Put => (
            Workload::Put {
                keys: keys.clone(),
                value: value.clone(),
            },
            None,
        ),
        Command::Range(args) => {
            let consistency = args.consistency.consistency();
            let workload = match &args.key {
                Some(key) => Workload::RangeFixed {
                    key: key.clone().into_bytes(),
                    end: args.end.clone().unwrap_or_default().into_bytes(),
                    consistency,
                },
                None if args.end.is_some() => bail!("range: END needs a KEY"),
                None => Workload::RangeKeys {
                    keys: keys.clone(),
                    consistency,
                },
            };
            if args.populate {
                populate(
                    &conns,
                    args,
                    &keys,
                    &value,
                    settings("populate", keys.space()),
                )
                .await?;
            }
            (workload, Some(args.consistency.letter().to_string()))
        }
        Command::KeepAlive(_) => unreachable!("handled above"),
    };

    let info = RunInfo {
        workload: match cli.command {
            Command::Put => "put".into(),
            Command::Range(_) => "range".into(),
            Command::KeepAlive(_) => unreachable!("handled above"),
        },
        consistency,
        endpoints,
        conns: cli.conns,
        clients: cli.clients,
        total: cli.total,
        key_size: cli.key_size,
        value_size: cli.value_size,
    };
    if !cli.quiet {
        eprintln!(
            "wasmraft-bench: {}{} x {} to {} over {} conns, {} clients; keys {} B ({} of {}), values {} B",
            info.workload,
            info.consistency
                .as_deref()
                .map(|c| format!(" --consistency {c}"))
                .unwrap_or_default(),
            info.total,
            info.endpoints.join(","),
            info.conns,
            info.clients,
            info.key_size,
            if keys.sequential() {
                "sequential"
            } else {
                "random"
            },
            keys.space(),
            info.value_size,
        );
    }
    let label = info.workload.clone();
    let outcome = run::run(&conns, Arc::new(workload), &settings(&label, cli.total)).await;
    let report = Report {
        info,
        elapsed: outcome.elapsed,
        latencies: outcome.latencies,
        errors: outcome.errors,
        empty_reads: outcome.empty_reads,
    };
    if cli.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    if report.latencies.count() == 0 {
        bail!("no request succeeded");
    }
    Ok(())
}

/// Writes what a range run reads, unmeasured: every key of the key space in
/// order, or the fixed KEY once.
async fn populate(
    conns: &[Client],
    args: &RangeArgs,
    keys: &KeyGen,
    value: &[u8],
    settings: Settings,
) -> anyhow::Result<()> {
    if let Some(key) = &args.key {
        let put = PutRequest {
            key: key.clone().into_bytes(),
            value: value.to_vec(),
            ..Default::default()
        };
        let request = RequestOp {
            request: Some(Request::RequestPut(put)),
        }
        .encode_to_vec();
        let mut client = conns[0].clone();
        client
            .propose(request)
            .await
            .with_context(|| format!("--populate: cannot put {key:?}"))?;
        return Ok(());
    }
    let workload = Workload::Put {
        keys: keys.in_order(),
        value: value.to_vec(),
    };
    let outcome = run::run(conns, Arc::new(workload), &settings).await;
    let errors: u64 = outcome.errors.values().map(|e| e.count).sum();
    eprintln!(
        "populate: wrote {} keys in {:.1}s ({errors} errors)",
        outcome.latencies.count(),
        outcome.elapsed.as_secs_f64()
    );
    if errors > 0 {
        let reasons: Vec<&str> = outcome.errors.keys().map(String::as_str).collect();
        bail!("--populate: {errors} puts failed ({})", reasons.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_or_without_a_unit() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("3h").is_err());
    }

    #[test]
    fn flags_match_etcds_benchmark() {
        let cli = Cli::try_parse_from([
            "wasmraft-bench",
            "--endpoints",
            "a:1,b:2",
            "--conns",
            "200",
            "--clients",
            "1000",
            "put",
            "--total",
            "100000",
            "--val-size",
            "256",
            "--key-space-size",
            "5",
            "--sequential-keys",
        ])
        .unwrap();
        assert_eq!(cli.endpoints, ["a:1", "b:2"]);
        assert_eq!(
            (cli.conns, cli.clients, cli.total, cli.value_size),
            (200, 1000, 100_000, 256)
        );
        assert_eq!(cli.key_space, Some(5));
        assert!(cli.sequential_keys && matches!(cli.command, Command::Put));

        let cli =
            Cli::try_parse_from(["wasmraft-bench", "range", "k", "--consistency", "s"]).unwrap();
        let Command::Range(args) = cli.command else {
            panic!("not a range")
        };
        assert_eq!(args.key.as_deref(), Some("k"));
        assert_eq!(args.consistency.letter(), "s");
        assert_eq!(cli.timeout, Duration::from_secs(10));
    }
}
