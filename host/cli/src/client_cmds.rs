//! Client subcommands: they talk to a node over `wasmraft.v1`.

use std::io::Write;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use wasmraft_client::{Client, Consistency};
use wasmraft_proto::etcdserverpb::response_op::Response;
use wasmraft_proto::v1::admin_client::AdminClient;
use wasmraft_proto::v1::{MembersRequest, TransferLeaderRequest};

use crate::kv;

#[derive(Args, Debug)]
pub struct Endpoints {
    /// Comma-separated node addresses.
    #[arg(long, env = "WASMRAFT_ENDPOINTS", default_value = crate::DEFAULT_ENDPOINTS, value_delimiter = ',')]
    pub endpoints: Vec<String>,
}

impl Endpoints {
    fn client(&self) -> anyhow::Result<Client> {
        Ok(Client::new(&self.endpoints)?)
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
    pub value: String,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct GetArgs {
    pub key: String,
    /// Every key that starts with KEY, printed as key and value lines.
    #[arg(long)]
    pub prefix: bool,
    /// Read consistency.
    #[arg(long, value_enum, default_value = "l")]
    pub consistency: ConsistencyArg,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(Args, Debug)]
pub struct DelArgs {
    pub key: String,
    /// Every key that starts with KEY.
    #[arg(long)]
    pub prefix: bool,
    #[command(flatten)]
    pub endpoints: Endpoints,
}

#[derive(clap::Subcommand, Debug)]
pub enum MemberCommand {
    /// Add node ID, reachable at ADDRESS, as a learner (start it first with
    /// `join = true` in its config).
    AddLearner {
        id: u64,
        address: String,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Make learner ID a voter.
    Promote {
        id: u64,
        #[command(flatten)]
        endpoints: Endpoints,
    },
    /// Remove member ID from the cluster.
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

/// Writes `bytes` and a newline; a reader that went away (`| head`) is fine.
fn stdout_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.write_all(b"\n")) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

pub async fn put(a: PutArgs) -> anyhow::Result<()> {
    let r = a.endpoints.client()?.propose(kv::put(&a.key, &a.value)).await?;
    match kv::decode(&r.result)? {
        Response::ResponsePut(_) => println!("OK"),
        other => bail!("unexpected response {other:?}"),
    }
    Ok(())
}

pub async fn get(a: GetArgs) -> anyhow::Result<()> {
    let bytes = a.endpoints.client()?.query(kv::range(&a.key, a.prefix), a.consistency.into()).await?;
    let range = kv::expect_range(kv::decode(&bytes)?)?;
    if a.prefix {
        for kv in range.kvs {
            stdout_bytes(&kv.key)?;
            stdout_bytes(&kv.value)?;
        }
        return Ok(());
    }
    match range.kvs.first() {
        Some(kv) => stdout_bytes(&kv.value),
        None => bail!("key {:?} not found", a.key),
    }
}

pub async fn del(a: DelArgs) -> anyhow::Result<()> {
    let r = a.endpoints.client()?.propose(kv::delete(&a.key, a.prefix)).await?;
    match kv::decode(&r.result)? {
        Response::ResponseDeleteRange(d) => println!("{}", d.deleted),
        other => bail!("unexpected response {other:?}"),
    }
    Ok(())
}

pub async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let s = a.endpoints.client()?.status().await?;
    let plugin = s.plugin.unwrap_or_default();
    let leader = if s.leader_id == 0 { "none".to_string() } else { s.leader_id.to_string() };
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
    if !s.fatal.is_empty() {
        text.push_str(&format!("\nFATAL:    {}", s.fatal));
    }
    stdout_bytes(text.as_bytes())
}

fn input(text: Option<String>, stdin: bool) -> anyhow::Result<Vec<u8>> {
    match (text, stdin) {
        (Some(t), false) => Ok(t.into_bytes()),
        (None, true) => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).context("reading standard input")?;
            Ok(buf)
        }
        (Some(_), true) => bail!("give the input as an argument or with --stdin, not both"),
        (None, false) => Ok(Vec::new()),
    }
}

