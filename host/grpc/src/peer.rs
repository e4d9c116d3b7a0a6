//! Cluster identity on the peer port.
//!
//! Every Raft stream and snapshot stream a node opens carries, as gRPC
//! metadata, the cluster id, the sender's id, the id of the node it is
//! meant for, and the sender's client address. The receiver checks them
//! before anything reaches the Raft core (as etcd checks
//! `X-Etcd-Cluster-ID` on every peer request): a stream from another
//! cluster, for another node, or from a node that is not a member is
//! refused, counted, and logged at most once a second. A refusal of a
//! non-member by a leader says so (with the leader's term), so that a
//! removed node learns it was removed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tonic::Status;
use tonic::metadata::MetadataMap;
use wasmraft_node::{Node, Role, format_cluster_id};

/// The cluster id, 16 hex digits.
pub const CLUSTER_ID: &str = "wasmraft-cluster-id";
/// The sender's node id.
pub const FROM: &str = "wasmraft-from";
/// The node id the stream is meant for.
pub const TO: &str = "wasmraft-to";
/// The sender's client address, so that its peers can show it and forward
/// client requests to it.
pub const CLIENT_ADDRESS: &str = "wasmraft-client-address";
/// Why a stream was refused: `wrong-cluster`, `wrong-target`,
/// `not-a-member`, `bad-sender`, `stale-snapshot`.
pub const REFUSAL: &str = "wasmraft-refusal";
/// On a `not-a-member` refusal by a leader: the leader's term.
pub const LEADER_TERM: &str = "wasmraft-leader-term";
/// The `wasmraft:plugin` contract versions the sender's host runs, comma
/// separated. A sender that says nothing (an older host) runs 0.1.0 only.
pub const CONTRACTS: &str = "wasmraft-contracts";

/// What [`CONTRACTS`] says of this host.
fn own_contracts() -> String {
    [wasmraft_node::CONTRACT_V1, wasmraft_node::CONTRACT_V2].join(",")
}

/// Why a peer stream or message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It names another cluster (or none).
    WrongCluster,
    /// It is meant for another node id.
    WrongTarget,
    /// Its sender is not a member of this node's configuration.
    NotAMember,
    /// A message's sender differs from the stream's, or ids are missing.
    BadSender,
    /// A snapshot not from the current leader, or not ahead of this node.
    StaleSnapshot,
}

impl Refusal {
    /// The name in [`REFUSAL`] metadata and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::WrongCluster => "wrong-cluster",
            Refusal::WrongTarget => "wrong-target",
            Refusal::NotAMember => "not-a-member",
            Refusal::BadSender => "bad-sender",
            Refusal::StaleSnapshot => "stale-snapshot",
        }
    }

    const ALL: [Refusal; 5] = [
        Refusal::WrongCluster,
        Refusal::WrongTarget,
        Refusal::NotAMember,
        Refusal::BadSender,
        Refusal::StaleSnapshot,
    ];
}

/// Counts of refused peer streams and messages, by reason.
#[derive(Debug)]
pub struct Refusals {
    counts: [AtomicU64; 5],
    /// When each reason was last logged: at most one line a second each.
    last_log: Mutex<[Option<Instant>; 5]>,
}

/// Refused peer traffic of this process (every node in it).
pub static REFUSALS: Refusals = Refusals {
    counts: [
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ],
    last_log: parking_lot::const_mutex([None; 5]),
};

