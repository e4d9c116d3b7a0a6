//! Client subcommands: they talk to a node over `wasmraft.v1`.

use std::io::Write;

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use tonic::transport::Channel;
use wasmraft_client::{Client, Consistency, TlsConfig};
use wasmraft_proto::etcdserverpb::response_op::Response;
use wasmraft_proto::v1::admin_client::AdminClient;
use wasmraft_proto::v1::{MembersRequest, TransferLeaderRequest};

use crate::kv;

#[derive(Args, Debug)]
pub struct Endpoints {
    /// Comma-separated client addresses of nodes.
    #[arg(long, env = "WASMRAFT_ENDPOINTS", default_value = crate::DEFAULT_ENDPOINTS, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// How long a command keeps trying (another endpoint, a new leader)
    /// before it gives up: 10s, 500ms, 1m.
    #[arg(long, env = "WASMRAFT_TIMEOUT", default_value = "10s", value_parser = wasmraft_grpc::etcd::parse_duration)]
    pub timeout: std::time::Duration,
    /// Speak TLS, trusting the CA in this PEM file (the cluster CA, which
    /// signs the nodes' certificates).
    #[arg(long, env = "WASMRAFT_CACERT")]
    pub cacert: Option<PathBuf>,
    /// A client certificate (PEM), for clusters that ask for one; its
    /// common name is your identity (admins are listed in the nodes' config).
    #[arg(
        long = "cert",
        id = "tls_cert",
        env = "WASMRAFT_CERT",
        requires = "tls_key"
    )]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long = "key",
        id = "tls_key",
        env = "WASMRAFT_KEY",
        requires = "tls_cert"
    )]
    pub key: Option<PathBuf>,
}

impl Endpoints {
    pub fn tls(&self) -> anyhow::Result<Option<TlsConfig>> {
        match &self.cacert {
            Some(ca) => Ok(Some(TlsConfig::from_files(
                ca,
                self.cert.as_deref(),
                self.key.as_deref(),
            )?)),
            None if self.cert.is_some() => {
                bail!("--cert needs --cacert (the CA that signed the nodes' certificates)")
            }
            None => Ok(None),
        }
    }

    /// A client that retries for at most `--timeout`, saying so on
    /// standard error each time.
    pub fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::with_tls(&self.endpoints, self.tls()?)?
            .with_retry_for(self.timeout)
            .on_retry(|e| eprintln!("retrying: {e}")))
    }

    /// A channel to each endpoint in turn, connected now; the first error
    /// if none connects (with a hint when TLS may be the cause).
    pub async fn channels(&self) -> anyhow::Result<Vec<(String, Channel)>> {
        let tls = self.tls()?;
        let mut out = Vec::new();
        let mut last = None;
        for e in &self.endpoints {
            match wasmraft_client::endpoint(e, tls.as_ref())?.connect().await {
                Ok(c) => out.push((e.clone(), c)),
                Err(err) => last = Some(format!("{e}: {}", wasmraft_client::error_chain(&err))),
            }
        }
        if out.is_empty() {
            bail!(
                "cannot reach any endpoint ({}){}",
                last.unwrap_or_default(),
                self.hint()
            );
        }
        Ok(out)
    }

    /// What to try when nothing answers.
    pub fn hint(&self) -> &'static str {
        if self.cacert.is_none() {
            "; if the cluster uses TLS, pass --cacert (and --cert/--key)"
        } else {
            ""
        }
    }

    /// Runs an admin operation on the leader: each endpoint in turn until
    /// one is not "not the leader" (nodes that check admin identities do
    /// not forward admin requests).
    pub async fn on_leader<T, F, Fut>(&self, mut call: F) -> anyhow::Result<T>
    where
        F: FnMut(Channel) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let mut last = None;
        for (_, channel) in self.channels().await? {
            match call(channel).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(s)
                    if s.metadata()
                        .get(wasmraft_proto::ERROR_KEY)
                        .is_some_and(|v| v == "not-leader") =>
                {
                    last = Some(s)
                }
                Err(s) => return Err(status_error(s)),
            }
        }
        Err(status_error(last.expect("at least one endpoint answered")))
    }
}

/// A node's error as a user reads it, with what to do for the usual ones.
pub fn status_error(s: tonic::Status) -> anyhow::Error {
    match s.code() {
        tonic::Code::PermissionDenied => anyhow::anyhow!("permission denied: {}", s.message()),
        tonic::Code::Unavailable if s.metadata().get(wasmraft_proto::ERROR_KEY).is_none() => {
            anyhow::anyhow!("{} ({})", s.message(), wasmraft_client::error_chain(&s))
        }
        _ => anyhow::anyhow!("{}", s.message()),
    }
}

