//! A follower forwards client proposals to the leader it knows of, so that
//! clients (etcd's among them) may call any node.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint};
use wasmraft_proto::v1::client_client::ClientClient;

/// Cached connections to the other nodes' client APIs.
#[derive(Clone, Debug)]
pub struct Forwarder {
    node: wasmraft_node::Node,
    addresses: Arc<BTreeMap<u64, String>>,
    clients: Arc<Mutex<HashMap<u64, ClientClient<Channel>>>>,
}

impl Forwarder {
    /// Forwards to the nodes at `addresses` (id -> `host:port`), and to
    /// members whose address `node` learned from the log.
    pub fn new(node: wasmraft_node::Node, addresses: BTreeMap<u64, String>) -> Self {
        Self { node, addresses: Arc::new(addresses), clients: Arc::default() }
    }

    /// The address of member `id`, from the log or the configuration.
    pub fn address(&self, id: u64) -> Option<String> {
        self.node.addresses().get(&id).cloned().or_else(|| self.addresses.get(&id).cloned())
    }

    /// A client of node `id`'s API, if its address is known.
    pub fn client(&self, id: u64) -> Option<ClientClient<Channel>> {
        if let Some(c) = self.clients.lock().get(&id) {
            return Some(c.clone());
        }
        let addr = self.address(id)?;
        let uri = if addr.contains("://") { addr.clone() } else { format!("http://{addr}") };
        let channel = Endpoint::from_shared(uri)
            .ok()?
            .connect_timeout(Duration::from_secs(1))
            .tcp_nodelay(true)
            .connect_lazy();
        let client = ClientClient::new(channel).max_decoding_message_size(64 << 20);
        self.clients.lock().insert(id, client.clone());
        Some(client)
    }
}
