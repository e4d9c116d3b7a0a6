//! `wasmraft`: run a node or a local dev cluster, and talk to one.

mod certs;
mod client_cmds;
mod config;
mod dev;
mod kv;
mod lease_cmd;
mod lock_cmd;
mod logging;
mod plugin_cmds;
mod plugin_new;
mod run;
mod snapshot_cmds;
mod views;
mod watch_cmd;

use clap::{Parser, Subcommand};

// A node allocates and frees many small buffers per request on several
// threads (HTTP/2 frames, protobuf messages, plugin calls); mimalloc's
// thread-local heaps serve them for less CPU than glibc's arenas
// (benches/README.md, "2026-11-26 (morning)").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The client addresses `wasmraft dev` listens on, which client commands default to.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7379,127.0.0.1:7380,127.0.0.1:7381";

#[derive(Parser, Debug)]
#[command(
    name = "wasmraft",
    version,
    about = "A Raft consensus host whose state machines are WebAssembly plugins",
    long_about = "A Raft consensus host whose state machines are WebAssembly plugins.\n\n\
        Start a local node with the built-in key-value plugin:   wasmraft dev\n\
        Then, in another shell:                                  wasmraft put a 1 && wasmraft get a"
)]
struct Cli {
    #[command(flatten)]
    logging: logging::LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a node from a TOML configuration file.
    #[command(after_help = "Example:\n  wasmraft run --config node1.toml\n\nThe file: id, data_dir, listen, peer_listen, [peers], [raft], [limits], [tls], [etcd] (see the README).")]
    Run(run::RunArgs),
    /// Start a local 3-node cluster with the KV plugin (state in a temporary
    /// directory unless --data-dir is given) and print its endpoints.
    #[command(after_help = "Examples:\n  wasmraft dev\n  wasmraft dev --data-dir /tmp/wasmraft --metrics-listen 127.0.0.1:9379\n  wasmraft dev --plugin plugins/target/components/counter.wasm")]
    Dev(dev::DevArgs),
    /// Store VALUE under KEY (KV plugin); `-` reads the value from standard
    /// input, `--from-file PATH` from a file (values of any size up to the
    /// request limit, any bytes).
    #[command(after_help = "Examples:\n  wasmraft put greeting hello\n  wasmraft put config/app.json --from-file app.json\n  tar c dir | wasmraft put backups/dir.tar -\n  wasmraft put svc/web 10.0.0.7 --lease 694d77aa9e38260f")]
    Put(client_cmds::PutArgs),
    /// Print the value of KEY, or with --prefix every key and value under it (KV plugin).
    Get(client_cmds::GetArgs),
    /// Delete KEY, or with --prefix every key under it; prints the number deleted (KV plugin).
    Del(client_cmds::DelArgs),
    /// Print changes to keys under a prefix as they are applied (KV plugin),
    /// until Ctrl-C.
    #[command(after_help = "Examples:\n  wasmraft watch app/\n  wasmraft watch            # every key")]
    Watch(client_cmds::WatchArgs),
    /// List the cluster's members, their roles and (from the leader) progress.
    #[command(after_help = "Examples:\n  wasmraft members\n  wasmraft members -w json --endpoints 127.0.0.1:7380")]
    Members(client_cmds::MembersArgs),
    /// Change membership: add-learner ID ADDRESS, promote ID, remove ID.
    #[command(subcommand)]
    #[command(after_help = "Examples:\n  wasmraft member add-learner 4 10.0.0.4:7480\n  wasmraft member promote 4\n  wasmraft member remove 4")]
    Member(client_cmds::MemberCommand),
    /// Hand leadership to the voter ID.
    #[command(after_help = "Example:\n  wasmraft transfer-leader 2")]
    TransferLeader(client_cmds::TransferArgs),
    /// Show a node's Raft and plugin status.
    #[command(after_help = "Examples:\n  wasmraft status\n  wasmraft status --all          # a table of every endpoint; fails if one is unhealthy\n  wasmraft status -w json --endpoints 127.0.0.1:7381")]
    Status(views::StatusCmdArgs),
    /// Propose a raw command to any plugin and print its response.
    #[command(after_help = "Examples:\n  wasmraft propose \"deposit alice 10\"     # a text command for the running plugin\n  printf '\\x01\\x02' | wasmraft propose --stdin")]
    Propose(client_cmds::ProposeArgs),
    /// Run COMMAND while holding the lock NAME (KV plugin; etcd's mutex, so
    /// `etcdctl lock` holders of NAME are excluded too).
    Lock(lock_cmd::LockArgs),
    /// Grant, revoke, keep alive and inspect etcd leases (KV plugin).
    #[command(subcommand)]
    Lease(lease_cmd::LeaseCommand),
    /// Send a keep-alive for KEY to a plugin with timers and print its answer.
    #[command(after_help = "Example:\n  wasmraft renew session-7     # the plugin's tick answers it; batched with others into one entry")]
    Renew(client_cmds::RenewArgs),
    /// Run a raw read-only query on any plugin and print its response.
    #[command(after_help = "Examples:\n  wasmraft query total\n  wasmraft query --consistency e \"balance alice\"")]
    Query(client_cmds::QueryArgs),
    /// Deploy a plugin through the log, show the running one, or start a new one.
    #[command(subcommand)]
    Plugin(plugin_cmds::PluginCommand),
    /// Write certificates for a TLS dev or test cluster.
    #[command(subcommand)]
    Certs(certs::CertsCommand),
    /// Check that every replica's keyspace is identical at one index (each
    /// node hashes it; mismatches are reported and the command fails).
    #[command(after_help = "Example:\n  wasmraft check --timeout 30s")]
    Check(plugin_cmds::CheckArgs),
    /// Restore a backup (`etcdctl snapshot save`) into a new cluster.
    #[command(subcommand)]
    Snapshot(snapshot_cmds::SnapshotCommand),
}