/// Read consistency: l = linearizable, s = lease, e = eventual.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ConsistencyArg {
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

impl From<ConsistencyArg> for Consistency {
    fn from(c: ConsistencyArg) -> Self {
        match c {
            ConsistencyArg::Linearizable => Consistency::Linearizable,
            ConsistencyArg::Lease => Consistency::Lease,
            ConsistencyArg::Eventual => Consistency::Eventual,
        }
    }
}

#[derive(Args, Debug)]
pub struct PutArgs {
    pub key: String,
    /// The value; `-` reads it from standard input (any bytes).
    #[arg(conflicts_with = "from_file")]
    pub value: Option<String>,
    /// Read the value from this file (any bytes, up to the request limit).
    #[arg(long, value_name = "PATH")]
    pub from_file: Option<std::path::PathBuf>,
    /// Attach the key to this lease (its hex id, from `wasmraft lease grant`):
    /// the key is deleted when the lease expires or is revoked.
    #[arg(long, value_name = "ID")]
    pub lease: Option<String>,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  wasmraft get greeting\n  wasmraft get app/ --prefix\n  wasmraft get --all -w json\n  wasmraft get app/m --from-key --consistency e")]
pub struct GetArgs {
    /// The key (not with --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub key: Option<String>,
    /// Every key that starts with KEY, printed as key and value lines.
    #[arg(long, conflicts_with = "from_key")]
    pub prefix: bool,
    /// Every key from KEY on, in key order.
    #[arg(long)]
    pub from_key: bool,
    /// Every key.
    #[arg(long, conflicts_with_all = ["prefix", "from_key"])]
    pub all: bool,
    /// Read consistency.
    #[arg(long, value_enum, default_value = "l")]
    pub consistency: ConsistencyArg,
    /// Output format (JSON: keys and values as text, or base64 under
    /// `key_base64`/`value_base64` when not UTF-8).
    #[arg(short = 'w', long = "write-out", value_enum, default_value_t)]
    pub write_out: crate::views::WriteOut,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  wasmraft del greeting\n  wasmraft del app/ --prefix\n  wasmraft del --all --yes")]
pub struct DelArgs {
    /// The key (not with --all).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub key: Option<String>,
    /// Every key that starts with KEY.
    #[arg(long, conflicts_with = "from_key")]
    pub prefix: bool,
    /// Every key from KEY on.
    #[arg(long)]
    pub from_key: bool,
    /// Every key: asks for confirmation on a terminal, needs --yes otherwise.
    #[arg(long, conflicts_with_all = ["prefix", "from_key"])]
    pub all: bool,
    /// Do not ask before deleting every key.
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

/// Which keys the flags select, and the key they start from.
fn selection(key: &Option<String>, prefix: bool, from_key: bool, all: bool) -> (String, kv::Keys) {
    let keys = match (prefix, from_key, all) {
        (_, _, true) => kv::Keys::All,
        (true, _, _) => kv::Keys::Prefix,
        (_, true, _) => kv::Keys::FromKey,
        _ => kv::Keys::One,
    };
    (key.clone().unwrap_or_default(), keys)
}

#[derive(Args, Debug)]
pub struct MembersArgs {
    /// Output format.
    #[arg(short = 'w', long = "write-out", value_enum, default_value_t)]
    pub write_out: crate::views::WriteOut,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(clap::Subcommand, Debug)]
pub enum MemberCommand {
    /// Add node ID, whose peer (Raft) address is ADDRESS, as a learner
    /// (start it first with `join = true` in its config).
    #[command(after_help = "Example:\n  wasmraft member add-learner 4 10.0.0.4:7480")]
    AddLearner {
        id: u64,
        address: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Make learner ID a voter.
    #[command(after_help = "Example:\n  wasmraft member promote 4")]
    Promote {
        id: u64,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Remove member ID from the cluster.
    #[command(after_help = "Example:\n  wasmraft member remove 4")]
    Remove {
        id: u64,
        #[command(flatten)]
        endpoints: Endpoints,
    },
}

#[derive(Args, Debug)]
pub struct TransferArgs {
    /// The voter to hand leadership to.
    pub id: u64,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Watch keys starting with this (empty: every key).
    #[arg(default_value = "")]
    pub prefix: String,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct ProposeArgs {
    /// The command, as text (use --stdin for bytes).
    pub command: Option<String>,
    /// Read the command from standard input.
    #[arg(long)]
    pub stdin: bool,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct RenewArgs {
    /// What to keep alive, in the plugin's own terms.
    pub key: String,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The request, as text (use --stdin for bytes).
    pub request: Option<String>,
    /// Read the request from standard input.
    #[arg(long)]
    pub stdin: bool,
    /// Read consistency.
    #[arg(long, value_enum, default_value = "l")]
    pub consistency: ConsistencyArg,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

/// Writes a line and flushes it; `false` once the reader went away.
pub fn print_line(bytes: &[u8]) -> bool {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush()).is_ok()
}

/// Writes `bytes` and a newline; a reader that went away (`| head`) is fine.
fn stdout_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.write_all(b"\n")) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

pub async fn put(a: PutArgs) -> anyhow::Result<()> {
    let value = match (&a.value, &a.from_file) {
        (_, Some(path)) => std::fs::read(path).with_context(|| format!("cannot read the value from {}", path.display()))?,
        (Some(v), None) if v == "-" => {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("cannot read the value from standard input")?;
            bytes
        }
        (Some(v), None) => v.clone().into_bytes(),
        (None, None) => bail!("give a VALUE, `-` to read it from standard input, or --from-file PATH"),
    };
    let lease = a.lease.as_deref().map(crate::lease_cmd::parse_id).transpose()?.unwrap_or(0);
    let r = a
        .endpoints
        .client()?
        .propose(kv::put_with_lease(&a.key, &value, lease))
        .await?;
    match kv::decode(&r.result)? {
        Response::ResponsePut(_) => println!("OK"),
        other => bail!("unexpected response {other:?}"),
    }
    Ok(())
}

pub async fn get(a: GetArgs) -> anyhow::Result<()> {
    let (key, keys) = selection(&a.key, a.prefix, a.from_key, a.all);
    let bytes = a.endpoints.client()?.query(kv::range(&key, keys), a.consistency.into()).await?;
    let range = kv::expect_range(kv::decode(&bytes)?)?;
    if a.write_out == crate::views::WriteOut::Json {
        let kvs: Vec<serde_json::Value> = range
            .kvs
            .iter()
            .map(|kv| {
                let mut o = serde_json::Map::new();
                crate::views::bytes_field(&mut o, "key", &kv.key);
                crate::views::bytes_field(&mut o, "value", &kv.value);
                o.insert("create_revision".into(), kv.create_revision.into());
                o.insert("mod_revision".into(), kv.mod_revision.into());
                o.insert("version".into(), kv.version.into());
                serde_json::Value::Object(o)
            })
            .collect();
        let revision = range.header.map_or(0, |h| h.revision);
        let doc = serde_json::json!({ "revision": revision, "count": range.count, "kvs": kvs });
        return stdout_bytes(serde_json::to_string_pretty(&doc)?.as_bytes());
    }
    if keys != kv::Keys::One {
        for kv in range.kvs {
            stdout_bytes(&kv.key)?;
            stdout_bytes(&kv.value)?;
        }
        return Ok(());
    }
    match range.kvs.first() {
        Some(kv) => stdout_bytes(&kv.value),
        None => bail!("key {key:?} not found"),
    }
}

pub async fn del(a: DelArgs) -> anyhow::Result<()> {
    let (key, keys) = selection(&a.key, a.prefix, a.from_key, a.all);
    if keys == kv::Keys::All && !a.yes {
        use std::io::IsTerminal;
        if !std::io::stdin().is_terminal() {
            bail!("del --all deletes every key: add --yes to confirm");
        }
        eprint!("delete every key of the cluster at {}? type yes: ", a.endpoints.endpoints.join(","));
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if answer.trim() != "yes" {
            bail!("nothing deleted");
        }
    }
    let r = a.endpoints.client()?.propose(kv::delete(&key, keys)).await?;
    match kv::decode(&r.result)? {
        Response::ResponseDeleteRange(d) => println!("{}", d.deleted),
        other => bail!("unexpected response {other:?}"),
    }
    Ok(())
}

pub async fn status(a: crate::views::StatusCmdArgs) -> anyhow::Result<()> {
    if a.all {
        return crate::views::status_all(&a).await;
    }
    let s = a.endpoints.client()?.status().await?;
    if a.write_out == crate::views::WriteOut::Json {
        stdout_bytes(serde_json::to_string_pretty(&crate::views::status_json(&s))?.as_bytes())?;
        return status_verdict(&s);
    }
    let plugin = s.plugin.clone().unwrap_or_default();
    let leader = if s.leader_id == 0 {
        "none".to_string()
    } else {
        s.leader_id.to_string()
    };
    let mut text = format!(
        "node:     {}\nrole:     {}\nterm:     {}\nleader:   {leader}\ncommit:   {}\napplied:  {}\nlast:     {}\n\
         plugin:   {} {} (sdk {}, sha256 {})",
        s.id,
        s.role,
        s.term,
        s.commit_index,
        s.applied_index,
        s.last_index,
        plugin.name,
        plugin.version,
        plugin.sdk_version,
        plugin.sha256
    );
    text.push_str(&format!(
        "\ncluster:  {}\nclients:  {}\npeers:    {}",
        if s.cluster_id.is_empty() {
            "(not joined yet)"
        } else {
            &s.cluster_id
        },
        s.client_address,
        s.peer_address
    ));
    if s.removed {
        text.push_str("\nREMOVED:  this node was removed from the cluster and serves nothing");
    }
    if !s.fatal.is_empty() {
        text.push_str(&format!("\nFATAL:    {}", s.fatal));
    }
    stdout_bytes(text.as_bytes())?;
    status_verdict(&s)
}

/// A node that serves nothing makes the command fail, for scripts and
/// health checks.
fn status_verdict(s: &wasmraft_client::StatusResponse) -> anyhow::Result<()> {
    if !s.fatal.is_empty() {
        bail!("node {} is fatal: {}", s.id, s.fatal);
    }
    if s.removed {
        bail!("node {} was removed from the cluster", s.id);
    }
    Ok(())
}

fn input(text: Option<String>, stdin: bool) -> anyhow::Result<Vec<u8>> {
    match (text, stdin) {
        (Some(t), false) => Ok(t.into_bytes()),
        (None, true) => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                .context("reading standard input")?;
            Ok(buf)
        }
        (Some(_), true) => bail!("give the input as an argument or with --stdin, not both"),
        (None, false) => Ok(Vec::new()),
    }
}

pub async fn propose(a: ProposeArgs) -> anyhow::Result<()> {
    let r = a
        .endpoints
        .client()?
        .propose(input(a.command, a.stdin)?)
        .await?;
    stdout_bytes(&r.result)
}

pub async fn renew(a: RenewArgs) -> anyhow::Result<()> {
    let r = a.endpoints.client()?.renew(a.key.into_bytes()).await?;
    stdout_bytes(&r.result)
}

pub async fn query(a: QueryArgs) -> anyhow::Result<()> {
    let bytes = a
        .endpoints
        .client()?
        .query(input(a.request, a.stdin)?, a.consistency.into())
        .await?;
    stdout_bytes(&bytes)
}

/// Prints `PUT key value` / `DELETE key` lines, one per event, like etcdctl.
/// An admin client of the first endpoint that answers.
async fn admin(endpoints: &Endpoints) -> anyhow::Result<AdminClient<Channel>> {
    let (_, channel) = endpoints.channels().await?.remove(0);
    Ok(AdminClient::new(channel))
}

pub async fn members(a: MembersArgs) -> anyhow::Result<()> {
    let r = admin(&a.endpoints)
        .await?
        .members(MembersRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    crate::views::print_members(r, &a.endpoints, a.write_out).await
}

pub async fn transfer_leader(a: TransferArgs) -> anyhow::Result<()> {
    a.endpoints
        .on_leader(|c| async move {
            AdminClient::new(c)
                .transfer_leader(TransferLeaderRequest { to: a.id })
                .await
        })
        .await?;
    // The transfer completes once the target has caught up and won its
    // election; wait for it so the command's success means something.
    let mut client = a.endpoints.client()?;
    for _ in 0..100 {
        if client.status().await?.leader_id == a.id {
            println!("node {} leads", a.id);
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    bail!("node {} did not take over within 5 s", a.id)
}

pub async fn member(c: MemberCommand) -> anyhow::Result<()> {
    use wasmraft_proto::v1::membership_changes_client::MembershipChangesClient as Changes;
    use wasmraft_proto::v1::{AddLearnerRequest, MemberRequest};
    match c {
        MemberCommand::AddLearner {
            id,
            address,
            endpoints,
        } => {
            endpoints
                .on_leader(|c| {
                    let address = address.clone();
                    async move {
                        Changes::new(c)
                            .add_learner(AddLearnerRequest { id, address })
                            .await
                    }
                })
                .await?;
            println!("node {id} added as a learner");
        }
        MemberCommand::Promote { id, endpoints } => {
            endpoints
                .on_leader(|c| async move { Changes::new(c).promote(MemberRequest { id }).await })
                .await?;
            println!("node {id} is a voter");
        }
        MemberCommand::Remove { id, endpoints } => {
            endpoints
                .on_leader(|c| async move { Changes::new(c).remove(MemberRequest { id }).await })
                .await?;
            println!("node {id} removed");
        }
    }
    Ok(())
}
