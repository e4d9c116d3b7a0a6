//! A follower forwards client proposals to the leader it knows of, so that
//! clients (etcd's among them) may call any node.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tonic::transport::{Channel, Endpoint};
use wasmraft_proto::v1::client_client::ClientClient;

/// Cached connections to the other nodes' client APIs.
#[derive(Clone, Debug, Default)]
pub struct Forwarder {
    addresses: Arc<BTreeMap<u64, String>>,
    clients: Arc<Mutex<HashMap<u64, ClientClient<Channel>>>>,
}

impl Forwarder {
    /// Forwards to the nodes at `addresses` (id -> `host:port`).
    pub fn new(addresses: BTreeMap<u64, String>) -> Self {
        Self { addresses: Arc::new(addresses), clients: Arc::default() }
    }

    /// A client of node `id`'s API, if its address is known.
    pub fn client(&self, id: u64) -> Option<ClientClient<Channel>> {
        if let Some(c) = self.clients.lock().get(&id) {
            return Some(c.clone());
        }
        let addr = self.addresses.get(&id)?;
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