/// Caps glibc's malloc at two arenas. By default each thread that
/// allocates may get its own 64 MiB arena, and a node's many threads
/// (tokio workers, Raft, apply, RocksDB) each kept freed copies of large
/// entries in theirs: peak RSS under 1.4 MiB puts was mostly idle arenas
/// (benches/README.md has the figures). As `MALLOC_ARENA_MAX=2` would.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn limit_malloc_arenas() {
    // SAFETY: `mallopt` only tunes the allocator; it is called first thing
    // in `main`, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

/// Turns transparent huge pages off for this process, as
/// `MIMALLOC_ALLOW_THP=0` would. mimalloc asks for them on its arenas, so
/// each time it took memory back from the kernel and handed it out again,
/// the first touch faulted in a 2 MiB page and zeroed all of it: under
/// many clients' puts that was 4% of a leader's CPU and 8% of a follower's
/// apply thread (benches/README.md, "2026-11-29 (night)").
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn disable_transparent_huge_pages() {
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    // SAFETY: this prctl only sets a flag of this process, which the kernel
    // checks at each later page fault; no memory changes under anyone.
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) } != 0 {
        // A kernel without it: the node runs as before, only slower.
        tracing::warn!(error = %std::io::Error::last_os_error(), "transparent huge pages stay on");
    }
}

#[cfg(not(target_os = "linux"))]
fn disable_transparent_huge_pages() {}