pub async fn propose(a: ProposeArgs) -> anyhow::Result<()> {
    let r = a.endpoints.client()?.propose(input(a.command, a.stdin)?).await?;
    stdout_bytes(&r.result)
}

pub async fn query(a: QueryArgs) -> anyhow::Result<()> {
    let bytes = a.endpoints.client()?.query(input(a.request, a.stdin)?, a.consistency.into()).await?;
    stdout_bytes(&bytes)
}

/// Prints `PUT key value` / `DELETE key` lines, one per event, like etcdctl.
pub async fn watch(a: WatchArgs) -> anyhow::Result<()> {
    use prost::Message;
    use wasmraft_proto::mvccpb::{Event, event::EventType};
    let mut stream = a.endpoints.client()?.watch(a.prefix.into_bytes()).await?;
    while let Some(item) = stream.message().await? {
        let ev = Event::decode(item.payload.as_slice()).context("event is not an mvccpb.Event (KV plugin?)")?;
        let kv = ev.kv.unwrap_or_default();
        let line = match EventType::try_from(ev.r#type) {
            Ok(EventType::Put) => format!("PUT {} {}", String::from_utf8_lossy(&kv.key), String::from_utf8_lossy(&kv.value)),
            _ => format!("DELETE {}", String::from_utf8_lossy(&kv.key)),
        };
        stdout_bytes(line.as_bytes())?;
    }
    Ok(())
}

/// An admin client of the first endpoint that answers.
async fn admin(endpoints: &Endpoints) -> anyhow::Result<AdminClient<tonic::transport::Channel>> {
    let mut last = None;
    for e in &endpoints.endpoints {
        let uri = if e.contains("://") { e.clone() } else { format!("http://{e}") };
        match AdminClient::connect(uri).await {
            Ok(c) => return Ok(c),
            Err(err) => last = Some(format!("{e}: {err}")),
        }
    }
    bail!("cannot reach any endpoint ({})", last.unwrap_or_default())
}

pub async fn members(a: StatusArgs) -> anyhow::Result<()> {
    let r = admin(&a.endpoints).await?.members(MembersRequest {}).await?.into_inner();
    let mut text = format!("{:<6} {:<15} {:<24} {}", "ID", "ROLE", "ADDRESS", "MATCHED");
    for m in r.members {
        let role = if m.id == r.leader_id { format!("{} (leader)", m.role) } else { m.role };
        text.push_str(&format!("\n{:<6} {:<15} {:<24} {}", m.id, role, m.address, m.matched));
    }
    stdout_bytes(text.as_bytes())
}

pub async fn transfer_leader(a: TransferArgs) -> anyhow::Result<()> {
    admin(&a.endpoints).await?.transfer_leader(TransferLeaderRequest { to: a.id }).await?;
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
    use wasmraft_proto::v1::membership_changes_client::MembershipChangesClient;
    use wasmraft_proto::v1::{AddLearnerRequest, MemberRequest};
    let endpoints = match &c {
        MemberCommand::AddLearner { endpoints, .. } | MemberCommand::Promote { endpoints, .. } | MemberCommand::Remove { endpoints, .. } => endpoints,
    };
    let mut client = None;
    for e in &endpoints.endpoints {
        let uri = if e.contains("://") { e.clone() } else { format!("http://{e}") };
        if let Ok(c) = MembershipChangesClient::connect(uri).await {
            client = Some(c);
            break;
        }
    }
    let mut client = client.context("cannot reach any endpoint")?;
    match c {
        MemberCommand::AddLearner { id, address, .. } => {
            client.add_learner(AddLearnerRequest { id, address }).await?;
            println!("node {id} added as a learner");
        }
        MemberCommand::Promote { id, .. } => {
            client.promote(MemberRequest { id }).await?;
            println!("node {id} is a voter");
        }
        MemberCommand::Remove { id, .. } => {
            client.remove(MemberRequest { id }).await?;
            println!("node {id} removed");
        }
    }
    Ok(())
}
