use tonic::transport::Channel;
use tonic::{Request, Response, Status};
use wasmraft_node::{Error, MAX_PLUGIN_BYTES, Node};
use wasmraft_proto::v1::plugins_client::PluginsClient;
use wasmraft_proto::v1::plugins_server::Plugins;
use wasmraft_proto::v1::{
    CheckHashesRequest, CheckHashesResponse, DeployRequest, DeployResponse, PluginInfo,
    PluginInfoRequest, PluginInfoResponse,
};

use crate::forward::Forwarder;
use crate::status::to_status;

/// The largest request the service accepts: the largest plugin, and room
/// for the message around it.
pub(crate) const MAX_REQUEST_BYTES: usize = MAX_PLUGIN_BYTES + (1 << 20);

/// The `wasmraft.v1.Plugins` service of one node.
#[derive(Clone, Debug)]
pub struct PluginService {
    node: Node,
    addresses: Forwarder,
}

impl PluginService {
    /// Serves `node`; `addresses` resolves the leader's id to its address.
    pub fn new(node: Node, addresses: Forwarder) -> Self {
        Self { node, addresses }
    }

    /// The leader's client, when this node is not the leader and admin
    /// requests may be forwarded.
    fn leader(&self, e: &Error, forwarded: bool) -> Option<PluginsClient<Channel>> {
        let channel = self.addresses.admin_leader(e, forwarded)?;
        Some(PluginsClient::new(channel).max_encoding_message_size(MAX_REQUEST_BYTES))
    }
}

fn info(p: wasmraft_node::PluginInfo) -> PluginInfo {
    PluginInfo {
        name: p.name,
        version: p.version,
        sdk_version: p.sdk_version,
        sha256: p.sha256,
    }
}

#[tonic::async_trait]
impl Plugins for PluginService {
    async fn deploy(&self, r: Request<DeployRequest>) -> Result<Response<DeployResponse>, Status> {
        self.addresses.admins().require(&r, "plugin deploy")?;
        let forwarded = crate::forward::is_forwarded(&r);
        let r = r.into_inner();
        let (node, book) = (self.node.clone(), self.addresses.book().clone());
        let every_host_runs_it = move |plugin: &wasmraft_node::PluginInfo| {
            let status = node.status();
            // A follower forwards the deploy; the leader, which hears from
            // every member, checks.
            if status.role != wasmraft_node::Role::Leader {
                return Ok(());
            }
            let members = status.membership.members().into_iter().map(|id| id.0);
            match book.lacking_contract(members, node.id(), &plugin.contract) {
                None => Ok(()),
                Some(id) => Err(Error::Rejected(format!(
                    "node {id} has not shown that it runs wasmraft:plugin@{} plugins (an older wasmraft, or not heard from \
                     yet); it could not apply this deploy: upgrade every node, then deploy",
                    plugin.contract
                ))),
            }
        };
        match self.node.deploy_plugin_where(r.wasm.clone(), r.force, every_host_runs_it).await {
            Ok((plugin, deployed_at)) => Ok(Response::new(DeployResponse {
                plugin: Some(info(plugin)),
                deployed_at,
            })),
            Err(e) => match self.leader(&e, forwarded) {
                Some(mut client) => client.deploy(crate::forward::forwarded(r)).await,
                None => Err(to_status(e)),
            },
        }
    }

    async fn info(
        &self,
        _r: Request<PluginInfoRequest>,
    ) -> Result<Response<PluginInfoResponse>, Status> {
        let (plugin, deployed_at) = self.node.plugin();
        Ok(Response::new(PluginInfoResponse {
            migrates: plugin.migrates,
            wasi: plugin.wasi,
            contract: plugin.contract.clone(),
            plugin: Some(info(plugin)),
            deployed_at,
        }))
    }

    async fn check_hashes(
        &self,
        r: Request<CheckHashesRequest>,
    ) -> Result<Response<CheckHashesResponse>, Status> {
        self.addresses.admins().require(&r, "a hash check")?;
        let forwarded = crate::forward::is_forwarded(&r);
        match self.node.check_hashes().await {
            Ok(index) => Ok(Response::new(CheckHashesResponse { index })),
            Err(e) => match self.leader(&e, forwarded) {
                Some(mut client) => client.check_hashes(crate::forward::forwarded(r.into_inner())).await,
                None => Err(to_status(e)),
            },
        }
    }
}