/// Client commands end quietly, with success, when their output is closed
/// early (`wasmraft get --prefix '' | head -1`), as Unix tools do: `print!`
/// panics on a write to a closed pipe, and this hook turns exactly that
/// panic into an exit. (Restoring SIGPIPE's default instead would also kill
/// the process on a write to a closed network connection.)
fn end_quietly_on_closed_output() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// Whether `e` comes from writing to a closed output.
fn is_closed_output(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let server = matches!(cli.command, Command::Run(_) | Command::Dev(_));
    if server {
        limit_malloc_arenas();
    } else {
        end_quietly_on_closed_output();
    }
    logging::init(&cli.logging, server);
    if server {
        disable_transparent_huge_pages();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut dev_dir = None;
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(a) => run::run(a).await,
            Command::Dev(a) => dev::dev(a).await.map(|dir| dev_dir = dir),
            Command::Put(a) => client_cmds::put(a).await,
            Command::Get(a) => client_cmds::get(a).await,
            Command::Del(a) => client_cmds::del(a).await,
            Command::Status(a) => client_cmds::status(a).await,
            Command::Watch(a) => watch_cmd::watch(a).await,
            Command::Members(a) => client_cmds::members(a).await,
            Command::TransferLeader(a) => client_cmds::transfer_leader(a).await,
            Command::Member(c) => client_cmds::member(c).await,
            Command::Propose(a) => client_cmds::propose(a).await,
            Command::Renew(a) => client_cmds::renew(a).await,
            Command::Lease(c) => lease_cmd::lease(c).await,
            Command::Lock(a) => lock_cmd::lock(a).await,
            Command::Query(a) => client_cmds::query(a).await,
            Command::Plugin(c) => plugin_cmds::run(c).await,
            Command::Check(a) => plugin_cmds::check(a).await,
            Command::Certs(c) => certs::run(c).await,
            Command::Snapshot(c) => snapshot_cmds::run(c),
        }
    });
    // Tasks that still hold a node's storage end with the runtime; only then
    // may `wasmraft dev` remove its temporary data directory.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    drop(dev_dir);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if !server && is_closed_output(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            if let Some(hint) = hint(&format!("{e:#}")) {
                eprintln!("hint: {hint}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// What to try after a connection-level failure.
fn hint(error: &str) -> Option<&'static str> {
    let tls =
        std::env::var_os("WASMRAFT_CACERT").is_some() || std::env::args().any(|a| a == "--cacert");
    let lower = error.to_lowercase();
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        return Some(
            "the node's certificate is not signed by the CA given with --cacert (give the cluster CA)",
        );
    }
    let refused = [
        "certificate required",
        "certificaterequired",
        "handshake",
        "broken pipe",
        "connection reset",
    ];
    if tls && refused.iter().any(|r| lower.contains(r)) {
        return Some(
            "the node refused the connection: if the cluster asks for a client certificate, pass --cert and --key (or WASMRAFT_CERT, WASMRAFT_KEY)",
        );
    }
    if lower.contains("connection refused") {
        return Some(
            "nothing listens at that address: is a node running there? (`wasmraft dev` serves 127.0.0.1:7379-7381; \
             --endpoints or WASMRAFT_ENDPOINTS name others)",
        );
    }
    if !tls
        && (lower.contains("transport error")
            || lower.contains("cannot reach")
            || lower.contains("connection"))
    {
        return Some(
            "if the cluster uses TLS, pass --cacert (and --cert/--key), or set WASMRAFT_CACERT",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    /// Every subcommand's arguments are consistent (unique names, valid
    /// `requires`): clap checks this only when a command is first parsed.
    #[test]
    fn the_command_line_is_well_formed() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// Every command a user runs shows an example in its `--help`.
    #[test]
    fn every_command_has_an_example_in_its_help() {
        use clap::CommandFactory;
        fn leaves(c: &clap::Command, path: String, out: &mut Vec<(String, String)>) {
            if c.get_subcommands().next().is_none() {
                let help = format!("{}{}", c.get_after_help().map(|h| h.to_string()).unwrap_or_default(), c.get_long_about().map(|h| h.to_string()).unwrap_or_default());
                out.push((path.clone(), help));
            }
            for sub in c.get_subcommands() {
                leaves(sub, format!("{path} {}", sub.get_name()), out);
            }
        }
        let mut all = Vec::new();
        leaves(&super::Cli::command(), "wasmraft".into(), &mut all);
        assert!(all.len() > 15, "{all:?}");
        let missing: Vec<&String> = all.iter().filter(|(_, help)| !help.contains("Example")).map(|(p, _)| p).collect();
        assert!(missing.is_empty(), "no example in the help of: {missing:?}");
    }
}