impl Refusals {
    fn record(&self, refusal: Refusal, detail: &str) {
        let i = Refusal::ALL
            .iter()
            .position(|r| *r == refusal)
            .expect("listed");
        let total = self.counts[i].fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let mut last_log = self.last_log.lock();
        let last = &mut last_log[i];
        if last.is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1)) {
            *last = Some(now);
            tracing::warn!(
                reason = refusal.name(),
                detail,
                refused_so_far = total,
                "refused peer traffic"
            );
        }
    }

    /// `(reason, count)` for every reason.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        Refusal::ALL
            .iter()
            .zip(&self.counts)
            .map(|(r, c)| (r.name(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

/// What a node knows of its peers beyond the log: where it serves clients
/// and where its peers do (as they advertise it), and the cluster id its
/// outgoing streams carry.
#[derive(Debug, Default)]
pub struct PeerBook {
    /// The cluster id (0 until a joining node first hears from its cluster).
    pub cluster_id: AtomicU64,
    /// This node's client address, advertised to its peers.
    pub own_client_address: String,
    /// This node's peer address.
    pub own_peer_address: String,
    /// Peers' client addresses, as each advertised its own.
    pub client_addresses: RwLock<BTreeMap<u64, String>>,
    /// The plugin contracts each peer's host runs, as it advertised them on
    /// its streams to this node.
    pub contracts: RwLock<BTreeMap<u64, String>>,
    /// Whether peers are authenticated (mutual TLS with the cluster CA):
    /// then any node of the cluster may speak, and only removed ids are
    /// refused; without, only members of the committed configuration.
    pub authenticated: bool,
}

impl PeerBook {
    /// A book for a node serving clients at `client` and peers at `peer`,
    /// its peers `authenticated` by mutual TLS or not.
    pub fn new(client: String, peer: String, authenticated: bool) -> Arc<Self> {
        Arc::new(Self {
            own_client_address: client,
            own_peer_address: peer,
            authenticated,
            ..Default::default()
        })
    }

    /// The metadata of a stream from `from` to `to`.
    pub fn stream_metadata(&self, from: u64, to: u64) -> MetadataMap {
        let mut md = MetadataMap::new();
        let cluster = self.cluster_id.load(Ordering::Acquire);
        if let Ok(v) = format_cluster_id(cluster).parse() {
            md.insert(CLUSTER_ID, v);
        }
        md.insert(FROM, from.to_string().parse().expect("digits"));
        md.insert(TO, to.to_string().parse().expect("digits"));
        if let Ok(v) = self.own_client_address.parse() {
            md.insert(CLIENT_ADDRESS, v);
        }
        md.insert(CONTRACTS, own_contracts().parse().expect("ASCII"));
        md
    }

    /// The first of `members` (this node aside) whose host has not shown
    /// that it runs plugins of `contract`: a host that could not load a
    /// deployed plugin would refuse the deploy its peers apply, and diverge.
    /// Only a leader hears from every member.
    pub fn lacking_contract(&self, members: impl IntoIterator<Item = u64>, me: u64, contract: &str) -> Option<u64> {
        if contract == wasmraft_node::CONTRACT_V1 {
            return None;
        }
        let known = self.contracts.read();
        members.into_iter().filter(|&id| id != me).find(|id| {
            !known.get(id).is_some_and(|list| list.split(',').any(|c| c == contract))
        })
    }

    /// Checks a peer stream's metadata for `node`; returns the sender's id.
    /// A node that has no cluster id yet (joining) takes the stream's.
    /// `certificate_cn` is the common name of the sender's certificate: one
    /// of the form `wasmraft-node-N` (as `wasmraft certs init` issues) may
    /// only speak as node N.
    pub fn admit(
        &self,
        node: &Node,
        md: &MetadataMap,
        certificate_cn: Option<&str>,
    ) -> Result<u64, Status> {
        let text = |key: &str| {
            md.get(key)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let claimed = text(CLUSTER_ID)
            .and_then(|c| u64::from_str_radix(&c, 16).ok())
            .unwrap_or(0);
        let ours = match node.cluster_id() {
            Some(id) => id,
            None => match node.adopt_cluster_id(claimed) {
                Ok(true) => {
                    self.cluster_id.store(claimed, Ordering::Release);
                    claimed
                }
                _ => 0,
            },
        };
        if claimed == 0 || claimed != ours {
            return Err(self.refuse(
                Refusal::WrongCluster,
                &format!(
                    "cluster {} (this is {})",
                    format_cluster_id(claimed),
                    format_cluster_id(ours)
                ),
            ));
        }
        let (Some(from), Some(to)) = (
            text(FROM).and_then(|f| f.parse::<u64>().ok()),
            text(TO).and_then(|t| t.parse::<u64>().ok()),
        ) else {
            return Err(self.refuse(Refusal::BadSender, "sender or target id missing"));
        };
        if to != node.id() {
            return Err(self.refuse(
                Refusal::WrongTarget,
                &format!("for node {to} (this is node {})", node.id()),
            ));
        }
        if let Some(bound) = certificate_cn.and_then(|cn| cn.strip_prefix("wasmraft-node-")) {
            if bound != from.to_string() {
                return Err(self.refuse(
                    Refusal::BadSender,
                    &format!("the certificate of wasmraft-node-{bound} speaking as node {from}"),
                ));
            }
        }
        self.check_member(node, from)?;
        let contracts = text(CONTRACTS).filter(|c| c.len() < 256).unwrap_or_default();
        if self.contracts.read().get(&from) != Some(&contracts) {
            self.contracts.write().insert(from, contracts);
        }
        if let Some(address) = text(CLIENT_ADDRESS).filter(|a| !a.is_empty() && a.len() < 256) {
            let mut book = self.client_addresses.write();
            if book.get(&from) != Some(&address) {
                book.insert(from, address);
            }
        }
        Ok(from)
    }

    /// Refuses `from` if it was removed from the cluster, and, without
    /// authenticated peers, unless it is a member of `node`'s committed
    /// configuration. A leader's refusal of a removed id carries the
    /// leader's term: the sender learns it was removed.
    pub fn check_member(&self, node: &Node, from: u64) -> Result<(), Status> {
        if from == 0 || from == node.id() {
            return Err(self.refuse(Refusal::BadSender, &format!("sender id {from}")));
        }
        if node.was_removed(from) {
            let mut status = self.refuse(
                Refusal::NotAMember,
                &format!("node {from} was removed from the cluster"),
            );
            let st = node.status();
            if st.role == Role::Leader {
                status
                    .metadata_mut()
                    .insert(LEADER_TERM, st.term.to_string().parse().expect("digits"));
            }
            return Err(status);
        }
        // With mutual TLS, a certificate from the cluster CA proves a node
        // of this cluster: one this node has not seen added yet (it lags)
        // must still reach it.
        if self.authenticated || node.is_member(from) {
            return Ok(());
        }
        Err(self.refuse(Refusal::NotAMember, &format!("node {from} is not a member")))
    }

    /// Counts and logs a refusal; the status to answer with.
    pub fn refuse(&self, refusal: Refusal, detail: &str) -> Status {
        REFUSALS.record(refusal, detail);
        let mut status =
            Status::permission_denied(format!("refused: {} ({detail})", refusal.name()));
        status
            .metadata_mut()
            .insert(REFUSAL, refusal.name().parse().expect("ascii"));
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_contract_past_0_1_0_needs_every_other_member_to_have_shown_it() {
        let book = PeerBook::new(String::new(), String::new(), false);
        let v2 = wasmraft_node::CONTRACT_V2;
        // Nothing heard: only 0.1.0 plugins may go.
        assert_eq!(book.lacking_contract([1, 2, 3], 1, wasmraft_node::CONTRACT_V1), None);
        assert_eq!(book.lacking_contract([1, 2, 3], 1, v2), Some(2));
        // Node 2 runs this host; node 3 is older and says nothing.
        book.contracts.write().insert(2, own_contracts());
        book.contracts.write().insert(3, String::new());
        assert_eq!(book.lacking_contract([1, 2, 3], 1, v2), Some(3));
        book.contracts.write().insert(3, "0.1.0,0.2.0".into());
        assert_eq!(book.lacking_contract([1, 2, 3], 1, v2), None);
        assert_eq!(book.lacking_contract([1, 2, 3, 4], 1, v2), Some(4), "a member never heard from");
        assert_eq!(book.lacking_contract([1, 2, 3], 1, "0.20.0"), Some(2), "versions match whole");
    }
}
