//! A follower forwards client requests to the leader it knows of, so that
//! clients (etcd's among them) may call any node.
//!
//! Requests go to the leader's client port, at the address the leader
//! advertised over its peer streams, over TLS with this node's own
//! certificate when TLS is on. Admin requests are forwarded only when
//! identities are not checked: otherwise the leader could not tell the
//! admin who called from the node that forwarded, so the follower answers
//! "not the leader" and the client goes to the leader itself.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use wasmraft_node::{Error, Node};
use wasmraft_proto::v1::client_client::ClientClient;

use crate::auth::Admins;
use crate::peer::PeerBook;

/// Metadata on a request one node forwarded to another.
pub(crate) const FORWARDED: &str = "wasmraft-forwarded";

/// Whether another node forwarded `request` (it is then never passed on).
pub(crate) fn is_forwarded<T>(request: &tonic::Request<T>) -> bool {
    request.metadata().contains_key(FORWARDED)
}

/// `message` as a request marked forwarded.
pub(crate) fn forwarded<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(FORWARDED, "1".parse().expect("ascii"));
    request
}

/// Member addresses and cached connections to the other nodes' client APIs.
#[derive(Clone, Debug)]
pub struct Forwarder {
    node: Node,
    /// Peer addresses from the configuration.
    configured: Arc<BTreeMap<u64, String>>,
    book: Arc<PeerBook>,
    tls: Option<ClientTlsConfig>,
    admins: Admins,
    channels: Arc<Mutex<HashMap<u64, (String, Channel)>>>,
}

impl Forwarder {
    /// Forwards for `node`; `configured` maps members to peer addresses
    /// from the configuration (the log's addresses win), `book` holds the
    /// client addresses peers advertise.
    pub fn new(
        node: Node,
        configured: BTreeMap<u64, String>,
        book: Arc<PeerBook>,
        tls: Option<ClientTlsConfig>,
        admins: Admins,
    ) -> Self {
        Self {
            node,
            configured: Arc::new(configured),
            book,
            tls,
            admins,
            channels: Arc::default(),
        }
    }

    /// The admin policy of this node.
    pub fn admins(&self) -> &Admins {
        &self.admins
    }

    /// What this node heard from its peers.
    pub fn book(&self) -> &Arc<PeerBook> {
        &self.book
    }

    /// Whether this node's client and peer ports speak TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The peer (Raft) address of member `id`, from the log or the
    /// configuration.
    pub fn peer_address(&self, id: u64) -> Option<String> {
        if id == self.node.id() {
            return Some(self.book.own_peer_address.clone());
        }
        self.node
            .addresses()
            .get(&id)
            .cloned()
            .or_else(|| self.configured.get(&id).cloned())
    }

    /// The client address member `id` advertised, if it did.
    pub fn client_address(&self, id: u64) -> Option<String> {
        if id == self.node.id() {
            return Some(self.book.own_client_address.clone());
        }
        self.book.client_addresses.read().get(&id).cloned()
    }

    /// A channel to node `id`'s client port, if its address is known.
    pub fn channel(&self, id: u64) -> Option<Channel> {
        let addr = self.client_address(id)?;
        if let Some((cached, channel)) = self.channels.lock().get(&id) {
            if *cached == addr {
                return Some(channel.clone());
            }
        }
        let mut endpoint = Endpoint::from_shared(crate::tls::uri(&addr, self.tls.is_some()))
            .ok()?
            .connect_timeout(std::time::Duration::from_secs(1))
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).ok()?;
        }
        let channel = endpoint.connect_lazy();
        self.channels.lock().insert(id, (addr, channel.clone()));
        Some(channel)
    }

    /// A client of node `id`'s client API, if its address is known.
    pub fn client(&self, id: u64) -> Option<ClientClient<Channel>> {
        Some(ClientClient::new(self.channel(id)?).max_decoding_message_size(64 << 20))
    }

    /// Where to forward an admin request that failed with `e`: the
    /// leader's channel, if `e` names another node as leader and admin
    /// requests may be forwarded at all.
    /// A request that was itself `forwarded` is never passed on again.
    pub fn admin_leader(&self, e: &Error, forwarded: bool) -> Option<Channel> {
        let Error::NotLeader { leader: Some(l) } = e else {
            return None;
        };
        if l.0 == self.node.id() || self.admins.checked() || forwarded {
            return None;
        }
        self.channel(l.0)
    }
}
